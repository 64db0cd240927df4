//! Every pod's and container's row kept as a file too, next to the state it describes
//! (`<root>/pods/<id>/pod.json`, `<root>/containers/<id>/container.json`), as docker keeps
//! `config.v2.json` beside each container. The store is what the engine reads; these files
//! are what `wharf system repair` rebuilds it from when it is lost or damaged, and what
//! tells an empty store from a lost one when the engine opens.

use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::db::{ContainerRow, PodRow, Sandbox};
use crate::error::Result;
use crate::model::{ContainerSpec, ContainerState, PodSpec};
use crate::paths::Paths;

const POD_FILE: &str = "pod.json";
const CONTAINER_FILE: &str = "container.json";

/// A pod's file: its row but the state (the sandbox and the shim tell that).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PodFile {
    /// Id.
    pub id: String,
    /// Name.
    pub name: String,
    /// Creation time.
    pub created_at: String,
    /// What was asked for.
    pub spec: PodSpec,
    /// What was set up.
    pub sandbox: Sandbox,
}

/// A container's file: its row but the state (the shim's records tell that).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ContainerFile {
    /// Id.
    pub id: String,
    /// Name.
    pub name: String,
    /// Its pod.
    pub pod_id: String,
    /// Creation time.
    pub created_at: String,
    /// What was asked for.
    pub spec: ContainerSpec,
    /// Image id.
    pub image_id: String,
    /// Image name as given.
    pub image_name: String,
}

/// Write the pod's file (owner-only: specs hold environments).
pub fn save_pod(paths: &Paths, pod: &PodRow) -> Result<()> {
    let dir = paths.pod_dir(&pod.id);
    crate::paths::create_private_dir(&dir)?;
    let f = PodFile {
        id: pod.id.clone(),
        name: pod.name.clone(),
        created_at: pod.created_at.clone(),
        spec: (*pod.spec).clone(),
        sandbox: pod.sandbox.clone(),
    };
    crate::paths::write_private(&dir.join(POD_FILE), &serde_json::to_vec(&f).expect("json"))
}

/// Write the container's file into its bundle directory.
pub fn save_container(paths: &Paths, c: &ContainerRow) -> Result<()> {
    let f = ContainerFile {
        id: c.id.clone(),
        name: c.name.clone(),
        pod_id: c.pod_id.clone(),
        created_at: c.created_at.clone(),
        spec: (*c.spec).clone(),
        image_id: c.image_id.clone(),
        image_name: c.image_name.clone(),
    };
    crate::paths::write_private(
        &paths.bundle(&c.id).join(CONTAINER_FILE),
        &serde_json::to_vec(&f).expect("json"),
    )
}

fn load_all<T: for<'de> Deserialize<'de>>(dir: &Path, file: &str) -> (Vec<T>, Vec<String>) {
    let mut ok = Vec::new();
    let mut bad = Vec::new();
    let Ok(rd) = std::fs::read_dir(dir) else {
        return (ok, bad);
    };
    for e in rd.flatten() {
        let path = e.path().join(file);
        match std::fs::read(&path) {
            Ok(b) => match serde_json::from_slice(&b) {
                Ok(v) => ok.push(v),
                Err(err) => bad.push(format!("{}: {err}", path.display())),
            },
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => {
                bad.push(format!("{}: missing", path.display()))
            }
            Err(err) => bad.push(format!("{}: {err}", path.display())),
        }
    }
    (ok, bad)
}

/// Every pod file (and the pod directories whose file is missing or unreadable).
pub fn load_pods(paths: &Paths) -> (Vec<PodFile>, Vec<String>) {
    load_all(&paths.root.join("pods"), POD_FILE)
}

/// Every container file (and the bundle directories whose file is missing or unreadable).
pub fn load_containers(paths: &Paths) -> (Vec<ContainerFile>, Vec<String>) {
    load_all(&paths.root.join("containers"), CONTAINER_FILE)
}

impl PodFile {
    /// The row it describes, in `state`.
    pub fn row(&self, state: crate::model::PodState) -> PodRow {
        PodRow {
            id: self.id.clone(),
            name: self.name.clone(),
            created_at: self.created_at.clone(),
            spec: Box::new(self.spec.clone()),
            sandbox: self.sandbox.clone(),
            state,
        }
    }
}

impl ContainerFile {
    /// The row it describes, as created (reconciling then finds out whether it ran).
    pub fn row(&self) -> ContainerRow {
        ContainerRow {
            id: self.id.clone(),
            name: self.name.clone(),
            pod_id: self.pod_id.clone(),
            created_at: self.created_at.clone(),
            spec: Box::new(self.spec.clone()),
            image_id: self.image_id.clone(),
            image_name: self.image_name.clone(),
            state: ContainerState::Created,
            started_at: None,
            exit: None,
            restart_count: 0,
            restarting: false,
            waiting: false,
        }
    }
}
