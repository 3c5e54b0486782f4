//! The store of `--in-memory`: it keeps nothing. Every append is durable the moment it is made
//! (there is nothing to wait for), message bodies stay in the engine (no location is ever
//! handed out), and there is nothing to snapshot or remove. A restart starts empty.

use std::sync::atomic::{AtomicU64, Ordering};

use leaseq_core::{Journal, Location, Record};

use super::{Appended, LogError, LogFuture, LogStore, Lsn, Segment, SnapshotSink};
use crate::metrics::LogStats;

/// A log that keeps nothing (see the module docs).
#[derive(Debug, Default)]
pub struct MemoryLog {
    /// The number of records appended, so LSNs advance as in any store.
    tail_lsn: AtomicU64,
}

impl MemoryLog {
    /// An empty log.
    pub fn new() -> MemoryLog {
        MemoryLog::default()
    }
}

impl LogStore for MemoryLog {
    fn append(
        &self,
        journal: &Journal,
        _placed: &mut dyn FnMut(&Record, Location),
    ) -> Result<Appended, LogError> {
        let count = journal.len() as u64;
        let tail_lsn = self.tail_lsn.fetch_add(count, Ordering::Relaxed) + count;
        Ok(Appended { tail_lsn, bytes: 0 })
    }

    fn tail_lsn(&self) -> Lsn {
        self.tail_lsn.load(Ordering::Relaxed)
    }

    fn wait_durable(&self, _lsn: Lsn) -> LogFuture<'_, ()> {
        Box::pin(std::future::ready(Ok(())))
    }

    fn sync(&self) -> Result<(), LogError> {
        Ok(())
    }

    fn read_cached(&self, location: Location) -> Result<Option<Vec<u8>>, LogError> {
        Err(no_records(location))
    }

    fn read(&self, location: Location) -> Result<Vec<u8>, LogError> {
        Err(no_records(location))
    }

    fn stored_bytes(&self, _location: Location) -> u64 {
        0
    }

    fn snapshot_writer(&self, _lsn: Lsn) -> Result<Box<dyn SnapshotSink + '_>, LogError> {
        Err(LogError::other("an in-memory log keeps no snapshots"))
    }

    fn segments(&self) -> Vec<Segment> {
        Vec::new()
    }

    fn remove_segments(
        &self,
        _lsn: Lsn,
        _keep: &dyn Fn(u64) -> bool,
    ) -> Result<Vec<u64>, LogError> {
        Ok(Vec::new())
    }

    fn keeps_records(&self) -> bool {
        false
    }

    fn stats(&self) -> Option<LogStats> {
        None
    }

    /// Keeps nothing, as for records: the service's placements last as long as the process.
    fn place<'a>(&'a self, _name: &'a str, _bucket: u32) -> LogFuture<'a, ()> {
        Box::pin(async { Ok(()) })
    }
}

/// A location can only come from a store that hands them out; this one never does.
fn no_records(location: Location) -> LogError {
    LogError::other(format!(
        "a payload at {location:?}, but the in-memory log keeps no records"
    ))
}
