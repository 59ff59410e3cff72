//! Minimal classic-pcap reader and writer (Ethernet / IPv4 / UDP and TCP) for tests and tools:
//! reading captured MoldUDP64 datagrams, and writing synthetic captures of our own traffic for
//! tshark to dissect.
//!
//! The writer emits nanosecond-resolution classic pcap (magic `0xa1b23c4d`, little-endian,
//! link type 1 = Ethernet) with correct IPv4, UDP and TCP checksums. [`TcpFlow`] keeps the
//! sequence and acknowledgement numbers of one connection consistent, starting with a
//! three-way handshake, so that tshark's TCP reassembly sees a clean stream.

use std::net::{Ipv4Addr, SocketAddrV4};

/// Link type of Ethernet II frames.
pub const LINKTYPE_ETHERNET: u32 = 1;
const MAGIC_MICROS: u32 = 0xa1b2_c3d4;
const MAGIC_NANOS: u32 = 0xa1b2_3c4d;
const GLOBAL_HEADER_LEN: usize = 24;
const RECORD_HEADER_LEN: usize = 16;
const ETHERNET_HEADER_LEN: usize = 14;
const IPV4_HEADER_LEN: usize = 20;
const UDP_HEADER_LEN: usize = 8;
const TCP_HEADER_LEN: usize = 20;
const ETHERTYPE_IPV4: u16 = 0x0800;
const ETHERTYPE_VLAN: u16 = 0x8100;
const PROTO_TCP: u8 = 6;
const PROTO_UDP: u8 = 17;
/// Largest frame we write or accept (snap length).
pub const SNAPLEN: usize = 65_535;

/// Why a capture could not be read.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum PcapError {
    BadMagic(u32),
    Truncated { at: usize },
    UnsupportedLinkType(u32),
    Oversized { len: usize },
}

/// One captured frame.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct Record<'a> {
    /// Capture time in nanoseconds since the Unix epoch.
    pub timestamp_ns: u64,
    pub data: &'a [u8],
}

/// Iterates the records of a little- or big-endian classic pcap image of Ethernet frames.
pub struct Reader<'a> {
    rest: &'a [u8],
    offset: usize,
    nanos: bool,
    big_endian: bool,
    failed: bool,
}

impl<'a> Reader<'a> {
    pub fn new(bytes: &'a [u8]) -> Result<Reader<'a>, PcapError> {
        if bytes.len() < GLOBAL_HEADER_LEN {
            return Err(PcapError::Truncated { at: 0 });
        }
        let le = u32::from_le_bytes(bytes[0..4].try_into().expect("4 bytes"));
        let (nanos, big_endian) = match (le, le.swap_bytes()) {
            (MAGIC_MICROS, _) => (false, false),
            (MAGIC_NANOS, _) => (true, false),
            (_, MAGIC_MICROS) => (false, true),
            (_, MAGIC_NANOS) => (true, true),
            _ => return Err(PcapError::BadMagic(le)),
        };
        let reader = Reader {
            rest: bytes,
            offset: 0,
            nanos,
            big_endian,
            failed: false,
        };
        let link_type = reader.u32_at(20);
        if link_type != LINKTYPE_ETHERNET {
            return Err(PcapError::UnsupportedLinkType(link_type));
        }
        Ok(Reader {
            rest: &bytes[GLOBAL_HEADER_LEN..],
            offset: GLOBAL_HEADER_LEN,
            ..reader
        })
    }

    fn u32_at(&self, at: usize) -> u32 {
        let b: [u8; 4] = self.rest[at..at + 4].try_into().expect("4 bytes");
        if self.big_endian {
            u32::from_be_bytes(b)
        } else {
            u32::from_le_bytes(b)
        }
    }
}

impl<'a> Iterator for Reader<'a> {
    type Item = Result<Record<'a>, PcapError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.failed || self.rest.is_empty() {
            return None;
        }
        self.failed = true; // Cleared below once the record is known to be whole.
        if self.rest.len() < RECORD_HEADER_LEN {
            return Some(Err(PcapError::Truncated { at: self.offset }));
        }
        let seconds = u64::from(self.u32_at(0));
        let fraction = u64::from(self.u32_at(4));
        let captured = self.u32_at(8) as usize;
        if captured > SNAPLEN {
            return Some(Err(PcapError::Oversized { len: captured }));
        }
        if self.rest.len() < RECORD_HEADER_LEN + captured {
            return Some(Err(PcapError::Truncated { at: self.offset }));
        }
        let data = &self.rest[RECORD_HEADER_LEN..RECORD_HEADER_LEN + captured];
        self.rest = &self.rest[RECORD_HEADER_LEN + captured..];
        self.offset += RECORD_HEADER_LEN + captured;
        self.failed = false;
        let sub_second_ns = if self.nanos {
            fraction
        } else {
            fraction * 1000
        };
        Some(Ok(Record {
            timestamp_ns: seconds * 1_000_000_000 + sub_second_ns,
            data,
        }))
    }
}

/// A UDP datagram found in an Ethernet frame.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct UdpDatagram<'a> {
    pub source: SocketAddrV4,
    pub destination: SocketAddrV4,
    pub payload: &'a [u8],
}

/// The UDP datagram of an Ethernet (optionally VLAN-tagged) IPv4 frame; `None` for anything
/// else, including fragments and truncated frames.
pub fn udp_datagram(frame: &[u8]) -> Option<UdpDatagram<'_>> {
    let mut ethertype = u16::from_be_bytes(frame.get(12..14)?.try_into().ok()?);
    let mut at = ETHERNET_HEADER_LEN;
    if ethertype == ETHERTYPE_VLAN {
        ethertype = u16::from_be_bytes(frame.get(16..18)?.try_into().ok()?);
        at += 4;
    }
    if ethertype != ETHERTYPE_IPV4 {
        return None;
    }
    let ip = frame.get(at..)?;
    let header_len = usize::from(ip.first()? & 0x0f) * 4;
    let total_len = usize::from(u16::from_be_bytes(ip.get(2..4)?.try_into().ok()?));
    let fragment = u16::from_be_bytes(ip.get(6..8)?.try_into().ok()?);
    let more_fragments_or_offset = fragment & 0x3fff != 0;
    if ip[0] >> 4 != 4 || *ip.get(9)? != PROTO_UDP || more_fragments_or_offset {
        return None;
    }
    if header_len < IPV4_HEADER_LEN || total_len < header_len || total_len > ip.len() {
        return None;
    }
    let source_ip = Ipv4Addr::from(<[u8; 4]>::try_from(&ip[12..16]).ok()?);
    let destination_ip = Ipv4Addr::from(<[u8; 4]>::try_from(&ip[16..20]).ok()?);
    let udp = &ip[header_len..total_len];
    let udp_len = usize::from(u16::from_be_bytes(udp.get(4..6)?.try_into().ok()?));
    if udp_len < UDP_HEADER_LEN || udp_len > udp.len() {
        return None;
    }
    let port = |at: usize| u16::from_be_bytes([udp[at], udp[at + 1]]);
    Some(UdpDatagram {
        source: SocketAddrV4::new(source_ip, port(0)),
        destination: SocketAddrV4::new(destination_ip, port(2)),
        payload: &udp[UDP_HEADER_LEN..udp_len],
    })
}

/// TCP flag bits.
pub mod tcp_flags {
    pub const FIN: u8 = 0x01;
    pub const SYN: u8 = 0x02;
    pub const PSH: u8 = 0x08;
    pub const ACK: u8 = 0x10;
}

/// Builds a nanosecond classic pcap image in memory.
pub struct Writer {
    out: Vec<u8>,
    /// Timestamp of the next frame; each frame advances it by one microsecond.
    next_ns: u64,
    ip_id: u16,
}

impl Writer {
    /// A capture whose first frame is stamped `start_ns` (nanoseconds since the Unix epoch).
    pub fn new(start_ns: u64) -> Writer {
        let mut out = Vec::with_capacity(4096);
        out.extend_from_slice(&MAGIC_NANOS.to_le_bytes());
        out.extend_from_slice(&2u16.to_le_bytes());
        out.extend_from_slice(&4u16.to_le_bytes());
        out.extend_from_slice(&0i32.to_le_bytes()); // thiszone
        out.extend_from_slice(&0u32.to_le_bytes()); // sigfigs
        out.extend_from_slice(&(SNAPLEN as u32).to_le_bytes());
        out.extend_from_slice(&LINKTYPE_ETHERNET.to_le_bytes());
        debug_assert_eq!(out.len(), GLOBAL_HEADER_LEN);
        Writer {
            out,
            next_ns: start_ns,
            ip_id: 1,
        }
    }

    /// The capture so far.
    pub fn bytes(&self) -> &[u8] {
        &self.out
    }

    pub fn into_bytes(self) -> Vec<u8> {
        self.out
    }

    /// Append one Ethernet frame.
    pub fn frame(&mut self, frame: &[u8]) {
        assert!(frame.len() <= SNAPLEN);
        let seconds = (self.next_ns / 1_000_000_000) as u32;
        let nanos = (self.next_ns % 1_000_000_000) as u32;
        self.next_ns += 1_000;
        for field in [seconds, nanos, frame.len() as u32, frame.len() as u32] {
            self.out.extend_from_slice(&field.to_le_bytes());
        }
        self.out.extend_from_slice(frame);
    }

    /// Append a UDP datagram in an Ethernet/IPv4 frame.
    pub fn udp(&mut self, source: SocketAddrV4, destination: SocketAddrV4, payload: &[u8]) {
        let udp_len = UDP_HEADER_LEN + payload.len();
        let mut l4 = Vec::with_capacity(udp_len);
        l4.extend_from_slice(&source.port().to_be_bytes());
        l4.extend_from_slice(&destination.port().to_be_bytes());
        l4.extend_from_slice(&(udp_len as u16).to_be_bytes());
        l4.extend_from_slice(&[0, 0]);
        l4.extend_from_slice(payload);
        let sum = transport_checksum(*source.ip(), *destination.ip(), PROTO_UDP, &l4);
        // RFC 768: a computed zero is sent as all ones (zero means "no checksum").
        let sum = if sum == 0 { 0xffff } else { sum };
        l4[6..8].copy_from_slice(&sum.to_be_bytes());
        self.ipv4(*source.ip(), *destination.ip(), PROTO_UDP, &l4);
    }

    /// Append a TCP segment in an Ethernet/IPv4 frame.
    pub fn tcp(&mut self, segment: TcpSegment<'_>) {
        let mut l4 = Vec::with_capacity(TCP_HEADER_LEN + segment.payload.len());
        l4.extend_from_slice(&segment.source.port().to_be_bytes());
        l4.extend_from_slice(&segment.destination.port().to_be_bytes());
        l4.extend_from_slice(&segment.sequence.to_be_bytes());
        l4.extend_from_slice(&segment.acknowledgement.to_be_bytes());
        l4.push((TCP_HEADER_LEN as u8 / 4) << 4);
        l4.push(segment.flags);
        l4.extend_from_slice(&65_535u16.to_be_bytes()); // window
        l4.extend_from_slice(&[0, 0, 0, 0]); // checksum, urgent pointer
        l4.extend_from_slice(segment.payload);
        let (src, dst) = (*segment.source.ip(), *segment.destination.ip());
        let sum = transport_checksum(src, dst, PROTO_TCP, &l4);
        l4[16..18].copy_from_slice(&sum.to_be_bytes());
        self.ipv4(src, dst, PROTO_TCP, &l4);
    }

    fn ipv4(&mut self, source: Ipv4Addr, destination: Ipv4Addr, protocol: u8, l4: &[u8]) {
        let total_len = IPV4_HEADER_LEN + l4.len();
        assert!(ETHERNET_HEADER_LEN + total_len <= SNAPLEN);
        let mut frame = Vec::with_capacity(ETHERNET_HEADER_LEN + total_len);
        frame.extend_from_slice(&destination_mac(destination));
        frame.extend_from_slice(&[0x02, 0, 0, 0, 0, 0x01]); // locally administered source
        frame.extend_from_slice(&ETHERTYPE_IPV4.to_be_bytes());
        let mut ip = [0u8; IPV4_HEADER_LEN];
        ip[0] = 0x45;
        ip[2..4].copy_from_slice(&(total_len as u16).to_be_bytes());
        ip[4..6].copy_from_slice(&self.ip_id.to_be_bytes());
        ip[6] = 0x40; // don't fragment
        ip[8] = 64; // TTL
        ip[9] = protocol;
        ip[12..16].copy_from_slice(&source.octets());
        ip[16..20].copy_from_slice(&destination.octets());
        let sum = checksum_finish(checksum_add(0, &ip));
        ip[10..12].copy_from_slice(&sum.to_be_bytes());
        self.ip_id = self.ip_id.wrapping_add(1);
        frame.extend_from_slice(&ip);
        frame.extend_from_slice(l4);
        self.frame(&frame);
    }
}

/// IPv4 multicast maps to 01:00:5e + the low 23 bits; anything else gets a fixed unicast MAC.
fn destination_mac(ip: Ipv4Addr) -> [u8; 6] {
    let o = ip.octets();
    if ip.is_multicast() {
        [0x01, 0x00, 0x5e, o[1] & 0x7f, o[2], o[3]]
    } else {
        [0x02, 0, 0, 0, 0, 0x02]
    }
}

/// One's-complement sum of 16-bit big-endian words (odd tail padded with zero).
fn checksum_add(mut sum: u32, bytes: &[u8]) -> u32 {
    let mut words = bytes.chunks_exact(2);
    for w in &mut words {
        sum += u32::from(u16::from_be_bytes([w[0], w[1]]));
    }
    if let [last] = words.remainder() {
        sum += u32::from(*last) << 8;
    }
    // Fold now so a long payload cannot overflow u32.
    (sum & 0xffff) + (sum >> 16)
}

fn checksum_finish(mut sum: u32) -> u16 {
    while sum >> 16 != 0 {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

fn transport_checksum(source: Ipv4Addr, destination: Ipv4Addr, protocol: u8, l4: &[u8]) -> u16 {
    let mut pseudo = [0u8; 12];
    pseudo[0..4].copy_from_slice(&source.octets());
    pseudo[4..8].copy_from_slice(&destination.octets());
    pseudo[9] = protocol;
    pseudo[10..12].copy_from_slice(&(l4.len() as u16).to_be_bytes());
    checksum_finish(checksum_add(checksum_add(0, &pseudo), l4))
}

/// One TCP segment to write.
#[derive(Clone, Copy, Debug)]
pub struct TcpSegment<'a> {
    pub source: SocketAddrV4,
    pub destination: SocketAddrV4,
    pub sequence: u32,
    pub acknowledgement: u32,
    pub flags: u8,
    pub payload: &'a [u8],
}

/// Both directions of one TCP connection with consistent sequence numbers.
pub struct TcpFlow {
    pub client: SocketAddrV4,
    pub server: SocketAddrV4,
    client_next: u32,
    server_next: u32,
}

impl TcpFlow {
    /// Writes the SYN, SYN-ACK, ACK handshake and returns the established flow.
    pub fn open(w: &mut Writer, client: SocketAddrV4, server: SocketAddrV4) -> TcpFlow {
        use tcp_flags::{ACK, SYN};
        let (client_isn, server_isn) = (1_000u32, 5_000u32);
        let syn = |source, destination, sequence, acknowledgement, flags| TcpSegment {
            source,
            destination,
            sequence,
            acknowledgement,
            flags,
            payload: &[],
        };
        w.tcp(syn(client, server, client_isn, 0, SYN));
        w.tcp(syn(server, client, server_isn, client_isn + 1, SYN | ACK));
        w.tcp(syn(client, server, client_isn + 1, server_isn + 1, ACK));
        TcpFlow {
            client,
            server,
            client_next: client_isn + 1,
            server_next: server_isn + 1,
        }
    }

    /// Client to server data (PSH, ACK).
    pub fn client_sends(&mut self, w: &mut Writer, payload: &[u8]) {
        let segment = self.segment(true, payload);
        w.tcp(segment);
        self.client_next = self.client_next.wrapping_add(payload.len() as u32);
    }

    /// Server to client data (PSH, ACK).
    pub fn server_sends(&mut self, w: &mut Writer, payload: &[u8]) {
        let segment = self.segment(false, payload);
        w.tcp(segment);
        self.server_next = self.server_next.wrapping_add(payload.len() as u32);
    }

    fn segment<'a>(&self, from_client: bool, payload: &'a [u8]) -> TcpSegment<'a> {
        let flags = tcp_flags::PSH | tcp_flags::ACK;
        if from_client {
            TcpSegment {
                source: self.client,
                destination: self.server,
                sequence: self.client_next,
                acknowledgement: self.server_next,
                flags,
                payload,
            }
        } else {
            TcpSegment {
                source: self.server,
                destination: self.client,
                sequence: self.server_next,
                acknowledgement: self.client_next,
                flags,
                payload,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn udp_round_trip_through_writer_and_reader() {
        let mut w = Writer::new(1_700_000_000_000_000_000);
        let src = SocketAddrV4::new(Ipv4Addr::new(127, 0, 0, 1), 40000);
        let dst = SocketAddrV4::new(Ipv4Addr::new(239, 192, 0, 1), 26400);
        w.udp(src, dst, b"hello");
        w.udp(src, dst, b"");
        let bytes = w.into_bytes();
        let records: Vec<_> = Reader::new(&bytes).unwrap().map(Result::unwrap).collect();
        assert_eq!(records.len(), 2);
        assert_eq!(records[1].timestamp_ns, 1_700_000_000_000_001_000);
        let d = udp_datagram(records[0].data).unwrap();
        assert_eq!(
            (d.source, d.destination, d.payload),
            (src, dst, &b"hello"[..])
        );
        assert_eq!(udp_datagram(records[1].data).unwrap().payload, b"");
    }

    #[test]
    fn checksums_verify_to_zero() {
        // Re-summing a header that carries its checksum gives 0 after complement.
        let mut w = Writer::new(0);
        let a = SocketAddrV4::new(Ipv4Addr::new(10, 0, 0, 1), 1);
        let b = SocketAddrV4::new(Ipv4Addr::new(10, 0, 0, 2), 2);
        w.udp(a, b, b"odd");
        let bytes = w.into_bytes();
        let frame = Reader::new(&bytes).unwrap().next().unwrap().unwrap().data;
        let ip = &frame[ETHERNET_HEADER_LEN..];
        assert_eq!(checksum_finish(checksum_add(0, &ip[..IPV4_HEADER_LEN])), 0);
        let l4 = &ip[IPV4_HEADER_LEN..];
        assert_eq!(transport_checksum(*a.ip(), *b.ip(), PROTO_UDP, l4), 0);
    }

    #[test]
    fn reader_rejects_garbage() {
        assert!(Reader::new(b"short").is_err());
        assert!(matches!(
            Reader::new(&[0u8; 24]),
            Err(PcapError::BadMagic(0))
        ));
        let mut w = Writer::new(0).into_bytes();
        w.extend_from_slice(&[1, 2, 3]);
        let mut r = Reader::new(&w).unwrap();
        assert!(matches!(r.next(), Some(Err(PcapError::Truncated { .. }))));
        assert!(r.next().is_none());
        assert_eq!(udp_datagram(&[0u8; 10]), None);
    }
}
