//! The history checker (`leaseq_testkit::history`) against one real node: concurrent clients
//! send, receive with short visibility timeouts, delete, change visibility (also with stale
//! receipts on purpose) on a standard queue and a FIFO queue, each with a dead-letter queue
//! after 3 receives, through the in-process server on the production accept loop. Every
//! operation is recorded with its invocation and completion; at the end every queue is listed
//! (`LeaseqPeekMessages`, which leases nothing, and its counts) and the history is checked.
//!
//! `LEASEQ_HISTORY_SECONDS=N` runs the clients for N seconds (default 3);
//! `LEASEQ_HISTORY_SEED=x` fixes the clients' choices (default: from the clock, printed).

#[path = "history_check/workload.rs"]
mod workload;

use leaseq_testkit::history::{check_events, Outcome, Reply, ViolationKind};
use leaseq_testkit::launch::InProcessServer;
use leaseq_testkit::sim;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_clients_leave_a_history_that_checks() {
    let seconds = sim::env_number("LEASEQ_HISTORY_SECONDS").unwrap_or(3);
    let seed = sim::seed_or_clock("LEASEQ_HISTORY_SEED");
    println!("LEASEQ_HISTORY_SEED={seed} LEASEQ_HISTORY_SECONDS={seconds}");
    let server = InProcessServer::start().await;
    let (recording, tallies) = workload::run(server.addr(), seconds, seed).await;
    server.stop().await;
    let config = workload::config();
    let summary = workload::check_or_panic(&recording, &config, seed, &tallies);

    // The run exercised what the checks look at.
    assert_eq!(
        summary.indefinite, 0,
        "one node in process answers everything"
    );
    assert_eq!(summary.sends_checked, summary.sends_acknowledged);
    // Exact counts: every acknowledged send is deleted or listed (the listings' lengths are
    // the server's own counts, checked), and nothing else is listed.
    assert_eq!(
        summary.sends_acknowledged,
        summary.sends_deleted + summary.remaining,
        "{summary}"
    );
    assert!(summary.sends_acknowledged > 100, "{summary}");
    assert!(summary.redeliveries > 0, "{summary}");
    assert!(summary.dead_lettered > 0, "{summary}");
    assert!(summary.remaining > 0, "{summary}");
    assert!(
        summary.group_pairs > 0 && summary.lease_pairs > 0,
        "{summary}"
    );
    assert!(
        summary.stale_deletes + summary.stale_visibility_changes_refused > 0,
        "{summary}"
    );

    // And the checks have teeth on this very history: a listed message taken out of its
    // listing is a lost send; a redelivery reported as a first delivery is a count gone back.
    workload::assert_a_lost_send_is_noticed(&recording, &config);
    let mut recounted = recording.history.events();
    let redelivery = recounted
        .iter_mut()
        .find_map(|event| match &mut event.outcome {
            Outcome::Ok(Reply::Received(messages)) => messages
                .iter_mut()
                .find(|message| message.receive_count > 1),
            _ => None,
        });
    redelivery.expect("a redelivery").receive_count = 1;
    let kinds = kinds_of(check_events(&recounted, &config));
    assert!(
        kinds.contains(&ViolationKind::ReceiveCountWentBack),
        "{kinds:?}"
    );
}

fn kinds_of(
    result: Result<leaseq_testkit::history::Summary, Vec<leaseq_testkit::history::Violation>>,
) -> Vec<ViolationKind> {
    match result {
        Ok(summary) => panic!("a mutated history passed: {summary}"),
        Err(violations) => violations.iter().map(|violation| violation.kind).collect(),
    }
}
