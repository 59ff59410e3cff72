//! bourse-echo: plain TCP echo server and open-loop client, the physical floor the venue's
//! wire-to-wire latency is compared against (BENCHMARKS.md "End to end").

use bourse_tools::echo::{self, ClientOptions, ServerMode};
use bourse_tools::latency::{self, Pace};
use clap::{Parser, Subcommand};
use std::net::{SocketAddr, TcpListener};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

#[derive(Parser)]
#[command(
    name = "bourse-echo",
    about = "TCP echo server and open-loop echo client (latency floor)"
)]
struct Cli {
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Echo every byte back; prints "listening echo=ADDR".
    Server {
        #[arg(long, default_value = "127.0.0.1:15900")]
        listen: SocketAddr,
        #[arg(long, value_enum, default_value_t = ServerMode::Blocking)]
        mode: ServerMode,
    },
    /// Send fixed-size messages open loop and measure each round trip.
    Client {
        #[arg(long, default_value = "127.0.0.1:15900")]
        connect: SocketAddr,
        #[arg(long, default_value_t = 10_000)]
        rate: u64,
        #[arg(long, default_value_t = 10.0)]
        duration: f64,
        /// Bytes per message (52 = an OUCH Enter Order in its SoupBinTCP packet).
        #[arg(long, default_value_t = 52)]
        size: usize,
        #[arg(long, value_enum, default_value_t = Pace::Sleep)]
        pace: Pace,
        /// Busy-poll the socket instead of sleeping in epoll.
        #[arg(long)]
        busy_poll: bool,
        /// Spread the messages over this many connections (message i on connection i % N),
        /// as the load generator spreads orders over its sessions (at most 64).
        #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..=64))]
        connections: u16,
        /// Write the full percentile distribution here.
        #[arg(long)]
        hist: Option<PathBuf>,
    },
}

fn main() -> ExitCode {
    let stop = Arc::new(AtomicBool::new(false));
    for signal in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        if let Err(e) = signal_hook::flag::register(signal, stop.clone()) {
            eprintln!("bourse-echo: cannot handle signals: {e}");
            return ExitCode::from(2);
        }
    }
    let result = match Cli::parse().command {
        Cmd::Server { listen, mode } => TcpListener::bind(listen)
            .map_err(|e| format!("cannot listen on {listen}: {e}"))
            .and_then(|listener| {
                let addr = listener.local_addr().map_err(|e| e.to_string())?;
                println!("listening echo={addr}");
                echo::serve(listener, mode, stop).map_err(|e| e.to_string())
            }),
        Cmd::Client {
            connect,
            rate,
            duration,
            size,
            pace,
            busy_poll,
            connections,
            hist,
        } => {
            let options = ClientOptions {
                server: connect,
                rate,
                duration: Duration::from_secs_f64(duration),
                size,
                pace,
                busy_poll,
                connections: usize::from(connections),
            };
            echo::run_client(&options, stop).and_then(|report| {
                print!("{}", report.summary());
                if let Some(path) = hist {
                    latency::write_distribution(&path, &report.series())
                        .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
                }
                Ok(())
            })
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("bourse-echo: {e}");
            ExitCode::FAILURE
        }
    }
}
