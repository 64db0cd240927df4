//! OCI hooks: order, state on stdin, namespaces they run in, failure semantics, timeouts.

mod common;

use common::*;
use serde_json::{Value, json};
use std::time::Duration;

/// A hook that appends its name to `log` and saves its stdin as `<dir>/<name>.json`.
fn recorder(dir: &std::path::Path, name: &str) -> Value {
    let script = format!(
        "echo {name} >> {d}/log; cat > {d}/{name}.json; readlink /proc/self/ns/net > {d}/{name}.netns",
        d = dir.display()
    );
    json!({"path": "/bin/sh", "args": ["sh", "-c", script]})
}

#[test]
fn all_hooks_run_in_order_with_state() {
    let env = Env::new("hooks-order");
    let dir = env.path().join("hooklog");
    std::fs::create_dir(&dir).unwrap();
    let mut b = env.bundle("c", BASE, &["true"]);
    let start_script = "echo startContainer > /hooklog/start-marker; readlink /proc/self/ns/net > /hooklog/startContainer.netns";
    b.config["hooks"] = json!({
        "prestart": [recorder(&dir, "prestart")],
        "createRuntime": [recorder(&dir, "createRuntime")],
        "createContainer": [recorder(&dir, "createContainer")],
        "startContainer": [{"path": "/bin/sh", "args": ["sh", "-c", start_script]}],
        "poststart": [recorder(&dir, "poststart")],
        "poststop": [recorder(&dir, "poststop")]
    });
    b.config["mounts"].as_array_mut().unwrap().push(
        json!({"destination": "/hooklog", "type": "bind", "source": dir, "options": ["rbind", "rw"]}),
    );
    b.save();
    ok(&env, &["create", "--bundle", b.dir.to_str().unwrap(), "c"]);
    let log = std::fs::read_to_string(dir.join("log")).unwrap();
    assert_eq!(log, "prestart\ncreateRuntime\ncreateContainer\n");
    ok(&env, &["start", "c"]);
    assert!(wait_until(Duration::from_secs(10), || status(&env, "c") == "stopped"));
    assert_eq!(
        std::fs::read_to_string(dir.join("start-marker")).unwrap(),
        "startContainer\n"
    );
    ok(&env, &["delete", "c"]);
    let log = std::fs::read_to_string(dir.join("log")).unwrap();
    assert_eq!(
        log,
        "prestart\ncreateRuntime\ncreateContainer\npoststart\npoststop\n"
    );

    let host_net = std::fs::read_link("/proc/self/ns/net").unwrap();
    let host_net = host_net.to_str().unwrap();
    let ns = |name: &str| {
        std::fs::read_to_string(dir.join(format!("{name}.netns")))
            .unwrap()
            .trim()
            .to_string()
    };
    // Runtime-namespace hooks run in the host's namespaces, container ones in the container's.
    assert_eq!(ns("prestart"), host_net);
    assert_eq!(ns("createRuntime"), host_net);
    assert_eq!(ns("poststop"), host_net);
    assert_ne!(ns("createContainer"), host_net);
    assert_eq!(ns("createContainer"), ns("startContainer"));

    let state = |name: &str| -> Value {
        serde_json::from_str(&std::fs::read_to_string(dir.join(format!("{name}.json"))).unwrap())
            .unwrap()
    };
    for name in [
        "prestart",
        "createRuntime",
        "createContainer",
        "poststart",
        "poststop",
    ] {
        let s = state(name);
        assert_eq!(s["id"], "c", "{name}: {s}");
        assert_eq!(s["bundle"], b.dir.to_str().unwrap(), "{name}");
        assert!(s["ociVersion"].is_string(), "{name}");
    }
    assert_eq!(state("createRuntime")["status"], "creating");
    assert!(state("createRuntime")["pid"].as_i64().unwrap() > 1);
    assert_eq!(
        state("createRuntime")["pid"],
        state("createContainer")["pid"]
    );
    assert_eq!(state("poststart")["status"], "running");
    assert_eq!(state("poststop")["status"], "stopped");
}

#[test]
fn failing_create_runtime_hook_fails_create_and_cleans_up() {
    let env = Env::new("hook-fail");
    let mut b = env.bundle("c", BASE, &["true"]);
    b.config["hooks"] = json!({"createRuntime": [{"path": "/bin/sh", "args": ["sh", "-c", "echo broken >&2; exit 3"]}]});
    b.save();
    let err = fails(&env, &["create", "--bundle", b.dir.to_str().unwrap(), "c"]);
    assert!(
        err.contains("createRuntime hook /bin/sh")
            && err.contains("exit status 3")
            && err.contains("broken"),
        "{err}"
    );
    assert!(state_left(&env).is_empty());
    assert!(cgroups_left(&env).is_empty());
}

#[test]
fn failing_start_container_hook_fails_start() {
    let env = Env::new("hook-start-fail");
    let mut b = env.bundle("c", BASE, &["true"]);
    b.config["hooks"] = json!({"startContainer": [{"path": "/bin/false"}]});
    b.save();
    ok(&env, &["create", "--bundle", b.dir.to_str().unwrap(), "c"]);
    let err = fails(&env, &["start", "c"]);
    assert!(err.contains("startContainer hook /bin/false"), "{err}");
    assert!(wait_until(Duration::from_secs(10), || status(&env, "c") == "stopped"));
    ok(&env, &["delete", "c"]);
    assert!(cgroups_left(&env).is_empty());
}

#[test]
fn failing_poststart_and_poststop_hooks_only_warn() {
    let env = Env::new("hook-warn");
    let mut b = env.bundle("c", BASE, &["sleep", "100"]);
    b.config["hooks"] = json!({
        "poststart": [{"path": "/bin/false"}],
        "poststop": [{"path": "/bin/false"}]
    });
    b.save();
    ok(&env, &["create", "--bundle", b.dir.to_str().unwrap(), "c"]);
    let out = rt_out(&env, &["start", "c"]);
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("poststart hook /bin/false failed"));
    assert_eq!(status(&env, "c"), "running");
    let out = rt_out(&env, &["delete", "-f", "c"]);
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("poststop hook /bin/false failed"));
    assert!(state_left(&env).is_empty());
}

#[test]
fn hook_timeout() {
    let env = Env::new("hook-timeout");
    let mut b = env.bundle("c", BASE, &["true"]);
    b.config["hooks"] =
        json!({"prestart": [{"path": "/bin/sleep", "args": ["sleep", "30"], "timeout": 1}]});
    b.save();
    let err = fails(&env, &["create", "--bundle", b.dir.to_str().unwrap(), "c"]);
    assert!(
        err.contains("prestart hook /bin/sleep") && err.contains("timed out after 1s"),
        "{err}"
    );
    assert!(state_left(&env).is_empty());
}

#[test]
fn hook_args_and_env() {
    let env = Env::new("hook-env");
    let out_file = env.path().join("out");
    let mut b = env.bundle("c", BASE, &["true"]);
    b.config["hooks"] = json!({"prestart": [{
        "path": "/bin/sh",
        "args": ["my-arg0", "-c", format!("echo \"$(tr '\\0' ' ' < /proc/$$/cmdline | cut -d' ' -f1) $0 $HOOKVAR\" > {}; env | wc -l >> {}", out_file.display(), out_file.display()), "first"],
        "env": ["HOOKVAR=value"]
    }]});
    b.save();
    ok(&env, &["create", "--bundle", b.dir.to_str().unwrap(), "c"]);
    let out = std::fs::read_to_string(&out_file).unwrap();
    let mut lines = out.lines();
    assert_eq!(lines.next(), Some("my-arg0 first value"));
    // Only the hook's env (plus what sh itself exports: PWD, SHLVL...) is there.
    assert!(lines.next().unwrap().trim().parse::<u32>().unwrap() <= 4);
    ok(&env, &["delete", "--force", "c"]);
}
