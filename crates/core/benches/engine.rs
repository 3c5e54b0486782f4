//! Throughput of the lease engine on one core, with 1 000, 1 000 000 and 10 000 000 messages
//! waiting (issue 2's bar: at least 1 000 000 receive+delete per second in batches of 10, and at
//! most 1.5× slower per operation at 10 000 000 waiting than at 1 000).
//!
//! Workloads, each reported per message (`Throughput::Elements`):
//! - `send`: one 256-byte message per operation;
//! - `receive10_delete10`: a receive of 10 (by a client with an address and a user agent, which
//!   every attempt's history records), then a delete of each by its receipt;
//! - `receive10_extend10`: a receive of 10, then a ChangeMessageVisibility of each;
//! - `freeze`: the copy a checkpoint takes with the engine locked, of a standard and of a FIFO
//!   queue (whose deduplication window it copies too).
//!
//! Only the named operations are timed. Untimed, between short timed stretches, the benchmark
//! puts the backlog back to its size (sends for what was deleted, deletes of what was extended or
//! sent), so every measurement sees the backlog it is named for. The inputs (bodies, ids) are
//! built untimed too; the engine's own allocations (payload, records, receipts) are timed. The
//! clock is fake and moves 1 ms per receive. One journal `Vec` is reused and cleared after every
//! operation, as a server that logs and then forgets its records would.
//!
//! Filling 10 000 000 messages takes about 5.3 GB of memory and 12 to 50 seconds (more on a busy
//! machine); `LEASEQ_BENCH_LARGE=0` skips that size. With `LEASEQ_BENCH_CPU_TIME=1` the timings
//! are this thread's CPU time instead of wall time (for a machine busy with other work).

use std::collections::BTreeMap;
use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use leaseq_core::{
    Client, Engine, EngineConfig, MessageId, QueueConfigPatch, ReceiptKey, ReceiveRequest, Record,
    SendInput,
};

/// The allocator the server ships with (see crates/cli/src/main.rs), so the benchmark measures
/// what runs.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

const QUEUE: &str = "bench";
const BODY_BYTES: usize = 256;
const BATCH: usize = 10;
const START_MS: u64 = 1_700_000_000_000;
/// Messages consumed (or sent) per timed stretch before the backlog is put back: small against
/// the backlog so the backlog stays within 10% of its size.
const STRETCH_MESSAGES_MAX: usize = 10_000;

/// Where timings come from: the wall clock (criterion's usual), or, with
/// `LEASEQ_BENCH_CPU_TIME=1`, this thread's CPU time, which a machine busy with other work
/// inflates far less (the bar is about one core's throughput).
#[derive(Clone, Copy, Debug)]
enum Clock {
    Wall,
    ThreadCpu,
}

impl Clock {
    fn from_env() -> Clock {
        if std::env::var_os("LEASEQ_BENCH_CPU_TIME").is_some_and(|v| v == "1") {
            eprintln!("timing with this thread's CPU time");
            Clock::ThreadCpu
        } else {
            Clock::Wall
        }
    }

    fn start(self) -> Stopwatch {
        match self {
            Clock::Wall => Stopwatch::Wall(Instant::now()),
            Clock::ThreadCpu => Stopwatch::ThreadCpu(thread_cpu_time()),
        }
    }
}

enum Stopwatch {
    Wall(Instant),
    ThreadCpu(Duration),
}

impl Stopwatch {
    fn elapsed(&self) -> Duration {
        match self {
            Stopwatch::Wall(started) => started.elapsed(),
            Stopwatch::ThreadCpu(started) => thread_cpu_time().saturating_sub(*started),
        }
    }
}

fn thread_cpu_time() -> Duration {
    let mut time = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `time` is a valid, writable timespec, and the clock id is a constant Linux and the
    // BSDs define; the call writes nothing else.
    let result = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut time) };
    assert_eq!(result, 0, "clock_gettime(CLOCK_THREAD_CPUTIME_ID)");
    Duration::new(time.tv_sec as u64, time.tv_nsec as u32)
}

fn backlogs() -> Vec<usize> {
    let mut sizes = vec![1_000, 1_000_000];
    if std::env::var_os("LEASEQ_BENCH_LARGE").is_none_or(|v| v != "0") {
        sizes.push(10_000_000);
    }
    sizes
}

/// An engine with one queue holding `backlog` ready messages.
struct Fixture {
    engine: Engine,
    journal: Vec<Record>,
    now_ms: u64,
    next_id: u64,
    body: String,
    sender: Arc<str>,
    stretch_messages: usize,
    clock: Clock,
}

impl Fixture {
    fn new(backlog: usize, clock: Clock) -> Fixture {
        let mut fixture = Fixture {
            engine: Engine::new(EngineConfig::default(), ReceiptKey::new([42; 16])),
            journal: Vec::new(),
            now_ms: START_MS,
            next_id: 0,
            body: "x".repeat(BODY_BYTES),
            sender: Arc::from("bench"),
            stretch_messages: (backlog / 10).clamp(BATCH, STRETCH_MESSAGES_MAX),
            clock,
        };
        // Retention at its maximum: the fake clock must never expire the backlog.
        let patch = QueueConfigPatch {
            retention_seconds: Some(1_209_600),
            ..QueueConfigPatch::default()
        };
        let journal = &mut fixture.journal;
        fixture
            .engine
            .create_queue(START_MS, QUEUE, &patch, BTreeMap::new(), journal)
            .expect("create queue");
        let started = Instant::now();
        fixture.send_untimed(backlog);
        let queue = fixture.engine.queue(QUEUE).expect("queue");
        assert_eq!(queue.ready_count(), backlog);
        eprintln!("filled {backlog} messages in {:.1?}", started.elapsed());
        fixture
    }

    fn inputs(&mut self, count: usize) -> Vec<(SendInput, MessageId)> {
        (0..count)
            .map(|_| {
                self.next_id += 1;
                let mut id = [0u8; 16];
                id[..8].copy_from_slice(&self.next_id.to_le_bytes());
                let input = SendInput {
                    sender_id: self.sender.clone(),
                    ..SendInput::body(self.body.clone())
                };
                (input, MessageId::from_random(id))
            })
            .collect()
    }

    fn send_untimed(&mut self, count: usize) {
        for chunk in (0..count).step_by(STRETCH_MESSAGES_MAX) {
            let inputs = self.inputs(STRETCH_MESSAGES_MAX.min(count - chunk));
            self.send_all(inputs);
        }
    }

    fn send_all(&mut self, inputs: Vec<(SendInput, MessageId)>) {
        for (input, id) in inputs {
            let sent = self
                .engine
                .send(self.now_ms, QUEUE, input, id, &mut self.journal);
            black_box(sent.expect("send"));
            self.journal.clear();
        }
    }

    fn receive(&mut self) -> Vec<leaseq_core::Delivery<leaseq_core::PayloadRef>> {
        self.now_ms += 1;
        // As the server does: a client of its own per request, which the engine interns.
        let client = Client::new(
            "127.0.0.1:40000",
            "aws-sdk-rust/1.3.0 os/linux lang/rust/1.95.0",
        );
        let request = ReceiveRequest {
            max_messages: BATCH,
            visibility_timeout_seconds: None,
            client: Some(Arc::new(client)),
        };
        let deliveries = self
            .engine
            .receive(self.now_ms, QUEUE, request, &mut self.journal)
            .expect("receive");
        self.journal.clear();
        assert_eq!(deliveries.len(), BATCH, "backlog ran dry");
        deliveries
    }

    fn delete(&mut self, receipt: &str) {
        let outcome = self
            .engine
            .delete(self.now_ms, QUEUE, receipt, &mut self.journal);
        black_box(outcome.expect("delete"));
        self.journal.clear();
    }

    fn extend(&mut self, receipt: &str) {
        let until =
            self.engine
                .change_visibility(self.now_ms, QUEUE, receipt, 60, &mut self.journal);
        black_box(until.expect("change visibility"));
        self.journal.clear();
    }

    /// Sends `iterations` messages, timing only the sends; removes as many (oldest first)
    /// untimed, so the backlog keeps its size.
    fn time_sends(&mut self, iterations: u64) -> Duration {
        let mut timed = Duration::ZERO;
        let mut left = iterations as usize;
        while left > 0 {
            let count = left.min(self.stretch_messages);
            let inputs = self.inputs(count);
            let started = self.clock.start();
            self.send_all(inputs);
            timed += started.elapsed();
            // Round up to whole receives with a few untimed sends.
            let whole = count.div_ceil(BATCH) * BATCH;
            let padding = self.inputs(whole - count);
            self.send_all(padding);
            for _ in 0..whole / BATCH {
                for delivery in self.receive() {
                    self.delete(&delivery.receipt);
                }
            }
            left -= count;
        }
        timed
    }

    /// Runs `iterations` receive-10-then-delete-10 cycles, timed; refills untimed.
    fn time_receive_delete(&mut self, iterations: u64) -> Duration {
        let cycles_per_stretch = (self.stretch_messages / BATCH) as u64;
        let mut timed = Duration::ZERO;
        let mut left = iterations;
        while left > 0 {
            let cycles = left.min(cycles_per_stretch);
            let started = self.clock.start();
            for _ in 0..cycles {
                for delivery in self.receive() {
                    self.delete(&delivery.receipt);
                }
            }
            timed += started.elapsed();
            self.send_untimed(cycles as usize * BATCH);
            left -= cycles;
        }
        timed
    }

    /// Runs `iterations` receive-10-then-extend-10 cycles, timed; deletes the extended messages
    /// and refills untimed.
    fn time_receive_extend(&mut self, iterations: u64) -> Duration {
        let cycles_per_stretch = (self.stretch_messages / BATCH) as u64;
        let mut timed = Duration::ZERO;
        let mut left = iterations;
        let mut receipts = Vec::with_capacity(self.stretch_messages);
        while left > 0 {
            let cycles = left.min(cycles_per_stretch);
            let started = self.clock.start();
            for _ in 0..cycles {
                for delivery in self.receive() {
                    self.extend(&delivery.receipt);
                    receipts.push(delivery.receipt);
                }
            }
            timed += started.elapsed();
            for receipt in receipts.drain(..) {
                self.delete(&receipt);
            }
            self.send_untimed(cycles as usize * BATCH);
            left -= cycles;
        }
        timed
    }
}

type Workload = fn(&mut Fixture, u64) -> Duration;

fn engine(c: &mut Criterion) {
    let clock = Clock::from_env();
    for backlog in backlogs() {
        // Filled on first use, so a filtered run fills only the sizes it measures.
        let mut fixture: Option<Fixture> = None;
        let id = BenchmarkId::from_parameter(backlog);
        let workloads: [(&str, u64, Workload); 3] = [
            ("send", 1, Fixture::time_sends),
            (
                "receive10_delete10",
                BATCH as u64,
                Fixture::time_receive_delete,
            ),
            (
                "receive10_extend10",
                BATCH as u64,
                Fixture::time_receive_extend,
            ),
        ];
        for (name, messages, workload) in workloads {
            let mut group = c.benchmark_group(name);
            group.throughput(Throughput::Elements(messages));
            group.bench_function(id.clone(), |b| {
                let fixture = fixture.get_or_insert_with(|| Fixture::new(backlog, clock));
                b.iter_custom(|iterations| workload(fixture, iterations))
            });
            group.finish();
        }
        if let Some(fixture) = fixture {
            let queue = fixture.engine.queue(QUEUE).expect("queue");
            assert_eq!(queue.ready_count(), backlog, "the backlog kept its size");
        }
    }
}

/// FIFO: per message, a send (group round-robin over `groups`, a unique deduplication id), and
/// a receive of 10 with a delete of each, with 1, 10 and 1 000 groups and 10 000 messages
/// waiting. With one group a receive takes the 10 oldest messages of that group; with many it
/// takes the heads of several groups. The deduplication window fills with every send, as it
/// does in a server (the fake clock moves 1 ms per operation, so nothing leaves it).
fn fifo(c: &mut Criterion) {
    const BACKLOG: u64 = 10_000;
    for groups in [1u64, 10, 1_000] {
        let mut engine = Engine::new(EngineConfig::default(), ReceiptKey::new([9; 16]));
        let mut journal = Vec::new();
        let patch = QueueConfigPatch {
            fifo_queue: Some(true),
            ..QueueConfigPatch::default()
        };
        let name = "bench.fifo";
        engine
            .create_queue(START_MS, name, &patch, BTreeMap::new(), &mut journal)
            .expect("create");
        let body = "x".repeat(BODY_BYTES);
        let mut sent = 0u64;
        let mut now_ms = START_MS;
        let mut send = |engine: &mut Engine, journal: &mut Vec<Record>, now_ms: u64| {
            let mut input = SendInput::body(body.clone()).in_group(format!("g{}", sent % groups));
            input.deduplication_id = Some(sent.to_string());
            let id = MessageId::from_random(u128::from(sent).to_le_bytes());
            sent += 1;
            engine.send(now_ms, name, input, id, journal).expect("send");
            journal.clear();
        };
        for _ in 0..BACKLOG {
            send(&mut engine, &mut journal, now_ms);
        }
        let mut group = c.benchmark_group("fifo_send_receive10_delete10");
        group.throughput(Throughput::Elements(BATCH as u64));
        group.bench_function(BenchmarkId::from_parameter(groups), |b| {
            b.iter(|| {
                now_ms += 1;
                for _ in 0..BATCH {
                    send(&mut engine, &mut journal, now_ms);
                }
                let request = ReceiveRequest {
                    max_messages: BATCH,
                    visibility_timeout_seconds: None,
                    client: None,
                };
                let deliveries = engine
                    .receive(now_ms, name, request, &mut journal)
                    .expect("receive");
                journal.clear();
                for delivery in &deliveries {
                    engine
                        .delete(now_ms, name, &delivery.receipt, &mut journal)
                        .expect("delete");
                }
                journal.clear();
                black_box(deliveries.len())
            })
        });
        group.finish();
    }
}

/// `Engine::freeze`, which a checkpoint calls with the engine locked, so its time is a pause of
/// every request: a standard queue and a FIFO queue holding the same messages, each sent with a
/// unique deduplication id in the FIFO queue (1 000 groups), so the FIFO queue's deduplication
/// window holds one entry per message.
fn freeze(c: &mut Criterion) {
    let mut group = c.benchmark_group("freeze");
    group.sample_size(10);
    for messages in [100_000u64, 1_000_000] {
        for fifo in [false, true] {
            let mut engine = Engine::new(EngineConfig::default(), ReceiptKey::new([9; 16]));
            let mut journal = Vec::new();
            let patch = QueueConfigPatch {
                fifo_queue: Some(fifo),
                ..QueueConfigPatch::default()
            };
            let name = if fifo { "bench.fifo" } else { QUEUE };
            engine
                .create_queue(START_MS, name, &patch, BTreeMap::new(), &mut journal)
                .expect("create");
            let body = "x".repeat(BODY_BYTES);
            for sent in 0..messages {
                let mut input = SendInput::body(body.clone());
                if fifo {
                    input = input.in_group(format!("g{}", sent % 1_000));
                    input.deduplication_id = Some(sent.to_string());
                }
                let id = MessageId::from_random(u128::from(sent).to_le_bytes());
                engine
                    .send(START_MS, name, input, id, &mut journal)
                    .expect("send");
                journal.clear();
            }
            let kind = if fifo { "fifo" } else { "standard" };
            group.bench_function(BenchmarkId::new(kind, messages), |b| {
                b.iter(|| black_box(engine.freeze()))
            });
        }
    }
    group.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default().without_plots();
    targets = engine, fifo, freeze
}
criterion_main!(benches);
