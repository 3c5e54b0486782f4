//! A leaseq server in the test's own process, served by the accept loop `leaseq serve` runs
//! (`leaseq_server::http::serve`) with the routes it mounts (`/health`, the dashboard's), the
//! move driver it starts and metrics on, as `crates/cli/src/serve.rs` does, on an in-memory
//! service.
//!
//! This is the one file of the test kit that names the server's Rust API: when the server's
//! types change, only this file follows them.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use leaseq_core::{EngineConfig, ReceiptKey};
use leaseq_server::auth::{Authenticator, Credential, Keys};
use leaseq_server::clock::{SharedClock, SystemClock};
use leaseq_server::http::tls::Tls;
use leaseq_server::http::Connections;
use leaseq_server::{Api as _, HttpConfig, Metrics, Service, ServiceConfig};
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

/// The account id in the queue URLs and ARNs of an in-process server.
pub const ACCOUNT_ID: &str = "000000000000";

/// The region in the ARNs of an in-process server.
pub const REGION: &str = "us-east-1";

/// What may differ from `leaseq serve`'s defaults.
#[derive(Clone)]
pub struct Options {
    /// The bound on a request's body (`leaseq serve`: 4 MiB).
    pub request_body_max_bytes: usize,
    /// The service's clock (`leaseq serve`: the host's); a test's
    /// [`leaseq_server::clock::ManualClock`] makes long polls, lease and delay ends and move
    /// pacing wait for the test to move time.
    pub clock: SharedClock,
    /// `Some`: `auth = "sigv4"` with these keys (verified on `clock`); `None`: `auth = "none"`
    /// (`leaseq serve`'s default).
    pub credentials: Option<Vec<Credential>>,
    /// `Some((certificate, key))`: HTTPS with these PEM files (`leaseq serve --tls-cert
    /// --tls-key`); [`InProcessServer::endpoint`] is then `https://`.
    pub tls: Option<(PathBuf, PathBuf)>,
    /// `leaseq serve --header-read-timeout-ms` (default 30 s).
    pub header_read_timeout: Duration,
    /// `leaseq serve --max-connections` (default 10000).
    pub max_connections: usize,
}

impl Default for Options {
    fn default() -> Options {
        let connections = Connections::default();
        Options {
            request_body_max_bytes: 4 << 20,
            clock: Arc::new(SystemClock),
            credentials: None,
            tls: None,
            header_read_timeout: connections.header_read_timeout,
            max_connections: connections.max_connections,
        }
    }
}

/// A server running on a free loopback port until [`InProcessServer::stop`] or drop.
pub struct InProcessServer {
    addr: SocketAddr,
    endpoint: String,
    service: Arc<Service>,
    stop: Option<oneshot::Sender<()>>,
    serving: Option<JoinHandle<()>>,
}

impl InProcessServer {
    /// Starts a server with `leaseq serve`'s defaults.
    pub async fn start() -> InProcessServer {
        InProcessServer::start_with(Options::default()).await
    }

    /// Starts a server with `options`. It answers as soon as this returns: the listener is
    /// bound before the accept loop is spawned.
    pub async fn start_with(options: Options) -> InProcessServer {
        let config = ServiceConfig {
            engine: EngineConfig::default(),
            region: REGION.into(),
            account_id: ACCOUNT_ID.into(),
        };
        let service = Service::in_memory(config, ReceiptKey::new([7; 16]));
        InProcessServer::serve(service, options).await
    }

    /// Serves `service` (a node on another log store, say; its account and region must be
    /// [`ACCOUNT_ID`] and [`REGION`]) with `options`, as [`InProcessServer::start_with`] serves
    /// its in-memory one.
    pub async fn serve(service: Service, options: Options) -> InProcessServer {
        let metrics = Arc::new(Metrics::default());
        let service = Arc::new(
            service
                .with_metrics(metrics.clone())
                .with_clock(options.clock.clone()),
        );
        tokio::spawn(service.clone().drive_moves());
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("binding a loopback port");
        let addr = listener.local_addr().expect("the listener's address");
        let (stop, stopped) = oneshot::channel::<()>();
        let shutdown_service = service.clone();
        let shutdown = async move {
            // A dropped sender stops the server as a sent signal does.
            let _ = stopped.await;
            shutdown_service.shut_down();
        };
        let http = HttpConfig {
            external_url: None,
            region: REGION.into(),
            account_id: ACCOUNT_ID.into(),
            request_body_max_bytes: options.request_body_max_bytes,
            dashboard_page: true,
            node_id: None,
            auth: options.credentials.map(|credentials| {
                Arc::new(Authenticator::new(Keys::new(credentials), options.clock))
            }),
        };
        let routes = leaseq_server::dashboard::routes(service.clone());
        let tls = options.tls.as_ref().map(|(certificate, key)| {
            Arc::new(Tls::load(certificate, key).expect("loading the test's TLS files"))
        });
        let scheme = if tls.is_some() { "https" } else { "http" };
        let connections = Connections {
            tls,
            header_read_timeout: options.header_read_timeout,
            max_connections: options.max_connections,
            stats: service.connection_stats().clone(),
        };
        let serving = tokio::spawn(leaseq_server::http::serve(
            listener,
            service.clone(),
            http,
            Some(metrics),
            routes,
            connections,
            shutdown,
        ));
        InProcessServer {
            addr,
            endpoint: format!("{scheme}://{addr}"),
            service,
            stop: Some(stop),
            serving: Some(serving),
        }
    }

    /// The address it listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://127.0.0.1:PORT` (`https://` with TLS), an SDK's endpoint.
    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    /// Receives waiting in a long poll right now.
    pub fn waiting_receives(&self) -> usize {
        self.service.waiting_receives()
    }

    /// Releases every waiting receive (they answer empty) and refuses new waits, as the first
    /// step of a graceful stop does, but keeps serving.
    pub fn release_long_polls(&self) {
        self.service.shut_down();
    }

    /// Stops gracefully, as `leaseq serve` does on SIGTERM: stops accepting, releases long
    /// polls, lets each connection finish the request it is answering, and returns once every
    /// connection is closed.
    pub async fn stop(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(serving) = self.serving.take() {
            serving.await.expect("the accept loop ends without a panic");
        }
    }
}

impl Drop for InProcessServer {
    fn drop(&mut self) {
        // The stop signal, without waiting: the accept loop ends on its runtime.
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}
