//! The shim runs containers: create/start/wait with exit codes and signals, kill, stop,
//! delete, state, exit records on disk.

mod shim_support;

use shim_support::*;

#[test]
fn exit_codes_and_signals_are_recorded() {
    let pod = Pod::new("shim-exit");
    let ok = pod.spec("ok", &["sh", "-c", "echo hello; exit 0"]);
    let bad = pod.spec("bad", &["sh", "-c", "exit 3"]);
    let sig = pod.spec("sig", &["sleep", "100"]);
    for s in [&ok, &bad, &sig] {
        pod.run(s);
    }
    // PID 1 of a pid namespace ignores signals it has no handler for, SIGKILL aside.
    pod.shim.kill("sig", libc::SIGKILL, false).unwrap();
    let e = pod.wait("ok");
    assert_eq!(
        (e.exit_code, e.signal, e.reason.as_str()),
        (0, None, "Completed")
    );
    assert!(!e.oom_killed);
    let e = pod.wait("bad");
    assert_eq!((e.exit_code, e.reason.as_str()), (3, "Error"));
    let e = pod.wait("sig");
    assert_eq!((e.exit_code, e.signal), (137, Some(libc::SIGKILL)));
    // On disk, as the waiter was told.
    let sd = pod.shim.records();
    assert_eq!(sd.exit("bad").unwrap().unwrap().exit_code, 3);
    assert_eq!(sd.status("bad").unwrap().unwrap().status, Status::Exited);
    // A second wait answers at once with the same record.
    assert_eq!(pod.wait("bad").exit_code, 3);
    assert_eq!(pod.log_lines("ok"), vec!["hello"]);
    let st = pod.shim.state().unwrap();
    assert_eq!(st.containers.len(), 3);
    assert!(st.containers.iter().all(|c| c.status == Status::Exited));
}

#[test]
fn the_exit_record_is_on_disk_when_the_waiter_hears() {
    let pod = Pod::new("shim-exit-durable");
    let spec = pod.spec(
        "c",
        &[
            "sh",
            "-c",
            "while [ ! -e /go ]; do sleep 0.02; done; exit 6",
        ],
    );
    pod.run(&spec);
    let sd = pod.shim.records();
    assert_eq!(sd.exit("c").unwrap(), None);
    assert_eq!(sd.status("c").unwrap().unwrap().status, Status::Running);
    let waiter = {
        let shim = pod.shim.clone();
        std::thread::spawn(move || {
            let e = shim
                .wait("c", Some(std::time::Duration::from_secs(60)))
                .unwrap();
            // Read right after the answer: the shim writes before it answers.
            let on_disk = shim.records().exit("c").unwrap();
            (e, on_disk)
        })
    };
    std::fs::write(spec.bundle.join("rootfs/go"), "").unwrap();
    let (e, on_disk) = waiter.join().unwrap();
    assert_eq!(e.exit_code, 6);
    assert_eq!(on_disk, Some(e));
}

#[test]
fn stop_delete_and_errors() {
    let pod = Pod::new("shim-stop-delete");
    // Handles SIGTERM: exits with its own code.
    let polite = pod.spec(
        "polite",
        &[
            "sh",
            "-c",
            "trap 'exit 7' TERM; while :; do sleep 0.05; done",
        ],
    );
    // PID 1 without a handler ignores SIGTERM: SIGKILL after the grace period.
    let stubborn = pod.spec("stubborn", &["sleep", "1000"]);
    pod.run(&polite);
    pod.run(&stubborn);
    // Give the shell time to install its trap: wait until it sleeps in its loop.
    assert!(wait_until(std::time::Duration::from_secs(20), || {
        let pid = pod.shim.container("polite").unwrap().pid.unwrap();
        std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children"))
            .is_ok_and(|c| !c.trim().is_empty())
    }));
    let e = pod.shim.delete("polite", false).unwrap_err();
    assert_eq!(e.kind(), Some(ErrorKind::State));
    assert!(e.to_string().contains("polite is running"), "{e}");
    pod.shim
        .stop("polite", libc::SIGTERM, std::time::Duration::from_secs(60))
        .unwrap();
    pod.shim
        .stop(
            "stubborn",
            libc::SIGTERM,
            std::time::Duration::from_millis(100),
        )
        .unwrap();
    assert_eq!(pod.wait("polite").exit_code, 7);
    let e = pod.wait("stubborn");
    assert_eq!((e.exit_code, e.signal), (137, Some(9)));
    pod.shim.delete("polite", false).unwrap();
    assert!(!pod.state_dir.join("containers/polite").exists());
    assert!(
        !pod.env.root.join("polite").exists(),
        "runtime state removed"
    );
    // Force-delete of a running container.
    let victim = pod.spec("victim", &["sleep", "1000"]);
    pod.run(&victim);
    let pid = pod.shim.container("victim").unwrap().pid.unwrap();
    pod.shim.delete("victim", true).unwrap();
    assert!(!alive(pid));
    assert!(pod.shim.container("victim").is_err());
    // Errors name the container.
    let e = pod.shim.start("nope").unwrap_err();
    assert_eq!(e.kind(), Some(ErrorKind::NotFound));
    assert!(e.to_string().contains("container nope"), "{e}");
    let e = pod.shim.create(&stubborn).unwrap_err();
    assert_eq!(e.kind(), Some(ErrorKind::Exists));
    let mut broken = pod.spec("broken", &["true"]);
    broken.bundle = pod.env.path().join("no-such-bundle");
    let e = pod.shim.create(&broken).unwrap_err();
    assert_eq!(e.kind(), Some(ErrorKind::Runtime));
    assert!(e.to_string().contains("create container broken"), "{e}");
    let e = pod.shim.start("stubborn").unwrap_err();
    assert_eq!(e.kind(), Some(ErrorKind::State));
    // A program that does not exist: create fails and leaves nothing.
    let missing = pod.spec("missing", &["/no/such/program"]);
    let e = pod.shim.create(&missing).unwrap_err();
    assert!(e.to_string().contains("/no/such/program"), "{e}");
    assert!(pod.shim.container("missing").is_err());
    assert!(!pod.env.root.join("missing").exists());
    // A failing startContainer hook: start fails, the exit record says why.
    let hooked = pod.spec_with("hooked", &["true"], |c| {
        c["hooks"] = serde_json::json!({"startContainer": [{"path": "/bin/false"}]});
    });
    pod.shim.create(&hooked).unwrap();
    let e = pod.shim.start("hooked").unwrap_err();
    assert!(e.to_string().contains("start container hooked"), "{e}");
    let exit = pod.wait("hooked");
    assert_eq!((exit.reason.as_str(), exit.exit_code), ("StartError", 128));
    assert!(exit.message.unwrap().contains("start container hooked"));
}

#[test]
fn shutdown_waits_for_running_containers_then_exits() {
    let pod = Pod::new("shim-shutdown");
    let spec = pod.spec(
        "c",
        &["sh", "-c", "while [ ! -e /go ]; do sleep 0.02; done"],
    );
    pod.run(&spec);
    let created = pod.spec("idle", &["true"]);
    pod.shim.create(&created).unwrap();
    let shim_pid = pod.shim_pid();
    pod.shim.shutdown().unwrap();
    // Still serving while a container runs, but not accepting new ones.
    let e = pod.shim.create(&pod.spec("late", &["true"])).unwrap_err();
    assert_eq!(e.kind(), Some(ErrorKind::ShuttingDown));
    std::fs::write(spec.bundle.join("rootfs/go"), "").unwrap();
    assert!(wait_until(std::time::Duration::from_secs(30), || !alive(
        shim_pid
    )));
    assert!(!pod.state_dir.join("shim.sock").exists());
    assert!(!pod.state_dir.join("shim.pid").exists());
    let e = wharf_shim::ShimClient::connect(&pod.state_dir).unwrap_err();
    assert!(e.is_not_running(), "{e}");
    // The exit it saw is on disk; the created container was deleted.
    let sd = pod.shim.records();
    assert_eq!(sd.exit("c").unwrap().unwrap().exit_code, 0);
    assert!(!pod.env.root.join("idle").exists());
}

#[test]
fn a_second_shim_for_the_same_state_dir_is_refused() {
    let pod = Pod::new("shim-twice");
    let mut opts = SpawnOptions::new("again", &pod.state_dir, &pod.env.root);
    opts.binary = env!("CARGO_BIN_EXE_wharf").into();
    let e = wharf_shim::spawn(&opts).unwrap_err();
    assert!(e.to_string().contains("already serves"), "{e}");
    assert!(e.to_string().contains("again"), "{e}");
    pod.shim.ping().unwrap();
}

/// Reads events until `pred` holds for one (or panics after 20 s), returning those read.
fn events_until(
    events: &mut wharf_shim::Events,
    mut pred: impl FnMut(&Event) -> bool,
) -> Vec<Event> {
    events
        .set_read_timeout(Some(std::time::Duration::from_secs(20)))
        .unwrap();
    let mut seen = Vec::new();
    loop {
        let e = events
            .next_event()
            .unwrap_or_else(|e| panic!("no event after {seen:?}: {e}"))
            .unwrap_or_else(|| panic!("the stream ended after {seen:?}"));
        let done = pred(&e);
        seen.push(e);
        if done {
            return seen;
        }
    }
}

#[test]
fn subscribers_hear_each_step_as_it_happens() {
    let pod = Pod::new("shim-events");
    let mut events = pod.shim.subscribe().unwrap();
    // A subscriber that goes away leaves the others (and the shim) alone.
    drop(pod.shim.subscribe().unwrap());
    let mut spec = pod.spec(
        "c",
        &[
            "sh",
            "-c",
            "while [ ! -e /go ]; do sleep 0.02; done; exit 3",
        ],
    );
    spec.restart = RestartPolicy::OnFailure;
    spec.backoff = Backoff {
        initial_ms: 300,
        max_ms: 300,
        first_immediate: false,
    };
    let pid = pod.shim.create(&spec).unwrap();
    pod.shim.start("c").unwrap();
    let seen = events_until(&mut events, |e| matches!(e.kind, EventKind::Started { .. }));
    let kinds: Vec<&EventKind> = seen.iter().map(|e| &e.kind).collect();
    assert_eq!(
        kinds,
        vec![
            &EventKind::Created {
                id: "c".into(),
                pid
            },
            &EventKind::Started {
                id: "c".into(),
                pid
            }
        ]
    );
    // The exit arrives as it happens: no request asks for it.
    std::fs::write(spec.bundle.join("rootfs/go"), "").unwrap();
    let t = std::time::Instant::now();
    let seen = events_until(&mut events, |e| matches!(e.kind, EventKind::Exited { .. }));
    assert!(
        t.elapsed() < std::time::Duration::from_secs(5),
        "{:?}",
        t.elapsed()
    );
    let EventKind::Exited { id, exit } = &seen.last().unwrap().kind else {
        unreachable!()
    };
    assert_eq!((id.as_str(), exit.exit_code), ("c", 3));
    // ... and is on disk already.
    assert_eq!(pod.shim.records().exit("c").unwrap().as_ref(), Some(exit));
    // (The next run waits again; the rootfs is read-only to it.)
    std::fs::remove_file(spec.bundle.join("rootfs/go")).unwrap();
    // The restart policy brings it back: restarted, created, started.
    let seen = events_until(&mut events, |e| matches!(e.kind, EventKind::Started { .. }));
    assert!(
        matches!(
            seen[0].kind,
            EventKind::Restarted {
                restart_count: 1,
                ..
            }
        ),
        "{seen:?}"
    );
    assert!(
        matches!(seen[1].kind, EventKind::Created { .. }),
        "{seen:?}"
    );
    // One call tells the whole status.
    let info = pod.shim.container("c").unwrap();
    assert_eq!(info.status, Status::Running);
    assert_eq!(info.restart_count, 1);
    assert!(
        info.created_at.is_some() && info.started_at.is_some(),
        "{info:?}"
    );
    assert_eq!(info.log.as_deref(), Some(pod.log_path("c").as_path()));
    assert_eq!(info.exit.as_ref().map(|e| e.exit_code), Some(3));
    let e = pod.shim.container("nope").unwrap_err();
    assert!(e.to_string().contains("nope"), "{e}");
    // Stopping for good: one more exit, no restart.
    pod.shim
        .stop("c", libc::SIGKILL, std::time::Duration::from_secs(1))
        .unwrap();
    let seen = events_until(&mut events, |e| matches!(e.kind, EventKind::Exited { .. }));
    assert_eq!(seen.len(), 1, "{seen:?}");
    // Every event carries its time.
    assert!(seen[0].time.ends_with('Z'), "{seen:?}");
}
