//! Dispatching protocol requests, and the ones that act on a container as it is: kill,
//! stop, delete, state.

use super::*;

impl Shim {
    pub(super) fn handle(&mut self, conn: ConnId, op: Op) -> OpResult {
        match op {
            Op::Ping => Ok(Some(Reply::Pid(std::process::id() as i32))),
            Op::Create { spec } => self.op_create(*spec).map(|pid| Some(Reply::Pid(pid))),
            Op::Start { id } => {
                let i = self.find(&id)?;
                let key = self.containers[i].key;
                if self.containers[i].status != Status::Created {
                    return Err(Fail(
                        ErrorKind::State,
                        format!(
                            "container {id} cannot be started: it is {}",
                            status_name(self.containers[i].status)
                        ),
                    ));
                }
                self.start(key)?;
                Ok(Some(Reply::Done))
            }
            Op::Kill {
                id,
                exec_id,
                signal,
                all,
            } => self.op_kill(&id, exec_id, signal, all),
            Op::Stop {
                id,
                signal,
                grace_ms,
            } => self.op_stop(&id, signal, grace_ms),
            Op::Delete { id, force } => self.op_delete(&id, force),
            Op::State => Ok(Some(Reply::State(self.state()))),
            Op::Wait { id, exec_id } => {
                let t = self.target(&id, exec_id)?;
                let c = self.find_key_mut(t.key).expect("target exists");
                match &t.exec {
                    Some(e) => {
                        let x = c.execs.iter_mut().find(|x| &x.id == e).expect("exists");
                        if let Some(exit) = &x.exit {
                            return Ok(Some(Reply::Exit(exit.clone())));
                        }
                        x.waiters.push(conn);
                    }
                    None => {
                        if c.status == Status::Exited
                            && let Some(exit) = &c.last_exit
                        {
                            return Ok(Some(Reply::Exit(exit.clone())));
                        }
                        if c.status == Status::Waiting
                            && (c.stopping || self.phase == PodPhase::Failed || self.shutting_down)
                        {
                            return Err(Fail(
                                ErrorKind::State,
                                format!(
                                    "container {id} will not be started (the pod failed or was stopped)"
                                ),
                            ));
                        }
                        let c = self.find_key_mut(t.key).expect("target exists");
                        c.waiters.push(conn);
                    }
                }
                if let Some(c) = self.conns.get_mut(&conn) {
                    c.mode = Mode::Waiting;
                }
                Ok(None)
            }
            Op::Exec {
                id,
                exec_id,
                process,
                stdio,
                attach,
            } => {
                let pid = self.op_exec(&id, &exec_id, *process, &stdio)?;
                if attach {
                    let t = self.target(&id, Some(exec_id))?;
                    self.respond(conn, &Response::Ok(Reply::Pid(pid)));
                    self.attach_conn(conn, t);
                    return Ok(None);
                }
                Ok(Some(Reply::Pid(pid)))
            }
            Op::Attach { id, exec_id } => {
                let t = self.target(&id, exec_id)?;
                let c = self
                    .containers
                    .iter()
                    .find(|c| c.key == t.key)
                    .expect("exists");
                if t.exec.is_none() && c.status == Status::Waiting {
                    return Err(Fail(
                        ErrorKind::State,
                        format!("container {id} has not been created yet"),
                    ));
                }
                self.respond(conn, &Response::Ok(Reply::Done));
                self.attach_conn(conn, t);
                Ok(None)
            }
            Op::Resize {
                id,
                exec_id,
                rows,
                cols,
            } => {
                let t = self.target(&id, exec_id)?;
                let io = self.io_of(&t);
                match io.and_then(|io| io.master()) {
                    Some(m) => wharf_runtime::console::set_size(m, rows, cols)
                        .map(|_| Some(Reply::Done))
                        .map_err(|e| Fail(ErrorKind::Runtime, format!("resize {id}: {e}"))),
                    None => Err(Fail(
                        ErrorKind::Invalid,
                        format!("resize {id}: the process has no terminal (or has exited)"),
                    )),
                }
            }
            Op::RunPod { plan } => self.op_run_pod(plan),
            Op::PauseInit { spec } => self.op_pause(&spec),
            Op::Shutdown => {
                self.begin_shutdown();
                Ok(Some(Reply::Done))
            }
            Op::Status { id } => {
                let i = self.find(&id)?;
                Ok(Some(Reply::Container(Box::new(info(&self.containers[i])))))
            }
            Op::ReopenLog { id } => self.op_reopen_log(&id),
            Op::Subscribe => {
                self.subscribe(conn);
                Ok(None)
            }
            Op::Dns { spec } => {
                let upstream = spec
                    .upstream
                    .iter()
                    .map(|u| {
                        u.parse().map_err(|_| {
                            Fail(
                                ErrorKind::Invalid,
                                format!("invalid upstream {u:?}: an ip:port"),
                            )
                        })
                    })
                    .collect::<Result<_, _>>()?;
                let setup = dns::Setup {
                    netns: spec.netns.clone(),
                    hosts: spec.hosts.clone(),
                    upstream,
                };
                // Once: a second request (a restore) keeps the sockets it has.
                if self.dns.is_none() {
                    self.dns = Some(dns::Dns::open(&setup).map_err(|e| {
                        Fail(
                            ErrorKind::Runtime,
                            format!("listening on {}:53: {e}", dns::ADDRESS),
                        )
                    })?);
                }
                Ok(Some(Reply::Done))
            }
        }
    }

    pub(super) fn op_kill(
        &mut self,
        id: &str,
        exec: Option<String>,
        signal: i32,
        all: bool,
    ) -> OpResult {
        let t = self.target(id, exec)?;
        let c = &self.containers[self.find(id)?];
        if let Some(e) = &t.exec {
            let x = c.execs.iter().find(|x| &x.id == e).expect("exists");
            if x.exit.is_some() {
                return Err(Fail(
                    ErrorKind::State,
                    format!("container {id}: exec process {e} is not running"),
                ));
            }
            // SAFETY: our own unreaped child (its pid cannot have been reused).
            if unsafe { libc::kill(x.pid, signal) } != 0 {
                return Err(Fail(
                    ErrorKind::Invalid,
                    format!(
                        "container {id}: signal {signal} to exec {e}: {}",
                        std::io::Error::last_os_error()
                    ),
                ));
            }
            return Ok(Some(Reply::Done));
        }
        if !all && !matches!(c.status, Status::Running | Status::Created) {
            return Err(Fail(
                ErrorKind::State,
                format!("container {id} is not running"),
            ));
        }
        self.cfg
            .runtime
            .kill(id, signal, all)
            .map_err(|e| Fail(runtime_kind(&e), format!("kill container {id}: {e}")))?;
        Ok(Some(Reply::Done))
    }

    pub(super) fn op_stop(&mut self, id: &str, signal: i32, grace_ms: u64) -> OpResult {
        let i = self.find(id)?;
        let c = &mut self.containers[i];
        c.stopping = true;
        let key = c.key;
        let restart_cancelled = c.restart_at.take().is_some();
        match c.status {
            Status::Running => {
                // A sidecar waits for the app containers; the preStop hook runs first.
                if !self.hold_sidecar_stop(key, signal, grace_ms) {
                    self.begin_stop(key, signal, grace_ms, true);
                }
            }
            Status::Created => {
                let _ = self.cfg.runtime.kill(id, libc::SIGKILL, false);
            }
            Status::Waiting | Status::Exited => {}
        }
        if restart_cancelled {
            // Its last exit is final now: the records say so too.
            self.persist(key);
        }
        self.pod_dirty = true;
        Ok(Some(Reply::Done))
    }

    pub(super) fn op_delete(&mut self, id: &str, force: bool) -> OpResult {
        let i = self.find(id)?;
        let c = &mut self.containers[i];
        let key = c.key;
        let busy = c.status == Status::Running || c.execs.iter().any(|e| e.exit.is_none());
        if busy && !force {
            return Err(Fail(
                ErrorKind::State,
                format!("container {id} is running: stop it first (or delete with force)"),
            ));
        }
        c.stopping = true;
        c.restart_at = None;
        let init = c.pid;
        let execs: Vec<i32> = c
            .execs
            .iter()
            .filter(|e| e.exit.is_none())
            .map(|e| e.pid)
            .collect();
        // Exec'd processes first: the init, as PID 1 of its pid namespace, does not finish
        // exiting while they are unreaped.
        let _ = self.cfg.runtime.kill(id, libc::SIGKILL, true);
        for pid in execs {
            // SAFETY: our own unreaped child.
            unsafe { libc::kill(pid, libc::SIGKILL) };
            if let Some(status) = self.reap_waiting(pid) {
                self.on_child_exit_reaped(pid, status);
            }
        }
        if let Some(pid) = init {
            // SAFETY: our own unreaped child.
            unsafe { libc::kill(pid, libc::SIGKILL) };
            if let Some(status) = self.reap_waiting(pid) {
                self.container_exited(key, status, None);
            }
        }
        let i = self.find(id)?;
        if self.containers[i].in_runtime {
            self.cfg
                .runtime
                .delete(id, true)
                .map_err(|e| Fail(ErrorKind::Runtime, format!("delete container {id}: {e}")))?;
        }
        let c = self.containers.remove(i);
        for w in c.waiters.iter().chain(c.attached.iter()) {
            self.close_conn(*w);
        }
        if let Err(e) = self.cfg.state.remove_container(id) {
            log(&e.to_string());
        }
        Ok(Some(Reply::Done))
    }

    pub(super) fn state(&self) -> ShimState {
        ShimState {
            pod: self.cfg.pod.clone(),
            phase: self.phase,
            failure: self.failure.clone(),
            pause_pid: self.pause.map(|(p, _)| p),
            containers: self.containers.iter().map(info).collect(),
        }
    }

    /// `reopen_log`: a new file at the log's path; what was written goes on in the file
    /// that was moved away.
    fn op_reopen_log(&mut self, id: &str) -> OpResult {
        let i = self.find(id)?;
        let c = &mut self.containers[i];
        if c.spec.stdio.log.is_none() {
            return Err(Fail(
                ErrorKind::Invalid,
                format!("container {id}: its output is not logged to a file"),
            ));
        }
        let Some(io) = c.io.as_mut() else {
            return Err(Fail(
                ErrorKind::State,
                format!("container {id} is not running: its log is closed"),
            ));
        };
        io.reopen_log().map(|_| Some(Reply::Done)).map_err(|e| {
            Fail(
                ErrorKind::Runtime,
                format!("container {id}: reopen its log: {e}"),
            )
        })
    }
}

/// A container as the protocol shows it.
fn info(c: &Container) -> ContainerInfo {
    ContainerInfo {
        id: c.spec.id.clone(),
        status: c.status,
        pid: c.pid,
        created_at: c.created_at.clone(),
        started_at: c.started_at.clone(),
        log: c.spec.stdio.log.clone(),
        init: c.spec.init,
        restart_count: c.restart_count,
        restart_pending: c.restart_at.is_some(),
        exit: c.last_exit.clone(),
        execs: c
            .execs
            .iter()
            .map(|e| ExecInfo {
                exec_id: e.id.clone(),
                pid: e.pid,
                exit: e.exit.clone(),
            })
            .collect(),
    }
}
