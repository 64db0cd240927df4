//! Failure handling: every failed step is undone, teardown is idempotent, and what a crash
//! leaves behind is repaired on the next start.

mod common;

use std::os::fd::AsFd;

use common::*;
use wharf_net::cni::{CniConfig, CniNetwork};
use wharf_net::{AttachOptions, BuiltinConfig, BuiltinNetwork, PortMapping, Protocol, netns};

fn network(w: &World, topo: &Topology) -> BuiltinNetwork {
    let mut cfg = BuiltinConfig::new(w.path().join("state"));
    cfg.host_netns = Some(topo.host.clone());
    BuiltinNetwork::new(cfg).unwrap()
}

fn ports(p: u16) -> AttachOptions {
    AttachOptions {
        port_mappings: vec![PortMapping {
            host_port: p,
            container_port: 80,
            protocol: Protocol::Tcp,
            host_ip: None,
        }],
        ..Default::default()
    }
}

fn host_veths(topo: &Topology) -> Vec<String> {
    World::link_names(&topo.host)
        .into_iter()
        .filter(|n| n.starts_with("wh") && n != "wharf0")
        .collect()
}

fn records(w: &World) -> usize {
    std::fs::read_dir(w.path().join("state/pods"))
        .map(|d| d.count())
        .unwrap_or(0)
}

#[test]
fn a_failure_inside_the_pod_undoes_the_veth_lease_rules_and_record() {
    let mut w = World::new("rec-pod-fail");
    let topo = w.topology();
    let net = network(&w, &topo);
    let a = w.netns("a").path;
    // The pod already has a default route: adding ours (the last step) fails.
    w.exec_ok(
        &a,
        &[
            "ip", "link", "add", "dummy0", "type", "veth", "peer", "name", "dummy1",
        ],
    );
    w.exec_ok(&a, &["ip", "link", "set", "dummy0", "up"]);
    w.exec_ok(&a, &["ip", "addr", "add", "192.0.2.1/24", "dev", "dummy0"]);
    w.exec_ok(&a, &["ip", "route", "add", "default", "via", "192.0.2.254"]);
    let err = net.attach("pod-a", &a, &ports(8090)).unwrap_err();
    assert!(err.to_string().contains("default route"), "{err}");
    assert!(host_veths(&topo).is_empty(), "veth removed");
    assert_eq!(
        World::link_names(&a),
        vec!["dummy0", "dummy1", "lo"],
        "eth0 gone from the pod"
    );
    assert!(net.ipam().leases().unwrap().is_empty(), "lease released");
    assert_eq!(records(&w), 0, "record removed");
    assert!(
        !ruleset(&w, &topo.host).contains("8090"),
        "port rule removed"
    );
}

#[test]
fn a_name_clash_in_the_pod_fails_cleanly() {
    let mut w = World::new("rec-clash");
    let topo = w.topology();
    let net = network(&w, &topo);
    let a = w.netns("a").path;
    w.exec_ok(
        &a,
        &[
            "ip", "link", "add", "eth0", "type", "veth", "peer", "name", "eth1",
        ],
    );
    let err = net
        .attach("pod-a", &a, &AttachOptions::default())
        .unwrap_err();
    assert!(err.to_string().contains("create veth"), "{err}");
    assert!(host_veths(&topo).is_empty());
    assert!(net.ipam().leases().unwrap().is_empty());
    assert_eq!(records(&w), 0);
}

#[test]
fn teardown_is_idempotent_and_survives_a_vanished_namespace() {
    let mut w = World::new("rec-idem");
    let topo = w.topology();
    let net = network(&w, &topo);
    let a = w.netns("a").path;
    net.attach("pod-a", &a, &ports(8091)).unwrap();
    // The pod's namespace goes first (its veth pair dies with it).
    netns::remove_path(&a).unwrap();
    assert!(wait_until(std::time::Duration::from_secs(5), || {
        host_veths(&topo).is_empty()
    }));
    net.detach("pod-a", Some(&a)).unwrap();
    net.detach("pod-a", Some(&a)).unwrap();
    assert!(net.ipam().leases().unwrap().is_empty());
    assert_eq!(records(&w), 0);
    assert!(!ruleset(&w, &topo.host).contains("8091"));
}

#[test]
fn recovery_repairs_what_a_crash_left_between_steps() {
    let mut w = World::new("rec-crash");
    let topo = w.topology();
    let net = network(&w, &topo);
    let a = w.netns("a").path;
    let b = w.netns("b").path;
    // pod-a: complete. pod-b: "crashed" in the middle of attach (record still attaching).
    net.attach("pod-a", &a, &ports(8092)).unwrap();
    net.attach("pod-b", &b, &ports(8093)).unwrap();
    let rec_b = w.path().join("state/pods/pod-b.json");
    let text = std::fs::read_to_string(&rec_b).unwrap();
    std::fs::write(&rec_b, text.replace("\"attached\"", "\"attaching\"")).unwrap();
    // A lease whose owner has no record (crash between lease and record).
    std::fs::write(w.path().join("state/ipam/10.88.0.99"), "ghost").unwrap();
    // A veth of Wharf's whose pod has no record (state lost).
    let c = w.netns("c").path;
    let c_fd = netns::open(&c).unwrap();
    let mut nl = World::netlink(&topo.host);
    nl.create_veth(&wharf_net::netlink::VethSpec {
        name: "whdeadbeef0000",
        master: None,
        mtu: None,
        peer_name: "eth0",
        peer_ns: c_fd.as_fd(),
        peer_mac: None,
    })
    .unwrap();
    let idx = nl.link_by_name("whdeadbeef0000").unwrap().unwrap().index;
    nl.set_alias(idx, "wharf:wharf:ghost").unwrap();
    // And someone flushed the ruleset.
    w.exec_ok(&topo.host, &["nft", "flush", "ruleset"]);

    let rec = net.recover().unwrap();
    assert_eq!(rec.half_attached, vec!["pod-b".to_string()]);
    assert_eq!(
        rec.orphan_leases,
        vec!["10.88.0.99".parse::<std::net::IpAddr>().unwrap()]
    );
    assert_eq!(rec.orphan_veths, vec!["whdeadbeef0000".to_string()]);
    assert_eq!(host_veths(&topo), vec![net.host_veth_name("pod-a")]);
    assert_eq!(World::link_names(&b), vec!["lo"]);
    let leases = net.ipam().leases().unwrap();
    assert_eq!(leases.len(), 1);
    assert_eq!(leases[0].1, "pod-a");
    let rules = ruleset(&w, &topo.host);
    assert!(rules.contains("8092") && !rules.contains("8093"), "{rules}");
    // pod-a still works through the rebuilt rules.
    let srv = serve(listen_tcp(&a, "0.0.0.0:80"), 1, "still here");
    assert_eq!(
        tcp_get(&topo.outside, &format!("{HOST_IP}:8092")).unwrap(),
        "still here"
    );
    srv.join().unwrap();
    // Recovery with nothing to do changes nothing.
    assert_eq!(net.recover().unwrap(), Default::default());
    net.detach("pod-a", None).unwrap();
}

#[test]
fn cni_del_without_a_cache_entry_still_releases_everything() {
    let mut w = World::new("rec-cni-nocache");
    let topo = w.topology();
    let conf_dir = w.path().join("net.d");
    std::fs::create_dir_all(&conf_dir).unwrap();
    let ipam = w.path().join("host-local");
    std::fs::write(
        conf_dir.join("10-b.conflist"),
        format!(
            r#"{{"cniVersion":"1.0.0","name":"b","plugins":[{{"type":"bridge","bridge":"cni-rec0","isGateway":true,
              "ipam":{{"type":"host-local","subnet":"10.92.0.0/24","dataDir":"{}"}}}}]}}"#,
            ipam.display()
        ),
    )
    .unwrap();
    let mut cfg = CniConfig::new(w.path().join("locks"));
    cfg.conf_dirs = vec![conf_dir];
    cfg.bin_dirs = vec!["/usr/lib/cni".into()];
    cfg.cache_dir = w.path().join("cache");
    cfg.host_netns = Some(topo.host.clone());
    let net = CniNetwork::load(cfg.clone(), None).unwrap().unwrap();
    let a = w.netns("a").path;
    net.attach("pod-a", &a, &AttachOptions::default()).unwrap();
    // A crash before the result was cached.
    std::fs::remove_dir_all(w.path().join("cache")).unwrap();
    net.detach("pod-a", Some(&a)).unwrap();
    let left: Vec<_> = std::fs::read_dir(ipam.join("b"))
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("10."))
        .collect();
    assert!(
        left.is_empty(),
        "host-local released by container id: {left:?}"
    );
    assert_eq!(World::link_names(&a), vec!["lo"]);
}

#[test]
fn rules_removed_behind_wharfs_back_are_rewritten_on_the_next_change() {
    let mut w = World::new("rec-fw-drift");
    let topo = w.topology();
    let net = network(&w, &topo);
    let a = w.netns("a").path;
    let b = w.netns("b").path;
    net.attach("pod-a", &a, &ports(8094)).unwrap();
    w.exec_ok(&topo.host, &["nft", "flush", "ruleset"]);
    // The fast path (adding map entries) fails; the whole table comes back from the records.
    net.attach("pod-b", &b, &ports(8095)).unwrap();
    let rules = ruleset(&w, &topo.host);
    assert!(
        rules.contains("8094 :") && rules.contains("8095 :"),
        "{rules}"
    );
    assert!(rules.contains("masquerade"), "{rules}");
    // An entry deleted by hand: detach still succeeds and leaves the table consistent.
    w.exec_ok(
        &topo.host,
        &[
            "nft",
            "delete",
            "element",
            "inet",
            "wharf",
            "ports4_tcp",
            "{ 8094 }",
        ],
    );
    net.detach("pod-a", None).unwrap();
    let rules = ruleset(&w, &topo.host);
    assert!(
        !rules.contains("8094 :") && rules.contains("8095 :"),
        "{rules}"
    );
    net.detach("pod-b", None).unwrap();
    assert!(!ruleset(&w, &topo.host).contains("8095 :"));
}
