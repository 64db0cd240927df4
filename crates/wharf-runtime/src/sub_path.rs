//! Kubernetes' subPath, done safely: a path inside a volume bind-mounted on its own.
//!
//! The path is resolved inside its volume with `RESOLVE_IN_ROOT`, so a symlink that a
//! container planted in a shared volume cannot point the mount at a host path, and what
//! it resolved to is pinned by bind-mounting its fd onto a stage path: swapping the path
//! afterwards changes nothing (the kubelet's answer to CVE-2017-1002101). The pod's shim
//! stages a container's subPaths right before the runtime creates it, as the kubelet
//! prepares them at each start, so an app container mounts what its init containers made.

use std::fs;
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::Path;

use rustix::fs::{AtFlags, FileType, Mode, OFlags, StatxFlags};
use rustix::mount::UnmountFlags;

use crate::safe_path;

/// What [`stage`] does when the path is not in the volume.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Missing {
    /// Fail (docker's `volume-subpath`).
    Refuse,
    /// Make it a directory (the kubelet's subPath), writable by all when `world_writable`
    /// (as in an emptyDir).
    MakeDir { world_writable: bool },
}

/// Resolve `sub` inside `volume` (never leaving it), deal with a missing one as `missing`
/// says, and bind-mount what is there onto `stage`, which must not exist yet (see
/// [`clear`]).
pub fn stage(volume: &Path, sub: &Path, stage: &Path, missing: Missing) -> io::Result<()> {
    let root = rustix::fs::open(
        volume,
        OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )?;
    let fd: OwnedFd = match safe_path::lookup(root.as_fd(), sub) {
        Ok(fd) => fd,
        Err(e) if e.raw_os_error() == Some(libc::ENOENT) => {
            let Missing::MakeDir { world_writable } = missing else {
                return Err(e);
            };
            let fd = safe_path::mkdir_all(root.as_fd(), sub, 0o755)?;
            if world_writable {
                rustix::fs::chmod(
                    safe_path::proc_fd_path(&fd).as_c_str(),
                    Mode::from_raw_mode(0o777),
                )?;
            }
            fd
        }
        Err(e) => return Err(e),
    };
    let st = rustix::fs::fstat(&fd)?;
    let is_dir = FileType::from_raw_mode(st.st_mode) == FileType::Directory;
    if let Some(parent) = stage.parent() {
        fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(parent)?;
    }
    if is_dir {
        fs::DirBuilder::new().mode(0o700).create(stage)?;
    } else {
        fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(stage)?;
    }
    rustix::mount::mount_bind(safe_path::proc_fd_path(&fd).as_c_str(), stage).map_err(|e| {
        let _ = if is_dir {
            fs::remove_dir(stage)
        } else {
            fs::remove_file(stage)
        };
        io::Error::from(e)
    })
}

/// Unmount and remove a stage, if it is there. Only rmdir or unlink removes it, once it
/// is unmounted: nothing is ever deleted through a mount.
pub fn clear(stage: &Path) -> io::Result<()> {
    if fs::symlink_metadata(stage).is_err() {
        return Ok(());
    }
    unmount_stacked(stage)?;
    match fs::remove_dir(stage) {
        Err(e) if e.raw_os_error() == Some(libc::ENOTDIR) => fs::remove_file(stage),
        r => r,
    }
}

/// The id of the mount `path` is on (the path itself, not a symlink's target).
pub fn mount_id(path: &Path) -> io::Result<u64> {
    Ok(rustix::fs::statx(
        rustix::fs::CWD,
        path,
        AtFlags::SYMLINK_NOFOLLOW,
        StatxFlags::MNT_ID,
    )?
    .stx_mnt_id)
}

/// Unmount everything stacked at `path` (nothing there is fine).
pub fn unmount_stacked(path: &Path) -> io::Result<()> {
    let Some(parent) = path.parent() else {
        return Ok(());
    };
    for _ in 0..16 {
        match (mount_id(path), mount_id(parent)) {
            (Ok(a), Ok(b)) if a != b => {}
            _ => return Ok(()),
        }
        rustix::mount::unmount(path, UnmountFlags::DETACH | UnmountFlags::NOFOLLOW)?;
    }
    Err(io::Error::other(format!(
        "{} is still a mount point after 16 unmounts",
        path.display()
    )))
}
