//! File helpers: replacing a file atomically, recognising namespace files, telling which
//! mount a path is on, and asking ext4 to spread a directory's children.

use std::io::{self, Write};
use std::path::{Path, PathBuf};

/// How hard [`write_atomic`] works to keep a write across a crash of the machine.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Durability {
    /// The rename alone: readers see the old content or the new, never a torn one; after
    /// a power loss either may be there. For state on tmpfs, or state that can be rebuilt.
    Rename,
    /// Also fsync the file before the rename and the directory after: once this returns,
    /// the new content survives a power loss.
    Sync,
}

/// Replace `path` with `data`: a temporary file in the same directory (mode `mode`),
/// renamed over `path`. A failure removes the temporary file and leaves `path` as it was.
pub fn write_atomic(path: &Path, data: &[u8], mode: u32, durability: Durability) -> io::Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    let dir = path.parent().unwrap_or(Path::new("."));
    let tmp = temp_name(path);
    let res = (|| {
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(mode)
            .open(&tmp)?;
        f.write_all(data)?;
        if durability == Durability::Sync {
            f.sync_all()?;
        }
        std::fs::rename(&tmp, path)?;
        if durability == Durability::Sync {
            std::fs::File::open(dir)?.sync_all()?;
        }
        Ok(())
    })();
    if res.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    res
}

/// A name next to `path` that no other writer (thread or process) uses at the same time.
fn temp_name(path: &Path) -> PathBuf {
    use std::sync::atomic::{AtomicU64, Ordering};
    static SEQ: AtomicU64 = AtomicU64::new(0);
    let dir = path.parent().unwrap_or(Path::new("."));
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy())
        .unwrap_or_default();
    let n = SEQ.fetch_add(1, Ordering::Relaxed);
    dir.join(format!(".{name}.tmp-{}-{n}", std::process::id()))
}

/// The magic number of nsfs, the filesystem of namespace files (`/proc/<pid>/ns/*` and
/// their bind mounts).
pub const NSFS_MAGIC: u64 = 0x6e73_6673;

/// Whether `path` is a namespace file (or a bind mount of one).
pub fn is_nsfs(path: &Path) -> bool {
    rustix::fs::statfs(path).is_ok_and(|s| s.f_type as u64 == NSFS_MAGIC)
}

/// Disk used below `dir`, as `du` counts it: the blocks of every file and directory
/// (hard links once), symlinks not followed, other filesystems (mounts inside, such as a
/// running container's overlay) not entered. Returns bytes and inodes; unreadable parts
/// count as nothing.
pub fn disk_usage(dir: &Path) -> (u64, u64) {
    use std::os::unix::fs::MetadataExt;
    let Ok(top) = std::fs::symlink_metadata(dir) else {
        return (0, 0);
    };
    let dev = top.dev();
    let mut seen = std::collections::HashSet::new();
    let (mut bytes, mut inodes) = (0u64, 0u64);
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in entries.flatten() {
            let Ok(m) = e.metadata() else { continue };
            if m.dev() != dev || !seen.insert(m.ino()) {
                continue;
            }
            bytes += m.blocks() * 512;
            inodes += 1;
            if m.is_dir() {
                stack.push(e.path());
            }
        }
    }
    (bytes, inodes)
}

/// An `O_PATH` descriptor (or any other of a directory) reopened for reading, so that
/// `*at` calls can list and create entries in it; fails if it is not a directory.
pub fn reopen_dir(fd: impl std::os::fd::AsFd) -> io::Result<std::os::fd::OwnedFd> {
    use rustix::fs::{Mode, OFlags};
    rustix::fs::openat(
        fd,
        ".",
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(Into::into)
}

/// The id of the mount `path` is on (not following a final symlink); None where it cannot
/// be read, also on kernels before 5.8, which leave the field unset (zero for every path).
/// Two paths with different ids are on different mounts, also where a bind mount keeps
/// them on one filesystem.
pub fn mount_id(path: &Path) -> Option<u64> {
    let mnt_id = rustix::fs::StatxFlags::MNT_ID;
    rustix::fs::statx(
        rustix::fs::CWD,
        path,
        rustix::fs::AtFlags::SYMLINK_NOFOLLOW,
        mnt_id,
    )
    .ok()
    .filter(|s| s.stx_mask & mnt_id.bits() != 0)
    .map(|s| s.stx_mnt_id)
}

/// Mark directory `dir` as the top of directory hierarchies (`chattr +T`, FS_TOPDIR_FL)
/// unless it is already: for each new subdirectory, ext4's allocator then picks the block
/// group with the fewest directories among those with room (as below the filesystem's root,
/// Orlov's rule), and the files made in that subdirectory follow it there. Without the mark
/// every container's directory goes next to its parent's, where the containers removed
/// before it left their freed inodes. On ext4 without a journal the allocator passes over
/// each inode freed in the last minute (six, while its inode table block is unwritten),
/// one buffer lookup each, before it takes a free one; with thousands freed, making a file
/// there took 0.2-0.8 ms instead of 30 µs (bench/README, scale, a twelfth time). Spread,
/// each group holds few of them. Returns whether the mark is there; filesystems without the
/// flag (tmpfs, xfs, btrfs) say so with an error, which is theirs to keep: Ok(false).
pub fn mark_top_of_tree(dir: &Path) -> io::Result<bool> {
    use rustix::fs::{IFlags, Mode, OFlags};
    let fd = rustix::fs::open(
        dir,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )?;
    let not_here = |e: rustix::io::Errno| {
        [
            rustix::io::Errno::NOTTY,
            rustix::io::Errno::OPNOTSUPP,
            rustix::io::Errno::INVAL,
            rustix::io::Errno::PERM,
        ]
        .contains(&e)
    };
    let flags = match rustix::fs::ioctl_getflags(&fd) {
        Ok(f) => f,
        Err(e) if not_here(e) => return Ok(false),
        Err(e) => return Err(e.into()),
    };
    if flags.contains(IFlags::TOPDIR) {
        return Ok(true);
    }
    match rustix::fs::ioctl_setflags(&fd, flags | IFlags::TOPDIR) {
        Ok(()) => Ok(true),
        Err(e) if not_here(e) => Ok(false),
        Err(e) => Err(e.into()),
    }
}

/// Whether `path` is a mount point: its mount differs from its parent's, which also holds
/// for the root of a bind mount on the same filesystem. False where the mount ids cannot
/// be read.
pub fn is_mountpoint(path: &Path) -> bool {
    let Some(parent) = path.parent() else {
        return false;
    };
    match (mount_id(path), mount_id(parent)) {
        (Some(a), Some(b)) => a != b,
        _ => false,
    }
}

/// A path field of /proc/self/mountinfo as the path it names: the kernel writes space,
/// tab, newline and backslash as `\ooo` octal escapes; every other byte is the path's own.
pub fn mountinfo_path(field: &str) -> PathBuf {
    use std::os::unix::ffi::OsStringExt;
    let b = field.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let octal = b
            .get(i + 1..i + 4)
            .filter(|d| d.iter().all(|c| (b'0'..=b'7').contains(c)));
        match (b[i], octal) {
            (b'\\', Some(d)) => {
                out.push((d[0] - b'0') * 64 + (d[1] - b'0') * 8 + (d[2] - b'0'));
                i += 4;
            }
            (c, _) => {
                out.push(c);
                i += 1;
            }
        }
    }
    PathBuf::from(std::ffi::OsString::from_vec(out))
}

#[cfg(test)]
mod tests {
    use super::*;

    use std::os::unix::fs::PermissionsExt;

    /// The mark is set once and read back on a filesystem that has it (ext4, as /var/tmp is
    /// here), and refused quietly where there is no such flag (a tmpfs).
    #[test]
    fn a_directory_is_marked_top_of_tree_where_the_filesystem_has_the_flag() {
        use rustix::fs::IFlags;
        let t = tempfile::tempdir_in("/var/tmp").unwrap();
        let dir = t.path().join("containers");
        std::fs::create_dir(&dir).unwrap();
        let fd = std::fs::File::open(&dir).unwrap();
        let ext4 = rustix::fs::fstatfs(&fd).unwrap().f_type as i64 == libc::EXT4_SUPER_MAGIC;
        let marked = mark_top_of_tree(&dir).unwrap();
        assert!(marked || !ext4, "ext4 has the flag");
        if marked {
            assert!(
                rustix::fs::ioctl_getflags(&fd)
                    .unwrap()
                    .contains(IFlags::TOPDIR)
            );
            assert!(mark_top_of_tree(&dir).unwrap(), "marked already");
            // Not inherited: a child is placed by the mark, and is no top itself.
            let child = dir.join("c");
            std::fs::create_dir(&child).unwrap();
            let cf = std::fs::File::open(&child).unwrap();
            assert!(
                !rustix::fs::ioctl_getflags(&cf)
                    .unwrap()
                    .contains(IFlags::TOPDIR)
            );
        }
        assert!(mark_top_of_tree(&t.path().join("missing")).is_err());
        let file = t.path().join("f");
        std::fs::write(&file, b"").unwrap();
        assert!(mark_top_of_tree(&file).is_err(), "not a directory");
        // /dev/shm is a tmpfs: no such flag there.
        let shm = tempfile::tempdir_in("/dev/shm").unwrap();
        assert!(!mark_top_of_tree(shm.path()).unwrap());
    }

    #[test]
    fn mount_points_are_told_by_their_mount_ids() {
        let t = tempfile::tempdir().unwrap();
        assert!(!is_mountpoint(t.path()), "a fresh directory");
        assert!(is_mountpoint(Path::new("/proc")), "procfs at /proc");
        assert!(
            !is_mountpoint(Path::new("/")),
            "the root has no parent to differ from"
        );
    }

    #[test]
    fn mountinfo_paths_are_unescaped_byte_for_byte() {
        assert_eq!(mountinfo_path("/a\\040b"), PathBuf::from("/a b"));
        assert_eq!(mountinfo_path("/plain"), PathBuf::from("/plain"));
        assert_eq!(
            mountinfo_path("/back\\134slash"),
            PathBuf::from("/back\\slash")
        );
        // Bytes that are not ASCII stay as they were (a UTF-8 name, here).
        assert_eq!(
            mountinfo_path("/caf\u{e9}\\011x"),
            PathBuf::from("/caf\u{e9}\tx")
        );
        // A backslash without three octal digits is kept.
        assert_eq!(mountinfo_path("/a\\9"), PathBuf::from("/a\\9"));
    }

    #[test]
    fn replaces_whole_files_and_leaves_nothing_on_failure() {
        let dir = std::env::temp_dir().join(format!("wharf-sys-fs-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("state.json");
        for (data, d) in [
            (&b"one"[..], Durability::Rename),
            (b"two", Durability::Sync),
        ] {
            write_atomic(&p, data, 0o600, d).unwrap();
            assert_eq!(std::fs::read(&p).unwrap(), data);
        }
        assert_eq!(
            std::fs::metadata(&p).unwrap().permissions().mode() & 0o777,
            0o600
        );
        // A directory in the way: the rename fails, the temporary file goes.
        let blocked = dir.join("blocked");
        std::fs::create_dir_all(blocked.join("inside")).unwrap();
        assert!(write_atomic(&blocked, b"x", 0o600, Durability::Rename).is_err());
        let names: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert!(names.iter().all(|n| !n.contains(".tmp-")), "{names:?}");
        std::fs::remove_dir_all(&dir).unwrap();
        assert!(is_nsfs(Path::new("/proc/self/ns/net")));
        assert!(!is_nsfs(Path::new("/proc/self")));
    }
}
