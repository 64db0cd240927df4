//! The shim's event loop: one thread, `poll(2)` over the signalfd (SIGCHLD, SIGTERM), a
//! timerfd (restart back-off, stop grace periods), the listening socket, client
//! connections, the containers' stdio and their OOM watchers.
//!
//! Runtime calls (create, start, exec, delete) block the loop while they run; they are short
//! and this keeps the shim single-threaded, which the runtime library requires.

use std::collections::BTreeMap;
use std::os::fd::{AsFd, OwnedFd};
use std::time::{Duration, Instant};

use rustix::event::{PollFd, PollFlags};
use wharf_runtime::cgroups::OomWatcher;
use wharf_runtime::{CreateOptions, ExecOptions, Runtime};

use super::stdio::{self, Io, Stream};
use super::{log, pause, sys};
use crate::frame;
use crate::protocol::*;
use crate::records::{self, ContainerRecord, PodRecord, StateDir};

/// What the loop needs to know from the command line.
pub struct Config {
    /// Pod id.
    pub pod: String,
    /// State directory.
    pub state: StateDir,
    /// Runtime root.
    pub runtime: Runtime,
    /// Log rotation size.
    pub log_max_size: u64,
    /// Log files kept.
    pub log_max_files: u32,
}

type ConnId = u64;

/// Largest request line.
const MAX_REQUEST: usize = 1 << 20;
/// An attach client this far behind is dropped.
const MAX_BACKLOG: usize = 4 << 20;

#[derive(Debug, Clone, PartialEq, Eq)]
struct Target {
    key: u64,
    exec: Option<String>,
}

#[derive(Debug, PartialEq, Eq)]
enum Mode {
    Requests,
    Waiting,
    Attached(Target),
}

struct Conn {
    fd: OwnedFd,
    inbuf: Vec<u8>,
    outbuf: Vec<u8>,
    mode: Mode,
    close_after_flush: bool,
}

struct Exec {
    id: String,
    pid: i32,
    io: Io,
    exit: Option<ExitRecord>,
    started_at: String,
    waiters: Vec<ConnId>,
    attached: Vec<ConnId>,
}

struct Container {
    key: u64,
    spec: ContainerSpec,
    status: Status,
    pid: Option<i32>,
    pid_start_time: Option<u64>,
    io: Option<Io>,
    started_at: Option<String>,
    run_started: Option<Instant>,
    last_exit: Option<ExitRecord>,
    restart_count: u32,
    restart_at: Option<Instant>,
    delay_ms: u64,
    stopping: bool,
    kill_at: Option<Instant>,
    in_runtime: bool,
    oom: Option<OomWatcher>,
    ooms: u64,
    execs: Vec<Exec>,
    waiters: Vec<ConnId>,
    attached: Vec<ConnId>,
}

/// A failed request.
struct Fail(ErrorKind, String);

type OpResult = Result<Option<Reply>, Fail>;

/// The shim.
pub struct Shim {
    cfg: Config,
    listener: OwnedFd,
    sigfd: OwnedFd,
    timerfd: OwnedFd,
    conns: BTreeMap<ConnId, Conn>,
    next_conn: ConnId,
    containers: Vec<Container>,
    next_key: u64,
    plan: Option<(Vec<u64>, Vec<u64>)>,
    phase: PodPhase,
    failure: Option<String>,
    pause: Option<(i32, u64)>,
    pod_dirty: bool,
    shutting_down: bool,
    /// Children reaped while waiting for another one (see [`Shim::reap_waiting`]), handled
    /// by the event loop next.
    deferred_exits: Vec<(i32, i32)>,
}

#[derive(Clone, Copy)]
enum Src {
    Signal,
    Timer,
    Listener,
    Conn(ConnId),
    Out(u64, Option<usize>, Stream),
    Stdin(u64, Option<usize>),
    Oom(u64),
}

impl Shim {
    /// A shim serving `listener`.
    pub fn new(cfg: Config, listener: OwnedFd, sigfd: OwnedFd, timerfd: OwnedFd) -> Shim {
        Shim {
            cfg,
            listener,
            sigfd,
            timerfd,
            conns: BTreeMap::new(),
            next_conn: 1,
            containers: Vec::new(),
            next_key: 1,
            plan: None,
            phase: PodPhase::None,
            failure: None,
            pause: None,
            pod_dirty: false,
            shutting_down: false,
            deferred_exits: Vec::new(),
        }
    }

    /// Wait for our child `pid` (blocking), reaping every other child that exits meanwhile
    /// (its exit is handled by the event loop afterwards). Waiting for `pid` alone can
    /// deadlock: a container's init killed as PID 1 of its pid namespace does not finish
    /// exiting until every other process of that namespace is reaped, and exec'd processes
    /// are our children, not its.
    fn reap_waiting(&mut self, pid: i32) -> Option<i32> {
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

    fn handle_deferred_exits(&mut self) {
        while !self.deferred_exits.is_empty() {
            for (pid, status) in std::mem::take(&mut self.deferred_exits) {
                self.on_child_exit(pid, status);
            }
        }
    }

    /// Serve until shut down; returns the exit code.
    pub fn run(mut self) -> i32 {
        self.persist_pod();
        let mut trim = true;
        loop {
            self.handle_deferred_exits();
            for sig in sys::take_pending() {
                self.on_signal(sig);
            }
            if self.pod_dirty {
                self.pod_dirty = false;
                self.advance_pod();
                continue;
            }
            if self.shutting_down && !self.any_running() {
                self.finish();
                return 0;
            }
            sys::arm_timer(&self.timerfd, self.next_deadline());
            let (srcs, revents) = {
                let (srcs, mut fds) = self.poll_set();
                // The shim is idle almost all the time: after requests, exits and timers,
                // give back what the work left behind, right before going to sleep (not
                // after every chunk of container output).
                if trim {
                    sys::trim_memory();
                }
                match rustix::event::poll(&mut fds, None) {
                    Ok(_) | Err(rustix::io::Errno::INTR) => {}
                    Err(e) => {
                        log(&format!("poll: {e}"));
                        return 1;
                    }
                }
                let revents: Vec<PollFlags> = fds.iter().map(|f| f.revents()).collect();
                (srcs, revents)
            };
            trim = false;
            for (src, ev) in srcs.into_iter().zip(revents) {
                if !ev.is_empty() {
                    trim |= !matches!(src, Src::Out(..) | Src::Stdin(..));
                    self.dispatch(src, ev);
                }
            }
        }
    }

    fn poll_set(&self) -> (Vec<Src>, Vec<PollFd<'_>>) {
        let mut srcs = vec![Src::Signal, Src::Timer];
        let mut fds = vec![
            PollFd::new(&self.sigfd, PollFlags::IN),
            PollFd::new(&self.timerfd, PollFlags::IN),
        ];
        // Also while shutting down: clients still wait, and are told "shutting down".
        srcs.push(Src::Listener);
        fds.push(PollFd::new(&self.listener, PollFlags::IN));
        for (id, c) in &self.conns {
            let mut flags = PollFlags::empty();
            let stdin_blocked = match &c.mode {
                Mode::Attached(t) => self.io_of(t).is_some_and(|io| !io.stdin_pending.is_empty()),
                _ => false,
            };
            if c.mode != Mode::Waiting && !stdin_blocked && !c.close_after_flush {
                flags |= PollFlags::IN;
            }
            if !c.outbuf.is_empty() {
                flags |= PollFlags::OUT;
            }
            srcs.push(Src::Conn(*id));
            fds.push(PollFd::from_borrowed_fd(c.fd.as_fd(), flags));
        }
        for c in &self.containers {
            if let Some(io) = &c.io {
                push_io(c.key, io, None, &mut srcs, &mut fds);
            }
            for (i, e) in c.execs.iter().enumerate() {
                push_io(c.key, &e.io, Some(i), &mut srcs, &mut fds);
            }
            if let (Some(w), Status::Running) = (&c.oom, c.status) {
                srcs.push(Src::Oom(c.key));
                fds.push(PollFd::from_borrowed_fd(w.fd(), PollFlags::IN));
            }
        }
        (srcs, fds)
    }

    fn dispatch(&mut self, src: Src, ev: PollFlags) {
        match src {
            Src::Signal => {
                for sig in sys::read_signals(&self.sigfd) {
                    self.on_signal(sig);
                }
            }
            Src::Timer => {
                sys::drain_timer(&self.timerfd);
                self.on_timer();
            }
            Src::Listener => self.accept(),
            Src::Conn(id) => self.on_conn(id, ev),
            Src::Out(key, exec, s) => self.on_output(key, exec, s),
            Src::Stdin(key, exec) => {
                if let Some(io) = self.io_mut(&Target {
                    key,
                    exec: exec.and_then(|i| self.exec_name(key, i)),
                }) {
                    io.flush_stdin();
                }
            }
            Src::Oom(key) => {
                if let Some(c) = self.find_key_mut(key)
                    && let Some(w) = c.oom.as_mut()
                    && let Ok(u) = w.read()
                {
                    c.ooms += u.ooms;
                    if u.gone {
                        // Nothing more will come; the exit handler reads it once more.
                        c.oom = None;
                    }
                }
            }
        }
    }

    // ---- signals and timers ----

    fn on_signal(&mut self, sig: i32) {
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

    fn next_deadline(&self) -> Option<Instant> {
        self.containers
            .iter()
            .flat_map(|c| [c.restart_at, c.kill_at])
            .flatten()
            .min()
    }

    fn on_timer(&mut self) {
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
                self.launch(key);
            }
        }
    }

    // ---- connections ----

    fn accept(&mut self) {
        loop {
            match rustix::net::accept_with(
                &self.listener,
                rustix::net::SocketFlags::CLOEXEC | rustix::net::SocketFlags::NONBLOCK,
            ) {
                Ok(fd) => {
                    let id = self.next_conn;
                    self.next_conn += 1;
                    self.conns.insert(
                        id,
                        Conn {
                            fd,
                            inbuf: Vec::new(),
                            outbuf: Vec::new(),
                            mode: Mode::Requests,
                            close_after_flush: false,
                        },
                    );
                }
                Err(rustix::io::Errno::INTR) => {}
                Err(_) => return,
            }
        }
    }

    fn on_conn(&mut self, id: ConnId, ev: PollFlags) {
        if ev.contains(PollFlags::OUT) {
            self.flush_conn(id);
        }
        if !self.conns.contains_key(&id) {
            return;
        }
        if ev.intersects(PollFlags::IN | PollFlags::HUP | PollFlags::ERR) {
            let mut buf = [0u8; 4096];
            let c = self.conns.get_mut(&id).expect("checked");
            match rustix::io::read(&c.fd, &mut buf) {
                Ok(0) => {
                    self.close_conn(id);
                    return;
                }
                Ok(n) => {
                    c.inbuf.extend_from_slice(&buf[..n]);
                }
                Err(rustix::io::Errno::AGAIN) | Err(rustix::io::Errno::INTR) => {}
                Err(_) => {
                    self.close_conn(id);
                    return;
                }
            }
            self.process_input(id);
        }
    }

    fn process_input(&mut self, id: ConnId) {
        loop {
            let Some(c) = self.conns.get_mut(&id) else {
                return;
            };
            match &c.mode {
                Mode::Waiting => return,
                Mode::Requests => {
                    let Some(nl) = c.inbuf.iter().position(|&b| b == b'\n') else {
                        if c.inbuf.len() > MAX_REQUEST {
                            self.close_conn(id);
                        }
                        return;
                    };
                    let line: Vec<u8> = c.inbuf.drain(..=nl).collect();
                    if c.inbuf.is_empty() {
                        c.inbuf = Vec::new();
                    }
                    let resp = match serde_json::from_slice::<Request>(&line) {
                        Err(e) => Some(Response::Error(RemoteError {
                            kind: ErrorKind::Invalid,
                            message: format!("malformed request: {e}"),
                        })),
                        Ok(req) if req.v != VERSION => Some(Response::Error(RemoteError {
                            kind: ErrorKind::Version,
                            message: format!(
                                "protocol version {} is not supported (this shim speaks {VERSION})",
                                req.v
                            ),
                        })),
                        Ok(req) => match self.handle(id, req.op) {
                            Ok(Some(reply)) => Some(Response::Ok(reply)),
                            Ok(None) => None,
                            Err(Fail(kind, message)) => {
                                Some(Response::Error(RemoteError { kind, message }))
                            }
                        },
                    };
                    if let Some(r) = resp {
                        self.respond(id, &r);
                    }
                }
                Mode::Attached(t) => {
                    let t = t.clone();
                    let mut inbuf = std::mem::take(&mut c.inbuf);
                    let mut used = 0;
                    let mut bad = false;
                    while let Some(range) = match frame::parse(&inbuf[used..]) {
                        Ok(r) => r,
                        Err(_) => {
                            bad = true;
                            None
                        }
                    } {
                        let (stream, r) = range;
                        let payload = &inbuf[used + r.start..used + r.end];
                        self.attach_input(&t, stream, payload);
                        used += r.end;
                    }
                    inbuf.drain(..used);
                    if bad {
                        self.close_conn(id);
                        return;
                    }
                    if let Some(c) = self.conns.get_mut(&id) {
                        c.inbuf = inbuf;
                    }
                    return;
                }
            }
        }
    }

    fn attach_input(&mut self, t: &Target, stream: u8, payload: &[u8]) {
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

    fn respond(&mut self, id: ConnId, r: &Response) {
        let Some(c) = self.conns.get_mut(&id) else {
            return;
        };
        let mut line = serde_json::to_vec(r).unwrap_or_default();
        line.push(b'\n');
        c.outbuf.extend_from_slice(&line);
        self.flush_conn(id);
    }

    fn flush_conn(&mut self, id: ConnId) {
        let Some(c) = self.conns.get_mut(&id) else {
            return;
        };
        match sys::send_some(c.fd.as_fd(), &c.outbuf) {
            Ok(n) => {
                c.outbuf.drain(..n);
                if c.outbuf.is_empty() {
                    c.outbuf = Vec::new();
                    if c.close_after_flush {
                        self.close_conn(id);
                    }
                }
            }
            Err(_) => self.close_conn(id),
        }
    }

    fn close_conn(&mut self, id: ConnId) {
        if self.conns.remove(&id).is_none() {
            return;
        }
        for c in &mut self.containers {
            c.waiters.retain(|w| *w != id);
            c.attached.retain(|w| *w != id);
            for e in &mut c.execs {
                e.waiters.retain(|w| *w != id);
                e.attached.retain(|w| *w != id);
            }
        }
    }

    /// Queue a frame for each of `ids`; a client too far behind is dropped.
    fn broadcast(&mut self, ids: &[ConnId], stream: u8, data: &[u8]) {
        for id in ids {
            let Some(c) = self.conns.get_mut(id) else {
                continue;
            };
            if c.outbuf.len() > MAX_BACKLOG {
                log(&format!("attach client {id} is too slow: dropped"));
                self.close_conn(*id);
                continue;
            }
            c.outbuf
                .extend_from_slice(&frame::header(stream, data.len()));
            c.outbuf.extend_from_slice(data);
            self.flush_conn(*id);
        }
    }

    /// Tell waiters and attached clients about an exit (after it is on disk).
    fn announce_exit(&mut self, waiters: Vec<ConnId>, attached: Vec<ConnId>, exit: &ExitRecord) {
        for w in waiters {
            if let Some(c) = self.conns.get_mut(&w) {
                c.mode = Mode::Requests;
                self.respond(w, &Response::Ok(Reply::Exit(exit.clone())));
                self.process_input(w);
            }
        }
        let json = serde_json::to_vec(exit).unwrap_or_default();
        self.broadcast(&attached, frame::EXIT, &json);
        for a in attached {
            if let Some(c) = self.conns.get_mut(&a) {
                c.close_after_flush = true;
                if c.outbuf.is_empty() {
                    self.close_conn(a);
                }
            }
        }
    }

    // ---- lookups ----

    fn find(&self, id: &str) -> Result<usize, Fail> {
        self.containers
            .iter()
            .position(|c| c.spec.id == id)
            .ok_or_else(|| {
                Fail(
                    ErrorKind::NotFound,
                    format!("container {id}: no such container in pod {}", self.cfg.pod),
                )
            })
    }

    fn find_key_mut(&mut self, key: u64) -> Option<&mut Container> {
        self.containers.iter_mut().find(|c| c.key == key)
    }

    fn exec_name(&self, key: u64, i: usize) -> Option<String> {
        let c = self.containers.iter().find(|c| c.key == key)?;
        Some(c.execs.get(i)?.id.clone())
    }

    fn io_of(&self, t: &Target) -> Option<&Io> {
        let c = self.containers.iter().find(|c| c.key == t.key)?;
        match &t.exec {
            None => c.io.as_ref(),
            Some(e) => c.execs.iter().find(|x| &x.id == e).map(|x| &x.io),
        }
    }

    fn io_mut(&mut self, t: &Target) -> Option<&mut Io> {
        let c = self.find_key_mut(t.key)?;
        match &t.exec {
            None => c.io.as_mut(),
            Some(e) => c.execs.iter_mut().find(|x| &x.id == e).map(|x| &mut x.io),
        }
    }

    fn target(&self, id: &str, exec: Option<String>) -> Result<Target, Fail> {
        let c = &self.containers[self.find(id)?];
        if let Some(e) = &exec
            && !c.execs.iter().any(|x| &x.id == e)
        {
            return Err(Fail(
                ErrorKind::NotFound,
                format!("container {id}: no exec process {e}"),
            ));
        }
        Ok(Target { key: c.key, exec })
    }

    fn any_running(&self) -> bool {
        self.containers
            .iter()
            .any(|c| c.status == Status::Running || c.execs.iter().any(|e| e.exit.is_none()))
    }

    // ---- output ----

    fn on_output(&mut self, key: u64, exec: Option<usize>, s: Stream) {
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
            self.broadcast(&ids, s.frame_id(), &buf[..n]);
        }
    }

    // ---- requests ----

    fn handle(&mut self, conn: ConnId, op: Op) -> OpResult {
        match op {
            Op::Ping => Ok(Some(Reply::Pid(std::process::id() as i32))),
            Op::Create { spec } => self.op_create(spec).map(|pid| Some(Reply::Pid(pid))),
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
        }
    }

    fn attach_conn(&mut self, conn: ConnId, t: Target) {
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

    fn op_create(&mut self, spec: ContainerSpec) -> Result<i32, Fail> {
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

    fn check_new(&self, spec: &ContainerSpec) -> Result<(), Fail> {
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

    fn add_container(&mut self, spec: ContainerSpec) -> u64 {
        if let Err(e) = self.cfg.state.write_spec(&spec) {
            log(&format!("container {}: {e}", spec.id));
        }
        let key = self.next_key;
        self.next_key += 1;
        self.containers.push(Container {
            key,
            delay_ms: spec.backoff.initial_ms,
            spec,
            status: Status::Waiting,
            pid: None,
            pid_start_time: None,
            io: None,
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
        });
        key
    }

    /// Runtime create with the container's stdio; status becomes Created.
    fn create(&mut self, key: u64) -> Result<i32, Fail> {
        let (max_size, max_files) = (self.cfg.log_max_size, self.cfg.log_max_files);
        let c = self.find_key_mut(key).expect("exists");
        let id = c.spec.id.clone();
        let spec_stdio = c.spec.stdio.clone();
        let bundle = c.spec.bundle.clone();
        let runtime_fail = |m: String| Fail(ErrorKind::Runtime, m);
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
        c.started_at = None;
        self.persist(key);
        Ok(pid)
    }

    /// Runtime start; status becomes Running. A failed start is recorded as an exit
    /// (reason StartError) and the restart policy applies.
    fn start(&mut self, key: u64) -> Result<(), Fail> {
        let c = self.find_key_mut(key).expect("exists");
        let id = c.spec.id.clone();
        c.started_at = Some(wharf_runtime::clock::now_rfc3339_nano());
        c.run_started = Some(Instant::now());
        match self.cfg.runtime.start(&id) {
            Ok(()) => {
                let c = self.find_key_mut(key).expect("exists");
                if c.status == Status::Created {
                    c.status = Status::Running;
                }
                self.persist(key);
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
    fn launch(&mut self, key: u64) {
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
                    finished_at: wharf_runtime::clock::now_rfc3339_nano(),
                    oom_killed: false,
                    reason: "CreateError".into(),
                    message: Some(msg),
                };
                self.record_exit(key, record);
            }
        }
    }

    fn op_kill(&mut self, id: &str, exec: Option<String>, signal: i32, all: bool) -> OpResult {
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

    fn op_stop(&mut self, id: &str, signal: i32, grace_ms: u64) -> OpResult {
        let i = self.find(id)?;
        let c = &mut self.containers[i];
        c.stopping = true;
        let key = c.key;
        let restart_cancelled = c.restart_at.take().is_some();
        match c.status {
            Status::Running => {
                c.kill_at = Some(Instant::now() + Duration::from_millis(grace_ms));
                if let Err(e) = self.cfg.runtime.kill(id, signal, false) {
                    log(&format!("stop {id}: signal {signal}: {e}"));
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

    fn op_delete(&mut self, id: &str, force: bool) -> OpResult {
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

    fn op_exec(
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
            started_at: wharf_runtime::clock::now_rfc3339_nano(),
            waiters: Vec::new(),
            attached: Vec::new(),
        });
        Ok(created.pid)
    }

    fn op_run_pod(&mut self, plan: PodPlan) -> OpResult {
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
        self.advance_pod();
        Ok(Some(Reply::Done))
    }

    /// Move the pod plan forward: the next init container, or all app containers.
    fn advance_pod(&mut self) {
        let Some((init, apps)) = self.plan.clone() else {
            return;
        };
        if self.phase != PodPhase::Initializing || self.shutting_down {
            return;
        }
        for key in init {
            let Some(c) = self.containers.iter().find(|c| c.key == key) else {
                continue;
            };
            let done = c.status == Status::Exited
                && c.last_exit.as_ref().is_some_and(|e| e.exit_code == 0);
            if done {
                continue;
            }
            if c.status == Status::Waiting && c.restart_at.is_none() && !c.stopping {
                self.launch(key);
            }
            return;
        }
        self.phase = PodPhase::Running;
        self.persist_pod();
        for key in apps {
            let waiting = self
                .containers
                .iter()
                .find(|c| c.key == key)
                .is_some_and(|c| c.status == Status::Waiting && !c.stopping);
            if waiting {
                self.launch(key);
            }
        }
    }

    /// Why the pod cannot run containers any more, if its minimal init exited.
    fn init_exited(&self) -> Option<&String> {
        self.failure
            .as_ref()
            .filter(|f| f.starts_with(PAUSE_EXITED))
    }

    fn op_pause(&mut self, spec: &PauseSpec) -> OpResult {
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

    // ---- exits ----

    fn on_child_exit(&mut self, pid: i32, status: i32) {
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
    fn on_child_exit_reaped(&mut self, pid: i32, status: i32) {
        if self.pause.is_some_and(|(p, _)| p == pid) {
            log(&format!("the pod's init (pid {pid}) exited"));
            self.pause = None;
            if !self.shutting_down {
                // Every process of the shared pid namespace died with it, and no new one
                // can enter it: the pod is over.
                self.phase = PodPhase::Failed;
                self.failure = Some(format!("{PAUSE_EXITED} (pid {pid})"));
                for c in &mut self.containers {
                    c.restart_at = None;
                }
            }
            self.persist_pod();
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
            finished_at: wharf_runtime::clock::now_rfc3339_nano(),
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
        self.announce_exit(waiters, attached, &exit);
    }

    /// The container's init exited (already reaped): drain its output, record the exit,
    /// then tell whoever waits.
    fn container_exited(&mut self, key: u64, status: i32, start_error: Option<(&str, String)>) {
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
            finished_at: wharf_runtime::clock::now_rfc3339_nano(),
            oom_killed: oom,
            reason,
            message,
        };
        self.record_exit(key, record);
    }

    /// Write the exit record (durably), then announce it, then apply the restart policy.
    fn record_exit(&mut self, key: u64, record: ExitRecord) {
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
        let policy = match (c.spec.restart, c.spec.init) {
            // Init containers restart only on failure (Kubernetes).
            (RestartPolicy::Always, true) => RestartPolicy::OnFailure,
            (p, _) => p,
        };
        let restart = !c.stopping
            && match policy {
                RestartPolicy::Always => true,
                RestartPolicy::OnFailure => failed,
                RestartPolicy::Never => false,
            };
        let mut pod_failure = None;
        if restart && may_restart {
            let ran = c.run_started.map(|t| t.elapsed()).unwrap_or_default();
            if ran >= Duration::from_millis(2 * c.spec.backoff.max_ms) {
                c.delay_ms = c.spec.backoff.initial_ms;
            }
            c.restart_at = Some(Instant::now() + Duration::from_millis(c.delay_ms));
            c.delay_ms = (c.delay_ms * 2).min(c.spec.backoff.max_ms);
        } else if c.spec.init && failed && has_plan {
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
        self.persist(key);
        if let Some(f) = pod_failure {
            log(&format!("pod {}: {f}", self.cfg.pod));
            self.phase = PodPhase::Failed;
            self.failure = Some(f);
            self.persist_pod();
        }
        self.announce_exit(waiters, attached, &record);
        self.pod_dirty = true;
    }

    // ---- state ----

    fn state(&self) -> ShimState {
        ShimState {
            pod: self.cfg.pod.clone(),
            phase: self.phase,
            failure: self.failure.clone(),
            pause_pid: self.pause.map(|(p, _)| p),
            containers: self
                .containers
                .iter()
                .map(|c| ContainerInfo {
                    id: c.spec.id.clone(),
                    status: c.status,
                    pid: c.pid,
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
                })
                .collect(),
        }
    }

    fn persist(&self, key: u64) {
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
        };
        if let Err(e) = self.cfg.state.write_status(&c.spec.id, &rec) {
            log(&format!("container {}: {e}", c.spec.id));
        }
    }

    fn persist_pod(&self) {
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

    // ---- shutdown ----

    fn begin_shutdown(&mut self) {
        self.shutting_down = true;
        for c in &mut self.containers {
            c.restart_at = None;
        }
    }

    /// Nothing runs any more: delete what was created but never started, stop the pod's
    /// init, remove the socket and pid file.
    fn finish(&mut self) {
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

fn push_io<'a>(
    key: u64,
    io: &'a Io,
    exec: Option<usize>,
    srcs: &mut Vec<Src>,
    fds: &mut Vec<PollFd<'a>>,
) {
    for s in [Stream::Out, Stream::Err] {
        if let Some(fd) = io.fd(s) {
            srcs.push(Src::Out(key, exec, s));
            fds.push(PollFd::from_borrowed_fd(fd, PollFlags::IN));
        }
    }
    if let (Some(fd), false) = (io.stdin_fd(), io.stdin_pending.is_empty()) {
        srcs.push(Src::Stdin(key, exec));
        fds.push(PollFd::from_borrowed_fd(fd, PollFlags::OUT));
    }
}

fn status_name(s: Status) -> &'static str {
    match s {
        Status::Waiting => "waiting",
        Status::Created => "created",
        Status::Running => "running",
        Status::Exited => "exited",
    }
}

fn runtime_kind(e: &wharf_runtime::Error) -> ErrorKind {
    match e {
        wharf_runtime::Error::NotFound(_) => ErrorKind::NotFound,
        wharf_runtime::Error::Exists(_) => ErrorKind::Exists,
        wharf_runtime::Error::State(_) => ErrorKind::State,
        wharf_runtime::Error::Config(_)
        | wharf_runtime::Error::InvalidId(..)
        | wharf_runtime::Error::Unsupported(_) => ErrorKind::Invalid,
        e if e.exec_status() == Some(127) => ErrorKind::ProgramNotFound,
        e if e.exec_status().is_some() => ErrorKind::ProgramNotExecutable,
        _ => ErrorKind::Runtime,
    }
}
