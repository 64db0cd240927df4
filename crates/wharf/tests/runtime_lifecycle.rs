//! The container lifecycle through `wharf runtime`, with real containers.

mod common;

use common::*;
use std::time::Duration;

#[test]
fn run_returns_output_and_exit_code_and_cleans_up() {
    let env = Env::new("run-exit");
    let b = env.bundle(
        "c",
        BASE,
        &["sh", "-c", "echo hello; echo oops >&2; exit 3"],
    );
    let (code, out, err) = run(&env, &b, "c");
    assert_eq!(code, 3, "stderr: {err}");
    assert_eq!(out, "hello\n");
    assert!(err.contains("oops"));
    assert!(
        state_left(&env).is_empty(),
        "state left: {:?}",
        state_left(&env)
    );
    assert!(
        cgroups_left(&env).is_empty(),
        "cgroups left: {:?}",
        cgroups_left(&env)
    );
}

#[test]
fn create_start_kill_delete() {
    let env = Env::new("lifecycle");
    let b = env.bundle("c1", BASE, &["sleep", "1000"]);
    let pidfile = env.path().join("pid");
    ok(
        &env,
        &[
            "create",
            "--bundle",
            b.dir.to_str().unwrap(),
            "--pid-file",
            pidfile.to_str().unwrap(),
            "c1",
        ],
    );
    assert_eq!(status(&env, "c1"), "created");
    let pid: i32 = std::fs::read_to_string(&pidfile)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let state: serde_json::Value = serde_json::from_str(&ok(&env, &["state", "c1"])).unwrap();
    assert_eq!(state["pid"], pid);
    assert_eq!(state["bundle"], b.dir.to_str().unwrap());
    // While created, the init waits: it has not exec'd sleep yet.
    let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap();
    assert_ne!(comm.trim(), "sleep");
    ok(&env, &["start", "c1"]);
    assert_eq!(status(&env, "c1"), "running");
    let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap();
    assert_eq!(comm.trim(), "sleep");
    let err = fails(&env, &["start", "c1"]);
    assert!(
        err.contains("cannot start an already running container"),
        "{err}"
    );
    let list = ok(&env, &["list", "--format", "json"]);
    let list: serde_json::Value = serde_json::from_str(&list).unwrap();
    assert_eq!(list[0]["id"], "c1");
    assert_eq!(list[0]["status"], "running");
    ok(&env, &["kill", "c1", "KILL"]);
    assert!(wait_until(Duration::from_secs(10), || status(&env, "c1") == "stopped"));
    let err = fails(&env, &["kill", "c1", "TERM"]);
    assert!(err.contains("container not running"), "{err}");
    ok(&env, &["delete", "c1"]);
    let err = fails(&env, &["state", "c1"]);
    assert!(err.contains("container does not exist"), "{err}");
    assert!(cgroups_left(&env).is_empty());
}

#[test]
fn delete_refuses_running_unless_forced() {
    let env = Env::new("delete-force");
    let b = env.bundle("c1", BASE, &["sleep", "1000"]);
    ok(
        &env,
        &["run", "--detach", "--bundle", b.dir.to_str().unwrap(), "c1"],
    );
    let err = fails(&env, &["delete", "c1"]);
    assert!(
        err.contains("cannot delete container c1 that is not stopped: running"),
        "{err}"
    );
    ok(&env, &["delete", "--force", "c1"]);
    assert!(state_left(&env).is_empty());
    assert!(cgroups_left(&env).is_empty());
}

#[test]
fn duplicate_id_is_refused_and_keeps_the_first() {
    let env = Env::new("dup");
    let b = env.bundle("c1", BASE, &["sleep", "1000"]);
    ok(&env, &["create", "--bundle", b.dir.to_str().unwrap(), "c1"]);
    let err = fails(&env, &["create", "--bundle", b.dir.to_str().unwrap(), "c1"]);
    assert!(err.contains("container with id exists: c1"), "{err}");
    assert_eq!(status(&env, "c1"), "created");
    ok(&env, &["delete", "--force", "c1"]);
}

#[test]
fn delete_of_created_container_needs_force_and_kills_its_init() {
    let env = Env::new("delete-created");
    let b = env.bundle("c1", BASE, &["true"]);
    let pidfile = env.path().join("pid");
    ok(
        &env,
        &[
            "create",
            "--bundle",
            b.dir.to_str().unwrap(),
            "--pid-file",
            pidfile.to_str().unwrap(),
            "c1",
        ],
    );
    let pid: i32 = std::fs::read_to_string(&pidfile)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    // Not stopped: delete is an error with no effect (runtime spec); --force kills it.
    let err = fails(&env, &["delete", "c1"]);
    assert!(
        err.contains("cannot delete container c1 that is not stopped: created"),
        "{err}"
    );
    assert_eq!(status(&env, "c1"), "created");
    ok(&env, &["delete", "--force", "c1"]);
    assert!(wait_until(Duration::from_secs(5), || {
        std::fs::read_to_string(format!("/proc/{pid}/stat")).map_or(true, |s| s.contains(") Z "))
    }));
    assert!(cgroups_left(&env).is_empty());
}

#[test]
fn unknown_container_errors_like_runc() {
    let env = Env::new("unknown");
    for cmd in [
        &["state", "nope"][..],
        &["start", "nope"],
        &["kill", "nope"],
        &["delete", "nope"],
    ] {
        let err = fails(&env, cmd);
        assert!(err.contains("container does not exist"), "{cmd:?}: {err}");
    }
}

#[test]
fn pause_and_resume() {
    let env = Env::new("pause");
    let b = env.bundle("c1", BASE, &["sleep", "1000"]);
    ok(
        &env,
        &["run", "-d", "--bundle", b.dir.to_str().unwrap(), "c1"],
    );
    ok(&env, &["pause", "c1"]);
    assert_eq!(status(&env, "c1"), "paused");
    ok(&env, &["resume", "c1"]);
    assert_eq!(status(&env, "c1"), "running");
    let pids: Vec<i32> =
        serde_json::from_str(&ok(&env, &["ps", "--format", "json", "c1"])).unwrap();
    assert_eq!(pids.len(), 1);
    ok(&env, &["delete", "-f", "c1"]);
}

#[test]
fn config_without_process_creates_but_cannot_start() {
    let env = Env::new("no-process");
    let mut b = env.bundle("c1", BASE, &["true"]);
    b.config.as_object_mut().unwrap().remove("process");
    b.save();
    ok(&env, &["create", "--bundle", b.dir.to_str().unwrap(), "c1"]);
    assert_eq!(status(&env, "c1"), "created");
    let err = fails(&env, &["start", "c1"]);
    assert!(err.contains("no process"), "{err}");
    assert!(wait_until(Duration::from_secs(10), || status(&env, "c1") == "stopped"));
    ok(&env, &["delete", "c1"]);
    assert!(cgroups_left(&env).is_empty());
}
