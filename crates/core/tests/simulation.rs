//! A seeded, model-based simulation of the lease engine.
//!
//! Each run draws random operations (send, receive, delete, change visibility, purge, settings,
//! queue create/delete) and random clock jumps from a seeded PRNG, issues them to the [`Engine`]
//! on behalf of a few simulated consumers, and issues the same operations to [`Model`]: a tiny,
//! slow, obviously correct reference (a `Vec` of messages per queue, O(n) everything). After
//! every step it checks that the two agree exactly (answers, errors, counts, counters and every
//! message's fields) and that the engine's own invariants hold, plus these properties, checked
//! without the model's help:
//!
//! - a message is never leased to two receivers at once (no two receipts held by consumers carry
//!   a lease deadline in the future for the same message id);
//! - a message that was deleted, purged, expired or dropped with its queue never comes back;
//! - a superseded receipt never changes the newer attempt (its deadline and count stay);
//! - a message reaches the dead-letter queue after exactly `maxReceiveCount` receives;
//! - an operation that fails journals nothing, and journaled times never go backwards;
//! - at checkpoints, replaying the journal into a fresh engine gives the same queues.
//!
//! `cargo test` runs a fixed set of seeds. Longer runs: `LEASEQ_SIM_SEEDS=N` (seeds 0..N),
//! `LEASEQ_SIM_STEPS=N` (steps per seed), `LEASEQ_SIM_SEED=x` (one seed, to reproduce a failure;
//! the failure message names the seed and step).

use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::fmt::Write as _;
use std::sync::Arc;

use leaseq_core::{
    DeleteOutcome, Delivery, Engine, EngineConfig, Error, Field, Limits, Location, MessageId,
    MessageState, Payload, PayloadRef, QueueConfigPatch, QueueCounters, Receipt, ReceiptKey,
    ReceiveRequest, Record, RedrivePolicy, SendInput,
};
use leaseq_testkit::sim::{Progress, Seeds};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

const SEEDS_DEFAULT: u64 = 32;
const STEPS_DEFAULT: usize = 2_000;
const CHECKPOINT_EVERY_STEPS: usize = 500;
const CONSUMERS: usize = 6;
const HELD_RECEIPTS_MAX: usize = 16;
const TRACE_LEN: usize = 30;
const IN_FLIGHT_MAX: usize = 12;
const VISIBILITY_MAX_S: u32 = 43_200;
const START_MS: u64 = 1_700_000_000_000;

const MAIN: &str = "main";
const DLQ: &str = "dead";
const OTHER: &str = "other";
const SCRATCH: &str = "scratch";
const QUEUES: [&str; 4] = [MAIN, DLQ, OTHER, SCRATCH];

/// The seeds and steps of this run: `LEASEQ_SIM_SEEDS`, `LEASEQ_SIM_STEPS`, `LEASEQ_SIM_SEED`.
fn seeds() -> Seeds {
    Seeds::from_env(
        "LEASEQ_SIM",
        env!("CARGO_PKG_NAME"),
        env!("CARGO_CRATE_NAME"),
        SEEDS_DEFAULT,
        STEPS_DEFAULT,
    )
}

#[test]
fn simulation() {
    let seeds = seeds();
    seeds.tally(|seed| run_seed(&seeds, seed));
}

/// Runs one seed and returns how often each outcome occurred; on failure, panics with the
/// seed, the step and the last operations.
fn run_seed(seeds: &Seeds, seed: u64) -> BTreeMap<String, u64> {
    let mut sim = Sim::new(seed);
    seeds.check(
        "simulation",
        seed,
        &mut sim,
        |sim, steps| sim.run(steps),
        |sim| Progress {
            step: sim.step,
            last_operations: sim.trace.iter().cloned().collect(),
        },
    );
    let mut tally = sim.tally.into_inner();
    for name in QUEUES {
        if let Some(queue) = sim.engine.queue(name) {
            let counters = &queue.counters;
            for (what, count) in [
                ("dead lettered", counters.dead_lettered),
                ("leases expired", counters.leases_expired),
                ("retention expired", counters.retention_expired),
                ("deleted late", counters.deleted_late),
                ("purged", counters.purged),
            ] {
                *tally.entry(format!("{name}: {what}")).or_default() += count;
            }
        }
    }
    tally
}

// ----- the reference model -----------------------------------------------------------------

/// One message as the model (and, for comparison, the engine) sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
struct MessageView {
    seq: u64,
    id: MessageId,
    body: String,
    sent_at_ms: u64,
    visible_at_ms: u64,
    leased_at_ms: u64,
    first_received_at_ms: Option<u64>,
    receive_count: u32,
    state: MessageState,
    dead_letter_source: Option<String>,
}

#[derive(Clone, Debug)]
struct ModelQueue {
    queue_id: u64,
    next_seq: u64,
    visibility_s: u32,
    retention_s: u32,
    delay_s: u32,
    /// (dead-letter queue name, maxReceiveCount)
    redrive: Option<(String, u32)>,
    last_purge_at_ms: Option<u64>,
    messages: Vec<MessageView>,
    counters: QueueCounters,
}

impl ModelQueue {
    fn count(&self, state: MessageState) -> usize {
        self.messages.iter().filter(|m| m.state == state).count()
    }

    fn position(&self, seq: u64) -> Option<usize> {
        self.messages.iter().position(|m| m.seq == seq)
    }
}

/// A receipt as the model understands it: what the engine sealed, or something it never issued.
#[derive(Clone, Debug)]
enum ReceiptRef {
    Sealed {
        queue_id: u64,
        seq: u64,
        attempt: u32,
    },
    Garbage,
}

/// The reference: every queue a `Vec` of messages, every operation a linear scan.
struct Model {
    queues: BTreeMap<String, ModelQueue>,
    next_queue_id: u64,
    clock_ms: u64,
    reject_stale_deletes: bool,
    /// Ids of messages that left the system for good.
    gone: Vec<MessageId>,
    /// When each deleted queue's name was deleted (SQS: unusable for 60 s).
    deleted_at_ms: BTreeMap<String, u64>,
}

/// An out-of-range error about `field`; [`same_error`] compares only the field.
fn invalid(field: Field) -> Error {
    Error::out_of_range(field, 0u32, 0u32, 0u32)
}

impl Model {
    fn new(reject_stale_deletes: bool) -> Model {
        Model {
            queues: BTreeMap::new(),
            next_queue_id: 1,
            clock_ms: 0,
            reject_stale_deletes,
            gone: Vec::new(),
            deleted_at_ms: BTreeMap::new(),
        }
    }

    /// Moves time forward (never back) and applies what time alone does, to every queue.
    fn advance(&mut self, now_ms: u64) -> u64 {
        self.clock_ms = self.clock_ms.max(now_ms);
        let now_ms = self.clock_ms;
        for queue in self.queues.values_mut() {
            for message in &mut queue.messages {
                if message.state != MessageState::Ready && message.visible_at_ms <= now_ms {
                    // A lease outlived by the message's retention did not run out: the message
                    // was gone first.
                    let retained_until_ms =
                        message.sent_at_ms + u64::from(queue.retention_s) * 1000;
                    if message.state == MessageState::InFlight
                        && retained_until_ms >= message.visible_at_ms
                    {
                        queue.counters.leases_expired += 1;
                    }
                    message.state = MessageState::Ready;
                }
            }
            let retention_ms = u64::from(queue.retention_s) * 1000;
            let before = queue.messages.len();
            let gone = &mut self.gone;
            queue.messages.retain(|m| {
                let keep = m.sent_at_ms + retention_ms > now_ms;
                if !keep {
                    gone.push(m.id);
                }
                keep
            });
            queue.counters.retention_expired += (before - queue.messages.len()) as u64;
        }
        now_ms
    }

    fn queue(&mut self, name: &str) -> Result<&mut ModelQueue, Error> {
        self.queues.get_mut(name).ok_or(Error::QueueDoesNotExist)
    }

    fn create_queue(
        &mut self,
        now_ms: u64,
        name: &str,
        visibility_s: Option<u32>,
    ) -> Result<(u64, bool), Error> {
        self.advance(now_ms);
        if let Some(queue) = self.queues.get(name) {
            return match visibility_s {
                Some(v) if v != queue.visibility_s => Err(Error::QueueAlreadyExists(String::new())),
                _ => Ok((queue.queue_id, false)),
            };
        }
        if self
            .deleted_at_ms
            .get(name)
            .is_some_and(|&at_ms| self.clock_ms < at_ms + 60_000)
        {
            return Err(Error::QueueDeletedRecently);
        }
        let queue_id = self.next_queue_id;
        self.next_queue_id += 1;
        let queue = ModelQueue {
            queue_id,
            next_seq: 1,
            visibility_s: visibility_s.unwrap_or(30),
            retention_s: 345_600,
            delay_s: 0,
            redrive: None,
            last_purge_at_ms: None,
            messages: Vec::new(),
            counters: QueueCounters::default(),
        };
        self.queues.insert(name.to_string(), queue);
        Ok((queue_id, true))
    }

    fn delete_queue(&mut self, now_ms: u64, name: &str) -> Result<(), Error> {
        self.advance(now_ms);
        let queue = self.queues.remove(name).ok_or(Error::QueueDoesNotExist)?;
        self.gone.extend(queue.messages.iter().map(|m| m.id));
        self.deleted_at_ms.insert(name.to_string(), self.clock_ms);
        Ok(())
    }

    fn set_config(
        &mut self,
        now_ms: u64,
        name: &str,
        visibility_s: Option<u32>,
        retention_s: Option<u32>,
        delay_s: Option<u32>,
    ) -> Result<(), Error> {
        self.advance(now_ms);
        let queue = self.queue(name)?;
        if visibility_s.is_some_and(|v| v > VISIBILITY_MAX_S) {
            return Err(invalid(Field::VisibilityTimeout));
        }
        if retention_s.is_some_and(|r| !(60..=1_209_600).contains(&r)) {
            return Err(invalid(Field::MessageRetentionPeriod));
        }
        if delay_s.is_some_and(|d| d > 900) {
            return Err(invalid(Field::DelaySeconds));
        }
        queue.visibility_s = visibility_s.unwrap_or(queue.visibility_s);
        queue.retention_s = retention_s.unwrap_or(queue.retention_s);
        queue.delay_s = delay_s.unwrap_or(queue.delay_s);
        Ok(())
    }

    fn purge(&mut self, now_ms: u64, name: &str) -> Result<(), Error> {
        let now_ms = self.advance(now_ms);
        let queue = self.queues.get_mut(name).ok_or(Error::QueueDoesNotExist)?;
        if queue
            .last_purge_at_ms
            .is_some_and(|last| now_ms < last + 60_000)
        {
            return Err(Error::PurgeInProgress);
        }
        queue.last_purge_at_ms = Some(now_ms);
        queue.counters.purged += queue.messages.len() as u64;
        self.gone.extend(queue.messages.drain(..).map(|m| m.id));
        Ok(())
    }

    fn send(
        &mut self,
        now_ms: u64,
        name: &str,
        id: MessageId,
        body: &str,
        delay_s: Option<u32>,
    ) -> Result<u64, Error> {
        let now_ms = self.advance(now_ms);
        let queue = self.queue(name)?;
        if body.is_empty() {
            return Err(Error::Missing(Field::MessageBody));
        }
        if delay_s.is_some_and(|d| d > 900) {
            return Err(invalid(Field::MessageDelaySeconds));
        }
        let visible_at_ms = now_ms + u64::from(delay_s.unwrap_or(queue.delay_s)) * 1000;
        let seq = queue.next_seq;
        queue.next_seq += 1;
        queue.counters.sent += 1;
        queue.messages.push(MessageView {
            seq,
            id,
            body: body.to_string(),
            sent_at_ms: now_ms,
            visible_at_ms,
            leased_at_ms: 0,
            first_received_at_ms: None,
            receive_count: 0,
            state: if visible_at_ms > now_ms {
                MessageState::Delayed
            } else {
                MessageState::Ready
            },
            dead_letter_source: None,
        });
        Ok(seq)
    }

    /// The messages a receive delivers, as they are right after it.
    fn receive(
        &mut self,
        now_ms: u64,
        name: &str,
        max_messages: usize,
        visibility_s: Option<u32>,
    ) -> Result<Vec<MessageView>, Error> {
        if max_messages == 0 || max_messages > 10 {
            return Err(invalid(Field::MaxNumberOfMessages));
        }
        if visibility_s.is_some_and(|v| v > VISIBILITY_MAX_S) {
            return Err(invalid(Field::LeaseVisibilityTimeout));
        }
        let now_ms = self.advance(now_ms);
        let queue = self.queue(name)?;
        let in_flight = queue.count(MessageState::InFlight);
        if in_flight >= IN_FLIGHT_MAX {
            return Err(Error::OverLimit {
                in_flight_max: IN_FLIGHT_MAX,
            });
        }
        let wanted = max_messages.min(IN_FLIGHT_MAX - in_flight);
        let visibility_ms = u64::from(visibility_s.unwrap_or(queue.visibility_s)) * 1000;
        let dead_letter = queue
            .redrive
            .clone()
            .filter(|(target, _)| target != name && self.queues.contains_key(target));
        let queue = &self.queues[name];
        let mut candidates: Vec<(u64, u64)> = queue
            .messages
            .iter()
            .filter(|m| m.state == MessageState::Ready)
            .map(|m| (m.sent_at_ms, m.seq))
            .collect();
        candidates.sort();
        let mut delivered = Vec::new();
        for (_, seq) in candidates {
            if delivered.len() == wanted {
                break;
            }
            let queue = self.queues.get_mut(name).expect("exists");
            let index = queue.position(seq).expect("candidate exists");
            if let Some((target, max_receive_count)) = &dead_letter {
                if queue.messages[index].receive_count >= *max_receive_count {
                    let mut message = queue.messages.remove(index);
                    queue.counters.dead_lettered += 1;
                    let target = self.queues.get_mut(target).expect("target exists");
                    message.seq = target.next_seq;
                    target.next_seq += 1;
                    message.state = MessageState::Ready;
                    message.visible_at_ms = now_ms;
                    message.dead_letter_source = Some(name.to_string());
                    target.messages.push(message);
                    continue;
                }
            }
            let message = &mut queue.messages[index];
            message.receive_count += 1;
            message.leased_at_ms = now_ms;
            message.first_received_at_ms.get_or_insert(now_ms);
            message.visible_at_ms = now_ms + visibility_ms;
            if visibility_ms > 0 {
                message.state = MessageState::InFlight;
            }
            queue.counters.received += 1;
            delivered.push(message.clone());
        }
        Ok(delivered)
    }

    /// Finds the message a sealed receipt names, after the checks every receipt goes through.
    fn open(
        &mut self,
        now_ms: u64,
        name: &str,
        receipt: &ReceiptRef,
    ) -> Result<(u64, u64, u32), Error> {
        let now_ms = self.advance(now_ms);
        let queue = self.queue(name)?;
        match *receipt {
            ReceiptRef::Sealed {
                queue_id,
                seq,
                attempt,
            } if queue_id == queue.queue_id => Ok((now_ms, seq, attempt)),
            _ => Err(Error::ReceiptHandleIsInvalid),
        }
    }

    fn delete(
        &mut self,
        now_ms: u64,
        name: &str,
        receipt: &ReceiptRef,
    ) -> Result<DeleteOutcome, Error> {
        let (_, seq, attempt) = self.open(now_ms, name, receipt)?;
        let reject_stale = self.reject_stale_deletes;
        let queue = self.queue(name)?;
        let Some(index) = queue.position(seq) else {
            return Ok(DeleteOutcome::AlreadyGone);
        };
        let receive_count = queue.messages[index].receive_count;
        if attempt > receive_count {
            return Err(Error::ReceiptHandleIsInvalid);
        }
        if attempt < receive_count {
            return if reject_stale {
                Err(Error::ReceiptSuperseded)
            } else {
                Ok(DeleteOutcome::IgnoredStale)
            };
        }
        let message = queue.messages.remove(index);
        queue.counters.deleted += 1;
        if message.state != MessageState::InFlight {
            queue.counters.deleted_late += 1;
        }
        self.gone.push(message.id);
        Ok(DeleteOutcome::Deleted)
    }

    fn change_visibility(
        &mut self,
        now_ms: u64,
        name: &str,
        receipt: &ReceiptRef,
        visibility_s: u32,
    ) -> Result<u64, Error> {
        if visibility_s > VISIBILITY_MAX_S {
            return Err(invalid(Field::LeaseVisibilityTimeout));
        }
        let (now_ms, seq, attempt) = self.open(now_ms, name, receipt)?;
        let queue = self.queue(name)?;
        let Some(index) = queue.position(seq) else {
            return Err(Error::MessageNotInFlight);
        };
        let message = &mut queue.messages[index];
        if attempt > message.receive_count {
            return Err(Error::ReceiptHandleIsInvalid);
        }
        if attempt < message.receive_count {
            return Err(Error::ReceiptSuperseded);
        }
        let visible_at_ms = now_ms + u64::from(visibility_s) * 1000;
        // A release (0) is never capped: it cannot lengthen the lease.
        if visibility_s > 0
            && visible_at_ms - message.leased_at_ms > u64::from(VISIBILITY_MAX_S) * 1000
        {
            return Err(Error::LeaseTooLong {
                max_seconds: VISIBILITY_MAX_S,
            });
        }
        message.visible_at_ms = visible_at_ms;
        if visible_at_ms > now_ms {
            message.state = MessageState::InFlight;
            queue.counters.leases_changed += 1;
        } else {
            message.state = MessageState::Ready;
            queue.counters.leases_released += 1;
        }
        Ok(visible_at_ms)
    }
}

// ----- the simulation ----------------------------------------------------------------------

/// A receipt a consumer holds, with what it was told about its lease.
#[derive(Clone, Debug)]
struct Held {
    queue: &'static str,
    queue_id: u64,
    seq: u64,
    attempt: u32,
    message_id: MessageId,
    receipt: String,
    /// When the consumer believes its lease ends (0 once it deleted the message).
    deadline_ms: u64,
}

/// Stands in for the durable log: payloads spilled out of the engine, by the location the
/// engine keeps instead. Each record gets a fresh location, as it would in a real log.
#[derive(Default)]
struct FakeLog {
    payloads: HashMap<Location, Arc<Payload>>,
    next_offset: u32,
}

impl FakeLog {
    fn store(&mut self, payload: &Arc<Payload>) -> Location {
        self.next_offset += 1;
        let location = Location {
            segment: self.next_offset / 64,
            offset: self.next_offset,
            len_bytes: payload.body.len() as u32,
        };
        self.payloads.insert(location, payload.clone());
        location
    }

    fn resolve(&self, payload: &PayloadRef) -> Arc<Payload> {
        match payload {
            PayloadRef::Inline(payload) => payload.clone(),
            PayloadRef::Stored(location) => self.payloads[location].clone(),
            PayloadRef::Cached(cached) => {
                // The copy kept in memory is the payload logged at its location.
                assert!(
                    Arc::ptr_eq(&cached.payload, &self.payloads[&cached.location]),
                    "a cached payload is the one at its location"
                );
                cached.payload.clone()
            }
        }
    }
}

struct Sim {
    rng: StdRng,
    /// Where spilled payloads went; `spilled_through` journal records were considered.
    log: FakeLog,
    spilled_through: usize,
    key: ReceiptKey,
    config: EngineConfig,
    engine: Engine,
    model: Model,
    journal: Vec<Record>,
    consumers: Vec<Vec<Held>>,
    now_ms: u64,
    step: usize,
    trace: VecDeque<String>,
    max_receive_count: u32,
    /// Messages that left the system; they must never be seen again.
    gone: HashSet<MessageId>,
    /// Deliveries of each message from the redrive source, counted from the engine's answers.
    source_deliveries: HashMap<MessageId, u32>,
    dead_lettered: HashSet<MessageId>,
    /// How often each operation had each outcome (printed with `LEASEQ_SIM_STATS=1`).
    tally: RefCell<BTreeMap<String, u64>>,
}

/// Whether two errors are the same kind (and, for values out of range, about the same field).
fn same_error(a: &Error, b: &Error) -> bool {
    match (a, b) {
        (Error::OutOfRange { field: x, .. }, Error::OutOfRange { field: y, .. }) => x == y,
        (Error::QueueAlreadyExists(_), Error::QueueAlreadyExists(_)) => true,
        _ => a == b,
    }
}

fn view(seq: u64, message: &leaseq_core::Message, log: &FakeLog) -> MessageView {
    MessageView {
        seq,
        id: message.id,
        body: log.resolve(&message.payload).body.clone(),
        sent_at_ms: message.sent_at_ms,
        visible_at_ms: message.visible_at_ms,
        leased_at_ms: message.leased_at_ms,
        first_received_at_ms: message.first_received_at_ms(),
        receive_count: message.receive_count,
        state: message.state,
        dead_letter_source: message.dead_letter_source.as_deref().map(str::to_string),
    }
}

impl Sim {
    fn new(seed: u64) -> Sim {
        let mut rng = StdRng::seed_from_u64(seed);
        let key = ReceiptKey::new(rng.random());
        let reject_stale_deletes = rng.random_bool(0.5);
        let config = EngineConfig {
            limits: Limits {
                in_flight_max: IN_FLIGHT_MAX,
                ..Limits::default()
            },
            reject_stale_deletes,
            // No cache, room for one or two small bodies (so that it forgets as it goes), or
            // room for all: answers are the same whichever holds the payloads.
            payload_cache_bytes: [0, 300, 600, 1 << 20][rng.random_range(0..4)],
            ..EngineConfig::default()
        };
        let max_receive_count = rng.random_range(1..=4);
        let mut sim = Sim {
            rng,
            log: FakeLog::default(),
            spilled_through: 0,
            engine: Engine::new(config.clone(), key.clone()),
            key,
            config,
            model: Model::new(reject_stale_deletes),
            journal: Vec::new(),
            consumers: vec![Vec::new(); CONSUMERS],
            now_ms: START_MS,
            step: 0,
            trace: VecDeque::new(),
            max_receive_count,
            gone: HashSet::new(),
            source_deliveries: HashMap::new(),
            dead_lettered: HashSet::new(),
            tally: RefCell::default(),
        };
        sim.setup();
        sim
    }

    /// Creates the queues: `main` dead-letters into `dead` after `max_receive_count` receives.
    fn setup(&mut self) {
        let visibility_s = self.rng.random_range(1..=60);
        for name in [DLQ, OTHER, SCRATCH] {
            self.create_queue(name, None);
        }
        self.create_queue(MAIN, Some(visibility_s));
        let patch = QueueConfigPatch {
            redrive_policy: Some(Some(RedrivePolicy {
                dead_letter_queue: DLQ.to_string(),
                max_receive_count: self.max_receive_count,
            })),
            ..QueueConfigPatch::default()
        };
        self.engine
            .set_queue_config(self.now_ms, MAIN, &patch, &mut self.journal)
            .expect("redrive policy");
        self.model.queues.get_mut(MAIN).expect("main").redrive =
            Some((DLQ.to_string(), self.max_receive_count));
        self.check();
    }

    fn run(&mut self, steps: usize) {
        for step in 1..=steps {
            self.step = step;
            self.random_step();
            self.spill_some();
            self.check();
            if step % CHECKPOINT_EVERY_STEPS == 0 || step == steps {
                self.check_replay();
            }
        }
    }

    /// Spills about half of the payloads the step's records carry to the fake log, and now and
    /// then relocates a spilled payload, as a server with a durable log does: the engine must
    /// answer the same whether a payload is in memory or only referenced.
    fn spill_some(&mut self) {
        let new = self.journal.len() - self.spilled_through;
        for index in self.spilled_through..self.journal.len() {
            if self.rng.random_bool(0.5) {
                continue;
            }
            let record = &self.journal[index];
            if let Some((_, _, payload)) = record.carried_payload() {
                let location = self.log.store(payload);
                self.engine.spill(record, location);
            }
        }
        self.spilled_through = self.journal.len();
        if new > 0 && self.rng.random_bool(0.1) {
            self.relocate_one();
        }
    }

    /// Relocates the first stored payload of a random queue, then spills the copy.
    fn relocate_one(&mut self) {
        let name = self.random_queue();
        let Some(queue) = self.engine.queue(name) else {
            return;
        };
        let queue_id = queue.id;
        let stored = queue
            .messages()
            .find_map(|(seq, m)| m.payload.stored().map(|location| (seq, location)));
        let Some((seq, from)) = stored else { return };
        let payload = self.log.payloads[&from].clone();
        let before = self.journal.len();
        let made = self
            .engine
            .relocate(queue_id, seq, from, payload, &mut self.journal);
        assert!(made, "relocation of a stored payload");
        assert_eq!(self.journal.len(), before + 1, "one Relocate record");
        self.note(format!("relocate {name} seq={seq}"));
    }

    fn note(&mut self, text: String) {
        if self.trace.len() == TRACE_LEN {
            self.trace.pop_front();
        }
        self.trace.push_back(format!(
            "[{}] t={} {text}",
            self.step,
            self.now_ms - START_MS
        ));
    }

    fn random_queue(&mut self) -> &'static str {
        match self.rng.random_range(0..100) {
            0..50 => MAIN,
            50..70 => DLQ,
            70..90 => OTHER,
            _ => SCRATCH,
        }
    }

    /// One step: maybe a clock jump, then one operation.
    fn random_step(&mut self) {
        self.now_ms += match self.rng.random_range(0..100) {
            0..70 => self.rng.random_range(0..=2_000),
            70..90 => self.rng.random_range(1_000..=30_000),
            90..98 => self.rng.random_range(30_000..=600_000),
            _ => self.rng.random_range(3_600_000..=13 * 3_600_000),
        };
        // Now and then the caller's clock has stepped back: the engine must ignore that.
        let now_ms = if self.rng.random_bool(0.02) {
            self.now_ms - self.rng.random_range(1..=3_600_000)
        } else {
            self.now_ms
        };
        let queue = self.random_queue();
        match self.rng.random_range(0..1000) {
            0..230 => self.send(now_ms, queue),
            230..470 => self.receive(now_ms, queue),
            470..640 => self.delete(now_ms),
            640..700 => self.delete_batch(now_ms),
            700..850 => self.change_visibility(now_ms),
            850..885 => self.queue_info(now_ms, queue),
            885..895 => self.purge(now_ms, queue),
            895..960 => self.set_config(now_ms, queue),
            960..980 => {
                let visibility_s = self
                    .rng
                    .random_bool(0.5)
                    .then(|| self.rng.random_range(0..=60));
                let queue = if self.rng.random_bool(0.5) {
                    SCRATCH
                } else {
                    queue
                };
                self.create_queue_at(now_ms, queue, visibility_s)
            }
            _ => self.delete_queue(now_ms, SCRATCH),
        }
    }

    /// Compares an engine answer with the model's; on an error, checks nothing was journaled.
    fn agree<T: std::fmt::Debug, U: std::fmt::Debug>(
        &self,
        what: &str,
        engine: &Result<T, Error>,
        model: &Result<U, Error>,
        journal_before: usize,
    ) {
        let first_word = |text: String| {
            text.split(['(', ' ', '{'])
                .next()
                .unwrap_or_default()
                .to_string()
        };
        let outcome = match engine {
            Ok(value) if format!("{value:?}").starts_with(char::is_uppercase) => {
                format!("Ok {}", first_word(format!("{value:?}")))
            }
            Ok(_) => "Ok".to_string(),
            Err(error) => first_word(format!("{error:?}")),
        };
        *self
            .tally
            .borrow_mut()
            .entry(format!("{what}: {outcome}"))
            .or_default() += 1;
        match (engine, model) {
            (Ok(_), Ok(_)) => {}
            (Err(a), Err(b)) if same_error(a, b) => {
                assert_eq!(
                    self.journal.len(),
                    journal_before,
                    "{what} failed with {a:?} but journaled records"
                );
            }
            _ => panic!("{what}: engine answered {engine:?}, model expected {model:?}"),
        }
    }

    fn create_queue(&mut self, name: &'static str, visibility_s: Option<u32>) {
        self.create_queue_at(self.now_ms, name, visibility_s);
    }

    fn create_queue_at(&mut self, now_ms: u64, name: &'static str, visibility_s: Option<u32>) {
        let patch = QueueConfigPatch {
            visibility_timeout_seconds: visibility_s,
            ..QueueConfigPatch::default()
        };
        let before = self.journal.len();
        let engine =
            self.engine
                .create_queue(now_ms, name, &patch, BTreeMap::new(), &mut self.journal);
        let model = self.model.create_queue(now_ms, name, visibility_s);
        self.note(format!(
            "create {name} visibility={visibility_s:?} -> {engine:?}"
        ));
        self.agree("create", &engine, &model, before);
        if let (Ok(created), Ok((queue_id, fresh))) = (engine, model) {
            assert_eq!(
                (created.queue_id, created.created),
                (queue_id, fresh),
                "create {name}"
            );
        }
    }

    fn delete_queue(&mut self, now_ms: u64, name: &'static str) {
        let before = self.journal.len();
        let engine = self.engine.delete_queue(now_ms, name, &mut self.journal);
        let model = self.model.delete_queue(now_ms, name);
        self.note(format!("delete queue {name} -> {engine:?}"));
        self.agree("delete queue", &engine, &model, before);
    }

    fn set_config(&mut self, now_ms: u64, name: &'static str) {
        let visibility_s = self
            .rng
            .random_bool(0.6)
            .then(|| match self.rng.random_range(0..20) {
                0 => VISIBILITY_MAX_S + 1,
                1 => 0,
                _ => self.rng.random_range(1..=60),
            });
        let retention_s = self
            .rng
            .random_bool(0.3)
            .then(|| match self.rng.random_range(0..10) {
                0 => 59,
                1..6 => 345_600,
                _ => self.rng.random_range(60..=1_800),
            });
        let delay_s = self
            .rng
            .random_bool(0.2)
            .then(|| match self.rng.random_range(0..10) {
                0 => 901,
                1..6 => 0,
                _ => self.rng.random_range(1..=20),
            });
        let patch = QueueConfigPatch {
            visibility_timeout_seconds: visibility_s,
            retention_seconds: retention_s,
            delay_seconds: delay_s,
            ..QueueConfigPatch::default()
        };
        let before = self.journal.len();
        let engine = self
            .engine
            .set_queue_config(now_ms, name, &patch, &mut self.journal);
        let model = self
            .model
            .set_config(now_ms, name, visibility_s, retention_s, delay_s);
        self.note(format!(
            "set {name} visibility={visibility_s:?} retention={retention_s:?} delay={delay_s:?} -> {engine:?}"
        ));
        self.agree("set config", &engine, &model, before);
    }

    fn purge(&mut self, now_ms: u64, name: &'static str) {
        let before = self.journal.len();
        let engine = self.engine.purge_queue(now_ms, name, &mut self.journal);
        let model = self.model.purge(now_ms, name);
        self.note(format!("purge {name} -> {engine:?}"));
        self.agree("purge", &engine, &model, before);
    }

    fn queue_info(&mut self, now_ms: u64, name: &'static str) {
        let engine = self.engine.queue_info(now_ms, name).map(|info| info.ready);
        self.model.advance(now_ms);
        let model = self
            .model
            .queue(name)
            .map(|queue| queue.count(MessageState::Ready));
        self.note(format!("info {name} -> ready {engine:?}"));
        let before = self.journal.len();
        self.agree("queue info", &engine, &model, before);
    }

    fn send(&mut self, now_ms: u64, name: &'static str) {
        let id = MessageId::from_random(self.rng.random());
        let body = match self.rng.random_range(0..100) {
            0 => String::new(),
            _ => format!("body-{}", self.rng.random::<u32>()),
        };
        let delay_s = match self.rng.random_range(0..100) {
            0..70 => None,
            70..85 => Some(0),
            85..99 => Some(self.rng.random_range(1..=20)),
            _ => Some(901),
        };
        let input = SendInput {
            delay_seconds: delay_s,
            ..SendInput::body(body.clone())
        };
        let before = self.journal.len();
        let engine = self
            .engine
            .send(now_ms, name, input, id, &mut self.journal)
            .map(|sent| sent.seq);
        let model = self.model.send(now_ms, name, id, &body, delay_s);
        self.note(format!("send {name} {id} delay={delay_s:?} -> {engine:?}"));
        self.agree("send", &engine, &model, before);
        if let (Ok(a), Ok(b)) = (&engine, &model) {
            assert_eq!(a, b, "sequence number of the sent message");
        }
    }

    fn receive(&mut self, now_ms: u64, name: &'static str) {
        let max_messages = match self.rng.random_range(0..100) {
            0 => 0,
            1 => 11,
            _ => self.rng.random_range(1..=10),
        };
        let visibility_s = match self.rng.random_range(0..100) {
            0..60 => None,
            60..72 => Some(0),
            72..90 => Some(self.rng.random_range(1..=60)),
            90..99 => Some(self.rng.random_range(60..=900)),
            _ => Some(VISIBILITY_MAX_S + 1),
        };
        let request = ReceiveRequest {
            max_messages,
            visibility_timeout_seconds: visibility_s,
            client: None,
        };
        let before = self.journal.len();
        let engine = self
            .engine
            .receive(now_ms, name, request, &mut self.journal);
        let model = self.model.receive(now_ms, name, max_messages, visibility_s);
        let summary = engine.as_ref().map(|ds| {
            ds.iter()
                .map(|d| (d.message_id, d.receive_count))
                .collect::<Vec<_>>()
        });
        self.note(format!(
            "receive {name} max={max_messages} visibility={visibility_s:?} -> {summary:?}"
        ));
        self.agree("receive", &engine, &model, before);
        let (Ok(deliveries), Ok(expected)) = (engine, model) else {
            return;
        };
        self.check_deliveries(name, &deliveries, &expected);
        let consumer = self.rng.random_range(0..CONSUMERS);
        let queue_id = self.model.queues[name].queue_id;
        for (delivery, expected) in deliveries.into_iter().zip(expected) {
            let held = &mut self.consumers[consumer];
            if held.len() == HELD_RECEIPTS_MAX {
                held.remove(0);
            }
            held.push(Held {
                queue: name,
                queue_id,
                seq: expected.seq,
                attempt: delivery.receive_count,
                message_id: delivery.message_id,
                receipt: delivery.receipt,
                deadline_ms: delivery.visible_at_ms,
            });
        }
    }

    /// The engine delivered exactly what the model predicts, nothing twice, nothing gone.
    fn check_deliveries(
        &mut self,
        name: &str,
        deliveries: &[Delivery<PayloadRef>],
        expected: &[MessageView],
    ) {
        let ids: HashSet<MessageId> = deliveries.iter().map(|d| d.message_id).collect();
        assert_eq!(
            ids.len(),
            deliveries.len(),
            "a receive returned one message twice"
        );
        let receipts: HashSet<&str> = deliveries.iter().map(|d| d.receipt.as_str()).collect();
        assert_eq!(
            receipts.len(),
            deliveries.len(),
            "a receive returned one receipt twice"
        );
        assert_eq!(
            deliveries.len(),
            expected.len(),
            "number of messages received"
        );
        for (delivery, expected) in deliveries.iter().zip(expected) {
            assert!(
                !self.gone.contains(&delivery.message_id),
                "message {} came back",
                delivery.message_id
            );
            let payload = self.log.resolve(&delivery.payload);
            let got = (
                delivery.message_id,
                payload.body.as_str(),
                delivery.receive_count,
                delivery.sent_at_ms,
                delivery.first_received_at_ms,
                delivery.visible_at_ms,
                delivery.dead_letter_source.as_deref(),
            );
            let want = (
                expected.id,
                expected.body.as_str(),
                expected.receive_count,
                expected.sent_at_ms,
                expected.first_received_at_ms.expect("received"),
                expected.visible_at_ms,
                expected.dead_letter_source.as_deref(),
            );
            assert_eq!(got, want, "delivery");
            if name == MAIN {
                let count = self
                    .source_deliveries
                    .entry(delivery.message_id)
                    .or_default();
                *count += 1;
                assert_eq!(
                    *count, delivery.receive_count,
                    "receive count of {}",
                    delivery.message_id
                );
                assert!(
                    delivery.receive_count <= self.max_receive_count,
                    "delivered beyond maxReceiveCount"
                );
            }
        }
    }

    /// A receipt to use: mostly one a consumer holds (current or stale), sometimes one for the
    /// wrong queue, a forged one, or garbage.
    fn pick_receipt(&mut self) -> (usize, Option<usize>, &'static str, String, ReceiptRef) {
        let consumer = self.rng.random_range(0..CONSUMERS);
        let held = &self.consumers[consumer];
        let roll = self.rng.random_range(0..100);
        if held.is_empty() || roll < 5 {
            let text = match self.rng.random_range(0..3) {
                0 => String::new(),
                1 => "AQAAAAAAAAABAAAAAAAAAAEAAAAB".repeat(2)[..50].to_string(),
                _ => ReceiptKey::new([0xAB; 16]).seal(Receipt {
                    queue_id: 1,
                    seq: 1,
                    attempt: 1,
                }),
            };
            let queue = self.random_queue();
            return (consumer, None, queue, text, ReceiptRef::Garbage);
        }
        // Consumers mostly work on what they received last, and now and then go back to an
        // older receipt (often a superseded or finished one).
        let index = if self.rng.random_bool(0.6) {
            held.len() - 1 - self.rng.random_range(0..held.len().min(3))
        } else {
            self.rng.random_range(0..held.len())
        };
        let chosen = held[index].clone();
        let sealed = ReceiptRef::Sealed {
            queue_id: chosen.queue_id,
            seq: chosen.seq,
            attempt: chosen.attempt,
        };
        match roll {
            5..9 => {
                // One character changed: the seal must reject it.
                let mut bytes = chosen.receipt.into_bytes();
                let at = self.rng.random_range(0..bytes.len());
                bytes[at] = if bytes[at] == b'A' { b'B' } else { b'A' };
                let text = String::from_utf8(bytes).expect("ascii");
                (consumer, None, chosen.queue, text, ReceiptRef::Garbage)
            }
            9..13 => {
                // Sealed with the real key but naming an attempt or message that was never issued.
                let forged = Receipt {
                    queue_id: chosen.queue_id,
                    seq: chosen.seq + u64::from(self.rng.random_bool(0.5)) * 1_000_000,
                    attempt: chosen.attempt + self.rng.random_range(0..=1),
                };
                let text = self.key.seal(forged);
                let sealed = ReceiptRef::Sealed {
                    queue_id: forged.queue_id,
                    seq: forged.seq,
                    attempt: forged.attempt,
                };
                // Forging a receipt that was issued (the next attempt's, say) is using it on
                // behalf of whoever holds it.
                let holder = self
                    .consumers
                    .iter()
                    .enumerate()
                    .find_map(|(consumer, held)| {
                        let index = held.iter().position(|h| h.receipt == text)?;
                        Some((consumer, index))
                    });
                match holder {
                    Some((consumer, index)) => (consumer, Some(index), chosen.queue, text, sealed),
                    None => (consumer, None, chosen.queue, text, sealed),
                }
            }
            13..17 => {
                let queue = self.random_queue();
                (consumer, Some(index), queue, chosen.receipt, sealed)
            }
            _ => (consumer, Some(index), chosen.queue, chosen.receipt, sealed),
        }
    }

    /// The engine's current view of the message a receipt names, if the model says the receipt
    /// is stale: it must be the same after the operation.
    fn newer_attempt(&self, queue: &str, receipt: &ReceiptRef) -> Option<(u64, (u64, u32))> {
        let ReceiptRef::Sealed {
            queue_id,
            seq,
            attempt,
        } = *receipt
        else {
            return None;
        };
        let model = self.model.queues.get(queue)?;
        let message = model.messages.iter().find(|m| m.seq == seq)?;
        if model.queue_id != queue_id || attempt >= message.receive_count {
            return None;
        }
        let engine = self.engine.queue(queue)?.message(seq)?;
        Some((seq, (engine.visible_at_ms, engine.receive_count)))
    }

    fn assert_unchanged(&self, queue: &str, newer: Option<(u64, (u64, u32))>) {
        let Some((seq, before)) = newer else { return };
        match self.engine.queue(queue).and_then(|q| q.message(seq)) {
            Some(message) => {
                let after = (message.visible_at_ms, message.receive_count);
                assert_eq!(after, before, "a stale receipt changed the newer attempt");
            }
            // Time alone may have removed it (retention) while the operation ran; the model
            // agrees on that, and a stale receipt never deletes (checked by the outcome).
            None => assert!(
                self.model.queues[queue].position(seq).is_none(),
                "a stale receipt removed the newer attempt"
            ),
        }
    }

    fn delete(&mut self, now_ms: u64) {
        self.delete_entry(now_ms, &mut None);
    }

    /// A DeleteMessageBatch as the server runs one: its first entry deletes as `delete` does,
    /// bringing the queue forward to `now_ms`; the others go to `Engine::delete_in`, which
    /// deletes in the queue as it is. Every entry must answer as a delete of its own does (the
    /// model brings the queue forward for each). Receipts held for other queues are entries of
    /// this one too: the wrong queue's receipt is refused.
    fn delete_batch(&mut self, now_ms: u64) {
        let mut batch = None;
        for _ in 0..self.rng.random_range(2..=4) {
            self.delete_entry(now_ms, &mut batch);
        }
    }

    /// One delete; in a batch after its first entry, `batch` holds the batch's queue and the id
    /// the engine knew it by.
    fn delete_entry(&mut self, now_ms: u64, batch: &mut Option<(&'static str, Option<u64>)>) {
        let (consumer, index, picked_queue, text, receipt) = self.pick_receipt();
        let queue = batch.map_or(picked_queue, |(queue, _)| queue);
        let newer = self.newer_attempt(queue, &receipt);
        let before = self.journal.len();
        let engine = match *batch {
            Some((_, Some(queue_id))) => self.engine.delete_in(queue_id, &text, &mut self.journal),
            Some((_, None)) | None => self.engine.delete(now_ms, queue, &text, &mut self.journal),
        }
        .map(|(outcome, _)| outcome);
        if batch.is_none() {
            *batch = Some((queue, self.engine.queue_id(queue)));
        }
        let model = self.model.delete(now_ms, queue, &receipt);
        self.note(format!(
            "consumer {consumer} (held {index:?}) delete {queue} {receipt:?} -> {engine:?}"
        ));
        self.agree("delete", &engine, &model, before);
        if let (Ok(a), Ok(b)) = (&engine, &model) {
            assert_eq!(a, b, "delete outcome");
        }
        if engine != Ok(DeleteOutcome::Deleted) {
            assert_eq!(
                self.journal.len(),
                before,
                "a delete that deleted nothing journaled records"
            );
        }
        self.assert_unchanged(queue, newer);
        if let (Ok(DeleteOutcome::Deleted), Some(index)) = (engine, index) {
            self.consumers[consumer][index].deadline_ms = 0;
        }
    }

    fn change_visibility(&mut self, now_ms: u64) {
        let (consumer, index, queue, text, receipt) = self.pick_receipt();
        let visibility_s = match self.rng.random_range(0..100) {
            0..15 => 0,
            15..45 => self.rng.random_range(1..=10),
            45..85 => self.rng.random_range(30..=600),
            85..92 => self.rng.random_range(0..=VISIBILITY_MAX_S),
            92..97 => VISIBILITY_MAX_S,
            _ => VISIBILITY_MAX_S + 1,
        };
        let newer = self.newer_attempt(queue, &receipt);
        let before = self.journal.len();
        let engine =
            self.engine
                .change_visibility(now_ms, queue, &text, visibility_s, &mut self.journal);
        let model = self
            .model
            .change_visibility(now_ms, queue, &receipt, visibility_s);
        self.note(format!(
            "consumer {consumer} (held {index:?}) change visibility {queue} {receipt:?} to {visibility_s}s -> {engine:?}"
        ));
        self.agree("change visibility", &engine, &model, before);
        if let (Ok(a), Ok(b)) = (&engine, &model) {
            assert_eq!(a, b, "new lease deadline");
        }
        self.assert_unchanged(queue, newer);
        if let (Ok(deadline_ms), Some(index)) = (engine, index) {
            self.consumers[consumer][index].deadline_ms = deadline_ms;
        }
    }

    // ----- checks after every step ---------------------------------------------------------

    fn check(&mut self) {
        self.engine.check_invariants();
        // Bring every queue to the present, in the engine and the model alike.
        let now_ms = self.model.advance(self.now_ms);
        for name in QUEUES {
            let engine = self.engine.queue_info(now_ms, name);
            assert_eq!(
                engine.is_ok(),
                self.model.queues.contains_key(name),
                "existence of {name}"
            );
        }
        assert_eq!(self.engine.clock_ms(), now_ms, "engine clock");
        self.gone.extend(self.model.gone.drain(..));
        let names: Vec<String> = self
            .engine
            .list_queues("")
            .iter()
            .map(|n| n.to_string())
            .collect();
        let expected: Vec<String> = self.model.queues.keys().cloned().collect();
        assert_eq!(names, expected, "queue names");
        for name in expected {
            self.check_queue(&name);
        }
        self.check_journal_times();
        self.check_single_lease(now_ms);
    }

    fn check_queue(&mut self, name: &str) {
        let queue = self.engine.queue(name).expect("exists");
        let model = &self.model.queues[name];
        assert_eq!(queue.counters, model.counters, "counters of {name}");
        let counts = (
            queue.ready_count(),
            queue.in_flight_count(),
            queue.delayed_count(),
        );
        let expected_counts = (
            model.count(MessageState::Ready),
            model.count(MessageState::InFlight),
            model.count(MessageState::Delayed),
        );
        assert_eq!(
            counts, expected_counts,
            "ready, in flight, delayed of {name}"
        );
        let settings = (
            queue.id,
            queue.config.visibility_timeout_seconds,
            queue.config.retention_seconds,
            queue.config.delay_seconds,
        );
        assert_eq!(
            settings,
            (
                model.queue_id,
                model.visibility_s,
                model.retention_s,
                model.delay_s
            ),
            "settings of {name}"
        );
        let log = &self.log;
        let messages: Vec<MessageView> =
            queue.messages().map(|(seq, m)| view(seq, m, log)).collect();
        let mut expected = model.messages.clone();
        expected.sort_by_key(|m| m.seq);
        if messages != expected {
            let mut diff = String::new();
            for (a, b) in messages
                .iter()
                .zip(&expected)
                .filter(|(a, b)| a != b)
                .take(3)
            {
                let _ = write!(diff, "\n  engine {a:?}\n  model  {b:?}");
            }
            panic!(
                "messages of {name} differ ({} vs {}):{diff}",
                messages.len(),
                expected.len()
            );
        }
        let oldest = self
            .engine
            .queue(name)
            .and_then(|q| q.oldest_ready_sent_at_ms());
        let model = &self.model.queues[name];
        let expected_oldest = model
            .messages
            .iter()
            .filter(|m| m.state == MessageState::Ready)
            .map(|m| m.sent_at_ms)
            .min();
        assert_eq!(oldest, expected_oldest, "oldest ready of {name}");
        for message in &messages {
            assert!(
                !self.gone.contains(&message.id),
                "message {} came back into {name}",
                message.id
            );
            if message.dead_letter_source.as_deref() == Some(MAIN)
                && self.dead_lettered.insert(message.id)
            {
                let receives = self
                    .source_deliveries
                    .get(&message.id)
                    .copied()
                    .unwrap_or(0);
                assert_eq!(
                    receives, self.max_receive_count,
                    "dead-lettered after {receives} receives"
                );
                assert_eq!(
                    message.receive_count, self.max_receive_count,
                    "receive count kept in the dead-letter queue"
                );
            }
        }
    }

    fn check_journal_times(&self) {
        let times = self.journal.iter().map(Record::now_ms);
        let sorted = times.clone().zip(times.skip(1)).all(|(a, b)| a <= b);
        assert!(sorted, "journaled times go backwards");
        assert!(self
            .journal
            .last()
            .is_none_or(|r| r.now_ms() <= self.engine.clock_ms()));
    }

    /// No message is leased to two holders at once, by what the holders were told.
    fn check_single_lease(&self, now_ms: u64) {
        let mut live: HashMap<MessageId, &Held> = HashMap::new();
        for held in self
            .consumers
            .iter()
            .flatten()
            .filter(|h| h.deadline_ms > now_ms)
        {
            if let Some(other) = live.insert(held.message_id, held) {
                panic!(
                    "message {} leased twice at once: {other:?} and {held:?}",
                    held.message_id
                );
            }
        }
    }

    /// Replaying the journal into a fresh engine gives the same queues.
    fn check_replay(&mut self) {
        let mut replayed = Engine::new(self.config.clone(), self.key.clone());
        for record in &self.journal {
            replayed.apply(record);
        }
        replayed.check_invariants();
        let now_ms = self.engine.clock_ms();
        for name in self.model.queues.keys() {
            replayed
                .queue_info(now_ms, name)
                .expect("replayed queue exists");
            let live = self.engine.queue(name).expect("live queue");
            let again = replayed.queue(name).expect("replayed queue");
            assert_eq!(again.id, live.id, "id of {name} after replay");
            assert_eq!(again.config, live.config, "settings of {name} after replay");
            let counts = |q: &leaseq_core::Queue| {
                (
                    q.ready_count(),
                    q.in_flight_count(),
                    q.delayed_count(),
                    q.next_seq(),
                )
            };
            assert_eq!(counts(again), counts(live), "counts of {name} after replay");
            assert_eq!(
                again.counters, live.counters,
                "counters of {name} after replay"
            );
            let messages = |q: &leaseq_core::Queue| {
                q.messages()
                    .map(|(seq, m)| view(seq, m, &self.log))
                    .collect::<Vec<_>>()
            };
            assert_eq!(
                messages(again),
                messages(live),
                "messages of {name} after replay"
            );
        }
        assert_eq!(
            replayed.list_queues(""),
            self.engine.list_queues(""),
            "queues after replay"
        );
    }
}
