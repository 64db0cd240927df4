//! The one set of rules for the names the engine takes from its users: every string that
//! ends up in a file another process reads (a pod's hosts, resolv.conf and hostname, the
//! hosts files of the other pods on a user network, network and volume records) or in a
//! path passes one of these rules at the engine's boundary, whichever front end it came
//! through (the CLI, the CRI, `wharf play`, the Docker API).
//!
//! Each rule is a [`Rule`]; a value that breaks one is an [`Invalid`] naming the field, the
//! value (escaped, so a newline in it cannot split the message) and the rule. The engine
//! checks whole specs with [`pod_spec`] and [`container_spec`] before it makes anything;
//! front ends may check earlier under their own field names with [`check`].
//!
//! The file writers of `wharf-net` refuse control characters again, as a second line: a
//! path that forgot a check still cannot inject a line.

use std::fmt;

use crate::model::{ContainerSpec, NetworkMode, PodSpec};

/// Longest pod or container name (docker sets none; this bounds records and paths).
pub const MAX_OBJECT_NAME: usize = 512;
/// Longest hostname the kernel takes (HOST_NAME_MAX).
pub const MAX_HOSTNAME: usize = 64;
/// Longest network name (it becomes a file name and part of interface-facing records).
pub const MAX_NETWORK_NAME: usize = 64;
/// Longest volume name.
pub const MAX_VOLUME_NAME: usize = 255;
/// Longest DNS name (RFC 1035 §2.3.4, without the final dot).
pub const MAX_DNS_NAME: usize = 253;
/// Longest label or annotation key.
pub const MAX_KEY: usize = 1024;

/// A rule a value must follow.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Rule {
    /// An RFC 1123 label: 1 to 63 letters, digits and '-', starting and ending with a
    /// letter or digit.
    DnsLabel,
    /// A host's name: dot-separated labels of letters, digits, '-' and '_' (the names
    /// docker and compose give containers), at most [`MAX_HOSTNAME`] characters.
    Hostname,
    /// An RFC 1123 DNS name: dot-separated [`Rule::DnsLabel`]s, at most [`MAX_DNS_NAME`]
    /// characters (a domain name).
    DnsName,
    /// A name in a hosts file (a network alias, an extra host's name): dot-separated labels
    /// of letters, digits, '-' and '_', each starting with a letter, digit or '_', at most
    /// [`MAX_DNS_NAME`] characters.
    HostAlias,
    /// A resolv.conf search domain: a [`Rule::DnsName`], with an optional final dot.
    SearchDomain,
    /// A resolv.conf option: `NAME` or `NAME:VALUE` of letters, digits, '-', '_' and '.'.
    DnsOption,
    /// An IPv4 or IPv6 address.
    IpAddr,
    /// A pod or container name (docker's rule): `[a-zA-Z0-9][a-zA-Z0-9_.-]*`, at most
    /// [`MAX_OBJECT_NAME`] characters.
    ObjectName,
    /// A network name: `[a-zA-Z0-9][a-zA-Z0-9_.-]*`, at most [`MAX_NETWORK_NAME`].
    NetworkName,
    /// A volume name (docker's rule): `[a-zA-Z0-9][a-zA-Z0-9_.-]+`, at most
    /// [`MAX_VOLUME_NAME`].
    VolumeName,
    /// A label or annotation key: 1 to [`MAX_KEY`] bytes, no whitespace, control
    /// characters, '#' or '='.
    Key,
    /// Free text kept in a record or a file: no control characters (a line break, a NUL).
    Text,
}

impl Rule {
    /// What the rule asks, for error messages.
    pub fn describe(self) -> &'static str {
        match self {
            Rule::DnsLabel => {
                "1 to 63 letters, digits and '-', starting and ending with a letter or digit (RFC 1123)"
            }
            Rule::Hostname => {
                "dot-separated labels of letters, digits, '-' and '_', none starting or ending with '-', at most 64 characters"
            }
            Rule::DnsName => {
                "dot-separated labels of letters, digits and '-', none starting or ending with '-', at most 253 characters (RFC 1123)"
            }
            Rule::HostAlias => {
                "dot-separated labels of letters, digits, '-' and '_', none starting or ending with '-', at most 253 characters"
            }
            Rule::SearchDomain => {
                "a domain name: dot-separated labels of letters, digits and '-', at most 253 characters"
            }
            Rule::DnsOption => "NAME or NAME:VALUE of letters, digits, '-', '_' and '.'",
            Rule::IpAddr => "an IPv4 or IPv6 address",
            Rule::ObjectName => "[a-zA-Z0-9][a-zA-Z0-9_.-]*, at most 512 characters",
            Rule::NetworkName => "[a-zA-Z0-9][a-zA-Z0-9_.-]*, at most 64 characters",
            Rule::VolumeName => "[a-zA-Z0-9][a-zA-Z0-9_.-]+, at most 255 characters",
            Rule::Key => "1 to 1024 characters, without whitespace, control characters, '#' or '='",
            Rule::Text => "no control characters (line breaks, tabs, NUL)",
        }
    }

    /// Whether `s` follows the rule.
    pub fn allows(self, s: &str) -> bool {
        match self {
            Rule::DnsLabel => label(s, false),
            Rule::Hostname => s.len() <= MAX_HOSTNAME && labels(s, true),
            Rule::DnsName => s.len() <= MAX_DNS_NAME && labels(s, false),
            Rule::HostAlias => s.len() <= MAX_DNS_NAME && labels(s, true),
            Rule::SearchDomain => {
                let s = s.strip_suffix('.').unwrap_or(s);
                s.len() <= MAX_DNS_NAME && labels(s, false)
            }
            Rule::DnsOption => {
                let (name, value) = s.split_once(':').unwrap_or((s, "x"));
                let word = |w: &str| {
                    !w.is_empty()
                        && w.len() <= 64
                        && w.bytes()
                            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
                };
                word(name) && word(value)
            }
            Rule::IpAddr => s.parse::<std::net::IpAddr>().is_ok(),
            Rule::ObjectName => docker_name(s, 1, MAX_OBJECT_NAME),
            Rule::NetworkName => docker_name(s, 1, MAX_NETWORK_NAME),
            Rule::VolumeName => docker_name(s, 2, MAX_VOLUME_NAME),
            Rule::Key => {
                !s.is_empty()
                    && s.len() <= MAX_KEY
                    && !s
                        .chars()
                        .any(|c| c.is_whitespace() || c.is_control() || c == '#' || c == '=')
            }
            Rule::Text => !s.chars().any(char::is_control),
        }
    }
}

impl fmt::Display for Rule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.describe())
    }
}

/// One RFC 1123 label (with `underscore`, '_' is a letter too, as in the names docker
/// gives containers).
fn label(s: &str, underscore: bool) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && !s.starts_with('-')
        && !s.ends_with('-')
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || (underscore && b == b'_'))
}

fn labels(s: &str, underscore: bool) -> bool {
    !s.is_empty() && s.split('.').all(|l| label(l, underscore))
}

fn docker_name(s: &str, min: usize, max: usize) -> bool {
    let b = s.as_bytes();
    b.len() >= min
        && b.len() <= max
        && b[0].is_ascii_alphanumeric()
        && b.iter()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'_' | b'.' | b'-'))
}

/// A value that breaks its field's rule.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid {field} {value:?}: {rule}")]
pub struct Invalid {
    /// The field, as the caller names it ("network alias", "--dns-search",
    /// "spec.hostAliases[0].hostnames[1]").
    pub field: String,
    /// The value given.
    pub value: String,
    /// The rule it breaks.
    pub rule: Rule,
}

impl From<Invalid> for crate::Error {
    fn from(e: Invalid) -> Self {
        crate::Error::Invalid(e.to_string())
    }
}

/// Check `value` of `field` against `rule`.
pub fn check(field: impl fmt::Display, value: &str, rule: Rule) -> Result<(), Invalid> {
    if rule.allows(value) {
        Ok(())
    } else {
        Err(Invalid {
            field: field.to_string(),
            value: value.to_string(),
            rule,
        })
    }
}

/// Check every value of `values`.
pub fn check_all<'a>(
    field: impl fmt::Display,
    values: impl IntoIterator<Item = &'a String>,
    rule: Rule,
) -> Result<(), Invalid> {
    let field = field.to_string();
    values.into_iter().try_for_each(|v| check(&field, v, rule))
}

/// Check a pod's spec: every name, address and word that reaches its name files, the hosts
/// files of other pods, its record or a path.
pub fn pod_spec(spec: &PodSpec) -> Result<(), Invalid> {
    if let Some(n) = &spec.name {
        check("pod name", n, Rule::ObjectName)?;
    }
    if let Some(h) = &spec.hostname {
        check("hostname", h, Rule::Hostname)?;
    }
    if let NetworkMode::Named(n) = &spec.network {
        // A user network's or a CNI configuration's name (libcni's rule is docker's).
        check("network name", n, Rule::ObjectName)?;
    }
    check_all("network alias", &spec.network_aliases, Rule::HostAlias)?;
    for x in &spec.extra_networks {
        check("network name", &x.name, Rule::NetworkName)?;
        check_all("network alias", &x.aliases, Rule::HostAlias)?;
    }
    check_all("DNS server", &spec.dns.servers, Rule::IpAddr)?;
    check_all("DNS search domain", &spec.dns.searches, Rule::SearchDomain)?;
    check_all("DNS option", &spec.dns.options, Rule::DnsOption)?;
    for (ip, names) in &spec.extra_hosts {
        check("extra host address", ip, Rule::IpAddr)?;
        check_all("extra host name", names, Rule::HostAlias)?;
    }
    for p in &spec.ports {
        if let Some(ip) = &p.host_ip {
            check("port mapping host address", ip, Rule::IpAddr)?;
        }
        check("port mapping protocol", &p.protocol, Rule::DnsLabel)?;
    }
    if let Some(ns) = &spec.namespace {
        check("namespace", ns, Rule::Key)?;
    }
    check_all("label key", spec.labels.keys(), Rule::Key)?;
    check_all("annotation key", spec.annotations.keys(), Rule::Key)?;
    check_all("sysctl", spec.sysctls.keys(), Rule::Key)?;
    check_all("volume name", spec.disk_limits.keys(), Rule::Key)?;
    Ok(())
}

/// Check a container's spec: its name (which other pods' hosts files list on a user
/// network), labels and the words that reach its bundle's files.
pub fn container_spec(spec: &ContainerSpec) -> Result<(), Invalid> {
    if let Some(n) = &spec.name {
        check("container name", n, Rule::ObjectName)?;
    }
    check("image", &spec.image, Rule::Text)?;
    check_all("label key", spec.labels.keys(), Rule::Key)?;
    check_all("annotation key", spec.annotations.keys(), Rule::Key)?;
    if let Some(u) = &spec.user {
        check("user", u, Rule::Text)?;
    }
    if let Some(w) = &spec.workdir {
        check("working directory", w, Rule::Text)?;
    }
    if let Some(p) = &spec.apparmor_profile {
        check("AppArmor profile", p, Rule::Key)?;
    }
    for (name, _) in &spec.env {
        check("environment variable name", name, Rule::Text)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The characters the injection tests put in every field.
    const HOSTILE: [&str; 6] = ["\n", "\r", "\t", "#", " ", "\0"];

    #[test]
    fn every_name_rule_refuses_line_breaks_comments_spaces_and_nul() {
        for rule in [
            Rule::DnsLabel,
            Rule::Hostname,
            Rule::DnsName,
            Rule::HostAlias,
            Rule::SearchDomain,
            Rule::DnsOption,
            Rule::IpAddr,
            Rule::ObjectName,
            Rule::NetworkName,
            Rule::VolumeName,
            Rule::Key,
        ] {
            for bad in HOSTILE {
                let v = format!("ali{bad}6.6.6.6");
                assert!(!rule.allows(&v), "{rule:?} allowed {v:?}");
                let e = check("field x", &v, rule).unwrap_err().to_string();
                assert!(e.starts_with("invalid field x \"ali"), "{e}");
                assert!(!e.contains('\n') && !e.contains('\0'), "{e:?}");
            }
        }
        for bad in ["\n", "\r", "\t", "\0", "\u{7f}", "\u{85}"] {
            assert!(!Rule::Text.allows(&format!("a{bad}b")), "{bad:?}");
        }
        assert!(Rule::Text.allows("a b # c"));
    }

    #[test]
    fn names_docker_kubernetes_and_compose_use_pass() {
        for ok in ["web", "web-1", "a", "x1.example.com", "0abc"] {
            assert!(Rule::DnsLabel.allows(ok) || ok.contains('.'), "{ok}");
            assert!(Rule::DnsName.allows(ok), "{ok}");
            assert!(Rule::HostAlias.allows(ok), "{ok}");
            assert!(Rule::Hostname.allows(ok), "{ok}");
        }
        for ok in ["my_app", "proj_web_1", "_svc", "Web.Local"] {
            assert!(Rule::HostAlias.allows(ok), "{ok}");
            assert!(Rule::Hostname.allows(ok), "{ok}");
        }
        assert!(!Rule::DnsName.allows("my_app"));
        for bad in ["", "-a", "a-", "a..b", ".a", "a.", &"x".repeat(64)] {
            assert!(!Rule::DnsLabel.allows(bad), "{bad:?}");
            assert!(!Rule::HostAlias.allows(bad), "{bad:?}");
        }
        assert!(!Rule::Hostname.allows(&format!("{}.{}", "a".repeat(40), "b".repeat(30))));
        assert!(Rule::SearchDomain.allows("svc.cluster.local."));
        assert!(!Rule::SearchDomain.allows("."));
        for ok in [
            "ndots:5",
            "edns0",
            "single-request-reopen",
            "timeout:2",
            "trust-ad",
        ] {
            assert!(Rule::DnsOption.allows(ok), "{ok}");
        }
        for bad in ["", ":", "ndots:", "a:b:c", "x/y"] {
            assert!(!Rule::DnsOption.allows(bad), "{bad:?}");
        }
        for ok in ["10.0.0.1", "::1", "fd00::2"] {
            assert!(Rule::IpAddr.allows(ok), "{ok}");
        }
        assert!(!Rule::IpAddr.allows("10.0.0.256") && !Rule::IpAddr.allows("fe80::1%eth0"));
        assert!(Rule::ObjectName.allows("web-1.x_y") && !Rule::ObjectName.allows("-web"));
        assert!(!Rule::ObjectName.allows("a/b") && !Rule::ObjectName.allows(".."));
        assert!(Rule::VolumeName.allows("db") && !Rule::VolumeName.allows("d"));
        assert!(!Rule::NetworkName.allows(&"n".repeat(65)));
        for ok in [
            "com.docker.compose.project",
            "app.kubernetes.io/name",
            "ünï",
        ] {
            assert!(Rule::Key.allows(ok), "{ok}");
        }
        assert!(!Rule::Key.allows("a=b") && !Rule::Key.allows(""));
    }

    #[test]
    fn specs_name_the_field_that_breaks_its_rule() {
        let mut p = PodSpec {
            network_aliases: vec!["ali\n6.6.6.6 registry.example.com".into()],
            ..Default::default()
        };
        let e = pod_spec(&p).unwrap_err();
        assert_eq!(e.field, "network alias");
        assert_eq!(
            e.to_string(),
            format!(
                "invalid network alias \"ali\\n6.6.6.6 registry.example.com\": {}",
                Rule::HostAlias.describe()
            )
        );
        p.network_aliases = vec!["db".into()];
        p.extra_hosts = vec![("10.0.0.1".into(), vec!["ok".into(), "x#y".into()])];
        assert_eq!(pod_spec(&p).unwrap_err().field, "extra host name");
        p.extra_hosts = vec![("10.0.0.1 evil".into(), vec!["ok".into()])];
        assert_eq!(pod_spec(&p).unwrap_err().field, "extra host address");
        p.extra_hosts.clear();
        p.dns.options = vec!["ndots:1\nnameserver 6.6.6.6".into()];
        assert_eq!(pod_spec(&p).unwrap_err().field, "DNS option");
        p.dns.options.clear();
        assert!(pod_spec(&p).is_ok());
        let c = ContainerSpec {
            name: Some("web\tx".into()),
            ..Default::default()
        };
        assert_eq!(container_spec(&c).unwrap_err().field, "container name");
    }
}
