//! Running one kubelet action (a probe's or a lifecycle hook's) for a container, without
//! blocking the loop: exec actions are exec processes in the container, httpGet and
//! tcpSocket ones forked checkers in the pod's network namespace ([`netcheck`]), sleep a
//! deadline. Each ends in [`Shim::action_done`] with success or a failure message.

use std::os::fd::OwnedFd;

use super::*;
use crate::daemon::netcheck;

/// Exec ids of probe and hook actions start with this (they leave no exec record).
pub(super) const PREFIX: &str = "kube-";
/// Output of an exec action kept for its failure message.
const MAX_OUTPUT: usize = 1024;

/// One action under way.
pub(super) struct ActionRun {
    /// The exec id, for exec actions.
    pub exec_id: Option<String>,
    /// The exec process or the checker child.
    pub pid: Option<i32>,
    /// Where a checker writes its verdict.
    pub verdict: Option<OwnedFd>,
    /// When it is over: a sleep's end, or a check's timeout.
    pub deadline: Option<Instant>,
    /// A sleep succeeds at its deadline; anything else is killed there.
    pub sleep: bool,
    pub timed_out: bool,
    pub output: Vec<u8>,
}

impl ActionRun {
    /// What the loop must wake for.
    pub(super) fn deadline(&self) -> Option<Instant> {
        self.deadline.filter(|_| !self.timed_out)
    }
}

impl Shim {
    /// Start `action` for container `key`, to be judged within `timeout` (None: no limit).
    pub(super) fn start_action(
        &mut self,
        key: u64,
        action: &Action,
        timeout: Option<Duration>,
    ) -> Result<ActionRun, String> {
        let deadline = timeout.map(|t| Instant::now() + t);
        let mut run = ActionRun {
            exec_id: None,
            pid: None,
            verdict: None,
            deadline,
            sleep: false,
            timed_out: false,
            output: Vec::new(),
        };
        let c = self
            .containers
            .iter()
            .find(|c| c.key == key)
            .ok_or("the container is gone")?;
        let kube = c.spec.kube.clone().unwrap_or_default();
        match action {
            Action::Sleep { ms } => {
                run.sleep = true;
                run.deadline = Some(Instant::now() + Duration::from_millis(*ms));
            }
            Action::Exec { command } => {
                let (exec_id, pid) = self.exec_check(key, PREFIX, command)?;
                run.exec_id = Some(exec_id);
                run.pid = Some(pid);
            }
            Action::HttpGet {
                host,
                port,
                path,
                headers,
                https: true,
            } => {
                let host = host.clone().or(kube.pod_ip.clone());
                let mut args = vec![
                    "kube-probe".to_string(),
                    "https".into(),
                    host.unwrap_or_else(|| "127.0.0.1".into()),
                    port.to_string(),
                    path.clone(),
                    timeout
                        .unwrap_or(Duration::from_secs(10))
                        .as_millis()
                        .to_string(),
                ];
                args.extend(headers.iter().map(|(k, v)| format!("{k}: {v}")));
                let (pid, fd) = self.helper(&kube, &args)?;
                run.pid = Some(pid);
                run.verdict = Some(fd);
            }
            Action::Grpc {
                host,
                port,
                service,
            } => {
                let host = host.clone().or(kube.pod_ip.clone());
                let args = vec![
                    "kube-probe".to_string(),
                    "grpc".into(),
                    host.unwrap_or_else(|| "127.0.0.1".into()),
                    port.to_string(),
                    service.clone(),
                    timeout
                        .unwrap_or(Duration::from_secs(10))
                        .as_millis()
                        .to_string(),
                ];
                let (pid, fd) = self.helper(&kube, &args)?;
                run.pid = Some(pid);
                run.verdict = Some(fd);
            }
            Action::HttpGet {
                host,
                port,
                path,
                headers,
                https: false,
            } => {
                let host = host.clone().or(kube.pod_ip.clone());
                let (pid, fd) = netcheck::spawn(
                    kube.netns.as_deref(),
                    host.as_deref().unwrap_or("127.0.0.1"),
                    *port,
                    Some(netcheck::HttpGet { path, headers }),
                    timeout.unwrap_or(Duration::from_secs(10)),
                )?;
                run.pid = Some(pid);
                run.verdict = Some(fd);
            }
            Action::TcpSocket { host, port } => {
                let host = host.clone().or(kube.pod_ip.clone());
                let (pid, fd) = netcheck::spawn(
                    kube.netns.as_deref(),
                    host.as_deref().unwrap_or("127.0.0.1"),
                    *port,
                    None,
                    timeout.unwrap_or(Duration::from_secs(10)),
                )?;
                run.pid = Some(pid);
                run.verdict = Some(fd);
            }
        }
        Ok(run)
    }

    /// Start the probe helper with `args` in the pod's network namespace.
    fn helper(&self, kube: &KubeSpec, args: &[String]) -> Result<(i32, OwnedFd), String> {
        let helper = kube
            .helper
            .as_deref()
            .ok_or("HTTPS and gRPC checks need the probe helper (wharf), which was not given")?;
        netcheck::spawn_helper(kube.netns.as_deref(), helper, args)
    }

    /// Start `argv` in container `key` as the shim's own exec (a health check's or an
    /// exec action's): the container's process settings, no terminal, output on pipes,
    /// an exec id of `prefix` and the time. Returns the exec id and pid.
    pub(super) fn exec_check(
        &mut self,
        key: u64,
        prefix: &str,
        argv: &[String],
    ) -> Result<(String, i32), String> {
        let c = self
            .containers
            .iter()
            .find(|c| c.key == key)
            .ok_or("the container is gone")?;
        let id = c.spec.id.clone();
        let mut p = std::fs::read(c.spec.bundle.join("config.json"))
            .ok()
            .and_then(|b| serde_json::from_slice::<oci_spec::runtime::Spec>(&b).ok())
            .and_then(|s| s.process().clone())
            .ok_or("the container's config.json has no process")?;
        p.set_args(Some(argv.to_vec()));
        p.set_terminal(Some(false));
        let exec_id = format!(
            "{prefix}{}",
            wharf_sys::time::now_rfc3339_nano().replace([':', '.'], "-")
        );
        let pid = self
            .op_exec(&id, &exec_id, p, &StdioSpec::pipes(false))
            .map_err(|Fail(_, m)| m)?;
        Ok((exec_id, pid))
    }

    /// Keep output of a running exec action.
    pub(super) fn action_output(&mut self, key: u64, exec_id: &str, data: &[u8]) {
        if let Some(run) = self.find_key_mut(key).and_then(|c| {
            c.kube
                .as_mut()?
                .runs_mut()
                .find(|r| r.exec_id.as_deref() == Some(exec_id))
        }) {
            let room = MAX_OUTPUT.saturating_sub(run.output.len());
            run.output.extend_from_slice(&data[..data.len().min(room)]);
        }
    }

    /// A checker child or an exec action exited: judge it. Returns false when `pid` is
    /// none of them.
    pub(super) fn action_exited(&mut self, pid: i32, status: i32) -> bool {
        let Some((key, which)) = self.containers.iter().find_map(|c| {
            let k = c.kube.as_ref()?;
            k.which(|r| r.pid == Some(pid)).map(|w| (c.key, w))
        }) else {
            return false;
        };
        let c = self.find_key_mut(key).expect("found");
        let mut run = c.kube.as_mut().expect("found").take(which).expect("found");
        if let Some(e) = &run.exec_id
            && let Some(i) = c.execs.iter().position(|x| &x.id == e)
        {
            // What it printed last is part of its message; actions leave no exec record.
            let mut buf = [0u8; 4096];
            let mut exec = c.execs.remove(i);
            exec.io.drain(&mut buf, &mut |_, d| {
                let room = MAX_OUTPUT.saturating_sub(run.output.len());
                run.output.extend_from_slice(&d[..d.len().min(room)]);
            });
        }
        let (code, _) = sys::decode_status(status);
        let result = if run.timed_out {
            Err(match &run.verdict {
                Some(_) => "context deadline exceeded (Client.Timeout exceeded)".to_string(),
                None => "command timed out".to_string(),
            })
        } else if code == 0 {
            Ok(())
        } else {
            let out = match run.verdict {
                Some(fd) => {
                    let v = netcheck::verdict(fd).trim().to_string();
                    if v.is_empty() {
                        format!("the check exited with code {code}")
                    } else {
                        v
                    }
                }
                None => {
                    let text = String::from_utf8_lossy(&run.output).trim().to_string();
                    format!(
                        "command failed: exit code {code}{}{text}",
                        if text.is_empty() { "" } else { ": " }
                    )
                }
            };
            Err(out)
        };
        self.action_done(key, which, result);
        true
    }

    /// Deadlines of actions: sleeps that end, checks that time out.
    pub(super) fn action_tick(&mut self, now: Instant) {
        let mut done = Vec::new();
        for c in &mut self.containers {
            let Some(k) = c.kube.as_mut() else { continue };
            for (which, run) in k.runs_with_index() {
                if run.deadline.is_none_or(|t| t > now) || run.timed_out {
                    continue;
                }
                if run.sleep {
                    done.push((c.key, which));
                    continue;
                }
                run.timed_out = true;
                if let Some(pid) = run.pid {
                    // SAFETY: our own child (an exec process or a checker); its exit
                    // is judged as a timeout.
                    unsafe { libc::kill(pid, libc::SIGKILL) };
                }
            }
        }
        for (key, which) in done {
            if let Some(k) = self.find_key_mut(key).and_then(|c| c.kube.as_mut()) {
                k.take(which);
            }
            self.action_done(key, which, Ok(()));
        }
    }
}
