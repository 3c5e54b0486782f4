//! `leaseq healthcheck`: asks a running server whether it is ready (`GET /readyz`) and exits 0
//! if so, 1 if not or if it does not answer, for container images without curl
//! (`HEALTHCHECK CMD ["leaseq", "healthcheck"]`).
//!
//! It speaks plain HTTP only: when `--listen` is TLS, the admin listener (plain, on loopback
//! by default: `http://127.0.0.1:9325`) answers `/readyz` and `/livez` as well.

use std::time::Duration;

use anyhow::{bail, Context as _};
use clap::Args;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

/// Flags of `leaseq healthcheck`.
#[derive(Args, Debug)]
pub struct HealthcheckArgs {
    /// The server's address, `http://HOST:PORT` [default: http://127.0.0.1:9324]. When the
    /// SQS listener is TLS, ask the admin listener (`--admin-listen`, default
    /// http://127.0.0.1:9325), which answers the same probes.
    #[arg(long, env = "LEASEQ_ENDPOINT", default_value = "http://127.0.0.1:9324")]
    endpoint: String,
    /// The path asked: `/readyz` (ready for traffic) or `/livez` (the process answers).
    #[arg(long, default_value = "/readyz")]
    path: String,
    /// Seconds to wait for the answer.
    #[arg(long, default_value_t = 5)]
    timeout: u64,
}

/// Runs the check; an error (exit status 1) says why the server is not healthy.
pub fn run(args: HealthcheckArgs) -> anyhow::Result<()> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let timeout = Duration::from_secs(args.timeout);
    let answer = runtime.block_on(async {
        tokio::time::timeout(timeout, get(&args.endpoint, &args.path))
            .await
            .map_err(|_| anyhow::anyhow!("no answer within {} s", args.timeout))?
    })?;
    let (status, body) = answer;
    if status != 200 {
        bail!("{} answered {status}: {}", args.endpoint, body.trim());
    }
    println!("{}", body.trim());
    Ok(())
}

/// One HTTP/1.1 GET over plain TCP: the status and body.
async fn get(endpoint: &str, path: &str) -> anyhow::Result<(u16, String)> {
    if endpoint.starts_with("https://") {
        bail!(
            "--endpoint must be http://HOST:PORT: with TLS on the SQS listener, ask the admin \
             listener (admin_listen, by default http://127.0.0.1:9325), which answers /readyz \
             and /livez too"
        );
    }
    let Some(authority) = endpoint.strip_prefix("http://") else {
        bail!("--endpoint must be http://HOST:PORT, not {endpoint:?}");
    };
    let authority = authority.trim_end_matches('/');
    let mut stream = tokio::net::TcpStream::connect(authority)
        .await
        .with_context(|| format!("connecting to {authority}"))?;
    let request = format!("GET {path} HTTP/1.1\r\nHost: {authority}\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await?;
    let mut response = Vec::new();
    // A health answer is a few bytes; the bound keeps a wrong endpoint from feeding us forever.
    stream.take(64 * 1024).read_to_end(&mut response).await?;
    let text = String::from_utf8_lossy(&response);
    let status = text
        .split_whitespace()
        .nth(1)
        .and_then(|code| code.parse::<u16>().ok())
        .context("the answer is not HTTP")?;
    let body = text.split_once("\r\n\r\n").map_or("", |(_, body)| body);
    Ok((status, body.to_string()))
}
