//! Market-data transport (DESIGN.md 5): ITCH 5.0 in MoldUDP64 over UDP multicast, the MoldUDP64
//! re-request server and the GLIMPSE 5.0 snapshot server.
//!
//! Who runs what:
//! - [`publisher::FeedPublisher`] belongs to the engine thread: it packs each ITCH message the
//!   state machine emits into MoldUDP64 packets and multicasts them. No thread of its own.
//! - [`rerequest::RerequestServer`] runs on its own thread, answering retransmission requests
//!   from the [`crate::stream::StreamReader`] of the session's ITCH messages.
//! - [`glimpse::GlimpseServer`] runs on its own thread (plus one short-lived thread per snapshot
//!   client, bounded). The book lives on the engine thread, so snapshots are asked for over a
//!   bounded channel that the engine answers between two inputs
//!   ([`glimpse::SnapshotDesk::answer_snapshot_requests`]).
//! - [`receiver`] is the client side (tools and end-to-end tests): a pinned multicast receiver
//!   with gap tracking and a re-request client.
//!
//! The engine loop, per iteration (one input applied, or none when idle):
//! 1. for each ITCH message the input produced: `itch_stream.append(bytes)` then
//!    `publisher.publish(bytes, now_ns)` — same order, so `publisher.next_sequence()` stays
//!    `itch_stream.len() + 1`;
//! 2. when no further input is ready: `publisher.flush(now_ns)`;
//! 3. every iteration: `publisher.poll_timers(now_ns)` and
//!    `snapshot_desk.answer_snapshot_requests(&exchange, publisher.next_sequence(), ts)`
//!    (between two inputs, never inside one);
//! 4. after the end-of-day System Event `C`: `publisher.end_of_session(now_ns)`;
//! 5. when parking: wake by `publisher.next_deadline_ns()`, or on the snapshot [`crate::wake::Waker`].
//!
//! Multicast is always pinned to the configured interface (DESIGN.md 6): the sender sets
//! `IP_MULTICAST_IF`, receivers join on the interface address. Never unpinned.

pub mod glimpse;
pub mod publisher;
pub mod receiver;
pub mod rerequest;

#[cfg(test)]
mod tests;

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

/// How long a server thread blocks in one receive/accept before looking at its stop flag: the
/// bound on how late `stop` takes effect.
pub const STOP_POLL_MS: u64 = 100;

pub(crate) fn stop_poll() -> Duration {
    Duration::from_millis(STOP_POLL_MS)
}

/// A server thread that runs until stopped. Dropping the handle stops it too.
pub struct ServerHandle {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
    local_addr: SocketAddr,
}

impl ServerHandle {
    pub(crate) fn new(
        stop: Arc<AtomicBool>,
        thread: JoinHandle<()>,
        local_addr: SocketAddr,
    ) -> ServerHandle {
        ServerHandle {
            stop,
            thread: Some(thread),
            local_addr,
        }
    }

    /// The address actually bound (tests bind port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// Ask the thread to stop and wait for it (at most about [`STOP_POLL_MS`] plus the time
    /// to finish what it is doing).
    pub fn stop(mut self) {
        self.stop_and_join();
    }

    fn stop_and_join(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(thread) = self.thread.take()
            && thread.join().is_err()
        {
            tracing::error!(addr = %self.local_addr, "market-data server thread panicked");
        }
    }
}

impl Drop for ServerHandle {
    fn drop(&mut self) {
        self.stop_and_join();
    }
}
