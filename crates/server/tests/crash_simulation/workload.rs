//! The simulations' workload: the requests their clients make at random, the receipts the
//! consumers hold, and what the simulations count of it. Shared by the crash simulations of
//! the file log (`crates/server/tests/crash_simulation.rs`) and of the PostgreSQL log
//! (`crates/postgres/tests/crash_simulation.rs`): each has a `Sim` with the fields used here
//! (`rng`, `ledger`, `held`, `next_body`, `restarts`) and a `count` method.

use leaseq_core::{QueueConfigPatch, RedrivePolicy};
use leaseq_server::Caller;
use leaseq_sqs::{Outcome, SqsError};
use rand::seq::IndexedRandom;
use rand::Rng;

use super::model::Dump;
use super::ops::{Held, Request};
use super::Sim;

/// The user agent of every simulated request: attempt histories must keep it through crashes.
pub const USER_AGENT: &str = "crash-sim/1.0";

/// Who the simulation's requests come from.
pub fn caller() -> Caller {
    Caller {
        user_agent: Some(USER_AGENT.parse().expect("a header value")),
        address: Some(std::net::SocketAddr::from(([127, 0, 0, 1], 4000))),
        ..Caller::default()
    }
}

/// Receipts the consumers hold at most.
pub const HELD_MAX: usize = 24;

/// The queues: a dead-letter queue, a queue that may redrive into it, and one more.
pub const DLQ: &str = "dlq";
pub const MAIN: &str = "main";
pub const PLAIN: &str = "plain";
pub const QUEUES: [&str; 3] = [DLQ, MAIN, PLAIN];

/// A short line for an answer.
pub fn summary(result: &Result<Outcome, SqsError>) -> String {
    match result {
        Err(error) => format!("error {:?}", error.code),
        Ok(Outcome::Received { deliveries, .. }) => {
            let got: Vec<String> = deliveries
                .iter()
                .map(|d| format!("{}#{}", d.payload.body, d.receive_count))
                .collect();
            format!("received [{}]", got.join(" "))
        }
        Ok(Outcome::SentBatch(results)) => {
            let ok = results.iter().filter(|(_, r)| r.is_ok()).count();
            format!("sent {ok}/{}", results.len())
        }
        Ok(Outcome::Batch(results)) => {
            let each: Vec<&str> = results
                .iter()
                .map(|(_, r)| if r.is_ok() { "ok" } else { "error" })
                .collect();
            format!("batch [{}]", each.join(" "))
        }
        Ok(_) => "ok".into(),
    }
}

impl Sim {
    pub(super) fn new_body(&mut self) -> String {
        self.next_body += 1;
        let body = format!("m{}", self.next_body);
        self.ledger.sent.insert(body.clone());
        body
    }

    pub(super) fn random_patch(&mut self, name: &str, create: bool) -> QueueConfigPatch {
        let rng = &mut self.rng;
        let mut patch = QueueConfigPatch::default();
        if create || rng.random_bool(0.5) {
            patch.visibility_timeout_seconds = Some(rng.random_range(1..=4));
        }
        if rng.random_bool(0.4) {
            patch.retention_seconds = Some(*[60, 120, 300, 900].choose(rng).expect("some"));
        }
        if rng.random_bool(0.2) {
            patch.delay_seconds = Some(rng.random_range(0..=2));
        }
        if name != DLQ && rng.random_bool(0.6) {
            patch.redrive_policy = Some(Some(RedrivePolicy {
                dead_letter_queue: DLQ.into(),
                max_receive_count: rng.random_range(1..=3),
            }));
        } else if !create && rng.random_bool(0.2) {
            patch.redrive_policy = Some(None);
        }
        patch
    }

    pub(super) fn random_held(&mut self) -> Option<Held> {
        self.held.choose(&mut self.rng).cloned()
    }

    pub(super) fn random_request(&mut self) -> Request {
        let name = self.random_queue();
        let roll = self.rng.random_range(0..100);
        if (60..88).contains(&roll) && self.held.is_empty() {
            return self.random_receive(name);
        }
        match roll {
            0..25 => {
                let delay = self.random_delay();
                Request::Send {
                    name,
                    messages: vec![(self.new_body(), delay)],
                }
            }
            25..35 => {
                let len = self.rng.random_range(1..=5);
                let messages = (0..len)
                    .map(|_| (self.new_body(), self.random_delay()))
                    .collect();
                Request::Send { name, messages }
            }
            35..60 => self.random_receive(name),
            60..67 => {
                let held = self.random_held().expect("held receipts");
                Request::Delete {
                    batch: false,
                    held: vec![held],
                }
            }
            67..75 => {
                let held = self.random_held().expect("held receipts");
                let seconds = *[0, 0, 1, 3, 10].choose(&mut self.rng).expect("some");
                Request::ChangeVisibility { held, seconds }
            }
            75..88 => {
                // Receipts of distinct messages of one queue.
                let first = self.random_held().expect("held receipts");
                let others: Vec<Held> = self
                    .held
                    .iter()
                    .filter(|h| h.queue == first.queue && h.body != first.body)
                    .cloned()
                    .collect();
                let len = self.rng.random_range(0..=3);
                let mut held = vec![first];
                let mut bodies = std::collections::BTreeSet::new();
                held.extend(others.choose_multiple(&mut self.rng, len).cloned());
                held.retain(|h| bodies.insert(h.body.clone()));
                Request::Delete { batch: true, held }
            }
            88..90 => Request::Purge { name },
            90..95 => {
                let patch = self.random_patch(name, false);
                Request::SetAttributes { name, patch }
            }
            95..99 => {
                let patch = self.random_patch(name, true);
                Request::CreateQueue { name, patch }
            }
            _ => Request::DeleteQueue { name: PLAIN },
        }
    }

    /// Mostly a queue that exists.
    pub(super) fn random_queue(&mut self) -> &'static str {
        let existing: Vec<&'static str> = QUEUES
            .into_iter()
            .filter(|name| self.ledger.acked.queues.contains_key(*name))
            .collect();
        match existing.choose(&mut self.rng) {
            Some(name) if self.rng.random_bool(0.9) => name,
            _ => QUEUES.choose(&mut self.rng).expect("queues"),
        }
    }

    pub(super) fn random_receive(&mut self, name: &'static str) -> Request {
        Request::Receive {
            name,
            max_messages: self.rng.random_range(1..=5),
            visibility_seconds: [None, Some(0), Some(1), Some(2), Some(5)]
                .choose(&mut self.rng)
                .copied()
                .expect("some"),
        }
    }

    pub(super) fn random_delay(&mut self) -> Option<u32> {
        [None, None, Some(0), Some(1), Some(3)]
            .choose(&mut self.rng)
            .copied()
            .expect("some")
    }

    /// Keeps the receipts of acknowledged deliveries (consumers hold a bounded number).
    pub(super) fn hold(&mut self, outcome: &Outcome, name: &str, after: &Dump) {
        let Outcome::Received { deliveries, .. } = outcome else {
            return;
        };
        for delivery in deliveries {
            self.held.push(Held {
                queue: name.to_string(),
                queue_id: after.queues[name].id,
                body: delivery.payload.body.clone(),
                receipt: delivery.receipt.clone(),
                attempt: delivery.receive_count,
                restarts: self.restarts,
            });
        }
        while self.held.len() > HELD_MAX {
            let i = self.rng.random_range(0..self.held.len());
            self.held.swap_remove(i);
        }
    }

    /// Counts what an acknowledged request did that the run exists to exercise.
    pub(super) fn count_effects(&mut self, before: &Dump, after: &Dump, request: &Request) {
        match request {
            Request::Delete { held, .. } => {
                for held in held {
                    if before.is_current(held) && held.restarts < self.restarts {
                        self.count("receipt from before a restart deleted after it");
                    }
                }
            }
            Request::ChangeVisibility { held, .. } if held.restarts < self.restarts => {
                self.count("receipt from before a restart changed visibility after it");
            }
            Request::Receive { .. } => {
                let moved = before
                    .messages
                    .iter()
                    .filter(|(body, m)| {
                        after
                            .messages
                            .get(*body)
                            .is_some_and(|a| a.queue != m.queue)
                    })
                    .count();
                for _ in 0..moved {
                    self.count("dead-letter move");
                }
            }
            _ => {}
        }
    }
}
