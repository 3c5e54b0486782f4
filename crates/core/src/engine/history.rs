//! Reading a message's attempt history by its id (see [`crate::history`]).
//!
//! Messages are kept by sequence number, not by id, and an index by id would cost every message
//! of a backlog memory it needs only for this. So a lookup walks the queue in steps of
//! [`HISTORY_SCAN_STEP`] messages, each under its own hold of the caller's lock: a lookup in a
//! queue of ten million messages takes longer, but never stalls other requests for long. A
//! message stays at its sequence number while it lives, so a walk in steps finds it if it lives
//! throughout; one deleted meanwhile is found among the recently deleted, checked at every step.

use std::sync::Arc;

use crate::error::Result;
use crate::history::Attempt;
use crate::message::MessageId;
use crate::queue::{Message, MessageState, Queue};

use super::Engine;

/// Messages one step of a lookup looks at, at most.
pub const HISTORY_SCAN_STEP: usize = 65_536;

/// A message and its attempts, as of the lookup.
#[derive(Clone, Debug)]
pub struct MessageHistory {
    /// Its id.
    pub message_id: MessageId,
    /// Its sequence number in the queue.
    pub seq: u64,
    /// Where it is; `None` once deleted.
    pub state: Option<MessageState>,
    /// `SentTimestamp` (kept across a dead-letter move).
    pub sent_at_ms: u64,
    /// Receives so far.
    pub receive_count: u32,
    /// The first receive, if any.
    pub first_received_at_ms: Option<u64>,
    /// The queue it was dead-lettered from, if it was.
    pub dead_letter_source: Option<Arc<str>>,
    /// When it moved to the dead-letter queue, if it did.
    pub dead_lettered_at_ms: Option<u64>,
    /// Why a consumer failed it (fail-now), if one did.
    pub failure_reason: Option<Arc<str>>,
    /// When it was deleted, if it was.
    pub deleted_at_ms: Option<u64>,
    /// When it becomes visible, while it is delayed (a delay, or a redelivery backoff) or in
    /// flight.
    pub visible_at_ms: Option<u64>,
    /// The attempts kept, numbered, oldest first; an attempt whose lease ran out by the time of
    /// the lookup shows as expired.
    pub attempts: Vec<(u32, Attempt)>,
}

/// Where a lookup stands after one step.
#[derive(Clone, Debug)]
pub enum HistoryLookup {
    /// The message, live or recently deleted.
    Found(Box<MessageHistory>),
    /// The queue has no such message (nor remembers deleting it).
    NotFound,
    /// Not found yet: call again from this sequence number.
    Continue(u64),
}

impl Engine {
    /// One step of a lookup of message `message_id` in the named queue, from sequence number
    /// `from_seq` on (0 to start). Call it again, with the lock released in between, while it
    /// answers [`HistoryLookup::Continue`].
    pub fn message_history(
        &mut self,
        now_ms: u64,
        name: &str,
        message_id: MessageId,
        from_seq: u64,
    ) -> Result<HistoryLookup> {
        // Bringing the queue forward shows leases that ran out as ready, as a peek does.
        let (now_ms, queue_id) = self.advanced(now_ms, name)?;
        let queue = &self.queues[&queue_id];
        if let Some(deleted) = queue.recently_deleted(message_id) {
            return Ok(HistoryLookup::Found(Box::new(MessageHistory {
                message_id,
                seq: deleted.seq,
                state: None,
                sent_at_ms: deleted.sent_at_ms,
                receive_count: deleted.receive_count,
                first_received_at_ms: Some(deleted.history.first_received_at_ms),
                dead_letter_source: deleted.dead_letter_source.clone(),
                dead_lettered_at_ms: deleted.history.dead_lettered_at_ms,
                failure_reason: None,
                deleted_at_ms: Some(deleted.deleted_at_ms),
                visible_at_ms: None,
                attempts: deleted.history.view(now_ms),
            })));
        }
        let mut next = None;
        for (looked, (seq, message)) in queue.messages_from(from_seq).enumerate() {
            if looked == HISTORY_SCAN_STEP {
                next = Some(seq);
                break;
            }
            if message.id == message_id {
                return Ok(HistoryLookup::Found(Box::new(live(
                    queue, seq, message, now_ms,
                ))));
            }
        }
        Ok(next.map_or(HistoryLookup::NotFound, HistoryLookup::Continue))
    }
}

fn live(queue: &Queue, seq: u64, message: &Message, now_ms: u64) -> MessageHistory {
    let history = message.history.as_deref();
    MessageHistory {
        message_id: message.id,
        seq,
        state: Some(message.state),
        sent_at_ms: message.sent_at_ms,
        receive_count: message.receive_count,
        first_received_at_ms: message.first_received_at_ms(),
        dead_letter_source: message.dead_letter_source.clone(),
        dead_lettered_at_ms: history.and_then(|history| history.dead_lettered_at_ms),
        failure_reason: queue.failure_reason(seq).cloned(),
        deleted_at_ms: None,
        visible_at_ms: (message.state != crate::queue::MessageState::Ready)
            .then_some(message.visible_at_ms),
        attempts: history.map_or_else(Vec::new, |history| history.view(now_ms)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::QueueConfigPatch;
    use crate::engine::{EngineConfig, Journal, ReceiveRequest};
    use crate::message::SendInput;
    use crate::receipt::ReceiptKey;

    fn id(n: u32) -> MessageId {
        let mut bytes = [0; 16];
        bytes[..4].copy_from_slice(&n.to_le_bytes());
        MessageId(bytes)
    }

    fn lookup(engine: &mut Engine, name: &str, message_id: MessageId) -> (usize, HistoryLookup) {
        let (mut steps, mut from_seq) = (1, 0);
        loop {
            match engine
                .message_history(0, name, message_id, from_seq)
                .unwrap()
            {
                HistoryLookup::Continue(next) => {
                    assert!(next > from_seq, "a step moves on");
                    from_seq = next;
                    steps += 1;
                }
                done => return (steps, done),
            }
        }
    }

    #[test]
    fn a_lookup_walks_a_long_queue_in_steps_and_finds_the_recently_deleted() {
        let mut engine = Engine::new(EngineConfig::default(), ReceiptKey::new([7; 16]));
        let mut journal = Journal::new();
        engine
            .create_queue(
                0,
                "q",
                &QueueConfigPatch::default(),
                Default::default(),
                &mut journal,
            )
            .unwrap();
        let count = HISTORY_SCAN_STEP as u32 + 10;
        for n in 0..count {
            engine
                .send(0, "q", SendInput::body("x"), id(n), &mut journal)
                .unwrap();
            journal.clear();
        }
        let (steps, found) = lookup(&mut engine, "q", id(count - 1));
        assert_eq!(steps, 2);
        let HistoryLookup::Found(found) = found else {
            panic!("the last message is found: {found:?}");
        };
        assert_eq!((found.seq, found.receive_count), (u64::from(count), 0));
        assert!(found.attempts.is_empty() && found.state == Some(MessageState::Ready));
        let (steps, found) = lookup(&mut engine, "q", id(count));
        assert_eq!(steps, 2);
        assert!(matches!(found, HistoryLookup::NotFound));
        // The first message, received and deleted: found in one step, among the deleted.
        let request = ReceiveRequest {
            max_messages: 1,
            ..Default::default()
        };
        let delivery = engine
            .receive(0, "q", request, &mut journal)
            .unwrap()
            .remove(0);
        engine
            .delete(0, "q", &delivery.receipt, &mut journal)
            .unwrap();
        let (steps, found) = lookup(&mut engine, "q", id(0));
        assert_eq!(steps, 1);
        let HistoryLookup::Found(found) = found else {
            panic!("the deleted message is remembered: {found:?}");
        };
        assert_eq!(found.state, None);
        assert_eq!(found.attempts[0].1.outcome, crate::AttemptOutcome::Deleted);
    }
}
