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

mod actions;
mod connections;
mod events;
mod eviction;
mod exits;
mod health;
mod io;
mod kube;
mod lifecycle;
mod requests;

use super::stdio::{self, Io, Stream};
use super::{dns, log, pause, sys};
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
    /// The cgroup the shim moves itself into once it is first quiet (its pod's
    /// `<pod>/wharf-shim`), off the path of the requests that start the pod.
    pub cgroup: Option<String>,
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
    /// A subscriber: gets [`Event`] lines, sends nothing.
    Events,
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
    created_at: Option<String>,
    started_at: Option<String>,
    run_started: Option<Instant>,
    last_exit: Option<ExitRecord>,
    restart_count: u32,
    restart_at: Option<Instant>,
    delay_ms: u64,
    /// The at-once first restart of this back-off series was taken.
    immediate_used: bool,
    stopping: bool,
    kill_at: Option<Instant>,
    in_runtime: bool,
    oom: Option<OomWatcher>,
    ooms: u64,
    execs: Vec<Exec>,
    waiters: Vec<ConnId>,
    attached: Vec<ConnId>,
    health: Option<health::Health>,
    kube: Option<kube::KubeRun>,
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
    /// Moved into `cfg.cgroup` already (or tried).
    cgroup_joined: std::cell::Cell<bool>,
    /// Disk emptyDirs measured for eviction, and when next.
    disk_limits: Vec<DiskLimit>,
    next_disk_check: Option<Instant>,
    /// The pod's DNS responder (a pod on a user network).
    dns: Option<dns::Dns>,
}

#[derive(Clone, Copy)]
enum Src {
    DnsQuery,
    DnsAnswer,
    Signal,
    Timer,
    Listener,
    Conn(ConnId),
    Out(u64, Option<usize>, Stream),
    Stdin(u64, Option<usize>),
    Oom(u64),
}

/// How long the shim's work must have been quiet before it trims its memory.
const TRIM_AFTER: rustix::time::Timespec = rustix::time::Timespec {
    tv_sec: 0,
    tv_nsec: 200_000_000,
};

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
            cgroup_joined: std::cell::Cell::new(false),
            disk_limits: Vec::new(),
            next_disk_check: None,
            dns: None,
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
                // The shim is idle almost all the time: once requests, exits and timers
                // (not chunks of container output) have been quiet for TRIM_AFTER, it gives
                // back what their work left behind. Not at once: reading its own smaps
                // and faulting its code back in cost about half a millisecond, which a
                // burst of requests (a pod being started) would pay at every step.
                loop {
                    let timeout = trim.then_some(&TRIM_AFTER);
                    match rustix::event::poll(&mut fds, timeout) {
                        Ok(0) if trim => {
                            // Quiet since the last work: give back what it left behind,
                            // and sleep on the same set (running little code in between,
                            // which would fault its pages back in).
                            if !self.cgroup_joined.replace(true)
                                && let Some(path) = &self.cfg.cgroup
                            {
                                sys::join_cgroup(path);
                            }
                            sys::trim_memory();
                            trim = false;
                        }
                        Ok(_) | Err(rustix::io::Errno::INTR) => break,
                        Err(e) => {
                            log(&format!("poll: {e}"));
                            return 1;
                        }
                    }
                }
                let revents: Vec<PollFlags> = fds.iter().map(|f| f.revents()).collect();
                (srcs, revents)
            };
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
        if let Some(d) = &self.dns {
            srcs.push(Src::DnsQuery);
            fds.push(PollFd::from_borrowed_fd(d.listen_fd(), PollFlags::IN));
            srcs.push(Src::DnsAnswer);
            fds.push(PollFd::from_borrowed_fd(d.upstream_fd(), PollFlags::IN));
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
            Src::DnsQuery => {
                if let Some(d) = self.dns.as_mut() {
                    d.on_query();
                }
            }
            Src::DnsAnswer => {
                if let Some(d) = self.dns.as_mut() {
                    d.on_answer();
                }
            }
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
                    if u.ooms > 0 {
                        let id = c.spec.id.clone();
                        self.publish(EventKind::Oom { id });
                    }
                }
            }
        }
    }

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
