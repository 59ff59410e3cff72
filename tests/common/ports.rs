//! Ports a test hands to a daemon before it starts (kept apart so the tools' tests include
//! this file too).

/// A port free for both TCP and UDP on loopback, below the kernel's ephemeral range (32768
/// and up): a port probed free in that range and handed to a daemon may meanwhile become some
/// outgoing connection's local port (a test beside a build failed so). Distinct within the
/// process; the process id spreads processes apart.
pub fn fixed_port() -> u16 {
    use std::sync::atomic::{AtomicU32, Ordering};
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let base = std::process::id().wrapping_mul(7_919);
    // Bounded: 10,000 tries over 12,000 ports.
    for _ in 0..10_000 {
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let port = 20_000 + (base.wrapping_add(n.wrapping_mul(13)) % 12_000) as u16;
        let tcp = std::net::TcpListener::bind(("127.0.0.1", port));
        let udp = std::net::UdpSocket::bind(("127.0.0.1", port));
        if tcp.is_ok() && udp.is_ok() {
            return port;
        }
    }
    panic!("no free port in 20000..32000");
}
