//! The engine's side of the per-pod shim: spawning it with the pod, asking it to create,
//! start, stop, kill and delete containers, attaching, exec, and reading its exit records
//! (which exist on disk even when the shim or the engine is gone).

use std::path::{Path, PathBuf};
use std::time::Duration;

use wharf_shim::protocol::{self as proto, Backoff, StdioSpec};
use wharf_shim::{ShimClient, ShimError};

use crate::db::{ContainerRow, PodRow};
use crate::engine::Engine;
use crate::error::{Error, Result};
use crate::model::{ContainerState, ExitInfo, PodState, RestartPolicy};

impl From<ShimError> for Error {
    fn from(e: ShimError) -> Self {
        use crate::error::ErrorKind as K;
        use proto::ErrorKind as S;
        let kind = match &e {
            ShimError::Remote { kind, .. } => match kind {
                S::NotFound => K::NotFound,
                S::Exists => K::AlreadyExists,
                S::State => K::FailedPrecondition,
                S::Invalid => K::InvalidArgument,
                S::ProgramNotFound => K::ProgramNotFound,
                S::ProgramNotExecutable => K::ProgramNotExecutable,
                S::ShuttingDown => K::Unavailable,
                S::Runtime | S::Version => K::Internal,
            },
            ShimError::NotRunning { .. }
            | ShimError::Timeout { .. }
            | ShimError::Connection { .. }
            | ShimError::Spawn { .. } => K::Unavailable,
            _ => K::Internal,
        };
        let message = match e {
            // The shim's message names the container and the cause already.
            ShimError::Remote { message, .. } => message,
            e => e.to_string(),
        };
        Error::Shim { kind, message }
    }
}

/// How a container's stdio is wired.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StdioMode {
    /// A terminal.
    pub tty: bool,
    /// Stdin kept open for attached clients.
    pub stdin: bool,
}

/// docker's restart back-off: 100 ms, doubling, at most a minute.
const DOCKER_BACKOFF: Backoff = Backoff {
    initial_ms: 100,
    max_ms: 60_000,
    first_immediate: false,
};

pub(crate) fn exit_info(e: &proto::ExitRecord) -> ExitInfo {
    ExitInfo {
        code: e.exit_code,
        signal: e.signal,
        finished_at: e.finished_at.clone(),
        oom_killed: e.oom_killed,
        reason: Some(e.reason.clone()).filter(|r| !r.is_empty()),
        message: e.message.clone(),
    }
}

fn restart(p: RestartPolicy) -> proto::RestartPolicy {
    match p {
        RestartPolicy::Always | RestartPolicy::UnlessStopped => proto::RestartPolicy::Always,
        RestartPolicy::OnFailure => proto::RestartPolicy::OnFailure,
        RestartPolicy::Never => proto::RestartPolicy::Never,
    }
}

impl Engine {
    fn shim_dir(&self, pod: &PodRow) -> PathBuf {
        if pod.sandbox.shim_dir.is_empty() {
            self.paths.shim_dir(&pod.id)
        } else {
            PathBuf::from(&pod.sandbox.shim_dir)
        }
    }

    /// Connect to a shim with the engine's deadline (shortened while reconciling).
    fn connect(&self, dir: &std::path::Path) -> std::result::Result<ShimClient, ShimError> {
        match self
            .shim_deadline_ms
            .load(std::sync::atomic::Ordering::Relaxed)
        {
            0 => ShimClient::connect(dir),
            ms => ShimClient::connect_with_timeout(dir, Duration::from_millis(ms)),
        }
    }

    /// A client of the pod's shim, starting the shim if it is not running.
    pub fn shim(&self, pod: &PodRow) -> Result<ShimClient> {
        let dir = self.shim_dir(pod);
        let records = wharf_shim::records::StateDir::new(&dir);
        if records.shim_alive() {
            match self.connect(&dir) {
                Ok(c) => return Ok(c),
                // Alive but not answering: a second shim for the pod would not help.
                Err(e @ ShimError::Timeout { .. }) => return Err(e.into()),
                // Gone meanwhile: start another.
                Err(_) => {}
            }
        }
        let mut opts = wharf_shim::SpawnOptions::new(&pod.id, &dir, self.paths.runtime_root());
        if let Some(bin) = &self.opts.wharf_bin {
            opts.binary = wharf_shim::shim_binary(bin);
        }
        // `--log-opt max-size=/max-file=`: the shim rotates its containers' logs so.
        opts.log_max_size = pod.spec.log_max_size;
        opts.log_max_files = pod.spec.log_max_files;
        opts.display_name = Some(pod.name.clone());
        opts.alive = Some(self.paths.shims_alive());
        // Out of the caller's cgroup (a login's systemd scope would take it down at
        // logout): a leaf of the pod's, counted with the pod and removed with it, or the
        // leaf beside it that shims of one-container pods share (`sandbox::shim_cgroup`).
        // The shim moves itself once idle; into a systemd scope, the engine moves it once
        // systemd has made the scope (below).
        if !pod.sandbox.cgroup.is_empty() && pod.sandbox.unit.is_none() {
            opts.cgroup = Some(crate::sandbox::shim_cgroup(&pod.sandbox));
        }
        let client = wharf_shim::spawn(&opts)?;
        if let Some(unit) = &pod.sandbox.unit {
            let placed = client
                .ping()
                .map_err(Error::from)
                .and_then(|pid| self.systemd.place_shim(pod, unit, pid as u32).map(|()| pid));
            if let Err(e) = placed {
                // A shim outside its pod's unit would be a pod systemd does not know.
                let _ = client.shutdown();
                return Err(Error::Other(format!(
                    "pod {}: place its shim in {}: {e}",
                    pod.name, unit.scope
                )));
            }
        }
        Ok(client)
    }

    /// The pod's shim if it runs (without starting one). A shim that runs but does not
    /// answer is an error (ShimError::Timeout), not "no shim".
    pub fn running_shim(&self, pod: &PodRow) -> Result<Option<ShimClient>> {
        let dir = self.shim_dir(pod);
        let records = wharf_shim::records::StateDir::new(&dir);
        if !records.shim_alive() {
            return Ok(None);
        }
        match self.connect(&dir) {
            Ok(c) => Ok(Some(c)),
            Err(e @ ShimError::Timeout { .. }) => Err(e.into()),
            Err(_) => Ok(None),
        }
    }

    /// Start the pod's minimal init (shared PID namespace) and record its pid.
    pub(crate) fn start_pause(&self, pod: &mut PodRow) -> Result<()> {
        let shim = self.shim(pod)?;
        let pin = self.paths.pod_run(&pod.id).join("ns/pid");
        let pid = shim.pause_init(&proto::PauseSpec {
            network: pod.sandbox.netns.as_ref().map(PathBuf::from),
            ipc: pod.sandbox.ipcns.as_ref().map(PathBuf::from),
            uts: pod.sandbox.utsns.as_ref().map(PathBuf::from),
            user: pod.sandbox.userns.as_ref().map(PathBuf::from),
            pin_pid: Some(pin.clone()),
        })?;
        pod.sandbox.pause_pid = Some(pid);
        pod.sandbox.pidns = Some(pin.display().to_string());
        self.db.update_pod(&pod.id, &pod.sandbox, pod.state)?;
        Ok(())
    }

    fn shim_spec(
        &self,
        pod: &PodRow,
        row: &ContainerRow,
        stdio: StdioMode,
        backoff: Option<Backoff>,
    ) -> proto::ContainerSpec {
        proto::ContainerSpec {
            id: row.id.clone(),
            bundle: self.paths.bundle(&row.id),
            stdio: StdioSpec {
                terminal: stdio.tty,
                stdin: stdio.stdin,
                log: Some(self.log_path(row)),
            },
            restart: if row.spec.init && !row.spec.kube.as_ref().is_some_and(|k| k.sidecar) {
                // Init containers that fail are retried only under Always/OnFailure.
                restart(match pod.spec.restart {
                    RestartPolicy::Never => RestartPolicy::Never,
                    _ => RestartPolicy::OnFailure,
                })
            } else {
                restart(pod.spec.restart)
            },
            backoff: backoff.unwrap_or_default(),
            init: row.spec.init,
            max_restarts: pod.spec.max_restarts,
            exit_command: if row.spec.auto_remove {
                self.removal_command(&row.id)
            } else {
                Vec::new()
            },
            health: row.spec.health.clone(),
            kube: row.spec.kube.as_deref().cloned().map(|mut k| {
                k.netns = pod.sandbox.netns.as_ref().map(PathBuf::from);
                k.pod_ip = pod
                    .sandbox
                    .ips
                    .first()
                    .map(|ip| ip.split('/').next().unwrap_or(ip).to_string());
                k.helper = Some(self.wharf_bin());
                k
            }),
            sub_paths: self
                .sub_path_stages(&pod.id, &row.id, &row.spec)
                .into_iter()
                .map(|(_, s)| s)
                .collect(),
        }
    }

    /// The wharf binary: the options' or this process's.
    pub(crate) fn wharf_bin(&self) -> PathBuf {
        self.opts
            .wharf_bin
            .clone()
            .or_else(|| std::env::current_exe().ok())
            .unwrap_or_else(|| PathBuf::from("wharf"))
    }

    /// `wharf rm -f -v ID` on this engine's state: what a container's shim runs to remove it
    /// once it has exited for good (the wharf binary is this process's, or the one the
    /// options name; the shim inherits the rest of the environment, as it does the
    /// configuration of the engine that started it).
    fn removal_command(&self, id: &str) -> Vec<String> {
        vec![
            self.wharf_bin().display().to_string(),
            "--root".into(),
            self.paths.root.display().to_string(),
            "--run-dir".into(),
            self.paths.run.display().to_string(),
            "rm".into(),
            "-f".into(),
            // Its anonymous volumes go with it, as with docker's --rm.
            "-v".into(),
            id.to_string(),
        ]
    }

    /// Create a container in its pod's shim (runtime create), ready to start.
    pub fn create_in_shim(
        &self,
        key: &str,
        stdio: StdioMode,
    ) -> Result<(ContainerRow, ShimClient)> {
        let row = self.db.find_container(key)?;
        let mut pod = self.db.find_pod(&row.pod_id)?;
        // After a reboot, docker starts a stopped container again: its own pod's sandbox
        // is made again first.
        if self.revivable_on_start(&pod) {
            pod = self.revive_for_start(&pod, &row)?;
        }
        if pod.state == PodState::Stopped {
            return Err(Error::Precondition(format!(
                "container {}: its pod {} is stopped: nothing runs in it again",
                row.name, pod.name
            )));
        }
        if pod.state == PodState::Dead {
            return Err(Error::Precondition(format!(
                "container {}: its pod {} is dead (its sandbox vanished when the host restarted \
                 or the run directory was emptied, or the init of its shared pid namespace \
                 exited): remove it and run it again",
                row.name, pod.name
            )));
        }
        let shim = self.shim(&pod)?;
        // Containers started one by one are docker's: its restart back-off.
        let backoff = restart_backoff().unwrap_or(DOCKER_BACKOFF);
        let spec = self.shim_spec(&pod, &row, stdio, Some(backoff));
        match shim.create(&spec) {
            Ok(_) => {}
            Err(ShimError::Remote {
                kind: proto::ErrorKind::Exists,
                ..
            }) => match shim.container(&row.id).map(|c| c.status) {
                // Created in the shim by a command that died before starting it: start that.
                Ok(proto::Status::Created) => {}
                // It ran and exited: started again as docker starts an exited container,
                // from its bundle, into the same log.
                Ok(proto::Status::Exited) => {
                    shim.delete(&row.id, false)?;
                    shim.create(&spec)?;
                }
                Ok(proto::Status::Running) => {
                    return Err(Error::Precondition(format!(
                        "container {} is already running",
                        row.name
                    )));
                }
                Ok(_) | Err(_) => {
                    return Err(Error::Precondition(format!(
                        "container {} is in its pod's shim already and cannot be started now",
                        row.name
                    )));
                }
            },
            Err(e) => return Err(by_name(e.into(), &row)),
        }
        crate::hooks::step("container: created in shim");
        Ok((row, shim))
    }

    /// Start a container created with [`Engine::create_in_shim`].
    pub fn start_created(&self, row: &ContainerRow, shim: &ShimClient) -> Result<()> {
        shim.start(&row.id).map_err(|e| by_name(e.into(), row))?;
        crate::hooks::step("container: started in shim");
        let now = wharf_sys::time::now_rfc3339_nano();
        self.db.transaction(|db| {
            db.update_container(
                &row.id,
                ContainerState::Running,
                Some(&now),
                None,
                row.restart_count,
            )?;
            db.event(
                "started",
                "container",
                &row.id,
                &row.name,
                serde_json::json!({}),
            )
        })
    }

    /// Create (in the shim) and start a container.
    pub fn start_container(&self, key: &str, stdio: StdioMode) -> Result<ContainerRow> {
        let (row, shim) = self.create_in_shim(key, stdio)?;
        self.start_created(&row, &shim)?;
        Ok(row)
    }

    /// Run all of a pod's containers through its shim: init containers in order, then the
    /// app containers (the shim keeps doing it, restarts included, without the engine).
    pub fn run_pod(&self, key: &str) -> Result<()> {
        let pod = self.db.find_pod(key)?;
        let shim = self.shim(&pod)?;
        let containers = self.db.containers(Some(&pod.id))?;
        let stdio = |c: &ContainerRow| StdioMode {
            tty: c.spec.tty,
            stdin: c.spec.stdin,
        };
        let plan = proto::PodPlan {
            init: containers
                .iter()
                .filter(|c| c.spec.init)
                .map(|c| self.shim_spec(&pod, c, stdio(c), restart_backoff()))
                .collect(),
            containers: containers
                .iter()
                .filter(|c| !c.spec.init)
                .map(|c| self.shim_spec(&pod, c, stdio(c), restart_backoff()))
                .collect(),
            disk_limits: pod
                .spec
                .disk_limits
                .iter()
                .map(|(name, bytes)| proto::DiskLimit {
                    volume: name.clone(),
                    path: self.pod_volumes_dir(&pod.id).join(name),
                    bytes: *bytes,
                })
                .collect(),
        };
        shim.run_pod(&plan)?;
        crate::restore::mark_plan(&self.paths, &pod.id);
        let now = wharf_sys::time::now_rfc3339_nano();
        self.db.transaction(|db| {
            for c in &containers {
                db.update_container(&c.id, ContainerState::Running, Some(&now), None, 0)?;
                // Handed to the supervisor, which starts them in the plan's order.
                db.event(
                    "started",
                    "container",
                    &c.id,
                    &c.name,
                    serde_json::json!({"pod": pod.name}),
                )?;
            }
            db.update_pod(&pod.id, &pod.sandbox, PodState::Running)?;
            db.event("started", "pod", &pod.id, &pod.name, serde_json::json!({}))
        })
    }

    /// Attach to a container's stdio (or an exec process's).
    pub fn attach(&self, key: &str, exec_id: Option<&str>) -> Result<wharf_shim::Attach> {
        let row = self.db.find_container(key)?;
        Ok(self.shim_of(&row)?.attach(&row.id, exec_id)?)
    }

    /// The running shim of a container's pod (a precondition failure when it is gone).
    pub(crate) fn shim_of(&self, row: &ContainerRow) -> Result<ShimClient> {
        let pod = self.db.find_pod(&row.pod_id)?;
        self.running_shim(&pod)?.ok_or_else(|| {
            Error::Precondition(format!(
                "container {} is not running (its pod's shim is gone)",
                row.name
            ))
        })
    }

    /// Wait for a container to exit; records the exit.
    pub fn wait(&self, key: &str) -> Result<ExitInfo> {
        Ok(self
            .wait_for(key, None)?
            .expect("a wait without deadline ends with an exit"))
    }

    /// Wait at most `timeout` for a container to exit: `None` when it still runs then.
    /// Callers that must notice their own client going away (the Docker API's wait) wait
    /// in such slices rather than holding a thread until a detached container ends.
    pub fn wait_for(&self, key: &str, timeout: Option<Duration>) -> Result<Option<ExitInfo>> {
        let row = self.db.find_container(key)?;
        let pod = self.db.find_pod(&row.pod_id)?;
        let exit = match self.running_shim(&pod)? {
            Some(shim) => {
                let exit = match shim.wait(&row.id, timeout) {
                    Ok(e) => exit_info(&e),
                    Err(ShimError::Timeout { .. }) if timeout.is_some() => return Ok(None),
                    Err(e) => return Err(e.into()),
                };
                // Recorded as final only if the shim will not run it again (a restart
                // policy): the shim's records say which, as for every other reader.
                let now = self.db.find_container(&row.id)?;
                self.refresh(&now)?;
                return Ok(Some(exit));
            }
            // No shim: its record on disk, else what the store recorded (a dead pod's
            // shim records went with its sandbox).
            None => self
                .exit_on_disk(&pod, &row.id)
                .or(row.exit.clone())
                .ok_or_else(|| {
                    Error::Precondition(format!(
                        "container {} is not running and has no exit record",
                        row.name
                    ))
                })?,
        };
        self.record_exit(&row, &exit)?;
        Ok(Some(exit))
    }

    /// The exit record the shim wrote, if any.
    pub fn exit_on_disk(&self, pod: &PodRow, id: &str) -> Option<ExitInfo> {
        let records = wharf_shim::records::StateDir::new(self.shim_dir(pod));
        records.exit(id).ok().flatten().map(|e| exit_info(&e))
    }

    pub(crate) fn record_exit(&self, row: &ContainerRow, exit: &ExitInfo) -> Result<()> {
        if row.state != ContainerState::Exited || row.exit.as_ref() != Some(exit) {
            self.db.transaction(|db| {
                // Checked again inside the (immediate) transaction: another process or
                // thread (an events follower, the daemon) may have recorded this exit
                // since `row` was read, and it is one event, not two.
                // Removed meanwhile by another process: nothing left to record.
                let now = match db.find_container(&row.id) {
                    Ok(c) => c,
                    Err(Error::NotFound { .. }) => return Ok(()),
                    Err(e) => return Err(e),
                };
                if now.state == ContainerState::Exited && now.exit.as_ref() == Some(exit) {
                    return Ok(());
                }
                db.update_container(
                    &row.id,
                    ContainerState::Exited,
                    None,
                    Some(exit),
                    row.restart_count,
                )?;
                let at = &exit.finished_at;
                if exit.oom_killed {
                    db.event_at(
                        at,
                        "oom",
                        "container",
                        &row.id,
                        &row.name,
                        serde_json::json!({}),
                    )?;
                }
                db.event_at(
                    at,
                    "exited",
                    "container",
                    &row.id,
                    &row.name,
                    serde_json::json!({"exitCode": exit.code, "reason": exit.reason}),
                )
            })?;
        }
        Ok(())
    }

    /// Record that the shim restarted a container (its restart policy) since the store
    /// last looked.
    fn record_restarts(
        &self,
        row: &ContainerRow,
        st: &wharf_shim::records::ContainerRecord,
    ) -> Result<()> {
        let started = st.started_at.clone().or(row.started_at.clone());
        self.db.transaction(|db| {
            db.update_container(
                &row.id,
                row.state,
                started.as_deref(),
                row.exit.as_ref(),
                st.restart_count as i64,
            )?;
            db.event_at(
                started
                    .as_deref()
                    .unwrap_or(&wharf_sys::time::now_rfc3339_nano()),
                "restarted",
                "container",
                &row.id,
                &row.name,
                serde_json::json!({"restartCount": st.restart_count}),
            )
        })
    }

    /// The container's current state, from its shim's records (no shim round trip).
    pub fn refresh(&self, row: &ContainerRow) -> Result<ContainerRow> {
        let pod = self.db.find_pod(&row.pod_id)?;
        self.refresh_in(row, &pod, None)
    }

    /// [`Engine::refresh`] with the container's pod at hand (listings read the pods once)
    /// and, for a listing, the shims found alive all at once (a shim holding its lock there
    /// needs no look at its pid).
    pub(crate) fn refresh_in(
        &self,
        row: &ContainerRow,
        pod: &PodRow,
        live: Option<&wharf_shim::liveness::Live>,
    ) -> Result<ContainerRow> {
        let mut row = row.clone();
        if matches!(row.state, ContainerState::Running | ContainerState::Paused) {
            let records = wharf_shim::records::StateDir::new(self.shim_dir(pod));
            let status = records.status(&row.id).ok().flatten();
            if let Some(st) = &status {
                if st.restart_count as i64 > row.restart_count {
                    self.record_restarts(&row, st)?;
                }
                row.restart_count = st.restart_count as i64;
                // The current run's start (a pod plan's containers start after its init
                // containers, restarted ones at each restart).
                if st.started_at.is_some() {
                    row.started_at = st.started_at.clone();
                }
            }
            row.waiting = status
                .as_ref()
                .is_some_and(|s| s.status == proto::Status::Waiting);
            // The exit on disk is final unless the shim is running the container again or
            // will after a back-off.
            let restarting = status
                .as_ref()
                .is_some_and(|s| s.status != proto::Status::Exited || s.restart_pending);
            let exit = self.exit_on_disk(pod, &row.id);
            if restarting
                && status
                    .as_ref()
                    .is_some_and(|s| s.status == proto::Status::Exited)
            {
                // Waiting out a back-off: still the supervisor's, showing its last exit.
                row.restarting = true;
                row.exit = exit.clone();
            }
            if let Some(exit) = exit
                && !restarting
            {
                self.record_exit(&row, &exit)?;
                row.state = ContainerState::Exited;
                row.exit = Some(exit);
            } else if !live.is_some_and(|l| l.holds(&pod.id)) && !records.shim_alive() {
                // Its supervisor is gone and no exit was recorded: reap it.
                self.reap_pod(pod)?;
                return self.db.find_container(&row.id);
            }
        }
        Ok(row)
    }

    /// Send a signal to a container.
    pub fn kill(&self, key: &str, signal: i32) -> Result<()> {
        let row = self.db.find_container(key)?;
        let pod = self.db.find_pod(&row.pod_id)?;
        let shim = self
            .running_shim(&pod)?
            .ok_or_else(|| Error::Precondition(format!("container {} is not running", row.name)))?;
        shim.kill(&row.id, signal, false)?;
        Ok(())
    }

    /// Stop a container: its stop signal, SIGKILL after `timeout`; no restarts.
    pub fn stop(&self, key: &str, timeout: Option<Duration>) -> Result<ExitInfo> {
        let mut exits = self.stop_many(&[key], timeout)?;
        Ok(exits.pop().expect("one container, one exit"))
    }

    /// Stop containers together (each gets its stop signal at once, then SIGKILL after
    /// `timeout` or its own stop timeout) and wait for all of them: stopping a pod takes
    /// one grace period, not one per container.
    pub fn stop_many(&self, keys: &[&str], timeout: Option<Duration>) -> Result<Vec<ExitInfo>> {
        self.stop_containers(keys, timeout, true)
    }

    /// Stop every running container together, as the machine's shutdown does
    /// (`wharf system shutdown`, the stop of the wharf-restore unit): each gets its stop
    /// signal, then SIGKILL after `timeout`. Not the user's stop: the restart policies
    /// (`always`, `unless-stopped`) bring them back at the next boot. Answers each
    /// container's name with its exit, or why it could not be stopped.
    pub fn shutdown(&self, timeout: Option<Duration>) -> Result<Vec<(String, Result<ExitInfo>)>> {
        let running: Vec<ContainerRow> = self
            .db
            .containers(None)?
            .into_iter()
            .filter(|c| matches!(c.state, ContainerState::Running | ContainerState::Paused))
            .collect();
        let ids: Vec<&str> = running.iter().map(|c| c.id.as_str()).collect();
        // All at once: a shutdown takes one grace period. Should that fail (a shim that
        // does not answer), each on its own, so one container does not keep the others up.
        if let Ok(exits) = self.stop_containers(&ids, timeout, false) {
            return Ok(running
                .into_iter()
                .map(|c| c.name)
                .zip(exits.into_iter().map(Ok))
                .collect());
        }
        Ok(running
            .into_iter()
            .map(|c| {
                let exit = self.stop_containers(&[c.id.as_str()], timeout, false);
                (
                    c.name,
                    exit.map(|mut e| e.pop().expect("one container, one exit")),
                )
            })
            .collect())
    }

    /// Stop containers together; `by_user` marks them so that an `unless-stopped` one
    /// stays down at boot.
    fn stop_containers(
        &self,
        keys: &[&str],
        timeout: Option<Duration>,
        by_user: bool,
    ) -> Result<Vec<ExitInfo>> {
        let mut pending = Vec::new();
        for key in keys {
            let row = self.db.find_container(key)?;
            let pod = self.db.find_pod(&row.pod_id)?;
            let Some(shim) = self.running_shim(&pod)? else {
                pending.push((row, None, Duration::ZERO));
                continue;
            };
            let image = self.images.resolve(&row.image_id).ok();
            let signal = image
                .as_ref()
                .map(|i| crate::specgen::stop_signal(&row.spec, &i.config))
                .unwrap_or(libc::SIGTERM);
            let grace = timeout.unwrap_or(Duration::from_secs(row.spec.stop_timeout.unwrap_or(10)));
            shim.stop(&row.id, signal, grace)?;
            pending.push((row, Some(shim), grace));
        }
        let mut exits = Vec::new();
        for (row, shim, grace) in pending {
            let exit = match shim {
                // The shim kills it after `grace`; the margin covers a container that was
                // never started (waiting for init containers), which has no exit to report.
                Some(shim) => match shim.wait(&row.id, Some(grace + Duration::from_secs(5))) {
                    Ok(e) => Some(exit_info(&e)),
                    Err(ShimError::Timeout { .. }) => None,
                    // Part of a pod plan that will never start it (an init container
                    // failed, or the pod is stopping): stopped without having run.
                    Err(ShimError::Remote {
                        kind: proto::ErrorKind::State,
                        ..
                    }) => Some(not_started()),
                    Err(e) => return Err(e.into()),
                },
                None => {
                    let pod = self.db.find_pod(&row.pod_id)?;
                    self.exit_on_disk(&pod, &row.id)
                }
            };
            let exit = match exit {
                Some(e) => e,
                None if matches!(row.state, ContainerState::Created | ContainerState::Unknown) => {
                    // Never ran: nothing to stop.
                    not_started()
                }
                None => {
                    return Err(Error::Precondition(format!(
                        "container {} is not running",
                        row.name
                    )));
                }
            };
            self.record_exit(&row, &exit)?;
            // Stopped by the user: an unless-stopped container stays down at boot.
            if by_user {
                crate::restore::mark_user_stopped(&self.paths, &row.id, true);
            }
            exits.push(exit);
        }
        Ok(exits)
    }

    /// The shim's part of removing a container: delete it in the runtime.
    pub(crate) fn shim_remove(&self, row: &ContainerRow, force: bool) -> Result<()> {
        let pod = self.db.find_pod(&row.pod_id)?;
        if let Some(shim) = self.running_shim(&pod)? {
            match shim.delete(&row.id, force) {
                Ok(()) => {}
                Err(ShimError::Remote {
                    kind: proto::ErrorKind::NotFound,
                    ..
                }) => {}
                Err(e) => return Err(e.into()),
            }
        } else {
            // No shim: make sure nothing of the container survives in the runtime.
            let rt = wharf_runtime::Runtime::new(self.paths.runtime_root());
            match rt.delete(&row.id, true) {
                Ok(()) | Err(wharf_runtime::Error::NotFound(_)) => {}
                Err(e) => return Err(e.into()),
            }
        }
        let _ = wharf_shim::records::StateDir::new(self.shim_dir(&pod)).remove_container(&row.id);
        Ok(())
    }

    /// Record the containers of a pod whose shim died: their exits ("ShimDied" where the
    /// shim left none), and clean up what the runtime still holds.
    pub fn reap_pod(&self, pod: &PodRow) -> Result<()> {
        let (_lock, _) = self.lock_and_read(&pod.id, || self.db.find_pod(&pod.id))?;
        let dir = self.shim_dir(pod);
        let reaped = wharf_shim::reap_dead_shim(&dir, &self.paths.runtime_root())?;
        for r in reaped {
            if let Ok(row) = self.db.find_container(&r.id) {
                self.record_exit(&row, &exit_info(&r.exit))?;
            }
        }
        Ok(())
    }

    /// Stop the pod's shim once its containers are gone.
    pub(crate) fn shutdown_shim(&self, pod: &PodRow) {
        if let Ok(Some(shim)) = self.running_shim(pod) {
            // Watch the shim's pid before asking it to go, so its exit cannot be missed:
            // once it is gone, its pause process and socket are gone too.
            let pidfd = shim_pidfd(&self.shim_dir(pod));
            let _ = shim.shutdown();
            if let Some(fd) = pidfd {
                wait_for_exit(&fd);
            }
        }
    }

    /// The shim state directory of a pod.
    pub fn shim_state_dir(&self, pod: &PodRow) -> PathBuf {
        self.shim_dir(pod)
    }
}

/// A pidfd of the shim whose state directory is `dir`, if the process it recorded still
/// runs and is still that one.
pub(crate) fn shim_pidfd(dir: &Path) -> Option<std::os::fd::OwnedFd> {
    let (pid, start) = wharf_shim::records::StateDir::new(dir).shim_pid()?;
    let fd = rustix::process::Pid::from_raw(pid)
        .and_then(|p| rustix::process::pidfd_open(p, rustix::process::PidfdFlags::empty()).ok())?;
    // Opened before the check: the pid may have been reused between reading the file and
    // opening it.
    wharf_shim::records::process_is(pid, start).then_some(fd)
}

/// Wait up to a second for the process of pidfd `fd` to exit.
pub(crate) fn wait_for_exit(fd: &std::os::fd::OwnedFd) {
    let mut fds = [rustix::event::PollFd::new(fd, rustix::event::PollFlags::IN)];
    let limit = rustix::event::Timespec {
        tv_sec: 1,
        tv_nsec: 0,
    };
    let _ = rustix::event::poll(&mut fds, Some(&limit));
}

/// The shim names a container by its id; the user named it (`create container ID: why`
/// becomes `container NAME: why`).
fn by_name(e: Error, row: &ContainerRow) -> Error {
    match e {
        Error::Shim { kind, message } => {
            let message = message
                .replace(
                    &format!("create container {}: ", row.id),
                    &format!("container {}: ", row.name),
                )
                .replace(
                    &format!("container {}", row.id),
                    &format!("container {}", row.name),
                );
            Error::Shim { kind, message }
        }
        other => other,
    }
}

/// The exit a stop records for a container that never ran.
fn not_started() -> ExitInfo {
    ExitInfo {
        code: 0,
        signal: None,
        finished_at: wharf_sys::time::now_rfc3339_nano(),
        oom_killed: false,
        reason: Some("NotStarted".into()),
        message: None,
    }
}

/// The restart back-off set for tests (WHARF_RESTART_BACKOFF_MS), else None: the default
/// is the caller's (kubelet's for pods run as a plan and for a Job's re-created pods,
/// docker's for single containers).
pub fn restart_backoff() -> Option<Backoff> {
    let ms: u64 = std::env::var("WHARF_RESTART_BACKOFF_MS")
        .ok()?
        .parse()
        .ok()?;
    Some(Backoff {
        initial_ms: ms,
        max_ms: ms.saturating_mul(30),
        first_immediate: false,
    })
}
