//! The shim's stdio: CRI logs with rotation and partial lines, attach over pipes and a
//! terminal (stdin, resize, detach and reattach), attach to a log-mode container.

mod shim_support;

use std::time::Duration;

use shim_support::*;
use wharf_shim::Output;
use wharf_shim::logs::{self, LogEntry};

/// Read attach output until `want` shows up in stdout (or the stream ends); returns stdout.
fn read_until(a: &mut wharf_shim::Attach, want: &str) -> String {
    a.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let mut out = String::new();
    while !out.contains(want) {
        match a.recv().expect("attach output") {
            Some(Output::Stdout(d)) => out.push_str(&String::from_utf8_lossy(&d)),
            Some(Output::Stderr(_)) => {}
            Some(Output::Exit(e)) => panic!("exited ({e:?}) before {want:?}; got {out:?}"),
            None => panic!("stream ended before {want:?}; got {out:?}"),
        }
    }
    out
}

/// Read until the exit frame; returns (stdout, stderr, exit).
fn read_to_exit(a: &mut wharf_shim::Attach) -> (String, String, ExitRecord) {
    a.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let (mut out, mut err) = (String::new(), String::new());
    loop {
        match a.recv().expect("attach output") {
            Some(Output::Stdout(d)) => out.push_str(&String::from_utf8_lossy(&d)),
            Some(Output::Stderr(d)) => err.push_str(&String::from_utf8_lossy(&d)),
            Some(Output::Exit(e)) => {
                assert!(
                    a.recv().unwrap().is_none(),
                    "the stream ends after the exit"
                );
                return (out, err, e);
            }
            None => panic!("stream ended without an exit; got {out:?} {err:?}"),
        }
    }
}

#[test]
fn logs_are_cri_formatted_with_partial_lines() {
    let pod = Pod::new("shim-log-format");
    let spec = pod.spec(
        "c",
        &[
            "sh",
            "-c",
            "echo out1; echo err1 >&2; echo; head -c 20000 /dev/zero | tr '\\0' x; echo; printf tail",
        ],
    );
    pod.run(&spec);
    assert_eq!(pod.wait("c").exit_code, 0);
    let text = std::fs::read_to_string(pod.log_path("c")).unwrap();
    let entries: Vec<LogEntry> = text
        .lines()
        .map(|l| LogEntry::parse(l.as_bytes()).unwrap_or_else(|| panic!("bad line {l:?}")))
        .collect();
    for e in &entries {
        // RFC3339Nano, UTC, nine digits.
        assert_eq!(e.time.len(), 30, "{:?}", e.time);
        assert!(e.instant().is_some(), "{:?}", e.time);
    }
    let out: Vec<(String, bool, usize)> = entries
        .iter()
        .filter(|e| e.stream == "stdout")
        .map(|e| {
            (
                String::from_utf8_lossy(&e.content[..e.content.len().min(4)]).into_owned(),
                e.partial,
                e.content.len(),
            )
        })
        .collect();
    assert_eq!(
        out,
        vec![
            ("out1".into(), false, 4),
            ("".into(), false, 0),
            ("xxxx".into(), true, logs::MAX_LINE),
            ("xxxx".into(), false, 20000 - logs::MAX_LINE),
            // What no newline ended is partial, as containerd and CRI-O write it.
            ("tail".into(), true, 4),
        ]
    );
    let err: Vec<&LogEntry> = entries.iter().filter(|e| e.stream == "stderr").collect();
    assert_eq!(err.len(), 1);
    assert_eq!(err[0].content, b"err1");
    assert!(
        text.lines().next().unwrap().ends_with(" stdout F out1")
            || text.contains(" stdout F out1\n")
    );
}

#[test]
fn logs_rotate_by_size() {
    let pod = Pod::with_options("shim-log-rotate", |o| {
        o.log_max_size = Some(1000);
        o.log_max_files = Some(3);
    });
    let spec = pod.spec(
        "c",
        &[
            "sh",
            "-c",
            "i=0; while [ $i -lt 200 ]; do echo line$i; i=$((i+1)); done",
        ],
    );
    pod.run(&spec);
    assert_eq!(pod.wait("c").exit_code, 0);
    let path = pod.log_path("c");
    for p in [
        path.clone(),
        logs::rotated(&path, 1),
        logs::rotated(&path, 2),
    ] {
        let len = std::fs::metadata(&p)
            .unwrap_or_else(|e| panic!("{p:?}: {e}"))
            .len();
        assert!(len <= 1000, "{p:?} is {len} bytes");
    }
    assert!(!logs::rotated(&path, 3).exists(), "at most 3 files");
    // What is kept is the end of the output, in order.
    let lines = pod.log_lines("c");
    assert_eq!(lines.last().unwrap(), "line199");
    let nums: Vec<u32> = lines.iter().map(|l| l[4..].parse().unwrap()).collect();
    assert!(nums.windows(2).all(|w| w[1] == w[0] + 1), "{nums:?}");
    assert!(nums[0] > 0, "old lines were rotated away");
    // The reader's tail.
    let mut tail = Vec::new();
    logs::read(
        &path,
        &logs::ReadOptions {
            tail: Some(3),
            ..Default::default()
        },
        &mut |e| {
            tail.push(String::from_utf8_lossy(&e.content).into_owned());
            true
        },
        &mut || false,
    )
    .unwrap();
    assert_eq!(tail, vec!["line197", "line198", "line199"]);
}

#[test]
fn attach_with_pipes_stdin_detach_and_reattach() {
    let pod = Pod::new("shim-attach-pipes");
    let mut spec = pod.spec("cat", &["sh", "-c", "cat; echo bye >&2; exit 4"]);
    spec.stdio = StdioSpec::pipes(true);
    pod.shim.create(&spec).unwrap();
    // Attached before start: nothing is missed.
    let mut a = pod.shim.attach("cat", None).unwrap();
    pod.shim.start("cat").unwrap();
    a.write_stdin(b"hello\n").unwrap();
    assert_eq!(read_until(&mut a, "hello\n"), "hello\n");
    a.detach();
    // The process keeps running without a client; a new one picks up.
    assert_eq!(pod.shim.container("cat").unwrap().status, Status::Running);
    let mut b = pod.shim.attach("cat", None).unwrap();
    b.write_stdin(b"again\n").unwrap();
    assert_eq!(read_until(&mut b, "again\n"), "again\n");
    b.close_stdin().unwrap();
    let (out, err, exit) = read_to_exit(&mut b);
    assert_eq!(
        (out.as_str(), err.as_str(), exit.exit_code),
        ("", "bye\n", 4)
    );
    // Attaching to an exited container gives its exit right away.
    let mut c = pod.shim.attach("cat", None).unwrap();
    assert_eq!(read_to_exit(&mut c).2.exit_code, 4);
}

#[test]
fn attach_with_a_terminal_echo_resize_and_reattach() {
    let pod = Pod::new("shim-attach-tty");
    let mut spec = pod.spec_with("tty", &["sh"], |c| {
        c["process"]["terminal"] = true.into();
    });
    spec.stdio = StdioSpec::tty(true);
    pod.shim.create(&spec).unwrap();
    let mut a = pod.shim.attach("tty", None).unwrap();
    pod.shim.start("tty").unwrap();
    pod.shim.resize("tty", None, 33, 101).unwrap();
    a.write_stdin(b"stty size\n").unwrap();
    // The terminal echoes the command, then sh prints the size.
    read_until(&mut a, "33 101");
    a.detach();
    let mut b = pod.shim.attach("tty", None).unwrap();
    b.resize(40, 120).unwrap();
    b.write_stdin(b"stty size; echo mark$((6*7))\n").unwrap();
    let out = read_until(&mut b, "mark42");
    assert!(out.contains("40 120"), "{out:?}");
    b.write_stdin(b"exit 5\n").unwrap();
    let (_, err, exit) = read_to_exit(&mut b);
    assert_eq!(err, "", "a terminal has one stream");
    assert_eq!(exit.exit_code, 5);
    // Resizing a pipe process is refused clearly.
    let mut p = pod.spec("p", &["sleep", "100"]);
    p.stdio = StdioSpec::pipes(false);
    pod.run(&p);
    let e = pod.shim.resize("p", None, 1, 1).unwrap_err();
    assert!(e.to_string().contains("no terminal"), "{e}");
}

#[test]
fn a_terminal_container_needs_process_terminal() {
    let pod = Pod::new("shim-tty-mismatch");
    let mut spec = pod.spec("t", &["sh"]);
    spec.stdio = StdioSpec::tty(true);
    let e = pod.shim.create(&spec).unwrap_err();
    assert!(e.to_string().contains("process.terminal"), "{e}");
    assert!(e.to_string().contains("create t"), "{e}");
    // Nothing is left: the id can be used again.
    assert!(pod.shim.state().unwrap().containers.is_empty());
    let ok = pod.spec_with("t2", &["true"], |c| c["process"]["terminal"] = true.into());
    let mut ok = ok;
    ok.stdio = StdioSpec::tty(false);
    pod.run(&ok);
    assert_eq!(pod.wait("t2").exit_code, 0);
}

#[test]
fn attach_streams_new_output_of_a_log_container() {
    let pod = Pod::new("shim-attach-log");
    let spec = pod.spec(
        "c",
        &[
            "sh",
            "-c",
            "echo early; while [ ! -e /go ]; do sleep 0.05; done; echo late; echo oops >&2",
        ],
    );
    pod.run(&spec);
    wait_until(Duration::from_secs(20), || {
        pod.log_lines("c") == vec!["early"]
    });
    let mut a = pod.shim.attach("c", None).unwrap();
    std::fs::write(spec.bundle.join("rootfs/go"), "").unwrap();
    let (out, err, exit) = read_to_exit(&mut a);
    assert_eq!(
        (out.as_str(), err.as_str(), exit.exit_code),
        ("late\n", "oops\n", 0)
    );
    assert_eq!(pod.log_lines("c"), vec!["early", "late", "oops"]);
}

#[test]
fn reopen_log_after_someone_moved_it_away() {
    let pod = Pod::new("shim-log-reopen");
    let spec = pod.spec(
        "c",
        &[
            "sh",
            "-c",
            "echo before; while [ ! -e /go ]; do sleep 0.02; done; echo after; sleep 1000",
        ],
    );
    pod.run(&spec);
    let path = pod.log_path("c");
    assert!(wait_until(Duration::from_secs(10), || pod.log_lines("c") == ["before"]));
    // kubelet's rotation: rename the file, then ask the runtime to reopen it.
    let moved = path.with_extension("log.20261201-000000");
    std::fs::rename(&path, &moved).unwrap();
    pod.shim.reopen_log("c").unwrap();
    assert!(path.exists(), "a new file at the log's path");
    std::fs::write(spec.bundle.join("rootfs/go"), "").unwrap();
    assert!(wait_until(Duration::from_secs(10), || pod.log_lines("c") == ["after"]));
    let old = std::fs::read_to_string(&moved).unwrap();
    assert!(
        old.ends_with(" stdout F before\n") && !old.contains("after"),
        "{old}"
    );
    // What cannot be reopened says why, naming the container.
    let e = pod.shim.reopen_log("nope").unwrap_err();
    assert!(
        matches!(
            e,
            wharf_shim::ShimError::Remote {
                kind: ErrorKind::NotFound,
                ..
            }
        ),
        "{e}"
    );
    let mut piped = pod.spec("piped", &["sleep", "1000"]);
    piped.stdio = StdioSpec::pipes(false);
    pod.run(&piped);
    let e = pod.shim.reopen_log("piped").unwrap_err();
    assert!(e.to_string().contains("piped") && e.to_string().contains("not logged"));
    pod.shim.kill("c", libc::SIGKILL, false).unwrap();
    pod.wait("c");
    let e = pod.shim.reopen_log("c").unwrap_err();
    assert!(
        matches!(
            e,
            wharf_shim::ShimError::Remote {
                kind: ErrorKind::State,
                ..
            }
        ),
        "{e}"
    );
}
