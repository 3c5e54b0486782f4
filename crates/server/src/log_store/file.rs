//! The embedded log store: `leaseq-wal`'s segment files in a data directory (or on a
//! [`leaseq_wal::fault::FaultStorage`] in tests).
//!
//! A record's location is its log position: segment, frame offset and length. Records are
//! encoded here with [`leaseq_core::codec`] into one reused buffer per append.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use parking_lot::Mutex;

use leaseq_core::{codec, Journal, Location, Record};
use leaseq_wal::{Position, Storage, Wal, WalError};

use super::{
    Appended, LogError, LogFuture, LogStore, Lsn, RecordRead, Recoverable, Replayed, Segment,
    SnapshotSink, SnapshotSource,
};
use crate::metrics::LogStats;

/// Room for a record's encoding before it needs to grow: a message of a few hundred bytes with
/// its metadata and attributes.
const ENCODED_RECORD_CAPACITY_BYTES: usize = 1024;

/// The encoding buffer is kept between appends up to this capacity; one grown by a larger record
/// (a message of up to 256 KiB) is given back at the next append.
const ENCODED_BUFFER_KEPT_MAX_BYTES: usize = 64 << 10;

/// The log of one data directory.
pub struct FileLog {
    wal: Wal,
    recovery: leaseq_wal::Recovery,
    /// Where appends encode records, kept so that an append does not allocate one (appends run
    /// under the engine's lock, so this lock is never contended).
    encoded: Mutex<Vec<u8>>,
}

impl FileLog {
    /// What recovery found when the log was opened (a torn tail cut off, a salvage).
    pub fn recovery(&self) -> &leaseq_wal::Recovery {
        &self.recovery
    }
}

/// A file log about to be opened: [`Recoverable`] reads its snapshot, then opens the log,
/// replaying the records after it.
pub struct FileLogOpening {
    storage: Arc<dyn Storage>,
    options: leaseq_wal::Options,
}

impl FileLogOpening {
    /// The log in `storage`, opened with `options`.
    pub fn new(storage: Arc<dyn Storage>, options: leaseq_wal::Options) -> FileLogOpening {
        FileLogOpening { storage, options }
    }
}

impl Recoverable for FileLogOpening {
    type Store = FileLog;

    fn latest_snapshot(&mut self) -> Result<Option<SnapshotSource>, LogError> {
        let snapshot = leaseq_wal::snapshot::latest_file(self.storage.as_ref())?;
        Ok(snapshot.map(|snapshot| SnapshotSource {
            lsn: snapshot.lsn,
            len_bytes: snapshot.len_bytes,
            reader: Box::new(snapshot.reader()),
        }))
    }

    fn replay(
        self,
        snapshot_lsn: Lsn,
        apply: &mut dyn FnMut(Replayed<'_>) -> Result<(), String>,
    ) -> Result<FileLog, LogError> {
        // Segments the snapshot covers are not scanned (they stay for the payloads they hold).
        let options = leaseq_wal::Options {
            covered_lsn: snapshot_lsn,
            ..self.options
        };
        let (wal, recovery) = Wal::open(self.storage, options, |record| {
            // Records the snapshot already contains.
            if record.lsn <= snapshot_lsn {
                return Ok(());
            }
            apply(Replayed {
                bytes: record.payload,
                location: location(record.position),
            })
            .map_err(leaseq_wal::ReplayError::from)
        })?;
        Ok(FileLog {
            wal,
            recovery,
            encoded: Mutex::new(Vec::new()),
        })
    }
}

impl LogStore for FileLog {
    fn append(
        &self,
        journal: &Journal,
        placed: &mut dyn FnMut(&Record, Location),
    ) -> Result<Appended, LogError> {
        // One buffer for the journal's records, sized for the usual one before the first: grown
        // from empty, it would be reallocated half a dozen times for a small message. (Reserved
        // in the loop, so an empty journal, as of a read, allocates nothing.)
        let mut bytes = self.encoded.lock();
        if bytes.capacity() > ENCODED_BUFFER_KEPT_MAX_BYTES {
            *bytes = Vec::new();
        }
        let mut appended_bytes = 0;
        for record in journal {
            bytes.clear();
            bytes.reserve(ENCODED_RECORD_CAPACITY_BYTES);
            codec::encode(record, &mut bytes);
            let appended = self.wal.append(&bytes)?;
            appended_bytes += bytes.len() as u64;
            if record.carried_payload().is_some() {
                if let Some(location) = location(appended.position) {
                    placed(record, location);
                }
            }
        }
        Ok(Appended {
            tail_lsn: self.tail_lsn(),
            bytes: appended_bytes,
        })
    }

    fn tail_lsn(&self) -> Lsn {
        self.wal.next_lsn() - 1
    }

    fn wait_durable(&self, lsn: Lsn) -> LogFuture<'_, ()> {
        Box::pin(async move { Ok(self.wal.wait_durable(lsn).await?) })
    }

    fn sync(&self) -> Result<(), LogError> {
        Ok(self.wal.sync()?)
    }

    fn read_cached(&self, location: Location) -> Result<Option<Vec<u8>>, LogError> {
        Ok(self.wal.read_cached(position(location))?)
    }

    fn read_cached_many(
        &self,
        locations: &[Location],
        each: &mut dyn FnMut(usize, RecordRead<'_>),
    ) {
        let positions: Vec<_> = locations
            .iter()
            .map(|&location| position(location))
            .collect();
        self.wal.read_cached_many(&positions, &mut |index, record| {
            each(index, record.map_err(LogError::from));
        });
    }

    fn read(&self, location: Location) -> Result<Vec<u8>, LogError> {
        Ok(self.wal.read(position(location))?)
    }

    fn stored_bytes(&self, location: Location) -> u64 {
        leaseq_wal::format::frame_len_bytes(location.len_bytes as usize) as u64
    }

    fn snapshot_writer(&self, lsn: Lsn) -> Result<Box<dyn SnapshotSink + '_>, LogError> {
        Ok(Box::new(self.wal.snapshot_writer(lsn)?))
    }

    fn segments(&self) -> Vec<Segment> {
        self.wal
            .segments()
            .into_iter()
            .map(|segment| Segment {
                segment: segment.segment,
                end_lsn: segment.end_lsn,
                size_bytes: segment.size_bytes,
                active: segment.active,
            })
            .collect()
    }

    fn remove_segments(&self, lsn: Lsn, keep: &dyn Fn(u64) -> bool) -> Result<Vec<u64>, LogError> {
        Ok(self.wal.remove_segments(lsn, keep)?)
    }

    fn keeps_records(&self) -> bool {
        true
    }

    fn stats(&self) -> Option<LogStats> {
        let stats = self.wal.stats();
        Some(LogStats {
            fsync_micros: stats.fsync_micros.snapshot(),
            batch_records: stats.batch_records.snapshot(),
            uncached_reads: stats.uncached_reads.load(Ordering::Relaxed),
            // The engine's, added by the service.
            payload_cache: (0, 0),
        })
    }
}

impl SnapshotSink for leaseq_wal::snapshot::SnapshotWriter<'_> {
    fn append_with(&mut self, fill: &mut dyn FnMut(&mut Vec<u8>)) -> Result<(), LogError> {
        Ok(leaseq_wal::snapshot::SnapshotWriter::append_with(
            self,
            |buffer| fill(buffer),
        )?)
    }

    fn finish(self: Box<Self>) -> Result<u64, LogError> {
        Ok(leaseq_wal::snapshot::SnapshotWriter::finish(*self)?)
    }
}

/// The engine's location for a log position, if it fits the engine's compact form (it always
/// does short of four billion segments; a payload that does not fit simply stays in memory).
fn location(position: Position) -> Option<Location> {
    Some(Location {
        segment: u32::try_from(position.segment).ok()?,
        offset: u32::try_from(position.offset).ok()?,
        len_bytes: position.len_bytes,
    })
}

/// The log position of an engine location.
fn position(location: Location) -> Position {
    Position {
        segment: u64::from(location.segment),
        offset: u64::from(location.offset),
        len_bytes: location.len_bytes,
    }
}

impl From<WalError> for LogError {
    fn from(error: WalError) -> LogError {
        LogError {
            poisoned: error.is_poisoned(),
            storage_full: error.is_storage_full(),
            message: error.to_string(),
        }
    }
}
