//! The red-team escapes through the runtime front end (`wharf runtime`), each with harmless
//! markers in the test's own directory: a program path through a leaked fd
//! (CVE-2024-21626, argv variant), the host binary through /proc/self/exe (CVE-2019-5736),
//! and masked paths redirected through a symlinked /dev/null (CVE-2025-31133 class).

mod common;

use common::*;
use serde_json::json;
use std::path::{Path, PathBuf};
use wharf_testbed::{fds_of, host_echo, through_fd};

#[test]
fn program_path_through_any_fd_cannot_reach_the_host() {
    let env = Env::new("argv-fd");
    let marker = host_echo(&env.path().join("host-only"));
    // Foreground run: the program itself is the path.
    for n in 3..24 {
        let id = format!("c{n}");
        let b = env.bundle(&id, BASE, &[&through_fd(n, &marker), "ESCAPED"]);
        let (_code, out, err) = run(&env, &b, &id);
        assert!(
            !out.contains("ESCAPED") && !err.contains("ESCAPED"),
            "fd {n}: the container ran a host program: {out}{err}"
        );
    }
    // Through exec into a running container, and as a #! interpreter.
    let b = env.bundle("r", BASE, &["sleep", "1000"]);
    let script = b.rootfs().join("bin/through-fd");
    ok(
        &env,
        &["run", "-d", "--bundle", b.dir.to_str().unwrap(), "r"],
    );
    for n in 3..40 {
        let out = rt_out(&env, &["exec", "r", &through_fd(n, &marker), "ESCAPED"]);
        let all = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(!all.contains("ESCAPED"), "exec fd {n}: {all}");
        std::fs::write(&script, format!("#!{} ESCAPED\n", through_fd(n, &marker))).unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
        let out = rt_out(&env, &["exec", "r", "/bin/through-fd"]);
        let all = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(!all.contains("ESCAPED"), "#! through fd {n}: {all}");
    }
    ok(&env, &["delete", "-f", "r"]);
}

/// The container's first process and an exec'd one hold exactly stdio.
#[test]
fn container_processes_start_with_stdio_only() {
    let env = Env::new("fd-list");
    let r = env.bundle("r", BASE, &["sleep", "1000"]);
    let pid_file = env.path().join("init.pid");
    ok(
        &env,
        &[
            "run",
            "-d",
            "--pid-file",
            pid_file.to_str().unwrap(),
            "--bundle",
            r.dir.to_str().unwrap(),
            "r",
        ],
    );
    let init = std::fs::read_to_string(&pid_file).unwrap();
    assert_eq!(
        fds_of(init.trim().parse().unwrap()),
        ["0", "1", "2"],
        "the container's first process"
    );
    let exec_pid = env.path().join("exec.pid");
    ok(
        &env,
        &[
            "exec",
            "-d",
            "--pid-file",
            exec_pid.to_str().unwrap(),
            "r",
            "sleep",
            "1000",
        ],
    );
    let pid = std::fs::read_to_string(&exec_pid).unwrap();
    assert_eq!(
        fds_of(pid.trim().parse().unwrap()),
        ["0", "1", "2"],
        "an exec'd process"
    );
    ok(&env, &["delete", "-f", "r"]);
}

/// The loader and libraries `binary` needs, copied into `rootfs` where it looks for them
/// (what any glibc-based image has): without them, exec'ing the host's dynamically linked
/// binary would fail for want of a loader, hiding the escape.
fn add_host_libraries(rootfs: &Path, binary: &Path) {
    let out = std::process::Command::new("ldd")
        .arg(binary)
        .output()
        .unwrap();
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let path = line
            .split_whitespace()
            .find(|w| w.starts_with('/'))
            .map(PathBuf::from);
        if let Some(path) = path {
            let dst = rootfs.join(path.strip_prefix("/").unwrap());
            std::fs::create_dir_all(dst.parent().unwrap()).unwrap();
            let real = std::fs::canonicalize(&path).unwrap();
            wharf_testbed::copy_executable(&real, &dst);
        }
    }
}

fn file_digest(path: &Path) -> Vec<u8> {
    std::fs::read(path).unwrap()
}

/// CVE-2019-5736: `/proc/self/exe` as the program, as a `#!` interpreter, or reached from a
/// running container never runs or opens the host binary for writing.
#[test]
fn proc_self_exe_never_reaches_the_host_binary() {
    let env = Env::new("cve-2019-5736-exe");
    let wharf = Path::new(env!("CARGO_BIN_EXE_wharf"));
    let before = file_digest(wharf);
    // As the program: wharf would print its version.
    let b = env.bundle("c", BASE, &["/proc/self/exe", "--version"]);
    add_host_libraries(&b.rootfs(), wharf);
    let (code, out, err) = run(&env, &b, "c");
    assert!(
        !out.contains("wharf") && !err.contains("wharf "),
        "the container ran the host binary: {out}{err}"
    );
    assert_ne!(code, 0, "{out}{err}");
    // With LD_PRELOAD set, as the exploit does (the helper is static: nothing is loaded).
    let mut b = env.bundle("p", BASE, &["/proc/self/exe", "runtime", "--help"]);
    add_host_libraries(&b.rootfs(), wharf);
    b.config["process"]["env"]
        .as_array_mut()
        .unwrap()
        .push(json!("LD_PRELOAD=/lib/evil.so"));
    b.save();
    let (_code, out, err) = run(&env, &b, "p");
    assert!(
        !out.contains("runc") && !out.contains("USAGE"),
        "{out}{err}"
    );
    // As an interpreter.
    let b = env.bundle(
        "s",
        BASE,
        &[
            "sh",
            "-c",
            "/bin/x --version; echo rc=$?; readlink /proc/self/exe",
        ],
    );
    add_host_libraries(&b.rootfs(), wharf);
    std::fs::write(b.rootfs().join("bin/x"), "#!/proc/self/exe\n").unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(
        b.rootfs().join("bin/x"),
        std::fs::Permissions::from_mode(0o755),
    )
    .unwrap();
    let (_code, out, err) = run(&env, &b, "s");
    assert!(
        !out.contains("wharf") && out.contains("rc="),
        "the interpreter ran the host binary: {out}{err}"
    );
    // From a running container: every /proc/*/exe it can see, opened for writing while
    // processes are exec'd into it; and the exe of its own init at the start.
    let scan = env.path().join("scan");
    std::fs::create_dir(&scan).unwrap();
    let scanner = "while true; do for p in /proc/[0-9]*; do \
        (echo x >> $p/exe) 2>/dev/null && echo \"WROTE $p $(readlink $p/exe)\" >> /scan/out; \
        done; done";
    let mut b = env.bundle("w", BASE, &["sh", "-c", scanner]);
    b.config["mounts"].as_array_mut().unwrap().push(
        json!({"destination": "/scan", "type": "bind", "source": scan, "options": ["rbind", "rw"]}),
    );
    b.save();
    ok(
        &env,
        &["run", "-d", "--bundle", b.dir.to_str().unwrap(), "w"],
    );
    for _ in 0..30 {
        let _ = rt_out(&env, &["exec", "w", "true"]);
    }
    ok(&env, &["delete", "-f", "w"]);
    let wrote = std::fs::read_to_string(scan.join("out")).unwrap_or_default();
    assert!(
        !wrote.contains("wharf") && !wrote.contains("memfd"),
        "a container process opened an exe for writing: {wrote}"
    );
    assert!(file_digest(wharf) == before, "the host binary changed");
}

/// CVE-2025-31133 class: /dev is bound from a directory whose `null` is a symlink to a
/// procfs file; masking must not turn masked paths into views of that file. (The target is
/// the container's own hostname, in its own UTS namespace, and nothing is written.)
#[test]
fn masked_paths_are_not_redirected_through_dev_null() {
    let env = Env::new("cve-2025-31133");
    let dev = env.path().join("fake-dev");
    std::fs::create_dir(&dev).unwrap();
    std::os::unix::fs::symlink("/proc/sys/kernel/hostname", dev.join("null")).unwrap();
    let mut b = env.bundle(
        "c",
        BASE,
        &[
            "sh",
            "-c",
            "for f in /proc/timer_list /proc/keys /proc/kcore; do echo \"$f: $(head -c 100 $f)\"; done",
        ],
    );
    b.config["hostname"] = json!("masked-redirect-marker");
    b.config["mounts"].as_array_mut().unwrap().push(
        json!({"destination": "/dev", "type": "bind", "source": dev, "options": ["rbind", "rw"]}),
    );
    b.save();
    let (code, out, err) = run(&env, &b, "c");
    assert_eq!(code, 0, "{err}");
    assert!(
        !out.contains("masked-redirect-marker"),
        "a masked path showed the symlink's target: {out}"
    );
    assert!(out.contains("/proc/timer_list: \n"), "{out}");
}

/// CVE-2025-52565 class: with /dev from a directory whose `console` is a symlink to a
/// procfs file, the terminal's bind mount must land on /dev/console, never on that file.
/// (The file is the container's own hostname, read only.)
#[test]
fn console_mount_is_not_redirected_through_dev_console() {
    let env = Env::new("cve-2025-52565");
    let dev = env.path().join("fake-dev");
    std::fs::create_dir_all(dev.join("pts")).unwrap();
    std::os::unix::fs::symlink("pts/ptmx", dev.join("ptmx")).unwrap();
    std::os::unix::fs::symlink("/proc/sys/kernel/hostname", dev.join("console")).unwrap();
    let null = std::ffi::CString::new(dev.join("null").to_str().unwrap()).unwrap();
    // SAFETY: mknod of a null device (1:3) in the test's own directory.
    let made = unsafe { libc::mknod(null.as_ptr(), libc::S_IFCHR | 0o666, libc::makedev(1, 3)) };
    assert_eq!(made, 0);
    let mut b = env.bundle(
        "c",
        BASE,
        &[
            "sh",
            "-c",
            "echo stdin=$(readlink /proc/self/fd/0); \
             grep -E ' /proc/sys/kernel/hostname | /dev/console ' /proc/self/mountinfo | cut -d' ' -f5; \
             echo done",
        ],
    );
    b.config["process"]["terminal"] = json!(true);
    b.config["hostname"] = json!("console-redirect-marker");
    let mounts = b.config["mounts"].as_array_mut().unwrap();
    mounts.push(
        json!({"destination": "/dev", "type": "bind", "source": dev, "options": ["rbind", "rw"]}),
    );
    mounts.push(
        json!({"destination": "/dev/pts", "type": "devpts", "source": "devpts",
        "options": ["nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620"]}),
    );
    b.save();
    let mut master = create_with_console(&env, &b, "c");
    ok(&env, &["start", "c"]);
    let text = read_console_until(&mut master, "done");
    assert!(
        text.contains("stdin=/dev/pts/"),
        "stdio is not a pty: {text}"
    );
    assert!(text.contains("/dev/console"), "no console mount: {text}");
    assert!(
        !text.contains("/proc/sys/kernel/hostname"),
        "the console was mounted on a procfs file: {text}"
    );
    let _ = rt_out(&env, &["delete", "-f", "c"]);
}

/// uid, gid or an additional gid above 2147483647 in config.json (or an exec's process) is
/// refused: 4294967295 is (uid_t)-1, which setresuid takes as "leave unchanged" (root).
#[test]
fn out_of_range_ids_are_refused() {
    let env = Env::new("uid-range");
    for (field, value) in [
        ("uid", json!(4294967295u32)),
        ("gid", json!(4294967295u32)),
        ("uid", json!(2147483648u32)),
        ("additionalGids", json!([4294967295u32])),
    ] {
        let mut b = env.bundle("c", BASE, &["id"]);
        b.config["process"]["user"][field] = value.clone();
        b.save();
        let (code, out, err) = run(&env, &b, "c");
        assert!(
            code != 0 && err.contains("out of range") && !out.contains("uid="),
            "{field}={value}: {out}{err}"
        );
        let _ = rt_out(&env, &["delete", "-f", "c"]);
    }
    let r = env.bundle("r", BASE, &["sleep", "1000"]);
    ok(
        &env,
        &["run", "-d", "--bundle", r.dir.to_str().unwrap(), "r"],
    );
    let out = rt_out(&env, &["exec", "--user", "4294967295", "r", "id", "-u"]);
    assert!(
        !out.status.success() && String::from_utf8_lossy(&out.stderr).contains("out of range"),
        "{out:?}"
    );
    ok(&env, &["delete", "-f", "r"]);
}

/// Mounts inside /proc (but the files lxcfs provides) and device paths that leave /dev
/// once `..` is resolved are refused, as runc refuses them.
#[test]
fn mounts_in_proc_and_devices_outside_dev_are_refused() {
    let env = Env::new("proc-mounts");
    let src = env.path().join("src");
    std::fs::create_dir(&src).unwrap();
    for dest in ["/proc/sys", "/proc/self/attr", "/proc/../proc/kcore"] {
        let mut b = env.bundle("c", BASE, &["true"]);
        b.config["mounts"].as_array_mut().unwrap().push(
            json!({"destination": dest, "type": "bind", "source": src, "options": ["rbind"]}),
        );
        b.save();
        let (code, _, err) = run(&env, &b, "c");
        assert!(code != 0 && err.contains("inside /proc"), "{dest}: {err}");
    }
    let mut b = env.bundle("c", BASE, &["true"]);
    let proc_mount = b.config["mounts"]
        .as_array_mut()
        .unwrap()
        .iter_mut()
        .find(|m| m["destination"] == "/proc")
        .unwrap();
    *proc_mount =
        json!({"destination": "/proc", "type": "bind", "source": src, "options": ["rbind"]});
    b.save();
    let (code, _, err) = run(&env, &b, "c");
    assert!(code != 0 && err.contains("must be of type proc"), "{err}");
    // lxcfs' files are allowed.
    let file = env.path().join("meminfo");
    std::fs::write(&file, "MemTotal: 1 kB\n").unwrap();
    let mut b = env.bundle("c", BASE, &["cat", "/proc/meminfo"]);
    b.config["mounts"].as_array_mut().unwrap().push(
        json!({"destination": "/proc/meminfo", "type": "bind", "source": file, "options": ["rbind", "ro"]}),
    );
    b.save();
    let (code, out, err) = run(&env, &b, "c");
    assert_eq!((code, out.as_str()), (0, "MemTotal: 1 kB\n"), "{err}");
    // A device whose path climbs out of /dev.
    let mut b = env.bundle("c", BASE, &["true"]);
    b.config["linux"]["devices"] =
        json!([{"path": "/dev/../etc/evil", "type": "c", "major": 1, "minor": 3}]);
    b.save();
    let (code, _, err) = run(&env, &b, "c");
    assert!(code != 0 && err.contains("not under /dev"), "{err}");
    assert!(!b.rootfs().join("etc/evil").exists());
}

/// A startContainer hook runs a program of the image (resolved in the container): one
/// whose interpreter is /proc/self/exe must not run the host binary either.
#[test]
fn start_container_hooks_never_run_the_host_binary() {
    let env = Env::new("hook-exe");
    let log = env.path().join("hooklog");
    std::fs::create_dir(&log).unwrap();
    let mut b = env.bundle("c", BASE, &["true"]);
    add_host_libraries(&b.rootfs(), Path::new(env!("CARGO_BIN_EXE_wharf")));
    // Run by the host binary, this would fail with `unknown command "escaped-marker"`,
    // which the hook's error shows.
    std::fs::write(
        b.rootfs().join("bin/evil-hook"),
        "#!/proc/self/exe escaped-marker\n",
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(
        b.rootfs().join("bin/evil-hook"),
        std::fs::Permissions::from_mode(0o755),
    )
    .unwrap();
    b.config["hooks"] = json!({"startContainer": [{"path": "/bin/evil-hook"}]});
    b.save();
    let (_code, out, err) = run(&env, &b, "c");
    assert!(
        !out.contains("escaped-marker") && !err.contains("unknown command"),
        "the hook ran the host binary: {out}{err}"
    );
}

/// In a user namespace devices are the host's nodes bound onto mount points: a mount point
/// the image made a symlink (here into /proc) is replaced, never followed.
#[test]
fn device_mount_points_are_not_followed_in_a_user_namespace() {
    let env = Env::new("userns-dev");
    let dev = env.path().join("fake-dev");
    std::fs::create_dir(&dev).unwrap();
    std::os::unix::fs::symlink("/proc/sys/kernel/hostname", dev.join("null")).unwrap();
    let mut b = env.bundle(
        "c",
        BASE,
        &[
            "sh",
            "-c",
            "echo link=$(readlink /dev/null); echo host=$(cat /proc/sys/kernel/hostname); \
             stat -c '%F %t:%T' /dev/null",
        ],
    );
    let base = 300_000u32;
    let status = std::process::Command::new("chown")
        .args(["-R", "-h", &format!("{base}:{base}")])
        .arg(b.rootfs())
        .arg(&dev)
        .status()
        .unwrap();
    assert!(status.success());
    b.config["hostname"] = json!("userns-dev-marker");
    b.config["linux"]["namespaces"]
        .as_array_mut()
        .unwrap()
        .push(json!({"type": "user"}));
    b.config["linux"]["uidMappings"] = json!([{"containerID": 0, "hostID": base, "size": 65536}]);
    b.config["linux"]["gidMappings"] = json!([{"containerID": 0, "hostID": base, "size": 65536}]);
    b.config["linux"]["devices"] =
        json!([{"path": "/dev/null", "type": "c", "major": 1, "minor": 3}]);
    b.config["mounts"].as_array_mut().unwrap().push(
        json!({"destination": "/dev", "type": "bind", "source": dev, "options": ["rbind", "rw"]}),
    );
    b.save();
    let (code, out, err) = run(&env, &b, "c");
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("link=\n"),
        "/dev/null is still a symlink: {out}"
    );
    assert!(
        out.contains("host=userns-dev-marker"),
        "a procfs file was covered: {out}"
    );
    assert!(out.contains("character special file 1:3"), "{out}");
}
