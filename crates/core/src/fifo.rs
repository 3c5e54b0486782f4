//! FIFO queues: message groups, the deduplication window and receive-attempt ids.
//!
//! A FIFO queue keeps the standard indexes of [`crate::Queue`] (so counts, retention and lease
//! timers work as for any queue) plus a [`FifoState`]:
//!
//! - **Groups.** Every message of a FIFO queue belongs to one group (`MessageGroupId`). A group
//!   is the sequence numbers of its messages, in send order, split into those in flight and
//!   those waiting (ready or delayed), and whether it is **held**: a receive leased one of its
//!   messages and none of its in-flight messages has become visible since. Invariant: a group
//!   delivers only while it is not held, and only from its oldest waiting message (the one
//!   delivery resumes from), and only when that message is ready. A lease that runs out or is
//!   released ends the hold at once, even while other messages of the group are in flight (SQS
//!   does the same: each message of a batch keeps its own lease).
//! - **Available groups.** The groups that may deliver now, keyed by when the message they
//!   resume from became visible (its send, the end of its delay, or the end of its lease), then
//!   its sequence number: a receive serves the group that has waited longest first, so a busy
//!   group cannot starve the others, and a group whose lease just ended queues behind the groups
//!   that were waiting (as SQS orders them: LocalStack's AWS-validated
//!   `test_fifo_receive_message_with_zero_visibility_timeout` and
//!   `test_fifo_message_group_visibility_after_terminate_visibility_timeout`), also when both
//!   became visible in the same millisecond: there a message received before ranks after one
//!   never received ([`ready_key`]). Kept up to date on
//!   every state change of a message in O(log n), never by scanning the backlog. Whether a group is held
//!   is history, not a function of its messages' states, so snapshots carry the groups that
//!   are not held although they have messages in flight (`RestoreGroupRelease`).
//! - **The deduplication window.** (scope, deduplication id) → the message the id first
//!   enqueued, for five minutes from its send, whatever happens to the message after (SQS keeps
//!   tracking the id after a delete; only a purge forgets it). Derived from `Send` records;
//!   snapshots carry it as `RestoreDeduplication` records.
//! - **Receive attempts.** `ReceiveRequestAttemptId` → the leases a receive granted, for five
//!   minutes: a retry with the same id returns the same messages and receipts while every one of
//!   those leases is still the current, unchanged lease of its message.
//!
//! Expiry of window entries and attempts is time-driven like every other timer: pruned in
//! `Queue::advance(now_ms)`, so it needs no records and replay agrees with live traffic.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use rustc_hash::FxHashMap;

use crate::error::{Error, Field, Result};
use crate::message::MessageId;

/// How long a deduplication id is remembered after its send (SQS: 5 minutes).
pub const DEDUPLICATION_WINDOW_MS: u64 = 5 * 60 * 1000;
/// How long a receive-attempt id is remembered after its receive (SQS: 5 minutes).
pub const RECEIVE_ATTEMPT_WINDOW_MS: u64 = 5 * 60 * 1000;
/// Characters in a group id, deduplication id or receive-attempt id.
pub const TOKEN_LENGTH_MAX: usize = 128;

/// The settings only FIFO queues have.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FifoConfig {
    /// Sends without a deduplication id use the SHA-256 of the body.
    pub content_based_deduplication: bool,
    /// Whether deduplication ids are unique per queue or per message group.
    pub deduplication_scope: DeduplicationScope,
    /// Stored and returned: leaseq has no throughput quota to apply it to.
    pub throughput_limit: FifoThroughputLimit,
}

/// `DeduplicationScope`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum DeduplicationScope {
    /// `queue`: one deduplication id space per queue.
    #[default]
    Queue,
    /// `messageGroup`: one space per message group.
    MessageGroup,
}

/// `FifoThroughputLimit`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum FifoThroughputLimit {
    /// `perQueue`.
    #[default]
    PerQueue,
    /// `perMessageGroupId`.
    PerMessageGroupId,
}

/// What a message of a FIFO queue carries besides a standard message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FifoMessage {
    /// `MessageGroupId`.
    pub group_id: Arc<str>,
    /// `MessageDeduplicationId` (given, derived from the body, or, after a dead-letter move,
    /// the message id).
    pub deduplication_id: Arc<str>,
}

/// One lease a receive with a `ReceiveRequestAttemptId` granted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AttemptLease {
    /// The message.
    pub seq: u64,
    /// The attempt the lease began.
    pub attempt: u32,
    /// When the lease ran out as granted (a changed lease no longer matches).
    pub visible_at_ms: u64,
}

/// The SQS `SequenceNumber` of the message with sequence number `seq`: a large number (20
/// digits), strictly increasing with `seq`, so per queue and across restarts (`seq` is durable).
pub fn sequence_number(seq: u64) -> String {
    (18_000_000_000_000_000_000u128 + u128::from(seq)).to_string()
}

/// The deduplication id of content-based deduplication: the hex SHA-256 of the body.
pub fn content_deduplication_id(body: &str) -> String {
    use sha2::Digest;
    let digest = sha2::Sha256::digest(body.as_bytes());
    digest.iter().map(|byte| format!("{byte:02x}")).collect()
}

/// Checks a group id, deduplication id or attempt id: 1 to 128 characters, each alphanumeric
/// or ASCII punctuation, as SQS checks them.
pub fn check_token(field: Field, value: &str) -> Result<()> {
    let valid = !value.is_empty()
        && value.len() <= TOKEN_LENGTH_MAX
        && value
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b.is_ascii_punctuation());
    if valid {
        return Ok(());
    }
    Err(Error::Malformed {
        field,
        value: value.to_string(),
        length_max: TOKEN_LENGTH_MAX,
    })
}

/// A deduplication window entry: the message an id first enqueued.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Deduplicated {
    /// The first message's id (a duplicate send answers with it).
    pub message_id: MessageId,
    /// The first message's sequence number.
    pub seq: u64,
    /// When the entry leaves the window.
    pub expires_at_ms: u64,
}

/// A remembered receive attempt.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReceiveAttempt {
    /// When the receive happened (the entry lasts five minutes from here).
    pub received_at_ms: u64,
    /// The leases it granted, in delivery order.
    pub leases: Vec<AttemptLease>,
}

/// One message group. Its messages are `waiting` and `in_flight` together (disjoint).
#[derive(Clone, Debug, Default)]
struct Group {
    /// Sequence numbers of its messages not in flight (ready or delayed), in send order.
    waiting: BTreeSet<u64>,
    /// Sequence numbers of its messages in flight.
    in_flight: BTreeSet<u64>,
    /// A receive leased one of its messages, and none of its in-flight messages became visible
    /// since. Never true without a message in flight.
    held: bool,
    /// The key under which it is in `available`, if it is: (when its resume message became
    /// visible, as [`ready_key`] ranks it; that message's sequence number).
    available_at: Option<(u64, u64)>,
}

impl Group {
    /// Whether it has no message.
    fn is_empty(&self) -> bool {
        self.waiting.is_empty() && self.in_flight.is_empty()
    }
}

/// The first half of an available group's key: when the message it resumes from became visible
/// (`visible_at_ms`), and within that millisecond, after the messages never received, if it was
/// received before (its lease ended or was released). Without the second part a group whose
/// lease of 0 seconds ended in the millisecond another group's message was sent would rank by
/// sequence number, ahead of the group that was waiting.
pub(crate) fn ready_key(visible_at_ms: u64, received_before: bool) -> u64 {
    visible_at_ms.saturating_mul(2) | u64::from(received_before)
}

/// The FIFO state of one queue (see the module documentation).
#[derive(Clone, Debug, Default)]
pub struct FifoState {
    groups: FxHashMap<Arc<str>, Group>,
    /// The oldest waiting message of each group that may deliver now, as (when it became
    /// visible, as [`ready_key`] ranks it; its sequence number) (see [`Group`]).
    available: BTreeSet<(u64, u64)>,
    /// scope → deduplication id → entry; the scope is the group id or "" for the whole queue.
    /// (Nested so a lookup borrows the request's strings instead of building a key.)
    window: FxHashMap<Arc<str>, FxHashMap<Arc<str>, Deduplicated>>,
    /// (expires_at_ms, seq) → the window key and the entry's message id: the whole entry, in
    /// time order, for pruning and for a checkpoint's copy ([`FifoState::window`]), which then
    /// needs no lookup in `window`.
    window_expiry: BTreeMap<(u64, u64), Expiring>,
    attempts: FxHashMap<Arc<str>, ReceiveAttempt>,
    /// The groups with messages in flight that are not held (see [`FifoState::released_groups`]),
    /// kept as they change so a checkpoint's freeze need not visit every group.
    released: BTreeSet<Arc<str>>,
    /// (expires_at_ms, attempt id).
    attempt_expiry: BTreeSet<(u64, Arc<str>)>,
}

/// A deduplication window entry as the window's time-ordered index holds it: its key in the
/// window, and its message id (the index's own key holds its expiry time and sequence number).
#[derive(Clone, Debug)]
struct Expiring {
    scope: Arc<str>,
    deduplication_id: Arc<str>,
    message_id: MessageId,
}

/// How a message's state changed, for the group bookkeeping.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Transition {
    /// It was in flight before.
    pub was_in_flight: bool,
    /// It is in flight now.
    pub is_in_flight: bool,
}

impl FifoState {
    /// Drops window entries and attempts whose five minutes ended by `now_ms`.
    pub(crate) fn advance(&mut self, now_ms: u64) {
        while let Some((&(at, seq), _)) = self.window_expiry.first_key_value() {
            if at > now_ms {
                break;
            }
            let Expiring {
                scope,
                deduplication_id: id,
                ..
            } = self
                .window_expiry
                .remove(&(at, seq))
                .expect("first entry exists");
            let ids = self
                .window
                .get_mut(&scope)
                .expect("scope of a window entry");
            let removed = ids.remove(&id);
            assert!(
                removed.is_some_and(|entry| entry.seq == seq),
                "window entry of message {seq} missing"
            );
            if ids.is_empty() {
                self.window.remove(&scope);
            }
        }
        while let Some((at, _)) = self.attempt_expiry.first() {
            if *at > now_ms {
                break;
            }
            let (_, id) = self.attempt_expiry.pop_first().expect("first entry exists");
            self.attempts.remove(&id);
        }
    }

    /// The window entry of a deduplication id in a scope, if the id is in the window.
    pub fn deduplicated(&self, scope: &str, deduplication_id: &str) -> Option<Deduplicated> {
        self.window.get(scope)?.get(deduplication_id).copied()
    }

    /// Enters a deduplication id into the window (the id must not be in it).
    pub(crate) fn remember(
        &mut self,
        scope: Arc<str>,
        deduplication_id: Arc<str>,
        entry: Deduplicated,
    ) {
        self.window_expiry.insert(
            (entry.expires_at_ms, entry.seq),
            Expiring {
                scope: scope.clone(),
                deduplication_id: deduplication_id.clone(),
                message_id: entry.message_id,
            },
        );
        let previous = self
            .window
            .entry(scope)
            .or_default()
            .insert(deduplication_id, entry);
        assert!(previous.is_none(), "deduplication id entered twice");
    }

    /// Every window entry: (scope, deduplication id, entry), in expiry order.
    /// The scope and id are the window's own, shared: a copy of them costs a reference count.
    pub fn window(&self) -> impl Iterator<Item = (&Arc<str>, &Arc<str>, Deduplicated)> + '_ {
        self.window_expiry
            .iter()
            .map(|(&(expires_at_ms, seq), expiring)| {
                let entry = Deduplicated {
                    message_id: expiring.message_id,
                    seq,
                    expires_at_ms,
                };
                (&expiring.scope, &expiring.deduplication_id, entry)
            })
    }

    /// Entries in the deduplication window.
    pub fn window_len(&self) -> usize {
        self.window_expiry.len()
    }

    /// The remembered receive with this attempt id, if it is less than five minutes old.
    pub fn attempt(&self, attempt_id: &str) -> Option<&ReceiveAttempt> {
        self.attempts.get(attempt_id)
    }

    /// Remembers a receive under its attempt id, replacing an older one of the same id.
    pub(crate) fn remember_attempt(&mut self, attempt_id: &str, attempt: ReceiveAttempt) {
        let id: Arc<str> = Arc::from(attempt_id);
        if let Some(old) = self.attempts.remove(&id) {
            self.attempt_expiry
                .remove(&(old.received_at_ms + RECEIVE_ATTEMPT_WINDOW_MS, id.clone()));
        }
        self.attempt_expiry.insert((
            attempt.received_at_ms + RECEIVE_ATTEMPT_WINDOW_MS,
            id.clone(),
        ));
        self.attempts.insert(id, attempt);
    }

    /// Every remembered attempt, in expiry order.
    pub fn attempts(&self) -> impl Iterator<Item = (&str, &ReceiveAttempt)> + '_ {
        self.attempt_expiry
            .iter()
            .map(|(_, id)| (&**id, &self.attempts[id]))
    }

    /// Forgets the window and the attempts (a purge).
    pub(crate) fn forget(&mut self) {
        self.window.clear();
        self.window_expiry.clear();
        self.attempts.clear();
        self.attempt_expiry.clear();
    }

    /// Forgets every group (all messages were removed).
    pub(crate) fn clear_groups(&mut self) {
        self.groups.clear();
        self.available.clear();
        self.released.clear();
    }

    /// The first available group after `after`, as (when the message it resumes from became
    /// visible, as [`ready_key`] ranks it; that message's sequence number): the order in which
    /// receives serve them.
    pub fn next_available(&self, after: Option<(u64, u64)>) -> Option<(u64, u64)> {
        use std::ops::Bound::{Excluded, Unbounded};
        match after {
            None => self.available.first().copied(),
            Some(after) => self
                .available
                .range((Excluded(after), Unbounded))
                .next()
                .copied(),
        }
    }

    /// The message after `seq` in its group, in flight or not, if any.
    pub fn next_in_group(&self, group_id: &str, seq: u64) -> Option<u64> {
        let group = self.groups.get(group_id)?;
        let waiting = group.waiting.range(seq + 1..).next();
        let in_flight = group.in_flight.range(seq + 1..).next();
        match (waiting, in_flight) {
            (Some(a), Some(b)) => Some(*a.min(b)),
            (a, b) => a.or(b).copied(),
        }
    }

    /// Groups with at least one message.
    pub fn group_count(&self) -> usize {
        self.groups.len()
    }

    /// Messages in flight in a group.
    pub fn group_in_flight(&self, group_id: &str) -> usize {
        self.groups
            .get(group_id)
            .map_or(0, |group| group.in_flight.len())
    }

    /// Whether a group is held: a receive leased one of its messages and none of its in-flight
    /// messages became visible since.
    pub fn group_held(&self, group_id: &str) -> bool {
        self.groups.get(group_id).is_some_and(|group| group.held)
    }

    /// The groups that have messages in flight but are not held (one of those messages became
    /// visible after the group's latest lease): what a snapshot must say, since a group rebuilt
    /// from its messages is held whenever one is in flight.
    pub fn released_groups(&self) -> impl Iterator<Item = &Arc<str>> + '_ {
        self.released.iter()
    }

    /// Ends the hold on a group (a snapshot's `RestoreGroupRelease`), then re-decides whether it
    /// is available. `ready_since` answers when a message became visible ([`ready_key`]), if it
    /// is ready.
    pub(crate) fn release(&mut self, group_id: &str, ready_since: impl Fn(u64) -> Option<u64>) {
        let group = self
            .groups
            .get_mut(group_id)
            .expect("a released group has messages");
        group.held = false;
        if !group.in_flight.is_empty() {
            self.released.insert(Arc::from(group_id));
        }
        Self::decide(&mut self.available, group, ready_since);
    }

    /// Records that message `seq` of `group_id` entered (`present`) or left the queue or changed
    /// state, then re-decides whether the group is available. `ready_since` answers when a
    /// message became visible ([`ready_key`]), if it is ready (the queue owns the messages).
    pub(crate) fn update(
        &mut self,
        group_id: &Arc<str>,
        seq: u64,
        present: bool,
        transition: Transition,
        ready_since: impl Fn(u64) -> Option<u64>,
    ) {
        let group = self.groups.entry(group_id.clone()).or_default();
        let was_released = !group.held && !group.in_flight.is_empty();
        group.waiting.remove(&seq);
        group.in_flight.remove(&seq);
        if present && transition.is_in_flight {
            group.in_flight.insert(seq);
        } else if present {
            group.waiting.insert(seq);
        }
        match (transition.was_in_flight, transition.is_in_flight) {
            // A lease: its receive holds the group.
            (false, true) => group.held = true,
            // A message in flight became visible (its lease ran out or was released): the
            // group may deliver again, from that message if it is the oldest waiting one. A
            // delete of an in-flight message (not present) ends no hold.
            (true, false) if present => group.held = false,
            _ => {}
        }
        if group.in_flight.is_empty() {
            group.held = false;
        }
        let is_released = !group.held && !group.in_flight.is_empty();
        if is_released != was_released {
            if is_released {
                self.released.insert(group_id.clone());
            } else {
                self.released.remove(group_id);
            }
        }
        if group.is_empty() {
            if let Some(at) = group.available_at.take() {
                self.available.remove(&at);
            }
            self.groups.remove(group_id);
            return;
        }
        Self::decide(&mut self.available, group, ready_since);
    }

    /// Puts `group` into `available` (keyed by when its oldest waiting message became visible,
    /// then that message) exactly when it is not held and that message is ready.
    fn decide(
        available: &mut BTreeSet<(u64, u64)>,
        group: &mut Group,
        ready_since: impl Fn(u64) -> Option<u64>,
    ) {
        if let Some(at) = group.available_at.take() {
            available.remove(&at);
        }
        let Some(resume) = group.waiting.first().copied().filter(|_| !group.held) else {
            return;
        };
        if let Some(since) = ready_since(resume) {
            group.available_at = Some((since, resume));
            available.insert((since, resume));
        }
    }

    /// Panics unless the groups agree with `messages` (seq, group id, ready, in flight) and the
    /// window with its expiry index. O(n): tests only.
    pub(crate) fn check_invariants<'a>(
        &self,
        messages: impl Iterator<Item = (u64, &'a str, Option<u64>, bool)>,
    ) {
        // Per group: every message, those in flight, those ready (with when they became visible).
        type Expected = (BTreeSet<u64>, BTreeSet<u64>, BTreeMap<u64, u64>);
        let mut expected: FxHashMap<&str, Expected> = FxHashMap::default();
        for (seq, group_id, ready_since, in_flight) in messages {
            let entry = expected.entry(group_id).or_default();
            entry.0.insert(seq);
            if in_flight {
                entry.1.insert(seq);
            }
            if let Some(since) = ready_since {
                entry.2.insert(seq, since);
            }
        }
        assert_eq!(expected.len(), self.groups.len(), "group count");
        let mut available = BTreeSet::new();
        for (group_id, (seqs, in_flight, ready)) in &expected {
            let group = &self.groups[*group_id];
            assert_eq!(&group.in_flight, in_flight, "in flight in group {group_id}");
            let waiting: BTreeSet<u64> = seqs.difference(in_flight).copied().collect();
            assert_eq!(group.waiting, waiting, "waiting in group {group_id}");
            assert!(
                !group.held || !in_flight.is_empty(),
                "group {group_id} held with nothing in flight"
            );
            let resume = waiting.first().copied().filter(|_| !group.held);
            let should = resume.and_then(|next| ready.get(&next).map(|&since| (since, next)));
            assert_eq!(
                group.available_at, should,
                "availability of group {group_id}"
            );
            available.extend(should);
        }
        assert_eq!(available, self.available, "available groups");
        let released: BTreeSet<&str> = self
            .groups
            .iter()
            .filter(|(_, group)| !group.held && !group.in_flight.is_empty())
            .map(|(group_id, _)| &**group_id)
            .collect();
        let kept: BTreeSet<&str> = self.released.iter().map(|id| &**id).collect();
        assert_eq!(released, kept, "released groups");
        let entries: usize = self.window.values().map(|ids| ids.len()).sum();
        assert_eq!(entries, self.window_expiry.len());
        assert!(self.window.values().all(|ids| !ids.is_empty()));
        for ((at, seq), expiring) in &self.window_expiry {
            let entry = self.window[&expiring.scope][&expiring.deduplication_id];
            assert_eq!(
                (entry.expires_at_ms, entry.seq, entry.message_id),
                (*at, *seq, expiring.message_id)
            );
        }
        assert_eq!(self.attempts.len(), self.attempt_expiry.len());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sequence_numbers_are_large_and_increasing() {
        assert_eq!(sequence_number(1), "18000000000000000001");
        assert!(sequence_number(9) < sequence_number(10));
        assert_eq!(sequence_number(u64::MAX).len(), 20);
    }

    #[test]
    fn content_deduplication_is_the_sha256_of_the_body() {
        assert_eq!(
            content_deduplication_id("abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }

    #[test]
    fn tokens_follow_sqs_rules() {
        for ok in [
            "a",
            "A-1_b.c",
            "!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~",
            &"x".repeat(128),
        ] {
            assert!(check_token(Field::MessageGroupId, ok).is_ok(), "{ok}");
        }
        for bad in ["", " ", "a b", "é", &"x".repeat(129)] {
            assert!(check_token(Field::MessageGroupId, bad).is_err(), "{bad}");
        }
    }
}
