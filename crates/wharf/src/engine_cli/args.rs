//! Command-line grammar of Wharf's container and pod commands (docker/podman habits).

use std::path::PathBuf;

use clap::{Args, Subcommand};

/// What a container, pod or system command works on, and the command (the global options
/// come from the whole command line's grammar, [`crate::cli`]).
#[derive(Debug)]
pub struct Cli {
    /// State directory (images, containers, metadata).
    pub root: PathBuf,
    /// Runtime directory (mounts, pinned namespaces, runtime state).
    pub run: PathBuf,
    /// Wharf's config file.
    pub config: PathBuf,
    /// `--cgroup-manager`.
    pub cgroup_manager: Option<String>,
    /// The command.
    pub cmd: Cmd,
}

/// `wharf run` / `wharf create` flags.
#[derive(Args, Debug, Clone)]
pub struct RunArgs {
    /// Keep stdin open (attach it).
    #[arg(short = 'i', long)]
    pub interactive: bool,
    /// Allocate a terminal.
    #[arg(short = 't', long)]
    pub tty: bool,
    /// Remove the container (and its pod) when it exits.
    #[arg(long)]
    pub rm: bool,
    /// Run in the background and print the container id.
    #[arg(short = 'd', long)]
    pub detach: bool,
    /// Container name.
    #[arg(long)]
    pub name: Option<String>,
    /// Environment variables (KEY=VALUE, or KEY to copy it from here).
    #[arg(short = 'e', long = "env")]
    pub env: Vec<String>,
    /// Files of KEY=VALUE lines.
    #[arg(long = "env-file")]
    pub env_file: Vec<PathBuf>,
    /// Bind mounts host:container[:ro].
    #[arg(short = 'v', long = "volume")]
    pub volumes: Vec<String>,
    /// Published ports [ip:][host:]container[/tcp|udp] (no host port: one the engine picks).
    #[arg(short = 'p', long = "publish")]
    pub publish: Vec<String>,
    /// Publish every port the image exposes on host ports the engine picks.
    #[arg(short = 'P', long = "publish-all")]
    pub publish_all: bool,
    /// More ports to expose (published by -P).
    #[arg(long = "expose")]
    pub expose: Vec<String>,
    /// PID namespace: host (the host's), or the container's own (the default).
    #[arg(long = "pid")]
    pub pid: Option<String>,
    /// IPC namespace: host, or the pod's own (private, shareable: the default).
    #[arg(long = "ipc")]
    pub ipc: Option<String>,
    /// User namespace: host (the default), or auto: one of the container's own, whose
    /// root is an unprivileged host id from a range the engine chooses.
    #[arg(long = "userns")]
    pub userns: Option<String>,
    /// Network: default (bridge), none, host, a user network (`network create`), a CNI
    /// network, `container:NAME` or `pod:NAME` (join that pod).
    #[arg(long, alias = "net", default_value = "default")]
    pub network: String,
    /// More names the container answers to on its user network.
    #[arg(long = "network-alias", alias = "net-alias")]
    pub network_alias: Vec<String>,
    /// user[:group] by name or id.
    #[arg(short = 'u', long)]
    pub user: Option<String>,
    /// Working directory.
    #[arg(short = 'w', long)]
    pub workdir: Option<String>,
    /// Replace the image's entrypoint (a command, split on spaces).
    #[arg(long)]
    pub entrypoint: Option<String>,
    /// Hostname.
    #[arg(long)]
    pub hostname: Option<String>,
    /// Memory limit (e.g. 64m, 1g).
    #[arg(short = 'm', long)]
    pub memory: Option<String>,
    /// Memory plus swap limit (e.g. 128m; -1 for unlimited swap; default twice --memory).
    #[arg(long = "memory-swap", allow_hyphen_values = true)]
    pub memory_swap: Option<String>,
    /// CPU limit (e.g. 0.5).
    #[arg(long)]
    pub cpus: Option<f64>,
    /// CPU shares (relative weight).
    #[arg(short = 'c', long = "cpu-shares")]
    pub cpu_shares: Option<u64>,
    /// CFS quota in microseconds per --cpu-period (as --cpus does it).
    #[arg(long = "cpu-quota")]
    pub cpu_quota: Option<i64>,
    /// CFS period in microseconds (default 100000).
    #[arg(long = "cpu-period")]
    pub cpu_period: Option<u64>,
    /// CPUs the container may run on (e.g. 0-1, 0,2).
    #[arg(long = "cpuset-cpus")]
    pub cpuset_cpus: Option<String>,
    /// Memory nodes it may use.
    #[arg(long = "cpuset-mems")]
    pub cpuset_mems: Option<String>,
    /// Memory soft limit (e.g. 32m).
    #[arg(long = "memory-reservation")]
    pub memory_reservation: Option<String>,
    /// More groups for the process (numeric gids).
    #[arg(long = "group-add")]
    pub group_add: Vec<String>,
    /// The image's platform when it is pulled (os/arch[/variant]).
    #[arg(long)]
    pub platform: Option<String>,
    /// No pull progress.
    #[arg(short = 'q', long)]
    pub quiet: bool,
    /// Write the container's id to this file.
    #[arg(long)]
    pub cidfile: Option<PathBuf>,
    /// Most processes (default 2048, as podman's; -1 or 0: none).
    #[arg(long = "pids-limit", allow_hyphen_values = true)]
    pub pids_limit: Option<i64>,
    /// The container's oom_score_adj (-1000..1000; raised to the lowest value this host
    /// allows when it cannot lower it).
    #[arg(long = "oom-score-adj", allow_hyphen_values = true)]
    pub oom_score_adj: Option<i32>,
    /// Add capabilities.
    #[arg(long = "cap-add")]
    pub cap_add: Vec<String>,
    /// Drop capabilities.
    #[arg(long = "cap-drop")]
    pub cap_drop: Vec<String>,
    /// All capabilities and devices, no seccomp.
    #[arg(long)]
    pub privileged: bool,
    /// Read-only root filesystem.
    #[arg(long = "read-only")]
    pub read_only: bool,
    /// Run in this existing pod instead of a pod of its own.
    #[arg(long)]
    pub pod: Option<String>,
    /// Restart policy: no, always, unless-stopped, on-failure[:max-retries].
    #[arg(long, default_value = "no")]
    pub restart: String,
    /// Pull policy: missing, always, never.
    #[arg(long, default_value = "missing")]
    pub pull: String,
    /// Stop signal.
    #[arg(long = "stop-signal")]
    pub stop_signal: Option<String>,
    /// Seconds to wait before killing at stop.
    #[arg(long = "stop-timeout")]
    pub stop_timeout: Option<u64>,
    /// Seccomp: "unconfined" or a profile file (security-opt seccomp=...).
    #[arg(long = "security-opt")]
    pub security_opt: Vec<String>,
    /// A tmpfs at PATH[:OPTIONS] (docker's defaults: noexec, nosuid, nodev).
    #[arg(long = "tmpfs")]
    pub tmpfs: Vec<String>,
    /// A mount: type=bind,source=S,target=T[,readonly][,bind-propagation=P],
    /// type=volume,source=NAME,target=T[,readonly][,volume-subpath=P] or
    /// type=tmpfs,target=T[,tmpfs-size=N][,tmpfs-mode=M].
    #[arg(long = "mount")]
    pub mount: Vec<String>,
    /// A host device: HOST[:CONTAINER[:PERMISSIONS]].
    #[arg(long = "device")]
    pub device: Vec<String>,
    /// A namespaced kernel parameter of the container's pod (k=v).
    #[arg(long = "sysctl")]
    pub sysctl: Vec<String>,
    /// Size of /dev/shm (e.g. 128m).
    #[arg(long = "shm-size")]
    pub shm_size: Option<String>,
    /// A label (k=v).
    #[arg(short = 'l', long = "label")]
    pub label: Vec<String>,
    /// A DNS server.
    #[arg(long = "dns")]
    pub dns: Vec<String>,
    /// A DNS search domain.
    #[arg(long = "dns-search")]
    pub dns_search: Vec<String>,
    /// A resolv.conf option.
    #[arg(long = "dns-option")]
    pub dns_option: Vec<String>,
    /// An /etc/hosts entry: HOST:IP.
    #[arg(long = "add-host")]
    pub add_host: Vec<String>,
    /// A resource limit: NAME=SOFT[:HARD] (e.g. nofile=1024:2048).
    #[arg(long = "ulimit")]
    pub ulimit: Vec<String>,
    /// An init as PID 1 that forwards signals and reaps zombies (the pod's own init).
    #[arg(long)]
    pub init: bool,
    /// A command that tells whether the container is healthy (run by its shim, with
    /// /bin/sh -c, while it runs).
    #[arg(long = "health-cmd")]
    pub health_cmd: Option<String>,
    /// Between checks (default 30s).
    #[arg(long = "health-interval")]
    pub health_interval: Option<String>,
    /// Longest a check may run (default 30s).
    #[arg(long = "health-timeout")]
    pub health_timeout: Option<String>,
    /// Failures in a row before unhealthy (default 3).
    #[arg(long = "health-retries")]
    pub health_retries: Option<u32>,
    /// Failures within this long of the start do not count (default 0s).
    #[arg(long = "health-start-period")]
    pub health_start_period: Option<String>,
    /// No health check.
    #[arg(long = "no-healthcheck")]
    pub no_healthcheck: bool,
    /// Log driver (only the default, json-file/k8s-file: a CRI-format file the shim writes).
    #[arg(long = "log-driver")]
    pub log_driver: Option<String>,
    /// Log options: max-size=SIZE (rotate at), max-file=N (files kept).
    #[arg(long = "log-opt")]
    pub log_opt: Vec<String>,
    /// Detach key sequence (default ctrl-p,ctrl-q).
    #[arg(long = "detach-keys", default_value = "ctrl-p,ctrl-q")]
    pub detach_keys: String,
    /// The image, then the command and its arguments: one list, so that flag parsing
    /// stops at the image as docker's does (`run --entrypoint stat IMG -c %a /` passes
    /// `-c` to the command, not to run's `--cpu-shares`).
    #[arg(
        num_args = 1..,
        trailing_var_arg = true,
        allow_hyphen_values = true,
        required = true,
        value_name = "IMAGE [COMMAND] [ARG...]"
    )]
    pub image_and_command: Vec<String>,
}

impl RunArgs {
    /// The image.
    pub fn image(&self) -> &str {
        self.image_and_command.first().map_or("", String::as_str)
    }

    /// The command and its arguments after the image.
    pub fn command(&self) -> &[String] {
        self.image_and_command.get(1..).unwrap_or_default()
    }
}

/// `wharf exec` flags.
#[derive(Args, Debug)]
pub struct ExecArgs {
    /// Keep stdin open.
    #[arg(short = 'i', long)]
    pub interactive: bool,
    /// Allocate a terminal.
    #[arg(short = 't', long)]
    pub tty: bool,
    /// Run in the background.
    #[arg(short = 'd', long)]
    pub detach: bool,
    /// Environment variables.
    #[arg(short = 'e', long = "env")]
    pub env: Vec<String>,
    /// user[:group].
    #[arg(short = 'u', long)]
    pub user: Option<String>,
    /// Working directory.
    #[arg(short = 'w', long)]
    pub workdir: Option<String>,
    /// Extended privileges.
    #[arg(long)]
    pub privileged: bool,
    /// Container.
    pub container: String,
    /// Command and arguments.
    #[arg(trailing_var_arg = true, allow_hyphen_values = true, required = true)]
    pub command: Vec<String>,
}

/// `wharf container ...`: docker's management command, the container commands under
/// another name (`container ls`, `container rm`...) plus `container prune`.
#[derive(Subcommand, Debug)]
pub enum ContainerCmd {
    /// Remove every stopped container.
    Prune {
        /// Do not ask.
        #[arg(short, long)]
        force: bool,
    },
    /// The container commands.
    #[command(flatten)]
    Cmd(Box<Cmd>),
}

/// `wharf builder` subcommands (docker's).
#[derive(Subcommand, Debug)]
pub enum BuilderCmd {
    /// Forget the build cache and remove the unnamed step images behind it.
    Prune {
        /// Docker's flag; the whole cache goes either way.
        #[arg(short, long)]
        all: bool,
        /// Do not ask (Wharf never asks).
        #[arg(short, long)]
        force: bool,
    },
}

/// `wharf volume` subcommands (docker's).
#[derive(Subcommand, Debug)]
pub enum VolumeCmd {
    /// Make a volume (a random name when none is given).
    Create {
        /// Labels (KEY=VALUE).
        #[arg(short, long = "label")]
        label: Vec<String>,
        /// Its name (also as `--name`).
        #[arg(long = "name")]
        name_flag: Option<String>,
        /// Its name.
        name: Option<String>,
    },
    /// List volumes.
    #[command(alias = "list")]
    Ls {
        /// Names only.
        #[arg(short, long)]
        quiet: bool,
        /// table, json, or a Go template (`{{.Name}}`).
        #[arg(long, default_value = "table")]
        format: String,
        /// dangling=true|false, name=PART, label=KEY[=VALUE].
        #[arg(short, long = "filter")]
        filter: Vec<String>,
    },
    /// Show volumes as JSON.
    Inspect {
        /// json, or a Go template (`{{.Mountpoint}}`).
        #[arg(short, long)]
        format: Option<String>,
        /// Volumes.
        #[arg(required = true)]
        volumes: Vec<String>,
    },
    /// Remove volumes (refused while a container uses one).
    #[command(alias = "remove")]
    Rm {
        /// Accepted for docker's sake: a volume in use is still refused.
        #[arg(short, long)]
        force: bool,
        /// Volumes.
        #[arg(required = true)]
        volumes: Vec<String>,
    },
    /// Remove the anonymous volumes no container uses (all unused ones with --all).
    Prune {
        /// Named ones too.
        #[arg(short, long)]
        all: bool,
        /// Do not ask.
        #[arg(short, long)]
        force: bool,
    },
}

/// `wharf network` subcommands (docker's).
#[derive(Subcommand, Debug)]
pub enum NetworkCmd {
    /// Make a user bridge network.
    Create {
        /// Only `bridge` (the built-in bridge, a network of its own).
        #[arg(short, long, default_value = "bridge")]
        driver: String,
        /// IPv4 subnet in CIDR form (default: the first free 10.89.N.0/24).
        #[arg(long)]
        subnet: Option<String>,
        /// The bridge's address (default: the subnet's first).
        #[arg(long)]
        gateway: Option<String>,
        /// Labels (KEY=VALUE).
        #[arg(short, long = "label")]
        label: Vec<String>,
        /// Its name.
        name: String,
    },
    /// List networks.
    #[command(alias = "list")]
    Ls {
        /// Ids only.
        #[arg(short, long)]
        quiet: bool,
        /// table, json, or a Go template (`{{.Name}}`).
        #[arg(long, default_value = "table")]
        format: String,
        /// Whole ids.
        #[arg(long = "no-trunc")]
        no_trunc: bool,
    },
    /// Show networks as JSON.
    Inspect {
        /// json, or a Go template (`{{range .IPAM.Config}}{{.Subnet}}{{end}}`).
        #[arg(short, long)]
        format: Option<String>,
        /// Networks.
        #[arg(required = true)]
        networks: Vec<String>,
    },
    /// Remove user networks (refused while a pod is on one).
    #[command(alias = "remove")]
    Rm {
        /// Networks.
        #[arg(required = true)]
        networks: Vec<String>,
    },
    /// Join a container (its pod) to a further user network while it lives.
    Connect {
        /// More names it answers to there.
        #[arg(long = "alias")]
        alias: Vec<String>,
        /// The user network.
        network: String,
        /// The container.
        container: String,
    },
    /// Take a container (its pod) off a network it joined with `network connect`.
    Disconnect {
        /// Accepted for docker's sake.
        #[arg(short, long)]
        force: bool,
        /// The network.
        network: String,
        /// The container.
        container: String,
    },
    /// Remove the user networks no pod is on.
    Prune {
        /// Do not ask.
        #[arg(short, long)]
        force: bool,
    },
}

/// `wharf system` subcommands.
#[derive(Subcommand, Debug)]
pub enum SystemCmd {
    /// Check the metadata store's integrity and compare it with the state on disk (exit 1
    /// when something is wrong).
    Check,
    /// Rebuild the metadata store: set a damaged or truncated file aside and restore every
    /// pod, container, image and layer it lacks from the files kept beside them. Run it
    /// with no other Wharf command at work.
    Repair,
    /// Start again the containers whose restart policy is always or unless-stopped (and
    /// were not stopped by the user) after the machine restarted, and the controllers of
    /// the workloads `play` keeps: what the wharf-restore unit runs at boot.
    Restore,
    /// Stop every running container (stop signal, then SIGKILL after --time), as the
    /// machine's shutdown does: what the wharf-restore unit runs when it stops. Not a
    /// user's stop: restart policies bring the containers back at the next boot.
    Shutdown {
        /// Seconds before SIGKILL (default: each container's stop timeout).
        #[arg(short, long)]
        time: Option<u64>,
    },
    /// Disk used by images, containers and volumes (docker's `system df`).
    Df {
        /// table, json, or a Go template (`{{.Type}} {{.Size}}`).
        #[arg(long, default_value = "table")]
        format: String,
    },
    /// Remove stopped containers, unused user networks and unnamed images (with --all:
    /// every unused image; with --volumes: unused anonymous volumes).
    Prune {
        /// Every image no container uses, not only the unnamed ones.
        #[arg(short, long)]
        all: bool,
        /// Unused anonymous volumes too.
        #[arg(long)]
        volumes: bool,
        /// Do not ask.
        #[arg(short, long)]
        force: bool,
    },
}

/// `wharf pod create`'s limits: the pod's cgroup (with the systemd driver, its scope's
/// properties), which its containers' own limits sit below.
#[derive(Args, Debug, Clone, Default)]
pub struct PodLimits {
    /// Memory limit of the whole pod (e.g. 256m).
    #[arg(long)]
    pub memory: Option<String>,
    /// CPUs the whole pod may use (e.g. 1.5).
    #[arg(long)]
    pub cpus: Option<f64>,
    /// CPUs the pod's processes may run on (e.g. 0-1).
    #[arg(long = "cpuset-cpus")]
    pub cpuset_cpus: Option<String>,
    /// Most processes the whole pod may hold (-1: no limit).
    #[arg(long = "pids-limit", allow_hyphen_values = true)]
    pub pids_limit: Option<i64>,
}

/// Pod subcommands.
#[derive(Subcommand, Debug)]
pub enum PodCmd {
    /// Create an empty pod.
    Create {
        /// Name.
        #[arg(long)]
        name: Option<String>,
        /// Hostname.
        #[arg(long)]
        hostname: Option<String>,
        /// Network: default, none, host, or a CNI network.
        #[arg(long, default_value = "default")]
        network: String,
        /// Published ports.
        #[arg(short = 'p', long = "publish")]
        publish: Vec<String>,
        /// Share one PID namespace between the pod's containers.
        #[arg(long = "share-pid")]
        share_pid: bool,
        /// User namespace: host (the default), or auto: one of the pod's own, whose root
        /// is an unprivileged host id from a range the engine chooses.
        #[arg(long = "userns")]
        userns: Option<String>,
        /// Restart policy of its containers.
        #[arg(long, default_value = "no")]
        restart: String,
        /// The pod's limits, shared by all its containers (podman's pod flags).
        #[command(flatten)]
        limits: PodLimits,
    },
    /// Change a pod's limits (podman's `pod update`).
    Update {
        /// The new limits (the others stay).
        #[command(flatten)]
        limits: PodLimits,
        /// Pod.
        pod: String,
    },
    /// List pods.
    #[command(alias = "list", alias = "ps")]
    Ls {
        /// table, json, or a Go template (`{{.Name}} {{.Status}}`).
        #[arg(long, default_value = "table")]
        format: String,
        /// Ids only.
        #[arg(short, long)]
        quiet: bool,
    },
    /// Show pods as JSON.
    Inspect {
        /// json, or a Go template.
        #[arg(short, long)]
        format: Option<String>,
        /// Pods.
        #[arg(required = true)]
        pods: Vec<String>,
    },
    /// Stop a pod's containers.
    Stop {
        /// Seconds before SIGKILL.
        #[arg(short = 't', long)]
        time: Option<u64>,
        /// Pods.
        #[arg(required = true)]
        pods: Vec<String>,
    },
    /// Remove pods.
    Rm {
        /// Stop and remove their containers too.
        #[arg(short, long)]
        force: bool,
        /// Pods.
        #[arg(required = true)]
        pods: Vec<String>,
    },
}

/// Commands.
#[derive(Subcommand, Debug)]
pub enum Cmd {
    /// Run a command in a new container.
    Run(RunArgs),
    /// Create a container without starting it.
    Create(RunArgs),
    /// Start created containers.
    Start {
        /// Attach to its output.
        #[arg(short, long)]
        attach: bool,
        /// Containers.
        #[arg(required = true)]
        containers: Vec<String>,
    },
    /// List containers.
    #[command(alias = "ls", alias = "list")]
    Ps {
        /// Show all containers (default: running only).
        #[arg(short, long)]
        all: bool,
        /// Ids only.
        #[arg(short, long)]
        quiet: bool,
        /// Whole ids and commands.
        #[arg(long = "no-trunc")]
        no_trunc: bool,
        /// Only the newest N containers (of every state).
        #[arg(short = 'n', long = "last")]
        last: Option<usize>,
        /// Only the newest container (of every state).
        #[arg(short = 'l', long = "latest")]
        latest: bool,
        /// Accepted for docker's sake (sizes are in `system df`).
        #[arg(short = 's', long = "size")]
        size: bool,
        /// table, json (one object per line), or a Go template (`{{.Names}}`, `table
        /// {{.ID}}\t{{.Status}}`).
        #[arg(long, default_value = "table")]
        format: String,
        /// Only this pod's.
        #[arg(long)]
        pod: Option<String>,
        /// Only those matching every filter: id=, name= (a part, or ^start and end$),
        /// label=KEY[=VALUE], ancestor=, status=created|running|paused|restarting|exited,
        /// exited=CODE, network=, volume= (docker's).
        #[arg(short = 'f', long = "filter")]
        filter: Vec<String>,
    },
    /// Print a container's output.
    Logs {
        /// Keep following it.
        #[arg(short, long)]
        follow: bool,
        /// Only the last N lines ("all": every line).
        #[arg(short = 'n', long, value_parser = parse_tail)]
        tail: Option<usize>,
        /// Only lines since (RFC 3339 time or a duration like 10m).
        #[arg(long)]
        since: Option<String>,
        /// Only lines before (RFC 3339 time or a duration like 10m).
        #[arg(long)]
        until: Option<String>,
        /// Prefix lines with their timestamps.
        #[arg(short, long)]
        timestamps: bool,
        /// Container.
        container: String,
    },
    /// Run a command in a running container.
    Exec(ExecArgs),
    /// Attach to a running container's stdio.
    Attach {
        /// Detach key sequence.
        #[arg(long = "detach-keys", default_value = "ctrl-p,ctrl-q")]
        detach_keys: String,
        /// Do not forward stdin.
        #[arg(long = "no-stdin")]
        no_stdin: bool,
        /// Container.
        container: String,
    },
    /// Stop containers (stop signal, then SIGKILL).
    Stop {
        /// Seconds before SIGKILL.
        #[arg(short = 't', long)]
        time: Option<u64>,
        /// Containers.
        #[arg(required = true)]
        containers: Vec<String>,
    },
    /// Restart containers (stop, then start again).
    Restart {
        /// Seconds before SIGKILL.
        #[arg(short = 't', long)]
        time: Option<u64>,
        /// Containers.
        #[arg(required = true)]
        containers: Vec<String>,
    },
    /// Rename a container.
    Rename {
        /// Container.
        container: String,
        /// Its new name.
        new_name: String,
    },
    /// Pause containers (freeze their processes).
    Pause {
        /// Containers.
        #[arg(required = true)]
        containers: Vec<String>,
    },
    /// Unpause paused containers.
    Unpause {
        /// Containers.
        #[arg(required = true)]
        containers: Vec<String>,
    },
    /// Send a signal to containers.
    Kill {
        /// Signal (default KILL).
        #[arg(short, long, default_value = "KILL")]
        signal: String,
        /// Containers.
        #[arg(required = true)]
        containers: Vec<String>,
    },
    /// Remove containers.
    #[command(alias = "remove")]
    Rm {
        /// Kill running ones first.
        #[arg(short, long)]
        force: bool,
        /// Remove their anonymous volumes too.
        #[arg(short, long)]
        volumes: bool,
        /// Containers.
        #[arg(required = true)]
        containers: Vec<String>,
    },
    /// Wait for containers to exit and print their codes.
    Wait {
        /// Containers.
        #[arg(required = true)]
        containers: Vec<String>,
    },
    /// Show containers (or pods) as JSON, or a pod's process tree.
    Inspect {
        /// The pod as the kernel sees it: processes, namespaces, cgroups, mounts.
        #[arg(long)]
        tree: bool,
        /// json (the default), or a Go template (`{{.State.Pid}}`); with --tree: json
        /// instead of a tree.
        #[arg(short, long)]
        format: Option<String>,
        /// Only objects of this type: container, pod or image.
        #[arg(long = "type")]
        kind: Option<String>,
        /// Containers or pods.
        #[arg(required = true)]
        objects: Vec<String>,
    },
    /// Live resource usage of containers.
    Stats {
        /// One sample, then exit.
        #[arg(long = "no-stream")]
        no_stream: bool,
        /// table, json (one object per line), or a Go template (`{{.Name}} {{.MemUsage}}`;
        /// beyond docker's fields, `{{.CPUPressure}}`, `{{.MemPressure}}` and `{{.IOPressure}}`:
        /// cgroup v2 pressure stall information, `some 1.50% full 0.75%` over the last 10 s).
        #[arg(long, default_value = "table")]
        format: String,
        /// Containers (default: all running).
        containers: Vec<String>,
    },
    /// Copy files between a container and the host: `cp CONTAINER:SRC DEST`, `cp SRC
    /// CONTAINER:DEST` (`-` for a tar stream on stdout or stdin).
    Cp {
        /// Keep the files' owners (default: the copier's, root).
        #[arg(short, long)]
        archive: bool,
        /// Source: a host path, CONTAINER:PATH or `-`.
        src: String,
        /// Destination: a host path, CONTAINER:PATH or `-`.
        dest: String,
    },
    /// Write a container's root filesystem as a tar archive.
    Export {
        /// Write to this file (default: stdout).
        #[arg(short, long)]
        output: Option<PathBuf>,
        /// Container.
        container: String,
    },
    /// Files a container added (A), changed (C) or deleted (D) in its image's.
    Diff {
        /// Container.
        container: String,
    },
    /// Build an image from a Dockerfile.
    Build {
        /// Name and optionally a tag for the image (name:tag); may be repeated.
        #[arg(short = 't', long = "tag")]
        tags: Vec<String>,
        /// The Dockerfile (default: PATH/Dockerfile; `-` reads it from stdin).
        #[arg(short = 'f', long = "file")]
        file: Option<PathBuf>,
        /// Build-time variables (KEY=VALUE, or KEY to take it from the environment).
        #[arg(long = "build-arg")]
        build_args: Vec<String>,
        /// The stage to build.
        #[arg(long)]
        target: Option<String>,
        /// Do not use the build cache.
        #[arg(long = "no-cache")]
        no_cache: bool,
        /// Pull base images even when they are present.
        #[arg(long)]
        pull: bool,
        /// The network of RUN steps: default, none or host.
        #[arg(long, default_value = "default")]
        network: String,
        /// Labels for the image (KEY=VALUE).
        #[arg(long = "label")]
        labels: Vec<String>,
        /// Print only the image id.
        #[arg(short, long)]
        quiet: bool,
        /// Write the image id to this file.
        #[arg(long)]
        iidfile: Option<PathBuf>,
        /// The platform to build for (only this host's).
        #[arg(long)]
        platform: Option<String>,
        /// Progress output: auto (the live view on a terminal, the classic builder's step
        /// lines otherwise), plain (BuildKit's numbered lines), tty (the live view), quiet.
        #[arg(long, default_value = "auto")]
        progress: String,
        /// A secret for `RUN --mount=type=secret`: `id=ID,src=FILE` or `id=ID,env=VAR`
        /// (repeatable); it reaches the steps that mount it and no layer.
        #[arg(long = "secret")]
        secrets: Vec<String>,
        /// The build context: a directory, or `-` for a tar on stdin.
        path: String,
    },
    /// Make an image of a container's changes.
    Commit {
        /// The image's author.
        #[arg(short, long)]
        author: Option<String>,
        /// Dockerfile instructions for its config (CMD, ENTRYPOINT, ENV, EXPOSE, LABEL,
        /// USER, WORKDIR, VOLUME, STOPSIGNAL).
        #[arg(short = 'c', long = "change")]
        change: Vec<String>,
        /// A comment for its history.
        #[arg(short, long)]
        message: Option<String>,
        /// Freeze the container while its changes are read.
        #[arg(short, long, default_value_t = true, action = clap::ArgAction::Set, num_args = 0..=1, default_missing_value = "true")]
        pause: bool,
        /// Container.
        container: String,
        /// The new image's name (REPOSITORY[:TAG]).
        reference: Option<String>,
    },
    /// Change the limits of running containers.
    Update {
        /// Memory limit (e.g. 64m).
        #[arg(short = 'm', long)]
        memory: Option<String>,
        /// Memory plus swap limit (-1: unlimited swap).
        #[arg(long = "memory-swap", allow_hyphen_values = true)]
        memory_swap: Option<String>,
        /// CPUs (e.g. 0.5).
        #[arg(long)]
        cpus: Option<f64>,
        /// CPU shares (relative weight).
        #[arg(long = "cpu-shares")]
        cpu_shares: Option<u64>,
        /// Most tasks (-1: unlimited).
        #[arg(long = "pids-limit", allow_hyphen_values = true)]
        pids_limit: Option<i64>,
        /// Containers.
        #[arg(required = true)]
        containers: Vec<String>,
    },
    /// The published ports of a container (PORT[/PROTO]: just that one's).
    Port {
        /// Container.
        container: String,
        /// A container port, e.g. 80 or 80/tcp.
        port: Option<String>,
    },
    /// A container's processes.
    Top {
        /// Container.
        container: String,
        /// table or json.
        #[arg(long, default_value = "table")]
        format: String,
    },
    /// Pods.
    Pod {
        #[command(subcommand)]
        cmd: PodCmd,
    },
    /// User networks.
    Network {
        #[command(subcommand)]
        cmd: NetworkCmd,
    },
    /// The engine and the host as docker's `info` shows them.
    Info {
        /// A Go template (`{{.ContainersRunning}}`) or json.
        #[arg(short, long)]
        format: Option<String>,
    },
    /// `container prune` (reached as that).
    #[command(hide = true, name = "container-prune")]
    ContainerPrune {
        /// Do not ask.
        #[arg(short, long)]
        force: bool,
    },
    /// Named volumes.
    Volume {
        #[command(subcommand)]
        cmd: VolumeCmd,
    },
    /// The image builder's cache.
    Builder {
        #[command(subcommand)]
        cmd: BuilderCmd,
    },
    /// Engine events.
    Events {
        /// Keep printing new events.
        #[arg(long)]
        follow: bool,
        /// text, json (docker's keys), or a Go template (`{{.Action}} {{.Actor.ID}}`).
        #[arg(long, default_value = "text")]
        format: String,
        /// Only events since (RFC 3339 time, Unix time or duration).
        #[arg(long)]
        since: Option<String>,
        /// Only events until (RFC 3339 time, Unix time or duration); the command ends there.
        #[arg(long)]
        until: Option<String>,
        /// Only events matching: type=container|pod|image, event=ACTION, container=NAME,
        /// pod=NAME, image=NAME (docker's keys; one key given twice matches either).
        #[arg(short = 'f', long = "filter")]
        filter: Vec<String>,
    },
    /// The engine's own state: check it, repair it.
    System {
        #[command(subcommand)]
        cmd: SystemCmd,
    },
    /// Run a Kubernetes Pod manifest (with its ConfigMaps and Secrets).
    Play {
        /// Stop and remove what the manifest created.
        #[arg(long, conflicts_with = "status")]
        down: bool,
        /// With --down: remove the volumes of its persistentVolumeClaims too (podman's
        /// `kube down --force`); they are kept otherwise.
        #[arg(long, requires = "down")]
        force: bool,
        /// Take down what an earlier play of the manifest made, then play it again
        /// (podman's `kube play --replace`); the volumes of its claims are kept.
        #[arg(long, conflicts_with_all = ["down", "status"])]
        replace: bool,
        /// Show the manifest's pods as `kubectl get pods` does (READY, STATUS, RESTARTS,
        /// AGE), with each container's state below; `--format json` prints their status
        /// objects.
        #[arg(long)]
        status: bool,
        /// With --status: table (default) or json.
        #[arg(long, requires = "status")]
        format: Option<String>,
        /// Publish host ports from the manifest's hostPort fields.
        #[arg(long = "network", default_value = "default")]
        network: String,
        /// Pull policy for every image of the play (always, missing, never), in place of
        /// the manifest's imagePullPolicy: `never` plays offline.
        #[arg(long)]
        pull: Option<String>,
        /// A file of ConfigMaps and Secrets the pods use (repeatable).
        #[arg(long = "configmap")]
        configmap: Vec<PathBuf>,
        /// The manifest (`-` for stdin).
        file: PathBuf,
    },
    /// ConfigMaps kept by Wharf for `play` (kubectl's `create configmap` flags).
    #[command(name = "configmap", alias = "cm")]
    Configmap {
        #[command(subcommand)]
        cmd: ObjectCmd,
    },
    /// Secrets kept by Wharf for `play` (kubectl's `create secret generic` flags).
    Secret {
        #[command(subcommand)]
        cmd: ObjectCmd,
    },
    /// Files that manage what runs from elsewhere (podman's `generate`).
    Generate {
        #[command(subcommand)]
        cmd: GenerateCmd,
    },
    /// Kubernetes manifests of what runs (podman's `kube`).
    Kube {
        #[command(subcommand)]
        cmd: KubeCmd,
    },
    /// A probe check the pod's shim cannot make itself (HTTPS, gRPC), run by it in the
    /// pod's network namespace: `https HOST PORT PATH TIMEOUT_MS [HEADER...]` or `grpc
    /// HOST PORT SERVICE TIMEOUT_MS`. Exits 0 when the check passes, else prints why.
    #[command(name = "kube-probe", hide = true)]
    KubeProbe {
        /// https or grpc.
        kind: String,
        /// Its arguments.
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
    /// A workload's controller (started by `play`, detached): keeps the pods of the
    /// workload recorded in DIR.
    #[command(name = "kube-controller", hide = true)]
    KubeController {
        /// The workload's record directory.
        dir: PathBuf,
    },
}

/// `--tail N` or `--tail all`, as docker takes it.
fn parse_tail(s: &str) -> Result<usize, String> {
    match s {
        "all" => Ok(usize::MAX),
        n => n
            .parse()
            .map_err(|_| format!("{n:?} is not a number of lines or \"all\"")),
    }
}

/// `wharf generate` subcommands.
#[derive(Subcommand, Debug)]
pub enum GenerateCmd {
    /// A systemd unit that runs a container (`container-NAME.service`): `wharf start
    /// --attach` as its main process, `wharf stop` as its stop. Give the container the
    /// restart policy "no": systemd restarts it.
    Systemd {
        /// Write container-NAME.service in the current directory (and print its path)
        /// instead of printing the unit.
        #[arg(long)]
        files: bool,
        /// systemd's Restart= of the unit.
        #[arg(long = "restart-policy", default_value = "on-failure")]
        restart_policy: String,
        /// Seconds the unit's stop waits before SIGKILL.
        #[arg(short = 't', long = "time", default_value_t = 10)]
        time: u64,
        /// The container (name or id).
        container: String,
    },
}

/// `wharf kube` subcommands.
#[derive(Subcommand, Debug)]
pub enum KubeCmd {
    /// Write the Pod manifest of a pod (or of a container's pod), so that `wharf play` of
    /// it makes it again.
    Generate {
        /// Write it to this file instead of stdout.
        #[arg(short = 'f', long = "filename")]
        filename: Option<PathBuf>,
        /// The pod or container (name or id).
        name: String,
    },
}

/// `wharf configmap|secret` subcommands.
#[derive(Subcommand, Debug)]
pub enum ObjectCmd {
    /// Keep a ConfigMap or Secret for the manifests `play` runs.
    Create {
        /// KEY=VALUE (repeatable).
        #[arg(long = "from-literal")]
        from_literal: Vec<String>,
        /// [KEY=]PATH: a file's content under its name or KEY (repeatable).
        #[arg(long = "from-file")]
        from_file: Vec<PathBuf>,
        /// A file of KEY=VALUE lines (repeatable).
        #[arg(long = "from-env-file")]
        from_env_file: Vec<PathBuf>,
        /// Its namespace.
        #[arg(short = 'n', long, default_value = "default")]
        namespace: String,
        /// Replace one of that name.
        #[arg(long)]
        replace: bool,
        /// Its name.
        name: String,
    },
    /// List them.
    #[command(alias = "list")]
    Ls {
        /// Names only.
        #[arg(short, long)]
        quiet: bool,
        /// table or json.
        #[arg(long, default_value = "table")]
        format: String,
    },
    /// Show them (a Secret's values are not shown: only its keys and sizes).
    Inspect {
        /// Its namespace.
        #[arg(short = 'n', long, default_value = "default")]
        namespace: String,
        /// Names.
        #[arg(required = true)]
        names: Vec<String>,
    },
    /// Remove them.
    #[command(alias = "remove")]
    Rm {
        /// Its namespace.
        #[arg(short = 'n', long, default_value = "default")]
        namespace: String,
        /// Names.
        #[arg(required = true)]
        names: Vec<String>,
    },
}
