//! bourse-client: a terminal order-entry client. Type commands (or pipe a script into stdin);
//! replies and fills are printed as they arrive. `help` lists the commands
//! (`bourse_tools::script`).

use bourse::client::{OuchClient, Received};
use bourse::config::Config;
use bourse_tools::script::{self, Command, TokenSource};
use bourse_tools::show;
use clap::Parser;
use std::io::{BufRead, IsTerminal, Write};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::mpsc;
use std::time::{Duration, Instant};

#[derive(Parser)]
#[command(
    name = "bourse-client",
    about = "Terminal OUCH 4.2 order entry: enter, cancel, replace; replies and fills as they arrive",
    after_help = script::HELP
)]
struct Cli {
    /// The daemon's TOML config (gateway address, default account); default: embedded.
    #[arg(long)]
    config: Option<PathBuf>,
    /// Gateway address (default: gateway.listen).
    #[arg(long)]
    gateway: Option<SocketAddr>,
    /// Username (default: the config's first account).
    #[arg(long)]
    user: Option<String>,
    #[arg(long)]
    password: Option<String>,
    /// SoupBinTCP sequence number to start from: 0 = only new messages, 1 = the whole day.
    #[arg(long, default_value_t = 0)]
    sequence: u64,
    /// At end of input: wait this long for trailing replies before logging out (ms).
    #[arg(long, default_value_t = 300)]
    linger_ms: u64,
}

fn main() -> ExitCode {
    match run(Cli::parse()) {
        Ok(code) => code,
        Err(message) => {
            eprintln!("bourse-client: {message}");
            ExitCode::from(2)
        }
    }
}

fn say(line: &str) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
}

fn run(cli: Cli) -> Result<ExitCode, String> {
    let config = match &cli.config {
        Some(path) => Config::load(path).map_err(|e| e.to_string())?,
        None => Config::embedded_default(),
    };
    let first = config.accounts.first();
    let user = cli
        .user
        .clone()
        .or_else(|| first.map(|a| a.username.clone()))
        .ok_or("--user is needed (the config has no accounts)")?;
    let password = cli
        .password
        .clone()
        .or_else(|| {
            config
                .accounts
                .iter()
                .find(|a| a.username.eq_ignore_ascii_case(&user))
                .map(|a| a.password.clone())
        })
        .ok_or("--password is needed")?;
    let gateway = cli.gateway.unwrap_or(config.gateway.listen);
    let mut client = OuchClient::login(
        gateway,
        &user,
        &password,
        "",
        cli.sequence,
        Duration::from_secs(5),
    )
    .map_err(|e| format!("login {user} at {gateway}: {e}"))?;
    say(&format!(
        "logged in {user} at {gateway}, session {}, next sequence {}",
        client.session.to_string().trim(),
        client.next_seq
    ));
    let interactive = std::io::stdin().is_terminal();
    if interactive {
        say("type help for the commands; replies appear as they arrive");
    }
    let (lines_tx, lines) = mpsc::channel::<String>();
    std::thread::spawn(move || {
        for line in std::io::stdin().lock().lines() {
            let Ok(line) = line else { break };
            if lines_tx.send(line).is_err() {
                break;
            }
        }
    });
    let mut tokens = TokenSource::from_clock();
    let mut replies: u64 = 0;
    // Replies counted when the last message was sent: `wait N` waits for N replies after it.
    let mut replies_at_send: u64 = 0;
    // (target reply count, deadline, count asked) of a pending `wait`.
    let mut waiting: Option<(u64, Instant, u64)> = None;
    let mut input_done = false;
    let mut last_reply = Instant::now();
    let mut failed = false;
    loop {
        // Replies first: print everything that has arrived.
        match client.recv(Duration::from_millis(20)) {
            Ok(Some(Received::Sequenced(seq, m))) => {
                replies += 1;
                last_reply = Instant::now();
                say(&format!("< {seq:>4} {}", show::outbound(&m)));
                continue;
            }
            Ok(Some(Received::Undecodable(seq, bytes))) => {
                replies += 1;
                say(&format!("< {seq:>4} undecodable {bytes:?}"));
                continue;
            }
            Ok(Some(Received::Heartbeat)) => {}
            Ok(Some(Received::EndOfSession)) => {
                say("< End of Session");
                return Ok(exit(failed));
            }
            Ok(Some(Received::Closed)) => {
                say("< connection closed by the venue");
                return Ok(ExitCode::from(1));
            }
            Ok(None) => {}
            Err(e) => return Err(format!("receive: {e}")),
        }
        client
            .heartbeat_if_due()
            .map_err(|e| format!("heartbeat: {e}"))?;
        if let Some((target, deadline, asked)) = waiting {
            if replies >= target {
                waiting = None;
            } else if Instant::now() >= deadline {
                say(&format!(
                    "! wait {asked}: timed out with {} of them",
                    asked - (target - replies)
                ));
                failed = true;
                waiting = None;
            } else {
                continue;
            }
        }
        if input_done {
            if last_reply.elapsed() >= Duration::from_millis(cli.linger_ms) {
                break;
            }
            continue;
        }
        let line = match lines.try_recv() {
            Ok(line) => line,
            Err(mpsc::TryRecvError::Empty) => continue,
            Err(mpsc::TryRecvError::Disconnected) => {
                input_done = true;
                last_reply = Instant::now().max(last_reply);
                continue;
            }
        };
        match script::parse(&line, &mut tokens) {
            Ok(Command::Send(m)) => {
                client.send(&m).map_err(|e| format!("send: {e}"))?;
                replies_at_send = replies;
                say(&format!(">      {}", show::inbound(&m)));
            }
            Ok(Command::Wait { count, timeout_ms }) => {
                waiting = Some((
                    replies_at_send + count,
                    Instant::now() + Duration::from_millis(timeout_ms),
                    count,
                ));
            }
            Ok(Command::Sleep(ms)) => std::thread::sleep(Duration::from_millis(ms.min(60_000))),
            Ok(Command::Help) => say(script::HELP),
            Ok(Command::Quit) => {
                input_done = true;
                last_reply = Instant::now();
            }
            Ok(Command::Nothing) => {}
            Err(e) => {
                say(&format!("! {e}"));
                if !interactive {
                    failed = true;
                }
            }
        }
    }
    let _ = client.logout();
    say(&format!("logged out after {replies} replies"));
    Ok(exit(failed))
}

fn exit(failed: bool) -> ExitCode {
    if failed {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    }
}
