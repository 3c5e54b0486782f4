//! Volleys: a few requests at once, crashed while they wait for the log. The requests, their
//! start and the window they leave are shared; how the crash lands (a storage's crash, a
//! dropped node, a cut connection) is each simulation's.

use std::collections::BTreeSet;

use leaseq_server::Api;
use leaseq_sqs::{Outcome, SqsError};
use rand::seq::IndexedRandom;
use rand::Rng;

use super::model::{Dump, Window};
use super::ops::Request;
use super::workload::{caller, summary, QUEUES};
use super::Sim;

impl Sim {
    /// A volley's requests: at most one receive; sends go elsewhere than the receive's queue
    /// and its dead-letter queue; deletes name distinct messages (the bodies they name are
    /// returned with them). So each message is touched by at most one of them, and comes back
    /// either as it was before the volley or as the volley left it.
    pub(super) fn volley_requests(&mut self) -> (Vec<Request>, BTreeSet<String>) {
        let received = self.random_queue();
        let dead_letter_queue = self.ledger.acked.queues.get(received).and_then(|q| {
            q.config
                .redrive_policy
                .as_ref()
                .map(|p| p.dead_letter_queue.clone())
        });
        let mut requests = vec![self.random_receive(received)];
        let targets: Vec<&'static str> = QUEUES
            .into_iter()
            .filter(|q| *q != received && Some(q.to_string()) != dead_letter_queue)
            .collect();
        let mut deleted = BTreeSet::new();
        for _ in 0..self.rng.random_range(1..=3) {
            if self.rng.random_bool(0.5) && !targets.is_empty() {
                let name = *targets.choose(&mut self.rng).expect("targets");
                let len = self.rng.random_range(1..=3);
                let messages = (0..len)
                    .map(|_| (self.new_body(), self.random_delay()))
                    .collect();
                requests.push(Request::Send { name, messages });
            } else if let Some(held) = self.random_held() {
                if deleted.insert(held.body.clone()) {
                    requests.push(Request::Delete {
                        batch: false,
                        held: vec![held],
                    });
                }
            }
        }
        (requests, deleted)
    }

    /// Starts every request of a volley at once, each in a task of its own.
    pub(super) fn volley_start(
        &self,
        requests: &[Request],
    ) -> Vec<tokio::task::JoinHandle<Result<Outcome, SqsError>>> {
        let backend = self.backend();
        requests
            .iter()
            .map(|request| {
                let (backend, action) = (backend.clone(), request.action());
                tokio::spawn(async move { backend.execute(action, &caller()).await })
            })
            .collect()
    }

    /// The window a volley leaves: the state before it, then `live` (the engine after it);
    /// the bodies its acknowledged requests decided must come back as `live` has them. Notes
    /// and counts each answer (`None`: the request's task was cut off by the crash) and keeps
    /// the receipts of an acknowledged receive.
    pub(super) fn volley_window(
        &mut self,
        requests: &[Request],
        results: &[Option<Result<Outcome, SqsError>>],
        (before, live): (&Dump, &Dump),
        deleted: &BTreeSet<String>,
    ) -> Window {
        let mut window = Window::new(before);
        window.states.push(live.clone());
        for (request, result) in requests.iter().zip(results) {
            let Some(result) = result else {
                self.note(format!("volley: {} -> cut off", request.describe()));
                self.count("volley: cut off by the crash");
                continue;
            };
            self.note(format!(
                "volley: {} -> {}",
                request.describe(),
                summary(result)
            ));
            let Ok(outcome) = result else {
                self.count("volley: unknown outcome");
                continue;
            };
            self.count("volley: acknowledged");
            for body in acknowledged_bodies(request, outcome, before, live, deleted) {
                window.acknowledged_bodies.insert(body, 1);
            }
            if let Request::Receive { name, .. } = request {
                self.hold(outcome, name, live);
            }
        }
        window
    }
}

/// The messages whose state after a volley an acknowledged request of it decided.
fn acknowledged_bodies(
    request: &Request,
    outcome: &Outcome,
    before: &Dump,
    live: &Dump,
    deleted: &BTreeSet<String>,
) -> Vec<String> {
    match (request, outcome) {
        (Request::Send { messages, .. }, Outcome::Sent(_)) => vec![messages[0].0.clone()],
        (Request::Send { messages, .. }, Outcome::SentBatch(results)) => messages
            .iter()
            .zip(results)
            .filter(|(_, (_, r))| r.is_ok())
            .map(|((body, _), _)| body.clone())
            .collect(),
        (Request::Receive { name, .. }, Outcome::Received { deliveries, .. }) => {
            // Delivered, or moved to the dead-letter queue (or expired there at once); not the
            // messages a delete of the volley may have removed instead.
            let mut bodies: Vec<String> =
                deliveries.iter().map(|d| d.payload.body.clone()).collect();
            bodies.extend(
                before
                    .messages
                    .iter()
                    .filter(|(body, m)| {
                        m.queue == *name
                            && !deleted.contains(*body)
                            && live.messages.get(*body) != Some(m)
                    })
                    .map(|(body, _)| body.clone()),
            );
            bodies
        }
        (Request::Delete { held, .. }, Outcome::Empty) if before.is_current(&held[0]) => {
            vec![held[0].body.clone()]
        }
        _ => Vec::new(),
    }
}
