//! The `wharf` binary: one file for every role. The role comes from the subcommand, or from
//! the name the binary is called by (`wharf-runc` / `runc` act as `wharf runtime`, so engines
//! that expect a runc-like binary can point at a symlink).
//!
//! Each subsystem's command line lives in its own module with its own `main(argv) -> i32`;
//! this file only routes the first word to it.

mod net_cli;
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
    let sub = args.get(1).map(|a| a.to_string_lossy().into_owned());
    let code = match sub.as_deref() {
        Some("runtime") => runtime_cli::main(sub_argv("wharf runtime", &args)),
        Some("net") => net_cli::main(sub_argv("wharf net", &args)),
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

/// argv for a subsystem's parser: its display name, then everything after the subcommand.
fn sub_argv(name: &str, args: &[OsString]) -> Vec<OsString> {
    std::iter::once(OsString::from(name))
        .chain(args.iter().skip(2).cloned())
        .collect()
}

const HELP: &str = "\
wharf {version}: a pod-native container engine

Usage: wharf <COMMAND> [ARGS...]

Commands:
  runtime   The OCI runtime (runc-compatible command line)
  net       Pod networking: namespaces, CNI, the built-in network, DNS files
  version   Print the version
";
