//! cgroup resources, `update` and `events` through `wharf runtime`, with real containers on
//! this host (hybrid: v1 controllers, hugetlb on the cgroup2 mount).

mod common;

use common::*;
use serde_json::{Value, json};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError, channel};
use std::time::Duration;

/// A bundle whose config gets `resources` (and is otherwise the test default).
fn bundle_with(env: &Env, name: &str, args: &[&str], resources: Value) -> Bundle {
    let mut b = env.bundle(name, BASE, args);
    b.config["linux"]["resources"] = resources;
    b.config["root"]["readonly"] = json!(false);
    b.save();
    b
}

fn run_detached(env: &Env, b: &Bundle, id: &str) {
    ok(env, &["run", "-d", "--bundle", b.dir.to_str().unwrap(), id]);
}

/// The container's cgroup directory in hierarchy `key` ("memory", "" for cgroup2), from
/// its state.json: what the runtime really created.
fn cg_dir(env: &Env, id: &str, key: &str) -> Option<PathBuf> {
    let text = std::fs::read_to_string(env.root.join(id).join("state.json")).unwrap();
    let st: Value = serde_json::from_str(&text).unwrap();
    st["cgroup"]["paths"][key].as_str().map(PathBuf::from)
}

fn read(dir: &Path, file: &str) -> String {
    std::fs::read_to_string(dir.join(file))
        .unwrap_or_else(|e| panic!("read {}: {e}", dir.join(file).display()))
        .trim()
        .to_string()
}

fn stored_resources(env: &Env, id: &str) -> Value {
    let text = std::fs::read_to_string(env.root.join(id).join("state.json")).unwrap();
    let st: Value = serde_json::from_str(&text).unwrap();
    st["config"]["linux"]["resources"].clone()
}

fn stats(env: &Env, id: &str) -> Value {
    let out = ok(env, &["events", "--stats", id]);
    let ev: Value = serde_json::from_str(out.trim()).expect("events --stats prints one JSON line");
    assert_eq!(ev["type"], "stats");
    assert_eq!(ev["id"], id);
    ev["data"].clone()
}

/// Wait (bounded, for liveness only) until the container wrote `file` into its rootfs.
fn wait_for_file(path: &Path) -> String {
    assert!(
        // The shell creates the file before it writes to it: wait for the whole line.
        wait_until(Duration::from_secs(30), || std::fs::read_to_string(path)
            .is_ok_and(|s| s.ends_with('\n'))),
        "{} did not appear",
        path.display()
    );
    std::fs::read_to_string(path).unwrap().trim().to_string()
}

/// `wharf runtime events` running in the background, its lines delivered through a channel;
/// killed on drop.
struct Events {
    child: Child,
    lines: Receiver<String>,
}

impl Events {
    fn start(env: &Env, args: &[&str]) -> Events {
        let mut child = rt(env)
            .arg("events")
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("start wharf runtime events");
        let out = child.stdout.take().unwrap();
        let (tx, rx) = channel();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Events { child, lines: rx }
    }

    /// The next event (bounded wait, for liveness only).
    fn next(&self) -> Option<Value> {
        match self.lines.recv_timeout(Duration::from_secs(30)) {
            Ok(l) => Some(serde_json::from_str(&l).expect("events prints JSON lines")),
            Err(RecvTimeoutError::Timeout) => panic!("no event from wharf runtime events"),
            Err(RecvTimeoutError::Disconnected) => None,
        }
    }
}

impl Drop for Events {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn pids_limit_stops_forks() {
    let env = Env::new("pids");
    let script = "for i in 1 2 3 4 5 6 7 8; do sleep 100 & done; echo all-started";
    let b = bundle_with(
        &env,
        "c",
        &["sh", "-c", script],
        json!({ "pids": { "limit": 4 } }),
    );
    let (code, out, err) = run(&env, &b, "c");
    assert_ne!(code, 0, "stdout: {out}");
    assert!(err.contains("can't fork"), "stderr: {err}");
    assert!(!out.contains("all-started"));
    // The same script under a roomy limit starts everything.
    let b = bundle_with(
        &env,
        "d",
        &["sh", "-c", script],
        json!({ "pids": { "limit": 64 } }),
    );
    let (code, out, err) = run(&env, &b, "d");
    assert_eq!((code, out.trim()), (0, "all-started"), "stderr: {err}");
    assert!(cgroups_left(&env).is_empty());
}

#[test]
fn memory_limit_oom_kill_is_reported_by_events_and_stats() {
    let env = Env::new("oom");
    let script = "while [ ! -e /go ]; do sleep 0.05; done; \
                  dd if=/dev/zero of=/dev/null bs=64M count=1; echo $? > /dd-status; sleep 1000";
    let b = bundle_with(
        &env,
        "c",
        &["sh", "-c", script],
        // memory+swap just above memory: the memory counter is what overflows (the kernel
        // counts that in failcnt), and a host with swap cannot dodge the OOM.
        json!({ "memory": { "limit": 16 << 20, "swap": 17 << 20 } }),
    );
    run_detached(&env, &b, "c");
    let mem = cg_dir(&env, "c", "memory").expect("memory is a v1 controller here");
    assert_eq!(
        read(&mem, "memory.limit_in_bytes"),
        (16u64 << 20).to_string()
    );
    assert_eq!(
        read(&mem, "memory.memsw.limit_in_bytes"),
        (17u64 << 20).to_string()
    );
    let events = Events::start(&env, &["--interval", "200ms", "c"]);
    let first = events.next().unwrap();
    assert_eq!(first["type"], "stats");
    assert_eq!(first["data"]["memory"]["usage"]["limit"], 16u64 << 20);
    std::fs::write(b.rootfs().join("go"), "").unwrap();
    // dd's 64 MiB buffer cannot fit: the kernel kills it.
    assert_eq!(wait_for_file(&b.rootfs().join("dd-status")), "137");
    let oom = std::iter::from_fn(|| events.next())
        .find(|e| e["type"] != "stats")
        .expect("an oom event");
    assert_eq!(oom, json!({ "type": "oom", "id": "c" }));
    let s = stats(&env, "c");
    assert!(s["memory"]["usage"]["failcnt"].as_u64().unwrap() > 0, "{s}");
    assert_eq!(s["memory"]["usage"]["max"], 16 << 20, "{s}");
    // At least one kill (the kernel may take a second victim under pressure).
    let control = read(&mem, "memory.oom_control");
    let kills: u64 = control
        .lines()
        .find_map(|l| l.strip_prefix("oom_kill "))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or(0);
    assert!(kills >= 1, "{control}");
    // Deleting the container removes the cgroup, which ends `events` by itself.
    ok(&env, &["delete", "-f", "c"]);
    let mut events = events;
    assert!(
        wait_until(Duration::from_secs(10), || matches!(
            events.child.try_wait(),
            Ok(Some(_))
        )),
        "events kept running after the container was deleted"
    );
    assert!(events.child.try_wait().unwrap().unwrap().success());
}

#[test]
fn memory_v1_knobs_and_check_before_update() {
    let env = Env::new("memory-knobs");
    let b = bundle_with(
        &env,
        "c",
        &["sleep", "1000"],
        json!({ "memory": {
            "limit": 64 << 20, "reservation": 32 << 20, "swappiness": 10,
            "kernelTCP": 8 << 20, "disableOOMKiller": true, "useHierarchy": true
        }}),
    );
    run_detached(&env, &b, "c");
    let mem = cg_dir(&env, "c", "memory").unwrap();
    assert_eq!(
        read(&mem, "memory.soft_limit_in_bytes"),
        (32u64 << 20).to_string()
    );
    assert_eq!(read(&mem, "memory.swappiness"), "10");
    assert_eq!(
        read(&mem, "memory.kmem.tcp.limit_in_bytes"),
        (8u64 << 20).to_string()
    );
    assert!(read(&mem, "memory.oom_control").contains("oom_kill_disable 1"));
    assert_eq!(read(&mem, "memory.use_hierarchy"), "1");
    // checkBeforeUpdate refuses a limit below what the container already uses.
    let req = env.path().join("tiny.json");
    std::fs::write(
        &req,
        r#"{"memory": {"limit": 4096, "checkBeforeUpdate": true}}"#,
    )
    .unwrap();
    let err = fails(&env, &["update", "-r", req.to_str().unwrap(), "c"]);
    assert!(
        err.contains(
            "linux.resources.memory.checkBeforeUpdate: rejecting memory limit 4096 <= usage"
        ),
        "{err}"
    );
    assert_eq!(
        read(&mem, "memory.limit_in_bytes"),
        (64u64 << 20).to_string()
    );
    // memory+swap below memory is refused before anything is written.
    let err = fails(
        &env,
        &["update", "--memory", "128m", "--memory-swap", "64m", "c"],
    );
    assert!(
        err.contains("memory+swap limit (67108864) should be >= memory limit (134217728)"),
        "{err}"
    );
    ok(&env, &["delete", "-f", "c"]);
}

#[test]
fn cpu_quota_shares_burst_and_realtime_files() {
    let env = Env::new("cpu");
    // Real-time runtime must be granted by the parent first (the kernel checks the sum).
    let cpu_parent =
        PathBuf::from("/sys/fs/cgroup/cpu").join(env.cgroup_parent.trim_start_matches('/'));
    std::fs::create_dir_all(&cpu_parent).unwrap();
    std::fs::write(cpu_parent.join("cpu.rt_runtime_us"), "20000").unwrap();
    let b = bundle_with(
        &env,
        "c",
        &["sleep", "1000"],
        json!({ "cpu": {
            "shares": 512, "quota": 25000, "period": 50000, "burst": 5000,
            "realtimeRuntime": 10000, "realtimePeriod": 1000000
        }}),
    );
    run_detached(&env, &b, "c");
    let cpu = cg_dir(&env, "c", "cpu").unwrap();
    assert_eq!(read(&cpu, "cpu.shares"), "512");
    assert_eq!(read(&cpu, "cpu.cfs_quota_us"), "25000");
    assert_eq!(read(&cpu, "cpu.cfs_period_us"), "50000");
    assert_eq!(read(&cpu, "cpu.cfs_burst_us"), "5000");
    assert_eq!(read(&cpu, "cpu.rt_runtime_us"), "10000");
    assert_eq!(read(&cpu, "cpu.rt_period_us"), "1000000");
    ok(&env, &["delete", "-f", "c"]);
    // Shares the kernel would clamp are refused, naming the setting; nothing is left.
    let b = bundle_with(&env, "d", &["true"], json!({ "cpu": { "shares": 1 } }));
    let err = fails(&env, &["create", "--bundle", b.dir.to_str().unwrap(), "d"]);
    assert!(
        err.contains("linux.resources.cpu.shares: the minimum allowed cpu-shares is 2"),
        "{err}"
    );
    assert!(state_left(&env).is_empty());
}

#[test]
fn cpuset_pins_the_container() {
    let env = Env::new("cpuset");
    let b = bundle_with(
        &env,
        "c",
        &[
            "sh",
            "-c",
            "grep -E '^(Cpus|Mems)_allowed_list' /proc/self/status",
        ],
        json!({ "cpu": { "cpus": "0", "mems": "0" } }),
    );
    let (code, out, err) = run(&env, &b, "c");
    assert_eq!(code, 0, "{err}");
    let lines: Vec<&str> = out
        .lines()
        .map(|l| l.split_whitespace().last().unwrap())
        .collect();
    assert_eq!(lines, ["0", "0"], "{out}");
}

const DEVICE_CHECK: &str = "head -c1 /dev/zero | wc -c; head -c1 /dev/full | wc -c; \
     head -c1 /dev/urandom | wc -c; head -c1 /dev/random | wc -c; echo x > /dev/null && echo null; \
     (: < /dev/fuse) 2>/dev/null && echo fuse-ok || echo fuse-denied";

fn fuse_node() -> Value {
    json!([{ "path": "/dev/fuse", "type": "c", "major": 10, "minor": 229, "fileMode": 438 }])
}

#[test]
fn device_rules_deny_and_allow_inside_the_container() {
    let env = Env::new("devices");
    // Deny all: the node exists (mknod is always allowed) but cannot be opened, while the
    // default devices keep working.
    let mut b = bundle_with(
        &env,
        "c",
        &["sh", "-c", DEVICE_CHECK],
        json!({ "devices": [{ "allow": false, "access": "rwm" }] }),
    );
    b.config["linux"]["devices"] = fuse_node();
    b.save();
    let (code, out, err) = run(&env, &b, "c");
    assert_eq!(code, 0, "{err}");
    assert_eq!(out, "1\n1\n1\n1\nnull\nfuse-denied\n");
    // An allow rule for it opens it.
    b.config["linux"]["resources"]["devices"] = json!([
        { "allow": false, "access": "rwm" },
        { "allow": true, "type": "c", "major": 10, "minor": 229, "access": "r" }
    ]);
    b.save();
    let (code, out, err) = run(&env, &b, "c");
    assert_eq!(code, 0, "{err}");
    assert!(out.ends_with("fuse-ok\n"), "{out}");
    // The v1 controller holds exactly the rules plus runc's defaults, and `update` changes
    // them for a running container.
    b.config["process"]["args"] = json!(["sh", "-c", ROUNDS]);
    b.config["linux"]["resources"]["devices"] = json!([{ "allow": false, "access": "rwm" }]);
    b.save();
    run_detached(&env, &b, "c");
    let dev = cg_dir(&env, "c", "devices").unwrap();
    let list = read(&dev, "devices.list");
    for want in [
        "c 1:3 rwm",
        "c 136:* rwm",
        "c *:* m",
        "b *:* m",
        "c 5:2 rwm",
        "c 10:200 rwm",
    ] {
        assert!(
            list.lines().any(|l| l == want),
            "{want} missing from {list}"
        );
    }
    assert!(
        !list.contains("a *:*") && !list.contains("10:229"),
        "{list}"
    );
    assert_eq!(round(&b, 1), "fuse-denied zero=1");
    let req = env.path().join("devices.json");
    std::fs::write(
        &req,
        json!({ "devices": [
            { "allow": false, "access": "rwm" },
            { "allow": true, "type": "c", "major": 10, "minor": 229, "access": "r" }
        ]})
        .to_string(),
    )
    .unwrap();
    ok(&env, &["update", "-r", req.to_str().unwrap(), "c"]);
    assert!(
        read(&dev, "devices.list")
            .lines()
            .any(|l| l == "c 10:229 r")
    );
    assert_eq!(round(&b, 2), "fuse-ok zero=1");
    ok(&env, &["delete", "-f", "c"]);
}

/// A container loop: on /go<i>, try /dev/fuse and /dev/zero and write the result to /r<i>.
const ROUNDS: &str = "i=1; while true; do while [ ! -e /go$i ]; do sleep 0.05; done; \
     (: < /dev/fuse) 2>/dev/null && r=fuse-ok || r=fuse-denied; \
     z=$(head -c1 /dev/zero | wc -c); echo \"$r zero=$z\" > /r.tmp; mv /r.tmp /r$i; \
     i=$((i+1)); done";

/// Let the ROUNDS loop run round `i`; its result.
fn round(b: &Bundle, i: u32) -> String {
    std::fs::write(b.rootfs().join(format!("go{i}")), "").unwrap();
    wait_for_file(&b.rootfs().join(format!("r{i}")))
}

#[test]
fn ebpf_device_filter_refuses_a_denied_device_in_a_container() {
    use wharf_runtime::cgroups::devices::{bpf, effective};
    let env = Env::new("ebpf");
    // The v1 devices controller allows everything; only the filter decides.
    let mut b = bundle_with(
        &env,
        "c",
        &["sh", "-c", ROUNDS],
        json!({ "devices": [{ "allow": true, "access": "rwm" }] }),
    );
    b.config["linux"]["devices"] = fuse_node();
    b.save();
    run_detached(&env, &b, "c");
    let unified = cg_dir(&env, "c", "").expect("the container has a cgroup2 directory");
    assert!(unified.starts_with(
        Path::new("/sys/fs/cgroup/unified").join(env.cgroup_parent.trim_start_matches('/'))
    ));
    assert_eq!(round(&b, 1), "fuse-ok zero=1");
    // Deny all (+ the default devices), as a config's rules would be compiled on cgroup v2.
    let deny: Vec<oci_spec::runtime::LinuxDeviceCgroup> =
        serde_json::from_value(json!([{ "allow": false, "access": "rwm" }])).unwrap();
    bpf::attach(&unified, &effective(&deny).unwrap()).unwrap();
    assert_eq!(round(&b, 2), "fuse-denied zero=1");
    // A new rule set replaces our program instead of stacking a second one.
    let allow_fuse: Vec<oci_spec::runtime::LinuxDeviceCgroup> = serde_json::from_value(json!([
        { "allow": false, "access": "rwm" },
        { "allow": true, "type": "c", "major": 10, "minor": 229, "access": "r" }
    ]))
    .unwrap();
    bpf::attach(&unified, &effective(&allow_fuse).unwrap()).unwrap();
    assert_eq!(round(&b, 3), "fuse-ok zero=1");
    let attached = bpf::attached(&unified).unwrap();
    assert_eq!(attached.len(), 1, "{attached:?}");
    assert_eq!(attached[0].name, bpf::PROGRAM_NAME);
    ok(&env, &["delete", "-f", "c"]);
}

#[test]
fn hugetlb_limit_goes_where_the_controller_is() {
    let env = Env::new("hugetlb");
    let b = bundle_with(
        &env,
        "c",
        &["sleep", "1000"],
        json!({
            "hugepageLimits": [{ "pageSize": "2MB", "limit": 4 << 20 }],
            "unified": { "hugetlb.1GB.max": "0" }
        }),
    );
    let on_unified = std::fs::read_to_string("/sys/fs/cgroup/unified/cgroup.controllers")
        .is_ok_and(|c| c.split_whitespace().any(|c| c == "hugetlb"));
    if !on_unified {
        // The unified key cannot work then; the limit alone must.
        let mut b = b;
        b.config["linux"]["resources"]["unified"] = json!({});
        b.save();
        run_detached(&env, &b, "c");
        let dir = cg_dir(&env, "c", "hugetlb").expect("hugetlb mounted as v1");
        assert_eq!(
            read(&dir, "hugetlb.2MB.limit_in_bytes"),
            (4u64 << 20).to_string()
        );
        ok(&env, &["delete", "-f", "c"]);
        return;
    }
    run_detached(&env, &b, "c");
    assert!(cg_dir(&env, "c", "hugetlb").is_none(), "no v1 hugetlb here");
    let u = cg_dir(&env, "c", "").unwrap();
    assert_eq!(read(&u, "hugetlb.2MB.max"), (4u64 << 20).to_string());
    assert_eq!(read(&u, "hugetlb.1GB.max"), "0");
    let s = stats(&env, "c");
    assert_eq!(s["hugetlb"]["2MB"]["failcnt"], 0, "{s}");
    ok(&env, &["delete", "-f", "c"]);
}

#[test]
fn settings_the_host_cannot_honour_fail_clearly_and_leave_nothing() {
    let env = Env::new("refused");
    for (name, res, want) in [
        (
            "a",
            json!({ "unified": { "memory.high": "1000000" } }),
            "linux.resources.unified[\"memory.high\"] can't be set: controller \"memory\" not \
             available: it is mounted as cgroup v1",
        ),
        (
            "b",
            json!({ "network": { "classID": 1048577 } }),
            "linux.resources.network.classID: the net_cls cgroup v1 controller is not mounted",
        ),
        (
            "c",
            json!({ "hugepageLimits": [{ "pageSize": "3MB", "limit": 1 }] }),
            "linux.resources.hugepageLimits: page size \"3MB\" is not supported by this host",
        ),
        (
            "d",
            json!({ "memory": { "swappiness": 200 } }),
            "linux.resources.memory.swappiness: invalid memory swappiness value: 200",
        ),
        (
            "e",
            json!({ "devices": [{ "allow": true, "type": "p", "access": "r" }] }),
            "linux.resources.devices[0]: invalid cgroup device type \"p\"",
        ),
    ] {
        if name == "b" && Path::new("/sys/fs/cgroup/net_cls").exists() {
            continue;
        }
        let b = bundle_with(&env, name, &["true"], res);
        let err = fails(&env, &["create", "--bundle", b.dir.to_str().unwrap(), name]);
        assert!(err.contains(want), "{name}: {err}");
    }
    assert!(state_left(&env).is_empty(), "{:?}", state_left(&env));
    assert!(cgroups_left(&env).is_empty(), "{:?}", cgroups_left(&env));
}

#[test]
fn block_io_throttle_and_weight() {
    let env = Env::new("blkio");
    // Any block device of this host will do for a throttle rule.
    let dev = std::fs::read_dir("/sys/block")
        .unwrap()
        .flatten()
        .find_map(|e| std::fs::read_to_string(e.path().join("dev")).ok())
        .expect("a block device");
    let (major, minor) = dev.trim().split_once(':').unwrap();
    let (major, minor): (u64, u64) = (major.parse().unwrap(), minor.parse().unwrap());
    let b = bundle_with(
        &env,
        "c",
        &["sleep", "1000"],
        json!({ "blockIO": {
            "throttleReadBpsDevice": [{ "major": major, "minor": minor, "rate": 1048576 }],
            "throttleWriteIOPSDevice": [{ "major": major, "minor": minor, "rate": 100 }]
        }}),
    );
    run_detached(&env, &b, "c");
    let blkio = cg_dir(&env, "c", "blkio").unwrap();
    assert_eq!(
        read(&blkio, "blkio.throttle.read_bps_device"),
        format!("{major}:{minor} 1048576")
    );
    assert_eq!(
        read(&blkio, "blkio.throttle.write_iops_device"),
        format!("{major}:{minor} 100")
    );
    ok(&env, &["delete", "-f", "c"]);
    // Proportional weights need CFQ or BFQ group scheduling (BFQ's files exist only below
    // the root cgroup).
    let b = bundle_with(
        &env,
        "w",
        &["sleep", "1000"],
        json!({ "blockIO": { "weight": 300 } }),
    );
    let out = rt_out(
        &env,
        &["run", "-d", "--bundle", b.dir.to_str().unwrap(), "w"],
    );
    if out.status.success() {
        let dir = cg_dir(&env, "w", "blkio").unwrap();
        let file = ["blkio.weight", "blkio.bfq.weight"]
            .into_iter()
            .find(|f| dir.join(f).exists())
            .unwrap();
        assert_eq!(read(&dir, file), "300");
        ok(&env, &["delete", "-f", "w"]);
    } else {
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains(
                "linux.resources.blockIO.weight: neither blkio.weight nor blkio.bfq.weight exists"
            ),
            "{err}"
        );
    }
}

#[test]
fn pause_and_resume_use_the_freezer() {
    let env = Env::new("freezer");
    let b = bundle_with(&env, "c", &["sleep", "1000"], json!({}));
    run_detached(&env, &b, "c");
    let freezer = cg_dir(&env, "c", "freezer").unwrap();
    assert_eq!(read(&freezer, "freezer.state"), "THAWED");
    ok(&env, &["pause", "c"]);
    assert_eq!(read(&freezer, "freezer.state"), "FROZEN");
    assert_eq!(status(&env, "c"), "paused");
    // Stats are readable while frozen.
    assert_eq!(stats(&env, "c")["pids"]["current"], 1);
    ok(&env, &["resume", "c"]);
    assert_eq!(read(&freezer, "freezer.state"), "THAWED");
    assert_eq!(status(&env, "c"), "running");
    ok(&env, &["delete", "-f", "c"]);
}

#[test]
fn update_changes_a_running_container_and_is_remembered() {
    let env = Env::new("update");
    let b = bundle_with(
        &env,
        "c",
        &["sleep", "1000"],
        json!({
            "pids": { "limit": 10 },
            "memory": { "limit": 64 << 20 },
            "cpu": { "shares": 1024, "quota": 50000, "period": 100000 }
        }),
    );
    run_detached(&env, &b, "c");
    let pids = cg_dir(&env, "c", "pids").unwrap();
    let mem = cg_dir(&env, "c", "memory").unwrap();
    let cpu = cg_dir(&env, "c", "cpu").unwrap();
    let cpuset = cg_dir(&env, "c", "cpuset").unwrap();
    ok(
        &env,
        &[
            "update",
            "--pids-limit",
            "20",
            "--memory",
            "128m",
            "--memory-swap",
            "256m",
            "--cpu-share",
            "512",
            "--cpu-quota",
            "20000",
            "--cpuset-cpus",
            "0",
            "c",
        ],
    );
    assert_eq!(read(&pids, "pids.max"), "20");
    assert_eq!(
        read(&mem, "memory.limit_in_bytes"),
        (128u64 << 20).to_string()
    );
    assert_eq!(
        read(&mem, "memory.memsw.limit_in_bytes"),
        (256u64 << 20).to_string()
    );
    assert_eq!(read(&cpu, "cpu.shares"), "512");
    assert_eq!(read(&cpu, "cpu.cfs_quota_us"), "20000");
    assert_eq!(read(&cpu, "cpu.cfs_period_us"), "100000");
    assert_eq!(read(&cpuset, "cpuset.cpus"), "0");
    let res = stored_resources(&env, "c");
    assert_eq!(res["pids"]["limit"], 20);
    assert_eq!(res["memory"]["limit"], 128 << 20);
    assert_eq!(res["cpu"]["shares"], 512);
    assert_eq!(res["cpu"]["period"], 100000, "the period not given is kept");
    // -r from stdin: only what it names changes; the stored limits stay.
    let mut child = rt(&env)
        .args(["update", "-r", "-", "c"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::Write;
    child
        .stdin
        .take()
        .unwrap()
        .write_all(br#"{"pids": {"limit": 30}, "memory": {"limit": 96000000}}"#)
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(read(&pids, "pids.max"), "30");
    assert_eq!(read(&mem, "memory.limit_in_bytes"), "95997952");
    assert_eq!(read(&cpu, "cpu.shares"), "512");
    let res = stored_resources(&env, "c");
    assert_eq!(res["memory"]["swap"], 256 << 20);
    assert_eq!(res["pids"]["limit"], 30);
    // A failing update puts back what it had already written and stores nothing.
    let bad = env.path().join("bad.json");
    std::fs::write(
        &bad,
        r#"{"pids": {"limit": 7}, "unified": {"memory.high": "1"}}"#,
    )
    .unwrap();
    let err = fails(&env, &["update", "-r", bad.to_str().unwrap(), "c"]);
    assert!(err.contains("memory.high"), "{err}");
    assert_eq!(read(&pids, "pids.max"), "30");
    assert_eq!(stored_resources(&env, "c")["pids"]["limit"], 30);
    // Go-style single-dash flags, as engines pass them to runc.
    ok(&env, &["update", "-pids-limit", "25", "c"]);
    assert_eq!(read(&pids, "pids.max"), "25");
    // runc's errors.
    let err = fails(&env, &["update", "--l3-cache-schema", "L3:0=f", "c"]);
    assert!(
        err.contains("Intel RDT/CAT: l3 cache schema is not enabled"),
        "{err}"
    );
    let err = fails(&env, &["update", "--memory", "lots", "c"]);
    assert!(err.contains("invalid value for memory"), "{err}");
    let err = fails(&env, &["update", "--pids-limit", "5", "nope"]);
    assert!(err.contains("container does not exist"), "{err}");
    ok(&env, &["kill", "c", "KILL"]);
    assert!(wait_until(Duration::from_secs(10), || status(&env, "c") == "stopped"));
    let err = fails(&env, &["update", "--pids-limit", "5", "c"]);
    assert!(err.contains("container not running"), "{err}");
    ok(&env, &["delete", "c"]);
}

#[test]
fn events_stats_has_runc_shape_and_sane_values() {
    let env = Env::new("stats");
    let b = bundle_with(
        &env,
        "c",
        &[
            "sh",
            "-c",
            "i=0; while [ $i -lt 20000 ]; do i=$((i+1)); done; sleep 1000",
        ],
        json!({ "pids": { "limit": 50 }, "memory": { "limit": 64 << 20 } }),
    );
    run_detached(&env, &b, "c");
    let s = stats(&env, "c");
    assert!(s["cpu"]["usage"]["total"].as_u64().unwrap() > 0, "{s}");
    assert_eq!(s["cpu"]["usage"]["percpu"].as_array().unwrap().len(), {
        let n = std::fs::read_to_string("/sys/fs/cgroup/cpuacct/cpuacct.usage_percpu").unwrap();
        n.split_whitespace().count()
    });
    let usage = s["memory"]["usage"]["usage"].as_u64().unwrap();
    assert!(usage > 0 && usage < 64 << 20, "{s}");
    assert_eq!(s["memory"]["usage"]["limit"], 64 << 20);
    assert!(s["memory"]["raw"]["rss"].is_u64(), "{s}");
    assert!(
        (1..=3).contains(&s["pids"]["current"].as_u64().unwrap()),
        "{s}"
    );
    assert_eq!(s["pids"]["limit"], 50);
    assert!(!s["cpuset"]["cpus"].as_array().unwrap().is_empty());
    assert!(s["network_interfaces"].is_null());
    assert_eq!(s["intel_rdt"], json!({}));
    // Streaming: a stats event every interval.
    let events = Events::start(&env, &["--interval", "100ms", "c"]);
    for _ in 0..2 {
        let e = events.next().unwrap();
        assert_eq!(
            (e["type"].as_str(), e["id"].as_str()),
            (Some("stats"), Some("c"))
        );
        assert_eq!(e["data"]["pids"]["limit"], 50);
    }
    drop(events);
    let err = fails(&env, &["events", "--interval", "0s", "c"]);
    assert!(
        err.contains("duration interval must be greater than 0"),
        "{err}"
    );
    ok(&env, &["kill", "c", "KILL"]);
    assert!(wait_until(Duration::from_secs(10), || status(&env, "c") == "stopped"));
    let err = fails(&env, &["events", "--stats", "c"]);
    assert!(err.contains("container with id c is not running"), "{err}");
    ok(&env, &["delete", "c"]);
}
