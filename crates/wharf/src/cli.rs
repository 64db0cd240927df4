//! The whole command line as one clap grammar: the global options, every container, pod,
//! image and system command, and the subsystems' own command lines (`runtime`, `net`,
//! `shim`), from which `--help`, `wharf help <command>` and the completion scripts come.
//!
//! `runtime`, `net` and `shim` keep grammars of their own (runc's single-dash spellings
//! and defaults for `wharf runtime`; a small hand parser that keeps the shim lean): `main`
//! hands their arguments over as they are, and this grammar only describes them.

use std::ffi::OsString;
use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

/// Wharf: a pod-native container engine.
#[derive(Parser, Debug)]
#[command(
    name = "wharf",
    about = "Wharf: a pod-native container engine",
    long_about = None,
    disable_version_flag = true,
    subcommand_required = true,
    arg_required_else_help = true
)]
pub struct Wharf {
    /// Options every command takes, before or after its name.
    #[command(flatten)]
    pub global: GlobalOpts,
    /// The command.
    #[command(subcommand)]
    pub cmd: Command,
}

/// The state a command works on.
#[derive(Args, Debug, Clone)]
pub struct GlobalOpts {
    /// State directory (images, containers, metadata).
    #[arg(long, global = true, env = "WHARF_ROOT", default_value = wharf_engine::paths::DEFAULT_ROOT)]
    pub root: PathBuf,
    /// Runtime directory (mounts, pinned namespaces, runtime state).
    // The id is `wharf net`'s for the same option, so the two are one in the grammar.
    #[arg(id = "run_dir", long = "run-dir", global = true, env = "WHARF_RUN", default_value = wharf_engine::paths::DEFAULT_RUN)]
    pub run: PathBuf,
    /// Wharf's config file (registries, image limits, default network).
    #[arg(long, global = true, env = "WHARF_CONFIG", default_value = wharf_engine::images::DEFAULT_CONFIG_PATH)]
    pub config: PathBuf,
    /// What places pods' cgroups: cgroupfs, or systemd (transient units). Default: the
    /// config file's engine.cgroup-manager, else systemd where it booted the host.
    #[arg(long = "cgroup-manager", global = true, env = "WHARF_CGROUP_MANAGER", value_parser = ["cgroupfs", "systemd"])]
    pub cgroup_manager: Option<String>,
}

/// Every command.
#[derive(Subcommand, Debug)]
pub enum Command {
    /// Containers, pods and the engine's state.
    #[command(flatten)]
    Engine(Box<crate::engine_cli::args::Cmd>),
    /// Images.
    #[command(flatten)]
    Image(crate::image_cli::args::Cmd),
    /// Containers, by docker's management command (`container ls`, `container prune`...).
    Container {
        #[command(subcommand)]
        cmd: crate::engine_cli::args::ContainerCmd,
    },
    /// The OCI runtime (runc-compatible command line; see `wharf runtime --help`).
    Runtime(Passthrough),
    /// Pod networking by hand: namespaces, CNI, the built-in network, DNS files.
    Net(Passthrough),
    /// The per-pod supervisor (started by the engine, not by hand).
    #[command(hide = true)]
    Shim(Passthrough),
    /// Serve the Kubernetes CRI on a unix socket (kubelet, crictl), on the same state as
    /// the CLI.
    Daemon(DaemonArgs),
    /// Print a shell completion script.
    Completion {
        /// bash, zsh or fish.
        #[arg(value_parser = ["bash", "zsh", "fish"])]
        shell: String,
    },
    /// Print the version.
    Version {
        /// A Go template over docker's keys (`{{.Server.Version}}`), or json.
        #[arg(short, long)]
        format: Option<String>,
    },
}

/// `wharf daemon`'s options.
#[derive(Args, Debug)]
pub struct DaemonArgs {
    /// The unix socket to serve on (default: the config file's daemon.listen, else
    /// /run/wharf/wharf.sock).
    #[arg(long, env = "WHARF_SOCKET")]
    pub listen: Option<PathBuf>,
    /// debug, info, warn or error (default: daemon.log-level, else info).
    #[arg(long, value_parser = ["debug", "info", "warn", "warning", "error"])]
    pub log_level: Option<String>,
    /// Log format: text (logfmt) or json (default: daemon.log-format, else text).
    #[arg(long, value_parser = ["text", "json"])]
    pub log_format: Option<String>,
    /// The unix socket to serve the Docker Engine API on (default: daemon.docker-listen,
    /// else docker.sock in the run directory: /run/wharf/docker.sock); '' for none.
    #[arg(long = "docker-listen", env = "WHARF_DOCKER_SOCKET")]
    pub docker_listen: Option<PathBuf>,
}

/// A subsystem's arguments, handed over as they are.
#[derive(Args, Debug)]
pub struct Passthrough {
    /// Its arguments (see its own --help).
    #[arg(trailing_var_arg = true, allow_hyphen_values = true, num_args = 0..)]
    pub args: Vec<OsString>,
}

/// The grammar, with the subsystems' own command lines in place of their passthrough
/// entries (for help and completions).
pub fn command() -> clap::Command {
    <Wharf as clap::CommandFactory>::command()
        .mut_subcommand("runtime", |_| {
            crate::runtime_cli::command()
                .name("runtime")
                .about("The OCI runtime (runc-compatible command line)")
        })
        .mut_subcommand("net", |_| {
            crate::net_cli::command()
                .name("net")
                .about("Pod networking by hand: namespaces, CNI, the built-in network, DNS files")
        })
}

/// Index of the subcommand in `args`: the first argument after the global options given
/// before it (`--root DIR`, `--run-dir=DIR`, ...).
pub fn subcommand_index(args: &[OsString]) -> usize {
    let mut i = 1;
    while let Some(a) = args.get(i).map(|a| a.to_string_lossy()) {
        if a == "--root" || a == "--run-dir" || a == "--config" {
            i += 2;
        } else if a.starts_with("--root=")
            || a.starts_with("--run-dir=")
            || a.starts_with("--config=")
        {
            i += 1;
        } else {
            break;
        }
    }
    i
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_grammar_is_consistent_and_complete() {
        let cmd = command();
        cmd.clone().debug_assert();
        let names: Vec<&str> = cmd.get_subcommands().map(|c| c.get_name()).collect();
        for want in [
            "run",
            "ps",
            "pod",
            "play",
            "system",
            "pull",
            "images",
            "runtime",
            "net",
            "completion",
        ] {
            assert!(names.contains(&want), "{want} missing from {names:?}");
        }
    }

    #[test]
    fn completions_generate_for_every_shell() {
        for shell in [
            clap_complete::Shell::Bash,
            clap_complete::Shell::Zsh,
            clap_complete::Shell::Fish,
        ] {
            let mut out = Vec::new();
            clap_complete::generate(shell, &mut command(), "wharf", &mut out);
            let text = String::from_utf8(out).unwrap();
            for word in ["pull", "runtime", "play", "run-dir"] {
                assert!(text.contains(word), "{shell:?} completion lacks {word}");
            }
        }
    }

    #[test]
    fn global_options_go_before_or_after_the_command() {
        for argv in [
            vec!["wharf", "--run-dir", "/tmp/x", "ps"],
            vec!["wharf", "ps", "--run-dir", "/tmp/x"],
            vec!["wharf", "--run-dir=/tmp/x", "ps"],
        ] {
            let w = Wharf::try_parse_from(&argv).unwrap();
            assert_eq!(w.global.run, PathBuf::from("/tmp/x"), "{argv:?}");
        }
    }
}
