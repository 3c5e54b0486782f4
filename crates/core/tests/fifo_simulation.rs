//! A seeded simulation of FIFO queues under concurrent consumers.
//!
//! Each run draws random operations from a seeded PRNG: sends to a few groups (with
//! deduplication ids from a small pool, so duplicates are common, or content-based ids), batch
//! receives by several consumers (random lease lengths, sometimes 0, sometimes retried with the
//! same `ReceiveRequestAttemptId`), deletes and visibility changes with held receipts (often
//! after their lease ended), purges, clock jumps across the 5-minute windows, restarts (the
//! engine rebuilt from a snapshot through the byte codec, or from the whole journal). After every
//! step it checks the engine's invariants and these properties, against a small model:
//!
//! - **one holder per group:** a group is held from a receive that leases any of its messages
//!   until one of its in-flight messages becomes visible again (its lease runs out or is
//!   released with 0) or none is in flight; no receive delivers anything of a held group. The
//!   model keeps its own hold per group and checks the engine's against it after every step,
//!   and that every group a receive delivered from was not held just before;
//! - **order:** per group, first deliveries happen in send order, and a delivered message has no
//!   older message of its group waiting (ready or delayed) in the queue other than ones
//!   delivered in the same receive: older ones are gone or in flight;
//! - **deduplication** (scope `queue` on even seeds, `messageGroup` on odd ones): a send whose id
//!   was sent in the scope in the last 5 minutes (and not purged since) is a duplicate of exactly
//!   that message and is not enqueued; any other send is enqueued;
//! - **receipts die with their lease:** a delete after the lease ended fails and deletes nothing;
//! - **dead letters:** a message is moved after `maxReceiveCount` receives, keeps its group in
//!   the dead-letter queue and never appears twice;
//! - restarts lose nothing: the rebuilt engine answers exactly as the live one would.
//!
//! `cargo test` runs a fixed set of seeds. Longer runs: `LEASEQ_FIFO_SIM_SEEDS=N`,
//! `LEASEQ_FIFO_SIM_STEPS=N`, `LEASEQ_FIFO_SIM_SEED=x` (one seed, to reproduce a failure).

use std::collections::{BTreeMap, HashMap, HashSet};

use leaseq_core::{
    codec, DeduplicationScope, DeleteOutcome, Engine, EngineConfig, Error, Journal, MessageId,
    MessageState, QueueConfigPatch, ReceiptKey, ReceiveRequest, RedrivePolicy, SendInput,
};
use leaseq_testkit::sim::{Progress, Seeds};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

const SEEDS_DEFAULT: u64 = 24;
const STEPS_DEFAULT: usize = 1_500;
const START_MS: u64 = 1_700_000_000_000;
const WINDOW_MS: u64 = 5 * 60 * 1000;
const QUEUE: &str = "jobs.fifo";
const DLQ: &str = "dead.fifo";
const GROUPS: [&str; 4] = ["g0", "g1", "g2", "g3"];
const MAX_RECEIVE_COUNT: u32 = 3;

#[test]
fn fifo_simulation() {
    // `LEASEQ_FIFO_SIM_SEEDS`, `LEASEQ_FIFO_SIM_STEPS`, `LEASEQ_FIFO_SIM_SEED`.
    let seeds = Seeds::from_env(
        "LEASEQ_FIFO_SIM",
        env!("CARGO_PKG_NAME"),
        env!("CARGO_CRATE_NAME"),
        SEEDS_DEFAULT,
        STEPS_DEFAULT,
    );
    let mut totals = Totals::default();
    for &seed in seeds.seeds() {
        let mut sim = Sim::new(seed);
        seeds.check(
            "FIFO simulation",
            seed,
            &mut sim,
            |sim, steps| sim.run(steps),
            |sim| Progress {
                step: sim.step,
                last_operations: sim.trace.clone(),
            },
        );
        totals.add(&sim.totals);
    }
    // The run must have exercised what it claims to check.
    assert!(totals.duplicates > 0, "no duplicate sends: {totals:?}");
    assert!(
        totals.batched > 0,
        "no batch took two messages of a group: {totals:?}"
    );
    assert!(
        totals.blocked > 0,
        "no receive found every group blocked: {totals:?}"
    );
    assert!(
        totals.retried > 0,
        "no receive attempt was retried: {totals:?}"
    );
    assert!(
        totals.expired_deletes > 0,
        "no delete came after its lease: {totals:?}"
    );
    assert!(
        totals.dead_lettered > 0,
        "nothing was dead-lettered: {totals:?}"
    );
    assert!(totals.restarts > 0, "no restart: {totals:?}");
    assert!(
        totals.resumed > 0,
        "no group delivered again while a message of it was in flight: {totals:?}"
    );
}

#[derive(Debug, Default)]
struct Totals {
    duplicates: u64,
    batched: u64,
    blocked: u64,
    retried: u64,
    expired_deletes: u64,
    dead_lettered: u64,
    restarts: u64,
    /// Receives that delivered from a group while another of its messages was in flight (the
    /// group was released by a message that became visible).
    resumed: u64,
}

impl Totals {
    fn add(&mut self, other: &Totals) {
        self.duplicates += other.duplicates;
        self.batched += other.batched;
        self.blocked += other.blocked;
        self.retried += other.retried;
        self.expired_deletes += other.expired_deletes;
        self.dead_lettered += other.dead_lettered;
        self.restarts += other.restarts;
        self.resumed += other.resumed;
    }
}

/// A receipt a consumer holds.
#[derive(Clone, Debug)]
struct Held {
    receipt: String,
    message_id: MessageId,
    group: String,
    visible_at_ms: u64,
    /// Its lease ran out (the model saw the time pass `visible_at_ms`).
    ended: bool,
}

struct Sim {
    rng: StdRng,
    engine: Engine,
    config: EngineConfig,
    key: ReceiptKey,
    journal: Journal,
    now_ms: u64,
    step: usize,
    trace: Vec<String>,
    totals: Totals,
    held: Vec<Held>,
    /// The model of the groups' holds: a group is held from a receive that leased any of its
    /// messages until one of its leases ends by becoming visible, or none is in flight.
    holds: HashSet<String>,
    receives: u64,
    /// `DeduplicationScope=messageGroup` (odd seeds) rather than `queue`.
    group_scope: bool,
    /// The model of the deduplication window: (scope, dedup id) → (first message, sent at).
    window: HashMap<(String, String), (MessageId, u64)>,
    /// Message id → (group, send index) of every message enqueued in the source queue.
    sent: HashMap<MessageId, (String, u64)>,
    sends: u64,
    /// Per group: the send index of the last message first-delivered.
    last_first_delivery: HashMap<String, u64>,
    first_delivered: HashSet<MessageId>,
    /// Messages that left for good (deleted, purged, dead-lettered out of the source).
    gone: HashSet<MessageId>,
    /// Recent receive attempts: id → the message ids and receipts returned.
    attempts: Vec<(String, Vec<(MessageId, String)>)>,
}

impl Sim {
    fn new(seed: u64) -> Sim {
        let config = EngineConfig::default();
        let key = ReceiptKey::new([7; 16]);
        let mut sim = Sim {
            rng: StdRng::seed_from_u64(seed),
            engine: Engine::new(config.clone(), key.clone()),
            config,
            key,
            journal: Journal::new(),
            now_ms: START_MS,
            step: 0,
            trace: Vec::new(),
            totals: Totals::default(),
            held: Vec::new(),
            holds: HashSet::new(),
            receives: 0,
            group_scope: seed % 2 == 1,
            window: HashMap::new(),
            sent: HashMap::new(),
            sends: 0,
            last_first_delivery: HashMap::new(),
            first_delivered: HashSet::new(),
            gone: HashSet::new(),
            attempts: Vec::new(),
        };
        let fifo = QueueConfigPatch {
            fifo_queue: Some(true),
            visibility_timeout_seconds: Some(20),
            deduplication_scope: Some(if sim.group_scope {
                DeduplicationScope::MessageGroup
            } else {
                DeduplicationScope::Queue
            }),
            ..QueueConfigPatch::default()
        };
        sim.engine
            .create_queue(sim.now_ms, DLQ, &fifo, BTreeMap::new(), &mut sim.journal)
            .unwrap();
        let source = QueueConfigPatch {
            redrive_policy: Some(Some(RedrivePolicy {
                dead_letter_queue: DLQ.into(),
                max_receive_count: MAX_RECEIVE_COUNT,
            })),
            ..fifo
        };
        sim.engine
            .create_queue(
                sim.now_ms,
                QUEUE,
                &source,
                BTreeMap::new(),
                &mut sim.journal,
            )
            .unwrap();
        sim
    }

    fn note(&mut self, text: String) {
        if self.trace.len() == 40 {
            self.trace.remove(0);
        }
        self.trace.push(format!(
            "[{}] +{}ms {text}",
            self.step,
            self.now_ms - START_MS
        ));
    }

    fn run(&mut self, steps: usize) {
        for step in 0..steps {
            self.step = step;
            match self.rng.random_range(0..100) {
                0..=34 => self.send(),
                35..=59 => self.receive(),
                60..=69 => self.delete(),
                70..=74 => self.delete_batch(),
                75..=79 => self.change_visibility(),
                80..=92 => self.tick(),
                93..=94 => self.purge(),
                _ => self.restart(),
            }
            self.engine.check_invariants();
            self.check_holds();
        }
        self.restart();
    }

    fn tick(&mut self) {
        let jump = match self.rng.random_range(0..10) {
            0 => self.rng.random_range(0..2 * WINDOW_MS),
            1..=4 => self.rng.random_range(0..30_000),
            _ => self.rng.random_range(0..3_000),
        };
        self.now_ms += jump;
        self.note(format!("tick {jump}ms"));
    }

    fn send(&mut self) {
        let group = GROUPS[self.rng.random_range(0..GROUPS.len())].to_string();
        let dedup = format!("d{}", self.rng.random_range(0..40));
        let mut input = SendInput::body(format!("body-{}", self.sends)).in_group(group.clone());
        input.deduplication_id = Some(dedup.clone());
        let id = MessageId::from_random(
            (u128::from(self.step as u64) << 64 | u128::from(self.sends)).to_be_bytes(),
        );
        self.sends += 1;
        let sent = self
            .engine
            .send(self.now_ms, QUEUE, input, id, &mut self.journal)
            .expect("a valid FIFO send succeeds");
        let scope = if self.group_scope {
            group.clone()
        } else {
            String::new()
        };
        let key = (scope, dedup.clone());
        let in_window = self
            .window
            .get(&key)
            .filter(|(_, sent_at)| self.now_ms < sent_at + WINDOW_MS)
            .map(|(first, _)| *first);
        self.note(format!(
            "send {group} {dedup} -> duplicate={}",
            sent.duplicate
        ));
        match in_window {
            Some(first) => {
                assert!(
                    sent.duplicate,
                    "{dedup} is in the window but was enqueued again"
                );
                assert_eq!(
                    sent.message_id, first,
                    "a duplicate answers with the first id"
                );
                self.totals.duplicates += 1;
            }
            None => {
                assert!(
                    !sent.duplicate,
                    "{dedup} is not in the window but was dropped"
                );
                assert_eq!(sent.message_id, id);
                self.window.insert(key, (id, self.now_ms));
                self.sent.insert(id, (group, self.sends));
            }
        }
    }

    fn receive(&mut self) {
        let max_messages = self.rng.random_range(1..=10);
        let visibility = match self.rng.random_range(0..10) {
            0 => 0,
            _ => self.rng.random_range(1..40),
        };
        let retry = !self.attempts.is_empty() && self.rng.random_bool(0.2);
        let attempt_id = if retry {
            let index = self.rng.random_range(0..self.attempts.len());
            Some(self.attempts[index].0.clone())
        } else if self.rng.random_bool(0.3) {
            Some(format!("try-{}", self.receives))
        } else {
            None
        };
        let request = ReceiveRequest {
            max_messages,
            visibility_timeout_seconds: Some(visibility),
            client: None,
        };
        let before_ready = self.engine.queue(QUEUE).unwrap().ready_count();
        let deliveries = self
            .engine
            .receive_with_attempt(
                self.now_ms,
                QUEUE,
                request,
                attempt_id.as_deref(),
                &mut self.journal,
            )
            .expect("a valid receive succeeds");
        self.receives += 1;
        self.note(format!(
            "receive max={max_messages} vis={visibility} attempt={attempt_id:?} -> {:?}",
            deliveries
                .iter()
                .map(|d| (d.message_id, d.receive_count))
                .collect::<Vec<_>>()
        ));
        if deliveries.is_empty() && before_ready > 0 {
            self.totals.blocked += 1;
        }
        self.dead_letters();
        let returned: Vec<(MessageId, String)> = deliveries
            .iter()
            .map(|d| (d.message_id, d.receipt.clone()))
            .collect();
        // A retry that returned the earlier receipts is the earlier receive again: its
        // messages are already held, and each lease restarts with this receive's visibility
        // timeout (SQS: a retry "resets the visibility timeout"); with 0 it is released, which
        // ends the group's hold as a release does.
        if let Some(id) = &attempt_id {
            if let Some((_, earlier)) = self.attempts.iter().find(|(a, _)| a == id) {
                if !returned.is_empty() && *earlier == returned {
                    self.totals.retried += 1;
                    for delivery in &deliveries {
                        let Some(index) = self
                            .held
                            .iter()
                            .position(|held| held.message_id == delivery.message_id)
                        else {
                            continue;
                        };
                        if visibility == 0 {
                            let held = self.held.remove(index);
                            self.holds.remove(&held.group);
                        } else {
                            // From now, later or sooner than before, as the retry asks (the
                            // simulation's leases stay far below the 12-hour cap).
                            assert_eq!(
                                delivery.visible_at_ms,
                                self.now_ms + u64::from(visibility) * 1000,
                                "a retry's lease ends after its visibility timeout"
                            );
                            self.held[index].visible_at_ms = delivery.visible_at_ms;
                        }
                    }
                    return;
                }
            }
        }
        // Batches fill one group at a time (its messages are consecutive in the batch), and
        // only from groups that were not held.
        let groups: Vec<String> = deliveries
            .iter()
            .map(|d| d.fifo.as_ref().expect("FIFO delivery").group_id.to_string())
            .collect();
        for (index, group) in groups.iter().enumerate() {
            assert!(!self.holds.contains(group), "{group} delivered while held");
            let in_flight_before = self.held.iter().any(|held| {
                !held.ended
                    && held.group == *group
                    && deliveries.iter().all(|d| d.message_id != held.message_id)
            });
            if index == 0 || groups[index - 1] != *group {
                self.totals.resumed += u64::from(in_flight_before);
            }
            let seen_before = groups[..index].contains(group);
            assert!(
                !seen_before || groups[index - 1] == *group,
                "{group} split in the batch: {groups:?}"
            );
        }
        let mut per_group: HashMap<&str, usize> = HashMap::new();
        for delivery in &deliveries {
            let fifo = delivery.fifo.as_ref().expect("FIFO delivery");
            let group = fifo.group_id.to_string();
            *per_group
                .entry(GROUPS.iter().find(|g| **g == group).unwrap())
                .or_default() += 1;
            let (sent_group, index) = self.sent[&delivery.message_id].clone();
            assert_eq!(sent_group, group, "delivered in another group");
            assert!(
                !self.gone.contains(&delivery.message_id),
                "a gone message came back: {}",
                delivery.message_id
            );
            if self.first_delivered.insert(delivery.message_id) {
                let last = self.last_first_delivery.insert(group.clone(), index);
                assert!(
                    last.is_none_or(|last| last < index),
                    "first deliveries of {group} out of send order"
                );
            }
            // Nothing older of the group is waiting, except what this receive delivered: the
            // older ones left are in flight (delivery resumed after them).
            let queue = self.engine.queue(QUEUE).unwrap();
            for (_, message) in queue.messages() {
                let same_group = message.fifo.as_ref().unwrap().group_id.as_ref() == group;
                let older = self.sent[&message.id].1 < index;
                let in_batch = deliveries.iter().any(|d| d.message_id == message.id);
                let waiting = message.state != MessageState::InFlight;
                assert!(
                    !(same_group && older && !in_batch && waiting),
                    "{group}: delivered past an older waiting message"
                );
            }
            if visibility > 0 {
                self.held
                    .retain(|held| held.message_id != delivery.message_id);
                self.held.push(Held {
                    receipt: delivery.receipt.clone(),
                    message_id: delivery.message_id,
                    group: group.clone(),
                    visible_at_ms: delivery.visible_at_ms,
                    ended: false,
                });
                self.holds.insert(group);
            }
        }
        if per_group.values().any(|&n| n > 1) {
            self.totals.batched += 1;
        }
        if let Some(id) = attempt_id {
            if !returned.is_empty() {
                self.attempts.retain(|(a, _)| *a != id);
                self.attempts.push((id, returned));
                if self.attempts.len() > 8 {
                    self.attempts.remove(0);
                }
            }
        }
    }

    /// Messages that reached the dead-letter queue: moved once, after exactly
    /// `maxReceiveCount` receives, with their group.
    fn dead_letters(&mut self) {
        let moved: Vec<(MessageId, u32, String)> = self
            .engine
            .queue(DLQ)
            .unwrap()
            .messages()
            .map(|(_, m)| {
                (
                    m.id,
                    m.receive_count,
                    m.fifo.as_ref().unwrap().group_id.to_string(),
                )
            })
            .collect();
        for (id, receive_count, group) in moved {
            if self.gone.insert(id) {
                self.trace.push(format!("dead-lettered {id}"));
                assert_eq!(
                    receive_count, MAX_RECEIVE_COUNT,
                    "moved after {receive_count}"
                );
                assert_eq!(group, self.sent[&id].0, "the move keeps the group");
                self.held.retain(|held| held.message_id != id);
                self.totals.dead_lettered += 1;
            }
        }
    }

    fn delete(&mut self) {
        self.delete_entry(&mut None);
    }

    /// A DeleteMessageBatch as the server runs one: the first entry brings the queue forward
    /// (`Engine::delete`), the others delete in it as it is (`Engine::delete_in`); each must
    /// answer as a delete of its own does.
    fn delete_batch(&mut self) {
        let mut queue_id = None;
        for _ in 0..self.rng.random_range(2..=4) {
            self.delete_entry(&mut queue_id);
        }
    }

    /// One delete; in a batch after its first entry, `queue_id` is the queue's id.
    fn delete_entry(&mut self, queue_id: &mut Option<u64>) {
        if self.held.is_empty() {
            return;
        }
        let index = self.rng.random_range(0..self.held.len());
        let held = self.held.remove(index);
        let result = match *queue_id {
            Some(id) => self.engine.delete_in(id, &held.receipt, &mut self.journal),
            None => self
                .engine
                .delete(self.now_ms, QUEUE, &held.receipt, &mut self.journal),
        }
        .map(|(outcome, _)| outcome);
        *queue_id = self.engine.queue_id(QUEUE);
        self.note(format!("delete {} -> {result:?}", held.message_id));
        let present = self
            .engine
            .queue(QUEUE)
            .unwrap()
            .messages()
            .any(|(_, m)| m.id == held.message_id);
        if self.now_ms < held.visible_at_ms {
            assert_eq!(result, Ok(DeleteOutcome::Deleted), "a live lease deletes");
            assert!(!present);
            self.gone.insert(held.message_id);
        } else {
            match result {
                Err(Error::ReceiptSuperseded) => self.totals.expired_deletes += 1,
                Ok(DeleteOutcome::AlreadyGone) => assert!(!present),
                other => panic!("delete after the lease ended: {other:?}"),
            }
        }
    }

    fn change_visibility(&mut self) {
        if self.held.is_empty() {
            return;
        }
        let index = self.rng.random_range(0..self.held.len());
        let seconds = self.rng.random_range(0..40);
        let held = self.held[index].clone();
        let result = self.engine.change_visibility(
            self.now_ms,
            QUEUE,
            &held.receipt,
            seconds,
            &mut self.journal,
        );
        self.note(format!(
            "change-visibility {} {seconds}s -> {result:?}",
            held.message_id
        ));
        match result {
            Ok(visible_at_ms) => {
                assert!(self.now_ms < held.visible_at_ms, "changed an ended lease");
                if seconds == 0 {
                    // A release ends the group's hold at once.
                    self.held.remove(index);
                    self.holds.remove(&held.group);
                } else {
                    self.held[index].visible_at_ms = visible_at_ms;
                }
            }
            Err(_) => assert!(self.now_ms >= held.visible_at_ms, "a live lease refused"),
        }
    }

    fn purge(&mut self) {
        let result = self
            .engine
            .purge_queue(self.now_ms, QUEUE, &mut self.journal);
        self.note(format!("purge -> {result:?}"));
        if result.is_ok() {
            for (_, (id, _)) in self.window.drain() {
                self.gone.insert(id);
            }
            self.gone.extend(self.sent.keys().copied());
            self.held.clear();
            self.holds.clear();
            self.attempts.clear();
        }
    }

    /// Rebuilds the engine from a snapshot (through the codec) or from the journal, and checks
    /// that it is the same engine.
    fn restart(&mut self) {
        let from_snapshot = self.rng.random_bool(0.5);
        let mut rebuilt = Engine::new(self.config.clone(), self.key.clone());
        if from_snapshot {
            let mut records = Vec::new();
            self.engine.snapshot(|record| {
                let mut bytes = Vec::new();
                codec::encode(&record, &mut bytes);
                records.push(codec::decode(&bytes).expect("snapshot record decodes"));
            });
            for record in &records {
                rebuilt.apply(record);
            }
        } else {
            for record in &self.journal {
                let mut bytes = Vec::new();
                codec::encode(record, &mut bytes);
                rebuilt.apply(&codec::decode(&bytes).expect("journal record decodes"));
            }
        }
        rebuilt.check_invariants();
        for name in [QUEUE, DLQ] {
            assert_eq!(
                describe(&mut rebuilt, self.now_ms, name),
                describe(&mut self.engine, self.now_ms, name),
                "{name} differs after a restart (from snapshot: {from_snapshot})"
            );
        }
        self.note(format!("restart (from snapshot: {from_snapshot})"));
        self.engine = rebuilt;
        self.totals.restarts += 1;
    }

    /// One holder per group: brings the engine and the model to now (leases that ran out end
    /// their group's hold), then checks that every in-flight message is held by a consumer and
    /// that the engine holds exactly the groups the model holds.
    fn check_holds(&mut self) {
        self.engine
            .queue_info(self.now_ms, QUEUE)
            .expect("queue exists");
        for held in &mut self.held {
            if !held.ended && held.visible_at_ms <= self.now_ms {
                held.ended = true;
                self.holds.remove(&held.group);
            }
        }
        let held = &self.held;
        self.holds
            .retain(|group| held.iter().any(|h| !h.ended && h.group == *group));
        let queue = self.engine.queue(QUEUE).unwrap();
        for (_, message) in queue.messages() {
            if message.state != MessageState::InFlight {
                continue;
            }
            let group = message.fifo.as_ref().unwrap().group_id.to_string();
            // The engine's lease is the held one (the latest receipt of the message).
            let held = self
                .held
                .iter()
                .find(|held| held.message_id == message.id && !held.ended)
                .expect("an in-flight message is held by a consumer");
            assert_eq!(held.group, group);
        }
        let fifo = queue.fifo().expect("FIFO queue");
        for group in GROUPS {
            assert_eq!(
                fifo.group_held(group),
                self.holds.contains(group),
                "{group}: the engine's hold differs from the model's"
            );
        }
    }
}

/// Everything about a queue a restart must keep, as text.
fn describe(engine: &mut Engine, now_ms: u64, name: &str) -> String {
    let info = engine.queue_info(now_ms, name).expect("queue exists");
    let mut text = format!(
        "ready={} in_flight={} delayed={} counters={:?} next_seq={}\n",
        info.ready,
        info.in_flight,
        info.delayed,
        info.counters,
        engine.queue(name).unwrap().next_seq()
    );
    let queue = engine.queue(name).unwrap();
    for (seq, message) in queue.messages() {
        text += &format!("{seq}: {message:?}\n");
    }
    let fifo = queue.fifo().expect("FIFO queue");
    let mut window: Vec<String> = fifo.window().map(|entry| format!("{entry:?}")).collect();
    window.sort();
    let mut attempts: Vec<String> = fifo
        .attempts()
        .map(|(id, attempt)| format!("{id}: {attempt:?}"))
        .collect();
    attempts.sort();
    let holds: Vec<(&str, bool, usize)> = GROUPS
        .iter()
        .map(|group| (*group, fifo.group_held(group), fifo.group_in_flight(group)))
        .collect();
    let mut available = Vec::new();
    while let Some(next) = fifo.next_available(available.last().copied()) {
        available.push(next);
    }
    text += &format!("window={window:?}\nattempts={attempts:?}\n");
    text += &format!("holds={holds:?}\navailable={available:?}\n");
    text
}
