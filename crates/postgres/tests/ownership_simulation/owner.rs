//! The owner's request path and flusher, as `ClusterNode::execute` and `PgLog` run them: the
//! epoch confirmed before a request starts (within the window, or checked on the spot on the
//! lock session), the engine's decision journaled, the wait until the flush that carries its
//! records is durable (one fenced flush in flight; a fenced-out one poisons, one of unknown
//! outcome is written again as it was), the epoch confirmed again before the answer leaves.

use std::time::Duration;

use leaseq_core::{Engine, MessageId, PayloadRef, ReceiveRequest, Record, SendInput};
use leaseq_postgres::cluster as protocol;
use rand::Rng;

use super::clients::{Action, ClientReply, Delivered, Reply};
use super::node::{Lock, NodeInput, Origin, Timer, QUEUE};
use super::postgres::{FlushResult, Frame, Logged, Purpose, StatementKind};
use super::world::{Event, World, MS};

/// What an owner holds.
pub struct Owned {
    pub epoch: i64,
    pub session: u64,
    pub engine: Engine,
    pub next_lsn: u64,
    pub durable_lsn: u64,
    pub pending: Vec<Logged>,
    pub flushing: Option<Frame>,
    /// A flush of unknown outcome is being resolved: new requests are refused meanwhile.
    pub resolving: bool,
    pub poisoned: bool,
    pub flush_retry: u64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stage {
    Confirm { second: bool },
    Checking { second: bool },
    Execute,
    Durable,
}

pub struct Request {
    pub origin: Origin,
    pub action: Action,
    pub stage: Stage,
    pub epoch: i64,
    pub decided_at: u64,
    pub tail: u64,
    pub reply: Option<Reply>,
    /// It read the role before a hand-off changed it and entered only after the drain looked
    /// (its thread was descheduled in between): the drain does not wait for it.
    pub late: bool,
}

// --- The request path and the flusher ------------------------------------------------------

impl World {
    pub fn request(&mut self, id: usize, origin: Origin, action: Action) {
        if let Some(epoch) = self.late_entrant(id) {
            return self.start_request(id, origin, action, epoch, true);
        }
        if self.nodes[id].owned.is_none() {
            return match origin {
                // A node that does not own the log refuses a forwarded request unacted.
                Origin::Forward { .. } => self.reply(id, origin, Reply::NotServing),
                Origin::Client { .. } => self.forward(id, origin, action),
            };
        }
        let epoch = self.nodes[id].owned.as_ref().expect("owner").epoch;
        self.start_request(id, origin, action, epoch, false);
    }

    fn start_request(&mut self, id: usize, origin: Origin, action: Action, epoch: i64, late: bool) {
        let request = self.next_event_id();
        self.node(id).requests.insert(
            request,
            Request {
                origin,
                action,
                stage: Stage::Confirm { second: false },
                epoch,
                decided_at: 0,
                tail: 0,
                reply: None,
                late,
            },
        );
        self.step_soon(id, request);
    }

    /// Whether a request reaching a node in a hand-off's drain or checkpoint runs as one that
    /// read the role (`Role::Owner`) just before the hand-off changed it and counted itself in
    /// only after the drain looked (`ClusterNode::execute` reads the role, then enters; a
    /// thread descheduled in between): the epoch it runs under, if so. Nothing but the
    /// retirement of the confirmations stops its answer.
    fn late_entrant(&mut self, id: usize) -> Option<i64> {
        let hand_off = self.nodes[id].hand_off.as_ref()?;
        let racing = matches!(
            hand_off.stage,
            super::hand_off::Stage::Drain | super::hand_off::Stage::Checkpoint
        );
        let epoch = hand_off.epoch;
        (racing && self.rng.random_bool(0.2)).then(|| {
            self.count("request entered late in a hand-off");
            epoch
        })
    }

    pub fn next_event_id(&mut self) -> u64 {
        self.rng.random()
    }

    /// The request's next step runs a moment later: a point where the process may stop.
    pub fn step_soon(&mut self, id: usize, request: u64) {
        let step = match self.nodes[id].requests[&request].stage {
            Stage::Confirm { second: false } | Stage::Checking { second: false } => 0,
            Stage::Execute => 1,
            Stage::Durable => 2,
            Stage::Confirm { second: true } | Stage::Checking { second: true } => 3,
        };
        if let Some((pause, _)) = self.nodes[id].pause_at_step.filter(|&(_, at)| at == step) {
            self.nodes[id].pause_at_step = None;
            self.count("fault: pause inside a request");
            self.pause(id, pause);
        }
        let mut cpu = self.rng.random_range(1..50);
        if let Some((stall, _)) = self.nodes[id].stall_at_step.filter(|&(_, at)| at == step) {
            self.nodes[id].stall_at_step = None;
            self.count("fault: a request held up");
            cpu += stall;
        }
        let incarnation = self.nodes[id].incarnation;
        self.after(
            cpu,
            Event::AtNode {
                node: id,
                incarnation,
                input: NodeInput::Step { request },
            },
        );
    }

    /// The epoch is confirmed: the request executes (first confirmation) or its answer
    /// leaves (second).
    pub fn confirmed(&mut self, id: usize, request: u64, second: bool) {
        if second {
            self.answer_leaves(id, request);
        } else {
            self.set_stage(id, request, Stage::Execute);
        }
    }

    fn set_stage(&mut self, id: usize, request: u64, stage: Stage) {
        let state = self.node(id).requests.get_mut(&request).expect("request");
        state.stage = stage;
        self.step_soon(id, request);
    }

    /// The decided answer leaves, checked as it does.
    fn answer_leaves(&mut self, id: usize, request: u64) {
        let state = self.node(id).requests.remove(&request).expect("request");
        let reply = state.reply.expect("a decided request has its answer");
        if let Reply::Ok(answer) = &reply {
            let what = describe(&state.action, answer);
            let epoch = state.epoch;
            self.note(|| format!("node {id} (epoch {epoch}) acknowledges {what}"));
            self.check_answer(id, state.epoch, state.decided_at, &what);
            self.check_not_released(id, state.epoch, &what);
        }
        self.reply(id, state.origin, reply);
        self.forget_retired(id);
    }

    /// Drops the retired engines no request holds any more.
    pub fn forget_retired(&mut self, id: usize) {
        let node = &mut self.nodes[id];
        let requests = &node.requests;
        // A hand-off holds its ownership until it is done (the real one holds its `Owned`).
        let handing_off = node.hand_off.as_ref().map(|hand_off| hand_off.epoch);
        node.retired.retain(|owned| {
            Some(owned.epoch) == handing_off
                || requests.values().any(|state| state.epoch == owned.epoch)
        });
    }

    pub fn unconfirmed(&mut self, id: usize, request: u64) {
        if let Some(state) = self.node(id).requests.remove(&request) {
            self.count("answer: the epoch was not confirmed");
            let reply =
                Reply::Unavailable("this node could not confirm that it owns the log".into());
            self.reply(id, state.origin, reply);
            self.forget_retired(id);
        }
    }

    pub fn step(&mut self, id: usize, request: u64) {
        let Some(state) = self.nodes[id].requests.get(&request) else {
            return;
        };
        match state.stage {
            Stage::Confirm { second } => self.confirm(id, request, second),
            Stage::Checking { .. } => {}
            Stage::Execute => self.execute(id, request),
            Stage::Durable => self.durable(id, request),
        }
    }

    /// `ClusterNode::confirm`: within the window, or checked on the spot on the lock session.
    pub fn confirm(&mut self, id: usize, request: u64, second: bool) {
        let window = protocol::confirm_window(self.settings.node_timeout);
        let local_now = self.local_now(id);
        let node = &self.nodes[id];
        // As `BucketNode::confirm`: a confirmation of the ownership the request runs under (not
        // of a later one of the same node); the check on the spot needs that ownership's lock
        // session, which a step-down dropped.
        let epoch = node.requests[&request].epoch;
        let since = if self.settings.mutation == Some(super::world::Mutation::AnyOwnership) {
            node.confirmed_since(local_now)
        } else {
            node.confirmed_since_for(epoch, local_now)
        };
        if protocol::confirmed_within(since, window) {
            return self.confirmed(id, request, second);
        }
        // The ownership's lock session is there until a step-down or the end of a hand-off.
        let session_of = node
            .owned
            .as_ref()
            .map(|owned| owned.epoch)
            .or(node.hand_off.as_ref().map(|hand_off| hand_off.epoch));
        if session_of != Some(epoch) {
            return self.unconfirmed(id, request);
        }
        let Lock::Held { session, alive } = node.lock else {
            return self.unconfirmed(id, request);
        };
        if !alive {
            return self.unconfirmed(id, request);
        }
        self.count("confirmation checked on the spot");
        self.node(id)
            .requests
            .get_mut(&request)
            .expect("request")
            .stage = Stage::Checking { second };
        self.statement(
            id,
            StatementKind::ReadEpoch {
                session,
                purpose: Purpose::Check {
                    request,
                    sent_local: local_now,
                },
            },
        );
        self.timer(id, window, Timer::CheckTimeout { request });
    }

    pub fn execute(&mut self, id: usize, request: u64) {
        let now = self.now;
        let engine_ms = self.engine_ms(id);
        let node = &mut self.nodes[id];
        let state = node.requests.get_mut(&request).expect("request");
        let epoch = state.epoch;
        let Some(owned) = owned_for(&mut node.owned, &mut node.retired, epoch) else {
            return self.unconfirmed(id, request);
        };
        if owned.poisoned || owned.resolving {
            let reply = Reply::Unavailable("the log is unavailable".into());
            let origin = state.origin;
            node.requests.remove(&request);
            return self.reply(id, origin, reply);
        }
        let mut journal = Vec::new();
        let (reply, receipt_attempt) =
            run(&mut owned.engine, engine_ms, &state.action, &mut journal);
        for record in journal {
            owned.next_lsn += 1;
            owned.pending.push(Logged {
                record,
                decided_at: now,
                receipt_attempt,
            });
        }
        state.tail = owned.next_lsn;
        state.decided_at = now;
        state.reply = Some(reply);
        state.stage = Stage::Durable;
        self.flush(id, epoch);
        self.step_soon(id, request);
    }

    /// The engine's time: this host's clock plus the offset measured against PostgreSQL's.
    pub fn engine_ms(&self, id: usize) -> u64 {
        let node = &self.nodes[id];
        (node.wall_ms(self.now) + node.offset_ms) as u64
    }

    pub fn durable(&mut self, id: usize, request: u64) {
        let node = &mut self.nodes[id];
        let epoch = node.requests[&request].epoch;
        let Some(owned) = owned_for(&mut node.owned, &mut node.retired, epoch) else {
            return self.unconfirmed(id, request);
        };
        let state = &node.requests[&request];
        if owned.poisoned {
            return self.unconfirmed(id, request);
        }
        if owned.durable_lsn >= state.tail {
            // The answer leaves only once the epoch is confirmed again.
            self.set_stage(id, request, Stage::Confirm { second: true });
        }
        // Otherwise the flush's answer steps it on.
    }

    /// Starts a flush of every pending record of `epoch`'s log if none is in flight.
    pub fn flush(&mut self, id: usize, epoch: i64) {
        let node = &mut self.nodes[id];
        let Some(owned) = owned_for(&mut node.owned, &mut node.retired, epoch) else {
            return;
        };
        if owned.poisoned {
            return;
        }
        if let (Some(frame), true) = (&owned.flushing, owned.resolving) {
            // A flush of unknown outcome is written again as it was (`ON CONFLICT DO NOTHING`
            // finds it if it landed).
            let frame = frame.clone();
            return self.statement(id, StatementKind::Flush { frame });
        }
        if owned.flushing.is_some() || owned.pending.is_empty() {
            return;
        }
        let frame = Frame {
            epoch: owned.epoch,
            last_lsn: owned.next_lsn,
            records: std::mem::take(&mut owned.pending),
        };
        owned.flushing = Some(frame.clone());
        self.statement(id, StatementKind::Flush { frame });
    }

    pub fn flushed(&mut self, id: usize, epoch: i64, last_lsn: u64, result: Option<FlushResult>) {
        let node = &mut self.nodes[id];
        let Some(owned) = owned_for(&mut node.owned, &mut node.retired, epoch) else {
            return;
        };
        if owned
            .flushing
            .as_ref()
            .is_none_or(|frame| frame.last_lsn != last_lsn)
        {
            return;
        }
        match result {
            Some(FlushResult::Landed | FlushResult::AlreadyThere) => {
                owned.flushing = None;
                owned.resolving = false;
                owned.flush_retry = 50 * MS;
                owned.durable_lsn = last_lsn;
                self.flush(id, epoch);
            }
            Some(FlushResult::Fenced) => {
                owned.flushing = None;
                owned.poisoned = true;
                self.note(|| format!("node {id}: a flush was fenced out; the log is poisoned"));
                self.count("flush fenced out");
            }
            None => {
                // Unknown outcome: refuse new requests, and write the frame again (fenced,
                // finding it if it landed) until PostgreSQL answers.
                owned.resolving = true;
                let retry = owned.flush_retry;
                owned.flush_retry = (retry * 2).min(1_000 * MS);
                self.timer(
                    id,
                    Duration::from_micros(retry),
                    Timer::FlushRetry { epoch },
                );
                return;
            }
        }
        // Wake the requests waiting for durability (or failing with the poisoned log).
        let waiting: Vec<u64> = self.nodes[id]
            .requests
            .iter()
            .filter(|(_, state)| state.stage == Stage::Durable && state.epoch == epoch)
            .map(|(&request, _)| request)
            .collect();
        for request in waiting {
            self.durable(id, request);
        }
    }
}

/// Runs `action` on the engine: the answer, and the attempt a receipt named.
pub fn run(
    engine: &mut Engine,
    now_ms: u64,
    action: &Action,
    journal: &mut Vec<Record>,
) -> (Reply, Option<u32>) {
    let client_error = |error: leaseq_core::Error| Reply::ClientError(format!("{error:?}"));
    match action {
        Action::Send { tag, message_id } => {
            let input = SendInput::body(tag.clone());
            let id = MessageId::from_random(*message_id);
            match engine.send(now_ms, QUEUE, input, id, journal) {
                Ok(_) => (Reply::Ok(ClientReply::Done), None),
                Err(error) => (client_error(error), None),
            }
        }
        Action::Receive {
            max_messages,
            visibility_timeout_seconds,
        } => {
            let request = ReceiveRequest {
                max_messages: *max_messages,
                visibility_timeout_seconds: Some(*visibility_timeout_seconds),
                client: None,
            };
            match engine.receive(now_ms, QUEUE, request, journal) {
                Ok(deliveries) => {
                    let delivered = deliveries
                        .into_iter()
                        .map(|delivery| Delivered {
                            tag: match delivery.payload {
                                PayloadRef::Inline(payload) => payload.body.clone(),
                                PayloadRef::Stored(_) | PayloadRef::Cached(_) => {
                                    unreachable!("nothing is spilled")
                                }
                            },
                            receipt: delivery.receipt,
                            receive_count: delivery.receive_count,
                        })
                        .collect();
                    (Reply::Ok(ClientReply::Received(delivered)), None)
                }
                Err(error) => (client_error(error), None),
            }
        }
        Action::Delete { receipt, attempt } => {
            match engine.delete(now_ms, QUEUE, receipt, journal) {
                Ok(_) => (Reply::Ok(ClientReply::Done), Some(*attempt)),
                Err(error) => (client_error(error), Some(*attempt)),
            }
        }
        Action::ChangeVisibility {
            receipt,
            attempt,
            timeout_seconds,
        } => match engine.change_visibility(now_ms, QUEUE, receipt, *timeout_seconds, journal) {
            Ok(_) => (Reply::Ok(ClientReply::Done), Some(*attempt)),
            Err(error) => (client_error(error), Some(*attempt)),
        },
        Action::Count => match engine.queue_info(now_ms, QUEUE) {
            Ok(_) => (Reply::Ok(ClientReply::Done), None),
            Err(error) => (client_error(error), None),
        },
    }
}

/// An acknowledged answer, in a few words.
pub fn describe(action: &Action, answer: &ClientReply) -> String {
    match (action, answer) {
        (Action::Send { tag, .. }, _) => format!("a send of {tag}"),
        (Action::Receive { .. }, ClientReply::Received(delivered)) if delivered.is_empty() => {
            "an empty receive".into()
        }
        (Action::Receive { .. }, ClientReply::Received(delivered)) => {
            let tags: Vec<&str> = delivered.iter().map(|d| d.tag.as_str()).collect();
            format!("a receive of {}", tags.join(", "))
        }
        (Action::Delete { attempt, .. }, _) => format!("a delete with attempt {attempt}'s receipt"),
        (Action::ChangeVisibility { attempt, .. }, _) => {
            format!("a visibility change with attempt {attempt}'s receipt")
        }
        (Action::Count, _) => "the queue's counts".into(),
        (Action::Receive { .. }, ClientReply::Done) => unreachable!("a receive answers messages"),
    }
}

/// The ownership `epoch` of a node's, current or retired.
pub fn owned_for<'a>(
    owned: &'a mut Option<Owned>,
    retired: &'a mut [Owned],
    epoch: i64,
) -> Option<&'a mut Owned> {
    match owned {
        Some(owned) if owned.epoch == epoch => Some(owned),
        _ => retired.iter_mut().find(|owned| owned.epoch == epoch),
    }
}
