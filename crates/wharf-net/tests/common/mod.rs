//! A test's private network world: namespaces made by the test (a "host", pods, an
//! "outside"), all under a temp dir, all removed on drop, also when the test panics.
//! Nothing is created in the machine's own network namespace.

#![allow(dead_code)]

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};

use wharf_net::netlink::Netlink;
use wharf_net::{NetNs, NsHandle, netns};

pub use wharf_testbed::wait_until;

/// The inode of the calling thread's network namespace.
pub fn own_netns_inode() -> u64 {
    std::fs::metadata("/proc/thread-self/ns/net").unwrap().ino()
}

/// A temp dir with a run dir for pinned namespaces; namespaces and processes it made are
/// cleaned up on drop.
pub struct World {
    pub env: wharf_testbed::Env,
    pub run_dir: PathBuf,
    namespaces: Vec<PathBuf>,
    children: Vec<Child>,
    root_ns_inode: u64,
}

impl World {
    pub fn new(name: &str) -> World {
        let env = wharf_testbed::Env::new(name);
        let run_dir = env.path().join("run");
        World {
            env,
            run_dir,
            namespaces: Vec::new(),
            children: Vec::new(),
            root_ns_inode: own_netns_inode(),
        }
    }

    pub fn path(&self) -> &Path {
        self.env.path()
    }

    /// A new pinned namespace.
    pub fn netns(&mut self, name: &str) -> NetNs {
        let ns = netns::create(&self.run_dir, name).expect("create a test network namespace");
        self.namespaces.push(ns.path.clone());
        ns
    }

    /// Run a command inside `ns` (nsenter from util-linux) and wait for it.
    pub fn exec(&self, ns: &Path, args: &[&str]) -> Output {
        Command::new("nsenter")
            .arg(format!("--net={}", ns.display()))
            .arg("--")
            .args(args)
            .stdin(Stdio::null())
            .output()
            .expect("run nsenter")
    }

    /// Run a command inside `ns` that must succeed; its stdout.
    pub fn exec_ok(&self, ns: &Path, args: &[&str]) -> String {
        let out = self.exec(ns, args);
        assert!(
            out.status.success(),
            "{args:?} in {} failed: {}{}",
            ns.display(),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Start a background command inside `ns`; killed on drop.
    pub fn spawn(&mut self, ns: &Path, args: &[&str]) {
        let child = Command::new("nsenter")
            .arg(format!("--net={}", ns.display()))
            .arg("--")
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn nsenter");
        self.children.push(child);
    }

    /// A netlink socket inside `ns`.
    pub fn netlink(ns: &Path) -> Netlink {
        NsHandle::open(Some(ns)).unwrap().netlink().unwrap()
    }

    /// Interface names in `ns`.
    pub fn link_names(ns: &Path) -> Vec<String> {
        let mut v: Vec<String> = Self::netlink(ns)
            .links()
            .unwrap()
            .into_iter()
            .map(|l| l.name)
            .collect();
        v.sort();
        v
    }
}

impl Drop for World {
    fn drop(&mut self) {
        for c in &mut self.children {
            let _ = c.kill();
            let _ = c.wait();
        }
        for ns in self.namespaces.iter().rev() {
            let _ = netns::remove_path(ns);
        }
        // The test must never have moved the test process itself.
        if !std::thread::panicking() {
            assert_eq!(
                own_netns_inode(),
                self.root_ns_inode,
                "the test thread's network namespace changed"
            );
        }
    }
}
