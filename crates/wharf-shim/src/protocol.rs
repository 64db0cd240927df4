//! The shim's wire protocol (version [`VERSION`]).
//!
//! A client connects to `<state-dir>/shim.sock` (a unix stream socket) and sends requests,
//! one JSON object per line; the shim answers each with one JSON line, in order:
//!
//! ```text
//! -> {"v":1,"op":"start","id":"web"}
//! <- {"ok":"done"}
//! -> {"v":1,"op":"wait","id":"web"}
//! <- {"ok":{"exit":{"exit_code":0,"finished_at":"...","oom_killed":false,"reason":"Completed"}}}
//! -> {"v":1,"op":"kill","id":"nope","signal":15}
//! <- {"error":{"kind":"not_found","message":"container nope: no such container in this pod"}}
//! ```
//!
//! `subscribe` turns the connection into a stream of [`Event`] lines.
//!
//! A request with another `v` gets a `version` error. `wait` answers when the process exits
//! (at once if it already has). After the answer to `attach` (and to `exec` with
//! `attach: true`) the connection carries [`crate::frame`]s in both directions instead of
//! JSON: stdin to the process, stdout/stderr/exit to the client; closing the connection
//! detaches.

use std::path::PathBuf;

use oci_spec::runtime::Process;
use serde::{Deserialize, Serialize};

/// Protocol version carried in every request.
pub const VERSION: u32 = 1;

/// One request line.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Request {
    /// Protocol version ([`VERSION`]).
    pub v: u32,
    /// What to do.
    #[serde(flatten)]
    pub op: Op,
}

/// The operations.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum Op {
    /// Liveness check; answers [`Reply::Pid`] with the shim's pid.
    Ping,
    /// Create a container from its bundle (runtime create), ready to start.
    Create {
        /// What to create (boxed: the largest request by far).
        spec: Box<ContainerSpec>,
    },
    /// Start a created container.
    Start {
        /// Container id.
        id: String,
    },
    /// Send a signal to a container's init (or every process of it with `all`), or to an
    /// exec process.
    Kill {
        /// Container id.
        id: String,
        /// Exec process instead of the init.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        exec_id: Option<String>,
        /// Signal number.
        signal: i32,
        /// Every process of the container (its cgroup).
        #[serde(default)]
        all: bool,
    },
    /// Stop a container for good: no more restarts, `signal`, then SIGKILL after `grace_ms`
    /// if it still runs. Answers at once; `wait` tells when it is over.
    Stop {
        /// Container id.
        id: String,
        /// First signal (usually SIGTERM).
        signal: i32,
        /// Grace period before SIGKILL.
        grace_ms: u64,
    },
    /// Delete a container in the runtime and forget it (refused while it runs unless `force`).
    Delete {
        /// Container id.
        id: String,
        /// Kill it first if it runs.
        #[serde(default)]
        force: bool,
    },
    /// The pod's state: every container and exec process.
    State,
    /// Answer when the process exits (at once if it has).
    Wait {
        /// Container id.
        id: String,
        /// Exec process instead of the init.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        exec_id: Option<String>,
    },
    /// Start another process in a running container.
    Exec {
        /// Container id.
        id: String,
        /// Name of the exec process, unique within the container.
        exec_id: String,
        /// The process (its `terminal` is set from `stdio.terminal`).
        process: Box<Process>,
        /// Its stdio (`log` is allowed too).
        stdio: StdioSpec,
        /// Turn this connection into the attach stream of the new process right away (so
        /// no output is missed).
        #[serde(default)]
        attach: bool,
    },
    /// Turn this connection into a stream of the process's stdio.
    Attach {
        /// Container id.
        id: String,
        /// Exec process instead of the init.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        exec_id: Option<String>,
    },
    /// Set the terminal size of a tty process.
    Resize {
        /// Container id.
        id: String,
        /// Exec process instead of the init.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        exec_id: Option<String>,
        /// Rows.
        rows: u16,
        /// Columns.
        cols: u16,
    },
    /// Run a pod: init containers one after another, each to a successful exit, then the
    /// app containers. Answers once the plan is accepted; progress shows in `state`.
    RunPod {
        /// The containers.
        plan: PodPlan,
    },
    /// Start the pod's minimal init as PID 1 of a new pid namespace (for pods that share
    /// their pid namespace); answers its pid.
    PauseInit {
        /// Namespaces it joins.
        spec: PauseSpec,
    },
    /// Exit once no container runs (pending restarts are cancelled).
    Shutdown,
    /// One container's full status; answers [`Reply::Container`].
    Status {
        /// Container id.
        id: String,
    },
    /// Open the container's log file again at its path, after someone moved it away
    /// (kubelet rotates CRI logs itself, then asks for this: ReopenContainerLog).
    ReopenLog {
        /// Container id.
        id: String,
    },
    /// Turn this connection into a stream of [`Event`]s, one JSON line each, from now on
    /// (what happened before is in the state directory's records).
    Subscribe,
    /// Answer DNS questions in the pod (a pod on a user network): the names of its hosts
    /// file at 127.0.0.11:53, every other question forwarded upstream.
    Dns {
        /// What to serve.
        spec: DnsSpec,
    },
}

/// The pod's DNS responder.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct DnsSpec {
    /// The pod's network namespace (its pinned file).
    pub netns: PathBuf,
    /// The pod's hosts file, whose names are answered.
    pub hosts: PathBuf,
    /// Resolvers other questions go to (`ip:port`).
    pub upstream: Vec<String>,
}

/// What the engine asks the shim to run.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct ContainerSpec {
    /// Container id (a runtime id: letters, digits, `_+-.`).
    pub id: String,
    /// Bundle directory: config.json written and rootfs mounted by the engine.
    pub bundle: PathBuf,
    /// Where its stdio goes.
    pub stdio: StdioSpec,
    /// Restart policy, applied by the shim.
    #[serde(default)]
    pub restart: RestartPolicy,
    /// Restart back-off.
    #[serde(default)]
    pub backoff: Backoff,
    /// An init container (runs to completion before the app containers of a [`PodPlan`]).
    #[serde(default)]
    pub init: bool,
    /// At most this many restarts (docker's `on-failure:N`); None: no limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_restarts: Option<u32>,
    /// A command the shim runs (detached, its output to the shim's log) once the container
    /// has exited for good, no restart following: the engine's removal of a container that
    /// removes itself (`run -d --rm`), as podman's conmon runs its exit command.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub exit_command: Vec<String>,
    /// A health check the shim runs in the container while it runs (docker's
    /// HEALTHCHECK); its state is in the container's `health.json`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub health: Option<HealthSpec>,
    /// kubelet's probes and lifecycle hooks, run by the shim; their state is in the
    /// container's `probes.json`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kube: Option<KubeSpec>,
    /// Paths inside volumes (Kubernetes' subPath) the shim stages right before each
    /// runtime create, as the kubelet prepares them at each start: the bundle's mounts
    /// bind the stages.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub sub_paths: Vec<SubPathStage>,
}

/// A path inside a volume, bind-mounted on a stage of its own (`wharf_runtime::sub_path`).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct SubPathStage {
    /// The volume's directory on the host.
    pub volume: PathBuf,
    /// The path inside it (relative, made a directory when missing).
    pub path: PathBuf,
    /// Where it is bind-mounted.
    pub stage: PathBuf,
    /// A missing path: made a directory (the kubelet's subPath; writable by all in an
    /// emptyDir), or an error (docker's `volume-subpath`).
    pub missing: wharf_runtime::sub_path::Missing,
}

/// What kubelet does around a container's process: probes (liveness, readiness, startup)
/// and lifecycle hooks (postStart, preStop), plus how a sidecar (an init container that
/// keeps running) takes part in the pod's order.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct KubeSpec {
    /// Failing it kills the container (its restart policy then applies).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub liveness: Option<ProbeSpec>,
    /// Its result is the container's readiness; it never kills.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub readiness: Option<ProbeSpec>,
    /// Runs first: the other probes wait for its success; failing it kills the container.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub startup: Option<ProbeSpec>,
    /// Run right after the start; the pod's next container starts once it returns, and a
    /// failure kills the container.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub post_start: Option<Action>,
    /// Run before the stop signal, within the stop's grace period.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pre_stop: Option<Action>,
    /// Grace period of a kill by a failed probe or postStart hook: the stop signal, then
    /// SIGKILL after it (the pod's terminationGracePeriodSeconds).
    #[serde(default)]
    pub grace_ms: u64,
    /// The stop signal (SIGTERM when 0).
    #[serde(default)]
    pub stop_signal: i32,
    /// An init container with `restartPolicy: Always` (a sidecar): the next container
    /// starts once it runs (and its startup probe passed); it is stopped after the app
    /// containers.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub sidecar: bool,
    /// The network namespace httpGet and tcpSocket actions connect from (the host's when
    /// None).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub netns: Option<PathBuf>,
    /// The pod's address: where httpGet and tcpSocket actions connect when they name no
    /// host (127.0.0.1 when None).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_ip: Option<String>,
    /// The program that makes HTTPS and gRPC checks (`wharf`, run as `wharf kube-probe
    /// https|grpc ...` in the pod's network namespace): the shim itself speaks neither
    /// TLS nor HTTP/2, which keeps it small.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub helper: Option<PathBuf>,
}

impl KubeSpec {
    /// The signal that stops the container (SIGTERM when none is given).
    pub fn signal(&self) -> i32 {
        if self.stop_signal > 0 {
            self.stop_signal
        } else {
            libc::SIGTERM
        }
    }
}

/// A Kubernetes probe: `action` run every `period_ms` from `initial_delay_ms` after the
/// start; `success_threshold` successes in a row make it pass, `failure_threshold`
/// failures in a row make it fail; an action outliving `timeout_ms` fails.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct ProbeSpec {
    /// What to run.
    pub action: Action,
    /// Before the first run.
    #[serde(default)]
    pub initial_delay_ms: u64,
    /// Between runs.
    pub period_ms: u64,
    /// Longest a run may take.
    pub timeout_ms: u64,
    /// Successes in a row to pass.
    pub success_threshold: u32,
    /// Failures in a row to fail.
    pub failure_threshold: u32,
    /// Grace of the kill that follows a failure (the probe's own
    /// terminationGracePeriodSeconds; [`KubeSpec::grace_ms`] when None).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub grace_ms: Option<u64>,
}

/// What a probe or hook does.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Action {
    /// A command run in the container (succeeds on exit code 0).
    Exec {
        /// argv.
        command: Vec<String>,
    },
    /// An HTTP GET from the pod's network namespace (succeeds on status 200-399).
    HttpGet {
        /// Host to connect to (the pod's address when None).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        host: Option<String>,
        /// Port.
        port: u16,
        /// Path and query.
        path: String,
        /// Extra request headers.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        headers: Vec<(String, String)>,
        /// Over TLS, the certificate not verified (kubelet's HTTPS probes); made by the
        /// probe helper ([`KubeSpec::helper`]).
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        https: bool,
    },
    /// A gRPC health check (grpc.health.v1.Health/Check) from the pod's network namespace
    /// (succeeds on SERVING); made by the probe helper ([`KubeSpec::helper`]).
    Grpc {
        /// Host to connect to (the pod's address when None).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        host: Option<String>,
        /// Port.
        port: u16,
        /// The service asked about ("" for the server as a whole).
        #[serde(default)]
        service: String,
    },
    /// A TCP connection from the pod's network namespace (succeeds when it is accepted).
    TcpSocket {
        /// Host to connect to (the pod's address when None).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        host: Option<String>,
        /// Port.
        port: u16,
    },
    /// Wait (the `sleep` lifecycle action).
    Sleep {
        /// How long.
        ms: u64,
    },
}

/// A container's probe and hook state, as kubelet reports it (`probes.json`).
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct KubeState {
    /// The startup probe passed (or there is none) in the current run.
    pub started: bool,
    /// The readiness probe passes (or there is none, and the container started).
    pub ready: bool,
    /// The lifecycle hook running now ("PostStart" or "PreStop").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hook: Option<String>,
    /// The last probe or hook failure ("Liveness probe failed: ...").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_failure: Option<String>,
    /// Why the container was last killed by the shim ("Unhealthy", "FailedPostStartHook").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub killed_for: Option<String>,
}

/// docker's health check: `test` run in the container every `interval_ms`, failing when it
/// exits non-zero or outlives `timeout_ms`; `retries` failures in a row make the container
/// unhealthy; failures within `start_period_ms` of its start do not count.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct HealthSpec {
    /// The command (argv; a shell's `["/bin/sh", "-c", CMD]` for CMD-SHELL).
    pub test: Vec<String>,
    /// Between checks.
    pub interval_ms: u64,
    /// Longest a check may run.
    pub timeout_ms: u64,
    /// Failures in a row before unhealthy.
    pub retries: u32,
    /// Grace after start.
    #[serde(default)]
    pub start_period_ms: u64,
}

/// One check's result, as docker's `State.Health.Log` shows it.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "PascalCase")]
pub struct HealthResult {
    /// When it began (RFC 3339).
    pub start: String,
    /// When it ended.
    pub end: String,
    /// Its exit code (-1: it timed out or could not run).
    pub exit_code: i32,
    /// What it printed (the first 4 KiB).
    pub output: String,
}

/// A container's health, as docker's `State.Health` shows it.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "PascalCase")]
pub struct HealthState {
    /// starting, healthy or unhealthy.
    pub status: String,
    /// Failures in a row.
    pub failing_streak: u32,
    /// The last checks (at most 5), oldest first.
    pub log: Vec<HealthResult>,
}

/// A process's stdio.
///
/// `log`: output is written to this file in the CRI log format (rotated by size), whether
/// or not a client is attached. Without it, output goes only to attached clients (and is
/// dropped while none is). `terminal`: a pty (its output is one stream, `stdout`); must match
/// `process.terminal` of the config. `stdin`: the process reads what attached clients send
/// (otherwise /dev/null).
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct StdioSpec {
    /// A pty instead of pipes.
    #[serde(default)]
    pub terminal: bool,
    /// Keep stdin open for attached clients.
    #[serde(default)]
    pub stdin: bool,
    /// CRI log file.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub log: Option<PathBuf>,
}

impl StdioSpec {
    /// Output to a CRI log file, no stdin.
    pub fn log(path: impl Into<PathBuf>) -> Self {
        StdioSpec {
            terminal: false,
            stdin: false,
            log: Some(path.into()),
        }
    }

    /// Pipes for attached clients.
    pub fn pipes(stdin: bool) -> Self {
        StdioSpec {
            terminal: false,
            stdin,
            log: None,
        }
    }

    /// A pty for attached clients.
    pub fn tty(stdin: bool) -> Self {
        StdioSpec {
            terminal: true,
            stdin,
            log: None,
        }
    }
}

/// When the shim restarts a container that exited (Kubernetes' restartPolicy).
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum RestartPolicy {
    /// Never restart.
    #[default]
    Never,
    /// Restart when it exits with a non-zero code or a signal.
    OnFailure,
    /// Always restart.
    Always,
}

/// Restart back-off: the first restart waits `initial_ms`, each next one twice as long, up
/// to `max_ms`; a run that lasted `2 * max_ms` or longer starts over at `initial_ms`.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
pub struct Backoff {
    /// First delay.
    pub initial_ms: u64,
    /// Longest delay.
    pub max_ms: u64,
    /// The first restart of a series is at once, the delays come after it (kubelet's:
    /// a container that crashes once is back at once; CrashLoopBackOff is for repeats).
    #[serde(default)]
    pub first_immediate: bool,
}

impl Default for Backoff {
    /// kubelet's: at once, then 10 s doubling up to 5 min.
    fn default() -> Self {
        Backoff {
            initial_ms: 10_000,
            max_ms: 300_000,
            first_immediate: true,
        }
    }
}

/// A pod's containers.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct PodPlan {
    /// Init containers, run in this order, each to exit code 0.
    #[serde(default)]
    pub init: Vec<ContainerSpec>,
    /// App containers, started together after the last init container succeeded.
    #[serde(default)]
    pub containers: Vec<ContainerSpec>,
    /// Disk emptyDir volumes with a sizeLimit: when one holds more, the pod is evicted
    /// (its containers killed, the pod failed), as kubelet does.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub disk_limits: Vec<DiskLimit>,
}

/// A directory the shim measures, and the most it may hold.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct DiskLimit {
    /// The volume's name (for the eviction message).
    pub volume: String,
    /// Its directory on the host.
    pub path: PathBuf,
    /// Bytes (the sizeLimit).
    pub bytes: u64,
}

/// The start of a pod's failure text when it was evicted.
pub const EVICTED: &str = "Evicted";

/// The start of a pod's failure text when its minimal init (the pid namespace's PID 1)
/// exited while the pod was not being shut down: the pod cannot run containers any more.
pub const PAUSE_EXITED: &str =
    "the pod's init (wharf-pause) exited, and with it its shared pid namespace";

/// Namespaces the pod's minimal init joins (paths of nsfs files, e.g. pinned bind mounts).
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct PauseSpec {
    /// Network namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network: Option<PathBuf>,
    /// IPC namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ipc: Option<PathBuf>,
    /// UTS namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uts: Option<PathBuf>,
    /// The pod's own user namespace, which must own the init's pid namespace (else the
    /// pod's containers could not mount their /proc).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<PathBuf>,
    /// Where to pin the init's pid namespace (a file the shim bind-mounts it on), so
    /// containers join it by that path, never by the init's pid.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pin_pid: Option<PathBuf>,
}

/// One response line.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Response {
    /// Success.
    Ok(Reply),
    /// Failure.
    Error(RemoteError),
}

/// What a successful request returns.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Reply {
    /// Nothing more to say.
    Done,
    /// A process id (create, exec, pause_init, ping).
    Pid(i32),
    /// The pod's state.
    State(ShimState),
    /// An exit record (wait).
    Exit(ExitRecord),
    /// One container (status).
    Container(Box<ContainerInfo>),
}

/// Something that happened in the pod, pushed to subscribers as it happens.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct Event {
    /// When (RFC 3339 with nanoseconds).
    pub time: String,
    /// What.
    #[serde(flatten)]
    pub kind: EventKind,
}

/// The kinds of [`Event`].
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum EventKind {
    /// The runtime created the container; its init waits to be started.
    Created {
        /// Container id.
        id: String,
        /// Host pid of its init.
        pid: i32,
    },
    /// The container's program runs.
    Started {
        /// Container id.
        id: String,
        /// Host pid of its init.
        pid: i32,
    },
    /// The container's init exited (its exit is on disk already).
    Exited {
        /// Container id.
        id: String,
        /// How.
        exit: ExitRecord,
    },
    /// The memory cgroup killed a process of the container.
    Oom {
        /// Container id.
        id: String,
    },
    /// The restart policy starts the container again (created and started follow).
    Restarted {
        /// Container id.
        id: String,
        /// Restarts so far, this one included.
        restart_count: u32,
    },
    /// An exec process started.
    ExecStarted {
        /// Container id.
        id: String,
        /// Exec process name.
        exec_id: String,
        /// Host pid.
        pid: i32,
    },
    /// An exec process exited.
    ExecExited {
        /// Container id.
        id: String,
        /// Exec process name.
        exec_id: String,
        /// How.
        exit: ExitRecord,
    },
    /// The pod cannot run containers any more (its init exited, or an init container
    /// failed for good).
    PodFailed {
        /// Why.
        failure: String,
    },
}

impl EventKind {
    /// The container the event is about, if it is about one.
    pub fn container(&self) -> Option<&str> {
        match self {
            EventKind::Created { id, .. }
            | EventKind::Started { id, .. }
            | EventKind::Exited { id, .. }
            | EventKind::Oom { id }
            | EventKind::Restarted { id, .. }
            | EventKind::ExecStarted { id, .. }
            | EventKind::ExecExited { id, .. } => Some(id),
            EventKind::PodFailed { .. } => None,
        }
    }
}

/// An error the shim reports.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct RemoteError {
    /// What kind of failure.
    pub kind: ErrorKind,
    /// Full message, naming the container and the cause.
    pub message: String,
}

/// Kinds of errors, for callers that react to them.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum ErrorKind {
    /// No such container or exec process.
    NotFound,
    /// The id is taken.
    Exists,
    /// The operation does not fit the current status (e.g. delete of a running container).
    State,
    /// The request is malformed or asks for something invalid.
    Invalid,
    /// The runtime failed (create, start, exec, ...).
    Runtime,
    /// The container's program (or an exec'd one) does not exist (docker's exit 127).
    ProgramNotFound,
    /// The container's program exists but cannot be executed (docker's exit 126).
    ProgramNotExecutable,
    /// The shim is shutting down.
    ShuttingDown,
    /// Unsupported protocol version.
    Version,
}

/// Status of a container in the shim.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    /// Part of a pod plan, not created yet (waiting for init containers or a restart).
    Waiting,
    /// Created, not started.
    Created,
    /// Its init process runs.
    Running,
    /// Exited (see the exit record; it may be restarted if `restart_pending`).
    Exited,
}

/// How a process ended, as recorded in `exit.json`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct ExitRecord {
    /// Exit code as a shell reports it: the code, or 128 + signal.
    pub exit_code: i32,
    /// The signal that killed it, if one did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signal: Option<i32>,
    /// When it started (RFC 3339 with nanoseconds), if it did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at: Option<String>,
    /// When the shim saw it exit (RFC 3339 with nanoseconds).
    pub finished_at: String,
    /// The memory cgroup killed a process of the container during this run.
    pub oom_killed: bool,
    /// Kubernetes-style reason: Completed, Error, OOMKilled, StartError, ShimDied.
    pub reason: String,
    /// Details, when the reason alone does not explain it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// One container as the shim sees it.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct ContainerInfo {
    /// Container id.
    pub id: String,
    /// Status.
    pub status: Status,
    /// Host pid of its init while created or running.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pid: Option<i32>,
    /// When the runtime created its current run (RFC 3339 with nanoseconds).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub created_at: Option<String>,
    /// When its current run started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at: Option<String>,
    /// Its CRI log file, if its output is logged.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub log: Option<PathBuf>,
    /// An init container.
    pub init: bool,
    /// Times it was restarted.
    pub restart_count: u32,
    /// A restart is scheduled (back-off running).
    pub restart_pending: bool,
    /// Last exit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit: Option<ExitRecord>,
    /// Exec processes.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub execs: Vec<ExecInfo>,
}

/// One exec process.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct ExecInfo {
    /// Its name.
    pub exec_id: String,
    /// Host pid.
    pub pid: i32,
    /// Exit, once it has exited.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit: Option<ExitRecord>,
}

/// Phase of the pod's plan.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum PodPhase {
    /// No plan was given (containers are driven one by one).
    #[default]
    None,
    /// Init containers are running.
    Initializing,
    /// The app containers were started.
    Running,
    /// An init container failed for good, or an app container could not be created.
    Failed,
}

/// The whole pod.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct ShimState {
    /// The pod id the shim was started for.
    pub pod: String,
    /// Plan phase.
    pub phase: PodPhase,
    /// Why the pod failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure: Option<String>,
    /// Pid of the minimal init, if started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pause_pid: Option<i32>,
    /// Containers, in creation order.
    pub containers: Vec<ContainerInfo>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_are_flat_json_with_version() {
        let r = Request {
            v: VERSION,
            op: Op::Kill {
                id: "c".into(),
                exec_id: None,
                signal: 15,
                all: false,
            },
        };
        let text = serde_json::to_string(&r).unwrap();
        assert_eq!(
            text,
            r#"{"v":1,"op":"kill","id":"c","signal":15,"all":false}"#
        );
        let back: Request = serde_json::from_str(r#"{"v":1,"op":"state"}"#).unwrap();
        assert!(matches!(back.op, Op::State));
    }

    #[test]
    fn responses_name_their_kind() {
        let e = Response::Error(RemoteError {
            kind: ErrorKind::NotFound,
            message: "x".into(),
        });
        assert_eq!(
            serde_json::to_string(&e).unwrap(),
            r#"{"error":{"kind":"not_found","message":"x"}}"#
        );
        let ok: Response = serde_json::from_str(r#"{"ok":{"pid":7}}"#).unwrap();
        assert!(matches!(ok, Response::Ok(Reply::Pid(7))));
    }
}
