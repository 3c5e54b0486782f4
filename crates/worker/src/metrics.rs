//! Counters of what the worker did, for dashboards and tests. Each is a monotonic total since
//! the worker started.

use std::sync::atomic::{AtomicU64, Ordering};

macro_rules! counters {
    ($($(#[$doc:meta])* $name:ident,)*) => {
        #[derive(Debug, Default)]
        pub(crate) struct Metrics {
            $(pub(crate) $name: AtomicU64,)*
        }

        /// A copy of the worker's counters at one moment.
        #[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
        pub struct MetricsSnapshot {
            $($(#[$doc])* pub $name: u64,)*
        }

        impl Metrics {
            pub(crate) fn snapshot(&self) -> MetricsSnapshot {
                MetricsSnapshot {
                    $($name: self.$name.load(Ordering::Relaxed),)*
                }
            }
        }
    };
}

counters! {
    /// Messages received.
    received,
    /// Receives that failed.
    receive_errors,
    /// Lease extensions the server confirmed.
    extensions,
    /// `ChangeMessageVisibilityBatch` calls made for extensions (each carries up to ten).
    extension_calls,
    /// Leases lost (extension refused or unconfirmed, cap reached, no progress, shutdown).
    lease_losses,
    /// Messages deleted after `Outcome::Ack`.
    acks,
    /// Messages made visible again after `Outcome::Retry` or a panic.
    retries,
    /// Messages quarantined or released to the redrive policy after `Outcome::Fail`.
    failures,
    /// Handlers that panicked (each also counts as a retry).
    panics,
    /// Leases released with visibility 0: at shutdown, or held back behind a message of the
    /// same FIFO group that was not acknowledged.
    releases,
    /// Outcomes not acted on because the lease had been lost.
    outcomes_dropped_lease_lost,
    /// Deletes, visibility changes or quarantine sends that failed.
    settle_errors,
}

impl Metrics {
    pub(crate) fn add(counter: &AtomicU64, count: u64) {
        counter.fetch_add(count, Ordering::Relaxed);
    }
}
