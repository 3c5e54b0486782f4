//! The HTTP shell: one handler for every SQS request, plus `/health` and the dashboard page.
//!
//! A request's body is read up to a fixed bound before anything looks at it, so an oversized
//! request costs at most that much memory. The protocol is chosen per request, by the rule of
//! `leaseq_sqs::headers` (which also reads the sender's access key id); the response (and any
//! error) uses the same one.
//!
//! [`serve`] is the accept loop of `leaseq serve`; [`router`] serves the same API as an axum
//! `Router` for anyone who runs their own server (the tests do).

pub mod forward;
mod h1;
mod idle;
mod serve;
pub mod tls;

pub use serve::{
    serve, Connections, HEADER_READ_TIMEOUT_DEFAULT, MAX_CONNECTIONS_DEFAULT, ROUTED_PATH_PREFIXES,
};

use std::net::SocketAddr;
use std::sync::{Arc, OnceLock};
use std::time::Instant;

use axum::body::{Body, Bytes};
use axum::extract::{ConnectInfo, Request, State};
use axum::http::header::CONTENT_TYPE;
use axum::http::request::Parts;
use axum::http::{HeaderMap, HeaderName, HeaderValue, Method, StatusCode, Uri};
use axum::response::Response;
use axum::routing::get;
use axum::{BoxError, Router};
use http_body_util::{BodyExt as _, Limited};
use hyper::body::Body as HttpBody;
use leaseq_sqs::error::SqsError;
use leaseq_sqs::{Action, Context, RawRequest};

use crate::auth::Authenticator;
use crate::metrics::{Metrics, RequestOutcome};
use crate::service::{Api, Caller};

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
    /// `Some`: every SQS request must be signed (SigV4) by one of its keys, and acts for the
    /// key's account. `None` (`auth = "none"`): nothing is checked.
    pub auth: Option<Arc<Authenticator>>,
    /// Whether a plain `GET /` is the dashboard page (`false` when the dashboard has a listener
    /// of its own, `--admin-listen`: then it is an SQS request like any other).
    pub dashboard_page: bool,
    /// A cluster node's id: every SQS answer then names it in `x-leaseq-node`
    /// ([`forward::NODE`]), and requests it forwards carry it ([`forward::FORWARDED_BY`]).
    /// `None` on a single node.
    pub node_id: Option<String>,
}

struct Shared<B> {
    service: Arc<B>,
    config: HttpConfig,
    /// Request counts and latencies go here when metrics are on.
    metrics: Option<Arc<Metrics>>,
    /// Of queue URLs built from `Host`: `https://` on a TLS listener.
    scheme: &'static str,
    /// The parts of every request's [`Context`] that are the same for all of them, made once
    /// so that a request clones pointers rather than copying strings.
    region: Arc<str>,
    account_id: Arc<str>,
    /// `config.external_url` without its trailing slashes.
    external_url: Option<Arc<str>>,
    /// `config.node_id` as a header value.
    node_id: Option<HeaderValue>,
    /// Forwards SQS requests to the node that serves them, when that is not this one.
    forwarder: forward::Forwarder,
}

impl<B> Shared<B> {
    fn new(
        service: Arc<B>,
        config: HttpConfig,
        metrics: Option<Arc<Metrics>>,
        scheme: &'static str,
    ) -> Shared<B> {
        Shared {
            region: config.region.as_str().into(),
            account_id: config.account_id.as_str().into(),
            external_url: config
                .external_url
                .as_deref()
                .map(|url| url.trim_end_matches('/').into()),
            node_id: config
                .node_id
                .as_deref()
                .and_then(|id| HeaderValue::from_str(id).ok()),
            forwarder: forward::Forwarder::default(),
            service,
            config,
            metrics,
            scheme,
        }
    }
}

/// The router serving the SQS API on every path, and `GET /health`.
pub fn router<B: Api>(service: Arc<B>, config: HttpConfig) -> Router {
    router_with_metrics(service, config, None)
}

/// [`router`], counting each request and its latency by action into `metrics` (if given). A
/// plain `GET /` (no query, no `X-Amz-Target`) is the dashboard page, not an SQS request.
pub fn router_with_metrics<B: Api>(
    service: Arc<B>,
    config: HttpConfig,
    metrics: Option<Arc<Metrics>>,
) -> Router {
    router_of(Arc::new(Shared::new(service, config, metrics, "http://")))
}

fn router_of<B: Api>(shared: Arc<Shared<B>>) -> Router {
    let service = shared.service.clone();
    Router::new()
        .fallback(handle::<B>)
        .with_state(shared)
        .merge(probes(service))
}

/// `GET /health` and `/livez` (liveness: the process answers) and `GET /readyz` (readiness: it
/// should get traffic: not draining, its log not failed; it listens only once recovery is done).
pub fn probes<B: Api>(service: Arc<B>) -> Router {
    Router::new()
        .route("/health", get(|| async { "ok\n" }))
        .route("/livez", get(|| async { "ok\n" }))
        .route("/readyz", get(readyz::<B>))
        .with_state(service)
}

/// `GET /readyz`: 200 `ok`, or 503 with the reason.
async fn readyz<B: Api>(State(service): State<Arc<B>>) -> Response {
    let (status, text) = match service.readiness() {
        Ok(()) => (StatusCode::OK, "ok\n".to_string()),
        Err(reason) => (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("not ready: {reason}\n"),
        ),
    };
    let mut response = Response::new(Body::from(text));
    *response.status_mut() = status;
    response.headers_mut().insert(
        CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    response
}

/// The base of queue URLs for a request whose `Host` says `host`: the external URL if one is
/// configured, else the scheme and the host.
fn base_url<B>(shared: &Shared<B>, headers: &RequestHeaders<'_>, host: &HostFacts) -> Arc<str> {
    if let Some(url) = &shared.external_url {
        return url.clone();
    }
    // A request a peer forwarded (a cluster's standby) says which scheme its client used.
    let https = match headers.forwarded_proto {
        Some(b"https") => true,
        Some(b"http") => false,
        _ => shared.scheme == "https://",
    };
    host.urls[usize::from(https)].clone()
}

/// What a request's `Host` header says: the region it names, if any, and the bases of queue
/// URLs on it, if it is text (visible ASCII, not empty), else on `localhost`.
#[derive(Clone)]
struct HostFacts {
    region: Option<Arc<str>>,
    /// `http://HOST` and `https://HOST`.
    urls: [Arc<str>; 2],
}

impl HostFacts {
    /// The facts of `host`; no `Host` header says what an empty one does.
    fn of(host: Option<&[u8]>) -> HostFacts {
        thread_local! {
            static LAST: Remembered<HostFacts> = const { Remembered::new(None) };
        }
        remembered(&LAST, host.unwrap_or_default(), |host| {
            let text = header_text(host).filter(|text| !text.is_empty());
            let url = |scheme: &str| Arc::from(format!("{scheme}{}", text.unwrap_or("localhost")));
            HostFacts {
                region: text
                    .and_then(leaseq_sqs::namespace::region_of_host)
                    .map(Arc::from),
                urls: [url("http://"), url("https://")],
            }
        })
    }
}

/// The last value a thread worked out from a header's bytes, and those bytes.
type Remembered<T> = std::cell::RefCell<Option<(Box<[u8]>, T)>>;

/// `work(bytes)`, or what it gave for the same bytes last time on this thread. Clients send the
/// same `Host`, credential and `User-Agent` with every request, so checking and parsing them
/// once per thread, not per request, leaves a comparison and a reference count (about a
/// thousand instructions less per request). `work` must depend on nothing but the bytes.
/// Longer values than any of those are worked out every time, not kept.
fn remembered<T: Clone>(
    last: &'static std::thread::LocalKey<Remembered<T>>,
    bytes: &[u8],
    work: impl FnOnce(&[u8]) -> T,
) -> T {
    const REMEMBERED_BYTES_MAX: usize = 512;
    if bytes.len() > REMEMBERED_BYTES_MAX {
        return work(bytes);
    }
    last.with(|last| {
        let mut last = last.borrow_mut();
        if let Some((seen, value)) = last.as_ref() {
            if **seen == *bytes {
                return value.clone();
            }
        }
        let value = work(bytes);
        *last = Some((bytes.into(), value.clone()));
        value
    })
}

/// A fresh request id (`x-amzn-RequestId`): a version-4 UUID, hyphenated (see [`crate::ids`]).
/// Encoded into a buffer rather than through `Display`, which goes through the formatting
/// machinery.
fn request_id() -> Arc<str> {
    // The version and variant bits make the bytes a v4 UUID.
    let uuid = uuid::Builder::from_random_bytes(crate::ids::unique_bytes()).into_uuid();
    let text = leaseq_sqs::hex::hyphenated(uuid.as_bytes());
    Arc::from(leaseq_core::bytes::utf8(&text).expect("hexadecimal digits and hyphens are ASCII"))
}

/// The sender id: the access key id of the `Authorization` header, or the account id (shared,
/// not copied).
fn sender_id(headers: &RequestHeaders<'_>, account_id: &Arc<str>) -> Arc<str> {
    thread_local! {
        static LAST: Remembered<Option<Arc<str>>> = const { Remembered::new(None) };
    }
    let key = headers.authorization.and_then(|value| {
        // Only the key id is read, and in the header every SDK sends it ends at the first `/`:
        // only the bytes before it need to be text (not the scope, signed headers and
        // signature after it, two thirds of the header).
        let value = value
            .strip_prefix(SIGV4_CREDENTIAL_PREFIX)
            .and_then(|credential| credential.iter().position(|&b| b == b'/'))
            .map_or(value, |end| &value[..SIGV4_CREDENTIAL_PREFIX.len() + end]);
        remembered(&LAST, value, |value| {
            header_text(value)
                .and_then(leaseq_sqs::headers::access_key_id)
                .map(Arc::from)
        })
    });
    key.unwrap_or_else(|| account_id.clone())
}

/// How a SigV4 `Authorization` header starts, up to the credential's value.
const SIGV4_CREDENTIAL_PREFIX: &[u8] = b"AWS4-HMAC-SHA256 Credential=";

/// The namespace a request addresses: its key's account (else the home account) in the region
/// its `Host` names (else the home region); `None` when that is the home namespace.
fn namespace(
    config: &HttpConfig,
    host: &HostFacts,
    verified: Option<&leaseq_sqs::sigv4::Verified>,
) -> Option<leaseq_sqs::namespace::Namespace> {
    let region = host
        .region
        .as_ref()
        .filter(|region| ***region != *config.region);
    let account = verified
        .map(|verified| &verified.account_id)
        .filter(|account| ***account != *config.account_id);
    if region.is_none() && account.is_none() {
        return None;
    }
    Some(leaseq_sqs::namespace::Namespace {
        account_id: account
            .cloned()
            .unwrap_or_else(|| Arc::from(config.account_id.as_str())),
        region: region
            .cloned()
            .unwrap_or_else(|| Arc::from(config.region.as_str())),
    })
}

/// The client's address: the connection's, unless a peer forwarded the request and said whose
/// it was ([`forward::FORWARDED_FOR`]).
fn client_address(
    headers: &RequestHeaders<'_>,
    connection: Option<SocketAddr>,
) -> Option<SocketAddr> {
    if headers.forwarded_by.is_none() {
        return connection;
    }
    headers
        .forwarded_for
        .and_then(header_text)
        .and_then(|text| text.parse().ok())
        .or(connection)
}

/// A connection's address for a log line.
fn address_text(address: Option<SocketAddr>) -> String {
    address.map(|a| a.to_string()).unwrap_or_default()
}

/// The router's fallback: an SQS request that reached the router (see [`serve`] for those that
/// do not).
async fn handle<B: Api>(State(shared): State<Arc<Shared<B>>>, request: Request) -> Response {
    let (parts, body) = request.into_parts();
    // Present when the server was started with connect info.
    let address = parts
        .extensions
        .get::<ConnectInfo<SocketAddr>>()
        .map(|info| info.0);
    handle_sqs(&shared, parts, body, address).await
}

/// Answers one SQS request (or the dashboard page, a plain `GET /`) that hyper parsed, whose
/// connection comes from `address`; a cluster node names itself in the answer (unless a peer's
/// answer passed on names that peer).
async fn handle_sqs<B, RequestBody>(
    shared: &Shared<B>,
    parts: Parts,
    body: RequestBody,
    address: Option<SocketAddr>,
) -> Response
where
    B: Api,
    RequestBody: HttpBody<Data = Bytes, Error: Into<BoxError>> + Send,
{
    let (method, uri, mut headers) = (parts.method, parts.uri, parts.headers);
    // HTTP/2 carries the host as the `:authority` pseudo-header, which hyper puts in the URI,
    // and clients send no `Host` (RFC 9113 §8.3.1). Everything below reads `Host` (the queue
    // URLs' base, the region, and SigV4, whose SDKs sign `host` with the authority's value), so
    // the authority stands in for it, as the RFC says servers should treat it.
    if !headers.contains_key(axum::http::header::HOST) {
        if let Some(authority) = uri.authority() {
            if let Ok(host) = HeaderValue::from_str(authority.as_str()) {
                headers.insert(axum::http::header::HOST, host);
            }
        }
    }
    let head = Head {
        method,
        path: uri.path(),
        query: uri.query(),
        found: RequestHeaders::of(&headers),
        whole: Whole::Parsed {
            uri: &uri,
            headers: &headers,
        },
    };
    let body = read_body(body, shared.config.request_body_max_bytes).await;
    answer_sqs(shared, &head, body.as_deref(), address)
        .await
        .into_response(shared.node_id.as_ref())
}

/// A request's head as the SQS handler reads it: hyper's, or the one the HTTP/1.1 fast path
/// ([`h1`]) parsed, whose header map is built only for what needs every header (SigV4's check,
/// forwarding, the router).
pub(crate) struct Head<'a> {
    method: Method,
    path: &'a str,
    query: Option<&'a str>,
    /// The headers the handler reads.
    found: RequestHeaders<'a>,
    whole: Whole<'a>,
}

/// Every header of a request, and its target.
pub(crate) enum Whole<'a> {
    /// As hyper parsed them.
    Parsed {
        uri: &'a Uri,
        headers: &'a HeaderMap,
    },
    /// As `httparse` found them: the request target (origin form, of characters a `Uri`
    /// takes: see [`h1`]) and the header lines; `built` holds them as `http`'s types once
    /// something asked (SigV4's check and forwarding both may).
    Raw {
        target: &'a str,
        headers: &'a [httparse::Header<'a>],
        built: OnceLock<Option<Box<(Uri, HeaderMap)>>>,
    },
}

impl Whole<'_> {
    /// The target and the headers as `http`'s types: hyper's, or built once from the raw
    /// head. `Err` for a head that `http` does not take (which the fast path does not let
    /// through).
    fn parts(&self) -> Result<(&Uri, &HeaderMap), SqsError> {
        match self {
            Whole::Parsed { uri, headers } => Ok((uri, headers)),
            Whole::Raw {
                target,
                headers,
                built,
            } => built
                .get_or_init(|| build_parts(target, headers).map(Box::new))
                .as_deref()
                .map(|(uri, headers)| (uri, headers))
                .ok_or_else(|| {
                    SqsError::invalid_parameter_value("the request's head is not valid HTTP")
                }),
        }
    }
}

/// A raw head's target and headers as `http`'s types, if they are valid there.
fn build_parts(target: &str, headers: &[httparse::Header<'_>]) -> Option<(Uri, HeaderMap)> {
    let uri = Uri::try_from(target).ok()?;
    let mut map = HeaderMap::with_capacity(headers.len());
    for header in headers {
        let name = HeaderName::from_bytes(header.name.as_bytes()).ok()?;
        let value = HeaderValue::from_bytes(header.value).ok()?;
        map.append(name, value);
    }
    Some((uri, map))
}

/// What the SQS handler answers: an encoded SQS response (written by whichever HTTP layer
/// carries it), or an HTTP response made elsewhere (a peer's answer passed on, the dashboard
/// page).
pub(crate) enum Answer {
    Sqs(leaseq_sqs::Response),
    Http(Response),
}

impl Answer {
    /// As hyper's response, naming this node (`node_id`, a cluster's) unless it names a peer.
    fn into_response(self, node_id: Option<&HeaderValue>) -> Response {
        let mut response = match self {
            Answer::Sqs(response) => reply(response),
            Answer::Http(response) => response,
        };
        if let Some(node_id) = node_id {
            response
                .headers_mut()
                .entry(forward::NODE)
                .or_insert_with(|| node_id.clone());
        }
        response
    }
}

/// Answers one SQS request (or the dashboard page, a plain `GET /`) whose connection comes from
/// `address`. `body` is `None` when it was longer than the limit, or could not be read.
async fn answer_sqs<B>(
    shared: &Shared<B>,
    head: &Head<'_>,
    body: Option<&[u8]>,
    address: Option<SocketAddr>,
) -> Answer
where
    B: Api,
{
    let found = &head.found;
    let config = &shared.config;
    let host = HostFacts::of(found.host);
    let context = Context {
        base_url: base_url(shared, found, &host),
        region: shared.region.clone(),
        account_id: shared.account_id.clone(),
        request_id: request_id(),
    };
    let target = found.target.and_then(header_text);
    if config.dashboard_page
        && head.method == Method::GET
        && head.path == "/"
        && head.query.is_none()
        && target.is_none()
    {
        return Answer::Http(crate::dashboard::page());
    }
    let guessed = leaseq_sqs::headers::protocol(target);
    let Some(body) = body else {
        let error = SqsError::request_too_large(config.request_body_max_bytes);
        return Answer::Sqs(leaseq_sqs::encode_error(guessed, &error, &context));
    };
    // Before decoding: an unauthenticated request learns nothing about queues, not even whether
    // its parameters are valid.
    let verified = match &config.auth {
        None => None,
        Some(auth) => match head
            .whole
            .parts()
            .and_then(|(uri, headers)| Ok(auth.verify(&head.method, uri, headers, body)?))
        {
            Ok(verified) => Some(verified),
            Err(error) => {
                tracing::debug!(code = ?error.code, address = %address_text(address), "request not authenticated");
                if let Some(metrics) = &shared.metrics {
                    metrics.observe_request(
                        "Unauthenticated",
                        RequestOutcome::ClientError,
                        std::time::Duration::ZERO,
                    );
                }
                return Answer::Sqs(leaseq_sqs::encode_error(guessed, &error, &context));
            }
        },
    };
    let raw = RawRequest {
        method: head.method.as_str(),
        path: head.path,
        query: head.query,
        target,
        content_type: found.content_type.and_then(header_text),
        body,
    };
    let (protocol, mut action, shape) = match leaseq_sqs::decode(&raw) {
        Ok(decoded) => decoded,
        Err((protocol, error)) => {
            return Answer::Sqs(leaseq_sqs::encode_error(protocol, &error, &context))
        }
    };
    if let Some(trace_id) = found.trace_id.and_then(header_text) {
        leaseq_sqs::headers::adopt_trace_id(&mut action, trace_id);
    }
    let name = action.name();
    let namespace = namespace(config, &host, verified.as_ref());
    let caller = Caller {
        namespace,
        account_id: verified
            .as_ref()
            .map(|verified| verified.account_id.clone()),
        sender_id: match &verified {
            Some(verified) => verified.access_key_id.clone(),
            None => sender_id(found, &shared.account_id),
        },
        address: client_address(found, address),
        user_agent: found.user_agent.and_then(|value| {
            thread_local! {
                static LAST: Remembered<Option<HeaderValue>> = const { Remembered::new(None) };
            }
            remembered(&LAST, value, |value| HeaderValue::from_bytes(value).ok())
        }),
    };
    // A `CreateQueue` may place its queue in another bucket than its name's (its dead-letter
    // queue's, `crate::placements`), which this node may not serve: it is then routed once
    // more. Other actions are not kept: cloning every request for that would cost them all.
    let mut again = matches!(action, Action::CreateQueue { .. }).then(|| action.clone());
    loop {
        // A cluster's node passes the request on to the node that serves its queue's bucket,
        // which verifies, decodes and executes it again (see `forward`).
        match shared.service.route(&action, &caller) {
            crate::service::Route::Here => {}
            route => {
                if found.forwarded_by.is_some() {
                    // Forwarded by a node that thought this one serves it: refuse without
                    // acting, so that node asks again (no request travels more than one hop).
                    let error =
                        SqsError::service_unavailable("this node does not serve the request");
                    let mut refused = leaseq_sqs::encode_error(protocol, &error, &context);
                    let why = if shared.service.placed_elsewhere(&action, &caller) {
                        forward::NOT_SERVING_PLACED
                    } else {
                        "1"
                    };
                    refused.server_header = Some((forward::NOT_SERVING_NAME, why));
                    return Answer::Sqs(refused);
                }
                let (uri, headers) = match head.whole.parts() {
                    Ok(parts) => parts,
                    Err(error) => {
                        return Answer::Sqs(leaseq_sqs::encode_error(protocol, &error, &context))
                    }
                };
                let body = Bytes::copy_from_slice(body);
                let incoming = forward::Incoming {
                    method: &head.method,
                    uri,
                    headers,
                    body: &body,
                    scheme: shared.scheme,
                    address,
                };
                let forwarded = shared.forwarder.forward(
                    &*shared.service,
                    || shared.service.route(&action, &caller),
                    route,
                    incoming,
                    shared.node_id.as_ref(),
                );
                match forwarded.await {
                    Ok(forward::Forwarded::Answer(response)) => return Answer::Http(response),
                    Ok(forward::Forwarded::Here) => {}
                    Err(error) => {
                        return Answer::Sqs(leaseq_sqs::encode_error(protocol, &error, &context));
                    }
                }
            }
        }
        let started = Instant::now();
        let result = shared.service.execute(action, &caller).await;
        if let Err(error) = &result {
            if crate::service::is_not_served_here(error) {
                if let Some(retry) = again.take() {
                    action = retry;
                    continue;
                }
            }
        }
        if let Some(metrics) = &shared.metrics {
            let outcome = match &result {
                Ok(_) => RequestOutcome::Success,
                Err(error) if error.is_sender_fault() => RequestOutcome::ClientError,
                Err(_) => RequestOutcome::ServerError,
            };
            metrics.observe_request(name, outcome, started.elapsed());
        }
        return Answer::Sqs(match result {
            Ok(outcome) => leaseq_sqs::encode(protocol, name, &outcome, &shape, &context),
            Err(error) => {
                if !error.is_sender_fault() {
                    tracing::error!(action = name, %error, "request failed on the server side");
                }
                leaseq_sqs::encode_error(protocol, &error, &context)
            }
        });
    }
}

/// A request's body, read whole, or `None` if it is longer than `limit` bytes or reading it
/// failed. The bytes `http_body_util`'s `collect` and `to_bytes` would give, without their list
/// of frames: a body that came in one frame (as a small request's does) is that frame, not a
/// copy; several are joined.
async fn read_body<RequestBody>(body: RequestBody, limit: usize) -> Option<Bytes>
where
    RequestBody: HttpBody<Data = Bytes, Error: Into<BoxError>>,
{
    let mut body = std::pin::pin!(Limited::new(body, limit));
    let mut whole = Bytes::new();
    let mut joined: Option<Vec<u8>> = None;
    while let Some(frame) = body.frame().await {
        // Trailers are no data (and `to_bytes` ignored them too).
        let Ok(data) = frame.ok()?.into_data() else {
            continue;
        };
        if let Some(joined) = &mut joined {
            joined.extend_from_slice(&data);
        } else if whole.is_empty() {
            whole = data;
        } else if !data.is_empty() {
            let mut both = Vec::with_capacity(whole.len() + data.len());
            both.extend_from_slice(&whole);
            both.extend_from_slice(&data);
            joined = Some(both);
        }
    }
    Some(joined.map_or(whole, Bytes::from))
}

/// The header of a response's request id, as the `sqs` crate names it.
const REQUEST_ID: HeaderName = HeaderName::from_static("x-amzn-requestid");

/// The request headers the SQS handler reads, each the first value of its name (what
/// `HeaderMap::get` answers), found in one pass over the request's headers.
///
/// Why one pass: a request has a handful of headers and the handler reads up to ten names
/// (some twice), and each `HeaderMap::get` hashes the name and probes the map: ~150
/// instructions a look-up, ~1,500 per request, where matching each header's name once costs a
/// few dozen.
#[derive(Default)]
pub(crate) struct RequestHeaders<'a> {
    host: Option<&'a [u8]>,
    target: Option<&'a [u8]>,
    content_type: Option<&'a [u8]>,
    trace_id: Option<&'a [u8]>,
    authorization: Option<&'a [u8]>,
    user_agent: Option<&'a [u8]>,
    forwarded_by: Option<&'a [u8]>,
    forwarded_for: Option<&'a [u8]>,
    forwarded_proto: Option<&'a [u8]>,
}

impl<'a> RequestHeaders<'a> {
    fn of(headers: &'a HeaderMap) -> RequestHeaders<'a> {
        let mut found = RequestHeaders::default();
        for (name, value) in headers {
            found.see(name.as_str().as_bytes(), value.as_bytes());
        }
        found
    }

    /// Notes a header if it is one the handler reads and the first of its name. Names match
    /// whatever their case (a `HeaderMap`'s are lowercase, a raw head's as the client wrote
    /// them); the test below checks these literals against the constants they stand for.
    pub(crate) fn see(&mut self, name: &[u8], value: &'a [u8]) {
        // By length first: most names are then compared with one literal, or none.
        let slot = match name.len() {
            4 if is_header_name(name, b"host") => &mut self.host,
            10 if is_header_name(name, b"user-agent") => &mut self.user_agent,
            12 if is_header_name(name, b"x-amz-target") => &mut self.target,
            12 if is_header_name(name, b"content-type") => &mut self.content_type,
            13 if is_header_name(name, b"authorization") => &mut self.authorization,
            15 if is_header_name(name, b"x-amzn-trace-id") => &mut self.trace_id,
            21 if is_header_name(name, b"x-leaseq-forwarded-by") => &mut self.forwarded_by,
            22 if is_header_name(name, b"x-leaseq-forwarded-for") => &mut self.forwarded_for,
            24 if is_header_name(name, b"x-leaseq-forwarded-proto") => &mut self.forwarded_proto,
            _ => return,
        };
        // A name's later values come after its first.
        if slot.is_none() {
            *slot = Some(value);
        }
    }
}

/// Whether a header's `name` is `lowercase` (a name written in lowercase), in whatever case it
/// came. Most clients (hyper, the AWS SDKs but Python's) write names in lowercase: their bytes
/// are equal at once, where a comparison that folds case looks at each byte in turn. The
/// literal's length is a constant, so that both comparisons compile to a few word compares
/// rather than calls.
#[inline(always)]
pub(crate) fn is_header_name<const N: usize>(name: &[u8], lowercase: &[u8; N]) -> bool {
    match <&[u8; N]>::try_from(name) {
        Ok(name) => name == lowercase || name.eq_ignore_ascii_case(lowercase),
        Err(_) => false,
    }
}

/// A header's value as text, when it is visible ASCII (what `HeaderValue::to_str` takes).
fn header_text(value: &[u8]) -> Option<&str> {
    if crate::http::h1::is_visible_ascii(value) {
        // SAFETY: the bytes are ASCII (checked just above), and ASCII is UTF-8. (`from_utf8`
        // would check them a second time: about 88 instructions for each of the two headers
        // every request reads this way.)
        Some(unsafe { std::str::from_utf8_unchecked(value) })
    } else {
        None
    }
}

/// The HTTP response of an encoded SQS response.
fn reply(response: leaseq_sqs::Response) -> Response {
    let status = StatusCode::from_u16(response.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let mut headers = HeaderMap::with_capacity(3);
    // The content type is one of the encoder's constants: no copy, no check of each byte.
    headers.insert(
        CONTENT_TYPE,
        HeaderValue::from_static(response.content_type),
    );
    for (name, value) in response.headers().skip(1) {
        // Every response has a request id; naming it by constant spares parsing the name.
        let name = match name {
            "x-amzn-requestid" => REQUEST_ID,
            name => HeaderName::from_static(name),
        };
        if let Ok(value) = HeaderValue::try_from(value) {
            headers.insert(name, value);
        }
    }
    let mut out = Response::new(Body::from(response.body));
    *out.status_mut() = status;
    *out.headers_mut() = headers;
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn response(content_type: &'static str, query_error: Option<&str>) -> leaseq_sqs::Response {
        leaseq_sqs::Response {
            status: 200,
            content_type,
            request_id: "req-1".into(),
            query_error: query_error.map(str::to_string),
            server_header: None,
            body: b"{}".to_vec(),
        }
    }

    /// Headers come out as the encoder wrote them; a value that is no header value is left
    /// out rather than sent.
    #[test]
    fn reply_keeps_the_encoders_headers() {
        let out = reply(response(
            leaseq_sqs::encode::JSON_CONTENT_TYPE,
            Some("AWS.SimpleQueueService.X;Sender"),
        ));
        let headers = out.headers();
        assert_eq!(headers[CONTENT_TYPE], "application/x-amz-json-1.0");
        assert_eq!(headers["x-amzn-requestid"], "req-1");
        assert_eq!(
            headers["x-amzn-query-error"],
            "AWS.SimpleQueueService.X;Sender"
        );
        assert_eq!(headers.len(), 3);
        let invalid = reply(response(
            leaseq_sqs::encode::JSON_CONTENT_TYPE,
            Some("a\nb"),
        ));
        assert!(!invalid.headers().contains_key("x-amzn-query-error"));
        assert_eq!(invalid.headers().len(), 2);
        let mut xml = response(leaseq_sqs::encode::XML_CONTENT_TYPE, None);
        xml.server_header = Some((forward::NOT_SERVING_NAME, "1"));
        let xml = reply(xml);
        assert_eq!(xml.headers()[CONTENT_TYPE], "text/xml");
        assert_eq!(xml.headers()[forward::NOT_SERVING], "1");
        assert_eq!(xml.headers().len(), 3);
    }

    /// A body of the frames given, then its end.
    struct Frames(std::collections::VecDeque<Result<hyper::body::Frame<Bytes>, std::io::Error>>);

    impl HttpBody for Frames {
        type Data = Bytes;
        type Error = std::io::Error;

        fn poll_frame(
            mut self: std::pin::Pin<&mut Self>,
            _: &mut std::task::Context<'_>,
        ) -> std::task::Poll<Option<Result<hyper::body::Frame<Bytes>, std::io::Error>>> {
            std::task::Poll::Ready(self.0.pop_front())
        }
    }

    fn data(text: &'static str) -> Result<hyper::body::Frame<Bytes>, std::io::Error> {
        Ok(hyper::body::Frame::data(Bytes::from_static(
            text.as_bytes(),
        )))
    }

    /// A body reads as its frames' data joined, whatever the frames, and not past the limit.
    #[tokio::test]
    async fn bodies_read_as_their_frames_joined() {
        let trailers = || Ok(hyper::body::Frame::trailers(HeaderMap::new()));
        let cases = [
            (vec![], ""),
            (vec![data("")], ""),
            (vec![data("one frame")], "one frame"),
            (
                vec![data(""), data("after an empty one")],
                "after an empty one",
            ),
            (vec![data("two "), data("frames")], "two frames"),
            (
                vec![data("three "), data(""), data("frames "), data("joined")],
                "three frames joined",
            ),
            (
                vec![data("with "), trailers(), data("trailers")],
                "with trailers",
            ),
        ];
        for (frames, expected) in cases {
            let read = read_body(Frames(frames.into()), 64).await;
            assert_eq!(read.as_deref(), Some(expected.as_bytes()));
        }
        let limited = |frames: Vec<_>| read_body(Frames(frames.into()), 5);
        assert_eq!(
            limited(vec![data("12345")]).await.as_deref(),
            Some(&b"12345"[..])
        );
        assert_eq!(limited(vec![data("123456")]).await, None);
        assert_eq!(limited(vec![data("123"), data("456")]).await, None);
        let reset = Err(std::io::Error::other("reset"));
        assert_eq!(limited(vec![data("some"), reset]).await, None);
    }

    /// Request ids are v4 UUIDs, distinct within a thread and across threads.
    #[test]
    fn request_ids_are_distinct_v4_uuids() {
        let mut seen = std::collections::HashSet::new();
        for _ in 0..10_000 {
            let id = request_id();
            let uuid = uuid::Uuid::parse_str(&id).unwrap();
            assert_eq!(uuid.get_version_num(), 4, "{id}");
            assert_eq!(uuid.get_variant(), uuid::Variant::RFC4122, "{id}");
            assert_eq!(uuid.hyphenated().to_string(), *id);
            assert!(seen.insert(id));
        }
        let others: Vec<Arc<str>> =
            std::thread::spawn(|| (0..1_000).map(|_| request_id()).collect())
                .join()
                .unwrap();
        for id in others {
            assert!(seen.insert(id));
        }
    }

    /// A remembered value is what the work gives for those very bytes: another value in
    /// between is worked out anew, and a value too long to keep is worked out every time.
    #[test]
    fn a_remembered_value_is_the_work_of_the_same_bytes() {
        thread_local! {
            static LAST: Remembered<String> = const { Remembered::new(None) };
        }
        let long = vec![b'x'; 600];
        let mut worked = Vec::new();
        let mut seen = Vec::new();
        for bytes in [&b"a"[..], b"a", b"b", b"a", &long, &long, b"", b""] {
            seen.push(remembered(&LAST, bytes, |bytes| {
                worked.push(bytes.len());
                String::from_utf8_lossy(bytes).into_owned()
            }));
        }
        assert_eq!(worked, vec![1, 1, 1, 600, 600, 0]);
        let texts: Vec<&str> = seen.iter().map(|text| &text[..text.len().min(2)]).collect();
        assert_eq!(texts, vec!["a", "a", "b", "a", "xx", "xx", "", ""]);
    }

    /// The facts of one host are never handed out for another, on one thread.
    #[test]
    fn host_facts_follow_the_host() {
        let region = |host: Option<&[u8]>| HostFacts::of(host).region.map(|r| r.to_string());
        let urls = |host: Option<&[u8]>| HostFacts::of(host).urls.map(|url| url.to_string());
        for _ in 0..2 {
            assert_eq!(
                region(Some(b"sqs.eu-west-1.amazonaws.com")).as_deref(),
                Some("eu-west-1")
            );
            assert_eq!(
                urls(Some(b"sqs.eu-west-1.amazonaws.com")),
                [
                    "http://sqs.eu-west-1.amazonaws.com",
                    "https://sqs.eu-west-1.amazonaws.com"
                ]
            );
            assert_eq!(region(Some(b"localhost:9324")), None);
            assert_eq!(
                urls(Some(b"localhost:9324")),
                ["http://localhost:9324", "https://localhost:9324"]
            );
            assert_eq!(
                region(Some(b"sqs.ap-south-1.localhost.localstack.cloud:4566")).as_deref(),
                Some("ap-south-1")
            );
            // Without a host that is text, queue URLs are on `localhost`.
            for host in [None, Some(&b""[..]), Some(&b"bad\x01host"[..])] {
                assert_eq!(urls(host), ["http://localhost", "https://localhost"]);
            }
        }
    }

    /// The sender id is the credential's key id, wherever the header puts it, whatever
    /// follows it; else the account id.
    #[test]
    fn the_sender_id_is_the_credentials_key_id() {
        let account: Arc<str> = "000000000000".into();
        let of = |authorization: &[u8]| {
            let found = RequestHeaders {
                authorization: Some(authorization),
                ..RequestHeaders::default()
            };
            sender_id(&found, &account).to_string()
        };
        let standard = b"AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20240101/us-east-1/sqs/aws4_request,             SignedHeaders=host;x-amz-date, Signature=abc";
        assert_eq!(of(standard), "AKIDEXAMPLE");
        // What follows the key id is not read: not even bytes that are no text.
        let mut odd = standard.to_vec();
        odd.extend_from_slice(b"\x01\xff");
        assert_eq!(of(&odd), "AKIDEXAMPLE");
        assert_eq!(
            of(b"Other x=1, Credential=AKIDOTHER/20240101/us-east-1/sqs/aws4_request"),
            "AKIDOTHER"
        );
        assert_eq!(
            of(b"AWS4-HMAC-SHA256 Credential=AKID\x01/2024"),
            "000000000000"
        );
        assert_eq!(of(b"Bearer token"), "000000000000");
        assert_eq!(of(b""), "000000000000");
    }

    /// A raw head's names match whatever their case, and only the first value of a name counts.
    #[test]
    fn raw_header_names_match_in_any_case() {
        let mut found = RequestHeaders::default();
        for (name, value) in [
            ("X-AMZ-TARGET", "AmazonSQS.SendMessage"),
            ("x-amz-target", "AmazonSQS.ReceiveMessage"),
            ("Content-Type", "application/x-amz-json-1.0"),
            ("HoSt", "localhost:9324"),
            ("X-Leaseq-Forwarded-Proto", "https"),
            ("Host-Not", "no"),
        ] {
            found.see(name.as_bytes(), value.as_bytes());
        }
        assert_eq!(found.target, Some(&b"AmazonSQS.SendMessage"[..]));
        assert_eq!(found.content_type, Some(&b"application/x-amz-json-1.0"[..]));
        assert_eq!(found.host, Some(&b"localhost:9324"[..]));
        assert_eq!(found.forwarded_proto, Some(&b"https"[..]));
        assert_eq!(found.authorization, None);
    }

    /// One pass finds what `HeaderMap::get` finds for every name the handler reads: the first
    /// value of each, whatever else the request has, and nothing for names it lacks.
    #[test]
    fn request_headers_are_what_get_finds() {
        use axum::http::header::{AUTHORIZATION, HOST, USER_AGENT};
        let names = [
            HOST,
            HeaderName::from_static(leaseq_sqs::headers::TARGET),
            CONTENT_TYPE,
            HeaderName::from_static(leaseq_sqs::headers::TRACE_ID),
            AUTHORIZATION,
            USER_AGENT,
            forward::FORWARDED_BY,
            forward::FORWARDED_FOR,
            forward::FORWARDED_PROTO,
        ];
        let found_of = |found: &RequestHeaders<'_>| {
            let found: [Option<&[u8]>; 9] = [
                found.host,
                found.target,
                found.content_type,
                found.trace_id,
                found.authorization,
                found.user_agent,
                found.forwarded_by,
                found.forwarded_for,
                found.forwarded_proto,
            ];
            found.map(|value| value.map(|value| HeaderValue::from_bytes(value).unwrap()))
        };
        let mut headers = HeaderMap::new();
        assert_eq!(found_of(&RequestHeaders::of(&headers)), [const { None }; 9]);
        headers.append("x-other", HeaderValue::from_static("other"));
        for (i, name) in names.iter().enumerate() {
            headers.append(
                name.clone(),
                HeaderValue::from_str(&format!("first {i}")).unwrap(),
            );
            headers.append("x-between", HeaderValue::from_static("between"));
            headers.append(
                name.clone(),
                HeaderValue::from_str(&format!("second {i}")).unwrap(),
            );
            let expected = names.clone().map(|name| headers.get(name).cloned());
            assert_eq!(found_of(&RequestHeaders::of(&headers)), expected, "{i}");
        }
        for (i, name) in names.iter().enumerate() {
            assert_eq!(headers[name], format!("first {i}").as_str());
        }
    }
}
