//! The shim outlives its spawner; a killed shim is cleaned up by `reap_dead_shim`; the
//! pod's minimal init reaps zombies in a shared pid namespace.

mod shim_support;

use std::io::BufRead;
use std::time::Duration;

use shim_support::*;

/// When run with WHARF_SHIM_SPAWNER=<state dir>:<runtime root>:<bundle>, this "test" is the
/// spawner: it starts a shim and a container, says so, and waits to be killed.
#[test]
#[ignore = "helper process of the_shim_survives_its_spawner_being_killed"]
fn spawner_helper() {
    let Ok(spec) = std::env::var("WHARF_SHIM_SPAWNER") else {
        return;
    };
    let mut parts = spec.split(':');
    let (state, root, bundle) = (
        parts.next().unwrap(),
        parts.next().unwrap(),
        parts.next().unwrap(),
    );
    let mut opts = SpawnOptions::new("orphan", state, root);
    opts.binary = env!("CARGO_BIN_EXE_wharf").into();
    let shim = wharf_shim::spawn(&opts).unwrap();
    let c = ContainerSpec {
        id: "c".into(),
        bundle: bundle.into(),
        stdio: StdioSpec::log(format!("{state}/c.log")),
        restart: RestartPolicy::Never,
        backoff: Backoff::default(),
        init: false,
        max_restarts: None,
        exit_command: Vec::new(),
        health: None,
        kube: None,
        sub_paths: Vec::new(),
    };
    shim.create(&c).unwrap();
    shim.start("c").unwrap();
    println!("SPAWNED");
    std::thread::sleep(Duration::from_secs(600));
}

#[test]
fn the_shim_survives_its_spawner_being_killed() {
    let env = Env::new("shim-orphan");
    let state = env.path().join("pod");
    let _guard = ShimGuard(state.clone(), env.root.clone());
    let bundle = env.bundle(
        "c",
        BASE,
        &[
            "sh",
            "-c",
            "while [ ! -e /go ]; do sleep 0.02; done; exit 2",
        ],
    );
    let mut child = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "spawner_helper",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(
            "WHARF_SHIM_SPAWNER",
            format!(
                "{}:{}:{}",
                state.display(),
                env.root.display(),
                bundle.dir.display()
            ),
        )
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = std::io::BufReader::new(child.stdout.take().unwrap()).lines();
    assert!(
        lines.any(|l| l.unwrap().contains("SPAWNED")),
        "the spawner failed"
    );
    child.kill().unwrap();
    child.wait().unwrap();
    let shim = ShimClient::connect(&state).expect("the shim outlives its spawner");
    // Detached: its own session, not the spawner's child any more.
    let shim_pid = shim.records().shim_pid().unwrap().0;
    let stat = std::fs::read_to_string(format!("/proc/{shim_pid}/stat")).unwrap();
    let fields: Vec<&str> = stat.rsplit_once(") ").unwrap().1.split(' ').collect();
    let (ppid, sid): (i32, i32) = (fields[1].parse().unwrap(), fields[3].parse().unwrap());
    // SAFETY: getsid(0) has no preconditions.
    let our_sid = unsafe { libc::getsid(0) };
    assert_ne!(sid, our_sid, "the shim runs in a session of its own");
    assert_ne!(sid, child.id() as i32);
    assert_ne!(ppid, child.id() as i32);
    let c = shim.container("c").unwrap();
    assert_eq!(c.status, Status::Running);
    std::fs::write(bundle.rootfs().join("go"), "").unwrap();
    assert_eq!(
        shim.wait("c", Some(Duration::from_secs(60)))
            .unwrap()
            .exit_code,
        2
    );
    shim.shutdown().unwrap();
    assert!(wait_until(Duration::from_secs(30), || !alive(shim_pid)));
}

#[test]
fn a_killed_shim_is_reaped_and_its_containers_cleaned_up() {
    let (pod, pid) = pod_running_and_finished("shim-killed");
    let created = pod.spec("created", &["true"]);
    pod.shim.create(&created).unwrap();
    // Refused while the shim lives.
    let e = wharf_shim::reap_dead_shim(&pod.state_dir, &pod.env.root).unwrap_err();
    assert!(e.to_string().contains("still running"), "{e}");
    kill_the_shim(&pod);
    let e = pod.shim.state().unwrap_err();
    assert!(e.is_not_running(), "{e}");
    // The containers kept running meanwhile.
    assert!(alive(pid));
    let mut reaped = wharf_shim::reap_dead_shim(&pod.state_dir, &pod.env.root).unwrap();
    assert_eq!(
        summary(&mut reaped),
        vec![
            ("created", true, "ShimDied", 137),
            ("finished", false, "Error", 3),
            ("running", true, "ShimDied", 137),
        ]
    );
    assert_message(&reaped[2], "shim died");
    assert!(!alive(pid), "the container was killed");
    // Nothing is left: runtime state, cgroups, socket; the records say what happened.
    assert_gone(&pod, &["running", "finished", "created"]);
    assert!(!pod.state_dir.join("shim.sock").exists());
    let sd = pod.shim.records();
    assert_eq!(sd.exit("running").unwrap().unwrap().reason, "ShimDied");
    assert_eq!(
        sd.status("running").unwrap().unwrap().status,
        Status::Exited
    );
}

/// The records are not synced: after a crash of the machine a runtime directory on a disk
/// may hold them torn. Torn here by hand, they count as absent, and the reap still cleans
/// up and records an exit for every container.
#[test]
fn a_dead_shim_whose_records_are_torn_is_reaped() {
    let (pod, pid) = pod_running_and_finished("shim-torn");
    kill_the_shim(&pod);
    let records = pod.state_dir.join("containers");
    std::fs::write(pod.state_dir.join("pod.json"), "").unwrap();
    std::fs::write(records.join("running/status.json"), "").unwrap();
    std::fs::write(records.join("finished/exit.json"), "{\"exit_code\":").unwrap();
    let sd = pod.shim.records();
    assert!(
        sd.status("running").is_err(),
        "the status record reads as torn"
    );
    let mut reaped = wharf_shim::reap_dead_shim(&pod.state_dir, &pod.env.root).unwrap();
    assert_eq!(
        summary(&mut reaped),
        vec![
            ("finished", false, "ShimDied", 255),
            ("running", true, "ShimDied", 137),
        ]
    );
    assert_message(&reaped[0], "unreadable; its exit status is unknown");
    assert_message(&reaped[1], "unreadable; the container was killed");
    assert!(!alive(pid), "the container was killed");
    assert_gone(&pod, &["running", "finished"]);
    for id in ["running", "finished"] {
        // Written again whole.
        assert_eq!(sd.exit(id).unwrap().unwrap().reason, "ShimDied");
        assert_eq!(sd.status(id).unwrap().unwrap().status, Status::Exited);
    }
}

/// The runtime's state.json is not synced either: torn, the reap finds the container's
/// cgroup through the bundle its spec record names, empties and removes it, and removes
/// the runtime's state directory, where `delete --force` alone fails on the file. A
/// container found running in that cgroup counts as killed, though its status record,
/// torn too, named no process.
#[test]
fn a_dead_shim_whose_runtime_state_is_torn_is_reaped() {
    let (pod, pid) = pod_running_and_finished("shim-torn-rt");
    kill_the_shim(&pod);
    for id in ["running", "finished"] {
        std::fs::write(pod.env.root.join(id).join("state.json"), "{\"id\":").unwrap();
    }
    // Its status record torn too, "running" is known to run only through its cgroup.
    let records = pod.state_dir.join("containers");
    std::fs::write(records.join("running/status.json"), "").unwrap();
    let rt = wharf_runtime::Runtime::new(&pod.env.root);
    let plain = rt.delete("running", true).unwrap_err().to_string();
    assert!(
        plain.starts_with("corrupt state file") && plain.contains("state.json"),
        "{plain}"
    );
    let mut reaped = wharf_shim::reap_dead_shim(&pod.state_dir, &pod.env.root).unwrap();
    assert_eq!(
        summary(&mut reaped),
        // The finished one keeps the exit its shim recorded.
        vec![
            ("finished", false, "Error", 3),
            ("running", true, "ShimDied", 137),
        ]
    );
    assert_message(&reaped[1], "unreadable; the container was killed");
    assert!(!alive(pid), "the container was killed");
    assert_gone(&pod, &["running", "finished"]);
}

/// A pod whose container "running" sleeps and whose container "finished" has exited 3,
/// and the pid of "running".
fn pod_running_and_finished(name: &str) -> (Pod, i32) {
    let pod = Pod::new(name);
    let running = pod.spec("running", &["sleep", "1000"]);
    let finished = pod.spec("finished", &["sh", "-c", "exit 3"]);
    pod.run(&running);
    pod.run(&finished);
    assert_eq!(pod.wait("finished").exit_code, 3);
    let pid = pod.shim.container("running").unwrap().pid.unwrap();
    (pod, pid)
}

/// SIGKILL the pod's shim and wait until it is gone.
fn kill_the_shim(pod: &Pod) {
    let shim_pid = pod.shim_pid();
    // SAFETY: killing the shim this test started.
    unsafe { libc::kill(shim_pid, libc::SIGKILL) };
    assert!(wait_until(Duration::from_secs(10), || !alive(shim_pid)));
}

/// Neither runtime state nor a cgroup is left of containers `ids`.
fn assert_gone(pod: &Pod, ids: &[&str]) {
    for id in ids {
        assert!(!pod.env.root.join(id).exists(), "runtime state of {id}");
        for d in pod.env.cgroup_dirs() {
            assert!(!d.join(id).exists(), "cgroup {}", d.join(id).display());
        }
    }
}

/// The exit written for reaped container `r` has a message, and it says `part`.
fn assert_message(r: &wharf_shim::Reaped, part: &str) {
    let message = r.exit.message.as_deref();
    assert!(
        message.is_some_and(|m| m.contains(part)),
        "{}: {message:?} does not say {part:?}",
        r.id
    );
}

/// Each reaped container as (id, killed, reason, exit code), sorted by id.
fn summary(reaped: &mut [wharf_shim::Reaped]) -> Vec<(&str, bool, &str, i32)> {
    reaped.sort_by(|a, b| a.id.cmp(&b.id));
    reaped
        .iter()
        .map(|r| {
            (
                r.id.as_str(),
                r.killed,
                r.exit.reason.as_str(),
                r.exit.exit_code,
            )
        })
        .collect()
}

fn children_of(pid: i32) -> Vec<i32> {
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(p) = e.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        if let Ok(stat) = std::fs::read_to_string(format!("/proc/{p}/stat"))
            && let Some((_, rest)) = stat.rsplit_once(") ")
            && rest.split(' ').nth(1) == Some(&pid.to_string())
        {
            out.push(p);
        }
    }
    out
}

#[test]
fn the_pod_init_reaps_zombies_in_a_shared_pid_namespace() {
    let pod = Pod::new("shim-pause");
    // A container whose network namespace the pod's init joins.
    let netns_owner = pod.spec("net", &["sleep", "1000"]);
    pod.run(&netns_owner);
    let net_pid = pod.shim.container("net").unwrap().pid.unwrap();
    let netns = format!("/proc/{net_pid}/ns/net");
    let pause = pod
        .shim
        .pause_init(&PauseSpec {
            network: Some(netns.clone().into()),
            ..Default::default()
        })
        .unwrap();
    assert_eq!(pod.shim.state().unwrap().pause_pid, Some(pause));
    assert_eq!(
        std::fs::read_link(format!("/proc/{pause}/ns/net")).unwrap(),
        std::fs::read_link(&netns).unwrap()
    );
    // Its pid namespace is new, and it is PID 1 there.
    assert_ne!(
        std::fs::read_link(format!("/proc/{pause}/ns/pid")).unwrap(),
        std::fs::read_link("/proc/self/ns/pid").unwrap()
    );
    let status = std::fs::read_to_string(format!("/proc/{pause}/status")).unwrap();
    let nspid = status.lines().find(|l| l.starts_with("NSpid:")).unwrap();
    assert!(nspid.trim_end().ends_with("\t1"), "{nspid}");
    // A container in that pid namespace leaves an orphan behind.
    let pidns = format!("/proc/{pause}/ns/pid");
    let spec = pod.spec_with(
        "app",
        &["sh", "-c", "sh -c 'sleep 1000 &'; sleep 1000"],
        |c| {
            for ns in c["linux"]["namespaces"].as_array_mut().unwrap() {
                if ns["type"] == "pid" {
                    ns["path"] = pidns.clone().into();
                }
            }
        },
    );
    pod.run(&spec);
    // The orphan may be seen between its fork and its exec of sleep: wait for the exec.
    let mut orphan = None;
    assert!(wait_until(Duration::from_secs(30), || {
        orphan = children_of(pause).into_iter().find(|p| {
            std::fs::read_to_string(format!("/proc/{p}/cmdline"))
                .is_ok_and(|c| c.starts_with("sleep"))
        });
        orphan.is_some()
    }));
    let orphan = orphan.unwrap();
    // SAFETY: killing a process of our test container.
    unsafe { libc::kill(orphan, libc::SIGKILL) };
    // Reaped by the pod's init: no zombie stays.
    assert!(
        wait_until(Duration::from_secs(30), || !std::path::Path::new(&format!(
            "/proc/{orphan}"
        ))
        .exists()),
        "zombie {orphan} not reaped: {:?}",
        wharf_runtime::sys::process_state(orphan)
    );
    // Shutdown stops the init once no container runs.
    pod.shim.kill("app", libc::SIGKILL, true).unwrap();
    pod.shim.kill("net", libc::SIGKILL, false).unwrap();
    pod.wait("app");
    pod.wait("net");
    let shim_pid = pod.shim_pid();
    pod.shim.shutdown().unwrap();
    assert!(wait_until(Duration::from_secs(30), || !alive(shim_pid)));
    assert!(!alive(pause));
}

#[test]
fn the_pod_init_dies_with_a_killed_shim() {
    let pod = Pod::new("shim-pause-death");
    let pause = pod.shim.pause_init(&PauseSpec::default()).unwrap();
    assert!(alive(pause));
    // SAFETY: killing the shim this test started.
    unsafe { libc::kill(pod.shim_pid(), libc::SIGKILL) };
    assert!(wait_until(Duration::from_secs(10), || !alive(pause)));
    let e = pod.shim.pause_init(&PauseSpec::default()).unwrap_err();
    assert!(e.is_not_running());
}
