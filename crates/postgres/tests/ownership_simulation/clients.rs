//! The clients: each runs one operation at a time against a random node (sends, receives with
//! short visibility timeouts, deletes and visibility changes with receipts it holds, some of
//! them stale by then) and records it in a history for `leaseq_testkit::history`, with its
//! invocation and completion on the global clock and an outcome: acknowledged, refused with no
//! effect (a client error, a refused connection), or unknown (`ServiceUnavailable`, a broken
//! connection, a timeout).

use leaseq_testkit::history::{self, Op, Outcome};
use rand::Rng;

use super::node::{NodeInput, Origin, ANY, QUEUE};
use super::world::{Event, World, MS};

/// What a client asks a node.
#[derive(Clone, Debug)]
pub enum Action {
    Send {
        tag: String,
        message_id: [u8; 16],
    },
    Receive {
        max_messages: usize,
        visibility_timeout_seconds: u32,
    },
    Delete {
        receipt: String,
        /// The attempt the receipt belongs to (the model's bookkeeping).
        attempt: u32,
    },
    ChangeVisibility {
        receipt: String,
        attempt: u32,
        timeout_seconds: u32,
    },
    /// `GetQueueAttributes`' counts: a pure read (not in the history, which has no such
    /// operation; its answer is checked as it leaves the owner).
    Count,
}

/// What a node answers.
#[derive(Clone, Debug)]
pub enum Reply {
    Ok(ClientReply),
    /// A 4xx: the request had no effect.
    ClientError(String),
    /// `ServiceUnavailable`: it may or may not have taken effect.
    Unavailable(String),
    /// To a forwarding node only: not the owner, nothing done.
    NotServing,
}

#[derive(Clone, Debug)]
pub enum ClientReply {
    Done,
    Received(Vec<Delivered>),
}

#[derive(Clone, Debug)]
pub struct Delivered {
    pub tag: String,
    pub receipt: String,
    pub receive_count: u32,
}

pub enum ClientInput {
    Next,
    Reply { op: usize, reply: Reply },
    Refused { op: usize },
    Broken { op: usize },
    Timeout { op: usize },
}

/// The first id of an operation the history does not record.
const UNRECORDED: usize = 1 << 40;
/// How long a client waits for an answer before it counts the outcome unknown.
const CLIENT_TIMEOUT: u64 = 10_000 * MS;
/// Receipts a client keeps for later deletes and visibility changes.
const HELD_MAX: usize = 8;

#[derive(Default)]
pub struct Client {
    /// The history event of the operation in flight.
    pub pending: Option<usize>,
    /// Receipts it holds, with their attempts.
    pub held: Vec<(String, u32)>,
}

pub struct Clients {
    pub events: Vec<history::Event>,
    /// Ids of the operations that are not in the history (counts), above every event's.
    pub next_unrecorded: usize,
    pub clients: Vec<Client>,
    pub operations_left: usize,
    pub next_tag: u64,
}

impl Clients {
    pub fn new(clients: usize, operations: usize) -> Clients {
        Clients {
            events: Vec::new(),
            next_unrecorded: UNRECORDED,
            clients: (0..clients).map(|_| Client::default()).collect(),
            operations_left: operations,
            next_tag: 0,
        }
    }

    pub fn idle(&self) -> bool {
        self.clients.iter().all(|client| client.pending.is_none())
    }

    pub fn count(&self) -> usize {
        self.clients.len()
    }
}

impl World {
    pub fn at_client(&mut self, client: usize, input: ClientInput) {
        let (op, outcome) = match input {
            ClientInput::Next => return self.invoke(client),
            ClientInput::Reply { op, reply } => (op, reply),
            ClientInput::Refused { op } => (op, Reply::ClientError("connection refused".into())),
            ClientInput::Broken { op } => (op, Reply::Unavailable("connection broken".into())),
            ClientInput::Timeout { op } => (op, Reply::Unavailable("timed out".into())),
        };
        if self.clients.clients[client].pending != Some(op) {
            return;
        }
        self.complete(client, op, outcome);
        if self.clients.operations_left > 0 {
            let think = self.rng.random_range(0..30 * MS);
            self.after(
                think,
                Event::AtClient {
                    client,
                    input: ClientInput::Next,
                },
            );
        }
    }

    pub fn invoke(&mut self, client: usize) {
        if self.clients.operations_left == 0 {
            return;
        }
        self.clients.operations_left -= 1;
        let held = &mut self.clients.clients[client].held;
        let roll = self.rng.random_range(0..100);
        // Few sends, so that the queue is often empty: receives and deletes that answer
        // without a record (an empty receive, a delete of a message already gone) are the
        // answers only a confirmation protects.
        let (action, op) = if roll >= 90 {
            self.clients.next_unrecorded += 1;
            let id = self.clients.next_unrecorded;
            return self.client_request(client, id, Action::Count);
        } else if roll < 30 && !held.is_empty() {
            let (receipt, attempt) = held.swap_remove(self.rng.random_range(0..held.len()));
            let op = Op::Delete {
                queue: QUEUE.into(),
                receipt: receipt.clone(),
            };
            (Action::Delete { receipt, attempt }, op)
        } else if roll < 40 && !held.is_empty() {
            let (receipt, attempt) = held.swap_remove(self.rng.random_range(0..held.len()));
            let timeout_seconds = self.rng.random_range(0..4);
            let op = Op::ChangeVisibility {
                queue: QUEUE.into(),
                receipt: receipt.clone(),
                timeout_ms: u64::from(timeout_seconds) * 1_000,
            };
            let action = Action::ChangeVisibility {
                receipt,
                attempt,
                timeout_seconds,
            };
            (action, op)
        } else if roll < 65 {
            self.clients.next_tag += 1;
            let tag = format!("m{}", self.clients.next_tag);
            let op = Op::Send {
                queue: QUEUE.into(),
                tag: tag.clone(),
                group: None,
                deduplication: None,
            };
            let message_id = self.rng.random();
            (Action::Send { tag, message_id }, op)
        } else {
            // Receives (also the 10 % of the rolls below 40 that found no receipt to use).
            let visibility_timeout_seconds = self.rng.random_range(1..5);
            let op = Op::Receive {
                queue: QUEUE.into(),
                visibility_timeout_ms: Some(u64::from(visibility_timeout_seconds) * 1_000),
            };
            let action = Action::Receive {
                max_messages: self.rng.random_range(1..4),
                visibility_timeout_seconds,
            };
            (action, op)
        };
        let id = self.clients.events.len();
        self.clients.events.push(history::Event {
            id,
            process: client as u32,
            invoke_us: self.now,
            complete_us: None,
            op,
            outcome: Outcome::Pending,
        });
        self.client_request(client, id, action);
    }

    pub fn client_request(&mut self, client: usize, id: usize, action: Action) {
        self.clients.clients[client].pending = Some(id);
        let node = self.rng.random_range(0..self.nodes.len());
        self.send(
            (4 << 50 | (client as u64) << 8 | node as u64, 0),
            Event::AtNode {
                node,
                incarnation: ANY,
                input: NodeInput::Request {
                    origin: Origin::Client { client, op: id },
                    action,
                },
            },
        );
        self.after(
            CLIENT_TIMEOUT,
            Event::AtClient {
                client,
                input: ClientInput::Timeout { op: id },
            },
        );
    }

    pub fn complete(&mut self, client: usize, op: usize, reply: Reply) {
        self.clients.clients[client].pending = None;
        if op >= UNRECORDED {
            return;
        }
        let outcome = match reply {
            Reply::Ok(ClientReply::Done) => Outcome::Ok(history::Reply::Done),
            Reply::Ok(ClientReply::Received(delivered)) => {
                let held = &mut self.clients.clients[client].held;
                for delivery in &delivered {
                    if held.len() < HELD_MAX {
                        held.push((delivery.receipt.clone(), delivery.receive_count));
                    }
                }
                let deliveries = delivered
                    .into_iter()
                    .map(|delivery| history::Delivery {
                        tag: delivery.tag,
                        receipt: delivery.receipt,
                        receive_count: delivery.receive_count,
                        group: None,
                    })
                    .collect();
                Outcome::Ok(history::Reply::Received(deliveries))
            }
            Reply::ClientError(why) => Outcome::Failed(why),
            Reply::Unavailable(why) => Outcome::Unknown(why),
            Reply::NotServing => unreachable!("only forwards are refused"),
        };
        self.count(match &outcome {
            Outcome::Ok(_) => "client: acknowledged",
            Outcome::Failed(_) => "client: refused",
            _ => "client: unknown",
        });
        let event = &mut self.clients.events[op];
        event.complete_us = Some(self.now);
        event.outcome = outcome;
        let line = format!("client {client}: {event}");
        self.note(|| line);
    }
}
