//! The checks of a recorded [`History`], each sound under unknown outcomes: a violation is
//! reported only when no resolution of the unknown operations, and no clock difference within
//! the slack, explains the history.
//!
//! Words used below. An operation *completed before* another was invoked when its completion
//! instant is earlier (an unknown one never completes). A lease's *floor* is the earliest
//! moment it can have ended: the receive's invocation plus its visibility timeout, or earlier if
//! its own receipt was used by a delete or visibility change that may have happened (invocation
//! plus the new timeout, 0 for a delete); extensions are ignored, which can only hide a
//! violation, never invent one. A delete or visibility change with the receipt of attempt `k`
//! is *definitely stale* when a receive that completed before it was invoked handed out attempt
//! `k+1` or later, and *possibly stale* when such a receive was invoked before it completed or
//! an unknown receive of the queue was.

mod counts;
mod fifo;
mod messages;

use std::collections::HashMap;
use std::fmt;

use super::{Config, Delivery, Event, History, Observation, Op, OpId, Outcome, Reply};

/// What a violation breaks. Each check of [`check`] reports one kind.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ViolationKind {
    /// The history itself is not one a run can record: a reply of the wrong kind, a completion
    /// before its invocation, a tag sent twice, a receipt no delivery handed out.
    Malformed,
    /// Check 1: an acknowledged send is in no final listing (its queue's or its dead-letter
    /// queue's), and no delete that may have happened (acknowledged or unknown, invoked before
    /// the listing completed) of a receipt of it can have been of its current attempt.
    LostSend,
    /// Check 2: after a delete was acknowledged that cannot have been stale, the message was
    /// delivered by a receive invoked after the delete completed, or listed at the end (a
    /// listing in the dead-letter queue is excused when the deleted attempt had reached
    /// `maxReceiveCount` and a receive of the source queue was invoked before the delete
    /// completed: that receive may have moved the message first, making the delete a no-op).
    DeleteCameBack,
    /// Check 3: a delivered or listed message was never sent, was sent by a refused send, was
    /// sent after the receive or listing completed, is in a queue it was not sent to (nor that
    /// queue's dead-letter queue), or has another group than its send named.
    NeverSent,
    /// Check 3: a message is listed twice at the end (twice in one queue, or in two queues).
    Duplicated,
    /// Check 4: two deliveries of one message whose leases definitely overlapped: whichever was
    /// granted first, the other completed before the first's lease floor (minus the slack).
    TwoHolders,
    /// Check 5: receive counts of one message are not attempt numbers: one is 0, two
    /// deliveries (or one receipt) share one, or a receive invoked after another completed
    /// shows a count no higher.
    ReceiveCountWentBack,
    /// Check 6: a stale receipt acted. A visibility change with a definitely stale receipt was
    /// acknowledged (leaseq answers `InvalidParameterValue`); under
    /// [`StaleDeletes::Rejected`], a definitely stale delete was acknowledged; or a message
    /// vanished whose only deletes were definitely stale (under leaseq's default they succeed
    /// and delete nothing).
    StaleReceiptActed,
    /// Check 7: FIFO order. Of two acknowledged sends of one group where the first completed
    /// before the second was invoked, the second was delivered by a receive that completed
    /// before any receive that may have delivered the first was invoked; or one answer lists a
    /// group's messages out of their send order.
    FifoOrder,
    /// Check 7: two receives held one group at once: whichever was granted first, the second
    /// completed (plus the slack) before any message of the group could have become visible
    /// again (a lease floor of the first's, or of any other lease of the group, even an
    /// unknown receive's, that may have been running) and before the first's messages could
    /// all have been deleted.
    FifoTwoHolders,
    /// Check 8: dead-lettering not after exactly `maxReceiveCount` receives: a delivery from
    /// the source queue with a count above it; a message in the dead-letter queue with fewer
    /// attempts from the source queue than it, counting each unknown receive of the source
    /// queue as a possible hidden attempt; a delivery from the dead-letter queue with a count
    /// not above it; a dead-lettered message never received there listed with a count other
    /// than it.
    DeadLetterCount,
    /// Check 9: exact counts. A listing's `GetQueueAttributes` counts (visible + in flight +
    /// delayed) differ from its length; a listed message's receive count is below the highest
    /// count delivered before the listing, or differs from it when no unknown receive of its
    /// queue could have added attempts.
    CountMismatch,
}

/// One violation: what, which operations, and a sentence with their times and processes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Violation {
    /// What it breaks.
    pub kind: ViolationKind,
    /// The operations involved, in the order the text names them.
    pub ops: Vec<OpId>,
    /// What happened, naming each operation as [`Event`]'s `Display` does.
    pub text: String,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}: {}", self.kind, self.text)
    }
}

/// What a passing history held, so a test can tell that the checks had something to check.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Summary {
    /// Operations in the history.
    pub operations: usize,
    /// Operations whose outcome is unknown or pending.
    pub indefinite: usize,
    /// Operations refused with no effect.
    pub failed: usize,
    /// Acknowledged sends.
    pub sends_acknowledged: usize,
    /// Messages delivered by acknowledged receives (attempts).
    pub deliveries: usize,
    /// Of those, redeliveries (receive count above 1).
    pub redeliveries: usize,
    /// Acknowledged deletes.
    pub deletes_acknowledged: usize,
    /// Acknowledged deletes that were definitely stale (and so deleted nothing).
    pub stale_deletes: usize,
    /// Refused visibility changes that were definitely stale.
    pub stale_visibility_changes_refused: usize,
    /// Messages listed at the end, in every queue.
    pub remaining: usize,
    /// Checked sends not listed at the end, accounted for by a delete. With no unknown
    /// operation, `sends_checked = sends_deleted + remaining` (every listed message was sent,
    /// once, and every checked send is listed or deleted).
    pub sends_deleted: usize,
    /// Messages that reached a dead-letter queue (listed there or delivered from it).
    pub dead_lettered: usize,
    /// Acknowledged sends checked against the final listings (check 1).
    pub sends_checked: usize,
    /// Pairs of deliveries of one message compared for overlap (check 4).
    pub lease_pairs: usize,
    /// Pairs of receives of one FIFO group compared for overlap (check 7).
    pub group_pairs: usize,
    /// Acknowledged FIFO sends whose order was checked (check 7).
    pub fifo_sends_ordered: usize,
    /// Queues with sends but no final listing (check 1 skipped them).
    pub unlisted_queues: Vec<String>,
}

impl fmt::Display for Summary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} ops ({} indefinite, {} failed): {} sends acknowledged ({} checked), {} deliveries \
             ({} redeliveries), {} deletes acknowledged ({} stale), {} stale visibility changes \
             refused, {} remaining, {} sends deleted, {} dead-lettered; pairs compared: {} leases, {} FIFO holds; \
             {} FIFO sends ordered",
            self.operations,
            self.indefinite,
            self.failed,
            self.sends_acknowledged,
            self.sends_checked,
            self.deliveries,
            self.redeliveries,
            self.deletes_acknowledged,
            self.stale_deletes,
            self.stale_visibility_changes_refused,
            self.remaining,
            self.sends_deleted,
            self.dead_lettered,
            self.lease_pairs,
            self.group_pairs,
            self.fifo_sends_ordered,
        )?;
        if !self.unlisted_queues.is_empty() {
            write!(f, "; not listed at the end: {:?}", self.unlisted_queues)?;
        }
        Ok(())
    }
}

/// Checks `history` (see [`ViolationKind`] for every check): the summary if it passes, every
/// violation found if not.
pub fn check(history: &History, config: &Config) -> Result<Summary, Vec<Violation>> {
    check_events(&history.events(), config)
}

/// [`check`] over events.
pub fn check_events(events: &[Event], config: &Config) -> Result<Summary, Vec<Violation>> {
    let mut index = Index::new(events, config);
    let malformed = index
        .violations
        .iter()
        .any(|violation| violation.kind == ViolationKind::Malformed);
    if !malformed {
        index.never_sent();
        index.receive_counts();
        index.two_holders();
        index.deletes_stay();
        index.stale_receipts();
        index.sends_kept();
        index.fifo_order();
        index.fifo_holders();
        index.dead_letters();
        index.counts();
    }
    if index.violations.is_empty() {
        Ok(index.summary)
    } else {
        Err(index.violations)
    }
}

/// One delivery: message `position` of the answer of receive `event`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Seen {
    event: usize,
    position: usize,
}

struct Index<'a> {
    events: &'a [Event],
    config: &'a Config,
    slack_us: u64,
    /// The send of each tag.
    send_of: HashMap<&'a str, usize>,
    /// Every acknowledged delivery of each tag, in invocation order.
    deliveries: HashMap<&'a str, Vec<Seen>>,
    /// The delivery that handed out each receipt.
    receipt_of: HashMap<&'a str, Seen>,
    /// The deletes and visibility changes that used each receipt.
    uses: HashMap<&'a str, Vec<usize>>,
    /// Receives of each queue whose outcome is unknown or pending, in invocation order.
    indefinite_receives: HashMap<&'a str, Vec<usize>>,
    /// Receives of each queue that may have happened, in invocation order.
    receives: HashMap<&'a str, Vec<usize>>,
    /// The last acknowledged listing of each queue.
    observation_of: HashMap<&'a str, usize>,
    violations: Vec<Violation>,
    summary: Summary,
}

impl<'a> Index<'a> {
    fn new(events: &'a [Event], config: &'a Config) -> Index<'a> {
        let mut index = Index {
            events,
            config,
            slack_us: config.clock_slack_ms * 1_000,
            send_of: HashMap::new(),
            deliveries: HashMap::new(),
            receipt_of: HashMap::new(),
            uses: HashMap::new(),
            indefinite_receives: HashMap::new(),
            receives: HashMap::new(),
            observation_of: HashMap::new(),
            violations: Vec::new(),
            summary: Summary {
                operations: events.len(),
                ..Summary::default()
            },
        };
        for (at, event) in events.iter().enumerate() {
            index.add(at, event);
        }
        index.add_uses();
        index
    }

    fn report(&mut self, kind: ViolationKind, ops: &[usize], text: String) {
        let ops = ops.iter().map(|&at| self.events[at].id).collect();
        self.violations.push(Violation { kind, ops, text });
    }

    fn ev(&self, at: usize) -> &'a Event {
        &self.events[at]
    }

    fn delivery(&self, seen: Seen) -> &'a Delivery {
        match &self.events[seen.event].outcome {
            Outcome::Ok(Reply::Received(messages)) => &messages[seen.position],
            _ => unreachable!("a delivery is in an acknowledged receive"),
        }
    }

    fn observation(&self, at: usize) -> &'a Observation {
        match &self.events[at].outcome {
            Outcome::Ok(Reply::Observed(observation)) => observation,
            _ => unreachable!("an observation is acknowledged"),
        }
    }

    /// When `event` completed; unknown and pending events never did.
    fn completed(&self, at: usize) -> u64 {
        self.ev(at).completed_us()
    }

    /// The latest moment `event` can have taken effect.
    fn effect_by(&self, at: usize) -> u64 {
        let event = self.ev(at);
        match (
            event.is_indefinite(),
            event.complete_us,
            self.config.unknown_effect_bound_ms,
        ) {
            (true, Some(at_us), Some(bound_ms)) => at_us.saturating_add(bound_ms * 1_000),
            _ => event.effect_by_us(),
        }
    }

    fn visibility_timeout_us(&self, at: usize) -> u64 {
        match &self.ev(at).op {
            Op::Receive {
                queue,
                visibility_timeout_ms,
            } => visibility_timeout_ms
                .unwrap_or_else(|| self.config.spec(queue).visibility_timeout_ms)
                .saturating_mul(1_000),
            _ => 0,
        }
    }

    fn dead_letter_queue(&self, queue: &str) -> Option<(String, u32)> {
        self.config
            .spec(queue)
            .redrive
            .map(|redrive| (redrive.dead_letter_queue, redrive.max_receive_count))
    }

    fn add(&mut self, at: usize, event: &'a Event) {
        if event.id != at {
            let text = format!("{event} is at index {at}");
            return self.report(ViolationKind::Malformed, &[at], text);
        }
        if event.complete_us.is_some_and(|done| done < event.invoke_us) {
            return self.report(
                ViolationKind::Malformed,
                &[at],
                format!("{event} ends before it starts"),
            );
        }
        match &event.outcome {
            Outcome::Failed(_) => self.summary.failed += 1,
            Outcome::Unknown(_) | Outcome::Pending => self.summary.indefinite += 1,
            Outcome::Ok(_) => {}
        }
        let reply = match &event.outcome {
            Outcome::Ok(reply) => Some(reply),
            _ => None,
        };
        match (&event.op, reply) {
            (Op::Send { tag, .. }, None | Some(Reply::Done)) => {
                if let Some(&first) = self.send_of.get(tag.as_str()) {
                    let text = format!("tag {tag:?} sent twice: {} and {event}", self.ev(first));
                    return self.report(ViolationKind::Malformed, &[first, at], text);
                }
                self.send_of.insert(tag, at);
                if reply.is_some() {
                    self.summary.sends_acknowledged += 1;
                }
            }
            (Op::Receive { queue, .. }, None) => {
                if event.may_have_happened() {
                    self.receives.entry(queue).or_default().push(at);
                    self.indefinite_receives.entry(queue).or_default().push(at);
                }
            }
            (Op::Receive { queue, .. }, Some(Reply::Received(messages))) => {
                self.receives.entry(queue).or_default().push(at);
                for (position, message) in messages.iter().enumerate() {
                    let seen = Seen {
                        event: at,
                        position,
                    };
                    self.summary.deliveries += 1;
                    if message.receive_count > 1 {
                        self.summary.redeliveries += 1;
                    }
                    if let Some(&other) = self.receipt_of.get(message.receipt.as_str()) {
                        let text = format!(
                            "receipt {:?} of {:?} handed out by {} and again by {event}",
                            message.receipt,
                            message.tag,
                            self.ev(other.event)
                        );
                        self.report(
                            ViolationKind::ReceiveCountWentBack,
                            &[other.event, at],
                            text,
                        );
                        continue;
                    }
                    self.receipt_of.insert(&message.receipt, seen);
                    self.deliveries.entry(&message.tag).or_default().push(seen);
                }
            }
            (Op::Delete { .. } | Op::ChangeVisibility { .. }, None | Some(Reply::Done)) => {
                if event.is_ok() && matches!(event.op, Op::Delete { .. }) {
                    self.summary.deletes_acknowledged += 1;
                }
            }
            // A listing that did not complete lists nothing: its queue counts as unlisted.
            (Op::Observe { .. }, None) => {}
            (Op::Observe { queue }, Some(Reply::Observed(observation))) => {
                self.summary.remaining += observation.messages.len();
                self.observation_of.insert(queue, at);
            }
            (_, Some(_)) => {
                let text = format!("{event} has a reply of another operation");
                self.report(ViolationKind::Malformed, &[at], text);
            }
        }
    }

    /// Files each delete and visibility change under its receipt (after every receive is in).
    fn add_uses(&mut self) {
        for (at, event) in self.events.iter().enumerate() {
            let (queue, receipt) = match &event.op {
                Op::Delete { queue, receipt } | Op::ChangeVisibility { queue, receipt, .. } => {
                    (queue, receipt)
                }
                _ => continue,
            };
            match self.receipt_of.get(receipt.as_str()) {
                Some(&seen) if self.ev(seen.event).op.queue() == queue => {
                    self.uses.entry(receipt).or_default().push(at);
                }
                Some(&seen) => {
                    let text = format!("{event} uses a receipt of {}", self.ev(seen.event));
                    self.report(ViolationKind::Malformed, &[at], text);
                }
                None => {
                    let text = format!("{event} uses receipt {receipt:?}, which no acknowledged receive handed out");
                    self.report(ViolationKind::Malformed, &[at], text);
                }
            }
        }
    }

    fn uses_of(&self, seen: Seen) -> &[usize] {
        let receipt = self.delivery(seen).receipt.as_str();
        self.uses.get(receipt).map_or(&[], Vec::as_slice)
    }

    fn deliveries_of(&self, tag: &str) -> &[Seen] {
        self.deliveries.get(tag).map_or(&[], Vec::as_slice)
    }

    /// The new timeout of a delete (0: the lease ends) or visibility change.
    fn use_timeout_us(&self, at: usize) -> u64 {
        match &self.ev(at).op {
            Op::ChangeVisibility { timeout_ms, .. } => timeout_ms.saturating_mul(1_000),
            _ => 0,
        }
    }

    /// The earliest moment the lease of `seen` can have ended, by any means.
    fn lease_floor(&self, seen: Seen) -> u64 {
        let receive = seen.event;
        let mut floor = self.ev(receive).invoke_us + self.visibility_timeout_us(receive);
        for &used in self.uses_of(seen) {
            if self.ev(used).may_have_happened() {
                floor = floor.min(self.ev(used).invoke_us + self.use_timeout_us(used));
            }
        }
        floor
    }

    /// The earliest moment the message of `seen` can have become visible again under this
    /// lease (a delete makes nothing visible).
    fn visible_floor(&self, seen: Seen) -> u64 {
        let receive = seen.event;
        let mut floor = self.ev(receive).invoke_us + self.visibility_timeout_us(receive);
        for &used in self.uses_of(seen) {
            let event = self.ev(used);
            if event.may_have_happened() && matches!(event.op, Op::ChangeVisibility { .. }) {
                floor = floor.min(event.invoke_us + self.use_timeout_us(used));
            }
        }
        floor
    }

    /// The latest moment the message of `seen` can have become visible again under this lease.
    fn visible_ceiling(&self, seen: Seen) -> u64 {
        let receive = seen.event;
        let timeout = self.visibility_timeout_us(receive);
        let mut ceiling = self.effect_by(receive).saturating_add(timeout);
        for &used in self.uses_of(seen) {
            let event = self.ev(used);
            if event.may_have_happened() && matches!(event.op, Op::ChangeVisibility { .. }) {
                let moved = self
                    .effect_by(used)
                    .saturating_add(self.use_timeout_us(used));
                ceiling = ceiling.max(moved);
            }
        }
        ceiling
    }

    /// Whether a receive that completed before `used` was invoked handed out a later attempt
    /// of the message of `seen`.
    fn definitely_stale(&self, used: usize, seen: Seen) -> bool {
        let delivery = self.delivery(seen);
        let invoked = self.ev(used).invoke_us;
        self.deliveries_of(&delivery.tag).iter().any(|&other| {
            self.delivery(other).receive_count > delivery.receive_count
                && self.completed(other.event) < invoked
        })
    }

    /// Whether a later attempt of the message of `seen` may have been handed out before `used`
    /// took effect, by an acknowledged receive or an unknown one of the queue.
    fn possibly_stale(&self, used: usize, seen: Seen) -> bool {
        let delivery = self.delivery(seen);
        let by = self.effect_by(used);
        let queue = self.ev(seen.event).op.queue();
        let known = self.deliveries_of(&delivery.tag).iter().any(|&other| {
            self.delivery(other).receive_count > delivery.receive_count
                && self.ev(other.event).invoke_us < by
        });
        known || self.indefinite_receive_before(queue, by)
    }

    fn indefinite_receive_before(&self, queue: &str, before_us: u64) -> bool {
        self.indefinite_receives
            .get(queue)
            .is_some_and(|receives| receives.iter().any(|&at| self.ev(at).invoke_us < before_us))
    }

    fn receive_before(&self, queue: &str, before_us: u64) -> bool {
        self.receives
            .get(queue)
            .is_some_and(|receives| receives.iter().any(|&at| self.ev(at).invoke_us < before_us))
    }

    /// Every listed message with its observation.
    fn listed(&self) -> Vec<(usize, usize)> {
        let mut listed: Vec<(usize, usize)> = Vec::new();
        for &at in self.observation_of.values() {
            for position in 0..self.observation(at).messages.len() {
                listed.push((at, position));
            }
        }
        listed.sort_unstable();
        listed
    }
}
