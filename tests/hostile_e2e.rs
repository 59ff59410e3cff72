//! Hostile clients against the real daemon over real sockets (issue 12). Every attack runs
//! while a real client on another connection must get its work done within 1 s (a broker's
//! TCP handshake may take one SYN retransmission, see `CONNECT_WITHIN`): a broker
//! logs in and trades, `bourse admin --config FILE` commands the venue, a GLIMPSE subscriber
//! gets its snapshot, a re-request client gets its gap filled. Nothing a broker saw
//! acknowledged may be lost.

mod common;

use bourse::client::{LoginError, OuchClient};
use bourse::types::Alpha;
use bourse::wire::ascii::SessionId;
use bourse::wire::moldudp64::Request as MoldRequest;
use bourse::wire::ouch::{Inbound, Outbound};
use bourse::wire::soupbin::{FrameReader, LoginRequest, Packet};
use common::{TIMEOUT, Venue, bourse, config_text};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream, UdpSocket};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// What a real client must manage during every attack.
const WITHIN: Duration = Duration::from_secs(1);

/// The test config with `feed_lines` added to `[feed]`.
fn config(dir: &std::path::Path, feed_lines: &str) -> String {
    let text = config_text(dir, "");
    text.replacen(
        "snapshot = \"127.0.0.1:0\"\n",
        &format!("snapshot = \"127.0.0.1:0\"\n{feed_lines}\n"),
        1,
    )
}

fn enter(token: &str, side: u8, price: u32) -> Inbound {
    common::day_order(token, side, 100, "AAPL", price)
}

/// The TCP handshake's budget: one SYN retransmission (Linux retransmits after 1 s, then
/// 3 s). A connect flood that outruns the accept loop by the listen backlog (4096) makes the
/// kernel drop SYNs, a broker's among them; on a starved CI machine that happened once
/// (`connection timed out` with a 1 s budget). A retransmitted SYN is a delay the kernel
/// imposes on every server, not a lockout; everything after the handshake stays in WITHIN.
const CONNECT_WITHIN: Duration = Duration::from_millis(2_500);

/// The gateway closed this broker's connection before it read the login: at the per-source
/// bound a newer connection from the same address evicts the oldest one not logged in (README
/// "Hostile clients"), and a broker sharing 127.0.0.1 with a connect flood that is descheduled
/// between its connect and its login can be that one (CI saw "ALICE cannot connect during the
/// attack: Connection reset by peer": the reset arrived before the connect returned). It
/// reconnects, as a real broker does; that is no lockout, and the budget still holds.
fn evicted(e: &std::io::Error) -> bool {
    use std::io::ErrorKind::{BrokenPipe, ConnectionAborted, ConnectionReset};
    matches!(e.kind(), ConnectionReset | ConnectionAborted | BrokenPipe)
}

/// A broker connects (within `CONNECT_WITHIN`), then logs in and gets an order accepted
/// within `WITHIN`, handshakes aside; reconnecting when evicted before its login was read
/// (see [`evicted`]). Returns the client (logged in).
fn broker_trades(venue: &Venue, user: &str, password: &str, token: &str) -> OuchClient {
    let connect = || {
        let connecting = Instant::now();
        match TcpStream::connect_timeout(&venue.gateway, CONNECT_WITHIN) {
            Ok(stream) => {
                let took = connecting.elapsed();
                if took > WITHIN {
                    println!("{user}'s SYN was retransmitted: connected in {took:?}");
                }
                Some((stream, took))
            }
            Err(e) if evicted(&e) => None,
            Err(e) => panic!("{user} cannot connect during the attack: {e}"),
        }
    };
    let started = Instant::now();
    // Time in handshakes, not counted against WITHIN.
    let mut handshakes = Duration::ZERO;
    let spent = |handshakes: Duration| started.elapsed().saturating_sub(handshakes);
    let mut evictions = 0u32;
    // Bounded: WITHIN. 'S' (the account's session still open) while the gateway has not yet
    // read the close of this broker's previous connection, dropped just before: on a loaded
    // machine the new login can be read first. A broker retries that; it is no lockout.
    let mut client = loop {
        let took = spent(handshakes);
        assert!(
            took < WITHIN,
            "{user} could not log in during the attack within {took:?} ({evictions} evictions)"
        );
        let Some((stream, handshake)) = connect() else {
            evictions += 1;
            continue;
        };
        handshakes += handshake;
        let left = WITHIN.saturating_sub(spent(handshakes));
        match OuchClient::login_on(stream, user, password, "", 0, left) {
            Ok(client) => break client,
            Err(LoginError::Rejected(b'S')) => std::thread::sleep(Duration::from_millis(5)),
            Err(LoginError::Io(e)) if evicted(&e) => evictions += 1,
            Err(LoginError::Protocol(m)) if m == "connection closed during login" => evictions += 1,
            Err(e) => panic!("{user} cannot log in during the attack: {e}"),
        }
    };
    if evictions > 0 {
        println!("{user} was evicted {evictions} times before its login was read");
    }
    client.send(&enter(token, b'B', 1_000_000)).unwrap();
    let left = WITHIN.saturating_sub(spent(handshakes));
    let replies = client.recv_messages(1, left).unwrap();
    assert!(
        matches!(replies.first(), Some((_, Outbound::Accepted(a))) if a.token == Alpha::from_str_padded(token).unwrap()),
        "{user}: {replies:?}"
    );
    let took = spent(handshakes);
    assert!(took < WITHIN, "{user} logged in and traded in {took:?}");
    println!("{user} logged in and traded in {took:?}");
    client
}

/// Every token in `tokens` is in `user`'s stream as Accepted (re-login from 1): nothing a broker
/// saw acknowledged was lost.
fn acknowledged_are_kept(venue: &Venue, user: &str, password: &str, tokens: &[&str]) {
    let mut client = OuchClient::login(venue.gateway, user, password, "", 1, TIMEOUT).unwrap();
    let mut seen = Vec::new();
    loop {
        match client.recv_messages(1, Duration::from_millis(300)) {
            Ok(m) if !m.is_empty() => seen.extend(m),
            _ => break,
        }
    }
    for token in tokens {
        let want = Alpha::from_str_padded(token).unwrap();
        assert!(
            seen.iter()
                .any(|(_, m)| matches!(m, Outbound::Accepted(a) if a.token == want)),
            "{token} acknowledged but not in {user}'s stream"
        );
    }
    let _ = client.logout();
}

fn login_bytes(user: &str, password: &str) -> Vec<u8> {
    let login = Packet::LoginRequest(LoginRequest {
        username: Alpha::from_str_padded(user).unwrap(),
        password: Alpha::from_str_padded(password).unwrap(),
        session: SessionId::BLANK,
        sequence: 0,
        heartbeat_timeout_ms: None,
    });
    let mut buf = [0u8; 64];
    let n = login.encode(&mut buf);
    buf[..n].to_vec()
}

/// Run `bourse admin --config FILE ARGS...` and return (success, stdout, how long it took).
fn admin_cli(venue: &Venue, args: &[&str]) -> (bool, String, Duration) {
    let started = Instant::now();
    let config = venue.admin_config();
    let mut all = vec!["admin", "--config", config.to_str().unwrap()];
    all.extend_from_slice(args);
    let (ok, out) = bourse(&all);
    (ok, out, started.elapsed())
}

fn admin_addr(venue: &Venue) -> SocketAddr {
    venue.admin
}

#[test]
fn admin_refuses_a_client_without_the_secret() {
    let dir = tempfile::tempdir().unwrap();
    let venue = Venue::start(dir.path(), &config(dir.path(), ""));
    // What `printf 'end-of-day\n' > /dev/tcp/HOST/ADMIN` does.
    for line in ["end-of-day\n", "halt AAPL\n", "auth 00 end-of-day\n"] {
        let mut raw = TcpStream::connect(admin_addr(&venue)).unwrap();
        raw.set_read_timeout(Some(TIMEOUT)).unwrap();
        raw.write_all(line.as_bytes()).unwrap();
        let mut answer = String::new();
        let _ = raw.read_to_string(&mut answer);
        assert!(
            !answer.lines().any(|l| l.starts_with("ok")),
            "{line:?} without the secret: {answer:?}"
        );
    }
    // The day did not end and AAPL is not halted: a broker still trades.
    let _alice = broker_trades(&venue, "ALICE", "alicepw", "A1");
    // The operator with the config file still commands the venue.
    let (ok, out, took) = admin_cli(&venue, &["halt", "AAPL"]);
    assert!(ok && out.starts_with("ok halt AAPL"), "{out}");
    assert!(took < WITHIN, "{took:?}");
    let (ok, out, _) = admin_cli(&venue, &["end-of-day"]);
    assert!(ok && out.starts_with("ok end-of-day"), "{out}");
}

#[test]
fn idle_and_one_byte_admin_clients_do_not_take_the_admin_port() {
    let dir = tempfile::tempdir().unwrap();
    let venue = Venue::start(dir.path(), &config(dir.path(), ""));
    // Idle connections, then connections that send a byte and close, then half-open lines.
    let mut idle: Vec<TcpStream> = (0..64)
        .map(|_| TcpStream::connect(admin_addr(&venue)).unwrap())
        .collect();
    for _ in 0..16 {
        let mut s = TcpStream::connect(admin_addr(&venue)).unwrap();
        s.write_all(b"h").unwrap();
    }
    for _ in 0..16 {
        let mut s = TcpStream::connect(admin_addr(&venue)).unwrap();
        s.write_all(b"status").unwrap();
        idle.push(s);
    }
    for round in 0..3 {
        let (ok, out, took) = admin_cli(&venue, &["halt", "AAPL"]);
        assert!(ok, "round {round}: {out}");
        assert!(took < WITHIN, "round {round}: {took:?}");
        let (ok, out, took) = admin_cli(&venue, &["resume", "AAPL"]);
        assert!(ok, "round {round}: {out}");
        assert!(took < WITHIN, "round {round}: {took:?}");
        // The attacker opens more while the operator works.
        idle.extend((0..16).map(|_| TcpStream::connect(admin_addr(&venue)).unwrap()));
    }
    let _alice = broker_trades(&venue, "ALICE", "alicepw", "A1");
    drop(idle);
}

#[test]
fn half_logins_do_not_lock_brokers_out() {
    let dir = tempfile::tempdir().unwrap();
    let venue = Venue::start(dir.path(), &config(dir.path(), ""));
    let half = login_bytes("ALICE", "x");
    let half = half[..half.len() / 2].to_vec();
    let mut held = Vec::new();
    for round in 0..3 {
        // 64 connections, each half a login, kept open (the attack), every round.
        for _ in 0..64 {
            let mut s = TcpStream::connect(venue.gateway).unwrap();
            s.write_all(&half).unwrap();
            held.push(s);
        }
        let token = format!("H{round}");
        let broker = broker_trades(&venue, "BOB", "bobpw", &token);
        drop(broker);
    }
    // And while an attacker keeps opening such connections as fast as it can.
    let stop = Arc::new(AtomicBool::new(false));
    let attacker = {
        let (stop, addr, half) = (stop.clone(), venue.gateway, half.clone());
        std::thread::spawn(move || {
            let mut open = std::collections::VecDeque::new();
            let mut opened = 0u64;
            while !stop.load(Ordering::Relaxed) && opened < 1_000_000 {
                if let Ok(mut s) = TcpStream::connect(addr) {
                    let _ = s.write_all(&half);
                    open.push_back(s);
                    opened += 1;
                }
                if open.len() > 100 {
                    open.pop_front();
                }
            }
            opened
        })
    };
    std::thread::sleep(Duration::from_millis(200));
    for round in 3..8 {
        let token = format!("H{round}");
        drop(broker_trades(&venue, "BOB", "bobpw", &token));
    }
    stop.store(true, Ordering::Relaxed);
    println!(
        "the attacker opened {} connections",
        attacker.join().unwrap()
    );
    drop(held);
    let tokens: Vec<String> = (0..8).map(|r| format!("H{r}")).collect();
    let tokens: Vec<&str> = tokens.iter().map(String::as_str).collect();
    acknowledged_are_kept(&venue, "BOB", "bobpw", &tokens);
}

#[test]
fn a_connect_flood_does_not_lock_brokers_out() {
    let dir = tempfile::tempdir().unwrap();
    let venue = Venue::start(dir.path(), &config(dir.path(), ""));
    // 500 connects at once, kept open, while another thread keeps connecting.
    let mut flood: Vec<TcpStream> = (0..500)
        .filter_map(|_| TcpStream::connect(venue.gateway).ok())
        .collect();
    assert!(flood.len() > 400, "{} connected", flood.len());
    let stop = Arc::new(AtomicBool::new(false));
    let attacker = {
        let stop = stop.clone();
        let addr = venue.gateway;
        std::thread::spawn(move || {
            let mut held = std::collections::VecDeque::new();
            let mut opened = 0u64;
            while !stop.load(Ordering::Relaxed) && opened < 200_000 {
                if let Ok(s) = TcpStream::connect(addr) {
                    held.push_back(s);
                    opened += 1;
                }
                if held.len() > 200 {
                    held.pop_front();
                }
            }
            opened
        })
    };
    std::thread::sleep(Duration::from_millis(100));
    let alice = broker_trades(&venue, "ALICE", "alicepw", "F1");
    let carol = broker_trades(&venue, "CAROL", "carolpw", "F2");
    stop.store(true, Ordering::Relaxed);
    let opened = attacker.join().unwrap();
    println!("the attacker opened {opened} more connections");
    flood.clear();
    drop((alice, carol));
    acknowledged_are_kept(&venue, "ALICE", "alicepw", &["F1"]);
    acknowledged_are_kept(&venue, "CAROL", "carolpw", &["F2"]);
}

/// One wrong-password try: connect, log in, wait for the answer. Returns what came back.
fn wrong_password_try(addr: SocketAddr, user: &str) -> Result<(), LoginError> {
    OuchClient::login(addr, user, "wrong", "", 0, Duration::from_secs(10)).map(|_| ())
}

#[test]
fn wrong_passwords_are_slowed_and_brokers_still_trade() {
    let dir = tempfile::tempdir().unwrap();
    let venue = Venue::start(dir.path(), &config(dir.path(), ""));
    let stop = Arc::new(AtomicBool::new(false));
    let answers = Arc::new(AtomicU64::new(0));
    // Four attackers guessing ALICE's password, each waiting for its answer (a naive brute
    // force), and one that drops each try after 5 ms (it only wants to know "not accepted").
    let mut attackers = Vec::new();
    for _ in 0..4 {
        let (stop, answers, addr) = (stop.clone(), answers.clone(), venue.gateway);
        attackers.push(std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                if let Err(LoginError::Rejected(b'A')) = wrong_password_try(addr, "ALICE") {
                    answers.fetch_add(1, Ordering::Relaxed);
                }
            }
        }));
    }
    {
        let (stop, addr) = (stop.clone(), venue.gateway);
        let bytes = login_bytes("ALICE", "guess");
        attackers.push(std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                if let Ok(mut s) = TcpStream::connect(addr) {
                    let _ = s.write_all(&bytes);
                    std::thread::sleep(Duration::from_millis(5));
                }
            }
        }));
    }
    let attack = Duration::from_secs(3);
    std::thread::sleep(Duration::from_millis(500));
    // The broker whose password is being guessed, from the same address, gets in at once.
    let alice = broker_trades(&venue, "ALICE", "alicepw", "W1");
    let bob = broker_trades(&venue, "BOB", "bobpw", "W2");
    std::thread::sleep(attack - Duration::from_millis(500));
    stop.store(true, Ordering::Relaxed);
    for a in attackers {
        a.join().unwrap();
    }
    let answered = answers.load(Ordering::Relaxed);
    println!("wrong-password answers in {attack:?}: {answered}");
    // Unlimited, this is thousands per second. With the backoff: a few free tries, then at
    // most one answer per pre-login slot of the source per backoff step.
    assert!(
        answered < 60,
        "{answered} wrong-password answers in {attack:?}"
    );
    drop((alice, bob));
    // A broker with a wrong password still gets Login Rejected `A`, late but surely.
    let started = Instant::now();
    match wrong_password_try(venue.gateway, "CAROL") {
        Err(LoginError::Rejected(b'A')) => {}
        other => panic!("a wrong password must get A: {other:?}"),
    }
    println!("a wrong password got A after {:?}", started.elapsed());
    acknowledged_are_kept(&venue, "ALICE", "alicepw", &["W1"]);
    acknowledged_are_kept(&venue, "BOB", "bobpw", &["W2"]);
}

fn glimpse_snapshot(addr: SocketAddr) -> Result<usize, String> {
    let mut stream = TcpStream::connect(addr).map_err(|e| e.to_string())?;
    stream.set_read_timeout(Some(WITHIN)).unwrap();
    stream
        .write_all(&login_bytes("BOB", "bobpw"))
        .map_err(|e| e.to_string())?;
    let mut reader = FrameReader::new(u16::MAX as usize);
    let mut messages = 0;
    loop {
        while let Some(p) = reader.next_packet() {
            match p.map_err(|e| e.to_string())? {
                Packet::LoginAccepted { .. } => {}
                Packet::SequencedData(_) => messages += 1,
                Packet::EndOfSession => return Ok(messages),
                other => return Err(format!("unexpected {other:?}")),
            }
        }
        let n = stream
            .read(reader.read_space())
            .map_err(|e| e.to_string())?;
        if n == 0 {
            return Err(format!("closed after {messages} messages"));
        }
        reader.commit(n);
    }
}

#[test]
fn idle_snapshot_connections_do_not_refuse_subscribers() {
    let dir = tempfile::tempdir().unwrap();
    let venue = Venue::start(dir.path(), &config(dir.path(), ""));
    let _alice = broker_trades(&venue, "ALICE", "alicepw", "G1");
    let mut idle: Vec<TcpStream> = Vec::new();
    for round in 0..3 {
        idle.extend((0..16).map(|_| TcpStream::connect(venue.snapshot).unwrap()));
        std::thread::sleep(Duration::from_millis(50));
        let started = Instant::now();
        let messages = glimpse_snapshot(venue.snapshot)
            .unwrap_or_else(|e| panic!("round {round}: the subscriber got no snapshot: {e}"));
        let took = started.elapsed();
        assert!(messages > 3, "{messages}");
        assert!(took < WITHIN, "round {round}: {took:?}");
    }
    drop(idle);
}

fn ask(socket: &UdpSocket, server: SocketAddr, sequence: u64, count: u16) {
    let mut request = [0u8; MoldRequest::LEN];
    MoldRequest::new(SessionId::new("TEST000001").unwrap(), sequence, count).encode(&mut request);
    socket.send_to(&request, server).unwrap();
}

fn answer(socket: &UdpSocket, wait: Duration) -> Option<usize> {
    socket.set_read_timeout(Some(wait)).unwrap();
    let mut buf = [0u8; 2048];
    socket.recv_from(&mut buf).ok().map(|(n, _)| n)
}

#[test]
fn rerequests_only_answer_allowed_sources() {
    let dir = tempfile::tempdir().unwrap();
    let venue = Venue::start(
        dir.path(),
        &config(dir.path(), "rerequest_allow = [\"127.0.0.1/32\"]"),
    );
    let _alice = broker_trades(&venue, "ALICE", "alicepw", "R1");
    std::thread::sleep(Duration::from_millis(100));
    // 127.0.0.2 stands for any address outside the allowlist (a spoofed victim, say).
    let outsider = UdpSocket::bind("127.0.0.2:0").unwrap();
    for _ in 0..20 {
        ask(&outsider, venue.rerequest, 1, 100);
    }
    assert_eq!(answer(&outsider, Duration::from_millis(300)), None);
    let (requests, bytes_in, answers, bytes_out, took) = flood(venue.rerequest, "127.0.0.2", 1.0);
    println!(
        "re-request flood from a source outside the allowlist: {requests} requests, {bytes_in} bytes in, {answers} answers, {bytes_out} bytes out in {:.2} s",
        took.as_secs_f64()
    );
    assert_eq!(bytes_out, 0);
    assert!(requests > 1_000);
    let subscriber = UdpSocket::bind("127.0.0.1:0").unwrap();
    let started = Instant::now();
    ask(&subscriber, venue.rerequest, 1, 100);
    let got = answer(&subscriber, WITHIN).expect("an allowed subscriber is answered");
    assert!(got > 20 && started.elapsed() < WITHIN, "{got} bytes");
}

/// Send valid re-requests (1,000 messages from 1) from `source` for `seconds`, counting what
/// comes back: (requests, bytes in, answers, bytes out, duration).
fn flood(server: SocketAddr, source: &str, seconds: f64) -> (u64, u64, u64, u64, Duration) {
    let attacker = UdpSocket::bind(format!("{source}:0")).unwrap();
    attacker.set_nonblocking(true).unwrap();
    let (mut bytes_in, mut bytes_out, mut requests, mut answers) = (0u64, 0u64, 0u64, 0u64);
    let started = Instant::now();
    let mut buf = [0u8; 2048];
    while started.elapsed().as_secs_f64() < seconds {
        // Paced in batches of 20 so the kernel's socket buffers do not drop answers we
        // would then not count.
        for _ in 0..20 {
            let mut request = [0u8; MoldRequest::LEN];
            MoldRequest::new(SessionId::new("TEST000001").unwrap(), 1, 1000).encode(&mut request);
            if attacker.send_to(&request, server).is_ok() {
                bytes_in += request.len() as u64;
                requests += 1;
            }
        }
        std::thread::sleep(Duration::from_micros(500));
        while let Ok((n, _)) = attacker.recv_from(&mut buf) {
            bytes_out += n as u64;
            answers += 1;
        }
    }
    std::thread::sleep(Duration::from_millis(200));
    while let Ok((n, _)) = attacker.recv_from(&mut buf) {
        bytes_out += n as u64;
        answers += 1;
    }
    (requests, bytes_in, answers, bytes_out, started.elapsed())
}

/// Flood the re-request server from one allowed source and measure bytes out per byte in;
/// a subscriber on another address is served during the flood. Prints the figures that
/// BENCHMARKS.md "Hostile clients" quotes.
#[test]
fn rerequest_flood_is_not_an_amplifier() {
    let dir = tempfile::tempdir().unwrap();
    let venue = Venue::start(dir.path(), &config(dir.path(), ""));
    // Enough ITCH messages for full 1,400-byte answers.
    let mut alice = OuchClient::login(venue.gateway, "ALICE", "alicepw", "", 0, TIMEOUT).unwrap();
    for i in 0..200 {
        alice
            .send(&enter(&format!("M{i}"), b'B', 900_000 + i * 100))
            .unwrap();
    }
    alice.recv_messages(200, TIMEOUT).unwrap();
    std::thread::sleep(Duration::from_millis(200));
    let server = venue.rerequest;
    let attack = std::thread::spawn(move || flood(server, "127.0.0.2", 3.0));
    std::thread::sleep(Duration::from_millis(1500));
    // A subscriber on another address fills its gap during the flood.
    let subscriber = UdpSocket::bind("127.0.0.1:0").unwrap();
    let started = Instant::now();
    ask(&subscriber, venue.rerequest, 1, 50);
    let got = answer(&subscriber, WITHIN).expect("the subscriber is answered during the flood");
    assert!(got > 20 && started.elapsed() < WITHIN);
    let (requests, bytes_in, answers, bytes_out, took) = attack.join().unwrap();
    // The allowance (1 MiB burst + 256 KiB/s) is the only part above 1.0 byte per byte in.
    let allowance = (1u64 << 20) + (took.as_secs_f64() * 262_144.0) as u64;
    println!(
        "re-request flood from one allowed source: {requests} requests, {bytes_in} bytes in, {answers} answers, {bytes_out} bytes out in {:.2} s: {:.3} bytes out per byte in, {:.3} beyond the allowance of {allowance} bytes",
        took.as_secs_f64(),
        bytes_out as f64 / bytes_in as f64,
        bytes_out.saturating_sub(allowance) as f64 / bytes_in as f64,
    );
    assert!(
        bytes_out <= allowance + bytes_in,
        "{bytes_out} bytes out for {bytes_in} in (allowance {allowance})"
    );
    assert!(requests > 10_000, "the flood was a flood: {requests}");
}

/// DESIGN.md 7: "Bad bytes from a client close that client's session with a log line" —
/// DESIGN.md 6 counts data before login and a login of the wrong length among them. Those
/// closed the connection with a line only at the debug level, on the gateway and on GLIMPSE.
/// Now each gets an info line (a flood about one a second, counting the rest: anyone can
/// open connections).
#[test]
fn bad_bytes_before_login_close_the_connection_with_a_log_line() {
    let dir = tempfile::tempdir().unwrap();
    let (venue, log_path) = start_with_log(dir.path());
    // A login packet two bytes short, a zero length, an unknown packet type, data before login.
    let short_login = [&[0u8, 45, b'L'][..], &[0u8; 44]].concat();
    let attacks: [&[u8]; 4] = [
        &short_login,
        &[0, 0],
        &[0, 1, b'?'],
        &[0, 3, b'U', b'O', b'X'],
    ];
    for port in [venue.gateway, venue.snapshot] {
        for bytes in attacks {
            let mut s = TcpStream::connect(port).unwrap();
            s.write_all(bytes).unwrap();
            s.set_read_timeout(Some(TIMEOUT)).unwrap();
            let mut rest = Vec::new();
            let _ = s.read_to_end(&mut rest);
        }
    }
    assert!(venue.stop().success());
    let log = std::fs::read_to_string(&log_path).unwrap();
    let lines: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("gateway connection closed before login"))
        .collect();
    eprintln!("{}", lines.join("\n"));
    assert_eq!(lines.len(), 4, "one line per bad connection:\n{log}");
    assert!(lines.iter().all(|l| l.contains("INFO")), "{lines:?}");
    // GLIMPSE (a SoupBinTCP server too) likewise.
    let glimpse: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("INFO") && l.contains("GLIMPSE connection closed"))
        .collect();
    assert_eq!(glimpse.len(), 4, "one line per bad connection:\n{log}");
}

/// The replication port answers anyone who can reach it; its refusals must not write a line
/// per try (the hostile audit logged 3,000 WARN lines for 3,000 connect-and-close tries): a
/// burst of lines, then about one a second counting the rest.
#[test]
fn a_flood_of_bad_replication_connections_is_logged_in_a_bounded_number_of_lines() {
    let dir = tempfile::tempdir().unwrap();
    let (venue, log_path) = start_with_log(dir.path());
    let tries = 200;
    for _ in 0..tries {
        let mut s = TcpStream::connect(venue.replication).unwrap();
        // Not a replication frame: the follower drops it.
        let _ = s.write_all(&[0xFF; 16]);
        s.set_read_timeout(Some(TIMEOUT)).unwrap();
        let mut rest = Vec::new();
        let _ = s.read_to_end(&mut rest);
    }
    assert!(venue.stop().success());
    let log = std::fs::read_to_string(&log_path).unwrap();
    let lines = log
        .lines()
        .filter(|l| l.contains("replication: standby dropped") || l.contains("refused a standby"))
        .count();
    assert!(
        (1..=40).contains(&lines),
        "{lines} lines for {tries} bad connections"
    );
}

/// Idle connections that never say Hello used to hold the replication port's four follower
/// slots for the Hello timeout (5 s) each, again and again; a standby arriving then was
/// refused. Now a newcomer closes the oldest connection that has not said Hello.
#[test]
fn idle_connections_do_not_keep_a_standby_off_the_replication_port() {
    use bourse::replication::protocol::{Frame, VERSION};
    let dir = tempfile::tempdir().unwrap();
    let venue = Venue::start(dir.path(), &config_text(dir.path(), ""));
    let idle: Vec<TcpStream> = (0..4)
        .map(|_| TcpStream::connect(venue.replication).unwrap())
        .collect();
    // Let the accept thread take all four.
    std::thread::sleep(Duration::from_millis(200));
    let started = Instant::now();
    let mut standby = TcpStream::connect(venue.replication).unwrap();
    standby.set_read_timeout(Some(TIMEOUT)).unwrap();
    let hello = Frame::Hello {
        version: VERSION,
        tail: Vec::new(),
        day_epoch_unix_ns: 0,
    };
    hello.write(&mut standby).unwrap();
    let answer = Frame::read(&mut standby).expect("an answer, not a refusal");
    assert!(matches!(answer, Frame::Welcome { .. }), "{answer:?}");
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
    // The oldest idle connection was closed for it.
    let mut first = idle.into_iter().next().unwrap();
    first.set_read_timeout(Some(TIMEOUT)).unwrap();
    let mut byte = [0u8; 1];
    assert!(matches!(first.read(&mut byte), Ok(0) | Err(_)), "closed");
    assert!(venue.stop().success());
}

/// The daemon on the common test config, its stderr (at INFO) in a file: (venue, that file).
fn start_with_log(dir: &std::path::Path) -> (Venue, std::path::PathBuf) {
    let config = dir.join("bourse.toml");
    std::fs::write(&config, config_text(dir, "")).unwrap();
    let log_path = dir.join("stderr.log");
    let mut child = std::process::Command::new(common::bourse_binary())
        .args(["run", "--config"])
        .arg(&config)
        .env("RUST_LOG", "info")
        .stdout(std::process::Stdio::piped())
        .stderr(std::fs::File::create(&log_path).unwrap())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(child.stdout.take().unwrap()),
        &mut line,
    )
    .unwrap();
    let venue = Venue::from_listening(child, &line, config, dir.join("journal"));
    (venue, log_path)
}

/// DESIGN.md 7: bad bytes close the connection "with a log line" on the admin port too: a
/// request line longer than any request (no newline in 100 KB).
#[test]
fn an_overlong_admin_line_closes_the_connection_with_a_log_line() {
    let dir = tempfile::tempdir().unwrap();
    let (venue, log_path) = start_with_log(dir.path());
    let mut s = TcpStream::connect(venue.admin).unwrap();
    s.set_read_timeout(Some(TIMEOUT)).unwrap();
    let _ = s.write_all(&vec![b'x'; 100 << 10]);
    let mut rest = Vec::new();
    let _ = s.read_to_end(&mut rest);
    assert!(venue.stop().success());
    let log = std::fs::read_to_string(&log_path).unwrap();
    assert!(
        log.lines()
            .any(|l| l.contains("admin connection closed: request line too long")),
        "{log}"
    );
}
