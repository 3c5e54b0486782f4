//! The index of ready messages, in receive order: oldest send first, ties by sequence number.
//!
//! While a queue's sequence order is its send order (see the `queue` module: true unless a
//! message was inserted out of order), the index needs only sequence numbers, half the memory of
//! (sent_at_ms, seq) pairs for a backlog of ready messages. Otherwise it keys by both.

use std::collections::BTreeSet;
use std::ops::Bound::{Excluded, Unbounded};

/// Ready messages in receive order.
#[derive(Debug)]
pub(crate) enum ReadyIndex {
    /// Sequence order is send order.
    BySeq(BTreeSet<u64>),
    /// Keyed (sent_at_ms, seq).
    BySent(BTreeSet<(u64, u64)>),
}

impl Default for ReadyIndex {
    fn default() -> Self {
        ReadyIndex::BySeq(BTreeSet::new())
    }
}

impl ReadyIndex {
    pub(crate) fn len(&self) -> usize {
        match self {
            ReadyIndex::BySeq(set) => set.len(),
            ReadyIndex::BySent(set) => set.len(),
        }
    }

    pub(crate) fn insert(&mut self, sent_at_ms: u64, seq: u64) {
        match self {
            ReadyIndex::BySeq(set) => set.insert(seq),
            ReadyIndex::BySent(set) => set.insert((sent_at_ms, seq)),
        };
    }

    /// Whether it was there.
    pub(crate) fn remove(&mut self, sent_at_ms: u64, seq: u64) -> bool {
        match self {
            ReadyIndex::BySeq(set) => set.remove(&seq),
            ReadyIndex::BySent(set) => set.remove(&(sent_at_ms, seq)),
        }
    }

    pub(crate) fn contains(&self, sent_at_ms: u64, seq: u64) -> bool {
        match self {
            ReadyIndex::BySeq(set) => set.contains(&seq),
            ReadyIndex::BySent(set) => set.contains(&(sent_at_ms, seq)),
        }
    }

    /// The sequence number of the first ready message after `after` (a (sent_at_ms, seq) key)
    /// in receive order, or of the first of all.
    pub(crate) fn next_after(&self, after: Option<(u64, u64)>) -> Option<u64> {
        match (self, after) {
            (ReadyIndex::BySeq(set), None) => set.first().copied(),
            (ReadyIndex::BySeq(set), Some((_, seq))) => {
                set.range((Excluded(seq), Unbounded)).next().copied()
            }
            (ReadyIndex::BySent(set), None) => set.first().map(|&(_, seq)| seq),
            (ReadyIndex::BySent(set), Some(key)) => set
                .range((Excluded(key), Unbounded))
                .next()
                .map(|&(_, seq)| seq),
        }
    }

    /// Switches to keys by send time (the queue's sequence order stopped being send order).
    pub(crate) fn key_by_sent(&mut self, sent_at_ms_of: impl Fn(u64) -> u64) {
        if let ReadyIndex::BySeq(set) = self {
            let by_sent = set.iter().map(|&seq| (sent_at_ms_of(seq), seq)).collect();
            *self = ReadyIndex::BySent(by_sent);
        }
    }

    /// Empties the index; sequence order is send order again.
    pub(crate) fn clear(&mut self) {
        *self = ReadyIndex::default();
    }
}
