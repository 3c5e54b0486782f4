//! Move tasks (redrive): start, drive a batch, change, list; and peeking at messages without
//! leasing them. See [`crate::moves`] for which messages a task moves and why it is safe, and
//! [`crate::transfer`] for how a message whose destination lives in another bucket gets there.

use std::collections::BTreeSet;
use std::sync::Arc;

use crate::error::{Error, Field, Result, TargetProblem};
use crate::message::MessageId;
use crate::moves::{MoveStatus, MoveTask, MoveTaskChange, MovedMessage};
use crate::queue::{Message, MessageState};
use crate::record::Record;
use crate::transfer::TransferKind;

use super::{Engine, Journal};

/// The fastest rate a task may be given (SQS's limit).
pub const MOVE_RATE_MAX_PER_SECOND: u32 = 500;

/// Finished tasks kept per source for listing (SQS lists the ten most recent).
pub const MOVE_TASKS_KEPT_PER_SOURCE: usize = 10;

/// A move task as a caller sees it: the task and its queues' names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MoveTaskInfo {
    /// The task.
    pub task: MoveTask,
    /// The source queue's name (`None` if it was deleted).
    pub source: Option<Arc<str>>,
    /// The destination queue's name, if the task has one (`None` also if it was deleted; a
    /// destination in another bucket is named even if it was).
    pub destination: Option<Arc<str>>,
}

/// Where a message of a move task goes.
enum Destination {
    /// A queue of this engine: part of a `MoveMessages` record.
    Local(u64),
    /// A queue of another bucket, by name: a transfer.
    Remote(Arc<str>),
}

/// What one batch did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MoveProgress {
    /// Messages moved by this batch.
    pub moved: usize,
    /// The task's status after it.
    pub status: MoveStatus,
}

/// A message seen by [`Engine::peek`], without a lease.
#[derive(Clone, Debug)]
pub struct PeekedMessage {
    /// Its sequence number (the cursor of the next page is the last one seen).
    pub seq: u64,
    /// Everything about it.
    pub message: Message,
    /// Why a consumer failed it, if one did (fail-now).
    pub failure_reason: Option<Arc<str>>,
}

impl Engine {
    /// Starts a move task out of `source`, which must be the dead-letter queue of some queue of
    /// this engine. Without `destination` each message goes back to the queue it was
    /// dead-lettered from. `limit` makes a canary: the task pauses once that many messages
    /// moved.
    ///
    /// A `destination` that lives in another bucket is taken as it is, as a `RedrivePolicy`'s
    /// dead-letter queue is: its engine is the one that knows whether it exists and of what
    /// kind, so the caller checks that there before starting the task (only the source's
    /// `RedriveAllowPolicy` is checked here). Should it be gone when messages reach it, it
    /// refuses them and the task fails (see [`crate::transfer`]).
    pub fn start_move_task(
        &mut self,
        now_ms: u64,
        source: &str,
        destination: Option<&str>,
        rate_per_second: Option<u32>,
        limit: Option<u64>,
        journal: &mut Journal,
    ) -> Result<MoveTaskInfo> {
        let start = TaskStart::new(source, destination, rate_per_second, limit, false);
        self.start_task(now_ms, start, journal)
    }

    /// Starts a move task as [`Engine::start_move_task`] does, out of a dead-letter queue whose
    /// source queues may all live in other buckets: the caller has checked on their engines
    /// that some queue names `source` as its dead-letter queue (the one check of
    /// `start_move_task` this engine cannot make alone).
    pub fn start_move_task_with_remote_sources(
        &mut self,
        now_ms: u64,
        source: &str,
        destination: Option<&str>,
        rate_per_second: Option<u32>,
        limit: Option<u64>,
        journal: &mut Journal,
    ) -> Result<MoveTaskInfo> {
        let start = TaskStart::new(source, destination, rate_per_second, limit, true);
        self.start_task(now_ms, start, journal)
    }

    fn start_task(
        &mut self,
        now_ms: u64,
        start: TaskStart<'_>,
        journal: &mut Journal,
    ) -> Result<MoveTaskInfo> {
        let now_ms = self.tick(now_ms);
        let source_id = *self
            .names
            .get(start.source)
            .ok_or(Error::NotFound(Field::SourceArn))?;
        check_rate(start.rate_per_second)?;
        if !start.sources_elsewhere && self.dead_letter_sources(start.source)?.is_empty() {
            return Err(Error::NotADeadLetterQueue);
        }
        if self.active_task(source_id).is_some() {
            return Err(Error::MoveTaskActive);
        }
        let (mut destination_queue_id, mut remote_destination) = (None, None);
        if let Some(name) = start.destination {
            match self.names.get(name) {
                Some(&id) => {
                    self.check_destination(source_id, id)?;
                    destination_queue_id = Some(id);
                }
                None if self.is_remote(name) => {
                    self.check_remote_destination(source_id, name)?;
                    remote_destination = Some(name.to_string());
                }
                None => return Err(Error::NotFound(Field::DestinationArn)),
            }
        }
        let task_id = self.next_task_id();
        let queue = self.queue_mut(source_id);
        queue.advance(now_ms);
        let task = MoveTask {
            task_id,
            source_queue_id: source_id,
            destination_queue_id,
            remote_destination,
            rate_per_second: start.rate_per_second,
            limit: start.limit,
            cutoff_seq: queue.next_seq(),
            to_move: queue.len() as u64,
            moved: 0,
            held_back: 0,
            started_at_ms: now_ms,
            status: MoveStatus::Running,
            failure_reason: None,
        };
        self.commit(
            Record::SetMoveTask {
                now_ms,
                task: Box::new(task.clone()),
            },
            journal,
        );
        Ok(self.task_info(&task))
    }

    /// Moves the next batch of task `task_id`: at most `ids.len()` messages, each getting the
    /// next id of `ids` (drawn by the caller). Completes the task when none of its messages is
    /// left in the source nor in the outbox, pauses it when its limit is reached, fails it when
    /// a message has nowhere to go. Does nothing to a task that is not running.
    ///
    /// The messages for queues of this engine move in one `MoveMessages` record; each one for a
    /// queue of another bucket leaves in a `TransferOut` record of its own (see
    /// [`crate::transfer`]), in the scan's order, so a FIFO group reaches its destination in
    /// order. Either way the task counts the message as moved when it leaves the source.
    pub fn move_batch(
        &mut self,
        now_ms: u64,
        task_id: u64,
        ids: &[MessageId],
        journal: &mut Journal,
    ) -> Result<MoveProgress> {
        let now_ms = self.tick(now_ms);
        let task = self.task(task_id)?.clone();
        if task.status != MoveStatus::Running {
            return Ok(MoveProgress {
                moved: 0,
                status: task.status,
            });
        }
        let source_id = task.source_queue_id;
        self.queue_mut(source_id).advance(now_ms);
        let room = task.limit.map_or(usize::MAX, |limit| {
            limit.saturating_sub(task.moved) as usize
        });
        let max = ids.len().min(room);
        let generations_max = self.config.limits.redrive_generations_max;
        let mut moves: Vec<MovedMessage> = Vec::new();
        // Messages for queues of other buckets: (seq, destination, new id).
        let mut transfers: Vec<(u64, Arc<str>, MessageId)> = Vec::new();
        let mut failure = None;
        // Messages of the task left where they are: redriven too often (or behind one that was,
        // in its FIFO group), and waiting for a lease or delay to end (or behind one).
        let (mut held, mut waiting) = (0u64, 0u64);
        // Whether the batch filled up before the scan saw every message of the task.
        let mut full = false;
        {
            let source = &self.queues[&source_id];
            // A FIFO group whose earlier message cannot move now waits whole (keeps its order);
            // one whose earlier message is held back stays whole.
            let mut waiting_groups: BTreeSet<Arc<str>> = BTreeSet::new();
            let mut held_groups: BTreeSet<Arc<str>> = BTreeSet::new();
            for (seq, message) in source.messages() {
                if seq >= task.cutoff_seq {
                    break;
                }
                if moves.len() + transfers.len() >= max {
                    full = true;
                    break;
                }
                // Groups wait whole on FIFO queues only (a standard queue's group is a tenant).
                let group = message
                    .fifo
                    .as_ref()
                    .filter(|_| source.fifo().is_some())
                    .map(|fifo| fifo.group_id.clone());
                if let Some(group) = &group {
                    if held_groups.contains(group) {
                        held += 1;
                        continue;
                    }
                    if waiting_groups.contains(group) {
                        waiting += 1;
                        continue;
                    }
                }
                if message.redrive_generation >= generations_max {
                    held += 1;
                    held_groups.extend(group);
                    continue;
                }
                if message.state != MessageState::Ready {
                    waiting += 1;
                    waiting_groups.extend(group);
                    continue;
                }
                let destination = match self.move_destination(&task, message) {
                    Ok(destination) => destination,
                    Err(reason) => {
                        failure = Some(reason);
                        break;
                    }
                };
                let message_id = ids[moves.len() + transfers.len()];
                match destination {
                    Destination::Local(destination_id) => {
                        let earlier = moves
                            .iter()
                            .filter(|m| m.destination_queue_id == destination_id)
                            .count() as u64;
                        moves.push(MovedMessage {
                            seq,
                            destination_queue_id: destination_id,
                            destination_seq: self.queues[&destination_id].next_seq() + earlier,
                            message_id,
                        });
                    }
                    Destination::Remote(name) => transfers.push((seq, name, message_id)),
                }
            }
        }
        let moved = moves.len() + transfers.len();
        if !moves.is_empty() {
            let record = Record::MoveMessages {
                now_ms,
                task_id,
                source_queue_id: source_id,
                moves,
            };
            self.commit(record, journal);
        }
        for (seq, destination, message_id) in transfers {
            let kind = TransferKind::Move {
                task_id,
                message_id,
            };
            self.transfer_out(now_ms, source_id, seq, &destination, kind, None, journal);
        }
        let mut task = self.task(task_id)?.clone();
        let next = if let Some(reason) = failure {
            task.failure_reason = Some(reason);
            Some(MoveStatus::Failed)
        } else if !full && waiting == 0 && self.task_transfers(task_id) == 0 {
            // Every message of the task has moved or left, but those held back; none is on its
            // way to another bucket still (its target may yet refuse it, which fails the task).
            task.held_back = held;
            Some(MoveStatus::Completed)
        } else if task.limit.is_some_and(|limit| task.moved >= limit) {
            Some(MoveStatus::Paused)
        } else {
            None
        };
        if let Some(status) = next {
            task.status = status;
            self.commit(
                Record::SetMoveTask {
                    now_ms,
                    task: Box::new(task.clone()),
                },
                journal,
            );
        }
        Ok(MoveProgress {
            moved,
            status: task.status,
        })
    }

    /// Pauses, resumes, cancels a task or changes its rate or limit.
    pub fn change_move_task(
        &mut self,
        now_ms: u64,
        task_id: u64,
        change: MoveTaskChange,
        journal: &mut Journal,
    ) -> Result<MoveTaskInfo> {
        let now_ms = self.tick(now_ms);
        let mut task = self.task(task_id)?.clone();
        if !task.status.is_active() {
            return Err(Error::MoveTaskFinished {
                status: task.status,
            });
        }
        match change {
            MoveTaskChange::Pause => task.status = MoveStatus::Paused,
            MoveTaskChange::Resume => {
                if let Some(limit) = task.limit.filter(|&limit| task.moved >= limit) {
                    return Err(Error::MoveTaskAtLimit { limit });
                }
                task.status = MoveStatus::Running;
            }
            MoveTaskChange::Cancel => task.status = MoveStatus::Cancelled,
            MoveTaskChange::Rate(rate) => {
                check_rate(rate)?;
                task.rate_per_second = rate;
            }
            MoveTaskChange::Limit(limit) => task.limit = limit,
        }
        self.commit(
            Record::SetMoveTask {
                now_ms,
                task: Box::new(task.clone()),
            },
            journal,
        );
        Ok(self.task_info(&task))
    }

    /// The tasks of a source queue, most recent first (at most
    /// [`MOVE_TASKS_KEPT_PER_SOURCE`] finished ones are kept).
    pub fn move_tasks(&self, source: &str) -> Result<Vec<MoveTaskInfo>> {
        let source_id = *self
            .names
            .get(source)
            .ok_or(Error::NotFound(Field::SourceArn))?;
        Ok(self
            .moves
            .values()
            .rev()
            .filter(|task| task.source_queue_id == source_id)
            .map(|task| self.task_info(task))
            .collect())
    }

    /// One task by id.
    pub fn move_task(&self, task_id: u64) -> Result<MoveTaskInfo> {
        Ok(self.task_info(self.task(task_id)?))
    }

    /// The tasks that are running: what a server drives.
    pub fn running_move_tasks(&self) -> Vec<MoveTask> {
        self.moves
            .values()
            .filter(|task| task.status == MoveStatus::Running)
            .cloned()
            .collect()
    }

    /// Up to `max` messages of queue `name` with a sequence number above `after_seq`, in
    /// sequence order, without leasing them or changing any count: an operator's look inside
    /// (a dead-letter queue above all). The next page starts after the last `seq` returned.
    pub fn peek(
        &mut self,
        now_ms: u64,
        name: &str,
        after_seq: u64,
        max: usize,
    ) -> Result<Vec<PeekedMessage>> {
        // Bringing the queue to `now_ms` shows leases that ran out as ready; it is what any
        // operation does first and changes nothing a record would.
        let (_, queue_id) = self.advanced(now_ms, name)?;
        Ok(self.queues[&queue_id]
            .messages()
            .filter(|(seq, _)| *seq > after_seq)
            .take(max)
            .map(|(seq, message)| PeekedMessage {
                seq,
                message: message.clone(),
                failure_reason: self.queues[&queue_id].failure_reason(seq).cloned(),
            })
            .collect())
    }

    pub(super) fn apply_set_move_task(&mut self, task: &MoveTask) {
        self.moves.insert(task.task_id, task.clone());
        // Keep the most recent finished tasks of the source for listing; never the newest
        // task of all, so ids are never reused.
        let newest = *self.moves.keys().next_back().expect("just inserted");
        let finished: Vec<u64> = self
            .moves
            .values()
            .filter(|t| t.source_queue_id == task.source_queue_id && !t.status.is_active())
            .map(|t| t.task_id)
            .collect();
        let excess = finished.len().saturating_sub(MOVE_TASKS_KEPT_PER_SOURCE);
        for task_id in finished.into_iter().take(excess) {
            if task_id != newest {
                self.moves.remove(&task_id);
            }
        }
    }

    pub(super) fn apply_move_messages(
        &mut self,
        now_ms: u64,
        task_id: u64,
        source_queue_id: u64,
        moves: &[MovedMessage],
    ) {
        for moved in moves {
            let source = self.advance(source_queue_id, now_ms);
            let old = source.remove(moved.seq).expect("moved message exists");
            assert_eq!(
                old.state,
                MessageState::Ready,
                "moved message {}",
                moved.seq
            );
            let to_fifo = self.queues[&moved.destination_queue_id].fifo().is_some();
            let message = redriven(old, moved.message_id, to_fifo, now_ms);
            let destination = self.advance(moved.destination_queue_id, now_ms);
            destination.insert(moved.destination_seq, message);
            destination.counters.sent += 1;
        }
        let task = self.moves.get_mut(&task_id).expect("moving task exists");
        task.moved += moves.len() as u64;
    }

    /// A task whose source was deleted fails (its messages went with the queue), and so does one
    /// whose destination was deleted (what moved went with that queue; the rest stays), with
    /// the reason [`destination_deleted`] words.
    pub(super) fn fail_tasks_of_deleted(&mut self, queue_id: u64, name: &str) {
        for task in self.moves.values_mut() {
            if !task.status.is_active() {
                continue;
            }
            if task.source_queue_id == queue_id {
                task.status = MoveStatus::Failed;
                task.failure_reason = Some("The source queue was deleted.".into());
            } else if task.destination_queue_id == Some(queue_id) {
                task.status = MoveStatus::Failed;
                task.failure_reason = Some(destination_deleted(name));
            }
        }
    }

    /// Fails the active tasks whose destination, `name`, lives in another bucket and was just
    /// deleted there, as a task whose destination in this engine fails when it is deleted
    /// (`fail_tasks_of_deleted`). The caller that deleted it says so to every other bucket.
    /// Returns how many tasks failed.
    pub fn remote_destination_deleted(
        &mut self,
        now_ms: u64,
        name: &str,
        journal: &mut Journal,
    ) -> usize {
        let now_ms = self.tick(now_ms);
        let failed: Vec<MoveTask> = self
            .moves
            .values()
            .filter(|task| {
                task.status.is_active() && task.remote_destination.as_deref() == Some(name)
            })
            .map(|task| MoveTask {
                status: MoveStatus::Failed,
                failure_reason: Some(destination_deleted(name)),
                ..task.clone()
            })
            .collect();
        let count = failed.len();
        for task in failed {
            self.commit(
                Record::SetMoveTask {
                    now_ms,
                    task: Box::new(task),
                },
                journal,
            );
        }
        count
    }

    fn task(&self, task_id: u64) -> Result<&MoveTask> {
        self.moves
            .get(&task_id)
            .ok_or(Error::NotFound(Field::TaskHandle))
    }

    fn active_task(&self, source_id: u64) -> Option<&MoveTask> {
        self.moves
            .values()
            .find(|task| task.source_queue_id == source_id && task.status.is_active())
    }

    fn next_task_id(&self) -> u64 {
        self.moves.keys().next_back().map_or(1, |id| id + 1)
    }

    fn task_info(&self, task: &MoveTask) -> MoveTaskInfo {
        let name = |id: u64| self.queues.get(&id).map(|queue| queue.name.clone());
        MoveTaskInfo {
            task: task.clone(),
            source: name(task.source_queue_id),
            destination: task
                .destination_queue_id
                .and_then(name)
                .or_else(|| task.remote_destination.as_deref().map(Arc::from)),
        }
    }

    /// Where `message` of `task` goes: the task's destination, or the queue the message was
    /// dead-lettered from, in this engine or in another bucket. Or, if it cannot go there, the
    /// reason the task fails with.
    fn move_destination(
        &self,
        task: &MoveTask,
        message: &Message,
    ) -> std::result::Result<Destination, String> {
        let destination = if let Some(name) = &task.remote_destination {
            Destination::Remote(Arc::from(name.as_str()))
        } else if let Some(id) = task.destination_queue_id {
            Destination::Local(id)
        } else {
            let Some(name) = &message.dead_letter_source else {
                return Err("A message was sent to the dead-letter queue directly and has no source queue; redrive to a DestinationArn instead.".to_string());
            };
            match self.names.get(name) {
                Some(&id) => Destination::Local(id),
                None if self.is_remote(name) => Destination::Remote(name.clone()),
                None => return Err(source_missing(name)),
            }
        };
        let checked = match &destination {
            Destination::Local(id) => self.check_destination(task.source_queue_id, *id),
            Destination::Remote(name) => self.check_remote_destination(task.source_queue_id, name),
        };
        checked.map_err(|error| failure_reason(&error))?;
        Ok(destination)
    }

    /// Whether messages of `source_id` may move to queue `name` of another bucket: whether the
    /// source's `RedriveAllowPolicy` allows it, the one check that needs only the name (the
    /// target's kind is its engine's to check: it refuses a message of the other kind).
    fn check_remote_destination(&self, source_id: u64, name: &str) -> Result<()> {
        let source = &self.queues[&source_id];
        let allowed = source
            .config
            .redrive_allow_policy
            .as_ref()
            .is_none_or(|allow| allow.allows(name));
        if allowed {
            return Ok(());
        }
        Err(Error::InvalidTarget {
            field: Field::DestinationArn,
            queue: source.name.to_string(),
            target: name.to_string(),
            source_fifo: source.fifo().is_some(),
            problem: TargetProblem::NotAllowed,
        })
    }

    /// Whether messages of `source_id` may move to `destination_id`: not to the same queue, nor
    /// to another kind of queue, nor when the source's `RedriveAllowPolicy` does not allow the
    /// destination (a dead-letter queue that denies a queue as its source does not send
    /// messages to it either).
    fn check_destination(&self, source_id: u64, destination_id: u64) -> Result<()> {
        let source = &self.queues[&source_id];
        let destination = &self.queues[&destination_id];
        let refuse = |problem| {
            Err(Error::InvalidTarget {
                field: Field::DestinationArn,
                queue: source.name.to_string(),
                target: destination.name.to_string(),
                source_fifo: source.fifo().is_some(),
                problem,
            })
        };
        if source_id == destination_id {
            return refuse(TargetProblem::Itself);
        }
        if source.fifo().is_some() != destination.fifo().is_some() {
            return refuse(TargetProblem::OtherKind);
        }
        let allowed = source
            .config
            .redrive_allow_policy
            .as_ref()
            .is_none_or(|allow| allow.allows(&destination.name));
        if !allowed {
            return refuse(TargetProblem::NotAllowed);
        }
        Ok(())
    }
}

/// What a start of a move task asks for (see [`Engine::start_move_task`]).
struct TaskStart<'a> {
    source: &'a str,
    destination: Option<&'a str>,
    rate_per_second: Option<u32>,
    limit: Option<u64>,
    /// Whether the caller checked in other buckets that `source` is a dead-letter queue.
    sources_elsewhere: bool,
}

impl<'a> TaskStart<'a> {
    fn new(
        source: &'a str,
        destination: Option<&'a str>,
        rate_per_second: Option<u32>,
        limit: Option<u64>,
        sources_elsewhere: bool,
    ) -> TaskStart<'a> {
        TaskStart {
            source,
            destination,
            rate_per_second,
            limit,
            sources_elsewhere,
        }
    }
}

/// The new message a move makes of `old` in its destination, for a local move
/// (`MoveMessages`) and a transfer (`TransferIn`) alike: "redrive is replay, not undo" (see
/// [`crate::moves`]). A new id, sent (and retained from) `now_ms`, ready, no receives, no
/// history, no dead-letter source, one more redrive generation; its group kept, with its new id
/// as deduplication id on a FIFO destination. The body stays where it is: a stored payload's
/// log segment is kept while any message refers to it.
pub(super) fn redriven(old: Message, message_id: MessageId, to_fifo: bool, now_ms: u64) -> Message {
    let fifo = old.fifo.map(|fifo| {
        Box::new(crate::fifo::FifoMessage {
            group_id: fifo.group_id,
            deduplication_id: if to_fifo {
                Arc::from(message_id.to_string())
            } else {
                Arc::default()
            },
        })
    });
    Message {
        id: message_id,
        payload: old.payload,
        sent_at_ms: now_ms,
        visible_at_ms: now_ms,
        leased_at_ms: 0,
        history: None,
        receive_count: 0,
        state: MessageState::Ready,
        dead_letter_source: None,
        redrive_generation: old.redrive_generation.saturating_add(1),
        fifo,
    }
}

/// The failure reason of a task one of whose messages the engine of another bucket refused
/// (see `Engine::apply_transfer_done`): the target says only that it has no queue of that name
/// and kind. The caller checked an explicit destination when the task started, so it was
/// deleted since (worded as a local one's deletion is, so that listings name it alike); a
/// message's original source may never have been checked.
pub(super) fn refused_move(task: &MoveTask, destination: &str) -> String {
    if task.remote_destination.is_some() {
        destination_deleted(destination)
    } else {
        format!(
            "The original source queue {destination} of a message no longer exists or is not of the same kind (FIFO or standard) as the dead-letter queue; redrive to a DestinationArn instead."
        )
    }
}

/// The failure reason of a task when the original source queue `name` of a message does not
/// exist.
fn source_missing(name: &str) -> String {
    format!(
        "The original source queue {name} of a message no longer exists; redrive to a DestinationArn instead."
    )
}

/// The failure reason of a task whose destination queue `name` was deleted while the task was
/// active. The reason is the one place the task keeps the name (its records name the queue by
/// id), which the `sqs` crate reads back with [`deleted_destination`] to list the task as SQS
/// does.
pub fn destination_deleted(name: &str) -> String {
    format!("{DESTINATION_DELETED_PREFIX}{name}{DESTINATION_DELETED_SUFFIX}")
}

/// The deleted destination a failure reason of [`destination_deleted`] names, if it is one.
pub fn deleted_destination(reason: &str) -> Option<&str> {
    reason
        .strip_prefix(DESTINATION_DELETED_PREFIX)?
        .strip_suffix(DESTINATION_DELETED_SUFFIX)
}

const DESTINATION_DELETED_PREFIX: &str = "The destination queue ";
const DESTINATION_DELETED_SUFFIX: &str = " was deleted.";

/// The failure reason a task keeps (in its `SetMoveTask` record, so it is worded here, once)
/// when a message's destination turns out not to accept it.
fn failure_reason(error: &Error) -> String {
    let Error::InvalidTarget {
        queue: source,
        target,
        problem,
        ..
    } = error
    else {
        return error.to_string();
    };
    match problem {
        TargetProblem::Itself => "The destination queue must differ from the source queue.".into(),
        TargetProblem::OtherKind => format!(
            "The destination queue {target} is not of the same kind (FIFO or standard) as the source queue."
        ),
        TargetProblem::NotAllowed => format!(
            "The RedriveAllowPolicy of {source} does not allow moving messages to {target}."
        ),
    }
}

fn check_rate(rate_per_second: Option<u32>) -> Result<()> {
    match rate_per_second {
        Some(rate) if !(1..=MOVE_RATE_MAX_PER_SECOND).contains(&rate) => Err(Error::out_of_range(
            Field::MaxNumberOfMessagesPerSecond,
            rate,
            1u32,
            MOVE_RATE_MAX_PER_SECOND,
        )),
        _ => Ok(()),
    }
}
