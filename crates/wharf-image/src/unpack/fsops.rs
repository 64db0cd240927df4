//! fd-relative file operations for the unpacker. Every directory is opened with
//! openat2(`RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS | RESOLVE_NO_XDEV`)
//! below a layer's root fd, so a path that is not a plain chain of directories inside that
//! layer fails instead of leading anywhere else; entries are then created with `*at` calls
//! on a single name in that directory, which never follow a final symlink.

use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;

use rustix::fs::{AtFlags, Dir, FileType, Mode, OFlags, ResolveFlags, Stat, Timestamps};

const STRICT: ResolveFlags = ResolveFlags::BENEATH
    .union(ResolveFlags::NO_SYMLINKS)
    .union(ResolveFlags::NO_MAGICLINKS)
    .union(ResolveFlags::NO_XDEV);

/// The overlayfs xattr that makes a directory opaque.
pub const OPAQUE_XATTR: &str = "trusted.overlay.opaque";

/// A path below a layer root, as components (never `.`, `..` or empty).
pub type Rel = [OsString];

/// `a/b/c` of components.
pub fn join(rel: &Rel) -> PathBuf {
    if rel.is_empty() {
        return PathBuf::from(".");
    }
    rel.iter().collect()
}

/// Open directory `rel` below `root` (no symlinks anywhere on the way).
pub fn open_dir(root: BorrowedFd<'_>, rel: &Rel) -> io::Result<OwnedFd> {
    let p = join(rel);
    loop {
        match rustix::fs::openat2(
            root,
            &p,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC | OFlags::NOFOLLOW,
            Mode::empty(),
            STRICT,
        ) {
            Err(rustix::io::Errno::AGAIN) | Err(rustix::io::Errno::INTR) => continue,
            r => return r.map_err(io::Error::from),
        }
    }
}

/// lstat of `name` in `dir`; `None` when it does not exist.
pub fn stat_opt(dir: BorrowedFd<'_>, name: &OsStr) -> io::Result<Option<Stat>> {
    match rustix::fs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW) {
        Ok(st) => Ok(Some(st)),
        Err(rustix::io::Errno::NOENT) | Err(rustix::io::Errno::NOTDIR) => Ok(None),
        Err(e) => Err(e.into()),
    }
}

/// The file type of a stat.
pub fn ftype(st: &Stat) -> FileType {
    FileType::from_raw_mode(st.st_mode)
}

/// An overlayfs whiteout: a character device 0/0.
pub fn is_whiteout(st: &Stat) -> bool {
    ftype(st) == FileType::CharacterDevice && st.st_rdev == 0
}

/// Whether directory fd `dir` carries the opaque marker.
pub fn is_opaque(dir: BorrowedFd<'_>) -> bool {
    let mut buf = [0u8; 4];
    matches!(rustix::fs::fgetxattr(dir, OPAQUE_XATTR, &mut buf[..]), Ok(1) if buf[0] == b'y')
}

/// Remove `name` from `dir`, recursively if it is a directory (never following symlinks).
pub fn remove_all(dir: BorrowedFd<'_>, name: &OsStr) -> io::Result<()> {
    match rustix::fs::unlinkat(dir, name, AtFlags::empty()) {
        Ok(()) | Err(rustix::io::Errno::NOENT) => return Ok(()),
        Err(rustix::io::Errno::ISDIR) | Err(rustix::io::Errno::PERM) => {}
        Err(e) => return Err(e.into()),
    }
    let sub = rustix::fs::openat(
        dir,
        name,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )?;
    let mut names = Vec::new();
    for e in Dir::read_from(&sub)? {
        let e = e?;
        let n = e.file_name().to_bytes();
        if n != b"." && n != b".." {
            names.push(OsString::from(OsStr::from_bytes(n)));
        }
    }
    for n in names {
        remove_all(sub.as_fd(), &n)?;
    }
    drop(sub);
    match rustix::fs::unlinkat(dir, name, AtFlags::REMOVEDIR) {
        Ok(()) | Err(rustix::io::Errno::NOENT) => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// Remove a whole directory tree given by path (used for snapshot directories, which are
/// ours; symlinks inside are removed, never followed).
pub fn remove_tree(path: &std::path::Path) -> io::Result<()> {
    let (Some(parent), Some(name)) = (path.parent(), path.file_name()) else {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, "no parent"));
    };
    let pfd = match File::open(parent) {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e),
    };
    remove_all(pfd.as_fd(), name)
}

/// Timestamps of a stat (atime, mtime).
pub fn times_of(st: &Stat) -> Timestamps {
    Timestamps {
        last_access: rustix::fs::Timespec {
            tv_sec: st.st_atime,
            tv_nsec: st.st_atime_nsec as _,
        },
        last_modification: rustix::fs::Timespec {
            tv_sec: st.st_mtime,
            tv_nsec: st.st_mtime_nsec as _,
        },
    }
}

/// The xattrs of an fd, except overlayfs' own.
pub fn list_xattrs(fd: BorrowedFd<'_>) -> io::Result<Vec<(String, Vec<u8>)>> {
    let mut names = vec![0u8; 64 << 10];
    let n = match rustix::fs::flistxattr(fd, &mut names[..]) {
        Ok(n) => n,
        Err(rustix::io::Errno::NOTSUP) => return Ok(Vec::new()),
        Err(e) => return Err(e.into()),
    };
    let mut out = Vec::new();
    for name in names[..n].split(|b| *b == 0).filter(|s| !s.is_empty()) {
        let name = String::from_utf8_lossy(name).into_owned();
        if name.starts_with("trusted.overlay.") {
            continue;
        }
        let mut val = vec![0u8; 64 << 10];
        if let Ok(len) = rustix::fs::fgetxattr(fd, name.as_str(), &mut val[..]) {
            val.truncate(len);
            out.push((name, val));
        }
    }
    Ok(out)
}

/// `/proc/self/fd/<dir>/<name>`: a path for the few calls without an `*at` form
/// (lsetxattr); the final component is never followed by those calls.
pub fn proc_path(dir: BorrowedFd<'_>, name: &OsStr) -> PathBuf {
    PathBuf::from(format!("/proc/self/fd/{}", dir.as_raw_fd())).join(name)
}

/// Set an xattr on `name` in `dir` without following it.
pub fn lsetxattr_at(dir: BorrowedFd<'_>, name: &OsStr, key: &str, val: &[u8]) -> io::Result<()> {
    rustix::fs::lsetxattr(
        proc_path(dir, name),
        key,
        val,
        rustix::fs::XattrFlags::empty(),
    )
    .map_err(Into::into)
}
