//! Decoding of the message-move actions (SQS's three and leaseq's extensions).

use leaseq_core::engine::MOVE_RATE_MAX_PER_SECOND;
use leaseq_core::MoveTaskChange;

use super::input::Input;
use crate::action::{Action, QueueRef, TaskHandle};
use crate::error::{ErrorCode, SqsError};

/// `ListMessageMoveTasks` returns at most this many tasks (SQS's limit).
pub const LIST_MOVE_TASKS_MAX: i64 = 10;

/// `LeaseqPeekMessages` returns at most this many messages per page.
pub const PEEK_MESSAGES_MAX: i64 = 100;

fn queue_of_arn(input: &Input, name: &str) -> Result<Option<String>, SqsError> {
    match input.string(name, name)? {
        None => Ok(None),
        Some(arn) => match crate::attributes::queue_name_of_arn(&arn) {
            Some(queue) => Ok(Some(queue.to_string())),
            None => Err(SqsError::new(
                ErrorCode::InvalidParameterValue,
                format!("Value {arn} for parameter {name} is invalid. Reason: It is not a valid SQS queue ARN."),
            )),
        },
    }
}

fn source(input: &Input) -> Result<String, SqsError> {
    queue_of_arn(input, "SourceArn")?.ok_or_else(|| SqsError::missing_parameter("SourceArn"))
}

fn rate(input: &Input, zero_is_automatic: bool) -> Result<Option<Option<u32>>, SqsError> {
    const NAME: &str = "MaxNumberOfMessagesPerSecond";
    match input.integer(NAME, NAME)? {
        None => Ok(None),
        Some(0) if zero_is_automatic => Ok(Some(None)),
        Some(rate) if (1..=i64::from(MOVE_RATE_MAX_PER_SECOND)).contains(&rate) => {
            Ok(Some(Some(rate as u32)))
        }
        Some(rate) => Err(SqsError::invalid_parameter(
            NAME,
            rate,
            &format!("Must be between 1 and {MOVE_RATE_MAX_PER_SECOND}."),
        )),
    }
}

fn limit(input: &Input) -> Result<Option<Option<u64>>, SqsError> {
    const NAME: &str = "LeaseqMessageLimit";
    match input.integer(NAME, NAME)? {
        None => Ok(None),
        Some(0) => Ok(Some(None)),
        Some(limit @ 1..) => Ok(Some(Some(limit as u64))),
        Some(limit) => Err(SqsError::invalid_parameter(
            NAME,
            limit,
            "Must be a positive number of messages (0 removes the limit).",
        )),
    }
}

pub(super) fn start(input: &Input) -> Result<Action, SqsError> {
    Ok(Action::StartMessageMoveTask {
        source: source(input)?,
        destination: queue_of_arn(input, "DestinationArn")?,
        rate_per_second: rate(input, false)?.flatten(),
        limit: limit(input)?.flatten(),
    })
}

pub(super) fn list(input: &Input) -> Result<Action, SqsError> {
    let max_results = match input.integer("MaxResults", "MaxResults")? {
        None => 1,
        Some(n @ 1..=LIST_MOVE_TASKS_MAX) => n as usize,
        Some(n) => {
            return Err(SqsError::invalid_parameter(
                "MaxResults",
                n,
                &format!("Must be between 1 and {LIST_MOVE_TASKS_MAX}."),
            ))
        }
    };
    Ok(Action::ListMessageMoveTasks {
        source: source(input)?,
        max_results,
    })
}

pub(super) fn task_handle(input: &Input) -> Result<TaskHandle, SqsError> {
    let handle = input.required_string("TaskHandle", "TaskHandle")?;
    crate::moves::decode_task_handle(&handle)
}

pub(super) fn change(name: &str, input: &Input) -> Result<Action, SqsError> {
    let task = task_handle(input)?;
    let (action, changes) = match name {
        "LeaseqPauseMessageMoveTask" => ("LeaseqPauseMessageMoveTask", vec![MoveTaskChange::Pause]),
        "LeaseqResumeMessageMoveTask" => {
            ("LeaseqResumeMessageMoveTask", vec![MoveTaskChange::Resume])
        }
        _ => {
            let mut changes = Vec::new();
            if let Some(rate) = rate(input, true)? {
                changes.push(MoveTaskChange::Rate(rate));
            }
            if let Some(limit) = limit(input)? {
                changes.push(MoveTaskChange::Limit(limit));
            }
            if changes.is_empty() {
                return Err(SqsError::missing_parameter(
                    "MaxNumberOfMessagesPerSecond or LeaseqMessageLimit",
                ));
            }
            ("LeaseqUpdateMessageMoveTask", changes)
        }
    };
    Ok(Action::LeaseqChangeMessageMoveTask {
        action,
        task,
        changes,
    })
}

pub(super) fn peek(queue: QueueRef, input: &Input) -> Result<Action, SqsError> {
    let max_messages = match input.integer("MaxNumberOfMessages", "MaxNumberOfMessages")? {
        None => 10,
        Some(n @ 1..=PEEK_MESSAGES_MAX) => n as usize,
        Some(n) => {
            return Err(SqsError::invalid_parameter(
                "MaxNumberOfMessages",
                n,
                "Must be between 1 and 100.",
            ))
        }
    };
    let after_seq = match input.string("NextToken", "NextToken")? {
        None => 0,
        Some(token) => token.parse::<u64>().map_err(|_| {
            SqsError::invalid_parameter("NextToken", &token, "It is not a token of this action.")
        })?,
    };
    Ok(Action::LeaseqPeekMessages {
        queue,
        after_seq,
        max_messages,
    })
}
