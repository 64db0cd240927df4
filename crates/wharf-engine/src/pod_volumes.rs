//! A pod's volume directory (`<root>/pods/<pod>/volumes`): what a played manifest's
//! volumes leave on the host, and removing it without ever deleting through a mount. The
//! volumes are created by `wharf-kube`; the engine removes them with their pod (also when
//! reconciling a removal a crash interrupted), so the layout's one definition is here.
//!
//! ```text
//! <dir>/<volume>                    emptyDir, configMap, secret, downwardAPI volumes
//! <dir>/.subpaths/<container>/<n>   a mount's subPath, bind-mounted from inside its volume
//! ```

use std::fs;
use std::path::{Path, PathBuf};

use rustix::fs::{AtFlags, StatxFlags};
use rustix::mount::UnmountFlags;

use crate::error::{Context, Error, Result};

/// The directory of staged subPaths below a pod's volume directory.
pub const SUBPATHS: &str = ".subpaths";

/// Unmount and delete everything the volume creation made below `dir`, and `dir` itself.
/// Idempotent (for `wharf play --down` after a crash); never follows a symlink and never
/// deletes below a mount point it could not unmount.
pub fn remove_volumes(dir: &Path) -> Result<()> {
    if fs::symlink_metadata(dir).is_err() {
        return Ok(());
    }
    // Staged subPaths first, then tmpfs volumes.
    let subpaths = dir.join(SUBPATHS);
    for container in read_dir(&subpaths) {
        for staged in read_dir(&container) {
            unmount(&staged)?;
        }
    }
    for v in read_dir(dir) {
        unmount(&v)?;
    }
    let dev = mount_id(dir).ctx(|| format!("stat {}", dir.display()))?;
    remove_tree(dir, dev)
}

fn read_dir(dir: &Path) -> Vec<PathBuf> {
    fs::read_dir(dir)
        .map(|r| r.filter_map(|e| e.ok().map(|e| e.path())).collect())
        .unwrap_or_default()
}

pub fn mount_id(path: &Path) -> std::io::Result<u64> {
    Ok(rustix::fs::statx(
        rustix::fs::CWD,
        path,
        AtFlags::SYMLINK_NOFOLLOW,
        StatxFlags::MNT_ID,
    )?
    .stx_mnt_id)
}

/// Unmount everything stacked at `path` (nothing there is fine).
fn unmount(path: &Path) -> Result<()> {
    let Some(parent) = path.parent() else {
        return Ok(());
    };
    for _ in 0..16 {
        match (mount_id(path), mount_id(parent)) {
            (Ok(a), Ok(b)) if a != b => {}
            _ => return Ok(()),
        }
        rustix::mount::unmount(path, UnmountFlags::DETACH | UnmountFlags::NOFOLLOW)
            .ctx(|| format!("unmount {}", path.display()))?;
    }
    Err(Error::Other(format!(
        "{} is still a mount point after 16 unmounts",
        path.display()
    )))
}

/// `rm -r` that stays on the mount `mnt` (refusing to descend into anything else).
fn remove_tree(path: &Path, mnt: u64) -> Result<()> {
    let meta = fs::symlink_metadata(path).ctx(|| format!("stat {}", path.display()))?;
    if meta.is_dir() {
        if mount_id(path).ctx(|| format!("stat {}", path.display()))? != mnt {
            return Err(Error::Other(format!(
                "not removing {}: it is a mount point",
                path.display()
            )));
        }
        for e in fs::read_dir(path).ctx(|| format!("read {}", path.display()))? {
            let e = e.ctx(|| format!("read {}", path.display()))?;
            remove_tree(&e.path(), mnt)?;
        }
        fs::remove_dir(path).ctx(|| format!("remove {}", path.display()))
    } else {
        if mount_id(path).ctx(|| format!("stat {}", path.display()))? != mnt {
            return Err(Error::Other(format!(
                "not removing {}: it is a mount point",
                path.display()
            )));
        }
        fs::remove_file(path).ctx(|| format!("remove {}", path.display()))
    }
}
