//! The log's one error type.
//!
//! Callers mostly need to know three things: whether the log is poisoned (stop serving and
//! restart), whether the disk is full (an operator problem, not a bug), and whether the files
//! are corrupt (restart with `salvage`, or restore). [`WalError`] answers each with a method.

use std::io;
use std::sync::Arc;

use crate::{Lsn, Position};

/// Errors returned by the write-ahead log.
#[derive(Debug, thiserror::Error)]
pub enum WalError {
    /// An I/O operation outside the write path failed (opening, listing, reading, removing a
    /// file). The log is not poisoned by it.
    #[error("{op} {file}: {source}")]
    Io {
        /// The operation that failed, e.g. "read".
        op: &'static str,
        /// The file it was applied to.
        file: String,
        /// The underlying error.
        #[source]
        source: io::Error,
    },
    /// An earlier write or fsync failed, so nothing appended after the last durable record can
    /// be trusted. Every waiter and every later append gets this error. Re-opening the log
    /// recovers it to the last record that is valid on disk.
    #[error("the log is poisoned: {cause}")]
    Poisoned {
        /// The failure that poisoned the log.
        #[source]
        cause: Arc<PoisonCause>,
    },
    /// A segment is damaged somewhere other than a torn tail.
    #[error("corrupt log: {file} at byte {offset}: {reason}")]
    Corrupt {
        /// The damaged file.
        file: String,
        /// The byte offset of the first damaged frame or header.
        offset: u64,
        /// What is wrong there.
        reason: String,
    },
    /// A record is larger than `Options::record_size_max_bytes`.
    #[error("record of {len_bytes} bytes exceeds the maximum of {max_bytes} bytes")]
    RecordTooLarge {
        /// The payload length.
        len_bytes: usize,
        /// The configured maximum.
        max_bytes: u32,
    },
    /// A position does not name a record of a segment that still exists.
    #[error("invalid position {position:?}: {reason}")]
    InvalidPosition {
        /// The position given.
        position: Position,
        /// Why it is invalid.
        reason: &'static str,
    },
    /// The replay callback passed to `Wal::open` returned an error.
    #[error("replay of record {lsn} failed: {source}")]
    Replay {
        /// The LSN of the record being replayed.
        lsn: Lsn,
        /// The callback's error.
        #[source]
        source: ReplayError,
    },
    /// The options are inconsistent.
    #[error("invalid options: {0}")]
    InvalidOptions(&'static str),
}

/// The error type a replay callback returns.
pub type ReplayError = Box<dyn std::error::Error + Send + Sync>;

/// The write or fsync failure that poisoned the log.
#[derive(Debug, thiserror::Error)]
#[error("{op} of {file} failed: {source}")]
pub struct PoisonCause {
    /// The operation that failed: "write", "fdatasync", "create", "fsync directory".
    pub op: &'static str,
    /// The file it was applied to.
    pub file: String,
    /// The underlying error.
    #[source]
    pub source: io::Error,
}

impl WalError {
    /// Whether the log is poisoned and must be re-opened before it accepts appends again.
    pub fn is_poisoned(&self) -> bool {
        matches!(self, WalError::Poisoned { .. })
    }

    /// Whether the failure was the disk running out of space (ENOSPC).
    pub fn is_storage_full(&self) -> bool {
        let source = match self {
            WalError::Poisoned { cause } => &cause.source,
            WalError::Io { source, .. } => source,
            _ => return false,
        };
        is_storage_full(source)
    }

    /// Whether the files on disk are damaged (as opposed to an I/O failure or a caller error).
    pub fn is_corruption(&self) -> bool {
        matches!(self, WalError::Corrupt { .. })
    }

    pub(crate) fn io(op: &'static str, file: &str, source: io::Error) -> WalError {
        WalError::Io {
            op,
            file: file.to_owned(),
            source,
        }
    }
}

/// Whether an I/O error is ENOSPC.
pub(crate) fn is_storage_full(error: &io::Error) -> bool {
    const ENOSPC: i32 = 28;
    error.kind() == io::ErrorKind::StorageFull || error.raw_os_error() == Some(ENOSPC)
}
