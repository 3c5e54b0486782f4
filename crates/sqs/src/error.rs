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
    /// A `GET` of a queue's URL without any parameters: no operation at all. SQS answers it
    /// 404 with a bare `<UnknownOperationException/>` document.
    UnknownOperation,
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
    /// The request carries no signature while the server requires one (SigV4).
    MissingAuthenticationToken,
    /// The request's signature parameters are malformed or incomplete.
    IncompleteSignature,
    /// The access key id is not one the server knows.
    InvalidClientTokenId,
    /// The signature is not the one the key's secret makes (or its scope is wrong).
    SignatureDoesNotMatch,
    /// The signature's date is more than 15 minutes from the server's time, or a presigned
    /// URL has expired.
    RequestExpired,
    /// The caller's account may not do this to the queue: another account's queue whose
    /// policy does not allow it, or an action only the queue's owner may call.
    AccessDenied,
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
    pub const ALL: [ErrorCode; 37] = [
        ErrorCode::QueueDoesNotExist,
        ErrorCode::QueueNameExists,
        ErrorCode::QueueDeletedRecently,
        ErrorCode::InvalidAttributeName,
        ErrorCode::InvalidAttributeValue,
        ErrorCode::InvalidParameterValue,
        ErrorCode::MissingParameter,
        ErrorCode::InvalidAction,
        ErrorCode::MissingAction,
        ErrorCode::UnknownOperation,
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
        ErrorCode::MissingAuthenticationToken,
        ErrorCode::IncompleteSignature,
        ErrorCode::InvalidClientTokenId,
        ErrorCode::SignatureDoesNotMatch,
        ErrorCode::RequestExpired,
        ErrorCode::AccessDenied,
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
            // AWS-validated in LocalStack's TestSqsQueryApi.test_get_without_query_returns_unknown_operation.
            UnknownOperation => wire(
                "com.amazon.coral.service#UnknownOperationException",
                "UnknownOperationException",
                404,
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
            // Authentication, from AWS's common-errors table (codes and statuses: the SQS API
            // reference's "Common Errors"; SignatureDoesNotMatch's 403 and RequestExpired's 400
            // as SQS answers them). JSON names are the service framework's (`coral`) exception
            // shapes; SDKs of the JSON era dispatch on the Query code in `x-amzn-query-error`.
            MissingAuthenticationToken => wire(
                "com.amazon.coral.service#MissingAuthenticationTokenException",
                "MissingAuthenticationToken",
                403,
                true,
            ),
            IncompleteSignature => wire(
                "com.amazon.coral.service#IncompleteSignatureException",
                "IncompleteSignature",
                400,
                true,
            ),
            InvalidClientTokenId => wire(
                "com.amazon.coral.service#UnrecognizedClientException",
                "InvalidClientTokenId",
                403,
                true,
            ),
            SignatureDoesNotMatch => wire(
                "com.amazon.coral.service#InvalidSignatureException",
                "SignatureDoesNotMatch",
                403,
                true,
            ),
            RequestExpired => wire(
                "com.amazon.coral.service#RequestExpired",
                "RequestExpired",
                400,
                true,
            ),
            // The Query code and the 403 as SQS answers a refused request (`Sender`, `<Code>
            // AccessDenied</Code>`, "Status Code: 403; Error Code: AccessDenied" in the reports
            // of SDK users, e.g. aws/aws-sdk-php#188, and an SDK's `httpStatusCode: 403` in
            // island-is/island.is#7812); the JSON name is the common errors table's
            // `AccessDeniedException` (SQS API reference, "Common Errors") in the service
            // framework's namespace, like the other generic errors above.
            AccessDenied => wire(
                "com.amazon.coral.service#AccessDeniedException",
                "AccessDenied",
                403,
                true,
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

    /// A batch entry's engine error, as `SendMessageBatch` words it: an entry larger than the
    /// queue's `MaximumMessageSize` fails alone with "cannot be validated" where `SendMessage`
    /// says "are invalid" (recorded from AWS: LocalStack's `test_send_batch_message_size`).
    pub fn for_batch_entry(error: leaseq_core::Error) -> SqsError {
        match error {
            leaseq_core::Error::MessageTooLong { max_bytes, .. } => {
                SqsError::invalid_parameter_value(format!(
                    "One or more parameters cannot be validated. Reason: Message must be shorter than {max_bytes} bytes."
                ))
            }
            other => SqsError::from(other),
        }
    }

    /// The engine's error about a `SendMessageBatch` as a whole (see
    /// `leaseq_core::Engine::check_send_batch`): a FIFO entry without a `MessageGroupId` is
    /// `InvalidParameterValue` there, with `SendMessage`'s sentence, where `SendMessage` answers
    /// `MissingParameter` (recorded from AWS: LocalStack's
    /// `test_send_batch_missing_message_group_id_for_fifo_queue`; quoted from AWS in
    /// lumigo-io/lumigo-CLI#100, whose DLQ replay sends batches). Other errors are mapped as by
    /// `From`.
    pub fn for_batch_request(error: leaseq_core::Error) -> SqsError {
        match error {
            leaseq_core::Error::Missing(leaseq_core::Field::MessageGroupId) => {
                SqsError::invalid_parameter_value(
                    "The request must contain the parameter MessageGroupId.",
                )
            }
            other => SqsError::from(other),
        }
    }

    /// The engine's error about queue `name`, with the name where SQS puts it: a second purge
    /// within 60 seconds names the queue (recorded from AWS: LocalStack's
    /// `test_successive_purge_calls_fail`, "Only one PurgeQueue operation on <queue-name> is
    /// allowed every 60 seconds."). Other errors are mapped as by `From`.
    pub fn for_queue(error: leaseq_core::Error, name: &str) -> SqsError {
        match error {
            leaseq_core::Error::PurgeInProgress => SqsError::new(
                ErrorCode::PurgeQueueInProgress,
                format!("Only one PurgeQueue operation on {name} is allowed every 60 seconds."),
            ),
            other => SqsError::from(other),
        }
    }

    /// An action SQS does not have, or one that is not valid at the address it was sent to (a
    /// queue's URL for `CreateQueue`): "The action FooBar is not valid for this endpoint."
    /// (AWS-validated in LocalStack's `TestSqsQueryApi.test_invalid_action_raises_exception`).
    pub fn invalid_action(action: &str) -> SqsError {
        SqsError::new(
            ErrorCode::InvalidAction,
            format!("The action {action} is not valid for this endpoint."),
        )
    }

    /// A message attribute with `StringListValues` or `BinaryListValues`, which SQS reserves:
    /// `AWS.SimpleQueueService.UnsupportedOperation: Message attribute list values in
    /// SendMessageBatch operation are not supported.` (as AWS answered the users of
    /// ruby-shoryuken/shoryuken#769 and lumigo-io/lumigo-CLI#94). `operation` is the action.
    pub fn list_values_unsupported(operation: &str) -> SqsError {
        SqsError::new(
            ErrorCode::UnsupportedOperation,
            format!("Message attribute list values in {operation} operation are not supported."),
        )
    }

    /// A `TaskHandle` that is not one (not base64 of a JSON object with `taskId` and
    /// `sourceArn`), as AWS answers it (recorded: LocalStack's
    /// `test_cancel_with_invalid_task_handle`).
    pub fn invalid_task_handle() -> SqsError {
        SqsError::invalid_parameter_value("Value for parameter TaskHandle is invalid.")
    }

    /// AWS's refusal of a request its account may not make. The message the client reads
    /// names the endpoint (see [`SqsError::message_in`]).
    pub fn access_denied() -> SqsError {
        SqsError::new(ErrorCode::AccessDenied, ACCESS_DENIED)
    }

    /// The message the client reads in `protocol`. SQS words one error differently per
    /// protocol: a missing queue is "The specified queue does not exist." over JSON and "The
    /// specified queue does not exist for this wsdl version." over Query (both recorded from
    /// AWS: LocalStack's `test_non_existent_queue` and `TestSqsQueryApi.test_get_on_deleted_queue_fails`).
    ///
    /// A refusal names the endpoint the request was sent to, as SQS's does: `Access to the
    /// resource https://sqs.us-east-1.amazonaws.com/ is denied.` (the message SDK users report
    /// with `AccessDenied`, e.g. aws/aws-sdk-php#188, bbc/sqs-consumer#225).
    pub fn message_in(
        &self,
        protocol: crate::Protocol,
        base_url: &str,
    ) -> std::borrow::Cow<'_, str> {
        if self.code == ErrorCode::AccessDenied && self.message == ACCESS_DENIED {
            return std::borrow::Cow::Owned(format!(
                "Access to the resource {base_url}/ is denied."
            ));
        }
        if protocol == crate::Protocol::Query
            && self.code == ErrorCode::QueueDoesNotExist
            && self.message == QUEUE_DOES_NOT_EXIST
        {
            return std::borrow::Cow::Borrowed(QUEUE_DOES_NOT_EXIST_QUERY);
        }
        std::borrow::Cow::Borrowed(&self.message)
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

/// A refusal, before [`SqsError::message_in`] names the endpoint in it.
const ACCESS_DENIED: &str = "Access to the resource is denied.";
/// A missing queue over JSON.
const QUEUE_DOES_NOT_EXIST: &str = "The specified queue does not exist.";
/// A missing queue over Query.
const QUEUE_DOES_NOT_EXIST_QUERY: &str =
    "The specified queue does not exist for this wsdl version.";

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
        SourceArn => "SourceArn",
        TaskHandle => "TaskHandle",
        FairInFlightMin => "LeaseqFairInFlightMin",
        FairProcessingWindowSeconds => "LeaseqFairProcessingWindowSeconds",
        FairComparableFactor => "LeaseqFairComparableFactor",
    }
}

/// Whether a field is a queue setting (its errors are `InvalidAttributeValue`) rather than a
/// request parameter (`InvalidParameterValue`). The engine names the two uses of
/// `VisibilityTimeout` and `DelaySeconds` with distinct fields.
fn is_queue_setting(field: leaseq_core::Field) -> bool {
    use leaseq_core::Field::*;
    matches!(
        field,
        VisibilityTimeout
            | DelaySeconds
            | MessageRetentionPeriod
            | MaximumMessageSize
            | ReceiveMessageWaitTimeSeconds
            | Policy
            | FairInFlightMin
            | FairProcessingWindowSeconds
            | FairComparableFactor
    )
}

/// An invalid value of `field` with a reason but not the value: a queue setting's
/// `InvalidAttributeValue` ("Invalid value for the parameter …") or a request parameter's
/// `InvalidParameterValue` ("Invalid value for parameter …"), as SQS words each.
fn invalid_field(field: leaseq_core::Field, reason: impl fmt::Display) -> SqsError {
    let name = field_name(field);
    if is_queue_setting(field) {
        SqsError::new(
            ErrorCode::InvalidAttributeValue,
            format!("Invalid value for the parameter {name}. Reason: {reason}"),
        )
    } else {
        SqsError::invalid_parameter_value(format!(
            "Invalid value for parameter {name}. Reason: {reason}"
        ))
    }
}

/// A number out of range. Queue settings and `maxReceiveCount` say "must be between"; the
/// request parameters use SQS's "Value x for parameter y is invalid" sentences.
fn out_of_range(field: leaseq_core::Field, value: u64, min: u64, max: u64) -> SqsError {
    use leaseq_core::Field::*;
    let name = field_name(field);
    let reason = match field {
        MessageDelaySeconds => format!("DelaySeconds must be >= {min} and <= {max}."),
        MaxNumberOfMessages => format!("Must be between {min} and {max}, if provided."),
        _ if is_queue_setting(field) || field == RedrivePolicy => {
            return invalid_field(
                field,
                format!("must be between {min} and {max}, got {value}"),
            );
        }
        _ => format!("Must be between {min} and {max}."),
    };
    SqsError::invalid_parameter(name, value, &reason)
}

/// Too many entries of a field.
fn too_many(field: leaseq_core::Field, count: usize, max: usize) -> SqsError {
    match field {
        leaseq_core::Field::Tags => {
            SqsError::invalid_parameter_value(format!("Too many tags (limit {max})."))
        }
        leaseq_core::Field::MessageAttributes => invalid_field(
            field,
            format!("Number of message attributes [{count}] exceeds the allowed maximum [{max}]."),
        ),
        _ => invalid_field(
            field,
            format!("{count} exceeds the allowed maximum [{max}]."),
        ),
    }
}

/// A text field longer than allowed (today only a queue's `Policy`, whose bound is leaseq's own).
fn too_long(field: leaseq_core::Field, len: usize, max: usize) -> SqsError {
    let reason = match field {
        leaseq_core::Field::Policy => {
            format!("the policy is {len} bytes long; at most {max} are allowed")
        }
        _ => format!("it is {len} bytes long; at most {max} are allowed"),
    };
    invalid_field(field, reason)
}

/// An identifier with a bad length or character: a queue name in `CreateQueue`'s words, a FIFO
/// group, deduplication or attempt id in `SendMessage`'s and `ReceiveMessage`'s.
fn malformed(field: leaseq_core::Field, value: &str, length_max: usize) -> SqsError {
    let name = field_name(field);
    match field {
        leaseq_core::Field::QueueName => SqsError::invalid_parameter_value(format!(
            "Can only include alphanumeric characters, hyphens, or underscores. 1 to {length_max} in length"
        )),
        _ => SqsError::invalid_parameter(
            name,
            value,
            &format!(
                "{name} can only include alphanumeric and punctuation characters. 1 to {length_max} in length."
            ),
        ),
    }
}

/// A character outside XML 1.0's set. SQS's sentence names the message body even when the
/// character is in an attribute value.
fn invalid_character(field: leaseq_core::Field, character: char) -> SqsError {
    let reason = format!(
        "Invalid binary character '#x{:X}' was found in the message body, the set of allowed characters is #x9 | #xA | #xD | #x20 to #xD7FF | #xE000 to #xFFFD | #x10000 to #x10FFFF",
        character as u32
    );
    match field {
        leaseq_core::Field::MessageBody => SqsError::new(ErrorCode::InvalidMessageContents, reason),
        other => invalid_field(other, reason),
    }
}

/// One malformed message attribute, as `SendMessage` reports it.
fn invalid_message_attribute(name: &str, problem: &leaseq_core::AttributeProblem) -> SqsError {
    use leaseq_core::AttributeProblem::*;
    // AWS's whole sentences, without the "Invalid value for parameter" frame. An empty name as
    // AWS answered SDK users (aws/aws-sdk-php#694, aws/aws-sdk-go#178, aws/aws-sdk-java#1030);
    // a name's other problems as two reimplementations of AWS's answers word them alike
    // (LocalStack's SNS provider, whose message attributes follow the same rules, and
    // Eucalyptus's SQS service): AWS has not published those. An unknown type as an SDK user
    // quoted it (grafana/k6-jslib-aws#65, 2023), an empty value as recorded from AWS
    // (LocalStack's `test_send_message_with_empty_string_attribute`).
    let sentence = match problem {
        NameEmpty => "The request must contain non-empty message attribute name.".to_string(),
        NameReservedPrefix => {
            "Message attribute names starting with 'AWS.' or 'Amazon.' are reserved for use by Amazon."
                .to_string()
        }
        NameLeadingPeriod => {
            "Invalid message attribute name starting with character '.' was found.".to_string()
        }
        NameTrailingPeriod => {
            "Invalid message attribute name ending with character '.' was found.".to_string()
        }
        NameSuccessivePeriods => {
            "Message attribute name can not have successive '.' character.".to_string()
        }
        NameCharacter { character } => format!(
            "Invalid non-alphanumeric character '#x{:X}' was found in the message attribute name. Can only include alphanumeric characters, hyphens, underscores, or dots.",
            *character as u32
        ),
        UnknownDataType => format!(
            "The type of message (user) attribute '{name}' is invalid. You must use only the following supported type prefixes: Binary, Number, String."
        ),
        MissingValue { data_type } => format!(
            "Message (user) attribute '{name}' must contain a non-empty value of type '{data_type}'."
        ),
        // AWS publishes no sentence for these three: ours, in the parameter frame.
        NameLength { length_max } => {
            return invalid_field(
                leaseq_core::Field::MessageAttributes,
                format!("Message attribute name '{name}' must be 1 to {length_max} characters long."),
            )
        }
        DataTypeLength { length_max } => {
            return invalid_field(
                leaseq_core::Field::MessageAttributes,
                format!("Message attribute '{name}' has a data type longer than {length_max} characters."),
            )
        }
        NotANumber => {
            return invalid_field(
                leaseq_core::Field::MessageAttributes,
                format!("Could not cast message attribute '{name}' value to number."),
            )
        }
    };
    SqsError::invalid_parameter_value(sentence)
}

/// A required field that is missing. SQS answers an empty body as a missing one
/// (`MissingParameter`, recorded from AWS in LocalStack's `test_send_empty_message` snapshot),
/// and a FIFO send without a deduplication id (on a queue without content-based deduplication)
/// with its own sentence.
fn missing(field: leaseq_core::Field) -> SqsError {
    match field {
        leaseq_core::Field::MessageDeduplicationId => SqsError::invalid_parameter_value(
            "The queue should either have ContentBasedDeduplication enabled or MessageDeduplicationId provided explicitly",
        ),
        other => SqsError::missing_parameter(field_name(other)),
    }
}

/// A queue or task that a field names and that does not exist.
fn not_found(field: leaseq_core::Field) -> SqsError {
    match field {
        leaseq_core::Field::RedrivePolicy => {
            invalid_field(field, "Dead letter target does not exist")
        }
        // Recorded from AWS: LocalStack's `test_cancel_with_invalid_task_id_in_task_handle`.
        leaseq_core::Field::TaskHandle => {
            SqsError::new(ErrorCode::ResourceNotFound, "Task does not exist.")
        }
        other => SqsError::new(
            ErrorCode::ResourceNotFound,
            format!(
                "The resource that you specified for the {} parameter doesn't exist.",
                field_name(other)
            ),
        ),
    }
}

/// A dead-letter queue (`RedrivePolicy`) or move destination (`DestinationArn`) refused.
fn invalid_target(
    field: leaseq_core::Field,
    queue: &str,
    target: &str,
    source_fifo: bool,
    problem: leaseq_core::TargetProblem,
) -> SqsError {
    use leaseq_core::TargetProblem::*;
    let dead_letter = field == leaseq_core::Field::RedrivePolicy;
    let kind = if source_fifo { "a FIFO" } else { "a standard" };
    let reason = match (dead_letter, problem) {
        (true, OtherKind) => {
            format!("The dead-letter queue of {kind} queue must also be {kind} queue.")
        }
        (true, Itself) => "A queue cannot be its own dead letter queue".to_string(),
        (true, NotAllowed) => format!(
            "The RedriveAllowPolicy of {target} does not allow {queue} to use it as a dead letter queue"
        ),
        (false, Itself) => "The destination queue must differ from the source queue.".to_string(),
        (false, OtherKind) => format!(
            "The destination queue {target} is not of the same kind (FIFO or standard) as the source queue."
        ),
        (false, NotAllowed) => format!(
            "The RedriveAllowPolicy of {queue} does not allow moving messages to {target}."
        ),
    };
    invalid_field(field, reason)
}

/// The errors about a move task's state. SQS's two are `InvalidParameterValue` (recorded from
/// AWS: LocalStack's `test_source_needs_redrive_policy` and `test_start_multiple_move_tasks`);
/// leaseq's own (pause, resume, limits, fail-now) are `UnsupportedOperation`.
fn move_refused(error: &leaseq_core::Error) -> SqsError {
    use leaseq_core::Error;
    let message = match error {
        Error::NotADeadLetterQueue => {
            return SqsError::invalid_parameter_value(
                "Source queue must be configured as a Dead Letter Queue.",
            )
        }
        Error::MoveTaskActive => return SqsError::invalid_parameter_value(
            "There is already a task running. Only one active task is allowed for a source queue arn at a given time.",
        ),
        Error::MoveTaskFinished { status } => {
            format!("The task is {status:?}: only a running or paused task can change.")
        }
        Error::MoveTaskAtLimit { .. } => {
            "The task reached its message limit: raise or remove the limit to resume it.".to_string()
        }
        _ => "The queue has no dead-letter queue (RedrivePolicy) to fail a message to.".to_string(),
    };
    SqsError::new(ErrorCode::UnsupportedOperation, message)
}

/// The one table from engine errors to SQS errors: the code, and the sentence built from the
/// error's data.
impl From<leaseq_core::Error> for SqsError {
    fn from(error: leaseq_core::Error) -> SqsError {
        use leaseq_core::Error;
        match error {
            Error::QueueDoesNotExist => {
                SqsError::new(ErrorCode::QueueDoesNotExist, QUEUE_DOES_NOT_EXIST)
            }
            Error::QueueAlreadyExists(setting) => SqsError::new(
                ErrorCode::QueueNameExists,
                format!("A queue already exists with the same name and a different value for attribute {setting}"),
            ),
            Error::OutOfRange { field, value, min, max } => out_of_range(field, value, min, max),
            Error::TooLong { field, len, max } => too_long(field, len, max),
            Error::TooMany { field, count, max } => too_many(field, count, max),
            Error::Malformed { field, value, length_max } => malformed(field, &value, length_max),
            Error::FifoNameMismatch { length_max, .. } => SqsError::invalid_parameter_value(format!(
                "The name of a FIFO queue can only include alphanumeric characters, hyphens, or underscores, must end with .fifo suffix and be 1 to {length_max} in length."
            )),
            Error::NotForQueueType { field, value } => SqsError::invalid_parameter(
                field_name(field),
                value,
                "The request include parameter that is not valid for this queue type.",
            ),
            Error::InvalidCharacter { field, character } => invalid_character(field, character),
            Error::InvalidMessageAttribute { name, problem } => {
                invalid_message_attribute(&name, &problem)
            }
            Error::Missing(field) => missing(field),
            Error::NotFound(field) => not_found(field),
            Error::InvalidTarget { field, queue, target, source_fifo, problem } => {
                invalid_target(field, &queue, &target, source_fifo, problem)
            }
            Error::PurgeInProgress => SqsError::new(
                ErrorCode::PurgeQueueInProgress,
                "Only one PurgeQueue operation on a queue is allowed every 60 seconds.",
            ),
            // The API reference's words (`API_CreateQueue`, Errors: QueueDeletedRecently).
            Error::QueueDeletedRecently => SqsError::new(
                ErrorCode::QueueDeletedRecently,
                "You must wait 60 seconds after deleting a queue before you can create another with the same name.",
            ),
            Error::MessageTooLong { max_bytes, .. } => SqsError::invalid_parameter_value(format!(
                "One or more parameters are invalid. Reason: Message must be shorter than {max_bytes} bytes."
            )),
            Error::OverLimit { in_flight_max } => SqsError::new(
                ErrorCode::OverLimit,
                format!("Too many messages in flight (limit {in_flight_max})."),
            ),
            Error::ReceiptHandleIsInvalid => SqsError::new(
                ErrorCode::ReceiptHandleIsInvalid,
                "The input receipt handle is invalid.",
            ),
            Error::ReceiptSuperseded => SqsError::invalid_parameter_value(
                "Value for parameter ReceiptHandle is invalid. Reason: The receipt handle has expired.",
            ),
            Error::MessageNotInFlight => SqsError::invalid_parameter_value(
                "Value for parameter ReceiptHandle is invalid. Reason: Message does not exist or is not available for visibility timeout change.",
            ),
            Error::LeaseTooLong { max_seconds } => SqsError::invalid_parameter_value(format!(
                "Value for parameter VisibilityTimeout is invalid. Reason: Total VisibilityTimeout for the message is beyond the limit [{max_seconds} seconds]."
            )),
            Error::UnknownSetting(name) => SqsError::new(
                ErrorCode::InvalidAttributeName,
                format!("Unknown Attribute {name}."),
            ),
            Error::QueueTypeChange => SqsError::new(
                ErrorCode::InvalidAttributeValue,
                "Invalid value for the parameter FifoQueue. Reason: Modifying queue type is not supported.",
            ),
            Error::NotADeadLetterQueue
            | Error::MoveTaskActive
            | Error::MoveTaskFinished { .. }
            | Error::MoveTaskAtLimit { .. }
            | Error::NoDeadLetterQueue => move_refused(&error),
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

    /// The code and exact sentence a client receives for an engine error.
    fn wire(error: Error) -> (ErrorCode, String) {
        let mapped = SqsError::from(error);
        (mapped.code, mapped.message)
    }

    /// Pins every engine error's code and sentence. The sentences are SQS's where SQS documents
    /// or sends one: the AWS SQS API reference (`API_ReceiveMessage`, `API_SendMessage`,
    /// `API_ChangeMessageVisibility`, `API_CreateQueue`, `API_SetQueueAttributes`,
    /// `API_PurgeQueue`, `API_StartMessageMoveTask`, "Common Errors") names the codes and the
    /// bounds (MaxNumberOfMessages 1 to 10, VisibilityTimeout 0 to 43 200, DelaySeconds 0 to
    /// 900, group and deduplication ids of 1 to 128 alphanumeric and punctuation characters, the
    /// XML 1.0 character set of a body, one purge every 60 seconds), and the "Value … for
    /// parameter … is invalid. Reason: …" form is the one SQS's service framework sends.
    /// Sentences about leaseq's own bounds and actions (a policy's size, move-task states) are
    /// leaseq's.
    #[test]
    #[rustfmt::skip]
    fn every_core_error_has_its_sqs_sentence() {
        use leaseq_core::{AttributeProblem, MoveStatus, TargetProblem};
        use ErrorCode::*;
        let target = |field, problem, source_fifo| Error::InvalidTarget {
            field, queue: "src".into(), target: "dst".into(), source_fifo, problem,
        };
        let attribute = |problem| Error::InvalidMessageAttribute { name: "a".into(), problem };
        let cases: Vec<(Error, ErrorCode, &str)> = vec![
            (Error::QueueDoesNotExist, QueueDoesNotExist, "The specified queue does not exist."),
            (Error::QueueAlreadyExists("DelaySeconds".into()), QueueNameExists,
             "A queue already exists with the same name and a different value for attribute DelaySeconds"),
            (Error::out_of_range(Field::VisibilityTimeout, 50_000u32, 0u32, 43_200u32), InvalidAttributeValue,
             "Invalid value for the parameter VisibilityTimeout. Reason: must be between 0 and 43200, got 50000"),
            (Error::out_of_range(Field::MessageRetentionPeriod, 59u32, 60u32, 1_209_600u32), InvalidAttributeValue,
             "Invalid value for the parameter MessageRetentionPeriod. Reason: must be between 60 and 1209600, got 59"),
            (Error::out_of_range(Field::DelaySeconds, 901u32, 0u32, 900u32), InvalidAttributeValue,
             "Invalid value for the parameter DelaySeconds. Reason: must be between 0 and 900, got 901"),
            (Error::out_of_range(Field::MaximumMessageSize, 1023u32, 1024u32, 1_048_576u32), InvalidAttributeValue,
             "Invalid value for the parameter MaximumMessageSize. Reason: must be between 1024 and 1048576, got 1023"),
            (Error::out_of_range(Field::ReceiveMessageWaitTimeSeconds, 21u32, 0u32, 20u32), InvalidAttributeValue,
             "Invalid value for the parameter ReceiveMessageWaitTimeSeconds. Reason: must be between 0 and 20, got 21"),
            (Error::out_of_range(Field::RedrivePolicy, 1001u32, 1u32, 1000u32), InvalidParameterValue,
             "Invalid value for parameter RedrivePolicy. Reason: must be between 1 and 1000, got 1001"),
            (Error::out_of_range(Field::MessageDelaySeconds, 901u32, 0u32, 900u32), InvalidParameterValue,
             "Value 901 for parameter DelaySeconds is invalid. Reason: DelaySeconds must be >= 0 and <= 900."),
            (Error::out_of_range(Field::MaxNumberOfMessages, 11u32, 1u32, 10u32), InvalidParameterValue,
             "Value 11 for parameter MaxNumberOfMessages is invalid. Reason: Must be between 1 and 10, if provided."),
            (Error::out_of_range(Field::LeaseVisibilityTimeout, 43_201u32, 0u32, 43_200u32), InvalidParameterValue,
             "Value 43201 for parameter VisibilityTimeout is invalid. Reason: Must be between 0 and 43200."),
            (Error::out_of_range(Field::MaxNumberOfMessagesPerSecond, 501u32, 1u32, 500u32), InvalidParameterValue,
             "Value 501 for parameter MaxNumberOfMessagesPerSecond is invalid. Reason: Must be between 1 and 500."),
            (Error::TooLong { field: Field::Policy, len: 9, max: 8 }, InvalidAttributeValue,
             "Invalid value for the parameter Policy. Reason: the policy is 9 bytes long; at most 8 are allowed"),
            (Error::TooMany { field: Field::Tags, count: 51, max: 50 }, InvalidParameterValue, "Too many tags (limit 50)."),
            (Error::TooMany { field: Field::MessageAttributes, count: 11, max: 10 }, InvalidParameterValue,
             "Invalid value for parameter MessageAttributes. Reason: Number of message attributes [11] exceeds the allowed maximum [10]."),
            (Error::Malformed { field: Field::QueueName, value: "a/b".into(), length_max: 80 }, InvalidParameterValue,
             "Can only include alphanumeric characters, hyphens, or underscores. 1 to 80 in length"),
            (Error::Malformed { field: Field::MessageGroupId, value: "a b".into(), length_max: 128 }, InvalidParameterValue,
             "Value a b for parameter MessageGroupId is invalid. Reason: MessageGroupId can only include alphanumeric and punctuation characters. 1 to 128 in length."),
            (Error::Malformed { field: Field::MessageDeduplicationId, value: "é".into(), length_max: 128 }, InvalidParameterValue,
             "Value é for parameter MessageDeduplicationId is invalid. Reason: MessageDeduplicationId can only include alphanumeric and punctuation characters. 1 to 128 in length."),
            (Error::Malformed { field: Field::ReceiveRequestAttemptId, value: "a b".into(), length_max: 128 }, InvalidParameterValue,
             "Value a b for parameter ReceiveRequestAttemptId is invalid. Reason: ReceiveRequestAttemptId can only include alphanumeric and punctuation characters. 1 to 128 in length."),
            (Error::FifoNameMismatch { name: "jobs.fifo".into(), length_max: 80 }, InvalidParameterValue,
             "The name of a FIFO queue can only include alphanumeric characters, hyphens, or underscores, must end with .fifo suffix and be 1 to 80 in length."),
            (Error::NotForQueueType { field: Field::MessageDeduplicationId, value: "d".into() }, InvalidParameterValue,
             "Value d for parameter MessageDeduplicationId is invalid. Reason: The request include parameter that is not valid for this queue type."),
            (Error::NotForQueueType { field: Field::MessageDelaySeconds, value: "5".into() }, InvalidParameterValue,
             "Value 5 for parameter DelaySeconds is invalid. Reason: The request include parameter that is not valid for this queue type."),
            (Error::InvalidCharacter { field: Field::MessageBody, character: '\u{0}' }, InvalidMessageContents,
             "Invalid binary character '#x0' was found in the message body, the set of allowed characters is #x9 | #xA | #xD | #x20 to #xD7FF | #xE000 to #xFFFD | #x10000 to #x10FFFF"),
            (Error::InvalidCharacter { field: Field::MessageSystemAttributes, character: '\u{FFFE}' }, InvalidParameterValue,
             "Invalid value for parameter MessageSystemAttributes. Reason: Invalid binary character '#xFFFE' was found in the message body, the set of allowed characters is #x9 | #xA | #xD | #x20 to #xD7FF | #xE000 to #xFFFD | #x10000 to #x10FFFF"),
            (Error::InvalidCharacter { field: Field::MessageAttributes, character: '\u{1}' }, InvalidParameterValue,
             "Invalid value for parameter MessageAttributes. Reason: Invalid binary character '#x1' was found in the message body, the set of allowed characters is #x9 | #xA | #xD | #x20 to #xD7FF | #xE000 to #xFFFD | #x10000 to #x10FFFF"),
            (attribute(AttributeProblem::NameLength { length_max: 256 }), InvalidParameterValue,
             "Invalid value for parameter MessageAttributes. Reason: Message attribute name 'a' must be 1 to 256 characters long."),
            (attribute(AttributeProblem::NameEmpty), InvalidParameterValue,
             "The request must contain non-empty message attribute name."),
            (attribute(AttributeProblem::NameReservedPrefix), InvalidParameterValue,
             "Message attribute names starting with 'AWS.' or 'Amazon.' are reserved for use by Amazon."),
            (attribute(AttributeProblem::NameLeadingPeriod), InvalidParameterValue,
             "Invalid message attribute name starting with character '.' was found."),
            (attribute(AttributeProblem::NameTrailingPeriod), InvalidParameterValue,
             "Invalid message attribute name ending with character '.' was found."),
            (attribute(AttributeProblem::NameSuccessivePeriods), InvalidParameterValue,
             "Message attribute name can not have successive '.' character."),
            (attribute(AttributeProblem::NameCharacter { character: '§' }), InvalidParameterValue,
             "Invalid non-alphanumeric character '#xA7' was found in the message attribute name. Can only include alphanumeric characters, hyphens, underscores, or dots."),
            (attribute(AttributeProblem::DataTypeLength { length_max: 256 }), InvalidParameterValue,
             "Invalid value for parameter MessageAttributes. Reason: Message attribute 'a' has a data type longer than 256 characters."),
            (attribute(AttributeProblem::UnknownDataType), InvalidParameterValue,
             "The type of message (user) attribute 'a' is invalid. You must use only the following supported type prefixes: Binary, Number, String."),
            (attribute(AttributeProblem::MissingValue { data_type: "String".into() }), InvalidParameterValue,
             "Message (user) attribute 'a' must contain a non-empty value of type 'String'."),
            (attribute(AttributeProblem::NotANumber), InvalidParameterValue,
             "Invalid value for parameter MessageAttributes. Reason: Could not cast message attribute 'a' value to number."),
            (Error::Missing(Field::MessageBody), MissingParameter, "The request must contain the parameter MessageBody."),
            (Error::Missing(Field::MessageGroupId), MissingParameter, "The request must contain the parameter MessageGroupId."),
            (Error::Missing(Field::MessageDeduplicationId), InvalidParameterValue,
             "The queue should either have ContentBasedDeduplication enabled or MessageDeduplicationId provided explicitly"),
            (Error::NotFound(Field::RedrivePolicy), InvalidParameterValue,
             "Invalid value for parameter RedrivePolicy. Reason: Dead letter target does not exist"),
            (Error::NotFound(Field::SourceArn), ResourceNotFound,
             "The resource that you specified for the SourceArn parameter doesn't exist."),
            (Error::NotFound(Field::DestinationArn), ResourceNotFound,
             "The resource that you specified for the DestinationArn parameter doesn't exist."),
            (Error::NotFound(Field::TaskHandle), ResourceNotFound, "Task does not exist."),
            (target(Field::RedrivePolicy, TargetProblem::OtherKind, false), InvalidParameterValue,
             "Invalid value for parameter RedrivePolicy. Reason: The dead-letter queue of a standard queue must also be a standard queue."),
            (target(Field::RedrivePolicy, TargetProblem::OtherKind, true), InvalidParameterValue,
             "Invalid value for parameter RedrivePolicy. Reason: The dead-letter queue of a FIFO queue must also be a FIFO queue."),
            (target(Field::RedrivePolicy, TargetProblem::Itself, false), InvalidParameterValue,
             "Invalid value for parameter RedrivePolicy. Reason: A queue cannot be its own dead letter queue"),
            (target(Field::RedrivePolicy, TargetProblem::NotAllowed, false), InvalidParameterValue,
             "Invalid value for parameter RedrivePolicy. Reason: The RedriveAllowPolicy of dst does not allow src to use it as a dead letter queue"),
            (target(Field::DestinationArn, TargetProblem::Itself, false), InvalidParameterValue,
             "Invalid value for parameter DestinationArn. Reason: The destination queue must differ from the source queue."),
            (target(Field::DestinationArn, TargetProblem::OtherKind, false), InvalidParameterValue,
             "Invalid value for parameter DestinationArn. Reason: The destination queue dst is not of the same kind (FIFO or standard) as the source queue."),
            (target(Field::DestinationArn, TargetProblem::NotAllowed, false), InvalidParameterValue,
             "Invalid value for parameter DestinationArn. Reason: The RedriveAllowPolicy of src does not allow moving messages to dst."),
            (Error::PurgeInProgress, PurgeQueueInProgress, "Only one PurgeQueue operation on a queue is allowed every 60 seconds."),
            (Error::QueueDeletedRecently, QueueDeletedRecently,
             "You must wait 60 seconds after deleting a queue before you can create another with the same name."),
            (Error::MessageTooLong { size_bytes: 9, max_bytes: 8 }, InvalidParameterValue,
             "One or more parameters are invalid. Reason: Message must be shorter than 8 bytes."),
            (Error::OverLimit { in_flight_max: 3 }, OverLimit, "Too many messages in flight (limit 3)."),
            (Error::ReceiptHandleIsInvalid, ReceiptHandleIsInvalid, "The input receipt handle is invalid."),
            (Error::ReceiptSuperseded, InvalidParameterValue,
             "Value for parameter ReceiptHandle is invalid. Reason: The receipt handle has expired."),
            (Error::MessageNotInFlight, InvalidParameterValue,
             "Value for parameter ReceiptHandle is invalid. Reason: Message does not exist or is not available for visibility timeout change."),
            (Error::LeaseTooLong { max_seconds: 43_200 }, InvalidParameterValue,
             "Value for parameter VisibilityTimeout is invalid. Reason: Total VisibilityTimeout for the message is beyond the limit [43200 seconds]."),
            (Error::UnknownSetting("FifoQueue".into()), InvalidAttributeName, "Unknown Attribute FifoQueue."),
            // Not in AWS's documentation; as LocalStack (localstack/services/sqs/models.py) and
            // YDB's SQS answer SetQueueAttributes FifoQueue=false on a FIFO queue.
            (Error::QueueTypeChange, InvalidAttributeValue,
             "Invalid value for the parameter FifoQueue. Reason: Modifying queue type is not supported."),
            (Error::NotADeadLetterQueue, InvalidParameterValue, "Source queue must be configured as a Dead Letter Queue."),
            (Error::MoveTaskActive, InvalidParameterValue,
             "There is already a task running. Only one active task is allowed for a source queue arn at a given time."),
            (Error::MoveTaskFinished { status: MoveStatus::Completed }, UnsupportedOperation,
             "The task is Completed: only a running or paused task can change."),
            (Error::MoveTaskAtLimit { limit: 5 }, UnsupportedOperation,
             "The task reached its message limit: raise or remove the limit to resume it."),
            (Error::NoDeadLetterQueue, UnsupportedOperation,
             "The queue has no dead-letter queue (RedrivePolicy) to fail a message to."),
        ];
        for (error, code, message) in cases {
            assert!(error.is_client_fault());
            assert_eq!(wire(error.clone()), (code, message.to_string()), "{error:?}");
        }
    }

    #[test]
    fn receipt_errors_name_the_receipt() {
        let with_value = SqsError::for_receipt(Error::ReceiptSuperseded, "abc");
        assert_eq!(
            with_value.message,
            "Value abc for parameter ReceiptHandle is invalid. Reason: The receipt handle has expired."
        );
        let invalid = SqsError::for_receipt(Error::ReceiptHandleIsInvalid, "abc");
        assert_eq!(
            (invalid.code, invalid.message.as_str()),
            (
                ErrorCode::ReceiptHandleIsInvalid,
                "The input receipt handle \"abc\" is not a valid receipt handle."
            )
        );
    }

    #[test]
    fn a_batch_without_a_group_id_is_an_invalid_value() {
        // LocalStack's AWS-validated test_send_batch_missing_message_group_id_for_fifo_queue.
        let error = SqsError::for_batch_request(Error::Missing(Field::MessageGroupId));
        assert_eq!(error.code, ErrorCode::InvalidParameterValue);
        assert_eq!(
            error.message,
            "The request must contain the parameter MessageGroupId."
        );
        let single = SqsError::from(Error::Missing(Field::MessageGroupId));
        assert_eq!(single.code, ErrorCode::MissingParameter);
    }
}
