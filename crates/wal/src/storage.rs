//! The I/O seam: every byte the log reads or writes goes through [`Storage`] and
//! [`StorageFile`].
//!
//! A `Storage` is one flat directory of named files. The log needs only positional reads and
//! writes, `fdatasync`, truncation, and the directory operations whose durability needs their
//! own fsync of the directory (create, rename, remove). [`DirStorage`] implements the seam on
//! `std::fs`; [`crate::fault::FaultStorage`] implements it in memory and can fail fsyncs, run
//! out of space, crash with torn writes and flip bits, which is how the tests reach the error
//! paths that a real disk reaches only rarely.

use std::fmt::Debug;
use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// One open file.
pub trait StorageFile: Send + Sync + Debug {
    /// Fills `buf` from `offset`; fails with `UnexpectedEof` if the file is too short.
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()>;
    /// [`StorageFile::read_exact_at`] if it needs no wait for the disk: `Ok(false)`, with `buf`
    /// partly filled or not at all, when part of the range is not in memory (the operating
    /// system's page cache). A storage that cannot tell reads, and answers `Ok(true)`.
    fn read_exact_at_cached(&self, buf: &mut [u8], offset: u64) -> io::Result<bool> {
        self.read_exact_at(buf, offset).map(|()| true)
    }
    /// Writes all of `buf` at `offset`, extending the file if needed. On error, a prefix of
    /// `buf` may have been written.
    fn write_all_at(&self, buf: &[u8], offset: u64) -> io::Result<()>;
    /// Makes the file's data (and the metadata needed to read it, like its length) durable:
    /// `fdatasync(2)`.
    fn sync_data(&self) -> io::Result<()>;
    /// Truncates or extends the file to `len_bytes`.
    fn set_len(&self, len_bytes: u64) -> io::Result<()>;
    /// The file's current length.
    fn len_bytes(&self) -> io::Result<u64>;
}

/// A directory of files.
pub trait Storage: Send + Sync + Debug {
    /// Opens an existing file for reading and writing.
    fn open(&self, name: &str) -> io::Result<Arc<dyn StorageFile>>;
    /// Creates a new, empty file; fails if it exists. The new name is durable only after
    /// [`Storage::sync_dir`].
    fn create(&self, name: &str) -> io::Result<Arc<dyn StorageFile>>;
    /// The names of all files in the directory, in no particular order.
    fn list(&self) -> io::Result<Vec<String>>;
    /// Removes a file. Durable only after [`Storage::sync_dir`].
    fn remove(&self, name: &str) -> io::Result<()>;
    /// Atomically renames `from` to `to`, replacing `to`. Durable only after
    /// [`Storage::sync_dir`].
    fn rename(&self, from: &str, to: &str) -> io::Result<()>;
    /// Makes the directory's entries durable: fsync of the directory itself.
    fn sync_dir(&self) -> io::Result<()>;
}

/// Reads a whole file into memory.
pub fn read_whole_file(storage: &dyn Storage, name: &str) -> io::Result<Vec<u8>> {
    let file = storage.open(name)?;
    let len_bytes = usize::try_from(file.len_bytes()?)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidData, "file too large"))?;
    let mut bytes = vec![0u8; len_bytes];
    file.read_exact_at(&mut bytes, 0)?;
    Ok(bytes)
}

/// [`Storage`] on a real directory through `std::fs`.
#[derive(Debug, Clone)]
pub struct DirStorage {
    dir: PathBuf,
}

impl DirStorage {
    /// Uses `dir`, creating it (and its parents) if missing.
    pub fn new(dir: impl AsRef<Path>) -> io::Result<DirStorage> {
        let dir = dir.as_ref().to_path_buf();
        fs::create_dir_all(&dir)?;
        Ok(DirStorage { dir })
    }

    /// The directory this storage lives in.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn path(&self, name: &str) -> PathBuf {
        // Names come from this crate only; a separator would escape the directory.
        assert!(!name.contains('/'), "storage names are flat: {name:?}");
        self.dir.join(name)
    }
}

impl Storage for DirStorage {
    fn open(&self, name: &str) -> io::Result<Arc<dyn StorageFile>> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .open(self.path(name))?;
        Ok(Arc::new(DirFile { file }))
    }

    fn create(&self, name: &str) -> io::Result<Arc<dyn StorageFile>> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(self.path(name))?;
        Ok(Arc::new(DirFile { file }))
    }

    fn list(&self) -> io::Result<Vec<String>> {
        let mut names = Vec::new();
        for entry in fs::read_dir(&self.dir)? {
            let entry = entry?;
            if entry.file_type()?.is_file() {
                if let Ok(name) = entry.file_name().into_string() {
                    names.push(name);
                }
            }
        }
        Ok(names)
    }

    fn remove(&self, name: &str) -> io::Result<()> {
        fs::remove_file(self.path(name))
    }

    fn rename(&self, from: &str, to: &str) -> io::Result<()> {
        fs::rename(self.path(from), self.path(to))
    }

    fn sync_dir(&self) -> io::Result<()> {
        File::open(&self.dir)?.sync_all()
    }
}

#[derive(Debug)]
struct DirFile {
    file: File,
}

impl StorageFile for DirFile {
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        self.file.read_exact_at(buf, offset)
    }

    /// `preadv2(2)` with `RWF_NOWAIT` (Linux 4.14 and later): the kernel copies what its page
    /// cache holds and answers `EAGAIN` instead of starting a disk read. Where the flag is not
    /// supported (another kernel, or a filesystem without it), this reads, as before.
    fn read_exact_at_cached(&self, buf: &mut [u8], offset: u64) -> io::Result<bool> {
        use rustix::io::{Errno, ReadWriteFlags};
        let mut done = 0;
        while done < buf.len() {
            let rest = &mut buf[done..];
            let at = offset + done as u64;
            match rustix::io::preadv2(
                &self.file,
                &mut [io::IoSliceMut::new(rest)],
                at,
                ReadWriteFlags::NOWAIT,
            ) {
                Ok(0) => return Err(io::ErrorKind::UnexpectedEof.into()),
                Ok(read) => done += read,
                Err(Errno::AGAIN) => return Ok(false),
                Err(Errno::INTR) => {}
                Err(Errno::OPNOTSUPP | Errno::NOSYS | Errno::INVAL) => {
                    return self.file.read_exact_at(rest, at).map(|()| true)
                }
                Err(errno) => return Err(errno.into()),
            }
        }
        Ok(true)
    }

    fn write_all_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        self.file.write_all_at(buf, offset)
    }

    fn sync_data(&self) -> io::Result<()> {
        self.file.sync_data()
    }

    fn set_len(&self, len_bytes: u64) -> io::Result<()> {
        self.file.set_len(len_bytes)
    }

    fn len_bytes(&self) -> io::Result<u64> {
        Ok(self.file.metadata()?.len())
    }
}
