//! Model-based test: random appends, waits, syncs, segment removals, clean restarts and crashes
//! (with torn writes), checked against a model of what must survive.
//!
//! The model is the list of appended payloads by LSN plus a "must survive" watermark: the
//! highest LSN acknowledged durable (a wait under `Always`, a `sync()` under any policy, a clean
//! close). After a crash, the recovered log must be a prefix of what was appended that reaches
//! at least the watermark, must start at the first LSN not removed, and the model then forgets
//! whatever did not survive, since the log continues from there.

use leaseq_wal::fault::{CrashMode, FaultStorage};
use leaseq_wal::{FsyncPolicy, Lsn, Options, Position, Wal, WalError};
use proptest::prelude::*;

use crate::common::{open, Replayed};

#[derive(Debug, Clone)]
enum Op {
    Append { len_bytes: usize, count: u8 },
    WaitLast,
    Sync,
    Read { pick: usize },
    RemoveBefore { pick: usize },
    Close,
    Crash { torn_bytes: Option<u64> },
    FailNextSync,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (0usize..300, 1u8..6).prop_map(|(len_bytes, count)| Op::Append { len_bytes, count }),
        3 => Just(Op::WaitLast),
        1 => Just(Op::Sync),
        2 => any::<usize>().prop_map(|pick| Op::Read { pick }),
        1 => any::<usize>().prop_map(|pick| Op::RemoveBefore { pick }),
        1 => Just(Op::Close),
        2 => proptest::option::of(0u64..600).prop_map(|torn_bytes| Op::Crash { torn_bytes }),
        1 => Just(Op::FailNextSync),
    ]
}

struct Model {
    /// Payload and position of every live record, indexed by `lsn - first_lsn`.
    records: Vec<(Vec<u8>, Position)>,
    first_lsn: Lsn,
    must_survive_lsn: Lsn,
}

impl Model {
    fn next_lsn(&self) -> Lsn {
        self.first_lsn + self.records.len() as Lsn
    }

    /// Checks a recovery and forgets what did not survive.
    fn recovered(&mut self, replayed: &[Replayed]) {
        if let Some(first) = replayed.first() {
            assert_eq!(
                first.lsn, self.first_lsn,
                "recovery starts at the first live LSN"
            );
        }
        let end_lsn = self.first_lsn + replayed.len() as Lsn;
        assert!(
            end_lsn > self.must_survive_lsn,
            "lost an acknowledged record"
        );
        assert!(replayed.len() <= self.records.len(), "invented records");
        for (record, (payload, position)) in replayed.iter().zip(&self.records) {
            assert_eq!((&record.payload, record.position), (payload, *position));
        }
        self.records.truncate(replayed.len());
        self.must_survive_lsn = end_lsn - 1;
    }
}

/// Unwraps a result that may fail only because the log is poisoned (after `FailNextSync`).
fn ok_unless_poisoned<T>(result: Result<T, WalError>) -> Option<T> {
    match result {
        Ok(value) => Some(value),
        Err(error) => {
            assert!(error.is_poisoned(), "{error}");
            None
        }
    }
}

fn payload(lsn: Lsn, len_bytes: usize) -> Vec<u8> {
    (0..len_bytes)
        .map(|i| (lsn as usize * 31 + i) as u8)
        .collect()
}

fn run(fsync: FsyncPolicy, ops: Vec<Op>) {
    let options = Options {
        fsync,
        segment_size_max_bytes: 700,
        ..Options::default()
    };
    let mut storage = FaultStorage::new();
    let mut model = Model {
        records: Vec::new(),
        first_lsn: 1,
        must_survive_lsn: 0,
    };
    let (mut wal, _, _) = open(&storage, options.clone()).unwrap();
    for op in ops {
        match op {
            Op::Append { len_bytes, count } => {
                for _ in 0..count {
                    let body = payload(model.next_lsn(), len_bytes);
                    let Some(record) = ok_unless_poisoned(wal.append(&body)) else {
                        break;
                    };
                    assert_eq!(record.lsn, model.next_lsn());
                    model.records.push((body, record.position));
                }
            }
            Op::WaitLast => {
                if let Some(lsn) = model.next_lsn().checked_sub(1).filter(|&lsn| lsn > 0) {
                    let acknowledged = ok_unless_poisoned(wal.wait_durable_blocking(lsn));
                    if acknowledged.is_some() && fsync == FsyncPolicy::Always {
                        model.must_survive_lsn = model.must_survive_lsn.max(lsn);
                    }
                }
            }
            Op::Sync => {
                if ok_unless_poisoned(wal.sync()).is_some() {
                    model.must_survive_lsn = model.next_lsn() - 1;
                }
            }
            Op::FailNextSync => storage.fail_next_sync(),
            Op::Read { pick } => read_one(&wal, &model, pick),
            Op::RemoveBefore { pick } => remove_before(&wal, &mut model, pick),
            Op::Close => {
                if ok_unless_poisoned(wal.close()).is_some() {
                    model.must_survive_lsn = model.next_lsn() - 1;
                }
                storage.clear_faults();
                let (reopened, _, replayed) = open(&storage, options.clone()).unwrap();
                model.recovered(&replayed);
                wal = reopened;
            }
            Op::Crash { torn_bytes } => {
                let mode = torn_bytes.map_or(CrashMode::DropUnsynced, |bytes| {
                    CrashMode::KeepTornPrefix { bytes }
                });
                storage = storage.crash(mode);
                drop(wal);
                let (reopened, _, replayed) = open(&storage, options.clone()).unwrap();
                model.recovered(&replayed);
                wal = reopened;
            }
        }
    }
}

fn read_one(wal: &Wal, model: &Model, pick: usize) {
    if model.records.is_empty() {
        return;
    }
    let (payload, position) = &model.records[pick % model.records.len()];
    if let Some(read) = ok_unless_poisoned(wal.read(*position)) {
        assert_eq!(&read, payload);
    }
}

fn remove_before(wal: &Wal, model: &mut Model, pick: usize) {
    let lsn = model.first_lsn + (pick % (model.records.len() + 1)) as Lsn;
    wal.remove_segments_before(lsn).unwrap();
    let segments = wal.segments();
    let first_lsn = segments.first().map_or(model.first_lsn, |s| s.first_lsn);
    assert!(first_lsn <= lsn.max(model.first_lsn));
    let dropped = (first_lsn - model.first_lsn) as usize;
    model.records.drain(..dropped);
    model.first_lsn = first_lsn;
    assert!(segments.last().is_none_or(|s| s.active));
}

/// 96 cases by default; `PROPTEST_CASES=10000 cargo test -p leaseq-wal model` for a long run.
fn cases() -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|cases| cases.parse().ok())
        .unwrap_or(96)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(), ..ProptestConfig::default() })]

    #[test]
    fn always_policy_never_loses_acknowledged_records(ops in prop::collection::vec(op(), 1..40)) {
        run(FsyncPolicy::Always, ops);
    }

    #[test]
    fn never_policy_keeps_everything_synced(ops in prop::collection::vec(op(), 1..40)) {
        run(FsyncPolicy::Never, ops);
    }

    #[test]
    fn interval_policy_keeps_everything_synced(ops in prop::collection::vec(op(), 1..40)) {
        run(FsyncPolicy::Interval(std::time::Duration::from_millis(1)), ops);
    }
}
