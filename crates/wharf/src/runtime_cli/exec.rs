//! `exec`: build the process like runc does (from `--process`, or from the container's own
//! process with the command-line overrides), start it, and wait for it unless detached.

use anyhow::{Context, Result, bail};
use oci_spec::runtime::{Capabilities, Capability, Process};
use wharf_runtime::{ExecOptions, Runtime};

use super::args::ExecArgs;
use super::relay;

/// Run `exec`; returns the exit code to exit with.
pub fn exec(rt: &Runtime, e: &ExecArgs) -> Result<i32> {
    let process = build_process(rt, e)?;
    let terminal = process.terminal().unwrap_or(false);
    let mut opts = ExecOptions {
        process,
        console_socket: e.console_socket.clone(),
        console: None,
        pid_file: e.pid_file.clone(),
        preserve_fds: e.preserve_fds,
        ignore_paused: e.ignore_paused,
    };
    let mut ours = None;
    if terminal && e.console_socket.is_none() {
        if e.detach {
            bail!("cannot allocate tty if runc will detach without setting console socket");
        }
        let (a, b) = relay::socketpair()?;
        opts.console = Some(b);
        ours = Some(a);
    }
    let created = rt.exec(&e.id, opts)?;
    if e.detach {
        return Ok(0);
    }
    let master = match ours {
        Some(sock) => Some(wharf_runtime::console::recv_fd(std::os::fd::AsFd::as_fd(
            &sock,
        ))?),
        None => None,
    };
    relay::wait_foreground(created.pid, &created.pidfd, master)
}

fn build_process(rt: &Runtime, e: &ExecArgs) -> Result<Process> {
    if let Some(path) = &e.process {
        let data =
            std::fs::read(path).with_context(|| format!("read process file {}", path.display()))?;
        return serde_json::from_slice(&data)
            .with_context(|| format!("parse process file {}", path.display()));
    }
    if e.args.is_empty() {
        bail!("exec: process args cannot be empty");
    }
    let (st, _) = rt.state(&e.id)?;
    let mut p = st
        .config
        .process()
        .clone()
        .context("the container's config has no process")?;
    p.set_args(Some(e.args.clone()));
    p.set_terminal(Some(e.tty));
    p.set_console_size(None);
    if let Some(cwd) = &e.cwd {
        p.set_cwd(cwd.clone());
    }
    if !e.env.is_empty() {
        let mut env = p.env().clone().unwrap_or_default();
        env.extend(e.env.iter().cloned());
        p.set_env(Some(env));
    }
    if let Some(user) = &e.user {
        let (uid, gid) = match user.split_once(':') {
            Some((u, g)) => (u.parse::<u32>(), g.parse::<u32>()),
            None => (user.parse::<u32>(), Ok(p.user().gid())),
        };
        let (Ok(uid), Ok(gid)) = (uid, gid) else {
            bail!("invalid --user {user:?}: expected UID[:GID] with numeric ids");
        };
        p.user_mut().set_uid(uid);
        p.user_mut().set_gid(gid);
    }
    if !e.additional_gids.is_empty() {
        p.user_mut()
            .set_additional_gids(Some(e.additional_gids.clone()));
    }
    if let Some(a) = &e.apparmor {
        p.set_apparmor_profile(Some(a.clone()));
    }
    if let Some(l) = &e.process_label {
        p.set_selinux_label(Some(l.clone()));
    }
    if e.no_new_privs {
        p.set_no_new_privileges(Some(true));
    }
    if !e.cap.is_empty() {
        let mut caps = p.capabilities().clone().unwrap_or_default();
        let mut add: Capabilities = Default::default();
        for c in &e.cap {
            let cap: Capability = serde_json::from_value(serde_json::Value::from(c.as_str()))
                .with_context(|| format!("unknown capability {c:?}"))?;
            add.insert(cap);
        }
        let merge = |set: &Option<Capabilities>| -> Option<Capabilities> {
            let mut s = set.clone().unwrap_or_default();
            s.extend(add.iter().copied());
            Some(s)
        };
        caps.set_bounding(merge(caps.bounding()));
        caps.set_effective(merge(caps.effective()));
        caps.set_permitted(merge(caps.permitted()));
        caps.set_ambient(merge(caps.ambient()));
        p.set_capabilities(Some(caps));
    }
    Ok(p)
}
