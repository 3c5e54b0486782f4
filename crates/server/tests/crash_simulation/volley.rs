//! Volleys: a few requests at once, crashed while they wait for their fsync.

use std::collections::BTreeSet;
use std::time::Duration;

use leaseq_server::Api;
use leaseq_sqs::Outcome;
use rand::seq::IndexedRandom;
use rand::Rng;

use super::model::{Dump, Window};
use super::ops::Request;
use super::{summary, Sim, QUEUES};

impl Sim {
    /// A few requests at once, crashed while they wait for their fsync: those answered with
    /// success must survive exactly; the others may or may not have happened.
    ///
    /// Each message is touched by at most one of them (at most one receive; sends go elsewhere
    /// than the receive's queue and its dead-letter queue; deletes name distinct messages), so a
    /// message comes back either as it was before the volley or as the volley left it.
    pub(super) async fn volley(&mut self) {
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
        let before = self.ledger.acked.clone();
        let backend = self.backend();
        let tasks: Vec<_> = requests
            .iter()
            .map(|request| {
                let (backend, action) = (backend.clone(), request.action());
                tokio::spawn(async move { backend.execute(action, &super::caller()).await })
            })
            .collect();
        drop(backend);
        for _ in 0..self.rng.random_range(0..=3) {
            tokio::task::yield_now().await;
        }
        // Not a wait for time (the clock is fake): it lets the log's sync thread get further
        // through its writes and fsyncs before the crash, so crashes land at more points.
        if self.rng.random_bool(0.3) {
            std::thread::sleep(Duration::from_micros(self.rng.random_range(0..800)));
        }
        let mode = self.random_crash_mode();
        let crashed = self.storage.crash(mode);
        let mut results = Vec::new();
        for task in tasks {
            results.push(task.await.expect("a request task"));
        }
        let live = Dump::of_crashed(&self.backend(), self.now_ms(), Some(&crashed))
            .with_bodies_from(&before);
        let mut window = Window::new(&before);
        window.states.push(live.clone());
        for (request, result) in requests.iter().zip(&results) {
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
            window.acknowledged_bodies.extend(acknowledged_bodies(
                request, outcome, &before, &live, &deleted,
            ));
            if let Request::Receive { name, .. } = request {
                self.hold(outcome, name, &live);
            }
        }
        self.window = window;
        let backend = self.backend.take();
        self.storage = crashed;
        drop(backend);
        self.note(format!("volley crash {mode:?}"));
        self.count("crash: during a volley");
        self.restart().await;
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
