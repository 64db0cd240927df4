//! What the engine passes in ([`AttachOptions`]) and gets back ([`Attachment`]) when it
//! networks a pod. The result types have the shape of a CNI 1.0 result, so a CNI result
//! deserializes straight into them and the built-in network answers in the same terms.

use std::net::IpAddr;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::ipnet::IpNet;

/// Transport protocol of a port mapping.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum Protocol {
    /// TCP (the default, as in Kubernetes).
    #[default]
    Tcp,
    /// UDP.
    Udp,
    /// SCTP.
    Sctp,
}

impl Protocol {
    /// The protocol's name as nftables spells it.
    pub fn as_str(&self) -> &'static str {
        match self {
            Protocol::Tcp => "tcp",
            Protocol::Udp => "udp",
            Protocol::Sctp => "sctp",
        }
    }
}

/// A host port forwarded to a pod port (the CNI `portMappings` capability's shape).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PortMapping {
    /// Port on the host.
    pub host_port: u16,
    /// Port in the pod.
    pub container_port: u16,
    /// Protocol.
    #[serde(default)]
    pub protocol: Protocol,
    /// Only traffic to this host address is forwarded (None: any address of the host).
    #[serde(rename = "hostIP", default, skip_serializing_if = "Option::is_none")]
    pub host_ip: Option<IpAddr>,
}

impl PortMapping {
    /// Whether two mappings claim the same host socket.
    pub fn conflicts_with(&self, other: &PortMapping) -> bool {
        self.protocol == other.protocol
            && self.host_port == other.host_port
            && match (self.host_ip, other.host_ip) {
                (None, _) | (_, None) => true,
                (Some(a), Some(b)) => a == b,
            }
    }
}

/// Bandwidth limits (the CNI `bandwidth` capability), in bits per second and bits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Bandwidth {
    /// Ingress rate, bits/s.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ingress_rate: Option<u64>,
    /// Ingress burst, bits.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ingress_burst: Option<u64>,
    /// Egress rate, bits/s.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub egress_rate: Option<u64>,
    /// Egress burst, bits.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub egress_burst: Option<u64>,
}

/// An IP range for the CNI `ipRanges` capability.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct IpRange {
    /// The subnet.
    pub subnet: IpNet,
    /// First address to hand out.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub range_start: Option<IpAddr>,
    /// Last address to hand out.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub range_end: Option<IpAddr>,
    /// Gateway.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gateway: Option<IpAddr>,
}

/// DNS settings (the CNI `dns` capability, and the DNS part of a result).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Dns {
    /// Name servers.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub nameservers: Vec<IpAddr>,
    /// Local domain.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub domain: Option<String>,
    /// Search domains.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub search: Vec<String>,
    /// resolv.conf options.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub options: Vec<String>,
}

impl Dns {
    /// Whether nothing is set.
    pub fn is_empty(&self) -> bool {
        self.nameservers.is_empty()
            && self.domain.is_none()
            && self.search.is_empty()
            && self.options.is_empty()
    }
}

/// How to network one pod.
#[derive(Debug, Clone)]
pub struct AttachOptions {
    /// Interface name inside the pod.
    pub ifname: String,
    /// Host ports forwarded to the pod.
    pub port_mappings: Vec<PortMapping>,
    /// The pod's hostname (for CNI plugins that want it as K8S_POD_NAME-like args; the
    /// engine writes /etc/hostname with [`crate::dns::write_files`]).
    pub hostname: Option<String>,
    /// DNS settings handed to CNI plugins declaring the `dns` capability.
    pub dns: Option<Dns>,
    /// Requested MAC address of the pod interface ("aa:bb:cc:dd:ee:ff").
    pub mac: Option<String>,
    /// Requested IP addresses (without prefix).
    pub ips: Vec<IpAddr>,
    /// Bandwidth limits (CNI only: plugins declaring `bandwidth`).
    pub bandwidth: Option<Bandwidth>,
    /// IP ranges (CNI only: plugins declaring `ipRanges`), a list of range sets.
    pub ip_ranges: Vec<Vec<IpRange>>,
    /// Extra CNI_ARGS (key, value) pairs, e.g. K8S_POD_NAMESPACE.
    pub cni_args: Vec<(String, String)>,
    /// Route the pod's default traffic through this network (built-in networks; false for
    /// a pod's second and later networks, which reach only their own subnet, as docker's
    /// non-primary endpoints do).
    pub default_route: bool,
}

impl Default for AttachOptions {
    fn default() -> Self {
        AttachOptions {
            ifname: "eth0".into(),
            port_mappings: Vec::new(),
            hostname: None,
            dns: None,
            mac: None,
            ips: Vec::new(),
            bandwidth: None,
            ip_ranges: Vec::new(),
            cni_args: Vec::new(),
            default_route: true,
        }
    }
}

impl AttachOptions {
    /// Check the options that do not depend on the network: interface name, ports, MAC.
    pub fn validate(&self) -> Result<()> {
        validate_ifname(&self.ifname)?;
        for (i, pm) in self.port_mappings.iter().enumerate() {
            if pm.host_port == 0 || pm.container_port == 0 {
                return Err(Error::Invalid(format!(
                    "invalid port mapping {}:{}/{}: ports must be 1-65535",
                    pm.host_port,
                    pm.container_port,
                    pm.protocol.as_str()
                )));
            }
            if let Some(other) = self.port_mappings[..i]
                .iter()
                .find(|o| o.conflicts_with(pm))
            {
                return Err(Error::Conflict(format!(
                    "port mappings {}:{}/{} and {}:{}/{} claim the same host port",
                    other.host_port,
                    other.container_port,
                    other.protocol.as_str(),
                    pm.host_port,
                    pm.container_port,
                    pm.protocol.as_str()
                )));
            }
        }
        if let Some(mac) = &self.mac {
            parse_mac(mac)?;
        }
        Ok(())
    }
}

/// Check an interface name (IFNAMSIZ, no '/', no whitespace, not "." or "..").
pub fn validate_ifname(name: &str) -> Result<()> {
    let ok = !name.is_empty()
        && name.len() < 16
        && name != "."
        && name != ".."
        && !name
            .bytes()
            .any(|b| b == b'/' || b == b':' || b.is_ascii_whitespace() || b == 0);
    if ok {
        Ok(())
    } else {
        Err(Error::Invalid(format!(
            "invalid interface name {name:?}: 1-15 characters, no '/', ':' or spaces"
        )))
    }
}

/// Parse "aa:bb:cc:dd:ee:ff".
pub fn parse_mac(s: &str) -> Result<[u8; 6]> {
    let bad = || {
        Error::Invalid(format!(
            "invalid MAC address {s:?}: expected aa:bb:cc:dd:ee:ff"
        ))
    };
    let parts: Vec<&str> = s.split(':').collect();
    if parts.len() != 6 {
        return Err(bad());
    }
    let mut mac = [0u8; 6];
    for (i, p) in parts.iter().enumerate() {
        if p.len() != 2 {
            return Err(bad());
        }
        mac[i] = u8::from_str_radix(p, 16).map_err(|_| bad())?;
    }
    if mac[0] & 1 == 1 {
        return Err(Error::Invalid(format!(
            "invalid MAC address {s:?}: a multicast address cannot name an interface"
        )));
    }
    Ok(mac)
}

/// Format a MAC address as "aa:bb:cc:dd:ee:ff".
pub fn format_mac(mac: &[u8]) -> String {
    mac.iter()
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(":")
}

/// An interface created for the pod (CNI result `interfaces[]`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct Interface {
    /// Name.
    pub name: String,
    /// MAC address.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub mac: String,
    /// MTU, when the plugin reports it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mtu: Option<u32>,
    /// The namespace path for interfaces inside the pod; None for host-side interfaces.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sandbox: Option<PathBuf>,
}

/// An address given to the pod (CNI result `ips[]`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct IpConfig {
    /// Address with prefix length.
    pub address: IpNet,
    /// Gateway.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gateway: Option<IpAddr>,
    /// Index into `interfaces`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interface: Option<usize>,
}

/// A route inside the pod (CNI result `routes[]`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RouteConfig {
    /// Destination.
    pub dst: IpNet,
    /// Next hop.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gw: Option<IpAddr>,
}

/// A pod's network as set up: what the engine reports in pod status (`Attachment::ips`)
/// and uses for /etc/hosts.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct Attachment {
    /// Name of the network (CNI network name, or the built-in network's name).
    #[serde(default)]
    pub network: String,
    /// Interfaces.
    #[serde(default)]
    pub interfaces: Vec<Interface>,
    /// Addresses.
    #[serde(default)]
    pub ips: Vec<IpConfig>,
    /// Routes.
    #[serde(default)]
    pub routes: Vec<RouteConfig>,
    /// DNS settings the network asks for.
    #[serde(default, skip_serializing_if = "Dns::is_empty")]
    pub dns: Dns,
}

impl Attachment {
    /// The pod's first IPv4 address, else its first address.
    pub fn primary_ip(&self) -> Option<IpAddr> {
        self.ips
            .iter()
            .find(|i| i.address.addr.is_ipv4())
            .or(self.ips.first())
            .map(|i| i.address.addr)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn port_mappings_use_the_cni_field_names() {
        let pm = PortMapping {
            host_port: 8080,
            container_port: 80,
            protocol: Protocol::Udp,
            host_ip: Some("127.0.0.1".parse().unwrap()),
        };
        let v = serde_json::to_value(pm).unwrap();
        assert_eq!(
            v,
            serde_json::json!({"hostPort": 8080, "containerPort": 80, "protocol": "udp", "hostIP": "127.0.0.1"})
        );
        let back: PortMapping =
            serde_json::from_str(r#"{"hostPort":1,"containerPort":2}"#).unwrap();
        assert_eq!(back.protocol, Protocol::Tcp);
        assert_eq!(back.host_ip, None);
    }

    #[test]
    fn conflicting_mappings_and_bad_options_are_rejected() {
        let pm = |h, ip: Option<&str>| PortMapping {
            host_port: h,
            container_port: 80,
            protocol: Protocol::Tcp,
            host_ip: ip.map(|s| s.parse().unwrap()),
        };
        assert!(pm(80, None).conflicts_with(&pm(80, Some("10.0.0.1"))));
        assert!(!pm(80, Some("10.0.0.2")).conflicts_with(&pm(80, Some("10.0.0.1"))));
        let mut udp = pm(80, None);
        udp.protocol = Protocol::Udp;
        assert!(!udp.conflicts_with(&pm(80, None)));
        let opts = AttachOptions {
            port_mappings: vec![pm(80, None), pm(80, Some("1.2.3.4"))],
            ..Default::default()
        };
        assert!(matches!(opts.validate(), Err(Error::Conflict(_))));
        let opts = AttachOptions {
            port_mappings: vec![pm(0, None)],
            ..Default::default()
        };
        assert!(matches!(opts.validate(), Err(Error::Invalid(_))));
        for bad in ["", "a/b", "sixteen-chars-xx", "a b"] {
            assert!(validate_ifname(bad).is_err(), "{bad:?}");
        }
        assert!(parse_mac("01:00:00:00:00:01").is_err(), "multicast");
        assert!(parse_mac("02:00:00:00:00").is_err());
        assert_eq!(parse_mac("02:AB:00:00:00:01").unwrap()[1], 0xab);
        assert_eq!(format_mac(&[2, 0xab, 0, 0, 0, 1]), "02:ab:00:00:00:01");
    }

    #[test]
    fn a_cni_1_0_result_deserializes_into_an_attachment() {
        let r = r#"{"cniVersion":"1.0.0","interfaces":[{"name":"cni0","mac":"aa:bb:cc:dd:ee:ff"},
            {"name":"eth0","mac":"02:00:00:00:00:01","sandbox":"/run/netns/x"}],
            "ips":[{"address":"10.1.0.5/24","gateway":"10.1.0.1","interface":1}],
            "routes":[{"dst":"0.0.0.0/0"}],"dns":{"nameservers":["10.1.0.1"]}}"#;
        let a: Attachment = serde_json::from_str(r).unwrap();
        assert_eq!(
            a.interfaces[1].sandbox.as_deref(),
            Some(std::path::Path::new("/run/netns/x"))
        );
        assert_eq!(a.primary_ip().unwrap().to_string(), "10.1.0.5");
        assert_eq!(a.routes[0].gw, None);
        assert_eq!(a.dns.nameservers.len(), 1);
    }
}
