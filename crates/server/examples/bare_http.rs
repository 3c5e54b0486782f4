//! The bare-HTTP yardstick of BENCHMARKS.md: a hyper 1 HTTP/1.1 server (keep-alive) whose one
//! service reads the request's body and answers 200 with a short fixed body. It does what every
//! HTTP server must and nothing more, so its CPU per request is the floor under leaseq's.
//!
//! Usage: cargo run --release -p leaseq-server --example bare_http -- [127.0.0.1:PORT]
//! (default 127.0.0.1:8099); `scripts/bench-peers.sh` drives it with wrk and with Python.

use std::convert::Infallible;
use std::net::SocketAddr;

use http_body_util::{BodyExt as _, Full};
use hyper::body::{Bytes, Incoming};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use tokio::net::{TcpListener, TcpStream};

const DEFAULT_LISTEN: &str = "127.0.0.1:8099";

#[tokio::main]
async fn main() -> std::io::Result<()> {
    let listen: SocketAddr = std::env::args()
        .nth(1)
        .as_deref()
        .unwrap_or(DEFAULT_LISTEN)
        .parse()
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))?;
    let listener = TcpListener::bind(listen).await?;
    loop {
        let (stream, _) = listener.accept().await?;
        tokio::spawn(serve_connection(stream));
    }
}

/// Serves one keep-alive connection until the client closes it.
async fn serve_connection(stream: TcpStream) {
    let service = service_fn(answer);
    // A client that goes away mid-request is not an error worth reporting here.
    let _ = http1::Builder::new()
        .serve_connection(TokioIo::new(stream), service)
        .await;
}

/// Reads the whole body (as any real server must) and answers 200 "ok". A `CreateQueue` (AWS
/// JSON 1.0) is answered with a queue URL, so that `leaseq bench --workload w1` (which creates
/// its queue first and reads no more of a `SendMessage`'s answer than its status) can drive this
/// server too: the ceiling of any HTTP server under that generator (BENCHMARKS.md).
async fn answer(request: Request<Incoming>) -> Result<Response<Full<Bytes>>, Infallible> {
    let create = request
        .headers()
        .get("x-amz-target")
        .is_some_and(|target| target == "AmazonSQS.CreateQueue");
    let _ = request.into_body().collect().await;
    let body: &'static [u8] = if create {
        b"{\"QueueUrl\":\"http://127.0.0.1/000000000000/bare\"}"
    } else {
        b"ok\n"
    };
    Ok(Response::new(Full::new(Bytes::from_static(body))))
}
