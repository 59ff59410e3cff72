//! tshark (Wireshark's built-in `soupbintcp`, `ouch` and `moldudp64` dissectors) reads a
//! synthetic capture of our bytes: every SoupBinTCP packet type, every OUCH 4.2 message in both
//! directions, and MoldUDP64 data, heartbeat and end-of-session packets. The capture is written
//! with [`crate::wire::pcap`] (correct checksums, consistent TCP sequence numbers) and checked
//! with the "nothing malformed" gate and field extraction of checking-tools.md section 1.4.
//! The test fails when tshark is absent: CI installs it (`.ci/run`).

use crate::types::{Alpha, MatchNumber, OrderRef, Price, Shares, Timestamp, Token};
use crate::wire::ascii::SessionId;
use crate::wire::itch::{self, Body, Header};
use crate::wire::moldudp64::{self, PacketBuilder, PushError};
use crate::wire::ouch::*;
use crate::wire::pcap::{TcpFlow, Writer};
use crate::wire::soupbin::{LoginRequest, Packet, reject_reason};
use std::net::{Ipv4Addr, SocketAddrV4};
use std::path::{Path, PathBuf};
use std::process::Command;

const ORDER_PORT: u16 = 15000;
const FEED_PORT: u16 = 26400;

fn addr(last: u8, port: u16) -> SocketAddrV4 {
    SocketAddrV4::new(Ipv4Addr::new(127, 0, 0, last), port)
}

fn tok(text: &str) -> Token {
    Token::from_str_padded(text).expect("token fits")
}

pub fn inbound_messages() -> Vec<Inbound> {
    vec![
        Inbound::Enter(EnterOrder {
            token: tok("ORD0000000001"),
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
        Inbound::Replace(ReplaceOrder {
            existing: tok("ORD0000000001"),
            replacement: tok("ORD0000000002"),
            shares: Shares(200),
            price: Price(1_502_600),
            tif: 99_998,
            display: b'Y',
            intermarket_sweep: b'N',
            min_qty: Shares(0),
        }),
        Inbound::Cancel(CancelOrder {
            token: tok("ORD0000000002"),
            shares: Shares(50),
        }),
        Inbound::Modify(ModifyOrder {
            token: tok("ORD0000000002"),
            side: b'T',
            shares: Shares(40),
        }),
    ]
}

pub fn outbound_messages() -> Vec<Outbound> {
    let ts = |n: u64| Timestamp(34_200_000_000_000 + n);
    let accepted = Accepted {
        timestamp: ts(1),
        token: tok("ORD0000000001"),
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
        bbo_weight: b'1',
    };
    let a = accepted;
    vec![
        Outbound::SystemEvent(SystemEvent {
            timestamp: ts(0),
            event: b'S',
        }),
        Outbound::Accepted(accepted),
        Outbound::Replaced(Replaced {
            timestamp: ts(2),
            token: tok("ORD0000000002"),
            side: a.side,
            shares: Shares(200),
            stock: a.stock,
            price: Price(1_502_600),
            tif: a.tif,
            firm: a.firm,
            display: a.display,
            order_ref: OrderRef(43),
            capacity: a.capacity,
            intermarket_sweep: a.intermarket_sweep,
            min_qty: a.min_qty,
            cross_type: a.cross_type,
            order_state: b'L',
            previous_token: tok("ORD0000000001"),
            bbo_weight: b'2',
        }),
        Outbound::Canceled(Canceled {
            timestamp: ts(3),
            token: tok("ORD0000000002"),
            decrement: Shares(150),
            reason: b'U',
        }),
        Outbound::AiqCanceled(AiqCanceled {
            timestamp: ts(4),
            token: tok("ORD0000000003"),
            decrement: Shares(10),
            reason: b'Q',
            prevented: Shares(10),
            price: Price(1_502_500),
            liquidity: b'R',
        }),
        Outbound::Executed(Executed {
            timestamp: ts(5),
            token: tok("ORD0000000002"),
            shares: Shares(10),
            price: Price(1_502_600),
            liquidity: b'A',
            match_number: MatchNumber(7),
        }),
        Outbound::BrokenTrade(BrokenTrade {
            timestamp: ts(6),
            token: tok("ORD0000000002"),
            match_number: MatchNumber(7),
            reason: b'E',
        }),
        Outbound::Rejected(Rejected {
            timestamp: ts(7),
            token: tok("ORD0000000004"),
            reason: b'H',
        }),
        Outbound::CancelPending(TokenOnly {
            timestamp: ts(8),
            token: tok("ORD0000000005"),
        }),
        Outbound::CancelReject(TokenOnly {
            timestamp: ts(9),
            token: tok("ORD0000000006"),
        }),
        Outbound::PriorityUpdate(PriorityUpdate {
            timestamp: ts(10),
            token: tok("ORD0000000002"),
            price: Price(1_502_600),
            display: b'Y',
            order_ref: OrderRef(44),
        }),
        Outbound::OrderModified(OrderModified {
            timestamp: ts(11),
            token: tok("ORD0000000002"),
            side: b'T',
            shares: Shares(30),
        }),
    ]
}

fn soup(packet: Packet<'_>) -> Vec<u8> {
    let mut out = vec![0u8; packet.encoded_len()];
    packet.encode(&mut out);
    out
}

fn ouch_bytes(encode: impl FnOnce(&mut [u8]) -> usize) -> Vec<u8> {
    let mut buf = [0u8; MAX_MESSAGE_LEN];
    let n = encode(&mut buf);
    buf[..n].to_vec()
}

/// What the capture holds, for the assertions.
struct Capture {
    path: PathBuf,
    /// Expected MoldUDP64 rows: session, sequence, count, message lengths.
    mold: Vec<(String, u64, u16, Vec<usize>)>,
}

fn login(user: &[u8; 6], sequence: u64) -> LoginRequest {
    LoginRequest {
        username: Alpha(*user),
        password: Alpha(*b"secret    "),
        session: SessionId::BLANK,
        sequence,
        heartbeat_timeout_ms: None,
    }
}

/// Order entry: one OUCH message per segment (so tshark rows align with messages), then a
/// burst of packets coalesced into one segment and a packet split across two segments.
fn write_order_entry(w: &mut Writer) {
    let session = SessionId::new("BOURSE0001").unwrap();
    let mut flow = TcpFlow::open(w, addr(2, 40001), addr(1, ORDER_PORT));
    flow.client_sends(w, &soup(Packet::LoginRequest(login(b"BRKR01", 1))));
    flow.server_sends(
        w,
        &soup(Packet::LoginAccepted {
            session,
            sequence: 1,
        }),
    );
    flow.client_sends(w, &soup(Packet::Debug(b"client debug text")));
    flow.server_sends(w, &soup(Packet::Debug(b"server debug text")));
    for m in inbound_messages() {
        flow.client_sends(
            w,
            &soup(Packet::UnsequencedData(&ouch_bytes(|b| m.encode(b)))),
        );
    }
    for m in outbound_messages() {
        flow.server_sends(
            w,
            &soup(Packet::SequencedData(&ouch_bytes(|b| m.encode(b)))),
        );
    }
    flow.server_sends(w, &soup(Packet::UnsequencedData(b"server unsequenced")));
    flow.server_sends(w, &soup(Packet::ServerHeartbeat));
    flow.client_sends(w, &soup(Packet::ClientHeartbeat));
    // Burst: three packets in one segment, then one packet split over two segments.
    let mut burst = soup(Packet::ServerHeartbeat);
    burst.extend(soup(Packet::ServerHeartbeat));
    burst.extend(soup(Packet::ServerHeartbeat));
    flow.server_sends(w, &burst);
    let cancel = inbound_messages()[2];
    let split = soup(Packet::UnsequencedData(&ouch_bytes(|b| cancel.encode(b))));
    flow.client_sends(w, &split[..7]);
    flow.client_sends(w, &split[7..]);
    flow.client_sends(w, &soup(Packet::LogoutRequest));
    flow.server_sends(w, &soup(Packet::EndOfSession));

    // A second connection whose login is rejected.
    let mut rejected = TcpFlow::open(w, addr(3, 40002), addr(1, ORDER_PORT));
    rejected.client_sends(w, &soup(Packet::LoginRequest(login(b"nobody", 0))));
    rejected.server_sends(
        w,
        &soup(Packet::LoginRejected {
            reason: reject_reason::NOT_AUTHORIZED,
        }),
    );
}

fn feed_messages() -> Vec<itch::Message> {
    (0..60u64)
        .map(|i| {
            let header = Header {
                locate: 1,
                tracking: 0,
                timestamp: Timestamp(34_200_000_000_000 + i),
            };
            let body = match i % 5 {
                0 => Body::AddOrder {
                    order_ref: OrderRef(i + 1),
                    side: b'B',
                    shares: Shares(100),
                    stock: Alpha(*b"AAPL    "),
                    price: Price(1_502_500),
                },
                1 => Body::OrderExecuted {
                    order_ref: OrderRef(i),
                    shares: Shares(10),
                    match_number: MatchNumber(i),
                },
                2 => Body::OrderCancel {
                    order_ref: OrderRef(i - 1),
                    shares: Shares(10),
                },
                3 => Body::OrderReplace {
                    old_ref: OrderRef(i - 2),
                    new_ref: OrderRef(i + 100),
                    shares: Shares(50),
                    price: Price(1_502_600),
                },
                _ => Body::OrderDelete {
                    order_ref: OrderRef(i + 96),
                },
            };
            itch::Message { header, body }
        })
        .collect()
}

/// Market data: data packets of at most 300 bytes, then a heartbeat and end of session.
fn write_feed(w: &mut Writer) -> Vec<(String, u64, u16, Vec<usize>)> {
    let session = SessionId::new("BOURSE0001").unwrap();
    let (source, group) = (
        addr(1, 40003),
        SocketAddrV4::new(Ipv4Addr::new(239, 192, 0, 1), FEED_PORT),
    );
    let mut builder = PacketBuilder::new(session, 1, 300);
    let mut expected = Vec::new();
    let mut lengths = Vec::new();
    let mut send = |builder: &mut PacketBuilder, lengths: &mut Vec<usize>, w: &mut Writer| {
        let first = builder.next_sequence() - u64::from(builder.message_count());
        let count = builder.message_count();
        w.udp(source, group, builder.finish());
        expected.push((
            "BOURSE0001".to_string(),
            first,
            count,
            std::mem::take(lengths),
        ));
    };
    for m in feed_messages() {
        match builder.push_itch(&m) {
            Ok(_) => lengths.push(m.encoded_len()),
            Err(PushError::Full) => {
                send(&mut builder, &mut lengths, w);
                builder.push_itch(&m).expect("fits in an empty packet");
                lengths.push(m.encoded_len());
            }
            Err(PushError::TooLarge) => unreachable!(),
        }
    }
    send(&mut builder, &mut lengths, w);
    let mut buf = [0u8; moldudp64::HEADER_LEN];
    let next = builder.next_sequence();
    let n = builder.heartbeat(&mut buf);
    w.udp(source, group, &buf[..n]);
    expected.push(("BOURSE0001".to_string(), next, 0, vec![]));
    let n = builder.end_of_session(&mut buf);
    w.udp(source, group, &buf[..n]);
    expected.push(("BOURSE0001".to_string(), next, 0xFFFF, vec![]));
    expected
}

fn write_capture() -> Capture {
    let mut w = Writer::new(1_700_000_000_000_000_000);
    write_order_entry(&mut w);
    let mold = write_feed(&mut w);
    let path = std::env::temp_dir().join(format!("bourse-wire-tshark-{}.pcap", std::process::id()));
    std::fs::write(&path, w.bytes()).expect("write capture");
    Capture { path, mold }
}

/// Run tshark on the capture with our ports decoded and checksum validation on.
fn tshark(path: &Path, args: &[&str]) -> String {
    let order = format!("tcp.port=={ORDER_PORT},soupbintcp");
    let feed = format!("udp.port=={FEED_PORT},moldudp64");
    let mut command = Command::new("tshark");
    command
        .arg("-n")
        .arg("-r")
        .arg(path)
        .args(["-d", &order, "-d", &feed]);
    for check in [
        "ip.check_checksum:TRUE",
        "tcp.check_checksum:TRUE",
        "udp.check_checksum:TRUE",
    ] {
        command.args(["-o", check]);
    }
    let output = command.args(args).output().unwrap_or_else(|e| {
        panic!("tshark is required for this test (CI installs it; apt-get install -y tshark): {e}")
    });
    assert!(
        output.status.success(),
        "tshark failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).expect("utf-8")
}

const GATE: &str = "_ws.malformed || _ws.expert.severity == error || ouch.unknown_message \
    || soupbintcp.req_seq_num.invalid || soupbintcp.next_seq_num.invalid \
    || moldudp64.msglen.invalid || moldudp64.count.invalid \
    || ip.checksum.status == \"Bad\" || tcp.checksum.status == \"Bad\" || udp.checksum.status == \"Bad\"";

/// OUCH fields extracted per frame (each OUCH message travels in its own segment).
const OUCH_FIELDS: [&str; 31] = [
    "packet_type",
    "order_token",
    "existing_order_token",
    "replacement_order_token",
    "previous_order_token",
    "buy_sell_indicator",
    "shares",
    "executed_shares",
    "decrement_shares",
    "stock",
    "price",
    "execution_price",
    "tif",
    "firm",
    "order_reference_number",
    "match_number",
    "timestamp",
    "bbo_weight_indicator",
    "display",
    "capacity",
    "iso_eligible",
    "min_quantity",
    "cross_type",
    "customer_type",
    "order_state",
    "event_code",
    "cancel_reason",
    "reject_reason",
    "liquidity_flag",
    "broken_trade_reason",
    "quantity_prevented_from_trading",
];

type Row = std::collections::BTreeMap<&'static str, String>;

/// tshark's rendering of the field kinds: FT_CHAR as `'X'`, strings raw, integers decimal,
/// OUCH timestamps as `H:MM:SS.nnnnnnnnn`.
fn ch(b: u8) -> String {
    format!("'{}'", b as char)
}

fn text(b: &[u8]) -> String {
    String::from_utf8(b.to_vec()).expect("ascii test data")
}

fn time(t: Timestamp) -> String {
    let ns = t.0 % 1_000_000_000;
    let s = t.0 / 1_000_000_000;
    format!("{}:{:02}:{:02}.{ns:09}", s / 3600, s / 60 % 60, s % 60)
}

/// The fields Wireshark should show for each message, written from PROTOCOLS.md 2.2/2.3.
fn expected_inbound(m: &Inbound) -> Row {
    let mut r = Row::new();
    r.insert("packet_type", ch(m.kind()));
    match m {
        Inbound::Enter(o) => {
            r.insert("order_token", text(&o.token.0));
            r.insert("buy_sell_indicator", ch(o.side));
            r.insert("shares", o.shares.0.to_string());
            r.insert("stock", text(&o.stock.0));
            r.insert("price", o.price.0.to_string());
            r.insert("tif", o.tif.to_string());
            r.insert("firm", text(&o.firm.0));
            r.insert("display", ch(o.display));
            r.insert("capacity", ch(o.capacity));
            r.insert("iso_eligible", ch(o.intermarket_sweep));
            r.insert("min_quantity", o.min_qty.0.to_string());
            r.insert("cross_type", ch(o.cross_type));
            r.insert("customer_type", ch(o.customer_type));
        }
        Inbound::Replace(u) => {
            r.insert("existing_order_token", text(&u.existing.0));
            r.insert("replacement_order_token", text(&u.replacement.0));
            r.insert("shares", u.shares.0.to_string());
            r.insert("price", u.price.0.to_string());
            r.insert("tif", u.tif.to_string());
            r.insert("display", ch(u.display));
            r.insert("iso_eligible", ch(u.intermarket_sweep));
            r.insert("min_quantity", u.min_qty.0.to_string());
        }
        Inbound::Cancel(x) => {
            r.insert("order_token", text(&x.token.0));
            r.insert("shares", x.shares.0.to_string());
        }
        Inbound::Modify(x) => {
            r.insert("order_token", text(&x.token.0));
            r.insert("buy_sell_indicator", ch(x.side));
            r.insert("shares", x.shares.0.to_string());
        }
    }
    r
}

fn expected_outbound(m: &Outbound) -> Row {
    let mut r = Row::new();
    r.insert("packet_type", ch(m.kind()));
    let mut put = |k: &'static str, v: String| {
        r.insert(k, v);
    };
    match m {
        Outbound::SystemEvent(x) => {
            put("timestamp", time(x.timestamp));
            put("event_code", ch(x.event));
        }
        Outbound::Accepted(a) => {
            put("timestamp", time(a.timestamp));
            put("order_token", text(&a.token.0));
            put("buy_sell_indicator", ch(a.side));
            put("shares", a.shares.0.to_string());
            put("stock", text(&a.stock.0));
            put("price", a.price.0.to_string());
            put("tif", a.tif.to_string());
            put("firm", text(&a.firm.0));
            put("display", ch(a.display));
            put("order_reference_number", a.order_ref.0.to_string());
            put("capacity", ch(a.capacity));
            put("iso_eligible", ch(a.intermarket_sweep));
            put("min_quantity", a.min_qty.0.to_string());
            put("cross_type", ch(a.cross_type));
            put("order_state", ch(a.order_state));
            put("bbo_weight_indicator", ch(a.bbo_weight));
        }
        Outbound::Replaced(a) => {
            put("timestamp", time(a.timestamp));
            put("replacement_order_token", text(&a.token.0));
            put("buy_sell_indicator", ch(a.side));
            put("shares", a.shares.0.to_string());
            put("stock", text(&a.stock.0));
            put("price", a.price.0.to_string());
            put("tif", a.tif.to_string());
            put("firm", text(&a.firm.0));
            put("display", ch(a.display));
            put("order_reference_number", a.order_ref.0.to_string());
            put("capacity", ch(a.capacity));
            put("iso_eligible", ch(a.intermarket_sweep));
            put("min_quantity", a.min_qty.0.to_string());
            put("cross_type", ch(a.cross_type));
            put("order_state", ch(a.order_state));
            put("previous_order_token", text(&a.previous_token.0));
            put("bbo_weight_indicator", ch(a.bbo_weight));
        }
        Outbound::Canceled(c) => {
            put("timestamp", time(c.timestamp));
            put("order_token", text(&c.token.0));
            put("decrement_shares", c.decrement.0.to_string());
            put("cancel_reason", ch(c.reason));
        }
        Outbound::AiqCanceled(c) => {
            put("timestamp", time(c.timestamp));
            put("order_token", text(&c.token.0));
            put("decrement_shares", c.decrement.0.to_string());
            put("cancel_reason", ch(c.reason));
            put("quantity_prevented_from_trading", c.prevented.0.to_string());
            put("execution_price", c.price.0.to_string());
            put("liquidity_flag", ch(c.liquidity));
        }
        Outbound::Executed(e) => {
            put("timestamp", time(e.timestamp));
            put("order_token", text(&e.token.0));
            put("executed_shares", e.shares.0.to_string());
            put("execution_price", e.price.0.to_string());
            put("liquidity_flag", ch(e.liquidity));
            put("match_number", e.match_number.0.to_string());
        }
        Outbound::BrokenTrade(b) => {
            put("timestamp", time(b.timestamp));
            put("order_token", text(&b.token.0));
            put("match_number", b.match_number.0.to_string());
            put("broken_trade_reason", ch(b.reason));
        }
        Outbound::Rejected(j) => {
            put("timestamp", time(j.timestamp));
            put("order_token", text(&j.token.0));
            put("reject_reason", ch(j.reason));
        }
        Outbound::CancelPending(t) | Outbound::CancelReject(t) => {
            put("timestamp", time(t.timestamp));
            put("order_token", text(&t.token.0));
        }
        Outbound::PriorityUpdate(t) => {
            put("timestamp", time(t.timestamp));
            put("order_token", text(&t.token.0));
            put("price", t.price.0.to_string());
            put("display", ch(t.display));
            put("order_reference_number", t.order_ref.0.to_string());
        }
        Outbound::OrderModified(x) => {
            put("timestamp", time(x.timestamp));
            put("order_token", text(&x.token.0));
            put("buy_sell_indicator", ch(x.side));
            put("shares", x.shares.0.to_string());
        }
    }
    r
}

fn ouch_rows(path: &Path) -> Vec<Row> {
    let mut args = vec!["-Y", "ouch", "-T", "fields", "-E", "separator=|"];
    let names: Vec<String> = OUCH_FIELDS.iter().map(|f| format!("ouch.{f}")).collect();
    for n in &names {
        args.extend(["-e", n.as_str()]);
    }
    tshark(path, &args)
        .lines()
        .map(|line| {
            let values: Vec<&str> = line.split('|').collect();
            assert_eq!(values.len(), OUCH_FIELDS.len(), "row {line:?}");
            OUCH_FIELDS
                .iter()
                .zip(values)
                .filter(|(_, v)| !v.is_empty())
                .map(|(f, v)| (*f, v.to_string()))
                .collect()
        })
        .collect()
}

#[test]
fn tshark_decodes_our_soupbintcp_ouch_and_moldudp64_cleanly() {
    let capture = write_capture();
    let path = capture.path.as_path();

    let problems = tshark(path, &["-Y", GATE]);
    assert!(problems.is_empty(), "tshark flagged packets:\n{problems}");

    // Every SoupBinTCP packet recognised, in order, with its direction.
    let soup = tshark(
        path,
        &[
            "-Y",
            "soupbintcp",
            "-T",
            "fields",
            "-e",
            "tcp.srcport",
            "-e",
            "soupbintcp.packet_type",
        ],
    );
    let got: Vec<String> = soup
        .lines()
        .map(|l| l.replace('\'', "").replace('\t', " "))
        .collect();
    let mut want = vec!["40001 L", "15000 A", "40001 +", "15000 +"];
    want.extend(["40001 U"; 4]);
    want.extend(["15000 S"; 12]);
    want.extend([
        "15000 U",
        "15000 H",
        "40001 R",
        "15000 H,H,H",
        "40001 U",
        "40001 O",
        "15000 Z",
    ]);
    want.extend(["40002 L", "15000 J"]);
    assert_eq!(got, want);
    let kinds: std::collections::BTreeSet<char> =
        got.iter().filter_map(|l| l.chars().nth(6)).collect();
    assert_eq!(kinds, "+AJSUHZLRO".chars().collect());

    // Every OUCH message decoded as OUCH, with the right type and every field right.
    let rows = ouch_rows(path);
    let mut expected: Vec<Row> = inbound_messages().iter().map(expected_inbound).collect();
    expected.extend(outbound_messages().iter().map(expected_outbound));
    expected.push(expected_inbound(&inbound_messages()[2])); // the split segment
    assert_eq!(rows.len(), expected.len());
    for (got, want) in rows.iter().zip(&expected) {
        assert_eq!(got, want);
    }

    // MoldUDP64 session, sequence, count and per-message numbering and lengths.
    let mold = tshark(
        path,
        &[
            "-Y",
            "moldudp64",
            "-T",
            "fields",
            "-e",
            "moldudp64.session",
            "-e",
            "moldudp64.sequence",
            "-e",
            "moldudp64.count",
            "-e",
            "moldudp64.msgseq",
            "-e",
            "moldudp64.msglen",
        ],
    );
    let want: Vec<String> = capture
        .mold
        .iter()
        .map(|(session, sequence, count, lengths)| {
            let seqs: Vec<String> = (0..lengths.len() as u64)
                .map(|k| (sequence + k).to_string())
                .collect();
            let lens: Vec<String> = lengths.iter().map(|l| l.to_string()).collect();
            format!(
                "{session}\t{sequence}\t{count}\t{}\t{}",
                seqs.join(","),
                lens.join(",")
            )
        })
        .collect();
    assert_eq!(mold.lines().collect::<Vec<_>>(), want);
    let summary = tshark(path, &["-Y", "moldudp64"]);
    assert!(
        summary
            .lines()
            .last()
            .unwrap_or("")
            .contains("End Of Session"),
        "{summary}"
    );
    assert!(summary.contains("MoldUDP64 Heartbeat"), "{summary}");
    println!(
        "tshark: {} SoupBinTCP frames, {} OUCH messages, {} MoldUDP64 packets decoded; gate clean",
        got.len(),
        rows.len(),
        capture.mold.len()
    );
    std::fs::remove_file(path).ok();
}

#[test]
fn tshark_gate_catches_bad_bytes() {
    // The gate must not be vacuous: a left-justified requested sequence number (Wireshark
    // reads it with a strict number parser) and a MoldUDP64 count that overstates the blocks.
    let mut w = Writer::new(1_700_000_000_000_000_000);
    let mut flow = TcpFlow::open(&mut w, addr(2, 40001), addr(1, ORDER_PORT));
    let mut login = soup(Packet::LoginRequest(login(b"BRKR01", 1)));
    login[29..49].copy_from_slice(b"1                   ");
    flow.client_sends(&mut w, &login);
    let mut builder = PacketBuilder::new(SessionId::new("S").unwrap(), 1, 1400);
    builder.push(b"x").unwrap();
    let mut packet = builder.finish().to_vec();
    packet[19] = 3;
    let group = SocketAddrV4::new(Ipv4Addr::new(239, 192, 0, 1), FEED_PORT);
    w.udp(addr(1, 40003), group, &packet);
    let path = std::env::temp_dir().join(format!(
        "bourse-wire-tshark-bad-{}.pcap",
        std::process::id()
    ));
    std::fs::write(&path, w.bytes()).expect("write capture");
    let problems = tshark(&path, &["-Y", GATE, "-T", "fields", "-e", "frame.number"]);
    assert_eq!(problems.lines().count(), 2, "gate output:\n{problems}");
    std::fs::remove_file(&path).ok();
}
