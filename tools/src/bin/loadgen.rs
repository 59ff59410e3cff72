//! bourse-loadgen: drive a running `bourse run` with a seeded workload over N OUCH sessions and
//! report wire-to-wire latency (see `bourse_tools::loadgen`).

use bourse::config::Config;
use bourse::workload::Workload;
use bourse_tools::latency::{self, Pace};
use bourse_tools::loadgen::{self, Options, Progress};
use clap::{Parser, ValueEnum};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

#[derive(Clone, Copy, Debug, ValueEnum)]
enum Mix {
    /// Limits, cancels, reduces, replaces, IOC and market orders.
    Realistic,
    /// exchange-core's 9% GTC, 3% IOC, 6% cancel, 82% move.
    ExchangeCore,
    /// QuantCup 2011 shaped limit + cancel stream.
    Quantcup,
}

#[derive(Parser)]
#[command(
    name = "bourse-loadgen",
    about = "Load generator: N OUCH sessions (one per account), seeded workload, open or closed loop, \
             latency percentiles per message type"
)]
struct Cli {
    /// The daemon's TOML config: gateway address, accounts and the symbol's tick come from it.
    #[arg(long)]
    config: Option<PathBuf>,
    /// Gateway address (default: the config's gateway.listen).
    #[arg(long)]
    gateway: Option<SocketAddr>,
    /// Sessions to open: the first N accounts of the config (default: all).
    #[arg(long)]
    accounts: Option<usize>,
    #[arg(long, default_value = "AAPL")]
    symbol: String,
    /// Open loop: orders per second (every op counts: enter, cancel, replace).
    #[arg(long, default_value_t = 10_000)]
    rate: u64,
    /// Closed loop instead: at most this many Enter Orders awaiting their answer (at least 1).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
    window: Option<u32>,
    /// Seconds of sending.
    #[arg(long, default_value_t = 10.0)]
    duration: f64,
    /// After sending, wait at most this long for the last answers (ms).
    #[arg(long, default_value_t = 2_000)]
    drain_ms: u64,
    #[arg(long, value_enum, default_value_t = Mix::Realistic)]
    workload: Mix,
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Resting orders the workload keeps near (must fit the config's limits).
    #[arg(long, default_value_t = 2_000)]
    resting: u32,
    /// Four letters/digits that start every token (tokens are unique per account and day;
    /// default: from the clock, so two runs on one day differ).
    #[arg(long)]
    run_tag: Option<String>,
    /// How the sender waits for each order's intended time.
    #[arg(long, value_enum, default_value_t = Pace::Sleep)]
    pace: Pace,
    /// The receiver busy-polls its sockets instead of sleeping in epoll.
    #[arg(long)]
    busy_poll: bool,
    /// Write the full percentile distribution (HdrHistogram text) here.
    #[arg(long)]
    hist: Option<PathBuf>,
    /// Render the percentile distribution as an SVG plot here.
    #[arg(long)]
    plot: Option<PathBuf>,
    /// No progress bar.
    #[arg(long)]
    quiet: bool,
}

fn main() -> ExitCode {
    match run(Cli::parse()) {
        Ok(code) => code,
        Err(message) => {
            eprintln!("bourse-loadgen: {message}");
            ExitCode::from(2)
        }
    }
}

fn run_tag(cli: &Cli) -> Result<[u8; 4], String> {
    match &cli.run_tag {
        None => Ok(loadgen::default_run_tag()),
        Some(t) if t.len() == 4 && t.bytes().all(|b| b.is_ascii_alphanumeric()) => {
            let mut tag = [0u8; 4];
            tag.copy_from_slice(t.as_bytes());
            Ok(tag)
        }
        Some(t) => Err(format!("--run-tag {t:?}: four letters or digits")),
    }
}

fn run(cli: Cli) -> Result<ExitCode, String> {
    let config = match &cli.config {
        Some(path) => Config::load(path).map_err(|e| e.to_string())?,
        None => Config::embedded_default(),
    };
    let symbol = config
        .symbols
        .iter()
        .find(|s| s.symbol == cli.symbol)
        .ok_or_else(|| format!("symbol {} is not in the config", cli.symbol))?;
    let count = cli.accounts.unwrap_or(config.accounts.len());
    if count == 0 || count > config.accounts.len() {
        return Err(format!(
            "--accounts {count}: the config has {} accounts",
            config.accounts.len()
        ));
    }
    if cli.duration <= 0.0 || cli.rate == 0 {
        return Err("--duration and --rate must be positive".into());
    }
    // Output files are opened (created) now: a path that cannot be written fails before the
    // run, not after it.
    for path in [&cli.hist, &cli.plot].into_iter().flatten() {
        std::fs::File::create(path).map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    }
    let options = Options {
        gateway: cli.gateway.unwrap_or(config.gateway.listen),
        accounts: config.accounts[..count]
            .iter()
            .map(|a| (a.username.clone(), a.password.clone()))
            .collect(),
        symbol: symbol.symbol.clone(),
        tick: symbol.tick,
        workload: match cli.workload {
            Mix::Realistic => Workload::Realistic,
            Mix::ExchangeCore => Workload::ExchangeCore,
            Mix::Quantcup => Workload::QuantCup,
        },
        seed: cli.seed,
        resting: cli.resting,
        rate: cli.rate,
        window: cli.window,
        duration: Duration::from_secs_f64(cli.duration),
        drain: Duration::from_millis(cli.drain_ms),
        run_tag: run_tag(&cli)?,
        pace: cli.pace,
        busy_poll: cli.busy_poll,
    };
    let stop = Arc::new(AtomicBool::new(false));
    // First Ctrl-C: stop sending and report what was measured; a second one exits at once.
    signal_hook::flag::register_conditional_shutdown(
        signal_hook::consts::SIGINT,
        130,
        stop.clone(),
    )
    .map_err(|e| format!("cannot handle Ctrl-C: {e}"))?;
    signal_hook::flag::register(signal_hook::consts::SIGINT, stop.clone())
        .map_err(|e| format!("cannot handle Ctrl-C: {e}"))?;
    signal_hook::flag::register(signal_hook::consts::SIGTERM, stop.clone())
        .map_err(|e| format!("cannot handle SIGTERM: {e}"))?;
    let progress = Arc::new(Progress::default());
    let worker = {
        let (options, stop, progress) = (options.clone(), stop.clone(), progress.clone());
        std::thread::spawn(move || loadgen::run(&options, stop, progress))
    };
    let bar = if cli.quiet {
        indicatif::ProgressBar::hidden()
    } else {
        indicatif::ProgressBar::new(0)
    };
    bar.set_style(
        indicatif::ProgressStyle::with_template(
            "{elapsed_precise} [{bar:30}] {pos}/{len} ops {per_sec} {msg}",
        )
        .expect("valid template")
        .progress_chars("=> "),
    );
    let mut announced = false;
    while !worker.is_finished() {
        if !announced && progress.sent.load(Ordering::Relaxed) > 0 {
            // Scripts running several generators at once wait for this line before they
            // measure (making the orders takes ~0.2 s per million).
            announced = true;
            bar.suspend(|| eprintln!("bourse-loadgen: sending"));
        }
        bar.set_length(progress.total.load(Ordering::Relaxed));
        bar.set_position(progress.sent.load(Ordering::Relaxed));
        bar.set_message(format!(
            "answered {} errors {}",
            progress.answered.load(Ordering::Relaxed),
            progress.errors.load(Ordering::Relaxed)
        ));
        std::thread::sleep(Duration::from_millis(100));
    }
    bar.finish_and_clear();
    let report = worker.join().map_err(|_| "the load generator panicked")??;
    print!("{}", report.summary());
    let series = report.series();
    if let Some(path) = &cli.hist {
        latency::write_distribution(path, &series)
            .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
        println!("percentile distribution: {}", path.display());
    }
    if let Some(path) = &cli.plot {
        let title = match options.window {
            None => format!(
                "bourse wire-to-wire, open loop {} ops/s ({:.0} achieved)",
                options.rate,
                report.achieved_rate()
            ),
            Some(w) => format!("bourse wire-to-wire, closed loop window {w}"),
        };
        latency::write_plot(path, &title, &series)
            .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
        println!("plot: {}", path.display());
    }
    Ok(if report.error_count() == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}
