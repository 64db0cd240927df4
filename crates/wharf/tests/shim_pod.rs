//! Pods in the shim: restart policies with back-off, init containers, OOM kills.

mod shim_support;

use std::time::Duration;

use serde_json::json;
use shim_support::*;

fn short_backoff() -> Backoff {
    Backoff {
        initial_ms: 20,
        max_ms: 80,
        first_immediate: false,
    }
}

/// A config edit that binds the host directory `dir` at /shared.
fn shared(dir: &std::path::Path) -> impl FnOnce(&mut serde_json::Value) {
    let dir = dir.to_path_buf();
    move |c| {
        c["mounts"]
            .as_array_mut()
            .unwrap()
            .push(json!({"destination": "/shared", "type": "bind", "source": dir, "options": ["rbind", "rw"]}));
    }
}

#[test]
fn restart_policies_with_backoff() {
    let pod = Pod::new("shim-restart");
    let mut failing = pod.spec("failing", &["sh", "-c", "echo run; exit 1"]);
    failing.restart = RestartPolicy::OnFailure;
    failing.backoff = short_backoff();
    let mut done = pod.spec("done", &["true"]);
    done.restart = RestartPolicy::OnFailure;
    done.backoff = short_backoff();
    let mut always = pod.spec("always", &["true"]);
    always.restart = RestartPolicy::Always;
    always.backoff = short_backoff();
    let mut never = pod.spec("never", &["false"]);
    never.backoff = short_backoff();
    for s in [&failing, &done, &always, &never] {
        pod.run(s);
    }
    let restarts = |id: &str| pod.shim.container(id).unwrap().restart_count;
    assert!(
        wait_until(Duration::from_secs(30), || restarts("failing") >= 3
            && restarts("always") >= 3),
        "no restarts: {:?}",
        pod.shim.state().unwrap()
    );
    // Each run logged once, appended to the same log.
    assert!(pod.log_lines("failing").len() >= 3);
    // Counted on disk too.
    assert!(
        pod.shim
            .records()
            .status("failing")
            .unwrap()
            .unwrap()
            .restart_count
            >= 3
    );
    // A successful exit under OnFailure, and Never, stay exited.
    assert_eq!(pod.wait("done").exit_code, 0);
    assert_eq!(pod.wait("never").exit_code, 1);
    for id in ["done", "never"] {
        let c = pod.shim.container(id).unwrap();
        assert_eq!(
            (c.status, c.restart_count, c.restart_pending),
            (Status::Exited, 0, false)
        );
    }
    // Stop ends the restarts for good.
    for id in ["failing", "always"] {
        pod.shim
            .stop(id, libc::SIGKILL, Duration::from_secs(1))
            .unwrap();
        wait_until(Duration::from_secs(30), || {
            let c = pod.shim.container(id).unwrap();
            c.status == Status::Exited && !c.restart_pending
        });
        let count = restarts(id);
        let c = pod.shim.container(id).unwrap();
        assert_eq!(
            (c.status, c.restart_pending),
            (Status::Exited, false),
            "{id}"
        );
        // Several back-off periods later, still the same count.
        std::thread::sleep(Duration::from_millis(300));
        assert_eq!(restarts(id), count, "{id} restarted after stop");
    }
}

/// kubelet's back-off: a container that crashes is restarted at once the first time,
/// and only then after the delays (CrashLoopBackOff is for repeats).
#[test]
fn the_first_restart_of_a_kubelet_backoff_is_at_once() {
    let pod = Pod::new("shim-backoff-first");
    let mut s = pod.spec("c", &["sh", "-c", "echo run; exit 1"]);
    s.restart = RestartPolicy::Always;
    s.backoff = Backoff {
        initial_ms: 1500,
        max_ms: 1500,
        first_immediate: true,
    };
    let started = std::time::Instant::now();
    pod.run(&s);
    // The second run comes well before the first delay would have ended.
    assert!(wait_until(Duration::from_secs(10), || {
        pod.shim.container("c").unwrap().restart_count >= 1
    }));
    assert!(
        started.elapsed() < Duration::from_millis(1500),
        "the first restart waited: {:?}",
        started.elapsed()
    );
    // The third waits out the delay.
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(pod.shim.container("c").unwrap().restart_count, 1);
    assert!(wait_until(Duration::from_secs(10), || {
        pod.shim.container("c").unwrap().restart_count >= 2
    }));
    pod.shim.stop("c", libc::SIGKILL, Duration::ZERO).unwrap();
}

#[test]
fn backoff_doubles_up_to_its_maximum() {
    let pod = Pod::new("shim-backoff");
    let mut s = pod.spec("c", &["sh", "-c", "echo run; exit 1"]);
    s.restart = RestartPolicy::Always;
    s.backoff = Backoff {
        initial_ms: 100,
        max_ms: 400,
        first_immediate: false,
    };
    pod.run(&s);
    // Each run logs one line; the log's timestamps tell when the runs were.
    let entries = || {
        let mut out = Vec::new();
        wharf_shim::logs::read(
            &pod.log_path("c"),
            &Default::default(),
            &mut |e| {
                out.push(e.instant().unwrap());
                true
            },
            &mut || false,
        )
        .unwrap();
        out
    };
    assert!(wait_until(Duration::from_secs(30), || entries().len() >= 5));
    pod.shim.stop("c", libc::SIGKILL, Duration::ZERO).unwrap();
    let runs = entries();
    let gaps: Vec<Duration> = runs
        .windows(2)
        .map(|w| w[1].duration_since(w[0]).unwrap())
        .collect();
    // The delays are lower bounds: 100, 200, 400, 400 ms (not timed assertions: a slow
    // machine only makes the gaps longer).
    for (gap, min) in gaps.iter().zip([100, 200, 400, 400]) {
        assert!(*gap >= Duration::from_millis(min), "gaps {gaps:?}");
    }
    assert!(pod.shim.container("c").unwrap().restart_count >= 4);
}

#[test]
fn init_containers_run_in_order_before_the_app_containers() {
    let pod = Pod::new("shim-init-order");
    let dir = pod.env.path().join("shared");
    std::fs::create_dir(&dir).unwrap();
    let step = |id: &str, script: &str| pod.spec_with(id, &["sh", "-c", script], shared(&dir));
    let plan = PodPlan {
        disk_limits: Vec::new(),
        init: vec![
            step("init1", "sleep 0.1; echo init1 >> /shared/order"),
            step("init2", "echo init2 >> /shared/order"),
        ],
        containers: vec![
            step("app1", "echo app >> /shared/order; sleep 1000"),
            step("app2", "echo app >> /shared/order; sleep 1000"),
        ],
    };
    pod.shim.run_pod(&plan).unwrap();
    assert!(wait_until(Duration::from_secs(30), || {
        let st = pod.shim.state().unwrap();
        st.phase == PodPhase::Running
            && st
                .containers
                .iter()
                .filter(|c| c.status == Status::Running)
                .count()
                == 2
    }));
    wait_until(Duration::from_secs(30), || {
        std::fs::read_to_string(dir.join("order"))
            .unwrap_or_default()
            .lines()
            .count()
            == 4
    });
    let order = std::fs::read_to_string(dir.join("order")).unwrap();
    assert_eq!(order, "init1\ninit2\napp\napp\n");
    let st = pod.shim.state().unwrap();
    let init: Vec<(&str, bool, i32)> = st
        .containers
        .iter()
        .filter(|c| c.init)
        .map(|c| (c.id.as_str(), c.init, c.exit.as_ref().unwrap().exit_code))
        .collect();
    assert_eq!(init, vec![("init1", true, 0), ("init2", true, 0)]);
    assert_eq!(
        pod.shim.records().pod().unwrap().unwrap().phase,
        PodPhase::Running
    );
}

#[test]
fn a_failing_init_container_stops_the_pod() {
    let pod = Pod::new("shim-init-fail");
    let plan = PodPlan {
        disk_limits: Vec::new(),
        init: vec![
            pod.spec("ok", &["true"]),
            pod.spec("bad", &["sh", "-c", "exit 3"]),
        ],
        containers: vec![pod.spec("app", &["sleep", "1000"])],
    };
    pod.shim.run_pod(&plan).unwrap();
    assert!(wait_until(Duration::from_secs(30), || {
        pod.shim.state().unwrap().phase == PodPhase::Failed
    }));
    let st = pod.shim.state().unwrap();
    let failure = st.failure.unwrap();
    assert!(
        failure.contains("init container bad failed: exit code 3"),
        "{failure}"
    );
    let app = st.containers.iter().find(|c| c.id == "app").unwrap();
    assert_eq!((app.status, app.pid), (Status::Waiting, None));
    assert!(
        !pod.env.root.join("app").exists(),
        "the app container was never created"
    );
    // Recorded for an engine that comes later.
    let rec = pod.shim.records().pod().unwrap().unwrap();
    assert_eq!(rec.phase, PodPhase::Failed);
    assert!(rec.failure.unwrap().contains("bad"));
    // Waiting for it says it will never run.
    let e = pod
        .shim
        .wait("app", Some(Duration::from_secs(10)))
        .unwrap_err();
    assert_eq!(e.kind(), Some(ErrorKind::State), "{e}");
    // A second plan is refused.
    let e = pod.shim.run_pod(&PodPlan::default()).unwrap_err();
    assert_eq!(e.kind(), Some(ErrorKind::Exists));
}

#[test]
fn a_failing_init_container_is_retried_under_on_failure() {
    let pod = Pod::new("shim-init-retry");
    let dir = pod.env.path().join("shared");
    std::fs::create_dir(&dir).unwrap();
    // Fails on its first two runs.
    let mut flaky = pod.spec_with(
        "flaky",
        &[
            "sh",
            "-c",
            "echo x >> /shared/runs; [ $(wc -l < /shared/runs) -ge 3 ]",
        ],
        shared(&dir),
    );
    flaky.restart = RestartPolicy::Always;
    flaky.backoff = short_backoff();
    let plan = PodPlan {
        disk_limits: Vec::new(),
        init: vec![flaky],
        containers: vec![pod.spec("app", &["sleep", "1000"])],
    };
    pod.shim.run_pod(&plan).unwrap();
    assert!(wait_until(Duration::from_secs(30), || {
        pod.shim.container("app").unwrap().status == Status::Running
    }));
    let init = pod.shim.container("flaky").unwrap();
    // Init containers are not restarted after success, even under Always.
    assert_eq!((init.restart_count, init.exit.unwrap().exit_code), (2, 0));
    assert_eq!(pod.shim.state().unwrap().phase, PodPhase::Running);
}

#[test]
fn an_oom_kill_is_recorded() {
    let pod = Pod::new("shim-oom");
    let spec = pod.spec_with("hog", &["sh", "-c", "echo start; tail /dev/zero"], |c| {
        c["linux"]["resources"]["memory"] =
            json!({"limit": 16 * 1024 * 1024, "swap": 16 * 1024 * 1024});
    });
    pod.run(&spec);
    let e = pod.wait("hog");
    assert!(e.oom_killed, "{e:?}");
    assert_eq!(e.reason, "OOMKilled");
    assert_eq!(e.signal, Some(libc::SIGKILL));
    assert!(pod.shim.records().exit("hog").unwrap().unwrap().oom_killed);
    // A container that simply exits is not.
    let fine = pod.spec_with("fine", &["true"], |c| {
        c["linux"]["resources"]["memory"] = json!({"limit": 16 * 1024 * 1024});
    });
    pod.run(&fine);
    assert!(!pod.wait("fine").oom_killed);
}
