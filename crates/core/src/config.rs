//! A queue's settings: typed, validated, with SQS's defaults.
//!
//! The wire layer turns SQS attribute strings into a [`QueueConfigPatch`]; the engine applies the
//! patch to a [`QueueConfig`] with [`QueueConfig::patched`], which checks every range against the
//! [`Limits`]. Whether a dead-letter target exists is checked by the engine, which knows the queues.

use std::collections::BTreeMap;

use crate::backoff::RedeliveryBackoff;
use crate::error::{Error, Field, Result};
use crate::fair::{
    FairConfig, COMPARABLE_FACTOR_MAX, IN_FLIGHT_MIN_MAX, PROCESSING_WINDOW_MAX_SECONDS,
};
use crate::fifo::{DeduplicationScope, FifoConfig, FifoThroughputLimit};
use crate::limits::Limits;

/// Settings of one queue. `QueueConfig::default()` is a new SQS standard queue's.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QueueConfig {
    /// Lease length when a receive does not override it.
    pub visibility_timeout_seconds: u32,
    /// How long a message is kept after it was first enqueued.
    pub retention_seconds: u32,
    /// Delay of every message sent without its own delay.
    pub delay_seconds: u32,
    /// Largest body plus attributes accepted.
    pub maximum_message_size_bytes: u32,
    /// Long-poll wait of a receive that does not give its own.
    pub receive_wait_time_seconds: u32,
    /// Where messages go after `max_receive_count` receives.
    pub redrive_policy: Option<RedrivePolicy>,
    /// Which source queues may name this queue as their dead-letter queue.
    pub redrive_allow_policy: Option<RedriveAllowPolicy>,
    /// An access policy document, stored and returned but not enforced.
    pub policy: Option<String>,
    /// Settings the engine stores and returns but does not interpret (server-side encryption
    /// settings, for example), keyed by the wire layer's names.
    pub passthrough: BTreeMap<String, String>,
    /// The FIFO settings; `Some` exactly for a FIFO queue (chosen at creation, never changed).
    pub fifo: Option<FifoConfig>,
    /// Fair-queue settings (standard queues; see [`crate::fair`]).
    pub fairness: FairConfig,
    /// `LeaseqRedeliveryBackoff`: how long a message whose lease ran out waits before it is
    /// ready again (see [`crate::backoff`]); `None` (the default) redelivers at once, as SQS.
    pub redelivery_backoff: Option<RedeliveryBackoff>,
}

impl Default for QueueConfig {
    fn default() -> Self {
        QueueConfig {
            visibility_timeout_seconds: 30,
            retention_seconds: 345_600,
            delay_seconds: 0,
            maximum_message_size_bytes: 1_048_576,
            receive_wait_time_seconds: 0,
            redrive_policy: None,
            redrive_allow_policy: None,
            policy: None,
            passthrough: BTreeMap::new(),
            fifo: None,
            fairness: FairConfig::default(),
            redelivery_backoff: None,
        }
    }
}

/// A dead-letter rule: after `max_receive_count` receives, the next receive moves the message to
/// `dead_letter_queue` instead of delivering it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RedrivePolicy {
    /// Name of the dead-letter queue.
    pub dead_letter_queue: String,
    /// Receives allowed before the move (1 to `Limits::max_receive_count_max`).
    pub max_receive_count: u32,
}

/// Which queues may use a queue as their dead-letter queue.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RedriveAllowPolicy {
    /// Any queue (the default when no policy is set).
    AllowAll,
    /// No queue.
    DenyAll,
    /// Only the named source queues.
    ByQueue(Vec<String>),
}

impl RedriveAllowPolicy {
    /// Whether `source` may send its dead letters here.
    pub fn allows(&self, source: &str) -> bool {
        match self {
            RedriveAllowPolicy::AllowAll => true,
            RedriveAllowPolicy::DenyAll => false,
            RedriveAllowPolicy::ByQueue(names) => names.iter().any(|name| name == source),
        }
    }
}

/// A change to some settings; `None` leaves a setting as it is. For the optional settings,
/// `Some(None)` removes it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct QueueConfigPatch {
    /// See [`QueueConfig::visibility_timeout_seconds`].
    pub visibility_timeout_seconds: Option<u32>,
    /// See [`QueueConfig::retention_seconds`].
    pub retention_seconds: Option<u32>,
    /// See [`QueueConfig::delay_seconds`].
    pub delay_seconds: Option<u32>,
    /// See [`QueueConfig::maximum_message_size_bytes`].
    pub maximum_message_size_bytes: Option<u32>,
    /// See [`QueueConfig::receive_wait_time_seconds`].
    pub receive_wait_time_seconds: Option<u32>,
    /// See [`QueueConfig::redrive_policy`].
    pub redrive_policy: Option<Option<RedrivePolicy>>,
    /// See [`QueueConfig::redrive_allow_policy`].
    pub redrive_allow_policy: Option<Option<RedriveAllowPolicy>>,
    /// See [`QueueConfig::policy`].
    pub policy: Option<Option<String>>,
    /// See [`QueueConfig::passthrough`]; an empty value removes the key.
    pub passthrough: BTreeMap<String, String>,
    /// `FifoQueue`: only a create may name it (see [`crate::Engine::create_queue`]).
    pub fifo_queue: Option<bool>,
    /// See [`FifoConfig::content_based_deduplication`] (FIFO queues only).
    pub content_based_deduplication: Option<bool>,
    /// See [`FifoConfig::deduplication_scope`] (FIFO queues only).
    pub deduplication_scope: Option<DeduplicationScope>,
    /// See [`FifoConfig::throughput_limit`] (FIFO queues only).
    pub fifo_throughput_limit: Option<FifoThroughputLimit>,
    /// See [`FairConfig::enabled`] (standard queues only).
    pub fair_queue: Option<bool>,
    /// See [`FairConfig::in_flight_min`] (standard queues only).
    pub fair_in_flight_min: Option<u32>,
    /// See [`FairConfig::processing_window_seconds`] (standard queues only).
    pub fair_processing_window_seconds: Option<u32>,
    /// See [`FairConfig::comparable_factor`] (standard queues only).
    pub fair_comparable_factor: Option<u32>,
    /// See [`QueueConfig::redelivery_backoff`]; `Some(None)` turns it off.
    pub redelivery_backoff: Option<Option<RedeliveryBackoff>>,
}

impl QueueConfigPatch {
    /// Whether the patch names a setting that only FIFO queues have (besides `FifoQueue`).
    pub(crate) fn fifo_setting(&self) -> Option<&'static str> {
        if self.content_based_deduplication.is_some() {
            Some("ContentBasedDeduplication")
        } else if self.deduplication_scope.is_some() {
            Some("DeduplicationScope")
        } else if self.fifo_throughput_limit.is_some() {
            Some("FifoThroughputLimit")
        } else {
            None
        }
    }

    /// Whether the patch names a fair-queue setting (standard queues only).
    pub(crate) fn fair_setting(&self) -> Option<&'static str> {
        if self.fair_queue.is_some() {
            Some("LeaseqFairQueue")
        } else if self.fair_in_flight_min.is_some() {
            Some("LeaseqFairInFlightMin")
        } else if self.fair_processing_window_seconds.is_some() {
            Some("LeaseqFairProcessingWindowSeconds")
        } else if self.fair_comparable_factor.is_some() {
            Some("LeaseqFairComparableFactor")
        } else {
            None
        }
    }
}

fn check_range(field: Field, value: u32, min: u32, max: u32) -> Result<u32> {
    if value < min || value > max {
        return Err(Error::out_of_range(field, value, min, max));
    }
    Ok(value)
}

impl QueueConfig {
    /// This config with `patch` applied, or the first setting out of range.
    pub fn patched(&self, patch: &QueueConfigPatch, limits: &Limits) -> Result<QueueConfig> {
        let mut next = self.clone();
        if let Some(v) = patch.visibility_timeout_seconds {
            next.visibility_timeout_seconds = check_range(
                Field::VisibilityTimeout,
                v,
                0,
                limits.visibility_timeout_max_seconds,
            )?;
        }
        if let Some(v) = patch.retention_seconds {
            next.retention_seconds = check_range(
                Field::MessageRetentionPeriod,
                v,
                limits.retention_min_seconds,
                limits.retention_max_seconds,
            )?;
        }
        if let Some(v) = patch.delay_seconds {
            next.delay_seconds = check_range(Field::DelaySeconds, v, 0, limits.delay_max_seconds)?;
        }
        if let Some(v) = patch.maximum_message_size_bytes {
            next.maximum_message_size_bytes = check_range(
                Field::MaximumMessageSize,
                v,
                limits.message_size_min_bytes,
                limits.message_size_max_bytes,
            )?;
        }
        if let Some(v) = patch.receive_wait_time_seconds {
            next.receive_wait_time_seconds = check_range(
                Field::ReceiveMessageWaitTimeSeconds,
                v,
                0,
                limits.wait_time_max_seconds,
            )?;
        }
        if let Some(policy) = &patch.redrive_policy {
            if let Some(policy) = policy {
                check_range(
                    Field::RedrivePolicy,
                    policy.max_receive_count,
                    1,
                    limits.max_receive_count_max,
                )?;
            }
            next.redrive_policy = policy.clone();
        }
        if let Some(policy) = &patch.redrive_allow_policy {
            next.redrive_allow_policy = policy.clone();
        }
        if let Some(policy) = &patch.policy {
            let size_bytes = policy.as_deref().map_or(0, str::len);
            if size_bytes > limits.policy_size_max_bytes {
                return Err(Error::TooLong {
                    field: Field::Policy,
                    len: size_bytes,
                    max: limits.policy_size_max_bytes,
                });
            }
            next.policy = policy.clone();
        }
        for (key, value) in &patch.passthrough {
            if value.is_empty() {
                next.passthrough.remove(key);
            } else {
                next.passthrough.insert(key.clone(), value.clone());
            }
        }
        if next.fifo.is_some() {
            if let Some(name) = patch.fair_setting() {
                return Err(Error::UnknownSetting(name.into()));
            }
        }
        if let Some(v) = patch.fair_queue {
            next.fairness.enabled = v;
        }
        if let Some(v) = patch.fair_in_flight_min {
            next.fairness.in_flight_min =
                check_range(Field::FairInFlightMin, v, 1, IN_FLIGHT_MIN_MAX)?;
        }
        if let Some(v) = patch.fair_processing_window_seconds {
            next.fairness.processing_window_seconds = check_range(
                Field::FairProcessingWindowSeconds,
                v,
                1,
                PROCESSING_WINDOW_MAX_SECONDS,
            )?;
        }
        if let Some(v) = patch.fair_comparable_factor {
            next.fairness.comparable_factor =
                check_range(Field::FairComparableFactor, v, 1, COMPARABLE_FACTOR_MAX)?;
        }
        if let Some(backoff) = &patch.redelivery_backoff {
            next.redelivery_backoff = backoff.clone();
        }
        match &mut next.fifo {
            Some(fifo) => {
                if let Some(v) = patch.content_based_deduplication {
                    fifo.content_based_deduplication = v;
                }
                if let Some(v) = patch.deduplication_scope {
                    fifo.deduplication_scope = v;
                }
                if let Some(v) = patch.fifo_throughput_limit {
                    fifo.throughput_limit = v;
                }
            }
            None => {
                if let Some(name) = patch.fifo_setting() {
                    return Err(Error::UnknownSetting(name.into()));
                }
            }
        }
        Ok(next)
    }

    /// The first setting named by `patch` whose value differs from this config's, if any. Used by
    /// an idempotent create: asking again for what exists is fine, asking for something else is not.
    pub fn conflicting_setting(&self, patch: &QueueConfigPatch) -> Option<String> {
        let differs = |name: &str, same: bool| (!same).then(|| name.to_string());
        let p = patch;
        let checks = [
            p.visibility_timeout_seconds
                .and_then(|v| differs("VisibilityTimeout", v == self.visibility_timeout_seconds)),
            p.retention_seconds
                .and_then(|v| differs("MessageRetentionPeriod", v == self.retention_seconds)),
            p.delay_seconds
                .and_then(|v| differs("DelaySeconds", v == self.delay_seconds)),
            p.maximum_message_size_bytes
                .and_then(|v| differs("MaximumMessageSize", v == self.maximum_message_size_bytes)),
            p.receive_wait_time_seconds.and_then(|v| {
                differs(
                    "ReceiveMessageWaitTimeSeconds",
                    v == self.receive_wait_time_seconds,
                )
            }),
            p.redrive_policy
                .as_ref()
                .and_then(|v| differs("RedrivePolicy", *v == self.redrive_policy)),
            p.redrive_allow_policy
                .as_ref()
                .and_then(|v| differs("RedriveAllowPolicy", *v == self.redrive_allow_policy)),
            p.policy
                .as_ref()
                .and_then(|v| differs("Policy", *v == self.policy)),
        ];
        let fifo = self.fifo.clone().unwrap_or_default();
        let fifo_checks = [
            p.fifo_queue
                .and_then(|v| differs("FifoQueue", v == self.fifo.is_some())),
            p.content_based_deduplication.and_then(|v| {
                differs(
                    "ContentBasedDeduplication",
                    v == fifo.content_based_deduplication,
                )
            }),
            p.deduplication_scope
                .and_then(|v| differs("DeduplicationScope", v == fifo.deduplication_scope)),
            p.fifo_throughput_limit
                .and_then(|v| differs("FifoThroughputLimit", v == fifo.throughput_limit)),
        ];
        let fair = &self.fairness;
        let fair_checks = [
            p.fair_queue
                .and_then(|v| differs("LeaseqFairQueue", v == fair.enabled)),
            p.fair_in_flight_min
                .and_then(|v| differs("LeaseqFairInFlightMin", v == fair.in_flight_min)),
            p.fair_processing_window_seconds.and_then(|v| {
                differs(
                    "LeaseqFairProcessingWindowSeconds",
                    v == fair.processing_window_seconds,
                )
            }),
            p.fair_comparable_factor
                .and_then(|v| differs("LeaseqFairComparableFactor", v == fair.comparable_factor)),
        ];
        let backoff = p
            .redelivery_backoff
            .as_ref()
            .and_then(|v| differs("LeaseqRedeliveryBackoff", *v == self.redelivery_backoff));
        let first = checks
            .into_iter()
            .chain(fifo_checks)
            .chain(fair_checks)
            .chain([backoff])
            .flatten()
            .next();
        first.or_else(|| {
            p.passthrough
                .iter()
                // An empty value means "absent", as it does in a patch.
                .find(|(key, value)| {
                    self.passthrough.get(*key).map_or("", String::as_str) != value.as_str()
                })
                .map(|(key, _)| key.clone())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_policy_is_bounded() {
        let limits = Limits::default();
        let patch = |size: usize| QueueConfigPatch {
            policy: Some(Some("x".repeat(size))),
            ..QueueConfigPatch::default()
        };
        let config = QueueConfig::default();
        assert!(config
            .patched(&patch(limits.policy_size_max_bytes), &limits)
            .is_ok());
        let error = config
            .patched(&patch(limits.policy_size_max_bytes + 1), &limits)
            .unwrap_err();
        assert!(matches!(
            error,
            Error::TooLong {
                field: Field::Policy,
                ..
            }
        ));
    }
}
