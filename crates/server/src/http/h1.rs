//! The HTTP/1.1 fast path: the plain requests every SDK sends, answered without hyper.
//!
//! Why: a single-message request spent about as many instructions in hyper's connection loop
//! (its head parse into a `HeaderMap`, the body channel, the response's `HeaderMap` and its
//! encoding, a timer per request) as in everything leaseq does for it (issue 23, measured with
//! `scripts/callgrind-send.sh`). Here a connection reads its requests into one buffer, parses
//! each head once with `httparse` (what hyper uses too), hands the SQS handler the head's slices
//! and the body in place (or, when the body comes after its head, in a buffer of its own), and
//! writes the encoded answer into one reused buffer.
//!
//! What it serves: requests of HTTP/1.1, `GET` or `POST`, a request target in origin form made
//! of characters a `Uri` takes, a body announced by one `Content-Length` (or none), and no
//! `Transfer-Encoding`, `Expect`, `Upgrade`, or `Connection` other than `keep-alive` or `close`.
//! The first request that is anything else, or whose head is not valid, not complete within
//! [`HEAD_MAX`] bytes, or of more than [`HEADERS_MAX`] lines, hands the connection, with the
//! bytes read and not yet answered, to hyper for the rest of its life ([`Replay`]): hyper then
//! does what it always did (chunked bodies, `100 Continue`, HTTP/1.0, `400` and `431`). So this
//! path implements no part of HTTP that it could get wrong for an unusual client; it only
//! skips the general machinery for the usual one.
//!
//! The limits are hyper's, as the accept loop sets them ([`super::serve`]): a request's head must
//! arrive within `header_read_timeout` of the connection's start or of the previous answer (and
//! an idle keep-alive connection is closed after that long); a body is not timed; a stopping
//! server finishes the answer in progress and closes. Answers carry what hyper's carried:
//! `content-length` and `date`, and `connection: close` when the connection closes after it.

use std::future::{poll_fn, Future as _};
use std::io;
use std::mem::MaybeUninit;
use std::net::SocketAddr;
use std::pin::{pin, Pin};
use std::sync::OnceLock;
use std::task::{Context, Poll};
use std::time::{Duration, SystemTime};

use axum::body::{Body, Bytes};
use axum::extract::ConnectInfo;
use axum::http::{HeaderValue, Method, StatusCode};
use axum::response::Response;
use http_body_util::BodyExt as _;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt as _, ReadBuf};
use tokio::sync::oneshot;
use tokio::time::Instant;
use tower::ServiceExt as _;

use super::serve::{is_routed, App};
use super::{answer_sqs, forward, Answer, Head, RequestHeaders, Whole};
use crate::service::Api;

/// The most header lines a request may have here; one with more goes to hyper (which takes 100).
pub(super) const HEADERS_MAX: usize = 48;
/// The most bytes a request's head may take here; a longer one goes to hyper (whose limit is
/// about 400 KiB, answered with `431`).
pub(super) const HEAD_MAX: usize = 16 * 1024;
/// The connection's read and write buffers start at this size.
const BUFFER: usize = 8 * 1024;

/// How a connection's fast path ended.
pub(super) enum Ended<S> {
    /// The connection is closed (by the client, an error, the timeout, or a stop).
    Closed,
    /// A request this path does not serve: hyper serves the connection from here on.
    HandOff(Replay<S>),
}

/// Serves `stream`'s requests (from a client at `address`) until the connection closes, `stop`
/// fires (or its sender is dropped), or a request needs hyper.
pub(super) async fn serve<B: Api, S>(
    app: &App<B>,
    mut stream: S,
    address: SocketAddr,
    timeout: Duration,
    stop: &mut oneshot::Receiver<()>,
) -> Ended<S>
where
    S: AsyncRead + AsyncWrite + Unpin + Send,
{
    let node_id = app.shared.node_id.as_ref();
    // The read buffer holds the requests read and not yet answered; an answer is written into
    // `out`, which grows to the largest answer's size; `early` takes what comes while a request
    // is answered (see below). An idle connection holds no more than the read buffer.
    let mut read = Vec::with_capacity(BUFFER);
    let mut out = Vec::new();
    let mut early = Vec::new();
    // The header read timeout runs from here, and again from each answer's end. Its timer is
    // set once and moved only when it fires early (a request came meanwhile), not per request.
    let mut waiting_since = Instant::now();
    let mut deadline = pin!(tokio::time::sleep_until(waiting_since + timeout));
    loop {
        // A complete head, or more bytes.
        // Uninitialised: `httparse` writes only the lines it finds.
        let mut lines = [const { MaybeUninit::<httparse::Header<'_>>::uninit() }; HEADERS_MAX];
        let mut request = httparse::Request::new(&mut []);
        let parsed = httparse::ParserConfig::default().parse_request_with_uninit_headers(
            &mut request,
            &read,
            &mut lines,
        );
        match parsed {
            Ok(httparse::Status::Complete(head_len)) => {
                let Some(plain) = Plain::of(&request) else {
                    return Ended::HandOff(Replay::new(read, stream));
                };
                let total = head_len.saturating_add(plain.content_length);
                if plain.content_length > app.shared.config.request_body_max_bytes {
                    if plain.routed {
                        // The bound is the SQS API's; the router's routes have their own
                        // (axum's), as through hyper, which streams the body to them.
                        return Ended::HandOff(Replay::new(read, stream));
                    }
                    // Refused unread, as the limit promises; the unread body ends the connection.
                    let head = plain.head(&request);
                    let answer = answer_sqs(&app.shared, &head, None, Some(address)).await;
                    out.clear();
                    let _ = write_answer(&mut out, answer, node_id, true).await;
                    let _ = send(&mut stream, &out).await;
                    return Ended::Closed;
                }
                // The body: all in the read buffer when it came with the head; otherwise the
                // rest of it is read, untimed (as hyper does), into a buffer of its own. The
                // parsed head borrows the read buffer, and growing that would mean parsing the
                // head again (about 2,000 instructions, httparse's and the header scan's), for
                // every request of a client that writes the body apart from the head, as
                // Python's http.client (and so boto3) does.
                let body_in_read = read.len() >= total;
                let body_len = plain.content_length;
                let mut apart = Vec::new();
                if !body_in_read {
                    apart.reserve_exact(body_len);
                    apart.extend_from_slice(&read[head_len..]);
                    while apart.len() < body_len {
                        match poll_fn(|cx| poll_read(&mut stream, cx, &mut apart)).await {
                            Ok(0) | Err(_) => return Ended::Closed,
                            Ok(_) => {}
                        }
                    }
                }
                // The router's answers name no node (as through hyper, where only the SQS
                // handler adds it).
                let (routed, close) = (plain.routed, plain.close);
                let head = plain.head(&request);
                let body = if body_in_read {
                    &read[head_len..total]
                } else {
                    &apart[..body_len]
                };
                let answered = {
                    let mut answering = pin!(async {
                        if routed {
                            (route(app, &head, body, address).await, None)
                        } else {
                            let answer = answer_sqs(&app.shared, &head, Some(body), Some(address));
                            (answer.await, node_id)
                        }
                    });
                    // Meanwhile the connection is watched: a client that goes away (a long poll
                    // given up) takes its request with it, as with hyper. Bytes that come
                    // instead (the next request, pipelined) are kept, and the watch ends.
                    let mut watching = true;
                    poll_fn(|cx| {
                        if let Poll::Ready(answer) = answering.as_mut().poll(cx) {
                            return Poll::Ready(Some(answer));
                        }
                        if watching {
                            match poll_read(&mut stream, cx, &mut early) {
                                Poll::Ready(Ok(0) | Err(_)) => return Poll::Ready(None),
                                Poll::Ready(Ok(_)) => watching = false,
                                Poll::Pending => {}
                            }
                        }
                        Poll::Pending
                    })
                    .await
                };
                let Some((answer, node_id)) = answered else {
                    tracing::trace!(%address, "the client closed its connection before its answer");
                    return Ended::Closed;
                };
                out.clear();
                let close = close || stopped(stop);
                if write_answer(&mut out, answer, node_id, close)
                    .await
                    .is_err()
                    || send(&mut stream, &out).await.is_err()
                    || close
                {
                    return Ended::Closed;
                }
                // What came after the body (the next request, pipelined) is read next. Reads
                // into a body's own buffer stop at its capacity, the body's length, so they
                // leave what follows the body in the socket; should one take more, that is
                // the next request's start.
                if body_in_read {
                    read.drain(..total);
                } else {
                    read.clear();
                    read.extend_from_slice(&apart[body_len..]);
                }
                read.append(&mut early);
                // One large request or answer does not pin its buffer for the
                // connection's life.
                if out.capacity() > 4 * BUFFER {
                    out = Vec::new();
                }
                if read.capacity() > 4 * BUFFER && read.len() < BUFFER {
                    read.shrink_to(BUFFER);
                }
                waiting_since = Instant::now();
                continue;
            }
            Ok(httparse::Status::Partial) if read.len() < HEAD_MAX => {}
            // Not valid, too long, or too many lines: hyper answers it.
            _ => return Ended::HandOff(Replay::new(read, stream)),
        }
        // More of the head.
        if read.capacity() - read.len() < BUFFER / 4 {
            read.reserve(BUFFER);
        }
        let event = poll_fn(|cx| {
            if let Poll::Ready(result) = poll_read(&mut stream, cx, &mut read) {
                return Poll::Ready(Event::Read(result));
            }
            if Pin::new(&mut *stop).poll(cx).is_ready() {
                return Poll::Ready(Event::Stopped);
            }
            if deadline.as_mut().poll(cx).is_ready() {
                return Poll::Ready(Event::Late);
            }
            Poll::Pending
        })
        .await;
        match event {
            Event::Read(Ok(0) | Err(_)) | Event::Stopped => return Ended::Closed,
            Event::Read(Ok(_)) => {}
            Event::Late => {
                let due = waiting_since + timeout;
                if Instant::now() >= due {
                    tracing::trace!(%address, "no request header within header_read_timeout: closed");
                    return Ended::Closed;
                }
                deadline.as_mut().reset(due);
            }
        }
    }
}

/// What woke a connection waiting for a request's head.
enum Event {
    Read(io::Result<usize>),
    Stopped,
    Late,
}

/// Whether the server is stopping (without waiting).
fn stopped(stop: &mut oneshot::Receiver<()>) -> bool {
    !matches!(stop.try_recv(), Err(oneshot::error::TryRecvError::Empty))
}

/// Reads what is there into `buffer`'s spare capacity (which the caller made non-empty).
fn poll_read<S: AsyncRead + Unpin>(
    stream: &mut S,
    cx: &mut Context<'_>,
    buffer: &mut Vec<u8>,
) -> Poll<io::Result<usize>> {
    tokio_util::io::poll_read_buf(Pin::new(stream), cx, buffer)
}

/// What the fast path needs of a request it serves.
struct Plain<'h> {
    method: Method,
    path: &'h str,
    query: Option<&'h str>,
    target: &'h str,
    content_length: usize,
    /// `Connection: close`.
    close: bool,
    /// Its path is one the router serves (`/health`, the dashboard's, a cluster's bucket calls).
    routed: bool,
    /// The headers the handler reads, found in the same pass.
    found: RequestHeaders<'h>,
}

impl<'h> Plain<'h> {
    /// The request, if this path serves it (see the module's documentation).
    fn of(request: &httparse::Request<'_, 'h>) -> Option<Plain<'h>> {
        if request.version != Some(1) {
            return None;
        }
        let method = match request.method? {
            "POST" => Method::POST,
            "GET" => Method::GET,
            _ => return None,
        };
        let target = request.path?;
        if !target.starts_with('/') || !target.bytes().all(is_target_byte) {
            return None;
        }
        // A loop over the bytes, not `split_once`, whose searcher costs more to set up than
        // most targets (`/`) take to read.
        let (path, query) = match target.bytes().position(|byte| byte == b'?') {
            Some(at) => (&target[..at], Some(&target[at + 1..])),
            None => (target, None),
        };
        let mut content_length = None;
        let mut close = false;
        let mut found = RequestHeaders::default();
        for line in request.headers.iter() {
            let name = line.name.as_bytes();
            found.see(name, line.value);
            match name.len() {
                14 if super::is_header_name(name, b"content-length") => {
                    if content_length.is_some() {
                        return None;
                    }
                    content_length = Some(decimal(line.value)?);
                }
                10 if super::is_header_name(name, b"connection") => {
                    if line.value.eq_ignore_ascii_case(b"close") {
                        close = true;
                    } else if !line.value.eq_ignore_ascii_case(b"keep-alive") {
                        return None;
                    }
                }
                17 if super::is_header_name(name, b"transfer-encoding") => return None,
                6 if super::is_header_name(name, b"expect") => return None,
                7 if super::is_header_name(name, b"upgrade") => return None,
                _ => {}
            }
        }
        Some(Plain {
            routed: is_routed(path),
            method,
            path,
            query,
            target,
            content_length: content_length.unwrap_or(0),
            close,
            found,
        })
    }

    /// The head the handler reads.
    fn head<'a>(self, request: &'a httparse::Request<'_, 'h>) -> Head<'a>
    where
        'h: 'a,
    {
        Head {
            method: self.method,
            path: self.path,
            query: self.query,
            found: self.found,
            whole: Whole::Raw {
                target: self.target,
                headers: &*request.headers,
                built: OnceLock::new(),
            },
        }
    }
}

/// A `Content-Length` value: decimal digits only (RFC 9110 §8.6), of a size that fits.
fn decimal(value: &[u8]) -> Option<usize> {
    if value.is_empty() || value.len() > 12 {
        return None;
    }
    value.iter().try_fold(0usize, |n, &b| {
        b.is_ascii_digit().then(|| n * 10 + usize::from(b - b'0'))
    })
}

/// Whether `b` may appear in a request target this path serves: RFC 3986's unreserved and
/// reserved characters and `%` (which `Uri` takes in a path and a query). Anything else (a
/// space, a quote, a brace, a byte beyond ASCII) goes to hyper, which decides.
fn is_target_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric()
        || matches!(
            b,
            b'-' | b'.'
                | b'_'
                | b'~'
                | b':'
                | b'/'
                | b'?'
                | b'@'
                | b'!'
                | b'$'
                | b'&'
                | b'\''
                | b'('
                | b')'
                | b'*'
                | b'+'
                | b','
                | b';'
                | b'='
                | b'%'
        )
}

/// A request for one of the router's paths, through the router.
async fn route<B: Api>(app: &App<B>, head: &Head<'_>, body: &[u8], address: SocketAddr) -> Answer {
    let Whole::Raw {
        target, headers, ..
    } = head.whole
    else {
        unreachable!("the fast path's heads are raw");
    };
    let Some((uri, headers)) = super::build_parts(target, headers) else {
        // The fast path lets through only heads that `http` takes.
        return Answer::Http(status_only(StatusCode::BAD_REQUEST));
    };
    let mut request = axum::http::Request::new(Body::from(Bytes::copy_from_slice(body)));
    *request.method_mut() = head.method.clone();
    *request.uri_mut() = uri;
    *request.headers_mut() = headers;
    request.extensions_mut().insert(ConnectInfo(address));
    let router = app.router.clone();
    let response = router
        .oneshot(request)
        .await
        .unwrap_or_else(|never| match never {});
    // The router's answers are not SQS answers: no node header (as through hyper, where only
    // the SQS handler adds it).
    Answer::Http(response)
}

fn status_only(status: StatusCode) -> Response {
    let mut response = Response::new(Body::empty());
    *response.status_mut() = status;
    response
}

/// Writes `answer` into `out` as an HTTP/1.1 response naming `node_id` (unless it names a
/// peer), with `connection: close` when `close`. `Err` when an answer from elsewhere (a
/// peer's, passed on) fails while its body is read: the connection must then close without an
/// answer.
async fn write_answer(
    out: &mut Vec<u8>,
    answer: Answer,
    node_id: Option<&HeaderValue>,
    close: bool,
) -> Result<(), ()> {
    match answer {
        Answer::Sqs(response) => {
            status_line(out, response.status);
            for (name, value) in response.headers() {
                // The content type is one of the encoder's constants and the request id a UUID
                // this server made (`http::request_id`), header values by making; the other
                // values are checked (as `HeaderValue` would).
                let made = matches!(name, "content-type" | "x-amzn-requestid");
                debug_assert!(
                    !made || is_header_value(value.as_bytes()),
                    "{name}: {value}"
                );
                if made || is_header_value(value.as_bytes()) {
                    header(out, name.as_bytes(), value.as_bytes());
                }
            }
            if let Some(node_id) = node_id {
                header(out, forward::NODE.as_str().as_bytes(), node_id.as_bytes());
            }
            framing(out, response.body.len(), close, true);
            out.extend_from_slice(&response.body);
        }
        Answer::Http(response) => {
            let (parts, body) = response.into_parts();
            let body = body.collect().await.map_err(|_| ())?.to_bytes();
            status_line(out, parts.status.as_u16());
            for (name, value) in &parts.headers {
                // The framing is this connection's own.
                if !matches!(
                    name.as_str(),
                    "content-length" | "transfer-encoding" | "connection"
                ) {
                    header(out, name.as_str().as_bytes(), value.as_bytes());
                }
            }
            if let Some(node_id) = node_id.filter(|_| !parts.headers.contains_key(forward::NODE)) {
                header(out, forward::NODE.as_str().as_bytes(), node_id.as_bytes());
            }
            let date = !parts.headers.contains_key(axum::http::header::DATE);
            framing(out, body.len(), close, date);
            out.extend_from_slice(&body);
        }
    }
    Ok(())
}

fn status_line(out: &mut Vec<u8>, status: u16) {
    let status = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    out.extend_from_slice(b"HTTP/1.1 ");
    out.extend_from_slice(status.as_str().as_bytes());
    out.push(b' ');
    out.extend_from_slice(status.canonical_reason().unwrap_or("").as_bytes());
    out.extend_from_slice(b"\r\n");
}

fn header(out: &mut Vec<u8>, name: &[u8], value: &[u8]) {
    out.extend_from_slice(name);
    out.extend_from_slice(b": ");
    out.extend_from_slice(value);
    out.extend_from_slice(b"\r\n");
}

/// The headers every answer ends with (`date` unless it has one), and the blank line.
fn framing(out: &mut Vec<u8>, body_len: usize, close: bool, date: bool) {
    if close {
        header(out, b"connection", b"close");
    }
    out.extend_from_slice(b"content-length: ");
    out.extend_from_slice(itoa::Buffer::new().format(body_len).as_bytes());
    out.extend_from_slice(b"\r\n");
    if date {
        out.extend_from_slice(b"date: ");
        http_date(out);
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(b"\r\n");
}

/// What `HeaderValue::from_bytes` takes: no control characters but tab.
///
/// Eight bytes at a time: a word with no byte below 0x20 and none equal to 0x7f passes in
/// about 10 instructions; one that has (a tab, or a control character) is looked at byte by
/// byte. The bytes after the last whole word are checked as the value's last eight (which
/// overlap the word before), or, in a value shorter than a word, padded with spaces.
fn is_header_value(value: &[u8]) -> bool {
    const ONES: u64 = u64::from_ne_bytes([0x01; 8]);
    const HIGH: u64 = u64::from_ne_bytes([0x80; 8]);
    let word_ok = |word: &[u8; 8]| {
        let w = u64::from_ne_bytes(*word);
        // Some byte below `n` (< 0x80) iff `(w - n·ONES) & !w & HIGH` is not zero: a byte from
        // 0x80 up has its high bit in `w`, and a borrow only starts at a byte below `n`.
        let below_space = w.wrapping_sub(ONES * 0x20) & !w & HIGH;
        let del = w ^ (ONES * 0x7f);
        let has_del = del.wrapping_sub(ONES) & !del & HIGH;
        below_space | has_del == 0 || word.iter().all(|&b| (b >= b' ' || b == b'\t') && b != 0x7f)
    };
    let (words, rest) = value.as_chunks::<8>();
    if !words.iter().all(word_ok) {
        return false;
    }
    match value.last_chunk::<8>() {
        Some(last) => rest.is_empty() || word_ok(last),
        None => {
            let mut padded = [b' '; 8];
            padded[..rest.len()].copy_from_slice(rest);
            word_ok(&padded)
        }
    }
}

/// What `HeaderValue::to_str` takes: visible ASCII and tabs, that is a header value (see
/// [`is_header_value`]) without the bytes from 0x80 up.
pub(crate) fn is_visible_ascii(value: &[u8]) -> bool {
    value.is_ascii() && is_header_value(value)
}

/// Today's date as an HTTP date (RFC 9110 §5.6.7), formatted once a second per thread (as
/// hyper caches it).
fn http_date(out: &mut Vec<u8>) {
    thread_local! {
        static LAST: std::cell::RefCell<(u64, String)> = const { std::cell::RefCell::new((0, String::new())) };
    }
    let second = crate::clock::now_ms() / 1000;
    LAST.with(|last| {
        let mut last = last.borrow_mut();
        if last.0 != second || last.1.is_empty() {
            let now = SystemTime::UNIX_EPOCH + Duration::from_secs(second);
            *last = (second, httpdate::fmt_http_date(now));
        }
        out.extend_from_slice(last.1.as_bytes());
    });
}

/// Writes all of `out` and flushes it (a TLS stream holds records back until then).
async fn send<S: AsyncWrite + Unpin>(stream: &mut S, out: &[u8]) -> io::Result<()> {
    stream.write_all(out).await?;
    stream.flush().await
}

/// A stream whose first bytes (read already) are replayed before the rest: what the fast path
/// hands hyper, and the HTTP/2 preface read ahead of hyper.
pub(super) struct Replay<S> {
    inner: S,
    read: Vec<u8>,
    /// How much of `read` has been replayed.
    replayed: usize,
}

impl<S> Replay<S> {
    pub(super) fn new(read: Vec<u8>, inner: S) -> Replay<S> {
        Replay {
            inner,
            read,
            replayed: 0,
        }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Replay<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        if self.replayed < self.read.len() {
            let rest = &self.read[self.replayed..];
            let n = rest.len().min(buf.remaining());
            buf.put_slice(&rest[..n]);
            self.replayed += n;
            if self.replayed == self.read.len() {
                self.read = Vec::new();
                self.replayed = 0;
            }
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Replay<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::Uri;
    use proptest::prelude::*;

    fn target_bytes() -> impl Strategy<Value = String> {
        let allowed: Vec<char> = (0u8..=255)
            .filter(|&b| is_target_byte(b))
            .map(char::from)
            .collect();
        proptest::collection::vec(proptest::sample::select(allowed), 0..200)
            .prop_map(|chars| format!("/{}", chars.into_iter().collect::<String>()))
    }

    proptest! {
        /// The byte checks answer as `HeaderValue` does: `from_bytes` for a value written out,
        /// `to_str` for one read as text.
        #[test]
        fn header_byte_checks_agree_with_header_value(
            value in prop_oneof![
                proptest::collection::vec(
                    prop_oneof![Just(b'\t'), Just(0x7f_u8), Just(b' '), any::<u8>()],
                    0..70,
                ),
                // Mostly visible text with a rare byte of each kind, anywhere in a long value
                // (the eight-byte words and the bytes after them).
                proptest::collection::vec(
                    prop_oneof![
                        40 => 0x20_u8..0x7f,
                        1 => Just(b'\t'),
                        1 => Just(0x7f_u8),
                        1 => 0x80_u8..=0xff,
                        1 => 0_u8..0x20,
                    ],
                    0..70,
                ),
            ]
        ) {
            let parsed = HeaderValue::from_bytes(&value);
            prop_assert_eq!(is_header_value(&value), parsed.is_ok());
            prop_assert_eq!(
                is_visible_ascii(&value),
                parsed.is_ok_and(|value| value.to_str().is_ok())
            );
        }

        /// Every target the fast path lets through is a `Uri` (what `Whole::parts` builds for
        /// SigV4, forwarding and the router), with the path and query the fast path split.
        #[test]
        fn targets_the_fast_path_takes_are_uris(target in target_bytes()) {
            let uri = Uri::try_from(target.as_str()).unwrap();
            let (path, query) = match target.split_once('?') {
                Some((path, query)) => (path, Some(query)),
                None => (target.as_str(), None),
            };
            prop_assert_eq!(uri.path(), path);
            prop_assert_eq!(uri.query(), query);
        }

        /// A `Content-Length` is its decimal digits, and nothing else is one.
        #[test]
        fn content_lengths_are_decimal_digits(value in "[0-9+ a-f-]{0,14}") {
            let expected = (!value.is_empty()
                && value.len() <= 12
                && value.bytes().all(|b| b.is_ascii_digit()))
            .then(|| value.parse::<usize>().unwrap());
            prop_assert_eq!(decimal(value.as_bytes()), expected);
        }
    }

    /// A replayed stream reads its first bytes, then the rest, however small the reads.
    #[tokio::test]
    async fn a_replay_reads_what_was_read_then_the_rest() {
        use tokio::io::AsyncReadExt as _;
        let rest: &[u8] = b" and the rest";
        let mut replay = Replay::new(b"read already".to_vec(), rest);
        let mut all = Vec::new();
        let mut byte = [0u8; 5];
        loop {
            let n = replay.read(&mut byte).await.unwrap();
            if n == 0 {
                break;
            }
            all.extend_from_slice(&byte[..n]);
        }
        assert_eq!(all, b"read already and the rest");
    }

    /// What the fast path serves, and what it leaves to hyper.
    #[test]
    fn plain_requests_are_the_fast_paths() {
        let plain = |head: &str| {
            let mut lines = [httparse::EMPTY_HEADER; HEADERS_MAX];
            let mut request = httparse::Request::new(&mut lines);
            // A head `httparse` refuses goes to hyper too.
            match request.parse(head.as_bytes()) {
                Ok(httparse::Status::Complete(_)) => {}
                _ => return None,
            }
            Plain::of(&request).map(|plain| (plain.content_length, plain.close, plain.routed))
        };
        let served = [
            (
                "POST / HTTP/1.1\r\nContent-Length: 12\r\n\r\n",
                (12, false, false),
            ),
            (
                "GET /000000000000/q?Action=SendMessage&MessageBody=a%20b HTTP/1.1\r\n\r\n",
                (0, false, false),
            ),
            (
                "POST / HTTP/1.1\r\nCONNECTION: Close\r\ncontent-length: 0\r\n\r\n",
                (0, true, false),
            ),
            (
                "POST / HTTP/1.1\r\nConnection: keep-alive\r\n\r\n",
                (0, false, false),
            ),
            ("GET /health HTTP/1.1\r\n\r\n", (0, false, true)),
            ("POST /_leaseq/bucket HTTP/1.1\r\n\r\n", (0, false, true)),
        ];
        for (head, expected) in served {
            assert_eq!(plain(head), Some(expected), "{head}");
        }
        let left = [
            "POST / HTTP/1.0\r\n\r\n",
            "PUT / HTTP/1.1\r\n\r\n",
            "HEAD / HTTP/1.1\r\n\r\n",
            "POST http://localhost/ HTTP/1.1\r\n\r\n",
            "POST * HTTP/1.1\r\n\r\n",
            "GET /a\"b HTTP/1.1\r\n\r\n",
            "GET /{q} HTTP/1.1\r\n\r\n",
            "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n",
            "POST / HTTP/1.1\r\nContent-Length: 5\r\nContent-Length: 5\r\n\r\n",
            "POST / HTTP/1.1\r\nContent-Length: +5\r\n\r\n",
            "POST / HTTP/1.1\r\nExpect: 100-continue\r\n\r\n",
            "GET / HTTP/1.1\r\nUpgrade: h2c\r\n\r\n",
            "GET / HTTP/1.1\r\nConnection: Upgrade\r\n\r\n",
            "GET / HTTP/1.1\r\nConnection: keep-alive, close\r\n\r\n",
        ];
        for head in left {
            assert_eq!(plain(head), None, "{head}");
        }
    }
}
