//! Wharf's test bed: everything a test needs to start real containers and leave nothing
//! behind.
//!
//! An [`Env`] owns a temporary directory (runtime root, bundles, anything else the test
//! makes) and a cgroup parent `/wharf-test-<name>-<pid>-<n>` in every hierarchy. Dropping it,
//! also when the test panics, kills every process in that cgroup tree, removes the cgroups,
//! unmounts whatever is still mounted below the directory and deletes it. Tests never touch
//! cgroups or mounts outside what their `Env` made.

pub mod fake_registry;
pub mod layer_tar;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use serde_json::Value;

/// Panic with a clear message unless running as root (the tests start real containers).
pub fn require_root() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        panic!(
            "this test starts real containers and needs root: run the suite as root \
             (see README.md: the test command)"
        );
    }
}

/// The static busybox used to build test rootfs trees (Debian's busybox-static).
pub fn busybox() -> PathBuf {
    for p in ["/bin/busybox", "/usr/bin/busybox"] {
        let path = PathBuf::from(p);
        if path.exists() {
            return path;
        }
    }
    panic!("busybox not found: install Debian's busybox-static (the test command does)");
}

static COUNTER: AtomicUsize = AtomicUsize::new(0);

/// A test's private world: temp dir, runtime root, cgroup parent.
pub struct Env {
    dir: tempfile::TempDir,
    /// Runtime state root for this test.
    pub root: PathBuf,
    /// Cgroup parent (absolute, same in every hierarchy), e.g. `/wharf-test-x-123-0`.
    pub cgroup_parent: String,
}

impl Env {
    /// A new environment; `name` shows up in the cgroup parent for debugging.
    pub fn new(name: &str) -> Env {
        require_root();
        let n = COUNTER.fetch_add(1, Ordering::SeqCst);
        let safe: String = name
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
            .take(40)
            .collect();
        let cgroup_parent = format!("/wharf-test-{safe}-{}-{n}", std::process::id());
        let dir = tempfile::Builder::new()
            .prefix("wharf-test-")
            .tempdir()
            .expect("create a temp dir");
        let root = dir.path().join("state");
        Env {
            dir,
            root,
            cgroup_parent,
        }
    }

    /// The temp directory.
    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// The cgroupsPath for a container called `name`.
    pub fn cgroup_path(&self, name: &str) -> String {
        format!("{}/{name}", self.cgroup_parent)
    }

    /// A bundle with a busybox rootfs and `base` (a config.json text) adjusted for tests:
    /// no terminal, `args` as the process, its own cgroup below the parent.
    pub fn bundle(&self, name: &str, base: &str, args: &[&str]) -> Bundle {
        let dir = self.dir.path().join(name);
        let rootfs = dir.join("rootfs");
        make_busybox_rootfs(&rootfs);
        let mut config: Value = serde_json::from_str(base).expect("base config is JSON");
        config["process"]["terminal"] = Value::Bool(false);
        config["process"]["args"] = args.iter().map(|a| Value::from(*a)).collect();
        config["linux"]["cgroupsPath"] = Value::from(self.cgroup_path(name));
        let b = Bundle { dir, config };
        b.save();
        b
    }

    /// Every hierarchy's directory of the cgroup parent.
    pub fn cgroup_dirs(&self) -> Vec<PathBuf> {
        cgroup_mounts()
            .into_iter()
            .map(|m| m.join(self.cgroup_parent.trim_start_matches('/')))
            .collect()
    }
}

impl Drop for Env {
    fn drop(&mut self) {
        let dirs = self.cgroup_dirs();
        // Kill until no process is left (a fork may race the first pass).
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let pids: Vec<i32> = dirs.iter().flat_map(|d| pids_below(d)).collect();
            if pids.is_empty() || Instant::now() > deadline {
                break;
            }
            for d in &dirs {
                thaw(d);
            }
            for pid in pids {
                // SAFETY: kill(2) on pids read from our own cgroup tree.
                unsafe { libc::kill(pid, libc::SIGKILL) };
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        for d in &dirs {
            remove_cgroup_tree(d);
        }
        unmount_below(self.dir.path());
    }
}

/// A bundle on disk.
pub struct Bundle {
    /// Bundle directory (config.json + rootfs).
    pub dir: PathBuf,
    /// The config; call [`Bundle::save`] after changing it.
    pub config: Value,
}

impl Bundle {
    /// Write config.json.
    pub fn save(&self) {
        std::fs::write(
            self.dir.join("config.json"),
            serde_json::to_vec_pretty(&self.config).unwrap(),
        )
        .expect("write config.json");
    }

    /// The rootfs directory.
    pub fn rootfs(&self) -> PathBuf {
        self.dir.join("rootfs")
    }
}

/// A minimal root filesystem: static busybox with every applet linked, /etc/passwd and
/// group, and the usual empty mount points.
pub fn make_busybox_rootfs(rootfs: &Path) {
    for d in [
        "bin", "dev", "proc", "sys", "tmp", "etc", "root", "var", "run",
    ] {
        std::fs::create_dir_all(rootfs.join(d)).unwrap();
    }
    let bb = rootfs.join("bin/busybox");
    // A copy, not a link: a test that writes into the container must not reach the host's.
    copy_executable(&busybox(), &bb);
    let list = std::process::Command::new(&bb)
        .arg("--list")
        .output()
        .expect("busybox --list");
    for applet in String::from_utf8_lossy(&list.stdout).lines() {
        if applet != "busybox" {
            let _ = std::os::unix::fs::symlink("busybox", rootfs.join("bin").join(applet));
        }
    }
    std::fs::write(
        rootfs.join("etc/passwd"),
        "root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n",
    )
    .unwrap();
    std::fs::write(rootfs.join("etc/group"), "root:x:0:\nnogroup:x:65534:\n").unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(rootfs.join("tmp"), std::fs::Permissions::from_mode(0o1777)).unwrap();
}

/// Copy an executable without this process ever holding it open for writing.
///
/// When tests run as threads of one process (`cargo test`), a child forked by another thread
/// (a `Command`, or a container init cloned by the runtime library) inherits every fd open
/// at that moment and keeps it until it execs; an executable still open for writing in any
/// process cannot be exec'd (ETXTBSY). So the copy is made by a `cp` child of its own.
pub fn copy_executable(src: &Path, dst: &Path) {
    let status = std::process::Command::new("cp")
        .arg("--")
        .arg(src)
        .arg(dst)
        .status()
        .expect("run cp");
    assert!(
        status.success(),
        "cp {} {}: {status}",
        src.display(),
        dst.display()
    );
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(dst, std::fs::Permissions::from_mode(0o755)).expect("chmod");
}

/// Write an executable file (a script) with `content`, safely against ETXTBSY (see
/// [`copy_executable`]): the text goes to a side file first, which is never executed.
pub fn write_executable(path: &Path, content: &str) {
    let draft = path.with_extension("draft");
    std::fs::write(&draft, content).expect("write the script");
    copy_executable(&draft, path);
    let _ = std::fs::remove_file(&draft);
}

/// A host program for escape tests: a static busybox named `echo` in `dir` (a directory
/// of the test's own, only the host can see), so `[<its path>, "ESCAPED"]` prints ESCAPED
/// only when a container reached it.
pub fn host_echo(dir: &Path) -> PathBuf {
    std::fs::create_dir_all(dir).expect("create the marker directory");
    let marker = dir.join("echo");
    copy_executable(&busybox(), &marker);
    marker
}

/// `/proc/self/fd/N/../..(many)/<host path>`: the host path, if fd N of the process that
/// resolves it is a directory of the host (the CVE-2024-21626 way out).
pub fn through_fd(n: u32, host: &Path) -> String {
    format!(
        "/proc/self/fd/{n}/{}{}",
        "../".repeat(16),
        host.to_str().expect("UTF-8 path").trim_start_matches('/')
    )
}

/// The open fd numbers of process `pid`, sorted, as the host sees them.
pub fn fds_of(pid: i32) -> Vec<String> {
    let mut fds: Vec<String> = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .expect("read the process's fd directory")
        .map(|e| {
            e.expect("fd entry")
                .file_name()
                .to_string_lossy()
                .into_owned()
        })
        .collect();
    fds.sort_by_key(|f| f.parse::<u32>().unwrap_or(u32::MAX));
    fds
}

/// Mount points of every cgroup hierarchy (v1 controllers, named ones, cgroup2).
pub fn cgroup_mounts() -> Vec<PathBuf> {
    let info = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    let mut out = Vec::new();
    for line in info.lines() {
        let Some((pre, post)) = line.split_once(" - ") else {
            continue;
        };
        let fstype = post.split(' ').next().unwrap_or("");
        let pre: Vec<&str> = pre.split(' ').collect();
        if (fstype == "cgroup" || fstype == "cgroup2") && pre.get(3) == Some(&"/") {
            let mp = PathBuf::from(pre[4]);
            if !out.contains(&mp) {
                out.push(mp);
            }
        }
    }
    out
}

fn pids_below(dir: &Path) -> Vec<i32> {
    let mut out = Vec::new();
    if let Ok(text) = std::fs::read_to_string(dir.join("cgroup.procs")) {
        out.extend(text.lines().filter_map(|l| l.trim().parse::<i32>().ok()));
    }
    if let Ok(entries) = std::fs::read_dir(dir) {
        for e in entries.flatten() {
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                out.extend(pids_below(&e.path()));
            }
        }
    }
    out
}

fn thaw(dir: &Path) {
    let _ = std::fs::write(dir.join("freezer.state"), "THAWED");
    let _ = std::fs::write(dir.join("cgroup.freeze"), "0");
    if let Ok(entries) = std::fs::read_dir(dir) {
        for e in entries.flatten() {
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                thaw(&e.path());
            }
        }
    }
}

/// Remove a cgroup directory tree deepest first, retrying while exiting processes keep a
/// cgroup busy.
pub fn remove_cgroup_tree(dir: &Path) {
    if let Ok(entries) = std::fs::read_dir(dir) {
        for e in entries.flatten() {
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                remove_cgroup_tree(&e.path());
            }
        }
    }
    for _ in 0..200 {
        match std::fs::remove_dir(dir) {
            Ok(()) => return,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return,
            Err(_) => std::thread::sleep(Duration::from_millis(10)),
        }
    }
}

/// Mounts the engine makes once per root and keeps, like the netns directory, so no
/// leftover of a pod: the runtime's mount namespace template (its private mount point and
/// its pin) and the image layers' own mount (`image/snapshots` bound onto itself).
pub fn is_kept_mount(m: &Path) -> bool {
    m.components().any(|c| c.as_os_str() == ".mnt-template") || m.ends_with("image/snapshots")
}

/// Unmount everything mounted at or below `dir` (deepest first).
pub fn unmount_below(dir: &Path) {
    let info = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    let mut points: Vec<PathBuf> = info
        .lines()
        .filter_map(|l| l.split(' ').nth(4))
        .map(PathBuf::from)
        .filter(|p| p.starts_with(dir))
        .collect();
    points.sort_by_key(|p| std::cmp::Reverse(p.as_os_str().len()));
    for p in points {
        let c = std::ffi::CString::new(p.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: umount2 on a path we mounted below our own temp dir.
        unsafe { libc::umount2(c.as_ptr(), libc::MNT_DETACH) };
    }
}

/// Poll `f` until it returns true or `timeout` passes (for waiting on state changes, not
/// for asserting durations).
pub fn wait_until(timeout: Duration, mut f: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        if f() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    f()
}

/// A private containerd for tests and benchmarks: its root under `dir`, its state under
/// `state`, its sockets and log (`containerd.log`) in `dir`, the CRI plugin off. Returns
/// once its socket exists (callers that need it answering ask it, e.g. `ctr version`).
pub fn start_containerd(
    dir: &Path,
    state: &Path,
) -> Result<(std::process::Child, PathBuf), String> {
    use std::process::{Command, Stdio};
    std::fs::create_dir_all(dir).map_err(|e| format!("create {}: {e}", dir.display()))?;
    let sock = dir.join("containerd.sock");
    let config = format!(
        "version = 2\nroot = \"{d}/root\"\nstate = \"{st}\"\n\
         disabled_plugins = [\"io.containerd.grpc.v1.cri\"]\n\
         [grpc]\n  address = \"{s}\"\n[ttrpc]\n  address = \"{s}.ttrpc\"\n[debug]\n  address = \"\"\n",
        d = dir.display(),
        st = state.display(),
        s = sock.display()
    );
    let config_file = dir.join("config.toml");
    std::fs::write(&config_file, config)
        .map_err(|e| format!("write {}: {e}", config_file.display()))?;
    let log = std::fs::File::create(dir.join("containerd.log"))
        .map_err(|e| format!("create {}: {e}", dir.join("containerd.log").display()))?;
    let mut child = Command::new("containerd")
        .arg("--config")
        .arg(&config_file)
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .map_err(|e| format!("start containerd: {e}"))?;
    if !wait_until(Duration::from_secs(20), || sock.exists()) {
        let _ = child.kill();
        let _ = child.wait();
        return Err("containerd did not start".into());
    }
    Ok((child, sock))
}
