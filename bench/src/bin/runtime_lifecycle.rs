//! create + start + wait + delete of `/bin/true` from one bundle, Wharf vs runc vs crun in
//! the same run, interleaved round-robin so machine noise hits all alike; prints medians and
//! ratios. Also measures the floor: `unshare` starting /bin/true in fresh pid, mount, uts,
//! ipc, net and cgroup namespaces.
//!
//! Run as root: `cargo run --release -p wharf-bench --bin runtime_lifecycle -- [ITERATIONS]`
//! (env WHARF_BIN selects the wharf binary; default: target/release/wharf next to this one).

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use wharf_bench::{cgroup_dirs, hidden_unified_namespace, hybrid_with_controllers, median, ms};

struct Runtime {
    name: &'static str,
    argv: Vec<String>,
    samples: Vec<Duration>,
    /// Per-phase samples: create, start, wait, delete.
    phases: [Vec<Duration>; 4],
    /// A mount namespace to run the runtime's commands in (crun refuses this host's hybrid
    /// layout, whose cgroup2 mount carries a controller: it runs with that mount hidden, as
    /// in the reference measurements).
    mount_ns: Option<std::fs::File>,
}

fn main() {
    let iterations: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(100);
    // SAFETY: geteuid has no preconditions.
    assert!(unsafe { libc::geteuid() } == 0, "run as root");
    // The containers' inits are reparented to us when the runtime's create process exits,
    // so we can wait for them like a shim does.
    // SAFETY: prctl with integer arguments.
    unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) };

    let work = std::env::temp_dir().join(format!("wharf-bench-{}", std::process::id()));
    let rootfs = work.join("rootfs");
    make_rootfs(&rootfs);
    let cgroup_parent = format!("/wharf-bench-{}", std::process::id());
    let wharf = wharf_bench::wharf_bin();
    let mut runtimes = vec![Runtime {
        name: "wharf",
        argv: vec![wharf.display().to_string(), "runtime".into()],
        samples: Vec::new(),
        phases: Default::default(),
        mount_ns: None,
    }];
    let mut hider = None;
    for (name, bin) in [("runc", "runc"), ("crun", "crun")] {
        if Command::new(bin)
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success())
        {
            let mount_ns = if name == "crun" && hybrid_with_controllers() {
                let (child, ns) = hidden_unified_namespace();
                hider = Some(child);
                Some(ns)
            } else {
                None
            };
            runtimes.push(Runtime {
                name,
                argv: vec![bin.into()],
                samples: Vec::new(),
                phases: Default::default(),
                mount_ns,
            });
        } else {
            eprintln!("{bin} not found: skipped");
        }
    }
    for rt in &runtimes {
        let bundle = work.join(format!("bundle-{}", rt.name));
        std::fs::create_dir_all(&bundle).unwrap();
        write_config(&bundle, &rootfs, &format!("{cgroup_parent}/{}", rt.name));
    }
    // Warm up caches (binaries, dentries) once per runtime.
    for rt in runtimes.iter() {
        once(rt, &work, "warmup").unwrap_or_else(|e| panic!("{}: {e}", rt.name));
    }
    for i in 0..iterations {
        for rt in runtimes.iter_mut() {
            let (t, phases) =
                once(rt, &work, &format!("c{i}")).unwrap_or_else(|e| panic!("{}: {e}", rt.name));
            rt.samples.push(t);
            for (k, p) in phases.into_iter().enumerate() {
                rt.phases[k].push(p);
            }
        }
    }
    let mut floor = Vec::new();
    for _ in 0..iterations {
        let t = Instant::now();
        let ok = Command::new("unshare")
            .args([
                "--fork",
                "--pid",
                "--mount",
                "--uts",
                "--ipc",
                "--net",
                "--cgroup",
                "/bin/true",
            ])
            .status()
            .is_ok_and(|s| s.success());
        if ok {
            floor.push(t.elapsed());
        }
    }
    println!("create+start+wait+delete of /bin/true, {iterations} iterations each, medians:");
    let mut medians = Vec::new();
    for rt in runtimes.iter_mut() {
        let m = median(&mut rt.samples);
        medians.push((rt.name, m));
        let phases: Vec<String> = rt.phases.iter_mut().map(|p| ms(median(p))).collect();
        println!(
            "  {:<6} {}   (create {}, start {}, wait {}, delete {})",
            rt.name,
            ms(m),
            phases[0],
            phases[1],
            phases[2],
            phases[3]
        );
    }
    if !floor.is_empty() {
        println!(
            "  floor  {} (unshare -fpmuinC /bin/true)",
            ms(median(&mut floor))
        );
    }
    let wharf_m = medians[0].1;
    for (name, m) in &medians[1..] {
        println!(
            "  wharf/{name} = {:.2}",
            wharf_m.as_secs_f64() / m.as_secs_f64()
        );
    }
    for d in cgroup_dirs(&cgroup_parent) {
        let _ = std::fs::remove_dir(&d);
    }
    // The runtime's mount namespace template is pinned in its root.
    wharf_bench::unmount_below(&work);
    let _ = std::fs::remove_dir_all(&work);
    if let Some(mut child) = hider {
        let _ = child.kill();
        let _ = child.wait();
    }
}

/// One create/start/wait/delete cycle; returns its duration and that of each phase.
fn once(rt: &Runtime, work: &Path, id: &str) -> Result<(Duration, [Duration; 4]), String> {
    let bundle = work.join(format!("bundle-{}", rt.name));
    let root = work.join(format!("root-{}", rt.name));
    let pid_file = work.join(format!("pid-{}", rt.name));
    let run = |args: &[&str]| -> Result<(), String> {
        let mut cmd = Command::new(&rt.argv[0]);
        if let Some(ns) = &rt.mount_ns {
            use std::os::fd::AsRawFd;
            let fd = ns.as_raw_fd();
            wharf_bench::in_mount_ns(&mut cmd, fd);
        }
        let status = cmd
            .args(&rt.argv[1..])
            .arg("--root")
            .arg(&root)
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .status()
            .map_err(|e| e.to_string())?;
        if status.success() {
            Ok(())
        } else {
            Err(format!("{args:?} failed: {status}"))
        }
    };
    let t = Instant::now();
    let mut marks = [t; 5];
    run(&[
        "create",
        "--bundle",
        bundle.to_str().unwrap(),
        "--pid-file",
        pid_file.to_str().unwrap(),
        id,
    ])?;
    let pid: i32 = std::fs::read_to_string(&pid_file)
        .map_err(|e| e.to_string())?
        .trim()
        .parse()
        .map_err(|_| "bad pid file".to_string())?;
    marks[1] = Instant::now();
    run(&["start", id])?;
    marks[2] = Instant::now();
    let mut status = 0;
    // SAFETY: the init was reparented to us (subreaper).
    unsafe { libc::waitpid(pid, &mut status, 0) };
    marks[3] = Instant::now();
    run(&["delete", id])?;
    marks[4] = Instant::now();
    let phases = [0, 1, 2, 3].map(|i| marks[i + 1] - marks[i]);
    Ok((t.elapsed(), phases))
}

fn make_rootfs(rootfs: &Path) {
    for d in ["bin", "proc", "sys", "dev", "tmp", "etc"] {
        std::fs::create_dir_all(rootfs.join(d)).unwrap();
    }
    std::fs::copy("/bin/busybox", rootfs.join("bin/busybox")).expect("busybox-static installed");
    std::os::unix::fs::symlink("busybox", rootfs.join("bin/true")).unwrap();
    std::os::unix::fs::symlink("busybox", rootfs.join("bin/sh")).unwrap();
}

/// runc's default spec (as `runc spec` writes it), with /bin/true and no terminal.
fn write_config(bundle: &Path, rootfs: &Path, cgroups_path: &str) {
    let config = serde_json::json!({
        "ociVersion": "1.0.2",
        "process": {
            "terminal": false,
            "user": { "uid": 0, "gid": 0 },
            "args": ["/bin/true"],
            "env": ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"],
            "cwd": "/",
            "capabilities": {
                "bounding": ["CAP_AUDIT_WRITE", "CAP_KILL", "CAP_NET_BIND_SERVICE"],
                "effective": ["CAP_AUDIT_WRITE", "CAP_KILL", "CAP_NET_BIND_SERVICE"],
                "permitted": ["CAP_AUDIT_WRITE", "CAP_KILL", "CAP_NET_BIND_SERVICE"]
            },
            "rlimits": [{ "type": "RLIMIT_NOFILE", "hard": 1024, "soft": 1024 }],
            "noNewPrivileges": true
        },
        "root": { "path": rootfs, "readonly": true },
        "hostname": "bench",
        "mounts": [
            { "destination": "/proc", "type": "proc", "source": "proc" },
            { "destination": "/dev", "type": "tmpfs", "source": "tmpfs",
              "options": ["nosuid", "strictatime", "mode=755", "size=65536k"] },
            { "destination": "/dev/pts", "type": "devpts", "source": "devpts",
              "options": ["nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620", "gid=5"] },
            { "destination": "/dev/shm", "type": "tmpfs", "source": "shm",
              "options": ["nosuid", "noexec", "nodev", "mode=1777", "size=65536k"] },
            { "destination": "/dev/mqueue", "type": "mqueue", "source": "mqueue",
              "options": ["nosuid", "noexec", "nodev"] },
            { "destination": "/sys", "type": "sysfs", "source": "sysfs",
              "options": ["nosuid", "noexec", "nodev", "ro"] }
        ],
        "linux": {
            "cgroupsPath": cgroups_path,
            "resources": { "devices": [{ "allow": false, "access": "rwm" }] },
            "namespaces": [
                { "type": "pid" }, { "type": "network" }, { "type": "ipc" },
                { "type": "uts" }, { "type": "mount" }, { "type": "cgroup" }
            ],
            "maskedPaths": ["/proc/acpi", "/proc/kcore", "/proc/keys", "/proc/latency_stats",
                            "/proc/timer_list", "/proc/sched_debug", "/sys/firmware", "/proc/scsi"],
            "readonlyPaths": ["/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger"]
        }
    });
    std::fs::write(bundle.join("config.json"), config.to_string()).unwrap();
}
