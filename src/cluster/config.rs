//! The `[cluster]` section. Absent, or with one member, the venue runs alone without raft (its
//! journal byte-identical to a single node's). With more, every member lists the same
//! `members` in the same order and its own position as `id`, and shares one secret.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::node::{Fencing, NodeConfig};
use super::transport::{SECRET_BYTES_MIN, TransportConfig};

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClusterConfig {
    /// This member: 1-based position in `members`.
    pub id: u64,
    /// Every member's cluster address (this one's included), the same list on every member.
    pub members: Vec<SocketAddr>,
    /// The address this member binds; default: its own entry in `members` (set it when the
    /// others reach this member through another address: NAT, a proxy).
    #[serde(default)]
    pub listen: Option<SocketAddr>,
    /// The shared secret authenticating members (at least 16 bytes), or:
    #[serde(default)]
    pub secret: Option<String>,
    /// a file holding it (surrounding whitespace ignored).
    #[serde(default)]
    pub secret_file: Option<PathBuf>,
    /// Term and hard-state files; default: the journal directory's path + `.raft`.
    #[serde(default)]
    pub dir: Option<PathBuf>,
    /// The raft clock: the loop ticks the node this often.
    #[serde(default = "defaults::tick_ms")]
    pub tick_ms: u64,
    /// The leader's heartbeat (and lease renewal) interval.
    #[serde(default = "defaults::heartbeat_ms")]
    pub heartbeat_ms: u64,
    /// A follower that hears no leader for this long (plus a random part up to
    /// `election_spread_ms`) campaigns; the leader's lease is 3 ticks shorter.
    #[serde(default = "defaults::election_timeout_ms")]
    pub election_timeout_ms: u64,
    #[serde(default = "defaults::election_spread_ms")]
    pub election_spread_ms: u64,
    /// Entry bytes in one append message (one entry always fits).
    #[serde(default = "defaults::append_bytes_max")]
    pub append_bytes_max: u64,
    /// Append messages in flight to one follower.
    #[serde(default = "defaults::appends_in_flight_max")]
    pub appends_in_flight_max: usize,
    /// Uncommitted bytes the leader accepts before refusing input (back-pressure).
    #[serde(default = "defaults::uncommitted_bytes_max")]
    pub uncommitted_bytes_max: u64,
    /// Largest message frame between members.
    #[serde(default = "defaults::frame_bytes_max")]
    pub frame_bytes_max: u32,
    /// Messages queued to one member / received and not stepped yet; past either, dropped.
    #[serde(default = "defaults::outbound_messages_max")]
    pub outbound_messages_max: usize,
    #[serde(default = "defaults::inbound_messages_max")]
    pub inbound_messages_max: usize,
    #[serde(default = "defaults::connect_timeout_ms")]
    pub connect_timeout_ms: u64,
    #[serde(default = "defaults::handshake_timeout_ms")]
    pub handshake_timeout_ms: u64,
    /// A member connection silent this long is closed.
    #[serde(default = "defaults::idle_timeout_ms")]
    pub idle_timeout_ms: u64,
    /// A leader's appends to followers beyond the ones a majority needs wait at most this
    /// long, merged (`cluster::majority_first`); 0 (the default) sends every append to every
    /// follower at once.
    #[serde(default = "defaults::minority_append_delay_us")]
    pub minority_append_delay_us: u64,
}

mod defaults {
    pub fn tick_ms() -> u64 {
        10
    }
    pub fn heartbeat_ms() -> u64 {
        50
    }
    pub fn election_timeout_ms() -> u64 {
        250
    }
    pub fn election_spread_ms() -> u64 {
        150
    }
    pub fn append_bytes_max() -> u64 {
        1 << 20
    }
    pub fn appends_in_flight_max() -> usize {
        256
    }
    pub fn uncommitted_bytes_max() -> u64 {
        64 << 20
    }
    pub fn frame_bytes_max() -> u32 {
        8 << 20
    }
    pub fn outbound_messages_max() -> usize {
        4096
    }
    pub fn inbound_messages_max() -> usize {
        8192
    }
    pub fn connect_timeout_ms() -> u64 {
        200
    }
    pub fn handshake_timeout_ms() -> u64 {
        1000
    }
    pub fn idle_timeout_ms() -> u64 {
        10_000
    }
    pub fn minority_append_delay_us() -> u64 {
        0
    }
}

impl ClusterConfig {
    /// One member: run alone, without raft, exactly as a venue without a cluster.
    pub fn is_single(&self) -> bool {
        self.members.len() == 1
    }

    /// Check what can be checked without reading files; `journal_payload_bytes_max` is the
    /// journal's largest record payload (an append must be able to carry one).
    pub fn check(&self, journal_payload_bytes_max: u32) -> Result<(), String> {
        let count = self.members.len() as u64;
        if count == 0 || self.id == 0 || self.id > count {
            return Err(format!(
                "cluster.id {} is not a position in cluster.members (1..={count})",
                self.id
            ));
        }
        for (i, member) in self.members.iter().enumerate() {
            if self.members[..i].contains(member) {
                return Err(format!("cluster.members lists {member} twice"));
            }
        }
        if self.is_single() {
            return Ok(());
        }
        if self.secret.is_none() && self.secret_file.is_none() {
            return Err(
                "a cluster of several members needs cluster.secret or cluster.secret_file".into(),
            );
        }
        let has_file = self.secret_file.is_some();
        crate::peer_auth::check_secret_config("cluster", self.secret.as_deref(), has_file)?;
        if self.tick_ms == 0 {
            return Err("cluster.tick_ms must be at least 1".into());
        }
        // A heartbeat to a follower sends its held appends first anyway.
        if self.minority_append_delay_us > self.heartbeat_ms.saturating_mul(1_000) {
            return Err("cluster.minority_append_delay_us must not exceed heartbeat_ms".into());
        }
        let frame_need = self.append_bytes_max + u64::from(journal_payload_bytes_max) + (64 << 10);
        if u64::from(self.frame_bytes_max) < frame_need {
            return Err(format!(
                "cluster.frame_bytes_max must be at least append_bytes_max + journal.max_payload_bytes + 64 KiB ({frame_need})"
            ));
        }
        self.node_config(0)
            .validate()
            .map_err(|e| format!("cluster: {e}"))?;
        let placeholder = TransportConfig {
            secret: vec![0; SECRET_BYTES_MIN],
            ..self.transport_config(Vec::new())
        };
        placeholder.validate().map_err(|e| format!("cluster: {e}"))
    }

    fn ticks(&self, ms: u64) -> u64 {
        ms.div_ceil(self.tick_ms.max(1))
    }

    /// What the node runs with; `seed` varies the election-timeout draws between members.
    pub fn node_config(&self, seed: u64) -> NodeConfig {
        NodeConfig {
            id: self.id,
            members: self.members.len() as u64,
            heartbeat_ticks: self.ticks(self.heartbeat_ms),
            election_ticks: self.ticks(self.election_timeout_ms),
            election_spread_ticks: self.ticks(self.election_spread_ms).max(1),
            append_bytes_max: self.append_bytes_max,
            appends_in_flight_max: self.appends_in_flight_max,
            uncommitted_bytes_max: self.uncommitted_bytes_max,
            seed,
            fencing: Fencing::Lease,
            quiet_after_start: true,
        }
    }

    /// What the transport runs with, given the secret read by [`Self::read_secret`].
    pub fn transport_config(&self, secret: Vec<u8>) -> TransportConfig {
        TransportConfig {
            id: self.id,
            members: self.members.clone(),
            secret,
            frame_bytes_max: self.frame_bytes_max,
            outbound_messages_max: self.outbound_messages_max,
            inbound_messages_max: self.inbound_messages_max,
            connect_timeout_ms: self.connect_timeout_ms,
            handshake_timeout_ms: self.handshake_timeout_ms,
            idle_timeout_ms: self.idle_timeout_ms,
        }
    }

    /// The secret, from the config or the file it names.
    pub fn read_secret(&self) -> Result<Vec<u8>, String> {
        let secret = self.secret.as_deref();
        crate::peer_auth::read_secret("cluster", secret, self.secret_file.as_deref())?
            .ok_or_else(|| "no cluster secret configured".into())
    }

    /// Where the term and hard-state files live.
    pub fn state_dir(&self, journal_dir: &Path) -> PathBuf {
        match &self.dir {
            Some(dir) => dir.clone(),
            None => {
                let mut name = journal_dir.as_os_str().to_owned();
                name.push(".raft");
                PathBuf::from(name)
            }
        }
    }

    /// The address this member binds: `listen`, or its own entry in `members`.
    pub fn listen(&self) -> SocketAddr {
        self.listen.unwrap_or(self.members[self.id as usize - 1])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;

    const VENUE: &str = r#"
        [[accounts]]
        username = "U1"
        password = "p"
        firm = "F1"
        [[symbols]]
        symbol = "AAPL"
        tick = 100
        "#;

    fn parse(cluster: &str) -> Result<Config, String> {
        Config::parse(&format!("{cluster}\n{VENUE}"), "t").map_err(|e| e.to_string())
    }

    /// A cluster of several members releases on quorum.
    const QUORUM: &str = "[journal]\ndurability = \"quorum\"\n";

    #[test]
    fn a_three_member_cluster_with_defaults() {
        let config = parse(&format!(
            "{QUORUM}{}",
            r#"
            [cluster]
            id = 2
            members = ["127.0.0.1:15101", "127.0.0.1:15102", "127.0.0.1:15103"]
            secret = "sixteen bytes at least"
            listen = "0.0.0.0:15102"
            "#,
        ))
        .expect("valid");
        let cluster = config.cluster.expect("section");
        assert_eq!(cluster.listen().to_string(), "0.0.0.0:15102");
        assert_eq!(cluster.members[1].to_string(), "127.0.0.1:15102");
        assert_eq!(
            cluster.state_dir(Path::new("data/journal")),
            PathBuf::from("data/journal.raft")
        );
        let node = cluster.node_config(7);
        assert_eq!(
            (
                node.heartbeat_ticks,
                node.election_ticks,
                node.election_spread_ticks
            ),
            (5, 25, 15)
        );
        assert_eq!(node.lease_ticks(), 22);
        assert_eq!(
            cluster.read_secret().expect("secret"),
            b"sixteen bytes at least"
        );
        assert!(parse("").expect("no section").cluster.is_none());
    }

    #[test]
    fn cluster_mistakes_are_one_line_errors() {
        let members = r#"members = ["127.0.0.1:1", "127.0.0.1:2", "127.0.0.1:3"]"#;
        let cases = [
            (format!("[cluster]\nid = 4\n{members}\nsecret = \"0123456789abcdef\""), "cluster.id"),
            (format!("[cluster]\nid = 1\n{members}"), "secret"),
            (format!("[cluster]\nid = 1\n{members}\nsecret = \"short\""), "16 bytes"),
            (format!("[cluster]\nid = 1\n{members}\nsecret = \"0123456789abcdef\"\nsecret_file = \"x\""), "not both"),
            (format!("[cluster]\nid = 1\n{members}\nsecret = \"0123456789abcdef\"\nelection_timeout_ms = 60"), "election timeout"),
            (format!("[cluster]\nid = 1\n{members}\nsecret = \"0123456789abcdef\"\nfrme_bytes_max = 1"), "frme_bytes_max"),
            (format!("[cluster]\nid = 1\n{members}\nsecret = \"0123456789abcdef\"\nminority_append_delay_us = 50001"), "must not exceed heartbeat_ms"),
            ("[cluster]\nid = 1\nmembers = [\"127.0.0.1:1\", \"127.0.0.1:1\"]\nsecret = \"0123456789abcdef\"".to_string(), "twice"),
        ];
        for (text, needle) in cases {
            let error = parse(&text).expect_err(needle);
            assert!(
                !error.contains('\n') && error.contains(needle),
                "{needle}: {error}"
            );
        }
        let single = parse("[cluster]\nid = 1\nmembers = [\"127.0.0.1:1\"]").expect("one member");
        assert!(single.cluster.expect("section").is_single());
    }

    #[test]
    fn the_secret_may_come_from_a_file() {
        let temp = tempfile::tempdir().expect("tempdir");
        let path = temp.path().join("secret");
        std::fs::write(&path, "  a secret in a file, long enough\n").expect("write");
        let config = parse(&format!(
            "{QUORUM}[cluster]\nid = 1\nmembers = [\"127.0.0.1:1\", \"127.0.0.1:2\"]\nsecret_file = {:?}",
            path.display().to_string()
        ))
        .expect("valid");
        let cluster = config.cluster.expect("section");
        assert_eq!(
            cluster.read_secret().expect("read"),
            b"a secret in a file, long enough"
        );
    }
}
