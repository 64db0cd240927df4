//! Workload controllers: the processes that keep `wharf play`'s workloads (Deployments,
//! ReplicaSets, DaemonSets, StatefulSets, Jobs) as their kinds ask, with no CLI running.
//! What a controller does in its passes is the front end's (it is a subcommand of the
//! wharf binary); how it runs is the engine's, as a pod's shim is:
//!
//! - its record directory, `<root>/kube/workloads/<record>/`, where the front end keeps
//!   what the controller needs (its manifest and options) and the engine
//!   `controller.pid` (`<pid> <start time>`) and `controller.log` (its output);
//! - its process: the wharf binary with the front end's arguments, detached (a process
//!   group of its own, out of the terminal's job control, reparented to init once its
//!   caller exits), in a cgroup of its own, `<cgroup parent>/kube-controller.<record>`: out
//!   of the caller's cgroup, which a login's systemd scope (or the boot unit that runs
//!   `system restore`) would take down with everything in it;
//! - whether it runs (its pid checked by its start time, so a reused pid is no
//!   controller), stopping it, and removing its cgroup and record.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::engine::Engine;
use crate::error::{Context, Result};

/// One workload controller: its record and the process recorded there.
pub struct Controller<'e> {
    engine: &'e Engine,
    dir: PathBuf,
}

/// What starting a controller did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Started {
    /// Its process.
    pub pid: i32,
    /// Why it stays in its caller's cgroup, if it could not be moved to its own (it works
    /// there, as a shim that could not move does).
    pub cgroup_error: Option<String>,
}

impl Engine {
    /// The controller whose record is `<root>/kube/workloads/<record>`.
    pub fn controller(&self, record: &str) -> Controller<'_> {
        Controller {
            engine: self,
            dir: self.controllers_dir().join(record),
        }
    }

    /// Every controller recorded, in the order of their records' names.
    pub fn controllers(&self) -> Vec<Controller<'_>> {
        let Ok(entries) = std::fs::read_dir(self.controllers_dir()) else {
            return Vec::new();
        };
        let mut dirs: Vec<PathBuf> = entries.flatten().map(|e| e.path()).collect();
        dirs.sort();
        dirs.into_iter()
            .map(|dir| Controller { engine: self, dir })
            .collect()
    }

    fn controllers_dir(&self) -> PathBuf {
        self.paths.root.join("kube").join("workloads")
    }
}

impl Controller<'_> {
    /// Its record directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Start its process: the wharf binary with `args`, detached, output to
    /// `controller.log`, in its own cgroup, recorded in `controller.pid`.
    pub fn start(&self, args: &[OsString]) -> Result<Started> {
        use std::os::unix::process::CommandExt;
        let log_path = self.dir.join("controller.log");
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log_path)
            .ctx(|| format!("open {}", log_path.display()))?;
        let out = log
            .try_clone()
            .ctx(|| format!("open {}", log_path.display()))?;
        let bin = self.engine.wharf_bin();
        let child = std::process::Command::new(&bin)
            .args(args)
            .stdin(std::process::Stdio::null())
            .stdout(out)
            .stderr(log)
            .process_group(0)
            .spawn()
            .ctx(|| format!("start {}", bin.display()))?;
        let pid = child.id() as i32;
        let cgroup_error = self
            .cgroup()
            .and_then(|cg| cg.create().and_then(|()| cg.add_pid(pid, false)).err())
            .map(|e| e.to_string());
        let start = wharf_runtime::sys::process_start_time(pid).unwrap_or(0);
        let pid_file = self.dir.join("controller.pid");
        std::fs::write(&pid_file, format!("{pid} {start}\n"))
            .ctx(|| format!("write {}", pid_file.display()))?;
        Ok(Started { pid, cgroup_error })
    }

    /// Whether its process runs.
    pub fn running(&self) -> bool {
        self.recorded().is_some()
    }

    /// The pid and start time of its process, if it runs (and is not a zombie).
    fn recorded(&self) -> Option<(i32, u64)> {
        let text = std::fs::read_to_string(self.dir.join("controller.pid")).ok()?;
        let mut it = text.split_whitespace();
        let pid = it.next()?.parse::<i32>().ok()?;
        let start = it.next()?.parse::<u64>().ok()?;
        wharf_shim::records::process_is(pid, start).then_some((pid, start))
    }

    /// Stop its process, if it runs: SIGTERM (it is gone within a pass), SIGKILL if it is
    /// still there two seconds later.
    pub fn stop(&self) {
        let Some((pid, start)) = self.recorded() else {
            return;
        };
        let alive = || wharf_shim::records::process_is(pid, start);
        let Some(target) = rustix::process::Pid::from_raw(pid) else {
            return;
        };
        // The process the pid file names, checked by its start time.
        let _ = rustix::process::kill_process(target, rustix::process::Signal::TERM);
        for _ in 0..100 {
            if !alive() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = rustix::process::kill_process(target, rustix::process::Signal::KILL);
    }

    /// Remove its cgroup. Last, after its pods: a shim it started sits there until the
    /// shim is idle.
    pub fn remove_cgroup(&self) -> Result<()> {
        match self.cgroup() {
            Some(cg) => Ok(cg.destroy()?),
            None => Ok(()),
        }
    }

    /// Remove its record directory (gone already is fine).
    pub fn remove_record(&self) -> Result<()> {
        match std::fs::remove_dir_all(&self.dir) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            r => r.ctx(|| format!("remove {}", self.dir.display())),
        }
    }

    /// Its cgroup: a leaf of the engine's cgroup parent, as a pod's shim has one in its
    /// pod's (None where the host's cgroups cannot be read).
    fn cgroup(&self) -> Option<wharf_runtime::cgroups::Cgroup> {
        let record = self.dir.file_name()?.to_str()?;
        let layout = wharf_runtime::cgroups::detect().ok()?;
        let path = format!(
            "{}/kube-controller.{record}",
            self.engine.opts.cgroup_parent.trim_end_matches('/')
        );
        wharf_runtime::cgroups::Cgroup::resolve(&layout, Some(Path::new(&path)), record).ok()
    }
}
