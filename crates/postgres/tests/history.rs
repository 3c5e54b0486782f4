//! The history checker (`leaseq_testkit::history`) on a node whose log is in PostgreSQL: the
//! workload of `crates/server/tests/history_check.rs` (concurrent clients on a standard and a
//! FIFO queue with dead-letter queues, short leases, stale receipts on purpose) through the
//! in-process server, while PostgreSQL drops every session of the node twice (as a restart or
//! a failover does). The requests caught by a cut get `ServiceUnavailable`, which the history
//! records as outcomes unknown; the node reconnects by itself; at the end every queue is listed
//! and the history checked: no acknowledged send lost, no acknowledged delete back, no two
//! holders of a lease or of a FIFO group, receive counts that only grow, dead-lettering after
//! exactly `maxReceiveCount`, exact counts.
//!
//! `LEASEQ_HISTORY_SECONDS=N` runs the clients for N seconds (default 4);
//! `LEASEQ_HISTORY_SEED=x` fixes their choices (default: from the clock, printed).

mod common;
#[path = "../../server/tests/history_check/workload.rs"]
mod workload;

use std::time::Duration;

use leaseq_postgres::{drop_schema, open_service, PgConfig};
use leaseq_testkit::launch::{InProcessServer, Options};
use leaseq_testkit::sim;

use common::{connection, service_config, terminate_sessions};

/// When, into the run, PostgreSQL drops the node's sessions.
const CUTS_AT: [Duration; 2] = [Duration::from_millis(1_000), Duration::from_millis(2_500)];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_clients_on_postgres_through_cuts_leave_a_history_that_checks() {
    let seconds = sim::env_number("LEASEQ_HISTORY_SECONDS").unwrap_or(4);
    let seed = sim::seed_or_clock("LEASEQ_HISTORY_SEED");
    println!("LEASEQ_HISTORY_SEED={seed} LEASEQ_HISTORY_SECONDS={seconds}");
    let application_name = format!("leaseq_history_{}", std::process::id());
    let mut config = PgConfig::new(connection(&application_name));
    config.schema = application_name.clone();
    // Several flushes in flight: the cuts then also fall among commits out of order.
    config.flushes_in_flight = 4;
    drop_schema(&config.connection, &config.schema).unwrap();
    let service =
        tokio::task::block_in_place(|| open_service(&config, service_config(), 1 << 20)).unwrap();
    let server = InProcessServer::serve(service, Options::default()).await;

    let cutter = tokio::spawn(async move {
        let mut cut = 0;
        let started = tokio::time::Instant::now();
        for at in CUTS_AT {
            tokio::time::sleep_until(started + at).await;
            cut += terminate_sessions(&application_name).await;
        }
        cut
    });
    let (recording, tallies) = workload::run(server.addr(), seconds, seed).await;
    let cut = cutter.await.unwrap();
    server.stop().await;
    let summary = workload::check_or_panic(&recording, &workload::config(), seed, &tallies);
    drop_schema(&config.connection, &config.schema).unwrap();

    assert!(cut >= 4, "each cut ended the node's sessions: {cut}");
    assert!(summary.sends_acknowledged > 100, "{summary}");
    assert!(summary.redeliveries > 0, "{summary}");
    assert!(summary.dead_lettered > 0, "{summary}");
    assert!(
        summary.group_pairs > 0 && summary.lease_pairs > 0,
        "{summary}"
    );
}
