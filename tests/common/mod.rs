//! Shared helpers of the end-to-end tests: start the real `bourse` binary on free ports with
//! a journal in a temporary directory, and stop it.

#![allow(dead_code)]

pub mod ports;

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

pub const TIMEOUT: Duration = Duration::from_secs(5);

/// An OUCH Enter Order as brokers in these tests send it: a limit order for the day (TIF
/// 99,999), agency capacity, no minimum, no firm; `display` as given.
pub fn order(
    token: &str,
    side: u8,
    shares: u32,
    symbol: &str,
    price: u32,
    tif: u32,
    display: u8,
) -> bourse::wire::ouch::Inbound {
    use bourse::types::{Alpha, Firm, Price, Shares};
    bourse::wire::ouch::Inbound::Enter(bourse::wire::ouch::EnterOrder {
        token: Alpha::from_str_padded(token).unwrap(),
        side,
        shares: Shares(shares),
        stock: Alpha::from_str_padded(symbol).unwrap(),
        price: Price(price),
        tif,
        firm: Firm::SPACES,
        display,
        capacity: b'A',
        intermarket_sweep: b'N',
        min_qty: Shares(0),
        cross_type: b'N',
        customer_type: b' ',
    })
}

/// An OUCH Replace as brokers in these tests send it: for the day, no minimum, no sweep.
pub fn replace(
    existing: &str,
    replacement: &str,
    shares: u32,
    price: u32,
    display: u8,
) -> bourse::wire::ouch::Inbound {
    use bourse::types::{Alpha, Price, Shares};
    bourse::wire::ouch::Inbound::Replace(bourse::wire::ouch::ReplaceOrder {
        existing: Alpha::from_str_padded(existing).unwrap(),
        replacement: Alpha::from_str_padded(replacement).unwrap(),
        shares: Shares(shares),
        price: Price(price),
        tif: 99_999,
        display,
        intermarket_sweep: b'N',
        min_qty: Shares(0),
    })
}

/// Sequenced messages that arrive within `quiet` after the expected ones (a test that says
/// "nothing doubled" wants none); heartbeats are skipped.
pub fn more_messages(client: &mut bourse::client::OuchClient, quiet: Duration) -> Vec<u64> {
    use bourse::client::Received;
    let deadline = std::time::Instant::now() + quiet;
    let mut extra = Vec::new();
    while let Some(left) = deadline.checked_duration_since(std::time::Instant::now()) {
        match client.recv(left.max(Duration::from_millis(1))).unwrap() {
            Some(Received::Sequenced(seq, _) | Received::Undecodable(seq, _)) => extra.push(seq),
            Some(Received::Heartbeat) => {}
            Some(other) => panic!("unexpected {other:?}"),
            None => break,
        }
    }
    extra
}

/// [`order`] for the day, displayed.
pub fn day_order(
    token: &str,
    side: u8,
    shares: u32,
    symbol: &str,
    price: u32,
) -> bourse::wire::ouch::Inbound {
    order(token, side, shares, symbol, price, 99_999, b'Y')
}

/// The daemon under test: this build's, or `BOURSE_BIN` (to show that a test fails on
/// another build, e.g. the commit before a fix).
pub fn bourse_binary() -> PathBuf {
    std::env::var_os("BOURSE_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_bourse")))
}

/// A free UDP port on loopback (bound then released: the small race is acceptable in tests).
pub fn free_udp_port() -> u16 {
    std::net::UdpSocket::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A multicast group no other test process uses at the same time.
pub fn unique_group() -> std::net::SocketAddrV4 {
    use std::sync::atomic::{AtomicU32, Ordering};
    static NEXT: AtomicU32 = AtomicU32::new(1);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let pid = std::process::id();
    let ip = std::net::Ipv4Addr::new(239, 193, (pid % 250) as u8, (n % 250) as u8 + 1);
    std::net::SocketAddrV4::new(ip, free_udp_port())
}

/// A config for tests: every listener on port 0, journal under `dir`.
pub fn config_text(dir: &Path, extra: &str) -> String {
    config_with_group(dir, extra, unique_group())
}

pub fn config_with_group(dir: &Path, extra: &str, group: std::net::SocketAddrV4) -> String {
    config_full(dir, extra, group, "")
}

/// `replication` lines go into the `[replication]` table (listen is always port 0).
pub fn config_full(
    dir: &Path,
    extra: &str,
    group: std::net::SocketAddrV4,
    replication: &str,
) -> String {
    format!(
        r#"
[gateway]
listen = "127.0.0.1:0"
session = "TEST000001"
[journal]
dir = "{journal}"
durability = "flush"
segment_bytes = 4194304
[feed]
group = "{group}"
interface = "127.0.0.1"
session = "TEST000001"
rerequest = "127.0.0.1:0"
snapshot = "127.0.0.1:0"
[admin]
listen = "127.0.0.1:0"
[replication]
listen = "127.0.0.1:0"
{replication}
[limits]
orders_per_symbol = 4096
levels_per_side = 256
tokens_per_account = 8192
{extra}
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
[[symbols]]
symbol = "AAPL"
tick = 100
max_order_shares = 100000
max_order_notional = 5000000
[[symbols]]
symbol = "MSFT"
tick = 100
"#,
        journal = dir.join("journal").display(),
        group = group,
        replication = replication
    )
}

pub struct Venue {
    pub child: Child,
    pub gateway: SocketAddr,
    pub admin: SocketAddr,
    pub rerequest: SocketAddr,
    pub snapshot: SocketAddr,
    pub feed: std::net::SocketAddrV4,
    pub replication: SocketAddr,
    pub config: PathBuf,
    pub journal: PathBuf,
    /// The metrics endpoint, when the config enables it.
    pub metrics: Option<SocketAddr>,
}

impl Venue {
    /// Start `bourse run --config` with `text` written into `dir/bourse.toml`.
    pub fn start(dir: &Path, text: &str) -> Venue {
        Venue::start_with_env(dir, text, &[])
    }

    /// `start` with extra environment variables (test hooks such as
    /// `BOURSE_TEST_CLOCK_OFFSET_S`).
    pub fn start_with_env(dir: &Path, text: &str, env: &[(&str, &str)]) -> Venue {
        let (mut child, config) = spawn_with_env(dir, text, "run", env);
        let stdout = child.stdout.take().unwrap();
        let mut line = String::new();
        BufReader::new(stdout).read_line(&mut line).unwrap();
        Venue::from_listening(child, &line, config, dir.join("journal"))
    }

    /// The addresses of a `listening gateway=... ` line.
    pub fn from_listening(child: Child, line: &str, config: PathBuf, journal: PathBuf) -> Venue {
        let field = |name: &str| -> SocketAddr {
            let at = line
                .find(&format!("{name}="))
                .unwrap_or_else(|| panic!("no {name} in {line:?}"));
            let rest = &line[at + name.len() + 1..];
            rest.split_whitespace().next().unwrap().parse().unwrap()
        };
        let feed = match field("feed") {
            SocketAddr::V4(v4) => v4,
            other => panic!("feed {other}"),
        };
        let metrics = line
            .split_whitespace()
            .find_map(|f| f.strip_prefix("metrics="))
            .map(|a| a.parse().unwrap());
        Venue {
            metrics,
            gateway: field("gateway"),
            admin: field("admin"),
            rerequest: field("rerequest"),
            snapshot: field("snapshot"),
            replication: field("replication"),
            feed,
            child,
            config,
            journal,
        }
    }

    /// Send an authenticated admin request (the secret the daemon created for its config)
    /// to the admin address it actually bound; the answer line.
    pub fn ask_admin(&self, request: &bourse::daemon::admin::Request) -> String {
        use bourse::daemon::admin;
        let config = bourse::config::Config::load(&self.config).unwrap();
        let secret = admin::Secret::load(&admin::secret_path(&config).unwrap()).unwrap();
        admin::send(self.admin, &secret, request, TIMEOUT).unwrap()
    }

    /// A copy of the config naming the admin address the daemon bound, for `bourse admin
    /// --config`. The test configs bind admin on port 0: a port probed free and handed to the
    /// daemon can be taken meanwhile by another test's client (both come from the ephemeral
    /// range), which failed a test beside a build with "Address already in use".
    pub fn admin_config(&self) -> PathBuf {
        let text = std::fs::read_to_string(&self.config).unwrap();
        let any_port = "[admin]\nlisten = \"127.0.0.1:0\"";
        assert!(text.contains(any_port), "the config binds admin on port 0");
        let bound = format!("[admin]\nlisten = \"{}\"", self.admin);
        let path = self.config.with_extension("admin.toml");
        std::fs::write(&path, text.replacen(any_port, &bound, 1)).unwrap();
        path
    }

    /// SIGTERM and wait: the clean shutdown path.
    pub fn stop(mut self) -> std::process::ExitStatus {
        let pid = self.child.id() as i32;
        unsafe_kill(pid, 15);
        let status = self.child.wait().unwrap();
        std::mem::forget(self);
        status
    }

    /// Wait for the process to exit by itself (e.g. `bourse admin shutdown`), at most
    /// `timeout`; kills it and panics if it does not.
    pub fn wait_exit(mut self, timeout: Duration) -> std::process::ExitStatus {
        let deadline = std::time::Instant::now() + timeout;
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                std::mem::forget(self);
                return status;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "the daemon did not exit within {timeout:?}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// kill -9 and wait.
    pub fn kill9(mut self) {
        self.child.kill().unwrap();
        self.child.wait().unwrap();
        std::mem::forget(self);
    }
}

impl Drop for Venue {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Spawn `bourse <subcommand> --config dir/bourse.toml` with stdout piped.
pub fn spawn(dir: &Path, text: &str, subcommand: &str) -> (Child, PathBuf) {
    spawn_with_env(dir, text, subcommand, &[])
}

pub fn spawn_with_env(
    dir: &Path,
    text: &str,
    subcommand: &str,
    env: &[(&str, &str)],
) -> (Child, PathBuf) {
    let config = dir.join("bourse.toml");
    std::fs::write(&config, text).unwrap();
    let child = Command::new(bourse_binary())
        .args([subcommand, "--config"])
        .arg(&config)
        .env("RUST_LOG", "info")
        .envs(env.iter().copied())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("start bourse");
    (child, config)
}

/// A `bourse standby` process: its stdout lines arrive on a channel.
pub struct Standby {
    pub child: Option<Child>,
    lines: std::sync::mpsc::Receiver<String>,
    pub config: PathBuf,
    pub journal: PathBuf,
}

impl Standby {
    pub fn start(dir: &Path, text: &str) -> Standby {
        let (mut child, config) = spawn(dir, text, "standby");
        let stdout = child.stdout.take().unwrap();
        let (tx, lines) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let first = lines.recv_timeout(TIMEOUT).expect("standby starts");
        assert!(first.starts_with("following primary="), "{first}");
        Standby {
            child: Some(child),
            lines,
            config,
            journal: dir.join("journal"),
        }
    }

    /// Wait for the takeover line; `None` if it did not come within `timeout`.
    pub fn await_takeover(&mut self, timeout: Duration) -> Option<Venue> {
        let line = self.lines.recv_timeout(timeout).ok()?;
        let child = self.child.take().unwrap();
        Some(Venue::from_listening(
            child,
            &line,
            self.config.clone(),
            self.journal.clone(),
        ))
    }
}

impl Drop for Standby {
    fn drop(&mut self) {
        if let Some(child) = self.child.as_mut() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// A TCP forwarder between a standby and its primary that a test can cut.
pub struct Proxy {
    pub addr: SocketAddr,
    cut: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

impl Proxy {
    pub fn start(target: SocketAddr) -> Proxy {
        use std::sync::atomic::{AtomicBool, Ordering};
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let cut = std::sync::Arc::new(AtomicBool::new(false));
        let flag = cut.clone();
        std::thread::spawn(move || {
            for client in listener.incoming() {
                let Ok(client) = client else { break };
                if flag.load(Ordering::Relaxed) {
                    continue; // cut: new connections are dropped at once
                }
                let Ok(server) = std::net::TcpStream::connect(target) else {
                    continue;
                };
                for (mut from, mut to) in [
                    (client.try_clone().unwrap(), server.try_clone().unwrap()),
                    (server.try_clone().unwrap(), client.try_clone().unwrap()),
                ] {
                    let flag = flag.clone();
                    std::thread::spawn(move || {
                        let mut buf = [0u8; 16 << 10];
                        from.set_read_timeout(Some(Duration::from_millis(50)))
                            .unwrap();
                        while !flag.load(Ordering::Relaxed) {
                            match std::io::Read::read(&mut from, &mut buf) {
                                Ok(0) => break,
                                Ok(n) => {
                                    if std::io::Write::write_all(&mut to, &buf[..n]).is_err() {
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
                        let _ = to.shutdown(std::net::Shutdown::Both);
                        let _ = from.shutdown(std::net::Shutdown::Both);
                    });
                }
            }
        });
        Proxy { addr, cut }
    }

    /// Cut the link: close every forwarded connection and refuse new ones.
    pub fn cut(&self) {
        self.cut.store(true, std::sync::atomic::Ordering::Relaxed);
    }
}

fn unsafe_kill(pid: i32, signal: i32) {
    let status = Command::new("kill")
        .arg(format!("-{signal}"))
        .arg(pid.to_string())
        .status()
        .unwrap();
    assert!(status.success());
}

/// Wait up to `timeout` for `child` (stderr piped) to exit by itself: its status and what it
/// wrote to stderr, or None while it still runs (it is left running).
pub fn exited(child: &mut Child, timeout: Duration) -> Option<(std::process::ExitStatus, String)> {
    let deadline = std::time::Instant::now() + timeout;
    // Bounded by the deadline.
    while std::time::Instant::now() < deadline {
        if let Some(status) = child.try_wait().unwrap() {
            let mut stderr = String::new();
            let mut pipe = child.stderr.take().expect("stderr piped");
            std::io::Read::read_to_string(&mut pipe, &mut stderr).unwrap();
            return Some((status, stderr));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    None
}

/// Run `bourse <args>` and return (exit success, stdout).
pub fn bourse(args: &[&str]) -> (bool, String) {
    let out = Command::new(bourse_binary()).args(args).output().unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    )
}

/// Joins the venue's feed and collects every ITCH message from sequence 1 in order, filling
/// gaps (including the start of day it missed by joining late) from the re-request server.
pub struct FeedCollector {
    receiver: bourse::marketdata::receiver::FeedReceiver,
    rerequest: SocketAddr,
    session: bourse::wire::ascii::SessionId,
    pub messages: Vec<Vec<u8>>,
    pub ended: bool,
    /// Drop every n-th data packet on purpose (0 = none) to exercise re-requests.
    pub drop_every: u64,
    data_packets: u64,
    pub rerequests: u64,
}

impl FeedCollector {
    pub fn join(venue: &Venue) -> FeedCollector {
        let receiver = bourse::marketdata::receiver::FeedReceiver::join(
            venue.feed,
            std::net::Ipv4Addr::LOCALHOST,
            Duration::from_millis(200),
        )
        .unwrap();
        FeedCollector {
            receiver,
            rerequest: venue.rerequest,
            session: bourse::wire::ascii::SessionId::new("TEST000001").unwrap(),
            messages: Vec::new(),
            ended: false,
            drop_every: 0,
            data_packets: 0,
            rerequests: 0,
        }
    }

    /// Receive until End of Session, or until `deadline` passes.
    pub fn run_until_end(&mut self, timeout: Duration) {
        use bourse::marketdata::receiver::RecvError;
        use bourse::wire::moldudp64::PacketKind;
        let deadline = std::time::Instant::now() + timeout;
        while !self.ended && std::time::Instant::now() < deadline {
            let (kind, first, blocks) = match self.receiver.recv() {
                Ok(r) => {
                    let blocks: Vec<Vec<u8>> =
                        r.packet.messages().map(|(_, m)| m.to_vec()).collect();
                    (r.packet.kind(), r.packet.header.sequence, blocks)
                }
                Err(RecvError::Timeout) => continue,
                Err(e) => panic!("feed receive: {e:?}"),
            };
            if kind == PacketKind::Data {
                self.data_packets += 1;
                if self.drop_every > 0 && self.data_packets.is_multiple_of(self.drop_every) {
                    continue;
                }
            }
            let next = self.messages.len() as u64 + 1;
            if first > next {
                self.fill(next, first);
            }
            let skip = (self.messages.len() as u64 + 1).saturating_sub(first) as usize;
            if first <= self.messages.len() as u64 + 1 {
                self.messages.extend(blocks.into_iter().skip(skip));
            }
            if kind == PacketKind::EndOfSession {
                let end = first;
                if end > self.messages.len() as u64 + 1 {
                    self.fill(self.messages.len() as u64 + 1, end);
                }
                self.ended = true;
            }
        }
    }

    /// Re-request messages `from .. until` (exclusive) until they are all here.
    pub fn fill(&mut self, from: u64, until: u64) {
        let mut next = from;
        for _ in 0..10_000 {
            if next >= until {
                return;
            }
            let count = (until - next).min(u16::MAX as u64) as u16;
            self.rerequests += 1;
            let answer = bourse::marketdata::receiver::request_retransmission(
                self.rerequest,
                self.session,
                next,
                count,
                Duration::from_secs(2),
            )
            .unwrap()
            .expect("the re-request server answers");
            let packet = bourse::wire::moldudp64::Packet::decode(&answer).unwrap();
            assert_eq!(packet.header.sequence, next);
            for (_, m) in packet.messages() {
                self.messages.push(m.to_vec());
                next += 1;
            }
        }
        panic!("re-requests made no progress");
    }
}
