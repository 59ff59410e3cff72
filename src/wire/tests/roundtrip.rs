//! Round-trip properties: decode(encode(m)) == m and the encoded length is the type's fixed
//! length, for every message of every protocol.

use super::arb::{self, Codes};
use super::roundtrip_cases;
use crate::wire::ascii::SessionId;
use crate::wire::glimpse::{EndOfSnapshot, SnapshotMessage};
use crate::wire::itch::{self, binary_file};
use crate::wire::moldudp64::{self, PacketBuilder, PushError, Request};
use crate::wire::ouch::{Inbound, Outbound};
use crate::wire::soupbin::{self, FrameReader, Packet};
use proptest::prelude::*;

fn config() -> ProptestConfig {
    ProptestConfig {
        cases: roundtrip_cases(),
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn ouch_inbound_round_trips(m in arb::inbound()) {
        let mut buf = [0u8; 128];
        let n = m.encode(&mut buf);
        prop_assert_eq!(n, m.encoded_len());
        prop_assert_eq!(buf[0], m.kind());
        prop_assert_eq!(Inbound::decode(&buf[..n]), Ok(m));
        let mut out = bytes::BytesMut::new();
        m.put(&mut out);
        prop_assert_eq!(&out[..], &buf[..n]);
    }

    #[test]
    fn ouch_outbound_round_trips(m in arb::outbound()) {
        let mut buf = [0u8; 128];
        let n = m.encode(&mut buf);
        prop_assert_eq!(Some(n), Outbound::len_of(buf[0]));
        prop_assert_eq!(Outbound::decode(&buf[..n]), Ok(m));
        let mut out = bytes::BytesMut::new();
        m.put(&mut out);
        prop_assert_eq!(&out[..], &buf[..n]);
    }

    #[test]
    fn itch_round_trips(m in arb::itch_message(Codes::Any)) {
        let mut buf = [0u8; 64];
        let n = m.encode(&mut buf);
        prop_assert_eq!(Some(n), itch::modelled_len(buf[0]));
        prop_assert_eq!(itch::Message::decode(&buf[..n]), Ok(m));
        prop_assert_eq!(itch::decode_any(&buf[..n]), Ok(itch::Decoded::Message(m)));
        prop_assert_eq!(SnapshotMessage::decode(&buf[..n]), Ok(SnapshotMessage::Itch(itch::Decoded::Message(m))));
        let mut record = [0u8; 66];
        let r = binary_file::write_message(&mut record, &m);
        let read: Vec<_> = binary_file::Reader::new(&record[..r]).collect();
        prop_assert_eq!(read, vec![Ok(&buf[..n])]);
    }

    #[test]
    fn soupbin_packets_round_trip_through_the_frame_reader(
        packets in proptest::collection::vec(arb::soupbin_packet(200), 1..20),
        chunk in 1usize..64,
    ) {
        let mut wire = Vec::new();
        let mut buf = vec![0u8; 512];
        for p in &packets {
            let packet = p.packet();
            let n = packet.encode(&mut buf);
            prop_assert_eq!(n, packet.encoded_len());
            prop_assert_eq!(Packet::decode(&buf[2..n]), Ok(packet));
            wire.extend_from_slice(&buf[..n]);
        }
        let mut reader = FrameReader::new(soupbin::CLIENT_MAX_PACKET_LEN);
        let mut seen = 0usize;
        for piece in wire.chunks(chunk) {
            let mut rest = piece;
            while !rest.is_empty() {
                let taken = reader.feed(rest);
                rest = &rest[taken..];
                while let Some(p) = reader.next_packet() {
                    prop_assert_eq!(p, Ok(packets[seen].packet()));
                    seen += 1;
                }
            }
        }
        prop_assert_eq!(seen, packets.len());
        prop_assert_eq!(reader.buffered(), 0);
    }

    #[test]
    fn moldudp64_request_heartbeat_and_end_of_session_round_trip(
        session in arb::session(), sequence in any::<u64>(), count in any::<u16>(),
    ) {
        let mut buf = [0u8; 20];
        let r = Request::new(session, sequence, count);
        prop_assert_eq!(r.encode(&mut buf), 20);
        prop_assert_eq!(Request::decode(&buf), Ok(r));
        prop_assert_eq!(r.session_id(), session);
        moldudp64::encode_heartbeat(&mut buf, session, sequence);
        let p = moldudp64::Packet::decode(&buf).unwrap();
        prop_assert_eq!((p.kind(), p.header.sequence), (moldudp64::PacketKind::Heartbeat, sequence));
        moldudp64::encode_end_of_session(&mut buf, session, sequence);
        let p = moldudp64::Packet::decode(&buf).unwrap();
        prop_assert_eq!(p.kind(), moldudp64::PacketKind::EndOfSession);
        prop_assert_eq!(p.messages().count(), 0);
    }

    #[test]
    fn glimpse_end_of_snapshot_round_trips(sequence in any::<u64>()) {
        let mut buf = [0u8; 21];
        let e = EndOfSnapshot { sequence };
        prop_assert_eq!(e.encode(&mut buf), 21);
        prop_assert_eq!(EndOfSnapshot::decode(&buf), Ok(e));
        prop_assert_eq!(SnapshotMessage::decode(&buf), Ok(SnapshotMessage::End(e)));
    }
}

/// Packing many messages per case is slower to generate; a quarter of the cases suffice.
fn packing_config() -> ProptestConfig {
    ProptestConfig {
        cases: roundtrip_cases() / 4,
        ..config()
    }
}

proptest! {
    #![proptest_config(packing_config())]

    #[test]
    fn moldudp64_packs_and_unpacks_every_message(
        messages in proptest::collection::vec(arb::itch_message(Codes::Any), 1..120),
        first in 1u64..1_000_000,
        max_payload in 72usize..1500,
    ) {
        let session = SessionId::new("BOURSE0001").unwrap();
        let mut builder = PacketBuilder::new(session, first, max_payload);
        let mut decoded = Vec::new();
        let drain = |bytes: &[u8], decoded: &mut Vec<(u64, itch::Message)>| {
            assert!(bytes.len() <= max_payload);
            let p = moldudp64::Packet::decode(bytes).unwrap();
            assert_eq!(p.header.session_id(), session);
            for (seq, block) in p.messages() {
                decoded.push((seq, itch::Message::decode(block).unwrap()));
            }
        };
        for m in &messages {
            match builder.push_itch(m) {
                Ok(_) => {}
                Err(PushError::Full) => {
                    drain(builder.finish(), &mut decoded);
                    prop_assert!(builder.push_itch(m).is_ok());
                }
                Err(PushError::TooLarge) => prop_assert!(false, "ITCH fits in 72 bytes"),
            }
        }
        drain(builder.finish(), &mut decoded);
        prop_assert_eq!(decoded.len(), messages.len());
        for (i, (seq, m)) in decoded.iter().enumerate() {
            prop_assert_eq!(*seq, first + i as u64);
            prop_assert_eq!(m, &messages[i]);
        }
        prop_assert_eq!(builder.next_sequence(), first + messages.len() as u64);
    }
}
