//! Checkpoints: the engine's state written as a snapshot, so recovery replays only the log after
//! it and old log segments can be removed. This is what keeps the disk bounded: without it the
//! log would grow with every message ever sent.
//!
//! A checkpoint freezes the engine (`Engine::freeze`: a copy-on-write view, one reference count
//! per 256 messages, and a copy of FIFO deduplication windows) while holding the engine lock, so
//! the snapshot is exactly the state after the log's record `lsn`; appends happen under that
//! lock too, so no record can slip in between.
//! Then, without the lock: the frozen state is serialized as records that rebuild it through the
//! same `apply` as live traffic, the log is synced up to `lsn` (a snapshot must never claim
//! records that a crash could still lose, or their LSNs would be reused after recovery and
//! skipped at the next one), the snapshot is written atomically, and the segments older than the
//! *previous* snapshot are removed, except those holding a payload that a message of the frozen
//! state still refers to (see [`crate::payloads`]). The log is kept back to the previous
//! snapshot so that, if the newest snapshot file is found damaged, recovery can fall back to the
//! older one and replay from there. A segment no message refers to at the freeze is never
//! referred to again: new references only ever point at records appended later.
//!
//! Compaction: a segment the snapshot covers whose live payloads fill less than half of it is
//! sparse; its live payloads are written again at the log's tail (`Relocate` records, a bounded
//! volume per checkpoint), so the next checkpoint finds it unreferenced and removes it. Disk use
//! thus stays within about twice the live payloads, plus the log since the previous snapshot.
//!
//! The cost of a checkpoint is proportional to the state, so one is taken after as many log
//! bytes as the last snapshot had (at least `log_bytes_min`): the work per logged byte stays
//! constant. Traffic pauses only for the freeze (logged as `paused_ms`); a chunk of 256
//! messages that traffic changes while the checkpoint reads it is copied once.
//!
//! Snapshot payload: a sequence of `u32` little-endian length + `codec`-encoded record, written
//! and read as a stream.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader, Read};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use leaseq_core::{codec, Engine, FrozenEngine, Journal, Location, Record};
use parking_lot::{Mutex, RwLock, RwLockReadGuard};

use crate::clock::{SharedClock, SystemClock};
use crate::log_store::{LogError, LogStore, Lsn, Segment};
use crate::payloads;

/// Payload bytes one checkpoint relocates at most, so compaction never stalls a checkpoint for
/// long; what is left waits for the next one.
const RELOCATE_BYTES_MAX: u64 = 64 << 20;

/// Payloads relocated per hold of the engine lock.
const RELOCATE_BATCH: usize = 128;

/// When to checkpoint, and what the last checkpoint left.
#[derive(Debug)]
pub struct Checkpoints {
    log_bytes_min: u64,
    log_bytes_since: AtomicU64,
    last_snapshot_bytes: AtomicU64,
    running: AtomicBool,
    /// Held while a checkpoint runs, so two never interleave.
    serial: Mutex<()>,
    /// LSN of the newest snapshot on disk: the log is kept from here on, so the next checkpoint
    /// may remove what is older than it.
    newest_lsn: Mutex<Lsn>,
    /// Held (shared) by receives from before they lease messages until they have read their
    /// payloads, and (exclusive) by segment removal: a payload location handed out is always
    /// readable. Never held across an `.await`.
    payload_reads: RwLock<()>,
    /// Where the time of a written snapshot comes from: the service's clock, so that a test on
    /// a `ManualClock` ages it by jumping time.
    clock: SnapshotClock,
    /// What the checkpoints of this process did, for the metrics page.
    completed: AtomicU64,
    /// When this process started, by `clock`: what the snapshot's age counts from before
    /// the process has written one.
    started_at_ms: AtomicU64,
    snapshot_written_at_ms: AtomicU64,
    last_duration_micros: AtomicU64,
    last_paused_micros: AtomicU64,
}

/// The clock snapshots are dated by (a `Clock` has no `Debug`).
struct SnapshotClock(RwLock<SharedClock>);

impl std::fmt::Debug for SnapshotClock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SnapshotClock")
    }
}

/// What the checkpoints of this process did, as the metrics page shows it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CheckpointStats {
    /// Checkpoints completed since the process started.
    pub completed: u64,
    /// Log bytes appended since the last checkpoint began, or since the process started (what
    /// a recovery would replay beyond the snapshot, roughly).
    pub log_bytes_since: u64,
    /// The size of the newest snapshot (written, or loaded at recovery); 0 if there is none.
    pub snapshot_bytes: u64,
    /// When this process started (its checkpoints were set up, after recovery), by the
    /// service's clock.
    pub started_at_ms: u64,
    /// When this process last wrote a snapshot, by the service's clock (`None` before its
    /// first checkpoint: neither a snapshot file nor a PostgreSQL snapshot row records when
    /// it was written, so a snapshot loaded at recovery has no time).
    pub snapshot_written_at_ms: Option<u64>,
    /// The duration of the last completed checkpoint, freeze to relocations, in microseconds.
    pub last_duration_micros: Option<u64>,
    /// How long the last completed checkpoint held the engine lock (the freeze), in
    /// microseconds.
    pub last_paused_micros: Option<u64>,
}

impl CheckpointStats {
    /// What the snapshot's age counts from: when this process last wrote one, or, before it
    /// has, its start (a snapshot loaded at recovery is older still, by a time nothing
    /// records), so the age is never more than the newest snapshot's.
    pub fn snapshot_age_since_ms(&self) -> u64 {
        self.snapshot_written_at_ms.unwrap_or(self.started_at_ms)
    }
}

impl Checkpoints {
    /// Checkpoints after at least `log_bytes_min` logged bytes; the newest snapshot on disk is at
    /// `newest_lsn` (0 if none).
    pub fn new(log_bytes_min: u64, newest_lsn: Lsn) -> Checkpoints {
        Checkpoints {
            log_bytes_min,
            log_bytes_since: AtomicU64::new(0),
            last_snapshot_bytes: AtomicU64::new(0),
            running: AtomicBool::new(false),
            serial: Mutex::new(()),
            newest_lsn: Mutex::new(newest_lsn),
            payload_reads: RwLock::new(()),
            clock: SnapshotClock(RwLock::new(Arc::new(SystemClock))),
            completed: AtomicU64::new(0),
            started_at_ms: AtomicU64::new(crate::clock::now_ms()),
            snapshot_written_at_ms: AtomicU64::new(0),
            last_duration_micros: AtomicU64::new(0),
            last_paused_micros: AtomicU64::new(0),
        }
    }

    /// Takes the time of written snapshots from `clock` (the service's), and the process's
    /// start too: the service is being set up, before it serves.
    pub fn set_clock(&self, clock: SharedClock) {
        self.started_at_ms.store(clock.now_ms(), Ordering::Relaxed);
        *self.clock.0.write() = clock;
    }

    /// What the checkpoints of this process did.
    pub fn stats(&self) -> CheckpointStats {
        let completed = self.completed.load(Ordering::Acquire);
        let if_any = |value: &AtomicU64| (completed > 0).then(|| value.load(Ordering::Relaxed));
        CheckpointStats {
            completed,
            started_at_ms: self.started_at_ms.load(Ordering::Relaxed),
            log_bytes_since: self.log_bytes_since.load(Ordering::Relaxed),
            snapshot_bytes: self.last_snapshot_bytes.load(Ordering::Relaxed),
            snapshot_written_at_ms: if_any(&self.snapshot_written_at_ms),
            last_duration_micros: if_any(&self.last_duration_micros),
            last_paused_micros: if_any(&self.last_paused_micros),
        }
    }

    /// Keeps log segments from being removed while the guard lives (see `payload_reads`).
    pub(crate) fn payload_reads(&self) -> RwLockReadGuard<'_, ()> {
        self.payload_reads.read()
    }

    /// Records the size of the newest snapshot on disk (the one recovery loaded): the next
    /// checkpoint is due after as many log bytes, and its buffer is sized from it.
    pub fn with_last_snapshot_bytes(self, bytes: u64) -> Checkpoints {
        self.last_snapshot_bytes.store(bytes, Ordering::Relaxed);
        self
    }

    /// Counts bytes appended to the log.
    pub fn logged(&self, bytes: u64) {
        self.log_bytes_since.fetch_add(bytes, Ordering::Relaxed);
    }

    /// Whether a checkpoint is due and none is running; if so, the caller must run one (and the
    /// flag stays set until it finishes).
    pub fn claim_if_due(&self) -> bool {
        let due = self
            .log_bytes_min
            .max(self.last_snapshot_bytes.load(Ordering::Relaxed));
        self.log_bytes_since.load(Ordering::Relaxed) >= due
            && !self.running.swap(true, Ordering::AcqRel)
    }

    /// Runs one checkpoint now (after a running one, if any, finishes).
    pub fn run(&self, engine: &Mutex<Engine>, log: &dyn LogStore) -> Result<(), LogError> {
        self.checkpoint(engine, log)
    }

    /// Runs a checkpoint the caller claimed with [`Checkpoints::claim_if_due`].
    pub fn run_claimed(&self, engine: &Mutex<Engine>, log: &dyn LogStore) -> Result<(), LogError> {
        let result = self.checkpoint(engine, log);
        self.running.store(false, Ordering::Release);
        result
    }

    fn checkpoint(&self, engine: &Mutex<Engine>, log: &dyn LogStore) -> Result<(), LogError> {
        let _serial = self.serial.lock();
        let started = Instant::now();
        // Under the lock only the freeze: a copy-on-write view of the state that costs one
        // reference count per 256 messages, plus a copy of each FIFO queue's deduplication
        // window (about 40 ns per entry). Serializing it happens after the lock is released,
        // while traffic goes on.
        let (frozen, lsn) = {
            let engine = engine.lock();
            let lsn = log.tail_lsn();
            self.log_bytes_since.store(0, Ordering::Relaxed);
            (engine.freeze(), lsn)
        };
        let paused = started.elapsed();
        let paused_ms = paused.as_millis() as u64;
        // Streamed to the snapshot file in chunks: the snapshot is the size of the state, and
        // holding it in memory would double the server's footprint while a checkpoint runs.
        let mut writer = log.snapshot_writer(lsn)?;
        let mut written = Ok(());
        frozen.records(|record| {
            if written.is_ok() {
                written = writer.append_with(&mut |buffer| encode_framed(&record, buffer));
            }
        });
        written?;
        let live = live_bytes_by_segment(&frozen, log);
        let moves = relocations(&frozen, &live, &log.segments(), lsn);
        drop(frozen);
        // The log must be durable up to `lsn` before the snapshot claims it.
        log.sync()?;
        let snapshot_bytes = writer.finish()?;
        let previous = std::mem::replace(&mut *self.newest_lsn.lock(), lsn);
        let removed = {
            let _no_reads = self.payload_reads.write();
            log.remove_segments(previous + 1, &|segment| live.contains_key(&segment))?
        };
        self.last_snapshot_bytes
            .store(snapshot_bytes, Ordering::Relaxed);
        let written_at_ms = self.clock.0.read().now_ms();
        self.snapshot_written_at_ms
            .store(written_at_ms, Ordering::Relaxed);
        let relocated = self.relocate(engine, log, &moves)?;
        let micros = |duration: std::time::Duration| duration.as_micros() as u64;
        self.last_duration_micros
            .store(micros(started.elapsed()), Ordering::Relaxed);
        self.last_paused_micros
            .store(micros(paused), Ordering::Relaxed);
        // Release: a reader that sees the count sees the values above.
        self.completed.fetch_add(1, Ordering::Release);
        tracing::info!(
            lsn,
            snapshot_bytes,
            paused_ms,
            elapsed_ms = started.elapsed().as_millis() as u64,
            segments_removed = removed.len(),
            segments_kept_for_payloads = live.len(),
            payloads_relocated = relocated,
            "checkpoint written"
        );
        Ok(())
    }

    /// Writes the payloads of `moves` again at the log's tail, in batches: each batch is read
    /// without the engine lock, then relocated and appended under it (messages deleted or moved
    /// meanwhile are skipped by `Engine::relocate`). Returns how many were relocated.
    fn relocate(
        &self,
        engine: &Mutex<Engine>,
        log: &dyn LogStore,
        moves: &[(u64, u64, Location)],
    ) -> Result<usize, LogError> {
        let mut relocated = 0;
        for batch in moves.chunks(RELOCATE_BATCH) {
            let mut read = Vec::with_capacity(batch.len());
            for &(queue_id, seq, location) in batch {
                match payloads::read(log, location) {
                    Ok(payload) => read.push((queue_id, seq, location, payload)),
                    Err(payloads::ReadError::Log(error)) => return Err(error),
                    Err(error) => {
                        tracing::error!(%error, ?location, "a stored payload does not decode; not relocated")
                    }
                }
            }
            let mut journal = Journal::new();
            let mut engine = engine.lock();
            for (queue_id, seq, from, payload) in read {
                engine.relocate(queue_id, seq, from, payload, &mut journal);
            }
            relocated += journal.len();
            let appended = payloads::append(log, &mut engine, &journal)?;
            self.logged(appended.bytes);
        }
        Ok(relocated)
    }
}

/// Bytes of the records holding live payloads, by log segment: the segments that must stay.
fn live_bytes_by_segment(frozen: &FrozenEngine, log: &dyn LogStore) -> BTreeMap<u64, u64> {
    let mut live = BTreeMap::new();
    frozen.stored_payloads(|_, _, location| {
        *live.entry(u64::from(location.segment)).or_insert(0) += log.stored_bytes(location);
    });
    live
}

/// The payloads to relocate: those in sparse segments (live payloads under half the segment)
/// that this snapshot covers, oldest segments first, up to [`RELOCATE_BYTES_MAX`].
fn relocations(
    frozen: &FrozenEngine,
    live: &BTreeMap<u64, u64>,
    segments: &[Segment],
    lsn: Lsn,
) -> Vec<(u64, u64, Location)> {
    let mut budget_bytes = RELOCATE_BYTES_MAX;
    let mut sparse = BTreeSet::new();
    for segment in segments {
        let Some(&live_bytes) = live.get(&segment.segment) else {
            continue;
        };
        let covered = !segment.active && segment.end_lsn <= lsn + 1;
        if !covered || live_bytes * 2 >= segment.size_bytes || live_bytes > budget_bytes {
            continue;
        }
        budget_bytes -= live_bytes;
        sparse.insert(segment.segment);
    }
    let mut moves = Vec::new();
    if !sparse.is_empty() {
        frozen.stored_payloads(|queue_id, seq, location| {
            if sparse.contains(&u64::from(location.segment)) {
                moves.push((queue_id, seq, location));
            }
        });
    }
    moves
}

fn encode_framed(record: &Record, out: &mut Vec<u8>) {
    let start = out.len();
    out.extend_from_slice(&[0; 4]);
    codec::encode(record, out);
    let len = u32::try_from(out.len() - start - 4).expect("a record shorter than 4 GiB");
    out[start..start + 4].copy_from_slice(&len.to_le_bytes());
}

/// Why a snapshot could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// Reading the file failed.
    #[error("reading the snapshot: {0}")]
    Io(#[from] std::io::Error),
    /// A record in it does not decode (its checksum matched: a bug, not damage).
    #[error("record at byte {at}: {error}")]
    Decode {
        /// Where the record's length prefix is.
        at: u64,
        /// What was wrong.
        error: codec::DecodeError,
    },
}

/// Applies a snapshot payload, read as a stream, to an empty engine; returns the records read.
pub fn load(engine: &mut Engine, payload: impl Read) -> Result<u64, LoadError> {
    let mut reader = BufReader::with_capacity(1 << 20, payload);
    let mut decoder = codec::Decoder::default();
    let mut bytes = Vec::new();
    let (mut at, mut records) = (0u64, 0u64);
    loop {
        let mut len = [0u8; 4];
        // End of input exactly at a record boundary ends the snapshot.
        if reader.fill_buf()?.is_empty() {
            return Ok(records);
        }
        reader.read_exact(&mut len)?;
        bytes.resize(u32::from_le_bytes(len) as usize, 0);
        reader.read_exact(&mut bytes)?;
        let record = decoder
            .decode(&bytes)
            .map_err(|error| LoadError::Decode { at, error })?;
        engine.apply(&record);
        at += 4 + bytes.len() as u64;
        records += 1;
    }
}
