//! Every fixed capacity of the venue in one place, with the relationships between them
//! asserted at compile time (constants) and at start-up (configured sizes), as TigerBeetle's
//! `constants.zig` does. A bound that is not here is a configured one (`[limits]`,
//! `[engine] ring_slots`, `[gateway] max_connections`, ...) and [`check`] relates those to
//! these.

use crate::config::Config;
use crate::wire::{itch, ouch, soupbin};

/// Largest encoded OUCH or ITCH message (the output stage's scratch buffer).
pub const MESSAGE_BYTES_MAX: usize = 96;
const _: () = assert!(itch::MAX_MESSAGE_LEN <= MESSAGE_BYTES_MAX);
const _: () = assert!(ouch::MAX_MESSAGE_LEN <= MESSAGE_BYTES_MAX);

/// The session's ITCH store (a sparse file mapped whole, see [`crate::stream`]): 1 TiB of
/// messages and 64 Gi of them (16 bytes a message on average; the index is 8 bytes a
/// message). A day at 1M ITCH messages/s of 30 bytes fills it in 10.2 hours.
pub const ITCH_STORE: crate::stream::Caps = crate::stream::Caps::for_bytes(1 << 40);
/// Each account's OUCH store: its share of [`OUCH_STORES_BYTES`], at most
/// [`OUCH_STORE_BYTES_MAX`] ([`ouch_store`]).
pub const OUCH_STORE_BYTES_MAX: u64 = 512 << 30;
/// All accounts' OUCH stores together (reserved address space, not memory or disk).
pub const OUCH_STORES_BYTES: u64 = 4 << 40;
const _: () = assert!(ITCH_STORE.bytes >= ITCH_STORE.messages * 8);

/// The capacities of each account's OUCH store when the venue has `accounts` (at most 65,535:
/// at least 64 MiB each). With 8 accounts or fewer, 512 GiB each: an account sent 1M OUCH
/// messages/s of 40 bytes fills it in 3.8 hours, one of 8 sharing that rate in 30 hours.
pub fn ouch_store(accounts: usize) -> crate::stream::Caps {
    let share = OUCH_STORES_BYTES / accounts.max(1) as u64;
    crate::stream::Caps::for_bytes(share.min(OUCH_STORE_BYTES_MAX) / 4096 * 4096)
}

/// Batches whose outputs may wait for their release at once (the output stage keeps one
/// checkpoint per batch). The sequencer stops taking input when this many are unreleased.
pub const UNRELEASED_BATCHES_MAX: usize = 64;

/// Bytes reserved at start-up for the encoded part of a state snapshot: counters, halts,
/// blocks, token free lists and resting orders (the token tables' slot arrays, the bulk, are
/// lent, not copied: `exchange::state::LentState`). It grows past this only if that part is
/// larger (45 bytes a resting order); the buffer is reused by every later snapshot.
pub const SNAPSHOT_BUFFER_BYTES: usize = 4 << 20;

/// The output stage runs its feed timers (heartbeats, the partial packet's hold) this often.
pub const OUTPUT_TIMERS_INTERVAL_NS: u64 = 10_000_000;

/// Ring slots the front keeps free for one input and what may follow it (a command per
/// shard, its plan, two markers, a snapshot).
pub const RING_RESERVE_SLOTS: u64 = 8;
/// Smallest ring: room for the reserve many times over.
pub const RING_SLOTS_MIN: u32 = 64;
const _: () = assert!(RING_SLOTS_MIN as u64 >= 4 * RING_RESERVE_SLOTS);
/// Largest ring: the commands one shard can hold (its ring and the batch it drained from it,
/// [`shard_in_flight_max`]) must stay within what a front built for replay awaits
/// ([`SPLIT_IN_FLIGHT_MAX`]: the daemon's sharded front is the replay's).
pub const RING_SLOTS_MAX: u32 = 1 << 18;
/// Commands a replay's (and so the daemon's) sharded front lets be on their way to one shard.
pub const SPLIT_IN_FLIGHT_MAX: usize = 1 << 20;
const _: () = assert!(shard_in_flight_max(RING_SLOTS_MAX as usize) <= SPLIT_IN_FLIGHT_MAX);

/// Commands on their way to one shard thread at most, with rings of `slots`: the ring full
/// and the batch the shard drained from it before (it drains at most a ring's worth, and
/// works through it before it drains again), plus the one being published. Also the most
/// verdicts its channel can hold: the front takes a shard's verdicts before every command it
/// sends that shard.
pub const fn shard_in_flight_max(slots: usize) -> usize {
    2 * slots + 1
}

/// Longest journal record payload of an OUCH input: the account, then the message.
pub const OUCH_RECORD_BYTES_MAX: usize = 2 + ouch::inbound_len::ENTER;
const _: () = assert!(ouch::inbound_len::ENTER >= ouch::inbound_len::REPLACE);

/// Largest MoldUDP64 datagram DESIGN.md 5 allows, header included.
pub const MOLDUDP64_PAYLOAD_BYTES_MAX: u16 = 1_400;
/// Smallest datagram that still carries the longest ITCH message in one block.
pub const MOLDUDP64_PAYLOAD_BYTES_MIN: u16 = 20 + 2 + itch::MAX_MESSAGE_LEN as u16;

/// Longest interval of the sequencer's timer input (`engine.tick_ms`). An order expires at
/// the first timer input at or after its deadline, so expiry lands up to one interval plus
/// the host's scheduling delay after it; DESIGN.md 4 promises within one second, and this
/// leaves at least half of it to a loaded host.
pub const EXPIRY_TICK_MS_MAX: u64 = 500;

/// Check the configured sizes against each other and against the constants above; one line
/// naming the key on failure.
pub fn check(config: &Config) -> Result<(), String> {
    let slots = config.engine.ring_slots;
    if !slots.is_power_of_two() || !(RING_SLOTS_MIN..=RING_SLOTS_MAX).contains(&slots) {
        return Err(format!(
            "engine.ring_slots must be a power of two in {RING_SLOTS_MIN}..={RING_SLOTS_MAX}"
        ));
    }
    if !(1..=EXPIRY_TICK_MS_MAX).contains(&config.engine.tick_ms) {
        return Err(format!(
            "engine.tick_ms must be 1..={EXPIRY_TICK_MS_MAX} (orders expire within one second of their deadline)"
        ));
    }
    if config.engine.shards == 0 || config.engine.shards as usize > config.symbols.len() {
        return Err("engine.shards must be 1..=the number of symbols".into());
    }
    let payload = config.feed.max_payload_bytes;
    if !(MOLDUDP64_PAYLOAD_BYTES_MIN..=MOLDUDP64_PAYLOAD_BYTES_MAX).contains(&payload) {
        return Err(format!(
            "feed.max_payload_bytes must be {MOLDUDP64_PAYLOAD_BYTES_MIN}..={MOLDUDP64_PAYLOAD_BYTES_MAX}"
        ));
    }
    let outbound = config.gateway.outbound_buffer_bytes as usize;
    if outbound < soupbin::HEADER_LEN + ouch::MAX_MESSAGE_LEN {
        return Err("gateway.outbound_buffer_bytes must hold one OUCH packet".into());
    }
    let l = config.limits;
    if l.orders_per_symbol == 0 || l.levels_per_side == 0 || l.tokens_per_account == 0 {
        return Err("every [limits] size must be positive".into());
    }
    if l.orders_per_symbol >= u32::MAX / 2 || l.levels_per_side >= u32::MAX / 4 {
        return Err("[limits] sizes must fit the books' 32-bit slot numbers".into());
    }
    let record = crate::journal::record::record_span_bytes(OUCH_RECORD_BYTES_MAX as u64);
    if u64::from(config.journal.max_payload_bytes) < OUCH_RECORD_BYTES_MAX as u64
        || config.journal.segment_bytes < 16 * record
    {
        return Err("journal sizes must hold at least one OUCH record per segment".into());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_config_passes_and_bad_sizes_name_their_key() {
        let mut c = Config::embedded_default();
        assert_eq!(check(&c), Ok(()));
        c.engine.ring_slots = 32;
        assert!(check(&c).unwrap_err().contains("engine.ring_slots"));
        c = Config::embedded_default();
        c.engine.shards = 4;
        assert!(check(&c).unwrap_err().contains("engine.shards"));
        c = Config::embedded_default();
        c.feed.max_payload_bytes = 1_500;
        assert!(check(&c).unwrap_err().contains("feed.max_payload_bytes"));
        // A timer input a second apart would let an order outlive its deadline by more than
        // the second DESIGN.md 4 allows (the interval plus the host's delay).
        for tick_ms in [0, EXPIRY_TICK_MS_MAX + 1, 1_000] {
            c = Config::embedded_default();
            c.engine.tick_ms = tick_ms;
            assert!(
                check(&c).unwrap_err().contains("engine.tick_ms"),
                "{tick_ms}"
            );
        }
    }
}
