//! Where the engine keeps things.
//!
//! ```text
//! <root>/wharf.db                      metadata store (shared with wharf-image)
//! <root>/wharf.db-events               touched after events are committed (followers watch it)
//! <root>/image/...                     content store, snapshots, name files (wharf-image)
//! <root>/net/{builtin,cni}             network state (wharf-net)
//! <root>/pods/<pod>/pod.json           the pod's row, kept beside the store (ledger)
//! <root>/pods/<pod>/volumes/           a played manifest's volumes
//! <root>/containers/<id>/config.json   the container's OCI bundle (rootfs below is a mount)
//! <root>/containers/<id>/container.json  the container's row (ledger)
//! <root>/containers/<id>/ctr.log       its output (CRI log format)
//! <run>/netns/<pod>                    pinned network namespace (wharf-net)
//! <run>/pods/<pod>/ns/{ipc,uts,pid}    pinned IPC, UTS and (shared) PID namespaces
//! <run>/pods/<pod>/etc/                hosts, resolv.conf, hostname of the pod
//! <run>/pods/<pod>/shim/               the pod shim's state: socket, pid file, exit records
//! <run>/pods/<pod>/shm                 the pod's /dev/shm (tmpfs)
//! <run>/containers/<id>/rootfs         the container's overlay mount
//! <run>/runtime/                       the OCI runtime's state root
//! <run>/locks/<pod>                    the pod's lock (held while a process changes it)
//! <run>/shims.alive                    each live shim's lock on its pod's byte (wharf-shim)
//! <run>/shims.changed/<pod>            a shim wrote new records for the pod (wharf-shim)
//! <run>/shims.claimed/<pod>.<pid>.<n>  such a mark, taken by a listing reading the records
//! ```
//! `<root>` (default /var/lib/wharf) persists across reboots; `<run>` (default /run/wharf) is
//! what only makes sense while the machine is up.
//!
//! `pods/` and `containers/` of both, `<run>/runtime/` and `<root>/image/snapshots/` are
//! marked top of tree (`chattr +T`) where the filesystem has the flag (ext4): each pod's,
//! container's and snapshot's directory then goes to a block group of its own choosing, away
//! from the inodes the ones removed before it freed ([`Paths::spread_per_object_dirs`]).
//!
//! Both are 0700, as runc's and docker's state directories: below them are container root
//! filesystems (setuid binaries and device nodes of any image), bundles with environments,
//! volumes with secrets. Other local users must not reach any of it, whatever the modes
//! further down (mount points are listed in the world-readable /proc/self/mountinfo, so
//! an obscure path is no protection).

use std::path::{Path, PathBuf};

use crate::error::{Context, Result};

/// Create `dir` (and missing parents) owner-only, and tighten an existing one that other
/// users could enter.
pub fn create_private_dir(dir: &Path) -> Result<()> {
    use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .ctx(|| format!("create {}", dir.display()))?;
    let meta = std::fs::metadata(dir).ctx(|| format!("stat {}", dir.display()))?;
    if meta.permissions().mode() & 0o077 != 0 {
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
            .ctx(|| format!("make {} private (0700)", dir.display()))?;
    }
    Ok(())
}

/// Write a file only its owner (root) may read.
pub fn write_private(path: &Path, data: &[u8]) -> Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)
        .ctx(|| format!("create {}", path.display()))?;
    f.write_all(data)
        .ctx(|| format!("write {}", path.display()))
}

/// Default state root.
pub const DEFAULT_ROOT: &str = "/var/lib/wharf";
/// Default run directory.
pub const DEFAULT_RUN: &str = "/run/wharf";

/// The engine's directories.
#[derive(Debug, Clone)]
pub struct Paths {
    /// Persistent state.
    pub root: PathBuf,
    /// Runtime state (tmpfs).
    pub run: PathBuf,
}

impl Paths {
    /// Paths under `root` and `run`.
    pub fn new(root: impl Into<PathBuf>, run: impl Into<PathBuf>) -> Paths {
        Paths {
            root: root.into(),
            run: run.into(),
        }
    }

    /// The metadata store.
    pub fn db(&self) -> PathBuf {
        self.root.join("wharf.db")
    }

    /// A pod's persistent directory.
    pub fn pod_dir(&self, pod: &str) -> PathBuf {
        below(&self.root, &["pods", pod])
    }

    /// A pod's name files (hosts, resolv.conf, hostname). Like the sandbox they belong to,
    /// they do not outlive a reboot, so they live in the runtime directory (a tmpfs).
    pub fn pod_etc(&self, pod: &str) -> PathBuf {
        below(&self.run, &["pods", pod, "etc"])
    }

    /// A pod's shim state directory. Its records describe live processes, so it lives in
    /// the runtime directory (a tmpfs, as CRI-O's exit files and containerd's shim state):
    /// after a reboot its absence says the shim and its processes are gone.
    pub fn shim_dir(&self, pod: &str) -> PathBuf {
        below(&self.run, &["pods", pod, "shim"])
    }

    /// The node's registry of live shims (see [`wharf_shim::liveness`]).
    pub fn shims_alive(&self) -> PathBuf {
        self.run.join(wharf_shim::liveness::FILE)
    }

    /// A pod's runtime directory.
    pub fn pod_run(&self, pod: &str) -> PathBuf {
        below(&self.run, &["pods", pod])
    }

    /// Where pinned network namespaces live.
    pub fn netns_dir(&self) -> PathBuf {
        self.run.join("netns")
    }

    /// A container's bundle directory.
    pub fn bundle(&self, id: &str) -> PathBuf {
        below(&self.root, &["containers", id])
    }

    /// A container's log file.
    pub fn log(&self, id: &str) -> PathBuf {
        below(&self.root, &["containers", id, "ctr.log"])
    }

    /// A container's rootfs mount point.
    pub fn rootfs(&self, id: &str) -> PathBuf {
        below(&self.run, &["containers", id, "rootfs"])
    }

    /// The OCI runtime's state root.
    pub fn runtime_root(&self) -> PathBuf {
        self.run.join("runtime")
    }

    /// Where the pod locks are.
    pub fn locks_dir(&self) -> PathBuf {
        self.run.join("locks")
    }

    /// Make the directories that hold one directory per pod or container (made when
    /// missing) top-of-tree directories, so that ext4 spreads their children over its block
    /// groups instead of packing each next to the last removed one's freed inodes
    /// ([`wharf_sys::fs::mark_top_of_tree`]; the image store marks its snapshots). Best
    /// effort: a hint, refused by filesystems without the flag (a tmpfs /run). Once marked,
    /// a directory costs an open and one ioctl per command.
    pub fn spread_per_object_dirs(&self) {
        for dir in [
            self.root.join("pods"),
            self.root.join("containers"),
            self.run.join("pods"),
            self.run.join("containers"),
        ] {
            if let Err(e) = wharf_sys::fs::mark_top_of_tree(&dir)
                && e.kind() == std::io::ErrorKind::NotFound
                && std::fs::create_dir_all(&dir).is_ok()
            {
                let _ = wharf_sys::fs::mark_top_of_tree(&dir);
            }
        }
        // The OCI runtime's state root (a directory per container) is the runtime's to
        // make, with its own mode: marked once it is there.
        let _ = wharf_sys::fs::mark_top_of_tree(&self.runtime_root());
    }
}

/// A new random id (32 hex digits).
pub fn new_id() -> String {
    let mut buf = [0u8; 16];
    rustix::rand::getrandom(&mut buf, rustix::rand::GetRandomFlags::empty()).expect("getrandom");
    buf.iter().map(|b| format!("{b:02x}")).collect()
}

/// A generated name: `<prefix>-<8 hex>`.
pub fn generated_name(prefix: &str) -> String {
    let base: String = prefix
        .rsplit('/')
        .next()
        .unwrap_or(prefix)
        .split([':', '@'])
        .next()
        .unwrap_or("wharf")
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || *c == '-' || *c == '_')
        .collect();
    let base = if base.is_empty() {
        "wharf".into()
    } else {
        base
    };
    format!("{base}-{}", &new_id()[..8])
}

/// Longest name: room for the names the CRI server makes from Kubernetes metadata (a
/// container's name and attempt with its pod's name, namespace, uid and attempt, each at
/// Kubernetes' own limits).
/// Names as docker accepts them ([`crate::validate::Rule::ObjectName`]).
pub fn valid_name(name: &str) -> bool {
    crate::validate::Rule::ObjectName.allows(name)
}

/// `base` with `parts` below it, made in one allocation. `Path::join` copies and grows the
/// path at each step: a listing of 1000 containers spent 3.3 M instructions (5% of
/// `wharf ps`) in the five joins of each container's bundle and log paths.
fn below(base: &Path, parts: &[&str]) -> PathBuf {
    let len = base.as_os_str().len() + parts.iter().map(|p| p.len() + 1).sum::<usize>();
    let mut path = PathBuf::with_capacity(len);
    path.push(base);
    for part in parts {
        path.push(part);
    }
    path
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The paths made in one allocation are the ones `join` makes, with and without a
    /// trailing slash on the base.
    #[test]
    fn paths_below_a_base_are_what_joins_make() {
        for (root, run) in [("/var/lib/wharf", "/run/wharf"), ("/r/", "/w/")] {
            let p = Paths::new(Path::new(root), Path::new(run));
            let (root, run) = (Path::new(root), Path::new(run));
            assert_eq!(p.bundle("c1"), root.join("containers").join("c1"));
            assert_eq!(p.log("c1"), root.join("containers/c1/ctr.log"));
            assert_eq!(p.rootfs("c1"), run.join("containers/c1/rootfs"));
            assert_eq!(p.pod_dir("p1"), root.join("pods").join("p1"));
            assert_eq!(p.pod_run("p1"), run.join("pods").join("p1"));
            assert_eq!(p.pod_etc("p1"), run.join("pods/p1/etc"));
            assert_eq!(p.shim_dir("p1"), run.join("pods/p1/shim"));
            assert_eq!(
                p.log("c1").as_os_str().len(),
                root.join("containers/c1/ctr.log").as_os_str().len()
            );
        }
    }

    #[test]
    fn names() {
        assert!(valid_name("web-1.x_y"));
        assert!(!valid_name("-web"));
        assert!(!valid_name("a/b"));
        assert!(generated_name("docker.io/library/busybox:latest").starts_with("busybox-"));
        assert_eq!(new_id().len(), 32);
    }

    /// The per-object directories are made where missing and marked where the filesystem
    /// has the flag (ext4, as /var/tmp is here); a tmpfs run directory refuses it quietly.
    #[test]
    fn the_per_object_directories_are_made_and_marked_top_of_tree() {
        let root = tempfile::tempdir_in("/var/tmp").unwrap();
        let run = tempfile::tempdir_in("/dev/shm").unwrap();
        let p = Paths::new(root.path(), run.path());
        p.spread_per_object_dirs();
        let topdir = |d: &Path| {
            let f = std::fs::File::open(d).unwrap();
            rustix::fs::ioctl_getflags(&f).is_ok_and(|fl| fl.contains(rustix::fs::IFlags::TOPDIR))
        };
        let ext4 = rustix::fs::statfs(root.path()).unwrap().f_type as i64 == libc::EXT4_SUPER_MAGIC;
        for d in ["pods", "containers"] {
            assert!(
                root.path().join(d).is_dir() && run.path().join(d).is_dir(),
                "{d} made"
            );
            assert_eq!(
                topdir(&root.path().join(d)),
                ext4,
                "root/{d} marked on ext4"
            );
            assert!(!topdir(&run.path().join(d)), "no such flag on a tmpfs");
        }
        // Again: nothing to do, nothing fails.
        p.spread_per_object_dirs();
        assert_eq!(topdir(&root.path().join("pods")), ext4);
        // The runtime's state root is marked once the runtime has made it (here, a run
        // directory on the root's filesystem, as /run is on hosts without systemd).
        let disk_run = tempfile::tempdir_in("/var/tmp").unwrap();
        let p = Paths::new(root.path(), disk_run.path());
        p.spread_per_object_dirs();
        assert!(!p.runtime_root().exists(), "the runtime's to make");
        std::fs::create_dir(p.runtime_root()).unwrap();
        p.spread_per_object_dirs();
        assert_eq!(topdir(&p.runtime_root()), ext4);
    }
}
