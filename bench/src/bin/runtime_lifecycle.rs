//! create + start + wait + delete of `/bin/true` from one bundle, Wharf vs runc vs crun in
//! the same run, interleaved round-robin so machine noise hits all alike; prints medians and
//! ratios. Also measures the floor: `unshare` starting /bin/true in fresh pid, mount, uts,
//! ipc, net and cgroup namespaces.
//!
//! With a list of background sizes (`0,1000`), each measurement is made once per size, with
//! that many containers sleeping beside (each with its own namespaces, mounts and cgroups,
//! made by `wharf runtime` below a cgroup parent apart from the measured ones): what a
//! node's containers cost every runtime in the kernel (mount and cgroup walks, the memory
//! cgroups' and superblocks' lists, pivot_root's walk over every task). Growth ratios are
//! printed against the first size; a size may come again (`0,1000,0,1000`), so that a
//! change of the machine's speed over the run shows as such.
//!
//! Run as root: `cargo run --release -p wharf-bench --bin runtime_lifecycle -- [ITERATIONS]
//! [N,N,...]` (env WHARF_BIN selects the wharf binary; default: target/release/wharf next
//! to this one).

use std::path::{Path, PathBuf};
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
    let sizes: Vec<usize> = std::env::args()
        .nth(2)
        .map(|a| {
            a.split(',')
                .map(|n| n.trim().parse().expect("background sizes: N,N,..."))
                .collect()
        })
        .unwrap_or_else(|| vec![0]);
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
        write_config(
            &bundle,
            &rootfs,
            &format!("{cgroup_parent}/{}", rt.name),
            &["/bin/true"],
        );
    }
    let mut background = Background::new(&work, &rootfs, &wharf, &cgroup_parent);
    let mut growth: Vec<(usize, Vec<(&str, Duration)>)> = Vec::new();
    for &n in &sizes {
        background
            .resize_to(n)
            .unwrap_or_else(|e| panic!("background containers: {e}"));
        let medians = measure(&mut runtimes, &work, iterations, n);
        growth.push((n, medians));
    }
    background.remove();
    if growth.len() > 1 {
        println!("growth against {} containers beside:", growth[0].0);
        let (first_n, first) = &growth[0];
        for (n, medians) in &growth[1..] {
            for ((name, m), (_, f)) in medians.iter().zip(first) {
                println!(
                    "  {name:<6} {} -> {} at {n} ({:.2}x; {first_n} beside first)",
                    ms(*f),
                    ms(*m),
                    m.as_secs_f64() / f.as_secs_f64()
                );
            }
        }
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

/// One round: every runtime `iterations` times, interleaved, then the floor; prints the
/// medians and returns each runtime's.
fn measure(
    runtimes: &mut [Runtime],
    work: &Path,
    iterations: usize,
    beside: usize,
) -> Vec<(&'static str, Duration)> {
    for rt in runtimes.iter_mut() {
        rt.samples.clear();
        rt.phases.iter_mut().for_each(Vec::clear);
    }
    // Warm up caches (binaries, dentries) once per runtime.
    for rt in runtimes.iter() {
        once(rt, work, "warmup").unwrap_or_else(|e| panic!("{}: {e}", rt.name));
    }
    for i in 0..iterations {
        for rt in runtimes.iter_mut() {
            let (t, phases) =
                once(rt, work, &format!("c{i}")).unwrap_or_else(|e| panic!("{}: {e}", rt.name));
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
    println!(
        "create+start+wait+delete of /bin/true, {iterations} iterations each, {beside} containers beside, medians:"
    );
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
    medians
}

/// The containers sleeping beside the measured ones: `wharf runtime` containers of busybox
/// `sleep`, each with the namespaces, mounts and a cgroup of its own (below
/// `<parent>/beside`, so the measured containers' cgroups have no more siblings than
/// without them).
struct Background {
    wharf: String,
    root: PathBuf,
    bundle: PathBuf,
    rootfs: PathBuf,
    parent: String,
    running: usize,
}

impl Background {
    fn new(work: &Path, rootfs: &Path, wharf: &Path, parent: &str) -> Background {
        let bundle = work.join("bundle-beside");
        std::fs::create_dir_all(&bundle).unwrap();
        Background {
            wharf: wharf.display().to_string(),
            root: work.join("root-beside"),
            bundle,
            rootfs: rootfs.to_path_buf(),
            parent: format!("{parent}/beside"),
            running: 0,
        }
    }

    /// Run `wharf runtime ARGS`; its errors go to our stderr (captured, the pipe would stay
    /// open in the sleeping container and the read would never end).
    fn runtime(&self, args: &[&str]) -> Result<(), String> {
        let mut cmd = Command::new(&self.wharf);
        cmd.arg("runtime").arg("--root").arg(&self.root).args(args);
        run_quiet(&mut cmd).map_err(|e| format!("wharf runtime {args:?}: {e}"))
    }

    /// Start or remove containers until `n` sleep beside.
    fn resize_to(&mut self, n: usize) -> Result<(), String> {
        while self.running > n {
            self.running -= 1;
            self.runtime(&["delete", "--force", &format!("beside{}", self.running)])?;
        }
        reap();
        while self.running < n {
            let id = format!("beside{}", self.running);
            write_config(
                &self.bundle,
                &self.rootfs,
                &format!("{}/{id}", self.parent),
                &["/bin/sleep", "36000"],
            );
            self.runtime(&["create", "--bundle", self.bundle.to_str().unwrap(), &id])?;
            self.running += 1;
            self.runtime(&["start", &id])?;
        }
        Ok(())
    }

    /// Kill and delete them all, reap their inits (reparented to us) and remove their
    /// cgroups.
    fn remove(&mut self) {
        for i in 0..self.running {
            let _ = self.runtime(&["delete", "--force", &format!("beside{i}")]);
        }
        reap();
        self.running = 0;
        wharf_bench::remove_cgroup_tree(&self.parent);
    }
}

/// Run a runtime command with no input, its output dropped and its errors on our stderr;
/// Err with its status where it fails.
fn run_quiet(cmd: &mut Command) -> Result<(), String> {
    let status = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .status()
        .map_err(|e| e.to_string())?;
    if status.success() {
        Ok(())
    } else {
        Err(status.to_string())
    }
}

/// Reap the inits of removed containers (reparented to us) without blocking.
fn reap() {
    let mut status = 0;
    // SAFETY: waitpid with WNOHANG on any child; status is a valid out pointer.
    while unsafe { libc::waitpid(-1, &mut status, libc::WNOHANG) } > 0 {}
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
        cmd.args(&rt.argv[1..]).arg("--root").arg(&root).args(args);
        run_quiet(&mut cmd).map_err(|e| format!("{args:?} failed: {e}"))
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
    std::os::unix::fs::symlink("busybox", rootfs.join("bin/sleep")).unwrap();
}

/// runc's default spec (as `runc spec` writes it), with `args` and no terminal.
fn write_config(bundle: &Path, rootfs: &Path, cgroups_path: &str, args: &[&str]) {
    let config = serde_json::json!({
        "ociVersion": "1.0.2",
        "process": {
            "terminal": false,
            "user": { "uid": 0, "gid": 0 },
            "args": args,
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
