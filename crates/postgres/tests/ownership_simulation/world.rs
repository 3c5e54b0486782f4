//! The world of one seed: the global clock and its event queue, the network between nodes,
//! PostgreSQL and clients, the faults (crashes, pauses, PostgreSQL restarts), the trace, and
//! the checks that run as frames land and answers leave.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap, HashMap, VecDeque};
use std::time::Duration;

use leaseq_core::Record;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::clients::{ClientInput, Clients};
use super::node::{Node, NodeInput};
use super::postgres::{Changes, FlushResult, Frame, Postgres};

/// Microseconds of the global clock, which is PostgreSQL's.
pub type Us = u64;
pub const MS: Us = 1_000;
/// The global clock's zero, as microseconds since the Unix epoch (engines want real dates).
pub const EPOCH_US: Us = 1_700_000_000_000_000;

pub fn us(duration: Duration) -> Us {
    duration.as_micros() as Us
}

/// The knobs of one run, drawn from the seed.
#[derive(Clone, Debug)]
pub struct Settings {
    pub nodes: usize,
    pub clients: usize,
    pub node_timeout: Duration,
    /// Bound of the nodes' clock drift, parts per million.
    pub drift_ppm_max: i64,
    /// Client operations in the run.
    pub operations: usize,
    /// Mean time between faults.
    pub fault_every: Us,
    /// Whether a new owner waits `serving_delay` after the lock's grant before it marks itself
    /// serving, as `cluster` does (always, but for a check that the faults still find the stale
    /// read this wait closed: `LEASEQ_OWNERSHIP_NO_SERVING_DELAY=1`).
    pub serving_delay: bool,
    /// A deliberate flaw in the hand-off, for a check that the faults find it
    /// (`LEASEQ_OWNERSHIP_MUTATION`); `None` runs the protocol as `cluster` does.
    pub mutation: Option<Mutation>,
}

/// Flaws the hand-off's release must not have, which the default seeds find.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mutation {
    /// `release-first`: the release is written as the hand-off begins, before the old owner
    /// drained and retired its confirmations.
    ReleaseFirst,
    /// `no-retire`: the hand-off forgets its confirmation but does not retire confirmations (a
    /// check of the epoch still on its way confirms again), as the hand-off did before the
    /// release existed, and then writes the release.
    NoRetire,
    /// `sticky-release`: a claim counts any earlier release, not only the release of the epoch
    /// it replaces.
    StickyRelease,
    /// `any-ownership`: a request leans on the node's latest confirmation, whatever ownership
    /// it is of (a later one of the same node, after a rebalance and a takeover).
    AnyOwnership,
}

impl Mutation {
    /// `LEASEQ_OWNERSHIP_MUTATION`'s value, if it is set.
    pub fn from_env() -> Option<Mutation> {
        let value = std::env::var("LEASEQ_OWNERSHIP_MUTATION").ok()?;
        Some(match value.as_str() {
            "release-first" => Mutation::ReleaseFirst,
            "no-retire" => Mutation::NoRetire,
            "sticky-release" => Mutation::StickyRelease,
            "any-ownership" => Mutation::AnyOwnership,
            other => panic!(
                "LEASEQ_OWNERSHIP_MUTATION={other}: release-first, no-retire, sticky-release or \
                 any-ownership"
            ),
        })
    }
}

/// Something that happens at an instant.
pub enum Event {
    /// A statement arrives at PostgreSQL.
    AtPostgres(super::postgres::Statement),
    /// PostgreSQL's idle timeout looks at a session.
    IdleCheck {
        session: u64,
        since: Us,
    },
    /// PostgreSQL accepts connections again after a restart.
    PostgresBack,
    /// PostgreSQL restarts (a fault planned earlier), down for up to `down_max`.
    PostgresRestart {
        down_max: Us,
    },
    /// Something reaches a node (or one of its timers fires).
    AtNode {
        node: usize,
        incarnation: u32,
        input: NodeInput,
    },
    AtClient {
        client: usize,
        input: ClientInput,
    },
    Fault,
    /// A paused node runs again.
    Resume {
        node: usize,
        incarnation: u32,
    },
    /// A crashed node starts again.
    Restart {
        node: usize,
    },
    /// A node crashes (a fault planned earlier).
    Crash {
        node: usize,
    },
    /// A node's process exits after its hand-off (and the HTTP layer's drain).
    Exit {
        node: usize,
        incarnation: u32,
    },
}

/// A violation of an invariant, with the global instant it was seen.
#[derive(Debug)]
pub struct Violation {
    pub at: Us,
    pub what: String,
}

/// What the log says of one message so far (checked as frames land).
#[derive(Clone, Debug, Default)]
pub struct Truth {
    pub attempt: u32,
    /// When the current attempt's lease ends, PostgreSQL's ms.
    pub lease_end_ms: u64,
    pub deleted: bool,
}

pub struct World {
    pub now: Us,
    pub queue: BinaryHeap<Reverse<(Us, u64)>>,
    pub events: HashMap<u64, Event>,
    pub next_event: u64,
    pub rng: StdRng,
    pub settings: Settings,
    pub pg: Postgres,
    pub nodes: Vec<Node>,
    pub clients: Clients,
    /// Per directed connection, when its last message arrives (TCP keeps order).
    pub channels: HashMap<(u64, u64), Us>,
    pub trace: VecDeque<String>,
    pub violations: Vec<Violation>,
    pub truth: BTreeMap<(u64, u64), Truth>,
    /// How far ahead of PostgreSQL's clock a correct owner's engine may run, µs: the rounding
    /// of the host's time to whole milliseconds in the offset, and drift until the next
    /// measurement.
    pub clock_slack_us: u64,
    /// Faults stop after this instant (the run then settles).
    pub faults_until: Us,
    pub counts: BTreeMap<String, u64>,
    /// Until when each node's link with PostgreSQL is cut.
    pub link_cut_until: Vec<Us>,
    /// Trace lines kept: the last few for a failure's report, all when
    /// `LEASEQ_OWNERSHIP_TRACE` asks for the run's trace.
    trace_kept: usize,
}

/// Trace lines kept for a failure's report.
const TRACE_KEPT: usize = 150;

impl World {
    pub fn new(seed: u64, settings: Settings, pg: Postgres, clients: Clients) -> World {
        let mut rng = StdRng::seed_from_u64(seed);
        let settings_nodes = settings.nodes;
        let nodes = (0..settings.nodes)
            .map(|id| Node::new(id, &mut rng, settings.drift_ppm_max))
            .collect();
        // Drift accumulates from one measurement of the offset to the next (ANNOUNCE_EVERY),
        // longer by a pause (an owner paused past four node timeouts steps down before it
        // answers anything).
        let unmeasured = us(leaseq_postgres::cluster::ANNOUNCE_EVERY)
            + 4 * us(settings.node_timeout)
            + 1_000 * MS;
        let clock_slack_us = MS + (settings.drift_ppm_max as u64 * unmeasured).div_ceil(1_000_000);
        World {
            now: 0,
            queue: BinaryHeap::new(),
            events: HashMap::new(),
            next_event: 0,
            rng,
            settings,
            pg,
            nodes,
            clients,
            channels: HashMap::new(),
            trace: VecDeque::new(),
            violations: Vec::new(),
            truth: BTreeMap::new(),
            clock_slack_us,
            faults_until: Us::MAX,
            counts: BTreeMap::new(),
            link_cut_until: vec![0; settings_nodes],
            trace_kept: if std::env::var_os("LEASEQ_OWNERSHIP_TRACE").is_some() {
                usize::MAX
            } else {
                TRACE_KEPT
            },
        }
    }

    pub fn count(&mut self, what: &str) {
        *self.counts.entry(what.to_string()).or_insert(0) += 1;
    }

    pub fn note(&mut self, line: impl FnOnce() -> String) {
        if self.trace.len() == self.trace_kept {
            self.trace.pop_front();
        }
        let line = format!("{:>10.3} ms  {}", self.now as f64 / 1e3, line());
        self.trace.push_back(line);
    }

    pub fn violation(&mut self, what: String) {
        self.note(|| format!("VIOLATION: {what}"));
        self.violations.push(Violation { at: self.now, what });
    }

    pub fn at(&mut self, when: Us, event: Event) {
        let id = self.next_event;
        self.next_event += 1;
        self.events.insert(id, event);
        self.queue.push(Reverse((when.max(self.now), id)));
    }

    pub fn after(&mut self, delay: Us, event: Event) {
        self.at(self.now + delay, event);
    }

    /// One network hop's delay: mostly a fraction of a millisecond to a few, sometimes a
    /// congested tens of milliseconds.
    pub fn hop(&mut self) -> Us {
        if self.rng.random_bool(0.05) {
            self.rng.random_range(3 * MS..20 * MS)
        } else {
            self.rng.random_range(100..3 * MS)
        }
    }

    /// Sends `event` over the directed connection `channel`: it arrives after a hop, never
    /// before what was sent on that connection earlier.
    pub fn send(&mut self, channel: (u64, u64), event: Event) {
        self.send_after(channel, 0, event);
    }

    /// Sends `event` between node `node` and PostgreSQL: held while their link is cut (TCP
    /// retransmits), then delivered in order.
    pub fn send_link(&mut self, node: usize, channel: (u64, u64), event: Event) {
        let held = self.link_cut_until[node].saturating_sub(self.now);
        self.send_after(channel, held, event);
    }

    pub fn send_after(&mut self, channel: (u64, u64), held: Us, event: Event) {
        let hop = self.hop();
        let last = self.channels.get(&channel).copied().unwrap_or(0);
        let arrival = (self.now + held + hop).max(last);
        self.channels.insert(channel, arrival);
        self.at(arrival, event);
    }

    /// The next event, if any is due before `until`.
    pub fn next(&mut self, until: Us) -> Option<Event> {
        let Reverse((when, id)) = *self.queue.peek()?;
        if when > until {
            return None;
        }
        self.queue.pop();
        self.now = when;
        Some(self.events.remove(&id).expect("scheduled event"))
    }

    /// Runs events until `until` (or until none is left).
    pub fn run_until(&mut self, until: Us) {
        while let Some(event) = self.next(until) {
            self.dispatch(event);
        }
        self.now = self.now.max(until);
    }

    pub fn dispatch(&mut self, event: Event) {
        match event {
            Event::AtPostgres(statement) => self.at_postgres(statement),
            Event::IdleCheck { session, since } => {
                let mut changes = Changes::default();
                self.pg.idle_check(session, since, self.now, &mut changes);
                if !changes.ended.is_empty() {
                    self.count("lock session ended by the idle timeout");
                }
                self.tell_sessions(changes);
            }
            Event::PostgresBack => {
                self.pg.back();
                self.note(|| "PostgreSQL is back".into());
            }
            Event::AtNode {
                node,
                incarnation,
                input,
            } => self.at_node(node, incarnation, input),
            Event::AtClient { client, input } => self.at_client(client, input),
            Event::Fault => self.fault(),
            Event::PostgresRestart { down_max } => self.restart_postgres(down_max),
            Event::Resume { node, incarnation } => self.resume(node, incarnation),
            Event::Restart { node } => self.restart_node(node),
            Event::Crash { node } => {
                if self.now < self.faults_until {
                    self.crash(node);
                }
            }
            Event::Exit { node, incarnation } => {
                if self.nodes[node].incarnation == incarnation && self.nodes[node].up {
                    self.count("exit after SIGTERM");
                    self.note(|| format!("node {node} exits"));
                    self.stop(node);
                }
            }
        }
    }

    /// Tells nodes about sessions granted or ended, and arms the idle timeout of the granted.
    pub fn tell_sessions(&mut self, changes: Changes) {
        let timeout = us(self.settings.node_timeout);
        for session in changes.granted {
            self.at(
                self.now + timeout,
                Event::IdleCheck {
                    session,
                    since: self.now,
                },
            );
            let state = &self.pg.sessions[&session];
            let (node, incarnation) = (state.node, state.incarnation);
            self.send_link(
                node,
                session_channel(session, false),
                Event::AtNode {
                    node,
                    incarnation,
                    input: NodeInput::LockGranted { session },
                },
            );
        }
        for session in changes.ended {
            let state = &self.pg.sessions[&session];
            let (node, incarnation) = (state.node, state.incarnation);
            self.send_link(
                node,
                session_channel(session, false),
                Event::AtNode {
                    node,
                    incarnation,
                    input: NodeInput::SessionClosed { session },
                },
            );
        }
    }

    /// Arms the idle timeout after a statement on a lock session at `now`.
    pub fn idle_from_now(&mut self, session: u64) {
        let timeout = us(self.settings.node_timeout);
        self.at(
            self.now + timeout,
            Event::IdleCheck {
                session,
                since: self.now,
            },
        );
    }

    // --- Faults -----------------------------------------------------------------------------

    pub fn fault(&mut self) {
        if self.now >= self.faults_until {
            return;
        }
        let mean = self.settings.fault_every;
        let next = self.rng.random_range(mean / 4..mean * 7 / 4);
        self.after(next, Event::Fault);
        let owner = self
            .nodes
            .iter()
            .position(|node| node.is_owner() && node.running())
            .unwrap_or_else(|| self.rng.random_range(0..self.nodes.len()));
        let any = self.rng.random_range(0..self.nodes.len());
        let timeout = us(self.settings.node_timeout);
        match self.rng.random_range(0..136) {
            // Pauses of the owner, around the node timeout: the interesting ones.
            0..=29 => {
                let pause = self.pause_length(timeout);
                self.pause(owner, pause);
            }
            // The owner pauses at the next point its request path yields.
            30..=49 => {
                let pause = self.pause_length(timeout);
                let step = self.rng.random_range(0..4);
                self.nodes[owner].pause_at_step = Some((pause, step));
            }
            50..=59 => self.crash(owner),
            60..=66 => self.crash(any),
            67..=76 => {
                // The owner's link with PostgreSQL is cut; clients and peers still reach it.
                let cut = self.pause_length(timeout);
                self.note(|| {
                    format!(
                        "node {owner}'s link with PostgreSQL is cut for {} ms",
                        cut / MS
                    )
                });
                self.count("fault: link with PostgreSQL cut");
                self.link_cut_until[owner] = self.link_cut_until[owner].max(self.now + cut);
            }
            77..=80 => {
                let pause = self.pause_length(timeout);
                self.pause(any, pause);
            }
            81..=87 => {
                // The owner crashes, and the next one's reading of PostgreSQL's clock is
                // answered while it is paused.
                let pause = self.rng.random_range(20 * MS..500 * MS);
                for node in 0..self.nodes.len() {
                    self.nodes[node].pause_at_clock_reading = Some(pause);
                }
                self.crash(owner);
            }
            // SIGTERM of the owner: a graceful hand-off, then the process exits and starts
            // again (a rolling restart).
            100..=111 => self.terminate_at(owner),
            // A hand-off during which the old owner pauses.
            112..=119 => {
                self.plan_pause_in_hand_off(owner);
                self.terminate_at(owner);
            }
            88..=97 => {
                // The owner is paused when PostgreSQL restarts: it finds its session ended
                // only once it runs again, maybe after another node took over. Paused for
                // less than a confirmation window (so it resumes with a confirmation it may still
                // lean on, and answers what waited), PostgreSQL down briefly early in it.
                let window = us(leaseq_postgres::cluster::confirm_window(
                    self.settings.node_timeout,
                ));
                let pause = self.rng.random_range(window / 4..window);
                self.pause(owner, pause);
                let restart_in = self.rng.random_range(0..pause / 3);
                self.after(restart_in, Event::PostgresRestart { down_max: 100 * MS });
            }
            98..=99 => self.restart_postgres(400 * MS),
            // Placement prefers another node: the owner hands the bucket off and stands by,
            // to take it again later; sometimes pausing inside the hand-off as above.
            120..=127 => self.rebalance_at(owner, 0),
            128..=131 => {
                self.plan_pause_in_hand_off(owner);
                self.rebalance_at(owner, 0);
            }
            // A request of the owner is held up (at a bucket call to a slow node, say) for
            // longer than a hand-off's drain waits, and the owner rebalances meanwhile: the
            // request's answer must not lean on a later ownership of the same node.
            132..=135 => {
                let stall = self.rng.random_range(
                    us(leaseq_postgres::cluster::HAND_OFF_DRAIN_MAX)
                        ..us(leaseq_postgres::cluster::HAND_OFF_DRAIN_MAX) + 4 * timeout,
                );
                let step = self.rng.random_range(0..4);
                self.nodes[owner].stall_at_step = Some((stall, step));
                let soon = self.rng.random_range(MS..200 * MS);
                self.rebalance_at(owner, soon);
            }
            _ => unreachable!("the range drawn"),
        }
    }

    /// A pause inside `owner`'s next hand-off (before the drain, before its confirmations
    /// retire, or between that and the release), often with PostgreSQL restarting early in it
    /// (its lock session ends at once): shorter than a confirmation window, so it resumes with
    /// a confirmation it may still lean on.
    fn plan_pause_in_hand_off(&mut self, owner: usize) {
        let window = us(leaseq_postgres::cluster::confirm_window(
            self.settings.node_timeout,
        ));
        let pause = self.rng.random_range(window / 4..window);
        let step = self.rng.random_range(0..3);
        let restart = self.rng.random_bool(0.7);
        self.nodes[owner].pause_in_hand_off = Some((pause, step, restart));
    }

    /// Placement tells `node`, `after` from now, to hand its bucket to another (it waits while
    /// paused).
    pub fn rebalance_at(&mut self, node: usize, after: Us) {
        self.signal(node, after, "fault: rebalance", NodeInput::Rebalance);
    }

    /// SIGTERM reaches `node` (it waits while the process is paused).
    pub fn terminate_at(&mut self, node: usize) {
        self.signal(node, 0, "fault: SIGTERM", NodeInput::Terminate);
    }

    /// `input` reaches a running node that is not terminating, `after` from now.
    fn signal(&mut self, node: usize, after: Us, fault: &str, input: NodeInput) {
        if !self.nodes[node].up || self.nodes[node].terminating {
            return;
        }
        self.count(fault);
        let incarnation = self.nodes[node].incarnation;
        self.after(
            after,
            Event::AtNode {
                node,
                incarnation,
                input,
            },
        );
    }

    pub fn restart_postgres(&mut self, down_max: Us) {
        if !self.pg.up {
            return;
        }
        let down = self.rng.random_range(20 * MS..down_max);
        self.note(|| format!("PostgreSQL restarts ({} ms down)", down / MS));
        self.count("fault: PostgreSQL restart");
        let mut changes = Changes::default();
        self.pg.restart(self.now, &mut changes);
        self.tell_sessions(changes);
        self.after(down, Event::PostgresBack);
    }

    pub fn pause_length(&mut self, timeout: Us) -> Us {
        match self.rng.random_range(0..10) {
            0..=1 => self.rng.random_range(5 * MS..timeout / 2),
            2..=6 => self.rng.random_range(timeout / 2..timeout * 3 / 2),
            _ => self.rng.random_range(timeout * 3 / 2..timeout * 4),
        }
    }

    pub fn pause(&mut self, node: usize, length: Us) {
        let state = &mut self.nodes[node];
        if !state.running() {
            return;
        }
        state.paused = true;
        let incarnation = state.incarnation;
        self.count("fault: pause");
        self.note(|| format!("node {node} pauses for {} ms", length / MS));
        self.after(length, Event::Resume { node, incarnation });
    }

    pub fn resume(&mut self, node: usize, incarnation: u32) {
        let state = &mut self.nodes[node];
        if state.incarnation != incarnation || !state.paused {
            return;
        }
        state.paused = false;
        let mut deferred = std::mem::take(&mut state.deferred);
        // What waited while the process was stopped is handled in any order once it runs.
        for i in (1..deferred.len()).rev() {
            let j = self.rng.random_range(0..=i);
            deferred.swap(i, j);
        }
        self.note(|| format!("node {node} resumes ({} inputs waiting)", deferred.len()));
        for input in deferred {
            let ready = self.now + self.rng.random_range(0..1_000);
            self.at(
                ready,
                Event::AtNode {
                    node,
                    incarnation,
                    input,
                },
            );
        }
    }

    pub fn crash(&mut self, node: usize) {
        if !self.nodes[node].up {
            return;
        }
        self.count("fault: crash");
        self.note(|| format!("node {node} crashes"));
        self.stop(node);
    }

    /// The node's process ends (a crash, or an exit after SIGTERM), and starts again later.
    pub fn stop(&mut self, node: usize) {
        let lost = self.nodes[node].crash();
        // Its sockets close: PostgreSQL ends its sessions, its peers' connections break.
        let mut changes = Changes::default();
        let sessions: Vec<u64> = self
            .pg
            .sessions
            .iter()
            .filter(|(_, state)| state.node == node && state.alive)
            .map(|(&id, _)| id)
            .collect();
        for session in sessions {
            self.pg.end(session, self.now, &mut changes);
        }
        self.tell_sessions(changes);
        for origin in lost {
            self.broken(origin);
        }
        let down = self.rng.random_range(50 * MS..2_000 * MS);
        self.after(down, Event::Restart { node });
    }

    pub fn restart_node(&mut self, node: usize) {
        self.note(|| format!("node {node} starts"));
        self.nodes[node].up = true;
        self.nodes[node].paused = false;
        self.start_node(node);
    }

    // --- Checks as frames land --------------------------------------------------------------

    /// A flush arrives at PostgreSQL: the fence decides, and a frame that lands is checked
    /// against what the log already says of each message it touches.
    pub fn land(&mut self, frame: Frame) -> FlushResult {
        let records = frame.records.clone();
        let result = self.pg.flush(frame);
        if let FlushResult::Landed = result {
            for logged in &records {
                self.check_landing(logged);
            }
        }
        result
    }

    pub fn check_landing(&mut self, logged: &super::postgres::Logged) {
        let decided_us = EPOCH_US + logged.decided_at;
        match &logged.record {
            Record::Send { queue_id, seq, .. } => {
                let earlier = self.truth.insert((*queue_id, *seq), Truth::default());
                if earlier.is_some() {
                    self.violation(format!("two sends landed with sequence number {seq}"));
                }
            }
            Record::Lease {
                queue_id,
                seq,
                attempt,
                visible_at_ms,
                ..
            } => {
                let slack_us = self.clock_slack_us;
                let truth = self.truth.entry((*queue_id, *seq)).or_default().clone();
                if truth.deleted {
                    self.violation(format!("message {seq} leased after its delete landed"));
                } else if *attempt != truth.attempt + 1 {
                    self.violation(format!(
                        "message {seq}: attempt {attempt} landed after attempt {}",
                        truth.attempt
                    ));
                } else if truth.attempt > 0 && truth.lease_end_ms * MS > decided_us + slack_us {
                    self.violation(format!(
                        "two holders: message {seq} attempt {attempt} granted {:.3} ms before \
                         attempt {}'s lease ended (PostgreSQL's clock)",
                        (truth.lease_end_ms * MS - decided_us) as f64 / 1e3,
                        truth.attempt
                    ));
                }
                let entry = self.truth.entry((*queue_id, *seq)).or_default();
                entry.attempt = *attempt;
                entry.lease_end_ms = *visible_at_ms;
            }
            Record::Delete { queue_id, seq, .. }
            | Record::ChangeVisibility { queue_id, seq, .. } => {
                let truth = self.truth.entry((*queue_id, *seq)).or_default().clone();
                let acted = logged.receipt_attempt.unwrap_or(0);
                if truth.deleted {
                    self.violation(format!("message {seq} changed after its delete landed"));
                } else if acted != truth.attempt {
                    self.violation(format!(
                        "a stale receipt acted: attempt {acted}'s receipt changed message {seq} \
                         at attempt {}",
                        truth.attempt
                    ));
                }
                let entry = self.truth.entry((*queue_id, *seq)).or_default();
                match &logged.record {
                    Record::Delete { .. } => entry.deleted = true,
                    Record::ChangeVisibility { visible_at_ms, .. } => {
                        entry.lease_end_ms = *visible_at_ms
                    }
                    _ => unreachable!(),
                }
            }
            _ => {}
        }
    }

    /// `epoch` starts serving now: no node may still be able to answer for an older epoch, i.e.
    /// hold a confirmation that counts (its ownership's confirmations not retired) and is
    /// within the confirmation window on its own clock. Sharper than [`World::check_answer`],
    /// which needs a request to reach the old owner at that moment: this is the state from
    /// which such an answer could come.
    pub fn check_no_older_confirmation(&mut self, epoch: i64) {
        let window = us(leaseq_postgres::cluster::confirm_window(
            self.settings.node_timeout,
        ));
        for id in 0..self.nodes.len() {
            let node = &self.nodes[id];
            let older = node
                .owned
                .as_ref()
                .map(|owned| owned.epoch)
                .or(node.hand_off.as_ref().map(|hand_off| hand_off.epoch))
                .filter(|&older| older < epoch);
            let (Some(older), Some(confirmed), true, true) = (
                older,
                node.confirmed_local,
                node.confirmations_of != 0,
                node.up,
            ) else {
                continue;
            };
            let window_ends = node.global(confirmed + window);
            if window_ends > self.now {
                self.violation(format!(
                    "epoch {epoch} serves while node {id} can still answer for epoch {older} on a \
                     confirmation that counts for {:.3} ms more",
                    (window_ends - self.now) as f64 / 1e3
                ));
            }
        }
    }

    /// An answer leaves a node from `epoch`'s engine now: that epoch was not released yet (the
    /// release promises that no answer leaves the old owner after it).
    pub fn check_not_released(&mut self, node: usize, epoch: i64, what: &str) {
        if let Some(&at) = self.pg.released_at.get(&epoch) {
            self.violation(format!(
                "node {node} acknowledged {what} from epoch {epoch}'s engine after it released \
                 the bucket at {:.3} ms",
                at as f64 / 1e3
            ));
        }
    }

    /// An answer leaves an owner whose engine decided it at `decided_at`: no later epoch may
    /// have been serving by then (an owner answers only from the log as it is, or with an
    /// error).
    pub fn check_answer(&mut self, node: usize, epoch: i64, decided_at: Us, what: &str) {
        let newer = self
            .pg
            .served_at
            .range(epoch + 1..)
            .find(|(_, &at)| at <= decided_at)
            .map(|(&newer, &at)| (newer, at));
        if let Some((newer, at)) = newer {
            self.violation(format!(
                "node {node} acknowledged {what} from epoch {epoch}'s engine, decided at \
                 {:.3} ms, while epoch {newer} served since {:.3} ms",
                decided_at as f64 / 1e3,
                at as f64 / 1e3
            ));
        }
    }
}

/// The directed connection of a lock session (to PostgreSQL, or back).
pub fn session_channel(session: u64, to_postgres: bool) -> (u64, u64) {
    (1 << 40 | session, u64::from(to_postgres))
}
