//! Executing a CNI plugin: find its binary in the plugin directories, run it with the CNI
//! environment and its configuration on stdin, inside the host namespace the caller chose,
//! with a deadline, and turn a failure into the plugin's own error (code, msg, details).
//!
//! The plugin's pipes and its exit are watched with one poll(2) on the pipes and a pidfd,
//! so a plugin that hangs is killed at the deadline and a chatty one cannot fill a pipe
//! and deadlock.

use std::io::{self, Read, Write};
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde::Deserialize;

use crate::error::{Error, Result};

/// The CNI environment of one invocation.
#[derive(Debug, Clone, Default)]
pub struct Invocation<'a> {
    /// CNI_COMMAND: ADD, DEL, CHECK, VERSION, STATUS, GC.
    pub command: &'a str,
    /// CNI_CONTAINERID.
    pub container_id: &'a str,
    /// CNI_NETNS.
    pub netns: &'a str,
    /// CNI_IFNAME.
    pub ifname: &'a str,
    /// CNI_ARGS ("K=V;K2=V2").
    pub args: &'a str,
}

/// Where plugins are found and how they run.
pub struct Runner<'a> {
    /// Plugin directories, searched in order (also passed as CNI_PATH).
    pub bin_dirs: &'a [PathBuf],
    /// Namespace plugins run in (None: the caller's).
    pub host_ns: Option<BorrowedFd<'a>>,
    /// Deadline for one plugin run.
    pub timeout: Duration,
}

/// A plugin's error object (CNI spec "Error" section).
#[derive(Debug, Deserialize)]
struct PluginError {
    #[serde(default)]
    code: u32,
    #[serde(default)]
    msg: String,
    #[serde(default)]
    details: String,
}

impl Runner<'_> {
    /// The plugin binary for `ty`: the first executable `<dir>/<ty>`.
    pub fn find(&self, ty: &str) -> Result<PathBuf> {
        use std::os::unix::fs::PermissionsExt;
        for d in self.bin_dirs {
            let p = d.join(ty);
            if let Ok(m) = std::fs::metadata(&p)
                && m.is_file()
                && m.permissions().mode() & 0o111 != 0
            {
                return Ok(p);
            }
        }
        Err(Error::NotFound(format!(
            "CNI plugin {ty:?} not found in {}",
            self.bin_dirs
                .iter()
                .map(|d| d.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        )))
    }

    /// Run plugin `ty` for `inv` with `stdin`; its stdout on success.
    pub fn run(&self, ty: &str, inv: &Invocation<'_>, stdin: &[u8]) -> Result<Vec<u8>> {
        let path = self.find(ty)?;
        let cni_path = std::env::join_paths(self.bin_dirs)
            .map_err(|e| Error::Invalid(format!("CNI plugin directories: {e}")))?;
        let mut cmd = Command::new(&path);
        for (k, _) in std::env::vars_os() {
            if k.to_string_lossy().starts_with("CNI_") {
                cmd.env_remove(k);
            }
        }
        cmd.env("CNI_COMMAND", inv.command)
            .env("CNI_PATH", cni_path)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        if !matches!(inv.command, "VERSION" | "STATUS" | "GC") {
            cmd.env("CNI_CONTAINERID", inv.container_id)
                .env("CNI_NETNS", inv.netns)
                .env("CNI_IFNAME", inv.ifname)
                .env("CNI_ARGS", inv.args);
        }
        if let Some(ns) = self.host_ns {
            let raw = ns.as_raw_fd();
            // SAFETY: setns is async-signal-safe; the fd outlives the spawn (borrowed).
            unsafe {
                cmd.pre_exec(move || {
                    if libc::setns(raw, libc::CLONE_NEWNET) != 0 {
                        return Err(io::Error::last_os_error());
                    }
                    Ok(())
                });
            }
        }
        let what = || format!("CNI plugin {ty} ({})", inv.command);
        let mut child = cmd
            .spawn()
            .map_err(|e| Error::os(format!("run {}", path.display()), e))?;
        let outcome = pump(&mut child, stdin, self.timeout);
        let (status, stdout, stderr) = match outcome {
            Ok(v) => v,
            Err(e) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(match e.kind() {
                    io::ErrorKind::TimedOut => Error::Plugin {
                        plugin: ty.into(),
                        command: inv.command.into(),
                        code: 0,
                        msg: format!("timed out after {:?}", self.timeout),
                        details: String::new(),
                    },
                    _ => Error::os(what(), e),
                });
            }
        };
        if status.success() {
            return Ok(stdout);
        }
        let err = serde_json::from_slice::<PluginError>(&stdout)
            .ok()
            .filter(|e| e.code != 0 || !e.msg.is_empty());
        Err(match err {
            Some(e) => Error::Plugin {
                plugin: ty.into(),
                command: inv.command.into(),
                code: e.code,
                msg: e.msg,
                details: e.details,
            },
            None => Error::Plugin {
                plugin: ty.into(),
                command: inv.command.into(),
                code: 0,
                msg: format!("exited with {status}"),
                details: String::from_utf8_lossy(if stderr.is_empty() { &stdout } else { &stderr })
                    .trim()
                    .to_string(),
            },
        })
    }
}

fn set_nonblocking(fd: RawFd) -> io::Result<()> {
    // SAFETY: fcntl on an fd we own.
    unsafe {
        let fl = libc::fcntl(fd, libc::F_GETFL);
        if fl < 0 || libc::fcntl(fd, libc::F_SETFL, fl | libc::O_NONBLOCK) < 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

fn pidfd_open(pid: u32) -> io::Result<OwnedFd> {
    // SAFETY: pidfd_open(2) returns a new fd or -1.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid as libc::c_int, 0) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a fresh fd we own.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as RawFd) })
}

/// Read until EAGAIN or EOF; true at EOF.
fn drain(r: &mut impl Read, out: &mut Vec<u8>) -> io::Result<bool> {
    let mut buf = [0u8; 16384];
    loop {
        match r.read(&mut buf) {
            Ok(0) => return Ok(true),
            Ok(n) => out.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(false),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        }
    }
}

/// Feed stdin, collect stdout and stderr, and wait for the exit, all before `timeout`.
fn pump(
    child: &mut std::process::Child,
    input: &[u8],
    timeout: Duration,
) -> io::Result<(std::process::ExitStatus, Vec<u8>, Vec<u8>)> {
    let deadline = Instant::now() + timeout;
    let pidfd = pidfd_open(child.id())?;
    let mut stdin = child.stdin.take();
    let mut stdout = child.stdout.take().expect("piped stdout");
    let mut stderr = child.stderr.take().expect("piped stderr");
    for fd in [stdout.as_raw_fd(), stderr.as_raw_fd()] {
        set_nonblocking(fd)?;
    }
    if let Some(s) = &stdin {
        set_nonblocking(s.as_raw_fd())?;
    }
    let (mut out, mut err) = (Vec::new(), Vec::new());
    let (mut out_eof, mut err_eof, mut exited) = (false, false, false);
    let mut written = 0;
    if input.is_empty() {
        stdin = None;
    }
    while !(exited && out_eof && err_eof) {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(io::ErrorKind::TimedOut.into());
        }
        let mut fds = Vec::with_capacity(4);
        let mut slot = |fd: RawFd, events: libc::c_short| {
            fds.push(libc::pollfd {
                fd,
                events,
                revents: 0,
            });
            fds.len() - 1
        };
        let i_in = stdin.as_ref().map(|s| slot(s.as_raw_fd(), libc::POLLOUT));
        let i_out = (!out_eof).then(|| slot(stdout.as_raw_fd(), libc::POLLIN));
        let i_err = (!err_eof).then(|| slot(stderr.as_raw_fd(), libc::POLLIN));
        let i_pid = (!exited).then(|| slot(pidfd.as_raw_fd(), libc::POLLIN));
        let ms = left.as_millis().clamp(1, i32::MAX as u128) as libc::c_int;
        // SAFETY: poll on a vector of valid pollfds.
        let n = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, ms) };
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        let ready = |i: Option<usize>| i.is_some_and(|i| fds[i].revents != 0);
        if ready(i_in) {
            let s = stdin.as_mut().expect("stdin open");
            match s.write(&input[written..]) {
                Ok(k) => written += k,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                // The plugin closed stdin without reading everything: its business.
                Err(_) => written = input.len(),
            }
            if written >= input.len() {
                stdin = None; // close: the plugin sees EOF
            }
        }
        if ready(i_out) {
            out_eof = drain(&mut stdout, &mut out)?;
        }
        if ready(i_err) {
            err_eof = drain(&mut stderr, &mut err)?;
        }
        if ready(i_pid) {
            exited = true;
            // A plugin's own children may keep the pipes open: take what is there and stop.
            if !out_eof {
                drain(&mut stdout, &mut out)?;
            }
            if !err_eof {
                drain(&mut stderr, &mut err)?;
            }
            (out_eof, err_eof) = (true, true);
        }
    }
    let status = child.wait()?;
    Ok((status, out, err))
}

/// Turn CNI_ARGS pairs into "K=V;K2=V2", checking that no key or value can break the
/// format.
pub fn format_args(pairs: &[(String, String)]) -> Result<String> {
    let mut parts = Vec::new();
    for (k, v) in pairs {
        if k.is_empty() || k.contains(['=', ';']) || v.contains(';') {
            return Err(Error::Invalid(format!(
                "invalid CNI argument {k:?}={v:?}: keys need no '=' or ';', values no ';'"
            )));
        }
        parts.push(format!("{k}={v}"));
    }
    Ok(parts.join(";"))
}
