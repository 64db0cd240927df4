//! Tar streams of directory trees a container can change under us (its root filesystem,
//! its writable layer), written and read through file descriptors so that no symlink in
//! the tree leads outside it: `cp` in both directions, `export`, and `commit`'s new layer.
//!
//! Reading a tree, each directory is opened by a single name relative to its parent's fd
//! with `O_NOFOLLOW`, each file the same way, and symlinks are read, never followed, so a
//! path swapped for a symlink mid-walk fails instead of escaping (the race of
//! CVE-2018-15664 in `docker cp`). Writing into a tree, every parent directory is opened
//! with openat2 `RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS` below the destination's fd and
//! each entry is made with an `*at` call on one name.

use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::io::{self, Read, Write};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};

use rustix::fs::{AtFlags, Dir, FileType, Mode, OFlags, ResolveFlags, Stat};

use crate::unpack::fsops;

/// How a walked tree is turned into tar entries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Walk {
    /// Files as they are.
    Plain,
    /// An overlayfs upper directory as an OCI layer: whiteout devices become `.wh.NAME`
    /// entries and opaque directories get a `.wh..wh..opq` entry.
    OverlayUpper,
    /// Files as a container with a user namespace of its own sees them (`docker cp` out
    /// of it): host ids `uid..uid+size` and `gid..gid+size` are its `0..size`, other ids
    /// its overflow id 65534 (what its `stat` shows). The reverse of
    /// [`Owners::Shifted`].
    Shifted {
        /// Host uid of the container's uid 0.
        uid: u32,
        /// Host gid of the container's gid 0.
        gid: u32,
        /// Ids in the range.
        size: u32,
    },
}

impl Walk {
    /// `st` with the owners an entry of this walk is written with.
    fn owners(self, mut st: Stat) -> Stat {
        if let Walk::Shifted { uid, gid, size } = self {
            let inside = |id: u32, base: u32| {
                if id >= base && id - base < size {
                    id - base
                } else {
                    65534
                }
            };
            st.st_uid = inside(st.st_uid, uid);
            st.st_gid = inside(st.st_gid, gid);
        }
        st
    }
}

/// Open `path` inside the tree at `root` as a directory or file (`O_PATH`), resolving
/// symlinks as if `root` were `/` (`RESOLVE_IN_ROOT`): how a user names a path inside a
/// container.
pub fn open_in_root(root: BorrowedFd<'_>, path: &str) -> io::Result<OwnedFd> {
    let rel = path.trim_start_matches('/');
    let rel = if rel.is_empty() { "." } else { rel };
    loop {
        match rustix::fs::openat2(
            root,
            rel,
            OFlags::PATH | OFlags::CLOEXEC,
            Mode::empty(),
            ResolveFlags::IN_ROOT | ResolveFlags::NO_MAGICLINKS,
        ) {
            Err(rustix::io::Errno::AGAIN) | Err(rustix::io::Errno::INTR) => continue,
            r => return r.map_err(io::Error::from),
        }
    }
}

/// Reopen an `O_PATH` fd as a readable directory (fails if it is not one).
pub use wharf_sys::fs::reopen_dir;

/// Open directory `child` of `parent`, never following a symlink in its place.
pub fn open_child_dir(parent: BorrowedFd<'_>, child: &OsStr) -> io::Result<OwnedFd> {
    rustix::fs::openat(
        parent,
        child,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(Into::into)
}

/// Append the tree at `dir` to `tar` as entries named `name/...` (`name` empty: the
/// tree's contents at the top).
pub fn append_dir<W: Write>(
    tar: &mut tar::Builder<W>,
    dir: BorrowedFd<'_>,
    name: &Path,
    walk: Walk,
) -> io::Result<()> {
    let st = walk.owners(rustix::fs::fstat(dir)?);
    if !name.as_os_str().is_empty() {
        append_header(tar, name, &st, FileType::Directory, None, io::empty())?;
    }
    if walk == Walk::OverlayUpper && fsops::is_opaque(dir) {
        let st = empty_file_stat(&st);
        append_header(
            tar,
            &name.join(".wh..wh..opq"),
            &st,
            FileType::RegularFile,
            None,
            io::empty(),
        )?;
    }
    let mut names: Vec<OsString> = Vec::new();
    let listing = reopen_dir(dir)?;
    for entry in Dir::read_from(&listing)? {
        let entry = entry?;
        let n = entry.file_name().to_bytes();
        if n != b"." && n != b".." {
            names.push(OsStr::from_bytes(n).to_owned());
        }
    }
    // Sorted: the same tree always gives the same stream (a layer's digest).
    names.sort();
    for n in names {
        append_child(tar, dir, &n, &name.join(&n), walk)?;
    }
    Ok(())
}

/// Append one entry of `parent` (recursing into directories).
pub fn append_child<W: Write>(
    tar: &mut tar::Builder<W>,
    parent: BorrowedFd<'_>,
    child: &OsStr,
    name: &Path,
    walk: Walk,
) -> io::Result<()> {
    let st = walk.owners(rustix::fs::statat(
        parent,
        child,
        AtFlags::SYMLINK_NOFOLLOW,
    )?);
    let kind = FileType::from_raw_mode(st.st_mode);
    if walk == Walk::OverlayUpper && fsops::is_whiteout(&st) {
        let mut wh = OsString::from(".wh.");
        wh.push(child);
        let at = name.parent().unwrap_or(Path::new("")).join(wh);
        return append_header(
            tar,
            &at,
            &empty_file_stat(&st),
            FileType::RegularFile,
            None,
            io::empty(),
        );
    }
    match kind {
        FileType::Directory => {
            let fd = open_child_dir(parent, child)?;
            append_dir(tar, fd.as_fd(), name, walk)
        }
        FileType::RegularFile => {
            // Opened the one safe way for a file a container controls: should a running
            // container swap a FIFO or a device in after the stat above, it is refused
            // rather than waited on or opened.
            let (f, st) = wharf_sys::contained::open_entry(parent, child)
                .map_err(|e| io::Error::other(format!("{}: {e}", name.display())))?;
            // The size of what is read, should the file change after the stat.
            let st = walk.owners(st);
            append_header(tar, name, &st, kind, None, f.take(st.st_size as u64))
        }
        FileType::Symlink => {
            let target = rustix::fs::readlinkat(parent, child, Vec::new())?;
            let target = PathBuf::from(OsStr::from_bytes(target.as_bytes()));
            append_header(tar, name, &st, kind, Some(&target), io::empty())
        }
        FileType::Fifo | FileType::CharacterDevice | FileType::BlockDevice => {
            append_header(tar, name, &st, kind, None, io::empty())
        }
        // Sockets and unknown kinds have no tar form (docker skips them too).
        _ => Ok(()),
    }
}

fn empty_file_stat(st: &Stat) -> Stat {
    let mut s = *st;
    s.st_mode = 0o100000;
    s.st_size = 0;
    s.st_uid = 0;
    s.st_gid = 0;
    s.st_rdev = 0;
    s
}

fn append_header<W: Write>(
    tar: &mut tar::Builder<W>,
    name: &Path,
    st: &Stat,
    kind: FileType,
    link: Option<&Path>,
    data: impl Read,
) -> io::Result<()> {
    let mut h = tar::Header::new_gnu();
    h.set_entry_type(match kind {
        FileType::Directory => tar::EntryType::Directory,
        FileType::Symlink => tar::EntryType::Symlink,
        FileType::Fifo => tar::EntryType::Fifo,
        FileType::CharacterDevice => tar::EntryType::Char,
        FileType::BlockDevice => tar::EntryType::Block,
        _ => tar::EntryType::Regular,
    });
    h.set_mode(st.st_mode & 0o7777);
    h.set_uid(u64::from(st.st_uid));
    h.set_gid(u64::from(st.st_gid));
    h.set_mtime(st.st_mtime.max(0) as u64);
    h.set_size(if kind == FileType::RegularFile {
        st.st_size as u64
    } else {
        0
    });
    if matches!(kind, FileType::CharacterDevice | FileType::BlockDevice) {
        h.set_device_major(rustix::fs::major(st.st_rdev))?;
        h.set_device_minor(rustix::fs::minor(st.st_rdev))?;
    }
    let mut name = name.to_path_buf();
    if kind == FileType::Directory {
        name.push("");
    }
    match link {
        Some(target) => tar.append_link(&mut h, &name, target),
        None => tar.append_data(&mut h, &name, data),
    }
}

/// What [`extract`] does with owners.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Owners {
    /// As the archive says (`cp -a`, layers).
    Keep,
    /// Root's (docker's `cp` into a container).
    Root,
    /// Into a container with a user namespace of its own, whose ids `0..size` are the host's
    /// `uid..uid+size` and `gid..gid+size`: the archive's ids (`keep`) or its root's, stored
    /// as the host ids they map to, so the container sees them as given and may change
    /// them. An id past the range becomes the range's overflow id (65534, or its last).
    Shifted {
        /// Host uid of the container's uid 0.
        uid: u32,
        /// Host gid of the container's gid 0.
        gid: u32,
        /// Ids in the range.
        size: u32,
        /// The archive's ids rather than root's.
        keep: bool,
    },
}

impl Owners {
    /// The host ids an entry with header `h` is given.
    fn of(self, h: &tar::Header) -> io::Result<(u32, u32)> {
        Ok(match self {
            Owners::Keep => (h.uid()? as u32, h.gid()? as u32),
            Owners::Root => (0, 0),
            Owners::Shifted {
                uid,
                gid,
                size,
                keep,
            } => {
                let inside = |id: u64| match u32::try_from(id) {
                    Ok(i) if i < size => i,
                    _ => 65534.min(size.saturating_sub(1)),
                };
                let (u, g) = if keep { (h.uid()?, h.gid()?) } else { (0, 0) };
                (uid + inside(u), gid + inside(g))
            }
        })
    }
}

/// Extract `archive` below the directory `dest` (an open fd): the archive's paths are
/// taken relative to it, `..` refused, and no symlink is followed on the way to any entry
/// (one in the way is an error); an existing file is replaced, an existing directory kept.
pub fn extract(dest: BorrowedFd<'_>, archive: impl Read, owners: Owners) -> io::Result<u64> {
    let mut ar = tar::Archive::new(archive);
    let mut count = 0;
    let mut dirs = Vec::new();
    for entry in ar.entries()? {
        let mut entry = entry?;
        let path = entry.path()?.into_owned();
        let mut comps: Vec<OsString> = Vec::new();
        for c in path.components() {
            match c {
                Component::Normal(n) => comps.push(n.to_owned()),
                Component::CurDir | Component::RootDir => {}
                _ => {
                    return Err(io::Error::new(
                        io::ErrorKind::InvalidData,
                        format!("{}: a path with '..' is refused", path.display()),
                    ));
                }
            }
        }
        let Some((last, parents)) = comps.split_last() else {
            // The archive's own root (`./`): its owner, mode and time go to `dest`, as
            // docker's untar (ADD of an archive, cp) applies them.
            let h = entry.header();
            if h.entry_type().is_dir() {
                let (uid, gid) = owners.of(h)?;
                let mode = Mode::from_raw_mode(h.mode()? & 0o7777);
                dirs.push((Vec::new(), mode, uid, gid, h.mtime()? as i64));
            }
            continue;
        };
        let parent = fsops::open_dir(dest, parents).map_err(|e| {
            io::Error::new(
                e.kind(),
                format!("{}: its directory: {e}", fsops::join(parents).display()),
            )
        })?;
        let h = entry.header();
        let mode = Mode::from_raw_mode(h.mode()? & 0o7777);
        let (uid, gid) = owners.of(h)?;
        let mtime = h.mtime()? as i64;
        let kind = h.entry_type();
        let existing = fsops::stat_opt(parent.as_fd(), last)?;
        let is_dir = existing.is_some_and(|s| fsops::ftype(&s) == FileType::Directory);
        if existing.is_some() && !(kind.is_dir() && is_dir) {
            fsops::remove_all(parent.as_fd(), last)?;
        }
        match kind {
            tar::EntryType::Directory => {
                if !is_dir {
                    rustix::fs::mkdirat(&parent, last.as_os_str(), mode)?;
                }
                dirs.push((comps.clone(), mode, uid, gid, mtime));
            }
            tar::EntryType::Regular | tar::EntryType::Continuous => {
                let fd = rustix::fs::openat(
                    &parent,
                    last.as_os_str(),
                    OFlags::WRONLY
                        | OFlags::CREATE
                        | OFlags::EXCL
                        | OFlags::NOFOLLOW
                        | OFlags::CLOEXEC,
                    mode,
                )?;
                let mut f = File::from(fd);
                io::copy(&mut entry, &mut f)?;
                rustix::fs::fchown(&f, Some(ids(uid, gid).0), Some(ids(uid, gid).1))?;
                rustix::fs::fchmod(&f, mode)?;
                set_mtime(parent.as_fd(), last, mtime)?;
            }
            tar::EntryType::Symlink => {
                let target = entry.link_name()?.unwrap_or_default().into_owned();
                rustix::fs::symlinkat(target.as_os_str(), &parent, last.as_os_str())?;
                rustix::fs::chownat(
                    &parent,
                    last.as_os_str(),
                    Some(ids(uid, gid).0),
                    Some(ids(uid, gid).1),
                    AtFlags::SYMLINK_NOFOLLOW,
                )?;
            }
            tar::EntryType::Link => {
                let target = entry.link_name()?.unwrap_or_default().into_owned();
                let tcomps: Vec<OsString> = target
                    .components()
                    .filter_map(|c| match c {
                        Component::Normal(n) => Some(n.to_owned()),
                        _ => None,
                    })
                    .collect();
                let Some((tlast, tparents)) = tcomps.split_last() else {
                    continue;
                };
                let tdir = fsops::open_dir(dest, tparents)?;
                rustix::fs::linkat(
                    &tdir,
                    tlast.as_os_str(),
                    &parent,
                    last.as_os_str(),
                    AtFlags::empty(),
                )?;
            }
            tar::EntryType::Fifo => {
                rustix::fs::mknodat(&parent, last.as_os_str(), FileType::Fifo, mode, 0)?;
            }
            // Devices, and whatever else, are not made by a copy.
            _ => continue,
        }
        count += 1;
    }
    // Directories last (deepest first): their files are written by now.
    dirs.sort_by_key(|d| std::cmp::Reverse(d.0.len()));
    for (comps, mode, uid, gid, mtime) in dirs {
        let d = fsops::open_dir(dest, &comps)?;
        rustix::fs::fchown(&d, Some(ids(uid, gid).0), Some(ids(uid, gid).1))?;
        rustix::fs::fchmod(&d, mode)?;
        match comps.split_last() {
            Some((last, parents)) => {
                set_mtime(fsops::open_dir(dest, parents)?.as_fd(), last, mtime)?
            }
            None => {
                let t = rustix::fs::Timespec {
                    tv_sec: mtime,
                    tv_nsec: 0,
                };
                rustix::fs::futimens(
                    &d,
                    &rustix::fs::Timestamps {
                        last_access: t,
                        last_modification: t,
                    },
                )?;
            }
        }
    }
    Ok(count)
}

fn ids(uid: u32, gid: u32) -> (rustix::fs::Uid, rustix::fs::Gid) {
    (
        rustix::fs::Uid::from_raw(uid),
        rustix::fs::Gid::from_raw(gid),
    )
}

fn set_mtime(dir: BorrowedFd<'_>, name: &OsStr, mtime: i64) -> io::Result<()> {
    let t = rustix::fs::Timespec {
        tv_sec: mtime,
        tv_nsec: 0,
    };
    rustix::fs::utimensat(
        dir,
        name,
        &rustix::fs::Timestamps {
            last_access: t,
            last_modification: t,
        },
        AtFlags::SYMLINK_NOFOLLOW,
    )
    .map_err(Into::into)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    fn tar_of(dir: &Path, name: &str, walk: Walk) -> Vec<u8> {
        let fd = File::open(dir).unwrap();
        let mut b = tar::Builder::new(Vec::new());
        append_dir(&mut b, fd.as_fd(), Path::new(name), walk).unwrap();
        b.into_inner().unwrap()
    }

    fn names(tar: &[u8]) -> Vec<String> {
        let mut a = tar::Archive::new(tar);
        a.entries()
            .unwrap()
            .map(|e| e.unwrap().path().unwrap().display().to_string())
            .collect()
    }

    #[test]
    fn a_tree_round_trips_and_symlinks_stay_links() {
        let src = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(src.path().join("d/e")).unwrap();
        std::fs::write(src.path().join("d/e/f"), "hello").unwrap();
        symlink("/etc/passwd", src.path().join("d/escape")).unwrap();
        let t = tar_of(&src.path().join("d"), "d", Walk::Plain);
        assert_eq!(names(&t[..]), ["d/", "d/e/", "d/e/f", "d/escape"][..]);
        let dst = tempfile::tempdir().unwrap();
        let fd = File::open(dst.path()).unwrap();
        extract(fd.as_fd(), &t[..], Owners::Keep).unwrap();
        assert_eq!(
            std::fs::read_to_string(dst.path().join("d/e/f")).unwrap(),
            "hello"
        );
        assert_eq!(
            std::fs::read_link(dst.path().join("d/escape")).unwrap(),
            Path::new("/etc/passwd")
        );
    }

    #[test]
    fn shifted_owners_are_the_host_ids_of_the_archives_or_roots() {
        use std::os::unix::fs::MetadataExt;
        let mut b = tar::Builder::new(Vec::new());
        for (name, id) in [("mine", 5u64), ("far", 70000)] {
            let mut h = tar::Header::new_gnu();
            h.set_size(1);
            h.set_mode(0o644);
            h.set_uid(id);
            h.set_gid(id + 1);
            h.set_entry_type(tar::EntryType::Regular);
            b.append_data(&mut h, name, &b"x"[..]).unwrap();
        }
        let t = b.into_inner().unwrap();
        let ids = |keep: bool| {
            let dst = tempfile::tempdir().unwrap();
            let fd = File::open(dst.path()).unwrap();
            let owners = Owners::Shifted {
                uid: 100_000,
                gid: 200_000,
                size: 65536,
                keep,
            };
            extract(fd.as_fd(), &t[..], owners).unwrap();
            ["mine", "far"].map(|n| {
                let m = std::fs::metadata(dst.path().join(n)).unwrap();
                (m.uid(), m.gid())
            })
        };
        // The archive's ids shifted; one past the range as the range's overflow id.
        assert_eq!(
            ids(true),
            [(100_005, 200_006), (100_000 + 65534, 200_000 + 65534)]
        );
        // Root's: the range's first ids.
        assert_eq!(ids(false), [(100_000, 200_000); 2]);
    }

    #[test]
    fn extraction_refuses_dotdot_and_symlinked_parents() {
        let dst = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        symlink(outside.path(), dst.path().join("link")).unwrap();
        let fd = File::open(dst.path()).unwrap();
        for bad in ["../x", "link/x"] {
            let mut b = tar::Builder::new(Vec::new());
            let mut h = tar::Header::new_gnu();
            h.set_size(1);
            h.set_mode(0o644);
            h.set_entry_type(tar::EntryType::Regular);
            // set_path refuses "..": write the name field by hand.
            h.as_old_mut().name[..bad.len()].copy_from_slice(bad.as_bytes());
            h.set_cksum();
            b.append(&h, &b"x"[..]).unwrap();
            let t = b.into_inner().unwrap();
            assert!(extract(fd.as_fd(), &t[..], Owners::Root).is_err(), "{bad}");
        }
        assert_eq!(std::fs::read_dir(outside.path()).unwrap().count(), 0);
    }

    #[test]
    fn an_overlay_upper_dir_becomes_a_layer() {
        let up = tempfile::tempdir().unwrap();
        std::fs::create_dir(up.path().join("etc")).unwrap();
        std::fs::write(up.path().join("etc/new"), "n").unwrap();
        rustix::fs::mknodat(
            File::open(up.path().join("etc")).unwrap().as_fd(),
            "gone",
            FileType::CharacterDevice,
            Mode::empty(),
            0,
        )
        .unwrap();
        std::fs::create_dir(up.path().join("opaque")).unwrap();
        rustix::fs::setxattr(
            up.path().join("opaque"),
            fsops::OPAQUE_XATTR,
            b"y",
            rustix::fs::XattrFlags::empty(),
        )
        .unwrap();
        let t = tar_of(up.path(), "", Walk::OverlayUpper);
        assert_eq!(
            names(&t[..]),
            [
                "etc/",
                "etc/.wh.gone",
                "etc/new",
                "opaque/",
                "opaque/.wh..wh..opq"
            ][..]
        );
    }
}
