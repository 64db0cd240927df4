//! A test's private network world: namespaces made by the test (a "host", pods, an
//! "outside"), all under a temp dir, all removed on drop, also when the test panics.
//! Nothing is created in the machine's own network namespace.

#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

use wharf_net::netlink::Netlink;
use wharf_net::{NetNs, NsHandle, netns};

#[allow(unused_imports)]
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

/// Run `f` on a helper thread inside `ns` (sockets it makes stay in `ns`).
pub fn in_ns<T: Send>(
    ns: &Path,
    f: impl FnOnce() -> std::io::Result<T> + Send,
) -> std::io::Result<T> {
    let fd = netns::open(ns).unwrap();
    use std::os::fd::AsFd;
    netns::run_in(Some(fd.as_fd()), f)
}

/// A TCP listener inside `ns`.
pub fn listen_tcp(ns: &Path, addr: &str) -> TcpListener {
    let addr: SocketAddr = addr.parse().unwrap();
    in_ns(ns, || TcpListener::bind(addr)).expect("listen")
}

/// Accept `n` connections on a background thread; each gets `reply` and the peer address is
/// collected.
pub fn serve(
    listener: TcpListener,
    n: usize,
    reply: &'static str,
) -> std::thread::JoinHandle<Vec<SocketAddr>> {
    std::thread::spawn(move || {
        let mut peers = Vec::new();
        for _ in 0..n {
            let Ok((mut s, peer)) = listener.accept() else {
                break;
            };
            let _ = s.write_all(reply.as_bytes());
            peers.push(peer);
        }
        peers
    })
}

/// Connect from inside `ns` and read what the server says.
pub fn tcp_get(ns: &Path, addr: &str) -> std::io::Result<String> {
    let addr: SocketAddr = addr.parse().unwrap();
    in_ns(ns, || {
        let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(3))?;
        s.set_read_timeout(Some(Duration::from_secs(3)))?;
        let mut out = String::new();
        s.read_to_string(&mut out)?;
        Ok(out)
    })
}

/// A UDP echo server inside `ns` answering `n` datagrams.
pub fn udp_echo(ns: &Path, addr: &str, n: usize) -> std::thread::JoinHandle<()> {
    let addr: SocketAddr = addr.parse().unwrap();
    let sock = in_ns(ns, || UdpSocket::bind(addr)).expect("bind udp");
    sock.set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    std::thread::spawn(move || {
        let mut buf = [0u8; 512];
        for _ in 0..n {
            let Ok((len, peer)) = sock.recv_from(&mut buf) else {
                return;
            };
            let _ = sock.send_to(&buf[..len], peer);
        }
    })
}

/// Send a datagram from inside `ns` and wait for the echo.
pub fn udp_ask(ns: &Path, addr: &str, msg: &str) -> std::io::Result<String> {
    let addr: SocketAddr = addr.parse().unwrap();
    in_ns(ns, || {
        let bind: SocketAddr = if addr.is_ipv6() {
            "[::]:0".parse().unwrap()
        } else {
            "0.0.0.0:0".parse().unwrap()
        };
        let s = UdpSocket::bind(bind)?;
        s.set_read_timeout(Some(Duration::from_secs(3)))?;
        s.send_to(msg.as_bytes(), addr)?;
        let mut buf = [0u8; 512];
        let (n, _) = s.recv_from(&mut buf)?;
        Ok(String::from_utf8_lossy(&buf[..n]).into_owned())
    })
}

/// `busybox ping` once from inside `ns`.
pub fn ping(w: &World, ns: &Path, ip: &str) -> bool {
    let args: &[&str] = if ip.contains(':') {
        &["busybox", "ping6", "-c", "1", "-W", "3", ip]
    } else {
        &["busybox", "ping", "-c", "1", "-W", "3", ip]
    };
    w.exec(ns, args).status.success()
}

/// The simulated machine: a "host" namespace with an uplink to an "outside" namespace
/// (host 198.51.100.1/24, outside 198.51.100.2/24; the outside has no route to any pod
/// subnet, so pod traffic reaches it only through masquerade).
pub struct Topology {
    pub host: PathBuf,
    pub outside: PathBuf,
}

pub const HOST_IP: &str = "198.51.100.1";
pub const OUTSIDE_IP: &str = "198.51.100.2";

impl World {
    pub fn topology(&mut self) -> Topology {
        let host = self.netns("host").path;
        let outside = self.netns("outside").path;
        let out_fd = netns::open(&outside).unwrap();
        use std::os::fd::AsFd;
        let mut nl = Self::netlink(&host);
        nl.create_veth(&wharf_net::netlink::VethSpec {
            name: "uplink",
            master: None,
            mtu: None,
            peer_name: "eth0",
            peer_ns: out_fd.as_fd(),
            peer_mac: None,
        })
        .unwrap();
        let up = nl.link_by_name("uplink").unwrap().unwrap();
        nl.add_address(up.index, HOST_IP.parse().unwrap(), 24, false)
            .unwrap();
        nl.add_address(up.index, "2001:db8::1".parse().unwrap(), 64, true)
            .unwrap();
        let mut onl = Self::netlink(&outside);
        let eth = onl.link_by_name("eth0").unwrap().unwrap();
        onl.set_up(eth.index).unwrap();
        onl.add_address(eth.index, OUTSIDE_IP.parse().unwrap(), 24, false)
            .unwrap();
        onl.add_address(eth.index, "2001:db8::2".parse().unwrap(), 64, true)
            .unwrap();
        Topology { host, outside }
    }
}

/// The nftables ruleset of a namespace, as `nft list ruleset` prints it.
pub fn ruleset(w: &World, ns: &Path) -> String {
    w.exec_ok(ns, &["nft", "list", "ruleset"])
}
