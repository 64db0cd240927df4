//! The engine's API as a second front end (the CRI server) will use it, without the CLI:
//! typed operations, error kinds, full status, log reopening after someone else rotated
//! the log, exec sessions and pushed events.

mod engine_support;

use std::path::PathBuf;
use std::time::Duration;

use wharf_engine::error::ErrorKind;
use wharf_engine::model::{ContainerSpec, ContainerState, NetworkMode, PodSpec};
use wharf_engine::{Engine, EngineOptions, EventOptions, ExecRequest, PodChoice};
use wharf_testbed::{Env, wait_until};

fn options(env: &Env) -> EngineOptions {
    EngineOptions {
        root: env.path().join("root"),
        run: env.path().join("run"),
        cgroup_parent: env.cgroup_parent.clone(),
        wharf_bin: Some(PathBuf::from(env!("CARGO_BIN_EXE_wharf"))),
        ..Default::default()
    }
}

/// The lines of a container's log, through the engine.
fn log_lines(engine: &Engine, key: &str) -> Vec<String> {
    let mut out = Vec::new();
    engine
        .container_logs(key, &Default::default(), |e| {
            out.push(String::from_utf8_lossy(&e.content).into_owned());
            true
        })
        .unwrap();
    out
}

fn kind(e: wharf_engine::Error) -> ErrorKind {
    e.kind()
}

#[test]
fn a_second_front_end_drives_a_container_through_the_engine_alone() {
    let env = Env::new("engine-api");
    let engine = Engine::open(options(&env)).unwrap();
    let image = engine_support::busybox();
    engine
        .images()
        .pull(&image, &Default::default(), &())
        .unwrap();
    let pod = PodSpec {
        name: Some("api".into()),
        network: NetworkMode::None,
        ..Default::default()
    };
    let spec = ContainerSpec {
        name: Some("api".into()),
        image: image.clone(),
        command: Some(vec![
            "sh".into(),
            "-c".into(),
            "echo before; while [ ! -e /tmp/go ]; do sleep 0.05; done; echo after; sleep 1000"
                .into(),
        ]),
        ..Default::default()
    };
    let row = engine
        .create(PodChoice::Own(Box::new(pod.clone())), &spec)
        .unwrap();
    // Kinds survive to the front end: a taken name, a missing object.
    let e = engine
        .create(PodChoice::Own(Box::new(pod)), &spec)
        .unwrap_err();
    assert_eq!(kind(e), ErrorKind::AlreadyExists);
    assert_eq!(
        kind(engine.reopen_log("nope").unwrap_err()),
        ErrorKind::NotFound
    );
    assert_eq!(
        kind(engine.reopen_log("api").unwrap_err()),
        ErrorKind::FailedPrecondition,
        "a created container has no open log"
    );
    let mut feed = engine.events(EventOptions {
        since: None,
        follow: true,
    });
    let (_, session) = engine.start("api", false).unwrap();
    assert!(session.is_none());
    let status = engine.container_status("api").unwrap();
    assert_eq!(status.view.row.state, ContainerState::Running);
    assert!(status.pid.is_some_and(|p| p > 1), "{status:?}");
    assert!(status.started_at.is_some() && status.created_in_runtime_at.is_some());
    assert!(wait_until(Duration::from_secs(10), || log_lines(
        &engine, "api"
    ) == ["before"]));

    // kubelet rotates the log itself, then asks for it to be reopened.
    let log = status.view.log_path.clone();
    let moved = log.with_extension("log.20261201-000000");
    std::fs::rename(&log, &moved).unwrap();
    engine.reopen_log("api").unwrap();
    let (exec_id, none) = engine
        .exec(
            "api",
            &ExecRequest {
                command: vec!["touch".into(), "/tmp/go".into()],
                ..Default::default()
            },
            false,
        )
        .unwrap();
    assert!(none.is_none());
    assert_eq!(
        engine
            .wait_exec("api", &exec_id, Some(Duration::from_secs(10)))
            .unwrap()
            .code,
        0
    );
    assert!(wait_until(Duration::from_secs(10), || log_lines(
        &engine, "api"
    ) == ["after"]));
    let old = std::fs::read_to_string(&moved).unwrap();
    assert!(
        old.contains(" stdout F before") && !old.contains("after"),
        "{old}"
    );

    // An attached exec: its output and exit code through the session.
    let (_, session) = engine
        .exec(
            "api",
            &ExecRequest {
                command: vec!["sh".into(), "-c".into(), "echo $GREETING; exit 3".into()],
                env: vec![("GREETING".into(), "hello".into())],
                ..Default::default()
            },
            true,
        )
        .unwrap();
    let mut session = session.expect("attached");
    let mut out = Vec::new();
    let code = loop {
        match session.stream.recv().unwrap() {
            Some(wharf_engine::session::Output::Stdout(d)) => out.extend(d),
            Some(wharf_engine::session::Output::Exit(e)) => break e.exit_code,
            Some(_) => {}
            None => panic!("the stream ended without an exit"),
        }
    };
    assert_eq!(
        (String::from_utf8_lossy(&out).as_ref(), code),
        ("hello\n", 3)
    );

    // Events: what the store holds at once, then an exit pushed as it happens (the kill
    // comes from another engine instance, as from another front end).
    let first = feed.next_batch().unwrap().unwrap();
    let kinds: Vec<&str> = first.iter().map(|e| e.kind_of_event.as_str()).collect();
    assert!(
        kinds.contains(&"created") && kinds.contains(&"started"),
        "{kinds:?}"
    );
    let opts = options(&env);
    let killer = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(300));
        let other = Engine::open(opts).unwrap();
        other.kill("api", libc::SIGKILL).unwrap();
    });
    let exited = loop {
        let batch = feed.next_batch().unwrap().expect("following");
        if let Some(e) = batch.into_iter().find(|e| e.kind_of_event == "exited") {
            break e;
        }
    };
    killer.join().unwrap();
    assert_eq!(exited.id, row.id);
    assert_eq!(exited.attrs["exitCode"], 137);
    drop(feed);
    assert_eq!(
        engine.container("api").unwrap().row.state,
        ContainerState::Exited
    );
    assert_eq!(
        kind(engine.reopen_log("api").unwrap_err()),
        ErrorKind::FailedPrecondition
    );
    // Removing it takes the pod made for it.
    engine.remove("api", false).unwrap();
    assert!(engine.list_pods(&Default::default()).unwrap().is_empty());
    assert_eq!(
        kind(engine.remove("api", false).unwrap_err()),
        ErrorKind::NotFound
    );
}

/// Whether a process waits for the flock of the file with inode `ino` (a `->` line of
/// /proc/locks: "N: -> FLOCK ADVISORY WRITE PID MAJ:MIN:INODE 0 EOF").
fn someone_waits_on(ino: u64) -> bool {
    let locks = std::fs::read_to_string("/proc/locks").unwrap_or_default();
    let inode = format!(":{ino}");
    locks
        .lines()
        .any(|l| l.contains("->") && l.split_whitespace().any(|f| f.ends_with(&inode)))
}

/// A change that waited for a pod's lock while another front end removed the pod answers
/// NotFound, and leaves no lock file behind: the wait made the file anew after the remover
/// unlinked it, and no row names it any more.
#[test]
fn a_change_that_waited_for_a_removed_pod_leaves_no_lock_file() {
    use std::os::unix::fs::MetadataExt;
    let env = Env::new("engine-api-lock");
    let engine = Engine::open(options(&env)).unwrap();
    let pod = engine
        .create_pod(&PodSpec {
            name: Some("going".into()),
            network: NetworkMode::None,
            ..Default::default()
        })
        .unwrap();
    // The engine that made the pod holds its lock until it releases its pods.
    let lock = env.path().join("run/locks").join(&pod.id);
    let ino = std::fs::metadata(&lock).unwrap().ino();
    let (opts, id) = (options(&env), pod.id.clone());
    let waiter = std::thread::spawn(move || {
        let other = Engine::open(opts).unwrap();
        other
            .update_pod_resources(&id, &Default::default())
            .map(drop)
            .map_err(kind)
    });
    assert!(
        wait_until(Duration::from_secs(20), || someone_waits_on(ino)),
        "the second engine never waited on the pod's lock"
    );
    engine.remove_pod(&pod.id, true).unwrap();
    engine.release_pod_locks();
    assert_eq!(waiter.join().unwrap(), Err(ErrorKind::NotFound));
    assert!(!lock.exists(), "{} was left behind", lock.display());
}
