//! Independent clients and decoders on a live daemon (issue 5, last bullet).
//!
//! - tshark (Wireshark's `soupbintcp`, `ouch` and `moldudp64` dissectors) decodes a capture of a
//!   live test session with nothing malformed, every OUCH message in both directions, the logins
//!   and contiguous MoldUDP64 sequence numbers;
//! - the Python packages `itchfeed` and `itch-book` decode the feed exported from that capture,
//!   and itch-book's rebuilt book equals the GLIMPSE snapshot bourse served;
//! - Nasdaq's `nasdaq-protocols` SoupBinTCP client (with our `tests/interop/ouch42.xml`) logs in
//!   and decodes our replies.
//!
//! These tests need tshark/dumpcap (capturing on `lo`, so root) and a venv with
//! `tests/interop/requirements.txt`. `.ci/run` installs both and points `BOURSE_INTEROP_PYTHON`
//! at the venv's python; without it the default is `target/interop-venv/bin/python`. When
//! something is missing the tests fail and say how to install it: they never skip.

mod common;

use bourse::client::{OuchClient, Received};
use bourse::daemon::admin::Request;
use bourse::types::{Alpha, Shares};
use bourse::wire::ascii::SessionId;
use bourse::wire::itch::{self, Body};
use bourse::wire::ouch::{CancelOrder, Inbound, ModifyOrder, Outbound, order_state};
use bourse::wire::soupbin::{FrameReader, LoginRequest, Packet};
use common::ports::fixed_port;
use common::{FeedCollector, TIMEOUT, Venue, bourse, config_text};
use serde_json::Value;
use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const INSTALL: &str = "run .ci/run, or install the tools by hand: \
    apt-get install -y tshark && python3 -m venv target/interop-venv && \
    target/interop-venv/bin/pip install -r tests/interop/requirements.txt \
    (or point BOURSE_INTEROP_PYTHON at a python that has them)";

/// The session date handed to itch-book (it only places timestamps; any date works).
const SESSION_DATE: &str = "2026-01-02";

// ---------------------------------------------------------------------------------------------
// Tools

/// The venv's python with itchfeed, itch-book and nasdaq-protocols importable.
fn python() -> PathBuf {
    let path = std::env::var_os("BOURSE_INTEROP_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            Path::new(env!("CARGO_MANIFEST_DIR")).join("target/interop-venv/bin/python")
        });
    let probe = Command::new(&path)
        .args(["-c", "import itch, itch_book, nasdaq_protocols"])
        .output();
    match probe {
        Ok(out) if out.status.success() => path,
        Ok(out) => panic!(
            "{} cannot import the interop packages ({}): {INSTALL}",
            path.display(),
            String::from_utf8_lossy(&out.stderr)
                .lines()
                .last()
                .unwrap_or("")
        ),
        Err(e) => panic!("no interop python at {} ({e}): {INSTALL}", path.display()),
    }
}

fn require_tool(name: &str) {
    let found = Command::new(name)
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
    assert!(
        matches!(found, Ok(s) if s.success()),
        "{name} is required by the interop tests: {INSTALL}"
    );
}

fn script(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/interop")
        .join(name)
}

/// Run one of our Python scripts and parse the JSON it prints.
fn run_python(python: &Path, name: &str, args: &[&str]) -> Value {
    let out = Command::new(python)
        .arg(script(name))
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{name} {args:?} failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "{name} printed no JSON ({e}):\n{}",
            String::from_utf8_lossy(&out.stdout)
        )
    })
}

/// The test config with fixed gateway, re-request and snapshot ports, so that the capture can
/// start before the daemon does (and so see the start of day on the feed).
fn config_with_ports(dir: &Path, gateway: u16, rerequest: u16, snapshot: u16) -> String {
    let text = config_text(dir, "");
    let fixed = text
        .replacen(
            "[gateway]\nlisten = \"127.0.0.1:0\"",
            &format!("[gateway]\nlisten = \"127.0.0.1:{gateway}\""),
            1,
        )
        .replacen(
            "rerequest = \"127.0.0.1:0\"",
            &format!("rerequest = \"127.0.0.1:{rerequest}\""),
            1,
        )
        .replacen(
            "snapshot = \"127.0.0.1:0\"",
            &format!("snapshot = \"127.0.0.1:{snapshot}\""),
            1,
        );
    assert!(fixed.contains(&format!(":{gateway}\"")) && fixed.contains(&format!(":{snapshot}\"")));
    fixed
}

/// `dumpcap -i lo` writing a pcapng file, stopped with SIGINT.
struct Capture {
    child: Child,
    path: PathBuf,
    log: PathBuf,
}

impl Capture {
    fn start(dir: &Path, filter: &str) -> Capture {
        let path = dir.join("session.pcapng");
        let log = dir.join("dumpcap.log");
        let child = Command::new("dumpcap")
            .args(["-q", "-i", "lo", "-f", filter, "-w"])
            .arg(&path)
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap_or_else(|e| panic!("dumpcap: {e}: {INSTALL}"));
        let capture = Capture { child, path, log };
        // dumpcap prints "File: ..." once the interface is open and the file created.
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let text = std::fs::read_to_string(&capture.log).unwrap_or_default();
            if text.contains("File:") {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "dumpcap did not start capturing on lo (root needed):\n{text}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        std::thread::sleep(Duration::from_millis(200));
        capture
    }

    /// SIGINT, wait, and check dumpcap dropped nothing; returns the capture file.
    fn stop(mut self) -> PathBuf {
        // Let the last packets reach the capture buffer before stopping.
        std::thread::sleep(Duration::from_millis(300));
        let status = Command::new("kill")
            .args(["-INT", &self.child.id().to_string()])
            .status()
            .unwrap();
        assert!(status.success());
        let exit = self.child.wait().unwrap();
        let log = std::fs::read_to_string(&self.log).unwrap();
        assert!(exit.success(), "dumpcap failed: {log}");
        let dropped = log
            .lines()
            .find(|l| l.starts_with("Packets received/dropped"))
            .unwrap_or_else(|| panic!("no drop count in dumpcap's log:\n{log}"));
        assert!(
            dropped.contains("/0 (pcap:0/dumpcap:0/flushed:0"),
            "dumpcap dropped packets: {dropped}"
        );
        eprintln!("dumpcap: {}", log.trim().replace('\n', " | "));
        let path = self.path.clone();
        if let Some(keep) = std::env::var_os("BOURSE_INTEROP_KEEP") {
            // Keep the capture for a look with Wireshark.
            let name = format!(
                "{}-{}.pcapng",
                std::process::id(),
                Instant::now().elapsed().as_nanos()
            );
            let to = Path::new(&keep).join(name);
            std::fs::copy(&path, &to).unwrap();
            eprintln!("capture kept as {}", to.display());
        }
        std::mem::forget(self);
        path
    }
}

impl Drop for Capture {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// tshark over the capture with our ports decoded as SoupBinTCP and MoldUDP64.
struct Tshark {
    path: PathBuf,
    decode: Vec<String>,
}

impl Tshark {
    fn run(&self, args: &[&str]) -> String {
        let mut command = Command::new("tshark");
        command.arg("-n").arg("-r").arg(&self.path);
        for d in &self.decode {
            command.args(["-d", d]);
        }
        let out = command
            .args(args)
            .output()
            .unwrap_or_else(|e| panic!("tshark: {e}: {INSTALL}"));
        assert!(
            out.status.success(),
            "tshark {args:?} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    }

    /// `-T fields` rows for the packets matching `filter`, fields split by tab and
    /// occurrences within a field by `|`.
    fn fields(&self, filter: &str, fields: &[&str]) -> Vec<Vec<Vec<String>>> {
        let mut args = vec!["-Y", filter, "-T", "fields", "-E", "aggregator=|"];
        for f in fields {
            args.push("-e");
            args.push(f);
        }
        self.run(&args)
            .lines()
            .map(|line| {
                line.split('\t')
                    .map(|field| {
                        if field.is_empty() {
                            Vec::new()
                        } else {
                            field.split('|').map(unquote).collect()
                        }
                    })
                    .collect()
            })
            .collect()
    }
}

/// tshark prints FT_CHAR fields as `'X'`.
fn unquote(s: &str) -> String {
    s.strip_prefix('\'')
        .and_then(|s| s.strip_suffix('\''))
        .unwrap_or(s)
        .to_string()
}

/// The "nothing malformed" gate: prints nothing on a clean capture.
const GATE: &str = "_ws.malformed || _ws.expert.severity == error || ouch.unknown_message \
    || soupbintcp.req_seq_num.invalid || soupbintcp.next_seq_num.invalid \
    || moldudp64.msglen.invalid || moldudp64.count.invalid || moldudp64.end_of_session_extra";

// ---------------------------------------------------------------------------------------------
// The trading session

fn token(text: &str) -> Alpha<14> {
    Alpha::from_str_padded(text).unwrap()
}

fn enter(
    t: &str,
    side: u8,
    shares: u32,
    symbol: &str,
    price: u32,
    tif: u32,
    display: u8,
) -> Inbound {
    common::order(t, side, shares, symbol, price, tif, display)
}

fn replace(old: &str, new: &str, shares: u32, price: u32, display: u8) -> Inbound {
    common::replace(old, new, shares, price, display)
}

fn cancel(t: &str, shares: u32) -> Inbound {
    Inbound::Cancel(CancelOrder {
        token: token(t),
        shares: Shares(shares),
    })
}

const DAY: u32 = 99_999;
const IOC: u32 = 0;

/// One broker connection that keeps count of what went each way.
struct Trader {
    name: &'static str,
    client: OuchClient,
    /// Inbound OUCH type letter -> messages sent.
    sent: BTreeMap<char, usize>,
    sent_messages: Vec<Inbound>,
    received: Vec<Outbound>,
    server_heartbeats: usize,
    client_heartbeats: usize,
    last_heartbeat: Instant,
}

impl Trader {
    fn login(venue: &Venue, name: &'static str, password: &str) -> Trader {
        let client = OuchClient::login(venue.gateway, name, password, "", 1, TIMEOUT).unwrap();
        assert_eq!(client.next_seq, 1);
        Trader {
            name,
            client,
            sent: BTreeMap::new(),
            sent_messages: Vec::new(),
            received: Vec::new(),
            server_heartbeats: 0,
            client_heartbeats: 0,
            last_heartbeat: Instant::now(),
        }
    }

    fn send(&mut self, message: &Inbound) {
        self.client.send(message).unwrap();
        *self.sent.entry(message.kind() as char).or_default() += 1;
        self.sent_messages.push(*message);
    }

    /// Receive exactly the replies `kinds` (OUCH type letters, in order).
    fn expect(&mut self, kinds: &str) -> Vec<Outbound> {
        let got = self.client.recv_messages(kinds.len(), TIMEOUT).unwrap();
        let got: Vec<Outbound> = got.into_iter().map(|(_, m)| m).collect();
        let letters: String = got.iter().map(|m| m.kind() as char).collect();
        assert_eq!(letters, kinds, "{}: replies {got:?}", self.name);
        self.received.extend(got.iter().cloned());
        got
    }

    /// Stay idle for `time`: count server heartbeats, send client heartbeats when due.
    fn idle(&mut self, time: Duration) {
        let deadline = Instant::now() + time;
        while Instant::now() < deadline {
            if self.heartbeat_due() {
                self.heartbeat();
            }
            match self.client.recv(Duration::from_millis(100)).unwrap() {
                Some(Received::Heartbeat) => self.server_heartbeats += 1,
                None => {}
                other => panic!("{}: unexpected {other:?} while idle", self.name),
            }
        }
    }

    fn heartbeat(&mut self) {
        self.client.send_packet(&Packet::ClientHeartbeat).unwrap();
        self.client_heartbeats += 1;
        self.last_heartbeat = Instant::now();
    }

    /// Nothing sent for 900 ms (a client heartbeat each second of silence).
    fn heartbeat_due(&self) -> bool {
        self.last_heartbeat.elapsed() >= Duration::from_millis(900)
    }

    fn received_kinds(&self) -> BTreeMap<char, usize> {
        let mut out = BTreeMap::new();
        for m in &self.received {
            *out.entry(m.kind() as char).or_default() += 1;
        }
        out
    }
}

/// Log in to the GLIMPSE server and read the whole snapshot: (ITCH messages, G sequence).
fn glimpse(venue: &Venue) -> (Vec<Vec<u8>>, u64) {
    let mut stream = std::net::TcpStream::connect(venue.snapshot).unwrap();
    stream.set_read_timeout(Some(TIMEOUT)).unwrap();
    let login = Packet::LoginRequest(LoginRequest {
        username: Alpha::from_str_padded("BOB").unwrap(),
        password: Alpha::from_str_padded("bobpw").unwrap(),
        session: SessionId::BLANK,
        sequence: 1,
        heartbeat_timeout_ms: None,
    });
    let mut buf = [0u8; 128];
    let n = login.encode(&mut buf);
    stream.write_all(&buf[..n]).unwrap();
    let mut reader = FrameReader::new(u16::MAX as usize);
    let (mut messages, mut next) = (Vec::new(), None);
    loop {
        while let Some(p) = reader.next_packet() {
            match p.unwrap() {
                Packet::LoginAccepted { sequence, .. } => assert_eq!(sequence, 1),
                Packet::SequencedData(d) if d[0] == b'G' => {
                    next = Some(
                        bourse::wire::glimpse::EndOfSnapshot::decode(d)
                            .unwrap()
                            .sequence,
                    );
                }
                Packet::SequencedData(d) => messages.push(d.to_vec()),
                Packet::EndOfSession => return (messages, next.expect("G before Z")),
                other => panic!("unexpected {other:?}"),
            }
        }
        let n = stream.read(reader.read_space()).unwrap();
        assert!(n > 0, "closed before End of Session");
        reader.commit(n);
    }
}

/// A price level: (Price(4), shares, orders).
type Level = (u64, u64, u64);

/// Displayed depth per symbol, aggregated by price: (bids best first, asks best first).
type Depth = BTreeMap<String, (Vec<Level>, Vec<Level>)>;

/// The displayed book in a GLIMPSE snapshot, aggregated by price level.
fn glimpse_depth(snapshot: &[Vec<u8>]) -> (Depth, usize) {
    let mut symbols = BTreeMap::new();
    let mut levels: BTreeMap<(String, u8, u64), (u64, u64)> = BTreeMap::new();
    let mut orders = 0;
    for bytes in snapshot {
        let m = itch::Message::decode(bytes).unwrap();
        match m.body {
            Body::StockDirectory(d) => {
                symbols.insert(m.header.locate, d.stock.trimmed().into_owned());
            }
            Body::AddOrder {
                side,
                shares,
                stock,
                price,
                ..
            }
            | Body::AddOrderMpid {
                side,
                shares,
                stock,
                price,
                ..
            } => {
                orders += 1;
                let level = levels
                    .entry((stock.trimmed().into_owned(), side, u64::from(price.0)))
                    .or_default();
                level.0 += u64::from(shares.0);
                level.1 += 1;
            }
            _ => {}
        }
    }
    let mut depth: Depth = symbols
        .values()
        .map(|s| (s.clone(), Default::default()))
        .collect();
    for ((symbol, side, price), (shares, count)) in levels {
        let book = depth.get_mut(&symbol).unwrap();
        let side = if side == b'B' {
            &mut book.0
        } else {
            &mut book.1
        };
        side.push((price, shares, count));
    }
    for (bids, _) in depth.values_mut() {
        bids.reverse();
    }
    (depth, orders)
}

/// itch-book's depth per symbol from its JSON.
fn itch_book_depth(json: &Value) -> Depth {
    let levels = |v: &Value| -> Vec<Level> {
        v.as_array()
            .unwrap()
            .iter()
            .map(|l| {
                let n = |i: usize| l[i].as_u64().unwrap();
                (n(0), n(1), n(2))
            })
            .collect()
    };
    json["books"]
        .as_object()
        .unwrap()
        .iter()
        .map(|(symbol, book)| {
            (
                symbol.clone(),
                (levels(&book["bids"]), levels(&book["asks"])),
            )
        })
        .collect()
}

/// The bytes `bourse replay --itch-out` writes for the journal.
fn replayed_itch(dir: &Path) -> Vec<u8> {
    let out = dir.join("replayed.itch");
    let (ok, text) = bourse(&[
        "replay",
        "--journal",
        dir.join("journal").to_str().unwrap(),
        "--itch-out",
        out.to_str().unwrap(),
    ]);
    assert!(ok, "{text}");
    std::fs::read(out).unwrap()
}

fn binary_file(messages: &[Vec<u8>]) -> Vec<u8> {
    let mut out = Vec::new();
    for m in messages {
        out.extend_from_slice(&(m.len() as u16).to_be_bytes());
        out.extend_from_slice(m);
    }
    out
}

fn hex_decode(text: &str) -> Vec<u8> {
    let text = text.replace(':', "");
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&text[i..i + 2], 16).unwrap())
        .collect()
}

/// What the session did, for the checks.
struct Session {
    alice: Trader,
    bob: Trader,
    snapshot: Vec<Vec<u8>>,
    snapshot_next: u64,
    collector: FeedCollector,
}

/// The scenario: two accounts, two symbols; every inbound OUCH type; accepted (live and dead),
/// rejected, executed (displayed and hidden maker), canceled (user, IOC remainder, end of day),
/// replaced (ITCH U, and D+F when the attribution changes); idle time for heartbeats; a GLIMPSE
/// snapshot while orders rest; logout; end of day.
fn trade(venue: &Venue) -> Session {
    let mut collector = FeedCollector::join(venue);
    // Lose every second data packet on purpose, so the capture always holds re-requests.
    collector.drop_every = 2;
    let mut alice = Trader::login(venue, "ALICE", "alicepw");
    let mut bob = Trader::login(venue, "BOB", "bobpw");
    alice.expect("S");
    bob.expect("S");

    // AAPL tick $0.01 = 100; MSFT too.
    alice.send(&enter("A1", b'B', 300, "AAPL", 1_500_000, DAY, b'Y'));
    alice.send(&enter("A2", b'B', 200, "AAPL", 1_499_000, DAY, b'A'));
    alice.send(&enter("A3", b'S', 500, "AAPL", 1_505_000, DAY, b'Y'));
    alice.send(&enter("A4", b'S', 100, "AAPL", 1_504_000, DAY, b'P'));
    alice.send(&enter("A5", b'B', 100, "AAPL", 1_498_000, DAY, b'N'));
    alice.send(&enter("A6", b'B', 100, "ZZZZ", 1_000_000, DAY, b'Y'));
    alice.send(&enter("A7", b'B', 100, "MSFT", 3_000_000, DAY, b'Y'));
    alice.send(&enter("A8", b'S', 200, "MSFT", 3_010_000, DAY, b'A'));
    alice.send(&enter("A9", b'B', 100, "MSFT", 3_005_000, DAY, b'N'));
    let r = alice.expect("AAAAAJAAA");
    let Outbound::Rejected(j) = r[5] else {
        panic!()
    };
    assert_eq!(j.reason, b'S', "unknown symbol");
    alice.send(&replace("A1", "A1R", 400, 1_501_000, b'Y'));
    alice.expect("U");
    alice.send(&cancel("A3", 300));
    alice.expect("C");
    alice.send(&Inbound::Modify(ModifyOrder {
        token: token("A2"),
        side: b'B',
        shares: Shares(150),
    }));
    alice.send(&enter("A10", b'B', 100, "AAPL", 1_497_000, DAY, b'Y'));
    alice.expect("A");
    alice.send(&cancel("A10", 0));
    alice.expect("C");

    bob.send(&enter("B1", b'S', 150, "AAPL", 1_500_000, DAY, b'Y'));
    bob.expect("AE");
    alice.expect("E");
    bob.send(&enter("B2", b'B', 50, "AAPL", 1_504_000, DAY, b'Y'));
    bob.expect("AE");
    alice.expect("E");
    bob.send(&enter("B3", b'B', 1000, "MSFT", 3_010_000, IOC, b'Y'));
    bob.expect("AEC");
    alice.expect("E");
    bob.send(&enter("B4", b'S', 40, "MSFT", 3_005_000, DAY, b'Y'));
    bob.expect("AE");
    let hidden = alice.expect("E");
    let Outbound::Executed(e) = hidden[0] else {
        panic!()
    };
    assert_eq!(e.liquidity, b'J', "hidden maker");
    bob.send(&enter("B5", b'B', 100, "MSFT", 2_995_000, DAY, b'Y'));
    bob.expect("A");
    bob.send(&replace("B5", "B5R", 100, 2_995_000, b'A'));
    bob.expect("U");
    bob.send(&enter("B6", b'B', 10, "AAPL", 1_504_000, DAY, b'P'));
    let dead = bob.expect("A");
    let Outbound::Accepted(a) = dead[0] else {
        panic!()
    };
    assert_eq!(
        a.order_state,
        order_state::DEAD,
        "post-only that would cross"
    );
    bob.send(&enter("B7", b'S', 100, "AAPL", 1_506_000, DAY, b'A'));
    bob.send(&enter("B8", b'S', 300, "MSFT", 3_020_000, DAY, b'Y'));
    bob.expect("AA");
    // Joins A3's level: two orders at 150.50.
    bob.send(&enter("B9", b'S', 100, "AAPL", 1_505_000, DAY, b'Y'));
    bob.expect("A");

    // Quiet for more than a second: server heartbeats; a client heartbeat each way.
    alice.heartbeat();
    alice.idle(Duration::from_millis(1600));
    assert!(
        alice.server_heartbeats >= 1,
        "a server heartbeat after 1 s idle"
    );
    alice.heartbeat();

    let (snapshot, snapshot_next) = glimpse(venue);

    alice.client.logout().unwrap();
    assert!(matches!(
        alice.client.recv(TIMEOUT).unwrap(),
        Some(Received::Closed)
    ));
    assert_eq!(venue.ask_admin(&Request::EndOfDay), "ok end-of-day");
    // End of day: BOB's resting B9, B7 (AAPL asks), B5R (MSFT bid), B8 (MSFT ask), then E.
    let eod = bob.expect("CCCCS");
    assert!(
        eod[..4]
            .iter()
            .all(|m| matches!(m, Outbound::Canceled(c) if c.reason == b'E'))
    );
    bob.client.logout().unwrap();
    collector.run_until_end(Duration::from_secs(10));
    assert!(collector.ended, "End of Session on the feed");
    Session {
        alice,
        bob,
        snapshot,
        snapshot_next,
        collector,
    }
}

// ---------------------------------------------------------------------------------------------
// Checks

#[test]
fn tshark_itchfeed_and_itch_book_agree_with_a_live_session() {
    require_tool("tshark");
    require_tool("dumpcap");
    let python = python();
    let dir = tempfile::tempdir().unwrap();
    let (gw, rr, snap) = (fixed_port(), fixed_port(), fixed_port());
    let text = config_with_ports(dir.path(), gw, rr, snap);
    let group: std::net::SocketAddrV4 = text
        .lines()
        .find_map(|l| l.strip_prefix("group = \""))
        .unwrap()
        .trim_end_matches('"')
        .parse()
        .unwrap();
    let feed = group.port();
    let filter = format!("tcp port {gw} or tcp port {snap} or udp port {feed} or udp port {rr}");
    let capture = Capture::start(dir.path(), &filter);
    let venue = Venue::start(dir.path(), &text);
    assert_eq!(venue.gateway.port(), gw);
    assert_eq!(venue.feed.port(), feed);
    let session = trade(&venue);
    assert!(venue.stop().success());
    let pcap = capture.stop();

    let tshark = Tshark {
        path: pcap,
        decode: vec![
            format!("tcp.port=={gw},soupbintcp"),
            format!("tcp.port=={snap},soupbintcp"),
            format!("udp.port=={feed},moldudp64"),
            format!("udp.port=={rr},moldudp64"),
        ],
    };
    let summary = tshark.run(&[]);
    eprintln!("tshark: {} frames", summary.lines().count());

    // 1. Nothing malformed, no expert errors.
    let problems = tshark.run(&["-Y", GATE]);
    assert!(problems.is_empty(), "tshark flagged packets:\n{problems}");

    check_soupbintcp(&tshark, gw, snap, &session);
    check_ouch(&tshark, gw, &session);
    let exported = check_moldudp64(&tshark, feed, rr);

    // The feed exported from the capture is byte for byte what offline replay writes, and
    // what our own receiver collected.
    let replayed = replayed_itch(dir.path());
    let exported_file = binary_file(&exported);
    assert!(
        exported_file == replayed,
        "captured feed differs from replay's ITCH file"
    );
    assert!(
        session.collector.messages == exported,
        "receiver differs from capture"
    );
    let feed_path = dir.path().join("captured.itch");
    std::fs::write(&feed_path, &exported_file).unwrap();

    check_itchfeed(&python, &feed_path, &exported);
    check_itch_book(&python, &feed_path, &exported, &session);
}

/// Packet type letters -> how many.
fn tally(v: &[String]) -> BTreeMap<&str, usize> {
    let mut m: BTreeMap<&str, usize> = BTreeMap::new();
    v.iter()
        .for_each(|t| *m.entry(t.as_str()).or_default() += 1);
    m
}

/// SoupBinTCP: two logins accepted on the gateway (none rejected), heartbeats both ways on
/// ALICE's connection, a logout from each, and a GLIMPSE login on the snapshot port.
fn check_soupbintcp(tshark: &Tshark, gw: u16, snap: u16, session: &Session) {
    let rows = tshark.fields(
        &format!("soupbintcp && tcp.port=={gw}"),
        &[
            "tcp.srcport",
            "tcp.dstport",
            "soupbintcp.packet_type",
            "soupbintcp.username",
            "soupbintcp.session",
        ],
    );
    // Connections keyed by the client's port (tshark's one-pass tcp.stream numbering is not
    // stable with reassembly): port -> (username, client packet types, server packet types).
    let mut streams: BTreeMap<String, (String, Vec<String>, Vec<String>)> = BTreeMap::new();
    for row in &rows {
        let from_server = row[0][0] == gw.to_string();
        let client_port = if from_server { &row[1][0] } else { &row[0][0] };
        let s = streams.entry(client_port.clone()).or_default();
        if let Some(user) = row[3].first() {
            s.0 = user.trim().to_string();
        }
        let side = if from_server { &mut s.2 } else { &mut s.1 };
        side.extend(row[2].iter().cloned());
        if from_server && row[2].iter().any(|t| t == "A") {
            assert_eq!(
                row[4].first().map(|s| s.trim()),
                Some("TEST000001"),
                "{row:?}"
            );
        }
    }
    let count = |v: &[String], t: &str| v.iter().filter(|x| *x == t).count();
    eprintln!("soupbintcp connections to the gateway:");
    for (stream, (user, client, server)) in &streams {
        eprintln!(
            "  client port {stream} {user}: client {:?} server {:?}",
            tally(client),
            tally(server)
        );
    }
    assert_eq!(streams.len(), 2, "{streams:?}");
    for (user, trader) in [("ALICE", &session.alice), ("BOB", &session.bob)] {
        let (_, client, server) = streams
            .values()
            .find(|s| s.0 == user)
            .unwrap_or_else(|| panic!("no login by {user}: {streams:?}"));
        assert_eq!(client.first().map(String::as_str), Some("L"));
        assert_eq!(
            server.first().map(String::as_str),
            Some("A"),
            "login accepted"
        );
        assert_eq!(count(server, "J"), 0);
        assert_eq!(count(client, "O"), 1, "one logout");
        assert_eq!(
            count(server, "S"),
            trader.received.len(),
            "{user}: sequenced data"
        );
        let sent: usize = trader.sent.values().sum();
        assert_eq!(count(client, "U"), sent, "{user}: unsequenced data");
        assert_eq!(
            count(client, "R"),
            trader.client_heartbeats,
            "{user}: client heartbeats"
        );
        if user == "ALICE" {
            assert!(count(server, "H") >= trader.server_heartbeats.max(1));
        }
    }
    let glimpse = tshark.fields(
        &format!("soupbintcp && tcp.port=={snap}"),
        &["soupbintcp.packet_type"],
    );
    let kinds: Vec<String> = glimpse.into_iter().flat_map(|r| r[0].clone()).collect();
    assert_eq!(kinds.first().map(String::as_str), Some("L"));
    assert_eq!(kinds.get(1).map(String::as_str), Some("A"));
    assert_eq!(kinds.last().map(String::as_str), Some("Z"));
    assert_eq!(
        count(&kinds, "S"),
        session.snapshot.len() + 1,
        "snapshot + G"
    );
}

/// OUCH: per direction, every message decoded by tshark's OUCH dissector, with the type
/// letters and counts we sent and received, and field by field for the replies.
fn check_ouch(tshark: &Tshark, gw: u16, session: &Session) {
    let mut sent: BTreeMap<char, usize> = BTreeMap::new();
    let mut received: BTreeMap<char, usize> = BTreeMap::new();
    for t in [&session.alice, &session.bob] {
        for (k, n) in &t.sent {
            *sent.entry(*k).or_default() += n;
        }
        for (k, n) in t.received_kinds() {
            *received.entry(k).or_default() += n;
        }
    }
    let tally = |filter: String| {
        let mut out: BTreeMap<char, usize> = BTreeMap::new();
        for row in tshark.fields(&filter, &["ouch.packet_type"]) {
            for t in &row[0] {
                assert_eq!(t.chars().count(), 1, "{t:?}");
                *out.entry(t.chars().next().unwrap()).or_default() += 1;
            }
        }
        out
    };
    let inbound = tally(format!("ouch && tcp.dstport=={gw}"));
    let outbound = tally(format!("ouch && tcp.srcport=={gw}"));
    eprintln!("ouch inbound (tshark) {inbound:?}, sent {sent:?}");
    eprintln!("ouch outbound (tshark) {outbound:?}, received {received:?}");
    assert_eq!(inbound, sent);
    assert_eq!(outbound, received);
    for k in ['O', 'U', 'X', 'M'] {
        assert!(inbound.contains_key(&k), "inbound {k} exercised");
    }
    for k in ['S', 'A', 'U', 'C', 'E', 'J'] {
        assert!(outbound.contains_key(&k), "outbound {k} exercised");
    }

    // Field by field, per connection and in order: what tshark decoded against what our
    // client sent and decoded.
    let traders = [&session.alice, &session.bob];
    let inbound = ouch_json(tshark, &format!("ouch && tcp.dstport=={gw}"), "tcp.srcport");
    let mut matched = 0;
    for decoded in inbound.values() {
        let trader = traders
            .iter()
            .find(|t| {
                t.sent_messages.len() == decoded.len() && same_inbound(&t.sent_messages, decoded)
            })
            .unwrap_or_else(|| panic!("no account sent what tshark decoded: {decoded:?}"));
        matched += trader.sent_messages.len();
    }
    let outbound = ouch_json(tshark, &format!("ouch && tcp.srcport=={gw}"), "tcp.dstport");
    for decoded in outbound.values() {
        let trader = traders
            .iter()
            .find(|t| t.received.len() == decoded.len() && same_outbound(&t.received, decoded))
            .unwrap_or_else(|| panic!("no account's replies match tshark's decode: {decoded:?}"));
        matched += trader.received.len();
    }
    assert_eq!((inbound.len(), outbound.len()), (2, 2), "two connections");
    eprintln!("ouch field by field: {matched} messages equal tshark's decode");
}

/// tshark's OUCH layers (one per message) of the frames matching `filter`, grouped by the
/// client's port (`port_field`), in capture order.
fn ouch_json(tshark: &Tshark, filter: &str, port_field: &str) -> BTreeMap<u64, Vec<Value>> {
    let json = tshark.run(&[
        "-Y",
        filter,
        "-T",
        "json",
        "--no-duplicate-keys",
        "-J",
        "tcp ouch",
    ]);
    let frames: Value = serde_json::from_str(&json).unwrap();
    let mut per_port: BTreeMap<u64, Vec<Value>> = BTreeMap::new();
    for frame in frames.as_array().unwrap() {
        let layers = &frame["_source"]["layers"];
        let port: u64 = layers["tcp"][port_field].as_str().unwrap().parse().unwrap();
        let list = match &layers["ouch"] {
            Value::Array(v) => v.clone(),
            other => vec![other.clone()],
        };
        per_port.entry(port).or_default().extend(list);
    }
    per_port
}

/// What our client sent against tshark's fields.
fn same_inbound(ours: &[Inbound], theirs: &[Value]) -> bool {
    let ch = |c: u8| format!("'{}'", c as char);
    ours.iter().zip(theirs).all(|(m, v)| {
        field(v, "packet_type") == ch(m.kind())
            && match m {
                Inbound::Enter(o) => {
                    field(v, "order_token").trim() == o.token.trimmed()
                        && field(v, "buy_sell_indicator") == ch(o.side)
                        && field(v, "shares") == o.shares.0.to_string()
                        && field(v, "stock").trim() == o.stock.trimmed()
                        && field(v, "price") == o.price.0.to_string()
                        && field(v, "display") == ch(o.display)
                }
                Inbound::Replace(r) => {
                    field(v, "existing_order_token").trim() == r.existing.trimmed()
                        && field(v, "replacement_order_token").trim() == r.replacement.trimmed()
                        && field(v, "shares") == r.shares.0.to_string()
                        && field(v, "price") == r.price.0.to_string()
                }
                Inbound::Cancel(x) => {
                    field(v, "order_token").trim() == x.token.trimmed()
                        && field(v, "shares") == x.shares.0.to_string()
                }
                Inbound::Modify(x) => {
                    field(v, "order_token").trim() == x.token.trimmed()
                        && field(v, "buy_sell_indicator") == ch(x.side)
                        && field(v, "shares") == x.shares.0.to_string()
                }
            }
    })
}

fn field<'a>(v: &'a Value, name: &str) -> &'a str {
    v[format!("ouch.{name}")]
        .as_str()
        .unwrap_or_else(|| panic!("no ouch.{name} in {v}"))
}

/// Our decoded replies against tshark's fields (tokens trimmed, numbers decimal).
fn same_outbound(ours: &[Outbound], theirs: &[Value]) -> bool {
    let ch = |c: u8| format!("'{}'", c as char);
    ours.iter().zip(theirs).all(|(m, v)| {
        let kind = field(v, "packet_type") == ch(m.kind());
        kind && match m {
            Outbound::SystemEvent(e) => field(v, "event_code") == ch(e.event),
            Outbound::Accepted(a) => {
                field(v, "order_token").trim() == a.token.trimmed()
                    && field(v, "buy_sell_indicator") == ch(a.side)
                    && field(v, "shares") == a.shares.0.to_string()
                    && field(v, "stock").trim() == a.stock.trimmed()
                    && field(v, "price") == a.price.0.to_string()
                    && field(v, "order_reference_number") == a.order_ref.0.to_string()
                    && field(v, "order_state") == ch(a.order_state)
            }
            Outbound::Replaced(r) => {
                field(v, "replacement_order_token").trim() == r.token.trimmed()
                    && field(v, "previous_order_token").trim() == r.previous_token.trimmed()
                    && field(v, "shares") == r.shares.0.to_string()
                    && field(v, "price") == r.price.0.to_string()
                    && field(v, "order_reference_number") == r.order_ref.0.to_string()
            }
            Outbound::Canceled(c) => {
                field(v, "order_token").trim() == c.token.trimmed()
                    && field(v, "decrement_shares") == c.decrement.0.to_string()
                    && field(v, "cancel_reason") == ch(c.reason)
            }
            Outbound::Executed(e) => {
                field(v, "order_token").trim() == e.token.trimmed()
                    && field(v, "executed_shares") == e.shares.0.to_string()
                    && field(v, "execution_price") == e.price.0.to_string()
                    && field(v, "liquidity_flag") == ch(e.liquidity)
                    && field(v, "match_number") == e.match_number.0.to_string()
            }
            Outbound::Rejected(j) => {
                field(v, "order_token").trim() == j.token.trimmed()
                    && field(v, "reject_reason") == ch(j.reason)
            }
            other => panic!("unexpected reply {other:?}"),
        }
    })
}

/// MoldUDP64: on the multicast port, data packets contiguous, heartbeats and End of Session
/// carrying the next sequence number; re-request answers (unicast from the re-request port, one
/// per request) carrying the same bytes as the multicast. Returns the day's messages in
/// sequence order: multicast, plus the re-request answers for what was never multicast.
///
/// Finding (reported): bourse does not multicast the start of day of a new journal. The engine
/// applies it before the publisher exists (`Engine::recover` calls `start_day` and only then
/// `make_feed(next_itch_seq)`), so messages 1..=7 (System Event O, Stock Directory and Trading
/// Action per symbol, System Events S and Q) are only in the re-request store; a subscriber
/// that was listening from the start sees its first packet at sequence 8 and must re-request.
/// This check accepts that (the gap must be covered by captured re-request answers) and says
/// so on stderr; once the start of day is multicast the first packet is 1 and nothing changes.
fn check_moldudp64(tshark: &Tshark, feed: u16, rr: u16) -> Vec<Vec<u8>> {
    let fields = [
        "moldudp64.session",
        "moldudp64.sequence",
        "moldudp64.count",
        "moldudp64.msgseq",
        "moldudp64.msgdata",
    ];
    // sequence -> message bytes, from the re-request answers.
    let mut answered: BTreeMap<u64, Vec<u8>> = BTreeMap::new();
    let answers = tshark.fields(&format!("moldudp64 && udp.srcport=={rr}"), &fields);
    let requests = tshark.fields(
        &format!("moldudp64 && udp.dstport=={rr}"),
        &[
            "moldudp64.session",
            "moldudp64.sequence",
            "moldudp64.request",
        ],
    );
    for row in &answers {
        assert_eq!(row[0], ["TEST000001"], "{row:?}");
        let seq: u64 = row[1][0].parse().unwrap();
        let count: u64 = row[2][0].parse().unwrap();
        assert!(
            (1..0xFFFF).contains(&count),
            "an answer carries messages: {row:?}"
        );
        assert_eq!(row[3].len() as u64, count);
        for (i, (s, d)) in row[3].iter().zip(&row[4]).enumerate() {
            assert_eq!(s.parse::<u64>().unwrap(), seq + i as u64);
            answered.insert(seq + i as u64, hex_decode(d));
        }
    }
    eprintln!(
        "moldudp64 re-requests: {} requests, {} answers holding {} messages",
        requests.len(),
        answers.len(),
        answered.len()
    );
    assert_eq!(requests.len(), answers.len(), "one answer per request");

    let rows = tshark.fields(&format!("moldudp64 && udp.dstport=={feed}"), &fields);
    let first: u64 = rows.first().expect("multicast packets")[1][0]
        .parse()
        .unwrap();
    assert_eq!(
        first, 1,
        "the first multicast packet starts the day at sequence 1"
    );
    let mut messages: Vec<Vec<u8>> = (1..first)
        .map(|seq| {
            answered
                .get(&seq)
                .unwrap_or_else(|| panic!("message {seq} neither multicast nor re-requested"))
                .clone()
        })
        .collect();
    let (mut next, mut data, mut heartbeats, mut ends) = (first, 0, 0, 0);
    for row in &rows {
        assert_eq!(row[0], ["TEST000001"], "{row:?}");
        let seq: u64 = row[1][0].parse().unwrap();
        let count: u64 = row[2][0].parse().unwrap();
        match count {
            0 => {
                heartbeats += 1;
                assert_eq!(seq, next, "heartbeat carries the next sequence number");
            }
            0xFFFF => {
                ends += 1;
                assert_eq!(seq, next, "End of Session carries the next sequence number");
            }
            _ => {
                data += 1;
                assert_eq!(
                    seq, next,
                    "data packets contiguous: expected {next}, got {seq}"
                );
                assert_eq!(row[3].len() as u64, count);
                for (i, (s, d)) in row[3].iter().zip(&row[4]).enumerate() {
                    assert_eq!(s.parse::<u64>().unwrap(), seq + i as u64);
                    messages.push(hex_decode(d));
                }
                next += count;
            }
        }
    }
    eprintln!(
        "moldudp64 multicast: {data} data packets with sequences {first}..{next}, \
         {heartbeats} heartbeats, {ends} End of Session; {} messages in all",
        messages.len()
    );
    assert!(data > 0 && ends > 0, "data and End of Session multicast");
    assert_eq!(messages.len() as u64, next - 1);
    assert!(
        !answered.is_empty(),
        "the receiver re-requested what it lost"
    );
    for (seq, bytes) in &answered {
        assert_eq!(
            bytes,
            &messages[*seq as usize - 1],
            "re-request answer for {seq} equals the day's message"
        );
    }
    messages
}

/// itchfeed decodes every message (knows the type, size matches, re-encodes identically), its
/// counts per type equal ours, and its fields equal our decoder's.
fn check_itchfeed(python: &Path, file: &Path, messages: &[Vec<u8>]) {
    let out = run_python(python, "itch_decode.py", &[file.to_str().unwrap()]);
    eprintln!(
        "{}: {} messages, by type {}",
        out["decoder"], out["count"], out["by_type"]
    );
    assert_eq!(out["problems"], Value::Array(vec![]), "itchfeed problems");
    assert_eq!(out["count"], messages.len());
    assert_eq!(
        out["stream_count"],
        messages.len(),
        "itchfeed's own framing"
    );
    let mut ours: BTreeMap<String, u64> = BTreeMap::new();
    for m in messages {
        *ours.entry((m[0] as char).to_string()).or_default() += 1;
    }
    let theirs: BTreeMap<String, u64> = serde_json::from_value(out["by_type"].clone()).unwrap();
    assert_eq!(theirs, ours, "counts per type");
    for (i, (bytes, decoded)) in messages
        .iter()
        .zip(out["messages"].as_array().unwrap())
        .enumerate()
    {
        check_itch_fields(i + 1, bytes, decoded);
    }
}

/// An alpha field with its padding, as itchfeed's raw attributes hold it.
fn padded(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// One message: itchfeed's raw fields against bourse's decoder.
fn check_itch_fields(seq: usize, bytes: &[u8], v: &Value) {
    let m = itch::Message::decode(bytes).unwrap();
    let num = |name: &str| -> u64 {
        v[name]
            .as_u64()
            .unwrap_or_else(|| panic!("message {seq}: no {name} in {v}"))
    };
    let text = |name: &str| -> &str {
        v[name]
            .as_str()
            .unwrap_or_else(|| panic!("message {seq}: no {name} in {v}"))
    };
    let ch = |c: u8| (c as char).to_string();
    assert_eq!(text("type"), ch(bytes[0]), "message {seq}");
    assert_eq!(
        num("stock_locate"),
        u64::from(m.header.locate),
        "message {seq}"
    );
    assert_eq!(
        num("tracking_number"),
        u64::from(m.header.tracking),
        "message {seq}"
    );
    assert_eq!(num("timestamp"), m.header.timestamp.0, "message {seq}");
    let ctx = format!("message {seq}: {v}");
    match m.body {
        Body::SystemEvent { event } => assert_eq!(text("event_code"), ch(event), "{ctx}"),
        Body::StockDirectory(d) => assert_eq!(text("stock"), padded(&d.stock.0), "{ctx}"),
        Body::TradingAction { stock, state, .. } => {
            assert_eq!(text("stock"), padded(&stock.0), "{ctx}");
            assert_eq!(text("trading_state"), ch(state), "{ctx}");
        }
        Body::AddOrder {
            order_ref,
            side,
            shares,
            stock,
            price,
        } => {
            assert_eq!(num("order_reference_number"), order_ref.0, "{ctx}");
            assert_eq!(text("buy_sell_indicator"), ch(side), "{ctx}");
            assert_eq!(num("shares"), u64::from(shares.0), "{ctx}");
            assert_eq!(text("stock"), padded(&stock.0), "{ctx}");
            assert_eq!(num("price"), u64::from(price.0), "{ctx}");
        }
        Body::AddOrderMpid {
            order_ref,
            side,
            shares,
            stock,
            price,
            attribution,
        } => {
            assert_eq!(num("order_reference_number"), order_ref.0, "{ctx}");
            assert_eq!(text("buy_sell_indicator"), ch(side), "{ctx}");
            assert_eq!(num("shares"), u64::from(shares.0), "{ctx}");
            assert_eq!(text("stock"), padded(&stock.0), "{ctx}");
            assert_eq!(num("price"), u64::from(price.0), "{ctx}");
            assert_eq!(text("attribution"), padded(&attribution.0), "{ctx}");
        }
        Body::OrderExecuted {
            order_ref,
            shares,
            match_number,
        } => {
            assert_eq!(num("order_reference_number"), order_ref.0, "{ctx}");
            assert_eq!(num("executed_shares"), u64::from(shares.0), "{ctx}");
            assert_eq!(num("match_number"), match_number.0, "{ctx}");
        }
        Body::OrderCancel { order_ref, shares } => {
            assert_eq!(num("order_reference_number"), order_ref.0, "{ctx}");
            assert_eq!(num("cancelled_shares"), u64::from(shares.0), "{ctx}");
        }
        Body::OrderDelete { order_ref } => {
            assert_eq!(num("order_reference_number"), order_ref.0, "{ctx}");
        }
        Body::OrderReplace {
            old_ref,
            new_ref,
            shares,
            price,
        } => {
            assert_eq!(num("order_reference_number"), old_ref.0, "{ctx}");
            assert_eq!(num("new_order_reference_number"), new_ref.0, "{ctx}");
            assert_eq!(num("shares"), u64::from(shares.0), "{ctx}");
            assert_eq!(num("price"), u64::from(price.0), "{ctx}");
        }
        Body::Trade {
            order_ref,
            side,
            shares,
            stock,
            price,
            match_number,
        } => {
            assert_eq!(num("order_reference_number"), order_ref.0, "{ctx}");
            assert_eq!(text("buy_sell_indicator"), ch(side), "{ctx}");
            assert_eq!(num("shares"), u64::from(shares.0), "{ctx}");
            assert_eq!(text("stock"), padded(&stock.0), "{ctx}");
            assert_eq!(num("price"), u64::from(price.0), "{ctx}");
            assert_eq!(num("match_number"), match_number.0, "{ctx}");
        }
        other => panic!("message {seq}: scenario does not produce {other:?}"),
    }
}

/// itch-book rebuilds, from the captured feed up to the GLIMPSE snapshot's point, the same
/// displayed book the snapshot holds; over the whole day its invariants hold and the book
/// ends empty (end of day cancels everything).
fn check_itch_book(python: &Path, file: &Path, messages: &[Vec<u8>], session: &Session) {
    let upto = session.snapshot_next - 1;
    let at_snapshot = run_python(
        python,
        "rebuild_book.py",
        &[file.to_str().unwrap(), SESSION_DATE, &upto.to_string()],
    );
    let whole_day = run_python(
        python,
        "rebuild_book.py",
        &[file.to_str().unwrap(), SESSION_DATE],
    );
    eprintln!(
        "{} at ITCH {upto}: stats {}",
        at_snapshot["decoder"], at_snapshot["stats"]
    );
    eprintln!("  books {}", at_snapshot["books"]);
    eprintln!(
        "{} whole day: stats {}",
        whole_day["decoder"], whole_day["stats"]
    );

    let (glimpse, resting) = glimpse_depth(&session.snapshot);
    let rebuilt = itch_book_depth(&at_snapshot);
    eprintln!("GLIMPSE depth {glimpse:?}");
    assert_eq!(
        rebuilt, glimpse,
        "itch-book's book equals the GLIMPSE snapshot"
    );
    let symbols_with_both_sides = glimpse
        .values()
        .filter(|(b, a)| !b.is_empty() && !a.is_empty())
        .count();
    let shared_level = glimpse
        .values()
        .any(|(b, a)| b.iter().chain(a).any(|l| l.2 >= 2));
    assert!(
        symbols_with_both_sides >= 2 && resting >= 8 && shared_level,
        "a non-trivial book: {glimpse:?}"
    );

    for (json, live) in [(&at_snapshot, resting as u64), (&whole_day, 0)] {
        let stats = &json["stats"];
        for zero in [
            "missing_ref",
            "dup_ref",
            "crossed_books",
            "malformed",
            "unknown",
        ] {
            assert_eq!(stats[zero], 0, "itch-book {zero}: {stats}");
        }
        assert_eq!(stats["live_orders"], live, "itch-book live orders: {stats}");
        assert_eq!(stats["pending_bytes"], 0, "{stats}");
    }
    for (symbol, book) in itch_book_depth(&whole_day) {
        assert_eq!(
            book,
            (vec![], vec![]),
            "{symbol}: end of day leaves nothing"
        );
    }
    let count = |kinds: &[u8]| messages.iter().filter(|m| kinds.contains(&m[0])).count();
    assert_eq!(
        whole_day["stats"]["messages"],
        messages.len(),
        "{}",
        whole_day["stats"]
    );
    assert_eq!(whole_day["trades"], count(b"EP"), "trades = E + P");
    // BBO of each symbol as itch-book reports it, against the snapshot's best levels.
    for (symbol, (bids, asks)) in &glimpse {
        let bbo = &at_snapshot["books"][symbol]["bbo"];
        let best = |side: &[Level]| side.first().map_or(0, |l| l.0);
        assert_eq!(bbo["bid_px"], best(bids), "{symbol} bid: {bbo}");
        assert_eq!(bbo["ask_px"], best(asks), "{symbol} ask: {bbo}");
    }
}

/// Nasdaq's nasdaq-protocols SoupBinTCP client, with OUCH 4.2 generated from our ouch42.xml,
/// logs in (with its right-padded Login Request), enters, executes, is rejected, cancels, stays
/// up over idle time on our heartbeats, and decodes every reply field by field.
#[test]
fn nasdaq_protocols_client_logs_in_and_decodes_our_replies() {
    require_tool("tshark");
    require_tool("dumpcap");
    let python = python();
    let dir = tempfile::tempdir().unwrap();
    let gw = fixed_port();
    let text = config_with_ports(dir.path(), gw, fixed_port(), fixed_port());
    let capture = Capture::start(dir.path(), &format!("tcp port {gw}"));
    let venue = Venue::start(dir.path(), &text);
    let out = run_python(
        &python,
        "nasdaq_client.py",
        &["127.0.0.1", &gw.to_string(), "ALICE", "alicepw"],
    );
    assert!(venue.stop().success());
    let pcap = capture.stop();
    eprintln!(
        "{}: login accepted {}",
        out["client"], out["login_accepted"]
    );

    // The Login Request as nasdaq-protocols builds it: everything padded on the right.
    let login = out["login_request"].as_str().unwrap().as_bytes();
    assert_eq!(login.len(), 49);
    assert_eq!(
        &login[2..9],
        b"LALICE ",
        "type and user, padded on the right"
    );
    assert_eq!(&login[19..29], b"          ", "blank session");
    assert_eq!(
        &login[29..],
        format!("1{}", " ".repeat(19)).as_bytes(),
        "sequence"
    );
    assert_eq!(out["login_accepted"]["session"], "TEST000001");
    assert_eq!(out["login_accepted"]["sequence"], 1);
    assert_eq!(
        out["alive_after_idle"], true,
        "our heartbeats keep its session up"
    );
    assert_eq!(out["last_sequence"], 7);

    let m = out["messages"].as_array().unwrap();
    let kinds: Vec<&str> = m.iter().map(|m| m["type"].as_str().unwrap()).collect();
    assert_eq!(
        kinds,
        [
            "SystemEvent",
            "Accepted",
            "Accepted",
            "Executed",
            "Executed",
            "Rejected",
            "Canceled"
        ]
    );
    assert_eq!(m[0]["event_code"], "S");
    for (msg, token, side, shares, reference) in
        [(&m[1], "NP1", "B", 100, 1), (&m[2], "NP2", "S", 40, 2)]
    {
        assert_eq!(msg["order_token"], token, "{msg}");
        assert_eq!(msg["buy_sell_indicator"], side, "{msg}");
        assert_eq!(msg["shares"], shares, "{msg}");
        assert_eq!(msg["stock"], "AAPL", "{msg}");
        assert_eq!(msg["price"], 1_500_000, "{msg}");
        assert_eq!(msg["time_in_force"], 99_999, "{msg}");
        assert_eq!(msg["firm"], "FRMA", "{msg}");
        assert_eq!(msg["display"], "Y", "{msg}");
        assert_eq!(msg["order_reference_number"], reference, "{msg}");
        assert_eq!(msg["capacity"], "A", "{msg}");
        assert_eq!(msg["intermarket_sweep_eligibility"], "N", "{msg}");
        assert_eq!(msg["minimum_quantity"], 0, "{msg}");
        assert_eq!(msg["cross_type"], "N", "{msg}");
        assert_eq!(msg["order_state"], "L", "{msg}");
        assert_eq!(msg["bbo_weight_indicator"], " ", "{msg}");
    }
    for (msg, token, flag) in [(&m[3], "NP2", "R"), (&m[4], "NP1", "A")] {
        assert_eq!(msg["order_token"], token, "{msg}");
        assert_eq!(msg["executed_shares"], 40, "{msg}");
        assert_eq!(msg["execution_price"], 1_500_000, "{msg}");
        assert_eq!(msg["liquidity_flag"], flag, "{msg}");
        assert_eq!(msg["match_number"], 1, "{msg}");
    }
    assert_eq!(
        (&m[5]["order_token"], &m[5]["reason"]),
        (&"NP3".into(), &"S".into())
    );
    assert_eq!(m[6]["order_token"], "NP1");
    assert_eq!(m[6]["decrement_shares"], 60);
    assert_eq!(m[6]["reason"], "U");
    // The re-login asked for sequence 5, right-padded: Login Accepted says 5 and the replay
    // is messages 5..=7, identical.
    assert_eq!(
        out["relogin_accepted"]["sequence"], 5,
        "{}",
        out["relogin_accepted"]
    );
    assert_eq!(out["replayed"].as_array().unwrap(), &m[4..].to_vec());
    let timestamps: Vec<u64> = m.iter().map(|m| m["timestamp"].as_u64().unwrap()).collect();
    assert!(
        timestamps.windows(2).all(|w| w[0] <= w[1]),
        "{timestamps:?}"
    );

    // On the wire, per tshark: the same Login Request bytes, accepted; heartbeats both ways;
    // the logout. tshark 4.0 marks that right-padded Login Request malformed (it parses the
    // sequence right-justified) and nothing else.
    let tshark = Tshark {
        path: pcap,
        decode: vec![format!("tcp.port=={gw},soupbintcp")],
    };
    let rows = tshark.fields(
        "soupbintcp",
        &["tcp.srcport", "soupbintcp.packet_type", "tcp.payload"],
    );
    let mut client = Vec::new();
    let mut server = Vec::new();
    let mut logins = Vec::new();
    for row in &rows {
        if row[0][0] == gw.to_string() {
            server.extend(row[1].iter().cloned());
        } else {
            client.extend(row[1].iter().cloned());
            if row[1].first().map(String::as_str) == Some("L") {
                logins.push(hex_decode(&row[2][0]));
            }
        }
    }
    assert_eq!(logins.len(), 2);
    assert_eq!(logins[0], login, "the Login Request on the wire");
    assert_eq!(
        &logins[1][19..29],
        b"TEST000001",
        "re-login names the session"
    );
    assert_eq!(
        &logins[1][29..],
        format!("5{}", " ".repeat(19)).as_bytes(),
        "re-login sequence, padded on the right"
    );
    eprintln!("nasdaq-protocols client sent {client:?}");
    eprintln!("bourse sent {server:?}");
    let count = |v: &[String], t: &str| v.iter().filter(|x| *x == t).count();
    assert_eq!(client.first().map(String::as_str), Some("L"));
    assert_eq!(count(&client, "L"), 2, "login and re-login");
    assert_eq!(count(&client, "U"), 4);
    assert_eq!(count(&client, "O"), 2, "two logouts");
    assert_eq!(server.first().map(String::as_str), Some("A"));
    assert_eq!(count(&server, "A"), 2, "both logins accepted");
    assert_eq!(
        count(&server, "S"),
        7 + 3,
        "the session, then the replay from 5"
    );
    assert!(server.iter().any(|t| t == "H"), "server heartbeats");
    let flagged = tshark.fields(GATE, &["soupbintcp.packet_type"]);
    assert_eq!(
        flagged,
        [[["L".to_string()]], [["L".to_string()]]],
        "only the right-padded Login Requests are flagged (tshark's own reading)"
    );
}
