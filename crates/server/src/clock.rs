//! The server's clock: the one place leaseq reads the time.
//!
//! Visibility is measured on this clock, never the client's. The engine takes its readings as
//! `now_ms` and ignores a reading earlier than one it has seen, so a step back of the host clock
//! cannot shorten or reorder leases.

use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

/// A source of the time in milliseconds since the Unix epoch: [`now_ms`] in a server, a fake
/// clock in tests that jump time instead of sleeping (`Embedded::with_clock`).
pub type Clock = Arc<dyn Fn() -> u64 + Send + Sync>;

/// Milliseconds since the Unix epoch.
pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}
