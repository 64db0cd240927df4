//! Applying a layer (a tar diff) into a snapshot directory in overlayfs format.
//!
//! Each layer is unpacked into its own, initially empty directory (the snapshot's `fs/`);
//! the layers below are read-only "lowers". The container later sees them stacked by
//! overlayfs, so the unpacker writes what overlayfs reads:
//! - `.wh.NAME` becomes a whiteout (a 0/0 character device `NAME`), `.wh..wh..opq` marks its
//!   directory opaque (`trusted.overlay.opaque=y`); other `.wh..wh.*` (aufs metadata) are
//!   skipped.
//! - Parents an entry needs but the layer does not contain are created with the metadata of
//!   the same directory in the lowers (what an overlayfs copy-up would do), so the stacked
//!   view keeps their mode, owner and times.
//! - Ownership, modes (setuid, sticky), xattrs (`security.capability` included), mtimes,
//!   hard links, symlinks, device nodes and fifos are kept.
//!
//! # Safety (what a hostile layer cannot do)
//! Nothing an entry says can create or change anything outside the snapshot directory.
//! The rules follow containerd's applier:
//! - **confined**: `..` components and absolute names are cleaned lexically against the
//!   layer root (`../../etc/x` is `etc/x` in the snapshot). Symlinks met while resolving an
//!   entry's parent directories, in this layer or in a lower one, are followed inside the
//!   stacked rootfs as if it were `/` (an absolute target or too many `..` stop at the
//!   rootfs root). The final component is never followed: an entry replaces a symlink, it
//!   does not write through it. Hard link targets are resolved the same way; a target only
//!   in a lower layer is copied up first (as overlayfs would).
//! - **rejected** (the whole layer fails): a whiteout of `.`/`..`/empty name, a hard link
//!   to a directory or to a missing file, a path through a non-directory, symlink loops.
//! - `trusted.overlay.*` xattrs in a layer are dropped (they would steer overlayfs).
//!
//! Resolution is done in user space over the layer stack (overlayfs lookup rules), and
//! every directory is then opened with openat2 `RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS`
//! ([`fsops::open_dir`]), so even a mistake in that resolution fails closed.

pub mod fsops;

use std::collections::HashMap;
use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::io::{self, Read};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use rustix::fs::{AtFlags, FileType, Gid, Mode, OFlags, Timestamps, Uid, XattrFlags};

use crate::error::{Error, Result};
use fsops::{Rel, is_whiteout};

/// Most symlinks followed while resolving one path (Linux's own limit).
const MAX_LINKS: usize = 40;

/// Counters of one applied layer.
#[derive(Clone, Debug, Default)]
pub struct ApplyStats {
    /// Tar entries processed.
    pub entries: u64,
    /// Bytes of regular file data written.
    pub bytes: u64,
}

/// What the stacked view (upper + lowers) has at a path.
enum Found {
    Missing,
    /// A directory, present in these layers (0 = upper), top first, cut below an opaque one.
    Dir(Vec<usize>),
    /// A symlink (with its target) in layer `.0`.
    Symlink(usize, Vec<u8>),
    /// Another non-directory in layer `.0`.
    Other(usize),
}

/// Unpack the tar stream `r` into `upper` (an empty directory) on top of `lowers`
/// (top first).
pub fn apply_layer<R: Read>(r: R, upper: &Path, lowers: &[&Path]) -> Result<ApplyStats> {
    let open = |p: &Path| -> Result<OwnedFd> {
        rustix::fs::open(
            p,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| Error::io(format!("opening {}", p.display()), e))
    };
    let mut layers = vec![open(upper)?];
    for l in lowers {
        layers.push(open(l)?);
    }
    let mut a = Applier {
        layers,
        dir_times: HashMap::new(),
        stats: ApplyStats::default(),
    };
    a.init_root()?;
    let mut archive = tar::Archive::new(r);
    let entries = archive
        .entries()
        .map_err(|e| Error::Invalid(format!("reading layer tar: {e}")))?;
    for entry in entries {
        let mut entry = entry.map_err(|e| Error::Invalid(format!("reading layer tar: {e}")))?;
        a.entry(&mut entry)?;
        a.stats.entries += 1;
    }
    a.restore_dir_times();
    Ok(a.stats)
}

struct Applier {
    /// 0 = the upper (being written), then the lowers, top first.
    layers: Vec<OwnedFd>,
    /// Directories of the upper whose times are set last (creating children changes them).
    dir_times: HashMap<Vec<OsString>, Timestamps>,
    stats: ApplyStats,
}

/// Entry metadata from the tar header and its PAX records.
struct Meta {
    mode: u32,
    uid: u32,
    gid: u32,
    times: Timestamps,
    xattrs: Vec<(String, Vec<u8>)>,
}

fn unsafe_entry(name: &[u8], reason: impl Into<String>) -> Error {
    Error::UnsafeEntry {
        entry: String::from_utf8_lossy(name).into_owned(),
        reason: reason.into(),
    }
}

fn io_err(name: &[u8], what: &str, e: impl Into<io::Error>) -> Error {
    Error::io(
        format!("{what} {:?}", String::from_utf8_lossy(name)),
        e.into(),
    )
}

/// Lexically clean a tar name: drop `.` and empty components, resolve `..` against the
/// components before it, never above the root.
pub fn clean(name: &[u8]) -> Vec<OsString> {
    let mut out: Vec<OsString> = Vec::new();
    for c in name.split(|b| *b == b'/') {
        match c {
            b"" | b"." => {}
            b".." => {
                out.pop();
            }
            c => out.push(OsStr::from_bytes(c).to_os_string()),
        }
    }
    out
}

fn ts(sec: i64, nsec: i64) -> rustix::fs::Timespec {
    rustix::fs::Timespec {
        tv_sec: sec,
        tv_nsec: nsec as _,
    }
}

/// Parse a PAX time ("1700000000.123") into (sec, nsec).
fn pax_time(v: &str) -> Option<(i64, i64)> {
    let (s, frac) = match v.split_once('.') {
        Some((s, f)) => (s, f),
        None => (v, ""),
    };
    let sec: i64 = s.parse().ok()?;
    let mut digits: String = frac.chars().take(9).collect();
    if !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    while digits.len() < 9 {
        digits.push('0');
    }
    let mut nsec: i64 = digits.parse().ok()?;
    if sec < 0 && nsec > 0 {
        nsec = -nsec;
    }
    Some((sec, nsec))
}

impl Applier {
    fn fd(&self, layer: usize) -> BorrowedFd<'_> {
        self.layers[layer].as_fd()
    }

    fn all_layers(&self) -> Vec<usize> {
        (0..self.layers.len()).collect()
    }

    /// The upper's root starts with the metadata of the top lower's root.
    fn init_root(&mut self) -> Result<()> {
        if self.layers.len() > 1 {
            let st = rustix::fs::fstat(self.fd(1)).map_err(|e| Error::io("stat lower root", e))?;
            let up = self.fd(0);
            let _ = rustix::fs::fchown(
                up,
                Some(Uid::from_raw(st.st_uid)),
                Some(Gid::from_raw(st.st_gid)),
            );
            let _ = rustix::fs::fchmod(up, Mode::from_raw_mode(st.st_mode & 0o7777));
            for (k, v) in fsops::list_xattrs(self.fd(1)).unwrap_or_default() {
                let _ = rustix::fs::fsetxattr(up, k.as_str(), &v, XattrFlags::empty());
            }
            self.dir_times.insert(Vec::new(), fsops::times_of(&st));
        }
        Ok(())
    }

    fn meta<R: Read>(entry: &mut tar::Entry<'_, R>, name: &[u8]) -> Result<Meta> {
        let h = entry.header();
        let bad = |what: &str| unsafe_entry(name, format!("unreadable {what} in its tar header"));
        let mode = h.mode().map_err(|_| bad("mode"))? & 0o7777;
        let uid = h.uid().map_err(|_| bad("uid"))?;
        let gid = h.gid().map_err(|_| bad("gid"))?;
        let mtime = h.mtime().map_err(|_| bad("mtime"))? as i64;
        let uid = u32::try_from(uid).map_err(|_| bad("uid"))?;
        let gid = u32::try_from(gid).map_err(|_| bad("gid"))?;
        let mut m = Meta {
            mode,
            uid,
            gid,
            times: Timestamps {
                last_access: ts(mtime, 0),
                last_modification: ts(mtime, 0),
            },
            xattrs: Vec::new(),
        };
        let mut atime = None;
        if let Some(pax) = entry
            .pax_extensions()
            .map_err(|e| unsafe_entry(name, format!("bad PAX header: {e}")))?
        {
            for ext in pax {
                let ext = ext.map_err(|e| unsafe_entry(name, format!("bad PAX record: {e}")))?;
                let Ok(key) = ext.key() else { continue };
                if let Some(x) = key.strip_prefix("SCHILY.xattr.") {
                    m.xattrs.push((x.to_string(), ext.value_bytes().to_vec()));
                } else if key == "mtime" {
                    if let Some((s, n)) = ext.value().ok().and_then(pax_time) {
                        m.times.last_modification = ts(s, n);
                    }
                } else if key == "atime" {
                    atime = ext.value().ok().and_then(pax_time);
                }
            }
        }
        m.times.last_access = match atime {
            Some((s, n)) => ts(s, n),
            None => m.times.last_modification,
        };
        Ok(m)
    }

    fn entry<R: Read>(&mut self, entry: &mut tar::Entry<'_, R>) -> Result<()> {
        let raw = entry.path_bytes().into_owned();
        let kind = entry.header().entry_type();
        use tar::EntryType as T;
        if matches!(
            kind,
            T::XGlobalHeader | T::XHeader | T::GNULongName | T::GNULongLink
        ) {
            return Ok(());
        }
        let mut comps = clean(&raw);
        let Some(base) = comps.pop() else {
            // The layer root itself ("./"): its metadata becomes the upper root's.
            if kind == T::Directory {
                let m = Self::meta(entry, &raw)?;
                let up = self.fd(0);
                self.set_owner_mode_fd(up, &m, &raw)?;
                self.dir_times.insert(Vec::new(), m.times);
            }
            return Ok(());
        };
        let base_b = base.as_bytes();
        if let Some(target) = base_b.strip_prefix(b".wh.") {
            return self.whiteout(&raw, comps, target);
        }
        let meta = Self::meta(entry, &raw)?;
        let (parent, _) = self.resolve_dir(&comps, &raw)?;
        let pfd = self.ensure_upper_dir(&parent, &raw)?;
        let pfd = pfd.as_fd();
        let mut path = parent.clone();
        path.push(base.clone());
        match kind {
            T::Directory => {
                match fsops::stat_opt(pfd, &base).map_err(|e| io_err(&raw, "stat", e))? {
                    Some(st) if fsops::ftype(&st) == FileType::Directory => {}
                    existing => {
                        let was_whiteout = existing.as_ref().is_some_and(is_whiteout);
                        if existing.is_some() {
                            fsops::remove_all(pfd, &base)
                                .map_err(|e| io_err(&raw, "replacing", e))?;
                        }
                        rustix::fs::mkdirat(pfd, &base, Mode::from_raw_mode(0o700))
                            .map_err(|e| io_err(&raw, "mkdir", e))?;
                        if was_whiteout {
                            self.set_opaque(pfd, &base, &raw)?;
                        }
                    }
                }
                let dfd = rustix::fs::openat(
                    pfd,
                    &base,
                    OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                    Mode::empty(),
                )
                .map_err(|e| io_err(&raw, "opening", e))?;
                self.set_owner_mode_fd(dfd.as_fd(), &meta, &raw)?;
                self.set_xattrs_fd(dfd.as_fd(), &meta, &raw)?;
                self.dir_times.insert(path, meta.times);
            }
            T::Regular | T::Continuous | T::GNUSparse => {
                fsops::remove_all(pfd, &base).map_err(|e| io_err(&raw, "replacing", e))?;
                let fd = rustix::fs::openat(
                    pfd,
                    &base,
                    OFlags::CREATE
                        | OFlags::EXCL
                        | OFlags::WRONLY
                        | OFlags::NOFOLLOW
                        | OFlags::CLOEXEC,
                    Mode::from_raw_mode(0o600),
                )
                .map_err(|e| io_err(&raw, "creating", e))?;
                let mut f = File::from(fd);
                let n = io::copy(entry, &mut f).map_err(|e| io_err(&raw, "writing", e))?;
                self.stats.bytes += n;
                self.set_owner_mode_fd(f.as_fd(), &meta, &raw)?;
                self.set_xattrs_fd(f.as_fd(), &meta, &raw)?;
                rustix::fs::futimens(&f, &meta.times).map_err(|e| io_err(&raw, "utimens", e))?;
            }
            T::Symlink => {
                let target = entry
                    .link_name_bytes()
                    .ok_or_else(|| unsafe_entry(&raw, "symlink without a target"))?
                    .into_owned();
                if target.is_empty() || target.contains(&0) {
                    return Err(unsafe_entry(&raw, "invalid symlink target"));
                }
                fsops::remove_all(pfd, &base).map_err(|e| io_err(&raw, "replacing", e))?;
                rustix::fs::symlinkat(OsStr::from_bytes(&target), pfd, &base)
                    .map_err(|e| io_err(&raw, "symlink", e))?;
                self.finish_at(pfd, &base, &meta, &raw, false)?;
            }
            T::Link => {
                let target = entry
                    .link_name_bytes()
                    .ok_or_else(|| unsafe_entry(&raw, "hard link without a target"))?
                    .into_owned();
                self.hardlink(pfd, &base, &path, &target, &raw)?;
            }
            T::Char | T::Block | T::Fifo => {
                let h = entry.header();
                let major = h.device_major().ok().flatten().unwrap_or(0);
                let minor = h.device_minor().ok().flatten().unwrap_or(0);
                let ft = match kind {
                    T::Char => FileType::CharacterDevice,
                    T::Block => FileType::BlockDevice,
                    _ => FileType::Fifo,
                };
                fsops::remove_all(pfd, &base).map_err(|e| io_err(&raw, "replacing", e))?;
                rustix::fs::mknodat(
                    pfd,
                    &base,
                    ft,
                    Mode::from_raw_mode(meta.mode & 0o777),
                    rustix::fs::makedev(major, minor),
                )
                .map_err(|e| io_err(&raw, "mknod", e))?;
                self.finish_at(pfd, &base, &meta, &raw, true)?;
            }
            other => {
                return Err(Error::Invalid(format!(
                    "layer entry {:?}: unsupported tar entry type {other:?}",
                    String::from_utf8_lossy(&raw)
                )));
            }
        }
        Ok(())
    }

    /// `.wh.NAME` (delete NAME from the lowers) or `.wh..wh..opq` (hide the lowers' content
    /// of this directory).
    fn whiteout(&mut self, raw: &[u8], dir: Vec<OsString>, target: &[u8]) -> Result<()> {
        if target == b".wh..opq" {
            let (parent, _) = self.resolve_dir(&dir, raw)?;
            if parent.is_empty() {
                let up = self.fd(0);
                return rustix::fs::fsetxattr(up, fsops::OPAQUE_XATTR, b"y", XattrFlags::empty())
                    .map_err(|e| io_err(raw, "marking opaque", e));
            }
            let (name, pp) = parent.split_last().expect("not empty");
            let pfd = self.ensure_upper_dir(pp, raw)?;
            // The directory itself must exist in the upper to carry the marker.
            let full = parent.clone();
            let dfd = self.ensure_upper_dir(&full, raw)?;
            drop(dfd);
            return self.set_opaque(pfd.as_fd(), name, raw);
        }
        if target.starts_with(b".wh.") {
            return Ok(()); // aufs metadata (.wh..wh.plnk, .wh..wh.aufs)
        }
        if target.is_empty() || target == b"." || target == b".." {
            return Err(unsafe_entry(raw, "invalid whiteout name"));
        }
        let (parent, _) = self.resolve_dir(&dir, raw)?;
        let pfd = self.ensure_upper_dir(&parent, raw)?;
        let name = OsStr::from_bytes(target);
        fsops::remove_all(pfd.as_fd(), name).map_err(|e| io_err(raw, "whiteout", e))?;
        rustix::fs::mknodat(
            pfd.as_fd(),
            name,
            FileType::CharacterDevice,
            Mode::empty(),
            rustix::fs::makedev(0, 0),
        )
        .map_err(|e| io_err(raw, "creating whiteout", e))?;
        Ok(())
    }

    fn set_opaque(&self, pfd: BorrowedFd<'_>, name: &OsStr, raw: &[u8]) -> Result<()> {
        let d = rustix::fs::openat(
            pfd,
            name,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| io_err(raw, "opening", e))?;
        rustix::fs::fsetxattr(&d, fsops::OPAQUE_XATTR, b"y", XattrFlags::empty())
            .map_err(|e| io_err(raw, "marking opaque", e))
    }

    fn hardlink(
        &mut self,
        pfd: BorrowedFd<'_>,
        base: &OsStr,
        path: &[OsString],
        target: &[u8],
        raw: &[u8],
    ) -> Result<()> {
        let mut tcomps = clean(target);
        let Some(tname) = tcomps.pop() else {
            return Err(unsafe_entry(raw, "hard link to the root directory"));
        };
        let (tparent, tlayers) = self.resolve_dir(&tcomps, raw)?;
        let mut tpath = tparent.clone();
        tpath.push(tname.clone());
        if tpath == path {
            return Err(unsafe_entry(raw, "hard link to itself"));
        }
        let layer = match self.lookup_child(&tparent, &tlayers, &tname, raw)? {
            Found::Missing => {
                return Err(unsafe_entry(
                    raw,
                    format!(
                        "hard link target {:?} does not exist in the layer or below",
                        String::from_utf8_lossy(target)
                    ),
                ));
            }
            Found::Dir(_) => return Err(unsafe_entry(raw, "hard link to a directory")),
            Found::Symlink(l, _) | Found::Other(l) => l,
        };
        let tpfd = self.ensure_upper_dir(&tparent, raw)?;
        if layer != 0 {
            self.copy_up(layer, &tparent, &tname, tpfd.as_fd(), raw)?;
        }
        fsops::remove_all(pfd, base).map_err(|e| io_err(raw, "replacing", e))?;
        rustix::fs::linkat(tpfd.as_fd(), &tname, pfd, base, AtFlags::empty())
            .map_err(|e| io_err(raw, "hard link", e))?;
        Ok(())
    }

    /// Copy non-directory `name` of directory `parent` from lower `layer` into the upper
    /// (whose `parent` is open as `upfd`), keeping metadata.
    fn copy_up(
        &self,
        layer: usize,
        parent: &Rel,
        name: &OsStr,
        upfd: BorrowedFd<'_>,
        raw: &[u8],
    ) -> Result<()> {
        let lfd = fsops::open_dir(self.fd(layer), parent).map_err(|e| io_err(raw, "copy-up", e))?;
        let st = rustix::fs::statat(&lfd, name, AtFlags::SYMLINK_NOFOLLOW)
            .map_err(|e| io_err(raw, "copy-up stat", e))?;
        let meta = Meta {
            mode: st.st_mode & 0o7777,
            uid: st.st_uid,
            gid: st.st_gid,
            times: fsops::times_of(&st),
            xattrs: Vec::new(),
        };
        fsops::remove_all(upfd, name).map_err(|e| io_err(raw, "copy-up", e))?;
        match fsops::ftype(&st) {
            FileType::RegularFile => {
                let src = rustix::fs::openat(
                    &lfd,
                    name,
                    OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                    Mode::empty(),
                )
                .map_err(|e| io_err(raw, "copy-up open", e))?;
                let dst = rustix::fs::openat(
                    upfd,
                    name,
                    OFlags::CREATE
                        | OFlags::EXCL
                        | OFlags::WRONLY
                        | OFlags::NOFOLLOW
                        | OFlags::CLOEXEC,
                    Mode::from_raw_mode(0o600),
                )
                .map_err(|e| io_err(raw, "copy-up create", e))?;
                let (mut s, mut d) = (File::from(src), File::from(dst));
                io::copy(&mut s, &mut d).map_err(|e| io_err(raw, "copy-up", e))?;
                let xattrs = fsops::list_xattrs(s.as_fd()).unwrap_or_default();
                self.set_owner_mode_fd(d.as_fd(), &meta, raw)?;
                self.set_xattrs_fd(d.as_fd(), &Meta { xattrs, ..meta }, raw)?;
                rustix::fs::futimens(&d, &fsops::times_of(&st))
                    .map_err(|e| io_err(raw, "copy-up utimens", e))?;
            }
            FileType::Symlink => {
                let t = rustix::fs::readlinkat(&lfd, name, Vec::new())
                    .map_err(|e| io_err(raw, "copy-up readlink", e))?;
                rustix::fs::symlinkat(t.as_c_str(), upfd, name)
                    .map_err(|e| io_err(raw, "copy-up symlink", e))?;
                self.finish_at(upfd, name, &meta, raw, false)?;
            }
            ft => {
                rustix::fs::mknodat(
                    upfd,
                    name,
                    ft,
                    Mode::from_raw_mode(meta.mode & 0o777),
                    st.st_rdev,
                )
                .map_err(|e| io_err(raw, "copy-up mknod", e))?;
                self.finish_at(upfd, name, &meta, raw, true)?;
            }
        }
        Ok(())
    }

    /// Owner, mode (not for symlinks), xattrs and times of a fresh non-directory `name`.
    fn finish_at(
        &self,
        pfd: BorrowedFd<'_>,
        name: &OsStr,
        m: &Meta,
        raw: &[u8],
        chmod: bool,
    ) -> Result<()> {
        rustix::fs::chownat(
            pfd,
            name,
            Some(Uid::from_raw(m.uid)),
            Some(Gid::from_raw(m.gid)),
            AtFlags::SYMLINK_NOFOLLOW,
        )
        .map_err(|e| io_err(raw, "chown", e))?;
        if chmod {
            // A device or fifo we just created in a directory only we write: no symlink.
            rustix::fs::chmodat(pfd, name, Mode::from_raw_mode(m.mode), AtFlags::empty())
                .map_err(|e| io_err(raw, "chmod", e))?;
        }
        for (k, v) in &m.xattrs {
            if k.starts_with("trusted.overlay.") {
                continue;
            }
            if let Err(e) = fsops::lsetxattr_at(pfd, name, k, v)
                && !tolerable_xattr_error(k, &e)
            {
                return Err(io_err(raw, &format!("setting xattr {k}"), e));
            }
        }
        rustix::fs::utimensat(pfd, name, &m.times, AtFlags::SYMLINK_NOFOLLOW)
            .map_err(|e| io_err(raw, "utimensat", e))?;
        Ok(())
    }

    fn set_owner_mode_fd(&self, fd: BorrowedFd<'_>, m: &Meta, raw: &[u8]) -> Result<()> {
        // chown first: it clears setuid/setgid, which the chmod then sets.
        rustix::fs::fchown(fd, Some(Uid::from_raw(m.uid)), Some(Gid::from_raw(m.gid)))
            .map_err(|e| io_err(raw, "chown", e))?;
        rustix::fs::fchmod(fd, Mode::from_raw_mode(m.mode)).map_err(|e| io_err(raw, "chmod", e))
    }

    fn set_xattrs_fd(&self, fd: BorrowedFd<'_>, m: &Meta, raw: &[u8]) -> Result<()> {
        for (k, v) in &m.xattrs {
            if k.starts_with("trusted.overlay.") {
                continue;
            }
            if let Err(e) = rustix::fs::fsetxattr(fd, k.as_str(), v, XattrFlags::empty()) {
                let e = io::Error::from(e);
                if !tolerable_xattr_error(k, &e) {
                    return Err(io_err(raw, &format!("setting xattr {k}"), e));
                }
            }
        }
        Ok(())
    }

    /// What the stacked view has at `parent/name`, looking only in `parent_layers` (the
    /// layers in which `parent` is a directory).
    fn lookup_child(
        &self,
        parent: &Rel,
        parent_layers: &[usize],
        name: &OsStr,
        raw: &[u8],
    ) -> Result<Found> {
        let mut dirs = Vec::new();
        for &l in parent_layers {
            let pfd = match fsops::open_dir(self.fd(l), parent) {
                Ok(fd) => fd,
                Err(e)
                    if matches!(
                        e.raw_os_error(),
                        Some(libc::ENOENT) | Some(libc::ENOTDIR) | Some(libc::ELOOP)
                    ) =>
                {
                    continue;
                }
                Err(e) => return Err(io_err(raw, "lookup", e)),
            };
            let Some(st) =
                fsops::stat_opt(pfd.as_fd(), name).map_err(|e| io_err(raw, "lookup", e))?
            else {
                continue;
            };
            if is_whiteout(&st) {
                break;
            }
            match fsops::ftype(&st) {
                FileType::Directory => {
                    dirs.push(l);
                    let d = rustix::fs::openat(
                        &pfd,
                        name,
                        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                        Mode::empty(),
                    )
                    .map_err(|e| io_err(raw, "lookup", e))?;
                    if fsops::is_opaque(d.as_fd()) {
                        break;
                    }
                }
                _ if !dirs.is_empty() => break,
                FileType::Symlink => {
                    let t = rustix::fs::readlinkat(&pfd, name, Vec::new())
                        .map_err(|e| io_err(raw, "readlink", e))?;
                    return Ok(Found::Symlink(l, t.into_bytes()));
                }
                _ => return Ok(Found::Other(l)),
            }
        }
        Ok(if dirs.is_empty() {
            Found::Missing
        } else {
            Found::Dir(dirs)
        })
    }

    /// Resolve directory `comps` in the stacked view, following symlinks inside the rootfs.
    /// Returns the symlink-free path and the layers it is a directory in (empty when it
    /// does not exist yet).
    fn resolve_dir(&self, comps: &[OsString], raw: &[u8]) -> Result<(Vec<OsString>, Vec<usize>)> {
        // Stack of (component, layers of the path up to it).
        let root_layers = self.all_layers();
        let mut stack: Vec<(OsString, Vec<usize>)> = Vec::new();
        let mut todo: std::collections::VecDeque<OsString> = comps.iter().cloned().collect();
        let mut links = 0;
        while let Some(c) = todo.pop_front() {
            let cb = c.as_bytes();
            if cb.is_empty() || cb == b"." {
                continue;
            }
            if cb == b".." {
                stack.pop();
                continue;
            }
            let parent: Vec<OsString> = stack.iter().map(|(n, _)| n.clone()).collect();
            let parent_layers = stack
                .last()
                .map(|(_, l)| l.clone())
                .unwrap_or_else(|| root_layers.clone());
            match self.lookup_child(&parent, &parent_layers, &c, raw)? {
                Found::Missing => stack.push((c, Vec::new())),
                Found::Dir(layers) => stack.push((c, layers)),
                Found::Symlink(_, target) => {
                    links += 1;
                    if links > MAX_LINKS {
                        return Err(unsafe_entry(raw, "too many levels of symbolic links"));
                    }
                    if target.first() == Some(&b'/') {
                        stack.clear();
                    }
                    for t in target.split(|b| *b == b'/').rev() {
                        todo.push_front(OsStr::from_bytes(t).to_os_string());
                    }
                }
                Found::Other(_) => {
                    return Err(unsafe_entry(
                        raw,
                        format!(
                            "{:?} is not a directory",
                            fsops::join(&{
                                let mut p = parent.clone();
                                p.push(c);
                                p
                            })
                        ),
                    ));
                }
            }
        }
        let layers = stack.last().map(|(_, l)| l.clone()).unwrap_or(root_layers);
        Ok((stack.into_iter().map(|(n, _)| n).collect(), layers))
    }

    /// Make sure the resolved directory `rel` exists in the upper (creating missing levels
    /// with their lower metadata) and open it.
    fn ensure_upper_dir(&mut self, rel: &Rel, raw: &[u8]) -> Result<OwnedFd> {
        match fsops::open_dir(self.fd(0), rel) {
            Ok(fd) => return Ok(fd),
            Err(e) if matches!(e.raw_os_error(), Some(libc::ENOENT)) => {}
            Err(e) => return Err(io_err(raw, &format!("opening {:?}", fsops::join(rel)), e)),
        }
        let mut cur = fsops::open_dir(self.fd(0), &[]).map_err(|e| io_err(raw, "open", e))?;
        let mut layers = self.all_layers();
        for i in 0..rel.len() {
            let name = &rel[i];
            let sub = match self.lookup_child(&rel[..i], &layers, name, raw)? {
                Found::Dir(l) => l,
                Found::Missing => Vec::new(),
                _ => return Err(unsafe_entry(raw, "parent is not a directory")),
            };
            if !sub.contains(&0) {
                let existing =
                    fsops::stat_opt(cur.as_fd(), name).map_err(|e| io_err(raw, "stat", e))?;
                let was_whiteout = existing.as_ref().is_some_and(is_whiteout);
                if existing.is_some() {
                    fsops::remove_all(cur.as_fd(), name)
                        .map_err(|e| io_err(raw, "replacing", e))?;
                }
                rustix::fs::mkdirat(cur.as_fd(), name, Mode::from_raw_mode(0o755))
                    .map_err(|e| io_err(raw, "mkdir", e))?;
                let nfd = rustix::fs::openat(
                    cur.as_fd(),
                    name,
                    OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                    Mode::empty(),
                )
                .map_err(|e| io_err(raw, "open", e))?;
                if let Some(&lower) = sub.first() {
                    // Copy-up of the directory's metadata from the topmost lower.
                    let lfd = fsops::open_dir(self.fd(lower), &rel[..=i])
                        .map_err(|e| io_err(raw, "copy-up", e))?;
                    let st = rustix::fs::fstat(&lfd).map_err(|e| io_err(raw, "copy-up", e))?;
                    let meta = Meta {
                        mode: st.st_mode & 0o7777,
                        uid: st.st_uid,
                        gid: st.st_gid,
                        times: fsops::times_of(&st),
                        xattrs: fsops::list_xattrs(lfd.as_fd()).unwrap_or_default(),
                    };
                    self.set_owner_mode_fd(nfd.as_fd(), &meta, raw)?;
                    self.set_xattrs_fd(nfd.as_fd(), &meta, raw)?;
                    self.dir_times.insert(rel[..=i].to_vec(), meta.times);
                }
                if was_whiteout {
                    rustix::fs::fsetxattr(&nfd, fsops::OPAQUE_XATTR, b"y", XattrFlags::empty())
                        .map_err(|e| io_err(raw, "marking opaque", e))?;
                }
                let mut l = vec![0];
                l.extend(sub);
                layers = l;
                cur = nfd;
            } else {
                layers = sub;
                cur = rustix::fs::openat(
                    cur.as_fd(),
                    name,
                    OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                    Mode::empty(),
                )
                .map_err(|e| io_err(raw, "open", e))?;
            }
        }
        Ok(cur)
    }

    fn restore_dir_times(&self) {
        for (rel, t) in &self.dir_times {
            if let Ok(fd) = fsops::open_dir(self.fd(0), rel) {
                let _ = rustix::fs::futimens(&fd, t);
            }
        }
    }
}

/// Xattrs the filesystem may refuse without harm (labels of another LSM, user xattrs where
/// unsupported). A refused file capability is an error: the image needs it.
fn tolerable_xattr_error(key: &str, e: &io::Error) -> bool {
    key != "security.capability"
        && matches!(
            e.raw_os_error(),
            Some(libc::ENOTSUP) | Some(libc::EPERM) | Some(libc::EINVAL)
        )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clean_confines_names() {
        let s = |v: Vec<OsString>| fsops::join(&v).to_string_lossy().into_owned();
        assert_eq!(s(clean(b"./a/b")), "a/b");
        assert_eq!(s(clean(b"/etc/passwd")), "etc/passwd");
        assert_eq!(s(clean(b"../../etc/passwd")), "etc/passwd");
        assert_eq!(s(clean(b"a/../../b")), "b");
        assert!(clean(b"./").is_empty());
        assert!(clean(b"..").is_empty());
    }

    #[test]
    fn pax_times() {
        assert_eq!(pax_time("1700000000"), Some((1700000000, 0)));
        assert_eq!(pax_time("1.5"), Some((1, 500_000_000)));
        assert_eq!(pax_time("x"), None);
    }
}
