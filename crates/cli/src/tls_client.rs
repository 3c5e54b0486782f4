//! The TLS client of the commands that talk to a server over `https://` (`leaseq bench`,
//! `leaseq healthcheck`): rustls with ring, as the server, trusting only the certificates of a
//! PEM file (`--ca-bundle`).

use std::path::Path;
use std::sync::Arc;

use anyhow::{bail, Context as _};
use rustls_pki_types::pem::PemObject as _;
use rustls_pki_types::{CertificateDer, ServerName};

/// A TLS client trusting the certificates of the PEM file `ca_bundle`, offering HTTP/1.1 by
/// ALPN.
pub fn connector(ca_bundle: &Path) -> anyhow::Result<tokio_rustls::TlsConnector> {
    let pem = std::fs::read(ca_bundle)
        .with_context(|| format!("reading --ca-bundle {}", ca_bundle.display()))?;
    let mut roots = rustls::RootCertStore::empty();
    for certificate in CertificateDer::pem_slice_iter(&pem) {
        let certificate =
            certificate.with_context(|| format!("parsing --ca-bundle {}", ca_bundle.display()))?;
        roots
            .add(certificate)
            .with_context(|| format!("a certificate of --ca-bundle {}", ca_bundle.display()))?;
    }
    if roots.is_empty() {
        bail!("--ca-bundle {} holds no certificate", ca_bundle.display());
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(tokio_rustls::TlsConnector::from(Arc::new(config)))
}

/// The name the server's certificate must have: `host` of an endpoint's authority (an IPv6
/// address without its brackets).
pub fn server_name(host: &str) -> anyhow::Result<ServerName<'static>> {
    let host = host.trim_start_matches('[').trim_end_matches(']');
    ServerName::try_from(host.to_string()).with_context(|| format!("{host:?} is not a host name"))
}
