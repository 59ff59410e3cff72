//! Can this member serve if elected? A cluster member binds its serving ports (order entry,
//! GLIMPSE, re-requests) only while it leads. One whose ports another process holds would be
//! elected, fail to bind, and hand the lead on after 2 s (`member.rs`): an outage each time it
//! wins an election. So a member that does not serve checks its ports every
//! [`CHECK_INTERVAL_NS`] and, while one is taken, stands for election at a lower raft priority
//! (`ClusterNode::set_can_serve`): a voter of higher priority refuses it its vote unless its
//! log is newer than the voter's (raft-rs's rule; refusing votes never costs safety). Members
//! that can serve win the elections among themselves; members that cannot refuse no one, so
//! when they are a majority they may still elect one of their own, who then hands over.

use crate::config::Config;
use socket2::{Domain, Protocol, SockAddr, Socket, Type};
use std::net::SocketAddr;

/// How often a member that does not serve checks its serving ports.
pub const CHECK_INTERVAL_NS: u64 = 1_000_000_000;

/// The first of `config`'s serving ports that cannot be bound now, and why; `None` when each
/// can. Each is bound without listening (no connection can arrive on it) and closed at once.
pub fn first_taken(config: &Config) -> Option<(SocketAddr, std::io::Error)> {
    let tcp = [config.gateway.listen, config.feed.snapshot];
    let taken_tcp = tcp.into_iter().find_map(|addr| {
        // As a listener does: an old connection of ours in TIME_WAIT does not count.
        probe(addr, Type::STREAM, Protocol::TCP, true)
            .err()
            .map(|e| (addr, e))
    });
    taken_tcp.or_else(|| {
        let addr = config.feed.rerequest;
        // Without SO_REUSEADDR: with it, two UDP sockets may share a port.
        probe(addr, Type::DGRAM, Protocol::UDP, false)
            .err()
            .map(|e| (addr, e))
    })
}

fn probe(addr: SocketAddr, kind: Type, protocol: Protocol, reuse: bool) -> std::io::Result<()> {
    let socket = Socket::new(Domain::for_address(addr), kind, Some(protocol))?;
    socket.set_reuse_address(reuse)?;
    socket.bind(&SockAddr::from(addr))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config_on(gateway: SocketAddr, snapshot: SocketAddr, rerequest: SocketAddr) -> Config {
        let mut config = Config::embedded_default();
        config.gateway.listen = gateway;
        config.feed.snapshot = snapshot;
        config.feed.rerequest = rerequest;
        config
    }

    #[test]
    fn a_port_another_socket_holds_is_found_and_a_free_one_is_left_free() {
        let free = |kind: &str| -> SocketAddr {
            match kind {
                "tcp" => std::net::TcpListener::bind("127.0.0.1:0")
                    .unwrap()
                    .local_addr()
                    .unwrap(),
                _ => std::net::UdpSocket::bind("127.0.0.1:0")
                    .unwrap()
                    .local_addr()
                    .unwrap(),
            }
        };
        let (gateway, snapshot, rerequest) = (free("tcp"), free("tcp"), free("udp"));
        let config = config_on(gateway, snapshot, rerequest);
        assert!(first_taken(&config).is_none());
        // The probe leaves nothing bound: a listener takes the port right after.
        let held = std::net::TcpListener::bind(gateway).unwrap();
        let (addr, error) = first_taken(&config).expect("the gateway port is held");
        assert_eq!(addr, gateway);
        assert_eq!(error.kind(), std::io::ErrorKind::AddrInUse);
        drop(held);
        let held = std::net::UdpSocket::bind(rerequest).unwrap();
        assert_eq!(first_taken(&config).map(|t| t.0), Some(rerequest));
        drop(held);
        let held = std::net::TcpListener::bind(snapshot).unwrap();
        assert_eq!(first_taken(&config).map(|t| t.0), Some(snapshot));
        drop(held);
        assert!(first_taken(&config).is_none());
    }
}
