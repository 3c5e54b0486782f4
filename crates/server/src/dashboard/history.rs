//! The dashboard's view of one message's attempt history: every receive of it the server kept
//! (when, until when its lease ran, how often it was extended, how it ended, and which client
//! held it), with where the message is now.
//!
//! `GET /api/queues/{name}/messages/{message_id}/history` executes the SQS-extension action
//! `LeaseqGetMessageHistory` through the service, as `leaseq message history` does, and answers
//! in the dashboard's JSON: queue names rather than ARNs, milliseconds since the Unix epoch,
//! `null` for what is not known.

use std::sync::Arc;

use axum::extract::rejection::PathRejection;
use axum::extract::{Path, State};
use axum::response::Response;
use leaseq_core::engine::MessageHistory;
use leaseq_core::{Attempt, MessageId};
use leaseq_sqs::{Action, Outcome, QueueRef};
use serde_json::{json, Value};

use super::api::{execute, reply, state_name, ApiError};
use super::Observed;

/// `GET /api/queues/{name}/messages/{message_id}/history`: the message and its attempts,
/// oldest first. Found while it lives (in its queue or a dead-letter queue) and for a while
/// after it was deleted; a malformed id is a 400, a missing queue or message a 404.
pub(super) async fn history<O: Observed>(
    State(service): State<Arc<O>>,
    path: Result<Path<(String, String)>, PathRejection>,
) -> Result<Response, ApiError> {
    let Path((name, id)) =
        path.map_err(|rejection| ApiError::bad_request(rejection.body_text()))?;
    let message_id: MessageId = id
        .parse()
        .map_err(|_| ApiError::bad_request(format!("{id:?} is not a message id (a UUID).")))?;
    let action = Action::LeaseqGetMessageHistory {
        queue: QueueRef::new(name.clone()),
        message_id,
    };
    let Outcome::MessageHistory(history) = execute(&*service, action, &name).await? else {
        unreachable!("LeaseqGetMessageHistory answers with Outcome::MessageHistory");
    };
    Ok(reply(history_json(&name, &history)))
}

fn history_json(name: &str, history: &MessageHistory) -> Value {
    let attempts: Vec<Value> = history
        .attempts
        .iter()
        .map(|(number, attempt)| attempt_json(*number, attempt))
        .collect();
    json!({
        "queue": name,
        "message_id": history.message_id.to_string(),
        "sequence": history.seq,
        "state": history.state.map_or("deleted", state_name),
        "sent_at_ms": history.sent_at_ms,
        "receive_count": history.receive_count,
        "first_received_at_ms": history.first_received_at_ms,
        // The engine keeps the source by name; the SQS answer makes an ARN of it.
        "source_queue": history.dead_letter_source.as_deref(),
        "dead_lettered_at_ms": history.dead_lettered_at_ms,
        "failure_reason": history.failure_reason.as_deref(),
        "deleted_at_ms": history.deleted_at_ms,
        // While delayed (a delay or a redelivery backoff) or in flight: when it is visible.
        "visible_at_ms": history.visible_at_ms,
        "attempts": attempts,
    })
}

fn attempt_json(number: u32, attempt: &Attempt) -> Value {
    // The engine records an unknown address or user agent as empty.
    let known = |text: &str| (!text.is_empty()).then(|| text.to_string());
    let client = attempt.client.as_deref();
    json!({
        "attempt": number,
        "received_at_ms": attempt.received_at_ms,
        "first_deadline_ms": attempt.first_deadline_ms,
        "deadline_ms": attempt.deadline_ms,
        "extensions": attempt.extensions,
        "outcome": attempt.outcome.as_str(),
        // 0 while the lease is current.
        "ended_at_ms": (attempt.ended_at_ms > 0).then_some(attempt.ended_at_ms),
        "client_address": client.and_then(|client| known(&client.address)),
        "user_agent": client.and_then(|client| known(&client.user_agent)),
    })
}
