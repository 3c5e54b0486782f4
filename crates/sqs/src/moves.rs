//! Move tasks on the wire: the `TaskHandle` format and the names of task states.
//!
//! A `TaskHandle` is, as in SQS, opaque to clients, and made as SQS makes it: the base64
//! (standard alphabet, padded) of the compact JSON object `{"taskId":"<id>","sourceArn":"<arn>"}`
//! (LocalStack's `encode_move_task_handle`, whose hand-made handles AWS answers as handles of
//! tasks it does not know in `test_cancel_with_invalid_task_id_in_task_handle`). So a handle names
//! its source queue, and a handle of one queue never acts on another queue's task. leaseq's task
//! ids are numbers; a handle whose `taskId` is not one of ours (AWS's are UUIDs) names no task.

use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use base64::Engine as _;
use leaseq_core::MoveStatus;

use crate::action::TaskHandle;
use crate::error::{ErrorCode, SqsError};
use crate::outcome::Context;

/// The handle of task `task_id` of queue `source`.
pub fn encode_task_handle(ctx: &Context, task_id: u64, source: &str) -> String {
    // Written by hand for SQS's member order (serde_json's maps sort their keys).
    let json = format!(
        "{{\"taskId\":{},\"sourceArn\":{}}}",
        serde_json::Value::String(task_id.to_string()),
        serde_json::Value::String(crate::queue_arn(ctx, source)),
    );
    STANDARD.encode(json)
}

/// The task a handle names. A handle that is not base64 of a JSON object with string members
/// `taskId` and `sourceArn` is `InvalidParameterValue`, as in SQS; one whose `sourceArn` is no
/// queue ARN names a queue that does not exist (`ResourceNotFoundException`, SQS's answer to an
/// unknown source), and one whose `taskId` is not a leaseq task id names no task. Handles of
/// earlier leaseq versions (URL-safe base64 without padding) are read too.
pub fn decode_task_handle(handle: &str) -> Result<TaskHandle, SqsError> {
    let trimmed = handle.trim();
    let bytes = STANDARD
        .decode(trimmed)
        .or_else(|_| URL_SAFE_NO_PAD.decode(trimmed.trim_end_matches('=')))
        .map_err(|_| SqsError::invalid_task_handle())?;
    let value: serde_json::Value =
        serde_json::from_slice(&bytes).map_err(|_| SqsError::invalid_task_handle())?;
    let member = |name: &str| value.get(name).and_then(|member| member.as_str());
    let (Some(task_id), Some(source_arn)) = (member("taskId"), member("sourceArn")) else {
        return Err(SqsError::invalid_task_handle());
    };
    let source = crate::attributes::queue_name_of_arn(source_arn).ok_or_else(|| {
        SqsError::new(
            ErrorCode::ResourceNotFound,
            "The resource that you specified for the SourceArn parameter doesn't exist.",
        )
    })?;
    Ok(TaskHandle {
        task_id: task_id.parse::<u64>().ok(),
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
            base_url: "".into(),
            region: "us-east-1".into(),
            account_id: "000000000000".into(),
            request_id: "".into(),
        };
        let handle = encode_task_handle(&ctx, 42, "dlq");
        // SQS's form: padded standard base64 of the compact object, taskId first.
        assert_eq!(
            STANDARD.decode(&handle).unwrap(),
            br#"{"taskId":"42","sourceArn":"arn:aws:sqs:us-east-1:000000000000:dlq"}"#
        );
        assert_eq!(
            decode_task_handle(&handle).unwrap(),
            TaskHandle {
                task_id: Some(42),
                source: "dlq".into()
            }
        );
        // An AWS task id (a UUID) names no task of ours; the handle itself is well formed.
        let aws = STANDARD.encode(
            r#"{"taskId":"10f57157-fc38-4da9-a113-4de7e12d05aa","sourceArn":"arn:aws:sqs:us-east-1:000000000000:dlq"}"#,
        );
        assert_eq!(decode_task_handle(&aws).unwrap().task_id, None);
        for bad in [
            "",
            "nope",
            "foobared",
            "e30",
            &STANDARD.encode(r#"{"taskId":"x"}"#),
        ] {
            let error = decode_task_handle(bad).unwrap_err();
            assert_eq!(
                (error.code, error.message.as_str()),
                (
                    ErrorCode::InvalidParameterValue,
                    "Value for parameter TaskHandle is invalid."
                ),
                "{bad}"
            );
        }
        let no_queue = STANDARD.encode(r#"{"taskId":"1","sourceArn":"nope"}"#);
        assert_eq!(
            decode_task_handle(&no_queue).unwrap_err().code,
            ErrorCode::ResourceNotFound
        );
    }
}
