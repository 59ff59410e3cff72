//! TotalView-ITCH 5.0 messages (PROTOCOLS.md section 4) as small `Copy` structs.
//!
//! Every message has the common 11-byte header (type, locate, tracking number, 48-bit
//! timestamp); [`Message`] pairs that header with a typed [`Body`]. Code fields are raw bytes so
//! that real Nasdaq data (with codes this venue never emits) decodes and re-encodes exactly.

use crate::types::{Firm, MatchNumber, OrderRef, Price, Shares, Symbol, Timestamp};

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
