//! The fairness benchmark (issue 21): one noisy tenant sending 20× the rate of each of 50 quiet
//! tenants, consumers able to take 80% of what is sent (`LEASEQ_FAIR_BENCH_LOAD=125`, percent
//! of their capacity: a backlog builds, the noisy-neighbour case; `80` runs the consumers at 80%
//! instead), on the engine with a fake clock. It prints, for each run, the quiet tenants' dwell
//! time (send → first receive) p50 / p99, the noisy tenant's p50, the messages delivered per
//! second, and the engine's wall-clock cost per message (send + receive + delete):
//!
//! - `fair`: fairness on (SQS's default for a standard queue with group ids);
//! - `unfair`: the same traffic with `LeaseqFairQueue=false` (oldest first);
//! - `no-noisy`: the 50 quiet tenants alone (the reference dwell time);
//! - `plain`: the same traffic as `fair` without group ids (a plain standard queue: the
//!   throughput reference).
//!
//! Bars: with fairness, the quiet p99 at most 2× the `no-noisy` one; delivered msg/s within 5%
//! of `plain`. Virtual time: `LEASEQ_FAIR_BENCH_SECONDS` (default 300, the first fifth is
//! warm-up and not measured), consumers `LEASEQ_FAIR_BENCH_CONSUMERS` (default 500, each holding
//! one message for 50% to 150% of `LEASEQ_FAIR_BENCH_PROCESSING_MS`, default 1 000 ms). Sends
//! are Poisson per tenant, seeded.
//!
//! What to expect: with the noisy tenant's backlog every consumer is always busy (the queue is
//! work-conserving: nothing is held back), so a quiet message waits for the next consumer to
//! finish, which the `no-noisy` run (idle consumers) never does; fairness takes that wait from
//! the noisy backlog's length (`unfair`: seconds, growing) to the gap between two finishes. `cargo bench -p leaseq-core --bench fairness` (or scripts/bench-fairness.sh).

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::time::Instant;

use leaseq_core::{
    Engine, EngineConfig, Journal, MessageId, QueueConfigPatch, ReceiptKey, ReceiveRequest,
    SendInput,
};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

const QUEUE: &str = "tenants";
const QUIET_TENANTS: usize = 50;
const NOISY_FACTOR: f64 = 20.0;
const START_MS: u64 = 1_700_000_000_000;
/// Consumers wake this often when the queue was empty (a long poll would wake at the next send;
/// the step bounds the error that adds to every dwell time).
const POLL_STEP_MS: u64 = 5;

#[derive(Clone, Copy, PartialEq)]
enum Mode {
    Fair,
    Unfair,
    NoNoisy,
    Plain,
}

impl Mode {
    fn name(self) -> &'static str {
        match self {
            Mode::Fair => "fair",
            Mode::Unfair => "unfair",
            Mode::NoNoisy => "no-noisy",
            Mode::Plain => "plain",
        }
    }
}

struct Settings {
    /// Sends as a percentage of what the consumers can take.
    load_percent: u64,
    seconds: u64,
    consumers: usize,
    processing_ms: u64,
}

fn env_or(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|value| value.parse().ok())
        .unwrap_or(default)
}

struct Outcome {
    quiet_p50_ms: u64,
    quiet_p99_ms: u64,
    noisy_p50_ms: Option<u64>,
    delivered_per_second: f64,
    engine_ns_per_message: f64,
    backlog_at_end: usize,
}

fn percentile(sorted: &[u64], per_mille: usize) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    sorted[(sorted.len() * per_mille / 1000).min(sorted.len() - 1)]
}

fn run(mode: Mode, settings: &Settings) -> Outcome {
    let mut engine = Engine::new(EngineConfig::default(), ReceiptKey::new([5; 16]));
    let mut journal = Journal::new();
    let patch = QueueConfigPatch {
        visibility_timeout_seconds: Some(600),
        fair_queue: Some(mode != Mode::Unfair),
        ..QueueConfigPatch::default()
    };
    engine
        .create_queue(START_MS, QUEUE, &patch, Default::default(), &mut journal)
        .expect("queue");
    journal.clear();

    // Consumers take `consumers / processing` messages a second; the senders send
    // `load_percent` of that with the noisy tenant, the quiet tenants' share alone without it.
    let capacity_per_second = settings.consumers as f64 * 1000.0 / settings.processing_ms as f64;
    let total_per_second = capacity_per_second * settings.load_percent as f64 / 100.0;
    let quiet_rate_per_ms = total_per_second / (QUIET_TENANTS as f64 + NOISY_FACTOR) / 1000.0;
    let mut tenants: Vec<(Option<String>, f64)> = (0..QUIET_TENANTS)
        .map(|i| (Some(format!("quiet-{i}")), quiet_rate_per_ms))
        .collect();
    if mode != Mode::NoNoisy {
        tenants.push((Some("noisy".into()), quiet_rate_per_ms * NOISY_FACTOR));
    }
    let mut rng = StdRng::seed_from_u64(21);
    let mut next_send: Vec<f64> = tenants
        .iter()
        .map(|(_, rate)| exponential(&mut rng, *rate))
        .collect();

    // Consumers busy until a time, holding a receipt.
    let mut busy: BinaryHeap<Reverse<(u64, usize)>> = BinaryHeap::new();
    let mut receipts: Vec<Option<String>> = vec![None; settings.consumers];
    let mut idle: Vec<usize> = (0..settings.consumers).collect();
    let end_ms = settings.seconds * 1000;
    let warm_up_ms = end_ms / 5;
    let (mut quiet_dwell, mut noisy_dwell) = (Vec::new(), Vec::new());
    let mut delivered_measured = 0u64;
    let mut messages = 0u64;
    let mut engine_time = std::time::Duration::ZERO;
    let mut id = 0u64;

    let mut now = 0u64;
    while now < end_ms {
        let now_ms = START_MS + now;
        // Sends due by now.
        for (tenant, (group, rate)) in tenants.iter().enumerate() {
            while next_send[tenant] <= now as f64 {
                let mut input = SendInput::body("x".repeat(64));
                input.group_id = if mode == Mode::Plain {
                    None
                } else {
                    group.clone()
                };
                id += 1;
                let mut bytes = [0u8; 16];
                bytes[..8].copy_from_slice(&id.to_le_bytes());
                let started = Instant::now();
                engine
                    .send(
                        now_ms,
                        QUEUE,
                        input,
                        MessageId::from_random(bytes),
                        &mut journal,
                    )
                    .expect("send");
                engine_time += started.elapsed();
                journal.clear();
                next_send[tenant] += exponential(&mut rng, *rate);
            }
        }
        // Deletes of what finished by now.
        while let Some(&Reverse((done_at, consumer))) = busy.peek() {
            if done_at > now {
                break;
            }
            busy.pop();
            let receipt = receipts[consumer]
                .take()
                .expect("busy consumer holds a receipt");
            let started = Instant::now();
            engine
                .delete(now_ms, QUEUE, &receipt, &mut journal)
                .expect("delete");
            engine_time += started.elapsed();
            journal.clear();
            idle.push(consumer);
        }
        // Idle consumers receive one message each while any is ready.
        while let Some(&consumer) = idle.last() {
            let request = ReceiveRequest {
                max_messages: 1,
                visibility_timeout_seconds: None,
                client: None,
            };
            let started = Instant::now();
            let deliveries = engine
                .receive(now_ms, QUEUE, request, &mut journal)
                .expect("receive");
            engine_time += started.elapsed();
            journal.clear();
            let Some(delivery) = deliveries.into_iter().next() else {
                break;
            };
            idle.pop();
            messages += 1;
            if now >= warm_up_ms {
                delivered_measured += 1;
                let dwell_ms = now_ms - delivery.sent_at_ms;
                let group = delivery.fifo.as_ref().map(|fifo| fifo.group_id.clone());
                // The plain queue has no group ids: its noisy tenant is told by the send order
                // only, so its dwell is not split (all of it counts as "quiet" here).
                match group.as_deref() {
                    Some("noisy") => noisy_dwell.push(dwell_ms),
                    _ => quiet_dwell.push(dwell_ms),
                }
            }
            receipts[consumer] = Some(delivery.receipt);
            // Processing takes 50% to 150% of the mean, so consumers do not run in lock step.
            let processing_ms =
                rng.random_range(settings.processing_ms / 2..=settings.processing_ms * 3 / 2);
            busy.push(Reverse((now + processing_ms, consumer)));
        }
        // Next step: the next send, the next finish, or a poll step for idle consumers.
        let next_send_at = next_send.iter().copied().fold(f64::INFINITY, f64::min);
        let next_finish = busy.peek().map_or(u64::MAX, |Reverse((at, _))| *at);
        let mut next = (next_send_at.ceil() as u64).min(next_finish);
        if !idle.is_empty() {
            next = next.min(now + POLL_STEP_MS);
        }
        now = next.max(now + 1);
    }
    quiet_dwell.sort_unstable();
    noisy_dwell.sort_unstable();
    let measured_seconds = (end_ms - warm_up_ms) as f64 / 1000.0;
    let info = engine.queue_info(START_MS + end_ms, QUEUE).expect("queue");
    Outcome {
        quiet_p50_ms: percentile(&quiet_dwell, 500),
        quiet_p99_ms: percentile(&quiet_dwell, 990),
        noisy_p50_ms: (!noisy_dwell.is_empty()).then(|| percentile(&noisy_dwell, 500)),
        delivered_per_second: delivered_measured as f64 / measured_seconds,
        // Each message costs a send, a receive (plus the empty receives) and a delete.
        engine_ns_per_message: engine_time.as_nanos() as f64 / messages.max(1) as f64,
        backlog_at_end: info.ready + info.delayed,
    }
}

/// An exponential interarrival time in ms for `rate_per_ms`.
fn exponential(rng: &mut StdRng, rate_per_ms: f64) -> f64 {
    let uniform: f64 = rng.random_range(f64::EPSILON..1.0);
    -uniform.ln() / rate_per_ms
}

fn main() {
    // `cargo bench` passes `--bench`; nothing else is understood.
    let settings = Settings {
        load_percent: env_or("LEASEQ_FAIR_BENCH_LOAD", 125),
        seconds: env_or("LEASEQ_FAIR_BENCH_SECONDS", 300),
        consumers: env_or("LEASEQ_FAIR_BENCH_CONSUMERS", 500) as usize,
        processing_ms: env_or("LEASEQ_FAIR_BENCH_PROCESSING_MS", 1_000),
    };
    println!(
        "fairness: {} quiet tenants, 1 noisy at {NOISY_FACTOR}x, {} consumers x {} ms on average, \
         sends {}% of their capacity, {} s virtual ({} s warm-up)",
        QUIET_TENANTS,
        settings.consumers,
        settings.processing_ms,
        settings.load_percent,
        settings.seconds,
        settings.seconds / 5
    );
    println!(
        "{:<9} {:>14} {:>14} {:>14} {:>13} {:>15} {:>9}",
        "run",
        "quiet p50 ms",
        "quiet p99 ms",
        "noisy p50 ms",
        "delivered/s",
        "engine ns/msg",
        "backlog"
    );
    let mut results = Vec::new();
    for mode in [Mode::Fair, Mode::Unfair, Mode::NoNoisy, Mode::Plain] {
        let outcome = run(mode, &settings);
        println!(
            "{:<9} {:>14} {:>14} {:>14} {:>13.1} {:>15.0} {:>9}",
            mode.name(),
            outcome.quiet_p50_ms,
            outcome.quiet_p99_ms,
            outcome
                .noisy_p50_ms
                .map_or_else(|| "-".to_string(), |ms| ms.to_string()),
            outcome.delivered_per_second,
            outcome.engine_ns_per_message,
            outcome.backlog_at_end
        );
        results.push((mode, outcome));
    }
    let get = |wanted: Mode| &results.iter().find(|(mode, _)| *mode == wanted).unwrap().1;
    let (fair, no_noisy, plain) = (get(Mode::Fair), get(Mode::NoNoisy), get(Mode::Plain));
    let p99_ratio = fair.quiet_p99_ms as f64 / no_noisy.quiet_p99_ms.max(1) as f64;
    let throughput_ratio = fair.delivered_per_second / plain.delivered_per_second;
    println!(
        "quiet p99, fair / no-noisy: {p99_ratio:.2} (bar <= 2.00); delivered/s, fair / plain: \
         {throughput_ratio:.3} (bar >= 0.95); engine cost, fair / plain: {:.2}",
        fair.engine_ns_per_message / plain.engine_ns_per_message
    );
}
