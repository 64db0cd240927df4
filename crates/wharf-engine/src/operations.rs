//! The operations front ends ask for, each whole in one method: create a container (in a
//! pod of its own or an existing one), start it (attached or not), exec in it, attach to
//! it, remove it (with the pod made for it), remove a pod with its containers. Failures
//! roll back what the operation made.

use std::time::Duration;

use crate::db::{ContainerRow, PodRow};
use crate::engine::Engine;
use crate::error::{Error, Result};
use crate::exec::ExecRequest;
use crate::model::{ContainerSpec, ContainerState, ExitInfo, PodSpec, PodState, STANDALONE_LABEL};
use crate::session::Session;
use crate::supervisor::{StdioMode, exit_info};

/// The pod a new container goes into.
#[derive(Debug, Clone)]
pub enum PodChoice {
    /// An existing pod (name, id or id prefix).
    Existing(String),
    /// A pod made for the container alone, removed with it (docker's one-container
    /// model: `wharf run` without `--pod`).
    Own(Box<PodSpec>),
}

impl Engine {
    /// Fails with [`Error::NameInUse`] if a container is named `name` (a front end asks
    /// before it pulls an image for nothing).
    pub fn check_container_name(&self, name: &str) -> Result<()> {
        match self.db.find_container(name) {
            Ok(c) if c.name == name => Err(Error::NameInUse {
                kind: "container",
                name: name.to_string(),
                id: c.id,
            }),
            _ => Ok(()),
        }
    }

    /// Create a container (not started) from an image in the store, in the pod `pod`
    /// names or in one made for it. Nothing is left behind if it fails.
    pub fn create(&self, pod: PodChoice, spec: &ContainerSpec) -> Result<ContainerRow> {
        if let Some(name) = &spec.name {
            self.check_container_name(name)?;
        }
        let id = crate::paths::new_id();
        let (pod_id, own) = match pod {
            PodChoice::Existing(key) => (self.db.find_pod(&key)?.id, false),
            PodChoice::Own(pod_spec) => {
                let mut pod_spec = *pod_spec;
                pod_spec
                    .labels
                    .insert(STANDALONE_LABEL.to_string(), "true".to_string());
                (self.create_pod_for(&pod_spec, Some(&id))?.id, true)
            }
        };
        crate::hooks::step("pod created");
        match self.create_container_as(&pod_id, spec, id) {
            Ok(row) => Ok(row),
            Err(e) => {
                if own {
                    let _ = self.remove_pod(&pod_id, true);
                }
                Err(e)
            }
        }
    }

    /// Start a created container; with `attach`, return its session, attached before it
    /// starts so that none of its output is missed. Its pod is left free for other
    /// commands once it runs.
    pub fn start(&self, key: &str, attach: bool) -> Result<(ContainerRow, Option<Session>)> {
        let row = self.db.find_container(key)?;
        crate::restore::mark_user_stopped(&self.paths, &row.id, false);
        let stdio = StdioMode {
            tty: row.spec.tty,
            stdin: row.spec.stdin,
        };
        let started = (|| {
            let (row, shim) = self.create_in_shim(&row.id, stdio)?;
            let stream = attach.then(|| shim.attach(&row.id, None)).transpose()?;
            self.start_created(&row, &shim)?;
            let session = stream.map(|s| {
                Session::new(
                    row.clone(),
                    None,
                    s,
                    stdio.tty,
                    stdio.stdin,
                    shim.state_dir().to_path_buf(),
                )
            });
            Ok((row, session))
        })();
        if let Err(e) = &started {
            self.record_start_error(&row, e);
        }
        // The pod is complete: other processes may work on it (and reconcile it) again.
        self.release_pod_locks();
        started
    }

    /// A container that could not be started keeps its state, and shows why where docker
    /// shows it: State.Error and an exit code (127 not found, 126 not executable, 128
    /// otherwise), a `start-failed` event, and the error in its log. Best effort: the
    /// start's own error is what the caller reports.
    fn record_start_error(&self, row: &ContainerRow, e: &Error) {
        use crate::error::ErrorKind;
        if matches!(
            e.kind(),
            ErrorKind::NotFound | ErrorKind::FailedPrecondition
        ) {
            // Nothing was tried (gone, already running, a stopped pod).
            return;
        }
        let Ok(now) = self.db.find_container(&row.id) else {
            return;
        };
        let message = e.to_string();
        let exit = crate::model::ExitInfo {
            code: match e.kind() {
                ErrorKind::ProgramNotFound => 127,
                ErrorKind::ProgramNotExecutable => 126,
                _ => 128,
            },
            signal: None,
            finished_at: wharf_sys::time::now_rfc3339_nano(),
            oom_killed: false,
            reason: Some("StartError".into()),
            message: Some(message.clone()),
        };
        let _ = self.db.transaction(|db| {
            db.update_container(&row.id, now.state, None, Some(&exit), now.restart_count)?;
            db.event(
                "start-failed",
                "container",
                &row.id,
                &row.name,
                serde_json::json!({ "error": message }),
            )
        });
        if let Ok(mut log) = wharf_shim::logs::LogWriter::open(
            &self.log_path(&now),
            wharf_shim::logs::DEFAULT_MAX_SIZE,
            wharf_shim::logs::DEFAULT_MAX_FILES,
        ) {
            let _ = log.write_entry("stderr", false, message.as_bytes());
        }
    }

    /// Attach to a container's main process before it starts (docker's attach, then
    /// start): a container not running is created in its pod's shim now, so that nothing
    /// it prints is missed, and [`Engine::start`] starts that one. A running container is
    /// attached to as it runs.
    pub fn attach_before_start(&self, key: &str) -> Result<Session> {
        let row = self.db.find_container(key)?;
        if matches!(row.state, ContainerState::Running | ContainerState::Paused) {
            return self.attach_session(&row.id);
        }
        let stdio = StdioMode {
            tty: row.spec.tty,
            stdin: row.spec.stdin,
        };
        let prepared = (|| {
            let (row, shim) = self.create_in_shim(&row.id, stdio)?;
            let stream = shim.attach(&row.id, None)?;
            Ok(Session::new(
                row,
                None,
                stream,
                stdio.tty,
                stdio.stdin,
                shim.state_dir().to_path_buf(),
            ))
        })();
        self.release_pod_locks();
        prepared
    }

    /// Attach to a running container's main process.
    pub fn attach_session(&self, key: &str) -> Result<Session> {
        let row = self.db.find_container(key)?;
        let pod = self.db.find_pod(&row.pod_id)?;
        let stream = self.attach(&row.id, None)?;
        let (tty, stdin) = (row.spec.tty, row.spec.stdin);
        Ok(Session::new(
            row,
            None,
            stream,
            tty,
            stdin,
            self.shim_state_dir(&pod),
        ))
    }

    /// Start a process in a running container. Returns its exec id, and its session
    /// with `attach` (attached as it starts).
    pub fn exec(
        &self,
        key: &str,
        req: &ExecRequest,
        attach: bool,
    ) -> Result<(String, Option<Session>)> {
        let row = self.db.find_container(key)?;
        let row = self.refresh(&row)?;
        if row.state != ContainerState::Running {
            return Err(Error::Precondition(format!(
                "container {} is not running",
                row.name
            )));
        }
        let shim = self.shim_of(&row)?;
        let config = crate::exec::container_process(&self.paths.bundle(&row.id), &row.name)?;
        let process = crate::exec::process(config, req, &row.name, &self.paths.rootfs(&row.id))?;
        let exec_id = format!("exec-{}", &crate::paths::new_id()[..12]);
        let stdio = wharf_shim::protocol::StdioSpec {
            terminal: req.tty,
            stdin: req.stdin,
            log: None,
        };
        // The shim names the exec by its ids; the user named the container.
        let prefix = format!("exec {exec_id} in {}: ", row.id);
        let named = |e: wharf_shim::ShimError| match Error::from(e) {
            Error::Shim { kind, message } => Error::Shim {
                kind,
                message: format!(
                    "exec in container {}: {}",
                    row.name,
                    message.strip_prefix(&prefix).unwrap_or(&message)
                ),
            },
            other => other,
        };
        if !attach {
            shim.exec(&row.id, &exec_id, &process, &stdio)
                .map_err(named)?;
            return Ok((exec_id, None));
        }
        let (_pid, stream) = shim
            .exec_attach(&row.id, &exec_id, &process, &stdio)
            .map_err(named)?;
        let dir = shim.state_dir().to_path_buf();
        let session = Session::new(row, Some(exec_id.clone()), stream, req.tty, req.stdin, dir);
        Ok((exec_id, Some(session)))
    }

    /// Wait for an exec process to exit (`timeout` None: for ever).
    pub fn wait_exec(
        &self,
        key: &str,
        exec_id: &str,
        timeout: Option<Duration>,
    ) -> Result<ExitInfo> {
        let row = self.db.find_container(key)?;
        let shim = self.shim_of(&row)?;
        Ok(exit_info(&shim.wait_exec(&row.id, exec_id, timeout)?))
    }

    /// Open a running container's log file again at its path, after someone moved it away
    /// (kubelet's log rotation, then CRI ReopenContainerLog).
    pub fn reopen_log(&self, key: &str) -> Result<()> {
        let row = self.db.find_container(key)?;
        let row = self.refresh(&row)?;
        if row.state != ContainerState::Running {
            return Err(Error::Precondition(format!(
                "container {} is not running: its log is closed",
                row.name
            )));
        }
        Ok(self.shim_of(&row)?.reopen_log(&row.id)?)
    }

    /// Remove a container (a running one only with `force`), and its pod with it when the
    /// pod was made for it alone.
    pub fn remove(&self, key: &str, force: bool) -> Result<()> {
        let row = self.db.find_container(key)?;
        // The pod stays locked between its last container's removal and its own.
        let (_lock, row) = self.lock_and_read(&row.pod_id, || self.refresh(&row))?;
        if row.state == ContainerState::Running && !force {
            return Err(Error::Precondition(format!(
                "container {} is running: stop it first or use --force",
                row.name
            )));
        }
        let pod = self.db.find_pod(&row.pod_id)?;
        if self.is_own_pod_of(&pod, &row)? {
            // The pod goes with it, all in one removal (its network comes down meanwhile).
            self.remove_pod(&pod.id, true)
        } else {
            self.remove_container(&row.id, force)
        }
    }

    /// [`Engine::remove`], and then the container's anonymous volumes (`rm -v`, `--rm`).
    pub fn remove_with_volumes(&self, key: &str, force: bool) -> Result<()> {
        let row = self.db.find_container(key)?;
        self.remove(&row.id, force)?;
        self.remove_anonymous_volumes(&row.spec);
        Ok(())
    }

    /// Stop every running container of a pod, together (one grace period for all).
    pub fn stop_pod(&self, key: &str, grace: Option<Duration>) -> Result<()> {
        self.stop_pods(&[key], grace)
    }

    /// Stop several pods' running containers together, within one grace period (a
    /// workload's replicas going down at once, as kubelet stops pods in parallel).
    pub fn stop_pods(&self, keys: &[&str], grace: Option<Duration>) -> Result<()> {
        let mut running = Vec::new();
        for key in keys {
            let pod = self.db.find_pod(key)?;
            for c in self.db.containers(Some(&pod.id))? {
                if self.refresh(&c)?.state == ContainerState::Running {
                    running.push(c.id);
                }
            }
        }
        let keys: Vec<&str> = running.iter().map(String::as_str).collect();
        self.stop_many(&keys, grace)?;
        Ok(())
    }

    /// Stop a pod for good (the CRI's StopPodSandbox): its running containers together,
    /// with one grace period, then its network. It stays, not ready, until it is removed;
    /// stopping it again does nothing.
    pub fn stop_sandbox(&self, key: &str, grace: Option<Duration>) -> Result<PodRow> {
        let pod = self.db.find_pod(key)?;
        if matches!(pod.state, PodState::Stopped | PodState::Dead) {
            return Ok(pod);
        }
        self.stop_pod(&pod.id, grace)?;
        let (_lock, mut pod) = self.lock_and_read(&pod.id, || self.db.find_pod(&pod.id))?;
        crate::sandbox::start_network_teardown(&self.setup(), &pod.id, &pod.spec, &pod.sandbox)
            .finish()?;
        // Its namespace is gone: the record says so, so that nothing joins it again.
        pod.sandbox.netns = None;
        pod.sandbox.ips.clear();
        pod.state = PodState::Stopped;
        self.db.transaction(|db| {
            db.update_pod(&pod.id, &pod.sandbox, pod.state)?;
            db.event("stopped", "pod", &pod.id, &pod.name, serde_json::json!({}))
        })?;
        crate::ledger::save_pod(&self.paths, &pod)?;
        Ok(pod)
    }

    /// Change a running container's cgroup limits (the CRI's UpdateContainerResources): what
    /// `res` sets replaces what the container had, the rest stays. Returns the result.
    pub fn update_resources(
        &self,
        key: &str,
        res: &oci_spec::runtime::LinuxResources,
    ) -> Result<oci_spec::runtime::LinuxResources> {
        let row = self.refresh(&self.db.find_container(key)?)?;
        if !matches!(row.state, ContainerState::Running | ContainerState::Paused) {
            return Err(Error::Precondition(format!(
                "container {} is {}: only a running container's resources can be changed",
                row.name, row.state
            )));
        }
        let rt = wharf_runtime::Runtime::new(self.paths.runtime_root());
        Ok(rt.update(&row.id, res)?)
    }

    /// Change a pod's own limits (podman's `pod update`), which bound all its containers
    /// together. With the systemd driver, what systemd has a property for is set on the
    /// pod's scope (SetUnitProperties) and the rest written to its files; with cgroupfs,
    /// all to the pod cgroup's files. The pod's spec keeps the result, for a scope started
    /// again and for recovery after a reboot.
    pub fn update_pod_resources(
        &self,
        key: &str,
        res: &oci_spec::runtime::LinuxResources,
    ) -> Result<PodRow> {
        let id = self.db.find_pod(key)?.id;
        let (_lock, mut pod) = self.lock_and_read(&id, || self.db.find_pod(&id))?;
        if !pod.state.ready() {
            return Err(Error::Precondition(format!(
                "pod {} is {}: only a ready pod's limits can be changed",
                pod.name, pod.state
            )));
        }
        let old = pod.spec.resources.clone().unwrap_or_default();
        let merged = wharf_runtime::cgroups::merge_resources(&old, res);
        self.systemd.update_pod(&pod, &old, &merged)?;
        pod.spec.resources = Some(Box::new(merged));
        self.db.update_pod_spec(&pod.id, &pod.spec, &pod.sandbox)?;
        crate::ledger::save_pod(&self.paths, &pod)?;
        Ok(pod)
    }

    /// Rename a container (docker's `rename`). A standalone container's pod carries its
    /// name too, so that the old name is free for a new container: the pod is renamed with
    /// it (its hostname stays what it was).
    pub fn rename(&self, key: &str, new: &str) -> Result<ContainerRow> {
        crate::validate::check("container name", new, crate::validate::Rule::ObjectName)?;
        let row = self.db.find_container(key)?;
        let (_lock, (row, pod)) = self.lock_and_read(&row.pod_id, || {
            Ok((
                self.db.find_container(&row.id)?,
                self.db.find_pod(&row.pod_id)?,
            ))
        })?;
        let standalone = pod.spec.labels.contains_key(STANDALONE_LABEL) && pod.name == row.name;
        self.db.transaction(|db| {
            db.rename_container(&row.id, new)?;
            if standalone {
                db.rename_pod(&pod.id, new)?;
            }
            db.event(
                "renamed",
                "container",
                &row.id,
                new,
                serde_json::json!({ "oldName": row.name }),
            )
        })?;
        if standalone {
            // The pod's record for recovery after a reboot carries the name too.
            crate::ledger::save_pod(&self.paths, &self.db.find_pod(&pod.id)?)?;
        }
        self.refresh_names_of_networks(&pod.spec);
        self.db.find_container(&row.id)
    }

    /// Freeze a running container's processes (its cgroup's freezer), or thaw a paused
    /// one: docker's `pause` and `unpause`. The shim is not involved: its container stays
    /// running to it, and a stop reaches the frozen processes (SIGKILL thaws them).
    pub fn set_paused(&self, key: &str, paused: bool) -> Result<ContainerRow> {
        let row = self.refresh(&self.db.find_container(key)?)?;
        let (from, to, event) = if paused {
            (ContainerState::Running, ContainerState::Paused, "paused")
        } else {
            (ContainerState::Paused, ContainerState::Running, "unpaused")
        };
        if row.state != from {
            return Err(Error::Precondition(format!(
                "container {} is {}, not {from}",
                row.name, row.state
            )));
        }
        let rt = wharf_runtime::Runtime::new(self.paths.runtime_root());
        if paused {
            rt.pause(&row.id)?;
        } else {
            rt.resume(&row.id)?;
        }
        self.db.transaction(|db| {
            db.update_container(&row.id, to, None, row.exit.as_ref(), row.restart_count)?;
            db.event(
                event,
                "container",
                &row.id,
                &row.name,
                serde_json::json!({}),
            )
        })?;
        self.db.find_container(&row.id)
    }

    /// The directory of a pod's manifest volumes (see [`crate::pod_volumes`]).
    pub fn pod_volumes_dir(&self, pod_id: &str) -> std::path::PathBuf {
        self.paths.pod_dir(pod_id).join(crate::pod_volumes::VOLUMES)
    }

    /// Remove a pod and its containers (running ones only with `force`).
    pub fn remove_pod_with_containers(&self, key: &str, force: bool) -> Result<PodRow> {
        let pod = self.db.find_pod(key)?;
        if !force {
            for c in self.db.containers(Some(&pod.id))? {
                if self.refresh(&c)?.state == ContainerState::Running {
                    return Err(Error::Precondition(format!(
                        "pod {} has running containers: stop it first or use --force",
                        pod.name
                    )));
                }
            }
        }
        self.remove_pod(&pod.id, true)?;
        Ok(pod)
    }

    /// Whether `pod` was made for `row` alone (and holds nothing else).
    fn is_own_pod_of(&self, pod: &PodRow, row: &ContainerRow) -> Result<bool> {
        let own = pod.spec.labels.contains_key(STANDALONE_LABEL);
        let others = self
            .db
            .containers(Some(&pod.id))?
            .iter()
            .any(|c| c.id != row.id);
        Ok(own && !others)
    }
}
