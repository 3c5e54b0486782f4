//! Checks 1 to 6: what becomes of each message (sent, delivered, deleted, listed), its
//! leases, its receive counts and its stale receipts.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use super::{Index, Seen, ViolationKind};
use crate::history::{Op, Outcome, StaleDeletes};

impl<'a> Index<'a> {
    /// Check 3: where a delivered or listed message came from.
    pub(super) fn never_sent(&mut self) {
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
    pub(super) fn receive_counts(&mut self) {
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
    pub(super) fn lease_overlap(&self, first: Seen, second: Seen) -> bool {
        self.completed(second.event).saturating_add(self.slack_us) < self.lease_floor(first)
    }

    /// Check 4: no two holders of one message.
    pub(super) fn two_holders(&mut self) {
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
    pub(super) fn certainly_both<T: Copy>(
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
    pub(super) fn deletes_stay(&mut self) {
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
    pub(super) fn stale_receipts(&mut self) {
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
    pub(super) fn sends_kept(&mut self) {
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
                self.summary.sends_deleted += 1;
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
}
