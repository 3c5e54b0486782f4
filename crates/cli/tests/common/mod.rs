//! What the `leaseq` binary's tests share, over `leaseq_testkit`: the real binary as a child
//! process on a free loopback port with a data directory of its own, with an `aws-sdk-sqs`
//! client (AWS JSON 1.0 over plain HTTP) and raw HTTP for requests no SDK would send.
//!
//! Each test gets its own server, because an SDK client's connection pool belongs to the tokio
//! runtime that created it and every `#[tokio::test]` has its own runtime. A server starts in
//! milliseconds, so isolation costs next to nothing and tests cannot see each other's queues.

#![allow(dead_code)] // Each test binary uses its own subset of the helpers.

use std::ffi::OsStr;
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Command, Output};

use aws_sdk_sqs::Client;
use leaseq_testkit::http;
use leaseq_testkit::launch::{ChildServer, ServeCommand};
use leaseq_testkit::names::ScratchDir;
use leaseq_testkit::sdk::sdk_client;

use leaseq_testkit::http::RawResponse;

/// `leaseq serve` of this package's binary.
pub fn serve_command() -> ServeCommand {
    ServeCommand::new(env!("CARGO_BIN_EXE_leaseq"))
}

/// This package's binary with none of the developer's `LEASEQ_*` variables, as
/// [`ServeCommand`] runs it: settings from the environment must not leak into a test.
pub fn leaseq_command() -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_leaseq"));
    for (name, _) in std::env::vars_os() {
        if name.to_string_lossy().starts_with("LEASEQ_") {
            command.env_remove(name);
        }
    }
    command
}

/// Runs `leaseq serve` with `args`, which must be refused before the server starts; returns
/// what it printed on stderr.
pub fn refused_serve<I, S>(args: I) -> String
where
    I: IntoIterator<Item = S>,
    S: AsRef<OsStr>,
{
    let output = leaseq_command().arg("serve").args(args).output().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert!(!output.status.success(), "{output:?}");
    stderr
}

/// Runs `leaseq healthcheck` against `endpoint` (5 s at the most); its output.
pub fn healthcheck(endpoint: &str) -> Output {
    healthcheck_with(endpoint, &[])
}

/// Runs `leaseq healthcheck` against `endpoint` with `args` too (5 s at the most); its output.
pub fn healthcheck_with(endpoint: &str, args: &[&OsStr]) -> Output {
    leaseq_command()
        .args(["healthcheck", "--endpoint", endpoint, "--timeout", "5"])
        .args(args)
        .output()
        .unwrap()
}

/// The crash tests' server on `data_dir`: `--fsync always`, so every acknowledged request is
/// on disk before its answer, and checkpoints often.
pub fn durable_serve(data_dir: &Path) -> ServeCommand {
    durable_serve_with(data_dir, "always")
}

/// [`durable_serve`] with another `--fsync` policy (`never`: every acknowledged request is
/// written to the operating system before its answer, which a kill -9 does not undo).
pub fn durable_serve_with(data_dir: &Path, fsync: &str) -> ServeCommand {
    serve_command()
        .args(["--fsync", fsync])
        .data_dir(data_dir)
        // A delete with a superseded receipt is refused instead of silently ignored, so every
        // acknowledged delete really deleted (or found the message already gone).
        .args(["--reject-stale-deletes", "true", "--log", "info"])
        // Checkpoints (snapshot + segment removal) often, so kills land in them too. An
        // environment variable, not a flag, so a binary without checkpoints ignores it.
        .env("LEASEQ_CHECKPOINT_BYTES", (256u64 << 10).to_string())
}

/// A schema of the machine's PostgreSQL (`LEASEQ_TEST_POSTGRES`, default
/// `host=127.0.0.1 user=postgres dbname=test`) for one test, dropped when it ends (stop the
/// servers that use it first: they hold locks on its tables).
pub struct PostgresSchema {
    /// The connection string.
    pub connection: String,
    /// The schema's name.
    pub schema: String,
}

impl PostgresSchema {
    /// Schema `schema`, emptied of what an earlier run left in it.
    pub fn new(schema: &str) -> PostgresSchema {
        let connection = std::env::var("LEASEQ_TEST_POSTGRES")
            .unwrap_or_else(|_| "host=127.0.0.1 user=postgres dbname=test".into());
        leaseq_postgres::drop_schema(&connection, schema).expect("PostgreSQL is reachable");
        PostgresSchema {
            connection,
            schema: schema.to_string(),
        }
    }
}

impl Drop for PostgresSchema {
    fn drop(&mut self) {
        let _ = leaseq_postgres::drop_schema(&self.connection, &self.schema);
    }
}

/// A running `leaseq serve` child process with its data and logs in a scratch directory of
/// its own; killed on drop, and the directory removed unless the test failed.
pub struct Server {
    process: ChildServer,
    /// The address the server listens on.
    pub addr: SocketAddr,
    /// `http://127.0.0.1:PORT`, the SDK's endpoint.
    pub endpoint: String,
    /// An SDK client for this server, with retries off so every error surfaces as it was sent.
    pub client: Client,
    // Dropped after `process`: the server is gone before its directory is removed.
    scratch: ScratchDir,
}

impl Server {
    /// Starts a server and waits until it answers `GET /health`.
    pub async fn start() -> Server {
        let scratch = ScratchDir::unique("leaseq-e2e");
        let command = serve_command().data_dir(&scratch.path().join("data"));
        let process = ChildServer::start(command, scratch.path()).await;
        let endpoint = process.endpoint();
        Server {
            addr: process.addr(),
            client: sdk_client(&endpoint),
            endpoint,
            process,
            scratch,
        }
    }

    /// Kills the server (SIGKILL: nothing is flushed on the way out) and starts it again on the
    /// same data directory, on a new port; `addr`, `endpoint` and `client` follow.
    pub async fn restart(&mut self) {
        self.process.restart().await;
        self.follow();
    }

    /// Stops the server with SIGTERM (a graceful stop writes a checkpoint, so the next start
    /// recovers from a snapshot rather than by replaying the log) and starts it again on the same
    /// data directory, on a new port.
    pub async fn restart_gracefully(&mut self) {
        self.process.restart_gracefully().await;
        self.follow();
    }

    fn follow(&mut self) {
        self.addr = self.process.addr();
        self.endpoint = self.process.endpoint();
        self.client = sdk_client(&self.endpoint);
    }

    /// The server's log so far (stdout and stderr of every start), for failure messages.
    pub fn log(&self) -> String {
        self.process.logs()
    }

    /// Whether the child process is still running.
    pub fn is_running(&mut self) -> bool {
        self.process.is_running()
    }

    /// Sends one raw HTTP/1.1 request (see [`http::request`]).
    pub async fn raw(
        &self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: &[u8],
    ) -> RawResponse {
        http::request(self.addr, method, path, headers, body).await
    }

    /// Sends an AWS JSON 1.0 request for `action` with a raw body.
    pub async fn json(&self, action: &str, body: &[u8]) -> RawResponse {
        let target = http::target(action);
        self.raw("POST", "/", &http::json_headers(&target), body)
            .await
    }
}
