//! The engine's and CLI's side: start a shim, and talk to it.
//!
//! Every call opens its own connection to `<state-dir>/shim.sock` (cheap on a unix socket),
//! so a [`ShimClient`] can be shared between threads and a long `wait` blocks nobody else.
//! Calls are blocking with a timeout ([`ShimClient::with_timeout`]; `wait` takes its own).

use std::io::{Read, Write};
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use oci_spec::runtime::Process;

use crate::error::{Result, ShimError};
use crate::frame;
use crate::protocol::*;
use crate::records::{SOCKET, StateDir};

/// Default time a request that sets a container up may take (create, start, exec, a pod
/// plan: they run the container's setup and hooks).
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(60);

/// Deadline of every other request (queries, signals, stop, delete): the shim answers them
/// at once, so a shim that takes longer is stuck, and its pod's commands must fail with a
/// clear error instead of hanging every command that touches it.
pub const QUERY_TIMEOUT: Duration = Duration::from_secs(10);

/// How to start a shim.
#[derive(Debug, Clone)]
pub struct SpawnOptions {
    /// The binary to run: `wharf-shim`, or a multi-call `wharf` (run as `wharf shim`).
    /// Default: [`shim_binary`] of the calling binary.
    pub binary: PathBuf,
    /// Pod id.
    pub pod: String,
    /// The pod's state directory (created if missing).
    pub state_dir: PathBuf,
    /// Runtime root for the pod's containers.
    pub runtime_root: PathBuf,
    /// Log rotation size (bytes; default 10 MiB).
    pub log_max_size: Option<u64>,
    /// Log files kept (default 5).
    pub log_max_files: Option<u32>,
    /// How long to wait for the shim to be ready.
    pub timeout: Duration,
    /// The pod's name, shown by `ps` as the shim's (`wharf-shim NAME --pod ID ...`).
    pub display_name: Option<String>,
    /// The cgroup the shim moves itself into once it is first idle (`--cgroup`).
    pub cgroup: Option<String>,
    /// The node's registry of live shims the shim locks its pod's byte in (`--alive`;
    /// see [`crate::liveness`]).
    pub alive: Option<PathBuf>,
}

impl SpawnOptions {
    /// Options with the defaults: this binary, 10 MiB x 5 logs, 30 s to get ready.
    pub fn new(
        pod: impl Into<String>,
        state_dir: impl Into<PathBuf>,
        runtime_root: impl Into<PathBuf>,
    ) -> Self {
        SpawnOptions {
            binary: shim_binary(Path::new("/proc/self/exe")),
            pod: pod.into(),
            state_dir: state_dir.into(),
            runtime_root: runtime_root.into(),
            log_max_size: None,
            log_max_files: None,
            timeout: Duration::from_secs(30),
            display_name: None,
            cgroup: None,
            alive: None,
        }
    }
}

/// The shim binary that goes with the `wharf` binary `wharf`: `wharf-shim` installed beside
/// it, else `wharf` itself (its `shim` subcommand).
pub fn shim_binary(wharf: &Path) -> PathBuf {
    let real = std::fs::canonicalize(wharf).unwrap_or_else(|_| wharf.to_path_buf());
    let beside = real.with_file_name(SHIM_BINARY);
    if real.file_name().is_some_and(|n| n == SHIM_BINARY) || is_executable(&beside) {
        beside
    } else {
        wharf.to_path_buf()
    }
}

/// The file name of the shim's own binary.
pub const SHIM_BINARY: &str = "wharf-shim";

fn is_executable(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// Start a shim for a pod and return a client once its socket accepts connections. The
/// shim is detached from the caller (its own session, reparented away), so it outlives it.
pub fn spawn(opts: &SpawnOptions) -> Result<ShimClient> {
    let err = |message: String| ShimError::Spawn {
        pod: opts.pod.clone(),
        message,
    };
    let (ready_r, ready_w): (OwnedFd, OwnedFd) =
        rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)
            .map_err(|e| err(format!("pipe: {e}")))?;
    let mut cmd = Command::new(&opts.binary);
    if opts.binary.file_name().is_none_or(|n| n != SHIM_BINARY) {
        cmd.arg("shim");
    } else if let Some(name) = &opts.display_name {
        // What ps shows: the pod by name (the binary is found by its path, not argv[0]).
        use std::os::unix::process::CommandExt;
        cmd.arg0(format!("{SHIM_BINARY} {name}"));
    }
    cmd.arg("--pod")
        .arg(&opts.pod)
        .arg("--state-dir")
        .arg(&opts.state_dir)
        .arg("--runtime-root")
        .arg(&opts.runtime_root)
        .arg("--ready-fd")
        .arg("1");
    if let Some(n) = opts.log_max_size {
        cmd.arg("--log-max-size").arg(n.to_string());
    }
    if let Some(n) = opts.log_max_files {
        cmd.arg("--log-max-files").arg(n.to_string());
    }
    if let Some(c) = &opts.cgroup {
        cmd.arg("--cgroup").arg(c);
    }
    if let Some(a) = &opts.alive {
        cmd.arg("--alive").arg(a);
    }
    // The ready pipe is the shim's standard output (it moves it off fd 1 first thing): no
    // hook between fork and exec, so the spawn is a posix_spawn (vfork-like). A fork of a
    // large, busy daemon copies its page tables and makes each page it writes afterwards
    // fault once, for every pod started.
    cmd.stdin(Stdio::null())
        .stdout(Stdio::from(ready_w))
        .stderr(Stdio::null());
    let status = cmd
        .status()
        .map_err(|e| err(format!("run {}: {e}", opts.binary.display())))?;
    // Our copy of the write end: the shim's exit without a word must read as EOF.
    drop(cmd);
    if !status.success() {
        // The shim printed why on the ready pipe, if it got that far.
        let msg = read_ready(&ready_r, opts.timeout).unwrap_or_default();
        return Err(err(if msg.is_empty() {
            format!("{} shim exited with {status}", opts.binary.display())
        } else {
            msg
        }));
    }
    let line = read_ready(&ready_r, opts.timeout).map_err(err)?;
    match line.as_str() {
        "ok" => ShimClient::connect(&opts.state_dir),
        "" => Err(err(format!(
            "the shim exited before it was ready (see {})",
            opts.state_dir.join(crate::records::SHIM_LOG).display()
        ))),
        other => Err(err(other.trim_start_matches("error: ").to_string())),
    }
}

/// Read the shim's one-line readiness report (empty if it closed the pipe without one).
fn read_ready(fd: &OwnedFd, timeout: Duration) -> std::result::Result<String, String> {
    use rustix::event::{PollFd, PollFlags, poll};
    let deadline = std::time::Instant::now() + timeout;
    let mut data = Vec::new();
    loop {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        if left.is_zero() {
            return Err(format!(
                "the shim did not report ready within {}s",
                timeout.as_secs()
            ));
        }
        let ts = rustix::time::Timespec {
            tv_sec: left.as_secs() as i64,
            tv_nsec: left.subsec_nanos() as i64,
        };
        let mut fds = [PollFd::new(fd, PollFlags::IN)];
        match poll(&mut fds, Some(&ts)) {
            Ok(_) | Err(rustix::io::Errno::INTR) => {}
            Err(e) => return Err(format!("wait for the shim: {e}")),
        }
        let mut buf = [0u8; 512];
        match rustix::io::read(fd, &mut buf) {
            Ok(0) => break,
            Ok(n) => {
                data.extend_from_slice(&buf[..n]);
                if data.contains(&b'\n') {
                    break;
                }
            }
            Err(rustix::io::Errno::INTR) | Err(rustix::io::Errno::AGAIN) => {}
            Err(e) => return Err(format!("read the shim's ready pipe: {e}")),
        }
    }
    let text = String::from_utf8_lossy(&data);
    Ok(text.lines().next().unwrap_or("").to_string())
}

/// A handle on a running shim.
#[derive(Debug, Clone)]
pub struct ShimClient {
    state_dir: PathBuf,
    timeout: Duration,
}

impl ShimClient {
    /// Connect to the shim of `state_dir` (checks that it answers). A shim that is gone
    /// gives [`ShimError::NotRunning`].
    pub fn connect(state_dir: impl Into<PathBuf>) -> Result<ShimClient> {
        Self::connect_with_timeout(state_dir, DEFAULT_TIMEOUT)
    }

    /// [`ShimClient::connect`] with [`ShimClient::with_timeout`] applied from the first
    /// request (the liveness check) on.
    pub fn connect_with_timeout(
        state_dir: impl Into<PathBuf>,
        timeout: Duration,
    ) -> Result<ShimClient> {
        let c = ShimClient {
            state_dir: state_dir.into(),
            timeout,
        };
        c.ping()?;
        Ok(c)
    }

    /// Use `timeout` for every request (except `wait`, which takes its own).
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// The pod's state directory.
    pub fn state_dir(&self) -> &Path {
        &self.state_dir
    }

    /// The state directory's records (readable whether or not the shim runs).
    pub fn records(&self) -> StateDir {
        StateDir::new(&self.state_dir)
    }

    fn open(&self, op: &str) -> Result<UnixStream> {
        // The socket alone does not tell: a container created but not started yet still
        // holds a copy of a dead shim's listening socket (it closes on exec), so connecting
        // would succeed and nobody would answer.
        if !self.records().shim_alive() {
            return Err(ShimError::NotRunning {
                state_dir: self.state_dir.clone(),
                cause: std::io::Error::new(
                    std::io::ErrorKind::NotFound,
                    "shim.pid names no running shim",
                ),
            });
        }
        // Through /proc/self/fd: no 108-byte limit on the state directory's path.
        let dir = std::fs::File::open(&self.state_dir).map_err(|cause| ShimError::NotRunning {
            state_dir: self.state_dir.clone(),
            cause,
        })?;
        let path = format!("/proc/self/fd/{}/{SOCKET}", dir.as_raw_fd());
        let stream = UnixStream::connect(&path).map_err(|cause| ShimError::NotRunning {
            state_dir: self.state_dir.clone(),
            cause,
        })?;
        stream
            .set_write_timeout(Some(self.timeout))
            .and_then(|_| stream.set_read_timeout(Some(self.timeout)))
            .map_err(|cause| self.conn_err(op, cause))?;
        Ok(stream)
    }

    fn conn_err(&self, op: &str, cause: std::io::Error) -> ShimError {
        self.conn_err_after(op, cause, None)
    }

    fn conn_err_after(
        &self,
        op: &str,
        cause: std::io::Error,
        deadline: Option<Duration>,
    ) -> ShimError {
        if let Some(d) = deadline
            && matches!(
                cause.kind(),
                std::io::ErrorKind::TimedOut | std::io::ErrorKind::WouldBlock
            )
        {
            return ShimError::Timeout {
                state_dir: self.state_dir.clone(),
                op: op.to_string(),
                secs: d.as_secs().max(1),
            };
        }
        ShimError::Connection {
            state_dir: self.state_dir.clone(),
            op: op.to_string(),
            cause,
        }
    }

    /// Send one request on `stream` and read its answer.
    fn exchange(
        &self,
        stream: &mut UnixStream,
        what: &str,
        op: Op,
        read_timeout: Option<Duration>,
    ) -> Result<Reply> {
        let mut line =
            serde_json::to_vec(&Request { v: VERSION, op }).map_err(|e| ShimError::Protocol {
                state_dir: self.state_dir.clone(),
                op: what.into(),
                message: e.to_string(),
            })?;
        line.push(b'\n');
        stream
            .write_all(&line)
            .map_err(|e| self.conn_err(what, e))?;
        stream
            .set_read_timeout(read_timeout)
            .map_err(|e| self.conn_err(what, e))?;
        // Up to the newline and not past it: after an attach answer, the stream's frames
        // follow on the same socket and must not be swallowed by a buffer. What has
        // arrived is peeked at and only the answer's bytes are taken (two calls for most
        // answers, where reading byte by byte took one per byte).
        let mut answer = Vec::new();
        let mut buf = [0u8; 4096];
        loop {
            let peeked = rustix::net::recv(&*stream, &mut buf, rustix::net::RecvFlags::PEEK)
                .map(|(n, _)| n)
                .map_err(std::io::Error::from);
            let n = match peeked {
                Ok(0) => {
                    return Err(self.conn_err(
                        what,
                        std::io::Error::new(
                            std::io::ErrorKind::UnexpectedEof,
                            "the shim closed the connection without answering",
                        ),
                    ));
                }
                Ok(n) => n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(self.conn_err_after(what, e, read_timeout)),
            };
            let end = buf[..n].iter().position(|&c| c == b'\n');
            let take = end.map_or(n, |i| i + 1);
            stream
                .read_exact(&mut buf[..take])
                .map_err(|e| self.conn_err_after(what, e, read_timeout))?;
            answer.extend_from_slice(&buf[..end.unwrap_or(n)]);
            if end.is_some() {
                break;
            }
        }
        match serde_json::from_slice::<Response>(&answer) {
            Ok(Response::Ok(r)) => Ok(r),
            Ok(Response::Error(e)) => Err(ShimError::Remote {
                state_dir: self.state_dir.clone(),
                op: what.into(),
                kind: e.kind,
                message: e.message,
            }),
            Err(e) => Err(ShimError::Protocol {
                state_dir: self.state_dir.clone(),
                op: what.into(),
                message: format!("{e}: {}", String::from_utf8_lossy(&answer)),
            }),
        }
    }

    fn call(&self, what: &str, op: Op) -> Result<Reply> {
        let mut s = self.open(what)?;
        let deadline = match op {
            Op::Create { .. }
            | Op::Start { .. }
            | Op::Exec { .. }
            | Op::RunPod { .. }
            | Op::PauseInit { .. } => self.timeout,
            _ => self.timeout.min(QUERY_TIMEOUT),
        };
        self.exchange(&mut s, what, op, Some(deadline))
    }

    fn unexpected(&self, what: &str, r: Reply) -> ShimError {
        ShimError::Protocol {
            state_dir: self.state_dir.clone(),
            op: what.into(),
            message: format!("unexpected answer {r:?}"),
        }
    }

    fn done(&self, what: &str, op: Op) -> Result<()> {
        match self.call(what, op)? {
            Reply::Done => Ok(()),
            r => Err(self.unexpected(what, r)),
        }
    }

    fn pid(&self, what: &str, op: Op) -> Result<i32> {
        match self.call(what, op)? {
            Reply::Pid(p) => Ok(p),
            r => Err(self.unexpected(what, r)),
        }
    }

    /// The shim's pid (a liveness check).
    pub fn ping(&self) -> Result<i32> {
        self.pid("ping", Op::Ping)
    }

    /// Create a container (runtime create with its stdio); returns its init's pid.
    pub fn create(&self, spec: &ContainerSpec) -> Result<i32> {
        self.pid(
            &format!("create {}", spec.id),
            Op::Create {
                spec: Box::new(spec.clone()),
            },
        )
    }

    /// Start a created container.
    pub fn start(&self, id: &str) -> Result<()> {
        self.done(&format!("start {id}"), Op::Start { id: id.into() })
    }

    /// Send `signal` to the container's init, or to all its processes.
    pub fn kill(&self, id: &str, signal: i32, all: bool) -> Result<()> {
        self.done(
            &format!("kill {id}"),
            Op::Kill {
                id: id.into(),
                exec_id: None,
                signal,
                all,
            },
        )
    }

    /// Send `signal` to an exec process.
    pub fn kill_exec(&self, id: &str, exec_id: &str, signal: i32) -> Result<()> {
        self.done(
            &format!("kill {id}/{exec_id}"),
            Op::Kill {
                id: id.into(),
                exec_id: Some(exec_id.into()),
                signal,
                all: false,
            },
        )
    }

    /// Stop a container for good (no more restarts): `signal`, then SIGKILL after `grace`.
    /// Returns at once; [`ShimClient::wait`] tells when it has exited.
    pub fn stop(&self, id: &str, signal: i32, grace: Duration) -> Result<()> {
        self.done(
            &format!("stop {id}"),
            Op::Stop {
                id: id.into(),
                signal,
                grace_ms: grace.as_millis() as u64,
            },
        )
    }

    /// Delete a container (runtime delete) and forget it; refused while it runs unless
    /// `force`.
    pub fn delete(&self, id: &str, force: bool) -> Result<()> {
        self.done(
            &format!("delete {id}"),
            Op::Delete {
                id: id.into(),
                force,
            },
        )
    }

    /// Every container of the pod.
    pub fn state(&self) -> Result<ShimState> {
        match self.call("state", Op::State)? {
            Reply::State(s) => Ok(s),
            r => Err(self.unexpected("state", r)),
        }
    }

    /// One container's full status, in one call.
    pub fn container(&self, id: &str) -> Result<ContainerInfo> {
        let what = format!("status {id}");
        match self.call(&what, Op::Status { id: id.into() })? {
            Reply::Container(c) => Ok(*c),
            r => Err(self.unexpected(&what, r)),
        }
    }

    /// Answer DNS questions in the pod ([`crate::protocol::Op::Dns`]).
    pub fn dns(&self, spec: &crate::protocol::DnsSpec) -> Result<()> {
        self.done("dns", Op::Dns { spec: spec.clone() })
    }

    /// Open the container's log file again at its path (after it was moved away).
    pub fn reopen_log(&self, id: &str) -> Result<()> {
        self.done(&format!("reopen_log {id}"), Op::ReopenLog { id: id.into() })
    }

    /// Events from now on, as they happen (see [`Events`]).
    pub fn subscribe(&self) -> Result<Events> {
        let mut s = self.open("subscribe")?;
        match self.exchange(&mut s, "subscribe", Op::Subscribe, Some(self.timeout))? {
            Reply::Done => {
                s.set_read_timeout(None)
                    .map_err(|e| self.conn_err("subscribe", e))?;
                Ok(Events {
                    reader: std::io::BufReader::new(s),
                })
            }
            r => Err(self.unexpected("subscribe", r)),
        }
    }

    /// Wait until the container exits (at once if it has; with a restart pending, the
    /// last exit). `timeout` None waits for ever.
    pub fn wait(&self, id: &str, timeout: Option<Duration>) -> Result<ExitRecord> {
        self.wait_op(format!("wait {id}"), id, None, timeout)
    }

    /// Wait until an exec process exits.
    pub fn wait_exec(
        &self,
        id: &str,
        exec_id: &str,
        timeout: Option<Duration>,
    ) -> Result<ExitRecord> {
        self.wait_op(
            format!("wait {id}/{exec_id}"),
            id,
            Some(exec_id.into()),
            timeout,
        )
    }

    fn wait_op(
        &self,
        what: String,
        id: &str,
        exec_id: Option<String>,
        timeout: Option<Duration>,
    ) -> Result<ExitRecord> {
        let mut s = self.open(&what)?;
        let op = Op::Wait {
            id: id.into(),
            exec_id,
        };
        match self.exchange(&mut s, &what, op, timeout)? {
            Reply::Exit(e) => Ok(e),
            r => Err(self.unexpected(&what, r)),
        }
    }

    /// Start a process in a running container; returns its pid.
    pub fn exec(
        &self,
        id: &str,
        exec_id: &str,
        process: &Process,
        stdio: &StdioSpec,
    ) -> Result<i32> {
        self.pid(
            &format!("exec {id}/{exec_id}"),
            Op::Exec {
                id: id.into(),
                exec_id: exec_id.into(),
                process: Box::new(process.clone()),
                stdio: stdio.clone(),
                attach: false,
            },
        )
    }

    /// Start a process and attach to it in one step (no output is missed).
    pub fn exec_attach(
        &self,
        id: &str,
        exec_id: &str,
        process: &Process,
        stdio: &StdioSpec,
    ) -> Result<(i32, Attach)> {
        let what = format!("exec {id}/{exec_id}");
        let mut s = self.open(&what)?;
        let op = Op::Exec {
            id: id.into(),
            exec_id: exec_id.into(),
            process: Box::new(process.clone()),
            stdio: stdio.clone(),
            attach: true,
        };
        match self.exchange(&mut s, &what, op, Some(self.timeout))? {
            Reply::Pid(pid) => Ok((pid, Attach::new(s).map_err(|e| self.conn_err(&what, e))?)),
            r => Err(self.unexpected(&what, r)),
        }
    }

    /// Attach to a container's (or exec process's) stdio. Dropping the [`Attach`] detaches;
    /// attaching again later works.
    pub fn attach(&self, id: &str, exec_id: Option<&str>) -> Result<Attach> {
        let what = format!("attach {id}");
        let mut s = self.open(&what)?;
        let op = Op::Attach {
            id: id.into(),
            exec_id: exec_id.map(str::to_string),
        };
        match self.exchange(&mut s, &what, op, Some(self.timeout))? {
            Reply::Done => Attach::new(s).map_err(|e| self.conn_err(&what, e)),
            r => Err(self.unexpected(&what, r)),
        }
    }

    /// Set the terminal size of a tty process.
    pub fn resize(&self, id: &str, exec_id: Option<&str>, rows: u16, cols: u16) -> Result<()> {
        self.done(
            &format!("resize {id}"),
            Op::Resize {
                id: id.into(),
                exec_id: exec_id.map(str::to_string),
                rows,
                cols,
            },
        )
    }

    /// Run a pod plan (init containers in order, then the app containers).
    pub fn run_pod(&self, plan: &PodPlan) -> Result<()> {
        self.done("run_pod", Op::RunPod { plan: plan.clone() })
    }

    /// Start the pod's minimal init in a new pid namespace; returns its pid (containers
    /// join `/proc/<pid>/ns/pid`).
    pub fn pause_init(&self, spec: &PauseSpec) -> Result<i32> {
        self.pid("pause_init", Op::PauseInit { spec: spec.clone() })
    }

    /// Ask the shim to exit once no container runs.
    pub fn shutdown(&self) -> Result<()> {
        self.done("shutdown", Op::Shutdown)
    }
}

/// A subscription: the pod's events as its shim pushes them. Dropping it unsubscribes.
#[derive(Debug)]
pub struct Events {
    reader: std::io::BufReader<UnixStream>,
}

impl Events {
    /// The next event (blocking), or None once the shim has gone.
    pub fn next_event(&mut self) -> std::io::Result<Option<Event>> {
        use std::io::BufRead;
        let mut line = String::new();
        loop {
            line.clear();
            // Lines are small; a bound still keeps a confused peer from growing us.
            let n = (&mut self.reader).take(1 << 20).read_line(&mut line)?;
            if n == 0 {
                return Ok(None);
            }
            if line.trim().is_empty() {
                continue;
            }
            return serde_json::from_str(&line)
                .map(Some)
                .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e));
        }
    }

    /// Limit how long [`Events::next_event`] blocks (None: for ever).
    pub fn set_read_timeout(&self, t: Option<Duration>) -> std::io::Result<()> {
        self.reader.get_ref().set_read_timeout(t)
    }

    /// Stop the subscription from another thread (the blocked reader gets None).
    pub fn closer(&self) -> std::io::Result<EventsCloser> {
        Ok(EventsCloser(self.reader.get_ref().try_clone()?))
    }
}

/// Ends an [`Events`] subscription from elsewhere.
#[derive(Debug)]
pub struct EventsCloser(UnixStream);

impl EventsCloser {
    /// Shut the connection down.
    pub fn close(&self) {
        let _ = self.0.shutdown(std::net::Shutdown::Both);
    }
}

/// What an attach stream delivers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Output {
    /// Standard output (or the terminal).
    Stdout(Vec<u8>),
    /// Standard error.
    Stderr(Vec<u8>),
    /// The process exited; the stream ends.
    Exit(ExitRecord),
}

/// An attached process's stdio. Reading and writing may happen on two threads: use
/// [`Attach::input`] for the writing side.
#[derive(Debug)]
pub struct Attach {
    stream: UnixStream,
}

/// The writing half of an [`Attach`].
#[derive(Debug)]
pub struct AttachInput {
    stream: UnixStream,
}

impl Attach {
    fn new(stream: UnixStream) -> std::io::Result<Attach> {
        stream.set_read_timeout(None)?;
        stream.set_write_timeout(None)?;
        Ok(Attach { stream })
    }

    /// The next output, or None when the shim closed the stream.
    pub fn recv(&mut self) -> std::io::Result<Option<Output>> {
        loop {
            let Some((stream, payload)) = frame::read(&mut self.stream)? else {
                return Ok(None);
            };
            return Ok(Some(match stream {
                frame::STDOUT => Output::Stdout(payload),
                frame::STDERR => Output::Stderr(payload),
                frame::EXIT => Output::Exit(
                    serde_json::from_slice(&payload)
                        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))?,
                ),
                _ => continue,
            }));
        }
    }

    /// Limit how long [`Attach::recv`] blocks (None: for ever).
    pub fn set_read_timeout(&self, t: Option<Duration>) -> std::io::Result<()> {
        self.stream.set_read_timeout(t)
    }

    /// A second handle for sending input from another thread.
    pub fn input(&self) -> std::io::Result<AttachInput> {
        Ok(AttachInput {
            stream: self.stream.try_clone()?,
        })
    }

    /// Send bytes to the process's stdin.
    pub fn write_stdin(&mut self, data: &[u8]) -> std::io::Result<()> {
        write_stdin(&mut self.stream, data)
    }

    /// Close the process's stdin (pipes; a terminal ignores it).
    pub fn close_stdin(&mut self) -> std::io::Result<()> {
        frame::write(&mut self.stream, frame::STDIN, &[])
    }

    /// Resize the terminal.
    pub fn resize(&mut self, rows: u16, cols: u16) -> std::io::Result<()> {
        resize(&mut self.stream, rows, cols)
    }

    /// Detach (the process keeps running).
    pub fn detach(self) {}
}

impl AttachInput {
    /// Send bytes to the process's stdin.
    pub fn write_stdin(&mut self, data: &[u8]) -> std::io::Result<()> {
        write_stdin(&mut self.stream, data)
    }

    /// Close the process's stdin.
    pub fn close_stdin(&mut self) -> std::io::Result<()> {
        frame::write(&mut self.stream, frame::STDIN, &[])
    }

    /// Resize the terminal.
    pub fn resize(&mut self, rows: u16, cols: u16) -> std::io::Result<()> {
        resize(&mut self.stream, rows, cols)
    }
}

fn write_stdin(s: &mut UnixStream, data: &[u8]) -> std::io::Result<()> {
    for chunk in data.chunks(64 * 1024) {
        frame::write(s, frame::STDIN, chunk)?;
    }
    Ok(())
}

fn resize(s: &mut UnixStream, rows: u16, cols: u16) -> std::io::Result<()> {
    let r = rows.to_be_bytes();
    let c = cols.to_be_bytes();
    frame::write(s, frame::RESIZE, &[r[0], r[1], c[0], c[1]])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_shim_binary_beside_wharf_is_preferred_and_wharf_itself_is_the_fallback() {
        use std::os::unix::fs::PermissionsExt;
        let t = tempfile::tempdir().unwrap();
        let exe = |p: &Path, mode: u32| {
            std::fs::write(p, "").unwrap();
            std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).unwrap();
        };
        let wharf = t.path().join("wharf");
        exe(&wharf, 0o755);
        let real = std::fs::canonicalize(&wharf).unwrap();
        // Alone: `wharf shim`.
        assert_eq!(shim_binary(&wharf), wharf);
        // A file that cannot be run does not count.
        let shim = t.path().join(SHIM_BINARY);
        exe(&shim, 0o644);
        assert_eq!(shim_binary(&wharf), wharf);
        // Installed beside it: that one, also when `wharf` is reached through a link
        // (wharf-runc).
        exe(&shim, 0o755);
        assert_eq!(shim_binary(&wharf), real.with_file_name(SHIM_BINARY));
        let link = t.path().join("wharf-runc");
        std::os::unix::fs::symlink(&wharf, &link).unwrap();
        assert_eq!(shim_binary(&link), real.with_file_name(SHIM_BINARY));
        assert_eq!(shim_binary(&shim), real.with_file_name(SHIM_BINARY));
    }
}
