//! The simulation's reference: what the backend acknowledged, as views of the engine's state,
//! and the checks between views.
//!
//! A [`Dump`] is every queue and message of an engine, brought forward to one time. The model of
//! acknowledged effects is the dump taken after the last acknowledged request ([`Ledger::acked`]):
//! with `fsync always` and requests issued one at a time, everything in it was made durable
//! before its answer left. Each acknowledged request is checked against the dump before it
//! ([`check_request`]), so the dumps cannot drift from what the client was told; a clock jump is
//! checked the same way ([`check_time_passed`]); a restart is checked against the acknowledged
//! dump and the states an unknown request may have left ([`check_recovery`]). Across all of them
//! the [`Ledger`] keeps what holds forever: nothing never sent appears, nothing gone comes back,
//! receive counts never go down.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;

use leaseq_core::{
    AttemptOutcome, Limits, MessageId, MessageState, PayloadRef, QueueConfig, QueueCounters,
};
use leaseq_server::payloads::ReadError;
use leaseq_server::Service;
use leaseq_sqs::{Outcome, SqsError};

use super::ops::{Held, Request};

/// Where [`Dump::of_crashed`] asks for a body the log could not read (with the log's error).
pub type BodyFallback<'a> = dyn Fn(&PayloadRef, MessageId, &ReadError) -> Option<String> + 'a;

/// One message, as much of it as survives a restart.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MessageView {
    pub queue: String,
    pub queue_id: u64,
    pub seq: u64,
    pub id: MessageId,
    pub receive_count: u32,
    pub state: MessageState,
    pub visible_at_ms: u64,
    pub sent_at_ms: u64,
    pub leased_at_ms: u64,
    pub first_received_at_ms: Option<u64>,
    /// The attempts kept in its history, oldest first.
    pub attempts: Vec<AttemptView>,
}

/// One attempt of a message's history: received at, deadline, extensions, outcome as recorded
/// (a lease whose deadline passed stays `Leased` until something records its end) and the
/// receiving client's user agent.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AttemptView {
    pub received_at_ms: u64,
    pub deadline_ms: u64,
    pub extensions: u32,
    pub outcome: AttemptOutcome,
    pub user_agent: Option<String>,
}

/// One queue's identity and settings.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QueueView {
    pub id: u64,
    pub config: QueueConfig,
}

/// Every queue and message of an engine at `now_ms`, messages by body (bodies are unique).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Dump {
    pub now_ms: u64,
    pub queues: BTreeMap<String, QueueView>,
    pub messages: BTreeMap<String, MessageView>,
    /// Compared only where no request's effect is in doubt (restarts without unknown requests).
    pub counters: BTreeMap<String, QueueCounters>,
}

impl Dump {
    /// Brings every queue of the backend's engine forward to `now_ms` (as any read would) and
    /// records it, after checking the engine's own invariants. Every message's body is read,
    /// from the log where the engine keeps only its location: none may be missing.
    pub fn of(backend: &Service, now_ms: u64) -> Dump {
        Dump::of_crashed(backend, now_ms, None)
    }

    /// [`Dump::of`] a backend whose log cannot read every body any more (its storage crashed
    /// under it, or the database is out of reach): a body the log cannot read is asked of
    /// `fallback` with the log's error (the simulation's other source: the rebooted storage, the
    /// bodies earlier dumps read while the database is out of reach), and named after the message where that has none ("lost ID"; see
    /// [`Dump::with_bodies_from`] for the messages that come back all the same).
    pub fn of_crashed(backend: &Service, now_ms: u64, fallback: Option<&BodyFallback<'_>>) -> Dump {
        let mut engine = backend.hosts().only().engine();
        engine.check_invariants();
        let names = engine.list_queues("");
        for name in &names {
            engine.queue_info(now_ms, name).expect("a listed queue");
        }
        engine.check_invariants();
        let mut dump = Dump {
            now_ms,
            ..Dump::default()
        };
        for name in names {
            let queue = engine.queue(&name).expect("a listed queue");
            let view = QueueView {
                id: queue.id,
                config: queue.config.clone(),
            };
            dump.queues.insert(name.to_string(), view);
            dump.counters
                .insert(name.to_string(), queue.counters.clone());
            for (seq, message) in queue.messages() {
                let view = MessageView {
                    queue: name.to_string(),
                    queue_id: queue.id,
                    seq,
                    id: message.id,
                    receive_count: message.receive_count,
                    state: message.state,
                    visible_at_ms: message.visible_at_ms,
                    sent_at_ms: message.sent_at_ms,
                    leased_at_ms: message.leased_at_ms,
                    first_received_at_ms: message.first_received_at_ms(),
                    attempts: message
                        .history
                        .iter()
                        .flat_map(|history| &history.attempts)
                        .map(|attempt| AttemptView {
                            received_at_ms: attempt.received_at_ms,
                            deadline_ms: attempt.deadline_ms,
                            extensions: attempt.extensions,
                            outcome: attempt.outcome,
                            user_agent: attempt.client.as_ref().map(|c| c.user_agent.clone()),
                        })
                        .collect(),
                };
                let body = match (backend.hosts().only().payload(&message.payload), fallback) {
                    (Ok(payload), _) => payload.body.clone(),
                    (Err(error), Some(fallback)) => fallback(&message.payload, message.id, &error)
                        .unwrap_or_else(|| format!("lost {}", message.id)),
                    // A send whose record the log lost when it was poisoned: the engine still
                    // has the message (it refuses every request now), no restart will.
                    (Err(error), None) if error.is_poisoned() => format!("lost {}", message.id),
                    (Err(error), None) => panic!("the body of {name}#{seq} is lost: {error}"),
                };
                let earlier = dump.messages.insert(body.clone(), view);
                assert!(earlier.is_none(), "body {body} is stored twice");
            }
        }
        dump
    }

    /// This dump of a crashed process with the bodies it could not read named after `earlier`:
    /// a message that `earlier` (the state before the crash) knew with body `b` keeps `b`.
    ///
    /// `of_crashed` names a message "lost ID" when its body is not in the rebooted storage at the
    /// location the crashed process had for it. That is not always a lost message: a checkpoint
    /// relocates live bodies of sparse segments by appending `Relocate` records, and a crash that
    /// drops those unsynced records leaves the body where it was, where recovery finds it (the
    /// segment is removed only by a later checkpoint, after the records are durable).
    pub fn with_bodies_from(mut self, earlier: &Dump) -> Dump {
        let known: BTreeMap<MessageId, &String> = earlier
            .messages
            .iter()
            .map(|(body, m)| (m.id, body))
            .collect();
        let lost: Vec<String> = self
            .messages
            .iter()
            .filter(|(body, m)| body.starts_with("lost ") && known.contains_key(&m.id))
            .map(|(body, _)| body.clone())
            .collect();
        for name in lost {
            let view = self.messages.remove(&name).expect("listed");
            let body = known[&view.id].clone();
            let earlier = self.messages.insert(body.clone(), view);
            assert!(earlier.is_none(), "body {body} is stored twice");
        }
        self
    }

    /// The message with this body, if it is in the queue with this id.
    fn in_queue(&self, body: &str, queue_id: u64) -> Option<&MessageView> {
        self.messages.get(body).filter(|m| m.queue_id == queue_id)
    }

    /// Whether `held` is the receipt of the message's current attempt.
    pub fn is_current(&self, held: &Held) -> bool {
        self.in_queue(&held.body, held.queue_id)
            .is_some_and(|m| m.receive_count == held.attempt)
    }
}

/// The differences between two dumps, one line each (for failure messages).
pub fn diff(expected: &Dump, actual: &Dump) -> String {
    let mut out = String::new();
    let names: BTreeSet<&String> = expected.queues.keys().chain(actual.queues.keys()).collect();
    for name in names {
        let (e, a) = (expected.queues.get(name), actual.queues.get(name));
        if e != a {
            let _ = writeln!(out, "  queue {name}: expected {e:?}\n    actual {a:?}");
        }
    }
    let bodies: BTreeSet<&String> = expected
        .messages
        .keys()
        .chain(actual.messages.keys())
        .collect();
    for body in bodies {
        let (e, a) = (expected.messages.get(body), actual.messages.get(body));
        if e != a {
            let _ = writeln!(out, "  {body}: expected {e:?}\n    actual {a:?}");
        }
    }
    out
}

fn assert_same(expected: &Dump, actual: &Dump, what: &str) {
    if expected.queues != actual.queues || expected.messages != actual.messages {
        panic!("{what}:\n{}", diff(expected, actual));
    }
}

/// What holds across the whole run, whatever crashed.
#[derive(Default)]
pub struct Ledger {
    /// The state after the last acknowledged request (or restart).
    pub acked: Dump,
    /// Every body a send carried, acknowledged or not.
    pub sent: BTreeSet<String>,
    /// Bodies that were in an acknowledged state and later were not.
    pub gone: BTreeSet<String>,
    /// The highest receive count seen in an acknowledged state, by body.
    pub receive_count_max: BTreeMap<String, u32>,
}

impl Ledger {
    /// Takes `dump` as the new acknowledged state, after checking it against the history.
    pub fn commit(&mut self, dump: Dump) {
        for (body, message) in &dump.messages {
            assert!(
                self.sent.contains(body),
                "{body} appeared but was never sent"
            );
            assert!(
                !self.gone.contains(body),
                "{body} came back after it was gone"
            );
            let max = self.receive_count_max.entry(body.clone()).or_default();
            assert!(
                message.receive_count >= *max,
                "{body}: receive count went down from {max} to {}",
                message.receive_count
            );
            *max = message.receive_count;
        }
        for body in self.acked.messages.keys() {
            if !dump.messages.contains_key(body) {
                self.gone.insert(body.clone());
                self.receive_count_max.remove(body);
            }
        }
        self.acked = dump;
    }
}

/// Whether a message that has been in its queue since `sent_at_ms` has outlived the retention
/// of `queue` at `now_ms`.
fn expired(queue: &QueueView, sent_at_ms: u64, now_ms: u64) -> bool {
    sent_at_ms + u64::from(queue.config.retention_seconds) * 1000 <= now_ms
}

fn state_at(visible_at_ms: u64, now_ms: u64, otherwise: MessageState) -> MessageState {
    if visible_at_ms <= now_ms {
        MessageState::Ready
    } else {
        otherwise
    }
}

/// Only time passed between `before` and `after`: retention removed messages, delays and leases
/// ended; nothing else changed.
pub fn check_time_passed(before: &Dump, after: &Dump) {
    let now = after.now_ms;
    let mut expected = before.clone();
    expected.now_ms = now;
    expected.messages.retain(|_, m| {
        let queue = &before.queues[&m.queue];
        !expired(queue, m.sent_at_ms, now)
    });
    for message in expected.messages.values_mut() {
        message.state = state_at(message.visible_at_ms, now, message.state);
    }
    assert_same(
        &expected,
        after,
        "time passed, and more changed than time explains",
    );
}

fn is_unknown(error: &SqsError) -> bool {
    error.code == leaseq_sqs::ErrorCode::ServiceUnavailable
}

/// Whether the request's outcome is unknown (it may or may not have happened, or partly).
pub fn outcome_unknown(result: &Result<Outcome, SqsError>) -> bool {
    matches!(result, Err(error) if is_unknown(error))
}

/// Checks an acknowledged answer (success or a definite error) against the states before and
/// after it: the answer and the change must agree, and nothing else may change.
pub fn check_request(before: &Dump, after: &Dump, request: &Request, result: &Outcome) {
    let now = after.now_ms;
    let mut expected = before.clone();
    expected.now_ms = now;
    // Messages a receive may have moved to its dead-letter queue: (body, queue it moved to).
    let mut may_move: Vec<(String, String)> = Vec::new();
    match (request, result) {
        (Request::CreateQueue { name, patch }, Outcome::QueueUrl(_)) => {
            if !before.queues.contains_key(*name) {
                let created = after
                    .queues
                    .get(*name)
                    .unwrap_or_else(|| panic!("created {name} is missing"));
                let config = QueueConfig::default()
                    .patched(patch, &Limits::default())
                    .expect("an accepted patch");
                assert_eq!(created.config, config, "{name}: settings as created");
                assert!(
                    before.queues.values().all(|q| q.id < created.id),
                    "queue ids are never reused"
                );
                expected.queues.insert(name.to_string(), created.clone());
            }
        }
        (Request::DeleteQueue { name }, Outcome::Empty) => {
            expected.queues.remove(*name);
            expected.messages.retain(|_, m| m.queue != *name);
        }
        (Request::SetAttributes { name, patch }, Outcome::Empty) => {
            let queue = expected.queues.get_mut(*name).expect("a queue that exists");
            queue.config = queue
                .config
                .patched(patch, &Limits::default())
                .expect("an accepted patch");
            let queue = queue.clone();
            expected
                .messages
                .retain(|_, m| m.queue != *name || !expired(&queue, m.sent_at_ms, now));
        }
        (Request::Purge { name }, Outcome::Empty) => {
            expected.messages.retain(|_, m| m.queue != *name);
        }
        (Request::Send { name, messages }, outcome) => {
            let sent: Vec<_> = match outcome {
                Outcome::Sent(sent) => vec![(0, sent)],
                Outcome::SentBatch(results) => results
                    .iter()
                    .enumerate()
                    .filter_map(|(i, (_, r))| r.as_ref().ok().map(|sent| (i, sent)))
                    .collect(),
                other => panic!("a send answered {other:?}"),
            };
            let queue = &before.queues[*name];
            for (i, sent) in sent {
                let (body, delay_seconds) = &messages[i];
                let delay_ms =
                    u64::from(delay_seconds.unwrap_or(queue.config.delay_seconds)) * 1000;
                let stored = after
                    .messages
                    .get(body)
                    .unwrap_or_else(|| panic!("acknowledged send of {body} is missing"));
                let view = MessageView {
                    queue: name.to_string(),
                    queue_id: queue.id,
                    seq: sent.seq,
                    id: sent.message_id,
                    receive_count: 0,
                    state: state_at(now + delay_ms, now, MessageState::Delayed),
                    visible_at_ms: now + delay_ms,
                    sent_at_ms: now,
                    leased_at_ms: stored.leased_at_ms,
                    first_received_at_ms: None,
                    attempts: Vec::new(),
                };
                expected.messages.insert(body.clone(), view);
            }
        }
        (Request::Receive { name, .. }, Outcome::Received { deliveries, .. }) => {
            for delivery in deliveries {
                let body = &delivery.payload.body;
                let message = expected
                    .messages
                    .get_mut(body)
                    .unwrap_or_else(|| panic!("received {body}, which was not there"));
                assert_eq!(message.queue, *name, "{body} received from another queue");
                assert_eq!(message.state, MessageState::Ready, "{body} was not ready");
                assert_eq!(message.id, delivery.message_id, "{body}: message id");
                message.receive_count += 1;
                assert_eq!(
                    message.receive_count, delivery.receive_count,
                    "{body}: the attempt answered"
                );
                message.visible_at_ms = delivery.visible_at_ms;
                message.state = state_at(delivery.visible_at_ms, now, MessageState::InFlight);
                message.leased_at_ms = now;
                message.first_received_at_ms = message.first_received_at_ms.or(Some(now));
                if let Some(last) = message.attempts.last_mut() {
                    if last.outcome == AttemptOutcome::Leased {
                        last.outcome = AttemptOutcome::Expired;
                    }
                }
                message.attempts.push(AttemptView {
                    received_at_ms: now,
                    deadline_ms: delivery.visible_at_ms,
                    extensions: 0,
                    outcome: AttemptOutcome::Leased,
                    user_agent: Some(super::workload::USER_AGENT.to_string()),
                });
                let kept = Limits::default().attempt_history_max;
                let excess = message.attempts.len().saturating_sub(kept);
                message.attempts.drain(..excess);
            }
            if let Some(policy) = &before.queues[*name].config.redrive_policy {
                if before.queues.contains_key(&policy.dead_letter_queue) {
                    for (body, message) in &before.messages {
                        if message.queue == *name
                            && message.state == MessageState::Ready
                            && message.receive_count >= policy.max_receive_count
                        {
                            may_move.push((body.clone(), policy.dead_letter_queue.clone()));
                        }
                    }
                }
            }
        }
        (Request::Delete { held, .. }, outcome) => {
            let results: Vec<bool> = match outcome {
                Outcome::Empty => vec![true],
                Outcome::Batch(results) => results.iter().map(|(_, r)| r.is_ok()).collect(),
                other => panic!("a delete answered {other:?}"),
            };
            for (held, ok) in held.iter().zip(results) {
                let current = before.is_current(held);
                assert!(
                    ok || !current,
                    "the current receipt of {} (attempt {}) failed to delete",
                    held.body,
                    held.attempt
                );
                if current {
                    expected.messages.remove(&held.body);
                }
            }
        }
        (Request::ChangeVisibility { held, seconds }, Outcome::Empty) => {
            assert!(
                before.is_current(held),
                "a visibility change of {} succeeded with a receipt that is not current",
                held.body
            );
            let message = expected.messages.get_mut(&held.body).expect("current");
            message.visible_at_ms = now + u64::from(*seconds) * 1000;
            message.state = state_at(message.visible_at_ms, now, MessageState::InFlight);
            let attempt = message.attempts.last_mut().expect("a received message");
            if *seconds == 0 {
                attempt.outcome = AttemptOutcome::Released;
                attempt.deadline_ms = now;
            } else {
                attempt.outcome = AttemptOutcome::Leased;
                attempt.deadline_ms = message.visible_at_ms;
                attempt.extensions += 1;
            }
        }
        (request, outcome) => panic!("{request:?} answered {outcome:?}"),
    }
    for (body, dead_letter_queue) in may_move {
        let Some(moved) = after.messages.get(&body) else {
            // Moved, and the dead-letter queue's shorter retention (counted from the first
            // enqueue) had already ended.
            let queue = &before.queues[&dead_letter_queue];
            assert!(
                expired(queue, before.messages[&body].sent_at_ms, now),
                "{body} vanished in a receive"
            );
            expected.messages.remove(&body);
            continue;
        };
        if moved.queue == dead_letter_queue {
            let original = &before.messages[&body];
            assert_eq!(
                (moved.id, moved.receive_count, moved.sent_at_ms),
                (original.id, original.receive_count, original.sent_at_ms),
                "{body}: a dead-letter move keeps id, receive count and enqueue time"
            );
            expected.messages.insert(body, moved.clone());
        }
    }
    assert_same(&expected, after, &format!("after {request:?}"));
}

/// A refused request (a definite error) changes nothing.
pub fn check_refused(before: &Dump, after: &Dump, request: &Request, error: &SqsError) {
    if let Request::ChangeVisibility { held, .. } = request {
        assert!(
            !before.is_current(held),
            "the current receipt of {} failed to change visibility: {error}",
            held.body
        );
    }
    assert_same(
        before,
        after,
        &format!("{request:?} failed ({error}) but changed"),
    );
}

/// What a restart may find, besides the acknowledged state.
pub struct Window {
    /// The acknowledged state, then the live state after each request whose outcome is
    /// unknown, in order. For concurrent requests only the first and the last are known.
    pub states: Vec<Dump>,
    /// Bodies whose state an acknowledged request of a concurrent volley made, with the index
    /// of the state it made: they must come back in that state or a later one (the file log's
    /// simulation restarts right after the volley, so that is the last state; the PostgreSQL
    /// log's may go on, and later requests of unknown outcome may change them again).
    pub acknowledged_bodies: BTreeMap<String, usize>,
}

impl Window {
    pub fn new(acked: &Dump) -> Window {
        Window {
            states: vec![acked.clone()],
            acknowledged_bodies: BTreeMap::new(),
        }
    }

    pub fn is_open(&self) -> bool {
        self.states.len() > 1
    }
}

/// Checks the state a restart recovered. Each record touches one message, and the log keeps a
/// prefix of its records, so each message must be in one of the states the window went through;
/// without unknown requests that is exactly the acknowledged state (counters included).
pub fn check_recovery(window: &Window, recovered: &Dump) {
    let acked = &window.states[0];
    if !window.is_open() {
        assert_same(
            acked,
            recovered,
            "the restart lost or changed acknowledged state",
        );
        for (name, counters) in &acked.counters {
            assert_eq!(
                Some(counters),
                recovered.counters.get(name),
                "{name}: counters after the restart"
            );
        }
        return;
    }
    let names: BTreeSet<&String> = window
        .states
        .iter()
        .chain([recovered])
        .flat_map(|d| d.queues.keys())
        .collect();
    for name in names {
        let found = recovered.queues.get(name);
        assert!(
            window.states.iter().any(|d| d.queues.get(name) == found),
            "queue {name} came back as {found:?}, a state no request left"
        );
    }
    let bodies: BTreeSet<&String> = window
        .states
        .iter()
        .chain([recovered])
        .flat_map(|d| d.messages.keys())
        .collect();
    for body in bodies {
        let found = recovered.messages.get(body);
        if let Some(&made) = window.acknowledged_bodies.get(body) {
            assert!(
                window.states[made..]
                    .iter()
                    .any(|d| d.messages.get(body) == found),
                "{body}: an acknowledged request's effect did not survive: found {found:?}, \
                 acknowledged {:?}",
                window.states[made].messages.get(body)
            );
        }
        if !window.states.iter().any(|d| d.messages.get(body) == found) {
            let mut seen = String::new();
            for (i, d) in window.states.iter().enumerate() {
                let _ = writeln!(seen, "    state {i}: {:?}", d.messages.get(body));
            }
            panic!(
                "{body} came back as {found:?}, a state no request left; acknowledged first:\n{seen}"
            );
        }
    }
}
