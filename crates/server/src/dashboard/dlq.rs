//! The dashboard's dead-letter actions: peek at a queue's messages without leasing them, and
//! start, watch and cancel a redrive (a message move task that sends a dead-letter queue's
//! messages back to the queues they came from).
//!
//! The routes live under `/api/queues/{name}/` and answer in the dashboard's own JSON (queue
//! names rather than ARNs, task ids rather than task handles). Each one executes the same
//! [`Action`] the SQS API would (`LeaseqPeekMessages`, `StartMessageMoveTask`,
//! `ListMessageMoveTasks`, `CancelMessageMoveTask`) through the service, so the dashboard and
//! the API cannot disagree on what a peek or a redrive does.
//!
//! Cross-site requests: the POST routes change state and the server holds no session a browser
//! could be made to spend, but a page of another site can still make a visitor's browser send
//! a plain form POST to a server on their machine. A form can only send `text/plain`,
//! `application/x-www-form-urlencoded` or `multipart/form-data`; a cross-site request with
//! `Content-Type: application/json` needs a CORS preflight, which this server never approves.
//! So every POST route here refuses a body that is not `application/json` (status 415).

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::rejection::{PathRejection, QueryRejection};
use axum::extract::{Path, Query, State};
use axum::http::header::CONTENT_TYPE;
use axum::http::HeaderMap;
use axum::response::Response;
use leaseq_core::engine::MoveTaskInfo;
use leaseq_sqs::decode::{LIST_MOVE_TASKS_MAX, PEEK_MESSAGES_MAX};
use leaseq_sqs::{Action, ErrorCode, Outcome, PeekedEntry, QueueRef, TaskHandle};
use serde_json::{json, Value};

use super::api::{execute, execute_raw, reply, state_name, ApiError};
use super::Observed;
use crate::service::Api;

/// Messages a peek shows when the request names no `max`.
const PEEK_SHOWN_DEFAULT: usize = 10;

/// Bytes of each body a peek returns: the page shows the start of a body, not all of it.
const BODY_SHOWN_BYTES_MAX: usize = 1024;

/// Executes a move-task action on source queue `name`. Those actions name their queue by ARN,
/// as SQS's do, and say `ResourceNotFound` when no queue has it (SQS's word for a missing
/// `SourceArn`): here that is the missing queue of the path.
async fn execute_on_source(
    service: &impl Api,
    action: Action,
    name: &str,
) -> Result<Outcome, ApiError> {
    execute_raw(service, action)
        .await
        .map_err(|error| match error.code {
            ErrorCode::ResourceNotFound => ApiError::no_queue(name),
            _ => ApiError::from_service(error, name),
        })
}

/// An integer query parameter in `range`, or `default` when absent.
fn integer_parameter(
    query: &[(String, String)],
    key: &str,
    range: std::ops::RangeInclusive<u64>,
    default: u64,
) -> Result<u64, ApiError> {
    let Some((_, value)) = query.iter().find(|(k, _)| k == key) else {
        return Ok(default);
    };
    match value.parse::<u64>() {
        Ok(n) if range.contains(&n) => Ok(n),
        _ => Err(ApiError::bad_request(format!(
            "{key} must be a whole number from {} to {} (it is {value:?}).",
            range.start(),
            range.end()
        ))),
    }
}

/// `GET /api/queues/{name}/peek?max=10&after=0`: up to `max` (1-100) messages of the queue in
/// sequence order, after sequence number `after`, without leasing them or changing any count.
pub(super) async fn peek<O: Observed>(
    State(service): State<Arc<O>>,
    path: Result<Path<String>, PathRejection>,
    query: Result<Query<Vec<(String, String)>>, QueryRejection>,
) -> Result<Response, ApiError> {
    let Path(name) = path.map_err(|rejection| ApiError::bad_request(rejection.body_text()))?;
    let Query(query) = query.map_err(|rejection| ApiError::bad_request(rejection.body_text()))?;
    let max_messages = integer_parameter(
        &query,
        "max",
        1..=PEEK_MESSAGES_MAX as u64,
        PEEK_SHOWN_DEFAULT as u64,
    )?;
    let after_seq = integer_parameter(&query, "after", 0..=u64::MAX, 0)?;
    let action = Action::LeaseqPeekMessages {
        queue: QueueRef::new(name.clone()),
        after_seq,
        max_messages: max_messages as usize,
    };
    let Outcome::Peeked { messages, .. } = execute(&*service, action, &name).await? else {
        unreachable!("a peek answers with Outcome::Peeked");
    };
    // The next page starts after the last message shown, if this page was full.
    let next_after = messages
        .last()
        .filter(|_| messages.len() as u64 == max_messages)
        .map(|last| last.seq);
    let messages: Vec<Value> = messages.iter().map(peeked_message).collect();
    Ok(reply(json!({
        "queue": name,
        "messages": messages,
        "next_after": next_after,
    })))
}

fn peeked_message(entry: &PeekedEntry) -> Value {
    let message = &entry.message;
    let body = &entry.payload.body;
    let shown = &body[..floor_char_boundary(body, BODY_SHOWN_BYTES_MAX)];
    json!({
        "message_id": message.id.to_string(),
        "sequence": entry.seq,
        "state": state_name(message.state),
        "sent_at_ms": message.sent_at_ms,
        "receive_count": message.receive_count,
        // While delayed (a delay or a redelivery backoff) or in flight: when it is visible.
        "visible_at_ms": (message.state != leaseq_core::MessageState::Ready)
            .then_some(message.visible_at_ms),
        "redrive_generation": message.redrive_generation,
        "source_queue": message.dead_letter_source.as_deref(),
        "failure_reason": entry.failure_reason.as_deref(),
        "body": shown,
        "body_bytes": body.len(),
        "body_truncated": shown.len() < body.len(),
    })
}

/// The largest index at most `index` that starts a character of `text`.
fn floor_char_boundary(text: &str, index: usize) -> usize {
    if index >= text.len() {
        return text.len();
    }
    // A UTF-8 character is at most 4 bytes, so a boundary is at most 3 bytes back.
    (index.saturating_sub(3)..=index)
        .rev()
        .find(|&i| text.is_char_boundary(i))
        .unwrap_or(0)
}

/// The tasks of source queue `name`, most recent first.
async fn tasks(service: &impl Api, name: &str) -> Result<Vec<MoveTaskInfo>, ApiError> {
    let action = Action::ListMessageMoveTasks {
        source: name.to_string(),
        max_results: LIST_MOVE_TASKS_MAX as usize,
    };
    let Outcome::MoveTasks(tasks) = execute_on_source(service, action, name).await? else {
        unreachable!("ListMessageMoveTasks answers with Outcome::MoveTasks");
    };
    Ok(tasks)
}

fn task_json(info: &MoveTaskInfo) -> Value {
    let task = &info.task;
    json!({
        "task_id": task.task_id,
        "status": leaseq_sqs::moves::status_name(task.status),
        "active": task.status.is_active(),
        // `null`: each message goes back to the queue it was dead-lettered from.
        "destination": info.destination.as_deref(),
        // `null`: automatic (the server's fastest).
        "rate_per_second": task.rate_per_second,
        "limit": task.limit,
        "moved": task.moved,
        "to_move": task.to_move,
        "held_back": task.held_back,
        "started_at_ms": task.started_at_ms,
        "failure_reason": task.failure_reason,
    })
}

/// `GET /api/queues/{name}/redrives`: the queue's recent move tasks (at most 10), most recent
/// first.
pub(super) async fn list<O: Observed>(
    State(service): State<Arc<O>>,
    path: Result<Path<String>, PathRejection>,
) -> Result<Response, ApiError> {
    let Path(name) = path.map_err(|rejection| ApiError::bad_request(rejection.body_text()))?;
    let tasks = tasks(&*service, &name).await?;
    let tasks: Vec<Value> = tasks.iter().map(task_json).collect();
    Ok(reply(json!({ "queue": name, "tasks": tasks })))
}

/// The JSON object of a POST body; a body that is not `application/json` is refused (see the
/// module's note on cross-site requests), and an empty one is `{}`.
fn json_object(
    headers: &HeaderMap,
    body: &Bytes,
) -> Result<serde_json::Map<String, Value>, ApiError> {
    let content_type = headers
        .get(CONTENT_TYPE)
        .and_then(|value| value.to_str().ok())
        .unwrap_or("");
    let essence = content_type.split(';').next().unwrap_or("").trim();
    if !essence.eq_ignore_ascii_case("application/json") {
        return Err(ApiError::unsupported_media_type(format!(
            "This route takes Content-Type: application/json (the request has {content_type:?})."
        )));
    }
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(serde_json::Map::new());
    }
    match serde_json::from_slice::<Value>(body) {
        Ok(Value::Object(object)) => Ok(object),
        Ok(_) => Err(ApiError::bad_request("The body must be a JSON object.")),
        Err(error) => Err(ApiError::bad_request(format!(
            "The body is not valid JSON: {error}."
        ))),
    }
}

/// `POST /api/queues/{name}/redrives` with `{"rate_per_second": 1-500 | null}`: starts moving
/// the dead-letter queue's messages back to the queues they came from, at that rate (automatic
/// without one). Answers `{"task": ...}`.
pub(super) async fn start<O: Observed>(
    State(service): State<Arc<O>>,
    path: Result<Path<String>, PathRejection>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Response, ApiError> {
    let Path(name) = path.map_err(|rejection| ApiError::bad_request(rejection.body_text()))?;
    let request = json_object(&headers, &body)?;
    let rate_per_second = match request.get("rate_per_second") {
        None | Some(Value::Null) => None,
        Some(rate) => match rate.as_u64() {
            Some(rate @ 1..=500) => Some(rate as u32),
            _ => {
                return Err(ApiError::bad_request(format!(
                    "rate_per_second must be a whole number from 1 to 500, or null for automatic (it is {rate})."
                )))
            }
        },
    };
    if let Some(key) = request.keys().find(|key| *key != "rate_per_second") {
        return Err(ApiError::bad_request(format!(
            "Unknown member {key:?}: the body takes only rate_per_second."
        )));
    }
    let action = Action::StartMessageMoveTask {
        source: name.clone(),
        destination: None,
        rate_per_second,
        limit: None,
    };
    let Outcome::MoveTaskStarted { task_id, .. } =
        execute_on_source(&*service, action, &name).await?
    else {
        unreachable!("StartMessageMoveTask answers with Outcome::MoveTaskStarted");
    };
    task_reply(&*service, &name, task_id).await
}

/// `POST /api/queues/{name}/redrives/{task_id}/cancel` with an `application/json` body (`{}`):
/// cancels the task (the messages it moved stay moved). Answers `{"task": ...}`.
pub(super) async fn cancel<O: Observed>(
    State(service): State<Arc<O>>,
    path: Result<Path<(String, String)>, PathRejection>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Response, ApiError> {
    let Path((name, task_id)) =
        path.map_err(|rejection| ApiError::bad_request(rejection.body_text()))?;
    json_object(&headers, &body)?;
    let task_id: u64 = task_id
        .parse()
        .map_err(|_| ApiError::bad_request(format!("{task_id:?} is not a task id.")))?;
    // The task must be one of this queue's (the SQS action checks that too, but its refusal
    // would read as a missing queue here).
    let known = tasks(&*service, &name)
        .await?
        .iter()
        .any(|info| info.task.task_id == task_id);
    if !known {
        return Err(ApiError::not_found(format!(
            "Queue {name} has no move task {task_id}."
        )));
    }
    let task = TaskHandle {
        task_id: Some(task_id),
        source: name.clone(),
    };
    execute_on_source(&*service, Action::CancelMessageMoveTask { task }, &name).await?;
    task_reply(&*service, &name, task_id).await
}

async fn task_reply(service: &impl Api, name: &str, task_id: u64) -> Result<Response, ApiError> {
    let tasks = tasks(service, name).await?;
    let info = tasks
        .iter()
        .find(|info| info.task.task_id == task_id)
        .ok_or_else(|| ApiError::not_found(format!("Queue {name} has no move task {task_id}.")))?;
    Ok(reply(json!({ "task": task_json(info) })))
}
