//! A cluster of three real `bourse run` processes on loopback (issue 11): real TCP between the
//! members (through proxies a test can cut), real brokers over SoupBinTCP, the real
//! `bourse-feed --check` on the multicast feed. Each scenario ends with exactly one member
//! answering `admin status` as the serving leader, the feed check passing, every broker's
//! acknowledged order in the surviving journal exactly once, and every member's journal
//! replaying to the same digests.
//!
//! `FAILOVER_TRIALS=20` runs the long kill -9 series (default 2).

mod common;

use bourse::client::{OuchClient, Received};
use bourse::daemon::admin::{self, Request, Secret};
use bourse::types::{Alpha, Firm, Price, Shares};
use bourse::wire::ouch::{EnterOrder, Inbound, Outbound};
use common::{Running, args, bourse_bin, spawn, unique_group};
use std::collections::BTreeSet;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Shutdown, SocketAddr, SocketAddrV4, TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const FEED: &str = env!("CARGO_BIN_EXE_bourse-feed");
const SECRET: &str = "the cluster e2e secret, 32 bytes";
const ACCOUNTS: [(&str, &str); 4] = [
    ("ALICE", "alicepw"),
    ("BOB", "bobpw"),
    ("CAROL", "carolpw"),
    ("DAVE", "davepw"),
];
const TIMEOUT: Duration = Duration::from_secs(5);

// A member binds its serving ports only while it leads: they are fixed, below the ephemeral
// range.
#[path = "../../tests/common/ports.rs"]
mod ports;
use ports::fixed_port;

fn loopback(port: u16) -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], port))
}

/// A TCP forwarder for one direction of one member link; cutting it closes what it carries
/// and refuses new connections until healed.
struct LinkProxy {
    addr: SocketAddr,
    cut: Arc<AtomicBool>,
    live: Arc<Mutex<Vec<TcpStream>>>,
}

impl LinkProxy {
    fn start(target: SocketAddr) -> LinkProxy {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let cut = Arc::new(AtomicBool::new(false));
        let live = Arc::new(Mutex::new(Vec::new()));
        let (flag, streams) = (cut.clone(), live.clone());
        std::thread::spawn(move || {
            for client in listener.incoming() {
                let Ok(client) = client else { break };
                if flag.load(Ordering::Relaxed) {
                    continue; // cut: dropped at once
                }
                let Ok(server) = TcpStream::connect_timeout(&target, Duration::from_millis(200))
                else {
                    continue;
                };
                {
                    let mut live = streams.lock().unwrap();
                    live.retain(|s: &TcpStream| s.peer_addr().is_ok());
                    live.push(client.try_clone().unwrap());
                    live.push(server.try_clone().unwrap());
                }
                for (mut from, mut to) in [
                    (client.try_clone().unwrap(), server.try_clone().unwrap()),
                    (server, client),
                ] {
                    let flag = flag.clone();
                    std::thread::spawn(move || {
                        let mut buf = vec![0u8; 64 << 10];
                        from.set_read_timeout(Some(Duration::from_millis(50)))
                            .unwrap();
                        while !flag.load(Ordering::Relaxed) {
                            match from.read(&mut buf) {
                                Ok(0) => break,
                                Ok(n) => {
                                    if to.write_all(&buf[..n]).is_err() {
                                        break;
                                    }
                                }
                                Err(e)
                                    if matches!(
                                        e.kind(),
                                        std::io::ErrorKind::WouldBlock
                                            | std::io::ErrorKind::TimedOut
                                    ) => {}
                                Err(_) => break,
                            }
                        }
                        let _ = to.shutdown(Shutdown::Both);
                        let _ = from.shutdown(Shutdown::Both);
                    });
                }
            }
        });
        LinkProxy { addr, cut, live }
    }

    fn cut(&self) {
        self.cut.store(true, Ordering::Relaxed);
        for stream in self.live.lock().unwrap().drain(..) {
            let _ = stream.shutdown(Shutdown::Both);
        }
    }

    fn heal(&self) {
        self.cut.store(false, Ordering::Relaxed);
    }
}

struct Member {
    id: usize,
    dir: PathBuf,
    config: PathBuf,
    gateway: SocketAddr,
    rerequest: SocketAddr,
    admin: Option<SocketAddr>,
    child: Option<Child>,
    /// SIGSTOPped: its admin port does not answer.
    stopped: bool,
    starts: u32,
}

impl Member {
    fn log(&self) -> String {
        let mut all = String::new();
        for start in 1..=self.starts {
            let path = self.dir.join(format!("bourse.{start}.log"));
            all.push_str(&std::fs::read_to_string(path).unwrap_or_default());
        }
        all
    }

    fn pid(&self) -> i32 {
        self.child.as_ref().expect("running").id() as i32
    }

    fn signal(&self, signal: i32) {
        // SAFETY: kill(2) on our own child's pid.
        let rc = unsafe { libc::kill(self.pid(), signal) };
        assert_eq!(rc, 0, "kill failed");
    }

    /// SIGSTOP, and wait until the kernel reports it stopped (state `T`).
    fn pause(&mut self) {
        self.signal(libc::SIGSTOP);
        self.stopped = true;
        let stat = format!("/proc/{}/stat", self.pid());
        let deadline = Instant::now() + TIMEOUT;
        loop {
            let text = std::fs::read_to_string(&stat).unwrap();
            // `pid (comm) state ...`
            let state = text
                .rsplit(')')
                .next()
                .and_then(|r| r.split_whitespace().next());
            if state == Some("T") {
                return;
            }
            assert!(Instant::now() < deadline, "not stopped: {text}");
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    fn secret(&self) -> Secret {
        Secret::load(&self.dir.join("journal.admin-secret")).expect("the member's admin secret")
    }

    fn ask(&self, request: &Request, timeout: Duration) -> Result<String, String> {
        let addr = self.admin.ok_or("not started")?;
        admin::send(addr, &self.secret(), request, timeout).map_err(|e| e.to_string())
    }

    fn status(&self) -> Option<Status> {
        if self.child.is_none() || self.stopped {
            return None;
        }
        let line = self
            .ask(&Request::Status, Duration::from_millis(500))
            .ok()?;
        Status::parse(&line)
    }

    fn journal(&self) -> PathBuf {
        self.dir.join("journal")
    }

    /// The log of this member's latest start.
    fn last_log(&self) -> String {
        let path = self.dir.join(format!("bourse.{}.log", self.starts));
        std::fs::read_to_string(path).unwrap_or_default()
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
struct Status {
    role: String,
    term: u64,
    commit: u64,
    serving: bool,
    journal_last: u64,
}

impl Status {
    fn parse(line: &str) -> Option<Status> {
        let field = |name: &str| {
            line.split_whitespace()
                .find_map(|f| f.strip_prefix(name).and_then(|v| v.strip_prefix('=')))
                .map(str::to_string)
        };
        Some(Status {
            role: field("role")?,
            term: field("term")?.parse().ok()?,
            commit: field("commit")?.parse().ok()?,
            serving: field("serving")? == "yes",
            journal_last: field("journal_last")?.parse().ok()?,
        })
    }
}

struct Cluster {
    _temp: tempfile::TempDir,
    members: Vec<Member>,
    group: SocketAddrV4,
    /// `proxies[i][j]`: member i+1's way to member j+1 (when started with proxies).
    proxies: Vec<Vec<Option<LinkProxy>>>,
}

fn config_text(
    member: &Member,
    cluster_members: &[SocketAddr],
    group: SocketAddrV4,
    snapshot: SocketAddr,
    cluster_extra: &str,
) -> String {
    let members: Vec<String> = cluster_members.iter().map(|m| format!("\"{m}\"")).collect();
    format!(
        r#"
[gateway]
listen = "{gateway}"
session = "TEST000001"
[journal]
dir = "{journal}"
durability = "quorum"
segment_bytes = 4194304
[feed]
group = "{group}"
interface = "127.0.0.1"
session = "TEST000001"
rerequest = "{rerequest}"
snapshot = "{snapshot}"
[admin]
listen = "127.0.0.1:0"
max_connections = 8
[cluster]
id = {id}
members = [{members}]
secret = "{SECRET}"
{cluster_extra}
[limits]
orders_per_symbol = 4096
levels_per_side = 256
tokens_per_account = 65536
[[accounts]]
username = "ALICE"
password = "alicepw"
firm = "FRMA"
[[accounts]]
username = "BOB"
password = "bobpw"
firm = "FRMB"
[[accounts]]
username = "CAROL"
password = "carolpw"
firm = "FRMC"
[[accounts]]
username = "DAVE"
password = "davepw"
firm = "FRMD"
[[symbols]]
symbol = "AAPL"
tick = 100
max_order_shares = 100000
[[symbols]]
symbol = "MSFT"
tick = 100
"#,
        gateway = member.gateway,
        journal = member.journal().display(),
        rerequest = member.rerequest,
        id = member.id,
        members = members.join(", "),
    )
}

impl Cluster {
    /// Three members; `proxied`: every member reaches every other through its own
    /// [`LinkProxy`] (so a test can cut one member off).
    fn start(proxied: bool) -> Cluster {
        Cluster::start_with(proxied, "")
    }

    /// [`Cluster::start`] with more `[cluster]` keys (lines) for every member.
    fn start_with(proxied: bool, cluster_extra: &str) -> Cluster {
        let mut cluster = Cluster::prepare(proxied, cluster_extra);
        cluster.launch_all();
        cluster
    }

    /// Every member's directory and config, none started yet.
    fn prepare(proxied: bool, cluster_extra: &str) -> Cluster {
        // CLUSTER_E2E_KEEP=DIR keeps the members' journals and logs there.
        let temp = match std::env::var_os("CLUSTER_E2E_KEEP") {
            Some(dir) => {
                std::fs::create_dir_all(&dir).unwrap();
                tempfile::tempdir_in(dir).unwrap()
            }
            None => tempfile::tempdir().unwrap(),
        };
        let group = unique_group();
        let count = 3;
        let listen: Vec<SocketAddr> = (0..count).map(|_| loopback(fixed_port())).collect();
        let mut proxies: Vec<Vec<Option<LinkProxy>>> = (0..count)
            .map(|_| (0..count).map(|_| None).collect())
            .collect();
        if proxied {
            for (i, row) in proxies.iter_mut().enumerate() {
                for (j, slot) in row.iter_mut().enumerate() {
                    if i != j {
                        *slot = Some(LinkProxy::start(listen[j]));
                    }
                }
            }
        }
        let mut members = Vec::new();
        for (i, row) in proxies.iter().enumerate() {
            let dir = temp.path().join(format!("m{}", i + 1));
            std::fs::create_dir_all(&dir).unwrap();
            let member = Member {
                id: i + 1,
                config: dir.join("bourse.toml"),
                dir,
                gateway: loopback(fixed_port()),
                rerequest: loopback(fixed_port()),
                admin: None,
                child: None,
                stopped: false,
                starts: 0,
            };
            // What this member dials for each other member (itself: its own address).
            let view: Vec<SocketAddr> = row
                .iter()
                .zip(&listen)
                .map(|(proxy, listen)| proxy.as_ref().map_or(*listen, |p| p.addr))
                .collect();
            let snapshot = loopback(fixed_port());
            std::fs::write(
                &member.config,
                config_text(&member, &view, group, snapshot, cluster_extra),
            )
            .unwrap();
            members.push(member);
        }
        Cluster {
            _temp: temp,
            members,
            group,
            proxies,
        }
    }

    fn launch_all(&mut self) {
        for i in 0..self.members.len() {
            // The third starts as `bourse standby`: the same as `run` for a cluster member.
            self.launch(i, if i == 2 { "standby" } else { "run" });
        }
    }

    /// Start member `i` (0-based) and read its `listening` line.
    fn launch(&mut self, i: usize, command: &str) {
        let member = &mut self.members[i];
        member.starts += 1;
        let log = std::fs::File::create(member.dir.join(format!("bourse.{}.log", member.starts)))
            .unwrap();
        let mut child = Command::new(bourse_bin())
            .arg(command)
            .arg("--config")
            .arg(&member.config)
            .env("RUST_LOG", "info,raft=warn")
            .env("NO_COLOR", "1")
            .stdout(Stdio::piped())
            .stderr(log)
            .spawn()
            .expect("start bourse");
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let field = |name: &str| -> Option<SocketAddr> {
            let at = line.find(&format!("{name}="))?;
            line[at + name.len() + 1..]
                .split_whitespace()
                .next()?
                .parse()
                .ok()
        };
        member.child = Some(child);
        member.stopped = false;
        member.admin = field("admin");
        assert!(
            member.admin.is_some(),
            "member {} did not start: {line:?}\n{}",
            member.id,
            member.log()
        );
        assert_eq!(field("gateway"), Some(member.gateway), "{line}");
    }

    fn kill9(&mut self, i: usize) {
        let member = &mut self.members[i];
        let mut child = member.child.take().expect("running");
        child.kill().unwrap();
        child.wait().unwrap();
    }

    /// Every member that answers `admin status`, by index.
    fn statuses(&self) -> Vec<(usize, Status)> {
        self.members
            .iter()
            .enumerate()
            .filter_map(|(i, m)| m.status().map(|s| (i, s)))
            .collect()
    }

    /// Wait until exactly one answering member says it leads, and serves; its index.
    fn await_one_leader(&self, timeout: Duration) -> usize {
        let deadline = Instant::now() + timeout;
        loop {
            let statuses = self.statuses();
            let leaders: Vec<&(usize, Status)> = statuses
                .iter()
                .filter(|(_, s)| s.role == "leader")
                .collect();
            if let [(i, s)] = leaders.as_slice()
                && s.serving
            {
                return *i;
            }
            assert!(
                Instant::now() < deadline,
                "no single serving leader within {timeout:?}: {statuses:?}"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// Wait until every running member has the same commit index and journal end.
    fn await_caught_up(&self, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        loop {
            let statuses = self.statuses();
            let running = self.members.iter().filter(|m| m.child.is_some()).count();
            let same = statuses.windows(2).all(|w| {
                w[0].1.commit == w[1].1.commit && w[0].1.journal_last == w[1].1.journal_last
            });
            if statuses.len() == running && same {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "members did not catch up: {statuses:?}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Cut member `i` off from the others, both ways.
    fn isolate(&self, i: usize, cut: bool) {
        for j in 0..self.members.len() {
            for proxy in [&self.proxies[i][j], &self.proxies[j][i]]
                .into_iter()
                .flatten()
            {
                if cut {
                    proxy.cut();
                } else {
                    proxy.heal();
                }
            }
        }
    }

    /// `bourse-feed --check` on the group, asking every member's re-request server in turn.
    fn feed_check(&self) -> Running {
        let mut a = args(&[
            &"--check",
            &"--group",
            &self.group,
            &"--interface",
            &"127.0.0.1",
            &"--duration",
            &600,
            &"--rerequest-timeout-ms",
            &200,
        ]);
        for m in &self.members {
            a.push("--rerequest".into());
            a.push(m.rerequest.to_string());
        }
        spawn(FEED, &a, None)
    }

    /// Stop everyone cleanly once caught up, and check that every member's journal replays to
    /// the same digests; the replay's lines.
    fn finish(mut self) -> Vec<String> {
        self.await_caught_up(Duration::from_secs(20));
        let mut digests: Vec<Vec<String>> = Vec::new();
        for member in &mut self.members {
            if let Some(child) = member.child.as_mut() {
                // SAFETY: kill(2) on our own child's pid.
                unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
                let status = child.wait().unwrap();
                assert!(status.success(), "member {} exit {status}", member.id);
                member.child = None;
            }
            let report = bourse::replay::replay(&member.journal(), None, |_| {})
                .unwrap_or_else(|e| panic!("replay of member {}: {e}", member.id));
            if !bourse::snapshot::list(&member.journal()).is_empty() {
                let options = bourse::replay::ReplayOptions {
                    from_snapshot: true,
                    ..bourse::replay::ReplayOptions::default()
                };
                let resumed = bourse::replay::replay_with(&member.journal(), options, |_| {})
                    .unwrap_or_else(|e| panic!("replay of member {}: {e}", member.id));
                assert!(resumed.from_snapshot.is_some(), "member {}", member.id);
                assert_eq!(
                    resumed.digest_lines(),
                    report.digest_lines(),
                    "member {}: from its snapshot",
                    member.id
                );
            }
            digests.push(report.digest_lines());
        }
        for (i, d) in digests.iter().enumerate() {
            assert_eq!(d, &digests[0], "member {} replays differently", i + 1);
        }
        digests.swap_remove(0)
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        if std::env::var_os("CLUSTER_E2E_KEEP").is_some() {
            let temp = std::mem::replace(&mut self._temp, tempfile::tempdir().unwrap());
            eprintln!("kept {}", temp.keep().display());
        }
        for member in &mut self.members {
            if let Some(mut child) = member.child.take() {
                if member.stopped {
                    // SAFETY: kill(2) on our own child's pid.
                    unsafe { libc::kill(child.id() as i32, libc::SIGCONT) };
                }
                let _ = child.kill();
                let _ = child.wait();
            }
        }
    }
}

fn enter(token: &str, side: u8, price: u32) -> Inbound {
    Inbound::Enter(EnterOrder {
        token: Alpha::from_str_padded(token).unwrap(),
        side,
        shares: Shares(100),
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

/// One broker: everything it received (numbers contiguous across logins), what it sent, what
/// it saw accepted (exactly once each).
struct Broker {
    index: usize,
    received: Vec<(u64, Outbound)>,
    sent: Vec<String>,
    accepted: BTreeSet<String>,
}

impl Broker {
    fn new(index: usize) -> Broker {
        Broker {
            index,
            received: Vec::new(),
            sent: Vec::new(),
            accepted: BTreeSet::new(),
        }
    }

    fn credentials(&self) -> (&'static str, &'static str) {
        ACCOUNTS[self.index]
    }

    fn absorb(&mut self, messages: Vec<(u64, Outbound)>) {
        for (seq, m) in messages {
            assert_eq!(
                seq,
                self.received.len() as u64 + 1,
                "account {} numbers are contiguous",
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

    /// Closed loop: one order, its answer, the next; until the session breaks or `stop`.
    fn trade(&mut self, client: &mut OuchClient, stop: &AtomicBool, round: &str) {
        for n in 0..1_000_000u32 {
            if stop.load(Ordering::Relaxed) {
                return;
            }
            let token = format!("{round}{}x{n}", self.index);
            let side = if (n + self.index as u32).is_multiple_of(2) {
                b'B'
            } else {
                b'S'
            };
            self.sent.push(token.clone());
            if client
                .send(&enter(&token, side, 1_000_000 + (n % 5) * 100))
                .is_err()
            {
                return;
            }
            match client.recv_messages(1, Duration::from_millis(1_000)) {
                Ok(m) if !m.is_empty() => {
                    self.absorb(m);
                    if let Ok(more) = client.recv_messages(4, Duration::from_millis(1)) {
                        self.absorb(more);
                    }
                }
                _ => return,
            }
        }
    }

    /// Log in to the leader with the next number it expects, take what it missed, resend
    /// every order it has no Accepted for (a used token is ignored: benign), and check that
    /// each is accepted exactly once.
    fn catch_up(&mut self, gateway: SocketAddr) -> OuchClient {
        let (user, password) = self.credentials();
        let deadline = Instant::now() + Duration::from_secs(10);
        let next = self.received.len() as u64 + 1;
        let mut client = loop {
            match OuchClient::login(gateway, user, password, "TEST000001", next, TIMEOUT) {
                Ok(c) => break c,
                Err(e) => {
                    assert!(Instant::now() < deadline, "login to the leader: {e}");
                    std::thread::sleep(Duration::from_millis(20));
                }
            }
        };
        assert_eq!(
            client.next_seq, next,
            "the leader has every reply this broker saw"
        );
        let missed = client
            .recv_messages(100_000, Duration::from_millis(300))
            .unwrap();
        self.absorb(missed);
        let unsure: Vec<String> = self
            .sent
            .iter()
            .filter(|t| !self.accepted.contains(*t))
            .cloned()
            .collect();
        for token in &unsure {
            client.send(&enter(token, b'B', 900_000)).unwrap();
        }
        let replies = client
            .recv_messages(unsure.len(), Duration::from_secs(5))
            .unwrap();
        self.absorb(replies);
        assert!(
            self.sent.iter().all(|t| self.accepted.contains(t)),
            "account {}: every order sent is accepted exactly once",
            self.index
        );
        client
    }

    /// After end of day: read through the System Event `E`.
    fn read_to_end_of_day(&mut self, client: &mut OuchClient) {
        loop {
            match client.recv(TIMEOUT).unwrap() {
                Some(Received::Sequenced(seq, m)) => {
                    let end = matches!(m, Outbound::SystemEvent(e) if e.event == b'E');
                    self.absorb(vec![(seq, m)]);
                    if end {
                        return;
                    }
                }
                Some(Received::Heartbeat) => {}
                other => panic!("account {}: {other:?}", self.index),
            }
        }
    }

    /// What this broker received equals the account's stream in the replay.
    fn check_against(&self, digests: &[String]) {
        let mut hasher = bourse::replay::StreamHasher::default();
        for (_, m) in &self.received {
            let mut buf = [0u8; 96];
            let n = m.encode(&mut buf);
            hasher.add(&buf[..n]);
        }
        let user = self.credentials().0;
        let line = digests
            .iter()
            .find(|l| l.starts_with(&format!("ouch {user} ")))
            .unwrap();
        assert!(
            line.ends_with(&hasher.digest().to_string()),
            "account {user}: received {} messages; replay: {line}",
            self.received.len()
        );
    }
}

/// Brokers trading on `gateway` on their own threads until told to stop or cut off.
fn trade_on(
    gateway: SocketAddr,
    brokers: Vec<Broker>,
    stop: &Arc<AtomicBool>,
    round: &'static str,
) -> Vec<std::thread::JoinHandle<Broker>> {
    brokers
        .into_iter()
        .map(|mut broker| {
            let stop = stop.clone();
            std::thread::spawn(move || {
                let (user, password) = broker.credentials();
                let next = broker.received.len() as u64 + 1;
                let mut client =
                    OuchClient::login(gateway, user, password, "TEST000001", next, TIMEOUT)
                        .unwrap();
                broker.trade(&mut client, &stop, round);
                broker
            })
        })
        .collect()
}

fn finish_feed(feed: Running) {
    let out = feed.finish(Duration::from_secs(30));
    assert!(
        out.status.success() && out.stdout.contains("check ok"),
        "bourse-feed --check:\n{}\n{}",
        out.stdout,
        out.stderr
    );
    eprintln!("{}", out.stdout.lines().next().unwrap_or_default());
}

/// End of day, every broker reads to it, the feed check passes, every member replays to the
/// same digests and every broker's stream equals its account's.
fn end_of_day(cluster: Cluster, leader: usize, brokers: &mut [Broker], feed: Running) {
    let gateway = cluster.members[leader].gateway;
    let mut clients: Vec<OuchClient> = brokers.iter_mut().map(|b| b.catch_up(gateway)).collect();
    let answer = cluster.members[leader]
        .ask(&Request::EndOfDay, TIMEOUT)
        .unwrap();
    assert_eq!(answer, "ok end-of-day");
    for (b, c) in brokers.iter_mut().zip(clients.iter_mut()) {
        b.read_to_end_of_day(c);
    }
    let digests = cluster.finish();
    for b in brokers.iter() {
        b.check_against(&digests);
    }
    finish_feed(feed);
}

/// The leader is stopped for 4 s (SIGSTOP): the others elect a successor; once resumed, the old
/// leader releases nothing — an order sent to it while it was stopped gets no reply, only End
/// of Session — and it follows the new leader. With state snapshots every 5 inputs: the old
/// leader rebuilds its state (it applied `PAUSED`, never committed) with its snapshot writer
/// started again, and every member's snapshots replay to the full replay's digests.
#[test]
fn a_leader_stopped_for_4_s_is_replaced_and_releases_nothing_when_it_resumes() {
    let mut cluster = Cluster::start_with(false, "\n[snapshot]\nevery_inputs = 5\nkeep = 2");
    let feed = cluster.feed_check();
    let leader = cluster.await_one_leader(Duration::from_secs(20));
    let gateway = cluster.members[leader].gateway;
    let stop = Arc::new(AtomicBool::new(false));
    let threads = trade_on(gateway, (1..3).map(Broker::new).collect(), &stop, "S");
    // ALICE trades a little on the leader, then sends one order while it is stopped.
    let mut alice = Broker::new(0);
    let mut client = OuchClient::login(gateway, "ALICE", "alicepw", "", 1, TIMEOUT).unwrap();
    for n in 0..20 {
        let token = format!("A{n}");
        alice.sent.push(token.clone());
        client.send(&enter(&token, b'B', 990_000)).unwrap();
        while !alice.accepted.contains(&token) {
            let got = client.recv_messages(1, TIMEOUT).unwrap();
            assert_eq!(got.len(), 1, "no answer to {token}");
            alice.absorb(got);
        }
    }
    cluster.members[leader].pause();
    alice.sent.push("PAUSED".into());
    client.send(&enter("PAUSED", b'B', 990_000)).unwrap();
    let stopped_at = Instant::now();
    let successor = cluster.await_one_leader(Duration::from_secs(4));
    eprintln!(
        "a successor (member {}) serves {} ms after the leader was stopped",
        successor + 1,
        stopped_at.elapsed().as_millis()
    );
    assert_ne!(successor, leader);
    std::thread::sleep(Duration::from_secs(4).saturating_sub(stopped_at.elapsed()));
    cluster.members[leader].signal(libc::SIGCONT);
    cluster.members[leader].stopped = false;
    // Resumed: not a single reply, the session ends.
    let mut after = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(3);
    while Instant::now() < deadline {
        match client.recv(Duration::from_millis(200)).unwrap() {
            Some(Received::Sequenced(seq, m)) => after.push((seq, m)),
            Some(Received::Heartbeat) | None => {}
            Some(Received::EndOfSession) | Some(Received::Closed) => break,
            Some(other) => panic!("{other:?}"),
        }
    }
    assert!(
        after.is_empty(),
        "the resumed old leader released {after:?}"
    );
    let now_leader = cluster.await_one_leader(Duration::from_secs(5));
    assert_eq!(now_leader, successor, "the old leader follows");
    // A follower takes no journaled command and says who leads.
    let deadline = Instant::now() + TIMEOUT;
    let refused = loop {
        let answer = cluster.members[leader].ask(&Request::Halt("AAPL".into()), TIMEOUT);
        match answer {
            Ok(line) if line.contains("member") || Instant::now() >= deadline => break line,
            _ => std::thread::sleep(Duration::from_millis(20)),
        }
    };
    assert_eq!(
        refused,
        format!("error not the leader: member {} leads", successor + 1)
    );
    stop.store(true, Ordering::Relaxed);
    let mut brokers: Vec<Broker> = vec![alice];
    brokers.extend(threads.into_iter().map(|t| t.join().unwrap()));
    let log = cluster.members[leader].log();
    assert!(log.contains("no longer leading"), "{log}");
    // Its own servers, still stopping when it steps down, are not another process's.
    assert!(!log.contains("cannot bind serving port"), "{log}");
    end_of_day(cluster, successor, &mut brokers, feed);
}

/// The leader's admin port is flooded and its links to the others are cut while brokers keep
/// sending it orders: it cannot commit, so it acknowledges nothing more; the others elect a
/// successor; the old leader stops serving, and once the links heal it cuts the records it
/// journaled that were never committed and follows.
#[test]
fn cutting_the_leaders_links_while_its_admin_port_is_flooded_makes_one_leader() {
    let cluster = Cluster::start(true);
    let feed = cluster.feed_check();
    let leader = cluster.await_one_leader(Duration::from_secs(20));
    let gateway = cluster.members[leader].gateway;
    let admin_addr = cluster.members[leader].admin.unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let threads = trade_on(gateway, (0..3).map(Broker::new).collect(), &stop, "C");
    // DAVE waits on the leader and enters one order right after the cut: only the old leader
    // can journal it, it can never commit there, so DAVE must get no answer from it.
    let mut dave = Broker::new(3);
    let mut dave_client = OuchClient::login(gateway, "DAVE", "davepw", "", 1, TIMEOUT).unwrap();
    let opening = dave_client.recv_messages(1, TIMEOUT).unwrap();
    dave.absorb(opening);
    std::thread::sleep(Duration::from_millis(300));
    // 8 connections at a time that send junk and close: every admin slot taken.
    let flood_stop = Arc::new(AtomicBool::new(false));
    let floods: Vec<_> = (0..8)
        .map(|_| {
            let flood_stop = flood_stop.clone();
            std::thread::spawn(move || {
                let mut count = 0u64;
                while !flood_stop.load(Ordering::Relaxed) {
                    if let Ok(mut s) =
                        TcpStream::connect_timeout(&admin_addr, Duration::from_millis(100))
                    {
                        let _ = s.write_all(b"x");
                        count += 1;
                    }
                }
                count
            })
        })
        .collect();
    cluster.isolate(leader, true);
    let cut_at = Instant::now();
    dave.sent.push("CUTOFF".into());
    dave_client.send(&enter("CUTOFF", b'S', 1_100_000)).unwrap();
    // The brokers on the old leader get no more acknowledgments: their sessions end or stall.
    let mut brokers: Vec<Broker> = threads.into_iter().map(|t| t.join().unwrap()).collect();
    loop {
        match dave_client.recv(Duration::from_secs(2)).unwrap() {
            Some(Received::Heartbeat) => {}
            Some(Received::EndOfSession) | Some(Received::Closed) | None => break,
            Some(other) => panic!("the cut-off leader answered {other:?}"),
        }
    }
    drop(dave_client);
    let successor = cluster.await_one_leader(Duration::from_secs(10));
    assert_ne!(successor, leader);
    eprintln!(
        "cut: member {} serves {} ms after the leader was cut off",
        successor + 1,
        cut_at.elapsed().as_millis()
    );
    // The old leader stepped down on its own (check quorum): never two serving leaders.
    let deadline = Instant::now() + Duration::from_secs(5);
    while !cluster.members[leader].log().contains("no longer leading") {
        assert!(
            Instant::now() < deadline,
            "the isolated leader kept serving"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    flood_stop.store(true, Ordering::Relaxed);
    let flooded: u64 = floods.into_iter().map(|f| f.join().unwrap()).sum();
    eprintln!("admin flood: {flooded} connections");
    cluster.isolate(leader, false);
    cluster.await_caught_up(Duration::from_secs(20));
    assert_eq!(cluster.await_one_leader(TIMEOUT), successor);
    // What it journaled alone (DAVE's order, the brokers' last ones unless a follower got
    // them before the cut, in which case the new leader committed them) is cut.
    let log = cluster.members[leader].log();
    let cut = log
        .lines()
        .find(|l| l.contains("uncommitted records from the journal"))
        .unwrap_or("no records cut (the new leader had them all)");
    eprintln!(
        "old leader: {}",
        cut.split("cluster: ").last().unwrap_or(cut)
    );
    // More trading on the new leader, then the end of the day.
    let stop = Arc::new(AtomicBool::new(false));
    let gateway = cluster.members[successor].gateway;
    for b in brokers.iter_mut() {
        drop(b.catch_up(gateway));
    }
    let dave_client = dave.catch_up(gateway);
    let threads = trade_on(gateway, brokers, &stop, "D");
    std::thread::sleep(Duration::from_millis(300));
    stop.store(true, Ordering::Relaxed);
    let mut brokers: Vec<Broker> = threads.into_iter().map(|t| t.join().unwrap()).collect();
    drop(dave_client);
    brokers.push(dave);
    end_of_day(cluster, successor, &mut brokers, feed);
}

/// kill -9 of the leader under load, `FAILOVER_TRIALS` times (default 2): a successor serves
/// within the election timeout, brokers log in again with their next number and get exactly
/// what they missed, nothing acknowledged is lost or duplicated; the killed member restarts
/// and follows.
#[test]
fn kill9_the_leader_under_load_repeatedly() {
    let trials: u32 = std::env::var("FAILOVER_TRIALS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2);
    let mut cluster = Cluster::start(false);
    let feed = cluster.feed_check();
    let mut leader = cluster.await_one_leader(Duration::from_secs(20));
    let mut brokers: Vec<Broker> = (0..3).map(Broker::new).collect();
    let mut takeovers_ms = Vec::new();
    let mut sent_before = 0;
    for trial in 0..trials {
        let stop = Arc::new(AtomicBool::new(false));
        let gateway = cluster.members[leader].gateway;
        let round: &'static str = ["K", "L", "M", "N", "P", "Q", "R", "T"][trial as usize % 8];
        let round: &'static str = Box::leak(format!("{round}{trial}").into_boxed_str());
        let threads = trade_on(gateway, brokers, &stop, round);
        std::thread::sleep(Duration::from_millis(300 + u64::from(trial) * 97 % 400));
        let killed_at = Instant::now();
        cluster.kill9(leader);
        let successor = cluster.await_one_leader(Duration::from_secs(10));
        let takeover = killed_at.elapsed();
        brokers = threads.into_iter().map(|t| t.join().unwrap()).collect();
        let gateway = cluster.members[successor].gateway;
        let first_login = Instant::now();
        for b in brokers.iter_mut() {
            drop(b.catch_up(gateway));
        }
        let sent: usize = brokers.iter().map(|b| b.sent.len()).sum();
        eprintln!(
            "trial {trial}: leader member {} killed; member {} serves after {} ms; brokers caught up in {} ms; {} orders sent so far, all accepted once",
            leader + 1,
            successor + 1,
            takeover.as_millis(),
            first_login.elapsed().as_millis(),
            sent
        );
        assert!(sent > sent_before, "orders were entered in trial {trial}");
        sent_before = sent;
        takeovers_ms.push(takeover.as_millis() as u64);
        // The killed member comes back and follows.
        cluster.launch(leader, "run");
        cluster.await_caught_up(Duration::from_secs(30));
        leader = cluster.await_one_leader(TIMEOUT);
        assert_eq!(leader, successor);
    }
    takeovers_ms.sort_unstable();
    let at = |q: f64| takeovers_ms[((takeovers_ms.len() - 1) as f64 * q).round() as usize];
    eprintln!(
        "takeover over {} trials (ms): min {} p50 {} p99 {} max {}",
        takeovers_ms.len(),
        takeovers_ms[0],
        at(0.5),
        at(0.99),
        takeovers_ms[takeovers_ms.len() - 1]
    );
    end_of_day(cluster, leader, &mut brokers, feed);
}

/// Majority first (`cluster.minority_append_delay_us = 1000`): the leader sends
/// appends at once to one follower only and holds the other's. Each follower in turn is
/// stopped for up to 1.5 s while a broker trades in a closed loop: whichever was the prompt
/// one, every order is still acknowledged within a few ms — the held appends reach the other
/// follower within the delay, and it becomes the prompt one. Heartbeats (which send held
/// appends first) are every 1,000 ms here, so without the delay's bound an order waits up to
/// that long for the stopped follower (checked with `MajorityFirst::release_due` a no-op and
/// heartbeats every 400 ms: "an order waited 305.101844ms for stopped member 1"). The leader's
/// status line counts the appends it held (the key is not silently ignored).
#[test]
fn a_stopped_follower_delays_no_order_beyond_the_minority_delay() {
    let mut cluster = Cluster::start_with(
        false,
        "heartbeat_ms = 1000\nelection_timeout_ms = 3000\nminority_append_delay_us = 1000",
    );
    let feed = cluster.feed_check();
    let leader = cluster.await_one_leader(Duration::from_secs(20));
    let gateway = cluster.members[leader].gateway;
    let mut alice = Broker::new(0);
    let mut client = OuchClient::login(gateway, "ALICE", "alicepw", "", 1, TIMEOUT).unwrap();
    let mut n = 0u32;
    let mut order = |alice: &mut Broker, client: &mut OuchClient| -> Duration {
        let token = format!("F{n}");
        n += 1;
        alice.sent.push(token.clone());
        let sent_at = Instant::now();
        client.send(&enter(&token, b'B', 990_000)).unwrap();
        while !alice.accepted.contains(&token) {
            let got = client.recv_messages(1, TIMEOUT).unwrap();
            assert_eq!(got.len(), 1, "no answer to {token}");
            alice.absorb(got);
        }
        sent_at.elapsed()
    };
    for _ in 0..50 {
        order(&mut alice, &mut client);
    }
    let followers: Vec<usize> = (0..3).filter(|&m| m != leader).collect();
    for &follower in &followers {
        cluster.members[follower].pause();
        let paused_at = Instant::now();
        let mut slowest = Duration::ZERO;
        let mut orders = 0;
        // Every order rests (the book holds 4,096): at most 1,500 a phase.
        while paused_at.elapsed() < Duration::from_millis(1_500) && orders < 1_500 {
            slowest = slowest.max(order(&mut alice, &mut client));
            orders += 1;
        }
        cluster.members[follower].signal(libc::SIGCONT);
        cluster.members[follower].stopped = false;
        eprintln!(
            "member {} stopped: {orders} orders, slowest acknowledged in {} µs",
            follower + 1,
            slowest.as_micros()
        );
        assert!(
            orders > 20,
            "orders flow while member {} is stopped",
            follower + 1
        );
        // The delay is 1 ms; the rest is this (shared, 2-core) machine's scheduling.
        assert!(
            slowest < Duration::from_millis(400),
            "an order waited {slowest:?} for stopped member {}",
            follower + 1
        );
        cluster.await_caught_up(Duration::from_secs(30));
        assert_eq!(cluster.await_one_leader(TIMEOUT), leader, "no election");
    }
    let status = cluster.members[leader]
        .ask(&Request::Status, TIMEOUT)
        .unwrap();
    let held: u64 = status
        .split_whitespace()
        .find_map(|kv| kv.strip_prefix("held_appends="))
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no held_appends in {status}"));
    assert!(held > 100, "the leader held appends: {status}");
    drop(client);
    let mut brokers = vec![alice];
    end_of_day(cluster, leader, &mut brokers, feed);
}

/// State snapshots in a cluster (`[snapshot]`): every member writes them, each once its record
/// is committed. A member killed with -9 — the leader under load, then a follower — restarts
/// from its newest snapshot and the journal's tail (its log says so; recovery checked the
/// journal from that snapshot's record on) and follows; brokers lose
/// and double nothing, and the day ends with every member replaying to the same digests (from
/// its snapshot too) and every broker's stream equal to its account's.
#[test]
fn killed_members_restart_from_their_snapshots() {
    let mut cluster = Cluster::start_with(false, "\n[snapshot]\nevery_inputs = 40\nkeep = 2");
    let feed = cluster.feed_check();
    let mut leader = cluster.await_one_leader(Duration::from_secs(20));
    let mut brokers: Vec<Broker> = (0..3).map(Broker::new).collect();
    for (round, kill_the_leader) in [("SL", true), ("SF", false)] {
        let stop = Arc::new(AtomicBool::new(false));
        let threads = trade_on(cluster.members[leader].gateway, brokers, &stop, round);
        // Two snapshots on every member (the older one is below any commit index a restart
        // reads back: that is written once a tick), then a little more trading.
        let deadline = Instant::now() + Duration::from_secs(30);
        while cluster
            .members
            .iter()
            .any(|m| bourse::snapshot::list(&m.journal()).len() < 2)
        {
            assert!(Instant::now() < deadline, "every member writes snapshots");
            std::thread::sleep(Duration::from_millis(50));
        }
        std::thread::sleep(Duration::from_millis(200));
        let victim = if kill_the_leader {
            leader
        } else {
            (leader + 1) % 3
        };
        cluster.kill9(victim);
        if kill_the_leader {
            leader = cluster.await_one_leader(Duration::from_secs(10));
        }
        stop.store(true, Ordering::Relaxed);
        brokers = threads.into_iter().map(|t| t.join().unwrap()).collect();
        for b in brokers.iter_mut() {
            drop(b.catch_up(cluster.members[leader].gateway));
        }
        cluster.launch(victim, "run");
        cluster.await_caught_up(Duration::from_secs(30));
        let log = cluster.members[victim].last_log();
        assert!(
            log.contains("restarting from a state snapshot"),
            "member {} restarted from a snapshot:\n{log}",
            victim + 1
        );
        // ... and its journal was recovered from that snapshot's record on, not read whole.
        assert!(
            log.contains("vouched for by the snapshot"),
            "member {} vouched recovery:\n{log}",
            victim + 1
        );
        assert_eq!(cluster.await_one_leader(TIMEOUT), leader);
        eprintln!(
            "round {round}: member {} killed and restarted from its snapshot; {} orders sent so far",
            victim + 1,
            brokers.iter().map(|b| b.sent.len()).sum::<usize>()
        );
    }
    end_of_day(cluster, leader, &mut brokers, feed);
}

/// A leader that cannot read a record a lagging follower needs (damaged on its disk; its state
/// snapshot vouched for it at open, so the open did not read its checksum) stops with an error
/// instead of raft-rs panicking on the storage error, and the member that holds the record
/// intact leads and brings the follower up: brokers lose and double nothing.
#[test]
fn a_leader_that_cannot_read_a_record_a_follower_needs_stops_and_another_serves_it() {
    let mut cluster = Cluster::start_with(false, "\n[snapshot]\nevery_inputs = 20\nkeep = 2");
    let first = cluster.await_one_leader(Duration::from_secs(20));
    let (lagging, intact) = ((first + 1) % 3, (first + 2) % 3);
    cluster.kill9(lagging);
    let stop = Arc::new(AtomicBool::new(false));
    let gateway = cluster.members[first].gateway;
    let threads = trade_on(gateway, (0..3).map(Broker::new).collect(), &stop, "DM");
    // Enough for snapshots well past the records the lagging member lacks. (Deadlines here
    // are generous: a loaded 2-core machine runs three debug daemons and the brokers.)
    let deadline = Instant::now() + Duration::from_secs(120);
    while bourse::snapshot::list(&cluster.members[first].journal())
        .first()
        .is_none_or(|(seq, _)| *seq < 100)
    {
        assert!(Instant::now() < deadline, "the leader writes snapshots");
        std::thread::sleep(Duration::from_millis(50));
    }
    stop.store(true, Ordering::Relaxed);
    let mut brokers: Vec<Broker> = threads.into_iter().map(|t| t.join().unwrap()).collect();
    cluster.await_caught_up(Duration::from_secs(60));
    cluster.kill9(first);
    cluster.kill9(intact);
    // ALICE's sixth order of the round: long before the leader's snapshot, after everything the
    // lagging member has.
    damage_order(&cluster.members[first].journal(), "DM0x5 ");
    // The damaged member and the lagging one: the lagging one cannot win an election, so the
    // damaged one leads and must send the damaged record.
    cluster.launch(first, "run");
    cluster.launch(lagging, "run");
    let deadline = Instant::now() + Duration::from_secs(90);
    let status = loop {
        let child = cluster.members[first].child.as_mut().expect("launched");
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        assert!(Instant::now() < deadline, "the damaged leader stops");
        std::thread::sleep(Duration::from_millis(50));
    };
    cluster.members[first].child = None;
    let log = cluster.members[first].last_log();
    assert!(!status.success(), "{log}");
    assert!(
        log.contains("a journal record raft needs cannot be read") && !log.contains("panicked"),
        "a clean stop, not raft's panic:\n{log}"
    );
    cluster.launch(intact, "run");
    let leader = cluster.await_one_leader(Duration::from_secs(60));
    assert_eq!(leader, intact);
    cluster.await_caught_up(Duration::from_secs(60));
    for b in brokers.iter_mut() {
        drop(b.catch_up(cluster.members[leader].gateway));
    }
    eprintln!(
        "the damaged leader stopped ({status}); member {} leads, member {} caught up; {} orders",
        intact + 1,
        lagging + 1,
        brokers.iter().map(|b| b.sent.len()).sum::<usize>()
    );
}

/// Flip a byte of the journal record carrying `needle` (an order's token, padded).
fn damage_order(journal: &std::path::Path, needle: &str) {
    for entry in std::fs::read_dir(journal).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_none_or(|x| x != "seg") {
            continue;
        }
        let mut bytes = std::fs::read(&path).unwrap();
        if let Some(at) = bytes
            .windows(needle.len())
            .position(|w| w == needle.as_bytes())
        {
            bytes[at] ^= 0x20;
            std::fs::write(&path, bytes).unwrap();
            return;
        }
    }
    panic!("no record carries {needle:?}");
}

/// Another process holds member 1's order-entry port, and member 1 has the shortest election
/// timeout, so it stands first in every election. It used to win (the others granted it their
/// votes), fail to bind for 2 s and only then hand the lead on; now it stands at a lower raft
/// priority while its port is taken, the others refuse it their votes, and it never leads.
#[test]
fn a_member_that_cannot_bind_its_gateway_is_not_elected() {
    let mut cluster = Cluster::prepare(false, "");
    let _held = std::net::TcpListener::bind(cluster.members[0].gateway).expect("hold the port");
    member_1_campaigns_first(&cluster);
    launch_and_see_member_1_stand_back(&mut cluster, "cannot bind serving port");
}

/// Member 1 campaigns first: an election timeout of 150 ms against the others' 250 plus up to
/// 150.
fn member_1_campaigns_first(cluster: &Cluster) {
    let config = &cluster.members[0].config;
    let text = std::fs::read_to_string(config).unwrap().replacen(
        &format!("secret = \"{SECRET}\"\n"),
        &format!("secret = \"{SECRET}\"\nelection_timeout_ms = 150\nelection_spread_ms = 10\n"),
        1,
    );
    assert!(text.contains("election_timeout_ms = 150"));
    std::fs::write(config, text).unwrap();
}

/// Launch the members; another serves, and member 1's log shows it stood back (saying `why`)
/// and was never elected.
fn launch_and_see_member_1_stand_back(cluster: &mut Cluster, why: &str) {
    cluster.launch_all();
    cluster.await_one_leader(Duration::from_secs(30));
    let log = cluster.members[0].log();
    assert!(!log.contains("role=Leader"), "member 1 was elected:\n{log}");
    assert!(
        log.contains(why) && log.contains("standing for election below the members that can serve"),
        "{log}"
    );
}

/// Member 1's config names a feed interface this host does not have: it can bind every
/// serving port but never open its multicast feed.
fn with_a_feed_member_1_cannot_open(cluster: &Cluster) {
    let config = &cluster.members[0].config;
    let text = std::fs::read_to_string(config).unwrap().replacen(
        "interface = \"127.0.0.1\"",
        // TEST-NET-1 (RFC 5737): on no interface of this host, so IP_MULTICAST_IF fails.
        "interface = \"192.0.2.1\"",
        1,
    );
    assert!(text.contains("192.0.2.1"));
    std::fs::write(config, text).unwrap();
}

/// A member whose feed cannot open stands back in elections, as one whose port is taken: with
/// the shortest election timeout it campaigns first and is still never elected.
#[test]
fn a_member_that_cannot_open_its_feed_is_not_elected() {
    let mut cluster = Cluster::prepare(false, "");
    with_a_feed_member_1_cannot_open(&cluster);
    member_1_campaigns_first(&cluster);
    launch_and_see_member_1_stand_back(&mut cluster, "cannot open the multicast feed");
}

/// While another process holds the order-entry ports of members 2 and 3, no member can serve
/// and the lead passes from one to the next until member 1, whose feed cannot open, has it;
/// then the ports are let go. It used to keep the lead, retrying the feed (and stopping the
/// servers of each try on the loop's thread), and the cluster served nobody (60 s, on the
/// build before); now it hands the lead on after 2 s, as when a port cannot be bound.
#[test]
fn a_leader_that_cannot_open_its_feed_hands_the_lead_to_a_member_that_can() {
    let mut cluster = Cluster::prepare(false, "");
    with_a_feed_member_1_cannot_open(&cluster);
    let held: Vec<std::net::TcpListener> = cluster.members[1..]
        .iter()
        .map(|m| std::net::TcpListener::bind(m.gateway).expect("hold the port"))
        .collect();
    cluster.launch_all();
    let deadline = Instant::now() + Duration::from_secs(60);
    // (The build before said `cluster: cannot open the feed:`.)
    let led = |log: &str| {
        log.contains("leading, but cannot open the feed")
            || log.contains("cluster: cannot open the feed:")
    };
    while !led(&cluster.members[0].log()) {
        assert!(
            Instant::now() < deadline,
            "member 1 never led:\n{}",
            cluster.members[0].log()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    drop(held);
    let leader = cluster.await_one_leader(Duration::from_secs(60));
    assert_ne!(leader, 0, "member 1 cannot serve");
    // The build before lost the lead only if its loop, blocked stopping the servers of each
    // retry, missed enough heartbeats; it never handed it on.
    let log = cluster.members[0].log();
    assert!(log.contains("handing the lead to member"), "{log}");
}

/// Another process holds the order-entry ports of members 1 and 2, so only member 3 can serve.
/// A leader that cannot bind its gateway used to keep the lead (retrying every 100 ms) and the
/// cluster served nobody for as long as it lived (the cluster audit: 20 s); now it hands the
/// lead on after 2 s, and the lead reaches member 3.
#[test]
fn a_leader_that_cannot_bind_its_gateway_hands_the_lead_to_a_member_that_can() {
    let mut cluster = Cluster::prepare(false, "");
    let _held: Vec<std::net::TcpListener> = cluster.members[..2]
        .iter()
        .map(|m| std::net::TcpListener::bind(m.gateway).expect("hold the port"))
        .collect();
    cluster.launch_all();
    // Up to two hand-overs of 2 s each, plus elections (2-6 s here); generous for debug builds
    // on a busy machine. The 32-35 s this test takes in CI is the daemon's build, which the
    // first `bourse_bin()` of a test process runs (the SIGSTOP test beside it takes as long).
    let leader = cluster.await_one_leader(Duration::from_secs(90));
    assert_eq!(leader, 2, "member 3 (index 2) serves");
    // When member 1 or 2 was elected first (two runs in three), it said why and handed on.
    for member in &cluster.members[..2] {
        let log = member.log();
        if log.contains("cannot listen for order entry yet") {
            assert!(log.contains("handing the lead to member"), "{log}");
        }
    }
}
