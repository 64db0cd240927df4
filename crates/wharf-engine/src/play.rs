//! Carrying out a [`PlayPlan`] (`wharf play`): the pod, its volumes, its containers, then
//! the pod's shim runs them (init containers in order first), and taking it all down again.

use std::net::UdpSocket;
use std::time::Duration;

use crate::db::{ContainerRow, PodRow};
use crate::engine::Engine;
use crate::error::{Error, Result};
use crate::kube::{self, PlayPlan};
use crate::model::{ContainerState, NetworkMode};

/// What `play` created.
#[derive(Debug, Clone)]
pub struct PlayedPod {
    /// The pod.
    pub pod: PodRow,
    /// Its containers, init containers first.
    pub containers: Vec<ContainerRow>,
}

impl Engine {
    /// The directory of a pod's manifest volumes.
    pub fn pod_volumes_dir(&self, pod_id: &str) -> std::path::PathBuf {
        self.paths.pod_dir(pod_id).join("volumes")
    }

    /// Create the plan's pod, volumes and containers and hand them to the pod's shim. The
    /// images must be in the store already. When a step fails, everything made so far is
    /// removed again and the error names the step.
    pub fn play(&self, mut plan: PlayPlan) -> Result<PlayedPod> {
        let name = plan.pod.name.clone().unwrap_or_default();
        if self.db.find_pod(&name).is_ok() {
            return Err(Error::Exists(format!(
                "pod {name} already exists: take it down first (wharf play --down)"
            )));
        }
        let pod = self.create_pod(&plan.pod)?;
        match self.play_in(&pod, &mut plan) {
            Ok(containers) => Ok(PlayedPod { pod, containers }),
            Err(e) => {
                let _ = self.remove_pod(&pod.id, true);
                Err(e)
            }
        }
    }

    fn play_in(&self, pod: &PodRow, plan: &mut PlayPlan) -> Result<Vec<ContainerRow>> {
        let volumes = kube::create_volumes(&plan.volumes, &self.pod_volumes_dir(&pod.id))?;
        if plan.needs_pod_ip {
            let ip = match pod.sandbox.ips.first() {
                Some(ip) => ip.split('/').next().unwrap_or(ip).to_string(),
                None if pod.spec.network == NetworkMode::Host => host_address(),
                None => String::new(),
            };
            plan.set_pod_ip(&ip);
        }
        let mut rows = Vec::new();
        for spec in plan.init_containers.iter().chain(&plan.containers) {
            let mut spec = spec.clone();
            volumes.resolve_mounts(&mut spec)?;
            rows.push(self.create_container(&pod.id, &spec)?);
        }
        self.run_pod(&pod.id)?;
        Ok(rows)
    }

    /// Stop a pod's containers together within `grace` (each container's own stop timeout
    /// when None), then remove them, the pod and its volumes. Idempotent about containers
    /// that already exited.
    pub fn play_down(&self, key: &str, grace: Option<Duration>) -> Result<PodRow> {
        let pod = self.db.find_pod(key)?;
        self.stop_pod(&pod.id, grace)?;
        self.remove_pod(&pod.id, true)?;
        Ok(pod)
    }

    /// Stop every running container of a pod, together.
    pub fn stop_pod(&self, key: &str, grace: Option<Duration>) -> Result<()> {
        let pod = self.db.find_pod(key)?;
        let mut running = Vec::new();
        for c in self.db.containers(Some(&pod.id))? {
            if self.refresh(&c)?.state == ContainerState::Running {
                running.push(c.id);
            }
        }
        let keys: Vec<&str> = running.iter().map(String::as_str).collect();
        self.stop_many(&keys, grace)?;
        Ok(())
    }
}

/// The address this host would use to reach the outside (the pod IP of hostNetwork pods).
/// Connecting a UDP socket sends nothing; without a route it is the loopback address.
fn host_address() -> String {
    UdpSocket::bind("0.0.0.0:0")
        .and_then(|s| {
            s.connect("192.0.2.1:9")?;
            s.local_addr()
        })
        .map(|a| a.ip().to_string())
        .unwrap_or_else(|_| "127.0.0.1".into())
}
