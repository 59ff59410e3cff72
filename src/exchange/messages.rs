//! The message builders both layouts share (the single-threaded exchange and the sharded
//! merge), so the fixed fields of DESIGN.md section 5 are written once.

use super::sink::Sink;
use super::venue::SymbolSpec;
use crate::types::{AccountId, Timestamp, Token};
use crate::wire::{itch, ouch};

/// An ITCH message about symbol index `symbol` (locate = index + 1), tracking number 0.
pub(crate) fn itch_message(symbol: u16, ts: Timestamp, body: itch::Body) -> itch::Message {
    itch::Message {
        header: itch::Header {
            locate: symbol + 1,
            tracking: 0,
            timestamp: ts,
        },
        body,
    }
}

/// A System Event (locate 0).
pub(crate) fn system_event(ts: Timestamp, event: u8) -> itch::Message {
    let header = itch::Header {
        locate: 0,
        tracking: 0,
        timestamp: ts,
    };
    itch::Message {
        header,
        body: itch::Body::SystemEvent { event },
    }
}

/// Stock Directory with the fixed values of DESIGN.md section 5.
pub(crate) fn stock_directory(spec: &SymbolSpec, symbol: u16, ts: Timestamp) -> itch::Message {
    let body = itch::Body::StockDirectory(itch::StockDirectory {
        stock: spec.symbol,
        market_category: b'Q',
        financial_status: b'N',
        round_lot_size: spec.round_lot,
        round_lots_only: b'N',
        issue_classification: b'C',
        issue_sub_type: *b"C ",
        authenticity: b'P',
        short_sale_threshold: b'N',
        ipo_flag: b'N',
        luld_tier: b'1',
        etp_flag: b'N',
        etp_leverage: 0,
        inverse: b'N',
    });
    itch_message(symbol, ts, body)
}

/// Stock Trading Action with reserved and reason fields as spaces.
pub(crate) fn trading_action(
    spec: &SymbolSpec,
    symbol: u16,
    ts: Timestamp,
    state: u8,
) -> itch::Message {
    let body = itch::Body::TradingAction {
        stock: spec.symbol,
        state,
        reserved: b' ',
        reason: *b"    ",
    };
    itch_message(symbol, ts, body)
}

/// OUCH Rejected for `token`.
pub(crate) fn reject<S: Sink>(
    ts: Timestamp,
    account: AccountId,
    token: Token,
    reason: u8,
    sink: &mut S,
) {
    let rejected = ouch::Rejected {
        timestamp: ts,
        token,
        reason,
    };
    sink.ouch(account, &ouch::Outbound::Rejected(rejected));
}
