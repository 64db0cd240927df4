//! The red-team escapes through the engine (`wharf run`, `wharf exec`, pods), each with
//! harmless markers in the test's own directory: program paths through leaked fds
//! (CVE-2024-21626), the host binary through /proc/self/exe (CVE-2019-5736), and the pod's
//! init (its pid namespace's PID 1) as a way out or as a stale namespace to join.

mod engine_support;

use engine_support::*;
use std::path::Path;
use std::time::Duration;
use wharf_testbed::{fds_of, host_echo, through_fd};

#[test]
fn run_and_exec_start_with_stdio_only_and_reach_no_host_path() {
    let w = Wharf::new("esc-fd");
    w.pull_busybox();
    let marker = host_echo(&w.path("host-only"));
    for n in 3..40 {
        let out = w.run(&[
            "run",
            "--rm",
            &busybox(),
            &through_fd(n, &marker),
            "ESCAPED",
        ]);
        assert!(
            !out.stdout.contains("ESCAPED") && !out.stderr.contains("ESCAPED"),
            "run, fd {n}: {out:?}"
        );
    }
    w.ok(&["run", "-d", "--name", "c", &busybox(), "sleep", "1000"]);
    let init = w.pids("c")[0];
    assert_eq!(fds_of(init), ["0", "1", "2"], "the container's process");
    for n in 3..48 {
        let out = w.run(&["exec", "c", &through_fd(n, &marker), "ESCAPED"]);
        assert!(
            !out.stdout.contains("ESCAPED") && !out.stderr.contains("ESCAPED"),
            "exec, fd {n}: {out:?}"
        );
    }
    w.ok(&["exec", "-d", "c", "sleep", "1001"]);
    let mut exec_pid = None;
    assert!(wait_until(Duration::from_secs(10), || {
        exec_pid = w.pids("c").into_iter().find(|p| *p != init);
        exec_pid.is_some()
    }));
    assert_eq!(
        fds_of(exec_pid.unwrap()),
        ["0", "1", "2"],
        "an exec'd process"
    );
    w.ok(&["rm", "-f", "c"]);
}

#[test]
fn proc_self_exe_runs_nothing_of_the_host() {
    let w = Wharf::new("esc-exe");
    w.pull_busybox();
    let wharf = std::fs::read(env!("CARGO_BIN_EXE_wharf")).unwrap();
    // The host's loader and libc, as a glibc-based image would have them (else exec'ing the
    // host binary fails for want of a loader, hiding the escape).
    let libs = [
        "-v",
        "/lib/x86_64-linux-gnu:/lib/x86_64-linux-gnu:ro",
        "-v",
        "/lib64:/lib64:ro",
    ];
    let mut args = vec!["run", "--rm", "-e", "LD_PRELOAD=/x.so"];
    args.extend(libs);
    let bb = busybox();
    args.extend([bb.as_str(), "/proc/self/exe", "--version"]);
    let out = w.run(&args);
    assert!(
        !out.stdout.contains("wharf") && out.code != 0,
        "the container ran the host binary: {out:?}"
    );
    let mut args = vec!["run", "-d", "--name", "c"];
    args.extend(libs);
    args.extend([bb.as_str(), "sleep", "1000"]);
    w.ok(&args);
    let out = w.run(&["exec", "c", "/proc/self/exe", "--version"]);
    assert!(!out.stdout.contains("wharf"), "{out:?}");
    w.ok(&["rm", "-f", "c"]);
    assert!(std::fs::read(env!("CARGO_BIN_EXE_wharf")).unwrap() == wharf);
}

/// The pod's init is PID 1 of every container of a `--share-pid` pod: containers cannot
/// kill it, and even with CAP_SYS_PTRACE its exe and root lead nowhere.
#[test]
fn the_pod_init_cannot_be_killed_or_used_from_inside() {
    let w = Wharf::new("esc-pause");
    shared_pid_pod(&w, &["--cap-add", "SYS_PTRACE"]);
    let look = w.ok(&[
        "exec",
        "c",
        "sh",
        "-c",
        "echo exe=$(readlink /proc/1/exe); echo root=$(ls -A /proc/1/root/ 2>&1 | tr '\\n' ' '); \
         cat /proc/1/root/etc/hostname 2>&1; true",
    ]);
    assert!(
        !look.contains(env!("CARGO_BIN_EXE_wharf")) && !look.contains("/wharf"),
        "PID 1's exe is the host binary: {look}"
    );
    assert!(
        look.contains("root=\n") || look.contains("denied"),
        "PID 1's root is not empty: {look}"
    );
    assert!(
        look.contains("No such file") || look.contains("denied"),
        "PID 1's root shows the host: {look}"
    );
    w.ok(&[
        "exec",
        "c",
        "sh",
        "-c",
        "kill -TERM 1; kill -INT 1; kill -KILL 1; kill -HUP 1; sleep 0.5",
    ]);
    let ps = w.ok(&[
        "run",
        "--rm",
        "--pod",
        "q",
        &busybox(),
        "ps",
        "-o",
        "pid,args",
    ]);
    assert!(
        ps.contains("wharf-pause") && ps.contains("sleep 1000"),
        "the pod lost its init: {ps}"
    );
    w.ok(&["pod", "rm", "-f", "q"]);
}

/// The pause's pid after it died is free for any process; a new container must never join
/// the pid namespace of whatever takes it (the red team saw 112 host processes that way).
#[test]
fn a_dead_pod_init_is_never_replaced_by_another_process() {
    let w = Wharf::new("esc-stale-pid");
    shared_pid_pod(&w, &[]);
    let tree: serde_json::Value =
        serde_json::from_str(&w.ok(&["inspect", "--tree", "--format", "json", "q"])).unwrap();
    let pause = tree["sandbox"]["pause_pid"].as_i64().unwrap() as i32;
    // SAFETY: killing the pod init of this test's own pod.
    unsafe { libc::kill(pause, libc::SIGKILL) };
    assert!(wait_until(Duration::from_secs(10), || {
        !Path::new(&format!("/proc/{pause}")).exists()
    }));
    // An impostor takes the same pid, in a pid namespace of its own. The pid can stay
    // allocated a little after /proc forgets it (the pod's other processes still hold it as
    // their session or group until they are reaped), so the impostor retries until it is free.
    let mut impostor = None;
    assert!(wait_until(Duration::from_secs(10), || {
        impostor = Impostor::spawn(pause);
        impostor.is_some()
    }));
    let impostor = impostor.unwrap();
    let out = w.run(&[
        "run",
        "--rm",
        "--pod",
        "q",
        &busybox(),
        "ps",
        "-o",
        "pid,args",
    ]);
    assert_ne!(out.code, 0, "a container ran in the dead pod: {out:?}");
    assert!(
        !out.stdout.contains("4242"),
        "joined the impostor: {}",
        out.stdout
    );
    assert!(out.stderr.contains("init"), "unclear error: {}", out.stderr);
    let pods = w.ok(&["pod", "ls"]);
    assert!(pods.contains("dead"), "{pods}");
    w.ok(&["pod", "rm", "-f", "q"]);
    drop(impostor);
}

/// A `--share-pid` pod "q" with a container "c" (`sleep 1000`, created with `extra` flags).
fn shared_pid_pod(w: &Wharf, extra: &[&str]) {
    w.pull_busybox();
    w.ok(&["pod", "create", "--name", "q", "--share-pid"]);
    let bb = busybox();
    let mut args = vec!["run", "-d", "--name", "c", "--pod", "q"];
    args.extend(extra);
    args.extend([bb.as_str(), "sleep", "1000"]);
    w.ok(&args);
}

/// A `sleep 4242` with a chosen host pid, in a new pid namespace (clone3 with set_tid).
struct Impostor(i32);

impl Impostor {
    /// `None` while the pid is still taken (EEXIST); any other failure fails the test.
    fn spawn(pid: i32) -> Option<Impostor> {
        // With CLONE_NEWPID: its pid in the new namespace (1), then in ours.
        let tids = [1, pid];
        let mut args = wharf_runtime::sys::CloneArgs {
            flags: libc::CLONE_NEWPID as u64,
            exit_signal: libc::SIGCHLD as u64,
            set_tid: tids.as_ptr() as u64,
            set_tid_size: 2,
            ..Default::default()
        };
        let prog = c"/bin/busybox";
        let argv = [c"sleep".as_ptr(), c"4242".as_ptr(), std::ptr::null()];
        // SAFETY: a fork-like clone3; the child only execs (async-signal-safe) or exits.
        let ret = unsafe {
            libc::syscall(
                libc::SYS_clone3,
                &mut args as *mut wharf_runtime::sys::CloneArgs,
                std::mem::size_of::<wharf_runtime::sys::CloneArgs>(),
            )
        };
        if ret == 0 {
            // SAFETY: as above.
            unsafe {
                libc::execv(prog.as_ptr(), argv.as_ptr());
                libc::_exit(127);
            }
        }
        let err = std::io::Error::last_os_error();
        if ret < 0 && err.raw_os_error() == Some(libc::EEXIST) {
            return None;
        }
        assert_eq!(ret, pid as i64, "clone3 with set_tid {pid}: {err}");
        Some(Impostor(pid))
    }
}

impl Drop for Impostor {
    fn drop(&mut self) {
        // SAFETY: our own child.
        unsafe {
            libc::kill(self.0, libc::SIGKILL);
            libc::waitpid(self.0, std::ptr::null_mut(), 0);
        }
    }
}

/// `rm -f` of a container with an exec running finishes (the shim used to deadlock: waiting
/// for the init, which as PID 1 waited for the unreaped exec), and a stuck shim makes only
/// its own pod's commands fail, with a clear error and in bounded time.
#[test]
fn rm_f_with_an_exec_running_and_a_stuck_shim_block_nothing() {
    use std::time::Instant;
    let w = Wharf::new("esc-stuck");
    w.pull_busybox();
    w.ok(&["run", "-d", "--name", "c", &busybox(), "sleep", "1000"]);
    let mut exec = w.cmd(&["exec", "c", "sleep", "1001"]).spawn().unwrap();
    assert!(wait_until(Duration::from_secs(10), || w.pids("c").len() == 2));
    let t = Instant::now();
    w.ok(&["rm", "-f", "c"]);
    assert!(
        t.elapsed() < Duration::from_secs(20),
        "rm -f took {:?}",
        t.elapsed()
    );
    let _ = exec.wait();
    let t = Instant::now();
    assert!(!w.ok(&["ps", "-a"]).contains(" c "));
    assert!(
        t.elapsed() < Duration::from_secs(10),
        "ps took {:?}",
        t.elapsed()
    );
    // A shim that stops answering (SIGSTOP): other pods' commands go on.
    w.ok(&["run", "-d", "--name", "d", &busybox(), "sleep", "1000"]);
    let pod = w.inspect("d")["PodId"].as_str().unwrap().to_string();
    let shim = w.shim_pid(&pod);
    // SAFETY: stopping (and below resuming) the shim of this test's own pod.
    unsafe { libc::kill(shim, libc::SIGSTOP) };
    let t = Instant::now();
    assert!(w.ok(&["ps"]).contains("sleep 1000"));
    assert_eq!(
        w.ok(&["run", "--rm", &busybox(), "echo", "unaffected"])
            .trim(),
        "unaffected"
    );
    let out = w.run(&["stop", "-t", "1", "d"]);
    assert!(
        out.code != 0 && out.stderr.contains("no answer within"),
        "{out:?}"
    );
    assert!(
        t.elapsed() < Duration::from_secs(40),
        "took {:?}",
        t.elapsed()
    );
    // SAFETY: kill(2) of the shim this test stopped above.
    unsafe { libc::kill(shim, libc::SIGCONT) };
    w.ok(&["rm", "-f", "d"]);
}

/// `cmd` run on the host as user nobody (65534), with no groups.
fn as_nobody(cmd: &[&str]) -> std::process::Output {
    std::process::Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
        .args(cmd)
        .output()
        .unwrap()
}

fn mode_of(path: &Path) -> u32 {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).unwrap().permissions().mode() & 0o7777
}

/// Local users get nothing from the engine's state: not a setuid binary of a container's
/// root filesystem, not a container's environment in its config.json or in the store.
#[test]
fn local_users_reach_no_container_state() {
    let w = Wharf::new("esc-perms");
    w.pull_busybox();
    w.ok(&[
        "run",
        "-d",
        "--name",
        "c",
        "-e",
        "DB_PASSWORD=hunter2-marker",
        &busybox(),
        "sleep",
        "1000",
    ]);
    w.ok(&[
        "exec",
        "c",
        "sh",
        "-c",
        "cp /bin/busybox /bin/suid && chmod 4755 /bin/suid",
    ]);
    let id = w.inspect("c")["Id"].as_str().unwrap().to_string();
    let suid = w
        .run_dir()
        .join("containers")
        .join(&id)
        .join("rootfs/bin/suid");
    assert!(suid.exists(), "the test's own setuid copy is missing");
    let out = as_nobody(&[suid.to_str().unwrap(), "id", "-u"]);
    assert!(
        !out.status.success() && !String::from_utf8_lossy(&out.stdout).contains('0'),
        "nobody ran a container's setuid binary: {out:?}"
    );
    let config = w.root().join("containers").join(&id).join("config.json");
    assert!(
        std::fs::read_to_string(&config)
            .unwrap()
            .contains("hunter2-marker")
    );
    let db = w.root().join("wharf.db");
    for f in [&config, &db] {
        let out = as_nobody(&["cat", f.to_str().unwrap()]);
        assert!(
            !out.status.success() && !String::from_utf8_lossy(&out.stdout).contains("hunter2"),
            "nobody read {}",
            f.display()
        );
    }
    assert_eq!(mode_of(&w.root()), 0o700);
    assert_eq!(mode_of(&w.run_dir()), 0o700);
    assert_eq!(mode_of(&config), 0o600);
    assert_eq!(mode_of(&db), 0o600);
    w.ok(&["rm", "-f", "c"]);
}

/// uid 4294967295 is (uid_t)-1, "unchanged" to setresuid: it must never mean root.
#[test]
fn user_ids_out_of_range_are_refused() {
    let w = Wharf::new("esc-uid");
    w.pull_busybox();
    for user in [
        "4294967295",
        "2147483648",
        "0:4294967295",
        "4294967295:4294967295",
    ] {
        let out = w.run(&["run", "--rm", "-u", user, &busybox(), "id"]);
        assert!(
            out.code != 0 && out.stderr.contains("out of range") && !out.stdout.contains("uid="),
            "-u {user}: {out:?}"
        );
    }
    w.ok(&["run", "-d", "--name", "c", &busybox(), "sleep", "1000"]);
    let out = w.run(&["exec", "-u", "4294967295", "c", "id", "-u"]);
    assert!(
        out.code != 0 && !out.stdout.contains('0'),
        "exec -u: {out:?}"
    );
    w.ok(&["rm", "-f", "c"]);
}

/// Input that could exhaust the host is refused at once, with a clear error: an endless env
/// file, a manifest of nested brackets, volumes over /proc or /sys.
#[test]
fn hostile_input_is_refused_quickly() {
    use std::time::Instant;
    let w = Wharf::new("esc-limits");
    w.pull_busybox();
    let t = Instant::now();
    let out = w.run(&["run", "--rm", "--env-file", "/dev/zero", &busybox(), "true"]);
    assert!(
        out.code != 0 && out.stderr.contains("env file /dev/zero is larger than"),
        "{out:?}"
    );
    let deep = w.path("deep.yaml");
    std::fs::write(
        &deep,
        format!(
            "apiVersion: v1\nkind: Pod\nmetadata:\n  name: x\n  labels: {}{}\n",
            "[".repeat(100_000),
            "]".repeat(100_000)
        ),
    )
    .unwrap();
    let out = w.run(&["play", deep.to_str().unwrap()]);
    assert!(
        out.code != 0 && out.stderr.contains("nested more than 100 levels"),
        "{out:?}"
    );
    for dest in [
        "/proc/sys/kernel",
        "/sys/kernel",
        "/proc",
        "/tmp/../proc/self",
    ] {
        let volume = format!("{}:{dest}", w.path("").display());
        let out = w.run(&["run", "--rm", "-v", &volume, &busybox(), "true"]);
        assert!(
            out.code != 0 && out.stderr.contains("may not be mounted at"),
            "-v {volume}: {out:?}"
        );
    }
    assert!(
        t.elapsed() < Duration::from_secs(30),
        "took {:?}",
        t.elapsed()
    );
}

/// Another tool's CNI configuration (podman's bridge, on the built-in network's subnet)
/// does not change the CLI's default network; CNI networks are chosen by name.
#[test]
fn a_foreign_cni_config_does_not_take_the_default_network() {
    let w = Wharf::new("esc-cni-default");
    w.pull_busybox();
    std::fs::write(
        w.path("empty-cni/87-podman.conflist"),
        r#"{"cniVersion": "0.4.0", "name": "podman", "plugins": [
            {"type": "bridge", "bridge": "cni-podman7", "isGateway": true, "ipMasq": true,
             "ipam": {"type": "host-local", "routes": [{"dst": "0.0.0.0/0"}],
                      "ranges": [[{"subnet": "10.88.0.0/16", "gateway": "10.88.0.1"}]]}}]}"#,
    )
    .unwrap();
    let routes = w.ok(&["run", "--rm", &busybox(), "ip", "route"]);
    assert_eq!(
        routes
            .lines()
            .filter(|l| l.starts_with("10.88.0.0/16"))
            .count(),
        1,
        "{routes}"
    );
    assert!(
        !w.host_links().iter().any(|l| l.contains("cni-podman7")),
        "the CNI network was used: {:?}",
        w.host_links()
    );
    // By name, the CNI network is used.
    let out = w.run(&[
        "run",
        "--rm",
        "--network",
        "podman",
        &busybox(),
        "ip",
        "route",
    ]);
    assert!(
        out.code == 0 && w.host_links().iter().any(|l| l.contains("cni-podman7")),
        "{out:?} {:?}",
        w.host_links()
    );
}

/// On a full disk, reading and removing still work (SQLite could not even make its WAL
/// index: every command failed in xShmMap); new containers fail with "no space left on".
#[test]
fn a_full_disk_still_lets_you_look_and_clean_up() {
    let w = Wharf::new("esc-full");
    let root = w.root();
    std::fs::create_dir_all(&root).unwrap();
    let c = std::ffi::CString::new(root.to_str().unwrap()).unwrap();
    // SAFETY: a tmpfs of the test's own on its own directory (the Env unmounts it).
    let mounted = unsafe {
        libc::mount(
            c"tmpfs".as_ptr(),
            c.as_ptr(),
            c"tmpfs".as_ptr(),
            0,
            c"size=48m,mode=0700".as_ptr().cast(),
        )
    };
    assert_eq!(mounted, 0);
    w.pull_busybox();
    w.ok(&[
        "run",
        "-d",
        "--name",
        "c",
        &busybox(),
        "sh",
        "-c",
        "echo started; sleep 1000",
    ]);
    w.ok(&["run", "-d", "--name", "d", &busybox(), "sleep", "1000"]);
    // Fill it up.
    let _ = std::process::Command::new("dd")
        .args(["if=/dev/zero", "bs=64k"])
        .arg(format!("of={}", root.join("fill").display()))
        .stderr(std::process::Stdio::null())
        .status();
    let st = rustix::fs::statvfs(&root).unwrap();
    assert_eq!(st.f_bavail, 0, "the test's tmpfs is not full");
    assert!(w.ok(&["ps"]).contains(" c "));
    assert!(w.ok(&["logs", "c"]).contains("started"));
    w.ok(&["inspect", "c"]);
    w.ok(&["stop", "-t", "1", "c"]);
    w.ok(&["rm", "c"]);
    w.ok(&["rm", "-f", "d"]);
    assert!(!w.ok(&["ps", "-a"]).contains("sleep 1000"));
    // Writing something new fails, and says why and where.
    let multilayer = busybox().replace("busybox", "multilayer");
    let out = w.run(&["run", "--rm", &multilayer, "true"]);
    assert!(
        out.code != 0
            && out
                .stderr
                .contains(&format!("no space left on {}", root.display())),
        "{out:?}"
    );
    w.ok(&["rmi", &busybox()]);
    // Once there is room again, all is as before (WAL mode included).
    std::fs::remove_file(root.join("fill")).unwrap();
    w.pull_busybox();
    assert_eq!(
        w.ok(&["run", "--rm", &busybox(), "echo", "room"]).trim(),
        "room"
    );
}

/// A deleted or truncated store is not silently a new, empty one: commands refuse with a
/// message that names the file and what to do; `wharf system repair` rebuilds it, and the
/// containers (running or exited), their pods and the images are back.
#[test]
fn a_lost_or_damaged_store_is_refused_and_repaired() {
    let w = Wharf::new("esc-store");
    w.pull_busybox();
    w.ok(&["run", "-d", "--name", "c", &busybox(), "sleep", "1000"]);
    w.ok(&["run", "--name", "x", &busybox(), "true"]);
    let db = w.root().join("wharf.db");
    for (how, damage) in [
        ("deleted", None),
        ("truncated to nothing", Some(0u64)),
        ("truncated", Some(6000u64)),
    ] {
        match damage {
            None => {
                for f in ["wharf.db", "wharf.db-wal", "wharf.db-shm"] {
                    let _ = std::fs::remove_file(w.root().join(f));
                }
            }
            Some(len) => {
                let _ = std::fs::remove_file(w.root().join("wharf.db-wal"));
                std::fs::OpenOptions::new()
                    .write(true)
                    .open(&db)
                    .unwrap()
                    .set_len(len)
                    .unwrap();
            }
        }
        let out = w.run(&["ps", "-a"]);
        assert!(
            out.code != 0
                && out.stderr.contains(db.to_str().unwrap())
                && out.stderr.contains("wharf system repair"),
            "{how}: {out:?}"
        );
        let out = w.run(&["rm", "-f", "c"]);
        assert!(
            out.code != 0 && !out.stderr.contains("no such container"),
            "{how}: {out:?}"
        );
        let report = w.ok(&["system", "repair"]);
        assert!(
            report.contains("2 pod(s) and 2 container(s) restored"),
            "{how}: {report}"
        );
        let ps = w.ok(&["ps", "-a"]);
        assert!(
            ps.lines().any(|l| l.contains(" c ") && l.contains("Up")),
            "{how}: {ps}"
        );
        assert!(
            ps.lines()
                .any(|l| l.contains(" x ") && l.contains("Exited (0)")),
            "{how}: {ps}"
        );
        assert!(w.ok(&["images"]).contains("fixtures/busybox"), "{how}");
        assert_eq!(w.run(&["system", "check"]).code, 0, "{how}");
    }
    // The container still runs, and removes cleanly.
    assert_eq!(w.ok(&["exec", "c", "echo", "alive"]).trim(), "alive");
    w.ok(&["rm", "-f", "c", "x"]);
    w.assert_clean();
}

/// A Secret's files, seen from the host, are root's alone: another local user reaches
/// neither them nor the pod's volume directory; the pod still reads them.
#[test]
fn secret_volumes_are_reachable_only_by_root() {
    let w = Wharf::new("esc-secret");
    w.pull_busybox();
    let manifest = w.path("secret.yaml");
    std::fs::write(
        &manifest,
        format!(
            "apiVersion: v1\nkind: Secret\nmetadata: {{name: s}}\nstringData: {{password: hunter2-marker}}\n---\n\
             apiVersion: v1\nkind: Pod\nmetadata: {{name: sec}}\nspec:\n  terminationGracePeriodSeconds: 1\n  containers:\n  - name: app\n    \
             image: {}\n    command: [sh, -c, 'cat /etc/s/password; echo; sleep 1000']\n    \
             volumeMounts: [{{name: s, mountPath: /etc/s}}]\n  volumes:\n  - {{name: s, secret: {{secretName: s}}}}\n",
            busybox()
        ),
    )
    .unwrap();
    w.ok(&["play", manifest.to_str().unwrap()]);
    let logs = w.wait_for_log("sec-app", "hunter2-marker");
    assert!(logs.contains("hunter2-marker"));
    let found: Vec<std::path::PathBuf> = walk_files(&w.root().join("pods"))
        .into_iter()
        .filter(|p| p.ends_with("password"))
        .collect();
    assert!(
        !found.is_empty(),
        "no secret file under {}",
        w.root().display()
    );
    for f in &found {
        let out = as_nobody(&["cat", f.to_str().unwrap()]);
        assert!(
            !out.status.success() && !String::from_utf8_lossy(&out.stdout).contains("hunter2"),
            "nobody read {}",
            f.display()
        );
        let volume_dir = f.parent().unwrap();
        let out = as_nobody(&["ls", volume_dir.to_str().unwrap()]);
        assert!(
            !out.status.success(),
            "nobody listed {}",
            volume_dir.display()
        );
    }
    w.ok(&["play", "--down", manifest.to_str().unwrap()]);
}

/// Every regular file below `dir` (root may walk anywhere).
fn walk_files(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let t = e.file_type().unwrap();
        if t.is_dir() {
            out.extend(walk_files(&e.path()));
        } else if t.is_file() {
            out.push(e.path());
        }
    }
    out
}
