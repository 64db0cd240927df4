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
//!
//! A new pod's lock is taken before its row exists, and a removed pod's lock file is
//! unlinked after its row is deleted, so a process killed in between leaves a lock file no
//! row names. A mark beside it, `<run>/locks.new/<pod id>`, flock'ed from before the row
//! is written (or deleted) until the lock file is kept (or unlinked), finds these without
//! a look at every pod: the directory holds only pods being made or unmade, and a mark
//! nobody holds is such a leftover ([`PodLocks::clean_unrecorded`], which every reconcile
//! runs).

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
    /// The marks of pods being made or unmade (`<locks>.new`).
    new_dir: PathBuf,
    held: Mutex<HashMap<String, OwnedFd>>,
}

/// A pod lock taken for the duration of an operation; released on drop unless the engine
/// already held it before (then it stays held).
pub struct PodLock<'a> {
    locks: &'a PodLocks,
    id: String,
    taken: bool,
}

impl PodLock<'_> {
    /// Whether this guard took the lock (not: the engine held it already, and keeps it).
    pub(crate) fn took(&self) -> bool {
        self.taken
    }
}

impl Drop for PodLock<'_> {
    fn drop(&mut self) {
        if self.taken {
            self.locks.release(&self.id);
        }
    }
}

/// The mark of a pod whose row is being written or deleted (see the module's doc),
/// removed when dropped.
pub(crate) struct TransitionMark {
    path: PathBuf,
    _fd: OwnedFd,
}

impl Drop for TransitionMark {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

impl PodLocks {
    /// Locks under `dir` (created on first use).
    pub(crate) fn new(dir: PathBuf) -> PodLocks {
        let mut new_dir = dir.clone().into_os_string();
        new_dir.push(".new");
        PodLocks {
            dir,
            new_dir: new_dir.into(),
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

    /// Lock new pod `id` (see [`PodLocks::hold`]) under a mark that says it has no row
    /// yet; the mark goes when the returned guard is dropped (the row written, or the
    /// creation given up).
    pub(crate) fn hold_new(&self, id: &str) -> Result<TransitionMark> {
        let mark = self.mark(id)?;
        self.hold(id)?;
        Ok(mark)
    }

    /// Delete pod `id`'s row with `delete_row` (under the pod's lock, which the caller
    /// holds), then unlink its lock file: a process killed in between leaves a mark that
    /// the next reconcile finds, so the lock file does not outlive the pod.
    pub(crate) fn forget_with<T>(
        &self,
        id: &str,
        delete_row: impl FnOnce() -> Result<T>,
    ) -> Result<T> {
        let _mark = self.mark(id)?;
        let done = delete_row()?;
        crate::hooks::step("pod: row deleted");
        self.forget(id);
        Ok(done)
    }

    /// Mark pod `id` as being made or unmade, until the returned guard is dropped.
    fn mark(&self, id: &str) -> Result<TransitionMark> {
        let dir = &self.new_dir;
        std::fs::create_dir_all(dir).map_err(|e| Error::Os {
            what: format!("create {}", dir.display()),
            err: e,
        })?;
        let path = dir.join(id);
        let fd = open(&path)
            .and_then(|fd| rustix::fs::flock(&fd, FlockOperation::LockExclusive).map(|()| fd))
            .map_err(|e| Error::Os {
                what: format!("mark the pod {}", path.display()),
                err: e.into(),
            })?;
        Ok(TransitionMark { path, _fd: fd })
    }

    /// Remove the lock files of pods whose creator died before writing their row, or whose
    /// remover died after deleting it (`recorded` says whether a pod has one), and the
    /// marks of creators and removers that died at all. Costs one read of a directory that
    /// holds only pods being made or unmade.
    pub(crate) fn clean_unrecorded(&self, recorded: impl Fn(&str) -> bool) {
        let dir = &self.new_dir;
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for e in entries.flatten() {
            let Ok(id) = e.file_name().into_string() else {
                continue;
            };
            let path = dir.join(&id);
            let Ok(fd) = open(&path) else { continue };
            if rustix::fs::flock(&fd, FlockOperation::NonBlockingLockExclusive).is_err() {
                continue; // its creator or remover is at work
            }
            if !recorded(&id)
                && let Ok(Some(_lock)) = self.try_lock(&id)
            {
                self.forget(&id);
            }
            let _ = std::fs::remove_file(&path);
        }
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
    fn unrecorded_new_pods_of_dead_creators_lose_their_locks_and_live_ones_keep_them() {
        let t = tempfile::tempdir().unwrap();
        let locks = t.path().join("locks");
        let a = PodLocks::new(locks.clone());
        let b = PodLocks::new(locks.clone());
        // What a creator killed before its row leaves: a lock file and a mark, unheld.
        for id in ["dead", "dead-recorded"] {
            std::fs::create_dir_all(t.path().join("locks.new")).unwrap();
            std::fs::create_dir_all(&locks).unwrap();
            std::fs::write(locks.join(id), "").unwrap();
            std::fs::write(t.path().join("locks.new").join(id), "").unwrap();
        }
        // A creator at work.
        let mark = a.hold_new("alive").unwrap();
        b.clean_unrecorded(|id| id == "dead-recorded");
        let names = |d: &Path| {
            let mut v: Vec<String> = std::fs::read_dir(d)
                .unwrap()
                .map(|e| e.unwrap().file_name().into_string().unwrap())
                .collect();
            v.sort();
            v
        };
        assert_eq!(names(&locks), ["alive", "dead-recorded"]);
        assert_eq!(names(&t.path().join("locks.new")), ["alive"]);
        assert!(
            b.try_lock("alive").unwrap().is_none(),
            "still its creator's"
        );
        drop(mark);
        assert!(names(&t.path().join("locks.new")).is_empty());
    }

    #[test]
    fn a_removal_is_marked_until_its_lock_file_is_gone() {
        let t = tempfile::tempdir().unwrap();
        let a = PodLocks::new(t.path().join("locks"));
        let b = PodLocks::new(t.path().join("locks"));
        let marks = t.path().join("locks.new");
        let _g = a.lock("p").unwrap();
        // A failed deletion keeps the lock file and drops the mark.
        let err = a.forget_with("p", || -> Result<()> { Err(Error::Other("no".into())) });
        assert!(err.is_err());
        assert!(t.path().join("locks/p").exists());
        assert_eq!(std::fs::read_dir(&marks).unwrap().count(), 0);
        // While the row is deleted, the mark is there and held: a reconcile leaves it be.
        a.forget_with("p", || {
            assert!(
                rustix::fs::flock(
                    open(&marks.join("p")).unwrap(),
                    FlockOperation::NonBlockingLockExclusive
                )
                .is_err()
            );
            b.clean_unrecorded(|_| false);
            assert!(t.path().join("locks/p").exists());
            Ok(())
        })
        .unwrap();
        assert!(!t.path().join("locks/p").exists());
        assert_eq!(std::fs::read_dir(&marks).unwrap().count(), 0);
    }

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
