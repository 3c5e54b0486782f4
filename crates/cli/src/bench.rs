//! `leaseq bench`: a load generator for any SQS endpoint that speaks AWS JSON 1.0.
//!
//! It creates its own queue, optionally fills it with a backlog (timed as its own phase), then
//! runs producers and consumers for a bounded time or message count, each worker a task on its
//! own keep-alive HTTP/1.1 connection with one request in flight. It prints a progress line every
//! second and, at the end, per action: requests, messages, errors, throughput and latency
//! percentiles, plus end-to-end latency (send → receive) when producers and consumers run
//! together, the generator's own CPU time, and the server's CPU time when `--server-pid` is given.
//!
//! Nothing here knows leaseq: the same run against another SQS-compatible server is a fair side by
//! side comparison. The workloads are those of `BENCHMARKS.md` (W1–W5).

mod client;
mod jetstream;
mod plan;
mod postgres;
mod report;
mod stats;
mod workers;

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use clap::Args;

use client::{Connection, Endpoint};
pub use plan::Workload;
use plan::{Phase, Plan};
use report::{BenchReport, PhaseReport};
use stats::{CpuSample, Recorder};
use workers::{Shared, Target};

/// Flags of `leaseq bench`. A `--workload` preset fills in what is not given explicitly.
#[derive(Args, Debug)]
pub struct BenchArgs {
    /// The SQS endpoint to drive: `http://HOST:PORT`, or `https://HOST:PORT` (HTTP/1.1 over
    /// TLS; needs `--ca-bundle`).
    #[arg(long, default_value = "http://127.0.0.1:9324")]
    pub endpoint: String,
    /// PEM file of the certificates an `https://` endpoint's certificate must chain to.
    #[arg(long)]
    pub ca_bundle: Option<std::path::PathBuf>,
    /// A standard workload of BENCHMARKS.md: w1 send, w2 send-batch, w3 consume a backlog,
    /// w4 mixed producers and consumers, w5 consume a backlog of a chosen size.
    #[arg(long, value_enum)]
    pub workload: Option<Workload>,
    /// Number of workers on the workload's side (producers for w1/w2, consumers for w3/w5,
    /// both for w4); `--producers` and `--consumers` override it.
    #[arg(long, short = 'c')]
    pub concurrency: Option<usize>,
    /// Number of producer workers (one connection and one request in flight each).
    #[arg(long)]
    pub producers: Option<usize>,
    /// Number of consumer workers: ReceiveMessage (long poll) then DeleteMessageBatch.
    #[arg(long)]
    pub consumers: Option<usize>,
    /// Upper bound on the measured phase, in seconds [default: 10; 60 for w3, w4, w5].
    #[arg(long)]
    pub duration: Option<f64>,
    /// Size of each message body in bytes [default: 256].
    #[arg(long)]
    pub message_size: Option<usize>,
    /// Messages per send request, 1 (SendMessage) to 10 (SendMessageBatch) [default: 1; 10 for w2].
    #[arg(long)]
    pub batch_size: Option<usize>,
    /// Stop after this many messages sent (or consumed, when there are no producers). With
    /// consumers only and `--backlog 0`: the messages to consume from a queue filled before
    /// this run, named with `--queue` (and `--keep` to leave it there afterwards).
    #[arg(long)]
    pub messages: Option<u64>,
    /// Messages to put in the queue (in batches of 10) before the measured phase
    /// [default: 200000 for w3, 1000 for w5, else 0].
    #[arg(long)]
    pub backlog: Option<u64>,
    /// Workers that fill the backlog.
    #[arg(long, default_value_t = 16)]
    pub fill_concurrency: usize,
    /// Upper bound on filling the backlog, in seconds.
    #[arg(long, default_value_t = 600.0)]
    pub fill_timeout: f64,
    /// MaxNumberOfMessages of each ReceiveMessage (1 to 10).
    #[arg(long, default_value_t = 10)]
    pub receive_max: usize,
    /// WaitTimeSeconds of each ReceiveMessage (0 to 20; above 0 is a long poll).
    #[arg(long, default_value_t = 5)]
    pub wait_time_seconds: u32,
    /// Drive a FIFO queue with this many message groups (sends spread round-robin over them,
    /// each with a unique deduplication id) instead of a standard queue.
    #[arg(long)]
    pub groups: Option<u64>,
    /// Drive a standard queue whose sends carry one of this many MessageGroupIds (tenants of a
    /// fair queue, docs/design/fairness.md), `t0` … `tN-1`, round-robin weighted by
    /// `--noisy-weight`.
    #[arg(long, conflicts_with = "groups")]
    pub tenants: Option<u64>,
    /// With `--tenants`: tenant `t0` sends this many times as often as each other tenant (the
    /// noisy tenant of the fairness benchmark).
    #[arg(long, default_value_t = 1, requires = "tenants")]
    pub noisy_weight: u64,
    /// Producers send this many messages a second in all, at random (Poisson) times spread
    /// evenly over them, instead of as fast as the server answers: an open-loop load, for
    /// latency at a chosen utilisation (the fairness benchmark). The backlog fill is not paced.
    #[arg(long, value_name = "MSG_PER_S")]
    pub rate: Option<f64>,
    /// Consumers hold each received message this long on average, a handler's work, before
    /// deleting it: a random 50% to 150% of MS per message, from the receive's answer (a
    /// receive of k messages: k such times), so N consumers take about N × 1000 / MS messages
    /// a second (less their requests' round trips).
    #[arg(long, value_name = "MS", default_value_t = 0)]
    pub work_ms: u64,
    /// An attribute of the queue the run creates, `NAME=VALUE`; may be repeated (e.g.
    /// `--queue-attribute LeaseqFairQueue=false`).
    #[arg(long = "queue-attribute", value_name = "NAME=VALUE")]
    pub queue_attributes: Vec<String>,
    /// Queue name [default: a new unique name].
    #[arg(long)]
    pub queue: Option<String>,
    /// Keep the queue at the end instead of deleting it.
    #[arg(long)]
    pub keep: bool,
    /// The server's process id: report its CPU time (from /proc) per message, and its RSS.
    #[arg(long)]
    pub server_pid: Option<u32>,
    /// Region named in the (unsigned) Authorization header; some emulators read it.
    #[arg(long, default_value = "us-east-1")]
    pub region: String,
    /// Threads of the generator's async runtime [default: the number of CPUs].
    #[arg(long)]
    pub threads: Option<usize>,
    /// Print the final results as one JSON object on stdout (progress stays on stderr).
    #[arg(long)]
    pub json: bool,
    /// Drive pgmq instead of an SQS endpoint: a libpq-style connection string of a database
    /// where pgmq's SQL is installed. The same workers, request shapes and report (SendMessage
    /// is pgmq.send, SendMessageBatch pgmq.send_batch, ReceiveMessage pgmq.read_with_poll,
    /// DeleteMessageBatch pgmq.delete of the ids); `--endpoint` is not used.
    #[arg(long, value_name = "CONNECTION")]
    pub pgmq: Option<String>,
    /// Drive NATS JetStream instead of an SQS endpoint: the server's URL (nats://HOST:PORT). A
    /// file-stored work-queue stream with one durable pull consumer, the same workers and report
    /// (SendMessage is a publish that awaits its ack, SendMessageBatch N asynchronous publishes
    /// with their acks in flight, ReceiveMessage a pull, DeleteMessageBatch an ack of each);
    /// `--endpoint` is not used.
    #[arg(long, value_name = "URL", conflicts_with = "pgmq")]
    pub jetstream: Option<String>,
    /// Report what each phase cost PostgreSQL (on this machine): CPU time of every postgres
    /// process, WAL bytes and commits, per message [default: the --pgmq connection].
    #[arg(long, value_name = "CONNECTION")]
    pub postgres_stats: Option<String>,
}

/// Runs `leaseq bench` to completion and prints its report.
pub fn run(args: BenchArgs) -> anyhow::Result<()> {
    let plan = Plan::from_args(&args)?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(plan.threads)
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    let report = runtime.block_on(bench(plan))?;
    if args.json {
        println!("{}", serde_json::to_string(&report)?);
    } else {
        print!("{}", report.to_text());
    }
    Ok(())
}

/// Creates the queue, runs the phases and deletes the queue again, even when a phase failed.
async fn bench(plan: Plan) -> anyhow::Result<BenchReport> {
    if let Some(connection) = &plan.pgmq {
        let queue = postgres::queue_name(&plan.queue);
        postgres::create_queue(connection, &queue)
            .await
            .with_context(|| format!("creating pgmq queue {queue}"))?;
        eprintln!("leaseq bench: {} on pgmq queue {queue}", plan.describe());
        let target = Arc::new(Target::Pgmq(Arc::from(connection.as_str())));
        let outcome = run_phases(&plan, &target, &queue).await;
        if !plan.keep {
            if let Err(error) = postgres::drop_queue(connection, &queue).await {
                eprintln!("leaseq bench: could not drop pgmq queue {queue}: {error}");
            }
        }
        let (fill, run) = outcome?;
        return Ok(BenchReport::new(&plan, queue, fill, run));
    }
    if let Some(url) = &plan.jetstream {
        let stream = jetstream::stream_name(&plan.queue);
        jetstream::create_queue(url, &stream)
            .await
            .with_context(|| format!("creating JetStream stream {stream} on {url}"))?;
        eprintln!(
            "leaseq bench: {} on JetStream stream {stream}",
            plan.describe()
        );
        let target = Arc::new(Target::JetStream(Arc::from(url.as_str())));
        let outcome = run_phases(&plan, &target, &stream).await;
        if !plan.keep {
            if let Err(error) = jetstream::drop_queue(url, &stream).await {
                eprintln!("leaseq bench: could not delete JetStream stream {stream}: {error}");
            }
        }
        let (fill, run) = outcome?;
        return Ok(BenchReport::new(&plan, stream, fill, run));
    }
    let endpoint = Arc::new(Endpoint::parse(
        &plan.endpoint,
        &plan.region,
        plan.ca_bundle.as_deref(),
    )?);
    let mut admin = Connection::open(endpoint.clone())
        .await
        .with_context(|| format!("connecting to {}", plan.endpoint))?;
    let queue_url = admin
        .create_queue(&plan.queue, &plan.queue_attributes())
        .await
        .with_context(|| format!("creating queue {}", plan.queue))?;
    eprintln!("leaseq bench: {} on {queue_url}", plan.describe());
    let target = Arc::new(Target::Sqs(endpoint.clone()));
    let outcome = run_phases(&plan, &target, &queue_url).await;
    if !plan.keep {
        // A fresh connection: the admin one may have been closed by an idle timeout meanwhile.
        let deleted = match Connection::open(endpoint.clone()).await {
            Ok(mut connection) => connection.delete_queue(&queue_url).await,
            Err(error) => Err(error),
        };
        if let Err(error) = deleted {
            eprintln!("leaseq bench: could not delete queue {queue_url}: {error}");
        }
    }
    let (fill, run) = outcome?;
    Ok(BenchReport::new(&plan, queue_url, fill, run))
}

async fn run_phases(
    plan: &Plan,
    target: &Arc<Target>,
    queue_url: &str,
) -> anyhow::Result<(Option<PhaseReport>, PhaseReport)> {
    let mut fill = None;
    let mut run = plan.run_phase();
    if let Some(fill_phase) = plan.fill_phase() {
        let report = run_phase(plan, &fill_phase, target, queue_url).await?;
        let filled = report.messages_sent;
        if filled < fill_phase.send_limit.unwrap_or(0) {
            eprintln!("leaseq bench: the backlog holds only {filled} messages (fill timed out)");
        }
        run.limit_consumption_to(filled);
        fill = Some(report);
    }
    let run = run_phase(plan, &run, target, queue_url).await?;
    Ok((fill, run))
}

/// Runs one phase: spawns its workers, prints progress every second, stops them when the phase
/// is complete, its time is up or the user presses Ctrl-C, and merges what they recorded.
async fn run_phase(
    plan: &Plan,
    phase: &Phase,
    target: &Arc<Target>,
    queue_url: &str,
) -> anyhow::Result<PhaseReport> {
    let (stop_sender, stop) = tokio::sync::watch::channel(false);
    let shared = Arc::new(Shared::new(plan, phase, target.clone(), queue_url));
    let stats = match plan.postgres_stats.as_deref().or(plan.pgmq.as_deref()) {
        Some(connection) => Some(
            postgres::connect(connection)
                .await
                .context("connecting for --postgres-stats")?,
        ),
        None => None,
    };
    let pg_before = match &stats {
        Some(client) => Some(postgres::PgSample::take(client).await?),
        None => None,
    };
    let cpu_before = CpuSample::take(plan.server_pid);
    let started = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..phase.producers {
        tasks.spawn(workers::produce(shared.clone(), stop.clone()));
    }
    for _ in 0..phase.consumers {
        tasks.spawn(workers::consume(shared.clone(), stop.clone()));
    }
    let interrupted = wait_for_end(phase, &shared, started).await;
    let elapsed = started.elapsed();
    let cpu_after = CpuSample::take(plan.server_pid);
    let pg_after = match &stats {
        Some(client) => Some(postgres::PgSample::take(client).await?),
        None => None,
    };
    // Workers abandon their in-flight request on this signal; nothing after it is counted.
    stop_sender.send_replace(true);
    let mut recorder = Recorder::default();
    while let Some(joined) = tasks.join_next().await {
        recorder.merge(joined.context("a bench worker panicked")?);
    }
    if interrupted {
        eprintln!("leaseq bench: interrupted");
    }
    let mut report = PhaseReport::new(
        phase,
        elapsed,
        recorder,
        shared.progress.snapshot(),
        cpu_before,
        cpu_after,
        plan.server_pid,
    );
    if let (Some(before), Some(after)) = (pg_before, pg_after) {
        report.add_postgres(before, after, elapsed);
    }
    Ok(report)
}

/// Waits until the phase is complete or its time is up, printing progress; returns true if the
/// user interrupted it.
async fn wait_for_end(phase: &Phase, shared: &Shared, started: Instant) -> bool {
    let deadline = tokio::time::Instant::from_std(started + phase.duration);
    let mut ticker = tokio::time::interval_at(
        tokio::time::Instant::from_std(started + Duration::from_secs(1)),
        Duration::from_secs(1),
    );
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let (mut last, mut last_at) = (shared.progress.snapshot(), Instant::now());
    let interrupt = tokio::signal::ctrl_c();
    tokio::pin!(interrupt);
    loop {
        tokio::select! {
            _ = tokio::time::sleep_until(deadline) => return false,
            _ = &mut interrupt => return true,
            _ = shared.finished.notified() => {
                if shared.is_finished() {
                    return false;
                }
            }
            _ = ticker.tick() => {
                let (now, now_at) = (shared.progress.snapshot(), Instant::now());
                let interval = now_at - last_at;
                let line = report::progress_line(phase.name, started.elapsed(), interval, &last, &now);
                eprintln!("{line}");
                (last, last_at) = (now, now_at);
            }
        }
    }
}
