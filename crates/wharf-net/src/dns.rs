//! A pod's name files: /etc/resolv.conf (from the host's, minus the loopback name servers
//! that cannot work inside the pod's namespace, with overridable servers, searches and
//! options), /etc/hosts (localhost, the pod's addresses and hostname, extra entries) and
//! /etc/hostname. The engine writes them into the pod's directory with [`write_files`]
//! and bind-mounts them into every container of the pod.

use std::net::IpAddr;
use std::path::{Path, PathBuf};

use crate::error::{Context, Error, Result};
use crate::sys;

/// The host's resolver configuration.
pub const HOST_RESOLV_CONF: &str = "/etc/resolv.conf";
/// systemd-resolved's list of real upstream servers, used when the host's resolv.conf
/// only points at the local stub (127.0.0.53).
pub const RESOLVED_UPSTREAM: &str = "/run/systemd/resolve/resolv.conf";

/// DNS settings of a pod. `None` keeps what the host has; `Some` replaces it (an empty
/// list clears it), as a CRI pod's DNSConfig does.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DnsOverrides {
    /// Name servers.
    pub servers: Option<Vec<IpAddr>>,
    /// Search domains.
    pub searches: Option<Vec<String>>,
    /// Resolver options ("ndots:5", "edns0").
    pub options: Option<Vec<String>>,
}

/// What goes into a pod's name files.
#[derive(Debug, Clone)]
pub struct PodNames {
    /// The pod's hostname.
    pub hostname: String,
    /// The pod's addresses (all are listed under the hostname in /etc/hosts).
    pub ips: Vec<IpAddr>,
    /// Extra /etc/hosts entries (address, names).
    pub extra_hosts: Vec<(IpAddr, Vec<String>)>,
    /// DNS overrides.
    pub dns: DnsOverrides,
    /// The host resolv.conf to start from.
    pub host_resolv_conf: PathBuf,
    /// systemd-resolved's upstream list (read when the host file only has the stub).
    pub resolved_upstream: PathBuf,
}

impl PodNames {
    /// Names for a pod with this hostname and these addresses, DNS from the host.
    pub fn new(hostname: impl Into<String>, ips: Vec<IpAddr>) -> PodNames {
        PodNames {
            hostname: hostname.into(),
            ips,
            extra_hosts: Vec::new(),
            dns: DnsOverrides::default(),
            host_resolv_conf: HOST_RESOLV_CONF.into(),
            resolved_upstream: RESOLVED_UPSTREAM.into(),
        }
    }
}

/// The files written by [`write_files`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NameFiles {
    /// resolv.conf.
    pub resolv_conf: PathBuf,
    /// hosts.
    pub hosts: PathBuf,
    /// hostname.
    pub hostname: PathBuf,
}

/// A parsed resolv.conf (only what a pod's copy carries over).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ResolvConf {
    /// `nameserver` values, as written (IPv6 ones may carry a %zone).
    pub nameservers: Vec<String>,
    /// `search` (or `domain`) domains.
    pub search: Vec<String>,
    /// `options` values.
    pub options: Vec<String>,
}

impl ResolvConf {
    /// Parse resolv.conf text (comments and unknown keywords are dropped; the last
    /// `search`/`domain` line wins, as in glibc).
    pub fn parse(text: &str) -> ResolvConf {
        let mut rc = ResolvConf::default();
        for line in text.lines() {
            let line = line.split(['#', ';']).next().unwrap_or("");
            let mut words = line.split_whitespace();
            match words.next() {
                Some("nameserver") => {
                    if let Some(ns) = words.next() {
                        rc.nameservers.push(ns.to_string());
                    }
                }
                Some("search") | Some("domain") => {
                    rc.search = words.map(str::to_string).collect();
                }
                Some("options") => rc.options.extend(words.map(str::to_string)),
                _ => {}
            }
        }
        rc
    }

    /// Whether every name server is on loopback (the pod cannot reach any of them).
    fn only_loopback(&self) -> bool {
        !self.nameservers.is_empty() && self.nameservers.iter().all(|n| !usable_in_pod(n))
    }

    /// The text of the file.
    pub fn render(&self) -> String {
        let mut s = String::new();
        if !self.search.is_empty() {
            s.push_str(&format!("search {}\n", self.search.join(" ")));
        }
        for ns in &self.nameservers {
            s.push_str(&format!("nameserver {ns}\n"));
        }
        if !self.options.is_empty() {
            s.push_str(&format!("options {}\n", self.options.join(" ")));
        }
        s
    }
}

/// The host's own resolvers (loopback ones too: for a resolver in the host's namespace,
/// such as the DNS responders of user networks, which forward to them).
pub fn host_resolvers() -> Vec<IpAddr> {
    let text = std::fs::read_to_string(HOST_RESOLV_CONF).unwrap_or_default();
    ResolvConf::parse(&text)
        .nameservers
        .iter()
        .filter_map(|n| n.split('%').next()?.parse().ok())
        .collect()
}

/// Whether a name server of the host is reachable from a pod: not loopback (the pod has its
/// own lo) and not link-local with a zone (the zone names a host interface).
fn usable_in_pod(ns: &str) -> bool {
    let (addr, zone) = match ns.split_once('%') {
        Some((a, z)) => (a, Some(z)),
        None => (ns, None),
    };
    match addr.parse::<IpAddr>() {
        Ok(ip) if ip.is_loopback() => false,
        Ok(IpAddr::V6(v6)) if zone.is_some() || (v6.segments()[0] & 0xffc0) == 0xfe80 => false,
        Ok(_) => true,
        Err(_) => false,
    }
}

/// The second line of defence against injected lines: whatever a caller checked, no word
/// written into a name file may hold whitespace, a control character or a comment sign
/// ('#', and ';' which resolv.conf also takes for one), nor be empty or longer than a DNS
/// name.
fn check_word(what: &str, w: &str) -> Result<()> {
    if w.is_empty()
        || w.len() > 253
        || w.chars()
            .any(|c| c.is_whitespace() || c.is_control() || c == '#' || c == ';')
    {
        return Err(Error::Invalid(format!(
            "invalid {what} {w:?}: no spaces, control characters, '#' or ';'"
        )));
    }
    Ok(())
}

/// Check a hostname: dot-separated labels of letters, digits, '-' and '_' (the names docker
/// gives containers), none starting or ending with '-', at most 64 characters as the kernel
/// allows.
pub fn validate_hostname(name: &str) -> Result<()> {
    let ok = !name.is_empty()
        && name.len() <= 64
        && name.split('.').all(|label| {
            !label.is_empty()
                && label.len() <= 63
                && !label.starts_with('-')
                && !label.ends_with('-')
                && label
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        });
    if ok {
        Ok(())
    } else {
        Err(Error::Invalid(format!(
            "invalid hostname {name:?}: letters, digits, '-' and '_' in dot-separated labels, at most 64 characters"
        )))
    }
}

/// One hosts file line: `ADDRESS<TAB>NAME NAME...`, each name checked ([`check_word`]);
/// at least one name.
pub fn hosts_line(ip: IpAddr, names: &[String]) -> Result<String> {
    if names.is_empty() {
        return Err(Error::Invalid(format!("hosts entry {ip}: no host names")));
    }
    for h in names {
        check_word("host name", h)?;
    }
    Ok(format!("{ip}\t{}\n", names.join(" ")))
}

/// The entries of a hosts file, in order: (address, names). Comments, blank lines and
/// lines without a valid address are skipped, as the resolver skips them.
pub fn parse_hosts(text: &str) -> Vec<(IpAddr, Vec<String>)> {
    text.lines()
        .filter_map(|line| {
            let line = line.split('#').next().unwrap_or("");
            let mut words = line.split_whitespace();
            let ip = words.next()?.parse().ok()?;
            let names: Vec<String> = words.map(str::to_string).collect();
            (!names.is_empty()).then_some((ip, names))
        })
        .collect()
}

/// The pod's resolv.conf text: the host's (or systemd-resolved's upstream list when the
/// host only has the local stub), loopback servers dropped, overrides applied.
pub fn resolv_conf(names: &PodNames) -> Result<String> {
    let dns = &names.dns;
    for s in dns.searches.iter().flatten() {
        check_word("search domain", s)?;
    }
    for o in dns.options.iter().flatten() {
        check_word("resolver option", o)?;
    }
    let read = |p: &Path| -> Result<ResolvConf> {
        match std::fs::read_to_string(p) {
            Ok(t) => Ok(ResolvConf::parse(&t)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(ResolvConf::default()),
            Err(e) => Err(Error::os(format!("read {}", p.display()), e)),
        }
    };
    let mut rc = if dns.servers.is_some() && dns.searches.is_some() && dns.options.is_some() {
        ResolvConf::default()
    } else {
        let host = read(&names.host_resolv_conf)?;
        if host.only_loopback() && names.resolved_upstream.exists() {
            let mut up = read(&names.resolved_upstream)?;
            // The stub's file has the search list the host's users see.
            if up.search.is_empty() {
                up.search = host.search;
            }
            up
        } else {
            host
        }
    };
    rc.nameservers.retain(|n| usable_in_pod(n));
    if let Some(s) = &dns.servers {
        rc.nameservers = s.iter().map(IpAddr::to_string).collect();
    }
    if let Some(s) = &dns.searches {
        rc.search = s.clone();
    }
    if let Some(o) = &dns.options {
        rc.options = o.clone();
    }
    Ok(rc.render())
}

/// The pod's /etc/hosts text.
pub fn hosts(names: &PodNames) -> Result<String> {
    validate_hostname(&names.hostname)?;
    let mut s = String::from(
        "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n\
         fe00::0\tip6-localnet\nff00::0\tip6-mcastprefix\nff02::1\tip6-allnodes\nff02::2\tip6-allrouters\n",
    );
    for (ip, hostnames) in &names.extra_hosts {
        if !hostnames.is_empty() {
            s.push_str(&hosts_line(*ip, hostnames)?);
        }
    }
    for ip in &names.ips {
        s.push_str(&hosts_line(*ip, std::slice::from_ref(&names.hostname))?);
    }
    Ok(s)
}

/// Write resolv.conf, hosts and hostname into `dir` (created if missing). Each file is
/// replaced atomically, so a container reading it never sees half a file.
pub fn write_files(dir: &Path, names: &PodNames) -> Result<NameFiles> {
    let resolv = resolv_conf(names)?;
    let hosts = hosts(names)?;
    std::fs::create_dir_all(dir).ctx(|| format!("create {}", dir.display()))?;
    let files = NameFiles {
        resolv_conf: dir.join("resolv.conf"),
        hosts: dir.join("hosts"),
        hostname: dir.join("hostname"),
    };
    sys::write_atomic(&files.resolv_conf, resolv.as_bytes(), 0o644)?;
    sys::write_atomic(&files.hosts, hosts.as_bytes(), 0o644)?;
    sys::write_atomic(
        &files.hostname,
        format!("{}\n", names.hostname).as_bytes(),
        0o644,
    )?;
    Ok(files)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names_with_host(dir: &Path, host: &str) -> PodNames {
        std::fs::write(dir.join("host-resolv.conf"), host).unwrap();
        let mut n = PodNames::new("web-1", vec!["10.88.0.2".parse().unwrap()]);
        n.host_resolv_conf = dir.join("host-resolv.conf");
        n.resolved_upstream = dir.join("resolved.conf");
        n
    }

    #[test]
    fn loopback_servers_are_dropped_and_the_rest_kept() {
        let tmp = tempfile::tempdir().unwrap();
        let n = names_with_host(
            tmp.path(),
            "# comment\nnameserver 127.0.0.1\nnameserver 192.0.2.53\nnameserver ::1\n\
             nameserver fe80::1%eth0\nnameserver 2001:db8::53\nsearch corp.example\noptions edns0 ndots:2\n",
        );
        assert_eq!(
            resolv_conf(&n).unwrap(),
            "search corp.example\nnameserver 192.0.2.53\nnameserver 2001:db8::53\noptions edns0 ndots:2\n"
        );
    }

    #[test]
    fn a_stub_only_host_uses_systemd_resolveds_upstream_list() {
        let tmp = tempfile::tempdir().unwrap();
        let n = names_with_host(
            tmp.path(),
            "nameserver 127.0.0.53\nsearch lan\noptions edns0\n",
        );
        // Without the upstream file the pod gets no server (none is reachable).
        assert_eq!(resolv_conf(&n).unwrap(), "search lan\noptions edns0\n");
        std::fs::write(tmp.path().join("resolved.conf"), "nameserver 192.0.2.1\n").unwrap();
        assert_eq!(
            resolv_conf(&n).unwrap(),
            "search lan\nnameserver 192.0.2.1\n"
        );
    }

    #[test]
    fn overrides_replace_the_hosts_settings() {
        let tmp = tempfile::tempdir().unwrap();
        let mut n = names_with_host(tmp.path(), "nameserver 192.0.2.53\nsearch a b\n");
        n.dns.servers = Some(vec!["10.96.0.10".parse().unwrap()]);
        n.dns.searches = Some(vec![
            "ns.svc.cluster.local".into(),
            "svc.cluster.local".into(),
        ]);
        n.dns.options = Some(vec!["ndots:5".into()]);
        assert_eq!(
            resolv_conf(&n).unwrap(),
            "search ns.svc.cluster.local svc.cluster.local\nnameserver 10.96.0.10\noptions ndots:5\n"
        );
        n.dns.searches = Some(vec!["bad domain".into()]);
        assert!(resolv_conf(&n).is_err());
        n.dns.searches = Some(vec!["x\nnameserver 6.6.6.6".into()]);
        assert!(resolv_conf(&n).is_err());
    }

    #[test]
    fn hosts_lists_localhost_extras_and_the_pod() {
        let tmp = tempfile::tempdir().unwrap();
        let mut n = names_with_host(tmp.path(), "");
        n.ips.push("fd00::2".parse().unwrap());
        n.extra_hosts.push((
            "192.0.2.9".parse().unwrap(),
            vec!["db".into(), "db.local".into()],
        ));
        let h = hosts(&n).unwrap();
        assert!(h.starts_with("127.0.0.1\tlocalhost\n::1\tlocalhost"), "{h}");
        assert!(h.contains("192.0.2.9\tdb db.local\n"), "{h}");
        assert!(h.ends_with("10.88.0.2\tweb-1\nfd00::2\tweb-1\n"), "{h}");
        for bad in ["", "a b", "-x", "x\ny", &"a".repeat(65), "a..b"] {
            n.hostname = bad.to_string();
            assert!(hosts(&n).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn write_files_writes_all_three() {
        let tmp = tempfile::tempdir().unwrap();
        let n = names_with_host(tmp.path(), "nameserver 192.0.2.53\n");
        let out = tmp.path().join("pod/etc");
        let files = write_files(&out, &n).unwrap();
        assert_eq!(std::fs::read_to_string(&files.hostname).unwrap(), "web-1\n");
        assert_eq!(
            std::fs::read_to_string(&files.resolv_conf).unwrap(),
            "nameserver 192.0.2.53\n"
        );
        assert!(
            std::fs::read_to_string(&files.hosts)
                .unwrap()
                .contains("10.88.0.2\tweb-1")
        );
        // Rewriting replaces the files (a symlink planted at a file name is replaced, not
        // followed).
        std::fs::remove_file(&files.hostname).unwrap();
        std::os::unix::fs::symlink(tmp.path().join("victim"), &files.hostname).unwrap();
        write_files(&out, &n).unwrap();
        assert!(!tmp.path().join("victim").exists());
        assert_eq!(std::fs::read_to_string(&files.hostname).unwrap(), "web-1\n");
    }
}
