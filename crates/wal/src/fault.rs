//! A fault-injecting, in-memory [`Storage`] for tests.
//!
//! [`FaultStorage`] keeps two images of every file: what a reader sees now (`current`) and what
//! would survive a power loss (`durable`), plus the list of writes made since the last
//! `sync_data` (`pending`). Directory entries are treated the same way: a create, rename or
//! remove survives a crash only after `sync_dir`. A test can:
//!
//! - fail the next `sync_data` with EIO ([`FaultStorage::fail_next_sync`]),
//! - cap the total size so writes fail with ENOSPC after a partial write
//!   ([`FaultStorage::set_space_limit_bytes`]),
//! - hold every `sync_data` until released ([`FaultStorage::hold_syncs`]), to freeze a batch
//!   of the group commit in flight while a test arranges what happens meanwhile,
//! - crash ([`FaultStorage::crash`]): every file falls back to its durable image, optionally
//!   keeping a torn prefix of the unsynced writes, and the handles held by the crashed process
//!   stop working, so a log still running on them cannot touch the "rebooted" world,
//! - flip bits and rewrite files to model media corruption,
//! - make every read look as if it had to wait for the disk
//!   ([`FaultStorage::set_reads_uncached`]).

use std::collections::{BTreeMap, HashMap};
use std::io;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};

use crate::storage::{Storage, StorageFile};

/// What survives a simulated crash.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CrashMode {
    /// Only synced data survives.
    DropUnsynced,
    /// Synced data survives, plus up to this many bytes of each file's unsynced writes, applied
    /// in the order they were made (a torn write: a prefix of what the process wrote).
    KeepTornPrefix {
        /// How many unsynced bytes of each file survive.
        bytes: u64,
    },
}

/// An in-memory [`Storage`] that injects faults. Clones share the same files.
#[derive(Debug, Clone)]
pub struct FaultStorage {
    world: Arc<Mutex<World>>,
    /// Signalled when `World::syncs_held` or `World::syncs_waiting` changes.
    sync_gate: Arc<Condvar>,
    /// The world generation this handle belongs to; a crash starts a new one.
    generation: u64,
}

#[derive(Debug, Default)]
struct World {
    generation: u64,
    next_file_id: u64,
    files: HashMap<u64, FileImage>,
    names: BTreeMap<String, u64>,
    durable_names: BTreeMap<String, u64>,
    fail_next_sync: bool,
    space_limit_bytes: Option<u64>,
    sync_count: u64,
    /// `sync_data` calls wait while this is set.
    syncs_held: bool,
    /// `sync_data` calls waiting right now.
    syncs_waiting: u64,
    /// `read_exact_at_cached` answers that nothing is in memory.
    reads_uncached: bool,
    /// Calls of `read_exact_at` and `read_exact_at_cached` (each a system call on a real file).
    read_count: u64,
}

#[derive(Debug, Clone, Default)]
struct FileImage {
    durable: Vec<u8>,
    current: Vec<u8>,
    pending: Vec<PendingOp>,
}

#[derive(Debug, Clone)]
enum PendingOp {
    Write { offset: u64, data: Vec<u8> },
    SetLen(u64),
}

impl Default for FaultStorage {
    fn default() -> Self {
        FaultStorage::new()
    }
}

impl FaultStorage {
    /// An empty directory.
    pub fn new() -> FaultStorage {
        FaultStorage {
            world: Arc::new(Mutex::new(World::default())),
            sync_gate: Arc::new(Condvar::new()),
            generation: 0,
        }
    }

    fn world(&self) -> io::Result<MutexGuard<'_, World>> {
        let world = self.world.lock().expect("fault storage mutex poisoned");
        if world.generation != self.generation {
            return Err(stale_handle());
        }
        Ok(world)
    }

    fn world_unchecked(&self) -> MutexGuard<'_, World> {
        self.world.lock().expect("fault storage mutex poisoned")
    }

    /// Makes the next `sync_data` on any file fail with EIO (once).
    pub fn fail_next_sync(&self) {
        self.world_unchecked().fail_next_sync = true;
    }

    /// Disarms injected faults (a pending `fail_next_sync`), as a restart of the process would.
    pub fn clear_faults(&self) {
        self.world_unchecked().fail_next_sync = false;
    }

    /// Makes `read_exact_at_cached` answer `false` (not in memory, the read would wait for the
    /// disk) while set, as if the page cache had dropped every file. Plain reads still read.
    pub fn set_reads_uncached(&self, uncached: bool) {
        self.world_unchecked().reads_uncached = uncached;
    }

    /// Caps the total bytes of all files; a write past the cap writes what fits and then fails
    /// with ENOSPC. `None` removes the cap.
    pub fn set_space_limit_bytes(&self, limit: Option<u64>) {
        self.world_unchecked().space_limit_bytes = limit;
    }

    /// Makes every `sync_data` on any file wait (before doing anything) until
    /// [`FaultStorage::release_syncs`].
    pub fn hold_syncs(&self) {
        self.world_unchecked().syncs_held = true;
    }

    /// Lets held and later `sync_data` calls proceed.
    pub fn release_syncs(&self) {
        self.world_unchecked().syncs_held = false;
        self.sync_gate.notify_all();
    }

    /// Blocks until `count` `sync_data` calls are waiting at the gate of
    /// [`FaultStorage::hold_syncs`].
    pub fn wait_for_held_syncs(&self, count: u64) {
        let mut world = self.world_unchecked();
        while world.syncs_waiting < count {
            world = self
                .sync_gate
                .wait(world)
                .expect("fault storage mutex poisoned");
        }
    }

    /// How many `sync_data` calls have succeeded.
    pub fn sync_count(&self) -> u64 {
        self.world_unchecked().sync_count
    }

    /// How many reads files have been asked for (`read_exact_at` and `read_exact_at_cached`
    /// calls, each a system call on a real file).
    pub fn read_count(&self) -> u64 {
        self.world_unchecked().read_count
    }

    /// Simulates a power loss and returns the storage handle for the rebooted machine. Every
    /// handle from before the crash (this one, its clones, and files opened through them)
    /// fails from now on. A pending `fail_next_sync` is disarmed.
    pub fn crash(&self, mode: CrashMode) -> FaultStorage {
        let mut world = self.world_unchecked();
        world.generation += 1;
        // A fault armed for the crashed process does not carry over to the rebooted one.
        world.fail_next_sync = false;
        world.names = world.durable_names.clone();
        let live: Vec<u64> = world.names.values().copied().collect();
        world.files.retain(|id, _| live.contains(id));
        for image in world.files.values_mut() {
            image.crash(mode);
        }
        FaultStorage {
            world: self.world.clone(),
            sync_gate: self.sync_gate.clone(),
            generation: world.generation,
        }
    }

    /// An independent copy of the durable state, as a crash would leave it, for trying many
    /// damages on the same starting point.
    pub fn fork(&self) -> FaultStorage {
        let world = self.world_unchecked();
        let mut copy = World {
            next_file_id: world.next_file_id,
            names: world.durable_names.clone(),
            durable_names: world.durable_names.clone(),
            ..World::default()
        };
        for id in copy.names.values() {
            if let Some(image) = world.files.get(id) {
                let mut image = image.clone();
                image.crash(CrashMode::DropUnsynced);
                copy.files.insert(*id, image);
            }
        }
        FaultStorage {
            world: Arc::new(Mutex::new(copy)),
            sync_gate: Arc::new(Condvar::new()),
            generation: 0,
        }
    }

    /// The names of all files, sorted.
    pub fn file_names(&self) -> Vec<String> {
        self.world_unchecked().names.keys().cloned().collect()
    }

    /// The current contents of a file.
    pub fn contents(&self, name: &str) -> Option<Vec<u8>> {
        let world = self.world_unchecked();
        let id = world.names.get(name)?;
        Some(world.files[id].current.clone())
    }

    /// The length of a file's durable image.
    pub fn durable_len_bytes(&self, name: &str) -> Option<u64> {
        let world = self.world_unchecked();
        let id = world.durable_names.get(name)?;
        Some(world.files[id].durable.len() as u64)
    }

    /// Bytes written to a file since its last `sync_data`: what a crash with
    /// [`CrashMode::KeepTornPrefix`] chooses a prefix of. Overwrites count, though they do not
    /// change the file's length.
    pub fn unsynced_bytes(&self, name: &str) -> u64 {
        let world = self.world_unchecked();
        let Some(id) = world.names.get(name) else {
            return 0;
        };
        world.files[id]
            .pending
            .iter()
            .map(|op| match op {
                PendingOp::Write { data, .. } => data.len() as u64,
                PendingOp::SetLen(_) => 0,
            })
            .sum()
    }

    /// Replaces a file's contents, durably (models damage found on the medium).
    pub fn set_contents(&self, name: &str, bytes: Vec<u8>) {
        let mut world = self.world_unchecked();
        let id = *world
            .names
            .get(name)
            .expect("set_contents of a missing file");
        let image = world.files.get_mut(&id).expect("file image");
        image.durable = bytes.clone();
        image.current = bytes;
        image.pending.clear();
    }

    /// Flips one bit of a file, in both images.
    pub fn flip_bit(&self, name: &str, offset: u64, bit: u8) {
        let mut world = self.world_unchecked();
        let id = *world.names.get(name).expect("flip_bit of a missing file");
        let image = world.files.get_mut(&id).expect("file image");
        for bytes in [&mut image.durable, &mut image.current] {
            if let Some(byte) = bytes.get_mut(offset as usize) {
                *byte ^= 1 << (bit % 8);
            }
        }
    }
}

impl FileImage {
    fn crash(&mut self, mode: CrashMode) {
        let mut budget = match mode {
            CrashMode::DropUnsynced => 0,
            CrashMode::KeepTornPrefix { bytes } => bytes,
        };
        let mut image = std::mem::take(&mut self.durable);
        for op in self.pending.drain(..) {
            match op {
                PendingOp::SetLen(len) => image.resize(len as usize, 0),
                PendingOp::Write { offset, data } => {
                    let kept = data.len().min(budget as usize);
                    budget -= kept as u64;
                    if kept > 0 {
                        write_into(&mut image, offset, &data[..kept]);
                    }
                }
            }
        }
        self.current = image.clone();
        self.durable = image;
    }
}

/// The error of every call through a handle from before a simulated crash.
fn stale_handle() -> io::Error {
    io::Error::other("storage handle from before a simulated crash")
}

fn write_into(image: &mut Vec<u8>, offset: u64, data: &[u8]) {
    let start = offset as usize;
    let end = start + data.len();
    if image.len() < end {
        image.resize(end, 0);
    }
    image[start..end].copy_from_slice(data);
}

impl Storage for FaultStorage {
    fn open(&self, name: &str) -> io::Result<Arc<dyn StorageFile>> {
        let world = self.world()?;
        let id = *world
            .names
            .get(name)
            .ok_or_else(|| io::Error::from(io::ErrorKind::NotFound))?;
        Ok(Arc::new(FaultFile {
            storage: self.clone(),
            id,
        }))
    }

    fn create(&self, name: &str) -> io::Result<Arc<dyn StorageFile>> {
        let mut world = self.world()?;
        if world.names.contains_key(name) {
            return Err(io::Error::from(io::ErrorKind::AlreadyExists));
        }
        let id = world.next_file_id;
        world.next_file_id += 1;
        world.files.insert(id, FileImage::default());
        world.names.insert(name.to_owned(), id);
        Ok(Arc::new(FaultFile {
            storage: self.clone(),
            id,
        }))
    }

    fn list(&self) -> io::Result<Vec<String>> {
        Ok(self.world()?.names.keys().cloned().collect())
    }

    fn remove(&self, name: &str) -> io::Result<()> {
        self.world()?
            .names
            .remove(name)
            .map(|_| ())
            .ok_or_else(|| io::Error::from(io::ErrorKind::NotFound))
    }

    fn rename(&self, from: &str, to: &str) -> io::Result<()> {
        let mut world = self.world()?;
        let id = world
            .names
            .remove(from)
            .ok_or_else(|| io::Error::from(io::ErrorKind::NotFound))?;
        world.names.insert(to.to_owned(), id);
        Ok(())
    }

    fn sync_dir(&self) -> io::Result<()> {
        let mut world = self.world()?;
        world.durable_names = world.names.clone();
        Ok(())
    }
}

#[derive(Debug)]
struct FaultFile {
    storage: FaultStorage,
    id: u64,
}

impl FaultFile {
    fn with_image<T>(&self, f: impl FnOnce(&mut World, u64) -> io::Result<T>) -> io::Result<T> {
        let mut world = self.storage.world()?;
        f(&mut world, self.id)
    }
}

impl StorageFile for FaultFile {
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        self.with_image(|world, id| {
            world.read_count += 1;
            let current = &world.files[&id].current;
            let start = usize::try_from(offset).unwrap_or(usize::MAX);
            let end = start.saturating_add(buf.len());
            let src = current
                .get(start..end)
                .ok_or_else(|| io::Error::from(io::ErrorKind::UnexpectedEof))?;
            buf.copy_from_slice(src);
            Ok(())
        })
    }

    fn read_exact_at_cached(&self, buf: &mut [u8], offset: u64) -> io::Result<bool> {
        let mut world = self.storage.world()?;
        if world.reads_uncached {
            world.read_count += 1;
            return Ok(false);
        }
        drop(world);
        self.read_exact_at(buf, offset).map(|()| true)
    }

    fn write_all_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        self.with_image(|world, id| {
            let total: u64 = world.files.values().map(|f| f.current.len() as u64).sum();
            let file_len = world.files[&id].current.len() as u64;
            let growth = (offset + buf.len() as u64).saturating_sub(file_len);
            let mut data = buf;
            let mut full = false;
            if let Some(limit) = world.space_limit_bytes {
                if total + growth > limit {
                    let room = limit.saturating_sub(total);
                    let fits = (file_len + room).saturating_sub(offset) as usize;
                    data = &buf[..fits.min(buf.len())];
                    full = true;
                }
            }
            let image = world.files.get_mut(&id).expect("file image");
            if !data.is_empty() {
                write_into(&mut image.current, offset, data);
                image.pending.push(PendingOp::Write {
                    offset,
                    data: data.to_vec(),
                });
            }
            if full {
                return Err(io::Error::from_raw_os_error(28));
            }
            Ok(())
        })
    }

    fn sync_data(&self) -> io::Result<()> {
        let storage = &self.storage;
        let mut world = storage.world()?;
        if world.syncs_held {
            world.syncs_waiting += 1;
            storage.sync_gate.notify_all();
            while world.syncs_held {
                world = storage
                    .sync_gate
                    .wait(world)
                    .expect("fault storage mutex poisoned");
            }
            world.syncs_waiting -= 1;
        }
        // A crash may have happened while this call waited at the gate.
        if world.generation != storage.generation {
            return Err(stale_handle());
        }
        if std::mem::take(&mut world.fail_next_sync) {
            return Err(io::Error::from_raw_os_error(5));
        }
        world.sync_count += 1;
        let image = world.files.get_mut(&self.id).expect("file image");
        image.durable = image.current.clone();
        image.pending.clear();
        Ok(())
    }

    fn set_len(&self, len_bytes: u64) -> io::Result<()> {
        self.with_image(|world, id| {
            let image = world.files.get_mut(&id).expect("file image");
            image.current.resize(len_bytes as usize, 0);
            image.pending.push(PendingOp::SetLen(len_bytes));
            Ok(())
        })
    }

    fn len_bytes(&self) -> io::Result<u64> {
        self.with_image(|world, id| Ok(world.files[&id].current.len() as u64))
    }
}
