//! The physical floor (binary `bourse-echo`): a plain TCP echo server and an open-loop echo
//! client that measures round trips exactly the way the load generator measures the venue
//! (same pacing, same non-blocking writes, same mio receive loop, same histograms), so the
//! difference between the two is what the venue adds.

use crate::latency::{self, Clock, Pace};
use hdrhistogram::Histogram;
use mio::{Events, Interest, Poll, Token};
use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

/// How the server waits for bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum ServerMode {
    /// Blocking reads: the thread sleeps in the kernel until data arrives.
    Blocking,
    /// Non-blocking reads in a tight loop: burns a core per connection, lowest latency.
    Busy,
    /// One thread for every connection, an edge-triggered poll: each turn reads every
    /// readable connection, then writes each one's bytes back, as the venue's event loop
    /// does (a diagnostic beside the floor: what one thread over N sockets costs).
    Loop,
}

/// Serve echo on `listener` until `stop`: one thread per connection (or one in all).
pub fn serve(listener: TcpListener, mode: ServerMode, stop: Arc<AtomicBool>) -> io::Result<()> {
    listener.set_nonblocking(true)?;
    if mode == ServerMode::Loop {
        return serve_loop(listener, &stop);
    }
    while !stop.load(Ordering::Relaxed) {
        match listener.accept() {
            Ok((stream, _)) => {
                let stop = stop.clone();
                std::thread::spawn(move || {
                    let _ = echo_connection(stream, mode, &stop);
                });
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                std::thread::sleep(Duration::from_millis(20))
            }
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Connections one looping server takes (a diagnostic tool's bound).
const LOOP_CONNECTIONS_MAX: usize = 64;

fn serve_loop(listener: TcpListener, stop: &AtomicBool) -> io::Result<()> {
    const LISTENER: Token = Token(usize::MAX);
    let mut poll = Poll::new()?;
    let mut listener = mio::net::TcpListener::from_std(listener);
    poll.registry()
        .register(&mut listener, LISTENER, Interest::READABLE)?;
    let mut conns: Vec<(mio::net::TcpStream, Vec<u8>)> = Vec::new();
    let mut events = Events::with_capacity(LOOP_CONNECTIONS_MAX + 1);
    let mut readable = Vec::with_capacity(LOOP_CONNECTIONS_MAX);
    while !stop.load(Ordering::Relaxed) {
        match poll.poll(&mut events, Some(Duration::from_millis(200))) {
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            result => result?,
        }
        readable.clear();
        for event in &events {
            if event.token() == LISTENER {
                while let Ok((stream, _)) = listener.accept() {
                    if conns.len() == LOOP_CONNECTIONS_MAX {
                        continue; // dropped: closed
                    }
                    let mut stream = stream;
                    stream.set_nodelay(true)?;
                    let token = Token(conns.len());
                    poll.registry()
                        .register(&mut stream, token, Interest::READABLE)?;
                    conns.push((stream, Vec::with_capacity(64 << 10)));
                }
            } else {
                readable.push(event.token().0);
            }
        }
        // Read every readable connection, then write each one back: one read and one write
        // per connection per turn, as the venue's loop.
        for &index in &readable {
            let (stream, buf) = &mut conns[index];
            read_available(stream, buf)?;
        }
        for &index in &readable {
            let (stream, buf) = &mut conns[index];
            write_all_spin(stream, buf)?;
            buf.clear();
        }
    }
    Ok(())
}

/// Read what the socket holds into `buf` (at most 16 MiB a turn).
fn read_available(stream: &mut mio::net::TcpStream, buf: &mut Vec<u8>) -> io::Result<()> {
    let mut chunk = [0u8; 16 << 10];
    for _ in 0..1024 {
        match stream.read(&mut chunk) {
            Ok(0) => return Ok(()),
            Ok(n) => {
                buf.extend_from_slice(&chunk[..n]);
                if n < chunk.len() {
                    return Ok(()); // drained (edge-triggered: more raises a new event)
                }
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(()),
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

fn echo_connection(mut stream: TcpStream, mode: ServerMode, stop: &AtomicBool) -> io::Result<()> {
    stream.set_nodelay(true)?;
    stream.set_nonblocking(false)?;
    match mode {
        ServerMode::Blocking | ServerMode::Loop => {
            stream.set_read_timeout(Some(Duration::from_millis(200)))?
        }
        ServerMode::Busy => stream.set_nonblocking(true)?,
    }
    let mut buf = vec![0u8; 64 << 10];
    while !stop.load(Ordering::Relaxed) {
        match stream.read(&mut buf) {
            Ok(0) => return Ok(()),
            Ok(n) => write_all_spin(&mut stream, &buf[..n])?,
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock
                        | io::ErrorKind::TimedOut
                        | io::ErrorKind::Interrupted
                ) =>
            {
                if mode == ServerMode::Busy {
                    std::hint::spin_loop();
                }
            }
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

fn write_all_spin(stream: &mut impl Write, mut bytes: &[u8]) -> io::Result<()> {
    while !bytes.is_empty() {
        match stream.write(bytes) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => bytes = &bytes[n..],
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted
                ) =>
            {
                std::hint::spin_loop()
            }
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

#[derive(Clone, Debug)]
pub struct ClientOptions {
    pub server: SocketAddr,
    pub rate: u64,
    pub duration: Duration,
    /// Bytes per message (the first 8 carry its number). 52 = an OUCH Enter Order in its
    /// SoupBinTCP packet.
    pub size: usize,
    pub pace: Pace,
    pub busy_poll: bool,
    /// Connections the messages are spread over, message `i` on connection `i % n`: the
    /// venue's runs spread their orders over several sessions, and each connection a batch
    /// touches is a read and a write of its own, on both sides.
    pub connections: usize,
}

pub struct EchoReport {
    /// From the intended send time (coordinated-omission corrected).
    pub intended: Histogram<u64>,
    /// From the actual write.
    pub service: Histogram<u64>,
    pub sent: u64,
    pub received: u64,
    pub seconds: f64,
}

impl EchoReport {
    pub fn series(&self) -> Vec<latency::Series<'_>> {
        vec![
            latency::Series {
                name: "echo round trip",
                hist: &self.intended,
            },
            latency::Series {
                name: "echo (service)",
                hist: &self.service,
            },
        ]
    }

    pub fn summary(&self) -> String {
        format!(
            "echo: sent {} received {} in {:.3} s: {:.0} msgs/s\n{}",
            self.sent,
            self.received,
            self.seconds,
            self.sent as f64 / self.seconds.max(1e-9),
            latency::table(&self.series())
        )
    }
}

/// Run the open-loop echo client.
pub fn run_client(options: &ClientOptions, stop: Arc<AtomicBool>) -> Result<EchoReport, String> {
    let size = options.size.clamp(8, 4096);
    let total = (options.rate as f64 * options.duration.as_secs_f64()) as usize;
    let connections = options.connections.clamp(1, CONNECTIONS_MAX);
    let mut streams = Vec::with_capacity(connections);
    let mut reads = Vec::with_capacity(connections);
    for _ in 0..connections {
        let stream = TcpStream::connect(options.server)
            .map_err(|e| format!("connect {}: {e}", options.server))?;
        stream.set_nodelay(true).map_err(|e| e.to_string())?;
        stream.set_nonblocking(true).map_err(|e| e.to_string())?;
        reads.push(stream.try_clone().map_err(|e| e.to_string())?);
        streams.push(stream);
    }
    let intended: Arc<Vec<AtomicU64>> = Arc::new((0..total).map(|_| AtomicU64::new(0)).collect());
    let written: Arc<Vec<AtomicU64>> = Arc::new((0..total).map(|_| AtomicU64::new(0)).collect());
    let clock = Clock::new();
    let done = Arc::new(AtomicBool::new(false));
    let sent_count = Arc::new(AtomicU64::new(0));
    let receiver = {
        let (intended, written, done, sent_count) = (
            intended.clone(),
            written.clone(),
            done.clone(),
            sent_count.clone(),
        );
        let busy = options.busy_poll;
        std::thread::spawn(move || {
            receive(
                reads,
                size,
                &intended,
                &written,
                clock,
                busy,
                &done,
                &sent_count,
            )
        })
    };
    if options.pace == Pace::Sleep {
        latency::tight_timer_slack();
    }
    let interval = 1e9 / options.rate.max(1) as f64;
    let t0 = clock.now_ns();
    // Like the load generator: one write per message when on schedule; when behind, up to
    // 64 messages per write, each connection's messages in one write.
    let mut outs: Vec<Vec<u8>> = (0..connections)
        .map(|_| Vec::with_capacity(size * 64))
        .collect();
    let mut batch = 0usize;
    let mut sent = 0usize;
    while sent < total && !stop.load(Ordering::Relaxed) {
        let due = t0 + (sent as f64 * interval) as u64;
        latency::wait_until(&clock, due, options.pace, &stop);
        let now = clock.now_ns();
        intended[sent].store(due + 1, Ordering::Release);
        written[sent].store(now + 1, Ordering::Release);
        let out = &mut outs[sent % connections];
        let at = out.len();
        out.resize(at + size, 0);
        out[at..at + 8].copy_from_slice(&(sent as u64).to_be_bytes());
        sent += 1;
        batch += 1;
        let next_due = t0 + (sent as f64 * interval) as u64;
        if batch >= 64 || clock.now_ns() < next_due || sent == total {
            flush_all(&mut streams, &mut outs)?;
            batch = 0;
        }
    }
    flush_all(&mut streams, &mut outs)?;
    let seconds = (clock.now_ns() - t0) as f64 / 1e9;
    sent_count.store(sent as u64, Ordering::Release);
    done.store(true, Ordering::Release);
    let (h_intended, h_service, received) = receiver.join().map_err(|_| "receiver panicked")??;
    Ok(EchoReport {
        intended: h_intended,
        service: h_service,
        sent: sent as u64,
        received,
        seconds,
    })
}

/// Connections one client opens at most.
const CONNECTIONS_MAX: usize = 64;

/// Write out every connection's waiting messages.
fn flush_all(streams: &mut [TcpStream], outs: &mut [Vec<u8>]) -> Result<(), String> {
    for (stream, out) in streams.iter_mut().zip(outs.iter_mut()) {
        if !out.is_empty() {
            write_all_spin(stream, out).map_err(|e| format!("write: {e}"))?;
            out.clear();
        }
    }
    Ok(())
}

type Received = Result<(Histogram<u64>, Histogram<u64>, u64), String>;

/// One connection's end on the receiving thread: bytes of a message not yet whole.
struct Inbound {
    stream: mio::net::TcpStream,
    buf: Vec<u8>,
    have: usize,
}

#[allow(clippy::too_many_arguments)]
fn receive(
    reads: Vec<TcpStream>,
    size: usize,
    intended: &[AtomicU64],
    written: &[AtomicU64],
    clock: Clock,
    busy: bool,
    done: &AtomicBool,
    sent: &AtomicU64,
) -> Received {
    let mut h_intended = latency::histogram();
    let mut h_service = latency::histogram();
    let mut poll = Poll::new().map_err(|e| e.to_string())?;
    let mut inbound = Vec::with_capacity(reads.len());
    for (k, read) in reads.into_iter().enumerate() {
        let mut stream = mio::net::TcpStream::from_std(read);
        poll.registry()
            .register(&mut stream, Token(k), Interest::READABLE)
            .map_err(|e| e.to_string())?;
        inbound.push(Inbound {
            stream,
            buf: vec![0u8; 64 << 10],
            have: 0,
        });
    }
    let mut events = Events::with_capacity(CONNECTIONS_MAX);
    let timeout = Some(if busy {
        Duration::ZERO
    } else {
        Duration::from_millis(20)
    });
    let mut received = 0u64;
    let mut drain_deadline: Option<u64> = None;
    loop {
        if done.load(Ordering::Acquire) {
            if received >= sent.load(Ordering::Acquire) {
                break;
            }
            let now = clock.now_ns();
            let deadline = *drain_deadline.get_or_insert(now + 2_000_000_000);
            if now >= deadline {
                break;
            }
        }
        if let Err(e) = poll.poll(&mut events, timeout)
            && e.kind() != io::ErrorKind::Interrupted
        {
            return Err(e.to_string());
        }
        for event in events.iter() {
            let Some(connection) = inbound.get_mut(event.token().0) else {
                continue;
            };
            // Bounded: each read takes at least a byte of what the server has echoed.
            loop {
                let Inbound { stream, buf, have } = &mut *connection;
                match stream.read(&mut buf[*have..]) {
                    Ok(0) => return Err("the echo server closed the connection".into()),
                    Ok(n) => {
                        let now = clock.now_ns();
                        *have += n;
                        let whole = *have / size * size;
                        for frame in buf[..whole].chunks_exact(size) {
                            let i = u64::from_be_bytes(frame[..8].try_into().expect("8 bytes"))
                                as usize;
                            if let Some(t) = intended.get(i) {
                                latency::record(
                                    &mut h_intended,
                                    now.saturating_sub(t.load(Ordering::Acquire) - 1),
                                );
                                let w = written[i].load(Ordering::Acquire);
                                latency::record(&mut h_service, now.saturating_sub(w - 1));
                            }
                            received += 1;
                        }
                        buf.copy_within(whole..*have, 0);
                        *have -= whole;
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(e) => return Err(e.to_string()),
                }
            }
        }
    }
    Ok((h_intended, h_service, received))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn echo_round_trips_are_measured_over_one_or_several_connections() {
        for connections in [1, 4] {
            round_trips_over(connections, ServerMode::Blocking);
        }
    }

    /// One thread serving every connection echoes each message once, in order.
    #[test]
    fn one_looping_server_echoes_every_connection() {
        round_trips_over(4, ServerMode::Loop);
    }

    fn round_trips_over(connections: usize, mode: ServerMode) {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let server = {
            let stop = stop.clone();
            std::thread::spawn(move || serve(listener, mode, stop))
        };
        let report = run_client(
            &ClientOptions {
                server: addr,
                rate: 2_000,
                duration: Duration::from_millis(500),
                size: 52,
                pace: Pace::Sleep,
                busy_poll: false,
                connections,
            },
            Arc::new(AtomicBool::new(false)),
        )
        .unwrap();
        stop.store(true, Ordering::Relaxed);
        server.join().unwrap().unwrap();
        assert_eq!(report.sent, 1_000);
        assert_eq!(report.received, 1_000);
        assert_eq!(report.intended.len(), 1_000);
        assert!(report.intended.value_at_percentile(50.0) < 50_000_000);
    }
}
