//! Shared helpers of the tools' end-to-end tests: start the real `bourse` daemon binary on free
//! ports with a journal in a temporary directory, and run the tools' binaries against it with a
//! time limit.
//!
//! Finding the daemon: Cargo gives a package's tests only the paths of that package's own
//! binaries (`CARGO_BIN_EXE_<name>`), and `bourse` belongs to the root package. The tools'
//! binaries live in `<target>/<profile>/`, where Cargo also puts `bourse`; so the helper runs
//! `cargo build -p bourse --bin bourse` for that target directory and profile once per test
//! process (a no-op when it is fresh, and never a stale daemon), then uses
//! `<target>/<profile>/bourse`. `BOURSE_BIN=/path/to/bourse` skips the build.

#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, SocketAddrV4};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// The daemon binary, built fresh for this target directory and profile.
pub fn bourse_bin() -> PathBuf {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        if let Some(path) = std::env::var_os("BOURSE_BIN") {
            return PathBuf::from(path);
        }
        let tool = PathBuf::from(env!("CARGO_BIN_EXE_bourse-feed"));
        let profile_dir = tool.parent().expect("binary directory");
        let target_dir = profile_dir.parent().expect("target directory");
        let profile = profile_dir
            .file_name()
            .and_then(|n| n.to_str())
            .expect("profile directory name");
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let mut build = Command::new(cargo);
        build
            .args(["build", "--quiet", "-p", "bourse", "--bin", "bourse"])
            .arg("--target-dir")
            .arg(target_dir)
            .current_dir(env!("CARGO_MANIFEST_DIR"));
        match profile {
            "debug" => {}
            "release" => {
                build.arg("--release");
            }
            other => {
                build.args(["--profile", other]);
            }
        }
        let built = build.status().map(|s| s.success()).unwrap_or(false);
        let bin = profile_dir.join("bourse");
        assert!(
            built || bin.exists(),
            "cannot build the bourse daemon; set BOURSE_BIN to its path"
        );
        bin
    })
    .clone()
}

/// A free UDP port on loopback (bound then released: the small race is acceptable in tests).
pub fn free_udp_port() -> u16 {
    std::net::UdpSocket::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A multicast group no other test process uses at the same time (239.194/16, apart from the
/// root package's tests on 239.193/16).
pub fn unique_group() -> SocketAddrV4 {
    use std::sync::atomic::{AtomicU32, Ordering};
    static NEXT: AtomicU32 = AtomicU32::new(1);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let pid = std::process::id();
    let ip = std::net::Ipv4Addr::new(239, 194, (pid % 250) as u8, (n % 250) as u8 + 1);
    SocketAddrV4::new(ip, free_udp_port())
}

pub fn config_text(dir: &Path, group: SocketAddrV4) -> String {
    format!(
        r#"
[gateway]
listen = "127.0.0.1:0"
session = "TEST000001"
[journal]
dir = "{journal}"
durability = "async"
segment_bytes = 16777216
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
[engine]
pin_cores = false
[limits]
orders_per_symbol = 65536
levels_per_side = 4096
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
    )
}

pub struct Venue {
    pub child: Child,
    pub gateway: SocketAddr,
    pub admin: SocketAddr,
    pub rerequest: SocketAddr,
    pub snapshot: SocketAddr,
    pub feed: SocketAddrV4,
    pub config: PathBuf,
}

impl Venue {
    /// `bourse run --config` on free ports, journal under `dir`.
    pub fn start(dir: &Path) -> Venue {
        let config = dir.join("bourse.toml");
        std::fs::write(&config, config_text(dir, unique_group())).unwrap();
        let mut child = Command::new(bourse_bin())
            .args(["run", "--config"])
            .arg(&config)
            .env("RUST_LOG", "warn")
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start bourse");
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let field = |name: &str| -> SocketAddr {
            let at = line
                .find(&format!("{name}="))
                .unwrap_or_else(|| panic!("no {name} in {line:?}"));
            let rest = &line[at + name.len() + 1..];
            rest.split_whitespace().next().unwrap().parse().unwrap()
        };
        let SocketAddr::V4(feed) = field("feed") else {
            panic!("feed is not IPv4: {line}")
        };
        Venue {
            gateway: field("gateway"),
            admin: field("admin"),
            rerequest: field("rerequest"),
            snapshot: field("snapshot"),
            feed,
            child,
            config,
        }
    }

    /// End the day through the admin port (the feed then ends its session).
    pub fn end_of_day(&self) {
        use bourse::daemon::admin;
        let config = bourse::config::Config::load(&self.config).unwrap();
        let secret = admin::Secret::load(&admin::secret_path(&config).unwrap()).unwrap();
        let answer = admin::send(
            self.admin,
            &secret,
            &admin::Request::EndOfDay,
            Duration::from_secs(5),
        )
        .unwrap();
        assert!(answer.starts_with("ok"), "{answer}");
    }
}

impl Drop for Venue {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub struct Output {
    pub status: ExitStatus,
    pub stdout: String,
    pub stderr: String,
}

/// A tool started in the background (stdout and stderr captured).
pub struct Running {
    child: Child,
    stdout: std::thread::JoinHandle<String>,
    stderr: std::thread::JoinHandle<String>,
}

fn collect(mut r: impl Read + Send + 'static) -> std::thread::JoinHandle<String> {
    std::thread::spawn(move || {
        let mut s = String::new();
        let _ = r.read_to_string(&mut s);
        s
    })
}

pub fn spawn(bin: &str, args: &[String], stdin: Option<&str>) -> Running {
    let mut child = Command::new(bin)
        .args(args)
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("start {bin}: {e}"));
    if let Some(text) = stdin {
        let mut input = child.stdin.take().unwrap();
        input.write_all(text.as_bytes()).unwrap();
        // Dropped here: the tool sees end of input.
    }
    let stdout = collect(child.stdout.take().unwrap());
    let stderr = collect(child.stderr.take().unwrap());
    Running {
        child,
        stdout,
        stderr,
    }
}

impl Running {
    /// Send a signal (e.g. `libc::SIGINT`, what Ctrl-C sends).
    pub fn signal(&self, signal: i32) {
        // SAFETY: kill(2) on our own child's pid.
        let rc = unsafe { libc::kill(self.child.id() as i32, signal) };
        assert_eq!(rc, 0, "kill failed");
    }

    /// Has the tool exited?
    pub fn exited(&mut self) -> bool {
        self.child.try_wait().unwrap().is_some()
    }

    /// Wait at most `limit`; a tool still running then is killed and the test fails.
    pub fn finish(mut self, limit: Duration) -> Output {
        let deadline = Instant::now() + limit;
        let status = loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                break status;
            }
            if Instant::now() >= deadline {
                let _ = self.child.kill();
                let _ = self.child.wait();
                let out = self.stdout.join().unwrap();
                let err = self.stderr.join().unwrap();
                panic!("still running after {limit:?}\nstdout:\n{out}\nstderr:\n{err}");
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        Output {
            status,
            stdout: self.stdout.join().unwrap(),
            stderr: self.stderr.join().unwrap(),
        }
    }
}

/// Run a tool to completion within `limit`.
pub fn run(bin: &str, args: &[String], stdin: Option<&str>, limit: Duration) -> Output {
    spawn(bin, args, stdin).finish(limit)
}

pub fn args(list: &[&dyn std::fmt::Display]) -> Vec<String> {
    list.iter().map(|a| a.to_string()).collect()
}
