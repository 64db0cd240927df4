//! Helpers for driving the `wharf` binary in tests.

#![allow(dead_code)]

use std::path::Path;
use std::process::{Command, Output};

#[allow(unused_imports)]
pub use wharf_testbed::{Bundle, Env, wait_until};

/// The default config.json the runtime's `spec` writes.
pub const BASE: &str = wharf_runtime::spec::DEFAULT_CONFIG;

/// `wharf runtime --root <env root> <args>`.
pub fn rt(env: &Env) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_wharf"));
    c.arg("runtime").arg("--root").arg(&env.root);
    c
}

/// Run a runtime command and capture its output. Output goes through files, not pipes:
/// `create` hands its stdio to the container, which would hold a pipe open until it exits.
pub fn rt_out(env: &Env, args: &[&str]) -> Output {
    use std::os::unix::process::ExitStatusExt;
    static N: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = N.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    let out_path = env.path().join(format!(".out-{n}"));
    let err_path = env.path().join(format!(".err-{n}"));
    let status = rt(env)
        .args(args)
        .stdin(std::process::Stdio::null())
        .stdout(std::fs::File::create(&out_path).unwrap())
        .stderr(std::fs::File::create(&err_path).unwrap())
        .status()
        .expect("run wharf");

    Output {
        status: std::process::ExitStatus::from_raw(status.into_raw()),
        stdout: std::fs::read(&out_path).unwrap_or_default(),
        stderr: std::fs::read(&err_path).unwrap_or_default(),
    }
}

/// Run a runtime command that must succeed; returns stdout.
pub fn ok(env: &Env, args: &[&str]) -> String {
    let out = rt_out(env, args);
    assert!(
        out.status.success(),
        "wharf runtime {args:?} failed ({}): {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Run a runtime command that must fail; returns stderr.
pub fn fails(env: &Env, args: &[&str]) -> String {
    let out = rt_out(env, args);
    assert!(
        !out.status.success(),
        "wharf runtime {args:?} unexpectedly succeeded: {}",
        String::from_utf8_lossy(&out.stdout)
    );
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// `run` a bundle in the foreground; returns (exit code, stdout, stderr).
pub fn run(env: &Env, bundle: &Bundle, id: &str) -> (i32, String, String) {
    let out = rt(env)
        .args(["run", "--bundle"])
        .arg(&bundle.dir)
        .arg(id)
        .output()
        .expect("run wharf");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The status field of `state`.
pub fn status(env: &Env, id: &str) -> String {
    let out = ok(env, &["state", id]);
    let v: serde_json::Value = serde_json::from_str(&out).expect("state is JSON");
    v["status"].as_str().unwrap_or_default().to_string()
}

/// Whether any cgroup directory of the env's parent still has children.
pub fn cgroups_left(env: &Env) -> Vec<std::path::PathBuf> {
    env.cgroup_dirs()
        .into_iter()
        .flat_map(|d| std::fs::read_dir(&d).into_iter().flatten().flatten())
        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
        .map(|e| e.path())
        .collect()
}

/// Whether the runtime root holds any container directory.
pub fn state_left(env: &Env) -> Vec<String> {
    std::fs::read_dir(&env.root)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| !wharf_testbed::is_kept_mount(Path::new(n)))
        .collect()
}

/// Is `path` a mount point listed in our mountinfo?
pub fn is_mounted(path: &Path) -> bool {
    std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap_or_default()
        .lines()
        .any(|l| l.split(' ').nth(4) == Some(path.to_str().unwrap_or("")))
}

/// Read a console's pty master until `what` shows up or the other side closes; returns what
/// was read.
pub fn read_console_until(master: &mut std::fs::File, what: &str) -> String {
    use std::io::Read;
    let mut out = Vec::new();
    let mut buf = [0u8; 1024];
    while let Ok(n) = master.read(&mut buf) {
        if n == 0 {
            break;
        }
        out.extend_from_slice(&buf[..n]);
        if String::from_utf8_lossy(&out).contains(what) {
            break;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// `create` a bundle whose process has a terminal, through a console socket of the test's;
/// returns the pty master the runtime sent.
pub fn create_with_console(env: &Env, bundle: &Bundle, id: &str) -> std::fs::File {
    use std::os::fd::AsFd;
    let sock_path = env.path().join(format!("{id}.console.sock"));
    let listener = std::os::unix::net::UnixListener::bind(&sock_path).unwrap();
    ok(
        env,
        &[
            "create",
            "--bundle",
            bundle.dir.to_str().unwrap(),
            "--console-socket",
            sock_path.to_str().unwrap(),
            id,
        ],
    );
    let (conn, _) = listener.accept().unwrap();
    std::fs::File::from(wharf_runtime::console::recv_fd(conn.as_fd()).unwrap())
}
