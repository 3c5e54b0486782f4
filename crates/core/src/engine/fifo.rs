//! The FIFO side of send and receive: the checks of a FIFO send, the deduplication window
//! lookup, group-by-group delivery and receive-attempt retries. The state they read is in
//! [`crate::fifo`]; they change it only through records, like every operation.

use std::sync::Arc;

use crate::error::{Error, Field, Result};
use crate::fifo::{
    check_token, content_deduplication_id, AttemptLease, Deduplicated, DeduplicationScope,
    FifoMessage,
};
use crate::history::Client;
use crate::message::{PayloadRef, SendInput};
use crate::queue::{MessageState, Queue};
use crate::record::Record;

use super::{Delivery, Engine, Journal};

/// The group and deduplication id of a send to `queue`, checked as SQS checks them. A standard
/// queue takes no deduplication id; its group id, optional, names the message's tenant (fair
/// queues) and follows the FIFO rules (1 to 128 alphanumeric or punctuation characters: SQS
/// quotas, "Message group ID": "The length of MessageGroupId is 128 characters. Valid values:
/// alphanumeric characters and punctuation"); it is kept with an empty deduplication id.
pub(super) fn fifo_fields(queue: &Queue, input: &SendInput) -> Result<Option<Box<FifoMessage>>> {
    let Some(config) = &queue.config.fifo else {
        if let Some(id) = &input.deduplication_id {
            return Err(Error::NotForQueueType {
                field: Field::MessageDeduplicationId,
                value: id.clone(),
            });
        }
        let Some(group_id) = &input.group_id else {
            return Ok(None);
        };
        check_token(Field::MessageGroupId, group_id)?;
        return Ok(Some(Box::new(FifoMessage {
            group_id: Arc::from(group_id.as_str()),
            deduplication_id: Arc::default(),
        })));
    };
    let Some(group_id) = &input.group_id else {
        return Err(Error::Missing(Field::MessageGroupId));
    };
    check_token(Field::MessageGroupId, group_id)?;
    if let Some(delay) = input.delay_seconds.filter(|&delay| delay > 0) {
        return Err(Error::NotForQueueType {
            field: Field::MessageDelaySeconds,
            value: delay.to_string(),
        });
    }
    let deduplication_id = match &input.deduplication_id {
        Some(id) => {
            check_token(Field::MessageDeduplicationId, id)?;
            id.clone()
        }
        None if config.content_based_deduplication => content_deduplication_id(&input.body),
        None => return Err(Error::Missing(Field::MessageDeduplicationId)),
    };
    Ok(Some(Box::new(FifoMessage {
        group_id: Arc::from(group_id.as_str()),
        deduplication_id: Arc::from(deduplication_id),
    })))
}

/// The checks of a batch send to `queue` that fail the whole request rather than one entry, as
/// SQS makes them: on a FIFO queue, an entry without a group id, or without a deduplication id
/// when the queue does not derive one from the body. Everything else fails its entry alone.
pub(super) fn check_batch<'a>(
    queue: &Queue,
    inputs: impl IntoIterator<Item = &'a SendInput>,
) -> Result<()> {
    let Some(config) = &queue.config.fifo else {
        return Ok(());
    };
    for input in inputs {
        if input.group_id.is_none() {
            return Err(Error::Missing(Field::MessageGroupId));
        }
        if input.deduplication_id.is_none() && !config.content_based_deduplication {
            return Err(Error::Missing(Field::MessageDeduplicationId));
        }
    }
    Ok(())
}

/// The message a FIFO send duplicates, if its deduplication id is in the window.
pub(super) fn duplicate_of(queue: &Queue, fifo: &FifoMessage) -> Option<Deduplicated> {
    let config = queue.config.fifo.as_ref()?;
    let scope = match config.deduplication_scope {
        DeduplicationScope::Queue => "",
        DeduplicationScope::MessageGroup => &fifo.group_id,
    };
    queue.fifo()?.deduplicated(scope, &fifo.deduplication_id)
}

/// A FIFO receive, after the checks every receive makes.
pub(super) struct FifoReceive {
    pub now_ms: u64,
    pub queue_id: u64,
    pub wanted: usize,
    pub visibility_ms: u64,
    pub dead_letter: Option<(super::DeadLetterTarget, u32)>,
    pub client: Option<Arc<Client>>,
}

impl Engine {
    /// Fills the batch one group at a time: the available group that resumes from the oldest
    /// message first, its ready messages in order from there until the batch is full or the
    /// group's next message is not ready, then the next group. Every message taken keeps its own
    /// lease; the group is held until any of them becomes visible again or all are deleted.
    pub(super) fn receive_fifo(
        &mut self,
        receive: FifoReceive,
        attempt_id: Option<&str>,
        journal: &mut Journal,
    ) -> Result<Vec<Delivery<PayloadRef>>> {
        let FifoReceive {
            now_ms,
            queue_id,
            wanted,
            ..
        } = receive;
        if let Some(attempt_id) = attempt_id {
            check_token(Field::ReceiveRequestAttemptId, attempt_id)?;
            if let Some(deliveries) = self.retry_attempt(&receive, attempt_id, journal) {
                return Ok(deliveries);
            }
        }
        let mut deliveries = Vec::with_capacity(wanted);
        let mut leases = Vec::new();
        // Groups are visited in the order they became available (when the message they resume
        // from became visible, then its sequence number), each at most once per receive: a
        // group served with a lease of 0 seconds is available again, now, after the cursor, and
        // a group whose first message was dead-lettered may be available again at a later one;
        // `served` skips both (it holds at most one group per delivery, so at most 10).
        let mut cursor = None;
        let mut served: Vec<Arc<str>> = Vec::new();
        while deliveries.len() < wanted {
            let queue = &self.queues[&queue_id];
            let fifo = queue.fifo().expect("FIFO queue");
            let Some(key) = fifo.next_available(cursor) else {
                break;
            };
            cursor = Some(key);
            let head = key.1;
            let message = queue.message(head).expect("group head exists");
            let group_id = &message.fifo.as_ref().expect("FIFO message").group_id;
            if served.contains(group_id) {
                continue;
            }
            served.push(group_id.clone());
            let taken = self.serve_group(&receive, head, &mut deliveries, journal);
            leases.extend(taken);
        }
        if let (Some(attempt_id), false) = (attempt_id, leases.is_empty()) {
            let record = Record::ReceiveAttempt {
                now_ms,
                queue_id,
                attempt_id: attempt_id.to_string(),
                received_at_ms: now_ms,
                leases,
            };
            self.commit(record, journal);
        }
        Ok(deliveries)
    }

    /// Leases the ready messages of the group that resumes from `head`, in order from there,
    /// until `deliveries` holds `receive.wanted` or the group's next message is not ready (in
    /// flight with another lease, or delayed); messages that used up their receives move to the
    /// dead-letter queue on the way. Returns the leases.
    fn serve_group(
        &mut self,
        receive: &FifoReceive,
        head: u64,
        deliveries: &mut Vec<Delivery<PayloadRef>>,
        journal: &mut Journal,
    ) -> Vec<AttemptLease> {
        let FifoReceive {
            now_ms,
            queue_id,
            wanted,
            visibility_ms,
            ..
        } = *receive;
        let dead_letter = receive.dead_letter.as_ref();
        let mut leases = Vec::new();
        let mut next = Some(head);
        while let Some(seq) = next {
            let queue = &self.queues[&queue_id];
            let message = queue.message(seq).expect("group member exists");
            if message.state != MessageState::Ready {
                break;
            }
            let group_id = &message.fifo.as_ref().expect("FIFO message").group_id;
            next = queue
                .fifo()
                .expect("FIFO queue")
                .next_in_group(group_id, seq);
            let receive_count = message.receive_count;
            // A move unblocks the group: its next message is the head now.
            if self.dead_letter_if_spent(now_ms, queue_id, seq, receive_count, dead_letter, journal)
            {
                continue;
            }
            let attempt = receive_count + 1;
            let visible_at_ms = now_ms + visibility_ms;
            let record = Record::Lease {
                now_ms,
                queue_id,
                seq,
                attempt,
                visible_at_ms,
                client: receive.client.clone(),
            };
            self.commit(record, journal);
            deliveries.push(self.delivery(queue_id, seq));
            leases.push(AttemptLease {
                seq,
                attempt,
                visible_at_ms,
            });
            // With visibility 0 the message is visible again at once and the next receive
            // resumes from it; this one still fills its batch in order, as with any lease.
            if deliveries.len() == wanted {
                break;
            }
        }
        leases
    }

    /// A retry of an earlier receive with this attempt id, if every lease it granted is still
    /// its message's current lease, unchanged and running: the same messages and receipts, each
    /// lease's visibility timeout restarted from now with this receive's (SQS, `ReceiveMessage`,
    /// ReceiveRequestAttemptId: "If a retry occurs within the deduplication interval, it resets
    /// the visibility timeout"), within the 12 hours a lease may last from its receive. The
    /// restart is a `ChangeVisibility` per lease whose deadline moves (the attempt history counts
    /// it as an extension), then the attempt remembered again with the new deadlines (its five
    /// minutes still count from the first receive), so a further retry matches.
    fn retry_attempt(
        &mut self,
        receive: &FifoReceive,
        attempt_id: &str,
        journal: &mut Journal,
    ) -> Option<Vec<Delivery<PayloadRef>>> {
        let (now_ms, queue_id) = (receive.now_ms, receive.queue_id);
        let lease_max_ms = u64::from(self.config.limits.visibility_timeout_max_seconds) * 1000;
        let queue = &self.queues[&queue_id];
        let attempt = queue.fifo()?.attempt(attempt_id)?;
        let mut leases = Vec::with_capacity(attempt.leases.len());
        for lease in &attempt.leases {
            let message = queue.message(lease.seq)?;
            let unchanged = message.state == MessageState::InFlight
                && message.receive_count == lease.attempt
                && message.visible_at_ms == lease.visible_at_ms;
            if !unchanged {
                return None;
            }
            let visible_at_ms = (now_ms + receive.visibility_ms)
                .min(message.leased_at_ms.saturating_add(lease_max_ms));
            leases.push(AttemptLease {
                visible_at_ms,
                ..*lease
            });
        }
        let received_at_ms = attempt.received_at_ms;
        // A retry at the same moment changes no deadline: no record (and no extension).
        let changed: Vec<AttemptLease> = leases
            .iter()
            .zip(&attempt.leases)
            .filter(|(new, old)| new.visible_at_ms != old.visible_at_ms)
            .map(|(new, _)| *new)
            .collect();
        for lease in &changed {
            let record = Record::ChangeVisibility {
                now_ms,
                queue_id,
                seq: lease.seq,
                visible_at_ms: lease.visible_at_ms,
            };
            self.commit(record, journal);
        }
        let deliveries = leases
            .iter()
            .map(|lease| self.delivery(queue_id, lease.seq))
            .collect();
        if !changed.is_empty() {
            let record = Record::ReceiveAttempt {
                now_ms,
                queue_id,
                attempt_id: attempt_id.to_string(),
                received_at_ms,
                leases,
            };
            self.commit(record, journal);
        }
        Some(deliveries)
    }
}
