//! What a handler decides about its message. The worker acts on the decision only while it still
//! holds the message's lease: a lease it knows it lost is never acknowledged or changed.

use std::time::Duration;

/// The result of handling one delivery attempt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// The effect is durable: delete the message.
    Ack,
    /// A transient failure: make the message visible again after `after`, or, when `after` is
    /// `None`, after the worker's [`Backoff`](crate::Backoff) for this attempt (exponential in
    /// the receive count, with jitter). SQS counts visibility in whole seconds, so `after` is
    /// rounded up to one.
    Retry {
        /// The delay before the next attempt; `None` for the configured backoff.
        after: Option<Duration>,
    },
    /// A permanent failure: retrying cannot help. The message goes to the quarantine queue of
    /// the [`FailurePolicy`](crate::FailurePolicy) with `reason`, and is then deleted.
    Fail {
        /// Why the message cannot be processed; recorded by the server or carried by the copy.
        reason: String,
    },
}

impl Outcome {
    /// A retry after the configured backoff.
    pub fn retry() -> Outcome {
        Outcome::Retry { after: None }
    }

    /// A permanent failure with `reason`.
    pub fn fail(reason: impl Into<String>) -> Outcome {
        Outcome::Fail {
            reason: reason.into(),
        }
    }
}
