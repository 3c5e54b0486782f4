//! The log handle: appends, durability waits, reads, segment removal and stats.
//!
//! Concurrency design. All mutable state lives in one `State` behind one mutex, held only for
//! memory operations: `append` encodes the frame into the tail of an in-memory chunk, assigns
//! the LSN and the position, and returns. It makes no syscall (it wakes no thread: the waiter
//! leads the batch or wakes the sync thread), so the engine can append while holding its own
//! lock. A batch (see `sync.rs`) takes all pending chunks at
//! once, writes them, fdatasyncs per the [`FsyncPolicy`], and publishes the new watermarks both
//! to a condition variable (for [`Wal::wait_durable_blocking`]) and to the async waiters of
//! [`Wal::wait_durable`], which wait in LSN order: a publish wakes exactly the waiters whose
//! records it made durable (a broadcast would wake every waiter on every fsync, most of them
//! only to sleep again, which costs a wake-up per waiter per fsync). Because a batch takes
//! everything that was appended while the previous one was busy, one fdatasync covers all the
//! records of all concurrent appenders: group commit. A lone waiter that finds the log idle runs
//! the batch itself; otherwise the sync thread does, and it runs `Interval`'s timed fdatasync.
//!
//! Invariant: a record is in exactly one of three places: `State::pending` (appended, not yet
//! taken), `State::in_flight` (taken by a batch, being written), or its segment file.
//! Reads look in that order under the lock, so a record is readable from the moment `append`
//! returns.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;

use std::time::Instant;

use tokio::sync::oneshot;

use crate::error::{PoisonCause, WalError};
use crate::format::{self, SegmentHeader, FRAME_HEADER_LEN_BYTES, SEGMENT_HEADER_LEN_BYTES};
use crate::recovery;
use crate::snapshot::{self, Snapshot};
use crate::stats::WalStats;
use crate::storage::{DirStorage, Storage, StorageFile};
use crate::sync::{Commit, Writer, Written};
use crate::{
    segment_file_name, Appended, FsyncPolicy, Lsn, Options, Position, Record, Recovery,
    ReplayError, SegmentInfo,
};

/// An open write-ahead log. Share it between threads with an `Arc`.
#[derive(Debug)]
pub struct Wal {
    shared: Arc<Shared>,
    sync_thread: Option<JoinHandle<()>>,
}

/// Where an async waiter learns its record's fate, or that it is to lead the next batch.
pub(crate) type DurableSender = oneshot::Sender<Wake>;

/// The answers of one publish, sent with no lock held: each send may wake a thread, and while
/// the state lock is held appenders wait, and with them whoever holds the engine's lock.
#[must_use]
pub(crate) struct Wakes {
    /// Waiters to answer: durable, or poisoned if `poisoned` is set.
    senders: Vec<DurableSender>,
    poisoned: Option<Arc<PoisonCause>>,
}

impl Wakes {
    pub(crate) fn deliver(self) {
        for sender in self.senders {
            // A waiter that gave up (its future was dropped) has dropped its receiver.
            let _ = sender.send(match &self.poisoned {
                Some(cause) => Wake::Poisoned(cause.clone()),
                None => Wake::Durable,
            });
        }
    }
}

/// What a publish tells an async waiter.
#[derive(Debug)]
pub(crate) enum Wake {
    /// The record is acknowledged.
    Durable,
    /// The log was poisoned before the record was acknowledged.
    Poisoned(Arc<PoisonCause>),
}

/// State shared by the handle and the sync thread.
#[derive(Debug)]
pub(crate) struct Shared {
    pub(crate) storage: Arc<dyn Storage>,
    pub(crate) options: Options,
    pub(crate) state: Mutex<State>,
    /// Wakes the sync thread: new records (not under `Always`), a sync request, shutdown, or
    /// the writer is back.
    pub(crate) work: Condvar,
    /// Wakes blocking waiters and appenders waiting for buffer space: the watermarks moved or
    /// the log was poisoned.
    pub(crate) progress: Condvar,
    /// Async waiters inside [`Wal::wait_durable`] right now, answered or not: a waiter leads
    /// only if it is alone (see `sync.rs`).
    pub(crate) async_waiting: AtomicUsize,
    /// Serializes segment removals, which do I/O outside the state lock.
    removal: Mutex<()>,
    /// Fsync latency and batch sizes, recorded by whoever holds the writer.
    pub(crate) stats: WalStats,
}

/// Durability watermarks, published after every batch.
#[derive(Debug, Clone, Default)]
pub(crate) struct Progress {
    /// Every record with an LSN up to this one has been written to the operating system.
    pub(crate) written_lsn: Lsn,
    /// Every record with an LSN up to this one is covered by an fdatasync.
    pub(crate) synced_lsn: Lsn,
    /// Set once, when a write or fsync fails.
    pub(crate) poisoned: Option<Arc<PoisonCause>>,
}

#[derive(Debug)]
pub(crate) struct State {
    /// The LSN the next append gets.
    pub(crate) next_lsn: Lsn,
    pub(crate) progress: Progress,
    pub(crate) segments: BTreeMap<u64, SegmentMeta>,
    /// Appended chunks not yet taken by the sync thread, in order.
    pub(crate) pending: Vec<Chunk>,
    /// The buffers of the last batch written, emptied, for the next chunks (see
    /// [`Spare`]).
    pub(crate) spare: Spare,
    /// The batch being written; readable until it is in the files.
    pub(crate) in_flight: Option<Arc<Vec<Chunk>>>,
    /// The right to do I/O: here while nobody writes, taken by the sync thread or a leading
    /// waiter for the length of one batch (see `sync.rs`).
    pub(crate) writer: Option<Writer>,
    /// When the last batch with an fdatasync finished (for `Interval`).
    pub(crate) last_sync_at: Instant,
    /// Bytes in `pending` and `in_flight`, bounded by `Options::buffer_size_max_bytes`.
    pub(crate) buffered_bytes: u64,
    /// Whether the sync thread is waiting for work (so whoever gives it some must wake it).
    pub(crate) sync_thread_idle: bool,
    /// Whether that wait is timed (under `Interval`, for the fdatasync it owes): then it ends
    /// by itself within the interval, and a batch that leaves records unsynced need not wake it.
    pub(crate) sync_thread_timed: bool,
    /// [`Wal::sync`] asked for an fdatasync covering records up to this LSN.
    pub(crate) sync_requested_lsn: Lsn,
    /// The handle is being dropped: flush, sync and exit.
    pub(crate) shutdown: bool,
    /// Threads waiting on `Shared::progress` (blocking waiters, appenders waiting for buffer
    /// space).
    pub(crate) progress_waiters: u32,
    /// Async waiters of [`Wal::wait_durable`], by the LSN they wait for and then by arrival,
    /// each with a channel for the outcome. Registered and answered under this lock, so none is
    /// missed. (Keyed by arrival too, rather than a list per LSN, so a registration allocates
    /// no list: most LSNs have exactly one waiter.)
    pub(crate) async_waiters: BTreeMap<(Lsn, u64), DurableSender>,
    /// The arrival number of the next async waiter.
    pub(crate) next_waiter: u64,
}

/// What the log knows about one segment.
#[derive(Debug)]
pub(crate) struct SegmentMeta {
    pub(crate) header: SegmentHeader,
    /// One past the LSN of its last record.
    pub(crate) end_lsn: Lsn,
    /// Its size including buffered bytes.
    pub(crate) size_bytes: u64,
    /// The open file, once created (new segments) or first read (recovered ones).
    pub(crate) file: Option<Arc<dyn StorageFile>>,
    /// Whether its file and header are durable (created, written, fsynced, directory fsynced).
    /// Older segments may be removed only while their successor is durable, so a crash never
    /// leaves a log whose LSNs restart from 1.
    pub(crate) durable: bool,
}

/// A run of appended bytes bound for one segment, contiguous from `offset`.
#[derive(Debug)]
pub(crate) struct Chunk {
    pub(crate) segment: u64,
    pub(crate) offset: u64,
    pub(crate) bytes: Vec<u8>,
    /// `Some` if the batch must create the segment file before writing this chunk.
    pub(crate) create: Option<SegmentHeader>,
    /// The LSN of the last record in the chunk.
    pub(crate) last_lsn: Lsn,
}

impl Shared {
    pub(crate) fn lock(&self) -> MutexGuard<'_, State> {
        self.state
            .lock()
            .expect("wal state mutex poisoned by a panic")
    }

    /// The watermark that [`Wal::wait_durable`] waits for under the configured policy.
    pub(crate) fn acknowledged_lsn(&self, progress: &Progress) -> Lsn {
        match self.options.fsync {
            FsyncPolicy::Always => progress.synced_lsn,
            FsyncPolicy::Interval(_) | FsyncPolicy::Never => progress.written_lsn,
        }
    }

    /// Whether a batch a waiter leads ends with an fdatasync: only under `Always`. Under
    /// `Interval` the sync thread owes the next one, on its timer ([`Shared::publish`] wakes it
    /// if it sleeps without one), so no request waits for an fdatasync it does not need.
    fn leader_syncs(&self) -> bool {
        self.options.fsync == FsyncPolicy::Always
    }

    /// Publishes the state's progress after a batch, with the writer back in place. Called
    /// with the state lock held (`state` is borrowed from it), which is what makes async
    /// registration race-free: a waiter either sees the writer free and leads, or registers
    /// before this runs and is answered here or by a later batch, which this wakes the sync
    /// thread for if records are pending. The answers are taken out of
    /// `State::async_waiters` here but sent by [`Wakes::deliver`] once the lock is released.
    pub(crate) fn publish(&self, state: &mut State) -> Wakes {
        // A notify is a syscall even when nobody waits; under load nobody usually does.
        if state.progress_waiters > 0 {
            self.progress.notify_all();
        }
        let answered = match &state.progress.poisoned {
            Some(_) => std::mem::take(&mut state.async_waiters),
            None => {
                let acknowledged = self.acknowledged_lsn(&state.progress);
                let still_waiting = state.async_waiters.split_off(&(acknowledged + 1, 0));
                std::mem::replace(&mut state.async_waiters, still_waiting)
            }
        };
        let wakes = Wakes {
            senders: answered.into_values().collect(),
            poisoned: state.progress.poisoned.clone(),
        };
        let unsynced = state.progress.synced_lsn < state.progress.written_lsn;
        let owes_sync = matches!(self.options.fsync, FsyncPolicy::Interval(_))
            && unsynced
            && !state.sync_thread_timed;
        if state.sync_thread_idle
            && state.writer.is_some()
            && (owes_sync || crate::sync::sync_thread_work(self, state).is_some())
        {
            self.work.notify_one();
        }
        wakes
    }

    /// Waits on the `progress` condition variable, counted in `State::progress_waiters` so
    /// that [`Shared::publish`] notifies only when someone waits.
    fn wait_for_progress<'a>(&self, mut state: MutexGuard<'a, State>) -> MutexGuard<'a, State> {
        state.progress_waiters += 1;
        let mut state = self
            .progress
            .wait(state)
            .expect("wal state mutex poisoned by a panic");
        state.progress_waiters -= 1;
        state
    }

    /// Commits one batch of everything pending, with an fdatasync, on this thread; `io` runs
    /// the I/O (directly, or inside `tokio::task::block_in_place`: see [`how_to_lead`]). The
    /// writer must be free.
    fn lead(
        &self,
        mut state: MutexGuard<'_, State>,
        io: impl FnOnce(&mut dyn FnMut() -> Written) -> Written,
    ) {
        let mut commit = Commit::begin(&mut state, self.leader_syncs());
        drop(state);
        let result = io(&mut || commit.write(self));
        let wakes = commit.finish(self, &mut self.lock(), result);
        wakes.deliver();
    }
}

impl Wal {
    /// Opens (or creates) the log in `storage`, replaying every valid record through `replay`
    /// in LSN order before returning.
    ///
    /// A torn record at the tail of the last segment is cut off with a warning. Damage anywhere
    /// else fails with [`WalError::Corrupt`], unless `options.salvage` is set, in which case the
    /// log is cut at the last good record and [`Recovery::salvage`] says what was dropped.
    /// Records are replayed as they are read, so on an error the caller must discard whatever
    /// it rebuilt from them.
    pub fn open<F>(
        storage: Arc<dyn Storage>,
        options: Options,
        mut replay: F,
    ) -> Result<(Wal, Recovery), WalError>
    where
        F: FnMut(Record<'_>) -> Result<(), ReplayError>,
    {
        options.validate()?;
        snapshot::remove_temporary_files(storage.as_ref())?;
        let recovered = recovery::recover(storage.as_ref(), &options, &mut replay)?;
        let last_lsn = recovered.report.next_lsn - 1;
        let progress = Progress {
            written_lsn: last_lsn,
            synced_lsn: last_lsn,
            poisoned: None,
        };
        let state = State {
            next_lsn: recovered.report.next_lsn,
            progress: progress.clone(),
            segments: recovered.segments,
            pending: Vec::new(),
            spare: Spare::default(),
            in_flight: None,
            writer: Some(Writer::default()),
            last_sync_at: Instant::now(),
            buffered_bytes: 0,
            sync_thread_idle: false,
            sync_thread_timed: false,
            sync_requested_lsn: 0,
            shutdown: false,
            progress_waiters: 0,
            async_waiters: BTreeMap::new(),
            next_waiter: 0,
        };
        let shared = Arc::new(Shared {
            storage,
            options,
            state: Mutex::new(state),
            work: Condvar::new(),
            progress: Condvar::new(),
            async_waiting: AtomicUsize::new(0),
            removal: Mutex::new(()),
            stats: WalStats::default(),
        });
        let sync_thread = crate::sync::spawn(shared.clone())
            .map_err(|source| WalError::io("spawn sync thread for", "log", source))?;
        let wal = Wal {
            shared,
            sync_thread: Some(sync_thread),
        };
        Ok((wal, recovered.report))
    }

    /// Opens the log in the directory `dir` (created if missing); see [`Wal::open`].
    pub fn open_dir<F>(
        dir: impl AsRef<Path>,
        options: Options,
        replay: F,
    ) -> Result<(Wal, Recovery), WalError>
    where
        F: FnMut(Record<'_>) -> Result<(), ReplayError>,
    {
        let dir = dir.as_ref();
        let storage = DirStorage::new(dir)
            .map_err(|source| WalError::io("create", &dir.display().to_string(), source))?;
        Wal::open(Arc::new(storage), options, replay)
    }

    /// Appends a record and returns its LSN and position. Cheap: it copies the payload into a
    /// buffer under a short lock and makes no syscall; durability comes later, from a batch
    /// led by a waiter or the sync thread, and is awaited with [`Wal::wait_durable`]. Blocks
    /// only if `Options::buffer_size_max_bytes` of appended bytes are still waiting to be
    /// written.
    pub fn append(&self, payload: &[u8]) -> Result<Appended, WalError> {
        let max_bytes = self.shared.options.record_size_max_bytes;
        if payload.len() > max_bytes as usize {
            return Err(WalError::RecordTooLarge {
                len_bytes: payload.len(),
                max_bytes,
            });
        }
        let frame_len_bytes = format::frame_len_bytes(payload.len()) as u64;
        let mut state = self.wait_for_buffer_space(frame_len_bytes)?;
        let lsn = state.next_lsn;
        let segment = self.segment_for_append(&mut state, frame_len_bytes, lsn);
        let meta = state.segments.get_mut(&segment).expect("active segment");
        let offset = meta.size_bytes;
        meta.size_bytes += frame_len_bytes;
        meta.end_lsn = lsn + 1;
        let state = &mut *state;
        let chunk = chunk_for_append(&mut state.pending, &mut state.spare, segment, offset);
        assert_eq!(chunk.offset + chunk.bytes.len() as u64, offset);
        format::encode_frame(payload, &mut chunk.bytes);
        chunk.last_lsn = lsn;
        state.next_lsn = lsn + 1;
        state.buffered_bytes += frame_len_bytes;
        // The waiter leads the batch itself, or wakes the sync thread (see `sync.rs`); waking
        // it here too would cost a wake-up per request for nothing.
        let position = Position {
            segment,
            offset,
            len_bytes: payload.len() as u32,
        };
        Ok(Appended { lsn, position })
    }

    /// Locks the state once the buffer has room for `frame_len_bytes` more (or is empty, so a
    /// single record larger than the buffer still gets through).
    fn wait_for_buffer_space(
        &self,
        frame_len_bytes: u64,
    ) -> Result<MutexGuard<'_, State>, WalError> {
        let max_bytes = self.shared.options.buffer_size_max_bytes;
        let mut state = self.shared.lock();
        loop {
            if let Some(cause) = &state.progress.poisoned {
                return Err(WalError::Poisoned {
                    cause: cause.clone(),
                });
            }
            if state.buffered_bytes == 0 || state.buffered_bytes + frame_len_bytes <= max_bytes {
                return Ok(state);
            }
            // The buffer may be full of records nobody waits for (their waiters gave up):
            // have the sync thread write them.
            let last_lsn = state.next_lsn - 1;
            self.request_sync(&mut state, last_lsn);
            state = self.shared.wait_for_progress(state);
        }
    }

    /// The segment the next record goes to, rolling to a new one if the active segment would
    /// grow past `Options::segment_size_max_bytes` (an empty segment takes any record).
    fn segment_for_append(&self, state: &mut State, frame_len_bytes: u64, lsn: Lsn) -> u64 {
        let size_max_bytes = self.shared.options.segment_size_max_bytes;
        let last = state.segments.last_key_value();
        if let Some((&segment, meta)) = last {
            let empty = meta.end_lsn == meta.header.base_lsn;
            if empty || meta.size_bytes + frame_len_bytes <= size_max_bytes {
                return segment;
            }
        }
        let segment = last.map_or(1, |(&segment, _)| segment + 1);
        let header = SegmentHeader {
            segment,
            base_lsn: lsn,
        };
        state.segments.insert(
            segment,
            SegmentMeta {
                header,
                end_lsn: lsn,
                size_bytes: SEGMENT_HEADER_LEN_BYTES as u64,
                file: None,
                durable: false,
            },
        );
        state.pending.push(Chunk {
            segment,
            offset: SEGMENT_HEADER_LEN_BYTES as u64,
            bytes: Vec::new(),
            create: Some(header),
            last_lsn: lsn,
        });
        segment
    }

    /// Waits until the record `lsn` is acknowledged under the fsync policy: covered by an
    /// fdatasync for [`FsyncPolicy::Always`], written to the operating system otherwise.
    /// Fails with [`WalError::Poisoned`] if the log was poisoned before that happened.
    ///
    /// On a multi-threaded tokio runtime the caller leads the group commit (see `sync.rs`) if it
    /// is the only async waiter and no batch is in flight: it writes (and under `Always`
    /// fdatasyncs) every pending record on its own thread ([`how_to_lead`]). Otherwise it waits
    /// for the sync thread.
    ///
    /// Holds no lock while waiting; cancel-safe: a batch, once started, runs to its end within
    /// one poll, and a waiter that gives up leaves nothing undone (the sync thread writes
    /// whatever is pending once woken).
    pub async fn wait_durable(&self, lsn: Lsn) -> Result<(), WalError> {
        let waiting = AsyncWaiting::enter(&self.shared.async_waiting);
        let receiver = {
            let mut state = self.shared.lock();
            assert!(
                lsn < state.next_lsn,
                "waiting for LSN {lsn}, but the next is {}",
                state.next_lsn
            );
            let settled = |state: &State| {
                self.shared.acknowledged_lsn(&state.progress) >= lsn
                    || state.progress.poisoned.is_some()
            };
            if settled(&state) {
                return self.acknowledgement(&state.progress, lsn);
            }
            let lead = (state.writer.is_some() && waiting.alone())
                .then(how_to_lead)
                .flatten();
            if let Some(lead) = lead {
                // The record is pending (not acknowledged, and no batch in flight), so the
                // batch this leads covers it, or poisons the log.
                self.shared.lead(state, |write| match lead {
                    Lead::Inline => write(),
                    Lead::BlockInPlace => tokio::task::block_in_place(write),
                });
                state = self.shared.lock();
                assert!(settled(&state), "a batch led by this waiter must settle it");
                return self.acknowledgement(&state.progress, lsn);
            }
            let (sender, receiver) = oneshot::channel();
            let arrival = state.next_waiter;
            state.next_waiter += 1;
            state.async_waiters.insert((lsn, arrival), sender);
            // Its record is pending or in flight: wake the sync thread if it sleeps (if the
            // writer is busy, whoever holds it wakes the thread when it is done).
            if state.sync_thread_idle && state.writer.is_some() {
                state.sync_thread_idle = false;
                self.shared.work.notify_one();
            }
            receiver
        };
        match receiver.await {
            Ok(Wake::Durable) => Ok(()),
            Ok(Wake::Poisoned(cause)) => Err(WalError::Poisoned { cause }),
            Err(_) => unreachable!("the log outlives its waiters, and publish answers each one"),
        }
    }

    /// Blocking form of [`Wal::wait_durable`], for threads outside an async runtime. Under
    /// [`FsyncPolicy::Always`] the calling thread leads a batch itself when none is in flight.
    pub fn wait_durable_blocking(&self, lsn: Lsn) -> Result<(), WalError> {
        self.assert_appended(lsn);
        let mut state = self.shared.lock();
        loop {
            let acknowledged = self.shared.acknowledged_lsn(&state.progress) >= lsn;
            if acknowledged || state.progress.poisoned.is_some() {
                return self.acknowledgement(&state.progress, lsn);
            }
            if state.writer.is_some() {
                self.shared.lead(state, |write| write());
                state = self.shared.lock();
                continue;
            }
            state = self.shared.wait_for_progress(state);
        }
    }

    /// Asks the sync thread for a batch with an fdatasync covering `lsn`.
    fn request_sync(&self, state: &mut State, lsn: Lsn) {
        state.sync_requested_lsn = state.sync_requested_lsn.max(lsn);
        if state.sync_thread_idle {
            state.sync_thread_idle = false;
            self.shared.work.notify_one();
        }
    }

    fn assert_appended(&self, lsn: Lsn) {
        let next_lsn = self.shared.lock().next_lsn;
        assert!(
            lsn < next_lsn,
            "waiting for LSN {lsn}, but the next is {next_lsn}"
        );
    }

    /// A record acknowledged before the poisoning stays acknowledged: it is on disk.
    fn acknowledgement(&self, progress: &Progress, lsn: Lsn) -> Result<(), WalError> {
        if self.shared.acknowledged_lsn(progress) >= lsn {
            return Ok(());
        }
        let cause = progress.poisoned.clone().expect("woken without progress");
        Err(WalError::Poisoned { cause })
    }

    /// Writes and fdatasyncs every record appended so far, whatever the policy, and waits for
    /// it. Use it before a clean shutdown under `Interval` or `Never`, or before taking a
    /// snapshot that must not get ahead of the log.
    pub fn sync(&self) -> Result<(), WalError> {
        let mut state = self.shared.lock();
        let target_lsn = state.next_lsn - 1;
        state.sync_requested_lsn = state.sync_requested_lsn.max(target_lsn);
        self.shared.work.notify_one();
        loop {
            if state.progress.synced_lsn >= target_lsn {
                return Ok(());
            }
            if let Some(cause) = &state.progress.poisoned {
                return Err(WalError::Poisoned {
                    cause: cause.clone(),
                });
            }
            state = self.shared.wait_for_progress(state);
        }
    }

    /// The group commit's measurements: fdatasync latency and records per batch.
    pub fn stats(&self) -> &WalStats {
        &self.shared.stats
    }

    /// The LSN the next append will get.
    pub fn next_lsn(&self) -> Lsn {
        self.shared.lock().next_lsn
    }

    /// Every record up to this LSN is covered by an fdatasync (0 if none).
    pub fn durable_lsn(&self) -> Lsn {
        self.shared.lock().progress.synced_lsn
    }

    /// Reads the payload of the record at `position`, whether or not it has reached the disk
    /// yet. Verifies the record's CRC when it comes from the file.
    ///
    /// A poisoned log still serves the records its files hold (so its state can be inspected);
    /// a record that was only buffered when the log was poisoned is gone, and reading it fails
    /// with [`WalError::Poisoned`].
    ///
    /// This may wait for the disk; see [`Wal::read_cached`] for a read that does not.
    pub fn read(&self, position: Position) -> Result<Vec<u8>, WalError> {
        self.read_in(position, Source::Disk)
            .map(|payload| payload.expect("a read from the disk answers"))
    }

    /// [`Wal::read`] if the record is in memory: in the log's buffer, or in the operating
    /// system's page cache. `Ok(None)` if reading it would wait for the disk. An async caller
    /// can then do that read (with [`Wal::read`]) where waiting holds up no other task (in
    /// `tokio::task::block_in_place`, say); the stats count such reads.
    pub fn read_cached(&self, position: Position) -> Result<Option<Vec<u8>>, WalError> {
        let payload = self.read_in(position, Source::Memory)?;
        if payload.is_none() {
            self.count_uncached();
        }
        Ok(payload)
    }

    /// Counts a read from memory that found its record only on the disk.
    fn count_uncached(&self) {
        self.shared
            .stats
            .uncached_reads
            .fetch_add(1, Ordering::Relaxed);
    }

    /// [`Wal::read_cached`] of several records at once: `each(i, answer)` for the record at
    /// `positions[i]`, in no particular order, with its payload borrowed (`Ok(None)`: it is not
    /// in memory). Records that lie close together in a segment's file (at most
    /// [`READ_GAP_BYTES`] apart, within [`READ_SPAN_BYTES`]) are read with one system call: the
    /// bodies one receive delivers from a backlog were mostly appended one after another, and a
    /// system call each cost more than reading the few records between them too. A span not
    /// wholly in the page cache is read record by record, so that what is cached still comes
    /// back.
    pub fn read_cached_many(
        &self,
        positions: &[Position],
        each: &mut dyn FnMut(usize, ReadAnswer<'_>),
    ) {
        let mut answer = |index: usize, read: Result<Option<&[u8]>, WalError>| {
            if matches!(read, Ok(None)) {
                self.count_uncached();
            }
            each(index, read.map_err(|error| self.or_poisoned(error)));
        };
        // The records to read from the files, by segment and offset, and the segments' files.
        // What the state answers (a bad position, a record still buffered) is answered once its
        // lock is released: `each` may take a while, and a failure looks at the lock again.
        let mut from_files: Vec<(usize, Position)> = Vec::with_capacity(positions.len());
        let mut files: Vec<(u64, Arc<dyn StorageFile>)> = Vec::new();
        let mut settled: Vec<(usize, Result<Vec<u8>, WalError>)> = Vec::new();
        {
            let mut state = self.shared.lock();
            for (index, &position) in positions.iter().enumerate() {
                if let Err(error) = check_position(&state, position) {
                    settled.push((index, Err(error)));
                } else if let Some(payload) = read_buffered(&state, position) {
                    settled.push((index, Ok(payload)));
                } else if files
                    .iter()
                    .any(|(segment, _)| *segment == position.segment)
                {
                    from_files.push((index, position));
                } else {
                    match self.segment_file(&mut state, position.segment) {
                        Ok(file) => {
                            files.push((position.segment, file));
                            from_files.push((index, position));
                        }
                        Err(error) => settled.push((index, Err(error))),
                    }
                }
            }
        }
        for (index, read) in settled {
            match read {
                Ok(payload) => answer(index, Ok(Some(&payload))),
                Err(error) => answer(index, Err(error)),
            }
        }
        from_files.sort_unstable_by_key(|(_, position)| (position.segment, position.offset));
        let mut start = 0;
        while let Some((_, first)) = from_files.get(start) {
            let mut end = frame_end(*first);
            let mut stop = start + 1;
            while let Some((_, next)) = from_files.get(stop) {
                let near = next.segment == first.segment
                    && next.offset <= end + READ_GAP_BYTES
                    && frame_end(*next) - first.offset <= READ_SPAN_BYTES;
                if !near {
                    break;
                }
                end = end.max(frame_end(*next));
                stop += 1;
            }
            let (_, file) = files
                .iter()
                .find(|(segment, _)| *segment == first.segment)
                .expect("the file of every segment read");
            self.read_span(file.as_ref(), &from_files[start..stop], end, &mut answer);
            start = stop;
        }
    }

    /// Answers the records of `group` (one segment's, sorted by offset, ending by `end`) from
    /// the page cache, read as one span when there are several.
    fn read_span(
        &self,
        file: &dyn StorageFile,
        group: &[(usize, Position)],
        end: u64,
        answer: &mut dyn FnMut(usize, ReadAnswer<'_>),
    ) {
        let [(_, first), _, ..] = group else {
            // One record (or none): read alone.
            return self.read_each(group, answer);
        };
        let len = (end - first.offset) as usize;
        // The span goes into a buffer the thread keeps, zeroed only as it grows: a fresh one
        // would be zeroed for every receive. (A thread already inside this function, which
        // `answer` never makes it, would get a fresh one.)
        thread_local! {
            static SPAN: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
        }
        SPAN.with(|kept| {
            let mut fresh = Vec::new();
            let mut kept = kept.try_borrow_mut();
            let buffer = match kept.as_deref_mut() {
                Ok(kept) => kept,
                Err(_) => &mut fresh,
            };
            if buffer.len() < len {
                buffer.resize(len, 0);
            }
            let span = &mut buffer[..len];
            if !matches!(file.read_exact_at_cached(span, first.offset), Ok(true)) {
                // An error, or a span partly on the disk: each record alone (what is cached
                // still comes back, and each failure is its own record's).
                return self.read_each(group, answer);
            }
            for &(index, position) in group {
                let at = (position.offset - first.offset) as usize;
                answer(index, checked_payload(span, at, position).map(Some));
            }
        });
    }

    /// Answers the records of `group` one by one from the page cache.
    fn read_each(
        &self,
        group: &[(usize, Position)],
        answer: &mut dyn FnMut(usize, ReadAnswer<'_>),
    ) {
        for &(index, position) in group {
            match self.read_unpoisoned(position, Source::Memory) {
                Ok(payload) => answer(index, Ok(payload.as_deref())),
                Err(error) => answer(index, Err(error)),
            }
        }
    }

    /// `error`, or the log's poison if it is poisoned (a record only buffered when the log was
    /// poisoned is gone).
    fn or_poisoned(&self, error: WalError) -> WalError {
        match self.shared.lock().progress.poisoned.clone() {
            Some(cause) => WalError::Poisoned { cause },
            None => error,
        }
    }

    fn read_in(&self, position: Position, source: Source) -> Result<Option<Vec<u8>>, WalError> {
        self.read_unpoisoned(position, source)
            .map_err(|error| self.or_poisoned(error))
    }

    fn read_unpoisoned(
        &self,
        position: Position,
        source: Source,
    ) -> Result<Option<Vec<u8>>, WalError> {
        let frame_len_bytes = format::frame_len_bytes(position.len_bytes as usize);
        let file = {
            let mut state = self.shared.lock();
            check_position(&state, position)?;
            if let Some(payload) = read_buffered(&state, position) {
                return Ok(Some(payload));
            }
            self.segment_file(&mut state, position.segment)?
        };
        let mut frame = vec![0u8; frame_len_bytes];
        // The file's name only for an error: formatting it costs more than reading a cached
        // record.
        let name = || segment_file_name(position.segment);
        let read = match source {
            Source::Disk => file
                .read_exact_at(&mut frame, position.offset)
                .map(|()| true),
            Source::Memory => file.read_exact_at_cached(&mut frame, position.offset),
        };
        if !read.map_err(|source| WalError::io("read", &name(), source))? {
            return Ok(None);
        }
        checked_payload(&frame, 0, position)?;
        frame.drain(..FRAME_HEADER_LEN_BYTES);
        Ok(Some(frame))
    }

    /// The open file of a segment whose records are all written, opening it on first use.
    fn segment_file(
        &self,
        state: &mut State,
        segment: u64,
    ) -> Result<Arc<dyn StorageFile>, WalError> {
        let meta = state.segments.get_mut(&segment).expect("checked segment");
        if let Some(file) = &meta.file {
            return Ok(file.clone());
        }
        let name = segment_file_name(segment);
        let file = self
            .shared
            .storage
            .open(&name)
            .map_err(|source| WalError::io("open", &name, source))?;
        meta.file = Some(file.clone());
        Ok(file)
    }

    /// The segments, oldest first, with their LSN ranges and sizes, for a compactor to decide
    /// what to rewrite or remove.
    pub fn segments(&self) -> Vec<SegmentInfo> {
        let state = self.shared.lock();
        let active = state.segments.keys().next_back().copied();
        state
            .segments
            .values()
            .map(|meta| SegmentInfo {
                segment: meta.header.segment,
                first_lsn: meta.header.base_lsn,
                end_lsn: meta.end_lsn,
                size_bytes: meta.size_bytes,
                active: Some(meta.header.segment) == active,
            })
            .collect()
    }

    /// Removes every segment whose records all have LSNs below `lsn`, oldest first, and returns
    /// their numbers. Never removes the active segment, nor a segment whose successor is not
    /// yet durable. Reads of records in removed segments fail with
    /// [`WalError::InvalidPosition`].
    pub fn remove_segments_before(&self, lsn: Lsn) -> Result<Vec<u64>, WalError> {
        self.remove_segments(lsn, |_| false)
    }

    /// Removes every segment whose records all have LSNs below `lsn` (so a snapshot covers
    /// them) unless `keep(segment)` says it still holds something needed, and returns their
    /// numbers. This may leave gaps; a later open must then pass a `covered_lsn` of at least
    /// `lsn - 1` (see [`Options::covered_lsn`]). Never removes the active segment, nor a segment
    /// whose successor is not yet durable.
    pub fn remove_segments(
        &self,
        lsn: Lsn,
        keep: impl Fn(u64) -> bool,
    ) -> Result<Vec<u64>, WalError> {
        let _removal = self.shared.removal.lock().expect("removal mutex poisoned");
        let candidates: Vec<u64> = {
            let state = self.shared.lock();
            let metas: Vec<&SegmentMeta> = state.segments.values().collect();
            metas
                .windows(2)
                .take_while(|pair| pair[0].end_lsn <= lsn && pair[1].durable)
                .map(|pair| pair[0].header.segment)
                .filter(|&segment| !keep(segment))
                .collect()
        };
        // Oldest first, so a crash part-way leaves the log as a removal that stopped early would.
        let mut removed = Vec::new();
        for segment in candidates {
            let name = segment_file_name(segment);
            self.shared
                .storage
                .remove(&name)
                .map_err(|source| WalError::io("remove", &name, source))?;
            self.shared.lock().segments.remove(&segment);
            removed.push(segment);
        }
        if !removed.is_empty() {
            self.shared.storage.sync_dir().map_err(|source| {
                WalError::io("fsync directory after removing", "segments", source)
            })?;
        }
        Ok(removed)
    }

    /// Atomically writes a snapshot of the engine's state as of `lsn`; see [`snapshot::write`].
    pub fn write_snapshot(&self, lsn: Lsn, bytes: &[u8]) -> Result<(), WalError> {
        snapshot::write(self.shared.storage.as_ref(), lsn, bytes)
    }

    /// Starts a snapshot as of `lsn`, written as a stream; see [`snapshot::SnapshotWriter`].
    pub fn snapshot_writer(&self, lsn: Lsn) -> Result<snapshot::SnapshotWriter<'_>, WalError> {
        snapshot::SnapshotWriter::create(self.shared.storage.as_ref(), lsn)
    }

    /// The newest snapshot whose checksum verifies; see [`snapshot::latest`].
    pub fn latest_snapshot(&self) -> Result<Option<Snapshot>, WalError> {
        snapshot::latest(self.shared.storage.as_ref())
    }

    /// Writes and fdatasyncs everything appended, stops the sync thread and reports whether
    /// the log ended poisoned. Dropping the handle does the same but cannot report.
    pub fn close(mut self) -> Result<(), WalError> {
        self.stop_sync_thread();
        let state = self.shared.lock();
        match &state.progress.poisoned {
            Some(cause) => Err(WalError::Poisoned {
                cause: cause.clone(),
            }),
            None => Ok(()),
        }
    }

    fn stop_sync_thread(&mut self) {
        let Some(thread) = self.sync_thread.take() else {
            return;
        };
        {
            let mut state = self.shared.lock();
            state.shutdown = true;
            self.shared.work.notify_one();
        }
        if thread.join().is_err() {
            tracing::error!("the wal sync thread panicked");
        }
    }
}

impl Drop for Wal {
    fn drop(&mut self) {
        self.stop_sync_thread();
    }
}

/// Counts an async waiter for as long as its future lives, however it ends.
struct AsyncWaiting<'a>(&'a AtomicUsize);

impl<'a> AsyncWaiting<'a> {
    fn enter(counter: &'a AtomicUsize) -> Self {
        counter.fetch_add(1, Ordering::Relaxed);
        AsyncWaiting(counter)
    }

    /// Whether no other async waiter is inside `wait_durable` (a hint: it may change at once).
    fn alone(&self) -> bool {
        self.0.load(Ordering::Relaxed) == 1
    }
}

impl Drop for AsyncWaiting<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Where a read may take a record's bytes from.
#[derive(Clone, Copy, Debug)]
enum Source {
    /// The log's buffer or the page cache only: a read that would wait for the disk is not done.
    Memory,
    /// Anywhere, waiting for the disk if need be.
    Disk,
}

/// How a lone async waiter runs the batch it leads on its own thread.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Lead {
    /// Right there, blocking the runtime's worker for a write and an fdatasync.
    Inline,
    /// Inside `tokio::task::block_in_place`: the worker's other tasks move to another thread
    /// meanwhile.
    BlockInPlace,
}

/// How a lone async waiter on this thread leads a batch, if it may: only on a worker (or in
/// `block_on`) of a multi-threaded runtime.
///
/// With two workers or more it blocks its worker for the batch: only the holder of the one
/// writer leads, so at most one worker is ever blocked so, and the others go on serving (and
/// steal what is queued on the blocked one). `block_in_place` would hand the worker to another
/// thread first, a wake-up and a second thread on the critical path: measured at one client
/// (W1 -c 1, `--fsync always`, 2 vCPUs), leading inline took the p50 from 207 to 160 µs
/// (the bare fdatasync: 130 µs) and the server CPU per send from 95 to 63 µs, and changed
/// nothing at 64 clients, where waiters seldom lead. With one worker, blocking it would stop
/// every other connection for the batch: there `block_in_place` keeps them served.
///
/// What waits on a blocked worker: a task that the leader itself woke just before (tokio puts
/// it in the worker's LIFO slot, which other workers do not steal), typically a long-polling
/// receive that the leader's send woke. Such a receive cannot answer before this batch ends in
/// any case: its own lease record comes after the send's, so it waits for a later batch.
fn how_to_lead() -> Option<Lead> {
    let handle = tokio::runtime::Handle::try_current().ok()?;
    if handle.runtime_flavor() != tokio::runtime::RuntimeFlavor::MultiThread {
        return None;
    }
    Some(if handle.metrics().num_workers() > 1 {
        Lead::Inline
    } else {
        Lead::BlockInPlace
    })
}

/// What [`Wal::read_cached_many`] answers for a record: its payload, `None` if it is not in
/// memory, or why it cannot be read.
pub type ReadAnswer<'a> = Result<Option<&'a [u8]>, WalError>;

/// How far apart two records may lie in a segment's file to be read with one system call by
/// [`Wal::read_cached_many`] (the bytes between them are read too, and dropped).
pub const READ_GAP_BYTES: u64 = 4 << 10;
/// How many bytes one such read spans at most.
pub const READ_SPAN_BYTES: u64 = 64 << 10;

/// The room a new chunk starts with: grown from empty, it would be reallocated (and copied)
/// about ten times over for a batch of a few kilobytes.
const CHUNK_CAPACITY_BYTES: usize = 16 << 10;

/// The chunk an append at `offset` of `segment` extends: the last pending one if it is for the
/// same segment, else a new one (in a spare buffer if there is one).
fn chunk_for_append<'a>(
    pending: &'a mut Vec<Chunk>,
    spare: &mut Spare,
    segment: u64,
    offset: u64,
) -> &'a mut Chunk {
    let extend = matches!(pending.last(), Some(chunk) if chunk.segment == segment);
    if !extend {
        if pending.capacity() == 0 {
            *pending = std::mem::take(&mut spare.chunks);
        }
        pending.push(Chunk {
            segment,
            offset,
            bytes: spare
                .bytes
                .take()
                .unwrap_or_else(|| Vec::with_capacity(CHUNK_CAPACITY_BYTES)),
            create: None,
            last_lsn: 0,
        });
    }
    pending.last_mut().expect("just ensured")
}

/// Buffers a written batch leaves behind for the next appends: its list of chunks and one
/// chunk's bytes, both emptied.
///
/// Why: at low concurrency a batch holds one chunk of one record, so without them every request
/// allocated a 16 KiB chunk and a list for it, and freed both after the write (~400
/// instructions per durable SendMessage under callgrind). Only a chunk of the usual capacity is
/// kept, so a chunk grown by a large batch is given back to the allocator.
#[derive(Debug, Default)]
pub(crate) struct Spare {
    chunks: Vec<Chunk>,
    bytes: Option<Vec<u8>>,
}

impl Spare {
    /// Keeps what it can of a written batch's chunks.
    pub(crate) fn keep(&mut self, mut chunks: Vec<Chunk>) {
        if self.bytes.is_none() {
            if let Some(chunk) = chunks
                .iter_mut()
                .find(|chunk| chunk.bytes.capacity() == CHUNK_CAPACITY_BYTES)
            {
                let mut bytes = std::mem::take(&mut chunk.bytes);
                bytes.clear();
                self.bytes = Some(bytes);
            }
        }
        chunks.clear();
        if chunks.capacity() > self.chunks.capacity() {
            self.chunks = chunks;
        }
    }
}

fn check_position(state: &State, position: Position) -> Result<(), WalError> {
    let Some(meta) = state.segments.get(&position.segment) else {
        return Err(WalError::InvalidPosition {
            position,
            reason: "no such segment (removed, or never written)",
        });
    };
    if position.offset < SEGMENT_HEADER_LEN_BYTES as u64 || frame_end(position) > meta.size_bytes {
        return Err(WalError::InvalidPosition {
            position,
            reason: "outside the segment's records",
        });
    }
    Ok(())
}

/// The payload of the frame at `at` of `bytes`, read from `position`'s file: checked against its
/// CRC and the length the position says.
fn checked_payload(bytes: &[u8], at: usize, position: Position) -> Result<&[u8], WalError> {
    match format::decode_frame(bytes, at) {
        Ok(payload) if payload.len() == position.len_bytes as usize => Ok(payload),
        Ok(_) => Err(WalError::InvalidPosition {
            position,
            reason: "the record there has a different length",
        }),
        Err(error) => Err(WalError::Corrupt {
            file: segment_file_name(position.segment),
            offset: position.offset,
            reason: error.to_string(),
        }),
    }
}

/// Where the frame at `position` ends in its segment.
fn frame_end(position: Position) -> u64 {
    position.offset + format::frame_len_bytes(position.len_bytes as usize) as u64
}

/// The payload at `position` if it is still in the append buffers.
fn read_buffered(state: &State, position: Position) -> Option<Vec<u8>> {
    let in_flight = state.in_flight.iter().flat_map(|batch| batch.iter());
    let chunk = in_flight.chain(state.pending.iter()).find(|chunk| {
        chunk.segment == position.segment
            && chunk.offset <= position.offset
            && position.offset < chunk.offset + chunk.bytes.len() as u64
    })?;
    let start = (position.offset - chunk.offset) as usize + FRAME_HEADER_LEN_BYTES;
    let end = start + position.len_bytes as usize;
    // Our own buffer holds whole frames, so the range is inside it.
    assert!(end <= chunk.bytes.len());
    Some(chunk.bytes[start..end].to_vec())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chunk(segment: u64, bytes: Vec<u8>) -> Chunk {
        Chunk {
            segment,
            offset: 64,
            bytes,
            create: None,
            last_lsn: 1,
        }
    }

    /// A written batch's buffers come back empty for the next chunk, which starts where it is
    /// told to; a buffer grown past the usual capacity is not kept.
    #[test]
    fn a_written_batch_leaves_its_buffers_empty_for_the_next_chunk() {
        let mut spare = Spare::default();
        let mut usual = Vec::with_capacity(CHUNK_CAPACITY_BYTES);
        usual.extend_from_slice(b"written");
        let usual_at = usual.as_ptr();
        let grown = vec![7u8; CHUNK_CAPACITY_BYTES * 2];
        let mut chunks = Vec::with_capacity(4);
        chunks.push(chunk(1, grown));
        chunks.push(chunk(2, usual));
        let chunks_at = chunks.as_ptr();
        spare.keep(chunks);

        let mut pending = Vec::new();
        let next = chunk_for_append(&mut pending, &mut spare, 3, 128);
        assert_eq!((next.segment, next.offset, next.last_lsn), (3, 128, 0));
        assert!(next.bytes.is_empty() && next.create.is_none());
        assert_eq!(next.bytes.as_ptr(), usual_at);
        assert_eq!(pending.as_ptr(), chunks_at);
        assert_eq!(pending.len(), 1);

        // Nothing spare left: a fresh chunk of the usual capacity.
        let fresh = chunk_for_append(&mut pending, &mut spare, 4, 64);
        assert_eq!((fresh.segment, fresh.offset), (4, 64));
        assert!(fresh.bytes.is_empty());
        assert_eq!(fresh.bytes.capacity(), CHUNK_CAPACITY_BYTES);
        assert_eq!(pending.len(), 2);

        // A batch whose only buffer grew keeps none.
        let mut spare = Spare::default();
        spare.keep(vec![chunk(5, vec![0u8; CHUNK_CAPACITY_BYTES + 1])]);
        assert!(spare.bytes.is_none());
    }
}
