//! The `bourse` command line.

use clap::{Parser, Subcommand};
use std::process::ExitCode;

#[derive(Parser)]
#[command(
    name = "bourse",
    version,
    about = "Exchange matching engine daemon (OUCH 4.2 in, ITCH 5.0 out)"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run a primary: order entry, sequencer and journal, engine, market data.
    Run {
        /// TOML configuration; without it the embedded default config is used.
        #[arg(long)]
        config: Option<std::path::PathBuf>,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Run { .. } => {
            eprintln!("bourse run: the daemon is not built yet (see README: status)");
            ExitCode::from(2)
        }
    }
}
