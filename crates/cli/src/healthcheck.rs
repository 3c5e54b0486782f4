//! `leaseq healthcheck`: asks a running server whether it is ready (`GET /readyz`) and exits 0
//! if so, 1 if not or if it does not answer, for container images without curl
//! (`HEALTHCHECK CMD ["leaseq", "healthcheck"]`).
//!
//! It speaks HTTP/1.1, plain or over TLS (`https://` with `--ca-bundle`, through the client of
//! [`crate::tls_client`] that `leaseq bench` uses too), so it can ask a TLS `--listen` itself or
//! the admin listener (always plain HTTP).

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{bail, Context as _};
use clap::Args;
use tokio::io::{AsyncRead, AsyncReadExt as _, AsyncWrite, AsyncWriteExt as _};

/// Flags of `leaseq healthcheck`.
#[derive(Args, Debug)]
pub struct HealthcheckArgs {
    /// The server's address, `http://HOST:PORT`, or `https://HOST:PORT` for a TLS listener
    /// (with `--ca-bundle`) [default: http://127.0.0.1:9324]. The admin listener
    /// (`--admin-listen`, plain HTTP) answers the same probes.
    #[arg(long, env = "LEASEQ_ENDPOINT", default_value = "http://127.0.0.1:9324")]
    endpoint: String,
    /// PEM file of the certificates an `https://` endpoint's certificate must chain to (the
    /// server's CA); its certificate must name the endpoint's host.
    #[arg(long, env = "LEASEQ_CA_BUNDLE")]
    ca_bundle: Option<PathBuf>,
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
        let asked = get(&args.endpoint, args.ca_bundle.as_deref(), &args.path);
        tokio::time::timeout(timeout, asked)
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

/// One HTTP/1.1 GET over plain TCP, or TLS for `https://`: the status and body.
async fn get(
    endpoint: &str,
    ca_bundle: Option<&Path>,
    path: &str,
) -> anyhow::Result<(u16, String)> {
    let (https, authority) = if let Some(authority) = endpoint.strip_prefix("http://") {
        (false, authority)
    } else if let Some(authority) = endpoint.strip_prefix("https://") {
        (true, authority)
    } else {
        bail!("--endpoint must be http://HOST:PORT or https://HOST:PORT, not {endpoint:?}");
    };
    let authority = authority.trim_end_matches('/');
    // A TLS endpoint without its CA is refused before connecting: the answer would be a
    // handshake failure that says less.
    let tls = match (https, ca_bundle) {
        (false, _) => None,
        (true, None) => bail!(
            "an https:// --endpoint needs --ca-bundle (the PEM file of the server's CA); or ask \
             the admin listener (admin_listen, plain HTTP), which answers /readyz and /livez too"
        ),
        (true, Some(ca_bundle)) => {
            let host = authority
                .rsplit_once(':')
                .map_or(authority, |(host, _port)| host);
            Some((
                crate::tls_client::connector(ca_bundle)?,
                crate::tls_client::server_name(host)?,
            ))
        }
    };
    let stream = tokio::net::TcpStream::connect(authority)
        .await
        .with_context(|| format!("connecting to {authority}"))?;
    let Some((connector, name)) = tls else {
        return exchange(stream, authority, path).await;
    };
    let stream = connector
        .connect(name, stream)
        .await
        .with_context(|| format!("TLS with {authority}"))?;
    exchange(stream, authority, path).await
}

/// Sends `GET path` on `stream` and reads the answer to its end (the request asks the server
/// to close after it).
async fn exchange<S: AsyncRead + AsyncWrite + Unpin>(
    mut stream: S,
    authority: &str,
    path: &str,
) -> anyhow::Result<(u16, String)> {
    let request = format!("GET {path} HTTP/1.1\r\nHost: {authority}\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await?;
    stream.flush().await?;
    let mut response = Vec::new();
    // A health answer is a few bytes; the bound keeps a wrong endpoint from feeding us forever.
    let read = stream.take(64 * 1024).read_to_end(&mut response).await;
    // A TLS peer that closes without close_notify ends the read with UnexpectedEof after the
    // whole answer: what was read counts.
    if let Err(error) = read {
        if error.kind() != std::io::ErrorKind::UnexpectedEof || response.is_empty() {
            return Err(error.into());
        }
    }
    let text = String::from_utf8_lossy(&response);
    let status = text
        .split_whitespace()
        .nth(1)
        .and_then(|code| code.parse::<u16>().ok())
        .context("the answer is not HTTP")?;
    let body = text.split_once("\r\n\r\n").map_or("", |(_, body)| body);
    Ok((status, body.to_string()))
}
