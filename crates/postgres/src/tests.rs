//! Unit tests on the machine's PostgreSQL (`LEASEQ_TEST_POSTGRES`, default
//! `host=127.0.0.1 user=postgres dbname=test`), each in a schema of its own, dropped afterwards:
//! the fence, the release a claim finds, the refusal of a newer schema, and poisoning by a connection cut mid-flush.

use std::time::{Duration, Instant};

use leaseq_core::{Engine, EngineConfig, ReceiptKey, Record};
use leaseq_server::checkpoint::Checkpoints;
use leaseq_server::log_store::{LogStore, Recoverable};
use tokio_postgres::Client;

use crate::schema::{self, Schema, KNOWN_MIGRATIONS};
use crate::{drop_schema, PgConfig, PgLog, PgLogOpening, PostgresError, SINGLE_NODE_BUCKET};

fn connection() -> String {
    std::env::var("LEASEQ_TEST_POSTGRES")
        .unwrap_or_else(|_| "host=127.0.0.1 user=postgres dbname=test".into())
}

/// A schema for one test, dropped when the test ends (passed or failed).
struct TestSchema(PgConfig);

impl TestSchema {
    fn new(test: &str) -> TestSchema {
        let mut config = PgConfig::new(connection());
        config.schema = format!("leaseq_unit_{test}_{}", std::process::id());
        // Several flushes in flight, as `--postgres-flushes 4` runs them (the gap tests need
        // two at once; the others hold with any number).
        config.flushes_in_flight = 4;
        drop_schema(&config.connection, &config.schema).expect("PostgreSQL is reachable");
        TestSchema(config)
    }
}

impl Drop for TestSchema {
    fn drop(&mut self) {
        let _ = drop_schema(&self.0.connection, &self.0.schema);
    }
}

/// Opens the log and replays it, returning the store and the number of records replayed.
fn open(config: &PgConfig) -> (PgLog, u64) {
    let opening = PgLogOpening::open(config).expect("the log opens");
    let mut replayed = 0;
    let log = opening
        .replay(0, &mut |_| {
            replayed += 1;
            Ok(())
        })
        .expect("the log replays");
    (log, replayed)
}

/// A record the log carries without looking inside.
fn record(queue_id: u64) -> Vec<Record> {
    vec![Record::DeleteQueue {
        now_ms: 1,
        queue_id,
    }]
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// A client for the test's own statements, its connection driven by `runtime`.
fn side_client(runtime: &tokio::runtime::Runtime) -> Client {
    runtime.block_on(async { schema::connect(&connection()).await.unwrap() })
}

fn append_and_wait(
    runtime: &tokio::runtime::Runtime,
    log: &PgLog,
    queue_id: u64,
) -> Result<(), String> {
    let appended = log
        .append(&record(queue_id), &mut |_, _| {})
        .map_err(|error| error.to_string())?;
    runtime
        .block_on(log.wait_durable(appended.tail_lsn))
        .map_err(|error| {
            assert!(error.is_poisoned(), "a failed flush poisons: {error}");
            error.to_string()
        })
}

#[test]
fn a_database_error_names_its_cause() {
    let mut config = PgConfig::new(format!("{} dbname=leaseq_no_such_database", connection()));
    config.schema = "leaseq_unit_no_database".into();
    let error = PgLogOpening::open(&config)
        .err()
        .expect("no such database")
        .to_string();
    assert!(
        error.contains("\"leaseq_no_such_database\" does not exist") && error.contains("3D000"),
        "PostgreSQL's own message and code, not just \"db error\": {error}"
    );
}

#[test]
fn a_flush_under_an_old_epoch_writes_nothing_and_poisons() {
    let schema = TestSchema::new("fence");
    let runtime = runtime();
    let (old, _) = open(&schema.0);
    append_and_wait(&runtime, &old, 1).expect("the owner's flush commits");
    // Another node takes the bucket over while the old owner still runs.
    let opening = PgLogOpening::open(&schema.0).unwrap();
    assert_eq!(opening.epoch(), old.epoch() + 1);
    let error = append_and_wait(&runtime, &old, 2).expect_err("the old owner is fenced out");
    assert!(error.contains("fenced out"), "{error}");
    let again = old
        .append(&record(3), &mut |_, _| {})
        .expect_err("a poisoned log takes nothing");
    assert!(again.is_poisoned());
    let mut replayed = Vec::new();
    let new = opening
        .replay(0, &mut |record| {
            replayed.push(record.bytes.to_vec());
            Ok(())
        })
        .unwrap();
    assert_eq!(
        replayed.len(),
        1,
        "only the record flushed before the takeover is in the log"
    );
    let client = side_client(&runtime);
    let rows: i64 = runtime.block_on(async {
        let sql = Schema::new(&schema.0.schema)
            .unwrap()
            .sql("SELECT count(*) FROM {schema}.frame WHERE epoch = $1");
        client
            .query_one(&sql, &[&old.epoch()])
            .await
            .unwrap()
            .get(0)
    });
    assert_eq!(
        rows, 1,
        "the old epoch wrote exactly the frame it wrote before the takeover"
    );
    append_and_wait(&runtime, &new, 4).expect("the new owner writes");
}

#[test]
fn a_claim_counts_only_the_release_of_the_epoch_it_replaces() {
    use crate::cluster::ownership::release;
    let schema = TestSchema::new("release");
    let runtime = runtime();
    let client = side_client(&runtime);
    let name = Schema::new(&schema.0.schema).unwrap();
    let claim = || {
        let opening = PgLogOpening::open(&schema.0).unwrap();
        (opening.epoch(), opening.previous_released())
    };
    let release = |epoch| {
        runtime
            .block_on(release(&client, &name, SINGLE_NODE_BUCKET, epoch))
            .unwrap()
    };
    assert_eq!(claim(), (1, false), "a new bucket has no release to find");
    assert!(!release(0), "a release is fenced by its epoch");
    assert!(release(1));
    assert_eq!(claim(), (2, true), "the claim finds the release of epoch 1");
    assert_eq!(
        claim(),
        (3, false),
        "epoch 2 was not released: epoch 1's release does not count for it"
    );
    assert!(!release(2), "a release after the next claim writes nothing");
    assert_eq!(claim(), (4, false));
}

/// A test's schema migrated by hand, version by version, with a client of the test's own.
struct Migrating {
    schema: TestSchema,
    runtime: tokio::runtime::Runtime,
    client: Client,
    name: Schema,
}

impl Migrating {
    fn new(test: &str) -> Migrating {
        let schema = TestSchema::new(test);
        let runtime = runtime();
        let client = side_client(&runtime);
        let name = Schema::new(&schema.0.schema).unwrap();
        Migrating {
            schema,
            runtime,
            client,
            name,
        }
    }

    /// Applies what `migrations` has beyond the schema's version; the version found.
    fn migrate(&mut self, migrations: &[&str]) -> i32 {
        self.runtime
            .block_on(schema::migrate_with(
                &mut self.client,
                &self.name,
                migrations,
            ))
            .unwrap()
    }

    /// Runs `sql` (`{schema}` for the schema).
    fn execute(&self, sql: &str) {
        let sql = self.name.sql(sql);
        self.runtime
            .block_on(self.client.batch_execute(&sql))
            .unwrap();
    }
}

#[test]
fn a_schema_newer_than_this_build_is_refused() {
    let mut migrating = Migrating::new("version");
    let mut newer = KNOWN_MIGRATIONS.to_vec();
    newer.push("CREATE TABLE {schema}.from_the_future (id int)");
    assert_eq!(migrating.migrate(&newer), 0);
    match PgLogOpening::open(&migrating.schema.0) {
        Err(PostgresError::SchemaTooNew { found, known }) => {
            assert_eq!(
                (found, known),
                (newer.len() as i32, KNOWN_MIGRATIONS.len() as i32)
            );
        }
        Err(other) => panic!("expected a refusal, got {other}"),
        Ok(_) => panic!("a node opened a schema newer than it knows"),
    }
}

/// The partitions of `frame`, and the segments that have frames.
fn partitions_and_segments(
    runtime: &tokio::runtime::Runtime,
    client: &Client,
    name: &Schema,
) -> (i64, i64) {
    runtime.block_on(async {
        let partitions = name
            .sql("SELECT count(*) FROM pg_inherits WHERE inhparent = '{schema}.frame'::regclass");
        let segments = name.sql("SELECT count(DISTINCT (bucket, segment)) FROM {schema}.frame");
        (
            client.query_one(&partitions, &[]).await.unwrap().get(0),
            client.query_one(&segments, &[]).await.unwrap().get(0),
        )
    })
}

#[test]
fn migration_2_moves_the_frames_of_version_1_into_partitions() {
    let mut migrating = Migrating::new("migrate");
    migrating.migrate(&KNOWN_MIGRATIONS[..1]);
    migrating.execute(
        "INSERT INTO {schema}.frame VALUES (0, 1, 0, 1, 1, 1, '\\x01'), (0, 1, 5, 2, 2, 1, '\\x02'),
                                          (0, 3, 0, 3, 3, 1, '\\x03')",
    );
    assert_eq!(migrating.migrate(KNOWN_MIGRATIONS), 1);
    let Migrating {
        runtime,
        client,
        name,
        ..
    } = &migrating;
    let (partitions, segments) = partitions_and_segments(runtime, client, name);
    assert_eq!((partitions, segments), (2, 2));
    let rows: Vec<(i64, i64)> = runtime.block_on(async {
        let sql = name.sql("SELECT segment, last_lsn FROM {schema}.frame ORDER BY 1, 2");
        let rows = client.query(&sql, &[]).await.unwrap();
        rows.iter().map(|row| (row.get(0), row.get(1))).collect()
    });
    assert_eq!(rows, [(1, 1), (1, 2), (3, 3)], "every frame kept");
}

#[test]
fn a_connection_cut_mid_flush_is_refused_then_resolved_and_the_log_goes_on() {
    let schema = TestSchema::new("cut");
    let runtime = runtime();
    let (log, _) = open(&schema.0);
    append_and_wait(&runtime, &log, 1).expect("a flush commits");
    // Hold the bucket row so the next flush waits on its lock: a flush in flight.
    let mut blocker = side_client(&runtime);
    let name = Schema::new(&schema.0.schema).unwrap();
    let transaction = runtime.block_on(async {
        let transaction = blocker.transaction().await.unwrap();
        let lock = name.sql("SELECT 1 FROM {schema}.bucket FOR UPDATE");
        transaction.execute(&lock, &[]).await.unwrap();
        transaction
    });
    let appended = log.append(&record(2), &mut |_, _| {}).unwrap();
    let killer = side_client(&runtime);
    let pid = wait_until_waiting_on_a_lock(&runtime, &killer, &log);
    runtime.block_on(async {
        killer
            .execute("SELECT pg_terminate_backend($1)", &[&pid])
            .await
            .unwrap();
    });
    let error = runtime
        .block_on(log.wait_durable(appended.tail_lsn))
        .expect_err("a flush of unknown outcome is never acknowledged");
    assert!(
        !error.is_poisoned(),
        "an unknown outcome is resolved, not fatal: {error}"
    );
    // While the outcome is unknown (the resolution waits on the same lock), new work is
    // turned away before it reaches the engine.
    let refused = log.writable().expect_err("unavailable while unresolved");
    assert!(
        refused.message.contains("reconnects by itself"),
        "{refused}"
    );
    runtime.block_on(transaction.rollback()).unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while log.writable().is_err() {
        assert!(Instant::now() < deadline, "the flush was never resolved");
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(
        !log.flush_backend_pids().contains(&pid),
        "the flusher has a new session"
    );
    append_and_wait(&runtime, &log, 3).expect("the log goes on after the resolution");
    drop(log);
    let (_reopened, replayed) = open(&schema.0);
    assert_eq!(
        replayed, 3,
        "every appended record, once: the cut one was written by the resolution"
    );
}

/// Waits (bounded) until one of the flusher's sessions waits on a lock; its pid.
fn wait_until_waiting_on_a_lock(
    runtime: &tokio::runtime::Runtime,
    client: &Client,
    log: &PgLog,
) -> i32 {
    let started = Instant::now();
    loop {
        let waiting: Option<i32> = runtime.block_on(async {
            client
                .query_opt(
                    "SELECT pid FROM pg_stat_activity WHERE pid = ANY($1) AND wait_event_type = 'Lock'",
                    &[&log.flush_backend_pids()],
                )
                .await
                .unwrap()
                .map(|row| row.get(0))
        });
        if let Some(pid) = waiting {
            return pid;
        }
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "the flush never reached the lock"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Holds the key of the next frame `log` will flush in a transaction of `client`'s (an
/// uncommitted row under the same primary key), so that flush waits on it while later ones go
/// on; the transaction is returned for the test to end.
fn hold_next_frame<'c>(
    runtime: &tokio::runtime::Runtime,
    client: &'c mut Client,
    log: &PgLog,
) -> tokio_postgres::Transaction<'c> {
    let (segment, offset) = {
        let tail = log.shared.tail.lock();
        (i64::from(tail.segment), tail.next_offset as i64)
    };
    let schema = log.shared.schema.clone();
    runtime.block_on(async {
        let transaction = client.transaction().await.unwrap();
        let sql = schema.sql(
            "INSERT INTO {schema}.frame (bucket, segment, start_offset, first_lsn, last_lsn, epoch, body)
             VALUES (0, $1, $2, 0, 0, 0, '')",
        );
        transaction.execute(&sql, &[&segment, &offset]).await.unwrap();
        transaction
    })
}

/// The first flush after record 1 held on its key (see [`hold_next_frame`]) and the next one
/// committed behind it, on another session: a gap in flight.
struct HeldGap<'c> {
    held: tokio_postgres::Transaction<'c>,
    /// The session of the held flush.
    stuck: i32,
    first: leaseq_server::log_store::Appended,
    second: leaseq_server::log_store::Appended,
}

fn commit_behind_a_held_flush<'c>(
    runtime: &tokio::runtime::Runtime,
    log: &PgLog,
    blocker: &'c mut Client,
    watcher: &Client,
) -> HeldGap<'c> {
    append_and_wait(runtime, log, 1).expect("a flush commits");
    let held = hold_next_frame(runtime, blocker, log);
    let first = log.append(&record(2), &mut |_, _| {}).unwrap();
    let stuck = wait_until_waiting_on_a_lock(runtime, watcher, log);
    let second = log.append(&record(3), &mut |_, _| {}).unwrap();
    let sql = log
        .shared
        .schema
        .sql("SELECT count(*) FROM {schema}.frame WHERE last_lsn = $1");
    let lsn = second.tail_lsn as i64;
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let committed: i64 =
            runtime.block_on(async { watcher.query_one(&sql, &[&lsn]).await.unwrap().get(0) });
        if committed == 1 {
            break;
        }
        assert!(Instant::now() < deadline, "the later flush never committed");
        std::thread::sleep(Duration::from_millis(5));
    }
    HeldGap {
        held,
        stuck,
        first,
        second,
    }
}

#[test]
fn flushes_commit_in_any_order_and_become_durable_in_order() {
    let schema = TestSchema::new("in_order");
    let runtime = runtime();
    let (log, _) = open(&schema.0);
    let (mut blocker, watcher) = (side_client(&runtime), side_client(&runtime));
    let gap = commit_behind_a_held_flush(&runtime, &log, &mut blocker, &watcher);
    std::thread::sleep(Duration::from_millis(50));
    assert_eq!(
        log.durable_lsn(),
        gap.first.tail_lsn - 1,
        "a flush that committed after a gap is not durable until the gap is"
    );
    runtime.block_on(gap.held.rollback()).unwrap();
    runtime
        .block_on(log.wait_durable(gap.second.tail_lsn))
        .expect("both flushes commit");
    assert_eq!(log.durable_lsn(), gap.second.tail_lsn);
    drop(log);
    let (_reopened, replayed) = open(&schema.0);
    assert_eq!(replayed, 3);
}

#[test]
fn a_crash_behind_a_gap_replays_up_to_it_and_removes_what_follows() {
    let schema = TestSchema::new("gap");
    let runtime = runtime();
    let (log, _) = open(&schema.0);
    let (mut blocker, killer) = (side_client(&runtime), side_client(&runtime));
    let gap = commit_behind_a_held_flush(&runtime, &log, &mut blocker, &killer);
    assert!(log.durable_lsn() < gap.second.tail_lsn);
    // The node dies with its first flush stuck: its session is ended, and the held key freed.
    drop(log);
    runtime.block_on(async {
        killer
            .execute("SELECT pg_terminate_backend($1)", &[&gap.stuck])
            .await
            .unwrap();
    });
    runtime.block_on(gap.held.rollback()).unwrap();
    let (log, replayed) = open(&schema.0);
    assert_eq!(
        replayed, 1,
        "replay ends at the gap: the flush after it was never acknowledged"
    );
    append_and_wait(&runtime, &log, 4).expect("the new owner writes after the gap");
    drop(log);
    let mut replayed = Vec::new();
    let opening = PgLogOpening::open(&schema.0).unwrap();
    let _log = opening
        .replay(0, &mut |record| {
            replayed.push(leaseq_core::codec::decode(record.bytes).unwrap());
            Ok(())
        })
        .expect("no gap is left: what followed it was removed");
    assert_eq!(replayed, [record(1), record(4)].concat());
}

#[test]
fn checkpoints_keep_two_snapshots_and_remove_whole_old_segments() {
    let schema = TestSchema::new("checkpoint");
    let mut config = schema.0.clone();
    config.sizes.segment_bytes_max = 256;
    let runtime = runtime();
    let (log, _) = open(&config);
    let engine = parking_lot::Mutex::new(Engine::new(
        EngineConfig::default(),
        ReceiptKey::new([7; 16]),
    ));
    let checkpoints = Checkpoints::new(0, 0);
    for round in 0..3u64 {
        for queue_id in 0..50 {
            append_and_wait(&runtime, &log, round * 50 + queue_id).unwrap();
        }
        checkpoints.run(&engine, &log).unwrap();
    }
    let client = side_client(&runtime);
    let name = Schema::new(&config.schema).unwrap();
    let (snapshots, oldest_lsn): (i64, i64) = runtime.block_on(async {
        let count = name.sql("SELECT count(*) FROM {schema}.snapshot");
        let oldest = name.sql("SELECT min(first_lsn) FROM {schema}.frame");
        let snapshots = client.query_one(&count, &[]).await.unwrap().get(0);
        (
            snapshots,
            client.query_one(&oldest, &[]).await.unwrap().get(0),
        )
    });
    assert_eq!(snapshots, 2, "the two newest snapshots are kept");
    // The third checkpoint removed the segments wholly before the second snapshot (LSN 100);
    // the segment holding LSN 100 may stay.
    assert!(
        oldest_lsn > 80,
        "old segments were removed: the oldest frame starts at {oldest_lsn}"
    );
    // Removed by dropping their partitions: one partition per segment that still has frames.
    let (partitions, segments) = partitions_and_segments(&runtime, &client, &name);
    assert_eq!(
        partitions, segments,
        "a removed segment's partition is gone"
    );
    drop(log);
    let mut opening = PgLogOpening::open(&config).unwrap();
    let snapshot = opening.latest_snapshot().unwrap().expect("a snapshot");
    assert_eq!(snapshot.lsn, 150);
    let mut replayed = 0;
    let log = opening
        .replay(snapshot.lsn, &mut |_| {
            replayed += 1;
            Ok(())
        })
        .unwrap();
    assert_eq!(
        (replayed, log.tail_lsn()),
        (0, 150),
        "nothing after the snapshot to replay"
    );
    append_and_wait(&runtime, &log, 1000).expect("appends continue after the snapshot");
}

#[test]
fn an_unreachable_postgres_fails_the_open_promptly() {
    let config = PgConfig::new("host=127.0.0.1 port=1 user=postgres dbname=test");
    let started = Instant::now();
    match PgLogOpening::open(&config) {
        Err(PostgresError::Connect(_)) => {}
        Err(other) => panic!("expected a connection error, got {other}"),
        Ok(_) => panic!("opened a log on a closed port"),
    }
    assert!(started.elapsed() <= crate::CONNECT_TIMEOUT + Duration::from_secs(1));
}

/// The compression of `table`'s `column` and of that column in each of its partitions.
fn compressions(
    runtime: &tokio::runtime::Runtime,
    client: &Client,
    name: &Schema,
    table: &str,
    column: &str,
) -> Vec<String> {
    let sql = name.sql(&format!(
        "SELECT a.attcompression::text FROM pg_attribute a
         WHERE a.attname = $1 AND (a.attrelid = '{{schema}}.{table}'::regclass
            OR a.attrelid IN (SELECT inhrelid FROM pg_inherits
                              WHERE inhparent = '{{schema}}.{table}'::regclass))"
    ));
    let rows = runtime.block_on(client.query(&sql, &[&column])).unwrap();
    rows.iter().map(|row| row.get(0)).collect()
}

#[test]
fn migration_5_compresses_frames_and_snapshots_with_lz4() {
    let mut migrating = Migrating::new("lz4");
    migrating.migrate(&KNOWN_MIGRATIONS[..4]);
    // A partition of version 4's, with pglz (an empty attcompression is the default).
    migrating.execute(&migrating.name.create_partition(0, 1));
    let compressions =
        |m: &Migrating, table, column| compressions(&m.runtime, &m.client, &m.name, table, column);
    assert_eq!(compressions(&migrating, "frame", "body"), ["", ""]);
    migrating.migrate(KNOWN_MIGRATIONS);
    // The partition of before and one a node creates now both compress with lz4 (the machine's
    // PostgreSQL is built with it, as Debian's is).
    let (log, _) = open(&migrating.schema.0);
    append_and_wait(&migrating.runtime, &log, 1).unwrap();
    migrating.execute(&migrating.name.create_partition(0, 9));
    assert_eq!(compressions(&migrating, "frame", "body"), ["l", "l", "l"]);
    assert_eq!(compressions(&migrating, "snapshot_chunk", "bytes"), ["l"]);
}

/// The bucket count the log records, if any.
fn recorded_buckets(migrating: &Migrating) -> Option<i32> {
    let sql = migrating
        .name
        .sql("SELECT buckets FROM {schema}.settings WHERE id = 1");
    let row = migrating
        .runtime
        .block_on(migrating.client.query_opt(&sql, &[]))
        .unwrap();
    row.map(|row| row.get(0))
}

#[test]
fn migration_6_records_one_bucket_for_a_log_that_exists() {
    // A log of version 5 that a node took over (a bucket row, no frame yet).
    let mut claimed = Migrating::new("buckets_claimed");
    claimed.migrate(&KNOWN_MIGRATIONS[..5]);
    claimed.execute("INSERT INTO {schema}.bucket (bucket, epoch) VALUES (0, 3)");
    assert_eq!(claimed.migrate(KNOWN_MIGRATIONS), 5);
    assert_eq!(recorded_buckets(&claimed), Some(1));
    // One with frames only (as a bucket row would be there too, this checks the frames alone).
    let mut framed = Migrating::new("buckets_framed");
    framed.migrate(&KNOWN_MIGRATIONS[..5]);
    framed.execute(&framed.name.create_partition(0, 1));
    framed.execute("INSERT INTO {schema}.frame VALUES (0, 1, 0, 1, 1, 1, '\\x01')");
    framed.migrate(KNOWN_MIGRATIONS);
    assert_eq!(recorded_buckets(&framed), Some(1));
    // Such a log opens with one bucket and refuses another count.
    let mut config = framed.schema.0.clone();
    config.buckets = 2;
    match PgLogOpening::open_buckets(&config) {
        Err(PostgresError::BucketCount {
            recorded: 1,
            configured: 2,
            ..
        }) => {}
        Err(other) => panic!("expected the bucket count refused, got {other}"),
        Ok(_) => panic!("a log of one bucket opened with two"),
    }
    // An empty log of version 5 (migrated, never taken over) records nothing yet: its first
    // node's count is the log's.
    let mut empty = Migrating::new("buckets_empty");
    empty.migrate(&KNOWN_MIGRATIONS[..5]);
    empty.migrate(KNOWN_MIGRATIONS);
    assert_eq!(recorded_buckets(&empty), None);
    let mut config = empty.schema.0.clone();
    config.buckets = 3;
    let openings = PgLogOpening::open_buckets(&config).unwrap();
    assert_eq!(openings.len(), 3);
    assert_eq!(recorded_buckets(&empty), Some(3));
}

#[test]
fn a_node_with_another_bucket_count_than_its_log_is_refused() {
    let schema = TestSchema::new("bucket_count");
    let mut config = schema.0.clone();
    config.buckets = 3;
    drop(PgLogOpening::open_buckets(&config).unwrap());
    for configured in [1, 2, 4] {
        config.buckets = configured;
        let error = match PgLogOpening::open_buckets(&config) {
            Err(error) => error,
            Ok(_) => panic!("a log of 3 buckets opened with {configured}"),
        };
        assert!(
            matches!(error, PostgresError::BucketCount { recorded: 3, configured: c, .. } if c == configured),
            "{error}"
        );
        let text = error.to_string();
        assert!(
            text.contains("has 3 bucket(s)")
                && text.contains(&format!("started with {configured}"))
                && text.contains("--postgres-buckets 3"),
            "the refusal names both counts and the flag: {text}"
        );
    }
    // The refusal claimed nothing: every bucket is still at the epoch of the first opening.
    config.buckets = 3;
    let epochs: Vec<i64> = PgLogOpening::open_buckets(&config)
        .unwrap()
        .iter()
        .map(PgLogOpening::epoch)
        .collect();
    assert_eq!(epochs, [2, 2, 2]);
    // One bucket's opening refuses a log of several, and a cluster node does too.
    config.buckets = 1;
    assert!(matches!(
        PgLogOpening::open(&config),
        Err(PostgresError::BucketCount { recorded: 3, .. })
    ));
    config.buckets = 3;
    let service = leaseq_server::ServiceConfig {
        engine: EngineConfig::default(),
        region: "us-east-1".into(),
        account_id: "000000000000".into(),
    };
    // A cluster node takes one bucket over: only its epoch rises, and its service serves it
    // alone of the three.
    let (opened, (epoch, _)) =
        crate::open_service_with_epoch(&config, service.clone(), 1 << 20, 1).unwrap();
    assert_eq!(epoch, 3);
    let hosts = opened.hosts();
    assert_eq!((hosts.len(), hosts.bucket_count()), (1, 3));
    assert!(hosts.get(1).is_some() && hosts.get(0).is_none());
    drop(opened);
    assert!(matches!(
        crate::open_service_with_epoch(&config, service, 1 << 20, 3),
        Err(PostgresError::Config(_))
    ));
}

#[test]
fn each_bucket_has_its_own_epoch_frames_and_replay() {
    let schema = TestSchema::new("buckets");
    let mut config = schema.0.clone();
    config.buckets = 3;
    let runtime = runtime();
    let replay_all = |config: &PgConfig| -> Vec<(PgLog, u64)> {
        PgLogOpening::open_buckets(config)
            .unwrap()
            .into_iter()
            .enumerate()
            .map(|(bucket, opening)| {
                assert_eq!(opening.bucket() as usize, bucket);
                let mut replayed = 0;
                let log = opening
                    .replay(0, &mut |_| {
                        replayed += 1;
                        Ok(())
                    })
                    .unwrap();
                (log, replayed)
            })
            .collect()
    };
    let logs = replay_all(&config);
    assert_eq!(
        logs.iter().map(|(log, _)| log.epoch()).collect::<Vec<_>>(),
        [1, 1, 1]
    );
    // Two records in bucket 1, one in bucket 2, none in bucket 0.
    append_and_wait(&runtime, &logs[1].0, 1).unwrap();
    append_and_wait(&runtime, &logs[1].0, 2).unwrap();
    append_and_wait(&runtime, &logs[2].0, 3).unwrap();
    drop(logs);
    let logs = replay_all(&config);
    let seen: Vec<(i64, u64)> = logs.iter().map(|(l, n)| (l.epoch(), *n)).collect();
    assert_eq!(
        seen,
        [(2, 0), (2, 2), (2, 1)],
        "(epoch, records replayed) per bucket"
    );
    // Frames carry their bucket; bucket 0 wrote none.
    let client = side_client(&runtime);
    let name = Schema::new(&config.schema).unwrap();
    let buckets: Vec<i32> = runtime.block_on(async {
        let sql = name.sql("SELECT bucket FROM {schema}.frame ORDER BY bucket");
        let rows = client.query(&sql, &[]).await.unwrap();
        rows.iter().map(|row| row.get(0)).collect()
    });
    assert_eq!(buckets, [1, 1, 2]);
}

#[test]
fn a_segment_removal_under_an_old_epoch_removes_nothing_and_poisons() {
    let schema = TestSchema::new("removal_fence");
    let mut config = schema.0.clone();
    config.sizes.segment_bytes_max = 64;
    let runtime = runtime();
    let (old, _) = open(&config);
    for queue_id in 0..20 {
        append_and_wait(&runtime, &old, queue_id).unwrap();
    }
    let client = side_client(&runtime);
    let name = Schema::new(&config.schema).unwrap();
    let before = partitions_and_segments(&runtime, &client, &name);
    assert!(before.0 > 2, "several segments: {before:?}");
    // Another node takes the bucket over; the old one's removal must be fenced out.
    let _new = PgLogOpening::open(&config).unwrap();
    let error = old
        .remove_segments(old.tail_lsn(), &|_| false)
        .expect_err("the old owner's removal is fenced out");
    assert!(
        error.is_poisoned() && error.to_string().contains("fenced out"),
        "{error}"
    );
    assert_eq!(partitions_and_segments(&runtime, &client, &name), before);
    assert!(old.poisoned().is_some());
}
