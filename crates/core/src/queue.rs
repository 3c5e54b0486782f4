//! One queue: its messages and the indexes that make every operation O(log n).
//!
//! A message is in exactly one of three states, and in exactly one index for it:
//!
//! | state      | index    | key                      | leaves when                            |
//! |------------|----------|--------------------------|----------------------------------------|
//! | `Delayed`  | `timers` | (visible_at_ms, seq)     | its delay ends → `Ready`               |
//! | `Ready`    | `ready`  | (sent_at_ms, seq)        | a receive leases it → `InFlight`       |
//! | `InFlight` | `timers` | (visible_at_ms, seq)     | its lease runs out → `Ready`; deleted  |
//!
//! Retention goes by send time, oldest first. Sends arrive in send order (the engine's clock
//! never goes back), so sequence order is send order and the message store itself is the
//! retention index, at no cost per message. Only a queue that received a message out of order (a
//! dead-letter move keeps the message's original send time) keeps an explicit `by_sent` index
//! (sent_at_ms, seq), until it is next empty. Time moves messages only in [`Queue::advance`],
//! which pops due entries off the front of `timers` and of the retention order: its cost is
//! proportional to the messages whose state changes, never to the backlog.
//!
//! Invariant (checked by [`Queue::check_invariants`]): the counts equal the index sizes, every
//! indexed message exists with the state and keys its index claims, and every message is indexed.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::Arc;

mod ready;

use ready::ReadyIndex;

use crate::config::QueueConfig;
use crate::fair::{FairState, ProcessingWindow, Slot, Totals};
use crate::fifo::{self, FifoMessage, FifoState, Transition};
use crate::history::{AttemptHistory, AttemptOutcome};
use crate::message::{MessageId, PayloadRef};
use crate::store::{Frozen, SeqStore};

/// Where a message is in its life.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MessageState {
    /// Sent with a delay that has not ended yet.
    Delayed,
    /// Visible: the next receive may lease it.
    Ready,
    /// Leased by a receive until `visible_at_ms`.
    InFlight,
}

/// A message's metadata. The body and attributes are in the payload it refers to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Message {
    /// Stable identity.
    pub id: MessageId,
    /// Body and attributes, in memory or in the log.
    pub payload: PayloadRef,
    /// When it was first enqueued (kept across a dead-letter move: retention counts from here).
    pub sent_at_ms: u64,
    /// When it becomes (or became) visible: end of delay or of the current lease.
    pub visible_at_ms: u64,
    /// When the current attempt began; the total lease is bounded from here.
    pub leased_at_ms: u64,
    /// Its delivery attempts (and when it was first received): `None` until it is received.
    pub history: Option<Box<AttemptHistory>>,
    /// Attempts so far; the current attempt's number.
    pub receive_count: u32,
    /// Where it is.
    pub state: MessageState,
    /// How many move tasks (redrives) made it, counting from its first send: a message that
    /// keeps coming back to a dead-letter queue is a loop that redrive stops (see
    /// [`crate::Limits::redrive_generations_max`]). Kept across a dead-letter move. (A `u16`
    /// fits in the padding after `state`: it costs no memory per message.)
    pub redrive_generation: u16,
    /// Name of the queue it was dead-lettered from, if it was.
    pub dead_letter_source: Option<Arc<str>>,
    /// Group and deduplication id: `Some` for every message of a FIFO queue, and for the
    /// messages of a standard queue sent with a group id (a fair queue's tenant; the
    /// deduplication id is then empty).
    pub fifo: Option<Box<FifoMessage>>,
}

/// Monotonic counters of what happened on a queue (for metrics and the simulation's checks).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct QueueCounters {
    /// Messages enqueued by sends.
    pub sent: u64,
    /// Leases granted (deliveries).
    pub received: u64,
    /// Messages deleted by a receipt.
    pub deleted: u64,
    /// Deletes that came after the lease had run out (the receipt was still the latest).
    pub deleted_late: u64,
    /// Leases that ran out without a delete (each leads to a redelivery or a dead-letter move).
    pub leases_expired: u64,
    /// Leases extended or shortened to a later-than-now deadline.
    pub leases_changed: u64,
    /// Leases released at once (visibility 0).
    pub leases_released: u64,
    /// Messages moved from this queue to its dead-letter queue.
    pub dead_lettered: u64,
    /// Messages removed because their retention period ended.
    pub retention_expired: u64,
    /// Messages removed by purges.
    pub purged: u64,
}

impl Message {
    /// When it was first received (`ApproximateFirstReceiveTimestamp`).
    pub fn first_received_at_ms(&self) -> Option<u64> {
        self.history
            .as_ref()
            .map(|history| history.first_received_at_ms)
    }
}

/// One queue.
#[derive(Debug)]
pub struct Queue {
    /// Unique id, never reused.
    pub id: u64,
    /// Name.
    pub name: Arc<str>,
    /// Settings.
    pub config: QueueConfig,
    /// Tags.
    pub tags: BTreeMap<String, String>,
    /// When it was created.
    pub created_at_ms: u64,
    /// When its settings last changed.
    pub last_modified_at_ms: u64,
    /// When it was last purged.
    pub last_purge_at_ms: Option<u64>,
    /// What happened so far.
    pub counters: QueueCounters,
    /// Requests carrying the receipt of a superseded attempt, refused or ignored since this
    /// process started. An observation, not state: such a request changes nothing and writes
    /// no record, so the count is neither logged nor in snapshots.
    pub stale_receipts_seen: u64,
    next_seq: u64,
    messages: SeqStore<Message>,
    ready: ReadyIndex,
    timers: BTreeSet<(u64, u64)>,
    /// The retention index, only while the store's sequence order is not send order (see the
    /// module documentation).
    by_sent: Option<BTreeSet<(u64, u64)>>,
    /// (sent_at_ms, seq) of the message inserted last: an insert before it in either order
    /// needs the explicit index.
    last_inserted: (u64, u64),
    in_flight: usize,
    delayed: usize,
    /// The time of the latest change (what `advance` reached), for the fair state.
    fair_clock_ms: u64,
    /// Groups, deduplication window and receive attempts: `Some` exactly for a FIFO queue.
    fifo: Option<Box<FifoState>>,
    /// Tenants of a fair queue: `Some` once a standard queue holds a message with a group id
    /// (see [`crate::fair`]); a queue that never does pays nothing for fairness.
    fair: Option<Box<FairState>>,
    /// Why a consumer failed a message (fail-now), for the messages that have a reason: few,
    /// so a side table rather than a field of every message.
    failure_reasons: BTreeMap<u64, Arc<str>>,
    /// The histories of the messages deleted last, for a while (see [`RECENTLY_DELETED_KEPT`]).
    recently_deleted: VecDeque<DeletedMessage>,
}

/// Deleted messages whose history a queue keeps, the most recent ones. In memory only: after a
/// restart, only the deletes replayed from the log since the last snapshot are there.
pub const RECENTLY_DELETED_KEPT: usize = 1_024;

/// What is kept of a deleted message that had been received: its history.
#[derive(Clone, Debug)]
pub struct DeletedMessage {
    /// Its sequence number.
    pub seq: u64,
    /// Its id.
    pub id: MessageId,
    /// `SentTimestamp`.
    pub sent_at_ms: u64,
    /// Its receives.
    pub receive_count: u32,
    /// When it was deleted.
    pub deleted_at_ms: u64,
    /// The queue it had been dead-lettered from, if it had.
    pub dead_letter_source: Option<Arc<str>>,
    /// Its attempts, the last one `Deleted`.
    pub history: Box<AttemptHistory>,
}

impl Queue {
    /// An empty queue.
    pub fn new(
        id: u64,
        name: &str,
        config: QueueConfig,
        tags: BTreeMap<String, String>,
        now_ms: u64,
    ) -> Queue {
        let fifo = config.fifo.as_ref().map(|_| Box::default());
        Queue {
            id,
            name: Arc::from(name),
            config,
            tags,
            created_at_ms: now_ms,
            last_modified_at_ms: now_ms,
            last_purge_at_ms: None,
            counters: QueueCounters::default(),
            stale_receipts_seen: 0,
            next_seq: 1,
            messages: SeqStore::default(),
            ready: ReadyIndex::default(),
            timers: BTreeSet::new(),
            by_sent: None,
            last_inserted: (0, 0),
            in_flight: 0,
            delayed: 0,
            fair_clock_ms: 0,
            fifo,
            fair: None,
            failure_reasons: BTreeMap::new(),
            recently_deleted: VecDeque::new(),
        }
    }

    /// The FIFO state, for a FIFO queue.
    pub fn fifo(&self) -> Option<&FifoState> {
        self.fifo.as_deref()
    }

    pub(crate) fn fifo_mut(&mut self) -> Option<&mut FifoState> {
        self.fifo.as_deref_mut()
    }

    /// The tenants of a fair queue (a standard queue that has held a message with a group id).
    pub fn fair(&self) -> Option<&FairState> {
        self.fair.as_deref()
    }

    /// Whether a receive serves quiet tenants first (see [`crate::fair`]).
    pub fn is_fair(&self) -> bool {
        self.fair.is_some() && self.config.fairness.enabled
    }

    /// The slot of message `seq` for the fair state, as it is now.
    fn fair_slot(message: &Message, seq: u64) -> Slot {
        match message.state {
            MessageState::Ready => Slot::Ready(message.sent_at_ms, seq),
            MessageState::Delayed => Slot::Delayed,
            MessageState::InFlight => Slot::InFlight {
                leased_at_ms: message.leased_at_ms,
            },
        }
    }

    /// Tells the fair state that a message of `group_id` (`None`: without a group id) went from
    /// `was` to `now`. Costs one branch on a queue without fair state.
    fn fair_update(&mut self, group_id: Option<&Arc<str>>, was: Option<Slot>, now: Option<Slot>) {
        let Some(fair) = self.fair.as_deref_mut() else {
            return;
        };
        let group_id = group_id.cloned().unwrap_or_else(|| fair.ungrouped.clone());
        let totals = Totals {
            in_flight: self.in_flight,
        };
        fair.update(&self.config.fairness, &group_id, was, now, totals);
    }

    /// Starts the fair state of a standard queue at its first message with a group id, with
    /// the messages it already holds (each ungrouped one its own tenant). O(n), once.
    fn start_fair(&mut self) {
        let mut fair = Box::<FairState>::default();
        fair.clock_ms = self.fair_clock_ms;
        self.fair = Some(fair);
        let existing: Vec<(Option<Arc<str>>, Slot)> = self
            .messages
            .iter()
            .map(|(seq, message)| {
                let group = message.fifo.as_ref().map(|fifo| fifo.group_id.clone());
                (group, Self::fair_slot(message, seq))
            })
            .collect();
        for (group, slot) in existing {
            self.fair_update(group.as_ref(), None, Some(slot));
        }
    }

    /// The time the fair state applies changes at.
    fn set_fair_clock(&mut self, at_ms: u64) {
        self.fair_clock_ms = at_ms;
        if let Some(fair) = self.fair.as_deref_mut() {
            fair.clock_ms = at_ms;
        }
    }

    /// Sets what a snapshot says of a tenant (`RestoreTenant`, after the messages).
    pub(crate) fn restore_tenant(
        &mut self,
        group_id: &str,
        last_sent_at_ms: u64,
        processing: ProcessingWindow,
        noisy: bool,
    ) {
        if self.fair.is_none() {
            self.start_fair();
        }
        let fair = self.fair.as_deref_mut().expect("fair state");
        fair.restore_tenant(&Arc::from(group_id), last_sent_at_ms, processing, noisy);
    }

    /// Sets the queue's processing window from a snapshot (`RestoreFairTotal`).
    pub(crate) fn restore_fair_total(&mut self, processing: ProcessingWindow) {
        if self.fair.is_none() {
            self.start_fair();
        }
        self.fair.as_deref_mut().expect("fair state").processing = processing;
    }

    /// Tells the FIFO state that message `seq` (of group `group_id`) entered, left or changed
    /// state, so the group's availability follows.
    fn fifo_update(
        &mut self,
        group_id: Option<Arc<str>>,
        seq: u64,
        was: Option<MessageState>,
        now: Option<MessageState>,
    ) {
        let (Some(fifo), Some(group_id)) = (self.fifo.as_deref_mut(), group_id) else {
            return;
        };
        let messages = &self.messages;
        let transition = Transition {
            was_in_flight: was == Some(MessageState::InFlight),
            is_in_flight: now == Some(MessageState::InFlight),
        };
        fifo.update(&group_id, seq, now.is_some(), transition, |head| {
            Self::ready_since(messages.get(head))
        });
    }

    /// Ends the hold on a FIFO group whose messages are in flight (a snapshot's
    /// `RestoreGroupRelease`, applied after the group's messages).
    pub(crate) fn release_group(&mut self, group_id: &str) {
        let messages = &self.messages;
        self.fifo
            .as_deref_mut()
            .expect("group release on a FIFO queue")
            .release(group_id, |seq| Self::ready_since(messages.get(seq)));
    }

    /// When `message` became visible (its `visible_at_ms`: its send, the end of its delay or of
    /// its lease), if it is ready, as the first half of the key of a FIFO group that resumes
    /// from it ([`fifo::ready_key`]).
    fn ready_since(message: Option<&Message>) -> Option<u64> {
        message
            .filter(|message| message.state == MessageState::Ready)
            .map(|message| fifo::ready_key(message.visible_at_ms, message.receive_count > 0))
    }

    fn group_of(&self, seq: u64) -> Option<Arc<str>> {
        self.fifo.as_ref()?;
        let message = self.messages.get(seq)?;
        message.fifo.as_ref().map(|fifo| fifo.group_id.clone())
    }

    /// Messages ready to be received.
    pub fn ready_count(&self) -> usize {
        self.ready.len()
    }

    /// Messages leased and not deleted.
    pub fn in_flight_count(&self) -> usize {
        self.in_flight
    }

    /// Messages whose delay has not ended.
    pub fn delayed_count(&self) -> usize {
        self.delayed
    }

    /// All messages.
    pub fn len(&self) -> usize {
        self.messages.len()
    }

    /// Whether the queue holds no message.
    pub fn is_empty(&self) -> bool {
        self.messages.is_empty()
    }

    /// `SentTimestamp` of the oldest ready message.
    pub fn oldest_ready_sent_at_ms(&self) -> Option<u64> {
        self.next_ready(None).map(|(sent_at_ms, _)| sent_at_ms)
    }

    /// The next time at which time alone changes this queue: a delay or lease ends, or a
    /// message's retention runs out. A long poll sleeps until then at the latest.
    pub fn next_deadline_ms(&self) -> Option<u64> {
        let timer = self.timers.first().map(|&(at, _)| at);
        let retention = self
            .oldest_sent()
            .map(|(sent, _)| sent + self.retention_ms());
        match (timer, retention) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// The sequence number the next message will get.
    pub fn next_seq(&self) -> u64 {
        self.next_seq
    }

    /// Sets the sequence number the next message gets (restoring a snapshot). Never lowers it.
    pub fn raise_next_seq(&mut self, next_seq: u64) {
        self.next_seq = self.next_seq.max(next_seq);
    }

    /// The message with sequence number `seq`.
    pub fn message(&self, seq: u64) -> Option<&Message> {
        self.messages.get(seq)
    }

    /// The in-flight messages whose leases end first, soonest first: at most `limit`, looking at
    /// no more than `scan_max` entries of the timer index (delayed messages share it), so an
    /// observer's look costs the same however long the queue is. As of the last `advance`.
    pub fn leases_ending_first(
        &self,
        limit: usize,
        scan_max: usize,
    ) -> impl Iterator<Item = &Message> + '_ {
        self.timers
            .iter()
            .take(scan_max)
            .filter_map(|&(_, seq)| self.messages.get(seq))
            .filter(|message| message.state == MessageState::InFlight)
            .take(limit)
    }

    /// The sequence number of the ready message a receive would take next.
    pub fn first_ready(&self) -> Option<u64> {
        self.ready.next_after(None)
    }

    /// The first ready message after `after` in receive order, as its (sent_at_ms, seq) key;
    /// the first of all when `after` is `None`.
    pub fn next_ready(&self, after: Option<(u64, u64)>) -> Option<(u64, u64)> {
        let seq = self.ready.next_after(after)?;
        let message = self.messages.get(seq).expect("ready message exists");
        Some((message.sent_at_ms, seq))
    }

    /// Every message in sequence order.
    pub fn messages(&self) -> impl Iterator<Item = (u64, &Message)> {
        self.messages.iter()
    }

    /// A copy of the messages as they are now, cheap to take (see [`crate::store`]).
    pub fn frozen_messages(&self) -> Frozen<Message> {
        self.messages.frozen()
    }

    fn retention_ms(&self) -> u64 {
        u64::from(self.config.retention_seconds) * 1000
    }

    /// (sent_at_ms, seq) of the message sent first: the next one retention removes.
    fn oldest_sent(&self) -> Option<(u64, u64)> {
        match &self.by_sent {
            Some(by_sent) => by_sent.first().copied(),
            None => self
                .messages
                .first()
                .map(|(seq, message)| (message.sent_at_ms, seq)),
        }
    }

    /// Applies every change that time alone causes up to `now_ms`: ended delays and leases make
    /// messages ready, ended retention removes them.
    pub fn advance(&mut self, now_ms: u64) {
        let retention_ms = self.retention_ms();
        while let Some(&(at, seq)) = self.timers.first() {
            if at > now_ms {
                break;
            }
            self.timers.pop_first();
            let message = self.messages.get_mut(seq).expect("timer of a live message");
            match message.state {
                MessageState::Delayed => self.delayed -= 1,
                MessageState::InFlight => {
                    self.in_flight -= 1;
                    // A message whose retention ended before its lease did left the queue then
                    // (the loop below removes it); its lease did not run out. Counting it would
                    // make the counters depend on how often the queue was brought forward, and
                    // replay would disagree with live traffic.
                    if message.sent_at_ms + retention_ms >= at {
                        self.counters.leases_expired += 1;
                    }
                }
                MessageState::Ready => unreachable!("ready message {seq} in the timer index"),
            }
            let was = message.state;
            let was_slot = Self::fair_slot(message, seq);
            // Redelivery backoff: a lease that ran out makes the message wait (delayed) for the
            // schedule's delay of this attempt, decided now, at the lease's own deadline.
            let backoff_ms = match (&self.config.redelivery_backoff, was) {
                (Some(backoff), MessageState::InFlight) => {
                    backoff.delay_ms(message.receive_count, &message.id.0)
                }
                _ => 0,
            };
            let (now_state, now_slot) = if backoff_ms > 0 {
                message.state = MessageState::Delayed;
                message.visible_at_ms = at + backoff_ms;
                self.delayed += 1;
                self.timers.insert((at + backoff_ms, seq));
                (MessageState::Delayed, Slot::Delayed)
            } else {
                message.state = MessageState::Ready;
                self.ready.insert(message.sent_at_ms, seq);
                (MessageState::Ready, Slot::Ready(message.sent_at_ms, seq))
            };
            if self.fair.is_some() {
                let group = self.messages.get(seq).and_then(|m| m.fifo.as_ref());
                let group = group.map(|fifo| fifo.group_id.clone());
                self.set_fair_clock(at);
                self.fair_update(group.as_ref(), Some(was_slot), Some(now_slot));
            }
            let group_id = self.group_of(seq);
            self.fifo_update(group_id, seq, Some(was), Some(now_state));
        }
        while let Some((sent_at_ms, seq)) = self.oldest_sent() {
            if sent_at_ms + retention_ms > now_ms {
                break;
            }
            // A lease that retention ends counts as processing until then, whenever the queue
            // is brought forward (replay agrees with live traffic).
            self.set_fair_clock(sent_at_ms + retention_ms);
            self.remove(seq);
            self.counters.retention_expired += 1;
        }
        if let Some(fifo) = self.fifo.as_deref_mut() {
            fifo.advance(now_ms);
        }
        if let Some(fair) = self.fair.as_deref_mut() {
            fair.advance(now_ms);
        }
        self.set_fair_clock(self.fair_clock_ms.max(now_ms));
    }

    /// Adds a message. `seq` must be new.
    pub fn insert(&mut self, seq: u64, message: Message) {
        assert!(
            seq >= self.next_seq || self.messages.get(seq).is_none(),
            "sequence number {seq} reused in queue {}",
            self.id
        );
        self.next_seq = self.next_seq.max(seq + 1);
        let key = (message.sent_at_ms, seq);
        if self.by_sent.is_none() && !self.messages.is_empty() && key < self.last_inserted {
            // Out of order: from now on the store's order is not send order.
            let by_sent = self
                .messages
                .iter()
                .map(|(s, m)| (m.sent_at_ms, s))
                .collect();
            self.by_sent = Some(by_sent);
            let messages = &self.messages;
            self.ready
                .key_by_sent(|seq| messages.get(seq).expect("ready message").sent_at_ms);
        }
        if let Some(by_sent) = &mut self.by_sent {
            by_sent.insert(key);
        }
        self.last_inserted = key;
        match message.state {
            MessageState::Ready => {
                self.ready.insert(message.sent_at_ms, seq);
            }
            MessageState::Delayed => {
                self.delayed += 1;
                self.timers.insert((message.visible_at_ms, seq));
            }
            MessageState::InFlight => {
                self.in_flight += 1;
                self.timers.insert((message.visible_at_ms, seq));
            }
        }
        let state = message.state;
        let group_id = message.fifo.as_ref().map(|fifo| fifo.group_id.clone());
        if let Some(fifo) = &message.fifo {
            assert!(
                self.fifo.is_some() || fifo.deduplication_id.is_empty(),
                "message {seq}: a deduplication id on a standard queue"
            );
        } else {
            assert!(self.fifo.is_none(), "message {seq}: FIFO without a group");
        }
        let slot = Self::fair_slot(&message, seq);
        let previous = self.messages.insert(seq, message);
        assert!(previous.is_none(), "message {seq} inserted twice");
        if self.fifo.is_some() {
            self.fifo_update(group_id, seq, None, Some(state));
        } else if group_id.is_some() || self.fair.is_some() {
            if self.fair.is_none() {
                // Counts this message too.
                self.start_fair();
            } else {
                self.fair_update(group_id.as_ref(), None, Some(slot));
            }
        }
    }

    /// Why a consumer failed message `seq`, if it did (fail-now).
    pub fn failure_reason(&self, seq: u64) -> Option<&Arc<str>> {
        self.failure_reasons.get(&seq)
    }

    /// Every failure reason, by sequence number.
    pub fn failure_reasons(&self) -> impl Iterator<Item = (u64, &Arc<str>)> {
        self.failure_reasons
            .iter()
            .map(|(seq, reason)| (*seq, reason))
    }

    /// Records why message `seq` (which must exist) was failed.
    pub fn set_failure_reason(&mut self, seq: u64, reason: Arc<str>) {
        assert!(
            self.messages.get(seq).is_some(),
            "reason of a missing message {seq}"
        );
        self.failure_reasons.insert(seq, reason);
    }

    /// Keeps the history of message `seq`, just deleted at `now_ms` (if it had been received),
    /// among the recently deleted.
    pub(crate) fn remember_deleted(&mut self, seq: u64, message: Message, now_ms: u64) {
        let Some(mut history) = message.history else {
            return;
        };
        history.end(AttemptOutcome::Deleted, now_ms);
        if self.recently_deleted.len() == RECENTLY_DELETED_KEPT {
            self.recently_deleted.pop_front();
        }
        self.recently_deleted.push_back(DeletedMessage {
            seq,
            id: message.id,
            sent_at_ms: message.sent_at_ms,
            receive_count: message.receive_count,
            deleted_at_ms: now_ms,
            dead_letter_source: message.dead_letter_source,
            history,
        });
    }

    /// The recently deleted message with this id, if it is still kept.
    pub fn recently_deleted(&self, id: MessageId) -> Option<&DeletedMessage> {
        self.recently_deleted
            .iter()
            .rev()
            .find(|deleted| deleted.id == id)
    }

    /// Messages from sequence number `seq` on, in order.
    pub fn messages_from(&self, seq: u64) -> impl Iterator<Item = (u64, &Message)> {
        self.messages.iter_from(seq)
    }

    /// Removes a message from the queue and every index.
    pub fn remove(&mut self, seq: u64) -> Option<Message> {
        let message = self.messages.remove(seq)?;
        self.failure_reasons.remove(&seq);
        self.unindex_state(
            seq,
            message.state,
            message.sent_at_ms,
            message.visible_at_ms,
        );
        if let Some(by_sent) = &mut self.by_sent {
            by_sent.remove(&(message.sent_at_ms, seq));
            if by_sent.is_empty() {
                // Empty again: whatever comes next starts a new order.
                self.by_sent = None;
                self.ready.clear();
            }
        }
        if self.fifo.is_some() {
            let group_id = message.fifo.as_ref().map(|fifo| fifo.group_id.clone());
            self.fifo_update(group_id, seq, Some(message.state), None);
        } else if self.fair.is_some() {
            let group_id = message.fifo.as_ref().map(|fifo| &fifo.group_id);
            self.fair_update(group_id, Some(Self::fair_slot(&message, seq)), None);
        }
        Some(message)
    }

    fn unindex_state(
        &mut self,
        seq: u64,
        state: MessageState,
        sent_at_ms: u64,
        visible_at_ms: u64,
    ) {
        let found = match state {
            MessageState::Ready => self.ready.remove(sent_at_ms, seq),
            MessageState::Delayed => {
                self.delayed -= 1;
                self.timers.remove(&(visible_at_ms, seq))
            }
            MessageState::InFlight => {
                self.in_flight -= 1;
                self.timers.remove(&(visible_at_ms, seq))
            }
        };
        assert!(found, "message {seq} missing from its {state:?} index");
    }

    /// Makes message `seq` in flight until `visible_at_ms` (a new lease, or a changed one), or
    /// ready at once when `visible_at_ms <= now_ms` (delayed for the redelivery backoff instead,
    /// if the queue's backoff counts releases and this ends a lease).
    pub fn set_visibility(&mut self, seq: u64, now_ms: u64, visible_at_ms: u64) {
        let message = self.messages.get(seq).expect("lease of a live message");
        let was_slot = Self::fair_slot(message, seq);
        let (state, sent_at_ms, old_visible_at_ms) =
            (message.state, message.sent_at_ms, message.visible_at_ms);
        self.unindex_state(seq, state, sent_at_ms, old_visible_at_ms);
        let message = self.messages.get_mut(seq).expect("lease of a live message");
        message.visible_at_ms = visible_at_ms;
        // A release (visibility 0) of a lease waits out the backoff too if the queue says so.
        let backoff_ms = match &self.config.redelivery_backoff {
            Some(backoff)
                if backoff.releases
                    && state == MessageState::InFlight
                    && visible_at_ms <= now_ms =>
            {
                backoff.delay_ms(message.receive_count, &message.id.0)
            }
            _ => 0,
        };
        if backoff_ms > 0 {
            message.state = MessageState::Delayed;
            message.visible_at_ms = now_ms + backoff_ms;
            self.delayed += 1;
            self.timers.insert((message.visible_at_ms, seq));
        } else if visible_at_ms <= now_ms {
            message.state = MessageState::Ready;
            self.ready.insert(message.sent_at_ms, seq);
        } else {
            message.state = MessageState::InFlight;
            self.in_flight += 1;
            self.timers.insert((visible_at_ms, seq));
        }
        let now_state = message.state;
        if self.fair.is_some() {
            let now_slot = Self::fair_slot(message, seq);
            let group = message.fifo.as_ref().map(|fifo| fifo.group_id.clone());
            self.set_fair_clock(self.fair_clock_ms.max(now_ms));
            self.fair_update(group.as_ref(), Some(was_slot), Some(now_slot));
        }
        let group_id = self.group_of(seq);
        self.fifo_update(group_id, seq, Some(state), Some(now_state));
    }

    /// Applies a FIFO queue's new `DelaySeconds` to the messages already in it (SQS: "For FIFO
    /// queues, the per-queue delay setting is retroactive", developer guide, delay queues).
    /// Every FIFO send takes the queue's delay (a FIFO message has none of its own), so a
    /// message that was sent and never received waits until its send time plus the new delay:
    /// a delayed one becomes ready if that time has passed, and a ready one becomes delayed
    /// again if it has not. A received message (its visibility is its lease's) and one a move
    /// task brought (it arrived without the queue's delay) keep theirs. Called by `apply` for
    /// a `SetConfig` record that changes the delay, so replay and snapshots agree with live
    /// traffic. O(messages in the queue): a delay change is rare, a scan of the backlog is
    /// what SQS's rule asks for.
    pub(crate) fn apply_queue_delay(&mut self, now_ms: u64) {
        let delay_ms = u64::from(self.config.delay_seconds) * 1000;
        let changes: Vec<(u64, u64)> = self
            .messages
            .iter()
            .filter(|(_, message)| {
                message.receive_count == 0
                    && message.redrive_generation == 0
                    && message.state != MessageState::InFlight
            })
            .filter_map(|(seq, message)| {
                let visible_at_ms = message.sent_at_ms + delay_ms;
                let delayed = visible_at_ms > now_ms;
                let unchanged = match message.state {
                    MessageState::Delayed => message.visible_at_ms == visible_at_ms,
                    _ => !delayed,
                };
                (!unchanged).then_some((seq, visible_at_ms))
            })
            .collect();
        for (seq, visible_at_ms) in changes {
            self.set_delay(seq, now_ms, visible_at_ms);
        }
    }

    /// Makes message `seq`, waiting (delayed or ready), delayed until `visible_at_ms`, or ready
    /// when that is not after `now_ms`.
    fn set_delay(&mut self, seq: u64, now_ms: u64, visible_at_ms: u64) {
        let message = self.messages.get(seq).expect("delay of a live message");
        let was_slot = Self::fair_slot(message, seq);
        let (state, sent_at_ms, old_visible_at_ms) =
            (message.state, message.sent_at_ms, message.visible_at_ms);
        assert_ne!(
            state,
            MessageState::InFlight,
            "delay of a leased message {seq}"
        );
        self.unindex_state(seq, state, sent_at_ms, old_visible_at_ms);
        let message = self.messages.get_mut(seq).expect("delay of a live message");
        message.visible_at_ms = visible_at_ms;
        if visible_at_ms > now_ms {
            message.state = MessageState::Delayed;
            self.delayed += 1;
            self.timers.insert((visible_at_ms, seq));
        } else {
            message.state = MessageState::Ready;
            self.ready.insert(sent_at_ms, seq);
        }
        let now_state = message.state;
        if self.fair.is_some() {
            let now_slot = Self::fair_slot(message, seq);
            let group = message.fifo.as_ref().map(|fifo| fifo.group_id.clone());
            self.set_fair_clock(self.fair_clock_ms.max(now_ms));
            self.fair_update(group.as_ref(), Some(was_slot), Some(now_slot));
        }
        let group_id = self.group_of(seq);
        self.fifo_update(group_id, seq, Some(state), Some(now_state));
    }

    /// The message at `seq`, mutably (for fields no index depends on).
    pub fn message_mut(&mut self, seq: u64) -> Option<&mut Message> {
        self.messages.get_mut(seq)
    }

    /// Removes every message.
    pub fn clear(&mut self) -> usize {
        let removed = self.messages.len();
        self.messages.clear();
        self.failure_reasons.clear();
        self.ready.clear();
        self.timers.clear();
        self.by_sent = None;
        self.in_flight = 0;
        self.delayed = 0;
        if let Some(fifo) = self.fifo.as_deref_mut() {
            fifo.clear_groups();
        }
        if let Some(fair) = self.fair.as_deref_mut() {
            fair.clear();
        }
        removed
    }

    /// Panics if an index disagrees with the messages. Cost O(n): for tests and simulation.
    pub fn check_invariants(&self) {
        let (mut ready, mut in_flight, mut delayed) = (0, 0, 0);
        assert_eq!(
            matches!(self.ready, ReadyIndex::BySent(_)),
            self.by_sent.is_some(),
            "the ready index keys by send time exactly when sequence order is not send order"
        );
        for seq in self.failure_reasons.keys() {
            assert!(
                self.messages.get(*seq).is_some(),
                "reason of a missing message {seq}"
            );
        }
        let mut previous_sent = (0, 0);
        for (seq, message) in self.messages.iter() {
            assert!(seq < self.next_seq);
            let sent = (message.sent_at_ms, seq);
            match &self.by_sent {
                Some(by_sent) => assert!(by_sent.contains(&sent)),
                None => assert!(sent > previous_sent, "message {seq} out of send order"),
            }
            previous_sent = sent;
            check_history(seq, message);
            match message.state {
                MessageState::Ready => {
                    ready += 1;
                    assert!(self.ready.contains(message.sent_at_ms, seq));
                }
                MessageState::InFlight => {
                    in_flight += 1;
                    assert!(message.receive_count > 0);
                    assert!(self.timers.contains(&(message.visible_at_ms, seq)));
                }
                MessageState::Delayed => {
                    delayed += 1;
                    assert!(self.timers.contains(&(message.visible_at_ms, seq)));
                }
            }
        }
        assert_eq!(ready, self.ready.len());
        assert_eq!(in_flight, self.in_flight);
        assert_eq!(delayed, self.delayed);
        assert_eq!(in_flight + delayed, self.timers.len());
        if let Some(fifo) = &self.fifo {
            fifo.check_invariants(self.messages.iter().map(|(seq, message)| {
                let group = message.fifo.as_ref().expect("FIFO message has a group");
                (
                    seq,
                    &*group.group_id,
                    Self::ready_since(Some(message)),
                    message.state == MessageState::InFlight,
                )
            }));
        } else {
            assert!(self.messages.iter().all(|(_, m)| m
                .fifo
                .as_ref()
                .is_none_or(|f| f.deduplication_id.is_empty())));
            match &self.fair {
                Some(fair) => fair.check_invariants(self.messages.iter().map(|(seq, message)| {
                    let group = message.fifo.as_ref().map_or("", |fifo| &*fifo.group_id);
                    (group, Some(Self::fair_slot(message, seq)))
                })),
                None => assert!(self.messages.iter().all(|(_, m)| m.fifo.is_none())),
            }
        }
        if let Some(by_sent) = &self.by_sent {
            assert_eq!(self.messages.len(), by_sent.len());
        }
    }
}

/// A message has a history exactly when it was received; its attempts are numbered up to its
/// receive count, and a leased message's last attempt is the lease it is under.
fn check_history(seq: u64, message: &Message) {
    let Some(history) = &message.history else {
        assert_eq!(
            message.receive_count, 0,
            "message {seq} received, no history"
        );
        return;
    };
    assert!(
        message.receive_count > 0,
        "message {seq}: history, no receive"
    );
    let Some(last) = history.attempts.back() else {
        return;
    };
    let kept = history.attempts.len() as u32;
    assert_eq!(
        history.first_attempt + kept - 1,
        message.receive_count,
        "message {seq}: attempts numbered up to the receive count"
    );
    if message.state == MessageState::InFlight {
        assert_eq!(last.outcome, AttemptOutcome::Leased, "message {seq}");
        assert_eq!(last.deadline_ms, message.visible_at_ms, "message {seq}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Memory per message is the cost of a backlog: bodies live in the log, so this struct (in
    /// the store) and the index entries are what ten million messages cost.
    #[test]
    fn a_message_stays_small() {
        let size = std::mem::size_of::<Option<Message>>();
        // 96 before FIFO queues; `Message::fifo` (a boxed group and deduplication id, `None` on
        // standard queues) costs 8 more per message, on every queue. Keeping FIFO fields in a
        // side table of the FIFO state would win them back at a lookup per FIFO operation.
        // The attempt history (boxed, `None` until the first receive) took the place of the
        // first-receive time (an `Option<u64>`, 16 bytes), which it holds: 8 fewer.
        assert!(size <= 96, "a message slot takes {size} bytes");
    }
}
