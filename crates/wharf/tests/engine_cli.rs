//! `wharf run`, `ps`, `logs`, `exec`, `stop`, `rm`, `inspect` end to end: the real binary,
//! real shims and containers, the built-in network in a namespace the test made, and a
//! check after each test that nothing is left behind.

mod engine_support;

use engine_support::{Wharf, busybox, cap_set, wait_until};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

#[test]
fn run_rm_passes_output_and_exit_code_and_leaves_nothing() {
    let w = Wharf::new("cli-run-rm");
    w.pull_busybox();
    let out = w.run(&["run", "--rm", &busybox(), "sh", "-c", "echo hi; exit 3"]);
    assert_eq!(out.code, 3, "{out:?}");
    assert_eq!(out.stdout, "hi\n", "{out:?}");
    // It did exist: a pod and a container were made and removed again.
    let events = w.ok(&["events"]);
    for e in [
        "pod created",
        "container started",
        "container exited",
        "container removed",
        "pod removed",
    ] {
        assert!(events.contains(e), "no {e:?} in {events}");
    }
    w.assert_clean();
    // The bridge stays in the host namespace; nothing of the pod does.
    assert!(w.host_links().contains(&"wharf0".to_string()));
}

/// The mountinfo lines of the mounts at `point`.
fn mounts_at(point: &Path) -> Vec<String> {
    std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap()
        .lines()
        .filter(|l| l.split(' ').nth(4) == point.to_str())
        .map(str::to_string)
        .collect()
}

/// Where the run directory shares the layers' filesystem mount (as in the test worlds,
/// both in one temp dir), the image layers get a private mount of their own (the snapshot
/// directory bound onto itself), made by the first container and not again: overlayfs
/// looks through every mount attached to a layer's mount whenever it mounts a rootfs, and
/// each pod's mounts would hang there. With the run directory on a tmpfs of its own (as
/// /run is under systemd) nothing is bound.
#[test]
fn the_layers_sit_on_a_private_mount_made_once() {
    let w = Wharf::new("cli-layer-mount");
    w.pull_busybox();
    let snapshots = w.root().join("image/snapshots");
    let binds = || mounts_at(&snapshots);
    assert!(binds().is_empty(), "a pull mounts nothing: {:?}", binds());
    for _ in 0..2 {
        let out = w.run(&["run", "--rm", "--network", "none", &busybox(), "true"]);
        assert_eq!(out.code, 0, "{out:?}");
    }
    let found = binds();
    assert_eq!(
        found.len(),
        1,
        "one bind of {}: {found:?}",
        snapshots.display()
    );
    // The optional fields (before " - ") name no peer group: the mount is private.
    let optional = found[0].split(" - ").next().unwrap();
    assert!(
        !optional.contains("shared:") && !optional.contains("master:"),
        "not private: {optional}"
    );
    w.assert_clean();

    let tmpfs_run = Wharf::new("cli-layer-mount-tmpfs");
    std::fs::create_dir_all(tmpfs_run.run_dir()).unwrap();
    let made = Command::new("mount")
        .args(["-t", "tmpfs", "wharf-test-run"])
        .arg(tmpfs_run.run_dir())
        .status()
        .unwrap();
    assert!(made.success(), "mount a tmpfs at the run directory");
    tmpfs_run.pull_busybox();
    let out = tmpfs_run.run(&["run", "--rm", "--network", "none", &busybox(), "true"]);
    assert_eq!(out.code, 0, "{out:?}");
    let found = mounts_at(&tmpfs_run.root().join("image/snapshots"));
    assert!(found.is_empty(), "bound beside a tmpfs run dir: {found:?}");
}

#[test]
fn detached_container_lifecycle() {
    let w = Wharf::new("cli-detached");
    let id = w.ok(&[
        "run",
        "-d",
        "--name",
        "web",
        &busybox(),
        "sh",
        "-c",
        "echo started; sleep 1000",
    ]);
    let id = id.trim();
    assert_eq!(id.len(), 32, "run -d prints the container id: {id:?}");

    // ps: the table and JSON.
    let table = w.ok(&["ps"]);
    let header = table.lines().next().unwrap();
    for col in ["CONTAINER ID", "IMAGE", "STATUS", "NAMES"] {
        assert!(header.contains(col), "{table}");
    }
    let row = table
        .lines()
        .find(|l| l.starts_with(&id[..12]))
        .unwrap_or_else(|| panic!("web not in ps: {table}"));
    assert!(row.contains("web") && row.contains("Up "), "{row}");
    // docker's JSON lines and keys.
    let ps = w.ok(&["ps", "--format", "json"]);
    assert_eq!(ps.lines().count(), 1, "{ps}");
    let row: serde_json::Value = serde_json::from_str(&ps).unwrap();
    assert_eq!(row["ID"], &id[..12]);
    assert_eq!(row["Names"], "web");
    assert_eq!(row["State"], "running");
    assert!(row["Status"].as_str().unwrap().starts_with("Up "), "{row}");
    assert_eq!(row["Command"], "\"sh -c echo started; sleep 1000\"");

    // logs, exec (output and exit code).
    w.wait_for_log("web", "started");
    assert_eq!(w.ok(&["exec", "web", "sh", "-c", "echo $((1+2))"]), "3\n");
    let out = w.run(&["exec", "web", "sh", "-c", "echo out; echo err >&2; exit 7"]);
    assert_eq!(
        (out.code, out.stdout.as_str(), out.stderr.as_str()),
        (7, "out\n", "err\n")
    );

    // inspect.
    let j: serde_json::Value =
        serde_json::from_str(&w.ok(&["inspect", "web", "--format", "json"])).unwrap();
    let c = &j[0];
    assert_eq!(c["Id"], id);
    // docker's layout: the name with its slash, the image's id and the name asked for.
    assert_eq!(c["Name"], "/web");
    assert_eq!(c["Config"]["Image"], busybox().as_str());
    assert!(c["Image"].as_str().unwrap().starts_with("sha256:"), "{c}");
    assert_eq!(c["State"]["Status"], "running");
    assert!(c["State"]["StartedAt"].is_string(), "{c}");
    assert_eq!(c["State"]["ExitCode"], 0);
    assert_eq!(c["State"]["FinishedAt"], "0001-01-01T00:00:00Z");
    // State.Pid is the container's init on the host, as `nsenter -t` wants it.
    let pid = c["State"]["Pid"].as_i64().unwrap();
    assert!(pid > 1, "{c}");
    assert_eq!(c["State"]["Running"], true);
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap();
    // (sh exec'd its last command.)
    assert_eq!(cmdline, b"sleep\x001000\x00");
    assert_eq!(
        c["Config"]["Cmd"],
        serde_json::json!(["sh", "-c", "echo started; sleep 1000"])
    );
    let ip = c["NetworkSettings"]["IPs"][0].as_str().unwrap();
    assert!(ip.starts_with("10.88."), "{c}");
    assert!(
        std::path::Path::new(c["LogPath"].as_str().unwrap()).is_file(),
        "{c}"
    );

    // stop: sleep is PID 1 and has no handler, so SIGTERM does nothing and SIGKILL ends it
    // after the timeout (docker reports 137 too).
    assert_eq!(w.ok(&["stop", "-t", "1", "web"]), "web\n");
    let c = w.inspect("web");
    assert_eq!(
        (&c["State"]["Pid"], &c["State"]["Running"]),
        (&serde_json::json!(0), &serde_json::json!(false))
    );
    assert_eq!(c["State"]["Status"], "exited");
    assert_eq!(c["State"]["ExitCode"], 137, "{c}");
    assert_eq!(c["State"]["Signal"], 9, "{c}");
    assert!(c["State"]["FinishedAt"].is_string(), "{c}");
    assert!(!w.ok(&["ps"]).contains("web"));
    let all = w.ok(&["ps", "-a"]);
    assert!(
        all.lines()
            .any(|l| l.contains("web") && l.contains("Exited (137)")),
        "{all}"
    );
    // Its logs stay readable after it exited.
    assert!(w.ok(&["logs", "web"]).contains("started"));

    assert_eq!(w.ok(&["rm", "web"]), "web\n");
    let err = w.fails(1, &["inspect", "web"]);
    assert!(err.contains("web"), "{err}");
    w.assert_clean();
}

#[test]
fn environment_user_workdir_hostname_and_entrypoint() {
    let w = Wharf::new("cli-process");
    let env_file = w.path("env.list");
    std::fs::write(&env_file, "# comment\nFROM_FILE=file value\n").unwrap();
    let out = w.ok(&[
        "run",
        "--rm",
        "-e",
        "FOO=bar baz",
        "--env",
        "PATH_EXTRA=1",
        "--env-file",
        env_file.to_str().unwrap(),
        "-w",
        "/tmp",
        "--user",
        "1000:1001",
        "--hostname",
        "myhost",
        &busybox(),
        "sh",
        "-c",
        "echo \"$FOO|$PATH_EXTRA|$FROM_FILE\"; pwd; id -u; id -g; hostname; cat /etc/hostname",
    ]);
    assert_eq!(
        out,
        "bar baz|1|file value\n/tmp\n1000\n1001\nmyhost\nmyhost\n"
    );
    // A user by name, from the image's /etc/passwd.
    assert_eq!(
        w.ok(&["run", "--rm", "-u", "nobody", &busybox(), "id", "-u"]),
        "65534\n"
    );
    // A missing working directory is made, as docker makes it.
    assert_eq!(
        w.ok(&["run", "--rm", "-w", "/new/dir", &busybox(), "pwd"]),
        "/new/dir\n"
    );
    // exec -u takes names as run -u does, and a uid the image does not know gets gid 0
    // (as docker gives it, for run and exec alike).
    w.ok(&["run", "-d", "--name", "execu", &busybox(), "sleep", "1000"]);
    let nobody = w.ok(&["exec", "execu", "grep", "^nobody:", "/etc/passwd"]);
    let f: Vec<&str> = nobody.trim().split(':').collect();
    assert_eq!(
        w.ok(&["exec", "-u", "nobody", "execu", "sh", "-c", "id -u; id -g"]),
        format!("{}\n{}\n", f[2], f[3])
    );
    assert_eq!(
        w.ok(&["exec", "-u", "1000", "execu", "sh", "-c", "id -u; id -g"]),
        "1000\n0\n"
    );
    assert_eq!(
        w.ok(&[
            "run",
            "--rm",
            "-u",
            "1000",
            &busybox(),
            "sh",
            "-c",
            "id -u; id -g"
        ]),
        "1000\n0\n"
    );
    let out = w.run(&["exec", "-u", "nosuch", "execu", "true"]);
    assert_ne!(out.code, 0);
    assert!(
        out.stderr.contains(
            "exec in container execu: user \"nosuch\" not found in the image's /etc/passwd"
        ),
        "{out:?}"
    );
    w.ok(&["rm", "-f", "execu"]);
    // --entrypoint replaces the image's; the command becomes its arguments.
    assert_eq!(
        w.ok(&[
            "run",
            "--rm",
            "--entrypoint",
            "/bin/echo from-entrypoint",
            &busybox(),
            "and",
            "args"
        ]),
        "from-entrypoint and args\n"
    );
    // Without a command, the image's Cmd (sh) runs; with stdin closed it exits 0.
    assert_eq!(w.run(&["run", "--rm", &busybox()]).code, 0);
    w.assert_clean();
}

/// As docker: processes get umask 0022 (not the shim's own 0077), and the directories made
/// for a volume's mount point can be traversed by a non-root user.
#[test]
fn umask_and_mount_point_parents_are_dockers() {
    let w = Wharf::new("cli-umask");
    let vol = w.path("vol");
    std::fs::create_dir_all(&vol).unwrap();
    std::fs::write(vol.join("hello"), "hi").unwrap();
    let mount = format!("{}:/made/for/it", vol.display());
    let out = w.ok(&[
        "run",
        "--rm",
        "-u",
        "1000",
        "-v",
        &mount,
        &busybox(),
        "sh",
        "-c",
        "umask; ls /made/for/it; stat -c %a /made /made/for",
    ]);
    assert_eq!(out, "0022\nhello\n755\n755\n");
}

#[test]
fn volumes_and_read_only_root() {
    let w = Wharf::new("cli-volumes");
    let ro = w.path("vol-ro");
    let rw = w.path("vol-rw");
    std::fs::create_dir_all(&ro).unwrap();
    std::fs::create_dir_all(&rw).unwrap();
    std::fs::write(ro.join("data"), "from the host\n").unwrap();
    let out = w.run(&[
        "run",
        "--rm",
        "-v",
        &format!("{}:/ro:ro", ro.display()),
        "-v",
        &format!("{}:/rw", rw.display()),
        &busybox(),
        "sh",
        "-c",
        "cat /ro/data; echo written > /rw/out; touch /ro/new && echo ro-writable; \
         rm /ro/data && echo ro-removable; echo done",
    ]);
    assert_eq!(out.code, 0, "{out:?}");
    assert_eq!(out.stdout, "from the host\ndone\n", "{out:?}");
    assert!(out.stderr.contains("Read-only file system"), "{out:?}");
    assert_eq!(
        std::fs::read_to_string(rw.join("out")).unwrap(),
        "written\n"
    );
    assert!(!ro.join("new").exists());
    assert!(ro.join("data").exists());

    // --read-only: the root filesystem refuses writes; volumes still take them.
    let out = w.run(&[
        "run",
        "--rm",
        "--read-only",
        "-v",
        &format!("{}:/rw", rw.display()),
        &busybox(),
        "sh",
        "-c",
        "touch /probe && echo root-writable; touch /etc/probe && echo etc-writable; \
         echo again > /rw/out2 && echo volume-writable",
    ]);
    assert_eq!(out.code, 0, "{out:?}");
    assert_eq!(out.stdout, "volume-writable\n", "{out:?}");
    assert!(out.stderr.contains("Read-only file system"), "{out:?}");
    // Without it the root is writable (the check above is not vacuous).
    assert_eq!(
        w.ok(&[
            "run",
            "--rm",
            &busybox(),
            "sh",
            "-c",
            "touch /probe && echo ok"
        ]),
        "ok\n"
    );
    // A bad volume is refused before anything is made.
    let err = w.fails(
        125,
        &["run", "--rm", "-v", "./relative:/x", &busybox(), "true"],
    );
    assert!(
        err.contains("./relative:/x") && err.contains("absolute"),
        "{err}"
    );
    let missing = w.path("missing");
    let err = w.fails(
        125,
        &[
            "run",
            "--rm",
            "-v",
            &format!("{}:/x", missing.display()),
            &busybox(),
            "true",
        ],
    );
    assert!(err.contains("does not exist"), "{err}");
    w.assert_clean();
}

/// The value of a cgroup file, inside the container: cgroup v1 per-controller path first,
/// else the unified one.
fn cgroup_value_script(v1: &str, v2: &str) -> String {
    format!("cat /sys/fs/cgroup/{v1} 2>/dev/null || cat /sys/fs/cgroup/{v2}")
}

#[test]
fn memory_pids_cpu_limits_and_capabilities() {
    let w = Wharf::new("cli-limits");
    w.ok(&[
        "run",
        "-d",
        "--name",
        "lim",
        "--memory",
        "64m",
        "--pids-limit",
        "50",
        "--cpus",
        "0.5",
        &busybox(),
        "sleep",
        "1000",
    ]);
    let mem = w.ok(&[
        "exec",
        "lim",
        "sh",
        "-c",
        &cgroup_value_script("memory/memory.limit_in_bytes", "memory.max"),
    ]);
    assert_eq!(mem.trim(), (64u64 << 20).to_string());
    // Swap as docker allows it by default: as much again (v1 counts memory+swap, v2 swap
    // alone), where the kernel accounts swap.
    let swap = w.ok(&[
        "exec",
        "lim",
        "sh",
        "-c",
        "cat /sys/fs/cgroup/memory/memory.memsw.limit_in_bytes 2>/dev/null \
         || cat /sys/fs/cgroup/memory.swap.max 2>/dev/null || echo unaccounted",
    ]);
    let swap = swap.trim();
    assert!(
        swap == "unaccounted"
            || swap == (128u64 << 20).to_string()
            || swap == (64u64 << 20).to_string(),
        "memory+swap: {swap}"
    );
    let pids = w.ok(&[
        "exec",
        "lim",
        "sh",
        "-c",
        &cgroup_value_script("pids/pids.max", "pids.max"),
    ]);
    assert_eq!(pids.trim(), "50");
    let cpu = w.ok(&[
        "exec",
        "lim",
        "sh",
        "-c",
        &cgroup_value_script("cpu/cpu.cfs_quota_us", "cpu.max"),
    ]);
    let quota: u64 = cpu.split_whitespace().next().unwrap().parse().unwrap();
    assert_eq!(quota, 50_000, "0.5 CPU of a 100 ms period: {cpu}");
    // update changes them while it runs.
    assert_eq!(
        w.ok(&[
            "update",
            "--memory",
            "32m",
            "--memory-swap",
            "64m",
            "--cpus",
            "1.5",
            "--pids-limit",
            "20",
            "lim"
        ]),
        "lim\n"
    );
    let value = |v1: &str, v2: &str| {
        w.ok(&["exec", "lim", "sh", "-c", &cgroup_value_script(v1, v2)])
            .split_whitespace()
            .next()
            .unwrap()
            .to_string()
    };
    assert_eq!(
        value("memory/memory.limit_in_bytes", "memory.max"),
        (32u64 << 20).to_string()
    );
    assert_eq!(value("cpu/cpu.cfs_quota_us", "cpu.max"), "150000");
    assert_eq!(value("pids/pids.max", "pids.max"), "20");
    let err = w.fails(1, &["update", "lim"]);
    assert!(err.contains("nothing to update"), "{err}");
    let err = w.fails(
        1,
        &["update", "--memory", "64m", "--memory-swap", "32m", "lim"],
    );
    assert!(
        err.contains("--memory-swap must be at least --memory"),
        "{err}"
    );
    w.ok(&[
        "update",
        "--memory",
        "64m",
        "--memory-swap",
        "128m",
        "--cpus",
        "0.5",
        "--pids-limit",
        "50",
        "lim",
    ]);
    // The same limits from the host: the container's cgroup is its pod's (a standalone
    // container's, docker's layout), below the engine's parent.
    let pid = w.pids("lim")[0];
    let pod = w.inspect("lim")["PodId"].as_str().unwrap().to_string();
    let cg = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).unwrap();
    let mem_path = cg
        .lines()
        .find_map(|l| {
            let mut f = l.splitn(3, ':');
            let (_, ctrls, path) = (f.next()?, f.next()?, f.next()?);
            (ctrls.split(',').any(|c| c == "memory") || ctrls.is_empty()).then(|| path.to_string())
        })
        .unwrap();
    assert_eq!(mem_path, format!("{}/{pod}", w.env.cgroup_parent));
    // Forking stops at the pids limit: 60 background sleeps, at most 50 processes.
    let out = w.run(&[
        "exec",
        "lim",
        "sh",
        "-c",
        "for i in $(seq 1 60); do sleep 300 </dev/null >/dev/null 2>&1 & done",
    ]);
    assert!(
        out.stderr.contains("fork") || out.stderr.contains("Resource temporarily unavailable"),
        "no fork failure: {out:?}"
    );
    let running = w.pids("lim").len();
    assert!(
        (40..=50).contains(&running),
        "{running} processes with --pids-limit 50"
    );
    w.ok(&["rm", "-f", "lim"]);

    // Capabilities: the default set has CHOWN (0) but not NET_ADMIN (12); --cap-drop and
    // --cap-add change exactly those.
    const CHOWN: u64 = 1 << 0;
    const NET_ADMIN: u64 = 1 << 12;
    const NET_RAW: u64 = 1 << 13;
    let default = cap_set(
        &w.ok(&["run", "--rm", &busybox(), "cat", "/proc/self/status"]),
        "CapEff",
    );
    assert!(
        default & CHOWN != 0 && default & NET_RAW != 0,
        "{default:x}"
    );
    assert!(default & NET_ADMIN == 0, "{default:x}");
    let changed = cap_set(
        &w.ok(&[
            "run",
            "--rm",
            "--cap-drop",
            "CHOWN",
            "--cap-drop",
            "net_raw",
            "--cap-add",
            "CAP_NET_ADMIN",
            &busybox(),
            "cat",
            "/proc/self/status",
        ]),
        "CapEff",
    );
    assert_eq!(
        changed,
        (default & !CHOWN & !NET_RAW) | NET_ADMIN,
        "{changed:x}"
    );
    // Dropped really means refused: chown fails without CAP_CHOWN.
    let out = w.run(&[
        "run",
        "--rm",
        "--cap-drop",
        "CHOWN",
        &busybox(),
        "sh",
        "-c",
        "touch /f && chown 1000 /f",
    ]);
    assert_ne!(out.code, 0, "{out:?}");
    assert!(out.stderr.contains("Operation not permitted"), "{out:?}");
    let all_dropped = cap_set(
        &w.ok(&[
            "run",
            "--rm",
            "--cap-drop",
            "ALL",
            &busybox(),
            "cat",
            "/proc/self/status",
        ]),
        "CapEff",
    );
    assert_eq!(all_dropped, 0);
    // Seccomp off, and an AppArmor profile by name (docker's --security-opt spellings):
    // the profile reaches the runtime, which applies it where the host has AppArmor and
    // refuses clearly where it has not.
    let status = w.ok(&[
        "run",
        "--rm",
        "--security-opt",
        "seccomp=unconfined",
        &busybox(),
        "cat",
        "/proc/self/status",
    ]);
    assert!(
        status
            .lines()
            .any(|l| l.split_whitespace().eq(["Seccomp:", "0"])),
        "{status}"
    );
    let out = w.run(&[
        "run",
        "--rm",
        "--security-opt",
        "apparmor=wharf-test-profile",
        &busybox(),
        "true",
    ]);
    if !std::path::Path::new("/sys/module/apparmor/parameters/enabled").exists() {
        assert_eq!(out.code, 125, "{out:?}");
        assert!(
            out.stderr
                .contains("\"wharf-test-profile\" is set, but AppArmor is not enabled"),
            "{out:?}"
        );
    }
    let out = w.run(&[
        "run",
        "--rm",
        "--security-opt",
        "label=x",
        &busybox(),
        "true",
    ]);
    assert_eq!(out.code, 125, "{out:?}");
    assert!(
        out.stderr
            .contains("unsupported --security-opt \"label=x\""),
        "{out:?}"
    );
    w.assert_clean();
}

#[test]
fn errors_name_the_object_and_the_cause() {
    let w = Wharf::new("cli-errors");
    // An image the registry does not have: run fails as docker does (125).
    let missing = format!(
        "{}/fixtures/no-such-image:latest",
        engine_support::registry()
    );
    let err = w.fails(125, &["run", "--rm", &missing, "true"]);
    assert!(
        err.starts_with(&format!("wharf: pulling {missing}: manifest unknown"))
            && err.matches("pulling").count() == 1,
        "said once: {err}"
    );
    w.assert_clean();
    let err = w.fails(125, &["run", "--rm", "--pull", "never", &busybox(), "true"]);
    assert!(err.contains("--pull=never"), "{err}");

    // Containers that do not exist.
    for args in [
        &["stop", "ghost"][..],
        &["rm", "ghost"],
        &["logs", "ghost"],
        &["kill", "ghost"],
        &["exec", "ghost", "true"],
        &["inspect", "ghost"],
        &["wait", "ghost"],
    ] {
        let err = w.fails(1, args);
        assert!(err.contains("ghost"), "wharf {args:?}: {err}");
        assert!(err.starts_with("wharf: "), "wharf {args:?}: {err}");
    }
    let err = w.fails(1, &["pod", "rm", "ghost-pod"]);
    assert!(err.contains("no such pod: ghost-pod"), "{err}");
    let err = w.fails(125, &["run", "--pod", "ghost-pod", &busybox(), "true"]);
    assert!(err.contains("no such pod: ghost-pod"), "{err}");

    // A name in use: refused, and the failed run leaves nothing of its own.
    w.ok(&["run", "-d", "--name", "dup", &busybox(), "sleep", "1000"]);
    let err = w.fails(
        125,
        &["run", "-d", "--name", "dup", &busybox(), "sleep", "1000"],
    );
    assert!(
        err.contains("\"dup\"") && err.contains("already in use") && err.contains("container"),
        "{err}"
    );
    assert_eq!(w.ok(&["ps", "-a", "-q"]).lines().count(), 1);
    assert_eq!(w.ok(&["pod", "ls", "-q"]).lines().count(), 1);
    // A running container is not removed without --force.
    let err = w.fails(1, &["rm", "dup"]);
    assert!(err.contains("dup") && err.contains("running"), "{err}");
    w.ok(&["pod", "create", "--name", "pod-dup"]);
    let err = w.fails(1, &["pod", "create", "--name", "pod-dup"]);
    assert!(
        err.contains("\"pod-dup\"") && err.contains("already in use"),
        "{err}"
    );
    // Bad flags are usage errors.
    let out = w.run(&["run", "--restart", "sometimes", &busybox(), "true"]);
    assert_eq!(out.code, 125, "{out:?}");
    assert!(out.stderr.contains("sometimes"), "{out:?}");
    let out = w.run(&["run", "-p", "99999:80", &busybox(), "true"]);
    assert_eq!(out.code, 125, "{out:?}");
    assert!(out.stderr.contains("99999"), "{out:?}");

    // A host port taken by another container: said once, naming the port and the holder.
    w.ok(&[
        "run",
        "-d",
        "--name",
        "port-a",
        "-p",
        "8081:80",
        &busybox(),
        "sleep",
        "1000",
    ]);
    let err = w.fails(
        125,
        &[
            "run",
            "-d",
            "--name",
            "port-b",
            "-p",
            "8081:80",
            &busybox(),
            "true",
        ],
    );
    assert_eq!(
        err.trim(),
        "wharf: host port 8081/tcp is already mapped to port-a (port 80)"
    );
    w.ok(&["rm", "-f", "port-a"]);
    w.ok(&["rm", "-f", "dup"]);
    w.ok(&["pod", "rm", "pod-dup"]);
    assert!(wait_until(Duration::from_secs(10), || w
        .own_processes()
        .is_empty()));
    w.assert_clean();
}

/// A host without nftables (a fresh minimal Debian): the built-in network says what to
/// install, once, and the failed run leaves nothing behind. The test hides libnftables and
/// the nft command in a mount namespace of its own.
#[test]
fn the_systemd_cgroup_manager_is_a_clear_error_where_systemd_is_not_init() {
    if std::path::Path::new("/run/systemd/system").exists() {
        eprintln!("skipped: this host runs systemd (tests/vm/run.sh checks the driver there)");
        return;
    }
    let w = Wharf::new("cli-cgroup-manager");
    w.pull_busybox();
    let said = |err: &str| {
        assert!(
            err.starts_with(
                "wharf: the systemd cgroup driver needs systemd as the init system: this host \
                 was not booted with systemd (PID 1 is"
            ) && err.contains("use the cgroupfs driver"),
            "{err}"
        );
        assert_eq!(
            err.matches("systemd cgroup driver").count(),
            1,
            "once: {err}"
        );
    };
    said(&w.fails(
        125,
        &[
            "--cgroup-manager",
            "systemd",
            "run",
            "--rm",
            &busybox(),
            "true",
        ],
    ));
    said(&w.fails(1, &["--cgroup-manager", "systemd", "ps"]));
    // From the config file too, where the flag still wins.
    let cfg = w.path("no-config.json");
    std::fs::write(&cfg, r#"{"engine": {"cgroup-manager": "systemd"}}"#).unwrap();
    said(&w.fails(1, &["ps"]));
    let out = w.ok(&[
        "--cgroup-manager",
        "cgroupfs",
        "run",
        "--rm",
        &busybox(),
        "echo",
        "hi",
    ]);
    assert_eq!(out, "hi\n");
    std::fs::write(&cfg, r#"{"engine": {"cgroup-manager": "upstart"}}"#).unwrap();
    let err = w.fails(1, &["ps"]);
    assert!(
        err.contains(&format!("config file {}", cfg.display()))
            && err.contains("invalid cgroup manager \"upstart\""),
        "{err}"
    );
    std::fs::remove_file(&cfg).unwrap();
    let err = w.fails(2, &["--cgroup-manager", "upstart", "ps"]);
    assert!(err.contains("cgroupfs, systemd"), "{err}");
    // The daemon refuses to start on it, naming the same cause.
    let out = w
        .cmd(&["--cgroup-manager", "systemd", "daemon", "--listen"])
        .arg(w.path("d.sock"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    said(String::from_utf8_lossy(&out.stderr).trim_end());
    let info = w.ok(&["info"]);
    assert!(info.contains(" Cgroup Driver: cgroupfs\n"), "{info}");
    w.assert_clean();
}

#[test]
fn a_host_without_nftables_is_told_what_to_install() {
    let w = Wharf::new("cli-no-nft");
    w.pull_busybox();
    let run = w.cmd(&["run", "--rm", &busybox(), "true"]);
    let mut hide = String::from("mount -t tmpfs none /usr/sbin && mount -t tmpfs none /sbin");
    for lib in [
        "/usr/lib/x86_64-linux-gnu/libnftables.so.1",
        "/usr/lib/aarch64-linux-gnu/libnftables.so.1",
        "/lib/x86_64-linux-gnu/libnftables.so.1",
    ] {
        if Path::new(lib).exists() {
            hide.push_str(&format!(" && mount --bind /dev/null {lib}"));
        }
    }
    let mut c = Command::new("unshare");
    c.args(["-m", "--propagation", "private", "sh", "-c"])
        .arg(format!("{hide} && exec \"$0\" \"$@\""))
        .arg(run.get_program())
        .args(run.get_args())
        .stdin(Stdio::null());
    for (k, v) in run.get_envs() {
        match v {
            Some(v) => c.env(k, v),
            None => c.env_remove(k),
        };
    }
    let out = c.output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(125), "{err}");
    assert_eq!(
        err.trim(),
        "wharf: nftables: network wharf: neither libnftables.so.1 nor the nft command is \
         installed (apt-get install nftables)"
    );
    w.assert_clean();
}

#[test]
fn create_start_wait_kill_logs_tail_stats_and_pod_stop() {
    let w = Wharf::new("cli-more");
    // create makes a container that does not run until start.
    let id = w.ok(&[
        "create",
        "--name",
        "later",
        &busybox(),
        "sh",
        "-c",
        "for i in 1 2 3 4 5; do echo line$i; done; exit 4",
    ]);
    assert_eq!(id.trim().len(), 32, "{id}");
    assert_eq!(w.inspect("later")["State"]["Status"], "created");
    assert!(w.ok(&["ps", "-a"]).contains("Created"));
    assert_eq!(w.ok(&["logs", "later"]), "");
    assert_eq!(w.ok(&["start", "later"]), "later\n");
    assert_eq!(w.ok(&["wait", "later"]), "4\n");
    let c = w.inspect("later");
    assert_eq!(
        (
            c["State"]["Status"].as_str(),
            c["State"]["ExitCode"].as_i64()
        ),
        (Some("exited"), Some(4)),
        "{c:#}"
    );
    assert_eq!(
        w.ok(&["logs", "later"]),
        "line1\nline2\nline3\nline4\nline5\n"
    );
    assert_eq!(w.ok(&["logs", "--tail", "2", "later"]), "line4\nline5\n");
    assert_eq!(w.ok(&["logs", "-n", "1", "later"]), "line5\n");
    assert_eq!(w.ok(&["logs", "-n", "all", "later"]).lines().count(), 5);
    let stamped = w.ok(&["logs", "-t", "--tail", "1", "later"]);
    let (time, line) = stamped.trim_end().split_once(' ').unwrap();
    assert!(wharf_sys::time::parse_rfc3339(time).is_some(), "{stamped}");
    assert_eq!(line, "line5");
    assert_eq!(w.ok(&["logs", "--since", "1h", "later"]).lines().count(), 5);
    // An exited container starts again (docker's start), into the same log.
    let first_start = w.inspect("later")["State"]["StartedAt"].clone();
    assert_eq!(w.ok(&["start", "later"]), "later\n");
    assert_eq!(w.ok(&["wait", "later"]), "4\n");
    assert_eq!(w.ok(&["logs", "later"]).lines().count(), 10);
    let c = w.inspect("later");
    assert_ne!(c["State"]["StartedAt"], first_start, "{c:#}");
    assert_eq!(c["RestartCount"], 0, "{c:#}");

    // A start that fails shows why: State.Error, the exit code, an event and the log.
    let id = w.ok(&["create", "--name", "broken", &busybox(), "sleep", "1000"]);
    let rootfs = w
        .run_dir()
        .join("containers")
        .join(id.trim())
        .join("rootfs");
    for f in ["bin/sleep", "bin/busybox"] {
        std::fs::remove_file(rootfs.join(f)).unwrap();
    }
    let err = w.fails(127, &["start", "broken"]);
    assert!(err.contains("executable file not found"), "{err}");
    let c = w.inspect("broken");
    assert_eq!(c["State"]["Status"], "created", "{c:#}");
    assert_eq!(c["State"]["ExitCode"], 127, "{c:#}");
    assert!(
        c["State"]["Error"]
            .as_str()
            .unwrap()
            .contains("\"sleep\": executable file not found"),
        "{c:#}"
    );
    let logs = w.run(&["logs", "broken"]);
    assert!(
        logs.stderr.contains("executable file not found"),
        "{logs:?}"
    );
    assert!(w.ok(&["events"]).contains("container start-failed"));
    w.ok(&["rm", "broken"]);

    // stop and restart work on many containers at once: three containers that ignore
    // SIGTERM stop within about one grace period, not three.
    for n in ["s1", "s2"] {
        w.ok(&["run", "-d", "--name", n, &busybox(), "sleep", "1000"]);
    }
    w.ok(&[
        "run",
        "-d",
        "--name",
        "s3",
        "-l",
        "tier=batch",
        &busybox(),
        "sleep",
        "1000",
    ]);
    assert_eq!(
        w.ok(&["start", "s1"]),
        "s1\n",
        "starting a running one does nothing"
    );
    // ps --filter, docker's keys; a status filter sees stopped ones without -a.
    let names = |filters: &[&str]| {
        let mut args = vec!["ps", "--format", "json"];
        for f in filters {
            args.extend(["--filter", f]);
        }
        let mut n: Vec<String> = w
            .ok(&args)
            .lines()
            .map(|l| {
                let c: serde_json::Value = serde_json::from_str(l).unwrap();
                c["Names"].as_str().unwrap().to_string()
            })
            .collect();
        n.sort();
        n
    };
    assert_eq!(names(&["name=s2"]), ["s2"]);
    assert_eq!(names(&["status=exited"]), ["later"]);
    assert_eq!(names(&["status=running", "name=s"]), ["s1", "s2", "s3"]);
    assert_eq!(names(&["label=tier"]), ["s3"]);
    assert_eq!(names(&["label=tier=batch"]), ["s3"]);
    assert!(names(&["label=tier=web"]).is_empty());
    let s2 = w.inspect("s2")["Id"].as_str().unwrap()[..6].to_string();
    assert_eq!(names(&[&format!("id={s2}")]), ["s2"]);
    let err = w.fails(1, &["ps", "--filter", "colour=red"]);
    assert!(err.contains("invalid --filter \"colour=red\""), "{err}");
    // rename: the container and its own pod; the old name is free again; logs stay.
    w.ok(&["rename", "s2", "s2b"]);
    assert_eq!(names(&["name=s2"]), ["s2b"]);
    assert_eq!(w.inspect("s2b")["Pod"], "s2b");
    let err = w.fails(1, &["rename", "s2b", "s1"]);
    assert!(err.contains("s1"), "{err}");
    let err = w.fails(1, &["rename", "s2b", "bad/name"]);
    assert!(err.contains("invalid container name"), "{err}");
    w.ok(&["run", "-d", "--name", "s2", &busybox(), "true"]);
    w.ok(&["rm", "-f", "s2"]);
    w.ok(&["rename", "s2b", "s2"]);
    assert!(w.ok(&["events"]).contains("container renamed"));
    let pid = w.inspect("s2")["State"]["Pid"].as_i64().unwrap();
    let t = std::time::Instant::now();
    assert_eq!(
        w.ok(&["restart", "-t", "1", "s1", "s2", "s3"]),
        "s1\ns2\ns3\n"
    );
    let took = t.elapsed();
    assert!(
        took < Duration::from_millis(2500),
        "restart of three took {took:?}"
    );
    let c = w.inspect("s2");
    assert_eq!(c["State"]["Status"], "running");
    assert_ne!(c["State"]["Pid"].as_i64().unwrap(), pid);
    let t = std::time::Instant::now();
    assert_eq!(w.ok(&["stop", "-t", "1", "s1", "s2", "s3"]), "s1\ns2\ns3\n");
    let took = t.elapsed();
    assert!(
        took < Duration::from_millis(2500),
        "stop of three took {took:?}"
    );
    // pause freezes a container's processes, unpause thaws them; a paused one stops.
    w.ok(&[
        "run",
        "-d",
        "--name",
        "tick",
        &busybox(),
        "sh",
        "-c",
        "while :; do echo t; sleep 0.05; done",
    ]);
    w.wait_for_log("tick", "t");
    assert_eq!(w.ok(&["pause", "tick"]), "tick\n");
    assert_eq!(w.inspect("tick")["State"]["Status"], "paused");
    assert!(w.ok(&["ps"]).contains("Paused"));
    let frozen = w.ok(&["logs", "tick"]).lines().count();
    std::thread::sleep(Duration::from_millis(400));
    assert_eq!(w.ok(&["logs", "tick"]).lines().count(), frozen);
    let err = w.fails(1, &["pause", "tick"]);
    assert!(
        err.contains("container tick is paused, not running"),
        "{err}"
    );
    assert_eq!(w.ok(&["unpause", "tick"]), "tick\n");
    assert_eq!(w.inspect("tick")["State"]["Status"], "running");
    assert!(wait_until(Duration::from_secs(5), || w
        .ok(&["logs", "tick"])
        .lines()
        .count()
        > frozen));
    w.ok(&["pause", "tick"]);
    w.ok(&["stop", "-t", "1", "tick"]);
    assert_eq!(w.inspect("tick")["State"]["Status"], "exited");
    let events = w.ok(&["events"]);
    assert!(
        events.contains("container paused") && events.contains("container unpaused"),
        "{events}"
    );
    w.ok(&["rm", "tick"]);
    let out = w.run(&["stop", "s1", "ghost"]);
    assert_eq!((out.code, out.stdout.as_str()), (1, "s1\n"), "{out:?}");
    assert!(out.stderr.contains("no such container: ghost"), "{out:?}");
    w.ok(&["rm", "s1", "s2", "s3"]);

    // kill with a signal the process handles, then the default (KILL).
    w.ok(&[
        "run",
        "-d",
        "--name",
        "trap",
        &busybox(),
        "sh",
        "-c",
        "trap 'echo got-usr1' USR1; echo ready; while :; do sleep 0.1; done",
    ]);
    w.wait_for_log("trap", "ready");
    assert_eq!(w.ok(&["kill", "-s", "USR1", "trap"]), "trap\n");
    w.wait_for_log("trap", "got-usr1");
    assert_eq!(w.inspect("trap")["State"]["Status"], "running");
    // stats: one sample of the running container from its cgroup.
    // docker's keys, a line per container; an unlimited container's limit is the host's
    // memory (not 2^63).
    let stats = w.ok(&["stats", "--no-stream", "--format", "json"]);
    assert_eq!(stats.lines().count(), 1, "{stats}");
    let stats: serde_json::Value = serde_json::from_str(&stats).unwrap();
    assert_eq!(stats["Name"], "trap");
    let (usage, limit) = stats["MemUsage"]
        .as_str()
        .unwrap()
        .split_once(" / ")
        .unwrap();
    assert!(usage.ends_with("iB") && !usage.starts_with("0"), "{stats}");
    let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap();
    let total_kb: f64 = meminfo
        .lines()
        .next()
        .unwrap()
        .split_whitespace()
        .nth(1)
        .unwrap()
        .parse()
        .unwrap();
    let limit_gib: f64 = limit.trim_end_matches("GiB").parse().unwrap();
    assert!((limit_gib - total_kb / 1048576.0).abs() < 0.01, "{stats}");
    assert!(
        stats["PIDs"].as_str().unwrap().parse::<u32>().unwrap() >= 1,
        "{stats}"
    );
    assert_eq!(
        w.ok(&[
            "stats",
            "--no-stream",
            "--format",
            "{{.Name}} {{.PIDs}}",
            "trap"
        ]),
        format!("trap {}\n", stats["PIDs"].as_str().unwrap())
    );
    let table = w.ok(&["stats", "--no-stream"]);
    assert!(
        table.starts_with("CONTAINER ID") && table.contains("trap"),
        "{table}"
    );
    w.ok(&["kill", "trap"]);
    assert_eq!(w.ok(&["wait", "trap"]), "137\n");
    let c = w.inspect("trap");
    assert_eq!(c["State"]["Signal"], 9, "{c:#}");

    // pod stop stops every container of the pod; pod rm without -f then works.
    w.ok(&["pod", "create", "--name", "grp"]);
    for n in ["g1", "g2"] {
        w.ok(&[
            "run",
            "-d",
            "--name",
            n,
            "--pod",
            "grp",
            &busybox(),
            "sleep",
            "1000",
        ]);
    }
    let err = w.fails(1, &["pod", "rm", "grp"]);
    assert!(err.contains("grp") && err.contains("running"), "{err}");
    assert_eq!(w.ok(&["pod", "stop", "-t", "1", "grp"]), "grp\n");
    for n in ["g1", "g2"] {
        assert_eq!(w.inspect(n)["State"]["Status"], "exited", "{n}");
    }
    assert_eq!(w.ok(&["ps", "--pod", "grp", "-a", "-q"]).lines().count(), 2);
    let pods: serde_json::Value =
        serde_json::from_str(&w.ok(&["pod", "ls", "--format", "json"])).unwrap();
    assert_eq!(pods.as_array().unwrap().len(), 3, "{pods}");
    w.ok(&["pod", "rm", "grp"]);
    w.ok(&["rm", "later", "trap"]);
    w.assert_clean();
}

#[test]
fn a_reader_that_goes_away_ends_listing_commands_quietly() {
    use std::os::fd::{FromRawFd, OwnedFd};
    use std::os::unix::process::ExitStatusExt;
    let w = Wharf::new("cli-pipe");
    w.ok(&["run", "--rm", &busybox(), "true"]);
    for args in [&["events"][..], &["ps", "-a"], &["pod", "ls"]] {
        // `wharf events | head -0`: the read end is closed before anything is written.
        let mut fds = [0; 2];
        // SAFETY: pipe(2) into a local array.
        assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
        // SAFETY: both fds are ours and open.
        let (r, wr) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
        drop(r);
        let out = w.cmd(args).stdout(wr).output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!stderr.contains("panicked"), "wharf {args:?}: {stderr}");
        assert!(
            out.status.signal() == Some(libc::SIGPIPE) || out.status.success(),
            "wharf {args:?}: {:?} {stderr}",
            out.status
        );
    }
    w.assert_clean();
}

/// One grammar for the whole command line: global options before the command, `help
/// <command>`, help of every command (completion included).
#[test]
fn one_grammar_for_the_whole_command_line() {
    let w = Wharf::new("cli-grammar");
    let bin = env!("CARGO_BIN_EXE_wharf");
    let run = |args: &[&str]| {
        std::process::Command::new(bin)
            .args(args)
            .env_remove("WHARF_ROOT")
            .env_remove("WHARF_RUN")
            .output()
            .unwrap()
    };
    let root = w.root();
    let run_dir = w.run_dir();
    let out = run(&[
        "--root",
        root.to_str().unwrap(),
        "--run-dir",
        run_dir.to_str().unwrap(),
        "ps",
    ]);
    assert!(out.status.success(), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stdout).starts_with("CONTAINER ID"));
    assert!(
        run_dir.exists(),
        "--run-dir before the command was not used"
    );
    let out = run(&["help", "run"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && text.contains("Usage: wharf run"),
        "{text}"
    );
    let out = run(&["completion", "--help"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && text.contains("bash, zsh or fish"),
        "{text}"
    );
    let out = run(&["completion", "bash"]);
    assert!(out.status.success() && String::from_utf8_lossy(&out.stdout).contains("wharf"));
    let out = run(&["no-such-command"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("unrecognized subcommand"));
}

/// Errors keep their kind up to the exit status, as docker's: 127 for a program that does
/// not exist, 126 for one that cannot be executed, 125 for run's other failures, 1 for
/// the other commands' failures.
#[test]
fn exit_codes_follow_docker() {
    let w = Wharf::new("cli-exit-codes");
    w.pull_busybox();
    let code = |args: &[&str]| w.run(args).code;
    assert_eq!(code(&["run", "--rm", &busybox(), "no-such-program"]), 127);
    assert_eq!(code(&["run", "--rm", &busybox(), "/no/such/file"]), 127);
    assert_eq!(code(&["run", "--rm", &busybox(), "/etc/passwd"]), 126);
    assert_eq!(code(&["run", "--rm", &busybox(), "/etc"]), 126);
    assert_eq!(code(&["run", "--rm", &busybox(), "sh", "-c", "exit 7"]), 7);
    assert_eq!(
        code(&["run", "--rm", "--memory", "bogus", &busybox(), "true"]),
        125
    );
    let err = w.fails(
        125,
        &[
            "run",
            "--rm",
            "--stop-signal",
            "SIGNOPE",
            &busybox(),
            "true",
        ],
    );
    assert!(err.contains("invalid stop signal \"SIGNOPE\""), "{err}");
    w.ok(&["run", "-d", "--name", "c", &busybox(), "sleep", "1000"]);
    assert_eq!(code(&["exec", "c", "no-such-program"]), 127);
    assert_eq!(code(&["exec", "c", "/etc/passwd"]), 126);
    assert_eq!(code(&["exec", "c", "sh", "-c", "exit 3"]), 3);
    assert_eq!(code(&["exec", "no-such-container", "true"]), 1);
    // The messages name the object and the cause.
    let err = w.fails(127, &["exec", "c", "no-such-program"]);
    assert_eq!(
        err.trim(),
        "wharf: exec in container c: exec: \"no-such-program\": executable file not found in $PATH"
    );
    // A user the container does not know: 126, as docker.
    let err = w.fails(126, &["exec", "--user", "nosuch", "c", "true"]);
    assert!(
        err.contains("container c") && err.contains("user \"nosuch\" not found"),
        "{err}"
    );
    // --privileged: every capability the engine holds (its own bounding set), no more.
    let held = std::fs::read_to_string("/proc/self/status").unwrap();
    let held = held
        .lines()
        .find_map(|l| l.strip_prefix("CapBnd:"))
        .unwrap()
        .trim()
        .to_string();
    let out = w.ok(&[
        "exec",
        "--privileged",
        "c",
        "sh",
        "-c",
        "grep CapEff /proc/self/status",
    ]);
    assert_eq!(out.split_whitespace().nth(1), Some(held.as_str()), "{out}");
    let err = w.fails(1, &["pod", "rm", "c"]);
    assert!(err.contains("pod c has running containers"), "{err}");
    w.ok(&["stop", "-t", "0", "c"]);
    let err = w.fails(1, &["exec", "c", "true"]);
    assert_eq!(err.trim(), "wharf: container c is not running");
    let out = w.run(&["rm", "no-such-container"]);
    assert_eq!(out.code, 1);
    assert_eq!(
        out.stderr.trim(),
        "wharf: no such container: no-such-container",
        "the error names the object and the cause, once"
    );
    w.ok(&["rm", "-f", "c"]);
}

/// Context switches of every thread of `pid` so far.
fn context_switches(pid: u32) -> u64 {
    let mut n = 0;
    for task in std::fs::read_dir(format!("/proc/{pid}/task")).unwrap() {
        let status = std::fs::read_to_string(task.unwrap().path().join("status")).unwrap();
        for l in status.lines() {
            if l.starts_with("voluntary_ctxt_switches") || l.starts_with("nonvoluntary_ctxt") {
                n += l.split_whitespace().last().unwrap().parse::<u64>().unwrap();
            }
        }
    }
    n
}

#[test]
fn events_are_pushed_to_followers_and_kept_for_later_readers() {
    use std::io::BufRead;
    let w = Wharf::new("cli-events-push");
    w.pull_busybox();
    let mut follower = w
        .cmd(&["events", "--follow", "--format", "json"])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let stdout = follower.stdout.take().unwrap();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stdout).lines() {
            let e: serde_json::Value = serde_json::from_str(&line.unwrap()).unwrap();
            if tx.send((e, std::time::SystemTime::now())).is_err() {
                return;
            }
        }
    });
    let next_matching = |what: &dyn Fn(&serde_json::Value) -> bool| loop {
        let (e, at) = rx
            .recv_timeout(Duration::from_secs(30))
            .expect("the follower printed nothing more");
        if what(&e) {
            return (e, at);
        }
    };
    // A container that exits by itself, while no other wharf command runs: only the
    // follower can notice, and its shim tells it at once.
    w.ok(&[
        "run",
        "-d",
        "--name",
        "quick",
        &busybox(),
        "sh",
        "-c",
        "sleep 1; exit 5",
    ]);
    let (created, _) = next_matching(&|e| e["Action"] == "create" && e["Type"] == "pod");
    assert_eq!(created["Actor"]["Attributes"]["name"], "quick");
    let (exited, heard) =
        next_matching(&|e| e["Action"] == "die" && e["Actor"]["Attributes"]["name"] == "quick");
    assert_eq!(exited["Actor"]["Attributes"]["exitCode"], "5", "{exited}");
    // Its time is the exit's, and it was heard right after.
    let at = event_time(&exited);
    let late = heard.duration_since(at).unwrap_or_default();
    assert!(
        late < Duration::from_secs(1),
        "heard {late:?} after the exit"
    );
    // Idle, the follower sleeps: no timer wakes it (a poll every 250 ms would show as 8
    // context switches in 2 s). A few are the exited pod's shim going away (its
    // subscription ends), which may land in the window on a loaded machine.
    let pid = follower.id();
    let before = context_switches(pid);
    std::thread::sleep(Duration::from_secs(2));
    let woken = context_switches(pid) - before;
    assert!(woken <= 4, "an idle follower woke {woken} times in 2 s");
    // Other commands' changes reach it too (through the store).
    w.ok(&["rm", "quick"]);
    next_matching(&|e| e["Action"] == "destroy" && e["Type"] == "pod");
    follower.kill().unwrap();
    follower.wait().unwrap();

    // Nobody follows: the exit is still found by a later reader, at the time it happened.
    let t0 = std::time::SystemTime::now();
    w.ok(&[
        "run",
        "-d",
        "--name",
        "alone",
        &busybox(),
        "sh",
        "-c",
        "exit 4",
    ]);
    std::thread::sleep(Duration::from_millis(1500));
    let since = format!(
        "{}",
        t0.duration_since(std::time::UNIX_EPOCH).unwrap().as_secs()
    );
    let out = w.ok(&["events", "--since", &since, "--format", "json"]);
    let exited: serde_json::Value = out
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .find(|e| e["Action"] == "die" && e["Actor"]["Attributes"]["name"] == "alone")
        .unwrap_or_else(|| panic!("no exit of alone in {out}"));
    assert_eq!(exited["Actor"]["Attributes"]["exitCode"], "4");
    let at = event_time(&exited);
    assert!(
        std::time::SystemTime::now().duration_since(at).unwrap() > Duration::from_millis(500),
        "the event has the exit's time, not the reader's"
    );
    w.ok(&["rm", "alone"]);
}

/// An event's time (docker's `timeNano`).
fn event_time(e: &serde_json::Value) -> std::time::SystemTime {
    let nanos = e["timeNano"]
        .as_u64()
        .unwrap_or_else(|| panic!("no timeNano in {e}"));
    std::time::UNIX_EPOCH + Duration::from_nanos(nanos)
}

#[test]
fn run_flags_for_mounts_devices_labels_dns_hosts_sysctls_and_init() {
    let w = Wharf::new("cli-run-flags");
    w.pull_busybox();
    let sh = |flags: &[&str], script: &str| {
        let image = busybox();
        let mut args = vec!["run", "--rm"];
        args.extend_from_slice(flags);
        args.extend([image.as_str(), "sh", "-c", script]);
        w.ok(&args)
    };
    // --tmpfs: docker's defaults (noexec), the size asked for.
    let m = sh(
        &["--tmpfs", "/scratch:size=1m"],
        "grep ' /scratch ' /proc/mounts",
    );
    assert!(
        m.starts_with("tmpfs /scratch tmpfs rw,nosuid,nodev,noexec"),
        "{m}"
    );
    assert!(m.contains("size=1024k"), "{m}");
    // --mount: a read-only bind and a tmpfs with a mode.
    let dir = w.path("data");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("f"), "hello\n").unwrap();
    let bind = format!("type=bind,source={},target=/data,readonly", dir.display());
    assert_eq!(
        sh(
            &[
                "--mount",
                &bind,
                "--mount",
                "type=tmpfs,target=/t,tmpfs-mode=1770"
            ],
            "cat /data/f; touch /data/g 2>/dev/null || echo ro; stat -c %a /t"
        ),
        "hello\nro\n1770\n"
    );
    // An unknown mount type is refused, naming it.
    let err = w.fails(
        125,
        &[
            "run",
            "--rm",
            "--mount",
            "type=npipe,target=/v",
            &busybox(),
            "true",
        ],
    );
    assert!(
        err.contains("type \"npipe\" is not bind, volume or tmpfs"),
        "{err}"
    );
    // --device: the host's node under another name.
    assert_eq!(
        sh(
            &["--device", "/dev/null:/dev/mynull"],
            "test -c /dev/mynull && echo x > /dev/mynull && echo ok"
        ),
        "ok\n"
    );
    // --dns, --dns-search, --dns-option, --add-host, --sysctl, --shm-size.
    let out = sh(
        &[
            "--dns",
            "10.0.0.53",
            "--dns-search",
            "example.test",
            "--dns-option",
            "ndots:3",
            "--add-host",
            "db:10.1.2.3",
            "--sysctl",
            "net.ipv4.ip_unprivileged_port_start=0",
            "--shm-size",
            "32m",
        ],
        "cat /etc/resolv.conf; grep db /etc/hosts; \
         cat /proc/sys/net/ipv4/ip_unprivileged_port_start; grep ' /dev/shm ' /proc/mounts",
    );
    for want in [
        "nameserver 10.0.0.53",
        "search example.test",
        "options ndots:3",
        "10.1.2.3\tdb",
        "\n0\n",
        "size=32768k",
    ] {
        assert!(out.contains(want), "{want:?} in {out}");
    }
    // --ulimit: soft and hard (below the host's hard limit: no CAP_SYS_RESOURCE here).
    assert_eq!(
        sh(&["--ulimit", "nofile=1024:2048"], "ulimit -Sn; ulimit -Hn"),
        "1024\n2048\n"
    );
    // --init: the shell is not PID 1 (an init is, reaping and forwarding signals).
    let pid: u32 = sh(&["--init"], "echo $$").trim().parse().unwrap();
    assert_ne!(pid, 1);
    assert_eq!(sh(&[], "echo $$"), "1\n");
    // --label, seen by inspect.
    w.ok(&[
        "create",
        "--name",
        "labelled",
        "-l",
        "tier=web",
        &busybox(),
        "true",
    ]);
    assert_eq!(w.inspect("labelled")["Config"]["Labels"]["tier"], "web");
    w.ok(&["rm", "labelled"]);
    // Bad values, and pod flags with an existing pod, are refused by name.
    for (flags, why) in [
        (vec!["--add-host", "db"], "invalid --add-host \"db\""),
        (
            vec!["--device", "/dev/null:x"],
            "permissions are a combination",
        ),
        (vec!["--tmpfs", "rel"], "the path must be absolute"),
        (vec!["--sysctl", "novalue"], "invalid --sysctl \"novalue\""),
        (vec!["--ulimit", "nofiles=1"], "\"nofiles\" is not one of"),
        (
            vec!["--ulimit", "nofile=9:8"],
            "the soft limit is above the hard one",
        ),
        (
            vec!["--pod", "p", "--dns", "1.1.1.1"],
            "--dns set up a container's own pod",
        ),
    ] {
        let mut args = vec!["run", "--rm"];
        args.extend(flags.iter().copied());
        let image = busybox();
        args.extend([image.as_str(), "true"]);
        let err = w.fails(125, &args);
        assert!(err.contains(why), "{flags:?}: {err}");
    }
    w.assert_clean();
}

/// `--format` as docker reads it: Go templates on inspect (containers, pods, images), ps,
/// images, events, stats and pod ls; `table` templates with headers; docker's keys.
#[test]
fn format_templates_read_dockers_keys() {
    let w = Wharf::new("cli-format");
    w.pull_busybox();
    w.ok(&[
        "run",
        "-d",
        "--name",
        "fmt",
        "-l",
        "tier=web",
        "-e",
        "A=1",
        "-p",
        "8080:80",
        "--restart",
        "on-failure:3",
        &busybox(),
        "sleep",
        "1000",
    ]);
    let f = |object: &str, t: &str| w.ok(&["inspect", "-f", t, object]);
    assert_eq!(
        f(
            "fmt",
            "{{.Name}} {{.State.Status}} {{.State.Running}} {{.RestartCount}}"
        ),
        "/fmt running true 0\n"
    );
    let pid: i32 = f("fmt", "{{.State.Pid}}").trim().parse().unwrap();
    assert!(w.pids("fmt").contains(&pid), "{pid}");
    assert_eq!(
        f(
            "fmt",
            "{{.HostConfig.RestartPolicy.Name}}:{{.HostConfig.RestartPolicy.MaximumRetryCount}} {{json .Config.Cmd}} {{index .Config.Labels \"tier\"}}"
        ),
        "on-failure:3 [\"sleep\",\"1000\"] web\n"
    );
    assert!(f("fmt", "{{.Config.Env}}").contains("A=1"));
    assert_eq!(
        f(
            "fmt",
            "{{range $p, $b := .NetworkSettings.Ports}}{{$p}}->{{(index $b 0).HostPort}}{{end}}"
        ),
        "80/tcp->8080\n"
    );
    assert!(f("fmt", "{{.NetworkSettings.IPAddress}}").starts_with("10.88."));
    assert_eq!(
        f(
            "fmt",
            "{{if eq .State.Status \"running\"}}up{{else}}down{{end}}"
        ),
        "up\n"
    );
    // Images and pods answer inspect too; --type narrows it.
    assert_eq!(f(&busybox(), "{{.Config.Cmd}} {{.Os}}"), "[sh] linux\n");
    assert_eq!(f("fmt", "{{.Id}}"), f("fmt", "{{.Id}}"));
    let err = w.fails(1, &["inspect", "--type", "image", "fmt"]);
    assert!(
        err.contains("no such image") && err.contains("fmt"),
        "{err}"
    );
    assert_eq!(
        w.ok(&[
            "pod",
            "inspect",
            "-f",
            "{{.Name}} {{len .Containers}}",
            "fmt"
        ]),
        "fmt 1\n"
    );
    // A mistake in a template names it.
    let err = w.fails(1, &["inspect", "-f", "{{.Nope}}", "fmt"]);
    assert!(err.contains("can't evaluate field Nope"), "{err}");
    let err = w.fails(1, &["ps", "--format", "{{.Names"]);
    assert!(
        err.contains("invalid --format") && err.contains("unclosed action"),
        "{err}"
    );

    // ps: docker's fields, `.Label`, and `table` with a header row.
    assert_eq!(
        w.ok(&[
            "ps",
            "--format",
            "{{.Names}} {{.Label \"tier\"}} {{.Ports}} {{.State}}"
        ]),
        "fmt web 0.0.0.0:8080->80/tcp running\n"
    );
    // The default table has docker's PORTS column, before NAMES.
    let t = w.ok(&["ps"]);
    // (Columns by characters: a long command is cut with a multi-byte ellipsis.)
    let header = t.lines().next().unwrap();
    let at = |col: &str| header[..header.find(col).unwrap()].chars().count();
    let (ports, names) = (at("PORTS"), at("NAMES"));
    assert!(ports < names, "{t}");
    let row: String = t
        .lines()
        .find(|l| l.contains("fmt"))
        .unwrap()
        .chars()
        .skip(ports)
        .take(names - ports)
        .collect();
    assert_eq!(row.trim(), "0.0.0.0:8080->80/tcp", "{t}");
    let t = w.ok(&["ps", "--format", r"table {{.Names}}\t{{.Image}}"]);
    let lines: Vec<&str> = t.lines().collect();
    assert_eq!(lines[0], "NAMES     IMAGE");
    assert_eq!(lines[1], format!("fmt       {}", busybox()));
    // images.
    let images = w.ok(&["images", "--format", "{{.Repository}}:{{.Tag}}"]);
    assert_eq!(images, format!("{}\n", busybox()));
    let img: serde_json::Value =
        serde_json::from_str(&w.ok(&["images", "--format", "json"])).unwrap();
    assert_eq!(img["Tag"], "latest");
    assert!(
        img["CreatedAt"].as_str().unwrap().ends_with(" +0000 UTC"),
        "{img}"
    );
    // events: docker's keys and filters.
    assert_eq!(
        w.ok(&[
            "events",
            "--format",
            "{{.Type}} {{.Action}} {{.Actor.Attributes.name}}",
            "--filter",
            "container=fmt",
            "--filter",
            "event=create",
            "--filter",
            "event=start",
        ]),
        "container create fmt\ncontainer start fmt\n"
    );
    assert_eq!(
        w.ok(&[
            "events",
            "-f",
            "type=pod",
            "-f",
            "event=create",
            "--format",
            "{{.Actor.Attributes.name}}"
        ]),
        "fmt\n"
    );
    assert_eq!(w.ok(&["events", "--until", "1h", "--format", "json"]), "");
    // pod ls and stats.
    assert_eq!(
        w.ok(&[
            "pod",
            "ls",
            "--format",
            "{{.Name}} {{.Status}} {{.State}} {{.Ready}} {{.NumberOfContainers}}"
        ]),
        "fmt Running created 1/1 1\n"
    );
    w.ok(&["rm", "-f", "fmt"]);
    w.assert_clean();
}

/// `-p 80`, `-p IP::80` and `-P` (with the image's EXPOSE, set by `import --change`): host
/// ports the engine picks from the ephemeral range, shown by `port` and inspect, reachable.
#[test]
fn random_host_ports_and_publish_all() {
    let w = Wharf::new("cli-random-ports");
    w.pull_busybox();
    // An image that exposes 80 and 81/udp: busybox's files, imported with --change.
    let root = w.ok(&["image", "mount", &busybox()]);
    let tar = w.path("rootfs.tar");
    let st = Command::new("tar")
        .args(["-C", root.trim(), "-cf"])
        .arg(&tar)
        .arg(".")
        .status()
        .unwrap();
    assert!(st.success());
    w.ok(&["image", "unmount", &busybox()]);
    w.ok(&[
        "import",
        "-c",
        "EXPOSE 80 81/udp",
        "-c",
        "CMD [\"httpd\", \"-f\", \"-p\", \"80\", \"-h\", \"/etc\"]",
        "-c",
        "ENV PATH=/bin:/sbin:/usr/bin:/usr/sbin",
        "-m",
        "exposed",
        tar.to_str().unwrap(),
        "local/exposed:1",
    ]);
    assert_eq!(
        w.ok(&[
            "image",
            "inspect",
            "-f",
            "{{json .Config.ExposedPorts}} {{json .Config.Cmd}}",
            "local/exposed:1"
        ]),
        "{\"80/tcp\":{},\"81/udp\":{}} [\"httpd\",\"-f\",\"-p\",\"80\",\"-h\",\"/etc\"]\n"
    );
    let range = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range").unwrap();
    let bounds: Vec<u16> = range
        .split_whitespace()
        .map(|n| n.parse().unwrap())
        .collect();
    let in_range = |p: u16| (bounds[0]..=bounds[1]).contains(&p);

    w.ok(&["run", "-d", "--name", "all", "-P", "local/exposed:1"]);
    let ports = w.ok(&["port", "all"]);
    let mut lines: Vec<&str> = ports.lines().collect();
    lines.sort();
    assert_eq!(lines.len(), 2, "{ports}");
    let host_port = |line: &str| -> u16 { line.rsplit(':').next().unwrap().parse().unwrap() };
    assert!(
        lines[0].starts_with("80/tcp -> 0.0.0.0:") && in_range(host_port(lines[0])),
        "{ports}"
    );
    assert!(
        lines[1].starts_with("81/udp -> 0.0.0.0:") && in_range(host_port(lines[1])),
        "{ports}"
    );
    let web = host_port(lines[0]);
    let resp = w.http_get(&format!("127.0.0.1:{web}"));
    assert!(resp.starts_with("HTTP/1."), "{resp}");
    assert_eq!(
        w.ok(&[
            "inspect",
            "-f",
            "{{(index (index .NetworkSettings.Ports \"80/tcp\") 0).HostPort}}",
            "all"
        ]),
        format!("{web}\n")
    );

    // -p 80 and -p 127.0.0.1::80: other host ports, the address kept.
    w.ok(&[
        "run",
        "-d",
        "--name",
        "one",
        "-p",
        "80",
        "-p",
        "127.0.0.1::8000",
        "local/exposed:1",
    ]);
    let one = w.ok(&["port", "one", "80"]);
    let p1 = host_port(one.trim());
    assert!(in_range(p1) && p1 != web, "{one}");
    let local = w.ok(&["port", "one", "8000/tcp"]);
    assert!(
        local.starts_with("127.0.0.1:") && in_range(host_port(local.trim())),
        "{local}"
    );
    let resp = w.http_get(&format!("127.0.0.1:{p1}"));
    assert!(resp.starts_with("HTTP/1."), "{resp}");
    // -P with an image that exposes nothing publishes nothing.
    w.ok(&[
        "run",
        "-d",
        "--name",
        "none",
        "-P",
        &busybox(),
        "sleep",
        "100",
    ]);
    assert_eq!(w.ok(&["port", "none"]), "");
    w.ok(&["rm", "-f", "all", "one", "none"]);
    w.ok(&["rmi", "local/exposed:1"]);
    w.assert_clean();
}

/// `cp` both ways (files, directories, `-` tar streams, a stopped container), through
/// the container's symlinks without reaching the host; `diff`, `export` and `commit`.
#[test]
fn cp_diff_export_and_commit() {
    let w = Wharf::new("cli-files");
    w.pull_busybox();
    w.ok(&["run", "-d", "--name", "f", &busybox(), "sleep", "1000"]);
    w.ok(&[
        "exec",
        "f",
        "sh",
        "-c",
        "echo new > /tmp/new; rm /bin/vi; mkdir /root/x; ln -s / /tmp/up; echo in > /etc/motd",
    ]);
    assert_eq!(
        w.ok(&["diff", "f"]),
        "C /bin\nD /bin/vi\nC /etc\nA /etc/motd\nC /root\nA /root/x\nC /tmp\nA /tmp/new\nA /tmp/up\n"
    );
    let host = w.path("host");
    std::fs::create_dir_all(host.join("tree/sub")).unwrap();
    std::fs::write(host.join("tree/sub/f.txt"), "from the host").unwrap();
    std::fs::write(host.join("one.txt"), "one").unwrap();
    let h = |p: &str| host.join(p).to_str().unwrap().to_string();
    // Host to container: a file into a directory, a file to a new name, a directory.
    w.ok(&["cp", &h("one.txt"), "f:/tmp"]);
    w.ok(&["cp", &h("one.txt"), "f:/tmp/renamed.txt"]);
    w.ok(&["cp", &h("tree"), "f:/root/"]);
    assert_eq!(
        w.ok(&[
            "exec",
            "f",
            "sh",
            "-c",
            "cat /tmp/one.txt /tmp/renamed.txt /root/tree/sub/f.txt; stat -c %u /tmp/one.txt"
        ]),
        "oneonefrom the host0\n"
    );
    // Container to host: a file, a directory into an existing one, a directory to a new name.
    w.ok(&["cp", "f:/tmp/new", &h("got.txt")]);
    assert_eq!(
        std::fs::read_to_string(host.join("got.txt")).unwrap(),
        "new\n"
    );
    w.ok(&["cp", "f:/root/tree", &h("")]);
    assert!(host.join("tree/sub/f.txt").is_file());
    w.ok(&["cp", "f:/root/tree", &h("copy")]);
    assert_eq!(
        std::fs::read_to_string(host.join("copy/sub/f.txt")).unwrap(),
        "from the host"
    );
    // The container's symlink to / is the container's /: reading /etc/passwd through it
    // gets the container's file, and a copy into it lands in the container's root.
    w.ok(&["cp", "f:/tmp/up/etc/passwd", &h("passwd")]);
    assert_eq!(
        std::fs::read_to_string(host.join("passwd")).unwrap(),
        w.ok(&["exec", "f", "cat", "/etc/passwd"])
    );
    w.ok(&["cp", &h("one.txt"), "f:/tmp/up/planted.txt"]);
    assert!(!Path::new("/planted.txt").exists());
    assert_eq!(w.ok(&["exec", "f", "cat", "/planted.txt"]), "one");
    // Tar streams.
    let out = w.cmd(&["cp", "f:/tmp/new", "-"]).output().unwrap();
    assert!(out.status.success());
    let mut ar = tar::Archive::new(&out.stdout[..]);
    let names: Vec<String> = ar
        .entries()
        .unwrap()
        .map(|e| e.unwrap().path().unwrap().display().to_string())
        .collect();
    assert_eq!(names, ["new"]);
    let mut c = w.cmd(&["cp", "-", "f:/tmp"]);
    c.stdin(Stdio::piped());
    let mut child = c.spawn().unwrap();
    std::io::Write::write_all(&mut child.stdin.take().unwrap(), &out.stdout).unwrap();
    assert!(child.wait().unwrap().success());
    // Errors name what is missing.
    let err = w.fails(1, &["cp", "f:/no/such", &h("x")]);
    assert!(
        err.contains("f:/no/such") || err.contains("/no/such"),
        "{err}"
    );
    // export: the whole root filesystem.
    let tar_path = w.path("f.tar");
    w.ok(&["export", "-o", tar_path.to_str().unwrap(), "f"]);
    let list = Command::new("tar")
        .arg("-tf")
        .arg(&tar_path)
        .output()
        .unwrap();
    let list = String::from_utf8_lossy(&list.stdout);
    assert!(
        list.lines().any(|l| l == "bin/busybox") && list.lines().any(|l| l == "tmp/new"),
        "{list}"
    );
    assert!(!list.lines().any(|l| l == "bin/vi"), "{list}");
    // commit: the changes as a new layer, with --change and a message.
    let id = w.ok(&[
        "commit",
        "-c",
        "CMD [\"cat\", \"/tmp/new\"]",
        "-m",
        "kept",
        "f",
        "local/committed:1",
    ]);
    assert!(id.starts_with("sha256:"), "{id}");
    assert_eq!(
        w.ok(&[
            "image",
            "inspect",
            "-f",
            "{{len .RootFS.Layers}} {{json .Config.Cmd}}",
            "local/committed:1"
        ]),
        "2 [\"cat\",\"/tmp/new\"]\n"
    );
    assert_eq!(w.ok(&["run", "--rm", "local/committed:1"]), "new\n");
    // history: the commit's step on top (the container's command, the message, its size).
    let hist = w.ok(&[
        "history",
        "--format",
        "{{.ID}}|{{.CreatedBy}}|{{.Comment}}|{{.Size}}",
        "local/committed:1",
    ]);
    let top = hist.lines().next().unwrap();
    let fields: Vec<&str> = top.split('|').collect();
    assert_eq!(fields[0], &id.trim()[7..19], "{hist}");
    assert_eq!(&fields[1..3], ["sleep 1000", "kept"], "{hist}");
    assert!(
        fields[3].ends_with("kB") || fields[3].ends_with('B'),
        "{hist}"
    );
    assert!(
        hist.lines().skip(1).all(|l| l.starts_with("<missing>|")),
        "{hist}"
    );
    let table = w.ok(&["history", "local/committed:1"]);
    assert!(table.starts_with("IMAGE          CREATED"), "{table}");
    // tag: another name for the same image.
    w.ok(&["tag", "local/committed:1", "local/committed:latest"]);
    assert_eq!(
        w.ok(&["image", "inspect", "-f", "{{.Id}}", "local/committed"]),
        w.ok(&["image", "inspect", "-f", "{{.Id}}", "local/committed:1"])
    );
    w.ok(&["rmi", "local/committed:latest"]);
    assert_eq!(
        w.ok(&[
            "run",
            "--rm",
            "local/committed:1",
            "sh",
            "-c",
            "ls /bin/vi; cat /etc/motd; cat /etc/hostname"
        ])
        .lines()
        .next(),
        Some("in")
    );
    // A stopped container's files are still there to copy.
    w.ok(&["stop", "-t", "0", "f"]);
    w.ok(&["cp", "f:/etc/motd", &h("motd")]);
    assert_eq!(std::fs::read_to_string(host.join("motd")).unwrap(), "in\n");
    w.ok(&["rm", "-f", "f"]);
    w.ok(&["rmi", "local/committed:1"]);
    w.assert_clean();
}

/// Named volumes (`-v NAME:/path`, `--mount type=volume`), filled from the image on first
/// use; anonymous ones (`-v /path`) that go with `--rm` and `rm -v`; `volume
/// create|ls|inspect|rm|prune` with docker's output.
#[test]
fn named_and_anonymous_volumes() {
    let w = Wharf::new("cli-volumes");
    w.pull_busybox();
    assert_eq!(
        w.ok(&["volume", "create", "-l", "tier=db", "data"]),
        "data\n"
    );
    let mountpoint = w.ok(&[
        "volume",
        "inspect",
        "-f",
        "{{.Mountpoint}} {{.Driver}} {{.Labels.tier}}",
        "data",
    ]);
    let (dir, rest) = mountpoint.trim().split_once(' ').unwrap();
    assert_eq!(rest, "local db");
    assert!(
        Path::new(dir).is_dir() && dir.starts_with(w.root().to_str().unwrap()),
        "{dir}"
    );
    // Data outlives the containers that wrote it.
    w.ok(&[
        "run",
        "--rm",
        "-v",
        "data:/data",
        &busybox(),
        "sh",
        "-c",
        "echo kept > /data/f",
    ]);
    assert_eq!(
        w.ok(&[
            "run",
            "--rm",
            "-v",
            "data:/data:ro",
            &busybox(),
            "cat",
            "/data/f"
        ]),
        "kept\n"
    );
    assert_eq!(
        std::fs::read_to_string(Path::new(dir).join("f")).unwrap(),
        "kept\n"
    );
    // docker's volume-subpath: a path inside the volume, which must be there already; a
    // symlink in the volume cannot lead it out.
    w.ok(&[
        "run",
        "--rm",
        "-v",
        "data:/data",
        &busybox(),
        "sh",
        "-c",
        "mkdir /data/app && echo app > /data/app/f && ln -s / /data/out",
    ]);
    let sub = |path: &str| {
        w.run(&[
            "run",
            "--rm",
            "--mount",
            &format!("type=volume,src=data,dst=/sub,volume-subpath={path}"),
            &busybox(),
            "ls",
            "/sub",
        ])
    };
    assert_eq!(sub("app").stdout, "f\n");
    assert_eq!(sub("out").stdout, "app\nf\nout\n", "the volume's root");
    let missing = sub("nope");
    assert_eq!(missing.code, 125, "{missing:?}");
    assert!(
        missing.stderr.contains("subPath nope of volume")
            && missing.stderr.contains("No such file or directory"),
        "{missing:?}"
    );
    assert!(!Path::new(dir).join("nope").exists(), "not made");
    w.ok(&[
        "run",
        "--rm",
        "-v",
        "data:/data",
        &busybox(),
        "rm",
        "-r",
        "/data/app",
        "/data/out",
    ]);
    // A new volume is filled from the image's files at its path, once.
    assert!(
        w.ok(&[
            "run",
            "--rm",
            "-v",
            "etcvol:/etc",
            &busybox(),
            "cat",
            "/etc/passwd"
        ])
        .starts_with("root:x:0:0")
    );
    w.ok(&[
        "run",
        "--rm",
        "--mount",
        "type=volume,source=etcvol,target=/etc",
        &busybox(),
        "rm",
        "/etc/passwd",
    ]);
    assert_eq!(
        w.run(&[
            "run",
            "--rm",
            "-v",
            "etcvol:/etc",
            &busybox(),
            "ls",
            "/etc/passwd"
        ])
        .code,
        1
    );
    // In use: refused, naming the user.
    w.ok(&[
        "run",
        "-d",
        "--name",
        "user",
        "-v",
        "data:/data",
        &busybox(),
        "sleep",
        "1000",
    ]);
    let err = w.fails(1, &["volume", "rm", "data"]);
    assert_eq!(err.trim(), "wharf: volume data is in use by container user");
    assert_eq!(
        w.ok(&["volume", "ls", "-q", "--filter", "dangling=true"]),
        "etcvol\n"
    );
    w.ok(&["rm", "-f", "user"]);
    assert_eq!(w.ok(&["volume", "rm", "data"]), "data\n");
    assert!(!Path::new(dir).exists());
    // Anonymous volumes: one per -v /path, gone with rm -v and --rm, kept by a plain rm.
    w.ok(&[
        "run",
        "-d",
        "--name",
        "anon",
        "-v",
        "/scratch",
        &busybox(),
        "sleep",
        "1000",
    ]);
    let anon = w.ok(&[
        "volume",
        "ls",
        "-q",
        "--filter",
        "name=",
        "--filter",
        "dangling=false",
    ]);
    assert_eq!(anon.trim().len(), 64, "{anon}");
    w.ok(&["rm", "-f", "-v", "anon"]);
    assert_eq!(w.ok(&["volume", "ls", "-q"]), "etcvol\n");
    w.ok(&["run", "--rm", "-v", "/scratch", &busybox(), "true"]);
    assert_eq!(w.ok(&["volume", "ls", "-q"]), "etcvol\n");
    w.ok(&[
        "run",
        "-d",
        "--name",
        "left",
        "-v",
        "/scratch",
        &busybox(),
        "true",
    ]);
    w.ok(&["wait", "left"]);
    w.ok(&["rm", "left"]);
    assert_eq!(w.ok(&["volume", "ls", "-q"]).lines().count(), 2);
    // prune: anonymous ones only; -a every unused one.
    let pruned = w.ok(&["volume", "prune", "-f"]);
    assert!(
        pruned.starts_with("Deleted Volumes:\n") && pruned.ends_with("Total reclaimed space: 0B\n"),
        "{pruned}"
    );
    assert_eq!(w.ok(&["volume", "ls", "-q"]), "etcvol\n");
    let table = w.ok(&["volume", "ls"]);
    assert_eq!(table, "DRIVER    VOLUME NAME\nlocal     etcvol\n");
    w.ok(&["volume", "prune", "-f", "-a"]);
    assert_eq!(w.ok(&["volume", "ls", "-q"]), "");
    let err = w.fails(1, &["volume", "inspect", "nope"]);
    assert!(err.contains("no such volume: nope"), "{err}");
    let err = w.fails(
        125,
        &["run", "--rm", "-v", "bad/name:/x", &busybox(), "true"],
    );
    assert!(err.contains("bad/name"), "{err}");
    w.assert_clean();
}

/// User networks: `network create|ls|inspect|rm|prune`, a bridge and subnet of their own,
/// containers finding each other by name and alias (and not from another network),
/// `--network container:NAME`.
#[test]
fn user_networks_resolve_names_between_their_containers() {
    let w = Wharf::new("cli-networks");
    w.pull_busybox();
    let id = w.ok(&["network", "create", "backend"]);
    assert_eq!(id.trim().len(), 32, "{id}");
    let ls = w.ok(&["network", "ls", "--format", "{{.Name}} {{.Driver}}"]);
    assert_eq!(ls, "wharf bridge\nhost host\nnone null\nbackend bridge\n");
    assert_eq!(
        w.ok(&[
            "network",
            "inspect",
            "-f",
            "{{range .IPAM.Config}}{{.Subnet}} {{.Gateway}}{{end}}",
            "backend"
        ]),
        "10.89.0.0/24 10.89.0.1\n"
    );
    w.ok(&[
        "run",
        "-d",
        "--name",
        "db",
        "--network",
        "backend",
        &busybox(),
        "sleep",
        "1000",
    ]);
    w.ok(&[
        "run",
        "-d",
        "--name",
        "web",
        "--network",
        "backend",
        "--network-alias",
        "www",
        &busybox(),
        "sleep",
        "1000",
    ]);
    let db_ip = w.ok(&["inspect", "-f", "{{.NetworkSettings.IPAddress}}", "db"]);
    assert!(db_ip.starts_with("10.89.0."), "{db_ip}");
    // By container name and by alias, both ways; the hosts file lists the other.
    w.ok(&["exec", "web", "ping", "-c", "1", "-W", "5", "db"]);
    w.ok(&["exec", "db", "ping", "-c", "1", "-W", "5", "www"]);
    let hosts = w.ok(&["exec", "web", "cat", "/etc/hosts"]);
    assert!(
        hosts.lines().any(|l| l == format!("{}\tdb", db_ip.trim())),
        "{hosts}"
    );
    // Another network does not see them.
    assert_ne!(
        w.run(&[
            "run",
            "--rm",
            &busybox(),
            "ping",
            "-c",
            "1",
            "-W",
            "1",
            "db"
        ])
        .code,
        0
    );
    // A second network gets the next subnet; a given one is checked.
    w.ok(&[
        "network",
        "create",
        "--subnet",
        "10.90.5.0/24",
        "--gateway",
        "10.90.5.254",
        "-l",
        "team=a",
        "front",
    ]);
    assert_eq!(
        w.ok(&[
            "network",
            "inspect",
            "-f",
            "{{(index .IPAM.Config 0).Gateway}} {{.Labels.team}}",
            "front"
        ]),
        "10.90.5.254 a\n"
    );
    let err = w.fails(
        1,
        &["network", "create", "--subnet", "10.90.5.128/25", "clash"],
    );
    assert!(err.contains("overlaps network front"), "{err}");
    let err = w.fails(1, &["network", "create", "backend"]);
    assert!(
        err.contains("backend") && err.contains("already in use"),
        "{err}"
    );
    // --network container:NAME joins that container's network namespace.
    let addr = w.ok(&[
        "run",
        "--rm",
        "--network",
        "container:db",
        &busybox(),
        "ip",
        "-4",
        "-o",
        "addr",
        "show",
        "eth0",
    ]);
    assert!(addr.contains(&format!("{}/", db_ip.trim())), "{addr}");
    // A container that leaves is no longer named.
    w.ok(&["rm", "-f", "web"]);
    let hosts = w.ok(&["exec", "db", "cat", "/etc/hosts"]);
    assert!(!hosts.contains("www"), "{hosts}");
    // In use: refused, naming the user; then removed with its bridge and table.
    let err = w.fails(1, &["network", "rm", "backend"]);
    assert_eq!(
        err.trim(),
        "wharf: network backend has active endpoints: db"
    );
    w.ok(&["rm", "-f", "db"]);
    assert_eq!(w.ok(&["network", "rm", "backend"]), "backend\n");
    let bridge = format!("wharf-{}", &id.trim()[..8]);
    assert!(!w.host_links().contains(&bridge), "{:?}", w.host_links());
    assert_eq!(
        w.ok(&["network", "prune", "-f"]),
        "Deleted Networks:\nfront\n"
    );
    assert_eq!(w.ok(&["network", "ls", "-q"]).lines().count(), 3);
    w.assert_clean();
}

/// `--health-cmd` and friends: the shim runs the check in the container; starting, then
/// unhealthy after the retries, healthy once it passes; a check that outlives its timeout
/// fails; `State.Health` and ps show it.
#[test]
fn health_checks_run_by_the_shim() {
    let w = Wharf::new("cli-health");
    w.pull_busybox();
    w.ok(&[
        "run",
        "-d",
        "--name",
        "h",
        "--network",
        "none",
        "--health-cmd",
        "cat /tmp/ok",
        "--health-interval",
        "300ms",
        "--health-retries",
        "2",
        &busybox(),
        "sleep",
        "1000",
    ]);
    let status = |c: &str| {
        w.ok(&["inspect", "-f", "{{.State.Health.Status}}", c])
            .trim()
            .to_string()
    };
    assert_eq!(status("h"), "starting");
    assert!(wait_until(Duration::from_secs(20), || status("h") == "unhealthy"));
    let h = &w.inspect("h")["State"]["Health"];
    assert!(h["FailingStreak"].as_u64().unwrap() >= 2, "{h}");
    let last = h["Log"].as_array().unwrap().last().unwrap().clone();
    assert_eq!(last["ExitCode"], 1, "{h}");
    assert!(last["Output"].as_str().unwrap().contains("/tmp/ok"), "{h}");
    assert!(w.ok(&["ps"]).contains("(unhealthy)"));
    w.ok(&["exec", "h", "sh", "-c", "echo fine > /tmp/ok"]);
    assert!(wait_until(Duration::from_secs(20), || status("h") == "healthy"));
    let h = &w.inspect("h")["State"]["Health"];
    assert_eq!(h["FailingStreak"], 0, "{h}");
    assert_eq!(
        h["Log"].as_array().unwrap().last().unwrap()["Output"],
        "fine\n",
        "{h}"
    );
    assert!(wait_until(
        Duration::from_secs(10),
        || w.inspect("h")["State"]["Health"]["Log"]
            .as_array()
            .unwrap()
            .len()
            == 5
    ));
    assert!(
        w.ok(&["ps", "--format", "{{.Status}}"])
            .ends_with("(healthy)\n")
    );
    // A check that hangs is killed at its timeout and counts as a failure.
    w.ok(&[
        "run",
        "-d",
        "--name",
        "slow",
        "--network",
        "none",
        "--health-cmd",
        "sleep 10",
        "--health-interval",
        "200ms",
        "--health-timeout",
        "300ms",
        "--health-retries",
        "1",
        &busybox(),
        "sleep",
        "1000",
    ]);
    assert!(wait_until(Duration::from_secs(20), || status("slow") == "unhealthy"));
    let out = w.ok(&[
        "inspect",
        "-f",
        "{{(index .State.Health.Log 0).Output}}",
        "slow",
    ]);
    assert!(
        out.starts_with("Health check exceeded timeout (300ms)"),
        "{out}"
    );
    // Flags without a command are refused.
    let err = w.fails(
        125,
        &["run", "--rm", "--health-retries", "2", &busybox(), "true"],
    );
    assert!(err.contains("need --health-cmd"), "{err}");
    w.ok(&["rm", "-f", "h", "slow"]);
    w.assert_clean();
}

/// `--log-opt max-size=/max-file=`: the shim rotates the container's log at that size and
/// keeps that many files; other drivers and options are refused.
#[test]
fn log_options_bound_a_containers_log() {
    let w = Wharf::new("cli-log-opt");
    w.pull_busybox();
    w.ok(&[
        "run", "-d", "--name", "chatty", "--network", "none", "--log-opt", "max-size=2k",
        "--log-opt", "max-file=2", &busybox(), "sh", "-c",
        "i=0; while [ $i -lt 400 ]; do i=$((i+1)); echo line-$i-xxxxxxxxxxxxxxxxxxxxxxxx; done; sleep 1000",
    ]);
    w.wait_for_log("chatty", "line-400-");
    let log = std::path::PathBuf::from(w.ok(&["inspect", "-f", "{{.LogPath}}", "chatty"]).trim());
    let dir = log.parent().unwrap();
    let name = log.file_name().unwrap().to_str().unwrap().to_string();
    let files: Vec<(String, u64)> = std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_str().unwrap().starts_with(&name))
        .map(|e| {
            (
                e.file_name().to_str().unwrap().to_string(),
                e.metadata().unwrap().len(),
            )
        })
        .collect();
    assert!(files.len() <= 2, "{files:?}");
    assert!(files.iter().all(|(_, n)| *n <= 2048 + 200), "{files:?}");
    let err = w.fails(
        125,
        &["run", "--rm", "--log-driver", "syslog", &busybox(), "true"],
    );
    assert!(err.contains("syslog"), "{err}");
    let err = w.fails(
        125,
        &[
            "run",
            "--rm",
            "--log-opt",
            "mode=non-blocking",
            &busybox(),
            "true",
        ],
    );
    assert!(err.contains("mode=non-blocking"), "{err}");
    w.ok(&["rm", "-f", "chatty"]);
    w.assert_clean();
}

/// `top` names users as the container knows them; `system df` counts images, containers
/// and volumes; `system prune` removes stopped containers, unused networks and (with
/// --volumes) anonymous volumes, and leaves what runs.
#[test]
fn top_system_df_and_prune() {
    let w = Wharf::new("cli-space");
    w.pull_busybox();
    w.ok(&[
        "run",
        "-d",
        "--name",
        "up",
        "--network",
        "none",
        "-u",
        "65534",
        &busybox(),
        "sleep",
        "1000",
    ]);
    let top = w.ok(&["top", "up"]);
    let mut lines = top.lines();
    assert!(lines.next().unwrap().starts_with("UID"), "{top}");
    let row: Vec<&str> = lines.next().unwrap().split_whitespace().collect();
    assert_eq!((row[0], row[7]), ("nobody", "sleep"), "{top}");
    w.ok(&[
        "run",
        "--name",
        "done",
        "--network",
        "none",
        "-v",
        "/scratch",
        &busybox(),
        "sh",
        "-c",
        "echo x > /scratch/f; head -c 5000 /dev/zero > /big",
    ]);
    w.ok(&["network", "create", "idle"]);
    let df = w.ok(&[
        "system",
        "df",
        "--format",
        "{{.Type}} {{.TotalCount}} {{.Active}}",
    ]);
    assert_eq!(
        df,
        "Images 1 1\nContainers 2 1\nLocal Volumes 1 1\nBuild Cache 0 0\n"
    );
    let table = w.ok(&["system", "df"]);
    assert!(
        table.starts_with("TYPE            TOTAL     ACTIVE    SIZE"),
        "{table}"
    );
    let c = w.ok(&[
        "system",
        "df",
        "--format",
        "{{if eq .Type \"Containers\"}}{{.Size}}{{end}}",
    ]);
    assert!(c.trim().ends_with("kB"), "{c}");
    let out = w.ok(&["system", "prune", "-f", "--volumes"]);
    let done_id = w.run(&["inspect", "-f", "{{.Id}}", "done"]);
    assert_ne!(done_id.code, 0, "done was not removed: {out}");
    assert!(
        out.starts_with("Deleted Containers:\n") && out.contains("Deleted Networks:\nidle\n"),
        "{out}"
    );
    assert!(
        out.contains("Deleted Volumes:\n") && out.contains("Total reclaimed space: "),
        "{out}"
    );
    assert_eq!(w.ok(&["ps", "-a", "--format", "{{.Names}}"]), "up\n");
    assert_eq!(w.ok(&["volume", "ls", "-q"]), "");
    // docker's management commands: container ls/inspect/prune, image ls.
    w.ok(&[
        "container",
        "run",
        "--name",
        "gone",
        "--network",
        "none",
        &busybox(),
        "true",
    ]);
    assert_eq!(
        w.ok(&["container", "ls", "-a", "--format", "{{.Names}}"]),
        "gone\nup\n"
    );
    assert_eq!(
        w.ok(&["container", "inspect", "-f", "{{.State.Status}}", "gone"]),
        "exited\n"
    );
    let pruned = w.ok(&["container", "prune", "-f"]);
    assert!(
        pruned.starts_with("Deleted Containers:\n") && pruned.contains("Total reclaimed space"),
        "{pruned}"
    );
    assert_eq!(w.ok(&["container", "list", "-a", "-q"]).lines().count(), 1);
    assert_eq!(w.ok(&["image", "ls", "-q"]).lines().count(), 1);
    // The running container's image stays, even with --all.
    w.ok(&["system", "prune", "-f", "-a"]);
    assert_eq!(w.ok(&["images", "-q"]).lines().count(), 1);
    w.ok(&["rm", "-f", "up"]);
    w.assert_clean();
}

/// `login` checks the credentials with the registry before keeping them in docker's
/// config.json; pulls then use them; `logout` forgets them.
#[test]
fn login_and_logout_keep_credentials_as_docker_does() {
    let w = Wharf::new("cli-login");
    let Ok(reg) = std::env::var("WHARF_TEST_REGISTRY_AUTH") else {
        panic!("WHARF_TEST_REGISTRY_AUTH is not set (scripts/test.d/20-images.sh)");
    };
    let private = format!("{reg}/private/busybox:latest");
    let err = w.fails(1, &["pull", "-q", &private]);
    assert!(err.contains("401") || err.contains("credentials"), "{err}");
    let err = w.fails(1, &["login", "-u", "fixture", "-p", "wrong", &reg]);
    assert!(err.contains(&format!("login to {reg}")), "{err}");
    let config = w.path("no-docker-config/config.json");
    assert!(!config.exists());
    let mut c = w.cmd(&["login", "-u", "fixture", "--password-stdin", &reg]);
    c.stdin(Stdio::piped()).stdout(Stdio::piped());
    let mut child = c.spawn().unwrap();
    std::io::Write::write_all(&mut child.stdin.take().unwrap(), b"fixture-pass\n").unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success());
    assert_eq!(String::from_utf8_lossy(&out.stdout), "Login Succeeded\n");
    let kept: serde_json::Value = serde_json::from_slice(&std::fs::read(&config).unwrap()).unwrap();
    assert_eq!(
        kept["auths"][&reg]["auth"], "Zml4dHVyZTpmaXh0dXJlLXBhc3M=",
        "{kept}"
    );
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(
        std::fs::metadata(&config).unwrap().permissions().mode() & 0o777,
        0o600
    );
    w.ok(&["pull", "-q", &private]);
    assert_eq!(
        w.ok(&["logout", &reg]),
        format!("Removing login credentials for {reg}\n")
    );
    w.ok(&["rmi", &private]);
    assert_ne!(w.run(&["pull", "-q", &private]).code, 0);
    w.assert_clean();
}

/// `push`: blobs the repository has are skipped, blobs of another repository of the same
/// registry are mounted, new ones uploaded, and the manifest goes under the tag; what was
/// pushed pulls and runs elsewhere.
#[test]
fn push_mounts_skips_and_uploads_blobs() {
    let w = Wharf::new("cli-push");
    w.pull_busybox();
    let reg = engine_support::registry();
    let uniq = format!(
        "{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos()
    );
    let target = format!("{reg}/wharf-push-test/{uniq}:v1");
    w.ok(&["tag", &busybox(), &target]);
    let out = w.ok(&["push", &target]);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(
        lines[0],
        format!("The push refers to repository [{reg}/wharf-push-test/{uniq}]")
    );
    assert!(
        lines[1..3]
            .iter()
            .all(|l| l.ends_with(": Mounted from fixtures/busybox")),
        "{out}"
    );
    assert!(
        lines[3].starts_with("v1: digest: sha256:") && lines[3].contains(" size: "),
        "{out}"
    );
    let out = w.ok(&["push", &target]);
    assert!(
        out.lines()
            .skip(1)
            .take(2)
            .all(|l| l.ends_with(": Layer already exists")),
        "{out}"
    );
    // A new layer is uploaded; the image then pulls into another engine and runs.
    w.ok(&[
        "run",
        "--name",
        "c",
        "--network",
        "none",
        &busybox(),
        "sh",
        "-c",
        "echo pushed > /msg",
    ]);
    let target2 = format!("{reg}/wharf-push-test/{uniq}:v2");
    w.ok(&["commit", "-c", "CMD [\"cat\", \"/msg\"]", "c", &target2]);
    let out = w.ok(&["push", &target2]);
    assert_eq!(out.matches(": Pushed").count(), 2, "{out}");
    let other = Wharf::new("cli-push-pull");
    assert_eq!(
        other.ok(&["run", "--rm", "--network", "none", &target2]),
        "pushed\n"
    );
    // A registry that wants credentials: refused, said once.
    let auth = std::env::var("WHARF_TEST_REGISTRY_AUTH").unwrap();
    let denied = format!("{auth}/private/pushed-{uniq}:v1");
    w.ok(&["tag", &busybox(), &denied]);
    let err = w.fails(1, &["push", &denied]);
    assert!(
        err.contains(&format!("pushing {denied}")) && err.contains("401"),
        "{err}"
    );
    assert_eq!(err.matches("pushing").count(), 1, "{err}");
    w.ok(&["rm", "c"]);
    w.assert_clean();
    other.assert_clean();
}

/// bash completion offers the engine's container, pod and image names where a command
/// takes them.
#[test]
fn completion_offers_container_and_image_names() {
    let w = Wharf::new("cli-complete");
    w.pull_busybox();
    w.ok(&[
        "create",
        "--name",
        "alpha-box",
        "--network",
        "none",
        &busybox(),
        "true",
    ]);
    let script = w.path("wharf.bash");
    std::fs::write(&script, w.ok(&["completion", "bash"])).unwrap();
    let probe = |words: &str| {
        let base = w.cmd(&["version"]);
        let bin_dir = Path::new(env!("CARGO_BIN_EXE_wharf"))
            .parent()
            .unwrap()
            .to_path_buf();
        let mut c = Command::new("bash");
        c.arg("-c").arg(format!(
            "source {}; COMP_WORDS=({words}); COMP_CWORD=$((${{#COMP_WORDS[@]}} - 1)); \
             _wharf_with_names; printf '%s\\n' \"${{COMPREPLY[@]}}\"",
            script.display()
        ));
        for (k, v) in base.get_envs() {
            if let Some(v) = v {
                c.env(k, v);
            }
        }
        c.env(
            "PATH",
            format!("{}:{}", bin_dir.display(), std::env::var("PATH").unwrap()),
        );
        String::from_utf8(c.output().unwrap().stdout).unwrap()
    };
    let names = probe("wharf start al");
    assert!(names.lines().any(|l| l == "alpha-box"), "{names}");
    let names = probe("wharf rmi ''");
    assert!(names.lines().any(|l| l == busybox()), "{names}");
    // Not where a command takes no names.
    assert!(!probe("wharf pull al").contains("alpha-box"));
    w.ok(&["rm", "alpha-box"]);
    w.assert_clean();
}

/// More of what docker users type: ps filters (exited=, name= with anchors, volume=),
/// -l/-n, `info`, `--expose` with -P, `--pid host`.
#[test]
fn ps_filters_latest_info_expose_and_host_pid() {
    let w = Wharf::new("cli-more-flags");
    w.pull_busybox();
    w.ok(&[
        "run",
        "-d",
        "--name",
        "web1",
        "--network",
        "none",
        "-v",
        "/data",
        &busybox(),
        "sleep",
        "1000",
    ]);
    w.ok(&[
        "run",
        "--name",
        "ok0",
        "--network",
        "none",
        &busybox(),
        "true",
    ]);
    w.run(&[
        "run",
        "--name",
        "bad3",
        "--network",
        "none",
        &busybox(),
        "sh",
        "-c",
        "exit 3",
    ]);
    let names = |args: &[&str]| {
        let mut a = vec!["ps", "--format", "{{.Names}}"];
        a.extend_from_slice(args);
        w.ok(&a)
    };
    assert_eq!(names(&["-a", "--filter", "exited=3"]), "bad3\n");
    assert_eq!(names(&["--filter", "exited=0"]), "ok0\n");
    assert_eq!(names(&["-a", "--filter", "name=^web1$"]), "web1\n");
    assert_eq!(names(&["-a", "--filter", "name=^we"]), "web1\n");
    assert_eq!(names(&["-a", "--filter", "name=eb"]), "web1\n");
    assert_eq!(names(&["-a", "--filter", "name=^eb"]), "");
    assert_eq!(names(&["-a", "--filter", "volume=/data"]), "web1\n");
    assert_eq!(names(&["-l"]), "bad3\n");
    assert_eq!(names(&["-n", "2"]), "bad3\nok0\n");
    assert_eq!(
        w.ok(&[
            "info",
            "--format",
            "{{.ContainersRunning}} {{.ContainersStopped}} {{.OSType}}"
        ]),
        "1 2 linux\n"
    );
    assert!(
        w.ok(&["info"])
            .starts_with("Server:\n Containers: 3\n  Running: 1\n")
    );
    assert_eq!(
        w.ok(&["version", "--format", "{{.Server.Version}}"]),
        format!("{}\n", env!("CARGO_PKG_VERSION"))
    );
    // --pid host sees the host's processes; the default sees its own.
    let image = busybox();
    let count = |flags: &[&str]| -> usize {
        let mut a = vec!["run", "--rm", "--network", "none"];
        a.extend_from_slice(flags);
        a.extend([image.as_str(), "sh", "-c", "ls /proc | grep -c '^[0-9]'"]);
        w.ok(&a).trim().parse().unwrap()
    };
    assert!(count(&[]) < 5);
    assert!(count(&["--pid", "host"]) > 20);
    let err = w.fails(
        125,
        &["run", "--rm", "--pid", "container:x", &busybox(), "true"],
    );
    assert!(err.contains("--pid"), "{err}");
    // --expose adds to what -P publishes.
    w.ok(&[
        "run",
        "-d",
        "--name",
        "exp",
        "--expose",
        "9999",
        "-P",
        &busybox(),
        "sleep",
        "100",
    ]);
    let port = w.ok(&["port", "exp"]);
    assert!(port.starts_with("9999/tcp -> 0.0.0.0:"), "{port}");
    w.ok(&["rm", "-f", "-v", "web1", "ok0", "bad3", "exp"]);
    w.assert_clean();
}

/// Resource and pull flags docker users pass: --cpuset-cpus, --cpu-quota/--cpu-period,
/// --cpu-shares, --memory-reservation, --group-add, -q, --cidfile; logs --until.
#[test]
fn resource_flags_cidfile_and_logs_until() {
    let w = Wharf::new("cli-resources");
    let cidfile = w.path("cid");
    let out = w.run(&[
        "run",
        "-d",
        "-q",
        "--name",
        "r",
        "--network",
        "none",
        "--cpuset-cpus",
        "0",
        "--cpu-quota",
        "50000",
        "--cpu-period",
        "100000",
        "--cpu-shares",
        "512",
        "--memory-reservation",
        "32m",
        "--group-add",
        "4242",
        "--cidfile",
        cidfile.to_str().unwrap(),
        &busybox(),
        "sh",
        "-c",
        "echo first; sleep 2; echo second; sleep 1000",
    ]);
    assert_eq!(out.code, 0, "{out:?}");
    // -q: no pull progress, only the id.
    assert_eq!(out.stderr, "", "{out:?}");
    let id = out.stdout.trim().to_string();
    assert_eq!(std::fs::read_to_string(&cidfile).unwrap(), id);
    let c = w.inspect("r");
    assert_eq!(c["HostConfig"]["NanoCpus"], 500_000_000, "{c:#}");
    assert_eq!(c["HostConfig"]["CpuShares"], 512, "{c:#}");
    assert_eq!(c["HostConfig"]["MemoryReservation"], 32 << 20, "{c:#}");
    let status = w.ok(&[
        "exec",
        "r",
        "sh",
        "-c",
        "grep -E '^(Cpus_allowed_list|Groups)' /proc/1/status",
    ]);
    assert!(status.contains("Cpus_allowed_list:\t0\n"), "{status}");
    assert!(status.contains("4242"), "{status}");
    // logs --until: what came before that time only.
    w.wait_for_log("r", "second");
    let first_at = w
        .ok(&["logs", "-t", "r"])
        .lines()
        .next()
        .unwrap()
        .split(' ')
        .next()
        .unwrap()
        .to_string();
    let t = wharf_sys::time::parse_rfc3339(&first_at).unwrap() + Duration::from_millis(500);
    let until = wharf_sys::time::format_nano(t);
    assert_eq!(w.ok(&["logs", "--until", &until, "r"]), "first\n");
    let err = w.fails(
        125,
        &[
            "run",
            "--rm",
            "--cpus",
            "1",
            "--cpu-quota",
            "5000",
            &busybox(),
            "true",
        ],
    );
    assert!(err.contains("--cpu-quota"), "{err}");
    let err = w.fails(
        125,
        &["run", "--rm", "--group-add", "wheel", &busybox(), "true"],
    );
    assert!(err.contains("wheel"), "{err}");
    w.ok(&["rm", "-f", "r"]);
    w.assert_clean();
}

/// `pod ls` shows settled pods from the store without reading their shims' records, and an
/// exit the shim saw since (no other command in between) still shows in the next listing.
#[test]
fn pod_ls_sees_an_exit_behind_its_back() {
    let w = Wharf::new("cli-pod-ls-settled");
    w.pull_busybox();
    w.ok(&["run", "-d", "--name", "quiet", &busybox(), "sleep", "1000"]);
    w.ok(&["run", "-d", "--name", "victim", &busybox(), "sleep", "1000"]);
    let ls = || {
        let mut rows: Vec<String> = w
            .ok(&[
                "pod",
                "ls",
                "--format",
                "{{.Name}} {{.Status}} {{.Ready}} {{.Restarts}}",
            ])
            .lines()
            .map(String::from)
            .collect();
        rows.sort();
        rows
    };
    // Twice: the second one finds both pods settled.
    for _ in 0..2 {
        assert_eq!(ls(), ["quiet Running 1/1 0", "victim Running 1/1 0"]);
    }
    let pid: i32 = w
        .ok(&["inspect", "-f", "{{.State.Pid}}", "victim"])
        .trim()
        .parse()
        .unwrap();
    // SAFETY: kill(2) of the container's init this test started.
    unsafe { libc::kill(pid, libc::SIGKILL) };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let rows = ls();
        if rows[1] != "victim Running 1/1 0" {
            assert_eq!(rows[0], "quiet Running 1/1 0");
            assert!(rows[1].starts_with("victim Error 0/1"), "{rows:?}");
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the exit never showed: {rows:?}"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    w.ok(&["rm", "-f", "quiet", "victim"]);
    w.assert_clean();
}
