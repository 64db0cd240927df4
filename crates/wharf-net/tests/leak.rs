//! 200 pod lifecycles (namespace, attach with a port mapping, detach, namespace removed)
//! must leave nothing behind: interfaces, addresses, leases, records, rules, cache files,
//! mounts.

mod common;

use std::path::Path;

use common::*;
use wharf_net::cni::{CniConfig, CniNetwork};
use wharf_net::{AttachOptions, BuiltinConfig, BuiltinNetwork, PortMapping, Protocol, netns};

const CYCLES: usize = 200;

fn opts() -> AttachOptions {
    AttachOptions {
        port_mappings: vec![PortMapping {
            host_port: 8080,
            container_port: 80,
            protocol: Protocol::Tcp,
            host_ip: None,
        }],
        ..Default::default()
    }
}

/// What the host namespace looks like: interfaces and their addresses.
fn host_state(w: &World, host: &Path) -> (Vec<String>, String) {
    let addrs = w.exec_ok(host, &["ip", "-o", "addr", "show"]);
    // Drop the per-interface lifetime details; keep interface and address.
    let addrs: Vec<String> = addrs
        .lines()
        .map(|l| l.split_whitespace().take(4).collect::<Vec<_>>().join(" "))
        .collect();
    (World::link_names(host), addrs.join("\n"))
}

fn files_in(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| !n.starts_with('.') && !n.starts_with("last_reserved") && n != "lock")
                .collect()
        })
        .unwrap_or_default()
}

fn pins(w: &World) -> usize {
    let info = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    let pod = w.run_dir.join("netns/pod");
    let pod = pod.to_str().unwrap();
    info.lines()
        .filter(|l| l.split(' ').nth(4) == Some(pod))
        .count()
}

fn nft_rules(w: &World, host: &Path) -> String {
    w.exec_ok(host, &["nft", "list", "ruleset"])
}

#[test]
fn builtin_network_200_cycles_leak_nothing() {
    let mut w = World::new("leak-builtin");
    let topo = w.topology();
    let mut cfg = BuiltinConfig::new(w.path().join("state"));
    cfg.host_netns = Some(topo.host.clone());
    let net = BuiltinNetwork::new(cfg).unwrap();
    let mut baseline = None;
    for i in 0..CYCLES {
        let ns = netns::create(&w.run_dir, "pod").unwrap();
        let att = net.attach(&format!("pod-{i}"), &ns.path, &opts()).unwrap();
        if i % 50 == 0 {
            assert!(
                ping(&w, &ns.path, "10.88.0.1"),
                "cycle {i}: the pod is connected"
            );
            assert!(
                nft_rules(&w, &topo.host)
                    .contains(&format!("8080 : {} . 80", att.primary_ip().unwrap()))
            );
        }
        net.detach(&format!("pod-{i}"), Some(&ns.path)).unwrap();
        netns::remove_path(&ns.path).unwrap();
        if i == 0 {
            // After the first cycle the bridge and the table exist: that is the baseline.
            baseline = Some((host_state(&w, &topo.host), nft_rules(&w, &topo.host)));
        }
    }
    let (state, rules) = baseline.unwrap();
    assert_eq!(
        host_state(&w, &topo.host),
        state,
        "interfaces and addresses"
    );
    assert_eq!(state.0, vec!["lo", "uplink", "wharf0"]);
    assert_eq!(nft_rules(&w, &topo.host), rules, "rules");
    assert!(!rules.contains("8080 :"), "no port mapping left: {rules}");
    assert!(net.ipam().leases().unwrap().is_empty(), "leases");
    assert!(files_in(&w.path().join("state/pods")).is_empty(), "records");
    assert_eq!(pins(&w), 0, "pinned namespaces");
    assert!(!w.run_dir.join("netns/pod").exists(), "namespace file");
    let bridge_ports = w.exec_ok(
        &topo.host,
        &["ip", "-o", "link", "show", "master", "wharf0"],
    );
    assert!(
        bridge_ports.trim().is_empty(),
        "bridge ports: {bridge_ports}"
    );
}

#[test]
fn cni_bridge_chain_200_cycles_leak_nothing() {
    let mut w = World::new("leak-cni");
    let topo = w.topology();
    let conf_dir = w.path().join("net.d");
    std::fs::create_dir_all(&conf_dir).unwrap();
    let ipam = w.path().join("host-local");
    std::fs::write(
        conf_dir.join("10-chain.conflist"),
        format!(
            r#"{{"cniVersion":"1.0.0","name":"chain","plugins":[
  {{"type":"bridge","bridge":"cni-leak0","isGateway":true,"ipMasq":true,"hairpinMode":true,
    "ipam":{{"type":"host-local","ranges":[[{{"subnet":"10.93.0.0/24"}}]],"routes":[{{"dst":"0.0.0.0/0"}}],"dataDir":"{}"}}}},
  {{"type":"portmap","capabilities":{{"portMappings":true}},"snat":true}},
  {{"type":"firewall","backend":"iptables"}},
  {{"type":"tuning","sysctl":{{"net.ipv4.conf.eth0.arp_notify":"1"}}}}]}}"#,
            ipam.display()
        ),
    )
    .unwrap();
    let mut cfg = CniConfig::new(w.path().join("locks"));
    cfg.conf_dirs = vec![conf_dir];
    cfg.bin_dirs = vec!["/usr/lib/cni".into()];
    cfg.cache_dir = w.path().join("cache");
    cfg.host_netns = Some(topo.host.clone());
    let net = CniNetwork::load(cfg, None).unwrap().unwrap();
    let iptables = |w: &World| {
        // Rules without counters, so only real differences show.
        w.exec_ok(&topo.host, &["iptables-save"])
            .lines()
            .filter(|l| !l.starts_with('#'))
            .map(|l| l.split(" [").next().unwrap_or(l).to_string())
            .collect::<Vec<_>>()
            .join("\n")
    };
    let mut baseline = None;
    for i in 0..CYCLES {
        let ns = netns::create(&w.run_dir, "pod").unwrap();
        net.attach(&format!("pod-{i}"), &ns.path, &opts()).unwrap();
        if i % 50 == 0 {
            assert!(
                ping(&w, &ns.path, "10.93.0.1"),
                "cycle {i}: the pod is connected"
            );
        }
        net.detach(&format!("pod-{i}"), Some(&ns.path)).unwrap();
        netns::remove_path(&ns.path).unwrap();
        if i == 0 {
            baseline = Some((host_state(&w, &topo.host), iptables(&w)));
        }
    }
    let (state, rules) = baseline.unwrap();
    assert_eq!(
        host_state(&w, &topo.host),
        state,
        "interfaces and addresses"
    );
    assert_eq!(iptables(&w), rules, "iptables rules");
    assert!(
        files_in(&ipam.join("chain")).is_empty(),
        "host-local leases"
    );
    assert!(
        files_in(&w.path().join("cache/results")).is_empty(),
        "cached results"
    );
    assert_eq!(pins(&w), 0, "pinned namespaces");
}
