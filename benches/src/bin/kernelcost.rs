//! What this machine's kernel charges for the operations every end-to-end figure is made of:
//! a system call, a loopback TCP send and receive, a loopback UDP send, and a thread woken
//! by another (on the same core and across cores). The venue pays these per turn of its
//! event loop and the echo floor per message; on a VM they can be several times a bare
//! machine's, and they change from one VM to the next. `tools/bench/targets.sh` prints them
//! beside the targets so a sitting's figures can be judged against its machine.
//!
//! `cargo run --release -p bourse-benches --bin kernelcost` (a few seconds, no spinning).

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream, UdpSocket};
use std::os::unix::net::UnixStream;
use std::time::Instant;

/// Bytes per message: an OUCH Enter Order in its SoupBinTCP packet.
const MESSAGE_BYTES: usize = 52;

fn main() -> std::io::Result<()> {
    println!("kernelcost: ns per operation (load {})", load_average());
    syscall_ns();
    tcp_ns()?;
    udp_ns()?;
    wake_ns(false)?;
    wake_ns(true)?;
    Ok(())
}

fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}

/// The cheapest system call there is: entry and exit only.
fn syscall_ns() {
    const CALLS: u32 = 200_000;
    let started = Instant::now();
    for _ in 0..CALLS {
        // SAFETY: getppid has no arguments and cannot fail.
        std::hint::black_box(unsafe { libc::getppid() });
    }
    let ns = started.elapsed().as_nanos() as f64 / f64::from(CALLS);
    println!("system call (getppid)              {ns:>8.0}");
}

fn tcp_pair() -> std::io::Result<(TcpStream, TcpStream)> {
    let listener = TcpListener::bind("127.0.0.1:0")?;
    let client = TcpStream::connect(listener.local_addr()?)?;
    let (server, _) = listener.accept()?;
    client.set_nodelay(true)?;
    server.set_nodelay(true)?;
    Ok((client, server))
}

/// A send into a queue the receiver has not drained, then one that a receive drains at once
/// (which makes the receiver acknowledge: a transmit of its own).
fn tcp_ns() -> std::io::Result<()> {
    const ROUNDS: u32 = 20;
    const BURST: u32 = 1_000;
    let (mut client, mut server) = tcp_pair()?;
    let message = [0u8; MESSAGE_BYTES];
    let mut buf = vec![0u8; 64 << 10];
    let (mut send_ns, mut drain_ns) = (0u128, 0u128);
    for _ in 0..ROUNDS {
        let started = Instant::now();
        for _ in 0..BURST {
            client.write_all(&message)?;
        }
        let sent = Instant::now();
        let mut got = 0;
        while got < BURST as usize * MESSAGE_BYTES {
            got += server.read(&mut buf)?;
        }
        send_ns += (sent - started).as_nanos();
        drain_ns += sent.elapsed().as_nanos();
    }
    let n = f64::from(ROUNDS * BURST);
    println!(
        "tcp send, receiver behind            {:>8.0}   (its later reads: {:.0} a message)",
        send_ns as f64 / n,
        drain_ns as f64 / n
    );
    const PAIRS: u32 = 20_000;
    let (mut send_ns, mut recv_ns) = (0u128, 0u128);
    for _ in 0..PAIRS {
        let started = Instant::now();
        client.write_all(&message)?;
        let sent = Instant::now();
        let mut got = 0;
        while got < MESSAGE_BYTES {
            got += server.read(&mut buf)?;
        }
        send_ns += (sent - started).as_nanos();
        recv_ns += sent.elapsed().as_nanos();
    }
    print_send_receive(
        "tcp send, then the receive draining ",
        send_ns,
        recv_ns,
        PAIRS,
    );
    Ok(())
}

/// One line: the mean ns of a send and of the receive after it over `pairs`.
fn print_send_receive(label: &str, send_ns: u128, recv_ns: u128, pairs: u32) {
    let n = f64::from(pairs);
    println!(
        "{label} {:>8.0} + {:.0}",
        send_ns as f64 / n,
        recv_ns as f64 / n
    );
}

fn udp_ns() -> std::io::Result<()> {
    const PAIRS: u32 = 20_000;
    let receiver = UdpSocket::bind("127.0.0.1:0")?;
    let sender = UdpSocket::bind("127.0.0.1:0")?;
    sender.connect(receiver.local_addr()?)?;
    let message = [0u8; MESSAGE_BYTES];
    let mut buf = [0u8; 2048];
    let (mut send_ns, mut recv_ns) = (0u128, 0u128);
    for _ in 0..PAIRS {
        let started = Instant::now();
        sender.send(&message)?;
        let sent = Instant::now();
        receiver.recv(&mut buf)?;
        send_ns += (sent - started).as_nanos();
        recv_ns += sent.elapsed().as_nanos();
    }
    print_send_receive(
        "udp send, then its receive          ",
        send_ns,
        recv_ns,
        PAIRS,
    );
    Ok(())
}

/// A byte bounced between two threads that sleep in `read` between bounces: two wake-ups
/// and two sleeps a round trip. On one core each wake-up is a switch; across cores it wakes
/// (on a VM: interrupts) the other core.
fn wake_ns(one_core: bool) -> std::io::Result<()> {
    const ROUND_TRIPS: u32 = 20_000;
    let (mut near, mut far) = UnixStream::pair()?;
    let core = core_affinity::get_core_ids().and_then(|ids| ids.first().copied());
    let pin = move || {
        if one_core && let Some(core) = core {
            core_affinity::set_for_current(core);
        }
    };
    let echo = std::thread::spawn(move || -> std::io::Result<()> {
        pin();
        let mut byte = [0u8; 1];
        for _ in 0..ROUND_TRIPS {
            far.read_exact(&mut byte)?;
            far.write_all(&byte)?;
        }
        Ok(())
    });
    pin();
    let cpu_before_ns = process_cpu_ns();
    let started = Instant::now();
    let mut byte = [7u8; 1];
    for _ in 0..ROUND_TRIPS {
        near.write_all(&byte)?;
        near.read_exact(&mut byte)?;
    }
    let wall_ns = started.elapsed().as_nanos() as f64 / f64::from(ROUND_TRIPS);
    let cpu_ns = (process_cpu_ns() - cpu_before_ns) as f64 / f64::from(ROUND_TRIPS);
    echo.join().expect("echo thread")?;
    let label = if one_core { "one core" } else { "any cores" };
    println!("thread wake-up round trip, {label:<9} {wall_ns:>8.0}   (cpu {cpu_ns:.0})");
    Ok(())
}

/// User + system time of this process so far.
fn process_cpu_ns() -> u128 {
    // SAFETY: getrusage writes the struct it is given; zeroed is a valid initial value.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: a valid pointer to a rusage; RUSAGE_SELF cannot fail.
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut usage) };
    let micros = |t: libc::timeval| t.tv_sec as u128 * 1_000_000 + t.tv_usec as u128;
    (micros(usage.ru_utime) + micros(usage.ru_stime)) * 1_000
}
