//! A map from sequence number to message, laid out in sequence order.
//!
//! A queue's sequence numbers only grow, consumers mostly take the oldest messages, and a backlog
//! can hold ten million of them. A hash map would scatter consecutive messages over memory (a
//! cache miss per access at that size); this store keeps them in chunks of 256 consecutive
//! sequence numbers, so a consumer walking the backlog touches memory in order. A chunk is freed
//! when its last message goes, so one message that lives long (a stuck lease) pins only its own
//! chunk, and the gap before the next live chunk costs one pointer per 256 sequence numbers.
//!
//! Chunks are shared copy-on-write (`Arc`, changed through `Arc::make_mut`), so
//! [`SeqStore::frozen`] takes a consistent copy of the whole store for the price of one reference
//! count per chunk: a checkpoint freezes the store under the engine lock in about a millisecond
//! for ten million messages, then reads the frozen copy without the lock while traffic goes on.
//! A chunk that traffic changes while it is frozen is copied once (256 slots); chunks nobody
//! touches are never copied.

use std::collections::VecDeque;
use std::sync::Arc;

const CHUNK_BITS: u32 = 8;
const CHUNK_LEN: usize = 1 << CHUNK_BITS;

#[derive(Clone)]
struct Chunk<T> {
    slots: Box<[Option<T>]>,
    live: usize,
    /// No slot before this one is occupied, so the first value is found without a scan.
    first: usize,
}

/// Values keyed by a growing `u64` sequence number.
pub struct SeqStore<T> {
    chunks: VecDeque<Option<Arc<Chunk<T>>>>,
    /// Chunk number of `chunks[0]`.
    first_chunk: u64,
    len: usize,
}

impl<T> std::fmt::Debug for SeqStore<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SeqStore").field("len", &self.len).finish()
    }
}

impl<T> Default for SeqStore<T> {
    fn default() -> Self {
        SeqStore {
            chunks: VecDeque::new(),
            first_chunk: 0,
            len: 0,
        }
    }
}

fn split(seq: u64) -> (u64, usize) {
    (seq >> CHUNK_BITS, (seq as usize) & (CHUNK_LEN - 1))
}

impl<T: Clone> SeqStore<T> {
    /// Number of values stored.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the store is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    fn slot_index(&self, chunk: u64) -> Option<usize> {
        let index = chunk.checked_sub(self.first_chunk)?;
        (index < self.chunks.len() as u64).then_some(index as usize)
    }

    /// The value at `seq`.
    pub fn get(&self, seq: u64) -> Option<&T> {
        let (chunk, offset) = split(seq);
        let index = self.slot_index(chunk)?;
        self.chunks[index].as_ref()?.slots[offset].as_ref()
    }

    /// The value at `seq`, mutably.
    pub fn get_mut(&mut self, seq: u64) -> Option<&mut T> {
        let (chunk, offset) = split(seq);
        let index = self.slot_index(chunk)?;
        let entry = self.chunks[index].as_mut()?;
        entry.slots[offset].as_ref()?;
        Arc::make_mut(entry).slots[offset].as_mut()
    }

    /// Stores `value` at `seq`, returning the value it replaced.
    pub fn insert(&mut self, seq: u64, value: T) -> Option<T> {
        let (chunk, offset) = split(seq);
        if self.chunks.is_empty() {
            self.first_chunk = chunk;
        }
        while chunk < self.first_chunk {
            self.chunks.push_front(None);
            self.first_chunk -= 1;
        }
        while chunk >= self.first_chunk + self.chunks.len() as u64 {
            self.chunks.push_back(None);
        }
        let index = (chunk - self.first_chunk) as usize;
        let entry = Arc::make_mut(self.chunks[index].get_or_insert_with(|| {
            Arc::new(Chunk {
                slots: (0..CHUNK_LEN).map(|_| None).collect(),
                live: 0,
                first: CHUNK_LEN,
            })
        }));
        let old = entry.slots[offset].replace(value);
        if old.is_none() {
            entry.live += 1;
            entry.first = entry.first.min(offset);
            self.len += 1;
        }
        old
    }

    /// Removes and returns the value at `seq`.
    pub fn remove(&mut self, seq: u64) -> Option<T> {
        let (chunk, offset) = split(seq);
        let index = self.slot_index(chunk)?;
        let entry = self.chunks[index].as_mut()?;
        entry.slots[offset].as_ref()?;
        let entry = Arc::make_mut(entry);
        let old = entry.slots[offset].take()?;
        entry.live -= 1;
        // Consumers take the oldest first, so the first slot moves forward; each slot is passed
        // over once in the chunk's life.
        while entry.first < CHUNK_LEN && entry.slots[entry.first].is_none() {
            entry.first += 1;
        }
        self.len -= 1;
        if entry.live == 0 {
            self.chunks[index] = None;
            self.trim();
        }
        Some(old)
    }

    fn trim(&mut self) {
        while matches!(self.chunks.front(), Some(None)) {
            self.chunks.pop_front();
            self.first_chunk += 1;
        }
        while matches!(self.chunks.back(), Some(None)) {
            self.chunks.pop_back();
        }
    }

    /// Removes every value.
    pub fn clear(&mut self) {
        self.chunks.clear();
        self.len = 0;
    }

    /// All values in sequence order.
    pub fn iter(&self) -> impl Iterator<Item = (u64, &T)> {
        iterate(&self.chunks, self.first_chunk, 0)
    }

    /// The values from sequence number `seq` on, in order, skipping the chunks before it.
    pub fn iter_from(&self, seq: u64) -> impl Iterator<Item = (u64, &T)> {
        let skip = split(seq).0.saturating_sub(self.first_chunk) as usize;
        iterate(&self.chunks, self.first_chunk, skip).filter(move |(s, _)| *s >= seq)
    }

    /// The value with the lowest sequence number, in constant time (empty chunks are freed, so
    /// the first chunk kept holds it, at the slot it remembers).
    pub fn first(&self) -> Option<(u64, &T)> {
        let chunk = self.chunks.front()?.as_ref()?;
        let value = chunk.slots.get(chunk.first)?.as_ref()?;
        Some(((self.first_chunk << CHUNK_BITS) + chunk.first as u64, value))
    }

    /// A copy of the store as it is now, unaffected by later changes to it. Costs one reference
    /// count per chunk; see the module documentation.
    pub fn frozen(&self) -> Frozen<T> {
        Frozen {
            chunks: self.chunks.clone(),
            first_chunk: self.first_chunk,
            len: self.len,
        }
    }
}

/// A frozen copy of a [`SeqStore`] (see [`SeqStore::frozen`]). `Send` when `T` is, so another
/// thread can read it.
pub struct Frozen<T> {
    chunks: VecDeque<Option<Arc<Chunk<T>>>>,
    first_chunk: u64,
    len: usize,
}

impl<T> Frozen<T> {
    /// Number of values.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// All values in sequence order.
    pub fn iter(&self) -> impl Iterator<Item = (u64, &T)> {
        iterate(&self.chunks, self.first_chunk, 0)
    }
}

fn iterate<T>(
    chunks: &VecDeque<Option<Arc<Chunk<T>>>>,
    first_chunk: u64,
    skip_chunks: usize,
) -> impl Iterator<Item = (u64, &T)> {
    chunks
        .iter()
        .enumerate()
        .skip(skip_chunks)
        .filter_map(|(i, c)| c.as_ref().map(|c| (i, c)))
        .flat_map(move |(i, chunk)| {
            let base = (first_chunk + i as u64) << CHUNK_BITS;
            chunk
                .slots
                .iter()
                .enumerate()
                .filter_map(move |(o, v)| v.as_ref().map(|v| (base + o as u64, v)))
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeMap;

    proptest! {
        /// The store behaves exactly like a BTreeMap, and frees chunks as they empty.
        #[test]
        fn matches_btreemap(
            ops in proptest::collection::vec((0u8..3, 0u64..2_000), 0..400),
            from in 0u64..2_100,
        ) {
            let mut store = SeqStore::default();
            let mut model = BTreeMap::new();
            for (op, seq) in ops {
                match op {
                    0 => prop_assert_eq!(store.insert(seq, seq * 2), model.insert(seq, seq * 2)),
                    1 => prop_assert_eq!(store.remove(seq), model.remove(&seq)),
                    _ => prop_assert_eq!(store.get(seq), model.get(&seq)),
                }
                prop_assert_eq!(store.len(), model.len());
                prop_assert_eq!(store.first(), model.iter().next().map(|(k, v)| (*k, v)));
            }
            let listed: Vec<_> = store.iter().map(|(k, v)| (k, *v)).collect();
            let expected: Vec<_> = model.iter().map(|(k, v)| (*k, *v)).collect();
            prop_assert_eq!(&listed, &expected);
            let tail: Vec<_> = store.iter_from(from).map(|(k, v)| (k, *v)).collect();
            let expected_tail: Vec<_> = model.range(from..).map(|(k, v)| (*k, *v)).collect();
            prop_assert_eq!(tail, expected_tail);
            // A frozen copy keeps what it saw while the store changes.
            let frozen = store.frozen();
            for seq in model.keys().copied().collect::<Vec<_>>().into_iter().step_by(2) {
                store.remove(seq);
                store.insert(seq + 1, 7);
            }
            let seen: Vec<_> = frozen.iter().map(|(k, v)| (k, *v)).collect();
            prop_assert_eq!(seen, expected);
            prop_assert_eq!(frozen.len(), model.len());
            let mut model: BTreeMap<u64, u64> = store.iter().map(|(k, v)| (k, *v)).collect();
            for seq in model.keys().copied().collect::<Vec<_>>() {
                store.remove(seq);
            }
            model.clear();
            prop_assert!(model.is_empty());
            prop_assert!(store.chunks.is_empty());
        }
    }
}
