//! The service on a PostgreSQL log when PostgreSQL fails under it: every backend of the node is
//! terminated (as a PostgreSQL restart or a failover cuts them). The request whose flush was cut
//! is refused promptly with `ServiceUnavailable` (nothing hangs, nothing is acknowledged that
//! PostgreSQL may not hold), and the node then recovers by itself, without a restart: it
//! reconnects, resolves the cut flush and serves every acknowledged message, once. A new node on
//! the same schema serves them too.

mod common;

use std::collections::HashMap;
use std::time::{Duration, Instant};

use leaseq_postgres::{drop_schema, open_service, PgConfig};
use leaseq_sqs::error::ErrorCode;
use serde_json::json;

use common::{call, connection, service_config, terminate_sessions, QUEUE_URL};

/// How long one answer may take once PostgreSQL is gone.
const REFUSAL_MAX: Duration = Duration::from_secs(3);
/// How long the node may take to serve again by itself once PostgreSQL is back.
const RECOVERY_MAX: Duration = Duration::from_secs(15);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_refuses_promptly_when_postgres_drops_it_then_recovers_by_itself() {
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
    assert!(
        terminated >= 2,
        "the node has at least two sessions, a flusher's and its readers': {terminated}"
    );
    let started = Instant::now();
    let send = json!({"QueueUrl": QUEUE_URL, "MessageBody": "cut"});
    let error = call(&service, "SendMessage", send)
        .await
        .expect_err("the flush on the dropped session has an unknown outcome");
    assert_eq!(error.code, ErrorCode::ServiceUnavailable, "{error:?}");
    assert!(
        started.elapsed() < REFUSAL_MAX,
        "the refusal took {:?}",
        started.elapsed()
    );

    // The node reconnects and resolves the cut flush by itself; until then it refuses.
    let mut sent = 0;
    while sent < 3 {
        assert!(
            started.elapsed() < RECOVERY_MAX,
            "the node did not recover by itself"
        );
        let asked = Instant::now();
        let send = json!({"QueueUrl": QUEUE_URL, "MessageBody": format!("after-{sent}")});
        match call(&service, "SendMessage", send).await {
            Ok(_) => sent += 1,
            Err(error) => {
                assert_eq!(error.code, ErrorCode::ServiceUnavailable, "{error:?}");
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
        assert!(
            asked.elapsed() < REFUSAL_MAX,
            "an answer took {:?}",
            asked.elapsed()
        );
    }
    let expected = ["acknowledged", "after-0", "after-1", "after-2"];
    let bodies = receive_all(&service).await;
    assert_served_once(&bodies, &expected);

    // A new node (a restart) recovers the same from PostgreSQL.
    drop(service);
    let service =
        tokio::task::block_in_place(|| open_service(&config, service_config(), 64 << 20)).unwrap();
    assert_served_once(&receive_all(&service).await, &expected);
    drop(service);
    drop_schema(&config.connection, &config.schema).unwrap();
}

/// Every body in the queue with how often it came: one receive of up to ten (the queue holds
/// fewer) with visibility 0, so the leases it takes end at once and a restarted node sees the
/// messages again.
async fn receive_all(service: &leaseq_server::Service) -> HashMap<String, usize> {
    let receive = json!({"QueueUrl": QUEUE_URL, "MaxNumberOfMessages": 10, "VisibilityTimeout": 0});
    let answer = call(service, "ReceiveMessage", receive).await.unwrap();
    let mut bodies = HashMap::new();
    for message in answer["Messages"].as_array().into_iter().flatten() {
        let body = message["Body"].as_str().unwrap().to_string();
        *bodies.entry(body).or_default() += 1;
    }
    bodies
}

/// Every acknowledged body came once; the only other one allowed is the cut send, whose outcome
/// the client was told is unknown (at most once too).
fn assert_served_once(bodies: &HashMap<String, usize>, acknowledged: &[&str]) {
    for body in acknowledged {
        assert_eq!(bodies.get(*body), Some(&1), "{body} in {bodies:?}");
    }
    for (body, count) in bodies {
        assert!(
            acknowledged.contains(&body.as_str()) || (body == "cut" && *count == 1),
            "unexpected {body} x{count} in {bodies:?}"
        );
    }
}
