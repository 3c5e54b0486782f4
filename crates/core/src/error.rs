//! The errors the engine returns to a caller that asked for something it cannot do.
//!
//! Every variant is the caller's fault (bad input, a missing queue, a stale receipt): the engine
//! has no I/O, so it has no server-side failures. The `sqs` crate maps each variant to an SQS
//! error code and HTTP status in one table.

/// A request field or queue setting that an error is about. The `sqs` crate names it on the wire.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Field {
    /// Queue setting: how long a lease lasts by default.
    VisibilityTimeout,
    /// Receive or change-visibility parameter: how long this lease lasts (`VisibilityTimeout` on
    /// the wire).
    LeaseVisibilityTimeout,
    /// Queue setting: how long a message is kept.
    MessageRetentionPeriod,
    /// Queue setting: the delay of every message sent without its own.
    DelaySeconds,
    /// Send parameter: one message's own delay (`DelaySeconds` on the wire).
    MessageDelaySeconds,
    /// Queue setting: the largest message accepted.
    MaximumMessageSize,
    /// Queue setting: the default long-poll wait.
    ReceiveMessageWaitTimeSeconds,
    /// Queue setting: dead-letter target and `maxReceiveCount`.
    RedrivePolicy,
    /// Queue setting: which queues may use this one as their dead-letter queue.
    RedriveAllowPolicy,
    /// Receive parameter: messages wanted.
    MaxNumberOfMessages,
    /// Receive parameter: long-poll wait.
    WaitTimeSeconds,
    /// The message body.
    MessageBody,
    /// Message attributes (names, types, values, count).
    MessageAttributes,
    /// Message system attributes (`AWSTraceHeader`).
    MessageSystemAttributes,
    /// A receipt handle.
    ReceiptHandle,
    /// A queue name.
    QueueName,
    /// Queue tags.
    Tags,
    /// Queue setting: the access policy document.
    Policy,
    /// Send parameter: a FIFO message's group.
    MessageGroupId,
    /// Send parameter: a FIFO message's deduplication id.
    MessageDeduplicationId,
    /// Receive parameter: the id that makes a FIFO receive retryable.
    ReceiveRequestAttemptId,
    /// Move task parameter: messages moved per second.
    MaxNumberOfMessagesPerSecond,
    /// Move task parameter: the destination queue.
    DestinationArn,
}

/// Why the engine refused a request.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// The named queue does not exist (or was deleted).
    #[error("The specified queue does not exist.")]
    QueueDoesNotExist,
    /// `create` named an existing queue but asked for different settings.
    #[error("A queue already exists with the same name and a different value for attribute {0}")]
    QueueAlreadyExists(String),
    /// A request field or queue setting is out of range or malformed.
    #[error("Invalid value for {field:?}: {reason}")]
    InvalidValue {
        /// Which field.
        field: Field,
        /// A sentence for the client.
        reason: String,
    },
    /// A second purge within the purge interval.
    #[error("Only one PurgeQueue operation on a queue is allowed every 60 seconds.")]
    PurgeInProgress,
    /// Body plus attributes exceed the queue's `MaximumMessageSize`.
    #[error("One or more parameters are invalid. Reason: Message must be shorter than {max_bytes} bytes.")]
    MessageTooLong {
        /// The message's size (body plus attributes).
        size_bytes: usize,
        /// The queue's limit.
        max_bytes: u32,
    },
    /// The body is empty or holds characters outside SQS's allowed set.
    #[error("{0}")]
    InvalidMessageContents(String),
    /// The queue already has the maximum number of messages in flight.
    #[error("Too many messages in flight (limit {in_flight_max}).")]
    OverLimit {
        /// The limit that was reached.
        in_flight_max: usize,
    },
    /// The receipt is not one this server issued for this queue.
    #[error("The input receipt handle is invalid.")]
    ReceiptHandleIsInvalid,
    /// The receipt belongs to an attempt that a newer receive superseded. It never acts on the
    /// newer attempt.
    #[error("The receipt handle has expired.")]
    ReceiptSuperseded,
    /// Change of visibility for a message that was deleted or is gone.
    #[error("Message does not exist or is not available for visibility timeout change.")]
    MessageNotInFlight,
    /// The lease would last longer than the maximum counted from the receive that issued it.
    #[error("Total VisibilityTimeout for the message is beyond the limit [{max_seconds} seconds]")]
    LeaseTooLong {
        /// The maximum total lease.
        max_seconds: u32,
    },
    /// A required request parameter is missing (for example `MessageGroupId` on a FIFO queue).
    #[error("The request must contain the parameter {0}.")]
    MissingParameter(&'static str),
    /// A queue setting that does not exist for this kind of queue (a FIFO setting on a standard
    /// queue, or `FifoQueue` after creation).
    #[error("Unknown Attribute {0}.")]
    InvalidAttributeName(String),
    /// A move task's source queue, or a task, does not exist.
    #[error("{0}")]
    ResourceNotFound(String),
    /// A move task the state does not allow: the source is not a dead-letter queue, or it has
    /// an active task already, or the task is not in a state the change applies to.
    #[error("{0}")]
    UnsupportedOperation(String),
    /// The queue would carry more tags than allowed.
    #[error("Too many tags (limit {tags_max}).")]
    TooManyTags {
        /// The limit.
        tags_max: usize,
    },
}

impl Error {
    /// Shorthand for [`Error::InvalidValue`].
    pub fn invalid(field: Field, reason: impl Into<String>) -> Error {
        Error::InvalidValue {
            field,
            reason: reason.into(),
        }
    }

    /// Whether retrying the same request unchanged could succeed later (a full queue drains, a
    /// purge interval passes). Everything else is permanent for that request.
    pub fn is_retryable(&self) -> bool {
        matches!(self, Error::OverLimit { .. } | Error::PurgeInProgress)
    }
}

/// Result of an engine operation.
pub type Result<T> = std::result::Result<T, Error>;
