//! The service on a PostgreSQL log when PostgreSQL fails under it: every backend of the node is
//! terminated (as a PostgreSQL restart or a failover cuts them), and then every request is
//! refused promptly with `ServiceUnavailable` (nothing hangs, nothing is answered from state the
//! log may not hold), until a new node takes the schema over and serves every acknowledged
//! message again.

mod common;

use std::time::{Duration, Instant};

use leaseq_postgres::{drop_schema, open_service, PgConfig};
use leaseq_sqs::error::ErrorCode;
use serde_json::json;

use common::{call, connection, service_config, QUEUE_URL};

/// How long a refusal may take once PostgreSQL is gone.
const REFUSAL_MAX: Duration = Duration::from_secs(3);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_are_refused_promptly_once_postgres_is_gone_and_a_new_node_serves_again() {
    let application_name = format!("leaseq_failures_{}", std::process::id());
    let mut config = PgConfig::new(connection(&application_name));
    config.schema = application_name.clone();
    drop_schema(&config.connection, &config.schema).unwrap();
    let service =
        tokio::task::block_in_place(|| open_service(&config, service_config(), 64 << 20)).unwrap();
    call(&service, "CreateQueue", json!({"QueueName": "jobs"}))
        .await
        .unwrap();
    let send = json!({"QueueUrl": QUEUE_URL, "MessageBody": "acknowledged"});
    call(&service, "SendMessage", send).await.unwrap();

    // PostgreSQL drops every session of the node (a restart, a failover).
    let terminated = terminate_sessions(&application_name).await;
    assert_eq!(
        terminated, 2,
        "the node has two sessions: its flusher's and its readers'"
    );
    let started = Instant::now();
    let send = json!({"QueueUrl": QUEUE_URL, "MessageBody": "refused"});
    let error = call(&service, "SendMessage", send)
        .await
        .expect_err("no flush can commit");
    assert_eq!(error.code, ErrorCode::ServiceUnavailable, "{error:?}");
    let error = call(&service, "ListQueues", json!({}))
        .await
        .expect_err("a poisoned log serves nothing");
    assert_eq!(error.code, ErrorCode::ServiceUnavailable, "{error:?}");
    assert!(
        started.elapsed() < REFUSAL_MAX,
        "refusals took {:?}",
        started.elapsed()
    );

    // A new node (a restart) recovers what PostgreSQL holds: the acknowledged message.
    let service =
        tokio::task::block_in_place(|| open_service(&config, service_config(), 64 << 20)).unwrap();
    let receive = json!({"QueueUrl": QUEUE_URL, "MaxNumberOfMessages": 10});
    let answer = call(&service, "ReceiveMessage", receive).await.unwrap();
    let bodies: Vec<&str> = answer["Messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|message| message["Body"].as_str().unwrap())
        .collect();
    assert_eq!(bodies, ["acknowledged"]);
    drop(service);
    drop_schema(&config.connection, &config.schema).unwrap();
}

/// Terminates every PostgreSQL session named `application_name`; returns how many.
async fn terminate_sessions(application_name: &str) -> i64 {
    let (client, connection) = connection("leaseq_failures_killer")
        .parse::<tokio_postgres::Config>()
        .unwrap()
        .connect(tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(connection);
    let sql =
        "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE application_name = $1";
    client
        .query_one(sql, &[&application_name])
        .await
        .unwrap()
        .get(0)
}
