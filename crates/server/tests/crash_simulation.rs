//! A seeded simulation of the durable embedded backend with crashes (the counterpart of the
//! engine's `crates/core/tests/simulation.rs`): requests through `Api::execute` on a log in
//! `leaseq_wal::fault::FaultStorage`, with power losses, process crashes that tear the log's tail
//! at a random byte, failed fsyncs, a full disk, and checkpoints (explicit, and in the background
//! after a few hundred logged bytes), each crash followed by recovery through `recover_with`.
//!
//! Each step is one of: a request (create a queue with or without a redrive policy, send or send
//! a batch with and without delay, receive with a short lease, delete or delete a batch with
//! current and superseded receipts, change visibility (0 included), purge, set attributes,
//! delete a queue), a clock jump (the backend runs on a fake clock, `Service::with_clock`), a
//! checkpoint, an armed fault (the next fsync fails; the disk fills), a crash and restart, a
//! volley (a few requests at once, crashed while in flight), or a look at what a power loss now
//! would recover (on a `FaultStorage::fork`, leaving the run undisturbed).
//!
//! The requests (`crash_simulation/workload.rs`), the model and the volleys' requests are shared
//! with the same simulation on the PostgreSQL log (`crates/postgres/tests/crash_simulation.rs`).
//!
//! The model is what the backend acknowledged (see `crash_simulation/model.rs`): every answer
//! is checked against the states before and after it, and every restart against the
//! acknowledged state, allowing each request that got no answer or an error to have happened,
//! partly happened or not happened. Checked throughout: every acknowledged send is there unless an
//! acknowledged delete, purge, retention or dead-letter move explains its absence; nothing gone
//! comes back; nothing never sent appears; receive counts never go down; the receipt of the
//! current attempt deletes and changes visibility, before a crash and after; a failed write stops
//! every later request until a restart; `Engine::check_invariants` holds.
//!
//! `cargo test` runs a fixed set of seeds. Longer runs: `LEASEQ_CRASH_SIM_SEEDS=N` (seeds 0..N),
//! `LEASEQ_CRASH_SIM_STEPS=N`, `LEASEQ_CRASH_SIM_SEED=x` (one seed, to reproduce a failure;
//! the failure names the seed and step and lists the last operations), `LEASEQ_CRASH_SIM_STATS=1`
//! (what happened, counted). A seed fixes every decision of the simulation; what the log's sync
//! thread and a background checkpoint finish before a crash still depends on thread timing, so
//! a failure may take a few runs of its seed to come back.

#[path = "crash_simulation/model.rs"]
mod model;
#[path = "crash_simulation/ops.rs"]
mod ops;
#[path = "crash_simulation/volley.rs"]
mod volley;
#[path = "crash_simulation/workload.rs"]
mod workload;

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;

use std::time::Duration;

use leaseq_core::{codec, EngineConfig, PayloadRef, QueueConfigPatch, ReceiptKey};
use leaseq_server::clock::{Clock as _, ManualClock};
use leaseq_server::data_dir::recover_with;
use leaseq_server::{Api, Service, ServiceConfig};
use leaseq_testkit::sim::{Progress, Seeds};
use leaseq_wal::fault::{CrashMode, FaultStorage};
use leaseq_wal::format::{decode_frame, frame_len_bytes};
use leaseq_wal::{segment_file_name, FsyncPolicy, Options, Recovery, Storage};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use model::{check_recovery, check_refused, check_request, check_time_passed, outcome_unknown};
use model::{Dump, Ledger, Window};
use ops::{Held, Request};
use workload::{caller, summary, DLQ, MAIN};

const SEEDS_DEFAULT: u64 = 20;

const STEPS_DEFAULT: usize = 1000;
const TRACE_LEN: usize = 40;
const START_MS: u64 = 1_700_000_000_000;

#[test]
fn crash_simulation() {
    // `LEASEQ_CRASH_SIM_SEEDS`, `LEASEQ_CRASH_SIM_STEPS`, `LEASEQ_CRASH_SIM_SEED`.
    let seeds = Seeds::from_env(
        "LEASEQ_CRASH_SIM",
        env!("CARGO_PKG_NAME"),
        env!("CARGO_CRATE_NAME"),
        SEEDS_DEFAULT,
        STEPS_DEFAULT,
    );
    seeds.tally(|seed| run_seed(&seeds, seed));
}

/// Runs one seed; on failure, panics with the seed, the step and the last operations.
fn run_seed(seeds: &Seeds, seed: u64) -> BTreeMap<String, u64> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    let mut sim = Sim::new(seed);
    seeds.check(
        "crash simulation",
        seed,
        &mut sim,
        |sim, steps| runtime.block_on(sim.run(steps)),
        |sim| Progress {
            step: sim.step,
            last_operations: sim.trace.iter().cloned().collect(),
        },
    );
    sim.tally
}

fn config() -> ServiceConfig {
    ServiceConfig {
        engine: EngineConfig::default(),
        region: "us-east-1".into(),
        account_id: "000000000000".into(),
    }
}

struct Sim {
    rng: StdRng,
    clock: ManualClock,
    storage: FaultStorage,
    backend: Option<Arc<Service>>,
    options: Options,
    checkpoint_log_bytes_min: u64,
    ledger: Ledger,
    /// Requests since the last acknowledged state whose outcome is unknown.
    window: Window,
    held: Vec<Held>,
    /// Restarts so far (receipts remember the one they were issued in).
    restarts: u32,
    next_body: u64,
    /// Crashes since the disk was limited (`None`: it is not).
    space_limited_crashes: Option<u32>,
    step: usize,
    trace: VecDeque<String>,
    tally: BTreeMap<String, u64>,
}

impl Sim {
    fn new(seed: u64) -> Sim {
        let mut rng = StdRng::seed_from_u64(seed);
        let options = Options {
            fsync: FsyncPolicy::Always,
            // Small segments, so runs cross segment rolls and removals.
            segment_size_max_bytes: rng.random_range(2048..=16384),
            ..Options::default()
        };
        Sim {
            checkpoint_log_bytes_min: rng.random_range(256..=4096),
            rng,
            clock: ManualClock::new(START_MS),
            storage: FaultStorage::new(),
            backend: None,
            options,
            ledger: Ledger::default(),
            window: Window::new(&Dump::default()),
            held: Vec::new(),
            restarts: 0,
            next_body: 0,
            space_limited_crashes: None,
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

    /// The running backend's state. A write in the background (a checkpoint's) may have failed
    /// since the last request, on a full disk: the log is then poisoned, and the payloads that
    /// checkpoints relocated into records it lost cannot be read. Those messages are still
    /// where they were on disk (no segment goes before the records that relocate out of it are
    /// durable), so they keep the bodies the acknowledged state knew them by; the next request
    /// is refused, and the restart after it checks what the disk holds.
    fn dump_live(&self) -> Dump {
        Dump::of(&self.backend(), self.now_ms()).with_bodies_from(&self.ledger.acked)
    }

    /// Opens the backend on `storage` as a restarted server would (same receipt key).
    fn open(&self, storage: &FaultStorage) -> Result<(Service, Recovery), String> {
        let clock = self.clock.clone();
        recover_with(
            Arc::new(storage.clone()),
            config(),
            ReceiptKey::new([7; 16]),
            self.options.clone(),
            self.checkpoint_log_bytes_min,
        )
        .map(|(backend, recovery)| {
            let backend = backend.with_clock(Arc::new(clock));
            (backend, recovery)
        })
        .map_err(|error| error.to_string())
    }

    async fn run(&mut self, steps: usize) {
        let (backend, _) = self.open(&self.storage).expect("a fresh start");
        self.backend = Some(Arc::new(backend));
        self.ledger.commit(self.dump_live());
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
        }
        self.step += 1;
        self.crash(CrashMode::DropUnsynced).await;
    }

    async fn step_once(&mut self) {
        if self.window.is_open() {
            // Every request fails until a restart; crash soon.
            if self.rng.random_bool(0.5) {
                let mode = self.random_crash_mode();
                self.crash(mode).await;
            } else {
                let request = self.random_request();
                self.request(request).await;
            }
            return;
        }
        match self.rng.random_range(0..1000) {
            0..750 => {
                let request = self.random_request();
                self.request(request).await;
            }
            750..850 => self.jump_clock(),
            850..875 => self.checkpoint(),
            875..905 => {
                let mode = self.random_crash_mode();
                self.crash(mode).await;
            }
            905..925 => {
                self.storage.fail_next_sync();
                self.note("fault: the next fsync fails".into());
                self.count("fault: fsync armed");
            }
            925..940 => self.fill_disk(),
            940..970 => self.volley().await,
            _ => self.check_fork(),
        }
    }

    fn random_crash_mode(&mut self) -> CrashMode {
        match self.rng.random_range(0..4) {
            0 => CrashMode::DropUnsynced,
            1 => CrashMode::KeepTornPrefix { bytes: u64::MAX },
            2 => CrashMode::KeepTornPrefix {
                bytes: self.rng.random_range(0..64),
            },
            _ => CrashMode::KeepTornPrefix {
                bytes: self.rng.random_range(0..2048),
            },
        }
    }

    /// Issues one request and checks its answer against the states before and after.
    async fn request(&mut self, request: Request) {
        let before = self.window.states.last().expect("states").clone();
        let result = self.backend().execute(request.action(), &caller()).await;
        let after = self.dump_live();
        self.note(format!("{} -> {}", request.describe(), summary(&result)));
        if self.window.is_open() {
            assert!(
                outcome_unknown(&result),
                "a request after a failed write must fail until a restart: {result:?}"
            );
            self.count("request refused after a failed write");
            self.window.states.push(after);
            return;
        }
        match &result {
            Err(_) if outcome_unknown(&result) => {
                self.count("request with unknown outcome");
                self.window.states.push(after);
            }
            Err(error) => {
                check_refused(&before, &after, &request, error);
                self.count(&format!("refused: {:?}", error.code));
                self.ledger.commit(after);
                self.window = Window::new(&self.ledger.acked);
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

    fn fill_disk(&mut self) {
        let used_bytes: u64 = self
            .storage
            .file_names()
            .iter()
            .filter_map(|name| self.storage.contents(name))
            .map(|bytes| bytes.len() as u64)
            .sum();
        let room_bytes = self.rng.random_range(0..600);
        self.storage
            .set_space_limit_bytes(Some(used_bytes + room_bytes));
        self.space_limited_crashes.get_or_insert(0);
        self.note(format!(
            "fault: the disk is full after {room_bytes} more bytes"
        ));
        self.count("fault: disk filled");
    }

    /// What a power loss now would recover must be exactly the acknowledged state. Looks at a
    /// copy of the durable files, so the run goes on undisturbed.
    fn check_fork(&mut self) {
        if self.window.is_open() {
            return;
        }
        let fork = self.storage.fork();
        let (backend, _) = self
            .open(&fork)
            .unwrap_or_else(|error| panic!("a power loss now would not restart: {error}"));
        let recovered = Dump::of(&backend, self.now_ms());
        check_recovery(&Window::new(&self.ledger.acked), &recovered);
        self.note("checked what a power loss now would recover".into());
        self.count("power loss checked on a fork");
    }

    /// Crashes, restarts, and checks what came back.
    async fn crash(&mut self, mode: CrashMode) {
        let backend = self.backend.take();
        self.storage = self.storage.crash(mode);
        // The crashed process's log cannot touch the rebooted storage: its handles fail.
        drop(backend);
        self.note(format!("crash {mode:?}"));
        self.count(match mode {
            CrashMode::DropUnsynced => "crash: power loss",
            CrashMode::KeepTornPrefix { bytes: u64::MAX } => "crash: process",
            CrashMode::KeepTornPrefix { .. } => "crash: torn tail",
        });
        self.restart().await;
    }

    async fn restart(&mut self) {
        if let Some(crashes) = self.space_limited_crashes {
            if crashes >= 2 || self.rng.random_bool(0.5) {
                self.storage.set_space_limit_bytes(None);
                self.space_limited_crashes = None;
                self.note("space returns".into());
            } else {
                self.space_limited_crashes = Some(crashes + 1);
            }
        }
        let (backend, recovery) = match self.open(&self.storage) {
            Ok(opened) => opened,
            Err(error) if self.space_limited_crashes.is_some() => {
                self.note(format!("start refused on a full disk: {error}"));
                self.count("start refused on a full disk");
                self.storage.set_space_limit_bytes(None);
                self.space_limited_crashes = None;
                self.open(&self.storage)
                    .unwrap_or_else(|error| panic!("the server must start: {error}"))
            }
            Err(error) => panic!("the server must start after a crash: {error}"),
        };
        if recovery.torn_tail.is_some() {
            self.count("restart cut a torn tail");
        }
        if self
            .storage
            .file_names()
            .iter()
            .any(|name| name.starts_with("snapshot-"))
        {
            self.count("restart from a snapshot");
        }
        let segments: Vec<u64> = self
            .storage
            .file_names()
            .iter()
            .filter_map(|name| leaseq_wal::parse_segment_file_name(name))
            .collect();
        if segments.windows(2).any(|pair| pair[1] != pair[0] + 1) {
            self.count("restart over a log with segments kept only for payloads");
        }
        let recovered = Dump::of(&backend, self.now_ms());
        check_recovery(&self.window, &recovered);
        self.note(format!(
            "restart: {} records replayed, torn tail {:?}, {} messages",
            recovery.records_replayed,
            recovery.torn_tail.is_some(),
            recovered.messages.len()
        ));
        if self.window.is_open() {
            self.count("restart after unknown outcomes");
        }
        self.ledger.commit(recovered);
        self.window = Window::new(&self.ledger.acked);
        self.backend = Some(Arc::new(backend));
        self.restarts += 1;
    }

    /// A few requests at once, crashed while they wait for their fsync: those answered with
    /// success must survive exactly; the others may or may not have happened.
    async fn volley(&mut self) {
        let (requests, deleted) = self.volley_requests();
        let before = self.ledger.acked.clone();
        let tasks = self.volley_start(&requests);
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
            results.push(Some(task.await.expect("a request task")));
        }
        let surviving = |payload: &PayloadRef, _, _: &_| read_surviving(&crashed, payload);
        let live = Dump::of_crashed(&self.backend(), self.now_ms(), Some(&surviving))
            .with_bodies_from(&before);
        self.window = self.volley_window(&requests, &results, (&before, &live), &deleted);
        let backend = self.backend.take();
        self.storage = crashed;
        drop(backend);
        self.note(format!("volley crash {mode:?}"));
        self.count("crash: during a volley");
        self.restart().await;
    }
}

/// The body stored at a payload's location in a rebooted storage, if the record survived whole.
fn read_surviving(storage: &FaultStorage, payload: &PayloadRef) -> Option<String> {
    let location = payload.stored()?;
    let file = storage
        .open(&segment_file_name(location.segment.into()))
        .ok()?;
    let mut frame = vec![0; frame_len_bytes(location.len_bytes as usize)];
    file.read_exact_at(&mut frame, location.offset.into())
        .ok()?;
    let record = codec::decode(decode_frame(&frame, 0).ok()?).ok()?;
    Some(record.carried_payload()?.2.body.clone())
}
