//! One TCP connection of the order-entry gateway: framing in, a fixed write buffer out.

use super::Admitted;
use crate::stream::StreamReader;
use crate::wire::soupbin::{self, FrameReader, HEADER_LEN};
use mio::net::TcpStream;
use std::io::{self, Read, Write};
use std::net::SocketAddr;

/// Bytes of the per-connection write buffer (packets wait here for the socket).
pub(crate) const WRITE_BUFFER_BYTES: usize = 64 << 10;
/// Bytes of the per-connection read buffer: one read takes everything a busy client has sent
/// since the last turn (about 1,300 Enter Orders), so the gateway sequences it as one batch
/// instead of a read per kilobyte. Bounds how much input one read hands to the sequencer.
pub(crate) const READ_BUFFER_BYTES: usize = 64 << 10;
const _: () = assert!(READ_BUFFER_BYTES >= 2 + soupbin::CLIENT_MAX_PACKET_LEN);

/// A connection's write and read buffers, pooled by the gateway.
pub(crate) type Buffers = (Box<[u8]>, Box<[u8]>);

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum State {
    AwaitingLogin,
    /// Wrong credentials from a source in backoff: Login Rejected `reason` goes out at
    /// `due_ns`, then the connection closes. Nothing more is read from it.
    Rejecting {
        reason: u8,
        due_ns: u64,
    },
    LoggedIn {
        session: Admitted,
        /// Sequence number of the next message to copy into the write buffer.
        next_seq: u64,
        /// Has this session ever been level with the live stream (replay finished)?
        caught_up: bool,
    },
}

pub(crate) struct Connection {
    pub stream: TcpStream,
    pub peer: SocketAddr,
    pub reader: FrameReader,
    pub state: State,
    out: Box<[u8]>,
    out_start: usize,
    out_end: usize,
    pub opened_ns: u64,
    pub last_recv_ns: u64,
    pub last_send_ns: u64,
    /// Last time the socket took bytes while we had some to write.
    pub last_progress_ns: u64,
    /// After Logout, End of Session or an error: close once the write buffer is drained.
    pub closing: bool,
    /// The client sent Logout Request: its session ended cleanly (no cancel on disconnect).
    pub logged_out: bool,
}

impl Connection {
    /// `out` is a write buffer of [`WRITE_BUFFER_BYTES`] and `input` a read buffer of
    /// [`READ_BUFFER_BYTES`], both from the gateway's pool.
    pub fn new(
        stream: TcpStream,
        peer: SocketAddr,
        now_ns: u64,
        (out, input): Buffers,
    ) -> Connection {
        assert_eq!(out.len(), WRITE_BUFFER_BYTES);
        assert_eq!(input.len(), READ_BUFFER_BYTES);
        Connection {
            stream,
            peer,
            reader: FrameReader::with_buffer(soupbin::CLIENT_MAX_PACKET_LEN, input),
            state: State::AwaitingLogin,
            out,
            out_start: 0,
            out_end: 0,
            opened_ns: now_ns,
            last_recv_ns: now_ns,
            last_send_ns: now_ns,
            last_progress_ns: now_ns,
            closing: false,
            logged_out: false,
        }
    }

    /// Not logged in (yet): the connections the pre-login budgets count and may evict.
    pub fn is_pre_login(&self) -> bool {
        !matches!(self.state, State::LoggedIn { .. })
    }

    /// Give the write and read buffers back (for the pool) as the connection goes.
    pub fn take_buffers(&mut self) -> Buffers {
        self.out_start = 0;
        self.out_end = 0;
        (std::mem::take(&mut self.out), self.reader.take_buffer())
    }

    pub fn pending_bytes(&self) -> usize {
        self.out_end - self.out_start
    }

    fn space(&mut self) -> &mut [u8] {
        if self.out_start == self.out_end {
            self.out_start = 0;
            self.out_end = 0;
        } else if self.out_start > 0
            && self.out.len() - self.out_end < soupbin::MAX_PACKET_LEN.min(512)
        {
            self.out.copy_within(self.out_start..self.out_end, 0);
            self.out_end -= self.out_start;
            self.out_start = 0;
        }
        &mut self.out[self.out_end..]
    }

    /// Queue one packet built by `write` (which returns its length); false if it does not fit.
    pub fn queue(&mut self, needed: usize, write: impl FnOnce(&mut [u8]) -> usize) -> bool {
        let space = self.space();
        if space.len() < needed {
            return false;
        }
        let n = write(&mut space[..needed]);
        assert!(n <= needed);
        self.out_end += n;
        true
    }

    /// Copy sequenced messages from the account's stream into the write buffer as space allows.
    pub fn fill_from(&mut self, stream: &StreamReader) {
        let State::LoggedIn { next_seq, .. } = self.state else {
            return;
        };
        let mut seq = next_seq;
        let last = stream.len();
        while seq <= last {
            let message = stream.get(seq).expect("published message");
            let copied = self.queue(HEADER_LEN + message.len(), |buf| {
                buf[HEADER_LEN..].copy_from_slice(message);
                soupbin::write_header(buf, soupbin::kind::SEQUENCED_DATA, message.len())
            });
            if !copied {
                break;
            }
            seq += 1;
        }
        if let State::LoggedIn {
            next_seq,
            caught_up,
            ..
        } = &mut self.state
        {
            *next_seq = seq;
            *caught_up |= seq > last;
        }
    }

    /// Has the stream released messages not yet copied into the write buffer?
    pub fn has_unsent(&self, stream: &StreamReader) -> bool {
        match self.state {
            State::LoggedIn { next_seq, .. } => next_seq <= stream.len(),
            _ => false,
        }
    }

    /// Write as much of the buffer as the socket takes. Err = the connection is broken.
    pub fn flush(&mut self, now_ns: u64) -> io::Result<()> {
        let mut rounds = 0;
        while self.out_start < self.out_end {
            match self.stream.write(&self.out[self.out_start..self.out_end]) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => {
                    self.out_start += n;
                    self.last_send_ns = now_ns;
                    self.last_progress_ns = now_ns;
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
            rounds += 1;
            assert!(rounds < 1 << 20, "flush loop without progress");
        }
        if self.out_start == self.out_end {
            self.last_progress_ns = now_ns;
        }
        Ok(())
    }

    /// Read what the socket has into the framing buffer (one `read`).
    pub fn receive(&mut self, now_ns: u64) -> io::Result<Received> {
        let space = self.reader.read_space();
        if space.is_empty() {
            return Ok(Received::NoSpace);
        }
        let asked = space.len();
        match self.stream.read(space) {
            Ok(0) => Ok(Received::Closed),
            Ok(n) => {
                self.reader.commit(n);
                self.last_recv_ns = now_ns;
                Ok(Received::Bytes { short: n < asked })
            }
            Err(e)
                if e.kind() == io::ErrorKind::WouldBlock
                    || e.kind() == io::ErrorKind::Interrupted =>
            {
                Err(io::ErrorKind::WouldBlock.into())
            }
            Err(e) => Err(e),
        }
    }
}

/// What one [`Connection::receive`] got.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Received {
    /// Bytes; `short`: fewer than there was room for, so the socket had no more at that
    /// moment (a TCP stream's `read` returns what is queued, up to the room).
    Bytes { short: bool },
    /// The framing buffer is full: frame what it holds before reading more.
    NoSpace,
    /// The peer closed its side.
    Closed,
}
