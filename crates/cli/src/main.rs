//! The `leaseq` binary: `leaseq serve` runs the server; `bench`, `queues`, `stats`, `message`,
//! `dlq` and `redrive` talk to one; `cluster status` reads a cluster's state from PostgreSQL.

mod admin;
mod allocator;
mod bench;
mod cluster;
mod healthcheck;
mod message;
mod redrive;
mod serve;
mod tls_client;

use clap::{Parser, Subcommand};

/// mimalloc instead of glibc's allocator: with millions of messages waiting, freeing a body that
/// sat cold in memory costs glibc scattered free-list work that grew the engine's per-message
/// cost by half (measured by the engine benchmark at 10 000 000 messages: 1.5–2.1× slower than at
/// 1 000 with glibc, 1.16× with mimalloc). Called through its plain entry points where the
/// alignment allows ([`allocator`]).
#[global_allocator]
static ALLOCATOR: allocator::Mimalloc = allocator::Mimalloc;

/// leaseq: a durable, fast, self-hostable message queue that speaks the Amazon SQS API.
#[derive(Parser)]
#[command(name = "leaseq", version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the server (SQS API on both wire protocols, `GET /health`).
    Serve(serve::ServeArgs),
    /// Drive an SQS endpoint (leaseq or any other) with producers and consumers and report
    /// throughput, latency percentiles and CPU time.
    Bench(bench::BenchArgs),
    /// List the queues of a running server.
    Queues(admin::QueuesArgs),
    /// Show each queue's counts, lease pressure (deliveries, expired leases, late deletes,
    /// extensions, p99 processing time) and the visibility advisor's recommendation;
    /// `--watch` redraws it live.
    Stats(admin::StatsArgs),
    /// A message's delivery attempts: when each began, its lease, extensions, how it ended and
    /// which client received it.
    Message(message::MessageArgs),
    /// Look inside a dead-letter queue (peek) without leasing its messages.
    Dlq(redrive::DlqArgs),
    /// Move a dead-letter queue's messages home: start (with a canary limit), pause, resume,
    /// change the rate, cancel, and watch progress.
    Redrive(redrive::RedriveArgs),
    /// A cluster's state, read from its PostgreSQL: `leaseq cluster status`.
    Cluster(cluster::ClusterArgs),
    /// Exit 0 if a running server is ready for traffic (`GET /readyz`), 1 if not: a container
    /// health check for images without curl.
    Healthcheck(healthcheck::HealthcheckArgs),
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    match cli.command {
        Command::Serve(args) => serve::run(args),
        Command::Bench(args) => bench::run(args),
        Command::Queues(args) => admin::queues(args),
        Command::Stats(args) => admin::stats(args),
        Command::Message(args) => message::run(args),
        Command::Dlq(args) => redrive::run_dlq(args),
        Command::Redrive(args) => redrive::run_redrive(args),
        Command::Healthcheck(args) => healthcheck::run(args),
        Command::Cluster(args) => cluster::run(args),
    }
}
