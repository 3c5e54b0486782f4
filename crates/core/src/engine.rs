//! The engine: every queue, and the operations of the SQS model on them.
//!
//! Each operation takes the current time (`now_ms`, the server's clock, in milliseconds since the
//! Unix epoch) and a journal. It checks the request against the state, writes what it decided as
//! [`Record`]s into the journal, applies each record with [`Engine::apply`] and answers from the
//! resulting state. A caller that makes the state durable logs the journal's records before it
//! answers the client; recovery feeds them back through [`Engine::apply`].
//!
//! The engine reads no clock: time never goes backwards inside it (an earlier `now_ms` is taken
//! as the latest time seen), so a clock step back on the host cannot reorder leases.

use std::collections::BTreeMap;
use std::sync::Arc;

use rustc_hash::FxHashMap;

use crate::config::{QueueConfig, QueueConfigPatch, RedrivePolicy};
use crate::error::{Error, Field, Result};
use crate::limits::Limits;
use crate::message::{validate_send, MessageId, Payload, SendInput};
use crate::queue::{Message, MessageState, Queue, QueueCounters};
use crate::receipt::{Receipt, ReceiptKey};
use crate::record::Record;

/// Where an operation writes the records of what it changed.
pub type Journal = Vec<Record>;

/// What a deployment may tune.
#[derive(Clone, Debug, Default)]
pub struct EngineConfig {
    /// Bounds on everything.
    pub limits: Limits,
    /// Answer a delete that carries a superseded attempt's receipt with
    /// [`Error::ReceiptSuperseded`] instead of SQS's silent success. Either way it deletes nothing.
    pub reject_stale_deletes: bool,
}

/// A receive request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReceiveRequest {
    /// At most this many messages (1 to `Limits::batch_size_max`).
    pub max_messages: usize,
    /// Lease length; the queue's visibility timeout when `None`.
    pub visibility_timeout_seconds: Option<u32>,
}

/// One delivered message: a new attempt and its lease.
#[derive(Clone, Debug)]
pub struct Delivery {
    /// Stable identity.
    pub message_id: MessageId,
    /// The receipt of this attempt.
    pub receipt: String,
    /// Body and attributes.
    pub payload: Arc<Payload>,
    /// This attempt's number (`ApproximateReceiveCount`).
    pub receive_count: u32,
    /// `SentTimestamp`.
    pub sent_at_ms: u64,
    /// `ApproximateFirstReceiveTimestamp`.
    pub first_received_at_ms: u64,
    /// When this lease runs out.
    pub visible_at_ms: u64,
    /// The queue it was dead-lettered from, if it was.
    pub dead_letter_source: Option<Arc<str>>,
}

/// The answer to a send.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Sent {
    /// The new message's id.
    pub message_id: MessageId,
    /// Its sequence number in the queue.
    pub seq: u64,
    /// What was stored (for the checksums the client verifies).
    pub payload: Arc<Payload>,
}

/// What a delete did. All three are successes for the client.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DeleteOutcome {
    /// The message was deleted.
    Deleted,
    /// The message was already gone (deleted, expired, purged or dead-lettered).
    AlreadyGone,
    /// The receipt belonged to a superseded attempt: nothing was deleted.
    IgnoredStale,
}

/// The answer to a create.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Created {
    /// The queue's id.
    pub queue_id: u64,
    /// False when the queue existed already with compatible settings.
    pub created: bool,
}

/// A queue's settings and live counts, as of the time of the call.
#[derive(Clone, Debug)]
pub struct QueueInfo {
    /// Unique id.
    pub queue_id: u64,
    /// Name.
    pub name: Arc<str>,
    /// Settings.
    pub config: QueueConfig,
    /// Tags.
    pub tags: BTreeMap<String, String>,
    /// Creation time.
    pub created_at_ms: u64,
    /// Last change of settings.
    pub last_modified_at_ms: u64,
    /// Ready messages (exact).
    pub ready: usize,
    /// Leased messages (exact).
    pub in_flight: usize,
    /// Delayed messages (exact).
    pub delayed: usize,
    /// `SentTimestamp` of the oldest ready message.
    pub oldest_ready_sent_at_ms: Option<u64>,
    /// What happened so far.
    pub counters: QueueCounters,
}

/// All queues and their messages.
#[derive(Debug)]
pub struct Engine {
    config: EngineConfig,
    key: ReceiptKey,
    queues: FxHashMap<u64, Queue>,
    names: BTreeMap<Arc<str>, u64>,
    next_queue_id: u64,
    clock_ms: u64,
}

impl Engine {
    /// An engine without queues; `key` seals receipts.
    pub fn new(config: EngineConfig, key: ReceiptKey) -> Engine {
        Engine {
            config,
            key,
            queues: FxHashMap::default(),
            names: BTreeMap::new(),
            next_queue_id: 1,
            clock_ms: 0,
        }
    }

    /// The bounds in force.
    pub fn limits(&self) -> &Limits {
        &self.config.limits
    }

    /// The latest time the engine has seen.
    pub fn clock_ms(&self) -> u64 {
        self.clock_ms
    }

    fn tick(&mut self, now_ms: u64) -> u64 {
        self.clock_ms = self.clock_ms.max(now_ms);
        self.clock_ms
    }

    fn id_of(&self, name: &str) -> Result<u64> {
        self.names
            .get(name)
            .copied()
            .ok_or(Error::QueueDoesNotExist)
    }

    fn queue_mut(&mut self, id: u64) -> &mut Queue {
        self.queues
            .get_mut(&id)
            .expect("queue id from the name index")
    }

    /// Read-only access to a queue (its state as of the last operation on it).
    pub fn queue(&self, name: &str) -> Option<&Queue> {
        self.names.get(name).and_then(|id| self.queues.get(id))
    }

    /// Brings the named queue forward to `now_ms` and returns its id.
    fn advanced(&mut self, now_ms: u64, name: &str) -> Result<(u64, u64)> {
        let now_ms = self.tick(now_ms);
        let id = self.id_of(name)?;
        self.queue_mut(id).advance(now_ms);
        Ok((now_ms, id))
    }

    fn commit(&mut self, record: Record, journal: &mut Journal) {
        self.apply(&record);
        journal.push(record);
    }

    // ----- queues -------------------------------------------------------------------------

    /// Creates a queue, or returns the existing one if every setting `patch` names matches it.
    pub fn create_queue(
        &mut self,
        now_ms: u64,
        name: &str,
        patch: &QueueConfigPatch,
        tags: BTreeMap<String, String>,
        journal: &mut Journal,
    ) -> Result<Created> {
        let now_ms = self.tick(now_ms);
        validate_queue_name(name, &self.config.limits)?;
        if let Ok(id) = self.id_of(name) {
            let queue = &self.queues[&id];
            return match queue.config.conflicting_setting(patch) {
                Some(setting) => Err(Error::QueueAlreadyExists(setting)),
                None => Ok(Created {
                    queue_id: id,
                    created: false,
                }),
            };
        }
        let config = QueueConfig::default().patched(patch, &self.config.limits)?;
        self.check_redrive_policy(name, config.redrive_policy.as_ref())?;
        self.check_tag_count(tags.len())?;
        let queue_id = self.next_queue_id;
        let record = Record::CreateQueue {
            now_ms,
            queue_id,
            name: name.to_string(),
            config,
            tags,
        };
        self.commit(record, journal);
        Ok(Created {
            queue_id,
            created: true,
        })
    }

    fn check_redrive_policy(&self, source: &str, policy: Option<&RedrivePolicy>) -> Result<()> {
        let Some(policy) = policy else { return Ok(()) };
        let target = self.queue(&policy.dead_letter_queue).ok_or_else(|| {
            Error::invalid(Field::RedrivePolicy, "Dead letter target does not exist")
        })?;
        if &*target.name == source {
            return Err(Error::invalid(
                Field::RedrivePolicy,
                "A queue cannot be its own dead letter queue",
            ));
        }
        let allowed = target
            .config
            .redrive_allow_policy
            .as_ref()
            .is_none_or(|allow| allow.allows(source));
        if !allowed {
            return Err(Error::invalid(
                Field::RedrivePolicy,
                format!(
                    "The RedriveAllowPolicy of {} does not allow {source} to use it as a dead letter queue",
                    target.name
                ),
            ));
        }
        Ok(())
    }

    fn check_tag_count(&self, count: usize) -> Result<()> {
        if count > self.config.limits.tags_max {
            return Err(Error::TooManyTags {
                tags_max: self.config.limits.tags_max,
            });
        }
        Ok(())
    }

    /// Deletes a queue and its messages. Queues that name it as dead-letter queue keep their
    /// policy; their messages stay where they are until it exists again.
    pub fn delete_queue(&mut self, now_ms: u64, name: &str, journal: &mut Journal) -> Result<()> {
        let now_ms = self.tick(now_ms);
        let queue_id = self.id_of(name)?;
        self.commit(Record::DeleteQueue { now_ms, queue_id }, journal);
        Ok(())
    }

    /// Changes settings.
    pub fn set_queue_config(
        &mut self,
        now_ms: u64,
        name: &str,
        patch: &QueueConfigPatch,
        journal: &mut Journal,
    ) -> Result<()> {
        let (now_ms, queue_id) = self.advanced(now_ms, name)?;
        let config = self.queues[&queue_id]
            .config
            .patched(patch, &self.config.limits)?;
        if patch.redrive_policy.is_some() {
            self.check_redrive_policy(name, config.redrive_policy.as_ref())?;
        }
        let record = Record::SetConfig {
            now_ms,
            queue_id,
            config,
        };
        self.commit(record, journal);
        Ok(())
    }

    /// Adds or overwrites tags.
    pub fn tag_queue(
        &mut self,
        now_ms: u64,
        name: &str,
        tags: &BTreeMap<String, String>,
        journal: &mut Journal,
    ) -> Result<()> {
        let now_ms = self.tick(now_ms);
        let queue_id = self.id_of(name)?;
        let mut next = self.queues[&queue_id].tags.clone();
        next.extend(tags.iter().map(|(k, v)| (k.clone(), v.clone())));
        self.check_tag_count(next.len())?;
        self.commit(
            Record::SetTags {
                now_ms,
                queue_id,
                tags: next,
            },
            journal,
        );
        Ok(())
    }

    /// Removes tags by key (absent keys are ignored).
    pub fn untag_queue(
        &mut self,
        now_ms: u64,
        name: &str,
        keys: &[String],
        journal: &mut Journal,
    ) -> Result<()> {
        let now_ms = self.tick(now_ms);
        let queue_id = self.id_of(name)?;
        let mut next = self.queues[&queue_id].tags.clone();
        for key in keys {
            next.remove(key);
        }
        self.commit(
            Record::SetTags {
                now_ms,
                queue_id,
                tags: next,
            },
            journal,
        );
        Ok(())
    }

    /// Settings and exact counts.
    pub fn queue_info(&mut self, now_ms: u64, name: &str) -> Result<QueueInfo> {
        let (_, queue_id) = self.advanced(now_ms, name)?;
        let queue = &self.queues[&queue_id];
        Ok(QueueInfo {
            queue_id,
            name: queue.name.clone(),
            config: queue.config.clone(),
            tags: queue.tags.clone(),
            created_at_ms: queue.created_at_ms,
            last_modified_at_ms: queue.last_modified_at_ms,
            ready: queue.ready_count(),
            in_flight: queue.in_flight_count(),
            delayed: queue.delayed_count(),
            oldest_ready_sent_at_ms: queue.oldest_ready_sent_at_ms(),
            counters: queue.counters.clone(),
        })
    }

    /// Queue names starting with `prefix`, in order.
    pub fn list_queues(&self, prefix: &str) -> Vec<Arc<str>> {
        self.names
            .range::<str, _>((
                std::ops::Bound::Included(prefix),
                std::ops::Bound::Unbounded,
            ))
            .take_while(|(name, _)| name.starts_with(prefix))
            .map(|(name, _)| name.clone())
            .collect()
    }

    /// Names of the queues whose redrive policy targets `name`, in order.
    pub fn dead_letter_sources(&self, name: &str) -> Result<Vec<Arc<str>>> {
        self.id_of(name)?;
        Ok(self
            .names
            .iter()
            .filter(|(_, id)| {
                self.queues[id]
                    .config
                    .redrive_policy
                    .as_ref()
                    .is_some_and(|policy| policy.dead_letter_queue == name)
            })
            .map(|(name, _)| name.clone())
            .collect())
    }

    /// Deletes every message of a queue; at most once per `Limits::purge_interval_ms`.
    pub fn purge_queue(&mut self, now_ms: u64, name: &str, journal: &mut Journal) -> Result<()> {
        let (now_ms, queue_id) = self.advanced(now_ms, name)?;
        let interval_ms = self.config.limits.purge_interval_ms;
        if let Some(last) = self.queues[&queue_id].last_purge_at_ms {
            if now_ms < last + interval_ms {
                return Err(Error::PurgeInProgress);
            }
        }
        self.commit(Record::Purge { now_ms, queue_id }, journal);
        Ok(())
    }

    /// When time alone next changes the named queue (see [`Queue::next_deadline_ms`]).
    pub fn next_deadline_ms(&self, name: &str) -> Option<u64> {
        self.queue(name).and_then(Queue::next_deadline_ms)
    }

    // ----- messages -----------------------------------------------------------------------

    /// Enqueues a message with the id the caller drew.
    pub fn send(
        &mut self,
        now_ms: u64,
        name: &str,
        input: SendInput,
        message_id: MessageId,
        journal: &mut Journal,
    ) -> Result<Sent> {
        let (now_ms, queue_id) = self.advanced(now_ms, name)?;
        let queue = &self.queues[&queue_id];
        let delay_seconds = input.delay_seconds.unwrap_or(queue.config.delay_seconds);
        let payload = validate_send(
            input,
            queue.config.maximum_message_size_bytes,
            &self.config.limits,
        )?;
        let seq = queue.next_seq();
        let payload = Arc::new(payload);
        let record = Record::Send {
            now_ms,
            queue_id,
            seq,
            message_id,
            visible_at_ms: now_ms + u64::from(delay_seconds) * 1000,
            payload: payload.clone(),
        };
        self.commit(record, journal);
        Ok(Sent {
            message_id,
            seq,
            payload,
        })
    }

    /// Leases up to `max_messages` ready messages, oldest first. A message that already had
    /// `maxReceiveCount` receives moves to the dead-letter queue instead (when it exists).
    pub fn receive(
        &mut self,
        now_ms: u64,
        name: &str,
        request: ReceiveRequest,
        journal: &mut Journal,
    ) -> Result<Vec<Delivery>> {
        let limits = &self.config.limits;
        if request.max_messages == 0 || request.max_messages > limits.batch_size_max {
            return Err(Error::invalid(
                Field::MaxNumberOfMessages,
                format!(
                    "Value {} for parameter MaxNumberOfMessages is invalid. Reason: Must be between 1 and {}, if provided.",
                    request.max_messages, limits.batch_size_max
                ),
            ));
        }
        if let Some(v) = request.visibility_timeout_seconds {
            check_visibility(v, limits)?;
        }
        let (now_ms, queue_id) = self.advanced(now_ms, name)?;
        let queue = &self.queues[&queue_id];
        let in_flight_max = self.config.limits.in_flight_max;
        if queue.in_flight_count() >= in_flight_max {
            return Err(Error::OverLimit { in_flight_max });
        }
        let wanted = request
            .max_messages
            .min(in_flight_max - queue.in_flight_count());
        let visibility_ms = u64::from(
            request
                .visibility_timeout_seconds
                .unwrap_or(queue.config.visibility_timeout_seconds),
        ) * 1000;
        let dead_letter = self.dead_letter_target(queue);
        let mut deliveries = Vec::with_capacity(wanted);
        // A lease of 0 seconds leaves the message ready at its old place in receive order, so
        // the walk goes on after the last message it took instead of from the front: one receive
        // delivers a message at most once.
        let mut taken_through = None;
        while deliveries.len() < wanted {
            let queue = &self.queues[&queue_id];
            let Some((sent_at_ms, seq)) = queue.next_ready(taken_through) else {
                break;
            };
            taken_through = Some((sent_at_ms, seq));
            let message = queue.message(seq).expect("ready message exists");
            if let Some((dead_letter_queue_id, max_receive_count)) = dead_letter {
                if message.receive_count >= max_receive_count {
                    let dead_letter_seq = self.queues[&dead_letter_queue_id].next_seq();
                    let record = Record::DeadLetter {
                        now_ms,
                        queue_id,
                        seq,
                        dead_letter_queue_id,
                        dead_letter_seq,
                    };
                    self.commit(record, journal);
                    continue;
                }
            }
            let attempt = message.receive_count + 1;
            let record = Record::Lease {
                now_ms,
                queue_id,
                seq,
                attempt,
                visible_at_ms: now_ms + visibility_ms,
            };
            self.commit(record, journal);
            deliveries.push(self.delivery(queue_id, seq));
        }
        Ok(deliveries)
    }

    /// The dead-letter queue's id and the receive limit, if the policy's target exists.
    fn dead_letter_target(&self, queue: &Queue) -> Option<(u64, u32)> {
        let policy = queue.config.redrive_policy.as_ref()?;
        let target = *self.names.get(policy.dead_letter_queue.as_str())?;
        (target != queue.id).then_some((target, policy.max_receive_count))
    }

    fn delivery(&self, queue_id: u64, seq: u64) -> Delivery {
        let message = self.queues[&queue_id].message(seq).expect("just leased");
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
            first_received_at_ms: message.first_received_at_ms.unwrap_or(message.leased_at_ms),
            visible_at_ms: message.visible_at_ms,
            dead_letter_source: message.dead_letter_source.clone(),
        }
    }

    /// Opens a receipt for the named queue: the queue's id and the receipt's content.
    fn open_receipt(&mut self, now_ms: u64, name: &str, receipt: &str) -> Result<(u64, Receipt)> {
        let (now_ms, queue_id) = self.advanced(now_ms, name)?;
        let _ = now_ms;
        let receipt = self.key.open(receipt)?;
        if receipt.queue_id != queue_id {
            return Err(Error::ReceiptHandleIsInvalid);
        }
        Ok((queue_id, receipt))
    }

    /// Deletes the message of a receipt, if the receipt is its current attempt's.
    pub fn delete(
        &mut self,
        now_ms: u64,
        name: &str,
        receipt: &str,
        journal: &mut Journal,
    ) -> Result<DeleteOutcome> {
        let (queue_id, receipt) = self.open_receipt(now_ms, name, receipt)?;
        let now_ms = self.clock_ms;
        let queue = self.queue_mut(queue_id);
        let Some(message) = queue.message(receipt.seq) else {
            return Ok(DeleteOutcome::AlreadyGone);
        };
        if receipt.attempt > message.receive_count {
            return Err(Error::ReceiptHandleIsInvalid);
        }
        if receipt.attempt < message.receive_count {
            queue.counters.stale_receipts += 1;
            return if self.config.reject_stale_deletes {
                Err(Error::ReceiptSuperseded)
            } else {
                Ok(DeleteOutcome::IgnoredStale)
            };
        }
        let record = Record::Delete {
            now_ms,
            queue_id,
            seq: receipt.seq,
        };
        self.commit(record, journal);
        Ok(DeleteOutcome::Deleted)
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
            queue.counters.stale_receipts += 1;
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

    // ----- apply --------------------------------------------------------------------------

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
                let queue = Queue::new(*queue_id, name, config.clone(), tags.clone(), now_ms);
                assert!(
                    self.queues.insert(*queue_id, queue).is_none(),
                    "queue id reused"
                );
                assert!(self
                    .names
                    .insert(Arc::from(name.as_str()), *queue_id)
                    .is_none());
                self.next_queue_id = self.next_queue_id.max(queue_id + 1);
            }
            Record::DeleteQueue { queue_id, .. } => {
                let queue = self.queues.remove(queue_id).expect("deleted queue exists");
                self.names.remove(&queue.name);
            }
            Record::SetConfig {
                queue_id, config, ..
            } => {
                let queue = self.advance(*queue_id, now_ms);
                queue.config = config.clone();
                queue.last_modified_at_ms = now_ms;
            }
            Record::SetTags { queue_id, tags, .. } => {
                self.advance(*queue_id, now_ms).tags = tags.clone();
            }
            Record::Purge { queue_id, .. } => {
                let queue = self.advance(*queue_id, now_ms);
                queue.counters.purged += queue.clear() as u64;
                queue.last_purge_at_ms = Some(now_ms);
            }
            Record::Send {
                queue_id,
                seq,
                message_id,
                visible_at_ms,
                payload,
                ..
            } => {
                let state = if *visible_at_ms > now_ms {
                    MessageState::Delayed
                } else {
                    MessageState::Ready
                };
                let message = Message {
                    id: *message_id,
                    payload: payload.clone(),
                    sent_at_ms: now_ms,
                    visible_at_ms: *visible_at_ms,
                    leased_at_ms: 0,
                    first_received_at_ms: None,
                    receive_count: 0,
                    state,
                    dead_letter_source: None,
                };
                let queue = self.advance(*queue_id, now_ms);
                queue.insert(*seq, message);
                queue.counters.sent += 1;
            }
            Record::Lease {
                queue_id,
                seq,
                attempt,
                visible_at_ms,
                ..
            } => {
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
                message.first_received_at_ms.get_or_insert(now_ms);
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
            }
            Record::DeadLetter {
                queue_id,
                seq,
                dead_letter_queue_id,
                dead_letter_seq,
                ..
            } => {
                let source = self.advance(*queue_id, now_ms);
                let mut message = source.remove(*seq).expect("dead-lettered message exists");
                source.counters.dead_lettered += 1;
                message.dead_letter_source = Some(source.name.clone());
                message.state = MessageState::Ready;
                message.visible_at_ms = now_ms;
                self.advance(*dead_letter_queue_id, now_ms)
                    .insert(*dead_letter_seq, message);
            }
        }
    }

    fn advance(&mut self, queue_id: u64, now_ms: u64) -> &mut Queue {
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

fn check_visibility(seconds: u32, limits: &Limits) -> Result<()> {
    if seconds > limits.visibility_timeout_max_seconds {
        return Err(Error::invalid(
            Field::VisibilityTimeout,
            format!(
                "Value {seconds} for parameter VisibilityTimeout is invalid. Reason: Must be between 0 and {}.",
                limits.visibility_timeout_max_seconds
            ),
        ));
    }
    Ok(())
}

/// SQS queue names: 1 to 80 characters from A-Z, a-z, 0-9, `-` and `_`.
pub fn validate_queue_name(name: &str, limits: &Limits) -> Result<()> {
    if name.ends_with(".fifo") {
        return Err(Error::invalid(
            Field::QueueName,
            "FIFO queues are not supported yet by this server.",
        ));
    }
    let valid = !name.is_empty()
        && name.len() <= limits.queue_name_length_max
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
    if !valid {
        return Err(Error::invalid(
            Field::QueueName,
            format!(
                "Can only include alphanumeric characters, hyphens, or underscores. 1 to {} in length",
                limits.queue_name_length_max
            ),
        ));
    }
    Ok(())
}
