//! config.json `mounts`: option parsing (every option runc accepts) and performing one mount
//! inside the container's root, always through an fd resolved in the root.

use std::ffi::CString;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};

use libc::c_ulong;
use oci_spec::runtime::Mount;

use crate::cgroups::Cgroup;
use crate::error::{Context, Error, Result, p};
use crate::safe_path;
use crate::sys::{self, MountAttr};

/// Parsed `options` of a mount.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Options {
    /// MS_* flags to set.
    pub flags: c_ulong,
    /// MS_* flags explicitly cleared (rw, suid, dev, ...): matter for remounts.
    pub cleared: c_ulong,
    /// Propagation changes to apply after mounting, in order.
    pub propagation: Vec<c_ulong>,
    /// mount_setattr attributes to set/clear recursively (rro, rnosuid, ...).
    pub rec_set: u64,
    /// See `rec_set`.
    pub rec_clear: u64,
    /// Filesystem-specific data (everything unrecognised), comma-joined.
    pub data: Vec<String>,
    /// Copy the directory's previous content into a new tmpfs.
    pub tmpcopyup: bool,
    /// ID-mapped mount requested (idmap / ridmap).
    pub idmap: Option<bool>,
}

const MS_NOSYMFOLLOW: c_ulong = 256;
pub(crate) const MOUNT_ATTR_RDONLY: u64 = 0x1;
pub(crate) const MOUNT_ATTR_NOSUID: u64 = 0x2;
pub(crate) const MOUNT_ATTR_NODEV: u64 = 0x4;
pub(crate) const MOUNT_ATTR_NOEXEC: u64 = 0x8;
const MOUNT_ATTR__ATIME: u64 = 0x70;
const MOUNT_ATTR_RELATIME: u64 = 0x0;
const MOUNT_ATTR_NOATIME: u64 = 0x10;
const MOUNT_ATTR_STRICTATIME: u64 = 0x20;
const MOUNT_ATTR_NODIRATIME: u64 = 0x80;
const MOUNT_ATTR_NOSYMFOLLOW: u64 = 0x200000;
const AT_RECURSIVE: u32 = 0x8000;

/// The propagation flag of a mode name (`rprivate`, `shared`, ...).
pub fn propagation_flag(name: &str) -> Option<c_ulong> {
    Some(match name {
        "private" => libc::MS_PRIVATE,
        "rprivate" => libc::MS_PRIVATE | libc::MS_REC,
        "shared" => libc::MS_SHARED,
        "rshared" => libc::MS_SHARED | libc::MS_REC,
        "slave" => libc::MS_SLAVE,
        "rslave" => libc::MS_SLAVE | libc::MS_REC,
        "unbindable" => libc::MS_UNBINDABLE,
        "runbindable" => libc::MS_UNBINDABLE | libc::MS_REC,
        _ => return None,
    })
}

/// Parse mount options as runc does.
pub fn parse_options(opts: &[String]) -> Options {
    let mut o = Options::default();
    for opt in opts {
        let (set, clear): (c_ulong, c_ulong) = match opt.as_str() {
            "defaults" => (0, 0),
            "ro" => (libc::MS_RDONLY, 0),
            "rw" => (0, libc::MS_RDONLY),
            "suid" => (0, libc::MS_NOSUID),
            "nosuid" => (libc::MS_NOSUID, 0),
            "dev" => (0, libc::MS_NODEV),
            "nodev" => (libc::MS_NODEV, 0),
            "exec" => (0, libc::MS_NOEXEC),
            "noexec" => (libc::MS_NOEXEC, 0),
            "sync" => (libc::MS_SYNCHRONOUS, 0),
            "async" => (0, libc::MS_SYNCHRONOUS),
            "dirsync" => (libc::MS_DIRSYNC, 0),
            "remount" => (libc::MS_REMOUNT, 0),
            "mand" => (libc::MS_MANDLOCK, 0),
            "nomand" => (0, libc::MS_MANDLOCK),
            "atime" => (0, libc::MS_NOATIME),
            "noatime" => (libc::MS_NOATIME, 0),
            "diratime" => (0, libc::MS_NODIRATIME),
            "nodiratime" => (libc::MS_NODIRATIME, 0),
            "bind" => (libc::MS_BIND, 0),
            "rbind" => (libc::MS_BIND | libc::MS_REC, 0),
            "relatime" => (libc::MS_RELATIME, 0),
            "norelatime" => (0, libc::MS_RELATIME),
            "strictatime" => (libc::MS_STRICTATIME, 0),
            "nostrictatime" => (0, libc::MS_STRICTATIME),
            "lazytime" => (libc::MS_LAZYTIME, 0),
            "nolazytime" => (0, libc::MS_LAZYTIME),
            "iversion" => (libc::MS_I_VERSION, 0),
            "noiversion" => (0, libc::MS_I_VERSION),
            "silent" => (libc::MS_SILENT, 0),
            "loud" => (0, libc::MS_SILENT),
            "nosymfollow" => (MS_NOSYMFOLLOW, 0),
            "symfollow" => (0, MS_NOSYMFOLLOW),
            "tmpcopyup" => {
                o.tmpcopyup = true;
                continue;
            }
            "idmap" => {
                o.idmap = Some(false);
                continue;
            }
            "ridmap" => {
                o.idmap = Some(true);
                continue;
            }
            other => {
                if let Some(flag) = propagation_flag(other) {
                    o.propagation.push(flag);
                } else if let Some((set, clear)) = recursive_attr(other) {
                    o.rec_set |= set;
                    o.rec_clear |= clear;
                } else if !other.is_empty() {
                    o.data.push(other.to_string());
                }
                continue;
            }
        };
        o.flags = (o.flags & !clear) | set;
        o.cleared = (o.cleared & !set) | clear;
    }
    o
}

/// mount_setattr attributes for runc's recursive options (`rro`, `rnosuid`, ...).
fn recursive_attr(opt: &str) -> Option<(u64, u64)> {
    Some(match opt {
        "rro" => (MOUNT_ATTR_RDONLY, 0),
        "rrw" => (0, MOUNT_ATTR_RDONLY),
        "rnosuid" => (MOUNT_ATTR_NOSUID, 0),
        "rsuid" => (0, MOUNT_ATTR_NOSUID),
        "rnodev" => (MOUNT_ATTR_NODEV, 0),
        "rdev" => (0, MOUNT_ATTR_NODEV),
        "rnoexec" => (MOUNT_ATTR_NOEXEC, 0),
        "rexec" => (0, MOUNT_ATTR_NOEXEC),
        "rnodiratime" => (MOUNT_ATTR_NODIRATIME, 0),
        "rdiratime" => (0, MOUNT_ATTR_NODIRATIME),
        "rrelatime" => (MOUNT_ATTR_RELATIME, MOUNT_ATTR__ATIME),
        "rnorelatime" => (0, MOUNT_ATTR__ATIME),
        "rnoatime" => (MOUNT_ATTR_NOATIME, MOUNT_ATTR__ATIME),
        "ratime" => (0, MOUNT_ATTR_NOATIME),
        "rstrictatime" => (MOUNT_ATTR_STRICTATIME, MOUNT_ATTR__ATIME),
        "rnostrictatime" => (0, MOUNT_ATTR_STRICTATIME),
        "rnosymfollow" => (MOUNT_ATTR_NOSYMFOLLOW, 0),
        "rsymfollow" => (0, MOUNT_ATTR_NOSYMFOLLOW),
        _ => return None,
    })
}

/// Everything a mount needs from the container beyond the entry itself.
pub struct MountContext<'a> {
    /// The rootfs opened as a directory (O_PATH).
    pub root: BorrowedFd<'a>,
    /// The bundle, for relative bind sources.
    pub bundle: &'a Path,
    /// The container's cgroup (for `cgroup` mounts without a cgroup namespace).
    pub cgroup: &'a Cgroup,
    /// The host's cgroup hierarchies, detected before the container's cgroup namespace
    /// existed (inside it, mountinfo shows hierarchy roots as "/../..").
    pub layout: &'a crate::cgroups::Layout,
    /// Whether the container has its own cgroup namespace.
    pub cgroup_ns: bool,
    /// Whether the container has its own user namespace (sysfs/mknod limits).
    pub user_ns: bool,
    /// Whether the container has its own network namespace (sysfs needs one).
    pub net_ns: bool,
    /// The template's read-only tmpfs holding the v1 hierarchies' mount points
    /// ([`crate::mount_template::CGROUP_V1`]), for a read-only `cgroup` mount.
    pub shared_cgroup_v1: Option<BorrowedFd<'a>>,
}

fn cstr(s: &str) -> CString {
    CString::new(s).unwrap_or_else(|_| CString::new("").unwrap())
}

pub(crate) fn path_cstr(p: &Path) -> CString {
    use std::os::unix::ffi::OsStrExt;
    CString::new(p.as_os_str().as_bytes()).unwrap_or_else(|_| CString::new("").unwrap())
}

/// Bind what `src` refers to onto what `target` (an O_PATH fd) refers to, with no path
/// lookup at all, so nothing of the container (symlinks, a mount over /proc) can redirect
/// either side. Falls back to mount(2) through /proc/self/fd on kernels before 5.2.
pub fn bind_fd(src: BorrowedFd<'_>, target: BorrowedFd<'_>) -> std::io::Result<()> {
    match sys::clone_mount(src) {
        Ok(tree) => sys::move_mount(tree.as_fd(), target),
        Err(e) if e.raw_os_error() == Some(libc::ENOSYS) => sys::mount(
            Some(&safe_path::proc_fd_path(src)),
            &safe_path::proc_fd_path(target),
            None,
            libc::MS_BIND,
            None,
        ),
        Err(e) => Err(e),
    }
}

/// Attach mount `m`, prepared by the runtime before the clone ([`crate::mount_sources`]),
/// where it goes inside the root.
pub fn attach_prepared(
    ctx: &MountContext<'_>,
    m: &Mount,
    prep: &crate::mount_sources::PreparedMount,
) -> Result<()> {
    let dest = m.destination();
    let opts = parse_options(m.options().as_deref().unwrap_or(&[]));
    let target = safe_path::ensure(ctx.root, dest, prep.is_dir)
        .ctx(|| format!("create mount point {}", p(dest)))?;
    sys::move_mount(prep.tree.as_fd(), target.as_fd())
        .ctx(|| format!("attach the prepared mount {}", p(dest)))?;
    // The tree carries ro, nosuid, nodev and noexec already; any other per-mount flag
    // (atime, sync) takes a remount, as a bind made here does.
    let set = libc::MS_RDONLY | libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC;
    let flags = opts.flags & !(libc::MS_BIND | libc::MS_REC | libc::MS_REMOUNT);
    if flags & !set != 0 {
        let t = safe_path::lookup(ctx.root, dest).ctx(|| format!("reopen mount {}", p(dest)))?;
        remount(&t, flags, dest)?;
    }
    finish(ctx, dest, &opts)
}

/// Perform one config.json mount inside the root.
pub fn mount_one(ctx: &MountContext<'_>, m: &Mount) -> Result<()> {
    let dest = m.destination();
    let typ = m.typ().clone().unwrap_or_default();
    let opts = parse_options(m.options().as_deref().unwrap_or(&[]));
    let what = |verb: &str| format!("{verb} {} on {}", display_source(m), p(dest));
    if opts.idmap.is_some() || m.uid_mappings().is_some() || m.gid_mappings().is_some() {
        // Prepared by the runtime before the clone, and attached by attach_prepared.
        return Err(Error::Unsupported(format!(
            "mount {}: an id-mapped mount can only be made when the container is created",
            p(dest)
        )));
    }
    let is_bind = typ == "bind" || opts.flags & libc::MS_BIND != 0;
    if is_bind {
        return bind(ctx, m, &opts);
    }
    if matches!(typ.as_str(), "proc" | "sysfs") {
        refuse_symlinks(ctx, dest, &typ)?;
    }
    match typ.as_str() {
        "cgroup" | "cgroup2" => return mount_cgroup(ctx, m, &opts),
        "sysfs" if ctx.net_ns && ctx.user_ns => {
            // A sysfs of its own where its user namespace owns its network namespace (a
            // pod's own user namespace); the host's /sys where it does not (EPERM).
            let target = safe_path::mkdir_all(ctx.root, dest, 0o755)
                .ctx(|| what("create mount point for"))?;
            match sys::mount(
                Some(c"sysfs"),
                &safe_path::proc_fd_path(&target),
                Some(c"sysfs"),
                opts.flags & !libc::MS_REMOUNT,
                None,
            ) {
                Ok(()) => return finish(ctx, dest, &opts),
                Err(e) if e.raw_os_error() == Some(libc::EPERM) => {
                    if bind_host_sys(ctx, dest, &opts, &target)? {
                        return Ok(());
                    }
                }
                Err(e) => return Err(mount_error(&what("mount"), &typ, e)),
            }
        }
        "sysfs" if !ctx.net_ns => {
            // Mounting sysfs needs a network namespace we own; fall back to binding the
            // host's /sys read-only, as runc does.
            let target = safe_path::mkdir_all(ctx.root, dest, 0o755)
                .ctx(|| what("create mount point for"))?;
            if bind_host_sys(ctx, dest, &opts, &target)? {
                return Ok(());
            }
        }
        _ => {}
    }
    let target =
        safe_path::mkdir_all(ctx.root, dest, 0o755).ctx(|| what("create mount point for"))?;
    let source = m
        .source()
        .as_ref()
        .map(|s| path_cstr(s))
        .unwrap_or_else(|| cstr(&typ));
    let data = cstr(&opts.data.join(","));
    let flags = opts.flags & !(libc::MS_REMOUNT);
    if opts.tmpcopyup && typ == "tmpfs" {
        return tmpcopyup(ctx, &target, &source, flags, &data, dest, &opts);
    }
    sys::mount(
        Some(&source),
        &safe_path::proc_fd_path(&target),
        Some(&cstr(&typ)),
        flags,
        if opts.data.is_empty() {
            None
        } else {
            Some(&data)
        },
    )
    .map_err(|e| mount_error(&what("mount"), &typ, e))?;
    finish(ctx, dest, &opts)
}

/// Bind the host's /sys read-only at `target` (mount `dest`), where a sysfs of the
/// container's own cannot be mounted; false when the bind itself fails (then a plain mount
/// is tried and its error reported).
fn bind_host_sys(
    ctx: &MountContext<'_>,
    dest: &Path,
    opts: &Options,
    target: &OwnedFd,
) -> Result<bool> {
    let res = sys::mount(
        Some(c"/sys"),
        &safe_path::proc_fd_path(target),
        None,
        libc::MS_BIND | libc::MS_REC,
        None,
    );
    if res.is_err() {
        return Ok(false);
    }
    let t = safe_path::lookup(ctx.root, dest).ctx(|| format!("reopen {}", p(dest)))?;
    remount(&t, libc::MS_RDONLY | opts.flags, dest)?;
    Ok(true)
}

/// procfs and sysfs expose the kernel's control files: their mount points may not be
/// reached through symlinks at all (an image could otherwise redirect them, e.g. to hide a
/// masked path or to land over a directory it controls: CVE-2019-19921).
fn refuse_symlinks(ctx: &MountContext<'_>, dest: &Path, typ: &str) -> Result<()> {
    let rel = safe_path::relative(dest);
    let mut prefix = PathBuf::new();
    for comp in rel.components() {
        prefix.push(comp);
        match rustix::fs::statat(ctx.root, &prefix, rustix::fs::AtFlags::SYMLINK_NOFOLLOW) {
            Ok(st)
                if rustix::fs::FileType::from_raw_mode(st.st_mode)
                    == rustix::fs::FileType::Symlink =>
            {
                return Err(Error::Config(format!(
                    "mounts: refusing to mount {typ} on {}: {} is a symlink",
                    p(dest),
                    p(&Path::new("/").join(&prefix))
                )));
            }
            Ok(_) => {}
            Err(_) => break,
        }
    }
    Ok(())
}

fn mount_error(what: &str, typ: &str, e: std::io::Error) -> Error {
    if e.raw_os_error() == Some(libc::ENODEV) {
        return Error::Unsupported(format!(
            "{what}: filesystem type {typ:?} is not supported by the kernel"
        ));
    }
    Error::os(what.to_string(), e)
}

fn display_source(m: &Mount) -> String {
    match (m.source(), m.typ()) {
        (Some(s), _) => s.display().to_string(),
        (None, Some(t)) => t.clone(),
        (None, None) => "none".into(),
    }
}

/// Propagation changes and recursive attributes after the mount exists.
fn finish(ctx: &MountContext<'_>, dest: &Path, opts: &Options) -> Result<()> {
    if opts.propagation.is_empty() && opts.rec_set == 0 && opts.rec_clear == 0 {
        return Ok(());
    }
    let target = safe_path::lookup(ctx.root, dest).ctx(|| format!("reopen mount {}", p(dest)))?;
    for flag in &opts.propagation {
        sys::mount(None, &safe_path::proc_fd_path(&target), None, *flag, None)
            .ctx(|| format!("change propagation of mount {}", p(dest)))?;
    }
    if opts.rec_set != 0 || opts.rec_clear != 0 {
        let tree = open_tree(&target).ctx(|| format!("open mount {}", p(dest)))?;
        let attr = MountAttr {
            attr_set: opts.rec_set,
            attr_clr: opts.rec_clear,
            ..Default::default()
        };
        sys::mount_setattr(tree.as_fd(), AT_RECURSIVE, &attr)
            .ctx(|| format!("set recursive attributes of mount {}", p(dest)))?;
    }
    Ok(())
}

fn open_tree(target: &OwnedFd) -> std::io::Result<OwnedFd> {
    rustix::fs::openat(
        target,
        "",
        rustix::fs::OFlags::PATH | rustix::fs::OFlags::CLOEXEC,
        rustix::fs::Mode::empty(),
    )
    .or_else(|_| {
        rustix::fs::open(
            safe_path::proc_fd_path(target).as_c_str(),
            rustix::fs::OFlags::PATH | rustix::fs::OFlags::DIRECTORY | rustix::fs::OFlags::CLOEXEC,
            rustix::fs::Mode::empty(),
        )
    })
    .map_err(Into::into)
}

fn bind(ctx: &MountContext<'_>, m: &Mount, opts: &Options) -> Result<()> {
    let dest = m.destination();
    let Some(src) = m.source() else {
        return Err(Error::Config(format!(
            "mount {}: a bind mount needs a source",
            p(dest)
        )));
    };
    let src: PathBuf = if src.is_absolute() {
        src.clone()
    } else {
        ctx.bundle.join(src)
    };
    let meta = std::fs::metadata(&src)
        .map_err(|e| Error::os(format!("bind mount source {} for {}", p(&src), p(dest)), e))?;
    let target = safe_path::ensure(ctx.root, dest, meta.is_dir())
        .ctx(|| format!("create bind mount point {}", p(dest)))?;
    let flags = libc::MS_BIND | (opts.flags & libc::MS_REC);
    sys::mount(
        Some(&path_cstr(&src)),
        &safe_path::proc_fd_path(&target),
        None,
        flags,
        None,
    )
    .ctx(|| format!("bind mount {} on {}", p(&src), p(dest)))?;
    let extra = opts.flags & !(libc::MS_BIND | libc::MS_REC | libc::MS_REMOUNT);
    if extra != 0 {
        let t = safe_path::lookup(ctx.root, dest).ctx(|| format!("reopen mount {}", p(dest)))?;
        remount(&t, extra, dest)?;
    }
    finish(ctx, dest, opts)
}

/// Remount a bind mount with `flags`, keeping the flags the kernel locks (nosuid, nodev,
/// noexec, atime) where they are set on the mount already.
pub fn remount(target: &OwnedFd, flags: c_ulong, dest: &Path) -> Result<()> {
    let path = safe_path::proc_fd_path(target);
    let base = libc::MS_BIND | libc::MS_REMOUNT;
    let first = sys::mount(None, &path, None, base | flags, None);
    match first {
        Ok(()) => Ok(()),
        Err(e) if e.raw_os_error() == Some(libc::EPERM) => {
            let locked = locked_flags(target);
            sys::mount(None, &path, None, base | flags | locked, None)
                .ctx(|| format!("remount {}", p(dest)))
        }
        Err(e) => Err(Error::os(format!("remount {}", p(dest)), e)),
    }
}

fn locked_flags(target: &OwnedFd) -> c_ulong {
    let Ok(st) = rustix::fs::fstatvfs(target) else {
        return 0;
    };
    let f = st.f_flag;
    let mut out = 0;
    for (st_flag, ms) in [
        (rustix::fs::StatVfsMountFlags::NOSUID, libc::MS_NOSUID),
        (rustix::fs::StatVfsMountFlags::NODEV, libc::MS_NODEV),
        (rustix::fs::StatVfsMountFlags::NOEXEC, libc::MS_NOEXEC),
        (rustix::fs::StatVfsMountFlags::NOATIME, libc::MS_NOATIME),
        (
            rustix::fs::StatVfsMountFlags::NODIRATIME,
            libc::MS_NODIRATIME,
        ),
        (rustix::fs::StatVfsMountFlags::RELATIME, libc::MS_RELATIME),
        (rustix::fs::StatVfsMountFlags::RDONLY, libc::MS_RDONLY),
    ] {
        if f.contains(st_flag) {
            out |= ms;
        }
    }
    out
}

/// A `cgroup` mount: cgroup2 where the host is v2, else a tmpfs holding one mount per v1
/// hierarchy, each the container's own cgroup directory bound in (as runc does on v1).
fn mount_cgroup(ctx: &MountContext<'_>, m: &Mount, opts: &Options) -> Result<()> {
    let dest = m.destination();
    let target = safe_path::mkdir_all(ctx.root, dest, 0o755)
        .ctx(|| format!("create cgroup mount point {}", p(dest)))?;
    let flags = opts.flags & !(libc::MS_BIND | libc::MS_REC | libc::MS_REMOUNT);
    if ctx.cgroup.v2 {
        if ctx.cgroup_ns {
            return sys::mount(
                Some(c"cgroup2"),
                &safe_path::proc_fd_path(&target),
                Some(c"cgroup2"),
                flags,
                None,
            )
            .ctx(|| format!("mount cgroup2 on {}", p(dest)));
        }
        let dir = ctx
            .cgroup
            .paths
            .get(crate::cgroups::UNIFIED)
            .cloned()
            .unwrap_or_default();
        sys::mount(
            Some(&path_cstr(&dir)),
            &safe_path::proc_fd_path(&target),
            None,
            libc::MS_BIND,
            None,
        )
        .ctx(|| format!("bind cgroup {} on {}", p(&dir), p(dest)))?;
        let t = safe_path::lookup(ctx.root, dest).ctx(|| format!("reopen {}", p(dest)))?;
        return remount(&t, flags, dest);
    }
    let tmpfs_flags = libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC;
    // Read-only, the template's tmpfs with the mount points made already serves every
    // container (one superblock, not one each); else a tmpfs of the container's own.
    let shared = ctx
        .shared_cgroup_v1
        .filter(|_| flags & libc::MS_RDONLY != 0);
    match shared {
        Some(tree) => bind_fd(tree, target.as_fd()),
        None => sys::mount(
            Some(c"tmpfs"),
            &safe_path::proc_fd_path(&target),
            Some(c"tmpfs"),
            tmpfs_flags,
            Some(c"mode=755"),
        ),
    }
    .ctx(|| format!("mount tmpfs for cgroups on {}", p(dest)))?;
    for (name, keys) in v1_mount_points(ctx.layout) {
        let sub = dest.join(&name);
        let t = if shared.is_some() {
            safe_path::lookup(ctx.root, &sub)
        } else {
            safe_path::mkdir_all(ctx.root, &sub, 0o755)
        }
        .ctx(|| format!("create {}", p(&sub)))?;
        // The container's own directory of the hierarchy is bound in, with or without a
        // cgroup namespace (inside one it is the namespace's root, as a fresh mount would
        // be). A fresh cgroupfs mount per container would cost every later one: the
        // kernel drains the whole hierarchy on each v1 mount and walks every cgroupfs
        // superblock, and each adds a superblock its memory cgroup removal walks.
        let dir = keys
            .iter()
            .find_map(|k| ctx.cgroup.paths.get(k))
            .cloned()
            .unwrap_or_default();
        let res = sys::mount(
            Some(&path_cstr(&dir)),
            &safe_path::proc_fd_path(&t),
            None,
            libc::MS_BIND,
            None,
        )
        .and_then(|()| {
            let t = safe_path::lookup(ctx.root, &sub)?;
            remount(&t, flags | tmpfs_flags, &sub).map_err(|e| std::io::Error::other(e.to_string()))
        });
        res.ctx(|| format!("mount cgroup {} on {}", keys.join(","), p(&sub)))?;
        if shared.is_some() {
            continue;
        }
        // Co-mounted controllers (cpu,cpuacct) get a symlink per name, as on the host.
        for k in co_mounted_names(&name, &keys) {
            let dir = safe_path::lookup(ctx.root, dest).ctx(|| format!("reopen {}", p(dest)))?;
            let dir = safe_path::reopen_dir(&dir).ctx(|| format!("open {}", p(dest)))?;
            let _ = rustix::fs::symlinkat(name.as_os_str(), &dir, k);
        }
    }
    if flags & libc::MS_RDONLY != 0 && shared.is_none() {
        let t = safe_path::lookup(ctx.root, dest).ctx(|| format!("reopen {}", p(dest)))?;
        sys::mount(
            None,
            &safe_path::proc_fd_path(&t),
            None,
            libc::MS_REMOUNT | libc::MS_RDONLY | tmpfs_flags,
            Some(c"mode=755"),
        )
        .ctx(|| format!("remount {} read-only", p(dest)))?;
    }
    Ok(())
}

/// The v1 hierarchies as a container's /sys/fs/cgroup shows them: the name of each mount
/// point (co-mounted controllers share one, "cpu,cpuacct") with the keys mounted there.
pub(crate) fn v1_mount_points(
    layout: &crate::cgroups::Layout,
) -> Vec<(std::ffi::OsString, Vec<String>)> {
    let mut mounts: std::collections::BTreeMap<PathBuf, Vec<String>> = Default::default();
    for (key, mnt) in &layout.v1 {
        mounts.entry(mnt.clone()).or_default().push(key.clone());
    }
    mounts
        .into_iter()
        .filter_map(|(mnt, keys)| Some((mnt.file_name()?.to_os_string(), keys)))
        .collect()
}

/// The names that get a symlink to mount point `name`: its controllers other than the one
/// it is named after ("cpu" and "cpuacct" for "cpu,cpuacct"; none for named hierarchies).
pub(crate) fn co_mounted_names<'k>(
    name: &std::ffi::OsStr,
    keys: &'k [String],
) -> impl Iterator<Item = &'k str> {
    let name = name.to_string_lossy().into_owned();
    keys.iter()
        .map(String::as_str)
        .filter(move |k| *k != name && !k.starts_with("name="))
}

/// A tmpfs that starts with a copy of what the directory held (runc's `tmpcopyup`).
fn tmpcopyup(
    ctx: &MountContext<'_>,
    target: &OwnedFd,
    source: &CString,
    flags: c_ulong,
    data: &CString,
    dest: &Path,
    opts: &Options,
) -> Result<()> {
    // The fd still refers to the directory underneath once the tmpfs covers it.
    let old = safe_path::reopen_dir(target).ctx(|| format!("open {}", p(dest)))?;
    sys::mount(
        Some(source),
        &safe_path::proc_fd_path(target),
        Some(c"tmpfs"),
        flags,
        if data.as_bytes().is_empty() {
            None
        } else {
            Some(data)
        },
    )
    .ctx(|| format!("mount tmpfs on {}", p(dest)))?;
    let new = safe_path::lookup(ctx.root, dest).ctx(|| format!("reopen {}", p(dest)))?;
    let new = safe_path::reopen_dir(&new).ctx(|| format!("open {}", p(dest)))?;
    crate::copy::copy_dir_contents(&old, &new)
        .ctx(|| format!("copy {} into its tmpfs", p(dest)))?;
    finish(ctx, dest, opts)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn o(list: &[&str]) -> Options {
        parse_options(&list.iter().map(|s| s.to_string()).collect::<Vec<_>>())
    }

    #[test]
    fn flags_and_data_split_like_runc() {
        let opts = o(&["nosuid", "strictatime", "mode=755", "size=65536k"]);
        assert_eq!(opts.flags, libc::MS_NOSUID | libc::MS_STRICTATIME);
        assert_eq!(opts.data, vec!["mode=755", "size=65536k"]);
    }

    #[test]
    fn later_options_override_earlier_ones() {
        let opts = o(&["ro", "rw", "rbind", "rprivate"]);
        assert_eq!(opts.flags, libc::MS_BIND | libc::MS_REC);
        assert_eq!(opts.cleared, libc::MS_RDONLY);
        assert_eq!(opts.propagation, vec![libc::MS_PRIVATE | libc::MS_REC]);
    }

    #[test]
    fn recursive_and_extension_options() {
        let opts = o(&["rro", "rnosuid", "tmpcopyup", "ridmap"]);
        assert_eq!(opts.rec_set, MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID);
        assert!(opts.tmpcopyup);
        assert_eq!(opts.idmap, Some(true));
        assert!(opts.data.is_empty());
    }
}
