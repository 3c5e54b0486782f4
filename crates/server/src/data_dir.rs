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
use std::time::Instant;

use leaseq_core::{codec, Engine, ReceiptKey};
use leaseq_wal::{DirStorage, Recovery, Storage, Wal, WalError};

use crate::checkpoint::{self, Checkpoints};
use crate::embedded::{Embedded, EmbeddedConfig, CHECKPOINT_LOG_BYTES_MIN};
use crate::payloads;

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
    /// The log could not be opened or replayed.
    #[error(transparent)]
    Log(#[from] WalError),
    /// The newest snapshot could not be read, or is damaged inside (its checksum matched, its
    /// records do not decode).
    #[error("the snapshot at log position {0} could not be loaded: {1}")]
    Snapshot(u64, checkpoint::LoadError),
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
    /// Opens (or creates) `path`, takes its lock, and recovers the backend from its log.
    pub fn open(
        path: &Path,
        config: EmbeddedConfig,
        options: leaseq_wal::Options,
        checkpoint_log_bytes_min: u64,
    ) -> Result<(DataDir, Embedded), OpenError> {
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
        let (backend, _) = recover_with(storage, config, key, options, checkpoint_log_bytes_min)?;
        Ok((DataDir { _lock: lock }, backend))
    }
}

/// Recovers the backend from the log in `storage`: the newest snapshot first (if any), then
/// every later record, all through `Engine::apply`. [`DataDir::open`] calls it on the data
/// directory's `wal/`; tests call it on a [`leaseq_wal::fault::FaultStorage`] to fail fsyncs,
/// fill the disk and crash. Checkpoints follow [`crate::embedded::CHECKPOINT_LOG_BYTES_MIN`].
pub fn recover(
    storage: Arc<dyn Storage>,
    config: EmbeddedConfig,
    key: ReceiptKey,
    options: leaseq_wal::Options,
) -> Result<(Embedded, Recovery), OpenError> {
    recover_with(storage, config, key, options, CHECKPOINT_LOG_BYTES_MIN)
}

/// [`recover`], checkpointing after at least `checkpoint_log_bytes_min` logged bytes.
pub fn recover_with(
    storage: Arc<dyn Storage>,
    config: EmbeddedConfig,
    key: ReceiptKey,
    options: leaseq_wal::Options,
    checkpoint_log_bytes_min: u64,
) -> Result<(Embedded, Recovery), OpenError> {
    let started = Instant::now();
    let mut engine = Engine::new(config.engine.clone(), key);
    let snapshot = leaseq_wal::snapshot::latest_file(storage.as_ref())?;
    let (snapshot_lsn, snapshot_records, snapshot_bytes) = match snapshot {
        Some(snapshot) => {
            let records = checkpoint::load(&mut engine, snapshot.reader())
                .map_err(|error| OpenError::Snapshot(snapshot.lsn, error))?;
            (snapshot.lsn, records, snapshot.len_bytes)
        }
        None => (0, 0, 0),
    };
    let mut replayed: u64 = 0;
    let mut decoder = codec::Decoder::default();
    // Segments the snapshot covers are not scanned (they stay for the payloads they hold).
    let options = leaseq_wal::Options {
        covered_lsn: snapshot_lsn,
        ..options
    };
    let (log, recovery) = Wal::open(storage, options, |record| {
        // Records the snapshot already contains.
        if record.lsn <= snapshot_lsn {
            return Ok(());
        }
        let decoded = decoder.decode(record.payload)?;
        engine.apply(&decoded);
        // As live traffic does once it has appended: keep the payload only in the log.
        if let Some(location) = payloads::location(record.position) {
            engine.spill(&decoded, location);
        }
        replayed += 1;
        Ok(())
    })?;
    tracing::info!(
        snapshot_lsn,
        snapshot_records,
        log_records = replayed,
        elapsed_ms = started.elapsed().as_millis() as u64,
        torn_tail = recovery.torn_tail.is_some(),
        "recovered state from the snapshot and the log"
    );
    let checkpoints = Checkpoints::new(checkpoint_log_bytes_min, snapshot_lsn)
        .with_last_snapshot_bytes(snapshot_bytes);
    let backend = Embedded::with_engine(config, engine, Some(log)).with_checkpoints(checkpoints);
    Ok((backend, recovery))
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
