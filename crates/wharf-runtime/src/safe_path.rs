//! Resolving paths inside a container's root without ever leaving it.
//!
//! A hostile image can make any component of a mount destination a symlink (to `/`, to
//! `../../..`, to `/proc/self/root`), or swap one in between our check and our use (the
//! CVE-2021-30465 class). Every lookup here goes through openat2(2) with `RESOLVE_IN_ROOT`,
//! which treats the root fd as `/` for absolute symlinks and `..`, plus
//! `RESOLVE_NO_MAGICLINKS`, so /proc magic links cannot jump out either. The result is an
//! `O_PATH` fd; callers act on the fd (`/proc/self/fd/N` for mount(2), `*at` calls), never on
//! the path again.

use std::ffi::{CString, OsStr};
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};

use rustix::fs::{Mode, OFlags, ResolveFlags};

const RESOLVE: ResolveFlags = ResolveFlags::IN_ROOT.union(ResolveFlags::NO_MAGICLINKS);

/// Open `path` inside `root` (absolute paths count from `root`) with `flags`.
pub fn open_in_root(root: BorrowedFd<'_>, path: &Path, flags: OFlags) -> io::Result<OwnedFd> {
    let rel = relative(path);
    let rel: &Path = if rel.as_os_str().is_empty() {
        Path::new(".")
    } else {
        &rel
    };
    loop {
        match rustix::fs::openat2(root, rel, flags | OFlags::CLOEXEC, Mode::empty(), RESOLVE) {
            // openat2 asks callers to retry when a rename raced with the lookup.
            Err(rustix::io::Errno::AGAIN) | Err(rustix::io::Errno::INTR) => continue,
            r => return r.map_err(io::Error::from),
        }
    }
}

/// O_PATH fd of `path` inside `root`.
pub fn lookup(root: BorrowedFd<'_>, path: &Path) -> io::Result<OwnedFd> {
    open_in_root(root, path, OFlags::PATH)
}

/// `mkdir -p` of `path` inside `root`; returns an O_PATH fd of the directory. A dangling
/// symlink on the way is followed inside the root, creating its target (as a mount point
/// would be created through it by runc's SecureJoin + MkdirAll).
pub fn mkdir_all(root: BorrowedFd<'_>, path: &Path, mode: u32) -> io::Result<OwnedFd> {
    mkdir_all_depth(root, &relative(path), mode, 0)
}

/// Symlinks followed while creating one path, as the kernel's own limit.
const MAX_LINKS: u32 = 40;

fn mkdir_all_depth(root: BorrowedFd<'_>, rel: &Path, mode: u32, depth: u32) -> io::Result<OwnedFd> {
    if depth > MAX_LINKS {
        return Err(io::Error::from_raw_os_error(libc::ELOOP));
    }
    match open_in_root(root, rel, OFlags::PATH | OFlags::DIRECTORY) {
        Err(e) if e.raw_os_error() == Some(libc::ENOENT) => {}
        r => return r,
    }
    let comps: Vec<Component<'_>> = rel.components().collect();
    let mut prefix = PathBuf::new();
    let mut parent = lookup(root, Path::new("."))?;
    for (i, comp) in comps.iter().enumerate() {
        let parent_prefix = prefix.clone();
        prefix.push(comp);
        let name = match comp {
            Component::Normal(name) => *name,
            _ => {
                parent = open_in_root(root, &prefix, OFlags::PATH | OFlags::DIRECTORY)?;
                continue;
            }
        };
        match open_in_root(root, &prefix, OFlags::PATH | OFlags::DIRECTORY) {
            Ok(fd) => parent = fd,
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => {
                // mkdirat never follows a final symlink.
                match rustix::fs::mkdirat(&parent, name, Mode::from_raw_mode(mode)) {
                    Ok(()) => {
                        // Exactly `mode`, whatever the umask of the process making it (a
                        // shim's is 0077): a mount point's parents must be traversable by
                        // the container's user. Opened without following a symlink, as a
                        // directory: what was just made.
                        let dir = rustix::fs::openat(
                            &parent,
                            name,
                            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                            Mode::empty(),
                        )?;
                        rustix::fs::fchmod(&dir, Mode::from_raw_mode(mode))?;
                    }
                    Err(rustix::io::Errno::EXIST) => {}
                    Err(e) => return Err(e.into()),
                }
                match open_in_root(root, &prefix, OFlags::PATH | OFlags::DIRECTORY) {
                    Ok(fd) => parent = fd,
                    Err(e) if e.raw_os_error() == Some(libc::ENOENT) => {
                        // A dangling symlink: create its target (inside the root) instead.
                        let rest: PathBuf = comps[i + 1..].iter().collect();
                        let target = dangling_target(&parent, name, &parent_prefix)?;
                        return mkdir_all_depth(root, &target.join(rest), mode, depth + 1);
                    }
                    Err(e) => return Err(e),
                }
            }
            Err(e) => return Err(e),
        }
    }
    Ok(parent)
}

/// Where a symlink `name` in directory `dir` (at `dir_path` inside the root) points, as a
/// root-relative path.
fn dangling_target(dir: &OwnedFd, name: &OsStr, dir_path: &Path) -> io::Result<PathBuf> {
    let target = rustix::fs::readlinkat(dir, name, Vec::new())?;
    let target = Path::new(std::ffi::OsStr::from_bytes(target.as_bytes()));
    Ok(if target.is_absolute() {
        relative(target)
    } else {
        dir_path.join(target)
    })
}

/// Make sure `path` exists inside `root`, creating parents as directories and the last
/// component as an empty regular file when missing. Returns an O_PATH fd of whatever is there.
pub fn ensure_file(root: BorrowedFd<'_>, path: &Path) -> io::Result<OwnedFd> {
    ensure_file_depth(root, path, 0)
}

fn ensure_file_depth(root: BorrowedFd<'_>, path: &Path, depth: u32) -> io::Result<OwnedFd> {
    match lookup(root, path) {
        Err(e) if e.raw_os_error() == Some(libc::ENOENT) => {}
        r => return r,
    }
    let rel = relative(path);
    let (parent, name) = split(&rel)?;
    let dir = mkdir_all(root, parent, 0o755)?;
    let dir = reopen_dir(&dir)?;
    match rustix::fs::openat(
        &dir,
        name,
        OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::WRONLY | OFlags::CLOEXEC,
        Mode::from_raw_mode(0o644),
    ) {
        Ok(_) => lookup(root, path),
        Err(rustix::io::Errno::EXIST) => match lookup(root, path) {
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) && depth < MAX_LINKS => {
                // A dangling symlink: create the file it points to, inside the root.
                let target = dangling_target(&dir, name, parent)?;
                ensure_file_depth(root, &target, depth + 1)
            }
            r => r,
        },
        Err(e) => Err(e.into()),
    }
}

/// Make sure `path` exists inside `root` as a directory or file, whichever `dir` says.
pub fn ensure(root: BorrowedFd<'_>, path: &Path, dir: bool) -> io::Result<OwnedFd> {
    if dir {
        mkdir_all(root, path, 0o755)
    } else {
        ensure_file(root, path)
    }
}

/// An O_PATH directory fd reopened for real I/O (needed by `*at` calls that create entries).
pub use wharf_sys::fs::reopen_dir;

/// `/proc/self/fd/N`: the path through which syscalls that only take paths (mount(2)) act on
/// exactly the object the fd refers to.
pub fn proc_fd_path(fd: impl AsFd) -> CString {
    CString::new(format!("/proc/self/fd/{}", fd.as_fd().as_raw_fd())).expect("no NUL in a number")
}

/// `path` without its leading `/`, so it can be joined to a root fd.
pub fn relative(path: &Path) -> PathBuf {
    path.components()
        .filter(|c| !matches!(c, Component::RootDir | Component::Prefix(_)))
        .collect()
}

/// Make `name` in directory `dir` a plain empty file (unless it is one, or a character
/// device, already) and return an O_PATH fd of it, never following a symlink: a mount
/// point the container's files could otherwise redirect (an image's `/dev/console` or
/// `/dev/fuse` as a symlink into /proc, the CVE-2025-52565 class).
pub fn plain_file_at(dir: BorrowedFd<'_>, name: &OsStr) -> io::Result<OwnedFd> {
    use rustix::fs::{AtFlags, FileType};
    match rustix::fs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW) {
        Ok(st)
            if matches!(
                FileType::from_raw_mode(st.st_mode),
                FileType::RegularFile | FileType::CharacterDevice
            ) => {}
        Ok(st) if FileType::from_raw_mode(st.st_mode) == FileType::Directory => {
            rustix::fs::unlinkat(dir, name, AtFlags::REMOVEDIR)?;
        }
        Ok(_) => rustix::fs::unlinkat(dir, name, AtFlags::empty())?,
        Err(_) => {}
    }
    match rustix::fs::openat(
        dir,
        name,
        OFlags::CREATE | OFlags::EXCL | OFlags::WRONLY | OFlags::CLOEXEC,
        Mode::from_raw_mode(0o666),
    ) {
        Ok(_) | Err(rustix::io::Errno::EXIST) => {}
        Err(e) => return Err(e.into()),
    }
    Ok(rustix::fs::openat(
        dir,
        name,
        OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )?)
}

/// `path` made absolute and cleaned lexically: `.` and empty components dropped, `..`
/// resolved against what comes before it, never above `/` (`/dev/../etc/x` is `/etc/x`).
/// Symlinks are not looked at: this is for checking where a path means to land.
pub fn clean_absolute(path: &Path) -> PathBuf {
    let mut out = PathBuf::from("/");
    for c in path.components() {
        match c {
            Component::ParentDir => {
                out.pop();
            }
            Component::Normal(n) => out.push(n),
            _ => {}
        }
    }
    out
}

fn split(rel: &Path) -> io::Result<(&Path, &OsStr)> {
    match (rel.parent(), rel.file_name()) {
        (Some(parent), Some(name)) => Ok((parent, name)),
        _ => Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{} does not name a file", rel.display()),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    #[test]
    fn paths_clean_lexically_under_the_root() {
        for (raw, want) in [
            ("/dev/../etc/evil", "/etc/evil"),
            ("/dev/./null", "/dev/null"),
            ("dev//fuse", "/dev/fuse"),
            ("/../../proc/x", "/proc/x"),
            ("/proc/..", "/"),
        ] {
            assert_eq!(clean_absolute(Path::new(raw)), Path::new(want), "{raw}");
        }
    }

    fn root() -> (tempfile::TempDir, OwnedFd) {
        let dir = tempfile::tempdir().unwrap();
        let fd = rustix::fs::open(
            dir.path(),
            OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .unwrap();
        (dir, fd)
    }

    #[test]
    fn absolute_symlink_stays_inside_root() {
        let (dir, fd) = root();
        symlink("/", dir.path().join("escape")).unwrap();
        let made = mkdir_all(fd.as_fd(), Path::new("/escape/wharf-safe-path-test"), 0o755).unwrap();
        drop(made);
        assert!(dir.path().join("wharf-safe-path-test").is_dir());
        assert!(!Path::new("/wharf-safe-path-test").exists());
    }

    #[test]
    fn dotdot_symlink_is_clamped_to_root() {
        let (dir, fd) = root();
        symlink("../../../../../../etc", dir.path().join("up")).unwrap();
        std::fs::create_dir(dir.path().join("etc")).unwrap();
        ensure_file(fd.as_fd(), Path::new("up/wharf-marker")).unwrap();
        assert!(dir.path().join("etc/wharf-marker").is_file());
        assert!(!Path::new("/etc/wharf-marker").exists());
    }

    #[test]
    fn magic_links_are_refused() {
        let (dir, fd) = root();
        symlink("/proc/self/root/etc", dir.path().join("magic")).unwrap();
        // Resolved in root, /proc does not exist inside it, so nothing outside is reached.
        let err = lookup(fd.as_fd(), Path::new("magic/passwd")).unwrap_err();
        assert_eq!(err.raw_os_error(), Some(libc::ENOENT));
    }

    #[test]
    fn dangling_symlinks_are_followed_inside_the_root() {
        let (dir, fd) = root();
        symlink("/made/by/link", dir.path().join("dir-link")).unwrap();
        mkdir_all(fd.as_fd(), Path::new("/dir-link/sub"), 0o755).unwrap();
        assert!(dir.path().join("made/by/link/sub").is_dir());
        symlink("../target-file", dir.path().join("file-link")).unwrap();
        ensure_file(fd.as_fd(), Path::new("file-link")).unwrap();
        assert!(dir.path().join("target-file").is_file());
        symlink("loop", dir.path().join("loop")).unwrap();
        assert!(mkdir_all(fd.as_fd(), Path::new("loop/x"), 0o755).is_err());
    }

    #[test]
    fn existing_file_is_returned_not_recreated() {
        let (dir, fd) = root();
        std::fs::write(dir.path().join("f"), b"keep").unwrap();
        ensure_file(fd.as_fd(), Path::new("/f")).unwrap();
        assert_eq!(std::fs::read(dir.path().join("f")).unwrap(), b"keep");
    }
}
