//! The server's clock: the one place leaseq reads the time.
//!
//! Visibility is measured on this clock, never the client's. The engine takes its readings as
//! `now_ms` and ignores a reading earlier than one it has seen, so a step back of the host clock
//! cannot shorten or reorder leases.

use std::time::{SystemTime, UNIX_EPOCH};

/// Milliseconds since the Unix epoch.
pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}
