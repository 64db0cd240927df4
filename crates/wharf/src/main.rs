//! The `wharf` binary: one file for every role. The role comes from the subcommand, or from
//! the name the binary is called by (`wharf-runc` / `runc` act as `wharf runtime`, so engines
//! that expect a runc-like binary can point at a symlink).

mod runtime_cli;

use std::ffi::OsString;
use std::path::Path;

fn main() {
    let mut args: Vec<OsString> = std::env::args_os().collect();
    let argv0 = args
        .first()
        .and_then(|a| Path::new(a).file_name())
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let code = if matches!(argv0.as_str(), "runc" | "wharf-runc" | "wharf-runtime") {
        runtime_cli::main(args)
    } else if args.get(1).is_some_and(|a| a == "runtime") {
        let mut rest = vec![OsString::from("wharf runtime")];
        rest.extend(args.drain(2..));
        runtime_cli::main(rest)
    } else {
        top_level(&args)
    };
    std::process::exit(code);
}

fn top_level(args: &[OsString]) -> i32 {
    let sub = args.get(1).map(|a| a.to_string_lossy().into_owned());
    match sub.as_deref() {
        Some("--version") | Some("version") => {
            println!("wharf version {}", env!("CARGO_PKG_VERSION"));
            0
        }
        None | Some("--help") | Some("-h") | Some("help") => {
            println!(
                "wharf {}: a pod-native container engine\n\n\
                 Usage: wharf <COMMAND>\n\n\
                 Commands:\n  runtime   The OCI runtime (runc-compatible command line)\n  version   Print the version",
                env!("CARGO_PKG_VERSION")
            );
            0
        }
        Some(other) => {
            eprintln!("wharf: unknown command {other:?} (see wharf --help)");
            2
        }
    }
}
