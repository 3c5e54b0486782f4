//! Which node should own which bucket: rendezvous hashing over the live nodes.
//!
//! Every node reads the same node table, so every node computes the same owner for a bucket:
//! the live node with the highest `weight(node, bucket)`. When a node joins, each bucket moves
//! only if the newcomer outweighs its owner (about `1/n` of them); when one dies, only its
//! buckets move. Placement decides who *tries*, never who may write: ownership is still the
//! bucket's lock and its epoch (`ownership.rs`), so two nodes that disagree for a moment about
//! who is live only make one of them wait or hand a bucket off a little later.
//!
//! - A node waits for a bucket's lock while it is the bucket's preferred node, or while no node
//!   has held the lock for [`ORPHAN_GRACE`] (the preferred node is slow or gone: any node takes
//!   it, so a bucket is never left unserved for placement's sake).
//! - An owner that is not the preferred node of its bucket, while the preferred one is live,
//!   hands the bucket off (drain, checkpoint, release): the preferred node, waiting for the lock,
//!   takes it over with a short replay. That is how a joining node takes its share.
//! - A log of one bucket keeps the plain protocol: every node waits for its lock.

use std::time::{Duration, Instant};

use parking_lot::RwLock;
use tokio::sync::Notify;

/// How often a node refreshes its row (a node is live while its row is this fresh, times
/// [`LIVE_ROUNDS`]).
pub const ANNOUNCE_PLACEMENT_EVERY: Duration = Duration::from_secs(1);
/// A node counts as live while it refreshed its row within this many announce periods.
pub const LIVE_ROUNDS: u32 = 3;
/// How long a bucket's lock may be held by no node before every node waits for it.
pub const ORPHAN_GRACE: Duration = Duration::from_secs(1);

/// The weight of `node` for `bucket`: FNV-1a of both, finished by splitmix64's mixer so that
/// every bit depends on every input bit.
pub fn weight(node: &str, bucket: u32) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in node.bytes().chain([0]).chain(bucket.to_be_bytes()) {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    hash ^= hash >> 30;
    hash = hash.wrapping_mul(0xbf58_476d_1ce4_e5b9);
    hash ^= hash >> 27;
    hash = hash.wrapping_mul(0x94d0_49bb_1331_11eb);
    hash ^ (hash >> 31)
}

/// The live node that should own `bucket`: the highest weight (ties broken by the id).
pub fn preferred<'a>(bucket: u32, live: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    live.into_iter()
        .max_by_key(|node| (weight(node, bucket), *node))
}

/// What a node knows of the cluster's placement: the live nodes and the buckets no node holds,
/// refreshed by the node's placement task.
#[derive(Debug, Default)]
pub struct Placement {
    state: RwLock<PlacementState>,
    /// Notified at every refresh.
    pub changed: Notify,
}

#[derive(Debug, Default)]
struct PlacementState {
    /// Live nodes, by id.
    live: Vec<String>,
    /// Per bucket, since when no node has held its lock (`None`: held at the last look).
    orphaned_since: Vec<Option<Instant>>,
    /// Whether the placement was ever read (until then a node waits for every lock, as with
    /// one bucket).
    known: bool,
}

impl Placement {
    /// Takes in a reading: the live nodes, and for each bucket whether its lock is held.
    pub fn refresh(&self, live: Vec<String>, held: &[bool]) {
        let now = Instant::now();
        let mut state = self.state.write();
        state.live = live;
        state.orphaned_since.resize(held.len(), None);
        for (since, held) in state.orphaned_since.iter_mut().zip(held) {
            *since = match (*held, *since) {
                (true, _) => None,
                (false, Some(since)) => Some(since),
                (false, None) => Some(now),
            };
        }
        state.known = true;
        drop(state);
        self.changed.notify_waiters();
    }

    /// Whether `node` should wait for `bucket`'s lock now.
    pub fn may_wait(&self, node: &str, bucket: u32) -> bool {
        let state = self.state.read();
        if !state.known {
            return false;
        }
        let orphaned = state
            .orphaned_since
            .get(bucket as usize)
            .copied()
            .flatten()
            .is_some_and(|since| since.elapsed() >= ORPHAN_GRACE);
        orphaned || preferred(bucket, state.live.iter().map(String::as_str)) == Some(node)
    }

    /// The live node that should own `bucket` instead of `node`, if it is not `node`.
    pub fn other_preferred(&self, node: &str, bucket: u32) -> Option<String> {
        let state = self.state.read();
        preferred(bucket, state.live.iter().map(String::as_str))
            .filter(|preferred| *preferred != node)
            .map(str::to_string)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Buckets spread about evenly, and a node joining takes buckets only from the others
    /// (each moves to the newcomer or stays), about a third of them with three nodes.
    #[test]
    fn a_joining_node_takes_its_share_and_nothing_else_moves() {
        let before = ["node-a", "node-b"];
        let after = ["node-a", "node-b", "node-c"];
        let buckets = 256;
        let mut counts = [0; 3];
        let mut moved = 0;
        for bucket in 0..buckets {
            let old = preferred(bucket, before).unwrap();
            let new = preferred(bucket, after).unwrap();
            counts[after.iter().position(|n| *n == new).unwrap()] += 1;
            if old != new {
                assert_eq!(new, "node-c", "bucket {bucket} moved between old nodes");
                moved += 1;
            }
        }
        assert_eq!(moved, counts[2]);
        for count in counts {
            assert!((60..=110).contains(&count), "{counts:?}");
        }
    }

    /// A node waits for a bucket it is preferred for, and for any bucket no node has held
    /// for the grace period; never before the placement was read.
    #[test]
    fn a_node_waits_for_its_buckets_and_for_orphans() {
        let placement = Placement::default();
        assert!(!placement.may_wait("a", 0));
        let live = vec!["a".to_string(), "b".to_string()];
        let mine = (0..)
            .find(|b| preferred(*b, ["a", "b"]) == Some("a"))
            .unwrap();
        let theirs = (0..)
            .find(|b| preferred(*b, ["a", "b"]) == Some("b"))
            .unwrap();
        let mut held = vec![true; 64];
        placement.refresh(live.clone(), &held);
        assert!(placement.may_wait("a", mine));
        assert!(!placement.may_wait("a", theirs));
        assert_eq!(placement.other_preferred("a", theirs).as_deref(), Some("b"));
        assert_eq!(placement.other_preferred("a", mine), None);
        held[theirs as usize] = false;
        placement.refresh(live.clone(), &held);
        assert!(
            !placement.may_wait("a", theirs),
            "not before the grace period"
        );
        std::thread::sleep(ORPHAN_GRACE);
        placement.refresh(live, &held);
        assert!(placement.may_wait("a", theirs));
    }
}
