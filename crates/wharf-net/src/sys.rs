//! Thin wrappers over the syscalls the network library needs (setns, unshare, mount,
//! flock, statx, O_TMPFILE) and small file helpers, kept together so the unsafe code is
//! easy to audit.
//!
//! The calls go through rustix, which checks arguments and returns errors as values, so
//! most wrappers here are safe code. What rustix cannot do safely stays `unsafe`, each
//! with its reason: unshare(2) (rustix marks it unsafe because of CLONE_FILES), a
//! pre_exec hook (std's contract), and two calls rustix has no wrapper for, netlink's
//! integer socket options and the nsfs NS_GET_NSTYPE ioctl.

use std::ffi::CString;
use std::fs::File;
use std::io::{self, Write};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::Command;

use rustix::fs::{AtFlags, CWD, Mode, OFlags, StatxAttributes, StatxFlags};
use rustix::io::Errno;
use rustix::mount::{MountPropagationFlags, UnmountFlags};
use rustix::thread::{LinkNameSpaceType, UnshareFlags};

use crate::error::{Context, Result};

/// A path as a C string (paths with NUL bytes are rejected). rustix would reject them
/// too, but as a bare EINVAL, which callers treat as "not mounted": this keeps the error
/// distinct and its message clear.
pub(crate) fn cpath(path: &Path) -> io::Result<CString> {
    CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "path contains a NUL byte"))
}

/// Move the calling thread into the network namespace `ns`.
pub(crate) fn setns_net(ns: BorrowedFd<'_>) -> io::Result<()> {
    Ok(rustix::thread::move_into_link_name_space(
        ns,
        Some(LinkNameSpaceType::Network),
    )?)
}

/// Give the calling thread a new, empty network namespace.
pub(crate) fn unshare_net() -> io::Result<()> {
    // SAFETY: rustix marks unshare unsafe only for CLONE_FILES (threads would stop sharing
    // their fd table and could see each other's descriptors vanish); CLONE_NEWNET changes
    // nothing but this thread's network namespace.
    Ok(unsafe { rustix::thread::unshare_unsafe(UnshareFlags::NEWNET) }?)
}

/// Make the child of `cmd` join the network namespace `ns` between fork and exec (CNI
/// plugins and the `nft` command run in the host namespace the caller chose). The child
/// uses its own duplicate of `ns` (close-on-exec, so the program does not inherit it),
/// so `ns` need not outlive the spawn.
pub(crate) fn join_netns_on_spawn(cmd: &mut Command, ns: BorrowedFd<'_>) -> io::Result<()> {
    let ns = ns.try_clone_to_owned()?;
    // SAFETY: the hook runs in the forked child, where only async-signal-safe work is
    // allowed: setns is a single system call, and its error becomes an io::Error from a
    // raw errno, which does not allocate. The descriptor is owned by the closure, so it
    // is open whenever the hook runs.
    unsafe {
        cmd.pre_exec(move || {
            rustix::thread::move_into_link_name_space(
                ns.as_fd(),
                Some(LinkNameSpaceType::Network),
            )?;
            Ok(())
        });
    }
    Ok(())
}

/// Bind-mount `src` onto `target` (with the mounts below `src` too when `recursive`).
pub(crate) fn bind_mount(src: &Path, target: &Path, recursive: bool) -> io::Result<()> {
    let (src, target) = (cpath(src)?, cpath(target)?);
    if recursive {
        rustix::mount::mount_bind_recursive(src.as_c_str(), target.as_c_str())?;
    } else {
        rustix::mount::mount_bind(src.as_c_str(), target.as_c_str())?;
    }
    Ok(())
}

/// Give the mount at `target` alone shared propagation (MS_SHARED).
pub(crate) fn make_shared(target: &Path) -> io::Result<()> {
    let target = cpath(target)?;
    Ok(rustix::mount::mount_change(
        target.as_c_str(),
        MountPropagationFlags::SHARED,
    )?)
}

/// Give the mount at `target`, and every mount below it, shared propagation
/// (MS_SHARED | MS_REC).
pub(crate) fn make_rshared(target: &Path) -> io::Result<()> {
    let target = cpath(target)?;
    Ok(rustix::mount::mount_change(
        target.as_c_str(),
        MountPropagationFlags::SHARED | MountPropagationFlags::REC,
    )?)
}

/// Lazily unmount `target` (never following a symlink there).
pub(crate) fn umount_detach(target: &Path) -> io::Result<()> {
    let target = cpath(target)?;
    Ok(rustix::mount::unmount(
        target.as_c_str(),
        UnmountFlags::DETACH | UnmountFlags::NOFOLLOW,
    )?)
}

/// Whether `path` is the root of a mount (statx STATX_ATTR_MOUNT_ROOT, Linux 5.8+).
pub(crate) fn is_mount_root(path: &Path) -> io::Result<bool> {
    let c = cpath(path)?;
    let stx = rustix::fs::statx(
        CWD,
        c.as_c_str(),
        AtFlags::SYMLINK_NOFOLLOW,
        StatxFlags::BASIC_STATS,
    )?;
    if !stx
        .stx_attributes_mask
        .contains(StatxAttributes::MOUNT_ROOT)
    {
        return Err(io::Error::new(
            io::ErrorKind::Unsupported,
            "the kernel does not report mount roots (statx, Linux 5.8+)",
        ));
    }
    Ok(stx.stx_attributes.contains(StatxAttributes::MOUNT_ROOT))
}

/// The filesystem magic of an open file (fstatfs f_type), comparable with
/// [`wharf_sys::fs::NSFS_MAGIC`].
pub(crate) fn fs_magic(fd: BorrowedFd<'_>) -> io::Result<u64> {
    Ok(rustix::fs::fstatfs(fd)?.f_type as u64)
}

/// The kind of namespace an nsfs file is (its CLONE_NEW* flag), from the NS_GET_NSTYPE
/// ioctl (Linux 4.11+). rustix has no wrapper for it.
pub(crate) fn ns_type(fd: BorrowedFd<'_>) -> io::Result<libc::c_int> {
    /// `_IO(0xb7, 0x3)` from `linux/nsfs.h`.
    const NS_GET_NSTYPE: libc::c_ulong = 0xb703;
    // SAFETY: an ioctl without argument on a descriptor the borrow keeps open; the kernel
    // only returns an int (or fails with ENOTTY on files that are not nsfs).
    wharf_sys::cvt(unsafe { libc::ioctl(fd.as_raw_fd(), NS_GET_NSTYPE as _) })
}

/// Set an integer socket option that rustix has no wrapper for (netlink's
/// NETLINK_EXT_ACK and NETLINK_CAP_ACK).
pub(crate) fn set_sockopt_int(
    fd: BorrowedFd<'_>,
    level: libc::c_int,
    name: libc::c_int,
    value: libc::c_int,
) -> io::Result<()> {
    // SAFETY: the option value points at a live c_int and the length given is its size;
    // the borrow keeps the descriptor open for the call.
    wharf_sys::cvt(unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            level,
            name,
            (&raw const value).cast::<libc::c_void>(),
            size_of::<libc::c_int>() as libc::socklen_t,
        )
    })
    .map(drop)
}

pub(crate) use wharf_sys::lock::FileLock;

/// [`FileLock::exclusive`], its error naming the lock file.
pub(crate) fn lock_exclusive(path: &Path) -> Result<FileLock> {
    FileLock::exclusive(path).map_err(|e| crate::Error::os(format!("lock {}", path.display()), e))
}

/// [`FileLock::shared`], its error naming the lock file.
pub(crate) fn lock_shared(path: &Path) -> Result<FileLock> {
    FileLock::shared(path).map_err(|e| crate::Error::os(format!("lock {}", path.display()), e))
}

/// Write `data` to `path` atomically ([`wharf_sys::fs::write_atomic`]: a temporary file in
/// the same directory renamed over the target), so readers (and a restart after a crash)
/// see the old or the new content, never a torn one. Creates the directory if needed.
/// `mode` is the new file's permissions (before the umask); no fsync: the state is
/// rebuilt or repaired after a machine crash anyway.
pub(crate) fn write_atomic(path: &Path, data: &[u8], mode: u32) -> Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir).ctx(|| format!("create {}", dir.display()))?;
    wharf_sys::fs::write_atomic(path, data, mode, wharf_sys::fs::Durability::Rename)
        .ctx(|| format!("write {}", path.display()))
}

/// Create `path` (in `dir`) holding `data`, only if it does not exist, and only complete: the
/// file is written unnamed (O_TMPFILE) and then linked into place, so a process killed
/// midway leaves nothing. Ok(Some(true)) if created, Ok(Some(false)) if `path` exists,
/// Ok(None) if the filesystem has no O_TMPFILE (the caller falls back).
pub(crate) fn create_complete(dir: &Path, path: &Path, data: &[u8]) -> io::Result<Option<bool>> {
    let cdir = cpath(dir)?;
    let fd = match rustix::fs::open(
        cdir.as_c_str(),
        OFlags::TMPFILE | OFlags::WRONLY | OFlags::CLOEXEC,
        Mode::from_raw_mode(0o644),
    ) {
        Ok(fd) => fd,
        Err(Errno::OPNOTSUPP | Errno::ISDIR | Errno::INVAL) => return Ok(None),
        Err(e) => return Err(e.into()),
    };
    let mut f = File::from(fd);
    f.write_all(data)?;
    // Linking the descriptor itself (linkat AT_EMPTY_PATH) needs CAP_DAC_READ_SEARCH;
    // its /proc magic link, followed, does not.
    let src = cpath(Path::new(&format!("/proc/self/fd/{}", f.as_raw_fd())))?;
    let dst = cpath(path)?;
    match rustix::fs::linkat(
        CWD,
        src.as_c_str(),
        CWD,
        dst.as_c_str(),
        AtFlags::SYMLINK_FOLLOW,
    ) {
        Ok(()) => Ok(Some(true)),
        Err(Errno::EXIST) => Ok(Some(false)),
        Err(e) => Err(e.into()),
    }
}

/// Remove what [`write_atomic`] left of `path` in a process that was killed before its
/// rename (`.<name>.tmp-<pid>-<n>`, the names [`wharf_sys::fs::write_atomic`] gives its
/// temporary files). Only for callers that hold the lock under which `path` is written,
/// so no temporary file can be in use.
pub(crate) fn remove_stale_temps(path: &Path) {
    let (Some(dir), Some(name)) = (path.parent(), path.file_name()) else {
        return;
    };
    let prefix = format!(".{}.tmp-", name.to_string_lossy());
    if let Ok(entries) = std::fs::read_dir(dir) {
        for e in entries.flatten() {
            if e.file_name().to_string_lossy().starts_with(&prefix) {
                let _ = std::fs::remove_file(e.path());
            }
        }
    }
}

/// Remove a file; a missing file is fine (teardown is idempotent).
pub(crate) fn remove_file_if_exists(path: &Path) -> Result<()> {
    match std::fs::remove_file(path) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => {
            Err(crate::Error::os(format!("remove {}", path.display()), e))
        }
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn files_are_replaced_whole_created_once_and_temps_cleaned() {
        let tmp = tempfile::tempdir().unwrap();
        let p = tmp.path().join("sub/state.json");
        write_atomic(&p, b"one", 0o600).unwrap();
        write_atomic(&p, b"two", 0o600).unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), b"two");
        let mode = std::fs::metadata(&p).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        // What a writer killed before its rename leaves goes; the file stays.
        std::fs::write(tmp.path().join("sub/.state.json.tmp-999999-0"), "{").unwrap();
        remove_stale_temps(&p);
        let names: Vec<_> = std::fs::read_dir(tmp.path().join("sub"))
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, ["state.json"]);

        let lease = tmp.path().join("10.0.0.2");
        // None: no O_TMPFILE where the temporary directory is (the caller falls back).
        if let Some(created) = create_complete(tmp.path(), &lease, b"pod-a").unwrap() {
            assert!(created);
            let again = create_complete(tmp.path(), &lease, b"pod-b").unwrap();
            assert_eq!(again, Some(false));
            assert_eq!(std::fs::read(&lease).unwrap(), b"pod-a");
        }
    }

    #[test]
    fn namespace_files_mount_roots_and_locks() {
        let net = File::open("/proc/self/ns/net").unwrap();
        let uts = File::open("/proc/self/ns/uts").unwrap();
        let plain = File::open("/proc/self/status").unwrap();
        assert_eq!(fs_magic(net.as_fd()).unwrap(), wharf_sys::fs::NSFS_MAGIC);
        assert_ne!(fs_magic(plain.as_fd()).unwrap(), wharf_sys::fs::NSFS_MAGIC);
        assert_eq!(ns_type(net.as_fd()).unwrap(), libc::CLONE_NEWNET);
        assert_eq!(ns_type(uts.as_fd()).unwrap(), libc::CLONE_NEWUTS);
        assert!(ns_type(plain.as_fd()).is_err());

        assert!(is_mount_root(Path::new("/proc")).unwrap());
        let tmp = tempfile::tempdir().unwrap();
        assert!(!is_mount_root(tmp.path()).unwrap());
        let e = umount_detach(&tmp.path().join("missing")).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::ENOENT));
        let e = umount_detach(Path::new("a\0b")).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput);

        let lock = tmp.path().join("locks/net.lock");
        drop(lock_exclusive(&lock).unwrap());
        let _again = lock_exclusive(&lock).unwrap();
        let e = lock_shared(Path::new("/proc/version/not/a.lock")).unwrap_err();
        assert!(e.to_string().contains("/proc/version/not/a.lock"), "{e}");
    }
}
