//! The `wharf` binary: one file for every role. The role comes from the subcommand, or from
//! the name the binary is called by (`wharf-runc` / `runc` act as `wharf runtime`, so engines
//! that expect a runc-like binary can point at a symlink).
//!
//! The command line is one clap grammar ([`cli`]); the runtime, network and shim commands
//! keep parsers of their own (runc's spellings, a lean shim), to which their arguments are
//! handed as they are.

#![deny(unsafe_code)]

mod cli;
mod completion;
mod engine_cli;
mod format;
mod image_cli;
mod math;
mod net_cli;
mod raw_mode;
mod runtime_cli;

use std::ffi::OsString;
use std::path::Path;

use clap::Parser;

/// The system's allocator, except in the listings that switch to the bump heap (see
/// [`wharf_heap`]).
#[global_allocator]
static HEAP: wharf_heap::BumpHeap = wharf_heap::BumpHeap;

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
    let at = cli::subcommand_index(&args);
    let sub = args.get(at).map(|a| a.to_string_lossy().into_owned());
    let rest = || sub_argv(sub.as_deref().unwrap_or(""), &args[at + 1..]);
    let code = match sub.as_deref() {
        Some("runtime") => runtime_cli::main(rest()),
        Some("net") => net_cli::main(rest()),
        Some("shim") => wharf_shim::daemon::main(rest()),
        Some("--version") | Some("-v") => version(None),
        _ => match cli::Wharf::try_parse_from(&args) {
            Ok(w) => dispatch(w),
            Err(e) => {
                let code = if e.use_stderr() { 2 } else { 0 };
                let _ = e.print();
                code
            }
        },
    };
    std::process::exit(code);
}

fn dispatch(w: cli::Wharf) -> i32 {
    let g = w.global;
    match w.cmd {
        cli::Command::Engine(cmd) => engine_cli::main(engine_cli::args::Cli {
            cmd: *cmd,
            root: g.root,
            run: g.run,
            config: g.config,
            cgroup_manager: g.cgroup_manager,
        }),
        cli::Command::Container { cmd } => {
            let cmd = match cmd {
                engine_cli::args::ContainerCmd::Cmd(c) => c,
                engine_cli::args::ContainerCmd::Prune { force } => {
                    Box::new(engine_cli::args::Cmd::ContainerPrune { force })
                }
            };
            engine_cli::main(engine_cli::args::Cli {
                cmd: *cmd,
                root: g.root,
                run: g.run,
                config: g.config,
                cgroup_manager: g.cgroup_manager,
            })
        }
        cli::Command::Image(cmd) => image_cli::main(image_cli::args::Cli {
            root: g.root,
            run: g.run,
            config: g.config,
            cmd,
        }),
        cli::Command::Daemon(d) => daemon(&g, &d),
        cli::Command::Completion { shell } => completion::main(&shell),
        cli::Command::Version { format } => version(format.as_deref()),
        // Handed over before parsing (see `main`); reached only through odd spellings.
        cli::Command::Runtime(p) => runtime_cli::main(sub_argv("runtime", &p.args)),
        cli::Command::Net(p) => net_cli::main(sub_argv("net", &p.args)),
        cli::Command::Shim(p) => wharf_shim::daemon::main(sub_argv("shim", &p.args)),
    }
}

/// `wharf daemon`: the CRI server over the engine the CLI would open.
fn daemon(g: &cli::GlobalOpts, d: &cli::DaemonArgs) -> i32 {
    // What the config file says, read again on SIGHUP; flags win over it.
    let (root, run, config) = (g.root.clone(), g.run.clone(), g.config.clone());
    let manager = g.cgroup_manager.clone();
    let load = move || -> Result<(wharf_engine::EngineOptions, wharf_cri::config::DaemonConfig), String> {
        let daemon = wharf_cri::config::DaemonConfig::load(&config)?;
        // The flag, else the daemon's own key (kubelet's word), else the engine's.
        let manager = manager.clone().or(daemon.cgroup_driver.clone());
        let mut engine = engine_cli::engine_options(&root, &run, &config, manager.as_deref())
            .map_err(|e| format!("{e:#}"))?;
        engine.restrict_oom_score_adj = daemon.restrict_oom_score_adj.unwrap_or(false);
        Ok((engine, daemon))
    };
    let (engine, file) = match load() {
        Ok(v) => v,
        Err(e) => {
            eprintln!("wharf: {e}");
            return 1;
        }
    };
    let level = d
        .log_level
        .clone()
        .or(file.log_level.clone())
        .unwrap_or_else(|| "info".into());
    let format = d
        .log_format
        .clone()
        .or(file.log_format.clone())
        .unwrap_or_else(|| "text".into());
    let docker_listen = d
        .docker_listen
        .clone()
        .or(file.docker_listen.clone())
        .unwrap_or_else(|| engine.run.join("docker.sock"));
    let docker_group = match file.docker_group.as_deref().filter(|g| !g.is_empty()) {
        None => None,
        Some(g) => match wharf_cri::daemon::group_id(g) {
            Some(gid) => Some(gid),
            None => {
                eprintln!("wharf: daemon.docker-group {g:?}: no such group");
                return 1;
            }
        },
    };
    wharf_cri::daemon::run(wharf_cri::daemon::DaemonOptions {
        docker_listen: Some(docker_listen).filter(|p| !p.as_os_str().is_empty()),
        docker_group,
        listen: d
            .listen
            .clone()
            .or(file.listen.clone())
            .unwrap_or_else(|| wharf_cri::daemon::DEFAULT_SOCKET.into()),
        engine,
        log_level: wharf_cri::daemon::parse_level(&level).unwrap_or(wharf_cri::log::Level::Info),
        log_json: format == "json",
        config: file,
        reload: Some(std::sync::Arc::new(load)),
    })
}

/// `wharf version`: one line, or docker's document through `--format`.
fn version(format: Option<&str>) -> i32 {
    let v = env!("CARGO_PKG_VERSION");
    let Some(f) = format else {
        println!("wharf version {v}");
        return 0;
    };
    let doc = serde_json::json!({
        "Client": {"Version": v, "Os": "linux", "Arch": std::env::consts::ARCH},
        "Server": {"Version": v, "Os": "linux", "Arch": std::env::consts::ARCH},
    });
    match format::Format::parse(f).and_then(|f| format::print_documents(&f, &[doc])) {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("wharf: {e:#}");
            1
        }
    }
}

/// argv for a subsystem's parser: `wharf <name>` as its display name, then `rest` (what
/// follows the subcommand; global options before it are not passed on).
fn sub_argv(name: &str, rest: &[OsString]) -> Vec<OsString> {
    std::iter::once(OsString::from(format!("wharf {name}")))
        .chain(rest.iter().cloned())
        .collect()
}
