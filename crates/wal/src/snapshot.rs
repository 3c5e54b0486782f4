//! Snapshots: the engine's whole state as of an LSN, written atomically beside the log.
//!
//! With a snapshot at LSN `s`, recovery needs only the records after `s`, and the segments
//! holding only records up to `s` can be removed. A snapshot file is
//!
//! ```text
//! magic[8] version:u32 lsn:u64 len:u64 crc32c:u32 payload[len]    (32-byte header)
//! ```
//!
//! with the CRC32C over the payload and then the header's first 28 bytes (version 2; version 1,
//! still read, had the header first). Payload first, so a snapshot is written as a stream of
//! chunks ([`SnapshotWriter`]) and read back as one ([`SnapshotFile::reader`]): a snapshot is
//! the size of the whole state, and neither end holds it in memory at once. It is written as a
//! temporary file, fdatasynced, renamed over its final name, and then the directory is fsynced:
//! a crash at any point leaves either no new snapshot or a complete one, never a partial one
//! under the final name. The two newest snapshots are kept, so a snapshot found damaged still
//! leaves an older one to fall back on.

use std::io;
use std::sync::Arc;

use crate::error::WalError;
use crate::storage::{Storage, StorageFile};
use crate::Lsn;

/// The first eight bytes of a snapshot file.
pub const SNAPSHOT_MAGIC: [u8; 8] = *b"LEASEQSN";
/// The snapshot format version written.
pub const SNAPSHOT_VERSION: u32 = 2;
/// Bytes written or read per I/O while streaming a snapshot.
const CHUNK_BYTES: usize = 1 << 20;
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

/// The header of a version 2 snapshot file whose payload has `len` bytes and CRC32C
/// `payload_crc`.
fn header(lsn: Lsn, len: u64, payload_crc: u32) -> [u8; SNAPSHOT_HEADER_LEN_BYTES] {
    let mut header = [0u8; SNAPSHOT_HEADER_LEN_BYTES];
    header[0..8].copy_from_slice(&SNAPSHOT_MAGIC);
    header[8..12].copy_from_slice(&SNAPSHOT_VERSION.to_le_bytes());
    header[12..20].copy_from_slice(&lsn.to_le_bytes());
    header[20..28].copy_from_slice(&len.to_le_bytes());
    let crc = crate::crc::crc32c_append(payload_crc, &header[..28]);
    header[28..32].copy_from_slice(&crc.to_le_bytes());
    header
}

/// Encodes a snapshot file.
pub fn encode(lsn: Lsn, payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(SNAPSHOT_HEADER_LEN_BYTES + payload.len());
    let crc = crate::crc::crc32c(payload);
    out.extend_from_slice(&header(lsn, payload.len() as u64, crc));
    out.extend_from_slice(payload);
    out
}

/// A checked header: the snapshot's LSN, the CRC it claims, and its version.
#[derive(Clone, Copy)]
struct Header {
    lsn: Lsn,
    crc: u32,
    version: u32,
}

/// The CRC a snapshot's header claims, computed over its payload fed in pieces.
struct Checksum<'h> {
    header: &'h [u8],
    version: u32,
    crc: u32,
}

impl<'h> Checksum<'h> {
    fn new(header: &'h [u8], version: u32) -> Checksum<'h> {
        let crc = match version {
            1 => crate::crc::crc32c(&header[..28]),
            _ => 0,
        };
        Checksum {
            header,
            version,
            crc,
        }
    }

    fn feed(&mut self, payload: &[u8]) {
        self.crc = crate::crc::crc32c_append(self.crc, payload);
    }

    fn matches(&self, expected: u32) -> bool {
        let crc = match self.version {
            1 => self.crc,
            _ => crate::crc::crc32c_append(self.crc, &self.header[..28]),
        };
        crc == expected
    }
}

/// Checks a header against the length of the payload that follows it.
fn check_header(bytes: &[u8], payload_len: u64) -> Result<Header, &'static str> {
    let header = bytes
        .get(..SNAPSHOT_HEADER_LEN_BYTES)
        .ok_or("truncated header")?;
    if header[0..8] != SNAPSHOT_MAGIC {
        return Err("bad magic bytes");
    }
    let word = |at: usize| u64::from_le_bytes(header[at..at + 8].try_into().expect("8 bytes"));
    let version = u32::from_le_bytes(header[8..12].try_into().expect("4 bytes"));
    let crc = u32::from_le_bytes(header[28..32].try_into().expect("4 bytes"));
    if !(1..=SNAPSHOT_VERSION).contains(&version) {
        return Err("unsupported version");
    }
    if word(20) != payload_len {
        return Err("length mismatch");
    }
    Ok(Header {
        lsn: word(12),
        crc,
        version,
    })
}

/// Decodes a snapshot file, or says why it is invalid. Never panics.
pub fn decode(bytes: &[u8]) -> Result<Snapshot, &'static str> {
    let payload = bytes.get(SNAPSHOT_HEADER_LEN_BYTES..).unwrap_or_default();
    let header = check_header(bytes, payload.len() as u64)?;
    let mut checksum = Checksum::new(bytes, header.version);
    checksum.feed(payload);
    if !checksum.matches(header.crc) {
        return Err("checksum mismatch");
    }
    Ok(Snapshot {
        lsn: header.lsn,
        bytes: payload.to_vec(),
    })
}

/// A snapshot file whose checksum verified, to be read as a stream ([`SnapshotFile::reader`]).
#[derive(Debug)]
pub struct SnapshotFile {
    /// The LSN of the last record the snapshot includes.
    pub lsn: Lsn,
    /// The payload's length.
    pub len_bytes: u64,
    file: Arc<dyn StorageFile>,
}

impl SnapshotFile {
    /// The payload, read in chunks.
    pub fn reader(&self) -> SnapshotReader {
        SnapshotReader {
            file: self.file.clone(),
            offset: SNAPSHOT_HEADER_LEN_BYTES as u64,
            end: SNAPSHOT_HEADER_LEN_BYTES as u64 + self.len_bytes,
        }
    }
}

/// Reads a snapshot's payload (see [`SnapshotFile::reader`]); wrap it in a `BufReader`.
#[derive(Debug)]
pub struct SnapshotReader {
    file: Arc<dyn StorageFile>,
    offset: u64,
    end: u64,
}

impl io::Read for SnapshotReader {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let left = self.end - self.offset;
        let len = buf.len().min(usize::try_from(left).unwrap_or(usize::MAX));
        self.file.read_exact_at(&mut buf[..len], self.offset)?;
        self.offset += len as u64;
        Ok(len)
    }
}

/// Opens and verifies the snapshot file `name`, reading it once in chunks to check its CRC.
fn open_verified(
    storage: &dyn Storage,
    name: &str,
) -> io::Result<Result<SnapshotFile, &'static str>> {
    let file = storage.open(name)?;
    let file_len = file.len_bytes()?;
    let mut header = [0u8; SNAPSHOT_HEADER_LEN_BYTES];
    let Some(payload_len) = file_len.checked_sub(SNAPSHOT_HEADER_LEN_BYTES as u64) else {
        return Ok(Err("truncated header"));
    };
    file.read_exact_at(&mut header, 0)?;
    let checked = match check_header(&header, payload_len) {
        Ok(checked) => checked,
        Err(reason) => return Ok(Err(reason)),
    };
    let mut checksum = Checksum::new(&header, checked.version);
    let mut chunk = vec![0u8; CHUNK_BYTES];
    let mut offset = SNAPSHOT_HEADER_LEN_BYTES as u64;
    while offset < file_len {
        let len = chunk.len().min((file_len - offset) as usize);
        file.read_exact_at(&mut chunk[..len], offset)?;
        checksum.feed(&chunk[..len]);
        offset += len as u64;
    }
    if !checksum.matches(checked.crc) {
        return Ok(Err("checksum mismatch"));
    }
    Ok(Ok(SnapshotFile {
        lsn: checked.lsn,
        len_bytes: payload_len,
        file,
    }))
}

/// Writes a snapshot as a stream of chunks: [`SnapshotWriter::append_with`] as often as needed,
/// then [`SnapshotWriter::finish`], which makes it durable and visible atomically.
pub struct SnapshotWriter<'s> {
    storage: &'s dyn Storage,
    lsn: Lsn,
    temporary: String,
    file: Arc<dyn StorageFile>,
    /// Payload bytes not yet written.
    buffer: Vec<u8>,
    /// Where the next written byte goes.
    offset: u64,
    /// CRC32C of the payload written so far.
    crc: u32,
}

impl<'s> SnapshotWriter<'s> {
    /// Starts the snapshot at `lsn` in a temporary file.
    pub fn create(storage: &'s dyn Storage, lsn: Lsn) -> Result<SnapshotWriter<'s>, WalError> {
        let temporary = format!("{}{TEMPORARY_SUFFIX}", snapshot_file_name(lsn));
        // A temporary file left by a crash is garbage; remove it so create() can succeed.
        let _ = storage.remove(&temporary);
        let file = storage
            .create(&temporary)
            .map_err(|source| WalError::io("create", &temporary, source))?;
        Ok(SnapshotWriter {
            storage,
            lsn,
            temporary,
            file,
            buffer: Vec::with_capacity(CHUNK_BYTES + (64 << 10)),
            offset: SNAPSHOT_HEADER_LEN_BYTES as u64,
            crc: 0,
        })
    }

    /// Lets `fill` append payload bytes to the buffer, and writes the buffer out once it holds
    /// a chunk.
    pub fn append_with(&mut self, fill: impl FnOnce(&mut Vec<u8>)) -> Result<(), WalError> {
        fill(&mut self.buffer);
        if self.buffer.len() >= CHUNK_BYTES {
            self.flush()?;
        }
        Ok(())
    }

    fn flush(&mut self) -> Result<(), WalError> {
        self.file
            .write_all_at(&self.buffer, self.offset)
            .map_err(|source| WalError::io("write", &self.temporary, source))?;
        self.crc = crate::crc::crc32c_append(self.crc, &self.buffer);
        self.offset += self.buffer.len() as u64;
        self.buffer.clear();
        Ok(())
    }

    /// Writes the header, makes the snapshot durable and visible under its final name, removes
    /// all but the newest [`SNAPSHOTS_KEPT_MAX`] snapshots, and returns the payload's length.
    pub fn finish(mut self) -> Result<u64, WalError> {
        self.flush()?;
        let len = self.offset - SNAPSHOT_HEADER_LEN_BYTES as u64;
        let name = snapshot_file_name(self.lsn);
        let temporary = &self.temporary;
        // Order: contents durable before the rename makes them visible under the final name,
        // and the rename durable (directory fsync) before we report success or delete older
        // snapshots.
        self.file
            .write_all_at(&header(self.lsn, len, self.crc), 0)
            .and_then(|()| self.file.sync_data())
            .map_err(|source| WalError::io("write", temporary, source))?;
        self.storage
            .rename(temporary, &name)
            .map_err(|source| WalError::io("rename", temporary, source))?;
        self.storage
            .sync_dir()
            .map_err(|source| WalError::io("fsync directory after renaming", &name, source))?;
        remove_old(self.storage)?;
        Ok(len)
    }
}

/// Writes the snapshot at `lsn` atomically and durably (see [`SnapshotWriter`]).
pub fn write(storage: &dyn Storage, lsn: Lsn, payload: &[u8]) -> Result<(), WalError> {
    let mut writer = SnapshotWriter::create(storage, lsn)?;
    for chunk in payload.chunks(CHUNK_BYTES) {
        writer.append_with(|buffer| buffer.extend_from_slice(chunk))?;
    }
    writer.finish().map(drop)
}

/// The newest snapshot that verifies, ready to be streamed. Damaged snapshots are skipped with
/// a warning.
pub fn latest_file(storage: &dyn Storage) -> Result<Option<SnapshotFile>, WalError> {
    for (lsn, name) in list(storage)?.into_iter().rev() {
        match open_verified(storage, &name).map_err(|e| WalError::io("read", &name, e))? {
            Ok(snapshot) if snapshot.lsn == lsn => return Ok(Some(snapshot)),
            Ok(_) => tracing::warn!(file = name, "skipping snapshot: LSN differs from its name"),
            Err(reason) => tracing::warn!(file = name, reason, "skipping damaged snapshot"),
        }
    }
    Ok(None)
}

/// The newest snapshot that verifies, read whole into memory (small states and tests; the
/// server streams with [`latest_file`]).
pub fn latest(storage: &dyn Storage) -> Result<Option<Snapshot>, WalError> {
    let Some(file) = latest_file(storage)? else {
        return Ok(None);
    };
    let mut bytes = Vec::new();
    io::Read::read_to_end(&mut file.reader(), &mut bytes)
        .map_err(|source| WalError::io("read", &snapshot_file_name(file.lsn), source))?;
    Ok(Some(Snapshot {
        lsn: file.lsn,
        bytes,
    }))
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
