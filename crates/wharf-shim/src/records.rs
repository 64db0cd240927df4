//! What the shim keeps on disk, so that an engine started later (or after the shim died)
//! knows what happened without asking it.
//!
//! ```text
//! <state-dir>/shim.sock                       the shim's socket
//! <state-dir>/shim.pid                        "<pid> <start time in clock ticks>\n"
//! <state-dir>/shim.log                        the shim's own warnings and errors
//! <state-dir>/shim.lock                       flock'ed by the shim while it lives
//! <state-dir>/pod.json                        PodRecord: plan phase, failure, minimal init
//! <state-dir>/containers/<id>/spec.json       the ContainerSpec it was created from
//! <state-dir>/containers/<id>/status.json     ContainerRecord: status, pid, restarts
//! <state-dir>/containers/<id>/exit.json       ExitRecord of the last exit
//! <state-dir>/containers/<id>/health.json     HealthState of its health check
//! <state-dir>/containers/<id>/probes.json     KubeState: its probes and hooks
//! <state-dir>/containers/<id>/execs/<exec>.json  ExitRecord of an exec process
//! ```
//!
//! Every file is replaced atomically (a temporary file renamed over it): a reader, the
//! engine after a killed shim included, finds the old record or the new, never a torn one,
//! and an exit record is written before any client hears of the exit. None is synced to
//! the disk. The records live in the runtime directory, which a reboot empties (a tmpfs
//! on hosts that boot systemd), and only a crash of the machine would lose what the page
//! cache holds: a crash that also ends every shim and container, after which the engine
//! (reconcile, and the cleanup after a dead shim, [`crate::reap`]) reads a missing or torn
//! record as absent, as it reads an emptied tmpfs. Where the runtime directory is a plain
//! directory of a disk, the syncs cost without buying anything: 18 of them per `run --rm`,
//! 0.2-0.6 ms each on this project's VM.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize, de::DeserializeOwned};

use crate::error::{Result, ShimError};
use crate::protocol::{ContainerSpec, ExitRecord, HealthState, KubeState, PodPhase, Status};

/// Socket file name.
pub const SOCKET: &str = "shim.sock";
/// Pid file name.
pub const PID_FILE: &str = "shim.pid";
/// The shim's own log.
pub const SHIM_LOG: &str = "shim.log";
/// Flock'ed by the shim for its whole life, taken before anything else (so a shim that is
/// starting up, before its pid file exists, can be told from none).
pub const LOCK_FILE: &str = "shim.lock";
const POD: &str = "pod.json";
const CONTAINERS: &str = "containers";

/// A container's persisted status.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct ContainerRecord {
    /// Status when last written.
    pub status: Status,
    /// Host pid of the init (created or running).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pid: Option<i32>,
    /// Start time of that pid (clock ticks since boot), against pid reuse.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pid_start_time: Option<u64>,
    /// When the current run started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at: Option<String>,
    /// Restarts so far.
    pub restart_count: u32,
    /// Exited, and the restart policy will start it again after the back-off: readers
    /// of the records must not take this exit as final.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub restart_pending: bool,
    /// That restart waits out a back-off (kubelet's CrashLoopBackOff). False for the
    /// immediate first restart: until it happens the container shows as terminated,
    /// as kubelet shows it, not as backing off.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub backing_off: bool,
}

/// The pod's persisted state.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct PodRecord {
    /// Pod id.
    pub pod: String,
    /// Plan phase.
    pub phase: PodPhase,
    /// Why it failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure: Option<String>,
    /// The minimal init: pid and start time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pause: Option<(i32, u64)>,
}

/// Paths of one state directory.
#[derive(Debug, Clone)]
pub struct StateDir {
    root: PathBuf,
    /// The node's registry of live shims and this pod's id: what the shim marks changed
    /// after each record it writes (see [`crate::liveness::mark_changed`]).
    marks: Option<(PathBuf, String)>,
    /// The directory, open, when reads go through it (see [`StateDir::for_reading`]).
    dir: Option<std::sync::Arc<std::os::fd::OwnedFd>>,
}

impl StateDir {
    /// The state directory at `root`.
    pub fn new(root: impl Into<PathBuf>) -> Self {
        StateDir {
            root: root.into(),
            marks: None,
            dir: None,
        }
    }

    /// The state directory at `root`, opened once for the reads that follow: each record
    /// is then opened relative to it, a path of three components or one instead of ten
    /// (a listing of a thousand pods opened two thousand records, and their path walks
    /// were a quarter of `pod ls`). A directory that cannot be opened is read by path.
    pub fn for_reading(root: impl Into<PathBuf>) -> Self {
        use rustix::fs::{Mode, OFlags};
        let mut d = Self::new(root);
        d.dir = rustix::fs::open(
            &d.root,
            OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .ok()
        .map(std::sync::Arc::new);
        d
    }

    /// Record `rel` (a path below the directory), parsed.
    fn read<T: DeserializeOwned>(&self, rel: &Path) -> Result<Option<T>> {
        match &self.dir {
            Some(dir) => read_json_at(dir, rel, &self.root.join(rel)),
            None => read_json(&self.root.join(rel)),
        }
    }

    /// `containers/<id>/<name>`, relative to the directory.
    fn container_record(id: &str, name: &str) -> PathBuf {
        Path::new(CONTAINERS).join(id).join(name)
    }

    /// The shim's own: each record written marks pod `pod`'s records changed beside
    /// `registry`, so that listings read only the records that changed.
    pub fn with_change_marks(mut self, registry: &Path, pod: &str) -> Self {
        self.marks = Some((registry.to_path_buf(), pod.to_string()));
        self
    }

    /// After a record is on disk (never before: a reader that sees the mark must find
    /// the record it marks). A mark that cannot be made is logged: listings would show
    /// the store's state for the pod until it is next named.
    fn mark(&self) {
        if let Some((registry, pod)) = &self.marks
            && let Err(e) = crate::liveness::mark_changed(registry, pod)
        {
            eprintln!("wharf-shim: mark pod {pod} changed: {e}");
        }
    }

    /// Its path.
    pub fn path(&self) -> &Path {
        &self.root
    }

    /// `<root>/containers/<id>`.
    pub fn container(&self, id: &str) -> PathBuf {
        self.root.join(CONTAINERS).join(id)
    }

    /// Ids of every container with a directory, sorted.
    pub fn container_ids(&self) -> Result<Vec<String>> {
        let dir = self.root.join(CONTAINERS);
        let entries = match std::fs::read_dir(&dir) {
            Ok(e) => e,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(ShimError::io(format!("read {}", dir.display()), e)),
        };
        let mut ids: Vec<String> = entries
            .flatten()
            .filter_map(|e| e.file_name().into_string().ok())
            .filter(|n| !n.starts_with('.'))
            .collect();
        ids.sort();
        Ok(ids)
    }

    /// The last exit of container `id`, if recorded.
    pub fn exit(&self, id: &str) -> Result<Option<ExitRecord>> {
        self.read(&Self::container_record(id, "exit.json"))
    }

    /// Record the exit of container `id`.
    pub fn write_exit(&self, id: &str, exit: &ExitRecord) -> Result<()> {
        write_json(&self.container(id).join("exit.json"), exit)?;
        self.mark();
        Ok(())
    }

    /// The exit of exec process `exec_id` of container `id`, if recorded.
    pub fn exec_exit(&self, id: &str, exec_id: &str) -> Result<Option<ExitRecord>> {
        read_json(&self.exec_path(id, exec_id))
    }

    /// Record the exit of an exec process.
    pub fn write_exec_exit(&self, id: &str, exec_id: &str, exit: &ExitRecord) -> Result<()> {
        let path = self.exec_path(id, exec_id);
        if let Some(dir) = path.parent() {
            create_dir(dir)?;
        }
        write_json(&path, exit)
    }

    fn exec_path(&self, id: &str, exec_id: &str) -> PathBuf {
        self.container(id)
            .join("execs")
            .join(format!("{exec_id}.json"))
    }

    /// The health of container `id`, if it has a health check that has begun.
    pub fn health(&self, id: &str) -> Result<Option<HealthState>> {
        self.read(&Self::container_record(id, "health.json"))
    }

    /// Write the health of container `id` (replaced whole).
    pub fn write_health(&self, id: &str, h: &HealthState) -> Result<()> {
        let path = self.container(id).join("health.json");
        let data = serde_json::to_vec(h)
            .map_err(|e| ShimError::Corrupt(format!("serialise {}: {e}", path.display())))?;
        write_record(&path, &data, 0o644)
    }

    /// The probe and hook state of container `id`, if it has probes or hooks and ran.
    pub fn kube_state(&self, id: &str) -> Result<Option<KubeState>> {
        self.read(&Self::container_record(id, "probes.json"))
    }

    /// Write the probe and hook state of container `id` (replaced whole).
    pub fn write_kube_state(&self, id: &str, st: &KubeState) -> Result<()> {
        let path = self.container(id).join("probes.json");
        let data = serde_json::to_vec(st)
            .map_err(|e| ShimError::Corrupt(format!("serialise {}: {e}", path.display())))?;
        write_record(&path, &data, 0o644)
    }

    /// The status record of container `id`.
    pub fn status(&self, id: &str) -> Result<Option<ContainerRecord>> {
        self.read(&Self::container_record(id, "status.json"))
    }

    /// Write the status record of container `id`.
    pub fn write_status(&self, id: &str, rec: &ContainerRecord) -> Result<()> {
        write_json(&self.container(id).join("status.json"), rec)?;
        self.mark();
        Ok(())
    }

    /// The spec container `id` was created from.
    pub fn spec(&self, id: &str) -> Result<Option<ContainerSpec>> {
        self.read(&Self::container_record(id, "spec.json"))
    }

    /// Make the container's directory and store its spec.
    pub fn write_spec(&self, spec: &ContainerSpec) -> Result<()> {
        let dir = self.container(&spec.id);
        create_dir(&dir)?;
        write_json(&dir.join("spec.json"), spec)
    }

    /// Forget container `id`.
    pub fn remove_container(&self, id: &str) -> Result<()> {
        let dir = self.container(id);
        match std::fs::remove_dir_all(&dir) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(ShimError::io(format!("remove {}", dir.display()), e)),
        }
    }

    /// The pod record.
    pub fn pod(&self) -> Result<Option<PodRecord>> {
        self.read(Path::new(POD))
    }

    /// Write the pod record.
    pub fn write_pod(&self, rec: &PodRecord) -> Result<()> {
        write_json(&self.root.join(POD), rec)?;
        self.mark();
        Ok(())
    }

    /// The shim's pid and start time from `shim.pid`.
    pub fn shim_pid(&self) -> Option<(i32, u64)> {
        let text = std::fs::read_to_string(self.root.join(PID_FILE)).ok()?;
        let mut it = text.split_whitespace();
        Some((it.next()?.parse().ok()?, it.next()?.parse().ok()?))
    }

    /// Whether the shim recorded in `shim.pid` still runs (same pid, same start time, not
    /// a zombie).
    pub fn shim_alive(&self) -> bool {
        self.shim_pid()
            .is_some_and(|(pid, start)| process_is(pid, start))
    }
}

/// Whether `pid` is alive and started at `start` (not a reused pid, not a zombie).
pub fn process_is(pid: i32, start: u64) -> bool {
    // One read of /proc/<pid>/stat for both (listings call this once per pod).
    pid > 0
        && wharf_runtime::sys::process_state_and_start(pid)
            .is_some_and(|(state, started)| started == start && !matches!(state, 'Z' | 'X'))
}

/// Create a directory (and parents), mode 0700 for new ones.
pub fn create_dir(dir: &Path) -> Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(|e| ShimError::io(format!("create {}", dir.display()), e))
}

fn read_json<T: DeserializeOwned>(path: &Path) -> Result<Option<T>> {
    parse(std::fs::File::open(path).and_then(read_all), path)
}

/// Record `rel` below the open directory `dir` (`path` names it in errors).
fn read_json_at<T: DeserializeOwned>(
    dir: &std::os::fd::OwnedFd,
    rel: &Path,
    path: &Path,
) -> Result<Option<T>> {
    use rustix::fs::{Mode, OFlags};
    let opened = rustix::fs::openat(dir, rel, OFlags::RDONLY | OFlags::CLOEXEC, Mode::empty())
        .map(std::fs::File::from)
        .map_err(std::io::Error::from);
    parse(opened.and_then(read_all), path)
}

/// All of a record. Records are small: a buffer sized for them, filled by plain reads,
/// saves the size and position lookups `read_to_end` makes on a file (listings read
/// thousands of records).
fn read_all(mut file: std::fs::File) -> std::io::Result<Vec<u8>> {
    use std::io::Read;
    let mut data = vec![0u8; 4096];
    let mut len = 0;
    loop {
        if len == data.len() {
            data.resize(len * 2, 0);
        }
        match file.read(&mut data[len..]) {
            Ok(0) => break,
            Ok(n) => len += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    data.truncate(len);
    Ok(data)
}

/// A record read (or not found) from `path`, parsed.
fn parse<T: DeserializeOwned>(read: std::io::Result<Vec<u8>>, path: &Path) -> Result<Option<T>> {
    match read {
        Ok(data) => serde_json::from_slice(&data)
            .map(Some)
            .map_err(|e| ShimError::Corrupt(format!("{}: {e}", path.display()))),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(ShimError::io(format!("read {}", path.display()), e)),
    }
}

fn write_json<T: Serialize>(path: &Path, value: &T) -> Result<()> {
    let data = serde_json::to_vec(value)
        .map_err(|e| ShimError::Corrupt(format!("serialise {}: {e}", path.display())))?;
    write_record(path, &data, 0o600)
}

/// Replace the record at `path` with `data` atomically, not synced (see the module docs).
pub fn write_record(path: &Path, data: &[u8], mode: u32) -> Result<()> {
    wharf_sys::fs::write_atomic(path, data, mode, wharf_sys::fs::Durability::Rename)
        .map_err(|e| ShimError::io(format!("write {}", path.display()), e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exit_records_round_trip() {
        let t = tempfile::tempdir().unwrap();
        let sd = StateDir::new(t.path());
        assert_eq!(sd.exit("c1").unwrap(), None);
        create_dir(&sd.container("c1")).unwrap();
        let rec = ExitRecord {
            exit_code: 137,
            signal: Some(9),
            started_at: None,
            finished_at: "2026-11-29T21:00:00.000000001Z".into(),
            oom_killed: true,
            reason: "OOMKilled".into(),
            message: None,
        };
        sd.write_exit("c1", &rec).unwrap();
        assert_eq!(sd.exit("c1").unwrap(), Some(rec));
        assert_eq!(sd.container_ids().unwrap(), vec!["c1".to_string()]);
        std::fs::write(sd.container("c1").join("exit.json"), "{").unwrap();
        assert!(matches!(sd.exit("c1"), Err(ShimError::Corrupt(_))));
    }

    #[test]
    fn records_read_through_the_open_directory_match_those_read_by_path() {
        let t = tempfile::tempdir().unwrap();
        let sd = StateDir::new(t.path());
        create_dir(&sd.container("c1")).unwrap();
        let rec = ExitRecord {
            exit_code: 3,
            signal: None,
            started_at: None,
            finished_at: "2026-12-03T21:00:00.000000001Z".into(),
            oom_killed: false,
            reason: "Error".into(),
            message: Some("x".repeat(10_000)),
        };
        sd.write_exit("c1", &rec).unwrap();
        let opened = StateDir::for_reading(t.path());
        assert!(opened.dir.is_some());
        // Larger than the first buffer: read whole.
        assert_eq!(opened.exit("c1").unwrap(), Some(rec));
        assert_eq!(opened.exit("c2").unwrap(), None);
        assert_eq!(opened.pod().unwrap(), None);
        std::fs::write(sd.container("c1").join("exit.json"), "{").unwrap();
        // The error names the record's whole path.
        match opened.exit("c1") {
            Err(ShimError::Corrupt(msg)) => {
                assert!(
                    msg.contains(
                        &t.path()
                            .join("containers/c1/exit.json")
                            .display()
                            .to_string()
                    ),
                    "{msg}"
                )
            }
            other => panic!("{other:?}"),
        }
        // A directory that cannot be opened is read by path (and has nothing).
        let gone = StateDir::for_reading(t.path().join("missing"));
        assert!(gone.dir.is_none());
        assert_eq!(gone.exit("c1").unwrap(), None);
    }

    #[test]
    fn a_dead_or_reused_pid_is_not_the_shim() {
        let t = tempfile::tempdir().unwrap();
        let sd = StateDir::new(t.path());
        assert!(!sd.shim_alive());
        let me = std::process::id() as i32;
        let start = wharf_runtime::sys::process_start_time(me).unwrap();
        std::fs::write(t.path().join(PID_FILE), format!("{me} {start}\n")).unwrap();
        assert!(sd.shim_alive());
        std::fs::write(t.path().join(PID_FILE), format!("{me} {}\n", start + 1)).unwrap();
        assert!(!sd.shim_alive());
    }
}
