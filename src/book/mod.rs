//! The order book: price levels with FIFO queues, an order pool allocated once, price-time
//! matching and time-in-force expiry. Pure: no I/O, no clock, no randomness, no allocation
//! after [`OrderBook::new`].
//!
//! Shape (one book per symbol):
//! - an **order pool** (`Vec<Slot<T>>` sized once) with an intrusive free list; an
//!   [`OrderHandle`] is the slot index, so cancel and reduce are O(1);
//! - a **level pool** of the same kind; each level keeps two FIFO queues, displayed orders
//!   first and hidden orders second (DESIGN.md 4: within a price, displayed orders trade first);
//! - a **ladder** per side: a sorted array of `(key, level)` with the best price at the end,
//!   so the best price is O(1), removing an emptied best level is a pop, and inserting a new
//!   level near the top moves only the few entries above it;
//! - an **expiry wheel** of one-second buckets with intrusive links, so an order with a
//!   time-to-live costs O(1) to add, remove and expire.
//!
//! Each order carries a caller-defined `Copy` payload `T` (the exchange stores its token,
//! account and reference number there), reported back on every fill and removal.

mod expiry;
mod ladder;
mod level;
mod order_book;
mod pool;

pub use order_book::{BookConfig, Fill, OrderBook, OrderView, Removal};
pub use pool::OrderHandle;

#[cfg(test)]
mod tests;
