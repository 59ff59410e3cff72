//! Fixed-width ASCII fields shared by SoupBinTCP, MoldUDP64 and GLIMPSE: decimal numbers, session
//! identifiers and case-insensitive credentials.
//!
//! UNCONFIRMED (PROTOCOLS.md 1.3): the spec states a padding direction only for Login Accepted.
//! Following its recommendation we **read** numeric and session fields by trimming spaces on both
//! sides and accepting leading zeros (Nasdaq's own `nasdaq-protocols` client left-justifies,
//! Wireshark and Nassau right-justify), and we **write** them right-justified with leading spaces.
//! An all-space numeric field reads as 0 (Wireshark's `atoi` reading); any other non-digit byte is
//! a [`DecodeError::BadField`].

use super::DecodeError;

/// Length of a SoupBinTCP / MoldUDP64 session field.
pub const SESSION_LEN: usize = 10;

/// `u64::MAX` has 20 decimal digits, so a 20-byte field can hold any `u64` but not every
/// 20-digit string.
const U64_MAX_DIGITS: usize = 20;

/// The field without leading and trailing spaces.
pub fn trim_spaces(field: &[u8]) -> &[u8] {
    let start = field.iter().position(|&b| b != b' ').unwrap_or(field.len());
    let end = field
        .iter()
        .rposition(|&b| b != b' ')
        .map_or(start, |i| i + 1);
    &field[start..end]
}

/// Reads an ASCII decimal field padded with spaces on either side; leading zeros allowed, all
/// spaces = 0. Non-digits and values above `u64::MAX` are `BadField { field }`.
pub fn parse_decimal(field: &[u8], name: &'static str) -> Result<u64, DecodeError> {
    decimal_value(field, name)?.ok_or(DecodeError::BadField { field: name })
}

/// [`parse_decimal`] where any value above `u64::MAX` means as much as `u64::MAX`: a
/// requested sequence number of 20 nines is valid decimal and simply beyond any end
/// (DESIGN.md 6: accepted, and Login Accepted carries the actual next number).
pub fn parse_decimal_saturating(field: &[u8], name: &'static str) -> Result<u64, DecodeError> {
    Ok(decimal_value(field, name)?.unwrap_or(u64::MAX))
}

/// The value of a space-padded decimal field, `None` above `u64::MAX`; non-digits are
/// `BadField { field }`.
fn decimal_value(field: &[u8], name: &'static str) -> Result<Option<u64>, DecodeError> {
    let mut value = Some(0u64);
    for &b in trim_spaces(field) {
        if !b.is_ascii_digit() {
            return Err(DecodeError::BadField { field: name });
        }
        value = value
            .and_then(|v| v.checked_mul(10))
            .and_then(|v| v.checked_add(u64::from(b - b'0')));
    }
    Ok(value)
}

/// Writes `value` right-justified with leading spaces into the whole of `field`.
///
/// Panics (assertion) if the value does not fit: field widths are protocol constants and callers
/// must bound the value (e.g. a 5-byte heartbeat timeout holds at most 99 999).
pub fn write_decimal_right(field: &mut [u8], value: u64) {
    assert!(!field.is_empty() && field.len() <= U64_MAX_DIGITS);
    let mut rest = value;
    let mut at = field.len();
    loop {
        assert!(
            at > 0,
            "decimal {value} does not fit in {} bytes",
            field.len()
        );
        at -= 1;
        field[at] = b'0' + (rest % 10) as u8;
        rest /= 10;
        if rest == 0 {
            break;
        }
    }
    field[..at].fill(b' ');
}

/// Case-insensitive comparison of a received username/password field with a configured value,
/// after trimming spaces on both sides of both (SoupBinTCP: credentials are case-insensitive).
pub fn credential_eq(field: &[u8], configured: &str) -> bool {
    trim_spaces(field).eq_ignore_ascii_case(trim_spaces(configured.as_bytes()))
}

/// A session identifier (SoupBinTCP and MoldUDP64), held without padding so that a session
/// requested as `"  BOURSE01"`, `"BOURSE01  "` or configured as `"BOURSE01"` compare equal.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct SessionId {
    bytes: [u8; SESSION_LEN],
    len: u8,
}

impl SessionId {
    /// The blank session (all spaces): "the currently active session" in a Login Request.
    pub const BLANK: SessionId = SessionId {
        bytes: [b' '; SESSION_LEN],
        len: 0,
    };

    /// A session from configuration text: at most 10 bytes, no leading/trailing spaces kept.
    pub fn new(text: &str) -> Option<SessionId> {
        let trimmed = trim_spaces(text.as_bytes());
        if trimmed.len() > SESSION_LEN {
            return None;
        }
        Some(Self::from_trimmed(trimmed))
    }

    /// Reads a 10-byte wire field, trimming spaces on both sides.
    pub fn from_field(field: &[u8; SESSION_LEN]) -> SessionId {
        Self::from_trimmed(trim_spaces(field))
    }

    fn from_trimmed(trimmed: &[u8]) -> SessionId {
        debug_assert!(trimmed.len() <= SESSION_LEN);
        let mut bytes = [b' '; SESSION_LEN];
        bytes[..trimmed.len()].copy_from_slice(trimmed);
        SessionId {
            bytes,
            len: trimmed.len() as u8,
        }
    }

    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes[..usize::from(self.len)]
    }

    pub fn is_blank(&self) -> bool {
        self.len == 0
    }

    /// SoupBinTCP form: right-justified, padded on the left with spaces.
    pub fn right_justified(&self) -> [u8; SESSION_LEN] {
        let mut out = [b' '; SESSION_LEN];
        out[SESSION_LEN - self.as_bytes().len()..].copy_from_slice(self.as_bytes());
        out
    }

    /// MoldUDP64 form (Nassau's choice, the spec is silent): left-justified, space padded.
    pub fn left_justified(&self) -> [u8; SESSION_LEN] {
        self.bytes
    }
}

impl Default for SessionId {
    fn default() -> Self {
        Self::BLANK
    }
}

impl std::fmt::Debug for SessionId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:?}", String::from_utf8_lossy(self.as_bytes()))
    }
}

impl std::fmt::Display for SessionId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&String::from_utf8_lossy(self.as_bytes()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decimal_reads_both_paddings_and_leading_zeros() {
        assert_eq!(parse_decimal(b"                   1", "seq"), Ok(1));
        assert_eq!(parse_decimal(b"1                   ", "seq"), Ok(1));
        assert_eq!(parse_decimal(b"00000000000000000042", "seq"), Ok(42));
        assert_eq!(parse_decimal(b"   0042   ", "seq"), Ok(42));
        assert_eq!(parse_decimal(b"          ", "seq"), Ok(0));
        assert_eq!(parse_decimal(b"18446744073709551615", "seq"), Ok(u64::MAX));
    }

    #[test]
    fn decimal_rejects_non_digits_and_overflow() {
        let bad = Err(DecodeError::BadField { field: "seq" });
        assert_eq!(parse_decimal(b"  1 2  ", "seq"), bad);
        assert_eq!(parse_decimal(b"-1", "seq"), bad);
        assert_eq!(parse_decimal(b"\x001", "seq"), bad);
        assert_eq!(parse_decimal(b"18446744073709551616", "seq"), bad);
        assert_eq!(parse_decimal(b"99999999999999999999", "seq"), bad);
    }

    #[test]
    fn saturating_decimal_caps_overflow_and_still_rejects_non_digits() {
        let read = |field: &[u8]| parse_decimal_saturating(field, "seq");
        let bad = Err(DecodeError::BadField { field: "seq" });
        assert_eq!(read(b"   0042   "), Ok(42));
        assert_eq!(read(b"          "), Ok(0));
        assert_eq!(read(b"18446744073709551615"), Ok(u64::MAX));
        assert_eq!(read(b"18446744073709551616"), Ok(u64::MAX));
        assert_eq!(read(b"99999999999999999999"), Ok(u64::MAX));
        assert_eq!(read(b"  1 2  "), bad);
        assert_eq!(read(b"-1"), bad);
    }

    #[test]
    fn decimal_writes_right_justified() {
        let mut f = [0u8; 20];
        write_decimal_right(&mut f, 1);
        assert_eq!(&f, b"                   1");
        write_decimal_right(&mut f, u64::MAX);
        assert_eq!(&f, b"18446744073709551615");
        let mut g = [0u8; 5];
        write_decimal_right(&mut g, 15000);
        assert_eq!(&g, b"15000");
        write_decimal_right(&mut g, 0);
        assert_eq!(&g, b"    0");
    }

    #[test]
    fn credentials_compare_case_insensitively_after_trimming() {
        assert!(credential_eq(b"brkr01", "BRKR01"));
        assert!(credential_eq(b"secret    ", "SeCrEt"));
        assert!(credential_eq(b"  secret  ", "secret"));
        assert!(!credential_eq(b"secret1   ", "secret"));
        assert!(!credential_eq(b"          ", "secret"));
    }

    #[test]
    fn session_padding_forms() {
        let s = SessionId::new("BOURSE01").unwrap();
        assert_eq!(&s.right_justified(), b"  BOURSE01");
        assert_eq!(&s.left_justified(), b"BOURSE01  ");
        assert_eq!(SessionId::from_field(b"  BOURSE01"), s);
        assert_eq!(SessionId::from_field(b"BOURSE01  "), s);
        assert!(SessionId::from_field(b"          ").is_blank());
        assert!(SessionId::new("ELEVENCHARS").is_none());
        assert_eq!(SessionId::BLANK, SessionId::from_field(b"          "));
    }
}
