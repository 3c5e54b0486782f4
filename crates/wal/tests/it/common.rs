//! Helpers shared by the test modules.

use std::path::PathBuf;
use std::sync::Arc;

use leaseq_wal::fault::FaultStorage;
use leaseq_wal::{FsyncPolicy, Lsn, Options, Position, Recovery, Wal, WalError};

/// A record as replayed on open.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Replayed {
    pub lsn: Lsn,
    pub position: Position,
    pub payload: Vec<u8>,
}

/// Small segments, so a few records exercise rolling.
pub fn small_segments(fsync: FsyncPolicy) -> Options {
    Options {
        fsync,
        segment_size_max_bytes: 512,
        ..Options::default()
    }
}

/// Default options but 4 KiB zeroed ahead instead of 1 MiB, for tests that copy the storage
/// many times (forks, crashes).
pub fn small_zero_ahead() -> Options {
    Options {
        zero_ahead_bytes: 4096,
        ..Options::default()
    }
}

/// A payload that differs per record and varies in length.
pub fn payload(i: u64) -> Vec<u8> {
    format!("record-{i};")
        .repeat((i % 7 + 1) as usize)
        .into_bytes()
}

/// Opens the log, collecting every replayed record.
pub fn open(
    storage: &FaultStorage,
    options: Options,
) -> Result<(Wal, Recovery, Vec<Replayed>), WalError> {
    let mut replayed = Vec::new();
    let (wal, recovery) = Wal::open(Arc::new(storage.clone()), options, |record| {
        replayed.push(Replayed {
            lsn: record.lsn,
            position: record.position,
            payload: record.payload.to_vec(),
        });
        Ok(())
    })?;
    Ok((wal, recovery, replayed))
}

/// Appends `count` records numbered from `first` and waits for the last to be acknowledged.
pub fn append_all(wal: &Wal, first: u64, count: u64) -> Vec<(Lsn, Position, Vec<u8>)> {
    let mut appended = Vec::new();
    for i in first..first + count {
        let payload = payload(i);
        let record = wal.append(&payload).expect("append");
        appended.push((record.lsn, record.position, payload));
    }
    if let Some((lsn, _, _)) = appended.last() {
        wal.wait_durable_blocking(*lsn).expect("durable");
    }
    appended
}

/// A fresh directory under the target directory (not /tmp, which may be tmpfs elsewhere).
pub fn temp_dir(name: &str) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join("leaseq-wal-tests")
        .join(format!("{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("create temp dir");
    dir
}
