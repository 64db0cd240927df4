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
