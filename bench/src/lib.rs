//! Shared helpers for Wharf's side-by-side benchmarks.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// The median of a set of samples (sorted in place).
pub fn median(samples: &mut [Duration]) -> Duration {
    assert!(!samples.is_empty(), "no samples");
    samples.sort();
    let n = samples.len();
    if n % 2 == 1 {
        samples[n / 2]
    } else {
        (samples[n / 2 - 1] + samples[n / 2]) / 2
    }
}

/// The sample at quantile `q` (between 0 and 1, nearest rank) of a set of samples (sorted
/// in place): `quantile(s, 0.99)` is the p99.
pub fn quantile(samples: &mut [Duration], q: f64) -> Duration {
    assert!(!samples.is_empty(), "no samples");
    samples.sort();
    let rank = (q * samples.len() as f64).ceil() as usize;
    samples[rank.clamp(1, samples.len()) - 1]
}

/// Milliseconds with three decimals, for reports.
pub fn ms(d: Duration) -> String {
    format!("{:.3} ms", d.as_secs_f64() * 1000.0)
}

/// Whether the host is hybrid and its cgroup2 mount carries controllers (crun refuses such
/// a layout).
pub fn hybrid_with_controllers() -> bool {
    std::fs::read_to_string("/sys/fs/cgroup/unified/cgroup.controllers")
        .is_ok_and(|c| !c.trim().is_empty())
}

/// A process parked in a private mount namespace where /sys/fs/cgroup/unified is unmounted,
/// and that namespace opened for setns (where crun runs on hybrid hosts).
pub fn hidden_unified_namespace() -> (Child, std::fs::File) {
    let mut child = Command::new("unshare")
        .args([
            "--mount",
            "--propagation",
            "private",
            "sh",
            "-c",
            "umount /sys/fs/cgroup/unified && echo ready && exec sleep 100000",
        ])
        .stdout(Stdio::piped())
        .spawn()
        .expect("unshare");
    let mut line = String::new();
    use std::io::BufRead;
    std::io::BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert_eq!(line.trim(), "ready", "could not hide the cgroup2 mount");
    let ns = std::fs::File::open(format!("/proc/{}/ns/mnt", child.id())).unwrap();
    (child, ns)
}

/// The directories of cgroup `parent` (absolute) in every mounted hierarchy.
pub fn cgroup_dirs(parent: &str) -> Vec<PathBuf> {
    let info = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    info.lines()
        .filter_map(|l| {
            let (pre, post) = l.split_once(" - ")?;
            let fs = post.split(' ').next()?;
            let mountpoint = pre.split(' ').nth(4)?;
            (fs == "cgroup" || fs == "cgroup2")
                .then(|| PathBuf::from(mountpoint).join(parent.trim_start_matches('/')))
        })
        .collect()
}

/// Remove cgroup `parent` and everything below it, in every hierarchy (children first).
pub fn remove_cgroup_tree(parent: &str) {
    fn remove(dir: &std::path::Path) {
        if let Ok(rd) = std::fs::read_dir(dir) {
            for e in rd.flatten() {
                if e.file_type().is_ok_and(|t| t.is_dir()) {
                    remove(&e.path());
                }
            }
        }
        let _ = std::fs::remove_dir(dir);
    }
    for d in cgroup_dirs(parent) {
        remove(&d);
    }
}

/// Unmount everything mounted below `dir` (deepest first).
pub fn unmount_below(dir: &std::path::Path) {
    let info = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    let mut points: Vec<&str> = info
        .lines()
        .filter_map(|l| l.split(' ').nth(4))
        .filter(|m| std::path::Path::new(m).starts_with(dir))
        .collect();
    points.sort_by_key(|p| std::cmp::Reverse(p.len()));
    for p in points {
        let c = std::ffi::CString::new(p).unwrap();
        // SAFETY: umount2 with a NUL-terminated path.
        unsafe { libc::umount2(c.as_ptr(), libc::MNT_DETACH) };
    }
}

/// The wharf binary to measure: `WHARF_BIN`, else `wharf` next to the benchmark's binary
/// (target/release/wharf for `cargo run --release`).
pub fn wharf_bin() -> PathBuf {
    std::env::var("WHARF_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|_| {
            std::env::current_exe()
                .unwrap()
                .parent()
                .unwrap()
                .join("wharf")
        })
}

/// Run `cmd` in the mount namespace open as `ns_fd` (see [`hidden_unified_namespace`]).
pub fn in_mount_ns(cmd: &mut Command, ns_fd: std::os::fd::RawFd) {
    use std::os::unix::process::CommandExt;
    // SAFETY: setns between fork and exec touches no shared state.
    unsafe {
        cmd.pre_exec(move || {
            if libc::setns(ns_fd, libc::CLONE_NEWNS) == 0 {
                Ok(())
            } else {
                Err(std::io::Error::last_os_error())
            }
        });
    }
}

/// Pids of the processes in cgroup directory `dir` and below.
pub fn pids_below(dir: &std::path::Path) -> Vec<i32> {
    let mut out: Vec<i32> = std::fs::read_to_string(dir.join("cgroup.procs"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .collect();
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        if e.file_type().is_ok_and(|t| t.is_dir()) {
            out.extend(pids_below(&e.path()));
        }
    }
    out
}

/// A process: pid, parent, command line (arguments joined by spaces).
pub struct Proc {
    pub pid: i32,
    pub ppid: i32,
    pub cmdline: String,
}

/// Every process of the host (those that go away while being read are left out).
pub fn processes() -> Vec<Proc> {
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let Ok(cmd) = std::fs::read(format!("/proc/{pid}/cmdline")) else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        // "pid (comm) state ppid ...": comm may hold spaces and parentheses.
        let ppid = stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().nth(1)?.parse().ok())
            .unwrap_or(0);
        let cmdline = String::from_utf8_lossy(&cmd)
            .trim_end_matches('\0')
            .replace('\0', " ");
        out.push(Proc { pid, ppid, cmdline });
    }
    out
}

/// The environment of a private Wharf for a benchmark: its root under `work/wharf/root`,
/// its run directory under `run_fs/wharf`, cgroups below `cgroup_parent/wharf` and an empty
/// CNI configuration directory (so its default network is the built-in bridge, as on a
/// machine without CNI). Pulls `image` into it.
pub fn private_wharf(
    work: &std::path::Path,
    run_fs: &std::path::Path,
    cgroup_parent: &str,
    image: &str,
) -> Vec<(String, String)> {
    let s = |p: &std::path::Path| p.display().to_string();
    let no_cni = work.join("no-cni");
    std::fs::create_dir_all(&no_cni).unwrap();
    let env = vec![
        ("WHARF_ROOT".to_string(), s(&work.join("wharf/root"))),
        ("WHARF_RUN".to_string(), s(&run_fs.join("wharf"))),
        (
            "WHARF_CGROUP_PARENT".to_string(),
            format!("{cgroup_parent}/wharf"),
        ),
        // The cgroup parent is a cgroupfs path, also where systemd booted the host (whose
        // default driver would be systemd): ctr and runc place containers so too.
        ("WHARF_CGROUP_MANAGER".to_string(), "cgroupfs".to_string()),
        ("WHARF_CNI_CONF_DIR".to_string(), s(&no_cni)),
    ];
    // WHARF_BENCH_IMAGE_ARCHIVE: the image from an archive (`wharf save`), where no
    // registry is reachable (tests/vm/run.sh's guest).
    let mut cmd = Command::new(wharf_bin());
    match std::env::var("WHARF_BENCH_IMAGE_ARCHIVE") {
        Ok(archive) => cmd.args(["load", "-q", "-i", &archive]),
        Err(_) => cmd.args(["pull", "-q", image]),
    };
    let out = cmd
        .envs(env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::null())
        .output()
        .expect("wharf pull");
    assert!(
        out.status.success(),
        "wharf pull {image}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    env
}

/// Whether `bin` runs (`bin --version` succeeds).
pub fn have(bin: &str) -> bool {
    Command::new(bin)
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Run `cmd` (no stdin); panic with its output unless it succeeds.
pub fn run_ok(cmd: &mut Command, what: &str) {
    let out = cmd
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("{what}: {e}"));
    assert!(
        out.status.success(),
        "{what} failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A private containerd (own root under `dir`, state under `state`, socket; the CRI
/// plugin off), and its socket.
pub fn start_containerd(dir: &std::path::Path, state: &std::path::Path) -> (Child, PathBuf) {
    wharf_testbed::start_containerd(dir, state).unwrap_or_else(|e| panic!("{e}"))
}

/// A private podman: its argv up to the subcommand (state under `work/podman` and
/// `run_fs/podman`, cgroupfs, file events, OCI runtime `runtime`) and its environment. Its
/// containers.conf keeps the inherited rlimits: podman raises RLIMIT_NOFILE and
/// RLIMIT_NPROC by default, which needs CAP_SYS_RESOURCE, and the other engines keep them.
pub fn private_podman(
    work: &std::path::Path,
    run_fs: &std::path::Path,
    runtime: &str,
) -> (Vec<String>, Vec<(String, String)>) {
    let s = |p: &std::path::Path| p.display().to_string();
    let conf = work.join("podman/containers.conf");
    std::fs::create_dir_all(work.join("podman")).unwrap();
    std::fs::write(&conf, "[containers]\ndefault_ulimits = []\n").unwrap();
    let argv = vec![
        "podman".into(),
        "--root".into(),
        s(&work.join("podman/root")),
        "--runroot".into(),
        s(&run_fs.join("podman")),
        "--tmpdir".into(),
        s(&work.join("podman/tmp")),
        "--cgroup-manager".into(),
        "cgroupfs".into(),
        "--events-backend".into(),
        "file".into(),
        "--runtime".into(),
        runtime.into(),
    ];
    (argv, vec![("CONTAINERS_CONF".to_string(), s(&conf))])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_of_odd_and_even_sets() {
        let ms = Duration::from_millis;
        assert_eq!(median(&mut [ms(3), ms(1), ms(2)]), ms(2));
        assert_eq!(
            median(&mut [ms(4), ms(1), ms(2), ms(3)]),
            Duration::from_micros(2500)
        );
    }
}
