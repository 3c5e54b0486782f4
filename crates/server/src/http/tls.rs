//! TLS on the SQS listener (`tls_cert`, `tls_key`): the certificate chain and key, loaded from
//! PEM files and reloaded from them in place.
//!
//! Why a certificate resolver rather than a new `ServerConfig` per reload: the one
//! `ServerConfig` (and so the acceptor, its session ticket keys and its ALPN list) lives as long
//! as the listener, and each handshake asks [`Tls`]'s resolver for the pair it holds right then.
//! A reload swaps that pair under a lock held for a pointer copy; handshakes after it present
//! the new certificate, and connections already open keep the session they negotiated, so a
//! reload drops nothing. A reload that fails keeps the old pair.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use parking_lot::RwLock;
use rustls::crypto::CryptoProvider;
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use rustls::ServerConfig;
use rustls_pki_types::pem::PemObject as _;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::TlsAcceptor;

/// The ALPN protocols offered, in the server's order of preference.
pub const ALPN_PROTOCOLS: [&[u8]; 2] = [b"h2", b"http/1.1"];

/// Why a certificate and key could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// A file could not be read.
    #[error("reading the TLS {what} file {path}: {source}")]
    Read {
        /// `certificate` or `key`.
        what: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
    /// The certificate file holds no PEM `CERTIFICATE` block, or a malformed one.
    #[error("the TLS certificate file {path} holds no PEM certificate: {reason}")]
    Certificate { path: PathBuf, reason: String },
    /// The key file holds no PEM private key (PKCS#8, PKCS#1 or SEC1), or one rustls cannot
    /// sign with.
    #[error("the TLS key file {path} holds no usable PEM private key: {reason}")]
    Key { path: PathBuf, reason: String },
    /// The key is not the private key of the certificate's public key.
    #[error("the TLS key {key} does not belong to the certificate {certificate}: {reason}")]
    Mismatch {
        certificate: PathBuf,
        key: PathBuf,
        reason: String,
    },
    /// rustls refused the configuration (not expected with its safe defaults).
    #[error("configuring TLS: {0}")]
    Config(String),
}

/// The listener's TLS: the acceptor and the pair it presents, reloadable from its files.
pub struct Tls {
    certificate_path: PathBuf,
    key_path: PathBuf,
    provider: Arc<CryptoProvider>,
    resolver: Arc<Resolver>,
    acceptor: TlsAcceptor,
}

impl fmt::Debug for Tls {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Tls")
            .field("certificate_path", &self.certificate_path)
            .field("key_path", &self.key_path)
            .finish_non_exhaustive()
    }
}

impl Tls {
    /// Loads the certificate chain (PEM, the server's certificate first) and its private key
    /// (PEM), offering HTTP/2 and HTTP/1.1 by ALPN.
    pub fn load(certificate_path: &Path, key_path: &Path) -> Result<Tls, TlsError> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let pair = load_pair(certificate_path, key_path, &provider)?;
        let resolver = Arc::new(Resolver {
            current: RwLock::new(Arc::new(pair)),
        });
        let mut config = ServerConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .map_err(|error| TlsError::Config(error.to_string()))?
            .with_no_client_auth()
            .with_cert_resolver(resolver.clone());
        config.alpn_protocols = ALPN_PROTOCOLS.iter().map(|p| p.to_vec()).collect();
        Ok(Tls {
            certificate_path: certificate_path.to_path_buf(),
            key_path: key_path.to_path_buf(),
            provider,
            resolver,
            acceptor: TlsAcceptor::from(Arc::new(config)),
        })
    }

    /// Reads the files again: new handshakes present the new pair, open connections go on
    /// with theirs. On an error nothing changes.
    pub fn reload(&self) -> Result<(), TlsError> {
        let pair = load_pair(&self.certificate_path, &self.key_path, &self.provider)?;
        *self.resolver.current.write() = Arc::new(pair);
        Ok(())
    }

    /// The acceptor of the listener's connections.
    pub fn acceptor(&self) -> &TlsAcceptor {
        &self.acceptor
    }

    /// The certificate file.
    pub fn certificate_path(&self) -> &Path {
        &self.certificate_path
    }
}

/// The pair handshakes present right now.
struct Resolver {
    current: RwLock<Arc<CertifiedKey>>,
}

impl fmt::Debug for Resolver {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Resolver")
    }
}

impl ResolvesServerCert for Resolver {
    fn resolve(&self, _client_hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.current.read().clone())
    }
}

fn read(what: &'static str, path: &Path) -> Result<Vec<u8>, TlsError> {
    std::fs::read(path).map_err(|source| TlsError::Read {
        what,
        path: path.to_path_buf(),
        source,
    })
}

/// The chain and key of the two files, checked to belong together.
fn load_pair(
    certificate_path: &Path,
    key_path: &Path,
    provider: &CryptoProvider,
) -> Result<CertifiedKey, TlsError> {
    let certificate_error = |reason: String| TlsError::Certificate {
        path: certificate_path.to_path_buf(),
        reason,
    };
    let chain = CertificateDer::pem_slice_iter(&read("certificate", certificate_path)?)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|error| certificate_error(error.to_string()))?;
    if chain.is_empty() {
        return Err(certificate_error("no CERTIFICATE block".into()));
    }
    let key_error = |reason: String| TlsError::Key {
        path: key_path.to_path_buf(),
        reason,
    };
    let key = PrivateKeyDer::from_pem_slice(&read("key", key_path)?)
        .map_err(|error| key_error(error.to_string()))?;
    let signing_key = provider
        .key_provider
        .load_private_key(key)
        .map_err(|error| key_error(error.to_string()))?;
    let pair = CertifiedKey::new(chain, signing_key);
    match pair.keys_match() {
        // ring's keys all know their public key, so `Unknown` does not arise; were it to, the
        // handshake itself would fail rather than anything be served with the wrong key.
        Ok(()) | Err(rustls::Error::InconsistentKeys(rustls::InconsistentKeys::Unknown)) => {
            Ok(pair)
        }
        Err(error) => Err(TlsError::Mismatch {
            certificate: certificate_path.to_path_buf(),
            key: key_path.to_path_buf(),
            reason: error.to_string(),
        }),
    }
}
