//! `Wal::read_cached_many`: the bodies one receive delivers, read together.

use std::sync::atomic::Ordering::Relaxed;

use leaseq_wal::fault::FaultStorage;
use leaseq_wal::{FsyncPolicy, Options, Position, Wal, WalError};
use proptest::prelude::*;

use crate::common::{append_all, open, payload, small_segments};

/// `wal.read_cached_many`'s answers, in the order asked.
fn read_many(wal: &Wal, positions: &[Position]) -> Vec<Result<Option<Vec<u8>>, WalError>> {
    let mut answers: Vec<Option<Result<Option<Vec<u8>>, WalError>>> =
        positions.iter().map(|_| None).collect();
    wal.read_cached_many(positions, &mut |index, record| {
        assert!(answers[index].is_none(), "position {index} answered twice");
        answers[index] = Some(record.map(|payload| payload.map(<[u8]>::to_vec)));
    });
    answers
        .into_iter()
        .map(|answer| answer.expect("every position answered"))
        .collect()
}

/// Records that lie together in a segment's file are read with one system call, whatever the
/// order they are asked in, and answered in that order; with nothing in the page cache, every
/// answer is "not in memory" and counted as such.
#[test]
fn neighbouring_records_are_read_with_one_system_call() {
    let storage = FaultStorage::new();
    let (wal, _, _) = open(&storage, Options::default()).unwrap();
    let appended = append_all(&wal, 0, 10);
    let asked: Vec<Position> = appended
        .iter()
        .rev()
        .map(|(_, position, _)| *position)
        .collect();

    let reads = storage.read_count();
    let answers = read_many(&wal, &asked);
    assert_eq!(
        storage.read_count() - reads,
        1,
        "one read for ten neighbours"
    );
    for (answer, (_, _, payload)) in answers.into_iter().zip(appended.iter().rev()) {
        assert_eq!(answer.unwrap().as_ref(), Some(payload));
    }

    storage.set_reads_uncached(true);
    let uncached = wal.stats().uncached_reads.load(Relaxed);
    let answers = read_many(&wal, &asked);
    assert!(answers.iter().all(|answer| matches!(answer, Ok(None))));
    assert_eq!(wal.stats().uncached_reads.load(Relaxed) - uncached, 10);
    wal.close().unwrap();
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// `read_cached_many` answers every position as `read` does: records written to the files
    /// (in one segment or across many), records still in the append buffers, the same record
    /// asked twice, and a position that names no record.
    #[test]
    fn read_cached_many_answers_as_read_does(
        written in 1u64..40,
        buffered in 0u64..10,
        small in any::<bool>(),
        picks in proptest::collection::vec((any::<prop::sample::Index>(), any::<bool>()), 1..25),
    ) {
        let storage = FaultStorage::new();
        let options = if small {
            small_segments(FsyncPolicy::Never)
        } else {
            Options { fsync: FsyncPolicy::Never, ..Options::default() }
        };
        let (wal, _, _) = open(&storage, options).unwrap();
        let mut records: Vec<(Position, Vec<u8>)> = append_all(&wal, 0, written)
            .into_iter()
            .map(|(_, position, payload)| (position, payload))
            .collect();
        for i in written..written + buffered {
            let payload = payload(i);
            records.push((wal.append(&payload).unwrap().position, payload));
        }
        let invalid = Position { segment: 999, offset: 64, len_bytes: 3 };
        let asked: Vec<Option<usize>> = picks
            .iter()
            .map(|(index, valid)| valid.then(|| index.index(records.len())))
            .collect();
        let positions: Vec<Position> = asked
            .iter()
            .map(|pick| pick.map_or(invalid, |index| records[index].0))
            .collect();
        let answers = read_many(&wal, &positions);
        prop_assert_eq!(answers.len(), positions.len());
        for (answer, pick) in answers.into_iter().zip(&asked) {
            match pick {
                Some(index) => prop_assert_eq!(answer.unwrap(), Some(records[*index].1.clone())),
                None => prop_assert!(
                    matches!(answer, Err(WalError::InvalidPosition { .. })),
                    "{:?}",
                    answer
                ),
            }
        }
        wal.close().unwrap();
    }
}
