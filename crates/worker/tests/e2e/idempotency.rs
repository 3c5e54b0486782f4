//! The idempotency boundary: duplicates of a completed key are acknowledged without running the
//! handler, with the in-memory store and with PostgreSQL under two concurrent workers; and the
//! PostgreSQL store's begin / complete / stale-takeover / fencing protocol on its own.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use aws_sdk_sqs::types::MessageAttributeValue;
use aws_sdk_sqs::Client;
use leaseq_worker::idempotency::{
    idempotent, Begin, Claim, IdempotencyError, IdempotencyStore, MemoryStore, PostgresStore,
};
use leaseq_worker::{Backoff, LeaseContext, Message, Outcome, Worker};

use crate::common::{counts, create_queue, start_server, unique_name, wait_for, worker_config};

const STALE_AFTER: Duration = Duration::from_secs(120);

fn postgres_config() -> String {
    std::env::var("LEASEQ_TEST_POSTGRES")
        .unwrap_or_else(|_| "host=127.0.0.1 port=5432 user=postgres dbname=test".into())
}

/// Sends `body` with the idempotency key `key` as the message attribute `idempotency-key`.
async fn send_keyed(client: &Client, queue_url: &str, key: &str, body: &str) {
    let key = MessageAttributeValue::builder()
        .data_type("String")
        .string_value(key)
        .build()
        .unwrap();
    client
        .send_message()
        .queue_url(queue_url)
        .message_body(body)
        .message_attributes("idempotency-key", key)
        .send()
        .await
        .unwrap();
}

fn key_of(message: &Message) -> Option<String> {
    message
        .attribute_text("idempotency-key")
        .map(str::to_string)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_memory_store_turns_a_duplicate_delivery_into_a_no_op() {
    let server = start_server().await;
    let queue = create_queue(&server.client, "memory-dedup", &[]).await;
    send_keyed(&server.client, &queue, "order-1", "charge 10").await;
    send_keyed(&server.client, &queue, "order-1", "charge 10 (sent again)").await;
    send_keyed(&server.client, &queue, "order-2", "charge 20").await;
    let effects: Arc<Mutex<HashMap<String, u32>>> = Arc::default();
    let handler = {
        let effects = effects.clone();
        idempotent(
            Arc::new(MemoryStore::new()),
            key_of,
            STALE_AFTER,
            move |_message, _lease, claim: Claim| {
                let effects = effects.clone();
                async move {
                    *effects
                        .lock()
                        .unwrap()
                        .entry(claim.key().to_string())
                        .or_default() += 1;
                    Outcome::Ack
                }
            },
        )
    };
    let mut config = worker_config(&queue);
    // One at a time, so the duplicate arrives after the original completed.
    config.concurrency = 1;
    let worker = Worker::new(server.client.clone(), config)
        .unwrap()
        .start(handler);
    wait_for("all three messages to be acknowledged", || async {
        worker.metrics().acks == 3
    })
    .await;
    worker.shutdown().await;
    let effects = effects.lock().unwrap().clone();
    assert_eq!(
        effects,
        HashMap::from([("order-1".into(), 1), ("order-2".into(), 1)])
    );
    assert_eq!(counts(&server.client, &queue).await, (0, 0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_makes_duplicates_no_ops_under_two_concurrent_workers() {
    let table = unique_name("worker_idem");
    let store = Arc::new(
        PostgresStore::connect(&postgres_config(), &table)
            .await
            .unwrap(),
    );
    let effects_table = format!("{table}_effects");
    let setup = store.connection().await.unwrap();
    setup
        .batch_execute(&format!(
            "CREATE TABLE {effects_table} (key TEXT PRIMARY KEY, runs INT NOT NULL)"
        ))
        .await
        .unwrap();
    drop(setup);
    let server = start_server().await;
    let queue = create_queue(&server.client, "pg-dedup", &[]).await;
    const KEYS: usize = 8;
    const COPIES: usize = 3;
    for copy in 0..COPIES {
        for key in 0..KEYS {
            send_keyed(
                &server.client,
                &queue,
                &format!("key-{key}"),
                &format!("copy {copy}"),
            )
            .await;
        }
    }
    let handler = {
        let store = store.clone();
        let effects_table = effects_table.clone();
        idempotent(
            store.clone(),
            key_of,
            STALE_AFTER,
            move |_message, lease: LeaseContext, claim: Claim| {
                let (store, effects_table) = (store.clone(), effects_table.clone());
                async move {
                    match apply_effect(&store, &effects_table, &claim, &lease).await {
                        Ok(()) => Outcome::Ack,
                        Err(error) => {
                            tracing::warn!(%error, "effect failed");
                            Outcome::retry()
                        }
                    }
                }
            },
        )
    };
    let mut config = worker_config(&queue);
    config.concurrency = 4;
    config.backoff = Backoff {
        base: Duration::from_millis(200),
        max: Duration::from_secs(1),
    };
    let handler = Arc::new(handler);
    let first = Worker::new(server.client.clone(), config.clone())
        .unwrap()
        .start(handler.clone());
    let second = Worker::new(server.client.clone(), config)
        .unwrap()
        .start(handler);
    wait_for("every copy to be acknowledged", || async {
        first.metrics().acks + second.metrics().acks == (KEYS * COPIES) as u64
    })
    .await;
    let (first, second) = (first.shutdown().await, second.shutdown().await);
    let client = store.connection().await.unwrap();
    let rows = client
        .query(
            &format!("SELECT key, runs FROM {effects_table} ORDER BY key"),
            &[],
        )
        .await
        .unwrap();
    let runs: Vec<(String, i32)> = rows.iter().map(|row| (row.get(0), row.get(1))).collect();
    let expected: Vec<(String, i32)> = (0..KEYS).map(|key| (format!("key-{key}"), 1)).collect();
    assert_eq!(runs, expected, "{first:?} {second:?}");
    let open = client
        .query_one(
            &format!("SELECT count(*) FROM {table} WHERE status <> 'completed'"),
            &[],
        )
        .await
        .unwrap();
    assert_eq!(open.get::<_, i64>(0), 0);
    assert_eq!(counts(&server.client, &queue).await, (0, 0));
    client
        .batch_execute(&format!("DROP TABLE {effects_table}; DROP TABLE {table}"))
        .await
        .unwrap();
}

/// The effect and the completion record in one transaction: both commit or neither does.
async fn apply_effect(
    store: &PostgresStore,
    effects_table: &str,
    claim: &Claim,
    lease: &LeaseContext,
) -> Result<(), IdempotencyError> {
    let mut client = store.connection().await?;
    let transaction = client.transaction().await?;
    let sql = format!(
        "INSERT INTO {effects_table} (key, runs) VALUES ($1, 1)
         ON CONFLICT (key) DO UPDATE SET runs = {effects_table}.runs + 1"
    );
    transaction.execute(&sql, &[&claim.key()]).await?;
    // Hold the claim a while, so the duplicates in the other worker arrive while it is open.
    tokio::time::sleep(Duration::from_millis(200)).await;
    store
        .complete_in(&transaction, claim, Some("charged"))
        .await?;
    if lease.is_lost() {
        // Dropping the transaction rolls the effect back.
        return Err(IdempotencyError::Fenced {
            key: claim.key().to_string(),
        });
    }
    transaction.commit().await?;
    Ok(())
}

#[tokio::test]
async fn the_postgres_store_claims_completes_takes_over_stale_records_and_fences() {
    let table = unique_name("worker_idem_protocol");
    let store = PostgresStore::connect(&postgres_config(), &table)
        .await
        .unwrap();
    let claimed = |begin: Begin| match begin {
        Begin::Claimed(claim) => claim,
        other => panic!("expected a claim, got {other:?}"),
    };
    let first = claimed(store.begin("k", "a#1", STALE_AFTER).await.unwrap());
    assert!(!first.reclaimed());
    assert_eq!(
        store.begin("k", "b#1", STALE_AFTER).await.unwrap(),
        Begin::InProgress
    );
    // With a zero staleness bound the processing record counts as abandoned and is taken over.
    let second = claimed(store.begin("k", "b#1", Duration::ZERO).await.unwrap());
    assert!(second.reclaimed());
    // The first owner is fenced out, also inside a transaction (which is then rolled back).
    assert!(matches!(
        store.complete(&first, None).await,
        Err(IdempotencyError::Fenced { .. })
    ));
    {
        let mut client = store.connection().await.unwrap();
        let transaction = client.transaction().await.unwrap();
        assert!(matches!(
            store.complete_in(&transaction, &first, None).await,
            Err(IdempotencyError::Fenced { .. })
        ));
    }
    store.release(&first).await.unwrap();
    store.complete(&second, Some("42")).await.unwrap();
    // Completing twice by the same owner is fine; a later begin is a duplicate with the result.
    store.complete(&second, Some("42")).await.unwrap();
    assert_eq!(
        store.begin("k", "c#1", Duration::ZERO).await.unwrap(),
        Begin::Completed {
            result: Some("42".into())
        }
    );
    // A released claim frees the key at once.
    let third = claimed(store.begin("other", "d#1", STALE_AFTER).await.unwrap());
    store.release(&third).await.unwrap();
    assert!(!claimed(store.begin("other", "e#1", STALE_AFTER).await.unwrap()).reclaimed());
    let client = store.connection().await.unwrap();
    client
        .batch_execute(&format!("DROP TABLE {table}"))
        .await
        .unwrap();
}
