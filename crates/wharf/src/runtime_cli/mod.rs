//! `wharf runtime`: the runc-compatible command line over wharf-runtime.
//!
//! Flags, output formats, exit codes and error messages follow runc 1.1, because containerd,
//! podman and docker parse them. Errors print as one line on stderr (and as a log entry in
//! `--log`, which containerd reads back) and exit with status 1.

mod args;
pub use args::parse_signal;
mod cgroup_cmds;

mod exec;
mod logging;
mod output;
// Signal masks, signalfd and waitpid for the process it relays to.
#[allow(unsafe_code)]
mod relay;

use std::ffi::OsString;
use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, anyhow, bail};
use clap::Parser;
use wharf_runtime::{CreateOptions, Runtime};

use args::{Cli, Cmd};

/// Entry point; returns the process exit code.
pub fn main(argv: Vec<OsString>) -> i32 {
    let argv = args::normalize(argv);
    let cli = match Cli::try_parse_from(argv) {
        Ok(c) => c,
        Err(e) => {
            let code = if e.use_stderr() { 1 } else { 0 };
            let _ = e.print();
            return code;
        }
    };
    logging::init(cli.log.as_deref(), &cli.log_format, cli.debug);
    match dispatch(&cli) {
        Ok(code) => code,
        Err(e) => {
            let msg = format!("{e:#}");
            logging::error(&msg);
            let _ = writeln!(std::io::stderr(), "{msg}");
            1
        }
    }
}

fn runtime(cli: &Cli) -> Runtime {
    Runtime::new(&cli.root).with_systemd_cgroup(cli.systemd_cgroup)
}

fn dispatch(cli: &Cli) -> Result<i32> {
    let rt = runtime(cli);
    match &cli.cmd {
        Cmd::Spec { bundle, rootless } => {
            let dir = bundle.clone().unwrap_or_else(|| PathBuf::from("."));
            write_spec(&dir, *rootless)?;
        }
        Cmd::Create(c) => {
            rt.create(&c.id, c.create_options())?;
        }
        Cmd::Start { id } => rt.start(id)?,
        Cmd::Run(r) => return run(&rt, r),
        Cmd::Exec(e) => return exec::exec(&rt, e),
        Cmd::State { id } => {
            let (st, status) = rt.state(id)?;
            println!("{}", output::state_json(&st, status)?);
        }
        Cmd::List { format, quiet } => output::list(&rt, format, *quiet)?,
        Cmd::Kill { all, id, signal } => {
            let sig = args::parse_signal(signal.as_deref().unwrap_or("SIGTERM"))?;
            rt.kill(id, sig, *all)?;
        }
        Cmd::Delete { force, id } => rt.delete(id, *force)?,
        Cmd::Pause { id } => rt.pause(id)?,
        Cmd::Resume { id } => rt.resume(id)?,
        Cmd::Ps {
            format,
            id,
            ps_args,
        } => output::ps(&rt, id, format, ps_args)?,
        Cmd::Features => println!("{}", output::features_json()),
        Cmd::Update(u) => cgroup_cmds::update(&rt, u)?,
        Cmd::Events(e) => cgroup_cmds::events(&rt, e)?,
    }
    Ok(0)
}

fn write_spec(dir: &Path, rootless: bool) -> Result<()> {
    let path = dir.join("config.json");
    if path.exists() {
        bail!("File {} exists. Remove it first", path.display());
    }
    let mut spec: serde_json::Value = serde_json::from_str(wharf_runtime::spec::DEFAULT_CONFIG)?;
    if rootless {
        output::make_rootless(&mut spec);
    }
    let text = serde_json::to_string_pretty(&spec)?;
    std::fs::write(&path, text + "\n").with_context(|| format!("write {}", path.display()))
}

/// `run`: create + start, then (unless detached) wait for the container, relay its terminal
/// and signals, delete it and exit with its status.
fn run(rt: &Runtime, r: &args::RunArgs) -> Result<i32> {
    let bundle = wharf_runtime::spec::load_bundle(&r.create.bundle)?;
    let terminal = bundle
        .spec
        .process()
        .as_ref()
        .and_then(|p| p.terminal())
        .unwrap_or(false);
    let mut opts = r.create.create_options();
    let mut console_peer = None;
    if terminal && opts.console_socket.is_none() {
        if r.detach {
            bail!("cannot allocate tty if runc will detach without setting console socket");
        }
        let (ours, theirs) = relay::socketpair()?;
        opts.console = Some(theirs);
        console_peer = Some(ours);
    }
    if !r.detach && !r.no_subreaper {
        // Orphans of a container without its own pid namespace come back to us to be reaped.
        let _ = rustix::process::set_child_subreaper(Some(rustix::process::getpid()));
    }
    let created = rt.create(&r.create.id, opts)?;
    let master = match console_peer {
        Some(sock) => Some(wharf_runtime::console::recv_fd(std::os::fd::AsFd::as_fd(
            &sock,
        ))?),
        None => None,
    };
    if let Err(e) = rt.start(&r.create.id) {
        let _ = rt.delete(&r.create.id, true);
        return Err(e.into());
    }
    if r.detach {
        return Ok(0);
    }
    let status = relay::wait_foreground(created.pid, &created.pidfd, master)?;
    if !r.keep {
        rt.delete(&r.create.id, true)
            .map_err(|e| anyhow!("delete container {} after it exited: {e}", r.create.id))?;
    }
    Ok(status)
}

impl args::CreateArgs {
    fn create_options(&self) -> CreateOptions {
        CreateOptions {
            bundle: self.bundle.clone(),
            console_socket: self.console_socket.clone(),
            console: None,
            pid_file: self.pid_file.clone(),
            no_pivot: self.no_pivot,
            no_new_keyring: self.no_new_keyring,
            preserve_fds: self.preserve_fds,
        }
    }
}

/// This subsystem's command-line grammar (for shell completions).
pub fn command() -> clap::Command {
    <args::Cli as clap::CommandFactory>::command()
}
