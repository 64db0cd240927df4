//! Containers' mount namespaces are copied from the runtime's small template rather than
//! from the host's, whose mounts grow with every pod: what the template holds, and that
//! the host's mounts still reach containers through their binds.

mod common;

use std::path::Path;
use std::process::Command;

use common::*;
use serde_json::json;

/// Mount points of the mount namespace pinned at `pin`, as a process inside it lists them
/// (a forked child: the template holds no binary to run there, and setns of a mount
/// namespace needs a single-threaded caller). The child only makes raw syscalls.
fn mount_points_in(pin: &Path) -> Vec<String> {
    mountinfo_in(pin)
        .iter()
        .filter_map(|l| l.split(' ').nth(4).map(str::to_string))
        .collect()
}

/// The lines of /proc/self/mountinfo of a process in the mount namespace pinned at `pin`.
fn mountinfo_in(pin: &Path) -> Vec<String> {
    use std::io::Read;
    use std::os::fd::FromRawFd;
    use std::os::unix::ffi::OsStrExt;
    let pin_c = std::ffi::CString::new(pin.as_os_str().as_bytes()).unwrap();
    let mut fds = [0; 2];
    // SAFETY: pipe(2) into a two-element array.
    assert_eq!(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) }, 0);
    // SAFETY: the child makes only async-signal-safe syscalls and _exits.
    let pid = unsafe { libc::fork() };
    if pid == 0 {
        // SAFETY: as above; the buffer is on the child's stack.
        unsafe {
            let ns = libc::open(pin_c.as_ptr(), libc::O_RDONLY);
            if ns < 0 || libc::setns(ns, libc::CLONE_NEWNS) != 0 {
                libc::_exit(2);
            }
            let m = libc::open(c"/proc/self/mountinfo".as_ptr(), libc::O_RDONLY);
            if m < 0 {
                libc::_exit(3);
            }
            let mut buf = [0u8; 16384];
            loop {
                let n = libc::read(m, buf.as_mut_ptr().cast(), buf.len());
                if n <= 0 {
                    break;
                }
                libc::write(fds[1], buf.as_ptr().cast(), n as usize);
            }
            libc::_exit(0);
        }
    }
    // SAFETY: both ends are ours; the write end closes so that the read sees EOF.
    let mut r = unsafe {
        libc::close(fds[1]);
        std::fs::File::from_raw_fd(fds[0])
    };
    let mut text = String::new();
    r.read_to_string(&mut text).unwrap();
    let mut status = 0;
    // SAFETY: reap our own child.
    unsafe { libc::waitpid(pid, &mut status, 0) };
    assert_eq!(status, 0, "reading the template's mounts failed");
    text.lines().map(str::to_string).collect()
}

/// Whether this host mounts cgroup v1 hierarchies (the template then holds their mount
/// points).
fn host_has_v1_hierarchies() -> bool {
    std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap()
        .lines()
        .any(|l| {
            l.split(" - ")
                .nth(1)
                .is_some_and(|t| t.starts_with("cgroup "))
        })
}

fn mount_tmpfs(at: &Path) {
    std::fs::create_dir_all(at).unwrap();
    let ok = Command::new("mount")
        .args(["-t", "tmpfs", "tmpfs"])
        .arg(at)
        .status()
        .unwrap()
        .success();
    assert!(ok, "mount a tmpfs on {}", at.display());
}

/// A bundle running `script` with sh, with binds of (destination, source, options).
fn sh_with_binds(env: &Env, name: &str, script: &str, binds: &[(&str, &Path, &[&str])]) -> Bundle {
    let mut b = env.bundle(name, BASE, &["sh", "-c", script]);
    let mounts = b.config["mounts"].as_array_mut().unwrap();
    for (dest, source, options) in binds {
        mounts.push(
            json!({"destination": dest, "type": "bind", "source": source, "options": options}),
        );
    }
    b.save();
    b
}

#[test]
fn the_template_holds_no_host_mounts_and_later_host_mounts_reach_containers_through_binds() {
    let env = Env::new("mnt-template");
    // Mounts of the host made before the template: a node's pods' (never in it).
    let before = env.path().join("before");
    for i in 0..20 {
        mount_tmpfs(&before.join(i.to_string()));
    }
    let out = {
        let b = env.bundle("first", BASE, &["sh", "-c", "echo first"]);
        run(&env, &b, "first")
    };
    assert_eq!(out.0, 0, "first container: {out:?}");
    assert_eq!(out.1, "first\n");

    let pin = env.root.join(".mnt-template/ns");
    let fs = rustix::fs::statfs(&pin).expect("statfs the template's pin");
    assert_eq!(fs.f_type as i64, 0x6e73_6673, "the pin is not a namespace");
    let points = mount_points_in(&pin);
    // Its own root, the host's /proc, /sys and /dev with what is mounted below them, the
    // empty tmpfs for masked directories and, on a host with v1 hierarchies, their mount
    // points.
    let host_v1 = host_has_v1_hierarchies();
    let v1_points = if host_v1 { "/cgroup-v1" } else { "/" };
    for want in ["/", "/proc", "/sys", "/dev", "/empty", v1_points] {
        assert!(
            points.iter().any(|p| p == want),
            "{want} missing: {points:?}"
        );
    }
    let foreign: Vec<&String> = points
        .iter()
        .filter(|p| {
            !["/", "/proc", "/sys", "/dev", "/empty", "/cgroup-v1"]
                .iter()
                .any(|k| *p == k || p.starts_with(&format!("{k}/")))
        })
        .collect();
    assert!(
        foreign.is_empty(),
        "the template holds host mounts: {foreign:?}"
    );
    assert!(
        !points.iter().any(|p| p.contains("wharf-test")),
        "the template holds the test's mounts: {points:?}"
    );

    // A host mount made after the template, bound into a container: read and written
    // through (its source is opened on the host, not looked up in the template).
    let late = env.path().join("late");
    mount_tmpfs(&late);
    std::fs::write(late.join("in"), "late mount\n").unwrap();
    let file = before.join("3/one");
    std::fs::write(&file, "file on an early mount\n").unwrap();
    let b = sh_with_binds(
        &env,
        "binds",
        "cat /mnt/late/in; echo out > /mnt/late/out; cat /etc/one",
        &[
            ("/mnt/late", &late, &["rbind", "rw"]),
            ("/etc/one", &file, &["bind", "ro", "noatime"]),
        ],
    );
    let out = run(&env, &b, "binds");
    assert_eq!(out.0, 0, "binds container: {out:?}");
    assert_eq!(out.1, "late mount\nfile on an early mount\n");
    assert_eq!(std::fs::read_to_string(late.join("out")).unwrap(), "out\n");
    // The template is made once: still the same namespace.
    let again = rustix::fs::stat(&pin).unwrap().st_ino;
    let out = {
        let b = env.bundle("third", BASE, &["true"]);
        run(&env, &b, "third")
    };
    assert_eq!(out.0, 0, "third container: {out:?}");
    assert_eq!(rustix::fs::stat(&pin).unwrap().st_ino, again);
    assert!(
        state_left(&env).is_empty(),
        "state left: {:?}",
        state_left(&env)
    );
}

/// The masked directories and the read-only v1 /sys/fs/cgroup of every container cloned
/// from the template show the template's read-only tmpfs (a superblock for all of them, not
/// one per container each). A container that may hold CAP_SYS_ADMIN, and so could remount
/// such a superblock read-write for all the others, gets tmpfs of its own, as does a
/// read-write cgroup mount.
#[test]
fn masked_directories_and_v1_cgroup_mounts_show_the_templates_tmpfs() {
    let env = Env::new("mnt-template-empty");
    let script = "awk '$5 == \"/sys/firmware\" || $5 == \"/sys/fs/cgroup\" {print $5, $3}' \
                      /proc/self/mountinfo; \
                  ls -A /sys/firmware | wc -l; \
                  touch /sys/firmware/x 2>/dev/null && echo RW || echo RO; \
                  ls /sys/fs/cgroup/memory/memory.limit_in_bytes; \
                  ls -A /sys/fs/cgroup | tr '\\n' ' '";
    let run_one = |name: &str, admin: bool, cgroup_rw: bool| -> Vec<String> {
        let mut b = env.bundle(name, BASE, &["sh", "-c", script]);
        b.config["linux"]["maskedPaths"] = json!(["/sys/firmware"]);
        if admin {
            for set in ["bounding", "effective", "permitted"] {
                b.config["process"]["capabilities"][set]
                    .as_array_mut()
                    .unwrap()
                    .push(json!("CAP_SYS_ADMIN"));
            }
        }
        if cgroup_rw {
            for m in b.config["mounts"].as_array_mut().unwrap() {
                if m["destination"] == "/sys/fs/cgroup" {
                    m["options"] = json!(["nosuid", "noexec", "nodev", "rw"]);
                }
            }
        }
        b.save();
        let out = run(&env, &b, name);
        assert_eq!(out.0, 0, "container {name}: {out:?}");
        out.1.lines().map(str::to_string).collect()
    };
    let in_template = |point: &str| -> String {
        let lines = mountinfo_in(&env.root.join(".mnt-template/ns"));
        let found: Vec<&String> = lines
            .iter()
            .filter(|l| l.split(' ').nth(4) == Some(point))
            .collect();
        assert_eq!(found.len(), 1, "{point} in the template: {lines:?}");
        found[0].split(' ').nth(2).unwrap().to_string()
    };
    let host_v1 = host_has_v1_hierarchies();
    let (a, b) = (run_one("a", false, false), run_one("b", false, false));
    let (admin, rw) = (run_one("c", true, false), run_one("d", false, true));
    let empty = in_template("/empty");
    for (out, shares_empty, shares_cgroup) in [
        (&a, true, true),
        (&b, true, true),
        (&admin, false, false),
        (&rw, true, false),
    ] {
        assert_eq!(out.len(), 6, "{out:?}");
        assert_eq!(
            out[2..4],
            ["0", "RO"],
            "masked: not empty and read-only: {out:?}"
        );
        let dev = |point: &str| {
            out[..2]
                .iter()
                .find_map(|l| l.strip_prefix(&format!("{point} ")))
                .unwrap_or_else(|| panic!("{point} not mounted: {out:?}"))
                .to_string()
        };
        assert_eq!(dev("/sys/firmware") == empty, shares_empty, "{out:?}");
        if host_v1 {
            // Each hierarchy is there, through the shared tmpfs or its own.
            assert_eq!(
                out[4], "/sys/fs/cgroup/memory/memory.limit_in_bytes",
                "{out:?}"
            );
            assert_eq!(
                dev("/sys/fs/cgroup") == in_template("/cgroup-v1"),
                shares_cgroup,
                "{out:?}"
            );
        }
    }
    // The same names in /sys/fs/cgroup either way (co-mounted controllers' links included).
    assert_eq!(a[5], rw[5], "{a:?} {rw:?}");
    assert!(
        state_left(&env).is_empty(),
        "state left: {:?}",
        state_left(&env)
    );
}

#[test]
fn a_lost_template_is_made_again() {
    let env = Env::new("mnt-template-lost");
    let b = env.bundle("c", BASE, &["true"]);
    assert_eq!(run(&env, &b, "c").0, 0);
    let pin = env.root.join(".mnt-template/ns");
    // Someone unmounts it (an admin's umount -R of the runtime's directory).
    let ok = Command::new("umount").arg(&pin).status().unwrap().success();
    assert!(ok, "umount {}", pin.display());
    assert_eq!(run(&env, &b, "c").0, 0);
    let fs = rustix::fs::statfs(&pin).unwrap();
    assert_eq!(fs.f_type as i64, 0x6e73_6673, "the pin was not made again");
}

#[test]
fn where_the_hosts_mounts_are_shared_the_rootfs_and_binds_are_slaves_of_them() {
    // As on a systemd host, whose / is shared: a clone of a shared mount joins its peer
    // group, so unchanged the container's mounts would reach the host, and pivot_root
    // refuses a shared rootfs.
    let env = Env::new("mnt-template-shared");
    let vol = env.path().join("vol");
    std::fs::create_dir(&vol).unwrap();
    std::fs::write(vol.join("in"), "in the volume\n").unwrap();
    let b = sh_with_binds(
        &env,
        "c",
        "cat /mnt/v/in; awk '$5 == \"/\" || $5 == \"/mnt/v\"' /proc/self/mountinfo",
        &[("/mnt/v", &vol, &["rbind", "rw"])],
    );
    // In a mount namespace of the test's own whose mounts are all shared.
    let script = format!(
        "mount --make-rshared / && {} runtime --root {} run --bundle {} c",
        env!("CARGO_BIN_EXE_wharf"),
        env.root.display(),
        b.dir.display()
    );
    let out = Command::new("unshare")
        .args(["--mount", "--propagation", "unchanged", "sh", "-c", &script])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "container failed: {stdout} {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut lines = stdout.lines();
    assert_eq!(lines.next(), Some("in the volume"));
    let mounts: Vec<&str> = lines.collect();
    assert!(mounts.len() >= 2, "{mounts:?}");
    for l in &mounts {
        assert!(
            !l.contains(" shared:"),
            "a container mount is a peer of the host's: {l}"
        );
    }
}
