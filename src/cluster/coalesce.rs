//! Fewer, larger messages: raft-rs sends one append per proposal to every follower, and a
//! follower answers each. A loop turn that proposes a batch of N inputs would send N appends
//! per follower and get N answers back — N frames to encode, write, read, decode and step on
//! both sides, for what one append carries. This pass merges, per destination and in order:
//!
//! - consecutive appends that continue each other (the second starts where the first's
//!   entries end, or where it starts if it has none, same term), into one append with both
//!   entries and the later commit index — what raft itself sends when a follower's flow
//!   control was paused (commit-index-only appends fold in the same way);
//! - consecutive accepting append responses of one term, into the last (highest index): the
//!   leader's progress takes the highest anyway, and a rejection is never merged.
//!
//! (raft-rs's own `batch_append` merges into an empty append for a later index; see node.rs.)

use protobuf::Message as _;
use raft::eraftpb::{Entry, Message, MessageType};

/// An entry's bytes in an encoded append: what raft's own `max_size_per_msg` counts, plus its
/// field key and length.
fn encoded_bytes(entry: &Entry) -> u64 {
    u64::from(entry.compute_size()) + 6
}

/// Entry bytes of `message` as an append encodes them (0 for what carries no entries).
fn entry_bytes(message: &Message) -> u64 {
    message.entries.iter().map(encoded_bytes).sum()
}

/// Merge what can be merged in `messages` (sent in this order), keeping each destination's
/// order; an append grows to `append_bytes_max` encoded entry bytes at most (one entry always
/// fits). Each message's entries are sized once and moved, not copied, into the one they join.
pub fn coalesce(messages: &mut Vec<Message>, append_bytes_max: u64) {
    // (destination, index in `messages` of the last message kept for it, its entry bytes)
    let mut last_kept: [(u64, usize, u64); 8] = [(0, 0, 0); 8];
    let mut destinations = 0usize;
    let mut kept = 0usize;
    for i in 0..messages.len() {
        let mut message = std::mem::take(&mut messages[i]);
        let bytes = entry_bytes(&message);
        let slot = last_kept[..destinations]
            .iter()
            .position(|&(to, _, _)| to == message.to);
        if let Some(slot) = slot {
            let (_, at, kept_bytes) = &mut last_kept[slot];
            let fits = *kept_bytes + bytes <= append_bytes_max;
            if absorb(&mut messages[*at], &mut message, fits) {
                *kept_bytes += bytes;
                continue;
            }
        }
        let to = message.to;
        messages[kept] = message;
        match slot {
            Some(slot) => last_kept[slot] = (to, kept, bytes),
            None if destinations < last_kept.len() => {
                last_kept[destinations] = (to, kept, bytes);
                destinations += 1;
            }
            // More destinations than slots (not in a cluster of ≤ 9): kept as they are.
            None => {}
        }
        kept += 1;
    }
    messages.truncate(kept);
}

/// Fold `next` into `kept` if the two say what one message would (`fits`: the entries of
/// both stay within the append size); whether it did. What is folded is moved out of `next`.
fn absorb(kept: &mut Message, next: &mut Message, fits: bool) -> bool {
    if kept.term != next.term || kept.get_msg_type() != next.get_msg_type() {
        return false;
    }
    match next.get_msg_type() {
        MessageType::MsgAppend => {
            // Where `kept` leaves the follower's log: after its last entry, or where it
            // starts if it carries none (a commit-index-only append).
            let (end_index, end_term) = kept
                .entries
                .last()
                .map_or((kept.index, kept.log_term), |e| (e.index, e.term));
            let continues = next.index == end_index && next.log_term == end_term;
            if !continues || !fits {
                return false;
            }
            kept.mut_entries().extend(next.take_entries());
            kept.commit = kept.commit.max(next.commit);
            kept.commit_term = kept.commit_term.max(next.commit_term);
            true
        }
        MessageType::MsgAppendResponse => {
            if kept.reject || next.reject || next.index < kept.index {
                return false;
            }
            *kept = std::mem::take(next);
            true
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn append(to: u64, index: u64, entries: &[u64], commit: u64) -> Message {
        let mut m = Message::default();
        m.set_msg_type(MessageType::MsgAppend);
        (m.from, m.to, m.term, m.index, m.log_term, m.commit) = (1, to, 2, index, 2, commit);
        let entries: Vec<Entry> = entries
            .iter()
            .map(|&index| Entry {
                term: 2,
                index,
                data: vec![7u8; 10].into(),
                ..Entry::default()
            })
            .collect();
        m.set_entries(entries.into());
        m
    }

    fn response(index: u64, reject: bool) -> Message {
        let mut m = Message::default();
        m.set_msg_type(MessageType::MsgAppendResponse);
        (m.from, m.to, m.term, m.index, m.reject) = (2, 1, 2, index, reject);
        m
    }

    fn indexes(m: &Message) -> Vec<u64> {
        m.entries.iter().map(|e| e.index).collect()
    }

    #[test]
    fn continuing_appends_merge_per_destination_in_order() {
        let mut messages = vec![
            append(2, 10, &[11], 10),
            append(3, 10, &[11], 10),
            append(2, 11, &[12, 13], 11),
            append(3, 11, &[12], 11),
            append(2, 13, &[14], 12),
        ];
        coalesce(&mut messages, 1 << 20);
        assert_eq!(messages.len(), 2);
        assert_eq!((messages[0].to, messages[0].index), (2, 10));
        assert_eq!(indexes(&messages[0]), vec![11, 12, 13, 14]);
        assert_eq!(messages[0].commit, 12, "the latest commit index travels");
        assert_eq!((messages[1].to, indexes(&messages[1])), (3, vec![11, 12]));
    }

    #[test]
    fn what_does_not_continue_is_kept_apart() {
        // A gap, another term, and the size limit.
        let mut gap = vec![append(2, 10, &[11], 10), append(2, 12, &[13], 10)];
        coalesce(&mut gap, 1 << 20);
        assert_eq!(gap.len(), 2);
        let mut other_term = vec![append(2, 10, &[11], 10), append(2, 11, &[12], 10)];
        other_term[1].term = 3;
        coalesce(&mut other_term, 1 << 20);
        assert_eq!(other_term.len(), 2);
        let mut big = vec![append(2, 10, &[11], 10), append(2, 11, &[12], 10)];
        coalesce(&mut big, 30);
        assert_eq!(big.len(), 2, "two encoded entries exceed 30 bytes");
    }

    #[test]
    fn commit_only_appends_fold_into_their_neighbours() {
        // Commit-only (empty) appends before and after entries, as raft sends them when an
        // acknowledgement and new proposals fall in one turn.
        let mut messages = vec![
            append(2, 10, &[], 10),
            append(2, 10, &[11, 12], 10),
            append(2, 12, &[], 11),
        ];
        coalesce(&mut messages, 1 << 20);
        assert_eq!(messages.len(), 1);
        assert_eq!((messages[0].index, messages[0].log_term), (10, 2));
        assert_eq!(indexes(&messages[0]), vec![11, 12]);
        assert_eq!(messages[0].commit, 11);
        // An empty append for another place in the log stays apart.
        let mut apart = vec![append(2, 10, &[11], 10), append(2, 9, &[], 10)];
        coalesce(&mut apart, 1 << 20);
        assert_eq!(apart.len(), 2);
    }

    #[test]
    fn accepting_responses_keep_the_last_and_rejections_stay() {
        let mut messages = vec![
            response(11, false),
            response(12, false),
            response(14, false),
        ];
        coalesce(&mut messages, 1 << 20);
        assert_eq!(messages.len(), 1);
        assert_eq!(messages[0].index, 14);
        let mut with_reject = vec![response(11, false), response(9, true), response(12, false)];
        coalesce(&mut with_reject, 1 << 20);
        assert_eq!(with_reject.len(), 3, "a rejection is never folded");
        assert!(with_reject[1].reject);
    }
}
