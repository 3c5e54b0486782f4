//! SQS errors: the codes a client sees, and the one table that maps the engine's errors to them.
//!
//! Every error has two names on the wire. AWS JSON 1.0 puts a Smithy shape id in `__type`
//! (`com.amazonaws.sqs#QueueDoesNotExist`) and repeats the legacy Query code in the
//! `x-amzn-query-error` header; Query/XML puts the legacy code in `<Code>`
//! (`AWS.SimpleQueueService.NonExistentQueue`). SDKs of the JSON era dispatch on the header when
//! it is present, so both names must be exactly SQS's. The codes, statuses and faults below are
//! those of SQS's Smithy model (`awsQueryError` traits) and of the AWS common-errors table.

use std::fmt;

/// An SQS error code, with everything the wire needs to know about it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ErrorCode {
    /// The queue named by the request does not exist.
    QueueDoesNotExist,
    /// A queue with this name exists with different attributes.
    QueueNameExists,
    /// A queue of this name was deleted less than 60 seconds ago.
    QueueDeletedRecently,
    /// An attribute name is not one SQS knows (or not valid for this queue type).
    InvalidAttributeName,
    /// A queue attribute's value is malformed or out of range.
    InvalidAttributeValue,
    /// A request parameter's value is malformed or out of range.
    InvalidParameterValue,
    /// A required parameter is missing.
    MissingParameter,
    /// The action is unknown (Query) or the operation is unknown (JSON).
    InvalidAction,
    /// The Query request names no action.
    MissingAction,
    /// A Query request's form or query string cannot be parsed.
    MalformedQueryString,
    /// A JSON request's body cannot be parsed, or a member has the wrong type.
    SerializationException,
    /// The message body holds characters SQS does not allow.
    InvalidMessageContents,
    /// A limit (messages in flight, actions in a policy) was reached.
    OverLimit,
    /// The queue was purged less than 60 seconds ago.
    PurgeQueueInProgress,
    /// The receipt handle is not valid.
    ReceiptHandleIsInvalid,
    /// The message is not in flight.
    MessageNotInflight,
    /// More entries in a batch than allowed.
    TooManyEntriesInBatchRequest,
    /// A batch without entries.
    EmptyBatchRequest,
    /// Two batch entries share an id.
    BatchEntryIdsNotDistinct,
    /// A batch entry id has characters or a length SQS does not allow.
    InvalidBatchEntryId,
    /// The messages of a batch are larger than allowed in total.
    BatchRequestTooLong,
    /// The queue URL or endpoint is not valid.
    InvalidAddress,
    /// The request was not made over HTTPS or not signed as required.
    InvalidSecurity,
    /// The request exceeds a request-rate quota.
    RequestThrottled,
    /// The operation is not supported (by this server, or for this queue).
    UnsupportedOperation,
    /// The receipt handle format is invalid (deprecated by SQS in favour of
    /// `ReceiptHandleIsInvalid`).
    InvalidIdFormat,
    /// A resource other than a queue (a message-move task) does not exist.
    ResourceNotFound,
    /// The HTTP request body is larger than the server accepts.
    RequestEntityTooLarge,
    /// A failure of the server itself.
    InternalError,
    /// The server cannot answer now (shutting down, overloaded, storage unavailable).
    ServiceUnavailable,
}

/// How a code appears on the wire: `(JSON __type, Query code, HTTP status, sender fault)`.
struct WireNames {
    json_type: &'static str,
    query_code: &'static str,
    status: u16,
    sender_fault: bool,
}

const fn wire(
    json_type: &'static str,
    query_code: &'static str,
    status: u16,
    sender_fault: bool,
) -> WireNames {
    WireNames {
        json_type,
        query_code,
        status,
        sender_fault,
    }
}

impl ErrorCode {
    /// Every code, for tests and documentation.
    pub const ALL: [ErrorCode; 30] = [
        ErrorCode::QueueDoesNotExist,
        ErrorCode::QueueNameExists,
        ErrorCode::QueueDeletedRecently,
        ErrorCode::InvalidAttributeName,
        ErrorCode::InvalidAttributeValue,
        ErrorCode::InvalidParameterValue,
        ErrorCode::MissingParameter,
        ErrorCode::InvalidAction,
        ErrorCode::MissingAction,
        ErrorCode::MalformedQueryString,
        ErrorCode::SerializationException,
        ErrorCode::InvalidMessageContents,
        ErrorCode::OverLimit,
        ErrorCode::PurgeQueueInProgress,
        ErrorCode::ReceiptHandleIsInvalid,
        ErrorCode::MessageNotInflight,
        ErrorCode::TooManyEntriesInBatchRequest,
        ErrorCode::EmptyBatchRequest,
        ErrorCode::BatchEntryIdsNotDistinct,
        ErrorCode::InvalidBatchEntryId,
        ErrorCode::BatchRequestTooLong,
        ErrorCode::InvalidAddress,
        ErrorCode::InvalidSecurity,
        ErrorCode::RequestThrottled,
        ErrorCode::UnsupportedOperation,
        ErrorCode::InvalidIdFormat,
        ErrorCode::ResourceNotFound,
        ErrorCode::RequestEntityTooLarge,
        ErrorCode::InternalError,
        ErrorCode::ServiceUnavailable,
    ];

    /// The table. Modeled SQS errors use the `com.amazonaws.sqs` namespace; the generic errors
    /// SQS inherits from its service framework use `com.amazon.coral.service` and the
    /// `…Exception` names real SQS sends over JSON (their Query codes differ).
    fn wire(self) -> WireNames {
        use ErrorCode::*;
        match self {
            QueueDoesNotExist => wire(
                "com.amazonaws.sqs#QueueDoesNotExist",
                "AWS.SimpleQueueService.NonExistentQueue",
                400,
                true,
            ),
            QueueNameExists => wire(
                "com.amazonaws.sqs#QueueNameExists",
                "QueueAlreadyExists",
                400,
                true,
            ),
            QueueDeletedRecently => wire(
                "com.amazonaws.sqs#QueueDeletedRecently",
                "AWS.SimpleQueueService.QueueDeletedRecently",
                400,
                true,
            ),
            InvalidAttributeName => wire(
                "com.amazonaws.sqs#InvalidAttributeName",
                "InvalidAttributeName",
                400,
                true,
            ),
            InvalidAttributeValue => wire(
                "com.amazonaws.sqs#InvalidAttributeValue",
                "InvalidAttributeValue",
                400,
                true,
            ),
            InvalidParameterValue => wire(
                "com.amazon.coral.service#InvalidParameterValueException",
                "InvalidParameterValue",
                400,
                true,
            ),
            MissingParameter => wire(
                "com.amazon.coral.service#MissingRequiredParameterException",
                "MissingParameter",
                400,
                true,
            ),
            InvalidAction => wire(
                "com.amazon.coral.service#UnknownOperationException",
                "InvalidAction",
                400,
                true,
            ),
            MissingAction => wire(
                "com.amazon.coral.service#UnknownOperationException",
                "MissingAction",
                400,
                true,
            ),
            MalformedQueryString => wire(
                "com.amazon.coral.service#SerializationException",
                "MalformedQueryString",
                404,
                true,
            ),
            SerializationException => wire(
                "com.amazon.coral.service#SerializationException",
                "SerializationException",
                400,
                true,
            ),
            InvalidMessageContents => wire(
                "com.amazonaws.sqs#InvalidMessageContents",
                "InvalidMessageContents",
                400,
                true,
            ),
            OverLimit => wire("com.amazonaws.sqs#OverLimit", "OverLimit", 403, true),
            PurgeQueueInProgress => wire(
                "com.amazonaws.sqs#PurgeQueueInProgress",
                "AWS.SimpleQueueService.PurgeQueueInProgress",
                403,
                true,
            ),
            ReceiptHandleIsInvalid => wire(
                "com.amazonaws.sqs#ReceiptHandleIsInvalid",
                "ReceiptHandleIsInvalid",
                404,
                true,
            ),
            MessageNotInflight => wire(
                "com.amazonaws.sqs#MessageNotInflight",
                "AWS.SimpleQueueService.MessageNotInflight",
                400,
                true,
            ),
            TooManyEntriesInBatchRequest => wire(
                "com.amazonaws.sqs#TooManyEntriesInBatchRequest",
                "AWS.SimpleQueueService.TooManyEntriesInBatchRequest",
                400,
                true,
            ),
            EmptyBatchRequest => wire(
                "com.amazonaws.sqs#EmptyBatchRequest",
                "AWS.SimpleQueueService.EmptyBatchRequest",
                400,
                true,
            ),
            BatchEntryIdsNotDistinct => wire(
                "com.amazonaws.sqs#BatchEntryIdsNotDistinct",
                "AWS.SimpleQueueService.BatchEntryIdsNotDistinct",
                400,
                true,
            ),
            InvalidBatchEntryId => wire(
                "com.amazonaws.sqs#InvalidBatchEntryId",
                "AWS.SimpleQueueService.InvalidBatchEntryId",
                400,
                true,
            ),
            BatchRequestTooLong => wire(
                "com.amazonaws.sqs#BatchRequestTooLong",
                "AWS.SimpleQueueService.BatchRequestTooLong",
                400,
                true,
            ),
            InvalidAddress => wire(
                "com.amazonaws.sqs#InvalidAddress",
                "InvalidAddress",
                404,
                true,
            ),
            InvalidSecurity => wire(
                "com.amazonaws.sqs#InvalidSecurity",
                "InvalidSecurity",
                403,
                true,
            ),
            RequestThrottled => wire(
                "com.amazonaws.sqs#RequestThrottled",
                "RequestThrottled",
                403,
                true,
            ),
            UnsupportedOperation => wire(
                "com.amazonaws.sqs#UnsupportedOperation",
                "AWS.SimpleQueueService.UnsupportedOperation",
                400,
                true,
            ),
            InvalidIdFormat => wire(
                "com.amazonaws.sqs#InvalidIdFormat",
                "InvalidIdFormat",
                400,
                true,
            ),
            ResourceNotFound => wire(
                "com.amazonaws.sqs#ResourceNotFoundException",
                "ResourceNotFoundException",
                404,
                true,
            ),
            RequestEntityTooLarge => wire(
                "com.amazon.coral.service#RequestEntityTooLargeException",
                "RequestEntityTooLarge",
                413,
                true,
            ),
            InternalError => wire(
                "com.amazon.coral.service#InternalFailure",
                "InternalError",
                500,
                false,
            ),
            ServiceUnavailable => wire(
                "com.amazon.coral.service#ServiceUnavailableException",
                "ServiceUnavailable",
                503,
                false,
            ),
        }
    }

    /// The Smithy shape id SQS puts in a JSON error's `__type`.
    pub fn json_type(self) -> &'static str {
        self.wire().json_type
    }

    /// The legacy code: Query's `<Code>`, JSON's `x-amzn-query-error`, and a batch entry's `Code`.
    pub fn query_code(self) -> &'static str {
        self.wire().query_code
    }

    /// The HTTP status.
    pub fn status(self) -> u16 {
        self.wire().status
    }

    /// Whether the client caused it (`Sender`) rather than the server (`Receiver`).
    pub fn is_sender_fault(self) -> bool {
        self.wire().sender_fault
    }
}

/// An error as the client will see it: a code and a sentence.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{code:?}: {message}")]
pub struct SqsError {
    /// What kind of error.
    pub code: ErrorCode,
    /// The message for the client.
    pub message: String,
}

impl SqsError {
    /// An error with this code and message.
    pub fn new(code: ErrorCode, message: impl Into<String>) -> SqsError {
        SqsError {
            code,
            message: message.into(),
        }
    }

    /// A failure of the server itself (500, `Receiver`).
    pub fn internal(message: impl Into<String>) -> SqsError {
        SqsError::new(ErrorCode::InternalError, message)
    }

    /// The server cannot answer now (503, `Receiver`); the client may retry.
    pub fn service_unavailable(message: impl Into<String>) -> SqsError {
        SqsError::new(ErrorCode::ServiceUnavailable, message)
    }

    /// `InvalidParameterValue` with this message.
    pub fn invalid_parameter_value(message: impl Into<String>) -> SqsError {
        SqsError::new(ErrorCode::InvalidParameterValue, message)
    }

    /// The request body is larger than the server reads (413).
    pub fn request_too_large(limit_bytes: usize) -> SqsError {
        SqsError::new(
            ErrorCode::RequestEntityTooLarge,
            format!("Request body must be at most {limit_bytes} bytes."),
        )
    }

    /// `MissingParameter` for the named parameter, in SQS's words.
    pub fn missing_parameter(name: &str) -> SqsError {
        SqsError::new(
            ErrorCode::MissingParameter,
            format!("The request must contain the parameter {name}."),
        )
    }

    /// `InvalidParameterValue` in SQS's "Value x for parameter y is invalid" form.
    pub fn invalid_parameter(name: &str, value: impl fmt::Display, reason: &str) -> SqsError {
        SqsError::invalid_parameter_value(format!(
            "Value {value} for parameter {name} is invalid. Reason: {reason}"
        ))
    }

    /// The engine's error about a receipt, with the receipt in the message as SQS words it
    /// ("Value <handle> for parameter ReceiptHandle is invalid. Reason: …"). Other errors are
    /// mapped as by `From`.
    pub fn for_receipt(error: leaseq_core::Error, receipt: &str) -> SqsError {
        use leaseq_core::Error;
        match error {
            Error::ReceiptSuperseded => SqsError::invalid_parameter(
                "ReceiptHandle",
                receipt,
                "The receipt handle has expired.",
            ),
            Error::MessageNotInFlight => SqsError::invalid_parameter(
                "ReceiptHandle",
                receipt,
                "Message does not exist or is not available for visibility timeout change.",
            ),
            Error::ReceiptHandleIsInvalid => SqsError::new(
                ErrorCode::ReceiptHandleIsInvalid,
                format!("The input receipt handle \"{receipt}\" is not a valid receipt handle."),
            ),
            other => SqsError::from(other),
        }
    }

    /// The HTTP status.
    pub fn status(&self) -> u16 {
        self.code.status()
    }

    /// Whether the client caused it.
    pub fn is_sender_fault(&self) -> bool {
        self.code.is_sender_fault()
    }

    /// `Sender` or `Receiver`, as the wire names the fault.
    pub fn fault(&self) -> &'static str {
        if self.is_sender_fault() {
            "Sender"
        } else {
            "Receiver"
        }
    }
}

/// The SQS wire name of a field the engine complains about.
fn field_name(field: leaseq_core::Field) -> &'static str {
    use leaseq_core::Field::*;
    match field {
        VisibilityTimeout | LeaseVisibilityTimeout => "VisibilityTimeout",
        MessageRetentionPeriod => "MessageRetentionPeriod",
        DelaySeconds | MessageDelaySeconds => "DelaySeconds",
        MaximumMessageSize => "MaximumMessageSize",
        ReceiveMessageWaitTimeSeconds => "ReceiveMessageWaitTimeSeconds",
        RedrivePolicy => "RedrivePolicy",
        RedriveAllowPolicy => "RedriveAllowPolicy",
        MaxNumberOfMessages => "MaxNumberOfMessages",
        WaitTimeSeconds => "WaitTimeSeconds",
        MessageBody => "MessageBody",
        MessageAttributes => "MessageAttributes",
        MessageSystemAttributes => "MessageSystemAttributes",
        ReceiptHandle => "ReceiptHandle",
        QueueName => "QueueName",
        Tags => "Tags",
        Policy => "Policy",
        MessageGroupId => "MessageGroupId",
        MessageDeduplicationId => "MessageDeduplicationId",
        ReceiveRequestAttemptId => "ReceiveRequestAttemptId",
        MaxNumberOfMessagesPerSecond => "MaxNumberOfMessagesPerSecond",
        DestinationArn => "DestinationArn",
    }
}

/// Maps an engine `InvalidValue` to the SQS code of its field: queue settings are
/// `InvalidAttributeValue`, request parameters `InvalidParameterValue` (the engine names the two
/// uses of `VisibilityTimeout` and `DelaySeconds` with distinct fields).
fn invalid_value(field: leaseq_core::Field, reason: String) -> SqsError {
    use leaseq_core::Field::*;
    let name = field_name(field);
    let attribute = || {
        SqsError::new(
            ErrorCode::InvalidAttributeValue,
            format!("Invalid value for the parameter {name}. Reason: {reason}"),
        )
    };
    let parameter = || {
        if reason.starts_with("Value ") {
            // Already in SQS's "Value x for parameter y is invalid. Reason: ..." form.
            SqsError::invalid_parameter_value(reason.clone())
        } else {
            SqsError::invalid_parameter_value(format!(
                "Invalid value for parameter {name}. Reason: {reason}"
            ))
        }
    };
    match field {
        VisibilityTimeout
        | DelaySeconds
        | MessageRetentionPeriod
        | MaximumMessageSize
        | ReceiveMessageWaitTimeSeconds
        | Policy => attribute(),
        ReceiptHandle => SqsError::new(ErrorCode::ReceiptHandleIsInvalid, reason),
        QueueName => SqsError::invalid_parameter_value(reason),
        MessageBody => SqsError::new(ErrorCode::InvalidMessageContents, reason),
        // "The queue should either have ContentBasedDeduplication enabled or
        // MessageDeduplicationId provided explicitly", as SQS words it.
        MessageDeduplicationId if !reason.starts_with("Value ") => {
            SqsError::invalid_parameter_value(reason)
        }
        LeaseVisibilityTimeout
        | MessageDelaySeconds
        | RedrivePolicy
        | RedriveAllowPolicy
        | MaxNumberOfMessages
        | WaitTimeSeconds
        | MessageAttributes
        | MessageSystemAttributes
        | MessageGroupId
        | MessageDeduplicationId
        | ReceiveRequestAttemptId
        | MaxNumberOfMessagesPerSecond
        | DestinationArn
        | Tags => parameter(),
    }
}

/// The one table from engine errors to SQS errors.
impl From<leaseq_core::Error> for SqsError {
    fn from(error: leaseq_core::Error) -> SqsError {
        use leaseq_core::Error;
        let message = error.to_string();
        match error {
            Error::QueueDoesNotExist => SqsError::new(ErrorCode::QueueDoesNotExist, message),
            Error::QueueAlreadyExists(_) => SqsError::new(ErrorCode::QueueNameExists, message),
            Error::InvalidValue { field, reason } => invalid_value(field, reason),
            Error::PurgeInProgress => SqsError::new(ErrorCode::PurgeQueueInProgress, message),
            Error::MessageTooLong { .. } => SqsError::invalid_parameter_value(message),
            Error::InvalidMessageContents(reason) => {
                SqsError::new(ErrorCode::InvalidMessageContents, reason)
            }
            Error::OverLimit { .. } => SqsError::new(ErrorCode::OverLimit, message),
            Error::ReceiptHandleIsInvalid => {
                SqsError::new(ErrorCode::ReceiptHandleIsInvalid, message)
            }
            Error::ReceiptSuperseded => SqsError::invalid_parameter_value(
                "Value for parameter ReceiptHandle is invalid. Reason: The receipt handle has expired.",
            ),
            Error::MessageNotInFlight => SqsError::invalid_parameter_value(
                "Value for parameter ReceiptHandle is invalid. Reason: Message does not exist or is not available for visibility timeout change.",
            ),
            Error::LeaseTooLong { .. } => SqsError::invalid_parameter_value(format!(
                "Value for parameter VisibilityTimeout is invalid. Reason: {message}."
            )),
            Error::TooManyTags { .. } => SqsError::invalid_parameter_value(message),
            Error::MissingParameter(name) => SqsError::missing_parameter(name),
            Error::InvalidAttributeName(_) => {
                SqsError::new(ErrorCode::InvalidAttributeName, message)
            }
            Error::ResourceNotFound(reason) => SqsError::new(ErrorCode::ResourceNotFound, reason),
            Error::UnsupportedOperation(reason) => {
                SqsError::new(ErrorCode::UnsupportedOperation, reason)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use leaseq_core::{Error, Field};

    #[test]
    fn every_code_has_sqs_names() {
        for code in ErrorCode::ALL {
            assert!(code.json_type().contains('#'), "{code:?}");
            assert!(!code.query_code().is_empty());
            assert!(matches!(code.status(), 400 | 403 | 404 | 413 | 500 | 503));
        }
    }

    #[test]
    #[rustfmt::skip]
    fn the_table_matches_sqs() {
        use ErrorCode::*;
        let expected: &[(ErrorCode, &str, &str, u16, bool)] = &[
            (QueueDoesNotExist, "com.amazonaws.sqs#QueueDoesNotExist", "AWS.SimpleQueueService.NonExistentQueue", 400, true),
            (QueueNameExists, "com.amazonaws.sqs#QueueNameExists", "QueueAlreadyExists", 400, true),
            (InvalidAttributeName, "com.amazonaws.sqs#InvalidAttributeName", "InvalidAttributeName", 400, true),
            (InvalidParameterValue, "com.amazon.coral.service#InvalidParameterValueException", "InvalidParameterValue", 400, true),
            (MissingParameter, "com.amazon.coral.service#MissingRequiredParameterException", "MissingParameter", 400, true),
            (PurgeQueueInProgress, "com.amazonaws.sqs#PurgeQueueInProgress", "AWS.SimpleQueueService.PurgeQueueInProgress", 403, true),
            (OverLimit, "com.amazonaws.sqs#OverLimit", "OverLimit", 403, true),
            (ReceiptHandleIsInvalid, "com.amazonaws.sqs#ReceiptHandleIsInvalid", "ReceiptHandleIsInvalid", 404, true),
            (MessageNotInflight, "com.amazonaws.sqs#MessageNotInflight", "AWS.SimpleQueueService.MessageNotInflight", 400, true),
            (TooManyEntriesInBatchRequest, "com.amazonaws.sqs#TooManyEntriesInBatchRequest", "AWS.SimpleQueueService.TooManyEntriesInBatchRequest", 400, true),
            (EmptyBatchRequest, "com.amazonaws.sqs#EmptyBatchRequest", "AWS.SimpleQueueService.EmptyBatchRequest", 400, true),
            (BatchEntryIdsNotDistinct, "com.amazonaws.sqs#BatchEntryIdsNotDistinct", "AWS.SimpleQueueService.BatchEntryIdsNotDistinct", 400, true),
            (InvalidBatchEntryId, "com.amazonaws.sqs#InvalidBatchEntryId", "AWS.SimpleQueueService.InvalidBatchEntryId", 400, true),
            (BatchRequestTooLong, "com.amazonaws.sqs#BatchRequestTooLong", "AWS.SimpleQueueService.BatchRequestTooLong", 400, true),
            (InvalidAddress, "com.amazonaws.sqs#InvalidAddress", "InvalidAddress", 404, true),
            (InvalidSecurity, "com.amazonaws.sqs#InvalidSecurity", "InvalidSecurity", 403, true),
            (RequestThrottled, "com.amazonaws.sqs#RequestThrottled", "RequestThrottled", 403, true),
            (UnsupportedOperation, "com.amazonaws.sqs#UnsupportedOperation", "AWS.SimpleQueueService.UnsupportedOperation", 400, true),
            (MalformedQueryString, "com.amazon.coral.service#SerializationException", "MalformedQueryString", 404, true),
            (InvalidAction, "com.amazon.coral.service#UnknownOperationException", "InvalidAction", 400, true),
            (InternalError, "com.amazon.coral.service#InternalFailure", "InternalError", 500, false),
            (ServiceUnavailable, "com.amazon.coral.service#ServiceUnavailableException", "ServiceUnavailable", 503, false),
        ];
        for &(code, json_type, query_code, status, sender) in expected {
            assert_eq!(code.json_type(), json_type, "{code:?}");
            assert_eq!(code.query_code(), query_code, "{code:?}");
            assert_eq!(code.status(), status, "{code:?}");
            assert_eq!(code.is_sender_fault(), sender, "{code:?}");
        }
    }

    #[test]
    fn constructors() {
        let error = SqsError::internal("boom");
        assert_eq!((error.status(), error.fault()), (500, "Receiver"));
        assert!(!error.is_sender_fault());
        let error = SqsError::service_unavailable("later");
        assert_eq!(error.status(), 503);
        let error = SqsError::invalid_parameter_value("bad");
        assert_eq!((error.status(), error.fault()), (400, "Sender"));
        let error = SqsError::request_too_large(2_000_000);
        assert_eq!(error.status(), 413);
        assert!(error.message.contains("2000000"));
        assert_eq!(
            SqsError::missing_parameter("QueueUrl").message,
            "The request must contain the parameter QueueUrl."
        );
    }

    #[test]
    #[rustfmt::skip]
    fn core_errors_map_to_sqs_codes() {
        let cases: Vec<(Error, ErrorCode)> = vec![
            (Error::QueueDoesNotExist, ErrorCode::QueueDoesNotExist),
            (Error::QueueAlreadyExists("DelaySeconds".into()), ErrorCode::QueueNameExists),
            (Error::PurgeInProgress, ErrorCode::PurgeQueueInProgress),
            (Error::MessageTooLong { size_bytes: 9, max_bytes: 8 }, ErrorCode::InvalidParameterValue),
            (Error::InvalidMessageContents("x".into()), ErrorCode::InvalidMessageContents),
            (Error::OverLimit { in_flight_max: 3 }, ErrorCode::OverLimit),
            (Error::ReceiptHandleIsInvalid, ErrorCode::ReceiptHandleIsInvalid),
            (Error::ReceiptSuperseded, ErrorCode::InvalidParameterValue),
            (Error::MessageNotInFlight, ErrorCode::InvalidParameterValue),
            (Error::LeaseTooLong { max_seconds: 43_200 }, ErrorCode::InvalidParameterValue),
            (Error::TooManyTags { tags_max: 50 }, ErrorCode::InvalidParameterValue),
            (Error::invalid(Field::MessageRetentionPeriod, "must be between 60 and 1209600, got 1"), ErrorCode::InvalidAttributeValue),
            (Error::invalid(Field::VisibilityTimeout, "must be between 0 and 43200, got 50000"), ErrorCode::InvalidAttributeValue),
            (Error::invalid(Field::LeaseVisibilityTimeout, "Value 50000 for parameter VisibilityTimeout is invalid. Reason: x"), ErrorCode::InvalidParameterValue),
            (Error::invalid(Field::MessageDelaySeconds, "Value 901 for parameter DelaySeconds is invalid. Reason: x"), ErrorCode::InvalidParameterValue),
            (Error::invalid(Field::RedrivePolicy, "Dead letter target does not exist"), ErrorCode::InvalidParameterValue),
            (Error::invalid(Field::QueueName, "Can only include alphanumeric characters"), ErrorCode::InvalidParameterValue),
            (Error::invalid(Field::MessageAttributes, "bad"), ErrorCode::InvalidParameterValue),
            (Error::MissingParameter("MessageGroupId"), ErrorCode::MissingParameter),
            (Error::InvalidAttributeName("FifoQueue".into()), ErrorCode::InvalidAttributeName),
            (Error::invalid(Field::MessageGroupId, "Value a b for parameter MessageGroupId is invalid. Reason: x"), ErrorCode::InvalidParameterValue),
            (Error::invalid(Field::ReceiveRequestAttemptId, "Value a b for parameter ReceiveRequestAttemptId is invalid. Reason: x"), ErrorCode::InvalidParameterValue),
        ];
        for (error, code) in cases {
            let mapped = SqsError::from(error.clone());
            assert_eq!(mapped.code, code, "{error:?}");
            assert!(!mapped.message.is_empty());
        }
        let expired = SqsError::from(Error::ReceiptSuperseded);
        assert!(expired
            .message
            .ends_with("Reason: The receipt handle has expired."));
        let no_dedup = SqsError::from(Error::invalid(
            Field::MessageDeduplicationId,
            "The queue should either have ContentBasedDeduplication enabled or MessageDeduplicationId provided explicitly",
        ));
        assert_eq!(
            (no_dedup.code, no_dedup.message.as_str()),
            (ErrorCode::InvalidParameterValue, "The queue should either have ContentBasedDeduplication enabled or MessageDeduplicationId provided explicitly")
        );
        assert_eq!(
            SqsError::from(Error::MissingParameter("MessageGroupId")).message,
            "The request must contain the parameter MessageGroupId."
        );
        let with_value = SqsError::for_receipt(Error::ReceiptSuperseded, "abc");
        assert_eq!(
            with_value.message,
            "Value abc for parameter ReceiptHandle is invalid. Reason: The receipt handle has expired."
        );
        let retention = SqsError::from(Error::invalid(Field::MessageRetentionPeriod, "r"));
        assert_eq!(
            retention.message,
            "Invalid value for the parameter MessageRetentionPeriod. Reason: r"
        );
    }
}
