//! The hand-off, step for step as `BucketNode::hand_off` runs it: the owner stops taking
//! requests (they are forwarded once a new owner serves), waits for the ones executing
//! (`HAND_OFF_DRAIN_MAX` at most), checkpoints (time, here), retires its confirmations (every
//! request that has not passed its second confirmation fails it), writes the release on its
//! lock session, fenced by its epoch, and closes the session. On SIGTERM the process then
//! exits, and starts again later (a rolling restart); a SIGTERM of a node that does not own the
//! log ends its process at once. When placement prefers another node (a rebalance), the node
//! stays up as a standby and waits for the lock again once placement prefers it again (any
//! time later: the nodes' liveness as placement reads it is not modelled), so an ownership's
//! requests may still run while the same node serves a newer epoch.

use std::time::Duration;

use leaseq_postgres::cluster as protocol;
use rand::Rng;

use super::node::{Lock, Timer};
use super::postgres::StatementKind;
use super::world::{us, Event, Mutation, World, MS};

/// A hand-off under way.
pub struct HandOff {
    pub epoch: i64,
    pub session: u64,
    pub stage: Stage,
    /// When the drain stops waiting, on the node's clock.
    pub drain_until_local: u64,
    /// SIGTERM: the process exits afterwards (else a rebalance: it stands by).
    pub leaving: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stage {
    /// Waiting for the requests executing under the epoch.
    Drain,
    /// Writing the checkpoint.
    Checkpoint,
    /// Confirmations retired; the release is next.
    Retired,
    /// The release is on its way to PostgreSQL.
    Releasing,
}

/// How often the model looks whether the drain is done (the real one is woken by the last
/// request; a millisecond later changes no order that matters).
const DRAIN_POLL: Duration = Duration::from_millis(1);

impl World {
    /// SIGTERM reaches a running node.
    pub fn terminate(&mut self, id: usize) {
        let node = self.node(id);
        node.terminating = true;
        if node.owned.is_none() {
            // Nothing to hand off (a standby, or a node still taking over, whose lock goes
            // with its process): it exits.
            self.note(|| format!("node {id} gets SIGTERM and exits"));
            return self.exit_soon(id);
        }
        self.hand_off(id, true);
    }

    /// Placement prefers another node for the bucket: its owner hands it off and stands by.
    pub fn rebalance(&mut self, id: usize) {
        let node = &self.nodes[id];
        if node.owned.is_some() && node.hand_off.is_none() && !node.terminating {
            self.hand_off(id, false);
        }
    }

    fn hand_off(&mut self, id: usize, leaving: bool) {
        let owned = self.node(id).owned.take().expect("an owner hands off");
        let (epoch, session) = (owned.epoch, owned.session);
        let why = if leaving {
            "gets SIGTERM"
        } else {
            "rebalances"
        };
        self.note(|| format!("node {id} {why}: hands off epoch {epoch}"));
        self.count(if leaving {
            "hand-off"
        } else {
            "hand-off (rebalance)"
        });
        let drain_until_local = self.local_now(id) + us(protocol::HAND_OFF_DRAIN_MAX);
        let node = self.node(id);
        // Requests executing hold the ownership (as the real ones hold their `Arc<Owned>`).
        node.retired.push(owned);
        node.known_owner = None;
        node.hand_off = Some(HandOff {
            epoch,
            session,
            stage: Stage::Drain,
            drain_until_local,
            leaving,
        });
        if self.settings.mutation == Some(Mutation::ReleaseFirst) {
            self.statement(id, StatementKind::Release { session, epoch });
        }
        self.hand_off_pause(id, 0);
        self.timer(id, Duration::ZERO, Timer::HandOff { epoch });
    }

    /// The hand-off's next step.
    pub fn hand_off_step(&mut self, id: usize, epoch: i64) {
        let local_now = self.local_now(id);
        let node = &self.nodes[id];
        let Some(hand_off) = node.hand_off.as_ref().filter(|h| h.epoch == epoch) else {
            return;
        };
        match hand_off.stage {
            Stage::Drain => {
                let executing = node
                    .requests
                    .values()
                    .any(|state| state.epoch == epoch && !state.late);
                if executing && local_now < hand_off.drain_until_local {
                    return self.timer(id, DRAIN_POLL, Timer::HandOff { epoch });
                }
                self.set_hand_off_stage(id, Stage::Checkpoint);
                // A pause during the checkpoint, before the confirmations retire.
                self.hand_off_pause(id, 1);
                let checkpoint = self.rng.random_range(MS..100 * MS);
                self.timer(
                    id,
                    Duration::from_micros(checkpoint),
                    Timer::HandOff { epoch },
                );
            }
            Stage::Checkpoint => {
                let no_retire = self.settings.mutation == Some(Mutation::NoRetire);
                let node = self.node(id);
                node.epoch_watch = 0;
                if no_retire {
                    node.confirmed_local = None;
                } else {
                    node.retire_confirmations();
                }
                self.note(|| format!("node {id}: epoch {epoch}'s confirmations retired"));
                self.set_hand_off_stage(id, Stage::Retired);
                // A pause between retiring and writing the release.
                self.hand_off_pause(id, 2);
                self.timer(id, Duration::ZERO, Timer::HandOff { epoch });
            }
            Stage::Retired => {
                let session = hand_off.session;
                let alive = node.lock
                    == Lock::Held {
                        session,
                        alive: true,
                    };
                if alive && self.settings.mutation != Some(Mutation::ReleaseFirst) {
                    self.set_hand_off_stage(id, Stage::Releasing);
                    self.statement(id, StatementKind::Release { session, epoch });
                } else {
                    self.hand_off_done(id);
                }
            }
            Stage::Releasing => {}
        }
    }

    /// The release's answer (`None`: the statement failed).
    pub fn released(&mut self, id: usize, ok: Option<bool>) {
        let releasing = self.nodes[id]
            .hand_off
            .as_ref()
            .is_some_and(|hand_off| hand_off.stage == Stage::Releasing);
        if releasing {
            if ok == Some(true) {
                self.count("hand-off released");
            }
            self.hand_off_done(id);
        }
    }

    /// The lock goes; after SIGTERM the process exits after the HTTP layer's drain, after a
    /// rebalance the node stands by, and waits for the lock again once placement prefers it.
    fn hand_off_done(&mut self, id: usize) {
        let hand_off = self.node(id).hand_off.take().expect("a hand-off");
        self.note(|| format!("node {id} handed off epoch {}", hand_off.epoch));
        self.drop_lock(id);
        self.forget_retired(id);
        if hand_off.leaving {
            return self.exit_soon(id);
        }
        let preferred_again = self.rng.random_range(0..3_000 * MS);
        self.timer(id, Duration::from_micros(preferred_again), Timer::Retry);
    }

    fn exit_soon(&mut self, id: usize) {
        let incarnation = self.nodes[id].incarnation;
        let drain = self.rng.random_range(0..50 * MS);
        self.after(
            drain,
            Event::Exit {
                node: id,
                incarnation,
            },
        );
    }

    fn set_hand_off_stage(&mut self, id: usize, stage: Stage) {
        if let Some(hand_off) = self.node(id).hand_off.as_mut() {
            hand_off.stage = stage;
        }
    }

    /// The pause a fault planned at hand-off step `step`, if any (and PostgreSQL's restart early
    /// in it).
    fn hand_off_pause(&mut self, id: usize, step: u8) {
        let Some((pause, at, restart)) = self.nodes[id].pause_in_hand_off else {
            return;
        };
        if at != step {
            return;
        }
        self.node(id).pause_in_hand_off = None;
        self.count("fault: pause inside a hand-off");
        self.pause(id, pause);
        if restart {
            let restart_in = self.rng.random_range(0..pause / 3);
            self.after(restart_in, Event::PostgresRestart { down_max: 100 * MS });
        }
    }
}
