//! Value types shared by the book, the exchange state machine and the wire codecs.
//!
//! Every type here is a small `Copy` newtype over the exact wire representation, so a
//! decoded message can be handed to the core without conversion and an output can be
//! encoded without lookups. Widths follow OUCH 4.2 / ITCH 5.0 (see PROTOCOLS.md).

use std::fmt;

/// Price with 4 implied decimals (raw / 10 000 dollars), as in OUCH 4.2 and ITCH 5.0.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Price(pub u32);

impl Price {
    /// OUCH flag value for a market order (`0x7FFFFFFF`, $214,748.3647).
    pub const MARKET: Price = Price(0x7FFF_FFFF);
    /// Highest limit price OUCH 4.2 allows: $199,999.9900.
    pub const MAX_LIMIT: Price = Price(1_999_999_900);

    pub const fn raw(self) -> u32 {
        self.0
    }

    pub const fn is_market(self) -> bool {
        self.0 == Self::MARKET.0
    }
}

impl fmt::Debug for Price {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{:04}", self.0 / 10_000, self.0 % 10_000)
    }
}

impl fmt::Display for Price {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self, f)
    }
}

/// Share quantity (OUCH and ITCH 4-byte fields).
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default, Debug)]
pub struct Shares(pub u32);

impl Shares {
    /// Largest share quantity an OUCH 4.2 order may carry.
    pub const MAX_ORDER: Shares = Shares(999_999);
}

/// Nanoseconds since midnight UTC of the journal's day (keeps counting past 24 h).
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default, Debug)]
pub struct Timestamp(pub u64);

impl Timestamp {
    pub const NANOS_PER_SECOND: u64 = 1_000_000_000;

    /// The 48-bit value ITCH carries; the journal never runs 78 hours, but mask anyway.
    pub const fn itch48(self) -> u64 {
        self.0 & 0xFFFF_FFFF_FFFF
    }
}

/// Exchange-assigned, day-unique order reference number (gapless from 1).
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default, Debug)]
pub struct OrderRef(pub u64);

/// Day-unique match number shared by both sides of one execution (gapless from 1).
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default, Debug)]
pub struct MatchNumber(pub u64);

/// Fixed-width, space-padded ASCII field of `N` bytes (tokens, symbols, firms).
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Alpha<const N: usize>(pub [u8; N]);

impl<const N: usize> Alpha<N> {
    pub const SPACES: Self = Self([b' '; N]);

    /// Left-justify `text` and pad with spaces; `None` if it is longer than `N`.
    pub fn from_str_padded(text: &str) -> Option<Self> {
        let bytes = text.as_bytes();
        if bytes.len() > N {
            return None;
        }
        let mut out = [b' '; N];
        out[..bytes.len()].copy_from_slice(bytes);
        Some(Self(out))
    }

    /// The field without its right padding (lossy for non-UTF-8 bytes).
    pub fn trimmed(&self) -> std::borrow::Cow<'_, str> {
        let end = self.0.iter().rposition(|&b| b != b' ').map_or(0, |i| i + 1);
        String::from_utf8_lossy(&self.0[..end])
    }

    pub fn is_spaces(&self) -> bool {
        self.0.iter().all(|&b| b == b' ')
    }

    pub const fn bytes(&self) -> &[u8; N] {
        &self.0
    }
}

impl<const N: usize> fmt::Debug for Alpha<N> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", String::from_utf8_lossy(&self.0))
    }
}

impl<const N: usize> fmt::Display for Alpha<N> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.trimmed())
    }
}

impl<const N: usize> Default for Alpha<N> {
    fn default() -> Self {
        Self::SPACES
    }
}

/// OUCH Order Token: 14 bytes, client-chosen, case-sensitive, day-unique per account.
pub type Token = Alpha<14>;
/// Stock symbol: 8 bytes, space padded, case-sensitive.
pub type Symbol = Alpha<8>;
/// Firm / MPID: 4 bytes.
pub type Firm = Alpha<4>;

/// 0-based index of an account in the venue definition (config order).
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default, Debug)]
pub struct AccountId(pub u16);

/// ITCH stock locate: 1-based position of the symbol in the venue definition.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default, Debug)]
pub struct Locate(pub u16);

impl Locate {
    /// 0-based index into per-symbol tables.
    pub const fn index(self) -> usize {
        debug_assert!(self.0 >= 1);
        (self.0 - 1) as usize
    }
}

/// Book side. OUCH sells (`S`, `T`, `E`) are all asks; the entered letter is kept for echo.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub enum Side {
    Buy,
    Sell,
}

impl Side {
    pub const fn opposite(self) -> Side {
        match self {
            Side::Buy => Side::Sell,
            Side::Sell => Side::Buy,
        }
    }

    /// The ITCH Buy/Sell Indicator byte.
    pub const fn itch_byte(self) -> u8 {
        match self {
            Side::Buy => b'B',
            Side::Sell => b'S',
        }
    }

    /// Side of an OUCH Buy/Sell Indicator byte; `None` for anything but `B`, `S`, `T`, `E`.
    pub const fn from_ouch(byte: u8) -> Option<Side> {
        match byte {
            b'B' => Some(Side::Buy),
            b'S' | b'T' | b'E' => Some(Side::Sell),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn alpha_pads_and_trims() {
        let sym = Symbol::from_str_padded("AAPL").unwrap();
        assert_eq!(sym.bytes(), b"AAPL    ");
        assert_eq!(sym.trimmed(), "AAPL");
        assert!(Symbol::from_str_padded("TOOLONGSYM").is_none());
        assert!(Firm::SPACES.is_spaces());
        assert!(!sym.is_spaces());
    }

    #[test]
    fn price_formats_with_four_decimals() {
        assert_eq!(format!("{:?}", Price(1_502_500)), "150.2500");
        assert!(Price::MARKET.is_market());
        assert!(!Price::MAX_LIMIT.is_market());
    }

    #[test]
    fn side_from_ouch_letters() {
        assert_eq!(Side::from_ouch(b'B'), Some(Side::Buy));
        for b in [b'S', b'T', b'E'] {
            assert_eq!(Side::from_ouch(b), Some(Side::Sell));
        }
        assert_eq!(Side::from_ouch(b'X'), None);
        assert_eq!(Side::Buy.opposite(), Side::Sell);
    }
}
