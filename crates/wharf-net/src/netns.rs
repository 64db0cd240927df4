//! Network namespaces of pods: created empty, pinned by bind-mounting their nsfs file at
//! `<run>/netns/<name>` (as `ip netns` and CRI runtimes do, so the namespace outlives every
//! process and containers join it by path), loopback up, removed with the pod.
//!
//! Nothing here changes the calling thread's namespace: work inside a namespace runs on a
//! short-lived helper thread ([`run_in`]) that is joined before the call returns, so the
//! process is single-threaded again afterwards (the runtime's clone path needs that).

use std::fs::File;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};

use crate::error::{Context, Error, Result};
use crate::netlink::Netlink;
use crate::sys;

/// Default run directory (pinned namespaces go to `<run>/netns/`).
pub const DEFAULT_RUN_DIR: &str = "/run/wharf";

/// A pinned network namespace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NetNs {
    /// The bind-mounted nsfs file: join it with setns(2), `nsenter --net=<path>`, or an OCI
    /// config's `linux.namespaces[].path`.
    pub path: PathBuf,
}

/// The directory holding pinned namespaces.
pub fn dir(run_dir: &Path) -> PathBuf {
    run_dir.join("netns")
}

/// Check that a namespace name is a plain file name.
pub fn validate_name(name: &str) -> Result<()> {
    let ok = !name.is_empty()
        && name.len() <= 255
        && name != "."
        && name != ".."
        && !name.starts_with('.')
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b));
    if ok {
        Ok(())
    } else {
        Err(Error::Invalid(format!(
            "invalid network namespace name {name:?}: use letters, digits, '-', '_' and '.'"
        )))
    }
}

/// Create a new network namespace with `lo` up and pin it at `<run>/netns/<name>`.
/// An existing name is an error (never reused: it may belong to a live pod). On failure
/// nothing is left behind.
pub fn create(run_dir: &Path, name: &str) -> Result<NetNs> {
    let path = new_pin_file(run_dir, name)?;
    let pin = || -> Result<()> {
        std::thread::scope(|s| {
            s.spawn(|| -> Result<()> {
                sys::unshare_net().ctx(|| "unshare the network namespace".into())?;
                let mut nl = Netlink::open().ctx(|| "open netlink in the new namespace".into())?;
                nl.set_up(1).map_err(|e| e.ctx("bring up lo"))?;
                sys::bind_mount(Path::new("/proc/thread-self/ns/net"), &path, false)
                    .ctx(|| format!("bind-mount the namespace onto {}", path.display()))
            })
            .join()
            .unwrap_or_else(|p| std::panic::resume_unwind(p))
        })
    };
    if let Err(e) = pin() {
        let _ = sys::umount_detach(&path);
        let _ = std::fs::remove_file(&path);
        return Err(e);
    }
    Ok(NetNs { path })
}

/// Pin an existing network namespace (`ns`, opened; made by the caller, e.g. owned by a
/// pod's user namespace) as `<run>/netns/<name>`, with its loopback up, as [`create`]
/// leaves a new one. On error nothing is left.
pub fn pin_existing(run_dir: &Path, name: &str, ns: BorrowedFd<'_>) -> Result<NetNs> {
    let path = new_pin_file(run_dir, name)?;
    let pin = || -> Result<()> {
        let src = PathBuf::from(format!("/proc/self/fd/{}", ns.as_raw_fd()));
        sys::bind_mount(&src, &path, false)
            .ctx(|| format!("bind-mount the namespace onto {}", path.display()))?;
        run_in(Some(ns), || -> Result<()> {
            let mut nl = Netlink::open().ctx(|| "open netlink in the namespace".into())?;
            nl.set_up(1).map_err(|e| e.ctx("bring up lo"))
        })
    };
    if let Err(e) = pin() {
        let _ = sys::umount_detach(&path);
        let _ = std::fs::remove_file(&path);
        return Err(e);
    }
    Ok(NetNs { path })
}

/// The empty file `<run>/netns/<name>` a namespace is pinned on, made anew (an existing
/// name is an error: it may belong to a live pod).
fn new_pin_file(run_dir: &Path, name: &str) -> Result<PathBuf> {
    validate_name(name)?;
    let dir = dir(run_dir);
    ensure_shared_dir(run_dir, &dir)?;
    let path = dir.join(name);
    match std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&path)
    {
        Ok(_) => Ok(path),
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Err(Error::Conflict(format!(
            "network namespace {name:?} already exists at {}",
            path.display()
        ))),
        Err(e) => Err(Error::os(format!("create {}", path.display()), e)),
    }
}

/// Make `<run>/netns` a mount point with shared propagation, like `ip netns`: an unmount
/// there then propagates to mount namespaces that copied the pin, instead of keeping the
/// namespace alive behind the engine's back.
///
/// Pins mounted below a shared mount are shared themselves, so once the directory is a
/// shared mount only its own mount is set again (one mount, and it heals a bind that a
/// crash left private). Making the whole tree shared, as `ip netns add` does every time,
/// walks every pin below it under the kernel's mount lock: with a thousand pods that was a
/// cost every pod start paid.
fn ensure_shared_dir(run_dir: &Path, dir: &Path) -> Result<()> {
    std::fs::create_dir_all(dir).ctx(|| format!("create {}", dir.display()))?;
    let is_root = || sys::is_mount_root(dir).ctx(|| format!("inspect {}", dir.display()));
    if !is_root()? {
        let _lock = sys::lock_exclusive(&run_dir.join("netns.lock"))?;
        if !is_root()? {
            sys::bind_mount(dir, dir, true)
                .ctx(|| format!("bind-mount {} onto itself", dir.display()))?;
            // Pins that were below the directory came along as private copies.
            return sys::make_rshared(dir).ctx(|| format!("make {} a shared mount", dir.display()));
        }
    }
    sys::make_shared(dir).ctx(|| format!("make {} a shared mount", dir.display()))
}

/// Remove the pinned namespace `<run>/netns/<name>`. Idempotent: a missing pin or a file
/// that is no longer mounted (a crash between the steps of create or remove) is fine.
pub fn remove(run_dir: &Path, name: &str) -> Result<()> {
    validate_name(name)?;
    remove_path(&dir(run_dir).join(name))
}

/// Remove a pinned namespace by its path (see [`remove`]).
pub fn remove_path(path: &Path) -> Result<()> {
    match sys::umount_detach(path) {
        Ok(()) => {}
        // EINVAL: not a mount point (already unmounted); ENOENT: no file.
        Err(e) if matches!(e.raw_os_error(), Some(libc::EINVAL | libc::ENOENT)) => {}
        Err(e) => return Err(Error::os(format!("unmount {}", path.display()), e)),
    }
    sys::remove_file_if_exists(path)
}

/// The pinned namespaces under `<run>/netns` (for reconciling with the engine's pods after
/// a restart).
pub fn list(run_dir: &Path) -> Result<Vec<NetNs>> {
    let dir = dir(run_dir);
    let entries = match std::fs::read_dir(&dir) {
        Ok(e) => e,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(Error::os(format!("read {}", dir.display()), e)),
    };
    let mut out: Vec<NetNs> = entries
        .flatten()
        .filter(|e| !e.file_name().to_string_lossy().starts_with('.'))
        .map(|e| NetNs { path: e.path() })
        .collect();
    out.sort_by(|a, b| a.path.cmp(&b.path));
    Ok(out)
}

/// Open a network namespace file, checking that it really is one (an nsfs file of type
/// net), so a wrong path is an error rather than a setns into something else.
pub fn open(path: &Path) -> Result<OwnedFd> {
    let f = File::open(path).ctx(|| format!("open network namespace {}", path.display()))?;
    let fd: OwnedFd = f.into();
    let magic = sys::fs_magic(fd.as_fd()).ctx(|| format!("inspect {}", path.display()))?;
    if magic != wharf_sys::fs::NSFS_MAGIC {
        return Err(Error::Invalid(format!(
            "{} is not a namespace file (not pinned, or the namespace is gone)",
            path.display()
        )));
    }
    // NS_GET_NSTYPE tells which kind of namespace it is (a kernel without it: trust nsfs).
    if let Ok(ty) = sys::ns_type(fd.as_fd())
        && ty != libc::CLONE_NEWNET
    {
        return Err(Error::Invalid(format!(
            "{} is a namespace file, but not of a network namespace",
            path.display()
        )));
    }
    Ok(fd)
}

/// Run `f` with the network namespace `ns` (None: the caller's own, then `f` just runs on
/// the calling thread). Sockets `f` creates belong to that namespace for their whole life,
/// and /proc/sys/net/* opened by `f` is that namespace's. The helper thread is joined
/// before returning; a panic in `f` is resumed on the caller.
pub fn run_in<T: Send, E: Send + From<io::Error>>(
    ns: Option<BorrowedFd<'_>>,
    f: impl FnOnce() -> Result<T, E> + Send,
) -> Result<T, E> {
    let Some(ns) = ns else { return f() };
    std::thread::scope(|s| {
        s.spawn(move || {
            sys::setns_net(ns)?;
            f()
        })
        .join()
        .unwrap_or_else(|p| std::panic::resume_unwind(p))
    })
}

/// A namespace handle: an opened namespace file, or the caller's own namespace.
#[derive(Debug, Default)]
pub struct NsHandle {
    fd: Option<OwnedFd>,
    path: Option<PathBuf>,
}

impl NsHandle {
    /// The caller's own network namespace (the engine's host namespace).
    pub fn current() -> NsHandle {
        NsHandle::default()
    }

    /// The namespace pinned at `path` (None: the caller's own).
    pub fn open(path: Option<&Path>) -> Result<NsHandle> {
        match path {
            None => Ok(NsHandle::current()),
            Some(p) => Ok(NsHandle {
                fd: Some(open(p)?),
                path: Some(p.to_path_buf()),
            }),
        }
    }

    /// The fd to setns(2) into, None for the caller's own namespace.
    pub fn fd(&self) -> Option<BorrowedFd<'_>> {
        self.fd.as_ref().map(|f| f.as_fd())
    }

    /// The path it was opened from (None for the caller's own namespace).
    pub fn path(&self) -> Option<&Path> {
        self.path.as_deref()
    }

    /// A netlink socket in this namespace.
    pub fn netlink(&self) -> Result<Netlink> {
        match self.fd() {
            None => Netlink::open().ctx(|| "open a netlink socket".into()),
            Some(fd) => Netlink::open_in(fd).ctx(|| {
                format!(
                    "open a netlink socket in {}",
                    self.path.as_deref().unwrap_or(Path::new("?")).display()
                )
            }),
        }
    }
}
