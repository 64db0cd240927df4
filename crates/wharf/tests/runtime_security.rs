//! Regression tests for the runc CVE classes: a container must not reach the host through
//! leaked fds, the working directory, /proc/PID/exe of the runtime, or symlinked mount
//! destinations.

mod common;

use common::*;
use serde_json::json;
use std::time::Duration;

/// CVE-2024-21626: a cwd of /proc/self/fd/N must not land in a host directory the runtime
/// had open (runc leaked an fd of /sys/fs/cgroup).
#[test]
fn cwd_through_a_leaked_fd_cannot_reach_the_host() {
    let env = Env::new("cve-2024-21626");
    for n in 3..12 {
        let mut b = env.bundle(
            &format!("c{n}"),
            BASE,
            &["sh", "-c", "pwd; ls .. | head -3"],
        );
        b.config["process"]["cwd"] = json!(format!("/proc/self/fd/{n}"));
        b.save();
        let (code, out, err) = run(&env, &b, &format!("c{n}"));
        // Either refused, or the cwd is a path inside the container.
        if code == 0 {
            assert!(
                out.starts_with('/') && !out.contains("(unreachable)"),
                "fd {n}: {out}"
            );
            assert!(
                !out.contains("cgroup.procs") && !out.contains("wharf-test"),
                "fd {n} reached the host: {out}"
            );
        } else {
            assert!(!err.is_empty(), "fd {n}: failed without a message");
        }
    }
    // The same through exec.
    let b = env.bundle("r", BASE, &["sleep", "1000"]);
    ok(
        &env,
        &["run", "-d", "--bundle", b.dir.to_str().unwrap(), "r"],
    );
    for n in 3..12 {
        let out = rt_out(
            &env,
            &[
                "exec",
                "--cwd",
                &format!("/proc/self/fd/{n}"),
                "r",
                "sh",
                "-c",
                "pwd; ls ..",
            ],
        );
        let stdout = String::from_utf8_lossy(&out.stdout);
        if out.status.success() {
            assert!(
                !stdout.contains("(unreachable)") && !stdout.contains("cgroup.procs"),
                "exec fd {n}: {stdout}"
            );
        }
    }
    ok(&env, &["delete", "-f", "r"]);
}

/// No fd of the runtime survives into the container process: only stdio (plus what
/// --preserve-fds asks for).
#[test]
fn no_runtime_fd_leaks_into_the_container() {
    let env = Env::new("fd-leak");
    let b = env.bundle("c", BASE, &["sh", "-c", "ls /proc/self/fd"]);
    let (code, out, err) = run(&env, &b, "c");
    assert_eq!(code, 0, "{err}");
    // ls itself holds one fd for the directory it reads.
    let fds: Vec<u32> = out.split_whitespace().map(|s| s.parse().unwrap()).collect();
    assert!(
        fds.len() <= 4 && fds.iter().filter(|f| **f > 2).count() <= 1,
        "{fds:?}"
    );

    let r = env.bundle("r", BASE, &["sleep", "1000"]);
    ok(
        &env,
        &["run", "-d", "--bundle", r.dir.to_str().unwrap(), "r"],
    );
    let out = ok(&env, &["exec", "r", "ls", "/proc/self/fd"]);
    let fds: Vec<u32> = out.split_whitespace().map(|s| s.parse().unwrap()).collect();
    assert!(
        fds.iter().filter(|f| **f > 2).count() <= 1,
        "exec leaked fds: {fds:?}"
    );
    ok(&env, &["delete", "-f", "r"]);
}

/// --preserve-fds passes exactly the fds asked for.
#[test]
fn preserve_fds_passes_extra_fds() {
    use std::os::fd::AsRawFd;
    use std::os::unix::process::CommandExt;
    let env = Env::new("preserve-fds");
    let b = env.bundle("c", BASE, &["sh", "-c", "cat <&3"]);
    let data = env.path().join("data");
    std::fs::write(&data, "passed-through\n").unwrap();
    let file = std::fs::File::open(&data).unwrap();
    let raw = file.as_raw_fd();
    let mut cmd = rt(&env);
    cmd.args([
        "run",
        "--preserve-fds",
        "1",
        "--bundle",
        b.dir.to_str().unwrap(),
        "c",
    ]);
    // SAFETY: dup2 between fork and exec onto fd 3 of the child.
    unsafe {
        cmd.pre_exec(move || {
            // dup2 onto itself keeps close-on-exec: clear it explicitly.
            if libc::dup2(raw, 3) == -1 || libc::fcntl(3, libc::F_SETFD, 0) == -1 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout), "passed-through\n");
}

/// CVE-2019-5736 / CVE-2016-9962: while `exec` joins a container, the process is visible in
/// the container's pid namespace; the container must not read its /proc/PID/exe (the
/// runtime binary), fds or environment. (Once it execs the sealed exec helper, its exe is
/// that memfd: nothing of the host.)
#[test]
fn container_cannot_reach_the_runtime_binary_during_exec() {
    let env = Env::new("cve-2019-5736");
    let log = env.path().join("scan");
    std::fs::create_dir(&log).unwrap();
    let scanner = "while true; do for p in /proc/[0-9]*; do \
        t=$(readlink $p/exe 2>/dev/null) || continue; \
        case \"$t\" in *busybox*|''|/memfd:wharf-dmz*) ;; *) echo \"LEAK $p $t\" >> /scan/out;; esac; \
        if ls $p/fd >/dev/null 2>&1 && [ \"$(cat $p/comm)\" = wharf ]; then echo \"FD $p\" >> /scan/out; fi; \
        done; done";
    let mut b = env.bundle("c", BASE, &["sh", "-c", scanner]);
    b.config["mounts"].as_array_mut().unwrap().push(
        json!({"destination": "/scan", "type": "bind", "source": log, "options": ["rbind", "rw"]}),
    );
    b.save();
    ok(
        &env,
        &["run", "-d", "--bundle", b.dir.to_str().unwrap(), "c"],
    );
    for _ in 0..40 {
        let _ = rt_out(&env, &["exec", "c", "true"]);
    }
    ok(&env, &["delete", "-f", "c"]);
    let found = std::fs::read_to_string(log.join("out")).unwrap_or_default();
    assert!(
        found.is_empty(),
        "the container reached the runtime: {found}"
    );
}

/// CVE-2021-30465 class: mount destinations that are symlinks out of the rootfs are resolved
/// inside it, so nothing is mounted on the host.
#[test]
fn symlinked_mount_destinations_stay_in_the_rootfs() {
    let env = Env::new("cve-2021-30465");
    let outside = env.path().join("outside");
    std::fs::create_dir(&outside).unwrap();
    let mut b = env.bundle(
        "c",
        BASE,
        &[
            "sh",
            "-c",
            "ls -d /injected-abs /injected-rel 2>&1; grep -c injected /proc/mounts",
        ],
    );
    let rootfs = b.rootfs();
    std::os::unix::fs::symlink("/", rootfs.join("abs")).unwrap();
    std::os::unix::fs::symlink("../../../../../../../../../", rootfs.join("rel")).unwrap();
    std::os::unix::fs::symlink(&outside, rootfs.join("direct")).unwrap();
    b.config["root"]["readonly"] = json!(false);
    let mounts = b.config["mounts"].as_array_mut().unwrap();
    mounts.push(json!({"destination": "/abs/injected-abs", "type": "tmpfs", "source": "tmpfs"}));
    mounts.push(json!({"destination": "/rel/injected-rel", "type": "tmpfs", "source": "tmpfs"}));
    mounts.push(json!({"destination": "/direct/sub", "type": "tmpfs", "source": "tmpfs"}));
    b.save();
    let (code, out, err) = run(&env, &b, "c");
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("/injected-abs\n/injected-rel\n"), "{out}");
    assert!(!std::path::Path::new("/injected-abs").exists());
    assert!(!std::path::Path::new("/injected-rel").exists());
    assert!(
        !outside.join("sub").exists(),
        "a mount point was created outside the rootfs"
    );
    assert!(!is_mounted(&outside.join("sub")));
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    assert!(
        !mountinfo.contains("injected"),
        "a mount leaked to the host"
    );
}

/// A bind-mount source given as a symlink inside the bundle is the host's business, but a
/// bind destination that is a symlink to a host file must not overwrite that file.
#[test]
fn file_bind_through_symlink_does_not_touch_host_file() {
    let env = Env::new("bind-symlink");
    let victim = env.path().join("victim");
    std::fs::write(&victim, "host data\n").unwrap();
    let src = env.path().join("src");
    std::fs::write(&src, "container data\n").unwrap();
    let mut b = env.bundle("c", BASE, &["cat", "/etc/target"]);
    std::os::unix::fs::symlink(&victim, b.rootfs().join("etc/target")).unwrap();
    b.config["mounts"].as_array_mut().unwrap().push(
        json!({"destination": "/etc/target", "type": "bind", "source": src, "options": ["bind", "ro"]}),
    );
    b.save();
    let (_code, _out, _err) = run(&env, &b, "c");
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "host data\n");
    assert!(!is_mounted(&victim));
    assert!(wait_until(Duration::from_secs(1), || state_left(&env).is_empty()));
}
