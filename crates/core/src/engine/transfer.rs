//! Transfers between buckets: the outbox of a source engine, the inbox marks of a target
//! engine, and the three records between them, for dead letters and for the messages of move
//! tasks alike. The protocol and why it is exactly once are in [`crate::transfer`].

use std::collections::BTreeMap;
use std::sync::Arc;

use rustc_hash::FxHashMap;

use crate::fifo::FifoMessage;
use crate::history::AttemptOutcome;
use crate::message::PayloadRef;
use crate::moves::MoveStatus;
use crate::queue::{Message, MessageState};
use crate::record::{Record, TakenTransfer};
use crate::transfer::{
    IncomingTransfer, OutgoingTransfer, TransferAnswer, TransferKind, REFUSED_FOR_MS,
};

use super::moves::{redriven, refused_move};
use super::{Engine, Journal};

/// An engine's transfers: its outbox (as a source) and its inbox marks (as a target).
#[derive(Debug)]
pub(super) struct Transfers {
    /// Messages on their way to another bucket, by transfer id.
    outbox: BTreeMap<u64, Outbound>,
    /// The transfer id of each outbox entry, by (source queue id, seq): where `spill` and
    /// `relocate` find a payload that is in the outbox rather than in a queue.
    by_message: FxHashMap<(u64, u64), u64>,
    /// The id the next transfer out gets (ids are never reused: a target tells a new transfer
    /// from one it answered by its id).
    next_id: u64,
    /// Per source bucket, the last transfer answered: its id, and whether it was taken.
    inbox: BTreeMap<u32, (u64, bool)>,
    /// Dead-letter queues that refused a transfer, and until when they count as missing. A
    /// refused move does not enter it (see `apply_transfer_done`).
    refused: BTreeMap<Arc<str>, u64>,
}

impl Default for Transfers {
    fn default() -> Transfers {
        Transfers {
            outbox: BTreeMap::new(),
            by_message: FxHashMap::default(),
            next_id: 1,
            inbox: BTreeMap::new(),
            refused: BTreeMap::new(),
        }
    }
}

/// A message in the outbox.
#[derive(Clone, Debug)]
struct Outbound {
    /// Its queue, and its sequence number there, when it left.
    queue_id: u64,
    seq: u64,
    /// The source queue's name (a dead letter's `dead_letter_source` in the target).
    source_name: Arc<str>,
    /// Whether the source queue is a FIFO queue (only a queue of the same kind takes it).
    from_fifo: bool,
    destination: Arc<str>,
    kind: TransferKind,
    reason: Option<Arc<str>>,
    /// The message as it was in its queue (as a dead letter, its last attempt ended): what
    /// comes back if the target refuses it.
    message: Message,
}

impl Engine {
    /// The first transfer of the outbox, if any: the one to hand to its target next (see
    /// [`crate::transfer`]). Its payload may be a location in this engine's log, which the
    /// caller reads before handing it over.
    pub fn next_transfer(&self) -> Option<OutgoingTransfer> {
        let (&transfer_id, outbound) = self.transfers.outbox.first_key_value()?;
        let mut message = outbound.message.clone();
        if outbound.kind == TransferKind::DeadLetter {
            message.dead_letter_source = Some(outbound.source_name.clone());
        }
        Some(OutgoingTransfer {
            source_bucket: self.config.placement.bucket,
            transfer_id,
            destination: outbound.destination.clone(),
            from_fifo: outbound.from_fifo,
            kind: outbound.kind,
            reason: outbound.reason.clone(),
            message,
        })
    }

    /// Messages in the outbox.
    pub fn outbox_len(&self) -> usize {
        self.transfers.outbox.len()
    }

    /// Messages of move task `task_id` in the outbox: moved out of the source, not yet taken
    /// (the task completes only once there are none).
    pub(super) fn task_transfers(&self, task_id: u64) -> usize {
        self.transfers
            .outbox
            .values()
            .filter(|outbound| matches!(outbound.kind, TransferKind::Move { task_id: id, .. } if id == task_id))
            .count()
    }

    /// Takes a transfer from another bucket into its destination queue, or refuses it (no such
    /// queue here, or one of the other kind). A dead letter arrives as it left; a message of a
    /// move task arrives as the new message a local move makes of it (`redriven`). Answers a
    /// transfer it already answered (the last one of its source bucket) from memory, journaling
    /// nothing.
    pub fn ingest_transfer(
        &mut self,
        now_ms: u64,
        transfer: IncomingTransfer,
        journal: &mut Journal,
    ) -> TransferAnswer {
        let now_ms = self.tick(now_ms);
        if let Some(&(last_id, taken)) = self.transfers.inbox.get(&transfer.source_bucket) {
            if transfer.transfer_id == last_id {
                return if taken {
                    TransferAnswer::Taken
                } else {
                    TransferAnswer::Refused
                };
            }
            if transfer.transfer_id < last_id {
                return TransferAnswer::OutOfOrder;
            }
        }
        let target = self
            .names
            .get(transfer.destination.as_ref())
            .copied()
            .filter(|id| self.queues[id].fifo().is_some() == transfer.from_fifo);
        let taken = target.map(|queue_id| {
            let queue = self.queue_mut(queue_id);
            queue.advance(now_ms);
            let to_fifo = queue.fifo().is_some();
            let message = match transfer.kind {
                TransferKind::DeadLetter => {
                    let mut message = transfer.message;
                    message.state = MessageState::Ready;
                    message.visible_at_ms = now_ms;
                    // As a local move does (see `Engine::dead_letter`): a FIFO dead-letter
                    // queue's message keeps its group, and its message id becomes its
                    // deduplication id.
                    if to_fifo {
                        message.fifo = message.fifo.take().map(|fifo| {
                            Box::new(FifoMessage {
                                group_id: fifo.group_id,
                                deduplication_id: Arc::from(message.id.to_string()),
                            })
                        });
                    }
                    message
                }
                // The same function as a local move's, so the two cannot drift. Retention
                // counts from the arrival: that is when the message is in its destination.
                TransferKind::Move { message_id, .. } => {
                    redriven(transfer.message, message_id, to_fifo, now_ms)
                }
            };
            Box::new(TakenTransfer {
                queue_id,
                seq: queue.next_seq(),
                message,
                kind: transfer.kind,
                reason: transfer.reason.as_deref().map(str::to_string),
            })
        });
        let answer = if taken.is_some() {
            TransferAnswer::Taken
        } else {
            TransferAnswer::Refused
        };
        let record = Record::TransferIn {
            now_ms,
            source_bucket: transfer.source_bucket,
            transfer_id: transfer.transfer_id,
            taken,
        };
        self.commit(record, journal);
        answer
    }

    /// Records the target's answer to transfer `transfer_id` of the outbox: a taken message
    /// leaves the outbox; a refused one goes back to its queue (if the queue still exists).
    /// Then a dead letter's destination counts as missing for a while, and a move's task fails
    /// (see `apply_transfer_done`). Returns false, journaling nothing, if the outbox holds no
    /// such transfer.
    pub fn finish_transfer(
        &mut self,
        now_ms: u64,
        transfer_id: u64,
        answer: TransferAnswer,
        journal: &mut Journal,
    ) -> bool {
        let now_ms = self.tick(now_ms);
        let taken = match answer {
            TransferAnswer::Taken => true,
            TransferAnswer::Refused => false,
            TransferAnswer::OutOfOrder => return false,
        };
        let Some(outbound) = self.transfers.outbox.get(&transfer_id) else {
            return false;
        };
        let return_seq = self
            .queues
            .get(&outbound.queue_id)
            .map_or(0, |queue| queue.next_seq());
        let record = Record::TransferDone {
            now_ms,
            transfer_id,
            taken,
            return_seq,
        };
        self.commit(record, journal);
        true
    }

    /// Takes message `seq` out of queue `queue_id` into the outbox, for `destination` in
    /// another bucket (a dead-letter move, `reason` for a fail-now; or a move task's).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn transfer_out(
        &mut self,
        now_ms: u64,
        queue_id: u64,
        seq: u64,
        destination: &str,
        kind: TransferKind,
        reason: Option<String>,
        journal: &mut Journal,
    ) {
        let record = Record::TransferOut {
            now_ms,
            queue_id,
            seq,
            transfer_id: self.transfers.next_id,
            destination: destination.to_string(),
            kind,
            reason,
        };
        self.commit(record, journal);
    }

    /// Whether dead-letter queue `destination` refused a transfer recently (then it counts as
    /// missing).
    pub(super) fn refused_recently(&self, destination: &str) -> bool {
        self.transfers
            .refused
            .get(destination)
            .is_some_and(|&until_ms| self.clock_ms < until_ms)
    }

    /// The payload of message `seq` of queue `queue_id`, wherever the engine keeps it: in the
    /// queue, or in the outbox if the message left for another bucket (the outbox's bodies are
    /// spilled and relocated like a queue's).
    pub(super) fn payload_mut(&mut self, queue_id: u64, seq: u64) -> Option<&mut PayloadRef> {
        if let Some(message) = self
            .queues
            .get_mut(&queue_id)
            .and_then(|queue| queue.message_mut(seq))
        {
            return Some(&mut message.payload);
        }
        let transfer_id = self.transfers.by_message.get(&(queue_id, seq))?;
        let outbound = self.transfers.outbox.get_mut(transfer_id)?;
        Some(&mut outbound.message.payload)
    }

    /// Applies `TransferOut`. A dead letter leaves as a local dead-letter move does (counted,
    /// its history ended); a move task's message leaves as in `MoveMessages` (it must be ready,
    /// and counts as moved by its task from here on), and unchanged, so that it comes back as
    /// it was if its destination refuses it.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn apply_transfer_out(
        &mut self,
        now_ms: u64,
        queue_id: u64,
        seq: u64,
        transfer_id: u64,
        destination: &str,
        kind: TransferKind,
        reason: Option<&str>,
    ) {
        let source = self.advance(queue_id, now_ms);
        let mut message = source.remove(seq).expect("transferred message exists");
        let (source_name, from_fifo) = (source.name.clone(), source.fifo().is_some());
        match kind {
            TransferKind::DeadLetter => {
                source.counters.dead_lettered += 1;
                if let Some(history) = &mut message.history {
                    if reason.is_some() {
                        history.end(AttemptOutcome::Failed, now_ms);
                    }
                    history.dead_lettered(now_ms);
                }
            }
            TransferKind::Move { task_id, .. } => {
                assert_eq!(message.state, MessageState::Ready, "moved message {seq}");
                let task = self.moves.get_mut(&task_id).expect("moving task exists");
                task.moved += 1;
            }
        }
        self.insert_outbound(
            transfer_id,
            Outbound {
                queue_id,
                seq,
                source_name,
                from_fifo,
                destination: Arc::from(destination),
                kind,
                reason: reason.map(Arc::from),
                message,
            },
        );
    }

    fn insert_outbound(&mut self, transfer_id: u64, outbound: Outbound) {
        let transfers = &mut self.transfers;
        transfers
            .by_message
            .insert((outbound.queue_id, outbound.seq), transfer_id);
        assert!(
            transfers.outbox.insert(transfer_id, outbound).is_none(),
            "transfer {transfer_id} reused"
        );
        transfers.next_id = transfers.next_id.max(transfer_id + 1);
    }

    /// Applies `TransferIn`.
    pub(super) fn apply_transfer_in(
        &mut self,
        now_ms: u64,
        source_bucket: u32,
        transfer_id: u64,
        taken: Option<&TakenTransfer>,
    ) {
        self.transfers
            .inbox
            .insert(source_bucket, (transfer_id, taken.is_some()));
        let Some(taken) = taken else {
            return;
        };
        let mut message = taken.message.clone();
        for attempt in message.history.iter_mut().flat_map(|h| &mut h.attempts) {
            if let Some(client) = &mut attempt.client {
                *client = self.clients.intern(client);
            }
        }
        let queue = self.advance(taken.queue_id, now_ms);
        queue.insert(taken.seq, message);
        if let TransferKind::Move { .. } = taken.kind {
            queue.counters.sent += 1;
        }
        if let Some(reason) = &taken.reason {
            queue.set_failure_reason(taken.seq, Arc::from(reason.as_str()));
        }
    }

    /// Applies `TransferDone`. What a refusal changes besides the message's return follows
    /// from the outbox entry, so replay derives it from the record alone:
    /// - a dead letter's destination counts as missing for [`REFUSED_FOR_MS`], so that a spent
    ///   message is delivered past its limit rather than bouncing between its queue and the
    ///   outbox at every receive;
    /// - a move's task no longer counts the message as moved and, if still active, fails (as a
    ///   local task whose destination is missing does). A move does not mark its destination
    ///   as missing: its task stops at the first refusal, so nothing bounces, and a task an
    ///   operator starts right after creating the destination must not fail on an answer given
    ///   before (nor does a move consult the marks of dead letters, for the same reason).
    pub(super) fn apply_transfer_done(
        &mut self,
        now_ms: u64,
        transfer_id: u64,
        taken: bool,
        return_seq: u64,
    ) {
        let outbound = self
            .transfers
            .outbox
            .remove(&transfer_id)
            .expect("finished transfer exists");
        self.transfers
            .by_message
            .remove(&(outbound.queue_id, outbound.seq));
        if taken {
            return;
        }
        match outbound.kind {
            TransferKind::DeadLetter => {
                self.transfers
                    .refused
                    .retain(|_, &mut until| now_ms < until);
                self.transfers
                    .refused
                    .insert(outbound.destination.clone(), now_ms + REFUSED_FOR_MS);
            }
            TransferKind::Move { task_id, .. } => {
                // A finished task may have been dropped from the list already.
                if let Some(task) = self.moves.get_mut(&task_id) {
                    task.moved = task.moved.saturating_sub(1);
                    if task.status.is_active() {
                        let reason = refused_move(task, &outbound.destination);
                        task.status = MoveStatus::Failed;
                        task.failure_reason = Some(reason);
                    }
                }
            }
        }
        let Some(queue) = self.queues.get_mut(&outbound.queue_id) else {
            // Its queue was deleted meanwhile, and the message with it.
            return;
        };
        queue.advance(now_ms);
        if outbound.kind == TransferKind::DeadLetter {
            queue.counters.dead_lettered = queue.counters.dead_lettered.saturating_sub(1);
        }
        let mut message = outbound.message;
        message.state = MessageState::Ready;
        message.visible_at_ms = now_ms;
        queue.insert(return_seq, message);
    }

    /// Applies `RestoreTransfer`.
    pub(super) fn apply_restore_transfer(&mut self, record: &Record) {
        let Record::RestoreTransfer {
            transfer_id,
            queue_id,
            seq,
            source_name,
            from_fifo,
            destination,
            kind,
            reason,
            message,
            ..
        } = record
        else {
            unreachable!("a RestoreTransfer record");
        };
        self.insert_outbound(
            *transfer_id,
            Outbound {
                queue_id: *queue_id,
                seq: *seq,
                source_name: Arc::from(source_name.as_str()),
                from_fifo: *from_fifo,
                destination: Arc::from(destination.as_str()),
                kind: *kind,
                reason: reason.as_deref().map(Arc::from),
                message: (**message).clone(),
            },
        );
    }

    /// Applies `RestoreTransfers`.
    pub(super) fn apply_restore_transfers(
        &mut self,
        next_transfer_id: u64,
        inbox: &[(u32, u64, bool)],
        refused: &[(String, u64)],
    ) {
        let transfers = &mut self.transfers;
        transfers.next_id = transfers.next_id.max(next_transfer_id);
        for &(bucket, transfer_id, taken) in inbox {
            transfers.inbox.insert(bucket, (transfer_id, taken));
        }
        for (destination, until_ms) in refused {
            transfers
                .refused
                .insert(Arc::from(destination.as_str()), *until_ms);
        }
    }

    /// The records that rebuild the transfers' state (after the queues).
    pub(super) fn transfer_records(&self, now_ms: u64) -> Vec<Record> {
        let transfers = &self.transfers;
        let outbox =
            transfers
                .outbox
                .iter()
                .map(|(&transfer_id, outbound)| Record::RestoreTransfer {
                    now_ms,
                    transfer_id,
                    queue_id: outbound.queue_id,
                    seq: outbound.seq,
                    source_name: outbound.source_name.to_string(),
                    from_fifo: outbound.from_fifo,
                    destination: outbound.destination.to_string(),
                    kind: outbound.kind,
                    reason: outbound.reason.as_deref().map(str::to_string),
                    message: Box::new(outbound.message.clone()),
                });
        let state = Record::RestoreTransfers {
            now_ms,
            next_transfer_id: transfers.next_id,
            inbox: transfers
                .inbox
                .iter()
                .map(|(&bucket, &(transfer_id, taken))| (bucket, transfer_id, taken))
                .collect(),
            refused: transfers
                .refused
                .iter()
                .filter(|(_, &until_ms)| now_ms < until_ms)
                .map(|(destination, &until_ms)| (destination.to_string(), until_ms))
                .collect(),
        };
        outbox.chain(std::iter::once(state)).collect()
    }
}
