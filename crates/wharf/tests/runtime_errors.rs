//! Bad configurations get a clear error naming the cause, and leave nothing behind: no state
//! directory, no cgroup, no process, no mount.

mod common;

use common::*;
use serde_json::json;

/// Create with a config `edit` breaks; returns stderr after checking the failure left nothing.
fn create_fails(env: &Env, edit: impl FnOnce(&mut Bundle)) -> String {
    let mut b = env.bundle("c", BASE, &["true"]);
    edit(&mut b);
    let err = fails(env, &["create", "--bundle", b.dir.to_str().unwrap(), "c"]);
    assert!(
        state_left(env).is_empty(),
        "state left after failed create: {:?}",
        state_left(env)
    );
    assert!(
        cgroups_left(env).is_empty(),
        "cgroups left after failed create: {:?}",
        cgroups_left(env)
    );
    let procs: Vec<_> = env
        .cgroup_dirs()
        .iter()
        .filter_map(|d| std::fs::read_to_string(d.join("cgroup.procs")).ok())
        .filter(|s| !s.trim().is_empty())
        .collect();
    assert!(procs.is_empty(), "processes left: {procs:?}");
    assert!(!is_mounted(&b.rootfs()), "rootfs still mounted");
    err
}

#[test]
fn invalid_json() {
    let env = Env::new("bad-json");
    let err = create_fails(&env, |b| {
        std::fs::write(b.dir.join("config.json"), "{ not json").unwrap();
    });
    assert!(
        err.contains("invalid config.json") && err.contains("config.json"),
        "{err}"
    );
}

#[test]
fn missing_rootfs() {
    let env = Env::new("no-rootfs");
    let err = create_fails(&env, |b| {
        b.config["root"]["path"] = json!("does-not-exist");
        b.save();
    });
    assert!(
        err.contains("root.path") && err.contains("does-not-exist"),
        "{err}"
    );
}

#[test]
fn unknown_namespace_type() {
    let env = Env::new("bad-ns");
    let err = create_fails(&env, |b| {
        b.config["linux"]["namespaces"]
            .as_array_mut()
            .unwrap()
            .push(json!({"type": "pidfoo"}));
        b.save();
    });
    assert!(err.contains("pidfoo"), "{err}");
}

#[test]
fn duplicate_namespace() {
    let env = Env::new("dup-ns");
    let err = create_fails(&env, |b| {
        b.config["linux"]["namespaces"]
            .as_array_mut()
            .unwrap()
            .push(json!({"type": "pid"}));
        b.save();
    });
    assert!(err.contains("pid appears twice"), "{err}");
}

#[test]
fn mount_destination_escaping_the_root() {
    let env = Env::new("mount-escape");
    let err = create_fails(&env, |b| {
        b.config["mounts"].as_array_mut().unwrap().push(
            json!({"destination": "/../../../tmp/wharf-escape", "type": "tmpfs", "source": "tmpfs"}),
        );
        b.save();
    });
    assert!(err.contains("escapes the container's root"), "{err}");
    assert!(!std::path::Path::new("/tmp/wharf-escape").exists());
}

#[test]
fn relative_hook_path() {
    let env = Env::new("hook-relative");
    let err = create_fails(&env, |b| {
        b.config["hooks"] = json!({"prestart": [{"path": "bin/hook"}]});
        b.save();
    });
    assert!(
        err.contains("hooks.prestart") && err.contains("not absolute"),
        "{err}"
    );
}

#[test]
fn missing_hook_binary() {
    let env = Env::new("hook-missing");
    let err = create_fails(&env, |b| {
        b.config["hooks"] = json!({"createRuntime": [{"path": "/nonexistent/hook"}]});
        b.save();
    });
    assert!(
        err.contains("createRuntime hook /nonexistent/hook"),
        "{err}"
    );
}

#[test]
fn missing_executable() {
    let env = Env::new("no-exe");
    let err = create_fails(&env, |b| {
        b.config["process"]["args"] = json!(["/bin/does-not-exist"]);
        b.save();
    });
    assert!(err.contains("/bin/does-not-exist"), "{err}");
    let err = create_fails(&env, |b| {
        b.config["process"]["args"] = json!(["no-such-command"]);
        b.save();
    });
    assert!(err.contains("executable file not found in $PATH"), "{err}");
}

#[test]
fn empty_args_relative_cwd_and_missing_cwd() {
    let env = Env::new("bad-process");
    let err = create_fails(&env, |b| {
        b.config["process"]["args"] = json!([]);
        b.save();
    });
    assert!(err.contains("process.args"), "{err}");
    let err = create_fails(&env, |b| {
        b.config["process"]["cwd"] = json!("tmp");
        b.save();
    });
    assert!(err.contains("process.cwd"), "{err}");
    // A missing working directory is made (as runc makes it), unless the root is
    // read-only; a file is not a working directory.
    let err = create_fails(&env, |b| {
        b.config["process"]["cwd"] = json!("/no/such/dir");
        b.config["root"]["readonly"] = json!(true);
        b.save();
    });
    assert!(err.contains("create process.cwd /no/such/dir"), "{err}");
    let err = create_fails(&env, |b| {
        b.config["process"]["cwd"] = json!("/etc/passwd");
        b.save();
    });
    assert!(
        err.contains("process.cwd /etc/passwd is not a directory"),
        "{err}"
    );
    let mut b = env.bundle("made", BASE, &["pwd"]);
    b.config["process"]["cwd"] = json!("/made/here");
    b.config["root"]["readonly"] = json!(false);
    b.save();
    let (code, out, err) = run(&env, &b, "made");
    assert_eq!((code, out.as_str()), (0, "/made/here\n"), "{err}");
    use std::os::unix::fs::PermissionsExt;
    for dir in ["made", "made/here"] {
        let m = std::fs::metadata(b.rootfs().join(dir)).unwrap();
        assert_eq!(m.permissions().mode() & 0o7777, 0o755, "{dir}");
    }
}

#[test]
fn hostname_without_uts_namespace() {
    let env = Env::new("no-uts");
    let err = create_fails(&env, |b| {
        b.config["hostname"] = json!("x");
        b.config["linux"]["namespaces"]
            .as_array_mut()
            .unwrap()
            .retain(|n| n["type"] != "uts");
        b.save();
    });
    assert!(
        err.contains("hostname requires a private UTS namespace"),
        "{err}"
    );
}

#[test]
fn proc_mount_through_a_symlink_is_refused() {
    let env = Env::new("proc-symlink");
    let err = create_fails(&env, |b| {
        let proc_dir = b.rootfs().join("proc");
        std::fs::remove_dir(&proc_dir).unwrap();
        std::os::unix::fs::symlink("/tmp", &proc_dir).unwrap();
    });
    assert!(
        err.contains("refusing to mount proc on /proc: /proc is a symlink"),
        "{err}"
    );
}

#[test]
fn systemd_cgroup_driver_is_refused_clearly() {
    let env = Env::new("systemd");
    let b = env.bundle("c", BASE, &["true"]);
    let err = fails(
        &env,
        &[
            "--systemd-cgroup",
            "create",
            "--bundle",
            b.dir.to_str().unwrap(),
            "c",
        ],
    );
    assert!(err.contains("systemd cgroup driver"), "{err}");
    assert!(state_left(&env).is_empty());
}

#[test]
fn failing_init_step_is_reported_not_eof() {
    let env = Env::new("init-fail");
    // A device that cannot be created (a directory is in the way) fails inside the init:
    // the error comes back over the sync channel with its cause.
    let err = create_fails(&env, |b| {
        b.config["linux"]["sysctl"] = json!({"net.ipv4.no_such_sysctl": "1"});
        b.save();
    });
    assert!(err.contains("net.ipv4.no_such_sysctl"), "{err}");
}
