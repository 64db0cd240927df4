//! Bringing containers back after the machine restarted (`wharf system restore`, run at
//! boot by the `wharf-restore` unit install.sh installs, as podman-restart does): a pod
//! whose sandbox vanished with the reboot (reconciling found it dead) and whose restart
//! policy is `always` or `unless-stopped` gets a new sandbox under the same id, its shim,
//! and its containers started again from their own writable layers, with the same ids,
//! names and logs. An `unless-stopped` container the user had stopped stays down: `stop`
//! leaves a mark in its bundle that `start` takes away. A pod whose containers ran as one
//! plan (`run_pod`: init containers in order, then the app containers; `wharf play`) is
//! handed to its shim as a plan again, after its caller made what else it needs (a
//! played pod's volumes).

use crate::db::{ContainerRow, PodRow};
use crate::engine::Engine;
use crate::error::Result;
use crate::model::{PodState, RestartPolicy};
use crate::paths::Paths;

/// Why `system restore` makes a pod again (its "restored" event).
const RESTORED: &str = "restart policy after a restart of the machine";
/// Why `start` makes a container's pod again.
const STARTED_AGAIN: &str = "container started after a restart of the machine";

/// The mark of a container the user stopped.
const USER_STOPPED: &str = "user-stopped";
/// The mark, in a pod's directory, of a pod whose containers run as one plan.
const PLAN: &str = "plan";

/// Mark pod `id` as run by a plan (best effort: the mark only matters at boot).
pub(crate) fn mark_plan(paths: &Paths, id: &str) {
    let _ = std::fs::write(paths.pod_dir(id).join(PLAN), b"");
}

/// Set or clear the user-stopped mark of container `id` (best effort: the mark only
/// matters at boot, and a bundle that is gone has nothing to restore).
pub(crate) fn mark_user_stopped(paths: &Paths, id: &str, stopped: bool) {
    let p = paths.bundle(id).join(USER_STOPPED);
    if stopped {
        if paths.bundle(id).is_dir() {
            let _ = std::fs::write(p, b"");
        }
    } else {
        let _ = std::fs::remove_file(p);
    }
}

fn user_stopped(paths: &Paths, id: &str) -> bool {
    paths.bundle(id).join(USER_STOPPED).exists()
}

impl Engine {
    /// Restore the pods the last shutdown took down whose restart policy asks for it;
    /// `prepare` runs for each once its sandbox is back, before its containers start.
    /// Returns, per container considered, its name and what happened; a failure of the
    /// whole pod is one entry, named `pod NAME`.
    pub fn restore(
        &self,
        prepare: &dyn Fn(&PodRow) -> Result<()>,
    ) -> Result<Vec<(String, Result<()>)>> {
        let mut out = Vec::new();
        for pod in self.db.pods()? {
            if pod.state != PodState::Dead
                || !matches!(
                    pod.spec.restart,
                    RestartPolicy::Always | RestartPolicy::UnlessStopped
                )
            {
                continue;
            }
            let containers = self.db.containers(Some(&pod.id))?;
            let plan = self.paths.pod_dir(&pod.id).join(PLAN).exists();
            let wanted: Vec<_> = containers
                .iter()
                .filter(|c| {
                    plan || !(pod.spec.restart == RestartPolicy::UnlessStopped
                        && user_stopped(&self.paths, &c.id))
                })
                .collect();
            if wanted.is_empty() {
                continue;
            }
            let revived = self.revive(&pod, RESTORED).and_then(|()| {
                let pod = self.db.find_pod(&pod.id)?;
                prepare(&pod)?;
                Ok(pod)
            });
            let pod = match revived {
                Ok(pod) => pod,
                Err(e) => {
                    out.push((format!("pod {}", pod.name), Err(e)));
                    continue;
                }
            };
            let bundle = |c: &ContainerRow| self.bundle_again(&pod, c);
            if plan {
                // All bundles, then the shim runs the plan as at the first start.
                match wanted
                    .iter()
                    .try_for_each(|c| bundle(c))
                    .and_then(|()| self.run_pod(&pod.id))
                {
                    Ok(()) => out.extend(wanted.iter().map(|c| (c.name.clone(), Ok(())))),
                    Err(e) => out.push((format!("pod {}", pod.name), Err(e))),
                }
                continue;
            }
            for c in wanted {
                let done = bundle(c).and_then(|()| self.start(&c.id, false).map(drop));
                out.push((c.name.clone(), done));
            }
        }
        Ok(out)
    }

    /// A new sandbox for dead pod `pod` (same id, so the same paths), and its shim.
    /// Whether `wharf start` of a container of `pod` may make the pod's sandbox again, as
    /// docker starts a container after the machine restarted: a pod `run` or `create`
    /// made for the container alone (not a played pod's, a CRI pod's or one of `pod
    /// create`, which have owners of their own), dead because its sandbox vanished (the
    /// run directory is gone), not because its shared pid namespace's init exited.
    pub(crate) fn revivable_on_start(&self, pod: &PodRow) -> bool {
        pod.state == PodState::Dead
            && pod.spec.labels.contains_key(crate::model::STANDALONE_LABEL)
            && !self.paths.pod_dir(&pod.id).join(PLAN).exists()
            && !self.paths.pod_run(&pod.id).exists()
    }

    /// `pod`'s sandbox made again for `wharf start` of `row` (see
    /// [`Self::revivable_on_start`]), with the container's bundle and root filesystem, as
    /// `system restore` makes them; the pod as it is now.
    pub(crate) fn revive_for_start(&self, pod: &PodRow, row: &ContainerRow) -> Result<PodRow> {
        self.revive(pod, STARTED_AGAIN)?;
        let pod = self.db.find_pod(&pod.id)?;
        self.bundle_again(&pod, row)?;
        Ok(pod)
    }

    /// A revived pod's container's bundle and root filesystem, from its image and its own
    /// writable layer, written again (what the reboot took from the run directory).
    fn bundle_again(&self, pod: &PodRow, c: &ContainerRow) -> Result<()> {
        let image = self.images.resolve(&c.image_id)?;
        self.write_bundle(pod, c, &image, true)
    }

    /// A dead pod's sandbox made again under its id (its shim, DNS and pid namespace's
    /// init too); `reason` goes into the "restored" event. On error, what was made is
    /// removed and the pod stays dead.
    pub(crate) fn revive(&self, pod: &PodRow, reason: &str) -> Result<()> {
        // A pod removed meanwhile is not made again.
        let (_lock, _) = self.lock_and_read(&pod.id, || self.db.find_pod(&pod.id))?;
        let owner = pod.sandbox.cgroup_owner.as_deref();
        let sb = crate::sandbox::create(&self.setup(), &pod.id, &pod.name, &pod.spec, owner)?;
        let mut row = PodRow {
            sandbox: sb,
            state: PodState::Created,
            ..pod.clone()
        };
        let made = self
            .db
            .transaction(|db| {
                db.update_pod(&row.id, &row.sandbox, row.state)?;
                db.event(
                    "restored",
                    "pod",
                    &row.id,
                    &row.name,
                    serde_json::json!({ "reason": reason }),
                )
            })
            .and_then(|()| self.shim(&row).map(drop))
            .and_then(|()| self.start_dns(&row))
            .and_then(|()| {
                if row.spec.share_pid {
                    self.start_pause(&mut row)
                } else {
                    Ok(())
                }
            })
            .and_then(|()| crate::ledger::save_pod(&self.paths, &row));
        if let Err(e) = made {
            self.shutdown_shim(&row);
            let _ = crate::sandbox::destroy(&self.setup(), &row.id, &row.spec, &row.sandbox);
            let _ = self
                .db
                .transaction(|db| db.update_pod(&pod.id, &pod.sandbox, PodState::Dead));
            return Err(e);
        }
        self.refresh_names_of_networks(&row.spec);
        Ok(())
    }
}
