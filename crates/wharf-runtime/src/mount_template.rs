//! The small mount namespace a container's own mount namespace is copied from.
//!
//! A new mount namespace starts as a copy of its creator's: the kernel duplicates every
//! mount in it, the init then changes the propagation of all of them and, after
//! pivot_root, detaches them again. A node's namespace holds six mounts per pod (its
//! rootfs overlay, /dev/shm, name files, pinned namespaces), so cloning an init from it
//! made every container start cost more the more pods ran (at 1000 pods, about 6000 mounts
//! copied and dropped per start: the largest part of `run --rm`'s growth).
//!
//! The runtime clones inits from a template instead: a namespace whose root is a small
//! tmpfs holding binds of the host's /proc, /sys and /dev (what an init reads before
//! pivot_root), and read-only tmpfs the inits bind rather than mount their own ([`EMPTY`]
//! for masked directories, [`CGROUP_V1`] for /sys/fs/cgroup), built once per runtime root
//! and pinned at `<root>/.mnt-template/ns`. Its mounts are private, so nothing mounted on
//! the host later reaches it. The rootfs and
//! every bind source are opened as detached trees in the host's namespace before the clone
//! ([`crate::mount_sources`]) and attached by the init, so no host path is looked up inside
//! the template. Where the container needs more of the host's namespace (createContainer
//! hooks run before pivot_root, mounts that must receive or send propagation, a user
//! namespace, a mount namespace it joins) the runtime clones from the host's as before.

use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};

use oci_spec::runtime::{LinuxNamespaceType, Spec};

use crate::error::{Context, Error, Result, p};
use crate::sys::{self, Forked};

/// Where the inits attach their rootfs inside the template (a directory of its tmpfs).
pub const ROOTFS: &str = "/rootfs";

/// An empty tmpfs, read-only from its mount on, that the inits bind over masked
/// directories ([`crate::rootfs`]): one superblock for every container cloned from the
/// template, instead of one each.
pub const EMPTY: &str = "/empty";

/// On a host with v1 hierarchies, a read-only tmpfs holding their mount points as a
/// container's /sys/fs/cgroup shows them (with the co-mounted controllers' symlinks): the
/// inits bind it there for a read-only `cgroup` mount, and each hierarchy onto it.
pub const CGROUP_V1: &str = "/cgroup-v1";

const DIR: &str = ".mnt-template";
const NSFS_MAGIC: i64 = 0x6e73_6673;

/// Whether a container with this config can be cloned from the template: it gets a mount
/// namespace of its own, without a user namespace (its init could not enter the template,
/// and looks its binds up through trees already), and nothing in it needs the host's
/// namespace before pivot_root or the host's propagation after.
pub fn usable(spec: &Spec, no_pivot: bool) -> bool {
    let nss = crate::spec::namespaces(spec);
    let own_mount_ns = nss
        .iter()
        .any(|n| n.typ() == LinuxNamespaceType::Mount && n.path().is_none());
    let user_ns = nss.iter().any(|n| n.typ() == LinuxNamespaceType::User);
    if !own_mount_ns || user_ns || no_pivot {
        return false;
    }
    if crate::hooks::any(spec.hooks().as_ref(), crate::hooks::Kind::CreateContainer) {
        return false;
    }
    let linux = spec.linux().as_ref();
    let rootfs_shared = linux
        .and_then(|l| l.rootfs_propagation().as_deref())
        .is_some_and(|p| p.contains("shared"));
    if rootfs_shared {
        return false;
    }
    // A bind that must stay a slave or a peer of the host's mount (kubelet's
    // HostToContainer and Bidirectional) needs the host's namespace as its origin.
    !spec.mounts().iter().flatten().any(|m| {
        crate::mounts::parse_options(m.options().as_deref().unwrap_or(&[]))
            .propagation
            .iter()
            .any(|f| f & (libc::MS_SLAVE | libc::MS_SHARED) != 0)
    })
}

/// The template of runtime root `root`, built on first use. None where it cannot be built
/// (an old kernel, no privilege): the caller then clones from its own namespace.
pub fn open(root: &Path) -> Option<OwnedFd> {
    let dir = root.join(DIR);
    let pin = dir.join("ns");
    if let Some(fd) = open_pin(&pin) {
        return Some(fd);
    }
    match build(root, &dir, &pin) {
        Ok(fd) => Some(fd),
        Err(e) => {
            crate::log::debug(|| format!("no mount namespace template: {e}"));
            None
        }
    }
}

/// The pinned template, if the pin is one (an unmounted pin is an empty file).
fn open_pin(pin: &Path) -> Option<OwnedFd> {
    let fd = rustix::fs::open(
        pin,
        rustix::fs::OFlags::RDONLY | rustix::fs::OFlags::CLOEXEC,
        rustix::fs::Mode::empty(),
    )
    .ok()?;
    let fs = rustix::fs::fstatfs(&fd).ok()?;
    (fs.f_type as i64 == NSFS_MAGIC).then_some(fd)
}

/// Build and pin the template, under a lock so that concurrent creates build it once.
fn build(root: &Path, dir: &Path, pin: &Path) -> Result<OwnedFd> {
    std::fs::create_dir_all(dir).ctx(|| format!("create {}", p(dir)))?;
    let lock = std::fs::File::open(dir).ctx(|| format!("open {}", p(dir)))?;
    rustix::fs::flock(&lock, rustix::fs::FlockOperation::LockExclusive)
        .ctx(|| format!("lock {}", p(dir)))?;
    if let Some(fd) = open_pin(pin) {
        return Ok(fd);
    }
    private_mount_point(dir)?;
    if !pin.exists() {
        std::fs::File::create(pin).ctx(|| format!("create {}", p(pin)))?;
    }
    let ns = make_namespace(dir)?;
    let from = crate::safe_path::proc_fd_path(&ns);
    sys::mount(
        Some(&from),
        &crate::mounts::path_cstr(pin),
        None,
        libc::MS_BIND,
        None,
    )
    .ctx(|| format!("pin the mount namespace template at {}", p(pin)))?;
    crate::log::debug(|| format!("mount namespace template pinned in {}", p(root)));
    open_pin(pin).ok_or_else(|| Error::Other(format!("{} is not a namespace", p(pin))))
}

/// Make `dir` a private mount point: a mount namespace can only be pinned where the pin
/// cannot propagate (into the namespace itself, among others).
fn private_mount_point(dir: &Path) -> Result<()> {
    let c = crate::mounts::path_cstr(dir);
    if !wharf_sys::fs::is_mountpoint(dir) {
        sys::mount(Some(&c), &c, None, libc::MS_BIND, None)
            .ctx(|| format!("bind {} onto itself", p(dir)))?;
    }
    sys::mount(None, &c, None, libc::MS_PRIVATE, None).ctx(|| format!("make {} private", p(dir)))
}

/// A child builds the namespace (a copy of ours, made private, its root swapped for a
/// tmpfs with /proc, /sys and /dev bound in) and waits while we open it.
fn make_namespace(dir: &Path) -> Result<OwnedFd> {
    let (ready_r, ready_w) =
        rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC).ctx(|| "make a pipe".into())?;
    let (done_r, done_w) =
        rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC).ctx(|| "make a pipe".into())?;
    // SAFETY: the runtime is single-threaded (create's contract); the child only makes
    // mounts in its own namespace, writes a pipe and exits.
    let (forked, _) = unsafe { sys::clone_process(libc::CLONE_NEWNS as u64, None) }
        .ctx(|| "clone the mount namespace template's builder".into())?;
    let pid = match forked {
        Forked::Child => {
            drop((ready_r, done_w));
            let msg = match populate(dir) {
                Ok(()) => String::new(),
                Err(e) => e.to_string(),
            };
            let _ = rustix::io::write(&ready_w, format!("{msg}\n").as_bytes());
            let mut b = [0u8; 1];
            let _ = rustix::io::read(&done_r, &mut b);
            sys::exit_now(0);
        }
        Forked::Parent { pid, .. } => pid,
    };
    drop((ready_w, done_r));
    let mut buf = vec![0u8; 4096];
    let n = rustix::io::read(&ready_r, &mut buf).unwrap_or(0);
    let msg = String::from_utf8_lossy(&buf[..n]).trim_end().to_string();
    let out = if n == 0 {
        Err(Error::Other(
            "the mount namespace template's builder died".into(),
        ))
    } else if !msg.is_empty() {
        Err(Error::Other(format!(
            "build the mount namespace template: {msg}"
        )))
    } else {
        rustix::fs::open(
            format!("/proc/{pid}/ns/mnt"),
            rustix::fs::OFlags::RDONLY | rustix::fs::OFlags::CLOEXEC,
            rustix::fs::Mode::empty(),
        )
        .ctx(|| "open the template's mount namespace".into())
    };
    drop(done_w);
    // SAFETY: reap our own child, which exits on the pipe's EOF.
    unsafe { libc::waitpid(pid, std::ptr::null_mut(), 0) };
    out
}

/// In the builder: the template's content.
fn populate(dir: &Path) -> Result<()> {
    sys::mount(None, c"/", None, libc::MS_REC | libc::MS_PRIVATE, None)
        .ctx(|| "make the template's mounts private".into())?;
    let c = crate::mounts::path_cstr(dir);
    sys::mount(
        Some(c"tmpfs"),
        &c,
        Some(c"tmpfs"),
        libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
        Some(c"mode=0755,size=64k"),
    )
    .ctx(|| format!("mount the template's root on {}", p(dir)))?;
    for name in ["proc", "sys", "dev"] {
        let target: PathBuf = dir.join(name);
        std::fs::create_dir(&target).ctx(|| format!("create {}", p(&target)))?;
        let host = PathBuf::from("/").join(name);
        sys::mount(
            Some(&crate::mounts::path_cstr(&host)),
            &crate::mounts::path_cstr(&target),
            None,
            libc::MS_BIND | libc::MS_REC,
            None,
        )
        .ctx(|| format!("bind {} into the template", p(&host)))?;
    }
    let rootfs = at(dir, ROOTFS);
    std::fs::create_dir(&rootfs).ctx(|| format!("create {}", p(&rootfs)))?;
    empty_tmpfs(&at(dir, EMPTY))?;
    // Best effort: where it cannot be made, containers mount a tmpfs of their own.
    if let Err(e) = cgroup_v1_points(&at(dir, CGROUP_V1)) {
        crate::log::debug(|| format!("no shared cgroup v1 tmpfs in the template: {e}"));
    }
    rustix::process::chdir(dir).ctx(|| format!("enter {}", p(dir)))?;
    rustix::process::pivot_root(".", ".").ctx(|| "pivot_root into the template".into())?;
    rustix::mount::unmount(".", rustix::mount::UnmountFlags::DETACH)
        .ctx(|| "detach the host's tree from the template".into())?;
    rustix::process::chdir("/").ctx(|| "enter the template's root".into())?;
    Ok(())
}

/// Where `path`, a path inside the template, is while the builder makes it under `dir`.
fn at(dir: &Path, path: &str) -> PathBuf {
    dir.join(path.trim_start_matches('/'))
}

/// [`EMPTY`] at `at`: read-only as a superblock, so that no mount of it can write it (and
/// its binds are read-only mounts too). Mode 1777, as the tmpfs runc mounts on a masked
/// directory shows.
fn empty_tmpfs(at: &Path) -> Result<()> {
    std::fs::create_dir(at).ctx(|| format!("create {}", p(at)))?;
    sys::mount(
        Some(c"tmpfs"),
        &crate::mounts::path_cstr(at),
        Some(c"tmpfs"),
        libc::MS_RDONLY | libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
        Some(c"size=4k"),
    )
    .ctx(|| format!("mount the template's empty tmpfs on {}", p(at)))
}

/// [`CGROUP_V1`] at `at`: a tmpfs with a directory per v1 mount point and a symlink per
/// co-mounted controller, then made read-only. Nothing where the host has no v1
/// hierarchy.
fn cgroup_v1_points(at: &Path) -> Result<()> {
    let layout = crate::cgroups::layout::detect()?;
    if layout.v1.is_empty() {
        return Ok(());
    }
    let flags = libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC;
    std::fs::create_dir(at).ctx(|| format!("create {}", p(at)))?;
    let c = crate::mounts::path_cstr(at);
    sys::mount(
        Some(c"tmpfs"),
        &c,
        Some(c"tmpfs"),
        flags,
        Some(c"mode=755,size=4k"),
    )
    .ctx(|| format!("mount a tmpfs on {}", p(at)))?;
    for (name, keys) in crate::mounts::v1_mount_points(&layout) {
        let sub = at.join(&name);
        std::fs::create_dir(&sub).ctx(|| format!("create {}", p(&sub)))?;
        for k in crate::mounts::co_mounted_names(&name, &keys) {
            std::os::unix::fs::symlink(&name, at.join(k))
                .ctx(|| format!("link {k} in {}", p(at)))?;
        }
    }
    sys::mount(
        None,
        &c,
        None,
        libc::MS_REMOUNT | libc::MS_RDONLY | flags,
        Some(c"mode=755,size=4k"),
    )
    .ctx(|| format!("remount {} read-only", p(at)))
}

/// The calling process moved into the template's mount namespace; back into its own, and
/// its working directory, when dropped (fields drop in order: the namespace first). The
/// clone of an init happens in between.
pub struct Entered {
    _own: crate::namespaces::Restore,
    _cwd: sys::CwdGuard,
}

impl Entered {
    /// Enter `template` (the caller must be single-threaded: setns of a mount namespace
    /// refuses a shared filesystem context).
    pub fn enter(template: &OwnedFd) -> Result<Entered> {
        let own = crate::namespaces::Restore::save(LinuxNamespaceType::Mount)?;
        let cwd = sys::CwdGuard::here().ctx(|| "open the working directory".into())?;
        crate::namespaces::join(LinuxNamespaceType::Mount, template)?;
        Ok(Entered {
            _own: own,
            _cwd: cwd,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(edit: impl FnOnce(&mut serde_json::Value)) -> Spec {
        let mut v: serde_json::Value =
            serde_json::from_str(crate::spec::DEFAULT_CONFIG).expect("default config");
        edit(&mut v);
        serde_json::from_value(v).expect("a valid spec")
    }

    #[test]
    fn plain_containers_use_the_template_and_those_that_need_the_host_namespace_do_not() {
        assert!(usable(&spec(|_| {}), false));
        assert!(!usable(&spec(|_| {}), true), "--no-pivot");
        let bind = |opts: &[&str]| {
            let opts: Vec<String> = opts.iter().map(|s| s.to_string()).collect();
            spec(move |v| {
                v["mounts"].as_array_mut().unwrap().push(serde_json::json!({
                    "destination": "/v", "type": "bind", "source": "/tmp", "options": opts
                }))
            })
        };
        assert!(usable(&bind(&["rbind", "rprivate", "ro"]), false));
        assert!(
            !usable(&bind(&["rbind", "rslave"]), false),
            "HostToContainer"
        );
        assert!(
            !usable(&bind(&["rbind", "rshared"]), false),
            "Bidirectional"
        );
        assert!(!usable(
            &spec(|v| v["linux"]["rootfsPropagation"] = "rshared".into()),
            false
        ));
        assert!(!usable(
            &spec(|v| v["hooks"] = serde_json::json!({"createContainer": [{"path": "/bin/true"}]})),
            false
        ));
        assert!(usable(
            &spec(|v| v["hooks"] = serde_json::json!({"prestart": [{"path": "/bin/true"}]})),
            false
        ));
        let ns = |extra: serde_json::Value| {
            spec(move |v| v["linux"]["namespaces"].as_array_mut().unwrap().push(extra))
        };
        assert!(!usable(&ns(serde_json::json!({"type": "user"})), false));
        let joined = spec(|v| {
            for n in v["linux"]["namespaces"].as_array_mut().unwrap() {
                if n["type"] == "mount" {
                    n["path"] = "/proc/1/ns/mnt".into();
                }
            }
        });
        assert!(!usable(&joined, false), "a joined mount namespace");
    }
}
