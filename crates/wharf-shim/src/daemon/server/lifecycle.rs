//! A container's way from spec to running: create, start, the pod plan (init containers
//! then app containers), the pod's minimal init, records on disk, and shutdown.

use super::*;

impl Shim {
    pub(super) fn op_create(&mut self, spec: ContainerSpec) -> Result<i32, Fail> {
        self.check_new(&spec)?;
        let key = self.add_container(spec);
        match self.create(key) {
            Ok(pid) => Ok(pid),
            Err(fail) => {
                let i = self
                    .containers
                    .iter()
                    .position(|c| c.key == key)
                    .expect("added");
                let c = self.containers.remove(i);
                let _ = self.cfg.state.remove_container(&c.spec.id);
                Err(fail)
            }
        }
    }

    pub(super) fn check_new(&self, spec: &ContainerSpec) -> Result<(), Fail> {
        if self.shutting_down {
            return Err(Fail(
                ErrorKind::ShuttingDown,
                format!("container {}: the shim is shutting down", spec.id),
            ));
        }
        wharf_runtime::state::validate_id(&spec.id)
            .map_err(|e| Fail(ErrorKind::Invalid, e.to_string()))?;
        if let Some(f) = self.init_exited() {
            return Err(Fail(
                ErrorKind::State,
                format!(
                    "container {}: pod {} is not ready: {f}; remove the pod and create it again",
                    spec.id, self.cfg.pod
                ),
            ));
        }
        if self.containers.iter().any(|c| c.spec.id == spec.id) {
            return Err(Fail(
                ErrorKind::Exists,
                format!(
                    "container {} already exists in pod {}",
                    spec.id, self.cfg.pod
                ),
            ));
        }
        if spec.backoff.initial_ms == 0 || spec.backoff.max_ms < spec.backoff.initial_ms {
            return Err(Fail(
                ErrorKind::Invalid,
                format!(
                    "container {}: back-off must have 0 < initial_ms <= max_ms",
                    spec.id
                ),
            ));
        }
        Ok(())
    }

    pub(super) fn add_container(&mut self, spec: ContainerSpec) -> u64 {
        if let Err(e) = self.cfg.state.write_spec(&spec) {
            log(&format!("container {}: {e}", spec.id));
        }
        let key = self.next_key;
        self.next_key += 1;
        self.containers.push(Container {
            key,
            delay_ms: spec.backoff.initial_ms,
            immediate_used: false,
            spec,
            status: Status::Waiting,
            pid: None,
            pid_start_time: None,
            io: None,
            created_at: None,
            started_at: None,
            run_started: None,
            last_exit: None,
            restart_count: 0,
            restart_at: None,
            stopping: false,
            kill_at: None,
            in_runtime: false,
            oom: None,
            ooms: 0,
            execs: Vec::new(),
            waiters: Vec::new(),
            attached: Vec::new(),
            health: None,
            kube: None,
        });
        key
    }

    /// Runtime create with the container's stdio; status becomes Created.
    pub(super) fn create(&mut self, key: u64) -> Result<i32, Fail> {
        let (max_size, max_files) = (self.cfg.log_max_size, self.cfg.log_max_files);
        let c = self.find_key_mut(key).expect("exists");
        let id = c.spec.id.clone();
        let spec_stdio = c.spec.stdio.clone();
        let bundle = c.spec.bundle.clone();
        let runtime_fail = |m: String| Fail(ErrorKind::Runtime, m);
        for s in &c.spec.sub_paths {
            use wharf_runtime::sub_path;
            sub_path::clear(&s.stage)
                .and_then(|()| sub_path::stage(&s.volume, &s.path, &s.stage, s.missing))
                .map_err(|e| {
                    runtime_fail(format!(
                        "container {id}: subPath {} of volume {}: {e}",
                        s.path.display(),
                        s.volume.display()
                    ))
                })?;
        }
        let (mut io, mut ends) = stdio::prepare(&spec_stdio, max_size, max_files)
            .map_err(|e| runtime_fail(format!("container {id}: stdio: {e}")))?;
        let opts = CreateOptions {
            bundle,
            console: ends.console.take(),
            ..Default::default()
        };
        let rt = &self.cfg.runtime;
        let created = sys::with_child_stdio(ends.fds(), || rt.create(&id, opts))
            .map_err(|e| runtime_fail(format!("create container {id}: stdio: {e}")))?
            .map_err(|e| Fail(runtime_kind(&e), format!("create container {id}: {e}")))?;
        let pid = created.pid;
        if let Err(msg) = ends.finish(&mut io, spec_stdio.stdin) {
            let _ = rt.delete(&id, true);
            self.reap_waiting(pid);
            return Err(runtime_fail(format!("create container {id}: {msg}")));
        }
        let oom = match rt.state(&id) {
            Ok((st, _)) => match st.cgroup.oom_watcher() {
                Ok(w) => Some(w),
                Err(e) => {
                    log(&format!("container {id}: no OOM events: {e}"));
                    None
                }
            },
            Err(_) => None,
        };
        let c = self.find_key_mut(key).expect("exists");
        c.pid = Some(pid);
        c.pid_start_time = wharf_runtime::sys::process_start_time(pid).ok();
        c.io = Some(io);
        c.status = Status::Created;
        c.in_runtime = true;
        c.oom = oom;
        c.ooms = 0;
        c.execs.clear();
        c.created_at = Some(wharf_sys::time::now_rfc3339_nano());
        c.started_at = None;
        self.persist(key);
        self.publish(EventKind::Created { id, pid });
        Ok(pid)
    }

    /// Runtime start; status becomes Running. A failed start is recorded as an exit
    /// (reason StartError) and the restart policy applies.
    pub(super) fn start(&mut self, key: u64) -> Result<(), Fail> {
        let c = self.find_key_mut(key).expect("exists");
        let id = c.spec.id.clone();
        c.started_at = Some(wharf_sys::time::now_rfc3339_nano());
        c.run_started = Some(Instant::now());
        match self.cfg.runtime.start(&id) {
            Ok(()) => {
                let c = self.find_key_mut(key).expect("exists");
                if c.status == Status::Created {
                    c.status = Status::Running;
                }
                let pid = c.pid.unwrap_or_default();
                self.persist(key);
                self.health_restart(key);
                self.kube_started(key);
                self.publish(EventKind::Started { id, pid });
                Ok(())
            }
            Err(e) => {
                let msg = format!("start container {id}: {e}");
                let c = self.find_key_mut(key).expect("exists");
                if let Some(pid) = c.pid {
                    // SAFETY: our own unreaped child.
                    unsafe { libc::kill(pid, libc::SIGKILL) };
                    let status = self.reap_waiting(pid).unwrap_or(0);
                    self.container_exited(key, status, Some(("StartError", msg.clone())));
                }
                Err(Fail(runtime_kind(&e), msg))
            }
        }
    }

    /// Create and start (a pod plan's step or a restart); failures are recorded as exits.
    pub(super) fn launch(&mut self, key: u64) {
        let Some(c) = self.find_key_mut(key) else {
            return;
        };
        let id = c.spec.id.clone();
        if c.in_runtime {
            if let Err(e) = self.cfg.runtime.delete(&id, true) {
                log(&format!("restart {id}: delete the old container: {e}"));
            }
            if let Some(c) = self.find_key_mut(key) {
                c.in_runtime = false;
            }
        }
        match self.create(key) {
            Ok(_) => {
                let _ = self.start(key);
            }
            Err(Fail(_, msg)) => {
                log(&msg);
                let record = ExitRecord {
                    exit_code: 128,
                    signal: None,
                    started_at: None,
                    finished_at: wharf_sys::time::now_rfc3339_nano(),
                    oom_killed: false,
                    reason: "CreateError".into(),
                    message: Some(msg),
                };
                self.record_exit(key, record);
            }
        }
    }

    pub(super) fn op_run_pod(&mut self, plan: PodPlan) -> OpResult {
        if self.plan.is_some() {
            return Err(Fail(
                ErrorKind::Exists,
                format!("pod {} already runs a plan", self.cfg.pod),
            ));
        }
        let mut seen = std::collections::HashSet::new();
        for s in plan.init.iter().chain(plan.containers.iter()) {
            self.check_new(s)?;
            if !seen.insert(s.id.clone()) {
                return Err(Fail(
                    ErrorKind::Invalid,
                    format!("pod plan names container {} twice", s.id),
                ));
            }
        }
        let init: Vec<u64> = plan
            .init
            .into_iter()
            .map(|mut s| {
                s.init = true;
                self.add_container(s)
            })
            .collect();
        let apps: Vec<u64> = plan
            .containers
            .into_iter()
            .map(|mut s| {
                s.init = false;
                self.add_container(s)
            })
            .collect();
        for k in init.iter().chain(apps.iter()) {
            self.persist(*k);
        }
        self.phase = PodPhase::Initializing;
        self.plan = Some((init, apps));
        self.watch_disk(plan.disk_limits);
        self.advance_pod();
        Ok(Some(Reply::Done))
    }

    /// Move the pod plan forward: the next init container, or all app containers.
    pub(super) fn advance_pod(&mut self) {
        let Some((init, apps)) = self.plan.clone() else {
            return;
        };
        if !matches!(self.phase, PodPhase::Initializing | PodPhase::Running) || self.shutting_down {
            return;
        }
        if self.phase == PodPhase::Initializing {
            for key in init {
                let Some(c) = self.containers.iter().find(|c| c.key == key) else {
                    continue;
                };
                let sidecar = c.spec.kube.as_ref().is_some_and(|k| k.sidecar);
                let done = c.status == Status::Exited
                    && c.last_exit.as_ref().is_some_and(|e| e.exit_code == 0);
                if done || (sidecar && c.restart_count > 0) {
                    continue;
                }
                if c.status == Status::Waiting && c.restart_at.is_none() && !c.stopping {
                    self.launch(key);
                }
                // A sidecar that runs (and passed its startup probe and postStart hook)
                // lets the next container start.
                if sidecar && !self.holds_start(key) {
                    continue;
                }
                return;
            }
            self.phase = PodPhase::Running;
            self.persist_pod();
        }
        // App containers one after another: a postStart hook holds the next one back.
        for key in apps {
            let fresh = self
                .containers
                .iter()
                .find(|c| c.key == key)
                .is_some_and(|c| {
                    c.status == Status::Waiting
                        && !c.stopping
                        && c.restart_at.is_none()
                        && c.last_exit.is_none()
                        && c.restart_count == 0
                });
            if fresh {
                self.launch(key);
            }
            if self.holds_start(key) {
                return;
            }
        }
    }

    /// Why the pod cannot run containers any more, if its minimal init exited.
    pub(super) fn init_exited(&self) -> Option<&String> {
        self.failure
            .as_ref()
            .filter(|f| f.starts_with(PAUSE_EXITED))
    }

    pub(super) fn op_pause(&mut self, spec: &PauseSpec) -> OpResult {
        if let Some(f) = self.init_exited() {
            return Err(Fail(
                ErrorKind::State,
                format!(
                    "pod {}: {f}; its pid namespace cannot be used again",
                    self.cfg.pod
                ),
            ));
        }
        if let Some((pid, _)) = self.pause {
            return Err(Fail(
                ErrorKind::Exists,
                format!("pod {}: its init already runs (pid {pid})", self.cfg.pod),
            ));
        }
        let pid = pause::spawn(spec).map_err(|m| {
            Fail(
                ErrorKind::Runtime,
                format!("pod {}: start its init: {m}", self.cfg.pod),
            )
        })?;
        let start = wharf_runtime::sys::process_start_time(pid).unwrap_or(0);
        self.pause = Some((pid, start));
        self.persist_pod();
        Ok(Some(Reply::Pid(pid)))
    }

    pub(super) fn persist(&self, key: u64) {
        let Some(c) = self.containers.iter().find(|c| c.key == key) else {
            return;
        };
        let rec = ContainerRecord {
            status: c.status,
            pid: c.pid,
            pid_start_time: c.pid_start_time,
            started_at: c.started_at.clone(),
            restart_count: c.restart_count,
            restart_pending: c.restart_at.is_some(),
            backing_off: c.restart_at.is_some_and(|at| at > Instant::now()),
        };
        if let Err(e) = self.cfg.state.write_status(&c.spec.id, &rec) {
            log(&format!("container {}: {e}", c.spec.id));
        }
    }

    pub(super) fn persist_pod(&self) {
        let rec = PodRecord {
            pod: self.cfg.pod.clone(),
            phase: self.phase,
            failure: self.failure.clone(),
            pause: self.pause,
        };
        if let Err(e) = self.cfg.state.write_pod(&rec) {
            log(&format!("pod {}: {e}", self.cfg.pod));
        }
    }

    pub(super) fn begin_shutdown(&mut self) {
        self.shutting_down = true;
        for c in &mut self.containers {
            c.restart_at = None;
        }
    }

    /// Nothing runs any more: delete what was created but never started, stop the pod's
    /// init, remove the socket and pid file.
    pub(super) fn finish(&mut self) {
        let created: Vec<(u64, String)> = self
            .containers
            .iter()
            .filter(|c| c.status == Status::Created)
            .map(|c| (c.key, c.spec.id.clone()))
            .collect();
        for (key, id) in created {
            let pid = self.find_key_mut(key).and_then(|c| c.pid);
            let _ = self.cfg.runtime.delete(&id, true);
            if let Some(pid) = pid
                && let Some(status) = self.reap_waiting(pid)
            {
                self.container_exited(key, status, None);
            }
        }
        if let Some((pid, _)) = self.pause.take() {
            // SAFETY: our own child.
            unsafe { libc::kill(pid, libc::SIGTERM) };
            self.reap_waiting(pid);
        }
        self.handle_deferred_exits();
        self.persist_pod();
        // Last words to clients (the answer to shutdown), best effort.
        let ids: Vec<ConnId> = self.conns.keys().copied().collect();
        for id in ids {
            self.flush_conn(id);
        }
        let dir = self.cfg.state.path();
        let _ = std::fs::remove_file(dir.join(records::SOCKET));
        let _ = std::fs::remove_file(dir.join(records::PID_FILE));
        log("shut down");
    }
}
