//! Crashes of every kind, through the real binary: the CLI killed while a container runs
//! attached, while it creates or removes a pod (at each step, with WHARF_CRASH_AT, and at
//! random moments), a shim killed among 20 running pods, a container exiting while no CLI
//! runs, and a simulated reboot. Afterwards the state must be right (the next command
//! reconciles it) and removing everything must leave nothing: no mount, cgroup, network
//! namespace, veth, IP lease, lock, directory or shim process.
//!
//! Each test has its own state root, run directory (a tmpfs, so a reboot can be simulated by
//! unmounting it), cgroup parent and "host" network namespace; images come from the fixture
//! registry (WHARF_TEST_REGISTRY, started by scripts/test.d/20-images.sh).

use std::collections::{BTreeMap, HashSet};
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use serde_json::Value;
use wharf_testbed::{Env, wait_until};

const WAIT: Duration = Duration::from_secs(60);

fn registry() -> String {
    std::env::var("WHARF_TEST_REGISTRY").unwrap_or_else(|_| {
        panic!(
            "WHARF_TEST_REGISTRY is not set: these tests pull from the loopback fixture \
             registry; run the suite with scripts/test.sh (scripts/test.d/20-images.sh starts \
             it and exports WHARF_TEST_REGISTRY)"
        )
    })
}

/// A test's own Wharf: state root, run directory, cgroup parent, host network namespace.
struct World {
    env: Env,
    root: PathBuf,
    run: PathBuf,
    host_ns: PathBuf,
    image: String,
    /// Snapshots after the image was pulled (the image's own layers).
    snapshots: usize,
}

impl World {
    fn new(name: &str) -> World {
        let env = Env::new(name);
        let run = env.path().join("run");
        std::fs::create_dir_all(&run).unwrap();
        mount_tmpfs(&run);
        let host_ns = wharf_net::netns::create(&env.path().join("hostns"), "host")
            .unwrap()
            .path;
        std::fs::create_dir_all(env.path().join("cni-conf")).unwrap();
        let mut w = World {
            root: env.path().join("root"),
            run,
            host_ns,
            image: format!("{}/fixtures/busybox:latest", registry()),
            snapshots: 0,
            env,
        };
        let image = w.image.clone();
        w.ok(&["pull", &image]);
        w.snapshots = count_entries(&w.root.join("image/snapshots"));
        w
    }

    fn cmd(&self, args: &[&str]) -> Command {
        let mut c = Command::new(env!("CARGO_BIN_EXE_wharf"));
        c.args(args)
            .env("WHARF_ROOT", &self.root)
            .env("WHARF_RUN", &self.run)
            .env("WHARF_CGROUP_PARENT", &self.env.cgroup_parent)
            .env("WHARF_CNI_CONF_DIR", self.env.path().join("cni-conf"))
            .env("WHARF_NET_HOST_NS", &self.host_ns)
            .env("WHARF_CONFIG", self.env.path().join("no-config.json"))
            .env("DOCKER_CONFIG", self.env.path().join("no-docker-config"))
            .env_remove("WHARF_CRASH_AT")
            .env_remove("WHARF_DEBUG")
            .stdin(Stdio::null());
        c
    }

    fn run(&self, args: &[&str]) -> Output {
        self.cmd(args).output().expect("run wharf")
    }

    /// Run; must succeed without warnings; returns stdout.
    fn ok(&self, args: &[&str]) -> String {
        let out = self.run(args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            out.status.success(),
            "wharf {args:?} failed ({}): {stderr}{}",
            out.status,
            String::from_utf8_lossy(&out.stdout)
        );
        assert!(
            !stderr.contains("warning"),
            "wharf {args:?} warned: {stderr}"
        );
        String::from_utf8(out.stdout).unwrap()
    }

    /// Run with a crash point: the command must die there (SIGKILL).
    fn crash_at(&self, phase: &str, args: &[&str]) {
        let out = self
            .cmd(args)
            .env("WHARF_CRASH_AT", phase)
            .output()
            .unwrap();
        assert_eq!(
            out.status.signal(),
            Some(libc::SIGKILL),
            "wharf {args:?} did not crash at {phase:?} ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// `wharf system restore`: what it brought back, sorted.
    fn restore(&self) -> Vec<String> {
        let mut restored: Vec<String> = self
            .ok(&["system", "restore"])
            .lines()
            .map(String::from)
            .collect();
        restored.sort();
        restored
    }

    /// Every container (`wharf ps -a -q`) as `wharf inspect` shows it, by name.
    fn ps(&self) -> BTreeMap<String, Value> {
        let ids = self.ok(&["ps", "-a", "-q"]);
        if ids.trim().is_empty() {
            return BTreeMap::new();
        }
        let mut args = vec!["inspect", "--type", "container"];
        args.extend(ids.lines());
        let v: Value = serde_json::from_str(&self.ok(&args)).unwrap();
        v.as_array()
            .unwrap()
            .iter()
            .map(|c| {
                let name = c["Name"].as_str().unwrap().trim_start_matches('/');
                (name.to_string(), c.clone())
            })
            .collect()
    }

    /// `wharf pod ls` as JSON, by pod name.
    fn pods(&self) -> BTreeMap<String, Value> {
        let v: Value = serde_json::from_str(&self.ok(&["pod", "ls", "--format", "json"])).unwrap();
        v.as_array()
            .unwrap()
            .iter()
            .map(|p| (p["Name"].as_str().unwrap().to_string(), p.clone()))
            .collect()
    }

    fn status(&self, name: &str) -> Option<String> {
        self.ps()
            .get(name)
            .map(|c| c["State"]["Status"].as_str().unwrap().to_string())
    }

    /// The shim pid of each pod (from its pid file), by pod id.
    fn shim_pids(&self) -> BTreeMap<String, i32> {
        let mut out = BTreeMap::new();
        // Shims keep their state in the runtime directory.
        for e in read_dir(&self.run.join("pods")) {
            if let Ok(text) = std::fs::read_to_string(e.join("shim/shim.pid"))
                && let Some(pid) = text.split_whitespace().next().and_then(|p| p.parse().ok())
            {
                out.insert(e.file_name().unwrap().to_string_lossy().into_owned(), pid);
            }
        }
        out
    }

    /// Processes of this test's Wharf (shims: their command line names our state dir).
    fn our_processes(&self) -> Vec<i32> {
        let me = std::process::id() as i32;
        let needle = self.env.path().to_string_lossy().into_owned();
        let mut out = Vec::new();
        for e in read_dir(Path::new("/proc")) {
            let Some(pid) = e
                .file_name()
                .and_then(|n| n.to_str())
                .and_then(|n| n.parse::<i32>().ok())
            else {
                continue;
            };
            if pid == me {
                continue;
            }
            let cmdline = std::fs::read(e.join("cmdline")).unwrap_or_default();
            if String::from_utf8_lossy(&cmdline).contains(&needle) {
                out.push(pid);
            }
        }
        out
    }

    /// Processes in the test's cgroup tree (containers).
    fn container_processes(&self) -> Vec<i32> {
        self.env
            .cgroup_dirs()
            .iter()
            .flat_map(|d| procs_below(d))
            .collect()
    }

    /// Links of the host namespace other than lo and the bridge.
    fn host_links(&self) -> Vec<String> {
        let out = Command::new("nsenter")
            .arg(format!("--net={}", self.host_ns.display()))
            .args(["ip", "-o", "link", "show"])
            .output()
            .expect("run nsenter ip link (iproute2, util-linux)");
        assert!(out.status.success(), "{out:?}");
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter_map(|l| l.split(':').nth(1))
            .map(|n| n.trim().split('@').next().unwrap_or("").to_string())
            .filter(|n| n != "lo" && n != "wharf0")
            .collect()
    }

    fn leases(&self) -> Vec<String> {
        read_dir(&self.root.join("net/builtin/ipam"))
            .into_iter()
            .filter_map(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
            .filter(|n| n.parse::<std::net::IpAddr>().is_ok())
            .collect()
    }

    fn mounts(&self) -> Vec<String> {
        let keep: HashSet<PathBuf> = [
            self.run.clone(),
            self.run.join("netns"),
            self.host_ns.clone(),
            self.host_ns.parent().unwrap().to_path_buf(),
        ]
        .into();
        std::fs::read_to_string("/proc/self/mountinfo")
            .unwrap()
            .lines()
            .filter_map(|l| l.split(' ').nth(4))
            .map(PathBuf::from)
            .filter(|m| m.starts_with(self.env.path()) && !keep.contains(m))
            .filter(|m| !wharf_testbed::is_kept_mount(m))
            .map(|m| m.display().to_string())
            .collect()
    }

    fn cgroups(&self) -> Vec<String> {
        self.env
            .cgroup_dirs()
            .iter()
            .flat_map(|d| read_dir(d))
            .filter(|p| p.is_dir())
            .map(|p| p.display().to_string())
            .collect()
    }

    /// Everything removed: nothing of any pod or container is left anywhere.
    fn assert_clean(&self) {
        assert_eq!(self.ok(&["ps", "-aq"]), "", "containers left");
        assert_eq!(self.ok(&["pod", "ls", "-q"]), "", "pods left");
        assert_eq!(self.mounts(), Vec::<String>::new(), "mounts left");
        assert_eq!(self.cgroups(), Vec::<String>::new(), "cgroups left");
        assert_eq!(
            read_dir(&self.run.join("netns")),
            Vec::<PathBuf>::new(),
            "network namespaces left"
        );
        assert_eq!(self.host_links(), Vec::<String>::new(), "veths left");
        assert_eq!(self.leases(), Vec::<String>::new(), "IP leases left");
        assert_eq!(
            read_dir(&self.root.join("net/builtin/pods")),
            Vec::<PathBuf>::new(),
            "network records left"
        );
        for d in [
            self.root.join("pods"),
            self.root.join("containers"),
            self.run.join("pods"),
            self.run.join("containers"),
            self.run.join("runtime"),
            self.run.join("locks"),
            // The shims' change marks go with their pods.
            self.run.join("shims.changed"),
            self.run.join("shims.claimed"),
        ] {
            assert_eq!(
                read_dir(&d),
                Vec::<PathBuf>::new(),
                "left in {}",
                d.display()
            );
        }
        assert_eq!(
            count_entries(&self.root.join("image/snapshots")),
            self.snapshots,
            "container snapshots left"
        );
        assert!(
            wait_until(Duration::from_secs(10), || self.our_processes().is_empty()),
            "shim processes left: {:?}",
            self.our_processes()
        );
        assert_eq!(self.container_processes(), Vec::<i32>::new());
    }

    /// Remove every container and pod (as a user would after a crash).
    fn remove_all(&self) {
        let ids = self.ok(&["ps", "-aq"]);
        let ids: Vec<&str> = ids.split_whitespace().collect();
        if !ids.is_empty() {
            let mut args = vec!["rm", "-f"];
            args.extend(ids);
            self.ok(&args);
        }
        let pods = self.ok(&["pod", "ls", "-q"]);
        let pods: Vec<&str> = pods.split_whitespace().collect();
        if !pods.is_empty() {
            let mut args = vec!["pod", "rm", "-f"];
            args.extend(pods);
            self.ok(&args);
        }
    }

    /// What a reboot does to Wharf's world: every shim and container process dies, and the
    /// run directory (a tmpfs) comes back empty. (Cgroups survive here, unlike a reboot:
    /// reconciling removes them.)
    fn reboot(&self) {
        for pid in self.our_processes() {
            // SAFETY: kill(2) of processes started for this test.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
        for pid in self.container_processes() {
            // SAFETY: as above (the test's cgroup tree).
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
        assert!(wait_until(WAIT, || self.our_processes().is_empty()
            && self.container_processes().is_empty()));
        wharf_testbed::unmount_below(&self.run);
        // What a reboot takes besides: tmpfs volumes of pods and views of images.
        wharf_testbed::unmount_below(&self.root);
        mount_tmpfs(&self.run);
    }
}

impl Drop for World {
    fn drop(&mut self) {
        // Shims live outside the test's cgroup tree (they stay where their spawner was).
        for _ in 0..100 {
            let left = self.our_processes();
            if left.is_empty() {
                break;
            }
            for pid in left {
                // SAFETY: kill(2) of processes started for this test.
                unsafe { libc::kill(pid, libc::SIGKILL) };
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        // The Env then kills the containers, removes the cgroups and unmounts the run
        // tmpfs, the pinned namespaces and the host namespace.
    }
}

fn mount_tmpfs(dir: &Path) {
    let target = std::ffi::CString::new(dir.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: mounting a tmpfs on a directory of the test's own temp dir.
    let rc = unsafe {
        libc::mount(
            c"tmpfs".as_ptr(),
            target.as_ptr(),
            c"tmpfs".as_ptr(),
            0,
            c"mode=0755".as_ptr().cast(),
        )
    };
    assert_eq!(rc, 0, "mount a tmpfs on {}", dir.display());
}

/// What a directory holds, but the runtime's mount namespace template (made once, kept).
fn read_dir(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|d| d.flatten().map(|e| e.path()).collect())
        .unwrap_or_default();
    v.retain(|p| !wharf_testbed::is_kept_mount(p));
    v.sort();
    v
}

fn count_entries(dir: &Path) -> usize {
    read_dir(dir).len()
}

fn procs_below(dir: &Path) -> Vec<i32> {
    let mut out: Vec<i32> = std::fs::read_to_string(dir.join("cgroup.procs"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .collect();
    for d in read_dir(dir) {
        if d.is_dir() {
            out.extend(procs_below(&d));
        }
    }
    out
}

fn alive(pid: i32) -> bool {
    // A zombie is as good as dead.
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| {
            s.rsplit_once(") ")
                .map(|(_, r)| !r.starts_with('Z') && !r.starts_with('X'))
        })
        .unwrap_or(false)
}

/// Whether the shim has recorded container directory `dir`'s exit on disk (its exit record,
/// then its status).
fn exit_recorded(dir: &Path) -> bool {
    dir.join("exit.json").exists()
        && std::fs::read(dir.join("status.json"))
            .ok()
            .and_then(|b| serde_json::from_slice::<Value>(&b).ok())
            .is_some_and(|v| v["status"] == "exited")
}

fn exit_code(c: &Value) -> i64 {
    c["State"]["ExitCode"].as_i64().unwrap_or(-1)
}

fn reason(c: &Value) -> String {
    c["State"]["Reason"].as_str().unwrap_or("").to_string()
}

/// Every pod and container the store shows is whole: no creation or removal half done.
fn assert_consistent(w: &World) {
    let pods = w.pods();
    for (name, p) in &pods {
        let state = p["State"].as_str().unwrap();
        assert!(
            matches!(state, "created" | "running"),
            "pod {name} is {state}: {p:#}"
        );
        // Its sandbox is all there.
        let sb = &p["Sandbox"];
        for ns in ["Netns", "Ipcns", "Utsns"] {
            let path = sb[ns].as_str().unwrap();
            assert!(Path::new(path).exists(), "pod {name}: {ns} {path} is gone");
        }
        assert!(
            !sb["Ips"].as_array().unwrap().is_empty(),
            "pod {name}: no IP"
        );
        // A standalone pod is never left without its container.
        assert!(
            !p["Containers"].as_array().unwrap().is_empty(),
            "pod {name} has no container"
        );
    }
    for (name, c) in w.ps() {
        let state = c["State"]["Status"].as_str().unwrap();
        assert!(
            matches!(state, "created" | "running" | "exited"),
            "container {name} is {state}"
        );
        assert!(pods.contains_key(c["Pod"].as_str().unwrap()));
    }
    // One lease per pod, one veth per pod.
    assert_eq!(w.leases().len(), pods.len(), "leases: {:?}", w.leases());
    assert_eq!(w.host_links().len(), pods.len(), "{:?}", w.host_links());
}

#[test]
fn a_killed_attached_cli_leaves_its_container_running_and_its_exit_is_recorded_later() {
    let w = World::new("crash-attached");
    let mut cli = w
        .cmd(&[
            "run",
            "--name",
            "fg",
            &w.image,
            "sh",
            "-c",
            "echo started; while [ ! -e /tmp/go ]; do sleep 0.05; done; echo done; exit 7",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut first = [0u8; 8];
    use std::io::Read;
    cli.stdout.as_mut().unwrap().read_exact(&mut first).unwrap();
    assert_eq!(&first, b"started\n");
    cli.kill().unwrap();
    cli.wait().unwrap();
    // The container keeps running without its CLI.
    assert_eq!(w.status("fg").as_deref(), Some("running"));
    let id = w.ps()["fg"]["Id"].as_str().unwrap().to_string();
    let shims = w.shim_pids();
    assert_eq!(shims.len(), 1);
    assert!(shims.values().all(|p| alive(*p)));
    // It exits with no CLI around; the shim records it, the next command reports it.
    let rootfs = w.run.join("containers").join(&id).join("rootfs");
    std::fs::write(rootfs.join("tmp/go"), "").unwrap();
    let dir = w
        .run
        .join("pods")
        .join(shims.keys().next().unwrap())
        .join("shim/containers")
        .join(&id);
    assert!(wait_until(WAIT, || exit_recorded(&dir)), "no exit record");
    let c = &w.ps()["fg"];
    assert_eq!(c["State"]["Status"], "exited");
    assert_eq!(exit_code(c), 7);
    let logs = w.ok(&["logs", "fg"]);
    assert_eq!(logs, "started\ndone\n");
    w.ok(&["rm", "-f", "fg"]);
    w.assert_clean();
}

#[test]
fn a_container_that_exits_while_no_cli_runs_shows_its_exit_code() {
    let w = World::new("crash-exit-offline");
    w.ok(&[
        "run", "-d", "--name", "quick", &w.image, "sh", "-c", "exit 42",
    ]);
    // Nothing of Wharf runs but the shim; wait for its record on disk, not through the CLI.
    let pod = w.shim_pids().keys().next().unwrap().clone();
    let dir = w.run.join("pods").join(&pod).join("shim/containers");
    assert!(wait_until(WAIT, || {
        read_dir(&dir).first().is_some_and(|c| exit_recorded(c))
    }));
    let c = &w.ps()["quick"];
    assert_eq!(c["State"]["Status"], "exited");
    assert_eq!(exit_code(c), 42);
    assert_eq!(reason(c), "Error");
    assert!(w.ok(&["ps", "-a"]).contains("Exited (42)"));
    w.ok(&["rm", "quick"]);
    w.assert_clean();
}

/// The steps of `wharf run -d` where a crash leaves the most behind.
const CREATE_STEPS: &[&str] = &[
    "pod row inserted",
    "cgroup",
    // Killed while its IPC/UTS namespaces are being made (a helper process once made them,
    // inherited the pod lock and outlived the CLI, so the pod looked still at work).
    "pinning ipc/uts",
    "pinned ipc/uts",
    "shm",
    "netns",
    "network attached",
    "dns files",
    "shim started",
    "container: row inserted",
    "container: created in shim",
    "container: started in shim",
];

#[test]
fn a_cli_killed_at_any_step_of_a_run_leaves_no_half_made_pod() {
    let w = World::new("crash-create");
    // A healthy pod beside them is never disturbed.
    w.ok(&[
        "run",
        "-d",
        "--name",
        "bystander",
        &w.image,
        "sleep",
        "1000",
    ]);
    for (i, step) in CREATE_STEPS.iter().enumerate() {
        let name = format!("c{i}");
        w.crash_at(
            step,
            &["run", "-d", "--name", &name, &w.image, "sleep", "1000"],
        );
        assert_consistent(&w);
        let ps = w.ps();
        match *step {
            // Created in the shim, never started: a created container, which starts.
            "container: created in shim" => {
                assert_eq!(ps[&name]["State"]["Status"], "created");
                w.ok(&["start", &name]);
                assert_eq!(w.status(&name).as_deref(), Some("running"));
            }
            // Started: it runs, and the store knows.
            "container: started in shim" => {
                assert_eq!(ps[&name]["State"]["Status"], "running");
            }
            // Anything earlier is rolled back entirely.
            _ => {
                assert!(!ps.contains_key(&name), "{step}: {:#}", ps[&name]);
                assert!(!w.pods().contains_key(&name), "{step}: pod {name} left");
            }
        }
        assert_eq!(w.status("bystander").as_deref(), Some("running"));
    }
    // A pod of its own (`pod create`), and a container created into an existing pod: the
    // pod creation is rolled back; the container is, and its pod stays.
    w.crash_at("network attached", &["pod", "create", "--name", "pc"]);
    assert!(!w.pods().contains_key("pc"));
    w.ok(&["pod", "create", "--name", "shared"]);
    w.crash_at(
        "container: row inserted",
        &[
            "create", "--pod", "shared", "--name", "inner", &w.image, "true",
        ],
    );
    assert!(!w.ps().contains_key("inner"));
    assert_eq!(w.pods()["shared"]["State"], "created");
    w.ok(&["pod", "rm", "shared"]);
    assert_consistent(&w);
    // Kills at arbitrary moments: whatever survives is whole.
    for i in 0..6 {
        let name = format!("r{i}");
        let mut child = w
            .cmd(&["run", "-d", "--name", &name, &w.image, "sleep", "1000"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        std::thread::sleep(Duration::from_millis(random_below(250)));
        let _ = child.kill();
        child.wait().unwrap();
        assert_consistent(&w);
    }
    w.remove_all();
    w.assert_clean();
}

/// The steps of `wharf rm -f` of a standalone container.
const REMOVE_STEPS: &[&str] = &[
    "container: deleted in shim",
    "container: bundle removed",
    "pod: removing",
    "pod: shim shut down",
    "pod: sandbox destroyed",
    // The row is gone, the lock file not yet: the mark of the removal finds it.
    "pod: row deleted",
];

#[test]
fn a_cli_killed_at_any_step_of_a_removal_leaves_it_finished_or_repeatable() {
    let w = World::new("crash-remove");
    for (i, step) in REMOVE_STEPS.iter().enumerate() {
        let name = format!("c{i}");
        w.ok(&["run", "-d", "--name", &name, &w.image, "sleep", "1000"]);
        w.crash_at(step, &["rm", "-f", &name]);
        // The next command finishes the pod's removal, or shows the container exited.
        let ps = w.ps();
        if let Some(c) = ps.get(&name) {
            assert_eq!(c["State"]["Status"], "exited", "{step}: {c:#}");
            w.ok(&["rm", &name]);
        }
        assert!(!w.ps().contains_key(&name));
        assert!(!w.pods().contains_key(&name), "{step}: pod {name} left");
    }
    w.assert_clean();
    // Removals killed at arbitrary moments: the container is gone, or still there (running
    // or exited) and removable.
    for i in 0..6 {
        let name = format!("r{i}");
        w.ok(&["run", "-d", "--name", &name, &w.image, "sleep", "1000"]);
        let mut child = w
            .cmd(&["rm", "-f", &name])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        std::thread::sleep(Duration::from_millis(random_below(150)));
        let _ = child.kill();
        child.wait().unwrap();
        if w.ps().contains_key(&name) {
            assert_consistent(&w);
            w.ok(&["rm", "-f", &name]);
        }
        assert!(!w.pods().contains_key(&name), "pod {name} left");
    }
    w.assert_clean();
}

#[test]
fn twenty_pods_survive_kills_of_a_shim_and_of_clis() {
    let w = World::new("crash-twenty");
    let names: Vec<String> = (0..20).map(|i| format!("p{i:02}")).collect();
    for n in &names {
        w.ok(&["run", "-d", "--name", n, &w.image, "sleep", "1000"]);
    }
    let ps = w.ps();
    let pod_of = |n: &str| ps[n]["PodId"].as_str().unwrap().to_string();
    let shims = w.shim_pids();
    assert_eq!(shims.len(), 20);

    // kill -9 of one shim: its container is reported exited, with the reason.
    let victim = shims[&pod_of("p00")];
    // SAFETY: kill(2) of the shim this test started.
    unsafe { libc::kill(victim, libc::SIGKILL) };
    assert!(wait_until(WAIT, || !alive(victim)));
    // Four commands at once find it: one repairs it, none fails or sees it half done.
    let seen: Vec<BTreeMap<String, Value>> = std::thread::scope(|s| {
        let all: Vec<_> = (0..4).map(|_| s.spawn(|| w.ps())).collect();
        all.into_iter().map(|h| h.join().unwrap()).collect()
    });
    for ps in &seen {
        assert_eq!(ps["p00"]["State"]["Status"], "exited");
        assert_eq!(reason(&ps["p00"]), "ShimDied");
    }
    let now = w.ps();
    let c = &now["p00"];
    assert_eq!(c["State"]["Status"], "exited", "{c:#}");
    assert_eq!(reason(c), "ShimDied");
    assert_eq!(exit_code(c), 137);
    assert!(w.ok(&["ps", "-a"]).contains("ShimDied"));
    // Its container was killed with it (nothing left in the pod's cgroup).
    let pod0 = pod_of("p00");
    for d in w.env.cgroup_dirs() {
        assert_eq!(procs_below(&d.join(&pod0)), Vec::<i32>::new());
    }
    // The other 19 are untouched.
    for n in &names[1..] {
        assert_eq!(now[n]["State"]["Status"], "running", "{n}");
        assert!(alive(shims[&pod_of(n)]), "{n}'s shim");
    }
    // Its sandbox outlives the shim: the container starts again there, under a new shim.
    w.ok(&["start", "p00"]);
    assert_eq!(w.status("p00").as_deref(), Some("running"));
    assert_eq!(w.ok(&["exec", "p00", "hostname"]).trim(), "p00");
    let new_shim = w.shim_pids()[&pod_of("p00")];
    assert_ne!(new_shim, victim);
    // Removing it leaves nothing of it.
    w.ok(&["rm", "-f", "p00"]);
    assert!(wait_until(WAIT, || !alive(new_shim)));
    assert!(!w.pods().contains_key("p00"));
    assert_eq!(w.leases().len(), 19);
    assert_eq!(w.host_links().len(), 19);
    assert!(!w.run.join("netns").join(&pod0).exists());

    // Several CLIs killed amid operations on the others.
    // A removal dies halfway through p01's pod: finished by the next command.
    w.crash_at("pod: shim shut down", &["rm", "-f", "p01", "p02"]);
    let now = w.ps();
    assert!(!now.contains_key("p01"));
    assert!(
        !w.pods().contains_key("p01"),
        "p01's pod removal was not finished"
    );
    assert_eq!(w.leases().len(), 18);
    assert_eq!(now["p02"]["State"]["Status"], "running");
    // A stop dies after asking: the shim still stops the container when the grace ends.
    let mut stop = w
        .cmd(&["stop", "-t", "1", "p03"])
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let p03 = pod_of("p03");
    let dir = w
        .run
        .join("pods")
        .join(&p03)
        .join("shim/containers")
        .join(now["p03"]["Id"].as_str().unwrap());
    std::thread::sleep(Duration::from_millis(300));
    stop.kill().unwrap();
    stop.wait().unwrap();
    assert!(
        wait_until(WAIT, || exit_recorded(&dir)),
        "p03 never stopped"
    );
    assert_eq!(w.status("p03").as_deref(), Some("exited"));
    // A `ps` killed at random moments changes nothing.
    for _ in 0..3 {
        let mut ps = w.cmd(&["ps", "-a"]).stdout(Stdio::null()).spawn().unwrap();
        std::thread::sleep(Duration::from_millis(random_below(100)));
        let _ = ps.kill();
        ps.wait().unwrap();
    }
    let now = w.ps();
    assert_eq!(now.len(), 18);
    for n in &names[4..] {
        assert_eq!(now[n]["State"]["Status"], "running", "{n}");
        assert!(alive(shims[&pod_of(n)]), "{n}'s shim");
    }
    w.remove_all();
    w.assert_clean();
}

#[test]
fn concurrent_commands_never_take_each_others_work_for_a_crash() {
    let w = World::new("crash-concurrent");
    std::thread::scope(|s| {
        let runs: Vec<_> = (0..3)
            .map(|t| {
                let w = &w;
                s.spawn(move || {
                    for i in 0..5 {
                        let out = w.run(&["run", "--rm", &w.image, "true"]);
                        assert!(
                            out.status.success(),
                            "run {t}/{i}: {}",
                            String::from_utf8_lossy(&out.stderr)
                        );
                    }
                })
            })
            .collect();
        let lister = s.spawn(|| {
            for _ in 0..15 {
                w.ok(&["ps", "-a"]);
            }
        });
        for r in runs {
            r.join().unwrap();
        }
        lister.join().unwrap();
    });
    w.assert_clean();
}

#[test]
fn after_a_simulated_reboot_pods_are_dead_and_remove_cleanly() {
    let w = World::new("crash-reboot");
    w.ok(&["run", "-d", "--name", "s1", &w.image, "sleep", "1000"]);
    w.ok(&["run", "-d", "--name", "s2", &w.image, "sleep", "1000"]);
    w.ok(&[
        "run",
        "-d",
        "--name",
        "done",
        &w.image,
        "sh",
        "-c",
        "echo bye; exit 4",
    ]);
    w.ok(&["create", "--name", "new", &w.image, "true"]);
    w.ok(&["pod", "create", "--name", "grp"]);
    w.ok(&[
        "create", "--pod", "grp", "--name", "member", &w.image, "true",
    ]);
    let pod = w.ps()["done"]["PodId"].as_str().unwrap().to_string();
    let dir = read_dir(&w.run.join("pods").join(&pod).join("shim/containers"))[0].clone();
    assert!(wait_until(WAIT, || exit_recorded(&dir)));
    w.reboot();
    assert_eq!(w.leases().len(), 5, "leases are on disk");

    let ps = w.ps();
    for n in ["s1", "s2"] {
        assert_eq!(ps[n]["State"]["Status"], "exited", "{n}");
        assert_eq!(reason(&ps[n]), "ShimDied", "{n}");
    }
    // An exit the shim recorded survives.
    assert_eq!(exit_code(&ps["done"]), 4);
    assert_eq!(ps["new"]["State"]["Status"], "created");
    for p in w.pods().values() {
        assert_eq!(p["State"], "dead");
    }
    // What the reboot left of the sandboxes is released at once.
    assert_eq!(w.leases(), Vec::<String>::new());
    assert_eq!(w.cgroups(), Vec::<String>::new());
    // Logs stay readable.
    assert_eq!(w.ok(&["logs", "done"]), "bye\n");
    assert_eq!(w.ok(&["wait", "done", "s1"]), "4\n255\n");
    // A container of its own dead pod starts again, as docker's after a reboot (its
    // sandbox made again); one in a pod made with `pod create` does not: that pod has
    // an owner, who makes it again.
    assert_eq!(w.ok(&["start", "-a", "new"]), "");
    assert_eq!(exit_code(&w.ps()["new"]), 0);
    let out = w.run(&["start", "member"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("its pod grp is dead"), "{err}");
    w.ok(&["rm", "s1", "done", "new", "member"]);
    w.ok(&["pod", "rm", "-f", "s2", "grp"]);
    w.assert_clean();
}

#[test]
fn a_shim_whose_spawner_died_before_it_was_ready_leaves_nothing() {
    use std::os::fd::AsRawFd;
    use std::os::unix::process::CommandExt;
    let env = Env::new("crash-spawner");
    // Whatever happens, no shim outlives the test.
    struct KillShims(String);
    impl Drop for KillShims {
        fn drop(&mut self) {
            for p in read_dir(Path::new("/proc")) {
                let cmdline = std::fs::read(p.join("cmdline")).unwrap_or_default();
                if String::from_utf8_lossy(&cmdline).contains(&self.0)
                    && let Some(pid) = p.file_name().and_then(|n| n.to_str()?.parse().ok())
                {
                    // SAFETY: kill(2) of the shim this test started.
                    unsafe { libc::kill(pid, libc::SIGKILL) };
                }
            }
        }
    }
    let _guard = KillShims(env.path().to_string_lossy().into_owned());
    let top = env.path().join("pods");
    let state = top.join("p1/shim");
    // The spawner is gone before the shim reports: the read end is closed at once.
    let (r, w) = rustix::pipe::pipe().unwrap();
    drop(r);
    let raw = w.as_raw_fd();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_wharf"));
    cmd.args(["shim", "--pod", "p1", "--state-dir"])
        .arg(&state)
        .arg("--runtime-root")
        .arg(env.path().join("runtime"))
        .args(["--ready-fd", "3"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    // SAFETY: dup2 between fork and exec.
    unsafe {
        cmd.pre_exec(move || {
            if libc::dup2(raw, 3) < 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    assert!(cmd.status().unwrap().success());
    drop(w);
    let needle = state.to_string_lossy().into_owned();
    let shims = || {
        read_dir(Path::new("/proc"))
            .into_iter()
            .filter(|p| {
                String::from_utf8_lossy(&std::fs::read(p.join("cmdline")).unwrap_or_default())
                    .contains(&needle)
            })
            .count()
    };
    assert!(wait_until(WAIT, || shims() == 0), "the shim keeps running");
    // What it created for itself is gone again.
    assert!(!top.exists(), "{:?}", read_dir(&top));
}

#[test]
fn leak_check_loop_runs_clean() {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../bench/leak_check.sh");
    let out = Command::new("bash")
        .arg(&script)
        .env("WHARF", env!("CARGO_BIN_EXE_wharf"))
        .env("IMAGE", format!("{}/fixtures/busybox:latest", registry()))
        .env("N", "20")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "leak_check.sh failed ({}): {stdout}{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("20 runs, 0 failures"), "{stdout}");
    assert!(stdout.contains("no leaks"), "{stdout}");
}

fn random_below(n: u64) -> u64 {
    let mut b = [0u8; 8];
    rustix::rand::getrandom(&mut b, rustix::rand::GetRandomFlags::empty()).unwrap();
    u64::from_le_bytes(b) % n
}

#[test]
fn after_a_reboot_restore_brings_back_always_and_unless_stopped_containers() {
    let w = World::new("crash-restore");
    w.ok(&[
        "run",
        "-d",
        "--name",
        "always",
        "--restart",
        "always",
        &w.image,
        "sh",
        "-c",
        "echo run; sleep 1000",
    ]);
    w.ok(&[
        "run",
        "-d",
        "--name",
        "unless",
        "--restart",
        "unless-stopped",
        &w.image,
        "sleep",
        "1000",
    ]);
    w.ok(&[
        "run",
        "-d",
        "--name",
        "stopped",
        "--restart",
        "unless-stopped",
        &w.image,
        "sleep",
        "1000",
    ]);
    w.ok(&["run", "-d", "--name", "plain", &w.image, "sleep", "1000"]);
    w.ok(&["stop", "-t", "0", "stopped"]);
    let id = w.ps()["always"]["Id"].as_str().unwrap().to_string();
    assert!(wait_until(WAIT, || w.ok(&["logs", "always"]) == "run\n"));
    w.reboot();
    let restored = w.restore();
    assert_eq!(restored, ["always", "unless"]);
    let ps = w.ps();
    for n in ["always", "unless"] {
        assert_eq!(ps[n]["State"]["Status"], "running", "{n}: {:#}", ps[n]);
    }
    assert_eq!(ps["stopped"]["State"]["Status"], "exited");
    assert_eq!(ps["plain"]["State"]["Status"], "exited");
    // The same container: its id, and its log with the run before the reboot.
    assert_eq!(ps["always"]["Id"], id.as_str());
    assert!(wait_until(WAIT, || w.ok(&["logs", "always"]) == "run\nrun\n"));
    assert_eq!(w.ok(&["exec", "always", "echo", "inside"]), "inside\n");
    // Once more does nothing.
    assert_eq!(w.ok(&["system", "restore"]), "");
    w.ok(&["rm", "-f", "always", "unless", "stopped", "plain"]);
    w.assert_clean();
}

/// The machine's shutdown (`wharf system shutdown`, the wharf-restore unit's stop): every
/// running container stops at once (its stop signal, SIGKILL after the time given, for a
/// PID 1 without a handler), the stopped ones stay as they were, and it is not the user's
/// stop: after the reboot an unless-stopped container comes back, as an always one does.
#[test]
fn a_shutdown_stops_every_container_at_once_and_restore_brings_back_their_policies() {
    let w = World::new("crash-shutdown");
    for (name, policy) in [
        ("always", "always"),
        ("unless", "unless-stopped"),
        ("plain", "no"),
    ] {
        w.ok(&[
            "run",
            "-d",
            "--name",
            name,
            "--restart",
            policy,
            &w.image,
            "sleep",
            "1000",
        ]);
    }
    w.ok(&[
        "run",
        "-d",
        "--name",
        "stopped",
        "--restart",
        "unless-stopped",
        &w.image,
        "sleep",
        "1000",
    ]);
    w.ok(&["stop", "-t", "0", "stopped"]);
    // sleep as PID 1 ignores SIGTERM: three containers, one grace period of 2 s.
    let started = std::time::Instant::now();
    let mut stopped: Vec<String> = w
        .ok(&["system", "shutdown", "--time", "2"])
        .lines()
        .map(String::from)
        .collect();
    stopped.sort();
    let took = started.elapsed();
    assert_eq!(stopped, ["always", "plain", "unless"]);
    assert!(
        took < Duration::from_secs(5),
        "the stops were not together: {took:?}"
    );
    let ps = w.ps();
    for n in ["always", "unless", "plain", "stopped"] {
        assert_eq!(ps[n]["State"]["Status"], "exited", "{n}: {:#}", ps[n]);
    }
    assert_eq!(ps["always"]["State"]["ExitCode"], 137);
    // Nothing left to stop.
    assert_eq!(w.ok(&["system", "shutdown"]), "");
    w.reboot();
    assert_eq!(w.restore(), ["always", "unless"]);
    let ps = w.ps();
    assert_eq!(ps["unless"]["State"]["Status"], "running");
    assert_eq!(ps["stopped"]["State"]["Status"], "exited");
    // A container without a policy starts again by hand, as docker's does after a reboot
    // (its pod's sandbox is made again), and what its unit (`generate systemd`) runs too.
    assert_eq!(w.ok(&["start", "plain"]), "plain\n");
    assert_eq!(w.ok(&["exec", "plain", "echo", "inside"]), "inside\n");
    assert_eq!(w.ps()["plain"]["State"]["Status"], "running");
    w.ok(&["rm", "-f", "always", "unless", "stopped", "plain"]);
    w.assert_clean();
}

/// A container on two user networks after a reboot: restore joins both again (eth1 too),
/// and its neighbour on the second network finds it by its alias there.
#[test]
fn after_a_reboot_restore_joins_every_network_of_a_container_again() {
    let w = World::new("crash-networks");
    w.ok(&["network", "create", "--subnet", "10.98.1.0/24", "first"]);
    w.ok(&["network", "create", "--subnet", "10.98.2.0/24", "second"]);
    let run = |name: &str, net: &str| {
        w.ok(&[
            "run",
            "-d",
            "--name",
            name,
            "--restart",
            "always",
            "--network",
            net,
            &w.image,
            "sleep",
            "1000",
        ]);
    };
    run("multi", "first");
    run("peer", "second");
    w.ok(&["network", "connect", "--alias", "joined", "second", "multi"]);
    let addrs = || {
        let out = w.ok(&["exec", "multi", "ip", "-o", "-4", "addr"]);
        let mut v: Vec<String> = out
            .lines()
            .filter(|l| !l.contains(" lo "))
            .map(|l| l.split_whitespace().nth(1).unwrap().to_string())
            .collect();
        v.sort();
        v
    };
    assert_eq!(addrs(), ["eth0", "eth1"]);
    w.reboot();
    assert_eq!(w.restore(), ["multi", "peer"]);
    assert_eq!(addrs(), ["eth0", "eth1"]);
    w.ok(&["exec", "peer", "ping", "-c1", "-W2", "joined"]);
    w.ok(&["exec", "multi", "ping", "-c1", "-W2", "peer"]);
    w.ok(&["rm", "-f", "multi", "peer"]);
    w.ok(&["network", "rm", "first", "second"]);
    w.assert_clean();
}

/// A played pod after a reboot: `system restore` makes its volumes again (a Secret's
/// tmpfs and files; a disk emptyDir keeps its files, as the kubelet keeps them) and hands
/// the pod to its shim as a plan again: the init container first, then the app, told its
/// new address when its old one went to another pod.
#[test]
fn after_a_reboot_restore_plays_a_played_pod_again() {
    let w = World::new("crash-restore-play");
    let manifest = w.env.path().join("pod.yaml");
    std::fs::write(
        &manifest,
        format!(
            r#"apiVersion: v1
kind: Secret
metadata: {{name: db}}
stringData: {{password: s3cret}}
---
apiVersion: v1
kind: Pod
metadata: {{name: p}}
spec:
  terminationGracePeriodSeconds: 1
  initContainers:
  - name: init
    image: {image}
    imagePullPolicy: IfNotPresent
    command: [sh, -c, "echo run >> /cache/init-runs"]
    volumeMounts: [{{name: cache, mountPath: /cache}}]
  containers:
  - name: app
    image: {image}
    imagePullPolicy: IfNotPresent
    command: [sh, -c, "echo app sees $(cat /secret/password) after $(wc -l < /cache/init-runs) init runs; echo $POD_IP $(ip -4 -o addr show eth0 | awk '{{print $4}}') > /cache/ip; sleep 1000"]
    env: [{{name: POD_IP, valueFrom: {{fieldRef: {{fieldPath: status.podIP}}}}}}]
    volumeMounts: [{{name: secret, mountPath: /secret}}, {{name: cache, mountPath: /cache}}]
  volumes:
  - {{name: cache, emptyDir: {{}}}}
  - {{name: secret, secret: {{secretName: db}}}}
"#,
            image = w.image
        ),
    )
    .unwrap();
    let m = manifest.to_str().unwrap();
    w.ok(&["play", m]);
    let first = "app sees s3cret after 1 init runs\n";
    assert!(
        wait_until(WAIT, || w.ok(&["logs", "p-app"]) == first),
        "{}",
        w.ok(&["logs", "p-app"])
    );
    // $POD_IP and the address of eth0, as the app wrote them in the emptyDir.
    let addresses = || -> Vec<String> {
        let out = w.run(&["exec", "p-app", "cat", "/cache/ip"]);
        String::from_utf8_lossy(&out.stdout)
            .split_whitespace()
            .map(|a| a.split('/').next().unwrap().to_string())
            .collect()
    };
    assert!(wait_until(WAIT, || addresses().len() == 2));
    let before = addresses();
    assert_eq!(before[0], before[1], "{before:?}");
    w.reboot();
    // Another pod takes the address first.
    w.ok(&["run", "-d", "--name", "squatter", &w.image, "sleep", "1000"]);
    let restored = w.restore();
    assert_eq!(restored, ["p-app", "p-init"]);
    let again = format!("{first}app sees s3cret after 2 init runs\n");
    assert!(
        wait_until(WAIT, || w.ok(&["logs", "p-app"]) == again),
        "{}{}",
        w.ok(&["logs", "p-app"]),
        w.ok(&["play", "--status", m])
    );
    assert!(wait_until(WAIT, || {
        let now = addresses();
        now.len() == 2 && now[0] != before[0]
    }));
    let after = addresses();
    assert_eq!(
        after[0], after[1],
        "the new address: {after:?} (was {before:?})"
    );
    let env = w.ok(&["inspect", "--format", "{{json .Config.Env}}", "p-app"]);
    assert!(env.contains(&format!("POD_IP={}", after[0])), "{env}");
    w.ok(&["rm", "-f", "squatter"]);
    w.ok(&["play", "--down", m]);
    w.assert_clean();
}

/// A played pod that cannot come back after a reboot (its hostPath went) is one error,
/// naming the pod and the cause, not one per container; its containers stay down.
#[test]
fn a_played_pod_that_cannot_be_restored_is_one_error() {
    let w = World::new("crash-restore-fail");
    let host = w.env.path().join("shared");
    std::fs::create_dir(&host).unwrap();
    let manifest = w.env.path().join("pod.yaml");
    std::fs::write(
        &manifest,
        format!(
            r#"apiVersion: v1
kind: Pod
metadata: {{name: hp}}
spec:
  terminationGracePeriodSeconds: 1
  initContainers:
  - {{name: init, image: {image}, imagePullPolicy: IfNotPresent, command: ["true"]}}
  containers:
  - name: app
    image: {image}
    imagePullPolicy: IfNotPresent
    command: [sleep, "1000"]
    volumeMounts: [{{name: shared, mountPath: /shared}}]
  volumes:
  - {{name: shared, hostPath: {{path: {host}, type: Directory}}}}
"#,
            image = w.image,
            host = host.display()
        ),
    )
    .unwrap();
    let m = manifest.to_str().unwrap();
    w.ok(&["play", "--network", "none", m]);
    w.reboot();
    std::fs::remove_dir(&host).unwrap();
    let out = w.run(&["system", "restore"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(
        stderr.starts_with("wharf: restoring pod hp: ") && stderr.contains(host.to_str().unwrap()),
        "{stderr}"
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout), "");
    let ps = w.ps();
    assert_ne!(
        ps["hp-app"]["State"]["Status"], "running",
        "{:#}",
        ps["hp-app"]
    );
    w.ok(&["play", "--down", m]);
    w.assert_clean();
}

#[test]
fn a_foreground_rm_container_whose_cli_died_is_removed_once_it_exits() {
    let w = World::new("crash-rm-cli");
    let mut cli = w
        .cmd(&[
            "run",
            "--rm",
            "--name",
            "fg",
            &w.image,
            "sh",
            "-c",
            "sleep 2; echo done",
        ])
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    assert!(wait_until(WAIT, || w.status("fg").as_deref() == Some("running")));
    cli.kill().unwrap();
    cli.wait().unwrap();
    // Still running: left alone.
    assert_eq!(w.status("fg").as_deref(), Some("running"));
    // Once it has exited, the next command's reconcile removes it (and its pod).
    assert!(wait_until(WAIT, || {
        w.ok(&["ps", "-a", "-q"]).is_empty()
    }));
    assert!(w.pods().is_empty());
    w.assert_clean();
}

/// A container with its own user namespace after a reboot: restore makes its pod's user
/// namespace again with the same host ids (recorded with the pod), and a new pod made
/// afterwards still gets a range of its own.
#[test]
fn after_a_reboot_restore_gives_a_user_namespaced_pod_its_range_again() {
    let w = World::new("crash-userns");
    let uid_map = |name: &str| w.ok(&["exec", name, "cat", "/proc/self/uid_map"]);
    let run = |name: &str, restart: &str| {
        w.ok(&[
            "run",
            "-d",
            "--name",
            name,
            "--restart",
            restart,
            "--network",
            "none",
            "--userns=auto",
            &w.image,
            "sleep",
            "1000",
        ])
    };
    run("u", "always");
    let before = uid_map("u");
    w.reboot();
    assert_eq!(w.restore(), ["u"]);
    assert_eq!(uid_map("u"), before);
    run("v", "no");
    let host = |map: &str| {
        map.split_whitespace()
            .nth(1)
            .unwrap()
            .parse::<u64>()
            .unwrap()
    };
    assert!(
        host(&uid_map("v")).abs_diff(host(&before)) >= 65536,
        "{before} {}",
        uid_map("v")
    );
    w.ok(&["rm", "-f", "u", "v"]);
    w.assert_clean();
}

/// A CLI killed after locking a new pod and before writing its row leaves a lock file that
/// no row names; the next command's reconcile (not only a full one) removes it.
#[test]
fn a_cli_killed_between_a_new_pods_lock_and_its_row_leaves_no_lock_behind() {
    let w = World::new("crash-lock");
    w.crash_at(
        "pod locked, no row yet",
        &["run", "-d", "--name", "x", &w.image, "sleep", "1000"],
    );
    assert_eq!(read_dir(&w.run.join("locks")).len(), 1, "the lock is left");
    assert!(w.ps().is_empty());
    assert_eq!(read_dir(&w.run.join("locks")), Vec::<PathBuf>::new());
    assert_eq!(read_dir(&w.run.join("locks.new")), Vec::<PathBuf>::new());
    w.assert_clean();
}
