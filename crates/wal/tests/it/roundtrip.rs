//! Append, read and recover round trips, on the fault storage and on a real directory.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use leaseq_wal::fault::FaultStorage;
use leaseq_wal::{DirStorage, FsyncPolicy, Options, Wal, WalError};

use crate::common::{append_all, open, payload, small_segments, temp_dir};

#[test]
fn reopen_replays_every_record_in_order() {
    let storage = FaultStorage::new();
    let (wal, recovery, replayed) = open(&storage, small_segments(FsyncPolicy::Always)).unwrap();
    assert!(replayed.is_empty());
    assert_eq!(recovery.next_lsn, 1);
    let appended = append_all(&wal, 0, 100);
    assert_eq!(appended.first().map(|a| a.0), Some(1));
    wal.close().unwrap();

    let (wal, recovery, replayed) = open(&storage, small_segments(FsyncPolicy::Always)).unwrap();
    assert_eq!(recovery.records_replayed, 100);
    assert_eq!(recovery.next_lsn, 101);
    assert_eq!(recovery.torn_tail, None);
    for ((lsn, position, payload), record) in appended.iter().zip(&replayed) {
        assert_eq!(
            (*lsn, *position, payload),
            (record.lsn, record.position, &record.payload)
        );
        assert_eq!(&wal.read(*position).unwrap(), payload);
    }
    // Appending continues with the next LSN.
    assert_eq!(wal.append(b"more").unwrap().lsn, 101);
}

#[test]
fn read_serves_records_not_yet_written() {
    let storage = FaultStorage::new();
    let (wal, _, _) = open(&storage, small_segments(FsyncPolicy::Never)).unwrap();
    for i in 0..50 {
        let record = wal.append(&payload(i)).unwrap();
        // Immediately, whether it is still in the buffer, being written or in the file.
        assert_eq!(wal.read(record.position).unwrap(), payload(i));
    }
}

#[test]
fn large_records_get_their_own_segment() {
    let storage = FaultStorage::new();
    let options = Options {
        segment_size_max_bytes: 1 << 20,
        ..Options::default()
    };
    let (wal, _, _) = open(&storage, options.clone()).unwrap();
    let small = wal.append(b"small").unwrap();
    let big: Vec<u8> = (0..(2u32 << 20) + 7).map(|i| (i % 251) as u8).collect();
    let record = wal.append(&big).unwrap();
    assert_ne!(record.position.segment, small.position.segment);
    wal.wait_durable_blocking(record.lsn).unwrap();
    assert_eq!(wal.read(record.position).unwrap(), big);
    let too_big = vec![0u8; (4 << 20) + 1];
    assert!(matches!(
        wal.append(&too_big),
        Err(WalError::RecordTooLarge { .. })
    ));
    wal.close().unwrap();

    let (wal, _, replayed) = open(&storage, options).unwrap();
    assert_eq!(replayed.len(), 2);
    assert_eq!(replayed[1].payload, big);
    assert_eq!(wal.read(record.position).unwrap(), big);
}

#[test]
fn async_wait_durable_resolves() {
    let storage = FaultStorage::new();
    let (wal, _, _) = open(&storage, small_segments(FsyncPolicy::Always)).unwrap();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    runtime.block_on(async {
        let record = wal.append(b"hello").unwrap();
        wal.wait_durable(record.lsn).await.unwrap();
        assert!(wal.durable_lsn() >= record.lsn);
    });
}

#[test]
fn every_policy_recovers_after_clean_close() {
    for fsync in [
        FsyncPolicy::Always,
        FsyncPolicy::Interval(std::time::Duration::from_millis(5)),
        FsyncPolicy::Never,
    ] {
        let storage = FaultStorage::new();
        let (wal, _, _) = open(&storage, small_segments(fsync)).unwrap();
        let appended = append_all(&wal, 0, 40);
        wal.close().unwrap();
        // A clean close fdatasyncs, so even a crash right after loses nothing.
        let storage = storage.crash(leaseq_wal::fault::CrashMode::DropUnsynced);
        let (_, _, replayed) = open(&storage, small_segments(fsync)).unwrap();
        let payloads: Vec<_> = replayed.into_iter().map(|r| r.payload).collect();
        let expected: Vec<_> = appended.into_iter().map(|a| a.2).collect();
        assert_eq!(payloads, expected, "{fsync:?}");
    }
}

#[test]
fn real_directory_round_trip() {
    let dir = temp_dir("round-trip");
    let storage: Arc<DirStorage> = Arc::new(DirStorage::new(&dir).unwrap());
    let options = small_segments(FsyncPolicy::Always);
    let (wal, _) = Wal::open(storage.clone(), options.clone(), |_| Ok(())).unwrap();
    let appended = append_all(&wal, 0, 30);
    for (_, position, payload) in &appended {
        assert_eq!(&wal.read(*position).unwrap(), payload);
    }
    drop(wal);

    let mut replayed = Vec::new();
    let (wal, recovery) = Wal::open_dir(&dir, options, |record| {
        replayed.push((record.lsn, record.payload.to_vec()));
        Ok(())
    })
    .unwrap();
    assert_eq!(recovery.records_replayed, 30);
    let expected: Vec<_> = appended.iter().map(|a| (a.0, a.2.clone())).collect();
    assert_eq!(replayed, expected);
    assert!(wal.segments().len() > 1);
    wal.close().unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
}

/// `read_cached` answers from the page cache and does not read what only the disk holds (it
/// counts it instead); `read` does, and then the page cache answers again. Evicting the
/// segment files with `posix_fadvise(DONTNEED)` stands in for a backlog larger than memory.
#[test]
fn read_cached_does_not_wait_for_the_disk() {
    let dir = temp_dir("read-cached");
    let storage: Arc<DirStorage> = Arc::new(DirStorage::new(&dir).unwrap());
    let (wal, _) = Wal::open(storage, small_segments(FsyncPolicy::Always), |_| Ok(())).unwrap();
    let appended = append_all(&wal, 0, 30);
    let uncached_reads = || wal.stats().uncached_reads.load(Ordering::Relaxed);
    for (_, position, payload) in &appended {
        assert_eq!(wal.read_cached(*position).unwrap().as_ref(), Some(payload));
    }
    assert_eq!(
        uncached_reads(),
        0,
        "written records stay in the page cache"
    );

    let evict = || {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let file = std::fs::File::open(entry.unwrap().path()).unwrap();
            rustix::fs::fadvise(&file, 0, None, rustix::fs::Advice::DontNeed).unwrap();
        }
    };
    let mut uncached_expected = 0;
    for (_, position, payload) in &appended {
        // Records share pages, so each is checked right after an eviction. The kernel treats
        // DONTNEED as advice: on a busy machine a page can stay cached (or be read ahead again)
        // once in a while, so several tries are allowed, a moment apart (one run failed five
        // tries in a row while the machine's two cores were busy with other builds); a read
        // that still found it cached was right to answer from the cache.
        let evicted = (0..20).any(|try_number| {
            if try_number > 0 {
                std::thread::sleep(std::time::Duration::from_millis(5));
            }
            evict();
            match wal.read_cached(*position).unwrap() {
                None => true,
                Some(cached) => {
                    assert_eq!(&cached, payload);
                    false
                }
            }
        });
        assert!(
            evicted,
            "the page of {position:?} never left the page cache"
        );
        uncached_expected += 1;
        assert_eq!(&wal.read(*position).unwrap(), payload);
        assert_eq!(wal.read_cached(*position).unwrap().as_ref(), Some(payload));
    }
    assert_eq!(uncached_reads(), uncached_expected);
    wal.close().unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn replay_errors_stop_the_open() {
    let storage = FaultStorage::new();
    let (wal, _, _) = open(&storage, small_segments(FsyncPolicy::Always)).unwrap();
    append_all(&wal, 0, 5);
    wal.close().unwrap();
    let result = Wal::open(
        Arc::new(storage),
        small_segments(FsyncPolicy::Always),
        |record| match record.lsn {
            3 => Err("engine refused".into()),
            _ => Ok(()),
        },
    );
    assert!(matches!(result, Err(WalError::Replay { lsn: 3, .. })));
}

/// The sync thread's statistics count every record once in a batch, and one fdatasync per
/// synced batch under `Always`; `Never` syncs nothing (until shutdown).
#[test]
fn stats_count_batches_and_fsyncs() {
    for (fsync, fsyncs_expected) in [(FsyncPolicy::Always, true), (FsyncPolicy::Never, false)] {
        let storage = FaultStorage::new();
        let (wal, _, _) = open(
            &storage,
            Options {
                fsync,
                ..Options::default()
            },
        )
        .unwrap();
        append_all(&wal, 0, 25);
        let batches = wal.stats().batch_records.snapshot();
        assert_eq!(
            batches.sum, 25,
            "{fsync:?}: every record in exactly one batch"
        );
        assert!(
            batches.count >= 1 && batches.count <= 25,
            "{fsync:?}: {batches:?}"
        );
        let fsyncs = wal.stats().fsync_micros.snapshot();
        assert_eq!(fsyncs.count > 0, fsyncs_expected, "{fsync:?}: {fsyncs:?}");
    }
}
