//! Helpers for the engine CLI tests: the real `wharf` binary run as a user would, in a world
//! of the test's own (state root, run directory, cgroup parent, an empty CNI configuration
//! directory so the built-in bridge is the default network, and a network namespace that
//! plays the host), plus the leak checks the tests assert and the cleanup that runs even
//! when a test fails.

#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::Value;
pub use wharf_testbed::{Env, wait_until};

/// The fixture registry (scripts/test.d/20-images.sh starts it and exports its address).
pub fn registry() -> String {
    std::env::var("WHARF_TEST_REGISTRY").unwrap_or_else(|_| {
        panic!(
            "WHARF_TEST_REGISTRY is not set: the engine CLI tests pull their image from the \
             loopback fixture registry; run the suite with scripts/test.sh \
             (scripts/test.d/20-images.sh starts it), or start fixtures/images/registry.sh \
             and export WHARF_TEST_REGISTRY=127.0.0.1:<port>"
        )
    })
}

/// The fixture busybox image (static busybox with all applets, `Cmd ["sh"]`).
pub fn busybox() -> String {
    format!("{}/fixtures/busybox:latest", registry())
}

/// What a `wharf` run printed and how it ended.
#[derive(Debug)]
pub struct Out {
    /// Exit code (-1 when killed by a signal).
    pub code: i32,
    /// Standard output.
    pub stdout: String,
    /// Standard error.
    pub stderr: String,
}

impl From<std::process::Output> for Out {
    fn from(o: std::process::Output) -> Out {
        Out {
            code: o.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&o.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&o.stderr).into_owned(),
        }
    }
}

/// A test's private engine: run `wharf` commands against it; dropped, it removes every
/// container and pod it has, kills any shim of it still alive and removes the test's
/// "host" network namespace (which takes the bridge, the veths and the nftables rules with
/// it); the [`Env`] then removes cgroups, mounts and the temp dir.
pub struct Wharf {
    /// Temp dir and cgroup parent.
    pub env: Env,
    /// The network namespace playing the host.
    pub host_ns: PathBuf,
    /// Extra environment for every command.
    vars: Vec<(String, String)>,
}

impl Wharf {
    /// A new engine world; `name` shows up in the cgroup parent.
    pub fn new(name: &str) -> Wharf {
        let _ = registry();
        let env = Env::new(name);
        let host_ns = wharf_net::netns::create(&env.path().join("hostns"), "host")
            .expect("create the test's host network namespace")
            .path;
        std::fs::create_dir_all(env.path().join("empty-cni")).unwrap();
        Wharf {
            env,
            host_ns,
            vars: Vec::new(),
        }
    }

    /// Set an environment variable for every later command.
    pub fn set_var(&mut self, key: &str, value: &str) {
        self.vars.push((key.into(), value.into()));
    }

    /// The persistent state root (WHARF_ROOT).
    pub fn root(&self) -> PathBuf {
        self.env.path().join("root")
    }

    /// The run directory (WHARF_RUN).
    pub fn run_dir(&self) -> PathBuf {
        self.env.path().join("run")
    }

    /// A path in the test's temp dir.
    pub fn path(&self, rel: &str) -> PathBuf {
        self.env.path().join(rel)
    }

    /// `wharf <args>` in the test's world (stdin from /dev/null).
    pub fn cmd(&self, args: &[&str]) -> Command {
        let mut c = Command::new(env!("CARGO_BIN_EXE_wharf"));
        c.args(args)
            .env("WHARF_ROOT", self.root())
            .env("WHARF_RUN", self.run_dir())
            .env("WHARF_CGROUP_PARENT", &self.env.cgroup_parent)
            .env("WHARF_CNI_CONF_DIR", self.path("empty-cni"))
            .env("WHARF_CNI_CACHE_DIR", self.path("cni-cache"))
            .env("WHARF_NET_HOST_NS", &self.host_ns)
            .env("WHARF_CONFIG", self.path("no-config.json"))
            .env("DOCKER_CONFIG", self.path("no-docker-config"))
            .env_remove("WHARF_RESTART_BACKOFF_MS")
            .env_remove("WHARF_TIMING")
            .stdin(Stdio::null());
        for (k, v) in &self.vars {
            c.env(k, v);
        }
        c
    }

    /// Run `wharf <args>` and collect what it printed.
    pub fn run(&self, args: &[&str]) -> Out {
        self.cmd(args).output().expect("run wharf").into()
    }

    /// Run; must exit 0; returns stdout.
    pub fn ok(&self, args: &[&str]) -> String {
        let out = self.run(args);
        assert_eq!(
            out.code, 0,
            "wharf {args:?} failed: {}{}",
            out.stderr, out.stdout
        );
        out.stdout
    }

    /// Run; must exit with `code`; returns stderr.
    pub fn fails(&self, code: i32, args: &[&str]) -> String {
        let out = self.run(args);
        assert_eq!(
            out.code, code,
            "wharf {args:?} should exit {code}: stdout {:?} stderr {:?}",
            out.stdout, out.stderr
        );
        out.stderr
    }

    /// `wharf inspect <object>`: the one JSON object.
    pub fn inspect(&self, object: &str) -> Value {
        let v: Value = serde_json::from_str(&self.ok(&["inspect", object])).unwrap();
        v[0].clone()
    }

    /// Host pids of a running container's processes (`wharf top`).
    pub fn pids(&self, container: &str) -> Vec<i32> {
        self.ok(&["top", container])
            .lines()
            .skip(1)
            .filter_map(|l| l.split_whitespace().nth(1)?.parse().ok())
            .collect()
    }

    /// The pid of pod `pod_id`'s shim, from its pid file.
    pub fn shim_pid(&self, pod_id: &str) -> i32 {
        let file = self
            .run_dir()
            .join("pods")
            .join(pod_id)
            .join("shim/shim.pid");
        std::fs::read_to_string(&file)
            .unwrap_or_else(|e| panic!("{}: {e}", file.display()))
            .split_whitespace()
            .next()
            .and_then(|p| p.parse().ok())
            .unwrap_or_else(|| panic!("{}: no pid", file.display()))
    }

    /// Pull the fixture busybox into this engine's store (so `run` prints no progress).
    pub fn pull_busybox(&self) {
        self.ok(&["pull", "-q", &busybox()]);
    }

    /// Poll until the container's log contains `what` (generous wait, not a timing check).
    pub fn wait_for_log(&self, container: &str, what: &str) -> String {
        let mut last = String::new();
        wait_until(Duration::from_secs(30), || {
            last = self.ok(&["logs", container]);
            last.contains(what)
        });
        assert!(
            last.contains(what),
            "{container}'s log lacks {what:?}: {last:?}"
        );
        last
    }

    // ---- the host network namespace ----

    /// Run a program inside the test's host network namespace (`nsenter --net`).
    pub fn in_host_ns(&self, prog: &str, args: &[&str]) -> String {
        let out = Command::new("nsenter")
            .arg(format!("--net={}", self.host_ns.display()))
            .arg(prog)
            .args(args)
            .stdin(Stdio::null())
            .output()
            .expect("run nsenter");
        assert!(
            out.status.success(),
            "{prog} {args:?} in the host namespace failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Network interfaces of the host namespace.
    pub fn host_links(&self) -> Vec<String> {
        self.in_host_ns("ip", &["-o", "link", "show"])
            .lines()
            .filter_map(|l| {
                let name = l.split(": ").nth(1)?;
                Some(name.split('@').next()?.to_string())
            })
            .collect()
    }

    /// The first IPv4 address of a host namespace interface.
    pub fn host_addr(&self, dev: &str) -> String {
        let out = self.in_host_ns("ip", &["-4", "-o", "addr", "show", "dev", dev]);
        out.split_whitespace()
            .skip_while(|w| *w != "inet")
            .nth(1)
            .and_then(|a| a.split('/').next())
            .unwrap_or_else(|| panic!("{dev} has no IPv4 address: {out}"))
            .to_string()
    }

    /// The host namespace's nftables ruleset (empty when nft has none).
    pub fn host_nft(&self) -> String {
        self.in_host_ns("nft", &["list", "ruleset"])
    }

    /// `GET /` over HTTP/1.0 from inside the host namespace, retried until it answers (a
    /// server may take a moment to listen). Returns the whole response.
    pub fn http_get(&self, addr: &str) -> String {
        let addr: SocketAddr = addr.parse().unwrap();
        let ns = wharf_net::netns::open(&self.host_ns).unwrap();
        let mut last = String::new();
        let got = wait_until(Duration::from_secs(30), || {
            let r = wharf_net::netns::run_in(Some(std::os::fd::AsFd::as_fd(&ns)), || {
                let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(5))?;
                s.set_read_timeout(Some(Duration::from_secs(10)))?;
                s.write_all(b"GET / HTTP/1.0\r\nHost: test\r\n\r\n")?;
                let mut body = String::new();
                s.read_to_string(&mut body)?;
                Ok::<_, std::io::Error>(body)
            });
            match r {
                Ok(b) if b.starts_with("HTTP/") => {
                    last = b;
                    true
                }
                Ok(b) => {
                    last = b;
                    false
                }
                Err(e) => {
                    last = e.to_string();
                    false
                }
            }
        });
        assert!(
            got,
            "no HTTP answer from {addr} in the host namespace: {last}"
        );
        last
    }

    // ---- leak checks ----

    /// Pids of live processes whose command line names this test's temp dir (shims, their
    /// pause processes).
    pub fn own_processes(&self) -> Vec<(i32, String)> {
        own_processes(self.env.path())
    }

    /// Assert that the engine holds nothing any more: no containers or pods, no mounts below
    /// the temp dir (but the test's own host namespace pin and the netns directory, which
    /// stays a shared mount point as /run/netns does), no cgroups below the parent, no pinned
    /// pod namespaces, no veths in the host namespace, no leases, no shim alive, no pod or
    /// container directories.
    pub fn assert_clean(&self) {
        assert_eq!(self.ok(&["ps", "-a", "-q"]), "", "containers left");
        assert_eq!(self.ok(&["pod", "ls", "-q"]), "", "pods left");
        let keep = [
            self.path("hostns/netns"),
            self.host_ns.clone(),
            self.run_dir().join("netns"),
        ];
        let mounts: Vec<PathBuf> = mount_points()
            .into_iter()
            .filter(|m| m.starts_with(self.env.path()) && !keep.contains(m))
            .filter(|m| !wharf_testbed::is_kept_mount(m))
            .collect();
        assert!(mounts.is_empty(), "mounts left: {mounts:?}");
        for d in self.env.cgroup_dirs() {
            let kids = subdirs(&d);
            assert!(kids.is_empty(), "cgroups left in {}: {kids:?}", d.display());
        }
        let netns = entries(&self.run_dir().join("netns"));
        assert!(
            netns.is_empty(),
            "pinned network namespaces left: {netns:?}"
        );
        let links: Vec<String> = self
            .host_links()
            .into_iter()
            .filter(|l| l != "lo" && l != "wharf0")
            .collect();
        assert!(
            links.is_empty(),
            "interfaces left in the host namespace: {links:?}"
        );
        let leases: Vec<String> = entries(&self.root().join("net/builtin/ipam"))
            .into_iter()
            .filter(|n| n.parse::<std::net::IpAddr>().is_ok())
            .collect();
        assert!(leases.is_empty(), "leases left: {leases:?}");
        let procs = self.own_processes();
        assert!(procs.is_empty(), "processes left: {procs:?}");
        for d in [
            self.root().join("pods"),
            self.root().join("containers"),
            self.run_dir().join("pods"),
            self.run_dir().join("containers"),
        ] {
            let left = entries(&d);
            assert!(left.is_empty(), "left in {}: {left:?}", d.display());
        }
    }
}

impl Drop for Wharf {
    fn drop(&mut self) {
        let ids = |out: Out| -> Vec<String> {
            out.stdout.lines().map(|l| l.trim().to_string()).collect()
        };
        for c in ids(self.run(&["ps", "-a", "-q"])) {
            let _ = self.run(&["rm", "-f", &c]);
        }
        for p in ids(self.run(&["pod", "ls", "-q"])) {
            let _ = self.run(&["pod", "rm", "-f", &p]);
        }
        // Shims that survived (a test that failed half way): only this test's.
        for _ in 0..100 {
            let left = self.own_processes();
            if left.is_empty() {
                break;
            }
            for (pid, _) in left {
                // SAFETY: kill(2) of a process whose command line names our temp dir.
                unsafe { libc::kill(pid, libc::SIGKILL) };
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = wharf_net::netns::remove_path(&self.host_ns);
    }
}

/// Live (non-zombie) processes whose command line contains `dir`.
pub fn own_processes(dir: &Path) -> Vec<(i32, String)> {
    let needle = dir.as_os_str().as_encoded_bytes();
    let me = std::process::id() as i32;
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else {
            continue;
        };
        if pid == me {
            continue;
        }
        let Ok(cmd) = std::fs::read(e.path().join("cmdline")) else {
            continue;
        };
        if !cmd.windows(needle.len()).any(|w| w == needle) {
            continue;
        }
        if wharf_runtime::sys::process_state(pid) != Some('Z') {
            out.push((pid, String::from_utf8_lossy(&cmd).replace('\0', " ")));
        }
    }
    out
}

/// Every mount point of this process's mount namespace.
pub fn mount_points() -> Vec<PathBuf> {
    std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap()
        .lines()
        .filter_map(|l| l.split(' ').nth(4).map(PathBuf::from))
        .collect()
}

/// Names in a directory (none when it does not exist).
pub fn entries(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default()
}

fn subdirs(dir: &Path) -> Vec<PathBuf> {
    std::fs::read_dir(dir)
        .map(|d| {
            d.flatten()
                .map(|e| e.path())
                .filter(|p| p.is_dir())
                .collect()
        })
        .unwrap_or_default()
}

/// The inode of a namespace file (`/proc/<pid>/ns/<type>`).
pub fn ns_inode(pid: i32, ns: &str) -> u64 {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(format!("/proc/{pid}/ns/{ns}"))
        .unwrap_or_else(|e| panic!("/proc/{pid}/ns/{ns}: {e}"))
        .ino()
}

/// The bits of a capability set line of /proc/<pid>/status (e.g. "CapEff").
pub fn cap_set(status: &str, which: &str) -> u64 {
    let line = status
        .lines()
        .find_map(|l| l.strip_prefix(&format!("{which}:")))
        .unwrap_or_else(|| panic!("no {which} in {status}"));
    u64::from_str_radix(line.trim(), 16).unwrap()
}

/// A memory cgroup of a test's own that the commands under test run in: a hard limit, so
/// that a command that would eat the host's memory is killed in it instead, and the peak
/// RSS of each command, as the kernel counted it (`wait4`).
pub struct Cage {
    dir: PathBuf,
    procs: std::ffi::CString,
}

impl Cage {
    /// A cage of `limit` bytes at `/wharf-test-cage-<pid>-<name>` of the memory hierarchy
    /// (cgroup v2 where it has the memory controller, else v1's).
    pub fn new(name: &str, limit: u64) -> Cage {
        let leaf = format!("wharf-test-cage-{}-{name}", std::process::id());
        let v2 = Path::new("/sys/fs/cgroup/cgroup.controllers");
        let (dir, limit_file) = if std::fs::read_to_string(v2).is_ok_and(|c| c.contains("memory")) {
            (Path::new("/sys/fs/cgroup").join(&leaf), "memory.max")
        } else {
            (
                Path::new("/sys/fs/cgroup/memory").join(&leaf),
                "memory.limit_in_bytes",
            )
        };
        std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
        std::fs::write(dir.join(limit_file), limit.to_string()).unwrap();
        let procs = std::ffi::CString::new(dir.join("cgroup.procs").as_os_str().as_encoded_bytes())
            .unwrap();
        Cage { dir, procs }
    }

    /// Move a running process (and its threads) into the cage.
    pub fn adopt(&self, pid: u32) {
        std::fs::write(self.dir.join("cgroup.procs"), pid.to_string()).unwrap();
    }

    /// Run `cmd` in the cage; its output, and its peak RSS in bytes (its own and that of
    /// the children it waited for).
    // Waited for with wait4(2), for the rusage std's wait does not return.
    #[allow(clippy::zombie_processes)]
    pub fn run(&self, mut cmd: Command) -> (Out, u64) {
        use std::os::unix::process::CommandExt;
        let procs = self.procs.clone();
        // SAFETY: between fork and exec the child only calls open(2), write(2) and
        // close(2) on memory prepared before the fork (async-signal-safe).
        unsafe {
            cmd.pre_exec(move || {
                let fd = libc::open(procs.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
                if fd < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                let ok = libc::write(fd, b"0".as_ptr().cast(), 1) == 1;
                libc::close(fd);
                if ok {
                    Ok(())
                } else {
                    Err(std::io::Error::last_os_error())
                }
            });
        }
        let child = cmd
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn a command in the cage");
        let pid = child.id() as i32;
        // A command that hangs is killed after a while (and shows as killed, -1), so that
        // a regression fails the test instead of stalling it.
        let (done, watchdog) = std::sync::mpsc::channel::<()>();
        let dog = std::thread::spawn(move || {
            if watchdog.recv_timeout(Duration::from_secs(60)).is_err() {
                // SAFETY: kill(2) of our own child, not yet waited for.
                unsafe { libc::kill(pid, libc::SIGKILL) };
            }
        });
        let (mut so, mut se) = (child.stdout.unwrap(), child.stderr.unwrap());
        let err = std::thread::spawn(move || {
            let mut s = String::new();
            let _ = se.read_to_string(&mut s);
            s
        });
        let mut stdout = String::new();
        let _ = so.read_to_string(&mut stdout);
        let stderr = err.join().unwrap();
        let mut status = 0;
        // SAFETY: an all-zero rusage is a valid value for wait4 to fill.
        let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
        // SAFETY: wait4(2) of our own child, with valid pointers.
        let r = unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
        assert_eq!(r, pid, "wait4: {}", std::io::Error::last_os_error());
        let _ = done.send(());
        let _ = dog.join();
        let code = if libc::WIFEXITED(status) {
            libc::WEXITSTATUS(status)
        } else {
            -1
        };
        (
            Out {
                code,
                stdout,
                stderr,
            },
            usage.ru_maxrss as u64 * 1024,
        )
    }
}

impl Drop for Cage {
    fn drop(&mut self) {
        // What is left in it (shims the caged commands started) goes with it.
        for _ in 0..100 {
            let pids = std::fs::read_to_string(self.dir.join("cgroup.procs")).unwrap_or_default();
            if pids.trim().is_empty() {
                break;
            }
            for p in pids.lines().filter_map(|l| l.trim().parse::<i32>().ok()) {
                // SAFETY: kill(2) of processes in the test's own cgroup.
                unsafe { libc::kill(p, libc::SIGKILL) };
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        wharf_testbed::remove_cgroup_tree(&self.dir);
    }
}
