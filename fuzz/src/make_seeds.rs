//! Writes the seed corpora of every fuzz target into `CORPUS_DIR/<target>/` from real and
//! golden data: the recorded days in `replay-logs/` (their OUCH inputs, and the OUCH replies
//! and ITCH messages the exchange computes from them), Nasdaq's ITCH sample and the MoldUDP64
//! capture in `shared/data`, small journals written by the real writer, and configs.
//!
//! Usage: make-seeds CORPUS_DIR SHARED_DATA_DIR (run from the repository root).

use bourse::exchange::{Command, Exchange, Output, Recorder};
use bourse::journal::{Durability, JournalConfig, JournalReader, JournalWriter};
use bourse::replay;
use bourse::sequencer::record;
use bourse::types::Timestamp;
use bourse::wire::ascii::SessionId;
use bourse::wire::glimpse::EndOfSnapshot;
use bourse::wire::moldudp64::{PacketBuilder, Request};
use bourse::wire::soupbin::Packet;
use bourse::wire::{itch, pcap};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let corpus = PathBuf::from(args.get(1).expect("CORPUS_DIR"));
    let data = PathBuf::from(args.get(2).expect("SHARED_DATA_DIR"));
    let mut seeds = Seeds::new(&corpus);
    let (inbound, outputs) = recorded_days(Path::new("replay-logs"));
    seed_ouch_and_soupbin(&mut seeds, &inbound, &outputs);
    seed_itch_moldudp64_glimpse(&mut seeds, &outputs, &data);
    seed_journals(&mut seeds);
    seed_configs(&mut seeds);
    for (target, count) in &seeds.counts {
        println!("{target}: {count} seeds");
    }
}

struct Seeds {
    corpus: PathBuf,
    counts: BTreeMap<&'static str, usize>,
}

impl Seeds {
    fn new(corpus: &Path) -> Seeds {
        Seeds {
            corpus: corpus.to_path_buf(),
            counts: BTreeMap::new(),
        }
    }

    fn add(&mut self, target: &'static str, bytes: &[u8]) {
        let dir = self.corpus.join(target);
        std::fs::create_dir_all(&dir).expect("corpus dir");
        let count = self.counts.entry(target).or_default();
        std::fs::write(dir.join(format!("seed-{count:04}")), bytes).expect("write seed");
        *count += 1;
    }
}

/// Every OUCH input of the recorded days, and the outputs the exchange computes from them.
fn recorded_days(logs: &Path) -> (Vec<bourse::wire::ouch::Inbound>, Vec<Output>) {
    let mut inbound = Vec::new();
    let mut outputs = Vec::new();
    for day in ["edge-cases", "busy-day"] {
        let dir = logs.join(day).join("journal");
        let mut reader = JournalReader::open(&dir, 1).expect("recorded day");
        let (header, ts) = replay::read_header(&mut reader).expect("header");
        let mut exchange = Exchange::new(header.venue).expect("venue");
        let mut recorder = Recorder::default();
        let start = record::KIND_START_OF_DAY;
        replay::apply_record(&mut exchange, 1, ts, start, &[], &mut recorder).expect("start");
        for _ in 0..100_000 {
            let Some(r) = reader.next().expect("read") else {
                break;
            };
            if let Ok(Command::Ouch { message, .. }) = record::decode(r.kind, r.payload) {
                inbound.push(message);
            }
            replay::apply_record(
                &mut exchange,
                r.seq,
                r.timestamp,
                r.kind,
                r.payload,
                &mut recorder,
            )
            .expect("apply");
        }
        outputs.extend(recorder.take());
    }
    (inbound, outputs)
}

/// At most `per_kind` messages of each type letter.
fn by_kind<T: Copy>(items: &[T], kind: impl Fn(&T) -> u8, per_kind: usize) -> Vec<T> {
    let mut seen: BTreeMap<u8, usize> = BTreeMap::new();
    let mut picked = Vec::new();
    for item in items {
        let count = seen.entry(kind(item)).or_default();
        if *count < per_kind {
            *count += 1;
            picked.push(*item);
        }
    }
    picked
}

fn frame(packet: &Packet<'_>) -> Vec<u8> {
    let mut buf = vec![0u8; packet.encoded_len()];
    let n = packet.encode(&mut buf);
    buf.truncate(n);
    buf
}

fn seed_ouch_and_soupbin(
    seeds: &mut Seeds,
    inbound: &[bourse::wire::ouch::Inbound],
    outputs: &[Output],
) {
    let mut buf = [0u8; 256];
    let inbound = by_kind(inbound, |m| m.kind(), 3);
    for message in &inbound {
        let n = message.encode(&mut buf);
        seeds.add("ouch", &[&[0u8][..], &buf[..n]].concat());
    }
    let outbound: Vec<_> = outputs
        .iter()
        .filter_map(|o| match o {
            Output::Ouch(_, m) => Some(*m),
            Output::Itch(_) => None,
        })
        .collect();
    for message in by_kind(&outbound, |m| m.kind(), 3) {
        let n = message.encode(&mut buf);
        seeds.add("ouch", &[&[1u8][..], &buf[..n]].concat());
    }
    // A client session: login (both SoupBinTCP forms), orders, heartbeat, logout.
    let login = |user: &str, password: &str, sequence: &str| {
        let mut body = vec![b'L'];
        body.extend(format!("{user:<6}{password:<10}{:>10}{sequence:>20}", "").bytes());
        let mut packet = (body.len() as u16).to_be_bytes().to_vec();
        packet.extend(body);
        packet
    };
    let mut session = login("BRKR01", "secret", "1");
    for message in &inbound {
        let n = message.encode(&mut buf);
        session.extend(frame(&Packet::UnsequencedData(&buf[..n])));
    }
    session.extend(frame(&Packet::ClientHeartbeat));
    session.extend(frame(&Packet::LogoutRequest));
    for chunk in [0u8, 7, 63] {
        seeds.add("soupbin_login", &[&[chunk][..], &session].concat());
    }
    seeds.add(
        "soupbin_login",
        &[&[5u8][..], &login("alice", "ALICEPW", "0")].concat(),
    );
    seeds.add(
        "soupbin_login",
        &[&[1u8][..], &login("NOBODY", "x", "99")].concat(),
    );
}

fn seed_itch_moldudp64_glimpse(seeds: &mut Seeds, outputs: &[Output], data: &Path) {
    let messages: Vec<itch::Message> = outputs
        .iter()
        .filter_map(|o| match o {
            Output::Itch(m) => Some(*m),
            Output::Ouch(..) => None,
        })
        .collect();
    let mut buf = [0u8; 128];
    let picked = by_kind(&messages, |m| m.body.kind(), 2);
    for message in &picked {
        let n = message.encode(&mut buf);
        seeds.add("itch", &buf[..n]);
        seeds.add("glimpse", &buf[..n]);
    }
    let end = EndOfSnapshot { sequence: 1234 };
    let n = end.encode(&mut buf);
    seeds.add("glimpse", &buf[..n]);
    // Real Nasdaq bytes: the BinaryFILE's first records, and one message of each type.
    let nasdaq = std::fs::read(data.join("itch50_nasdaq_session_first1000.bin")).expect("itch");
    seeds.add("itch", &nasdaq[..nasdaq.len().min(600)]);
    let mut by_type = BTreeMap::new();
    for bytes in itch::binary_file::Reader::new(&nasdaq).flatten() {
        by_type.entry(bytes[0]).or_insert_with(|| bytes.to_vec());
    }
    for bytes in by_type.values() {
        seeds.add("itch", bytes);
    }
    // MoldUDP64: the real capture's datagrams, and packets of our own messages.
    let capture = std::fs::read(data.join("omi_moldudp64_itch50_2pkts.pcap")).expect("pcap");
    for frame in pcap::Reader::new(&capture).expect("pcap").flatten() {
        if let Some(datagram) = pcap::udp_datagram(frame.data) {
            seeds.add("moldudp64", datagram.payload);
        }
    }
    let session = SessionId::new("BOURSE0001").expect("session");
    let mut builder = PacketBuilder::new(session, 1, 1400);
    for message in picked.iter().take(12) {
        builder.push_itch(message).expect("fits");
    }
    seeds.add("moldudp64", builder.finish());
    let n = builder.heartbeat(&mut buf);
    seeds.add("moldudp64", &buf[..n]);
    let mut request = [0u8; Request::LEN];
    request[..10].copy_from_slice(b"BOURSE0001");
    request[10..18].copy_from_slice(&5u64.to_be_bytes());
    request[18..20].copy_from_slice(&3u16.to_be_bytes());
    seeds.add("moldudp64", &request);
}

/// Journals written by the real writer with the fuzz targets' segment size: whole, sealed
/// (several segments) and with a torn last record; images trimmed of trailing zeros.
fn seed_journals(seeds: &mut Seeds) {
    let base = std::env::temp_dir().join(format!("bourse-seeds-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&base);
    for (name, records) in [("few", 5u64), ("full", 120)] {
        let dir = base.join(name);
        let config = JournalConfig {
            segment_bytes: bourse_fuzz::IMAGE_BYTES as u64,
            max_payload_bytes: bourse_fuzz::IMAGE_MAX_PAYLOAD,
            durability: Durability::Flush,
            ..JournalConfig::new(&dir)
        };
        let (mut writer, _) = JournalWriter::open_or_create(config, 0).expect("journal");
        for seq in 1..=records {
            let payload = vec![(seq % 251) as u8; (seq % 90) as usize];
            writer
                .append(Timestamp(seq), (seq % 5) as u8, &payload)
                .expect("append");
        }
        drop(writer);
        let first = trimmed(&std::fs::read(dir.join("00000001.seg")).expect("segment"));
        for flags in [0u8, 3] {
            seeds.add("journal_image", &[&[flags, 0][..], &first].concat());
            seeds.add("journal_image", &[&[flags, 200][..], &first].concat());
            seeds.add(
                "journal_dir",
                &[&[flags | 8 | 16 | 32, 0, 2, 4, 0][..], &first].concat(),
            );
        }
        if let Ok(second) = std::fs::read(dir.join("00000002.seg")) {
            // The first segment whole (sealed at its end), the second trimmed to whole units.
            let mut second = trimmed(&second);
            second.resize(second.len().next_multiple_of(8).min(255 * 8), 0);
            let units = (second.len() / 8) as u8;
            let mut two = first.clone();
            two.resize(bourse_fuzz::IMAGE_BYTES, 0);
            two.extend(&second);
            seeds.add(
                "journal_dir",
                &[&[4u8 | 3, 0, 0, 0, units][..], &two].concat(),
            );
            // The same with the seal lost (a machine crash after the next header was written).
            let seal_at = first.len().next_multiple_of(8) - 8;
            two[seal_at..seal_at + 8].fill(0);
            seeds.add(
                "journal_dir",
                &[&[4u8 | 3, 0, 0, 0, units][..], &two].concat(),
            );
        }
        // A torn last record: the last 20 bytes of data zeroed.
        let mut torn = first.clone();
        let len = torn.len();
        torn[len.saturating_sub(20)..].fill(0);
        seeds.add("journal_image", &[&[3u8, 1][..], &torn].concat());
        seeds.add(
            "journal_dir",
            &[&[3u8 | 8 | 16, 1, 1, 3, 0][..], &torn].concat(),
        );
    }
    let _ = std::fs::remove_dir_all(&base);
}

fn trimmed(bytes: &[u8]) -> Vec<u8> {
    let end = bytes.iter().rposition(|&b| b != 0).map_or(0, |i| i + 1);
    bytes[..end].to_vec()
}

fn seed_configs(seeds: &mut Seeds) {
    seeds.add("config", bourse::config::DEFAULT_TOML.as_bytes());
    let minimal = "[[accounts]]\nusername = \"A\"\npassword = \"p\"\nfirm = \"F\"\n\
                   [[symbols]]\nsymbol = \"X\"\ntick = 1\n";
    seeds.add("config", minimal.as_bytes());
    let full = "[gateway]\nlisten = \"127.0.0.1:0\"\nsession = \"TEST000001\"\n\
                [journal]\ndir = \"/tmp/j\"\ndurability = \"async\"\nsegment_bytes = 8192\n\
                [engine]\nlayout = \"sharded\"\nshards = 2\n\
                [limits]\norders_per_symbol = 64\nlevels_per_side = 16\ntokens_per_account = 64\n"
        .to_string()
        + minimal;
    seeds.add("config", full.as_bytes());
}
