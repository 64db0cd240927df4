//! `wharf shim`: the per-pod supervisor process.
//!
//! ```text
//! wharf shim --pod ID --state-dir DIR --runtime-root DIR
//!            [--log-max-size BYTES] [--log-max-files N] [--ready-fd FD]
//! ```
//!
//! It daemonizes (fork, setsid, fork: the spawner's child exits at once, the shim is
//! reparented to init or the nearest subreaper and has no controlling terminal), points
//! stdin/stdout at /dev/null and stderr at `<state-dir>/shim.log`, takes an exclusive lock
//! on `<state-dir>/shim.lock` (one shim per state directory), becomes a child subreaper,
//! binds `<state-dir>/shim.sock`, writes `<state-dir>/shim.pid`, and then writes `ok\n`
//! to `--ready-fd` (or `error: <why>\n` if any step failed), which is what
//! [`crate::client::spawn`] waits for. Then it serves (see [`server`]).

pub mod dns;
mod netcheck;
mod pause;
mod server;
mod stdio;
mod sys;

use std::ffi::OsString;
use std::io::Write;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::PathBuf;

use crate::logs::{DEFAULT_MAX_FILES, DEFAULT_MAX_SIZE};
use crate::records::{self, StateDir};

/// The shim's command line.
#[derive(Debug)]
struct Args {
    pod: String,
    state_dir: PathBuf,
    runtime_root: PathBuf,
    log_max_size: u64,
    log_max_files: u32,
    ready_fd: Option<i32>,
    cgroup: Option<String>,
    /// The node's registry of live shims ([`crate::liveness`]).
    alive: Option<PathBuf>,
}

const USAGE: &str = "usage: wharf shim --pod ID --state-dir DIR --runtime-root DIR \
[--log-max-size BYTES] [--log-max-files N] [--ready-fd FD] [--cgroup PATH] [--alive FILE]";

fn parse(argv: &[OsString]) -> Result<Args, String> {
    let mut pod = None;
    let mut state_dir = None;
    let mut runtime_root = None;
    let mut log_max_size = DEFAULT_MAX_SIZE;
    let mut log_max_files = DEFAULT_MAX_FILES;
    let mut ready_fd = None;
    let mut cgroup = None;
    let mut alive = None;
    let mut it = argv.iter();
    while let Some(a) = it.next() {
        let a = a.to_string_lossy();
        let (flag, inline) = match a.split_once('=') {
            Some((f, v)) => (f.to_string(), Some(OsString::from(v))),
            None => (a.to_string(), None),
        };
        if flag == "--help" || flag == "-h" {
            return Err(USAGE.into());
        }
        let value = match inline.or_else(|| it.next().cloned()) {
            Some(v) => v,
            None => return Err(format!("{flag} needs a value\n{USAGE}")),
        };
        let num = |v: &OsString| {
            v.to_string_lossy()
                .parse::<u64>()
                .map_err(|_| format!("{flag}: {v:?} is not a number"))
        };
        match flag.as_str() {
            "--pod" => pod = Some(value.to_string_lossy().into_owned()),
            "--state-dir" => state_dir = Some(PathBuf::from(value)),
            "--runtime-root" => runtime_root = Some(PathBuf::from(value)),
            "--log-max-size" => log_max_size = num(&value)?,
            "--log-max-files" => log_max_files = num(&value)? as u32,
            "--ready-fd" => ready_fd = Some(num(&value)? as i32),
            "--cgroup" => cgroup = Some(value.to_string_lossy().into_owned()),
            "--alive" => alive = Some(PathBuf::from(value)),
            other => return Err(format!("unknown option {other}\n{USAGE}")),
        }
    }
    let abs = |p: PathBuf| std::path::absolute(&p).unwrap_or(p);
    Ok(Args {
        pod: pod.ok_or_else(|| format!("--pod is required\n{USAGE}"))?,
        state_dir: abs(state_dir.ok_or_else(|| format!("--state-dir is required\n{USAGE}"))?),
        runtime_root: abs(
            runtime_root.ok_or_else(|| format!("--runtime-root is required\n{USAGE}"))?
        ),
        log_max_size,
        log_max_files,
        ready_fd,
        cgroup,
        alive: alive.map(abs),
    })
}

/// Entry point of `wharf shim`; returns the exit code.
pub fn main(argv: Vec<OsString>) -> i32 {
    let args = match parse(argv.get(1..).unwrap_or_default()) {
        Ok(a) => a,
        Err(e) => {
            eprintln!("wharf shim: {e}");
            return 2;
        }
    };
    // SAFETY: adopting the descriptor the spawner passed us.
    let mut ready = args
        .ready_fd
        .map(|fd| std::fs::File::from(unsafe { OwnedFd::from_raw_fd(fd) }))
        .map(off_standard_fds);
    let fail = |ready: &mut Option<std::fs::File>, msg: String| {
        if let Some(r) = ready.as_mut() {
            let _ = writeln!(r, "error: {msg}");
        }
        eprintln!("wharf shim: {msg}");
        1
    };
    // The outermost directory this shim creates, if any (removed again if it is abandoned).
    let created = first_missing(&args.state_dir);
    if let Err(e) = records::create_dir(&args.state_dir) {
        return fail(&mut ready, e.to_string());
    }
    match daemonize() {
        Ok(true) => {}
        Ok(false) => {
            // The spawner's child: the daemon carries on.
            std::mem::forget(ready);
            return 0;
        }
        Err(e) => return fail(&mut ready, format!("daemonize: {e}")),
    }
    let setup = match setup(&args) {
        Ok(s) => s,
        // Nothing to undo: the socket and pid file are only replaced under the lock.
        Err(msg) => return fail(&mut ready, msg),
    };
    if let Some(mut r) = ready.take()
        && let Err(e) = r.write_all(b"ok\n")
    {
        // The spawner died before it learnt the shim was up (a CLI killed midway): nobody
        // will use or stop this shim, and whoever cleans up after that CLI may already have
        // removed the pod. Leave as if never started.
        log(&format!("the spawner is gone ({e}): exiting"));
        let _ = std::fs::remove_file(args.state_dir.join(records::SOCKET));
        let _ = std::fs::remove_file(args.state_dir.join(records::PID_FILE));
        if let Some(dir) = created {
            let _ = std::fs::remove_dir_all(dir);
        }
        return 0;
    }
    log(&format!(
        "pod {} serving on {}",
        args.pod,
        args.state_dir.join(records::SOCKET).display()
    ));
    let code = setup.run();
    std::process::exit(code)
}

/// The ready pipe moved above the standard descriptors (close-on-exec), where it was given
/// as one of them (the spawner passes it as standard output): the shim points those at
/// /dev/null and its log before it reports ready.
fn off_standard_fds(ready: std::fs::File) -> std::fs::File {
    if ready.as_raw_fd() > 2 {
        return ready;
    }
    match rustix::io::fcntl_dupfd_cloexec(&ready, 3) {
        Ok(moved) => {
            // The standard descriptor stays open (on the pipe) until setup replaces it.
            std::mem::forget(ready);
            std::fs::File::from(moved)
        }
        Err(_) => ready,
    }
}

/// The outermost ancestor of `dir` (or `dir` itself) that does not exist yet.
fn first_missing(dir: &std::path::Path) -> Option<PathBuf> {
    let mut missing = None;
    for a in dir.ancestors() {
        if a.as_os_str().is_empty() || a.symlink_metadata().is_ok() {
            break;
        }
        missing = Some(a.to_path_buf());
    }
    missing
}

/// Fork, setsid, fork. Ok(true) in the daemon; Ok(false) in the process that was started
/// (after its child, the intermediate, exited).
fn daemonize() -> std::io::Result<bool> {
    // SAFETY: the shim is single-threaded here; the children continue normally.
    match unsafe { libc::fork() } {
        -1 => return Err(std::io::Error::last_os_error()),
        0 => {}
        child => {
            sys::reap(child);
            return Ok(false);
        }
    }
    // SAFETY: plain syscalls in the single-threaded intermediate.
    unsafe {
        libc::setsid();
        match libc::fork() {
            -1 => libc::_exit(1),
            0 => {}
            _ => libc::_exit(0),
        }
    }
    Ok(true)
}

fn setup(args: &Args) -> Result<server::Shim, String> {
    let dir = &args.state_dir;
    std::env::set_current_dir("/").map_err(|e| format!("chdir /: {e}"))?;
    // SAFETY: umask has no preconditions.
    unsafe { libc::umask(0o077) };
    let null = sys::dev_null().map_err(|e| format!("open /dev/null: {e}"))?;
    let log_path = dir.join(records::SHIM_LOG);
    let log_file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&log_path)
        .map_err(|e| format!("open {}: {e}", log_path.display()))?;
    // SAFETY: replacing our own standard descriptors.
    unsafe {
        libc::dup2(null.as_raw_fd(), 0);
        libc::dup2(null.as_raw_fd(), 1);
        libc::dup2(log_file.as_raw_fd(), 2);
    }
    let lock_path = dir.join(records::LOCK_FILE);
    let lock = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&lock_path)
        .map_err(|e| format!("open {}: {e}", lock_path.display()))?;
    if rustix::fs::flock(&lock, rustix::fs::FlockOperation::NonBlockingLockExclusive).is_err() {
        let sd = StateDir::new(dir);
        let who = sd
            .shim_pid()
            .map(|(p, _)| format!(" (pid {p})"))
            .unwrap_or_default();
        return Err(format!(
            "another shim{who} already serves {}",
            dir.display()
        ));
    }
    // Held for the life of the shim.
    std::mem::forget(lock);
    if let Some(registry) = &args.alive {
        let held = crate::liveness::hold(registry, &args.pod).map_err(|e| {
            format!(
                "take pod {}'s lock in {}: {e}",
                args.pod,
                registry.display()
            )
        })?;
        // Held for the life of the shim too: its release is how listings learn of a death.
        std::mem::forget(held);
    }
    rustix::process::set_child_subreaper(Some(rustix::process::getpid()))
        .map_err(|e| format!("become a child subreaper: {e}"))?;
    let sigfd = sys::signalfd().map_err(|e| format!("signalfd: {e}"))?;
    let timerfd = sys::timerfd().map_err(|e| format!("timerfd: {e}"))?;
    let listener = listen(dir)?;
    let me = std::process::id() as i32;
    let start = wharf_runtime::sys::process_start_time(me).map_err(|e| e.to_string())?;
    records::write_record(
        &dir.join(records::PID_FILE),
        format!("{me} {start}\n").as_bytes(),
        0o600,
    )
    .map_err(|e| e.to_string())?;
    let cfg = server::Config {
        pod: args.pod.clone(),
        state: match &args.alive {
            Some(registry) => StateDir::new(dir).with_change_marks(registry, &args.pod),
            None => StateDir::new(dir),
        },
        runtime: wharf_runtime::Runtime::new(&args.runtime_root),
        log_max_size: args.log_max_size,
        log_max_files: args.log_max_files,
        cgroup: args.cgroup.clone(),
    };
    Ok(server::Shim::new(cfg, listener, sigfd, timerfd))
}

/// Bind and listen on `<dir>/shim.sock` (through /proc/self/fd, so a long state directory
/// path does not hit the 108-byte limit of socket addresses).
fn listen(dir: &std::path::Path) -> Result<OwnedFd, String> {
    let path = dir.join(records::SOCKET);
    let _ = std::fs::remove_file(&path);
    let dirfd = rustix::fs::open(
        dir,
        rustix::fs::OFlags::PATH | rustix::fs::OFlags::DIRECTORY | rustix::fs::OFlags::CLOEXEC,
        rustix::fs::Mode::empty(),
    )
    .map_err(|e| format!("open {}: {e}", dir.display()))?;
    let short = format!("/proc/self/fd/{}/{}", dirfd.as_raw_fd(), records::SOCKET);
    let sock = rustix::net::socket_with(
        rustix::net::AddressFamily::UNIX,
        rustix::net::SocketType::STREAM,
        rustix::net::SocketFlags::CLOEXEC | rustix::net::SocketFlags::NONBLOCK,
        None,
    )
    .map_err(|e| format!("socket: {e}"))?;
    let addr = rustix::net::SocketAddrUnix::new(short.as_str()).map_err(|e| e.to_string())?;
    rustix::net::bind(&sock, &addr).map_err(|e| format!("bind {}: {e}", path.display()))?;
    rustix::net::listen(&sock, 64).map_err(|e| format!("listen on {}: {e}", path.display()))?;
    Ok(sock)
}

/// A line in the shim's log (its stderr).
pub(crate) fn log(msg: &str) {
    let ts = crate::logs::timestamp(std::time::SystemTime::now());
    eprintln!("{ts} wharf-shim[{}]: {msg}", std::process::id());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arguments_parse_and_complain_clearly() {
        let v = |s: &[&str]| s.iter().map(OsString::from).collect::<Vec<_>>();
        let a = parse(&v(&[
            "--pod",
            "p1",
            "--state-dir=/run/x",
            "--runtime-root",
            "/run/r",
            "--log-max-size",
            "100",
        ]))
        .unwrap();
        assert_eq!(a.pod, "p1");
        assert_eq!(a.state_dir, PathBuf::from("/run/x"));
        assert_eq!(a.log_max_size, 100);
        assert_eq!(a.log_max_files, DEFAULT_MAX_FILES);
        let e = parse(&v(&["--pod", "p1"])).unwrap_err();
        assert!(e.contains("--state-dir is required"), "{e}");
        let e = parse(&v(&["--pod", "p", "--bogus", "1"])).unwrap_err();
        assert!(e.contains("unknown option --bogus"), "{e}");
        let e = parse(&v(&["--log-max-files", "x"])).unwrap_err();
        assert!(e.contains("not a number"), "{e}");
    }
}
