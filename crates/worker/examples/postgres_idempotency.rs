//! A worker whose effect and idempotency record commit in one PostgreSQL transaction, so a
//! duplicate delivery (here: the same payment sent twice) changes nothing.
//!
//! ```sh
//! cargo run -p leaseq -- serve --in-memory true &
//! LEASEQ_POSTGRES='host=127.0.0.1 user=postgres dbname=test' \
//!     cargo run -p leaseq-worker --example postgres_idempotency
//! ```
//!
//! Each message carries its business idempotency key in the message attribute
//! `idempotency-key`; the receipt or message id would not do, since a duplicate send has a new
//! message id and a redelivery a new receipt.

use std::sync::Arc;
use std::time::Duration;

use aws_sdk_sqs::config::{BehaviorVersion, Credentials, Region};
use aws_sdk_sqs::types::MessageAttributeValue;
use leaseq_worker::idempotency::{idempotent, Claim, IdempotencyError, PostgresStore};
use leaseq_worker::{LeaseContext, Message, Outcome, Worker, WorkerConfig};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    tracing_subscriber::fmt().with_env_filter("info").init();
    let endpoint = std::env::var("LEASEQ_ENDPOINT").unwrap_or("http://127.0.0.1:9324".into());
    let database = std::env::var("LEASEQ_POSTGRES")
        .unwrap_or("host=127.0.0.1 user=postgres dbname=test".into());
    let store = Arc::new(PostgresStore::connect(&database, "example_processed_message").await?);
    store
        .connection()
        .await?
        .batch_execute("CREATE TABLE IF NOT EXISTS example_payment (order_id TEXT PRIMARY KEY, cents BIGINT NOT NULL)")
        .await?;

    let client = client(&endpoint);
    let queue = client.create_queue().queue_name("payments").send().await?;
    let queue_url = queue.queue_url().unwrap_or_default().to_string();
    for _copy in 0..2 {
        let key = MessageAttributeValue::builder()
            .data_type("String")
            .string_value("order-42")
            .build()?;
        client
            .send_message()
            .queue_url(&queue_url)
            .message_body("order-42 1999")
            .message_attributes("idempotency-key", key)
            .send()
            .await?;
    }

    let handler = idempotent(
        store.clone(),
        |message: &Message| {
            message
                .attribute_text("idempotency-key")
                .map(str::to_string)
        },
        // Longer than the worker's lease_total_max (1 h by default): a live attempt is never
        // taken over.
        Duration::from_secs(2 * 3600),
        move |message: Message, lease: LeaseContext, claim: Claim| {
            let store = store.clone();
            async move {
                match charge(&store, &message, &lease, &claim).await {
                    Ok(()) => Outcome::Ack,
                    Err(error) if error.is_retryable() => Outcome::retry(),
                    Err(error) => Outcome::fail(error.to_string()),
                }
            }
        },
    );
    let worker = Worker::new(client, WorkerConfig::new(&queue_url))?.start(handler);
    tokio::signal::ctrl_c().await?;
    let report = worker.shutdown().await;
    println!("stopped: {report:?}");
    Ok(())
}

/// The effect and the completion record in one transaction. If the lease was lost meanwhile,
/// the transaction is dropped (rolled back) instead of committed.
async fn charge(
    store: &PostgresStore,
    message: &Message,
    lease: &LeaseContext,
    claim: &Claim,
) -> Result<(), IdempotencyError> {
    let (order_id, cents) = message
        .body()
        .split_once(' ')
        .unwrap_or((message.body(), "0"));
    let cents: i64 = cents.parse().unwrap_or(0);
    let mut connection = store.connection().await?;
    let transaction = connection.transaction().await?;
    transaction
        .execute(
            "INSERT INTO example_payment (order_id, cents) VALUES ($1, $2)",
            &[&order_id, &cents],
        )
        .await?;
    store
        .complete_in(&transaction, claim, Some("charged"))
        .await?;
    if lease.is_lost() {
        return Err(IdempotencyError::Fenced {
            key: claim.key().to_string(),
        });
    }
    transaction.commit().await?;
    tracing::info!(order_id, cents, "charged once");
    Ok(())
}

/// An SQS client for a leaseq server over plain HTTP (leaseq accepts any credentials).
fn client(endpoint: &str) -> aws_sdk_sqs::Client {
    let config = aws_sdk_sqs::Config::builder()
        .endpoint_url(endpoint)
        .region(Region::new("us-east-1"))
        .credentials_provider(Credentials::new("test", "test", None, None, "example"))
        .behavior_version(BehaviorVersion::latest())
        .http_client(aws_smithy_http_client::Builder::new().build_http())
        .build();
    aws_sdk_sqs::Client::from_conf(config)
}
