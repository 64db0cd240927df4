//! Pods through the CLI: namespace sharing as `wharf inspect --tree` reports it and as the
//! kernel has it, published ports reachable from the (test-made) host namespace, and
//! `wharf play` of the web example with its init container, shared emptyDir and host port.

mod engine_support;

use engine_support::{Wharf, busybox, ns_inode};
use serde_json::Value;

/// The process of the tree (`wharf inspect --tree --format json`) whose command is `cmd`.
fn find<'a>(tree: &'a Value, cmd: &str) -> Option<&'a Value> {
    if tree["cmd"] == cmd {
        return Some(tree);
    }
    tree["children"]
        .as_array()?
        .iter()
        .find_map(|c| find(c, cmd))
}

fn shared(p: &Value) -> Vec<String> {
    p["shared_with_pod"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s.as_str().unwrap().to_string())
        .collect()
}

fn ino(p: &Value, ns: &str) -> u64 {
    p["ns"][ns]
        .as_u64()
        .unwrap_or_else(|| panic!("no {ns} in {p}"))
}

#[test]
fn pod_containers_share_net_ipc_uts_only() {
    let w = Wharf::new("pods-ns");
    let pod_id = w.ok(&["pod", "create", "--name", "p"]).trim().to_string();
    for (name, secs) in [("a", "1001"), ("b", "1002")] {
        w.ok(&[
            "run",
            "-d",
            "--name",
            name,
            "--pod",
            "p",
            &busybox(),
            "sleep",
            secs,
        ]);
    }
    let tree: Value =
        serde_json::from_str(&w.ok(&["inspect", "--tree", "--format", "json", "p"])).unwrap();
    let tree = &tree["tree"];
    let a = find(tree, "sleep 1001").unwrap_or_else(|| panic!("no a in {tree:#}"));
    let b = find(tree, "sleep 1002").unwrap_or_else(|| panic!("no b in {tree:#}"));
    for p in [a, b] {
        assert_eq!(shared(p), ["net", "ipc", "uts"], "{p:#}");
        // The pod's cgroup parents the container's.
        let cg = p["cgroup"].as_str().unwrap();
        assert!(
            cg.starts_with(&format!("{}/{pod_id}/", w.env.cgroup_parent)),
            "{cg}"
        );
    }
    for ns in ["net", "ipc", "uts"] {
        assert_eq!(ino(a, ns), ino(b, ns), "{ns}");
    }
    for ns in ["pid", "mnt", "cgroup"] {
        assert_ne!(ino(a, ns), ino(b, ns), "{ns}");
    }
    // What the kernel says, independently of the tree.
    let (pa, pb) = (w.pids("a")[0], w.pids("b")[0]);
    assert_eq!(a["pid"], pa);
    assert_eq!(b["pid"], pb);
    let me = std::process::id() as i32;
    for ns in ["net", "ipc", "uts"] {
        assert_eq!(ns_inode(pa, ns), ns_inode(pb, ns), "{ns}");
        assert_ne!(ns_inode(pa, ns), ns_inode(me, ns), "{ns} is the host's");
    }
    for ns in ["pid", "mnt", "cgroup"] {
        assert_ne!(ns_inode(pa, ns), ns_inode(pb, ns), "{ns}");
        assert_ne!(ns_inode(pa, ns), ns_inode(me, ns), "{ns} is the host's");
    }
    // The text tree marks the pod's namespaces, and only those.
    let text = w.ok(&["inspect", "--tree", "p"]);
    assert!(
        text.starts_with(&format!("pod p ({})", &pod_id[..12])),
        "{text}"
    );
    for (p, pid) in [(a, pa), (b, pb)] {
        let line = format!(
            "ns: net:{} (pod) ipc:{} (pod) uts:{} (pod) pid:{} mnt:{} cgroup:{}",
            ino(p, "net"),
            ino(p, "ipc"),
            ino(p, "uts"),
            ino(p, "pid"),
            ino(p, "mnt"),
            ino(p, "cgroup")
        );
        assert!(text.contains(&line), "{pid}: no {line:?} in\n{text}");
    }
    // Shared UTS and network, seen from inside: one hostname (the pod's name), one address,
    // and a server in one container is reachable from the other over localhost.
    assert_eq!(w.ok(&["exec", "a", "hostname"]), "p\n");
    assert_eq!(w.ok(&["exec", "b", "hostname"]), "p\n");
    w.ok(&[
        "exec",
        "-d",
        "a",
        "sh",
        "-c",
        "mkdir -p /w && echo from-a > /w/index.html && httpd -p 8081 -h /w",
    ]);
    let mut got = String::new();
    engine_support::wait_until(std::time::Duration::from_secs(30), || {
        got = w
            .run(&[
                "exec",
                "b",
                "wget",
                "-q",
                "-O",
                "-",
                "http://127.0.0.1:8081/",
            ])
            .stdout;
        got == "from-a\n"
    });
    assert_eq!(got, "from-a\n");
    // Separate PID namespaces: b does not see a's sleep.
    let ps = w.ok(&["exec", "b", "ps"]);
    assert!(
        !ps.contains("sleep 1001") && ps.contains("sleep 1002"),
        "{ps}"
    );

    assert_eq!(w.ok(&["pod", "rm", "-f", "p"]), "p\n");
    w.assert_clean();
}

/// A file of cgroup `path` (absolute, cgroupsPath form): in the v1 hierarchy of
/// `controller` when there is one, else in the unified one.
fn cgroup_file(path: &str, controller: &str, v1: &str, v2: &str) -> String {
    let rel = path.trim_start_matches('/');
    let v1_path = format!("/sys/fs/cgroup/{controller}/{rel}/{v1}");
    let file = if std::path::Path::new(&format!("/sys/fs/cgroup/{controller}")).is_dir() {
        v1_path
    } else {
        format!("/sys/fs/cgroup/{rel}/{v2}")
    };
    std::fs::read_to_string(&file)
        .unwrap_or_else(|e| panic!("read {file}: {e}"))
        .trim()
        .to_string()
}

#[test]
fn a_pods_limits_bound_all_its_containers_together() {
    let w = Wharf::new("pods-limits");
    let pod = w
        .ok(&[
            "pod",
            "create",
            "--name",
            "lim",
            "--memory",
            "96m",
            "--cpus",
            "0.5",
            "--pids-limit",
            "40",
        ])
        .trim()
        .to_string();
    w.ok(&[
        "run",
        "-d",
        "--name",
        "in-lim",
        "--pod",
        "lim",
        &busybox(),
        "sleep",
        "1000",
    ]);
    let cg = format!("{}/{pod}", w.env.cgroup_parent);
    assert_eq!(
        cgroup_file(&cg, "memory", "memory.limit_in_bytes", "memory.max"),
        (96u64 << 20).to_string()
    );
    assert_eq!(cgroup_file(&cg, "pids", "pids.max", "pids.max"), "40");
    let quota = cgroup_file(&cg, "cpu", "cpu.cfs_quota_us", "cpu.max");
    assert!(quota == "50000" || quota == "50000 100000", "{quota}");
    // The container's cgroup is inside the pod's.
    let pid = w.pids("in-lim")[0];
    let own = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).unwrap();
    assert!(own.contains(&format!("{cg}/")), "{own}");
    // Changed while it runs: what is named changes, the rest stays.
    w.ok(&["pod", "update", "--memory", "128m", "lim"]);
    assert_eq!(
        cgroup_file(&cg, "memory", "memory.limit_in_bytes", "memory.max"),
        (128u64 << 20).to_string()
    );
    assert_eq!(cgroup_file(&cg, "pids", "pids.max", "pids.max"), "40");
    let spec = w.ok(&[
        "pod",
        "inspect",
        "--format",
        "{{json .Spec.Resources}}",
        "lim",
    ]);
    assert!(spec.contains(&(128u64 << 20).to_string()), "{spec}");
    let err = w.fails(1, &["pod", "update", "lim"]);
    assert!(err.contains("no limit given"), "{err}");
    let err = w.fails(1, &["pod", "update", "--memory", "64m", "ghost"]);
    assert!(err.contains("no such pod: ghost"), "{err}");
    let err = w.fails(1, &["pod", "create", "--cpus=-1"]);
    assert!(err.contains("invalid --cpus -1"), "{err}");
    w.ok(&["pod", "rm", "-f", "lim"]);
    w.assert_clean();
}

/// Once idle, a pod's shim moves into its pod's cgroup (as CRI-O puts conmon in the pod's):
/// on the unified hierarchy into a leaf of it (`wharf-shim`), on v1 hierarchies into the
/// pod's cgroup itself, with no directory made there; all of it goes with the pod. (That a
/// shim never makes its pod's cgroup again, when the pod goes before the shim is idle, is
/// `Cgroup::create_leaf`'s unit test and the shim's existence check.)
#[test]
fn an_idle_shim_joins_its_pods_cgroup() {
    let w = Wharf::new("pods-shim-cg");
    let pod = w.ok(&["pod", "create", "--name", "sc"]).trim().to_string();
    w.ok(&["run", "-d", "--pod", "sc", &busybox(), "sleep", "1000"]);
    let shim = w.shim_pid(&pod);
    let pod_cg = format!("{}/{pod}", w.env.cgroup_parent);
    let leaf = format!("{pod_cg}/wharf-shim");
    let in_cgroup = |hierarchy: &str, path: &str| {
        std::fs::read_to_string(format!("/proc/{shim}/cgroup"))
            .unwrap()
            .lines()
            .any(|l| l.split(':').nth(1) == Some(hierarchy) && l.split(':').nth(2) == Some(path))
    };
    let v1_memory = std::path::Path::new("/sys/fs/cgroup/memory").is_dir();
    let joined = || in_cgroup("", &leaf) && (!v1_memory || in_cgroup("memory", &pod_cg));
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while !joined() && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let own = std::fs::read_to_string(format!("/proc/{shim}/cgroup")).unwrap();
    assert!(
        in_cgroup("", &leaf),
        "not in {leaf} on the unified hierarchy: {own}"
    );
    if v1_memory {
        assert!(
            in_cgroup("memory", &pod_cg),
            "not in {pod_cg} for memory: {own}"
        );
        assert!(
            !std::path::Path::new(&format!("/sys/fs/cgroup/memory{leaf}")).exists(),
            "a leaf was made in the memory hierarchy"
        );
    }
    w.ok(&["pod", "rm", "-f", "sc"]);
    w.assert_clean();
}

/// A standalone container's pod takes docker's layout: the container's cgroup is the pod's
/// (one cgroup per container, each of which the kernel walks every superblock to remove),
/// and its shim lives beside it, in the cgroup parent on v1 hierarchies and in a leaf of it
/// shared by such shims on the unified one: not frozen with the container, not killed with
/// it. A container that joins the pod gets a cgroup beside it. The shared leaf goes with the
/// last such pod, and a shim killed out of turn is no leftover either.
#[test]
fn a_standalone_container_has_the_pods_cgroup_and_its_shim_lives_beside_it() {
    let w = Wharf::new("pods-flat-cg");
    let parent = w.env.cgroup_parent.clone();
    w.ok(&["run", "-d", "--name", "solo", &busybox(), "sleep", "1000"]);
    let pod = w.inspect("solo")["PodId"].as_str().unwrap().to_string();
    let ctr = w.inspect("solo")["Id"].as_str().unwrap().to_string();
    let pid = w.pids("solo")[0];
    let cgroup_of = |pid: i32, hierarchy: &str| {
        std::fs::read_to_string(format!("/proc/{pid}/cgroup"))
            .unwrap()
            .lines()
            .find(|l| l.split(':').nth(1) == Some(hierarchy))
            .and_then(|l| l.split(':').nth(2))
            .map(str::to_string)
            .unwrap_or_default()
    };
    let pod_cg = format!("{parent}/{pod}");
    let v1_memory = std::path::Path::new("/sys/fs/cgroup/memory").is_dir();
    let assert_in = |pid: i32, unified: &str, memory: &str, what: &str| {
        assert_eq!(cgroup_of(pid, ""), unified, "{what}'s unified cgroup");
        if v1_memory {
            assert_eq!(cgroup_of(pid, "memory"), memory, "{what}'s memory cgroup");
        }
    };
    assert_in(pid, &pod_cg, &pod_cg, "the container");
    for d in w.env.cgroup_dirs() {
        assert!(
            !d.join(&pod).join(&ctr).exists(),
            "a cgroup below the pod's in {}",
            d.display()
        );
    }
    let shim = w.shim_pid(&pod);
    let leaf = format!("{parent}/wharf-shim");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while cgroup_of(shim, "") != leaf && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    assert_in(shim, &leaf, &parent, "the shim");
    // Frozen, the container leaves its shim answering; thawed, it runs commands again.
    w.ok(&["pause", "solo"]);
    assert_eq!(w.inspect("solo")["State"]["Status"], "paused");
    w.ok(&["unpause", "solo"]);
    assert_eq!(w.ok(&["exec", "solo", "echo", "thawed"]).trim(), "thawed");
    // A container that joins the pod: its cgroup is beside the pod's, frozen alone.
    w.ok(&[
        "run",
        "-d",
        "--name",
        "side",
        "--network",
        "container:solo",
        &busybox(),
        "sleep",
        "1000",
    ]);
    let side = w.inspect("side")["Id"].as_str().unwrap().to_string();
    assert_eq!(w.inspect("side")["PodId"].as_str().unwrap(), pod);
    assert_eq!(cgroup_of(w.pids("side")[0], ""), format!("{pod_cg}-{side}"));
    w.ok(&["pause", "solo"]);
    assert_eq!(w.inspect("side")["State"]["Status"], "running");
    w.ok(&["unpause", "solo"]);
    w.ok(&["rm", "-f", "side", "solo"]);
    w.assert_clean();
    // A shim killed while its container runs: the removal finds nothing left behind.
    w.ok(&["run", "-d", "--name", "orphan", &busybox(), "sleep", "1000"]);
    let pod = w.inspect("orphan")["PodId"].as_str().unwrap().to_string();
    let shim = w.shim_pid(&pod);
    rustix::process::kill_process(
        rustix::process::Pid::from_raw(shim).unwrap(),
        rustix::process::Signal::KILL,
    )
    .unwrap();
    w.ok(&["rm", "-f", "orphan"]);
    w.assert_clean();
}

#[test]
fn pod_sharing_its_pid_namespace() {
    let w = Wharf::new("pods-pid");
    let pod_id = w
        .ok(&["pod", "create", "--name", "q", "--share-pid"])
        .trim()
        .to_string();
    for (name, secs) in [("c", "1001"), ("d", "1002")] {
        w.ok(&[
            "run",
            "-d",
            "--name",
            name,
            "--pod",
            "q",
            &busybox(),
            "sleep",
            secs,
        ]);
    }
    let tree: Value =
        serde_json::from_str(&w.ok(&["inspect", "--tree", "--format", "json", "q"])).unwrap();
    let pause = tree["sandbox"]["pause_pid"]
        .as_i64()
        .unwrap_or_else(|| panic!("no pause process: {tree:#}"));
    let tree = &tree["tree"];
    let c = find(tree, "sleep 1001").unwrap_or_else(|| panic!("no c in {tree:#}"));
    let d = find(tree, "sleep 1002").unwrap_or_else(|| panic!("no d in {tree:#}"));
    for p in [c, d] {
        assert_eq!(shared(p), ["net", "ipc", "uts", "pid"], "{p:#}");
    }
    assert_eq!(ino(c, "pid"), ino(d, "pid"));
    assert_eq!(ino(c, "pid"), ns_inode(pause as i32, "pid"));
    for ns in ["mnt", "cgroup"] {
        assert_ne!(ino(c, ns), ino(d, ns), "{ns}");
    }
    let text = w.ok(&["inspect", "--tree", "q"]);
    assert!(
        text.contains(&format!("/ns/pid (shared, init pid {pause})")),
        "{text}"
    );
    assert!(
        text.contains(&format!("pid:{} (pod) mnt:", ino(c, "pid"))),
        "{text}"
    );
    // Each sees the other's processes, and PID 1 is the built-in init, not a container.
    let ps = w.ok(&["exec", "d", "ps", "-o", "pid,args"]);
    assert!(
        ps.contains("sleep 1001") && ps.contains("sleep 1002"),
        "{ps}"
    );
    let init = ps
        .lines()
        .find(|l| l.split_whitespace().next() == Some("1"))
        .unwrap_or_else(|| panic!("no PID 1 in {ps}"));
    assert!(!init.contains("sleep"), "{init}");
    // It shows its name, not the shim's command line with host paths.
    assert_eq!(
        init.split_whitespace().nth(1),
        Some("wharf-pause"),
        "{init}"
    );
    assert!(!ps.contains(w.run_dir().to_str().unwrap()), "{ps}");
    // A zombie in the pod is reaped by that init: an orphan exits after its parent did.
    w.ok(&["exec", "c", "sh", "-c", "(sleep 0.2 &) ; exit 0"]);
    let zombies = || {
        w.ok(&["exec", "d", "ps", "-o", "stat,args"])
            .lines()
            .filter(|l| l.trim_start().starts_with('Z'))
            .count()
    };
    assert!(
        engine_support::wait_until(std::time::Duration::from_secs(30), || zombies() == 0),
        "zombies left in the pod"
    );

    assert_eq!(w.ok(&["pod", "rm", "-f", &pod_id]), format!("{pod_id}\n"));
    w.assert_clean();
}

#[test]
fn published_port_reachable_from_the_host_and_removed_with_the_container() {
    let w = Wharf::new("pods-ports");
    w.ok(&[
        "run",
        "-d",
        "--name",
        "h",
        "-p",
        "18080:8080",
        &busybox(),
        "sh",
        "-c",
        "mkdir /w && echo hello-port > /w/index.html && exec httpd -f -p 8080 -h /w",
    ]);
    let c = w.inspect("h");
    // port lists the mapping, docker's way.
    assert_eq!(w.ok(&["port", "h"]), "8080/tcp -> 0.0.0.0:18080\n");
    assert_eq!(w.ok(&["port", "h", "8080"]), "0.0.0.0:18080\n");
    let err = w.fails(1, &["port", "h", "81/udp"]);
    assert!(
        err.contains("no public port 81/udp published for h"),
        "{err}"
    );
    let ip = c["NetworkSettings"]["IPs"][0].as_str().unwrap().to_string();
    let rules = w.host_nft();
    assert!(
        rules.contains("18080") && rules.contains(&ip),
        "no mapping for 18080 -> {ip} in\n{rules}"
    );
    // The pod's address, the host's bridge address and the host's loopback all answer.
    let gateway = w.host_addr("wharf0");
    for addr in [
        format!("{ip}:8080"),
        format!("{gateway}:18080"),
        "127.0.0.1:18080".to_string(),
    ] {
        let resp = w.http_get(&addr);
        assert!(
            resp.starts_with("HTTP/1.") && resp.contains(" 200 "),
            "{addr}: {resp}"
        );
        assert!(resp.ends_with("hello-port\n"), "{addr}: {resp}");
    }
    // The host port is taken: a second mapping of it is refused and leaves nothing.
    let err = w.fails(
        125,
        &["run", "-d", "-p", "18080:80", &busybox(), "sleep", "100"],
    );
    assert!(err.contains("18080"), "{err}");
    assert_eq!(w.ok(&["ps", "-a", "-q"]).lines().count(), 1);
    let veths = w.host_links().len();

    w.ok(&["rm", "-f", "h"]);
    let rules = w.host_nft();
    assert!(
        !rules.contains("18080") && !rules.contains(&ip),
        "mapping left after rm:\n{rules}"
    );
    assert_eq!(w.host_links().len(), veths - 1, "the pod's veth is gone");
    w.assert_clean();
}

#[test]
fn play_web_example_init_container_shared_volume_host_port_and_down() {
    let w = Wharf::new("pods-play");
    let example =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/pod-web.yaml");
    let text = std::fs::read_to_string(&example).unwrap();
    assert!(text.contains("image: busybox:latest"), "{text}");
    let manifest = w.path("pod-web.yaml");
    std::fs::write(&manifest, text.replace("busybox:latest", &busybox())).unwrap();
    let manifest = manifest.to_str().unwrap();

    let out = w.run(&["play", manifest]);
    assert_eq!(out.code, 0, "{out:?}");
    assert!(!out.stderr.contains("warning"), "{out:?}");
    let pod = w.ok(&["pod", "inspect", "web"]);
    let pod: Value = serde_json::from_str(&pod).unwrap();
    let pod = &pod[0];
    assert!(
        out.stdout
            .starts_with(&format!("Pod:\n{}\n", pod["Id"].as_str().unwrap()))
    );
    let names: Vec<&str> = pod["Containers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["Name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["web-content", "web-httpd"], "{pod:#}");

    // The page the init container wrote into the shared emptyDir is served by the app
    // container, through the host port, from the host namespace.
    let resp = w.http_get("127.0.0.1:8080");
    assert!(resp.ends_with("hello from web\n"), "{resp}");
    let gateway = w.host_addr("wharf0");
    assert!(
        w.http_get(&format!("{gateway}:8080"))
            .ends_with("hello from web\n")
    );
    let init = w.inspect("web-content");
    assert_eq!(init["State"]["Status"], "exited", "{init:#}");
    assert_eq!(init["State"]["ExitCode"], 0, "{init:#}");
    assert_eq!(init["State"]["Reason"], "Completed", "{init:#}");
    let app = w.inspect("web-httpd");
    assert_eq!(app["State"]["Status"], "running", "{app:#}");
    // The init container finished before the app container started.
    let time = |v: &Value| wharf_sys::time::parse_rfc3339(v.as_str().unwrap()).unwrap();
    let finished = time(&init["State"]["FinishedAt"]);
    let started = time(&app["State"]["StartedAt"]);
    assert!(
        finished <= started,
        "init finished {}, app started {}",
        init["State"]["FinishedAt"],
        app["State"]["StartedAt"]
    );
    // The volume is the app's too, read-only as the manifest asks.
    assert_eq!(
        w.ok(&["exec", "web-httpd", "cat", "/www/index.html"]),
        "hello from web\n"
    );
    let out = w.run(&["exec", "web-httpd", "touch", "/www/x"]);
    assert!(out.code != 0 && out.stderr.contains("Read-only"), "{out:?}");
    // The pod is Burstable (one container limits cpu and memory, the other nothing): its
    // app gets kubelet's oom_score_adj for that class, between Guaranteed and BestEffort.
    let adj: i32 = w
        .ok(&["exec", "web-httpd", "cat", "/proc/1/oom_score_adj"])
        .trim()
        .parse()
        .unwrap();
    assert!((3..=999).contains(&adj), "oom_score_adj {adj}");
    // Both containers' starts are events, besides the pod's.
    let events = w.ok(&["events", "--format", "json"]);
    for name in ["web-content", "web-httpd", "web"] {
        assert!(
            events.lines().any(|l| {
                let e: Value = serde_json::from_str(l).unwrap();
                e["Action"] == "start" && e["Actor"]["Attributes"]["name"] == name
            }),
            "no started event for {name}: {events}"
        );
    }
    // Playing it again is refused while it runs.
    let err = w.fails(1, &["play", manifest]);
    assert!(
        err.contains("web") && err.contains("already exists"),
        "{err}"
    );

    let out = w.run(&["play", "--down", manifest]);
    assert_eq!(out.code, 0, "{out:?}");
    assert_eq!(out.stdout.trim(), pod["Id"].as_str().unwrap());
    assert!(!w.host_nft().contains("8080"));
    w.assert_clean();
    // Down again: nothing to do, said so.
    let out = w.run(&["play", "--down", manifest]);
    assert!(out.stderr.contains("pod web does not exist"), "{out:?}");
}

/// `play --pull never|missing|always` overrides the manifest's imagePullPolicy for the
/// whole play (offline use of `:latest` images), and each warning is printed once.
#[test]
fn play_pull_override_and_warnings_once() {
    let w = Wharf::new("pods-play-pull");
    let manifest = w.path("warny.yaml");
    std::fs::write(
        &manifest,
        format!(
            "apiVersion: v1\nkind: Pod\nmetadata:\n  name: warny\nspec:\n  terminationGracePeriodSeconds: 1\n  containers:\n  - name: a\n    image: {}\n    command: [sleep, \"100\"]\n    livenessProbe:\n      exec: {{command: [\"true\"]}}\n      periodSecond: 10\n",
            busybox()
        ),
    )
    .unwrap();
    let manifest = manifest.to_str().unwrap();
    // `:latest` means imagePullPolicy Always; --pull never plays without the registry.
    let err = w.fails(
        1,
        &["play", "--pull", "never", "--network", "none", manifest],
    );
    assert!(
        err.contains("--pull=never") && err.contains("fixtures/busybox"),
        "{err}"
    );
    assert_eq!(err.matches("livenessProbe").count(), 1, "{err}");
    w.pull_busybox();
    let out = w.run(&["play", "--pull", "never", "--network", "none", manifest]);
    assert_eq!(out.code, 0, "{out:?}");
    assert_eq!(out.stderr.matches("livenessProbe").count(), 1, "{out:?}");
    let err = w.fails(1, &["play", "--pull", "sometimes", manifest]);
    assert!(err.contains("invalid --pull \"sometimes\""), "{err}");
    w.ok(&["play", "--down", manifest]);
    w.assert_clean();
}

/// A liveness probe (exec) that fails kills the container, and the pod's restart policy
/// brings it back with its back-off, the restart counted, as on a kubelet; an httpGet
/// probe that passes leaves its container alone.
#[test]
fn a_failing_liveness_probe_restarts_the_container() {
    let w = Wharf::new("pods-liveness");
    w.pull_busybox();
    let manifest = w.path("live.yaml");
    std::fs::write(
        &manifest,
        format!(
            "apiVersion: v1\nkind: Pod\nmetadata:\n  name: live\nspec:\n  terminationGracePeriodSeconds: 1\n  containers:\n  - name: app\n    image: {}\n    imagePullPolicy: IfNotPresent\n    command: [sh, -c, \"echo start; touch /tmp/ok; sleep 2; rm /tmp/ok; sleep 1000\"]\n    livenessProbe:\n      exec:\n        command: [cat, /tmp/ok]\n      initialDelaySeconds: 1\n      periodSeconds: 1\n      failureThreshold: 2\n  - name: web\n    image: {}\n    imagePullPolicy: IfNotPresent\n    command: [sh, -c, \"mkdir /www; echo ok > /www/index.html; httpd -f -p 8080 -h /www\"]\n    livenessProbe:\n      httpGet:\n        path: /\n        port: 8080\n      periodSeconds: 1\n",
            busybox(),
            busybox()
        ),
    )
    .unwrap();
    let manifest = manifest.to_str().unwrap();
    let out = w.run(&["play", "--network", "none", manifest]);
    assert_eq!(out.code, 0, "{out:?}");
    assert!(!out.stderr.contains("livenessProbe"), "{out:?}");
    let restarts = || w.inspect("live-app")["RestartCount"].as_i64().unwrap_or(0);
    assert!(
        engine_support::wait_until(std::time::Duration::from_secs(40), || restarts() >= 1),
        "{:#}",
        w.inspect("live-app")
    );
    assert!(w.wait_for_log("live-app", "start\nstart").contains("start"));
    // The other container's httpGet probe (busybox httpd serves /) passes: left alone.
    assert_eq!(w.inspect("live-web")["RestartCount"], 0);
    // The restart counts in kubectl's columns too.
    let table = w.ok(&["play", "--status", manifest]);
    let row: Vec<&str> = table
        .lines()
        .nth(1)
        .unwrap_or_default()
        .split_whitespace()
        .collect();
    assert_eq!(row[0], "live", "{table}");
    assert!(row[3].parse::<u32>().unwrap() >= 1, "RESTARTS: {table}");
    assert!(table.contains("live/app: "), "{table}");
    assert!(table.contains("restarts "), "{table}");
    w.ok(&["play", "--down", manifest]);
    w.assert_clean();
}

/// `play --configmap FILE`: ConfigMaps and Secrets from files of their own, for the pods
/// of the manifest (podman's flag); other kinds there are refused, a second definition
/// names the object.
#[test]
fn play_takes_configmaps_and_secrets_from_other_files() {
    let w = Wharf::new("pods-configmap");
    w.pull_busybox();
    let pod = w.path("pod.yaml");
    std::fs::write(
        &pod,
        format!(
            "apiVersion: v1\nkind: Pod\nmetadata:\n  name: cm\nspec:\n  restartPolicy: Never\n  containers:\n  - name: c\n    image: {}\n    imagePullPolicy: IfNotPresent\n    command: [sh, -c, \"echo $GREETING; cat /s/token\"]\n    env:\n    - name: GREETING\n      valueFrom:\n        configMapKeyRef: {{name: cfg, key: greeting}}\n    volumeMounts:\n    - {{name: s, mountPath: /s}}\n  volumes:\n  - name: s\n    secret: {{secretName: sec}}\n",
            busybox()
        ),
    )
    .unwrap();
    let objects = w.path("objects.yaml");
    std::fs::write(
        &objects,
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: cfg}\ndata: {greeting: hello}\n---\napiVersion: v1\nkind: Secret\nmetadata: {name: sec}\nstringData: {token: s3cret}\n",
    )
    .unwrap();
    let (pod, objects) = (pod.to_str().unwrap(), objects.to_str().unwrap());
    let err = w.fails(1, &["play", "--network", "none", pod]);
    assert!(
        err.contains("is not in the manifest (add it, give it with --configmap FILE"),
        "{err}"
    );
    w.ok(&["play", "--network", "none", "--configmap", objects, pod]);
    // The secret file has no newline, and logs give back what was written (docker's too).
    assert_eq!(w.wait_for_log("cm-c", "s3cret"), "hello\ns3cret");
    w.ok(&["play", "--down", pod]);
    // Only ConfigMaps and Secrets; each defined once.
    let err = w.fails(1, &["play", "--configmap", pod, pod]);
    assert!(err.contains("ConfigMaps and Secrets only"), "{err}");
    let err = w.fails(
        1,
        &["play", "--configmap", objects, "--configmap", objects, pod],
    );
    assert!(err.contains("twice") && err.contains("cfg"), "{err}");
    w.assert_clean();
}
