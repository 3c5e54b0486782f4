//! What the log measures, for the server's metrics: how long each fdatasync takes and how many
//! records each batch carries, and how many reads found their record neither in the log's
//! buffer nor in the page cache.
//!
//! Only the holder of the log's one writer records the histograms (the sync thread or a leading
//! waiter, one batch at a time), once per batch, so the cost is a handful of relaxed atomic adds
//! per fdatasync, far below the fdatasync itself; the read counter costs one relaxed add per read
//! that is about to wait for the disk anyway. Readers of the stats take a
//! `HistogramSnapshot` at any time; its buckets are read one by one, so a snapshot taken while
//! a batch is recorded may count that batch in some fields and not yet in others (an observer's
//! rounding, never a lost count).

use std::sync::atomic::AtomicU64;

use leaseq_core::histogram::Histogram;

/// Bucket bounds of the fdatasync latency, in microseconds (50 µs to 5 s).
pub const FSYNC_MICROS_BOUNDS: &[u64] = &[
    50, 100, 250, 500, 1_000, 2_500, 5_000, 10_000, 25_000, 50_000, 100_000, 250_000, 500_000,
    1_000_000, 5_000_000,
];

/// Bucket bounds of the records per batch.
pub const BATCH_RECORDS_BOUNDS: &[u64] = &[1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 4096];

/// The log's measurements.
#[derive(Debug)]
pub struct WalStats {
    /// Duration of each fdatasync of a batch's files, in microseconds.
    pub fsync_micros: Histogram,
    /// Records written by each batch of the group commit.
    pub batch_records: Histogram,
    /// Calls of [`crate::Wal::read_cached`] that found the record only on the disk.
    pub uncached_reads: AtomicU64,
}

impl Default for WalStats {
    fn default() -> Self {
        WalStats {
            fsync_micros: Histogram::new(FSYNC_MICROS_BOUNDS),
            batch_records: Histogram::new(BATCH_RECORDS_BOUNDS),
            uncached_reads: AtomicU64::new(0),
        }
    }
}
