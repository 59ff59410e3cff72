//! TotalView-ITCH 5.0 messages (PROTOCOLS.md section 4) as small `Copy` structs.
//!
//! Every message has the common 11-byte header (type, locate, tracking number, 48-bit
//! timestamp); [`Message`] pairs that header with a typed [`Body`]. Code fields are raw bytes so
//! that real Nasdaq data (with codes this venue never emits) decodes and re-encodes exactly.
//!
//! Decoding checks the type letter and the exact length of PROTOCOLS.md 4.3, never field
//! values. The ITCH 5.0 types bourse neither emits nor models (`V W K J h N O`, listed in
//! PROTOCOLS.md 4.2 for length-based skipping) are a typed result, not an error:
//! [`decode_any`] returns [`Decoded::Skipped`] with the header when the length is right, and
//! [`Message::decode`] reports them as [`DecodeError::UnknownType`]. `O` (Direct Listing with
//! Capital Raise, 48 bytes) exists only in newer revisions; we take its length from
//! PROTOCOLS.md.
//!
//! [`binary_file`] reads and writes Nasdaq's BinaryFILE framing (2-byte big-endian length, then
//! one message) used by the sample files and the tools.

use super::be::{
    array_at, put_bytes, put_u16, put_u32, put_u48, put_u64, u16_at, u32_at, u48_at, u64_at,
};
use super::{DecodeError, fixed};
use crate::types::{Alpha, Firm, MatchNumber, OrderRef, Price, Shares, Symbol, Timestamp};

/// Common header fields (the type letter is implied by the body).
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub struct Header {
    pub locate: u16,
    pub tracking: u16,
    pub timestamp: Timestamp,
}

/// Stock Directory `R` fields after the header.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct StockDirectory {
    pub stock: Symbol,
    pub market_category: u8,
    pub financial_status: u8,
    pub round_lot_size: u32,
    pub round_lots_only: u8,
    pub issue_classification: u8,
    pub issue_sub_type: [u8; 2],
    pub authenticity: u8,
    pub short_sale_threshold: u8,
    pub ipo_flag: u8,
    pub luld_tier: u8,
    pub etp_flag: u8,
    pub etp_leverage: u32,
    pub inverse: u8,
}

/// Net Order Imbalance Indicator `I` fields after the header.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct Imbalance {
    pub paired_shares: u64,
    pub imbalance_shares: u64,
    pub direction: u8,
    pub stock: Symbol,
    pub far_price: Price,
    pub near_price: Price,
    pub reference_price: Price,
    pub cross_type: u8,
    pub price_variation: u8,
}

/// The typed part of every ITCH 5.0 message bourse reads or writes.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Body {
    /// `S`, 12 bytes.
    SystemEvent { event: u8 },
    /// `R`, 39 bytes.
    StockDirectory(StockDirectory),
    /// `H`, 25 bytes.
    TradingAction {
        stock: Symbol,
        state: u8,
        reserved: u8,
        reason: [u8; 4],
    },
    /// `Y`, 20 bytes.
    RegSho { stock: Symbol, action: u8 },
    /// `L`, 26 bytes.
    ParticipantPosition {
        mpid: Firm,
        stock: Symbol,
        primary: u8,
        mode: u8,
        state: u8,
    },
    /// `A`, 36 bytes.
    AddOrder {
        order_ref: OrderRef,
        side: u8,
        shares: Shares,
        stock: Symbol,
        price: Price,
    },
    /// `F`, 40 bytes.
    AddOrderMpid {
        order_ref: OrderRef,
        side: u8,
        shares: Shares,
        stock: Symbol,
        price: Price,
        attribution: Firm,
    },
    /// `E`, 31 bytes.
    OrderExecuted {
        order_ref: OrderRef,
        shares: Shares,
        match_number: MatchNumber,
    },
    /// `C`, 36 bytes.
    OrderExecutedWithPrice {
        order_ref: OrderRef,
        shares: Shares,
        match_number: MatchNumber,
        printable: u8,
        price: Price,
    },
    /// `X`, 23 bytes.
    OrderCancel { order_ref: OrderRef, shares: Shares },
    /// `D`, 19 bytes.
    OrderDelete { order_ref: OrderRef },
    /// `U`, 35 bytes.
    OrderReplace {
        old_ref: OrderRef,
        new_ref: OrderRef,
        shares: Shares,
        price: Price,
    },
    /// `P`, 44 bytes.
    Trade {
        order_ref: OrderRef,
        side: u8,
        shares: Shares,
        stock: Symbol,
        price: Price,
        match_number: MatchNumber,
    },
    /// `Q`, 40 bytes (8-byte shares).
    CrossTrade {
        shares: u64,
        stock: Symbol,
        price: Price,
        match_number: MatchNumber,
        cross_type: u8,
    },
    /// `B`, 19 bytes.
    BrokenTrade { match_number: MatchNumber },
    /// `I`, 50 bytes.
    Imbalance(Imbalance),
}

/// One ITCH 5.0 message: header plus body.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct Message {
    pub header: Header,
    pub body: Body,
}

/// ITCH System Event codes.
pub mod event {
    pub const START_OF_MESSAGES: u8 = b'O';
    pub const START_OF_SYSTEM_HOURS: u8 = b'S';
    pub const START_OF_MARKET_HOURS: u8 = b'Q';
    pub const END_OF_MARKET_HOURS: u8 = b'M';
    pub const END_OF_SYSTEM_HOURS: u8 = b'E';
    pub const END_OF_MESSAGES: u8 = b'C';
}

/// ITCH Stock Trading Action states.
pub mod trading_state {
    pub const HALTED: u8 = b'H';
    pub const TRADING: u8 = b'T';
}

/// Length of the common header (type, locate, tracking number, 48-bit timestamp).
pub const HEADER_LEN: usize = 11;
/// Longest ITCH 5.0 message (Net Order Imbalance Indicator `I`).
pub const MAX_MESSAGE_LEN: usize = 50;

/// Type letters of the messages bourse models.
pub mod kind {
    pub const SYSTEM_EVENT: u8 = b'S';
    pub const STOCK_DIRECTORY: u8 = b'R';
    pub const TRADING_ACTION: u8 = b'H';
    pub const REG_SHO: u8 = b'Y';
    pub const PARTICIPANT_POSITION: u8 = b'L';
    pub const ADD_ORDER: u8 = b'A';
    pub const ADD_ORDER_MPID: u8 = b'F';
    pub const ORDER_EXECUTED: u8 = b'E';
    pub const ORDER_EXECUTED_WITH_PRICE: u8 = b'C';
    pub const ORDER_CANCEL: u8 = b'X';
    pub const ORDER_DELETE: u8 = b'D';
    pub const ORDER_REPLACE: u8 = b'U';
    pub const TRADE: u8 = b'P';
    pub const CROSS_TRADE: u8 = b'Q';
    pub const BROKEN_TRADE: u8 = b'B';
    pub const IMBALANCE: u8 = b'I';
}

/// Length of every modelled type (PROTOCOLS.md 4.3), `None` otherwise.
pub const fn modelled_len(msg_kind: u8) -> Option<usize> {
    Some(match msg_kind {
        b'S' => 12,
        b'R' => 39,
        b'H' => 25,
        b'Y' => 20,
        b'L' => 26,
        b'A' => 36,
        b'F' => 40,
        b'E' => 31,
        b'C' => 36,
        b'X' => 23,
        b'D' => 19,
        b'U' => 35,
        b'P' => 44,
        b'Q' => 40,
        b'B' => 19,
        b'I' => 50,
        _ => return None,
    })
}

/// Length of the ITCH 5.0 types that are only skipped (`V W K J h N O`), `None` otherwise.
pub const fn skipped_len(msg_kind: u8) -> Option<usize> {
    Some(match msg_kind {
        b'V' => 35,
        b'W' => 12,
        b'K' => 28,
        b'J' => 35,
        b'h' => 21,
        b'N' => 20,
        b'O' => 48,
        _ => return None,
    })
}

/// Length of any ITCH 5.0 type this module knows, modelled or skipped.
pub const fn known_len(msg_kind: u8) -> Option<usize> {
    match modelled_len(msg_kind) {
        Some(n) => Some(n),
        None => skipped_len(msg_kind),
    }
}

/// Result of [`decode_any`]: a modelled message, or a known type this module does not model.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Decoded {
    Message(Message),
    /// A well-formed (right length) message of a type in [`skipped_len`].
    Skipped {
        kind: u8,
        header: Header,
    },
}

fn check_len(b: &[u8], msg_kind: u8, expected: usize) -> Result<(), DecodeError> {
    if b.len() != expected {
        return Err(DecodeError::WrongLength {
            kind: msg_kind,
            expected,
            actual: b.len(),
        });
    }
    Ok(())
}

#[inline(always)]
fn decode_header(b: &[u8]) -> Header {
    Header {
        locate: u16_at(b, 1),
        tracking: u16_at(b, 3),
        timestamp: Timestamp(u48_at(b, 5)),
    }
}

/// Decode one ITCH 5.0 message of any known type; see the module docs.
pub fn decode_any(b: &[u8]) -> Result<Decoded, DecodeError> {
    let msg_kind = *b.first().ok_or(DecodeError::Empty)?;
    if let Some(expected) = skipped_len(msg_kind) {
        check_len(b, msg_kind, expected)?;
        return Ok(Decoded::Skipped {
            kind: msg_kind,
            header: decode_header(b),
        });
    }
    Message::decode(b).map(Decoded::Message)
}

impl Message {
    /// Decode one modelled ITCH 5.0 message (exact length per type; fields as received).
    #[inline]
    pub fn decode(b: &[u8]) -> Result<Message, DecodeError> {
        let msg_kind = *b.first().ok_or(DecodeError::Empty)?;
        let body = Body::decode(msg_kind, b)?;
        Ok(Message {
            header: decode_header(b),
            body,
        })
    }

    /// Bytes this message encodes to.
    pub fn encoded_len(&self) -> usize {
        self.body.encoded_len()
    }

    /// Write the message into `buf` (at least [`Message::encoded_len`] bytes); returns its
    /// length. The timestamp is written as its low 48 bits.
    #[inline]
    pub fn encode(&self, buf: &mut [u8]) -> usize {
        let len = self.encoded_len();
        assert!(
            buf.len() >= len,
            "buffer of {} bytes for a {len}-byte ITCH message",
            buf.len()
        );
        let b = &mut buf[..len];
        b[0] = self.body.kind();
        put_u16(b, 1, self.header.locate);
        put_u16(b, 3, self.header.tracking);
        put_u48(b, 5, self.header.timestamp.itch48());
        self.body.encode_fields(b);
        len
    }

    /// Append the encoded message to a `bytes::BufMut`.
    pub fn put(&self, out: &mut impl bytes::BufMut) {
        let mut scratch = [0u8; MAX_MESSAGE_LEN];
        let n = self.encode(&mut scratch);
        out.put_slice(&scratch[..n]);
    }
}

impl Body {
    pub fn kind(&self) -> u8 {
        match self {
            Body::SystemEvent { .. } => kind::SYSTEM_EVENT,
            Body::StockDirectory(_) => kind::STOCK_DIRECTORY,
            Body::TradingAction { .. } => kind::TRADING_ACTION,
            Body::RegSho { .. } => kind::REG_SHO,
            Body::ParticipantPosition { .. } => kind::PARTICIPANT_POSITION,
            Body::AddOrder { .. } => kind::ADD_ORDER,
            Body::AddOrderMpid { .. } => kind::ADD_ORDER_MPID,
            Body::OrderExecuted { .. } => kind::ORDER_EXECUTED,
            Body::OrderExecutedWithPrice { .. } => kind::ORDER_EXECUTED_WITH_PRICE,
            Body::OrderCancel { .. } => kind::ORDER_CANCEL,
            Body::OrderDelete { .. } => kind::ORDER_DELETE,
            Body::OrderReplace { .. } => kind::ORDER_REPLACE,
            Body::Trade { .. } => kind::TRADE,
            Body::CrossTrade { .. } => kind::CROSS_TRADE,
            Body::BrokenTrade { .. } => kind::BROKEN_TRADE,
            Body::Imbalance(_) => kind::IMBALANCE,
        }
    }

    pub fn encoded_len(&self) -> usize {
        match modelled_len(self.kind()) {
            Some(n) => n,
            None => unreachable!("every Body variant has a length"),
        }
    }

    /// Check the exact length and decode the fields after the header. Each arm sees `b` as a
    /// fixed-size array, so every field read below compiles without a bounds check.
    #[inline]
    fn decode(msg_kind: u8, b: &[u8]) -> Result<Body, DecodeError> {
        let body = match msg_kind {
            kind::SYSTEM_EVENT => {
                let b = fixed::<12>(msg_kind, b)?;
                Body::SystemEvent { event: b[11] }
            }
            kind::STOCK_DIRECTORY => {
                let b = fixed::<39>(msg_kind, b)?;
                Body::StockDirectory(StockDirectory::decode(b))
            }
            kind::TRADING_ACTION => {
                let b = fixed::<25>(msg_kind, b)?;
                Body::TradingAction {
                    stock: Alpha(array_at(b, 11)),
                    state: b[19],
                    reserved: b[20],
                    reason: array_at(b, 21),
                }
            }
            kind::REG_SHO => {
                let b = fixed::<20>(msg_kind, b)?;
                Body::RegSho {
                    stock: Alpha(array_at(b, 11)),
                    action: b[19],
                }
            }
            kind::PARTICIPANT_POSITION => {
                let b = fixed::<26>(msg_kind, b)?;
                Body::ParticipantPosition {
                    mpid: Alpha(array_at(b, 11)),
                    stock: Alpha(array_at(b, 15)),
                    primary: b[23],
                    mode: b[24],
                    state: b[25],
                }
            }
            kind::ADD_ORDER => {
                let b = fixed::<36>(msg_kind, b)?;
                Body::AddOrder {
                    order_ref: OrderRef(u64_at(b, 11)),
                    side: b[19],
                    shares: Shares(u32_at(b, 20)),
                    stock: Alpha(array_at(b, 24)),
                    price: Price(u32_at(b, 32)),
                }
            }
            kind::ADD_ORDER_MPID => {
                let b = fixed::<40>(msg_kind, b)?;
                Body::AddOrderMpid {
                    order_ref: OrderRef(u64_at(b, 11)),
                    side: b[19],
                    shares: Shares(u32_at(b, 20)),
                    stock: Alpha(array_at(b, 24)),
                    price: Price(u32_at(b, 32)),
                    attribution: Alpha(array_at(b, 36)),
                }
            }
            kind::ORDER_EXECUTED => {
                let b = fixed::<31>(msg_kind, b)?;
                Body::OrderExecuted {
                    order_ref: OrderRef(u64_at(b, 11)),
                    shares: Shares(u32_at(b, 19)),
                    match_number: MatchNumber(u64_at(b, 23)),
                }
            }
            kind::ORDER_EXECUTED_WITH_PRICE => {
                let b = fixed::<36>(msg_kind, b)?;
                Body::OrderExecutedWithPrice {
                    order_ref: OrderRef(u64_at(b, 11)),
                    shares: Shares(u32_at(b, 19)),
                    match_number: MatchNumber(u64_at(b, 23)),
                    printable: b[31],
                    price: Price(u32_at(b, 32)),
                }
            }
            kind::ORDER_CANCEL => {
                let b = fixed::<23>(msg_kind, b)?;
                Body::OrderCancel {
                    order_ref: OrderRef(u64_at(b, 11)),
                    shares: Shares(u32_at(b, 19)),
                }
            }
            kind::ORDER_DELETE => {
                let b = fixed::<19>(msg_kind, b)?;
                Body::OrderDelete {
                    order_ref: OrderRef(u64_at(b, 11)),
                }
            }
            kind::ORDER_REPLACE => {
                let b = fixed::<35>(msg_kind, b)?;
                Body::OrderReplace {
                    old_ref: OrderRef(u64_at(b, 11)),
                    new_ref: OrderRef(u64_at(b, 19)),
                    shares: Shares(u32_at(b, 27)),
                    price: Price(u32_at(b, 31)),
                }
            }
            kind::TRADE => {
                let b = fixed::<44>(msg_kind, b)?;
                Body::Trade {
                    order_ref: OrderRef(u64_at(b, 11)),
                    side: b[19],
                    shares: Shares(u32_at(b, 20)),
                    stock: Alpha(array_at(b, 24)),
                    price: Price(u32_at(b, 32)),
                    match_number: MatchNumber(u64_at(b, 36)),
                }
            }
            kind::CROSS_TRADE => {
                let b = fixed::<40>(msg_kind, b)?;
                Body::CrossTrade {
                    shares: u64_at(b, 11),
                    stock: Alpha(array_at(b, 19)),
                    price: Price(u32_at(b, 27)),
                    match_number: MatchNumber(u64_at(b, 31)),
                    cross_type: b[39],
                }
            }
            kind::BROKEN_TRADE => {
                let b = fixed::<19>(msg_kind, b)?;
                Body::BrokenTrade {
                    match_number: MatchNumber(u64_at(b, 11)),
                }
            }
            _ => {
                if msg_kind != kind::IMBALANCE {
                    return Err(DecodeError::UnknownType(msg_kind));
                }
                Body::Imbalance(Imbalance::decode(fixed::<50>(msg_kind, b)?))
            }
        };
        Ok(body)
    }

    /// Write the fields after the header into `b` (exactly the type's length).
    #[inline]
    fn encode_fields(&self, b: &mut [u8]) {
        match self {
            Body::SystemEvent { event } => b[11] = *event,
            Body::StockDirectory(d) => d.encode(b),
            Body::TradingAction {
                stock,
                state,
                reserved,
                reason,
            } => {
                put_bytes(b, 11, &stock.0);
                b[19] = *state;
                b[20] = *reserved;
                put_bytes(b, 21, reason);
            }
            Body::RegSho { stock, action } => {
                put_bytes(b, 11, &stock.0);
                b[19] = *action;
            }
            Body::ParticipantPosition {
                mpid,
                stock,
                primary,
                mode,
                state,
            } => {
                put_bytes(b, 11, &mpid.0);
                put_bytes(b, 15, &stock.0);
                b[23] = *primary;
                b[24] = *mode;
                b[25] = *state;
            }
            Body::AddOrder {
                order_ref,
                side,
                shares,
                stock,
                price,
            } => encode_add(b, *order_ref, *side, *shares, stock, *price),
            Body::AddOrderMpid {
                order_ref,
                side,
                shares,
                stock,
                price,
                attribution,
            } => {
                encode_add(b, *order_ref, *side, *shares, stock, *price);
                put_bytes(b, 36, &attribution.0);
            }
            Body::OrderExecuted {
                order_ref,
                shares,
                match_number,
            } => {
                put_u64(b, 11, order_ref.0);
                put_u32(b, 19, shares.0);
                put_u64(b, 23, match_number.0);
            }
            Body::OrderExecutedWithPrice {
                order_ref,
                shares,
                match_number,
                printable,
                price,
            } => {
                put_u64(b, 11, order_ref.0);
                put_u32(b, 19, shares.0);
                put_u64(b, 23, match_number.0);
                b[31] = *printable;
                put_u32(b, 32, price.0);
            }
            Body::OrderCancel { order_ref, shares } => {
                put_u64(b, 11, order_ref.0);
                put_u32(b, 19, shares.0);
            }
            Body::OrderDelete { order_ref } => put_u64(b, 11, order_ref.0),
            Body::OrderReplace {
                old_ref,
                new_ref,
                shares,
                price,
            } => {
                put_u64(b, 11, old_ref.0);
                put_u64(b, 19, new_ref.0);
                put_u32(b, 27, shares.0);
                put_u32(b, 31, price.0);
            }
            Body::Trade {
                order_ref,
                side,
                shares,
                stock,
                price,
                match_number,
            } => {
                encode_add(b, *order_ref, *side, *shares, stock, *price);
                put_u64(b, 36, match_number.0);
            }
            Body::CrossTrade {
                shares,
                stock,
                price,
                match_number,
                cross_type,
            } => {
                put_u64(b, 11, *shares);
                put_bytes(b, 19, &stock.0);
                put_u32(b, 27, price.0);
                put_u64(b, 31, match_number.0);
                b[39] = *cross_type;
            }
            Body::BrokenTrade { match_number } => put_u64(b, 11, match_number.0),
            Body::Imbalance(i) => i.encode(b),
        }
    }
}

/// `A`, `F` and `P` share offsets 11..36 (reference, side, shares, stock, price).
#[inline]
fn encode_add(
    b: &mut [u8],
    order_ref: OrderRef,
    side: u8,
    shares: Shares,
    stock: &Symbol,
    price: Price,
) {
    put_u64(b, 11, order_ref.0);
    b[19] = side;
    put_u32(b, 20, shares.0);
    put_bytes(b, 24, &stock.0);
    put_u32(b, 32, price.0);
}

impl StockDirectory {
    fn decode(b: &[u8]) -> StockDirectory {
        StockDirectory {
            stock: Alpha(array_at(b, 11)),
            market_category: b[19],
            financial_status: b[20],
            round_lot_size: u32_at(b, 21),
            round_lots_only: b[25],
            issue_classification: b[26],
            issue_sub_type: array_at(b, 27),
            authenticity: b[29],
            short_sale_threshold: b[30],
            ipo_flag: b[31],
            luld_tier: b[32],
            etp_flag: b[33],
            etp_leverage: u32_at(b, 34),
            inverse: b[38],
        }
    }

    fn encode(&self, b: &mut [u8]) {
        put_bytes(b, 11, &self.stock.0);
        b[19] = self.market_category;
        b[20] = self.financial_status;
        put_u32(b, 21, self.round_lot_size);
        b[25] = self.round_lots_only;
        b[26] = self.issue_classification;
        put_bytes(b, 27, &self.issue_sub_type);
        b[29] = self.authenticity;
        b[30] = self.short_sale_threshold;
        b[31] = self.ipo_flag;
        b[32] = self.luld_tier;
        b[33] = self.etp_flag;
        put_u32(b, 34, self.etp_leverage);
        b[38] = self.inverse;
    }
}

impl Imbalance {
    fn decode(b: &[u8]) -> Imbalance {
        Imbalance {
            paired_shares: u64_at(b, 11),
            imbalance_shares: u64_at(b, 19),
            direction: b[27],
            stock: Alpha(array_at(b, 28)),
            far_price: Price(u32_at(b, 36)),
            near_price: Price(u32_at(b, 40)),
            reference_price: Price(u32_at(b, 44)),
            cross_type: b[48],
            price_variation: b[49],
        }
    }

    fn encode(&self, b: &mut [u8]) {
        put_u64(b, 11, self.paired_shares);
        put_u64(b, 19, self.imbalance_shares);
        b[27] = self.direction;
        put_bytes(b, 28, &self.stock.0);
        put_u32(b, 36, self.far_price.0);
        put_u32(b, 40, self.near_price.0);
        put_u32(b, 44, self.reference_price.0);
        b[48] = self.cross_type;
        b[49] = self.price_variation;
    }
}

/// Nasdaq BinaryFILE framing: each record is a 2-byte big-endian length and one message.
pub mod binary_file {
    use super::{DecodeError, Message};
    use crate::wire::be::{put_u16, u16_at};

    /// Bytes of the record length prefix.
    pub const LENGTH_PREFIX_LEN: usize = 2;

    /// Iterates the message bytes of a BinaryFILE image; yields `Truncated` once and stops if
    /// the last record runs past the end.
    pub struct Reader<'a> {
        rest: &'a [u8],
        failed: bool,
    }

    impl<'a> Reader<'a> {
        pub fn new(bytes: &'a [u8]) -> Reader<'a> {
            Reader {
                rest: bytes,
                failed: false,
            }
        }

        /// Bytes not yet consumed.
        pub fn remaining(&self) -> usize {
            self.rest.len()
        }
    }

    impl<'a> Iterator for Reader<'a> {
        type Item = Result<&'a [u8], DecodeError>;

        #[inline]
        fn next(&mut self) -> Option<Self::Item> {
            if self.failed || self.rest.is_empty() {
                return None;
            }
            if self.rest.len() < LENGTH_PREFIX_LEN {
                self.failed = true;
                let actual = self.rest.len();
                return Some(Err(DecodeError::Truncated {
                    needed: LENGTH_PREFIX_LEN,
                    actual,
                }));
            }
            let len = usize::from(u16_at(self.rest, 0));
            let needed = LENGTH_PREFIX_LEN + len;
            if self.rest.len() < needed {
                self.failed = true;
                let actual = self.rest.len();
                return Some(Err(DecodeError::Truncated { needed, actual }));
            }
            let record = &self.rest[LENGTH_PREFIX_LEN..needed];
            self.rest = &self.rest[needed..];
            Some(Ok(record))
        }
    }

    /// Write one record (length prefix + message) into `buf`; returns its length.
    pub fn write_message(buf: &mut [u8], message: &Message) -> usize {
        let len = message.encode(&mut buf[LENGTH_PREFIX_LEN..]);
        put_u16(buf, 0, len as u16);
        LENGTH_PREFIX_LEN + len
    }

    /// Write one record holding raw message bytes into `buf`; returns its length.
    pub fn write_raw(buf: &mut [u8], message: &[u8]) -> usize {
        assert!(message.len() <= usize::from(u16::MAX));
        let total = LENGTH_PREFIX_LEN + message.len();
        assert!(buf.len() >= total);
        put_u16(buf, 0, message.len() as u16);
        buf[LENGTH_PREFIX_LEN..total].copy_from_slice(message);
        total
    }
}
