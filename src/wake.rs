//! Waking a thread that sleeps in its poller: the gateway thread when the output stage has
//! released replies or a GLIMPSE request is queued (a mio `Waker`), or any parked thread.

use std::sync::Arc;

/// Wakes one sleeping thread; cheap to clone and call from any thread.
pub type Waker = Arc<dyn Fn() + Send + Sync>;
