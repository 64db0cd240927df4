//! Command-line grammar of `wharf runtime`, matching runc's flags.

use std::ffi::OsString;
use std::path::PathBuf;

use anyhow::{Result, bail};
use clap::{Args, Parser, Subcommand};

/// runc-compatible OCI runtime.
#[derive(Parser, Debug)]
#[command(
    name = "wharf runtime",
    version,
    about = "Wharf's OCI runtime (runc-compatible)"
)]
pub struct Cli {
    /// Root directory for container state.
    #[arg(long, global = true, default_value = wharf_runtime::DEFAULT_ROOT)]
    pub root: PathBuf,
    /// Log file (errors and warnings; engines read it back).
    #[arg(long, global = true)]
    pub log: Option<PathBuf>,
    /// Log format: text or json.
    #[arg(long = "log-format", global = true, default_value = "text")]
    pub log_format: String,
    /// Debug logging.
    #[arg(long, global = true)]
    pub debug: bool,
    /// Use the systemd cgroup driver (not supported: fails with a clear error).
    #[arg(long = "systemd-cgroup", global = true)]
    pub systemd_cgroup: bool,
    /// Accepted for compatibility (rootless mode is detected, not chosen).
    #[arg(long, hide = true)]
    pub rootless: Option<String>,
    /// Accepted for compatibility (checkpointing is not supported).
    #[arg(long, hide = true)]
    pub criu: Option<String>,
    #[command(subcommand)]
    pub cmd: Cmd,
}

/// Flags shared by `create` and `run`.
#[derive(Args, Debug)]
pub struct CreateArgs {
    /// Bundle directory.
    #[arg(short = 'b', long, default_value = ".")]
    pub bundle: PathBuf,
    /// Unix socket that receives the pty master.
    #[arg(long = "console-socket")]
    pub console_socket: Option<PathBuf>,
    /// File to write the container's pid to.
    #[arg(long = "pid-file")]
    pub pid_file: Option<PathBuf>,
    /// Do not use pivot_root (for ramfs roots).
    #[arg(long = "no-pivot")]
    pub no_pivot: bool,
    /// Do not create a new session keyring.
    #[arg(long = "no-new-keyring")]
    pub no_new_keyring: bool,
    /// Pass N extra fds (3..3+N) to the container.
    #[arg(long = "preserve-fds", default_value_t = 0)]
    pub preserve_fds: u32,
    /// Container id.
    pub id: String,
}

/// `run` flags.
#[derive(Args, Debug)]
pub struct RunArgs {
    #[command(flatten)]
    pub create: CreateArgs,
    /// Detach from the container's process.
    #[arg(short = 'd', long)]
    pub detach: bool,
    /// Keep the container's state after it exits.
    #[arg(long)]
    pub keep: bool,
    /// Do not become a subreaper.
    #[arg(long = "no-subreaper")]
    pub no_subreaper: bool,
}

/// `exec` flags.
#[derive(Args, Debug)]
pub struct ExecArgs {
    /// Unix socket that receives the pty master.
    #[arg(long = "console-socket")]
    pub console_socket: Option<PathBuf>,
    /// Working directory.
    #[arg(long)]
    pub cwd: Option<PathBuf>,
    /// Extra environment variables (KEY=VALUE).
    #[arg(short = 'e', long)]
    pub env: Vec<String>,
    /// Allocate a pseudo-TTY.
    #[arg(short = 't', long)]
    pub tty: bool,
    /// UID[:GID] to run as.
    #[arg(short = 'u', long)]
    pub user: Option<String>,
    /// Additional group ids.
    #[arg(short = 'g', long = "additional-gids")]
    pub additional_gids: Vec<u32>,
    /// A process.json describing the process (replaces the other process flags).
    #[arg(short = 'p', long)]
    pub process: Option<PathBuf>,
    /// Detach from the process.
    #[arg(short = 'd', long)]
    pub detach: bool,
    /// File to write the process's pid to.
    #[arg(long = "pid-file")]
    pub pid_file: Option<PathBuf>,
    /// SELinux label for the process.
    #[arg(long = "process-label")]
    pub process_label: Option<String>,
    /// AppArmor profile for the process.
    #[arg(long)]
    pub apparmor: Option<String>,
    /// Set no_new_privs.
    #[arg(long = "no-new-privs")]
    pub no_new_privs: bool,
    /// Add a capability.
    #[arg(short = 'c', long)]
    pub cap: Vec<String>,
    /// Pass N extra fds (3..3+N).
    #[arg(long = "preserve-fds", default_value_t = 0)]
    pub preserve_fds: u32,
    /// Exec even if the container is paused.
    #[arg(long = "ignore-paused")]
    pub ignore_paused: bool,
    /// Container id.
    pub id: String,
    /// Command and arguments.
    #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
    pub args: Vec<String>,
}

/// Subcommands.
#[derive(Subcommand, Debug)]
pub enum Cmd {
    /// Write a default config.json.
    Spec {
        /// Bundle directory.
        #[arg(short = 'b', long)]
        bundle: Option<PathBuf>,
        /// A spec for a rootless container.
        #[arg(long)]
        rootless: bool,
    },
    /// Create a container (it waits for start).
    Create(CreateArgs),
    /// Start a created container.
    Start {
        /// Container id.
        id: String,
    },
    /// Create and start a container, and wait for it.
    Run(RunArgs),
    /// Run a process in a running container.
    Exec(ExecArgs),
    /// Print a container's state as JSON.
    State {
        /// Container id.
        id: String,
    },
    /// List containers.
    List {
        /// table or json.
        #[arg(short = 'f', long, default_value = "table")]
        format: String,
        /// Print only ids.
        #[arg(short = 'q', long)]
        quiet: bool,
    },
    /// Send a signal to the container's init (or all its processes).
    Kill {
        /// Signal every process of the container.
        #[arg(short = 'a', long)]
        all: bool,
        /// Container id.
        id: String,
        /// Signal name or number (default SIGTERM).
        signal: Option<String>,
    },
    /// Delete a container.
    Delete {
        /// Kill a running container first.
        #[arg(short = 'f', long)]
        force: bool,
        /// Container id.
        id: String,
    },
    /// Freeze a container's processes.
    Pause {
        /// Container id.
        id: String,
    },
    /// Thaw a paused container.
    Resume {
        /// Container id.
        id: String,
    },
    /// List a container's processes.
    Ps {
        /// table or json.
        #[arg(short = 'f', long, default_value = "table")]
        format: String,
        /// Container id.
        id: String,
        /// Arguments for ps(1) (table format).
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        ps_args: Vec<String>,
    },
    /// Print the runtime's features document.
    Features,
    /// Update a container's resource limits.
    Update(Box<super::cgroup_cmds::UpdateArgs>),
    /// Print a container's resource usage and OOM events.
    Events(super::cgroup_cmds::EventsArgs),
}

/// runc accepts Go-style single-dash long flags (`-root`, `-bundle`); rewrite the ones it
/// knows to the double-dash form. Rewriting stops at the container id, so the container's own
/// arguments (`exec c1 sh -c ...`) are never touched.
pub fn normalize(argv: Vec<OsString>) -> Vec<OsString> {
    const FLAGS: &[&str] = &[
        "root",
        "log",
        "log-format",
        "debug",
        "systemd-cgroup",
        "rootless",
        "criu",
        "bundle",
        "console-socket",
        "pid-file",
        "no-pivot",
        "no-new-keyring",
        "preserve-fds",
        "detach",
        "keep",
        "no-subreaper",
        "format",
        "quiet",
        "all",
        "force",
        "tty",
        "cwd",
        "env",
        "user",
        "process",
        "cap",
        "no-new-privs",
        "apparmor",
        "process-label",
        "additional-gids",
        "resources",
        "stats",
        "interval",
        "blkio-weight",
        "cpu-period",
        "cpu-quota",
        "cpu-burst",
        "cpu-share",
        "cpu-shares",
        "cpu-rt-period",
        "cpu-rt-runtime",
        "cpuset-cpus",
        "cpuset-mems",
        "cpu-idle",
        "kernel-memory",
        "kernel-memory-tcp",
        "memory",
        "memory-reservation",
        "memory-swap",
        "pids-limit",
        "l3-cache-schema",
        "mem-bw-schema",
    ];
    const WITH_VALUE: &[&str] = &[
        "root",
        "log",
        "log-format",
        "rootless",
        "criu",
        "bundle",
        "console-socket",
        "pid-file",
        "preserve-fds",
        "format",
        "cwd",
        "env",
        "user",
        "process",
        "cap",
        "apparmor",
        "process-label",
        "additional-gids",
        "resources",
        "interval",
        "blkio-weight",
        "cpu-period",
        "cpu-quota",
        "cpu-burst",
        "cpu-share",
        "cpu-shares",
        "cpu-rt-period",
        "cpu-rt-runtime",
        "cpuset-cpus",
        "cpuset-mems",
        "cpu-idle",
        "kernel-memory",
        "kernel-memory-tcp",
        "memory",
        "memory-reservation",
        "memory-swap",
        "pids-limit",
        "l3-cache-schema",
        "mem-bw-schema",
        "b",
        "f",
        "e",
        "u",
        "p",
        "c",
        "g",
        "r",
    ];
    let mut out = Vec::with_capacity(argv.len());
    let mut iter = argv.into_iter();
    out.extend(iter.next());
    let mut positionals = 0;
    while let Some(a) = iter.next() {
        let s = a.to_string_lossy().into_owned();
        if s == "--" || positionals >= 2 {
            out.push(a);
            out.extend(iter);
            break;
        }
        if !s.starts_with('-') || s == "-" {
            positionals += 1;
            out.push(a);
            continue;
        }
        let bare = s.trim_start_matches('-');
        let name = bare.split('=').next().unwrap_or("");
        if !s.starts_with("--") && s.len() > 2 && FLAGS.contains(&name) {
            out.push(OsString::from(format!("-{s}")));
        } else {
            out.push(a);
        }
        if WITH_VALUE.contains(&name) && !bare.contains('=') {
            out.extend(iter.next());
        }
    }
    out
}

/// A signal by name (`KILL`, `SIGKILL`, `sigkill`, `SIGRTMIN+3`) or number.
pub fn parse_signal(s: &str) -> Result<i32> {
    match wharf_sys::signal::parse(s) {
        Some(n) => Ok(n),
        None => bail!("unknown signal {s:?}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signals_by_name_and_number() {
        assert_eq!(parse_signal("KILL").unwrap(), 9);
        assert_eq!(parse_signal("sigterm").unwrap(), 15);
        assert_eq!(parse_signal("SIGUSR1").unwrap(), 10);
        assert_eq!(parse_signal("2").unwrap(), 2);
        assert!(parse_signal("NOPE").is_err());
        assert!(parse_signal("0").is_err());
    }

    #[test]
    fn go_style_flags_are_rewritten_but_container_args_are_not() {
        let v: Vec<OsString> = [
            "wharf runtime",
            "-root",
            "/r",
            "exec",
            "-cwd",
            "/",
            "c1",
            "sh",
            "-all",
        ]
        .iter()
        .map(OsString::from)
        .collect();
        let n: Vec<String> = normalize(v)
            .into_iter()
            .map(|s| s.into_string().unwrap())
            .collect();
        assert_eq!(n[1], "--root");
        assert_eq!(n[4], "--cwd");
        assert_eq!(n[8], "-all");
    }
}
