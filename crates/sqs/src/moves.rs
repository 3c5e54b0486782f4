//! Move tasks on the wire: the `TaskHandle` format and the names of task states.
//!
//! A `TaskHandle` is, as in SQS, opaque to clients: here the URL-safe base64 of a small JSON
//! object `{"taskId": "<id>", "sourceArn": "<arn>"}`, so a handle names its source queue and a
//! handle of one queue never acts on another queue's task.

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use leaseq_core::MoveStatus;

use crate::action::TaskHandle;
use crate::error::{ErrorCode, SqsError};
use crate::outcome::Context;

/// The handle of task `task_id` of queue `source`.
pub fn encode_task_handle(ctx: &Context, task_id: u64, source: &str) -> String {
    let json = serde_json::json!({
        "taskId": task_id.to_string(),
        "sourceArn": crate::queue_arn(ctx, source),
    });
    URL_SAFE_NO_PAD.encode(json.to_string())
}

/// The task a handle names.
pub fn decode_task_handle(handle: &str) -> Result<TaskHandle, SqsError> {
    let invalid = || {
        SqsError::new(
            ErrorCode::ResourceNotFound,
            "The task handle is not valid: it names no message move task of this server.",
        )
    };
    let bytes = URL_SAFE_NO_PAD
        .decode(handle.trim_end_matches('='))
        .map_err(|_| invalid())?;
    let value: serde_json::Value = serde_json::from_slice(&bytes).map_err(|_| invalid())?;
    let task_id = value
        .get("taskId")
        .and_then(|id| id.as_str())
        .and_then(|id| id.parse::<u64>().ok())
        .ok_or_else(invalid)?;
    let source = value
        .get("sourceArn")
        .and_then(|arn| arn.as_str())
        .and_then(crate::attributes::queue_name_of_arn)
        .ok_or_else(invalid)?;
    Ok(TaskHandle {
        task_id,
        source: source.to_string(),
    })
}

/// The `Status` of a task. `PAUSED` is leaseq's own (a canary that reached its limit, or a
/// task an operator paused); SQS's model types the field as a string, so clients pass it on.
pub fn status_name(status: MoveStatus) -> &'static str {
    match status {
        MoveStatus::Running => "RUNNING",
        MoveStatus::Paused => "PAUSED",
        MoveStatus::Completed => "COMPLETED",
        MoveStatus::Cancelled => "CANCELLED",
        MoveStatus::Failed => "FAILED",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn task_handles_round_trip_and_refuse_garbage() {
        let ctx = Context {
            base_url: String::new(),
            region: "us-east-1".into(),
            account_id: "000000000000".into(),
            request_id: String::new(),
        };
        let handle = encode_task_handle(&ctx, 42, "dlq");
        assert_eq!(
            decode_task_handle(&handle).unwrap(),
            TaskHandle {
                task_id: 42,
                source: "dlq".into()
            }
        );
        for bad in [
            "",
            "nope",
            "e30",
            &URL_SAFE_NO_PAD.encode(r#"{"taskId":"x"}"#),
        ] {
            assert_eq!(
                decode_task_handle(bad).unwrap_err().code,
                ErrorCode::ResourceNotFound,
                "{bad}"
            );
        }
    }
}
