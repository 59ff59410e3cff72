//! Offline replay: recompute every output of a journal with the pure core and digest it.
//!
//! Digests are SHA-256 over each stream in BinaryFILE framing (2-byte big-endian length, then
//! the message): one for the ITCH stream (so it equals the SHA-256 of the `--itch-out` file)
//! and one per account for its OUCH stream, plus the exchange's state digest. The daemon's
//! streams are the same bytes, so "live == replay" is a comparison of these digests.

use crate::exchange::{Exchange, Input, LentState, Sink, StateDigest};
use crate::journal::alongside::VerifyAlongside;
use crate::journal::{JournalError, JournalReader};
use crate::sequencer::ahead::{AheadError, InputsAhead, Through};
use crate::sequencer::record::{self, DayHeader, KIND_NOOP, KIND_START_OF_DAY};
use crate::snapshot::{self, Schedule, Snapshot, StreamPosition};
use crate::types::{AccountId, Timestamp};
use crate::wire::{itch, ouch};
use sha2::digest::common::hazmat::{SerializableState, SerializedState};
use sha2::{Digest, Sha256};
use std::io::Write;
use std::path::Path;

mod hashing;
use hashing::HashingSink;

/// Largest encoded OUCH or ITCH message, with room for the length prefix.
const MESSAGE_BYTES_MAX: usize = 96;
/// Leader changes a journal may hold before its start of day.
const START_LEADER_CHANGES_MAX: u32 = 1 << 20;

/// Hex SHA-256 of a byte stream.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct StreamDigest(pub [u8; 32]);

impl std::fmt::Display for StreamDigest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.iter().try_for_each(|b| write!(f, "{b:02x}"))
    }
}

impl std::fmt::Debug for StreamDigest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Display::fmt(self, f)
    }
}

/// Hashes one stream of messages in BinaryFILE framing and counts them.
#[derive(Clone, Default)]
pub struct StreamHasher {
    hasher: Sha256,
    pub messages: u64,
    /// Message bytes so far (without the framing).
    pub bytes: u64,
}

impl StreamHasher {
    pub fn add(&mut self, message: &[u8]) {
        let len = u16::try_from(message.len()).expect("messages are short");
        self.hasher.update(len.to_be_bytes());
        self.hasher.update(message);
        self.messages += 1;
        self.bytes += message.len() as u64;
    }

    /// The position and digest state, for a snapshot.
    pub fn position(&self) -> StreamPosition {
        StreamPosition {
            messages: self.messages,
            bytes: self.bytes,
            digest_state: Some(self.hasher.serialize().to_vec()),
        }
    }

    /// Continue a stream from a snapshot's position; `None` without a digest state (or a
    /// state of another size).
    pub fn resume(position: &StreamPosition) -> Option<StreamHasher> {
        let state = position.digest_state.as_deref()?;
        let state = SerializedState::<Sha256>::try_from(state).ok()?;
        Some(StreamHasher {
            hasher: Sha256::deserialize(&state).ok()?,
            messages: position.messages,
            bytes: position.bytes,
        })
    }

    pub fn digest(&self) -> StreamDigest {
        StreamDigest(self.hasher.clone().finalize().into())
    }
}

/// A sink that encodes every output and digests the streams inline (the tests' reference;
/// a replay hashes on a thread of its own, `hashing::HashingSink`, to the same digests).
pub struct DigestSink {
    pub itch: StreamHasher,
    pub ouch: Vec<StreamHasher>,
}

impl DigestSink {
    pub fn new(accounts: usize) -> Self {
        DigestSink {
            itch: StreamHasher::default(),
            ouch: vec![StreamHasher::default(); accounts],
        }
    }
}

impl Sink for DigestSink {
    fn ouch(&mut self, account: AccountId, message: &ouch::Outbound) {
        let mut buf = [0u8; MESSAGE_BYTES_MAX];
        let n = message.encode(&mut buf);
        self.ouch[account.0 as usize].add(&buf[..n]);
    }

    fn itch(&mut self, message: &itch::Message) {
        let mut buf = [0u8; MESSAGE_BYTES_MAX];
        let n = itch::binary_file::write_message(&mut buf, message);
        self.itch.add(&buf[2..n]);
    }
}

/// What a replay computed.
#[derive(Clone, Debug)]
pub struct ReplayReport {
    pub header: DayHeader,
    pub inputs: u64,
    pub last_seq: u64,
    pub itch_messages: u64,
    /// `None` when the streams were not digested (`--no-digest`, or a snapshot without
    /// stream digests).
    pub itch_digest: Option<StreamDigest>,
    /// Per account in config order: (username, messages, digest).
    pub ouch: Vec<(String, u64, Option<StreamDigest>)>,
    pub state_digest: StateDigest,
    pub order_refs: u64,
    pub matches: u64,
    pub seconds: f64,
    /// A torn last record the replay stopped before (a crashed writer's partial append).
    pub torn_tail: Option<crate::journal::TornTail>,
    /// The journal replayed: the directory asked for, or the latest trading day under it.
    pub journal_dir: std::path::PathBuf,
    /// Which trading day was chosen, when the directory asked for holds several.
    pub day_note: Option<String>,
    /// The snapshot the replay started from (its last record), if any.
    pub from_snapshot: Option<u64>,
    /// Inputs applied by this run (the journal's tail after a snapshot; all otherwise).
    pub applied: u64,
    /// Snapshots written by this run.
    pub snapshots_written: u64,
    /// The longest encoding of the state for one of them (the pause the daemon's engine
    /// thread takes for a snapshot of the same state: the slot arrays are lent, not
    /// encoded), and the largest file.
    pub snapshot_encode_max: std::time::Duration,
    pub snapshot_bytes_max: u64,
}

impl ReplayReport {
    /// Everything the replay computed except timing: what `replay-logs/*/expected.txt` holds.
    pub fn digest_lines(&self) -> Vec<String> {
        let hex = |d: &Option<StreamDigest>| match d {
            Some(d) => d.to_string(),
            None => "-".to_string(),
        };
        let mut lines = vec![
            format!("inputs {} last_seq {}", self.inputs, self.last_seq),
            format!("order_refs {} matches {}", self.order_refs, self.matches),
            format!(
                "itch {} messages sha256 {}",
                self.itch_messages,
                hex(&self.itch_digest)
            ),
        ];
        for (user, messages, digest) in &self.ouch {
            lines.push(format!(
                "ouch {user} {messages} messages sha256 {}",
                hex(digest)
            ));
        }
        lines.push(format!("state {}", self.state_digest));
        if let Some(t) = &self.torn_tail {
            lines.push(format!("torn_tail {} bytes ({})", t.cut_bytes, t.reason));
        }
        lines
    }

    /// Inputs applied per second of this run.
    pub fn inputs_per_second(&self) -> f64 {
        if self.seconds > 0.0 {
            self.applied as f64 / self.seconds
        } else {
            0.0
        }
    }
}

#[derive(Debug)]
pub enum ReplayError {
    Journal(JournalError),
    Record {
        seq: u64,
        error: String,
    },
    Empty,
    Io(std::io::Error),
    /// The directory could not be listed for its trading days.
    Layout(String),
}

impl std::fmt::Display for ReplayError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ReplayError::Journal(e) => write!(f, "{e}"),
            ReplayError::Record { seq, error } => write!(f, "journal record {seq}: {error}"),
            ReplayError::Empty => write!(f, "the journal holds no records"),
            ReplayError::Io(e) => write!(f, "writing the ITCH file: {e}"),
            ReplayError::Layout(e) => f.write_str(e),
        }
    }
}

impl std::error::Error for ReplayError {}

impl From<AheadError> for ReplayError {
    fn from(e: AheadError) -> Self {
        match e {
            AheadError::Journal(e) => ReplayError::Journal(e),
            AheadError::Record { seq, error } => ReplayError::Record {
                seq,
                error: error.0,
            },
        }
    }
}

impl From<JournalError> for ReplayError {
    fn from(e: JournalError) -> Self {
        ReplayError::Journal(e)
    }
}

/// Read the first record: the day header that defines the venue, and its timestamp.
/// Leader-change records (`KIND_NOOP`, a cluster's) before it are skipped.
pub fn read_header(reader: &mut JournalReader) -> Result<(DayHeader, Timestamp), ReplayError> {
    read_start(reader).map(|(header, _, timestamp)| (header, timestamp))
}

/// The start-of-day record: the day header, its sequence number (1, or later in a cluster's
/// journal, which starts with leader changes) and its timestamp.
pub fn read_start(reader: &mut JournalReader) -> Result<(DayHeader, u64, Timestamp), ReplayError> {
    // Bounded: every leader change before the start of day is a term that ended before any
    // leader journaled it; a journal holds far fewer than this.
    for _ in 0..START_LEADER_CHANGES_MAX {
        let first = reader.next()?.ok_or(ReplayError::Empty)?;
        if first.kind == KIND_NOOP {
            continue;
        }
        if first.kind != KIND_START_OF_DAY {
            let error = format!("the first record is kind {}, not start of day", first.kind);
            return Err(ReplayError::Record {
                seq: first.seq,
                error,
            });
        }
        let header = DayHeader::decode(first.payload).map_err(|e| ReplayError::Record {
            seq: first.seq,
            error: e.0,
        })?;
        return Ok((header, first.seq, first.timestamp));
    }
    Err(ReplayError::Record {
        seq: 1,
        error: format!(
            "more than {START_LEADER_CHANGES_MAX} leader changes before the start of day"
        ),
    })
}

/// Apply one journal record to the exchange.
pub fn apply_record<S: Sink>(
    exchange: &mut Exchange,
    seq: u64,
    timestamp: Timestamp,
    kind: u8,
    payload: &[u8],
    sink: &mut S,
) -> Result<(), ReplayError> {
    let command =
        record::decode(kind, payload).map_err(|e| ReplayError::Record { seq, error: e.0 })?;
    exchange.apply(
        &Input {
            seq,
            timestamp,
            command,
        },
        sink,
    );
    Ok(())
}

/// How to replay.
#[derive(Default)]
pub struct ReplayOptions<'w> {
    /// Also write the ITCH stream as a BinaryFILE (a full replay only).
    pub itch_out: Option<&'w mut dyn Write>,
    /// Skip encoding and digesting the output streams (recovery speed): messages are
    /// counted, the state digest is computed, stream digests are not.
    pub no_digest: bool,
    /// Start from the newest valid snapshot of the day (damaged ones are skipped with a log
    /// line; none: a full replay).
    pub from_snapshot: bool,
    /// Write snapshots into the day's directory on this schedule (needs stream digests).
    pub write_snapshots: Option<Schedule>,
}

/// A sink that only counts messages per stream: no encoding, no hashing (`--no-digest`).
struct CountSink {
    itch: u64,
    ouch: Vec<u64>,
}

impl Sink for CountSink {
    #[inline]
    fn ouch(&mut self, account: AccountId, _: &ouch::Outbound) {
        self.ouch[account.0 as usize] += 1;
    }
    #[inline]
    fn itch(&mut self, _: &itch::Message) {
        self.itch += 1;
    }
}

/// The streams as one replay keeps them.
enum Streams<'w> {
    Digest(HashingSink<'w>),
    Count(CountSink),
}

/// Replay the whole journal in `path`: a journal (a trading day's directory), or a
/// `journal.dir` holding trading days, whose latest day is replayed (see [`crate::days`]).
/// `progress(done_inputs)` is called every 64k inputs.
pub fn replay(
    path: &Path,
    itch_out: Option<&mut dyn Write>,
    progress: impl FnMut(u64),
) -> Result<ReplayReport, ReplayError> {
    let options = ReplayOptions {
        itch_out,
        ..ReplayOptions::default()
    };
    replay_with(path, options, progress)
}

/// [`replay`] with options: recovery speed without digests, from a snapshot, writing
/// snapshots.
pub fn replay_with(
    path: &Path,
    options: ReplayOptions<'_>,
    progress: impl FnMut(u64),
) -> Result<ReplayReport, ReplayError> {
    let started = std::time::Instant::now();
    let (journal_dir, day_note) = crate::days::for_reading(path).map_err(ReplayError::Layout)?;
    let dir = journal_dir.as_path();
    let check = JournalCheck::start(dir, &options)?;
    let replayed = replay_checked(dir, &check, options, progress);
    // The check's refusal is the answer, whatever the replay beside it made of the records
    // it had passed: the same answer as a check run first.
    let verified = match check {
        JournalCheck::Done(verified) => verified,
        JournalCheck::Alongside(alongside) => alongside.finish()?,
    };
    Ok(ReplayReport {
        seconds: started.elapsed().as_secs_f64(),
        torn_tail: verified.torn_tail,
        journal_dir,
        day_note,
        ..replayed?
    })
}

/// The journal's read-only check: it refuses corruption and gaps and finds the end of the
/// valid prefix.
enum JournalCheck {
    /// Run before the replay. From a snapshot, the newest one vouches for the records before
    /// it: only where they end is checked (should it turn out damaged, the reader checks the
    /// records the scan did not).
    Done(crate::journal::RecoveryReport),
    /// Running beside a full replay, which reads only what it has passed (see
    /// [`crate::journal::alongside`]).
    Alongside(VerifyAlongside),
}

impl JournalCheck {
    /// Beside the replay unless the replay has effects a refusal found later could not
    /// take back (an ITCH file written, snapshots written) or needs the journal's end
    /// first (a snapshot to start from).
    fn start(dir: &Path, options: &ReplayOptions) -> Result<JournalCheck, ReplayError> {
        if options.itch_out.is_none() && !options.from_snapshot && options.write_snapshots.is_none()
        {
            return Ok(JournalCheck::Alongside(VerifyAlongside::start(dir)));
        }
        let vouched = match options.from_snapshot {
            true => snapshot::newest_through(dir, u64::MAX),
            false => 0,
        };
        Ok(JournalCheck::Done(crate::journal::verify_vouched(
            dir, vouched,
        )?))
    }

    /// Where the reading stops.
    fn through(&self) -> Through {
        match self {
            JournalCheck::Done(verified) => Through::Seq(verified.last_seq),
            JournalCheck::Alongside(alongside) => Through::Checking(alongside.progress()),
        }
    }

    /// The records whose checksums the check has read already (beside the replay: none
    /// yet; the reading trusts them as the check passes them).
    fn trusted(&self) -> std::ops::RangeInclusive<u64> {
        match self {
            JournalCheck::Done(verified) => verified.vouched_through + 1..=verified.last_seq,
            JournalCheck::Alongside(_) => std::ops::RangeInclusive::new(1, 0),
        }
    }

    /// The journal's last record (a check run first: snapshots are read or written only
    /// then).
    fn last_seq(&self) -> u64 {
        match self {
            JournalCheck::Done(verified) => verified.last_seq,
            JournalCheck::Alongside(_) => unreachable!("snapshots are replayed after the check"),
        }
    }
}

/// The replay proper, its records bounded by `check`; the report's timing and journal
/// fields are the caller's.
fn replay_checked(
    dir: &Path,
    check: &JournalCheck,
    options: ReplayOptions<'_>,
    mut progress: impl FnMut(u64),
) -> Result<ReplayReport, ReplayError> {
    let trusted = check.trusted();
    let mut reader = JournalReader::open(dir, 1)?;
    reader.trust(trusted.clone());
    let (header, start_seq, timestamp) = read_start(&mut reader)?;
    let accounts = header.venue.accounts.len();
    let header_digest = snapshot::header_digest(&header.encode());
    let fresh = |seq| {
        Exchange::new(header.venue.clone()).map_err(|e| ReplayError::Record {
            seq,
            error: e.to_string(),
        })
    };
    let loaded = if options.from_snapshot {
        snapshot::load_latest(dir, &header_digest, check.last_seq(), |s| {
            resume(&header, s, options.no_digest)
        })
    } else {
        None
    };
    let from_snapshot = loaded.as_ref().map(|(s, _)| s.last_seq);
    // The last input already applied, for the snapshot schedule.
    let resumed_at = loaded.as_ref().map_or(timestamp, |(s, _)| s.timestamp);
    let (mut exchange, mut streams, mut inputs, mut applied) = match loaded {
        Some((s, (exchange, streams))) => {
            reader = JournalReader::open(dir, s.last_seq + 1)?;
            reader.trust(trusted);
            (exchange, streams, s.inputs, 0)
        }
        None => {
            let mut exchange = fresh(start_seq)?;
            let mut streams = if options.no_digest {
                Streams::Count(CountSink {
                    itch: 0,
                    ouch: vec![0; accounts],
                })
            } else {
                let fresh = vec![StreamHasher::default(); accounts + 1];
                Streams::Digest(HashingSink::start(fresh, options.itch_out))
            };
            let input = Input {
                seq: start_seq,
                timestamp,
                command: crate::exchange::Command::StartOfDay,
            };
            match &mut streams {
                Streams::Digest(d) => exchange.apply(&input, d),
                Streams::Count(c) => exchange.apply(&input, c),
            };
            (exchange, streams, 1u64, 1u64)
        }
    };
    let mut schedule = options.write_snapshots;
    if let Some(schedule) = &mut schedule {
        schedule.start_at(inputs, resumed_at);
    }
    let mut snapshots_written = 0;
    let mut snapshot_encode_max = std::time::Duration::ZERO;
    let mut snapshot_bytes_max = 0;
    let start = exchange.last_seq().max(from_snapshot.unwrap_or(0));
    let mut ahead = InputsAhead::new(reader, start, check.through());
    while let Some(input) = ahead.next(&exchange)? {
        match &mut streams {
            Streams::Digest(d) => exchange.apply(&input, d),
            Streams::Count(c) => exchange.apply(&input, c),
        };
        inputs += 1;
        applied += 1;
        if inputs.is_multiple_of(1 << 16) {
            progress(inputs);
        }
        if let Some(schedule) = &mut schedule
            && schedule.due(inputs, input.timestamp)
            && let Streams::Digest(d) = &mut streams
        {
            let encode_started = std::time::Instant::now();
            let snap = take(dir, &exchange, d, inputs, input.timestamp, header_digest)?;
            snapshot_encode_max = snapshot_encode_max.max(encode_started.elapsed());
            let (_, bytes) = snapshot::write_atomic(dir, &snap).map_err(ReplayError::Io)?;
            snapshot_bytes_max = snapshot_bytes_max.max(bytes);
            snapshot::prune(dir, snapshot::KEEP, check.last_seq());
            snapshots_written += 1;
        }
    }
    let (itch_messages, ouch_messages, itch_digest, ouch_digests) = match &mut streams {
        Streams::Digest(d) => {
            if let Some(e) = d.write_error.take() {
                return Err(ReplayError::Io(e));
            }
            let hashers = d.settle();
            let ouch = &hashers[1..];
            (
                hashers[0].messages,
                ouch.iter().map(|h| h.messages).collect(),
                Some(hashers[0].digest()),
                ouch.iter().map(|h| Some(h.digest())).collect(),
            )
        }
        Streams::Count(c) => (c.itch, c.ouch.clone(), None, vec![None; accounts]),
    };
    let ouch = header
        .venue
        .accounts
        .iter()
        .zip(ouch_messages)
        .zip(ouch_digests)
        .map(|((a, messages), digest)| (a.username.clone(), messages, digest))
        .collect();
    Ok(ReplayReport {
        inputs,
        last_seq: exchange.last_seq(),
        itch_messages,
        itch_digest,
        ouch,
        state_digest: exchange.state_digest(),
        order_refs: exchange.order_refs_used(),
        matches: exchange.matches_used(),
        seconds: 0.0,
        torn_tail: None,
        header,
        journal_dir: std::path::PathBuf::new(),
        day_note: None,
        from_snapshot,
        applied,
        snapshots_written,
        snapshot_encode_max,
        snapshot_bytes_max,
    })
}

/// The exchange and streams a snapshot resumes (the caller's check of a snapshot: a state
/// that does not restore is a damaged snapshot). Without `no_digest`, every stream must carry
/// its digest state.
fn resume<'w>(
    header: &DayHeader,
    s: &Snapshot<&[u8]>,
    no_digest: bool,
) -> Result<(Exchange, Streams<'w>), String> {
    let accounts = header.venue.accounts.len();
    if s.streams.len() != accounts + 1 {
        return Err(format!(
            "{} streams for {accounts} accounts",
            s.streams.len()
        ));
    }
    let exchange =
        Exchange::from_state(header.venue.clone(), s.state).map_err(|e| e.to_string())?;
    if exchange.last_seq() > s.last_seq {
        return Err("the state is past the snapshot's record".into());
    }
    let streams = if no_digest {
        Streams::Count(CountSink {
            itch: s.streams[0].messages,
            ouch: s.streams[1..].iter().map(|p| p.messages).collect(),
        })
    } else {
        let hashers: Option<Vec<StreamHasher>> =
            s.streams.iter().map(StreamHasher::resume).collect();
        let hashers = hashers.ok_or("no stream digest states (use --no-digest)")?;
        Streams::Digest(HashingSink::start(hashers, None))
    };
    Ok((exchange, streams))
}

/// A snapshot of the replay's state after `inputs` inputs, the last journaled at `timestamp`.
fn take(
    dir: &Path,
    exchange: &Exchange,
    sink: &mut HashingSink<'_>,
    inputs: u64,
    timestamp: Timestamp,
    header_digest: [u8; 32],
) -> Result<Snapshot<LentState>, ReplayError> {
    let last_seq = exchange.last_seq();
    let record_fingerprint =
        snapshot::record_fingerprint(dir, last_seq, Some(timestamp)).map_err(|error| {
            ReplayError::Record {
                seq: last_seq,
                error,
            }
        })?;
    // As the daemon does: the token tables' slot arrays lent, not copied (the file is
    // written from them; nothing applies an input meanwhile).
    let mut state = LentState::with_capacity(0);
    exchange
        .save_state_lending(&mut state)
        .expect("writing into memory");
    let streams = sink.settle().iter().map(StreamHasher::position).collect();
    Ok(Snapshot {
        last_seq,
        inputs,
        timestamp,
        record_fingerprint,
        header_digest,
        streams,
        state,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exchange::{Limits, Venue};
    use crate::journal::JournalWriter;
    use crate::journal::alongside::ScanProgress;
    use crate::journal::segment::list_segments;
    use crate::sequencer::record::{KIND_ADMIN, KIND_OUCH, KIND_TICK, encode_admin, encode_ouch};
    use crate::types::{Alpha, Firm, Price, Shares};
    use crate::wire::ouch::{EnterOrder, Inbound};
    use std::sync::Arc;

    /// Journal the same inputs, with leader changes (a cluster's) around them or not.
    fn journal(dir: &Path, leader_changes: bool) {
        journal_of(dir, leader_changes, 40, None);
    }

    /// A journal of `orders` Enter Orders between its start and end of day, with a record
    /// that does not decode in place of order `bad_at`.
    fn journal_of(dir: &Path, leader_changes: bool, orders: u32, bad_at: Option<u32>) {
        let (mut writer, _) = crate::journal::small_test_journal(dir);
        let header = DayHeader {
            format: DayHeader::FORMAT,
            gateway_session: "S1".into(),
            feed_session: "F1".into(),
            venue: Venue::demo(&["AAPL"], &[("U1", "F1"), ("U2", "F2")], Limits::default()),
        };
        let mut last = Timestamp(0);
        let noop = |writer: &mut JournalWriter, term: u64, last: Timestamp| {
            if leader_changes {
                writer.append(last, KIND_NOOP, &term.to_be_bytes()).unwrap();
            }
        };
        noop(&mut writer, 1, last);
        last = Timestamp(1_000);
        writer
            .append(last, KIND_START_OF_DAY, &header.encode())
            .unwrap();
        for n in 0..orders {
            if n % 13 == 0 {
                noop(&mut writer, u64::from(n) + 2, last);
            }
            if bad_at == Some(n) {
                // An OUCH record too short to hold its account: it does not decode.
                writer.append(last, KIND_OUCH, &[7]).unwrap();
                continue;
            }
            let order = Inbound::Enter(EnterOrder {
                token: Alpha::from_str_padded(&format!("T{n}")).unwrap(),
                side: if n % 2 == 0 { b'B' } else { b'S' },
                shares: Shares(100 + n),
                stock: Alpha::from_str_padded("AAPL").unwrap(),
                price: Price(1_000_000 + (n % 3) * 100),
                tif: 99_999,
                firm: Firm::SPACES,
                display: b'Y',
                capacity: b'A',
                intermarket_sweep: b'N',
                min_qty: Shares(0),
                cross_type: b'N',
                customer_type: b' ',
            });
            let mut raw = [0u8; 64];
            let len = order.encode(&mut raw);
            let mut payload = [0u8; crate::limits::OUCH_RECORD_BYTES_MAX];
            let n_bytes = encode_ouch(AccountId((n % 2) as u16), &raw[..len], &mut payload);
            last = Timestamp(last.0 + 1_000);
            writer.append(last, KIND_OUCH, &payload[..n_bytes]).unwrap();
        }
        last = Timestamp(last.0 + 1_000);
        writer.append(last, KIND_TICK, &[]).unwrap();
        let mut admin = [0u8; 3];
        let n = encode_admin(crate::exchange::Admin::EndOfDay, &mut admin);
        writer.append(last, KIND_ADMIN, &admin[..n]).unwrap();
        noop(&mut writer, 99, last);
        writer.flush().unwrap();
    }

    #[test]
    fn leader_changes_are_skipped_outputs_are_identical() {
        let temp = tempfile::tempdir().unwrap();
        let (plain, clustered) = (temp.path().join("plain"), temp.path().join("cluster"));
        journal(&plain, false);
        journal(&clustered, true);
        let a = replay(&plain, None, |_| {}).unwrap();
        let b = replay(&clustered, None, |_| {}).unwrap();
        assert_eq!(a.inputs, b.inputs, "a leader change is not an input");
        assert_eq!(a.inputs, 43);
        assert!(
            b.last_seq > a.last_seq,
            "leader changes take sequence numbers"
        );
        assert!(a.itch_messages > 40);
        // Everything but the sequence numbers is the same.
        assert_eq!(a.digest_lines()[1..], b.digest_lines()[1..]);
    }

    /// Counts the hints it is given.
    #[derive(Default)]
    struct Hints {
        first: std::cell::Cell<u64>,
        deeper: std::cell::Cell<u64>,
    }

    impl crate::sequencer::ahead::Prefetch for Hints {
        fn prefetch(&self, _: &Input) {
            self.first.set(self.first.get() + 1);
        }
        fn prefetch_deeper(&self, _: &Input) {
            self.deeper.set(self.deeper.get() + 1);
        }
    }

    /// The inputs read ahead are those read one record at a time, in order, leader changes
    /// skipped, up to and including the last record asked for and never past it.
    #[test]
    fn inputs_read_ahead_are_the_records_in_order() {
        let temp = tempfile::tempdir().unwrap();
        journal(temp.path(), true);
        let mut one_by_one = Vec::new();
        let mut reader = JournalReader::open(temp.path(), 1).unwrap();
        while let Some(r) = reader.next().unwrap() {
            if r.kind != KIND_NOOP {
                one_by_one.push((r.seq, record::decode(r.kind, r.payload).unwrap()));
            }
        }
        let last_seq = one_by_one.last().unwrap().0 + 1; // a leader change ends the journal
        for stop in [1, 2, 3, 10, 17, last_seq - 1, last_seq, last_seq + 5] {
            let hints = Hints::default();
            let reader = JournalReader::open(temp.path(), 1).unwrap();
            // Batches of 4: the stops fall inside, at the end of and past several batches.
            let mut ahead = InputsAhead::with_batch(reader, 0, stop, 4);
            let mut got = Vec::new();
            while let Some(input) = ahead.next(&hints).unwrap() {
                got.push((input.seq, input.command));
            }
            let want: Vec<_> = one_by_one
                .iter()
                .filter(|(seq, _)| *seq <= stop)
                .cloned()
                .collect();
            assert_eq!(got, want, "through record {stop}");
            assert_eq!(
                ahead.read_seq(),
                stop.min(last_seq),
                "read through {stop}, not past it"
            );
            assert_eq!(
                hints.first.get(),
                want.len() as u64,
                "one first hint per input"
            );
            assert!(hints.deeper.get() >= want.len() as u64);
        }
    }

    /// Batches small enough for a test journal to fill many.
    const SMALL_BATCH: usize = 256;

    /// Read on their thread in batches, many batches' worth of inputs come out as they were
    /// journaled, and one that cannot be decoded comes after every input before it, then
    /// nothing more.
    #[test]
    fn inputs_across_many_batches_and_a_bad_record_after_the_inputs_before_it() {
        let temp = tempfile::tempdir().unwrap();
        let orders = 3_000; // ~12 batches of 256: each emptied batch goes back and is refilled
        journal_of(temp.path(), true, orders, Some(2_500));
        let reader = JournalReader::open(temp.path(), 1).unwrap();
        let mut ahead = InputsAhead::with_batch(reader, 0, u64::MAX, SMALL_BATCH);
        let hints = Hints::default();
        let mut seqs = Vec::new();
        let error = loop {
            match ahead.next(&hints) {
                Ok(Some(input)) => seqs.push(input.seq),
                Ok(None) => panic!("the bad record was not reported"),
                Err(e) => break e,
            }
        };
        // The start of day and the 2,500 orders before the bad record, in order, gapless
        // but for the leader changes (one before every 13th order, and the first record).
        assert_eq!(seqs.len(), 2_501);
        assert!(
            seqs.windows(2)
                .all(|w| w[1] == w[0] + 1 || w[1] == w[0] + 2)
        );
        match error {
            AheadError::Record { seq, .. } => assert_eq!(seq, seqs.last().unwrap() + 1),
            other => panic!("{other:?}"),
        }
        assert!(
            matches!(ahead.next(&hints), Ok(None)),
            "nothing after the error"
        );

        // Without the bad record: every batch to the end, and the position is the last record.
        let whole = tempfile::tempdir().unwrap();
        journal_of(whole.path(), true, orders, None);
        let reader = JournalReader::open(whole.path(), 1).unwrap();
        let mut ahead = InputsAhead::with_batch(reader, 0, u64::MAX, SMALL_BATCH);
        let mut count = 0;
        while ahead.next(&hints).unwrap().is_some() {
            count += 1;
        }
        let mut reader = JournalReader::open(whole.path(), 1).unwrap();
        let mut last = 0;
        while let Some(r) = reader.next().unwrap() {
            last = r.seq;
        }
        assert_eq!(
            count,
            orders + 3,
            "start of day, the orders, the tick and end of day"
        );
        assert_eq!(
            ahead.read_seq(),
            last,
            "read to the last record, a leader change"
        );
    }

    /// Flip every bit of the byte at `at` of `file`, or of its last non-zero byte.
    fn flip(file: &Path, at: Option<usize>) {
        let mut bytes = std::fs::read(file).unwrap();
        let at = at.unwrap_or_else(|| bytes.iter().rposition(|&b| b != 0).unwrap());
        bytes[at] ^= 0xff;
        std::fs::write(file, bytes).unwrap();
    }

    /// The replay refused the journal with exactly the check's error.
    fn assert_refused(replayed: Result<ReplayReport, ReplayError>, refusal: &str) {
        match replayed {
            Err(ReplayError::Journal(e)) => assert_eq!(e.to_string(), refusal),
            Err(other) => panic!("another error: {other}"),
            Ok(report) => panic!("replayed {} inputs of a refused journal", report.inputs),
        }
    }

    /// A full replay checks the journal beside its apply (`JournalCheck::Alongside`); what it
    /// answers is still the check's: a refusal the check reaches only at the journal's end
    /// (the last record, acknowledged, fails its checksum: damage, not a torn tail). The
    /// reading, bounded by the check, stops short of it and reports no error of its own; a
    /// replay that ignored the verdict would answer with the records before it.
    #[test]
    fn a_refusal_the_check_reaches_at_the_end_is_the_replays_answer() {
        let temp = tempfile::tempdir().unwrap();
        // 20,000 orders over 1-MiB segments: the check reports its progress a few times
        // before it reaches the damage, and crosses a segment's end.
        journal_of(temp.path(), false, 20_000, None);
        let whole = replay(temp.path(), None, |_| {}).unwrap();
        assert_eq!(whole.inputs, 20_003);
        let with_data: Vec<_> = list_segments(temp.path())
            .unwrap()
            .into_iter()
            .map(|(_, path)| path)
            .filter(|f| std::fs::read(f).unwrap().iter().any(|&b| b != 0))
            .collect();
        assert!(with_data.len() >= 2, "{with_data:?}");
        flip(with_data.last().unwrap(), None);
        let refusal = crate::journal::verify(temp.path()).unwrap_err().to_string();
        assert!(refusal.contains("durable"), "{refusal}");
        for options in [
            ReplayOptions::default(),
            ReplayOptions {
                no_digest: true,
                ..ReplayOptions::default()
            },
        ] {
            assert_refused(replay_with(temp.path(), options, |_| {}), &refusal);
        }
    }

    /// A machine crash can keep a segment's successor and lose the seal before it: the
    /// journal is whole (the next header's first sequence number proves no record missing),
    /// `verify` accepts it, and a read-only replay must go on into the next segment, not end
    /// the day there and call it complete.
    #[test]
    fn a_missing_seal_the_next_header_vouches_for_is_crossed_not_the_end() {
        let temp = tempfile::tempdir().unwrap();
        journal_of(temp.path(), true, 20_000, None);
        let whole = replay(temp.path(), None, |_| {}).unwrap();
        let files = list_segments(temp.path()).unwrap();
        let mut first = std::fs::read(&files[0].1).unwrap();
        let seal_at = first.iter().rposition(|&b| b != 0).unwrap() / 8 * 8;
        first[seal_at..seal_at + 8].fill(0);
        std::fs::write(&files[0].1, first).unwrap();
        let checked = crate::journal::verify(temp.path()).unwrap();
        assert_eq!(
            checked.missing_seals, 1,
            "the seal, not a record, was zeroed"
        );
        for options in [
            ReplayOptions::default(),
            ReplayOptions {
                no_digest: true,
                ..ReplayOptions::default()
            },
        ] {
            let unsealed = replay_with(temp.path(), options, |_| {}).unwrap();
            assert_eq!(
                (unsealed.inputs, unsealed.last_seq),
                (whole.inputs, whole.last_seq)
            );
        }
        let unsealed = replay(temp.path(), None, |_| {}).unwrap();
        assert_eq!(unsealed.digest_lines(), whole.digest_lines());
    }

    /// A record damaged far into the day: the replay answers with the check's refusal.
    #[test]
    fn a_checksum_failure_mid_journal_refuses_the_replay_as_the_check_does() {
        let temp = tempfile::tempdir().unwrap();
        journal_of(temp.path(), true, 20_000, None);
        let files = list_segments(temp.path()).unwrap();
        // Inside a record of the second segment (a byte its checksum covers, today: the
        // assertion below says if a layout change moves it), valid records after it.
        flip(&files[1].1, Some(300_000));
        let refusal = crate::journal::verify(temp.path()).unwrap_err().to_string();
        assert!(refusal.contains("checksum"), "{refusal}");
        assert_refused(replay(temp.path(), None, |_| {}), &refusal);
    }

    /// Bounded by a check running beside, the reading takes only the records it has passed,
    /// and stops without an error of its own when it refuses (its error is the replay's).
    #[test]
    fn reading_beside_a_check_never_passes_it() {
        let temp = tempfile::tempdir().unwrap();
        journal_of(temp.path(), false, 3_000, None);
        let progress = Arc::new(ScanProgress::new());
        progress.advance(1_000);
        let reader = JournalReader::open(temp.path(), 1).unwrap();
        let through = Through::Checking(Arc::clone(&progress));
        let mut ahead = InputsAhead::with_batch(reader, 0, through, SMALL_BATCH);
        let hints = Hints::default();
        // Records 1..=1000 (the start of day and 999 orders) are read; the reading then
        // waits. The first 993 are handed out at once (each with the 7 after it in hand).
        let mut seqs: Vec<u64> = (0..993)
            .map(|_| ahead.next(&hints).unwrap().unwrap().seq)
            .collect();
        assert_eq!(seqs.last(), Some(&993));
        progress.conclude(None);
        while let Some(input) = ahead.next(&hints).unwrap() {
            seqs.push(input.seq);
        }
        assert_eq!(
            seqs,
            (1..=1_000).collect::<Vec<_>>(),
            "nothing past the check"
        );
        assert_eq!(ahead.read_seq(), 1_000);
    }

    /// Dropped before its end, the reader stops its thread and waits for it: once the drop
    /// returns, the thread's journal mapping is gone (a drop that did not join would most
    /// often still find it mapped; one that hung fails at the 10-s bound).
    #[test]
    fn inputs_ahead_dropped_early_stops_its_thread() {
        let temp = tempfile::tempdir().unwrap();
        // The reading thread gets at most a batch in hand, the batches in flight and one
        // being filled (~1,600 inputs) past the last input taken: with 2,000 taken of 6,000
        // it is still reading, so its mapping is there to go away. (With 3,000 it could reach
        // the end and unmap on its own: seen on a busy machine.)
        journal_of(temp.path(), false, 6_000, None);
        let dir = temp.path().to_str().unwrap().to_string();
        let mapped = move || {
            let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
            maps.contains(&dir)
        };
        let (done, finished) = std::sync::mpsc::channel();
        let path = temp.path().to_path_buf();
        std::thread::spawn(move || {
            for taken in [0, 1, 300, 2_000] {
                let reader = JournalReader::open(&path, 1).unwrap();
                let mut ahead = InputsAhead::with_batch(reader, 0, u64::MAX, SMALL_BATCH);
                for _ in 0..taken {
                    ahead.next(&Hints::default()).unwrap().unwrap();
                }
                assert!(
                    mapped(),
                    "{taken} inputs taken: the reading thread maps the journal"
                );
                drop(ahead);
                assert!(
                    !mapped(),
                    "dropped after {taken} inputs, the thread is gone"
                );
            }
            done.send(()).unwrap();
        });
        finished
            .recv_timeout(std::time::Duration::from_secs(10))
            .expect("every drop returns");
    }
}
