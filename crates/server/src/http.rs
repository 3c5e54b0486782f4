//! The HTTP shell: one handler for every SQS request, plus `/health` and the dashboard page.
//!
//! A request's body is read up to a fixed bound before anything looks at it, so an oversized
//! request costs at most that much memory. The protocol is chosen per request: AWS JSON 1.0 when
//! `X-Amz-Target` is present, Query otherwise; the response (and any error) uses the same one.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

use axum::body::Bytes;
use axum::extract::{ConnectInfo, Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use leaseq_sqs::error::SqsError;
use leaseq_sqs::{Context, Protocol, RawRequest};

use crate::backend::{Backend, Caller};
use crate::metrics::{Metrics, RequestOutcome};

/// Settings of the HTTP layer.
#[derive(Clone, Debug)]
pub struct HttpConfig {
    /// Base of queue URLs when set (e.g. `https://queues.example.com`); otherwise built from each
    /// request's `Host` header, so clients reach us at the address they used.
    pub external_url: Option<String>,
    /// Region for ARNs.
    pub region: String,
    /// Account id for URLs and ARNs.
    pub account_id: String,
    /// The largest request body read; larger requests are refused unread.
    pub request_body_max_bytes: usize,
}

struct Shared<B> {
    backend: Arc<B>,
    config: HttpConfig,
    /// Request counts and latencies go here when metrics are on.
    metrics: Option<Arc<Metrics>>,
}

/// The router serving the SQS API on every path, and `GET /health`.
pub fn router<B: Backend>(backend: Arc<B>, config: HttpConfig) -> Router {
    router_with_metrics(backend, config, None)
}

/// [`router`], counting each request and its latency by action into `metrics` (if given). A
/// plain `GET /` (no query, no `X-Amz-Target`) is the dashboard page, not an SQS request.
pub fn router_with_metrics<B: Backend>(
    backend: Arc<B>,
    config: HttpConfig,
    metrics: Option<Arc<Metrics>>,
) -> Router {
    let shared = Arc::new(Shared {
        backend,
        config,
        metrics,
    });
    Router::new()
        .route("/health", get(|| async { "ok\n" }))
        .fallback(handle::<B>)
        .with_state(shared)
}

fn base_url(config: &HttpConfig, headers: &HeaderMap) -> String {
    if let Some(url) = &config.external_url {
        return url.trim_end_matches('/').to_string();
    }
    let host = headers
        .get(axum::http::header::HOST)
        .and_then(|h| h.to_str().ok())
        .filter(|h| !h.is_empty())
        .unwrap_or("localhost");
    format!("http://{host}")
}

/// The access key id of a SigV4 `Authorization` header (`Credential=AKID/...`), used as the
/// sender id; signatures are not checked yet.
fn sender_id(headers: &HeaderMap, account_id: &str) -> Arc<str> {
    headers
        .get(axum::http::header::AUTHORIZATION)
        .and_then(|h| h.to_str().ok())
        .and_then(|h| h.split_once("Credential="))
        .and_then(|(_, rest)| rest.split('/').next())
        .filter(|key| !key.is_empty() && key.len() <= 128)
        .unwrap_or(account_id)
        .into()
}

async fn handle<B: Backend>(State(shared): State<Arc<Shared<B>>>, request: Request) -> Response {
    let (parts, body) = request.into_parts();
    let (method, uri, headers) = (parts.method, parts.uri, parts.headers);
    // Present when the server was started with connect info (`leaseq serve` is).
    let address = parts
        .extensions
        .get::<ConnectInfo<SocketAddr>>()
        .map(|info| info.0);
    let config = &shared.config;
    let context = Context {
        base_url: base_url(config, &headers),
        region: config.region.clone(),
        account_id: config.account_id.clone(),
        // From the thread-local generator: `Uuid::new_v4` asks the kernel for every id, a
        // syscall per request for an id that needs to be unique, not secret.
        request_id: uuid::Builder::from_random_bytes(rand::random())
            .into_uuid()
            .to_string(),
    };
    let target = headers.get("x-amz-target").and_then(|h| h.to_str().ok());
    if method == Method::GET && uri.path() == "/" && uri.query().is_none() && target.is_none() {
        return crate::dashboard::page();
    }
    let guessed = if target.is_some() {
        Protocol::Json
    } else {
        Protocol::Query
    };
    let body: Bytes = match axum::body::to_bytes(body, config.request_body_max_bytes).await {
        Ok(body) => body,
        Err(_) => {
            let error = SqsError::request_too_large(config.request_body_max_bytes);
            return reply(leaseq_sqs::encode_error(guessed, &error, &context));
        }
    };
    let raw = RawRequest {
        method: method.as_str(),
        path: uri.path(),
        query: uri.query(),
        target,
        content_type: headers
            .get(axum::http::header::CONTENT_TYPE)
            .and_then(|h| h.to_str().ok()),
        body: &body,
    };
    let (protocol, action) = match leaseq_sqs::decode(&raw) {
        Ok(decoded) => decoded,
        Err((protocol, error)) => {
            return reply(leaseq_sqs::encode_error(protocol, &error, &context))
        }
    };
    let name = action.name();
    let caller = Caller {
        sender_id: sender_id(&headers, &config.account_id),
        address,
        user_agent: headers.get(axum::http::header::USER_AGENT).cloned(),
    };
    let started = Instant::now();
    let result = shared.backend.execute(action, &caller).await;
    if let Some(metrics) = &shared.metrics {
        let outcome = match &result {
            Ok(_) => RequestOutcome::Success,
            Err(error) if error.is_sender_fault() => RequestOutcome::ClientError,
            Err(_) => RequestOutcome::ServerError,
        };
        metrics.observe_request(name, outcome, started.elapsed());
    }
    let response = match result {
        Ok(outcome) => leaseq_sqs::encode(protocol, name, &outcome, &context),
        Err(error) => {
            if !error.is_sender_fault() {
                tracing::error!(action = name, %error, "request failed on the server side");
            }
            leaseq_sqs::encode_error(protocol, &error, &context)
        }
    };
    reply(response)
}

fn reply(response: leaseq_sqs::Response) -> Response {
    let status = StatusCode::from_u16(response.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let mut out = (status, response.body).into_response();
    for (name, value) in response.headers {
        if let Ok(value) = HeaderValue::from_str(&value) {
            out.headers_mut().insert(name, value);
        }
    }
    out
}
