//! The daemon refuses to start on a journal whose acknowledged tail is damaged (a flipped bit
//! in the last, flushed record; the segment file deleted), naming the file and offset, and
//! starts only when the operator passes `--truncate-corrupt-tail`.

mod common;

use bourse::client::OuchClient;
use bourse::wire::ouch::{Inbound, Outbound};
use common::{TIMEOUT, Venue, config_text};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

fn enter(token: &str, shares: u32) -> Inbound {
    common::day_order(token, b'B', shares, "AAPL", 100_000)
}

/// Start a venue, have ALICE's orders acknowledged (so their records were flushed), stop it
/// cleanly. Returns the journal directory.
fn day_with_acknowledged_orders(dir: &Path, text: &str) -> PathBuf {
    let venue = Venue::start(dir, text);
    let mut alice =
        OuchClient::login(venue.gateway, "ALICE", "alicepw", "", 1, TIMEOUT).expect("login");
    for n in 0..3 {
        alice.send(&enter(&format!("D{n}"), 100 + n)).unwrap();
    }
    let replies = alice.recv_messages(4, TIMEOUT).unwrap();
    assert!(
        replies
            .iter()
            .filter(|(_, m)| matches!(m, Outbound::Accepted(_)))
            .count()
            == 3
    );
    // The trading day's journal under journal.dir.
    let (journal, _) = bourse::days::for_reading(&venue.journal).unwrap();
    assert!(venue.stop().success());
    journal
}

/// Byte offset of the last record of a one-segment journal (walking the length words).
fn last_record_offset(segment: &Path) -> u64 {
    let bytes = std::fs::read(segment).unwrap();
    let mut offset = 64usize;
    let mut last = None;
    for _ in 0..bytes.len() / 8 {
        let length = u32::from_le_bytes(bytes[offset..offset + 4].try_into().unwrap());
        if length == 0 || length == u32::MAX {
            break;
        }
        last = Some(offset);
        offset += (length as usize).next_multiple_of(8);
    }
    last.expect("a record") as u64
}

fn spawn_run(config: &Path, extra: &[&str]) -> Child {
    Command::new(env!("CARGO_BIN_EXE_bourse"))
        .arg("run")
        .arg("--config")
        .arg(config)
        .args(extra)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// `bourse run` (with extra arguments): its exit status and stderr if it exits within 10 s,
/// else the child (still running: it started).
fn run_bourse(config: &Path, extra: &[&str]) -> Result<(bool, String), Child> {
    let mut child = spawn_run(config, extra);
    match common::exited(&mut child, Duration::from_secs(10)) {
        Some((status, stderr)) => Ok((status.success(), stderr)),
        None => Err(child),
    }
}

fn expect_refusal(config: &Path, names: &[&str]) {
    match run_bourse(config, &[]) {
        Ok((success, stderr)) => {
            assert!(!success, "{stderr}");
            for name in names {
                assert!(stderr.contains(name), "{name:?} not in: {stderr}");
            }
            assert!(stderr.contains("--truncate-corrupt-tail"), "{stderr}");
        }
        Err(mut child) => {
            let _ = child.kill();
            let _ = child.wait();
            panic!("bourse started on a damaged journal");
        }
    }
}

/// With the flag the daemon starts (prints its listening line) on what is left.
fn start_with_flag(dir: &Path, config: &Path) -> Venue {
    let mut child = spawn_run(config, &["--truncate-corrupt-tail"]);
    // Drain the log so the daemon never blocks on a full pipe.
    let mut stderr = child.stderr.take().unwrap();
    std::thread::spawn(move || std::io::copy(&mut stderr, &mut std::io::sink()));
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert!(line.starts_with("listening"), "{line}");
    Venue::from_listening(child, &line, config.to_path_buf(), dir.join("journal"))
}

#[test]
fn flipped_bit_in_the_last_acknowledged_record_refuses_to_start() {
    let dir = tempfile::tempdir().unwrap();
    let text = config_text(dir.path(), "");
    let journal = day_with_acknowledged_orders(dir.path(), &text);
    let segment = journal.join("00000001.seg");
    let offset = last_record_offset(&segment);
    let mut bytes = std::fs::read(&segment).unwrap();
    bytes[offset as usize + 36] ^= 0x01;
    std::fs::write(&segment, &bytes).unwrap();
    let config = dir.path().join("bourse.toml");
    let offset_text = format!("byte offset {offset}");
    expect_refusal(&config, &[&segment.display().to_string(), &offset_text]);
    let before = bourse::journal::verify(&journal).expect_err("verify");
    assert!(before.to_string().contains(&offset_text), "{before}");

    let venue = start_with_flag(dir.path(), &config);
    // The damaged record and everything after it are gone; the venue trades on.
    let mut bob = OuchClient::login(venue.gateway, "BOB", "bobpw", "", 1, TIMEOUT).unwrap();
    bob.send(&enter("AFTER", 100)).unwrap();
    let replies = bob.recv_messages(2, TIMEOUT).unwrap();
    assert!(matches!(replies[1].1, Outbound::Accepted(_)), "{replies:?}");
    assert!(venue.stop().success());
    assert!(bourse::journal::verify(&journal).is_ok());
}

#[test]
fn deleted_segment_refuses_to_start() {
    let dir = tempfile::tempdir().unwrap();
    let text = config_text(dir.path(), "");
    let journal = day_with_acknowledged_orders(dir.path(), &text);
    let segment = journal.join("00000001.seg");
    std::fs::remove_file(&segment).unwrap();
    let config = dir.path().join("bourse.toml");
    expect_refusal(
        &config,
        &[&segment.display().to_string(), "segment file missing"],
    );
    assert!(bourse::journal::verify(&journal).is_err());
    // Only on request: a new, empty day (everything in the deleted file is lost).
    let venue = start_with_flag(dir.path(), &config);
    assert!(venue.stop().success());
    assert_eq!(bourse::journal::verify(&journal).unwrap().last_seq, 1);
}
