//! Check 7: FIFO queues, send order within a group and one holder per group.

use std::collections::BTreeMap;

use super::{Index, Seen, ViolationKind};
use crate::history::{Op, Outcome, Reply};

impl<'a> Index<'a> {
    /// Check 7, order: within a group, first deliveries in send order; answers in send order.
    pub(super) fn fifo_order(&mut self) {
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

    pub(super) fn tag(&self, send: usize) -> &'a str {
        match &self.ev(send).op {
            Op::Send { tag, .. } => tag,
            _ => unreachable!("a send"),
        }
    }

    pub(super) fn first_delivery_invoke(&self, send: usize, queue: &str) -> u64 {
        self.deliveries_of(self.tag(send))
            .iter()
            .filter(|seen| self.ev(seen.event).op.queue() == queue)
            .map(|seen| self.ev(seen.event).invoke_us)
            .min()
            .unwrap_or(u64::MAX)
    }

    pub(super) fn first_delivery_completed(&self, send: usize, queue: &str) -> Option<Seen> {
        self.deliveries_of(self.tag(send))
            .iter()
            .filter(|seen| self.ev(seen.event).op.queue() == queue)
            .min_by_key(|seen| self.completed(seen.event))
            .copied()
    }

    /// Check 7, holders: one holder per group.
    pub(super) fn fifo_holders(&mut self) {
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
    pub(super) fn group_still_held(
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
}
