//! Snapshots: the engine's whole state as of an LSN, written atomically beside the log.
//!
//! With a snapshot at LSN `s`, recovery needs only the records after `s`, and the segments
//! holding only records up to `s` can be removed. A snapshot file is
//!
//! ```text
//! magic[8] version:u32 lsn:u64 len:u64 crc32c:u32 payload[len]    (32-byte header)
//! ```
//!
//! with the CRC32C over the header's first 28 bytes and then the payload. It is written as a
//! temporary file, fdatasynced, renamed over its final name, and then the directory is fsynced:
//! a crash at any point leaves either no new snapshot or a complete one, never a partial one
//! under the final name. The two newest snapshots are kept, so a snapshot found damaged still
//! leaves an older one to fall back on.

use crate::error::WalError;
use crate::storage::Storage;
use crate::Lsn;

/// The first eight bytes of a snapshot file.
pub const SNAPSHOT_MAGIC: [u8; 8] = *b"LEASEQSN";
/// The snapshot format version.
pub const SNAPSHOT_VERSION: u32 = 1;
/// Size of the snapshot header.
pub const SNAPSHOT_HEADER_LEN_BYTES: usize = 32;
/// How many snapshots are kept.
pub const SNAPSHOTS_KEPT_MAX: usize = 2;

const TEMPORARY_SUFFIX: &str = ".tmp";

/// A snapshot read back by [`latest`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Snapshot {
    /// The LSN of the last record the snapshot includes.
    pub lsn: Lsn,
    /// The engine's bytes.
    pub bytes: Vec<u8>,
}

/// The final file name of the snapshot at `lsn`.
pub fn snapshot_file_name(lsn: Lsn) -> String {
    format!("snapshot-{lsn:020}.snap")
}

fn parse_snapshot_file_name(name: &str) -> Option<Lsn> {
    let digits = name.strip_prefix("snapshot-")?.strip_suffix(".snap")?;
    if digits.len() != 20 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// The header of the snapshot file holding `payload` (its CRC covers the payload too).
fn header(lsn: Lsn, payload: &[u8]) -> [u8; SNAPSHOT_HEADER_LEN_BYTES] {
    let mut header = [0u8; SNAPSHOT_HEADER_LEN_BYTES];
    header[0..8].copy_from_slice(&SNAPSHOT_MAGIC);
    header[8..12].copy_from_slice(&SNAPSHOT_VERSION.to_le_bytes());
    header[12..20].copy_from_slice(&lsn.to_le_bytes());
    header[20..28].copy_from_slice(&(payload.len() as u64).to_le_bytes());
    let crc = crc32c::crc32c_append(crc32c::crc32c(&header[..28]), payload);
    header[28..32].copy_from_slice(&crc.to_le_bytes());
    header
}

/// Encodes a snapshot file.
pub fn encode(lsn: Lsn, payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(SNAPSHOT_HEADER_LEN_BYTES + payload.len());
    out.extend_from_slice(&header(lsn, payload));
    out.extend_from_slice(payload);
    out
}

/// Checks a header against the length of the payload that follows it; returns the LSN and
/// the CRC the payload must have.
fn check_header(bytes: &[u8], payload_len: u64) -> Result<(Lsn, u32), &'static str> {
    let header = bytes
        .get(..SNAPSHOT_HEADER_LEN_BYTES)
        .ok_or("truncated header")?;
    if header[0..8] != SNAPSHOT_MAGIC {
        return Err("bad magic bytes");
    }
    let word = |at: usize| u64::from_le_bytes(header[at..at + 8].try_into().expect("8 bytes"));
    let version = u32::from_le_bytes(header[8..12].try_into().expect("4 bytes"));
    let crc = u32::from_le_bytes(header[28..32].try_into().expect("4 bytes"));
    if version != SNAPSHOT_VERSION {
        return Err("unsupported version");
    }
    if word(20) != payload_len {
        return Err("length mismatch");
    }
    Ok((word(12), crc))
}

fn check_payload(header: &[u8], payload: &[u8], crc: u32) -> Result<(), &'static str> {
    if crc32c::crc32c_append(crc32c::crc32c(&header[..28]), payload) != crc {
        return Err("checksum mismatch");
    }
    Ok(())
}

/// Decodes a snapshot file, or says why it is invalid. Never panics.
pub fn decode(bytes: &[u8]) -> Result<Snapshot, &'static str> {
    let payload = bytes.get(SNAPSHOT_HEADER_LEN_BYTES..).unwrap_or_default();
    let (lsn, crc) = check_header(bytes, payload.len() as u64)?;
    check_payload(bytes, payload, crc)?;
    Ok(Snapshot {
        lsn,
        bytes: payload.to_vec(),
    })
}

/// Reads and verifies the snapshot file `name`, like [`decode`] of its bytes, but reads the
/// payload straight into the buffer it returns: a snapshot is the size of the whole state, so
/// neither a second copy nor a buffer for a length the file does not have is affordable.
fn read(storage: &dyn Storage, name: &str) -> std::io::Result<Result<Snapshot, &'static str>> {
    let file = storage.open(name)?;
    let file_len = file.len_bytes()?;
    let mut header = [0u8; SNAPSHOT_HEADER_LEN_BYTES];
    let Some(payload_len) = file_len.checked_sub(SNAPSHOT_HEADER_LEN_BYTES as u64) else {
        return Ok(Err("truncated header"));
    };
    file.read_exact_at(&mut header, 0)?;
    let (lsn, crc) = match check_header(&header, payload_len) {
        Ok(checked) => checked,
        Err(reason) => return Ok(Err(reason)),
    };
    let payload_len = usize::try_from(payload_len)
        .map_err(|_| std::io::Error::new(std::io::ErrorKind::InvalidData, "file too large"))?;
    let mut payload = vec![0u8; payload_len];
    file.read_exact_at(&mut payload, SNAPSHOT_HEADER_LEN_BYTES as u64)?;
    Ok(check_payload(&header, &payload, crc).map(|()| Snapshot {
        lsn,
        bytes: payload,
    }))
}

/// Writes the snapshot at `lsn` atomically and durably, then removes all but the newest
/// [`SNAPSHOTS_KEPT_MAX`] snapshots.
pub fn write(storage: &dyn Storage, lsn: Lsn, payload: &[u8]) -> Result<(), WalError> {
    let name = snapshot_file_name(lsn);
    let temporary = format!("{name}{TEMPORARY_SUFFIX}");
    // A temporary file left by a crash is garbage; remove it so create() can succeed.
    let _ = storage.remove(&temporary);
    let file = storage
        .create(&temporary)
        .map_err(|source| WalError::io("create", &temporary, source))?;
    // Order: contents durable before the rename makes them visible under the final name, and
    // the rename durable (directory fsync) before we report success or delete older snapshots.
    // Header and payload written separately: joining them would copy the whole state.
    file.write_all_at(&header(lsn, payload), 0)
        .and_then(|()| file.write_all_at(payload, SNAPSHOT_HEADER_LEN_BYTES as u64))
        .and_then(|()| file.sync_data())
        .map_err(|source| WalError::io("write", &temporary, source))?;
    storage
        .rename(&temporary, &name)
        .map_err(|source| WalError::io("rename", &temporary, source))?;
    storage
        .sync_dir()
        .map_err(|source| WalError::io("fsync directory after renaming", &name, source))?;
    remove_old(storage)
}

/// The newest snapshot that decodes and verifies. Damaged snapshots are skipped with a warning.
pub fn latest(storage: &dyn Storage) -> Result<Option<Snapshot>, WalError> {
    for (lsn, name) in list(storage)?.into_iter().rev() {
        match read(storage, &name).map_err(|e| WalError::io("read", &name, e))? {
            Ok(snapshot) if snapshot.lsn == lsn => return Ok(Some(snapshot)),
            Ok(_) => tracing::warn!(file = name, "skipping snapshot: LSN differs from its name"),
            Err(reason) => tracing::warn!(file = name, reason, "skipping damaged snapshot"),
        }
    }
    Ok(None)
}

/// Snapshot files by ascending LSN.
fn list(storage: &dyn Storage) -> Result<Vec<(Lsn, String)>, WalError> {
    let names = storage
        .list()
        .map_err(|source| WalError::io("list", "log directory", source))?;
    let mut snapshots: Vec<(Lsn, String)> = names
        .into_iter()
        .filter_map(|name| parse_snapshot_file_name(&name).map(|lsn| (lsn, name)))
        .collect();
    snapshots.sort_unstable();
    Ok(snapshots)
}

fn remove_old(storage: &dyn Storage) -> Result<(), WalError> {
    let snapshots = list(storage)?;
    let excess = snapshots.len().saturating_sub(SNAPSHOTS_KEPT_MAX);
    for (_, name) in &snapshots[..excess] {
        storage
            .remove(name)
            .map_err(|source| WalError::io("remove", name, source))?;
    }
    if excess > 0 {
        storage.sync_dir().map_err(|source| {
            WalError::io("fsync directory after removing", "snapshots", source)
        })?;
    }
    Ok(())
}

/// Removes temporary snapshot files left by a crash.
pub(crate) fn remove_temporary_files(storage: &dyn Storage) -> Result<(), WalError> {
    let names = storage
        .list()
        .map_err(|source| WalError::io("list", "log directory", source))?;
    for name in names.iter().filter(|name| {
        name.strip_suffix(TEMPORARY_SUFFIX)
            .is_some_and(|base| parse_snapshot_file_name(base).is_some())
    }) {
        storage
            .remove(name)
            .map_err(|source| WalError::io("remove", name, source))?;
    }
    Ok(())
}
