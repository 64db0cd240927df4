//! Pod sandboxes for real: pinned namespaces, /dev/shm, cgroup, the built-in network in a
//! namespace the test makes (playing the host), name files; and their complete removal.

use std::path::{Path, PathBuf};

use wharf_engine::model::{NetworkMode, PodSpec, PortMapping};
use wharf_engine::sandbox::NetOptions;
use wharf_engine::{Engine, EngineOptions};
use wharf_testbed::Env;

/// An engine whose state, run dir, cgroups and "host" network namespace are the test's own.
struct TestEngine {
    engine: Engine,
    host_ns: PathBuf,
    env: Env,
}

impl TestEngine {
    fn new(name: &str) -> TestEngine {
        let env = Env::new(name);
        let run = env.path().join("run");
        let host_ns = wharf_net::netns::create(&env.path().join("hostns"), "host")
            .unwrap()
            .path;
        let conf = env.path().join("cni-conf");
        std::fs::create_dir_all(&conf).unwrap();
        let engine = Engine::open(EngineOptions {
            root: env.path().join("root"),
            run,
            cgroup_parent: env.cgroup_parent.clone(),
            net: NetOptions {
                cni_conf_dirs: Some(vec![conf]),
                cni_cache_dir: Some(env.path().join("cni-cache")),
                host_netns: Some(host_ns.clone()),
                ..Default::default()
            },
            wharf_bin: Some(env!("CARGO_BIN_EXE_wharf").into()),
            ..Default::default()
        })
        .unwrap();
        TestEngine {
            engine,
            host_ns,
            env,
        }
    }
}

impl Drop for TestEngine {
    fn drop(&mut self) {
        for pod in self
            .engine
            .list_pods(&Default::default())
            .unwrap_or_default()
        {
            let _ = self.engine.remove_pod(&pod.row.id, true);
        }
        let _ = wharf_net::netns::remove_path(&self.host_ns);
    }
}

fn mounted(path: &Path) -> bool {
    std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap()
        .lines()
        .any(|l| l.split(' ').nth(4) == Some(path.to_str().unwrap()))
}

fn ns_inode(path: &str) -> u64 {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(path).unwrap().ino()
}

#[test]
fn pod_sandbox_is_created_and_removed_completely() {
    let t = TestEngine::new("sandbox");
    let pod = t
        .engine
        .create_pod(&PodSpec {
            name: Some("web".into()),
            hostname: Some("webhost".into()),
            ports: vec![PortMapping {
                host_port: 18080,
                container_port: 80,
                protocol: "tcp".into(),
                host_ip: None,
            }],
            ..Default::default()
        })
        .unwrap();
    let sb = &pod.sandbox;
    // Namespaces are pinned (distinct from ours) and joinable by path.
    for p in [
        sb.netns.as_ref().unwrap(),
        sb.ipcns.as_ref().unwrap(),
        sb.utsns.as_ref().unwrap(),
    ] {
        assert!(mounted(Path::new(p)), "{p} is not pinned");
    }
    assert_ne!(
        ns_inode(sb.utsns.as_ref().unwrap()),
        ns_inode("/proc/self/ns/uts")
    );
    assert!(mounted(Path::new(sb.shm.as_ref().unwrap())));
    // The built-in network gave it an address in 10.88.0.0/16.
    assert_eq!(sb.network, "wharf");
    assert!(
        sb.ips.iter().any(|ip| ip.starts_with("10.88.")),
        "{:?}",
        sb.ips
    );
    let etc = PathBuf::from(sb.etc_dir.as_ref().unwrap());
    assert_eq!(
        std::fs::read_to_string(etc.join("hostname"))
            .unwrap()
            .trim(),
        "webhost"
    );
    assert!(
        std::fs::read_to_string(etc.join("hosts"))
            .unwrap()
            .contains("webhost")
    );
    // Its cgroup exists under the test's parent.
    assert!(t.env.cgroup_dirs().iter().any(|d| d.join(&pod.id).is_dir()));
    // The name is taken.
    let err = t
        .engine
        .create_pod(&PodSpec {
            name: Some("web".into()),
            ..Default::default()
        })
        .unwrap_err();
    assert!(err.to_string().contains("already in use"), "{err}");

    t.engine.remove_pod("web", false).unwrap();
    for p in [
        sb.netns.as_ref().unwrap(),
        sb.ipcns.as_ref().unwrap(),
        sb.utsns.as_ref().unwrap(),
        sb.shm.as_ref().unwrap(),
    ] {
        assert!(!mounted(Path::new(p)), "{p} still mounted");
    }
    assert!(!t.env.cgroup_dirs().iter().any(|d| d.join(&pod.id).exists()));
    assert!(t.engine.list_pods(&Default::default()).unwrap().is_empty());
    assert!(!t.engine.paths().pod_dir(&pod.id).exists());
    // The lease is back: a new pod can take the network again, and the built-in state has
    // no record of the old one.
    let leases = t.env.path().join("root/net/builtin/ipam");
    let left: Vec<_> = std::fs::read_dir(&leases)
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    let leases_left: Vec<&String> = left
        .iter()
        .filter(|n| n.parse::<std::net::IpAddr>().is_ok())
        .collect();
    assert!(leases_left.is_empty(), "leases left: {leases_left:?}");
}

#[test]
fn failed_sandbox_leaves_nothing() {
    let t = TestEngine::new("sandbox-fail");
    // A named CNI network that does not exist fails after namespaces and cgroup were made.
    let err = t
        .engine
        .create_pod(&PodSpec {
            name: Some("bad".into()),
            network: NetworkMode::Named("nope".into()),
            ..Default::default()
        })
        .unwrap_err();
    assert!(err.to_string().contains("nope"), "{err}");
    assert!(t.engine.list_pods(&Default::default()).unwrap().is_empty());
    let pods_run = t.engine.paths().run.join("pods");
    let left: Vec<_> = std::fs::read_dir(&pods_run)
        .map(|d| d.flatten().collect())
        .unwrap_or_default();
    assert!(left.is_empty(), "run dirs left: {left:?}");
    // Nothing is mounted for the pod any more (the netns directory itself stays a shared
    // mount point, as /run/netns does for `ip netns`).
    let info = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    let run = t.env.path().join("run");
    let netns_dir = run.join("netns");
    let left: Vec<&str> = info
        .lines()
        .filter_map(|l| l.split(' ').nth(4))
        .filter(|m| m.starts_with(run.to_str().unwrap()) && *m != netns_dir.to_str().unwrap())
        .filter(|m| !wharf_testbed::is_kept_mount(Path::new(m)))
        .collect();
    assert!(left.is_empty(), "mounts left: {left:?}");
    for d in t.env.cgroup_dirs() {
        let kids: Vec<_> = std::fs::read_dir(&d)
            .map(|e| e.flatten().filter(|e| e.path().is_dir()).collect())
            .unwrap_or_default();
        assert!(kids.is_empty(), "cgroups left in {}: {kids:?}", d.display());
    }
}

#[test]
fn host_network_and_no_network() {
    let t = TestEngine::new("sandbox-modes");
    let none = t
        .engine
        .create_pod(&PodSpec {
            network: NetworkMode::None,
            ..Default::default()
        })
        .unwrap();
    assert!(none.sandbox.netns.is_some());
    assert!(none.sandbox.ips.is_empty());
    let host = t
        .engine
        .create_pod(&PodSpec {
            network: NetworkMode::Host,
            ..Default::default()
        })
        .unwrap();
    assert!(host.sandbox.netns.is_none());
    t.engine.remove_pod(&none.id, false).unwrap();
    t.engine.remove_pod(&host.id, false).unwrap();
}
