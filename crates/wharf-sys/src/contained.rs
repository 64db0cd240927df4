//! The one way the engine reads a file that a container controls: a path inside an image's
//! or a container's root filesystem (the user database, for `--user`), inside a running
//! process's root (`/proc/<pid>/root`, for `top`), an entry met while walking a
//! container's tree (cp, export, commit, volume copy-up), or a file of the engine's own
//! that a container may write (a pod's hosts file).
//!
//! A container can put anything at such a path: a FIFO (a read that never returns), a
//! device node (`/dev/zero`, endless; a watchdog, which arms when opened), a symlink to a
//! host file, a sparse file of a terabyte. So every read here
//! - resolves the path inside the root (openat2 `RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS`),
//!   never through a `/proc/<pid>/root/...` string, which the kernel would resolve against
//!   the caller's root for the container's absolute symlinks;
//! - opens it `O_PATH` first, so that no driver's open runs and no FIFO waits, and requires
//!   a regular file (fstat) before it reopens the very same inode for reading
//!   (`O_NONBLOCK | O_NOCTTY`);
//! - reads at most a bound given by the caller, and refuses a larger file by its size
//!   before it reads anything.
//!
//! The errors name the file and what it is ("is a character device"); the callers add the
//! container.

use std::ffi::OsStr;
use std::fmt;
use std::fs::File;
use std::io::{self, Read};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::{Component, Path, PathBuf};

use rustix::fs::{FileType, Mode, OFlags, ResolveFlags, Stat};

/// Bound for the user and group databases (glibc's own files are far below it).
pub const USER_DB_LIMIT: u64 = 4 << 20;

/// Why a contained file could not be read.
#[derive(Debug)]
pub enum ReadError {
    /// There is nothing at the path.
    NotFound,
    /// Something other than a regular file is there ("a FIFO", "a character device").
    NotRegular(&'static str),
    /// The file is larger than the bound.
    TooLarge {
        /// Its size (or what was read before the bound).
        size: u64,
        /// The bound.
        limit: u64,
    },
    /// Any other failure.
    Io(io::Error),
}

impl fmt::Display for ReadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ReadError::NotFound => f.write_str("does not exist"),
            ReadError::NotRegular(kind) => write!(f, "is {kind}, not a regular file"),
            ReadError::TooLarge { size, limit } => {
                write!(f, "is too large ({size} bytes; at most {limit} are read)")
            }
            ReadError::Io(e) => write!(f, "cannot be read: {e}"),
        }
    }
}

impl std::error::Error for ReadError {}

impl From<io::Error> for ReadError {
    fn from(e: io::Error) -> Self {
        match e.raw_os_error() {
            Some(libc::ENOENT) | Some(libc::ENOTDIR) => ReadError::NotFound,
            // O_NOFOLLOW met a symlink where a file was expected.
            Some(libc::ELOOP) => ReadError::NotRegular("a symlink"),
            _ => ReadError::Io(e),
        }
    }
}

impl From<rustix::io::Errno> for ReadError {
    fn from(e: rustix::io::Errno) -> Self {
        ReadError::from(io::Error::from(e))
    }
}

/// What a file of this mode is, as error messages say it.
pub fn kind_of(mode: u32) -> &'static str {
    match FileType::from_raw_mode(mode) {
        FileType::RegularFile => "a regular file",
        FileType::Directory => "a directory",
        FileType::Symlink => "a symlink",
        FileType::Fifo => "a FIFO",
        FileType::Socket => "a socket",
        FileType::CharacterDevice => "a character device",
        FileType::BlockDevice => "a block device",
        FileType::Unknown => "of an unknown type",
    }
}

const IN_ROOT: ResolveFlags = ResolveFlags::IN_ROOT.union(ResolveFlags::NO_MAGICLINKS);

/// `path` relative to the root it is resolved in ("." for the root itself).
fn relative(path: &Path) -> PathBuf {
    let rel: PathBuf = path
        .components()
        .filter(|c| matches!(c, Component::Normal(_) | Component::ParentDir))
        .collect();
    if rel.as_os_str().is_empty() {
        PathBuf::from(".")
    } else {
        rel
    }
}

/// Reopen the `O_PATH` fd `fd` of a regular file for reading (the same inode: nothing can
/// be swapped in between), after checking that it is one.
fn reopen_regular(fd: OwnedFd) -> Result<(File, Stat), ReadError> {
    let st = rustix::fs::fstat(&fd)?;
    if FileType::from_raw_mode(st.st_mode) != FileType::RegularFile {
        return Err(ReadError::NotRegular(kind_of(st.st_mode)));
    }
    let proc_path = format!("/proc/self/fd/{}", std::os::fd::AsRawFd::as_raw_fd(&fd));
    let file = rustix::fs::open(
        proc_path.as_str(),
        OFlags::RDONLY | OFlags::NONBLOCK | OFlags::NOCTTY | OFlags::CLOEXEC,
        Mode::empty(),
    )?;
    Ok((File::from(file), st))
}

/// Open `path` inside the directory `root` (resolved as if `root` were `/`) for reading,
/// if it is a regular file.
pub fn open_in_root(root: BorrowedFd<'_>, path: &Path) -> Result<(File, Stat), ReadError> {
    let rel = relative(path);
    let fd = loop {
        match rustix::fs::openat2(
            root,
            &rel,
            OFlags::PATH | OFlags::CLOEXEC,
            Mode::empty(),
            IN_ROOT,
        ) {
            // openat2 asks callers to retry when a rename raced with the lookup.
            Err(rustix::io::Errno::AGAIN) | Err(rustix::io::Errno::INTR) => continue,
            r => break r?,
        }
    };
    reopen_regular(fd)
}

/// An `O_PATH` descriptor of `path` resolved inside the directory `root` (as if `root`
/// were `/`, never out of it), opened with `flags` besides.
fn path_in_root(root: &Path, path: &Path, flags: OFlags) -> rustix::io::Result<OwnedFd> {
    let root = rustix::fs::open(
        root,
        OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )?;
    let rel = relative(path);
    loop {
        match rustix::fs::openat2(
            &root,
            &rel,
            OFlags::PATH | OFlags::CLOEXEC | flags,
            Mode::empty(),
            IN_ROOT,
        ) {
            Err(rustix::io::Errno::AGAIN) | Err(rustix::io::Errno::INTR) => continue,
            r => return r,
        }
    }
}

/// Whether `path`, resolved inside the directory `root`, is a directory (following links
/// the way the container would).
pub fn is_dir_in_root(root: &Path, path: &Path) -> bool {
    path_in_root(root, path, OFlags::DIRECTORY).is_ok()
}

/// Whether `path` exists inside the directory `root` (its last link not followed).
pub fn exists_in_root(root: &Path, path: &Path) -> bool {
    path_in_root(root, path, OFlags::NOFOLLOW).is_ok()
}

/// Remove `path` inside the directory `root` (its parent resolved as if `root` were `/`)
/// if it is an empty directory or an empty regular file: what a mount point left. Anything
/// else stays.
pub fn remove_empty_in_root(root: &Path, path: &Path) -> std::io::Result<()> {
    let rel = relative(path);
    let (Some(parent), Some(name)) = (rel.parent(), rel.file_name()) else {
        return Ok(());
    };
    let parent = if parent.as_os_str().is_empty() {
        Path::new(".")
    } else {
        parent
    };
    // An O_PATH descriptor serves the *at calls below as their directory.
    let dir = path_in_root(root, parent, OFlags::DIRECTORY)?;
    let st = rustix::fs::statat(&dir, name, rustix::fs::AtFlags::SYMLINK_NOFOLLOW)?;
    let kind = rustix::fs::FileType::from_raw_mode(st.st_mode);
    if kind == rustix::fs::FileType::Directory {
        // Fails (and is left) when not empty.
        let _ = rustix::fs::unlinkat(&dir, name, rustix::fs::AtFlags::REMOVEDIR);
    } else if kind == rustix::fs::FileType::RegularFile && st.st_size == 0 {
        rustix::fs::unlinkat(&dir, name, rustix::fs::AtFlags::empty())?;
    }
    Ok(())
}

/// Open the entry `name` of the directory `dir` for reading, if it is a regular file (a
/// symlink is not followed: it is refused as one).
pub fn open_entry(dir: BorrowedFd<'_>, name: &OsStr) -> Result<(File, Stat), ReadError> {
    let fd = rustix::fs::openat(
        dir,
        name,
        OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )?;
    reopen_regular(fd)
}

/// Open the engine's own file `path` (not following a final symlink), if it is a regular
/// file: for files of the engine's directories whose contents a container writes.
pub fn open_file(path: &Path) -> Result<(File, Stat), ReadError> {
    let fd = rustix::fs::open(
        path,
        OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )?;
    reopen_regular(fd)
}

/// Read at most `limit` bytes of an opened file; a larger one is refused by its size, or
/// by what it gives past the bound should it grow while it is read.
pub fn read_bounded((file, st): (File, Stat), limit: u64) -> Result<Vec<u8>, ReadError> {
    let size = st.st_size.max(0) as u64;
    if size > limit {
        return Err(ReadError::TooLarge { size, limit });
    }
    let mut buf = Vec::with_capacity(size as usize);
    file.take(limit + 1).read_to_end(&mut buf)?;
    if buf.len() as u64 > limit {
        return Err(ReadError::TooLarge {
            size: buf.len() as u64,
            limit,
        });
    }
    Ok(buf)
}

/// Read `path` inside the directory at `root` (an image's or a container's root
/// filesystem), at most `limit` bytes.
pub fn read_in_dir(root: &Path, path: &Path, limit: u64) -> Result<Vec<u8>, ReadError> {
    let dir = rustix::fs::open(
        root,
        OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )?;
    read_bounded(open_in_root(dir.as_fd(), path)?, limit)
}

/// Read `path` as process `pid` sees it (inside its root, through its mounts), at most
/// `limit` bytes.
pub fn read_in_process_root(pid: i32, path: &Path, limit: u64) -> Result<Vec<u8>, ReadError> {
    read_in_dir(Path::new(&format!("/proc/{pid}/root")), path, limit)
}

/// Read the engine's file `path` whose contents a container writes, at most `limit` bytes.
pub fn read_file(path: &Path, limit: u64) -> Result<Vec<u8>, ReadError> {
    read_bounded(open_file(path)?, limit)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    fn mkfifo(p: &Path) {
        rustix::fs::mknodat(
            rustix::fs::CWD,
            p,
            FileType::Fifo,
            Mode::from_raw_mode(0o644),
            0,
        )
        .unwrap();
    }

    #[test]
    fn only_empty_mount_points_are_removed_and_never_outside_the_root() {
        let d = tempfile::tempdir().unwrap();
        let root = d.path().join("root");
        let outside = d.path().join("outside");
        std::fs::create_dir_all(root.join("run/secrets")).unwrap();
        std::fs::write(root.join("run/secrets/tok"), "").unwrap();
        std::fs::write(root.join("kept"), "x").unwrap();
        std::fs::create_dir_all(root.join("full")).unwrap();
        std::fs::write(root.join("full/f"), "x").unwrap();
        std::fs::create_dir_all(outside.join("secrets")).unwrap();
        std::fs::write(outside.join("secrets/tok"), "").unwrap();
        // A link to outside the root resolves inside it.
        symlink(&outside, root.join("escape")).unwrap();
        for p in [
            "/run/secrets/tok",
            "/run/secrets",
            "/kept",
            "/full",
            "/escape/secrets/tok",
        ] {
            let _ = remove_empty_in_root(&root, Path::new(p));
        }
        assert!(!root.join("run/secrets").exists());
        assert!(root.join("kept").exists() && root.join("full/f").exists());
        assert!(outside.join("secrets/tok").exists());
        assert!(is_dir_in_root(&root, Path::new("/run")));
        assert!(exists_in_root(&root, Path::new("/escape")));
        assert!(!exists_in_root(&root, Path::new("/escape/secrets")));
    }

    #[test]
    fn regular_files_are_read_within_their_bound() {
        let d = tempfile::tempdir().unwrap();
        std::fs::create_dir(d.path().join("etc")).unwrap();
        std::fs::write(d.path().join("etc/passwd"), "root:x:0:0::/:/bin/sh\n").unwrap();
        let got = read_in_dir(d.path(), Path::new("/etc/passwd"), 100).unwrap();
        assert_eq!(got, b"root:x:0:0::/:/bin/sh\n");
        let e = read_in_dir(d.path(), Path::new("/etc/passwd"), 5).unwrap_err();
        assert!(
            matches!(e, ReadError::TooLarge { size: 22, limit: 5 }),
            "{e}"
        );
        assert!(matches!(
            read_in_dir(d.path(), Path::new("/etc/group"), 5),
            Err(ReadError::NotFound)
        ));
        // A sparse file is refused by its size, before anything is read.
        let big = File::create(d.path().join("etc/big")).unwrap();
        big.set_len(1 << 40).unwrap();
        let t = std::time::Instant::now();
        let e = read_in_dir(d.path(), Path::new("etc/big"), 4 << 20).unwrap_err();
        assert!(matches!(e, ReadError::TooLarge { .. }), "{e}");
        assert!(t.elapsed() < std::time::Duration::from_secs(1));
    }

    #[test]
    fn fifos_devices_and_directories_are_refused_without_blocking() {
        let d = tempfile::tempdir().unwrap();
        mkfifo(&d.path().join("fifo"));
        std::fs::create_dir(d.path().join("dir")).unwrap();
        let e = read_in_dir(d.path(), Path::new("fifo"), 100).unwrap_err();
        assert_eq!(e.to_string(), "is a FIFO, not a regular file");
        let e = read_in_dir(d.path(), Path::new("dir"), 100).unwrap_err();
        assert_eq!(e.to_string(), "is a directory, not a regular file");
        // /dev/zero by its own path (a container's node is the same to the kernel).
        let e = read_in_dir(Path::new("/dev"), Path::new("zero"), 100).unwrap_err();
        assert_eq!(e.to_string(), "is a character device, not a regular file");
        let e = read_file(&d.path().join("fifo"), 100).unwrap_err();
        assert!(matches!(e, ReadError::NotRegular("a FIFO")), "{e}");
        let dir = File::open(d.path()).unwrap();
        let e = open_entry(dir.as_fd(), OsStr::new("fifo")).unwrap_err();
        assert!(matches!(e, ReadError::NotRegular("a FIFO")), "{e}");
    }

    #[test]
    fn symlinks_resolve_inside_the_root_never_on_the_host() {
        let d = tempfile::tempdir().unwrap();
        let root = d.path().join("root");
        std::fs::create_dir_all(root.join("etc")).unwrap();
        std::fs::write(d.path().join("host-secret"), "host").unwrap();
        std::fs::write(root.join("host-secret"), "container").unwrap();
        let host = d.path().join("host-secret");
        symlink(&host, root.join("etc/passwd")).unwrap();
        symlink("../../../../host-secret", root.join("etc/group")).unwrap();
        symlink("/proc/self/root/etc/hostname", root.join("etc/magic")).unwrap();
        // An absolute link names that path inside the root, where there is nothing.
        assert!(matches!(
            read_in_dir(&root, Path::new("etc/passwd"), 100),
            Err(ReadError::NotFound)
        ));
        assert_eq!(
            read_in_dir(&root, Path::new("etc/group"), 100).unwrap(),
            b"container"
        );
        assert!(read_in_dir(&root, Path::new("etc/magic"), 100).is_err());
        // Not followed at all where a file of the engine's own is expected.
        let e = read_file(&root.join("etc/group"), 100).unwrap_err();
        assert!(matches!(e, ReadError::NotRegular("a symlink")), "{e}");
    }
}
