//! Bind mounts whose sources the runtime opens before the clone, for the init to attach.
//!
//! - **Id-mapped mounts**: config.json mounts with `uidMappings`/`gidMappings` (or the
//!   `idmap`/`ridmap` options, which take the container's own maps). Files keep on disk
//!   the owners they show inside the container, so a container whose root is an
//!   unprivileged host id still owns what the host's root owns in a volume. Only a process
//!   privileged in the host's user namespace may id-map a mount.
//! - **Every bind of a container with a user namespace**: its init looks paths up as an
//!   unprivileged host id, which cannot pass the engine's owner-only directories (the pod's
//!   name files, its /dev/shm), however its mounts are set up. The runtime, still the
//!   host's root, opens each source instead (as runc and crun do).
//!
//! Each is a detached mount tree the init inherits and attaches where the mount goes
//! ([`crate::mounts::attach_prepared`]). Id maps are a user namespace's: the runtime makes
//! one per distinct pair of maps, held by a short-lived child while the trees are made.

use std::os::fd::{AsFd, OwnedFd};
use std::path::PathBuf;

use oci_spec::runtime::{LinuxIdMapping, Spec};

use crate::error::{Context, Error, Result, p};
use crate::mounts::{
    MOUNT_ATTR_NODEV, MOUNT_ATTR_NOEXEC, MOUNT_ATTR_NOSUID, MOUNT_ATTR_RDONLY, parse_options,
};
use crate::sys::{self, Forked, MountAttr};

/// A mount prepared before the clone.
pub struct PreparedMount {
    /// The detached, id-mapped tree (with the mount's read-only and nosuid-like flags).
    pub tree: OwnedFd,
    /// Whether its source is a directory (what the mount point must be).
    pub is_dir: bool,
}

/// The prepared mounts, by their index in config.json's `mounts`, and the rootfs when the
/// init is cloned from the mount namespace template ([`crate::mount_template`]).
#[derive(Default)]
pub struct Prepared {
    mounts: Vec<Option<PreparedMount>>,
    rootfs: Option<OwnedFd>,
}

impl Prepared {
    /// The prepared tree of mount `index`, if it was id-mapped.
    pub fn get(&self, index: usize) -> Option<&PreparedMount> {
        self.mounts.get(index).and_then(Option::as_ref)
    }

    /// The rootfs as a detached tree, for an init cloned from the template.
    pub fn rootfs(&self) -> Option<&OwnedFd> {
        self.rootfs.as_ref()
    }
}

type Maps = (Vec<LinuxIdMapping>, Vec<LinuxIdMapping>);

/// Prepare the mounts of `spec` (sources relative to `bundle`) that must be: id-mapped
/// ones, and every bind when the container has a user namespace. With `rootfs` (the init
/// is cloned from the mount namespace template, where no host path is looked up), every
/// bind and the rootfs itself.
pub fn prepare(
    spec: &Spec,
    bundle: &std::path::Path,
    rootfs: Option<&std::path::Path>,
) -> Result<Prepared> {
    let rootfs = rootfs
        .map(|r| {
            let dir = rustix::fs::open(
                r,
                rustix::fs::OFlags::PATH
                    | rustix::fs::OFlags::DIRECTORY
                    | rustix::fs::OFlags::CLOEXEC,
                rustix::fs::Mode::empty(),
            )
            .map_err(|e| Error::os(format!("open rootfs {}", p(r)), std::io::Error::from(e)))?;
            let tree = sys::clone_tree(dir.as_fd(), true)
                .map_err(|e| Error::os(format!("bind mount rootfs {}", p(r)), e))?;
            slave(&tree, r)?;
            Ok(tree)
        })
        .transpose()?;
    let every_bind = rootfs.is_some();
    let Some(mounts) = spec.mounts() else {
        return Ok(Prepared {
            mounts: Vec::new(),
            rootfs,
        });
    };
    let linux = spec.linux().clone().unwrap_or_default();
    let open_every_bind = every_bind
        || crate::spec::namespaces(spec)
            .iter()
            .any(|n| n.typ() == oci_spec::runtime::LinuxNamespaceType::User);
    let mut namespaces: Vec<(Maps, OwnedFd)> = Vec::new();
    let mut out = Vec::with_capacity(mounts.len());
    for m in mounts {
        let opts = parse_options(m.options().as_deref().unwrap_or(&[]));
        let idmapped =
            opts.idmap.is_some() || m.uid_mappings().is_some() || m.gid_mappings().is_some();
        let dest = m.destination();
        let typ = m.typ().clone().unwrap_or_default();
        let is_bind = typ == "bind" || opts.flags & libc::MS_BIND != 0;
        if idmapped && !is_bind {
            return Err(Error::Config(format!(
                "mount {}: only bind mounts can be id-mapped (type {typ:?})",
                p(dest)
            )));
        }
        if !is_bind || !(idmapped || open_every_bind) {
            out.push(None);
            continue;
        }
        let recursive = opts.idmap == Some(true) || opts.flags & libc::MS_REC != 0;
        let src = m.source().clone().ok_or_else(|| {
            Error::Config(format!("mount {}: a bind mount needs a source", p(dest)))
        })?;
        let src: PathBuf = if src.is_absolute() {
            src
        } else {
            bundle.join(src)
        };
        let file = rustix::fs::open(
            &src,
            rustix::fs::OFlags::PATH | rustix::fs::OFlags::CLOEXEC,
            rustix::fs::Mode::empty(),
        )
        .map_err(|e| {
            Error::os(
                format!("bind mount source {} for {}", p(&src), p(dest)),
                std::io::Error::from(e),
            )
        })?;
        let is_dir = rustix::fs::fstat(&file)
            .map_err(|e| Error::os(format!("inspect {}", p(&src)), std::io::Error::from(e)))?
            .st_mode
            & libc::S_IFMT
            == libc::S_IFDIR;
        if !idmapped {
            let tree = sys::clone_tree(file.as_fd(), recursive)
                .map_err(|e| Error::os(format!("bind {} for {}", p(&src), p(dest)), e))?;
            slave(&tree, dest)?;
            set_flags(&tree, &opts, dest)?;
            out.push(Some(PreparedMount { tree, is_dir }));
            continue;
        }
        let pick = |own: &Option<Vec<LinuxIdMapping>>, container: &Option<Vec<LinuxIdMapping>>| {
            own.clone()
                .filter(|v| !v.is_empty())
                .or_else(|| container.clone().filter(|v| !v.is_empty()))
        };
        let (Some(uids), Some(gids)) = (
            pick(m.uid_mappings(), linux.uid_mappings()),
            pick(m.gid_mappings(), linux.gid_mappings()),
        ) else {
            return Err(Error::Config(format!(
                "mount {}: an id-mapped mount needs uidMappings and gidMappings (its own or \
                 the container's)",
                p(dest)
            )));
        };
        let maps = (uids, gids);
        let userns = match namespaces.iter().find(|(k, _)| *k == maps) {
            Some((_, fd)) => fd,
            None => {
                let fd = user_namespace(&maps.0, &maps.1)
                    .ctx(|| format!("mount {}: make a user namespace with its maps", p(dest)))?;
                namespaces.push((maps, fd));
                &namespaces.last().expect("pushed").1
            }
        };
        let tree = sys::idmapped_tree(file.as_fd(), userns.as_fd(), recursive).map_err(|e| {
            if e.raw_os_error() == Some(libc::EINVAL) {
                Error::Unsupported(format!(
                    "mount {}: the filesystem of {} cannot be id-mapped",
                    p(dest),
                    p(&src)
                ))
            } else {
                Error::os(format!("id-map {} for {}", p(&src), p(dest)), e)
            }
        })?;
        slave(&tree, dest)?;
        set_flags(&tree, &opts, dest)?;
        out.push(Some(PreparedMount { tree, is_dir }));
    }
    Ok(Prepared {
        mounts: out,
        rootfs,
    })
}

/// A cloned tree receives the host's mount events but sends none: a clone of a shared
/// mount (any mount on a systemd host, whose / is shared) is a peer of its source, so
/// what the container mounts in it would reach the host, and pivot_root refuses a shared
/// rootfs. A bind made in a namespace copied from the host's, made rslave first, is the
/// same slave.
fn slave(tree: &OwnedFd, what: &std::path::Path) -> Result<()> {
    let attr = MountAttr {
        propagation: libc::MS_SLAVE,
        ..Default::default()
    };
    sys::mount_setattr(tree.as_fd(), libc::AT_RECURSIVE as u32, &attr)
        .map_err(|e| Error::os(format!("make the mount of {} a slave", p(what)), e))
}

/// The mount's ro, nosuid, nodev and noexec on the top of a prepared tree (as a bind's
/// remount sets them; the recursive `r*` options come once it is attached).
fn set_flags(tree: &OwnedFd, opts: &crate::mounts::Options, dest: &std::path::Path) -> Result<()> {
    let mut set = 0;
    for (ms, attr) in [
        (libc::MS_RDONLY, MOUNT_ATTR_RDONLY),
        (libc::MS_NOSUID, MOUNT_ATTR_NOSUID),
        (libc::MS_NODEV, MOUNT_ATTR_NODEV),
        (libc::MS_NOEXEC, MOUNT_ATTR_NOEXEC),
    ] {
        if opts.flags & ms != 0 {
            set |= attr;
        }
    }
    if set == 0 {
        return Ok(());
    }
    let attr = MountAttr {
        attr_set: set,
        ..Default::default()
    };
    sys::mount_setattr(tree.as_fd(), 0, &attr)
        .map_err(|e| Error::os(format!("set the flags of mount {}", p(dest)), e))
}

/// A user namespace with maps `uids` and `gids`, held open: a child is cloned into a new
/// one, its maps are written, its namespace file is opened, and it exits.
fn user_namespace(uids: &[LinuxIdMapping], gids: &[LinuxIdMapping]) -> std::io::Result<OwnedFd> {
    let (r, w) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)?;
    // SAFETY: the runtime is single-threaded (create's contract); the child only blocks in
    // read(2) and exits.
    let (forked, _) = unsafe { sys::clone_process(libc::CLONE_NEWUSER as u64, None) }?;
    let pid = match forked {
        Forked::Child => {
            drop(w);
            let mut b = [0u8; 1];
            let _ = rustix::io::read(&r, &mut b);
            sys::exit_now(0);
        }
        Forked::Parent { pid, .. } => pid,
    };
    drop(r);
    let steps = || -> std::io::Result<OwnedFd> {
        crate::namespaces::write_id_maps(pid, uids, gids)
            .map_err(|e| std::io::Error::other(e.to_string()))?;
        Ok(std::fs::File::open(format!("/proc/{pid}/ns/user"))?.into())
    };
    let out = steps();
    drop(w);
    // SAFETY: reap our own child, which exits on the pipe's EOF.
    unsafe { libc::waitpid(pid, std::ptr::null_mut(), 0) };
    out
}
