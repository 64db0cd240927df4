//! Memory of the process that supervises running containers: Wharf's per-pod shim against
//! containerd-shim-runc-v2 (containers of a pod grouped in one shim, as the CRI plugin
//! does) and podman's conmon (one per container), each with 1 and with 3 busybox `sleep`
//! containers. Reads RSS, PSS and dirty PSS from /proc/<pid>/smaps_rollup of the
//! supervisors (summed when there are several), then shows which mappings make up the Wharf
//! shim's PSS.
//!
//! Run as root: `cargo run --release -p wharf-bench --bin shim_memory`
//! (env WHARF_BIN selects the wharf binary; default: target/release/wharf next to this one).
//! containerd and podman are measured when installed (Debian's containerd, podman, conmon,
//! runc); each runs in private state directories under a temp dir, its containers in
//! cgroups below /wharf-bench-shim-<pid>, all removed at the end.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use wharf_shim::{ContainerSpec, RestartPolicy, SpawnOptions, StdioSpec};

/// Per-mapping memory: (file and permissions, RSS, PSS, dirty PSS) in kB.
type Mapping = (String, u64, u64, u64);

/// One measurement.
struct Sample {
    name: String,
    containers: usize,
    pids: Vec<i32>,
    rss: u64,
    pss: u64,
    pss_dirty: u64,
}

fn main() {
    // SAFETY: geteuid has no preconditions.
    assert!(unsafe { libc::geteuid() } == 0, "run as root");
    let work = std::env::temp_dir().join(format!("wharf-bench-shim-{}", std::process::id()));
    let rootfs = work.join("rootfs");
    wharf_testbed::make_busybox_rootfs(&rootfs);
    let cgroup_parent = format!("/wharf-bench-shim-{}", std::process::id());
    let wharf = wharf_bench::wharf_bin();
    let mut samples = Vec::new();
    let mut detail = None;
    for n in [1, 3] {
        match wharf_shim_sample(&wharf, &work, &rootfs, &cgroup_parent, n) {
            Ok((s, top)) => {
                if n == 3 {
                    detail = Some(top);
                }
                samples.push(s);
            }
            Err(e) => eprintln!("wharf shim with {n} containers: {e}"),
        }
    }
    if installed("containerd") && installed("ctr") {
        match Containerd::start(&work) {
            Ok(ctd) => {
                for n in [1, 3] {
                    match ctd.sample(&rootfs, &cgroup_parent, n) {
                        Ok(s) => samples.push(s),
                        Err(e) => eprintln!("containerd with {n} containers: {e}"),
                    }
                }
                ctd.stop();
            }
            Err(e) => eprintln!("containerd: {e}"),
        }
    } else {
        eprintln!("containerd not installed: skipped");
    }
    if installed("podman") && installed("conmon") {
        for n in [1, 3] {
            match podman_sample(&work, &rootfs, &cgroup_parent, n) {
                Ok(s) => samples.push(s),
                Err(e) => eprintln!("podman with {n} containers: {e}"),
            }
        }
    } else {
        eprintln!("podman/conmon not installed: skipped");
    }
    cleanup_cgroups(&cgroup_parent);
    wharf_testbed::unmount_below(&work);
    let _ = std::fs::remove_dir_all(&work);

    println!("Supervisor memory with running busybox containers (smaps_rollup, summed, kB)");
    println!(
        "{:<36} {:>10} {:>9} {:>8} {:>8} {:>10} {:>14}",
        "supervisor", "containers", "processes", "RSS", "PSS", "PSS dirty", "PSS/container"
    );
    for s in &samples {
        println!(
            "{:<36} {:>10} {:>9} {:>8} {:>8} {:>10} {:>14}",
            s.name,
            s.containers,
            s.pids.len(),
            s.rss,
            s.pss,
            s.pss_dirty,
            s.pss / s.containers as u64
        );
    }
    if let Some(top) = detail {
        println!();
        println!("Wharf shim (3 containers): PSS by mapping, largest first (kB)");
        println!(
            "{:<60} {:>8} {:>8} {:>10}",
            "mapping", "RSS", "PSS", "dirty"
        );
        for (name, rss, pss, dirty) in top.iter().take(12) {
            println!("{name:<60} {rss:>8} {pss:>8} {dirty:>10}");
        }
    }
}

fn installed(bin: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {bin}")])
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// RSS, PSS, PSS_Dirty of a process (kB).
fn rollup(pid: i32) -> Option<(u64, u64, u64)> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/smaps_rollup")).ok()?;
    let field = |name: &str| {
        text.lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
            .unwrap_or(0)
    };
    Some((field("Rss:"), field("Pss:"), field("Pss_Dirty:")))
}

fn sample(name: &str, containers: usize, pids: Vec<i32>) -> Result<Sample, String> {
    let (mut rss, mut pss, mut dirty) = (0, 0, 0);
    for pid in &pids {
        let (r, p, d) = rollup(*pid).ok_or_else(|| format!("{name}: pid {pid} is gone"))?;
        rss += r;
        pss += p;
        dirty += d;
    }
    Ok(Sample {
        name: name.to_string(),
        containers,
        pids,
        rss,
        pss,
        pss_dirty: dirty,
    })
}

/// PSS per mapping (file and permissions, or [heap], [stack], anonymous), largest first.
fn mappings(pid: i32) -> Vec<Mapping> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/smaps")).unwrap_or_default();
    let mut out: Vec<Mapping> = Vec::new();
    let mut current: Option<usize> = None;
    for line in text.lines() {
        let first = line.split_whitespace().next().unwrap_or("");
        if first.contains('-') && !first.ends_with(':') {
            let parts: Vec<&str> = line.split_whitespace().collect();
            let perms = parts.get(1).copied().unwrap_or("");
            let path = parts.get(5).copied().unwrap_or("[anon]");
            let short = Path::new(path)
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_else(|| path.to_string());
            let key = format!("{short} {perms}");
            current = Some(match out.iter().position(|(k, ..)| *k == key) {
                Some(i) => i,
                None => {
                    out.push((key, 0, 0, 0));
                    out.len() - 1
                }
            });
            continue;
        }
        let Some(i) = current else { continue };
        let value = || -> u64 {
            line.split_whitespace()
                .nth(1)
                .and_then(|v| v.parse().ok())
                .unwrap_or(0)
        };
        match first {
            "Rss:" => out[i].1 += value(),
            "Pss:" => out[i].2 += value(),
            "Pss_Dirty:" => out[i].3 += value(),
            _ => {}
        }
    }
    out.sort_by_key(|m| std::cmp::Reverse(m.2));
    out
}

fn config(rootfs: &Path, cgroups_path: &str) -> serde_json::Value {
    let mut c: serde_json::Value =
        serde_json::from_str(wharf_runtime::spec::DEFAULT_CONFIG).unwrap();
    c["process"]["terminal"] = false.into();
    c["process"]["args"] = serde_json::json!(["sleep", "100000"]);
    c["root"]["path"] = rootfs.display().to_string().into();
    c["linux"]["cgroupsPath"] = cgroups_path.into();
    c
}

fn wharf_shim_sample(
    wharf: &Path,
    work: &Path,
    rootfs: &Path,
    cgroup_parent: &str,
    n: usize,
) -> Result<(Sample, Vec<Mapping>), String> {
    let dir = work.join(format!("wharf-{n}"));
    let state = dir.join("pod");
    let root = dir.join("runtime");
    let mut opts = SpawnOptions::new(format!("bench-{n}"), &state, &root);
    opts.binary = wharf_shim::shim_binary(wharf);
    let shim = wharf_shim::spawn(&opts).map_err(|e| e.to_string())?;
    let shim_pid = shim.ping().map_err(|e| e.to_string())?;
    let result = (|| {
        for i in 0..n {
            let bundle = dir.join(format!("c{i}"));
            std::fs::create_dir_all(&bundle).map_err(|e| e.to_string())?;
            let cfg = config(rootfs, &format!("{cgroup_parent}/wharf-{n}-{i}"));
            std::fs::write(bundle.join("config.json"), cfg.to_string())
                .map_err(|e| e.to_string())?;
            let spec = ContainerSpec {
                id: format!("c{i}"),
                bundle,
                stdio: StdioSpec::log(dir.join(format!("c{i}.log"))),
                restart: RestartPolicy::Never,
                backoff: Default::default(),
                init: false,
                max_restarts: None,
                exit_command: Vec::new(),
                health: None,
                // The shim's duties as a kubelet's pod gives them: startup, liveness (an
                // exec) and readiness (a TCP connection, refused here) probes every
                // second, some of which have run before the sample is taken.
                kube: Some(probes()),
                sub_paths: Vec::new(),
            };
            shim.create(&spec).map_err(|e| e.to_string())?;
            shim.start(&spec.id).map_err(|e| e.to_string())?;
        }
        std::thread::sleep(Duration::from_millis(300));
        // One more request, so the shim has served a few (state as an engine polls it).
        shim.state().map_err(|e| e.to_string())?;
        // The shim trims its memory once its work has been quiet for 200 ms (the first
        // probes ran right after each start).
        std::thread::sleep(Duration::from_millis(1200));
        let s = sample("wharf shim (one per pod)", n, vec![shim_pid])?;
        Ok((s, mappings(shim_pid)))
    })();
    for i in 0..n {
        let _ = shim.delete(&format!("c{i}"), true);
    }
    let _ = shim.shutdown();
    let deadline = Instant::now() + Duration::from_secs(10);
    while Path::new(&format!("/proc/{shim_pid}")).exists() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    result
}

struct Containerd {
    child: std::process::Child,
    sock: PathBuf,
}

impl Containerd {
    fn start(work: &Path) -> Result<Containerd, String> {
        let dir = work.join("containerd");
        let (child, sock) = wharf_testbed::start_containerd(&dir, &dir.join("state"))?;
        let c = Containerd { child, sock };
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            if c.ctr(&["version"]).is_ok() {
                return Ok(c);
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        c.stop();
        Err("containerd did not come up".into())
    }

    fn ctr(&self, args: &[&str]) -> Result<String, String> {
        let out = Command::new("ctr")
            .arg("-a")
            .arg(&self.sock)
            .args(args)
            .stdin(Stdio::null())
            .output()
            .map_err(|e| e.to_string())?;
        if !out.status.success() {
            return Err(format!(
                "ctr {args:?}: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    fn sample(&self, rootfs: &Path, cgroup_parent: &str, n: usize) -> Result<Sample, String> {
        let ids: Vec<String> = (0..n).map(|i| format!("ctd-{n}-{i}")).collect();
        let group = format!("io.containerd.runc.v2.group=pod{n}");
        let run = || -> Result<Sample, String> {
            for id in &ids {
                self.ctr(&[
                    "run",
                    "-d",
                    "--label",
                    &group,
                    "--cgroup",
                    &format!("{cgroup_parent}/{id}"),
                    "--rootfs",
                    &rootfs.display().to_string(),
                    id,
                    "/bin/sleep",
                    "100000",
                ])?;
            }
            std::thread::sleep(Duration::from_millis(400));
            let addr = self.sock.display().to_string();
            let pids = find_processes(|cmd| {
                cmd.starts_with("/usr/bin/containerd-shim-runc-v2") && cmd.contains(&addr)
            });
            sample("containerd-shim-runc-v2 (grouped)", n, pids)
        };
        let s = run();
        for id in &ids {
            let _ = self.ctr(&["task", "kill", "-s", "KILL", id]);
        }
        std::thread::sleep(Duration::from_millis(300));
        for id in &ids {
            let _ = self.ctr(&["task", "rm", "-f", id]);
            let _ = self.ctr(&["container", "rm", id]);
        }
        s
    }

    fn stop(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        // Shims exit when their last container is gone; wait for them.
        let addr = self.sock.display().to_string();
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline
            && !find_processes(|c| c.contains("containerd-shim") && c.contains(&addr)).is_empty()
        {
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

fn podman_sample(
    work: &Path,
    rootfs: &Path,
    cgroup_parent: &str,
    n: usize,
) -> Result<Sample, String> {
    let dir = work.join("podman");
    let podman = |args: &[&str]| -> Result<String, String> {
        let out = Command::new("podman")
            .arg("--root")
            .arg(dir.join("root"))
            .arg("--runroot")
            .arg(dir.join("run"))
            .arg("--tmpdir")
            .arg(dir.join("tmp"))
            .args([
                "--runtime",
                "runc",
                "--cgroup-manager",
                "cgroupfs",
                "--events-backend",
                "file",
                "--storage-driver",
                "vfs",
            ])
            .args(args)
            .stdin(Stdio::null())
            .output()
            .map_err(|e| e.to_string())?;
        if !out.status.success() {
            return Err(format!(
                "podman {args:?}: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
        Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
    };
    let names: Vec<String> = (0..n).map(|i| format!("pm-{n}-{i}")).collect();
    let run = || -> Result<Sample, String> {
        let mut pids = Vec::new();
        for name in &names {
            podman(&[
                "run",
                "-d",
                "--network",
                "none",
                // The defaults raise limits past this host's hard limits (no CAP_SYS_RESOURCE).
                "--ulimit",
                "nofile=1024:1024",
                "--ulimit",
                "nproc=1024:1024",
                "--cgroup-parent",
                &format!("{cgroup_parent}/podman"),
                "--name",
                name,
                "--rootfs",
                &rootfs.display().to_string(),
                "/bin/sleep",
                "100000",
            ])?;
            let pid = podman(&["inspect", "--format", "{{.State.ConmonPid}}", name])?;
            pids.push(
                pid.parse::<i32>()
                    .map_err(|e| format!("conmon pid {pid:?}: {e}"))?,
            );
        }
        std::thread::sleep(Duration::from_millis(400));
        sample("conmon (one per container)", n, pids)
    };
    let s = run();
    for name in &names {
        let _ = podman(&["rm", "-f", "-t", "0", name]);
    }
    s
}

/// Pids whose command line matches.
fn find_processes(matches: impl Fn(&str) -> bool) -> Vec<i32> {
    let mut out: Vec<i32> = wharf_bench::processes()
        .into_iter()
        .filter(|p| matches(&p.cmdline))
        .map(|p| p.pid)
        .collect();
    out.sort();
    out
}

fn cleanup_cgroups(parent: &str) {
    for mount in wharf_testbed::cgroup_mounts() {
        let dir = mount.join(parent.trim_start_matches('/'));
        if !dir.exists() {
            continue;
        }
        // Anything still in there was started by this benchmark.
        for pid in wharf_bench::pids_below(&dir) {
            // SAFETY: kill(2) of a process in the benchmark's own cgroup tree.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
        wharf_testbed::remove_cgroup_tree(&dir);
    }
}

/// Startup, liveness and readiness probes, each every second.
fn probes() -> wharf_shim::protocol::KubeSpec {
    use wharf_shim::protocol::{Action, KubeSpec, ProbeSpec};
    let probe = |action| ProbeSpec {
        action,
        initial_delay_ms: 0,
        period_ms: 1000,
        timeout_ms: 1000,
        success_threshold: 1,
        failure_threshold: 3,
        grace_ms: None,
    };
    let exec = || Action::Exec {
        command: vec!["true".into()],
    };
    KubeSpec {
        startup: Some(probe(exec())),
        liveness: Some(probe(exec())),
        readiness: Some(probe(Action::TcpSocket {
            host: Some("127.0.0.1".into()),
            port: 1,
        })),
        grace_ms: 1000,
        ..Default::default()
    }
}
