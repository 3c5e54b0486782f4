//! A minimal SQS client for the generator: AWS JSON 1.0 requests on one keep-alive HTTP/1.1
//! connection (plain, or TLS for an `https://` endpoint), one request in flight at a time.
//!
//! It is deliberately not an SDK: no signing (the Authorization header is a fixed unsigned
//! SigV4-shaped string, which emulators accept and some read the region from), no retries, no
//! checksum checks, so that the generator spends as little CPU per request as it can.

use std::collections::BTreeMap;
use std::fmt;
use std::path::Path;
use std::sync::Arc;

use anyhow::{bail, Context as _};
use bytes::Bytes;
use http_body_util::{BodyExt as _, Full};
use hyper::client::conn::http1::SendRequest;
use hyper::header::{HeaderValue, AUTHORIZATION, CONTENT_TYPE, HOST};
use hyper::{Request, Uri};
use hyper_util::rt::TokioIo;
use leaseq_sqs::encode::json_string;
use rustls_pki_types::ServerName;
use serde::de::IgnoredAny;
use serde::{Deserialize, Serialize};

/// The SQS actions the generator calls.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Action {
    CreateQueue,
    DeleteQueue,
    SendMessage,
    SendMessageBatch,
    ReceiveMessage,
    DeleteMessageBatch,
}

impl Action {
    /// The actions whose latency is measured, in report order.
    pub const MEASURED: [Action; 4] = [
        Action::SendMessage,
        Action::SendMessageBatch,
        Action::ReceiveMessage,
        Action::DeleteMessageBatch,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Action::CreateQueue => "CreateQueue",
            Action::DeleteQueue => "DeleteQueue",
            Action::SendMessage => "SendMessage",
            Action::SendMessageBatch => "SendMessageBatch",
            Action::ReceiveMessage => "ReceiveMessage",
            Action::DeleteMessageBatch => "DeleteMessageBatch",
        }
    }

    fn target(self) -> &'static str {
        match self {
            Action::CreateQueue => "AmazonSQS.CreateQueue",
            Action::DeleteQueue => "AmazonSQS.DeleteQueue",
            Action::SendMessage => "AmazonSQS.SendMessage",
            Action::SendMessageBatch => "AmazonSQS.SendMessageBatch",
            Action::ReceiveMessage => "AmazonSQS.ReceiveMessage",
            Action::DeleteMessageBatch => "AmazonSQS.DeleteMessageBatch",
        }
    }
}

/// Where requests go, and the headers that are the same on every request.
pub struct Endpoint {
    /// `host:port`, to connect to and to send as the Host header.
    authority: String,
    host: HeaderValue,
    authorization: HeaderValue,
    /// For `https://`: the TLS client (HTTP/1.1 by ALPN) and the name the certificate must have.
    tls: Option<(tokio_rustls::TlsConnector, ServerName<'static>)>,
}

impl fmt::Debug for Endpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Endpoint")
            .field("authority", &self.authority)
            .field("tls", &self.tls.is_some())
            .finish_non_exhaustive()
    }
}

impl Endpoint {
    /// `ca_bundle`: the certificates an `https://` endpoint's chain must lead to.
    pub fn parse(
        endpoint: &str,
        region: &str,
        ca_bundle: Option<&Path>,
    ) -> anyhow::Result<Endpoint> {
        let uri: Uri = endpoint
            .parse()
            .with_context(|| format!("bad --endpoint {endpoint:?}"))?;
        let https = match uri.scheme_str() {
            Some("http") => false,
            Some("https") => true,
            Some(other) => bail!("--endpoint must be http:// or https://, not {other}://"),
            None => bail!("--endpoint needs a scheme, e.g. http://127.0.0.1:9324"),
        };
        if !matches!(uri.path(), "" | "/") {
            bail!("--endpoint must not have a path (got {})", uri.path());
        }
        let Some(authority) = uri.authority() else {
            bail!("--endpoint needs a host, e.g. http://127.0.0.1:9324");
        };
        let host = HeaderValue::from_str(authority.as_str())?;
        let port = authority.port_u16().unwrap_or(if https { 443 } else { 80 });
        let tls = match (https, ca_bundle) {
            (false, _) => None,
            (true, None) => bail!("an https:// --endpoint needs --ca-bundle (the server's CA)"),
            (true, Some(ca_bundle)) => {
                let name = crate::tls_client::server_name(authority.host())
                    .with_context(|| format!("bad host in --endpoint {endpoint:?}"))?;
                Some((crate::tls_client::connector(ca_bundle)?, name))
            }
        };
        let authorization = HeaderValue::from_str(&format!(
            "AWS4-HMAC-SHA256 Credential=leaseqbench/20240101/{region}/sqs/aws4_request, \
             SignedHeaders=content-type;host;x-amz-date;x-amz-target, Signature={}",
            "0".repeat(64)
        ))
        .context("bad --region")?;
        Ok(Endpoint {
            authority: format!("{}:{port}", authority.host()),
            host,
            authorization,
            tls,
        })
    }
}

/// HTTP/1.1 on `stream`, its connection driven by a task of its own (which ends when the
/// sender is dropped or the peer closes).
async fn handshake<S>(stream: S) -> Result<SendRequest<Full<Bytes>>, CallError>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let (sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|error| CallError::Connection(error.to_string()))?;
    tokio::spawn(connection);
    Ok(sender)
}

/// Why a call failed.
#[derive(Debug)]
pub enum CallError {
    /// The connection could not be opened or broke; the caller opens a new one.
    Connection(String),
    /// The server answered with a status other than 2xx. `code` is the JSON error's `__type`.
    Status {
        status: u16,
        code: String,
        message: String,
    },
    /// The server answered 2xx with a body this client cannot decode.
    Decode(String),
}

impl CallError {
    pub fn breaks_connection(&self) -> bool {
        matches!(self, CallError::Connection(_))
    }
}

impl fmt::Display for CallError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CallError::Connection(reason) => write!(f, "connection: {reason}"),
            CallError::Status {
                status,
                code,
                message,
            } => write!(f, "HTTP {status} {code}: {message}"),
            CallError::Decode(reason) => write!(f, "undecodable response: {reason}"),
        }
    }
}

impl std::error::Error for CallError {}

/// One keep-alive connection to the endpoint.
pub struct Connection {
    endpoint: Arc<Endpoint>,
    sender: SendRequest<Full<Bytes>>,
}

impl Connection {
    pub async fn open(endpoint: Arc<Endpoint>) -> Result<Connection, CallError> {
        let broken = |error: std::io::Error| CallError::Connection(error.to_string());
        let stream = tokio::net::TcpStream::connect(&endpoint.authority)
            .await
            .map_err(broken)?;
        // Requests are small and latency is measured: don't let Nagle hold them back.
        stream.set_nodelay(true).map_err(broken)?;
        let sender = match &endpoint.tls {
            None => handshake(stream).await?,
            Some((connector, name)) => {
                let stream = connector
                    .connect(name.clone(), stream)
                    .await
                    .map_err(broken)?;
                handshake(stream).await?
            }
        };
        Ok(Connection { endpoint, sender })
    }

    /// Waits until the connection can take a request; false if the server has closed it (as
    /// servers that do not keep connections alive do after every answer).
    pub async fn ready(&mut self) -> bool {
        self.sender.ready().await.is_ok()
    }

    /// Sends one request and returns the body of its 2xx answer.
    pub async fn call(&mut self, action: Action, body: Vec<u8>) -> Result<Bytes, CallError> {
        let broken = |error: hyper::Error| CallError::Connection(error.to_string());
        self.sender.ready().await.map_err(broken)?;
        let request = Request::post("/")
            .header(HOST, self.endpoint.host.clone())
            .header(CONTENT_TYPE, "application/x-amz-json-1.0")
            .header("x-amz-target", action.target())
            .header("x-amz-date", "20240101T000000Z")
            .header(AUTHORIZATION, self.endpoint.authorization.clone())
            .body(Full::new(Bytes::from(body)))
            .map_err(|error| CallError::Connection(error.to_string()))?;
        let response = self.sender.send_request(request).await.map_err(broken)?;
        let status = response.status();
        let body = response
            .into_body()
            .collect()
            .await
            .map_err(broken)?
            .to_bytes();
        if status.is_success() {
            return Ok(body);
        }
        let error: ErrorBody = serde_json::from_slice(&body).unwrap_or_default();
        Err(CallError::Status {
            status: status.as_u16(),
            code: error.code.unwrap_or_default(),
            message: error
                .message
                .unwrap_or_else(|| String::from_utf8_lossy(&body).into_owned()),
        })
    }

    pub async fn create_queue(
        &mut self,
        name: &str,
        attributes: &[(String, String)],
    ) -> Result<String, CallError> {
        #[derive(Serialize)]
        #[serde(rename_all = "PascalCase")]
        struct CreateQueue<'a> {
            queue_name: &'a str,
            #[serde(skip_serializing_if = "BTreeMap::is_empty")]
            attributes: BTreeMap<&'a str, &'a str>,
        }
        #[derive(Deserialize)]
        #[serde(rename_all = "PascalCase")]
        struct Created {
            queue_url: String,
        }
        let body = encode(&CreateQueue {
            queue_name: name,
            attributes: attributes
                .iter()
                .map(|(name, value)| (name.as_str(), value.as_str()))
                .collect(),
        });
        let created: Created = decode(&self.call(Action::CreateQueue, body).await?)?;
        Ok(created.queue_url)
    }

    pub async fn delete_queue(&mut self, queue_url: &str) -> Result<(), CallError> {
        let body = encode(&QueueOnly { queue_url });
        self.call(Action::DeleteQueue, body).await.map(drop)
    }
}

#[derive(Serialize)]
#[serde(rename_all = "PascalCase")]
struct QueueOnly<'a> {
    queue_url: &'a str,
}

#[derive(Deserialize, Default)]
struct ErrorBody {
    #[serde(rename = "__type")]
    code: Option<String>,
    #[serde(alias = "Message")]
    message: Option<String>,
}

/// Request bodies.
#[derive(Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct SendMessage<'a> {
    pub queue_url: &'a str,
    pub message_body: &'a str,
    #[serde(flatten)]
    pub fifo: Option<FifoFields>,
}

/// Group and deduplication id of a message to a FIFO queue, or the group (tenant) alone of a
/// message to a standard queue.
#[derive(Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct FifoFields {
    pub message_group_id: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message_deduplication_id: Option<String>,
}

#[derive(Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct SendMessageBatch<'a> {
    pub queue_url: &'a str,
    pub entries: Vec<SendEntry<'a>>,
}

#[derive(Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct SendEntry<'a> {
    pub id: &'static str,
    pub message_body: &'a str,
    #[serde(flatten)]
    pub fifo: Option<FifoFields>,
}

impl SendMessage<'_> {
    /// The request's body: what `encode` writes (serde_json), written directly. serde_json
    /// escapes a string a byte at a time: about 2,400 instructions for a 256-byte body, more
    /// than the server spends on the whole request's JSON (callgrind of the generator).
    pub fn json(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.message_body.len() + self.queue_url.len() + 64);
        out.extend_from_slice(b"{\"QueueUrl\":");
        json_string(self.queue_url, &mut out);
        write_message(self.message_body, self.fifo.as_ref(), &mut out);
        out.push(b'}');
        out
    }
}

impl SendMessageBatch<'_> {
    /// The request's body, as [`SendMessage::json`] writes one.
    pub fn json(&self) -> Vec<u8> {
        let bodies: usize = self
            .entries
            .iter()
            .map(|entry| entry.message_body.len())
            .sum();
        let mut out = Vec::with_capacity(bodies + self.queue_url.len() + 64 * self.entries.len());
        out.extend_from_slice(b"{\"QueueUrl\":");
        json_string(self.queue_url, &mut out);
        out.extend_from_slice(b",\"Entries\":[");
        for (at, entry) in self.entries.iter().enumerate() {
            if at > 0 {
                out.push(b',');
            }
            out.extend_from_slice(b"{\"Id\":");
            json_string(entry.id, &mut out);
            write_message(entry.message_body, entry.fifo.as_ref(), &mut out);
            out.push(b'}');
        }
        out.extend_from_slice(b"]}");
        out
    }
}

/// A message's members after another member: its body, then its group and deduplication ids.
fn write_message(body: &str, fifo: Option<&FifoFields>, out: &mut Vec<u8>) {
    out.extend_from_slice(b",\"MessageBody\":");
    json_string(body, out);
    if let Some(fifo) = fifo {
        out.extend_from_slice(b",\"MessageGroupId\":");
        json_string(&fifo.message_group_id, out);
        if let Some(id) = &fifo.message_deduplication_id {
            out.extend_from_slice(b",\"MessageDeduplicationId\":");
            json_string(id, out);
        }
    }
}

#[derive(Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct ReceiveMessage<'a> {
    pub queue_url: &'a str,
    pub max_number_of_messages: usize,
    pub wait_time_seconds: u32,
}

#[derive(Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct DeleteMessageBatch<'a> {
    pub queue_url: &'a str,
    pub entries: Vec<DeleteEntry<'a>>,
}

#[derive(Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct DeleteEntry<'a> {
    pub id: &'static str,
    pub receipt_handle: &'a str,
}

/// Response bodies, reduced to what the generator looks at.
#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct Received {
    #[serde(default)]
    pub messages: Vec<ReceivedMessage>,
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct ReceivedMessage {
    pub receipt_handle: String,
    pub body: String,
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct BatchResult {
    #[serde(default)]
    pub successful: Vec<IgnoredAny>,
    #[serde(default)]
    pub failed: Vec<BatchFailure>,
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct BatchFailure {
    #[serde(default)]
    pub code: String,
    #[serde(default)]
    pub message: String,
}

/// Batch entry ids: SQS wants them distinct within a request.
pub const ENTRY_IDS: [&str; 10] = ["0", "1", "2", "3", "4", "5", "6", "7", "8", "9"];

pub fn encode<T: Serialize>(request: &T) -> Vec<u8> {
    // Serializing these plain structs to a Vec cannot fail.
    serde_json::to_vec(request).expect("request bodies serialize")
}

pub fn decode<'a, T: Deserialize<'a>>(body: &'a [u8]) -> Result<T, CallError> {
    serde_json::from_slice(body).map_err(|error| CallError::Decode(error.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fifo(dedup: Option<&str>) -> Option<FifoFields> {
        Some(FifoFields {
            message_group_id: "g\"1".into(),
            message_deduplication_id: dedup.map(str::to_owned),
        })
    }

    /// The send requests written directly are what serde_json writes of the same structs, for
    /// bodies plain and not (quotes, backslashes, control and non-ASCII characters), with and
    /// without FIFO fields.
    #[test]
    fn send_requests_are_what_serde_json_writes() {
        let url = "http://127.0.0.1:9324/000000000000/q";
        let bodies = [
            "",
            "plain",
            "a \"quoted\" \\ body\n\t\u{1}",
            "ünïcode ☃ \u{7f}",
            &"x".repeat(300),
        ];
        for body in bodies {
            for fifo in [None, fifo(None), fifo(Some("d\\1"))] {
                let send = SendMessage {
                    queue_url: url,
                    message_body: body,
                    fifo,
                };
                assert_eq!(
                    String::from_utf8(send.json()).unwrap(),
                    String::from_utf8(encode(&send)).unwrap()
                );
            }
        }
        let entries = bodies
            .iter()
            .zip(ENTRY_IDS)
            .enumerate()
            .map(|(at, (body, id))| SendEntry {
                id,
                message_body: body,
                fifo: [None, fifo(None), fifo(Some("d"))][at % 3].take(),
            })
            .collect();
        let batch = SendMessageBatch {
            queue_url: url,
            entries,
        };
        assert_eq!(
            String::from_utf8(batch.json()).unwrap(),
            String::from_utf8(encode(&batch)).unwrap()
        );
        let empty = SendMessageBatch {
            queue_url: url,
            entries: Vec::new(),
        };
        assert_eq!(empty.json(), encode(&empty));
    }
}
