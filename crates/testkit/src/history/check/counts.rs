//! Checks 8 and 9: dead-lettering after exactly `maxReceiveCount` receives, and exact counts.

use std::collections::BTreeSet;

use super::{Index, ViolationKind};
use crate::history::Op;

impl<'a> Index<'a> {
    /// Check 8: dead-lettering after exactly `maxReceiveCount` receives.
    pub(super) fn dead_letters(&mut self) {
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
    pub(super) fn counts(&mut self) {
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
