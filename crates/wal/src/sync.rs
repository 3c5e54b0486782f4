//! Group commit: writing appended bytes and fdatasyncing them, one batch at a time, by whoever
//! holds the log's one [`Writer`].
//!
//! A batch takes *every* pending chunk under the lock (a cheap `Vec` move), does the I/O with
//! no lock held, then publishes the new watermarks. Appenders that arrive while a batch is being
//! written and synced pile up in `pending` and all ride the next fdatasync: this is the group
//! commit, and it needs no tuning knob, because the batch size adapts to the disk's fsync
//! latency by itself.
//!
//! Who does the I/O. A waiter that is the only async waiter and finds no batch in flight does
//! it on its own thread: it **leads** (see [`crate::Wal::wait_durable`]). A lone request thus
//! pays no thread hand-off at all: the thread that appended is the one that writes, fsyncs
//! (under [`FsyncPolicy::Always`]; under `Interval` the sync thread owes the timed fdatasync,
//! woken for it if it sleeps without a timer) and replies (the hand-offs to and from a sync
//! thread cost two wake-ups, about as long as the fdatasync itself on a small VM, and far
//! longer than the write alone under `Never` and `Interval`). With two
//! runtime workers or more it blocks its worker for the batch, which only one waiter at a time
//! can be doing; with one it leads inside `block_in_place`, so the runtime keeps serving. When other
//! waiters are about, the waiter registers and wakes the dedicated **sync thread**, which, as
//! under the other policies, writes whatever is pending for as long as anything is, so under
//! load batches follow each other with no hand-off between them. Why not let waiting requests
//! lead under load too: measured at 64 concurrent requests on 2 busy vCPUs, it cost 3-7 µs more
//! server CPU per request and ~10% throughput (each `block_in_place` moves the worker to
//! another thread), and an fdatasync issued from a busy tokio worker took 1.5-2x longer to
//! return (the worker waits to be scheduled when the I/O completes) than one from the mostly
//! sleeping sync thread. The sync thread also does [`crate::Wal::sync`], an appender blocked on
//! a full buffer, waiters that cannot lead (not on a multi-threaded tokio runtime), and the
//! flush on close.
//!
//! Both run the same code ([`Commit`]): there is one [`Writer`], and it sits in `State::writer`
//! while nobody writes. Taking it is the right to do I/O; it is put back, with the outcome
//! published, under the same lock. Its bookkeeping (which files have unsynced writes) travels
//! with it, so the order below holds whoever does the I/O.
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
//! Any failure poisons the log: the buffered records are discarded, every waiter gets the
//! error, the sync thread exits and nobody writes again. The failure is never retried: after a
//! failed fsync, Linux may have dropped the dirty pages and will report success next time, so
//! a retry would acknowledge records that are not on disk.

use std::io;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::error::PoisonCause;
use crate::format::SEGMENT_HEADER_LEN_BYTES;
use crate::log::{Chunk, Shared, State, Wakes};
use crate::storage::StorageFile;
use crate::{segment_file_name, FsyncPolicy, Lsn};

/// The right to write and fsync the log, and what that needs to remember between batches.
/// Exactly one exists per log.
#[derive(Debug, Default)]
pub(crate) struct Writer {
    /// Files written since their last fdatasync, with their segment numbers.
    unsynced: Vec<(u64, Arc<dyn StorageFile>)>,
    /// The segment last written and its file's length: everything between the end of its
    /// records and this length is zeros written ahead (see [`Writer::zero_ahead`]).
    zeroed: Option<(u64, u64)>,
}

/// Zeros for [`Writer::zero_ahead`] to write from.
static ZEROS: [u8; 64 << 10] = [0; 64 << 10];

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

/// What [`Commit::write`] did: when the batch's fdatasync ended (`None`: the batch had none),
/// or why the log is poisoned.
pub(crate) type Written = Result<Option<Instant>, PoisonCause>;

/// A batch in progress, holding the writer: [`Commit::begin`] under the lock, [`Commit::write`]
/// without it, [`Commit::finish`] under it again. Every `begin` must be finished, or nobody
/// can write again.
pub(crate) struct Commit {
    writer: Writer,
    batch: Batch,
}

impl Commit {
    /// Takes the writer and every pending chunk. The caller checked that the writer is free.
    pub(crate) fn begin(state: &mut State, sync: bool) -> Commit {
        let writer = state.writer.take().expect("the writer is free");
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
        let batch = Batch {
            chunks,
            files,
            last_lsn,
            bytes,
            records,
            sync,
        };
        Commit { writer, batch }
    }

    /// Does the batch's I/O; call it with no lock held.
    pub(crate) fn write(&mut self, shared: &Shared) -> Written {
        let batch = &self.batch;
        for (chunk, file) in batch.chunks.iter().zip(&batch.files) {
            let file = match (chunk.create, file) {
                (Some(header), _) => self.writer.create_segment(shared, header)?,
                (None, Some(file)) => file.clone(),
                (None, None) => open_segment(shared, chunk.segment)?,
            };
            if !chunk.bytes.is_empty() {
                // Zeros first: if the disk is full, nothing of the batch is written.
                let end = chunk.offset + chunk.bytes.len() as u64;
                self.writer.zero_ahead(shared, chunk.segment, &*file, end)?;
                file.write_all_at(&chunk.bytes, chunk.offset)
                    .map_err(|source| cause("write", chunk.segment, source))?;
                if !self
                    .writer
                    .unsynced
                    .iter()
                    .any(|(s, _)| *s == chunk.segment)
                {
                    self.writer.unsynced.push((chunk.segment, file));
                }
            }
        }
        if batch.records > 0 {
            shared.stats.batch_records.observe(batch.records);
        }
        if batch.sync {
            return Ok(Some(self.writer.sync_unsynced(shared)?));
        }
        Ok(None)
    }

    /// Publishes the outcome of [`Commit::write`] and puts the writer back (see
    /// [`Shared::publish`] for who is woken, and who leads next). The caller delivers the
    /// returned wakes once it has released the lock.
    pub(crate) fn finish(self, shared: &Shared, state: &mut State, result: Written) -> Wakes {
        let Commit { writer, batch } = self;
        state.in_flight = None;
        state.buffered_bytes -= batch.bytes;
        // Nothing else holds the batch's chunks now (readers copy from `in_flight` under the
        // lock), so their buffers serve the next appends.
        if let Ok(chunks) = Arc::try_unwrap(batch.chunks) {
            state.spare.keep(chunks);
        }
        match result {
            Ok(synced_at) => {
                state.progress.written_lsn = batch.last_lsn;
                if let Some(synced_at) = synced_at {
                    state.progress.synced_lsn = batch.last_lsn;
                    state.last_sync_at = synced_at;
                }
            }
            Err(cause) => {
                tracing::error!(%cause, "write-ahead log poisoned");
                state.progress.poisoned = Some(Arc::new(cause));
                state.pending.clear();
            }
        }
        state.writer = Some(writer);
        shared.publish(state)
    }
}

impl Writer {
    /// fdatasyncs every file written since its last one, and returns when that ended: one clock
    /// read both times the fdatasyncs and dates the sync (for [`FsyncPolicy::Interval`]).
    fn sync_unsynced(&mut self, shared: &Shared) -> Result<Instant, PoisonCause> {
        let started = Instant::now();
        if self.unsynced.is_empty() {
            return Ok(started);
        }
        for (segment, file) in &self.unsynced {
            file.sync_data()
                .map_err(|source| cause("fdatasync", *segment, source))?;
        }
        let ended = Instant::now();
        let micros = u64::try_from((ended - started).as_micros()).unwrap_or(u64::MAX);
        shared.stats.fsync_micros.observe(micros);
        self.unsynced.clear();
        Ok(ended)
    }

    /// Makes sure the file of `segment` is filled with zeros at least `Options::zero_ahead_bytes`
    /// (one step) past `end`, where its records are about to end: when `end` comes within a
    /// step of the zeroed length, zeros are written up to the second step boundary after `end`,
    /// never past the segment's size bound (a record larger than a segment gets none). Records
    /// are written after their zeros, so a full disk fails a batch before any of it is written.
    /// Recovery reads zeros after the last record as the end of the log
    /// (`format::scan_segment`); the batch's fdatasync makes them durable with the records.
    ///
    /// Why: records then overwrite allocated blocks inside the file's length, which fdatasync
    /// makes durable without a journal commit of the file's size and extents. On this project's
    /// ext4 VMs an fdatasync after such an overwrite took 110-150 µs where one after an append
    /// took 150-270 µs, with a third less kernel CPU. Once per step a batch pays the larger
    /// fdatasync. A preallocation with `fallocate` would leave unwritten extents, whose
    /// conversion at the first write into each block costs nearly as much as an append.
    fn zero_ahead(
        &mut self,
        shared: &Shared,
        segment: u64,
        file: &dyn StorageFile,
        end: u64,
    ) -> Result<(), PoisonCause> {
        let step = shared.options.zero_ahead_bytes;
        if step == 0 {
            return Ok(());
        }
        let mut zeroed = match self.zeroed {
            Some((zeroed_segment, zeroed)) if zeroed_segment == segment => zeroed,
            // A segment just created (its header alone), or the first write to one recovered
            // at open: whatever follows its records is zeros (recovery checked, or cut a torn
            // tail).
            _ => file
                .len_bytes()
                .map_err(|source| cause("stat", segment, source))?,
        };
        let bound = shared.options.segment_size_max_bytes;
        if end <= bound && zeroed < (end + step).min(bound) {
            let target = ((end / step + 2) * step).min(bound);
            while zeroed < target {
                let len = (target - zeroed).min(ZEROS.len() as u64) as usize;
                file.write_all_at(&ZEROS[..len], zeroed)
                    .map_err(|source| cause("write", segment, source))?;
                zeroed += len as u64;
            }
        }
        self.zeroed = Some((segment, zeroed.max(end)));
        Ok(())
    }

    /// Creates a segment file durably; see the module docs for why in this order.
    fn create_segment(
        &mut self,
        shared: &Shared,
        header: crate::format::SegmentHeader,
    ) -> Result<Arc<dyn StorageFile>, PoisonCause> {
        self.sync_unsynced(shared)?;
        let segment = header.segment;
        let storage = shared.storage.clone();
        let file = storage
            .create(&segment_file_name(segment))
            .map_err(|source| cause("create", segment, source))?;
        file.write_all_at(&header.encode(), 0)
            .map_err(|source| cause("write", segment, source))?;
        self.zero_ahead(shared, segment, &*file, SEGMENT_HEADER_LEN_BYTES as u64)?;
        file.sync_data()
            .map_err(|source| cause("fdatasync", segment, source))?;
        storage.sync_dir().map_err(|source| PoisonCause {
            op: "fsync directory",
            file: format!("after creating {}", segment_file_name(segment)),
            source,
        })?;
        let mut state = shared.lock();
        let meta = state
            .segments
            .get_mut(&segment)
            .expect("segment being created");
        meta.file = Some(file.clone());
        meta.durable = true;
        Ok(file)
    }
}

/// The file of a segment created by an earlier batch, or by recovery.
fn open_segment(shared: &Shared, segment: u64) -> Result<Arc<dyn StorageFile>, PoisonCause> {
    let file = shared
        .storage
        .open(&segment_file_name(segment))
        .map_err(|source| cause("open", segment, source))?;
    let mut state = shared.lock();
    if let Some(meta) = state.segments.get_mut(&segment) {
        meta.file = Some(file.clone());
    }
    Ok(file)
}

pub(crate) fn spawn(shared: Arc<Shared>) -> io::Result<JoinHandle<()>> {
    std::thread::Builder::new()
        .name("leaseq-wal-sync".to_owned())
        .spawn(move || {
            if shared.options.fsync == FsyncPolicy::Always {
                yield_to_requests();
            }
            run(&shared)
        })
}

/// How much less the sync thread's scheduling priority is than its spawner's (nice values).
const SYNC_THREAD_NICE: i32 = 5;

/// Lowers the calling thread's scheduling priority by [`SYNC_THREAD_NICE`] (to nice 19 at most),
/// for the sync thread under [`FsyncPolicy::Always`]: each of its batches ends with an
/// fdatasync, which costs about 50 µs of CPU on a small VM whatever the batch holds, so when
/// the CPUs are busy with requests it is better run after them than at once. Linux keeps a
/// nice value per thread, and `PRIO_PROCESS` with no id names the calling thread. With a free
/// CPU the thread still runs as soon as its fdatasync returns; when the CPUs are busy, its
/// wake-up no longer preempts the thread serving requests, so more requests' records are
/// pending when it starts the next batch (1.4-1.6 times as many at 64 concurrent sends).
/// Under the other policies a batch is a write of a few microseconds that requests wait for,
/// and the thread keeps its spawner's priority (lowered, it measured a little worse).
/// docs/design/wal.md has the measurements. Raising a nice value needs no privilege; if it
/// fails anyway, the thread runs at its spawner's priority.
fn yield_to_requests() {
    let nice = rustix::process::getpriority_process(None)
        .unwrap_or(0)
        .saturating_add(SYNC_THREAD_NICE)
        .min(19);
    if let Err(error) = rustix::process::setpriority_process(None, nice) {
        tracing::debug!(%error, "the log's sync thread keeps its spawner's priority");
    }
}

/// The sync thread: commits whatever [`sync_thread_work`] finds until shutdown or poisoning.
fn run(shared: &Shared) {
    let mut state = shared.lock();
    loop {
        if state.progress.poisoned.is_some() {
            return;
        }
        if state.writer.is_some() {
            if let Some(sync) = sync_thread_work(shared, &state) {
                let mut commit = Commit::begin(&mut state, sync);
                drop(state);
                let result = commit.write(shared);
                let wakes = commit.finish(shared, &mut shared.lock(), result);
                wakes.deliver();
                state = shared.lock();
                continue;
            }
            if state.shutdown {
                return;
            }
        }
        // Idle, or a leader holds the writer (it wakes this thread when it puts the writer
        // back and there is work here, see `Shared::publish`).
        state.sync_thread_idle = true;
        let unsynced = state.progress.synced_lsn < state.progress.written_lsn;
        state = match (shared.options.fsync, unsynced) {
            (FsyncPolicy::Interval(interval), true) => {
                let wait = interval.saturating_sub(state.last_sync_at.elapsed());
                let wait = wait.max(Duration::from_millis(1));
                state.sync_thread_timed = true;
                let (mut state, _) = shared
                    .work
                    .wait_timeout(state, wait)
                    .expect("wal state mutex poisoned by a panic");
                state.sync_thread_timed = false;
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

/// Whether the sync thread has a batch to commit now, and if so whether it ends with an
/// fdatasync. Assumes the writer is free.
pub(crate) fn sync_thread_work(shared: &Shared, state: &State) -> Option<bool> {
    let progress = &state.progress;
    let pending = !state.pending.is_empty();
    let unsynced = progress.synced_lsn < progress.written_lsn;
    let requested = state.sync_requested_lsn > progress.synced_lsn;
    // Under every policy this thread writes whatever is pending once it is awake (under
    // `Always`, woken by a waiter that did not lead or by a leader that left records pending;
    // see the module docs for why).
    let policy_sync = match shared.options.fsync {
        FsyncPolicy::Always => true,
        FsyncPolicy::Interval(interval) => unsynced && state.last_sync_at.elapsed() >= interval,
        FsyncPolicy::Never => false,
    };
    let sync = policy_sync || requested || state.shutdown;
    let flush = state.shutdown && (pending || unsynced);
    (pending || requested || flush || (policy_sync && unsynced)).then_some(sync)
}

fn cause(op: &'static str, segment: u64, source: io::Error) -> PoisonCause {
    PoisonCause {
        op,
        file: segment_file_name(segment),
        source,
    }
}
