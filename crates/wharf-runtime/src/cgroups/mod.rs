//! cgroups v1, v2 and the hybrid layout behind one interface (the cgroupfs driver).
//!
//! A container's cgroup is a set of directories, one per mounted hierarchy: on a pure v2 host
//! a single one under the cgroup2 mount; on v1 one per controller (cpu, memory, ...); on a
//! hybrid host the v1 ones plus the cgroup2 mount (/sys/fs/cgroup/unified), which carries the
//! controllers no v1 hierarchy took, if any (route.rs decides where each setting goes). The
//! set of directories is computed once at create time and stored in state.json, so every
//! later command acts on exactly what was created.
//!
//! Settings (`linux.resources`) are written by one module per controller; every failure
//! names the setting and the file. [`Cgroup::stats`] reads usage in runc's `events` format,
//! [`Cgroup::oom_watcher`] reports OOM kills.

mod blkio;
mod cpu;
pub mod devices;
mod files;
mod hugetlb;
pub(crate) mod layout;
mod limits;
mod memory;
mod network;
mod oom;
mod pids;
mod rdma;
mod resources;
mod route;
pub mod stats;
mod unified;

pub use blkio::blkio_weight_to_io_weight;
pub use cpu::shares_to_weight;
pub use hugetlb::page_sizes as hugepage_sizes;
pub use layout::{Layout, detect};
pub use limits::Limits;
pub use oom::{OomUpdate, OomWatcher};
pub use resources::{
    apply as apply_resources, merge as merge_resources, update as update_resources,
};
pub use stats::Stats;

use std::collections::BTreeMap;
use std::io;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::error::{Context, Error, Result, p};

/// Key of the unified (cgroup2) hierarchy in [`Cgroup::paths`].
pub const UNIFIED: &str = "";

/// A container's cgroup: its directory in each hierarchy.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct Cgroup {
    /// Hierarchy key (a v1 controller name such as "memory" or "name=systemd", or
    /// [`UNIFIED`]) to the absolute directory of this cgroup.
    pub paths: BTreeMap<String, PathBuf>,
    /// True on a pure cgroup v2 host, where the unified hierarchy carries the controllers.
    pub v2: bool,
    /// The cgroup2 mount point, if any (its cgroup.controllers says which controllers the
    /// unified hierarchy carries). Absent in state files of older versions: then detected.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unified_mount: Option<PathBuf>,
}

impl Cgroup {
    /// Resolve a config's `linux.cgroupsPath` as runc's cgroupfs driver does: an absolute
    /// path counts from each hierarchy's root; a relative one (or the container id when the
    /// path is empty) counts from the runtime's own cgroup (on v2, from its parent, which can
    /// hold child cgroups with controllers).
    pub fn resolve(layout: &Layout, cgroups_path: Option<&Path>, id: &str) -> Result<Cgroup> {
        let inner: PathBuf = match cgroups_path {
            Some(p) if !p.as_os_str().is_empty() => clean(p),
            _ => PathBuf::from(id),
        };
        if inner.as_os_str().is_empty() || inner == Path::new("/") {
            return Err(Error::Config(format!(
                "linux.cgroupsPath {:?} names the root cgroup",
                cgroups_path.unwrap_or(Path::new(""))
            )));
        }
        let own = if inner.is_absolute() {
            BTreeMap::new()
        } else {
            layout::own_cgroups()?
        };
        let mut paths = BTreeMap::new();
        for (key, mount) in layout.hierarchies() {
            let base = if inner.is_absolute() {
                PathBuf::from("/")
            } else {
                let mut own_path = own.get(&key).cloned().unwrap_or_else(|| PathBuf::from("/"));
                if key == UNIFIED && layout.is_v2() {
                    own_path = own_path.parent().map(Path::to_path_buf).unwrap_or(own_path);
                }
                own_path
            };
            let full = base.join(&inner);
            paths.insert(key, mount.join(crate::safe_path::relative(&full)));
        }
        Ok(Cgroup {
            paths,
            v2: layout.is_v2(),
            unified_mount: layout.unified.clone(),
        })
    }

    /// Create every directory (with parents). On v1 cpuset, new levels inherit the parent's
    /// cpus and mems, without which no task could join.
    pub fn create(&self) -> Result<()> {
        for (key, dir) in &self.paths {
            if key == "cpuset" {
                create_cpuset(dir)?;
            } else {
                std::fs::create_dir_all(dir).ctx(|| format!("create cgroup {}", p(dir)))?;
            }
        }
        // On v2 every controller the root offers is enabled down to the container, as runc
        // does; on a hybrid host only what a setting needs, when it needs it (route.rs).
        if self.v2
            && let (Some(dir), Some(root)) = (self.paths.get(UNIFIED), &self.unified_mount)
        {
            for c in self.unified_controllers() {
                // A parent holding processes cannot delegate (EBUSY); settings that need the
                // controller then fail with a message that says so.
                let _ = route::enable_in_ancestors(root, dir, &c);
            }
        }
        Ok(())
    }

    /// Create the last directory of each hierarchy, below parents that must exist already:
    /// `Ok(false)`, with nothing made, where one does not. For a process that moves itself
    /// into a cgroup of its own below one that someone else removes (a pod's shim, once
    /// idle, below its pod's, which the engine removes with the pod): creating the whole
    /// path, as [`Cgroup::create`] does, made a removed pod's cgroup again, and it stayed
    /// behind once the shim had exited.
    pub fn create_leaf(&self) -> Result<bool> {
        if !self
            .paths
            .values()
            .all(|d| d.parent().is_some_and(Path::is_dir))
        {
            return Ok(false);
        }
        for (key, dir) in &self.paths {
            let cpuset = key == "cpuset";
            match make_dir(dir, cpuset) {
                Ok(()) => {}
                // The parent went meanwhile: what was made below it goes with it.
                Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(false),
                Err(e) => return Err(Error::os(format!("create cgroup {}", p(dir)), e)),
            }
            if cpuset {
                fill_cpuset(dir)?;
            }
        }
        Ok(true)
    }

    /// The unified directory opened for clone3's CLONE_INTO_CGROUP.
    pub fn unified_fd(&self) -> Option<OwnedFd> {
        let dir = self.paths.get(UNIFIED)?;
        rustix::fs::open(
            dir,
            rustix::fs::OFlags::RDONLY
                | rustix::fs::OFlags::DIRECTORY
                | rustix::fs::OFlags::CLOEXEC,
            rustix::fs::Mode::empty(),
        )
        .ok()
    }

    /// Move `pid` into every hierarchy (except the unified one when `skip_unified`, because
    /// clone3 already placed it there).
    pub fn add_pid(&self, pid: i32, skip_unified: bool) -> Result<()> {
        for (key, dir) in &self.paths {
            if skip_unified && key == UNIFIED {
                continue;
            }
            let procs = dir.join("cgroup.procs");
            std::fs::write(&procs, pid.to_string())
                .ctx(|| format!("add pid {pid} to cgroup {}", p(dir)))?;
        }
        Ok(())
    }

    /// Move `pid` into the unified hierarchy only (the v1 ones are joined by the process
    /// itself, see [`Cgroup::join_self_v1`]).
    pub fn add_pid_unified(&self, pid: i32) -> Result<()> {
        match self.paths.get(UNIFIED) {
            Some(dir) => std::fs::write(dir.join("cgroup.procs"), pid.to_string())
                .ctx(|| format!("add pid {pid} to cgroup {}", p(dir))),
            None => Ok(()),
        }
    }

    /// Move the calling (single-threaded) process into every v1 hierarchy by writing "0" to
    /// each `tasks` file. A thread that moves itself this way is the one case where the
    /// kernel skips the global threadgroup lock, whose RCU grace period otherwise costs
    /// 5-20 ms per container on a v1 or hybrid host (writing a pid to cgroup.procs). Needs
    /// the host's privileges: callers in a new user namespace use [`Cgroup::add_pid`].
    pub fn join_self_v1(&self) -> Result<()> {
        for (key, dir) in &self.paths {
            if key == UNIFIED {
                continue;
            }
            std::fs::write(dir.join("tasks"), "0").ctx(|| format!("join cgroup {}", p(dir)))?;
        }
        Ok(())
    }

    /// The directory that answers "which processes are in the container": the unified one on
    /// v2, otherwise a v1 controller every container has.
    fn procs_dir(&self) -> Option<&Path> {
        if self.v2 {
            return self.paths.get(UNIFIED).map(PathBuf::as_path);
        }
        ["pids", "freezer", "memory", "cpu", "devices", UNIFIED]
            .iter()
            .find_map(|k| self.paths.get(*k))
            .map(PathBuf::as_path)
    }

    /// Every pid in the cgroup and its descendants.
    pub fn pids(&self) -> Result<Vec<i32>> {
        let mut out = Vec::new();
        if let Some(dir) = self.procs_dir() {
            collect_pids(dir, &mut out).ctx(|| format!("list processes of cgroup {}", p(dir)))?;
        }
        Ok(out)
    }

    /// Send `signal` to every process in the cgroup, frozen first where a freezer exists so
    /// none can fork away in between.
    ///
    /// An empty cgroup is left alone: nothing in it can fork. Freezing waits until every
    /// task the kernel still counts in the cgroup is frozen, and one that is still exiting
    /// counts though `cgroup.procs` no longer lists it: freezing a pod's emptied cgroup
    /// right after its shim had exited took 10-25 ms, the largest step of `run --rm`.
    pub fn signal_all(&self, signal: i32) -> Result<()> {
        if self.pids()?.is_empty() {
            return Ok(());
        }
        let frozen = self.freeze().is_ok();
        let pids = self.pids();
        if let Ok(pids) = &pids {
            for pid in pids {
                // SAFETY: kill(2) with a pid read from the cgroup.
                unsafe { libc::kill(*pid, signal) };
            }
        }
        if frozen {
            self.thaw()?;
        }
        pids.map(|_| ())
    }

    /// Freeze every process (v1 freezer controller, or cgroup.freeze on v2).
    pub fn freeze(&self) -> Result<()> {
        self.set_frozen(true)
    }

    /// Undo [`Cgroup::freeze`].
    pub fn thaw(&self) -> Result<()> {
        self.set_frozen(false)
    }

    fn set_frozen(&self, frozen: bool) -> Result<()> {
        if let Some(dir) = self.paths.get("freezer") {
            let want = if frozen { "FROZEN" } else { "THAWED" };
            let file = dir.join("freezer.state");
            for attempt in 0..1000 {
                std::fs::write(&file, want).ctx(|| format!("write {want} to {}", p(&file)))?;
                let now = std::fs::read_to_string(&file).ctx(|| format!("read {}", p(&file)))?;
                if now.trim() == want {
                    return Ok(());
                }
                std::thread::sleep(Duration::from_micros(100 * (attempt.min(50) + 1)));
            }
            return Err(Error::Other(format!(
                "cgroup {} did not reach {want}",
                p(dir)
            )));
        }
        let Some(dir) = self.paths.get(UNIFIED).filter(|_| self.v2) else {
            return Err(Error::Unsupported(
                "no freezer: neither the v1 freezer controller nor cgroup v2 is available".into(),
            ));
        };
        let file = dir.join("cgroup.freeze");
        std::fs::write(&file, if frozen { "1" } else { "0" })
            .ctx(|| format!("write {}", p(&file)))?;
        let events = dir.join("cgroup.events");
        let want = if frozen { "frozen 1" } else { "frozen 0" };
        for attempt in 0..1000 {
            let text = std::fs::read_to_string(&events).ctx(|| format!("read {}", p(&events)))?;
            if text.lines().any(|l| l == want) {
                return Ok(());
            }
            std::thread::sleep(Duration::from_micros(100 * (attempt.min(50) + 1)));
        }
        Err(Error::Other(format!(
            "cgroup {} did not reach {want}",
            p(dir)
        )))
    }

    /// Whether the cgroup is frozen (the container is paused).
    pub fn is_frozen(&self) -> bool {
        if let Some(dir) = self.paths.get("freezer") {
            return std::fs::read_to_string(dir.join("freezer.state"))
                .is_ok_and(|s| s.trim() == "FROZEN");
        }
        if let Some(dir) = self.paths.get(UNIFIED).filter(|_| self.v2) {
            return std::fs::read_to_string(dir.join("cgroup.freeze"))
                .is_ok_and(|s| s.trim() == "1");
        }
        false
    }

    /// Remove every directory. Processes that are still exiting keep a cgroup busy for a
    /// moment, so EBUSY is retried; a missing directory counts as removed.
    pub fn destroy(&self) -> Result<()> {
        let mut first_err = None;
        for dir in self.paths.values() {
            if let Err(e) = remove_tree(dir) {
                first_err.get_or_insert(Error::os(format!("remove cgroup {}", p(dir)), e));
            }
        }
        first_err.map_or(Ok(()), Err)
    }
}

/// Remove a cgroup directory and any child cgroups below it, deepest first. The common case
/// (no child cgroups, no processes left) is one rmdir; child cgroups are listed only when
/// the kernel says the directory is busy.
fn remove_tree(dir: &Path) -> io::Result<()> {
    let mut delay = Duration::from_millis(1);
    let mut listed = false;
    for _ in 0..12 {
        match std::fs::remove_dir(dir) {
            Ok(()) => return Ok(()),
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
            Err(e) if e.raw_os_error() == Some(libc::EBUSY) => {
                if !listed {
                    // Busy with child cgroups, or with processes still exiting.
                    listed = true;
                    let mut children = false;
                    for entry in std::fs::read_dir(dir)?.flatten() {
                        if entry.file_type().is_ok_and(|t| t.is_dir()) {
                            children = true;
                            remove_tree(&entry.path())?;
                        }
                    }
                    if children {
                        continue;
                    }
                }
                std::thread::sleep(delay);
                delay = (delay * 2).min(Duration::from_millis(200));
            }
            Err(e) => return Err(e),
        }
    }
    std::fs::remove_dir(dir)
}

fn collect_pids(dir: &Path, out: &mut Vec<i32>) -> io::Result<()> {
    match std::fs::read_to_string(dir.join("cgroup.procs")) {
        Ok(text) => out.extend(text.lines().filter_map(|l| l.trim().parse::<i32>().ok())),
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e),
    }
    for entry in std::fs::read_dir(dir)?.flatten() {
        if entry.file_type().is_ok_and(|t| t.is_dir()) {
            collect_pids(&entry.path(), out)?;
        }
    }
    Ok(())
}

/// Whether a v1 cpuset has its CPUs and memory nodes (a new one has neither, and no task
/// may join it until both are set).
fn cpuset_filled(dir: &Path) -> bool {
    ["cpuset.cpus", "cpuset.mems"]
        .iter()
        .all(|f| std::fs::read_to_string(dir.join(f)).is_ok_and(|v| !v.trim().is_empty()))
}

/// Make v1 cpuset `dir` and its missing ancestors, each with its parent's CPUs and memory
/// nodes. A directory that exists but is still empty is filled too: another process may
/// have made it a moment ago and not filled it yet, and a child made below it meanwhile
/// would copy its emptiness (and refuse every task: ENOSPC).
fn create_cpuset(dir: &Path) -> Result<()> {
    if cpuset_filled(dir) {
        return Ok(());
    }
    if let Some(parent) = dir.parent() {
        create_cpuset(parent)?;
    }
    make_dir(dir, true).map_err(|e| Error::os(format!("create cgroup {}", p(dir)), e))?;
    fill_cpuset(dir)
}

/// Make cgroup directory `dir`, whose parent exists; one already there counts as made.
fn make_dir(dir: &Path, cpuset: bool) -> io::Result<()> {
    match std::fs::create_dir(dir) {
        // A new cpuset, before its CPUs are set: a v1 cpuset that balances load makes the
        // kernel rebuild the scheduling domains, walking every cpuset, when its CPUs are set
        // and again when it is removed, under the lock every cgroup mkdir and rmdir takes;
        // with a thousand containers that is most of a start. Balancing within a child
        // changes nothing while the root cpuset balances across all CPUs (the kernel's
        // default), so it is off in ours. Best effort: the write fails only where the file
        // is missing.
        Ok(()) if cpuset => {
            let _ = std::fs::write(dir.join("cpuset.sched_load_balance"), "0");
            Ok(())
        }
        Ok(()) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(()),
        Err(e) => Err(e),
    }
}

/// Give cpuset `dir` its parent's CPUs and memory nodes where it has none.
fn fill_cpuset(dir: &Path) -> Result<()> {
    let parent = dir.parent().unwrap_or(dir);
    for file in ["cpuset.cpus", "cpuset.mems"] {
        let own = std::fs::read_to_string(dir.join(file)).unwrap_or_default();
        if own.trim().is_empty() {
            let value = std::fs::read_to_string(parent.join(file))
                .ctx(|| format!("read {}", p(&parent.join(file))))?;
            std::fs::write(dir.join(file), value.trim())
                .ctx(|| format!("write {}", p(&dir.join(file))))?;
        }
    }
    Ok(())
}

/// Lexically clean a path (`a/./b/../c` -> `a/c`), keeping it absolute if it was, as Go's
/// filepath.Clean does for runc's cgroupsPath.
fn clean(path: &Path) -> PathBuf {
    let abs = crate::safe_path::clean_absolute(path);
    if path.is_absolute() {
        abs
    } else {
        abs.strip_prefix("/").map(Path::to_path_buf).unwrap_or(abs)
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// Panic unless root (tests that use the kernel's cgroup or bpf interfaces).
    pub(crate) fn require_root() {
        // SAFETY: geteuid has no preconditions.
        assert_eq!(unsafe { libc::geteuid() }, 0, "this test needs root");
    }

    #[test]
    fn a_cpuset_made_but_not_yet_filled_by_another_process_is_filled_before_its_child() {
        let t = tempfile::tempdir().unwrap();
        let top = t.path().join("cpuset");
        std::fs::create_dir(&top).unwrap();
        std::fs::write(top.join("cpuset.cpus"), "0-1\n").unwrap();
        std::fs::write(top.join("cpuset.mems"), "0\n").unwrap();
        // Another process has just made the pod's cpuset: the kernel gave it empty files.
        let pod = top.join("pod");
        std::fs::create_dir(&pod).unwrap();
        std::fs::write(pod.join("cpuset.cpus"), "\n").unwrap();
        std::fs::write(pod.join("cpuset.mems"), "\n").unwrap();
        let ctr = pod.join("ctr");
        create_cpuset(&ctr).unwrap();
        for dir in [&pod, &ctr] {
            assert!(cpuset_filled(dir), "{} left empty", dir.display());
            let cpus = std::fs::read_to_string(dir.join("cpuset.cpus")).unwrap();
            assert_eq!(cpus.trim(), "0-1");
        }
    }

    /// A fake pure-v2 cgroup tree under `base`: the root offers the usual controllers, the
    /// container's directory `unified/parent/c` holds `files` (empty). Returns the cgroup
    /// and that directory.
    pub(crate) fn fake_v2(base: &Path, files: &[&str]) -> (Cgroup, PathBuf) {
        let root = base.join("unified");
        let dir = root.join("parent/c");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(
            root.join("cgroup.controllers"),
            "cpuset cpu io memory hugetlb pids rdma misc\n",
        )
        .unwrap();
        for d in [root.clone(), root.join("parent")] {
            std::fs::write(d.join("cgroup.subtree_control"), "").unwrap();
        }
        for f in files {
            std::fs::write(dir.join(f), "").unwrap();
        }
        let cg = Cgroup {
            paths: BTreeMap::from([(UNIFIED.to_string(), dir.clone())]),
            v2: true,
            unified_mount: Some(root),
        };
        (cg, dir)
    }

    /// The writes a fake file received, one per line.
    pub(crate) fn read_lines(dir: &Path, file: &str) -> Vec<String> {
        std::fs::read_to_string(dir.join(file))
            .unwrap()
            .lines()
            .map(str::to_string)
            .collect()
    }

    /// A leaf is made below a parent that exists, never the parent itself: a shim that
    /// joins its pod's cgroup as the pod goes does not bring the pod's cgroup back.
    #[test]
    fn a_leaf_is_made_only_below_an_existing_parent() {
        let t = tempfile::tempdir().unwrap();
        let pod = t.path().join("memory/pod");
        std::fs::create_dir_all(&pod).unwrap();
        let cg = Cgroup {
            paths: BTreeMap::from([
                ("memory".to_string(), pod.join("shim")),
                ("pids".to_string(), t.path().join("pids/pod/shim")),
            ]),
            ..Default::default()
        };
        // The pod's pids cgroup is gone (being removed): nothing is made anywhere.
        assert!(!cg.create_leaf().unwrap());
        assert!(!pod.join("shim").exists() && !t.path().join("pids").exists());
        std::fs::create_dir_all(t.path().join("pids/pod")).unwrap();
        assert!(cg.create_leaf().unwrap());
        assert!(pod.join("shim").is_dir() && t.path().join("pids/pod/shim").is_dir());
        // Again, with the leaves there: nothing to do.
        assert!(cg.create_leaf().unwrap());
    }

    /// Signalling an empty cgroup leaves its freezer alone: there is nothing to signal, and
    /// freezing it waits for tasks that are still exiting.
    #[test]
    fn an_empty_cgroup_is_signalled_without_freezing_it() {
        let t = tempfile::tempdir().unwrap();
        let freezer = t.path().join("freezer/pod");
        let child = freezer.join("ctr");
        std::fs::create_dir_all(&child).unwrap();
        for dir in [&freezer, &child] {
            std::fs::write(dir.join("cgroup.procs"), "").unwrap();
        }
        // Not a state the kernel would show: any write to the file replaces it.
        std::fs::write(freezer.join("freezer.state"), "UNTOUCHED").unwrap();
        let cg = Cgroup {
            paths: BTreeMap::from([("freezer".to_string(), freezer.clone())]),
            ..Default::default()
        };
        cg.signal_all(libc::SIGKILL).unwrap();
        assert_eq!(
            std::fs::read_to_string(freezer.join("freezer.state")).unwrap(),
            "UNTOUCHED"
        );
    }

    #[test]
    fn clean_keeps_inside_root() {
        assert_eq!(clean(Path::new("/a/../../b/./c")), PathBuf::from("/b/c"));
        assert_eq!(clean(Path::new("x/y/..")), PathBuf::from("x"));
    }
}
