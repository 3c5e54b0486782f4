//! The SQS listener's connections (`listen`; the admin listener's are not counted): how many
//! are open against `max_connections`, and how often that limit stopped the accept loop.
//!
//! The accept loop ([`crate::http::serve`]) counts into [`ConnectionStats`] once per connection
//! (never per request), so the counts are on whether or not request metrics are.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use super::Page;

/// What the accept loop counts of its connections.
#[derive(Debug, Default)]
pub struct ConnectionStats {
    open: AtomicU64,
    accepted: AtomicU64,
    limit_reached: AtomicU64,
    max: AtomicU64,
}

/// The counts of [`ConnectionStats`] at one moment, as the page shows them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ConnectionCounts {
    /// Connections being served now.
    pub open: u64,
    /// Connections accepted since the listener started.
    pub accepted: u64,
    /// Times the loop found all `max_connections` slots taken and stopped accepting (new
    /// connections waiting in the listen backlog) until one closed.
    pub limit_reached: u64,
    /// `max_connections` (0 before the accept loop starts).
    pub max: u64,
}

impl ConnectionStats {
    /// The accept loop's limit, `max_connections`.
    pub fn set_max(&self, max_connections: usize) {
        let max = u64::try_from(max_connections).unwrap_or(u64::MAX);
        self.max.store(max, Ordering::Relaxed);
    }

    /// A connection was accepted: it counts as open until the returned guard is dropped
    /// (which a panic in the connection's task does too).
    pub fn accepted(self: &Arc<ConnectionStats>) -> OpenConnection {
        self.accepted.fetch_add(1, Ordering::Relaxed);
        self.open.fetch_add(1, Ordering::Relaxed);
        OpenConnection(self.clone())
    }

    /// The loop found every slot taken.
    pub fn limit_reached(&self) {
        self.limit_reached.fetch_add(1, Ordering::Relaxed);
    }

    /// The counts now.
    pub fn counts(&self) -> ConnectionCounts {
        ConnectionCounts {
            open: self.open.load(Ordering::Relaxed),
            accepted: self.accepted.load(Ordering::Relaxed),
            limit_reached: self.limit_reached.load(Ordering::Relaxed),
            max: self.max.load(Ordering::Relaxed),
        }
    }
}

/// An open connection, counted in [`ConnectionStats`] until dropped.
#[derive(Debug)]
pub struct OpenConnection(Arc<ConnectionStats>);

impl Drop for OpenConnection {
    fn drop(&mut self) {
        self.0.open.fetch_sub(1, Ordering::Relaxed);
    }
}

pub(super) fn render_connections(page: &mut Page, counts: &ConnectionCounts) {
    page.family(
        "leaseq_http_connections_open",
        "gauge",
        "Connections open on the SQS listener (listen), against max_connections.",
    );
    page.sample("leaseq_http_connections_open", &[], counts.open);
    page.family(
        "leaseq_http_connections_max",
        "gauge",
        "The SQS listener's max_connections: beyond it, new connections wait to be accepted.",
    );
    page.sample("leaseq_http_connections_max", &[], counts.max);
    page.family(
        "leaseq_http_connections_accepted_total",
        "counter",
        "Connections the SQS listener accepted.",
    );
    page.sample(
        "leaseq_http_connections_accepted_total",
        &[],
        counts.accepted,
    );
    page.family(
        "leaseq_http_connection_limit_reached_total",
        "counter",
        "Times all max_connections connections were open, so the SQS listener stopped \
         accepting (new connections waited in the listen backlog) until one closed.",
    );
    page.sample(
        "leaseq_http_connection_limit_reached_total",
        &[],
        counts.limit_reached,
    );
}
