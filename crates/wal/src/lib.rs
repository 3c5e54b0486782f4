//! `leaseq-wal`: an embedded write-ahead log of opaque byte records.
//!
//! The lease engine serializes each state change to bytes and appends it here; on restart the
//! log replays every record in order so the engine can rebuild its state. The log knows nothing
//! of the records' meaning.
//!
//! The pieces, bottom-up:
//!
//! - [`storage`]: the I/O seam ([`Storage`], [`StorageFile`]) and its `std::fs` implementation;
//!   [`fault`] is the in-memory implementation that injects failed fsyncs, full disks, crashes
//!   with torn writes and bit flips.
//! - [`format`](mod@format): the byte layout of segments and record frames, and a pure decoder.
//! - [`Wal`]: appends (cheap: a copy into a buffer), group commit (by a sync thread, or under
//!   [`FsyncPolicy::Always`] by a lone waiter on its own thread), waits for durability (async
//!   and blocking), random reads by [`Position`], segment removal and stats.
//! - recovery: the scan on open that replays records, cuts a torn tail and refuses (or, with
//!   `salvage`, cuts at) corruption anywhere else.
//! - [`snapshot`]: atomic snapshot files so the engine can replay only the log's tail.
//! - [`stats`]: fdatasync latency and batch size, measured by the group commit for metrics.
//!
//! `docs/design/wal.md` has the byte layout, the order of writes and fsyncs, the recovery
//! algorithm and what each [`FsyncPolicy`] promises.

mod crc;
mod error;
pub mod fault;
pub mod format;
mod log;
mod recovery;
pub mod snapshot;
pub mod stats;
pub mod storage;
mod sync;

use std::time::Duration;

pub use error::{PoisonCause, ReplayError, WalError};
pub use log::{ReadAnswer, Wal, READ_GAP_BYTES, READ_SPAN_BYTES};
pub use recovery::{Recovery, Salvage, TornTail};
pub use snapshot::Snapshot;
pub use stats::WalStats;
pub use storage::{DirStorage, Storage, StorageFile};

/// A log sequence number. The first record ever appended has LSN 1; LSN 0 means "none".
pub type Lsn = u64;

/// Where a record lives on disk, returned by [`Wal::append`] and during replay. Small and
/// `Copy`, so the engine can keep positions in memory instead of payloads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Position {
    /// The segment number.
    pub segment: u64,
    /// Byte offset of the record's frame within the segment file.
    pub offset: u64,
    /// Length of the record's payload.
    pub len_bytes: u32,
}

/// What [`Wal::append`] returns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Appended {
    /// The record's LSN; pass it to [`Wal::wait_durable`].
    pub lsn: Lsn,
    /// Where the record lives, for [`Wal::read`].
    pub position: Position,
}

/// A record handed to the replay callback on open.
#[derive(Debug, Clone, Copy)]
pub struct Record<'a> {
    /// The record's LSN.
    pub lsn: Lsn,
    /// Where the record lives.
    pub position: Position,
    /// The bytes the engine appended.
    pub payload: &'a [u8],
}

/// When appended records are made durable, and so when [`Wal::wait_durable`] returns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FsyncPolicy {
    /// A record is acknowledged only after an `fdatasync` covers it. Survives power loss. One
    /// `fdatasync` covers every record appended before it started, so throughput grows with
    /// the number of concurrent appenders.
    Always,
    /// Records are acknowledged once written to the operating system (they survive a crash of
    /// the process), and `fdatasync` runs at most this often. A power loss can lose up to one
    /// interval of acknowledged records.
    Interval(Duration),
    /// Records are acknowledged once written to the operating system; `fdatasync` runs only on
    /// segment roll, [`Wal::sync`] and close. A power loss can lose any acknowledged record
    /// not covered by one of those.
    Never,
}

/// Settings for [`Wal::open`].
#[derive(Debug, Clone)]
pub struct Options {
    /// When records become durable.
    pub fsync: FsyncPolicy,
    /// A segment rolls when the next record would take it past this size. A record larger than
    /// a whole segment gets a segment of its own.
    pub segment_size_max_bytes: u64,
    /// How far ahead of its records the active segment's file is kept filled with zeros, and
    /// the step by which that space grows (see `sync.rs`): records then overwrite allocated
    /// blocks, whose fdatasync is cheaper on ext4 and XFS than one that extends the file. `0`
    /// turns it off (the file grows with its records), which suits copy-on-write filesystems,
    /// where an overwrite allocates anyway.
    pub zero_ahead_bytes: u64,
    /// The largest payload [`Wal::append`] accepts; at most [`format::RECORD_SIZE_LIMIT_BYTES`].
    pub record_size_max_bytes: u32,
    /// Appended bytes not yet handed to the operating system, beyond which `append` blocks
    /// until a batch writes them. Bounds memory when the disk is slower than appends.
    pub buffer_size_max_bytes: u64,
    /// On corruption, cut the log at the last good record instead of refusing to open.
    pub salvage: bool,
    /// Records up to this LSN are covered by a snapshot the caller loaded (0: none). Recovery
    /// neither scans nor replays segments that hold only such records; they stay readable, and
    /// some of them may be missing (removed by [`Wal::remove_segments`] because nothing in them
    /// was needed any more). From the segment holding `covered_lsn + 1` on, the log must be
    /// whole, as always.
    pub covered_lsn: Lsn,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            fsync: FsyncPolicy::Always,
            segment_size_max_bytes: 64 << 20,
            zero_ahead_bytes: 1 << 20,
            record_size_max_bytes: 4 << 20,
            buffer_size_max_bytes: 64 << 20,
            salvage: false,
            covered_lsn: 0,
        }
    }
}

impl Options {
    fn validate(&self) -> Result<(), WalError> {
        if self.record_size_max_bytes > format::RECORD_SIZE_LIMIT_BYTES {
            return Err(WalError::InvalidOptions(
                "record_size_max_bytes exceeds the format limit of 16 MiB",
            ));
        }
        if self.segment_size_max_bytes <= format::SEGMENT_HEADER_LEN_BYTES as u64 {
            return Err(WalError::InvalidOptions(
                "segment_size_max_bytes must exceed the segment header",
            ));
        }
        if matches!(self.fsync, FsyncPolicy::Interval(interval) if interval.is_zero()) {
            return Err(WalError::InvalidOptions(
                "FsyncPolicy::Interval needs a non-zero interval",
            ));
        }
        Ok(())
    }
}

/// One segment, as reported by [`Wal::segments`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SegmentInfo {
    /// The segment number.
    pub segment: u64,
    /// The LSN of its first record (or of the record it will get first, if empty).
    pub first_lsn: Lsn,
    /// One past the LSN of its last record: the segment holds `first_lsn..end_lsn`.
    pub end_lsn: Lsn,
    /// Its size including appended bytes not yet written.
    pub size_bytes: u64,
    /// Whether appends go to it. The active segment is never removed.
    pub active: bool,
}

/// The file name of a segment.
pub fn segment_file_name(segment: u64) -> String {
    format!("{segment:020}.wal")
}

/// The segment number of a segment file name, or `None` for any other name.
pub fn parse_segment_file_name(name: &str) -> Option<u64> {
    let digits = name.strip_suffix(".wal")?;
    if digits.len() != 20 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}
