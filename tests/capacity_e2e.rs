//! End-to-end: the batched gateway (issue 14 item 6) over real sockets, compact layout. A
//! burst larger than a connection's read buffer (64 KiB) and whose replies exceed its write
//! buffer (64 KiB) is sequenced and answered completely, in order — also to a client whose
//! socket takes bytes slowly and which stops reading for a while.

mod common;

use bourse::client::OuchClient;
use bourse::wire::ouch::{Inbound, Outbound};
use common::{TIMEOUT, Venue, config_text};
use std::time::Duration;

/// Enter Orders in one burst: ~150 KB of input, ~210 KB of Accepted.
const BURST: usize = 3_000;

fn enter(token: &str) -> Inbound {
    common::day_order(token, b'B', 100, "AAPL", 1_000_000)
}

fn burst(prefix: &str) -> Vec<u8> {
    let mut bytes = Vec::new();
    for n in 0..BURST {
        bytes.extend_from_slice(&OuchClient::frame(&enter(&format!("{prefix}{n}"))));
    }
    assert!(bytes.len() > 2 * (64 << 10), "larger than the read buffer");
    bytes
}

/// Every Enter of the burst is Accepted, in the order sent, under consecutive numbers.
fn assert_all_accepted_in_order(prefix: &str, replies: &[(u64, Outbound)]) {
    let accepted: Vec<(u64, String)> = replies
        .iter()
        .filter_map(|(seq, m)| match m {
            Outbound::Accepted(a) => Some((*seq, a.token.trimmed().into_owned())),
            _ => None,
        })
        .collect();
    assert_eq!(accepted.len(), BURST, "every order answered");
    for (n, (seq, token)) in accepted.iter().enumerate() {
        assert_eq!(token, &format!("{prefix}{n}"), "reply {n} out of order");
        assert_eq!(*seq, accepted[0].0 + n as u64, "numbers are consecutive");
    }
}

#[test]
fn a_burst_larger_than_both_buffers_is_answered_completely_and_in_order() {
    let dir = tempfile::tempdir().unwrap();
    let venue = Venue::start(dir.path(), &config_text(dir.path(), ""));
    let mut alice = OuchClient::login(venue.gateway, "ALICE", "alicepw", "", 1, TIMEOUT).unwrap();
    alice.send_bytes(&burst("A")).unwrap();
    let replies = alice
        .recv_messages(1 + BURST, Duration::from_secs(20))
        .unwrap();
    assert_all_accepted_in_order("A", &replies);
    assert!(venue.stop().success());
}

#[test]
fn a_slow_socket_that_stops_reading_still_gets_every_reply_in_order() {
    let dir = tempfile::tempdir().unwrap();
    let venue = Venue::start(dir.path(), &config_text(dir.path(), ""));
    let mut bob = OuchClient::login(venue.gateway, "BOB", "bobpw", "", 1, TIMEOUT).unwrap();
    // A small receive buffer: the venue's writes stop short and its write buffer fills.
    let socket = bob.try_clone_stream().unwrap();
    socket2::SockRef::from(&socket)
        .set_recv_buffer_size(4096)
        .unwrap();
    let bytes = burst("B");
    let writer = bob.try_clone_stream().unwrap();
    let sender = std::thread::spawn(move || {
        let mut w = writer;
        std::io::Write::write_all(&mut w, &bytes).unwrap();
    });
    // Not reading for a while: the replies wait in the venue (stream and write buffer).
    std::thread::sleep(Duration::from_millis(700));
    let replies = bob
        .recv_messages(1 + BURST, Duration::from_secs(20))
        .unwrap();
    sender.join().unwrap();
    assert_all_accepted_in_order("B", &replies);
    assert!(venue.stop().success());
}
