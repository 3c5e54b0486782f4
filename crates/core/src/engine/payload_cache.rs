//! The payloads the engine keeps in memory after their records are logged.
//!
//! With a durable log, a message's payload lives in the record that logged it, and the engine
//! keeps its location ([`Engine::spill`]). Reading it back for a receive costs a copy out of the
//! log's buffers and a decode (about 1,000 instructions a message, callgrind), yet most messages
//! are received soon after they are sent. So, given a budget
//! ([`crate::EngineConfig::payload_cache_bytes`]; none by default, see
//! [`super::PAYLOAD_CACHE_BYTES_DEFAULT`] for what it costs sends), the engine keeps the most
//! recently logged payloads in memory as well ([`PayloadRef::Cached`]) and forgets the oldest
//! first: a receive of a recent message reads nothing, a backlog older
//! than the budget is read from the log as before, and memory stays bounded whatever the backlog.
//!
//! A payload is kept only if its queue's messages, at its size, would all fit in the budget.
//! Consumers read a queue oldest first, so behind a larger backlog a payload would be forgotten
//! before they reach it, and forgetting is not free: it touches a message long out of the
//! CPU's caches and frees its payload there. Measured with every payload kept, that cost sends
//! 0.3-1.9 us of server CPU each at W1 and W2 (queues that only grow), where callgrind, which
//! counts instructions and not cache misses, saw +77 instructions.
//!
//! What counts against the budget is each payload's record length plus
//! [`PAYLOAD_OVERHEAD_BYTES`], from when it is kept until its turn to be forgotten comes, even
//! if its message is deleted before then: the sum is an upper bound of the memory held, never
//! an undercount, and forgetting costs nothing to track. A cached payload is only a copy: a
//! snapshot writes its location, equality ignores the copy, and the log segment holding it is
//! kept exactly as for a stored one.

use std::collections::VecDeque;

use crate::message::{CachedPayload, Location, PayloadRef};
use crate::record::Record;

use super::Engine;

/// Memory a kept payload holds beyond its record's length: its allocations' headers and the
/// attribute map's nodes, rounded up.
pub const PAYLOAD_OVERHEAD_BYTES: u64 = 128;

/// The payloads kept in memory, oldest first.
#[derive(Clone, Debug, Default)]
pub(super) struct PayloadCache {
    /// Each kept payload's queue, message and location.
    kept: VecDeque<(u64, u64, Location)>,
    /// What `kept` counts against the budget.
    bytes: u64,
}

fn cost(location: Location) -> u64 {
    u64::from(location.len_bytes) + PAYLOAD_OVERHEAD_BYTES
}

impl Engine {
    /// Keeps the payload that `record` carries (a `Send` or `Relocate` just applied) at the
    /// record's `location` in the log, and in memory too while the payload cache's budget allows
    /// (see the module docs). Called by a caller with a durable log once the record is appended,
    /// and by recovery for each replayed record.
    ///
    /// This changes where a payload is kept, not what the message is, so it is not a record
    /// of its own: the location is where the record itself landed, which replay knows too.
    /// Does nothing if the message is gone or already holds a different payload.
    pub fn spill(&mut self, record: &Record, location: Location) {
        let Some((queue_id, seq, payload)) = record.carried_payload() else {
            return;
        };
        let budget = self.config.payload_cache_bytes;
        // Consumers read a queue oldest first: behind a backlog larger than the budget holds, a
        // payload would be forgotten, unread, before they reach it (see the module docs). The
        // backlog is the queue's messages, this one included (none for one in the outbox); with
        // no budget (the default) it is not looked up.
        let keep = budget > 0 && {
            let backlog = self
                .queues
                .get(&queue_id)
                .map_or(0, |queue| queue.len() as u64);
            cost(location).saturating_mul(backlog.max(1)) <= budget
        };
        let Some(slot) = self.payload_mut(queue_id, seq) else {
            return;
        };
        if !matches!(slot, PayloadRef::Inline(held) if std::sync::Arc::ptr_eq(held, payload)) {
            return;
        }
        if !keep {
            *slot = PayloadRef::Stored(location);
            return;
        }
        *slot = PayloadRef::Cached(Box::new(CachedPayload {
            location,
            payload: payload.clone(),
        }));
        self.payload_cache.kept.push_back((queue_id, seq, location));
        self.payload_cache.bytes += cost(location);
        while self.payload_cache.bytes > budget {
            let (queue_id, seq, location) = self
                .payload_cache
                .kept
                .pop_front()
                .expect("the kept payloads add up to the bytes counted");
            self.payload_cache.bytes -= cost(location);
            // The message may be gone, or its payload moved on (relocated: kept anew at its new
            // location, counted by a later entry).
            if let Some(slot) = self.payload_mut(queue_id, seq) {
                if matches!(slot, PayloadRef::Cached(cached) if cached.location == location) {
                    *slot = PayloadRef::Stored(location);
                }
            }
        }
    }

    /// What the payload cache counts against its budget (an upper bound of the memory its
    /// payloads hold; see the module docs), and how many payloads it counts.
    pub fn payload_cache_usage(&self) -> (u64, usize) {
        (self.payload_cache.bytes, self.payload_cache.kept.len())
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::config::QueueConfigPatch;
    use crate::engine::{EngineConfig, Journal, ReceiveRequest};
    use crate::message::{MessageId, SendInput};
    use crate::receipt::ReceiptKey;

    /// Every body is this long, and logged at a location of this length.
    const LEN: u32 = 100;

    /// The queues of [`engine`].
    const QUEUES: [&str; 5] = ["q0", "q1", "q2", "q3", "q4"];

    fn engine(payload_cache_bytes: u64) -> Engine {
        let config = EngineConfig {
            payload_cache_bytes,
            ..EngineConfig::default()
        };
        let mut engine = Engine::new(config, ReceiptKey::new([7; 16]));
        let patch = QueueConfigPatch::default();
        let mut journal = Journal::new();
        for name in QUEUES {
            engine
                .create_queue(0, name, &patch, Default::default(), &mut journal)
                .unwrap();
        }
        engine
    }

    fn at(n: u32) -> Location {
        Location {
            segment: 1,
            offset: n * 1000,
            len_bytes: LEN,
        }
    }

    fn body(n: u32) -> String {
        format!("{n:0>width$}", width = LEN as usize)
    }

    /// Sends message `n` to `queue` and spills its payload at `at(n)`; returns its sequence
    /// number.
    fn send(engine: &mut Engine, queue: &str, n: u32) -> u64 {
        let mut journal = Journal::new();
        let id = MessageId::from_random([n as u8; 16]);
        let sent = engine
            .send(0, queue, SendInput::body(body(n)), id, &mut journal)
            .unwrap();
        engine.spill(&journal[0], at(n));
        sent.seq
    }

    fn payload(engine: &Engine, queue: &str, seq: u64) -> PayloadRef {
        let queue = engine.queue(queue).unwrap();
        queue.message(seq).unwrap().payload.clone()
    }

    fn is_cached(engine: &Engine, queue: &str, seq: u64, location: Location) -> bool {
        matches!(payload(engine, queue, seq), PayloadRef::Cached(cached) if cached.location == location)
    }

    #[test]
    fn the_newest_payloads_within_the_budget_stay_in_memory() {
        let mut engine = engine(2 * cost(at(0)));
        let seqs: Vec<u64> = (0..5)
            .map(|n| send(&mut engine, QUEUES[n as usize], n))
            .collect();
        for (n, &seq) in (0..).zip(&seqs) {
            let queue = QUEUES[n as usize];
            if n >= 3 {
                assert!(
                    is_cached(&engine, queue, seq, at(n)),
                    "message {n} is cached"
                );
                let cached = payload(&engine, queue, seq);
                assert_eq!(cached.inline().unwrap().body, body(n));
            } else {
                assert_eq!(payload(&engine, queue, seq), PayloadRef::Stored(at(n)));
                assert!(
                    payload(&engine, queue, seq).inline().is_none(),
                    "message {n}"
                );
            }
        }
        assert_eq!(engine.payload_cache_usage(), (2 * cost(at(0)), 2));
    }

    #[test]
    fn no_budget_keeps_nothing_and_a_payload_larger_than_the_budget_is_not_kept() {
        for budget in [0, cost(at(0)) - 1] {
            let mut engine = engine(budget);
            let seq = send(&mut engine, "q0", 1);
            assert!(matches!(payload(&engine, "q0", seq), PayloadRef::Stored(_)));
            assert_eq!(engine.payload_cache_usage(), (0, 0));
        }
    }

    #[test]
    fn a_payload_behind_a_backlog_larger_than_the_budget_is_not_kept() {
        let mut engine = engine(3 * cost(at(0)));
        let seqs: Vec<u64> = (0..5).map(|n| send(&mut engine, "q0", n)).collect();
        for (n, &seq) in (0..).zip(&seqs) {
            if n < 3 {
                assert!(
                    is_cached(&engine, "q0", seq, at(n)),
                    "message {n} is cached"
                );
            } else {
                assert_eq!(payload(&engine, "q0", seq), PayloadRef::Stored(at(n)));
            }
        }
        // Nothing was forgotten: the first three are still in memory, and counted.
        assert_eq!(engine.payload_cache_usage(), (3 * cost(at(0)), 3));
    }

    #[test]
    fn a_deleted_message_counts_until_its_turn_and_then_frees_its_room() {
        let mut engine = engine(2 * cost(at(0)));
        let first = send(&mut engine, "q0", 0);
        let mut journal = Journal::new();
        let request = ReceiveRequest {
            max_messages: 1,
            ..ReceiveRequest::default()
        };
        let delivery = engine.receive(0, "q0", request, &mut journal).unwrap();
        assert_eq!(delivery.len(), 1);
        // The delivery carries the payload from memory.
        assert!(delivery[0].payload.inline().is_some());
        engine
            .delete(0, "q0", &delivery[0].receipt, &mut journal)
            .unwrap();
        assert!(engine.queue("q0").unwrap().message(first).is_none());
        assert_eq!(engine.payload_cache_usage().1, 1, "still counted");
        let second = send(&mut engine, "q0", 1);
        let third = send(&mut engine, "q0", 2);
        // The deleted message's turn came: the two live ones stay.
        assert!(is_cached(&engine, "q0", second, at(1)));
        assert!(is_cached(&engine, "q0", third, at(2)));
        assert_eq!(engine.payload_cache_usage(), (2 * cost(at(0)), 2));
    }

    #[test]
    fn a_relocated_payload_is_kept_at_its_new_location_until_its_own_turn() {
        let mut engine = engine(2 * cost(at(0)));
        let seq = send(&mut engine, "q0", 0);
        let PayloadRef::Cached(cached) = payload(&engine, "q0", seq) else {
            panic!("cached");
        };
        let queue_id = engine.queue("q0").unwrap().id;
        let mut journal = Journal::new();
        let copy = Arc::new((*cached.payload).clone());
        assert!(engine.relocate(queue_id, seq, at(0), copy.clone(), &mut journal));
        engine.spill(&journal[0], at(9));
        assert!(is_cached(&engine, "q0", seq, at(9)));
        // The old entry's turn comes first; it must not forget the payload's new copy.
        send(&mut engine, "q1", 1);
        assert!(
            is_cached(&engine, "q0", seq, at(9)),
            "kept at its new location"
        );
        send(&mut engine, "q2", 2);
        assert_eq!(payload(&engine, "q0", seq), PayloadRef::Stored(at(9)));
    }

    #[test]
    fn a_cached_payload_equals_the_stored_one_at_its_location() {
        let payload = Arc::new(crate::message::Payload::new(
            "x".into(),
            Default::default(),
            None,
            "anon".into(),
        ));
        let cached = PayloadRef::Cached(Box::new(CachedPayload {
            location: at(1),
            payload: payload.clone(),
        }));
        assert_eq!(cached, PayloadRef::Stored(at(1)));
        assert_ne!(cached, PayloadRef::Stored(at(2)));
        assert_ne!(cached, PayloadRef::Inline(payload));
    }
}
