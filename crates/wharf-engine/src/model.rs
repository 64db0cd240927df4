//! What users ask for (pod and container specs) and what the engine records about them.
//! The specs are front-end neutral: `wharf run` flags, a Kubernetes Pod manifest and (later)
//! CRI requests all translate into them.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// Label of a pod made for one container (`wharf run` without `--pod`): it goes with its
/// container, and one left without it by an interrupted run is removed when reconciling.
pub const STANDALONE_LABEL: &str = "io.wharf.standalone";

/// How a pod is networked.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase", tag = "mode", content = "name")]
pub enum NetworkMode {
    /// The default CNI network if one is configured, else the built-in bridge network.
    #[default]
    Default,
    /// A named CNI network.
    Named(String),
    /// Only a loopback interface.
    None,
    /// The host's network namespace.
    Host,
}

/// A host port mapped to a pod port.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PortMapping {
    /// Port on the host; 0 asks the engine to pick a free one (`-p 80`, `-P`), which it
    /// records in its place when the pod is made.
    pub host_port: u16,
    /// Port in the pod.
    pub container_port: u16,
    /// "tcp" or "udp".
    pub protocol: String,
    /// Host address to bind (all when None).
    pub host_ip: Option<String>,
}

/// DNS settings of a pod (resolv.conf).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DnsConfig {
    /// Name servers (default: the host's, minus loopback ones).
    pub servers: Vec<String>,
    /// Search domains.
    pub searches: Vec<String>,
    /// resolv.conf options.
    pub options: Vec<String>,
}

/// When the supervisor restarts a container that exited.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum RestartPolicy {
    /// Whatever the exit.
    Always,
    /// Only after a non-zero exit.
    OnFailure,
    /// Whatever the exit, like Always; unlike it, a container the user stopped is not
    /// brought back when Wharf restores containers at boot (docker's `unless-stopped`).
    UnlessStopped,
    /// Never.
    #[default]
    Never,
}

/// One contiguous range of a user namespace's id map: `size` ids from `container_id` in
/// the pod are `host_id..` on the host (a line of /proc/PID/uid_map).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct IdRange {
    /// First id inside the user namespace.
    pub container_id: u32,
    /// The host id it maps to.
    pub host_id: u32,
    /// How many ids.
    pub size: u32,
}

/// A pod's own user namespace (Kubernetes' `hostUsers: false`, `--userns=auto`): its
/// root is an unprivileged host id. Empty maps ask the engine to choose a range of
/// [`crate::userns::RANGE_SIZE`] ids no other pod has, which it records in their place.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct UserNamespace {
    /// Uid map (at most 340 lines, as the kernel takes).
    #[serde(default)]
    pub uid_map: Vec<IdRange>,
    /// Gid map.
    #[serde(default)]
    pub gid_map: Vec<IdRange>,
}

impl UserNamespace {
    /// The host id that `id` inside maps to through `map`, if any.
    pub fn to_host(map: &[IdRange], id: u32) -> Option<u32> {
        map.iter()
            .find(|r| id >= r.container_id && id - r.container_id < r.size)
            .map(|r| r.host_id + (id - r.container_id))
    }

    /// The host uid and gid of the pod's root (0 inside).
    pub fn root(&self) -> Option<(u32, u32)> {
        Some((
            Self::to_host(&self.uid_map, 0)?,
            Self::to_host(&self.gid_map, 0)?,
        ))
    }
}

/// A pod: the sandbox its containers share.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct PodSpec {
    /// Unique name (generated when None).
    pub name: Option<String>,
    /// Hostname (default: the pod name).
    pub hostname: Option<String>,
    /// Network.
    pub network: NetworkMode,
    /// Port mappings.
    pub ports: Vec<PortMapping>,
    /// resolv.conf settings.
    pub dns: DnsConfig,
    /// Extra /etc/hosts entries (ip, names).
    pub extra_hosts: Vec<(String, Vec<String>)>,
    /// Containers share one PID namespace (with a minimal init as PID 1).
    pub share_pid: bool,
    /// Use the host's PID namespace.
    pub host_pid: bool,
    /// Use the host's IPC namespace.
    pub host_ipc: bool,
    /// Size of the pod's /dev/shm in bytes.
    pub shm_size: Option<u64>,
    /// Pod-level cgroup limits (apply to all its containers together). Boxed, as `kube`
    /// of [`ContainerSpec`]: rare, and 584 bytes inline in every pod a listing reads.
    pub resources: Option<Box<oci_spec::runtime::LinuxResources>>,
    /// Restart policy of its containers.
    pub restart: RestartPolicy,
    /// At most this many restarts of each container under OnFailure (docker's
    /// `on-failure:N`); None: no limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_restarts: Option<u32>,
    /// Labels.
    pub labels: BTreeMap<String, String>,
    /// Kubernetes namespace (for `wharf play` and the downward API).
    pub namespace: Option<String>,
    /// The pod's cgroup goes below this absolute cgroup instead of the engine's cgroup
    /// parent (kubelet's `/kubepods/<qos>/pod<uid>`, which kubelet owns and limits).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cgroup_parent: Option<String>,
    /// Annotations (kept and returned, not interpreted).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
    /// Namespaced sysctls every container of the pod gets.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub sysctls: BTreeMap<String, String>,
    /// More names the pod answers to on a user network (`--network-alias`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub network_aliases: Vec<String>,
    /// User networks the pod joins besides `network` (a create request naming several,
    /// `network connect`), in the order of their interfaces (eth1, eth2...).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub extra_networks: Vec<ExtraNetwork>,
    /// Disk emptyDir volumes (by name, in the pod's volume directory) and their sizeLimit
    /// in bytes: the pod's shim evicts the pod when one holds more (`wharf play`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub disk_limits: BTreeMap<String, u64>,
    /// Rotate a container's log at this size (`--log-opt max-size`; default 10 MB).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub log_max_size: Option<u64>,
    /// Keep this many of its log files (`--log-opt max-file`; default 5).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub log_max_files: Option<u32>,
    /// The pod's own user namespace, which all its containers share (None: the host's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub userns: Option<UserNamespace>,
}

/// A user network a pod joins besides its first: docker's second and later endpoints. The
/// pod reaches that network's subnet through it; its default route stays on its first.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExtraNetwork {
    /// The user network.
    pub name: String,
    /// More names the pod answers to there.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub aliases: Vec<String>,
}

/// A volume mount into a container.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct VolumeMount {
    /// Host path (bind) or "tmpfs".
    pub source: PathBuf,
    /// Path in the container.
    pub destination: PathBuf,
    /// Read-only.
    pub readonly: bool,
    /// "bind" or "tmpfs".
    pub kind: String,
    /// Extra mount options (e.g. "size=64m" for tmpfs).
    pub options: Vec<String>,
}

/// A host device given to a container.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeviceMapping {
    /// The device node on the host.
    pub host_path: PathBuf,
    /// Where it appears in the container.
    pub container_path: PathBuf,
    /// What the container may do with it: a subset of "rwm" (default "rwm").
    pub permissions: String,
}

/// Which seccomp profile a container gets.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum SeccompMode {
    /// Wharf's default profile (docker/containerd's RuntimeDefault equivalent).
    #[default]
    RuntimeDefault,
    /// None.
    Unconfined,
    /// An OCI seccomp profile (JSON) from this host file.
    Localhost(PathBuf),
}

/// A container of a pod.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ContainerSpec {
    /// Unique name (generated when None).
    pub name: Option<String>,
    /// Image reference.
    pub image: String,
    /// The image's name as its user gave it, when `image` is an id (kubelet pins the id it
    /// pulled and names the image separately): what listings show.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image_name: Option<String>,
    /// Replaces the image's Entrypoint.
    pub entrypoint: Option<Vec<String>>,
    /// Replaces the image's Cmd.
    pub command: Option<Vec<String>>,
    /// Environment (added to the image's).
    pub env: Vec<(String, String)>,
    /// Working directory (default: the image's, else /).
    pub workdir: Option<String>,
    /// user[:group] by name or id (default: the image's).
    pub user: Option<String>,
    /// Extra groups.
    pub groups: Vec<u32>,
    /// Allocate a terminal.
    pub tty: bool,
    /// Keep stdin open (attachable).
    pub stdin: bool,
    /// Volumes.
    pub mounts: Vec<VolumeMount>,
    /// Memory limit in bytes.
    pub memory: Option<i64>,
    /// Memory plus swap limit in bytes (-1: unlimited swap). With a memory limit and no
    /// word on swap, twice the memory limit, as docker does; ignored where the kernel does
    /// not account swap.
    pub memory_swap: Option<i64>,
    /// CPU limit in CPUs (e.g. 0.5).
    pub cpus: Option<f64>,
    /// CPU shares (relative weight; from a request).
    pub cpu_shares: Option<u64>,
    /// Memory reservation (from a request).
    pub memory_reservation: Option<i64>,
    /// Max processes.
    pub pids_limit: Option<i64>,
    /// The process's oom_score_adj (raised to the lowest allowed value on hosts that cannot
    /// lower it; see [`crate::oom`]).
    pub oom_score_adj: Option<i32>,
    /// All capabilities, all devices, no seccomp, writable /sys and /proc.
    pub privileged: bool,
    /// Capabilities added to the default set ("ALL" allowed).
    pub cap_add: Vec<String>,
    /// Capabilities dropped from the default set ("ALL" allowed).
    pub cap_drop: Vec<String>,
    /// Read-only root filesystem.
    pub read_only: bool,
    /// Refuse to start if the process would run as uid 0.
    pub run_as_non_root: bool,
    /// Set no_new_privs (Kubernetes allowPrivilegeEscalation: false).
    pub no_new_privileges: bool,
    /// Seccomp profile.
    pub seccomp: SeccompMode,
    /// An init container (runs to completion before the app containers).
    pub init: bool,
    /// Signal that stops it (default: the image's StopSignal, else SIGTERM).
    pub stop_signal: Option<String>,
    /// Seconds between the stop signal and SIGKILL.
    pub stop_timeout: Option<u64>,
    /// Labels.
    pub labels: BTreeMap<String, String>,
    /// Annotations (kept, returned, and passed to the runtime in config.json).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
    /// Where its log goes (default: its bundle's `ctr.log`); kubelet names it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub log_path: Option<PathBuf>,
    /// Replaces the default masked /proc and /sys paths (Kubernetes procMount and the
    /// CRI's masked_paths).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub masked_paths: Option<Vec<String>>,
    /// Replaces the default read-only /proc paths.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub readonly_paths: Option<Vec<String>>,
    /// Only `groups` as supplementary groups, none from the image's /etc/group (the CRI's
    /// SupplementalGroupsPolicy Strict; by default they are merged, as docker does).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub strict_groups: bool,
    /// Host devices made available in the container (the CRI's devices).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub devices: Vec<DeviceMapping>,
    /// Resource limits of the process (docker's `--ulimit`): (name as `nofile`, soft,
    /// hard). Those not given are inherited from the shim, as runc's are.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ulimits: Vec<(String, u64, u64)>,
    /// The AppArmor profile (loaded on the host) the process runs under: the CRI's
    /// Localhost profile, docker's `--security-opt apparmor=NAME`. None: what the kernel
    /// gives an exec'd process (Wharf loads no default profile of its own).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub apparmor_profile: Option<String>,
    /// Join the pid namespace of this running container of the same pod (an ephemeral
    /// debug container's target: the CRI's NamespaceMode TARGET).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pid_target: Option<String>,
    /// Removed (with its own pod) once it has exited for good, by its shim, with no CLI
    /// running: `run -d --rm`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub auto_remove: bool,
    /// CPUs it may run on (`--cpuset-cpus`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpuset_cpus: Option<String>,
    /// Memory nodes it may use (`--cpuset-mems`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpuset_mems: Option<String>,
    /// Raw cgroup v2 files (`linux.resources.unified`; the CRI's `unified`, such as the
    /// `memory.oom.group` kubelet asks for on cgroup v2 hosts).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub unified: BTreeMap<String, String>,
    /// A health check its shim runs while it runs (docker's HEALTHCHECK).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub health: Option<wharf_shim::protocol::HealthSpec>,
    /// kubelet's probes and lifecycle hooks, run by its shim (`wharf play`); the engine
    /// fills in where network actions connect from.
    /// Boxed: most containers have none, and inline it took 632 of the spec's 1448 bytes
    /// in every container a listing reads.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kube: Option<Box<wharf_shim::protocol::KubeSpec>>,
}

/// Lifecycle state of a pod. The CRI's sandbox states follow from it: see
/// [`PodState::ready`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PodState {
    /// Its sandbox is being set up (a command that dies here leaves it for the reconciler
    /// to remove).
    Creating,
    /// Its sandbox is up; containers are created and started one by one.
    Created,
    /// Its containers were handed to its shim as one plan (init containers, then apps).
    Running,
    /// Its containers were stopped and its network taken down (the CRI's
    /// StopPodSandbox): nothing runs in it again; it can only be removed.
    Stopped,
    /// Its removal began (the reconciler finishes a removal that a command left midway).
    Removing,
    /// Its sandbox is gone (the host restarted, the run directory was emptied, or the init
    /// of its shared pid namespace exited): it can only be removed.
    Dead,
}

impl PodState {
    /// Whether containers can run in it: the CRI's SANDBOX_READY (else SANDBOX_NOTREADY).
    pub fn ready(self) -> bool {
        matches!(self, PodState::Created | PodState::Running)
    }

    /// The name kept in the store and shown by front ends.
    pub fn as_str(self) -> &'static str {
        match self {
            PodState::Creating => "creating",
            PodState::Created => "created",
            PodState::Running => "running",
            PodState::Stopped => "stopped",
            PodState::Removing => "removing",
            PodState::Dead => "dead",
        }
    }

    /// The state a stored name means (None for a name this engine does not know).
    pub fn parse(s: &str) -> Option<PodState> {
        [
            PodState::Creating,
            PodState::Created,
            PodState::Running,
            PodState::Stopped,
            PodState::Removing,
            PodState::Dead,
        ]
        .into_iter()
        .find(|p| p.as_str() == s)
    }
}

impl std::fmt::Display for PodState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Lifecycle state of a container as the engine reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ContainerState {
    /// Defined, runtime container created, not started.
    Created,
    /// Running.
    Running,
    /// Exited (see its exit record).
    Exited,
    /// Paused.
    Paused,
    /// The engine knows it but nothing runs (e.g. never created in the runtime).
    Unknown,
}

impl std::fmt::Display for ContainerState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            ContainerState::Created => "created",
            ContainerState::Running => "running",
            ContainerState::Exited => "exited",
            ContainerState::Paused => "paused",
            ContainerState::Unknown => "unknown",
        })
    }
}

/// How a container exited.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExitInfo {
    /// Exit code (128 + signal when killed by one).
    pub code: i32,
    /// The signal that killed it, if any.
    pub signal: Option<i32>,
    /// When (RFC 3339).
    pub finished_at: String,
    /// Killed by the OOM killer.
    pub oom_killed: bool,
    /// Why, when it was not the process's own doing (e.g. "shim died").
    pub reason: Option<String>,
    /// The error, when it never ran or its run failed for the runtime (a start error):
    /// docker's State.Error.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pod_states_keep_their_stored_names_and_say_whether_the_sandbox_is_ready() {
        for (s, name, ready) in [
            (PodState::Creating, "creating", false),
            (PodState::Created, "created", true),
            (PodState::Running, "running", true),
            (PodState::Stopped, "stopped", false),
            (PodState::Removing, "removing", false),
            (PodState::Dead, "dead", false),
        ] {
            assert_eq!(s.as_str(), name);
            assert_eq!(PodState::parse(name), Some(s));
            assert_eq!(s.ready(), ready, "{name}");
            assert_eq!(serde_json::to_string(&s).unwrap(), format!("\"{name}\""));
        }
        assert_eq!(PodState::parse("paused"), None);
    }
}
