//! Lock files: an flock(2) on a file kept for locking, held as long as the [`FileLock`]
//! lives. The kernel drops the lock when the process dies, so a killed command never
//! leaves anything locked and no stale lock has to be broken.

use std::fs::File;
use std::io;
use std::path::Path;

use rustix::fs::FlockOperation;

/// A held lock on a lock file, released when dropped.
#[derive(Debug)]
pub struct FileLock {
    _file: File,
}

impl FileLock {
    /// Block until the lock on `path` (created, with its directory, if missing) is ours
    /// alone.
    pub fn exclusive(path: &Path) -> io::Result<FileLock> {
        Self::take(path, FlockOperation::LockExclusive)
    }

    /// Block until no one holds the lock on `path` alone, then hold it with whoever else
    /// shares it.
    pub fn shared(path: &Path) -> io::Result<FileLock> {
        Self::take(path, FlockOperation::LockShared)
    }

    fn take(path: &Path, op: FlockOperation) -> io::Result<FileLock> {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)?;
        }
        let file = File::options()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)?;
        loop {
            match rustix::fs::flock(&file, op) {
                Ok(()) => return Ok(FileLock { _file: file }),
                Err(rustix::io::Errno::INTR) => continue,
                Err(e) => return Err(e.into()),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;
    use std::time::Duration;

    #[test]
    fn shared_locks_coexist_and_an_exclusive_one_waits_for_them() {
        let t = tempfile::tempdir().unwrap();
        let path = t.path().join("sub/dir/the.lock");
        let a = FileLock::shared(&path).unwrap();
        let b = FileLock::shared(&path).unwrap();
        let (tx, rx) = mpsc::channel();
        let p = path.clone();
        let waiter = std::thread::spawn(move || {
            let held = FileLock::exclusive(&p).unwrap();
            tx.send(()).unwrap();
            drop(held);
        });
        assert!(
            rx.recv_timeout(Duration::from_millis(200)).is_err(),
            "the exclusive lock was granted while two shared ones were held"
        );
        drop(a);
        assert!(
            rx.recv_timeout(Duration::from_millis(200)).is_err(),
            "the exclusive lock was granted while a shared one was held"
        );
        drop(b);
        rx.recv_timeout(Duration::from_secs(5))
            .expect("the exclusive lock was not granted once the shared ones were dropped");
        waiter.join().unwrap();
        // Held alone, it keeps a shared taker out until dropped.
        let alone = FileLock::exclusive(&path).unwrap();
        let (tx, rx) = mpsc::channel();
        let p = path.clone();
        let waiter = std::thread::spawn(move || {
            let _s = FileLock::shared(&p).unwrap();
            tx.send(()).unwrap();
        });
        assert!(rx.recv_timeout(Duration::from_millis(200)).is_err());
        drop(alone);
        rx.recv_timeout(Duration::from_secs(5)).unwrap();
        waiter.join().unwrap();
    }
}
