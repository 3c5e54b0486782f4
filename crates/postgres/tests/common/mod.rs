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
