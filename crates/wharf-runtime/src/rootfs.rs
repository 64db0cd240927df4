//! The container's filesystem view, built inside its new mount namespace: propagation, the
//! rootfs bind, config mounts, devices, pivot_root, masked and read-only paths.

use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};

use oci_spec::runtime::Spec;

use crate::cgroups::Cgroup;
use crate::devices;
use crate::error::{Context, Error, Result, p};
use crate::mounts::{self, MountContext};
use crate::safe_path;
use crate::sys;

/// Facts about the container the filesystem setup depends on.
pub struct RootfsOptions<'a> {
    /// Bundle directory (relative bind sources).
    pub bundle: &'a Path,
    /// Absolute rootfs path.
    pub rootfs: &'a Path,
    /// The container's cgroup.
    pub cgroup: &'a Cgroup,
    /// The host's cgroup hierarchies.
    pub layout: &'a crate::cgroups::Layout,
    /// Has a cgroup namespace.
    pub cgroup_ns: bool,
    /// Has a user namespace.
    pub user_ns: bool,
    /// Has a network namespace.
    pub net_ns: bool,
    /// MS_MOVE + chroot instead of pivot_root.
    pub no_pivot: bool,
    /// The rootfs is the working directory the init was born with, rather than its path:
    /// an init in a user namespace cannot look up the engine's owner-only directories
    /// above it (the runtime changed into it for the clone; see `container.rs`).
    pub from_cwd: bool,
    /// The mounts the runtime prepared before the clone.
    pub prepared: &'a crate::mount_sources::Prepared,
    /// The mount namespace is not the container's own (absent from the config, so the
    /// runtime's, or joined by path): the rootfs is prepared in it, entered with chroot
    /// (pivot_root would move the root of every process there) and its propagation is
    /// left alone.
    pub shared_mount_ns: bool,
}

fn open_root(rootfs: &Path) -> Result<OwnedFd> {
    rustix::fs::open(
        rootfs,
        rustix::fs::OFlags::PATH | rustix::fs::OFlags::DIRECTORY | rustix::fs::OFlags::CLOEXEC,
        rustix::fs::Mode::empty(),
    )
    .ctx(|| format!("open rootfs {}", p(rootfs)))
}

/// The mount point of the mount that holds `path` (the longest mount point above it in
/// /proc/self/mountinfo).
fn containing_mount(path: &Path) -> Result<PathBuf> {
    let path = std::fs::canonicalize(path).ctx(|| format!("resolve {}", p(path)))?;
    let info = std::fs::read_to_string("/proc/self/mountinfo")
        .ctx(|| "read /proc/self/mountinfo".into())?;
    let best = info
        .lines()
        .filter_map(|l| l.split(' ').nth(4))
        .map(wharf_sys::fs::mountinfo_path)
        .filter(|m| path.starts_with(m))
        .max_by_key(|m| m.as_os_str().len())
        .unwrap_or_else(|| PathBuf::from("/"));
    Ok(best)
}

/// Everything before pivot_root: runs in the new mount namespace, host paths still visible.
pub fn prepare(spec: &Spec, o: &RootfsOptions<'_>) -> Result<()> {
    // Nothing we mount may propagate back to the host: rslave by default, as runc.
    let prop = spec
        .linux()
        .as_ref()
        .and_then(|l| l.rootfs_propagation().clone())
        .filter(|s| !s.is_empty());
    let root_flag = match prop.as_deref() {
        Some(name) => mounts::propagation_flag(name)
            .ok_or_else(|| Error::Config(format!("linux.rootfsPropagation {name:?}")))?,
        None => libc::MS_SLAVE | libc::MS_REC,
    };
    // A shared or unbindable rootfsPropagation is applied to the container's root after
    // pivot_root (a shared parent breaks pivot_root, an unbindable tree cannot be bound);
    // while building, the host's tree must not see our mounts.
    //
    // Shared (bidirectional volumes) is the exception, as in runc: the tree stays shared, so
    // that a volume bound from a shared host mount joins its peer group and mounts made in
    // it reach the host; the mount holding the rootfs is made private first, so that
    // nothing mounted into the rootfs (the rootfs itself, /proc, /dev, ...) propagates.
    let shared = root_flag & libc::MS_SHARED != 0;
    let building_flag = if shared {
        libc::MS_SHARED | libc::MS_REC
    } else if root_flag & libc::MS_UNBINDABLE != 0 {
        libc::MS_SLAVE | libc::MS_REC
    } else {
        root_flag | libc::MS_REC
    };
    if !o.shared_mount_ns {
        sys::mount(None, c"/", None, building_flag, None)
            .ctx(|| "set propagation of / in the container's mount namespace".into())?;
        if shared {
            let holder = containing_mount(o.rootfs)?;
            sys::mount(
                None,
                &crate::mounts::path_cstr(&holder),
                None,
                libc::MS_PRIVATE,
                None,
            )
            .ctx(|| format!("make {} (holding the rootfs) private", p(&holder)))?;
        }
    }
    let rootfs_c = crate::mounts::path_cstr(o.rootfs);
    let root = if let Some(tree) = o.prepared.rootfs() {
        // Cloned from the mount namespace template: the rootfs, opened on the host, is
        // attached on the template's own mount point.
        let at = Path::new(crate::mount_template::ROOTFS);
        let point = open_root(at)?;
        sys::move_mount(tree.as_fd(), point.as_fd())
            .ctx(|| format!("attach rootfs {}", p(o.rootfs)))?;
        open_root(at)?
    } else if o.from_cwd {
        // The rootfs bound onto itself through the working directory, and entered.
        let cwd = rustix::fs::open(
            ".",
            rustix::fs::OFlags::PATH | rustix::fs::OFlags::DIRECTORY | rustix::fs::OFlags::CLOEXEC,
            rustix::fs::Mode::empty(),
        )
        .ctx(|| format!("open rootfs {} (the working directory)", p(o.rootfs)))?;
        let tree = sys::clone_tree(cwd.as_fd(), true)
            .ctx(|| format!("bind mount rootfs {}", p(o.rootfs)))?;
        sys::move_mount(tree.as_fd(), cwd.as_fd())
            .ctx(|| format!("bind mount rootfs {}", p(o.rootfs)))?;
        rustix::process::fchdir(&tree).ctx(|| "chdir to the rootfs".into())?;
        tree
    } else {
        sys::mount(
            Some(&rootfs_c),
            &rootfs_c,
            None,
            libc::MS_BIND | libc::MS_REC,
            None,
        )
        .ctx(|| format!("bind mount rootfs {}", p(o.rootfs)))?;
        open_root(o.rootfs)?
    };
    if root_flag & libc::MS_SHARED != 0 && !o.shared_mount_ns {
        // pivot_root refuses a shared parent mount; make the rootfs's own mount private now
        // and shared again once it is the root.
        sys::mount(
            None,
            &safe_path::proc_fd_path(&root),
            None,
            libc::MS_PRIVATE,
            None,
        )
        .ctx(|| "make the rootfs mount private".into())?;
    }
    let shared_cgroup = shared_cgroup_v1(spec, o);
    let ctx = MountContext {
        shared_cgroup_v1: shared_cgroup.as_ref().map(|fd| fd.as_fd()),
        root: root.as_fd(),
        bundle: o.bundle,
        cgroup: o.cgroup,
        layout: o.layout,
        cgroup_ns: o.cgroup_ns,
        user_ns: o.user_ns,
        net_ns: o.net_ns,
    };
    let config_mounts = spec.mounts().clone().unwrap_or_default();
    for (i, m) in config_mounts.iter().enumerate() {
        match o.prepared.get(i) {
            Some(prep) => mounts::attach_prepared(&ctx, m, prep)?,
            None => mounts::mount_one(&ctx, m)?,
        }
    }
    // Devices: the default set (unless /dev is bound from the host) and linux.devices.
    let dev_bound = config_mounts.iter().any(|m| {
        m.destination() == Path::new("/dev")
            && (m.typ().as_deref() == Some("bind")
                || m.options()
                    .iter()
                    .flatten()
                    .any(|o| o == "bind" || o == "rbind"))
    });
    let mut nodes = Vec::new();
    if !dev_bound {
        nodes.extend(devices::defaults());
    }
    if let Some(devs) = spec.linux().as_ref().and_then(|l| l.devices().as_ref()) {
        for node in devices::from_config(devs)? {
            nodes.retain(|n| n.path != node.path);
            nodes.push(node);
        }
    }
    for node in &nodes {
        devices::create(root.as_fd(), node, o.user_ns)?;
    }
    let devpts = config_mounts
        .iter()
        .any(|m| m.destination() == Path::new("/dev/pts") && m.typ().as_deref() == Some("devpts"));
    if !dev_bound {
        devices::create_symlinks(root.as_fd(), devpts)?;
    }
    // Masks go on now, while the host's /dev/null is still reachable as their source (the
    // container's own /dev/null may be anything: a symlink into /proc, a volume's file).
    let linux = spec.linux().clone().unwrap_or_default();
    let masked = linux.masked_paths().clone().unwrap_or_default();
    if !masked.is_empty() {
        let null = host_dev_null()?;
        let mut empty = shared_empty(spec, o);
        for path in &masked {
            mask(root.as_fd(), null.as_fd(), &mut empty, Path::new(path))?;
        }
    }
    Ok(())
}

/// The host's /dev/null, opened without following links and checked to be the character
/// device 1:3.
fn host_dev_null() -> Result<OwnedFd> {
    let fd = rustix::fs::open(
        "/dev/null",
        rustix::fs::OFlags::PATH | rustix::fs::OFlags::NOFOLLOW | rustix::fs::OFlags::CLOEXEC,
        rustix::fs::Mode::empty(),
    )
    .ctx(|| "linux.maskedPaths: open the host's /dev/null".into())?;
    let st = rustix::fs::fstat(&fd).ctx(|| "stat the host's /dev/null".into())?;
    let is_char =
        rustix::fs::FileType::from_raw_mode(st.st_mode) == rustix::fs::FileType::CharacterDevice;
    if !is_char || rustix::fs::major(st.st_rdev) != 1 || rustix::fs::minor(st.st_rdev) != 3 {
        return Err(Error::Other(
            "linux.maskedPaths: the host's /dev/null is not the character device 1:3; refusing \
             to mask with it"
                .into(),
        ));
    }
    Ok(fd)
}

/// pivot_root into the rootfs (or MS_MOVE + chroot with --no-pivot), leaving nothing of the
/// host's tree reachable.
pub fn enter(_spec: &Spec, o: &RootfsOptions<'_>) -> Result<()> {
    if o.shared_mount_ns {
        rustix::process::chroot(o.rootfs).ctx(|| format!("chroot to {}", p(o.rootfs)))?;
        return rustix::process::chdir("/").ctx(|| "chdir /".into());
    }
    if o.no_pivot {
        return move_root(o.rootfs, o.from_cwd);
    }
    // The rootfs: its path, the working directory prepare left the init in, or where it
    // was attached in the template.
    let at: &Path = if o.from_cwd {
        Path::new(".")
    } else if o.prepared.rootfs().is_some() {
        Path::new(crate::mount_template::ROOTFS)
    } else {
        o.rootfs
    };
    let new_root = rustix::fs::open(
        at,
        rustix::fs::OFlags::RDONLY | rustix::fs::OFlags::DIRECTORY | rustix::fs::OFlags::CLOEXEC,
        rustix::fs::Mode::empty(),
    )
    .ctx(|| format!("open rootfs {}", p(o.rootfs)))?;
    let old_root = rustix::fs::open(
        "/",
        rustix::fs::OFlags::RDONLY | rustix::fs::OFlags::DIRECTORY | rustix::fs::OFlags::CLOEXEC,
        rustix::fs::Mode::empty(),
    )
    .ctx(|| "open /".into())?;
    rustix::process::fchdir(&new_root).ctx(|| "chdir to the rootfs".into())?;
    // pivot_root(".", ".") stacks the old root on top of the new one; unmounting "." then
    // drops it, without needing a directory inside the rootfs to hold it.
    rustix::process::pivot_root(".", ".").ctx(|| format!("pivot_root to {}", p(o.rootfs)))?;
    rustix::process::fchdir(&old_root).ctx(|| "chdir to the old root".into())?;
    sys::mount(None, c".", None, libc::MS_SLAVE | libc::MS_REC, None)
        .ctx(|| "make the old root rslave".into())?;
    rustix::mount::unmount(".", rustix::mount::UnmountFlags::DETACH)
        .ctx(|| "unmount the old root".into())?;
    rustix::process::chdir("/").ctx(|| "chdir /".into())?;
    Ok(())
}

fn move_root(rootfs: &Path, in_it: bool) -> Result<()> {
    if !in_it {
        rustix::process::chdir(rootfs).ctx(|| format!("chdir to {}", p(rootfs)))?;
    }
    sys::mount(Some(c"."), c"/", None, libc::MS_MOVE, None)
        .ctx(|| format!("move {} to / (--no-pivot)", p(rootfs)))?;
    rustix::process::chroot(".").ctx(|| "chroot .".into())?;
    rustix::process::chdir("/").ctx(|| "chdir /".into())?;
    Ok(())
}

/// After pivot_root: read-only paths, the root's propagation, a read-only root. (Masked
/// paths were covered before pivot_root, in [`prepare`].)
pub fn finalize(spec: &Spec, shared_mount_ns: bool) -> Result<()> {
    let root = open_root(Path::new("/"))?;
    let linux = spec.linux().clone().unwrap_or_default();
    for path in linux.readonly_paths().iter().flatten() {
        readonly(root.as_fd(), Path::new(path))?;
    }
    if let Some(prop) = linux
        .rootfs_propagation()
        .as_deref()
        .filter(|s| !s.is_empty() && !shared_mount_ns)
    {
        let flag = mounts::propagation_flag(prop).unwrap_or(0);
        sys::mount(None, c"/", None, flag, None)
            .ctx(|| format!("set linux.rootfsPropagation {prop}"))?;
    }
    if spec
        .root()
        .as_ref()
        .and_then(|r| r.readonly())
        .unwrap_or(false)
    {
        let t = safe_path::lookup(root.as_fd(), Path::new("/")).ctx(|| "open /".into())?;
        mounts::remount(&t, libc::MS_RDONLY, Path::new("/"))?;
    }
    Ok(())
}

/// Hide a path: the host's /dev/null (`null`) over a file, an empty read-only tmpfs over a
/// directory. Both sides are fds: nothing in the container can redirect them.
///
/// All the masked directories of a container show one tmpfs: the template's shared one
/// where `empty` starts with it ([`shared_empty`]), else the first gets one mounted and the
/// others a bind of it (`empty` holds its root once made). A tmpfs per directory, as
/// runc and crun mount, is a superblock per directory, and every superblock on the host
/// makes removing any memory cgroup dearer (the kernel walks them all to reparent their
/// caches), so each pod that adds them slows all the others' removals.
fn mask(
    root: std::os::fd::BorrowedFd<'_>,
    null: std::os::fd::BorrowedFd<'_>,
    empty: &mut Option<OwnedFd>,
    path: &Path,
) -> Result<()> {
    let target = match safe_path::lookup(root, path) {
        Ok(fd) => fd,
        Err(e) if e.raw_os_error() == Some(libc::ENOENT) => return Ok(()),
        Err(e) => return Err(Error::os(format!("linux.maskedPaths: open {}", p(path)), e)),
    };
    let st = rustix::fs::fstat(&target).ctx(|| format!("stat {}", p(path)))?;
    let is_dir = rustix::fs::FileType::from_raw_mode(st.st_mode) == rustix::fs::FileType::Directory;
    let res = match (is_dir, empty.as_ref()) {
        (false, _) => mounts::bind_fd(null, target.as_fd()),
        (true, Some(tmpfs)) => mounts::bind_fd(tmpfs.as_fd(), target.as_fd()),
        (true, None) => {
            let dest = safe_path::proc_fd_path(&target);
            sys::mount(Some(c"tmpfs"), &dest, Some(c"tmpfs"), libc::MS_RDONLY, None).and_then(
                |()| {
                    *empty = Some(safe_path::lookup(root, path)?);
                    Ok(())
                },
            )
        }
    };
    res.ctx(|| format!("linux.maskedPaths: mask {}", p(path)))
}

/// A read-only tmpfs of the template at `path` ([`crate::mount_template::EMPTY`],
/// [`crate::mount_template::CGROUP_V1`]), for an init cloned from the template whose
/// processes cannot hold CAP_SYS_ADMIN: with it, remounting the superblock read-write would
/// let one container write what every other one sees there, so such a container mounts a
/// tmpfs of its own. None also where the template predates the tmpfs, or what is there is
/// not a read-only tmpfs mounted there.
fn shared_tmpfs(spec: &Spec, o: &RootfsOptions<'_>, path: &str) -> Option<OwnedFd> {
    o.prepared.rootfs()?;
    let may_admin = spec
        .process()
        .as_ref()
        .and_then(|p| p.capabilities().as_ref())
        .and_then(|c| c.bounding().as_ref())
        .is_some_and(|b| b.contains(&oci_spec::runtime::Capability::SysAdmin));
    if may_admin {
        return None;
    }
    let fd = rustix::fs::open(
        path,
        rustix::fs::OFlags::PATH
            | rustix::fs::OFlags::DIRECTORY
            | rustix::fs::OFlags::NOFOLLOW
            | rustix::fs::OFlags::CLOEXEC,
        rustix::fs::Mode::empty(),
    )
    .ok()?;
    let ro = rustix::fs::fstatvfs(&fd)
        .ok()?
        .f_flag
        .contains(rustix::fs::StatVfsMountFlags::RDONLY);
    let tmpfs = rustix::fs::fstatfs(&fd).ok()?.f_type as i64 == libc::TMPFS_MAGIC;
    (tmpfs && ro && wharf_sys::fs::is_mountpoint(Path::new(path))).then_some(fd)
}

/// The template's empty tmpfs for masked directories ([`shared_tmpfs`]).
fn shared_empty(spec: &Spec, o: &RootfsOptions<'_>) -> Option<OwnedFd> {
    shared_tmpfs(spec, o, crate::mount_template::EMPTY)
}

/// The template's tmpfs of v1 mount points ([`shared_tmpfs`]), where it holds every mount
/// point and symlink this host's hierarchies need (the host may have mounted one since the
/// template was made). Looked for only where the config has a cgroup mount to serve.
fn shared_cgroup_v1(spec: &Spec, o: &RootfsOptions<'_>) -> Option<OwnedFd> {
    let cgroup_mount = || {
        spec.mounts()
            .iter()
            .flatten()
            .any(|m| matches!(m.typ().as_deref(), Some("cgroup" | "cgroup2")))
    };
    if o.layout.v1.is_empty() || !cgroup_mount() {
        return None;
    }
    let fd = shared_tmpfs(spec, o, crate::mount_template::CGROUP_V1)?;
    let dir = safe_path::reopen_dir(&fd).ok()?;
    let complete = mounts::v1_mount_points(o.layout)
        .iter()
        .all(|(name, keys)| {
            let is_dir = rustix::fs::statat(
                &dir,
                name.as_os_str(),
                rustix::fs::AtFlags::SYMLINK_NOFOLLOW,
            )
            .is_ok_and(|st| {
                rustix::fs::FileType::from_raw_mode(st.st_mode) == rustix::fs::FileType::Directory
            });
            is_dir
                && mounts::co_mounted_names(name, keys).all(|k| {
                    rustix::fs::readlinkat(&dir, k, Vec::new())
                        .is_ok_and(|to| to.as_bytes() == name.as_encoded_bytes())
                })
        });
    complete.then_some(fd)
}

/// Make a path read-only: bind it onto itself, then remount the bind read-only.
fn readonly(root: std::os::fd::BorrowedFd<'_>, path: &Path) -> Result<()> {
    let target = match safe_path::lookup(root, path) {
        Ok(fd) => fd,
        Err(e) if e.raw_os_error() == Some(libc::ENOENT) => return Ok(()),
        Err(e) => {
            return Err(Error::os(
                format!("linux.readonlyPaths: open {}", p(path)),
                e,
            ));
        }
    };
    let dest = safe_path::proc_fd_path(&target);
    sys::mount(Some(&dest), &dest, None, libc::MS_BIND | libc::MS_REC, None)
        .ctx(|| format!("linux.readonlyPaths: bind {}", p(path)))?;
    let t = safe_path::lookup(root, path).ctx(|| format!("reopen {}", p(path)))?;
    mounts::remount(&t, libc::MS_RDONLY | libc::MS_REC, path)
}
