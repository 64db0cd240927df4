//! The GC lock: `<root>/image/gc.lock`, flock'ed shared by every operation that makes
//! content reachable (commit a blob or snapshot and record who holds it) and exclusive by
//! garbage collection while it marks and sweeps. flock locks die with their process, so a
//! killed pull never blocks GC.

use std::path::{Path, PathBuf};

use wharf_sys::lock::FileLock;

use crate::error::{IoContext, Result};

/// The lock file.
#[derive(Clone, Debug)]
pub struct GcLock {
    path: PathBuf,
}

/// Held while committing content; GC waits for it.
pub struct SharedGuard {
    _lock: FileLock,
}

/// Held by GC.
pub struct ExclusiveGuard {
    _lock: FileLock,
}

impl GcLock {
    /// The lock at `path`.
    pub fn new(path: &Path) -> GcLock {
        GcLock {
            path: path.to_path_buf(),
        }
    }

    /// Take the lock shared (blocks while GC runs).
    pub fn shared(&self) -> Result<SharedGuard> {
        let lock =
            FileLock::shared(&self.path).ctx(|| format!("locking {}", self.path.display()))?;
        Ok(SharedGuard { _lock: lock })
    }

    /// Take the lock exclusive (blocks while content is being committed).
    pub fn exclusive(&self) -> Result<ExclusiveGuard> {
        let lock =
            FileLock::exclusive(&self.path).ctx(|| format!("locking {}", self.path.display()))?;
        Ok(ExclusiveGuard { _lock: lock })
    }
}
