//! Real Nasdaq bytes from `shared/data` (see its README for provenance and expected counts).

use super::shared_data;
use crate::wire::itch::{self, Body, binary_file};
use crate::wire::{moldudp64, pcap};
use std::collections::BTreeMap;

#[test]
fn nasdaq_binary_file_decodes_to_the_readme_counts_and_re_encodes_identically() {
    let bytes = std::fs::read(shared_data("itch50_nasdaq_session_first1000.bin")).expect("fixture");
    assert_eq!(bytes.len(), 40_874);
    let mut counts = BTreeMap::<char, usize>::new();
    let mut re_encoded = Vec::with_capacity(bytes.len());
    let mut record = [0u8; 2 + itch::MAX_MESSAGE_LEN];
    let mut first = None;
    for message in binary_file::Reader::new(&bytes) {
        let m = itch::Message::decode(message.expect("whole record")).expect("modelled type");
        *counts.entry(m.body.kind() as char).or_default() += 1;
        first.get_or_insert(m);
        let n = binary_file::write_message(&mut record, &m);
        re_encoded.extend_from_slice(&record[..n]);
    }
    let want: BTreeMap<char, usize> = [('S', 1), ('R', 993), ('H', 3), ('Y', 3)].into();
    assert_eq!(counts, want);
    assert!(
        re_encoded == bytes,
        "re-encoding differs from the Nasdaq bytes"
    );
    // README: event `O` at 03:04:32.057543747.
    let first = first.unwrap();
    assert_eq!(first.body, Body::SystemEvent { event: b'O' });
    assert_eq!(
        first.header.timestamp.0,
        ((3 * 60 + 4) * 60 + 32) * 1_000_000_000 + 57_543_747
    );
}

#[test]
fn omi_moldudp64_capture_decodes_to_39_messages() {
    let bytes = std::fs::read(shared_data("omi_moldudp64_itch50_2pkts.pcap")).expect("fixture");
    let mut counts = BTreeMap::<char, usize>::new();
    let mut packets = Vec::new();
    for record in pcap::Reader::new(&bytes).expect("pcap header") {
        let datagram = pcap::udp_datagram(record.expect("record").data).expect("udp");
        assert_eq!(datagram.destination.port(), 26477);
        let packet = moldudp64::Packet::decode(datagram.payload).expect("moldudp64");
        assert_eq!(&packet.header.session, b"000010059B");
        packets.push((packet.header.sequence, packet.message_count()));
        for (_, block) in packet.messages() {
            let m = itch::Message::decode(block).expect("itch");
            // The README says "all META, locate 6514"; that holds for the A/F messages, while
            // the lone D (which carries no stock) has locate 2737 (tshark shows the same bytes).
            match m.body {
                Body::AddOrder { stock, .. } | Body::AddOrderMpid { stock, .. } => {
                    assert_eq!((m.header.locate, &stock.0), (6514, b"META    "));
                }
                Body::OrderDelete { .. } => assert_eq!(m.header.locate, 2737),
                other => panic!("unexpected {other:?}"),
            }
            *counts.entry(m.body.kind() as char).or_default() += 1;
            // Every block re-encodes to its own bytes.
            let mut buf = [0u8; itch::MAX_MESSAGE_LEN];
            let n = m.encode(&mut buf);
            assert_eq!(&buf[..n], block);
        }
    }
    assert_eq!(packets, vec![(14_764_496, 1), (19_009_117, 38)]);
    let want: BTreeMap<char, usize> = [('A', 36), ('F', 2), ('D', 1)].into();
    assert_eq!(counts, want);
}
