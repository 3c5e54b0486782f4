//! A history checker of our own, in the manner of Jepsen's: clients record every operation they
//! invoke against leaseq (one node today, several nodes of a cluster later) with when it was
//! invoked, when it completed and what came of it, and [`check`] decides afterwards whether any
//! resolution of the history is consistent with leaseq's lease rules (`docs/design/leases.md`).
//!
//! **Recording.** A [`History`] is a cheap-to-clone, thread-safe log of [`Event`]s. A client
//! calls [`History::invoke`] just before it sends a request and one of [`History::ok`],
//! [`History::failed`] or [`History::unknown`] once it knows the outcome:
//! - `ok`: the server answered success, with what it answered ([`Reply`]);
//! - `failed`: the server answered an error that SQS defines as having had no effect (a 4xx);
//! - `unknown`: a timeout, a broken connection, a 5xx or `ServiceUnavailable`: the operation may
//!   or may not have taken effect, at any moment from its invocation on (even after the client
//!   gave up). An operation never completed counts as unknown too.
//!
//! Times are microseconds of one monotonic clock (the history's), so every client of one
//! process shares them. Messages are followed by a **tag**, the message's body, which the
//! workload makes unique per send; receipts name their attempt through the delivery that
//! handed them out. The workload must not use move tasks (a redriven message is a new message
//! with the same body), FIFO receive request attempt ids, retention shorter than the run, or
//! the same deduplication id twice.
//!
//! **Observing.** The history ends with one [`Op::Observe`] per queue (dead-letter queues
//! included): the complete listing of the messages in the queue, in every state (leaseq's
//! `LeaseqPeekMessages` lists ready, in-flight and delayed messages without leasing them), and
//! optionally the queue's counts as `GetQueueAttributes` gave them.
//!
//! **Checking.** [`check`] fails only when the history proves a violation under every possible
//! resolution of its unknown operations: an unknown send may or may not have sent, an unknown
//! receive may have leased any message of its queue (its receipts are unknown, so nothing ever
//! acts on them), an unknown delete or visibility change may have acted at any time after its
//! invocation. Server clocks and client instants differ by up to [`Config::clock_slack_ms`],
//! which every lease comparison grants the server. The checks are listed on
//! [`ViolationKind`]; `check.rs` says how each treats unknown outcomes.

mod check;
#[cfg(test)]
mod tests;

use std::collections::BTreeMap;
use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::Instant;

pub use check::{check, check_events, Summary, Violation, ViolationKind};

/// The index of an event in its history, which is also its id in violation texts.
pub type OpId = usize;

/// What a client asked for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Op {
    /// `SendMessage` of the message whose body is `tag`.
    Send {
        /// The queue's name.
        queue: String,
        /// The message's body, unique in the history.
        tag: String,
        /// `MessageGroupId` (FIFO queues).
        group: Option<String>,
        /// `MessageDeduplicationId` (FIFO queues).
        deduplication: Option<String>,
    },
    /// `ReceiveMessage`.
    Receive {
        /// The queue's name.
        queue: String,
        /// `VisibilityTimeout`; `None` leaves the queue's (the checker's [`QueueSpec`]).
        visibility_timeout_ms: Option<u64>,
    },
    /// `DeleteMessage` with a receipt that a delivery of this history handed out.
    Delete {
        /// The queue's name.
        queue: String,
        /// The `ReceiptHandle`.
        receipt: String,
    },
    /// `ChangeMessageVisibility` with a receipt that a delivery of this history handed out.
    ChangeVisibility {
        /// The queue's name.
        queue: String,
        /// The `ReceiptHandle`.
        receipt: String,
        /// The new `VisibilityTimeout`, counted from when the server applies it.
        timeout_ms: u64,
    },
    /// The final listing of a queue, taken after every other operation completed.
    Observe {
        /// The queue's name.
        queue: String,
    },
}

impl Op {
    /// The queue the operation addressed.
    pub fn queue(&self) -> &str {
        match self {
            Op::Send { queue, .. }
            | Op::Receive { queue, .. }
            | Op::Delete { queue, .. }
            | Op::ChangeVisibility { queue, .. }
            | Op::Observe { queue } => queue,
        }
    }

    fn name(&self) -> &'static str {
        match self {
            Op::Send { .. } => "send",
            Op::Receive { .. } => "receive",
            Op::Delete { .. } => "delete",
            Op::ChangeVisibility { .. } => "change-visibility",
            Op::Observe { .. } => "observe",
        }
    }
}

/// One message as a receive handed it out.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Delivery {
    /// The body.
    pub tag: String,
    /// The `ReceiptHandle`: the identity of this attempt.
    pub receipt: String,
    /// `ApproximateReceiveCount`: this attempt's number.
    pub receive_count: u32,
    /// `MessageGroupId`, on FIFO queues.
    pub group: Option<String>,
}

/// One message as an observation listed it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Observed {
    /// The body.
    pub tag: String,
    /// `ApproximateReceiveCount`.
    pub receive_count: u32,
    /// `MessageGroupId`, on FIFO queues.
    pub group: Option<String>,
}

/// A queue's counts as `GetQueueAttributes` answered them (leaseq's are exact).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Counts {
    /// `ApproximateNumberOfMessages`.
    pub visible: u64,
    /// `ApproximateNumberOfMessagesNotVisible`.
    pub in_flight: u64,
    /// `ApproximateNumberOfMessagesDelayed`.
    pub delayed: u64,
}

/// The final state of one queue.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Observation {
    /// Every message in the queue, in any state.
    pub messages: Vec<Observed>,
    /// The queue's counts, taken while nothing else ran.
    pub counts: Option<Counts>,
}

/// What a successful operation answered.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reply {
    /// A send or a visibility change or a delete succeeded (nothing to keep).
    Done,
    /// A receive's messages, in the order of the answer.
    Received(Vec<Delivery>),
    /// An observation's listing.
    Observed(Observation),
}

/// What came of an operation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Not completed (yet): as `Unknown`.
    Pending,
    /// The server answered success.
    Ok(Reply),
    /// The server answered an error that means the operation had no effect.
    Failed(String),
    /// It may or may not have taken effect, at any time after its invocation.
    Unknown(String),
}

/// One operation of a history.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Event {
    /// Its index in the history.
    pub id: OpId,
    /// The client (process, connection) that ran it; a client runs one operation at a time.
    pub process: u32,
    /// When it was invoked, µs of the history's clock.
    pub invoke_us: u64,
    /// When its outcome was known (`None` while pending).
    pub complete_us: Option<u64>,
    /// What was asked.
    pub op: Op,
    /// What came of it.
    pub outcome: Outcome,
}

impl Event {
    /// Whether the server answered success.
    pub fn is_ok(&self) -> bool {
        matches!(self.outcome, Outcome::Ok(_))
    }

    /// Whether it may have taken effect (anything but `Failed`).
    pub fn may_have_happened(&self) -> bool {
        !matches!(self.outcome, Outcome::Failed(_))
    }

    /// Whether it may have taken effect without the history knowing how (`Unknown`, `Pending`).
    pub fn is_indefinite(&self) -> bool {
        matches!(self.outcome, Outcome::Unknown(_) | Outcome::Pending)
    }

    /// The latest moment its effect can have happened: its completion if the server answered,
    /// otherwise never bounded.
    pub fn effect_by_us(&self) -> u64 {
        match (&self.outcome, self.complete_us) {
            (Outcome::Ok(_) | Outcome::Failed(_), Some(at)) => at,
            _ => u64::MAX,
        }
    }

    /// The completion used for "completed before": unknown and pending events never complete.
    fn completed_us(&self) -> u64 {
        self.effect_by_us()
    }
}

impl fmt::Display for Event {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let outcome = match &self.outcome {
            Outcome::Pending => "pending".to_string(),
            Outcome::Ok(_) => "ok".to_string(),
            Outcome::Failed(reason) => format!("failed: {reason}"),
            Outcome::Unknown(reason) => format!("unknown: {reason}"),
        };
        let complete = self
            .complete_us
            .map_or_else(|| "…".to_string(), |at| format!("{:.3}", at as f64 / 1e3));
        write!(
            f,
            "op #{} (process {}, {} {}, {:.3}–{complete} ms, {outcome})",
            self.id,
            self.process,
            self.op.name(),
            self.op.queue(),
            self.invoke_us as f64 / 1e3,
        )
    }
}

struct Shared {
    start: Instant,
    events: Mutex<Vec<Event>>,
}

/// A thread-safe recorder of operations; clones share one log.
#[derive(Clone)]
pub struct History {
    shared: Arc<Shared>,
}

impl Default for History {
    fn default() -> History {
        History::new()
    }
}

impl History {
    /// An empty history whose clock starts now.
    pub fn new() -> History {
        History::from_events(Vec::new())
    }

    /// A history of events built by hand (their ids must be their indexes).
    pub fn from_events(events: Vec<Event>) -> History {
        History {
            shared: Arc::new(Shared {
                start: Instant::now(),
                events: Mutex::new(events),
            }),
        }
    }

    /// Microseconds since the history's start.
    pub fn now_us(&self) -> u64 {
        self.shared.start.elapsed().as_micros() as u64
    }

    fn events_mut(&self) -> std::sync::MutexGuard<'_, Vec<Event>> {
        // A panicking client leaves a consistent log behind (every push is whole).
        self.shared
            .events
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Records that `process` invokes `op` now; its outcome follows with the returned id.
    pub fn invoke(&self, process: u32, op: Op) -> OpId {
        let mut events = self.events_mut();
        let id = events.len();
        // Read under the lock, so ids and invocation times are in the same order.
        let invoke_us = self.now_us();
        events.push(Event {
            id,
            process,
            invoke_us,
            complete_us: None,
            op,
            outcome: Outcome::Pending,
        });
        id
    }

    fn complete(&self, id: OpId, outcome: Outcome) {
        let mut events = self.events_mut();
        let complete_us = self.now_us();
        let event = &mut events[id];
        assert!(
            event.outcome == Outcome::Pending,
            "op #{id} completed twice"
        );
        event.complete_us = Some(complete_us);
        event.outcome = outcome;
    }

    /// Records that operation `id` succeeded with `reply`.
    pub fn ok(&self, id: OpId, reply: Reply) {
        self.complete(id, Outcome::Ok(reply));
    }

    /// Records that operation `id` was refused with no effect.
    pub fn failed(&self, id: OpId, reason: impl Into<String>) {
        self.complete(id, Outcome::Failed(reason.into()));
    }

    /// Records that the outcome of operation `id` is unknown.
    pub fn unknown(&self, id: OpId, reason: impl Into<String>) {
        self.complete(id, Outcome::Unknown(reason.into()));
    }

    /// A copy of the events so far.
    pub fn events(&self) -> Vec<Event> {
        self.events_mut().clone()
    }

    /// The number of events so far.
    pub fn len(&self) -> usize {
        self.events_mut().len()
    }

    /// Whether nothing was recorded.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// What stale receipts do on the server under check (`docs/design/leases.md`, "Stale deletes").
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum StaleDeletes {
    /// leaseq's default: a delete with a superseded receipt succeeds and deletes nothing.
    #[default]
    SucceedWithoutEffect,
    /// `--reject-stale-deletes`: it fails (`InvalidParameterValue`).
    Rejected,
}

/// A queue's dead-letter setting (`RedrivePolicy`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Redrive {
    /// The dead-letter queue's name.
    pub dead_letter_queue: String,
    /// `maxReceiveCount`.
    pub max_receive_count: u32,
}

/// What the checker must know of a queue.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QueueSpec {
    /// A FIFO queue (message groups).
    pub fifo: bool,
    /// The queue's `VisibilityTimeout`, for receives that name none.
    pub visibility_timeout_ms: u64,
    /// Its dead-letter queue, if any (which must exist).
    pub redrive: Option<Redrive>,
}

impl QueueSpec {
    /// A standard queue with this default visibility timeout.
    pub fn standard(visibility_timeout_ms: u64) -> QueueSpec {
        QueueSpec {
            fifo: false,
            visibility_timeout_ms,
            redrive: None,
        }
    }

    /// A FIFO queue with this default visibility timeout.
    pub fn fifo(visibility_timeout_ms: u64) -> QueueSpec {
        QueueSpec {
            fifo: true,
            ..QueueSpec::standard(visibility_timeout_ms)
        }
    }

    /// With a dead-letter queue after `max_receive_count` receives.
    pub fn with_redrive(mut self, dead_letter_queue: &str, max_receive_count: u32) -> QueueSpec {
        self.redrive = Some(Redrive {
            dead_letter_queue: dead_letter_queue.to_string(),
            max_receive_count,
        });
        self
    }
}

/// What the checker assumes of the server and its clocks.
#[derive(Clone, Debug)]
pub struct Config {
    /// How far the server's lease clock may be off the history's clock, granted to the server
    /// in every lease comparison (so only certain overlaps count).
    pub clock_slack_ms: u64,
    /// The queues; one not listed is a standard queue with SQS's 30 s visibility timeout.
    pub queues: BTreeMap<String, QueueSpec>,
    /// What stale deletes do.
    pub stale_deletes: StaleDeletes,
    /// An unknown operation took effect, if at all, by its completion plus this: a bound the
    /// system under test guarantees (say, a request deadline after which a node drops the
    /// request). `None`: never bounded, the safe default.
    pub unknown_effect_bound_ms: Option<u64>,
}

impl Default for Config {
    fn default() -> Config {
        Config {
            clock_slack_ms: 50,
            queues: BTreeMap::new(),
            stale_deletes: StaleDeletes::default(),
            unknown_effect_bound_ms: None,
        }
    }
}

impl Config {
    /// With queue `name` described by `spec`.
    pub fn queue(mut self, name: &str, spec: QueueSpec) -> Config {
        self.queues.insert(name.to_string(), spec);
        self
    }

    fn spec(&self, queue: &str) -> QueueSpec {
        self.queues
            .get(queue)
            .cloned()
            .unwrap_or_else(|| QueueSpec::standard(30_000))
    }
}
