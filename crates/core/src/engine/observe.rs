//! Read-only looks at leases for observers (metrics), outside the operations of the SQS model.
//!
//! Nothing here changes state or writes records: an observer asks before an operation what the
//! operation is about to end, so that the operations themselves stay exactly as they are.

use super::Engine;
use crate::message::MessageId;

/// The current attempt's lease, as a receipt names it.
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
    /// The lease of the attempt `receipt` belongs to, if the receipt is valid for the named
    /// queue and names the message's current attempt. A delete with this receipt, run next under
    /// the same lock, ends exactly this lease.
    pub fn lease_of(&self, name: &str, receipt: &str) -> Option<LeaseView> {
        let queue = self.queue(name)?;
        let receipt = self.key.open(receipt).ok()?;
        if receipt.queue_id != queue.id {
            return None;
        }
        let message = queue.message(receipt.seq)?;
        (message.receive_count == receipt.attempt && receipt.attempt > 0).then_some(LeaseView {
            queue_id: queue.id,
            message_id: message.id,
            leased_at_ms: message.leased_at_ms,
            visible_at_ms: message.visible_at_ms,
            receive_count: message.receive_count,
        })
    }

    /// The id of the named queue.
    pub fn queue_id(&self, name: &str) -> Option<u64> {
        self.names.get(name).copied()
    }
}

#[cfg(test)]
mod tests {
    use crate::config::QueueConfigPatch;
    use crate::engine::{Engine, EngineConfig, Journal, ReceiveRequest};
    use crate::message::{MessageId, SendInput};
    use crate::receipt::ReceiptKey;

    #[test]
    fn lease_of_names_the_current_attempt_only() {
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
        };
        let first = engine
            .receive(2_000, "jobs", request, &mut journal)
            .unwrap();
        let lease = engine.lease_of("jobs", &first[0].receipt).unwrap();
        assert_eq!(
            (lease.leased_at_ms, lease.visible_at_ms, lease.receive_count),
            (2_000, 12_000, 1)
        );
        let second = engine
            .receive(13_000, "jobs", request, &mut journal)
            .unwrap();
        assert_eq!(engine.lease_of("jobs", &first[0].receipt), None);
        assert_eq!(
            engine
                .lease_of("jobs", &second[0].receipt)
                .map(|l| l.receive_count),
            Some(2)
        );
        assert_eq!(engine.lease_of("other", &second[0].receipt), None);
        let queue = engine.queue("jobs").unwrap();
        let leases: Vec<u32> = queue
            .leases_ending_first(10, 100)
            .map(|message| message.receive_count)
            .collect();
        assert_eq!(leases, [2]);
        assert_eq!(queue.leases_ending_first(10, 0).count(), 0);
        assert_eq!(engine.lease_of("jobs", "not-a-receipt"), None);
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
