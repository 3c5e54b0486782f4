//! The worker's settings, with defaults that suit most jobs, and their validation. Every bound
//! the worker keeps (messages in hand, batch sizes, lease lengths) is here.

use std::time::Duration;

use crate::Backoff;

/// SQS's limits on the values the worker sends.
const BATCH_SIZE_MAX: u32 = 10;
const WAIT_TIME_MAX: Duration = Duration::from_secs(20);
const VISIBILITY_TIMEOUT_MAX: Duration = Duration::from_secs(43_200);

/// Everything a [`Worker`](crate::Worker) needs besides the SQS client and the handler.
#[derive(Debug, Clone)]
pub struct WorkerConfig {
    /// The URL of the queue to consume.
    pub queue_url: String,
    /// How many handlers run at once; also the most messages the worker holds leases on, so a
    /// slow handler slows receiving instead of piling up leases (backpressure).
    pub concurrency: usize,
    /// The most messages one receive asks for (1–10).
    pub receive_batch_max: u32,
    /// How long one receive waits for messages (long polling, 1–20 s, whole seconds).
    pub wait_time: Duration,
    /// The lease settings.
    pub lease: LeaseConfig,
    /// The delays of [`Outcome::Retry`](crate::Outcome::Retry) without an explicit delay, and of
    /// panicked handlers.
    pub backoff: Backoff,
    /// Where [`Outcome::Fail`](crate::Outcome::Fail) sends messages.
    pub failure: FailurePolicy,
    /// How long a graceful shutdown waits for active handlers before it releases their leases.
    pub shutdown_deadline: Duration,
}

impl WorkerConfig {
    /// The defaults for consuming `queue_url`: 10 handlers, batches of 10, 20 s long polls, the
    /// lease defaults of [`LeaseConfig`], failures released to the queue's redrive policy.
    pub fn new(queue_url: impl Into<String>) -> WorkerConfig {
        WorkerConfig {
            queue_url: queue_url.into(),
            concurrency: 10,
            receive_batch_max: BATCH_SIZE_MAX,
            wait_time: WAIT_TIME_MAX,
            lease: LeaseConfig::default(),
            backoff: Backoff::default(),
            failure: FailurePolicy::ReleaseToRedrive,
            shutdown_deadline: Duration::from_secs(30),
        }
    }

    pub(crate) fn validate(&self) -> Result<(), ConfigError> {
        if self.concurrency == 0 {
            return Err(ConfigError::ConcurrencyZero);
        }
        if !(1..=BATCH_SIZE_MAX).contains(&self.receive_batch_max) {
            return Err(ConfigError::ReceiveBatchMax(self.receive_batch_max));
        }
        if self.wait_time < Duration::from_secs(1) || self.wait_time > WAIT_TIME_MAX {
            return Err(ConfigError::WaitTime(self.wait_time));
        }
        self.lease.validate()
    }
}

/// How the worker keeps the leases of the messages in hand.
#[derive(Debug, Clone)]
pub struct LeaseConfig {
    /// The lease taken at receive and renewed by each extension (whole seconds, at least 1 s).
    pub visibility_timeout: Duration,
    /// Time kept in reserve for network and scheduling delay: a lease is extended once less
    /// than `max(slack, visibility_timeout / 3)` of it is left (but never before a third of it
    /// has passed, so short leases do not turn into a tight loop).
    pub slack: Duration,
    /// How long before its deadline a lease whose extension is not confirmed counts as lost. It
    /// covers the difference between the client's and the server's clock rates and the time an
    /// acknowledgement takes to arrive.
    pub expiry_margin: Duration,
    /// The longest the worker keeps any one message, counted from its receive; extensions stop
    /// there, so a stuck handler cannot hold a message forever.
    pub lease_total_max: Duration,
    /// When set, a lease is extended only if the handler called
    /// [`LeaseContext::report_progress`](crate::LeaseContext::report_progress) within this window.
    pub progress_window: Option<Duration>,
}

impl Default for LeaseConfig {
    fn default() -> LeaseConfig {
        LeaseConfig {
            visibility_timeout: Duration::from_secs(30),
            slack: Duration::from_secs(5),
            expiry_margin: Duration::from_secs(1),
            lease_total_max: Duration::from_secs(3600),
            progress_window: None,
        }
    }
}

impl LeaseConfig {
    fn validate(&self) -> Result<(), ConfigError> {
        let visibility = self.visibility_timeout;
        if visibility < Duration::from_secs(1)
            || visibility > VISIBILITY_TIMEOUT_MAX
            || visibility.subsec_nanos() != 0
        {
            return Err(ConfigError::VisibilityTimeout(visibility));
        }
        if self.expiry_margin >= visibility {
            return Err(ConfigError::ExpiryMargin(self.expiry_margin));
        }
        if self.lease_total_max < visibility {
            return Err(ConfigError::LeaseTotalMax(self.lease_total_max));
        }
        Ok(())
    }

    /// How long before a lease's deadline its extension is sent.
    pub(crate) fn extension_lead(&self) -> Duration {
        let visibility = self.visibility_timeout;
        self.slack.max(visibility / 3).min(visibility * 2 / 3)
    }

    /// The visibility timeout in SQS's unit.
    pub(crate) fn visibility_seconds(&self) -> i32 {
        i32::try_from(self.visibility_timeout.as_secs()).unwrap_or(i32::MAX)
    }
}

/// What [`Outcome::Fail`](crate::Outcome::Fail) does with a message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FailurePolicy {
    /// Send the message to `queue_url`, then it is gone from the source queue.
    ///
    /// On a server with leaseq's `LeaseqFailMessage` action, when `queue_url` is the source
    /// queue's dead-letter queue, that is one call: the server moves the message (same id and
    /// attributes) and records the reason. Otherwise (Amazon SQS answers the action as unknown,
    /// or `queue_url` is another queue) a copy is sent (body and attributes, plus
    /// `leaseq.FailureReason`, `leaseq.SourceMessageId`, `leaseq.SourceQueueUrl` and
    /// `leaseq.ReceiveCount`, or those four in one `leaseq.Failure` attribute when the message
    /// has more than six attributes of its own, or none, only a log line, when it has ten), then
    /// the original is deleted.
    Quarantine {
        /// The quarantine or dead-letter queue.
        queue_url: String,
    },
    /// Make the message visible again after the backoff, so the source queue's redrive policy
    /// moves it to its dead-letter queue after `maxReceiveCount` receives. The reason is only
    /// logged. The default, because it needs no second queue.
    ReleaseToRedrive,
}

/// A setting the worker cannot run with.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    /// At least one handler must be allowed to run.
    #[error("concurrency must be at least 1")]
    ConcurrencyZero,
    /// SQS receives between 1 and 10 messages at a time.
    #[error("receive_batch_max must be 1 to 10, not {0}")]
    ReceiveBatchMax(u32),
    /// Long polls wait 1 to 20 seconds (zero would make an idle worker spin).
    #[error("wait_time must be 1 to 20 s, not {0:?}")]
    WaitTime(Duration),
    /// SQS leases are whole seconds from 1 s (0 would be no lease) to 12 h.
    #[error("visibility_timeout must be whole seconds from 1 s to 12 h, not {0:?}")]
    VisibilityTimeout(Duration),
    /// A margin as long as the lease would count every lease as lost at once.
    #[error("expiry_margin {0:?} must be shorter than the visibility timeout")]
    ExpiryMargin(Duration),
    /// The cap must allow at least the first lease.
    #[error("lease_total_max {0:?} must be at least the visibility timeout")]
    LeaseTotalMax(Duration),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn extension_lead_uses_the_slack_but_stays_between_a_third_and_two_thirds_of_the_lease() {
        let mut lease = LeaseConfig::default();
        assert_eq!(lease.extension_lead(), Duration::from_secs(10));
        lease.visibility_timeout = Duration::from_secs(300);
        assert_eq!(lease.extension_lead(), Duration::from_secs(100));
        lease.visibility_timeout = Duration::from_secs(6);
        assert_eq!(lease.extension_lead(), Duration::from_secs(4));
        lease.slack = Duration::from_secs(3);
        assert_eq!(lease.extension_lead(), Duration::from_secs(3));
    }

    #[test]
    fn validation_rejects_what_sqs_or_the_lease_rules_cannot_take() {
        let valid = WorkerConfig::new("http://localhost/000000000000/q");
        assert_eq!(valid.validate(), Ok(()));
        let mut config = valid.clone();
        config.lease.visibility_timeout = Duration::from_millis(1500);
        assert!(matches!(
            config.validate(),
            Err(ConfigError::VisibilityTimeout(_))
        ));
        let mut config = valid.clone();
        config.wait_time = Duration::ZERO;
        assert!(matches!(config.validate(), Err(ConfigError::WaitTime(_))));
        let mut config = valid.clone();
        config.receive_batch_max = 11;
        assert_eq!(config.validate(), Err(ConfigError::ReceiveBatchMax(11)));
        let mut config = valid;
        config.lease.lease_total_max = Duration::from_secs(5);
        assert!(matches!(
            config.validate(),
            Err(ConfigError::LeaseTotalMax(_))
        ));
    }
}
