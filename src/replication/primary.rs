//! The primary's side: stream journal records to every standby that connects, from the
//! sequence number it asks for, and collect its confirmations.
//!
//! Each standby gets its own thread with its own tailing reader of the journal files, so the
//! engine thread never waits on a standby's socket; the only shared state is the journal's
//! "confirmed by standby" number, which the engine reads in `replicated` mode.

use super::protocol::{self, Frame, TAIL_RECORDS_MAX, VERSION};
use crate::guard::{ConnectionSlot, ConnectionSlots, PeerLog, SharedSlots, SlotHold};
use crate::journal::JournalReader;
use crate::marketdata::ServerHandle;
use crate::peer_auth;
use std::io::{self, BufReader, BufWriter, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Standbys followed at once.
const STANDBYS_MAX: usize = 4;
/// Records sent before the writer is flushed, so a long catch-up still reaches the wire.
const RECORDS_PER_FLUSH_MAX: u32 = 4096;

pub struct ReplicationConfig {
    pub listen: SocketAddr,
    pub journal_dir: PathBuf,
    pub heartbeat_ms: u64,
    /// Drop a standby that has sent nothing (no ack) for this long.
    pub silence_ms: u64,
    /// `[replication] secret`: a standby must pass [`crate::peer_auth`] before its Hello is
    /// read. `None`: anyone who reaches the port may follow.
    pub secret: Option<Vec<u8>>,
}

/// Accept standbys on `config.listen`; each confirmation raises `confirmed` (the journal's
/// confirmed-by-standby number).
pub fn spawn(config: ReplicationConfig, confirmed: Arc<AtomicU64>) -> io::Result<ServerHandle> {
    let listener = TcpListener::bind(config.listen)?;
    listener.set_nonblocking(true)?;
    let local = listener.local_addr()?;
    let mut listener = mio::net::TcpListener::from_std(listener);
    let poll = mio::Poll::new()?;
    poll.registry()
        .register(&mut listener, mio::Token(0), mio::Interest::READABLE)?;
    let stop = Arc::new(AtomicBool::new(false));
    let stop_flag = stop.clone();
    let thread = std::thread::Builder::new()
        .name("replication".into())
        .spawn(move || accept_loop(poll, listener, config, confirmed, stop_flag))?;
    Ok(ServerHandle::new(stop, thread, local))
}

/// The next standby from the listener: waits for one (a poll that ends every stop-poll
/// interval to look at `stop`), accepting until WouldBlock as mio's edge-triggered events
/// require. `None`: stopped.
fn next_standby(
    poll: &mut mio::Poll,
    events: &mut mio::Events,
    listener: &mio::net::TcpListener,
    stop: &AtomicBool,
) -> Option<(TcpStream, SocketAddr)> {
    while !stop.load(Ordering::Relaxed) {
        match listener.accept() {
            Ok((stream, peer)) => match stream_to_std(stream) {
                Ok(stream) => return Some((stream, peer)),
                Err(e) => tracing::warn!(%peer, "replication: cannot use a connection: {e}"),
            },
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                if let Err(e) = poll.poll(events, Some(crate::marketdata::stop_poll()))
                    && e.kind() != io::ErrorKind::Interrupted
                {
                    tracing::error!("replication poll failed; the server stops: {e}");
                    return None;
                }
            }
            Err(e) => {
                // Out of descriptors, for instance: the backlog raises no new event.
                tracing::warn!("replication accept failed: {e}");
                std::thread::sleep(crate::marketdata::stop_poll());
            }
        }
    }
    None
}

/// A blocking std stream from an accepted mio one (the follower thread blocks on it).
fn stream_to_std(stream: mio::net::TcpStream) -> io::Result<TcpStream> {
    let stream: TcpStream = std::os::fd::OwnedFd::from(stream).into();
    stream.set_nonblocking(false)?;
    Ok(stream)
}

/// The follower threads' connections, at most [`STANDBYS_MAX`]; each knows whether it said
/// Hello (after the secret was proven, with one). When all are taken, a newcomer closes the
/// oldest that has not said Hello yet: idle connections must not keep a standby out, as they
/// could for the Hello timeout each, again and again. Only when every slot follows a standby
/// is the newcomer refused.
type Followers = ConnectionSlots<bool>;

fn accept_loop(
    mut poll: mio::Poll,
    listener: mio::net::TcpListener,
    config: ReplicationConfig,
    confirmed: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
) {
    let config = Arc::new(config);
    let followers: SharedSlots<bool> = Arc::new(Mutex::new(Followers::new(STANDBYS_MAX)));
    let log = Arc::new(PeerLog::new("replication"));
    let mut events = mio::Events::with_capacity(4);
    while let Some((stream, peer)) = next_standby(&mut poll, &mut events, &listener, &stop) {
        // A newcomer closes the oldest connection that has not said Hello yet.
        let victim = |list: &[ConnectionSlot<bool>]| list.iter().position(|greeted| !greeted.meta);
        let Some(hold) = SlotHold::admit(&followers, &stream, false, victim) else {
            log.warn(
                peer,
                format_args!(
                    "refused a standby: {STANDBYS_MAX} already follow, or closed ones are still ending"
                ),
            );
            continue;
        };
        let (config, confirmed, stop, log) =
            (config.clone(), confirmed.clone(), stop.clone(), log.clone());
        // The hold frees the slot when the thread ends, however it ends (or if it never starts).
        let spawned = std::thread::Builder::new()
            .name("replication-follower".into())
            .spawn(move || {
                // False if the connection was closed for room meanwhile.
                let greeted = || hold.update(|greeted| *greeted = true).is_some();
                match follow(stream, &config, &confirmed, &stop, greeted) {
                    Ok(()) => tracing::info!(%peer, "replication: standby stream ended"),
                    Err(e) => log.warn(peer, format_args!("standby dropped: {e}")),
                }
            });
        if let Err(e) = spawned {
            tracing::warn!("replication: cannot start a follower thread: {e}");
        }
    }
}

/// Is the standby's tail (from trading day `standby`, 0: none) from this primary's day? A
/// standby on a later day than the primary is refused.
fn same_day(standby: u64, primary: u64) -> Result<bool, String> {
    if standby > primary {
        return Err(format!(
            "the standby's journal is on trading day {}, later than this primary's {}",
            crate::days::date_of(standby),
            crate::days::date_of(primary)
        ));
    }
    Ok(standby == 0 || standby == primary)
}

/// The highest record both journals hold identically, from the standby's tail (newest last).
fn common_seq(dir: &Path, tail: &[(u64, u32)]) -> Result<u64, String> {
    if tail.is_empty() {
        return Ok(0);
    }
    for &(seq, crc) in tail.iter().rev() {
        let mut reader = JournalReader::open(dir, seq).map_err(|e| e.to_string())?;
        let Some(r) = reader.next().map_err(|e| e.to_string())? else {
            continue;
        };
        if r.seq == seq && protocol::record_crc(r.timestamp.0, r.kind, r.payload) == crc {
            return Ok(seq);
        }
    }
    if tail[0].0 == 1 {
        return Ok(0);
    }
    Err(format!(
        "the standby's journal diverges from this one further back than its last {TAIL_RECORDS_MAX} records; an operator must cut it back (bourse-journal) or give it a new journal directory"
    ))
}

/// How long a connection may take to say Hello before its follower slot is freed.
const HELLO_TIMEOUT: Duration = Duration::from_secs(5);

fn follow(
    stream: TcpStream,
    config: &ReplicationConfig,
    confirmed: &Arc<AtomicU64>,
    stop: &AtomicBool,
    greeted: impl FnOnce() -> bool,
) -> io::Result<()> {
    stream.set_nodelay(true)?;
    stream.set_read_timeout(Some(HELLO_TIMEOUT))?;
    if let Some(secret) = &config.secret {
        stream.set_write_timeout(Some(HELLO_TIMEOUT))?;
        let mut auth = stream.try_clone()?;
        peer_auth::server(&mut auth, secret, protocol::AUTH, |client, server| {
            (client, server) == (0, 0)
        })
        .map_err(|e| {
            io::Error::new(
                e.kind(),
                format!("not authenticated (this primary has [replication] secret; a standby needs the same): {e}"),
            )
        })?;
        stream.set_write_timeout(None)?;
    }
    let mut input = BufReader::new(stream.try_clone()?);
    let mut output = BufWriter::with_capacity(256 << 10, stream.try_clone()?);
    let hello = Frame::read(&mut input).map_err(|e| match e.kind() {
        // A read timeout surfaces as WouldBlock ("Resource temporarily unavailable"): say
        // what it means.
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut => io::Error::new(
            io::ErrorKind::TimedOut,
            format!("no Hello within {} ms", HELLO_TIMEOUT.as_millis()),
        ),
        _ => e,
    })?;
    let Frame::Hello {
        version,
        tail,
        day_epoch_unix_ns: standby_day,
    } = hello
    else {
        return Err(io::Error::new(io::ErrorKind::InvalidData, "expected Hello"));
    };
    if !greeted() {
        return Err(io::Error::other(
            "closed to make room before its Hello was read",
        ));
    }
    if version != VERSION {
        Frame::Refused {
            reason: format!("replication version {version} is not {VERSION}"),
        }
        .write(&mut output)?;
        return output.flush();
    }
    let day = JournalReader::open(&config.journal_dir, 1)
        .map_err(io::Error::other)?
        .day_epoch_unix_ns();
    let common = match same_day(standby_day, day) {
        Ok(true) => common_seq(&config.journal_dir, &tail),
        // A tail from an earlier day shares nothing with this one.
        Ok(false) => Ok(0),
        Err(e) => Err(e),
    };
    let common = match common {
        Ok(seq) => seq,
        Err(reason) => {
            Frame::Refused {
                reason: reason.clone(),
            }
            .write(&mut output)?;
            output.flush()?;
            return Err(io::Error::other(reason));
        }
    };
    let mut reader =
        JournalReader::open(&config.journal_dir, common + 1).map_err(io::Error::other)?;
    // The primary's last seq is informational (heartbeats carry the live end); a full verify
    // here would scan whole preallocated segments and stall the handshake.
    let welcome = Frame::Welcome {
        day_epoch_unix_ns: reader.day_epoch_unix_ns(),
        common_seq: common,
        primary_last_seq: common,
    };
    welcome.write(&mut output)?;
    output.flush()?;
    tracing::info!(peer = %stream.peer_addr()?, from = common + 1, "replication: standby following");
    let acks = spawn_ack_reader(stream, config.silence_ms, confirmed.clone())?;
    stream_records(&mut reader, &mut output, config, stop, &acks)
}

/// Read the standby's acks on their own thread: raise `confirmed`, note liveness.
/// A standby that stays silent (no ack, no heartbeat) longer than `silence_ms` is dropped.
fn spawn_ack_reader(
    stream: TcpStream,
    silence_ms: u64,
    confirmed: Arc<AtomicU64>,
) -> io::Result<Arc<AckState>> {
    let state = Arc::new(AckState {
        alive: AtomicBool::new(true),
    });
    let shared = state.clone();
    stream.set_read_timeout(Some(Duration::from_millis(silence_ms.max(1))))?;
    std::thread::Builder::new()
        .name("replication-acks".into())
        .spawn(move || {
            let mut input = BufReader::new(stream);
            while let Ok(Frame::Ack { seq }) = Frame::read(&mut input) {
                confirmed.fetch_max(seq, Ordering::AcqRel);
            }
            shared.alive.store(false, Ordering::Release);
        })?;
    Ok(state)
}

struct AckState {
    alive: AtomicBool,
}

fn stream_records(
    reader: &mut JournalReader,
    output: &mut BufWriter<TcpStream>,
    config: &ReplicationConfig,
    stop: &AtomicBool,
    acks: &AckState,
) -> io::Result<()> {
    let heartbeat = Duration::from_millis(config.heartbeat_ms.max(1));
    let mut last_send = Instant::now();
    while !stop.load(Ordering::Relaxed) && acks.alive.load(Ordering::Acquire) {
        let mut sent = 0u32;
        while sent < RECORDS_PER_FLUSH_MAX {
            let Some(r) = reader.next().map_err(io::Error::other)? else {
                break;
            };
            protocol::write_record(output, r.seq, r.timestamp.0, r.kind, r.payload)?;
            sent += 1;
        }
        if sent > 0 {
            output.flush()?;
            last_send = Instant::now();
            continue;
        }
        if last_send.elapsed() >= heartbeat {
            let unix_ns = crate::journal::segment::now_unix_ns();
            Frame::Heartbeat {
                next_seq: reader.next_seq(),
                unix_ns,
            }
            .write(output)?;
            output.flush()?;
            last_send = Instant::now();
        }
        // Nothing new: wait briefly for the writer (sleeps, never spins).
        if let Some(r) = reader
            .next_wait(heartbeat.min(Duration::from_millis(50)))
            .map_err(io::Error::other)?
        {
            protocol::write_record(output, r.seq, r.timestamp.0, r.kind, r.payload)?;
            output.flush()?;
            last_send = Instant::now();
        }
    }
    Ok(())
}
