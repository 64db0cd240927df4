//! The container's init: the code that runs in the process cloned by `create`, from the
//! clone until it execs the user's program.
//!
//! It is not a re-exec of the runtime binary: the clone continues in a copy of the runtime's
//! memory, with the parsed config already there, so setting up costs only the syscalls the
//! container needs. It runs in two halves: everything up to "ready" reports failures to the
//! runtime over the sync channel; after `start` opens the exec fifo, failures are written
//! into the fifo, which is how `start` learns of them.

use std::ffi::{CString, OsStr};
use std::io::Write;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use oci_spec::runtime::{LinuxNamespaceType, Process};

use crate::caps;
use crate::cgroups::Cgroup;
use crate::console;
use crate::error::{Context, Error, Result, p};
use crate::hooks::{self, Kind};
use crate::namespaces::{self, Plan};
use crate::process_attrs;
use crate::rootfs::{self, RootfsOptions};
use crate::seccomp;
use crate::spec::Bundle;
use crate::sync::{Channel, Msg};
use crate::sys;

/// Everything the init needs, prepared by the runtime before the clone.
pub struct InitArgs<'a> {
    /// Container id.
    pub id: &'a str,
    /// The validated bundle.
    pub bundle: &'a Bundle,
    /// Child end of the sync channel.
    pub channel: Channel,
    /// The exec fifo, opened O_PATH.
    pub fifo: OwnedFd,
    /// Connected console socket, when process.terminal is set.
    pub console: Option<OwnedFd>,
    /// Namespace plan (joins by fd).
    pub plan: &'a Plan,
    /// The container's cgroup.
    pub cgroup: &'a Cgroup,
    /// Join the v1 hierarchies ourselves (cheap), rather than being moved by the runtime.
    pub self_join_cgroups: bool,
    /// The host's cgroup hierarchies.
    pub layout: &'a crate::cgroups::Layout,
    /// Use MS_MOVE + chroot instead of pivot_root (--no-pivot).
    pub no_pivot: bool,
    /// Do not create a session keyring (--no-new-keyring).
    pub no_new_keyring: bool,
    /// Number of fds after stdio to pass through (--preserve-fds).
    pub preserve_fds: u32,
    /// Compiled seccomp filter.
    pub seccomp: Option<&'a seccomp::Filter>,
    /// The sealed exec helper the container's program is exec'd through ([`crate::dmz`]).
    pub dmz: std::os::fd::BorrowedFd<'static>,
    /// The mounts prepared before the clone ([`crate::mount_sources`]).
    pub prepared: &'a crate::mount_sources::Prepared,
}

/// Run the init. Never returns: it execs the container's program or exits.
pub fn run(args: InitArgs<'_>) -> ! {
    match setup(&args) {
        Ok(ready) => {
            // Past this point the runtime has gone; only `start` hears from us, via the fifo
            // (its write end closes on a successful exec, carries the error otherwise).
            let Err(err) = finish(&args, &ready);
            let mut fifo: &std::fs::File = &ready.fifo;
            let report = match &err {
                Error::Exec { errno, detail, .. } => {
                    crate::dmz::failure_report(*errno, detail.as_deref())
                }
                e => e.to_string().into_bytes(),
            };
            let _ = fifo.write_all(&report);
            sys::exit_now(127)
        }
        Err(e) => {
            let _ = args.channel.send(&match e {
                Error::Exec { errno, detail, .. } => Msg::ExecFailed(errno, detail),
                e => Msg::Failed(e.to_string()),
            });
            sys::exit_now(1)
        }
    }
}

/// What `setup` hands to `finish`.
struct Ready {
    /// The program, argv and envp to exec (None when the config has no process: start
    /// then fails, as the runtime spec requires).
    exec: Option<(CString, Vec<CString>, Vec<CString>)>,
    fifo: std::fs::File,
    /// Our pid in the runtime's pid namespace (for hook state).
    host_pid: i32,
}

fn setup(args: &InitArgs<'_>) -> Result<Ready> {
    let spec = &args.bundle.spec;
    let proc_ = spec.process().as_ref();
    // Join the cgroups first thing, while the runtime writes our id maps and oom score.
    let joined = if args.self_join_cgroups {
        args.cgroup.join_self_v1()
    } else {
        Ok(())
    };
    match args.channel.recv() {
        Ok(Some(Msg::Go)) => {}
        Ok(Some(other)) => return Err(Error::Other(format!("init: unexpected {other:?}"))),
        // The runtime died before letting us go: nothing to report to.
        Ok(None) => sys::exit_now(1),
        Err(e) => return Err(Error::os("init: read the sync socket", e)),
    }
    joined?;
    // /proc is still the host's: it tells our pid as the runtime and hooks know it.
    let host_pid = host_pid();
    // After an intermediate process, the namespaces are ready: nothing to join or create.
    let plan_here = !args.plan.intermediate;
    if plan_here && args.plan.clone_flags & libc::CLONE_NEWUSER as u64 != 0 {
        // Our ids are still the host's (unmapped inside, shown as the overflow id): become
        // the namespace's root now that the maps exist, so files we create are owned by it.
        crate::intermediate::become_root()?;
    }
    for (t, fd) in args.plan.join.iter().filter(|_| plan_here) {
        namespaces::join(*t, fd)?;
    }
    if plan_here && args.plan.late_cgroup_ns {
        sys::unshare(libc::CLONE_NEWCGROUP).ctx(|| "unshare the cgroup namespace".into())?;
    }
    let _ = rustix::process::setsid();
    if !args.no_new_keyring {
        process_attrs::new_session_keyring();
    }
    let namespaces = crate::spec::namespaces(spec);
    let has = |t| namespaces.iter().any(|n| n.typ() == t);
    let new = |t| {
        namespaces
            .iter()
            .any(|n| n.typ() == t && n.path().is_none())
    };
    let opts = RootfsOptions {
        bundle: &args.bundle.dir,
        rootfs: &args.bundle.rootfs,
        cgroup: args.cgroup,
        layout: args.layout,
        cgroup_ns: has(LinuxNamespaceType::Cgroup),
        user_ns: has(LinuxNamespaceType::User),
        net_ns: has(LinuxNamespaceType::Network),
        no_pivot: args.no_pivot,
        prepared: args.prepared,
        from_cwd: has(LinuxNamespaceType::User) && new(LinuxNamespaceType::Mount),
        shared_mount_ns: !new(LinuxNamespaceType::Mount),
    };
    // Without a mount namespace of its own, the container's mounts are made in the one it
    // shares (below its rootfs, where delete unmounts them) and it is entered with chroot.
    rootfs::prepare(spec, &opts)?;
    let hooks = spec.hooks().as_ref();
    if hooks::any(hooks, Kind::Prestart) || hooks::any(hooks, Kind::CreateRuntime) {
        args.channel
            .send(&Msg::RunHooks)
            .ctx(|| "init: ask for hooks".into())?;
        args.channel.expect(Msg::HooksDone, "createRuntime hooks")?;
    }
    if hooks::any(hooks, Kind::CreateContainer) {
        let state = hooks::HookState::new(
            args.id,
            crate::state::Status::Creating,
            Some(host_pid),
            &args.bundle.dir,
            spec.annotations().clone().unwrap_or_default(),
        );
        hooks::run_all(hooks, Kind::CreateContainer, &state.to_json())?;
    }
    rootfs::enter(spec, &opts)?;
    if let Some(proc_) = proc_.filter(|p| p.terminal().unwrap_or(false)) {
        let size = proc_
            .console_size()
            .map(|b| (b.height() as u16, b.width() as u16));
        let pty = console::open_pty(size)?;
        let sock = args.console.as_ref().ok_or_else(|| {
            Error::Config("process.terminal is set but no console socket was given".into())
        })?;
        console::send_fd(sock.as_fd(), &pty.slave_path, pty.master.as_fd())?;
        drop(pty.master);
        console::become_terminal_owner(&pty.slave)?;
        console::mount_console(&pty.slave)?;
    }
    // Sysctls go in before /proc/sys turns read-only (readonlyPaths), as in runc.
    if let Some(sysctl) = spec.linux().as_ref().and_then(|l| l.sysctl().as_ref()) {
        process_attrs::write_sysctls(sysctl)?;
    }
    rootfs::finalize(spec, opts.shared_mount_ns)?;
    if let Some(h) = spec.hostname().as_ref().filter(|h| !h.is_empty()) {
        rustix::system::sethostname(h.as_bytes()).ctx(|| format!("set hostname {h:?}"))?;
    }
    if let Some(d) = spec.domainname().as_ref().filter(|h| !h.is_empty()) {
        rustix::system::setdomainname(d.as_bytes()).ctx(|| format!("set domainname {d:?}"))?;
    }
    // From here on nothing of the host is needed: close every fd the runtime (or shim)
    // held, before any path of the container's choosing is resolved.
    close_inherited(args)?;
    let exec = match proc_ {
        Some(proc_) => {
            let env = environment(proc_);
            let args = proc_.args().as_deref().unwrap_or_default();
            let program = find_program(&args[0], &env)?;
            let argv = cstrings(args.iter().map(String::as_str))?;
            let envp = cstrings(env.iter().map(String::as_str))?;
            process_attrs::set_rlimits(proc_)?;
            // Check the working directory now, so a bad cwd fails create, not start.
            check_cwd(proc_.cwd())?;
            Some((program, argv, envp))
        }
        None => None,
    };
    args.channel
        .send(&Msg::Ready)
        .ctx(|| "init: report ready".into())?;
    let fifo = match open_fifo(&args.fifo) {
        Ok(f) => f,
        Err(e) => {
            // Nobody listens on the sync channel any more, and without the fifo `start`
            // cannot hear from us either: stderr is all that is left.
            eprintln!("wharf init: {e}");
            sys::exit_now(1);
        }
    };
    Ok(Ready {
        exec,
        fifo,
        host_pid,
    })
}

/// Close every fd but stdio, the preserved ones, the sync channel, the exec fifo (O_PATH of
/// a fifo: no directory to walk from) and the exec helper.
fn close_inherited(args: &InitArgs<'_>) -> Result<()> {
    use std::os::fd::AsRawFd;
    // The log sink writes to a file of the runtime's, which is about to be closed.
    crate::log::detach();
    sys::close_fds_except(
        3 + args.preserve_fds,
        &[
            args.channel.as_raw_fd(),
            args.fifo.as_raw_fd(),
            args.dmz.as_raw_fd(),
        ],
    )
    .ctx(|| "close the runtime's file descriptors".into())
}

fn host_pid() -> i32 {
    std::fs::read_link("/proc/self")
        .ok()
        .and_then(|p| p.to_str()?.parse().ok())
        .unwrap_or_else(|| std::process::id() as i32)
}

/// Block until `start` opens the fifo for reading.
fn open_fifo(fifo: &OwnedFd) -> Result<std::fs::File> {
    let path = crate::safe_path::proc_fd_path(fifo);
    let fd = rustix::fs::open(
        path.as_c_str(),
        rustix::fs::OFlags::WRONLY | rustix::fs::OFlags::CLOEXEC,
        rustix::fs::Mode::empty(),
    )
    .ctx(|| "open the exec fifo (is /proc mounted in the container?)".into())?;
    Ok(std::fs::File::from(fd))
}

/// After start: startContainer hooks, process attributes, credentials, seccomp, exec.
/// Returns only on error.
fn finish(args: &InitArgs<'_>, ready: &Ready) -> Result<std::convert::Infallible> {
    let spec = &args.bundle.spec;
    let (Some(proc_), Some((program, argv, envp))) = (spec.process(), &ready.exec) else {
        return Err(Error::Config(
            "the container's config has no process: there is nothing to start".into(),
        ));
    };
    let hooks = spec.hooks().as_ref();
    if hooks::any(hooks, Kind::StartContainer) {
        let state = hooks::HookState::new(
            args.id,
            crate::state::Status::Created,
            Some(ready.host_pid),
            &args.bundle.dir,
            spec.annotations().clone().unwrap_or_default(),
        );
        hooks::run_all(hooks, Kind::StartContainer, &state.to_json())?;
    }
    let persona = spec.linux().as_ref().and_then(|l| l.personality().as_ref());
    exec_process(
        proc_,
        persona,
        args.seccomp,
        Exec {
            dmz: args.dmz,
            errfd: std::os::fd::AsRawFd::as_raw_fd(&ready.fifo),
            preserve_fds: args.preserve_fds,
            program,
            argv,
            envp,
        },
    )
}

/// What [`exec_process`] execs, and through what.
pub struct Exec<'a> {
    /// The sealed exec helper.
    pub dmz: std::os::fd::BorrowedFd<'static>,
    /// Where a failed exec is reported (the exec fifo, or the exec's sync socket); it closes
    /// when the program runs.
    pub errfd: std::os::fd::RawFd,
    /// fds 3..3+N stay open for the program.
    pub preserve_fds: u32,
    /// The resolved program path.
    pub program: &'a CString,
    /// Its argv.
    pub argv: &'a [CString],
    /// Its environment.
    pub envp: &'a [CString],
}

/// Apply the process attributes and exec. Shared with `exec`.
pub fn exec_process(
    proc_: &Process,
    personality: Option<&oci_spec::runtime::LinuxPersonality>,
    seccomp: Option<&seccomp::Filter>,
    x: Exec<'_>,
) -> Result<std::convert::Infallible> {
    use std::os::fd::AsRawFd;
    // Nothing of the host may be open when the program, its interpreter or the working
    // directory is resolved; the errfd (a fifo or a socket) and the memfd lead nowhere.
    crate::log::detach();
    sys::close_fds_except(3 + x.preserve_fds, &[x.errfd, x.dmz.as_raw_fd()])
        .ctx(|| "close the runtime's file descriptors".into())?;
    // Everything that allocates or may be refused by the container's seccomp profile happens
    // before the filter is loaded: the exec argument arrays, the working directory check.
    let dmz_args = crate::dmz::ExecArgs::new(Some(x.errfd), x.program, x.argv);
    let envp_ptrs: Vec<*const libc::c_char> = x
        .envp
        .iter()
        .map(|a| a.as_ptr())
        .chain(std::iter::once(std::ptr::null()))
        .collect();
    process_attrs::apply_before_user(proc_, personality)?;
    // As root first; a directory only the target user may enter is tried again after the
    // switch. The check that it is inside the container comes right after each chdir.
    let chdir = || -> Result<()> {
        rustix::process::chdir(proc_.cwd())
            .ctx(|| format!("chdir to process.cwd {}", p(proc_.cwd())))?;
        check_cwd_inside()
    };
    let early_cwd = match chdir() {
        Ok(()) => true,
        Err(e) if matches!(e.raw_os_error(), Some(libc::EACCES) | Some(libc::EPERM)) => false,
        Err(e) => return Err(e),
    };
    let sets = caps::Sets::from_config(proc_.capabilities().as_ref());
    let nnp = proc_.no_new_privileges().unwrap_or(false);
    if let (Some(f), false) = (seccomp, nnp) {
        // Without no_new_privs, loading a filter needs CAP_SYS_ADMIN: do it before dropping.
        f.load()?;
    }
    caps::drop_bounding(&sets)?;
    let user = proc_.user();
    let groups: Vec<u32> = user.additional_gids().clone().unwrap_or_default();
    caps::switch_user_and_apply(&sets, user.uid(), user.gid(), &groups)?;
    if !early_cwd {
        chdir()?;
    }
    if nnp {
        rustix::thread::set_no_new_privs(true).ctx(|| "set no_new_privs".into())?;
    }
    if let (Some(f), true) = (seccomp, nnp) {
        f.load()?;
    }
    crate::dmz::keep_across_exec(x.errfd).ctx(|| "keep the exec report fd open".into())?;
    let err = crate::dmz::exec(x.dmz, &dmz_args, &envp_ptrs);
    Err(Error::os(
        format!(
            "exec {} through the runtime's exec helper",
            x.program.to_string_lossy()
        ),
        err,
    ))
}

/// process.env, plus HOME and PATH where the config leaves them out (as runc does).
pub fn environment(proc_: &Process) -> Vec<String> {
    let mut env: Vec<String> = proc_.env().clone().unwrap_or_default();
    if !env.iter().any(|e| e.starts_with("HOME=")) {
        let home = home_of(proc_.user().uid()).unwrap_or_else(|| "/".into());
        env.push(format!("HOME={home}"));
    }
    env
}

/// The home directory of `uid` from the container's /etc/passwd (read after pivot_root).
fn home_of(uid: u32) -> Option<String> {
    let passwd = std::fs::read_to_string("/etc/passwd").ok()?;
    passwd.lines().find_map(|line| {
        let f: Vec<&str> = line.split(':').collect();
        (f.len() >= 6 && f[2].parse::<u32>().ok()? == uid).then(|| f[5].to_string())
    })
}

/// Resolve argv[0] against the PATH of the container's environment (inside the container).
pub fn find_program(argv0: &str, env: &[String]) -> Result<CString> {
    let is_exec = |p: &Path| {
        std::fs::metadata(p).is_ok_and(|m| m.is_file())
            && rustix::fs::access(p, rustix::fs::Access::EXEC_OK).is_ok()
    };
    let failed = |errno: i32, detail: Option<&str>| Error::Exec {
        program: argv0.to_string(),
        errno,
        detail: detail.map(str::to_string),
    };
    if argv0.contains('/') {
        let path = Path::new(argv0);
        return match std::fs::metadata(path) {
            Ok(m) if m.is_dir() => Err(failed(libc::EISDIR, Some("is a directory"))),
            Ok(_) => cstring(path.as_os_str()),
            Err(e) => Err(failed(e.raw_os_error().unwrap_or(libc::ENOENT), None)),
        };
    }
    let path_var = env
        .iter()
        .rev()
        .find_map(|e| e.strip_prefix("PATH="))
        .unwrap_or("/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin");
    for dir in path_var.split(':') {
        let dir = if dir.is_empty() { "." } else { dir };
        let candidate = PathBuf::from(dir).join(argv0);
        if is_exec(&candidate) {
            return cstring(candidate.as_os_str());
        }
    }
    Err(failed(
        libc::ENOENT,
        Some("executable file not found in $PATH"),
    ))
}

pub(crate) fn cstring(s: &OsStr) -> Result<CString> {
    CString::new(s.as_bytes()).map_err(|_| Error::Config(format!("{s:?} contains a NUL byte")))
}

fn cstrings<'a>(items: impl Iterator<Item = &'a str>) -> Result<Vec<CString>> {
    items.map(|s| cstring(OsStr::new(s))).collect()
}

/// The working directory must exist (checked as root, before the user switch; a cwd that
/// only the target user cannot enter fails at exec time, as in runc).
/// The working directory must be a directory; a missing one is made (0755, root's), as
/// runc and docker make it. This runs inside the container's root, so a symlink on the
/// way cannot lead out of it.
fn check_cwd(cwd: &Path) -> Result<()> {
    if let Err(e) = std::fs::symlink_metadata(cwd)
        && e.kind() == std::io::ErrorKind::NotFound
    {
        use std::os::unix::fs::DirBuilderExt;
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o755)
            .create(cwd)
            .map_err(|e| Error::os(format!("create process.cwd {}", p(cwd)), e))?;
    }
    match std::fs::metadata(cwd) {
        Ok(m) if m.is_dir() => Ok(()),
        Ok(_) => Err(Error::Config(format!(
            "process.cwd {} is not a directory",
            p(cwd)
        ))),
        Err(e) => Err(Error::os(format!("process.cwd {}", p(cwd)), e)),
    }
}

/// After chdir, the working directory must be reachable from the container's root: a cwd
/// reached through a leaked host fd (CVE-2024-21626) shows up as "(unreachable)".
pub fn check_cwd_inside() -> Result<()> {
    let cwd = rustix::process::getcwd(Vec::new()).ctx(|| "getcwd".into())?;
    let bytes = cwd.as_bytes();
    if !bytes.starts_with(b"/") {
        return Err(Error::Other(format!(
            "the working directory {:?} is outside the container",
            cwd
        )));
    }
    Ok(())
}
