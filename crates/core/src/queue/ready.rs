//! The index of ready messages, in receive order: oldest send first, ties by sequence number.
//!
//! While a queue's sequence order is its send order (see the `queue` module: true unless a
//! message was inserted out of order), the index needs only sequence numbers ([`SeqSet`]).
//! Otherwise it keys by (sent_at_ms, seq).

use std::cmp::Ordering;
use std::collections::btree_map::Entry;
use std::collections::{BTreeMap, BTreeSet};
use std::ops::Bound::{Excluded, Unbounded};

/// Ready messages in receive order.
#[derive(Debug)]
pub(crate) enum ReadyIndex {
    /// Sequence order is send order.
    BySeq(SeqSet),
    /// Keyed (sent_at_ms, seq).
    BySent(BTreeSet<(u64, u64)>),
}

impl Default for ReadyIndex {
    fn default() -> Self {
        ReadyIndex::BySeq(SeqSet::default())
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
            ReadyIndex::BySeq(set) => set.remove(seq),
            ReadyIndex::BySent(set) => set.remove(&(sent_at_ms, seq)),
        }
    }

    pub(crate) fn contains(&self, sent_at_ms: u64, seq: u64) -> bool {
        match self {
            ReadyIndex::BySeq(set) => set.contains(seq),
            ReadyIndex::BySent(set) => set.contains(&(sent_at_ms, seq)),
        }
    }

    /// The sequence number of the first ready message after `after` (a (sent_at_ms, seq) key)
    /// in receive order, or of the first of all.
    pub(crate) fn next_after(&self, after: Option<(u64, u64)>) -> Option<u64> {
        match (self, after) {
            (ReadyIndex::BySeq(set), None) => set.first(),
            (ReadyIndex::BySeq(set), Some((_, seq))) => set.next_after(seq),
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
            let by_sent = set.iter().map(|seq| (sent_at_ms_of(seq), seq)).collect();
            *self = ReadyIndex::BySent(by_sent);
        }
    }

    /// Empties the index; sequence order is send order again.
    pub(crate) fn clear(&mut self) {
        *self = ReadyIndex::default();
    }
}

/// A set of sequence numbers, as a bitmap of 64-bit words kept in a B-tree by word: the word
/// `w` holds the numbers `64 w` to `64 w + 63`, and a word with none is not kept.
///
/// A queue's ready messages are mostly runs of consecutive numbers (those sent one after
/// another and not yet received), taken from the front and added at the back. So here a send
/// sets a bit in the last word and a receive clears one in the first, both found along the
/// tree's edge without a key comparison; and the tree holds one entry per 64 numbers rather
/// than one per number: a backlog of consecutive numbers takes a bit each, where a
/// `BTreeSet<u64>` took over 8 bytes. A sparse set takes at worst a key and a word per number,
/// twice the `BTreeSet`'s 8 bytes.
#[derive(Debug, Default)]
pub(crate) struct SeqSet {
    words: BTreeMap<u64, u64>,
    len: usize,
}

/// A number's word, and its bit in that word.
fn word_and_bit(seq: u64) -> (u64, u64) {
    (seq >> 6, 1 << (seq & 63))
}

impl SeqSet {
    fn len(&self) -> usize {
        self.len
    }

    /// Adds `seq`; whether it was not there.
    fn insert(&mut self, seq: u64) -> bool {
        let (word, bit) = word_and_bit(seq);
        let bits = match self.words.last_entry() {
            Some(last) if *last.key() == word => last.into_mut(),
            _ => self.words.entry(word).or_insert(0),
        };
        let added = *bits & bit == 0;
        *bits |= bit;
        self.len += usize::from(added);
        added
    }

    /// Removes `seq`; whether it was there.
    fn remove(&mut self, seq: u64) -> bool {
        let (word, bit) = word_and_bit(seq);
        let entry = match self.words.first_entry() {
            Some(first) if *first.key() == word => first,
            _ => match self.words.entry(word) {
                Entry::Occupied(entry) => entry,
                Entry::Vacant(_) => return false,
            },
        };
        let removed = *entry.get() & bit != 0;
        if *entry.get() == bit {
            entry.remove();
        } else {
            let mut entry = entry;
            *entry.get_mut() &= !bit;
        }
        self.len -= usize::from(removed);
        removed
    }

    fn contains(&self, seq: u64) -> bool {
        let (word, bit) = word_and_bit(seq);
        self.words.get(&word).is_some_and(|bits| bits & bit != 0)
    }

    /// The smallest number.
    fn first(&self) -> Option<u64> {
        let (&word, &bits) = self.words.first_key_value()?;
        Some(word << 6 | u64::from(bits.trailing_zeros()))
    }

    /// The smallest number above `seq`.
    fn next_after(&self, seq: u64) -> Option<u64> {
        let (word, bit) = word_and_bit(seq);
        // The bits above `seq`'s in its own word, then any later word (none is empty).
        let above = !(bit | (bit - 1));
        let number = |at: u64, bits: u64| at << 6 | u64::from(bits.trailing_zeros());
        let later = |words: std::collections::btree_map::Range<'_, u64, u64>| {
            words
                .map(|(&at, &bits)| (at, if at == word { bits & above } else { bits }))
                .find(|&(_, bits)| bits != 0)
                .map(|(at, bits)| number(at, bits))
        };
        // A receive asks for the number after the one it just took out, which is usually in
        // the first word or before it: answered from the first word, or from the one after
        // it, without searching the tree for `seq`'s.
        let (&first, &bits) = self.words.first_key_value()?;
        match first.cmp(&word) {
            Ordering::Greater => Some(number(first, bits)),
            Ordering::Equal if bits & above != 0 => Some(number(first, bits & above)),
            Ordering::Equal => later(self.words.range((Excluded(word), Unbounded))),
            Ordering::Less => later(self.words.range(word..)),
        }
    }

    /// Every number, in order.
    fn iter(&self) -> impl Iterator<Item = u64> + '_ {
        self.words.iter().flat_map(|(&word, &bits)| {
            let mut bits = bits;
            std::iter::from_fn(move || {
                (bits != 0).then(|| {
                    let at = bits.trailing_zeros();
                    bits &= bits - 1;
                    word << 6 | u64::from(at)
                })
            })
        })
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    #[derive(Clone, Debug)]
    enum Op {
        Insert(u64),
        Remove(u64),
        Contains(u64),
        NextAfter(u64),
    }

    /// Numbers in a few hundred (so that words fill, empty and are shared), near the top of
    /// the range now and then (the last word, and `next_after` of the largest number).
    fn number() -> impl Strategy<Value = u64> {
        prop_oneof![
            8 => 0u64..300,
            1 => (u64::MAX - 130)..=u64::MAX,
        ]
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            4 => number().prop_map(Op::Insert),
            3 => number().prop_map(Op::Remove),
            1 => number().prop_map(Op::Contains),
            2 => number().prop_map(Op::NextAfter),
        ]
    }

    proptest! {
        /// The bitmap answers every operation as a `BTreeSet<u64>` does.
        #[test]
        fn the_seq_set_behaves_as_a_btree_set(ops in prop::collection::vec(op(), 0..400)) {
            let mut set = SeqSet::default();
            let mut model = BTreeSet::new();
            for op in ops {
                match op {
                    Op::Insert(seq) => prop_assert_eq!(set.insert(seq), model.insert(seq)),
                    Op::Remove(seq) => prop_assert_eq!(set.remove(seq), model.remove(&seq)),
                    Op::Contains(seq) => prop_assert_eq!(set.contains(seq), model.contains(&seq)),
                    Op::NextAfter(seq) => prop_assert_eq!(
                        set.next_after(seq),
                        model.range((Excluded(seq), Unbounded)).next().copied()
                    ),
                }
                prop_assert_eq!(set.len(), model.len());
                prop_assert_eq!(set.first(), model.first().copied());
                prop_assert!(set.words.values().all(|&bits| bits != 0), "an empty word is kept");
            }
            prop_assert_eq!(set.iter().collect::<Vec<_>>(), model.into_iter().collect::<Vec<_>>());
        }
    }
}
