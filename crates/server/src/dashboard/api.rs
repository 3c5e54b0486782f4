//! What the dashboard's JSON routes share: a JSON reply, the error answer
//! (`{"error": {"code", "message"}}` with a status), the execution of an SQS [`Action`]
//! through the service, whose refusals it turns into that answer, and the names of message
//! states.
//!
//! The routes name their resources by path (`/api/queues/{name}/...`), so a missing queue or
//! message is a 404 here even where SQS answers 400, and the sentence names the queue or
//! message rather than the `QueueUrl` or `SourceArn` parameter the SQS action would have had.

use axum::http::header::{CACHE_CONTROL, CONTENT_TYPE};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use leaseq_core::MessageState;
use leaseq_sqs::{Action, ErrorCode, Outcome, SqsError};
use serde_json::{json, Value};

use crate::service::{Api, Caller};

/// An answer other than success: a status and `{"error": {"code", "message"}}`, whose code is
/// an SQS error code (as the JSON protocol's `__type` names it), so a dashboard client reads the
/// same codes an SDK does.
#[derive(Debug)]
pub(super) struct ApiError {
    status: StatusCode,
    code: ErrorCode,
    message: String,
}

impl ApiError {
    pub(super) fn bad_request(message: impl Into<String>) -> ApiError {
        ApiError {
            status: StatusCode::BAD_REQUEST,
            code: ErrorCode::InvalidParameterValue,
            message: message.into(),
        }
    }

    /// A missing message or move task (the route's path names it).
    pub(super) fn not_found(message: impl Into<String>) -> ApiError {
        ApiError {
            status: StatusCode::NOT_FOUND,
            code: ErrorCode::ResourceNotFound,
            message: message.into(),
        }
    }

    /// A missing queue: 404, since the path names it, with SQS's code.
    pub(super) fn no_queue(name: &str) -> ApiError {
        ApiError {
            status: StatusCode::NOT_FOUND,
            code: ErrorCode::QueueDoesNotExist,
            message: format!("There is no queue named {name}."),
        }
    }

    /// A POST whose body is not JSON (which a cross-site form could send).
    pub(super) fn unsupported_media_type(message: impl Into<String>) -> ApiError {
        ApiError {
            status: StatusCode::UNSUPPORTED_MEDIA_TYPE,
            code: ErrorCode::UnsupportedOperation,
            message: message.into(),
        }
    }

    /// The service's refusal of an action on queue `name`. A missing queue is a 404 with a
    /// sentence that names it. Another missing resource (`ResourceNotFound`: a message, a
    /// task) is a 404 with the service's own sentence, which names what is missing; a route
    /// whose action says `ResourceNotFound` of its queue maps that first (see
    /// `dlq::execute_on_source`).
    pub(super) fn from_service(error: SqsError, name: &str) -> ApiError {
        match error.code {
            ErrorCode::QueueDoesNotExist => ApiError::no_queue(name),
            ErrorCode::ResourceNotFound => ApiError::not_found(error.message),
            code => ApiError {
                status: StatusCode::from_u16(code.status())
                    .unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
                code,
                message: error.message,
            },
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        // The shape name of the JSON `__type` (`com.amazonaws.sqs#OverLimit`).
        let code = self.code.json_type().rsplit('#').next().unwrap_or("Error");
        let body = json!({ "error": { "code": code, "message": self.message } });
        (self.status, reply(body)).into_response()
    }
}

/// A JSON answer the browser must not cache (the page polls).
pub(super) fn reply(body: Value) -> Response {
    (
        [
            (CONTENT_TYPE, "application/json"),
            (CACHE_CONTROL, "no-cache"),
        ],
        body.to_string(),
    )
        .into_response()
}

/// Executes `action` on queue `name` as the SQS API would, refusals as [`ApiError`]s.
pub(super) async fn execute(
    service: &impl Api,
    action: Action,
    name: &str,
) -> Result<Outcome, ApiError> {
    execute_raw(service, action)
        .await
        .map_err(|error| ApiError::from_service(error, name))
}

/// Executes `action` as the SQS API would, refusals as the service gave them.
pub(super) async fn execute_raw(service: &impl Api, action: Action) -> Result<Outcome, SqsError> {
    service.execute(action, &Caller::default()).await
}

/// A message state as the dashboard names it.
pub(super) fn state_name(state: MessageState) -> &'static str {
    match state {
        MessageState::Ready => "ready",
        MessageState::InFlight => "in-flight",
        MessageState::Delayed => "delayed",
    }
}
