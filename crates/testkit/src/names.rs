//! Names and places unique to one test: queue (and table) names, and scratch directories.
//!
//! Names carry the process id, the clock and a counter: tests of one binary run in parallel,
//! and some resources outlive the process (tables in the machine's PostgreSQL), so neither a
//! counter alone nor the process id alone would do.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

static NEXT_NAME: AtomicU64 = AtomicU64::new(0);

/// A name that starts with `prefix` (so logs are easy to read) and is unique to this call:
/// `{prefix}_{process}_{nanos}_{count}`. Only letters, digits, `_` and what `prefix` holds, so
/// it serves as an SQS queue name and an SQL identifier alike.
pub fn unique_name(prefix: &str) -> String {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|elapsed| elapsed.subsec_nanos())
        .unwrap_or_default();
    let count = NEXT_NAME.fetch_add(1, Ordering::Relaxed);
    format!("{prefix}_{}_{nanos}_{count}", std::process::id())
}

/// A directory of a test's own, removed when dropped unless the test is failing: what a
/// failed test leaves (a server's data and logs) is kept for a look.
#[derive(Debug)]
pub struct ScratchDir {
    path: PathBuf,
}

impl ScratchDir {
    /// `parent/name`, emptied of what an earlier run left there. Tests pass
    /// `env!("CARGO_TARGET_TMPDIR")` as `parent`.
    pub fn new(parent: impl AsRef<Path>, name: &str) -> ScratchDir {
        let path = parent.as_ref().join(name);
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir_all(&path)
            .unwrap_or_else(|error| panic!("creating {}: {error}", path.display()));
        ScratchDir { path }
    }

    /// A fresh directory under the system's temporary directory, named by [`unique_name`].
    pub fn unique(prefix: &str) -> ScratchDir {
        ScratchDir::new(std::env::temp_dir(), &unique_name(prefix))
    }

    /// Where it is.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for ScratchDir {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            let _ = std::fs::remove_dir_all(&self.path);
        }
    }
}
