//! What observers (metrics) learn about leases: the lease a delete ended
//! ([`Engine::delete`]) and read-only looks that change nothing and write no record.

use super::Engine;
use crate::message::MessageId;

/// An attempt's lease, as a delete ended it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LeaseView {
    /// The queue's id.
    pub queue_id: u64,
    /// The message's stable identity.
    pub message_id: MessageId,
    /// When this attempt began (its receive).
    pub leased_at_ms: u64,
    /// When its lease ends (or ended).
    pub visible_at_ms: u64,
    /// The attempt's number (`ApproximateReceiveCount`).
    pub receive_count: u32,
}

impl Engine {
    /// The id of the named queue.
    pub fn queue_id(&self, name: &str) -> Option<u64> {
        self.names.get(name).copied()
    }

    /// The queue with this id (as records name it), read-only.
    pub fn queue_by_id(&self, queue_id: u64) -> Option<&crate::queue::Queue> {
        self.queues.get(&queue_id)
    }
}

#[cfg(test)]
mod tests {
    use crate::config::QueueConfigPatch;
    use crate::engine::{DeleteOutcome, Engine, EngineConfig, Journal, ReceiveRequest};
    use crate::message::{MessageId, SendInput};
    use crate::receipt::ReceiptKey;

    #[test]
    fn a_delete_tells_the_lease_it_ended_and_only_for_the_current_attempt() {
        let mut engine = Engine::new(EngineConfig::default(), ReceiptKey::new([7; 16]));
        let mut journal = Journal::new();
        let patch = QueueConfigPatch::default();
        engine
            .create_queue(1_000, "jobs", &patch, Default::default(), &mut journal)
            .unwrap();
        let input = SendInput::body("job-42");
        engine
            .send(
                1_000,
                "jobs",
                input,
                MessageId::from_random([1; 16]),
                &mut journal,
            )
            .unwrap();
        let request = ReceiveRequest {
            max_messages: 1,
            visibility_timeout_seconds: Some(10),
            client: None,
        };
        let first = engine
            .receive(2_000, "jobs", request.clone(), &mut journal)
            .unwrap();
        let second = engine
            .receive(13_000, "jobs", request, &mut journal)
            .unwrap();
        let queue = engine.queue("jobs").unwrap();
        let leases: Vec<u32> = queue
            .leases_ending_first(10, 100)
            .map(|message| message.receive_count)
            .collect();
        assert_eq!(leases, [2]);
        assert_eq!(queue.leases_ending_first(10, 0).count(), 0);
        let stale = engine.delete(14_000, "jobs", &first[0].receipt, &mut journal);
        assert_eq!(stale, Ok((DeleteOutcome::IgnoredStale, None)));
        assert!(engine
            .delete(14_000, "other", &second[0].receipt, &mut journal)
            .is_err());
        assert!(engine
            .delete(14_000, "jobs", "not-a-receipt", &mut journal)
            .is_err());
        let (outcome, lease) = engine
            .delete(14_000, "jobs", &second[0].receipt, &mut journal)
            .unwrap();
        assert_eq!(outcome, DeleteOutcome::Deleted);
        let lease = lease.expect("the lease the delete ended");
        assert_eq!(
            (lease.leased_at_ms, lease.visible_at_ms, lease.receive_count),
            (13_000, 23_000, 2)
        );
    }

    #[test]
    fn leases_ending_first_skips_delayed_messages_and_orders_by_deadline() {
        let mut engine = Engine::new(EngineConfig::default(), ReceiptKey::new([7; 16]));
        let mut journal = Journal::new();
        let patch = QueueConfigPatch::default();
        engine
            .create_queue(0, "jobs", &patch, Default::default(), &mut journal)
            .unwrap();
        let mut delayed = SendInput::body("later");
        delayed.delay_seconds = Some(5);
        engine
            .send(
                0,
                "jobs",
                delayed,
                MessageId::from_random([9; 16]),
                &mut journal,
            )
            .unwrap();
        for i in 1..=3u8 {
            let input = SendInput::body(format!("job-{i}"));
            engine
                .send(
                    0,
                    "jobs",
                    input,
                    MessageId::from_random([i; 16]),
                    &mut journal,
                )
                .unwrap();
        }
        for visibility in [60, 20, 40] {
            let request = ReceiveRequest {
                max_messages: 1,
                visibility_timeout_seconds: Some(visibility),
                client: None,
            };
            engine
                .receive(1_000, "jobs", request, &mut journal)
                .unwrap();
        }
        let queue = engine.queue("jobs").unwrap();
        let deadlines: Vec<u64> = queue
            .leases_ending_first(2, 100)
            .map(|message| message.visible_at_ms)
            .collect();
        assert_eq!(deadlines, [21_000, 41_000]);
        // The delayed message's timer (6 000) comes first and counts against the scan bound.
        assert_eq!(queue.leases_ending_first(10, 2).count(), 1);
    }
}
