//! Helpers of the service-level tests: connection strings, the service's configuration, and
//! SQS requests executed as the HTTP layer would.

#![allow(dead_code)]

use std::sync::Arc;

use leaseq_core::EngineConfig;
use leaseq_server::{Api, Caller, Service, ServiceConfig};
use leaseq_sqs::{decode, encode, Context, RawRequest, SqsError};
use serde_json::Value;

/// The URL of the queue `jobs` the tests create.
pub const QUEUE_URL: &str = "http://127.0.0.1:9324/000000000000/jobs";

/// The machine's PostgreSQL (`LEASEQ_TEST_POSTGRES`, default
/// `host=127.0.0.1 user=postgres dbname=test`), with sessions named `application_name`.
pub fn connection(application_name: &str) -> String {
    let base = std::env::var("LEASEQ_TEST_POSTGRES")
        .unwrap_or_else(|_| "host=127.0.0.1 user=postgres dbname=test".into());
    format!("{base} application_name={application_name}")
}

/// A region and account as the tests' queue URLs have them.
pub fn service_config() -> ServiceConfig {
    ServiceConfig {
        engine: EngineConfig::default(),
        region: "us-east-1".into(),
        account_id: "000000000000".into(),
    }
}

/// Executes one SQS action (JSON 1.0, decoded as the HTTP layer does); the answer as JSON.
pub async fn call(service: &Service, action: &str, body: Value) -> Result<Value, SqsError> {
    let bytes = body.to_string().into_bytes();
    let target = format!("AmazonSQS.{action}");
    let (protocol, action, shape) = decode(&RawRequest {
        method: "POST",
        path: "/",
        query: None,
        target: Some(&target),
        content_type: Some("application/x-amz-json-1.0"),
        body: &bytes,
    })
    .map_err(|(_, error)| error)?;
    let caller = Caller {
        sender_id: Arc::from("AIDATEST"),
        address: None,
        namespace: None,
        account_id: None,
        user_agent: None,
    };
    let name = action.name();
    let outcome = service.execute(action, &caller).await?;
    let context = Context {
        base_url: "http://127.0.0.1:9324".into(),
        region: "us-east-1".into(),
        account_id: "000000000000".into(),
        request_id: "test".into(),
    };
    let response = encode(protocol, name, &outcome, &shape, &context);
    Ok(serde_json::from_slice(&response.body).expect("a JSON answer"))
}

/// Every body in the queue with how often it came: receives with a long lease until one
/// answers empty (so within the pass a count above one is a duplicate).
pub async fn drain(service: &Service) -> std::collections::HashMap<String, usize> {
    let mut bodies = std::collections::HashMap::new();
    loop {
        let receive = serde_json::json!(
            {"QueueUrl": QUEUE_URL, "MaxNumberOfMessages": 10, "VisibilityTimeout": 600});
        let answer = call(service, "ReceiveMessage", receive).await.unwrap();
        let Some(messages) = answer["Messages"].as_array().filter(|m| !m.is_empty()) else {
            return bodies;
        };
        for message in messages {
            let body = message["Body"].as_str().unwrap().to_string();
            *bodies.entry(body).or_default() += 1;
        }
    }
}

/// The queue's (visible, in flight) message counts.
pub async fn message_counts(service: &Service) -> (usize, usize) {
    let attributes = serde_json::json!({"QueueUrl": QUEUE_URL, "AttributeNames": ["All"]});
    let answer = call(service, "GetQueueAttributes", attributes)
        .await
        .unwrap();
    let count = |name: &str| {
        let value = answer["Attributes"][name].as_str().unwrap();
        value.parse::<usize>().unwrap()
    };
    (
        count("ApproximateNumberOfMessages"),
        count("ApproximateNumberOfMessagesNotVisible"),
    )
}

/// Ends every session named `application_name` (as a PostgreSQL restart or failover does); how
/// many there were.
pub async fn terminate_sessions(application_name: &str) -> i64 {
    let client = side_client("leaseq_tests_killer").await;
    let sql =
        "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE application_name = $1";
    client
        .query_one(sql, &[&application_name])
        .await
        .unwrap()
        .get(0)
}

/// A session of the test's own on the machine's PostgreSQL, named `application_name`, its
/// connection driven by a task of the current runtime.
pub async fn side_client(application_name: &str) -> tokio_postgres::Client {
    client_of(&connection(application_name)).await
}

/// A session on the PostgreSQL `connection` names, its connection driven by a task of the
/// current runtime.
pub async fn client_of(connection: &str) -> tokio_postgres::Client {
    let (client, driver) = connection
        .parse::<tokio_postgres::Config>()
        .unwrap()
        .connect(tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(driver);
    client
}
