//! Processes' stdio: output to attached clients, input and resizes from them, and exec.

use super::*;

impl Shim {
    pub(super) fn attach_input(&mut self, t: &Target, stream: u8, payload: &[u8]) {
        let Some(io) = self.io_mut(t) else { return };
        match stream {
            frame::STDIN if payload.is_empty() => io.close_stdin(),
            frame::STDIN => {
                io.send_stdin(payload);
            }
            frame::RESIZE if payload.len() == 4 => {
                let rows = u16::from_be_bytes([payload[0], payload[1]]);
                let cols = u16::from_be_bytes([payload[2], payload[3]]);
                if let Some(m) = io.master() {
                    let _ = wharf_runtime::console::set_size(m, rows, cols);
                }
            }
            _ => {}
        }
    }

    pub(super) fn on_output(&mut self, key: u64, exec: Option<usize>, s: Stream) {
        let mut buf = [0u8; 8192];
        let Some(c) = self.find_key_mut(key) else {
            return;
        };
        let (io, attached) = match exec {
            None => match c.io.as_mut() {
                Some(io) => (io, &c.attached),
                None => return,
            },
            Some(i) => match c.execs.get_mut(i) {
                Some(e) => (&mut e.io, &e.attached),
                None => return,
            },
        };
        if let Some(n @ 1..) = io.read(s, &mut buf) {
            let ids = attached.clone();
            // A health check's output is kept for its result.
            if let Some(i) = exec
                && let Some(e) = c.execs.get(i)
                && e.id.starts_with(super::health::PREFIX)
            {
                let exec_id = e.id.clone();
                if let Some(h) = c.health.as_mut() {
                    h.output(&exec_id, &buf[..n]);
                }
            }
            if let Some(i) = exec
                && let Some(e) = c.execs.get(i)
                && e.id.starts_with(super::actions::PREFIX)
            {
                let exec_id = e.id.clone();
                self.action_output(key, &exec_id, &buf[..n]);
                return;
            }
            self.broadcast(&ids, s.frame_id(), &buf[..n]);
        }
    }

    pub(super) fn attach_conn(&mut self, conn: ConnId, t: Target) {
        let Some(c) = self.containers.iter_mut().find(|c| c.key == t.key) else {
            return;
        };
        let exited = match &t.exec {
            None => (c.status == Status::Exited).then(|| c.last_exit.clone()),
            Some(e) => c
                .execs
                .iter()
                .find(|x| &x.id == e)
                .and_then(|x| x.exit.clone().map(Some)),
        };
        if let Some(exit) = exited {
            // Nothing more will come: the exit (if known) and the end of the stream.
            if let Some(conn_ref) = self.conns.get_mut(&conn) {
                conn_ref.mode = Mode::Attached(t);
            }
            match exit {
                Some(exit) => self.announce_exit(Vec::new(), vec![conn], &exit),
                None => {
                    if let Some(c) = self.conns.get_mut(&conn) {
                        c.close_after_flush = true;
                    }
                    self.flush_conn(conn);
                }
            }
            return;
        }
        match &t.exec {
            None => c.attached.push(conn),
            Some(e) => {
                if let Some(x) = c.execs.iter_mut().find(|x| &x.id == e) {
                    x.attached.push(conn);
                }
            }
        }
        if let Some(c) = self.conns.get_mut(&conn) {
            c.mode = Mode::Attached(t);
        }
    }

    pub(super) fn op_exec(
        &mut self,
        id: &str,
        exec_id: &str,
        mut process: oci_spec::runtime::Process,
        stdio: &StdioSpec,
    ) -> Result<i32, Fail> {
        let i = self.find(id)?;
        wharf_runtime::state::validate_id(exec_id)
            .map_err(|e| Fail(ErrorKind::Invalid, format!("container {id}: exec id: {e}")))?;
        let c = &self.containers[i];
        if c.status != Status::Running {
            return Err(Fail(
                ErrorKind::State,
                format!("container {id} is not running: cannot exec in it"),
            ));
        }
        if c.execs.iter().any(|e| e.id == exec_id) {
            return Err(Fail(
                ErrorKind::Exists,
                format!("container {id}: exec process {exec_id} already exists"),
            ));
        }
        process.set_terminal(Some(stdio.terminal));
        let (mut io, mut ends) =
            stdio::prepare(stdio, self.cfg.log_max_size, self.cfg.log_max_files).map_err(|e| {
                Fail(
                    ErrorKind::Runtime,
                    format!("exec {exec_id} in {id}: stdio: {e}"),
                )
            })?;
        let opts = ExecOptions {
            process,
            console_socket: None,
            console: ends.console.take(),
            pid_file: None,
            preserve_fds: 0,
            ignore_paused: false,
        };
        let rt = &self.cfg.runtime;
        let created = sys::with_child_stdio(ends.fds(), || rt.exec(id, opts))
            .map_err(|e| Fail(ErrorKind::Runtime, format!("exec {exec_id} in {id}: {e}")))?
            .map_err(|e| Fail(runtime_kind(&e), format!("exec {exec_id} in {id}: {e}")))?;
        if let Err(msg) = ends.finish(&mut io, stdio.stdin) {
            // SAFETY: our own child.
            unsafe { libc::kill(created.pid, libc::SIGKILL) };
            sys::reap(created.pid);
            return Err(Fail(
                ErrorKind::Invalid,
                format!("exec {exec_id} in {id}: {msg}"),
            ));
        }
        self.containers[i].execs.push(Exec {
            id: exec_id.to_string(),
            pid: created.pid,
            io,
            exit: None,
            started_at: wharf_sys::time::now_rfc3339_nano(),
            waiters: Vec::new(),
            attached: Vec::new(),
        });
        self.publish(EventKind::ExecStarted {
            id: id.to_string(),
            exec_id: exec_id.to_string(),
            pid: created.pid,
        });
        Ok(created.pid)
    }
}
