//! Thin wrappers over the syscalls the network library needs (setns, unshare, mount,
//! flock) and small file helpers, kept together so the unsafe code is easy to audit.

use std::ffi::CString;
use std::fs::File;
use std::io::{self, Write};
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use crate::error::{Context, Result};

fn cvt(ret: libc::c_int) -> io::Result<libc::c_int> {
    if ret == -1 {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret)
    }
}

/// A path as a C string (paths with NUL bytes are rejected).
pub(crate) fn cpath(path: &Path) -> io::Result<CString> {
    CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "path contains a NUL byte"))
}

/// Move the calling thread into the network namespace `ns`.
pub(crate) fn setns_net(ns: BorrowedFd<'_>) -> io::Result<()> {
    // SAFETY: setns on a valid fd; CLONE_NEWNET only changes this thread's namespace.
    cvt(unsafe { libc::setns(ns.as_raw_fd(), libc::CLONE_NEWNET) }).map(drop)
}

/// Give the calling thread a new, empty network namespace.
pub(crate) fn unshare_net() -> io::Result<()> {
    // SAFETY: unshare with CLONE_NEWNET only affects the calling thread.
    cvt(unsafe { libc::unshare(libc::CLONE_NEWNET) }).map(drop)
}

/// mount(2) with optional source and filesystem type.
pub(crate) fn mount(
    src: Option<&Path>,
    target: &Path,
    fstype: Option<&str>,
    flags: libc::c_ulong,
) -> io::Result<()> {
    let src = src.map(cpath).transpose()?;
    let target = cpath(target)?;
    let fstype = fstype.map(|t| CString::new(t).expect("fs type without NUL"));
    // SAFETY: valid C strings or NULL; no data argument.
    cvt(unsafe {
        libc::mount(
            src.as_ref().map_or(std::ptr::null(), |s| s.as_ptr()),
            target.as_ptr(),
            fstype.as_ref().map_or(std::ptr::null(), |s| s.as_ptr()),
            flags,
            std::ptr::null(),
        )
    })
    .map(drop)
}

/// Lazily unmount `target`.
pub(crate) fn umount_detach(target: &Path) -> io::Result<()> {
    let target = cpath(target)?;
    // SAFETY: valid C string.
    cvt(unsafe { libc::umount2(target.as_ptr(), libc::MNT_DETACH | libc::UMOUNT_NOFOLLOW) })
        .map(drop)
}

/// Whether `path` is the root of a mount (statx STATX_ATTR_MOUNT_ROOT, Linux 5.8+).
pub(crate) fn is_mount_root(path: &Path) -> io::Result<bool> {
    let c = cpath(path)?;
    // SAFETY: statx fills a zeroed struct of the right type.
    let mut stx: libc::statx = unsafe { std::mem::zeroed() };
    cvt(unsafe {
        libc::statx(
            libc::AT_FDCWD,
            c.as_ptr(),
            libc::AT_SYMLINK_NOFOLLOW,
            libc::STATX_BASIC_STATS,
            &mut stx,
        )
    })?;
    let attr = libc::STATX_ATTR_MOUNT_ROOT as u64;
    if stx.stx_attributes_mask & attr == 0 {
        return Err(io::Error::new(
            io::ErrorKind::Unsupported,
            "the kernel does not report mount roots (statx, Linux 5.8+)",
        ));
    }
    Ok(stx.stx_attributes & attr != 0)
}

/// The filesystem magic of an open file (fstatfs f_type).
pub(crate) fn fs_magic(fd: BorrowedFd<'_>) -> io::Result<i64> {
    // SAFETY: fstatfs fills a zeroed struct of the right type.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    cvt(unsafe { libc::fstatfs(fd.as_raw_fd(), &mut st) })?;
    Ok(st.f_type as i64)
}

/// NSFS_MAGIC: the filesystem of namespace files (/proc/<pid>/ns/*, and their bind mounts).
pub(crate) const NSFS_MAGIC: i64 = 0x6e73_6673;

/// An exclusive flock(2) on a lock file, released when dropped (also when the process dies,
/// so a crash never leaves a network locked).
pub struct FileLock {
    _file: File,
}

impl FileLock {
    /// Block until the lock on `path` (created if missing, with its directory) is ours.
    pub fn exclusive(path: &Path) -> Result<FileLock> {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).ctx(|| format!("create {}", dir.display()))?;
        }
        let file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(path)
            .ctx(|| format!("open lock file {}", path.display()))?;
        loop {
            // SAFETY: flock on an fd we own.
            match cvt(unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX) }) {
                Ok(_) => return Ok(FileLock { _file: file }),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(crate::Error::os(format!("lock {}", path.display()), e)),
            }
        }
    }
}

/// Write `data` to `path` atomically: a temporary file in the same directory renamed over
/// the target, so readers (and a restart after a crash) see the old or the new content,
/// never a torn one.
pub(crate) fn write_atomic(path: &Path, data: &[u8]) -> Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir).ctx(|| format!("create {}", dir.display()))?;
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy())
        .unwrap_or_default();
    static SEQ: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = SEQ.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let tmp: PathBuf = dir.join(format!(".{name}.tmp-{}-{n}", std::process::id()));
    let write = || -> io::Result<()> {
        let mut f = File::create(&tmp)?;
        f.write_all(data)?;
        std::fs::rename(&tmp, path)
    };
    write().map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        crate::Error::os(format!("write {}", path.display()), e)
    })
}

/// Create `path` (in `dir`) holding `data`, only if it does not exist, and only complete: the
/// file is written unnamed (O_TMPFILE) and then linked into place, so a process killed
/// midway leaves nothing. Ok(Some(true)) if created, Ok(Some(false)) if `path` exists,
/// Ok(None) if the filesystem has no O_TMPFILE (the caller falls back).
pub(crate) fn create_complete(dir: &Path, path: &Path, data: &[u8]) -> io::Result<Option<bool>> {
    let cdir = cpath(dir)?;
    // SAFETY: open(2) with a valid C string.
    let fd = unsafe {
        libc::open(
            cdir.as_ptr(),
            libc::O_TMPFILE | libc::O_WRONLY | libc::O_CLOEXEC,
            0o644,
        )
    };
    if fd < 0 {
        let e = io::Error::last_os_error();
        return match e.raw_os_error() {
            Some(libc::EOPNOTSUPP | libc::EISDIR | libc::EINVAL) => Ok(None),
            _ => Err(e),
        };
    }
    // SAFETY: a descriptor we just opened and own.
    let mut f = unsafe { File::from_raw_fd(fd) };
    f.write_all(data)?;
    let src = cpath(Path::new(&format!("/proc/self/fd/{fd}")))?;
    let dst = cpath(path)?;
    // SAFETY: linkat(2) with valid C strings; the source is our open descriptor.
    let rc = unsafe {
        libc::linkat(
            libc::AT_FDCWD,
            src.as_ptr(),
            libc::AT_FDCWD,
            dst.as_ptr(),
            libc::AT_SYMLINK_FOLLOW,
        )
    };
    if rc == 0 {
        return Ok(Some(true));
    }
    let e = io::Error::last_os_error();
    if e.kind() == io::ErrorKind::AlreadyExists {
        Ok(Some(false))
    } else {
        Err(e)
    }
}

/// Remove what [`write_atomic`] left of `path` in a process that was killed before its
/// rename (`.<name>.tmp-<pid>-<n>`). Only for callers that hold the lock under which `path`
/// is written, so no temporary file can be in use.
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
