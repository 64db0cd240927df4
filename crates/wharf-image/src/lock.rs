//! The GC lock: `<root>/image/gc.lock`, flock'ed shared by every operation that makes
//! content reachable (commit a blob or snapshot and record who holds it) and exclusive by
//! garbage collection while it marks and sweeps. flock locks die with their process, so a
//! killed pull never blocks GC.

use std::fs::File;
use std::path::{Path, PathBuf};

use rustix::fs::FlockOperation;

use crate::error::{IoContext, Result};

/// The lock file.
#[derive(Clone, Debug)]
pub struct GcLock {
    path: PathBuf,
}

/// Held while committing content; GC waits for it.
pub struct SharedGuard {
    _f: File,
}

/// Held by GC.
pub struct ExclusiveGuard {
    _f: File,
}

impl GcLock {
    /// The lock at `path`.
    pub fn new(path: &Path) -> GcLock {
        GcLock {
            path: path.to_path_buf(),
        }
    }

    fn open(&self) -> Result<File> {
        File::options()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&self.path)
            .ctx(|| format!("opening {}", self.path.display()))
    }

    /// Take the lock shared (blocks while GC runs).
    pub fn shared(&self) -> Result<SharedGuard> {
        let f = self.open()?;
        rustix::fs::flock(&f, FlockOperation::LockShared)
            .ctx(|| format!("locking {}", self.path.display()))?;
        Ok(SharedGuard { _f: f })
    }

    /// Take the lock exclusive (blocks while content is being committed).
    pub fn exclusive(&self) -> Result<ExclusiveGuard> {
        let f = self.open()?;
        rustix::fs::flock(&f, FlockOperation::LockExclusive)
            .ctx(|| format!("locking {}", self.path.display()))?;
        Ok(ExclusiveGuard { _f: f })
    }
}
