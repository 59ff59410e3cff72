//! SoupBinTCP 4.00 (PROTOCOLS.md section 1): packet codec and a bounded framing reader.
//!
//! A logical packet is `length: u16 BE` (bytes after the length field) + `type: u8` + payload.
//! [`Packet`] borrows its payload from the input (zero-copy) and encodes into caller buffers.
//! [`FrameReader`] reassembles packets across arbitrary TCP segment boundaries from a buffer
//! whose size is fixed at construction (`2 + max_packet_len`), so a peer can never make it grow.
//!
//! Choices where PROTOCOLS.md marks something UNCONFIRMED or unspecified:
//! - Login Request: both the 49-byte 4.00 form and the 54-byte 4.10 form (5-byte Heartbeat
//!   Timeout, read as milliseconds) are accepted; we write the 4.10 form only when a timeout is
//!   given.
//! - Session and sequence fields are read trimming spaces on both sides, leading zeros accepted,
//!   all spaces = 0, any other non-digit = [`DecodeError::BadField`]; they are written
//!   right-justified with leading spaces, in Login Request and Login Accepted alike (see
//!   [`super::ascii`]).
//! - Username and password are kept as received; compare them with [`LoginRequest::username_eq`]
//!   / [`LoginRequest::password_eq`] (case-insensitive after trimming, as the spec says).
//! - The spec has no maximum packet length; DESIGN.md 6 caps client packets at 1024 bytes
//!   ([`CLIENT_MAX_PACKET_LEN`]). A zero length is an error (a packet always has a type byte).
//! - Any error is sticky: after one the reader yields that error forever (the connection must
//!   be closed; there is no way to resynchronise a byte stream).

use super::DecodeError;
use super::ascii::{self, SESSION_LEN, SessionId};
use crate::types::Alpha;
use std::fmt;

/// Bytes of the Packet Length field.
pub const LENGTH_FIELD_LEN: usize = 2;
/// Length field plus type byte.
pub const HEADER_LEN: usize = 3;
/// Largest Packet Length value the 16-bit field allows.
pub const MAX_PACKET_LEN: usize = u16::MAX as usize;
/// DESIGN.md 6: any client packet whose length field exceeds this is oversized.
pub const CLIENT_MAX_PACKET_LEN: usize = 1024;

/// Packet type letters.
pub mod kind {
    pub const DEBUG: u8 = b'+';
    pub const LOGIN_ACCEPTED: u8 = b'A';
    pub const LOGIN_REJECTED: u8 = b'J';
    pub const SEQUENCED_DATA: u8 = b'S';
    pub const UNSEQUENCED_DATA: u8 = b'U';
    pub const SERVER_HEARTBEAT: u8 = b'H';
    pub const END_OF_SESSION: u8 = b'Z';
    pub const LOGIN_REQUEST: u8 = b'L';
    pub const CLIENT_HEARTBEAT: u8 = b'R';
    pub const LOGOUT_REQUEST: u8 = b'O';
}

/// Login Rejected reason codes.
pub mod reject_reason {
    /// Bad username or password.
    pub const NOT_AUTHORIZED: u8 = b'A';
    /// Requested session invalid or not available.
    pub const SESSION_NOT_AVAILABLE: u8 = b'S';
}

/// Payload lengths (after the type byte) of the fixed-size packets.
pub mod payload_len {
    pub const LOGIN_ACCEPTED: usize = 30;
    pub const LOGIN_REJECTED: usize = 1;
    pub const LOGIN_REQUEST_V400: usize = 46;
    pub const LOGIN_REQUEST_V410: usize = 51;
}

const USERNAME_LEN: usize = 6;
const PASSWORD_LEN: usize = 10;
const SEQUENCE_LEN: usize = 20;
const HEARTBEAT_TIMEOUT_LEN: usize = 5;
// Login Request field offsets within the packet body (type byte at 0).
const USERNAME_AT: usize = 1;
const PASSWORD_AT: usize = USERNAME_AT + USERNAME_LEN;
const SESSION_AT: usize = PASSWORD_AT + PASSWORD_LEN;
const SEQUENCE_AT: usize = SESSION_AT + SESSION_LEN;
const HEARTBEAT_TIMEOUT_AT: usize = SEQUENCE_AT + SEQUENCE_LEN;
const _: () = assert!(HEARTBEAT_TIMEOUT_AT == 1 + payload_len::LOGIN_REQUEST_V400);
const _: () =
    assert!(HEARTBEAT_TIMEOUT_AT + HEARTBEAT_TIMEOUT_LEN == 1 + payload_len::LOGIN_REQUEST_V410);
/// Largest value the 5-digit 4.10 Heartbeat Timeout can carry.
pub const MAX_HEARTBEAT_TIMEOUT_MS: u32 = 99_999;

/// Login Request `L` (client): offsets below are within the packet body (type byte = 0).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct LoginRequest {
    pub username: Alpha<USERNAME_LEN>,
    pub password: Alpha<PASSWORD_LEN>,
    /// Blank = the currently active session.
    pub session: SessionId,
    /// Next sequence number wanted; 0 = no replay (DESIGN.md 6).
    pub sequence: u64,
    /// Present only in the 54-byte SoupBinTCP 4.10 form (UNCONFIRMED field, milliseconds).
    pub heartbeat_timeout_ms: Option<u32>,
}

impl LoginRequest {
    pub fn username_eq(&self, configured: &str) -> bool {
        ascii::credential_eq(&self.username.0, configured)
    }

    pub fn password_eq(&self, configured: &str) -> bool {
        ascii::credential_eq(&self.password.0, configured)
    }

    fn decode(body: &[u8]) -> Result<LoginRequest, DecodeError> {
        use super::be::array_at;
        let payload = body.len() - 1;
        let v410 = match payload {
            payload_len::LOGIN_REQUEST_V400 => false,
            payload_len::LOGIN_REQUEST_V410 => true,
            _ => {
                return Err(DecodeError::WrongLength {
                    kind: kind::LOGIN_REQUEST,
                    expected: payload_len::LOGIN_REQUEST_V400 + 1,
                    actual: body.len(),
                });
            }
        };
        let session: [u8; SESSION_LEN] = array_at(body, SESSION_AT);
        // Saturating: 20 digits can exceed u64::MAX, and such a number is beyond the end.
        let sequence = ascii::parse_decimal_saturating(
            &body[SEQUENCE_AT..SEQUENCE_AT + SEQUENCE_LEN],
            "requested_sequence_number",
        )?;
        let heartbeat_timeout_ms = if v410 {
            let field = &body[HEARTBEAT_TIMEOUT_AT..HEARTBEAT_TIMEOUT_AT + HEARTBEAT_TIMEOUT_LEN];
            let ms = ascii::parse_decimal(field, "heartbeat_timeout")?;
            // 5 digits cannot exceed 99 999, so the narrowing is exact.
            Some(u32::try_from(ms).map_err(|_| DecodeError::BadField {
                field: "heartbeat_timeout",
            })?)
        } else {
            None
        };
        Ok(LoginRequest {
            username: Alpha(array_at(body, USERNAME_AT)),
            password: Alpha(array_at(body, PASSWORD_AT)),
            session: SessionId::from_field(&session),
            sequence,
            heartbeat_timeout_ms,
        })
    }

    fn payload_len(&self) -> usize {
        match self.heartbeat_timeout_ms {
            None => payload_len::LOGIN_REQUEST_V400,
            Some(_) => payload_len::LOGIN_REQUEST_V410,
        }
    }

    /// `body` is the packet body (type byte at 0) of exactly this request's length.
    fn encode_body(&self, body: &mut [u8]) {
        let field = |at: usize, len: usize| at..at + len;
        body[field(USERNAME_AT, USERNAME_LEN)].copy_from_slice(&self.username.0);
        body[field(PASSWORD_AT, PASSWORD_LEN)].copy_from_slice(&self.password.0);
        body[field(SESSION_AT, SESSION_LEN)].copy_from_slice(&self.session.right_justified());
        ascii::write_decimal_right(&mut body[field(SEQUENCE_AT, SEQUENCE_LEN)], self.sequence);
        if let Some(ms) = self.heartbeat_timeout_ms {
            assert!(ms <= MAX_HEARTBEAT_TIMEOUT_MS);
            let timeout = field(HEARTBEAT_TIMEOUT_AT, HEARTBEAT_TIMEOUT_LEN);
            ascii::write_decimal_right(&mut body[timeout], u64::from(ms));
        }
    }
}

/// One SoupBinTCP logical packet; data payloads borrow from the decoded bytes.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Packet<'a> {
    /// `+`, either side: free text, ignored by both sides.
    Debug(&'a [u8]),
    /// `A`, server: session logged into and the next sequence number it will send.
    LoginAccepted { session: SessionId, sequence: u64 },
    /// `J`, server: reason code, see [`reject_reason`].
    LoginRejected { reason: u8 },
    /// `S`, server: one upper-layer message, implicitly numbered.
    SequencedData(&'a [u8]),
    /// `U`, either side: one upper-layer message, never numbered or replayed.
    UnsequencedData(&'a [u8]),
    /// `H`, server.
    ServerHeartbeat,
    /// `Z`, server.
    EndOfSession,
    /// `L`, client.
    LoginRequest(LoginRequest),
    /// `R`, client.
    ClientHeartbeat,
    /// `O`, client.
    LogoutRequest,
}

impl<'a> Packet<'a> {
    /// Decode a packet body: the type byte and the payload, without the length field.
    pub fn decode(body: &'a [u8]) -> Result<Packet<'a>, DecodeError> {
        let packet_kind = *body.first().ok_or(DecodeError::Empty)?;
        let payload = &body[1..];
        let packet = match packet_kind {
            kind::DEBUG => Packet::Debug(payload),
            kind::SEQUENCED_DATA => Packet::SequencedData(payload),
            kind::UNSEQUENCED_DATA => Packet::UnsequencedData(payload),
            kind::LOGIN_REQUEST => Packet::LoginRequest(LoginRequest::decode(body)?),
            kind::LOGIN_ACCEPTED => {
                expect_payload(packet_kind, body, payload_len::LOGIN_ACCEPTED)?;
                let session: [u8; SESSION_LEN] = super::be::array_at(body, 1);
                Packet::LoginAccepted {
                    session: SessionId::from_field(&session),
                    sequence: ascii::parse_decimal(&body[11..31], "sequence_number")?,
                }
            }
            kind::LOGIN_REJECTED => {
                expect_payload(packet_kind, body, payload_len::LOGIN_REJECTED)?;
                Packet::LoginRejected { reason: body[1] }
            }
            kind::SERVER_HEARTBEAT => empty(packet_kind, body, Packet::ServerHeartbeat)?,
            kind::END_OF_SESSION => empty(packet_kind, body, Packet::EndOfSession)?,
            kind::CLIENT_HEARTBEAT => empty(packet_kind, body, Packet::ClientHeartbeat)?,
            kind::LOGOUT_REQUEST => empty(packet_kind, body, Packet::LogoutRequest)?,
            other => return Err(DecodeError::UnknownType(other)),
        };
        Ok(packet)
    }

    pub fn kind(&self) -> u8 {
        match self {
            Packet::Debug(_) => kind::DEBUG,
            Packet::LoginAccepted { .. } => kind::LOGIN_ACCEPTED,
            Packet::LoginRejected { .. } => kind::LOGIN_REJECTED,
            Packet::SequencedData(_) => kind::SEQUENCED_DATA,
            Packet::UnsequencedData(_) => kind::UNSEQUENCED_DATA,
            Packet::ServerHeartbeat => kind::SERVER_HEARTBEAT,
            Packet::EndOfSession => kind::END_OF_SESSION,
            Packet::LoginRequest(_) => kind::LOGIN_REQUEST,
            Packet::ClientHeartbeat => kind::CLIENT_HEARTBEAT,
            Packet::LogoutRequest => kind::LOGOUT_REQUEST,
        }
    }

    /// Whether a client may send this packet type (`+ U L R O`); a server rejects the others.
    pub fn is_client_packet(&self) -> bool {
        matches!(
            self,
            Packet::Debug(_)
                | Packet::UnsequencedData(_)
                | Packet::LoginRequest(_)
                | Packet::ClientHeartbeat
                | Packet::LogoutRequest
        )
    }

    /// Whether a server may send this packet type (`+ A J S U H Z`).
    pub fn is_server_packet(&self) -> bool {
        !matches!(
            self,
            Packet::LoginRequest(_) | Packet::ClientHeartbeat | Packet::LogoutRequest
        )
    }

    fn payload_len(&self) -> usize {
        match self {
            Packet::Debug(p) | Packet::SequencedData(p) | Packet::UnsequencedData(p) => p.len(),
            Packet::LoginAccepted { .. } => payload_len::LOGIN_ACCEPTED,
            Packet::LoginRejected { .. } => payload_len::LOGIN_REJECTED,
            Packet::LoginRequest(l) => l.payload_len(),
            Packet::ServerHeartbeat
            | Packet::EndOfSession
            | Packet::ClientHeartbeat
            | Packet::LogoutRequest => 0,
        }
    }

    /// Bytes on the wire, length field included.
    pub fn encoded_len(&self) -> usize {
        HEADER_LEN + self.payload_len()
    }

    /// Write the whole packet (length field included) into `buf`; returns its length.
    pub fn encode(&self, buf: &mut [u8]) -> usize {
        let payload_len = self.payload_len();
        let total = write_header(buf, self.kind(), payload_len);
        let body = &mut buf[LENGTH_FIELD_LEN..total];
        match self {
            Packet::Debug(d) | Packet::SequencedData(d) | Packet::UnsequencedData(d) => {
                body[1..].copy_from_slice(d)
            }
            Packet::LoginAccepted { session, sequence } => {
                body[1..1 + SESSION_LEN].copy_from_slice(&session.right_justified());
                ascii::write_decimal_right(&mut body[1 + SESSION_LEN..], *sequence);
            }
            Packet::LoginRejected { reason } => body[1] = *reason,
            Packet::LoginRequest(l) => l.encode_body(body),
            Packet::ServerHeartbeat
            | Packet::EndOfSession
            | Packet::ClientHeartbeat
            | Packet::LogoutRequest => {}
        }
        total
    }
}

fn expect_payload(packet_kind: u8, body: &[u8], payload: usize) -> Result<(), DecodeError> {
    if body.len() != 1 + payload {
        return Err(DecodeError::WrongLength {
            kind: packet_kind,
            expected: 1 + payload,
            actual: body.len(),
        });
    }
    Ok(())
}

fn empty<'a>(packet_kind: u8, body: &[u8], packet: Packet<'a>) -> Result<Packet<'a>, DecodeError> {
    expect_payload(packet_kind, body, 0)?;
    Ok(packet)
}

/// Write the 3-byte header of a packet whose `payload_len` payload bytes the caller writes (or
/// has written) at `buf[HEADER_LEN..]`. Returns the total packet length.
pub fn write_header(buf: &mut [u8], packet_kind: u8, payload_len: usize) -> usize {
    assert!(
        payload_len < MAX_PACKET_LEN,
        "SoupBinTCP payload of {payload_len} bytes"
    );
    let total = HEADER_LEN + payload_len;
    assert!(
        buf.len() >= total,
        "buffer of {} bytes for a {total}-byte packet",
        buf.len()
    );
    super::be::put_u16(buf, 0, (1 + payload_len) as u16);
    buf[2] = packet_kind;
    total
}

/// Write a data packet (`S` or `U`) whose payload `encode_payload` writes in place (no copy),
/// e.g. `write_data(buf, kind::SEQUENCED_DATA, |p| outbound.encode(p))`. Returns the total length.
pub fn write_data(
    buf: &mut [u8],
    packet_kind: u8,
    encode_payload: impl FnOnce(&mut [u8]) -> usize,
) -> usize {
    assert!(packet_kind == kind::SEQUENCED_DATA || packet_kind == kind::UNSEQUENCED_DATA);
    let payload_len = encode_payload(&mut buf[HEADER_LEN..]);
    write_header(buf, packet_kind, payload_len)
}

/// Why the framing reader stopped. Every variant means "close the connection".
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum FrameError {
    /// A Packet Length of 0: not even a type byte.
    ZeroLength,
    /// A Packet Length above the reader's configured maximum.
    Oversized { length: usize, max: usize },
    /// A complete packet that does not decode.
    Packet(DecodeError),
}

impl fmt::Display for FrameError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FrameError::ZeroLength => write!(f, "SoupBinTCP packet length 0"),
            FrameError::Oversized { length, max } => {
                write!(
                    f,
                    "SoupBinTCP packet length {length} over the maximum {max}"
                )
            }
            FrameError::Packet(e) => write!(f, "SoupBinTCP packet: {e}"),
        }
    }
}

impl std::error::Error for FrameError {}

/// Reassembles SoupBinTCP packets from a byte stream in a buffer of fixed size
/// `LENGTH_FIELD_LEN + max_packet_len`: one maximal packet always fits, nothing more is kept.
///
/// Use: write received bytes into [`FrameReader::read_space`] and [`FrameReader::commit`] them
/// (or [`FrameReader::feed`] a slice), then drain [`FrameReader::next_packet`] until `None`.
pub struct FrameReader {
    buf: Box<[u8]>,
    /// Unconsumed bytes are `buf[start..end]`.
    start: usize,
    end: usize,
    max_packet_len: usize,
    failed: Option<FrameError>,
}

impl FrameReader {
    /// `max_packet_len` bounds the Packet Length field (1..=65 535); e.g.
    /// [`CLIENT_MAX_PACKET_LEN`] on the gateway.
    pub fn new(max_packet_len: usize) -> FrameReader {
        assert!((1..=MAX_PACKET_LEN).contains(&max_packet_len));
        FrameReader {
            buf: vec![0u8; LENGTH_FIELD_LEN + max_packet_len].into_boxed_slice(),
            start: 0,
            end: 0,
            max_packet_len,
            failed: None,
        }
    }

    /// Like [`FrameReader::new`], receiving into `buf` (a pooled buffer, so a server allocates
    /// nothing per connection). A buffer larger than one packet lets one read take many
    /// packets: a gateway reads everything a client has sent in one call.
    pub fn with_buffer(max_packet_len: usize, buf: Box<[u8]>) -> FrameReader {
        assert!((1..=MAX_PACKET_LEN).contains(&max_packet_len));
        assert!(buf.len() >= LENGTH_FIELD_LEN + max_packet_len);
        FrameReader {
            buf,
            start: 0,
            end: 0,
            max_packet_len,
            failed: None,
        }
    }

    /// Give the buffer back (for a pool); the reader holds nothing afterwards.
    pub fn take_buffer(&mut self) -> Box<[u8]> {
        self.start = 0;
        self.end = 0;
        std::mem::take(&mut self.buf)
    }

    /// Fixed size of the internal buffer in bytes.
    pub fn capacity(&self) -> usize {
        self.buf.len()
    }

    /// Bytes received but not yet returned as packets.
    pub fn buffered(&self) -> usize {
        self.end - self.start
    }

    pub fn max_packet_len(&self) -> usize {
        self.max_packet_len
    }

    /// The error that stopped this reader, if any.
    pub fn failed(&self) -> Option<FrameError> {
        self.failed
    }

    /// Free space to receive into. Empty only while the buffer holds complete packets not yet
    /// taken: drain [`FrameReader::next_packet`] first.
    pub fn read_space(&mut self) -> &mut [u8] {
        if self.start == self.end {
            // Everything consumed: receive at the front, so a read gets the whole buffer.
            self.start = 0;
            self.end = 0;
        } else if self.end == self.buf.len() && self.start > 0 {
            // Move what is unconsumed to the front (at most one packet's worth unless the
            // owner stopped taking packets: then the buffer is bounded by its size).
            self.buf.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
        }
        &mut self.buf[self.end..]
    }

    /// Mark `n` bytes written into [`FrameReader::read_space`] as received.
    pub fn commit(&mut self, n: usize) {
        assert!(n <= self.buf.len() - self.end);
        self.end += n;
    }

    /// Copy as much of `bytes` as fits; returns how many were taken. Call
    /// [`FrameReader::next_packet`] until `None` before feeding the rest.
    pub fn feed(&mut self, bytes: &[u8]) -> usize {
        let space = self.read_space();
        let n = space.len().min(bytes.len());
        space[..n].copy_from_slice(&bytes[..n]);
        self.commit(n);
        n
    }

    /// The next complete packet, `None` if more bytes are needed, or the (sticky) error.
    pub fn next_packet(&mut self) -> Option<Result<Packet<'_>, FrameError>> {
        if let Some(e) = self.failed {
            return Some(Err(e));
        }
        let available = self.end - self.start;
        if available < LENGTH_FIELD_LEN {
            return None;
        }
        let length = usize::from(super::be::u16_at(&self.buf, self.start));
        if length == 0 {
            return Some(Err(self.fail(FrameError::ZeroLength)));
        }
        if length > self.max_packet_len {
            let max = self.max_packet_len;
            return Some(Err(self.fail(FrameError::Oversized { length, max })));
        }
        if available < LENGTH_FIELD_LEN + length {
            return None;
        }
        let body_start = self.start + LENGTH_FIELD_LEN;
        self.start = body_start + length;
        debug_assert!(self.start <= self.end);
        // Borrow only the `buf` field so that `failed` can still be set below.
        let buf: &[u8] = &self.buf;
        match Packet::decode(&buf[body_start..body_start + length]) {
            Ok(packet) => Some(Ok(packet)),
            Err(e) => {
                self.failed = Some(FrameError::Packet(e));
                Some(Err(FrameError::Packet(e)))
            }
        }
    }

    /// The payload of the packet *after* the next one, when both are complete and that one
    /// is Unsequenced Data; `None` otherwise. A look ahead for cache hints only: nothing is
    /// consumed, and a malformed packet is left for [`FrameReader::next_packet`] to report.
    pub fn following_unsequenced(&self) -> Option<&[u8]> {
        if self.failed.is_some() {
            return None;
        }
        let second = self.start + LENGTH_FIELD_LEN + self.complete_packet_len(self.start)?;
        let length = self.complete_packet_len(second)?;
        let body = &self.buf[second + LENGTH_FIELD_LEN..second + LENGTH_FIELD_LEN + length];
        match body.split_first() {
            Some((&kind::UNSEQUENCED_DATA, payload)) => Some(payload),
            _ => None,
        }
    }

    /// Length field of a complete, acceptable packet starting at `at`, or `None`.
    fn complete_packet_len(&self, at: usize) -> Option<usize> {
        if self.end.checked_sub(at)? < LENGTH_FIELD_LEN {
            return None;
        }
        let length = usize::from(super::be::u16_at(&self.buf, at));
        let fits = length > 0 && length <= self.max_packet_len;
        (fits && self.end - at >= LENGTH_FIELD_LEN + length).then_some(length)
    }

    fn fail(&mut self, e: FrameError) -> FrameError {
        self.failed = Some(e);
        e
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn login() -> LoginRequest {
        LoginRequest {
            username: Alpha(*b"ALICE "),
            password: Alpha(*b"SECRET    "),
            session: SessionId::BLANK,
            sequence: 1,
            heartbeat_timeout_ms: None,
        }
    }

    #[test]
    fn golden_login_request_v400() {
        let mut buf = [0u8; 64];
        let n = Packet::LoginRequest(login()).encode(&mut buf);
        let mut want = vec![0x00, 47, b'L'];
        want.extend_from_slice(b"ALICE SECRET              ");
        want.extend_from_slice(b"                   1");
        assert_eq!(&buf[..n], &want[..]);
        assert_eq!(n, 49);
        assert_eq!(
            Packet::decode(&buf[2..n]),
            Ok(Packet::LoginRequest(login()))
        );
    }

    #[test]
    fn login_request_v410_and_left_justified_fields() {
        let mut body = vec![b'L'];
        body.extend_from_slice(b"alice secret    BOURSE0001");
        body.extend_from_slice(b"1                   15000");
        let Ok(Packet::LoginRequest(l)) = Packet::decode(&body) else {
            panic!()
        };
        assert!(l.username_eq("ALICE") && l.password_eq("Secret"));
        assert_eq!(l.session, SessionId::new("BOURSE0001").unwrap());
        assert_eq!(l.sequence, 1);
        assert_eq!(l.heartbeat_timeout_ms, Some(15000));
        let mut buf = [0u8; 64];
        assert_eq!(Packet::LoginRequest(l).encode(&mut buf), 54);
        assert_eq!(&buf[49..54], b"15000");
    }

    #[test]
    fn login_request_rejects_bad_digits_and_lengths() {
        let mut body = vec![b'L'];
        body.extend_from_slice(b"ALICE SECRET              ");
        body.extend_from_slice(b"                  x1");
        assert_eq!(
            Packet::decode(&body),
            Err(DecodeError::BadField {
                field: "requested_sequence_number"
            })
        );
        body.pop();
        assert!(matches!(
            Packet::decode(&body),
            Err(DecodeError::WrongLength { .. })
        ));
        // Valid digits above u64::MAX are a number beyond any end, not bad bytes.
        body.truncate(body.len() - 19);
        body.extend_from_slice(b"99999999999999999999");
        let Ok(Packet::LoginRequest(l)) = Packet::decode(&body) else {
            panic!("twenty nines is a login request")
        };
        assert_eq!(l.sequence, u64::MAX);
    }

    #[test]
    fn golden_login_accepted_and_small_packets() {
        let mut buf = [0u8; 64];
        let session = SessionId::new("BOURSE01").unwrap();
        let n = Packet::LoginAccepted {
            session,
            sequence: 42,
        }
        .encode(&mut buf);
        let mut want = vec![0x00, 31, b'A'];
        want.extend_from_slice(b"  BOURSE01                  42");
        assert_eq!(&buf[..n], &want[..]);
        let cases: [(Packet<'_>, &[u8]); 8] = [
            (Packet::LoginRejected { reason: b'S' }, b"\x00\x02JS"),
            (Packet::ServerHeartbeat, b"\x00\x01H"),
            (Packet::EndOfSession, b"\x00\x01Z"),
            (Packet::ClientHeartbeat, b"\x00\x01R"),
            (Packet::LogoutRequest, b"\x00\x01O"),
            (Packet::Debug(b"hi"), b"\x00\x03+hi"),
            (Packet::SequencedData(b"xyz"), b"\x00\x04Sxyz"),
            (Packet::UnsequencedData(b""), b"\x00\x01U"),
        ];
        for (packet, bytes) in cases {
            let n = packet.encode(&mut buf);
            assert_eq!(&buf[..n], bytes);
            assert_eq!(Packet::decode(&bytes[2..]), Ok(packet));
        }
        assert!(matches!(
            Packet::decode(b"H!"),
            Err(DecodeError::WrongLength { .. })
        ));
        assert_eq!(Packet::decode(b"Q"), Err(DecodeError::UnknownType(b'Q')));
        assert_eq!(Packet::decode(b""), Err(DecodeError::Empty));
    }

    #[test]
    fn write_data_encodes_payload_in_place() {
        let mut buf = [0u8; 16];
        let n = write_data(&mut buf, kind::SEQUENCED_DATA, |p| {
            p[..2].copy_from_slice(b"ab");
            2
        });
        assert_eq!(&buf[..n], b"\x00\x03Sab");
    }

    #[test]
    fn reader_reassembles_byte_by_byte() {
        let mut wire = Vec::new();
        let mut buf = [0u8; 64];
        for p in [
            Packet::LoginRequest(login()),
            Packet::ClientHeartbeat,
            Packet::Debug(b"x"),
        ] {
            let n = p.encode(&mut buf);
            wire.extend_from_slice(&buf[..n]);
        }
        let mut reader = FrameReader::new(CLIENT_MAX_PACKET_LEN);
        let mut kinds = Vec::new();
        for b in &wire {
            assert_eq!(reader.feed(std::slice::from_ref(b)), 1);
            while let Some(p) = reader.next_packet() {
                kinds.push(p.unwrap().kind());
            }
        }
        assert_eq!(kinds, b"LR+");
        assert_eq!(reader.buffered(), 0);
    }

    #[test]
    fn reader_errors_are_sticky() {
        let mut reader = FrameReader::new(CLIENT_MAX_PACKET_LEN);
        reader.feed(b"\x00\x00R");
        assert_eq!(reader.next_packet(), Some(Err(FrameError::ZeroLength)));
        assert_eq!(reader.next_packet(), Some(Err(FrameError::ZeroLength)));

        let mut reader = FrameReader::new(CLIENT_MAX_PACKET_LEN);
        reader.feed(b"\x04\x01");
        assert_eq!(
            reader.next_packet(),
            Some(Err(FrameError::Oversized {
                length: 1025,
                max: 1024
            }))
        );

        let mut reader = FrameReader::new(CLIENT_MAX_PACKET_LEN);
        reader.feed(b"\x00\x01?\x00\x01R");
        assert_eq!(
            reader.next_packet(),
            Some(Err(FrameError::Packet(DecodeError::UnknownType(b'?'))))
        );
        assert!(reader.failed().is_some());
    }

    #[test]
    fn reader_accepts_a_maximal_packet_in_its_fixed_buffer() {
        let mut reader = FrameReader::new(CLIENT_MAX_PACKET_LEN);
        let mut wire = vec![0u8; 3 + 1023];
        write_header(&mut wire, kind::DEBUG, 1023);
        // A partial packet first so that the maximal one needs compaction.
        let mut stream = b"\x00\x01R".to_vec();
        stream.extend_from_slice(&wire);
        stream.extend_from_slice(&wire);
        let mut taken = 0;
        let mut seen = 0;
        while taken < stream.len() {
            let n = reader.feed(&stream[taken..]);
            taken += n;
            while let Some(p) = reader.next_packet() {
                p.unwrap();
                seen += 1;
            }
            assert!(reader.buffered() <= reader.capacity());
        }
        assert_eq!(seen, 3);
        assert_eq!(reader.capacity(), 1026);
    }

    #[test]
    fn the_packet_after_the_next_is_seen_without_being_taken() {
        let mut reader = FrameReader::new(CLIENT_MAX_PACKET_LEN);
        // Heartbeat, then Unsequenced Data "OX", then half of another Unsequenced Data.
        reader.feed(b"\x00\x01R\x00\x03UOX\x00\x03UA");
        assert_eq!(reader.following_unsequenced(), Some(&b"OX"[..]));
        assert_eq!(
            reader.following_unsequenced(),
            Some(&b"OX"[..]),
            "nothing consumed"
        );
        assert!(matches!(
            reader.next_packet(),
            Some(Ok(Packet::ClientHeartbeat))
        ));
        assert_eq!(
            reader.following_unsequenced(),
            None,
            "the one after is incomplete"
        );
        assert!(matches!(
            reader.next_packet(),
            Some(Ok(Packet::UnsequencedData(b"OX")))
        ));
        assert_eq!(
            reader.following_unsequenced(),
            None,
            "no packet after the next"
        );
        reader.feed(b"Z\x00\x01R");
        assert_eq!(
            reader.following_unsequenced(),
            None,
            "a heartbeat is no message"
        );
        assert!(matches!(
            reader.next_packet(),
            Some(Ok(Packet::UnsequencedData(b"AZ")))
        ));

        // A malformed packet after the next one is not a message, and is left to
        // `next_packet` to report.
        let mut reader = FrameReader::new(CLIENT_MAX_PACKET_LEN);
        reader.feed(b"\x00\x01R\x00\x00");
        assert_eq!(reader.following_unsequenced(), None);
        reader.next_packet().unwrap().unwrap();
        assert!(matches!(
            reader.next_packet(),
            Some(Err(FrameError::ZeroLength))
        ));

        // After a failure nothing is offered, though whole packets follow the bad one.
        let mut reader = FrameReader::new(CLIENT_MAX_PACKET_LEN);
        reader.feed(b"\x00\x01Q\x00\x01R\x00\x03UOX");
        assert!(
            matches!(reader.next_packet(), Some(Err(_))),
            "unknown packet type"
        );
        assert_eq!(
            reader.following_unsequenced(),
            None,
            "nothing after a failure"
        );
    }
}
