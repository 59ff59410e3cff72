//! TOML configuration with an embedded default (`config/default.toml`).
//!
//! Every key has a default except the accounts and symbols lists; unknown keys are errors so a
//! typo never silently falls back to a default. Errors are one line that names the problem.

use crate::exchange::{AccountDef, Limits, Stp, SymbolDef, Venue};
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
    pub snapshot: SnapshotConfig,
    /// Raft cluster members (`src/cluster`); absent: the venue runs alone.
    #[serde(default)]
    pub cluster: Option<crate::cluster::config::ClusterConfig>,
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
    /// Connections not logged in yet, at once; at the bound a new one closes the oldest.
    pub max_pending_logins: u32,
    /// Connections not logged in yet from one source address, at once (same rule).
    pub max_pending_per_source: u32,
    /// Longest delay before a failed login from a busy source gets Login Rejected `A`.
    pub login_backoff_max_ms: u64,
    /// Failed logins a source may have remembered before it is locked out.
    pub login_lockout_failures: u32,
    /// How long failures are remembered, and a lockout lasts, after a source's last failure.
    pub login_lockout_ms: u64,
}

impl Default for GatewayConfig {
    fn default() -> Self {
        GatewayConfig {
            listen: "127.0.0.1:15000".parse().expect("literal"),
            session: "BOURSE0001".into(),
            heartbeat_ms: 1_000,
            client_timeout_ms: 15_000,
            login_timeout_ms: 5_000,
            max_connections: 64,
            outbound_buffer_bytes: 1 << 20,
            max_pending_logins: 32,
            max_pending_per_source: 8,
            login_backoff_max_ms: 2_000,
            login_lockout_failures: 20,
            login_lockout_ms: 60_000,
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
    /// A reply leaves only after a standby has the input in its journal (the legacy pair of
    /// `bourse standby` with `[replication] primary`).
    Replicated,
    /// A reply leaves once a quorum of the cluster's members has its input in its journal
    /// mapping; every member msyncs in the background. Needs a `[cluster]` of several members.
    Quorum,
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
    /// `--truncate-corrupt-tail` (a command-line flag, never read from the file): cut a
    /// damaged durable tail of the journal the daemon opens instead of refusing to start.
    #[serde(skip)]
    pub truncate_corrupt_tail: bool,
}

impl Default for JournalConfig {
    fn default() -> Self {
        JournalConfig {
            dir: "data/journal".into(),
            durability: DurabilityMode::Flush,
            segment_bytes: 256 << 20,
            truncate_corrupt_tail: false,
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
    /// Address blocks the re-request server answers; none = loopback plus the network of
    /// `interface` (and of the re-request address).
    pub rerequest_allow: Option<Vec<String>>,
    /// Re-requests answered per second per source address.
    pub rerequest_requests_per_s: u32,
    /// Bytes per second a source may get beyond one byte out per byte it sent.
    pub rerequest_bytes_per_s: u32,
    /// GLIMPSE: close a connection that has not logged in after this long.
    pub snapshot_login_timeout_ms: u64,
    /// GLIMPSE: close a client whose socket has taken nothing of its snapshot for this long.
    pub snapshot_stall_timeout_ms: u64,
    /// GLIMPSE connections at once.
    pub snapshot_max_connections: u32,
    /// GLIMPSE connections not logged in yet from one source address, at once.
    pub snapshot_max_per_source: u32,
    /// GLIMPSE snapshots being sent to one account at once (a client with credentials that
    /// reconnects in a loop must not hold every slot).
    pub snapshot_max_per_account: u32,
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
            rerequest_allow: None,
            rerequest_requests_per_s: 1_000,
            rerequest_bytes_per_s: 256 << 10,
            snapshot_login_timeout_ms: 5_000,
            snapshot_stall_timeout_ms: 5_000,
            snapshot_max_connections: 8,
            snapshot_max_per_source: 4,
            snapshot_max_per_account: 4,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AdminConfig {
    pub listen: SocketAddr,
    /// The shared secret for admin authentication; none = `<journal.dir>.admin-secret`.
    /// The daemon creates it (mode 0600, random) if it does not exist.
    pub secret_file: Option<PathBuf>,
    /// Close an admin connection that has not sent its request after this long.
    pub request_timeout_ms: u64,
    /// Admin connections at once; at the bound a new one closes the oldest.
    pub max_connections: u32,
    /// Prometheus text endpoint (`GET /metrics`); none = off.
    pub metrics_listen: Option<SocketAddr>,
}

impl Default for AdminConfig {
    fn default() -> Self {
        AdminConfig {
            listen: "127.0.0.1:15001".parse().expect("literal"),
            secret_file: None,
            request_timeout_ms: 2_000,
            max_connections: 64,
            metrics_listen: None,
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
    /// The secret a primary and its standbys share (at least 16 bytes): with one, every
    /// replication connection is authenticated both ways before a byte of journal moves; or:
    pub secret: Option<String>,
    /// a file holding it (trimmed). Neither: the port is not authenticated (as before).
    pub secret_file: Option<PathBuf>,
}

impl Default for ReplicationConfig {
    fn default() -> Self {
        ReplicationConfig {
            listen: "127.0.0.1:15100".parse().expect("literal"),
            primary: None,
            primary_admin: None,
            takeover_ms: 500,
            heartbeat_ms: 100,
            secret: None,
            secret_file: None,
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
    /// Interval of the sequencer's timer input while orders can expire (TIF expiry lands
    /// within this plus the host's scheduling delay after the deadline).
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
            tick_ms: 250,
        }
    }
}

/// State snapshots (`src/snapshot`): when the daemon writes one, decided from journaled
/// values only (input counts, journaled timestamps). 0 turns a trigger off.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SnapshotConfig {
    /// A snapshot every this many inputs.
    pub every_inputs: u64,
    /// A snapshot once this many seconds of journaled time passed since the last one.
    pub every_seconds: u64,
    /// Snapshots kept per trading day (the newest; at least 1).
    pub keep: u32,
}

impl Default for SnapshotConfig {
    fn default() -> Self {
        SnapshotConfig {
            // Off by default: the engine thread pauses to encode the state (tens to hundreds of
            // milliseconds on a busy day); an operator who wants short restarts turns them on.
            every_inputs: 0,
            every_seconds: 0,
            keep: 3,
        }
    }
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AccountConfig {
    pub username: String,
    pub password: String,
    pub firm: String,
    /// Venue controls (DESIGN.md 4a); see [`crate::exchange::AccountDef`].
    #[serde(default)]
    pub stp: Stp,
    #[serde(default)]
    pub cancel_on_disconnect: bool,
    #[serde(default)]
    pub max_open_orders: Option<u32>,
    #[serde(default)]
    pub max_open_shares: Option<u64>,
    #[serde(default)]
    pub max_day_shares: Option<u64>,
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

    /// The config as TOML that [`Config::parse`] reads back to the same config (tools that
    /// write a config, e.g. for a synthetic journal's venue).
    pub fn to_toml(&self) -> Result<String, ConfigError> {
        toml::to_string(self).map_err(|e| ConfigError(format!("cannot write the config: {e}")))
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
        self.check_hostile_limits()?;
        if let Some(cluster) = &self.cluster {
            cluster.check(self.journal.max_payload_bytes)?;
        }
        self.check_cluster_shape()?;
        for (i, a) in self.accounts.iter().enumerate() {
            if a.password.len() > 10 || !crate::exchange::venue::paddable(&a.password) {
                return Err(format!(
                    "account {:?}: password must be at most 10 printable ASCII characters, \
                     no spaces",
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
        // The venue's own checks (symbols, accounts, sizes) without building anything: a
        // tool or `bourse admin` that reads the config allocates no books.
        self.venue().check().map_err(|e| e.to_string())?;
        crate::limits::check(self)
    }

    /// A cluster of several members releases on commit (`quorum`), runs the compact layout
    /// and is not a legacy standby; `quorum` needs such a cluster.
    fn check_cluster_shape(&self) -> Result<(), String> {
        let clustered = self.is_clustered();
        match (clustered, self.journal.durability) {
            (true, DurabilityMode::Quorum) => {}
            (false, DurabilityMode::Async | DurabilityMode::Flush | DurabilityMode::Replicated) => {
            }
            (true, _) => {
                return Err("journal.durability must be \"quorum\" in a cluster of several members (replies leave once a quorum has the input)".into());
            }
            (false, DurabilityMode::Quorum) => {
                return Err(
                    "journal.durability = \"quorum\" needs a [cluster] of several members".into(),
                );
            }
        }
        if clustered && self.engine.layout == Layout::Sharded {
            return Err(
                "engine.layout = \"sharded\" is not supported in a cluster yet: use \"compact\""
                    .into(),
            );
        }
        if clustered && self.replication.primary.is_some() {
            return Err(
                "replication.primary (a legacy standby) and a [cluster] of several members exclude each other"
                    .into(),
            );
        }
        if clustered
            && (self.replication.secret.is_some() || self.replication.secret_file.is_some())
        {
            // A cluster has no legacy replication port: such a secret would protect nothing,
            // and an operator who set it would believe the members' traffic authenticated.
            return Err(
                "replication.secret / secret_file are for the legacy standby; a [cluster] of several members authenticates with cluster.secret / secret_file"
                    .into(),
            );
        }
        if self.feed.ttl > 255 {
            return Err(format!(
                "feed.ttl {} is out of range: an IP TTL is 0..=255 (0 keeps packets on this host)",
                self.feed.ttl
            ));
        }
        let (secret, has_file) = (
            self.replication.secret.as_deref(),
            self.replication.secret_file.is_some(),
        );
        crate::peer_auth::check_secret_config("replication", secret, has_file)?;
        Ok(())
    }

    /// The legacy replication secret (`[replication] secret` or `secret_file`), if any.
    pub fn replication_secret(&self) -> Result<Option<Vec<u8>>, String> {
        let replication = &self.replication;
        let secret = replication.secret.as_deref();
        crate::peer_auth::read_secret("replication", secret, replication.secret_file.as_deref())
    }

    /// A `[cluster]` of several members: raft replicates the journal (a single member runs alone).
    pub fn is_clustered(&self) -> bool {
        self.cluster.as_ref().is_some_and(|c| !c.is_single())
    }

    /// The bounds that keep hostile clients from taking a port (issue 12): each at least 1.
    fn check_hostile_limits(&self) -> Result<(), String> {
        let at_least_one = [
            (
                "gateway.max_connections",
                u64::from(self.gateway.max_connections),
            ),
            ("gateway.heartbeat_ms", self.gateway.heartbeat_ms),
            ("gateway.client_timeout_ms", self.gateway.client_timeout_ms),
            ("replication.takeover_ms", self.replication.takeover_ms),
            ("replication.heartbeat_ms", self.replication.heartbeat_ms),
            (
                "gateway.max_pending_logins",
                u64::from(self.gateway.max_pending_logins),
            ),
            (
                "gateway.max_pending_per_source",
                u64::from(self.gateway.max_pending_per_source),
            ),
            ("gateway.login_timeout_ms", self.gateway.login_timeout_ms),
            (
                "gateway.login_lockout_failures",
                u64::from(self.gateway.login_lockout_failures),
            ),
            (
                "feed.rerequest_requests_per_s",
                u64::from(self.feed.rerequest_requests_per_s),
            ),
            (
                "feed.snapshot_login_timeout_ms",
                self.feed.snapshot_login_timeout_ms,
            ),
            (
                "feed.snapshot_stall_timeout_ms",
                self.feed.snapshot_stall_timeout_ms,
            ),
            (
                "feed.snapshot_max_connections",
                u64::from(self.feed.snapshot_max_connections),
            ),
            (
                "feed.snapshot_max_per_source",
                u64::from(self.feed.snapshot_max_per_source),
            ),
            (
                "feed.snapshot_max_per_account",
                u64::from(self.feed.snapshot_max_per_account),
            ),
            ("admin.request_timeout_ms", self.admin.request_timeout_ms),
            (
                "admin.max_connections",
                u64::from(self.admin.max_connections),
            ),
            ("snapshot.keep", u64::from(self.snapshot.keep)),
        ];
        if let Some((key, _)) = at_least_one.iter().find(|(_, v)| *v == 0) {
            return Err(format!("{key} must be at least 1"));
        }
        if let Some(blocks) = &self.feed.rerequest_allow {
            crate::guard::Allowlist::parse(blocks)
                .map_err(|e| format!("feed.rerequest_allow: {e}"))?;
        }
        Ok(())
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
                    stp: a.stp,
                    cancel_on_disconnect: a.cancel_on_disconnect,
                    max_open_orders: a.max_open_orders,
                    max_open_shares: a.max_open_shares,
                    max_day_shares: a.max_day_shares,
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

    #[test]
    fn hostile_client_limits_are_checked() {
        let c = Config::embedded_default();
        assert_eq!(c.gateway.login_timeout_ms, 5_000);
        assert_eq!(c.feed.rerequest_allow, None);
        assert_eq!(c.admin.secret_file, None);
        let mut bad = c.clone();
        bad.gateway.max_pending_per_source = 0;
        assert!(
            bad.check()
                .unwrap_err()
                .contains("gateway.max_pending_per_source")
        );
        let mut bad = c.clone();
        bad.admin.max_connections = 0;
        assert!(bad.check().unwrap_err().contains("admin.max_connections"));
        let mut bad = c.clone();
        bad.feed.rerequest_allow = Some(vec!["10.0.0.0/8".into(), "10.0.0.0/40".into()]);
        assert!(bad.check().unwrap_err().contains("feed.rerequest_allow"));
        let text = format!(
            "{}\n",
            DEFAULT_TOML.replace(
                "[admin]\n",
                "[admin]\nsecret_file = \"/etc/bourse/admin.key\"\nrequest_timeout_ms = 500\n"
            )
        );
        let parsed = Config::parse(&text, "t").unwrap();
        assert_eq!(
            parsed.admin.secret_file,
            Some(PathBuf::from("/etc/bourse/admin.key"))
        );
        assert_eq!(parsed.admin.request_timeout_ms, 500);
    }

    /// Parsing checks the venue without building the exchange: limits whose tables would
    /// need hundreds of gigabytes parse in no time (the daemon meets them at start), where
    /// parsing used to allocate (and prefault) every book and token table, aborting here.
    #[test]
    fn parsing_does_not_build_the_books() {
        let text = format!(
            "{}\n[limits]\norders_per_symbol = 2000000000\nlevels_per_side = 1000000000\n\
             tokens_per_account = 4000000000\n",
            "[[accounts]]\nusername = \"A\"\npassword = \"p\"\nfirm = \"F\"\n\
             [[symbols]]\nsymbol = \"X\"\ntick = 1\n"
        );
        let started = std::time::Instant::now();
        let config = Config::parse(&text, "t").expect("valid");
        assert_eq!(config.limits.orders_per_symbol, 2_000_000_000);
        assert!(started.elapsed() < std::time::Duration::from_secs(1));
        let zero = text.replace("tokens_per_account = 4000000000", "tokens_per_account = 0");
        let error = Config::parse(&zero, "t").unwrap_err().to_string();
        assert!(error.contains("limit"), "{error}");
    }

    /// Values that parse but could only be typos are refused with the field named: a zero
    /// round lot, share or notional limit; a space inside a space-padded wire field.
    #[test]
    fn nonsense_symbol_and_account_values_are_refused() {
        let base = "[[accounts]]\nusername = \"AB\"\npassword = \"p\"\nfirm = \"F\"\n\
                    [[symbols]]\nsymbol = \"X\"\ntick = 1\n";
        Config::parse(base, "t").expect("the base is valid");
        for (from, to, says) in [
            ("tick = 1", "tick = 1\nround_lot = 0", "round_lot"),
            (
                "tick = 1",
                "tick = 1\nmax_order_shares = 0",
                "max_order_shares",
            ),
            (
                "tick = 1",
                "tick = 1\nmax_order_notional = 0",
                "max_order_notional",
            ),
            ("username = \"AB\"", "username = \"A B\"", "no spaces"),
            ("username = \"AB\"", "username = \" AB\"", "no spaces"),
            ("firm = \"F\"", "firm = \"F G\"", "no spaces"),
            ("password = \"p\"", "password = \"p q\"", "no spaces"),
            ("symbol = \"X\"", "symbol = \"X Y\"", "no spaces"),
            ("symbol = \"X\"", "symbol = \"X\\t\"", "no spaces"),
        ] {
            let text = base.replacen(from, to, 1);
            let error = Config::parse(&text, "t").unwrap_err().to_string();
            assert!(error.contains(says), "{to}: {error}");
        }
        let dotted = base.replacen("symbol = \"X\"", "symbol = \"BRK.B\"", 1);
        Config::parse(&dotted, "t").expect("punctuation is not padding");
    }

    /// Zero where a zero stops the venue working (every connection refused, sessions dropped
    /// at once, a standby taking over on every scheduling hiccup) is refused naming the key;
    /// a TTL the kernel refuses is caught before the feed fails to open.
    #[test]
    fn zero_bounds_and_timers_and_an_impossible_ttl_are_refused() {
        let base = "[[accounts]]\nusername = \"AB\"\npassword = \"p\"\nfirm = \"F\"\n\
                    [[symbols]]\nsymbol = \"X\"\ntick = 1\n";
        for (section, key) in [
            ("gateway", "max_connections"),
            ("gateway", "heartbeat_ms"),
            ("gateway", "client_timeout_ms"),
            ("replication", "takeover_ms"),
            ("replication", "heartbeat_ms"),
        ] {
            let text = format!("[{section}]\n{key} = 0\n{base}");
            let error = Config::parse(&text, "t").unwrap_err().to_string();
            assert!(
                error.contains(&format!("{section}.{key} must be at least 1")),
                "{error}"
            );
        }
        let error = Config::parse(&format!("[feed]\nttl = 256\n{base}"), "t").unwrap_err();
        assert!(error.to_string().contains("feed.ttl"), "{error}");
        Config::parse(&format!("[feed]\nttl = 0\n{base}"), "t").expect("0: this host only");
    }

    #[test]
    fn a_cluster_of_several_members_releases_on_quorum_and_runs_compact() {
        let cluster = "[cluster]\nid = 1\nmembers = [\"127.0.0.1:1\", \"127.0.0.1:2\", \"127.0.0.1:3\"]\nsecret = \"0123456789abcdef\"\n";
        let with = |journal: &str, more: &str| {
            let text = DEFAULT_TOML.replacen("durability = \"flush\"", journal, 1);
            Config::parse(&format!("{text}\n{more}\n{cluster}"), "t").map_err(|e| e.to_string())
        };
        let quorum = "durability = \"quorum\"";
        let config = with(quorum, "").expect("a quorum cluster");
        assert!(config.is_clustered());
        assert_eq!(config.journal.durability, DurabilityMode::Quorum);
        let flush = with("durability = \"flush\"", "").unwrap_err();
        assert!(flush.contains("must be \"quorum\""), "{flush}");
        let sharded = with(quorum, "[engine]\nlayout = \"sharded\"").unwrap_err();
        assert!(sharded.contains("compact"), "{sharded}");
        let alone = DEFAULT_TOML.replacen("durability = \"flush\"", quorum, 1);
        let alone = Config::parse(&alone, "t").unwrap_err().to_string();
        assert!(alone.contains("needs a [cluster]"), "{alone}");
        let single = "[cluster]\nid = 1\nmembers = [\"127.0.0.1:1\"]\n";
        let config = Config::parse(&format!("{DEFAULT_TOML}\n{single}"), "t").unwrap();
        assert!(!config.is_clustered(), "one member runs alone");
    }

    #[test]
    fn a_cluster_refuses_the_legacy_standbys_keys() {
        let cluster = "[cluster]\nid = 1\nmembers = [\"127.0.0.1:1\", \"127.0.0.1:2\", \"127.0.0.1:3\"]\nsecret = \"0123456789abcdef\"\n";
        let with = |replication: &str| {
            let text = DEFAULT_TOML
                .replacen("durability = \"flush\"", "durability = \"quorum\"", 1)
                .replacen(
                    "[replication]\n",
                    &format!("[replication]\n{replication}\n"),
                    1,
                );
            Config::parse(&format!("{text}\n{cluster}"), "t").map_err(|e| e.to_string())
        };
        with("").expect("a plain cluster");
        let primary = with("primary = \"127.0.0.1:9\"").unwrap_err();
        assert!(primary.contains("exclude each other"), "{primary}");
        // Set, it would protect nothing: a cluster opens no legacy replication port.
        for key in [
            "secret = \"0123456789abcdef\"",
            "secret_file = \"/etc/hostname\"",
        ] {
            let error = with(key).unwrap_err();
            assert!(error.contains("cluster.secret"), "{key}: {error}");
        }
    }
}
