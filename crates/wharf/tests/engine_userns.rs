//! Pods with their own user namespace (`--userns=auto`), through the real CLI: the
//! container's root is an unprivileged host uid from a range no other pod has; the image,
//! the pod's name files and id-mapped volumes show the right owners inside; what the
//! namespace rules out is refused; and what it must not reach on the host, it cannot.

mod engine_support;

use std::os::unix::fs::MetadataExt;

use engine_support::{Wharf, busybox};

/// A host id's line of /proc/PID/status (`Uid:` or `Gid:`): real, effective, saved, fs.
fn status_ids(pid: i32, field: &str) -> Vec<u32> {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap()
        .lines()
        .find(|l| l.starts_with(field))
        .unwrap_or_else(|| panic!("no {field} in /proc/{pid}/status"))
        .split_whitespace()
        .skip(1)
        .map(|v| v.parse().unwrap())
        .collect()
}

/// The first host uid of a container's map (`uid_map`'s first line: inside, host, size).
fn host_root(w: &Wharf, container: &str) -> (u32, u32) {
    let map = w.ok(&["exec", container, "cat", "/proc/self/uid_map"]);
    let f: Vec<u32> = map.split_whitespace().map(|v| v.parse().unwrap()).collect();
    assert_eq!(f.len(), 3, "one line of map: {map:?}");
    assert_eq!(f[0], 0, "the map starts at the pod's root: {map:?}");
    (f[1], f[2])
}

/// `wharf run -d --userns=auto` of a sleeping busybox named `name`.
fn run_detached(w: &Wharf, name: &str) {
    w.ok(&[
        "run",
        "-d",
        "--name",
        name,
        "--network",
        "none",
        "--userns=auto",
        &busybox(),
        "sleep",
        "600",
    ]);
}

#[test]
fn userns_auto_runs_root_as_an_unprivileged_host_uid_with_its_files_owned() {
    let w = Wharf::new("userns-auto");
    w.pull_busybox();
    let out = w.ok(&[
        "run",
        "--rm",
        "--network",
        "none",
        "--userns=auto",
        "--device",
        "/dev/zero:/dev/given",
        &busybox(),
        "sh",
        "-c",
        "id -u; stat -c %u /bin /etc/hosts /etc/resolv.conf /etc/hostname /dev/shm; \
         echo hi > /new && stat -c %u /new; echo 1.2.3.4 x >> /etc/hosts && echo hosts-ok; \
         touch /dev/shm/s && echo shm-ok; head -c 3 /dev/given | wc -c",
    ]);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines[0], "0", "root inside: {out}");
    // The image's files (host root on disk), the name files and /dev/shm are the pod
    // root's; what it writes is its own.
    assert!(
        lines[1..7].iter().all(|l| *l == "0"),
        "owners inside: {out}"
    );
    assert!(out.contains("hosts-ok") && out.contains("shm-ok"), "{out}");
    // A device it was given works (bound: a user namespace cannot make device nodes).
    assert_eq!(lines.last().map(|l| l.trim()), Some("3"), "{out}");

    run_detached(&w, "c1");
    let (start, size) = host_root(&w, "c1");
    assert!(start >= 65536, "above the host's own ids: {start}");
    assert_eq!(size, 65536);
    // The host sees the container's root as the first id of its range.
    let pid = w.pids("c1")[0];
    assert_eq!(status_ids(pid, "Uid:"), vec![start; 4]);
    assert_eq!(status_ids(pid, "Gid:"), vec![start; 4]);
    // /sys is a sysfs of its own network namespace (which its user namespace owns), not
    // the host's: only its loopback; read-only.
    assert_eq!(w.ok(&["exec", "c1", "ls", "/sys/class/net"]), "lo\n");
    let out = w.run(&["exec", "c1", "touch", "/sys/x"]);
    assert!(out.stderr.contains("Read-only file system"), "{out:?}");
    // A file it writes to its own layer is stored with that host id.
    w.ok(&["exec", "c1", "touch", "/written"]);
    let upper_file = std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap()
        .lines()
        .filter(|l| l.contains(" overlay ") && l.contains(w.root().to_str().unwrap()))
        .find_map(|l| {
            let upper = l.split("upperdir=").nth(1)?.split(',').next()?;
            let f = std::path::Path::new(upper).join("written");
            f.exists().then_some(f)
        })
        .expect("the container's upper layer holds the file");
    assert_eq!(std::fs::metadata(&upper_file).unwrap().uid(), start);

    // A second pod gets a range of its own.
    run_detached(&w, "c2");
    let (start2, _) = host_root(&w, "c2");
    assert!(
        start2 >= start + size || start2 + size <= start,
        "disjoint ranges: {start} and {start2}"
    );
    w.ok(&["rm", "-f", "c1", "c2"]);
    w.assert_clean();
}

#[test]
fn userns_volumes_plain_binds_keep_host_ids_and_idmap_shows_host_owners() {
    let w = Wharf::new("userns-volumes");
    w.pull_busybox();
    let plain = w.path("plain");
    let mapped = w.path("mapped");
    for d in [&plain, &mapped] {
        std::fs::create_dir_all(d).unwrap();
        std::fs::set_permissions(d, std::os::unix::fs::PermissionsExt::from_mode(0o777)).unwrap();
    }
    std::fs::write(mapped.join("from-host"), "x").unwrap();
    let secret = w.path("secret");
    std::fs::write(&secret, "host secret").unwrap();
    std::fs::set_permissions(&secret, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
    w.ok(&[
        "run",
        "-d",
        "--name",
        "v",
        "--network",
        "none",
        "--userns=auto",
        "-v",
        &format!("{}:/plain", plain.display()),
        "-v",
        &format!("{}:/mapped:idmap", mapped.display()),
        "-v",
        &format!("{}:/secret:ro", secret.display()),
        &busybox(),
        "sleep",
        "600",
    ]);
    let (start, _) = host_root(&w, "v");
    // Plain bind: what the container's root writes is owned by its host uid on the host,
    // and by root inside.
    w.ok(&[
        "exec",
        "v",
        "sh",
        "-c",
        "echo a > /plain/f; chown 1000:1000 /plain/f",
    ]);
    let m = std::fs::metadata(plain.join("f")).unwrap();
    assert_eq!((m.uid(), m.gid()), (start + 1000, start + 1000));
    // Id-mapped: the host root's file is root's inside, and the container's ids are the
    // same numbers on the host.
    let inside = w.ok(&["exec", "v", "stat", "-c", "%u:%g", "/mapped/from-host"]);
    assert_eq!(inside.trim(), "0:0");
    w.ok(&[
        "exec",
        "v",
        "sh",
        "-c",
        "echo b > /mapped/g; chown 1000:1001 /mapped/g",
    ]);
    let m = std::fs::metadata(mapped.join("g")).unwrap();
    assert_eq!((m.uid(), m.gid()), (1000, 1001));
    // The container's root cannot read a root-only host file bound in read-only.
    let out = w.run(&["exec", "v", "cat", "/secret"]);
    assert_ne!(out.code, 0, "read the host's secret: {out:?}");
    assert!(!out.stdout.contains("host secret"));
    assert!(out.stderr.contains("Permission denied"), "{out:?}");
    w.ok(&["rm", "-f", "v"]);
    w.assert_clean();
}

#[test]
fn userns_refuses_what_it_rules_out_and_idmap_without_it() {
    let w = Wharf::new("userns-refused");
    w.pull_busybox();
    for (flag, want) in [
        ("--network=host", "host's network namespace"),
        ("--pid=host", "host's PID namespace"),
        ("--ipc=host", "host's IPC namespace"),
        ("--privileged", "privileged container"),
    ] {
        let err = w.fails(
            125,
            &["run", "--rm", "--userns=auto", flag, &busybox(), "true"],
        );
        assert!(err.contains(want), "{flag}: {err}");
        assert_eq!(err.matches(want).count(), 1, "said once: {err}");
    }
    let dir = w.path("d");
    std::fs::create_dir_all(&dir).unwrap();
    let err = w.fails(
        125,
        &[
            "run",
            "--rm",
            "--network",
            "none",
            "-v",
            &format!("{}:/d:idmap", dir.display()),
            &busybox(),
            "true",
        ],
    );
    assert!(
        err.contains("idmap") && err.contains("user namespace"),
        "{err}"
    );
    // A volume on a filesystem that cannot be id-mapped (overlayfs) is refused, naming it.
    for d in ["lo", "up", "wk", "ov"] {
        std::fs::create_dir_all(w.path(d)).unwrap();
    }
    let opts = format!(
        "lowerdir={},upperdir={},workdir={}",
        w.path("lo").display(),
        w.path("up").display(),
        w.path("wk").display()
    );
    let ov = w.path("ov");
    let st = std::process::Command::new("mount")
        .args(["-t", "overlay", "ov", "-o", &opts, ov.to_str().unwrap()])
        .status()
        .unwrap();
    assert!(st.success());
    let out = w.run(&[
        "run",
        "--rm",
        "--network",
        "none",
        "--userns=auto",
        "-v",
        &format!("{}:/ov:idmap", ov.display()),
        &busybox(),
        "true",
    ]);
    let _ = std::process::Command::new("umount").arg(&ov).status();
    assert_ne!(out.code, 0, "{out:?}");
    let want = format!(
        "mount /ov: the filesystem of {} cannot be id-mapped",
        ov.display()
    );
    assert_eq!(out.stderr.matches(&want).count(), 1, "{out:?}");
    let err = w.fails(125, &["run", "--rm", "--userns=keep", &busybox(), "true"]);
    assert!(err.contains("--userns") && err.contains("keep"), "{err}");
    w.assert_clean();
}

#[test]
fn a_pod_with_its_own_user_namespace_shares_it_and_its_pid_namespace() {
    let w = Wharf::new("userns-pod");
    w.pull_busybox();
    w.ok(&[
        "pod",
        "create",
        "--name",
        "p",
        "--network",
        "none",
        "--share-pid",
        "--userns=auto",
    ]);
    // a holds CAP_SYS_ADMIN: over its pod's namespaces only.
    for (name, cap) in [("a", "SYS_ADMIN"), ("b", "CHOWN")] {
        w.ok(&[
            "run",
            "-d",
            "--pod",
            "p",
            "--name",
            name,
            "--cap-add",
            cap,
            &busybox(),
            "sleep",
            "600",
        ]);
    }
    // One user namespace, one map, for both; one pid namespace, whose /proc each mounted.
    let (start, _) = host_root(&w, "a");
    assert_eq!(host_root(&w, "b").0, start);
    let ps = w.ok(&["exec", "b", "ps", "-o", "pid,args"]);
    assert_eq!(ps.matches("sleep 600").count(), 2, "{ps}");
    for name in ["a", "b"] {
        let pid = w.pids(name)[0];
        assert_eq!(status_ids(pid, "Uid:")[0], start);
    }
    // The pod's hostname is a's to set (the pod's user namespace owns its UTS namespace);
    // the host's is not, nor may a mount what the host's root may.
    let host_name = rustix::system::uname()
        .nodename()
        .to_string_lossy()
        .into_owned();
    w.ok(&["exec", "a", "hostname", "renamed"]);
    assert_eq!(w.ok(&["exec", "b", "hostname"]).trim(), "renamed");
    assert_eq!(
        rustix::system::uname().nodename().to_string_lossy(),
        host_name
    );
    let out = w.run(&["exec", "a", "mknod", "/tmp/disk", "b", "8", "0"]);
    assert_ne!(out.code, 0, "a host block device made: {out:?}");
    w.ok(&["pod", "rm", "-f", "p"]);
    w.assert_clean();
}

#[test]
fn a_played_pod_with_host_users_false_runs_as_an_unprivileged_host_uid() {
    let w = Wharf::new("userns-play");
    w.pull_busybox();
    let host_dir = w.path("shared");
    std::fs::create_dir_all(&host_dir).unwrap();
    std::fs::write(host_dir.join("from-host"), "x").unwrap();
    let manifest = w.path("pod.yaml");
    std::fs::write(
        &manifest,
        format!(
            "apiVersion: v1
kind: Pod
metadata: {{name: uns}}
spec:
  hostUsers: false
  restartPolicy: Never
  terminationGracePeriodSeconds: 0
  containers:
  - name: c
    image: {image}
    command: [sh, -c, 'id -u; stat -c %u /shared/from-host /scratch; touch /scratch/made /shared/made; sleep 600']
    volumeMounts:
    - {{name: shared, mountPath: /shared}}
    - {{name: scratch, mountPath: /scratch}}
  volumes:
  - {{name: shared, hostPath: {{path: {host}, type: Directory}}}}
  - {{name: scratch, emptyDir: {{}}}}
",
            image = busybox(),
            host = host_dir.display()
        ),
    )
    .unwrap();
    let m = manifest.to_str().unwrap();
    let out = w.run(&["play", "--network", "none", m]);
    assert_eq!(out.code, 0, "{out:?}");
    assert!(
        !out.stderr.contains("hostUsers"),
        "no longer ignored: {out:?}"
    );
    assert!(engine_support::wait_until(
        std::time::Duration::from_secs(20),
        || std::fs::metadata(host_dir.join("made")).is_ok()
    ));
    // Root inside; the volumes id-mapped: the host root's files are root's inside, and
    // what the pod's root writes is the host root's on disk.
    assert_eq!(w.ok(&["logs", "uns-c"]), "0\n0\n0\n");
    assert_eq!(std::fs::metadata(host_dir.join("made")).unwrap().uid(), 0);
    // The host sees its root as an unprivileged id of a range of its own.
    let pid = w.pids("uns-c")[0];
    let uid = status_ids(pid, "Uid:")[0];
    assert!(uid >= 65536, "{uid}");
    w.ok(&["play", "--down", m]);
    w.assert_clean();
}

/// A setuid binary inside a user-namespaced container works as it does on a host: run by
/// the pod's uid 1000 it gets the effective uid of its owner, the pod's root, which the
/// host sees as the first id of the pod's range, never as the host's root. (The binary is
/// a small C program built here: busybox drops setuid privileges for most applets; given
/// an argument it stays, so the host can look at it.)
#[test]
fn a_setuid_binary_in_a_user_namespaced_container_gains_the_pods_root_only() {
    let w = Wharf::new("userns-setuid");
    w.pull_busybox();
    let src = w.path("suid.c");
    std::fs::write(
        &src,
        "#include <stdio.h>\n#include <unistd.h>\n\
         int main(int argc, char **argv) {\n\
           printf(\"%d %d\\n\", (int)getuid(), (int)geteuid());\n\
           fflush(stdout);\n\
           if (argc > 1) sleep(600);\n\
           return 0;\n}\n",
    )
    .unwrap();
    let bin = w.path("suid");
    let cc = std::process::Command::new("cc")
        .args(["-static", "-O2", "-o"])
        .arg(&bin)
        .arg(&src)
        .output()
        .expect("cc (the Rust toolchain's linker) runs");
    assert!(
        cc.status.success(),
        "cc -static: {}",
        String::from_utf8_lossy(&cc.stderr)
    );
    run_detached(&w, "s");
    let (start, _) = host_root(&w, "s");
    // `cp` into the container gives the file to the pod's root (its host id), as the
    // container sees it, so the container's root may change it.
    w.ok(&["cp", bin.to_str().unwrap(), "s:/suid"]);
    assert_eq!(
        w.ok(&["exec", "s", "stat", "-c", "%u:%g", "/suid"]),
        "0:0\n"
    );
    // And out of it as it sees it: the tar `cp` writes says 0:0, not the host ids.
    let out = w.cmd(&["cp", "s:/suid", "-"]).output().unwrap();
    assert!(out.status.success(), "{out:?}");
    let mut ar = tar::Archive::new(&out.stdout[..]);
    let entry = ar.entries().unwrap().next().unwrap().unwrap();
    let h = entry.header();
    assert_eq!((h.uid().unwrap(), h.gid().unwrap()), (0, 0));
    w.ok(&[
        "exec",
        "s",
        "sh",
        "-c",
        "chown 0:0 /suid && chmod 4755 /suid",
    ]);
    // Inside: uid 1000 runs it with the effective uid of the pod's root.
    assert_eq!(w.ok(&["exec", "-u", "1000", "s", "/suid"]), "1000 0\n");
    // Without the setuid bit it gains nothing (the check above is the bit's doing).
    w.ok(&["exec", "s", "chmod", "0755", "/suid"]);
    assert_eq!(w.ok(&["exec", "-u", "1000", "s", "/suid"]), "1000 1000\n");
    w.ok(&["exec", "s", "chmod", "4755", "/suid"]);
    // On the host: real uid start+1000, effective the pod root's host uid, not 0.
    w.ok(&["exec", "-d", "-u", "1000", "s", "/suid", "stay"]);
    let mut seen = None;
    assert!(
        engine_support::wait_until(std::time::Duration::from_secs(10), || {
            seen = w
                .pids("s")
                .into_iter()
                .map(|p| status_ids(p, "Uid:"))
                .find(|ids| ids[0] == start + 1000);
            seen.is_some()
        }),
        "the setuid process never showed on the host"
    );
    let ids = seen.unwrap();
    assert_eq!(ids[1], start, "effective uid on the host: {ids:?}");
    assert!(ids.iter().all(|i| *i != 0), "host root never: {ids:?}");
    w.ok(&["rm", "-f", "s"]);
    w.assert_clean();
}
