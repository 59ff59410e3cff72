//! proptest strategies for every message of every protocol.
//!
//! `*_any` strategies fill every byte field with any byte (the codecs must carry values they do
//! not understand); `*_realistic` ones keep code fields within the published code tables so that
//! strict independent decoders (itchy) accept them.

use crate::types::{Alpha, MatchNumber, OrderRef, Price, Shares, Timestamp};
use crate::wire::ascii::SessionId;
use crate::wire::itch::{self, Body, Header, Imbalance, StockDirectory};
use crate::wire::ouch::*;
use crate::wire::soupbin::{LoginRequest, MAX_HEARTBEAT_TIMEOUT_MS, Packet};
use proptest::prelude::*;
use proptest::sample::select;

pub fn alpha<const N: usize>() -> impl Strategy<Value = Alpha<N>> {
    any::<[u8; N]>().prop_map(Alpha)
}

fn price() -> impl Strategy<Value = Price> {
    any::<u32>().prop_map(Price)
}

fn shares() -> impl Strategy<Value = Shares> {
    any::<u32>().prop_map(Shares)
}

fn ouch_ts() -> impl Strategy<Value = Timestamp> {
    any::<u64>().prop_map(Timestamp)
}

pub fn inbound() -> impl Strategy<Value = Inbound> {
    let enter = (
        (
            alpha(),
            any::<u8>(),
            shares(),
            alpha(),
            price(),
            any::<u32>(),
            alpha(),
        ),
        (any::<[u8; 3]>(), shares(), any::<u8>(), any::<u8>()),
    )
        .prop_map(
            |((token, side, shares, stock, price, tif, firm), (b3, min_qty, ct, cu))| {
                Inbound::Enter(EnterOrder {
                    token,
                    side,
                    shares,
                    stock,
                    price,
                    tif,
                    firm,
                    display: b3[0],
                    capacity: b3[1],
                    intermarket_sweep: b3[2],
                    min_qty,
                    cross_type: ct,
                    customer_type: cu,
                })
            },
        );
    let replace = (
        alpha(),
        alpha(),
        shares(),
        price(),
        any::<u32>(),
        any::<[u8; 2]>(),
        shares(),
    )
        .prop_map(|(existing, replacement, shares, price, tif, b2, min_qty)| {
            Inbound::Replace(ReplaceOrder {
                existing,
                replacement,
                shares,
                price,
                tif,
                display: b2[0],
                intermarket_sweep: b2[1],
                min_qty,
            })
        });
    let cancel = (alpha(), shares())
        .prop_map(|(token, shares)| Inbound::Cancel(CancelOrder { token, shares }));
    let modify = (alpha(), any::<u8>(), shares()).prop_map(|(token, side, shares)| {
        Inbound::Modify(ModifyOrder {
            token,
            side,
            shares,
        })
    });
    prop_oneof![enter, replace, cancel, modify]
}

/// Fields shared by Accepted and Replaced, generated together.
type AcceptedCore = (
    (Timestamp, Token, u8, Shares, Symbol, Price, u32, Firm),
    ([u8; 6], OrderRef, Shares),
);

fn accepted_core() -> impl Strategy<Value = AcceptedCore> {
    (
        (
            ouch_ts(),
            alpha(),
            any::<u8>(),
            shares(),
            alpha(),
            price(),
            any::<u32>(),
            alpha(),
        ),
        (any::<[u8; 6]>(), any::<u64>().prop_map(OrderRef), shares()),
    )
}

use crate::types::{Firm, Symbol, Token};

pub fn outbound() -> impl Strategy<Value = Outbound> {
    let system = (ouch_ts(), any::<u8>())
        .prop_map(|(timestamp, event)| Outbound::SystemEvent(SystemEvent { timestamp, event }));
    let accepted = accepted_core().prop_map(
        |((ts, token, side, shares, stock, price, tif, firm), (b, order_ref, min_qty))| {
            Outbound::Accepted(Accepted {
                timestamp: ts,
                token,
                side,
                shares,
                stock,
                price,
                tif,
                firm,
                display: b[0],
                order_ref,
                capacity: b[1],
                intermarket_sweep: b[2],
                min_qty,
                cross_type: b[3],
                order_state: b[4],
                bbo_weight: b[5],
            })
        },
    );
    let replaced = (accepted_core(), alpha()).prop_map(
        |(
            ((ts, token, side, shares, stock, price, tif, firm), (b, order_ref, min_qty)),
            previous_token,
        )| {
            Outbound::Replaced(Replaced {
                timestamp: ts,
                token,
                side,
                shares,
                stock,
                price,
                tif,
                firm,
                display: b[0],
                order_ref,
                capacity: b[1],
                intermarket_sweep: b[2],
                min_qty,
                cross_type: b[3],
                order_state: b[4],
                previous_token,
                bbo_weight: b[5],
            })
        },
    );
    let canceled = (ouch_ts(), alpha(), shares(), any::<u8>()).prop_map(
        |(timestamp, token, decrement, reason)| {
            Outbound::Canceled(Canceled {
                timestamp,
                token,
                decrement,
                reason,
            })
        },
    );
    let aiq = (
        ouch_ts(),
        alpha(),
        shares(),
        any::<u8>(),
        shares(),
        price(),
        any::<u8>(),
    )
        .prop_map(
            |(timestamp, token, decrement, reason, prevented, price, liquidity)| {
                Outbound::AiqCanceled(AiqCanceled {
                    timestamp,
                    token,
                    decrement,
                    reason,
                    prevented,
                    price,
                    liquidity,
                })
            },
        );
    let executed = (
        ouch_ts(),
        alpha(),
        shares(),
        price(),
        any::<u8>(),
        any::<u64>(),
    )
        .prop_map(|(timestamp, token, shares, price, liquidity, m)| {
            Outbound::Executed(Executed {
                timestamp,
                token,
                shares,
                price,
                liquidity,
                match_number: MatchNumber(m),
            })
        });
    let broken = (ouch_ts(), alpha(), any::<u64>(), any::<u8>()).prop_map(
        |(timestamp, token, m, reason)| {
            Outbound::BrokenTrade(BrokenTrade {
                timestamp,
                token,
                match_number: MatchNumber(m),
                reason,
            })
        },
    );
    let rejected = (ouch_ts(), alpha(), any::<u8>()).prop_map(|(timestamp, token, reason)| {
        Outbound::Rejected(Rejected {
            timestamp,
            token,
            reason,
        })
    });
    let pending = (ouch_ts(), alpha())
        .prop_map(|(timestamp, token)| Outbound::CancelPending(TokenOnly { timestamp, token }));
    let cancel_reject = (ouch_ts(), alpha())
        .prop_map(|(timestamp, token)| Outbound::CancelReject(TokenOnly { timestamp, token }));
    let priority = (ouch_ts(), alpha(), price(), any::<u8>(), any::<u64>()).prop_map(
        |(timestamp, token, price, display, r)| {
            Outbound::PriorityUpdate(PriorityUpdate {
                timestamp,
                token,
                price,
                display,
                order_ref: OrderRef(r),
            })
        },
    );
    let modified =
        (ouch_ts(), alpha(), any::<u8>(), shares()).prop_map(|(timestamp, token, side, shares)| {
            Outbound::OrderModified(OrderModified {
                timestamp,
                token,
                side,
                shares,
            })
        });
    prop_oneof![
        system,
        accepted,
        replaced,
        canceled,
        aiq,
        executed,
        broken,
        rejected,
        pending,
        cancel_reject,
        priority,
        modified
    ]
}

/// Codes used by `realistic` ITCH bodies; `any` bodies take any byte instead.
#[derive(Clone, Copy)]
pub enum Codes {
    Any,
    Realistic,
}

fn code(codes: Codes, allowed: &'static [u8]) -> BoxedStrategy<u8> {
    match codes {
        Codes::Any => any::<u8>().boxed(),
        Codes::Realistic => select(allowed).boxed(),
    }
}

fn text<const N: usize>(codes: Codes) -> BoxedStrategy<Alpha<N>> {
    match codes {
        Codes::Any => alpha::<N>().boxed(),
        Codes::Realistic => {
            proptest::collection::vec(select(&b"ABCDEFGHIJKLMNOPQRSTUVWXYZ"[..]), 1..=N)
                .prop_map(|letters| {
                    let mut field = [b' '; N];
                    field[..letters.len()].copy_from_slice(&letters);
                    Alpha(field)
                })
                .boxed()
        }
    }
}

pub fn itch_header() -> impl Strategy<Value = Header> {
    (any::<u16>(), any::<u16>(), 0u64..(1 << 48)).prop_map(|(locate, tracking, ts)| Header {
        locate,
        tracking,
        timestamp: Timestamp(ts),
    })
}

fn stock_directory(c: Codes) -> impl Strategy<Value = Body> {
    (
        (
            text::<8>(c),
            code(c, b"QGSNAPZV "),
            code(c, b"NDEQSGHJKC "),
            any::<u32>(),
            code(c, b"YN"),
        ),
        (
            code(c, b"ABCFILNOPQRSTUVW"),
            code(c, b"ACDEFGIJLMNOPQRSTUVWXYZ"),
            code(c, b"PT"),
        ),
        (
            code(c, b"YN "),
            code(c, b"YN "),
            code(c, b"12 "),
            code(c, b"YN "),
            any::<u32>(),
            code(c, b"YN"),
        ),
        any::<u8>(),
    )
        .prop_map(
            move |(
                (stock, mc, fs, lot, rlo),
                (class, sub, auth),
                (ssti, ipo, luld, etp, lev, inv),
                sub2,
            )| {
                // Realistic sub-types are one letter then a space.
                let sub_type = match c {
                    Codes::Any => [sub, sub2],
                    Codes::Realistic => [sub, b' '],
                };
                Body::StockDirectory(StockDirectory {
                    stock,
                    market_category: mc,
                    financial_status: fs,
                    round_lot_size: lot,
                    round_lots_only: rlo,
                    issue_classification: class,
                    issue_sub_type: sub_type,
                    authenticity: auth,
                    short_sale_threshold: ssti,
                    ipo_flag: ipo,
                    luld_tier: luld,
                    etp_flag: etp,
                    etp_leverage: lev,
                    inverse: inv,
                })
            },
        )
}

fn imbalance(c: Codes) -> impl Strategy<Value = Body> {
    (
        (any::<u64>(), any::<u64>(), code(c, b"BSNO"), text::<8>(c)),
        (
            price(),
            price(),
            price(),
            code(c, b"OCH"),
            code(c, b"L123456789ABC "),
        ),
    )
        .prop_map(
            |((paired, imb, dir, stock), (far, near, reference, cross, var))| {
                Body::Imbalance(Imbalance {
                    paired_shares: paired,
                    imbalance_shares: imb,
                    direction: dir,
                    stock,
                    far_price: far,
                    near_price: near,
                    reference_price: reference,
                    cross_type: cross,
                    price_variation: var,
                })
            },
        )
}

fn order_ref() -> impl Strategy<Value = OrderRef> {
    any::<u64>().prop_map(OrderRef)
}

fn match_number() -> impl Strategy<Value = MatchNumber> {
    any::<u64>().prop_map(MatchNumber)
}

const HALT_REASONS: [[u8; 4]; 5] = [*b"T1  ", *b"H10 ", *b"LUDP", *b"    ", *b"IPO1"];

pub fn itch_body(c: Codes) -> impl Strategy<Value = Body> {
    let reason = match c {
        Codes::Any => any::<[u8; 4]>().boxed(),
        Codes::Realistic => select(&HALT_REASONS[..]).boxed(),
    };
    prop_oneof![
        code(c, b"OSQMEC").prop_map(|event| Body::SystemEvent { event }),
        stock_directory(c),
        (text::<8>(c), code(c, b"HPQT"), code(c, b" "), reason).prop_map(
            |(stock, state, reserved, reason)| Body::TradingAction {
                stock,
                state,
                reserved,
                reason
            }
        ),
        (text::<8>(c), code(c, b"012")).prop_map(|(stock, action)| Body::RegSho { stock, action }),
        (
            text::<4>(c),
            text::<8>(c),
            code(c, b"YN"),
            code(c, b"NPSRL"),
            code(c, b"AEWSD")
        )
            .prop_map(
                |(mpid, stock, primary, mode, state)| Body::ParticipantPosition {
                    mpid,
                    stock,
                    primary,
                    mode,
                    state
                }
            ),
        (order_ref(), code(c, b"BS"), shares(), text::<8>(c), price()).prop_map(
            |(order_ref, side, shares, stock, price)| Body::AddOrder {
                order_ref,
                side,
                shares,
                stock,
                price
            }
        ),
        (
            order_ref(),
            code(c, b"BS"),
            shares(),
            text::<8>(c),
            price(),
            text::<4>(c)
        )
            .prop_map(|(order_ref, side, shares, stock, price, attribution)| {
                Body::AddOrderMpid {
                    order_ref,
                    side,
                    shares,
                    stock,
                    price,
                    attribution,
                }
            }),
        (order_ref(), shares(), match_number()).prop_map(|(order_ref, shares, match_number)| {
            Body::OrderExecuted {
                order_ref,
                shares,
                match_number,
            }
        }),
        (
            order_ref(),
            shares(),
            match_number(),
            code(c, b"YN"),
            price()
        )
            .prop_map(|(order_ref, shares, match_number, printable, price)| {
                Body::OrderExecutedWithPrice {
                    order_ref,
                    shares,
                    match_number,
                    printable,
                    price,
                }
            }),
        (order_ref(), shares())
            .prop_map(|(order_ref, shares)| Body::OrderCancel { order_ref, shares }),
        order_ref().prop_map(|order_ref| Body::OrderDelete { order_ref }),
        (order_ref(), order_ref(), shares(), price()).prop_map(
            |(old_ref, new_ref, shares, price)| {
                Body::OrderReplace {
                    old_ref,
                    new_ref,
                    shares,
                    price,
                }
            }
        ),
        (
            order_ref(),
            code(c, b"BS"),
            shares(),
            text::<8>(c),
            price(),
            match_number()
        )
            .prop_map(|(order_ref, side, shares, stock, price, match_number)| {
                Body::Trade {
                    order_ref,
                    side,
                    shares,
                    stock,
                    price,
                    match_number,
                }
            }),
        (
            any::<u64>(),
            text::<8>(c),
            price(),
            match_number(),
            code(c, b"OCHI")
        )
            .prop_map(|(shares, stock, price, match_number, cross_type)| {
                Body::CrossTrade {
                    shares,
                    stock,
                    price,
                    match_number,
                    cross_type,
                }
            }),
        match_number().prop_map(|match_number| Body::BrokenTrade { match_number }),
        imbalance(c),
    ]
}

pub fn itch_message(c: Codes) -> impl Strategy<Value = itch::Message> {
    (itch_header(), itch_body(c)).prop_map(|(header, body)| itch::Message { header, body })
}

pub fn session() -> impl Strategy<Value = SessionId> {
    proptest::collection::vec(select(&b"ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"[..]), 0..=10)
        .prop_map(|b| SessionId::new(std::str::from_utf8(&b).expect("ascii")).expect("<= 10"))
}

pub fn login_request() -> impl Strategy<Value = LoginRequest> {
    (
        alpha(),
        alpha(),
        session(),
        any::<u64>(),
        proptest::option::of(0..=MAX_HEARTBEAT_TIMEOUT_MS),
    )
        .prop_map(
            |(username, password, session, sequence, heartbeat_timeout_ms)| LoginRequest {
                username,
                password,
                session,
                sequence,
                heartbeat_timeout_ms,
            },
        )
}

/// SoupBinTCP packets; data payloads come from `payloads` (owned, borrowed by the caller).
#[derive(Clone, Debug)]
pub enum OwnedPacket {
    Debug(Vec<u8>),
    LoginAccepted(SessionId, u64),
    LoginRejected(u8),
    Sequenced(Vec<u8>),
    Unsequenced(Vec<u8>),
    ServerHeartbeat,
    EndOfSession,
    Login(LoginRequest),
    ClientHeartbeat,
    Logout,
}

impl OwnedPacket {
    pub fn packet(&self) -> Packet<'_> {
        match self {
            OwnedPacket::Debug(d) => Packet::Debug(d),
            OwnedPacket::LoginAccepted(session, sequence) => Packet::LoginAccepted {
                session: *session,
                sequence: *sequence,
            },
            OwnedPacket::LoginRejected(reason) => Packet::LoginRejected { reason: *reason },
            OwnedPacket::Sequenced(d) => Packet::SequencedData(d),
            OwnedPacket::Unsequenced(d) => Packet::UnsequencedData(d),
            OwnedPacket::ServerHeartbeat => Packet::ServerHeartbeat,
            OwnedPacket::EndOfSession => Packet::EndOfSession,
            OwnedPacket::Login(l) => Packet::LoginRequest(*l),
            OwnedPacket::ClientHeartbeat => Packet::ClientHeartbeat,
            OwnedPacket::Logout => Packet::LogoutRequest,
        }
    }
}

pub fn soupbin_packet(max_payload: usize) -> impl Strategy<Value = OwnedPacket> {
    let data = move || proptest::collection::vec(any::<u8>(), 0..=max_payload);
    prop_oneof![
        data().prop_map(OwnedPacket::Debug),
        (session(), any::<u64>()).prop_map(|(s, n)| OwnedPacket::LoginAccepted(s, n)),
        any::<u8>().prop_map(OwnedPacket::LoginRejected),
        data().prop_map(OwnedPacket::Sequenced),
        data().prop_map(OwnedPacket::Unsequenced),
        Just(OwnedPacket::ServerHeartbeat),
        Just(OwnedPacket::EndOfSession),
        login_request().prop_map(OwnedPacket::Login),
        Just(OwnedPacket::ClientHeartbeat),
        Just(OwnedPacket::Logout),
    ]
}
