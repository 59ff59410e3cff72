//! OUCH 4.2 messages (PROTOCOLS.md section 2) as small `Copy` structs.
//!
//! Field values that the exchange validates (side, display, capacity, ...) are kept as the raw
//! bytes received so that the core, not the decoder, decides the reject code. Decoding only
//! checks the type letter and the exact length; it never panics on any input.

use crate::types::{Firm, MatchNumber, OrderRef, Price, Shares, Symbol, Timestamp, Token};

/// Inbound Enter Order `O` (49 bytes).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct EnterOrder {
    pub token: Token,
    pub side: u8,
    pub shares: Shares,
    pub stock: Symbol,
    pub price: Price,
    pub tif: u32,
    pub firm: Firm,
    pub display: u8,
    pub capacity: u8,
    pub intermarket_sweep: u8,
    pub min_qty: Shares,
    pub cross_type: u8,
    pub customer_type: u8,
}

/// Inbound Replace Order `U` (47 bytes).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct ReplaceOrder {
    pub existing: Token,
    pub replacement: Token,
    pub shares: Shares,
    pub price: Price,
    pub tif: u32,
    pub display: u8,
    pub intermarket_sweep: u8,
    pub min_qty: Shares,
}

/// Inbound Cancel Order `X` (19 bytes). `shares` is the new intended order size.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct CancelOrder {
    pub token: Token,
    pub shares: Shares,
}

/// Inbound Modify Order `M` (20 bytes). Not offered by bourse: decoded, then ignored.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct ModifyOrder {
    pub token: Token,
    pub side: u8,
    pub shares: Shares,
}

/// Any inbound (client to exchange) OUCH 4.2 message.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Inbound {
    Enter(EnterOrder),
    Replace(ReplaceOrder),
    Cancel(CancelOrder),
    Modify(ModifyOrder),
}

/// Outbound System Event `S` (10 bytes).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct SystemEvent {
    pub timestamp: Timestamp,
    pub event: u8,
}

/// Outbound Accepted `A` (66 bytes).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct Accepted {
    pub timestamp: Timestamp,
    pub token: Token,
    pub side: u8,
    pub shares: Shares,
    pub stock: Symbol,
    pub price: Price,
    pub tif: u32,
    pub firm: Firm,
    pub display: u8,
    pub order_ref: OrderRef,
    pub capacity: u8,
    pub intermarket_sweep: u8,
    pub min_qty: Shares,
    pub cross_type: u8,
    pub order_state: u8,
    pub bbo_weight: u8,
}

/// Outbound Replaced `U` (80 bytes).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct Replaced {
    pub timestamp: Timestamp,
    pub token: Token,
    pub side: u8,
    pub shares: Shares,
    pub stock: Symbol,
    pub price: Price,
    pub tif: u32,
    pub firm: Firm,
    pub display: u8,
    pub order_ref: OrderRef,
    pub capacity: u8,
    pub intermarket_sweep: u8,
    pub min_qty: Shares,
    pub cross_type: u8,
    pub order_state: u8,
    pub previous_token: Token,
    pub bbo_weight: u8,
}

/// Outbound Canceled `C` (28 bytes).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct Canceled {
    pub timestamp: Timestamp,
    pub token: Token,
    pub decrement: Shares,
    pub reason: u8,
}

/// Outbound AIQ Canceled `D` (37 bytes).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct AiqCanceled {
    pub timestamp: Timestamp,
    pub token: Token,
    pub decrement: Shares,
    pub reason: u8,
    pub prevented: Shares,
    pub price: Price,
    pub liquidity: u8,
}

/// Outbound Executed `E` (40 bytes).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct Executed {
    pub timestamp: Timestamp,
    pub token: Token,
    pub shares: Shares,
    pub price: Price,
    pub liquidity: u8,
    pub match_number: MatchNumber,
}

/// Outbound Broken Trade `B` (32 bytes).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct BrokenTrade {
    pub timestamp: Timestamp,
    pub token: Token,
    pub match_number: MatchNumber,
    pub reason: u8,
}

/// Outbound Rejected `J` (24 bytes).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct Rejected {
    pub timestamp: Timestamp,
    pub token: Token,
    pub reason: u8,
}

/// Outbound Cancel Pending `P` / Cancel Reject `I` (23 bytes each).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct TokenOnly {
    pub timestamp: Timestamp,
    pub token: Token,
}

/// Outbound Order Priority Update `T` (36 bytes).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct PriorityUpdate {
    pub timestamp: Timestamp,
    pub token: Token,
    pub price: Price,
    pub display: u8,
    pub order_ref: OrderRef,
}

/// Outbound Order Modified `M` (28 bytes).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct OrderModified {
    pub timestamp: Timestamp,
    pub token: Token,
    pub side: u8,
    pub shares: Shares,
}

/// Any outbound (exchange to client) OUCH 4.2 message.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Outbound {
    SystemEvent(SystemEvent),
    Accepted(Accepted),
    Replaced(Replaced),
    Canceled(Canceled),
    AiqCanceled(AiqCanceled),
    Executed(Executed),
    BrokenTrade(BrokenTrade),
    Rejected(Rejected),
    CancelPending(TokenOnly),
    CancelReject(TokenOnly),
    PriorityUpdate(PriorityUpdate),
    OrderModified(OrderModified),
}

/// Order State values of Accepted / Replaced.
pub mod order_state {
    pub const LIVE: u8 = b'L';
    pub const DEAD: u8 = b'D';
}

/// Cancel reasons bourse emits (PROTOCOLS.md 2.5).
pub mod cancel_reason {
    pub const USER: u8 = b'U';
    pub const IMMEDIATE_OR_CANCEL: u8 = b'I';
    pub const TIME_IN_FORCE: u8 = b'T';
    pub const CLOSED: u8 = b'E';
    pub const SYSTEM: u8 = b'Z';
}

/// Reject reasons bourse emits (PROTOCOLS.md 2.5, DESIGN.md section 4).
pub mod reject_reason {
    pub const HALTED: u8 = b'H';
    pub const SHARES: u8 = b'Z';
    pub const STOCK: u8 = b'S';
    pub const DISPLAY: u8 = b'D';
    pub const CLOSED: u8 = b'C';
    pub const FIRM: u8 = b'L';
    pub const CROSS: u8 = b'R';
    pub const PRICE: u8 = b'X';
    pub const MIN_QTY: u8 = b'N';
    pub const OTHER: u8 = b'O';
    pub const NOTIONAL: u8 = b'n';
}

/// Liquidity flags bourse emits.
pub mod liquidity {
    pub const ADDED: u8 = b'A';
    pub const REMOVED: u8 = b'R';
    pub const HIDDEN_ADDED: u8 = b'J';
}

/// System Event codes of OUCH.
pub mod event {
    pub const START_OF_DAY: u8 = b'S';
    pub const END_OF_DAY: u8 = b'E';
}

/// Fixed lengths of the inbound messages.
pub mod inbound_len {
    pub const ENTER: usize = 49;
    pub const REPLACE: usize = 47;
    pub const CANCEL: usize = 19;
    pub const MODIFY: usize = 20;
}

impl Inbound {
    /// Decode one inbound OUCH 4.2 message (the payload of a SoupBinTCP `U` packet).
    pub fn decode(b: &[u8]) -> Result<Inbound, super::DecodeError> {
        use super::be::{array_at, u32_at};
        use crate::types::Alpha;
        let kind = *b.first().ok_or(super::DecodeError::Empty)?;
        let expected = match kind {
            b'O' => inbound_len::ENTER,
            b'U' => inbound_len::REPLACE,
            b'X' => inbound_len::CANCEL,
            b'M' => inbound_len::MODIFY,
            other => return Err(super::DecodeError::UnknownType(other)),
        };
        if b.len() != expected {
            return Err(super::DecodeError::WrongLength {
                kind,
                expected,
                actual: b.len(),
            });
        }
        let msg = match kind {
            b'O' => Inbound::Enter(EnterOrder {
                token: Alpha(array_at(b, 1)),
                side: b[15],
                shares: Shares(u32_at(b, 16)),
                stock: Alpha(array_at(b, 20)),
                price: Price(u32_at(b, 28)),
                tif: u32_at(b, 32),
                firm: Alpha(array_at(b, 36)),
                display: b[40],
                capacity: b[41],
                intermarket_sweep: b[42],
                min_qty: Shares(u32_at(b, 43)),
                cross_type: b[47],
                customer_type: b[48],
            }),
            b'U' => Inbound::Replace(ReplaceOrder {
                existing: Alpha(array_at(b, 1)),
                replacement: Alpha(array_at(b, 15)),
                shares: Shares(u32_at(b, 29)),
                price: Price(u32_at(b, 33)),
                tif: u32_at(b, 37),
                display: b[41],
                intermarket_sweep: b[42],
                min_qty: Shares(u32_at(b, 43)),
            }),
            b'X' => Inbound::Cancel(CancelOrder {
                token: Alpha(array_at(b, 1)),
                shares: Shares(u32_at(b, 15)),
            }),
            _ => Inbound::Modify(ModifyOrder {
                token: Alpha(array_at(b, 1)),
                side: b[15],
                shares: Shares(u32_at(b, 16)),
            }),
        };
        Ok(msg)
    }
}
