//! The accept loop of `leaseq serve`: one connection per client, HTTP/1.1 on plain TCP, and
//! over TLS HTTP/2 or HTTP/1.1 as ALPN chose. HTTP/1.1 is served by the fast path
//! ([`super::h1`]) until a request needs hyper, and by hyper from then on; HTTP/2 by hyper.
//! Either way SQS requests go straight to the handler.
//!
//! Limits that protect the server from its clients ([`Connections`]): at most
//! `max_connections` connections are served at once (beyond that, the loop stops accepting and
//! new connections wait in the kernel's listen backlog until one closes), a request's header
//! (and, over TLS, the handshake before it, or HTTP/2's connection preface) must arrive within
//! `header_read_timeout`, and an idle connection is closed after that long too: an HTTP/1.1
//! one by the header read timeout (the fast path's, or hyper's: it runs from the end of one
//! answer to the end of the next request's header), an HTTP/2 one with GOAWAY once it has had no stream open for that
//! long ([`super::idle`]; hyper's HTTP/2 server has no such timeout).
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
use hyper::server::conn::{http1, http2};
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use parking_lot::Mutex;
use rustc_hash::FxHashMap;
use tokio::io::{AsyncRead, AsyncReadExt as _, AsyncWrite};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{oneshot, watch, Semaphore};
use tokio::time::Instant;
use tokio_rustls::server::TlsStream;
use tower::ServiceExt as _;

use super::h1::{self, Replay};
use super::idle::Streams;
use super::tls::Tls;
use super::{handle_sqs, router_of, HttpConfig, Shared};
use crate::metrics::{ConnectionStats, Metrics};
use crate::service::Api;

/// The path prefixes the router may serve: `GET /health`, `/livez`, `/readyz` and the dashboard's routes
/// ([`crate::dashboard::routes`]: `/metrics` and `/api/...`). A request with any other path is
/// an SQS request (queue URLs are `/{account_id}/{queue}`, or `/`) and goes straight to the
/// SQS handler; one with a routed prefix that no route serves reaches the same handler as the
/// router's fallback.
pub const ROUTED_PATH_PREFIXES: &[&str] = &[
    "/health",
    "/livez",
    "/readyz",
    "/metrics",
    "/api/",
    // A cluster's bucket calls between nodes (`service::bucket_wire`).
    "/_leaseq/",
];

/// Whether a request for `path` goes through the router rather than straight to the SQS
/// handler.
pub(super) fn is_routed(path: &str) -> bool {
    ROUTED_PATH_PREFIXES
        .iter()
        .any(|prefix| path.starts_with(prefix))
}

/// What the accept loop does with connections: TLS or not, and the limits on them.
#[derive(Clone, Debug)]
pub struct Connections {
    /// `Some`: every connection is TLS (HTTP/2 or HTTP/1.1 by ALPN) and queue URLs are
    /// `https://`; `None`: plain HTTP/1.1.
    pub tls: Option<Arc<Tls>>,
    /// How long a client may take to send a request's header (from the connection's start, or
    /// the end of the previous answer), and over TLS the handshake; then the connection is
    /// closed. Also how long an idle connection stays open: HTTP/1.1 keep-alive between
    /// requests, HTTP/2 with no stream open (then closed with GOAWAY).
    pub header_read_timeout: Duration,
    /// Connections served at once; more wait to be accepted until one closes.
    pub max_connections: usize,
    /// Where the accept loop counts its connections (`leaseq serve` passes the service's
    /// [`crate::Service::connection_stats`], which `/metrics` shows).
    pub stats: Arc<ConnectionStats>,
}

/// `header_read_timeout`'s default: hyper's own default, and longer than any SDK's pause
/// between the bytes of one header.
pub const HEADER_READ_TIMEOUT_DEFAULT: Duration = Duration::from_secs(30);

/// `max_connections`' default. Each open connection costs a file descriptor and a few KiB
/// (more over TLS), so the process' file limit (`ulimit -n`) must be above it.
pub const MAX_CONNECTIONS_DEFAULT: usize = 10_000;

impl Default for Connections {
    fn default() -> Connections {
        Connections {
            tls: None,
            header_read_timeout: HEADER_READ_TIMEOUT_DEFAULT,
            max_connections: MAX_CONNECTIONS_DEFAULT,
            stats: Arc::default(),
        }
    }
}

/// Serves `service`'s SQS API (counting requests into `metrics`, if given), `GET /health` and
/// `routes` on `listener` until `shutdown` completes; then stops accepting connections, lets
/// each connection finish the request it is answering (idle keep-alive connections close) and
/// returns once all are closed. Handlers see the client's address as [`ConnectInfo`].
/// `connections` says whether they are TLS and bounds them.
///
/// `routes` must serve only paths that start with one of [`ROUTED_PATH_PREFIXES`].
pub async fn serve<B: Api>(
    listener: TcpListener,
    service: Arc<B>,
    config: HttpConfig,
    metrics: Option<Arc<Metrics>>,
    routes: Router,
    connections: Connections,
    shutdown: impl Future<Output = ()>,
) {
    let scheme = match connections.tls {
        Some(_) => "https://",
        None => "http://",
    };
    let shared = Arc::new(Shared::new(service, config, metrics, scheme));
    let app = Arc::new(App {
        router: router_of(shared.clone()).merge(routes),
        shared,
    });
    let connections = Arc::new(connections);
    // One permit per connection served; the loop waits for one before it accepts.
    let permits = Arc::new(Semaphore::new(connections.max_connections.max(1)));
    // Each connection has its own stop signal, registered here until it closes, and holds a
    // clone of `open`: the server waits for the last one to be dropped.
    let stops = Arc::new(Stops::default());
    let (open_tx, open_rx) = watch::channel(());
    let mut shutdown = pin!(shutdown);
    // Whether the last connection had to wait for a permit: the warning is logged once per
    // stretch at the limit, not once per connection.
    let mut at_limit = false;
    let stats = connections.stats.clone();
    stats.set_max(connections.max_connections);
    loop {
        let permit = match permits.clone().try_acquire_owned() {
            Ok(permit) => {
                at_limit = false;
                permit
            }
            Err(_) => {
                if !at_limit {
                    stats.limit_reached();
                    tracing::warn!(
                        max_connections = connections.max_connections,
                        "max_connections reached: new connections wait until one closes"
                    );
                }
                at_limit = true;
                tokio::select! {
                    permit = permits.clone().acquire_owned() => {
                        permit.expect("the semaphore is never closed")
                    }
                    () = &mut shutdown => break,
                }
            }
        };
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            () = &mut shutdown => break,
        };
        match accepted {
            Ok((stream, address)) => {
                let counted = stats.accepted();
                let (id, stop) = stops.register();
                let connection =
                    serve_connection(app.clone(), connections.clone(), stream, address, stop);
                let (stops, open) = (stops.clone(), open_rx.clone());
                tokio::spawn(async move {
                    connection.await;
                    stops.forget(id);
                    drop(counted);
                    drop(open);
                    drop(permit);
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
pub(super) struct App<B> {
    pub(super) shared: Arc<Shared<B>>,
    /// `GET /health`, the caller's routes, and the SQS handler as the fallback.
    pub(super) router: Router,
}

impl<B: Api> App<B> {
    async fn answer(&self, request: hyper::Request<Incoming>, address: SocketAddr) -> Response {
        if is_routed(request.uri().path()) {
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

/// Why a connection is being closed before its client closed it.
enum Closing {
    /// The server stops: the answer in progress is finished first, however long it takes.
    Stopping,
    /// An HTTP/2 connection with no stream for the idle timeout: GOAWAY, then the close.
    Idle,
}

/// The longest an HTTP/2 connection's graceful close waits for its client once no stream is
/// open (see [`until_stopped`]): `header_read_timeout` if shorter.
const CLOSE_GRACE_MAX: Duration = Duration::from_secs(5);

/// Drives a hyper connection (HTTP/1.1's or HTTP/2's: types with the same methods and no
/// common trait, hence a macro) until it ends, or until `stop` (the server stops) or `idle`
/// (an HTTP/2 connection with no request in progress for the idle timeout) and then a graceful
/// close: the answers in progress are finished, however long they take.
///
/// HTTP/2's graceful close is GOAWAY and a ping, and hyper closes once the client has
/// acknowledged the ping and the last stream has ended; a client that never acknowledges
/// (gone, or not reading) would hold the connection, and a stopping server, for ever. So
/// `unanswered`, a future made when the close begins, ends it too: for HTTP/2, once no stream
/// has been open for the grace (HTTP/1.1 closes as soon as its answer in progress is out).
macro_rules! until_stopped {
    ($connection:expr, $stop:expr, $idle:expr, $unanswered:expr, $address:expr) => {{
        let mut connection = pin!($connection);
        let ended = tokio::select! {
            result = connection.as_mut() => Ok(result),
            _ = $stop => Err(Closing::Stopping),
            () = $idle => Err(Closing::Idle),
        };
        let result = match ended {
            Ok(result) => result,
            Err(closing) => {
                if let Closing::Idle = closing {
                    tracing::trace!(address = %$address, "closing an idle connection");
                }
                connection.as_mut().graceful_shutdown();
                tokio::select! {
                    result = connection.as_mut() => result,
                    () = $unanswered => {
                        tracing::debug!(
                            address = %$address,
                            "a closing connection's client did not acknowledge GOAWAY: dropped"
                        );
                        Ok(())
                    }
                }
            }
        };
        if let Err(error) = result {
            tracing::trace!(address = %$address, %error, "connection ended with an error");
        }
    }};
}

/// Serves one client's connection until it closes, or until `stop` fires (or its sender is
/// dropped) and the request in progress (if any) is answered.
async fn serve_connection<B: Api>(
    app: Arc<App<B>>,
    connections: Arc<Connections>,
    stream: TcpStream,
    address: SocketAddr,
    stop: oneshot::Receiver<()>,
) {
    let timeout = connections.header_read_timeout;
    let mut stop = stop;
    let Some(tls) = &connections.tls else {
        http1(app, stream, address, timeout, stop).await;
        return;
    };
    // A stop while the handshake (or HTTP/2's preface) is still on its way ends the connection
    // at once: it has no request in progress.
    let secured = tokio::select! {
        secured = secure(tls, stream, timeout, address) => secured,
        _ = &mut stop => None,
    };
    match secured {
        None => {}
        Some(Secured::Http1(stream)) => http1(app, stream, address, timeout, stop).await,
        Some(Secured::Http2(stream)) => {
            // hyper's HTTP/2 server has no idle timeout of its own: each stream is counted
            // open until its answer is produced, and a connection with none open for as long
            // as an idle HTTP/1.1 connection may stay (the header read timeout) is closed.
            let streams = Streams::new();
            let answer = answerer(app, address);
            let service = service_fn({
                let streams = streams.clone();
                move |request| {
                    let open = streams.open();
                    let answered = answer(request);
                    async move {
                        let answer = answered.await;
                        drop(open);
                        answer
                    }
                }
            });
            let mut builder = http2::Builder::new(TokioExecutor::new());
            builder.timer(TokioTimer::new());
            let connection = builder.serve_connection(TokioIo::new(stream), service);
            let grace = timeout.min(CLOSE_GRACE_MAX);
            until_stopped!(
                connection,
                stop,
                streams.idle_for(timeout),
                streams.idle_after(Instant::now(), grace),
                address
            );
        }
    }
}

/// An answer to a request hyper read.
type Answering = std::pin::Pin<Box<dyn Future<Output = Result<Response, Infallible>> + Send>>;

/// hyper's service for a connection: every request to [`App::answer`].
fn answerer<B: Api>(
    app: Arc<App<B>>,
    address: SocketAddr,
) -> impl Fn(hyper::Request<Incoming>) -> Answering + Clone {
    move |request: hyper::Request<Incoming>| -> Answering {
        let app = app.clone();
        Box::pin(async move { Ok::<_, Infallible>(app.answer(request, address).await) })
    }
}

/// Serves an HTTP/1.1 connection: on the fast path ([`h1`]) until a request needs hyper, then
/// with hyper for the rest of its life, from the bytes the fast path had read.
async fn http1<B: Api, S>(
    app: Arc<App<B>>,
    stream: S,
    address: SocketAddr,
    timeout: Duration,
    mut stop: oneshot::Receiver<()>,
) where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let stream = match h1::serve(&app, stream, address, timeout, &mut stop).await {
        h1::Ended::Closed => return,
        h1::Ended::HandOff(stream) => stream,
    };
    tracing::trace!(%address, "a request for hyper: the connection is hyper's from here on");
    // HTTP/1.1 is never idle here: hyper's header read timeout closes an idle connection.
    let never_idle = std::future::pending::<()>;
    let service = service_fn(answerer(app, address));
    let connection = http1_builder(timeout).serve_connection(TokioIo::new(stream), service);
    until_stopped!(connection, stop, never_idle(), never_idle(), address);
}

/// A TLS connection ready for hyper, in the protocol ALPN chose.
enum Secured {
    Http1(TlsStream<TcpStream>),
    Http2(Replay<TlsStream<TcpStream>>),
}

/// The TLS handshake and, for HTTP/2, the client's preface, each within `timeout`; `None` (the
/// connection is dropped) if either fails or is late.
async fn secure(
    tls: &Tls,
    stream: TcpStream,
    timeout: Duration,
    address: SocketAddr,
) -> Option<Secured> {
    // HTTP/2 may write several frames per answer (headers, data, window updates) in separate
    // records: without this Nagle's algorithm would hold the later ones back for the client's
    // delayed ACK.
    let _ = stream.set_nodelay(true);
    let stream = match tokio::time::timeout(timeout, tls.acceptor().accept(stream)).await {
        Ok(Ok(stream)) => stream,
        Ok(Err(error)) => {
            tracing::debug!(%address, %error, "TLS handshake failed");
            return None;
        }
        Err(_) => {
            tracing::debug!(%address, "TLS handshake not done within header_read_timeout");
            return None;
        }
    };
    // ALPN decided the protocol; without it (a client that offers none) HTTP/1.1, as RFC 9113
    // §3.2 reserves HTTP/2 over TLS for clients that negotiated "h2".
    if stream.get_ref().1.alpn_protocol() != Some(b"h2") {
        return Some(Secured::Http1(stream));
    }
    // hyper's HTTP/2 server has no header read timeout: it would wait for the client's
    // preface forever (and a graceful stop would wait for it too). So the preface must arrive
    // within the timeout; after it, HTTP/2's own flow control and hyper's limits apply.
    match tokio::time::timeout(timeout, read_preface(stream)).await {
        Ok(Ok(stream)) => Some(Secured::Http2(stream)),
        Ok(Err(error)) => {
            tracing::debug!(%address, %error, "no HTTP/2 preface");
            None
        }
        Err(_) => {
            tracing::debug!(%address, "no HTTP/2 preface within header_read_timeout");
            None
        }
    }
}

/// The HTTP/1.1 connection settings, plain or over TLS.
fn http1_builder(header_read_timeout: Duration) -> http1::Builder {
    let mut builder = http1::Builder::new();
    // A response goes out in one `write` of one buffer (head and body copied together) rather
    // than a `writev` of the head and the body: measured ~1.7 µs less server CPU per
    // SendMessage. Our bodies are small except for large receives, where one more copy of the
    // body is small next to encoding it.
    builder
        .writev(false)
        .timer(TokioTimer::new())
        .header_read_timeout(header_read_timeout);
    builder
}

/// The client connection preface of HTTP/2 (RFC 9113 §3.4).
const HTTP2_PREFACE: &[u8; 24] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// `inner` once its HTTP/2 preface has been read (and checked), to be handed to hyper as if
/// unread.
async fn read_preface<S: AsyncRead + Unpin>(mut inner: S) -> io::Result<Replay<S>> {
    let mut preface = [0u8; HTTP2_PREFACE.len()];
    inner.read_exact(&mut preface).await?;
    if &preface != HTTP2_PREFACE {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "not the HTTP/2 connection preface",
        ));
    }
    Ok(Replay::new(preface.to_vec(), inner))
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
