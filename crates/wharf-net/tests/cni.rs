//! CNI with Debian's real plugins (containernetworking-plugins in /usr/lib/cni), inside
//! test-made namespaces: the "host" namespace runs the plugins and holds the bridge and
//! their iptables rules; pods and an "outside" namespace as in the built-in tests.

mod common;

use std::path::{Path, PathBuf};
use std::time::Duration;

use common::*;
use wharf_net::cni::{CniConfig, CniNetwork, GcArgs, cache};
use wharf_net::types::Bandwidth;
use wharf_net::{AttachOptions, Error, PortMapping, Protocol};

const DEBIAN_CNI: &str = "/usr/lib/cni";

struct Cni {
    cfg: CniConfig,
    conf_dir: PathBuf,
    ipam_dir: PathBuf,
}

fn setup(w: &World, topo: &Topology) -> Cni {
    assert!(
        Path::new(DEBIAN_CNI).join("bridge").exists(),
        "install Debian's containernetworking-plugins (scripts/test.d/30-net.pkgs)"
    );
    let conf_dir = w.path().join("net.d");
    std::fs::create_dir_all(&conf_dir).unwrap();
    let mut cfg = CniConfig::new(w.path().join("locks"));
    cfg.conf_dirs = vec![conf_dir.clone()];
    cfg.bin_dirs = vec![w.path().join("bin"), DEBIAN_CNI.into()];
    cfg.cache_dir = w.path().join("cni-cache");
    cfg.host_netns = Some(topo.host.clone());
    Cni {
        cfg,
        ipam_dir: w.path().join("host-local"),
        conf_dir,
    }
}

/// The chain the judges name: bridge + host-local, portmap, firewall, tuning.
fn bridge_chain(c: &Cni, name: &str) -> String {
    format!(
        r#"{{"cniVersion":"1.0.0","name":"{name}","plugins":[
  {{"type":"bridge","bridge":"cni-test0","isGateway":true,"ipMasq":true,"hairpinMode":true,
    "ipam":{{"type":"host-local","ranges":[[{{"subnet":"10.89.0.0/24"}}]],"routes":[{{"dst":"0.0.0.0/0"}}],
             "dataDir":"{}"}}}},
  {{"type":"portmap","capabilities":{{"portMappings":true}},"snat":true}},
  {{"type":"firewall","backend":"iptables"}},
  {{"type":"tuning","sysctl":{{"net.ipv4.conf.eth0.arp_notify":"1"}}}}
]}}"#,
        c.ipam_dir.display()
    )
}

fn write_conf(c: &Cni, file: &str, text: &str) {
    std::fs::write(c.conf_dir.join(file), text).unwrap();
}

fn leases(c: &Cni, net: &str) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(c.ipam_dir.join(net))
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.parse::<std::net::IpAddr>().is_ok())
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

fn cache_files(c: &Cni) -> Vec<String> {
    std::fs::read_dir(c.cfg.cache_dir.join("results"))
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default()
}

/// A fake plugin (shell script) in the first plugin directory, for what Debian's plugins
/// cannot show: spec 1.1 STATUS/GC, hangs, crafted errors. It logs each call.
fn fake_plugin(c: &Cni, name: &str, body: &str) -> PathBuf {
    let dir = &c.cfg.bin_dirs[0];
    std::fs::create_dir_all(dir).unwrap();
    let log = dir.join(format!("{name}.log"));
    let script = format!(
        "#!/bin/sh\nin=$(cat)\necho \"$CNI_COMMAND $CNI_CONTAINERID $in\" >> {}\n{body}\n",
        log.display()
    );
    let p = dir.join(name);
    std::fs::write(&p, script).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
    log
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
fn the_debian_bridge_chain_connects_pods_to_each_other_the_outside_and_mapped_ports() {
    let mut w = World::new("cni-chain");
    let topo = w.topology();
    let c = setup(&w, &topo);
    write_conf(&c, "10-test.conflist", &bridge_chain(&c, "testnet"));
    let net = CniNetwork::load(c.cfg.clone(), None)
        .unwrap()
        .expect("a CNI network");
    assert_eq!(net.name(), "testnet");
    net.validate().unwrap();
    let a = w.netns("a").path;
    let b = w.netns("b").path;
    let opts = AttachOptions {
        port_mappings: vec![tcp(8080, 80)],
        cni_args: vec![("K8S_POD_NAMESPACE".into(), "default".into())],
        ..Default::default()
    };
    let att_a = net.attach("pod-a", &a, &opts).unwrap();
    let att_b = net.attach("pod-b", &b, &AttachOptions::default()).unwrap();
    let (ip_a, ip_b) = (
        att_a.primary_ip().unwrap().to_string(),
        att_b.primary_ip().unwrap().to_string(),
    );
    assert!(
        ip_a.starts_with("10.89.0.") && ip_b.starts_with("10.89.0."),
        "{ip_a} {ip_b}"
    );
    assert_eq!(att_a.network, "testnet");
    assert_eq!(leases(&c, "testnet").len(), 2);
    // tuning ran inside the pod.
    assert_eq!(
        w.exec_ok(&a, &["cat", "/proc/sys/net/ipv4/conf/eth0/arp_notify"])
            .trim(),
        "1"
    );

    assert!(ping(&w, &a, &ip_b), "a pings b");
    let srv = serve(listen_tcp(&b, "0.0.0.0:7000"), 1, "b over cni");
    assert_eq!(tcp_get(&a, &format!("{ip_b}:7000")).unwrap(), "b over cni");
    srv.join().unwrap();

    assert!(ping(&w, &a, OUTSIDE_IP), "a pings the outside");
    let srv = serve(listen_tcp(&topo.outside, "0.0.0.0:7001"), 1, "outside");
    assert_eq!(
        tcp_get(&a, &format!("{OUTSIDE_IP}:7001")).unwrap(),
        "outside"
    );
    assert_eq!(
        srv.join().unwrap()[0].ip().to_string(),
        HOST_IP,
        "masqueraded"
    );

    let srv = serve(listen_tcp(&a, "0.0.0.0:80"), 2, "a via portmap");
    assert_eq!(
        tcp_get(&topo.outside, &format!("{HOST_IP}:8080")).unwrap(),
        "a via portmap"
    );
    assert_eq!(
        tcp_get(&b, &format!("{HOST_IP}:8080")).unwrap(),
        "a via portmap"
    );
    srv.join().unwrap();

    // The plugins ran in the test's host namespace, not in the machine's.
    let own_nat = std::process::Command::new("iptables-save")
        .args(["-t", "nat"])
        .output()
        .unwrap();
    assert!(!String::from_utf8_lossy(&own_nat.stdout).contains("10.89.0."));
    assert!(
        w.exec_ok(&topo.host, &["iptables-save", "-t", "nat"])
            .contains("10.89.0.")
    );

    // The result cache is libcni's.
    let cached = cache::read(&cache::path(&c.cfg.cache_dir, "testnet", "pod-a", "eth0"))
        .unwrap()
        .expect("cached");
    assert_eq!(cached.kind, "cniCacheV1");
    assert_eq!(cached.capability_args["portMappings"][0]["hostPort"], 8080);
    assert_eq!(cached.cni_args[0], ("IgnoreUnknown".into(), "1".into()));
    assert!(
        cached.result["ips"][0]["address"]
            .as_str()
            .unwrap()
            .starts_with(&ip_a)
    );

    // CHECK runs every plugin against the cached result. (Debian's portmap 1.1.1 fails
    // CHECK for a pod with mappings on hosts without ip6tables chains, a plugin bug, so
    // the pod without mappings is checked.)
    net.check("pod-b", &b).unwrap();
    w.exec_ok(&b, &["ip", "addr", "flush", "dev", "eth0"]);
    let e = net.check("pod-b", &b).unwrap_err();
    assert!(
        matches!(e, Error::Plugin { .. }),
        "CHECK notices the lost address: {e}"
    );
    net.detach("pod-a", Some(&a)).unwrap();
    net.detach("pod-b", Some(&b)).unwrap();
    assert!(leases(&c, "testnet").is_empty());
    assert!(cache_files(&c).is_empty());
    assert!(tcp_get(&topo.outside, &format!("{HOST_IP}:8080")).is_err());
    net.detach("pod-a", Some(&a)).unwrap();
}

/// Pods attach to one network at once (ADDs share the network's lock, as containerd
/// runs them): four ADDs of a plugin that takes 400 ms end together, not one after the
/// other, and the Debian chain gives four pods attaching at once four leases.
#[test]
fn pods_attach_to_a_network_at_once() {
    let mut w = World::new("cni-concurrent");
    let topo = w.topology();
    let c = setup(&w, &topo);
    let log = fake_plugin(
        &c,
        "slow",
        r#"case "$CNI_COMMAND" in ADD) sleep 0.4; echo '{"cniVersion":"1.0.0"}';; esac"#,
    );
    write_conf(
        &c,
        "10-slow.conflist",
        r#"{"cniVersion":"1.0.0","name":"slow","plugins":[{"type":"slow"}]}"#,
    );
    write_conf(&c, "20-test.conflist", &bridge_chain(&c, "testnet"));
    let pods: Vec<(String, PathBuf)> = (0..4)
        .map(|i| (format!("pod-{i}"), w.netns(&format!("p{i}")).path))
        .collect();
    let attach_all = |net: &str| {
        let net = CniNetwork::load(c.cfg.clone(), Some(net)).unwrap().unwrap();
        let t = std::time::Instant::now();
        let ips: Vec<String> = std::thread::scope(|s| {
            let hs: Vec<_> = pods
                .iter()
                .map(|(id, ns)| {
                    let net = &net;
                    s.spawn(move || net.attach(id, ns, &AttachOptions::default()).unwrap())
                })
                .collect();
            hs.into_iter()
                .map(|h| {
                    h.join()
                        .unwrap()
                        .primary_ip()
                        .map(|ip| ip.to_string())
                        .unwrap_or_default()
                })
                .collect()
        });
        (net, t.elapsed(), ips)
    };
    let (slow, took, _) = attach_all("slow");
    assert_eq!(std::fs::read_to_string(&log).unwrap().lines().count(), 4);
    assert!(
        took < Duration::from_millis(1200),
        "four 400 ms ADDs took {took:?}: they ran one after the other"
    );
    let (net, _, mut ips) = attach_all("testnet");
    ips.sort();
    ips.dedup();
    assert_eq!(ips.len(), 4, "{ips:?}");
    assert!(ips.iter().all(|ip| ip.starts_with("10.89.0.")), "{ips:?}");
    assert_eq!(leases(&c, "testnet").len(), 4);
    std::thread::scope(|s| {
        for (id, ns) in &pods {
            let (net, slow) = (&net, &slow);
            s.spawn(move || {
                net.detach(id, Some(ns)).unwrap();
                slow.detach(id, Some(ns)).unwrap();
            });
        }
    });
    assert!(leases(&c, "testnet").is_empty());
    assert!(cache_files(&c).is_empty());
}

#[test]
fn del_after_a_restart_works_from_the_cache_even_without_the_config_file() {
    let mut w = World::new("cni-restart");
    let topo = w.topology();
    let c = setup(&w, &topo);
    write_conf(&c, "10-test.conflist", &bridge_chain(&c, "testnet"));
    let a = w.netns("a").path;
    {
        let net = CniNetwork::load(c.cfg.clone(), None).unwrap().unwrap();
        net.attach(
            "pod-a",
            &a,
            &AttachOptions {
                port_mappings: vec![tcp(8081, 80)],
                ..Default::default()
            },
        )
        .unwrap();
    } // "Wharf exits".
    let veths_before = World::link_names(&topo.host);
    assert!(
        veths_before.iter().any(|n| n.starts_with("veth")),
        "{veths_before:?}"
    );
    std::fs::remove_file(c.conf_dir.join("10-test.conflist")).unwrap();
    // A new process: only the cache knows the network now.
    assert!(CniNetwork::load(c.cfg.clone(), None).unwrap().is_none());
    let net = CniNetwork::load(c.cfg.clone(), Some("testnet"))
        .unwrap()
        .unwrap();
    net.detach("pod-a", Some(&a)).unwrap();
    assert!(
        leases(&c, "testnet").is_empty(),
        "host-local got the cached result"
    );
    assert!(cache_files(&c).is_empty());
    assert!(
        !World::link_names(&topo.host)
            .iter()
            .any(|n| n.starts_with("veth"))
    );
    assert_eq!(World::link_names(&a), vec!["lo"]);
    let nat = w.exec_ok(&topo.host, &["iptables-save", "-t", "nat"]);
    assert!(!nat.contains("8081"), "portmap's rules are gone: {nat}");
    // And the network is unknown once nothing is cached.
    assert!(matches!(
        CniNetwork::load(c.cfg.clone(), Some("testnet")),
        Err(Error::NotFound(_))
    ));
}

#[test]
fn a_chain_whose_second_plugin_fails_leaves_nothing_behind() {
    let mut w = World::new("cni-fail");
    let topo = w.topology();
    let c = setup(&w, &topo);
    let conf = bridge_chain(&c, "failnet").replace(
        r#"{"type":"portmap","capabilities":{"portMappings":true},"snat":true}"#,
        r#"{"type":"tuning","sysctl":{"net.ipv4.conf.eth0.no_such_knob":"1"}}"#,
    );
    write_conf(&c, "10-fail.conflist", &conf);
    let net = CniNetwork::load(c.cfg.clone(), None).unwrap().unwrap();
    let a = w.netns("a").path;
    let host_links = World::link_names(&topo.host);
    let err = net
        .attach("pod-a", &a, &AttachOptions::default())
        .unwrap_err();
    match &err {
        Error::Plugin {
            plugin,
            command,
            msg,
            ..
        } => {
            assert_eq!((plugin.as_str(), command.as_str()), ("tuning", "ADD"));
            assert!(msg.contains("no_such_knob"), "{err}");
        }
        other => panic!("expected the plugin's error, got {other}"),
    }
    assert!(leases(&c, "failnet").is_empty(), "the address went back");
    assert!(cache_files(&c).is_empty());
    assert_eq!(World::link_names(&a), vec!["lo"], "no eth0 left in the pod");
    let now: Vec<String> = World::link_names(&topo.host)
        .into_iter()
        .filter(|n| n != "cni-test0")
        .collect();
    assert_eq!(now, host_links, "no veth left on the host");
}

#[test]
fn ptp_with_bandwidth_limits_and_the_loopback_plugin() {
    let mut w = World::new("cni-ptp");
    let topo = w.topology();
    let c = setup(&w, &topo);
    write_conf(
        &c,
        "10-ptp.conflist",
        &format!(
            r#"{{"cniVersion":"1.0.0","name":"ptpnet","plugins":[
  {{"type":"ptp","ipMasq":true,"ipam":{{"type":"host-local","subnet":"10.90.0.0/24","routes":[{{"dst":"0.0.0.0/0"}}],"dataDir":"{}"}}}},
  {{"type":"bandwidth","capabilities":{{"bandwidth":true}}}}]}}"#,
            c.ipam_dir.display()
        ),
    );
    write_conf(
        &c,
        "20-lo.conf",
        r#"{"cniVersion":"1.0.0","name":"lo","type":"loopback"}"#,
    );
    let net = CniNetwork::load(c.cfg.clone(), None).unwrap().unwrap();
    assert_eq!(net.name(), "ptpnet", "first file is the default");
    let a = w.netns("a").path;
    let opts = AttachOptions {
        bandwidth: Some(Bandwidth {
            ingress_rate: Some(8_000_000),
            ingress_burst: Some(80_000_000),
            egress_rate: Some(8_000_000),
            egress_burst: Some(80_000_000),
        }),
        ..Default::default()
    };
    net.attach("pod-a", &a, &opts).unwrap();
    assert!(ping(&w, &a, OUTSIDE_IP), "ptp routes and masquerades");
    let qdiscs = w.exec_ok(&topo.host, &["tc", "qdisc", "show"]);
    assert!(
        qdiscs.contains("tbf"),
        "bandwidth shaped the host side: {qdiscs}"
    );
    net.detach("pod-a", Some(&a)).unwrap();
    let links = World::link_names(&topo.host);
    assert!(
        !links
            .iter()
            .any(|l| l.starts_with("bwp") || l.starts_with("veth")),
        "{links:?}"
    );

    // loopback: brings lo up.
    let lo = CniNetwork::load(c.cfg.clone(), Some("lo"))
        .unwrap()
        .unwrap();
    w.exec_ok(&a, &["ip", "link", "set", "lo", "down"]);
    lo.attach(
        "pod-a",
        &a,
        &AttachOptions {
            ifname: "lo".into(),
            ..Default::default()
        },
    )
    .unwrap();
    let state = w.exec_ok(&a, &["ip", "-o", "link", "show", "lo"]);
    assert!(state.contains("UP"), "{state}");
    lo.detach("pod-a", Some(&a)).unwrap();
}

#[test]
fn plugin_errors_carry_code_message_and_details_and_hangs_time_out() {
    let mut w = World::new("cni-errors");
    let topo = w.topology();
    let mut c = setup(&w, &topo);
    fake_plugin(
        &c,
        "failer",
        r#"case "$CNI_COMMAND" in DEL) exit 0;; esac
echo '{"cniVersion":"1.0.0","code":107,"msg":"no room","details":"pool exhausted"}'; exit 1"#,
    );
    fake_plugin(
        &c,
        "sleeper",
        "case \"$CNI_COMMAND\" in DEL) exit 0;; esac\nexec sleep 30",
    );
    write_conf(
        &c,
        "10-f.conflist",
        r#"{"cniVersion":"1.0.0","name":"f","plugins":[{"type":"failer"}]}"#,
    );
    write_conf(
        &c,
        "20-s.conflist",
        r#"{"cniVersion":"1.0.0","name":"s","plugins":[{"type":"sleeper"}]}"#,
    );
    write_conf(
        &c,
        "30-m.conflist",
        r#"{"cniVersion":"1.0.0","name":"m","plugins":[{"type":"missing-plugin"}]}"#,
    );
    let a = w.netns("a").path;
    let f = CniNetwork::load(c.cfg.clone(), Some("f")).unwrap().unwrap();
    let e = f
        .attach("pod-a", &a, &AttachOptions::default())
        .unwrap_err();
    match &e {
        Error::Plugin {
            code, msg, details, ..
        } => {
            assert_eq!(
                (*code, msg.as_str(), details.as_str()),
                (107, "no room", "pool exhausted")
            )
        }
        other => panic!("{other}"),
    }
    assert!(
        e.to_string().contains("failer") && e.to_string().contains("107"),
        "{e}"
    );

    c.cfg.timeout = Duration::from_millis(300);
    let s = CniNetwork::load(c.cfg.clone(), Some("s")).unwrap().unwrap();
    let e = s
        .attach("pod-a", &a, &AttachOptions::default())
        .unwrap_err();
    assert!(e.to_string().contains("timed out"), "{e}");

    let m = CniNetwork::load(c.cfg.clone(), Some("m")).unwrap().unwrap();
    let e = m
        .attach("pod-a", &a, &AttachOptions::default())
        .unwrap_err();
    assert!(e.to_string().contains("missing-plugin"), "{e}");
    assert!(matches!(
        CniNetwork::load(c.cfg.clone(), Some("nope")),
        Err(Error::NotFound(_))
    ));
}

#[test]
fn status_and_gc_of_spec_1_1_and_version_negotiation() {
    let mut w = World::new("cni-1-1");
    let topo = w.topology();
    let c = setup(&w, &topo);
    let marker = w.path().join("not-ready");
    let log = fake_plugin(
        &c,
        "fake11",
        &format!(
            r#"case "$CNI_COMMAND" in
VERSION) echo '{{"cniVersion":"1.1.0","supportedVersions":["0.4.0","1.0.0","1.1.0"]}}';;
ADD) echo '{{"cniVersion":"1.1.0","interfaces":[{{"name":"eth0","sandbox":"'$CNI_NETNS'"}}],"ips":[{{"address":"10.91.0.5/24","interface":0}}]}}';;
STATUS) if [ -e {} ]; then echo '{{"code":50,"msg":"plugin not available"}}'; exit 1; fi;;
esac
exit 0"#,
            marker.display()
        ),
    );
    write_conf(
        &c,
        "10-n.conflist",
        r#"{"cniVersion":"1.0.0","cniVersions":["1.0.0","1.1.0"],"name":"n11","plugins":[{"type":"fake11"},{"type":"tuning"}]}"#,
    );
    let net = CniNetwork::load(c.cfg.clone(), None).unwrap().unwrap();
    assert_eq!(net.list().cni_version, "1.1.0");
    assert!(
        net.plugin_versions("bridge")
            .unwrap()
            .contains(&"1.0.0".to_string())
    );
    // Debian's tuning (1.0.0 at most) cannot run a 1.1.0 list: validation says so.
    let e = net.validate().unwrap_err();
    assert!(
        e.to_string().contains("tuning") && e.to_string().contains("1.1.0"),
        "{e}"
    );

    net.status().unwrap();
    std::fs::write(&marker, "").unwrap();
    let e = net.status().unwrap_err();
    assert!(matches!(&e, Error::Plugin { code: 50, .. }), "{e}");
    std::fs::remove_file(&marker).unwrap();

    // Only fake11 in the list for attachments (tuning would refuse 1.1.0).
    write_conf(
        &c,
        "10-n.conflist",
        r#"{"cniVersion":"1.1.0","name":"n11","plugins":[{"type":"fake11"}]}"#,
    );
    let net = CniNetwork::load(c.cfg.clone(), None).unwrap().unwrap();
    let a = w.netns("a").path;
    let b = w.netns("b").path;
    let att = net.attach("pod-a", &a, &AttachOptions::default()).unwrap();
    assert_eq!(att.primary_ip().unwrap().to_string(), "10.91.0.5");
    net.attach("pod-b", &b, &AttachOptions::default()).unwrap();
    assert_eq!(cache_files(&c).len(), 2);
    net.gc(&GcArgs {
        valid_attachments: vec![("pod-a".into(), "eth0".into())],
    })
    .unwrap();
    assert_eq!(cache_files(&c), vec!["n11-pod-a-eth0".to_string()]);
    let calls = std::fs::read_to_string(&log).unwrap();
    assert!(
        calls.lines().any(|l| l.starts_with("DEL pod-b ")),
        "stale pod-b was deleted: {calls}"
    );
    let gc = calls
        .lines()
        .find(|l| l.starts_with("GC "))
        .expect("GC sent");
    assert!(
        gc.contains(r#""cni.dev/valid-attachments":[{"containerID":"pod-a","ifname":"eth0"}]"#),
        "{gc}"
    );
    // The pod's DEL got the cached result as prevResult.
    let del = calls.lines().find(|l| l.starts_with("DEL pod-b ")).unwrap();
    assert!(
        del.contains(r#""prevResult":{"#) && del.contains("10.91.0.5"),
        "{del}"
    );
}
