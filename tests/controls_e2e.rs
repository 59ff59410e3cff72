//! End-to-end: the venue controls of DESIGN.md 4a on the real daemon over real sockets — the
//! kill switch through `bourse admin --config FILE cancel-all | block | unblock`, cancel on
//! disconnect when a broker's TCP connection drops, and the `[[accounts]]` keys reaching the
//! engine. OUCH replies are checked as brokers receive them, ITCH on the multicast feed.

mod common;

use bourse::client::{OuchClient, Received};
use bourse::daemon::admin::Request;
use bourse::types::{Alpha, Shares, Token};
use bourse::wire::itch::{self, Body};
use bourse::wire::ouch::{CancelOrder, Inbound, Outbound};
use common::{FeedCollector, TIMEOUT, Venue, bourse, config_text};

use std::time::Duration;

/// Accounts with controls, ahead of the common ALICE, BOB and CAROL (no controls).
const CONTROLLED: &str = r#"
[[accounts]]
username = "DROPPY"
password = "droppypw"
firm = "FRMD"
cancel_on_disconnect = true
[[accounts]]
username = "LIMITD"
password = "limitdpw"
firm = "FRML"
stp = "cancel-newest"
max_open_orders = 2
max_day_shares = 150
[[accounts]]
username = "OLDEST"
password = "oldestpw"
firm = "FRMO"
stp = "cancel-oldest"
"#;

fn enter_tif(token: &str, side: u8, shares: u32, symbol: &str, price: u32, tif: u32) -> Inbound {
    common::order(token, side, shares, symbol, price, tif, b'Y')
}

fn enter(token: &str, side: u8, shares: u32, symbol: &str, price: u32) -> Inbound {
    enter_tif(token, side, shares, symbol, price, 99_999)
}

fn replace(existing: &str, replacement: &str, shares: u32, price: u32) -> Inbound {
    common::replace(existing, replacement, shares, price, b'Y')
}

fn cancel(token: &str, shares: u32) -> Inbound {
    Inbound::Cancel(CancelOrder {
        token: Alpha::from_str_padded(token).unwrap(),
        shares: Shares(shares),
    })
}

/// The layouts every test runs in: the compact one, and two shard threads (AAPL and MSFT on
/// different shards: the kill switch, disconnects and account limits span both).
const COMPACT: &str = "";
const SHARDED: &str = "[engine]\nlayout = \"sharded\"\nshards = 2\nwait = \"park\"\n";

/// The common test config with `layout` and CONTROLLED's accounts (`bourse admin` gets
/// [`Venue::admin_config`], which names the admin port the daemon bound).
fn config(dir: &std::path::Path, layout: &str) -> String {
    config_text(dir, &format!("{layout}{CONTROLLED}"))
}

/// Log in, retrying while the gateway still holds the account's previous connection (it
/// answers Login Rejected `S` until it has seen that socket close).
fn login(venue: &Venue, user: &str, password: &str, seq: u64) -> OuchClient {
    for _ in 0..100 {
        match OuchClient::login(venue.gateway, user, password, "", seq, TIMEOUT) {
            Ok(c) => return c,
            Err(bourse::client::LoginError::Rejected(b'S')) => {
                std::thread::sleep(Duration::from_millis(20))
            }
            Err(e) => panic!("login {user}: {e}"),
        }
    }
    panic!("{user} could not log in again within 2 s");
}

fn token(t: &Token) -> String {
    String::from_utf8_lossy(&t.0).trim_end().to_string()
}

/// `S`, `A tok state ref`, `C tok shares reason`, `E tok shares`, `J tok reason`.
fn brief(messages: &[(u64, Outbound)]) -> Vec<String> {
    messages
        .iter()
        .map(|(_, m)| match m {
            Outbound::SystemEvent(e) => format!("S{}", e.event as char),
            Outbound::Accepted(a) => format!(
                "A {} {} r{}",
                token(&a.token),
                a.order_state as char,
                a.order_ref.0
            ),
            Outbound::Canceled(c) => format!(
                "C {} {} {}",
                token(&c.token),
                c.decrement.0,
                c.reason as char
            ),
            Outbound::Executed(e) => format!("E {} {}", token(&e.token), e.shares.0),
            Outbound::Replaced(u) => format!(
                "U {} {} {} r{}",
                token(&u.token),
                u.shares.0,
                u.order_state as char,
                u.order_ref.0
            ),
            Outbound::Rejected(j) => format!("J {} {}", token(&j.token), j.reason as char),
            other => format!("{other:?}"),
        })
        .collect()
}

/// Exactly `want.len()` messages, then nothing more for a moment.
fn expect(client: &mut OuchClient, want: &[&str]) {
    let got = brief(&client.recv_messages(want.len(), TIMEOUT).unwrap());
    assert_eq!(got, want);
    let more = client.recv_messages(1, Duration::from_millis(150)).unwrap();
    assert!(more.is_empty(), "unexpected {:?}", brief(&more));
}

/// `bourse admin --config FILE ARGS...`: (exit success, first stdout line); stderr is shown
/// when the command fails.
fn admin(venue: &Venue, args: &[&str]) -> (bool, String) {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_bourse"))
        .args(["admin", "--config", venue.admin_config().to_str().unwrap()])
        .args(args)
        .output()
        .unwrap();
    if !out.status.success() {
        eprintln!(
            "bourse admin {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let stdout = String::from_utf8_lossy(&out.stdout);
    (
        out.status.success(),
        stdout.lines().next().unwrap_or("").to_string(),
    )
}

/// Start collecting the feed on a thread; the day's messages once End of Session came.
fn collect_feed(venue: &Venue) -> std::thread::JoinHandle<FeedCollector> {
    let mut collector = FeedCollector::join(venue);
    std::thread::spawn(move || {
        collector.run_until_end(Duration::from_secs(20));
        collector
    })
}

/// The order-level ITCH messages (add, cancel, delete, execute), briefly: `A r1 100`,
/// `X r1 50`, `D r1`, `E r1 100`.
fn order_messages(feed: &FeedCollector) -> Vec<String> {
    feed.messages
        .iter()
        .filter_map(|bytes| match itch::Message::decode(bytes).unwrap().body {
            Body::AddOrder {
                order_ref, shares, ..
            } => Some(format!("A r{} {}", order_ref.0, shares.0)),
            Body::OrderCancel { order_ref, shares } => {
                Some(format!("X r{} {}", order_ref.0, shares.0))
            }
            Body::OrderDelete { order_ref } => Some(format!("D r{}", order_ref.0)),
            Body::OrderReplace {
                old_ref,
                new_ref,
                shares,
                ..
            } => Some(format!("U r{} r{} {}", old_ref.0, new_ref.0, shares.0)),
            Body::OrderExecuted {
                order_ref, shares, ..
            } => Some(format!("E r{} {}", order_ref.0, shares.0)),
            _ => None,
        })
        .collect()
}

#[test]
fn kill_switch_and_block_through_the_admin_command() {
    kill_switch_and_block_through_the_admin_command_in(COMPACT);
}

#[test]
fn kill_switch_and_block_through_the_admin_command_sharded() {
    kill_switch_and_block_through_the_admin_command_in(SHARDED);
}

fn kill_switch_and_block_through_the_admin_command_in(layout: &str) {
    let dir = tempfile::tempdir().unwrap();
    let venue = Venue::start(dir.path(), &config(dir.path(), layout));
    let feed = collect_feed(&venue);
    let mut alice = login(&venue, "ALICE", "alicepw", 1);
    let mut bob = login(&venue, "BOB", "bobpw", 1);
    alice
        .send(&enter("A1", b'B', 100, "AAPL", 1_000_000))
        .unwrap(); // r1
    alice
        .send(&enter("A2", b'S', 100, "AAPL", 1_010_000))
        .unwrap(); // r2
    alice
        .send(&enter("A3", b'B', 100, "MSFT", 500_000))
        .unwrap(); // r3
    alice
        .send(&enter("A4", b'B', 100, "AAPL", 1_000_100))
        .unwrap(); // r4: best bid
    expect(
        &mut alice,
        &["SS", "A A1 L r1", "A A2 L r2", "A A3 L r3", "A A4 L r4"],
    );
    bob.send(&enter("B1", b'B', 100, "AAPL", 1_000_000))
        .unwrap(); // r5
    expect(&mut bob, &["SS", "A B1 L r5"]);

    // One symbol: Canceled S for ALICE's MSFT order only.
    assert_eq!(
        admin(&venue, &["cancel-all", "ALICE", "MSFT"]),
        (true, "ok cancel-all ALICE MSFT".into())
    );
    expect(&mut alice, &["C A3 100 S"]);

    // Blocked: Enter and Replace rejected `a`, cancels still work, nothing canceled by it.
    assert_eq!(
        admin(&venue, &["block", "alice"]),
        (true, "ok block alice".into())
    );
    alice
        .send(&enter("A5", b'B', 100, "AAPL", 1_000_000))
        .unwrap();
    expect(&mut alice, &["J A5 a"]);
    alice.send(&cancel("A2", 50)).unwrap();
    expect(&mut alice, &["C A2 50 U"]);
    let (ok, out) = admin(&venue, &["block", "ALICE"]);
    assert!(!ok && out.starts_with("error"), "blocking twice: {out}");

    // All symbols: bids then asks, each in priority order (A4 has the better price).
    assert_eq!(
        admin(&venue, &["cancel-all", "ALICE"]),
        (true, "ok cancel-all ALICE".into())
    );
    expect(&mut alice, &["C A4 100 S", "C A1 100 S", "C A2 50 S"]);
    let (ok, out) = admin(&venue, &["cancel-all", "NOBODY"]);
    assert!(!ok && out.starts_with("error unknown account"), "{out}");
    let (ok, out) = admin(&venue, &["cancel-all", "ALICE", "GOOG"]);
    assert!(!ok && out.starts_with("error unknown symbol"), "{out}");

    assert_eq!(
        admin(&venue, &["unblock", "ALICE"]),
        (true, "ok unblock ALICE".into())
    );
    let (ok, out) = admin(&venue, &["unblock", "ALICE"]);
    assert!(!ok && out.starts_with("error"), "unblocking twice: {out}");
    alice
        .send(&enter("A6", b'S', 100, "AAPL", 1_020_000))
        .unwrap(); // r6
    expect(&mut alice, &["A A6 L r6"]);
    // BOB's order at ALICE's price was never touched: it still trades.
    bob.send(&enter_tif("B2", b'S', 100, "AAPL", 1_000_000, 0))
        .unwrap(); // r7
    expect(&mut bob, &["A B2 L r7", "E B2 100", "E B1 100"]);

    // Blocked after the close: `C` first.
    assert_eq!(
        admin(&venue, &["block", "BOB"]),
        (true, "ok block BOB".into())
    );
    assert_eq!(venue.ask_admin(&Request::EndOfDay), "ok end-of-day");
    expect(&mut alice, &["C A6 100 E", "SE"]);
    expect(&mut bob, &["SE"]);
    bob.send(&enter("B3", b'B', 100, "AAPL", 1_000_000))
        .unwrap();
    expect(&mut bob, &["J B3 C"]);
    let (ok, out) = admin(&venue, &["cancel-all", "ALICE"]);
    assert!(!ok && out.starts_with("error"), "after the close: {out}");

    let feed = feed.join().unwrap();
    assert!(feed.ended, "End of Session on the feed");
    assert_eq!(
        order_messages(&feed),
        [
            "A r1 100", "A r2 100", "A r3 100", "A r4 100", "A r5 100", // entered
            "D r3",     // cancel-all ALICE MSFT
            "X r2 50",  // ALICE's own cancel while blocked
            "D r4", "D r1", "D r2", // cancel-all ALICE: bids then asks
            "A r6 100", "E r5 100", // after unblock; BOB's trade
            "D r6",     // end of day
        ]
    );
    assert!(venue.stop().success());
}

#[test]
fn a_dropped_connection_cancels_only_where_configured() {
    a_dropped_connection_cancels_only_where_configured_in(COMPACT);
}

#[test]
fn a_dropped_connection_cancels_only_where_configured_sharded() {
    a_dropped_connection_cancels_only_where_configured_in(SHARDED);
}

fn a_dropped_connection_cancels_only_where_configured_in(layout: &str) {
    let dir = tempfile::tempdir().unwrap();
    let venue = Venue::start(dir.path(), &config(dir.path(), layout));
    let feed = collect_feed(&venue);
    let mut droppy = login(&venue, "DROPPY", "droppypw", 1);
    let mut alice = login(&venue, "ALICE", "alicepw", 1);
    droppy
        .send(&enter("D1", b'S', 100, "MSFT", 510_000))
        .unwrap(); // r1
    droppy
        .send(&enter("D2", b'B', 100, "AAPL", 990_000))
        .unwrap(); // r2
    expect(&mut droppy, &["SS", "A D1 L r1", "A D2 L r2"]);
    alice
        .send(&enter("K1", b'B', 100, "AAPL", 980_000))
        .unwrap(); // r3
    expect(&mut alice, &["SS", "A K1 L r3"]);

    // A clean Logout Request cancels nothing. The re-login's own Enter is a sync point: a
    // disconnect input would be journaled before anything the new login sends.
    droppy.logout().unwrap();
    assert!(matches!(
        droppy.recv(TIMEOUT).unwrap(),
        Some(Received::Closed)
    ));
    let mut droppy = login(&venue, "DROPPY", "droppypw", 4);
    droppy
        .send(&enter("D3", b'B', 100, "AAPL", 970_000))
        .unwrap(); // r4
    expect(&mut droppy, &["A D3 L r4"]);

    // Connections that drop without Logout: DROPPY's orders go (Canceled Z, bids then asks
    // in config order of symbols: AAPL before MSFT), ALICE's stay.
    drop(droppy);
    drop(alice);
    let mut droppy = login(&venue, "DROPPY", "droppypw", 1);
    expect(
        &mut droppy,
        &[
            "SS",
            "A D1 L r1",
            "A D2 L r2",
            "A D3 L r4",
            "C D2 100 Z",
            "C D3 100 Z",
            "C D1 100 Z",
        ],
    );
    let mut alice = login(&venue, "ALICE", "alicepw", 1);
    expect(&mut alice, &["SS", "A K1 L r3"]);

    // The re-login brings nothing back: a sell that would have met D2 at 99.00 meets ALICE's
    // bid at 98.00, and a buy at D1's price finds nothing (dead on arrival).
    let mut bob = login(&venue, "BOB", "bobpw", 1);
    bob.send(&enter_tif("B1", b'S', 100, "AAPL", 980_000, 0))
        .unwrap(); // r5
    expect(&mut bob, &["SS", "A B1 L r5", "E B1 100"]);
    expect(&mut alice, &["E K1 100"]);
    bob.send(&enter_tif("B2", b'B', 100, "MSFT", 510_000, 0))
        .unwrap(); // r6
    expect(&mut bob, &["A B2 D r6"]);
    // Canceling a dropped order does nothing; the account trades on.
    droppy.send(&cancel("D1", 0)).unwrap();
    droppy
        .send(&enter("D4", b'B', 100, "AAPL", 960_000))
        .unwrap(); // r7
    expect(&mut droppy, &["A D4 L r7"]);

    // An account without cancel_on_disconnect keeps its orders when it drops.
    alice
        .send(&enter("K2", b'B', 100, "AAPL", 950_000))
        .unwrap(); // r8
    expect(&mut alice, &["A K2 L r8"]);
    drop(alice);
    let mut alice = login(&venue, "ALICE", "alicepw", 4);
    alice
        .send(&enter("K3", b'B', 100, "AAPL", 940_000))
        .unwrap(); // r9
    expect(&mut alice, &["A K2 L r8", "A K3 L r9"]);

    assert_eq!(venue.ask_admin(&Request::EndOfDay), "ok end-of-day");
    expect(&mut alice, &["C K2 100 E", "C K3 100 E", "SE"]);
    let feed = feed.join().unwrap();
    assert!(feed.ended, "End of Session on the feed");
    assert_eq!(
        order_messages(&feed),
        [
            "A r1 100", "A r2 100", "A r3 100", "A r4 100", // entered
            "D r2", "D r4", "D r1",     // DROPPY's connection dropped
            "E r3 100", // BOB meets ALICE
            "A r7 100", "A r8 100", "A r9 100", // later orders
            "D r7", "D r8", "D r9", // end of day (AAPL bids in priority order)
        ]
    );
    // Replay of the journal agrees with what the brokers saw (the disconnects are inputs).
    assert!(venue.stop().success());
    let (ok, out) = bourse(&[
        "replay",
        "--journal",
        dir.path().join("journal").to_str().unwrap(),
    ]);
    assert!(ok, "{out}");
    assert!(out.contains("order_refs 9 matches 1"), "{out}");
}

/// A broker's order and the end of its stream arriving together (the order, then FIN right
/// behind it; the broker half-closes and keeps reading, so no reset follows to raise another
/// event): the gateway reads the stream to its end in the same turn, so cancel on disconnect
/// takes the order at once. A read that stopped at the order's bytes (the short-read shortcut
/// taken when the event also said the peer closed) would leave the end-of-file unread with no
/// further edge-triggered event to announce it: the account would stay logged in until its
/// heartbeat timeout and the re-login below would be refused.
#[test]
fn an_order_with_the_close_right_behind_it_is_canceled_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let venue = Venue::start(dir.path(), &config(dir.path(), COMPACT));
    let mut left: Vec<String> = vec!["SS".into()];
    let mut next_seq = 1;
    // Held open (reading side) until the end: a closed socket would answer the venue's
    // next write with a reset, an event of its own.
    let mut half_closed = Vec::new();
    for round in 1..=8u32 {
        let mut droppy = login(&venue, "DROPPY", "droppypw", next_seq);
        let want: Vec<&str> = left.iter().map(String::as_str).collect();
        expect(&mut droppy, &want);
        next_seq += left.len() as u64;
        let token = format!("Q{round}");
        droppy
            .send(&enter(&token, b'B', 100, "AAPL", 990_000))
            .unwrap();
        let stream = droppy.try_clone_stream().unwrap();
        stream.shutdown(std::net::Shutdown::Write).unwrap();
        half_closed.push(droppy);
        left = vec![format!("A {token} L r{round}"), format!("C {token} 100 Z")];
    }
    let mut droppy = login(&venue, "DROPPY", "droppypw", next_seq);
    let want: Vec<&str> = left.iter().map(String::as_str).collect();
    expect(&mut droppy, &want);
    assert!(venue.stop().success());
}

#[test]
fn a_replacement_cleared_by_cancel_oldest_rests_as_an_itch_replace() {
    a_replacement_cleared_by_cancel_oldest_rests_as_an_itch_replace_in(COMPACT);
}

#[test]
fn a_replacement_cleared_by_cancel_oldest_rests_as_an_itch_replace_sharded() {
    a_replacement_cleared_by_cancel_oldest_rests_as_an_itch_replace_in(SHARDED);
}

/// DESIGN.md 4: ITCH `U` when "the replacement rests without executing"; cancel-oldest
/// removes the account's own ask it crosses (Canceled `Q`, ITCH `D`), and it rests: the `D`,
/// then the `U` (never `D` old + `A` new), on the real multicast feed.
fn a_replacement_cleared_by_cancel_oldest_rests_as_an_itch_replace_in(layout: &str) {
    let dir = tempfile::tempdir().unwrap();
    let venue = Venue::start(dir.path(), &config(dir.path(), layout));
    let feed = collect_feed(&venue);
    let mut o = login(&venue, "OLDEST", "oldestpw", 1);
    o.send(&enter("S1", b'S', 100, "AAPL", 1_000_000)).unwrap();
    o.send(&enter("B1", b'B', 100, "AAPL", 990_000)).unwrap();
    o.send(&replace("B1", "B2", 100, 1_000_000)).unwrap();
    expect(
        &mut o,
        &[
            "SS",
            "A S1 L r1",
            "A B1 L r2",
            "U B2 100 L r3",
            "C S1 100 Q",
        ],
    );
    // It rests as r3: BOB's sell executes against it.
    let mut bob = login(&venue, "BOB", "bobpw", 1);
    bob.send(&enter("X1", b'S', 40, "AAPL", 1_000_000)).unwrap();
    expect(&mut bob, &["SS", "A X1 L r4", "E X1 40"]);
    expect(&mut o, &["E B2 40"]);
    let (ok, out) = admin(&venue, &["end-of-day"]);
    assert!(ok, "{out}");
    let feed = feed.join().unwrap();
    assert!(feed.ended, "End of Session on the feed");
    assert_eq!(
        order_messages(&feed),
        [
            "A r1 100",
            "A r2 100",
            "D r1",
            "U r2 r3 100",
            "E r3 40",
            "D r3"
        ]
    );
    assert!(venue.stop().success());
}

#[test]
fn account_controls_from_the_config_file_reach_the_engine() {
    account_controls_from_the_config_file_reach_the_engine_in(COMPACT);
}

#[test]
fn account_controls_from_the_config_file_reach_the_engine_sharded() {
    account_controls_from_the_config_file_reach_the_engine_in(SHARDED);
}

fn account_controls_from_the_config_file_reach_the_engine_in(layout: &str) {
    // LIMITD: stp = "cancel-newest", max_open_orders = 2, max_day_shares = 150.
    let dir = tempfile::tempdir().unwrap();
    let venue = Venue::start(dir.path(), &config(dir.path(), layout));
    let mut l = login(&venue, "LIMITD", "limitdpw", 1);
    l.send(&enter("L1", b'S', 100, "AAPL", 1_000_000)).unwrap();
    l.send(&enter("L2", b'B', 100, "MSFT", 500_000)).unwrap();
    l.send(&enter("L3", b'B', 100, "MSFT", 500_000)).unwrap();
    expect(&mut l, &["SS", "A L1 L r1", "A L2 L r2", "J L3 O"]);
    // The limit is checked before trading: an IOC counts as one more open order.
    l.send(&enter_tif("L4", b'B', 100, "AAPL", 1_000_000, 0))
        .unwrap();
    expect(&mut l, &["J L4 O"]);
    l.send(&cancel("L2", 0)).unwrap();
    expect(&mut l, &["C L2 100 U"]);
    // Its own IOC meets its own order: Canceled Q, no Executed.
    l.send(&enter_tif("L5", b'B', 100, "AAPL", 1_000_000, 0))
        .unwrap();
    expect(&mut l, &["A L5 L r3", "C L5 100 Q"]);
    // Day shares: 100 executed against BOB, then 51 more would pass 150.
    let mut bob = login(&venue, "BOB", "bobpw", 1);
    bob.send(&enter("B1", b'B', 100, "AAPL", 1_000_000))
        .unwrap();
    expect(&mut bob, &["SS", "A B1 L r4", "E B1 100"]);
    expect(&mut l, &["E L1 100"]);
    l.send(&enter("L6", b'B', 51, "MSFT", 500_000)).unwrap();
    l.send(&enter("L7", b'B', 50, "MSFT", 500_000)).unwrap();
    expect(&mut l, &["J L6 m", "A L7 L r5"]);
    assert!(venue.stop().success());
}

#[test]
fn bad_bytes_end_a_session_like_a_drop_and_a_refused_login_cancels_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let venue = Venue::start(dir.path(), &config(dir.path(), COMPACT));
    let mut droppy = login(&venue, "DROPPY", "droppypw", 1);
    droppy
        .send(&enter("D1", b'B', 100, "AAPL", 990_000))
        .unwrap(); // r1
    expect(&mut droppy, &["SS", "A D1 L r1"]);
    // A second connection for the account is refused (one connection per account), and a
    // bad password too: neither was the logged-in session, so nothing is canceled.
    for password in ["droppypw", "wrong"] {
        match OuchClient::login(venue.gateway, "DROPPY", password, "", 0, TIMEOUT) {
            Err(bourse::client::LoginError::Rejected(_)) => {}
            other => panic!(
                "expected a refused login, got {:?}",
                other.map(|c| c.next_seq)
            ),
        }
    }
    droppy
        .send(&enter("D2", b'B', 100, "AAPL", 980_000))
        .unwrap(); // r2
    expect(&mut droppy, &["A D2 L r2"]);
    // Bad bytes close the session (DESIGN.md 7): it ended other than by Logout Request.
    droppy.send_bytes(&[0, 3, b'U', b'Q', 0]).unwrap();
    let closed =
        (0..20).any(|_| matches!(droppy.recv(TIMEOUT), Ok(Some(Received::Closed)) | Err(_)));
    assert!(closed, "an unknown OUCH type closes the connection");
    let mut droppy = login(&venue, "DROPPY", "droppypw", 4);
    droppy
        .send(&enter("D3", b'B', 100, "AAPL", 970_000))
        .unwrap(); // r3
    expect(&mut droppy, &["C D1 100 Z", "C D2 100 Z", "A D3 L r3"]);
    assert!(venue.stop().success());
}
