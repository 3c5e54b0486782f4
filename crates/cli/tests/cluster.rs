//! The cluster under faults, checked by the history checker: three real `leaseq serve
//! --cluster true` nodes on one PostgreSQL schema, the history checks' workload sending each
//! request to a node drawn at random (any node answers any request: the owner itself, a
//! standby by forwarding), and meanwhile, in cycles:
//!
//! - **kill**: kill -9 of the owner; a standby must take over (another owner, a higher
//!   epoch); the killed node starts again (as a standby);
//! - **pause**: SIGSTOP of the owner until a standby has taken over (PostgreSQL ends the
//!   paused owner's lock session after `--node-timeout-ms`), then SIGCONT: the old owner's
//!   flushes are fenced and it must step down to a standby of the new owner;
//! - **rolling restart**: SIGTERM of every node in turn (a clean exit, a takeover when it was
//!   the owner), each started again before the next stops;
//! - **join**: a fourth node starts, becomes a standby the clients send to, and leaves
//!   (SIGTERM).
//!
//! A request answered with a 5xx, broken off, or unanswered within 10 s has an unknown
//! outcome. At the end of a round (at most [`ROUND_CYCLES_MAX`] cycles) the clients stop,
//! the test waits until every node agrees on one owner, lists every queue, and checks the
//! round's history: no acknowledged send lost, no acknowledged delete back, no two holders of
//! a lease or of a FIFO group, stale receipts never acting, FIFO order, dead-lettering after
//! exactly `maxReceiveCount`, exact counts. Each round has queues of its own, so a long run
//! is checked round by round on histories of bounded size.
//!
//! The same runs on a log of several buckets (`--postgres-buckets 4`), which the nodes share
//! out by placement: the faults strike the owner of bucket 0 (and whatever else it owns), a
//! cycle is over once every node agrees on every bucket's owner and each bucket is with the
//! node placement prefers among those up, requests go to their queue's bucket's owner and
//! dead letters between buckets go between nodes as bucket calls; a joining node takes its
//! share of the buckets and gives it back when it leaves.
//!
//! `LEASEQ_CLUSTER_CYCLES=N` runs N fault cycles (default 8: two of each kind; the nightly
//! run takes 100 or more); `LEASEQ_CLUSTER_SEED=x` replays the fault order, the pauses and
//! the clients' choices (the interleaving is the machine's). The nodes' logs are in
//! `target/tmp/cluster-PID-SEED/`, kept when the test fails; the PostgreSQL schema of the run
//! is dropped either way.

mod common;
#[path = "../../server/tests/history_check/workload.rs"]
mod workload;

use std::collections::HashMap;
use std::fmt;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use serde_json::Value;

use leaseq_testkit::history::Summary;
use leaseq_testkit::http::{Connection, RawResponse};
use leaseq_testkit::launch::{free_loopback_addr, ChildServer, ServeCommand};
use leaseq_testkit::names::ScratchDir;
use leaseq_testkit::sim;

use common::PostgresSchema;
use leaseq_postgres::cluster::placement;
use workload::{Nodes, Queues, Recording};

/// Fault cycles of the normal suite: two of each kind. `LEASEQ_CLUSTER_CYCLES` overrides.
const CYCLES_DEFAULT: u64 = 8;
/// Cycles checked in one history: a round's history stays small enough to check in seconds.
const ROUND_CYCLES_MAX: u64 = 10;
/// The nodes that run throughout; a fourth joins and leaves in the join cycles.
const CORE_NODES: usize = 3;
/// `--node-timeout-ms`: how long a paused owner keeps ownership.
const NODE_TIMEOUT_MS: u64 = 2_000;
/// How long a client waits for an answer before recording the outcome unknown: longer than
/// the workload's requests take (none long-polls) plus a standby's wait for an owner (~2 s).
const ANSWER_WITHIN: Duration = Duration::from_secs(10);
/// How long the nodes may take to agree on one owner, all ready, after a fault ended.
const STABLE_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a standby may take to become the owner after the owner died, stopped or paused
/// (past `--node-timeout-ms`).
const TAKEOVER_TIMEOUT: Duration = Duration::from_secs(20);
/// How long an answer from `/api/cluster` or `/readyz` may take.
const PROBE_TIMEOUT: Duration = Duration::from_secs(2);
/// How often the nodes' views are read while waiting for them to change.
const PROBE_INTERVAL: Duration = Duration::from_millis(50);
/// The load runs this long (drawn by the seed) before each fault and while a node is down.
const LOAD_MS_MIN: u64 = 300;
const LOAD_MS_MAX: u64 = 1_200;
/// A paused owner stays paused this much longer (drawn) after the takeover, so requests pile
/// up at it and meet the fence after SIGCONT.
const PAUSE_EXTRA_MS_MAX: u64 = 1_000;

/// What a fault cycle does.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
enum Fault {
    Kill,
    Pause,
    RollingRestart,
    Join,
}

const FAULTS: [Fault; 4] = [
    Fault::Kill,
    Fault::Pause,
    Fault::RollingRestart,
    Fault::Join,
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_under_kills_pauses_restarts_and_joins_leaves_a_history_that_checks() {
    let cycles = sim::env_number("LEASEQ_CLUSTER_CYCLES").unwrap_or(CYCLES_DEFAULT);
    run_cycles(1, cycles).await;
}

/// The same on a log of four buckets shared out over the nodes (one cycle of each kind in the
/// suite; `LEASEQ_CLUSTER_CYCLES` sets both runs' count).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_of_four_buckets_under_the_same_faults_leaves_a_history_that_checks() {
    let cycles = sim::env_number("LEASEQ_CLUSTER_CYCLES").unwrap_or(FAULTS.len() as u64);
    run_cycles(4, cycles).await;
}

async fn run_cycles(buckets: u32, cycles: u64) {
    let seed = sim::seed_or_clock("LEASEQ_CLUSTER_SEED");
    println!(
        "cluster test ({buckets} bucket(s)): seed {seed}, {cycles} cycles \
         (rerun with LEASEQ_CLUSTER_SEED={seed} LEASEQ_CLUSTER_CYCLES={cycles})"
    );
    let started = Instant::now();
    let mut rng = StdRng::seed_from_u64(seed);
    let mut cluster = Cluster::start(seed, buckets).await;
    let mut report = Report::default();
    let faults = fault_order(cycles, &mut rng);
    for (round, faults) in faults.chunks(ROUND_CYCLES_MAX as usize).enumerate() {
        let queues = Queues::named(&format!("cluster-r{round}"));
        workload::setup(&cluster.clients, &queues).await;
        let recording = Recording::default();
        let clients_seed = seed ^ (round as u64).wrapping_mul(0x2545_f491_4f6c_dd1d);
        let running = workload::start(&cluster.clients, &queues, &recording, clients_seed);
        for &fault in faults {
            cluster.load_for_a_moment(&mut rng).await;
            let cycle = report.cycles.len();
            let outcome = cluster.inflict(fault, &mut rng).await;
            println!(
                "cycle {cycle} ({:.1} s): {fault:?}: {outcome}",
                started.elapsed().as_secs_f64()
            );
            report.cycles.push((fault, outcome));
        }
        let tallies = running.stop().await;
        cluster.await_stable().await;
        // A dead letter on its way to another bucket counts in neither queue for a moment
        // (docs/design/cluster.md): the listings wait until no outbox holds one.
        cluster.await_no_transfers().await;
        workload::observe(&cluster.clients, &queues, &recording).await;
        let config = queues.config();
        let summary = workload::check_or_panic(&recording, &config, seed, &tallies);
        // The checks have teeth on this very history: a message taken out of its listing is
        // noticed as a lost send.
        workload::assert_a_lost_send_is_noticed(&recording, &config);
        let executed = recording.executed_by_node();
        let forwarded = recording.forwarded(&cluster.node_at());
        println!("round {round}: executed by {executed:?}, {forwarded} forwarded");
        assert!(summary.sends_acknowledged > 0, "round {round}: {summary}");
        report.add_round(&summary, forwarded, executed.len());
    }
    cluster.stop_all().await;
    println!(
        "cluster test: {} in {:.1} s (seed {seed})",
        report,
        started.elapsed().as_secs_f64()
    );
    // The run exercised what it means to: work acknowledged through the faults, requests
    // forwarded by standbys, and more than one node executing them as ownership moved.
    assert!(report.sends_acknowledged > 100, "{report}");
    assert!(report.forwarded > 0, "no request was forwarded: {report}");
    assert!(
        cycles < 2 || report.most_executing_nodes > 1,
        "one node executed everything in every round: {report}"
    );
}

/// `cycles` faults: every kind once in each group of four, in an order the seed shuffles.
fn fault_order(cycles: u64, rng: &mut StdRng) -> Vec<Fault> {
    let mut order = Vec::new();
    while (order.len() as u64) < cycles {
        let mut group = FAULTS;
        group.shuffle(rng);
        order.extend(group);
    }
    order.truncate(cycles as usize);
    order
}

/// The owner as the nodes agree on it.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Owner {
    node_id: String,
    epoch: u64,
}

impl fmt::Display for Owner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} (epoch {})", self.node_id, self.epoch)
    }
}

/// What one cycle did to ownership.
#[derive(Debug)]
struct CycleOutcome {
    before: Owner,
    after: Owner,
    /// Each takeover the cycle forced, with how long it took from the fault to a new owner
    /// answering as one.
    takeovers: Vec<(Owner, Duration)>,
}

impl fmt::Display for CycleOutcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "owner {} -> {}", self.before, self.after)?;
        for (owner, took) in &self.takeovers {
            write!(f, "; takeover by {owner} in {} ms", took.as_millis())?;
        }
        Ok(())
    }
}

/// What the whole run did, for its summary line.
#[derive(Default)]
struct Report {
    cycles: Vec<(Fault, CycleOutcome)>,
    rounds: usize,
    operations: usize,
    unknown: usize,
    sends_acknowledged: usize,
    deliveries: usize,
    forwarded: usize,
    most_executing_nodes: usize,
}

impl Report {
    fn add_round(&mut self, summary: &Summary, forwarded: usize, executing_nodes: usize) {
        self.rounds += 1;
        self.operations += summary.operations;
        self.unknown += summary.indefinite;
        self.sends_acknowledged += summary.sends_acknowledged;
        self.deliveries += summary.deliveries;
        self.forwarded += forwarded;
        self.most_executing_nodes = self.most_executing_nodes.max(executing_nodes);
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut by_kind: HashMap<Fault, usize> = HashMap::new();
        let mut takeovers: Vec<Duration> = Vec::new();
        for (fault, outcome) in &self.cycles {
            *by_kind.entry(*fault).or_default() += 1;
            takeovers.extend(outcome.takeovers.iter().map(|(_, took)| *took));
        }
        takeovers.sort();
        let kinds: Vec<String> = FAULTS
            .iter()
            .map(|fault| format!("{} {fault:?}", by_kind.get(fault).copied().unwrap_or(0)))
            .collect();
        write!(
            f,
            "{} cycles ({}) in {} rounds; {} operations, {} unknown outcomes, {} sends \
             acknowledged, {} deliveries, {} forwarded; {} takeovers",
            self.cycles.len(),
            kinds.join(", "),
            self.rounds,
            self.operations,
            self.unknown,
            self.sends_acknowledged,
            self.deliveries,
            self.forwarded,
            takeovers.len(),
        )?;
        if let (Some(median), Some(slowest)) =
            (takeovers.get(takeovers.len() / 2), takeovers.last())
        {
            write!(
                f,
                " (median {} ms, slowest {} ms)",
                median.as_millis(),
                slowest.as_millis()
            )?;
        }
        Ok(())
    }
}

/// One node: its id, its fixed address (so `--advertise` stays true across restarts), its
/// process while it has one.
struct Node {
    id: String,
    addr: SocketAddr,
    command: ServeCommand,
    /// The command on another address (for a first start that lost its port).
    command_at: Box<dyn Fn(SocketAddr) -> ServeCommand>,
    log_dir: PathBuf,
    server: Option<ChildServer>,
    /// Running and not paused: expected to answer.
    up: bool,
}

impl Node {
    /// Starts the node (again) and waits until it answers `/health`.
    ///
    /// Its address stays the same across restarts (`--advertise` must stay true), so it is
    /// chosen before the first start, and another process may take the port first (the other
    /// test of this file runs nodes at the same time). Before its first start nothing knows the
    /// address yet: a node that lost the race moves to another.
    async fn start(&mut self) {
        if let Some(server) = &mut self.server {
            server.start_again().await;
            self.up = true;
            return;
        }
        for _ in 0..FIRST_START_ATTEMPTS {
            let listening = format!("listening on http://{}", self.addr);
            let command = self.command.clone();
            let started =
                ChildServer::start_at_fixed_address(command, &self.log_dir, &listening).await;
            if let Some(server) = started {
                self.server = Some(server);
                self.up = true;
                return;
            }
            self.addr = free_loopback_addr();
            self.command = (self.command_at)(self.addr);
        }
        panic!(
            "node {} found no free port in {FIRST_START_ATTEMPTS} attempts",
            self.id
        );
    }

    fn server(&mut self) -> &mut ChildServer {
        self.server.as_mut().expect("the node was started")
    }

    /// The last lines of every start's log, for a failure's message.
    fn log_tail(&self) -> String {
        let logs = self
            .server
            .as_ref()
            .map(ChildServer::logs)
            .unwrap_or_default();
        let lines: Vec<&str> = logs.lines().collect();
        let tail = &lines[lines.len().saturating_sub(40)..];
        format!(
            "--- {} ({}), its last log lines:\n{}",
            self.id,
            self.addr,
            tail.join("\n")
        )
    }
}

/// What `GET /api/cluster` of one node says (of bucket 0, with several buckets).
#[derive(Clone, Debug)]
struct View {
    node_id: String,
    role: String,
    epoch: Option<u64>,
    owner: Option<String>,
    ready: bool,
    /// Per bucket, the owner this node knows.
    owners: Vec<Option<String>>,
}

/// The nodes, the schema they share, and the list of addresses the clients send to.
struct Cluster {
    // Declared before `postgres`: the nodes are killed before their schema is dropped.
    nodes: Vec<Node>,
    /// The log's bucket count.
    buckets: u32,
    clients: Nodes,
    scratch: ScratchDir,
    postgres: PostgresSchema,
}

impl Cluster {
    /// Starts the three core nodes on a fresh schema and waits until they agree on an owner.
    async fn start(seed: u64, buckets: u32) -> Cluster {
        let name = format!("cluster-{}-{buckets}-{seed}", std::process::id());
        let scratch = ScratchDir::new(env!("CARGO_TARGET_TMPDIR"), &name);
        let postgres = PostgresSchema::new(&name.replace('-', "_"));
        println!(
            "nodes' logs in {}, schema {}",
            scratch.path().display(),
            postgres.schema
        );
        let mut nodes: Vec<Node> = (1..=CORE_NODES + 1)
            .map(|number| node(&format!("n{number}"), scratch.path(), &postgres, buckets))
            .collect();
        for node in &mut nodes[..CORE_NODES] {
            node.start().await;
        }
        let addresses = nodes[..CORE_NODES].iter().map(|node| node.addr).collect();
        let cluster = Cluster {
            nodes,
            buckets,
            clients: Nodes::new(addresses, ANSWER_WITHIN),
            scratch,
            postgres,
        };
        cluster.await_stable().await;
        cluster
    }

    /// Which node id listens on each address.
    fn node_at(&self) -> HashMap<SocketAddr, String> {
        self.nodes
            .iter()
            .map(|node| (node.addr, node.id.clone()))
            .collect()
    }

    fn index_of(&self, node_id: &str) -> usize {
        self.nodes
            .iter()
            .position(|node| node.id == node_id)
            .unwrap_or_else(|| panic!("an owner that is no node of ours: {node_id}"))
    }

    async fn load_for_a_moment(&self, rng: &mut StdRng) {
        let load_ms = rng.random_range(LOAD_MS_MIN..=LOAD_MS_MAX);
        tokio::time::sleep(Duration::from_millis(load_ms)).await;
    }

    async fn inflict(&mut self, fault: Fault, rng: &mut StdRng) -> CycleOutcome {
        match fault {
            Fault::Kill => self.kill_owner(rng).await,
            Fault::Pause => self.pause_owner(rng).await,
            Fault::RollingRestart => self.rolling_restart(rng).await,
            Fault::Join => self.join_and_leave(rng).await,
        }
    }

    /// kill -9 of the owner: a standby takes over once PostgreSQL sees the session die.
    async fn kill_owner(&mut self, rng: &mut StdRng) -> CycleOutcome {
        let before = self.await_stable().await;
        let owner = self.index_of(&before.node_id);
        let killed_at = Instant::now();
        self.nodes[owner].server().kill();
        self.nodes[owner].up = false;
        let after = self.await_takeover(&before, killed_at).await;
        // The cluster serves without the node for a moment, then it comes back as a standby.
        self.load_for_a_moment(rng).await;
        self.nodes[owner].start().await;
        let stable = self.await_stable().await;
        CycleOutcome {
            before,
            after: stable,
            takeovers: vec![after],
        }
    }

    /// SIGSTOP of the owner past `--node-timeout-ms`: a standby takes over; after SIGCONT the
    /// old owner must step down (its flushes are fenced) and follow the new one.
    async fn pause_owner(&mut self, rng: &mut StdRng) -> CycleOutcome {
        let before = self.await_stable().await;
        let owner = self.index_of(&before.node_id);
        let paused_at = Instant::now();
        self.nodes[owner].server().signal("STOP");
        self.nodes[owner].up = false;
        let after = self.await_takeover(&before, paused_at).await;
        let extra_ms = rng.random_range(0..=PAUSE_EXTRA_MS_MAX);
        tokio::time::sleep(Duration::from_millis(extra_ms)).await;
        self.nodes[owner].server().signal("CONT");
        self.nodes[owner].up = true;
        let stable = self.await_stable().await;
        // With one bucket nothing gives it back; with several, placement does once the paused
        // node is live again.
        assert!(
            self.buckets > 1 || stable.node_id != before.node_id,
            "the paused owner is the owner again after SIGCONT"
        );
        CycleOutcome {
            before,
            after: stable,
            takeovers: vec![after],
        }
    }

    /// SIGTERM of every core node in turn, in an order the seed draws, each started again
    /// before the next: the owner's graceful stop hands ownership to a standby.
    async fn rolling_restart(&mut self, rng: &mut StdRng) -> CycleOutcome {
        let first = self.await_stable().await;
        let mut order: Vec<usize> = (0..CORE_NODES).collect();
        order.shuffle(rng);
        let mut takeovers = Vec::new();
        for index in order {
            let before = self.await_stable().await;
            let stopped_at = Instant::now();
            let node = &mut self.nodes[index];
            node.server().terminate();
            let status = node.server().wait_exit().await;
            node.up = false;
            assert!(
                status.success(),
                "{} stopped with {status}:\n{}",
                node.id,
                node.log_tail()
            );
            if node.id == before.node_id {
                takeovers.push(self.await_takeover(&before, stopped_at).await);
            }
            self.nodes[index].start().await;
        }
        let last = self.await_stable().await;
        CycleOutcome {
            before: first,
            after: last,
            takeovers,
        }
    }

    /// A fourth node starts, becomes a standby that clients send to, and leaves with SIGTERM.
    async fn join_and_leave(&mut self, rng: &mut StdRng) -> CycleOutcome {
        let before = self.await_stable().await;
        let joining = CORE_NODES;
        self.nodes[joining].start().await;
        let with_it = self.await_stable().await;
        self.clients.add(self.nodes[joining].addr);
        self.load_for_a_moment(rng).await;
        let node = &mut self.nodes[joining];
        node.server().terminate();
        let status = node.server().wait_exit().await;
        node.up = false;
        assert!(
            status.success(),
            "{} left with {status}:\n{}",
            node.id,
            node.log_tail()
        );
        self.clients.remove(self.nodes[joining].addr);
        let after = self.await_stable().await;
        if self.buckets == 1 {
            // A joining standby takes nothing over with one bucket (held by the owner's lock),
            // so neither its arrival nor its leaving moves ownership.
            assert_eq!(
                (&before, &with_it),
                (&after, &after),
                "ownership moved when a standby joined or left"
            );
        }
        CycleOutcome {
            before,
            after,
            takeovers: Vec::new(),
        }
    }

    /// Waits until a node other than `before`'s owner answers as the owner under a higher
    /// epoch: the takeover, and how long it took since `since`.
    async fn await_takeover(&self, before: &Owner, since: Instant) -> (Owner, Duration) {
        let deadline = since + TAKEOVER_TIMEOUT;
        loop {
            for view in self.views().await.into_iter().flatten() {
                let epoch = view.epoch.unwrap_or(0);
                if view.role == "owner" && view.node_id != before.node_id && epoch > before.epoch {
                    let owner = Owner {
                        node_id: view.node_id,
                        epoch,
                    };
                    return (owner, since.elapsed());
                }
            }
            if Instant::now() > deadline {
                panic!(
                    "no takeover from {before} within {TAKEOVER_TIMEOUT:?}; views: {:?}\n{}",
                    self.views().await,
                    self.diagnostics().await
                );
            }
            tokio::time::sleep(PROBE_INTERVAL).await;
        }
    }

    /// Waits until every node that is up answers, is ready, and all agree on one owner (the
    /// owner says so itself, with an epoch): that owner.
    async fn await_stable(&self) -> Owner {
        let deadline = Instant::now() + STABLE_TIMEOUT;
        let up: Vec<&str> = self
            .nodes
            .iter()
            .filter(|node| node.up)
            .map(|node| node.id.as_str())
            .collect();
        loop {
            let views = self.views().await;
            let placed = |views: &[Result<View, String>]| {
                let Some(Ok(first)) = views.first() else {
                    return false;
                };
                (0..self.buckets).all(|bucket| {
                    let preferred = placement::preferred(bucket, up.iter().copied());
                    first.owners.get(bucket as usize).and_then(Option::as_deref) == preferred
                })
            };
            if let Some(owner) =
                agreed_owner(&views).filter(|_| self.buckets == 1 || placed(&views))
            {
                return owner;
            }
            if Instant::now() > deadline {
                panic!(
                    "the nodes did not agree on one owner within {STABLE_TIMEOUT:?}; views: \
                     {views:?}\n{}",
                    self.diagnostics().await
                );
            }
            tokio::time::sleep(PROBE_INTERVAL).await;
        }
    }

    /// Waits until no node's outboxes hold a transfer.
    async fn await_no_transfers(&self) {
        let started = Instant::now();
        let deadline = started + STABLE_TIMEOUT;
        let mut first = true;
        loop {
            let mut waiting = Vec::new();
            for node in self.nodes.iter().filter(|node| node.up) {
                let count = match get(node.addr, "/api/cluster").await {
                    Ok(answer) => serde_json::from_slice::<Value>(&answer.body)
                        .ok()
                        .and_then(|body| body["transfers_waiting"].as_u64()),
                    Err(_) => None,
                };
                waiting.push((node.id.clone(), count));
            }
            if waiting.iter().all(|(_, count)| *count == Some(0)) {
                if !first {
                    println!(
                        "waited {} ms for the outboxes to empty",
                        started.elapsed().as_millis()
                    );
                }
                return;
            }
            if first {
                println!("transfers waiting before the listings: {waiting:?}");
                first = false;
            }
            assert!(
                Instant::now() < deadline,
                "transfers still waiting after {STABLE_TIMEOUT:?}: {waiting:?}\n{}",
                self.diagnostics().await
            );
            tokio::time::sleep(PROBE_INTERVAL).await;
        }
    }

    /// Each node that is up: its view, or why it gave none.
    async fn views(&self) -> Vec<Result<View, String>> {
        let mut views = Vec::new();
        for node in self.nodes.iter().filter(|node| node.up) {
            views.push(
                view(node.addr)
                    .await
                    .map_err(|error| format!("{}: {error}", node.id)),
            );
        }
        views
    }

    /// What a failure's message shows of the nodes: each one's cluster lines of `/metrics`
    /// (forwards refused, broken, unrouted; takeovers, step-downs) and the end of its logs.
    async fn diagnostics(&self) -> String {
        let mut text = String::new();
        for node in self.nodes.iter().filter(|node| node.server.is_some()) {
            let metrics = match get(node.addr, "/metrics").await {
                Ok(page) => page
                    .text()
                    .lines()
                    .filter(|line| line.starts_with("leaseq_cluster_"))
                    .collect::<Vec<_>>()
                    .join("\n"),
                Err(error) => error,
            };
            text.push_str(&format!(
                "--- {}: {metrics}\n{}\n",
                node.id,
                node.log_tail()
            ));
        }
        format!(
            "{text}(all logs in {}; the log in schema {})",
            self.scratch.path().display(),
            self.postgres.schema
        )
    }

    /// Stops every node gracefully: each must exit cleanly, and no start of any node may have
    /// panicked (a panic in a request's task does not end the process, so only its log shows it).
    async fn stop_all(&mut self) {
        for node in self.nodes.iter_mut().filter(|node| node.up) {
            let server = node
                .server
                .as_mut()
                .expect("a node that is up has a process");
            server.terminate();
            let status = server.wait_exit().await;
            node.up = false;
            assert!(
                status.success(),
                "{} stopped with {status}:\n{}",
                node.id,
                node.log_tail()
            );
        }
        for node in self.nodes.iter().filter(|node| node.server.is_some()) {
            let logs = node
                .server
                .as_ref()
                .map(ChildServer::logs)
                .unwrap_or_default();
            let panics: Vec<&str> = logs
                .lines()
                .filter(|line| line.contains("panicked"))
                .collect();
            assert!(panics.is_empty(), "{} panicked: {panics:#?}", node.id);
        }
    }
}

/// The owner every view agrees on, if they all answered, are ready, exactly one says it owns
/// (with an epoch) and every other names it.
fn agreed_owner(views: &[Result<View, String>]) -> Option<Owner> {
    let views: Vec<&View> = views
        .iter()
        .map(|view| view.as_ref().ok())
        .collect::<Option<_>>()?;
    let mut owners = views.iter().filter(|view| view.role == "owner");
    let owner = owners.next()?;
    if owners.next().is_some() {
        return None;
    }
    let agreed = views.iter().all(|view| {
        view.ready
            && (view.node_id == owner.node_id
                || (view.role == "standby" && view.owner.as_deref() == Some(&owner.node_id)))
            && view.owners == views[0].owners
            && view.owners.iter().all(Option::is_some)
    });
    if !agreed {
        return None;
    }
    Some(Owner {
        node_id: owner.node_id.clone(),
        epoch: owner.epoch?,
    })
}

/// Node `id`'s command, on a loopback port of its own for the whole run, with its logs (and
/// its data directory, which a node on PostgreSQL does not use for the log) under `scratch`.
fn node(id: &str, scratch: &Path, postgres: &PostgresSchema, buckets: u32) -> Node {
    let addr = free_loopback_addr();
    let log_dir = scratch.join(id);
    std::fs::create_dir_all(&log_dir).expect("a directory for the node's logs");
    let (node_id, data_dir) = (id.to_string(), log_dir.join("data"));
    let (connection, schema) = (postgres.connection.clone(), postgres.schema.clone());
    let command_at = move |addr: SocketAddr| {
        let address = addr.to_string();
        common::serve_command()
            .listening_on(addr)
            .data_dir(&data_dir)
            .args([
                "--listen",
                &address,
                "--postgres",
                &connection,
                "--postgres-schema",
                &schema,
                "--postgres-buckets",
                &buckets.to_string(),
                "--cluster",
                "true",
                "--node-id",
                &node_id,
                "--advertise",
                &address,
                "--node-timeout-ms",
                &NODE_TIMEOUT_MS.to_string(),
                "--log",
                "info",
            ])
            // Checkpoints often, so takeovers replay from a snapshot and a short tail, and
            // kills land in checkpoints too.
            .args(["--checkpoint-bytes", "262144"])
    };
    Node {
        id: id.to_string(),
        addr,
        command: command_at(addr),
        command_at: Box::new(command_at),
        log_dir,
        server: None,
        up: false,
    }
}

/// How many addresses a node's first start tries.
const FIRST_START_ATTEMPTS: usize = 5;

/// `GET /api/cluster` and `GET /readyz` of the node at `addr`.
async fn view(addr: SocketAddr) -> Result<View, String> {
    let cluster = get(addr, "/api/cluster").await?;
    if cluster.status != 200 {
        return Err(format!(
            "/api/cluster: {} {}",
            cluster.status,
            cluster.text()
        ));
    }
    let body: Value = serde_json::from_slice(&cluster.body)
        .map_err(|error| format!("/api/cluster: {error}: {}", cluster.text()))?;
    let text = |value: &Value| value.as_str().map(str::to_string);
    let ready = get(addr, "/readyz").await?.status == 200;
    let node_id = text(&body["node_id"]).ok_or_else(|| format!("no node_id in {body}"))?;
    let buckets = body["buckets"]
        .as_array()
        .ok_or_else(|| format!("no buckets in {body}"))?;
    let owners: Vec<Option<String>> = buckets.iter().map(|b| text(&b["owner"])).collect();
    if buckets.len() > 1 {
        // Of bucket 0: the faults strike its owner.
        let owner = owners[0].clone();
        let owns = owner.as_deref() == Some(node_id.as_str());
        return Ok(View {
            role: if owns { "owner" } else { "standby" }.into(),
            epoch: buckets[0]["epoch"].as_u64(),
            owner: owner.filter(|_| !owns),
            node_id,
            ready,
            owners,
        });
    }
    Ok(View {
        node_id,
        role: text(&body["role"]).ok_or_else(|| format!("no role in {body}"))?,
        epoch: body["epoch"].as_u64(),
        owner: text(&body["owner"]["node_id"]),
        ready,
        owners,
    })
}

/// One GET on a connection of its own, answered within [`PROBE_TIMEOUT`].
async fn get(addr: SocketAddr, path: &str) -> Result<RawResponse, String> {
    let connect = tokio::time::timeout(PROBE_TIMEOUT, Connection::connect(addr));
    let mut connection = connect
        .await
        .map_err(|_| format!("{path}: no connection within {PROBE_TIMEOUT:?}"))?
        .map_err(|error| format!("{path}: {error}"))?;
    connection
        .send_within(PROBE_TIMEOUT, "GET", path, &[], b"")
        .await
        .map_err(|error| format!("{path}: {error}"))
}
