//! bourse-feed: subscribe to the venue's ITCH 5.0 / MoldUDP64 feed, rebuild every book, show a
//! live ticker, check the stream (`--check`), record it as BinaryFILE (`--record`).

use bourse::config::Config;
use bourse_tools::feed::{self, Feed, FeedOptions};
use clap::Parser;
use std::io::{IsTerminal, Write};
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

#[derive(Parser)]
#[command(
    name = "bourse-feed",
    about = "ITCH 5.0 feed subscriber: gap filling, GLIMPSE start, book rebuild, ticker, --check, --record"
)]
struct Cli {
    /// The daemon's TOML config: group, interface, re-request and snapshot addresses come
    /// from its [feed] section (default: the embedded default config).
    #[arg(long)]
    config: Option<PathBuf>,
    /// Multicast group:port (default: feed.group).
    #[arg(long)]
    group: Option<SocketAddrV4>,
    /// Interface address to join on (default: feed.interface). Always pinned.
    #[arg(long)]
    interface: Option<Ipv4Addr>,
    /// Re-request server (default: feed.rerequest); repeat it for a cluster's members, which
    /// are tried in turn (only the leader answers).
    #[arg(long)]
    rerequest: Vec<SocketAddr>,
    /// Never re-request: a gap is a violation.
    #[arg(long, conflicts_with = "rerequest")]
    no_rerequest: bool,
    /// Milliseconds one re-request waits for its answer (three tries).
    #[arg(long, default_value_t = 500)]
    rerequest_timeout_ms: u64,
    /// Start from a GLIMPSE snapshot instead of message 1.
    #[arg(long)]
    glimpse: bool,
    /// GLIMPSE address (default: feed.snapshot).
    #[arg(long)]
    snapshot: Option<SocketAddr>,
    /// GLIMPSE username (default: the config's first account).
    #[arg(long)]
    user: Option<String>,
    #[arg(long)]
    password: Option<String>,
    /// Check mode: verify continuity and book invariants, no ticker; exit 1 on the first
    /// violation, 0 at End of Session (or --duration) if all was well.
    #[arg(long)]
    check: bool,
    /// Write every message, in sequence order, as a BinaryFILE (2-byte length + message).
    /// With --glimpse the snapshot's messages come first.
    #[arg(long)]
    record: Option<PathBuf>,
    /// Stop after this many seconds (default: at End of Session or Ctrl-C).
    #[arg(long)]
    duration: Option<f64>,
    /// Symbol whose depth and trades the ticker shows (default: the config's first symbol).
    #[arg(long)]
    symbol: Option<String>,
    /// Price levels shown per side.
    #[arg(long, default_value_t = 10)]
    depth: usize,
    /// Ticker refresh interval.
    #[arg(long, default_value_t = 500)]
    interval_ms: u64,
    /// Show the ticker in --check mode too.
    #[arg(long)]
    ticker: bool,
}

fn main() -> ExitCode {
    match run(Cli::parse()) {
        Ok(code) => code,
        Err(message) => {
            eprintln!("bourse-feed: {message}");
            ExitCode::from(2)
        }
    }
}

fn run(cli: Cli) -> Result<ExitCode, String> {
    let config = match &cli.config {
        Some(path) => Config::load(path).map_err(|e| e.to_string())?,
        None => Config::embedded_default(),
    };
    let group = match cli.group {
        Some(g) => g,
        None => match config.feed.group {
            SocketAddr::V4(g) => g,
            other => return Err(format!("feed.group {other} is not IPv4")),
        },
    };
    if !group.ip().is_multicast() {
        return Err(format!("{group} is not a multicast group (224.0.0.0/4)"));
    }
    // Only a venue's own config says which symbols it trades.
    if let Some(symbol) = &cli.symbol
        && cli.config.is_some()
        && !config.symbols.iter().any(|s| &s.symbol == symbol)
    {
        let known: Vec<&str> = config.symbols.iter().map(|s| s.symbol.as_str()).collect();
        return Err(format!(
            "--symbol {symbol} is not in the config (its symbols: {}); give the venue's config with --config",
            known.join(", ")
        ));
    }
    let glimpse = if cli.glimpse {
        let first = config.accounts.first();
        let user = cli
            .user
            .clone()
            .or_else(|| first.map(|a| a.username.clone()))
            .ok_or("--glimpse needs --user (the config has no accounts)")?;
        let password = cli
            .password
            .clone()
            .or_else(|| first.map(|a| a.password.clone()))
            .ok_or("--glimpse needs --password")?;
        Some((cli.snapshot.unwrap_or(config.feed.snapshot), user, password))
    } else {
        None
    };
    let options = FeedOptions {
        group,
        interface: cli.interface.unwrap_or(config.feed.interface),
        rerequest: if cli.no_rerequest {
            Vec::new()
        } else if cli.rerequest.is_empty() {
            vec![config.feed.rerequest]
        } else {
            cli.rerequest.clone()
        },
        rerequest_timeout: Duration::from_millis(cli.rerequest_timeout_ms.max(1)),
        glimpse,
        check: cli.check,
        duration: cli.duration.map(Duration::from_secs_f64),
    };
    let record: Option<Box<dyn Write>> = match &cli.record {
        Some(path) => Some(Box::new(std::io::BufWriter::new(
            std::fs::File::create(path)
                .map_err(|e| format!("cannot create {}: {e}", path.display()))?,
        ))),
        None => None,
    };
    let stop = Arc::new(AtomicBool::new(false));
    signal_hook::flag::register(signal_hook::consts::SIGINT, stop.clone())
        .map_err(|e| format!("cannot handle Ctrl-C: {e}"))?;
    signal_hook::flag::register(signal_hook::consts::SIGTERM, stop.clone())
        .map_err(|e| format!("cannot handle SIGTERM: {e}"))?;
    let check = cli.check;
    let mut feed = match Feed::start(options, record) {
        Ok(feed) => feed,
        Err(e) if check => {
            println!("check FAILED: {e}");
            return Ok(ExitCode::from(1));
        }
        Err(e) => return Err(e),
    };
    let symbol = cli
        .symbol
        .clone()
        .or_else(|| config.symbols.first().map(|s| s.symbol.clone()));
    let show_ticker = !check || cli.ticker;
    let tty = std::io::stdout().is_terminal();
    let depth = cli.depth;
    let draw = |feed: &Feed| {
        let frame = feed::render(feed, symbol.as_deref(), depth);
        let mut out = std::io::stdout().lock();
        if tty {
            // Home and clear: redraw in place.
            let _ = write!(out, "\x1b[H\x1b[2J{frame}");
        } else {
            let _ = writeln!(out, "{frame}");
        }
        let _ = out.flush();
    };
    let result = feed.run(&stop, Duration::from_millis(cli.interval_ms.max(10)), |f| {
        if show_ticker {
            draw(f);
        }
    });
    if show_ticker {
        draw(&feed);
    }
    match result {
        Err(e) => {
            println!("{}", feed.status_line());
            if check {
                println!("check FAILED: {e}");
                Ok(ExitCode::from(1))
            } else {
                Err(e)
            }
        }
        Ok(()) => {
            let books: Vec<String> = feed
                .books
                .books
                .iter()
                .flatten()
                .map(|b| format!("{} {}x{}", b.symbol, b.bids.len(), b.asks.len()))
                .collect();
            println!("{}", feed.status_line());
            println!(
                "books (bid x ask levels): {}; live orders {}; {}",
                books.join(", "),
                feed.books.live_orders(),
                if feed.ended {
                    "End of Session"
                } else {
                    "stopped before End of Session"
                }
            );
            if check {
                if feed.stats.packets == 0 && feed.stats.snapshot_messages == 0 {
                    // Silence proves nothing: wrong group or interface, or no venue.
                    println!("check FAILED: no packet received from {group}");
                    Ok(ExitCode::from(1))
                } else if feed.violations.is_empty() {
                    println!(
                        "check ok: messages {}..{} in order, every book consistent",
                        feed.stats.first_seq,
                        feed.next_seq - 1
                    );
                    Ok(ExitCode::SUCCESS)
                } else {
                    println!("check FAILED: {}", feed.violations[0]);
                    Ok(ExitCode::from(1))
                }
            } else {
                for v in feed.violations.iter().take(10) {
                    println!("violation: {v}");
                }
                Ok(ExitCode::SUCCESS)
            }
        }
    }
}
