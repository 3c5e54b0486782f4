//! A long transaction holds the xmin horizon back (another session in `BEGIN ISOLATION LEVEL
//! REPEATABLE READ; SELECT …;`, left open, as a forgotten report does) while the node sends,
//! receives and deletes: the hot path leaves nothing for vacuum, so the frame table gets only
//! inserts, no updates, no deletes and no dead tuples, however long the horizon is held. (Its
//! throughput under a held horizon is measured by `scripts/bench-pgmq.py --held-xmin`.)

mod common;

use std::time::{Duration, Instant};

use leaseq_postgres::{drop_schema, open_service, PgConfig};
use serde_json::json;

use common::{call, connection, service_config, side_client, QUEUE_URL};

const ROUNDS: usize = 100;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_hot_path_leaves_no_dead_tuples_while_the_xmin_horizon_is_held() {
    let name = format!("leaseq_held_xmin_{}", std::process::id());
    let config = PgConfig {
        schema: name.clone(),
        ..PgConfig::new(connection(&name))
    };
    drop_schema(&config.connection, &name).unwrap();
    let service =
        tokio::task::block_in_place(|| open_service(&config, service_config(), 64 << 20)).unwrap();
    call(&service, "CreateQueue", json!({"QueueName": "jobs"}))
        .await
        .unwrap();

    // The horizon holder: a snapshot taken before the load, kept until the end.
    let mut holder = side_client("leaseq_held_xmin_holder").await;
    let held = holder
        .build_transaction()
        .isolation_level(tokio_postgres::IsolationLevel::RepeatableRead)
        .start()
        .await
        .unwrap();
    held.query_one("SELECT count(*) FROM pg_class", &[])
        .await
        .unwrap();
    let backend_xmin_held: bool = held
        .query_one(
            "SELECT backend_xmin IS NOT NULL FROM pg_stat_activity WHERE pid = pg_backend_pid()",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert!(backend_xmin_held, "the holder's snapshot holds the horizon");

    let started = Instant::now();
    for round in 0..ROUNDS {
        let entries: Vec<_> = (0..10)
            .map(|i| json!({"Id": i.to_string(), "MessageBody": format!("r{round}-{i}")}))
            .collect();
        let batch = json!({"QueueUrl": QUEUE_URL, "Entries": entries});
        call(&service, "SendMessageBatch", batch).await.unwrap();
        let receive = json!({"QueueUrl": QUEUE_URL, "MaxNumberOfMessages": 10});
        let answer = call(&service, "ReceiveMessage", receive).await.unwrap();
        let handles: Vec<_> = answer["Messages"]
            .as_array()
            .unwrap()
            .iter()
            .enumerate()
            .map(|(i, m)| json!({"Id": i.to_string(), "ReceiptHandle": m["ReceiptHandle"]}))
            .collect();
        let delete = json!({"QueueUrl": QUEUE_URL, "Entries": handles});
        let answer = call(&service, "DeleteMessageBatch", delete).await.unwrap();
        assert_eq!(answer["Successful"].as_array().unwrap().len(), 10);
    }
    println!(
        "{ROUNDS} rounds of send 10, receive 10, delete 10 in {:?} with the horizon held",
        started.elapsed()
    );

    // The node's statistics reach the cumulative views within a second of going idle (the
    // frame table's are its partitions').
    let observer = side_client("leaseq_held_xmin_observer").await;
    let deadline = Instant::now() + Duration::from_secs(10);
    let (inserts, updates, deletes, dead) = loop {
        observer
            .execute("SELECT pg_stat_clear_snapshot()", &[])
            .await
            .unwrap();
        let row = observer
            .query_one(
                "SELECT coalesce(sum(n_tup_ins), 0)::bigint, coalesce(sum(n_tup_upd), 0)::bigint, \
                 coalesce(sum(n_tup_del), 0)::bigint, coalesce(sum(n_dead_tup), 0)::bigint \
                 FROM pg_stat_user_tables WHERE schemaname = $1 AND relname LIKE 'frame_b%'",
                &[&name],
            )
            .await
            .unwrap();
        let counts: (i64, i64, i64, i64) = (row.get(0), row.get(1), row.get(2), row.get(3));
        // One frame per flush at least every round's three requests: the stats have arrived.
        if counts.0 >= ROUNDS as i64 || Instant::now() > deadline {
            break counts;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    println!("frame table: {inserts} inserts, {updates} updates, {deletes} deletes, {dead} dead");
    assert!(inserts >= ROUNDS as i64, "the statistics never arrived");
    assert_eq!(
        (updates, deletes, dead),
        (0, 0, 0),
        "the hot path updates or deletes rows"
    );
    held.rollback().await.unwrap();
    drop(service);
    drop_schema(&config.connection, &name).unwrap();
}
