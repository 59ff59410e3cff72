//! Wire codec benchmarks: OUCH, ITCH, MoldUDP64 encode/decode, and ITCH decode throughput of a
//! realistic buffer against the `itchy` crate in the same run.
//!
//! Run: `cargo bench -p bourse-benches --bench wire -- --warm-up-time 1 --measurement-time 3`

use bourse::types::{Alpha, MatchNumber, OrderRef, Price, Shares, Timestamp, Token};
use bourse::wire::ascii::SessionId;
use bourse::wire::itch::{self, Body, Header, binary_file};
use bourse::wire::moldudp64::{self, PacketBuilder};
use bourse::wire::ouch::*;
use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use std::hint::black_box;

fn tok(n: u64) -> Token {
    Token::from_str_padded(&format!("ORD{n:010}")).unwrap()
}

fn inbound() -> [(&'static str, Inbound); 3] {
    [
        (
            "O",
            Inbound::Enter(EnterOrder {
                token: tok(1),
                side: b'B',
                shares: Shares(100),
                stock: Alpha(*b"AAPL    "),
                price: Price(1_502_500),
                tif: 99_998,
                firm: Alpha(*b"FIRM"),
                display: b'Y',
                capacity: b'A',
                intermarket_sweep: b'N',
                min_qty: Shares(0),
                cross_type: b'N',
                customer_type: b'R',
            }),
        ),
        (
            "X",
            Inbound::Cancel(CancelOrder {
                token: tok(1),
                shares: Shares(0),
            }),
        ),
        (
            "U",
            Inbound::Replace(ReplaceOrder {
                existing: tok(1),
                replacement: tok(2),
                shares: Shares(200),
                price: Price(1_502_600),
                tif: 99_998,
                display: b'Y',
                intermarket_sweep: b'N',
                min_qty: Shares(0),
            }),
        ),
    ]
}

fn outbound() -> [(&'static str, Outbound); 2] {
    [
        (
            "A",
            Outbound::Accepted(Accepted {
                timestamp: Timestamp(34_200_000_000_000),
                token: tok(1),
                side: b'B',
                shares: Shares(100),
                stock: Alpha(*b"AAPL    "),
                price: Price(1_502_500),
                tif: 99_998,
                firm: Alpha(*b"FIRM"),
                display: b'Y',
                order_ref: OrderRef(42),
                capacity: b'A',
                intermarket_sweep: b'N',
                min_qty: Shares(0),
                cross_type: b'N',
                order_state: b'L',
                bbo_weight: b' ',
            }),
        ),
        (
            "E",
            Outbound::Executed(Executed {
                timestamp: Timestamp(34_200_000_000_001),
                token: tok(1),
                shares: Shares(100),
                price: Price(1_502_500),
                liquidity: b'A',
                match_number: MatchNumber(7),
            }),
        ),
    ]
}

/// Message `i` of a realistic order-flow mix: 40 % A, 15 % E, 15 % X, 20 % D, 10 % U.
fn itch_message(i: u64) -> itch::Message {
    let header = Header {
        locate: 1 + (i % 8) as u16,
        tracking: 0,
        timestamp: Timestamp(34_200_000_000_000 + i * 1_000),
    };
    let order_ref = OrderRef(i + 1);
    let body = match i % 20 {
        0..=7 => Body::AddOrder {
            order_ref,
            side: if i.is_multiple_of(2) { b'B' } else { b'S' },
            shares: Shares(100 + (i % 10) as u32 * 100),
            stock: Alpha(*b"AAPL    "),
            price: Price(1_500_000 + (i % 50) as u32 * 100),
        },
        8..=10 => Body::OrderExecuted {
            order_ref,
            shares: Shares(100),
            match_number: MatchNumber(i),
        },
        11..=13 => Body::OrderCancel {
            order_ref,
            shares: Shares(100),
        },
        14..=17 => Body::OrderDelete { order_ref },
        _ => Body::OrderReplace {
            old_ref: order_ref,
            new_ref: OrderRef(i + 1_000_000),
            shares: Shares(300),
            price: Price(1_501_000),
        },
    };
    itch::Message { header, body }
}

fn by_kind(kind: u8) -> itch::Message {
    (0..20)
        .map(itch_message)
        .find(|m| m.body.kind() == kind)
        .unwrap()
}

fn bench_ouch(c: &mut Criterion) {
    let mut g = c.benchmark_group("ouch");
    g.throughput(Throughput::Elements(1));
    let mut buf = [0u8; MAX_MESSAGE_LEN];
    for (name, m) in inbound() {
        g.bench_function(format!("encode_{name}"), |b| {
            b.iter(|| black_box(black_box(&m).encode(&mut buf)))
        });
        let n = m.encode(&mut buf);
        let bytes = buf[..n].to_vec();
        g.bench_function(format!("decode_{name}"), |b| {
            b.iter(|| black_box(Inbound::decode(black_box(&bytes))))
        });
    }
    for (name, m) in outbound() {
        g.bench_function(format!("encode_{name}"), |b| {
            b.iter(|| black_box(black_box(&m).encode(&mut buf)))
        });
        let n = m.encode(&mut buf);
        let bytes = buf[..n].to_vec();
        g.bench_function(format!("decode_{name}"), |b| {
            b.iter(|| black_box(Outbound::decode(black_box(&bytes))))
        });
    }
    g.finish();
}

fn bench_itch(c: &mut Criterion) {
    let mut g = c.benchmark_group("itch");
    g.throughput(Throughput::Elements(1));
    let mut buf = [0u8; itch::MAX_MESSAGE_LEN];
    for kind in [b'A', b'E', b'D', b'X', b'U'] {
        let m = by_kind(kind);
        let name = kind as char;
        g.bench_function(format!("encode_{name}"), |b| {
            b.iter(|| black_box(black_box(&m).encode(&mut buf)))
        });
        let n = m.encode(&mut buf);
        let bytes = buf[..n].to_vec();
        g.bench_function(format!("decode_{name}"), |b| {
            b.iter(|| black_box(itch::Message::decode(black_box(&bytes))))
        });
    }
    g.finish();

    // Batch encoding of Add Orders into one buffer: the 100M msgs/s target.
    const BATCH: usize = 1_000;
    let adds: Vec<itch::Message> = (0..BATCH as u64 * 20)
        .map(itch_message)
        .filter(|m| m.body.kind() == b'A')
        .take(BATCH)
        .collect();
    let mut out = vec![0u8; BATCH * 36];
    let mut g = c.benchmark_group("itch_batch");
    g.throughput(Throughput::Elements(BATCH as u64));
    g.bench_function("encode_A_x1000", |b| {
        b.iter(|| {
            let mut at = 0;
            for m in black_box(&adds) {
                at += m.encode(&mut out[at..]);
            }
            black_box(at)
        })
    });
    g.finish();
}

fn bench_moldudp64(c: &mut Criterion) {
    const MESSAGES: u64 = 1_000;
    let messages: Vec<itch::Message> = (0..MESSAGES).map(itch_message).collect();
    let session = SessionId::new("BOURSE0001").unwrap();
    let mut builder = PacketBuilder::new(session, 1, moldudp64::DEFAULT_MAX_PAYLOAD);
    let mut g = c.benchmark_group("moldudp64");
    g.throughput(Throughput::Elements(MESSAGES));
    g.bench_function("pack_1000_mixed_itch", |b| {
        b.iter(|| {
            let mut bytes = 0usize;
            for m in black_box(&messages) {
                if builder.push_itch(m).is_err() {
                    bytes += builder.finish().len();
                    builder.push_itch(m).unwrap();
                }
            }
            bytes += builder.finish().len();
            black_box(bytes)
        })
    });
    // Decode the packets just built, every block through the ITCH decoder.
    let mut packets = Vec::new();
    let mut builder = PacketBuilder::new(session, 1, moldudp64::DEFAULT_MAX_PAYLOAD);
    for m in &messages {
        if builder.push_itch(m).is_err() {
            packets.push(builder.finish().to_vec());
            builder.push_itch(m).unwrap();
        }
    }
    packets.push(builder.finish().to_vec());
    g.bench_function("unpack_and_decode_1000_mixed_itch", |b| {
        b.iter(|| {
            let mut n = 0u64;
            for p in black_box(&packets) {
                let packet = moldudp64::Packet::decode(p).unwrap();
                for (_, block) in packet.messages() {
                    n += itch::Message::decode(block).is_ok() as u64;
                }
            }
            assert_eq!(n, MESSAGES);
            n
        })
    });
    g.finish();
}

fn bench_decode_throughput(c: &mut Criterion) {
    const MESSAGES: u64 = 10_000;
    let mut image = Vec::new();
    let mut record = [0u8; 2 + itch::MAX_MESSAGE_LEN];
    for i in 0..MESSAGES {
        let n = binary_file::write_message(&mut record, &itch_message(i));
        image.extend_from_slice(&record[..n]);
    }
    let mut g = c.benchmark_group("itch_decode_10k_mixed");
    g.throughput(Throughput::Elements(MESSAGES));
    g.bench_function("bourse", |b| {
        b.iter(|| {
            let mut shares = 0u64;
            for record in binary_file::Reader::new(black_box(&image)) {
                if let Ok(itch::Message {
                    body: Body::AddOrder { shares: s, .. },
                    ..
                }) = itch::Message::decode(record.unwrap())
                {
                    shares += u64::from(s.0);
                }
            }
            shares
        })
    });
    g.bench_function("itchy", |b| {
        b.iter(|| {
            let mut shares = 0u64;
            for m in itchy::MessageStream::from_reader(black_box(&image[..])) {
                if let itchy::Body::AddOrder(a) = m.unwrap().body {
                    shares += u64::from(a.shares);
                }
            }
            shares
        })
    });
    g.finish();
}

criterion_group!(
    benches,
    bench_ouch,
    bench_itch,
    bench_moldudp64,
    bench_decode_throughput
);
criterion_main!(benches);
