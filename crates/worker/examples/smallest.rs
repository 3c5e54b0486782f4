//! The smallest worker: consume the queue `jobs`, log each message, acknowledge it.
//!
//! ```sh
//! cargo run -p leaseq -- serve --in-memory true &     # a leaseq server on 127.0.0.1:9324
//! cargo run -p leaseq-worker --example smallest       # Ctrl-C stops it gracefully
//! ```
//!
//! `LEASEQ_ENDPOINT` points it elsewhere. Against Amazon SQS, build the client with
//! `aws_config::load_from_env()` instead of [`client`] and pass a real queue URL.

use std::time::Duration;

use aws_sdk_sqs::config::{BehaviorVersion, Credentials, Region};
use leaseq_worker::{LeaseContext, Message, Outcome, Worker, WorkerConfig};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    tracing_subscriber::fmt().with_env_filter("info").init();
    let endpoint = std::env::var("LEASEQ_ENDPOINT").unwrap_or("http://127.0.0.1:9324".into());
    let client = client(&endpoint);
    let queue = client.create_queue().queue_name("jobs").send().await?;
    let queue_url = queue.queue_url().unwrap_or_default().to_string();
    for n in 1..=3 {
        let body = format!("job {n}");
        client
            .send_message()
            .queue_url(&queue_url)
            .message_body(body)
            .send()
            .await?;
    }

    let worker = Worker::new(client, WorkerConfig::new(&queue_url))?.start(
        |message: Message, lease: LeaseContext| async move {
            tracing::info!(body = message.body(), attempt = lease.attempt(), "handling");
            // Work that outlives the lease is fine: the worker extends it meanwhile.
            tokio::time::sleep(Duration::from_millis(200)).await;
            Outcome::Ack
        },
    );

    tokio::signal::ctrl_c().await?;
    let report = worker.shutdown().await;
    println!("stopped: {report:?}");
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
