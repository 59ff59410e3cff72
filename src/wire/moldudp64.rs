//! MoldUDP64 1.00 (PROTOCOLS.md section 3): downstream packet builder and decoder, heartbeat and
//! end-of-session packets, request packets.
//!
//! A downstream packet is a 20-byte header (session 10, sequence number of the first block u64,
//! block count u16) followed by `count` blocks of `length: u16` + message. Count 0 is a
//! heartbeat, 0xFFFF end of session; data packets carry at most 0xFFFE blocks.
//!
//! Choices where the spec is silent (PROTOCOLS.md 3.1, UNCONFIRMED):
//! - The session field is written **left-justified and space padded** (Nassau's choice) and read
//!   as raw bytes (compare with [`SessionId::left_justified`]).
//! - Packets are limited to a configured UDP payload size, default 1400 bytes including the
//!   header (Nassau's and DESIGN.md 5's limit), so that a packet is one unfragmented datagram.
//! - A heartbeat or end-of-session packet must be exactly 20 bytes; a data packet's blocks must
//!   fill it exactly. Anything else is a [`DecodeError`].

use super::DecodeError;
use super::ascii::{SESSION_LEN, SessionId};
use super::be::{array_at, put_u16, put_u64, u16_at, u64_at};

/// Header bytes of every downstream and request packet.
pub const HEADER_LEN: usize = 20;
/// Bytes of a block's length prefix.
pub const BLOCK_HEADER_LEN: usize = 2;
/// Default UDP payload limit, header included (DESIGN.md 5).
pub const DEFAULT_MAX_PAYLOAD: usize = 1400;
/// Largest UDP payload over IPv4.
pub const MAX_UDP_PAYLOAD: usize = 65_507;
/// Message Count of a heartbeat.
pub const HEARTBEAT_COUNT: u16 = 0;
/// Message Count of an end-of-session packet.
pub const END_OF_SESSION_COUNT: u16 = 0xFFFF;
/// Most blocks in one data packet (0xFFFF is reserved for end of session).
pub const MAX_BLOCKS: u16 = 0xFFFE;

/// The 20-byte header of a downstream packet (also the layout of a request packet).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct Header {
    /// Raw session field as on the wire.
    pub session: [u8; SESSION_LEN],
    /// Sequence number of the first block; for heartbeat/end of session the next expected.
    pub sequence: u64,
    pub count: u16,
}

impl Header {
    fn decode(b: &[u8]) -> Header {
        Header {
            session: array_at(b, 0),
            sequence: u64_at(b, 10),
            count: u16_at(b, 18),
        }
    }

    fn encode(&self, b: &mut [u8]) {
        b[..SESSION_LEN].copy_from_slice(&self.session);
        put_u64(b, 10, self.sequence);
        put_u16(b, 18, self.count);
    }

    /// The session with its padding trimmed.
    pub fn session_id(&self) -> SessionId {
        SessionId::from_field(&self.session)
    }
}

/// What a downstream packet is.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum PacketKind {
    Data,
    Heartbeat,
    EndOfSession,
}

/// A decoded downstream packet; its blocks borrow from the datagram.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct Packet<'a> {
    pub header: Header,
    /// The bytes after the header, already checked to hold exactly `count` blocks.
    blocks: &'a [u8],
}

impl<'a> Packet<'a> {
    /// Decode a datagram, walking the blocks once to check they fill it exactly.
    pub fn decode(datagram: &'a [u8]) -> Result<Packet<'a>, DecodeError> {
        if datagram.len() < HEADER_LEN {
            return Err(DecodeError::Truncated {
                needed: HEADER_LEN,
                actual: datagram.len(),
            });
        }
        let header = Header::decode(datagram);
        let blocks = &datagram[HEADER_LEN..];
        let data_blocks = match header.count {
            HEARTBEAT_COUNT | END_OF_SESSION_COUNT => 0,
            n => n,
        };
        if header
            .sequence
            .checked_add(u64::from(data_blocks))
            .is_none()
        {
            return Err(DecodeError::BadField {
                field: "sequence_number",
            });
        }
        let mut at = 0usize;
        for _ in 0..data_blocks {
            if blocks.len() - at < BLOCK_HEADER_LEN {
                let needed = HEADER_LEN + at + BLOCK_HEADER_LEN;
                return Err(DecodeError::Truncated {
                    needed,
                    actual: datagram.len(),
                });
            }
            let end = at + BLOCK_HEADER_LEN + usize::from(u16_at(blocks, at));
            if end > blocks.len() {
                let needed = HEADER_LEN + end;
                return Err(DecodeError::Truncated {
                    needed,
                    actual: datagram.len(),
                });
            }
            at = end;
        }
        if at != blocks.len() {
            return Err(DecodeError::BadField {
                field: "message_count",
            });
        }
        Ok(Packet { header, blocks })
    }

    pub fn kind(&self) -> PacketKind {
        match self.header.count {
            HEARTBEAT_COUNT => PacketKind::Heartbeat,
            END_OF_SESSION_COUNT => PacketKind::EndOfSession,
            _ => PacketKind::Data,
        }
    }

    /// Number of message blocks (0 for heartbeat and end of session).
    pub fn message_count(&self) -> u16 {
        match self.kind() {
            PacketKind::Data => self.header.count,
            PacketKind::Heartbeat | PacketKind::EndOfSession => 0,
        }
    }

    /// Sequence number the block after this packet will have.
    pub fn next_sequence(&self) -> u64 {
        // Checked in decode.
        self.header.sequence + u64::from(self.message_count())
    }

    /// The blocks as `(sequence number, message bytes)`, zero-copy.
    pub fn messages(&self) -> Blocks<'a> {
        Blocks {
            rest: self.blocks,
            sequence: self.header.sequence,
        }
    }
}

/// Iterator over the blocks of a decoded [`Packet`].
pub struct Blocks<'a> {
    rest: &'a [u8],
    sequence: u64,
}

impl<'a> Iterator for Blocks<'a> {
    type Item = (u64, &'a [u8]);

    fn next(&mut self) -> Option<Self::Item> {
        // The packet was validated, so every remaining block is complete; `get` keeps this
        // panic-free regardless.
        let len = usize::from(u16::from_be_bytes(self.rest.get(..2)?.try_into().ok()?));
        let message = self.rest.get(BLOCK_HEADER_LEN..BLOCK_HEADER_LEN + len)?;
        self.rest = &self.rest[BLOCK_HEADER_LEN + len..];
        let sequence = self.sequence;
        self.sequence += 1;
        Some((sequence, message))
    }
}

/// Write a heartbeat (`count` 0) into `buf`; returns 20.
pub fn encode_heartbeat(buf: &mut [u8], session: SessionId, next_sequence: u64) -> usize {
    encode_empty(buf, session, next_sequence, HEARTBEAT_COUNT)
}

/// Write an end-of-session packet (`count` 0xFFFF) into `buf`; returns 20.
pub fn encode_end_of_session(buf: &mut [u8], session: SessionId, next_sequence: u64) -> usize {
    encode_empty(buf, session, next_sequence, END_OF_SESSION_COUNT)
}

fn encode_empty(buf: &mut [u8], session: SessionId, sequence: u64, count: u16) -> usize {
    let header = Header {
        session: session.left_justified(),
        sequence,
        count,
    };
    header.encode(&mut buf[..HEADER_LEN]);
    HEADER_LEN
}

/// Why a message was not added to the packet being built.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum PushError {
    /// The packet has no room left (bytes or blocks): send it, then push again.
    Full,
    /// The message could not fit even in an empty packet of this builder's size.
    TooLarge,
}

/// Packs messages into downstream packets of at most `max_payload` bytes (header included),
/// numbering them from the session's next sequence number. The buffer is allocated once.
///
/// Use: [`PacketBuilder::push`] until `Err(Full)`, then [`PacketBuilder::finish`] and send the
/// bytes; the next push starts a new packet numbered after the last.
pub struct PacketBuilder {
    buf: Box<[u8]>,
    session: [u8; SESSION_LEN],
    /// Sequence number of the first block of the packet being built.
    sequence: u64,
    count: u16,
    len: usize,
    /// `finish` has run: the next push starts a new packet.
    sealed: bool,
}

impl PacketBuilder {
    /// `max_payload` is the UDP payload limit including the 20-byte header.
    pub fn new(session: SessionId, next_sequence: u64, max_payload: usize) -> PacketBuilder {
        assert!(max_payload > HEADER_LEN + BLOCK_HEADER_LEN && max_payload <= MAX_UDP_PAYLOAD);
        assert!(next_sequence >= 1, "MoldUDP64 sequence numbers start at 1");
        PacketBuilder {
            buf: vec![0u8; max_payload].into_boxed_slice(),
            session: session.left_justified(),
            sequence: next_sequence,
            count: 0,
            len: HEADER_LEN,
            sealed: false,
        }
    }

    /// Discard any packet being built and number the next pushed message `next_sequence`.
    /// Lets one builder (one buffer) answer many re-requests, each starting elsewhere.
    pub fn restart(&mut self, next_sequence: u64) {
        assert!(next_sequence >= 1, "MoldUDP64 sequence numbers start at 1");
        self.sequence = next_sequence;
        self.count = 0;
        self.len = HEADER_LEN;
        self.sealed = false;
    }

    /// Sequence number the next pushed message will get.
    pub fn next_sequence(&self) -> u64 {
        // Sealed or not, the blocks counted so far are numbered from `sequence`.
        self.sequence + u64::from(self.count)
    }

    /// Messages in the packet being built.
    pub fn message_count(&self) -> u16 {
        if self.sealed { 0 } else { self.count }
    }

    pub fn is_empty(&self) -> bool {
        self.message_count() == 0
    }

    /// Bytes of the packet being built, header included.
    pub fn len(&self) -> usize {
        if self.sealed { HEADER_LEN } else { self.len }
    }

    fn unseal(&mut self) {
        if self.sealed {
            self.sequence += u64::from(self.count);
            self.count = 0;
            self.len = HEADER_LEN;
            self.sealed = false;
        }
    }

    /// Add a message of `message_len` bytes written in place by `encode` (no copy).
    pub fn push_with(
        &mut self,
        message_len: usize,
        encode: impl FnOnce(&mut [u8]) -> usize,
    ) -> Result<u64, PushError> {
        self.unseal();
        let needed = BLOCK_HEADER_LEN + message_len;
        if HEADER_LEN + needed > self.buf.len() || message_len > usize::from(u16::MAX) {
            return Err(PushError::TooLarge);
        }
        if self.len + needed > self.buf.len() || self.count == MAX_BLOCKS {
            return Err(PushError::Full);
        }
        let at = self.len;
        put_u16(&mut self.buf, at, message_len as u16);
        let written = encode(&mut self.buf[at + BLOCK_HEADER_LEN..at + needed]);
        assert_eq!(
            written, message_len,
            "encoder wrote a different length than announced"
        );
        self.len += needed;
        self.count += 1;
        Ok(self.sequence + u64::from(self.count) - 1)
    }

    /// Add one message (copied); returns its sequence number.
    pub fn push(&mut self, message: &[u8]) -> Result<u64, PushError> {
        self.push_with(message.len(), |b| {
            b.copy_from_slice(message);
            message.len()
        })
    }

    /// Add one ITCH message, encoded in place; returns its sequence number.
    pub fn push_itch(&mut self, message: &super::itch::Message) -> Result<u64, PushError> {
        self.push_with(message.encoded_len(), |b| message.encode(b))
    }

    /// Seal the packet being built and return its bytes (header written now). Must not be
    /// called on an empty packet: a packet without blocks is a heartbeat, sent explicitly.
    pub fn finish(&mut self) -> &[u8] {
        assert!(
            !self.sealed && self.count > 0,
            "finish on an empty MoldUDP64 packet"
        );
        let header = Header {
            session: self.session,
            sequence: self.sequence,
            count: self.count,
        };
        header.encode(&mut self.buf[..HEADER_LEN]);
        self.sealed = true;
        &self.buf[..self.len]
    }

    /// Write a heartbeat carrying the next sequence number into `buf`; returns 20.
    pub fn heartbeat(&self, buf: &mut [u8]) -> usize {
        assert!(self.is_empty(), "heartbeat while messages are pending");
        let header = Header {
            session: self.session,
            sequence: self.next_sequence(),
            count: 0,
        };
        header.encode(&mut buf[..HEADER_LEN]);
        HEADER_LEN
    }

    /// Write an end-of-session packet carrying the next sequence number; returns 20.
    pub fn end_of_session(&self, buf: &mut [u8]) -> usize {
        assert!(self.is_empty(), "end of session while messages are pending");
        let header = Header {
            session: self.session,
            sequence: self.next_sequence(),
            count: END_OF_SESSION_COUNT,
        };
        header.encode(&mut buf[..HEADER_LEN]);
        HEADER_LEN
    }
}

/// A retransmission request (client to re-request server), exactly 20 bytes.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct Request {
    /// Raw session field as on the wire.
    pub session: [u8; SESSION_LEN],
    /// First message wanted.
    pub sequence: u64,
    /// Number of messages wanted.
    pub count: u16,
}

impl Request {
    pub const LEN: usize = HEADER_LEN;

    pub fn new(session: SessionId, sequence: u64, count: u16) -> Request {
        Request {
            session: session.left_justified(),
            sequence,
            count,
        }
    }

    pub fn decode(b: &[u8]) -> Result<Request, DecodeError> {
        if b.len() != Self::LEN {
            return Err(DecodeError::WrongLength {
                kind: 0,
                expected: Self::LEN,
                actual: b.len(),
            });
        }
        let h = Header::decode(b);
        Ok(Request {
            session: h.session,
            sequence: h.sequence,
            count: h.count,
        })
    }

    pub fn encode(&self, buf: &mut [u8]) -> usize {
        let header = Header {
            session: self.session,
            sequence: self.sequence,
            count: self.count,
        };
        header.encode(&mut buf[..HEADER_LEN]);
        HEADER_LEN
    }

    pub fn session_id(&self) -> SessionId {
        SessionId::from_field(&self.session)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn session() -> SessionId {
        SessionId::new("BOURSE01").unwrap()
    }

    #[test]
    fn golden_data_packet() {
        let mut b = PacketBuilder::new(session(), 7, DEFAULT_MAX_PAYLOAD);
        assert_eq!(b.push(b"abc"), Ok(7));
        assert_eq!(b.push(b""), Ok(8));
        let bytes = b.finish().to_vec();
        let mut want = b"BOURSE01  ".to_vec();
        want.extend_from_slice(&[0, 0, 0, 0, 0, 0, 0, 7, 0, 2, 0, 3, b'a', b'b', b'c', 0, 0]);
        assert_eq!(bytes, want);
        let p = Packet::decode(&bytes).unwrap();
        assert_eq!(p.kind(), PacketKind::Data);
        let blocks: Vec<_> = p.messages().collect();
        assert_eq!(blocks, vec![(7, &b"abc"[..]), (8, &b""[..])]);
        assert_eq!(p.next_sequence(), 9);
        assert_eq!(b.next_sequence(), 9);
        assert_eq!(b.push(b"d"), Ok(9));
    }

    #[test]
    fn golden_heartbeat_end_of_session_and_request() {
        let mut buf = [0u8; 20];
        encode_heartbeat(&mut buf, session(), 5);
        assert_eq!(&buf, b"BOURSE01  \x00\x00\x00\x00\x00\x00\x00\x05\x00\x00");
        assert_eq!(Packet::decode(&buf).unwrap().kind(), PacketKind::Heartbeat);
        encode_end_of_session(&mut buf, session(), 5);
        assert_eq!(&buf[18..], b"\xff\xff");
        assert_eq!(
            Packet::decode(&buf).unwrap().kind(),
            PacketKind::EndOfSession
        );
        let r = Request::new(session(), 3, 10);
        assert_eq!(r.encode(&mut buf), 20);
        assert_eq!(&buf, b"BOURSE01  \x00\x00\x00\x00\x00\x00\x00\x03\x00\x0a");
        assert_eq!(Request::decode(&buf), Ok(r));
        assert_eq!(r.session_id(), session());
    }

    #[test]
    fn builder_fills_to_the_payload_limit() {
        let mut b = PacketBuilder::new(session(), 1, DEFAULT_MAX_PAYLOAD);
        let msg = [0x41u8; 36];
        let mut pushed = 0;
        while b.push(&msg).is_ok() {
            pushed += 1;
        }
        // (1400 - 20) / 38 = 36 blocks of 38 bytes.
        assert_eq!(pushed, 36);
        assert_eq!(b.push(&msg), Err(PushError::Full));
        assert!(b.finish().len() <= DEFAULT_MAX_PAYLOAD);
        assert_eq!(b.push(&[0u8; 1400]), Err(PushError::TooLarge));
        assert_eq!(b.push(&msg), Ok(37));
    }

    #[test]
    fn builder_byte_limit_binds_before_the_block_limit() {
        let mut b = PacketBuilder::new(session(), 1, MAX_UDP_PAYLOAD);
        let mut pushed = 0u32;
        while b.push(b"").is_ok() {
            pushed += 1;
        }
        // 65 507 bytes hold 32 743 empty blocks, so 0xFFFE blocks cannot occur over IPv4;
        // the count check stays as a guard for the reserved 0xFFFF.
        assert_eq!(pushed, ((MAX_UDP_PAYLOAD - HEADER_LEN) / 2) as u32);
        let p = b.finish().to_vec();
        assert_eq!(
            Packet::decode(&p).unwrap().messages().count(),
            pushed as usize
        );
    }

    #[test]
    fn decode_rejects_inconsistent_counts() {
        let mut b = PacketBuilder::new(session(), 1, DEFAULT_MAX_PAYLOAD);
        b.push(b"abc").unwrap();
        let mut bytes = b.finish().to_vec();
        bytes[19] = 2;
        assert!(matches!(
            Packet::decode(&bytes),
            Err(DecodeError::Truncated { .. })
        ));
        bytes[19] = 1;
        bytes.push(0);
        assert_eq!(
            Packet::decode(&bytes),
            Err(DecodeError::BadField {
                field: "message_count"
            })
        );
        let mut hb = [0u8; 21];
        encode_heartbeat(&mut hb, session(), 1);
        assert!(Packet::decode(&hb).is_err());
        assert!(Packet::decode(&hb[..19]).is_err());
    }
}
