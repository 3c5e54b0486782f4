//! Message operations: send, receive (with dead-lettering), delete, change visibility; and where
//! payloads are kept (spill to the log, relocate for compaction).
use std::sync::Arc;

use crate::error::{Error, Field, Result};
use crate::fifo::sequence_number;
use crate::message::{validate_send, Location, MessageId, Payload, PayloadRef, SendInput};
use crate::queue::{MessageState, Queue};
use crate::receipt::Receipt;
use crate::record::Record;
use crate::transfer::TransferKind;

use super::{
    check_visibility, DeadLetterTarget, DeleteOutcome, Delivery, Engine, Journal, LeaseView,
    ReceiveRequest, Sent,
};

impl Engine {
    /// The checks of a batch send that fail the whole request, before any entry is sent: on a
    /// FIFO queue every entry needs a group id, and a deduplication id unless the queue has
    /// content-based deduplication (SQS answers such a batch with the error, not per entry).
    pub fn check_send_batch<'a>(
        &self,
        name: &str,
        inputs: impl IntoIterator<Item = &'a SendInput>,
    ) -> Result<()> {
        let queue = self.queue(name).ok_or(Error::QueueDoesNotExist)?;
        super::fifo::check_batch(queue, inputs)
    }

    /// Enqueues a message with the id the caller drew.
    pub fn send(
        &mut self,
        now_ms: u64,
        name: &str,
        input: SendInput,
        message_id: MessageId,
        journal: &mut Journal,
    ) -> Result<Sent> {
        let body_md5 = crate::message::body_md5(&input.body);
        self.send_digested(now_ms, name, input, body_md5, message_id, journal)
    }

    /// [`Engine::send`], given the MD5 of the input's body (`body_md5`), which the caller
    /// computed before taking the engine's lock, for a batch's bodies all at once
    /// ([`crate::md5_lanes::digests`]). Debug builds check it.
    pub fn send_digested(
        &mut self,
        now_ms: u64,
        name: &str,
        input: SendInput,
        body_md5: [u8; 16],
        message_id: MessageId,
        journal: &mut Journal,
    ) -> Result<Sent> {
        let (now_ms, queue_id) = self.advanced(now_ms, name)?;
        let queue = &self.queues[&queue_id];
        let fifo = super::fifo::fifo_fields(queue, &input)?;
        // A FIFO send may only say 0 (anything else was refused above), and the queue's delay
        // applies to it all the same: SQS sets FIFO delays per queue only.
        let delay_seconds = match (queue.fifo().is_some(), input.delay_seconds) {
            (false, Some(delay_seconds)) => delay_seconds,
            _ => queue.config.delay_seconds,
        };
        let payload = validate_send(
            input,
            body_md5,
            queue.config.maximum_message_size_bytes,
            &self.config.limits,
        )?;
        let payload = Arc::new(payload);
        if let Some(fifo) = fifo.as_ref().filter(|_| queue.fifo().is_some()) {
            if let Some(first) = super::fifo::duplicate_of(queue, fifo) {
                return Ok(Sent {
                    message_id: first.message_id,
                    seq: first.seq,
                    payload,
                    sequence_number: Some(sequence_number(first.seq)),
                    duplicate: true,
                });
            }
        }
        let seq = queue.next_seq();
        let sequence_number = queue.fifo().map(|_| sequence_number(seq));
        let record = Record::Send {
            now_ms,
            queue_id,
            seq,
            message_id,
            visible_at_ms: now_ms + u64::from(delay_seconds) * 1000,
            payload: payload.clone(),
            fifo,
        };
        self.commit(record, journal);
        Ok(Sent {
            message_id,
            seq,
            payload,
            sequence_number,
            duplicate: false,
        })
    }

    /// Leases up to `max_messages` ready messages, oldest first. A message that already had
    /// `maxReceiveCount` receives moves to the dead-letter queue instead (when it exists).
    /// On a FIFO queue, see [`Engine::receive_with_attempt`].
    pub fn receive(
        &mut self,
        now_ms: u64,
        name: &str,
        request: ReceiveRequest,
        journal: &mut Journal,
    ) -> Result<Vec<Delivery<PayloadRef>>> {
        self.receive_with_attempt(now_ms, name, request, None, journal)
    }

    /// [`Engine::receive`] with a `ReceiveRequestAttemptId`. On a FIFO queue, messages come
    /// group by group (see [`crate::fifo`]), and a retry with the same attempt id within five
    /// minutes returns the same messages and receipts while their leases are unchanged. On a
    /// standard queue the attempt id is ignored, as SQS does.
    pub fn receive_with_attempt(
        &mut self,
        now_ms: u64,
        name: &str,
        request: ReceiveRequest,
        attempt_id: Option<&str>,
        journal: &mut Journal,
    ) -> Result<Vec<Delivery<PayloadRef>>> {
        let limits = &self.config.limits;
        if request.max_messages == 0 || request.max_messages > limits.batch_size_max {
            return Err(Error::OutOfRange {
                field: Field::MaxNumberOfMessages,
                value: request.max_messages as u64,
                min: 1,
                max: limits.batch_size_max as u64,
            });
        }
        if let Some(v) = request.visibility_timeout_seconds {
            check_visibility(v, limits)?;
        }
        let (now_ms, queue_id) = self.advanced(now_ms, name)?;
        let queue = &self.queues[&queue_id];
        let in_flight_max = self.config.limits.in_flight_max;
        // A standard queue at the limit answers OverLimit; a FIFO queue answers no messages:
        // "If this limit is reached, Amazon SQS does not return an error, but processing may be
        // impacted" (SQS developer guide, FIFO queue quotas, messages per queue in flight). A
        // FIFO receive that leases nothing still validates and retries its attempt id.
        if queue.in_flight_count() >= in_flight_max && queue.fifo().is_none() {
            return Err(Error::OverLimit { in_flight_max });
        }
        let wanted = request
            .max_messages
            .min(in_flight_max.saturating_sub(queue.in_flight_count()));
        let visibility_ms = u64::from(
            request
                .visibility_timeout_seconds
                .unwrap_or(queue.config.visibility_timeout_seconds),
        ) * 1000;
        let dead_letter = self.dead_letter_target(queue);
        if queue.fifo().is_some() {
            let receive = super::fifo::FifoReceive {
                now_ms,
                queue_id,
                wanted,
                visibility_ms,
                dead_letter,
                client: request.client,
            };
            return self.receive_fifo(receive, attempt_id, journal);
        }
        let mut deliveries = Vec::with_capacity(wanted);
        // A lease of 0 seconds leaves the message ready at its old place in receive order, so
        // the walk goes on after the last message it took instead of from the front: one receive
        // delivers a message at most once.
        let mut taken_through = None;
        // A fair queue serves quiet tenants first (see `crate::fair`). Each lease moves the
        // message out of its tenant's ready set, so the walk needs no position; a lease of
        // 0 seconds would not, so such a receive takes the plain order.
        let fair = queue.is_fair() && visibility_ms > 0;
        while deliveries.len() < wanted {
            let queue = &self.queues[&queue_id];
            let next = match queue.fair().filter(|_| fair) {
                Some(tenants) => tenants.next(),
                None => queue.next_ready(taken_through),
            };
            let Some((sent_at_ms, seq)) = next else {
                break;
            };
            taken_through = Some((sent_at_ms, seq));
            let message = queue.message(seq).expect("ready message exists");
            let receive_count = message.receive_count;
            if self.dead_letter_if_spent(
                now_ms,
                queue_id,
                seq,
                receive_count,
                dead_letter.as_ref(),
                journal,
            ) {
                continue;
            }
            let attempt = receive_count + 1;
            let record = Record::Lease {
                now_ms,
                queue_id,
                seq,
                attempt,
                visible_at_ms: now_ms + visibility_ms,
                client: request.client.clone(),
            };
            self.commit(record, journal);
            deliveries.push(self.delivery(queue_id, seq));
        }
        Ok(deliveries)
    }

    /// Moves message `seq` to the dead-letter queue if it already had `maxReceiveCount` receives
    /// (`dead_letter`: the target and the limit, if the policy's target exists): one record
    /// for a queue of this engine, a transfer for one of another bucket. Returns whether it
    /// moved.
    pub(super) fn dead_letter_if_spent(
        &mut self,
        now_ms: u64,
        queue_id: u64,
        seq: u64,
        receive_count: u32,
        dead_letter: Option<&(DeadLetterTarget, u32)>,
        journal: &mut Journal,
    ) -> bool {
        let Some((target, max_receive_count)) = dead_letter else {
            return false;
        };
        if receive_count < *max_receive_count {
            return false;
        }
        match target {
            DeadLetterTarget::Local(dead_letter_queue_id) => {
                let dead_letter_seq = self.queues[dead_letter_queue_id].next_seq();
                let record = Record::DeadLetter {
                    now_ms,
                    queue_id,
                    seq,
                    dead_letter_queue_id: *dead_letter_queue_id,
                    dead_letter_seq,
                };
                self.commit(record, journal);
            }
            DeadLetterTarget::Remote(destination) => {
                let kind = TransferKind::DeadLetter;
                self.transfer_out(now_ms, queue_id, seq, destination, kind, None, journal);
            }
        }
        true
    }

    /// The dead-letter queue and the receive limit, if the policy's target exists: a queue of
    /// this engine, or a name that lives in another bucket (whose engine decides whether it
    /// exists when the transfer arrives; one that refused a transfer lately counts as missing).
    /// Only a queue of the same kind (FIFO or standard) is a target: a policy is checked when
    /// it is set, but its target may since have been deleted and created again as the other
    /// kind; then messages stay where they are, as when the target does not exist.
    pub(super) fn dead_letter_target(&self, queue: &Queue) -> Option<(DeadLetterTarget, u32)> {
        let policy = queue.config.redrive_policy.as_ref()?;
        let name = policy.dead_letter_queue.as_str();
        let target = match self.names.get(name) {
            Some(&target) => {
                let same_kind = self.queues[&target].fifo().is_some() == queue.fifo().is_some();
                if target == queue.id || !same_kind {
                    return None;
                }
                DeadLetterTarget::Local(target)
            }
            None if self.is_remote(name) && !self.refused_recently(name) => {
                DeadLetterTarget::Remote(Arc::from(name))
            }
            None => return None,
        };
        Some((target, policy.max_receive_count))
    }

    pub(super) fn delivery(&self, queue_id: u64, seq: u64) -> Delivery<PayloadRef> {
        let queue = &self.queues[&queue_id];
        let message = queue.message(seq).expect("just leased");
        let tenant_noisy = queue.fair().map(|fair| {
            message
                .fifo
                .as_ref()
                .is_some_and(|fifo| fair.is_noisy(&fifo.group_id))
        });
        Delivery {
            message_id: message.id,
            receipt: self.key.seal(Receipt {
                queue_id,
                seq,
                attempt: message.receive_count,
            }),
            payload: message.payload.clone(),
            receive_count: message.receive_count,
            sent_at_ms: message.sent_at_ms,
            first_received_at_ms: message
                .first_received_at_ms()
                .unwrap_or(message.leased_at_ms),
            visible_at_ms: message.visible_at_ms,
            dead_letter_source: message.dead_letter_source.clone(),
            fifo: message.fifo.clone(),
            sequence_number: self.queues[&queue_id].fifo().map(|_| sequence_number(seq)),
            previous_attempt: message.history.as_ref().and_then(|history| {
                let attempts = &history.attempts;
                attempts
                    .len()
                    .checked_sub(2)
                    .map(|before| attempts[before].outcome)
            }),
            tenant_noisy,
        }
    }

    /// Opens a receipt for the named queue: the queue's id and the receipt's content.
    pub(super) fn open_receipt(
        &mut self,
        now_ms: u64,
        name: &str,
        receipt: &str,
    ) -> Result<(u64, Receipt)> {
        let (_, queue_id) = self.advanced(now_ms, name)?;
        Ok((queue_id, self.open_in(queue_id, receipt)?))
    }

    /// Opens a receipt of the queue with id `queue_id`.
    fn open_in(&self, queue_id: u64, receipt: &str) -> Result<Receipt> {
        let receipt = self.key.open(receipt)?;
        if receipt.queue_id != queue_id {
            return Err(Error::ReceiptHandleIsInvalid);
        }
        Ok(receipt)
    }

    /// Deletes the message of a receipt, if the receipt is its current attempt's; when it
    /// deletes, also tells the lease the delete ended, for observers such as metrics
    /// (processing time, lease time left, receive count).
    pub fn delete(
        &mut self,
        now_ms: u64,
        name: &str,
        receipt: &str,
        journal: &mut Journal,
    ) -> Result<(DeleteOutcome, Option<LeaseView>)> {
        let (_, queue_id) = self.advanced(now_ms, name)?;
        self.delete_in(queue_id, receipt, journal)
    }

    /// [`Engine::delete`] in the queue with id `queue_id` as it is, not brought forward: for
    /// the entries of a batch after the first, which brought it forward to the batch's time.
    /// A delete only removes (a message, its lease, its timer), so nothing falls due between
    /// entries, and bringing the queue forward again to the same time would change nothing (the
    /// simulations check that each entry answers as a delete of its own): about 170
    /// instructions per entry spared.
    pub fn delete_in(
        &mut self,
        queue_id: u64,
        receipt: &str,
        journal: &mut Journal,
    ) -> Result<(DeleteOutcome, Option<LeaseView>)> {
        if !self.queues.contains_key(&queue_id) {
            return Err(Error::QueueDoesNotExist);
        }
        let receipt = self.open_in(queue_id, receipt)?;
        let now_ms = self.clock_ms;
        let queue = self.queue_mut(queue_id);
        let Some(message) = queue.message(receipt.seq) else {
            return Ok((DeleteOutcome::AlreadyGone, None));
        };
        if receipt.attempt > message.receive_count {
            return Err(Error::ReceiptHandleIsInvalid);
        }
        let is_fifo = queue.fifo().is_some();
        let expired_fifo = is_fifo && message.state != MessageState::InFlight;
        if receipt.attempt < message.receive_count {
            queue.stale_receipts_seen += 1;
            // On a FIFO queue a receipt is valid only while its lease lasts (as in SQS): a
            // late delete would otherwise remove a message the next consumer of its group
            // is working on, or let the group run ahead of it.
            return if self.config.reject_stale_deletes || is_fifo {
                Err(Error::ReceiptSuperseded)
            } else {
                Ok((DeleteOutcome::IgnoredStale, None))
            };
        }
        if expired_fifo {
            return Err(Error::ReceiptSuperseded);
        }
        let lease = LeaseView {
            queue_id,
            message_id: message.id,
            leased_at_ms: message.leased_at_ms,
            visible_at_ms: message.visible_at_ms,
            receive_count: message.receive_count,
        };
        let record = Record::Delete {
            now_ms,
            queue_id,
            seq: receipt.seq,
        };
        self.commit(record, journal);
        Ok((DeleteOutcome::Deleted, Some(lease)))
    }

    /// Sets the lease of a receipt's attempt to end `visibility_timeout_seconds` from now
    /// (0 releases it at once). Returns when the lease now ends.
    pub fn change_visibility(
        &mut self,
        now_ms: u64,
        name: &str,
        receipt: &str,
        visibility_timeout_seconds: u32,
        journal: &mut Journal,
    ) -> Result<u64> {
        let limits = &self.config.limits;
        check_visibility(visibility_timeout_seconds, limits)?;
        let lease_max_ms = u64::from(limits.visibility_timeout_max_seconds) * 1000;
        let max_seconds = limits.visibility_timeout_max_seconds;
        let (queue_id, receipt) = self.open_receipt(now_ms, name, receipt)?;
        let now_ms = self.clock_ms;
        let queue = self.queue_mut(queue_id);
        let Some(message) = queue.message(receipt.seq) else {
            return Err(Error::MessageNotInFlight);
        };
        if receipt.attempt > message.receive_count {
            return Err(Error::ReceiptHandleIsInvalid);
        }
        if receipt.attempt < message.receive_count {
            queue.stale_receipts_seen += 1;
            return Err(Error::ReceiptSuperseded);
        }
        if queue.fifo().is_some() && message.state != MessageState::InFlight {
            // A FIFO receipt dies with its lease (see `delete`).
            return Err(Error::ReceiptSuperseded);
        }
        let visible_at_ms = now_ms + u64::from(visibility_timeout_seconds) * 1000;
        // A release (0) never lengthens a lease, so the cap does not apply to it: a consumer
        // shutting down must always be able to hand its messages back.
        if visibility_timeout_seconds > 0 && visible_at_ms - message.leased_at_ms > lease_max_ms {
            return Err(Error::LeaseTooLong { max_seconds });
        }
        let record = Record::ChangeVisibility {
            now_ms,
            queue_id,
            seq: receipt.seq,
            visible_at_ms,
        };
        self.commit(record, journal);
        Ok(visible_at_ms)
    }

    /// Writes message `seq`'s payload again (a `Relocate` record), if the message still exists
    /// and its payload is still at `from`: compaction moves the live payloads out of a sparse
    /// log segment so the segment can be removed. The caller read `payload` from `from`.
    /// Returns whether a record was made.
    pub fn relocate(
        &mut self,
        queue_id: u64,
        seq: u64,
        from: Location,
        payload: Arc<Payload>,
        journal: &mut Journal,
    ) -> bool {
        let still_there = self
            .payload_mut(queue_id, seq)
            .is_some_and(|payload| payload.stored() == Some(from));
        if still_there {
            let now_ms = self.clock_ms;
            let record = Record::Relocate {
                now_ms,
                queue_id,
                seq,
                payload,
            };
            self.commit(record, journal);
        }
        still_there
    }
}
