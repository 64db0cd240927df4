//! Helpers for the shim tests: a pod (its own Env, state directory, runtime root and a
//! real shim started from the `wharf` binary) that cleans up after itself.

#![allow(dead_code)]

use std::path::PathBuf;
use std::time::Duration;

use serde_json::Value;
#[allow(unused_imports)]
pub use wharf_shim::protocol::*;
pub use wharf_shim::{ShimClient, SpawnOptions};
#[allow(unused_imports)]
pub use wharf_testbed::{Bundle, Env, wait_until};

/// The default config.json of the runtime.
pub const BASE: &str = wharf_runtime::spec::DEFAULT_CONFIG;

/// A pod with a running shim.
pub struct Pod {
    /// Cgroup parent, temp dir, runtime root.
    pub env: Env,
    /// The shim's state directory.
    pub state_dir: PathBuf,
    /// Client.
    pub shim: ShimClient,
}

impl Pod {
    /// Start a shim for a new pod.
    pub fn new(name: &str) -> Pod {
        Pod::with_options(name, |_| {})
    }

    /// Start a shim with adjusted spawn options.
    pub fn with_options(name: &str, adjust: impl FnOnce(&mut SpawnOptions)) -> Pod {
        let env = Env::new(name);
        let state_dir = env.path().join("pod");
        let mut opts = SpawnOptions::new(name, &state_dir, &env.root);
        opts.binary = PathBuf::from(env!("CARGO_BIN_EXE_wharf"));
        adjust(&mut opts);
        let shim = wharf_shim::spawn(&opts).expect("spawn the shim");
        Pod {
            env,
            state_dir,
            shim,
        }
    }

    /// The shim's pid from its pid file.
    pub fn shim_pid(&self) -> i32 {
        self.shim.records().shim_pid().expect("shim.pid").0
    }

    /// A busybox bundle running `args`, as a spec with a log file.
    pub fn spec(&self, id: &str, args: &[&str]) -> ContainerSpec {
        let b = self.env.bundle(id, BASE, args);
        ContainerSpec {
            id: id.into(),
            bundle: b.dir.clone(),
            stdio: StdioSpec::log(self.log_path(id)),
            restart: RestartPolicy::Never,
            backoff: Backoff::default(),
            init: false,
            max_restarts: None,
            exit_command: Vec::new(),
            health: None,
            kube: None,
            sub_paths: Vec::new(),
        }
    }

    /// A bundle whose config is changed by `edit` before it is saved.
    pub fn spec_with(
        &self,
        id: &str,
        args: &[&str],
        edit: impl FnOnce(&mut Value),
    ) -> ContainerSpec {
        let mut b = self.env.bundle(id, BASE, args);
        edit(&mut b.config);
        b.save();
        ContainerSpec {
            id: id.into(),
            bundle: b.dir.clone(),
            stdio: StdioSpec::log(self.log_path(id)),
            restart: RestartPolicy::Never,
            backoff: Backoff::default(),
            init: false,
            max_restarts: None,
            exit_command: Vec::new(),
            health: None,
            kube: None,
            sub_paths: Vec::new(),
        }
    }

    /// Where a container's log goes.
    pub fn log_path(&self, id: &str) -> PathBuf {
        self.env.path().join("logs").join(format!("{id}.log"))
    }

    /// Create and start.
    pub fn run(&self, spec: &ContainerSpec) {
        self.shim.create(spec).expect("create");
        self.shim.start(&spec.id).expect("start");
    }

    /// Wait (with a generous timeout) for the container's exit.
    pub fn wait(&self, id: &str) -> ExitRecord {
        self.shim
            .wait(id, Some(Duration::from_secs(60)))
            .expect("wait")
    }

    /// The contents of the log entries of a container (the `F`/`P` lines' text).
    pub fn log_lines(&self, id: &str) -> Vec<String> {
        let mut out = Vec::new();
        wharf_shim::logs::read(
            &self.log_path(id),
            &Default::default(),
            &mut |e| {
                out.push(String::from_utf8_lossy(&e.content).into_owned());
                true
            },
            &mut || false,
        )
        .expect("read log");
        out
    }
}

impl Drop for Pod {
    fn drop(&mut self) {
        kill_shim(&self.state_dir, &self.env.root);
    }
}

/// Kill the shim of `state_dir` if it runs, and clean up after it (containers, cgroups,
/// runtime state): the end of every shim test, passed or failed.
pub fn kill_shim(state_dir: &std::path::Path, runtime_root: &std::path::Path) {
    let sd = wharf_shim::records::StateDir::new(state_dir);
    if let Some((pid, start)) = sd.shim_pid()
        && wharf_shim::records::process_is(pid, start)
    {
        // SAFETY: kill(2) of the shim this test started (checked by start time).
        unsafe { libc::kill(pid, libc::SIGKILL) };
        wait_until(Duration::from_secs(10), || {
            !wharf_shim::records::process_is(pid, start)
        });
    }
    let _ = wharf_shim::reap_dead_shim(state_dir, runtime_root);
}

/// Runs [`kill_shim`] when dropped.
pub struct ShimGuard(pub PathBuf, pub PathBuf);

impl Drop for ShimGuard {
    fn drop(&mut self) {
        kill_shim(&self.0, &self.1);
    }
}

/// Whether a process exists and is not a zombie.
pub fn alive(pid: i32) -> bool {
    matches!(wharf_runtime::sys::process_state(pid), Some(s) if s != 'Z' && s != 'X')
}
