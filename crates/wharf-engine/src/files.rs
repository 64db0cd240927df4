//! A container's files from outside it: `cp` in both directions, `export`, `diff` and
//! `commit`.
//!
//! Paths are the container's: resolved with openat2 `RESOLVE_IN_ROOT` against its root, so
//! a symlink in the container (`/data -> /`) means the container's `/`, never the host's,
//! and the trees are then walked and written through file descriptors (see
//! [`wharf_image::tree_tar`]). A running container is reached through `/proc/PID/root`, so
//! its volumes and tmpfs mounts are seen as it sees them; a stopped one through its root
//! filesystem's mount.

use std::fs::File;
use std::io::{Read, Seek, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};

use rustix::fs::{AtFlags, FileType};
use wharf_image::tree_tar::{Owners, Walk};

/// The tar reader and writer these copies use, walking trees through file descriptors. A
/// front end packs and unpacks the host's side of a copy (`wharf cp`) with it, so that both
/// sides follow the same rules (no symlink followed out of the tree, owners as asked).
pub use wharf_image::tree_tar;

use crate::db::ContainerRow;
use crate::engine::Engine;
use crate::error::{Context, Error, Result};
use crate::model::ContainerState;

/// Files the engine places in every container for its own mounts (name files of the pod):
/// not the container's changes, so `diff` and `commit` leave them out, as docker does.
const ENGINE_FILES: [&str; 3] = ["etc/hosts", "etc/hostname", "etc/resolv.conf"];

/// One line of `diff`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Change {
    /// `A` added, `C` changed, `D` deleted.
    pub kind: char,
    /// The path in the container.
    pub path: String,
}

/// What a path in a container is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PathKind {
    /// A directory.
    Dir,
    /// Anything else.
    Other,
}

/// What docker's archive endpoints tell of a path (`X-Docker-Container-Path-Stat`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PathStat {
    /// Its last name.
    pub name: String,
    /// Its size.
    pub size: i64,
    /// Go's file mode bits.
    pub mode: u32,
    /// When it changed (RFC 3339).
    pub mtime: String,
    /// A symlink's target.
    pub link_target: String,
}

/// What `commit` records besides the changes.
#[derive(Debug, Default)]
pub struct CommitRequest<'a> {
    /// The new image's name.
    pub name: Option<&'a str>,
    /// Dockerfile instructions for its config.
    pub changes: &'a [String],
    /// A comment for its history.
    pub comment: Option<&'a str>,
    /// Its author.
    pub author: Option<&'a str>,
    /// Freeze the container while its changes are read (docker's default).
    pub pause: bool,
}

impl Engine {
    /// The container's root as a directory fd: its init's root while it runs, else its
    /// root filesystem's mount.
    fn container_root(&self, row: &ContainerRow) -> Result<OwnedFd> {
        let pid = match row.state {
            ContainerState::Running | ContainerState::Paused => self.container_status(&row.id)?.pid,
            _ => None,
        };
        let path = match pid {
            Some(p) => PathBuf::from(format!("/proc/{p}/root")),
            None => {
                let p = self.paths.rootfs(&row.id);
                if !wharf_image::snapshot::is_mountpoint(&p) {
                    return Err(Error::Precondition(format!(
                        "container {}: its root filesystem is not mounted",
                        row.name
                    )));
                }
                p
            }
        };
        rustix::fs::open(
            &path,
            rustix::fs::OFlags::RDONLY
                | rustix::fs::OFlags::DIRECTORY
                | rustix::fs::OFlags::CLOEXEC,
            rustix::fs::Mode::empty(),
        )
        .ctx(|| format!("container {}: opening its root", row.name))
    }

    /// What docker's archive endpoints say of `path` in the container (its last name,
    /// size, Go file mode bits, modification time and link target), not following a final
    /// symlink.
    pub fn path_stat(&self, key: &str, path: &str) -> Result<PathStat> {
        let row = self.db.find_container(key)?;
        let root = self.container_root(&row)?;
        let clean = std::path::Path::new(path);
        let (parent, last) = match (clean.parent(), clean.file_name()) {
            (Some(p), Some(l)) => (p.to_path_buf(), l.to_os_string()),
            _ => (PathBuf::from("/"), std::ffi::OsString::from(".")),
        };
        let dir =
            tree_tar::open_in_root(root.as_fd(), &parent.to_string_lossy()).map_err(|e| match e
                .kind()
            {
                std::io::ErrorKind::NotFound => Error::NotFound {
                    kind: "file in the container",
                    name: format!("{}:{path}", row.name),
                },
                _ => Error::Os {
                    what: format!("{}:{path}", row.name),
                    err: e,
                },
            })?;
        let st =
            rustix::fs::statat(&dir, last.as_os_str(), AtFlags::SYMLINK_NOFOLLOW).map_err(|e| {
                match e {
                    rustix::io::Errno::NOENT => Error::NotFound {
                        kind: "file in the container",
                        name: format!("{}:{path}", row.name),
                    },
                    e => Error::Os {
                        what: format!("{}:{path}", row.name),
                        err: e.into(),
                    },
                }
            })?;
        let kind = FileType::from_raw_mode(st.st_mode);
        // Go's os.FileMode: the permission bits, with its type and mode bits on top.
        let mut mode = st.st_mode & 0o777;
        match kind {
            FileType::Directory => mode |= 1 << 31,
            FileType::Symlink => mode |= 1 << 27,
            FileType::Fifo => mode |= 1 << 25,
            FileType::Socket => mode |= 1 << 24,
            FileType::CharacterDevice => mode |= (1 << 26) | (1 << 21),
            FileType::BlockDevice => mode |= 1 << 26,
            _ => {}
        }
        if st.st_mode & 0o4000 != 0 {
            mode |= 1 << 23;
        }
        if st.st_mode & 0o2000 != 0 {
            mode |= 1 << 22;
        }
        if st.st_mode & 0o1000 != 0 {
            mode |= 1 << 20;
        }
        let link_target = if kind == FileType::Symlink {
            rustix::fs::readlinkat(&dir, last.as_os_str(), Vec::new())
                .map(|t| t.to_string_lossy().into_owned())
                .unwrap_or_default()
        } else {
            String::new()
        };
        Ok(PathStat {
            name: last.to_string_lossy().into_owned(),
            size: st.st_size,
            mode,
            mtime: wharf_sys::time::rfc3339(st.st_mtime, st.st_mtime_nsec as u32, true),
            link_target,
        })
    }

    /// What `path` is in the container (None: nothing there).
    pub fn path_kind(&self, key: &str, path: &str) -> Result<Option<PathKind>> {
        let row = self.db.find_container(key)?;
        let root = self.container_root(&row)?;
        match tree_tar::open_in_root(root.as_fd(), path) {
            Ok(fd) => {
                let st = rustix::fs::fstat(&fd).ctx(|| format!("{}:{path}", row.name))?;
                Ok(Some(
                    if FileType::from_raw_mode(st.st_mode) == FileType::Directory {
                        PathKind::Dir
                    } else {
                        PathKind::Other
                    },
                ))
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(Error::Os {
                what: format!("{}:{path}", row.name),
                err: e,
            }),
        }
    }

    /// A tar of `path` in the container: its entries named `name` (a directory's below
    /// `name/`), or, `name` empty, a directory's contents at the top.
    pub fn copy_out(&self, key: &str, path: &str, name: &str, out: impl Write) -> Result<()> {
        let row = self.db.find_container(key)?;
        let root = self.container_root(&row)?;
        let what = || format!("copying {}:{path}", row.name);
        let fd = open_named(&root, &row, path, "file in the container", what)?;
        let st = rustix::fs::fstat(&fd).ctx(what)?;
        // A container in a user namespace of its own sees its files' owners through its
        // pod's map: they leave it as it sees them.
        let pod = self.db.find_pod(&row.pod_id)?;
        let walk = match pod.spec.userns.as_ref().and_then(shifted_range) {
            Some((uid, gid, size)) => Walk::Shifted { uid, gid, size },
            None => Walk::Plain,
        };
        let mut tar = tar::Builder::new(out);
        if FileType::from_raw_mode(st.st_mode) == FileType::Directory {
            let dir = tree_tar::reopen_dir(fd.as_fd()).ctx(what)?;
            tree_tar::append_dir(&mut tar, dir.as_fd(), Path::new(name), walk).ctx(what)?;
        } else {
            // A single entry: opened again through its parent, by name, without following.
            let (parent, base) = match path.trim_end_matches('/').rsplit_once('/') {
                Some((p, b)) => (if p.is_empty() { "/" } else { p }, b),
                None => ("/", path),
            };
            let pfd = tree_tar::open_in_root(root.as_fd(), parent).ctx(what)?;
            let pdir = tree_tar::reopen_dir(pfd.as_fd()).ctx(what)?;
            let name = if name.is_empty() { base } else { name };
            tree_tar::append_child(
                &mut tar,
                pdir.as_fd(),
                std::ffi::OsStr::new(base),
                Path::new(name),
                walk,
            )
            .ctx(what)?;
        }
        tar.finish().ctx(what)
    }

    /// Extract `archive` into directory `dest` of the container (owners root's unless
    /// `keep_owners`, as docker's `cp` and `cp -a`; in a user namespace of its own, the
    /// host ids of those).
    pub fn copy_in(
        &self,
        key: &str,
        dest: &str,
        archive: impl Read,
        keep_owners: bool,
    ) -> Result<u64> {
        let row = self.db.find_container(key)?;
        let root = self.container_root(&row)?;
        let what = || format!("copying into {}:{dest}", row.name);
        let fd = open_named(&root, &row, dest, "directory in the container", what)?;
        let dir = tree_tar::reopen_dir(fd.as_fd()).ctx(what)?;
        // A container in a user namespace of its own sees host ids through its pod's map:
        // what is copied in gets the host ids of the ids it should show inside.
        let pod = self.db.find_pod(&row.pod_id)?;
        let owners = match pod.spec.userns.as_ref().and_then(shifted_range) {
            Some((uid, gid, size)) => Owners::Shifted {
                uid,
                gid,
                size,
                keep: keep_owners,
            },
            None if keep_owners => Owners::Keep,
            None => Owners::Root,
        };
        tree_tar::extract(dir.as_fd(), archive, owners).ctx(what)
    }

    /// A tar of the container's whole root filesystem (its image and its changes, not its
    /// volumes), as `docker export` writes it.
    pub fn export(&self, key: &str, out: impl Write) -> Result<()> {
        let row = self.db.find_container(key)?;
        let p = self.paths.rootfs(&row.id);
        if !wharf_image::snapshot::is_mountpoint(&p) {
            return Err(Error::Precondition(format!(
                "container {}: its root filesystem is not mounted",
                row.name
            )));
        }
        let what = || format!("exporting container {}", row.name);
        let root = File::open(&p).ctx(what)?;
        let mut tar = tar::Builder::new(out);
        tree_tar::append_dir(&mut tar, root.as_fd(), Path::new(""), Walk::Plain).ctx(what)?;
        tar.finish().ctx(what)
    }

    /// The bytes of the container's writable layer (what it changed).
    pub fn writable_size(&self, key: &str) -> Result<u64> {
        let row = self.db.find_container(key)?;
        let rootfs = self.images.container_rootfs(&row.id)?;
        Ok(tree_size(&rootfs.upper_dir))
    }

    /// The directory of a container's writable layer (where its stats measure what it
    /// wrote).
    pub fn writable_layer(&self, row: &ContainerRow) -> Result<PathBuf> {
        Ok(self.images.container_rootfs(&row.id)?.upper_dir)
    }

    /// What the container changed in its image's files, by path.
    pub fn diff(&self, key: &str) -> Result<Vec<Change>> {
        let row = self.db.find_container(key)?;
        let rootfs = self.images.container_rootfs(&row.id)?;
        let mut out = Vec::new();
        let upper =
            File::open(&rootfs.upper_dir).ctx(|| format!("container {}: its layer", row.name))?;
        walk_changes(upper.as_fd(), Path::new(""), &rootfs.lower_dirs, &mut out)
            .ctx(|| format!("container {}: reading its changes", row.name))?;
        out.sort_by(|a, b| a.path.cmp(&b.path));
        Ok(out)
    }

    /// The container's writable layer as an OCI layer tar, spooled to an unnamed file on
    /// the state disk (a build step's layer).
    pub(crate) fn spool_layer(&self, row: &ContainerRow) -> Result<File> {
        let rootfs = self.images.container_rootfs(&row.id)?;
        tempfile::tempfile_in(&self.paths.root)
            .and_then(|mut spool| {
                layer_of(&rootfs.upper_dir, &mut spool)?;
                spool.rewind()?;
                Ok(spool)
            })
            .ctx(|| format!("container {}: reading its changes", row.name))
    }

    /// Make an image of the container's image and its changes.
    pub fn commit(&self, key: &str, req: &CommitRequest<'_>) -> Result<wharf_image::Image> {
        let row = self.db.find_container(key)?;
        let base = self.images.resolve(&row.image_id)?;
        let rootfs = self.images.container_rootfs(&row.id)?;
        let paused = req.pause
            && row.state == ContainerState::Running
            && self.set_paused(&row.id, true).is_ok();
        // Spooled to an unnamed file on the state disk, not held in memory: a container's
        // changes may be gigabytes.
        let layer = tempfile::tempfile_in(&self.paths.root).and_then(|mut spool| {
            layer_of(&rootfs.upper_dir, &mut spool)?;
            spool.rewind()?;
            Ok(spool)
        });
        if paused {
            let _ = self.set_paused(&row.id, false);
        }
        let layer = layer.ctx(|| format!("container {}: reading its changes", row.name))?;
        let created_by = row
            .spec
            .entrypoint
            .iter()
            .chain(&row.spec.command)
            .flatten()
            .map(String::as_str)
            .collect::<Vec<_>>()
            .join(" ");
        Ok(self.images.commit(
            &base,
            std::io::BufReader::new(layer),
            req.name,
            &wharf_image::commit::CommitOptions {
                changes: req.changes,
                comment: req.comment,
                author: req.author,
                created_by: &created_by,
            },
        )?)
    }
}

/// The bytes of the files below `p` (symlinks not followed; hard links counted each time).
pub fn tree_size(p: &Path) -> u64 {
    let Ok(m) = std::fs::symlink_metadata(p) else {
        return 0;
    };
    if !m.is_dir() {
        return m.len();
    }
    std::fs::read_dir(p)
        .map(|rd| rd.flatten().map(|e| tree_size(&e.path())).sum())
        .unwrap_or(0)
}

/// `path` in the container's root; a missing one is a NotFound naming `CONTAINER:PATH`.
fn open_named(
    root: &OwnedFd,
    row: &ContainerRow,
    path: &str,
    kind: &'static str,
    what: impl FnOnce() -> String,
) -> Result<OwnedFd> {
    tree_tar::open_in_root(root.as_fd(), path).map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => Error::NotFound {
            kind,
            name: format!("{}:{path}", row.name),
        },
        _ => Error::Os {
            what: what(),
            err: e,
        },
    })
}

/// The writable layer at `upper` as an OCI layer tar, without the engine's own files.
fn layer_of(upper: &Path, out: &mut File) -> std::io::Result<()> {
    let dir = File::open(upper)?;
    let mut tar = tar::Builder::new(std::io::BufWriter::new(out));
    let mut names: Vec<std::ffi::OsString> = Vec::new();
    for e in std::fs::read_dir(upper)? {
        names.push(e?.file_name());
    }
    names.sort();
    for n in names {
        if n == "etc" {
            append_etc(&mut tar, dir.as_fd())?;
        } else {
            tree_tar::append_child(&mut tar, dir.as_fd(), &n, Path::new(&n), Walk::OverlayUpper)?;
        }
    }
    tar.into_inner()?.flush()
}

/// The layer's `etc`: all of it but the engine's name files.
fn append_etc(
    tar: &mut tar::Builder<impl Write>,
    upper: std::os::fd::BorrowedFd<'_>,
) -> std::io::Result<()> {
    let st = rustix::fs::statat(upper, "etc", AtFlags::SYMLINK_NOFOLLOW)?;
    if FileType::from_raw_mode(st.st_mode) != FileType::Directory {
        return tree_tar::append_child(
            tar,
            upper,
            "etc".as_ref(),
            Path::new("etc"),
            Walk::OverlayUpper,
        );
    }
    let etc = tree_tar::open_child_dir(upper, "etc".as_ref())?;
    let mut names = Vec::new();
    for e in rustix::fs::Dir::read_from(&etc)? {
        let e = e?;
        let n = std::ffi::OsStr::from_bytes(e.file_name().to_bytes()).to_owned();
        if n != "."
            && n != ".."
            && !ENGINE_FILES.contains(&format!("etc/{}", n.to_string_lossy()).as_str())
        {
            names.push(n);
        }
    }
    if names.is_empty() {
        return Ok(());
    }
    names.sort();
    let mut h = tar::Header::new_gnu();
    h.set_entry_type(tar::EntryType::Directory);
    h.set_mode(st.st_mode & 0o7777);
    h.set_uid(u64::from(st.st_uid));
    h.set_gid(u64::from(st.st_gid));
    h.set_mtime(st.st_mtime.max(0) as u64);
    h.set_size(0);
    tar.append_data(&mut h, "etc/", std::io::empty())?;
    for n in names {
        tree_tar::append_child(
            tar,
            etc.as_fd(),
            &n,
            &Path::new("etc").join(&n),
            Walk::OverlayUpper,
        )?;
    }
    Ok(())
}

use std::os::unix::ffi::OsStrExt;

/// Collect the changes below `dir` (the upper layer at `rel`).
fn walk_changes(
    dir: std::os::fd::BorrowedFd<'_>,
    rel: &Path,
    lowers: &[PathBuf],
    out: &mut Vec<Change>,
) -> std::io::Result<()> {
    let listing = tree_tar::reopen_dir(dir)?;
    for e in rustix::fs::Dir::read_from(&listing)? {
        let e = e?;
        let n = std::ffi::OsStr::from_bytes(e.file_name().to_bytes()).to_owned();
        if n == "." || n == ".." {
            continue;
        }
        let path = rel.join(&n);
        let shown = format!("/{}", path.display());
        if ENGINE_FILES.contains(&path.to_string_lossy().as_ref()) {
            continue;
        }
        let st = rustix::fs::statat(dir, &n, AtFlags::SYMLINK_NOFOLLOW)?;
        let kind = FileType::from_raw_mode(st.st_mode);
        if kind == FileType::CharacterDevice && st.st_rdev == 0 {
            out.push(Change {
                kind: 'D',
                path: shown,
            });
            continue;
        }
        let in_lower = lowers
            .iter()
            .any(|l| std::fs::symlink_metadata(l.join(&path)).is_ok());
        let is_dir = kind == FileType::Directory;
        // A directory copied up for a change below it shows as C, as in docker.
        let mut below = Vec::new();
        if is_dir {
            let sub = tree_tar::open_child_dir(dir, &n)?;
            walk_changes(sub.as_fd(), &path, lowers, &mut below)?;
            // /etc copied up only to hold the engine's name files is no change.
            if in_lower && below.is_empty() && path == Path::new("etc") {
                continue;
            }
        }
        out.push(Change {
            kind: if in_lower { 'C' } else { 'A' },
            path: shown,
        });
        out.append(&mut below);
    }
    Ok(())
}

/// A user namespace's maps as one range from id 0 (host uid, host gid, size), the shape
/// every map Wharf and kubelet make has; longer maps give the range their first lines
/// share.
fn shifted_range(ns: &crate::model::UserNamespace) -> Option<(u32, u32, u32)> {
    let u = ns.uid_map.iter().find(|r| r.container_id == 0)?;
    let g = ns.gid_map.iter().find(|r| r.container_id == 0)?;
    Some((u.host_id, g.host_id, u.size.min(g.size)))
}
