//! Three members over real loopback TCP (the authenticated transport), each driven by its own
//! thread the way the daemon loop will drive it (monotonic clock → ticks, then messages, then
//! proposals, then poll, then the gate): a leader is elected, commits, is killed, and a
//! successor takes over within the default timings with every committed record kept.

use std::net::TcpListener;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crossbeam::channel::{self, Receiver, Sender};

use super::config::ClusterConfig;
use super::node::{ClusterNode, Polled, Role, tracing_logger};
use super::transport::Transport;
use crate::journal::{Durability, JournalConfig, JournalReader, NANOS_PER_DAY};
use crate::sequencer::record::KIND_OUCH;
use crate::types::Timestamp;

const SECRET: &str = "loopback cluster secret, 32 bytes";
const DAY_EPOCH_UNIX_NS: u64 = 20_400 * NANOS_PER_DAY;

/// What a member's loop publishes for the test to watch.
#[derive(Default)]
struct Shared {
    /// Term while the release gate is open, else 0.
    serving_term: AtomicU64,
    committed: AtomicU64,
    released: AtomicU64,
    /// Loop turns after a pause, still leading its old term, with the gate open.
    open_after_pause: AtomicU64,
    /// Loop turns after a pause before it stopped leading its old term.
    turns_after_pause: AtomicU64,
}

enum Command {
    Propose(u32),
    /// Stop the loop dead for this long (SIGSTOP), then go on.
    Pause(Duration),
}

struct Member {
    stop: Arc<AtomicBool>,
    shared: Arc<Shared>,
    commands: Sender<Command>,
    thread: Option<std::thread::JoinHandle<Result<(), String>>>,
    journal_dir: PathBuf,
}

fn cluster_config(id: u64, members: &[std::net::SocketAddr]) -> ClusterConfig {
    let text = format!(
        "id = {id}\nmembers = {:?}\nsecret = {SECRET:?}\n",
        members.iter().map(|m| m.to_string()).collect::<Vec<_>>()
    );
    toml::from_str(&text).expect("cluster section")
}

fn spawn_member(config: ClusterConfig, listener: TcpListener, root: &std::path::Path) -> Member {
    let stop = Arc::new(AtomicBool::new(false));
    let shared = Arc::new(Shared::default());
    let (commands, commands_rx) = channel::bounded(64);
    let journal_dir = root.join(format!("m{}/journal", config.id));
    let journal = JournalConfig {
        dir: journal_dir.clone(),
        segment_bytes: 1 << 20,
        max_payload_bytes: 4096,
        durability: Durability::Flush,
        create_dir: true,
    };
    let state_dir = config.state_dir(&journal_dir);
    let (stop_flag, shared_state) = (stop.clone(), shared.clone());
    let thread = std::thread::spawn(move || {
        run_member(
            config,
            listener,
            journal,
            state_dir,
            stop_flag,
            shared_state,
            commands_rx,
        )
    });
    Member {
        stop,
        shared,
        commands,
        thread: Some(thread),
        journal_dir,
    }
}

/// The loop a daemon runs, reduced to the cluster's part.
fn run_member(
    config: ClusterConfig,
    listener: TcpListener,
    journal: JournalConfig,
    state_dir: PathBuf,
    stop: Arc<AtomicBool>,
    shared: Arc<Shared>,
    commands: Receiver<Command>,
) -> Result<(), String> {
    let secret = config.read_secret()?;
    let mut transport =
        Transport::spawn(listener, config.transport_config(secret)).map_err(|e| e.to_string())?;
    let (mut node, _) = ClusterNode::open(
        config.node_config(config.id),
        journal,
        &state_dir,
        DAY_EPOCH_UNIX_NS,
        &tracing_logger(),
    )?;
    let tick = Duration::from_millis(config.tick_ms);
    let started = Instant::now();
    let mut ticks_done = 0u64;
    let mut polled = Polled::default();
    let mut pending = 0u32;
    let mut stamp = 0u64;
    let mut paused_term = None;
    while !stop.load(Ordering::Relaxed) {
        // 1. Every tick the monotonic clock says has passed, first.
        let due = (started.elapsed().as_nanos() / tick.as_nanos()) as u64;
        for _ in ticks_done..due {
            node.tick();
        }
        ticks_done = due;
        // 2. Messages.
        let next_tick = started + tick * (due as u32 + 1);
        let wait = next_tick.saturating_duration_since(Instant::now());
        if let Some(inbound) = transport.recv_timeout(wait.min(Duration::from_millis(2))) {
            let _ = node.step(inbound.message, inbound.day_epoch_unix_ns);
            while let Some(inbound) = transport.try_recv() {
                let _ = node.step(inbound.message, inbound.day_epoch_unix_ns);
            }
        }
        // 3. Input, on the leader.
        while let Ok(command) = commands.try_recv() {
            match command {
                Command::Propose(count) => pending += count,
                Command::Pause(pause) => {
                    if let Role::Leader { term } = node.role() {
                        paused_term = Some(term);
                    }
                    std::thread::sleep(pause);
                    // Resumed: the loop starts over with step 1 (count the missed ticks).
                    break;
                }
            }
        }
        if paused_term.is_some() && started.elapsed().as_nanos() / tick.as_nanos() > due as u128 {
            continue;
        }
        while pending > 0 && node.can_propose() {
            stamp += 1;
            let payload = stamp.to_be_bytes();
            node.propose(Timestamp(stamp), KIND_OUCH, &payload)
                .map_err(|e| e.to_string())?;
            pending -= 1;
        }
        // 4. Persist, send, apply.
        node.poll(&mut polled).map_err(|e| e.to_string())?;
        let epoch = node.day_epoch_unix_ns();
        for message in polled.messages.drain(..) {
            transport.send(message, epoch);
        }
        transport.flush();
        node.write_commit_hint().map_err(|e| e.to_string())?;
        // 5. Release.
        if let Some(old_term) = paused_term {
            if node.role() == (Role::Leader { term: old_term }) {
                shared.turns_after_pause.fetch_add(1, Ordering::Relaxed);
                if node.release_gate().is_some() {
                    shared.open_after_pause.fetch_add(1, Ordering::Relaxed);
                }
            } else {
                paused_term = None;
            }
        }
        match (node.release_gate(), node.role()) {
            (Some(seq), Role::Leader { term }) => {
                shared.serving_term.store(term, Ordering::Relaxed);
                shared.released.fetch_max(seq, Ordering::Relaxed);
            }
            _ => shared.serving_term.store(0, Ordering::Relaxed),
        }
        shared
            .committed
            .store(node.committed_seq(), Ordering::Relaxed);
        node.flush().map_err(|e| e.to_string())?;
    }
    Ok(())
}

fn wait_for(what: &str, timeout: Duration, mut done: impl FnMut() -> bool) -> Duration {
    let start = Instant::now();
    while !done() {
        assert!(start.elapsed() < timeout, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(2));
    }
    start.elapsed()
}

fn serving(members: &[Member]) -> Vec<(usize, u64)> {
    members
        .iter()
        .enumerate()
        .filter(|(_, m)| m.thread.is_some())
        .map(|(i, m)| (i, m.shared.serving_term.load(Ordering::Relaxed)))
        .filter(|&(_, term)| term != 0)
        .collect()
}

fn stop(member: &mut Member) {
    member.stop.store(true, Ordering::Relaxed);
    if let Some(thread) = member.thread.take() {
        thread.join().expect("member thread").expect("member loop");
    }
}

fn records(dir: &std::path::Path, upto: u64) -> Vec<(u64, u8, Vec<u8>)> {
    let mut reader = JournalReader::open(dir, 1).expect("reader");
    (1..=upto)
        .map(|seq| {
            let record = reader.next().expect("read").expect("record");
            assert_eq!(record.seq, seq);
            (record.timestamp.0, record.kind, record.payload.to_vec())
        })
        .collect()
}

#[test]
fn a_killed_leader_is_replaced_within_the_timeout_and_nothing_committed_is_lost() {
    let temp = tempfile::tempdir().expect("tempdir");
    let listeners: Vec<TcpListener> = (0..3)
        .map(|_| TcpListener::bind("127.0.0.1:0").expect("bind"))
        .collect();
    let addresses: Vec<_> = listeners
        .iter()
        .map(|l| l.local_addr().expect("addr"))
        .collect();
    let mut members: Vec<Member> = listeners
        .into_iter()
        .enumerate()
        .map(|(i, listener)| {
            spawn_member(
                cluster_config(i as u64 + 1, &addresses),
                listener,
                temp.path(),
            )
        })
        .collect();
    wait_for("a leader", Duration::from_secs(10), || {
        serving(&members).len() == 1
    });
    let (leader, _) = serving(&members)[0];
    members[leader]
        .commands
        .send(Command::Propose(200))
        .expect("send");
    wait_for("200 records released", Duration::from_secs(10), || {
        members[leader].shared.released.load(Ordering::Relaxed) >= 201
    });
    let released = members[leader].shared.released.load(Ordering::Relaxed);
    // Kill the leader (its threads and sockets go away at once).
    stop(&mut members[leader]);
    let takeover = wait_for("a successor", Duration::from_secs(5), || {
        serving(&members).len() == 1
    });
    let (successor, term) = serving(&members)[0];
    assert_ne!(successor, leader);
    eprintln!(
        "takeover after the leader was killed: {} ms (term {term})",
        takeover.as_millis()
    );
    assert!(
        takeover < Duration::from_millis(1_500),
        "takeover took {takeover:?}"
    );
    members[successor]
        .commands
        .send(Command::Propose(50))
        .expect("send");
    wait_for("50 more released", Duration::from_secs(10), || {
        members[successor].shared.released.load(Ordering::Relaxed) >= released + 51
    });
    wait_for(
        "the other member commits them",
        Duration::from_secs(10),
        || {
            members
                .iter()
                .filter(|m| m.thread.is_some())
                .all(|m| m.shared.committed.load(Ordering::Relaxed) >= released + 51)
        },
    );
    let committed = members[successor].shared.committed.load(Ordering::Relaxed);
    for member in members.iter_mut() {
        stop(member);
    }
    // Every member's journal holds the same committed records; the old leader's holds every
    // record it released.
    let survivor = records(&members[successor].journal_dir, committed);
    for (i, member) in members.iter().enumerate() {
        let upto = if i == leader { released } else { committed };
        assert_eq!(
            records(&member.journal_dir, upto),
            survivor[..upto as usize]
        );
    }
    let inputs = survivor.iter().filter(|r| r.1 == KIND_OUCH).count();
    assert_eq!(inputs, 250, "every proposed input committed once");
}

/// A leader stopped dead for 2 s (as by SIGSTOP) while the others elect a successor: once it
/// resumes it releases nothing, and it steps down. Here the loop's order does it: the missed
/// ticks come first, and raft's check_quorum deposes the leader during them, so this test
/// passes even with the lease disabled (tried: `Fencing::LeaderOnly` passes too). The lease is
/// what the simulation shows necessary: a leader cut off (by a partition, lost messages or a
/// pause) believes it leads until its check_quorum runs, up to an election timeout after the
/// others elected a successor (seed 113 in `sim.rs` fails without the lease).
#[test]
fn a_paused_leader_releases_nothing_when_it_resumes() {
    let temp = tempfile::tempdir().expect("tempdir");
    let listeners: Vec<TcpListener> = (0..3)
        .map(|_| TcpListener::bind("127.0.0.1:0").expect("bind"))
        .collect();
    let addresses: Vec<_> = listeners
        .iter()
        .map(|l| l.local_addr().expect("addr"))
        .collect();
    let mut members: Vec<Member> = listeners
        .into_iter()
        .enumerate()
        .map(|(i, listener)| {
            spawn_member(
                cluster_config(i as u64 + 1, &addresses),
                listener,
                temp.path(),
            )
        })
        .collect();
    wait_for("a leader", Duration::from_secs(10), || {
        serving(&members).len() == 1
    });
    let (leader, old_term) = serving(&members)[0];
    members[leader]
        .commands
        .send(Command::Propose(20))
        .expect("send");
    wait_for("20 released", Duration::from_secs(10), || {
        members[leader].shared.released.load(Ordering::Relaxed) >= 21
    });
    members[leader]
        .commands
        .send(Command::Pause(Duration::from_secs(2)))
        .expect("send");
    wait_for("a successor", Duration::from_secs(5), || {
        serving(&members)
            .iter()
            .any(|&(i, term)| i != leader && term > old_term)
    });
    // Wait for the old leader to resume and notice.
    std::thread::sleep(Duration::from_millis(2_500));
    let shared = &members[leader].shared;
    assert_eq!(shared.open_after_pause.load(Ordering::Relaxed), 0);
    assert_eq!(
        shared.serving_term.load(Ordering::Relaxed),
        0,
        "the old leader stepped down"
    );
    let current = serving(&members);
    assert_eq!(current.len(), 1, "{current:?}");
    eprintln!(
        "old leader: {} loop turns after resuming before it learned it was deposed, gate never open",
        shared.turns_after_pause.load(Ordering::Relaxed)
    );
    for member in members.iter_mut() {
        stop(member);
    }
}
