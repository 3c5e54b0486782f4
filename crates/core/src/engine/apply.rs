//! `apply`: the one function through which the engine's state changes, and the snapshot that
//! describes the whole state as records `apply` can rebuild it from.

use std::sync::Arc;

use crate::fifo::{
    Deduplicated, DeduplicationScope, FifoMessage, ReceiveAttempt, DEDUPLICATION_WINDOW_MS,
};
use crate::history::{AttemptHistory, AttemptOutcome};
use crate::message::{Location, PayloadRef};
use crate::queue::{Message, MessageState, Queue};
use crate::record::Record;
use crate::store::Frozen;

use super::Engine;

impl Engine {
    /// Applies one record: the only way the engine's state changes. Live operations call it
    /// with the records they make; recovery calls it with the records read back from the log.
    ///
    /// Panics if the record does not fit the state (a message it names does not exist): that
    /// means the log and the engine disagree, and going on would serve wrong answers.
    pub fn apply(&mut self, record: &Record) {
        let now_ms = self.tick(record.now_ms());
        match record {
            Record::CreateQueue {
                queue_id,
                name,
                config,
                tags,
                ..
            } => {
                self.add_queue(Queue::new(
                    *queue_id,
                    name,
                    (**config).clone(),
                    tags.clone(),
                    now_ms,
                ));
            }
            Record::DeleteQueue { queue_id, .. } => {
                let queue = self.queues.remove(queue_id).expect("deleted queue exists");
                self.names.remove(&queue.name);
                self.fail_tasks_of_deleted(*queue_id, &queue.name);
                self.remember_deleted_name(queue.name.clone(), now_ms);
            }
            Record::SetConfig {
                queue_id, config, ..
            } => {
                let queue = self.advance(*queue_id, now_ms);
                let delay_changed = queue.config.delay_seconds != config.delay_seconds;
                queue.config = (**config).clone();
                queue.last_modified_at_ms = now_ms;
                // A FIFO queue's delay is retroactive (see `Queue::apply_queue_delay`).
                if delay_changed && queue.fifo().is_some() {
                    queue.apply_queue_delay(now_ms);
                }
            }
            Record::SetTags { queue_id, tags, .. } => {
                self.advance(*queue_id, now_ms).tags = tags.clone();
            }
            Record::Purge { queue_id, .. } => {
                let queue = self.advance(*queue_id, now_ms);
                queue.counters.purged += queue.clear() as u64;
                queue.last_purge_at_ms = Some(now_ms);
                // SQS forgets deduplication ids on a purge (and only then).
                if let Some(fifo) = queue.fifo_mut() {
                    fifo.forget();
                }
            }
            Record::Send {
                queue_id,
                seq,
                message_id,
                visible_at_ms,
                payload,
                fifo,
                ..
            } => {
                let state = if *visible_at_ms > now_ms {
                    MessageState::Delayed
                } else {
                    MessageState::Ready
                };
                let message = Message {
                    id: *message_id,
                    payload: PayloadRef::Inline(payload.clone()),
                    sent_at_ms: now_ms,
                    visible_at_ms: *visible_at_ms,
                    leased_at_ms: 0,
                    history: None,
                    receive_count: 0,
                    state,
                    dead_letter_source: None,
                    redrive_generation: 0,
                    fifo: fifo.clone(),
                };
                let queue = self.advance(*queue_id, now_ms);
                queue.insert(*seq, message);
                queue.counters.sent += 1;
                if let Some(fifo) = fifo.as_ref().filter(|_| queue.fifo().is_some()) {
                    remember_send(queue, *seq, *message_id, fifo, now_ms);
                }
            }
            Record::Lease {
                queue_id,
                seq,
                attempt,
                visible_at_ms,
                client,
                ..
            } => {
                let client = client.as_ref().map(|client| self.clients.intern(client));
                let kept = self.config.limits.attempt_history_max;
                let queue = self.advance(*queue_id, now_ms);
                let message = queue.message_mut(*seq).expect("leased message exists");
                assert_eq!(message.state, MessageState::Ready, "lease of message {seq}");
                assert_eq!(
                    message.receive_count + 1,
                    *attempt,
                    "attempt of message {seq}"
                );
                message.receive_count = *attempt;
                message.leased_at_ms = now_ms;
                message
                    .history
                    .get_or_insert_with(|| Box::new(AttemptHistory::empty(now_ms, *attempt)))
                    .begin(*attempt, now_ms, *visible_at_ms, client, kept);
                queue.set_visibility(*seq, now_ms, *visible_at_ms);
                queue.counters.received += 1;
            }
            Record::ChangeVisibility {
                queue_id,
                seq,
                visible_at_ms,
                ..
            } => {
                let queue = self.advance(*queue_id, now_ms);
                queue.set_visibility(*seq, now_ms, *visible_at_ms);
                let message = queue.message_mut(*seq).expect("changed message exists");
                if let Some(history) = &mut message.history {
                    history.change(now_ms, *visible_at_ms);
                }
                if *visible_at_ms <= now_ms {
                    queue.counters.leases_released += 1;
                } else {
                    queue.counters.leases_changed += 1;
                }
            }
            Record::Delete { queue_id, seq, .. } => {
                let queue = self.advance(*queue_id, now_ms);
                let message = queue.remove(*seq).expect("deleted message exists");
                queue.counters.deleted += 1;
                if message.state != MessageState::InFlight {
                    queue.counters.deleted_late += 1;
                }
                queue.remember_deleted(*seq, message, now_ms);
            }
            Record::DeadLetter {
                queue_id,
                seq,
                dead_letter_queue_id,
                dead_letter_seq,
                ..
            } => self.dead_letter(
                now_ms,
                *queue_id,
                *seq,
                *dead_letter_queue_id,
                *dead_letter_seq,
            ),
            Record::FailMessage {
                queue_id,
                seq,
                dead_letter_queue_id,
                dead_letter_seq,
                reason,
                ..
            } => {
                let source = self.advance(*queue_id, now_ms);
                let message = source.message_mut(*seq).expect("failed message exists");
                if let Some(history) = &mut message.history {
                    history.end(AttemptOutcome::Failed, now_ms);
                }
                self.dead_letter(
                    now_ms,
                    *queue_id,
                    *seq,
                    *dead_letter_queue_id,
                    *dead_letter_seq,
                );
                self.queue_mut(*dead_letter_queue_id)
                    .set_failure_reason(*dead_letter_seq, Arc::from(reason.as_str()));
            }
            Record::RestoreFailureReason {
                queue_id,
                seq,
                reason,
                ..
            } => self
                .queue_mut(*queue_id)
                .set_failure_reason(*seq, Arc::from(reason.as_str())),
            Record::ReceiveAttempt {
                queue_id,
                attempt_id,
                received_at_ms,
                leases,
                ..
            } => {
                let attempt = ReceiveAttempt {
                    received_at_ms: *received_at_ms,
                    leases: leases.clone(),
                };
                self.advance(*queue_id, now_ms)
                    .fifo_mut()
                    .expect("receive attempt on a FIFO queue")
                    .remember_attempt(attempt_id, attempt);
            }
            Record::RestoreDeduplication {
                queue_id,
                scope,
                deduplication_id,
                message_id,
                seq,
                expires_at_ms,
                ..
            } => {
                let entry = Deduplicated {
                    message_id: *message_id,
                    seq: *seq,
                    expires_at_ms: *expires_at_ms,
                };
                self.queue_mut(*queue_id)
                    .fifo_mut()
                    .expect("deduplication entry of a FIFO queue")
                    .remember(
                        Arc::from(scope.as_str()),
                        Arc::from(deduplication_id.as_str()),
                        entry,
                    );
            }
            Record::RestoreGroupRelease {
                queue_id, group_id, ..
            } => self.queue_mut(*queue_id).release_group(group_id),
            Record::RestoreTenant {
                queue_id,
                group_id,
                last_sent_at_ms,
                processing,
                noisy,
                ..
            } => self.queue_mut(*queue_id).restore_tenant(
                group_id,
                *last_sent_at_ms,
                *processing,
                *noisy,
            ),
            Record::RestoreFairTotal {
                queue_id,
                processing,
                ..
            } => self.queue_mut(*queue_id).restore_fair_total(*processing),
            Record::Relocate {
                queue_id,
                seq,
                payload,
                ..
            } => {
                let slot = self
                    .payload_mut(*queue_id, *seq)
                    .expect("relocated message exists");
                *slot = PayloadRef::Inline(payload.clone());
            }
            Record::SetMoveTask { task, .. } => self.apply_set_move_task(task),
            Record::MoveMessages {
                task_id,
                source_queue_id,
                moves,
                ..
            } => self.apply_move_messages(now_ms, *task_id, *source_queue_id, moves),
            Record::RestoreDeletedQueue {
                name,
                deleted_at_ms,
                ..
            } => {
                self.deleted_names
                    .insert(Arc::from(name.as_str()), *deleted_at_ms);
            }
            Record::RestoreEngine { next_queue_id, .. } => {
                self.next_queue_id = self.next_queue_id.max(*next_queue_id);
            }
            Record::RestoreQueue {
                queue_id,
                name,
                config,
                tags,
                created_at_ms,
                last_modified_at_ms,
                last_purge_at_ms,
                next_seq,
                counters,
                ..
            } => {
                let mut queue = Queue::new(
                    *queue_id,
                    name,
                    (**config).clone(),
                    tags.clone(),
                    *created_at_ms,
                );
                queue.last_modified_at_ms = *last_modified_at_ms;
                queue.last_purge_at_ms = *last_purge_at_ms;
                queue.counters = counters.clone();
                queue.raise_next_seq(*next_seq);
                self.add_queue(queue);
            }
            Record::TransferOut {
                queue_id,
                seq,
                transfer_id,
                destination,
                kind,
                reason,
                ..
            } => self.apply_transfer_out(
                now_ms,
                *queue_id,
                *seq,
                *transfer_id,
                destination,
                *kind,
                reason.as_deref(),
            ),
            Record::TransferIn {
                source_bucket,
                transfer_id,
                taken,
                ..
            } => self.apply_transfer_in(now_ms, *source_bucket, *transfer_id, taken.as_deref()),
            Record::TransferDone {
                transfer_id,
                taken,
                return_seq,
                ..
            } => self.apply_transfer_done(now_ms, *transfer_id, *taken, *return_seq),
            Record::RestoreTransfer { .. } => self.apply_restore_transfer(record),
            Record::RestoreTransfers {
                next_transfer_id,
                inbox,
                refused,
                ..
            } => self.apply_restore_transfers(*next_transfer_id, inbox, refused),
            Record::RestoreMessage {
                queue_id,
                seq,
                message,
                ..
            } => {
                let mut message = (**message).clone();
                // Restored attempts share their clients with live ones, as `Lease` does.
                for attempt in message.history.iter_mut().flat_map(|h| &mut h.attempts) {
                    if let Some(client) = &mut attempt.client {
                        *client = self.clients.intern(client);
                    }
                }
                self.queue_mut(*queue_id).insert(*seq, message);
            }
        }
    }

    /// The whole state as records which, applied in order to an empty engine with the same
    /// configuration and receipt key, rebuild it: leases, receive counts, counters and all.
    /// `emit` is called once per record. Equivalent to `self.freeze().records(emit)`.
    pub fn snapshot(&self, emit: impl FnMut(Record)) {
        self.freeze().records(emit)
    }

    /// A consistent copy of the whole state, cheap to take (one reference count per 256
    /// messages), to be turned into records later without holding whatever guards the engine.
    pub fn freeze(&self) -> FrozenEngine {
        let now_ms = self.clock_ms;
        let queues = self
            .names
            .values()
            .map(|queue_id| {
                let queue = &self.queues[queue_id];
                let record = Record::RestoreQueue {
                    now_ms,
                    queue_id: *queue_id,
                    name: queue.name.to_string(),
                    config: Box::new(queue.config.clone()),
                    tags: queue.tags.clone(),
                    created_at_ms: queue.created_at_ms,
                    last_modified_at_ms: queue.last_modified_at_ms,
                    last_purge_at_ms: queue.last_purge_at_ms,
                    next_seq: queue.next_seq(),
                    counters: queue.counters.clone(),
                };
                FrozenQueue {
                    queue_id: *queue_id,
                    record,
                    messages: queue.frozen_messages(),
                    window: queue.fifo().map_or_else(Vec::new, |fifo| {
                        fifo.window()
                            .map(|(scope, id, entry)| (scope.clone(), id.clone(), entry))
                            .collect()
                    }),
                    fifo_records: fifo_records(queue, now_ms)
                        .into_iter()
                        .chain(fair_records(queue, now_ms))
                        .chain(queue.failure_reasons().map(|(seq, reason)| {
                            Record::RestoreFailureReason {
                                now_ms,
                                queue_id: queue.id,
                                seq,
                                reason: reason.to_string(),
                            }
                        }))
                        .collect(),
                }
            })
            .collect();
        let move_tasks = self
            .moves
            .values()
            .map(|task| Record::SetMoveTask {
                now_ms,
                task: Box::new(task.clone()),
            })
            .collect();
        let deleted_queues = self
            .deleted_names
            .iter()
            .filter(|(name, _)| self.deleted_recently(name, now_ms))
            .map(|(name, &deleted_at_ms)| Record::RestoreDeletedQueue {
                now_ms,
                name: name.to_string(),
                deleted_at_ms,
            })
            .collect();
        FrozenEngine {
            now_ms,
            next_queue_id: self.next_queue_id,
            queues,
            move_tasks,
            deleted_queues,
            transfers: self.transfer_records(now_ms),
        }
    }

    /// Moves message `seq` of queue `queue_id` to the dead-letter queue as `dead_letter_seq`.
    fn dead_letter(
        &mut self,
        now_ms: u64,
        queue_id: u64,
        seq: u64,
        dead_letter_queue_id: u64,
        dead_letter_seq: u64,
    ) {
        let source = self.advance(queue_id, now_ms);
        let mut message = source.remove(seq).expect("dead-lettered message exists");
        source.counters.dead_lettered += 1;
        message.dead_letter_source = Some(source.name.clone());
        if let Some(history) = &mut message.history {
            history.dead_lettered(now_ms);
        }
        message.state = MessageState::Ready;
        message.visible_at_ms = now_ms;
        let target = self.advance(dead_letter_queue_id, now_ms);
        // As SQS does: a message moved to a FIFO dead-letter queue keeps its group, and its
        // message id becomes its deduplication id. (Only queues of the same kind are dead-letter
        // targets: see `Engine::dead_letter_target`.)
        // A standard queue's message keeps its group id (its tenant) and no deduplication id.
        message.fifo = match (message.fifo.take(), target.fifo().is_some()) {
            (Some(fifo), true) => Some(Box::new(FifoMessage {
                group_id: fifo.group_id,
                deduplication_id: Arc::from(message.id.to_string()),
            })),
            (fifo, is_fifo) => {
                assert!(!is_fifo, "dead letter across queue kinds");
                fifo
            }
        };
        target.insert(dead_letter_seq, message);
    }

    /// Adds a queue under its id and name; neither may be in use (ids are never reused).
    fn add_queue(&mut self, queue: Queue) {
        let (queue_id, name) = (queue.id, queue.name.clone());
        assert!(
            self.queues.insert(queue_id, queue).is_none(),
            "queue id {queue_id} reused"
        );
        assert!(
            self.names.insert(name, queue_id).is_none(),
            "queue name taken"
        );
        self.next_queue_id = self.next_queue_id.max(queue_id + 1);
    }

    pub(super) fn advance(&mut self, queue_id: u64, now_ms: u64) -> &mut Queue {
        let queue = self.queue_mut(queue_id);
        queue.advance(now_ms);
        queue
    }

    /// Panics if any queue's indexes disagree with its messages. O(n): tests only.
    pub fn check_invariants(&self) {
        for (name, id) in &self.names {
            let queue = &self.queues[id];
            assert_eq!(&queue.name, name);
            queue.check_invariants();
        }
        assert_eq!(self.names.len(), self.queues.len());
    }
}

/// The engine's state at one moment (see [`Engine::freeze`]), independent of later changes.
pub struct FrozenEngine {
    now_ms: u64,
    next_queue_id: u64,
    /// In name order.
    queues: Vec<FrozenQueue>,
    /// A `SetMoveTask` per task kept (after the queues: a task names them).
    move_tasks: Vec<Record>,
    /// A `RestoreDeletedQueue` per name deleted within the reuse delay.
    deleted_queues: Vec<Record>,
    /// A `RestoreTransfer` per message in the outbox, then `RestoreTransfers` (small: the
    /// outbox holds messages only until their targets answer).
    transfers: Vec<Record>,
}

struct FrozenQueue {
    queue_id: u64,
    /// Its `RestoreQueue` record.
    record: Record,
    messages: Frozen<Message>,
    /// A FIFO queue's deduplication window, in expiry order: copied when frozen (it is bounded
    /// by five minutes of traffic, but that can be a million entries), at the cost of two
    /// reference counts and no allocation per entry; [`FrozenEngine::records`] makes the records.
    window: Vec<(Arc<str>, Arc<str>, Deduplicated)>,
    /// A FIFO queue's receive attempts, and the failure reasons of its messages.
    fifo_records: Vec<Record>,
}

/// Enters the deduplication id of a FIFO send into its queue's window.
fn remember_send(
    queue: &mut Queue,
    seq: u64,
    message_id: crate::MessageId,
    fifo: &FifoMessage,
    now_ms: u64,
) {
    let scope = match queue.config.fifo.as_ref().map(|f| f.deduplication_scope) {
        Some(DeduplicationScope::MessageGroup) => fifo.group_id.clone(),
        _ => Arc::from(""),
    };
    let entry = Deduplicated {
        message_id,
        seq,
        expires_at_ms: now_ms + DEDUPLICATION_WINDOW_MS,
    };
    queue
        .fifo_mut()
        .expect("FIFO send to a FIFO queue")
        .remember(scope, fifo.deduplication_id.clone(), entry);
}

/// The records that rebuild what a fair queue's tenants hold besides their messages (none for
/// a queue without fair state). Copied when frozen: one per tenant with messages.
fn fair_records(queue: &Queue, now_ms: u64) -> Vec<Record> {
    let Some(fair) = queue.fair() else {
        return Vec::new();
    };
    let total = Record::RestoreFairTotal {
        now_ms,
        queue_id: queue.id,
        processing: fair.processing,
    };
    let tenants = fair
        .tenants()
        .map(|(group_id, tenant)| Record::RestoreTenant {
            now_ms,
            queue_id: queue.id,
            group_id: group_id.to_string(),
            last_sent_at_ms: tenant.last_sent_at_ms,
            processing: tenant.processing,
            noisy: tenant.noisy,
        });
    std::iter::once(total).chain(tenants).collect()
}

/// The records that rebuild a FIFO queue's attempts and released groups (none for a standard
/// queue).
fn fifo_records(queue: &Queue, now_ms: u64) -> Vec<Record> {
    let Some(fifo) = queue.fifo() else {
        return Vec::new();
    };
    let attempts = fifo
        .attempts()
        .map(|(attempt_id, attempt)| Record::ReceiveAttempt {
            now_ms,
            queue_id: queue.id,
            attempt_id: attempt_id.to_string(),
            received_at_ms: attempt.received_at_ms,
            leases: attempt.leases.clone(),
        });
    // After the messages: a group rebuilt from them is held while one is in flight.
    let releases = fifo
        .released_groups()
        .map(|group_id| Record::RestoreGroupRelease {
            now_ms,
            queue_id: queue.id,
            group_id: group_id.to_string(),
        });
    attempts.chain(releases).collect()
}

impl FrozenEngine {
    /// Messages in the copy.
    pub fn message_count(&self) -> usize {
        self.queues.iter().map(|queue| queue.messages.len()).sum()
    }

    /// Calls `each(queue_id, seq, location)` for every message whose payload is in the log: what
    /// the log must keep, and what a compactor may move.
    pub fn stored_payloads(&self, mut each: impl FnMut(u64, u64, Location)) {
        for queue in &self.queues {
            for (seq, message) in queue.messages.iter() {
                if let Some(location) = message.payload.stored() {
                    each(queue.queue_id, seq, location);
                }
            }
        }
        for record in &self.transfers {
            if let Record::RestoreTransfer {
                queue_id,
                seq,
                message,
                ..
            } = record
            {
                if let Some(location) = message.payload.stored() {
                    each(*queue_id, *seq, location);
                }
            }
        }
    }

    /// The records that rebuild this state through `Engine::apply`, in order.
    pub fn records(&self, mut emit: impl FnMut(Record)) {
        let now_ms = self.now_ms;
        emit(Record::RestoreEngine {
            now_ms,
            next_queue_id: self.next_queue_id,
        });
        for queue in &self.queues {
            emit(queue.record.clone());
            for (seq, message) in queue.messages.iter() {
                emit(Record::RestoreMessage {
                    now_ms,
                    queue_id: queue.queue_id,
                    seq,
                    message: Box::new(message.clone()),
                });
            }
            for (scope, deduplication_id, entry) in &queue.window {
                emit(Record::RestoreDeduplication {
                    now_ms,
                    queue_id: queue.queue_id,
                    scope: scope.to_string(),
                    deduplication_id: deduplication_id.to_string(),
                    message_id: entry.message_id,
                    seq: entry.seq,
                    expires_at_ms: entry.expires_at_ms,
                });
            }
            for record in &queue.fifo_records {
                emit(record.clone());
            }
        }
        for record in self
            .move_tasks
            .iter()
            .chain(&self.deleted_queues)
            .chain(&self.transfers)
        {
            emit(record.clone());
        }
    }
}
