//! OCI hooks: run each with the container state on stdin, its own args and env, and its
//! timeout; a failure names the hook and carries its exit status and output.

use std::io::{Read, Write};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use oci_spec::runtime::{Hook, Hooks};
use serde::Serialize;

use crate::error::{Error, Result, p};
use crate::state::{OCI_VERSION, Status};

/// The lifecycle points at which hooks run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Deprecated alias of createRuntime, run just before it.
    Prestart,
    /// Runtime namespace, after the container's namespaces exist.
    CreateRuntime,
    /// Container namespace, before pivot_root.
    CreateContainer,
    /// Container namespace, before the user process execs.
    StartContainer,
    /// Runtime namespace, after the user process started.
    Poststart,
    /// Runtime namespace, after the container is deleted.
    Poststop,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Prestart => "prestart",
            Kind::CreateRuntime => "createRuntime",
            Kind::CreateContainer => "createContainer",
            Kind::StartContainer => "startContainer",
            Kind::Poststart => "poststart",
            Kind::Poststop => "poststop",
        }
    }

    /// The hooks of this kind in a config.
    pub fn of(self, hooks: &Hooks) -> &[Hook] {
        let list = match self {
            Kind::Prestart => hooks.prestart(),
            Kind::CreateRuntime => hooks.create_runtime(),
            Kind::CreateContainer => hooks.create_container(),
            Kind::StartContainer => hooks.start_container(),
            Kind::Poststart => hooks.poststart(),
            Kind::Poststop => hooks.poststop(),
        };
        list.as_deref().unwrap_or(&[])
    }
}

/// The state document hooks receive on stdin.
#[derive(Debug, Clone, Serialize)]
pub struct HookState {
    /// OCI version.
    #[serde(rename = "ociVersion")]
    pub oci_version: String,
    /// Container id.
    pub id: String,
    /// Status at the time the hook runs.
    pub status: Status,
    /// Host pid of the container's init (absent once stopped).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pid: Option<i32>,
    /// Absolute bundle path.
    pub bundle: String,
    /// Config annotations.
    #[serde(skip_serializing_if = "std::collections::HashMap::is_empty")]
    pub annotations: std::collections::HashMap<String, String>,
}

impl HookState {
    /// A state document for `id`.
    pub fn new(
        id: &str,
        status: Status,
        pid: Option<i32>,
        bundle: &Path,
        annotations: std::collections::HashMap<String, String>,
    ) -> Self {
        HookState {
            oci_version: OCI_VERSION.to_string(),
            id: id.to_string(),
            status,
            pid,
            bundle: bundle.display().to_string(),
            annotations,
        }
    }

    /// JSON bytes.
    pub fn to_json(&self) -> Vec<u8> {
        serde_json::to_vec(self).unwrap_or_default()
    }
}

/// A startContainer hook is resolved in the container and may be a program of the image,
/// while the process that runs it is still a clone of the runtime (its `/proc/self/exe`
/// the host binary): it goes through the sealed exec helper, as the container's own
/// program does ([`crate::dmz`]).
fn through_dmz(cmd: &mut Command, hook: &Hook) -> std::result::Result<(), String> {
    let cstr = |s: &str| std::ffi::CString::new(s).map_err(|_| format!("{s:?} has a NUL"));
    let path = cstr(&hook.path().to_string_lossy())?;
    let mut argv = hook
        .args()
        .iter()
        .flatten()
        .map(|a| cstr(a))
        .collect::<std::result::Result<Vec<_>, _>>()?;
    if argv.is_empty() {
        argv.push(path.clone());
    }
    let env = hook
        .env()
        .iter()
        .flatten()
        .map(|e| cstr(e))
        .collect::<std::result::Result<Vec<_>, _>>()?;
    let dmz = crate::dmz::memfd().map_err(|e| format!("the exec helper: {e}"))?;
    let exec = crate::dmz::ExecArgs::new(None, &path, &argv).with_env(env);
    // SAFETY: the closure allocates nothing: it execs (replacing the child) or returns the
    // error, which Command reports.
    unsafe {
        cmd.pre_exec(move || Err(exec.exec_with_env(dmz)));
    }
    Ok(())
}

/// Whether the config has any hook of `kind`.
pub fn any(hooks: Option<&Hooks>, kind: Kind) -> bool {
    hooks.is_some_and(|h| !kind.of(h).is_empty())
}

/// Run every hook of `kind` in order; the first failure stops the rest.
pub fn run_all(hooks: Option<&Hooks>, kind: Kind, state: &[u8]) -> Result<()> {
    let Some(hooks) = hooks else { return Ok(()) };
    for hook in kind.of(hooks) {
        run(hook, kind, state).map_err(|msg| {
            Error::Hook(format!(
                "error running {} hook {}: {msg}",
                kind.name(),
                p(hook.path())
            ))
        })?;
    }
    Ok(())
}

/// Run every hook of `kind`, collecting failures as warnings instead of stopping (the
/// spec's rule for poststart and poststop).
pub fn run_all_warn(hooks: Option<&Hooks>, kind: Kind, state: &[u8]) -> Vec<String> {
    let Some(hooks) = hooks else {
        return Vec::new();
    };
    kind.of(hooks)
        .iter()
        .filter_map(|hook| {
            run(hook, kind, state)
                .err()
                .map(|msg| format!("{} hook {} failed: {msg}", kind.name(), p(hook.path())))
        })
        .collect()
}

fn run(hook: &Hook, kind: Kind, state: &[u8]) -> std::result::Result<(), String> {
    let args = hook.args().clone().unwrap_or_default();
    let mut cmd = Command::new(hook.path());
    if let Some(arg0) = args.first() {
        cmd.arg0(arg0);
    }
    cmd.args(args.iter().skip(1));
    cmd.env_clear();
    for kv in hook.env().iter().flatten() {
        if let Some((k, v)) = kv.split_once('=') {
            cmd.env(k, v);
        }
    }
    if kind == Kind::StartContainer {
        through_dmz(&mut cmd, hook)?;
    }
    cmd.stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().map_err(|e| format!("start: {e}"))?;
    if let Some(mut stdin) = child.stdin.take() {
        // A hook that exits without reading its stdin is fine.
        let _ = stdin.write_all(state);
    }
    let deadline = hook
        .timeout()
        .map(|t| Instant::now() + Duration::from_secs(t.max(1) as u64));
    let mut stdout = child.stdout.take().expect("piped");
    let mut stderr = child.stderr.take().expect("piped");
    let mut out = Vec::new();
    let mut err = Vec::new();
    let pidfd = rustix::process::pidfd_open(
        rustix::process::Pid::from_child(&child),
        rustix::process::PidfdFlags::empty(),
    )
    .map_err(|e| format!("pidfd_open: {e}"))?;
    let mut open = [true, true];
    let mut exited = false;
    let mut timed_out = false;
    while !exited || open[0] || open[1] {
        let timeout = match deadline {
            // Once the hook is gone, take what its pipes hold and stop: a background child
            // that inherited them must not keep us waiting.
            _ if exited => Some(Duration::ZERO),
            Some(d) => {
                let left = d.saturating_duration_since(Instant::now());
                if left.is_zero() && !exited {
                    timed_out = true;
                    let _ = child.kill();
                    break;
                }
                Some(left)
            }
            None => None,
        };
        let mut fds = Vec::new();
        if !exited {
            fds.push(rustix::event::PollFd::new(
                &pidfd,
                rustix::event::PollFlags::IN,
            ));
        }
        if open[0] {
            fds.push(rustix::event::PollFd::new(
                &stdout,
                rustix::event::PollFlags::IN,
            ));
        }
        if open[1] {
            fds.push(rustix::event::PollFd::new(
                &stderr,
                rustix::event::PollFlags::IN,
            ));
        }
        let ts = timeout.map(|d| rustix::time::Timespec {
            tv_sec: d.as_secs() as i64,
            tv_nsec: d.subsec_nanos() as i64,
        });
        match rustix::event::poll(&mut fds, ts.as_ref()) {
            Ok(_) | Err(rustix::io::Errno::INTR) => {}
            Err(e) => return Err(format!("poll: {e}")),
        }
        let ready: Vec<bool> = fds.iter().map(|f| !f.revents().is_empty()).collect();
        drop(fds);
        if exited && !ready.iter().any(|r| *r) {
            break;
        }
        let mut i = 0;
        if !exited {
            exited = ready[i];
            i += 1;
        }
        for (idx, (reader, buf)) in [
            (&mut stdout as &mut dyn Read, &mut out),
            (&mut stderr, &mut err),
        ]
        .into_iter()
        .enumerate()
        {
            if !open[idx] {
                continue;
            }
            if ready[i] {
                let mut chunk = [0u8; 4096];
                match reader.read(&mut chunk) {
                    Ok(0) | Err(_) => open[idx] = false,
                    Ok(n) => {
                        if buf.len() < 64 * 1024 {
                            buf.extend_from_slice(&chunk[..n]);
                        }
                    }
                }
            }
            i += 1;
        }
    }
    let status = child.wait().map_err(|e| format!("wait: {e}"))?;
    let output = || {
        let o = String::from_utf8_lossy(&out);
        let e = String::from_utf8_lossy(&err);
        format!("stdout: {:?}, stderr: {:?}", o.trim_end(), e.trim_end())
    };
    if timed_out {
        return Err(format!(
            "timed out after {}s, {}",
            hook.timeout().unwrap_or(0),
            output()
        ));
    }
    if status.success() {
        return Ok(());
    }
    match (status.code(), status.signal()) {
        (Some(code), _) => Err(format!("exit status {code}, {}", output())),
        (None, Some(sig)) => Err(format!("killed by signal {sig}, {}", output())),
        _ => Err(format!("failed, {}", output())),
    }
}
