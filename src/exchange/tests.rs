//! One test (or more) per rule of DESIGN.md section 4 and 5.
#![allow(clippy::inconsistent_digit_grouping)] // prices written as dollars_cents

use super::*;
use crate::types::{
    AccountId, Alpha, Firm, Locate, MatchNumber, OrderRef, Price, Shares, Timestamp, Token,
};
use crate::wire::itch::{self, Body};
use crate::wire::ouch::{self, Inbound, Outbound};

const A: AccountId = AccountId(0);
const B: AccountId = AccountId(1);

fn tok(s: &str) -> Token {
    Token::from_str_padded(s).unwrap()
}

fn px(dollars_cents: u32) -> Price {
    Price(dollars_cents * 100)
}

/// The standard venue: AAPL and MSFT, ALICE and BOB, small books.
fn two_by_two(tokens_per_account: u32) -> Venue {
    Venue::demo(
        &["AAPL", "MSFT"],
        &[("ALICE", "FRMA"), ("BOB", "FRMB")],
        Limits {
            orders_per_symbol: 64,
            levels_per_side: 16,
            tokens_per_account,
        },
    )
}

/// A venue with two symbols and two accounts, plus a recorder and a clock.
struct Harness {
    ex: Exchange,
    seq: u64,
    ts: u64,
}

impl Harness {
    fn new() -> Self {
        Self::with_accounts(|_| {})
    }

    /// The standard venue with its accounts' controls set by `controls`.
    fn with_accounts(controls: impl FnOnce(&mut [AccountDef])) -> Self {
        let mut venue = two_by_two(256);
        controls(&mut venue.accounts);
        Self::started(venue)
    }

    /// `venue`'s exchange, its day started.
    fn started(venue: Venue) -> Self {
        let mut h = Harness {
            ex: Exchange::new(venue).unwrap(),
            seq: 0,
            ts: 1_000_000_000,
        };
        h.run(Command::StartOfDay);
        h
    }

    fn run(&mut self, command: Command) -> Vec<Output> {
        self.seq += 1;
        self.ts += 1_000;
        let mut rec = Recorder::default();
        let input = Input {
            seq: self.seq,
            timestamp: Timestamp(self.ts),
            command,
        };
        self.ex.apply(&input, &mut rec);
        rec.outputs
    }

    fn at(&mut self, ts_ns: u64) -> &mut Self {
        assert!(ts_ns > self.ts);
        self.ts = ts_ns - 1_000;
        self
    }

    fn ouch(&mut self, account: AccountId, message: Inbound) -> Vec<Output> {
        self.run(Command::Ouch { account, message })
    }

    fn enter(&mut self, account: AccountId, o: ouch::EnterOrder) -> Vec<Output> {
        self.ouch(account, Inbound::Enter(o))
    }

    fn cancel(&mut self, account: AccountId, token: &str, shares: u32) -> Vec<Output> {
        self.ouch(
            account,
            Inbound::Cancel(ouch::CancelOrder {
                token: tok(token),
                shares: Shares(shares),
            }),
        )
    }

    fn replace(&mut self, account: AccountId, u: ouch::ReplaceOrder) -> Vec<Output> {
        self.ouch(account, Inbound::Replace(u))
    }
}

fn order(token: &str, side: u8, shares: u32, price: Price) -> ouch::EnterOrder {
    ouch::EnterOrder {
        token: tok(token),
        side,
        shares: Shares(shares),
        stock: Alpha(*b"AAPL    "),
        price,
        tif: 99_999,
        firm: Firm::SPACES,
        display: b'Y',
        capacity: b'A',
        intermarket_sweep: b'N',
        min_qty: Shares(0),
        cross_type: b'N',
        customer_type: b' ',
    }
}

fn replace(old: &str, new: &str, shares: u32, price: Price) -> ouch::ReplaceOrder {
    ouch::ReplaceOrder {
        existing: tok(old),
        replacement: tok(new),
        shares: Shares(shares),
        price,
        tif: 99_999,
        display: b'Y',
        intermarket_sweep: b'N',
        min_qty: Shares(0),
    }
}

/// Compact description of outputs for readable assertions.
fn kinds(outputs: &[Output]) -> Vec<String> {
    outputs
        .iter()
        .map(|o| match o {
            Output::Ouch(acct, m) => format!("{}:{}", acct.0, ouch_kind(m)),
            Output::Itch(m) => format!("itch:{}", itch_kind(&m.body)),
        })
        .collect()
}

fn ouch_kind(m: &Outbound) -> String {
    match m {
        Outbound::SystemEvent(e) => format!("S{}", e.event as char),
        Outbound::Accepted(a) => format!("A{}", a.order_state as char),
        Outbound::Replaced(r) => format!("U{}", r.order_state as char),
        Outbound::Canceled(c) => format!("C{}{}", c.reason as char, c.decrement.0),
        Outbound::Executed(e) => format!("E{}{}", e.liquidity as char, e.shares.0),
        Outbound::Rejected(j) => format!("J{}", j.reason as char),
        other => format!("{other:?}"),
    }
}

fn itch_kind(b: &Body) -> String {
    match b {
        Body::SystemEvent { event } => format!("S{}", *event as char),
        Body::StockDirectory(_) => "R".into(),
        Body::TradingAction { state, .. } => format!("H{}", *state as char),
        Body::AddOrder {
            order_ref, shares, ..
        } => format!("A{}x{}", order_ref.0, shares.0),
        Body::AddOrderMpid {
            order_ref,
            attribution,
            ..
        } => format!("F{}{}", order_ref.0, attribution),
        Body::OrderExecuted {
            order_ref,
            shares,
            match_number,
        } => {
            format!("E{}x{}m{}", order_ref.0, shares.0, match_number.0)
        }
        Body::OrderCancel { order_ref, shares } => format!("X{}x{}", order_ref.0, shares.0),
        Body::OrderDelete { order_ref } => format!("D{}", order_ref.0),
        Body::OrderReplace {
            old_ref,
            new_ref,
            shares,
            ..
        } => format!("U{}>{}x{}", old_ref.0, new_ref.0, shares.0),
        Body::Trade {
            order_ref,
            side,
            shares,
            match_number,
            ..
        } => {
            format!(
                "P{}{}x{}m{}",
                order_ref.0, *side as char, shares.0, match_number.0
            )
        }
        other => format!("{other:?}"),
    }
}

fn reject_reason(outputs: &[Output]) -> u8 {
    match outputs {
        [Output::Ouch(_, Outbound::Rejected(j))] => j.reason,
        other => panic!("expected one Rejected, got {:?}", kinds(other)),
    }
}

#[test]
fn start_of_day_messages() {
    let venue = Venue::demo(
        &["AAPL", "MSFT"],
        &[("ALICE", "FRMA"), ("BOB", "FRMB")],
        Limits::default(),
    );
    let mut ex = Exchange::new(venue).unwrap();
    let mut rec = Recorder::default();
    ex.apply(
        &Input {
            seq: 1,
            timestamp: Timestamp(7),
            command: Command::StartOfDay,
        },
        &mut rec,
    );
    assert_eq!(
        kinds(&rec.outputs),
        [
            "itch:SO", "itch:R", "itch:R", "itch:HT", "itch:HT", "itch:SS", "itch:SQ", "0:SS",
            "1:SS"
        ]
    );
    let Output::Itch(r) = rec.outputs[2] else {
        panic!()
    };
    assert_eq!(r.header.locate, 2);
    assert_eq!(r.header.timestamp, Timestamp(7));
    let Body::StockDirectory(d) = r.body else {
        panic!()
    };
    assert_eq!(
        (d.stock, d.round_lot_size, d.issue_sub_type, d.etp_leverage),
        (Alpha(*b"MSFT    "), 100, *b"C ", 0)
    );
}

#[test]
fn each_enter_reject_code_in_order() {
    let mut h = Harness::new();
    let cases: Vec<(ouch::EnterOrder, u8)> = vec![
        (
            ouch::EnterOrder {
                side: b'X',
                ..order("r1", b'B', 100, px(10_00))
            },
            b'O',
        ),
        (
            ouch::EnterOrder {
                stock: Alpha(*b"aapl    "),
                ..order("r2", b'B', 100, px(10_00))
            },
            b'S',
        ),
        (order("r3", b'B', 0, px(10_00)), b'Z'),
        (order("r4", b'B', 1_000_000, px(10_00)), b'Z'),
        (order("r5", b'B', 100, Price(0)), b'X'),
        (order("r6", b'B', 100, Price(1_999_999_900 + 100)), b'X'),
        (order("r7", b'B', 100, Price(100_050)), b'X'),
        (order("r8", b'B', 100, Price::MARKET), b'X'),
        (
            ouch::EnterOrder {
                tif: 100_000,
                ..order("r9", b'B', 100, px(10_00))
            },
            b'O',
        ),
        (
            ouch::EnterOrder {
                display: b'Q',
                ..order("r10", b'B', 100, px(10_00))
            },
            b'D',
        ),
        (
            ouch::EnterOrder {
                cross_type: b'O',
                ..order("r11", b'B', 100, px(10_00))
            },
            b'R',
        ),
        (
            ouch::EnterOrder {
                min_qty: Shares(10),
                ..order("r12", b'B', 100, px(10_00))
            },
            b'N',
        ),
        (
            ouch::EnterOrder {
                tif: 0,
                min_qty: Shares(101),
                ..order("r13", b'B', 100, px(10_00))
            },
            b'N',
        ),
        (
            ouch::EnterOrder {
                firm: Alpha(*b"FRMB"),
                ..order("r14", b'B', 100, px(10_00))
            },
            b'L',
        ),
        (order("r15", b'B', 100_001, px(10_00)), b'Z'),
        (order("r16", b'B', 100_000, px(50_01)), b'n'),
    ];
    for (o, reason) in cases {
        let out = h.enter(A, o);
        assert_eq!(reject_reason(&out), reason, "token {}", o.token);
    }
    // Own firm and spaces are fine; a market IOC is not a notional breach.
    assert_eq!(
        kinds(&h.enter(
            A,
            ouch::EnterOrder {
                firm: Alpha(*b"FRMA"),
                ..order("ok1", b'B', 100_000, px(50_00))
            }
        )),
        ["0:AL", "itch:A1x100000"]
    );
    assert_eq!(
        kinds(&h.enter(
            A,
            ouch::EnterOrder {
                tif: 0,
                ..order("ok2", b'S', 100_000, Price::MARKET)
            }
        )),
        ["0:AL", "0:ER100000", "0:EA100000", "itch:E1x100000m1"]
    );
}

#[test]
fn halted_and_closed_rejects() {
    let mut h = Harness::new();
    assert_eq!(h.run(Command::Admin(Admin::Halt(Locate(1)))).len(), 1);
    assert_eq!(
        reject_reason(&h.enter(A, order("h1", b'B', 100, Price(0)))),
        b'H',
        "halt is checked before price"
    );
    let msft = ouch::EnterOrder {
        stock: Alpha(*b"MSFT    "),
        ..order("h2", b'B', 100, px(10_00))
    };
    assert_eq!(kinds(&h.enter(A, msft)), ["0:AL", "itch:A1x100"]);
    assert!(
        h.run(Command::Admin(Admin::Halt(Locate(1)))).is_empty(),
        "already halted"
    );
    assert_eq!(
        kinds(&h.run(Command::Admin(Admin::Resume(Locate(1))))),
        ["itch:HT"]
    );
    h.run(Command::Admin(Admin::EndOfDay));
    assert_eq!(
        reject_reason(&h.enter(A, order("c1", b'B', 100, px(10_00)))),
        b'C'
    );
}

#[test]
fn duplicate_tokens_are_ignored_even_after_reject() {
    let mut h = Harness::new();
    assert_eq!(
        reject_reason(&h.enter(A, order("t1", b'B', 0, px(10_00)))),
        b'Z'
    );
    assert!(h.enter(A, order("t1", b'B', 100, px(10_00))).is_empty());
    assert_eq!(h.enter(A, order("t2", b'B', 100, px(10_00))).len(), 2);
    assert!(h.enter(A, order("t2", b'B', 100, px(10_00))).is_empty());
    // Tokens are per account and case-sensitive.
    assert_eq!(h.enter(B, order("t2", b'S', 100, px(11_00))).len(), 2);
    assert_eq!(h.enter(A, order("T2", b'S', 100, px(11_00))).len(), 2);
}

#[test]
fn accepted_echoes_fields_and_numbers_refs_gaplessly() {
    let mut h = Harness::new();
    h.enter(A, order("bad", b'B', 0, px(10_00)));
    let out = h.enter(
        A,
        ouch::EnterOrder {
            side: b'T',
            capacity: b'x',
            intermarket_sweep: b'q',
            display: b'P',
            ..order("a1", b'T', 100, px(10_00))
        },
    );
    let Output::Ouch(_, Outbound::Accepted(a)) = out[0] else {
        panic!()
    };
    assert_eq!(
        a.order_ref,
        OrderRef(1),
        "rejects consume no reference number"
    );
    assert_eq!(
        (
            a.side,
            a.capacity,
            a.intermarket_sweep,
            a.display,
            a.bbo_weight
        ),
        (b'T', b'O', b'N', b'P', b' ')
    );
    assert_eq!(a.firm, Alpha(*b"FRMA"));
    let out = h.enter(A, order("a2", b'B', 100, px(9_00)));
    let Output::Ouch(_, Outbound::Accepted(a)) = out[0] else {
        panic!()
    };
    assert_eq!(a.order_ref, OrderRef(2));
}

#[test]
fn price_time_priority_taker_before_maker_and_trade_at_maker_price() {
    let mut h = Harness::new();
    h.enter(B, order("s1", b'S', 100, px(10_01)));
    h.enter(B, order("s2", b'S', 100, px(10_00)));
    h.enter(B, order("s3", b'S', 100, px(10_00)));
    let out = h.enter(A, order("b1", b'B', 250, px(10_01)));
    assert_eq!(
        kinds(&out),
        [
            "0:AL",
            "0:ER100",
            "1:EA100",
            "itch:E2x100m1",
            "0:ER100",
            "1:EA100",
            "itch:E3x100m2",
            "0:ER50",
            "1:EA50",
            "itch:E1x50m3"
        ]
    );
    let Output::Ouch(_, Outbound::Executed(e)) = out[7] else {
        panic!()
    };
    assert_eq!((e.price, e.match_number), (px(10_01), MatchNumber(3)));
}

#[test]
fn hidden_orders_trade_after_displayed_and_print_as_p() {
    let mut h = Harness::new();
    h.enter(
        B,
        ouch::EnterOrder {
            display: b'N',
            ..order("h", b'S', 100, px(10_00))
        },
    );
    h.enter(B, order("d", b'S', 100, px(10_00)));
    let out = h.enter(A, order("b", b'B', 150, px(10_00)));
    assert_eq!(
        kinds(&out),
        [
            "0:AL",
            "0:ER100",
            "1:EA100",
            "itch:E2x100m1",
            "0:ER50",
            "1:EJ50",
            "itch:P0Bx50m2"
        ]
    );
    let Output::Itch(m) = out[6] else { panic!() };
    let Body::Trade { stock, price, .. } = m.body else {
        panic!()
    };
    assert_eq!((stock, price), (Alpha(*b"AAPL    "), px(10_00)));
}

#[test]
fn attributable_adds_are_itch_f_with_the_firm() {
    let mut h = Harness::new();
    let out = h.enter(
        B,
        ouch::EnterOrder {
            display: b'A',
            ..order("f", b'S', 100, px(10_00))
        },
    );
    assert_eq!(kinds(&out), ["1:AL", "itch:F1FRMB"]);
    let hidden = h.enter(
        B,
        ouch::EnterOrder {
            display: b'N',
            ..order("n", b'S', 100, px(10_00))
        },
    );
    assert_eq!(kinds(&hidden), ["1:AL"], "hidden orders never show on rest");
}

#[test]
fn ioc_remainder_and_dead_iocs() {
    let mut h = Harness::new();
    assert_eq!(
        kinds(&h.enter(
            A,
            ouch::EnterOrder {
                tif: 0,
                ..order("i0", b'B', 100, px(10_00))
            }
        )),
        ["0:AD"]
    );
    assert_eq!(
        kinds(&h.enter(
            A,
            ouch::EnterOrder {
                tif: 0,
                ..order("m0", b'B', 100, Price::MARKET)
            }
        )),
        ["0:AD"]
    );
    h.enter(B, order("s", b'S', 60, px(10_00)));
    let out = h.enter(
        A,
        ouch::EnterOrder {
            tif: 0,
            ..order("i1", b'B', 100, px(10_00))
        },
    );
    assert_eq!(
        kinds(&out),
        ["0:AL", "0:ER60", "1:EA60", "itch:E3x60m1", "0:CI40"]
    );
    let Output::Ouch(_, Outbound::Accepted(a)) = out[0] else {
        panic!()
    };
    assert_eq!(
        a.order_ref,
        OrderRef(4),
        "dead accepts consume reference numbers"
    );
}

#[test]
fn min_qty_below_executable_is_dead_otherwise_executes_all() {
    let mut h = Harness::new();
    h.enter(B, order("s1", b'S', 50, px(10_00)));
    h.enter(
        B,
        ouch::EnterOrder {
            display: b'N',
            ..order("s2", b'S', 30, px(10_01))
        },
    );
    let min = |t, q| ouch::EnterOrder {
        tif: 0,
        min_qty: Shares(q),
        ..order(t, b'B', 100, px(10_01))
    };
    assert_eq!(kinds(&h.enter(A, min("m1", 81))), ["0:AD"]);
    assert_eq!(
        kinds(&h.enter(A, min("m2", 80))),
        [
            "0:AL",
            "0:ER50",
            "1:EA50",
            "itch:E1x50m1",
            "0:ER30",
            "1:EJ30",
            "itch:P0Bx30m2",
            "0:CI20"
        ]
    );
}

#[test]
fn post_only_that_would_cross_is_dead_even_against_hidden() {
    let mut h = Harness::new();
    h.enter(
        B,
        ouch::EnterOrder {
            display: b'N',
            ..order("s", b'S', 50, px(10_00))
        },
    );
    assert_eq!(
        kinds(&h.enter(
            A,
            ouch::EnterOrder {
                display: b'P',
                ..order("p1", b'B', 100, px(10_00))
            }
        )),
        ["0:AD"]
    );
    assert_eq!(
        kinds(&h.enter(
            A,
            ouch::EnterOrder {
                display: b'P',
                ..order("p2", b'B', 100, px(9_99))
            }
        )),
        ["0:AL", "itch:A3x100"]
    );
    // A resting post-only order is a displayed maker.
    let out = h.enter(
        B,
        ouch::EnterOrder {
            tif: 0,
            ..order("t", b'S', 10, px(9_99))
        },
    );
    assert_eq!(kinds(&out), ["1:AL", "1:ER10", "0:EA10", "itch:E3x10m1"]);
}

#[test]
fn cancel_to_intended_size_keeps_priority() {
    let mut h = Harness::new();
    h.enter(A, order("a", b'B', 100, px(10_00)));
    h.enter(A, order("b", b'B', 100, px(10_00)));
    assert_eq!(kinds(&h.cancel(A, "a", 30)), ["0:CU70", "itch:X1x70"]);
    assert!(h.cancel(A, "a", 30).is_empty(), "reduces nothing");
    assert!(h.cancel(A, "a", 500).is_empty(), "never raises");
    assert!(h.cancel(B, "a", 0).is_empty(), "not B's order");
    assert!(h.cancel(A, "zz", 0).is_empty(), "unknown token");
    let out = h.enter(B, order("s", b'S', 40, px(10_00)));
    assert_eq!(
        kinds(&out),
        [
            "1:AL",
            "1:ER30",
            "0:EA30",
            "itch:E1x30m1",
            "1:ER10",
            "0:EA10",
            "itch:E2x10m2"
        ]
    );
    assert!(
        h.cancel(A, "a", 0).is_empty(),
        "fully executed order is dead"
    );
    assert_eq!(kinds(&h.cancel(A, "b", 0)), ["0:CU90", "itch:D2"]);
    assert!(h.cancel(A, "b", 0).is_empty());
}

#[test]
fn hidden_cancel_is_not_on_the_feed() {
    let mut h = Harness::new();
    h.enter(
        A,
        ouch::EnterOrder {
            display: b'N',
            ..order("n", b'B', 100, px(10_00))
        },
    );
    assert_eq!(kinds(&h.cancel(A, "n", 10)), ["0:CU90"]);
    assert_eq!(kinds(&h.cancel(A, "n", 0)), ["0:CU10"]);
}

#[test]
fn replace_outcome_1_ignored() {
    let mut h = Harness::new();
    h.enter(A, order("a", b'B', 100, px(10_00)));
    h.enter(A, order("used", b'B', 100, px(9_00)));
    assert!(
        h.replace(A, replace("nope", "n1", 100, px(10_00)))
            .is_empty(),
        "unknown existing"
    );
    assert!(
        h.replace(A, replace("a", "used", 100, px(10_00)))
            .is_empty(),
        "replacement token used"
    );
    assert!(
        h.replace(B, replace("a", "n2", 100, px(10_00))).is_empty(),
        "another account's order"
    );
    h.cancel(A, "a", 0);
    assert!(
        h.replace(A, replace("a", "n3", 100, px(10_00))).is_empty(),
        "dead existing"
    );
    // n1 was not consumed: it can still be entered.
    assert_eq!(h.enter(A, order("n1", b'B', 1, px(8_00))).len(), 2);
}

#[test]
fn replace_outcome_2_invalid_cancels_the_original() {
    let mut h = Harness::new();
    h.enter(A, order("a", b'B', 100, px(10_00)));
    let out = h.replace(A, replace("a", "r", 1_000_000, px(10_00)));
    assert_eq!(kinds(&out), ["0:CU100", "itch:D1"]);
    let Output::Ouch(_, Outbound::Canceled(c)) = out[0] else {
        panic!()
    };
    assert_eq!(c.token, tok("a"));
    assert_eq!(
        h.enter(A, order("r", b'B', 1, px(8_00))).len(),
        2,
        "replacement token not consumed"
    );
    for (i, bad) in [
        replace("x", "r1", 100, Price(0)),
        replace("x", "r1", 100, Price(1_000_050)),
        ouch::ReplaceOrder {
            display: b'Z',
            ..replace("x", "r1", 100, px(10_00))
        },
        ouch::ReplaceOrder {
            min_qty: Shares(5),
            ..replace("x", "r1", 100, px(10_00))
        },
        replace("x", "r1", 100_001, px(10_00)),
        replace("x", "r1", 100_000, px(50_01)),
        replace("x", "r1", 0, px(10_00)),
    ]
    .into_iter()
    .enumerate()
    {
        let token = format!("x{i}");
        h.enter(A, order(&token, b'B', 100, px(10_00)));
        let out = h.replace(
            A,
            ouch::ReplaceOrder {
                existing: tok(&token),
                ..bad
            },
        );
        assert_eq!(kinds(&out)[0], "0:CU100", "case {i}");
    }
}

#[test]
fn replace_outcome_3_halted_rejects_replacement_keeps_original() {
    let mut h = Harness::new();
    h.enter(A, order("a", b'B', 100, px(10_00)));
    h.run(Command::Admin(Admin::Halt(Locate(1))));
    assert_eq!(
        reject_reason(&h.replace(A, replace("a", "r", 200, px(10_00)))),
        b'H'
    );
    assert!(
        h.enter(A, order("r", b'B', 1, px(8_00))).is_empty(),
        "replacement token consumed"
    );
    assert_eq!(
        kinds(&h.cancel(A, "a", 0)),
        ["0:CU100", "itch:D1"],
        "cancels work while halted"
    );
}

#[test]
fn replace_outcome_4_itch_u_when_it_rests_without_executing() {
    let mut h = Harness::new();
    h.enter(A, order("a", b'B', 100, px(10_00)));
    let out = h.replace(A, replace("a", "r", 300, px(10_01)));
    assert_eq!(kinds(&out), ["0:UL", "itch:U1>2x300"]);
    let Output::Ouch(_, Outbound::Replaced(r)) = out[0] else {
        panic!()
    };
    assert_eq!(
        (r.token, r.previous_token, r.order_ref, r.shares),
        (tok("r"), tok("a"), OrderRef(2), Shares(300))
    );
    assert!(h.cancel(A, "a", 0).is_empty(), "old token is dead");
    assert_eq!(kinds(&h.cancel(A, "r", 0)), ["0:CU300", "itch:D2"]);
}

#[test]
fn replace_loses_time_priority() {
    let mut h = Harness::new();
    h.enter(A, order("a", b'B', 100, px(10_00)));
    h.enter(A, order("b", b'B', 100, px(10_00)));
    h.replace(A, replace("a", "a2", 100, px(10_00)));
    let out = h.enter(B, order("s", b'S', 100, px(10_00)));
    assert_eq!(kinds(&out)[3], "itch:E2x100m1", "b now has priority");
}

#[test]
fn replace_chain_total_counts_executed_shares() {
    let mut h = Harness::new();
    h.enter(A, order("a", b'B', 500, px(10_00)));
    h.enter(B, order("s", b'S', 100, px(10_00)));
    let out = h.replace(A, replace("a", "a2", 500, px(10_00)));
    let Output::Ouch(_, Outbound::Replaced(r)) = out[0] else {
        panic!()
    };
    assert_eq!(
        r.shares,
        Shares(400),
        "entered 500, executed 100, replaced with 500 -> 400"
    );
    h.enter(B, order("s2", b'S', 150, px(10_00)));
    let out = h.replace(A, replace("a2", "a3", 200, px(10_00)));
    assert_eq!(
        kinds(&out),
        ["0:UD", "itch:D3"],
        "chain executed 250 >= 200: nothing left"
    );
    let Output::Ouch(_, Outbound::Replaced(r)) = out[0] else {
        panic!()
    };
    assert_eq!((r.shares, r.order_ref), (Shares(0), OrderRef(5)));
    assert!(h.cancel(A, "a3", 0).is_empty());
}

#[test]
fn replace_that_executes_publishes_delete_then_fills_then_add() {
    let mut h = Harness::new();
    h.enter(B, order("s", b'S', 100, px(10_05)));
    h.enter(A, order("a", b'B', 300, px(10_00)));
    let out = h.replace(A, replace("a", "a2", 300, px(10_05)));
    assert_eq!(
        kinds(&out),
        [
            "0:UL",
            "itch:D2",
            "0:ER100",
            "1:EA100",
            "itch:E1x100m1",
            "itch:A3x200"
        ]
    );
}

#[test]
fn replace_changing_attribution_or_visibility_is_delete_add() {
    let mut h = Harness::new();
    h.enter(A, order("a", b'B', 100, px(10_00)));
    let out = h.replace(
        A,
        ouch::ReplaceOrder {
            display: b'A',
            ..replace("a", "b", 100, px(10_00))
        },
    );
    assert_eq!(kinds(&out), ["0:UL", "itch:D1", "itch:F2FRMA"]);
    let out = h.replace(
        A,
        ouch::ReplaceOrder {
            display: b'N',
            ..replace("b", "c", 100, px(10_00))
        },
    );
    assert_eq!(kinds(&out), ["0:UL", "itch:D2"]);
    let out = h.replace(
        A,
        ouch::ReplaceOrder {
            display: b'P',
            ..replace("c", "d", 100, px(10_00))
        },
    );
    assert_eq!(kinds(&out), ["0:UL", "itch:A4x100"]);
    let out = h.replace(
        A,
        ouch::ReplaceOrder {
            display: b'Y',
            ..replace("d", "e", 100, px(10_00))
        },
    );
    assert_eq!(
        kinds(&out),
        ["0:UL", "itch:U4>5x100"],
        "P and Y share attribution"
    );
}

#[test]
fn ioc_replacement_cancels_its_remainder() {
    let mut h = Harness::new();
    h.enter(B, order("s", b'S', 40, px(10_00)));
    h.enter(A, order("a", b'B', 100, px(9_00)));
    let out = h.replace(
        A,
        ouch::ReplaceOrder {
            tif: 0,
            ..replace("a", "i", 100, px(10_00))
        },
    );
    assert_eq!(
        kinds(&out),
        [
            "0:UL",
            "itch:D2",
            "0:ER40",
            "1:EA40",
            "itch:E1x40m1",
            "0:CI60"
        ]
    );
}

#[test]
fn modify_is_ignored() {
    let mut h = Harness::new();
    h.enter(A, order("a", b'S', 100, px(10_00)));
    let m = Inbound::Modify(ouch::ModifyOrder {
        token: tok("a"),
        side: b'T',
        shares: Shares(50),
    });
    assert!(h.ouch(A, m).is_empty());
}

#[test]
fn time_in_force_expires_within_a_second_of_its_deadline() {
    let mut h = Harness::new();
    h.at(10_000_000_000).enter(
        A,
        ouch::EnterOrder {
            tif: 5,
            ..order("t", b'B', 100, px(10_00))
        },
    );
    h.enter(
        A,
        ouch::EnterOrder {
            tif: 5,
            display: b'N',
            ..order("n", b'B', 100, px(10_00))
        },
    );
    h.enter(A, order("day", b'B', 100, px(10_00)));
    assert!(
        h.at(14_900_000_000).run(Command::Tick).is_empty(),
        "not yet"
    );
    let out = h.at(15_000_010_000).run(Command::Tick);
    assert_eq!(
        kinds(&out),
        ["0:CT100", "itch:D1"],
        "n was entered 1 us later"
    );
    assert_eq!(kinds(&h.at(15_002_000_000).run(Command::Tick)), ["0:CT100"]);
    assert!(h.cancel(A, "t", 0).is_empty());
    assert!(
        h.at(99_000_000_000).run(Command::Tick).is_empty(),
        "DAY orders do not expire"
    );
}

#[test]
fn replace_restarts_time_in_force() {
    let mut h = Harness::new();
    h.at(10_000_000_000).enter(
        A,
        ouch::EnterOrder {
            tif: 2,
            ..order("t", b'B', 100, px(10_00))
        },
    );
    h.at(11_500_000_000).replace(
        A,
        ouch::ReplaceOrder {
            tif: 2,
            ..replace("t", "t2", 100, px(10_00))
        },
    );
    assert!(h.at(12_500_000_000).run(Command::Tick).is_empty());
    assert_eq!(
        kinds(&h.at(13_600_000_000).run(Command::Tick)),
        ["0:CT100", "itch:D2"]
    );
}

#[test]
fn end_of_day_cancels_everything_in_order_then_system_events() {
    let mut h = Harness::new();
    h.enter(A, order("b1", b'B', 100, px(9_00)));
    h.enter(B, order("b2", b'B', 100, px(9_50)));
    h.enter(
        A,
        ouch::EnterOrder {
            display: b'N',
            ..order("b3", b'B', 100, px(9_50))
        },
    );
    h.enter(B, order("s1", b'S', 100, px(11_00)));
    h.enter(
        A,
        ouch::EnterOrder {
            stock: Alpha(*b"MSFT    "),
            ..order("m1", b'S', 100, px(20_00))
        },
    );
    let out = h.run(Command::Admin(Admin::EndOfDay));
    assert_eq!(
        kinds(&out),
        [
            "1:CE100", "itch:D2", "0:CE100", "0:CE100", "itch:D1", "1:CE100", "itch:D4", "0:CE100",
            "itch:D5", "0:SE", "1:SE", "itch:SM", "itch:SE", "itch:SC"
        ]
    );
    assert!(
        h.run(Command::Admin(Admin::EndOfDay)).is_empty(),
        "only once"
    );
    assert_eq!(h.ex.resting_orders(), 0);
}

#[test]
fn self_trade_is_allowed() {
    let mut h = Harness::new();
    h.enter(A, order("s", b'S', 100, px(10_00)));
    assert_eq!(
        kinds(&h.enter(A, order("b", b'B', 100, px(10_00)))),
        ["0:AL", "0:ER100", "0:EA100", "itch:E1x100m1"]
    );
}

#[test]
fn market_order_echoes_market_price_and_sweeps() {
    let mut h = Harness::new();
    h.enter(B, order("s1", b'S', 100, px(10_00)));
    h.enter(B, order("s2", b'S', 100, px(12_00)));
    let out = h.enter(
        A,
        ouch::EnterOrder {
            tif: 0,
            ..order("m", b'B', 300, Price::MARKET)
        },
    );
    let Output::Ouch(_, Outbound::Accepted(a)) = out[0] else {
        panic!()
    };
    assert_eq!(a.price, Price::MARKET);
    assert_eq!(kinds(&out)[7], "0:CI100");
}

#[test]
fn capacity_limits_reject_with_o() {
    let venue = Venue::demo(
        &["AAPL"],
        &[("ALICE", "FRMA")],
        Limits {
            orders_per_symbol: 2,
            levels_per_side: 1,
            tokens_per_account: 4,
        },
    );
    let mut ex = Exchange::new(venue).unwrap();
    let mut rec = Recorder::default();
    let mut seq = 0;
    let mut run = |ex: &mut Exchange, c| {
        seq += 1;
        ex.apply(
            &Input {
                seq,
                timestamp: Timestamp(seq),
                command: c,
            },
            &mut rec,
        );
        kinds(&rec.take())
    };
    run(&mut ex, Command::StartOfDay);
    let enter = |t, p| Command::Ouch {
        account: A,
        message: Inbound::Enter(order(t, b'B', 1, p)),
    };
    assert_eq!(run(&mut ex, enter("a", px(10_00))), ["0:AL", "itch:A1x1"]);
    assert_eq!(
        run(&mut ex, enter("b", px(9_00))),
        ["0:JO"],
        "no level for a second price"
    );
    assert_eq!(run(&mut ex, enter("c", px(10_00))), ["0:AL", "itch:A2x1"]);
    assert_eq!(
        run(&mut ex, enter("d", px(10_00))),
        ["0:JO"],
        "tokens full after this one"
    );
    assert_eq!(
        run(&mut ex, enter("e", px(10_00))),
        ["0:JO"],
        "not recorded"
    );
    assert_eq!(run(&mut ex, enter("e", px(10_00))), ["0:JO"]);
}

/// Apply `command` as input `seq` and describe the outputs.
fn step(ex: &mut Exchange, seq: u64, command: Command) -> Vec<String> {
    let mut rec = Recorder::default();
    ex.apply(
        &Input {
            seq,
            timestamp: Timestamp(seq),
            command,
        },
        &mut rec,
    );
    kinds(&rec.outputs)
}

#[test]
fn a_full_book_still_takes_orders_that_execute_in_full() {
    let limits = Limits {
        orders_per_symbol: 1,
        levels_per_side: 1,
        tokens_per_account: 16,
    };
    let venue = Venue::demo(&["AAPL"], &[("ALICE", "FRMA"), ("BOB", "FRMB")], limits);
    let mut ex = Exchange::new(venue).unwrap();
    let enter = |account, o| Command::Ouch {
        account,
        message: Inbound::Enter(o),
    };
    step(&mut ex, 1, Command::StartOfDay);
    assert_eq!(
        step(&mut ex, 2, enter(A, order("s", b'S', 100, px(10_00)))),
        ["0:AL", "itch:A1x100"]
    );
    assert_eq!(
        step(&mut ex, 3, enter(B, order("b1", b'B', 101, px(10_00)))),
        ["1:JO"],
        "1 share would rest"
    );
    let full_fill = step(&mut ex, 4, enter(B, order("b2", b'B', 60, px(10_00))));
    assert_eq!(full_fill, ["1:AL", "1:ER60", "0:EA60", "itch:E1x60m1"]);
    assert_eq!(
        step(&mut ex, 5, enter(B, order("b3", b'S', 5, px(11_00)))),
        ["1:JO"],
        "no room"
    );
    let u = Command::Ouch {
        account: A,
        message: Inbound::Replace(replace("s", "s2", 100, px(10_01))),
    };
    assert_eq!(
        step(&mut ex, 6, u),
        ["0:UL", "itch:U1>3x40"],
        "the replaced order's slot comes free"
    );
}

#[test]
fn deadlines_past_49_days_saturate_instead_of_panicking() {
    assert_eq!(
        super::validate::deadline_ms(50 * 86_400 * 1_000_000_000, 5),
        u32::MAX
    );
}

#[test]
fn digest_tracks_state_and_ignores_history_noise() {
    let mut h1 = Harness::new();
    let mut h2 = Harness::new();
    assert_eq!(h1.ex.state_digest(), h2.ex.state_digest());
    h1.enter(A, order("a", b'B', 100, px(10_00)));
    assert_ne!(h1.ex.state_digest(), h2.ex.state_digest());
    h2.enter(A, order("a", b'B', 100, px(10_00)));
    assert_eq!(h1.ex.state_digest(), h2.ex.state_digest());
    h1.cancel(A, "a", 50);
    assert_ne!(h1.ex.state_digest(), h2.ex.state_digest());
}

#[test]
fn itch_messages_carry_locate_and_input_timestamp() {
    let mut h = Harness::new();
    let out = h.at(5_000_000_000).enter(
        A,
        ouch::EnterOrder {
            stock: Alpha(*b"MSFT    "),
            ..order("m", b'B', 100, px(10_00))
        },
    );
    let Output::Itch(m) = out[1] else { panic!() };
    assert_eq!(
        m.header,
        itch::Header {
            locate: 2,
            tracking: 0,
            timestamp: Timestamp(5_000_000_000)
        }
    );
    let Output::Ouch(_, Outbound::Accepted(a)) = out[0] else {
        panic!()
    };
    assert_eq!(a.timestamp, Timestamp(5_000_000_000));
}

#[test]
fn snapshot_lists_directory_state_and_displayed_orders_in_priority() {
    let mut h = Harness::new();
    h.enter(A, order("b1", b'B', 100, px(9_00)));
    h.enter(
        B,
        ouch::EnterOrder {
            display: b'A',
            ..order("b2", b'B', 200, px(9_50))
        },
    );
    h.enter(
        A,
        ouch::EnterOrder {
            display: b'N',
            ..order("b3", b'B', 100, px(9_50))
        },
    );
    h.enter(B, order("s1", b'S', 300, px(11_00)));
    h.cancel(B, "s1", 250);
    h.run(Command::Admin(Admin::Halt(Locate(2))));
    let mut seen = Vec::new();
    h.ex.snapshot(Timestamp(42), |m| seen.push(itch_kind(&m.body)));
    assert_eq!(seen, ["R", "HT", "F2FRMB", "A1x100", "A4x250", "R", "HH"]);
}

#[test]
fn expiry_order_is_by_deadline_after_a_long_quiet_spell() {
    let mut h = Harness::new();
    h.at(34_199_000_000_003).enter(
        A,
        ouch::EnterOrder {
            tif: 1,
            ..order("t2", b'S', 1, px(150_00))
        },
    );
    h.at(49_143_999_000_001).enter(
        A,
        ouch::EnterOrder {
            tif: 8,
            ..order("t4", b'S', 1, px(150_00))
        },
    );
    let out = h.at(49_152_000_000_000).run(Command::Tick);
    assert_eq!(kinds(&out), ["0:CT1", "itch:D1", "0:CT1", "itch:D2"]);
}

#[test]
fn an_ioc_replacement_whose_exposure_is_below_its_minimum_is_dead() {
    let mut h = Harness::new();
    h.enter(B, order("s", b'S', 117, px(5_00)));
    h.enter(
        A,
        ouch::EnterOrder {
            tif: 0,
            ..order("t1", b'B', 112, px(5_00))
        },
    );
    h.enter(A, order("bid", b'B', 162, px(4_99)));
    // Chain total 162, 112 executed: exposure 50, minimum 51, though 162 are available.
    let u = ouch::ReplaceOrder {
        tif: 0,
        min_qty: Shares(51),
        ..replace("s", "s2", 162, Price::MARKET)
    };
    assert_eq!(kinds(&h.replace(B, u)), ["1:UD", "itch:D1"]);
}

// ---- venue controls (DESIGN.md 4a) ----------------------------------------------------------

fn stp(mode: Stp) -> Harness {
    Harness::with_accounts(|a| a[0].stp = mode)
}

/// ALICE rests a sell of 100 at 10.00, BOB one of 100 at 10.00 behind it, ALICE another of
/// 100 at 10.01.
fn stp_book(h: &mut Harness) {
    h.enter(A, order("a1", b'S', 100, px(10_00)));
    h.enter(B, order("b1", b'S', 100, px(10_00)));
    h.enter(A, order("a2", b'S', 100, px(10_01)));
}

#[test]
fn stp_cancel_newest_cancels_the_taker_and_stops() {
    let mut h = stp(Stp::CancelNewest);
    stp_book(&mut h);
    // The first resting order is ALICE's own: no trade, the taker's 250 are canceled `Q`.
    assert_eq!(
        kinds(&h.enter(A, order("t", b'B', 250, px(10_01)))),
        ["0:AL", "0:CQ250"]
    );
    assert_eq!(h.ex.resting_orders(), 3, "the resting orders stand");
    assert_eq!(
        h.ex.matches_used(),
        0,
        "no match number for a prevented trade"
    );
}

#[test]
fn stp_cancel_oldest_cancels_the_resting_order_and_goes_on() {
    let mut h = stp(Stp::CancelOldest);
    stp_book(&mut h);
    assert_eq!(
        kinds(&h.enter(A, order("t", b'B', 250, px(10_01)))),
        [
            "0:AL",
            "0:CQ100",
            "itch:D1",
            "0:ER100",
            "1:EA100",
            "itch:E2x100m1",
            "0:CQ100",
            "itch:D3",
            "itch:A4x150",
        ]
    );
    assert_eq!(h.ex.resting_orders(), 1, "the taker's 150 rest");
}

#[test]
fn stp_cancel_both_cancels_resting_first_then_the_taker() {
    let mut h = stp(Stp::CancelBoth);
    h.enter(B, order("b0", b'S', 50, px(9_99)));
    stp_book(&mut h);
    // 50 trade with BOB first (those stand); then ALICE's own order: both go.
    assert_eq!(
        kinds(&h.enter(A, order("t", b'B', 250, px(10_01)))),
        [
            "0:AL",
            "0:ER50",
            "1:EA50",
            "itch:E1x50m1",
            "0:CQ100",
            "itch:D2",
            "0:CQ200"
        ]
    );
    assert_eq!(h.ex.resting_orders(), 2);
}

#[test]
fn stp_decrement_reduces_both_by_the_smaller_leaves() {
    let mut h = stp(Stp::Decrement);
    h.enter(A, order("a1", b'S', 60, px(10_00)));
    h.enter(B, order("b1", b'S', 100, px(10_00)));
    // 60 off each side (resting one first: ITCH D as it reaches 0), then 90 trade with BOB.
    assert_eq!(
        kinds(&h.enter(A, order("t", b'B', 150, px(10_00)))),
        [
            "0:AL",
            "0:CQ60",
            "itch:D1",
            "0:CQ60",
            "0:ER90",
            "1:EA90",
            "itch:E2x90m1"
        ]
    );
    // A larger resting own order is only reduced: ITCH X.
    h.enter(A, order("a3", b'S', 500, px(10_00)));
    assert_eq!(
        kinds(&h.enter(A, order("t2", b'B', 30, px(10_00)))),
        [
            "0:AL",
            "0:ER10",
            "1:EA10",
            "itch:E2x10m2",
            "0:CQ20",
            "itch:X4x20",
            "0:CQ20"
        ]
    );
}

#[test]
fn stp_applies_only_within_the_account() {
    let mut h = stp(Stp::CancelNewest);
    h.enter(A, order("a1", b'S', 100, px(10_00)));
    // BOB's taker trades with ALICE's order as usual; BOB has no prevention.
    assert_eq!(
        kinds(&h.enter(B, order("t", b'B', 100, px(10_00)))),
        ["1:AL", "1:ER100", "0:EA100", "itch:E1x100m1"]
    );
}

#[test]
fn kill_switch_cancels_an_accounts_orders_in_order_with_reason_s() {
    let mut h = Harness::new();
    h.enter(A, order("a1", b'B', 100, px(9_00)));
    h.enter(B, order("b1", b'B', 100, px(9_00)));
    h.enter(A, order("a2", b'S', 100, px(11_00)));
    h.enter(
        A,
        ouch::EnterOrder {
            stock: Alpha(*b"MSFT    "),
            ..order("m1", b'B', 100, px(5_00))
        },
    );
    h.enter(A, order("a3", b'B', 100, px(9_50)));
    let out = h.run(Command::Admin(Admin::CancelAll {
        account: A,
        symbol: Some(Locate(1)),
    }));
    // AAPL only: bids (a3 at the better price first, then a1), then asks.
    assert_eq!(
        kinds(&out),
        [
            "0:CS100", "itch:D5", "0:CS100", "itch:D1", "0:CS100", "itch:D3"
        ]
    );
    let out = h.run(Command::Admin(Admin::CancelAll {
        account: A,
        symbol: None,
    }));
    assert_eq!(kinds(&out), ["0:CS100", "itch:D4"]);
    assert_eq!(h.ex.resting_orders(), 1, "BOB's order stays");
}

#[test]
fn a_blocked_account_is_rejected_a_but_may_cancel() {
    let mut h = Harness::new();
    h.enter(A, order("a1", b'B', 100, px(9_00)));
    let outcome = |h: &mut Harness, admin| {
        h.seq += 1;
        h.ts += 1_000;
        let input = Input {
            seq: h.seq,
            timestamp: Timestamp(h.ts),
            command: Command::Admin(admin),
        };
        h.ex.apply(&input, &mut Recorder::default())
    };
    assert_eq!(outcome(&mut h, Admin::Block(A)), Outcome::Applied);
    assert!(matches!(
        outcome(&mut h, Admin::Block(A)),
        Outcome::AdminRefused(_)
    ));
    assert_eq!(
        kinds(&h.enter(A, order("a2", b'B', 100, px(9_00)))),
        ["0:Ja"]
    );
    // `a` is checked right after `C`; a Replace from a blocked account is outcome 3.
    assert_eq!(
        kinds(&h.replace(A, replace("a1", "a1r", 200, px(9_00)))),
        ["0:Ja"],
        "a Replace is rejected, the original stays"
    );
    assert_eq!(kinds(&h.cancel(A, "a1", 0)), ["0:CU100", "itch:D1"]);
    assert_eq!(outcome(&mut h, Admin::Unblock(A)), Outcome::Applied);
    assert_eq!(
        kinds(&h.enter(A, order("a3", b'B', 100, px(9_00)))),
        ["0:AL", "itch:A2x100"]
    );
    assert_eq!(
        kinds(&h.enter(B, order("b1", b'B', 100, px(9_00)))),
        ["1:AL", "itch:A3x100"]
    );
}

#[test]
fn disconnect_cancels_only_with_cancel_on_disconnect() {
    let mut h = Harness::with_accounts(|a| a[0].cancel_on_disconnect = true);
    h.enter(A, order("a1", b'B', 100, px(9_00)));
    h.enter(B, order("b1", b'B', 100, px(9_00)));
    assert_eq!(
        kinds(&h.run(Command::Disconnect { account: A })),
        ["0:CZ100", "itch:D1"]
    );
    assert!(h.run(Command::Disconnect { account: B }).is_empty());
    assert_eq!(h.ex.resting_orders(), 1);
}

#[test]
fn account_limits_reject_o_and_m_after_every_other_check() {
    let mut h = Harness::with_accounts(|a| {
        a[0].max_open_orders = Some(2);
        a[0].max_open_shares = Some(300);
        a[0].max_day_shares = Some(250);
    });
    h.enter(A, order("a1", b'B', 100, px(9_00)));
    h.enter(A, order("a2", b'B', 150, px(9_00)));
    assert_eq!(
        kinds(&h.enter(A, order("a3", b'B', 1, px(9_00)))),
        ["0:JO"],
        "2 open orders"
    );
    assert_eq!(
        kinds(&h.enter(A, order("a4", b'B', 0, px(9_00)))),
        ["0:JZ"],
        "the DESIGN.md 4 checks come first"
    );
    assert_eq!(kinds(&h.cancel(A, "a2", 0)).len(), 2);
    assert_eq!(
        kinds(&h.enter(A, order("a5", b'B', 201, px(9_00)))),
        ["0:Jm"],
        "open shares"
    );
    // Executions count toward the day: 100 + 150 executed would pass 250 ...
    h.enter(B, order("s1", b'S', 100, px(9_00)));
    assert_eq!(
        kinds(&h.enter(A, order("a6", b'B', 151, px(8_00)))),
        ["0:Jm"],
        "100 executed + 151 > 250"
    );
    assert_eq!(
        kinds(&h.enter(A, order("a7", b'B', 150, px(8_00))))[0],
        "0:AL"
    );
    // A Replace counts its chain total in place of the old order's leaves; over a limit it
    // is invalid: the live order is canceled `U`.
    assert_eq!(
        kinds(&h.replace(A, replace("a7", "a7r", 200, px(8_00)))),
        ["0:CU150", "itch:D4"]
    );
    assert_eq!(
        kinds(&h.enter(B, order("b9", b'B', 999, px(1_00))))[0],
        "1:AL",
        "BOB has no limits"
    );
}

/// A restored exchange makes resident only the live-index entries of the slots the day
/// writes next (each account's next fresh slots and its voided ones) and leaves the rest of
/// the index, and of the slot arrays, for later; its orders are found through entries the
/// restore wrote, and entries nothing wrote read as "no order" (zero, untouched memory).
#[test]
fn a_restored_exchange_finds_its_orders_and_leaves_the_rest_for_later() {
    let ahead = super::shard::LIVE_RESIDENT_AHEAD as usize;
    let restored_ahead = super::tokens::RESTORED_RESIDENT_AHEAD as usize;
    let limit = 2 * ahead;
    let venue = two_by_two(limit as u32);
    let mut h = Harness::started(venue.clone());
    h.enter(A, order("a1", b'B', 100, px(10_00)));
    h.enter(A, order("a2", b'B', 100, px(9_00)));
    h.enter(B, order("b1", b'S', 100, px(11_00)));
    h.cancel(A, "a2", 0);
    let mut state = Vec::new();
    h.ex.save_state(&mut state).unwrap();
    h.ex = Exchange::from_state(venue, &state).unwrap();
    let mut later: Vec<usize> = h.ex.unresident().iter().map(|r| r.bytes()).collect();
    later.sort_unstable();
    let (slots, live) = (super::tokens::ENTRY_BYTES, 4);
    let mut expected = vec![
        (limit - ahead) * slots, // A's and B's slot arrays beyond the first million
        (limit - ahead) * slots,
        (limit - (2 + restored_ahead)) * live, // A's live entries beyond its next slots
        (limit - (1 + restored_ahead)) * live, // B's
    ];
    expected.sort_unstable();
    assert_eq!(later, expected);
    assert_eq!(kinds(&h.cancel(A, "a1", 0)), ["0:CU100", "itch:D1"]);
    assert!(
        h.cancel(A, "a2", 0).is_empty(),
        "a2 left before the snapshot"
    );
    assert_eq!(kinds(&h.cancel(B, "b1", 50)), ["1:CU50", "itch:X3x50"]);
    assert_eq!(
        kinds(&h.enter(A, order("a3", b'B', 100, px(10_00)))),
        ["0:AL", "itch:A4x100"]
    );
    assert_eq!(kinds(&h.cancel(A, "a3", 0)), ["0:CU100", "itch:D4"]);
}

/// A state saved with the token tables' slot arrays lent ([`Exchange::save_state_lending`],
/// the daemon's snapshot point) is [`Exchange::save_state`]'s bytes at that point, read after
/// the day went on: new tokens past the lent length, a replacement, and the exchange itself
/// dropped. (One shard inline voids no token: the reuse of voided slots is
/// `tokens::tests::a_lent_image_is_the_table_at_the_loan_whatever_it_does_next` and, through
/// a sharded pipeline, `tests/shard_threads.rs`.)
#[test]
fn a_lent_state_is_the_saved_state_however_the_day_goes_on() {
    let venue = two_by_two(64);
    let mut h = Harness::started(venue.clone());
    h.enter(A, order("a1", b'B', 100, px(10_00)));
    h.enter(A, order("a2", b'S', 100, px(11_00)));
    h.cancel(A, "a1", 0);
    assert!(
        h.replace(A, replace("a1", "dead", 100, px(10_00)))
            .is_empty()
    );
    let mut saved = Vec::new();
    h.ex.save_state(&mut saved).unwrap();
    let mut lent = super::LentState::with_capacity(0);
    h.ex.save_state_lending(&mut lent).unwrap();
    assert!(
        lent.encoded_bytes() < saved.len(),
        "the slot arrays are lent, not encoded"
    );
    assert_eq!(lent.to_vec(), saved, "at the point");
    assert_eq!(
        kinds(&h.enter(A, order("b1", b'B', 5, px(9_00))))[0],
        "0:AL"
    );
    assert_eq!(
        kinds(&h.replace(A, replace("a2", "a2r", 100, px(11_50))))[0],
        "0:UL"
    );
    for i in 0..20 {
        h.enter(B, order(&format!("n{i}"), b'S', 1, px(12_00)));
    }
    let mut later = Vec::new();
    h.ex.save_state(&mut later).unwrap();
    assert_ne!(later, saved);
    drop(h);
    assert_eq!(lent.to_vec(), saved, "after the day went on");
    let restored = Exchange::from_state(venue, &lent.to_vec()).unwrap();
    assert_eq!(
        restored.state_digest(),
        Exchange::from_state(two_by_two(64), &saved)
            .unwrap()
            .state_digest()
    );
}
