//! The standby's half of a node, and the HTTP layer's routing: a standby reads the serving
//! owner every `OWNER_POLL`, forwards each client request to it, avoids an owner that refused
//! under the same epoch for `REFUSAL_HOLD`, and answers `ServiceUnavailable` when no owner
//! takes the request in `ROUTE_WAIT` or after `ATTEMPTS_MAX` refusals
//! (`leaseq_server::http::forward`).

use std::time::Duration;

use leaseq_postgres::cluster as protocol;
use leaseq_server::http::forward::ROUTE_WAIT;

use super::clients::{Action, ClientInput, Reply};
use super::node::{Forward, NodeInput, Origin, Timer, ANY};
use super::world::{us, Event, World};

/// `forward.rs`' private `ROUTE_POLL` and `ATTEMPTS_MAX`.
const ROUTE_POLL: Duration = Duration::from_millis(25);
const ATTEMPTS_MAX: usize = 4;

impl World {
    /// A client's request reached a node that does not own the log: forward it.
    pub fn forward(&mut self, id: usize, origin: Origin, action: Action) {
        let node = &mut self.nodes[id];
        node.next_forward += 1;
        let forward = node.next_forward;
        let since_local = node.local(self.now);
        node.forwards.insert(
            forward,
            Forward {
                origin,
                action,
                since_local,
                attempts: 0,
                at: None,
            },
        );
        self.route(id, forward);
    }

    /// Sends a waiting forward where the route says, or waits for a route.
    pub fn route(&mut self, id: usize, forward: u64) {
        let local_now = self.nodes[id].local(self.now);
        let node = &mut self.nodes[id];
        let Some(state) = node.forwards.get_mut(&forward) else {
            return;
        };
        if state.at.is_some() {
            return;
        }
        if node.owned.is_some() {
            // This node serves now: the request runs here.
            let state = node.forwards.remove(&forward).expect("forward");
            return self.request(id, state.origin, state.action);
        }
        match node.known_owner {
            Some((owner, epoch)) => {
                state.attempts += 1;
                state.at = Some((owner, epoch));
                let origin = Origin::Forward {
                    node: id,
                    incarnation: node.incarnation,
                    forward,
                };
                let action = state.action.clone();
                self.count("forward");
                self.send(
                    (1 << 50 | (id as u64) << 8 | owner as u64, 0),
                    Event::AtNode {
                        node: owner,
                        incarnation: ANY,
                        input: NodeInput::Request { origin, action },
                    },
                );
            }
            None => {
                if local_now - state.since_local >= us(ROUTE_WAIT) {
                    let state = node.forwards.remove(&forward).expect("forward");
                    let reply = Reply::Unavailable("no owner of the log is known".into());
                    return self.reply(id, state.origin, reply);
                }
                self.timer(id, ROUTE_POLL, Timer::Route { forward });
            }
        }
    }

    /// The owner's answer to a forward (`None`: refused without acting, or not reachable).
    pub fn forwarded(&mut self, id: usize, forward: u64, reply: Option<Reply>) {
        let local_now = self.nodes[id].local(self.now);
        let node = &mut self.nodes[id];
        let Some(state) = node.forwards.get_mut(&forward) else {
            return;
        };
        let Some(reply) = reply else {
            // `peer_refused`: not routed to that owner again under that epoch for a while.
            let refused = state.at.take().expect("sent");
            if node.known_owner.is_some_and(|known| known.0 == refused.0) {
                node.refused = Some((refused.0, refused.1, local_now));
                node.known_owner = None;
            }
            if state.attempts >= ATTEMPTS_MAX {
                let state = node.forwards.remove(&forward).expect("forward");
                let reply = Reply::Unavailable("no node took the request".into());
                return self.reply(id, state.origin, reply);
            }
            self.look_again(id);
            return self.route(id, forward);
        };
        let state = node.forwards.remove(&forward).expect("forward");
        self.reply(id, state.origin, reply);
    }

    /// Reads the owner now (the watch's `look_again`).
    pub fn look_again(&mut self, id: usize) {
        self.statement(id, super::postgres::StatementKind::ReadOwner);
    }

    /// `see_owner`: the serving owner PostgreSQL records, unless it is this node or one that
    /// refused under the same epoch within `REFUSAL_HOLD`.
    pub fn see_owner(&mut self, id: usize, row: Option<(usize, i64)>) {
        let local_now = self.nodes[id].local(self.now);
        let node = &mut self.nodes[id];
        let row = row.filter(|&(owner, _)| owner != id);
        let row = match (row, node.refused) {
            (Some((owner, epoch)), Some((refused, refused_epoch, at)))
                if owner == refused
                    && epoch == refused_epoch
                    && protocol::refusal_holds(Duration::from_micros(local_now - at)) =>
            {
                None
            }
            _ => {
                node.refused = None;
                row
            }
        };
        if node.owned.is_none() {
            node.known_owner = row;
        }
    }

    /// Sends `reply` to where the request came from.
    pub fn reply(&mut self, id: usize, origin: Origin, reply: Reply) {
        match origin {
            Origin::Client { client, op } => self.send(
                (2 << 50 | (id as u64) << 8 | client as u64, 0),
                Event::AtClient {
                    client,
                    input: ClientInput::Reply { op, reply },
                },
            ),
            Origin::Forward {
                node,
                incarnation,
                forward,
            } => {
                let reply = match reply {
                    Reply::NotServing => None,
                    reply => Some(reply),
                };
                self.send(
                    (3 << 50 | (id as u64) << 8 | node as u64, 0),
                    Event::AtNode {
                        node,
                        incarnation,
                        input: NodeInput::Forwarded { forward, reply },
                    },
                )
            }
        }
    }

    /// The request reached a node that is down: connection refused, nothing done.
    pub fn refused(&mut self, origin: Origin) {
        let hop = self.hop();
        match origin {
            Origin::Client { client, op } => self.after(
                hop,
                Event::AtClient {
                    client,
                    input: ClientInput::Refused { op },
                },
            ),
            Origin::Forward {
                node,
                incarnation,
                forward,
            } => self.after(
                hop,
                Event::AtNode {
                    node,
                    incarnation,
                    input: NodeInput::Forwarded {
                        forward,
                        reply: None,
                    },
                },
            ),
        }
    }

    /// The connection of a request broke after it was sent (its node crashed).
    pub fn broken(&mut self, origin: Origin) {
        let hop = self.hop();
        match origin {
            Origin::Client { client, op } => self.after(
                hop,
                Event::AtClient {
                    client,
                    input: ClientInput::Broken { op },
                },
            ),
            Origin::Forward {
                node,
                incarnation,
                forward,
            } => self.after(
                hop,
                Event::AtNode {
                    node,
                    incarnation,
                    input: NodeInput::ForwardBroken { forward },
                },
            ),
        }
    }
}
