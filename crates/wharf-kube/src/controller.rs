//! Keeping a workload's pods what its kind asks for, one pass at a time ([`reconcile`]), as
//! the Kubernetes controllers do: a Deployment, ReplicaSet or DaemonSet replaces a pod that
//! is gone or ended; a StatefulSet makes `<name>-0`, `<name>-1`, ... in order (each once the
//! one before is ready) and replaces them under the same names; a Job keeps `parallelism`
//! pods running until `completions` succeeded, or fails after `backoffLimit` failures
//! (failed pods and container restarts), re-creating failed pods with a back-off.
//!
//! The pass reads the pods back from the engine (by their [`LABEL_OWNER`] label), so any
//! process can run it: `wharf play` does once to make the first pods, then the workload's
//! controller process (`wharf kube-controller`) every second.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use wharf_engine::error::Result;
use wharf_engine::model::PodState;
use wharf_engine::{Engine, PodFilter};

use crate::workloads::{COMPLETION_INDEX, LABEL_OWNER, Workload, WorkloadKind};
use crate::{Manifest, PlanOptions, PlayPlan, plan_workload_pod, play, play_down, pod_status};

/// Where a workload stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Progress {
    /// Its pods are kept.
    Active,
    /// A Job whose pods all succeeded.
    Complete,
    /// A Job that failed (the reason).
    Failed(String),
}

/// What a controller remembers between passes.
#[derive(Debug, Default)]
pub struct ControllerState {
    /// A Job's failures seen so far, and when the next pod may be made after the last.
    failures: u32,
    next_create: Option<Instant>,
}

/// A pod of the workload as the pass sees it.
struct Seen {
    id: String,
    name: String,
    phase: &'static str,
    ready: bool,
    restarts: u32,
    gone: bool,
    /// An Indexed Job's pod's index.
    index: Option<u32>,
}

/// One pass over workload `w`: remove what ended (not a Job's pods: they are its
/// history), make what is missing with `prepare` (pull policy, network) applied to each
/// plan. Returns lines saying what was done, and where the workload stands.
pub fn reconcile(
    engine: &Engine,
    manifest: &Manifest,
    w: &Workload,
    opts: &PlanOptions,
    state: &mut ControllerState,
    prepare: &mut dyn FnMut(&mut PlayPlan) -> Result<()>,
) -> Result<(Vec<String>, Progress)> {
    let mut done = Vec::new();
    let pods = seen(engine, w)?;
    if let Some(job) = w.job {
        // An Indexed Job counts indexes that succeeded, not pods.
        let succeeded_indexes: BTreeSet<u32> = pods
            .iter()
            .filter(|p| p.phase == "Succeeded")
            .filter_map(|p| p.index)
            .collect();
        let succeeded = if job.indexed {
            succeeded_indexes.len() as u32
        } else {
            pods.iter().filter(|p| p.phase == "Succeeded").count() as u32
        };
        let failed_pods = pods
            .iter()
            .filter(|p| p.phase == "Failed" || p.gone)
            .count() as u32;
        let active: Vec<&Seen> = pods
            .iter()
            .filter(|p| !matches!(p.phase, "Succeeded" | "Failed") && !p.gone)
            .collect();
        let failures = failed_pods + pods.iter().map(|p| p.restarts).sum::<u32>();
        if failures > state.failures {
            // kubelet's back-off for re-creating failed pods: 10 s doubling, up to 6 min.
            let n = failures.min(6);
            state.next_create = Some(Instant::now() + backoff() * 2u32.pow(n - 1));
            state.failures = failures;
        }
        if succeeded >= job.completions {
            return Ok((done, Progress::Complete));
        }
        if failures > job.backoff_limit {
            for p in &active {
                play_down(engine, &p.id, Some(Duration::ZERO))?;
                done.push(format!("pod {} removed: the Job failed", p.name));
            }
            return Ok((
                done,
                Progress::Failed(format!(
                    "BackoffLimitExceeded: Job has reached the specified backoff limit ({} failures, backoffLimit {})",
                    failures, job.backoff_limit
                )),
            ));
        }
        let want = job.parallelism.min(job.completions - succeeded) as usize;
        if active.len() < want && state.next_create.is_none_or(|t| Instant::now() >= t) {
            // The lowest indexes neither done nor running (an Indexed Job's), else 0.
            let busy: BTreeSet<u32> = active.iter().filter_map(|p| p.index).collect();
            let mut free = (0..job.completions)
                .filter(|i| !succeeded_indexes.contains(i) && !busy.contains(i));
            for _ in active.len()..want {
                let index = if job.indexed {
                    match free.next() {
                        Some(i) => i,
                        None => break,
                    }
                } else {
                    0
                };
                let name = w.pod_name(index);
                make(engine, manifest, w, &name, index, opts, prepare)?;
                done.push(format!("pod {name} created"));
            }
        }
        return Ok((done, Progress::Active));
    }
    // Replace what ended: a pod of these kinds should run for ever.
    let mut live = Vec::new();
    for p in pods {
        if p.gone || matches!(p.phase, "Succeeded" | "Failed" | "Unknown") {
            play_down(engine, &p.id, Some(Duration::ZERO))?;
            done.push(format!("pod {} removed: it ended ({})", p.name, p.phase));
        } else {
            live.push(p);
        }
    }
    let want = w.replicas as usize;
    if w.kind == WorkloadKind::StatefulSet {
        for ordinal in 0..w.replicas {
            let name = format!("{}-{ordinal}", w.name);
            match live.iter().find(|p| p.name == name) {
                Some(p) if w.ordered && !p.ready => break,
                Some(_) => continue,
                None => {
                    make(engine, manifest, w, &name, ordinal, opts, prepare)?;
                    done.push(format!("pod {name} created"));
                    if w.ordered {
                        break;
                    }
                }
            }
        }
        // Scaled down: the highest ordinals go.
        for p in &live {
            let ordinal = p
                .name
                .rsplit('-')
                .next()
                .and_then(|o| o.parse::<u32>().ok());
            if ordinal.is_none_or(|o| o >= w.replicas) {
                play_down(engine, &p.id, None)?;
                done.push(format!(
                    "pod {} removed: beyond {} replicas",
                    p.name, w.replicas
                ));
            }
        }
        return Ok((done, Progress::Active));
    }
    for _ in live.len()..want {
        let name = w.pod_name(0);
        make(engine, manifest, w, &name, 0, opts, prepare)?;
        done.push(format!("pod {name} created"));
    }
    for p in live.iter().skip(want) {
        play_down(engine, &p.id, None)?;
        done.push(format!(
            "pod {} removed: beyond {} replicas",
            p.name, w.replicas
        ));
    }
    Ok((done, Progress::Active))
}

/// The back-off before a Job's first re-creation: the shim's restart back-off (kubelet's
/// 10 s, or the one set for tests).
fn backoff() -> Duration {
    let b = wharf_engine::restart_backoff().unwrap_or_default();
    Duration::from_millis(b.initial_ms)
}

/// The workload's pods, oldest first.
fn seen(engine: &Engine, w: &Workload) -> Result<Vec<Seen>> {
    let filter = PodFilter {
        labels: [(LABEL_OWNER.to_string(), w.owner())].into(),
        ..Default::default()
    };
    let mut pods = engine.list_pods(&filter)?;
    pods.sort_by(|a, b| a.row.created_at.cmp(&b.row.created_at));
    let mut out = Vec::new();
    for p in pods {
        let st = pod_status(&p);
        out.push(Seen {
            id: p.row.id.clone(),
            name: p.row.name.clone(),
            phase: st.phase,
            ready: st
                .conditions
                .iter()
                .any(|c| c.kind == "Ready" && c.status == "True"),
            restarts: st
                .init_container_statuses
                .iter()
                .chain(&st.container_statuses)
                .map(|c| c.restart_count)
                .sum(),
            gone: matches!(p.row.state, PodState::Dead | PodState::Stopped),
            index: p
                .row
                .spec
                .labels
                .get(COMPLETION_INDEX)
                .and_then(|i| i.parse().ok()),
        });
    }
    Ok(out)
}

/// Make pod `name` of `w`.
fn make(
    engine: &Engine,
    manifest: &Manifest,
    w: &Workload,
    name: &str,
    ordinal: u32,
    opts: &PlanOptions,
    prepare: &mut dyn FnMut(&mut PlayPlan) -> Result<()>,
) -> Result<()> {
    let mut plan = plan_workload_pod(manifest, w, name, ordinal, opts)?;
    prepare(&mut plan)?;
    play(engine, plan)?;
    Ok(())
}
