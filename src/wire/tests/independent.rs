//! Our ITCH encoder's output decoded by two independent parsers, field by field:
//! `itchy` 0.3.4 (nom) and `itch5` 0.1.5 (zerocopy). Both support all 16 types bourse models.
//!
//! itchy maps code letters to enums strictly, so messages come from the `Realistic` strategy
//! (codes from the published tables); its Issue Classification / Sub-Type enums are compared
//! through itch5 only (their itchy letter tables are crate-private).

use super::arb::{self, Codes};
use super::roundtrip_cases;
use crate::wire::itch::{Body, Message, binary_file, kind};
use proptest::prelude::*;
use proptest::strategy::ValueTree;
use proptest::test_runner::TestRunner;
use std::collections::BTreeSet;
use std::ops::ControlFlow;

fn binary_file_image(messages: &[Message]) -> Vec<u8> {
    let mut out = Vec::new();
    let mut record = [0u8; 64];
    for m in messages {
        let n = binary_file::write_message(&mut record, m);
        out.extend_from_slice(&record[..n]);
    }
    out
}

/// One message of each modelled type, drawn from the realistic strategy (deterministic seed).
fn one_of_each_type() -> Vec<Message> {
    let mut runner = TestRunner::deterministic();
    let strategy = arb::itch_message(Codes::Realistic);
    let mut seen = BTreeSet::new();
    let mut out = Vec::new();
    for _ in 0..100_000 {
        let m = strategy.new_tree(&mut runner).expect("value").current();
        if seen.insert(m.body.kind()) {
            out.push(m);
        }
        if seen.len() == 16 {
            return out;
        }
    }
    panic!("strategy did not produce all 16 types: {seen:?}");
}

// ---------------------------------------------------------------------------------------------
// itchy

fn itchy_side(b: u8) -> itchy::Side {
    match b {
        b'B' => itchy::Side::Buy,
        b'S' => itchy::Side::Sell,
        other => panic!("side {other}"),
    }
}

fn itchy_cross(b: u8) -> itchy::CrossType {
    use itchy::CrossType::*;
    match b {
        b'O' => Opening,
        b'C' => Closing,
        b'H' => IpoOrHalted,
        b'I' => Intraday,
        b'A' => ExtendedTradingClose,
        other => panic!("cross type {other}"),
    }
}

fn yn(b: u8) -> bool {
    b == b'Y'
}

fn yn_space(b: u8) -> Option<bool> {
    (b != b' ').then_some(b == b'Y')
}

fn check_itchy_stock_directory(
    ours: &crate::wire::itch::StockDirectory,
    theirs: &itchy::StockDirectory,
) {
    use itchy::{FinancialStatus as F, LuldRefPriceTier as L, MarketCategory as M};
    let category = match ours.market_category {
        b'Q' => M::NasdaqGlobalSelect,
        b'G' => M::NasdaqGlobalMarket,
        b'S' => M::NasdaqCapitalMarket,
        b'N' => M::Nyse,
        b'A' => M::NyseMkt,
        b'P' => M::NyseArca,
        b'Z' => M::BatsZExchange,
        b'V' => M::InvestorsExchange,
        _ => M::Unavailable,
    };
    let status = match ours.financial_status {
        b'N' => F::Normal,
        b'D' => F::Deficient,
        b'E' => F::Delinquent,
        b'Q' => F::Bankrupt,
        b'S' => F::Suspended,
        b'G' => F::DeficientBankrupt,
        b'H' => F::DeficientDelinquent,
        b'J' => F::DelinquentBankrupt,
        b'K' => F::DeficientDelinquentBankrupt,
        b'C' => F::EtpSuspended,
        _ => F::Unavailable,
    };
    let tier = match ours.luld_tier {
        b'1' => L::Tier1,
        b'2' => L::Tier2,
        _ => L::Na,
    };
    assert_eq!(theirs.stock.as_bytes(), &ours.stock.0);
    assert_eq!(theirs.market_category, category);
    assert_eq!(theirs.financial_status, status);
    assert_eq!(theirs.round_lot_size, ours.round_lot_size);
    assert_eq!(theirs.round_lots_only, yn(ours.round_lots_only));
    assert_eq!(theirs.authenticity, ours.authenticity == b'P');
    assert_eq!(
        theirs.short_sale_threshold,
        yn_space(ours.short_sale_threshold)
    );
    assert_eq!(theirs.ipo_flag, yn_space(ours.ipo_flag));
    assert_eq!(theirs.luld_ref_price_tier, tier);
    assert_eq!(theirs.etp_flag, yn_space(ours.etp_flag));
    assert_eq!(theirs.etp_leverage_factor, ours.etp_leverage);
    assert_eq!(theirs.inverse_indicator, yn(ours.inverse));
}

/// Compare one of our messages with itchy's decoding of its bytes, field by field.
fn check_itchy(ours: &Message, theirs: &itchy::Message) {
    use itchy::Body as I;
    assert_eq!(theirs.tag, ours.body.kind());
    assert_eq!(theirs.stock_locate, ours.header.locate);
    assert_eq!(theirs.tracking_number, ours.header.tracking);
    assert_eq!(theirs.timestamp, ours.header.timestamp.0);
    match (&ours.body, &theirs.body) {
        (Body::SystemEvent { event }, I::SystemEvent { event: e }) => {
            use itchy::EventCode::*;
            let want = match event {
                b'O' => StartOfMessages,
                b'S' => StartOfSystemHours,
                b'Q' => StartOfMarketHours,
                b'M' => EndOfMarketHours,
                b'E' => EndOfSystemHours,
                _ => EndOfMessages,
            };
            assert_eq!(*e, want);
        }
        (Body::StockDirectory(d), I::StockDirectory(t)) => check_itchy_stock_directory(d, t),
        (
            Body::TradingAction {
                stock,
                state,
                reason,
                ..
            },
            I::TradingAction {
                stock: s,
                trading_state,
                reason: r,
            },
        ) => {
            use itchy::TradingState::*;
            let want = match state {
                b'H' => Halted,
                b'P' => Paused,
                b'Q' => QuotationOnly,
                _ => Trading,
            };
            assert_eq!(
                (s.as_bytes(), *trading_state, r.as_bytes()),
                (&stock.0[..], want, &reason[..])
            );
        }
        (
            Body::RegSho { stock, action },
            I::RegShoRestriction {
                stock: s,
                action: a,
            },
        ) => {
            use itchy::RegShoAction::*;
            let want = match action {
                b'0' => None,
                b'1' => Intraday,
                _ => Extant,
            };
            assert_eq!((s.as_bytes(), *a), (&stock.0[..], want));
        }
        (
            Body::ParticipantPosition {
                mpid,
                stock,
                primary,
                mode,
                state,
            },
            I::ParticipantPosition(p),
        ) => {
            use itchy::{MarketMakerMode as M, MarketParticipantState as P};
            let want_mode = match mode {
                b'N' => M::Normal,
                b'P' => M::Passive,
                b'S' => M::Syndicate,
                b'R' => M::Presyndicate,
                _ => M::Penalty,
            };
            let want_state = match state {
                b'A' => P::Active,
                b'E' => P::Excused,
                b'W' => P::Withdrawn,
                b'S' => P::Suspended,
                _ => P::Deleted,
            };
            assert_eq!(p.mpid.as_bytes(), &mpid.0);
            assert_eq!(p.stock.as_bytes(), &stock.0);
            assert_eq!(p.primary_market_maker, yn(*primary));
            assert_eq!(
                (p.market_maker_mode, p.market_participant_state),
                (want_mode, want_state)
            );
        }
        (
            Body::AddOrder {
                order_ref,
                side,
                shares,
                stock,
                price,
            },
            I::AddOrder(a),
        ) => {
            assert_eq!(
                (a.reference, a.side, a.shares),
                (order_ref.0, itchy_side(*side), shares.0)
            );
            assert_eq!(
                (a.stock.as_bytes(), a.price.raw(), a.mpid),
                (&stock.0[..], price.0, None)
            );
        }
        (
            Body::AddOrderMpid {
                order_ref,
                side,
                shares,
                stock,
                price,
                attribution,
            },
            I::AddOrder(a),
        ) => {
            assert_eq!(
                (a.reference, a.side, a.shares),
                (order_ref.0, itchy_side(*side), shares.0)
            );
            assert_eq!((a.stock.as_bytes(), a.price.raw()), (&stock.0[..], price.0));
            assert_eq!(
                a.mpid.as_ref().map(|m| m.as_bytes()),
                Some(&attribution.0[..])
            );
        }
        (
            Body::OrderExecuted {
                order_ref,
                shares,
                match_number,
            },
            I::OrderExecuted {
                reference,
                executed,
                match_number: m,
            },
        ) => {
            assert_eq!(
                (*reference, *executed, *m),
                (order_ref.0, shares.0, match_number.0)
            );
        }
        (
            Body::OrderExecutedWithPrice {
                order_ref,
                shares,
                match_number,
                printable,
                price,
            },
            I::OrderExecutedWithPrice {
                reference,
                executed,
                match_number: m,
                printable: p,
                price: px,
            },
        ) => {
            assert_eq!(
                (*reference, *executed, *m),
                (order_ref.0, shares.0, match_number.0)
            );
            assert_eq!((*p, px.raw()), (yn(*printable), price.0));
        }
        (
            Body::OrderCancel { order_ref, shares },
            I::OrderCancelled {
                reference,
                cancelled,
            },
        ) => {
            assert_eq!((*reference, *cancelled), (order_ref.0, shares.0));
        }
        (Body::OrderDelete { order_ref }, I::DeleteOrder { reference }) => {
            assert_eq!(*reference, order_ref.0)
        }
        (
            Body::OrderReplace {
                old_ref,
                new_ref,
                shares,
                price,
            },
            I::ReplaceOrder(r),
        ) => {
            assert_eq!((r.old_reference, r.new_reference), (old_ref.0, new_ref.0));
            assert_eq!((r.shares, r.price.raw()), (shares.0, price.0));
        }
        (
            Body::Trade {
                order_ref,
                side,
                shares,
                stock,
                price,
                match_number,
            },
            I::NonCrossTrade(t),
        ) => {
            assert_eq!(
                (t.reference, t.side, t.shares),
                (order_ref.0, itchy_side(*side), shares.0)
            );
            assert_eq!((t.stock.as_bytes(), t.price.raw()), (&stock.0[..], price.0));
            assert_eq!(t.match_number, match_number.0);
        }
        (
            Body::CrossTrade {
                shares,
                stock,
                price,
                match_number,
                cross_type,
            },
            I::CrossTrade(c),
        ) => {
            assert_eq!((c.shares, c.stock.as_bytes()), (*shares, &stock.0[..]));
            assert_eq!(
                (c.cross_price.raw(), c.match_number),
                (price.0, match_number.0)
            );
            assert_eq!(c.cross_type, itchy_cross(*cross_type));
        }
        (Body::BrokenTrade { match_number }, I::BrokenTrade { match_number: m }) => {
            assert_eq!(*m, match_number.0)
        }
        (Body::Imbalance(i), I::Imbalance(t)) => {
            use itchy::ImbalanceDirection::*;
            let direction = match i.direction {
                b'B' => Buy,
                b'S' => Sell,
                b'N' => NoImbalance,
                _ => InsufficientOrders,
            };
            assert_eq!(
                (t.paired_shares, t.imbalance_shares),
                (i.paired_shares, i.imbalance_shares)
            );
            assert_eq!(
                (t.imbalance_direction, t.stock.as_bytes()),
                (direction, &i.stock.0[..])
            );
            assert_eq!(
                (
                    t.far_price.raw(),
                    t.near_price.raw(),
                    t.current_ref_price.raw()
                ),
                (i.far_price.0, i.near_price.0, i.reference_price.0)
            );
            assert_eq!(t.cross_type, itchy_cross(i.cross_type));
            assert_eq!(t.price_variation_indicator, i.price_variation as char);
        }
        (ours, theirs) => panic!("itchy decoded {ours:?} as {theirs:?}"),
    }
}

fn check_all_with_itchy(messages: &[Message]) {
    let image = binary_file_image(messages);
    let decoded: Vec<itchy::Message> = itchy::MessageStream::from_reader(&image[..])
        .map(|m| m.expect("itchy parses our bytes"))
        .collect();
    assert_eq!(decoded.len(), messages.len());
    for (ours, theirs) in messages.iter().zip(&decoded) {
        check_itchy(ours, theirs);
    }
}

// ---------------------------------------------------------------------------------------------
// itch5

/// itch5's code enums have no `PartialEq`; `Debug` of `from_byte(ours)` must equal `Debug` of
/// what it decoded (its `Unknown(u8)` variant keeps the byte, so this is exact).
fn same<T: std::fmt::Debug>(decoded: T, expected: T) {
    assert_eq!(format!("{decoded:?}"), format!("{expected:?}"));
}

struct Itch5Check<'a> {
    expected: &'a [Message],
    next: usize,
}

impl Itch5Check<'_> {
    /// The expected message for this callback, after checking its type and header.
    fn expect(
        &mut self,
        tag: u8,
        locate: u16,
        tracking: u16,
        ts: &itch5::messages::Timestamp,
    ) -> Message {
        let m = self.expected[self.next];
        self.next += 1;
        assert_eq!(
            m.body.kind(),
            tag,
            "itch5 called the handler for another type"
        );
        assert_eq!(
            (locate, tracking, ts.to_u64()),
            (m.header.locate, m.header.tracking, m.header.timestamp.0)
        );
        m
    }
}

fn sym(s: &itch5::messages::Symbol, ours: &crate::types::Symbol) {
    assert_eq!(s.to_u64(), u64::from_be_bytes(ours.0));
}

macro_rules! header {
    ($self:ident, $tag:expr, $msg:ident) => {
        $self.expect(
            $tag,
            $msg.stock_locate(),
            $msg.tracking_number(),
            $msg.timestamp(),
        )
    };
}

impl itch5::MessageHandler for Itch5Check<'_> {
    fn on_system_event(&mut self, x: &itch5::messages::SystemEvent) -> ControlFlow<()> {
        let Body::SystemEvent { event } = header!(self, kind::SYSTEM_EVENT, x).body else {
            unreachable!()
        };
        same(
            x.event_code(),
            itch5::messages::SystemEventCode::from_byte(event),
        );
        ControlFlow::Continue(())
    }
    fn on_stock_directory(&mut self, x: &itch5::messages::StockDirectory) -> ControlFlow<()> {
        use itch5::messages as t;
        let Body::StockDirectory(d) = header!(self, kind::STOCK_DIRECTORY, x).body else {
            unreachable!()
        };
        sym(x.stock(), &d.stock);
        same(
            x.market_category(),
            t::MarketCategory::from_byte(d.market_category),
        );
        same(
            x.financial_status_indicator(),
            t::FinancialStatusIndicator::from_byte(d.financial_status),
        );
        assert_eq!(x.round_lot_size(), d.round_lot_size);
        same(
            x.round_lots_only(),
            t::RoundLotsOnly::from_byte(d.round_lots_only),
        );
        same(
            x.issue_classification(),
            t::IssueClassificationCode::from_byte(d.issue_classification),
        );
        same(
            x.issue_sub_type(),
            t::IssueSubTypeCode::from_bytes(d.issue_sub_type),
        );
        let authenticity = match x.authenticity() {
            t::Authenticity::LiveProduction => b'P',
            t::Authenticity::Test => b'T',
            t::Authenticity::Unknown(b) => b,
        };
        assert_eq!(authenticity, d.authenticity);
        same(
            x.short_sale_threshold_indicator(),
            t::ShortSaleThresholdIndicator::from_byte(d.short_sale_threshold),
        );
        same(x.ipo_flag(), t::IpoFlag::from_byte(d.ipo_flag));
        same(
            x.luld_reference_price_tier(),
            t::LuldReferencePriceTier::from_byte(d.luld_tier),
        );
        same(x.etp_flag(), t::EtpFlag::from_byte(d.etp_flag));
        assert_eq!(x.etp_leverage_factor(), d.etp_leverage);
        same(
            x.inverse_indicator(),
            t::InverseIndicator::from_byte(d.inverse),
        );
        ControlFlow::Continue(())
    }
    fn on_stock_trading_action(
        &mut self,
        x: &itch5::messages::StockTradingAction,
    ) -> ControlFlow<()> {
        use itch5::messages as t;
        let Body::TradingAction {
            stock,
            state,
            reserved,
            reason,
        } = header!(self, kind::TRADING_ACTION, x).body
        else {
            unreachable!()
        };
        sym(x.stock(), &stock);
        same(x.trading_state(), t::TradingState::from_byte(state));
        assert_eq!(x.reserved(), reserved);
        let want = match state {
            b'H' => t::TradingActionReason::Halted(t::TradingHaltReason::from_bytes(&reason)),
            b'P' => t::TradingActionReason::Paused(t::TradingHaltReason::from_bytes(&reason)),
            b'Q' => t::TradingActionReason::QuotationOnly(t::TradingResumptionReason::from_bytes(
                &reason,
            )),
            b'T' => {
                t::TradingActionReason::Trading(t::TradingResumptionReason::from_bytes(&reason))
            }
            _ => t::TradingActionReason::Unknown {
                state,
                reason_bytes: reason,
            },
        };
        same(x.reason(), want);
        ControlFlow::Continue(())
    }
    fn on_reg_sho_restriction(
        &mut self,
        x: &itch5::messages::RegSHORestriction,
    ) -> ControlFlow<()> {
        let m = self.expect(
            kind::REG_SHO,
            x.locate_code(),
            x.tracking_number(),
            x.timestamp(),
        );
        let Body::RegSho { stock, action } = m.body else {
            unreachable!()
        };
        sym(x.stock(), &stock);
        same(
            x.reg_sho_action(),
            itch5::messages::RegShoAction::from_byte(action),
        );
        ControlFlow::Continue(())
    }
    fn on_market_participant_position(
        &mut self,
        x: &itch5::messages::MarketParticipantPosition,
    ) -> ControlFlow<()> {
        use itch5::messages as t;
        let Body::ParticipantPosition {
            mpid,
            stock,
            primary,
            mode,
            state,
        } = header!(self, kind::PARTICIPANT_POSITION, x).body
        else {
            unreachable!()
        };
        assert_eq!(x.mpid(), &mpid.0);
        sym(x.stock(), &stock);
        same(
            x.primary_market_maker(),
            t::PrimaryMarketMaker::from_byte(primary),
        );
        let decoded_mode = match x.market_maker_mode() {
            t::MarketMakerMode::Normal => b'N',
            t::MarketMakerMode::Passive => b'P',
            t::MarketMakerMode::Syndicate => b'S',
            t::MarketMakerMode::PreSyndicate => b'R',
            t::MarketMakerMode::Penalty => b'L',
            t::MarketMakerMode::Unknown(b) => b,
        };
        assert_eq!(decoded_mode, mode);
        same(
            x.market_participant_state(),
            t::MarketParticipantState::from_byte(state),
        );
        ControlFlow::Continue(())
    }
    fn on_add_order_no_mpid_attribution(
        &mut self,
        x: &itch5::messages::AddOrderNoMPIDAttribution,
    ) -> ControlFlow<()> {
        let Body::AddOrder {
            order_ref,
            side,
            shares,
            stock,
            price,
        } = header!(self, kind::ADD_ORDER, x).body
        else {
            unreachable!()
        };
        assert_eq!(
            (x.order_reference_number(), x.shares(), x.price().into_u32()),
            (order_ref.0, shares.0, price.0)
        );
        same(
            x.buy_sell_indicator(),
            itch5::messages::BuySellIndicator::from_byte(side),
        );
        sym(x.stock(), &stock);
        ControlFlow::Continue(())
    }
    fn on_add_order_with_mpid_attribution(
        &mut self,
        x: &itch5::messages::AddOrderWithMPIDAttribution,
    ) -> ControlFlow<()> {
        let Body::AddOrderMpid {
            order_ref,
            side,
            shares,
            stock,
            price,
            attribution,
        } = header!(self, kind::ADD_ORDER_MPID, x).body
        else {
            unreachable!()
        };
        assert_eq!(
            (x.order_reference_number(), x.shares(), x.price().into_u32()),
            (order_ref.0, shares.0, price.0)
        );
        same(
            x.buy_sell_indicator(),
            itch5::messages::BuySellIndicator::from_byte(side),
        );
        sym(x.stock(), &stock);
        assert_eq!(x.attribution(), &attribution.0);
        ControlFlow::Continue(())
    }
    fn on_order_executed(&mut self, x: &itch5::messages::OrderExecuted) -> ControlFlow<()> {
        let Body::OrderExecuted {
            order_ref,
            shares,
            match_number,
        } = header!(self, kind::ORDER_EXECUTED, x).body
        else {
            unreachable!()
        };
        assert_eq!(
            (
                x.order_reference_number(),
                x.executed_shares(),
                x.match_number()
            ),
            (order_ref.0, shares.0, match_number.0)
        );
        ControlFlow::Continue(())
    }
    fn on_order_executed_with_price(
        &mut self,
        x: &itch5::messages::OrderExecutedWithPrice,
    ) -> ControlFlow<()> {
        let Body::OrderExecutedWithPrice {
            order_ref,
            shares,
            match_number,
            printable,
            price,
        } = header!(self, kind::ORDER_EXECUTED_WITH_PRICE, x).body
        else {
            unreachable!()
        };
        assert_eq!(
            (
                x.order_reference_number(),
                x.executed_shares(),
                x.match_number()
            ),
            (order_ref.0, shares.0, match_number.0)
        );
        same(
            x.printable(),
            itch5::messages::Printable::from_byte(printable),
        );
        assert_eq!(x.execution_price().into_u32(), price.0);
        ControlFlow::Continue(())
    }
    fn on_order_cancel(&mut self, x: &itch5::messages::OrderCancel) -> ControlFlow<()> {
        let Body::OrderCancel { order_ref, shares } = header!(self, kind::ORDER_CANCEL, x).body
        else {
            unreachable!()
        };
        assert_eq!(
            (x.order_reference_number(), x.cancelled_shares()),
            (order_ref.0, shares.0)
        );
        ControlFlow::Continue(())
    }
    fn on_order_delete(&mut self, x: &itch5::messages::OrderDelete) -> ControlFlow<()> {
        let Body::OrderDelete { order_ref } = header!(self, kind::ORDER_DELETE, x).body else {
            unreachable!()
        };
        assert_eq!(x.order_reference_number(), order_ref.0);
        ControlFlow::Continue(())
    }
    fn on_order_replace(&mut self, x: &itch5::messages::OrderReplace) -> ControlFlow<()> {
        let Body::OrderReplace {
            old_ref,
            new_ref,
            shares,
            price,
        } = header!(self, kind::ORDER_REPLACE, x).body
        else {
            unreachable!()
        };
        assert_eq!(
            (
                x.original_order_reference_number(),
                x.new_order_reference_number()
            ),
            (old_ref.0, new_ref.0)
        );
        assert_eq!((x.shares(), x.price().into_u32()), (shares.0, price.0));
        ControlFlow::Continue(())
    }
    fn on_trade(&mut self, x: &itch5::messages::Trade) -> ControlFlow<()> {
        let Body::Trade {
            order_ref,
            side,
            shares,
            stock,
            price,
            match_number,
        } = header!(self, kind::TRADE, x).body
        else {
            unreachable!()
        };
        assert_eq!(
            (x.order_reference_number(), x.shares(), x.price().into_u32()),
            (order_ref.0, shares.0, price.0)
        );
        same(
            x.buy_sell_indicator(),
            itch5::messages::BuySellIndicator::from_byte(side),
        );
        sym(x.stock(), &stock);
        assert_eq!(x.match_number(), match_number.0);
        ControlFlow::Continue(())
    }
    fn on_cross_trade(&mut self, x: &itch5::messages::CrossTrade) -> ControlFlow<()> {
        let Body::CrossTrade {
            shares,
            stock,
            price,
            match_number,
            cross_type,
        } = header!(self, kind::CROSS_TRADE, x).body
        else {
            unreachable!()
        };
        assert_eq!(
            (x.shares(), x.cross_price().into_u32(), x.match_number()),
            (shares, price.0, match_number.0)
        );
        sym(x.stock(), &stock);
        same(
            x.cross_type(),
            itch5::messages::CrossType::from_byte(cross_type),
        );
        ControlFlow::Continue(())
    }
    fn on_broken_trade(&mut self, x: &itch5::messages::BrokenTrade) -> ControlFlow<()> {
        let Body::BrokenTrade { match_number } = header!(self, kind::BROKEN_TRADE, x).body else {
            unreachable!()
        };
        assert_eq!(x.match_number(), match_number.0);
        ControlFlow::Continue(())
    }
    fn on_net_order_imbalance_indicator(
        &mut self,
        x: &itch5::messages::NetOrderImbalanceIndicator,
    ) -> ControlFlow<()> {
        use itch5::messages as t;
        let Body::Imbalance(i) = header!(self, kind::IMBALANCE, x).body else {
            unreachable!()
        };
        assert_eq!(
            (x.paired_shares(), x.imbalance_shares()),
            (i.paired_shares, i.imbalance_shares)
        );
        same(
            x.imbalance_direction(),
            t::ImbalanceDirection::from_byte(i.direction),
        );
        sym(x.stock(), &i.stock);
        assert_eq!(
            (
                x.far_price().into_u32(),
                x.near_price().into_u32(),
                x.current_reference_price().into_u32()
            ),
            (i.far_price.0, i.near_price.0, i.reference_price.0)
        );
        same(x.cross_type(), t::CrossType::from_byte(i.cross_type));
        same(
            x.price_variation_indicator(),
            t::PriceVariationIndicator::from_byte(i.price_variation),
        );
        ControlFlow::Continue(())
    }
}

fn check_all_with_itch5(messages: &[Message]) {
    let image = binary_file_image(messages);
    let mut check = Itch5Check {
        expected: messages,
        next: 0,
    };
    itch5::Parser::new(&image)
        .parse_stream(&mut check)
        .expect("itch5 parses our bytes");
    assert_eq!(check.next, messages.len(), "itch5 skipped messages");
}

#[test]
fn every_modelled_type_decodes_with_itchy_and_itch5() {
    let messages = one_of_each_type();
    assert_eq!(messages.len(), 16);
    check_all_with_itchy(&messages);
    check_all_with_itch5(&messages);
}

#[test]
fn nasdaq_file_decodes_identically_with_itch5() {
    // Our decode of the real file, re-encoded, must read the same in itch5.
    let bytes =
        std::fs::read(super::shared_data("itch50_nasdaq_session_first1000.bin")).expect("fixture");
    let ours: Vec<Message> = binary_file::Reader::new(&bytes)
        .map(|r| Message::decode(r.unwrap()).unwrap())
        .collect();
    check_all_with_itch5(&ours);
}

fn config() -> ProptestConfig {
    ProptestConfig {
        cases: roundtrip_cases() / 4,
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn random_realistic_streams_decode_with_itchy(messages in proptest::collection::vec(arb::itch_message(Codes::Realistic), 1..64)) {
        check_all_with_itchy(&messages);
    }

    #[test]
    fn random_streams_decode_with_itch5(messages in proptest::collection::vec(arb::itch_message(Codes::Any), 1..64)) {
        // itch5 keeps unknown codes, so any byte values are fair here.
        check_all_with_itch5(&messages);
    }
}
