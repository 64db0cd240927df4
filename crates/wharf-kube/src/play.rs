//! Carrying out a [`PlayPlan`] (`wharf play`) through the engine's API: the pod, its
//! volumes, its containers, then the pod's shim runs them (init containers in order first),
//! and taking it all down again.

use std::time::Duration;

use wharf_engine::Engine;
use wharf_engine::db::{ContainerRow, PodRow};
use wharf_engine::error::{Error, Result};

use crate::{PlayPlan, create_volumes, save_volumes};

/// What [`play`] created.
#[derive(Debug, Clone)]
pub struct PlayedPod {
    /// The pod.
    pub pod: PodRow,
    /// Its containers, init containers first.
    pub containers: Vec<ContainerRow>,
}

/// Create the plan's pod, volumes and containers and hand them to the pod's shim. The
/// images must be in the store already. When a step fails, everything made so far is
/// removed again and the error names the step.
pub fn play(engine: &Engine, plan: PlayPlan) -> Result<PlayedPod> {
    ensure_new(engine, plan.pod.name.as_deref().unwrap_or_default())?;
    let pod = engine.create_pod(&plan.pod)?;
    match play_in(engine, &pod, &plan) {
        Ok(containers) => Ok(PlayedPod { pod, containers }),
        Err(e) => {
            let _ = engine.remove_pod(&pod.id, true);
            Err(e)
        }
    }
}

fn play_in(engine: &Engine, pod: &PodRow, plan: &PlayPlan) -> Result<Vec<ContainerRow>> {
    let dir = engine.pod_volumes_dir(&pod.id);
    let volumes = create_volumes(&plan.volumes, &dir)?;
    save_volumes(&plan.volumes, &dir)?;
    let mut rows = Vec::new();
    for spec in plan.init_containers.iter().chain(&plan.containers) {
        let mut spec = spec.clone();
        volumes.resolve_mounts(&mut spec)?;
        // A played pod is a local user's, as `wharf run`'s containers are (kubelet's pods
        // come through the CRI, which keeps kubelet's limits).
        if let Some(note) = engine.apply_container_defaults(&mut spec)
            && std::io::IsTerminal::is_terminal(&std::io::stderr())
        {
            eprintln!("wharf: note: {note}");
        }
        rows.push(engine.create_container(&pod.id, &spec)?);
    }
    engine.run_pod(&pod.id)?;
    Ok(rows)
}

/// Refuse to play pod `name` again while it exists (`wharf play` checks every pod of a
/// manifest this way before it makes any).
pub fn ensure_new(engine: &Engine, name: &str) -> Result<()> {
    if engine.pod(name).is_ok() {
        return Err(Error::Exists(format!(
            "pod {name} already exists: take it down first (wharf play --down), or play with --replace"
        )));
    }
    Ok(())
}

/// Stop a pod's containers together within `grace` (each container's own stop timeout
/// when None), then remove them, the pod and its volumes. Idempotent about containers
/// that already exited.
pub fn play_down(engine: &Engine, key: &str, grace: Option<Duration>) -> Result<PodRow> {
    let pod = engine.pod(key)?.row;
    engine.stop_pod(&pod.id, grace)?;
    engine.remove_pod(&pod.id, true)?;
    Ok(pod)
}
