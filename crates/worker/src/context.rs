//! The handler's view of its lease: the attempt number (a fencing token), a cancellation that
//! fires when the lease is lost, and the progress reports that keep the lease extended.
//!
//! Invariant: once cancelled, a context stays cancelled with the first reason it was given, and
//! the worker neither acknowledges nor changes the message of that attempt afterwards.

use std::sync::{Arc, Mutex, OnceLock};

use tokio::time::Instant;
use tokio_util::sync::{CancellationToken, WaitForCancellationFuture};

/// Why a handler lost the right to act on its message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LeaseLoss {
    /// The server refused an extension (for example, the receipt is no longer valid).
    ExtensionRejected {
        /// The error code of the refusal.
        code: String,
    },
    /// No extension was confirmed before the lease could have run out.
    Unconfirmed,
    /// The lease reached `lease_total_max` and was not extended further.
    TotalLeaseCapReached,
    /// The handler reported no progress within `progress_window`, so the lease was not extended.
    NoProgress,
    /// The worker shut down before the handler finished and released the lease.
    Shutdown,
}

/// The lease of one delivery attempt, as seen by its handler. Cheap to clone.
#[derive(Debug, Clone)]
pub struct LeaseContext {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    attempt: u32,
    message_id: String,
    queue_url: Arc<str>,
    token: CancellationToken,
    loss: OnceLock<LeaseLoss>,
    progress_at: Mutex<Instant>,
}

impl LeaseContext {
    pub(crate) fn new(attempt: u32, message_id: &str, queue_url: Arc<str>) -> LeaseContext {
        LeaseContext {
            inner: Arc::new(Inner {
                attempt,
                message_id: message_id.to_string(),
                queue_url,
                token: CancellationToken::new(),
                loss: OnceLock::new(),
                progress_at: Mutex::new(Instant::now()),
            }),
        }
    }

    /// The attempt number (receive count, from 1). A later attempt always has a larger number,
    /// so writes that carry it can be fenced: reject a write whose attempt is older than the
    /// last one seen for the same message.
    pub fn attempt(&self) -> u32 {
        self.inner.attempt
    }

    /// The message id.
    pub fn message_id(&self) -> &str {
        &self.inner.message_id
    }

    /// The queue the message came from.
    pub fn queue_url(&self) -> &str {
        &self.inner.queue_url
    }

    /// Completes when the lease is lost; select on it around irreversible steps.
    pub fn lost(&self) -> WaitForCancellationFuture<'_> {
        self.inner.token.cancelled()
    }

    /// Whether the lease is lost. Check it right before an irreversible effect.
    pub fn is_lost(&self) -> bool {
        self.inner.token.is_cancelled()
    }

    /// Why the lease was lost, once it is.
    pub fn loss(&self) -> Option<&LeaseLoss> {
        self.inner.loss.get()
    }

    /// A token that is cancelled with the lease, for APIs that take a `CancellationToken`.
    pub fn cancellation_token(&self) -> CancellationToken {
        self.inner.token.clone()
    }

    /// Tells the lease keeper the handler is making progress. Only matters when
    /// `progress_window` is set: then a handler that stops reporting stops being extended.
    pub fn report_progress(&self) {
        *self.lock_progress() = Instant::now();
    }

    pub(crate) fn progress_at(&self) -> Instant {
        *self.lock_progress()
    }

    /// Marks the lease lost for `reason` and cancels the handler; the first reason wins.
    pub(crate) fn lose(&self, reason: LeaseLoss) -> bool {
        let first = self.inner.loss.set(reason).is_ok();
        self.inner.token.cancel();
        first
    }

    fn lock_progress(&self) -> std::sync::MutexGuard<'_, Instant> {
        // The guarded value is a plain timestamp, so a panic while it was held cannot have left
        // it half-written; recovering from poisoning is safe.
        self.inner
            .progress_at
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}
