//! The data directory: the receipt key, the log, and the lock that keeps one server per
//! directory.
//!
//! ```text
//! DATA_DIR/
//!   LOCK          held (flock) by the running server
//!   receipt.key   16 random bytes (hex) sealing receipts, so receipts stay valid across restarts
//!   wal/          the write-ahead log (see docs/design/wal.md)
//! ```
//! Opening replays the log through `Engine::apply`, the same function live traffic uses.

use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use leaseq_core::ReceiptKey;
use leaseq_wal::{DirStorage, Recovery, Storage};

use crate::host::{EngineHost, CHECKPOINT_LOG_BYTES_MIN};
use crate::log_store::{FileLogOpening, LogStore};
use crate::recovery::{self, RecoverError};
use crate::service::{Service, ServiceConfig};

/// Why a data directory could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    /// A file operation failed.
    #[error("{what} {path}: {source}")]
    Io {
        /// What was being done.
        what: &'static str,
        /// The path.
        path: PathBuf,
        /// The error.
        #[source]
        source: std::io::Error,
    },
    /// Another process holds the directory's lock.
    #[error("another leaseq server is using the data directory {0}")]
    Locked(PathBuf),
    /// The receipt key file is damaged.
    #[error("the receipt key file {0} is damaged (expected 32 hex digits)")]
    BadKey(PathBuf),
    /// The log could not be recovered.
    #[error(transparent)]
    Recover(#[from] RecoverError),
}

fn io<'a>(what: &'static str, path: &'a Path) -> impl FnOnce(std::io::Error) -> OpenError + 'a {
    move |source| OpenError::Io {
        what,
        path: path.to_path_buf(),
        source,
    }
}

/// An open data directory: keeps the lock for as long as it lives.
pub struct DataDir {
    _lock: File,
}

impl DataDir {
    /// Opens (or creates) `path`, takes its lock, and recovers the service from its log.
    pub fn open(
        path: &Path,
        config: ServiceConfig,
        options: leaseq_wal::Options,
        checkpoint_log_bytes_min: u64,
    ) -> Result<(DataDir, Service), OpenError> {
        fs::create_dir_all(path).map_err(io("creating", path))?;
        let lock_path = path.join("LOCK");
        let lock = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&lock_path)
            .map_err(io("opening", &lock_path))?;
        if lock.try_lock().is_err() {
            return Err(OpenError::Locked(path.to_path_buf()));
        }
        let key = receipt_key(path)?;
        let wal_dir = path.join("wal");
        let storage = DirStorage::new(&wal_dir).map_err(io("creating", &wal_dir))?;
        let storage = Arc::new(storage);
        let (service, _) = recover_with(storage, config, key, options, checkpoint_log_bytes_min)?;
        Ok((DataDir { _lock: lock }, service))
    }
}

/// Recovers the service from the file log in `storage`: the newest snapshot first (if any), then
/// every later record, all through `Engine::apply`. [`DataDir::open`] calls it on the data
/// directory's `wal/`; tests call it on a [`leaseq_wal::fault::FaultStorage`] to fail fsyncs,
/// fill the disk and crash. Checkpoints follow [`crate::host::CHECKPOINT_LOG_BYTES_MIN`].
pub fn recover(
    storage: Arc<dyn Storage>,
    config: ServiceConfig,
    key: ReceiptKey,
    options: leaseq_wal::Options,
) -> Result<(Service, Recovery), OpenError> {
    recover_with(storage, config, key, options, CHECKPOINT_LOG_BYTES_MIN)
}

/// [`recover`], checkpointing after at least `checkpoint_log_bytes_min` logged bytes.
pub fn recover_with(
    storage: Arc<dyn Storage>,
    config: ServiceConfig,
    key: ReceiptKey,
    options: leaseq_wal::Options,
    checkpoint_log_bytes_min: u64,
) -> Result<(Service, Recovery), OpenError> {
    let opening = FileLogOpening::new(storage, options);
    let recovered = recovery::recover(
        opening,
        config.engine.clone(),
        key,
        checkpoint_log_bytes_min,
    )?;
    let recovery = recovered.store.recovery().clone();
    let store: Arc<dyn LogStore> = recovered.store;
    let host = EngineHost::new(recovered.engine, store, recovered.checkpoints);
    Ok((Service::new(config, host), recovery))
}

/// Reads the receipt key, or creates it (written to a temporary file, synced, renamed, and the
/// directory synced, so a crash leaves either no key or a whole one).
fn receipt_key(dir: &Path) -> Result<ReceiptKey, OpenError> {
    let path = dir.join("receipt.key");
    match fs::read_to_string(&path) {
        Ok(text) => parse_key(text.trim()).ok_or(OpenError::BadKey(path)),
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
            let key: [u8; 16] = rand::random();
            let hex: String = key.iter().map(|b| format!("{b:02x}")).collect();
            let temporary = dir.join("receipt.key.tmp");
            let mut file = File::create(&temporary).map_err(io("creating", &temporary))?;
            file.write_all(hex.as_bytes())
                .and_then(|()| file.sync_all())
                .map_err(io("writing", &temporary))?;
            fs::rename(&temporary, &path).map_err(io("renaming", &temporary))?;
            File::open(dir)
                .and_then(|d| d.sync_all())
                .map_err(io("syncing", dir))?;
            Ok(ReceiptKey::new(key))
        }
        Err(error) => Err(io("reading", &path)(error)),
    }
}

fn parse_key(hex: &str) -> Option<ReceiptKey> {
    if hex.len() != 32 {
        return None;
    }
    let mut key = [0u8; 16];
    for (i, byte) in key.iter_mut().enumerate() {
        *byte = u8::from_str_radix(hex.get(2 * i..2 * i + 2)?, 16).ok()?;
    }
    Some(ReceiptKey::new(key))
}
