//! What the in-process HTTP tests share: an in-memory backend, served on a free port by the
//! accept loop `leaseq serve` runs (`http::serve`).

// Each test file uses its own subset.
#![allow(dead_code)]

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;

use leaseq_core::{EngineConfig, ReceiptKey};
use leaseq_server::{HttpConfig, Service, ServiceConfig};
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

/// The account id of the tests' queue URLs.
pub const ACCOUNT: &str = "000000000000";

/// An in-memory backend with the default engine configuration.
pub fn in_memory_backend() -> Arc<Service> {
    Arc::new(Service::in_memory(
        ServiceConfig {
            engine: EngineConfig::default(),
            region: "us-east-1".into(),
            account_id: ACCOUNT.into(),
        },
        ReceiptKey::new([1; 16]),
    ))
}

/// Serves `backend` (with `routes` beside the SQS API, and a body bound of
/// `request_body_max_bytes`) on a free port of 127.0.0.1 until `shutdown` completes; the
/// handle ends when the server has stopped.
pub async fn serve(
    backend: Arc<Service>,
    request_body_max_bytes: usize,
    routes: axum::Router,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> (SocketAddr, JoinHandle<()>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let server = tokio::spawn(leaseq_server::http::serve(
        listener,
        backend,
        HttpConfig {
            external_url: None,
            region: "us-east-1".into(),
            account_id: ACCOUNT.into(),
            request_body_max_bytes,
        },
        None,
        routes,
        shutdown,
    ));
    (address, server)
}
