//! The daemon writes state snapshots (`[snapshot] every_inputs`) next to its journal, off the
//! engine thread; `bourse replay --from-snapshot` of its journal prints the full replay's
//! digests (the writer thread's stream digests included), across a restart.

mod common;

use bourse::client::OuchClient;
use bourse::types::{Alpha, Firm, Price, Shares};
use bourse::wire::ouch::{EnterOrder, Inbound};
use common::{TIMEOUT, Venue, bourse, config_text};
use std::path::{Path, PathBuf};

fn enter(token: &str, side: u8, shares: u32, price: u32) -> Inbound {
    Inbound::Enter(EnterOrder {
        token: Alpha::from_str_padded(token).unwrap(),
        side,
        shares: Shares(shares),
        stock: Alpha::from_str_padded("AAPL").unwrap(),
        price: Price(price),
        tif: 99_999,
        firm: Firm::SPACES,
        display: b'Y',
        capacity: b'A',
        intermarket_sweep: b'N',
        min_qty: Shares(0),
        cross_type: b'N',
        customer_type: b' ',
    })
}

/// The trading day's directory under `journal.dir` (the only one).
fn day_dir(journal: &Path) -> PathBuf {
    let mut days: Vec<PathBuf> = std::fs::read_dir(journal)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_dir())
        .collect();
    assert_eq!(days.len(), 1, "{days:?}");
    days.pop().unwrap()
}

/// `bourse replay` output without its timing and snapshot lines.
fn digests(journal: &Path, from_snapshot: bool) -> (Vec<String>, String) {
    let mut args = vec!["replay", "--journal", journal.to_str().unwrap()];
    if from_snapshot {
        args.push("--from-snapshot");
    }
    let (ok, out) = bourse(&args);
    assert!(ok, "{out}");
    let lines = out
        .lines()
        .filter(|l| {
            !l.starts_with("replayed ")
                && !l.starts_with("from the snapshot")
                && !l.contains("snapshot")
        })
        .map(str::to_string)
        .collect();
    (lines, out)
}

/// Send `count` orders from alice and bob that trade with each other; wait for each reply.
fn trade(venue: &Venue, prefix: &str, count: u32) {
    let mut alice =
        OuchClient::login(venue.gateway, "ALICE", "alicepw", "", 0, TIMEOUT).expect("login");
    let mut bob = OuchClient::login(venue.gateway, "BOB", "bobpw", "", 0, TIMEOUT).expect("login");
    for i in 0..count {
        alice
            .send(&enter(
                &format!("{prefix}S{i}"),
                b'S',
                100,
                100_000 + (i % 3) * 100,
            ))
            .unwrap();
        alice.recv_messages(1, TIMEOUT).unwrap();
        bob.send(&enter(&format!("{prefix}B{i}"), b'B', 60, 100_100))
            .unwrap();
        bob.recv_messages(1, TIMEOUT).unwrap();
    }
}

#[test]
fn the_daemon_writes_snapshots_and_a_replay_from_them_equals_the_full_replay() {
    let dir = tempfile::tempdir().unwrap();
    let config = config_text(dir.path(), "[snapshot]\nevery_inputs = 7\nkeep = 2\n");
    let journal = dir.path().join("journal");
    let venue = Venue::start(dir.path(), &config);
    trade(&venue, "a", 20);
    assert!(venue.stop().success());
    let day = day_dir(&journal);
    let files = bourse::snapshot::list(&day);
    // After every 7th input (the newest two kept; how many inputs the daemon took before
    // the stop, and whether one was skipped while both buffers were being written, depend on
    // timing; the 7th input's always is written).
    assert!(!files.is_empty() && files.len() <= 2, "keep = 2: {files:?}");
    assert!(files.iter().all(|(seq, _)| seq % 7 == 0), "{files:?}");
    let (full, _) = digests(&journal, false);
    let (resumed, out) = digests(&journal, true);
    assert!(
        out.contains(&format!("from the snapshot after record {}", files[0].0)),
        "{out}"
    );
    assert_eq!(resumed, full);

    // Restart (a full replay until the stores are file-backed), trade on, replay again.
    let venue = Venue::start(dir.path(), &config);
    trade(&venue, "b", 10);
    assert!(venue.stop().success());
    // The same points after the restart: counted from the journal's start, not the restart.
    let newest = bourse::snapshot::list(&day);
    assert!(newest.iter().all(|(seq, _)| seq % 7 == 0), "{newest:?}");
    assert!(newest[0].0 > files[0].0, "{newest:?}");
    let files = newest;
    let (full, _) = digests(&journal, false);
    let (resumed, out) = digests(&journal, true);
    assert!(
        out.contains(&format!("from the snapshot after record {}", files[0].0)),
        "{out}"
    );
    assert_eq!(resumed, full);
}
