//! Certificates made at test time (`rcgen`): a CA, and server certificates it signs for
//! `localhost` and `127.0.0.1`; TLS clients (rustls, ring as the server's) that trust a CA.

#![allow(dead_code)] // Each test binary uses its own subset of the helpers.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use bytes::Bytes;
use http_body_util::Full;
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;
use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, KeyPair};
use rustls::pki_types::{CertificateDer, ServerName};
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;

/// A certificate authority that signs server certificates.
pub struct Ca {
    certificate: rcgen::Certificate,
    key: KeyPair,
}

/// A server's certificate and key, as PEM, and the certificate's DER (what a client sees).
pub struct ServerPair {
    pub certificate_pem: String,
    pub key_pem: String,
    pub der: CertificateDer<'static>,
}

impl Ca {
    /// A new CA named `name`.
    pub fn new(name: &str) -> Ca {
        let key = KeyPair::generate().expect("a CA key");
        let mut params = CertificateParams::new(Vec::<String>::new()).expect("CA parameters");
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name.push(DnType::CommonName, name);
        let certificate = params.self_signed(&key).expect("the CA's certificate");
        Ca { certificate, key }
    }

    /// The CA's certificate, PEM: a client's CA bundle.
    pub fn pem(&self) -> String {
        self.certificate.pem()
    }

    /// A server certificate for `localhost` and `127.0.0.1` (and `common_name` as its subject,
    /// so two pairs of one CA differ visibly).
    pub fn server_pair(&self, common_name: &str) -> ServerPair {
        let key = KeyPair::generate().expect("a server key");
        let mut params = CertificateParams::new(vec!["localhost".into(), "127.0.0.1".into()])
            .expect("server certificate parameters");
        params
            .distinguished_name
            .push(DnType::CommonName, common_name);
        let certificate = params
            .signed_by(&key, &self.certificate, &self.key)
            .expect("signing the server certificate");
        ServerPair {
            certificate_pem: certificate.pem(),
            key_pem: key.serialize_pem(),
            der: certificate.der().clone(),
        }
    }
}

impl ServerPair {
    /// Writes `cert.pem` and `key.pem` into `dir`; their paths.
    pub fn write(&self, dir: &Path) -> (PathBuf, PathBuf) {
        let (certificate, key) = (dir.join("cert.pem"), dir.join("key.pem"));
        std::fs::write(&certificate, &self.certificate_pem).expect("writing cert.pem");
        std::fs::write(&key, &self.key_pem).expect("writing key.pem");
        (certificate, key)
    }
}

/// A rustls client trusting `ca_pem`'s certificates, offering `alpn` (in that order).
pub fn client_config(ca_pem: &str, alpn: &[&[u8]]) -> Arc<rustls::ClientConfig> {
    let mut roots = rustls::RootCertStore::empty();
    for certificate in rustls::pki_types::pem::PemObject::pem_slice_iter(ca_pem.as_bytes()) {
        roots
            .add(certificate.expect("a PEM certificate"))
            .expect("a CA certificate");
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("rustls' defaults")
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    Arc::new(config)
}

/// A TLS connection to `addr`, verified as `localhost`.
pub async fn connect(
    addr: SocketAddr,
    config: Arc<rustls::ClientConfig>,
) -> std::io::Result<TlsStream<TcpStream>> {
    let tcp = TcpStream::connect(addr).await?;
    tokio_rustls::TlsConnector::from(config)
        .connect(ServerName::try_from("localhost").unwrap(), tcp)
        .await
}

/// The certificate the server presented on `stream`.
pub fn peer_certificate(stream: &TlsStream<TcpStream>) -> CertificateDer<'static> {
    stream
        .get_ref()
        .1
        .peer_certificates()
        .expect("a server certificate")[0]
        .clone()
}

/// HTTP/1.1 on an open TLS connection, driven by a task of its own.
pub async fn http1(stream: TlsStream<TcpStream>) -> SendRequest<Full<Bytes>> {
    let (sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .expect("an HTTP/1.1 handshake");
    tokio::spawn(connection);
    sender
}

/// HTTP/2 on an open TLS connection (ALPN h2): its sender, and the task driving the
/// connection, which ends when the connection closes (the server's GOAWAY, or its close).
pub async fn http2(
    stream: TlsStream<TcpStream>,
) -> (
    hyper::client::conn::http2::SendRequest<Full<Bytes>>,
    tokio::task::JoinHandle<hyper::Result<()>>,
) {
    let (sender, connection) = hyper::client::conn::http2::handshake(
        hyper_util::rt::TokioExecutor::new(),
        TokioIo::new(stream),
    )
    .await
    .expect("an HTTP/2 handshake");
    (sender, tokio::spawn(connection))
}

/// Sends `request` on a kept-alive HTTP/1.1 connection once it is ready, and reads the whole
/// answer (so the connection is ready for the next): its status and body.
pub async fn exchange(
    sender: &mut SendRequest<Full<Bytes>>,
    request: hyper::Request<Full<Bytes>>,
) -> hyper::Result<(hyper::Response<()>, Bytes)> {
    use http_body_util::BodyExt as _;
    sender.ready().await?;
    let response = sender.send_request(request).await?;
    let (head, body) = response.into_parts();
    let body = body.collect().await?.to_bytes();
    Ok((hyper::Response::from_parts(head, ()), body))
}

/// An `aws-sdk-sqs` client for an `https://` endpoint whose certificate `ca_pem` signed (and
/// nothing else: no system roots), with retries off.
pub fn sdk_client_trusting(endpoint: &str, ca_pem: &str) -> aws_sdk_sqs::Client {
    use aws_sdk_sqs::config::retry::RetryConfig;
    use aws_sdk_sqs::config::{BehaviorVersion, Credentials, Region};
    use aws_smithy_http_client::tls::{self, rustls_provider::CryptoMode, TlsContext, TrustStore};
    let trust = TrustStore::empty()
        .with_native_roots(false)
        .with_pem_certificate(ca_pem.as_bytes());
    let http_client = aws_smithy_http_client::Builder::new()
        .tls_provider(tls::Provider::Rustls(CryptoMode::Ring))
        .tls_context(
            TlsContext::builder()
                .with_trust_store(trust)
                .build()
                .expect("a TLS context"),
        )
        .build_https();
    let config = aws_sdk_sqs::Config::builder()
        .endpoint_url(endpoint)
        .region(Region::new("us-east-1"))
        .credentials_provider(Credentials::new("test", "test", None, None, "static"))
        .behavior_version(BehaviorVersion::latest())
        .retry_config(RetryConfig::disabled())
        .http_client(http_client)
        .build();
    aws_sdk_sqs::Client::from_conf(config)
}
