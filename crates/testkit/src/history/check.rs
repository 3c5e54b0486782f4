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

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt;

use super::{
    Config, Delivery, Event, History, Observation, Op, OpId, Outcome, Reply, StaleDeletes,
};

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
             refused, {} remaining, {} dead-lettered; pairs compared: {} leases, {} FIFO holds; \
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
            (Op::Observe { queue }, None) => {
                let _ = queue;
            }
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

    /// Check 3: where a delivered or listed message came from.
    fn never_sent(&mut self) {
        let mut found: Vec<(usize, &'a str, &'a str, Option<&'a str>)> = Vec::new();
        for seens in self.deliveries.values() {
            for &seen in seens {
                let delivery = self.delivery(seen);
                let queue = self.ev(seen.event).op.queue();
                found.push((seen.event, &delivery.tag, queue, delivery.group.as_deref()));
            }
        }
        let mut listed_in: BTreeMap<&'a str, Vec<usize>> = BTreeMap::new();
        for (at, position) in self.listed() {
            let message = &self.observation(at).messages[position];
            let queue = self.ev(at).op.queue();
            found.push((at, &message.tag, queue, message.group.as_deref()));
            listed_in.entry(&message.tag).or_default().push(at);
        }
        found.sort_unstable();
        for (at, tag, queue, group) in found {
            let seen_by = self.ev(at);
            let Some(&send) = self.send_of.get(tag) else {
                let text = format!("{seen_by} has {tag:?}, which was never sent");
                self.report(ViolationKind::NeverSent, &[at], text);
                continue;
            };
            let sent = self.ev(send);
            let Op::Send {
                queue: sent_to,
                group: sent_group,
                ..
            } = &sent.op
            else {
                unreachable!("send_of holds sends")
            };
            let problem = if !sent.may_have_happened() {
                Some("whose send was refused".to_string())
            } else if sent.invoke_us >= self.completed(at) {
                Some("whose send was invoked after it completed".to_string())
            } else if queue != sent_to
                && self
                    .dead_letter_queue(sent_to)
                    .map(|(dlq, _)| dlq)
                    .as_deref()
                    != Some(queue)
            {
                Some(format!("which was sent to {sent_to}"))
            } else if self.config.spec(sent_to).fifo && group != sent_group.as_deref() {
                Some(format!(
                    "in group {group:?}, which was sent in group {sent_group:?}"
                ))
            } else {
                None
            };
            if let Some(problem) = problem {
                let text = format!("{seen_by} has {tag:?}, {problem}: {sent}");
                self.report(ViolationKind::NeverSent, &[at, send], text);
            }
        }
        for (tag, observations) in listed_in {
            if observations.len() > 1 {
                let names: Vec<String> = observations
                    .iter()
                    .map(|&at| self.ev(at).to_string())
                    .collect();
                let text = format!(
                    "{tag:?} listed {} times: {}",
                    observations.len(),
                    names.join(", ")
                );
                self.report(ViolationKind::Duplicated, &observations, text);
            }
        }
    }

    /// Check 5: receive counts are attempt numbers, rising in real time.
    fn receive_counts(&mut self) {
        let mut reports = Vec::new();
        for (tag, seens) in &self.deliveries {
            for (i, &a) in seens.iter().enumerate() {
                let count_a = self.delivery(a).receive_count;
                if count_a == 0 {
                    let text = format!(
                        "{} delivered {tag:?} with receive count 0",
                        self.ev(a.event)
                    );
                    reports.push((vec![a.event], text));
                }
                for &b in &seens[i + 1..] {
                    let count_b = self.delivery(b).receive_count;
                    let (first, second) = (self.ev(a.event), self.ev(b.event));
                    let text = if count_a == count_b {
                        format!("attempt {count_a} of {tag:?} handed out twice: by {first} and {second}")
                    } else if self.completed(a.event) < second.invoke_us && count_b < count_a {
                        format!("{tag:?} had receive count {count_a} at {first}, then {count_b} at {second}")
                    } else if self.completed(b.event) < first.invoke_us && count_a < count_b {
                        format!("{tag:?} had receive count {count_b} at {second}, then {count_a} at {first}")
                    } else {
                        continue;
                    };
                    reports.push((vec![a.event, b.event], text));
                }
            }
        }
        for (ops, text) in reports {
            self.report(ViolationKind::ReceiveCountWentBack, &ops, text);
        }
    }

    /// Whether, if `first`'s lease was granted before `second`'s, they certainly overlapped.
    fn lease_overlap(&self, first: Seen, second: Seen) -> bool {
        self.completed(second.event).saturating_add(self.slack_us) < self.lease_floor(first)
    }

    /// Check 4: no two holders of one message.
    fn two_holders(&mut self) {
        let mut reports = Vec::new();
        for (tag, seens) in &self.deliveries {
            for (i, &a) in seens.iter().enumerate() {
                for &b in &seens[i + 1..] {
                    self.summary.lease_pairs += 1;
                    let event = |seen: Seen| seen.event;
                    if self.certainly_both(a, b, event, |f, s| self.lease_overlap(f, s)) {
                        let text = format!(
                            "{tag:?} leased twice at once: {} (lease floor {:.3} ms) and {} \
                             (lease floor {:.3} ms)",
                            self.ev(a.event),
                            self.lease_floor(a) as f64 / 1e3,
                            self.ev(b.event),
                            self.lease_floor(b) as f64 / 1e3,
                        );
                        reports.push((vec![a.event, b.event], text));
                    }
                }
            }
        }
        for (ops, text) in reports {
            self.report(ViolationKind::TwoHolders, &ops, text);
        }
    }

    /// Whether `conflict(first, second)` holds for every order in which `a` and `b` (or the
    /// events `event` names for them) can have taken effect, `first` before `second`.
    fn certainly_both<T: Copy>(
        &self,
        a: T,
        b: T,
        event: impl Fn(T) -> usize,
        conflict: impl Fn(T, T) -> bool,
    ) -> bool {
        let possible =
            |first: T, second: T| self.ev(event(first)).invoke_us < self.completed(event(second));
        (!possible(a, b) || conflict(a, b)) && (!possible(b, a) || conflict(b, a))
    }

    /// Check 2: an acknowledged delete that cannot have been stale is final.
    fn deletes_stay(&mut self) {
        let mut reports = Vec::new();
        for (at, event) in self.events.iter().enumerate() {
            let Op::Delete { receipt, .. } = &event.op else {
                continue;
            };
            if !event.is_ok() {
                continue;
            }
            let seen = self.receipt_of[receipt.as_str()];
            if self.possibly_stale(at, seen) {
                continue;
            }
            let delivery = self.delivery(seen);
            let deleted_at = self.completed(at);
            let from = self.ev(seen.event).op.queue();
            // A receive of the source queue may have moved the message to the dead-letter
            // queue before the delete landed, making it a no-op.
            let moved_first = self.dead_letter_queue(from).and_then(|(dlq, max)| {
                (delivery.receive_count >= max && self.receive_before(from, deleted_at))
                    .then_some(dlq)
            });
            let excused = |queue: &str| moved_first.as_deref() == Some(queue);
            let again = self.deliveries_of(&delivery.tag).iter().find(|other| {
                let receive = self.ev(other.event);
                receive.invoke_us > deleted_at && !excused(receive.op.queue())
            });
            let listed = self.observation_of.iter().find(|(queue, &observe)| {
                self.ev(observe).invoke_us > deleted_at
                    && !excused(queue)
                    && self
                        .observation(observe)
                        .messages
                        .iter()
                        .any(|m| m.tag == delivery.tag)
            });
            let back = again
                .map(|other| other.event)
                .or(listed.map(|(_, &observe)| observe));
            if let Some(back) = back {
                let text = format!(
                    "{:?} (attempt {} from {}) deleted by {event}, which no later attempt \
                     preceded, is back in {}",
                    delivery.tag,
                    delivery.receive_count,
                    self.ev(seen.event),
                    self.ev(back)
                );
                reports.push((vec![at, seen.event, back], text));
            }
        }
        for (ops, text) in reports {
            self.report(ViolationKind::DeleteCameBack, &ops, text);
        }
    }

    /// Check 6, the answers: stale visibility changes (and, when rejected, deletes) fail.
    fn stale_receipts(&mut self) {
        let mut reports = Vec::new();
        for (at, event) in self.events.iter().enumerate() {
            let receipt = match &event.op {
                Op::Delete { receipt, .. } | Op::ChangeVisibility { receipt, .. } => receipt,
                _ => continue,
            };
            let seen = self.receipt_of[receipt.as_str()];
            if !self.definitely_stale(at, seen) {
                continue;
            }
            let is_delete = matches!(event.op, Op::Delete { .. });
            match (&event.outcome, is_delete) {
                (Outcome::Ok(_), true) => self.summary.stale_deletes += 1,
                (Outcome::Failed(_), false) => self.summary.stale_visibility_changes_refused += 1,
                _ => {}
            }
            let must_fail = !is_delete || self.config.stale_deletes == StaleDeletes::Rejected;
            if event.is_ok() && must_fail {
                let delivery = self.delivery(seen);
                let later = self
                    .deliveries_of(&delivery.tag)
                    .iter()
                    .find(|other| {
                        self.delivery(**other).receive_count > delivery.receive_count
                            && self.completed(other.event) < event.invoke_us
                    })
                    .expect("a definitely stale receipt has a later attempt");
                let text = format!(
                    "{event} succeeded with the receipt of attempt {} of {:?} ({}), after {} \
                     handed out attempt {}",
                    delivery.receive_count,
                    delivery.tag,
                    self.ev(seen.event),
                    self.ev(later.event),
                    self.delivery(*later).receive_count
                );
                reports.push((vec![at, seen.event, later.event], text));
            }
        }
        for (ops, text) in reports {
            self.report(ViolationKind::StaleReceiptActed, &ops, text);
        }
    }

    /// Check 1 (and check 6's vanished messages): every acknowledged send is accounted for.
    fn sends_kept(&mut self) {
        let mut listed: HashMap<&str, ()> = HashMap::new();
        for (at, position) in self.listed() {
            listed.insert(&self.observation(at).messages[position].tag, ());
        }
        let mut unlisted = BTreeSet::new();
        let mut reports = Vec::new();
        for (at, event) in self.events.iter().enumerate() {
            let Op::Send { queue, tag, .. } = &event.op else {
                continue;
            };
            if !event.is_ok() {
                continue;
            }
            let mut listings = vec![queue.clone()];
            if let Some((dlq, _)) = self.dead_letter_queue(queue) {
                listings.push(dlq);
            }
            let observations: Option<Vec<usize>> = listings
                .iter()
                .map(|name| self.observation_of.get(name.as_str()).copied())
                .collect();
            let Some(observations) = observations else {
                unlisted.insert(queue.clone());
                continue;
            };
            if observations
                .iter()
                .any(|&observe| self.ev(observe).invoke_us <= self.completed(at))
            {
                continue; // The send may have landed after a listing began.
            }
            self.summary.sends_checked += 1;
            if listed.contains_key(tag.as_str()) {
                continue;
            }
            let listed_by = observations
                .iter()
                .map(|&o| self.completed(o))
                .max()
                .unwrap_or(0);
            let mut stale = Vec::new();
            let mut deleted = false;
            for &seen in self.deliveries_of(tag) {
                for &used in self.uses_of(seen) {
                    let use_event = self.ev(used);
                    if !matches!(use_event.op, Op::Delete { .. })
                        || !use_event.may_have_happened()
                        || use_event.invoke_us >= listed_by
                    {
                        continue;
                    }
                    if self.definitely_stale(used, seen) {
                        stale.push(used);
                    } else {
                        deleted = true;
                    }
                }
            }
            if deleted {
                continue;
            }
            let listings = observations
                .iter()
                .map(|&o| self.ev(o).to_string())
                .collect::<Vec<_>>()
                .join(", ");
            if stale.is_empty() {
                let text = format!("{tag:?} of {event} is lost: not in {listings}, and no delete of it may have happened");
                reports.push((ViolationKind::LostSend, vec![at], text));
            } else {
                let deletes = stale
                    .iter()
                    .map(|&d| self.ev(d).to_string())
                    .collect::<Vec<_>>()
                    .join(", ");
                let text = format!(
                    "{tag:?} of {event} vanished (not in {listings}); its only deletes were \
                     stale: {deletes}"
                );
                let mut ops = vec![at];
                ops.extend(stale);
                reports.push((ViolationKind::StaleReceiptActed, ops, text));
            }
        }
        self.summary.unlisted_queues = unlisted.into_iter().collect();
        for (kind, ops, text) in reports {
            self.report(kind, &ops, text);
        }
    }

    /// Check 7, order: within a group, first deliveries in send order; answers in send order.
    fn fifo_order(&mut self) {
        // (queue, group) -> acknowledged sends.
        let mut groups: BTreeMap<(&'a str, &'a str), Vec<usize>> = BTreeMap::new();
        for (at, event) in self.events.iter().enumerate() {
            if let Op::Send {
                queue,
                group: Some(group),
                ..
            } = &event.op
            {
                if event.is_ok() && self.config.spec(queue).fifo {
                    groups.entry((queue, group)).or_default().push(at);
                }
            }
        }
        let mut reports = Vec::new();
        for ((queue, _group), mut sends) in groups {
            sends.sort_by_key(|&at| self.completed(at));
            let hidden_from = self
                .indefinite_receives
                .get(queue)
                .and_then(|receives| receives.iter().map(|&at| self.ev(at).invoke_us).min())
                .unwrap_or(u64::MAX);
            // The latest "earliest invocation of a receive that delivered it" among the sends
            // completed so far (u64::MAX: never delivered), and which send that is.
            let mut prefix_end = 0;
            let mut latest: Option<(u64, usize)> = None;
            for &send in &sends {
                let invoked = self.ev(send).invoke_us;
                while prefix_end < sends.len() && self.completed(sends[prefix_end]) < invoked {
                    let earlier = sends[prefix_end];
                    let first_receive = self.first_delivery_invoke(earlier, queue);
                    if latest.is_none_or(|(at, _)| first_receive > at) {
                        latest = Some((first_receive, earlier));
                    }
                    prefix_end += 1;
                }
                self.summary.fifo_sends_ordered += 1;
                let Some(delivered) = self.first_delivery_completed(send, queue) else {
                    continue;
                };
                let Some((first_receive, earlier)) = latest else {
                    continue;
                };
                if first_receive >= self.completed(delivered.event)
                    && hidden_from >= self.completed(delivered.event)
                {
                    let text = format!(
                        "{:?} of {} was delivered by {} before {:?} of {}, sent before it, was \
                         ever delivered",
                        self.tag(send),
                        self.ev(send),
                        self.ev(delivered.event),
                        self.tag(earlier),
                        self.ev(earlier)
                    );
                    reports.push((vec![send, delivered.event, earlier], text));
                }
            }
        }
        // Within one answer, a group's messages come in send order.
        for (at, event) in self.events.iter().enumerate() {
            let (Op::Receive { queue, .. }, Outcome::Ok(Reply::Received(messages))) =
                (&event.op, &event.outcome)
            else {
                continue;
            };
            if !self.config.spec(queue).fifo {
                continue;
            }
            for (i, a) in messages.iter().enumerate() {
                for b in &messages[i + 1..] {
                    let (Some(&send_a), Some(&send_b)) = (
                        self.send_of.get(a.tag.as_str()),
                        self.send_of.get(b.tag.as_str()),
                    ) else {
                        continue;
                    };
                    // A dead-letter queue orders a group by the moves, which the history does
                    // not see: only messages sent to this queue have a known order here.
                    let sent_here = |send: usize| self.ev(send).op.queue() == queue.as_str();
                    if a.group == b.group
                        && sent_here(send_a)
                        && sent_here(send_b)
                        && self.completed(send_b) < self.ev(send_a).invoke_us
                    {
                        let text = format!(
                            "{event} answered {:?} before {:?}, which {} sent before {}",
                            a.tag,
                            b.tag,
                            self.ev(send_b),
                            self.ev(send_a)
                        );
                        reports.push((vec![at, send_a, send_b], text));
                    }
                }
            }
        }
        for (ops, text) in reports {
            self.report(ViolationKind::FifoOrder, &ops, text);
        }
    }

    fn tag(&self, send: usize) -> &'a str {
        match &self.ev(send).op {
            Op::Send { tag, .. } => tag,
            _ => unreachable!("a send"),
        }
    }

    fn first_delivery_invoke(&self, send: usize, queue: &str) -> u64 {
        self.deliveries_of(self.tag(send))
            .iter()
            .filter(|seen| self.ev(seen.event).op.queue() == queue)
            .map(|seen| self.ev(seen.event).invoke_us)
            .min()
            .unwrap_or(u64::MAX)
    }

    fn first_delivery_completed(&self, send: usize, queue: &str) -> Option<Seen> {
        self.deliveries_of(self.tag(send))
            .iter()
            .filter(|seen| self.ev(seen.event).op.queue() == queue)
            .min_by_key(|seen| self.completed(seen.event))
            .copied()
    }

    /// Check 7, holders: one holder per group.
    fn fifo_holders(&mut self) {
        // (queue, group) -> the acknowledged receives that delivered some of it, with what.
        let mut holds: BTreeMap<(&'a str, &'a str), BTreeMap<usize, Vec<Seen>>> = BTreeMap::new();
        for seens in self.deliveries.values() {
            for &seen in seens {
                let queue = self.ev(seen.event).op.queue();
                if let (true, Some(group)) = (
                    self.config.spec(queue).fifo,
                    self.delivery(seen).group.as_deref(),
                ) {
                    holds
                        .entry((queue, group))
                        .or_default()
                        .entry(seen.event)
                        .or_default()
                        .push(seen);
                }
            }
        }
        let mut reports = Vec::new();
        for ((queue, group), receives) in &holds {
            let mut order: Vec<usize> = receives.keys().copied().collect();
            order.sort_by_key(|&at| self.ev(at).invoke_us);
            for (i, &a) in order.iter().enumerate() {
                let reach = self
                    .ev(a)
                    .invoke_us
                    .saturating_add(self.visibility_timeout_us(a));
                for &b in &order[i + 1..] {
                    if self.ev(b).invoke_us >= reach {
                        break; // b completed after every lease floor of a, and began after a.
                    }
                    self.summary.group_pairs += 1;
                    let held = |first: usize, second: usize| {
                        self.group_still_held(queue, receives, first, second)
                    };
                    if self.certainly_both(a, b, |at| at, held) {
                        let text = format!(
                            "group {group:?} of {queue} held by two receives at once: {} and {}",
                            self.ev(a),
                            self.ev(b)
                        );
                        reports.push((vec![a, b], text));
                    }
                }
            }
        }
        for (ops, text) in reports {
            self.report(ViolationKind::FifoTwoHolders, &ops, text);
        }
    }

    /// Whether, if receive `first` was granted before `second`, the group was certainly still
    /// held when `second` was granted: nothing of it can have become visible again in between,
    /// nor can all of `first`'s messages have been deleted.
    fn group_still_held(
        &self,
        queue: &str,
        receives: &BTreeMap<usize, Vec<Seen>>,
        first: usize,
        second: usize,
    ) -> bool {
        let granted_by = self.completed(second).saturating_add(self.slack_us);
        let first_from = self.ev(first).invoke_us.saturating_sub(self.slack_us);
        let own = &receives[&first];
        if own
            .iter()
            .any(|&seen| self.visible_floor(seen) <= granted_by)
        {
            return false;
        }
        let all_deleted = own.iter().all(|&seen| {
            self.uses_of(seen).iter().any(|&used| {
                let event = self.ev(used);
                matches!(event.op, Op::Delete { .. })
                    && event.may_have_happened()
                    && event.invoke_us <= granted_by
            })
        });
        if all_deleted {
            return false;
        }
        // Another lease of the group that may have been running may end in between.
        for (&other, seens) in receives {
            if other == first
                || other == second
                || self.ev(other).invoke_us >= self.completed(second)
            {
                continue;
            }
            if seens.iter().any(|&seen| {
                self.visible_floor(seen) <= granted_by && self.visible_ceiling(seen) >= first_from
            }) {
                return false;
            }
        }
        for &other in self
            .indefinite_receives
            .get(queue)
            .map_or(&[][..], Vec::as_slice)
        {
            let event = self.ev(other);
            let timeout = self.visibility_timeout_us(other);
            if event.invoke_us < self.completed(second)
                && event.invoke_us + timeout <= granted_by
                && self.effect_by(other).saturating_add(timeout) >= first_from
            {
                return false;
            }
        }
        true
    }

    /// Check 8: dead-lettering after exactly `maxReceiveCount` receives.
    fn dead_letters(&mut self) {
        let mut reports = Vec::new();
        let mut dead_lettered = 0;
        for (tag, &send) in &self.send_of {
            let Op::Send { queue, .. } = &self.ev(send).op else {
                continue;
            };
            let Some((dlq, max)) = self.dead_letter_queue(queue) else {
                continue;
            };
            let seens = self.deliveries_of(tag);
            for &seen in seens {
                let receive = self.ev(seen.event);
                let count = self.delivery(seen).receive_count;
                if receive.op.queue() == queue && count > max {
                    let text = format!("{receive} delivered {tag:?} with receive count {count} from {queue}, whose maxReceiveCount is {max}");
                    reports.push((vec![seen.event], text));
                }
                if receive.op.queue() == dlq && count <= max {
                    let text = format!("{receive} delivered dead-lettered {tag:?} with receive count {count}, not above maxReceiveCount {max}");
                    reports.push((vec![seen.event], text));
                }
            }
            // The first evidence that it reached the dead-letter queue.
            let mut evidence: Vec<usize> = seens
                .iter()
                .filter(|seen| self.ev(seen.event).op.queue() == dlq)
                .map(|seen| seen.event)
                .collect();
            if let Some(&observe) = self.observation_of.get(dlq.as_str()) {
                if self
                    .observation(observe)
                    .messages
                    .iter()
                    .any(|m| m.tag == *tag)
                {
                    evidence.push(observe);
                }
            }
            let Some(&moved) = evidence.iter().min_by_key(|&&at| self.completed(at)) else {
                continue;
            };
            dead_lettered += 1;
            let moved_by = self.completed(moved);
            let attempts: BTreeSet<u32> = seens
                .iter()
                .filter(|seen| {
                    self.ev(seen.event).op.queue() == queue
                        && self.ev(seen.event).invoke_us < moved_by
                })
                .map(|&seen| self.delivery(seen).receive_count)
                .filter(|&count| count <= max)
                .collect();
            let hidden = self
                .indefinite_receives
                .get(queue.as_str())
                .map_or(0, |receives| {
                    receives
                        .iter()
                        .filter(|&&at| self.ev(at).invoke_us < moved_by)
                        .count()
                });
            if attempts.len() + hidden < max as usize {
                let text = format!(
                    "{tag:?} reached {dlq} ({}) after at most {} receives from {queue} (attempts \
                     seen {attempts:?}, {hidden} unknown receives), maxReceiveCount {max}",
                    self.ev(moved),
                    attempts.len() + hidden
                );
                reports.push((vec![send, moved], text));
            }
        }
        self.summary.dead_lettered = dead_lettered;
        for (ops, text) in reports {
            self.report(ViolationKind::DeadLetterCount, &ops, text);
        }
    }

    /// Check 9: exact counts.
    fn counts(&mut self) {
        let mut reports = Vec::new();
        for (&queue, &observe) in &self.observation_of {
            let observation = self.observation(observe);
            let event = self.ev(observe);
            if let Some(counts) = observation.counts {
                let total = counts.visible + counts.in_flight + counts.delayed;
                if total != observation.messages.len() as u64 {
                    let text = format!(
                        "{event} counts {total} messages ({counts:?}) but lists {}",
                        observation.messages.len()
                    );
                    reports.push((ViolationKind::CountMismatch, vec![observe], text));
                }
            }
            let hidden = self.indefinite_receive_before(queue, u64::MAX);
            for message in &observation.messages {
                let delivered: Vec<u32> = self
                    .deliveries_of(&message.tag)
                    .iter()
                    .filter(|seen| self.completed(seen.event) < event.invoke_us)
                    .map(|&seen| self.delivery(seen).receive_count)
                    .collect();
                let highest = delivered.iter().copied().max();
                let here = self
                    .deliveries_of(&message.tag)
                    .iter()
                    .any(|seen| self.ev(seen.event).op.queue() == queue);
                let moved_with = self.send_of.get(message.tag.as_str()).and_then(|&send| {
                    let (dlq, max) = self.dead_letter_queue(self.ev(send).op.queue())?;
                    (dlq == queue).then_some(max)
                });
                let count = message.receive_count;
                let all_before = delivered.len() == self.deliveries_of(&message.tag).len();
                // Listed in its dead-letter queue and never received there: moved with exactly
                // maxReceiveCount.
                let moved_unreceived = moved_with.filter(|_| !here);
                let floor = highest.unwrap_or(0).max(moved_unreceived.unwrap_or(0));
                let exact = match moved_unreceived {
                    _ if hidden || !all_before => None,
                    Some(max) => Some(max),
                    None => Some(highest.unwrap_or(0)),
                };
                let kind = if moved_unreceived.is_some() {
                    ViolationKind::DeadLetterCount
                } else {
                    ViolationKind::CountMismatch
                };
                if count < floor {
                    let text = format!(
                        "{event} lists {:?} with receive count {count}, below {floor} (the \
                         highest delivered before, or maxReceiveCount in a dead-letter queue)",
                        message.tag
                    );
                    reports.push((kind, vec![observe], text));
                } else if exact.is_some_and(|exact| exact != count) {
                    let text = format!(
                        "{event} lists {:?} with receive count {count}; the history makes it \
                         exactly {}",
                        message.tag,
                        exact.unwrap_or(0)
                    );
                    reports.push((kind, vec![observe], text));
                }
            }
        }
        for (kind, ops, text) in reports {
            self.report(kind, &ops, text);
        }
    }
}
