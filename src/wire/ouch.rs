//! OUCH 4.2 messages (PROTOCOLS.md section 2) as small `Copy` structs.
//!
//! Field values that the exchange validates (side, display, capacity, ...) are kept as the raw
//! bytes received so that the core, not the decoder, decides the reject code. Decoding only
//! checks the type letter and the exact length; it never panics on any input.
//!
//! Direction matters: `U` is Replace Order inbound (47 bytes) but Replaced outbound (80), `M` is
//! Modify Order inbound (20) but Order Modified outbound (28); use [`Inbound::decode`] on
//! client bytes and [`Outbound::decode`] on server bytes. Encoders write into caller buffers
//! ([`Inbound::encode`], [`Outbound::encode`], or `put` for a `bytes::BufMut`).
//!
//! Choices where PROTOCOLS.md marks something UNCONFIRMED:
//! - Exactly the lengths of PROTOCOLS.md 2.4 (the ones Wireshark's heuristic accepts): AIQ
//!   Canceled `D` is 37 bytes, without the AIQ Strategy byte one source reports; Enter Order is
//!   the 4.1+ 49-byte form with Customer Type, Accepted/Replaced are the 4.2 forms with BBO
//!   Weight. The 4.0/4.1 shorter forms are rejected as wrong lengths.
//! - Modify Order `M` is decoded and encoded (it exists in 4.2) although bourse does not offer it.
//! - The outbound types decoders know but bourse never sends (`G`, `F`, `K`) are unknown types.

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
    /// Self-trade prevention (DESIGN.md 4a).
    pub const SELF_MATCH: u8 = b'Q';
    /// Kill switch: `bourse admin cancel-all`.
    pub const SUPERVISORY: u8 = b'S';
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
    /// The account is blocked (kill switch; PROTOCOLS.md's "reject-all enabled").
    pub const BLOCKED: u8 = b'a';
    /// An account limit on open or day shares would be exceeded.
    pub const SHARES_LIMIT: u8 = b'm';
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
    #[inline]
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
        // Each arm views `b` as a fixed-size array so field reads need no bounds checks.
        let msg = match kind {
            b'O' => {
                let b = super::fixed::<{ inbound_len::ENTER }>(kind, b)?;
                Inbound::Enter(EnterOrder {
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
                })
            }
            b'U' => {
                let b = super::fixed::<{ inbound_len::REPLACE }>(kind, b)?;
                Inbound::Replace(ReplaceOrder {
                    existing: Alpha(array_at(b, 1)),
                    replacement: Alpha(array_at(b, 15)),
                    shares: Shares(u32_at(b, 29)),
                    price: Price(u32_at(b, 33)),
                    tif: u32_at(b, 37),
                    display: b[41],
                    intermarket_sweep: b[42],
                    min_qty: Shares(u32_at(b, 43)),
                })
            }
            b'X' => {
                let b = super::fixed::<{ inbound_len::CANCEL }>(kind, b)?;
                Inbound::Cancel(CancelOrder {
                    token: Alpha(array_at(b, 1)),
                    shares: Shares(u32_at(b, 15)),
                })
            }
            _ => {
                let b = super::fixed::<{ inbound_len::MODIFY }>(kind, b)?;
                Inbound::Modify(ModifyOrder {
                    token: Alpha(array_at(b, 1)),
                    side: b[15],
                    shares: Shares(u32_at(b, 16)),
                })
            }
        };
        Ok(msg)
    }
}

/// Fixed lengths of the outbound messages (PROTOCOLS.md 2.4; exactly what Wireshark accepts).
pub mod outbound_len {
    pub const SYSTEM_EVENT: usize = 10;
    pub const ACCEPTED: usize = 66;
    pub const REPLACED: usize = 80;
    pub const CANCELED: usize = 28;
    pub const AIQ_CANCELED: usize = 37;
    pub const EXECUTED: usize = 40;
    pub const BROKEN_TRADE: usize = 32;
    pub const REJECTED: usize = 24;
    pub const CANCEL_PENDING: usize = 23;
    pub const CANCEL_REJECT: usize = 23;
    pub const PRIORITY_UPDATE: usize = 36;
    pub const ORDER_MODIFIED: usize = 28;
}

/// Longest OUCH 4.2 message in either direction (Replaced), for sizing buffers.
pub const MAX_MESSAGE_LEN: usize = outbound_len::REPLACED;

/// Type letters. `U` and `M` mean different things per direction.
pub mod kind {
    pub const ENTER_ORDER: u8 = b'O';
    pub const REPLACE_ORDER: u8 = b'U';
    pub const CANCEL_ORDER: u8 = b'X';
    pub const MODIFY_ORDER: u8 = b'M';
    pub const SYSTEM_EVENT: u8 = b'S';
    pub const ACCEPTED: u8 = b'A';
    pub const REPLACED: u8 = b'U';
    pub const CANCELED: u8 = b'C';
    pub const AIQ_CANCELED: u8 = b'D';
    pub const EXECUTED: u8 = b'E';
    pub const BROKEN_TRADE: u8 = b'B';
    pub const REJECTED: u8 = b'J';
    pub const CANCEL_PENDING: u8 = b'P';
    pub const CANCEL_REJECT: u8 = b'I';
    pub const PRIORITY_UPDATE: u8 = b'T';
    pub const ORDER_MODIFIED: u8 = b'M';
}

fn start_message(buf: &mut [u8], msg_kind: u8, len: usize) -> &mut [u8] {
    assert!(
        buf.len() >= len,
        "buffer of {} bytes for a {len}-byte OUCH message",
        buf.len()
    );
    let out = &mut buf[..len];
    out[0] = msg_kind;
    out
}

impl Inbound {
    pub fn kind(&self) -> u8 {
        match self {
            Inbound::Enter(_) => kind::ENTER_ORDER,
            Inbound::Replace(_) => kind::REPLACE_ORDER,
            Inbound::Cancel(_) => kind::CANCEL_ORDER,
            Inbound::Modify(_) => kind::MODIFY_ORDER,
        }
    }

    pub fn encoded_len(&self) -> usize {
        match self {
            Inbound::Enter(_) => inbound_len::ENTER,
            Inbound::Replace(_) => inbound_len::REPLACE,
            Inbound::Cancel(_) => inbound_len::CANCEL,
            Inbound::Modify(_) => inbound_len::MODIFY,
        }
    }

    /// Write the message into `buf` (at least [`Inbound::encoded_len`] bytes); returns its length.
    pub fn encode(&self, buf: &mut [u8]) -> usize {
        use super::be::{put_bytes, put_u32};
        let len = self.encoded_len();
        let b = start_message(buf, self.kind(), len);
        match self {
            Inbound::Enter(m) => {
                put_bytes(b, 1, &m.token.0);
                b[15] = m.side;
                put_u32(b, 16, m.shares.0);
                put_bytes(b, 20, &m.stock.0);
                put_u32(b, 28, m.price.0);
                put_u32(b, 32, m.tif);
                put_bytes(b, 36, &m.firm.0);
                b[40] = m.display;
                b[41] = m.capacity;
                b[42] = m.intermarket_sweep;
                put_u32(b, 43, m.min_qty.0);
                b[47] = m.cross_type;
                b[48] = m.customer_type;
            }
            Inbound::Replace(m) => {
                put_bytes(b, 1, &m.existing.0);
                put_bytes(b, 15, &m.replacement.0);
                put_u32(b, 29, m.shares.0);
                put_u32(b, 33, m.price.0);
                put_u32(b, 37, m.tif);
                b[41] = m.display;
                b[42] = m.intermarket_sweep;
                put_u32(b, 43, m.min_qty.0);
            }
            Inbound::Cancel(m) => {
                put_bytes(b, 1, &m.token.0);
                put_u32(b, 15, m.shares.0);
            }
            Inbound::Modify(m) => {
                put_bytes(b, 1, &m.token.0);
                b[15] = m.side;
                put_u32(b, 16, m.shares.0);
            }
        }
        len
    }

    /// Append the encoded message to a `bytes::BufMut`.
    pub fn put(&self, out: &mut impl bytes::BufMut) {
        let mut scratch = [0u8; MAX_MESSAGE_LEN];
        let n = self.encode(&mut scratch);
        out.put_slice(&scratch[..n]);
    }
}

impl Outbound {
    pub fn kind(&self) -> u8 {
        match self {
            Outbound::SystemEvent(_) => kind::SYSTEM_EVENT,
            Outbound::Accepted(_) => kind::ACCEPTED,
            Outbound::Replaced(_) => kind::REPLACED,
            Outbound::Canceled(_) => kind::CANCELED,
            Outbound::AiqCanceled(_) => kind::AIQ_CANCELED,
            Outbound::Executed(_) => kind::EXECUTED,
            Outbound::BrokenTrade(_) => kind::BROKEN_TRADE,
            Outbound::Rejected(_) => kind::REJECTED,
            Outbound::CancelPending(_) => kind::CANCEL_PENDING,
            Outbound::CancelReject(_) => kind::CANCEL_REJECT,
            Outbound::PriorityUpdate(_) => kind::PRIORITY_UPDATE,
            Outbound::OrderModified(_) => kind::ORDER_MODIFIED,
        }
    }

    /// Fixed length of an outbound message type, `None` for letters that are not outbound.
    pub fn len_of(msg_kind: u8) -> Option<usize> {
        use outbound_len::*;
        Some(match msg_kind {
            kind::SYSTEM_EVENT => SYSTEM_EVENT,
            kind::ACCEPTED => ACCEPTED,
            kind::REPLACED => REPLACED,
            kind::CANCELED => CANCELED,
            kind::AIQ_CANCELED => AIQ_CANCELED,
            kind::EXECUTED => EXECUTED,
            kind::BROKEN_TRADE => BROKEN_TRADE,
            kind::REJECTED => REJECTED,
            kind::CANCEL_PENDING => CANCEL_PENDING,
            kind::CANCEL_REJECT => CANCEL_REJECT,
            kind::PRIORITY_UPDATE => PRIORITY_UPDATE,
            kind::ORDER_MODIFIED => ORDER_MODIFIED,
            _ => return None,
        })
    }

    pub fn encoded_len(&self) -> usize {
        Self::len_of(self.kind()).expect("every Outbound variant has a length")
    }

    /// Write the message into `buf` (at least [`Outbound::encoded_len`] bytes); returns its length.
    pub fn encode(&self, buf: &mut [u8]) -> usize {
        use super::be::{put_bytes, put_u32, put_u64};
        let len = self.encoded_len();
        let b = start_message(buf, self.kind(), len);
        let (timestamp, token) = self.timestamp_and_token();
        put_u64(b, 1, timestamp.0);
        if let Some(token) = token {
            put_bytes(b, 9, &token.0);
        }
        match self {
            Outbound::SystemEvent(m) => b[9] = m.event,
            Outbound::Accepted(m) => {
                encode_accepted_fields(b, &AcceptedFields::of_accepted(m));
                b[65] = m.bbo_weight;
            }
            Outbound::Replaced(m) => {
                encode_accepted_fields(b, &AcceptedFields::of_replaced(m));
                put_bytes(b, 65, &m.previous_token.0);
                b[79] = m.bbo_weight;
            }
            Outbound::Canceled(m) => {
                put_u32(b, 23, m.decrement.0);
                b[27] = m.reason;
            }
            Outbound::AiqCanceled(m) => {
                put_u32(b, 23, m.decrement.0);
                b[27] = m.reason;
                put_u32(b, 28, m.prevented.0);
                put_u32(b, 32, m.price.0);
                b[36] = m.liquidity;
            }
            Outbound::Executed(m) => {
                put_u32(b, 23, m.shares.0);
                put_u32(b, 27, m.price.0);
                b[31] = m.liquidity;
                put_u64(b, 32, m.match_number.0);
            }
            Outbound::BrokenTrade(m) => {
                put_u64(b, 23, m.match_number.0);
                b[31] = m.reason;
            }
            Outbound::Rejected(m) => b[23] = m.reason,
            Outbound::CancelPending(_) | Outbound::CancelReject(_) => {}
            Outbound::PriorityUpdate(m) => {
                put_u32(b, 23, m.price.0);
                b[27] = m.display;
                put_u64(b, 28, m.order_ref.0);
            }
            Outbound::OrderModified(m) => {
                b[23] = m.side;
                put_u32(b, 24, m.shares.0);
            }
        }
        len
    }

    /// Append the encoded message to a `bytes::BufMut`.
    pub fn put(&self, out: &mut impl bytes::BufMut) {
        let mut scratch = [0u8; MAX_MESSAGE_LEN];
        let n = self.encode(&mut scratch);
        out.put_slice(&scratch[..n]);
    }

    /// The timestamp every outbound message has, and the token all but System Event have.
    fn timestamp_and_token(&self) -> (Timestamp, Option<Token>) {
        match self {
            Outbound::SystemEvent(m) => (m.timestamp, None),
            Outbound::Accepted(m) => (m.timestamp, Some(m.token)),
            Outbound::Replaced(m) => (m.timestamp, Some(m.token)),
            Outbound::Canceled(m) => (m.timestamp, Some(m.token)),
            Outbound::AiqCanceled(m) => (m.timestamp, Some(m.token)),
            Outbound::Executed(m) => (m.timestamp, Some(m.token)),
            Outbound::BrokenTrade(m) => (m.timestamp, Some(m.token)),
            Outbound::Rejected(m) => (m.timestamp, Some(m.token)),
            Outbound::CancelPending(m) | Outbound::CancelReject(m) => (m.timestamp, Some(m.token)),
            Outbound::PriorityUpdate(m) => (m.timestamp, Some(m.token)),
            Outbound::OrderModified(m) => (m.timestamp, Some(m.token)),
        }
    }

    /// Decode one outbound OUCH 4.2 message (the payload of a SoupBinTCP `S` packet), checking
    /// the type letter and the exact length; field values are returned as received.
    pub fn decode(b: &[u8]) -> Result<Outbound, super::DecodeError> {
        use super::be::{array_at, u32_at, u64_at};
        use crate::types::Alpha;
        let msg_kind = *b.first().ok_or(super::DecodeError::Empty)?;
        let expected = Self::len_of(msg_kind).ok_or(super::DecodeError::UnknownType(msg_kind))?;
        if b.len() != expected {
            return Err(super::DecodeError::WrongLength {
                kind: msg_kind,
                expected,
                actual: b.len(),
            });
        }
        let timestamp = Timestamp(u64_at(b, 1));
        if msg_kind == kind::SYSTEM_EVENT {
            return Ok(Outbound::SystemEvent(SystemEvent {
                timestamp,
                event: b[9],
            }));
        }
        let token: Token = Alpha(array_at(b, 9));
        let msg = match msg_kind {
            kind::ACCEPTED => {
                let b = super::fixed::<{ outbound_len::ACCEPTED }>(msg_kind, b)?;
                {
                    let f = decode_accepted_fields(b);
                    Outbound::Accepted(Accepted {
                        timestamp,
                        token,
                        side: f.side,
                        shares: f.shares,
                        stock: f.stock,
                        price: f.price,
                        tif: f.tif,
                        firm: f.firm,
                        display: f.display,
                        order_ref: f.order_ref,
                        capacity: f.capacity,
                        intermarket_sweep: f.intermarket_sweep,
                        min_qty: f.min_qty,
                        cross_type: f.cross_type,
                        order_state: f.order_state,
                        bbo_weight: b[65],
                    })
                }
            }
            kind::REPLACED => {
                let b = super::fixed::<{ outbound_len::REPLACED }>(msg_kind, b)?;
                {
                    let f = decode_accepted_fields(b);
                    Outbound::Replaced(Replaced {
                        timestamp,
                        token,
                        side: f.side,
                        shares: f.shares,
                        stock: f.stock,
                        price: f.price,
                        tif: f.tif,
                        firm: f.firm,
                        display: f.display,
                        order_ref: f.order_ref,
                        capacity: f.capacity,
                        intermarket_sweep: f.intermarket_sweep,
                        min_qty: f.min_qty,
                        cross_type: f.cross_type,
                        order_state: f.order_state,
                        previous_token: Alpha(array_at(b, 65)),
                        bbo_weight: b[79],
                    })
                }
            }
            kind::CANCELED => {
                let b = super::fixed::<{ outbound_len::CANCELED }>(msg_kind, b)?;
                Outbound::Canceled(Canceled {
                    timestamp,
                    token,
                    decrement: Shares(u32_at(b, 23)),
                    reason: b[27],
                })
            }
            kind::AIQ_CANCELED => {
                let b = super::fixed::<{ outbound_len::AIQ_CANCELED }>(msg_kind, b)?;
                Outbound::AiqCanceled(AiqCanceled {
                    timestamp,
                    token,
                    decrement: Shares(u32_at(b, 23)),
                    reason: b[27],
                    prevented: Shares(u32_at(b, 28)),
                    price: Price(u32_at(b, 32)),
                    liquidity: b[36],
                })
            }
            kind::EXECUTED => {
                let b = super::fixed::<{ outbound_len::EXECUTED }>(msg_kind, b)?;
                Outbound::Executed(Executed {
                    timestamp,
                    token,
                    shares: Shares(u32_at(b, 23)),
                    price: Price(u32_at(b, 27)),
                    liquidity: b[31],
                    match_number: MatchNumber(u64_at(b, 32)),
                })
            }
            kind::BROKEN_TRADE => {
                let b = super::fixed::<{ outbound_len::BROKEN_TRADE }>(msg_kind, b)?;
                Outbound::BrokenTrade(BrokenTrade {
                    timestamp,
                    token,
                    match_number: MatchNumber(u64_at(b, 23)),
                    reason: b[31],
                })
            }
            kind::REJECTED => {
                let b = super::fixed::<{ outbound_len::REJECTED }>(msg_kind, b)?;
                Outbound::Rejected(Rejected {
                    timestamp,
                    token,
                    reason: b[23],
                })
            }
            kind::CANCEL_PENDING => Outbound::CancelPending(TokenOnly { timestamp, token }),
            kind::CANCEL_REJECT => Outbound::CancelReject(TokenOnly { timestamp, token }),
            kind::PRIORITY_UPDATE => {
                let b = super::fixed::<{ outbound_len::PRIORITY_UPDATE }>(msg_kind, b)?;
                Outbound::PriorityUpdate(PriorityUpdate {
                    timestamp,
                    token,
                    price: Price(u32_at(b, 23)),
                    display: b[27],
                    order_ref: OrderRef(u64_at(b, 28)),
                })
            }
            _ => {
                debug_assert_eq!(msg_kind, kind::ORDER_MODIFIED);
                let b = super::fixed::<{ outbound_len::ORDER_MODIFIED }>(msg_kind, b)?;
                Outbound::OrderModified(OrderModified {
                    timestamp,
                    token,
                    side: b[23],
                    shares: Shares(u32_at(b, 24)),
                })
            }
        };
        Ok(msg)
    }
}

/// The fields Accepted and Replaced share at identical offsets 23..65.
struct AcceptedFields {
    side: u8,
    shares: Shares,
    stock: Symbol,
    price: Price,
    tif: u32,
    firm: Firm,
    display: u8,
    order_ref: OrderRef,
    capacity: u8,
    intermarket_sweep: u8,
    min_qty: Shares,
    cross_type: u8,
    order_state: u8,
}

impl AcceptedFields {
    fn of_accepted(m: &Accepted) -> AcceptedFields {
        AcceptedFields {
            side: m.side,
            shares: m.shares,
            stock: m.stock,
            price: m.price,
            tif: m.tif,
            firm: m.firm,
            display: m.display,
            order_ref: m.order_ref,
            capacity: m.capacity,
            intermarket_sweep: m.intermarket_sweep,
            min_qty: m.min_qty,
            cross_type: m.cross_type,
            order_state: m.order_state,
        }
    }

    fn of_replaced(m: &Replaced) -> AcceptedFields {
        AcceptedFields {
            side: m.side,
            shares: m.shares,
            stock: m.stock,
            price: m.price,
            tif: m.tif,
            firm: m.firm,
            display: m.display,
            order_ref: m.order_ref,
            capacity: m.capacity,
            intermarket_sweep: m.intermarket_sweep,
            min_qty: m.min_qty,
            cross_type: m.cross_type,
            order_state: m.order_state,
        }
    }
}

fn encode_accepted_fields(b: &mut [u8], f: &AcceptedFields) {
    use super::be::{put_bytes, put_u32, put_u64};
    b[23] = f.side;
    put_u32(b, 24, f.shares.0);
    put_bytes(b, 28, &f.stock.0);
    put_u32(b, 36, f.price.0);
    put_u32(b, 40, f.tif);
    put_bytes(b, 44, &f.firm.0);
    b[48] = f.display;
    put_u64(b, 49, f.order_ref.0);
    b[57] = f.capacity;
    b[58] = f.intermarket_sweep;
    put_u32(b, 59, f.min_qty.0);
    b[63] = f.cross_type;
    b[64] = f.order_state;
}

fn decode_accepted_fields(b: &[u8]) -> AcceptedFields {
    use super::be::{array_at, u32_at, u64_at};
    use crate::types::Alpha;
    AcceptedFields {
        side: b[23],
        shares: Shares(u32_at(b, 24)),
        stock: Alpha(array_at(b, 28)),
        price: Price(u32_at(b, 36)),
        tif: u32_at(b, 40),
        firm: Alpha(array_at(b, 44)),
        display: b[48],
        order_ref: OrderRef(u64_at(b, 49)),
        capacity: b[57],
        intermarket_sweep: b[58],
        min_qty: Shares(u32_at(b, 59)),
        cross_type: b[63],
        order_state: b[64],
    }
}
