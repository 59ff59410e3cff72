//! Golden byte vectors written by hand from the layout tables of PROTOCOLS.md (sections 2.2,
//! 2.3 and 4.2): one message of each type, fields concatenated in table order.

use crate::types::{Alpha, MatchNumber, OrderRef, Price, Shares, Timestamp, Token};
use crate::wire::DecodeError;
use crate::wire::itch::{self, Body, Header, Imbalance, StockDirectory};
use crate::wire::ouch::*;

fn cat(parts: &[&[u8]]) -> Vec<u8> {
    parts.concat()
}

const TOKEN: &[u8; 14] = b"ORD0000000001 ";
const TOKEN2: &[u8; 14] = b"ORD0000000002 ";
/// 34 200 000 000 000 ns = 09:30:00 as 8 bytes (OUCH) ...
const TS8: &[u8] = &[0x00, 0x00, 0x1f, 0x1a, 0xce, 0xd9, 0xf0, 0x00];
/// ... and as 6 bytes (ITCH).
const TS6: &[u8] = &[0x1f, 0x1a, 0xce, 0xd9, 0xf0, 0x00];
const T: Timestamp = Timestamp(34_200_000_000_000);

fn token(b: &[u8; 14]) -> Token {
    Alpha(*b)
}

fn check_inbound(m: Inbound, bytes: Vec<u8>) {
    let mut buf = [0u8; 96];
    let n = m.encode(&mut buf);
    assert_eq!(&buf[..n], &bytes[..], "encode {m:?}");
    assert_eq!(Inbound::decode(&bytes), Ok(m));
}

fn check_outbound(m: Outbound, bytes: Vec<u8>) {
    let mut buf = [0u8; 96];
    let n = m.encode(&mut buf);
    assert_eq!(&buf[..n], &bytes[..], "encode {m:?}");
    assert_eq!(Outbound::decode(&bytes), Ok(m));
}

#[test]
fn ouch_inbound_golden() {
    let enter = EnterOrder {
        token: token(TOKEN),
        side: b'B',
        shares: Shares(100),
        stock: Alpha(*b"AAPL    "),
        price: Price(1_502_500),
        tif: 99_998,
        firm: Alpha(*b"FIRM"),
        display: b'Y',
        capacity: b'A',
        intermarket_sweep: b'N',
        min_qty: Shares(0),
        cross_type: b'N',
        customer_type: b'R',
    };
    check_inbound(
        Inbound::Enter(enter),
        cat(&[
            b"O",
            TOKEN,
            b"B",
            &[0, 0, 0, 100],
            b"AAPL    ",
            &[0x00, 0x16, 0xed, 0x24],
            &[0x00, 0x01, 0x86, 0x9e],
            b"FIRM",
            b"Y",
            b"A",
            b"N",
            &[0, 0, 0, 0],
            b"N",
            b"R",
        ]),
    );
    let replace = ReplaceOrder {
        existing: token(TOKEN),
        replacement: token(TOKEN2),
        shares: Shares(500),
        price: Price(1_502_600),
        tif: 0,
        display: b'A',
        intermarket_sweep: b'Y',
        min_qty: Shares(100),
    };
    check_inbound(
        Inbound::Replace(replace),
        cat(&[
            b"U",
            TOKEN,
            TOKEN2,
            &[0, 0, 0x01, 0xf4],
            &[0x00, 0x16, 0xed, 0x88],
            &[0, 0, 0, 0],
            b"A",
            b"Y",
            &[0, 0, 0, 100],
        ]),
    );
    check_inbound(
        Inbound::Cancel(CancelOrder {
            token: token(TOKEN),
            shares: Shares(0),
        }),
        cat(&[b"X", TOKEN, &[0, 0, 0, 0]]),
    );
    check_inbound(
        Inbound::Modify(ModifyOrder {
            token: token(TOKEN),
            side: b'T',
            shares: Shares(300),
        }),
        cat(&[b"M", TOKEN, b"T", &[0, 0, 0x01, 0x2c]]),
    );
}

fn accepted() -> Accepted {
    Accepted {
        timestamp: T,
        token: token(TOKEN),
        side: b'S',
        shares: Shares(200),
        stock: Alpha(*b"MSFT    "),
        price: Price(4_000_000),
        tif: 99_999,
        firm: Alpha(*b"BRKA"),
        display: b'A',
        order_ref: OrderRef(42),
        capacity: b'P',
        intermarket_sweep: b'N',
        min_qty: Shares(0),
        cross_type: b'N',
        order_state: b'L',
        bbo_weight: b' ',
    }
}

/// Bytes 23..65 of Accepted/Replaced for [`accepted`].
fn accepted_middle() -> Vec<u8> {
    cat(&[
        b"S",
        &[0, 0, 0, 200],
        b"MSFT    ",
        &[0x00, 0x3d, 0x09, 0x00],
        &[0x00, 0x01, 0x86, 0x9f],
        b"BRKA",
        b"A",
        &[0, 0, 0, 0, 0, 0, 0, 42],
        b"P",
        b"N",
        &[0, 0, 0, 0],
        b"N",
        b"L",
    ])
}

#[test]
fn ouch_outbound_golden() {
    check_outbound(
        Outbound::SystemEvent(SystemEvent {
            timestamp: T,
            event: b'S',
        }),
        cat(&[b"S", TS8, b"S"]),
    );
    check_outbound(
        Outbound::Accepted(accepted()),
        cat(&[b"A", TS8, TOKEN, &accepted_middle(), b" "]),
    );
    let a = accepted();
    let replaced = Replaced {
        timestamp: a.timestamp,
        token: token(TOKEN2),
        side: a.side,
        shares: a.shares,
        stock: a.stock,
        price: a.price,
        tif: a.tif,
        firm: a.firm,
        display: a.display,
        order_ref: a.order_ref,
        capacity: a.capacity,
        intermarket_sweep: a.intermarket_sweep,
        min_qty: a.min_qty,
        cross_type: a.cross_type,
        order_state: a.order_state,
        previous_token: token(TOKEN),
        bbo_weight: b'0',
    };
    check_outbound(
        Outbound::Replaced(replaced),
        cat(&[b"U", TS8, TOKEN2, &accepted_middle(), TOKEN, b"0"]),
    );
    check_outbound(
        Outbound::Canceled(Canceled {
            timestamp: T,
            token: token(TOKEN),
            decrement: Shares(7),
            reason: b'U',
        }),
        cat(&[b"C", TS8, TOKEN, &[0, 0, 0, 7], b"U"]),
    );
    check_outbound(
        Outbound::AiqCanceled(AiqCanceled {
            timestamp: T,
            token: token(TOKEN),
            decrement: Shares(100),
            reason: b'Q',
            prevented: Shares(50),
            price: Price(1_000_000),
            liquidity: b'R',
        }),
        cat(&[
            b"D",
            TS8,
            TOKEN,
            &[0, 0, 0, 100],
            b"Q",
            &[0, 0, 0, 50],
            &[0x00, 0x0f, 0x42, 0x40],
            b"R",
        ]),
    );
    check_outbound(
        Outbound::Executed(Executed {
            timestamp: T,
            token: token(TOKEN),
            shares: Shares(100),
            price: Price(1_502_500),
            liquidity: b'A',
            match_number: MatchNumber(777),
        }),
        cat(&[
            b"E",
            TS8,
            TOKEN,
            &[0, 0, 0, 100],
            &[0x00, 0x16, 0xed, 0x24],
            b"A",
            &[0, 0, 0, 0, 0, 0, 0x03, 0x09],
        ]),
    );
    check_outbound(
        Outbound::BrokenTrade(BrokenTrade {
            timestamp: T,
            token: token(TOKEN),
            match_number: MatchNumber(777),
            reason: b'E',
        }),
        cat(&[b"B", TS8, TOKEN, &[0, 0, 0, 0, 0, 0, 0x03, 0x09], b"E"]),
    );
    check_outbound(
        Outbound::Rejected(Rejected {
            timestamp: T,
            token: token(TOKEN),
            reason: b'H',
        }),
        cat(&[b"J", TS8, TOKEN, b"H"]),
    );
    check_outbound(
        Outbound::CancelPending(TokenOnly {
            timestamp: T,
            token: token(TOKEN),
        }),
        cat(&[b"P", TS8, TOKEN]),
    );
    check_outbound(
        Outbound::CancelReject(TokenOnly {
            timestamp: T,
            token: token(TOKEN),
        }),
        cat(&[b"I", TS8, TOKEN]),
    );
    check_outbound(
        Outbound::PriorityUpdate(PriorityUpdate {
            timestamp: T,
            token: token(TOKEN),
            price: Price(1_502_500),
            display: b'Y',
            order_ref: OrderRef(43),
        }),
        cat(&[
            b"T",
            TS8,
            TOKEN,
            &[0x00, 0x16, 0xed, 0x24],
            b"Y",
            &[0, 0, 0, 0, 0, 0, 0, 43],
        ]),
    );
    check_outbound(
        Outbound::OrderModified(OrderModified {
            timestamp: T,
            token: token(TOKEN),
            side: b'E',
            shares: Shares(99),
        }),
        cat(&[b"M", TS8, TOKEN, b"E", &[0, 0, 0, 99]]),
    );
}

#[test]
fn ouch_direction_matters_for_u_and_m() {
    // A 47-byte `U` is a Replace Order inbound but the wrong length outbound, and vice versa.
    let replace = cat(&[b"U", TOKEN, TOKEN2, &[0; 18]]);
    assert!(Inbound::decode(&replace).is_ok());
    assert_eq!(
        Outbound::decode(&replace),
        Err(DecodeError::WrongLength {
            kind: b'U',
            expected: 80,
            actual: 47
        })
    );
    let modified = cat(&[b"M", TS8, TOKEN, b"E", &[0, 0, 0, 99]]);
    assert!(Outbound::decode(&modified).is_ok());
    assert_eq!(
        Inbound::decode(&modified),
        Err(DecodeError::WrongLength {
            kind: b'M',
            expected: 20,
            actual: 28
        })
    );
    assert_eq!(Outbound::decode(b"O"), Err(DecodeError::UnknownType(b'O')));
    assert_eq!(Inbound::decode(b"A"), Err(DecodeError::UnknownType(b'A')));
    assert_eq!(Outbound::decode(b""), Err(DecodeError::Empty));
}

fn check_itch(body: Body, fields: &[&[u8]]) {
    let header = Header {
        locate: 2,
        tracking: 3,
        timestamp: T,
    };
    let m = itch::Message { header, body };
    let mut want = vec![body.kind(), 0, 2, 0, 3];
    want.extend_from_slice(TS6);
    want.extend_from_slice(&fields.concat());
    let mut buf = [0u8; 64];
    let n = m.encode(&mut buf);
    assert_eq!(&buf[..n], &want[..], "encode {m:?}");
    assert_eq!(itch::Message::decode(&want), Ok(m));
}

#[test]
fn itch_golden() {
    let aapl = Alpha(*b"AAPL    ");
    const REF: &[u8] = &[0, 0, 0, 0, 0, 0x12, 0xd6, 0x87]; // 1 234 567
    const MATCH: &[u8] = &[0, 0, 0, 0, 0, 0, 0x03, 0x09]; // 777
    const PX: &[u8] = &[0x00, 0x16, 0xed, 0x24]; // 150.2500
    check_itch(Body::SystemEvent { event: b'O' }, &[b"O"]);
    check_itch(
        Body::StockDirectory(StockDirectory {
            stock: aapl,
            market_category: b'Q',
            financial_status: b'N',
            round_lot_size: 100,
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
        }),
        &[
            b"AAPL    ",
            b"Q",
            b"N",
            &[0, 0, 0, 100],
            b"N",
            b"C",
            b"C ",
            b"P",
            b"N",
            b"N",
            b"1",
            b"N",
            &[0; 4],
            b"N",
        ],
    );
    check_itch(
        Body::TradingAction {
            stock: aapl,
            state: b'H',
            reserved: b' ',
            reason: *b"T1  ",
        },
        &[b"AAPL    ", b"H", b" ", b"T1  "],
    );
    check_itch(
        Body::RegSho {
            stock: aapl,
            action: b'1',
        },
        &[b"AAPL    ", b"1"],
    );
    check_itch(
        Body::ParticipantPosition {
            mpid: Alpha(*b"BRKA"),
            stock: aapl,
            primary: b'Y',
            mode: b'N',
            state: b'A',
        },
        &[b"BRKA", b"AAPL    ", b"Y", b"N", b"A"],
    );
    check_itch(
        Body::AddOrder {
            order_ref: OrderRef(1_234_567),
            side: b'B',
            shares: Shares(300),
            stock: aapl,
            price: Price(1_502_500),
        },
        &[REF, b"B", &[0, 0, 0x01, 0x2c], b"AAPL    ", PX],
    );
    check_itch(
        Body::AddOrderMpid {
            order_ref: OrderRef(1_234_567),
            side: b'S',
            shares: Shares(300),
            stock: aapl,
            price: Price(1_502_500),
            attribution: Alpha(*b"BRKA"),
        },
        &[REF, b"S", &[0, 0, 0x01, 0x2c], b"AAPL    ", PX, b"BRKA"],
    );
    check_itch(
        Body::OrderExecuted {
            order_ref: OrderRef(1_234_567),
            shares: Shares(100),
            match_number: MatchNumber(777),
        },
        &[REF, &[0, 0, 0, 100], MATCH],
    );
    check_itch(
        Body::OrderExecutedWithPrice {
            order_ref: OrderRef(1_234_567),
            shares: Shares(100),
            match_number: MatchNumber(777),
            printable: b'Y',
            price: Price(1_502_500),
        },
        &[REF, &[0, 0, 0, 100], MATCH, b"Y", PX],
    );
    check_itch(
        Body::OrderCancel {
            order_ref: OrderRef(1_234_567),
            shares: Shares(200),
        },
        &[REF, &[0, 0, 0, 200]],
    );
    check_itch(
        Body::OrderDelete {
            order_ref: OrderRef(1_234_567),
        },
        &[REF],
    );
    check_itch(
        Body::OrderReplace {
            old_ref: OrderRef(1_234_567),
            new_ref: OrderRef(5),
            shares: Shares(250),
            price: Price(1_502_600),
        },
        &[
            REF,
            &[0, 0, 0, 0, 0, 0, 0, 5],
            &[0, 0, 0, 250],
            &[0x00, 0x16, 0xed, 0x88],
        ],
    );
    check_itch(
        Body::Trade {
            order_ref: OrderRef(0),
            side: b'B',
            shares: Shares(100),
            stock: aapl,
            price: Price(1_502_500),
            match_number: MatchNumber(777),
        },
        &[&[0; 8], b"B", &[0, 0, 0, 100], b"AAPL    ", PX, MATCH],
    );
    check_itch(
        Body::CrossTrade {
            shares: 0x1_0000_0001, // needs all 8 bytes
            stock: aapl,
            price: Price(1_502_500),
            match_number: MatchNumber(777),
            cross_type: b'O',
        },
        &[
            &[0, 0, 0, 0x01, 0, 0, 0, 0x01],
            b"AAPL    ",
            PX,
            MATCH,
            b"O",
        ],
    );
    check_itch(
        Body::BrokenTrade {
            match_number: MatchNumber(777),
        },
        &[MATCH],
    );
    check_itch(
        Body::Imbalance(Imbalance {
            paired_shares: 1000,
            imbalance_shares: 200,
            direction: b'B',
            stock: aapl,
            far_price: Price(1_502_500),
            near_price: Price(1_502_600),
            reference_price: Price(1_502_500),
            cross_type: b'C',
            price_variation: b'L',
        }),
        &[
            &[0, 0, 0, 0, 0, 0, 0x03, 0xe8],
            &[0, 0, 0, 0, 0, 0, 0, 200],
            b"B",
            b"AAPL    ",
            PX,
            &[0x00, 0x16, 0xed, 0x88],
            PX,
            b"C",
            b"L",
        ],
    );
}

#[test]
fn itch_skipped_types_are_typed_and_length_checked() {
    for (kind, len) in [
        (b'V', 35),
        (b'W', 12),
        (b'K', 28),
        (b'J', 35),
        (b'h', 21),
        (b'N', 20),
        (b'O', 48),
    ] {
        let mut bytes = vec![0u8; len];
        bytes[0] = kind;
        bytes[2] = 9; // locate 9
        assert_eq!(itch::known_len(kind), Some(len));
        let header = Header {
            locate: 9,
            tracking: 0,
            timestamp: Timestamp(0),
        };
        assert_eq!(
            itch::decode_any(&bytes),
            Ok(itch::Decoded::Skipped { kind, header })
        );
        assert_eq!(
            itch::Message::decode(&bytes),
            Err(DecodeError::UnknownType(kind))
        );
        bytes.push(0);
        assert_eq!(
            itch::decode_any(&bytes),
            Err(DecodeError::WrongLength {
                kind,
                expected: len,
                actual: len + 1
            })
        );
    }
    assert_eq!(itch::decode_any(b"Z"), Err(DecodeError::UnknownType(b'Z')));
    assert_eq!(itch::decode_any(b""), Err(DecodeError::Empty));
}

#[test]
fn itch_timestamp_is_48_bits() {
    let m = itch::Message {
        header: Header {
            locate: 0,
            tracking: 0,
            timestamp: Timestamp((1 << 48) + 5),
        },
        body: Body::SystemEvent { event: b'C' },
    };
    let mut buf = [0u8; 12];
    m.encode(&mut buf);
    assert_eq!(&buf[5..11], &[0, 0, 0, 0, 0, 5]);
}
