//! bourse-journal: inspect a journal (verify, dump, stats) and regenerate `replay-logs/`.

use bourse::exchange::Command as Cmd;
use bourse::journal::{JournalReader, verify};
use bourse::replay;
use bourse::sequencer::record::{self, DayHeader, KIND_OUCH, KIND_START_OF_DAY};
use bourse_tools::{samples, show};
use clap::{Parser, Subcommand};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

#[derive(Parser)]
#[command(
    name = "bourse-journal",
    about = "Inspect a bourse journal: verify, dump records, statistics"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Check every header and record and the manifest's marks (a missing segment, damage to
    /// durable records); report a torn tail without changing anything. Every DIR below is a
    /// trading day's journal, or journal.dir itself (its latest day).
    Verify { dir: PathBuf },
    /// Print records human-readably (OUCH decoded).
    Dump {
        dir: PathBuf,
        /// First sequence number to print.
        #[arg(long, default_value_t = 1)]
        from: u64,
        /// Records to print at most.
        #[arg(long, default_value_t = 100)]
        count: u64,
    },
    /// Counts by record kind, OUCH message type and account; time span and rate.
    Stats { dir: PathBuf },
    /// Regenerate the recorded days of `replay-logs/` into OUT (see replay-logs/README.md);
    /// with NAMEs, only those days (a new day is added without touching the others).
    RecordSamples { out: PathBuf, names: Vec<String> },
    /// Write a journal of a seeded benchmark workload (for replay and recovery timing).
    Synth {
        out: PathBuf,
        /// quantcup, exchange-core, deep-book, sweep or realistic.
        #[arg(long, default_value = "exchange-core")]
        workload: String,
        /// Operations to generate (at least 1).
        #[arg(long, default_value_t = 1_000_000, value_parser = clap::value_parser!(u32).range(1..))]
        ops: u32,
        #[arg(long, default_value_t = 42)]
        seed: u64,
        /// Fold the workload's accounts onto this many (account % N; 0: keep them): a venue
        /// the daemon can run (each account's OUCH store reserves disk ahead of it).
        #[arg(long, default_value_t = 0)]
        accounts: u16,
    },
}

fn main() -> ExitCode {
    let result = match Cli::parse().command {
        Command::Verify { dir } => journal_of(&dir).and_then(|dir| verify_command(&dir)),
        Command::Dump { dir, from, count } => journal_of(&dir).and_then(|d| dump(&d, from, count)),
        Command::Stats { dir } => journal_of(&dir).and_then(|dir| stats(&dir)),
        Command::RecordSamples { out, names } => record_samples(&out, &names),
        Command::Synth {
            out,
            workload,
            ops,
            seed,
            accounts,
        } => synth(&out, &workload, ops, seed, accounts),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("bourse-journal: {e}");
            ExitCode::FAILURE
        }
    }
}

/// A trading day's journal, or journal.dir itself: its latest day, said on stderr.
fn journal_of(path: &Path) -> Result<PathBuf, String> {
    let (dir, note) = bourse::days::for_reading(path)?;
    if let Some(note) = note {
        eprintln!("bourse-journal: {note}");
    }
    Ok(dir)
}

fn verify_command(dir: &Path) -> Result<(), String> {
    let r = verify(dir).map_err(|e| e.to_string())?;
    println!(
        "segments {} records {} last_seq {} data_bytes {}",
        r.segments, r.records, r.last_seq, r.data_bytes
    );
    println!(
        "trading day {} (day epoch {} ns)",
        bourse::days::date_of(r.day_epoch_unix_ns),
        r.day_epoch_unix_ns
    );
    println!("last timestamp {}", clock(r.last_timestamp.0));
    match &r.manifest {
        Some(m) => println!(
            "manifest: sealed through segment {} (next expected {}), durable through seq {} (synced {}, in the mapping {})",
            m.sealed_through_segment,
            m.sealed_through_segment + 1,
            r.durable_seq,
            m.synced_through_seq,
            m.mapped_through_seq
        ),
        None => println!("manifest: none (a journal from before manifests: seal checks only)"),
    }
    match &r.torn_tail {
        Some(t) => println!(
            "torn tail: {} at offset {} ({} bytes, {}); a writer would cut it",
            t.path.display(),
            t.offset_bytes,
            t.cut_bytes,
            t.reason
        ),
        None => println!("no torn tail"),
    }
    Ok(())
}

/// HH:MM:SS.nnnnnnnnn since the journal's midnight.
fn clock(ns: u64) -> String {
    let s = ns / 1_000_000_000;
    format!(
        "{:02}:{:02}:{:02}.{:09}",
        s / 3600,
        s / 60 % 60,
        s % 60,
        ns % 1_000_000_000
    )
}

fn describe(kind: u8, payload: &[u8]) -> String {
    if kind == KIND_START_OF_DAY {
        return match DayHeader::decode(payload) {
            Ok(h) => format!(
                "start of day: format {}, session {}, feed {}, {} symbols, {} accounts",
                h.format,
                h.gateway_session,
                h.feed_session,
                h.venue.symbols.len(),
                h.venue.accounts.len()
            ),
            Err(e) => format!("start of day (unreadable: {e})"),
        };
    }
    if kind == record::KIND_NOOP {
        return match <[u8; 8]>::try_from(payload) {
            Ok(term) => format!("leader change: term {}", u64::from_be_bytes(term)),
            Err(_) => format!("leader change (unreadable: {} bytes)", payload.len()),
        };
    }
    match record::decode(kind, payload) {
        Ok(Cmd::Ouch { account, message }) => {
            format!("account {}: {}", account.0, show::inbound(&message))
        }
        Ok(Cmd::Admin(a)) => format!("admin {a:?}"),
        Ok(Cmd::Tick) => "tick".into(),
        Ok(Cmd::StartOfDay) => "start of day".into(),
        Ok(Cmd::Disconnect { account }) => format!("account {}: session lost", account.0),
        Err(e) => format!("undecodable: {e}"),
    }
}

fn dump(dir: &Path, from: u64, count: u64) -> Result<(), String> {
    let mut reader = JournalReader::open(dir, from.max(1)).map_err(|e| e.to_string())?;
    for _ in 0..count {
        let Some(r) = reader.next().map_err(|e| e.to_string())? else {
            break;
        };
        println!(
            "{:>10} {} {}",
            r.seq,
            clock(r.timestamp.0),
            describe(r.kind, r.payload)
        );
    }
    Ok(())
}

fn stats(dir: &Path) -> Result<(), String> {
    let report = verify(dir).map_err(|e| e.to_string())?;
    let mut reader = JournalReader::open(dir, 1).map_err(|e| e.to_string())?;
    let mut kinds: BTreeMap<&str, u64> = BTreeMap::new();
    let mut ouch: BTreeMap<char, u64> = BTreeMap::new();
    let mut accounts: BTreeMap<u16, u64> = BTreeMap::new();
    let (mut first_ts, mut last_ts, mut bytes) = (None, 0u64, 0u64);
    for _ in 0..report.last_seq {
        let Some(r) = reader.next().map_err(|e| e.to_string())? else {
            break;
        };
        first_ts.get_or_insert(r.timestamp.0);
        last_ts = r.timestamp.0;
        bytes += r.payload.len() as u64;
        let name = bourse::sequencer::record::kind_name(r.kind).unwrap_or("unknown");
        *kinds.entry(name).or_default() += 1;
        if r.kind == KIND_OUCH && r.payload.len() > 2 {
            *ouch.entry(r.payload[2] as char).or_default() += 1;
            *accounts
                .entry(u16::from_be_bytes([r.payload[0], r.payload[1]]))
                .or_default() += 1;
        }
    }
    println!(
        "records {} payload bytes {} data bytes {} segments {}",
        report.records, bytes, report.data_bytes, report.segments
    );
    let span_ns = last_ts.saturating_sub(first_ts.unwrap_or(0));
    let rate = if span_ns > 0 {
        report.records as f64 / (span_ns as f64 / 1e9)
    } else {
        0.0
    };
    println!(
        "from {} to {} ({:.3} s, {:.0} records/s)",
        clock(first_ts.unwrap_or(0)),
        clock(last_ts),
        span_ns as f64 / 1e9,
        rate
    );
    kinds.iter().for_each(|(k, n)| println!("kind {k}: {n}"));
    ouch.iter().for_each(|(k, n)| println!("ouch {k}: {n}"));
    accounts
        .iter()
        .for_each(|(a, n)| println!("account {a}: {n}"));
    Ok(())
}

fn record_samples(out: &Path, names: &[String]) -> Result<(), String> {
    let days = [
        ("busy-day", samples::busy_day(0x5EED_2026, 20_000), false),
        ("edge-cases", samples::edge_case_day(), false),
        ("torn-tail", samples::busy_day(0x70A5_7A11, 500), true),
        ("venue-controls", samples::venue_controls_day(), false),
    ];
    if let Some(unknown) = names
        .iter()
        .find(|n| !days.iter().any(|(name, _, _)| name == n))
    {
        return Err(format!("no sample day {unknown:?}"));
    }
    let wanted = |name: &str| names.is_empty() || names.iter().any(|n| n == name);
    for (name, day, tear) in days.into_iter().filter(|d| wanted(d.0)) {
        let dir = out.join(name);
        let journal = dir.join("journal");
        if journal.exists() {
            return Err(format!(
                "{} exists: remove it first (a format change is a version bump, never a silent rewrite)",
                journal.display()
            ));
        }
        samples::record(&day, &journal)?;
        if tear {
            samples::tear_last_record(&journal)?;
        }
        let report = replay::replay(&journal, None, |_| {}).map_err(|e| e.to_string())?;
        let mut text = report.digest_lines().join("\n");
        text.push('\n');
        std::fs::write(dir.join("expected.txt"), &text).map_err(|e| e.to_string())?;
        println!(
            "{name}: {} inputs, {} ITCH messages",
            report.inputs, report.itch_messages
        );
    }
    Ok(())
}

fn synth(out: &Path, workload: &str, ops: u32, seed: u64, accounts: u16) -> Result<(), String> {
    use bourse::workload::{self, Spec, Workload};
    let kind = match workload {
        "quantcup" => Workload::QuantCup,
        "exchange-core" => Workload::ExchangeCore,
        "deep-book" => Workload::DeepBook,
        "sweep" => Workload::Sweep,
        "realistic" => Workload::Realistic,
        other => return Err(format!("unknown workload {other}")),
    };
    let spec = Spec {
        ops,
        ..Spec::standard(kind, seed)
    };
    let stream = workload::generate(spec);
    let stats = &stream.stats;
    let fold = if accounts == 0 || accounts >= stats.accounts {
        stats.accounts
    } else {
        accounts
    };
    // Each folded account takes the tokens of at most this many of the workload's.
    let folded_per_account = u32::from(stats.accounts.div_ceil(fold));
    let limits = bourse::exchange::Limits {
        orders_per_symbol: (stats.max_resting + 1024).next_power_of_two(),
        levels_per_side: (stats.max_levels + 64).next_power_of_two(),
        tokens_per_account: (stats.max_tokens_per_account * folded_per_account + 64)
            .next_power_of_two(),
    };
    let venue = workload::demo_venue("AAPL", fold, limits);
    let tick = venue.symbols[0].tick;
    // Made as they are written (not collected first): 100M steps would need ~8 GB.
    let steps = stream.ops.iter().enumerate().map(|(i, op)| {
        let (account, message) = workload::to_message(op, "AAPL", tick);
        (
            34_200_000_000_000 + (i as u64 + 1) * 1_000,
            samples::Step::Ouch(account.0 % fold, message),
        )
    });
    samples::record_steps(&venue, steps, out, 256 << 20)?;
    let config_path = out.with_extension("toml");
    write_venue_config(&venue, out, &config_path)?;
    println!(
        "{} inputs of {workload} (seed {seed}) written to {}; `bourse run --config {}` continues it",
        stream.ops.len() + 1,
        out.display(),
        config_path.display()
    );
    Ok(())
}

/// A config for `bourse run` on the synthetic day in `day`: its venue and sessions (what the
/// journal's start of day holds), `async`, every port 0 (printed at start), password `pw`.
fn write_venue_config(
    venue: &bourse::exchange::Venue,
    day: &Path,
    path: &Path,
) -> Result<(), String> {
    use bourse::config::{AccountConfig, Config, DurabilityMode};
    let any_port: std::net::SocketAddr = "127.0.0.1:0".parse().expect("an address");
    let mut config = Config::embedded_default();
    config.gateway.listen = any_port;
    config.gateway.session = "SAMPLE0001".into();
    config.feed.session = "SAMPLE0001".into();
    config.feed.rerequest = any_port;
    config.feed.snapshot = any_port;
    config.admin.listen = any_port;
    config.replication.listen = any_port;
    let dir = std::path::absolute(day).map_err(|e| format!("{}: {e}", day.display()))?;
    config.journal.dir = dir;
    config.journal.durability = DurabilityMode::Async;
    config.journal.segment_bytes = 256 << 20;
    config.limits = venue.limits;
    config.symbols = venue.symbols.clone();
    config.accounts = venue
        .accounts
        .iter()
        .map(|a| AccountConfig {
            username: a.username.clone(),
            password: "pw".into(),
            firm: a.firm.clone(),
            ..AccountConfig::default()
        })
        .collect();
    let text = config.to_toml().map_err(|e| e.to_string())?;
    // Read back as the daemon will: the same venue, or the journal would be refused.
    let back = Config::parse(&text, &path.display().to_string()).map_err(|e| e.to_string())?;
    if back.venue() != *venue {
        return Err("the written config's venue is not the journal's".into());
    }
    std::fs::write(path, text).map_err(|e| format!("{}: {e}", path.display()))
}
