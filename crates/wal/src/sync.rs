//! The sync thread: writes appended bytes and fdatasyncs them, one batch at a time.
//!
//! Each loop takes *every* pending chunk under the lock (a cheap `Vec` move), then does the
//! I/O with no lock held, then publishes the new watermarks. Appenders that arrive while a
//! batch is being written and synced pile up in `pending` and all ride the next fdatasync:
//! this is the group commit, and it needs no tuning knob, because the batch size adapts to the
//! disk's fsync latency by itself.
//!
//! Order of operations within a batch, and why:
//!
//! 1. A chunk that starts a new segment is a barrier. First every file written but not yet
//!    fdatasynced (the old segment) is fdatasynced, so that a new segment never exists on disk
//!    while the one before it may still have a torn tail; recovery can then treat damage in
//!    any segment but the last as corruption. Then the file is created, its header written and
//!    fdatasynced, and the directory fsynced, so the segment's name and header are durable
//!    before any record in it is acknowledged, and before older segments may be removed.
//! 2. The chunks are written in order with positional writes.
//! 3. If the policy (or a [`crate::Wal::sync`] request, or shutdown) calls for it, every file
//!    written since the last fdatasync is fdatasynced.
//! 4. The watermarks are published: `written_lsn` always, `synced_lsn` after step 3.
//!
//! Any failure poisons the log and ends the thread. The failure is never retried: after a
//! failed fsync, Linux may have dropped the dirty pages and will report success next time, so
//! a retry would acknowledge records that are not on disk.

use std::io;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::error::PoisonCause;
use crate::log::{Chunk, Shared, State};
use crate::storage::StorageFile;
use crate::{segment_file_name, FsyncPolicy, Lsn};

/// One batch taken from the pending chunks.
struct Batch {
    chunks: Arc<Vec<Chunk>>,
    /// The open file of each chunk's segment; `None` if the chunk creates it.
    files: Vec<Option<Arc<dyn StorageFile>>>,
    /// The LSN of the last record in the batch (or the written watermark if it has none).
    last_lsn: Lsn,
    bytes: u64,
    /// Records in the batch (for the batch-size statistic).
    records: u64,
    sync: bool,
}

/// The sync thread's own bookkeeping, touched by no other thread.
struct SyncThread {
    shared: Arc<Shared>,
    /// Files written since their last fdatasync, with their segment numbers.
    unsynced: Vec<(u64, Arc<dyn StorageFile>)>,
    last_sync_at: Instant,
}

pub(crate) fn spawn(shared: Arc<Shared>) -> io::Result<JoinHandle<()>> {
    std::thread::Builder::new()
        .name("leaseq-wal-sync".to_owned())
        .spawn(move || {
            let mut thread = SyncThread {
                shared,
                unsynced: Vec::new(),
                last_sync_at: Instant::now(),
            };
            thread.run();
        })
}

impl SyncThread {
    fn run(&mut self) {
        while let Some(batch) = self.next_batch() {
            let result = self.execute(&batch);
            let mut state = self.shared.lock();
            state.in_flight = None;
            state.buffered_bytes -= batch.bytes;
            match result {
                Ok(()) => {
                    state.progress.written_lsn = batch.last_lsn;
                    if batch.sync {
                        state.progress.synced_lsn = batch.last_lsn;
                    }
                }
                Err(cause) => {
                    tracing::error!(%cause, "write-ahead log poisoned");
                    state.progress.poisoned = Some(Arc::new(cause));
                    state.pending.clear();
                }
            }
            self.shared.publish(&state);
            if state.progress.poisoned.is_some() {
                return;
            }
        }
    }

    /// Waits for work and takes it, or returns `None` when the thread should exit.
    fn next_batch(&mut self) -> Option<Batch> {
        let shared = self.shared.clone();
        let mut state = shared.lock();
        loop {
            let unsynced = state.progress.synced_lsn < state.progress.written_lsn;
            let sync = self.sync_due(&state, unsynced);
            if !state.pending.is_empty() || (sync && unsynced) {
                return Some(self.take_batch(&mut state, sync));
            }
            if state.shutdown {
                return None;
            }
            state.sync_thread_idle = true;
            state = match (self.shared.options.fsync, unsynced) {
                (FsyncPolicy::Interval(interval), true) => {
                    let wait = interval.saturating_sub(self.last_sync_at.elapsed());
                    let wait = wait.max(Duration::from_millis(1));
                    let (state, _) = shared
                        .work
                        .wait_timeout(state, wait)
                        .expect("wal state mutex poisoned by a panic");
                    state
                }
                _ => shared
                    .work
                    .wait(state)
                    .expect("wal state mutex poisoned by a panic"),
            };
            state.sync_thread_idle = false;
        }
    }

    /// Whether the batch about to be taken ends with an fdatasync.
    fn sync_due(&self, state: &State, unsynced: bool) -> bool {
        let requested = state.sync_requested_lsn > state.progress.synced_lsn;
        let policy = match self.shared.options.fsync {
            FsyncPolicy::Always => true,
            FsyncPolicy::Interval(interval) => unsynced && self.last_sync_at.elapsed() >= interval,
            FsyncPolicy::Never => false,
        };
        policy || requested || state.shutdown
    }

    fn take_batch(&self, state: &mut State, sync: bool) -> Batch {
        let chunks = Arc::new(std::mem::take(&mut state.pending));
        let files = chunks
            .iter()
            .map(|chunk| match chunk.create {
                Some(_) => None,
                None => state
                    .segments
                    .get(&chunk.segment)
                    .and_then(|m| m.file.clone()),
            })
            .collect();
        let last_lsn = chunks
            .last()
            .map_or(state.progress.written_lsn, |chunk| chunk.last_lsn);
        let bytes = chunks.iter().map(|chunk| chunk.bytes.len() as u64).sum();
        // Records are numbered without gaps and the written watermark trails the pending ones.
        let records = last_lsn.saturating_sub(state.progress.written_lsn);
        state.in_flight = Some(chunks.clone());
        Batch {
            chunks,
            files,
            last_lsn,
            bytes,
            records,
            sync,
        }
    }

    /// Does the batch's I/O with no lock held.
    fn execute(&mut self, batch: &Batch) -> Result<(), PoisonCause> {
        for (chunk, file) in batch.chunks.iter().zip(&batch.files) {
            let file = match (chunk.create, file) {
                (Some(header), _) => self.create_segment(header)?,
                (None, Some(file)) => file.clone(),
                (None, None) => self.open_segment(chunk.segment)?,
            };
            if !chunk.bytes.is_empty() {
                file.write_all_at(&chunk.bytes, chunk.offset)
                    .map_err(|source| cause("write", chunk.segment, source))?;
                if !self.unsynced.iter().any(|(s, _)| *s == chunk.segment) {
                    self.unsynced.push((chunk.segment, file));
                }
            }
        }
        if batch.records > 0 {
            self.shared.stats.batch_records.observe(batch.records);
        }
        if batch.sync {
            self.sync_unsynced()?;
        }
        Ok(())
    }

    fn sync_unsynced(&mut self) -> Result<(), PoisonCause> {
        let files = self.unsynced.len();
        let started = Instant::now();
        for (segment, file) in &self.unsynced {
            file.sync_data()
                .map_err(|source| cause("fdatasync", *segment, source))?;
        }
        if files > 0 {
            let micros = u64::try_from(started.elapsed().as_micros()).unwrap_or(u64::MAX);
            self.shared.stats.fsync_micros.observe(micros);
        }
        self.unsynced.clear();
        self.last_sync_at = Instant::now();
        Ok(())
    }

    /// Creates a segment file durably; see the module docs for why in this order.
    fn create_segment(
        &mut self,
        header: crate::format::SegmentHeader,
    ) -> Result<Arc<dyn StorageFile>, PoisonCause> {
        self.sync_unsynced()?;
        let segment = header.segment;
        let storage = self.shared.storage.clone();
        let file = storage
            .create(&segment_file_name(segment))
            .map_err(|source| cause("create", segment, source))?;
        file.write_all_at(&header.encode(), 0)
            .map_err(|source| cause("write", segment, source))?;
        file.sync_data()
            .map_err(|source| cause("fdatasync", segment, source))?;
        storage.sync_dir().map_err(|source| PoisonCause {
            op: "fsync directory",
            file: format!("after creating {}", segment_file_name(segment)),
            source,
        })?;
        let mut state = self.shared.lock();
        let meta = state
            .segments
            .get_mut(&segment)
            .expect("segment being created");
        meta.file = Some(file.clone());
        meta.durable = true;
        Ok(file)
    }

    /// The file of a segment created by an earlier batch, or by recovery.
    fn open_segment(&self, segment: u64) -> Result<Arc<dyn StorageFile>, PoisonCause> {
        let file = self
            .shared
            .storage
            .open(&segment_file_name(segment))
            .map_err(|source| cause("open", segment, source))?;
        let mut state = self.shared.lock();
        if let Some(meta) = state.segments.get_mut(&segment) {
            meta.file = Some(file.clone());
        }
        Ok(file)
    }
}

fn cause(op: &'static str, segment: u64, source: io::Error) -> PoisonCause {
    PoisonCause {
        op,
        file: segment_file_name(segment),
        source,
    }
}
