//! Restart policies and OOM kills through the CLI: what `wharf inspect`, `ps` and
//! `events` report about containers the shim restarted or the kernel killed.

mod engine_support;

use std::time::Duration;

use engine_support::{Wharf, busybox, wait_until};
use serde_json::Value;

/// A short restart back-off (the shim's default starts at kubelet's 10 s).
fn quick_restarts(name: &str) -> Wharf {
    let mut w = Wharf::new(name);
    w.set_var("WHARF_RESTART_BACKOFF_MS", "20");
    w
}

fn restart_count(c: &Value) -> i64 {
    c["RestartCount"].as_i64().unwrap()
}

fn runs(w: &Wharf, container: &str) -> usize {
    w.ok(&["logs", container]).matches("run\n").count()
}

#[test]
fn restart_on_failure_restarts_a_failing_container_and_no_does_not() {
    let w = quick_restarts("policy-restart");
    let script = "echo run; exit 2";
    w.ok(&[
        "run",
        "-d",
        "--name",
        "never",
        "--restart",
        "no",
        &busybox(),
        "sh",
        "-c",
        script,
    ]);
    w.ok(&[
        "run",
        "-d",
        "--name",
        "flaky",
        "--restart",
        "on-failure",
        &busybox(),
        "sh",
        "-c",
        script,
    ]);
    // The count grows run after run, and inspect keeps following it (it does not stop at
    // the first exit it happens to see between two runs).
    let mut seen = Vec::new();
    for want in [2, 4, 6] {
        let got = wait_until(Duration::from_secs(60), || {
            let c = w.inspect("flaky");
            seen.push(restart_count(&c));
            restart_count(&c) >= want
        });
        let last = &seen[seen.len().saturating_sub(5)..];
        assert!(got, "restart count stuck below {want}: last seen {last:?}");
    }
    let c = w.inspect("flaky");
    assert_ne!(
        c["State"]["Status"], "exited",
        "still being restarted: {c:#}"
    );
    assert!(
        runs(&w, "flaky") as i64 >= restart_count(&c),
        "every run logged"
    );

    // --restart no: one run and a final exit (the shim recorded no pending restart).
    let c = w.inspect("never");
    assert_eq!(c["State"]["Status"], "exited", "{c:#}");
    assert_eq!(c["State"]["ExitCode"], 2, "{c:#}");
    assert_eq!(restart_count(&c), 0, "{c:#}");
    assert_eq!(runs(&w, "never"), 1);

    // Stopping ends the restarts: the last exit is final.
    w.ok(&["stop", "-t", "1", "flaky"]);
    let c = w.inspect("flaky");
    assert_eq!(c["State"]["Status"], "exited", "{c:#}");
    let count = restart_count(&c);
    let logged = runs(&w, "flaky");
    // A later look still says exited with the same count and no new run.
    w.ok(&["run", "--rm", &busybox(), "true"]);
    let c = w.inspect("flaky");
    assert_eq!(c["State"]["Status"], "exited", "{c:#}");
    assert_eq!(restart_count(&c), count);
    assert_eq!(runs(&w, "flaky"), logged);

    w.ok(&["rm", "never", "flaky"]);
    w.assert_clean();
}

#[test]
fn on_failure_leaves_a_success_alone_and_always_restarts_it() {
    let w = quick_restarts("policy-always");
    let script = "echo run; exit 0";
    w.ok(&[
        "run",
        "-d",
        "--name",
        "done",
        "--restart",
        "on-failure",
        &busybox(),
        "sh",
        "-c",
        script,
    ]);
    w.ok(&[
        "run",
        "-d",
        "--name",
        "again",
        "--restart",
        "always",
        &busybox(),
        "sh",
        "-c",
        script,
    ]);
    let got = wait_until(Duration::from_secs(60), || {
        restart_count(&w.inspect("again")) >= 3
    });
    assert!(got, "always did not restart: {:#}", w.inspect("again"));
    let c = w.inspect("done");
    assert_eq!(c["State"]["Status"], "exited", "{c:#}");
    assert_eq!(c["State"]["ExitCode"], 0, "{c:#}");
    assert_eq!(c["State"]["Reason"], "Completed", "{c:#}");
    assert_eq!(restart_count(&c), 0, "{c:#}");
    assert_eq!(runs(&w, "done"), 1);
    // rm -f of a container in its restart loop.
    w.ok(&["rm", "-f", "again", "done"]);
    w.assert_clean();
}

#[test]
fn a_container_waiting_out_its_back_off_is_shown_restarting() {
    let mut w = Wharf::new("policy-backoff");
    // A long back-off, so the window between an exit and the restart is easy to see.
    w.set_var("WHARF_RESTART_BACKOFF_MS", "30000");
    w.ok(&[
        "run",
        "-d",
        "--name",
        "loop",
        "--restart",
        "always",
        &busybox(),
        "sh",
        "-c",
        "exit 3",
    ]);
    let seen = wait_until(Duration::from_secs(30), || {
        w.inspect("loop")["State"]["Restarting"] == Value::Bool(true)
    });
    assert!(seen, "never shown restarting: {}", w.inspect("loop"));
    let c = w.inspect("loop");
    assert_eq!(c["State"]["Status"], "restarting");
    assert_eq!(c["State"]["ExitCode"], 3);
    let ps = w.ok(&["ps", "-a"]);
    assert!(ps.contains("Restarting (3)"), "{ps}");
    // Still the supervisor's: listed as running, stopped and removed like one.
    assert!(
        w.ok(&["ps", "-q"])
            .contains(&c["Id"].as_str().unwrap()[..12])
    );
    w.ok(&["rm", "-f", "loop"]);
    w.assert_clean();
}

#[test]
fn oom_kill_is_reported_by_exit_code_inspect_and_events() {
    let w = Wharf::new("policy-oom");
    w.pull_busybox();
    // The shell builds a 20 MB string in an 8 MiB cgroup.
    let out = w.run(&[
        "run",
        "--name",
        "hog",
        "--memory",
        "8m",
        &busybox(),
        "sh",
        "-c",
        "x=$(head -c 20000000 /dev/zero | tr '\\0' a); echo survived",
    ]);
    assert_eq!(out.code, 137, "{out:?}");
    assert!(!out.stdout.contains("survived"), "{out:?}");
    let c = w.inspect("hog");
    assert_eq!(c["State"]["Status"], "exited", "{c:#}");
    assert_eq!(c["State"]["ExitCode"], 137, "{c:#}");
    assert_eq!(c["State"]["OOMKilled"], true, "{c:#}");
    assert_eq!(c["State"]["Reason"], "OOMKilled", "{c:#}");
    let ps = w.ok(&["ps", "-a"]);
    assert!(ps.contains("Exited (137) OOMKilled"), "{ps}");
    let events: Vec<Value> = w
        .ok(&["events", "--format", "json"])
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let id = c["Id"].as_str().unwrap();
    let of_hog: Vec<&str> = events
        .iter()
        .filter(|e| e["id"] == id)
        .map(|e| e["Action"].as_str().unwrap())
        .collect();
    assert_eq!(of_hog, ["create", "start", "oom", "die"], "{events:#?}");
    let exited = events
        .iter()
        .find(|e| e["id"] == id && e["Action"] == "die")
        .unwrap();
    assert_eq!(exited["Actor"]["Attributes"]["exitCode"], "137", "{exited}");
    assert_eq!(exited["Actor"]["Attributes"]["name"], "hog");

    // Without the limit the same program completes (so the limit did it).
    assert_eq!(
        w.ok(&[
            "run",
            "--rm",
            &busybox(),
            "sh",
            "-c",
            "x=$(head -c 20000000 /dev/zero | tr '\\0' a); echo survived",
        ]),
        "survived\n"
    );
    w.ok(&["rm", "hog"]);
    w.assert_clean();
}

#[test]
fn on_failure_with_a_limit_stops_after_that_many_restarts() {
    let w = quick_restarts("policy-limit");
    w.ok(&[
        "run",
        "-d",
        "--name",
        "twice",
        "--restart",
        "on-failure:2",
        &busybox(),
        "sh",
        "-c",
        "echo run; exit 3",
    ]);
    // Restarted twice, then left exited with its code (docker's on-failure:N).
    assert!(wait_until(Duration::from_secs(30), || {
        let c = w.inspect("twice");
        c["State"]["Status"] == "exited" && restart_count(&c) == 2
    }));
    std::thread::sleep(Duration::from_millis(300));
    let c = w.inspect("twice");
    assert_eq!(
        (restart_count(&c), c["State"]["ExitCode"].as_i64()),
        (2, Some(3)),
        "{c:#}"
    );
    assert_eq!(runs(&w, "twice"), 3);
    // unless-stopped restarts like always; a bad policy or count is refused.
    w.ok(&[
        "run",
        "-d",
        "--name",
        "back",
        "--restart",
        "unless-stopped",
        &busybox(),
        "sh",
        "-c",
        "echo run; exit 0",
    ]);
    assert!(wait_until(Duration::from_secs(30), || restart_count(
        &w.inspect("back")
    ) >= 2));
    for (policy, why) in [
        ("on-failure:x", "max-retries must be a whole number"),
        ("always:3", "only on-failure takes a max-retries"),
        ("sometimes", "invalid --restart \"sometimes\""),
    ] {
        let err = w.fails(125, &["run", "-d", "--restart", policy, &busybox(), "true"]);
        assert!(err.contains(why), "{policy}: {err}");
    }
    let err = w.fails(
        125,
        &["run", "--rm", "--restart", "always", &busybox(), "true"],
    );
    assert!(
        err.contains("conflicting options: --restart and --rm"),
        "{err}"
    );
    w.ok(&["rm", "-f", "twice", "back"]);
    w.assert_clean();
}

#[test]
fn a_detached_rm_container_is_removed_by_its_shim_when_it_exits() {
    let w = Wharf::new("policy-auto-rm");
    w.pull_busybox();
    let id = w.ok(&["run", "-d", "--rm", "--name", "brief", &busybox(), "true"]);
    let id = id.trim();
    // No CLI runs: the shim removes it, and its pod, once it exited.
    let gone = || {
        !w.ok(&["ps", "-a", "-q", "--no-trunc"]).contains(id)
            && !w.ok(&["pod", "ls", "--format", "json"]).contains("brief")
    };
    assert!(
        wait_until(Duration::from_secs(20), gone),
        "{}",
        w.ok(&["ps", "-a"])
    );
    // Stopped, it goes too; and the name is free again.
    w.ok(&[
        "run",
        "-d",
        "--rm",
        "--name",
        "brief",
        &busybox(),
        "sleep",
        "1000",
    ]);
    w.ok(&["stop", "-t", "0", "brief"]);
    assert!(wait_until(Duration::from_secs(20), || !w
        .ok(&["ps", "-a"])
        .contains("brief")));
    let events = w.ok(&["events"]);
    assert!(events.contains("container removed"), "{events}");
    w.assert_clean();
}
