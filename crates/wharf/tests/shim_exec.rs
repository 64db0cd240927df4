//! Exec processes through the shim: wait, attach, terminal, kill, errors.

mod shim_support;

use std::time::Duration;

use oci_spec::runtime::Process;
use shim_support::*;
use wharf_shim::Output;

fn process(args: &[&str]) -> Process {
    let mut p = Process::default();
    p.set_args(Some(args.iter().map(|s| s.to_string()).collect()));
    p.set_env(Some(vec!["PATH=/bin".into()]));
    p
}

#[test]
fn exec_wait_attach_terminal_and_kill() {
    let pod = Pod::new("shim-exec");
    let spec = pod.spec("c", &["sleep", "1000"]);
    pod.run(&spec);

    let pid = pod
        .shim
        .exec(
            "c",
            "e1",
            &process(&["sh", "-c", "exit 4"]),
            &StdioSpec::default(),
        )
        .unwrap();
    assert!(pid > 0);
    let e = pod
        .shim
        .wait_exec("c", "e1", Some(Duration::from_secs(30)))
        .unwrap();
    assert_eq!(e.exit_code, 4);
    let on_disk = pod.shim.records().exec_exit("c", "e1").unwrap().unwrap();
    assert_eq!(on_disk, e);

    // Output of an attached exec, on both streams, then its exit.
    let (_, mut a) = pod
        .shim
        .exec_attach(
            "c",
            "e2",
            &process(&["sh", "-c", "echo out; echo err >&2; read x; echo got $x"]),
            &StdioSpec::pipes(true),
        )
        .unwrap();
    a.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    a.write_stdin(b"abc\n").unwrap();
    let (mut out, mut err) = (String::new(), String::new());
    let exit = loop {
        match a.recv().unwrap() {
            Some(Output::Stdout(d)) => out.push_str(&String::from_utf8_lossy(&d)),
            Some(Output::Stderr(d)) => err.push_str(&String::from_utf8_lossy(&d)),
            Some(Output::Exit(e)) => break e,
            None => panic!("no exit"),
        }
    };
    assert_eq!(
        (out.as_str(), err.as_str(), exit.exit_code),
        ("out\ngot abc\n", "err\n", 0)
    );

    // A terminal exec.
    let (_, mut t) = pod
        .shim
        .exec_attach("c", "tty", &process(&["sh"]), &StdioSpec::tty(true))
        .unwrap();
    t.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    t.resize(21, 77).unwrap();
    t.write_stdin(b"stty size; tty; exit 9\n").unwrap();
    let mut out = String::new();
    let exit = loop {
        match t.recv().unwrap() {
            Some(Output::Stdout(d)) => out.push_str(&String::from_utf8_lossy(&d)),
            Some(Output::Stderr(_)) => panic!("a terminal has one stream"),
            Some(Output::Exit(e)) => break e,
            None => panic!("no exit"),
        }
    };
    assert!(out.contains("21 77"), "{out:?}");
    assert!(out.contains("/dev/pts/"), "{out:?}");
    assert_eq!(exit.exit_code, 9);

    // kill an exec process.
    pod.shim
        .exec(
            "c",
            "long",
            &process(&["sleep", "1000"]),
            &StdioSpec::default(),
        )
        .unwrap();
    pod.shim.kill_exec("c", "long", libc::SIGTERM).unwrap();
    let e = pod
        .shim
        .wait_exec("c", "long", Some(Duration::from_secs(30)))
        .unwrap();
    assert_eq!(
        (e.exit_code, e.signal),
        (128 + libc::SIGTERM, Some(libc::SIGTERM))
    );

    // Errors name the container and the exec.
    let dup = pod
        .shim
        .exec("c", "e1", &process(&["true"]), &StdioSpec::default())
        .unwrap_err();
    assert_eq!(dup.kind(), Some(ErrorKind::Exists));
    assert!(dup.to_string().contains("e1"), "{dup}");
    let missing = pod.shim.wait_exec("c", "nope", None).unwrap_err();
    assert_eq!(missing.kind(), Some(ErrorKind::NotFound));
    let bad = pod
        .shim
        .exec(
            "c",
            "bad",
            &process(&["/no/such/program"]),
            &StdioSpec::default(),
        )
        .unwrap_err();
    assert!(bad.to_string().contains("/no/such/program"), "{bad}");

    let st = pod.shim.container("c").unwrap();
    assert_eq!(st.execs.len(), 4);
    assert!(st.execs.iter().all(|e| e.exit.is_some()));

    pod.shim.kill("c", libc::SIGKILL, false).unwrap();
    pod.wait("c");
    let e = pod
        .shim
        .exec("c", "late", &process(&["true"]), &StdioSpec::default())
        .unwrap_err();
    assert_eq!(e.kind(), Some(ErrorKind::State));
}
