//! `run --rm` in the foreground: the CLI removes the container when it exits. Should the
//! CLI die first (a closed terminal, kill -9), the container must still go, as with
//! docker, whose daemon removes it. The CLI holds an exclusive lock on a file of the
//! container's for as long as it runs; a later command's reconcile removes an exited
//! container whose file is there but unlocked (its CLI is gone), and leaves alone one whose
//! CLI still holds it (that CLI is about to read the exit and remove it itself). The files
//! live in one directory, so that a command's reconcile looks at one (usually empty)
//! directory rather than at a file per container.

use std::fs::File;
use std::path::PathBuf;

use crate::db::ContainerRow;
use crate::engine::Engine;
use crate::error::{Context, Result};
use crate::model::ContainerState;

/// Held by a foreground `run --rm` while it runs.
pub struct RmGuard {
    _lock: wharf_sys::lock::FileLock,
}

impl Engine {
    fn rm_guards_dir(&self) -> PathBuf {
        self.paths.run.join("rm-guards")
    }

    fn rm_guard_path(&self, id: &str) -> PathBuf {
        self.rm_guards_dir().join(id)
    }

    /// Forget container `id`'s mark (it is removed).
    pub(crate) fn drop_rm_guard(&self, id: &str) {
        let _ = std::fs::remove_file(self.rm_guard_path(id));
    }

    /// The ids of the containers marked for removal on exit.
    pub(crate) fn rm_guarded(&self) -> Vec<String> {
        std::fs::read_dir(self.rm_guards_dir())
            .map(|rd| {
                rd.flatten()
                    .filter_map(|e| e.file_name().into_string().ok())
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Mark container `id` for removal once it has exited, and hold the mark while this
    /// process lives.
    pub fn hold_rm_guard(&self, id: &str) -> Result<RmGuard> {
        let path = self.rm_guard_path(id);
        let lock = wharf_sys::lock::FileLock::exclusive(&path)
            .ctx(|| format!("lock {}", path.display()))?;
        Ok(RmGuard { _lock: lock })
    }

    /// Whether `c` is an exited `run --rm` container whose CLI is gone.
    pub(crate) fn orphaned_rm(&self, c: &ContainerRow) -> bool {
        let Ok(file) = File::open(self.rm_guard_path(&c.id)) else {
            return false;
        };
        if rustix::fs::flock(&file, rustix::fs::FlockOperation::NonBlockingLockExclusive).is_err() {
            return false;
        }
        // Its exit may be known only to its shim yet.
        self.refresh(c)
            .is_ok_and(|now| now.state == ContainerState::Exited)
    }
}
