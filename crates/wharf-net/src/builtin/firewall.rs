//! The built-in network's nftables rules, generated whole from the pods on the network and
//! applied as one atomic transaction that replaces Wharf's own table (`table inet <name>`)
//! and nothing else. Regenerating instead of patching makes every operation idempotent
//! and repairs any drift (a crash between steps, a table flushed by hand) on the next
//! attach, detach or recovery.
//!
//! What the table does:
//! - masquerade: traffic from the pod subnet to anywhere outside it leaves with the host's
//!   address;
//! - port mappings: packets to a local address of the host (`fib daddr type local`) on a
//!   mapped port are DNATed to the pod, from outside (prerouting) and from the host itself
//!   (output). The mappings live in maps keyed by port (and by host address for mappings
//!   bound to one), so the rule count does not grow with pods;
//! - localhost: IPv4 connections from the host to 127.0.0.1:<host port> reach the pod too
//!   (as with CNI's portmap and podman): they are DNATed in output and masqueraded behind
//!   the gateway, which needs `route_localnet` on the bridge. Because that sysctl would also
//!   let pods send packets to the host's 127.0.0.0/8 services (CVE-2020-8558), such packets
//!   arriving from the bridge are dropped before connection tracking sees them. IPv6 has no
//!   `route_localnet`: ::1 is left alone;
//! - hairpin: DNATed traffic from a pod to a pod (also to itself) is masqueraded behind the
//!   gateway, so replies come back through the host and match the connection.

use std::fmt::Write;

use super::record::PodRecord;
use crate::ipnet::IpNet;
use crate::types::{PortMapping, Protocol};

/// What the rules are generated from.
pub struct Spec<'a> {
    /// The table name (in family inet).
    pub table: &'a str,
    /// The bridge (packets from pods arrive on it).
    pub bridge: &'a str,
    /// IPv4 subnet of the network.
    pub subnet: IpNet,
    /// IPv6 subnet, if the network is dual-stack.
    pub subnet6: Option<IpNet>,
    /// Pods on the network (attaching or attached).
    pub pods: &'a [PodRecord],
}

const PROTOS: [Protocol; 2] = [Protocol::Tcp, Protocol::Udp];

/// The family-specific words: (map suffix, address type, nft family keyword, meta nfproto).
fn fam(v6: bool) -> (&'static str, &'static str, &'static str) {
    if v6 {
        ("6", "ipv6_addr", "ip6")
    } else {
        ("4", "ipv4_addr", "ip")
    }
}

/// The map elements of one family and protocol: (with host address, any host address).
fn elements(spec: &Spec<'_>, v6: bool, proto: Protocol) -> (Vec<String>, Vec<String>) {
    let (mut bound, mut any) = (Vec::new(), Vec::new());
    for pod in spec.pods {
        let Some(pod_ip) = pod.ips.iter().find(|n| n.is_ipv6() == v6).map(|n| n.addr) else {
            continue;
        };
        for pm in pod.port_mappings.iter().filter(|pm| pm.protocol == proto) {
            let PortMapping {
                host_port,
                container_port,
                host_ip,
                ..
            } = pm;
            match host_ip {
                Some(h) if h.is_ipv6() == v6 => {
                    bound.push(format!("{h} . {host_port} : {pod_ip} . {container_port}"))
                }
                Some(_) => {}
                None => any.push(format!("{host_port} : {pod_ip} . {container_port}")),
            }
        }
    }
    (bound, any)
}

/// The whole transaction: create the table if missing (so the delete cannot fail), delete
/// it, and define it anew, with its [`shape_tag`] as the table's comment.
pub fn ruleset(spec: &Spec<'_>) -> String {
    let t = spec.table;
    let head = format!("table inet {t} {{\n");
    untagged(spec).replacen(
        &head,
        &format!("{head}  comment \"{}\"\n", shape_tag(spec)),
        1,
    )
}

/// A fingerprint of everything in the table but the pods' map entries (configuration and
/// this version's rules). A table carrying the current tag only needs its map entries
/// changed when a pod comes or goes; any other table (none, an older Wharf's, another
/// configuration's) is rewritten whole.
pub fn shape_tag(spec: &Spec<'_>) -> String {
    let shape = untagged(&Spec { pods: &[], ..*spec });
    format!("wharf-shape-{:016x}", super::fnv64(&[&shape]))
}

fn untagged(spec: &Spec<'_>) -> String {
    let t = spec.table;
    let mut s = String::new();
    let _ = writeln!(
        s,
        "add table inet {t}\ndelete table inet {t}\ntable inet {t} {{"
    );
    let mut families = vec![(false, spec.subnet.trunc())];
    if let Some(s6) = spec.subnet6 {
        families.push((true, s6.trunc()));
    }
    for (v6, _) in &families {
        let (sfx, addr_ty, _) = fam(*v6);
        for proto in PROTOS {
            let p = proto.as_str();
            let (bound, any) = elements(spec, *v6, proto);
            let _ = writeln!(
                s,
                "  map ports{sfx}_host_{p} {{\n    type {addr_ty} . inet_service : {addr_ty} . inet_service"
            );
            if !bound.is_empty() {
                let _ = writeln!(s, "    elements = {{ {} }}", bound.join(", "));
            }
            let _ = writeln!(s, "  }}");
            let _ = writeln!(
                s,
                "  map ports{sfx}_{p} {{\n    type inet_service : {addr_ty} . inet_service"
            );
            if !any.is_empty() {
                let _ = writeln!(s, "    elements = {{ {} }}", any.join(", "));
            }
            let _ = writeln!(s, "  }}");
        }
    }
    let _ = writeln!(s, "  chain portmaps {{");
    for (v6, _) in &families {
        let (sfx, _, kw) = fam(*v6);
        for proto in PROTOS {
            let p = proto.as_str();
            let _ = writeln!(
                s,
                "    meta nfproto {} meta l4proto {p} dnat {kw} to {kw} daddr . {p} dport map @ports{sfx}_host_{p}",
                if *v6 { "ipv6" } else { "ipv4" }
            );
            let _ = writeln!(
                s,
                "    meta nfproto {} meta l4proto {p} dnat {kw} to {p} dport map @ports{sfx}_{p}",
                if *v6 { "ipv6" } else { "ipv4" }
            );
        }
    }
    let _ = writeln!(s, "  }}");
    let _ = writeln!(
        s,
        "  chain prerouting {{\n    type nat hook prerouting priority dstnat; policy accept;\n    fib daddr type local jump portmaps\n  }}"
    );
    let _ = writeln!(
        s,
        "  chain output {{\n    type nat hook output priority -100; policy accept;\n    ip6 daddr ::1 return\n    fib daddr type local jump portmaps\n  }}"
    );
    let _ = writeln!(
        s,
        "  chain localnet_guard {{\n    type filter hook prerouting priority raw; policy accept;\n    iifname \"{}\" ip daddr 127.0.0.0/8 drop\n  }}",
        spec.bridge
    );
    let _ = writeln!(
        s,
        "  chain postrouting {{\n    type nat hook postrouting priority srcnat; policy accept;"
    );
    for (v6, net) in &families {
        let (_, _, kw) = fam(*v6);
        let _ = writeln!(
            s,
            "    {kw} saddr {net} {kw} daddr {net} ct status dnat masquerade\n    {kw} saddr {net} {kw} daddr != {net} masquerade"
        );
        if !v6 {
            let _ = writeln!(
                s,
                "    ip saddr 127.0.0.0/8 ip daddr {net} ct status dnat masquerade"
            );
        }
    }
    let _ = writeln!(s, "  }}\n}}");
    s
}

/// The map entries of one pod: (map, key, value).
fn pod_entries(spec: &Spec<'_>, pod: &PodRecord) -> Vec<(String, String, String)> {
    let mut out = Vec::new();
    let mut fams = vec![false];
    if spec.subnet6.is_some() {
        fams.push(true);
    }
    for v6 in fams {
        let (sfx, _, _) = fam(v6);
        for proto in PROTOS {
            let p = proto.as_str();
            let one = Spec {
                pods: std::slice::from_ref(pod),
                ..*spec
            };
            let (bound, any) = elements(&one, v6, proto);
            for (map, elems) in [
                (format!("ports{sfx}_host_{p}"), bound),
                (format!("ports{sfx}_{p}"), any),
            ] {
                for e in elems {
                    let (k, v) = e.split_once(" : ").expect("key : value");
                    out.push((map.clone(), k.to_string(), v.to_string()));
                }
            }
        }
    }
    out
}

/// The fast update for one pod coming: add its map entries, leaving table, chains and
/// hooks alone (rewriting them makes the kernel wait for RCU grace periods). None for a
/// pod without port mappings (masquerade and hairpin rules are per subnet). The command
/// fails, changing nothing, if a map is missing; the caller then applies the whole
/// [`ruleset`].
pub fn add_pod(spec: &Spec<'_>, pod: &PodRecord) -> Option<String> {
    let t = spec.table;
    let entries = pod_entries(spec, pod);
    (!entries.is_empty()).then(|| {
        entries
            .iter()
            .map(|(m, k, v)| format!("add element inet {t} {m} {{ {k} : {v} }}\n"))
            .collect()
    })
}

/// The fast update for one pod going: delete its map entries (nothing, for a pod without
/// port mappings: masquerade and hairpin rules are per subnet). Fails if an entry is
/// missing; the caller then applies the whole [`ruleset`].
pub fn remove_pod(spec: &Spec<'_>, pod: &PodRecord) -> Option<String> {
    let t = spec.table;
    let entries = pod_entries(spec, pod);
    (!entries.is_empty()).then(|| {
        entries
            .iter()
            .map(|(m, k, _)| format!("delete element inet {t} {m} {{ {k} }}\n"))
            .collect()
    })
}

/// The commands removing the table (for removing the network).
pub fn delete_table(table: &str) -> String {
    format!("add table inet {table}\ndelete table inet {table}\n")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::builtin::record::Phase;

    #[test]
    fn ruleset_maps_each_pods_ports_by_family_protocol_and_host_address() {
        let pm = |h, c, proto, ip: Option<&str>| PortMapping {
            host_port: h,
            container_port: c,
            protocol: proto,
            host_ip: ip.map(|s| s.parse().unwrap()),
        };
        let pods = vec![PodRecord {
            pod_id: "a".into(),
            phase: Phase::Attached,
            netns: "/x".into(),
            ifname: "eth0".into(),
            host_veth: "wh0".into(),
            ips: vec![
                "10.88.0.2/16".parse().unwrap(),
                "fd00::2/64".parse().unwrap(),
            ],
            mac: None,
            port_mappings: vec![
                pm(8080, 80, Protocol::Tcp, None),
                pm(5353, 53, Protocol::Udp, Some("198.51.100.1")),
            ],
        }];
        let spec = Spec {
            table: "wharf",
            bridge: "wharf0",
            subnet: "10.88.0.0/16".parse().unwrap(),
            subnet6: Some("fd00::/64".parse().unwrap()),
            pods: &pods,
        };
        let r = ruleset(&spec);
        assert!(
            r.starts_with("add table inet wharf\ndelete table inet wharf\n"),
            "{r}"
        );
        assert!(r.contains("elements = { 8080 : 10.88.0.2 . 80 }"), "{r}");
        assert!(r.contains("elements = { 8080 : fd00::2 . 80 }"), "{r}");
        assert!(
            r.contains("elements = { 198.51.100.1 . 5353 : 10.88.0.2 . 53 }"),
            "{r}"
        );
        assert_eq!(
            r.matches("elements").count(),
            3,
            "the v4 host address is not in v6 maps: {r}"
        );
        assert!(r.contains("ip saddr 10.88.0.0/16 ip daddr != 10.88.0.0/16 masquerade"));
        assert!(r.contains("ip6 saddr fd00::/64 ip6 daddr fd00::/64 ct status dnat masquerade"));
        let add = add_pod(&spec, &pods[0]).unwrap();
        assert_eq!(
            add,
            "add element inet wharf ports4_tcp { 8080 : 10.88.0.2 . 80 }\n\
             add element inet wharf ports4_host_udp { 198.51.100.1 . 5353 : 10.88.0.2 . 53 }\n\
             add element inet wharf ports6_tcp { 8080 : fd00::2 . 80 }\n"
        );
        let del = remove_pod(&spec, &pods[0]).unwrap();
        assert!(
            del.contains("delete element inet wharf ports4_host_udp { 198.51.100.1 . 5353 }\n"),
            "{del}"
        );
        let mut bare = pods[0].clone();
        bare.port_mappings.clear();
        assert_eq!(add_pod(&spec, &bare), None);
        assert_eq!(remove_pod(&spec, &bare), None);
    }
}
