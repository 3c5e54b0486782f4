//! The model of PostgreSQL as the cluster uses it: the bucket row (epoch, owner, serving mark,
//! the last released epoch),
//! the append-only frame log behind the fenced INSERT, the ownership lock (a session advisory
//! lock with a FIFO queue of waiting sessions), lock sessions that `idle_session_timeout` ends,
//! and restarts that end every session.
//!
//! Every statement is atomic at the instant it arrives (its answer travels back over the
//! network): a flush is one instant at PostgreSQL, so the claim's wait for flushes holding
//! `FOR SHARE` is the order of two instants. PostgreSQL's clock is the simulation's global
//! clock: the one every lease deadline means.

use std::collections::{BTreeMap, VecDeque};

use leaseq_core::Record;

use super::node::NodeInput;
use super::world::{Event, Us, World, EPOCH_US, MS};

/// A record as an owner's engine journaled it, with what the checks need to know of the
/// moment it was decided (never read by the protocol).
#[derive(Clone, Debug)]
pub struct Logged {
    pub record: Record,
    /// The global instant the owner's engine decided it.
    pub decided_at: Us,
    /// For a delete or a visibility change: the attempt of the receipt it acted with.
    pub receipt_attempt: Option<u32>,
}

/// One flush's frame.
#[derive(Clone, Debug)]
pub struct Frame {
    pub epoch: i64,
    /// The owner's log position of its last record (a retried flush of unknown outcome is
    /// recognised by it, as `ON CONFLICT DO NOTHING` recognises a frame).
    pub last_lsn: u64,
    pub records: Vec<Logged>,
}

/// What a lock session is doing.
#[derive(Clone, Debug)]
pub struct Session {
    pub node: usize,
    pub incarnation: u32,
    pub alive: bool,
    /// When its last statement ended (`None` while one runs: waiting for the lock).
    pub idle_since: Option<Us>,
}

/// The outcome of a statement on a lock session that needs the session alive.
pub enum OnSession<T> {
    Done(T),
    /// The session is gone (ended by the idle timeout, a restart, or the node's crash).
    Gone,
}

#[derive(Default)]
pub struct Postgres {
    /// Whether PostgreSQL accepts statements (false while it restarts).
    pub up: bool,
    /// Counts restarts: a statement or answer of an earlier generation's connection fails.
    pub generation: u32,
    pub epoch: i64,
    pub owner: Option<usize>,
    /// `owned_since` is set: standbys forward to the owner.
    pub serving: bool,
    /// `released_epoch`: the last epoch whose owner released the bucket after a hand-off.
    pub released_epoch: Option<i64>,
    /// The mutation `sticky-release`: a claim counts any earlier release, not only that of the
    /// epoch it replaces.
    pub sticky_release: bool,
    pub frames: Vec<Frame>,
    pub sessions: BTreeMap<u64, Session>,
    pub next_session: u64,
    pub lock_holder: Option<u64>,
    pub lock_queue: VecDeque<u64>,
    /// Ground truth for the checks: when each epoch's owner marked itself serving.
    pub served_at: BTreeMap<i64, Us>,
    /// Ground truth for the checks: when each epoch's owner released the bucket.
    pub released_at: BTreeMap<i64, Us>,
}

/// What happened to sessions in a step, for the world to tell the nodes.
#[derive(Default)]
pub struct Changes {
    /// Sessions granted the lock now.
    pub granted: Vec<u64>,
    /// Sessions ended now.
    pub ended: Vec<u64>,
}

impl Postgres {
    pub fn new(bootstrap: Vec<Logged>) -> Postgres {
        Postgres {
            up: true,
            frames: vec![Frame {
                epoch: 0,
                last_lsn: 0,
                records: bootstrap,
            }],
            ..Postgres::default()
        }
    }

    /// A lock session connects, sets its idle timeout and asks for the lock; it waits (busy,
    /// so never idle) until it is granted.
    pub fn acquire(&mut self, node: usize, incarnation: u32, changes: &mut Changes) -> u64 {
        self.next_session += 1;
        let id = self.next_session;
        self.sessions.insert(
            id,
            Session {
                node,
                incarnation,
                alive: true,
                idle_since: None,
            },
        );
        self.lock_queue.push_back(id);
        self.grant_next(0, changes);
        id
    }

    /// A statement on a lock session at `now`: it restarts the session's idle time.
    pub fn touch(&mut self, session: u64, now: Us) -> OnSession<()> {
        match self.sessions.get_mut(&session) {
            Some(state) if state.alive && state.idle_since.is_some() => {
                state.idle_since = Some(now);
                OnSession::Done(())
            }
            _ => OnSession::Gone,
        }
    }

    /// Ends a session (idle timeout, the node's socket closed, a restart): its lock passes on.
    pub fn end(&mut self, session: u64, now: Us, changes: &mut Changes) {
        let Some(state) = self.sessions.get_mut(&session) else {
            return;
        };
        if !state.alive {
            return;
        }
        state.alive = false;
        changes.ended.push(session);
        self.lock_queue.retain(|&queued| queued != session);
        if self.lock_holder == Some(session) {
            self.lock_holder = None;
            self.grant_next(now, changes);
        }
    }

    /// The idle timeout's check: ends the session if it has been idle since `since`.
    pub fn idle_check(&mut self, session: u64, since: Us, now: Us, changes: &mut Changes) {
        let idle = self
            .sessions
            .get(&session)
            .is_some_and(|state| state.alive && state.idle_since == Some(since));
        if idle {
            self.end(session, now, changes);
        }
    }

    pub fn grant_next(&mut self, now: Us, changes: &mut Changes) {
        if self.lock_holder.is_some() {
            return;
        }
        while let Some(next) = self.lock_queue.pop_front() {
            let state = self.sessions.get_mut(&next).expect("queued session");
            if state.alive {
                state.idle_since = Some(now);
                self.lock_holder = Some(next);
                changes.granted.push(next);
                return;
            }
        }
    }

    /// A restart: every session ends, and statements fail until [`Postgres::back`].
    pub fn restart(&mut self, now: Us, changes: &mut Changes) {
        self.up = false;
        self.generation += 1;
        let alive: Vec<u64> = self
            .sessions
            .iter()
            .filter(|(_, state)| state.alive)
            .map(|(&id, _)| id)
            .collect();
        for session in alive {
            self.end(session, now, changes);
        }
        self.lock_queue.clear();
        self.lock_holder = None;
    }

    pub fn back(&mut self) {
        self.up = true;
    }

    /// The claim: raises the epoch and records the owner, not yet serving; and whether the
    /// epoch it replaced was released (read in the same statement, `schema::claim`).
    pub fn claim(&mut self, node: usize) -> (i64, bool) {
        let released = if self.sticky_release {
            self.released_epoch.is_some()
        } else {
            self.released_epoch == Some(self.epoch)
        };
        self.epoch += 1;
        self.owner = Some(node);
        self.serving = false;
        (self.epoch, released)
    }

    /// The release at the end of a hand-off (`ownership::release`), on the lock session and
    /// fenced by `epoch`: the serving mark goes, the epoch is recorded as released.
    pub fn release(&mut self, session: u64, epoch: i64, now: Us) -> OnSession<bool> {
        if let OnSession::Gone = self.touch(session, now) {
            return OnSession::Gone;
        }
        if self.epoch != epoch {
            return OnSession::Done(false);
        }
        self.released_epoch = Some(epoch);
        self.serving = false;
        self.released_at.entry(epoch).or_insert(now);
        OnSession::Done(true)
    }

    /// The serving mark, on the lock session: only while the epoch is still `epoch`.
    pub fn mark_serving(&mut self, session: u64, epoch: i64, now: Us) -> OnSession<bool> {
        if let OnSession::Gone = self.touch(session, now) {
            return OnSession::Gone;
        }
        if self.epoch != epoch {
            return OnSession::Done(false);
        }
        self.serving = true;
        self.served_at.entry(epoch).or_insert(now);
        OnSession::Done(true)
    }

    /// The fenced INSERT (and its retry after an unknown outcome, which finds a frame already
    /// there): `true` if the frame is in the log under `epoch`, `false` if fenced out.
    pub fn flush(&mut self, frame: Frame) -> FlushResult {
        if self.epoch != frame.epoch {
            return FlushResult::Fenced;
        }
        let there = self
            .frames
            .iter()
            .rev()
            .take_while(|landed| landed.epoch == frame.epoch)
            .any(|landed| landed.last_lsn == frame.last_lsn);
        if there {
            return FlushResult::AlreadyThere;
        }
        self.frames.push(frame);
        FlushResult::Landed
    }

    /// What a standby reads: the serving owner and its epoch.
    pub fn read_owner(&self) -> Option<(usize, i64)> {
        self.owner
            .filter(|_| self.serving)
            .map(|owner| (owner, self.epoch))
    }

    /// Every record of the log, in order (recovery).
    pub fn records(&self) -> Vec<Record> {
        self.frames
            .iter()
            .flat_map(|frame| frame.records.iter().map(|logged| logged.record.clone()))
            .collect()
    }
}

pub enum FlushResult {
    Landed,
    AlreadyThere,
    Fenced,
}

// --- The statements nodes send, and PostgreSQL's side of each ----------------------------

/// A statement on its way to PostgreSQL.
pub struct Statement {
    pub node: usize,
    pub incarnation: u32,
    /// PostgreSQL's generation when it was sent: one that crosses a restart fails.
    pub generation: u32,
    pub kind: StatementKind,
}

pub enum StatementKind {
    Acquire,
    /// A heartbeat's or a request's read of the epoch on the lock session.
    ReadEpoch {
        session: u64,
        purpose: Purpose,
    },
    ReadClock {
        session: u64,
        sent_wall_ms: i64,
    },
    Claim,
    Recover,
    Serving {
        session: u64,
        epoch: i64,
        sent_local: u64,
    },
    /// A hand-off's release of `epoch`, on the lock session.
    Release {
        session: u64,
        epoch: i64,
    },
    Flush {
        frame: Frame,
    },
    ReadOwner,
    /// The node dropped its lock session (its socket closes).
    Close {
        session: u64,
    },
}

#[derive(Clone, Copy, Debug)]
pub enum Purpose {
    Heartbeat { sent_local: u64, beat: u64 },
    Check { request: u64, sent_local: u64 },
}

pub enum Answer {
    Acquire(Option<u64>),
    Epoch {
        purpose: Purpose,
        epoch: Option<i64>,
    },
    Clock {
        sent_wall_ms: i64,
        postgres_ms: Option<i64>,
    },
    /// The new epoch, and whether the one it replaced was released.
    Claimed(Option<(i64, bool)>),
    Recovered(Option<Vec<Record>>),
    Serving {
        sent_local: u64,
        ok: Option<bool>,
    },
    Released(Option<bool>),
    Flushed {
        epoch: i64,
        last_lsn: u64,
        result: Option<FlushResult>,
    },
    Owner(Option<Option<(usize, i64)>>),
}

impl World {
    // --- PostgreSQL's side of every statement ----------------------------------------------

    pub fn at_postgres(&mut self, statement: Statement) {
        let Statement {
            node,
            incarnation,
            generation,
            kind,
        } = statement;
        let up = self.pg.up && generation == self.pg.generation;
        let answer = match kind {
            StatementKind::Acquire => {
                if !up {
                    Some(Answer::Acquire(None))
                } else {
                    let mut changes = Changes::default();
                    let session = self.pg.acquire(node, incarnation, &mut changes);
                    // A node that crashed since it asked has closed the socket.
                    if self.nodes[node].incarnation != incarnation {
                        self.pg.end(session, self.now, &mut changes);
                    }
                    self.tell_sessions(changes);
                    Some(Answer::Acquire(Some(session)))
                }
            }
            StatementKind::ReadEpoch { session, purpose } => {
                let epoch = self.on_session(session, up).then_some(self.pg.epoch);
                Some(Answer::Epoch { purpose, epoch })
            }
            StatementKind::ReadClock {
                session,
                sent_wall_ms,
            } => {
                let postgres_ms = self
                    .on_session(session, up)
                    .then_some(((EPOCH_US + self.now) / MS) as i64);
                Some(Answer::Clock {
                    sent_wall_ms,
                    postgres_ms,
                })
            }
            StatementKind::Claim => Some(Answer::Claimed(up.then(|| self.pg.claim(node)))),
            StatementKind::Release { session, epoch } => {
                let ok = if up {
                    match self.pg.release(session, epoch, self.now) {
                        OnSession::Done(ok) => {
                            self.idle_from_now(session);
                            if ok {
                                self.note(|| format!("PostgreSQL: epoch {epoch} released"));
                            }
                            Some(ok)
                        }
                        OnSession::Gone => None,
                    }
                } else {
                    None
                };
                Some(Answer::Released(ok))
            }
            StatementKind::Recover => Some(Answer::Recovered(up.then(|| self.pg.records()))),
            StatementKind::Serving {
                session,
                epoch,
                sent_local,
            } => {
                let ok = if up {
                    match self.pg.mark_serving(session, epoch, self.now) {
                        OnSession::Done(ok) => {
                            self.idle_from_now(session);
                            if ok {
                                self.check_no_older_confirmation(epoch);
                            }
                            Some(ok)
                        }
                        OnSession::Gone => None,
                    }
                } else {
                    None
                };
                Some(Answer::Serving { sent_local, ok })
            }
            StatementKind::Flush { frame } => {
                let (epoch, last_lsn) = (frame.epoch, frame.last_lsn);
                let result = up.then(|| self.land(frame));
                Some(Answer::Flushed {
                    epoch,
                    last_lsn,
                    result,
                })
            }
            StatementKind::ReadOwner => Some(Answer::Owner(up.then(|| self.pg.read_owner()))),
            StatementKind::Close { session } => {
                let mut changes = Changes::default();
                self.pg.end(session, self.now, &mut changes);
                self.tell_sessions(changes);
                None
            }
        };
        if let Some(answer) = answer {
            let generation = self.pg.generation;
            let channel = (node_channel(node, incarnation, 0).0, 3);
            let event = Event::AtNode {
                node,
                incarnation,
                input: NodeInput::Answer { generation, answer },
            };
            self.send_link(node, channel, event);
        }
    }

    /// A statement on lock session `session`: whether it ran (the session alive and idle).
    pub fn on_session(&mut self, session: u64, up: bool) -> bool {
        if !up {
            return false;
        }
        match self.pg.touch(session, self.now) {
            OnSession::Done(()) => {
                self.idle_from_now(session);
                true
            }
            OnSession::Gone => false,
        }
    }
}

impl Answer {
    /// The same answer as a failed statement (its connection broke).
    pub fn failed(self) -> Answer {
        match self {
            Answer::Acquire(_) => Answer::Acquire(None),
            Answer::Epoch { purpose, .. } => Answer::Epoch {
                purpose,
                epoch: None,
            },
            Answer::Clock { sent_wall_ms, .. } => Answer::Clock {
                sent_wall_ms,
                postgres_ms: None,
            },
            Answer::Claimed(_) => Answer::Claimed(None),
            Answer::Recovered(_) => Answer::Recovered(None),
            Answer::Serving { sent_local, .. } => Answer::Serving {
                sent_local,
                ok: None,
            },
            Answer::Released(_) => Answer::Released(None),
            Answer::Flushed {
                epoch, last_lsn, ..
            } => Answer::Flushed {
                epoch,
                last_lsn,
                result: None,
            },
            Answer::Owner(_) => Answer::Owner(None),
        }
    }
}

/// The directed connection `kind` of a node's incarnation to PostgreSQL (1: the flusher's,
/// 2: other statements) or back (`(.., 3)`).
pub fn node_channel(node: usize, incarnation: u32, kind: u64) -> (u64, u64) {
    ((node as u64) << 32 | u64::from(incarnation) << 4 | kind, 2)
}
