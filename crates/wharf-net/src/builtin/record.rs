//! Per-pod records of the built-in network (`<state>/pods/<pod>.json`): what was set up
//! for a pod, written before the first change is made, so teardown (also after a crash or
//! a restart) knows what to undo.

use std::io;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::ipnet::IpNet;
use crate::sys;
use crate::types::PortMapping;

/// How far the pod's setup got.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Phase {
    /// Setup in progress (if found at recovery: a crash interrupted it; undo it).
    Attaching,
    /// Setup complete.
    Attached,
}

/// What the built-in network set up for one pod.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PodRecord {
    /// The pod's id.
    pub pod_id: String,
    /// How far setup got.
    pub phase: Phase,
    /// The pod's namespace path.
    pub netns: PathBuf,
    /// Interface name in the pod.
    pub ifname: String,
    /// Host end of the veth pair.
    pub host_veth: String,
    /// Leased addresses with the subnet's prefix length.
    pub ips: Vec<IpNet>,
    /// The pod interface's MAC, once known.
    pub mac: Option<String>,
    /// Host ports forwarded to the pod.
    pub port_mappings: Vec<PortMapping>,
}

/// The record directory of one network.
pub struct Records {
    dir: PathBuf,
}

impl Records {
    /// Records kept in `dir`.
    pub fn new(dir: PathBuf) -> Records {
        Records { dir }
    }

    fn path(&self, pod_id: &str) -> PathBuf {
        self.dir.join(format!("{pod_id}.json"))
    }

    /// The record of `pod_id`, if any. A record that cannot be parsed is an error naming
    /// the file.
    pub fn get(&self, pod_id: &str) -> Result<Option<PodRecord>> {
        read(&self.path(pod_id))
    }

    /// Write (or replace) a record atomically.
    pub fn put(&self, rec: &PodRecord) -> Result<()> {
        let data = serde_json::to_vec(rec).expect("records serialize");
        sys::write_atomic(&self.path(&rec.pod_id), &data, 0o644)
    }

    /// Remove a record, and what a writer killed midway left of it; idempotent. The
    /// caller holds the network's lock.
    pub fn remove(&self, pod_id: &str) -> Result<()> {
        sys::remove_stale_temps(&self.path(pod_id));
        sys::remove_file_if_exists(&self.path(pod_id))
    }

    /// Every readable record (unreadable ones are skipped: a torn write cannot happen, so
    /// only a hand-edited file can be unreadable, and it must not block the network).
    pub fn all(&self) -> Result<Vec<PodRecord>> {
        let entries = match std::fs::read_dir(&self.dir) {
            Ok(e) => e,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(Error::os(format!("read {}", self.dir.display()), e)),
        };
        let mut out = Vec::new();
        for e in entries.flatten() {
            let p = e.path();
            if p.extension().is_some_and(|x| x == "json")
                && let Ok(Some(r)) = read(&p)
            {
                out.push(r);
            }
        }
        out.sort_by(|a, b| a.pod_id.cmp(&b.pod_id));
        Ok(out)
    }
}

fn read(path: &Path) -> Result<Option<PodRecord>> {
    match std::fs::read(path) {
        Ok(data) => serde_json::from_slice(&data)
            .map(Some)
            .map_err(|e| Error::Invalid(format!("corrupt pod record {}: {e}", path.display()))),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(Error::os(format!("read {}", path.display()), e)),
    }
}
