//! A pod's volume directory (`<root>/pods/<pod>/volumes`): what a played manifest's
//! volumes leave on the host, and removing it without ever deleting through a mount. The
//! volumes are created by `wharf-kube`; the engine removes them with their pod (also when
//! reconciling a removal a crash interrupted), so the layout's one definition is here.
//!
//! ```text
//! <dir>/<volume>                    emptyDir, configMap, secret, downwardAPI volumes
//! <dir>/.subpaths/<id>/<n>          container id's mount n, a path inside a volume (a
//!                                   pod volume, a hostPath or a named volume), staged
//! ```
//!
//! A mount of a path inside a volume (Kubernetes' subPath) is a bind of its stage; the
//! pod's shim stages it right before it creates the container, each time (see
//! `wharf_runtime::sub_path`), and it is released with the container or its pod.

use std::fs;
use std::path::{Path, PathBuf};

use wharf_runtime::sub_path::{self, mount_id};

use crate::error::{Context, Error, Result};

/// The volume directory below a pod's directory.
pub const VOLUMES: &str = "volumes";

/// The directory of staged subPaths below a pod's volume directory.
pub const SUBPATHS: &str = ".subpaths";

/// Unmount and delete everything the volume creation made below `dir`, and `dir` itself.
/// Idempotent (for `wharf play --down` after a crash); never follows a symlink and never
/// deletes below a mount point it could not unmount.
pub fn remove_volumes(dir: &Path) -> Result<()> {
    if fs::symlink_metadata(dir).is_err() {
        return Ok(());
    }
    unmount_volumes(dir)?;
    let dev = mount_id(dir).ctx(|| format!("stat {}", dir.display()))?;
    remove_tree(dir, dev)
}

/// Unmount what the volume creation and the stages mounted below `dir` (a tmpfs volume
/// loses its files, as it does at a reboot), keeping what is on the disk: a pod whose
/// sandbox died may be restored with its disk volumes, as the kubelet keeps an emptyDir
/// for as long as its pod. Idempotent.
pub fn unmount_volumes(dir: &Path) -> Result<()> {
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
    Ok(())
}

/// The mount kind of a path inside a volume on the host (its source: the volume's host
/// directory; the path: the `subpath=` option; made writable by all when missing with
/// [`WORLD_WRITABLE`], as in an emptyDir). A named volume's mount takes the same option.
pub const SUB_PATH_KIND: &str = "subpath";
/// The option of a [`SUB_PATH_KIND`] mount inside an emptyDir.
pub const WORLD_WRITABLE: &str = "world-writable";
/// The option of a mount whose path must be in its volume already (docker's
/// `volume-subpath`); without it a missing one is made, as the kubelet makes it.
pub const MUST_EXIST: &str = "subpath-must-exist";

/// Where container `id`'s subPaths are staged, below the volume directory `dir` of its
/// pod.
pub fn stages_dir(dir: &Path, id: &str) -> PathBuf {
    dir.join(SUBPATHS).join(id)
}

/// Unmount and remove what the shim staged in `stages` (one directory of staged
/// subPaths), and the directory itself. Idempotent; never deletes through a mount: what
/// it could not unmount stays, and the error says so.
pub fn release_stages(stages: &Path) -> Result<()> {
    for staged in read_dir(stages) {
        sub_path::clear(&staged).ctx(|| format!("remove the stage {}", staged.display()))?;
    }
    match fs::remove_dir(stages) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
            Err(e).ctx(|| format!("remove {}", stages.display()))
        }
        _ => Ok(()),
    }
}

fn read_dir(dir: &Path) -> Vec<PathBuf> {
    fs::read_dir(dir)
        .map(|r| r.filter_map(|e| e.ok().map(|e| e.path())).collect())
        .unwrap_or_default()
}

/// Unmount everything stacked at `path` (nothing there is fine).
fn unmount(path: &Path) -> Result<()> {
    sub_path::unmount_stacked(path).ctx(|| format!("unmount {}", path.display()))
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
