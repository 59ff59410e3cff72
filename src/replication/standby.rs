//! `bourse standby`: follow a primary, journal and apply every record as it arrives (hot),
//! and take over when the primary is gone.
//!
//! **Fencing rule** (no two primaries): the standby takes over only when (1) the primary is
//! gone — it has heard nothing, no record, no heartbeat, for `[replication] takeover_ms`, or
//! the primary's side closed the link (its process died: the kernel sent FIN/RST) — (2) it
//! cannot reconnect, and (3) the primary's admin port (`[replication] primary_admin`) does not
//! answer a status request either. A standby that merely lost its replication link to a live
//! primary sees the admin port answer and keeps trying to reconnect instead of trading. The
//! admin probe should travel a different path than the replication link; a partition that cuts
//! both while the primary lives on still needs an operator (stop the primary first).

use super::protocol::{self, Frame, TAIL_RECORDS_MAX, VERSION};
use crate::config::Config;
use crate::daemon::admin;
use crate::daemon::node::Node as Engine;
use crate::daemon::output::FeedOut;
use crate::daemon::{Daemon, Listening};
use crate::guard::LogGate;
use crate::journal::{JournalReader, truncate_after, verify};
use crate::peer_auth;
use crate::sequencer::SystemClock;
use crate::types::Timestamp;
use std::io::{self, BufReader, BufWriter, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

const CONNECT_TIMEOUT: Duration = Duration::from_millis(200);
const RETRY_PAUSE: Duration = Duration::from_millis(20);
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(2);
const LAG_REPORT_INTERVAL: Duration = Duration::from_secs(5);

/// The local journal the standby offers the primary: its latest trading day (or its single
/// journal), the day's epoch (0: no journal yet) and its last records as (seq, content
/// checksum), newest last.
struct LocalTail {
    dir: Option<PathBuf>,
    day_epoch_unix_ns: u64,
    tail: Vec<(u64, u32)>,
}

fn local_tail(root: &Path) -> Result<LocalTail, String> {
    let (dir, _) = crate::days::for_reading(root)?;
    let none = LocalTail {
        dir: None,
        day_epoch_unix_ns: 0,
        tail: Vec::new(),
    };
    let report = match verify(&dir) {
        Ok(report) => report,
        Err(crate::journal::JournalError::EmptyJournal { .. })
        | Err(crate::journal::JournalError::MissingDirectory { .. }) => return Ok(none),
        Err(e) => return Err(e.to_string()),
    };
    let last = report.last_seq;
    if last == 0 {
        return Ok(none);
    }
    let first = last.saturating_sub(TAIL_RECORDS_MAX as u64 - 1).max(1);
    let mut reader = JournalReader::open(&dir, first).map_err(|e| e.to_string())?;
    let mut tail = Vec::with_capacity(TAIL_RECORDS_MAX);
    while let Some(r) = reader.next().map_err(|e| e.to_string())? {
        if r.seq > last {
            break;
        }
        tail.push((
            r.seq,
            protocol::record_crc(r.timestamp.0, r.kind, r.payload),
        ));
    }
    Ok(LocalTail {
        dir: Some(dir),
        day_epoch_unix_ns: report.day_epoch_unix_ns,
        tail,
    })
}

/// A live replication link after the handshake.
struct Link {
    input: BufReader<TcpStream>,
    output: BufWriter<TcpStream>,
    day_epoch_unix_ns: u64,
}

/// Failed handshakes, logged a few seconds apart.
struct HandshakeLog {
    started: Instant,
    gate: LogGate,
}

const HANDSHAKE_LOG_INTERVAL_MS: u64 = 5_000;

/// Connect and handshake; cuts the local journal back to the common record first if needed.
/// `Ok(None)`: no primary reachable right now (refused, reset, timed out) — try again later.
fn connect(
    config: &Config,
    log: &mut HandshakeLog,
    secret: Option<&[u8]>,
    primary: SocketAddr,
    journal_open: bool,
) -> Result<Option<Link>, String> {
    let Ok(stream) = TcpStream::connect_timeout(&primary, CONNECT_TIMEOUT) else {
        return Ok(None);
    };
    let local = local_tail(&config.journal.dir)?;
    let takeover_ms = config.replication.takeover_ms;
    let (link, common) = match handshake(stream, secret, &local, takeover_ms) {
        Ok(Handshake::Welcome(link, common)) => (link, common),
        Ok(Handshake::Refused(reason)) => {
            return Err(format!("the primary refused this standby: {reason}"));
        }
        Ok(Handshake::NotAuthenticated(why)) => {
            // Never follow (or take over from) a peer that does not prove the secret.
            return Err(format!(
                "{primary} failed authentication: {why} (check [replication] secret on both)"
            ));
        }
        Err(e) => {
            // Lines a few seconds apart: the standby retries every few milliseconds.
            let now_ns = log.started.elapsed().as_nanos() as u64;
            match log.gate.pass(now_ns, HANDSHAKE_LOG_INTERVAL_MS) {
                Some(suppressed) => {
                    tracing::warn!(%primary, suppressed, "standby: handshake with the primary failed: {e}")
                }
                None => tracing::debug!(%primary, "standby: handshake failed: {e}"),
            }
            return Ok(None);
        }
    };
    let dir = crate::days::for_epoch(&config.journal.dir, link.day_epoch_unix_ns)?;
    if local.dir.as_ref() != Some(&dir) {
        // The primary's day is not the one offered: its journal here starts empty.
        if local.dir.as_ref() == Some(&config.journal.dir) {
            return Err(format!(
                "this standby's journal.dir holds one journal (single-journal layout) of trading day {}; the primary is on {}: give the standby a new journal directory",
                crate::days::date_of(local.day_epoch_unix_ns),
                crate::days::date_of(link.day_epoch_unix_ns)
            ));
        }
        assert_eq!(common, 0, "the primary shares nothing with another day");
        tracing::info!(%primary, day = %dir.display(), "standby: following the primary's trading day from its start");
        return Ok(Some(link));
    }
    let local_last = local.tail.last().map_or(0, |t| t.0);
    if common < local_last {
        if journal_open {
            return Err(format!(
                "the primary no longer has records {}..={local_last} this standby applied; restart the standby",
                common + 1
            ));
        }
        tracing::warn!(
            cut = local_last - common,
            from = common + 1,
            "standby: truncating {} journaled records the primary never had",
            local_last - common
        );
        truncate_after(&dir, common).map_err(|e| e.to_string())?;
    }
    tracing::info!(%primary, from = common + 1, "standby: following the primary");
    Ok(Some(link))
}

enum Handshake {
    Welcome(Link, u64),
    Refused(String),
    /// The peer answered the authentication with a proof not made with our secret.
    NotAuthenticated(String),
}

fn handshake(
    stream: TcpStream,
    secret: Option<&[u8]>,
    local: &LocalTail,
    takeover_ms: u64,
) -> io::Result<Handshake> {
    stream.set_nodelay(true)?;
    // The primary may take a moment to find the common record; the live link then reads
    // with the takeover timeout.
    stream.set_read_timeout(Some(HANDSHAKE_TIMEOUT))?;
    if let Some(secret) = secret {
        let mut auth = stream.try_clone()?;
        auth.set_write_timeout(Some(HANDSHAKE_TIMEOUT))?;
        match peer_auth::client(&mut auth, secret, protocol::AUTH, 0, 0) {
            Ok(()) => auth.set_write_timeout(None)?,
            // Only a proof made with another secret is final; other bytes (another service
            // on the address, a primary without a secret) are a failed try like a timeout.
            Err(e) if e.kind() == io::ErrorKind::PermissionDenied => {
                return Ok(Handshake::NotAuthenticated(e.to_string()));
            }
            Err(e) => {
                // A primary without a secret refuses the authentication hello at once as an
                // unknown frame; a timeout is a slow or stopped primary, not that.
                let refused = matches!(
                    e.kind(),
                    io::ErrorKind::UnexpectedEof
                        | io::ErrorKind::ConnectionReset
                        | io::ErrorKind::InvalidData
                );
                if !refused {
                    return Err(e);
                }
                let hint = "if the primary has no [replication] secret it cannot answer this; otherwise it is busy or going away";
                return Err(io::Error::new(
                    e.kind(),
                    format!("authentication: {e} ({hint})"),
                ));
            }
        }
    }
    let mut output = BufWriter::new(stream.try_clone()?);
    let mut input = BufReader::with_capacity(256 << 10, stream);
    Frame::Hello {
        version: VERSION,
        tail: local.tail.clone(),
        day_epoch_unix_ns: local.day_epoch_unix_ns,
    }
    .write(&mut output)?;
    output.flush()?;
    let answer = Frame::read(&mut input).map_err(|e| {
        let no_answer = matches!(
            e.kind(),
            io::ErrorKind::UnexpectedEof
                | io::ErrorKind::ConnectionReset
                | io::ErrorKind::WouldBlock
                | io::ErrorKind::TimedOut
        );
        if no_answer && secret.is_none() {
            let hint = "a primary with [replication] secret waits for a proof this standby does not send: is one set there? Else the primary is slow, full or going away";
            io::Error::new(e.kind(), format!("no Welcome: {e} ({hint})"))
        } else {
            e
        }
    })?;
    match answer {
        Frame::Welcome {
            day_epoch_unix_ns,
            common_seq,
            ..
        } => {
            let live_timeout = Duration::from_millis(takeover_ms.max(100));
            input.get_ref().set_read_timeout(Some(live_timeout))?;
            let link = Link {
                input,
                output,
                day_epoch_unix_ns,
            };
            Ok(Handshake::Welcome(link, common_seq))
        }
        Frame::Refused { reason } => Ok(Handshake::Refused(reason)),
        other => Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("unexpected frame {other:?}"),
        )),
    }
}

/// Is the primary still alive on its admin port (the fencing probe)? Its event loop writes
/// the admin greeting, so getting one is proof of life; no secret needed.
fn primary_answers(config: &Config) -> bool {
    let Some(addr) = config.replication.primary_admin else {
        return false;
    };
    admin::probe(addr, Duration::from_millis(200))
}

struct Lag {
    since: Instant,
    applied: u64,
    worst_us: u64,
    behind_records: u64,
}

impl Lag {
    fn note(&mut self, timestamp: Timestamp, day_epoch_unix_ns: u64) {
        let now = crate::journal::segment::now_unix_ns();
        let lag_us = now.saturating_sub(day_epoch_unix_ns + timestamp.0) / 1_000;
        self.worst_us = self.worst_us.max(lag_us);
        self.applied += 1;
    }

    fn report_if_due(&mut self) {
        if self.since.elapsed() < LAG_REPORT_INTERVAL {
            return;
        }
        tracing::info!(
            applied = self.applied,
            worst_lag_us = self.worst_us,
            behind_records = self.behind_records,
            "standby: replication lag"
        );
        *self = Lag {
            since: Instant::now(),
            applied: 0,
            worst_us: 0,
            behind_records: self.behind_records,
        };
    }
}

/// How a followed link ended.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum LinkEnd {
    /// The primary's side closed it (EOF, reset): its process is gone or it dropped us.
    Closed,
    /// Nothing arrived for the read timeout, or an ack could not be sent.
    Silent,
    Stopped,
}

/// Follow until the link is lost (Ok: how it ended) or a fatal error.
fn follow<F: FeedOut>(
    link: &mut Link,
    engine: &mut Engine<SystemClock, F>,
    lag: &mut Lag,
    last_heard: &mut Instant,
    stop: &AtomicBool,
) -> Result<LinkEnd, String> {
    while !stop.load(Ordering::Relaxed) {
        let frame = match Frame::read(&mut link.input) {
            Ok(f) => {
                *last_heard = Instant::now();
                f
            }
            Err(e) => {
                tracing::warn!("standby: replication link lost: {e}");
                let timed_out = matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                );
                return Ok(if timed_out {
                    LinkEnd::Silent
                } else {
                    LinkEnd::Closed
                });
            }
        };
        match frame {
            Frame::Record {
                seq,
                timestamp,
                kind,
                payload,
            } => {
                engine.apply_replicated(seq, Timestamp(timestamp), kind, &payload)?;
                lag.note(Timestamp(timestamp), link.day_epoch_unix_ns);
            }
            Frame::Heartbeat { next_seq, .. } => {
                lag.behind_records = next_seq.saturating_sub(engine.last_seq() + 1);
            }
            other => return Err(format!("unexpected replication frame {other:?}")),
        }
        // Once the buffered frames are applied: ack, then msync (one of each per batch). The
        // ack means "in this standby's journal" (its mapping: the kernel owns the pages, so it
        // survives this process and the primary's machine); the msync that follows makes it
        // survive this machine too, off the primary's critical path.
        if link.input.buffer().is_empty() {
            let seq = engine.last_seq();
            let ack = Frame::Ack { seq }
                .write(&mut link.output)
                .and_then(|_| link.output.flush());
            if let Err(e) = ack {
                tracing::warn!("standby: cannot ack: {e}");
                return Ok(LinkEnd::Silent);
            }
            engine.flush_journal()?;
            lag.report_if_due();
        }
    }
    Ok(LinkEnd::Stopped)
}

/// Run a standby until it is stopped, or until it takes over and then stops as a primary.
/// `on_takeover` gets the addresses it serves once it has taken over.
pub fn run<F: FeedOut>(
    config: Config,
    make_feed: impl Fn(u64) -> Result<F, String>,
    stop: Arc<AtomicBool>,
    on_takeover: impl FnOnce(&Listening),
) -> Result<(), String> {
    let primary = config
        .replication
        .primary
        .ok_or("bourse standby needs [replication] primary = \"host:port\"")?;
    let takeover = Duration::from_millis(config.replication.takeover_ms);
    let secret = config.replication_secret()?;
    let mut handshake_log = HandshakeLog {
        started: Instant::now(),
        gate: LogGate::default(),
    };
    let mut engine: Option<Engine<SystemClock, F>> = None;
    let mut lag = Lag {
        since: Instant::now(),
        applied: 0,
        worst_us: 0,
        behind_records: 0,
    };
    let mut last_heard = Instant::now();
    let mut fenced_logged = false;
    let mut closed_by_primary = false;
    while !stop.load(Ordering::Relaxed) {
        if let Some(mut link) = connect(
            &config,
            &mut handshake_log,
            secret.as_deref(),
            primary,
            engine.is_some(),
        )? {
            let day = crate::days::for_epoch(&config.journal.dir, link.day_epoch_unix_ns)?;
            if engine.as_ref().is_some_and(|e| e.journal_dir() != day) {
                // The primary started a new trading day: the finished one stays as it is.
                tracing::info!(day = %day.display(), "standby: the primary is on a new trading day");
                engine = None;
            }
            if engine.is_none() {
                engine = Some(Engine::follower(
                    &config,
                    SystemClock,
                    link.day_epoch_unix_ns,
                    |_, _| {},
                )?);
            }
            fenced_logged = false;
            last_heard = Instant::now();
            let engine = engine.as_mut().expect("opened above");
            let end = follow(&mut link, engine, &mut lag, &mut last_heard, &stop)?;
            closed_by_primary = end == LinkEnd::Closed;
            continue;
        }
        // Gone: silent for takeover_ms, or its kernel closed the link and nothing accepts a
        // new one (the process died). Either way the admin probe has the last word.
        let day_started = engine.as_ref().is_some_and(|e| e.last_seq() > 0);
        let gone = last_heard.elapsed() >= takeover || closed_by_primary;
        if gone && day_started {
            if primary_answers(&config) {
                if !fenced_logged {
                    tracing::warn!(
                        "standby: replication link lost but the primary answers on its admin port: not taking over"
                    );
                    fenced_logged = true;
                }
                closed_by_primary = false;
            } else {
                let engine = engine.take().expect("day started");
                return take_over(
                    config,
                    secret,
                    engine,
                    make_feed,
                    stop,
                    on_takeover,
                    last_heard.elapsed(),
                );
            }
        }
        std::thread::sleep(RETRY_PAUSE);
    }
    Ok(())
}

fn take_over<F: FeedOut>(
    config: Config,
    secret: Option<Vec<u8>>,
    mut engine: Engine<SystemClock, F>,
    make_feed: impl Fn(u64) -> Result<F, String>,
    stop: Arc<AtomicBool>,
    on_takeover: impl FnOnce(&Listening),
    silent_for: Duration,
) -> Result<(), String> {
    tracing::warn!(
        last_seq = engine.last_seq(),
        silent_ms = silent_for.as_millis() as u64,
        "standby: the primary is gone; taking over"
    );
    if config.journal.durability == crate::config::DurabilityMode::Replicated {
        // The rule holds for the new primary too: nothing is released until a standby of its
        // own confirms it. Say so, or the venue looks alive and answers no order.
        tracing::warn!(
            "durability is `replicated`: replies and the feed are held until a standby follows this venue (`bourse standby` with `[replication] primary` = this venue's replication address)"
        );
    }
    engine.flush_journal()?;
    engine.open_feed(make_feed)?;
    let mut daemon = Daemon::serve(config, engine, stop, secret)?;
    on_takeover(&daemon.listening());
    daemon.run()
}
