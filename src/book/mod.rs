//! The order book: price levels with FIFO queues, an order pool allocated once, price-time
//! matching and time-in-force expiry. Pure: no I/O, no clock, no randomness, no allocation
//! after [`OrderBook::new`].
//!
//! Shape (one book per symbol):
//! - an **order pool** (`Vec<Slot<T>>` sized once) with an intrusive free list; an
//!   [`OrderHandle`] is the slot index, so cancel and reduce are O(1);
//! - a **level pool** of the same kind; each level keeps two FIFO queues, displayed orders
//!   first and hidden orders second (DESIGN.md 4: within a price, displayed orders trade first);
//! - a **price index** per side (`index.rs`): a band of price slots around the best price with
//!   a 64-ary hierarchical bitmap, so finding, opening and closing a price anywhere in the
//!   band is O(1) and the next best price is three word reads; prices outside the band sit
//!   in a sorted overflow ladder, and the band is laid out again when the market moves;
//! - an **expiry wheel** of one-second buckets with intrusive links, so an order with a
//!   time-to-live costs O(1) to add, remove and expire.
//!
//! Each order carries a caller-defined `Copy` payload `T` (the exchange stores its token,
//! account and reference number there), reported back on every fill and removal.

mod bitmap;
mod expiry;
mod index;
mod ladder;
mod level;
mod order_book;
mod pool;

pub use order_book::{BookConfig, Fill, OrderBook, OrderView, Removal, acceptable};
pub use pool::OrderHandle;

#[cfg(test)]
mod tests;
