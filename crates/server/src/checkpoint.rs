//! Checkpoints: the engine's state written as a snapshot, so recovery replays only the log after
//! it and old log segments can be removed. This is what keeps the disk bounded: without it the
//! log would grow with every message ever sent.
//!
//! A checkpoint freezes the engine (`Engine::freeze`: a copy-on-write view, one reference count
//! per 256 messages) while holding the engine lock, so the snapshot is exactly the state after the
//! log's record `lsn`; appends happen under that lock too, so no record can slip in between.
//! Then, without the lock: the frozen state is serialized as records that rebuild it through the
//! same `apply` as live traffic, the log is synced up to `lsn` (a snapshot must never claim
//! records that a crash could still lose, or their LSNs would be reused after recovery and
//! skipped at the next one), the snapshot is written atomically, and the segments older than the
//! *previous* snapshot are removed. The log is kept back to the previous snapshot so that, if the
//! newest snapshot file is found damaged, recovery can fall back to the older one and replay
//! from there.
//!
//! The cost of a checkpoint is proportional to the state, so one is taken after as many log
//! bytes as the last snapshot had (at least `log_bytes_min`): the work per logged byte stays
//! constant. Traffic pauses only for the freeze (logged as `paused_ms`); a chunk of 256
//! messages that traffic changes while the checkpoint reads it is copied once.
//!
//! Snapshot payload: a sequence of `u32` little-endian length + `codec`-encoded record.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Instant;

use leaseq_core::{codec, Engine, Record};
use leaseq_wal::{Lsn, Wal, WalError};
use parking_lot::Mutex;

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
        }
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
    pub fn run(&self, engine: &Mutex<Engine>, log: &Wal) -> Result<(), WalError> {
        self.checkpoint(engine, log)
    }

    /// Runs a checkpoint the caller claimed with [`Checkpoints::claim_if_due`].
    pub fn run_claimed(&self, engine: &Mutex<Engine>, log: &Wal) -> Result<(), WalError> {
        let result = self.checkpoint(engine, log);
        self.running.store(false, Ordering::Release);
        result
    }

    fn checkpoint(&self, engine: &Mutex<Engine>, log: &Wal) -> Result<(), WalError> {
        let _serial = self.serial.lock();
        let started = Instant::now();
        // Under the lock only the freeze: a copy-on-write view of the state that costs one
        // reference count per 256 messages. Serializing it happens after the lock is released,
        // while traffic goes on.
        let (frozen, lsn) = {
            let engine = engine.lock();
            let lsn = log.next_lsn() - 1;
            self.log_bytes_since.store(0, Ordering::Relaxed);
            (engine.freeze(), lsn)
        };
        let paused_ms = started.elapsed().as_millis() as u64;
        // Sized for the largest state the last snapshot and the records logged since can make
        // (a message restored takes less than twice the bytes of its send record), so the
        // buffer is not copied again and again while it grows; unused capacity is never
        // touched, so it costs no memory, and it is bounded all the same.
        let last = self.last_snapshot_bytes.load(Ordering::Relaxed);
        let grown = (frozen.message_count() as u64).saturating_mul(512);
        let capacity = last.max(grown).min(1 << 36) + (1 << 20);
        let mut payload = Vec::with_capacity(usize::try_from(capacity).unwrap_or(0));
        frozen.records(|record| encode_framed(&record, &mut payload));
        drop(frozen);
        log.sync()?;
        log.write_snapshot(lsn, &payload)?;
        let previous = std::mem::replace(&mut *self.newest_lsn.lock(), lsn);
        let removed = log.remove_segments_before(previous + 1)?;
        self.last_snapshot_bytes
            .store(payload.len() as u64, Ordering::Relaxed);
        tracing::info!(
            lsn,
            snapshot_bytes = payload.len(),
            paused_ms,
            elapsed_ms = started.elapsed().as_millis() as u64,
            segments_removed = removed.len(),
            "checkpoint written"
        );
        Ok(())
    }
}

fn encode_framed(record: &Record, out: &mut Vec<u8>) {
    let start = out.len();
    out.extend_from_slice(&[0; 4]);
    codec::encode(record, out);
    let len = u32::try_from(out.len() - start - 4).expect("a record shorter than 4 GiB");
    out[start..start + 4].copy_from_slice(&len.to_le_bytes());
}

/// Applies a snapshot payload to an empty engine.
pub fn load(engine: &mut Engine, payload: &[u8]) -> Result<u64, codec::DecodeError> {
    let mut decoder = codec::Decoder::default();
    let mut at = 0;
    let mut records = 0;
    while at < payload.len() {
        let len_bytes = payload
            .get(at..at + 4)
            .ok_or(codec::DecodeError::Truncated(at))?;
        let len = u32::from_le_bytes(len_bytes.try_into().expect("4 bytes")) as usize;
        let bytes = payload
            .get(at + 4..at + 4 + len)
            .ok_or(codec::DecodeError::Truncated(at))?;
        engine.apply(&decoder.decode(bytes)?);
        at += 4 + len;
        records += 1;
    }
    Ok(records)
}
