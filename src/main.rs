//! The `bourse` command line: run, replay, admin.

use bourse::config::Config;
use bourse::daemon::admin::{self, Request};
use bourse::daemon::{Daemon, stop_on_signals};
use bourse::marketdata::publisher::{FeedPublisher, PublisherConfig};
use clap::{Parser, Subcommand};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

#[derive(Parser)]
#[command(
    name = "bourse",
    version,
    about = "Exchange matching engine daemon: OUCH 4.2 in, ITCH 5.0 out, journal first"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
    /// Log lines on stderr: `text` (colours only when stderr is a terminal) or `json` (one
    /// object per line, for log shippers).
    #[arg(long, global = true, value_enum, default_value_t = LogFormat::Text)]
    log_format: LogFormat,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum LogFormat {
    Text,
    Json,
}

#[derive(Subcommand)]
enum Command {
    /// Run a primary: recover the journal, then take orders (SoupBinTCP/OUCH 4.2) and publish
    /// ITCH 5.0 over MoldUDP64. Without --config the embedded default config is used. With a
    /// [cluster] of several members: run this member, which serves only while it leads.
    Run {
        /// TOML configuration file (see README "Configuration").
        #[arg(long)]
        config: Option<PathBuf>,
        /// Accept a damaged journal tail: cut durable records that are corrupt or missing at
        /// the end (or a missing last segment) back to the last intact record, instead of
        /// refusing to start. Records after that point are lost; see README "Durability".
        #[arg(long)]
        truncate_corrupt_tail: bool,
    },
    /// Follow the primary named by [replication] primary: journal and apply every record as
    /// it arrives, and take over (order entry, feed, re-request, snapshot) when it is gone.
    /// With a [cluster] of several members: the same as `run` (a member follows until elected).
    Standby {
        /// TOML configuration file; its [journal] dir is the standby's own.
        #[arg(long)]
        config: PathBuf,
        /// As for `run`: cut a damaged journal tail instead of refusing to start.
        #[arg(long)]
        truncate_corrupt_tail: bool,
    },
    /// Recompute every output of a journal offline with the pure core and print digests
    /// (SHA-256 of the ITCH stream and of each account's OUCH stream, state digest).
    Replay {
        /// A trading day's journal directory, or journal.dir itself (its latest day).
        #[arg(long)]
        journal: PathBuf,
        /// Also write the ITCH stream as a BinaryFILE (2-byte length + message).
        #[arg(long, conflicts_with = "from_snapshot")]
        itch_out: Option<PathBuf>,
        /// Recovery speed: do not encode or digest the output streams (messages are counted,
        /// the state digest is printed, stream digests print as `-`).
        #[arg(long)]
        no_digest: bool,
        /// Start from the day's newest valid snapshot (damaged ones are skipped with a log
        /// line) and apply the journal's tail: the same digests as a full replay.
        #[arg(long)]
        from_snapshot: bool,
        /// Write a snapshot into the day's `snapshots/` every N inputs, N at least 1 (as
        /// `[snapshot] every_inputs` does in the daemon; keeps the day's newest 3 by record,
        /// those already there included).
        #[arg(long, value_name = "N", conflicts_with = "no_digest", value_parser = clap::value_parser!(u64).range(1..))]
        write_snapshots_every: Option<u64>,
    },
    /// Send an operator command to a running daemon (its [admin] listen address).
    Admin {
        /// The daemon's TOML configuration (for the admin address); default: embedded.
        #[arg(long)]
        config: Option<PathBuf>,
        #[command(subcommand)]
        action: AdminAction,
    },
}

#[derive(Subcommand)]
enum AdminAction {
    /// Halt a symbol: ITCH trading action H; new orders and replaces are rejected H.
    Halt { symbol: String },
    /// Resume a halted symbol: ITCH trading action T.
    Resume { symbol: String },
    /// End the day: cancel every resting order (reason E), then the end-of-day messages.
    EndOfDay,
    /// Kill switch: cancel the account's resting orders (reason S), in every symbol or one.
    CancelAll {
        account: String,
        symbol: Option<String>,
    },
    /// Reject the account's Enter and Replace (reason a) until unblocked; cancels still work.
    Block { account: String },
    /// End a block.
    Unblock { account: String },
    /// Print sequence numbers, resting orders and sessions.
    Status,
    /// Stop the daemon: every session gets End of Session, the journal is flushed.
    Shutdown,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let log_format = cli.log_format;
    let result = match cli.command {
        Command::Run {
            config,
            truncate_corrupt_tail,
        } => run(config, log_format, truncate_corrupt_tail),
        Command::Standby {
            config,
            truncate_corrupt_tail,
        } => standby(config, log_format, truncate_corrupt_tail),
        Command::Replay {
            journal,
            itch_out,
            no_digest,
            from_snapshot,
            write_snapshots_every,
        } => {
            // Damaged snapshots skipped by --from-snapshot are logged (stderr).
            init_logging(log_format);
            let options = ReplayFlags {
                no_digest,
                from_snapshot,
                write_snapshots_every,
            };
            replay(&journal, itch_out, options)
        }
        Command::Admin { config, action } => admin_command(config, action),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("bourse: {message}");
            ExitCode::FAILURE
        }
    }
}

fn load_config(path: Option<PathBuf>) -> Result<Config, String> {
    match path {
        Some(path) => Config::load(&path).map_err(|e| e.to_string()),
        None => Ok(Config::embedded_default()),
    }
}

fn init_logging(format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match format {
        // Escape codes only for a person at a terminal, never into files or pipes.
        LogFormat::Text => builder
            .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
            .init(),
        LogFormat::Json => builder.json().with_ansi(false).init(),
    }
}

fn run(
    config: Option<PathBuf>,
    log_format: LogFormat,
    truncate_corrupt_tail: bool,
) -> Result<(), String> {
    init_logging(log_format);
    let mut config = load_config(config)?;
    config.journal.truncate_corrupt_tail = truncate_corrupt_tail;
    if config.is_clustered() {
        return run_member(config);
    }
    let stop = stop_on_signals()?;
    let publisher = PublisherConfig::from_feed(&config.feed)?;
    let make_feed = |next_seq| {
        FeedPublisher::new(&publisher, next_seq, 0)
            .map_err(|e| format!("cannot open the multicast feed {}: {e}", publisher.group))
    };
    let mut daemon = Daemon::start(config.clone(), make_feed, stop)?;
    println!("{}", daemon.listening());
    daemon.run()
}

/// A cluster member: follows, and serves while it leads (the feed opens and closes with it).
fn run_member(config: Config) -> Result<(), String> {
    let stop = stop_on_signals()?;
    let publisher = PublisherConfig::from_feed(&config.feed)?;
    let make_feed = move |next_seq| {
        FeedPublisher::new(&publisher, next_seq, 0)
            .map_err(|e| format!("cannot open the multicast feed {}: {e}", publisher.group))
    };
    let mut daemon = Daemon::start_member(config, make_feed, stop)?;
    println!("{}", daemon.listening());
    daemon.run()
}

fn standby(
    config: PathBuf,
    log_format: LogFormat,
    truncate_corrupt_tail: bool,
) -> Result<(), String> {
    init_logging(log_format);
    let mut config = load_config(Some(config))?;
    config.journal.truncate_corrupt_tail = truncate_corrupt_tail;
    if config.is_clustered() {
        // Every member follows until it is elected: `standby` is `run`.
        return run_member(config);
    }
    let stop = stop_on_signals()?;
    let publisher = PublisherConfig::from_feed(&config.feed)?;
    let make_feed = |next_seq| {
        FeedPublisher::new(&publisher, next_seq, 0)
            .map_err(|e| format!("cannot open the multicast feed {}: {e}", publisher.group))
    };
    let primary = config
        .replication
        .primary
        .ok_or("bourse standby needs [replication] primary = \"host:port\"")?;
    println!("following primary={primary}");
    bourse::replication::standby::run(config.clone(), make_feed, stop, |listening| {
        println!("{listening}");
    })
}

/// `bourse replay`'s flags beside the journal and the ITCH file.
struct ReplayFlags {
    no_digest: bool,
    from_snapshot: bool,
    write_snapshots_every: Option<u64>,
}

fn replay(
    journal: &std::path::Path,
    itch_out: Option<PathBuf>,
    flags: ReplayFlags,
) -> Result<(), String> {
    let mut file = match &itch_out {
        Some(path) => Some(std::io::BufWriter::new(
            std::fs::File::create(path)
                .map_err(|e| format!("cannot create {}: {e}", path.display()))?,
        )),
        None => None,
    };
    let bar = indicatif::ProgressBar::new_spinner();
    let out = file.as_mut().map(|f| f as &mut dyn std::io::Write);
    let options = bourse::replay::ReplayOptions {
        itch_out: out,
        no_digest: flags.no_digest,
        from_snapshot: flags.from_snapshot,
        write_snapshots: flags
            .write_snapshots_every
            .map(|n| bourse::snapshot::Schedule::new(n, 0)),
    };
    let report = bourse::replay::replay_with(journal, options, |done| {
        bar.set_message(format!("{done} inputs"))
    })
    .map_err(|e| e.to_string())?;
    bar.finish_and_clear();
    if let Some(note) = &report.day_note {
        eprintln!("bourse replay: {note}");
    }
    if let Some(mut f) = file {
        std::io::Write::flush(&mut f).map_err(|e| format!("writing the ITCH file: {e}"))?;
    }
    if let Some(seq) = report.from_snapshot {
        println!("from the snapshot after record {seq}");
    } else if flags.from_snapshot {
        println!("no valid snapshot: full replay");
    }
    println!(
        "replayed {} inputs in {:.3} s: {:.0} inputs/s",
        report.applied,
        report.seconds,
        report.inputs_per_second()
    );
    if report.snapshots_written > 0 {
        println!(
            "wrote {} snapshots (largest {} bytes; encoding the state took at most {:.1} ms)",
            report.snapshots_written,
            report.snapshot_bytes_max,
            report.snapshot_encode_max.as_secs_f64() * 1e3
        );
    }
    for line in report.digest_lines() {
        println!("{line}");
    }
    Ok(())
}

fn admin_command(config: Option<PathBuf>, action: AdminAction) -> Result<(), String> {
    let config = load_config(config)?;
    let request = match action {
        AdminAction::Halt { symbol } => Request::Halt(symbol),
        AdminAction::Resume { symbol } => Request::Resume(symbol),
        AdminAction::EndOfDay => Request::EndOfDay,
        AdminAction::CancelAll { account, symbol } => Request::CancelAll { account, symbol },
        AdminAction::Block { account } => Request::Block(account),
        AdminAction::Unblock { account } => Request::Unblock(account),
        AdminAction::Status => Request::Status,
        AdminAction::Shutdown => Request::Shutdown,
    };
    let answer = admin::send_with_config(&config, &request, Duration::from_secs(5))?;
    println!("{answer}");
    if answer.starts_with("ok") {
        Ok(())
    } else {
        Err("the daemon refused the command".into())
    }
}
