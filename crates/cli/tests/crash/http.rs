//! A minimal SQS client for the crash test: AWS JSON 1.0 requests on one keep-alive HTTP/1.1
//! connection, and the one distinction the test needs: was the request *acknowledged* (a 200
//! whose body was read to the end), refused (any other status, fully read), or is its outcome
//! unknown (the connection broke, as it does when the server is killed mid-request)?

use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt as _, Empty, Full};
use hyper::client::conn::http1::SendRequest;
use hyper::Request;
use hyper_util::rt::TokioIo;
use serde_json::Value;

/// How long one request may take before the test calls the server hung. Generous: two shared
/// cores, and a long poll may take its wait time.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// Why a call did not succeed.
#[derive(Debug)]
pub enum CallError {
    /// The connection broke or could not be opened: the outcome is unknown.
    Connection(String),
    /// The server answered with an error: the request was refused.
    Status {
        status: u16,
        code: String,
        message: String,
    },
}

impl std::fmt::Display for CallError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CallError::Connection(reason) => write!(f, "connection: {reason}"),
            CallError::Status {
                status,
                code,
                message,
            } => write!(f, "HTTP {status} {code}: {message}"),
        }
    }
}

/// One keep-alive connection to a server.
pub struct Client {
    sender: SendRequest<Full<Bytes>>,
    host: String,
}

impl Client {
    pub async fn connect(addr: SocketAddr) -> Result<Client, CallError> {
        let broken = |error: std::io::Error| CallError::Connection(error.to_string());
        let stream = tokio::net::TcpStream::connect(addr).await.map_err(broken)?;
        stream.set_nodelay(true).map_err(broken)?;
        let (sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .map_err(|error| CallError::Connection(error.to_string()))?;
        // The connection's task ends when `sender` is dropped or the peer goes away.
        tokio::spawn(connection);
        Ok(Client {
            sender,
            host: addr.to_string(),
        })
    }

    /// Sends `action` with a JSON body; the JSON body of a 200 answer.
    pub async fn call(&mut self, action: &str, body: &Value) -> Result<Value, CallError> {
        match tokio::time::timeout(REQUEST_TIMEOUT, self.exchange(action, body)).await {
            Ok(result) => result,
            Err(_) => panic!("{action} took more than {REQUEST_TIMEOUT:?}: the server hangs"),
        }
    }

    async fn exchange(&mut self, action: &str, body: &Value) -> Result<Value, CallError> {
        let broken = |error: hyper::Error| CallError::Connection(error.to_string());
        self.sender.ready().await.map_err(broken)?;
        let request = Request::post("/")
            .header("host", &self.host)
            .header("content-type", "application/x-amz-json-1.0")
            .header("x-amz-target", format!("AmazonSQS.{action}"))
            .body(Full::new(Bytes::from(body.to_string())))
            .expect("a valid request");
        let response = self.sender.send_request(request).await.map_err(broken)?;
        let status = response.status().as_u16();
        // A body cut short by the kill is an error here, so a 200 counts only when read whole.
        let bytes = response
            .into_body()
            .collect()
            .await
            .map_err(broken)?
            .to_bytes();
        if status == 200 {
            return serde_json::from_slice(&bytes).map_err(|error| {
                // A whole 200 that does not parse is the server's bug, not a crash.
                panic!("{action}: 200 with a body that is not JSON ({error}): {bytes:?}")
            });
        }
        let error: Value = serde_json::from_slice(&bytes).unwrap_or_default();
        Err(CallError::Status {
            status,
            code: error["__type"].as_str().unwrap_or_default().to_owned(),
            message: error["message"].as_str().map_or_else(
                || String::from_utf8_lossy(&bytes).into_owned(),
                str::to_owned,
            ),
        })
    }
}

/// Whether `GET /health` answers 200 (on a connection of its own).
pub async fn healthy(addr: SocketAddr) -> bool {
    let Ok(stream) = tokio::net::TcpStream::connect(addr).await else {
        return false;
    };
    let Ok((mut sender, connection)) =
        hyper::client::conn::http1::handshake(TokioIo::new(stream)).await
    else {
        return false;
    };
    tokio::spawn(connection);
    let request = Request::get("/health")
        .header("host", addr.to_string())
        .body(Empty::<Bytes>::new())
        .expect("a valid request");
    matches!(sender.send_request(request).await, Ok(response) if response.status() == 200)
}
