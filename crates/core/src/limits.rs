//! Every bound the engine enforces, in one value.
//!
//! The defaults are Amazon SQS's published quotas. Keeping them in one `Limits` value (instead of
//! constants scattered through the code) lets tests shrink them (an in-flight limit of 3 is easier
//! to reach than 120 000) and lets an operator relax them deliberately.
//!
//! [`Limits::SQS`] is that default as a constant: the wire decoder (`leaseq-sqs`) checks what SQS
//! checks before a request reaches the engine (batch entries, `MaxNumberOfMessages`,
//! `WaitTimeSeconds`, batch bytes, `MaxResults`) against it, so each bound is declared here once.

/// Bounds on queues, messages, leases and batches. `Limits::default()` is SQS's.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Entries in one batch call and messages in one receive.
    pub batch_size_max: usize,
    /// Bytes of all messages of one `SendMessageBatch` together.
    pub batch_size_max_bytes: usize,
    /// Names returned by one page of a list action (`MaxResults`).
    pub list_results_max: usize,
    /// The largest `MaximumMessageSize` a queue may be configured with (body + attributes).
    pub message_size_max_bytes: u32,
    /// The smallest `MaximumMessageSize` a queue may be configured with.
    pub message_size_min_bytes: u32,
    /// Message attributes on one message.
    pub message_attributes_max: usize,
    /// Messages leased and not yet deleted in one standard queue (`OverLimit` beyond it).
    pub in_flight_max: usize,
    /// The longest visibility timeout, and the longest total lease counted from the receive.
    pub visibility_timeout_max_seconds: u32,
    /// The longest per-queue or per-message delay.
    pub delay_max_seconds: u32,
    /// Bounds of `MessageRetentionPeriod`.
    pub retention_min_seconds: u32,
    /// Bounds of `MessageRetentionPeriod`.
    pub retention_max_seconds: u32,
    /// The longest long-poll wait.
    pub wait_time_max_seconds: u32,
    /// Characters in a queue name (including a `.fifo` suffix).
    pub queue_name_length_max: usize,
    /// Minimum time between two purges of one queue.
    pub purge_interval_ms: u64,
    /// How long a deleted queue's name stays unusable (SQS: "You must wait 60 seconds after
    /// deleting a queue before you can create another with the same name", `API_CreateQueue`).
    pub queue_name_reuse_delay_ms: u64,
    /// Tags on one queue.
    pub tags_max: usize,
    /// Bounds of a redrive policy's `maxReceiveCount`.
    pub max_receive_count_max: u32,
    /// Characters in a message attribute name or data type.
    pub attribute_name_length_max: usize,
    /// Bytes of a queue's `Policy` document. SQS's API reference states no bound; ours keeps
    /// every record of a queue's settings far below the log's record limit.
    pub policy_size_max_bytes: usize,
    /// Redrives a message may have had and still be moved by a move task: one that came back
    /// to a dead-letter queue after this many stays there (a redrive loop) and the task reports
    /// it (`MoveTask::held_back`). leaseq's own; SQS has none.
    pub redrive_generations_max: u16,
    /// Delivery attempts kept in a message's history (the most recent ones). leaseq's own.
    pub attempt_history_max: usize,
}

impl Limits {
    /// Amazon SQS's published quotas.
    pub const SQS: Limits = Limits {
        batch_size_max: 10,
        batch_size_max_bytes: 1_048_576,
        list_results_max: 1_000,
        message_size_max_bytes: 1_048_576,
        message_size_min_bytes: 1_024,
        message_attributes_max: 10,
        in_flight_max: 120_000,
        visibility_timeout_max_seconds: 43_200,
        delay_max_seconds: 900,
        retention_min_seconds: 60,
        retention_max_seconds: 1_209_600,
        wait_time_max_seconds: 20,
        queue_name_length_max: 80,
        purge_interval_ms: 60_000,
        queue_name_reuse_delay_ms: 60_000,
        tags_max: 50,
        max_receive_count_max: 1_000,
        attribute_name_length_max: 256,
        policy_size_max_bytes: 256 * 1024,
        redrive_generations_max: 3,
        attempt_history_max: 10,
    };
}

impl Default for Limits {
    /// SQS's quotas ([`Limits::SQS`]).
    fn default() -> Self {
        Limits::SQS
    }
}
