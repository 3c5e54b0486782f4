//! The metrics page's storage gauges over the PostgreSQL log: the log's bytes are its frame
//! rows' (per segment partition), and a checkpoint's size, duration and count appear once one
//! ran, as for the file log.

mod common;

use leaseq_postgres::{drop_schema, open_service, PgConfig};
use serde_json::json;

use common::{call, connection, service_config, QUEUE_URL};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn log_bytes_and_checkpoints_of_the_postgres_log() {
    let application_name = format!("leaseq_gauges_{}", std::process::id());
    let mut config = PgConfig::new(connection(&application_name));
    config.schema = application_name.clone();
    drop_schema(&config.connection, &config.schema).unwrap();
    let service =
        tokio::task::block_in_place(|| open_service(&config, service_config(), 64 << 20)).unwrap();
    call(&service, "CreateQueue", json!({"QueueName": "jobs"}))
        .await
        .unwrap();
    let before = service
        .storage_stats()
        .expect("the PostgreSQL log keeps records");
    let body = "x".repeat(4096);
    for _ in 0..8 {
        let send = json!({"QueueUrl": QUEUE_URL, "MessageBody": body});
        call(&service, "SendMessage", send).await.unwrap();
    }
    let after = service.storage_stats().unwrap();
    // Eight bodies of 4 KiB went into frame rows.
    assert!(
        after.log_bytes >= before.log_bytes + 8 * 4096,
        "{before:?} -> {after:?}"
    );
    assert!(after.log_segments >= 1);
    assert_eq!(after.checkpoints.completed, 0);
    assert_eq!(after.checkpoints.last_duration_micros, None);

    tokio::task::block_in_place(|| service.hosts().checkpoint()).unwrap();
    let checkpointed = service.storage_stats().unwrap();
    assert_eq!(checkpointed.checkpoints.completed, 1);
    assert!(checkpointed.checkpoints.snapshot_bytes > 0);
    assert!(checkpointed.checkpoints.snapshot_written_at_ms.is_some());
    assert!(checkpointed.checkpoints.last_duration_micros.unwrap() > 0);
    assert_eq!(checkpointed.checkpoints.log_bytes_since, 0);
    drop(service);
    drop_schema(&config.connection, &config.schema).unwrap();
}
