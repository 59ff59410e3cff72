//! End-to-end: trading days. The real daemon over real sockets, with its clock moved by the
//! debug-build test hook `BOURSE_TEST_CLOCK_OFFSET_S` so that a test can reach "tomorrow".

mod common;

use bourse::client::OuchClient;
use bourse::daemon::admin::Request;
use bourse::types::OrderRef;
use bourse::wire::moldudp64::PacketKind;
use bourse::wire::ouch::{Inbound, Outbound};
use common::{Standby, TIMEOUT, Venue, config_full, config_text, unique_group};
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

const DAY_S: i64 = 86_400;

fn enter(token: &str, side: u8, shares: u32, price: u32) -> Inbound {
    common::day_order(token, side, shares, "AAPL", price)
}

fn kinds(messages: &[(u64, Outbound)]) -> String {
    messages.iter().map(|(_, m)| m.kind() as char).collect()
}

/// A clock offset that puts the daemon's "now" near noon UTC of today + `days`, so that a
/// test running across midnight still sees the dates it expects.
fn noon_offset_s(days: i64) -> i64 {
    let now_s = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    DAY_S / 2 - now_s.rem_euclid(DAY_S) + days * DAY_S
}

/// `YYYY-MM-DD` the daemon sees with `offset_s`.
fn date_with(offset_s: i64) -> String {
    let now_ns = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as i64;
    bourse::days::date_of((now_ns + offset_s * 1_000_000_000) as u64)
}

fn start(dir: &Path, offset_s: i64) -> Venue {
    let offset = offset_s.to_string();
    Venue::start_with_env(
        dir,
        &config_text(dir, ""),
        &[("BOURSE_TEST_CLOCK_OFFSET_S", &offset)],
    )
}

fn day_dirs(root: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(root)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

/// `bourse replay --journal DIR`: (success, stdout, stderr).
fn replay(dir: &Path) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_bourse"))
        .args(["replay", "--journal"])
        .arg(dir)
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Replay's digest lines (everything after its timing line).
fn digests(stdout: &str) -> Vec<String> {
    stdout.lines().skip(1).map(str::to_string).collect()
}

fn order_ref(message: &Outbound) -> OrderRef {
    match message {
        Outbound::Accepted(a) => a.order_ref,
        other => panic!("expected Accepted, got {other:?}"),
    }
}

/// The MoldUDP64 packets `venue`'s feed sends within `listen`: (kind, sequence number).
fn feed_packets_for(venue: &Venue, listen: Duration) -> Vec<(PacketKind, u64)> {
    use bourse::marketdata::receiver::{FeedReceiver, RecvError};
    let mut feed = FeedReceiver::join(
        venue.feed,
        std::net::Ipv4Addr::LOCALHOST,
        Duration::from_millis(100),
    )
    .unwrap();
    let deadline = Instant::now() + listen;
    let mut seen = Vec::new();
    while Instant::now() < deadline {
        match feed.recv() {
            Ok(r) => seen.push((r.packet.kind(), r.packet.header.sequence)),
            Err(RecvError::Timeout) => {}
            Err(e) => panic!("feed receive: {e:?}"),
        }
    }
    seen
}

#[test]
fn end_of_day_then_a_restart_on_the_same_date_stays_ended() {
    let dir = tempfile::tempdir().unwrap();
    let offset = noon_offset_s(0);
    let venue = start(dir.path(), offset);
    let mut alice = OuchClient::login(venue.gateway, "ALICE", "alicepw", "", 1, TIMEOUT).unwrap();
    alice.send(&enter("B1", b'B', 100, 1_000_000)).unwrap();
    assert_eq!(kinds(&alice.recv_messages(2, TIMEOUT).unwrap()), "SA");
    assert!(venue.ask_admin(&Request::EndOfDay).starts_with("ok"));
    // Canceled E for the resting order, then System Event E.
    assert_eq!(kinds(&alice.recv_messages(2, TIMEOUT).unwrap()), "CS");
    drop(alice);
    assert!(venue.stop().success());

    let venue = start(dir.path(), offset);
    // The restarted feed says the session has ended (MoldUDP64 End of Session, PROTOCOLS.md
    // 3.1: instead of heartbeats), not that an ended day is live: it used to send heartbeats
    // until some new input was released. Next is 13: 7 start-of-day messages, B1's `A`, its
    // `D` at end of day, then `M`, `E`, `C`.
    let kinds_seen = feed_packets_for(&venue, Duration::from_millis(1_300));
    assert!(!kinds_seen.is_empty(), "the restarted feed sends nothing");
    assert!(
        kinds_seen
            .iter()
            .all(|&(kind, seq)| kind == PacketKind::EndOfSession && seq == 13),
        "packets after the restart (kind, sequence): {kinds_seen:?}"
    );
    let mut alice = OuchClient::login(venue.gateway, "ALICE", "alicepw", "", 0, TIMEOUT).unwrap();
    assert_eq!(alice.next_seq, 5, "the same day's stream continues");
    alice.send(&enter("B2", b'B', 100, 1_000_000)).unwrap();
    let reply = alice.recv_messages(1, TIMEOUT).unwrap();
    match reply[0].1 {
        Outbound::Rejected(r) => assert_eq!(r.reason, b'C', "market closed"),
        other => panic!("expected Rejected C, got {other:?}"),
    }
    // A Replace of the order canceled at the close gets its reject too (DESIGN.md 4), not
    // outcome 1's silence.
    alice
        .send(&Inbound::Replace(bourse::wire::ouch::ReplaceOrder {
            existing: bourse::types::Alpha::from_str_padded("B1").unwrap(),
            replacement: bourse::types::Alpha::from_str_padded("B3").unwrap(),
            shares: bourse::types::Shares(200),
            price: bourse::types::Price(1_000_000),
            tif: 99_999,
            display: b'Y',
            intermarket_sweep: b'N',
            min_qty: bourse::types::Shares(0),
        }))
        .unwrap();
    let reply = alice.recv_messages(1, TIMEOUT).unwrap();
    match &reply[..] {
        [(_, Outbound::Rejected(r))] => {
            assert_eq!((r.token.trimmed().as_ref(), r.reason), ("B3", b'C'))
        }
        other => panic!("expected Rejected C for B3, got {other:?}"),
    }
    let status = venue.ask_admin(&Request::Status);
    assert!(status.contains("seq=5 "), "{status}");
    drop(alice);
    assert!(venue.stop().success());
    let root = dir.path().join("journal");
    assert_eq!(day_dirs(&root), [date_with(offset)]);
}

#[test]
fn a_new_date_after_an_ended_day_opens_a_new_day_and_the_old_one_is_kept() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("journal");
    let (today, tomorrow) = (noon_offset_s(0), noon_offset_s(1));
    let venue = start(dir.path(), today);
    let mut alice = OuchClient::login(venue.gateway, "ALICE", "alicepw", "", 1, TIMEOUT).unwrap();
    alice.send(&enter("B1", b'B', 100, 1_000_000)).unwrap();
    alice.send(&enter("B2", b'B', 100, 1_010_000)).unwrap();
    let day1 = alice.recv_messages(3, TIMEOUT).unwrap();
    assert_eq!(kinds(&day1), "SAA");
    assert_eq!(order_ref(&day1[2].1), OrderRef(2));
    assert!(venue.ask_admin(&Request::EndOfDay).starts_with("ok"));
    assert_eq!(kinds(&alice.recv_messages(3, TIMEOUT).unwrap()), "CCS");
    drop(alice);
    assert!(venue.stop().success());
    let day1_dir = root.join(date_with(today));
    let (ok, before, err) = replay(&day1_dir);
    assert!(ok, "{err}");

    // The next date: a new day, numbered from 1 (journal, order references, each account's
    // OUCH stream), with yesterday's tokens free again.
    let venue = start(dir.path(), tomorrow);
    let mut alice = OuchClient::login(venue.gateway, "ALICE", "alicepw", "", 1, TIMEOUT).unwrap();
    alice.send(&enter("B1", b'B', 100, 1_000_000)).unwrap();
    let day2 = alice.recv_messages(2, TIMEOUT).unwrap();
    assert_eq!(kinds(&day2), "SA", "start of day again, then the accept");
    assert_eq!(day2[0].0, 1, "the OUCH stream starts again at 1");
    assert_eq!(order_ref(&day2[1].1), OrderRef(1));
    let status = venue.ask_admin(&Request::Status);
    assert!(status.contains("seq=2 "), "{status}");
    drop(alice);
    assert!(venue.stop().success());

    // Both days are on disk; the old one replays exactly as before; the root replays the
    // latest and says so.
    let day2_dir = root.join(date_with(tomorrow));
    assert_eq!(day_dirs(&root), [date_with(today), date_with(tomorrow)]);
    let (ok, after, err) = replay(&day1_dir);
    assert!(ok, "{err}");
    assert_eq!(digests(&after), digests(&before));
    assert!(after.contains("inputs 4 last_seq 4"), "{after}");
    let (ok, latest, note) = replay(&root);
    assert!(ok, "{note}");
    assert!(
        note.contains(&format!("reading the latest, {}", day2_dir.display())),
        "{note}"
    );
    assert!(latest.contains("inputs 2 last_seq 2"), "{latest}");
    let (_, day2_out, _) = replay(&day2_dir);
    assert_eq!(digests(&day2_out), digests(&latest));
    // The admin secret is the venue's, beside journal.dir, not per day.
    assert!(dir.path().join("journal.admin-secret").exists());
    // Each day has its own message stores beside its journal; yesterday's are kept.
    assert_eq!(alice_store_messages(&day1_dir), 6, "SAA then CCS");
    assert_eq!(alice_store_messages(&day2_dir), 2, "SA");
}

/// Messages in ALICE's (the first account's) OUCH store of the day in `day_dir`.
fn alice_store_messages(day_dir: &Path) -> u64 {
    let path = bourse::stream::store_dir(day_dir).join("ouch-00000.store");
    let caps = bourse::limits::ouch_store(3);
    bourse::stream::StreamWriter::open(&path, caps).unwrap().1
}

/// Replay digests of the journal (or latest day) under `path`, if it replays.
fn digest_lines(path: &Path) -> Option<Vec<String>> {
    bourse::replay::replay(path, None, |_| {})
        .ok()
        .map(|r| r.digest_lines())
}

/// Wait until the standby's journal under `standby` replays to `want`.
fn await_digests(standby: &Path, want: &[String]) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while digest_lines(standby).as_deref() != Some(want) {
        assert!(
            Instant::now() < deadline,
            "the standby did not catch up: {:?} vs {want:?}",
            digest_lines(standby)
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn a_standby_follows_the_primary_into_its_next_day_and_keeps_the_last_one() {
    let primary_dir = tempfile::tempdir().unwrap();
    let standby_dir = tempfile::tempdir().unwrap();
    let group = unique_group();
    let (today, tomorrow) = (noon_offset_s(0), noon_offset_s(1));
    let primary_text = config_full(primary_dir.path(), "", group, "heartbeat_ms = 50");
    let standby_text = |venue: &Venue| {
        config_full(
            standby_dir.path(),
            "",
            group,
            &format!(
                "primary = \"{}\"\nprimary_admin = \"{}\"\ntakeover_ms = 500\nheartbeat_ms = 50",
                venue.replication, venue.admin
            ),
        )
    };
    let env = |offset: &str| [("BOURSE_TEST_CLOCK_OFFSET_S", offset.to_string())];
    let start_primary = |offset: i64| {
        let offset = offset.to_string();
        let env = env(&offset);
        let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
        Venue::start_with_env(primary_dir.path(), &primary_text, &env)
    };
    let standby_root = standby_dir.path().join("journal");

    // Day 1, followed by the standby, then ended.
    let venue = start_primary(today);
    let standby = Standby::start(standby_dir.path(), &standby_text(&venue));
    let mut alice = OuchClient::login(venue.gateway, "ALICE", "alicepw", "", 1, TIMEOUT).unwrap();
    alice.send(&enter("B1", b'B', 100, 1_000_000)).unwrap();
    alice.send(&enter("B2", b'B', 100, 1_010_000)).unwrap();
    assert_eq!(kinds(&alice.recv_messages(3, TIMEOUT).unwrap()), "SAA");
    assert!(venue.ask_admin(&Request::EndOfDay).starts_with("ok"));
    let day1 = digest_lines(&venue.journal).unwrap();
    await_digests(&standby_root, &day1);
    drop(standby);
    drop(alice);
    assert!(venue.stop().success());

    // Day 2: the standby's latest journal is day 1 (ended); it follows day 2 from its start
    // in a new directory and leaves day 1 as it was.
    let venue = start_primary(tomorrow);
    let standby = Standby::start(standby_dir.path(), &standby_text(&venue));
    let mut alice = OuchClient::login(venue.gateway, "ALICE", "alicepw", "", 1, TIMEOUT).unwrap();
    alice.send(&enter("B1", b'B', 100, 1_000_000)).unwrap();
    assert_eq!(kinds(&alice.recv_messages(2, TIMEOUT).unwrap()), "SA");
    let day2 = digest_lines(&venue.journal).unwrap();
    assert_ne!(day1, day2);
    await_digests(&standby_root, &day2);
    drop(standby);
    drop(alice);
    assert!(venue.stop().success());
    assert_eq!(
        day_dirs(&standby_root),
        [date_with(today), date_with(tomorrow)]
    );
    assert_eq!(
        digest_lines(&standby_root.join(date_with(today))).as_deref(),
        Some(&day1[..]),
        "the standby's day 1 is kept"
    );
}
