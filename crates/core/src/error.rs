//! The errors the engine returns to a caller that asked for something it cannot do.
//!
//! Every variant is the caller's fault (bad input, a missing queue, a stale receipt): the engine
//! has no I/O, so it has no server-side failures. Variants say which field, which value and which
//! bound, as data; their `Display` is a terse developer-facing description. The `sqs` crate maps
//! each variant to an SQS error code, HTTP status and the sentence a client reads, in one table.

use crate::moves::MoveStatus;

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
    /// Move task parameter: the source queue (a dead-letter queue).
    SourceArn,
    /// A move task's handle.
    TaskHandle,
    /// Queue setting: in-flight messages before a tenant's concurrency share counts
    /// (`LeaseqFairInFlightMin`).
    FairInFlightMin,
    /// Queue setting: how far back a fair queue counts processing time
    /// (`LeaseqFairProcessingWindowSeconds`).
    FairProcessingWindowSeconds,
    /// Queue setting: when a noisy tenant is quiet again (`LeaseqFairComparableFactor`).
    FairComparableFactor,
}

/// What is wrong with one message attribute (named in [`Error::InvalidMessageAttribute`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AttributeProblem {
    /// The name is empty.
    NameEmpty,
    /// The name is longer than `length_max` characters.
    NameLength {
        /// The longest name allowed.
        length_max: usize,
    },
    /// The name starts with a prefix reserved for AWS (`AWS.`, `Amazon.`, in any casing).
    NameReservedPrefix,
    /// The name starts with `.`.
    NameLeadingPeriod,
    /// The name ends with `.`.
    NameTrailingPeriod,
    /// The name has `..`.
    NameSuccessivePeriods,
    /// The name holds a character that is neither alphanumeric nor `_`, `-` or `.`.
    NameCharacter {
        /// The first such character.
        character: char,
    },
    /// The data type is longer than `length_max` characters.
    DataTypeLength {
        /// The longest data type allowed.
        length_max: usize,
    },
    /// The data type does not start with `String`, `Number` or `Binary`.
    UnknownDataType,
    /// The value is empty, or of the other kind (text for `Binary`, bytes otherwise).
    MissingValue {
        /// The attribute's data type as sent.
        data_type: String,
    },
    /// A `Number` attribute's value is not a number in SQS's range.
    NotANumber,
}

/// Why a queue cannot be the target of another: a redrive policy's dead-letter queue, or a move
/// task's destination (see [`Error::InvalidTarget`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TargetProblem {
    /// The target is the source itself.
    Itself,
    /// One queue is FIFO and the other standard.
    OtherKind,
    /// The `RedriveAllowPolicy` of the dead-letter queue involved does not allow the other.
    NotAllowed,
}

/// Why the engine refused a request. Each variant carries the field, the value and the bound
/// involved as data; the protocol crate (`leaseq-sqs`) turns them into the client's sentence.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// The named queue does not exist (or was deleted).
    #[error("queue does not exist")]
    QueueDoesNotExist,
    /// `create` named an existing queue but asked for a different value of this setting (its
    /// wire name, or a passthrough attribute's key).
    #[error("queue exists with a different {0}")]
    QueueAlreadyExists(String),
    /// A number outside `min..=max`.
    #[error("{field:?} is {value}, outside {min}..={max}")]
    OutOfRange {
        /// Which field.
        field: Field,
        /// The value given.
        value: u64,
        /// The smallest value allowed.
        min: u64,
        /// The largest value allowed.
        max: u64,
    },
    /// A text longer than allowed, in bytes.
    #[error("{field:?} is {len} bytes long, more than {max}")]
    TooLong {
        /// Which field.
        field: Field,
        /// Its length in bytes.
        len: usize,
        /// The largest length allowed.
        max: usize,
    },
    /// More entries than allowed (message attributes, tags).
    #[error("{count} {field:?}, more than {max}")]
    TooMany {
        /// Which field.
        field: Field,
        /// How many there would be.
        count: usize,
        /// The most allowed.
        max: usize,
    },
    /// An identifier (queue name, FIFO group, deduplication or attempt id) that is empty,
    /// longer than `length_max` or holds a character its field does not allow.
    #[error("{field:?} {value:?} is malformed (1 to {length_max} allowed characters)")]
    Malformed {
        /// Which field.
        field: Field,
        /// The value given.
        value: String,
        /// The longest value allowed.
        length_max: usize,
    },
    /// A queue name whose `.fifo` suffix disagrees with the `FifoQueue` setting of its create.
    #[error("queue name {name:?} and the FifoQueue setting disagree")]
    FifoNameMismatch {
        /// The name given.
        name: String,
        /// The longest name allowed.
        length_max: usize,
    },
    /// A field this kind of queue does not take (a deduplication id on a standard queue, a
    /// message delay on a FIFO queue).
    #[error("{field:?} {value} is not valid for this queue type")]
    NotForQueueType {
        /// Which field.
        field: Field,
        /// The value given, as text.
        value: String,
    },
    /// A character outside SQS's allowed set (XML 1.0 characters).
    #[error("{field:?} holds the disallowed character U+{:04X}", *character as u32)]
    InvalidCharacter {
        /// Which field (the body, an attribute value, the trace header).
        field: Field,
        /// The first disallowed character.
        character: char,
    },
    /// One message attribute is malformed.
    #[error("message attribute {name:?}: {problem:?}")]
    InvalidMessageAttribute {
        /// The attribute's name.
        name: String,
        /// What is wrong with it.
        problem: AttributeProblem,
    },
    /// A required field is missing or empty (the body, a FIFO send's group id, or its
    /// deduplication id on a queue without content-based deduplication).
    #[error("{0:?} is required")]
    Missing(Field),
    /// The queue or task a field names does not exist (a move task's source or destination, a
    /// task handle, a redrive policy's dead-letter queue).
    #[error("the {0:?} names nothing that exists")]
    NotFound(Field),
    /// `target` cannot be the dead-letter queue (field `RedrivePolicy`) or move destination
    /// (field `DestinationArn`) of `queue`.
    #[error("{target} cannot be the {field:?} of {queue}: {problem:?}")]
    InvalidTarget {
        /// Which field names the target.
        field: Field,
        /// The queue whose messages would go there.
        queue: String,
        /// The queue they would go to.
        target: String,
        /// Whether `queue` is a FIFO queue.
        source_fifo: bool,
        /// Why not.
        problem: TargetProblem,
    },
    /// A second purge within the purge interval.
    #[error("purged less than the purge interval ago")]
    PurgeInProgress,
    /// `create` of a name whose queue was deleted less than
    /// `Limits::queue_name_reuse_delay_ms` ago.
    #[error("a queue of this name was deleted less than the reuse delay ago")]
    QueueDeletedRecently,
    /// Body plus attributes exceed the queue's `MaximumMessageSize`.
    #[error("message is {size_bytes} bytes, more than {max_bytes}")]
    MessageTooLong {
        /// The message's size (body plus attributes).
        size_bytes: usize,
        /// The queue's limit.
        max_bytes: u32,
    },
    /// The queue already has the maximum number of messages in flight.
    #[error("{in_flight_max} messages in flight already")]
    OverLimit {
        /// The limit that was reached.
        in_flight_max: usize,
    },
    /// The receipt is not one this server issued for this queue.
    #[error("receipt not issued for this queue")]
    ReceiptHandleIsInvalid,
    /// The receipt belongs to an attempt that a newer receive superseded. It never acts on the
    /// newer attempt.
    #[error("receipt superseded by a newer receive")]
    ReceiptSuperseded,
    /// Change of visibility for a message that was deleted or is gone.
    #[error("message not in flight")]
    MessageNotInFlight,
    /// The lease would last longer than the maximum counted from the receive that issued it.
    #[error("lease would last past {max_seconds} s from its receive")]
    LeaseTooLong {
        /// The maximum total lease.
        max_seconds: u32,
    },
    /// A queue setting (its wire name) that does not exist for this kind of queue: a FIFO
    /// setting on a standard queue, `FifoQueue` (whatever its value) included.
    #[error("setting {0} does not apply")]
    UnknownSetting(String),
    /// A change of a FIFO queue's `FifoQueue` setting to `false`: whether a queue is FIFO is
    /// decided when it is created.
    #[error("a queue's type cannot change")]
    QueueTypeChange,
    /// A move task's source queue is no queue's dead-letter queue.
    #[error("the source is not a dead-letter queue")]
    NotADeadLetterQueue,
    /// The source queue has a running or paused move task already.
    #[error("the source has an active move task")]
    MoveTaskActive,
    /// A change of a move task that is no longer running or paused.
    #[error("the move task is {status:?}")]
    MoveTaskFinished {
        /// The task's state.
        status: MoveStatus,
    },
    /// Resuming a move task that has moved its message limit.
    #[error("the move task reached its limit of {limit} messages")]
    MoveTaskAtLimit {
        /// The task's limit.
        limit: u64,
    },
    /// Failing a message now on a queue that has no dead-letter queue.
    #[error("the queue has no dead-letter queue")]
    NoDeadLetterQueue,
}

impl Error {
    /// Whether the caller caused it. Every variant is, today: the engine has no I/O and so no
    /// failures of its own. The match is exhaustive so that a variant that is not a client fault
    /// has to say so.
    pub fn is_client_fault(&self) -> bool {
        match self {
            Error::QueueDoesNotExist
            | Error::QueueAlreadyExists(_)
            | Error::OutOfRange { .. }
            | Error::TooLong { .. }
            | Error::TooMany { .. }
            | Error::Malformed { .. }
            | Error::FifoNameMismatch { .. }
            | Error::NotForQueueType { .. }
            | Error::InvalidCharacter { .. }
            | Error::InvalidMessageAttribute { .. }
            | Error::Missing(_)
            | Error::NotFound(_)
            | Error::InvalidTarget { .. }
            | Error::PurgeInProgress
            | Error::QueueDeletedRecently
            | Error::MessageTooLong { .. }
            | Error::OverLimit { .. }
            | Error::ReceiptHandleIsInvalid
            | Error::ReceiptSuperseded
            | Error::MessageNotInFlight
            | Error::LeaseTooLong { .. }
            | Error::UnknownSetting(_)
            | Error::QueueTypeChange
            | Error::NotADeadLetterQueue
            | Error::MoveTaskActive
            | Error::MoveTaskFinished { .. }
            | Error::MoveTaskAtLimit { .. }
            | Error::NoDeadLetterQueue => true,
        }
    }

    /// Whether retrying the same request unchanged could succeed later (a full queue drains, a
    /// purge interval passes). Everything else is permanent for that request.
    pub fn is_retryable(&self) -> bool {
        matches!(
            self,
            Error::OverLimit { .. } | Error::PurgeInProgress | Error::QueueDeletedRecently
        )
    }

    /// Shorthand for [`Error::OutOfRange`] from the integer types the engine's fields use.
    pub fn out_of_range(
        field: Field,
        value: impl Into<u64>,
        min: impl Into<u64>,
        max: impl Into<u64>,
    ) -> Error {
        Error::OutOfRange {
            field,
            value: value.into(),
            min: min.into(),
            max: max.into(),
        }
    }
}

/// Result of an engine operation.
pub type Result<T> = std::result::Result<T, Error>;
