//! A seeded, deterministic simulation of the cluster's ownership and fencing protocol
//! (`docs/design/cluster.md`, "The fencing protocol"), apart from PostgreSQL, sockets and
//! tokio: many more interleavings of crashes, pauses and PostgreSQL restarts than real
//! processes reach (`crates/cli/tests/cluster.rs` does those), on a fake clock.
//!
//! **What is modelled.** PostgreSQL (`postgres.rs`): the bucket row, the frame log behind the
//! fenced INSERT (a flush is one instant; the claim's wait for flushes holding `FOR SHARE` is
//! the order of two instants), the ownership lock with its FIFO queue, lock sessions ended by
//! `idle_session_timeout` (measured on PostgreSQL's clock from the end of their last statement)
//! or by the node's socket closing, restarts that end every session and fail every statement
//! in flight. Nodes (`node.rs`, `owner.rs`, `standby.rs`) with clocks of their own (up to 2 s
//! off, drifting within a bound) that crash (losing everything, starting again later), pause
//! (every input waits, then runs in any order) for up to four node timeouts, also between two
//! steps of a request, and lose their link to PostgreSQL for as long (what they send and are
//! sent waits, as TCP retransmits) while clients still reach them; they follow the protocol:
//! heartbeats, the takeover (lock, clock reading, claim, recovery, serving mark), the
//! confirmation before a request starts and before its answer leaves (or a check on the spot,
//! or `ServiceUnavailable`), step-down (requests executing run on and fail their
//! confirmation), the hand-off on SIGTERM (`hand_off.rs`: stop taking requests, drain,
//! checkpoint, retire the confirmations, write the release on the lock session, close it, exit
//! and start again later; a request that read the role just before the hand-off changed it
//! enters after the drain looked; pauses at each step, with PostgreSQL restarting in them), the
//! same hand-off when placement prefers another node (a rebalance: the node stands by and takes
//! the bucket again later, while a request of its first ownership may still be held up, at a
//! bucket call to a slow node, say, for longer than the drain waits), a
//! claim that finds the epoch it replaces released serving without `serving_delay`, the flusher (one flush in flight; a fenced-out one poisons, one of unknown
//! outcome is written again), and the standby's forwarding to the serving owner. The control
//! flow is `cluster`'s, rewritten step for step; its durations and decisions are the cluster
//! module's own functions (`confirm_window`, `heartbeat_interval`, `heartbeat_answer_max`,
//! `confirmed_within`, `step_down_reason`, `clock_offset_ms`, `refusal_holds`, `OWNER_POLL`,
//! `RETRY_MIN`, `NODE_TIMEOUT_MIN`, ...), so a change there is a change checked here (a
//! change of the order of steps in `cluster` is not). The engine is `leaseq_core::Engine`
//! itself: what the invariants are about is how it answers a receipt it does not know (a
//! stale engine answers a delete of a message sent through a newer owner `AlreadyGone`, with
//! no record: the very answer a confirmation must stop), and a copy of those rules would
//! drift.
//!
//! **What is checked.** As frames land: attempts go up by one, a lease is granted only once
//! the previous one ended on PostgreSQL's clock (no two holders), a delete or visibility
//! change acts only with the current attempt's receipt, nothing acts on a deleted message. As
//! an epoch starts serving: no node still holds a confirmation of an older epoch that counts
//! (open, and within the window on its own clock), the state a stale answer could come from.
//! As answers leave an owner: no newer epoch was serving when its engine decided the answer,
//! and the epoch was not released yet (the release's promise). At
//! the end: the log replays, the serving owner's engine agrees with the replay, and the
//! clients' history passes `leaseq_testkit::history::check` (no acknowledged send lost, no
//! acknowledged delete back, no two holders, no stale receipt acting, receive counts).
//!
//! **What is not.** Several flushes in flight, snapshots and checkpoints (a hand-off's is
//! time), long polls, FIFO queues and dead letters, PostgreSQL failovers (a restart keeps
//! every commit), statements that take time at PostgreSQL (each is one instant), the node
//! table, connections that need a round trip to open, and message loss other than by a crash
//! or a restart. PostgreSQL's clock is the global clock.
//!
//! `cargo test` runs 1000 seeds. `LEASEQ_OWNERSHIP_SEEDS=N` runs seeds `0..N`,
//! `LEASEQ_OWNERSHIP_SEED=S` replays one (a failure prints its seed, the violation and the
//! run's last 150 events; `LEASEQ_OWNERSHIP_TRACE=1` prints every event of the run),
//! `LEASEQ_OWNERSHIP_STEPS=N` sets the client operations per seed and
//! `LEASEQ_OWNERSHIP_STATS=1` prints what happened, counted. `LEASEQ_OWNERSHIP_NO_SERVING_DELAY=1`
//! leaves out a new owner's wait before it serves (`serving_delay`), which the default run's
//! PostgreSQL restarts under a paused owner then find (the stale read it closed; seed 22).
//! `LEASEQ_OWNERSHIP_MUTATION` puts a flaw into the protocol, which the default seeds find:
//! `release-first` (the release written as the hand-off begins, before the drain and the
//! retirement: seed 8, an answer after the release), `no-retire` (the confirmation forgotten
//! but not retired, so a check on its way confirms again: seed 501, an answer after the
//! release), `sticky-release` (a claim counts any earlier release: seed 147, an older epoch's
//! confirmation still counting as a newer one serves), `any-ownership` (a request leans on its
//! node's latest confirmation, whatever ownership it runs under, as `Confirmed` did before it
//! named its epoch: seed 825, a request held up past a rebalance answers from the old engine,
//! after the release, once the node took the bucket back). The other hole
//! the model found, leases short by a slow reading of PostgreSQL's clock, is found again when
//! `CLOCK_READING_ROUND_TRIP_MAX_MS` is raised (a slow reading is then not taken again).

#[path = "ownership_simulation/clients.rs"]
mod clients;
#[path = "ownership_simulation/hand_off.rs"]
mod hand_off;
#[path = "ownership_simulation/node.rs"]
mod node;
#[path = "ownership_simulation/owner.rs"]
mod owner;
#[path = "ownership_simulation/postgres.rs"]
mod postgres;
#[path = "ownership_simulation/standby.rs"]
mod standby;
#[path = "ownership_simulation/world.rs"]
mod world;

use std::collections::BTreeMap;
use std::time::Duration;

use leaseq_core::{Engine, EngineConfig, PayloadRef, QueueConfigPatch, ReceiptKey};
use leaseq_postgres::cluster::{NODE_TIMEOUT_DEFAULT, NODE_TIMEOUT_MIN};
use leaseq_testkit::history::{self, Config, Observation, Observed, Op, Outcome, QueueSpec};
use leaseq_testkit::sim::{Progress, Seeds};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use clients::{ClientInput, Clients};
use node::{QUEUE, RECEIPT_KEY};
use postgres::{Logged, Postgres};
use world::{us, Event, Mutation, Settings, World, EPOCH_US, MS};

/// Client operations per seed in `cargo test`.
const OPERATIONS_DEFAULT: usize = 150;
const SEEDS_DEFAULT: u64 = 1000;

#[test]
fn ownership_protocol_keeps_its_invariants() {
    let seeds = Seeds::from_env(
        "LEASEQ_OWNERSHIP",
        env!("CARGO_PKG_NAME"),
        env!("CARGO_CRATE_NAME"),
        SEEDS_DEFAULT,
        OPERATIONS_DEFAULT,
    );
    let started = std::time::Instant::now();
    seeds.tally(|seed| {
        let mut sim = None;
        seeds.check(
            "the ownership simulation",
            seed,
            &mut sim,
            |sim, operations| {
                let world = sim.insert(setup(seed, operations));
                run(world);
                if std::env::var_os("LEASEQ_OWNERSHIP_TRACE").is_some() {
                    println!("{}", trace(world));
                }
            },
            |sim| Progress {
                step: sim.as_ref().map_or(0, |world| world.clients.events.len()),
                last_operations: sim
                    .as_ref()
                    .map_or_else(Vec::new, |world| world.trace.iter().cloned().collect()),
            },
        );
        let world = sim.expect("ran");
        let mut counts = world.counts.clone();
        counts.insert("seeds".into(), 1);
        counts.insert("simulated ms".into(), world.now / MS);
        counts
    });
    if seeds.stats() {
        println!("{:?} for {} seeds", started.elapsed(), seeds.seeds().len());
    }
}

/// The knobs a seed draws, the queue created, the nodes started.
fn setup(seed: u64, operations: usize) -> World {
    let mut rng = StdRng::seed_from_u64(seed ^ 0x0b5e_55ed);
    let timeouts = [
        NODE_TIMEOUT_MIN,
        Duration::from_secs(1),
        Duration::from_secs(2),
        NODE_TIMEOUT_DEFAULT,
    ];
    let node_timeout = timeouts[rng.random_range(0..timeouts.len())];
    let settings = Settings {
        nodes: rng.random_range(2..=4),
        clients: rng.random_range(2..=4),
        node_timeout,
        drift_ppm_max: 100,
        operations,
        fault_every: us(node_timeout) * rng.random_range(1..4),
        serving_delay: std::env::var_os("LEASEQ_OWNERSHIP_NO_SERVING_DELAY").is_none(),
        mutation: Mutation::from_env(),
    };
    let mut engine = Engine::new(EngineConfig::default(), ReceiptKey::new(RECEIPT_KEY));
    let mut journal = Vec::new();
    engine
        .create_queue(
            EPOCH_US / MS,
            QUEUE,
            &QueueConfigPatch::default(),
            BTreeMap::new(),
            &mut journal,
        )
        .expect("the queue");
    let bootstrap = journal
        .into_iter()
        .map(|record| Logged {
            record,
            decided_at: 0,
            receipt_attempt: None,
        })
        .collect();
    let clients = Clients::new(settings.clients, settings.operations);
    let mut pg = Postgres::new(bootstrap);
    pg.sticky_release = settings.mutation == Some(Mutation::StickyRelease);
    let mut world = World::new(seed, settings, pg, clients);
    for node in 0..world.nodes.len() {
        world.start_node(node);
    }
    world.after(us(node_timeout), Event::Fault);
    for client in 0..world.clients.count() {
        // Clients start once a first owner has had time to take over.
        let start = world.rng.random_range(100 * MS..500 * MS);
        world.after(
            start,
            Event::AtClient {
                client,
                input: ClientInput::Next,
            },
        );
    }
    world
}

/// Runs the workload under faults, lets the cluster settle, and checks the end state.
fn run(world: &mut World) {
    let limit = 600_000 * MS;
    while !(world.clients.operations_left == 0 && world.clients.idle()) && world.now < limit {
        let next = world.now + 100 * MS;
        world.run_until(next);
        fail_on_violations(world);
    }
    world.faults_until = world.now;
    // Paused nodes resume and crashed ones start within four node timeouts; then a takeover.
    let settle = world.now + 4 * us(world.settings.node_timeout) + 10_000 * MS;
    world.run_until(settle);
    fail_on_violations(world);
    let replayed = replay(world);
    agree_with_owner(world, &replayed);
    check_history(world, &replayed);
}

fn fail_on_violations(world: &World) {
    if let Some(first) = world.violations.first() {
        panic!(
            "{} (at {:.3} ms; {} violations in all)",
            first.what,
            first.at as f64 / 1e3,
            world.violations.len()
        );
    }
}

/// The log replayed into a new engine, as the next owner would recover it: its messages as
/// (tag, receive count, when visible), in sequence order.
fn replay(world: &World) -> Vec<(String, u32, u64)> {
    let mut engine = Engine::new(EngineConfig::default(), ReceiptKey::new(RECEIPT_KEY));
    for record in world.pg.records() {
        engine.apply(&record);
    }
    engine.check_invariants();
    listing(&mut engine, EPOCH_US / MS + world.now / MS)
}

fn listing(engine: &mut Engine, now_ms: u64) -> Vec<(String, u32, u64)> {
    let peeked = engine
        .peek(now_ms, QUEUE, 0, usize::MAX)
        .expect("the queue exists");
    peeked
        .into_iter()
        .map(|peeked| {
            let tag = match &peeked.message.payload {
                PayloadRef::Inline(payload) => payload.body.clone(),
                PayloadRef::Stored(_) | PayloadRef::Cached(_) => unreachable!("nothing is spilled"),
            };
            let message = &peeked.message;
            (tag, message.receive_count, message.visible_at_ms)
        })
        .collect()
}

/// The serving owner's engine holds what the log holds (its writes all landed, nobody
/// else's did).
fn agree_with_owner(world: &mut World, replayed: &[(String, u32, u64)]) {
    let now_ms = EPOCH_US / MS + world.now / MS;
    let serving = world.pg.read_owner();
    let Some((owner, epoch)) = serving else {
        return;
    };
    let Some(owned) = world.nodes[owner]
        .owned
        .as_mut()
        .filter(|owned| owned.epoch == epoch && !owned.poisoned)
    else {
        return;
    };
    let live = listing(&mut owned.engine, now_ms);
    let strip = |listing: &[(String, u32, u64)]| -> Vec<(String, u32)> {
        listing
            .iter()
            .map(|(tag, count, _)| (tag.clone(), *count))
            .collect()
    };
    assert_eq!(
        strip(&live),
        strip(replayed),
        "the serving owner's engine (node {owner}, epoch {epoch}) differs from the log's replay"
    );
}

/// The clients' history, closed by the final listing, passes the history checker.
fn check_history(world: &World, replayed: &[(String, u32, u64)]) {
    let mut events = world.clients.events.clone();
    let end = world.now;
    let messages = replayed
        .iter()
        .map(|(tag, receive_count, _)| Observed {
            tag: tag.clone(),
            receive_count: *receive_count,
            group: None,
        })
        .collect();
    events.push(history::Event {
        id: events.len(),
        process: u32::MAX,
        invoke_us: end,
        complete_us: Some(end + 1),
        op: Op::Observe {
            queue: QUEUE.into(),
        },
        outcome: Outcome::Ok(history::Reply::Observed(Observation {
            messages,
            counts: None,
        })),
    });
    // The checker's clock slack covers an owner's clock behind PostgreSQL's by a round trip
    // (leases it grants end that much earlier than the client counts from its invocation).
    let config = Config::default().queue(QUEUE, QueueSpec::standard(30_000));
    if let Err(violations) = history::check_events(&events, &config) {
        let texts: Vec<String> = violations
            .iter()
            .take(5)
            .map(|violation| format!("{violation}"))
            .collect();
        panic!("the history checker: {}", texts.join("; "));
    }
}

fn trace(world: &World) -> String {
    world.trace.iter().cloned().collect::<Vec<_>>().join("\n")
}
