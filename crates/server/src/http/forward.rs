//! Forwarding: a cluster's standby hands each SQS request, unchanged, to the node that serves it
//! (see [`crate::service::route`]), and hands the peer's answer back as it came.
//!
//! The request goes as the client sent it (method, path and query, every end-to-end header,
//! the body) with one header more, [`FORWARDED_BY`], so the peer verifies its signature,
//! decodes it and builds queue URLs from the client's own `Host`, exactly as if the client had
//! asked it directly: one extra hop and no protocol of our own. A node that receives a forwarded
//! request but no longer serves it does not forward it again (no request travels more than one
//! hop); it answers `ServiceUnavailable` marked with [`NOT_SERVING`], and the forwarder asks for
//! the route again and retries.
//!
//! Retrying is safe only while the peer has certainly not acted on the request: when it could
//! not be reached (the connection was refused before the request was sent) or answered
//! [`NOT_SERVING`] (it refused before executing). A connection that breaks after the request went
//! out leaves the outcome unknown, and the client gets `ServiceUnavailable` (which SDKs retry,
//! as they do any lost answer: SQS's delivery is at least once).

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::http::{HeaderMap, HeaderName, HeaderValue, Method, Uri};
use axum::response::Response;
use http_body_util::Full;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use leaseq_sqs::error::SqsError;

use crate::service::{Api, ForwardStats, Peer, Route};

/// Marks a request a node forwarded; its value is the forwarding node's id.
pub const FORWARDED_BY: HeaderName = HeaderName::from_static("x-leaseq-forwarded-by");
/// The scheme (`http` or `https`) of the listener the client's request came in on, which a
/// forwarded request may reach over another (a TLS listener's node forwards to its peers' plain
/// listener): the owner builds queue URLs with it, as the client would from its own request.
pub const FORWARDED_PROTO: HeaderName = HeaderName::from_static("x-leaseq-forwarded-proto");
/// The address of the client's connection to the node that forwarded the request, which the
/// owner records in attempt histories instead of the forwarding node's own. Like
/// [`FORWARDED_PROTO`] it is believed of any request marked [`FORWARDED_BY`]: it changes nothing
/// but what a history says of its client.
pub const FORWARDED_FOR: HeaderName = HeaderName::from_static("x-leaseq-forwarded-for");
/// Marks an answer of a node that does not serve the request it was forwarded (it did nothing).
/// Its value says why: [`NOT_SERVING_PLACED`] when the request's queue lives outside its name's
/// bucket, which this node owns (the forwarding node has not learned the placement yet), any
/// other when this node does not own the bucket (the forwarding node's owner is stale).
pub const NOT_SERVING: HeaderName = HeaderName::from_static(NOT_SERVING_NAME);
/// [`NOT_SERVING`]'s name, for answers that carry it as text.
pub const NOT_SERVING_NAME: &str = "x-leaseq-not-serving";
/// The value of [`NOT_SERVING`] for a queue placed outside its name's bucket
/// (`crate::placements`).
pub const NOT_SERVING_PLACED: &str = "placed";
/// Every SQS answer of a cluster node names the node that executed the request.
pub const NODE: HeaderName = HeaderName::from_static("x-leaseq-node");

/// How long a request waits for a node to serve it while none is known (a takeover under way),
/// before it is answered `ServiceUnavailable`.
pub const ROUTE_WAIT: Duration = Duration::from_secs(2);
/// How often the route is asked again while it is unknown.
const ROUTE_POLL: Duration = Duration::from_millis(25);
/// Forwards of one request that the peer refused without acting, at most, before giving up.
const ATTEMPTS_MAX: usize = 4;
/// The longest a forwarded request may take: a long poll's 20 s and then some. A peer that
/// stops answering (paused) leaves the outcome unknown after this long.
const FORWARD_TIMEOUT: Duration = Duration::from_secs(30);
/// Idle pooled connections to a peer are closed after this long.
const POOL_IDLE_TIMEOUT: Duration = Duration::from_secs(30);

/// Headers that belong to one connection and are never passed on (RFC 9110 §7.6.1), and the
/// length, which the client sets again for the body it sends.
const HOP_BY_HOP: [&str; 8] = [
    "connection",
    "keep-alive",
    "proxy-connection",
    "transfer-encoding",
    "te",
    "trailer",
    "upgrade",
    "content-length",
];

/// What became of a request that [`Forwarder::forward`] was given.
pub(crate) enum Forwarded {
    /// The answer to hand to the client (the peer's, or `ServiceUnavailable`).
    Answer(Response),
    /// This node serves it after all (it took over meanwhile): execute it here.
    Here,
}

/// The pooled HTTP/1.1 client that forwards requests to peers.
pub(crate) struct Forwarder {
    client: Client<HttpConnector, Full<Bytes>>,
}

impl Default for Forwarder {
    fn default() -> Forwarder {
        Forwarder {
            client: pooled_client(),
        }
    }
}

/// A pooled HTTP/1.1 client to peers.
fn pooled_client() -> Client<HttpConnector, Full<Bytes>> {
    let mut connector = HttpConnector::new();
    connector.set_nodelay(true);
    connector.set_connect_timeout(Some(Duration::from_secs(2)));
    Client::builder(TokioExecutor::new())
        .pool_timer(TokioTimer::new())
        .pool_idle_timeout(POOL_IDLE_TIMEOUT)
        .build(connector)
}

/// What became of a post to a peer ([`PeerClient::post`]).
#[derive(Debug)]
pub enum Posted {
    /// The peer answered 200 with this body.
    Answered(Bytes),
    /// The peer certainly did not act on it: it could not be reached, or said it does not
    /// serve what was asked (503 with [`NOT_SERVING`]).
    Refused(String),
    /// It went out and no usable answer came back: the outcome is unknown.
    Broken(String),
}

/// A pooled client that posts a cluster's own requests (bucket calls) to peers.
pub struct PeerClient {
    client: Client<HttpConnector, Full<Bytes>>,
}

impl Default for PeerClient {
    fn default() -> PeerClient {
        PeerClient {
            client: pooled_client(),
        }
    }
}

impl PeerClient {
    /// Posts `body` to `path` at the peer's `address` (`host:port`).
    pub async fn post(&self, address: &str, path: &str, body: Vec<u8>) -> Posted {
        let uri = match Uri::try_from(format!("http://{address}{path}")) {
            Ok(uri) => uri,
            Err(error) => return Posted::Refused(format!("its address: {error}")),
        };
        let mut request = hyper::Request::new(Full::new(Bytes::from(body)));
        *request.method_mut() = Method::POST;
        *request.uri_mut() = uri;
        let answer = tokio::time::timeout(FORWARD_TIMEOUT, self.client.request(request)).await;
        match answer {
            Ok(Ok(response)) if response.headers().contains_key(NOT_SERVING) => {
                Posted::Refused("it does not serve it".into())
            }
            Ok(Ok(response)) => {
                let status = response.status();
                let body = http_body_util::BodyExt::collect(response.into_body()).await;
                match body {
                    Ok(body) if status.is_success() => Posted::Answered(body.to_bytes()),
                    Ok(body) => Posted::Broken(format!(
                        "{status}: {}",
                        String::from_utf8_lossy(&body.to_bytes())
                    )),
                    Err(error) => Posted::Broken(describe(&error)),
                }
            }
            Ok(Err(error)) if error.is_connect() => Posted::Refused(format!("{error}")),
            Ok(Err(error)) => Posted::Broken(describe(&error)),
            Err(_) => Posted::Broken(format!("no answer within {FORWARD_TIMEOUT:?}")),
        }
    }
}

/// The request as the client sent it.
pub(crate) struct Incoming<'a> {
    pub method: &'a Method,
    pub uri: &'a Uri,
    pub headers: &'a HeaderMap,
    pub body: &'a Bytes,
    /// `http://` or `https://`: the listener's that the client reached.
    pub scheme: &'static str,
    /// The client's connection's address, if known.
    pub address: Option<SocketAddr>,
}

impl Forwarder {
    /// Forwards `request` along `route` (not [`Route::Here`]), asking `route_again` after a
    /// refusal, until a peer answers, this node turns out to serve it, or it cannot be placed.
    pub(crate) async fn forward<B: Api>(
        &self,
        service: &B,
        route_again: impl Fn() -> Route,
        mut route: Route,
        request: Incoming<'_>,
        node_id: Option<&HeaderValue>,
    ) -> Result<Forwarded, SqsError> {
        let mut waited_since = None;
        let mut attempts = 0;
        loop {
            let peer = match route {
                Route::Here => return Ok(Forwarded::Here),
                Route::Peer(peer) => peer,
                Route::Unknown => {
                    let since = *waited_since.get_or_insert_with(tokio::time::Instant::now);
                    if since.elapsed() >= ROUTE_WAIT {
                        return Err(unrouted(service));
                    }
                    tokio::time::sleep(ROUTE_POLL).await;
                    route = route_again();
                    continue;
                }
            };
            attempts += 1;
            match self.send(&peer, &request, node_id).await {
                Sent::Answered(response) => {
                    count(service, |stats| &stats.forwarded);
                    return Ok(Forwarded::Answer(response));
                }
                Sent::Refused(reason) => {
                    count(service, |stats| &stats.refused);
                    tracing::debug!(peer = %peer.node_id, reason, "a peer did not take a forwarded request");
                    service.peer_refused(&peer);
                    if attempts >= ATTEMPTS_MAX {
                        return Err(SqsError::service_unavailable(format!(
                            "no node took the request after {attempts} tries; try again"
                        )));
                    }
                }
                Sent::Placed => {
                    // The peer owns the bucket of the queue's name, and the queue was placed
                    // in another: this node learns the placement (the service reads them
                    // again) and routes the request there. The peer stays the bucket's owner.
                    count(service, |stats| &stats.refused);
                    service.placements_changed();
                    if attempts >= ATTEMPTS_MAX {
                        return Err(SqsError::service_unavailable(format!(
                            "the queue was placed in another bucket and no node took the request after {attempts} tries; try again"
                        )));
                    }
                    tokio::time::sleep(ROUTE_POLL).await;
                }
                Sent::Broken(error) => {
                    count(service, |stats| &stats.broken);
                    tracing::warn!(peer = %peer.node_id, %error, "a forwarded request's answer was lost");
                    return Err(SqsError::service_unavailable(
                        "the node serving the request did not answer; the request may or may not \
                         have taken effect",
                    ));
                }
            }
            route = route_again();
        }
    }

    async fn send(
        &self,
        peer: &Peer,
        request: &Incoming<'_>,
        node_id: Option<&HeaderValue>,
    ) -> Sent {
        let path = request
            .uri
            .path_and_query()
            .map_or("/", |path| path.as_str());
        let uri = match Uri::try_from(format!("http://{}{path}", peer.address)) {
            Ok(uri) => uri,
            Err(error) => return Sent::Refused(format!("its address: {error}")),
        };
        let mut forwarded = hyper::Request::new(Full::new(request.body.clone()));
        *forwarded.method_mut() = request.method.clone();
        *forwarded.uri_mut() = uri;
        let headers = forwarded.headers_mut();
        for (name, value) in request.headers {
            if !is_hop_by_hop(name) && *name != FORWARDED_PROTO && *name != FORWARDED_FOR {
                headers.append(name.clone(), value.clone());
            }
        }
        let proto = match request.scheme {
            "https://" => "https",
            _ => "http",
        };
        headers.insert(FORWARDED_PROTO, HeaderValue::from_static(proto));
        if let Some(address) = request.address {
            let address = HeaderValue::try_from(address.to_string())
                .expect("a socket address is a valid header value");
            headers.insert(FORWARDED_FOR, address);
        }
        headers.insert(
            FORWARDED_BY,
            node_id
                .cloned()
                .unwrap_or(HeaderValue::from_static("unnamed")),
        );
        let answer = tokio::time::timeout(FORWARD_TIMEOUT, self.client.request(forwarded)).await;
        match answer {
            Ok(Ok(response)) if response.headers().contains_key(NOT_SERVING) => {
                if response.headers()[NOT_SERVING] == NOT_SERVING_PLACED {
                    Sent::Placed
                } else {
                    Sent::Refused("it no longer serves the request".into())
                }
            }
            Ok(Ok(response)) => {
                let (mut parts, body) = response.into_parts();
                parts.headers.retain_hop_by_hop_free();
                Sent::Answered(Response::from_parts(parts, Body::new(body)))
            }
            // Not connected: the request never left, so another try cannot act twice.
            Ok(Err(error)) if error.is_connect() => Sent::Refused(format!("{error}")),
            Ok(Err(error)) => Sent::Broken(describe(&error)),
            Err(_) => Sent::Broken(format!("no answer within {FORWARD_TIMEOUT:?}")),
        }
    }
}

/// Counts one event into `service`'s forwarding counters, if it keeps them.
fn count<B: Api>(service: &B, counter: impl FnOnce(&ForwardStats) -> &AtomicU64) {
    if let Some(stats) = service.forward_stats() {
        counter(stats).fetch_add(1, Ordering::Relaxed);
    }
}

/// `ServiceUnavailable` for a request no node was known to serve in time, counted.
fn unrouted<B: Api>(service: &B) -> SqsError {
    count(service, |stats| &stats.unrouted);
    SqsError::service_unavailable(
        "no node of the cluster serves this request right now (a takeover is under way); try again",
    )
}

/// What one forward came to.
enum Sent {
    /// The peer answered (any status but a refusal).
    Answered(Response),
    /// The peer certainly did not act on the request.
    Refused(String),
    /// The peer did not act on the request: it owns the bucket of the queue's name, and the
    /// queue lives in another ([`NOT_SERVING_PLACED`]).
    Placed,
    /// The request went out and its answer was lost.
    Broken(String),
}

fn is_hop_by_hop(name: &HeaderName) -> bool {
    HOP_BY_HOP.contains(&name.as_str())
}

trait RetainHopByHopFree {
    fn retain_hop_by_hop_free(&mut self);
}

impl RetainHopByHopFree for HeaderMap {
    /// Drops the connection's own headers from an answer passed on (the length stays: the body
    /// is passed on as it is).
    fn retain_hop_by_hop_free(&mut self) {
        for name in HOP_BY_HOP.iter().filter(|name| **name != "content-length") {
            self.remove(*name);
        }
    }
}

/// An error with its causes, `: `-separated: the `Display` of many clients' errors (hyper's,
/// tokio-postgres's) says only what kind of error it was, and the cause is in its sources.
pub fn describe(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}
