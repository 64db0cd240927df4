//! Per-container state under the runtime root: `<root>/<id>/state.json` (what create decided,
//! so every later command, from any process, acts on the same container) and
//! `<root>/<id>/exec.fifo` (present while the container waits for `start`).
//!
//! The status is not stored: it is derived from the kernel each time (is the init pid still
//! the process we started? is the fifo still there? is the cgroup frozen?), so it cannot go
//! stale when a process dies while no runtime command is running.

use std::fmt;
use std::fs::File;
use std::path::{Path, PathBuf};

use oci_spec::runtime::Spec;
use serde::{Deserialize, Serialize};

use crate::cgroups::Cgroup;
use crate::error::{Context, Error, Result, p};

/// The OCI version this runtime implements (reported in state and features).
pub const OCI_VERSION: &str = "1.2.0";

/// Lifecycle status of a container.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    /// create is in progress.
    Creating,
    /// Set up, waiting for start.
    Created,
    /// The user process runs.
    Running,
    /// Frozen by pause.
    Paused,
    /// The init process has exited.
    Stopped,
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Status::Creating => "creating",
            Status::Created => "created",
            Status::Running => "running",
            Status::Paused => "paused",
            Status::Stopped => "stopped",
        })
    }
}

/// What the runtime remembers about a container between commands.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ContainerState {
    /// Container id.
    pub id: String,
    /// Absolute bundle directory.
    pub bundle: PathBuf,
    /// Absolute rootfs directory.
    pub rootfs: PathBuf,
    /// Host pid of the container's init process.
    pub pid: i32,
    /// Start time of the init (clock ticks since boot), to detect pid reuse.
    pub init_start_time: u64,
    /// Creation time, RFC 3339.
    pub created: String,
    /// The configuration the container was created with (exec, update and delete use it;
    /// the bundle may have changed since).
    pub config: Spec,
    /// The container's cgroup directories.
    pub cgroup: Cgroup,
    /// Whether the init's pid namespace is private (if not, delete must kill every process
    /// of the cgroup itself).
    pub private_pid_ns: bool,
    /// When the container has no mount namespace of its own, the one its mounts were made
    /// in: "" for the runtime's own, else the path it joined. Delete unmounts the rootfs
    /// there, since those mounts do not die with the container.
    #[serde(default)]
    pub shared_mount_ns: Option<String>,
}

impl ContainerState {
    /// Derive the current status from the kernel.
    pub fn status(&self, dir: &Path) -> Status {
        if self.pid <= 0 || !self.init_alive() {
            return Status::Stopped;
        }
        if dir.join(FIFO).exists() {
            return Status::Created;
        }
        if self.cgroup.is_frozen() {
            return Status::Paused;
        }
        Status::Running
    }

    /// Whether the recorded init still exists (and is not a zombie or an unrelated process
    /// that reused the pid).
    pub fn init_alive(&self) -> bool {
        match crate::sys::process_start_time(self.pid) {
            Ok(t) if t == self.init_start_time => !matches!(
                crate::sys::process_state(self.pid),
                Some('Z') | Some('X') | None
            ),
            _ => false,
        }
    }

    /// Annotations of the config, for state output.
    pub fn annotations(&self) -> std::collections::HashMap<String, String> {
        self.config.annotations().clone().unwrap_or_default()
    }
}

/// Name of the fifo the init blocks on until `start`.
pub const FIFO: &str = "exec.fifo";
const STATE: &str = "state.json";

/// The runtime root directory: one subdirectory per container.
#[derive(Debug, Clone)]
pub struct Store {
    root: PathBuf,
}

impl Store {
    /// A store at `root` (created on first use, mode 0700).
    pub fn new(root: impl Into<PathBuf>) -> Self {
        Store { root: root.into() }
    }

    /// The root directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Directory of container `id` (the id must have been validated).
    pub fn dir(&self, id: &str) -> PathBuf {
        self.root.join(id)
    }

    /// Reserve `id`: creating its directory is the atomic "name taken" step.
    pub fn reserve(&self, id: &str) -> Result<PathBuf> {
        validate_id(id)?;
        create_private_dir(&self.root)?;
        let dir = self.dir(id);
        match std::fs::create_dir(&dir) {
            Ok(()) => Ok(dir),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                Err(Error::Exists(id.to_string()))
            }
            Err(e) => Err(Error::os(format!("create state directory {}", p(&dir)), e)),
        }
    }

    /// Load container `id`.
    pub fn load(&self, id: &str) -> Result<ContainerState> {
        validate_id(id)?;
        let path = self.dir(id).join(STATE);
        let data = match std::fs::read(&path) {
            Ok(d) => d,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(Error::NotFound(id.to_string()));
            }
            Err(e) => return Err(Error::os(format!("read {}", p(&path)), e)),
        };
        serde_json::from_slice(&data).map_err(|e| Error::CorruptState(format!("{}: {e}", p(&path))))
    }

    /// Write the state atomically (temp file + rename), so a reader never sees half of it.
    pub fn save(&self, state: &ContainerState) -> Result<()> {
        let dir = self.dir(&state.id);
        let data = serde_json::to_vec(state)
            .map_err(|e| Error::Other(format!("serialise state of {}: {e}", state.id)))?;
        write_atomic(&dir.join(STATE), &data)
    }

    /// Remove the container's directory.
    pub fn remove(&self, id: &str) -> Result<()> {
        let dir = self.dir(id);
        match std::fs::remove_dir_all(&dir) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(Error::os(format!("remove state directory {}", p(&dir)), e)),
        }
    }

    /// Ids of all containers with a state file, sorted.
    pub fn ids(&self) -> Result<Vec<String>> {
        let entries = match std::fs::read_dir(&self.root) {
            Ok(e) => e,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(Error::os(format!("read runtime root {}", p(&self.root)), e)),
        };
        let mut ids: Vec<String> = entries
            .flatten()
            .filter(|e| e.path().join(STATE).exists())
            .filter_map(|e| e.file_name().into_string().ok())
            .collect();
        ids.sort();
        Ok(ids)
    }

    /// Take an exclusive lock on the container's directory for the duration of a mutating
    /// command (so `delete` cannot race `start` or another `delete`).
    pub fn lock(&self, id: &str) -> Result<Lock> {
        let dir = self.dir(id);
        let file = File::open(&dir).map_err(|e| {
            if e.kind() == std::io::ErrorKind::NotFound {
                Error::NotFound(id.to_string())
            } else {
                Error::os(format!("open {}", p(&dir)), e)
            }
        })?;
        rustix::fs::flock(&file, rustix::fs::FlockOperation::LockExclusive)
            .ctx(|| format!("lock {}", p(&dir)))?;
        Ok(Lock { _file: file })
    }
}

/// Held while a command mutates a container; released on drop.
pub struct Lock {
    _file: File,
}

/// Container ids as runc accepts them: letters, digits, `_ + - .`, not `.` or `..`.
pub fn validate_id(id: &str) -> Result<()> {
    if id.is_empty() {
        return Err(Error::InvalidId(id.into(), "it is empty"));
    }
    if id == "." || id == ".." {
        return Err(Error::InvalidId(id.into(), "it names a directory"));
    }
    if id.len() > 1024 {
        return Err(Error::InvalidId(id.into(), "it is longer than 1024 bytes"));
    }
    if !id
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b"_+-.".contains(&b))
    {
        return Err(Error::InvalidId(
            id.into(),
            "only letters, digits and _ + - . are allowed",
        ));
    }
    Ok(())
}

fn create_private_dir(dir: &Path) -> Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    match std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
    {
        Ok(()) => Ok(()),
        Err(e) => Err(Error::os(format!("create runtime root {}", p(dir)), e)),
    }
}

/// Write `data` to `path` through a temp file in the same directory and a rename. No fsync:
/// runtime state lives on /run (tmpfs) and means nothing after a reboot; the rename alone
/// guarantees readers see the old file or the new one, never half.
pub fn write_atomic(path: &Path, data: &[u8]) -> Result<()> {
    wharf_sys::fs::write_atomic(path, data, 0o600, wharf_sys::fs::Durability::Rename)
        .map_err(|e| Error::os(format!("write {}", p(path)), e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_follow_runc_rules() {
        assert!(validate_id("abc-1.2_x+y").is_ok());
        for bad in ["", ".", "..", "a/b", "a b", "../x"] {
            assert!(validate_id(bad).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn reserve_is_exclusive() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::new(dir.path().join("root"));
        store.reserve("c1").unwrap();
        assert!(matches!(store.reserve("c1"), Err(Error::Exists(_))));
        assert!(matches!(store.load("c1"), Err(Error::NotFound(_))));
        assert!(store.ids().unwrap().is_empty());
    }
}
