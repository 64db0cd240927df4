//! `exec`: another process in a running container's namespaces and cgroup.

mod common;

use common::*;
use std::time::Duration;

fn running(env: &Env) -> Bundle {
    let b = env.bundle("c", BASE, &["sleep", "1000"]);
    ok(
        env,
        &["run", "-d", "--bundle", b.dir.to_str().unwrap(), "c"],
    );
    b
}

fn ns_of(pid: &str, ns: &str) -> String {
    std::fs::read_link(format!("/proc/{pid}/ns/{ns}"))
        .unwrap()
        .to_string_lossy()
        .into_owned()
}

#[test]
fn exec_joins_namespaces_and_cgroup() {
    let env = Env::new("exec-ns");
    let _b = running(&env);
    let state: serde_json::Value = serde_json::from_str(&ok(&env, &["state", "c"])).unwrap();
    let init = state["pid"].to_string();
    let pidfile = env.path().join("exec.pid");
    ok(
        &env,
        &[
            "exec",
            "-d",
            "--pid-file",
            pidfile.to_str().unwrap(),
            "c",
            "sleep",
            "500",
        ],
    );
    let pid = std::fs::read_to_string(&pidfile).unwrap();
    for ns in ["pid", "net", "ipc", "uts", "mnt", "cgroup"] {
        assert_eq!(ns_of(&pid, ns), ns_of(&init, ns), "{ns} namespace differs");
    }
    let pids: Vec<i32> = serde_json::from_str(&ok(&env, &["ps", "--format", "json", "c"])).unwrap();
    assert!(
        pids.contains(&pid.trim().parse().unwrap()),
        "{pids:?} lacks {pid}"
    );
    ok(&env, &["delete", "-f", "c"]);
}

#[test]
fn exec_exit_code_env_cwd_user() {
    let env = Env::new("exec-flags");
    let _b = running(&env);
    let out = rt_out(
        &env,
        &[
            "exec",
            "--env",
            "A=b",
            "--cwd",
            "/tmp",
            "--user",
            "1000:1000",
            "c",
            "sh",
            "-c",
            "echo $A $(pwd) $(id -u):$(id -g); exit 5",
        ],
    );
    assert_eq!(out.status.code(), Some(5));
    assert_eq!(String::from_utf8_lossy(&out.stdout), "b /tmp 1000:1000\n");
    ok(&env, &["delete", "-f", "c"]);
}

#[test]
fn exec_with_process_json_and_caps() {
    let env = Env::new("exec-process");
    let _b = running(&env);
    let process = serde_json::json!({
        "terminal": false,
        "user": {"uid": 0, "gid": 0},
        "args": ["sh", "-c", "grep CapEff /proc/self/status; echo $X"],
        "env": ["PATH=/bin", "X=from-json"],
        "cwd": "/",
        "capabilities": {"bounding": ["CAP_KILL"], "effective": ["CAP_KILL"], "permitted": ["CAP_KILL"]}
    });
    let pfile = env.path().join("process.json");
    std::fs::write(&pfile, process.to_string()).unwrap();
    let out = ok(&env, &["exec", "--process", pfile.to_str().unwrap(), "c"]);
    assert_eq!(out, "CapEff:\t0000000000000020\nfrom-json\n");
    let out = ok(
        &env,
        &[
            "exec",
            "--cap",
            "CAP_SYS_ADMIN",
            "c",
            "grep",
            "CapEff",
            "/proc/self/status",
        ],
    );
    let eff = u64::from_str_radix(out.split_whitespace().nth(1).unwrap(), 16).unwrap();
    assert!(eff & (1 << 21) != 0, "{out}");
    ok(&env, &["delete", "-f", "c"]);
}

#[test]
fn exec_missing_binary_and_stopped_container() {
    let env = Env::new("exec-errors");
    let _b = running(&env);
    let err = fails(&env, &["exec", "c", "no-such-binary"]);
    assert!(err.contains("executable file not found"), "{err}");
    ok(&env, &["kill", "c", "KILL"]);
    assert!(wait_until(Duration::from_secs(10), || status(&env, "c") == "stopped"));
    let err = fails(&env, &["exec", "c", "true"]);
    assert!(err.contains("cannot exec in a stopped container"), "{err}");
    ok(&env, &["delete", "c"]);
}

#[test]
fn exec_tty_through_console_socket() {
    use std::io::{Read, Write};
    use std::os::fd::AsFd;
    let env = Env::new("exec-tty");
    let _b = running(&env);
    let sock = env.path().join("c.sock");
    let listener = std::os::unix::net::UnixListener::bind(&sock).unwrap();
    ok(
        &env,
        &[
            "exec",
            "-d",
            "-t",
            "--console-socket",
            sock.to_str().unwrap(),
            "c",
            "sh",
            "-c",
            "tty; read x; echo got:$x",
        ],
    );
    let (conn, _) = listener.accept().unwrap();
    let mut master = std::fs::File::from(wharf_runtime::console::recv_fd(conn.as_fd()).unwrap());
    master.write_all(b"ping\n").unwrap();
    let mut out = Vec::new();
    let mut buf = [0u8; 512];
    while let Ok(n) = master.read(&mut buf) {
        if n == 0 {
            break;
        }
        out.extend_from_slice(&buf[..n]);
        if String::from_utf8_lossy(&out).contains("got:ping") {
            break;
        }
    }
    let text = String::from_utf8_lossy(&out);
    assert!(
        text.contains("/dev/pts/") && text.contains("got:ping"),
        "{text}"
    );
    ok(&env, &["delete", "-f", "c"]);
}

#[test]
fn exec_in_user_namespace_container() {
    let env = Env::new("exec-userns");
    let mut b = env.bundle("c", BASE, &["sleep", "1000"]);
    b.config["linux"]["namespaces"]
        .as_array_mut()
        .unwrap()
        .push(serde_json::json!({"type": "user"}));
    b.config["linux"]["uidMappings"] =
        serde_json::json!([{"containerID": 0, "hostID": 300000, "size": 65536}]);
    b.config["linux"]["gidMappings"] =
        serde_json::json!([{"containerID": 0, "hostID": 300000, "size": 65536}]);
    b.save();
    ok(
        &env,
        &["run", "-d", "--bundle", b.dir.to_str().unwrap(), "c"],
    );
    let out = ok(
        &env,
        &["exec", "c", "sh", "-c", "id -u; cat /proc/self/uid_map"],
    );
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines[0], "0");
    assert_eq!(
        lines[1].split_whitespace().collect::<Vec<_>>(),
        ["0", "300000", "65536"]
    );
    ok(&env, &["delete", "-f", "c"]);
}
