//! A pod's status as kubelet reports it and kubectl shows it: the phase, the conditions
//! (Initialized, ContainersReady, Ready), each container's state (waiting with a reason,
//! running, terminated with a reason), readiness and restart count, and kubectl's one-word
//! STATUS column (`Running`, `Init:0/2`, `Init:Error`, `CrashLoopBackOff`, `Completed`).
//! Read from the records the pod's shim keeps, so it is right with no engine running
//! while the shim did the work (restarts, probes, hooks).

use serde::Serialize;
use wharf_engine::PodView;
use wharf_engine::db::PodRow;
use wharf_engine::model::PodState;
use wharf_shim::protocol::{ExitRecord, KubeState, PodPhase, Status};
use wharf_shim::records::{ContainerRecord, StateDir};

use crate::LABEL_CONTAINER_NAME;

/// A pod's status, in the Kubernetes API's shape (`kubectl get pod -o json`'s `status`).
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PodStatus {
    /// Pending, Running, Succeeded, Failed or Unknown.
    pub phase: &'static str,
    /// Why the pod failed, when it did.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// Initialized, ContainersReady and Ready.
    pub conditions: Vec<Condition>,
    /// Init containers (sidecars included), in order.
    pub init_container_statuses: Vec<ContainerStatus>,
    /// App containers, in order.
    pub container_statuses: Vec<ContainerStatus>,
    /// kubectl's STATUS column.
    #[serde(skip)]
    pub summary: String,
    /// kubectl's READY column: ready containers (app containers and sidecars), and all.
    #[serde(skip)]
    pub ready: (usize, usize),
    /// kubectl's RESTARTS column.
    #[serde(skip)]
    pub restarts: u32,
}

/// A pod condition.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Condition {
    #[serde(rename = "type")]
    pub kind: &'static str,
    /// "True" or "False".
    pub status: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<&'static str>,
}

/// A container's status.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ContainerStatus {
    /// The manifest's container name.
    pub name: String,
    /// The engine's container id.
    #[serde(rename = "containerID")]
    pub container_id: String,
    pub ready: bool,
    /// Its startup probe passed (or it has none) and its postStart hook returned.
    pub started: bool,
    pub restart_count: u32,
    pub state: ContainerState,
    /// The run before, when it restarted.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_state: Option<ContainerState>,
    /// The last probe or hook failure.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub probe_failure: Option<String>,
    #[serde(skip)]
    sidecar: bool,
}

/// Waiting, running or terminated, as the Kubernetes API words them.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum ContainerState {
    Waiting {
        reason: String,
        #[serde(skip_serializing_if = "Option::is_none")]
        message: Option<String>,
    },
    #[serde(rename_all = "camelCase")]
    Running {
        #[serde(skip_serializing_if = "Option::is_none")]
        started_at: Option<String>,
    },
    #[serde(rename_all = "camelCase")]
    Terminated {
        exit_code: i32,
        #[serde(skip_serializing_if = "Option::is_none")]
        signal: Option<i32>,
        reason: String,
        #[serde(skip_serializing_if = "Option::is_none")]
        message: Option<String>,
        #[serde(skip_serializing_if = "Option::is_none")]
        started_at: Option<String>,
        finished_at: String,
    },
}

impl ContainerState {
    fn terminated(e: &ExitRecord) -> ContainerState {
        ContainerState::Terminated {
            exit_code: e.exit_code,
            signal: e.signal,
            reason: e.reason.clone(),
            message: e.message.clone(),
            started_at: e.started_at.clone(),
            finished_at: e.finished_at.clone(),
        }
    }
}

/// The status of the pod `view` shows (a container removed meanwhile is shown as not
/// created).
pub fn pod_status(view: &PodView) -> PodStatus {
    if let Some(status) = settled_status(view) {
        return status;
    }
    let records = StateDir::for_reading(&view.row.sandbox.shim_dir);
    let pod_record = records.pod().ok().flatten();
    // App containers not started while init containers are not done (or failed for
    // good) wait for them: PodInitializing, as kubelet says.
    let initializing = view.containers.iter().any(|c| c.2)
        && pod_record
            .as_ref()
            .is_some_and(|p| matches!(p.phase, PodPhase::Initializing | PodPhase::Failed));
    let mut init = Vec::new();
    let mut apps = Vec::new();
    for (id, name, is_init) in &view.containers {
        let spec = view.specs.get(id).map(|s| &**s);
        let short = manifest_name(spec, name);
        let sidecar = spec
            .and_then(|s| s.kube.as_ref())
            .is_some_and(|k| k.sidecar);
        let status = container_status(
            &records,
            id,
            short,
            sidecar,
            !is_init && initializing,
            spec.is_some_and(|s| s.kube.is_some()),
        );
        if *is_init {
            init.push(status);
        } else {
            apps.push(status);
        }
    }
    summarize(
        &view.row,
        pod_record.map(|p| (p.phase, p.failure)),
        init,
        apps,
    )
}

/// The status of a pod whose store is current (see [`PodView::settled`]) and whose
/// containers are plain ones all running since their start: what the records would say,
/// without reading them (a node's listing of a thousand such pods reads no file). None
/// for any other pod: init containers, a kubelet's containers (probes, hooks), a restart
/// (its last state is only in the records), or a container not running.
fn settled_status(view: &PodView) -> Option<PodStatus> {
    if !view.settled || view.containers.is_empty() {
        return None;
    }
    let mut apps = Vec::new();
    for (id, name, is_init) in &view.containers {
        let spec = view.specs.get(id)?;
        let stored = view.stored.get(id)?;
        if *is_init
            || spec.kube.is_some()
            || stored.state != wharf_engine::model::ContainerState::Running
            || stored.restart_count != 0
        {
            return None;
        }
        apps.push(ContainerStatus {
            name: manifest_name(Some(spec), name),
            container_id: id.clone(),
            ready: true,
            started: true,
            restart_count: 0,
            state: ContainerState::Running {
                started_at: stored.started_at.clone(),
            },
            last_state: None,
            probe_failure: None,
            sidecar: false,
        });
    }
    Some(summarize(&view.row, None, Vec::new(), apps))
}

/// A container's name in its manifest (its label), else the engine's name for it.
fn manifest_name(spec: Option<&wharf_engine::model::ContainerSpec>, name: &str) -> String {
    spec.and_then(|s| s.labels.get(LABEL_CONTAINER_NAME).cloned())
        .unwrap_or_else(|| name.to_string())
}

fn container_status(
    records: &StateDir,
    id: &str,
    name: String,
    sidecar: bool,
    pod_initializing: bool,
    has_kube: bool,
) -> ContainerStatus {
    let rec: Option<ContainerRecord> = records.status(id).ok().flatten();
    // The last exit shows only for a container that exited or restarted: a running one,
    // never restarted (every container of a node's listing, as a rule), needs no read.
    let exit = rec
        .as_ref()
        .filter(|r| r.status == Status::Exited || r.restart_count > 0)
        .and_then(|_| records.exit(id).ok().flatten());
    let kube: Option<KubeState> = if has_kube {
        records.kube_state(id).ok().flatten()
    } else {
        None
    };
    let restart_count = rec.as_ref().map_or(0, |r| r.restart_count);
    let last_state = exit
        .as_ref()
        .filter(|_| restart_count > 0)
        .map(ContainerState::terminated);
    let waiting = |reason: &str, message: Option<String>| ContainerState::Waiting {
        reason: reason.into(),
        message,
    };
    let hook_running = kube.as_ref().and_then(|k| k.hook.as_deref()) == Some("PostStart");
    let (state, running) = match (&rec, &exit) {
        (Some(r), Some(e)) if r.status == Status::Exited && r.backing_off => (
            waiting(
                "CrashLoopBackOff",
                Some(format!(
                    "back-off restarting failed container {name}: last exit code {}{}",
                    e.exit_code,
                    // Why it could not run, when it never did (a start error).
                    e.message
                        .as_deref()
                        .map(|m| format!(" ({}: {m})", e.reason))
                        .unwrap_or_default()
                )),
            ),
            false,
        ),
        (Some(r), Some(e)) if r.status == Status::Exited => (ContainerState::terminated(e), false),
        (Some(r), _) if r.status == Status::Running && hook_running => {
            (waiting("ContainerCreating", None), false)
        }
        (Some(r), _) if r.status == Status::Running => (
            ContainerState::Running {
                started_at: r.started_at.clone(),
            },
            true,
        ),
        (Some(r), _) if r.status == Status::Created => (waiting("ContainerCreating", None), false),
        _ if pod_initializing => (waiting("PodInitializing", None), false),
        _ => (waiting("ContainerCreating", None), false),
    };
    let (started, ready) = match &kube {
        Some(k) => (running && k.started, running && k.ready),
        None => (running, running),
    };
    ContainerStatus {
        name,
        container_id: id.to_string(),
        ready,
        started,
        restart_count,
        state,
        last_state,
        probe_failure: kube.and_then(|k| k.last_failure),
        sidecar,
    }
}

fn summarize(
    pod: &PodRow,
    record: Option<(PodPhase, Option<String>)>,
    init: Vec<ContainerStatus>,
    apps: Vec<ContainerStatus>,
) -> PodStatus {
    let (shim_phase, failure) = record.unwrap_or((PodPhase::None, None));
    let init_done = |c: &ContainerStatus| {
        if c.sidecar {
            c.started
        } else {
            matches!(c.state, ContainerState::Terminated { exit_code: 0, .. })
        }
    };
    let initialized = init.iter().all(init_done);
    let counted: Vec<&ContainerStatus> = init.iter().filter(|c| c.sidecar).chain(&apps).collect();
    let ready_n = counted.iter().filter(|c| c.ready).count();
    let containers_ready = initialized && counted.iter().all(|c| c.ready) && !apps.is_empty();
    let ended = |c: &ContainerStatus| matches!(c.state, ContainerState::Terminated { .. });
    let phase = if pod.state == PodState::Dead {
        "Unknown"
    } else if shim_phase == PodPhase::Failed {
        "Failed"
    } else if !initialized {
        "Pending"
    } else if !apps.is_empty() && apps.iter().all(ended) {
        if apps
            .iter()
            .all(|c| matches!(c.state, ContainerState::Terminated { exit_code: 0, .. }))
        {
            "Succeeded"
        } else {
            "Failed"
        }
    } else if apps
        .iter()
        .any(|c| !matches!(c.state, ContainerState::Waiting { ref reason, .. } if reason == "ContainerCreating" || reason == "PodInitializing"))
    {
        "Running"
    } else {
        "Pending"
    };
    let cond = |kind, ok: bool, reason| Condition {
        kind,
        status: if ok { "True" } else { "False" },
        reason: (!ok).then_some(reason),
    };
    let conditions = vec![
        cond("Initialized", initialized, "ContainersNotInitialized"),
        cond("ContainersReady", containers_ready, "ContainersNotReady"),
        cond("Ready", containers_ready, "ContainersNotReady"),
    ];
    let (mut summary, restarts) = kubectl_status(phase, &init, &apps, containers_ready);
    // An evicted pod says so (kubectl shows the pod's reason).
    if failure
        .as_deref()
        .is_some_and(|f| f.starts_with(wharf_shim::protocol::EVICTED))
    {
        summary = wharf_shim::protocol::EVICTED.into();
    }
    PodStatus {
        phase,
        message: failure,
        conditions,
        ready: (ready_n, counted.len()),
        restarts,
        summary,
        init_container_statuses: init,
        container_statuses: apps,
    }
}

/// kubectl's STATUS column and RESTARTS count, by its rules: the first init container not
/// done names the status (`Init:Error`, `Init:CrashLoopBackOff`, `Init:1/2`); otherwise
/// the last app container with a reason does (`CrashLoopBackOff`, `Error`, `Completed`).
fn kubectl_status(
    phase: &str,
    init: &[ContainerStatus],
    apps: &[ContainerStatus],
    ready: bool,
) -> (String, u32) {
    let mut reason = phase.to_string();
    let mut restarts = 0;
    let mut initializing = false;
    for (i, c) in init.iter().enumerate() {
        restarts += c.restart_count;
        if c.sidecar && c.started {
            continue;
        }
        match &c.state {
            ContainerState::Terminated { exit_code: 0, .. } => continue,
            t @ ContainerState::Terminated { .. } => {
                reason = format!("Init:{}", terminated_reason(t));
            }
            ContainerState::Waiting { reason: r, .. }
                if r != "PodInitializing" && r != "ContainerCreating" =>
            {
                reason = format!("Init:{r}");
            }
            _ => reason = format!("Init:{i}/{}", init.len()),
        }
        initializing = true;
        break;
    }
    if initializing {
        return (reason, restarts);
    }
    let mut has_running = false;
    for c in apps.iter().rev() {
        restarts += c.restart_count;
        match &c.state {
            ContainerState::Waiting { reason: r, .. } if !r.is_empty() => reason = r.clone(),
            t @ ContainerState::Terminated { .. } => reason = terminated_reason(t),
            ContainerState::Running { .. } if c.ready => has_running = true,
            _ => {}
        }
    }
    if reason == "Completed" && has_running {
        reason = if ready { "Running" } else { "NotReady" }.into();
    }
    (reason, restarts)
}

/// A terminated container's reason as kubectl words it: the reason, else `Signal:N`,
/// else `ExitCode:N`.
fn terminated_reason(t: &ContainerState) -> String {
    match t {
        ContainerState::Terminated {
            reason,
            signal,
            exit_code,
            ..
        } => {
            if !reason.is_empty() {
                reason.clone()
            } else if let Some(s) = signal {
                format!("Signal:{s}")
            } else {
                format!("ExitCode:{exit_code}")
            }
        }
        _ => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn exited(restart_count: u32, restart_pending: bool, backing_off: bool) -> ContainerState {
        let dir = tempfile::tempdir().unwrap();
        let records = StateDir::new(dir.path());
        std::fs::create_dir_all(records.container("c1")).unwrap();
        let exit = ExitRecord {
            exit_code: 3,
            signal: None,
            started_at: None,
            finished_at: "2026-12-02T00:00:00.000000000Z".into(),
            oom_killed: false,
            reason: "Error".into(),
            message: None,
        };
        records.write_exit("c1", &exit).unwrap();
        let rec = ContainerRecord {
            status: Status::Exited,
            pid: None,
            pid_start_time: None,
            started_at: None,
            restart_count,
            restart_pending,
            backing_off,
        };
        records.write_status("c1", &rec).unwrap();
        container_status(&records, "c1", "setup".into(), false, false, false).state
    }

    fn waiting_reason(state: &ContainerState) -> Option<&str> {
        match state {
            ContainerState::Waiting { reason, .. } => Some(reason),
            _ => None,
        }
    }

    /// kubelet's CrashLoopBackOff is a restart held back by its back-off; until the
    /// immediate first restart happens the container shows its exit, as kubelet's
    /// does, and so does one that will not be restarted.
    #[test]
    fn crash_loop_back_off_only_while_a_back_off_holds_the_restart() {
        assert_eq!(
            waiting_reason(&exited(1, true, true)),
            Some("CrashLoopBackOff")
        );
        for state in [exited(0, true, false), exited(2, false, false)] {
            assert!(
                matches!(state, ContainerState::Terminated { exit_code: 3, .. }),
                "{state:?}"
            );
        }
    }
}
