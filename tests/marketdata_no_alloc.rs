//! The feed's hot path allocates nothing after construction: a counting global allocator
//! watches the publisher pack and send 20 000 ITCH messages (flushes, hold timer, heartbeats)
//! and the re-request server answer 1 000 requests.

use bourse::marketdata::publisher::{FeedPublisher, PublisherConfig};
use bourse::marketdata::rerequest::{RerequestConfig, RerequestServer};
use bourse::types::{Alpha, OrderRef, Price, Shares, Timestamp};
use bourse::wire::ascii::SessionId;
use bourse::wire::itch::{Body, Header, Message};
use bourse::wire::moldudp64::Request;
use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::net::{Ipv4Addr, SocketAddrV4, UdpSocket};

struct Counting;

thread_local! {
    // Per thread, so tests running in parallel do not count each other's allocations.
    static WATCHING: Cell<bool> = const { Cell::new(false) };
    static ALLOCATIONS: Cell<u64> = const { Cell::new(0) };
}

fn count_if_watching() {
    if WATCHING.with(|w| w.get()) {
        ALLOCATIONS.with(|a| a.set(a.get() + 1));
    }
}

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        count_if_watching();
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        count_if_watching();
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// Allocations made by `f` on this thread.
fn allocations_in(f: impl FnOnce()) -> u64 {
    ALLOCATIONS.with(|a| a.set(0));
    WATCHING.with(|w| w.set(true));
    f();
    WATCHING.with(|w| w.set(false));
    ALLOCATIONS.with(|a| a.get())
}

fn add_order(n: u64) -> Message {
    Message {
        header: Header {
            locate: 1,
            tracking: 0,
            timestamp: Timestamp(n),
        },
        body: Body::AddOrder {
            order_ref: OrderRef(n),
            side: b'S',
            shares: Shares(100),
            stock: Alpha(*b"AAPL    "),
            price: Price(1_000_000),
        },
    }
}

fn session() -> SessionId {
    SessionId::new("BOURSE0001").unwrap()
}

#[test]
fn publishing_allocates_nothing() {
    // A group and port of our own (see src/marketdata/tests.rs); nobody needs to listen.
    let port = UdpSocket::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let [hi, lo] = port.to_be_bytes();
    let config = PublisherConfig {
        group: SocketAddrV4::new(Ipv4Addr::new(239, 193, hi, lo), port),
        interface: Ipv4Addr::LOCALHOST,
        ttl: 1,
        session: session(),
        max_payload_bytes: 1400,
        max_hold_us: 100,
        heartbeat_ms: 1,
        end_of_session_ms: 10,
        backlog_packets: 8,
    };
    let mut publisher = FeedPublisher::new(&config, 1, 0).unwrap();
    let messages: Vec<Message> = (1..=20_000).map(add_order).collect();
    let mut encoded = [0u8; 64];
    let allocations = allocations_in(|| {
        let mut now_ns = 0u64;
        for (i, m) in messages.iter().enumerate() {
            now_ns += 10_000;
            if i % 2 == 0 {
                publisher.publish_itch(m, now_ns);
            } else {
                let n = m.encode(&mut encoded);
                publisher.publish(&encoded[..n], now_ns);
            }
            match i % 7 {
                0 => publisher.flush(now_ns),
                3 => publisher.poll_timers(now_ns + 200_000),
                5 => publisher.poll_timers(now_ns + 2_000_000),
                _ => {}
            }
        }
        publisher.flush(now_ns);
        publisher.end_of_session(now_ns);
        publisher.poll_timers(now_ns + 5_000_000);
    });
    assert_eq!(publisher.next_sequence(), 20_001);
    assert_eq!(publisher.stats().messages_sent, 20_000);
    assert_eq!(allocations, 0);
}

#[test]
fn answering_rerequests_allocates_nothing() {
    let (mut writer, reader) = bourse::stream::stream(1 << 20, 1 << 14).unwrap();
    let mut encoded = [0u8; 64];
    for n in 1..=5_000 {
        let len = add_order(n).encode(&mut encoded);
        writer.append(&encoded[..len]).unwrap();
    }
    let config = RerequestConfig {
        listen: "127.0.0.1:0".parse().unwrap(),
        session: session(),
        max_payload_bytes: 1400,
        limits: Default::default(),
    };
    let mut server = RerequestServer::bind(&config, reader).unwrap();
    let mut request = [0u8; Request::LEN];
    let mut answered_bytes = 0usize;
    // Through the allowlist and the per-source budgets too, from many sources (each new
    // one takes a slot of the preallocated table).
    let sources: Vec<std::net::IpAddr> = (0..64u8)
        .map(|i| std::net::IpAddr::V4(std::net::Ipv4Addr::new(127, 0, 1, i)))
        .collect();
    let allocations = allocations_in(|| {
        for n in 0..1_000u64 {
            Request::new(session(), 1 + n * 5, 100).encode(&mut request);
            answered_bytes += server.answer(&request).map_or(0, |p| p.len());
            let source = sources[n as usize % sources.len()];
            let guarded = server.answer_from(&request, source, n * 1_000_000);
            answered_bytes += guarded.map_or(0, |p| p.len());
        }
    });
    assert!(answered_bytes > 1_000 * 1_300);
    assert_eq!(allocations, 0);
}
