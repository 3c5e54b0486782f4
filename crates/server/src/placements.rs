//! Where queues live when not in their name's bucket.
//!
//! A queue lives in the bucket its name hashes into (`leaseq_core::bucket_of`) unless it was
//! placed elsewhere when it was created: a new queue whose `RedrivePolicy` names a dead-letter
//! queue of another bucket is created in that queue's bucket, so that its dead-letter moves and
//! the redrives back are records of one log, not transfers between two
//! (`docs/design/cluster.md`, "Placement"). The service decides it (`service/queues.rs`);
//! this is the map every router reads.
//!
//! Invariants:
//! - Only the service of a name's own bucket (the hash's) places it, with every create of
//!   that name serialized there, and its log keeps the placement, fenced by the bucket's
//!   epoch ([`crate::LogStore::place`]).
//! - A placement is never taken back: the name lives in that bucket from then on, whatever
//!   queue has it (a delete and a create again included). So a placement a node knows is never
//!   wrong; one it does not know yet is only late.
//! - The owner of a name's bucket knows every placement of its names (its log lists them when
//!   it opens, [`crate::LogStore::placements`]), so a request that reaches it by the hash is
//!   sent on (or refused as placed elsewhere), never answered as if the queue did not exist.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use parking_lot::RwLock;

/// The queues known to live outside their name's bucket: engine's name → bucket.
#[derive(Debug, Default)]
pub struct Placements {
    placed: RwLock<HashMap<Arc<str>, u32>>,
    /// Whether `placed` holds anything: a node without placements (the common case) looks
    /// nothing up.
    any: AtomicBool,
}

impl Placements {
    /// The bucket (of `buckets`) where the queue named `name` (the engine's name) lives.
    pub fn bucket_of(&self, name: &str, buckets: u32) -> u32 {
        if buckets == 1 {
            return 0;
        }
        self.get(name)
            .unwrap_or_else(|| leaseq_core::bucket_of(name, buckets))
    }

    /// The bucket `name` was placed in, if it was placed outside its name's bucket.
    pub fn get(&self, name: &str) -> Option<u32> {
        if !self.any.load(Ordering::Acquire) {
            return None;
        }
        self.placed.read().get(name).copied()
    }

    /// Takes note that `name` lives in `bucket`. Returns whether it was new to this map.
    pub fn insert(&self, name: Arc<str>, bucket: u32) -> bool {
        let mut placed = self.placed.write();
        let new = placed.insert(name, bucket).is_none();
        self.any.store(true, Ordering::Release);
        new
    }

    /// How many placements this map knows.
    pub fn len(&self) -> usize {
        self.placed.read().len()
    }

    /// Whether this map knows no placement.
    pub fn is_empty(&self) -> bool {
        !self.any.load(Ordering::Acquire)
    }

    /// Every placement this map knows, in no order.
    pub fn all(&self) -> Vec<(Arc<str>, u32)> {
        let placed = self.placed.read();
        placed
            .iter()
            .map(|(name, bucket)| (name.clone(), *bucket))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_placed_name_is_found_in_its_bucket_and_every_other_by_its_hash() {
        let placements = Placements::default();
        let hashed = leaseq_core::bucket_of("orders", 16);
        let elsewhere = (hashed + 1) % 16;
        assert_eq!(placements.bucket_of("orders", 16), hashed);
        assert!(placements.is_empty());
        assert!(placements.insert("orders".into(), elsewhere));
        assert!(!placements.insert("orders".into(), elsewhere));
        assert_eq!(placements.bucket_of("orders", 16), elsewhere);
        assert_eq!(
            placements.bucket_of("payments", 16),
            leaseq_core::bucket_of("payments", 16)
        );
        // A log of one bucket has nowhere else to place anything.
        assert_eq!(placements.bucket_of("orders", 1), 0);
        assert_eq!(placements.len(), 1);
    }
}
