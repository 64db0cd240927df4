//! Per-pod locks across processes: `<run>/locks/<pod id>`, flock'ed exclusively by whoever
//! changes the pod's sandbox or its set of containers (create, remove, reap, reconcile).
//!
//! They tell a reconciling process apart from a crashed one: a pod row in `creating` whose
//! lock is free was left by a process that died midway (flock locks die with their holder),
//! while a held lock means another CLI is still at work on it. Locks are re-entrant within
//! one engine (remove_pod removes containers under the lock it holds), and a process holds
//! at most the pods it is working on, waiting for no other while it does, so no cycle forms.
//!
//! A lock file is unlinked (while held) when its pod is removed; a process that was waiting
//! on it then finds the path gone or replaced, and locks the path anew.

use std::collections::HashMap;
use std::os::fd::OwnedFd;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use rustix::fs::{FlockOperation, Mode, OFlags};

use crate::error::{Error, Result};

/// The pod locks one engine holds.
pub(crate) struct PodLocks {
    dir: PathBuf,
    held: Mutex<HashMap<String, OwnedFd>>,
}

/// A pod lock taken for the duration of an operation; released on drop unless the engine
/// already held it before (then it stays held).
pub struct PodLock<'a> {
    locks: &'a PodLocks,
    id: String,
    taken: bool,
}

impl Drop for PodLock<'_> {
    fn drop(&mut self) {
        if self.taken {
            self.locks.release(&self.id);
        }
    }
}

impl PodLocks {
    /// Locks under `dir` (created on first use).
    pub(crate) fn new(dir: PathBuf) -> PodLocks {
        PodLocks {
            dir,
            held: Mutex::new(HashMap::new()),
        }
    }

    /// The directory of the lock files.
    pub(crate) fn dir(&self) -> &Path {
        &self.dir
    }

    fn path(&self, id: &str) -> PathBuf {
        self.dir.join(id)
    }

    fn held(&self) -> std::sync::MutexGuard<'_, HashMap<String, OwnedFd>> {
        self.held.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Lock pod `id`, waiting for another process that holds it.
    pub(crate) fn lock(&self, id: &str) -> Result<PodLock<'_>> {
        Ok(self.acquire(id, true)?.expect("a blocking lock is taken"))
    }

    /// Lock pod `id` unless another process holds it (None then).
    pub(crate) fn try_lock(&self, id: &str) -> Result<Option<PodLock<'_>>> {
        self.acquire(id, false)
    }

    /// Lock pod `id` and keep it until [`PodLocks::release_all`] (or the engine's end).
    pub(crate) fn hold(&self, id: &str) -> Result<()> {
        let mut g = self.lock(id)?;
        g.taken = false;
        Ok(())
    }

    /// Release every lock this engine holds.
    pub(crate) fn release_all(&self) {
        self.held().clear();
    }

    fn release(&self, id: &str) {
        self.held().remove(id);
    }

    /// Pod `id` is gone: unlink its lock file (while holding it) and let go of the lock.
    pub(crate) fn forget(&self, id: &str) {
        let _ = std::fs::remove_file(self.path(id));
        self.release(id);
    }

    fn acquire(&self, id: &str, wait: bool) -> Result<Option<PodLock<'_>>> {
        if self.held().contains_key(id) {
            return Ok(Some(PodLock {
                locks: self,
                id: id.to_string(),
                taken: false,
            }));
        }
        let path = self.path(id);
        let op = if wait {
            FlockOperation::LockExclusive
        } else {
            FlockOperation::NonBlockingLockExclusive
        };
        loop {
            let fd = match open(&path) {
                Err(rustix::io::Errno::NOENT) => {
                    std::fs::create_dir_all(&self.dir).map_err(|e| Error::Os {
                        what: format!("create {}", self.dir.display()),
                        err: e,
                    })?;
                    open(&path)
                }
                other => other,
            }
            .map_err(|e| Error::Os {
                what: format!("open the pod lock {}", path.display()),
                err: e.into(),
            })?;
            match rustix::fs::flock(&fd, op) {
                Ok(()) => {}
                Err(rustix::io::Errno::WOULDBLOCK) if !wait => return Ok(None),
                Err(e) => {
                    return Err(Error::Os {
                        what: format!("lock {}", path.display()),
                        err: e.into(),
                    });
                }
            }
            // The file may have been unlinked (its pod removed) while we waited: the lock is
            // only good if the path still names the file we locked.
            let ours = rustix::fs::fstat(&fd).map(|s| s.st_ino).ok();
            let now = std::fs::metadata(&path).map(|m| m.ino()).ok();
            if ours.is_some() && ours == now {
                self.held().insert(id.to_string(), fd);
                return Ok(Some(PodLock {
                    locks: self,
                    id: id.to_string(),
                    taken: true,
                }));
            }
        }
    }
}

fn open(path: &Path) -> rustix::io::Result<OwnedFd> {
    rustix::fs::open(
        path,
        OFlags::RDWR | OFlags::CREATE | OFlags::CLOEXEC | OFlags::NOFOLLOW,
        Mode::from_raw_mode(0o600),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn locks_exclude_other_holders_and_are_reentrant() {
        let t = tempfile::tempdir().unwrap();
        let a = PodLocks::new(t.path().join("locks"));
        let b = PodLocks::new(t.path().join("locks"));
        let g = a.lock("p1").unwrap();
        // Re-entrant in the same engine, exclusive against another one (own open file
        // description, as another process has).
        let inner = a.lock("p1").unwrap();
        drop(inner);
        assert!(b.try_lock("p1").unwrap().is_none());
        assert!(b.try_lock("p2").unwrap().is_some());
        drop(g);
        let g = b.try_lock("p1").unwrap().expect("released");
        drop(g);
        // Held locks stay held until released.
        a.hold("p3").unwrap();
        assert!(b.try_lock("p3").unwrap().is_none());
        a.release_all();
        assert!(b.try_lock("p3").unwrap().is_some());
    }

    #[test]
    fn a_removed_lock_file_is_not_trusted() {
        let t = tempfile::tempdir().unwrap();
        let a = PodLocks::new(t.path().join("locks"));
        let b = PodLocks::new(t.path().join("locks"));
        let g = a.lock("p").unwrap();
        std::thread::scope(|s| {
            let waiter = s.spawn(|| {
                let g = b.lock("p").unwrap();
                // The path names the file b locked.
                let ino = rustix::fs::fstat(&b.held()["p"]).unwrap().st_ino;
                assert_eq!(std::fs::metadata(b.path("p")).unwrap().ino(), ino);
                drop(g);
            });
            std::thread::sleep(std::time::Duration::from_millis(50));
            a.forget("p");
            drop(g);
            waiter.join().unwrap();
        });
    }
}
