//! A small client of the SQS JSON 1.0 protocol (feature `client`): call an action on an
//! endpoint, get the JSON answer or the SQS error as a typed [`ClientError`].
//!
//! It is the one SQS client of leaseq's own tools (the cli's `queues`, `stats`, `message` and
//! redrive commands): a few calls a second at most, so plain HTTP/1.1 through hyper's pooled
//! client, no signing (leaseq does not check signatures yet) and no retries (an operator sees
//! the error and runs the command again). Load generators keep their own hot clients.

use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt as _, Full};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use serde_json::Value;

use crate::error::ErrorCode;

/// How long one call may take, connection included, unless [`Client::with_timeout`] says.
pub const TIMEOUT_DEFAULT: Duration = Duration::from_secs(10);

/// Why a call failed.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The endpoint is not a plain `http://` URL with a host.
    #[error("the endpoint must be an http:// URL with a host, not {0:?}")]
    Endpoint(String),
    /// No answer: the connection failed or broke, or the call took longer than the timeout.
    #[error("{action}: no answer from {endpoint}: {reason}")]
    Transport {
        /// The action called.
        action: String,
        /// The endpoint.
        endpoint: String,
        /// What went wrong.
        reason: String,
    },
    /// An answer that is not SQS's: a body that is not JSON (or not an error's).
    #[error("{action} answered {status} with a body that is not an SQS answer")]
    Malformed {
        /// The action called.
        action: String,
        /// The HTTP status.
        status: u16,
    },
    /// The server refused the call with an SQS error.
    #[error("{action}: {type_name}: {message}")]
    Sqs {
        /// The action called.
        action: String,
        /// The error's code, when it is one leaseq knows (from `x-amzn-query-error`, or else
        /// the JSON `__type`).
        code: Option<ErrorCode>,
        /// The shape name of the JSON `__type` (`QueueDoesNotExist`), as sent.
        type_name: String,
        /// The error's message.
        message: String,
        /// The HTTP status.
        status: u16,
    },
}

/// A client of one SQS endpoint, over a pool of keep-alive connections.
#[derive(Clone, Debug)]
pub struct Client {
    endpoint: hyper::Uri,
    timeout: Duration,
    http: hyper_util::client::legacy::Client<HttpConnector, Full<Bytes>>,
}

impl Client {
    /// A client of `endpoint` (`http://host:port`). Its calls run inside a tokio runtime.
    pub fn new(endpoint: &str) -> Result<Client, ClientError> {
        let invalid = || ClientError::Endpoint(endpoint.to_string());
        let endpoint: hyper::Uri = endpoint.parse().map_err(|_| invalid())?;
        if endpoint.scheme_str() != Some("http") || endpoint.host().is_none() {
            return Err(invalid());
        }
        let http = hyper_util::client::legacy::Client::builder(TokioExecutor::new())
            .build(HttpConnector::new());
        Ok(Client {
            endpoint,
            timeout: TIMEOUT_DEFAULT,
            http,
        })
    }

    /// This client with another per-call timeout.
    pub fn with_timeout(mut self, timeout: Duration) -> Client {
        self.timeout = timeout;
        self
    }

    /// Calls `action` (`ListQueues`, `LeaseqGetVisibilityAdvice`) with the JSON `body`, and
    /// returns the answer's JSON.
    pub async fn call(&self, action: &str, body: &Value) -> Result<Value, ClientError> {
        let transport = |reason: String| ClientError::Transport {
            action: action.to_string(),
            endpoint: self.endpoint.to_string(),
            reason,
        };
        let request = hyper::Request::post(&self.endpoint)
            .header(hyper::header::CONTENT_TYPE, "application/x-amz-json-1.0")
            .header(crate::headers::TARGET, format!("AmazonSQS.{action}"))
            .body(Full::new(Bytes::from(body.to_string())))
            .map_err(|error| transport(error.to_string()))?;
        let exchange = async {
            let response = self.http.request(request).await?;
            let (parts, body) = response.into_parts();
            let bytes = body.collect().await?.to_bytes();
            Ok::<_, Box<dyn std::error::Error + Send + Sync>>((parts, bytes))
        };
        let (parts, bytes) = tokio::time::timeout(self.timeout, exchange)
            .await
            .map_err(|_| transport(format!("no answer within {:?}", self.timeout)))?
            .map_err(|error| transport(error.to_string()))?;
        let query_error = parts
            .headers
            .get("x-amzn-query-error")
            .and_then(|value| value.to_str().ok());
        answer(action, parts.status.as_u16(), query_error, &bytes)
    }
}

/// The JSON of a success, or the SQS error of a failure, from a response's status, its
/// `x-amzn-query-error` header (`AWS.SimpleQueueService.NonExistentQueue;Sender`) and body.
pub fn answer(
    action: &str,
    status: u16,
    query_error: Option<&str>,
    body: &[u8],
) -> Result<Value, ClientError> {
    let malformed = || ClientError::Malformed {
        action: action.to_string(),
        status,
    };
    let value: Value = serde_json::from_slice(body).map_err(|_| malformed())?;
    if (200..300).contains(&status) {
        return Ok(value);
    }
    let json_type = value["__type"].as_str().ok_or_else(malformed)?;
    let query_code = query_error.and_then(|header| header.split(';').next());
    // The JSON type alone is ambiguous for a few generic errors (two share
    // `UnknownOperationException`), so the legacy code decides when it is there.
    let code = ErrorCode::ALL.into_iter().find(|code| match query_code {
        Some(query_code) => code.query_code() == query_code,
        None => code.json_type() == json_type,
    });
    Err(ClientError::Sqs {
        action: action.to_string(),
        code,
        type_name: json_type
            .rsplit('#')
            .next()
            .unwrap_or(json_type)
            .to_string(),
        message: value["message"].as_str().unwrap_or_default().to_string(),
        status,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::SqsError;
    use crate::outcome::Context;

    fn ctx() -> Context {
        Context {
            base_url: "http://localhost:9324".into(),
            region: "us-east-1".into(),
            account_id: "000000000000".into(),
            request_id: "r".into(),
        }
    }

    #[test]
    fn every_encoded_error_parses_back_to_its_code() {
        for code in ErrorCode::ALL {
            let error = SqsError::new(code, "why \"quoted\"");
            let response = crate::encode_error(crate::Protocol::Json, &error, &ctx());
            let header = response.query_error.as_deref();
            let parsed = answer("Act", response.status, header, &response.body).unwrap_err();
            let ClientError::Sqs {
                code: parsed_code,
                message,
                status,
                type_name,
                ..
            } = parsed
            else {
                panic!("{code:?}: {parsed:?}");
            };
            assert_eq!(parsed_code, Some(code));
            assert_eq!(
                (message.as_str(), status),
                ("why \"quoted\"", code.status())
            );
            assert!(code.json_type().ends_with(&format!("#{type_name}")));
        }
    }

    #[test]
    fn successes_and_strange_answers() {
        assert_eq!(
            answer("A", 200, None, b"{}").unwrap(),
            serde_json::json!({})
        );
        assert!(matches!(
            answer("A", 502, None, b"<html>"),
            Err(ClientError::Malformed { status: 502, .. })
        ));
        let error = answer(
            "ListQueues",
            400,
            None,
            br#"{"__type":"com.amazonaws.sqs#QueueDoesNotExist","message":"gone"}"#,
        )
        .unwrap_err();
        assert_eq!(error.to_string(), "ListQueues: QueueDoesNotExist: gone");
        assert!(Client::new("https://example.com").is_err());
        assert!(Client::new("not a url").is_err());
    }
}
