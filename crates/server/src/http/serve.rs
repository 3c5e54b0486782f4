//! The accept loop of `leaseq serve`: one hyper HTTP/1.1 connection per client, and a service
//! that hands SQS requests straight to the handler.
//!
//! Why not `axum::serve`: for every request it boxes the body, inserts the client's address
//! into the request's extensions, clones the router, and matches the path against the routes
//! and then the fallback's catch-all pattern (recording the matched path and its parameter),
//! only to end in the SQS handler for almost every request. Here a request whose path cannot
//! be one of the router's skips all of that; the others go through the same router as before,
//! with the same [`ConnectInfo`], so every answer is the same.

use std::convert::Infallible;
use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::pin::pin;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::extract::ConnectInfo;
use axum::response::Response;
use axum::Router;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use parking_lot::Mutex;
use rustc_hash::FxHashMap;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{oneshot, watch};
use tower::ServiceExt as _;

use super::{handle_sqs, router_of, HttpConfig, Shared};
use crate::metrics::Metrics;
use crate::service::Api;

/// The path prefixes the router may serve: `GET /health`, `/livez`, `/readyz` and the dashboard's routes
/// ([`crate::dashboard::routes`]: `/metrics` and `/api/...`). A request with any other path is
/// an SQS request (queue URLs are `/{account_id}/{queue}`, or `/`) and goes straight to the
/// SQS handler; one with a routed prefix that no route serves reaches the same handler as the
/// router's fallback.
pub const ROUTED_PATH_PREFIXES: &[&str] = &["/health", "/livez", "/readyz", "/metrics", "/api/"];

/// Serves `service`'s SQS API (counting requests into `metrics`, if given), `GET /health` and
/// `routes` on `listener` until `shutdown` completes; then stops accepting connections, lets
/// each connection finish the request it is answering (idle keep-alive connections close) and
/// returns once all are closed. Handlers see the client's address as [`ConnectInfo`].
///
/// `routes` must serve only paths that start with one of [`ROUTED_PATH_PREFIXES`].
pub async fn serve<B: Api>(
    listener: TcpListener,
    service: Arc<B>,
    config: HttpConfig,
    metrics: Option<Arc<Metrics>>,
    routes: Router,
    shutdown: impl Future<Output = ()>,
) {
    let shared = Arc::new(Shared {
        service,
        config,
        metrics,
    });
    let app = Arc::new(App {
        router: router_of(shared.clone()).merge(routes),
        shared,
    });
    // Each connection has its own stop signal, registered here until it closes, and holds a
    // clone of `open`: the server waits for the last one to be dropped.
    let stops = Arc::new(Stops::default());
    let (open_tx, open_rx) = watch::channel(());
    let mut shutdown = pin!(shutdown);
    loop {
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            () = &mut shutdown => break,
        };
        match accepted {
            Ok((stream, address)) => {
                let (id, stop) = stops.register();
                let connection = serve_connection(app.clone(), stream, address, stop);
                let (stops, open) = (stops.clone(), open_rx.clone());
                tokio::spawn(async move {
                    connection.await;
                    stops.forget(id);
                    drop(open);
                });
            }
            Err(error) => accept_failed(error).await,
        }
    }
    drop(listener);
    drop(open_rx);
    stops.stop_all();
    open_tx.closed().await;
}

/// The stop signals of the open connections, by connection number.
///
/// Why one channel per connection rather than one `watch` for all: a connection polls its stop
/// signal every time it wakes (every request), and polling a pending `watch` (or `Notify`)
/// takes the lock of its waiter list, which one shared channel would make every connection on
/// every worker contend for (measured ~1 µs of server CPU per request). A pending `oneshot`
/// receiver is polled with an atomic load of its own state.
#[derive(Default)]
struct Stops {
    inner: Mutex<StopsInner>,
}

#[derive(Default)]
struct StopsInner {
    next_id: u64,
    by_id: FxHashMap<u64, oneshot::Sender<()>>,
}

impl Stops {
    /// A new connection's number and stop signal.
    fn register(&self) -> (u64, oneshot::Receiver<()>) {
        let (stop_tx, stop_rx) = oneshot::channel();
        let mut inner = self.inner.lock();
        let id = inner.next_id;
        inner.next_id += 1;
        inner.by_id.insert(id, stop_tx);
        (id, stop_rx)
    }

    /// Forgets a closed connection.
    fn forget(&self, id: u64) {
        self.inner.lock().by_id.remove(&id);
    }

    /// Tells every open connection to stop.
    fn stop_all(&self) {
        for (_, stop) in self.inner.lock().by_id.drain() {
            // A connection that closed meanwhile no longer listens.
            let _ = stop.send(());
        }
    }
}

/// What every connection's service shares.
struct App<B> {
    shared: Arc<Shared<B>>,
    /// `GET /health`, the caller's routes, and the SQS handler as the fallback.
    router: Router,
}

impl<B: Api> App<B> {
    async fn answer(&self, request: hyper::Request<Incoming>, address: SocketAddr) -> Response {
        let path = request.uri().path();
        if ROUTED_PATH_PREFIXES
            .iter()
            .any(|prefix| path.starts_with(prefix))
        {
            let mut request = request.map(Body::new);
            request.extensions_mut().insert(ConnectInfo(address));
            let router = self.router.clone();
            return router
                .oneshot(request)
                .await
                .unwrap_or_else(|never| match never {});
        }
        let (parts, body) = request.into_parts();
        handle_sqs(&self.shared, parts, body, Some(address)).await
    }
}

/// Serves one client's connection until it closes, or until `stop` fires (or its sender is
/// dropped) and the request in progress (if any) is answered.
async fn serve_connection<B: Api>(
    app: Arc<App<B>>,
    stream: TcpStream,
    address: SocketAddr,
    stop: oneshot::Receiver<()>,
) {
    let service = service_fn(move |request| {
        let app = app.clone();
        async move { Ok::<_, Infallible>(app.answer(request, address).await) }
    });
    let mut builder = http1::Builder::new();
    // A response goes out in one `write` of one buffer (head and body copied together) rather
    // than a `writev` of the head and the body: measured ~1.7 µs less server CPU per
    // SendMessage. Our bodies are small except for large receives, where one more copy of the
    // body is small next to encoding it.
    builder.writev(false);
    let mut connection = pin!(builder.serve_connection(TokioIo::new(stream), service));
    let ended = tokio::select! {
        result = connection.as_mut() => Some(result),
        _ = stop => None,
    };
    let result = match ended {
        Some(result) => result,
        None => {
            connection.as_mut().graceful_shutdown();
            connection.await
        }
    };
    if let Err(error) = result {
        tracing::trace!(%address, %error, "connection ended with an error");
    }
}

/// After a failed accept: a client that gave up before we accepted is no concern; anything
/// else (most likely too many open files) is logged, and we wait a second for connections to
/// close before accepting again (as `axum::serve` and hyper 0.14's server did).
async fn accept_failed(error: io::Error) {
    if matches!(
        error.kind(),
        io::ErrorKind::ConnectionRefused
            | io::ErrorKind::ConnectionAborted
            | io::ErrorKind::ConnectionReset
    ) {
        return;
    }
    tracing::error!(%error, "accept failed");
    tokio::time::sleep(Duration::from_secs(1)).await;
}
