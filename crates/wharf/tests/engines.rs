//! A real engine drives `wharf runtime`: containerd 1.6 (Debian's) with its runc shim, told
//! by `ctr run --runc-binary` to use Wharf in place of runc.

mod common;

use common::*;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// A private containerd: its own root, state and socket under the test's temp dir.
struct Containerd {
    child: Child,
    sock: PathBuf,
    namespace: String,
    runc_root: PathBuf,
}

impl Containerd {
    fn start(env: &Env) -> Containerd {
        let dir = env.path().join("containerd");
        let (child, sock) = wharf_testbed::start_containerd(&dir, &dir.join("state"))
            .unwrap_or_else(|e| panic!("{e} (install Debian's containerd: the test command does)"));
        // Containers' cgroups are /<namespace>/<id>: use the Env's cgroup parent as namespace
        // so the Env removes them.
        let namespace = env.cgroup_parent.trim_start_matches('/').to_string();
        let runc_root = PathBuf::from("/run/containerd/runc").join(&namespace);
        Containerd {
            child,
            sock,
            namespace,
            runc_root,
        }
    }

    fn ctr(&self, args: &[&str]) -> std::process::Output {
        Command::new("ctr")
            .arg("--address")
            .arg(&self.sock)
            .arg("--namespace")
            .arg(&self.namespace)
            .args(args)
            .stdin(Stdio::null())
            .output()
            .expect("ctr")
    }
}

impl Drop for Containerd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        // The runtime's mount namespace template lives in its root, outside the test's dir.
        wharf_testbed::unmount_below(&self.runc_root);
        let _ = std::fs::remove_dir_all(&self.runc_root);
    }
}

fn wharf_runc(env: &Env) -> PathBuf {
    let link = env.path().join("wharf-runc");
    std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_wharf"), &link).unwrap();
    link
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

#[test]
fn containerd_runs_a_container_with_wharf() {
    let env = Env::new("containerd");
    let rootfs = env.path().join("rootfs");
    wharf_testbed::make_busybox_rootfs(&rootfs);
    let runc = wharf_runc(&env);
    let cd = Containerd::start(&env);
    let rootfs_s = rootfs.to_str().unwrap();
    let runc_s = runc.to_str().unwrap();

    // Foreground: output and exit code come back through the shim.
    let out = cd.ctr(&[
        "run",
        "--rm",
        "--runc-binary",
        runc_s,
        "--rootfs",
        rootfs_s,
        "fg",
        "sh",
        "-c",
        "echo hello from wharf; exit 3",
    ]);
    assert_eq!(out.status.code(), Some(3), "stderr: {}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "hello from wharf\n");

    // Detached: exec, pause/resume, metrics (events --stats), kill, delete.
    let out = cd.ctr(&[
        "run",
        "-d",
        "--runc-binary",
        runc_s,
        "--rootfs",
        rootfs_s,
        "bg",
        "sleep",
        "1000",
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let out = cd.ctr(&[
        "task",
        "exec",
        "--exec-id",
        "e1",
        "bg",
        "sh",
        "-c",
        "echo exec ok; exit 4",
    ]);
    assert_eq!(out.status.code(), Some(4), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "exec ok\n");
    assert!(cd.ctr(&["task", "pause", "bg"]).status.success());
    let ls = text(&cd.ctr(&["task", "ls"]).stdout);
    assert!(ls.contains("PAUSED"), "{ls}");
    assert!(cd.ctr(&["task", "resume", "bg"]).status.success());
    let metrics = cd.ctr(&["task", "metrics", "bg"]);
    assert!(metrics.status.success(), "{}", text(&metrics.stderr));
    assert!(
        text(&metrics.stdout).contains("memory.usage_in_bytes"),
        "{}",
        text(&metrics.stdout)
    );
    assert!(
        cd.ctr(&["task", "kill", "-s", "KILL", "bg"])
            .status
            .success()
    );
    assert!(wait_until(Duration::from_secs(10), || {
        text(&cd.ctr(&["task", "ls"]).stdout).contains("STOPPED")
    }));
    assert!(cd.ctr(&["task", "rm", "bg"]).status.success());
    assert!(cd.ctr(&["container", "rm", "bg"]).status.success());
    // The shim used Wharf's state root: nothing of either container is left in it.
    let left: Vec<_> = std::fs::read_dir(&cd.runc_root)
        .map(|d| d.flatten().map(|e| e.file_name()).collect())
        .unwrap_or_default();
    let left: Vec<_> = left
        .into_iter()
        .filter(|n| !wharf_testbed::is_kept_mount(Path::new(n)))
        .collect();
    assert!(left.is_empty(), "runtime state left: {left:?}");
    assert!(Path::new(&cd.sock).exists());
}
