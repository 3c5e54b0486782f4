//! A seeded simulation of a fair queue: one heavy tenant, several light ones and messages without
//! a group id, under random sends (some delayed), receives (mostly one message at a time, some
//! batches, some with visibility 0), deletes, releases and extensions with held receipts, clock
//! jumps (some past the 5-minute quiet period), purges and restarts (the engine rebuilt from a
//! snapshot through the byte codec, or from the whole journal). After every step it checks the
//! engine's invariants (the tenants agree with the messages, the head indexes with the tenants)
//! and:
//!
//! - **quiet first:** a receive of one message takes the oldest ready message of a quiet tenant
//!   (messages without a group id are quiet), and a noisy tenant's message only when no quiet
//!   tenant's message is ready, then that of the noisy tenant with the fewest in flight (oldest
//!   first among equals). So no quiet tenant's ready message waits while a noisy tenant's message
//!   is delivered;
//! - **redelivery backoff** (seeds 1 and 3 mod 4 run with `exponential(1s,20s) jitter=30%`,
//!   the latter with `releases`): a message whose lease ran out is delivered again only after its
//!   attempt's delay, a released one at once (or after the delay, with `releases`);
//! - **noisy needs a backlog and recent sends:** a noisy tenant has ready or delayed messages and
//!   sent in the last 5 minutes;
//! - restarts lose nothing: the rebuilt engine has the same messages, the same tenants (noisy
//!   flags, last sends, processing windows) and answers the same.
//!
//! `cargo test` runs a fixed set of seeds. Longer runs: `LEASEQ_FAIR_SIM_SEEDS=N`,
//! `LEASEQ_FAIR_SIM_STEPS=N`, `LEASEQ_FAIR_SIM_SEED=x` (one seed, to reproduce a failure).

use std::collections::HashMap;
use std::fmt::Write as _;

use leaseq_core::{
    codec, DeleteOutcome, Engine, EngineConfig, Journal, MessageId, MessageState, QueueConfigPatch,
    ReceiptKey, ReceiveRequest, RedeliveryBackoff, SendInput,
};
use leaseq_testkit::sim::{Progress, Seeds};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

const SEEDS_DEFAULT: u64 = 16;
const STEPS_DEFAULT: usize = 2_000;
const START_MS: u64 = 1_700_000_000_000;
const QUIET_PERIOD_MS: u64 = 5 * 60 * 1000;
const QUEUE: &str = "tenants";
const LIGHT: [&str; 6] = ["l0", "l1", "l2", "l3", "l4", "l5"];

#[test]
fn fair_simulation() {
    let seeds = Seeds::from_env(
        "LEASEQ_FAIR_SIM",
        env!("CARGO_PKG_NAME"),
        env!("CARGO_CRATE_NAME"),
        SEEDS_DEFAULT,
        STEPS_DEFAULT,
    );
    let mut totals = Totals::default();
    for &seed in seeds.seeds() {
        let mut sim = Sim::new(seed);
        seeds.check(
            "fair simulation",
            seed,
            &mut sim,
            |sim, steps| sim.run(steps),
            |sim| Progress {
                step: sim.step,
                last_operations: sim.trace.clone(),
            },
        );
        totals.overtakes += sim.totals.overtakes;
        totals.noisy_deliveries += sim.totals.noisy_deliveries;
        totals.restarts += sim.totals.restarts;
        totals.quiet_again += sim.totals.quiet_again;
        totals.backed_off += sim.totals.backed_off;
    }
    // The run must have exercised what it claims to check.
    assert!(
        totals.overtakes > 0,
        "no quiet message overtook: {totals:?}"
    );
    assert!(totals.noisy_deliveries > 0, "no noisy delivery: {totals:?}");
    assert!(totals.restarts > 0, "no restart: {totals:?}");
    assert!(
        totals.backed_off > 0,
        "no redelivery after a backoff: {totals:?}"
    );
}

#[derive(Debug, Default)]
struct Totals {
    /// Receives where the fair choice was not the oldest ready message.
    overtakes: u64,
    /// Receives that delivered a noisy tenant's message (no quiet one was ready).
    noisy_deliveries: u64,
    restarts: u64,
    /// Noisy tenants seen quiet again after their quiet period.
    quiet_again: u64,
    /// Redeliveries of a message whose lease had run out, under a backoff.
    backed_off: u64,
}

/// When a message may be delivered again at the earliest, after its attempt `attempt`.
struct Track {
    attempt: u32,
    earliest_ms: u64,
    /// Whether the attempt's lease ran out (rather than being released).
    expired: bool,
}

struct Sim {
    rng: StdRng,
    engine: Engine,
    config: EngineConfig,
    key: ReceiptKey,
    journal: Journal,
    now_ms: u64,
    step: usize,
    next_id: u64,
    /// Message id → sequence number.
    seqs: HashMap<MessageId, u64>,
    ids: HashMap<u64, MessageId>,
    /// Receipts held, with their message.
    receipts: Vec<(String, u64)>,
    backoff: Option<RedeliveryBackoff>,
    tracks: HashMap<u64, Track>,
    trace: Vec<String>,
    totals: Totals,
}

impl Sim {
    fn new(seed: u64) -> Sim {
        let config = EngineConfig::default();
        let key = ReceiptKey::new([9; 16]);
        let mut engine = Engine::new(config.clone(), key.clone());
        let mut journal = Journal::new();
        let backoff = match seed % 4 {
            1 => RedeliveryBackoff::parse("exponential(1s,20s) jitter=30%").unwrap(),
            3 => RedeliveryBackoff::parse("exponential(1s,20s) jitter=30% releases").unwrap(),
            _ => None,
        };
        let patch = QueueConfigPatch {
            redelivery_backoff: Some(backoff.clone()),
            visibility_timeout_seconds: Some(20),
            fair_in_flight_min: Some(3),
            fair_processing_window_seconds: Some(10),
            ..QueueConfigPatch::default()
        };
        engine
            .create_queue(START_MS, QUEUE, &patch, Default::default(), &mut journal)
            .expect("queue created");
        Sim {
            rng: StdRng::seed_from_u64(seed),
            engine,
            config,
            key,
            journal,
            now_ms: START_MS,
            step: 0,
            next_id: 0,
            seqs: HashMap::new(),
            ids: HashMap::new(),
            receipts: Vec::new(),
            backoff,
            tracks: HashMap::new(),
            trace: Vec::new(),
            totals: Totals::default(),
        }
    }

    fn note(&mut self, text: String) {
        if self.trace.len() == 12 {
            self.trace.remove(0);
        }
        self.trace.push(format!("{}: {text}", self.step));
    }

    fn run(&mut self, steps: usize) {
        for step in 0..steps {
            self.step = step;
            match self.rng.random_range(0..100) {
                0..=39 => self.send(),
                40..=69 => self.receive(),
                70..=81 => self.delete(),
                82..=86 => self.change_visibility(),
                87..=95 => self.jump(),
                96..=97 => self.restart(),
                _ => {
                    if self.rng.random_bool(0.2) {
                        self.purge();
                    } else {
                        self.jump();
                    }
                }
            }
            self.engine.check_invariants();
            self.check_noisy();
        }
    }

    fn send(&mut self) {
        let group = match self.rng.random_range(0..10) {
            0..=4 => Some("heavy"),
            5..=8 => Some(LIGHT[self.rng.random_range(0..LIGHT.len())]),
            _ => None,
        };
        let mut input = SendInput::body(format!("b{}", self.next_id));
        input.group_id = group.map(str::to_string);
        if self.rng.random_bool(0.1) {
            input.delay_seconds = Some(self.rng.random_range(1..30));
        }
        let mut id = [0u8; 16];
        id[..8].copy_from_slice(&self.next_id.to_le_bytes());
        self.next_id += 1;
        let message_id = MessageId::from_random(id);
        let sent = self
            .engine
            .send(self.now_ms, QUEUE, input, message_id, &mut self.journal)
            .expect("send accepted");
        self.seqs.insert(sent.message_id, sent.seq);
        self.ids.insert(sent.seq, sent.message_id);
        self.note(format!("send {group:?} -> seq {}", sent.seq));
    }

    /// What a fair receive of one message must take now: (seq, whether from a noisy tenant).
    fn expected_next(&mut self) -> Option<(u64, bool, bool)> {
        self.engine
            .queue_info(self.now_ms, QUEUE)
            .expect("queue exists");
        let queue = self.engine.queue(QUEUE).expect("queue exists");
        let oldest = queue.next_ready(None);
        let Some(fair) = queue.fair() else {
            return oldest.map(|(_, seq)| (seq, false, false));
        };
        let quiet = fair
            .tenants()
            .filter(|(_, tenant)| !tenant.noisy)
            .filter_map(|(_, tenant)| tenant.head())
            .min();
        let pick = match quiet {
            Some(head) => Some((head.1, false)),
            None => fair
                .tenants()
                .filter(|(_, tenant)| tenant.noisy)
                .filter_map(|(_, tenant)| tenant.head().map(|head| (tenant.in_flight, head)))
                .min()
                .map(|(_, head)| (head.1, true)),
        };
        pick.map(|(seq, noisy)| (seq, noisy, oldest.map(|(_, s)| s) != Some(seq)))
    }

    fn receive(&mut self) {
        let single = self.rng.random_bool(0.7);
        let visibility = if self.rng.random_bool(0.05) {
            0
        } else {
            self.rng.random_range(1..40)
        };
        let max_messages = if single {
            1
        } else {
            self.rng.random_range(2..=10)
        };
        let expected = if single && visibility > 0 {
            self.expected_next()
        } else {
            None
        };
        let request = ReceiveRequest {
            max_messages,
            visibility_timeout_seconds: Some(visibility),
            client: None,
        };
        let deliveries = self
            .engine
            .receive(self.now_ms, QUEUE, request, &mut self.journal)
            .expect("receive");
        let seqs: Vec<u64> = deliveries
            .iter()
            .map(|d| self.seqs[&d.message_id])
            .collect();
        self.note(format!(
            "receive max={max_messages} vt={visibility}s -> {seqs:?}"
        ));
        if single && visibility > 0 {
            let got = seqs.first().copied();
            assert_eq!(
                got,
                expected.map(|(seq, _, _)| seq),
                "a receive of one took {got:?}, the fair choice was {expected:?}"
            );
            if let Some((_, noisy, overtook)) = expected {
                self.totals.noisy_deliveries += u64::from(noisy);
                self.totals.overtakes += u64::from(overtook);
            }
        }
        for (delivery, seq) in deliveries.into_iter().zip(seqs) {
            let attempt = delivery.receive_count;
            if let Some(track) = self.tracks.get(&seq) {
                assert_eq!(track.attempt + 1, attempt, "attempts of {seq}");
                assert!(
                    self.now_ms >= track.earliest_ms,
                    "{seq} delivered at {} before its backoff ended at {}",
                    self.now_ms,
                    track.earliest_ms
                );
                if self.backoff.is_some() && track.expired {
                    self.totals.backed_off += 1;
                }
            }
            let earliest_ms = if visibility == 0 {
                self.now_ms
            } else {
                let deadline_ms = self.now_ms + u64::from(visibility) * 1000;
                deadline_ms + self.delay_ms(seq, attempt)
            };
            let expired = visibility > 0;
            self.tracks.insert(
                seq,
                Track {
                    attempt,
                    earliest_ms,
                    expired,
                },
            );
            if visibility > 0 {
                self.receipts.push((delivery.receipt, seq));
            }
        }
    }

    /// The backoff delay after attempt `attempt` of message `seq` (0 without backoff).
    fn delay_ms(&self, seq: u64, attempt: u32) -> u64 {
        self.backoff
            .as_ref()
            .map_or(0, |backoff| backoff.delay_ms(attempt, &self.ids[&seq].0))
    }

    fn take_receipt(&mut self) -> Option<(String, u64)> {
        if self.receipts.is_empty() {
            return None;
        }
        let at = self.rng.random_range(0..self.receipts.len());
        Some(self.receipts.swap_remove(at))
    }

    fn delete(&mut self) {
        let Some((receipt, seq)) = self.take_receipt() else {
            return;
        };
        let result = self
            .engine
            .delete(self.now_ms, QUEUE, &receipt, &mut self.journal);
        if matches!(result, Ok((DeleteOutcome::Deleted, _))) {
            self.tracks.remove(&seq);
        }
        self.note(format!("delete -> {:?}", result.map(|r| r.0)));
    }

    fn change_visibility(&mut self) {
        let Some((receipt, seq)) = self.take_receipt() else {
            return;
        };
        let seconds = if self.rng.random_bool(0.5) {
            0
        } else {
            self.rng.random_range(1..60)
        };
        self.engine
            .queue_info(self.now_ms, QUEUE)
            .expect("queue exists");
        let in_flight = self
            .engine
            .queue(QUEUE)
            .and_then(|queue| queue.message(seq))
            .is_some_and(|message| message.state == MessageState::InFlight);
        let result =
            self.engine
                .change_visibility(self.now_ms, QUEUE, &receipt, seconds, &mut self.journal);
        if result.is_ok() {
            let releases = self
                .backoff
                .as_ref()
                .is_some_and(|backoff| backoff.releases);
            let attempt = self.tracks[&seq].attempt;
            let delay_ms = self.delay_ms(seq, attempt);
            let track = self
                .tracks
                .get_mut(&seq)
                .expect("a leased message is tracked");
            track.expired = seconds > 0 || (releases && in_flight);
            track.earliest_ms = match seconds {
                // A release waits only when the option says so, and only if it ends a lease.
                0 if releases && in_flight => self.now_ms + delay_ms,
                0 => self.now_ms,
                seconds => self.now_ms + u64::from(seconds) * 1000 + delay_ms,
            };
            if seconds > 0 {
                self.receipts.push((receipt, seq));
            }
        }
        self.note(format!("change-visibility {seconds}s -> {result:?}"));
    }

    fn jump(&mut self) {
        let by_ms = if self.rng.random_bool(0.03) {
            QUIET_PERIOD_MS + self.rng.random_range(0..60_000)
        } else {
            self.rng.random_range(0..5_000)
        };
        let noisy_before = self.noisy_tenants();
        self.now_ms += by_ms;
        self.engine
            .queue_info(self.now_ms, QUEUE)
            .expect("queue exists");
        let noisy_after = self.noisy_tenants();
        let quiet_again = noisy_before
            .iter()
            .filter(|group| !noisy_after.contains(group))
            .count();
        self.totals.quiet_again += quiet_again as u64;
        self.note(format!("jump +{by_ms}ms"));
    }

    fn noisy_tenants(&self) -> Vec<String> {
        let queue = self.engine.queue(QUEUE).expect("queue exists");
        let Some(fair) = queue.fair() else {
            return Vec::new();
        };
        fair.tenants()
            .filter(|(_, tenant)| tenant.noisy)
            .map(|(group, _)| group.to_string())
            .collect()
    }

    fn purge(&mut self) {
        let result = self
            .engine
            .purge_queue(self.now_ms, QUEUE, &mut self.journal);
        if result.is_ok() {
            self.receipts.clear();
            self.tracks.clear();
        }
        self.note(format!("purge -> {result:?}"));
    }

    /// A noisy tenant has a backlog and sent in the last five minutes.
    fn check_noisy(&mut self) {
        self.engine
            .queue_info(self.now_ms, QUEUE)
            .expect("queue exists");
        let queue = self.engine.queue(QUEUE).expect("queue exists");
        let Some(fair) = queue.fair() else { return };
        for (group, tenant) in fair.tenants() {
            if !tenant.noisy {
                continue;
            }
            assert!(
                !group.is_empty(),
                "messages without a group are never noisy"
            );
            assert!(
                tenant.ready_count() > 0 || tenant.delayed > 0,
                "noisy tenant {group} without a backlog: {tenant:?}"
            );
            assert!(
                self.now_ms < tenant.last_sent_at_ms + QUIET_PERIOD_MS,
                "noisy tenant {group} past its quiet period: {tenant:?}"
            );
        }
    }

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
        assert_eq!(
            describe(&mut rebuilt, self.now_ms),
            describe(&mut self.engine, self.now_ms),
            "the queue differs after a restart (from snapshot: {from_snapshot})"
        );
        self.note(format!("restart (from snapshot: {from_snapshot})"));
        self.engine = rebuilt;
        self.totals.restarts += 1;
    }
}

/// Everything a restart must keep: messages, tenants, the queue's processing window.
fn describe(engine: &mut Engine, now_ms: u64) -> String {
    let info = engine.queue_info(now_ms, QUEUE).expect("queue exists");
    let mut text = format!(
        "ready={} in_flight={} delayed={} counters={:?}\n",
        info.ready, info.in_flight, info.delayed, info.counters
    );
    let queue = engine.queue(QUEUE).expect("queue exists");
    for (seq, message) in queue.messages() {
        writeln!(text, "{seq}: {message:?}").unwrap();
    }
    if let Some(fair) = queue.fair() {
        let mut tenants: Vec<_> = fair.tenants().collect();
        tenants.sort_by(|a, b| a.0.cmp(b.0));
        for (group, tenant) in tenants {
            writeln!(text, "tenant {group:?}: {tenant:?}").unwrap();
        }
        writeln!(text, "fair: {:?} next={:?}", fair.processing, fair.next()).unwrap();
    }
    text
}
