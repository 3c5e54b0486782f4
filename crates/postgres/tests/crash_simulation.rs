//! The seeded crash simulation of the file log (`crates/server/tests/crash_simulation.rs`) on
//! the PostgreSQL log, through a fault-injecting TCP proxy between the node and PostgreSQL.
//!
//! Each seed runs in a schema of its own (dropped at the end, failed or not), with small
//! segments (1-16 KiB) and a checkpoint after every few hundred logged bytes, so runs cross
//! segment rolls, snapshots and partition removal. Each step is one of: a request (the file
//! simulation's workload, `crates/server/tests/crash_simulation/workload.rs`), a clock jump (the
//! node runs on a fake clock), a checkpoint, a fault of the proxy, a crash of the node, or a volley (a few requests
//! at once, cut off in flight by a crash of the node or by the proxy cutting every connection).
//! The proxy's faults (`crash_simulation/proxy.rs`): every connection cut at the next bytes the
//! node sends, before they reach PostgreSQL, inside them, or right after all of them went on
//! (the statement may commit; its answer is lost); PostgreSQL away (every connection cut, new
//! ones refused) for 20 to 600 ms; delays that hold each connection's bytes for its own few to
//! tens of ms, so statements on different sessions (the flushes in flight, each on a session of
//! its own, and the readers') overtake each other and commit out of order. A crash drops
//! the node (its service and store) abruptly and opens a new one on the same schema, through the
//! proxy or directly: recovery from PostgreSQL, which also fences out what the old node still
//! had in flight. Now and then the old node is kept alive while the new one takes over: its
//! next write must be fenced out and poison it.
//!
//! The model is the file simulation's (`crash_simulation/model.rs`): every answer is checked
//! against the states before and after it, every restart against what was acknowledged,
//! allowing each request that got `ServiceUnavailable` to have happened or not. What differs is
//! the store's answer to an unknown outcome (docs/design/postgres.md, "PostgreSQL failures"): it
//! becomes *unavailable*, refusing requests before they touch the engine (checked while
//! PostgreSQL is away), resolves the flush once PostgreSQL answers again (cuts and absences fall
//! into the resolution too), and serves again by itself, with no restart. So here a request
//! of unknown outcome leaves the window of unknown states open only until the next
//! acknowledged answer (which waited for every earlier record to be durable: frames commit in
//! LSN order with no gaps); once the proxy forwards again the node must serve again within
//! [`RECOVERY_TIMEOUT`]; a node fenced out must refuse everything. A receive whose bodies could
//! not be read (PostgreSQL away after a restart emptied the cache of frames) answers
//! `InternalError` after its lease was made durable: it counts as an unknown outcome too.
//! `a_lost_commit_fails_the_simulation` checks that the simulation can fail: restarts that lose
//! PostgreSQL's newest commit are caught.
//!
//! `cargo test` runs a few seeds. Longer runs: `LEASEQ_PG_SIM_SEEDS=N` (seeds 0..N),
//! `LEASEQ_PG_SIM_STEPS=N`, `LEASEQ_PG_SIM_SEED=x` (one seed, to reproduce a failure: it names
//! the seed and step and lists the last operations), `LEASEQ_PG_SIM_STATS=1` (what happened,
//! counted). A seed fixes every decision of the simulation; what PostgreSQL, the proxy and the
//! store's flusher finish before a cut or a crash depends on timing, so a failure may take a
//! few runs of its seed to come back.

mod common;

// `Dump::of` and `Dump::with_bodies_from` serve only the file log's simulation.
#[allow(dead_code)]
#[path = "../../server/tests/crash_simulation/model.rs"]
mod model;
#[path = "../../server/tests/crash_simulation/ops.rs"]
mod ops;
#[path = "crash_simulation/proxy.rs"]
mod proxy;
#[path = "../../server/tests/crash_simulation/volley.rs"]
mod volley;
#[path = "../../server/tests/crash_simulation/workload.rs"]
mod workload;

use std::cell::Cell;
use std::collections::{BTreeMap, VecDeque};
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use leaseq_core::{MessageId, PayloadRef, QueueConfigPatch};
use leaseq_postgres::{drop_schema, open_service, PgConfig, Sizes};
use leaseq_server::clock::{Clock as _, ManualClock};
use leaseq_server::payloads::ReadError;
use leaseq_server::{Api, Service};
use leaseq_sqs::ErrorCode;
use leaseq_testkit::sim::{Progress, Seeds};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use model::{check_recovery, check_refused, check_request, check_time_passed, outcome_unknown};
use model::{Dump, Ledger, Window};
use ops::{Held, Request};
use proxy::{Cut, Proxy};
use workload::{caller, summary, DLQ, MAIN};

const SEEDS_DEFAULT: u64 = 3;
const STEPS_DEFAULT: usize = 150;
const TRACE_LEN: usize = 40;
const START_MS: u64 = 1_700_000_000_000;
/// How long the node may take to serve again by itself once PostgreSQL answers again (its
/// reconnect backoff is at most 1 s; the machine is slow and shared).
const RECOVERY_TIMEOUT: Duration = Duration::from_secs(20);
/// How often a node may fail to open (PostgreSQL away, a cut in its recovery, PostgreSQL out of
/// connections for a moment) before the run gives up; the waits between attempts grow.
const OPEN_ATTEMPTS_MAX: usize = 20;

#[test]
fn crash_simulation() {
    // `LEASEQ_PG_SIM_SEEDS`, `LEASEQ_PG_SIM_STEPS`, `LEASEQ_PG_SIM_SEED`, `LEASEQ_PG_SIM_STATS`.
    let seeds = Seeds::from_env(
        "LEASEQ_PG_SIM",
        env!("CARGO_PKG_NAME"),
        env!("CARGO_CRATE_NAME"),
        SEEDS_DEFAULT,
        STEPS_DEFAULT,
    );
    seeds.tally(|seed| run_seed(&seeds, seed));
}

/// The simulation can fail: a run whose restarts lose PostgreSQL's newest commit after the newest
/// snapshot (as an asynchronous standby's promotion would) is caught within a few restarts.
#[test]
fn a_lost_commit_fails_the_simulation() {
    let seeds = Seeds::from_env(
        "LEASEQ_PG_SIM_SABOTAGE",
        env!("CARGO_PKG_NAME"),
        env!("CARGO_CRATE_NAME"),
        1,
        STEPS_DEFAULT,
    );
    let failed = std::panic::catch_unwind(|| {
        with_sim(&seeds, 0, true, |sim| sim.lost_commits);
    });
    let message = failed.expect_err("a run that loses commits must fail");
    let message = message
        .downcast_ref::<String>()
        .map(String::as_str)
        .unwrap_or_default();
    assert!(
        message.contains("sabotage: lost the newest commit"),
        "the failure is the lost commit's: {message}"
    );
}

/// Drops the seed's schema when the seed ends, passed or failed.
struct SchemaGuard {
    connection: String,
    schema: String,
}

impl Drop for SchemaGuard {
    fn drop(&mut self) {
        if let Err(error) = drop_schema(&self.connection, &self.schema) {
            eprintln!("could not drop schema {}: {error}", self.schema);
        }
    }
}

/// Runs one seed; on failure, panics with the seed, the step and the last operations.
fn run_seed(seeds: &Seeds, seed: u64) -> BTreeMap<String, u64> {
    with_sim(seeds, seed, false, |sim| {
        sim.count_proxy();
        std::mem::take(&mut sim.tally)
    })
}

/// Runs one seed (`sabotage`: losing commits, see [`Sim::lose_newest_commit`]) in a schema of
/// its own, and reads `result` off the simulation before dropping it and the schema.
fn with_sim<T>(seeds: &Seeds, seed: u64, sabotage: bool, result: impl FnOnce(&mut Sim) -> T) -> T {
    // The two tests of this file run at once in one process: one schema each.
    let test = if sabotage { "sabotage" } else { "sim" };
    let schema = format!("leaseq_pg_{test}_{}_{seed}", std::process::id());
    let direct = common::connection(&schema);
    // PostgreSQL is shared with other tests: a moment with every connection taken is waited out.
    let mut dropped = drop_schema(&direct, &schema);
    for attempt in 1..OPEN_ATTEMPTS_MAX as u64 {
        if dropped.is_ok() {
            break;
        }
        std::thread::sleep(Duration::from_millis(50 * attempt));
        dropped = drop_schema(&direct, &schema);
    }
    dropped.expect("PostgreSQL to drop a schema in");
    let _guard = SchemaGuard {
        connection: direct.clone(),
        schema: schema.clone(),
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    let mut sim = Sim::new(seed, schema, direct);
    sim.sabotage = sabotage;
    seeds.check(
        "PostgreSQL crash simulation",
        seed,
        &mut sim,
        |sim, steps| runtime.block_on(sim.run(steps)),
        |sim| Progress {
            step: sim.step,
            last_operations: sim.trace.iter().cloned().collect(),
        },
    );
    let result = result(&mut sim);
    // The node goes before its schema does.
    drop(sim);
    result
}

/// PostgreSQL's address, as the tests' connection string names it.
fn target() -> SocketAddr {
    let config: tokio_postgres::Config = common::connection("x").parse().unwrap();
    let host = match config.get_hosts().first() {
        Some(tokio_postgres::config::Host::Tcp(host)) if host != "localhost" => host.clone(),
        _ => "127.0.0.1".into(),
    };
    let port = config.get_ports().first().copied().unwrap_or(5432);
    format!("{host}:{port}")
        .parse()
        .expect("PostgreSQL at an IP address")
}

pub(crate) struct Sim {
    rng: StdRng,
    clock: ManualClock,
    proxy: Proxy,
    /// The schema's connection strings: directly to PostgreSQL, and through the proxy.
    direct: String,
    through_proxy: String,
    schema: String,
    sizes: Sizes,
    /// Flushes in flight: 1 (the default) for a quarter of the seeds, 2 to 4 for the rest, so
    /// commits out of order and the gaps a crash leaves are simulated too.
    flushes_in_flight: usize,
    checkpoint_log_bytes_min: u64,
    backend: Option<Arc<Service>>,
    /// Whether the running node was opened directly (the proxy's faults do not reach it).
    backend_direct: bool,
    ledger: Ledger,
    /// Requests since the last acknowledged state whose outcome is unknown.
    window: Window,
    held: Vec<Held>,
    /// Restarts so far (receipts remember the one they were issued in).
    restarts: u32,
    next_body: u64,
    /// Every body a dump read, by message: what a dump names a body it cannot read now
    /// (PostgreSQL out of reach, the frame not cached) after.
    known_bodies: BTreeMap<MessageId, String>,
    /// Steps left with delays on.
    delay_steps: u32,
    /// When PostgreSQL, away now, may come back (the node's reconnects back off from 50 ms
    /// to 1 s, so an absence must last in real time to be seen at all).
    away_until: Option<Instant>,
    /// Whether restarts lose the newest commit (the self-check of the simulation).
    sabotage: bool,
    lost_commits: u64,
    step: usize,
    trace: VecDeque<String>,
    tally: BTreeMap<String, u64>,
}

impl Sim {
    fn new(seed: u64, schema: String, direct: String) -> Sim {
        let mut rng = StdRng::seed_from_u64(seed);
        let proxy = Proxy::start(target(), rng.random());
        let through_proxy = format!("{direct} host=127.0.0.1 port={}", proxy.address.port());
        Sim {
            sizes: Sizes {
                // Small segments, so runs cross segment rolls and removals.
                segment_bytes_max: rng.random_range(1024..=16384),
            },
            checkpoint_log_bytes_min: rng.random_range(256..=4096),
            flushes_in_flight: 1 + (seed % 4) as usize,
            rng,
            clock: ManualClock::new(START_MS),
            proxy,
            direct,
            through_proxy,
            schema,
            backend: None,
            backend_direct: true,
            ledger: Ledger::default(),
            window: Window::new(&Dump::default()),
            held: Vec::new(),
            restarts: 0,
            next_body: 0,
            known_bodies: BTreeMap::new(),
            delay_steps: 0,
            away_until: None,
            sabotage: false,
            lost_commits: 0,
            step: 0,
            trace: VecDeque::new(),
            tally: BTreeMap::new(),
        }
    }

    fn now_ms(&self) -> u64 {
        self.clock.now_ms()
    }

    fn backend(&self) -> Arc<Service> {
        self.backend.clone().expect("a running backend")
    }

    fn note(&mut self, line: String) {
        if self.trace.len() == TRACE_LEN {
            self.trace.pop_front();
        }
        self.trace.push_back(format!("{:>5} {line}", self.step));
    }

    fn count(&mut self, key: &str) {
        *self.tally.entry(key.to_string()).or_default() += 1;
    }

    /// Adds what the proxy did to the tally.
    fn count_proxy(&mut self) {
        let counters = self.proxy.counters();
        let counts = [
            ("proxy: connections forwarded", &counters.connections),
            ("proxy: connections refused", &counters.refused),
            ("proxy: chunks held back (delays)", &counters.held_chunks),
            ("proxy: cut before a request", &counters.cuts_before),
            ("proxy: cut inside a request", &counters.cuts_inside),
            ("proxy: cut after a whole request", &counters.cuts_after),
        ]
        .map(|(key, counter)| (key, counter.load(Ordering::Relaxed)));
        for (key, count) in counts {
            *self.tally.entry(key.to_string()).or_default() += count;
        }
    }

    /// The live engine (see [`Dump::of`]); a body the store cannot read now because PostgreSQL
    /// is out of reach is named after what an earlier dump read for the message. A body
    /// PostgreSQL answers it does not have stays "lost ID", which no model state has.
    fn dump_live(&mut self) -> Dump {
        let backend = self.backend();
        self.dump_of(&backend)
    }

    fn dump_of(&mut self, backend: &Service) -> Dump {
        let unreadable = Cell::new(0u64);
        let known = &self.known_bodies;
        let fallback = |_: &PayloadRef, id: MessageId, error: &ReadError| {
            if matches!(error, ReadError::Log(error) if error.message.contains("no frame holds")) {
                return None;
            }
            unreadable.set(unreadable.get() + 1);
            known.get(&id).cloned()
        };
        let dump = Dump::of_crashed(backend, self.now_ms(), Some(&fallback));
        for _ in 0..unreadable.get() {
            self.count("dump: a body out of reach, named from an earlier read");
        }
        for (body, message) in &dump.messages {
            if !body.starts_with("lost ") {
                self.known_bodies.insert(message.id, body.clone());
            }
        }
        dump
    }

    /// Opens a node on the schema, through the proxy or directly; retries while PostgreSQL is
    /// away (bringing it back) or a cut falls into the recovery.
    fn open(&mut self, directly: bool) -> Service {
        for attempt in 0..OPEN_ATTEMPTS_MAX as u64 {
            let connection = if directly {
                self.direct.clone()
            } else {
                self.through_proxy.clone()
            };
            let config = PgConfig {
                schema: self.schema.clone(),
                sizes: self.sizes,
                flushes_in_flight: self.flushes_in_flight,
                ..PgConfig::new(connection)
            };
            match open_service(
                &config,
                common::service_config(),
                self.checkpoint_log_bytes_min,
            ) {
                Ok(service) => return service.with_clock(Arc::new(self.clock.clone())),
                Err(error) => {
                    self.note(format!("start failed: {error}"));
                    if self.proxy.is_away() {
                        self.count("start refused while PostgreSQL is away");
                        if let Some(until) = self.away_until {
                            std::thread::sleep(until.saturating_duration_since(Instant::now()));
                        }
                        self.come_back();
                    } else {
                        // A cut in its recovery, or PostgreSQL (shared with other tests) full.
                        self.count("start failed (a cut in its recovery)");
                        std::thread::sleep(Duration::from_millis(20 * attempt));
                    }
                }
            }
        }
        panic!("the node did not start in {OPEN_ATTEMPTS_MAX} attempts");
    }

    async fn run(&mut self, steps: usize) {
        let backend = self.open(false);
        self.backend_direct = false;
        self.backend = Some(Arc::new(backend));
        let dump = self.dump_live();
        self.ledger.commit(dump);
        self.window = Window::new(&self.ledger.acked);
        let dead_letter_queue = QueueConfigPatch {
            visibility_timeout_seconds: Some(2),
            ..QueueConfigPatch::default()
        };
        self.request(Request::CreateQueue {
            name: DLQ,
            patch: dead_letter_queue,
        })
        .await;
        let main = self.random_patch(MAIN, true);
        self.request(Request::CreateQueue {
            name: MAIN,
            patch: main,
        })
        .await;
        for step in 1..=steps {
            self.step = step;
            self.step_once().await;
            self.age_faults();
        }
        // The end: PostgreSQL back, the node serving again by itself, then one last restart
        // checked against everything acknowledged.
        self.step += 1;
        self.proxy.disarm();
        if let Some(until) = self.away_until {
            tokio::time::sleep(until.saturating_duration_since(Instant::now())).await;
        }
        self.come_back();
        self.wait_until_serving().await;
        self.crash().await;
    }

    async fn step_once(&mut self) {
        if self.window.is_open() {
            // The store may be unavailable, and no clock jump is checked against a window. Cuts
            // and absences now fall into the store's resolution of its unknown flush.
            match self.rng.random_range(0..100) {
                0..40 => {
                    let request = self.random_request();
                    self.request(request).await;
                }
                40..52 => self.crash().await,
                52..60 => self.checkpoint(),
                60..66 => self.arm_cut(),
                66..70 => self.go_away(),
                _ => {
                    if let Some(until) = self.away_until {
                        tokio::time::sleep(until.saturating_duration_since(Instant::now())).await;
                    }
                    self.come_back();
                    self.wait_until_serving().await;
                }
            }
            return;
        }
        match self.rng.random_range(0..1000) {
            0..700 => {
                let request = self.random_request();
                self.request(request).await;
            }
            700..790 => self.jump_clock(),
            790..815 => self.checkpoint(),
            815..875 => self.arm_cut(),
            875..895 => self.go_away(),
            895..915 => self.delays(),
            915..945 => self.crash().await,
            _ => self.volley().await,
        }
    }

    /// Faults last a few steps: PostgreSQL comes back, delays end.
    fn age_faults(&mut self) {
        let over = self.away_until.is_some_and(|until| until <= Instant::now());
        if over && self.rng.random_bool(0.5) {
            self.come_back();
        }
        if self.delay_steps > 0 {
            self.delay_steps -= 1;
            if self.delay_steps == 0 {
                self.proxy.set_delays(0);
                self.note("proxy: delays end".into());
            }
        }
    }

    fn arm_cut(&mut self) {
        let cut = match self.rng.random_range(0..3) {
            0 => Cut::Before,
            1 => Cut::Inside,
            _ => Cut::After,
        };
        self.proxy.arm(cut);
        self.note(format!(
            "fault: cut every connection at the next request, {cut:?}"
        ));
        self.count(&format!("fault: cut armed, {cut:?}"));
    }

    fn go_away(&mut self) {
        let away_ms = self.rng.random_range(20..600);
        self.away_until = Some(Instant::now() + Duration::from_millis(away_ms));
        self.proxy.go_away();
        self.note(format!(
            "fault: PostgreSQL away for {away_ms} ms (connections cut, new ones refused)"
        ));
        self.count("fault: PostgreSQL away");
    }

    fn come_back(&mut self) {
        if self.proxy.is_away() {
            self.proxy.come_back();
            self.note("PostgreSQL back".into());
        }
        self.away_until = None;
    }

    fn delays(&mut self) {
        let delay_max_ms = *[5, 20, 50].get(self.rng.random_range(0..3)).expect("some");
        self.proxy.set_delays(delay_max_ms);
        self.delay_steps = self.rng.random_range(3..=12);
        self.note(format!(
            "fault: delays up to {delay_max_ms} ms per connection for {} steps",
            self.delay_steps
        ));
        self.count("fault: delays on");
    }

    /// Waits until the node serves again by itself (PostgreSQL forwards again): its store
    /// resolves the flush of unknown outcome and becomes writable, with no restart.
    async fn wait_until_serving(&mut self) {
        let backend = self.backend();
        let started = Instant::now();
        let mut waited = false;
        loop {
            match backend.hosts().only().store().writable() {
                Ok(()) => break,
                Err(error) if error.is_poisoned() => {
                    panic!("the store was poisoned by an unknown outcome: {error}")
                }
                Err(error) => {
                    assert!(
                        started.elapsed() < RECOVERY_TIMEOUT,
                        "the node did not serve again by itself within {RECOVERY_TIMEOUT:?} \
                         of PostgreSQL coming back: {error}"
                    );
                    waited = true;
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
            }
        }
        if waited {
            let elapsed = started.elapsed();
            self.note(format!(
                "the node serves again by itself after {} ms",
                elapsed.as_millis()
            ));
            self.count("node served again by itself (no restart)");
        }
    }

    /// Issues one request and checks its answer against the states before and after.
    async fn request(&mut self, request: Request) {
        let before = self.window.states.last().expect("states").clone();
        // Unavailable, with PostgreSQL away: nothing can resolve the flush meanwhile.
        let unavailable = !self.backend_direct
            && self.proxy.is_away()
            && self.backend().hosts().only().store().writable().is_err();
        let result = self.backend().execute(request.action(), &caller()).await;
        let after = self.dump_live();
        self.note(format!("{} -> {}", request.describe(), summary(&result)));
        let unchanged = before.queues == after.queues && before.messages == after.messages;
        if unavailable {
            assert!(
                outcome_unknown(&result) && unchanged,
                "an unavailable store must turn requests away before they change the engine: \
                 {result:?}"
            );
            self.count("request turned away while unavailable (checked)");
        }
        match &result {
            Err(_) if outcome_unknown(&result) => {
                self.count(if unchanged {
                    "request refused (ServiceUnavailable), engine unchanged"
                } else {
                    "request of unknown outcome (ServiceUnavailable), engine changed"
                });
                self.window.states.push(after);
            }
            Err(error)
                if error.code == ErrorCode::InternalError
                    && matches!(request, Request::Receive { .. }) =>
            {
                // The lease was taken and made durable; the bodies could not be read.
                self.count("receive of unknown outcome (bodies out of reach)");
                self.window.states.push(after);
            }
            Err(error) => {
                check_refused(&before, &after, &request, error);
                self.count(&format!("refused: {:?}", error.code));
                if !self.window.is_open() {
                    self.ledger.commit(after);
                    self.window = Window::new(&self.ledger.acked);
                }
            }
            Ok(outcome) => {
                check_request(&before, &after, &request, outcome);
                self.count_effects(&before, &after, &request);
                if let Request::Receive { name, .. } = &request {
                    self.hold(outcome, name, &after);
                }
                let kind = request.describe();
                let kind = kind.split(' ').next().unwrap_or_default();
                self.count(&format!("acknowledged: {kind}"));
                if self.window.is_open() {
                    // Durable up to the tail this request saw: every earlier record too.
                    self.count("acknowledged after unknown outcomes (window closed)");
                }
                self.ledger.commit(after);
                self.window = Window::new(&self.ledger.acked);
            }
        }
    }

    fn jump_clock(&mut self) {
        let jump_ms = match self.rng.random_range(0..10) {
            0..6 => self.rng.random_range(0..1500),
            6..9 => self.rng.random_range(1500..20_000),
            _ => self.rng.random_range(60_000..400_000),
        };
        self.clock.advance(jump_ms);
        let after = self.dump_live();
        check_time_passed(&self.ledger.acked, &after);
        self.note(format!("clock +{jump_ms} ms"));
        let expired = self.ledger.acked.messages.len() - after.messages.len();
        for _ in 0..expired {
            self.count("retention ended");
        }
        self.ledger.commit(after);
        self.window = Window::new(&self.ledger.acked);
    }

    fn checkpoint(&mut self) {
        let result = self.backend().hosts().checkpoint();
        self.note(format!("checkpoint -> {result:?}"));
        self.count(if result.is_ok() {
            "checkpoint written"
        } else {
            "checkpoint failed"
        });
    }

    /// Drops the node abruptly and opens a new one on the schema. Now and then the old node
    /// lives on behind the proxy while the new one takes over; its next write is then checked
    /// to be fenced out.
    async fn crash(&mut self) {
        let old = self.backend.take().expect("a running backend");
        let zombie = self.rng.random_bool(0.15);
        let directly = self.rng.random_bool(0.3);
        if !zombie {
            drop(old);
            self.note("crash: the node is dropped".into());
            self.count("crash: node dropped");
            self.restart(directly).await;
            return;
        }
        self.note("crash: a new node takes over while the old one lives".into());
        self.count("crash: taken over while the old node lives");
        self.restart(directly).await;
        self.check_zombie(old).await;
    }

    /// The replaced node's next change must be fenced out: refused, and the store poisoned.
    async fn check_zombie(&mut self, old: Arc<Service>) {
        let request = self.random_request();
        let before = self.dump_of(&old);
        let result = old.execute(request.action(), &caller()).await;
        let after = self.dump_of(&old);
        self.note(format!(
            "old node: {} -> {}",
            request.describe(),
            summary(&result)
        ));
        let changed = before.queues != after.queues || before.messages != after.messages;
        if changed {
            assert!(
                outcome_unknown(&result),
                "the replaced node acknowledged a change: {result:?}"
            );
            // Fenced out once its flush reaches PostgreSQL (the proxy may be away, or a cut
            // may have made the flush's outcome unknown first): then poisoned, never writable.
            if let Some(until) = self.away_until {
                tokio::time::sleep(until.saturating_duration_since(Instant::now())).await;
            }
            self.come_back();
            let started = Instant::now();
            loop {
                match old.hosts().only().store().writable() {
                    Err(error) if error.is_poisoned() => break,
                    Ok(()) => panic!("the replaced node's store is writable after its write"),
                    Err(error) => assert!(
                        started.elapsed() < RECOVERY_TIMEOUT,
                        "the replaced node's store was not fenced out: {error}"
                    ),
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            self.count("old node fenced out and poisoned");
        }
        drop(old);
    }

    /// Opens a new node and checks what it recovered against the window.
    async fn restart(&mut self, directly: bool) {
        if self.sabotage {
            self.lose_newest_commit().await;
        }
        let backend = self.open(directly);
        self.backend_direct = directly;
        if backend.hosts().only().checkpoint_stats().snapshot_bytes > 0 {
            self.count("restart from a snapshot");
        }
        // Segment 1 always has frames (the first node's queues): a log that starts later lost
        // its first partitions to a checkpoint's removal.
        let segments = backend.hosts().only().store().segments();
        if segments.first().is_some_and(|s| s.segment > 1) {
            self.count("restart over a log whose first segments were removed");
        }
        let last_segment = segments.last().map_or(0, |s| s.segment);
        let segments_max = self
            .tally
            .entry("segments: the newest a seed reached (summed over seeds)".into());
        let segments_max = segments_max.or_default();
        *segments_max = (*segments_max).max(last_segment);
        let recovered = self.dump_of(&backend);
        check_recovery(&self.window, &recovered);
        self.note(format!(
            "restart {}: {} messages",
            if directly {
                "directly"
            } else {
                "through the proxy"
            },
            recovered.messages.len()
        ));
        self.count(if directly {
            "restart: directly"
        } else {
            "restart: through the proxy"
        });
        if self.window.is_open() {
            self.count("restart after unknown outcomes");
        }
        self.ledger.commit(recovered);
        self.window = Window::new(&self.ledger.acked);
        self.backend = Some(Arc::new(backend));
        self.restarts += 1;
    }

    /// Deletes the newest frame if no snapshot covers it: the commit of an acknowledged request
    /// lost, which the restart's check must notice.
    async fn lose_newest_commit(&mut self) {
        let (client, connection) = tokio_postgres::connect(&self.direct, tokio_postgres::NoTls)
            .await
            .expect("a direct connection");
        let connection = tokio::spawn(connection);
        let sql = format!(
            "DELETE FROM {s}.frame WHERE last_lsn = (SELECT max(last_lsn) FROM {s}.frame) \
             AND last_lsn > coalesce((SELECT max(lsn) FROM {s}.snapshot), 0)",
            s = self.schema
        );
        let deleted = client.execute(&sql, &[]).await.expect("a delete");
        drop(client);
        let _ = connection.await;
        if deleted > 0 {
            self.lost_commits += 1;
            self.note("sabotage: lost the newest commit".into());
        }
    }

    /// A few requests at once, cut off in flight: by a crash of the node (the tasks are
    /// dropped wherever they are) or by the proxy cutting every connection (they get their
    /// answers; the node serves on). Those answered with success must survive exactly.
    async fn volley(&mut self) {
        let (requests, deleted) = self.volley_requests();
        let before = self.ledger.acked.clone();
        let tasks = self.volley_start(&requests);
        for _ in 0..self.rng.random_range(0..=3) {
            tokio::task::yield_now().await;
        }
        if self.rng.random_bool(0.5) {
            // Lets the flush get further (a round trip is about a millisecond).
            let wait = Duration::from_micros(self.rng.random_range(0..3000));
            tokio::time::sleep(wait).await;
        }
        let crash = self.rng.random_bool(0.5);
        let mut results = Vec::new();
        if crash {
            for task in &tasks {
                task.abort();
            }
            for task in tasks {
                results.push(task.await.ok());
            }
        } else {
            if self.rng.random_bool(0.3) {
                self.go_away();
            } else {
                self.proxy.cut_all();
            }
            for task in tasks {
                results.push(Some(task.await.expect("a request task")));
            }
        }
        let live = self.dump_live();
        self.window = self.volley_window(&requests, &results, (&before, &live), &deleted);
        if crash {
            drop(self.backend.take());
            self.note("volley: the node is dropped".into());
            self.count("crash: during a volley");
            let directly = self.rng.random_bool(0.3);
            self.restart(directly).await;
        } else {
            self.note("volley: every connection cut under it".into());
            self.count("volley: connections cut under it");
        }
    }
}
