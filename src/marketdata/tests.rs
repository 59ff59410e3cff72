//! Market-data transport over real loopback sockets. Each test uses its own multicast group and
//! port (derived from a port the kernel just handed out), so parallel tests do not hear each
//! other; every wait has a timeout.

use super::glimpse::{GlimpseConfig, GlimpseServer, Snapshot, encode_snapshot, snapshot_channel};
use super::publisher::{FeedPublisher, PublisherConfig};
use super::receiver::{FeedReceiver, Observed, RecvError, request_retransmission};
use super::rerequest::{Ignored, RerequestConfig, RerequestServer};
use crate::exchange::{Command, Exchange, Input, Limits, Output, Recorder, Venue};
use crate::stream::{StreamWriter, stream};
use crate::types::{AccountId, Alpha, Firm, OrderRef, Price, Shares, Timestamp, Token};
use crate::wire::ascii::SessionId;
use crate::wire::glimpse::{EndOfSnapshot, SnapshotMessage};
use crate::wire::itch::{self, Body, Header, Message};
use crate::wire::moldudp64::{Packet, PacketKind, Request};
use crate::wire::ouch::{EnterOrder, Inbound};
use crate::wire::soupbin::{self, FrameReader, LoginRequest};
use std::io::{ErrorKind, Read, Write};
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4, TcpStream, UdpSocket};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

const SESSION: &str = "BOURSE0001";
const WAIT: Duration = Duration::from_secs(2);
const MS: u64 = 1_000_000;

fn session() -> SessionId {
    SessionId::new(SESSION).unwrap()
}

/// A group and port no other test uses at the same time: the port is one the kernel just gave
/// out, and the group's low 16 bits are that port.
fn unique_group() -> SocketAddrV4 {
    let port = UdpSocket::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let [hi, lo] = port.to_be_bytes();
    SocketAddrV4::new(Ipv4Addr::new(239, 192, hi, lo), port)
}

fn publisher_config(group: SocketAddrV4) -> PublisherConfig {
    PublisherConfig {
        group,
        interface: Ipv4Addr::LOCALHOST,
        ttl: 1,
        session: session(),
        max_payload_bytes: 1400,
        max_hold_us: 100,
        heartbeat_ms: 50,
        end_of_session_ms: 120,
        backlog_packets: 16,
    }
}

fn add_order(n: u64) -> Message {
    Message {
        header: Header {
            locate: 1,
            tracking: 0,
            timestamp: Timestamp(34_200_000_000_000 + n),
        },
        body: Body::AddOrder {
            order_ref: OrderRef(n),
            side: b'B',
            shares: Shares(100),
            stock: Alpha::from_str_padded("AAPL").unwrap(),
            price: Price(1_500_000 + n as u32),
        },
    }
}

fn encoded(m: &Message) -> Vec<u8> {
    let mut b = vec![0u8; m.encoded_len()];
    m.encode(&mut b);
    b
}

fn recv_packet(rx: &mut FeedReceiver) -> (Vec<u8>, Observed) {
    match rx.recv() {
        Ok(r) => (r.bytes.to_vec(), r.observed),
        Err(e) => panic!("no packet: {e}"),
    }
}

#[test]
fn packets_reach_a_pinned_receiver_packed_and_numbered() {
    let group = unique_group();
    let mut rx = FeedReceiver::join(group, Ipv4Addr::LOCALHOST, WAIT).unwrap();
    let mut tx = FeedPublisher::new(&publisher_config(group), 1, 0).unwrap();
    for n in 1..=100 {
        assert_eq!(tx.publish(&encoded(&add_order(n)), 10), n);
    }
    tx.flush(20);
    assert_eq!(tx.next_sequence(), 101);
    let mut next = 1u64;
    let mut packets = 0;
    while next <= 100 {
        let (bytes, observed) = recv_packet(&mut rx);
        assert!(bytes.len() <= 1400, "{} byte datagram", bytes.len());
        assert_eq!(observed, Observed::InOrder);
        let p = Packet::decode(&bytes).unwrap();
        assert_eq!(p.kind(), PacketKind::Data);
        assert_eq!(&p.header.session, b"BOURSE0001");
        assert_eq!(p.header.sequence, next);
        for (sequence, message) in p.messages() {
            assert_eq!(Message::decode(message).unwrap(), add_order(sequence));
        }
        println!(
            "packet {packets}: {} bytes, messages {}..{}",
            bytes.len(),
            p.header.sequence,
            p.next_sequence() - 1
        );
        next = p.next_sequence();
        packets += 1;
    }
    assert_eq!(next, 101);
    // 36-byte Add Orders in 38-byte blocks: 36 fit in 1400 bytes, so 100 take 3 packets.
    assert_eq!(packets, 3);
    let stats = tx.stats();
    assert_eq!((stats.data_packets_sent, stats.messages_sent), (3, 100));
    assert_eq!(stats.dropped_packets, 0);
}

#[test]
fn refused_sends_are_kept_and_retried_in_order() {
    let group = unique_group();
    let mut rx = FeedReceiver::join(group, Ipv4Addr::LOCALHOST, WAIT).unwrap();
    let mut config = publisher_config(group);
    config.backlog_packets = 4;
    let mut tx = FeedPublisher::new(&config, 1, 0).unwrap();
    tx.refuse_next_sends(2);
    for n in 1..=100 {
        tx.publish_itch(&add_order(n), 10);
    }
    // Packets 1 and 2 are full and sealed, waiting for the flush (one sendmmsg for all).
    assert_eq!(tx.backlog_packets(), 2);
    // The flush offers packets 1-3 together: refused, all kept; the retry refused too.
    tx.flush(20);
    assert_eq!(tx.backlog_packets(), 3);
    tx.flush(21);
    assert_eq!(tx.backlog_packets(), 3);
    tx.flush(22);
    assert_eq!(tx.backlog_packets(), 0);
    let mut next = 1;
    while next <= 100 {
        let r = rx.recv().unwrap();
        assert_eq!(r.observed, Observed::InOrder);
        next = r.packet.next_sequence();
    }
    let stats = tx.stats();
    assert_eq!((stats.send_errors, stats.dropped_packets), (2, 0));
    assert_eq!((stats.data_packets_sent, stats.messages_sent), (3, 100));
}

#[test]
fn a_full_backlog_drops_the_oldest_packet_and_counts_it() {
    let group = unique_group();
    let mut rx = FeedReceiver::join(group, Ipv4Addr::LOCALHOST, WAIT).unwrap();
    let mut config = publisher_config(group);
    config.backlog_packets = 1;
    let mut tx = FeedPublisher::new(&config, 1, 0).unwrap();
    tx.refuse_next_sends(1);
    for n in 1..=100 {
        tx.publish_itch(&add_order(n), 10);
    }
    // Packets 1-3 are offered together and refused: a backlog of one keeps packet 3.
    tx.flush(20);
    assert_eq!(tx.backlog_packets(), 1);
    tx.flush(21);
    // Packets 1 and 2 (messages 1..=72) were dropped; receivers see the gap.
    let r = rx.recv().unwrap();
    assert_eq!(
        r.observed,
        Observed::Gap {
            first: 1,
            count: 72
        }
    );
    assert_eq!(r.packet.next_sequence(), 101);
    let stats = tx.stats();
    assert_eq!((stats.dropped_packets, stats.dropped_messages), (2, 72));
    assert_eq!(stats.messages_sent, 28);
    // Nothing is pending, so the next thing on the wire is a heartbeat saying 101.
    tx.poll_timers(21 + 50 * MS);
    let r = rx.recv().unwrap();
    assert_eq!(
        (r.packet.kind(), r.packet.header.sequence),
        (PacketKind::Heartbeat, 101)
    );
}

/// A released batch larger than one `sendmmsg`: every packet arrives, in order, packed as
/// before, in ceil(packets / SEND_BATCH_PACKETS) system calls.
#[test]
fn a_large_batch_goes_out_in_few_calls_and_in_order() {
    let group = unique_group();
    let mut rx = FeedReceiver::join(group, Ipv4Addr::LOCALHOST, WAIT).unwrap();
    let mut tx = FeedPublisher::new(&publisher_config(group), 1, 0).unwrap();
    // 36 Add Orders fill a 1,400-byte packet: 70 full packets.
    let packets = 70u64;
    let total = 36 * packets;
    for n in 1..=total {
        tx.publish_itch(&add_order(n), 10);
    }
    tx.flush(20);
    assert_eq!(tx.backlog_packets(), 0);
    assert_eq!(tx.batch_calls(), 5, "16 + 16 + 16 + 16 + 6 packets");
    let mut next = 1u64;
    for _ in 0..packets {
        let (bytes, observed) = recv_packet(&mut rx);
        assert_eq!(observed, Observed::InOrder);
        let p = Packet::decode(&bytes).unwrap();
        assert_eq!((p.header.sequence, p.message_count()), (next, 36));
        for (sequence, message) in p.messages() {
            assert_eq!(Message::decode(message).unwrap(), add_order(sequence));
        }
        next = p.next_sequence();
    }
    assert_eq!(next, total + 1);
    let stats = tx.stats();
    assert_eq!(
        (stats.data_packets_sent, stats.messages_sent),
        (packets, total)
    );
}

#[test]
fn held_packet_goes_out_by_max_hold_and_heartbeats_when_idle() {
    let group = unique_group();
    let mut rx = FeedReceiver::join(group, Ipv4Addr::LOCALHOST, WAIT).unwrap();
    let mut tx = FeedPublisher::new(&publisher_config(group), 7, 0).unwrap();
    // Idle: nothing before heartbeat_ms, then a heartbeat carrying the next number.
    tx.poll_timers(49 * MS);
    assert_eq!(tx.next_deadline_ns(), 50 * MS);
    tx.poll_timers(50 * MS);
    rx.set_next_expected(7);
    let (bytes, observed) = recv_packet(&mut rx);
    assert_eq!(bytes.len(), 20);
    let p = Packet::decode(&bytes).unwrap();
    assert_eq!((p.kind(), p.header.sequence), (PacketKind::Heartbeat, 7));
    assert_eq!(observed, Observed::InOrder);
    // One message, no flush: it waits at most max_hold_us (100 µs).
    let t = 60 * MS;
    tx.publish_itch(&add_order(7), t);
    assert_eq!(tx.next_deadline_ns(), t + 100_000);
    tx.poll_timers(t + 99_999);
    tx.poll_timers(t + 100_000);
    let (bytes, _) = recv_packet(&mut rx);
    let p = Packet::decode(&bytes).unwrap();
    assert_eq!((p.header.sequence, p.message_count()), (7, 1));
    // The data packet reset the idle clock.
    tx.poll_timers(t + 100_000 + 49 * MS);
    tx.poll_timers(t + 100_000 + 50 * MS);
    let (bytes, _) = recv_packet(&mut rx);
    let p = Packet::decode(&bytes).unwrap();
    assert_eq!((p.kind(), p.header.sequence), (PacketKind::Heartbeat, 8));
    assert_eq!(tx.stats().heartbeats_sent, 2);
}

#[test]
fn end_of_session_replaces_heartbeats_for_a_while_then_silence() {
    let group = unique_group();
    let mut rx = FeedReceiver::join(group, Ipv4Addr::LOCALHOST, WAIT).unwrap();
    let mut tx = FeedPublisher::new(&publisher_config(group), 1, 0).unwrap();
    tx.publish_itch(&add_order(1), MS);
    tx.end_of_session(MS);
    let (bytes, _) = recv_packet(&mut rx);
    assert_eq!(Packet::decode(&bytes).unwrap().message_count(), 1);
    // end_of_session_ms 120, heartbeat_ms 50: at 1, 51, 101 ms, then nothing.
    let mut now = MS;
    while now < 400 * MS {
        tx.poll_timers(now);
        now += MS;
    }
    assert_eq!(tx.next_deadline_ns(), u64::MAX);
    for _ in 0..3 {
        let (bytes, _) = recv_packet(&mut rx);
        let p = Packet::decode(&bytes).unwrap();
        assert_eq!((p.kind(), p.header.sequence), (PacketKind::EndOfSession, 2));
    }
    rx.set_read_timeout(Duration::from_millis(200)).unwrap();
    assert!(matches!(rx.recv(), Err(RecvError::Timeout)));
    assert_eq!(tx.stats().end_of_session_sent, 3);
    assert_eq!(tx.stats().heartbeats_sent, 0);
}

/// A stream holding `n` Add Orders, as the engine would have appended them.
fn stream_of(n: u64) -> (StreamWriter, crate::stream::StreamReader) {
    let (mut w, r) = stream(1 << 20, 1 << 12).unwrap();
    for i in 1..=n {
        assert_eq!(w.append(&encoded(&add_order(i))).unwrap(), i);
    }
    (w, r)
}

fn rerequest_server(n: u64, max_payload_bytes: usize) -> (super::ServerHandle, StreamWriter) {
    let (w, r) = stream_of(n);
    let config = RerequestConfig {
        listen: "127.0.0.1:0".parse().unwrap(),
        session: session(),
        max_payload_bytes,
        limits: Default::default(),
    };
    let handle = RerequestServer::bind(&config, r).unwrap().spawn().unwrap();
    (handle, w)
}

fn ask(server: SocketAddr, session: &str, sequence: u64, count: u16) -> Option<Vec<u8>> {
    let session = SessionId::new(session).unwrap();
    request_retransmission(server, session, sequence, count, Duration::from_millis(300)).unwrap()
}

#[test]
fn rerequest_returns_exactly_the_missing_messages_in_one_packet() {
    let (server, _writer) = rerequest_server(100, 1400);
    let addr = server.local_addr();
    // A gap of 5 in the middle.
    let answer = ask(addr, SESSION, 41, 5).expect("answer");
    let p = Packet::decode(&answer).unwrap();
    let got: Vec<u64> = p.messages().map(|(s, _)| s).collect();
    assert_eq!(got, vec![41, 42, 43, 44, 45]);
    for (sequence, message) in p.messages() {
        assert_eq!(Message::decode(message).unwrap(), add_order(sequence));
    }
    // More than one packet's worth: one full packet, the client asks again for the rest.
    let answer = ask(addr, SESSION, 1, 100).expect("answer");
    assert!(answer.len() <= 1400);
    let p = Packet::decode(&answer).unwrap();
    assert_eq!((p.header.sequence, p.message_count()), (1, 36));
    let answer = ask(addr, SESSION, p.next_sequence(), 100).expect("answer");
    let p = Packet::decode(&answer).unwrap();
    assert_eq!((p.header.sequence, p.message_count()), (37, 36));
    // Past the published end: what exists.
    let answer = ask(addr, SESSION, 98, 10).expect("answer");
    let p = Packet::decode(&answer).unwrap();
    assert_eq!((p.header.sequence, p.message_count()), (98, 3));
    println!(
        "re-request answers: 5 of 5; 36 of 100 from 1; 36 of 100 from 37; 3 of 10 from 98 (end)"
    );
    server.stop();
}

#[test]
fn rerequest_respects_a_smaller_payload_limit() {
    let (server, _writer) = rerequest_server(10, 100);
    let answer = ask(server.local_addr(), SESSION, 2, 10).expect("answer");
    assert!(answer.len() <= 100);
    let p = Packet::decode(&answer).unwrap();
    // (100 - 20) / 38 = 2 blocks.
    assert_eq!((p.header.sequence, p.message_count()), (2, 2));
}

#[test]
fn rerequest_ignores_wrong_session_zero_count_and_beyond_end() {
    let (server, mut writer) = rerequest_server(10, 1400);
    let addr = server.local_addr();
    assert_eq!(ask(addr, "OTHER", 1, 5), None);
    assert_eq!(ask(addr, SESSION, 1, 0), None);
    assert_eq!(ask(addr, SESSION, 0, 5), None);
    assert_eq!(ask(addr, SESSION, 11, 5), None);
    // Published later: now it is answered.
    writer.append(&encoded(&add_order(11))).unwrap();
    let p_bytes = ask(addr, SESSION, 11, 5).expect("answer once published");
    assert_eq!(Packet::decode(&p_bytes).unwrap().message_count(), 1);
}

#[test]
fn rerequest_answer_is_pure_and_classifies_what_it_ignores() {
    let (_w, r) = stream_of(3);
    let config = RerequestConfig {
        listen: "127.0.0.1:0".parse().unwrap(),
        session: session(),
        max_payload_bytes: 1400,
        limits: Default::default(),
    };
    let mut server = RerequestServer::bind(&config, r).unwrap();
    let mut req = [0u8; 20];
    let mut ask = |session: &str, sequence, count| {
        Request::new(SessionId::new(session).unwrap(), sequence, count).encode(&mut req);
        server.answer(&req).map(|p| p.len())
    };
    assert_eq!(ask(SESSION, 2, 9), Ok(20 + 2 * 38));
    assert_eq!(ask("X", 2, 9), Err(Ignored::OtherSession));
    assert_eq!(ask(SESSION, 2, 0), Err(Ignored::ZeroCount));
    assert_eq!(ask(SESSION, 0, 1), Err(Ignored::ZeroSequence));
    assert_eq!(ask(SESSION, 4, 1), Err(Ignored::BeyondEnd { published: 3 }));
    assert_eq!(server.answer(b"short"), Err(Ignored::Malformed));
    assert_eq!(server.answer(&[0u8; 21]), Err(Ignored::Malformed));
}

fn guarded_server(limits: super::rerequest::RerequestLimits) -> RerequestServer {
    let (_w, r) = stream_of(2_000);
    let config = RerequestConfig {
        listen: "127.0.0.1:0".parse().unwrap(),
        session: session(),
        max_payload_bytes: 1400,
        limits,
    };
    RerequestServer::bind(&config, r).unwrap()
}

fn limits(
    allow: &[&str],
    requests_per_s: u32,
    bytes_per_s: u32,
) -> super::rerequest::RerequestLimits {
    super::rerequest::RerequestLimits {
        allow: crate::guard::Allowlist::parse(
            &allow.iter().map(|s| s.to_string()).collect::<Vec<_>>(),
        )
        .unwrap(),
        requests_per_s,
        bytes_per_s,
    }
}

fn request_bytes(sequence: u64, count: u16) -> [u8; Request::LEN] {
    let mut req = [0u8; Request::LEN];
    Request::new(session(), sequence, count).encode(&mut req);
    req
}

#[test]
fn rerequest_answers_only_allowed_sources() {
    let mut server = guarded_server(limits(&["10.0.0.0/8", "::1"], 1_000, 1 << 20));
    let req = request_bytes(1, 10);
    let ip = |s: &str| s.parse::<std::net::IpAddr>().unwrap();
    assert_eq!(
        server.answer_from(&req, ip("192.168.1.1"), 0),
        Err(Ignored::NotAllowed)
    );
    assert_eq!(
        server.answer_from(&req, ip("127.0.0.1"), 0),
        Err(Ignored::NotAllowed)
    );
    assert!(server.answer_from(&req, ip("10.9.8.7"), 0).is_ok());
    assert!(server.answer_from(&req, ip("::1"), 0).is_ok());
}

#[test]
fn rerequest_rate_limits_each_source() {
    let mut server = guarded_server(limits(&["10.0.0.0/8"], 100, 1 << 30));
    let req = request_bytes(1, 1);
    let a = "10.0.0.1".parse().unwrap();
    let b = "10.0.0.2".parse().unwrap();
    let answered = |server: &mut RerequestServer, source, now_ns| {
        (0..1_000)
            .filter(|_| server.answer_from(&req, source, now_ns).is_ok())
            .count()
    };
    assert_eq!(answered(&mut server, a, 0), 100, "one second's burst");
    assert_eq!(server.answer_from(&req, a, 0), Err(Ignored::RateLimited));
    assert_eq!(
        answered(&mut server, b, 0),
        100,
        "another source has its own"
    );
    assert_eq!(answered(&mut server, a, 500 * MS), 50, "refilled at 100/s");
}

/// The goal: beyond its allowance a source gets at most one byte out per byte in.
#[test]
fn a_flooding_source_gets_at_most_its_allowance_plus_one_byte_per_byte_in() {
    let allowance_per_s = 64 << 10;
    let mut server = guarded_server(limits(&["10.0.0.0/8"], 1_000_000, allowance_per_s));
    let source = "10.0.0.1".parse().unwrap();
    let (mut bytes_in, mut bytes_out) = (0u64, 0u64);
    // 10 s of 20,000 requests per second, each asking for a full packet.
    let seconds = 10;
    for i in 0..seconds * 20_000u64 {
        let now_ns = i * 50_000;
        let req = request_bytes(1 + i % 1_000, 1_000);
        bytes_in += req.len() as u64;
        if let Ok(packet) = server.answer_from(&req, source, now_ns) {
            bytes_out += packet.len() as u64;
        }
    }
    let allowance = u64::from(allowance_per_s) * (4 + seconds);
    println!("flood: {bytes_in} bytes in, {bytes_out} out, allowance {allowance}");
    assert!(
        bytes_out <= allowance + bytes_in,
        "{bytes_out} > {allowance} + {bytes_in}"
    );
    // And it is not starved either: the allowance and the byte-for-byte credit are used.
    assert!(
        bytes_out + 1_400 * 2 * seconds >= allowance + bytes_in,
        "{bytes_out}"
    );
    // Unlimited, a 20-byte request gets up to 1,400 bytes: 70 times as much.
    let amplification_unlimited = 1_400 / 20;
    assert!(bytes_out < bytes_in * amplification_unlimited / 10);
}

#[test]
fn all_sources_together_share_sixteen_allowances() {
    let allowance_per_s = 64 << 10;
    let mut server = guarded_server(limits(&["10.0.0.0/8"], 1_000_000, allowance_per_s));
    let mut bytes_out = 0u64;
    // A spoofer cycling through 5,000 addresses at one instant.
    for i in 0..5_000u32 {
        let source = std::net::IpAddr::V4(Ipv4Addr::from(0x0a00_0000 + i));
        for _ in 0..400 {
            match server.answer_from(&request_bytes(1, 1_000), source, 0) {
                Ok(packet) => bytes_out += packet.len() as u64,
                Err(_) => break,
            }
        }
    }
    let total_burst = u64::from(allowance_per_s) * 4 * 16;
    assert!(bytes_out <= total_burst + 5_000 * 400 * 20, "{bytes_out}");
    assert!(bytes_out >= total_burst - 1_400, "{bytes_out}");
}

#[test]
fn the_loopback_interface_network_is_found() {
    let lo = super::rerequest::interface_network("127.0.0.1".parse().unwrap());
    assert_eq!(lo.map(|c| c.to_string()), Some("127.0.0.0/8".into()));
    assert_eq!(
        super::rerequest::interface_network("192.0.2.77".parse().unwrap()),
        None
    );
}

#[test]
fn receiver_reports_a_gap_and_the_rerequest_server_fills_it() {
    let group = unique_group();
    let mut rx = FeedReceiver::join(group, Ipv4Addr::LOCALHOST, WAIT).unwrap();
    let (mut writer, reader) = stream(1 << 20, 1 << 12).unwrap();
    let config = RerequestConfig {
        listen: "127.0.0.1:0".parse().unwrap(),
        session: session(),
        max_payload_bytes: 1400,
        limits: Default::default(),
    };
    let server = RerequestServer::bind(&config, reader)
        .unwrap()
        .spawn()
        .unwrap();
    // Messages 1..=3 are "lost": journaled and stored, but the publisher starts at 4.
    for i in 1..=5 {
        writer.append(&encoded(&add_order(i))).unwrap();
    }
    let mut tx = FeedPublisher::new(&publisher_config(group), 4, 0).unwrap();
    tx.publish(writer.reader().get(4).unwrap(), 1);
    tx.publish(writer.reader().get(5).unwrap(), 1);
    tx.flush(2);
    let r = rx.recv().unwrap();
    assert_eq!(r.observed, Observed::Gap { first: 1, count: 3 });
    let Observed::Gap { first, count } = r.observed else {
        unreachable!()
    };
    let answer = request_retransmission(server.local_addr(), session(), first, count as u16, WAIT)
        .unwrap()
        .expect("answer");
    let p = Packet::decode(&answer).unwrap();
    let got: Vec<_> = p.messages().map(|(s, m)| (s, m.to_vec())).collect();
    let want: Vec<_> = (1..=3).map(|i| (i, encoded(&add_order(i)))).collect();
    assert_eq!(got, want);
}

// ---- GLIMPSE ----

fn tok(s: &str) -> Token {
    Token::from_str_padded(s).unwrap()
}

fn enter(token: &str, side: u8, shares: u32, dollars: u32, display: u8) -> EnterOrder {
    EnterOrder {
        token: tok(token),
        side,
        shares: Shares(shares),
        stock: Alpha(*b"AAPL    "),
        price: Price(dollars * 10_000),
        tif: 99_999,
        firm: Firm::SPACES,
        display,
        capacity: b'A',
        intermarket_sweep: b'N',
        min_qty: Shares(0),
        cross_type: b'N',
        customer_type: b' ',
    }
}

/// An exchange with resting orders on AAPL and the ITCH sequence number its next output gets.
fn exchange_with_orders() -> (Exchange, u64) {
    let venue = Venue::demo(
        &["AAPL", "MSFT"],
        &[("ALICE", "FRMA"), ("BOB", "FRMB")],
        Limits {
            orders_per_symbol: 64,
            levels_per_side: 16,
            tokens_per_account: 256,
        },
    );
    let mut ex = Exchange::new(venue).unwrap();
    let mut itch_messages = 0u64;
    let commands = [
        Command::StartOfDay,
        ouch(0, enter("B1", b'B', 100, 10, b'Y')),
        ouch(1, enter("B2", b'B', 200, 11, b'A')),
        ouch(0, enter("S1", b'S', 300, 12, b'Y')),
        ouch(1, enter("H1", b'S', 400, 13, b'N')),
        // Partly fills S1: its leaves are 250.
        ouch(1, enter("T1", b'B', 50, 12, b'Y')),
    ];
    for (i, command) in commands.into_iter().enumerate() {
        let mut rec = Recorder::default();
        let input = Input {
            seq: i as u64 + 1,
            timestamp: Timestamp(1_000_000 * (i as u64 + 1)),
            command,
        };
        ex.apply(&input, &mut rec);
        itch_messages += rec
            .outputs
            .iter()
            .filter(|o| matches!(o, Output::Itch(_)))
            .count() as u64;
    }
    (ex, itch_messages + 1)
}

fn ouch(account: u16, order: EnterOrder) -> Command {
    Command::Ouch {
        account: AccountId(account),
        message: Inbound::Enter(order),
    }
}

const SNAPSHOT_TS: Timestamp = Timestamp(9_000_000);

/// The engine's side in a test: a thread that owns the exchange and answers snapshot
/// requests, woken by the GLIMPSE server (or every 100 ms).
struct Engine {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

fn glimpse_server(max_connections: usize) -> (super::ServerHandle, Engine, u64) {
    glimpse_server_with(max_connections, 300)
}

fn glimpse_server_with(
    max_connections: usize,
    login_timeout_ms: u64,
) -> (super::ServerHandle, Engine, u64) {
    let answering = Arc::new(AtomicBool::new(true));
    glimpse_server_held(
        max_connections,
        login_timeout_ms,
        max_connections,
        answering,
    )
}

/// A GLIMPSE server whose engine answers snapshot requests only while `answering` is set
/// (a logged-in connection holds its slot meanwhile).
fn glimpse_server_held(
    max_connections: usize,
    login_timeout_ms: u64,
    max_per_account: usize,
    answering: Arc<AtomicBool>,
) -> (super::ServerHandle, Engine, u64) {
    let (mut ex, next_itch) = exchange_with_orders();
    let stop = Arc::new(AtomicBool::new(false));
    let (ready_tx, ready_rx) = crossbeam::channel::bounded(1);
    let stop_flag = stop.clone();
    let thread = std::thread::spawn(move || {
        let me = std::thread::current();
        let waker: crate::wake::Waker = Arc::new(move || me.unpark());
        let (requester, desk) = snapshot_channel(max_connections, Some(waker));
        ready_tx.send(requester).unwrap();
        while !stop_flag.load(Ordering::Acquire) {
            if answering.load(Ordering::Acquire) {
                desk.answer_snapshot_requests(&mut ex, next_itch, SNAPSHOT_TS);
            }
            std::thread::park_timeout(Duration::from_millis(20));
        }
    });
    let requester = ready_rx.recv().unwrap();
    let config = GlimpseConfig {
        listen: "127.0.0.1:0".parse().unwrap(),
        session: session(),
        accounts: vec![
            ("BRKR01".into(), "secret".into()),
            ("ALICE".into(), "pw".into()),
        ],
        login_timeout_ms,
        answer_timeout_ms: 2_000,
        write_timeout_ms: 2_000,
        stall_timeout_ms: 1_000,
        max_connections,
        max_per_source: max_connections,
        max_per_account,
        backoff: crate::guard::BackoffRules {
            free_failures: 5,
            first_delay_ms: 100,
            max_delay_ms: 2_000,
            lockout_failures: 20,
            lockout_ms: 60_000,
        },
    };
    let handle = GlimpseServer::spawn(config, requester).unwrap();
    let engine = Engine {
        stop,
        thread: Some(thread),
    };
    (handle, engine, next_itch)
}

impl Drop for Engine {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(t) = self.thread.take() {
            t.thread().unpark();
            t.join().unwrap();
        }
    }
}

/// What a GLIMPSE client saw, packet by packet, until EOF.
#[derive(Debug, PartialEq)]
enum Seen {
    Accepted(SessionId, u64),
    Rejected(u8),
    Data(Vec<u8>),
    End,
}

fn glimpse_login(addr: SocketAddr, user: &str, password: &str, session: &str) -> TcpStream {
    let mut stream = TcpStream::connect(addr).unwrap();
    stream.set_read_timeout(Some(WAIT)).unwrap();
    let login = LoginRequest {
        username: Alpha::from_str_padded(user).unwrap(),
        password: Alpha::from_str_padded(password).unwrap(),
        session: SessionId::new(session).unwrap(),
        sequence: 1,
        heartbeat_timeout_ms: None,
    };
    let mut buf = [0u8; 64];
    let n = soupbin::Packet::LoginRequest(login).encode(&mut buf);
    stream.write_all(&buf[..n]).unwrap();
    stream
}

/// Read packets until EOF (a read timeout fails the test).
fn read_to_eof(mut stream: TcpStream) -> Vec<Seen> {
    read_until_eof(&mut stream)
}

/// [`read_to_eof`], the socket left open.
fn read_until_eof(stream: &mut TcpStream) -> Vec<Seen> {
    let mut reader = FrameReader::new(soupbin::MAX_PACKET_LEN);
    let mut seen = Vec::new();
    loop {
        while let Some(p) = reader.next_packet() {
            seen.push(match p.unwrap() {
                soupbin::Packet::LoginAccepted { session, sequence } => {
                    Seen::Accepted(session, sequence)
                }
                soupbin::Packet::LoginRejected { reason } => Seen::Rejected(reason),
                soupbin::Packet::SequencedData(d) => Seen::Data(d.to_vec()),
                soupbin::Packet::EndOfSession => Seen::End,
                other => panic!("unexpected {other:?}"),
            });
        }
        let n = match stream.read(reader.read_space()) {
            Ok(n) => n,
            // A connection the server refused at once may be reset rather than closed.
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset && seen.is_empty() => 0,
            Err(e) => panic!("read before EOF: {e}"),
        };
        if n == 0 {
            assert_eq!(reader.buffered(), 0, "EOF inside a packet");
            return seen;
        }
        reader.commit(n);
    }
}

#[test]
fn glimpse_snapshot_matches_the_book_then_g_then_z_then_eof() {
    let (server, _engine, next_itch) = glimpse_server(2);
    let (mut ex, _) = exchange_with_orders();
    let mut want = Vec::new();
    ex.snapshot(SNAPSHOT_TS, |m| want.push(*m));
    let stream = glimpse_login(server.local_addr(), "brkr01", "SECRET", "");
    let seen = read_to_eof(stream);
    assert_eq!(seen[0], Seen::Accepted(session(), 1));
    assert_eq!(seen.last(), Some(&Seen::End));
    let data: Vec<&[u8]> = seen[1..seen.len() - 1]
        .iter()
        .map(|s| match s {
            Seen::Data(d) => d.as_slice(),
            other => panic!("expected data, got {other:?}"),
        })
        .collect();
    let (end, itch_part) = data.split_last().unwrap();
    let got: Vec<Message> = itch_part
        .iter()
        .map(|d| Message::decode(d).unwrap())
        .collect();
    assert_eq!(got, want);
    assert_eq!(
        SnapshotMessage::decode(end),
        Ok(SnapshotMessage::End(EndOfSnapshot {
            sequence: next_itch
        }))
    );
    // The book as built: AAPL directory, trading, bids B2 (F, $11) then B1 (A, $10), ask S1
    // with its 250 leaves; the hidden H1 is not shown; then MSFT with an empty book.
    let summary: Vec<String> = got
        .iter()
        .map(|m| match m.body {
            Body::StockDirectory(d) => format!("R{}", String::from_utf8_lossy(&d.stock.0)),
            Body::TradingAction { state, .. } => format!("H{}", state as char),
            Body::AddOrder { side, shares, .. } => format!("A{}{}", side as char, shares.0),
            Body::AddOrderMpid { side, shares, .. } => format!("F{}{}", side as char, shares.0),
            other => format!("{other:?}"),
        })
        .collect();
    println!("snapshot: {summary:?}, G {next_itch}");
    assert_eq!(
        summary,
        [
            "RAAPL    ",
            "HT",
            "FB200",
            "AB100",
            "AS250",
            "RMSFT    ",
            "HT"
        ]
    );
    assert_eq!(
        itch::Message::decode(data[0]).unwrap().header.timestamp,
        SNAPSHOT_TS
    );
}

/// A client that stops reading is closed once its socket has taken nothing for the stall
/// timeout, long before the whole snapshot's deadline (the hostile audit held all eight
/// GLIMPSE slots for 30 s with clients that never read); one that reads slowly is not.
#[test]
fn glimpse_gives_up_on_a_client_that_stops_reading_not_on_a_slow_one() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let stop = AtomicBool::new(false);
    // More than the kernel buffers on both ends hold.
    let bytes = vec![0u8; 64 << 20];
    let stall = Duration::from_millis(300);
    let deadline = || std::time::Instant::now() + Duration::from_secs(30);
    let stalled = TcpStream::connect(addr).unwrap();
    let (mut server_side, _) = listener.accept().unwrap();
    let started = std::time::Instant::now();
    let error = super::glimpse::write_until(&mut server_side, &bytes, deadline(), stall, &stop)
        .unwrap_err();
    let waited = started.elapsed();
    assert!(
        error.to_string().contains("took nothing for 300 ms"),
        "{error}"
    );
    assert!(waited < Duration::from_secs(10), "gave up after {waited:?}");
    drop(stalled);
    // A reader that takes a little every 100 ms (under the stall) gets everything.
    let small = vec![7u8; 8 << 20];
    let mut reader = TcpStream::connect(addr).unwrap();
    let (mut server_side, _) = listener.accept().unwrap();
    let total = small.len();
    let slow = std::thread::spawn(move || {
        let mut got = 0;
        let mut buf = vec![0u8; 1 << 20];
        while got < total {
            std::thread::sleep(Duration::from_millis(100));
            match reader.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => got += n,
                Err(e) => panic!("{e}"),
            }
        }
        got
    });
    super::glimpse::write_until(&mut server_side, &small, deadline(), stall, &stop).unwrap();
    drop(server_side);
    assert_eq!(slow.join().unwrap(), total);
}

/// A connection whose client has written (and whose thread has not read it yet) is not the
/// one closed for room: the peek sees the bytes without taking them, and without waiting.
#[test]
fn glimpse_sees_a_login_waiting_to_be_read_without_taking_it() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let mut client = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
    let (mut server_side, _) = listener.accept().unwrap();
    assert!(
        !super::glimpse::has_written(&server_side),
        "nothing sent yet"
    );
    client.write_all(b"login").unwrap();
    let deadline = std::time::Instant::now() + WAIT;
    while !super::glimpse::has_written(&server_side) {
        assert!(std::time::Instant::now() < deadline, "never saw the bytes");
        std::thread::sleep(Duration::from_millis(1));
    }
    let mut got = [0u8; 5];
    server_side.read_exact(&mut got).unwrap();
    assert_eq!(&got, b"login", "the peek took nothing");
    assert!(!super::glimpse::has_written(&server_side), "all read");
}

#[test]
fn glimpse_rejects_bad_password_and_wrong_session() {
    let (server, _engine, _) = glimpse_server(2);
    let addr = server.local_addr();
    let seen = read_to_eof(glimpse_login(addr, "BRKR01", "wrong", ""));
    assert_eq!(seen, vec![Seen::Rejected(b'A')]);
    let seen = read_to_eof(glimpse_login(addr, "nobody", "secret", ""));
    assert_eq!(seen, vec![Seen::Rejected(b'A')]);
    let seen = read_to_eof(glimpse_login(addr, "alice", "PW", "OTHER"));
    assert_eq!(seen, vec![Seen::Rejected(b'S')]);
    // A bad password with a wrong session is still `A`: credentials come first.
    let seen = read_to_eof(glimpse_login(addr, "alice", "no", "OTHER"));
    assert_eq!(seen, vec![Seen::Rejected(b'A')]);
    // The session by name works.
    let seen = read_to_eof(glimpse_login(addr, "alice", "pw", SESSION));
    assert_eq!(seen[0], Seen::Accepted(session(), 1));
}

/// Read the Login Accepted packet that starts a served connection.
fn read_login_accepted(stream: &mut TcpStream) {
    let mut packet = [0u8; soupbin::HEADER_LEN + soupbin::payload_len::LOGIN_ACCEPTED];
    stream.read_exact(&mut packet).unwrap();
    assert_eq!(packet[2], b'A', "Login Accepted: {packet:?}");
}

#[test]
fn glimpse_serves_an_account_at_most_its_share_of_the_slots_at_once() {
    let answering = Arc::new(AtomicBool::new(false));
    let (server, _engine, _) = glimpse_server_held(4, 2_000, 2, answering.clone());
    let addr = server.local_addr();
    // Two snapshots of BRKR01 under way (the engine holds their answers).
    let mut first = glimpse_login(addr, "BRKR01", "secret", "");
    let mut second = glimpse_login(addr, "BRKR01", "secret", "");
    read_login_accepted(&mut first);
    read_login_accepted(&mut second);
    // A third at once is turned away, though slots are free; another account is not.
    let third = read_to_eof(glimpse_login(addr, "BRKR01", "secret", ""));
    assert_eq!(third, vec![Seen::Rejected(b'S')]);
    let mut other = glimpse_login(addr, "ALICE", "pw", "");
    read_login_accepted(&mut other);
    answering.store(true, Ordering::Release);
    for stream in [first, second, other] {
        let seen = read_to_eof(stream);
        assert_eq!(seen.last(), Some(&Seen::End), "{seen:?}");
    }
    // Once those ended, the account is served again (the refusal was no failed login).
    let started = std::time::Instant::now();
    let again = read_to_eof(glimpse_login(addr, "BRKR01", "secret", ""));
    assert_eq!(again[0], Seen::Accepted(session(), 1));
    assert!(started.elapsed() < Duration::from_millis(500));
}

/// An account at its share whose snapshots are written whole, their clients not closed yet
/// (the server waits up to a second for them): its next login waits for one to close, then
/// is served; it is neither refused (a client taking snapshot after snapshot would be, on a
/// busy machine) nor served beside them (one account would then hold every slot).
#[test]
fn glimpse_a_login_at_its_accounts_share_waits_for_a_finished_snapshot_to_close() {
    let answering = Arc::new(AtomicBool::new(true));
    let (server, _engine, _) = glimpse_server_held(4, 2_000, 2, answering);
    let addr = server.local_addr();
    let mut finished = [
        glimpse_login(addr, "BRKR01", "secret", ""),
        glimpse_login(addr, "BRKR01", "secret", ""),
    ];
    for stream in &mut finished {
        let seen = read_until_eof(stream);
        assert_eq!(seen.last(), Some(&Seen::End), "{seen:?}");
    }
    let mut next = glimpse_login(addr, "BRKR01", "secret", "");
    next.set_read_timeout(Some(Duration::from_millis(300)))
        .unwrap();
    let mut byte = [0u8; 1];
    let early = next.read(&mut byte);
    assert!(
        matches!(&early, Err(e) if e.kind() == std::io::ErrorKind::WouldBlock),
        "answered while the account's two connections are open: {early:?}"
    );
    // Another account is served meanwhile.
    let other = read_to_eof(glimpse_login(addr, "ALICE", "pw", ""));
    assert_eq!(other.last(), Some(&Seen::End), "{other:?}");
    // One of the finished clients closes: the waiting login is served at once.
    let [one, _two] = finished;
    drop(one);
    let started = std::time::Instant::now();
    next.set_read_timeout(Some(WAIT)).unwrap();
    read_login_accepted(&mut next);
    assert!(started.elapsed() < Duration::from_millis(300));
}

#[test]
fn glimpse_failed_logins_back_off_like_the_gateway() {
    let (server, _engine, _) = glimpse_server(2);
    let addr = server.local_addr();
    // Five free failures (the test rules), then the answer waits 100 ms, then 200 ms.
    for _ in 0..5 {
        let started = std::time::Instant::now();
        assert_eq!(
            read_to_eof(glimpse_login(addr, "BRKR01", "wrong", "")),
            vec![Seen::Rejected(b'A')]
        );
        assert!(started.elapsed() < Duration::from_millis(100));
    }
    for wait_ms in [100, 200] {
        let started = std::time::Instant::now();
        assert_eq!(
            read_to_eof(glimpse_login(addr, "BRKR01", "wrong", "")),
            vec![Seen::Rejected(b'A')]
        );
        assert!(
            started.elapsed() >= Duration::from_millis(wait_ms),
            "{:?}",
            started.elapsed()
        );
    }
    // The right password is never delayed.
    let started = std::time::Instant::now();
    let seen = read_to_eof(glimpse_login(addr, "BRKR01", "secret", ""));
    assert_eq!(seen[0], Seen::Accepted(session(), 1));
    assert!(started.elapsed() < Duration::from_millis(100));
}

#[test]
fn glimpse_closes_a_silent_connection_and_bad_bytes() {
    let (server, _engine, _) = glimpse_server(2);
    let addr = server.local_addr();
    // No login: closed after login_timeout_ms (300 ms), before the client's 2 s read timeout.
    let silent = TcpStream::connect(addr).unwrap();
    silent.set_read_timeout(Some(WAIT)).unwrap();
    assert_eq!(read_to_eof(silent), vec![]);
    // Data before login: closed without an answer.
    let mut early = TcpStream::connect(addr).unwrap();
    early.set_read_timeout(Some(WAIT)).unwrap();
    early.write_all(b"\x00\x03Uhi").unwrap();
    assert_eq!(read_to_eof(early), vec![]);
}

#[test]
fn glimpse_bounds_connections_and_a_newcomer_closes_the_oldest_idle_one() {
    let (server, _engine, _) = glimpse_server_with(1, 5_000);
    let addr = server.local_addr();
    // The first connection holds the only slot without logging in...
    let holder = TcpStream::connect(addr).unwrap();
    holder.set_read_timeout(Some(WAIT)).unwrap();
    std::thread::sleep(Duration::from_millis(50));
    // ...until a subscriber arrives: the idle one is closed (EOF or a reset), long before the
    // 5 s login timeout, and the subscriber gets its snapshot.
    let started = std::time::Instant::now();
    let subscriber = glimpse_login(addr, "BRKR01", "secret", "");
    let mut buf = [0u8; 8];
    let read = (&holder).read(&mut buf);
    assert!(matches!(read, Ok(0) | Err(_)), "{read:?}");
    assert!(started.elapsed() < Duration::from_secs(1));
    let seen = read_to_eof(subscriber);
    assert_eq!(seen[0], Seen::Accepted(session(), 1));
    assert_eq!(seen.last(), Some(&Seen::End));
    // Bursts of idle connections: each newcomer closes the one before it, and the subscriber
    // behind a burst is served every time, at once. The burst reaches the server faster than
    // the closed connections' threads end, so the server must wait for them rather than close
    // the newcomer.
    for round in 0..10 {
        // The last snapshot's connection holds the only slot until its thread has seen our
        // close; the first idle connection of the burst is the one that finds it free.
        let mut idle = vec![idle_connection_in_the_free_slot(addr)];
        idle.extend((0..4).map(|_| TcpStream::connect(addr).unwrap()));
        let seen = read_to_eof(glimpse_login(addr, "BRKR01", "secret", ""));
        drop(idle);
        assert!(
            !seen.is_empty(),
            "round {round}: the subscriber was refused"
        );
        assert_eq!(seen[0], Seen::Accepted(session(), 1));
        assert_eq!(seen.last(), Some(&Seen::End));
    }
}

/// A connection (not logged in) holding a free slot of a one-slot server: while the slot is
/// taken by a snapshot, a newcomer is closed at once; once free, it stays open.
fn idle_connection_in_the_free_slot(addr: SocketAddr) -> TcpStream {
    for _ in 0..200 {
        let stream = TcpStream::connect(addr).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_millis(50)))
            .unwrap();
        match (&stream).read(&mut [0u8; 8]) {
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                return stream;
            }
            _ => std::thread::sleep(Duration::from_millis(10)),
        }
    }
    panic!("the slot never became free");
}

#[test]
fn snapshot_encoding_is_soupbin_packets_ending_in_g_and_z() {
    let (mut ex, next_itch) = exchange_with_orders();
    let Snapshot {
        packets,
        messages,
        next_itch_sequence,
    } = encode_snapshot(&mut ex, next_itch, SNAPSHOT_TS);
    assert_eq!((messages, next_itch_sequence), (7, next_itch));
    assert!(packets.ends_with(b"\x00\x01Z"));
    let g = &packets[packets.len() - 3 - 24..packets.len() - 3];
    assert_eq!(&g[..3], b"\x00\x16S");
    assert_eq!(
        EndOfSnapshot::decode(&g[3..]),
        Ok(EndOfSnapshot {
            sequence: next_itch
        })
    );
}

/// The trial a cluster member makes before it stands for election or serves: a sending
/// socket on this host's interface opens; one on an address no interface has does not, and
/// neither sends anything the group's receiver could see.
#[test]
fn a_feed_sender_opens_only_on_an_interface_this_host_has() {
    let group = unique_group();
    let mut receiver =
        FeedReceiver::join(group, Ipv4Addr::LOCALHOST, Duration::from_millis(200)).unwrap();
    assert!(super::publisher::sender_opens(&publisher_config(group)).is_ok());
    let elsewhere = PublisherConfig {
        // TEST-NET-1 (RFC 5737).
        interface: Ipv4Addr::new(192, 0, 2, 1),
        ..publisher_config(group)
    };
    assert!(super::publisher::sender_opens(&elsewhere).is_err());
    assert!(receiver.recv().is_err(), "a trial sends no datagram");
}
