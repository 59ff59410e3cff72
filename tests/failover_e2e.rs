//! Hot standby and failover with real processes: kill -9 the primary under load, the standby
//! takes over, brokers re-log in and resend, nothing acknowledged is lost or duplicated, and
//! everything equals offline replay of the surviving journal.

mod common;

use bourse::client::{OuchClient, Received};
use bourse::daemon::admin::Request;
use bourse::wire::ouch::{Inbound, Outbound};
use common::{FeedCollector, Proxy, Standby, TIMEOUT, Venue, bourse, config_full, unique_group};
use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

const ACCOUNTS: [(&str, &str); 3] = [("ALICE", "alicepw"), ("BOB", "bobpw"), ("CAROL", "carolpw")];

fn enter(token: &str, side: u8, shares: u32, price: u32) -> Inbound {
    common::day_order(token, side, shares, "AAPL", price)
}

/// One broker: sends orders, remembers everything it received and what it is unsure about.
struct Broker {
    index: usize,
    received: Vec<(u64, Outbound)>,
    sent: Vec<String>,
    accepted: BTreeSet<String>,
}

impl Broker {
    fn absorb(&mut self, messages: Vec<(u64, Outbound)>) {
        for (seq, m) in messages {
            assert_eq!(
                seq,
                self.received.len() as u64 + 1,
                "account {} sequence numbers are contiguous",
                self.index
            );
            if let Outbound::Accepted(a) = &m {
                let token = a.token.trimmed().into_owned();
                assert!(
                    self.accepted.insert(token.clone()),
                    "token {token} accepted twice"
                );
            }
            self.received.push((seq, m));
        }
    }

    /// Send orders until the connection breaks or `stop` is set; returns whether it broke.
    fn trade(&mut self, client: &mut OuchClient, stop: &AtomicBool, round: &str) -> bool {
        for n in 0..100_000u32 {
            if stop.load(Ordering::Relaxed) {
                return false;
            }
            let token = format!("{round}{}-{n}", self.index);
            let side = if (n + self.index as u32).is_multiple_of(2) {
                b'B'
            } else {
                b'S'
            };
            let price = 100_000 + (n % 5) * 100;
            self.sent.push(token.clone());
            if client.send(&enter(&token, side, 100, price)).is_err() {
                return true;
            }
            match client.recv_messages(1, Duration::from_millis(500)) {
                Ok(m) if !m.is_empty() => {
                    self.absorb(m);
                    if let Ok(more) = client.recv_messages(2, Duration::from_millis(2)) {
                        self.absorb(more);
                    }
                }
                _ => return true,
            }
        }
        false
    }
}

fn standby_config(
    dir: &std::path::Path,
    group: std::net::SocketAddrV4,
    primary: std::net::SocketAddr,
    admin: std::net::SocketAddr,
) -> String {
    config_full(
        dir,
        "",
        group,
        &format!(
            "primary = \"{primary}\"\nprimary_admin = \"{admin}\"\ntakeover_ms = 500\nheartbeat_ms = 50"
        ),
    )
}

/// [`standby_config`] with `replication_extra` added to its `[replication]` section.
fn standby_config_with(
    dir: &std::path::Path,
    group: std::net::SocketAddrV4,
    primary: &Venue,
    replication_extra: &str,
) -> String {
    standby_config(dir, group, primary.replication, primary.admin).replace(
        "heartbeat_ms = 50",
        &format!("heartbeat_ms = 50\n{replication_extra}"),
    )
}

fn replicated(text: String) -> String {
    text.replace("durability = \"flush\"", "durability = \"replicated\"")
}

fn login_retry(venue: &Venue, user: &str, pw: &str, seq: u64) -> OuchClient {
    let deadline = Instant::now() + TIMEOUT;
    loop {
        match OuchClient::login(venue.gateway, user, pw, "TEST000001", seq, TIMEOUT) {
            Ok(c) => return c,
            Err(e) if Instant::now() < deadline => {
                let _ = e;
                std::thread::sleep(Duration::from_millis(20));
            }
            Err(e) => panic!("login to the new primary: {e}"),
        }
    }
}

/// One trial: kill -9 the primary after `run_for` under load from three brokers.
fn kill_primary_under_load(run_for: Duration) {
    let primary_dir = tempfile::tempdir().unwrap();
    let standby_dir = tempfile::tempdir().unwrap();
    let group = unique_group();
    let primary = Venue::start(
        primary_dir.path(),
        &replicated(config_full(
            primary_dir.path(),
            "",
            group,
            "heartbeat_ms = 50",
        )),
    );
    let mut standby = Standby::start(
        standby_dir.path(),
        &standby_config(
            standby_dir.path(),
            group,
            primary.replication,
            primary.admin,
        ),
    );
    let mut feed_before = FeedCollector::join(&primary);

    let stop = Arc::new(AtomicBool::new(false));
    let mut threads = Vec::new();
    for (index, (user, pw)) in ACCOUNTS.iter().enumerate() {
        let (addr, stop) = (primary.gateway, stop.clone());
        threads.push(std::thread::spawn(move || {
            let mut broker = Broker {
                index,
                received: Vec::new(),
                sent: Vec::new(),
                accepted: BTreeSet::new(),
            };
            let mut client = OuchClient::login(addr, user, pw, "", 1, TIMEOUT).unwrap();
            broker.trade(&mut client, &stop, "P");
            broker
        }));
    }
    std::thread::sleep(run_for);
    feed_before.run_until_end(Duration::from_millis(50));
    let killed_at = Instant::now();
    primary.kill9();
    let new_primary = standby
        .await_takeover(Duration::from_secs(10))
        .expect("the standby takes over");
    let takeover = killed_at.elapsed();
    let mut brokers: Vec<Broker> = threads.into_iter().map(|t| t.join().unwrap()).collect();
    let first_login = Instant::now();
    let mut clients: Vec<OuchClient> = brokers
        .iter()
        .map(|b| {
            let (user, pw) = ACCOUNTS[b.index];
            login_retry(&new_primary, user, pw, b.received.len() as u64 + 1)
        })
        .collect();
    eprintln!(
        "takeover: {} ms from kill -9 to the new primary listening; first login {} ms later",
        takeover.as_millis(),
        first_login.elapsed().as_millis()
    );
    assert!(
        takeover < Duration::from_secs(3),
        "takeover took {takeover:?}"
    );
    // Benign resend of every order not yet seen accepted: same tokens, never duplicated.
    for (b, c) in brokers.iter_mut().zip(clients.iter_mut()) {
        let missing = c.recv_messages(10_000, Duration::from_millis(300)).unwrap();
        b.absorb(missing);
        let unsure: Vec<String> = b
            .sent
            .iter()
            .filter(|t| !b.accepted.contains(*t))
            .cloned()
            .collect();
        for token in &unsure {
            c.send(&enter(token, b'B', 100, 99_000)).unwrap();
        }
        let replies = c
            .recv_messages(unsure.len(), Duration::from_secs(2))
            .unwrap();
        b.absorb(replies);
        assert!(
            b.sent.iter().all(|t| b.accepted.contains(t)),
            "every order sent is accepted exactly once"
        );
    }
    assert_eq!(new_primary.ask_admin(&Request::EndOfDay), "ok end-of-day");
    // Sessions stay open after end of day (DESIGN.md 4): read up to its System Event `E`.
    for (b, c) in brokers.iter_mut().zip(clients.iter_mut()) {
        loop {
            match c.recv(TIMEOUT).unwrap() {
                Some(Received::Sequenced(seq, m)) => {
                    let end = matches!(m, Outbound::SystemEvent(e) if e.event == b'E');
                    b.absorb(vec![(seq, m)]);
                    if end {
                        break;
                    }
                }
                Some(Received::Heartbeat) => {}
                other => panic!("{other:?}"),
            }
        }
    }
    // The new primary's ITCH store holds every message the old primary published, same numbers.
    let mut after = FeedCollector::join(&new_primary);
    after.run_until_end(Duration::from_secs(10));
    assert!(after.ended);
    for (i, m) in feed_before.messages.iter().enumerate() {
        assert_eq!(
            &after.messages[i],
            m,
            "ITCH message {} differs after failover",
            i + 1
        );
    }
    let journal = new_primary.journal.clone();
    assert!(new_primary.stop().success());
    let (ok, out) = bourse(&["replay", "--journal", journal.to_str().unwrap()]);
    assert!(ok, "{out}");
    for b in &brokers {
        let mut h = bourse::replay::StreamHasher::default();
        for (_, m) in &b.received {
            let mut buf = [0u8; 96];
            let n = m.encode(&mut buf);
            h.add(&buf[..n]);
        }
        let line = out
            .lines()
            .find(|l| l.starts_with(&format!("ouch {} ", ACCOUNTS[b.index].0)))
            .unwrap();
        assert!(
            line.ends_with(&h.digest().to_string()),
            "account {}: {line}",
            b.index
        );
    }
    let itch_line = out.lines().find(|l| l.starts_with("itch ")).unwrap();
    let mut h = bourse::replay::StreamHasher::default();
    after.messages.iter().for_each(|m| h.add(m));
    assert!(itch_line.ends_with(&h.digest().to_string()), "{itch_line}");
}

#[test]
fn kill9_the_primary_under_load_twice() {
    let trials: u32 = std::env::var("FAILOVER_TRIALS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2);
    for trial in 0..trials {
        let run_for = Duration::from_millis(150 + (trial as u64 * 137) % 400);
        eprintln!("trial {trial}: killing the primary after {run_for:?}");
        kill_primary_under_load(run_for);
    }
}

#[test]
fn cutting_the_replication_link_does_not_make_two_primaries() {
    let primary_dir = tempfile::tempdir().unwrap();
    let standby_dir = tempfile::tempdir().unwrap();
    let group = unique_group();
    let primary = Venue::start(
        primary_dir.path(),
        &config_full(primary_dir.path(), "", group, "heartbeat_ms = 50"),
    );
    let proxy = Proxy::start(primary.replication);
    let mut standby = Standby::start(
        standby_dir.path(),
        &standby_config(standby_dir.path(), group, proxy.addr, primary.admin),
    );
    let mut alice = OuchClient::login(primary.gateway, "ALICE", "alicepw", "", 1, TIMEOUT).unwrap();
    alice.send(&enter("L1", b'B', 100, 100_000)).unwrap();
    assert_eq!(alice.recv_messages(2, TIMEOUT).unwrap().len(), 2);
    std::thread::sleep(Duration::from_millis(200));
    proxy.cut();
    assert!(
        standby
            .await_takeover(Duration::from_millis(2_000))
            .is_none(),
        "a standby cut off from a live primary must not take over"
    );
    alice.send(&enter("L2", b'B', 100, 100_000)).unwrap();
    assert_eq!(
        alice.recv_messages(1, TIMEOUT).unwrap().len(),
        1,
        "the primary keeps trading"
    );
    primary.kill9();
    let new_primary = standby
        .await_takeover(Duration::from_secs(5))
        .expect("takes over once the primary is really gone");
    let mut again =
        OuchClient::login(new_primary.gateway, "ALICE", "alicepw", "", 1, TIMEOUT).unwrap();
    let replayed = again.recv_messages(2, TIMEOUT).unwrap();
    assert_eq!(replayed.len(), 2, "it has what it received before the cut");
}

#[test]
fn the_old_primary_rejoins_as_a_standby_and_drops_what_the_new_primary_never_had() {
    let old_dir = tempfile::tempdir().unwrap();
    let new_dir = tempfile::tempdir().unwrap();
    let group = unique_group();
    let async_mode = |t: String| t.replace("durability = \"flush\"", "durability = \"async\"");
    let old = Venue::start(
        old_dir.path(),
        &async_mode(config_full(old_dir.path(), "", group, "heartbeat_ms = 50")),
    );
    let proxy = Proxy::start(old.replication);
    let mut standby = Standby::start(
        new_dir.path(),
        &standby_config(new_dir.path(), group, proxy.addr, old.admin),
    );
    let mut alice = OuchClient::login(old.gateway, "ALICE", "alicepw", "", 1, TIMEOUT).unwrap();
    alice.send(&enter("C1", b'B', 100, 100_000)).unwrap();
    assert_eq!(alice.recv_messages(2, TIMEOUT).unwrap().len(), 2);
    std::thread::sleep(Duration::from_millis(200));
    proxy.cut();
    std::thread::sleep(Duration::from_millis(100));
    for t in ["X1", "X2", "X3"] {
        alice.send(&enter(t, b'S', 100, 101_000)).unwrap();
    }
    assert_eq!(
        alice.recv_messages(3, TIMEOUT).unwrap().len(),
        3,
        "only the old primary has these"
    );
    let old_journal = old.journal.clone();
    old.kill9();
    let new = standby
        .await_takeover(Duration::from_secs(5))
        .expect("takeover");
    let mut alice = OuchClient::login(new.gateway, "ALICE", "alicepw", "", 3, TIMEOUT).unwrap();
    alice.send(&enter("Y1", b'S', 100, 102_000)).unwrap();
    alice.send(&enter("Y2", b'S', 100, 103_000)).unwrap();
    assert_eq!(alice.recv_messages(2, TIMEOUT).unwrap().len(), 2);

    // The old primary's directory comes back as a standby of the new primary.
    let rejoin_dir = old_dir.path().join("rejoin");
    std::fs::create_dir(&rejoin_dir).unwrap();
    let mut text = standby_config(&rejoin_dir, group, new.replication, new.admin);
    text = text.replace(
        &format!("dir = \"{}\"", rejoin_dir.join("journal").display()),
        &format!("dir = \"{}\"", old_journal.display()),
    );
    let rejoined = Standby::start(&rejoin_dir, &text);
    assert_eq!(new.ask_admin(&Request::EndOfDay), "ok end-of-day");
    let new_journal = new.journal.clone();
    // Wait until the rejoined standby has caught up: same digests as the new primary.
    let deadline = Instant::now() + Duration::from_secs(10);
    // In a child process: the rejoining standby cuts the old journal while this reads it,
    // and a segment emptied under a reader's mapping is a SIGBUS in that reader (the test
    // process itself, in an in-process replay); a failed child is just "not caught up yet".
    let digest = |dir: &std::path::Path| {
        let (ok, out) = bourse(&["replay", "--journal", dir.to_str().unwrap()]);
        ok.then(|| out.lines().skip(1).map(str::to_string).collect::<Vec<_>>())
    };
    while digest(&old_journal) != digest(&new_journal) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    drop(rejoined);
    assert!(new.stop().success());
    let (ok_new, out_new) = bourse(&["replay", "--journal", new_journal.to_str().unwrap()]);
    let (ok_old, out_old) = bourse(&["replay", "--journal", old_journal.to_str().unwrap()]);
    assert!(ok_new && ok_old, "{out_new}\n{out_old}");
    let digests = |out: &str| out.lines().skip(1).map(str::to_string).collect::<Vec<_>>();
    assert_eq!(
        digests(&out_old),
        digests(&out_new),
        "the rejoined journal equals the new primary's"
    );
    assert!(!out_old.contains("X1"));
}

/// A `replicated` primary with no standby holds every batch until one confirms it, and once
/// as many batches wait as it tracks (64) it reads no more orders. An operator's command and
/// a broker's dropped connection still reached it then, each journaled as one more batch past
/// that bound: the daemon panicked (exit 101), and any broker of an account that cancels on
/// disconnect could make it. Now the command is refused with the reason, the disconnect waits
/// until there is room, and both go through once a standby has confirmed what waits.
#[test]
fn a_primary_holding_its_batches_refuses_admin_and_defers_a_drop_instead_of_panicking() {
    let primary_dir = tempfile::tempdir().unwrap();
    let standby_dir = tempfile::tempdir().unwrap();
    let group = unique_group();
    let accounts = "[[accounts]]\nusername = \"DROPPY\"\npassword = \"droppypw\"\nfirm = \"FRMD\"\ncancel_on_disconnect = true\n";
    let mut primary = Venue::start(
        primary_dir.path(),
        &replicated(config_full(
            primary_dir.path(),
            accounts,
            group,
            "heartbeat_ms = 50",
        )),
    );
    let mut droppy =
        OuchClient::login(primary.gateway, "DROPPY", "droppypw", "", 1, TIMEOUT).unwrap();
    droppy.send(&enter("D1", b'S', 100, 200_000)).unwrap();
    let mut alice = OuchClient::login(primary.gateway, "ALICE", "alicepw", "", 1, TIMEOUT).unwrap();
    // One order at a time, 10 ms apart: each its own batch, none released.
    let orders = 100;
    for n in 0..orders {
        alice
            .send(&enter(&format!("H{n}"), b'B', 100, 100_000))
            .unwrap();
        std::thread::sleep(Duration::from_millis(10));
    }
    let status = primary.ask_admin(&Request::Status);
    eprintln!("holding: {status}");
    assert!(status.contains("held_batches=64"), "{status}");
    let halt = primary.ask_admin(&Request::Halt("AAPL".into()));
    assert!(halt.starts_with("error busy:"), "{halt}");
    // An abrupt end (a reset) of a session whose account cancels on disconnect.
    let (stream, _) = droppy.into_parts();
    socket2::SockRef::from(&stream)
        .set_linger(Some(Duration::ZERO))
        .unwrap();
    drop(stream);
    // The gateway reads no held session, so it learns of the reset when its next heartbeat
    // (every second) fails.
    std::thread::sleep(Duration::from_millis(1_500));
    assert!(
        primary.child.try_wait().unwrap().is_none(),
        "the primary died while holding its batches"
    );
    assert!(primary.ask_admin(&Request::Status).starts_with("ok "));
    // A standby confirms what waits: everything is released and the venue takes input again.
    let following = format!(
        "primary = \"{}\"\nprimary_admin = \"{}\"\nheartbeat_ms = 50",
        primary.replication, primary.admin
    );
    let _standby = Standby::start(
        standby_dir.path(),
        &config_full(standby_dir.path(), accounts, group, &following),
    );
    let replies = alice.recv_messages(orders + 1, TIMEOUT).unwrap();
    assert_eq!(replies.len(), orders + 1, "start of day and every Accepted");
    let deadline = Instant::now() + TIMEOUT;
    let halt = loop {
        let answer = primary.ask_admin(&Request::Halt("AAPL".into()));
        if !answer.starts_with("error busy:") || Instant::now() > deadline {
            break answer;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(halt, "ok halt AAPL");
    // DROPPY's order was canceled for the dropped connection (reason Z), once there was room.
    let mut again =
        OuchClient::login(primary.gateway, "DROPPY", "droppypw", "", 1, TIMEOUT).unwrap();
    let replayed = again.recv_messages(3, TIMEOUT).unwrap();
    let canceled = replayed
        .iter()
        .any(|(_, m)| matches!(m, Outbound::Canceled(c) if c.reason == b'Z'));
    assert!(canceled, "{replayed:?}");
}

const PAIR_SECRET: &str = "secret = \"the pair's shared secret\"";

/// A primary with [`PAIR_SECRET`] that has acknowledged ALICE's order `L1`.
fn primary_with_the_secret_and_an_order(
    dir: &std::path::Path,
    group: std::net::SocketAddrV4,
) -> Venue {
    let text = config_full(dir, "", group, &format!("heartbeat_ms = 50\n{PAIR_SECRET}"));
    let primary = Venue::start(dir, &text);
    let mut alice = OuchClient::login(primary.gateway, "ALICE", "alicepw", "", 1, TIMEOUT).unwrap();
    alice.send(&enter("L1", b'B', 100, 100_000)).unwrap();
    assert_eq!(alice.recv_messages(2, TIMEOUT).unwrap().len(), 2);
    primary
}

/// Kill `primary` (made by [`primary_with_the_secret_and_an_order`]) once `standby` has had
/// time to follow it; `standby` takes over and replays ALICE's order to her. The new primary.
fn kill_and_take_over_with_the_order(primary: Venue, standby: &mut Standby, why: &str) -> Venue {
    std::thread::sleep(Duration::from_millis(500));
    primary.kill9();
    let new_primary = standby.await_takeover(Duration::from_secs(5)).expect(why);
    let mut again =
        OuchClient::login(new_primary.gateway, "ALICE", "alicepw", "", 1, TIMEOUT).unwrap();
    assert_eq!(again.recv_messages(2, TIMEOUT).unwrap().len(), 2);
    new_primary
}

/// `bourse standby` with config `text` written in `dir`, its log (stderr) on a pipe.
fn standby_logging_to_a_pipe(dir: &std::path::Path, text: &str) -> std::process::Child {
    let config = dir.join("bourse.toml");
    std::fs::write(&config, text).unwrap();
    std::process::Command::new(common::bourse_binary())
        .args(["standby", "--config"])
        .arg(&config)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap()
}

/// Everything the replication port sends `stream` until it closes (a reset counts as closed).
fn read_all(mut stream: std::net::TcpStream) -> Vec<u8> {
    use std::io::Read;
    stream.set_read_timeout(Some(TIMEOUT)).unwrap();
    let mut got = Vec::new();
    let _ = stream.read_to_end(&mut got);
    got
}

/// With `[replication] secret` the port that hands out every account's orders answers only a
/// standby that proves the secret: a plain client saying Hello and a client with another
/// secret get no byte of journal, a standby with another secret stops with a clear error, and
/// the standby with the secret follows and takes over.
#[test]
fn with_a_replication_secret_only_a_standby_that_knows_it_gets_the_journal() {
    use bourse::replication::protocol::{AUTH, Frame, VERSION};
    use std::io::Write;
    let primary_dir = tempfile::tempdir().unwrap();
    let group = unique_group();
    let primary = primary_with_the_secret_and_an_order(primary_dir.path(), group);

    // A Hello as an unauthenticated standby sends it (padded past the authentication
    // hello's length, so the refusal comes at once rather than after the timeout).
    let mut hello = Vec::new();
    let frame = Frame::Hello {
        version: VERSION,
        tail: Vec::new(),
        day_epoch_unix_ns: 0,
    };
    frame.write(&mut hello).unwrap();
    hello.resize(256, 0);
    let mut plain = std::net::TcpStream::connect(primary.replication).unwrap();
    plain.write_all(&hello).unwrap();
    assert_eq!(
        read_all(plain),
        b"",
        "a Hello without the secret gets nothing"
    );

    // Another secret: the server's proof does not verify, and what follows gets nothing.
    let mut wrong = std::net::TcpStream::connect(primary.replication).unwrap();
    wrong.set_read_timeout(Some(TIMEOUT)).unwrap();
    let refused =
        bourse::peer_auth::client(&mut wrong, b"not the pair's secret at all", AUTH, 0, 0);
    assert!(refused.unwrap_err().to_string().contains("does not know"));
    let _ = wrong.write_all(&hello);
    let got = read_all(wrong);
    assert!(got.is_empty(), "a wrong proof got {} bytes", got.len());

    // A standby configured with another secret stops instead of following or taking over.
    let wrong_dir = tempfile::tempdir().unwrap();
    let text = standby_config_with(
        wrong_dir.path(),
        group,
        &primary,
        "secret = \"another secret, long enough\"",
    );
    let mut child = standby_logging_to_a_pipe(wrong_dir.path(), &text);
    let (status, stderr) = common::exited(&mut child, TIMEOUT).expect("the standby stops");
    assert!(!status.success());
    assert!(stderr.contains("failed authentication"), "{stderr}");

    // The standby with the secret follows, and has the order when it takes over.
    let standby_dir = tempfile::tempdir().unwrap();
    let text = standby_config_with(standby_dir.path(), group, &primary, PAIR_SECRET);
    let mut standby = Standby::start(standby_dir.path(), &text);
    kill_and_take_over_with_the_order(primary, &mut standby, "takes over once the primary is gone");
}

/// A standby reads its `[replication] secret_file` once, at start: one whose file is gone by
/// the time the primary dies still takes over (and serves its own replication port with the
/// secret). It used to read the file again when taking over, failed, and left no primary.
#[test]
fn a_standby_takes_over_with_the_secret_it_read_at_start() {
    let primary_dir = tempfile::tempdir().unwrap();
    let group = unique_group();
    let primary = primary_with_the_secret_and_an_order(primary_dir.path(), group);

    let standby_dir = tempfile::tempdir().unwrap();
    let secret_file = standby_dir.path().join("pair.secret");
    std::fs::write(&secret_file, "the pair's shared secret\n").unwrap();
    let text = standby_config_with(
        standby_dir.path(),
        group,
        &primary,
        &format!("secret_file = {:?}", secret_file.display().to_string()),
    );
    let mut standby = Standby::start(standby_dir.path(), &text);
    std::fs::remove_file(&secret_file).unwrap();
    let new_primary = kill_and_take_over_with_the_order(
        primary,
        &mut standby,
        "takes over without reading the secret file again",
    );
    // Its replication port asks for the same secret.
    let mut wrong = std::net::TcpStream::connect(new_primary.replication).unwrap();
    wrong.set_read_timeout(Some(TIMEOUT)).unwrap();
    let proof = bourse::peer_auth::client(
        &mut wrong,
        b"the pair's shared secret",
        bourse::replication::protocol::AUTH,
        0,
        0,
    );
    assert!(
        proof.is_ok(),
        "the new primary proves the secret: {proof:?}"
    );
}

/// When only one side of a pair has `[replication] secret`, the standby's log says which
/// side lacks it (it used to say only that the handshake failed).
#[test]
fn a_secret_on_one_side_only_is_named_in_the_standbys_log() {
    let group = unique_group();
    for (primary_has, hint) in [
        (
            true,
            "a primary with [replication] secret waits for a proof this standby does not send",
        ),
        (
            false,
            "if the primary has no [replication] secret it cannot answer this",
        ),
    ] {
        let primary_dir = tempfile::tempdir().unwrap();
        let extra = if primary_has { PAIR_SECRET } else { "" };
        let primary = Venue::start(
            primary_dir.path(),
            &config_full(
                primary_dir.path(),
                "",
                group,
                &format!("heartbeat_ms = 50\n{extra}"),
            ),
        );
        let standby_dir = tempfile::tempdir().unwrap();
        let standby_has = if primary_has { "" } else { PAIR_SECRET };
        let text = standby_config_with(standby_dir.path(), group, &primary, standby_has);
        let mut child = standby_logging_to_a_pipe(standby_dir.path(), &text);
        // The first failed handshake is logged once it fails (a 2 s timeout at most).
        let stderr = child.stderr.take().unwrap();
        let (lines, received) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            use std::io::BufRead;
            for line in std::io::BufReader::new(stderr)
                .lines()
                .map_while(Result::ok)
            {
                if lines.send(line).is_err() {
                    break;
                }
            }
        });
        let deadline = Instant::now() + Duration::from_secs(15);
        let mut seen = String::new();
        let found = std::iter::from_fn(|| {
            let left = deadline.saturating_duration_since(Instant::now());
            received.recv_timeout(left).ok()
        })
        .any(|line| {
            seen.push_str(&line);
            seen.push('\n');
            line.contains(hint)
        });
        let _ = child.kill();
        let _ = child.wait();
        assert!(found, "primary has a secret: {primary_has}\n{seen}");
    }
}
