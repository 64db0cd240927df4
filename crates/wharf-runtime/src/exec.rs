//! `exec`: start another process inside a running container, in all its namespaces and its
//! cgroup, with the container's security settings (capabilities, seccomp, LSM, no_new_privs)
//! unless the process description overrides them.

use std::ffi::OsStr;
use std::os::fd::{AsFd, OwnedFd};
use std::path::PathBuf;

use oci_spec::runtime::{LinuxNamespaceType, Process};

use crate::container::{Created, Runtime};
use crate::error::{Context, Error, Result};
use crate::init;
use crate::namespaces::{self, Restore};
use crate::seccomp;
use crate::state::Status;
use crate::sync::{self, Channel, Msg};
use crate::sys::{self, Forked};

/// Options of `exec` (runc's flags of the same names).
#[derive(Debug)]
pub struct ExecOptions {
    /// The process to run (runc builds it from `--process` or from the container's process
    /// plus the command-line flags).
    pub process: Process,
    /// Unix socket to send the pty master to (process.terminal).
    pub console_socket: Option<PathBuf>,
    /// An already connected console socket.
    pub console: Option<OwnedFd>,
    /// File to write the new process's pid to.
    pub pid_file: Option<PathBuf>,
    /// Pass fds 3..3+N to the process.
    pub preserve_fds: u32,
    /// Allow exec into a paused container (the process starts frozen).
    pub ignore_paused: bool,
}

impl Runtime {
    /// Start `opts.process` in container `id`. The process is a child of the caller until the
    /// caller exits (then it is reparented, as with runc's `exec --detach`).
    pub fn exec(&self, id: &str, mut opts: ExecOptions) -> Result<Created> {
        let st = self.store().load(id)?;
        match st.status(&self.store().dir(id)) {
            Status::Running | Status::Created => {}
            Status::Paused if opts.ignore_paused => {}
            Status::Paused => return Err(Error::State("cannot exec in a paused container".into())),
            Status::Stopped => {
                return Err(Error::State("cannot exec in a stopped container".into()));
            }
            Status::Creating => {
                return Err(Error::State(
                    "cannot exec in a container that is being created".into(),
                ));
            }
        }
        let proc_ = &opts.process;
        crate::spec::check_user(proc_.user())?;
        if proc_.args().as_ref().is_none_or(|a| a.is_empty()) {
            return Err(Error::Config("exec: process.args must not be empty".into()));
        }
        if !proc_.cwd().is_absolute() {
            return Err(Error::Config(format!(
                "exec: cwd {:?} is not absolute",
                proc_.cwd()
            )));
        }
        crate::lsm::check(
            proc_.apparmor_profile().as_deref(),
            proc_.selinux_label().as_deref(),
        )?;
        let filter = match st
            .config
            .linux()
            .as_ref()
            .and_then(|l| l.seccomp().as_ref())
        {
            Some(s) => Some(seccomp::compile(s)?),
            None => None,
        };
        let console = if proc_.terminal().unwrap_or(false) {
            match (opts.console.take(), &opts.console_socket) {
                (Some(fd), _) => Some(fd),
                (None, Some(path)) => Some(crate::console::connect(path)?),
                (None, None) => {
                    return Err(Error::Config(
                        "exec: a terminal needs a console socket (--console-socket)".into(),
                    ));
                }
            }
        } else {
            None
        };
        // Join every namespace the container has, through its init.
        let mut joins = Vec::new();
        let mut join_pid = None;
        let mut join_time = None;
        let listed = crate::spec::namespaces(&st.config);
        for t in namespaces::JOIN_ORDER {
            if !listed.iter().any(|n| n.typ() == t) {
                continue;
            }
            let path = format!("/proc/{}/ns/{}", st.pid, namespaces::proc_name(t));
            let fd = rustix::fs::open(
                &path,
                rustix::fs::OFlags::RDONLY | rustix::fs::OFlags::CLOEXEC,
                rustix::fs::Mode::empty(),
            )
            .ctx(|| format!("open {path}"))?;
            match t {
                LinuxNamespaceType::Pid => join_pid = Some(fd),
                LinuxNamespaceType::Time => join_time = Some(fd),
                _ => joins.push((t, fd)),
            }
        }
        // The pid may have been reused between load and open: check it is still the init.
        if sys::process_start_time(st.pid).ok() != Some(st.init_start_time) {
            return Err(Error::State("cannot exec in a stopped container".into()));
        }
        let _restore_pid = match &join_pid {
            Some(fd) => {
                let r = Restore::save(LinuxNamespaceType::Pid)?;
                namespaces::join(LinuxNamespaceType::Pid, fd)?;
                Some(r)
            }
            None => None,
        };
        let _restore_time = match &join_time {
            Some(fd) => {
                let r = Restore::save(LinuxNamespaceType::Time)?;
                namespaces::join(LinuxNamespaceType::Time, fd)?;
                Some(r)
            }
            None => None,
        };
        let (parent_end, child_end) = sync::pair()?;
        crate::dmz::memfd().ctx(|| "create the exec helper's memfd".into())?;
        let unified = st.cgroup.unified_fd();
        // clone3 places the process in the unified hierarchy; the v1 ones it joins itself
        // (cheap: Cgroup::join_self_v1), unless it is about to enter a user namespace,
        // where it could no longer write the host's cgroup files before the join.
        let cgroup_fd = unified.as_ref().map(|f| f.as_fd());
        let self_join = !joins.iter().any(|(t, _)| *t == LinuxNamespaceType::User);
        // The child is visible inside the container from birth: it must never be dumpable
        // there (no ptrace, no /proc/PID/exe of the runtime binary: CVE-2019-5736, CVE-2016-9962).
        let _ =
            rustix::process::set_dumpable_behavior(rustix::process::DumpableBehavior::NotDumpable);
        // SAFETY: the runtime is single-threaded (the library's contract for exec).
        let forked =
            unsafe { sys::clone_process(0, cgroup_fd) }.ctx(|| "clone the exec process".into())?;
        let (pid, pidfd, placed) = match forked {
            (Forked::Child, _) => {
                let cgroup = self_join.then_some(&st.cgroup);
                child(child_end, &joins, cgroup, &opts, console, filter.as_ref())
            }
            (Forked::Parent { pid, pidfd }, placed) => (pid, pidfd, placed),
        };
        drop(child_end);
        let kill_child = |e: Error| {
            // SAFETY: our own child; reap it so it does not linger.
            unsafe {
                libc::kill(pid, libc::SIGKILL);
                libc::waitpid(pid, std::ptr::null_mut(), 0);
            }
            e
        };
        if !self_join {
            st.cgroup.add_pid(pid, placed).map_err(kill_child)?;
        } else if !placed {
            st.cgroup.add_pid_unified(pid).map_err(kill_child)?;
        }
        if let Some(score) = opts.process.oom_score_adj() {
            crate::process_attrs::set_oom_score_adj(pid, score).map_err(kill_child)?;
        }
        parent_end
            .send(&Msg::Go)
            .ctx(|| "start the exec process".into())
            .map_err(kill_child)?;
        // EOF means the exec succeeded (the channel is close-on-exec).
        match parent_end.recv() {
            Ok(None) => {}
            Ok(Some(Msg::Failed(text))) => {
                // SAFETY: reap our failed child.
                unsafe { libc::waitpid(pid, std::ptr::null_mut(), 0) };
                return Err(Error::Init(text));
            }
            Ok(Some(Msg::ExecFailed(errno, detail))) => {
                // SAFETY: reap our failed child.
                unsafe { libc::waitpid(pid, std::ptr::null_mut(), 0) };
                let program = opts
                    .process
                    .args()
                    .as_ref()
                    .and_then(|a| a.first().cloned());
                return Err(Error::Exec {
                    program: program.unwrap_or_default(),
                    errno,
                    detail,
                });
            }
            Ok(Some(other)) => {
                return Err(kill_child(Error::Other(format!(
                    "exec: unexpected {other:?}"
                ))));
            }
            Err(e) => return Err(kill_child(Error::os("exec: read the sync socket", e))),
        }
        if let Some(pf) = &opts.pid_file {
            let path = std::path::absolute(pf).unwrap_or_else(|_| pf.clone());
            crate::state::write_atomic(&path, pid.to_string().as_bytes())?;
        }
        Ok(Created { pid, pidfd })
    }
}

/// The exec'd process: join, set up, exec. Never returns.
fn child(
    channel: Channel,
    joins: &[(LinuxNamespaceType, OwnedFd)],
    cgroup: Option<&crate::cgroups::Cgroup>,
    opts: &ExecOptions,
    console: Option<OwnedFd>,
    filter: Option<&seccomp::Filter>,
) -> ! {
    let err = match child_setup(&channel, joins, cgroup, opts, console, filter) {
        Err(e) => e,
        Ok(never) => match never {},
    };
    let _ = channel.send(&match err {
        Error::Exec { errno, detail, .. } => Msg::ExecFailed(errno, detail),
        e => Msg::Failed(e.to_string()),
    });
    sys::exit_now(127)
}

fn child_setup(
    channel: &Channel,
    joins: &[(LinuxNamespaceType, OwnedFd)],
    cgroup: Option<&crate::cgroups::Cgroup>,
    opts: &ExecOptions,
    console: Option<OwnedFd>,
    filter: Option<&seccomp::Filter>,
) -> Result<std::convert::Infallible> {
    let joined = cgroup.map_or(Ok(()), |cg| cg.join_self_v1());
    match channel.recv() {
        Ok(Some(Msg::Go)) => {}
        _ => sys::exit_now(1),
    }
    joined?;
    for (t, fd) in joins {
        namespaces::join(*t, fd)?;
    }
    let proc_ = &opts.process;
    if proc_.terminal().unwrap_or(false) {
        let size = proc_
            .console_size()
            .map(|b| (b.height() as u16, b.width() as u16));
        let pty = crate::console::open_pty(size)?;
        let sock = console.as_ref().expect("checked by the parent");
        crate::console::send_fd(sock.as_fd(), &pty.slave_path, pty.master.as_fd())?;
        drop(pty.master);
        crate::console::become_terminal_owner(&pty.slave)?;
    } else {
        let _ = rustix::process::setsid();
    }
    drop(console);
    // Nothing of the host stays open once paths of the container's choosing are resolved.
    crate::log::detach();
    let dmz = crate::dmz::memfd().map_err(|e| Error::os("the exec helper's memfd", e))?;
    sys::close_fds_except(
        3 + opts.preserve_fds,
        &[
            std::os::fd::AsRawFd::as_raw_fd(channel),
            std::os::fd::AsRawFd::as_raw_fd(&dmz),
        ],
    )
    .ctx(|| "close the runtime's file descriptors".into())?;
    let env = init::environment(proc_);
    let args = proc_.args().as_ref().expect("checked by the parent");
    let program = init::find_program(&args[0], &env)?;
    let argv = args
        .iter()
        .map(|a| init::cstring(OsStr::new(a)))
        .collect::<Result<Vec<_>>>()?;
    let envp = env
        .iter()
        .map(|a| init::cstring(OsStr::new(a)))
        .collect::<Result<Vec<_>>>()?;
    crate::process_attrs::set_rlimits(proc_)?;
    // An exec'd process keeps the personality it inherits.
    init::exec_process(
        proc_,
        None,
        filter,
        init::Exec {
            dmz,
            errfd: std::os::fd::AsRawFd::as_raw_fd(channel),
            preserve_fds: opts.preserve_fds,
            program: &program,
            argv: &argv,
            envp: &envp,
        },
    )
}
