//! `wharf-shim`: the per-pod shim as a binary of its own (see wharf_shim::daemon), spawned
//! by the engine in place of `wharf shim` when it is installed next to `wharf`. It links
//! the shim and the runtime only, so each of the many shims a node runs carries less
//! private memory (the relocated data of a position-independent binary is per process).

mod math;

fn main() {
    let mut args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    // Spelled like the multi-call binary's subcommand too: `wharf-shim shim --pod ...`.
    if args.get(1).is_some_and(|a| a == "shim") {
        args.remove(1);
    }
    std::process::exit(wharf_shim::daemon::main(args));
}
