//! Offline replay: recompute every output of a journal with the pure core and digest it.
//!
//! Digests are SHA-256 over each stream in BinaryFILE framing (2-byte big-endian length, then
//! the message): one for the ITCH stream (so it equals the SHA-256 of the `--itch-out` file)
//! and one per account for its OUCH stream, plus the exchange's state digest. The daemon's
//! streams are the same bytes, so "live == replay" is a comparison of these digests.

use crate::exchange::{Exchange, Input, Sink, StateDigest};
use crate::journal::{JournalError, JournalReader};
use crate::sequencer::record::{self, DayHeader, KIND_START_OF_DAY};
use crate::types::{AccountId, Timestamp};
use crate::wire::{itch, ouch};
use sha2::{Digest, Sha256};
use std::io::Write;
use std::path::Path;

/// Largest encoded OUCH or ITCH message, with room for the length prefix.
const MESSAGE_BYTES_MAX: usize = 96;

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
}

impl StreamHasher {
    pub fn add(&mut self, message: &[u8]) {
        let len = u16::try_from(message.len()).expect("messages are short");
        self.hasher.update(len.to_be_bytes());
        self.hasher.update(message);
        self.messages += 1;
    }

    pub fn digest(&self) -> StreamDigest {
        StreamDigest(self.hasher.clone().finalize().into())
    }
}

/// A sink that encodes every output and digests the streams; optionally writes the ITCH
/// stream as a BinaryFILE.
pub struct DigestSink<'w> {
    pub itch: StreamHasher,
    pub ouch: Vec<StreamHasher>,
    itch_out: Option<&'w mut dyn Write>,
    write_error: Option<std::io::Error>,
}

impl<'w> DigestSink<'w> {
    pub fn new(accounts: usize, itch_out: Option<&'w mut dyn Write>) -> Self {
        DigestSink {
            itch: StreamHasher::default(),
            ouch: vec![StreamHasher::default(); accounts],
            itch_out,
            write_error: None,
        }
    }
}

impl Sink for DigestSink<'_> {
    fn ouch(&mut self, account: AccountId, message: &ouch::Outbound) {
        let mut buf = [0u8; MESSAGE_BYTES_MAX];
        let n = message.encode(&mut buf);
        self.ouch[account.0 as usize].add(&buf[..n]);
    }

    fn itch(&mut self, message: &itch::Message) {
        let mut buf = [0u8; MESSAGE_BYTES_MAX];
        let n = itch::binary_file::write_message(&mut buf, message);
        self.itch.add(&buf[2..n]);
        if let Some(out) = self.itch_out.as_mut()
            && self.write_error.is_none()
            && let Err(e) = out.write_all(&buf[..n])
        {
            self.write_error = Some(e);
        }
    }
}

/// What a replay computed.
#[derive(Clone, Debug)]
pub struct ReplayReport {
    pub header: DayHeader,
    pub inputs: u64,
    pub last_seq: u64,
    pub itch_messages: u64,
    pub itch_digest: StreamDigest,
    /// Per account in config order: (username, messages, digest).
    pub ouch: Vec<(String, u64, StreamDigest)>,
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
}

impl ReplayReport {
    /// Everything the replay computed except timing: what `replay-logs/*/expected.txt` holds.
    pub fn digest_lines(&self) -> Vec<String> {
        let mut lines = vec![
            format!("inputs {} last_seq {}", self.inputs, self.last_seq),
            format!("order_refs {} matches {}", self.order_refs, self.matches),
            format!(
                "itch {} messages sha256 {}",
                self.itch_messages, self.itch_digest
            ),
        ];
        for (user, messages, digest) in &self.ouch {
            lines.push(format!("ouch {user} {messages} messages sha256 {digest}"));
        }
        lines.push(format!("state {}", self.state_digest));
        if let Some(t) = &self.torn_tail {
            lines.push(format!("torn_tail {} bytes ({})", t.cut_bytes, t.reason));
        }
        lines
    }

    pub fn inputs_per_second(&self) -> f64 {
        if self.seconds > 0.0 {
            self.inputs as f64 / self.seconds
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

impl From<JournalError> for ReplayError {
    fn from(e: JournalError) -> Self {
        ReplayError::Journal(e)
    }
}

/// Read the first record: the day header that defines the venue, and its timestamp.
pub fn read_header(reader: &mut JournalReader) -> Result<(DayHeader, Timestamp), ReplayError> {
    let first = reader.next()?.ok_or(ReplayError::Empty)?;
    if first.kind != KIND_START_OF_DAY || first.seq != 1 {
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
    Ok((header, first.timestamp))
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

/// Replay the whole journal in `path`: a journal (a trading day's directory), or a
/// `journal.dir` holding trading days, whose latest day is replayed (see [`crate::days`]).
/// `progress(done_inputs)` is called every 64k inputs.
pub fn replay(
    path: &Path,
    itch_out: Option<&mut dyn Write>,
    mut progress: impl FnMut(u64),
) -> Result<ReplayReport, ReplayError> {
    let started = std::time::Instant::now();
    let (journal_dir, day_note) = crate::days::for_reading(path).map_err(ReplayError::Layout)?;
    let dir = journal_dir.as_path();
    // Read-only check first: refuses corruption and gaps, finds the end of the valid prefix.
    let verified = crate::journal::verify(dir)?;
    let mut reader = JournalReader::open(dir, 1)?;
    let (header, timestamp) = read_header(&mut reader)?;
    let mut exchange = Exchange::new(header.venue.clone()).map_err(|e| ReplayError::Record {
        seq: 1,
        error: e.to_string(),
    })?;
    let mut sink = DigestSink::new(header.venue.accounts.len(), itch_out);
    apply_record(
        &mut exchange,
        1,
        timestamp,
        KIND_START_OF_DAY,
        &[],
        &mut sink,
    )?;
    let mut inputs = 1u64;
    while inputs < verified.last_seq {
        let Some(r) = reader.next()? else { break };
        apply_record(
            &mut exchange,
            r.seq,
            r.timestamp,
            r.kind,
            r.payload,
            &mut sink,
        )?;
        inputs += 1;
        if inputs.is_multiple_of(1 << 16) {
            progress(inputs);
        }
    }
    if let Some(e) = sink.write_error.take() {
        return Err(ReplayError::Io(e));
    }
    let ouch = header
        .venue
        .accounts
        .iter()
        .zip(&sink.ouch)
        .map(|(a, h)| (a.username.clone(), h.messages, h.digest()))
        .collect();
    Ok(ReplayReport {
        inputs,
        last_seq: exchange.last_seq(),
        itch_messages: sink.itch.messages,
        itch_digest: sink.itch.digest(),
        ouch,
        state_digest: exchange.state_digest(),
        order_refs: exchange.order_refs_used(),
        matches: exchange.matches_used(),
        seconds: started.elapsed().as_secs_f64(),
        torn_tail: verified.torn_tail,
        header,
        journal_dir,
        day_note,
    })
}
