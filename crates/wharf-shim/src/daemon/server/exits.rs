//! Children that exit: reaping, exit records, the restart policy and its back-off timers.

use super::*;

impl Shim {
    /// Wait for our child `pid` (blocking), reaping every other child that exits meanwhile
    /// (its exit is handled by the event loop afterwards). Waiting for `pid` alone can
    /// deadlock: a container's init killed as PID 1 of its pid namespace does not finish
    /// exiting until every other process of that namespace is reaped, and exec'd processes
    /// are our children, not its.
    pub(super) fn reap_waiting(&mut self, pid: i32) -> Option<i32> {
        loop {
            let mut status = 0;
            // SAFETY: waitpid on any child of ours.
            let r = unsafe { libc::waitpid(-1, &mut status, 0) };
            if r == pid {
                return Some(status);
            }
            if r > 0 {
                self.deferred_exits.push((r, status));
                continue;
            }
            if std::io::Error::last_os_error().raw_os_error() == Some(libc::EINTR) {
                continue;
            }
            return None;
        }
    }

    pub(super) fn handle_deferred_exits(&mut self) {
        while !self.deferred_exits.is_empty() {
            for (pid, status) in std::mem::take(&mut self.deferred_exits) {
                self.on_child_exit(pid, status);
            }
        }
    }

    pub(super) fn on_signal(&mut self, sig: i32) {
        match sig {
            libc::SIGCHLD => {
                self.handle_deferred_exits();
                while let Some((pid, status)) = sys::reap_any() {
                    self.on_child_exit(pid, status);
                }
            }
            libc::SIGTERM | libc::SIGINT => {
                log(&format!(
                    "signal {sig}: shutting down once no container runs"
                ));
                self.begin_shutdown();
            }
            _ => {}
        }
    }

    pub(super) fn next_deadline(&self) -> Option<Instant> {
        self.containers
            .iter()
            .flat_map(|c| {
                let health = c
                    .health
                    .as_ref()
                    .filter(|_| c.status == Status::Running)
                    .and_then(|h| h.deadline());
                [c.restart_at, c.kill_at, health]
            })
            .flatten()
            .chain(self.kube_deadline())
            .chain(self.next_disk_check)
            .min()
    }

    pub(super) fn on_timer(&mut self) {
        let now = Instant::now();
        let keys: Vec<u64> = self.containers.iter().map(|c| c.key).collect();
        for key in keys {
            let Some(c) = self.find_key_mut(key) else {
                continue;
            };
            if c.kill_at.is_some_and(|t| t <= now) {
                c.kill_at = None;
                if c.status == Status::Running {
                    let id = c.spec.id.clone();
                    if let Err(e) = self.cfg.runtime.kill(&id, libc::SIGKILL, true) {
                        log(&format!("stop {id}: SIGKILL after the grace period: {e}"));
                    }
                }
            }
            let Some(c) = self.find_key_mut(key) else {
                continue;
            };
            if c.restart_at.is_some_and(|t| t <= now) {
                c.restart_at = None;
                c.restart_count += 1;
                let restarted = EventKind::Restarted {
                    id: c.spec.id.clone(),
                    restart_count: c.restart_count,
                };
                self.publish(restarted);
                self.launch(key);
            }
        }
        self.health_tick(now);
        self.kube_tick(now);
        self.disk_tick(now);
    }

    pub(super) fn on_child_exit(&mut self, pid: i32, status: i32) {
        if let Some(key) = self
            .containers
            .iter()
            .find(|c| c.pid == Some(pid))
            .map(|c| c.key)
        {
            self.container_exited(key, status, None);
            return;
        }
        self.on_child_exit_reaped(pid, status);
    }

    /// An exec process or the pod's init exited (anything else is an orphan we reaped).
    pub(super) fn on_child_exit_reaped(&mut self, pid: i32, status: i32) {
        if self.pause.is_some_and(|(p, _)| p == pid) {
            log(&format!("the pod's init (pid {pid}) exited"));
            self.pause = None;
            if !self.shutting_down {
                // Every process of the shared pid namespace died with it, and no new one
                // can enter it: the pod is over.
                self.phase = PodPhase::Failed;
                let failure = format!("{PAUSE_EXITED} (pid {pid})");
                self.failure = Some(failure.clone());
                for c in &mut self.containers {
                    c.restart_at = None;
                }
                self.persist_pod();
                self.publish(EventKind::PodFailed { failure });
                return;
            }
            self.persist_pod();
            return;
        }
        if self.action_exited(pid, status) {
            return;
        }
        let mut found = None;
        for c in &self.containers {
            if let Some(i) = c
                .execs
                .iter()
                .position(|e| e.pid == pid && e.exit.is_none())
            {
                found = Some((c.key, i));
            }
        }
        let Some((key, i)) = found else {
            return;
        };
        let mut buf = [0u8; 8192];
        let mut out: Vec<(Stream, Vec<u8>)> = Vec::new();
        let c = self.find_key_mut(key).expect("found");
        let cid = c.spec.id.clone();
        let e = &mut c.execs[i];
        e.io.drain(&mut buf, &mut |s, d| out.push((s, d.to_vec())));
        if e.id.starts_with(health::PREFIX) {
            let exec_id = e.id.clone();
            if let Some(h) = c.health.as_mut() {
                for (_, d) in &out {
                    h.output(&exec_id, d);
                }
            }
            let (code, _) = sys::decode_status(status);
            if self.check_exited(key, &exec_id, code) {
                return;
            }
        }
        let c = self.find_key_mut(key).expect("found");
        let e = &mut c.execs[i];
        let attached = e.attached.clone();
        for (s, d) in out {
            self.broadcast(&attached, s.frame_id(), &d);
        }
        let (code, signal) = sys::decode_status(status);
        let c = self.find_key_mut(key).expect("found");
        let e = &mut c.execs[i];
        let exit = ExitRecord {
            exit_code: code,
            signal,
            started_at: Some(e.started_at.clone()),
            finished_at: wharf_sys::time::now_rfc3339_nano(),
            oom_killed: false,
            reason: if code == 0 { "Completed" } else { "Error" }.into(),
            message: None,
        };
        e.exit = Some(exit.clone());
        let waiters = std::mem::take(&mut e.waiters);
        let attached = std::mem::take(&mut e.attached);
        let exec_id = e.id.clone();
        if let Err(err) = self.cfg.state.write_exec_exit(&cid, &exec_id, &exit) {
            log(&err.to_string());
        }
        self.publish(EventKind::ExecExited {
            id: cid,
            exec_id,
            exit: exit.clone(),
        });
        self.announce_exit(waiters, attached, &exit);
    }

    /// The container's init exited (already reaped): drain its output, record the exit,
    /// then tell whoever waits.
    pub(super) fn container_exited(
        &mut self,
        key: u64,
        status: i32,
        start_error: Option<(&str, String)>,
    ) {
        let mut buf = [0u8; 8192];
        let mut out: Vec<(Stream, Vec<u8>)> = Vec::new();
        let Some(c) = self.find_key_mut(key) else {
            return;
        };
        if let Some(io) = c.io.as_mut() {
            io.drain(&mut buf, &mut |s, d| out.push((s, d.to_vec())));
        }
        let attached = c.attached.clone();
        for (s, d) in out {
            self.broadcast(&attached, s.frame_id(), &d);
        }
        let c = self.find_key_mut(key).expect("exists");
        if let (Some(io), Some((_, msg))) = (c.io.as_mut(), &start_error) {
            io.log_note(msg);
        }
        c.io = None;
        if let Some(w) = c.oom.as_mut()
            && let Ok(u) = w.read()
        {
            c.ooms += u.ooms;
        }
        c.oom = None;
        let (code, signal) = sys::decode_status(status);
        let oom = c.ooms > 0;
        let (code, signal, reason, message) = match start_error {
            Some((reason, msg)) => (128, None, reason.to_string(), Some(msg)),
            None if oom => (code, signal, "OOMKilled".to_string(), None),
            None if code == 0 => (code, signal, "Completed".to_string(), None),
            None => (code, signal, "Error".to_string(), None),
        };
        let record = ExitRecord {
            exit_code: code,
            signal,
            started_at: c.started_at.clone(),
            finished_at: wharf_sys::time::now_rfc3339_nano(),
            oom_killed: oom,
            reason,
            message,
        };
        self.record_exit(key, record);
    }

    /// Write the exit record, then announce it, then apply the restart policy.
    pub(super) fn record_exit(&mut self, key: u64, record: ExitRecord) {
        let Some(c) = self.find_key_mut(key) else {
            return;
        };
        c.status = Status::Exited;
        c.pid = None;
        c.pid_start_time = None;
        c.kill_at = None;
        let id = c.spec.id.clone();
        if let Err(e) = self.cfg.state.write_exit(&id, &record) {
            log(&format!("container {id}: record its exit: {e}"));
        }
        let may_restart = !self.shutting_down && self.phase != PodPhase::Failed;
        let has_plan = self.plan.is_some();
        let c = self.find_key_mut(key).expect("exists");
        c.last_exit = Some(record.clone());
        let failed = record.exit_code != 0;
        let sidecar = c.spec.kube.as_ref().is_some_and(|k| k.sidecar);
        let policy = match (c.spec.restart, c.spec.init) {
            // Init containers restart only on failure (Kubernetes), sidecars always.
            (RestartPolicy::Always, true) if !sidecar => RestartPolicy::OnFailure,
            (p, _) => p,
        };
        let restart = !c.stopping
            && match policy {
                RestartPolicy::Always => true,
                RestartPolicy::OnFailure => failed,
                RestartPolicy::Never => false,
            }
            && c.spec.max_restarts.is_none_or(|n| c.restart_count < n);
        let mut pod_failure = None;
        if restart && may_restart {
            let ran = c.run_started.map(|t| t.elapsed()).unwrap_or_default();
            if ran >= Duration::from_millis(2 * c.spec.backoff.max_ms) {
                c.delay_ms = c.spec.backoff.initial_ms;
                c.immediate_used = false;
            }
            if c.spec.backoff.first_immediate && !c.immediate_used {
                c.immediate_used = true;
                c.restart_at = Some(Instant::now());
            } else {
                c.restart_at = Some(Instant::now() + Duration::from_millis(c.delay_ms));
                c.delay_ms = (c.delay_ms * 2).min(c.spec.backoff.max_ms);
            }
        } else if c.spec.init && !sidecar && failed && has_plan {
            pod_failure = Some(format!(
                "init container {id} failed: exit code {}{} ({}{})",
                record.exit_code,
                record
                    .signal
                    .map(|s| format!(", signal {s}"))
                    .unwrap_or_default(),
                record.reason,
                record
                    .message
                    .as_ref()
                    .map(|m| format!(": {m}"))
                    .unwrap_or_default()
            ));
        }
        let waiters = std::mem::take(&mut c.waiters);
        let attached = std::mem::take(&mut c.attached);
        // The status record first: a reader never sees a running container whose probes
        // were already reset for its exit.
        self.persist(key);
        self.kube_exited(key);
        self.release_sidecars();
        self.end_sidecars_when_apps_done();
        self.publish(EventKind::Exited {
            id,
            exit: record.clone(),
        });
        if let Some(f) = pod_failure {
            log(&format!("pod {}: {f}", self.cfg.pod));
            self.phase = PodPhase::Failed;
            self.failure = Some(f.clone());
            self.persist_pod();
            self.publish(EventKind::PodFailed { failure: f });
        }
        self.announce_exit(waiters, attached, &record);
        self.pod_dirty = true;
        // Not while the shim shuts down: the pod is being removed already.
        let shutting_down = self.shutting_down;
        let c = self.find_key_mut(key).expect("exists");
        let for_good = !(restart && may_restart);
        if for_good && !shutting_down && !c.spec.exit_command.is_empty() {
            spawn_exit_command(&c.spec.id, &c.spec.exit_command);
        }
    }
}

/// Run a container's exit command, detached: its own session, stdin from /dev/null, its
/// output to the shim's log (stderr). The shim reaps it with its other children.
fn spawn_exit_command(id: &str, argv: &[String]) {
    use std::os::unix::process::CommandExt;
    let mut cmd = std::process::Command::new(&argv[0]);
    cmd.args(&argv[1..])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::inherit())
        .stderr(std::process::Stdio::inherit())
        .process_group(0);
    // The shim lives in its pod's cgroup, which the command (the pod's removal) deletes:
    // it runs from each hierarchy's root instead. The paths are made before the fork; the
    // child only opens and writes (async-signal-safe calls).
    let roots: Vec<std::ffi::CString> = wharf_runtime::cgroups::detect()
        .map(|l| {
            l.v1.values()
                .chain(l.unified.iter())
                .filter_map(|m| {
                    std::ffi::CString::new(
                        m.join("cgroup.procs").into_os_string().into_encoded_bytes(),
                    )
                    .ok()
                })
                .collect()
        })
        .unwrap_or_default();
    // SAFETY: between fork and exec the child calls only open(2), write(2) and close(2).
    unsafe {
        cmd.pre_exec(move || {
            for r in &roots {
                let fd = libc::open(r.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
                if fd >= 0 {
                    libc::write(fd, c"0".as_ptr().cast(), 1);
                    libc::close(fd);
                }
            }
            Ok(())
        });
    }
    match cmd.spawn() {
        Ok(child) => log(&format!(
            "container {id}: exit command {} started (pid {})",
            argv.join(" "),
            child.id()
        )),
        Err(e) => log(&format!(
            "container {id}: exit command {}: {e}",
            argv.join(" ")
        )),
    }
}
