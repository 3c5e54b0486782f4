//! Raw HTTP to a server under test, for what the SDK does not send or does not show: status
//! lines, headers, bodies that are not valid SQS, keep-alive, early answers.
//!
//! Well-formed requests go through hyper's client, on a fresh connection ([`request`]) or on a
//! kept-alive one ([`Connection`]). Bytes that need not be HTTP at all, or a request whose
//! answer comes before its body is sent (a refused oversized body), go through [`send_bytes`],
//! whose answer is parsed with `httparse`. Nothing here parses HTTP by hand.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt as _, Full};
use hyper::client::conn::http1::SendRequest;
use hyper::Request;
use hyper_util::rt::TokioIo;
use serde_json::Value;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpStream;
use tokio::task::JoinHandle;

/// How long one exchange may take before the test calls the server hung. Generous: two shared
/// cores, and a long poll may take its whole wait time (20 s at most).
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// An HTTP response, read whole.
#[derive(Debug)]
pub struct RawResponse {
    /// The status code.
    pub status: u16,
    /// The headers, names in lower case.
    pub headers: HashMap<String, String>,
    /// The body, de-chunked.
    pub body: Vec<u8>,
}

impl RawResponse {
    /// The body parsed as JSON; panics with the body text when it is not JSON.
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or_else(|error| {
            panic!(
                "response body is not JSON ({error}): status {}, body {:?}",
                self.status,
                String::from_utf8_lossy(&self.body)
            )
        })
    }

    /// The value of header `name` (any case).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .get(&name.to_ascii_lowercase())
            .map(String::as_str)
    }

    /// The body as text (lossy).
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

/// The headers of an AWS JSON 1.0 request for `action`, given its `X-Amz-Target` value
/// (`AmazonSQS.{action}`, see [`target`]).
pub fn json_headers(target: &str) -> [(&str, &str); 2] {
    [
        ("Content-Type", "application/x-amz-json-1.0"),
        ("X-Amz-Target", target),
    ]
}

/// The `X-Amz-Target` of SQS action `action`.
pub fn target(action: &str) -> String {
    format!("AmazonSQS.{action}")
}

/// Why an exchange or an SQS call did not succeed.
#[derive(Debug)]
pub enum CallError {
    /// The connection broke or could not be opened: the outcome is unknown.
    Connection(String),
    /// No whole answer came within the bound of [`Connection::send_within`]: the outcome is
    /// unknown, and the connection is no longer usable (the answer may still come on it).
    NoAnswer(Duration),
    /// The server answered an SQS call with an error: the request was refused.
    Status {
        /// The HTTP status.
        status: u16,
        /// The error's `__type`.
        code: String,
        /// The error's `message`, or the whole body if it has none.
        message: String,
    },
}

impl std::fmt::Display for CallError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CallError::Connection(reason) => write!(f, "connection: {reason}"),
            CallError::NoAnswer(bound) => write!(f, "no answer within {bound:?}"),
            CallError::Status {
                status,
                code,
                message,
            } => write!(f, "HTTP {status} {code}: {message}"),
        }
    }
}

/// One kept-alive HTTP/1.1 connection, through hyper's client.
pub struct Connection {
    sender: SendRequest<Full<Bytes>>,
    /// The `Host` header sent unless a request names its own.
    host: String,
    /// This end's address, as the server sees the client.
    local: SocketAddr,
    /// Hyper's connection task: it ends when the server closes the connection.
    driver: JoinHandle<()>,
}

impl Connection {
    /// Opens a connection to `addr`.
    pub async fn connect(addr: SocketAddr) -> Result<Connection, CallError> {
        let broken = |error: std::io::Error| CallError::Connection(error.to_string());
        let stream = TcpStream::connect(addr).await.map_err(broken)?;
        stream.set_nodelay(true).map_err(broken)?;
        let local = stream.local_addr().map_err(broken)?;
        let (sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .map_err(|error| CallError::Connection(error.to_string()))?;
        let driver = tokio::spawn(async move {
            let _ = connection.await;
        });
        Ok(Connection {
            sender,
            host: addr.to_string(),
            local,
            driver,
        })
    }

    /// This end's address: what the server records as the client's.
    pub fn local_addr(&self) -> SocketAddr {
        self.local
    }

    /// Whether the connection is known to be closed (the server closed it, or it broke): a
    /// request sent on it would fail before reaching the server.
    pub fn is_closed(&self) -> bool {
        self.sender.is_closed() || self.driver.is_finished()
    }

    /// Sends one request and reads its whole response. A response cut short (the server
    /// killed mid-body) is an error, so an answer counts only when read to the end.
    pub async fn send(
        &mut self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: &[u8],
    ) -> Result<RawResponse, CallError> {
        let exchange = self.exchange(method, path, headers, body);
        match tokio::time::timeout(REQUEST_TIMEOUT, exchange).await {
            Ok(result) => result,
            Err(_) => panic!("{method} {path}: no response within {REQUEST_TIMEOUT:?}"),
        }
    }

    /// [`Connection::send`], except that an answer not read whole within `bound` is
    /// [`CallError::NoAnswer`] instead of a panic: for tests where a server may be paused or
    /// killed mid-request and the outcome is then recorded as unknown. Drop the connection after
    /// `NoAnswer`: its request may still be answered on it.
    pub async fn send_within(
        &mut self,
        bound: Duration,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: &[u8],
    ) -> Result<RawResponse, CallError> {
        let exchange = self.exchange(method, path, headers, body);
        tokio::time::timeout(bound, exchange)
            .await
            .unwrap_or(Err(CallError::NoAnswer(bound)))
    }

    async fn exchange(
        &mut self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: &[u8],
    ) -> Result<RawResponse, CallError> {
        let broken = |error: hyper::Error| CallError::Connection(error.to_string());
        self.sender.ready().await.map_err(broken)?;
        let mut request = Request::builder().method(method).uri(path);
        if !headers
            .iter()
            .any(|(name, _)| name.eq_ignore_ascii_case("host"))
        {
            request = request.header("host", &self.host);
        }
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        let request = request
            .body(Full::new(Bytes::copy_from_slice(body)))
            .unwrap_or_else(|error| panic!("{method} {path}: not a valid request: {error}"));
        let response = self.sender.send_request(request).await.map_err(broken)?;
        let status = response.status().as_u16();
        let headers = response
            .headers()
            .iter()
            .map(|(name, value)| {
                let value = String::from_utf8_lossy(value.as_bytes()).into_owned();
                (name.as_str().to_owned(), value)
            })
            .collect();
        let body = response.into_body().collect().await.map_err(broken)?;
        Ok(RawResponse {
            status,
            headers,
            body: body.to_bytes().to_vec(),
        })
    }

    /// Sends SQS action `action` with a JSON body (AWS JSON 1.0); the JSON body of a 200.
    /// Panics on a 200 whose body is not JSON: a whole answer that does not parse is the
    /// server's bug, not a broken connection.
    pub async fn call(&mut self, action: &str, body: &Value) -> Result<Value, CallError> {
        let target = target(action);
        let request = body.to_string();
        let response = self
            .send("POST", "/", &json_headers(&target), request.as_bytes())
            .await?;
        json_answer(action, &response)
    }

    /// Waits until the server has closed the connection.
    pub async fn closed(self) {
        let _ = self.driver.await;
    }
}

/// The JSON body of a 200 answer to SQS action `action` (AWS JSON 1.0), or the error a non-200
/// answer carries. Panics on a 200 whose body is not JSON: a whole answer that does not parse is
/// the server's bug, not a broken connection.
pub fn json_answer(action: &str, response: &RawResponse) -> Result<Value, CallError> {
    if response.status == 200 {
        return serde_json::from_slice(&response.body).map_err(|error| {
            panic!("{action}: 200 with a body that is not JSON ({error}): {response:?}")
        });
    }
    let error: Value = serde_json::from_slice(&response.body).unwrap_or_default();
    Err(CallError::Status {
        status: response.status,
        code: error["__type"].as_str().unwrap_or_default().to_owned(),
        message: error["message"]
            .as_str()
            .map_or_else(|| response.text(), str::to_owned),
    })
}

/// Sends one well-formed request on a fresh connection and reads the whole response; panics if
/// the server does not answer (within [`REQUEST_TIMEOUT`]).
pub async fn request(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> RawResponse {
    match try_request(addr, method, path, headers, body).await {
        Ok(response) => response,
        Err(error) => panic!("{method} {path}: {error}"),
    }
}

/// Sends SQS action `action` with JSON body `body` (AWS JSON 1.0) on a fresh connection; the
/// whole response, whatever its status.
pub async fn sqs_json(addr: SocketAddr, action: &str, body: &Value) -> RawResponse {
    let target = target(action);
    let body = body.to_string();
    request(addr, "POST", "/", &json_headers(&target), body.as_bytes()).await
}

/// [`request`], with a connection that fails as an error rather than a panic.
pub async fn try_request(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> Result<RawResponse, CallError> {
    let mut connection = Connection::connect(addr).await?;
    connection.send(method, path, headers, body).await
}

/// Whether `GET /health` answers 200 (on a connection of its own, within a second or two).
pub async fn healthy(addr: SocketAddr) -> bool {
    let health = try_request(addr, "GET", "/health", &[], b"");
    matches!(
        tokio::time::timeout(Duration::from_secs(2), health).await,
        Ok(Ok(response)) if response.status == 200
    )
}

/// The bytes of an HTTP/1.1 request with `Host: localhost`, `Connection: close`, `headers`
/// and a `Content-Length` for `body`: for [`send_bytes`], or to write on a socket by hand.
pub fn request_bytes(method: &str, path: &str, headers: &[(&str, &str)], body: &[u8]) -> Vec<u8> {
    let mut head = format!("{method} {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n");
    for (name, value) in headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    head.push_str(&format!("Content-Length: {}\r\n\r\n", body.len()));
    let mut bytes = head.into_bytes();
    bytes.extend_from_slice(body);
    bytes
}

/// Writes `bytes` as they are on a fresh connection and reads the answer until the server
/// closes it; panics if there is none within [`REQUEST_TIMEOUT`] or it is not HTTP.
///
/// The bytes are written by a task of their own while this one reads, so a server that answers
/// early (say, to refuse an oversized body) is heard even though the body is still being sent;
/// write errors after such an answer are expected and ignored.
pub async fn send_bytes(addr: SocketAddr, bytes: Vec<u8>) -> RawResponse {
    let exchange = async {
        let stream = TcpStream::connect(addr).await?;
        let (mut reader, mut writer) = stream.into_split();
        let writer_task = tokio::spawn(async move {
            let _ = writer.write_all(&bytes).await;
            let _ = writer.flush().await;
            // Keep the write half open until the server closes: dropping it would half-close.
            writer
        });
        let mut received = Vec::new();
        let read = reader.read_to_end(&mut received).await;
        writer_task.abort();
        match read {
            // A reset after the answer (the server refusing to read the rest of a large body)
            // still leaves the answer in `received`.
            Err(_) if !received.is_empty() => Ok(received),
            Err(error) => Err(error),
            Ok(_) => Ok(received),
        }
    };
    let received = match tokio::time::timeout(REQUEST_TIMEOUT, exchange).await {
        Ok(Ok(received)) => received,
        Ok(Err(error)) => panic!("raw request to {addr}: {error}"),
        Err(_) => panic!("raw request to {addr}: no response within {REQUEST_TIMEOUT:?}"),
    };
    parse_response(&received).unwrap_or_else(|error| {
        panic!(
            "raw request to {addr}: {error} in {:?}",
            String::from_utf8_lossy(&received)
        )
    })
}

/// A whole response as read off a connection the server closed.
fn parse_response(bytes: &[u8]) -> Result<RawResponse, String> {
    let mut header_slots = [httparse::EMPTY_HEADER; 64];
    let mut head = httparse::Response::new(&mut header_slots);
    let head_len = match head.parse(bytes).map_err(|error| error.to_string())? {
        httparse::Status::Complete(length) => length,
        httparse::Status::Partial => return Err("no complete response head".into()),
    };
    let status = head.code.ok_or("no status code")?;
    let headers: HashMap<String, String> = head
        .headers
        .iter()
        .map(|header| {
            let value = String::from_utf8_lossy(header.value).trim().to_owned();
            (header.name.to_ascii_lowercase(), value)
        })
        .collect();
    let rest = &bytes[head_len..];
    let chunked = headers
        .get("transfer-encoding")
        .is_some_and(|value| value.eq_ignore_ascii_case("chunked"));
    let body = if chunked {
        dechunk(rest)?
    } else if let Some(length) = headers.get("content-length") {
        let length: usize = length.parse().map_err(|_| "bad content-length")?;
        rest.get(..length)
            .ok_or_else(|| format!("body shorter than content-length {length}"))?
            .to_vec()
    } else {
        rest.to_vec()
    };
    Ok(RawResponse {
        status,
        headers,
        body,
    })
}

/// The body of a chunked transfer encoding, chunk sizes parsed by `httparse`.
fn dechunk(mut bytes: &[u8]) -> Result<Vec<u8>, String> {
    let mut body = Vec::new();
    loop {
        let (size_len, size) = match httparse::parse_chunk_size(bytes) {
            Ok(httparse::Status::Complete(parsed)) => parsed,
            Ok(httparse::Status::Partial) => return Err("truncated chunk size".into()),
            Err(error) => return Err(format!("bad chunk size: {error:?}")),
        };
        bytes = &bytes[size_len..];
        if size == 0 {
            return Ok(body);
        }
        let size = usize::try_from(size).map_err(|_| "chunk too large")?;
        body.extend_from_slice(bytes.get(..size).ok_or("truncated chunk")?);
        bytes = bytes
            .get(size..)
            .and_then(|rest| rest.strip_prefix(b"\r\n"))
            .ok_or("truncated chunk end")?;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_a_chunked_answer() {
        let answer = b"HTTP/1.1 413 Payload Too Large\r\nTransfer-Encoding: chunked\r\n\
                       X-Thing: a b \r\n\r\n5\r\nhello\r\n6;ext=1\r\n world\r\n0\r\n\r\n";
        let response = parse_response(answer).unwrap();
        assert_eq!(response.status, 413);
        assert_eq!(response.header("X-THING"), Some("a b"));
        assert_eq!(response.text(), "hello world");
    }

    #[test]
    fn parses_an_answer_with_a_length() {
        let answer = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nokEXTRA";
        let response = parse_response(answer).unwrap();
        assert_eq!((response.status, response.text().as_str()), (200, "ok"));
        assert!(parse_response(b"HTTP/1.1 200 OK\r\ncontent-length: 9\r\n\r\nok").is_err());
        assert!(parse_response(b"not http at all\r\n\r\n").is_err());
    }
}
