//! Bounded fuzzing with proptest: arbitrary bytes and mutations of valid messages into every
//! decoder, and random byte streams in random chunks into the SoupBinTCP framing reader.
//! A decoder must return a message or a typed error, never panic; a fixed-layout message that
//! decodes must re-encode to the same bytes; the framing reader's buffer never exceeds its
//! bound. Case count: `BOURSE_WIRE_FUZZ_CASES` (see [`super::fuzz_cases`]).

use super::arb::{self, Codes};
use super::fuzz_cases;
use crate::wire::glimpse::{EndOfSnapshot, SnapshotMessage};
use crate::wire::itch::{self, binary_file};
use crate::wire::moldudp64::{self, PacketBuilder, Request};
use crate::wire::ouch::{Inbound, Outbound};
use crate::wire::soupbin::{self, FrameReader, Packet};
use crate::wire::{ascii::SessionId, pcap};
use proptest::prelude::*;

fn config() -> ProptestConfig {
    ProptestConfig {
        cases: fuzz_cases(),
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

/// Every decoder on one byte string; re-encodes whatever decodes where the layout is fixed.
/// The bytes an encoder writes into a scratch buffer.
fn encoded(encode: impl FnOnce(&mut [u8]) -> usize) -> Vec<u8> {
    let mut buf = [0u8; 128];
    let n = encode(&mut buf);
    buf[..n].to_vec()
}

fn decode_everything(bytes: &[u8]) {
    if let Ok(m) = Inbound::decode(bytes) {
        assert_eq!(encoded(|b| m.encode(b)), bytes);
    }
    if let Ok(m) = Outbound::decode(bytes) {
        assert_eq!(encoded(|b| m.encode(b)), bytes);
    }
    if let Ok(m) = itch::Message::decode(bytes) {
        assert_eq!(encoded(|b| m.encode(b)), bytes);
    }
    let _ = itch::decode_any(bytes);
    if let Ok(p) = Packet::decode(bytes) {
        // Padding may differ (we write right-justified), the length may not.
        assert_eq!(p.encoded_len(), bytes.len() + 2);
        let mut big = vec![0u8; bytes.len() + 2];
        let n = p.encode(&mut big);
        assert_eq!(Packet::decode(&big[2..n]), Ok(p));
    }
    if let Ok(p) = moldudp64::Packet::decode(bytes) {
        let blocks = p.messages().count();
        assert_eq!(blocks, usize::from(p.message_count()));
        for (_, block) in p.messages() {
            let _ = itch::decode_any(block);
        }
    }
    if let Ok(r) = Request::decode(bytes) {
        assert_eq!(encoded(|b| r.encode(b)), bytes);
    }
    let _ = EndOfSnapshot::decode(bytes);
    let _ = SnapshotMessage::decode(bytes);
    for message in binary_file::Reader::new(bytes)
        .take(bytes.len() + 1)
        .flatten()
    {
        let _ = itch::decode_any(message);
    }
    if let Ok(reader) = pcap::Reader::new(bytes) {
        for record in reader.take(bytes.len() + 1).flatten() {
            let _ = pcap::udp_datagram(record.data);
        }
    }
    let _ = pcap::udp_datagram(bytes);
}

/// A valid encoding of some message of any protocol.
fn valid_bytes() -> impl Strategy<Value = Vec<u8>> {
    let ouch_in = arb::inbound().prop_map(|m| encoded(|b| m.encode(b)));
    let ouch_out = arb::outbound().prop_map(|m| encoded(|b| m.encode(b)));
    let itch = arb::itch_message(Codes::Any).prop_map(|m| encoded(|b| m.encode(b)));
    let soup = arb::soupbin_packet(64).prop_map(|p| {
        let packet = p.packet();
        let mut out = vec![0u8; packet.encoded_len()];
        packet.encode(&mut out);
        out.split_off(2)
    });
    let mold = proptest::collection::vec(arb::itch_message(Codes::Any), 1..8).prop_map(|ms| {
        let mut b = PacketBuilder::new(
            SessionId::new("S1").unwrap(),
            1,
            moldudp64::DEFAULT_MAX_PAYLOAD,
        );
        for m in &ms {
            b.push_itch(m).unwrap();
        }
        b.finish().to_vec()
    });
    let glimpse = any::<u64>().prop_map(|sequence| {
        let mut out = vec![0u8; 21];
        EndOfSnapshot { sequence }.encode(&mut out);
        out
    });
    prop_oneof![ouch_in, ouch_out, itch, soup, mold, glimpse]
}

#[derive(Clone, Debug)]
enum Mutation {
    Set(usize, u8),
    Truncate(usize),
    Append(Vec<u8>),
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        4 => (any::<usize>(), any::<u8>()).prop_map(|(i, b)| Mutation::Set(i, b)),
        1 => any::<usize>().prop_map(Mutation::Truncate),
        1 => proptest::collection::vec(any::<u8>(), 1..4).prop_map(Mutation::Append),
    ]
}

fn mutate(mut bytes: Vec<u8>, mutations: &[Mutation]) -> Vec<u8> {
    for m in mutations {
        match m {
            Mutation::Set(i, b) if !bytes.is_empty() => {
                let len = bytes.len();
                bytes[i % len] = *b;
            }
            Mutation::Set(..) => {}
            Mutation::Truncate(n) => bytes.truncate(n % (bytes.len() + 1)),
            Mutation::Append(extra) => bytes.extend_from_slice(extra),
        }
    }
    bytes
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn arbitrary_bytes_never_panic_any_decoder(bytes in proptest::collection::vec(any::<u8>(), 0..160)) {
        decode_everything(&bytes);
    }

    #[test]
    fn arbitrary_bytes_with_a_known_type_letter_never_panic(
        kind in proptest::sample::select(&b"OUXMSAUCDEBJPITRHYLFQV WKhN+ZG"[..]),
        rest in proptest::collection::vec(any::<u8>(), 0..96),
    ) {
        let mut bytes = vec![kind];
        bytes.extend_from_slice(&rest);
        decode_everything(&bytes);
    }

    #[test]
    fn mutated_valid_messages_never_panic(
        bytes in valid_bytes(),
        mutations in proptest::collection::vec(mutation(), 1..4),
    ) {
        decode_everything(&mutate(bytes, &mutations));
    }

    #[test]
    fn framing_reader_stays_bounded_on_any_stream(
        pieces in proptest::collection::vec(
            prop_oneof![
                3 => arb::soupbin_packet(64).prop_map(|p| {
                    let packet = p.packet();
                    let mut out = vec![0u8; packet.encoded_len()];
                    packet.encode(&mut out);
                    out
                }),
                1 => proptest::collection::vec(any::<u8>(), 0..40),
            ],
            1..24,
        ),
        chunks in proptest::collection::vec(1usize..80, 1..16),
        max_packet_len in prop_oneof![Just(soupbin::CLIENT_MAX_PACKET_LEN), 1usize..128],
    ) {
        let stream = pieces.concat();
        let mut reader = FrameReader::new(max_packet_len);
        let capacity = reader.capacity();
        let mut at = 0;
        let mut round = 0;
        // What `following_unsequenced` said before the last packet was taken: the packet
        // taken next, with no bytes fed in between, is that Unsequenced Data when it said
        // one, and no Unsequenced Data when it said none. A packet it named stays promised
        // across feeding (bytes are only added).
        let mut said: Option<Option<Vec<u8>>> = None;
        // Each round either consumes input or ends: feeding is bounded by the stream length.
        'outer: while at < stream.len() {
            let want = chunks[round % chunks.len()];
            round += 1;
            let end = (at + want).min(stream.len());
            let mut piece = &stream[at..end];
            at = end;
            while !piece.is_empty() {
                let taken = reader.feed(piece);
                piece = &piece[taken..];
                prop_assert!(reader.buffered() <= capacity);
                let mut packets = 0;
                loop {
                    let peek = reader.following_unsequenced().map(<[u8]>::to_vec);
                    let Some(p) = reader.next_packet() else {
                        prop_assert!(!matches!(said, Some(Some(_))), "a promised packet is missing");
                        said = None; // a "none" may change once more bytes come
                        break;
                    };
                    packets += 1;
                    prop_assert!(packets <= capacity, "more packets than bytes");
                    match p {
                        Ok(packet) => {
                            prop_assert!(packet.encoded_len() <= 2 + max_packet_len);
                            let got = match packet {
                                Packet::UnsequencedData(b) => Some(b.to_vec()),
                                _ => None,
                            };
                            if let Some(said) = said.take() {
                                prop_assert_eq!(said, got, "the packet after the next, as seen");
                            }
                        }
                        Err(_) => {
                            prop_assert!(!matches!(said, Some(Some(_))), "a promised packet failed");
                            break 'outer;
                        }
                    }
                    said = Some(peek);
                }
                prop_assert!(taken > 0 || !reader.read_space().is_empty());
            }
        }
        prop_assert_eq!(reader.capacity(), capacity);
    }
}
