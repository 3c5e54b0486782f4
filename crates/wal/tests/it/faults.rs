//! Failed fsyncs, a full disk and crashes with torn writes, through the fault storage.

use leaseq_wal::fault::{CrashMode, FaultStorage};
use leaseq_wal::format::frame_len_bytes;
use leaseq_wal::{segment_file_name, FsyncPolicy, Options, Position, WalError};

use crate::common::{append_all, open, payload, small_segments, small_zero_ahead};

#[test]
fn a_failed_fsync_poisons_the_log() {
    let storage = FaultStorage::new();
    let (wal, _, _) = open(&storage, small_segments(FsyncPolicy::Always)).unwrap();
    let acknowledged = append_all(&wal, 0, 3);
    storage.fail_next_sync();
    let doomed = wal.append(b"doomed").unwrap();
    let error = wal.wait_durable_blocking(doomed.lsn).unwrap_err();
    assert!(error.is_poisoned(), "{error}");
    let WalError::Poisoned { cause } = &error else {
        unreachable!()
    };
    assert_eq!(cause.op, "fdatasync");
    // Everything after is refused, but what was acknowledged stays acknowledged.
    assert!(wal.append(b"later").unwrap_err().is_poisoned());
    assert!(wal.sync().unwrap_err().is_poisoned());
    // What the files hold stays readable.
    assert_eq!(wal.read(acknowledged[0].1).unwrap(), acknowledged[0].2);
    wal.wait_durable_blocking(acknowledged[2].0).unwrap();
    assert!(wal.close().unwrap_err().is_poisoned());

    let storage = storage.crash(CrashMode::DropUnsynced);
    let (_, _, replayed) = open(&storage, small_segments(FsyncPolicy::Always)).unwrap();
    let payloads: Vec<_> = replayed.into_iter().map(|r| r.payload).collect();
    let expected: Vec<_> = acknowledged.into_iter().map(|a| a.2).collect();
    assert_eq!(payloads, expected);
}

#[test]
fn async_waiters_see_the_poisoning() {
    let storage = FaultStorage::new();
    let (wal, _, _) = open(&storage, small_segments(FsyncPolicy::Always)).unwrap();
    storage.fail_next_sync();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let record = wal.append(b"doomed").unwrap();
    let error = runtime.block_on(wal.wait_durable(record.lsn)).unwrap_err();
    assert!(error.is_poisoned() && !error.is_storage_full());
}

#[test]
fn a_full_disk_fails_the_waiters_and_recovers_after_restart() {
    let storage = FaultStorage::new();
    let (wal, _, _) = open(&storage, small_segments(FsyncPolicy::Always)).unwrap();
    let acknowledged = append_all(&wal, 0, 10);
    let used: u64 = storage
        .file_names()
        .iter()
        .map(|name| storage.contents(name).unwrap().len() as u64)
        .sum();
    // Room for a little more than one record: the next batch fails part-way.
    storage.set_space_limit_bytes(Some(used + frame_len_bytes(payload(10).len()) as u64 + 5));
    let mut failed = None;
    for i in 10..40 {
        let record = wal.append(&payload(i)).unwrap();
        if let Err(error) = wal.wait_durable_blocking(record.lsn) {
            failed = Some(error);
            break;
        }
    }
    let error = failed.expect("the disk filled up");
    assert!(error.is_poisoned() && error.is_storage_full(), "{error}");
    assert!(wal.append(b"x").unwrap_err().is_storage_full());
    drop(wal);

    // The operator frees space and restarts; the partial write is a torn tail and is cut.
    storage.set_space_limit_bytes(None);
    let storage = storage.crash(CrashMode::KeepTornPrefix { bytes: u64::MAX });
    let (wal, _, replayed) = open(&storage, small_segments(FsyncPolicy::Always)).unwrap();
    assert!(replayed.len() >= acknowledged.len());
    for (record, (lsn, _, payload)) in replayed.iter().zip(&acknowledged) {
        assert_eq!((record.lsn, &record.payload), (*lsn, payload));
    }
    let record = wal.append(b"after restart").unwrap();
    wal.wait_durable_blocking(record.lsn).unwrap();
}

#[test]
fn a_crash_keeps_synced_records_and_cuts_any_torn_tail() {
    // Under `Never`, records are written but not synced until `sync()`, which leaves unsynced
    // bytes for the crash to tear at every length.
    let options = Options {
        fsync: FsyncPolicy::Never,
        ..small_zero_ahead()
    };
    let base = FaultStorage::new();
    let (wal, _, _) = open(&base, options.clone()).unwrap();
    let synced = append_all(&wal, 0, 4);
    wal.sync().unwrap();
    let unsynced = append_all(&wal, 4, 4);
    // The unsynced records overwrite space zeroed ahead (and synced) with the synced ones, so
    // the crash tears the writes of the unsynced records themselves.
    let end = |records: &[(u64, Position, Vec<u8>)]| {
        let p = records.last().unwrap().1;
        p.offset + frame_len_bytes(p.len_bytes as usize) as u64
    };
    let (synced_len, written_len) = (end(&synced), end(&unsynced));
    let name = segment_file_name(1);
    assert!(base.durable_len_bytes(&name).unwrap() > written_len);
    drop(wal);

    for torn_bytes in 0..=(written_len - synced_len) {
        let storage = FaultStorage::new();
        let (wal, _, _) = open(&storage, options.clone()).unwrap();
        append_all(&wal, 0, 4);
        wal.sync().unwrap();
        append_all(&wal, 4, 4);
        let storage = storage.crash(CrashMode::KeepTornPrefix { bytes: torn_bytes });
        drop(wal);
        let (_, recovery, replayed) = open(&storage, options.clone())
            .unwrap_or_else(|error| panic!("torn at {torn_bytes}: {error}"));
        let survived = unsynced
            .iter()
            .take_while(|(_, p, _)| {
                p.offset + frame_len_bytes(p.len_bytes as usize) as u64 <= synced_len + torn_bytes
            })
            .count();
        assert_eq!(
            replayed.len(),
            synced.len() + survived,
            "torn at {torn_bytes}"
        );
        let on_boundary = recovery.torn_tail.is_none();
        let expected_boundary = synced_len + torn_bytes
            == synced
                .iter()
                .chain(&unsynced[..survived])
                .last()
                .map(|(_, p, _)| p.offset + frame_len_bytes(p.len_bytes as usize) as u64)
                .unwrap();
        assert_eq!(on_boundary, expected_boundary, "torn at {torn_bytes}");
    }
}
