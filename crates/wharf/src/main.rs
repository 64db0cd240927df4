//! The `wharf` binary: one file for every role. The role comes from the subcommand, or from
//! the name the binary is called by (`wharf-runc` / `runc` act as `wharf runtime`, so engines
//! that expect a runc-like binary can point at a symlink).
//!
//! Each subsystem's command line lives in its own module with its own `main(argv) -> i32`;
//! this file only routes the first word to it.

mod completion;
mod engine_cli;
mod image_cli;
mod net_cli;
mod raw_mode;
mod runtime_cli;

use std::ffi::OsString;
use std::path::Path;

fn main() {
    let args: Vec<OsString> = std::env::args_os().collect();
    let argv0 = args
        .first()
        .and_then(|a| Path::new(a).file_name())
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    if matches!(argv0.as_str(), "runc" | "wharf-runc" | "wharf-runtime") {
        std::process::exit(runtime_cli::main(args));
    }
    let at = subcommand_index(&args);
    let sub = args.get(at).map(|a| a.to_string_lossy().into_owned());
    let code = match sub.as_deref() {
        Some("runtime") => runtime_cli::main(sub_argv("wharf runtime", &args[at + 1..])),
        Some("net") => net_cli::main(sub_argv("wharf net", &args[at + 1..])),
        Some("shim") => wharf_shim::daemon::main(sub_argv("wharf shim", &args[at + 1..])),
        Some(
            "run" | "create" | "start" | "ps" | "logs" | "exec" | "attach" | "stop" | "kill" | "rm"
            | "wait" | "inspect" | "stats" | "top" | "pod" | "events" | "play" | "system",
        ) => engine_cli::main(args.clone()),
        Some("pull" | "images" | "rmi" | "image" | "load" | "save" | "import") => {
            image_cli::main(args.clone())
        }
        Some("completion") => completion::main(&args[at + 1..]),
        Some("--version") | Some("version") => {
            println!("wharf version {}", env!("CARGO_PKG_VERSION"));
            0
        }
        None | Some("--help") | Some("-h") | Some("help") => {
            print!("{}", HELP.replace("{version}", env!("CARGO_PKG_VERSION")));
            0
        }
        Some(other) => {
            eprintln!("wharf: unknown command {other:?} (see wharf --help)");
            2
        }
    };
    std::process::exit(code);
}

/// Index of the subcommand: the first argument after the global options (`--root DIR`,
/// `--config FILE`, which the image commands read).
fn subcommand_index(args: &[OsString]) -> usize {
    let mut i = 1;
    while let Some(a) = args.get(i).map(|a| a.to_string_lossy()) {
        if a == "--root" || a == "--config" {
            i += 2;
        } else if a.starts_with("--root=") || a.starts_with("--config=") {
            i += 1;
        } else {
            break;
        }
    }
    i
}

/// argv for a subsystem's parser: its display name, then `rest` (what follows the
/// subcommand; global options before it are the image commands' and are not passed on).
fn sub_argv(name: &str, rest: &[OsString]) -> Vec<OsString> {
    std::iter::once(OsString::from(name))
        .chain(rest.iter().cloned())
        .collect()
}

const HELP: &str = "\
wharf {version}: a pod-native container engine

Usage: wharf [--root DIR] <COMMAND> [ARGS...]

Containers and pods:
  run       Run a command in a new container (in a pod of its own, or --pod)
  create    Create a container without starting it
  start     Start created containers
  ps        List containers
  logs      Print a container's logs
  exec      Run a process in a running container
  attach    Attach to a running container
  stop      Stop containers (signal, then SIGKILL after a grace period)
  kill      Signal containers
  rm        Remove containers
  wait      Wait for containers to exit and print their exit codes
  inspect   Show containers or pods as JSON (--tree: the pod as the kernel sees it)
  stats     Live resource usage from cgroups
  top       Processes of a container
  pod       Manage pods (create, ls, inspect, stop, rm)
  events    Show engine events
  play      Run the pods of a Kubernetes manifest (--down removes them)
  system    Check the metadata store against the disk, or repair it (check, repair)

Images:
  pull      Pull an image from a registry
  images    List images
  rmi       Remove images
  image     Manage images (inspect, prune, mount, unmount, ...)
  load      Load images from an OCI layout or docker save tarball
  save      Save images to a tarball
  import    Create an image from a root filesystem tarball
  runtime   The OCI runtime (runc-compatible command line)
  net       Pod networking: namespaces, CNI, the built-in network, DNS files
  shim      The per-pod supervisor (started by the engine, not by hand)
  completion  Print a shell completion script (bash, zsh, fish)
  version   Print the version

Global options:
  --root DIR     State directory (env WHARF_ROOT, default /var/lib/wharf)
  --run-dir DIR  Runtime directory of the container and pod commands (env WHARF_RUN,
                 default /run/wharf)
  --config FILE  Config file (env WHARF_CONFIG, default /etc/wharf/config.json)
";
