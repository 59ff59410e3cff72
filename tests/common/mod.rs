//! Shared helpers of the end-to-end tests: start the real `bourse` binary on free ports with
//! a journal in a temporary directory, and stop it.

#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

pub const TIMEOUT: Duration = Duration::from_secs(5);

/// A config for tests: every listener on port 0, journal under `dir`.
pub fn config_text(dir: &Path, extra: &str) -> String {
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
group = "239.192.7.1:0"
interface = "127.0.0.1"
session = "TEST000001"
rerequest = "127.0.0.1:0"
snapshot = "127.0.0.1:0"
[admin]
listen = "127.0.0.1:0"
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
        journal = dir.join("journal").display()
    )
}

pub struct Venue {
    pub child: Child,
    pub gateway: SocketAddr,
    pub admin: SocketAddr,
    pub config: PathBuf,
    pub journal: PathBuf,
}

impl Venue {
    /// Start `bourse run --config` with `text` written into `dir/bourse.toml`.
    pub fn start(dir: &Path, text: &str) -> Venue {
        let config = dir.join("bourse.toml");
        std::fs::write(&config, text).unwrap();
        let mut child = Command::new(env!("CARGO_BIN_EXE_bourse"))
            .args(["run", "--config"])
            .arg(&config)
            .env("RUST_LOG", "info")
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start bourse");
        let stdout = child.stdout.take().unwrap();
        let mut line = String::new();
        BufReader::new(stdout).read_line(&mut line).unwrap();
        let field = |name: &str| -> SocketAddr {
            let at = line
                .find(&format!("{name}="))
                .unwrap_or_else(|| panic!("no {name} in {line:?}"));
            let rest = &line[at + name.len() + 1..];
            rest.split_whitespace().next().unwrap().parse().unwrap()
        };
        Venue {
            gateway: field("gateway"),
            admin: field("admin"),
            child,
            config,
            journal: dir.join("journal"),
        }
    }

    /// SIGTERM and wait: the clean shutdown path.
    pub fn stop(mut self) -> std::process::ExitStatus {
        let pid = self.child.id() as i32;
        unsafe_kill(pid, 15);
        let status = self.child.wait().unwrap();
        std::mem::forget(self);
        status
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

fn unsafe_kill(pid: i32, signal: i32) {
    let status = Command::new("kill")
        .arg(format!("-{signal}"))
        .arg(pid.to_string())
        .status()
        .unwrap();
    assert!(status.success());
}

/// Run `bourse <args>` and return (exit success, stdout).
pub fn bourse(args: &[&str]) -> (bool, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_bourse"))
        .args(args)
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    )
}
