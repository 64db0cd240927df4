//! Executing a CNI plugin: find its binary in the plugin directories, run it with the CNI
//! environment and its configuration on stdin, inside the host namespace the caller chose,
//! with a deadline, and turn a failure into the plugin's own error (code, msg, details).
//!
//! The plugin's pipes and its exit are watched with one poll(2) on the pipes and a pidfd,
//! so a plugin that hangs is killed at the deadline and a chatty one cannot fill a pipe
//! and deadlock.

use std::io::{self, Read, Write};
use std::os::fd::{AsFd, BorrowedFd};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use rustix::event::{PollFd, PollFlags, Timespec};
use rustix::fs::OFlags;
use rustix::io::Errno;
use rustix::process::{Pid, PidfdFlags};
use serde::Deserialize;

use crate::error::{Error, Result};

/// How the message of a plugin that ran past its deadline begins.
pub const TIMED_OUT: &str = "timed out after";

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
            crate::sys::join_netns_on_spawn(&mut cmd, ns)
                .map_err(|e| Error::os(format!("run {}", path.display()), e))?;
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
                        msg: format!("{TIMED_OUT} {:?}", self.timeout),
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

fn set_nonblocking(fd: impl AsFd) -> io::Result<()> {
    let fl = rustix::fs::fcntl_getfl(&fd)?;
    Ok(rustix::fs::fcntl_setfl(&fd, fl | OFlags::NONBLOCK)?)
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
    let pidfd = rustix::process::pidfd_open(Pid::from_child(child), PidfdFlags::empty())?;
    let mut stdin = child.stdin.take();
    let mut stdout = child.stdout.take().expect("piped stdout");
    let mut stderr = child.stderr.take().expect("piped stderr");
    set_nonblocking(&stdout)?;
    set_nonblocking(&stderr)?;
    if let Some(s) = &stdin {
        set_nonblocking(s)?;
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
        let mut slot = |fd, events| {
            fds.push(PollFd::from_borrowed_fd(fd, events));
            fds.len() - 1
        };
        let i_in = stdin.as_ref().map(|s| slot(s.as_fd(), PollFlags::OUT));
        let i_out = (!out_eof).then(|| slot(stdout.as_fd(), PollFlags::IN));
        let i_err = (!err_eof).then(|| slot(stderr.as_fd(), PollFlags::IN));
        let i_pid = (!exited).then(|| slot(pidfd.as_fd(), PollFlags::IN));
        // At least a millisecond (no busy loop just before the deadline), at most what
        // poll(2) can wait.
        let wait = left.clamp(
            Duration::from_millis(1),
            Duration::from_millis(i32::MAX as u64),
        );
        let timeout = Timespec::try_from(wait).expect("under 25 days fits a timespec");
        match rustix::event::poll(&mut fds, Some(&timeout)) {
            Ok(_) => {}
            Err(Errno::INTR) => continue,
            Err(e) => return Err(e.into()),
        }
        let ready = |i: Option<usize>| i.is_some_and(|i| !fds[i].revents().is_empty());
        let (in_ready, out_ready, err_ready, pid_ready) =
            (ready(i_in), ready(i_out), ready(i_err), ready(i_pid));
        drop(fds); // it borrows the pipes, which are read and written below
        if in_ready {
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
        if out_ready {
            out_eof = drain(&mut stdout, &mut out)?;
        }
        if err_ready {
            err_eof = drain(&mut stderr, &mut err)?;
        }
        if pid_ready {
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
