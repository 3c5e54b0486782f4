//! The model of a cluster node, step for step as `leaseq_postgres::cluster` runs: the lock
//! session and its heartbeat, the takeover (lock granted, clock measured, claim, recovery,
//! serving mark), the owner's request path bracketed by confirmations, the flusher's fenced
//! flushes, step-down, the hand-off on shutdown (`hand_off.rs`), and the standby's watch of the
//! owner and forwarding. Every duration and decision comes from the cluster module's public
//! functions and constants.
//!
//! A node's clock is its own: an offset from PostgreSQL's and a drift within the run's bound.
//! Its timers and its confirmation window run on it; its engine runs on it plus the offset it
//! measured against PostgreSQL, as `clock::OffsetClock` does.

use std::collections::BTreeMap;
use std::time::Duration;

use leaseq_core::{Engine, EngineConfig, ReceiptKey, Record};
use leaseq_postgres::cluster as protocol;
use rand::rngs::StdRng;
use rand::Rng;

use super::clients::{Action, Reply};
use super::owner::{Owned, Request, Stage};
use super::postgres::{node_channel, Answer, Purpose, Statement, StatementKind};
use super::world::{session_channel, us, Event, World, EPOCH_US, MS};

pub const QUEUE: &str = "q";
/// The incarnation of a request's destination: whichever process listens at its address when
/// it arrives.
pub const ANY: u32 = u32::MAX;
pub const RECEIPT_KEY: [u8; 16] = [7; 16];

/// Where a request came from, and where its answer goes.
#[derive(Clone, Copy, Debug)]
pub enum Origin {
    Client {
        client: usize,
        op: usize,
    },
    Forward {
        node: usize,
        incarnation: u32,
        forward: u64,
    },
}

pub enum NodeInput {
    LockGranted {
        session: u64,
    },
    SessionClosed {
        session: u64,
    },
    Answer {
        generation: u32,
        answer: Answer,
    },
    Timer(Timer),
    Request {
        origin: Origin,
        action: Action,
    },
    /// The answer to a request this node forwarded (`None`: the peer refused it unacted).
    Forwarded {
        forward: u64,
        reply: Option<Reply>,
    },
    /// A forward's connection broke after the request went out.
    ForwardBroken {
        forward: u64,
    },
    Step {
        request: u64,
    },
    /// SIGTERM: an owner hands the log off, then the process exits.
    Terminate,
    /// Placement prefers another node: an owner hands the bucket off and stands by.
    Rebalance,
}

#[derive(Clone, Copy, Debug)]
pub enum Timer {
    Heartbeat { session: u64 },
    HeartbeatAnswer { session: u64, beat: u64 },
    ServeCheck { epoch: i64 },
    Remeasure { epoch: i64 },
    Poll,
    Retry,
    CheckTimeout { request: u64 },
    Route { forward: u64 },
    FlushRetry { epoch: i64 },
    MarkServing { epoch: i64 },
    HandOff { epoch: i64 },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lock {
    None,
    /// Connected (once PostgreSQL answered with the session) and waiting for the lock.
    Waiting(Option<u64>),
    Held {
        session: u64,
        alive: bool,
    },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Takeover {
    Idle,
    Clock,
    Claim,
    /// The claim raised the epoch to `epoch`; `released`: the epoch it replaced was released.
    Recover {
        epoch: i64,
        released: bool,
    },
    Serving {
        epoch: i64,
    },
}

pub struct Forward {
    pub origin: Origin,
    pub action: Action,
    pub since_local: u64,
    pub attempts: usize,
    /// The peer it went to, while it is there.
    pub at: Option<(usize, i64)>,
}

pub struct Node {
    pub id: usize,
    pub up: bool,
    pub paused: bool,
    pub incarnation: u32,
    pub deferred: Vec<NodeInput>,
    /// A pause (its length) to begin before the next request step of one kind (0: the first
    /// confirmation, 1: the engine, 2: the wait for the flush, 3: the second confirmation).
    /// The next request to reach this step (as in `pause_at_step`) is held up this long,
    /// while the node runs on (a request waiting on a bucket call to a slow node).
    pub stall_at_step: Option<(u64, u8)>,
    pub pause_at_step: Option<(u64, u8)>,
    /// A pause (its length) to begin as the node next reads PostgreSQL's clock.
    pub pause_at_clock_reading: Option<u64>,
    /// A pause (its length) to begin at a step of the next hand-off (0: the drain's start, 1:
    /// before the confirmations retire, 2: between that and the release), and whether
    /// PostgreSQL restarts early in it.
    pub pause_in_hand_off: Option<(u64, u8, bool)>,
    pub clock_base_us: i64,
    pub drift_ppm: i64,
    pub lock: Lock,
    /// A reading of PostgreSQL's clock is on its way (a pause now makes it late, and it is read
    /// again: `protocol::choose_clock_reading`).
    pub reading_clock: bool,
    /// When the lock was granted, on this node's clock.
    pub granted_local: u64,
    /// The measurement of PostgreSQL's clock under way: readings taken, the best so far
    /// (`protocol::choose_clock_reading`).
    pub clock_taken: usize,
    pub clock_best: Option<protocol::ClockReading>,
    pub beat: u64,
    /// Whether the last heartbeat was answered, and when it was sent (global).
    pub beat_answered: bool,
    pub beat_sent: u64,
    pub confirmed_local: Option<u64>,
    /// The epoch whose confirmations count, 0 for none (`Confirmed`'s `epoch`: from a
    /// takeover's serving mark until a step-down or a hand-off retires them).
    pub confirmations_of: i64,
    pub epoch_watch: i64,
    pub takeover: Takeover,
    pub offset_ms: i64,
    pub recovered: Option<Engine>,
    pub owned: Option<Owned>,
    /// Engines of earlier ownerships that requests still executing hold (as the real
    /// requests hold their `Arc<Owned>` past a step-down).
    pub retired: Vec<Owned>,
    pub known_owner: Option<(usize, i64)>,
    pub refused: Option<(usize, i64, u64)>,
    pub retry: u64,
    pub requests: BTreeMap<u64, Request>,
    pub forwards: BTreeMap<u64, Forward>,
    pub next_forward: u64,
    /// The hand-off under way (SIGTERM of an owner).
    pub hand_off: Option<super::hand_off::HandOff>,
    /// SIGTERM arrived: the node takes no lock any more, and exits after its hand-off.
    pub terminating: bool,
}

impl Node {
    /// A node whose host clock is up to 2 s off PostgreSQL's and drifts within the bound.
    pub fn new(id: usize, rng: &mut StdRng, drift_ppm_max: i64) -> Node {
        let clock_base_us = rng.random_range(-2_000_000..2_000_000);
        let drift_ppm = rng.random_range(-drift_ppm_max..=drift_ppm_max);
        Node::fresh(id, clock_base_us, drift_ppm)
    }

    pub fn fresh(id: usize, clock_base_us: i64, drift_ppm: i64) -> Node {
        Node {
            id,
            up: true,
            paused: false,
            incarnation: 0,
            deferred: Vec::new(),
            pause_at_step: None,
            stall_at_step: None,
            pause_at_clock_reading: None,
            pause_in_hand_off: None,
            clock_base_us,
            drift_ppm,
            lock: Lock::None,
            reading_clock: false,
            granted_local: 0,
            clock_taken: 0,
            clock_best: None,
            beat: 0,
            beat_answered: false,
            beat_sent: 0,
            confirmed_local: None,
            confirmations_of: 0,
            epoch_watch: 0,
            takeover: Takeover::Idle,
            offset_ms: 0,
            recovered: None,
            owned: None,
            retired: Vec::new(),
            known_owner: None,
            refused: None,
            retry: us(protocol::RETRY_MIN),
            requests: BTreeMap::new(),
            forwards: BTreeMap::new(),
            next_forward: 0,
            hand_off: None,
            terminating: false,
        }
    }

    pub fn running(&self) -> bool {
        self.up && !self.paused
    }

    pub fn is_owner(&self) -> bool {
        self.owned.is_some()
    }

    /// This node's monotonic clock at global instant `now`, µs.
    pub fn local(&self, now: u64) -> u64 {
        (now as i64 + now as i64 * self.drift_ppm / 1_000_000) as u64
    }

    /// This host's wall clock, ms since the Unix epoch.
    pub fn wall_ms(&self, now: u64) -> i64 {
        (EPOCH_US as i64 + self.clock_base_us + self.local(now) as i64).div_euclid(1_000)
    }

    /// The global delay of `local` µs on this node's clock.
    pub fn global(&self, local: u64) -> u64 {
        (local as i128 * 1_000_000 / (1_000_000 + self.drift_ppm as i128)) as u64
    }

    /// Drops everything (a crash): the origins of the requests it held, whose connections
    /// break.
    pub fn crash(&mut self) -> Vec<Origin> {
        let lost = self
            .requests
            .values()
            .map(|request| request.origin)
            .chain(self.forwards.values().map(|forward| forward.origin))
            .collect();
        *self = Node {
            up: false,
            incarnation: self.incarnation + 1,
            ..Node::fresh(self.id, self.clock_base_us, self.drift_ppm)
        };
        lost
    }

    pub fn confirmed_since(&self, local_now: u64) -> Option<Duration> {
        self.confirmed_local
            .map(|at| Duration::from_micros(local_now.saturating_sub(at)))
    }

    /// `Confirmed::within`: how long ago `epoch` was last confirmed, if its ownership takes
    /// confirmations.
    pub fn confirmed_since_for(&self, epoch: i64, local_now: u64) -> Option<Duration> {
        if self.confirmations_of != epoch {
            return None;
        }
        self.confirmed_since(local_now)
    }

    /// `Confirmed::mark`: takes in a confirmation of `epoch` sent at `sent_local`, unless
    /// `epoch`'s ownership does not take confirmations (`false`).
    pub fn mark(&mut self, sent_local: u64, epoch: i64) -> bool {
        if self.confirmations_of == 0 || self.confirmations_of != epoch {
            return false;
        }
        if self.confirmed_local.is_none_or(|at| at < sent_local) {
            self.confirmed_local = Some(sent_local);
        }
        true
    }

    /// `Confirmed::retire`: the last confirmation is forgotten and none counts any more.
    pub fn retire_confirmations(&mut self) {
        self.confirmed_local = None;
        self.confirmations_of = 0;
    }
}

impl World {
    pub fn node(&mut self, id: usize) -> &mut Node {
        &mut self.nodes[id]
    }

    pub fn local_now(&self, id: usize) -> u64 {
        self.nodes[id].local(self.now)
    }

    pub fn timer(&mut self, id: usize, local_delay: Duration, timer: Timer) {
        let node = &self.nodes[id];
        let (delay, incarnation) = (node.global(us(local_delay)), node.incarnation);
        self.after(
            delay,
            Event::AtNode {
                node: id,
                incarnation,
                input: NodeInput::Timer(timer),
            },
        );
    }

    pub fn statement(&mut self, id: usize, kind: StatementKind) {
        let channel = match &kind {
            StatementKind::ReadEpoch { session, .. }
            | StatementKind::ReadClock { session, .. }
            | StatementKind::Serving { session, .. }
            | StatementKind::Release { session, .. }
            | StatementKind::Close { session } => session_channel(*session, true),
            StatementKind::Flush { .. } => node_channel(id, self.nodes[id].incarnation, 1),
            _ => node_channel(id, self.nodes[id].incarnation, 2),
        };
        if let StatementKind::ReadClock { .. } = kind {
            self.node(id).reading_clock = true;
            let pause = self.node(id).pause_at_clock_reading.take();
            for node in &mut self.nodes {
                node.pause_at_clock_reading = None;
            }
            if let Some(pause) = pause {
                // And it crashes a little later, while leases it granted still run: the next
                // owner ends them by its own reading.
                self.count("fault: pause during a clock reading");
                self.pause(id, pause);
                let crash = pause + self.rng.random_range(500 * MS..3_000 * MS);
                self.after(crash, Event::Crash { node: id });
            }
        }
        let statement = Statement {
            node: id,
            incarnation: self.nodes[id].incarnation,
            generation: self.pg.generation,
            kind,
        };
        self.send_link(id, channel, Event::AtPostgres(statement));
    }

    /// A node starts (or starts again after a crash): it stands by.
    pub fn start_node(&mut self, id: usize) {
        self.timer(id, Duration::ZERO, Timer::Poll);
        self.wait_for_lock(id);
    }

    pub fn wait_for_lock(&mut self, id: usize) {
        self.node(id).lock = Lock::Waiting(None);
        self.statement(id, StatementKind::Acquire);
    }

    // --- The node's side -------------------------------------------------------------------

    pub fn at_node(&mut self, id: usize, incarnation: u32, input: NodeInput) {
        let node = &mut self.nodes[id];
        if (incarnation != ANY && node.incarnation != incarnation) || !node.up {
            // Its sockets are closed: a request is refused, unacted; the rest is lost.
            if let NodeInput::Request { origin, .. } = input {
                self.refused(origin);
            }
            return;
        }
        if node.paused {
            node.deferred.push(input);
            return;
        }
        match input {
            NodeInput::LockGranted { session } => self.lock_granted(id, session),
            NodeInput::SessionClosed { session } => match self.nodes[id].lock {
                Lock::Held { session: held, .. } if held == session => {
                    self.session_lost(id, "the connection ended")
                }
                Lock::Waiting(Some(waiting)) if waiting == session => self.retry_later(id),
                _ => {}
            },
            NodeInput::Answer { generation, answer } => {
                // An answer that crosses a restart of PostgreSQL is a broken connection.
                let answer = if generation == self.pg.generation {
                    answer
                } else {
                    answer.failed()
                };
                self.answer(id, answer);
            }
            NodeInput::Timer(timer) => self.timer_fired(id, timer),
            NodeInput::Request { origin, action } => self.request(id, origin, action),
            NodeInput::Forwarded { forward, reply } => self.forwarded(id, forward, reply),
            NodeInput::ForwardBroken { forward } => {
                if let Some(forward) = self.nodes[id].forwards.remove(&forward) {
                    let reply = Reply::Unavailable("the owner's answer was lost".into());
                    self.reply(id, forward.origin, reply);
                }
            }
            NodeInput::Step { request } => self.step(id, request),
            NodeInput::Terminate => self.terminate(id),
            NodeInput::Rebalance => self.rebalance(id),
        }
    }

    pub fn lock_granted(&mut self, id: usize, session: u64) {
        let waiting = match self.nodes[id].lock {
            Lock::Waiting(None) => true,
            Lock::Waiting(Some(waiting)) => waiting == session,
            _ => false,
        };
        if !waiting {
            self.statement(id, StatementKind::Close { session });
            return;
        }
        self.note(|| format!("node {id} holds the ownership lock (session {session})"));
        let granted_local = self.local_now(id);
        let node = self.node(id);
        node.granted_local = granted_local;
        node.retry = us(protocol::RETRY_MIN);
        node.lock = Lock::Held {
            session,
            alive: true,
        };
        node.takeover = Takeover::Clock;
        // Heartbeats start at once, so the session stays alive while the node recovers.
        self.heartbeat(id, session);
        self.read_clock(id, session, true);
    }

    /// Reads PostgreSQL's clock on the lock's session: the first reading of a measurement, or
    /// another one after an answer that took too long.
    fn read_clock(&mut self, id: usize, session: u64, first: bool) {
        if first {
            let node = self.node(id);
            node.clock_taken = 0;
            node.clock_best = None;
        }
        let sent_wall_ms = self.nodes[id].wall_ms(self.now);
        self.statement(
            id,
            StatementKind::ReadClock {
                session,
                sent_wall_ms,
            },
        );
    }

    pub fn heartbeat(&mut self, id: usize, session: u64) {
        let now = self.now;
        let node = self.node(id);
        node.beat += 1;
        node.beat_answered = false;
        node.beat_sent = now;
        let beat = node.beat;
        let sent_local = self.local_now(id);
        self.statement(
            id,
            StatementKind::ReadEpoch {
                session,
                purpose: Purpose::Heartbeat { sent_local, beat },
            },
        );
        let every = protocol::heartbeat_interval(self.settings.node_timeout);
        self.timer(
            id,
            protocol::heartbeat_answer_max(every),
            Timer::HeartbeatAnswer { session, beat },
        );
    }

    /// The lock session is gone (or the epoch is another's): no confirmation stands, and an
    /// owner steps down.
    pub fn session_lost(&mut self, id: usize, why: &str) {
        let node = self.node(id);
        let Lock::Held {
            session,
            alive: true,
        } = node.lock
        else {
            return;
        };
        node.lock = Lock::Held {
            session,
            alive: false,
        };
        node.confirmed_local = None;
        self.note(|| format!("node {id}: the ownership session is lost: {why}"));
        if self.nodes[id].owned.is_some() {
            self.serve_check(id);
        }
    }

    pub fn answer(&mut self, id: usize, answer: Answer) {
        match answer {
            Answer::Acquire(None) => {
                if self.nodes[id].lock == Lock::Waiting(None) {
                    self.retry_later(id);
                }
            }
            Answer::Acquire(Some(session)) => match self.nodes[id].lock {
                Lock::Waiting(None) => self.node(id).lock = Lock::Waiting(Some(session)),
                Lock::Held { session: held, .. } if held == session => {}
                _ => self.statement(id, StatementKind::Close { session }),
            },
            Answer::Epoch { purpose, epoch } => self.epoch_read(id, purpose, epoch),
            Answer::Clock {
                sent_wall_ms,
                postgres_ms,
            } => {
                self.node(id).reading_clock = false;
                let reading = postgres_ms.map(|postgres_ms| protocol::ClockReading {
                    host_sent_ms: sent_wall_ms,
                    postgres_ms,
                    host_received_ms: self.nodes[id].wall_ms(self.now),
                });
                // As `ownership::clock_offset_ms`: a reading that took long is taken again.
                let reading = match reading {
                    Some(reading) => {
                        let node = self.node(id);
                        node.clock_taken += 1;
                        let taken = node.clock_taken;
                        match protocol::choose_clock_reading(&mut node.clock_best, reading, taken) {
                            Some(chosen) => Some(chosen),
                            None => {
                                if let Lock::Held {
                                    session,
                                    alive: true,
                                } = self.nodes[id].lock
                                {
                                    self.count("clock read again");
                                    self.read_clock(id, session, false);
                                }
                                return;
                            }
                        }
                    }
                    None => None,
                };
                if self.nodes[id].takeover != Takeover::Clock {
                    // An owner's measurement every ANNOUNCE_EVERY (a failed one is ignored).
                    if let (Some(reading), true) = (reading, self.nodes[id].owned.is_some()) {
                        self.node(id).offset_ms = protocol::clock_offset_ms(reading);
                    }
                    return;
                }
                let Some(reading) = reading else {
                    return self.takeover_failed(id, "reading PostgreSQL's clock failed");
                };
                let node = self.node(id);
                node.offset_ms = protocol::clock_offset_ms(reading);
                node.takeover = Takeover::Claim;
                self.statement(id, StatementKind::Claim);
            }
            Answer::Claimed(epoch) => {
                if self.nodes[id].takeover != Takeover::Claim {
                    return;
                }
                let Some((epoch, released)) = epoch else {
                    return self.takeover_failed(id, "the claim failed");
                };
                self.note(|| {
                    format!("node {id} claimed epoch {epoch} (released before: {released})")
                });
                self.node(id).takeover = Takeover::Recover { epoch, released };
                self.statement(id, StatementKind::Recover);
            }
            Answer::Recovered(records) => self.recovered(id, records),
            Answer::Serving { sent_local, ok } => self.serving(id, sent_local, ok),
            Answer::Released(ok) => self.released(id, ok),
            Answer::Flushed {
                epoch,
                last_lsn,
                result,
            } => self.flushed(id, epoch, last_lsn, result),
            Answer::Owner(row) => {
                if let Some(row) = row {
                    self.see_owner(id, row);
                }
            }
        }
    }

    pub fn recovered(&mut self, id: usize, records: Option<Vec<Record>>) {
        let Takeover::Recover { epoch, released } = self.nodes[id].takeover else {
            return;
        };
        let Some(records) = records else {
            return self.takeover_failed(id, "recovery failed");
        };
        let mut engine = Engine::new(EngineConfig::default(), ReceiptKey::new(RECEIPT_KEY));
        for record in &records {
            engine.apply(record);
        }
        let Lock::Held { session, alive } = self.nodes[id].lock else {
            unreachable!("a takeover holds the lock");
        };
        let node = self.node(id);
        node.recovered = Some(engine);
        node.epoch_watch = epoch;
        node.takeover = Takeover::Serving { epoch };
        if !alive {
            return self.takeover_failed(id, "lost the lock while recovering");
        }
        if released {
            self.count("takeover after a release");
        }
        if self.settings.serving_delay {
            let delay = us(protocol::serving_delay(
                self.settings.node_timeout,
                released,
            ));
            let ready = self.nodes[id].granted_local + delay;
            let local_now = self.local_now(id);
            if local_now < ready {
                let wait = Duration::from_micros(ready - local_now);
                return self.timer(id, wait, Timer::MarkServing { epoch });
            }
        }
        self.mark_serving(id, session, epoch);
    }

    pub fn mark_serving(&mut self, id: usize, session: u64, epoch: i64) {
        let sent_local = self.local_now(id);
        self.statement(
            id,
            StatementKind::Serving {
                session,
                epoch,
                sent_local,
            },
        );
    }

    pub fn serving(&mut self, id: usize, sent_local: u64, ok: Option<bool>) {
        let Takeover::Serving { epoch } = self.nodes[id].takeover else {
            return;
        };
        if ok != Some(true) {
            return self.takeover_failed(id, "lost the lock or the epoch while recovering");
        }
        let Lock::Held { session, .. } = self.nodes[id].lock else {
            unreachable!("a takeover holds the lock");
        };
        let node = self.node(id);
        // `Confirmed::open`.
        node.confirmations_of = epoch;
        node.mark(sent_local, epoch);
        node.takeover = Takeover::Idle;
        node.refused = None;
        node.retry = us(protocol::RETRY_MIN);
        let engine = node.recovered.take().expect("recovered engine");
        node.owned = Some(Owned {
            epoch,
            session,
            engine,
            next_lsn: 0,
            durable_lsn: 0,
            pending: Vec::new(),
            flushing: None,
            resolving: false,
            poisoned: false,
            flush_retry: 50 * MS,
        });
        self.count("takeover");
        self.note(|| format!("node {id} serves as the owner of epoch {epoch}"));
        let every = protocol::heartbeat_interval(self.settings.node_timeout);
        self.timer(id, every, Timer::ServeCheck { epoch });
        self.timer(id, protocol::ANNOUNCE_EVERY, Timer::Remeasure { epoch });
    }

    /// A takeover failed: the lock session is dropped (releasing the lock), and the node
    /// waits for it again after a backoff.
    pub fn takeover_failed(&mut self, id: usize, why: &str) {
        self.note(|| format!("node {id}: taking over failed: {why}"));
        self.count("takeover failed");
        self.drop_lock(id);
        let node = self.node(id);
        node.takeover = Takeover::Idle;
        node.recovered = None;
        node.epoch_watch = 0;
        self.retry_later(id);
    }

    pub fn retry_later(&mut self, id: usize) {
        let node = self.node(id);
        node.lock = Lock::None;
        let retry = node.retry;
        node.retry = (retry * 2).min(us(protocol::RETRY_MAX));
        self.timer(id, Duration::from_micros(retry), Timer::Retry);
    }

    pub fn drop_lock(&mut self, id: usize) {
        if let Lock::Held { session, .. } = self.nodes[id].lock {
            self.statement(id, StatementKind::Close { session });
        }
        let node = self.node(id);
        node.lock = Lock::None;
        node.confirmed_local = None;
    }

    pub fn epoch_read(&mut self, id: usize, purpose: Purpose, epoch: Option<i64>) {
        match purpose {
            Purpose::Heartbeat { sent_local, beat } => {
                let node = self.node(id);
                let Lock::Held {
                    session,
                    alive: true,
                } = node.lock
                else {
                    return;
                };
                if beat != node.beat {
                    return;
                }
                node.beat_answered = true;
                let ours = node.epoch_watch;
                match epoch {
                    None => return self.session_lost(id, "a heartbeat failed"),
                    Some(current) if ours != 0 && current == ours => {
                        // Ignored once a hand-off retired the confirmations.
                        node.mark(sent_local, ours);
                    }
                    Some(_) if ours != 0 => {
                        return self.session_lost(id, "the bucket's epoch is another node's")
                    }
                    Some(_) => {}
                }
                // The next tick comes a heartbeat after the last one was sent (tokio's interval,
                // delayed when a read took longer).
                let every = self.nodes[id]
                    .global(us(protocol::heartbeat_interval(self.settings.node_timeout)));
                let next = (self.nodes[id].beat_sent + every).max(self.now);
                let incarnation = self.nodes[id].incarnation;
                self.at(
                    next,
                    Event::AtNode {
                        node: id,
                        incarnation,
                        input: NodeInput::Timer(Timer::Heartbeat { session }),
                    },
                );
            }
            Purpose::Check {
                request,
                sent_local,
            } => {
                let node = self.node(id);
                let Some(state) = node.requests.get(&request) else {
                    return;
                };
                let Stage::Checking { second } = state.stage else {
                    return;
                };
                // As `ClusterNode::confirm`: a check that finds the epoch counts only while the
                // ownership takes confirmations (not once a step-down or a hand-off retired them).
                let of = state.epoch;
                if epoch == Some(of) && node.mark(sent_local, of) {
                    self.confirmed(id, request, second);
                } else {
                    self.unconfirmed(id, request);
                }
            }
        }
    }

    pub fn timer_fired(&mut self, id: usize, timer: Timer) {
        match timer {
            Timer::Heartbeat { session } => {
                if self.nodes[id].lock
                    == (Lock::Held {
                        session,
                        alive: true,
                    })
                {
                    self.heartbeat(id, session);
                }
            }
            Timer::HeartbeatAnswer { session, beat } => {
                let node = &self.nodes[id];
                let waiting = node.beat == beat
                    && node.lock
                        == Lock::Held {
                            session,
                            alive: true,
                        };
                // The beat answered in time if a later one was sent since.
                if waiting && self.heartbeat_unanswered(id, beat) {
                    self.session_lost(id, "a heartbeat got no answer");
                }
            }
            Timer::ServeCheck { epoch } => {
                if self.nodes[id]
                    .owned
                    .as_ref()
                    .is_some_and(|o| o.epoch == epoch)
                {
                    self.serve_check(id);
                    if self.nodes[id].owned.is_some() {
                        let every = protocol::heartbeat_interval(self.settings.node_timeout);
                        self.timer(id, every, Timer::ServeCheck { epoch });
                    }
                }
            }
            Timer::Remeasure { epoch } => {
                let Some(owned) = self.nodes[id].owned.as_ref().filter(|o| o.epoch == epoch) else {
                    return;
                };
                let session = owned.session;
                if matches!(self.nodes[id].lock, Lock::Held { alive: true, .. }) {
                    self.read_clock(id, session, true);
                }
                self.timer(id, protocol::ANNOUNCE_EVERY, Timer::Remeasure { epoch });
            }
            Timer::Poll => {
                if self.nodes[id].owned.is_none() {
                    self.statement(id, StatementKind::ReadOwner);
                }
                self.timer(id, protocol::OWNER_POLL, Timer::Poll);
            }
            Timer::Retry => {
                let node = &self.nodes[id];
                if node.lock == Lock::None && node.owned.is_none() && !node.terminating {
                    self.wait_for_lock(id);
                }
            }
            Timer::CheckTimeout { request } => {
                let waiting = self.nodes[id]
                    .requests
                    .get(&request)
                    .is_some_and(|state| matches!(state.stage, Stage::Checking { .. }));
                if waiting {
                    self.unconfirmed(id, request);
                }
            }
            Timer::Route { forward } => self.route(id, forward),
            Timer::MarkServing { epoch } => {
                let node = &self.nodes[id];
                if node.takeover != (Takeover::Serving { epoch }) {
                    return;
                }
                match node.lock {
                    Lock::Held {
                        session,
                        alive: true,
                    } => self.mark_serving(id, session, epoch),
                    _ => self.takeover_failed(id, "lost the lock while recovering"),
                }
            }
            Timer::FlushRetry { epoch } => self.flush(id, epoch),
            Timer::HandOff { epoch } => self.hand_off_step(id, epoch),
        }
    }

    /// Whether heartbeat `beat` is still the last one sent, and unanswered.
    pub fn heartbeat_unanswered(&self, id: usize, beat: u64) -> bool {
        self.nodes[id].beat == beat && !self.nodes[id].beat_answered
    }

    /// The owner's periodic look (`serve_as_owner`): steps down when the protocol says so.
    pub fn serve_check(&mut self, id: usize) {
        let local_now = self.local_now(id);
        let node = &self.nodes[id];
        let Some(owned) = &node.owned else {
            return;
        };
        let lock_alive = matches!(node.lock, Lock::Held { alive: true, .. });
        let reason = protocol::step_down_reason(
            lock_alive,
            owned.poisoned,
            node.confirmed_since(local_now),
            self.settings.node_timeout,
        );
        if let Some(reason) = reason {
            self.step_down(id, reason);
        }
    }

    pub fn step_down(&mut self, id: usize, reason: &str) {
        let epoch = self.nodes[id].owned.as_ref().map_or(0, |owned| owned.epoch);
        self.note(|| format!("node {id} steps down from epoch {epoch}: {reason}"));
        self.count("step-down");
        let node = self.node(id);
        let retired = node.owned.take().expect("an owner steps down");
        node.retired.push(retired);
        node.epoch_watch = 0;
        node.known_owner = None;
        node.retire_confirmations();
        self.drop_lock(id);
        // Requests executing now run on, and fail their confirmation (the lock session is
        // gone, so is any check of the epoch on it).
        let checking: Vec<u64> = self.nodes[id]
            .requests
            .iter()
            .filter(|(_, state)| matches!(state.stage, Stage::Checking { .. }))
            .map(|(&request, _)| request)
            .collect();
        for request in checking {
            self.unconfirmed(id, request);
        }
        self.forget_retired(id);
        self.wait_for_lock(id);
    }
}
