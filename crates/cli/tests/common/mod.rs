//! Test harness for end-to-end tests: runs the real `leaseq` binary as a child process on a free
//! loopback port with a data directory of its own, and hands tests an `aws-sdk-sqs` client (AWS
//! JSON 1.0 over plain HTTP) and a raw HTTP helper for requests no SDK would send.
//!
//! Each test gets its own server, because an SDK client's connection pool belongs to the tokio
//! runtime that created it and every `#[tokio::test]` has its own runtime. A server starts in
//! milliseconds, so isolation costs next to nothing and tests cannot see each other's queues.

#![allow(dead_code)] // Each test binary uses its own subset of the helpers.

use std::collections::HashMap;
use std::net::{SocketAddr, TcpListener};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use aws_sdk_sqs::config::retry::RetryConfig;
use aws_sdk_sqs::config::{BehaviorVersion, Credentials, Region};
use aws_sdk_sqs::Client;
use md5::{Digest, Md5};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// How long a freshly spawned server may take to answer `GET /health`. Generous because CI runs
/// on two shared cores while the test binaries of the whole workspace compete for them.
const STARTUP_TIMEOUT: Duration = Duration::from_secs(20);

/// How many fresh ports to try when the one picked was taken between probing and binding.
const START_ATTEMPTS_MAX: usize = 5;

/// How long a raw HTTP exchange may take before the test calls the server hung.
const RAW_REQUEST_TIMEOUT: Duration = Duration::from_secs(15);

static NEXT_SERVER: AtomicU64 = AtomicU64::new(0);

/// A running `leaseq serve` child process; killed, and its data directory removed, on drop.
pub struct Server {
    child: Child,
    /// The address the server listens on.
    pub addr: SocketAddr,
    /// `http://127.0.0.1:PORT`, the SDK's endpoint.
    pub endpoint: String,
    /// An SDK client for this server, with retries off so every error surfaces as it was sent.
    pub client: Client,
    scratch_dir: PathBuf,
}

impl Server {
    /// Starts a server and waits until it answers `GET /health`.
    pub async fn start() -> Server {
        let scratch_dir = unique_scratch_dir();
        let (child, addr) = start_in(&scratch_dir, "server").await;
        let endpoint = format!("http://{addr}");
        let client = sdk_client(&endpoint);
        Server {
            child,
            addr,
            endpoint,
            client,
            scratch_dir,
        }
    }

    /// Kills the server (SIGKILL: nothing is flushed on the way out) and starts it again on the
    /// same data directory, on a new port; `endpoint` and `client` follow.
    #[allow(dead_code)] // Not every test binary restarts its server.
    pub async fn restart(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        self.start_again().await;
    }

    /// Stops the server with SIGTERM (a graceful stop writes a checkpoint, so the next start
    /// recovers from a snapshot rather than by replaying the log) and starts it again on the same
    /// data directory, on a new port.
    #[allow(dead_code)] // Not every test binary restarts its server.
    pub async fn restart_gracefully(&mut self) {
        let status = Command::new("kill")
            .arg("-TERM")
            .arg(self.child.id().to_string())
            .status()
            .expect("running kill");
        assert!(status.success());
        let deadline = Instant::now() + Duration::from_secs(15);
        while self
            .child
            .try_wait()
            .expect("waiting for the server")
            .is_none()
        {
            assert!(
                Instant::now() < deadline,
                "no exit after SIGTERM: {}",
                self.log()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        self.start_again().await;
    }

    async fn start_again(&mut self) {
        let restarts = std::fs::read_dir(&self.scratch_dir)
            .map(|entries| entries.count())
            .unwrap_or(0);
        let (child, addr) = start_in(&self.scratch_dir, &format!("restart-{restarts}")).await;
        self.child = child;
        self.addr = addr;
        self.endpoint = format!("http://{addr}");
        self.client = sdk_client(&self.endpoint);
    }
}

/// Spawns a server on the data directory under `scratch_dir`, retrying on lost port races, and
/// waits until it is healthy.
async fn start_in(scratch_dir: &std::path::Path, log_name: &str) -> (Child, SocketAddr) {
    let mut last_log = String::new();
    for attempt in 0..START_ATTEMPTS_MAX {
        let addr = free_loopback_addr();
        let log_path = scratch_dir.join(format!("{log_name}-{attempt}.log"));
        let mut child = spawn_server(addr, &scratch_dir.join("data"), &log_path);
        match wait_for_health(addr, &mut child).await {
            Ok(()) => return (child, addr),
            Err(reason) => {
                let _ = child.kill();
                let _ = child.wait();
                last_log = std::fs::read_to_string(&log_path).unwrap_or_default();
                // Only a lost race for the port is worth another try.
                if !last_log.contains("in use") {
                    panic!("leaseq did not start ({reason}); its log:\n{last_log}");
                }
            }
        }
    }
    panic!("leaseq did not start after {START_ATTEMPTS_MAX} ports; last log:\n{last_log}");
}

impl Server {
    /// The server's log so far (stdout and stderr), for failure messages.
    pub fn log(&self) -> String {
        let mut text = String::new();
        if let Ok(entries) = std::fs::read_dir(&self.scratch_dir) {
            let mut paths: Vec<_> = entries.flatten().map(|entry| entry.path()).collect();
            paths.sort();
            for path in paths
                .iter()
                .filter(|p| p.extension().is_some_and(|e| e == "log"))
            {
                text.push_str(&std::fs::read_to_string(path).unwrap_or_default());
            }
        }
        text
    }

    /// Whether the child process is still running.
    pub fn is_running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// Sends one raw HTTP/1.1 request (see [`raw_request`]).
    pub async fn raw(
        &self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: &[u8],
    ) -> RawResponse {
        raw_request(self.addr, method, path, headers, body).await
    }

    /// Sends an AWS JSON 1.0 request for `action` with a raw body.
    pub async fn json(&self, action: &str, body: &[u8]) -> RawResponse {
        let target = format!("AmazonSQS.{action}");
        self.raw(
            "POST",
            "/",
            &[
                ("Content-Type", "application/x-amz-json-1.0"),
                ("X-Amz-Target", &target),
            ],
            body,
        )
        .await
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.scratch_dir);
    }
}

fn unique_scratch_dir() -> PathBuf {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or_default();
    let dir = std::env::temp_dir().join(format!(
        "leaseq-e2e-{}-{}-{nanos}",
        std::process::id(),
        NEXT_SERVER.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::create_dir_all(&dir).expect("creating the test's scratch directory");
    dir
}

/// A loopback port nobody listens on right now. Another process may take it before the server
/// binds it; [`Server::start`] then retries with a new one.
fn free_loopback_addr() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").expect("binding a probe socket");
    listener.local_addr().expect("probe socket address")
}

fn spawn_server(addr: SocketAddr, data_dir: &std::path::Path, log_path: &std::path::Path) -> Child {
    let log = std::fs::File::create(log_path).expect("creating the server log file");
    let log_err = log.try_clone().expect("cloning the log file handle");
    let mut command = Command::new(env!("CARGO_BIN_EXE_leaseq"));
    // Settings from the developer's environment must not leak into the server under test.
    for (name, _) in std::env::vars_os() {
        if name.to_string_lossy().starts_with("LEASEQ_") {
            command.env_remove(name);
        }
    }
    command
        .arg("serve")
        .arg("--listen")
        .arg(addr.to_string())
        .arg("--data-dir")
        .arg(data_dir)
        .env("RUST_BACKTRACE", "1")
        .stdin(Stdio::null())
        .stdout(log)
        .stderr(log_err)
        .spawn()
        .expect("spawning the leaseq binary")
}

async fn wait_for_health(addr: SocketAddr, child: &mut Child) -> Result<(), String> {
    let deadline = Instant::now() + STARTUP_TIMEOUT;
    loop {
        if let Ok(Some(status)) = child.try_wait() {
            return Err(format!("it exited with {status}"));
        }
        if let Ok(Ok(response)) = tokio::time::timeout(
            Duration::from_secs(2),
            try_raw_request(addr, "GET", "/health", &[], b""),
        )
        .await
        {
            if response.status == 200 {
                return Ok(());
            }
        }
        if Instant::now() > deadline {
            return Err(format!("no 200 from /health within {STARTUP_TIMEOUT:?}"));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// An SDK client that speaks plain HTTP to `endpoint`, without aws-config, TLS or retries.
pub fn sdk_client(endpoint: &str) -> Client {
    let http_client = aws_smithy_http_client::Builder::new().build_http();
    let config = aws_sdk_sqs::Config::builder()
        .endpoint_url(endpoint)
        .region(Region::new("us-east-1"))
        .credentials_provider(Credentials::new("test", "test", None, None, "static"))
        .behavior_version(BehaviorVersion::latest())
        .retry_config(RetryConfig::disabled())
        .http_client(http_client)
        .build();
    Client::from_conf(config)
}

/// A queue name unique to one test (and one server), so logs are easy to read.
pub fn queue_name(test: &str) -> String {
    format!("{test}-{}", NEXT_SERVER.fetch_add(1, Ordering::Relaxed))
}

/// An HTTP response read off a raw socket.
#[derive(Debug)]
pub struct RawResponse {
    pub status: u16,
    /// Header names in lower case.
    pub headers: HashMap<String, String>,
    pub body: Vec<u8>,
}

impl RawResponse {
    /// The body parsed as JSON; panics with the body text when it is not JSON.
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).unwrap_or_else(|error| {
            panic!(
                "response body is not JSON ({error}): status {}, body {:?}",
                self.status,
                String::from_utf8_lossy(&self.body)
            )
        })
    }

    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .get(&name.to_ascii_lowercase())
            .map(String::as_str)
    }

    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

/// Sends one HTTP/1.1 request with `Connection: close` over a fresh connection and reads the
/// whole response; panics if the server does not answer within [`RAW_REQUEST_TIMEOUT`].
pub async fn raw_request(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> RawResponse {
    match tokio::time::timeout(
        RAW_REQUEST_TIMEOUT,
        try_raw_request(addr, method, path, headers, body),
    )
    .await
    {
        Ok(Ok(response)) => response,
        Ok(Err(error)) => panic!("{method} {path}: {error}"),
        Err(_) => panic!("{method} {path}: no response within {RAW_REQUEST_TIMEOUT:?}"),
    }
}

/// The request is written by a separate task while this one reads, so a server that answers
/// early (say, to refuse an oversized body) is heard even though the body is still being sent;
/// write errors after such an answer are expected and ignored.
async fn try_raw_request(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> Result<RawResponse, String> {
    let stream = TcpStream::connect(addr)
        .await
        .map_err(|e| format!("connect: {e}"))?;
    let (mut reader, mut writer) = stream.into_split();
    let mut request = format!("{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n");
    for (name, value) in headers {
        request.push_str(&format!("{name}: {value}\r\n"));
    }
    request.push_str(&format!("Content-Length: {}\r\n\r\n", body.len()));
    let mut bytes = request.into_bytes();
    bytes.extend_from_slice(body);
    let writer_task = tokio::spawn(async move {
        let _ = writer.write_all(&bytes).await;
        let _ = writer.flush().await;
        // Keep the write half open until the server closes: dropping it would half-close.
        writer
    });
    let mut received = Vec::new();
    let mut chunk = vec![0u8; 64 * 1024];
    loop {
        match reader.read(&mut chunk).await {
            Ok(0) => break,
            Ok(n) => received.extend_from_slice(&chunk[..n]),
            // A reset after the answer (the server refusing to read the rest of a large body)
            // still leaves the answer in `received`.
            Err(_) if !received.is_empty() => break,
            Err(error) => return Err(format!("read: {error}")),
        }
    }
    writer_task.abort();
    parse_response(&received)
}

fn parse_response(bytes: &[u8]) -> Result<RawResponse, String> {
    let head_end = bytes
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or_else(|| {
            format!(
                "no complete response head in {:?}",
                String::from_utf8_lossy(bytes)
            )
        })?;
    let head = std::str::from_utf8(&bytes[..head_end]).map_err(|e| format!("head: {e}"))?;
    let mut lines = head.split("\r\n");
    let status_line = lines.next().unwrap_or_default();
    let status = status_line
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| format!("bad status line {status_line:?}"))?;
    let headers: HashMap<String, String> = lines
        .filter_map(|line| line.split_once(':'))
        .map(|(name, value)| (name.trim().to_ascii_lowercase(), value.trim().to_string()))
        .collect();
    let raw_body = &bytes[head_end + 4..];
    let body = if headers
        .get("transfer-encoding")
        .is_some_and(|v| v.eq_ignore_ascii_case("chunked"))
    {
        dechunk(raw_body)?
    } else if let Some(length) = headers.get("content-length") {
        let length: usize = length.parse().map_err(|_| "bad content-length")?;
        raw_body
            .get(..length)
            .ok_or_else(|| format!("body shorter than content-length {length}"))?
            .to_vec()
    } else {
        raw_body.to_vec()
    };
    Ok(RawResponse {
        status,
        headers,
        body,
    })
}

fn dechunk(mut bytes: &[u8]) -> Result<Vec<u8>, String> {
    let mut body = Vec::new();
    loop {
        let line_end = bytes
            .windows(2)
            .position(|w| w == b"\r\n")
            .ok_or("truncated chunk size")?;
        let size_text = std::str::from_utf8(&bytes[..line_end]).map_err(|e| e.to_string())?;
        let size = usize::from_str_radix(size_text.split(';').next().unwrap_or("").trim(), 16)
            .map_err(|e| format!("chunk size {size_text:?}: {e}"))?;
        bytes = &bytes[line_end + 2..];
        if size == 0 {
            return Ok(body);
        }
        body.extend_from_slice(bytes.get(..size).ok_or("truncated chunk")?);
        bytes = bytes.get(size + 2..).ok_or("truncated chunk end")?;
    }
}

/// Lower-case hex MD5 of `bytes`.
pub fn md5_hex(bytes: &[u8]) -> String {
    Md5::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// One message attribute as SQS hashes it.
pub enum AttributeValue<'a> {
    /// `String`, `Number` and their custom sub-types (transport type 1).
    Text(&'a str),
    /// `Binary` and its custom sub-types (transport type 2).
    Binary(&'a [u8]),
}

/// MD5OfMessageAttributes (and MD5OfMessageSystemAttributes), written here from SQS's
/// documented algorithm rather than taken from the server's code, so the two can disagree: for
/// each attribute in name order, the 4-byte big-endian length and bytes of the name, likewise the
/// data type, one transport byte (1 text, 2 binary), then the length and bytes of the value.
pub fn attributes_md5(attributes: &[(&str, &str, AttributeValue<'_>)]) -> String {
    fn put(buffer: &mut Vec<u8>, bytes: &[u8]) {
        buffer.extend_from_slice(&(bytes.len() as u32).to_be_bytes());
        buffer.extend_from_slice(bytes);
    }
    let mut sorted: Vec<_> = attributes.iter().collect();
    sorted.sort_by(|a, b| a.0.as_bytes().cmp(b.0.as_bytes()));
    let mut buffer = Vec::new();
    for (name, data_type, value) in sorted {
        put(&mut buffer, name.as_bytes());
        put(&mut buffer, data_type.as_bytes());
        match value {
            AttributeValue::Text(text) => {
                buffer.push(1);
                put(&mut buffer, text.as_bytes());
            }
            AttributeValue::Binary(bytes) => {
                buffer.push(2);
                put(&mut buffer, bytes);
            }
        }
    }
    md5_hex(&buffer)
}
