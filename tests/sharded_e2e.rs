//! End-to-end: the daemon with `[engine] layout = "sharded"` (1 and 3 shard threads, park)
//! over real sockets. Three accounts trade on four symbols (rests, crosses, cancels,
//! replaces, a replacement token reused at once, a halt); the OUCH bytes each account
//! receives, the ITCH feed (with re-requests) and the numbering equal `bourse replay` of the
//! journal, and GLIMPSE answers through the pipeline.

mod common;

use bourse::client::{OuchClient, Received};
use bourse::daemon::admin::Request;
use bourse::replay::StreamHasher;
use bourse::types::{Alpha, Price, Shares};
use bourse::wire::itch;
use bourse::wire::ouch::{CancelOrder, Inbound, Outbound, ReplaceOrder};
use common::{FeedCollector, TIMEOUT, Venue, bourse, config_text};
use std::time::Duration;

fn tok(s: &str) -> Alpha<14> {
    Alpha::from_str_padded(s).unwrap()
}

fn enter(token: &str, side: u8, shares: u32, symbol: &str, price: u32, display: u8) -> Inbound {
    common::order(token, side, shares, symbol, price, 99_999, display)
}

fn trade(clients: &mut [OuchClient], round: u32) {
    let symbols = ["IBM", "ZZ", "AAPL", "MSFT"];
    for i in 0..80u32 {
        let n = round * 1000 + i;
        let c = &mut clients[(i % 3) as usize];
        let symbol = symbols[(i % 4) as usize];
        let side = if (i / 4) % 2 == 0 { b'B' } else { b'S' };
        let price = 100_000 + (i % 5) * 100;
        let display = [b'Y', b'A', b'N', b'Y', b'P'][(i % 5) as usize];
        c.send(&enter(
            &format!("T{n}"),
            side,
            100 + i,
            symbol,
            price,
            display,
        ))
        .unwrap();
        if i % 5 == 4 {
            c.send(&Inbound::Cancel(CancelOrder {
                token: tok(&format!("T{}", n - 3)),
                shares: Shares(10),
            }))
            .unwrap();
        }
        if i % 6 == 5 {
            c.send(&Inbound::Replace(ReplaceOrder {
                existing: tok(&format!("T{}", n - 3)),
                replacement: tok(&format!("R{n}")),
                shares: Shares(300),
                price: Price(100_200),
                tif: 99_999,
                display: b'Y',
                intermarket_sweep: b'N',
                min_qty: Shares(0),
            }))
            .unwrap();
            // A benign resend of the replacement token while its verdict may be pending.
            c.send(&enter(&format!("R{n}"), b'B', 1, symbol, 100_000, b'Y'))
                .unwrap();
        }
    }
}

/// Every sequenced message through the end of day's System Event `E` (sessions stay open
/// after end of day: DESIGN.md 4).
fn drain(client: &mut OuchClient) -> Vec<Outbound> {
    let mut out = Vec::new();
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while std::time::Instant::now() < deadline {
        match client.recv(Duration::from_millis(500)).unwrap() {
            Some(Received::Sequenced(_, m)) => {
                let end = matches!(m, Outbound::SystemEvent(e) if e.event == b'E');
                out.push(m);
                if end {
                    return out;
                }
            }
            Some(Received::EndOfSession) | Some(Received::Closed) => {
                panic!("the session ended before its end-of-day event")
            }
            Some(Received::Undecodable(seq, b)) => panic!("message {seq} undecodable: {b:?}"),
            Some(Received::Heartbeat) | None => {}
        }
    }
    panic!("no end-of-day event after {} messages", out.len());
}

fn digest(messages: &[Outbound]) -> String {
    let mut h = StreamHasher::default();
    for m in messages {
        let mut buf = [0u8; 96];
        let n = m.encode(&mut buf);
        h.add(&buf[..n]);
    }
    format!("{} messages sha256 {}", h.messages, h.digest())
}

fn glimpse_a_count(venue: &Venue) -> usize {
    use bourse::wire::soupbin::{FrameReader, LoginRequest, Packet};
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(venue.snapshot).unwrap();
    stream.set_read_timeout(Some(TIMEOUT)).unwrap();
    let login = Packet::LoginRequest(LoginRequest {
        username: Alpha::from_str_padded("BOB").unwrap(),
        password: Alpha::from_str_padded("bobpw").unwrap(),
        session: bourse::wire::ascii::SessionId::BLANK,
        sequence: 1,
        heartbeat_timeout_ms: None,
    });
    let mut buf = [0u8; 128];
    let n = login.encode(&mut buf);
    stream.write_all(&buf[..n]).unwrap();
    let mut reader = FrameReader::new(u16::MAX as usize);
    let mut adds = 0;
    loop {
        while let Some(p) = reader.next_packet() {
            match p.unwrap() {
                Packet::SequencedData(d) if d[0] == b'A' || d[0] == b'F' => adds += 1,
                Packet::EndOfSession => return adds,
                _ => {}
            }
        }
        let n = stream.read(reader.read_space()).unwrap();
        assert!(n > 0, "GLIMPSE closed before End of Session");
        reader.commit(n);
    }
}

/// A sharded day; with `snapshot_every` the daemon also writes state snapshots every that
/// many inputs while it trades (its threads lend their stages for each: the outputs must not
/// change), and `bourse replay --from-snapshot` must print the full replay's digests.
fn sharded_day(shards: u32, snapshot_every: Option<u32>) {
    let dir = tempfile::tempdir().unwrap();
    let snapshots = snapshot_every.map_or(String::new(), |n| {
        format!("[snapshot]\nevery_inputs = {n}\nkeep = 2\n")
    });
    let extra = format!(
        "{snapshots}[engine]\nlayout = \"sharded\"\nshards = {shards}\nwait = \"park\"\nring_slots = 1024\n\
         [[symbols]]\nsymbol = \"IBM\"\ntick = 100\n[[symbols]]\nsymbol = \"ZZ\"\ntick = 1\n"
    );
    let venue = Venue::start(dir.path(), &config_text(dir.path(), &extra));
    let mut collector = FeedCollector::join(&venue);
    collector.drop_every = 5;
    let feed = std::thread::spawn(move || {
        collector.run_until_end(Duration::from_secs(30));
        collector
    });
    let mut clients: Vec<OuchClient> =
        [("ALICE", "alicepw"), ("BOB", "bobpw"), ("CAROL", "carolpw")]
            .iter()
            .map(|(u, p)| OuchClient::login(venue.gateway, u, p, "", 1, TIMEOUT).unwrap())
            .collect();
    trade(&mut clients, 1);
    std::thread::sleep(Duration::from_millis(100));
    assert!(
        glimpse_a_count(&venue) > 0,
        "the snapshot holds resting orders"
    );
    let halt = venue.ask_admin(&Request::Halt("IBM".into()));
    assert_eq!(halt, "ok halt IBM");
    clients[0]
        .send(&enter("H1", b'B', 100, "IBM", 100_000, b'Y'))
        .unwrap();
    let resume = venue.ask_admin(&Request::Resume("IBM".into()));
    assert_eq!(resume, "ok resume IBM");
    trade(&mut clients, 2);
    std::thread::sleep(Duration::from_millis(100));
    let status = venue.ask_admin(&Request::Status);
    assert!(status.starts_with("ok seq="), "{status}");
    assert_eq!(venue.ask_admin(&Request::EndOfDay), "ok end-of-day");
    let received: Vec<Vec<Outbound>> = clients.iter_mut().map(drain).collect();
    let collector = feed.join().unwrap();
    assert!(collector.ended, "End of Session packet seen");
    assert!(venue.stop().success(), "clean shutdown on SIGTERM");

    let itch_out = dir.path().join("replayed.itch");
    let (ok, out) = bourse(&[
        "replay",
        "--journal",
        dir.path().join("journal").to_str().unwrap(),
        "--itch-out",
        itch_out.to_str().unwrap(),
    ]);
    assert!(ok, "{out}");
    for (user, messages) in ["ALICE", "BOB", "CAROL"].iter().zip(&received) {
        let line = out
            .lines()
            .find(|l| l.starts_with(&format!("ouch {user} ")))
            .unwrap_or_else(|| panic!("no ouch {user} in {out}"));
        assert!(
            line.ends_with(&digest(messages)),
            "{shards} shards, {user}: {line}"
        );
        assert!(messages.iter().any(|m| matches!(m, Outbound::Executed(_))));
    }
    let bytes = std::fs::read(itch_out).unwrap();
    let replayed: Vec<Vec<u8>> = itch::binary_file::Reader::new(&bytes)
        .map(|m| m.unwrap().to_vec())
        .collect();
    assert!(replayed.len() > 200, "{} ITCH messages", replayed.len());
    assert!(
        collector.messages == replayed,
        "{shards} shards: feed bytes differ from replay"
    );
    if snapshot_every.is_some() {
        let journal = dir.path().join("journal");
        let days: Vec<_> = std::fs::read_dir(&journal)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.is_dir())
            .collect();
        let newest = bourse::snapshot::list(&days[0]);
        assert!(!newest.is_empty(), "the sharded daemon wrote snapshots");
        let (ok, resumed) = bourse(&[
            "replay",
            "--journal",
            journal.to_str().unwrap(),
            "--from-snapshot",
        ]);
        assert!(ok, "{resumed}");
        assert!(
            resumed.contains(&format!("from the snapshot after record {}", newest[0].0)),
            "{resumed}"
        );
        let digests = |text: &str| -> Vec<String> {
            text.lines()
                .filter(|l| {
                    ["inputs ", "order_refs ", "itch ", "ouch ", "state "]
                        .iter()
                        .any(|p| l.starts_with(p))
                })
                .map(str::to_string)
                .collect()
        };
        assert!(!digests(&out).is_empty(), "{out}");
        assert_eq!(
            digests(&resumed),
            digests(&out),
            "from the snapshot vs in full"
        );
    }
    println!(
        "{shards} shards: {} OUCH messages and {} ITCH messages equal bourse replay ({} re-requests)",
        received.iter().map(Vec::len).sum::<usize>(),
        replayed.len(),
        collector.rerequests
    );
}

#[test]
fn sharded_daemon_with_one_shard_equals_replay() {
    sharded_day(1, None);
}

#[test]
fn sharded_daemon_with_three_shards_equals_replay() {
    sharded_day(3, None);
}

#[test]
fn sharded_daemon_writing_snapshots_equals_replay_and_its_snapshots_resume_it() {
    sharded_day(3, Some(25));
}

// ---- the defects of the first sharded pipeline (issue 10) -----------------------------------

fn sharded_config(dir: &std::path::Path, durability: &str, ring_slots: u32) -> String {
    let text = config_text(
        dir,
        &format!(
            "[engine]\nlayout = \"sharded\"\nshards = 2\nwait = \"park\"\nring_slots = {ring_slots}\n"
        ),
    );
    text.replace(
        "durability = \"flush\"",
        &format!("durability = \"{durability}\""),
    )
}

/// A burst larger than every ring, sequenced as one batch: the old output stage waited for
/// each input to be durable while the gateway thread, which makes them durable, was stuck
/// publishing into a full ring — every thread hung. Now the front ends the batch early and
/// the output stage never waits for durability.
#[test]
fn a_burst_larger_than_the_rings_is_answered() {
    let dir = tempfile::tempdir().unwrap();
    let venue = Venue::start(dir.path(), &sharded_config(dir.path(), "flush", 64));
    let mut alice = OuchClient::login(venue.gateway, "ALICE", "alicepw", "", 1, TIMEOUT).unwrap();
    alice
        .send(&enter("REST", b'B', 100_000, "AAPL", 100_000, b'Y'))
        .unwrap();
    // 1,500 cancels of a live token all go to its shard (each reduces it by one share).
    let burst = 1_500u32;
    let mut bytes = Vec::new();
    for n in 0..burst {
        let cancel = Inbound::Cancel(CancelOrder {
            token: tok("REST"),
            shares: Shares(100_000 - 1 - n),
        });
        bytes.extend_from_slice(&OuchClient::frame(&cancel));
    }
    alice.send_bytes(&bytes).unwrap();
    let replies = alice
        .recv_messages(2 + burst as usize, Duration::from_secs(20))
        .unwrap();
    assert_eq!(
        replies.len(),
        2 + burst as usize,
        "every cancel is answered"
    );
    assert!(venue.ask_admin(&Request::Status).starts_with("ok seq="));
    assert!(venue.stop().success());
}

/// `replicated` with no standby: replies are held, and the daemon must still answer admin
/// commands and stop on SIGTERM (the old sharded layout kept reading input until its rings
/// filled, then blocked its only thread; joining the output thread never returned).
#[test]
fn replicated_without_a_standby_holds_replies_but_stays_responsive() {
    let dir = tempfile::tempdir().unwrap();
    let venue = Venue::start(dir.path(), &sharded_config(dir.path(), "replicated", 64));
    let mut alice = OuchClient::login(venue.gateway, "ALICE", "alicepw", "", 1, TIMEOUT).unwrap();
    let mut bytes = Vec::new();
    for n in 0..2_000u32 {
        bytes.extend_from_slice(&OuchClient::frame(&enter(
            &format!("H{n}"),
            b'B',
            100,
            "AAPL",
            100_000,
            b'Y',
        )));
    }
    // The gateway stops reading once it holds what it can: the write may not finish.
    let writer = alice.try_clone_stream().unwrap();
    std::thread::spawn(move || {
        let mut w = writer;
        let _ = std::io::Write::write_all(&mut w, &bytes);
    });
    std::thread::sleep(Duration::from_millis(500));
    let held = alice.recv_messages(2, Duration::from_millis(300)).unwrap();
    assert!(
        held.iter()
            .all(|(_, m)| matches!(m, Outbound::SystemEvent(_))),
        "no reply before a standby confirms: {held:?}"
    );
    let status = venue.ask_admin(&Request::Status);
    assert!(status.starts_with("ok seq="), "{status}");
    let started = std::time::Instant::now();
    assert!(venue.stop().success(), "SIGTERM stops it cleanly");
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "stopped in {:?}",
        started.elapsed()
    );
}

/// A shard thread that panics must stop the process (one log line, a non-zero exit), not
/// leave a venue that journals and never answers. `BOURSE_FAILPOINT` (debug builds only)
/// makes shard 0 panic on the command of input 3.
#[test]
fn a_panicking_shard_thread_stops_the_process() {
    let dir = tempfile::tempdir().unwrap();
    let text = sharded_config(dir.path(), "flush", 64);
    let config = dir.path().join("bourse.toml");
    std::fs::write(&config, text).unwrap();
    let mut child = std::process::Command::new(common::bourse_binary())
        .args(["run", "--config"])
        .arg(&config)
        .env("BOURSE_FAILPOINT", "shard-panic-at-seq:3")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let mut line = String::new();
    std::io::BufRead::read_line(&mut std::io::BufReader::new(stdout), &mut line).unwrap();
    let venue_gateway: std::net::SocketAddr = line
        .split_whitespace()
        .find_map(|w| w.strip_prefix("gateway="))
        .unwrap()
        .parse()
        .unwrap();
    let mut alice = OuchClient::login(venue_gateway, "ALICE", "alicepw", "", 1, TIMEOUT).unwrap();
    // Input 2 is this order (AAPL: shard 0 of 2); input 3 is the next one.
    for n in 0..2 {
        alice
            .send(&enter(&format!("P{n}"), b'B', 100, "AAPL", 100_000, b'Y'))
            .unwrap();
    }
    let Some((status, stderr)) = common::exited(&mut child, Duration::from_secs(10)) else {
        let _ = child.kill();
        panic!("the process kept running");
    };
    assert_eq!(status.code(), Some(70), "{stderr}");
    assert_eq!(
        stderr.matches("pipeline thread failed").count(),
        1,
        "one clear line: {stderr}"
    );
}
