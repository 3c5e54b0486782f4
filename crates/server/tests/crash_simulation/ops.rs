//! The requests the simulation makes, and the receipts its consumers hold.

use leaseq_core::{QueueConfigPatch, ReceiveRequest, SendInput};
use leaseq_sqs::{Action, BatchEntry, QueueRef};

/// A receipt a consumer holds: which attempt of which message it is the authority for.
#[derive(Clone, Debug)]
pub struct Held {
    pub queue: String,
    pub queue_id: u64,
    pub body: String,
    pub receipt: String,
    pub attempt: u32,
    /// How many restarts the backend had gone through when it issued the receipt.
    pub restarts: u32,
}

/// One request, in the simulation's terms.
#[derive(Clone, Debug)]
pub enum Request {
    CreateQueue {
        name: &'static str,
        patch: QueueConfigPatch,
    },
    DeleteQueue {
        name: &'static str,
    },
    SetAttributes {
        name: &'static str,
        patch: QueueConfigPatch,
    },
    Purge {
        name: &'static str,
    },
    /// One `SendMessage` (one message) or a `SendMessageBatch`: (body, per-message delay).
    Send {
        name: &'static str,
        messages: Vec<(String, Option<u32>)>,
    },
    Receive {
        name: &'static str,
        max_messages: usize,
        visibility_seconds: Option<u32>,
    },
    /// One `DeleteMessage` (one receipt) or a `DeleteMessageBatch` (receipts of one queue).
    Delete {
        batch: bool,
        held: Vec<Held>,
    },
    ChangeVisibility {
        held: Held,
        seconds: u32,
    },
}

fn queue(name: &str) -> QueueRef {
    QueueRef::new(name)
}

fn send_input(body: &str, delay_seconds: Option<u32>) -> SendInput {
    SendInput {
        delay_seconds,
        ..SendInput::body(body)
    }
}

impl Request {
    /// The decoded SQS action a client would have sent.
    pub fn action(&self) -> Action {
        match self {
            Request::CreateQueue { name, patch } => Action::CreateQueue {
                name: name.to_string(),
                attributes: patch.clone(),
                tags: Default::default(),
            },
            Request::DeleteQueue { name } => Action::DeleteQueue { queue: queue(name) },
            Request::SetAttributes { name, patch } => Action::SetQueueAttributes {
                queue: queue(name),
                attributes: patch.clone(),
            },
            Request::Purge { name } => Action::PurgeQueue { queue: queue(name) },
            Request::Send { name, messages } if messages.len() == 1 => Action::SendMessage {
                queue: queue(name),
                message: send_input(&messages[0].0, messages[0].1),
            },
            Request::Send { name, messages } => Action::SendMessageBatch {
                queue: queue(name),
                entries: messages
                    .iter()
                    .enumerate()
                    .map(|(i, (body, delay))| BatchEntry {
                        id: format!("e{i}"),
                        value: send_input(body, *delay),
                    })
                    .collect(),
            },
            Request::Receive {
                name,
                max_messages,
                visibility_seconds,
            } => Action::ReceiveMessage {
                queue: queue(name),
                request: ReceiveRequest {
                    max_messages: *max_messages,
                    visibility_timeout_seconds: *visibility_seconds,
                    client: None,
                },
                wait_time_seconds: Some(0),
                receive_request_attempt_id: None,
            },
            Request::Delete { batch: false, held } => Action::DeleteMessage {
                queue: queue(&held[0].queue),
                receipt: held[0].receipt.clone(),
            },
            Request::Delete { batch: true, held } => Action::DeleteMessageBatch {
                queue: queue(&held[0].queue),
                entries: held
                    .iter()
                    .enumerate()
                    .map(|(i, h)| BatchEntry {
                        id: format!("e{i}"),
                        value: h.receipt.clone(),
                    })
                    .collect(),
            },
            Request::ChangeVisibility { held, seconds } => Action::ChangeMessageVisibility {
                queue: queue(&held.queue),
                receipt: held.receipt.clone(),
                visibility_timeout_seconds: *seconds,
            },
        }
    }

    /// A short line for the trace.
    pub fn describe(&self) -> String {
        let held = |h: &Held| format!("{}#{}", h.body, h.attempt);
        match self {
            Request::CreateQueue { name, patch } => format!("create {name} {}", brief(patch)),
            Request::DeleteQueue { name } => format!("delete queue {name}"),
            Request::SetAttributes { name, patch } => format!("set {name} {}", brief(patch)),
            Request::Purge { name } => format!("purge {name}"),
            Request::Send { name, messages } => format!("send {name} {messages:?}"),
            Request::Receive {
                name,
                max_messages,
                visibility_seconds,
            } => format!("receive {name} max={max_messages} vt={visibility_seconds:?}"),
            Request::Delete { batch, held: h } => {
                let list: Vec<String> = h.iter().map(held).collect();
                format!(
                    "delete{} {}",
                    if *batch { " batch" } else { "" },
                    list.join(" ")
                )
            }
            Request::ChangeVisibility { held: h, seconds } => {
                format!("visibility {} {seconds}s", held(h))
            }
        }
    }
}

/// The settings a patch changes, briefly.
fn brief(patch: &QueueConfigPatch) -> String {
    let mut parts = Vec::new();
    if let Some(v) = patch.visibility_timeout_seconds {
        parts.push(format!("vt={v}"));
    }
    if let Some(v) = patch.retention_seconds {
        parts.push(format!("retention={v}"));
    }
    if let Some(v) = patch.delay_seconds {
        parts.push(format!("delay={v}"));
    }
    match &patch.redrive_policy {
        Some(Some(p)) => parts.push(format!(
            "redrive={}/{}",
            p.dead_letter_queue, p.max_receive_count
        )),
        Some(None) => parts.push("redrive=none".into()),
        None => {}
    }
    parts.join(" ")
}
