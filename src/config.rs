//! TOML configuration with an embedded default (`config/default.toml`).
//!
//! Every key has a default except the accounts and symbols lists; unknown keys are errors so a
//! typo never silently falls back to a default. Errors are one line that names the problem.

use crate::exchange::{AccountDef, Limits, SymbolDef, Venue};
use serde::{Deserialize, Serialize};
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::path::{Path, PathBuf};

/// The configuration `bourse run` uses without `--config`.
pub const DEFAULT_TOML: &str = include_str!("../config/default.toml");

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    #[serde(default)]
    pub gateway: GatewayConfig,
    #[serde(default)]
    pub journal: JournalConfig,
    #[serde(default)]
    pub feed: FeedConfig,
    #[serde(default)]
    pub admin: AdminConfig,
    #[serde(default)]
    pub replication: ReplicationConfig,
    #[serde(default)]
    pub engine: EngineConfig,
    #[serde(default)]
    pub limits: Limits,
    pub accounts: Vec<AccountConfig>,
    pub symbols: Vec<SymbolDef>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct GatewayConfig {
    pub listen: SocketAddr,
    pub session: String,
    /// Server heartbeat after this much outbound silence.
    pub heartbeat_ms: u64,
    /// Drop a logged-in session after this much client silence.
    pub client_timeout_ms: u64,
    /// Drop a connection that has not logged in after this long.
    pub login_timeout_ms: u64,
    /// Simultaneous TCP connections (logged in or not).
    pub max_connections: u32,
    /// Bytes queued for one client before it is disconnected as a slow reader.
    pub outbound_buffer_bytes: u32,
}

impl Default for GatewayConfig {
    fn default() -> Self {
        GatewayConfig {
            listen: "127.0.0.1:15000".parse().expect("literal"),
            session: "BOURSE0001".into(),
            heartbeat_ms: 1_000,
            client_timeout_ms: 15_000,
            login_timeout_ms: 30_000,
            max_connections: 64,
            outbound_buffer_bytes: 1 << 20,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DurabilityMode {
    /// Written to the mapping; the OS writes it back. Survives a process crash.
    Async,
    /// Group commit: a reply leaves only after its input is msync'ed. Survives a machine crash.
    Flush,
    /// A reply leaves only after a standby has the input in its journal.
    Replicated,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct JournalConfig {
    pub dir: PathBuf,
    pub durability: DurabilityMode,
    /// Size of each preallocated segment file.
    pub segment_bytes: u64,
    /// Largest journal record payload (the start-of-day record holds the venue definition).
    pub max_payload_bytes: u32,
}

impl Default for JournalConfig {
    fn default() -> Self {
        JournalConfig {
            dir: "data/journal".into(),
            durability: DurabilityMode::Flush,
            segment_bytes: 256 << 20,
            max_payload_bytes: 1 << 20,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct FeedConfig {
    pub group: SocketAddr,
    pub interface: Ipv4Addr,
    pub session: String,
    pub rerequest: SocketAddr,
    pub snapshot: SocketAddr,
    /// UDP payload limit of one MoldUDP64 packet, header included.
    pub max_payload_bytes: u16,
    /// Longest a partly filled packet waits for more messages.
    pub max_hold_us: u64,
    /// Heartbeat packet after this much idle time.
    pub heartbeat_ms: u64,
    /// Multicast TTL (0 keeps packets on this host).
    pub ttl: u32,
}

impl Default for FeedConfig {
    fn default() -> Self {
        FeedConfig {
            group: "239.192.0.1:26400".parse().expect("literal"),
            interface: Ipv4Addr::LOCALHOST,
            session: "BOURSE0001".into(),
            rerequest: "127.0.0.1:26401".parse().expect("literal"),
            snapshot: "127.0.0.1:26402".parse().expect("literal"),
            max_payload_bytes: 1_400,
            max_hold_us: 100,
            heartbeat_ms: 1_000,
            ttl: 1,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AdminConfig {
    pub listen: SocketAddr,
}

impl Default for AdminConfig {
    fn default() -> Self {
        AdminConfig {
            listen: "127.0.0.1:15001".parse().expect("literal"),
        }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ReplicationConfig {
    pub listen: SocketAddr,
    /// For `bourse standby`: the primary's replication address.
    pub primary: Option<SocketAddr>,
    /// For `bourse standby`: the primary's admin address, probed before taking over (fencing:
    /// a primary that still answers here is alive, only the replication link was lost).
    pub primary_admin: Option<SocketAddr>,
    /// A standby takes over after this long without hearing from the primary.
    pub takeover_ms: u64,
    pub heartbeat_ms: u64,
}

impl Default for ReplicationConfig {
    fn default() -> Self {
        ReplicationConfig {
            listen: "127.0.0.1:15100".parse().expect("literal"),
            primary: None,
            primary_admin: None,
            takeover_ms: 500,
            heartbeat_ms: 100,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum WaitStrategy {
    /// Busy-poll: lowest latency, burns a core per waiting thread.
    Spin,
    /// Poll with `yield_now` between attempts.
    Yield,
    /// Block until woken: no CPU when idle (the default; right for 2 cores and tests).
    Park,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Layout {
    /// I/O, sequencing, matching and publishing on one pinned thread.
    Compact,
    /// Gateway, sequencer, shard threads and output stage on separate threads.
    Sharded,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct EngineConfig {
    pub layout: Layout,
    /// Matching threads in the sharded layout; symbols are dealt round-robin.
    pub shards: u32,
    pub wait: WaitStrategy,
    /// Pin threads to cores when the machine has enough of them.
    pub pin_cores: bool,
    /// Capacity of every ring between stages (a power of two).
    pub ring_slots: u32,
    /// Interval of the sequencer's timer input (TIF expiry).
    pub tick_ms: u64,
}

impl Default for EngineConfig {
    fn default() -> Self {
        EngineConfig {
            layout: Layout::Compact,
            shards: 1,
            wait: WaitStrategy::Park,
            pin_cores: true,
            ring_slots: 1 << 16,
            tick_ms: 1_000,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AccountConfig {
    pub username: String,
    pub password: String,
    pub firm: String,
}

/// A configuration problem, as one line for the operator.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfigError(pub String);

impl std::fmt::Display for ConfigError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ConfigError {}

impl Config {
    pub fn embedded_default() -> Config {
        Config::parse(DEFAULT_TOML, "embedded default")
            .expect("the embedded default config is valid")
    }

    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| ConfigError(format!("cannot read config {}: {e}", path.display())))?;
        Config::parse(&text, &path.display().to_string())
    }

    /// Parse and check; `origin` names the source in error messages.
    pub fn parse(text: &str, origin: &str) -> Result<Config, ConfigError> {
        let config: Config = toml::from_str(text).map_err(|e| {
            let first = e
                .to_string()
                .lines()
                .map(str::trim)
                .filter(|l| !l.is_empty())
                .collect::<Vec<_>>()
                .join(" ");
            ConfigError(format!("config {origin}: {first}"))
        })?;
        config
            .check()
            .map_err(|m| ConfigError(format!("config {origin}: {m}")))?;
        Ok(config)
    }

    fn check(&self) -> Result<(), String> {
        check_session("gateway.session", &self.gateway.session)?;
        check_session("feed.session", &self.feed.session)?;
        match self.feed.group {
            SocketAddr::V4(g) if g.ip().is_multicast() => {}
            other => {
                return Err(format!(
                    "feed.group {other} is not an IPv4 multicast address"
                ));
            }
        }
        if !(21..=65_507).contains(&self.feed.max_payload_bytes) {
            return Err("feed.max_payload_bytes must be 21..=65507".into());
        }
        if !self.engine.ring_slots.is_power_of_two() {
            return Err("engine.ring_slots must be a power of two".into());
        }
        if self.engine.shards == 0 {
            return Err("engine.shards must be at least 1".into());
        }
        for (i, a) in self.accounts.iter().enumerate() {
            if a.password.len() > 10 || !a.password.is_ascii() {
                return Err(format!(
                    "account {:?}: password must be at most 10 ASCII characters",
                    a.username
                ));
            }
            if self.accounts[..i]
                .iter()
                .any(|b| b.username.eq_ignore_ascii_case(&a.username))
            {
                return Err(format!("account {:?} is defined twice", a.username));
            }
        }
        // The venue's own checks, without building the exchange: that would allocate and
        // prefault every book and token table on each parse (`bourse admin`, every tool).
        self.venue().specs().map(|_| ()).map_err(|e| e.to_string())
    }

    /// The venue definition the state machine runs with (no passwords).
    pub fn venue(&self) -> Venue {
        Venue {
            symbols: self.symbols.clone(),
            accounts: self
                .accounts
                .iter()
                .map(|a| AccountDef {
                    username: a.username.clone(),
                    firm: a.firm.clone(),
                })
                .collect(),
            limits: self.limits,
        }
    }

    /// The multicast group as an IPv4 socket address (checked at load).
    pub fn feed_group(&self) -> SocketAddrV4 {
        match self.feed.group {
            SocketAddr::V4(g) => g,
            SocketAddr::V6(_) => unreachable!("checked at load"),
        }
    }
}

fn check_session(key: &str, session: &str) -> Result<(), String> {
    if session.is_empty() || session.len() > 10 || !session.bytes().all(|b| b.is_ascii_graphic()) {
        return Err(format!(
            "{key} {session:?} must be 1-10 printable ASCII characters"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn embedded_default_has_the_design_keys() {
        let c = Config::embedded_default();
        assert_eq!(c.gateway.listen.to_string(), "127.0.0.1:15000");
        assert_eq!(c.gateway.session, "BOURSE0001");
        assert_eq!(c.journal.dir, PathBuf::from("data/journal"));
        assert_eq!(c.feed.group.to_string(), "239.192.0.1:26400");
        assert_eq!(c.feed.interface, Ipv4Addr::LOCALHOST);
        assert_eq!(c.admin.listen.to_string(), "127.0.0.1:15001");
        assert_eq!(c.replication.listen.to_string(), "127.0.0.1:15100");
        assert_eq!(c.replication.takeover_ms, 500);
        assert_eq!(c.venue().locate_of("MSFT").map(|l| l.0), Some(2));
        assert_eq!(c.limits.tokens_per_account, 262_144);
    }

    #[test]
    fn minimal_config_takes_defaults() {
        let c = Config::parse(
            r#"
            [[accounts]]
            username = "U1"
            password = "p"
            firm = "F1"
            [[symbols]]
            symbol = "AAPL"
            tick = 100
            round_lot = 100
            max_order_shares = 1000
            "#,
            "test",
        )
        .unwrap();
        assert_eq!(c.gateway, GatewayConfig::default());
        assert_eq!(c.symbols[0].max_order_notional, None);
        assert_eq!(c.engine.wait, WaitStrategy::Park);
    }

    #[test]
    fn errors_are_one_line_and_name_the_problem() {
        let cases = [
            ("[gateway]\nlisten = 5\n", "listen"),
            ("[gatway]\n", "gatway"),
            ("accounts = []\nsymbols = []\n", "symbols"),
        ];
        for (text, needle) in cases {
            let e = Config::parse(text, "t").unwrap_err().to_string();
            assert!(!e.contains('\n'), "{e}");
            assert!(e.contains(needle), "{e}");
        }
        let mut c = Config::embedded_default();
        c.feed.group = "127.0.0.1:1".parse().unwrap();
        assert!(c.check().unwrap_err().contains("multicast"));
    }

    /// Parsing checks the venue without building the exchange: limits whose tables would
    /// need hundreds of gigabytes parse in no time (the daemon meets them at start), where
    /// parsing used to allocate (and prefault) every book and token table, aborting here.
    #[test]
    fn parsing_does_not_build_the_books() {
        let text = format!(
            "{}\n[limits]\norders_per_symbol = 4000000000\nlevels_per_side = 4000000000\n\
             tokens_per_account = 4000000000\n",
            "[[accounts]]\nusername = \"A\"\npassword = \"p\"\nfirm = \"F\"\n\
             [[symbols]]\nsymbol = \"X\"\ntick = 1\n"
        );
        let started = std::time::Instant::now();
        let config = Config::parse(&text, "t").expect("valid");
        assert_eq!(config.limits.orders_per_symbol, 4_000_000_000);
        assert!(started.elapsed() < std::time::Duration::from_secs(1));
        let zero = text.replace("tokens_per_account = 4000000000", "tokens_per_account = 0");
        let error = Config::parse(&zero, "t").unwrap_err().to_string();
        assert!(error.contains("limit"), "{error}");
    }
}
