//! The built-in bridge network, end to end inside test-made namespaces: a "host" namespace
//! holds the bridge and the rules, pods are namespaces attached to it, an "outside"
//! namespace stands for the rest of the world.

mod common;

use std::path::Path;

use common::*;
use wharf_net::{AttachOptions, BuiltinConfig, BuiltinNetwork, Error, PortMapping, Protocol};

fn network(w: &World, topo: &Topology) -> BuiltinNetwork {
    let mut cfg = BuiltinConfig::new(w.path().join("state"));
    cfg.host_netns = Some(topo.host.clone());
    BuiltinNetwork::new(cfg).unwrap()
}

fn ip_of(att: &wharf_net::Attachment) -> String {
    att.primary_ip().unwrap().to_string()
}

fn tcp(host_port: u16, container_port: u16) -> PortMapping {
    PortMapping {
        host_port,
        container_port,
        protocol: Protocol::Tcp,
        host_ip: None,
    }
}

#[test]
fn two_pods_reach_each_other_by_ping_and_tcp() {
    let mut w = World::new("builtin-two-pods");
    let topo = w.topology();
    let net = network(&w, &topo);
    let a = w.netns("a").path;
    let b = w.netns("b").path;
    let att_a = net.attach("pod-a", &a, &AttachOptions::default()).unwrap();
    let att_b = net.attach("pod-b", &b, &AttachOptions::default()).unwrap();
    let (ip_a, ip_b) = (ip_of(&att_a), ip_of(&att_b));
    assert_ne!(ip_a, ip_b);
    assert!(
        ip_a.starts_with("10.88.") && ip_b.starts_with("10.88."),
        "{ip_a} {ip_b}"
    );
    assert_eq!(att_a.ips[0].gateway.unwrap().to_string(), "10.88.0.1");
    assert_eq!(att_a.interfaces[2].name, "eth0");
    assert_eq!(att_a.interfaces[2].sandbox.as_deref(), Some(a.as_path()));

    // The pod sees lo and eth0, with the address and a default route.
    assert_eq!(World::link_names(&a), vec!["eth0", "lo"]);
    let addr = w.exec_ok(&a, &["ip", "-4", "-o", "addr", "show", "eth0"]);
    assert!(addr.contains(&format!("{ip_a}/16")), "{addr}");
    let routes = w.exec_ok(&a, &["ip", "route"]);
    assert!(
        routes.contains("default via 10.88.0.1 dev eth0"),
        "{routes}"
    );
    // The host has the bridge with both veths.
    let bridge_ports = w.exec_ok(
        &topo.host,
        &["ip", "-o", "link", "show", "master", "wharf0"],
    );
    assert_eq!(bridge_ports.lines().count(), 2, "{bridge_ports}");

    assert!(ping(&w, &a, &ip_b), "a pings b");
    assert!(ping(&w, &b, &ip_a), "b pings a");
    assert!(ping(&w, &a, "10.88.0.1"), "a pings the gateway");

    let srv = serve(listen_tcp(&b, "0.0.0.0:7000"), 1, "hello from b");
    assert_eq!(
        tcp_get(&a, &format!("{ip_b}:7000")).unwrap(),
        "hello from b"
    );
    let peers = srv.join().unwrap();
    assert_eq!(peers[0].ip().to_string(), ip_a, "pod to pod is not NATed");

    net.detach("pod-a", Some(&a)).unwrap();
    net.detach("pod-b", Some(&b)).unwrap();
}

#[test]
fn pods_reach_the_outside_through_masquerade() {
    let mut w = World::new("builtin-nat");
    let topo = w.topology();
    let net = network(&w, &topo);
    let a = w.netns("a").path;
    net.attach("pod-a", &a, &AttachOptions::default()).unwrap();
    assert!(ping(&w, &a, OUTSIDE_IP), "the pod pings the outside");
    let srv = serve(
        listen_tcp(&topo.outside, "0.0.0.0:7001"),
        1,
        "hello from outside",
    );
    assert_eq!(
        tcp_get(&a, &format!("{OUTSIDE_IP}:7001")).unwrap(),
        "hello from outside"
    );
    let peers = srv.join().unwrap();
    assert_eq!(
        peers[0].ip().to_string(),
        HOST_IP,
        "the outside sees the host's address"
    );
    let fwd = w.exec_ok(&topo.host, &["cat", "/proc/sys/net/ipv4/ip_forward"]);
    assert_eq!(fwd.trim(), "1", "forwarding is on in the host namespace");
    net.detach("pod-a", Some(&a)).unwrap();
}

#[test]
fn mapped_host_ports_reach_pods_from_outside_the_host_and_the_pods_themselves() {
    let mut w = World::new("builtin-ports");
    let topo = w.topology();
    let net = network(&w, &topo);
    let a = w.netns("a").path;
    let b = w.netns("b").path;
    let opts = AttachOptions {
        port_mappings: vec![
            tcp(8080, 80),
            PortMapping {
                host_port: 5353,
                container_port: 53,
                protocol: Protocol::Udp,
                host_ip: None,
            },
        ],
        ..Default::default()
    };
    let att_a = net.attach("pod-a", &a, &opts).unwrap();
    net.attach("pod-b", &b, &AttachOptions::default()).unwrap();

    // outside, the host itself, another pod, and the pod itself (hairpin).
    let srv = serve(listen_tcp(&a, "0.0.0.0:80"), 5, "served by a");
    let target = format!("{HOST_IP}:8080");
    assert_eq!(
        tcp_get(&topo.outside, &target).unwrap(),
        "served by a",
        "from outside"
    );
    assert_eq!(
        tcp_get(&topo.host, &target).unwrap(),
        "served by a",
        "from the host"
    );
    assert_eq!(
        tcp_get(&topo.host, "127.0.0.1:8080").unwrap(),
        "served by a",
        "from the host's localhost"
    );
    assert_eq!(
        tcp_get(&b, &target).unwrap(),
        "served by a",
        "from another pod"
    );
    assert_eq!(tcp_get(&a, &target).unwrap(), "served by a", "hairpin");
    let peers = srv.join().unwrap();
    assert_eq!(
        peers[0].ip().to_string(),
        OUTSIDE_IP,
        "DNAT keeps the client's address"
    );
    assert_eq!(
        peers[2].ip().to_string(),
        "10.88.0.1",
        "localhost is masqueraded"
    );
    assert_eq!(
        peers[4].ip().to_string(),
        "10.88.0.1",
        "hairpin is masqueraded"
    );
    let _ = att_a;

    let echo = udp_echo(&a, "0.0.0.0:53", 1);
    assert_eq!(
        udp_ask(&topo.outside, &format!("{HOST_IP}:5353"), "ping?").unwrap(),
        "ping?"
    );
    echo.join().unwrap();

    // The port is taken while a is attached.
    let c = w.netns("c").path;
    let err = net
        .attach(
            "pod-c",
            &c,
            &AttachOptions {
                port_mappings: vec![tcp(8080, 81)],
                ..Default::default()
            },
        )
        .unwrap_err();
    assert!(matches!(err, Error::Conflict(_)), "{err}");
    assert!(err.to_string().contains("pod-a"), "{err}");

    // After detach the port is gone: connections are refused by the host itself.
    net.detach("pod-a", Some(&a)).unwrap();
    assert!(tcp_get(&topo.outside, &target).is_err());
    let rules = ruleset(&w, &topo.host);
    assert!(!rules.contains("8080"), "{rules}");
    net.detach("pod-b", Some(&b)).unwrap();
}

/// CVE-2020-8558: route_localnet on the bridge (for host ports on 127.0.0.1) must not let
/// a pod reach the host's services bound to 127.0.0.1.
#[test]
fn pods_cannot_reach_services_on_the_hosts_localhost() {
    let mut w = World::new("builtin-localnet");
    let topo = w.topology();
    let net = network(&w, &topo);
    let a = w.netns("a").path;
    net.attach("pod-a", &a, &AttachOptions::default()).unwrap();
    let sysctl = |key: &str| {
        std::fs::read_to_string(format!("/proc/sys/{key}")).map(|s| s.trim().to_string())
    };
    assert_eq!(
        in_ns(&topo.host, || sysctl("net/ipv4/conf/wharf0/route_localnet")).unwrap(),
        "1"
    );
    // A hostile pod routes 127.0.0.1 to its gateway (it needs its own route_localnet and
    // no local routes for 127/8).
    w.exec_ok(
        &a,
        &["sysctl", "-qw", "net.ipv4.conf.eth0.route_localnet=1"],
    );
    for local in ["127.0.0.0/8", "127.0.0.1"] {
        w.exec_ok(
            &a,
            &[
                "ip", "route", "del", "local", local, "dev", "lo", "table", "local",
            ],
        );
    }
    w.exec_ok(
        &a,
        &[
            "ip",
            "route",
            "add",
            "127.0.0.1/32",
            "via",
            "10.88.0.1",
            "dev",
            "eth0",
        ],
    );
    // UDP: one datagram shows whether the host's 127.0.0.1 socket is reachable at all.
    let host_sock = in_ns(&topo.host, || std::net::UdpSocket::bind("127.0.0.1:9999")).unwrap();
    host_sock
        .set_read_timeout(Some(std::time::Duration::from_secs(1)))
        .unwrap();
    let send = || {
        in_ns(&a, || {
            std::net::UdpSocket::bind("0.0.0.0:0")?.send_to(b"knock", "127.0.0.1:9999")
        })
        .unwrap()
    };
    send();
    let mut buf = [0u8; 16];
    assert!(
        host_sock.recv_from(&mut buf).is_err(),
        "a pod's datagram reached a service on the host's 127.0.0.1"
    );
    // Without the guard the same datagram does arrive: the test can fail.
    w.exec_ok(
        &topo.host,
        &["nft", "delete", "chain", "inet", "wharf", "localnet_guard"],
    );
    send();
    let (n, from) = host_sock.recv_from(&mut buf).unwrap();
    assert_eq!(&buf[..n], b"knock");
    assert_eq!(from.ip().to_string(), "10.88.0.2");
    net.detach("pod-a", Some(&a)).unwrap();
}

#[test]
fn a_mapping_bound_to_one_host_address_ignores_the_others() {
    let mut w = World::new("builtin-hostip");
    let topo = w.topology();
    let net = network(&w, &topo);
    // A second host address on the uplink.
    w.exec_ok(
        &topo.host,
        &["ip", "addr", "add", "198.51.100.3/24", "dev", "uplink"],
    );
    let a = w.netns("a").path;
    let opts = AttachOptions {
        port_mappings: vec![PortMapping {
            host_ip: Some(HOST_IP.parse().unwrap()),
            ..tcp(9090, 90)
        }],
        ..Default::default()
    };
    net.attach("pod-a", &a, &opts).unwrap();
    let srv = serve(listen_tcp(&a, "0.0.0.0:90"), 1, "bound");
    assert_eq!(
        tcp_get(&topo.outside, &format!("{HOST_IP}:9090")).unwrap(),
        "bound"
    );
    assert!(tcp_get(&topo.outside, "198.51.100.3:9090").is_err());
    srv.join().unwrap();
    net.detach("pod-a", Some(&a)).unwrap();
}

#[test]
fn detach_removes_everything_and_is_idempotent() {
    let mut w = World::new("builtin-detach");
    let topo = w.topology();
    let net = network(&w, &topo);
    let a = w.netns("a").path;
    let att = net
        .attach(
            "pod-a",
            &a,
            &AttachOptions {
                port_mappings: vec![tcp(8081, 80)],
                ..Default::default()
            },
        )
        .unwrap();
    let veth = att.interfaces[1].name.clone();
    assert!(World::link_names(&topo.host).contains(&veth));
    assert_eq!(net.ipam().leases().unwrap().len(), 1);
    net.check("pod-a").unwrap();
    net.detach("pod-a", Some(&a)).unwrap();
    assert!(!World::link_names(&topo.host).contains(&veth));
    assert_eq!(
        World::link_names(&a),
        vec!["lo"],
        "the pod end went with the host end"
    );
    assert!(net.ipam().leases().unwrap().is_empty());
    assert!(net.check("pod-a").is_err());
    net.detach("pod-a", Some(&a)).unwrap();
    net.detach("never-attached", None).unwrap();
    // The same pod can come back.
    net.attach("pod-a", &a, &AttachOptions::default()).unwrap();
    net.detach("pod-a", None).unwrap();
}

#[test]
fn rules_stay_in_wharfs_own_table() {
    let mut w = World::new("builtin-table");
    let topo = w.topology();
    // Someone else's rules in the host namespace.
    w.exec_ok(&topo.host, &["nft", "add table ip other; add chain ip other c { type filter hook forward priority 0; policy accept; }; add rule ip other c counter"]);
    let before = ruleset(&w, &topo.host);
    let other_before = w.exec_ok(&topo.host, &["nft", "list", "table", "ip", "other"]);
    let net = network(&w, &topo);
    let a = w.netns("a").path;
    net.attach(
        "pod-a",
        &a,
        &AttachOptions {
            port_mappings: vec![tcp(8082, 80)],
            ..Default::default()
        },
    )
    .unwrap();
    let other_during = w.exec_ok(&topo.host, &["nft", "list", "table", "ip", "other"]);
    assert_eq!(other_during, other_before, "the other table is untouched");
    let tables = w.exec_ok(&topo.host, &["nft", "list", "tables"]);
    assert_eq!(
        tables.lines().collect::<Vec<_>>(),
        vec!["table ip other", "table inet wharf"]
    );
    assert!(before.contains("table ip other"));
    net.detach("pod-a", None).unwrap();
    net.remove().unwrap();
    let after = ruleset(&w, &topo.host);
    assert_eq!(before, after, "only Wharf's table came and went");
    assert!(!World::link_names(&topo.host).contains(&"wharf0".to_string()));
}

#[test]
fn a_subnet_colliding_with_a_host_route_is_refused_before_anything_is_made() {
    let mut w = World::new("builtin-collision");
    let topo = w.topology();
    w.exec_ok(
        &topo.host,
        &["ip", "addr", "add", "10.88.7.1/24", "dev", "uplink"],
    );
    let net = network(&w, &topo);
    let a = w.netns("a").path;
    let err = net
        .attach("pod-a", &a, &AttachOptions::default())
        .unwrap_err();
    assert!(matches!(err, Error::Conflict(_)), "{err}");
    assert!(err.to_string().contains("10.88.7.0/24"), "{err}");
    assert!(!World::link_names(&topo.host).contains(&"wharf0".to_string()));
    assert!(net.ipam().leases().unwrap().is_empty());
    assert_eq!(World::link_names(&a), vec!["lo"]);
}

#[test]
fn dual_stack_pods_get_ipv6_addresses_and_reach_each_other() {
    let mut w = World::new("builtin-ipv6");
    let topo = w.topology();
    let mut cfg = BuiltinConfig::new(w.path().join("state"));
    cfg.host_netns = Some(topo.host.clone());
    cfg.subnet6 = Some("fd00:88::/64".parse().unwrap());
    let net = BuiltinNetwork::new(cfg).unwrap();
    let a = w.netns("a").path;
    let b = w.netns("b").path;
    let opts = AttachOptions {
        port_mappings: vec![tcp(8083, 80)],
        ..Default::default()
    };
    let att_a = net.attach("pod-a", &a, &opts).unwrap();
    let att_b = net.attach("pod-b", &b, &AttachOptions::default()).unwrap();
    let v6 = |att: &wharf_net::Attachment| {
        att.ips
            .iter()
            .find(|i| i.address.is_ipv6())
            .unwrap()
            .address
            .addr
            .to_string()
    };
    assert_eq!(att_a.ips.len(), 2);
    assert!(ping(&w, &a, &v6(&att_b)), "a pings b over IPv6");
    assert!(ping(&w, &b, "fd00:88::1"), "b pings the IPv6 gateway");
    let srv = serve(listen_tcp(&a, "[::]:80"), 1, "v6 served");
    assert_eq!(
        tcp_get(&topo.outside, "[2001:db8::1]:8083").unwrap(),
        "v6 served"
    );
    let peers = srv.join().unwrap();
    assert_eq!(peers[0].ip().to_string(), "2001:db8::2");
    let _ = v6(&att_a);
    net.detach("pod-a", None).unwrap();
    net.detach("pod-b", None).unwrap();
}

#[test]
fn bad_requests_are_refused_with_clear_errors() {
    let mut w = World::new("builtin-bad");
    let topo = w.topology();
    let net = network(&w, &topo);
    let a = w.netns("a").path;
    let e = net
        .attach("../x", &a, &AttachOptions::default())
        .unwrap_err();
    assert!(e.to_string().contains("invalid pod id"), "{e}");
    let e = net
        .attach("p", Path::new("/nonexistent/ns"), &AttachOptions::default())
        .unwrap_err();
    assert!(e.to_string().contains("/nonexistent/ns"), "{e}");
    let sctp = PortMapping {
        protocol: Protocol::Sctp,
        ..tcp(1, 1)
    };
    let e = net
        .attach(
            "p",
            &a,
            &AttachOptions {
                port_mappings: vec![sctp],
                ..Default::default()
            },
        )
        .unwrap_err();
    assert!(e.to_string().contains("SCTP"), "{e}");
    let e = net
        .attach(
            "p",
            &a,
            &AttachOptions {
                ips: vec!["10.99.0.5".parse().unwrap()],
                ..Default::default()
            },
        )
        .unwrap_err();
    assert!(e.to_string().contains("10.99.0.5"), "{e}");
    assert!(
        net.ipam().leases().unwrap().is_empty(),
        "the failed attach left no lease"
    );
    assert_eq!(World::link_names(&a), vec!["lo"]);
    // A requested address is honoured.
    let att = net
        .attach(
            "p",
            &a,
            &AttachOptions {
                ips: vec!["10.88.3.3".parse().unwrap()],
                mac: Some("02:00:00:00:33:33".into()),
                ..Default::default()
            },
        )
        .unwrap();
    assert_eq!(ip_of(&att), "10.88.3.3");
    assert_eq!(att.interfaces[2].mac, "02:00:00:00:33:33");
    let e = net.attach("p", &a, &AttachOptions::default()).unwrap_err();
    assert!(matches!(e, Error::Conflict(_)), "{e}");
    net.detach("p", None).unwrap();
}

#[test]
fn the_nft_command_backend_applies_the_same_rules() {
    let mut w = World::new("builtin-nft-cmd");
    let topo = w.topology();
    let mut cfg = BuiltinConfig::new(w.path().join("state"));
    cfg.host_netns = Some(topo.host.clone());
    cfg.nft_backend = wharf_net::nft::Backend::Command("nft".into());
    let net = BuiltinNetwork::new(cfg).unwrap();
    let a = w.netns("a").path;
    let opts = AttachOptions {
        port_mappings: vec![tcp(8084, 80)],
        ..Default::default()
    };
    net.attach("pod-a", &a, &opts).unwrap();
    let srv = serve(listen_tcp(&a, "0.0.0.0:80"), 1, "via nft");
    assert_eq!(
        tcp_get(&topo.outside, &format!("{HOST_IP}:8084")).unwrap(),
        "via nft"
    );
    srv.join().unwrap();
    assert!(ruleset(&w, &topo.host).contains("8084 : 10.88.0.2 . 80"));
    net.detach("pod-a", None).unwrap();
    assert!(!ruleset(&w, &topo.host).contains("8084"));
}

#[test]
fn concurrent_attaches_get_distinct_addresses() {
    let mut w = World::new("builtin-concurrent");
    let topo = w.topology();
    let net = network(&w, &topo);
    let pods: Vec<_> = (0..6).map(|i| w.netns(&format!("p{i}")).path).collect();
    let ips: Vec<String> = std::thread::scope(|s| {
        let handles: Vec<_> = pods
            .iter()
            .enumerate()
            .map(|(i, p)| {
                let net = &net;
                s.spawn(move || {
                    ip_of(
                        &net.attach(&format!("pod-{i}"), p, &AttachOptions::default())
                            .unwrap(),
                    )
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let mut uniq = ips.clone();
    uniq.sort();
    uniq.dedup();
    assert_eq!(uniq.len(), 6, "{ips:?}");
    assert_eq!(net.ipam().leases().unwrap().len(), 6);
    assert!(ping(&w, &pods[0], &ips[5]));
    for i in 0..6 {
        net.detach(&format!("pod-{i}"), None).unwrap();
    }
}
