//! Name resolution on user networks for tools that ask a DNS server directly (nslookup,
//! Go and musl programs, an nginx `resolver`): each pod's shim answers its network's
//! names at 127.0.0.11 and forwards the rest upstream, daemon or not. The upstream here is
//! a resolver of the test's own on loopback (WHARF_DNS_UPSTREAM), so no question leaves
//! the machine.

mod engine_support;

use std::net::UdpSocket;
use std::time::Duration;

use engine_support::{Wharf, busybox};

/// A resolver that answers every A question with 192.0.2.77, until dropped.
struct FakeUpstream {
    port: u16,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: Option<std::thread::JoinHandle<u32>>,
}

impl FakeUpstream {
    fn start() -> FakeUpstream {
        let sock = UdpSocket::bind("127.0.0.1:0").unwrap();
        sock.set_read_timeout(Some(Duration::from_millis(100)))
            .unwrap();
        let port = sock.local_addr().unwrap().port();
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::spawn(move || {
            let mut answered = 0;
            let mut buf = [0u8; 1500];
            while !flag.load(std::sync::atomic::Ordering::Relaxed) {
                let Ok((n, from)) = sock.recv_from(&mut buf) else {
                    continue;
                };
                let q = &buf[..n];
                // The question's end: after the name's zero byte, type and class.
                let mut i = 12;
                while i < n && q[i] != 0 {
                    i += q[i] as usize + 1;
                }
                let end = i + 5;
                if end > n {
                    continue;
                }
                let is_a = q[i + 1..i + 3] == [0, 1];
                let mut a = q[..end].to_vec();
                a[2] |= 0x80;
                a[3] = 0x80;
                a[6..8].copy_from_slice(&[0, u8::from(is_a)]);
                if is_a {
                    a.extend_from_slice(&[
                        0xc0, 0x0c, 0, 1, 0, 1, 0, 0, 0, 60, 0, 4, 192, 0, 2, 77,
                    ]);
                }
                let _ = sock.send_to(&a, from);
                answered += 1;
            }
            answered
        });
        FakeUpstream {
            port,
            stop,
            thread: Some(thread),
        }
    }

    fn answered(mut self) -> u32 {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        self.thread.take().unwrap().join().unwrap()
    }
}

#[test]
fn user_networks_answer_names_at_127_0_0_11_and_forward_the_rest() {
    let upstream = FakeUpstream::start();
    let mut w = Wharf::new("net-dns");
    w.set_var(
        "WHARF_DNS_UPSTREAM",
        &format!("127.0.0.1:{}", upstream.port),
    );
    w.pull_busybox();
    let bb = busybox();
    w.ok(&["network", "create", "appnet"]);
    w.ok(&[
        "run",
        "-d",
        "--name",
        "db",
        "--network",
        "appnet",
        "--network-alias",
        "database",
        &bb,
        "sleep",
        "1000",
    ]);
    let ip = w.inspect("db")["NetworkSettings"]["IPAddress"]
        .as_str()
        .unwrap()
        .to_string();
    let ask = |name: &str| {
        w.ok(&[
            "run",
            "--rm",
            "--network",
            "appnet",
            &bb,
            "nslookup",
            "-type=a",
            name,
        ])
    };
    let resolv = w.ok(&[
        "run",
        "--rm",
        "--network",
        "appnet",
        &bb,
        "cat",
        "/etc/resolv.conf",
    ]);
    assert!(resolv.contains("nameserver 127.0.0.11"), "{resolv}");
    for name in ["db", "database", "DB"] {
        let out = ask(name);
        assert!(out.contains(&format!("Address: {ip}")), "{name}: {out}");
    }
    // A container that joins later is found by the others.
    w.ok(&[
        "run",
        "-d",
        "--name",
        "late",
        "--network",
        "appnet",
        &bb,
        "sleep",
        "1000",
    ]);
    let late = w.ok(&["exec", "db", "nslookup", "-type=a", "late"]);
    assert!(late.contains("Address: 10."), "{late}");
    // Everything else goes upstream.
    let out = ask("registry.example.com");
    assert!(out.contains("192.0.2.77"), "{out}");
    // Pods elsewhere keep the host's resolvers.
    let other = w.ok(&["run", "--rm", &bb, "cat", "/etc/resolv.conf"]);
    assert!(!other.contains("127.0.0.11"), "{other}");
    w.ok(&["rm", "-f", "db", "late"]);
    w.ok(&["network", "rm", "appnet"]);
    w.assert_clean();
    assert!(upstream.answered() >= 1);
}
