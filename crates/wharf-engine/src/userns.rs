//! Pods' own user namespaces (`--userns=auto`, Kubernetes' `hostUsers: false`): choosing
//! each pod a range of host ids that no other pod has, checking the maps a front end
//! gives, and making the namespace together with the pod's network, IPC and UTS
//! namespaces, which it must own: a container's root may then configure its pod's network
//! and set its hostname, and nothing of the host's.
//!
//! The ranges are recorded in the pod's spec; the store keeps an index of them from the
//! specs (see `engine_userns_ranges` in `db.rs`) that refuses any overlap, so a pod keeps
//! its range across restarts and `system restore`, and two processes choosing at once
//! cannot both take one range (the loser chooses again).

use std::ffi::CString;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};

use crate::db::Db;
use crate::error::{Context, Error, Result};
use crate::model::{IdRange, NetworkMode, PodSpec, UserNamespace};

/// Ids per pod, as kubelet gives (a full 16-bit range: every id an image may use).
pub const RANGE_SIZE: u32 = 65536;

/// Most lines a kernel id map takes.
const MAX_MAP_LINES: usize = 340;

/// The first host id above the host's own users and groups (`/etc/passwd`, `/etc/group`),
/// rounded up to a whole range: ranges start there.
pub fn first_free_id() -> u64 {
    let highest = |path: &str, field: usize| -> u64 {
        std::fs::read_to_string(path)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| l.split(':').nth(field)?.parse::<u64>().ok())
            // nobody/nogroup (65534) and the invalid id (-1 as 4294967295) are not owners.
            .filter(|&id| id < 65534)
            .max()
            .unwrap_or(0)
    };
    let top = highest("/etc/passwd", 2).max(highest("/etc/group", 2));
    let size = u64::from(RANGE_SIZE);
    (top / size + 1) * size
}

/// The lowest range of [`RANGE_SIZE`] ids, at or above `from` and aligned to it, that
/// overlaps none of `taken` (sorted by start).
fn lowest_free(taken: &[(u64, u64)], from: u64) -> Option<u64> {
    let size = u64::from(RANGE_SIZE);
    let mut start = from;
    for &(s, n) in taken {
        if s + n <= start {
            continue;
        }
        if s >= start + size {
            break;
        }
        start = (s + n).div_ceil(size) * size;
    }
    // Host ids are 32 bits, and the last one (-1) means "no id".
    (start + size <= u64::from(u32::MAX)).then_some(start)
}

/// A free range for a new pod: the same host ids for users and groups.
pub fn choose(db: &Db) -> Result<UserNamespace> {
    let mut taken = db.userns_ranges("uid")?;
    taken.extend(db.userns_ranges("gid")?);
    taken.sort_unstable();
    let start = lowest_free(&taken, first_free_id()).ok_or_else(|| {
        Error::Precondition("no free range of host ids is left for a user namespace".into())
    })?;
    let range = vec![IdRange {
        container_id: 0,
        host_id: start as u32,
        size: RANGE_SIZE,
    }];
    Ok(UserNamespace {
        uid_map: range.clone(),
        gid_map: range,
    })
}

/// Check maps a front end gave (kubelet's choice, or a user's): each maps the pod's root,
/// none maps the host's root into the pod, and the kernel takes them.
pub fn validate(pod: &str, ns: &UserNamespace) -> Result<()> {
    for (what, map) in [("uid", &ns.uid_map), ("gid", &ns.gid_map)] {
        let bad = |why: String| Err(Error::Invalid(format!("pod {pod}: {what} map: {why}")));
        if map.is_empty() {
            return bad("empty".into());
        }
        if map.len() > MAX_MAP_LINES {
            return bad(format!(
                "{} lines, the kernel takes {MAX_MAP_LINES}",
                map.len()
            ));
        }
        for r in map {
            let end = |start: u32| u64::from(start) + u64::from(r.size);
            if r.size == 0 || end(r.container_id) > 1 << 32 || end(r.host_id) > 1 << 32 {
                return bad(format!("range {r:?} is empty or runs past the last id"));
            }
            if r.host_id == 0 {
                return bad("it maps the host's root (id 0) into the pod".into());
            }
        }
        for (i, a) in map.iter().enumerate() {
            for b in &map[i + 1..] {
                let overlap = |x: u32, y: u32| {
                    u64::from(x) < u64::from(y) + u64::from(b.size)
                        && u64::from(y) < u64::from(x) + u64::from(a.size)
                };
                if overlap(a.container_id, b.container_id) || overlap(a.host_id, b.host_id) {
                    return bad(format!("ranges {a:?} and {b:?} overlap"));
                }
            }
        }
        if UserNamespace::to_host(map, 0).is_none() {
            return bad("it does not map the pod's root (id 0)".into());
        }
    }
    Ok(())
}

/// What a pod's own user namespace rules out, as kubelet documents it: the host's network,
/// PID and IPC namespaces, whose owner is the host's user namespace.
pub fn check_pod(name: &str, spec: &PodSpec) -> Result<()> {
    if spec.userns.is_none() {
        return Ok(());
    }
    let refuse = |what: &str| {
        Err(Error::Invalid(format!(
            "pod {name}: a pod with its own user namespace cannot use {what}"
        )))
    };
    if spec.network == NetworkMode::Host {
        return refuse("the host's network namespace (host network)");
    }
    if spec.host_pid {
        return refuse("the host's PID namespace (host PID)");
    }
    if spec.host_ipc {
        return refuse("the host's IPC namespace (host IPC)");
    }
    Ok(())
}

/// Where a pod's namespaces are pinned.
pub struct Pins<'a> {
    /// The user namespace's pin.
    pub user: &'a Path,
    /// The IPC namespace's (None: the host's IPC namespace, refused with a user namespace
    /// before this point, or none asked).
    pub ipc: Option<&'a Path>,
    /// The UTS namespace's.
    pub uts: &'a Path,
}

/// Make pod's user namespace with the maps of `ns` and, owned by it, new UTS (with
/// `hostname`), IPC (when pinned) and network (when `net`) namespaces; pin the user, UTS
/// and IPC namespaces at `pins`. Returns a handle on the network namespace to pin where
/// the network code wants it (while the handle lives).
///
/// Only a process can enter a user namespace, and the engine may have threads: a child
/// cloned into the new namespaces holds them while this process writes its maps and
/// binds its namespace files, then exits. The child makes nothing but raw system calls
/// (no allocation, no lock), and closes every inherited file first, the pod's lock among
/// them, so that a killed engine leaves no process holding it.
pub fn create_namespaces(
    ns: &UserNamespace,
    pins: &Pins<'_>,
    hostname: &str,
    net: bool,
) -> Result<Option<PinnedNet>> {
    let host =
        CString::new(hostname).map_err(|_| Error::Invalid(format!("hostname {hostname:?}")))?;
    let (read_end, write_end) =
        rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC).map_err(|e| Error::Os {
            what: "make a pipe for the user namespace's helper".into(),
            err: e.into(),
        })?;
    let mut flags = libc::CLONE_NEWUSER | libc::CLONE_NEWUTS;
    if pins.ipc.is_some() {
        flags |= libc::CLONE_NEWIPC;
    }
    if net {
        flags |= libc::CLONE_NEWNET;
    }
    let keep = read_end.as_raw_fd();
    // SAFETY: the child runs only async-signal-safe system calls on memory prepared before
    // the clone (close_range, sethostname, read, _exit), so the engine's other threads,
    // absent in the child, cannot leave it a held lock.
    let forked = unsafe { wharf_runtime::sys::clone_process(flags as u64, None) }.map_err(|e| {
        Error::Os {
            what: "clone a process into the pod's new user namespace".into(),
            err: e,
        }
    })?;
    let (pid, _pidfd) = match forked.0 {
        wharf_runtime::sys::Forked::Child => {
            // SAFETY: raw system calls only, then _exit; see above.
            unsafe {
                if keep > 0 {
                    libc::syscall(libc::SYS_close_range, 0u32, (keep - 1) as u32, 0u32);
                }
                libc::syscall(libc::SYS_close_range, (keep + 1) as u32, u32::MAX, 0u32);
                let code = if libc::sethostname(host.as_ptr(), host.as_bytes().len()) == 0 {
                    0
                } else {
                    1
                };
                // Wait for the parent to be done with our namespaces (EOF), then leave.
                let mut b = 0u8;
                libc::read(keep, (&mut b as *mut u8).cast(), 1);
                libc::_exit(code);
            }
        }
        wharf_runtime::sys::Forked::Parent { pid, pidfd } => (pid, pidfd),
    };
    drop(read_end);
    let done = |write_end: OwnedFd| {
        drop(write_end);
        let mut status = 0;
        // SAFETY: reap our own child (a daemon's reaper may have taken it: then ECHILD).
        unsafe { libc::waitpid(pid, &mut status, 0) };
        status
    };
    let steps = || -> Result<Option<PinnedNet>> {
        write_map(pid, "uid_map", &ns.uid_map)?;
        write_map(pid, "gid_map", &ns.gid_map)?;
        let proc_ns = |name: &str| PathBuf::from(format!("/proc/{pid}/ns/{name}"));
        pin(&proc_ns("user"), pins.user, "user")?;
        pin(&proc_ns("uts"), pins.uts, "UTS")?;
        if let Some(ipc) = pins.ipc {
            pin(&proc_ns("ipc"), ipc, "IPC")?;
        }
        Ok(if net {
            let f = std::fs::File::open(proc_ns("net"))
                .ctx(|| "open the pod's new network namespace".into())?;
            Some(PinnedNet(f.into()))
        } else {
            None
        })
    };
    let out = steps();
    let status = done(write_end);
    let out = out?;
    if libc::WIFEXITED(status) && libc::WEXITSTATUS(status) != 0 {
        return Err(Error::Other(format!(
            "could not set the pod's hostname {hostname:?} in its user namespace"
        )));
    }
    Ok(out)
}

/// Mount a container's root filesystem at `target` for a pod with user namespace `ns`
/// (pinned at `pin`): the image's layers through id-mapped copies, so the pod's root owns
/// what the host's root owns in them, with no chown of a shared layer; the container's own
/// layer given to the pod's root, so what the container writes is stored with the host
/// ids it runs as (overlayfs makes its work files as the host's root, which an id-mapped
/// upper layer could not map).
pub fn mount_rootfs(
    rootfs: &wharf_image::store::Rootfs,
    target: &Path,
    ns: &UserNamespace,
    pin: &Path,
) -> Result<()> {
    let (uid, gid) = ns
        .root()
        .ok_or_else(|| Error::Invalid("the pod's user namespace maps no root".into()))?;
    let userns = std::fs::File::open(pin)
        .ctx(|| format!("open the pod's user namespace {}", pin.display()))?;
    let lowers = rootfs
        .lower_dirs
        .iter()
        .map(|dir| {
            let d = std::fs::File::open(dir).ctx(|| format!("open layer {}", dir.display()))?;
            wharf_runtime::sys::idmapped_tree(d.as_fd(), userns.as_fd(), false).ctx(|| {
                format!(
                    "make an id-mapped view of layer {} (its filesystem must support \
                     id-mapped mounts)",
                    dir.display()
                )
            })
        })
        .collect::<Result<Vec<_>>>()?;
    let upper = &rootfs.upper_dir;
    let meta = std::fs::metadata(upper).ctx(|| format!("inspect {}", upper.display()))?;
    if std::os::unix::fs::MetadataExt::uid(&meta) == 0 {
        std::os::unix::fs::chown(upper, Some(uid), Some(gid))
            .ctx(|| format!("give {} to the pod's root", upper.display()))?;
    }
    wharf_image::snapshot::mount_overlay_from_fds(&lowers, upper, &rootfs.work_dir, target)?;
    Ok(())
}

/// An open network namespace of a pod, to be pinned by the network code.
pub struct PinnedNet(pub OwnedFd);

fn write_map(pid: i32, file: &str, map: &[IdRange]) -> Result<()> {
    let text: String = map
        .iter()
        .map(|r| format!("{} {} {}\n", r.container_id, r.host_id, r.size))
        .collect();
    let path = format!("/proc/{pid}/{file}");
    std::fs::write(&path, text).ctx(|| format!("write the pod's user namespace's {file}"))
}

fn pin(src: &Path, dst: &Path, what: &str) -> Result<()> {
    std::fs::File::create(dst).ctx(|| format!("create namespace pin {}", dst.display()))?;
    let c = |p: &Path| CString::new(p.display().to_string()).unwrap_or_default();
    wharf_runtime::sys::mount(Some(&c(src)), &c(dst), None, libc::MS_BIND, None)
        .ctx(|| format!("pin the pod's {what} namespace at {}", dst.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ns(host: u32, size: u32) -> UserNamespace {
        let r = vec![IdRange {
            container_id: 0,
            host_id: host,
            size,
        }];
        UserNamespace {
            uid_map: r.clone(),
            gid_map: r,
        }
    }

    #[test]
    fn lowest_free_skips_taken_ranges_and_stays_aligned() {
        let s = u64::from(RANGE_SIZE);
        assert_eq!(lowest_free(&[], s), Some(s));
        assert_eq!(lowest_free(&[(s, s)], s), Some(2 * s));
        // A gap of one range between two taken ones is found.
        assert_eq!(lowest_free(&[(s, s), (3 * s, s)], s), Some(2 * s));
        // A foreign range that is not aligned pushes to the next aligned start.
        assert_eq!(lowest_free(&[(s + 10, 5)], s), Some(2 * s));
        // Ranges below the start do not matter.
        assert_eq!(lowest_free(&[(0, 100)], s), Some(s));
        // Nothing left below the last id.
        assert_eq!(lowest_free(&[(s, u64::from(u32::MAX) - s)], s), None);
    }

    #[test]
    fn first_free_id_is_above_the_hosts_ids_and_aligned() {
        let id = first_free_id();
        assert!(id >= u64::from(RANGE_SIZE));
        assert_eq!(id % u64::from(RANGE_SIZE), 0);
    }

    #[test]
    fn validate_refuses_maps_that_expose_the_host_or_miss_root() {
        assert!(validate("p", &ns(65536, 65536)).is_ok());
        let e = validate("p", &ns(0, 65536)).unwrap_err().to_string();
        assert!(e.contains("host's root"), "{e}");
        let mut no_root = ns(65536, 65536);
        no_root.uid_map[0].container_id = 1;
        let e = validate("p", &no_root).unwrap_err().to_string();
        assert!(e.contains("pod p: uid map") && e.contains("root"), "{e}");
        let mut overlap = ns(65536, 65536);
        overlap.gid_map.push(IdRange {
            container_id: 70000,
            host_id: 65540,
            size: 10,
        });
        let e = validate("p", &overlap).unwrap_err().to_string();
        assert!(e.contains("gid map") && e.contains("overlap"), "{e}");
        let e = validate("p", &ns(65536, 0)).unwrap_err().to_string();
        assert!(e.contains("empty"), "{e}");
    }
}
