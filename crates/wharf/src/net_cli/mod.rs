//! `wharf net`: pod networking by hand, over wharf-net: pin namespaces, attach and detach
//! pods (CNI or the built-in network), repair after a crash, write name files. The engine
//! calls the same library; this front end is for operators and for trying things out.

use std::ffi::OsString;
use std::net::IpAddr;
use std::path::PathBuf;

use anyhow::{Context, Result, bail};
use clap::{Parser, Subcommand};
use wharf_net::{
    AttachOptions, BuiltinConfig, BuiltinNetwork, CniConfig, Network, PortMapping, Protocol,
    Selection, dns, netns,
};

#[derive(Parser)]
#[command(
    name = "wharf net",
    about = "Pod networking: namespaces, CNI, the built-in network"
)]
struct Cli {
    /// Run directory (pinned namespaces go to <run-dir>/netns).
    #[arg(long, default_value = netns::DEFAULT_RUN_DIR, global = true)]
    run_dir: PathBuf,
    /// Wharf's state root (network state goes to <root>/net).
    #[arg(long, default_value = "/var/lib/wharf", global = true)]
    root: PathBuf,
    /// CNI configuration directory.
    #[arg(long, default_value = wharf_net::cni::DEFAULT_CONF_DIR, global = true)]
    cni_conf_dir: PathBuf,
    /// CNI plugin directories (repeatable; default /opt/cni/bin and /usr/lib/cni).
    #[arg(long, global = true)]
    cni_bin_dir: Vec<PathBuf>,
    /// CNI result cache directory.
    #[arg(long, default_value = wharf_net::cni::cache::DEFAULT_CACHE_DIR, global = true)]
    cni_cache_dir: PathBuf,
    /// The namespace acting as the host (default: this process's own).
    #[arg(long, global = true)]
    host_netns: Option<PathBuf>,
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Create a pinned network namespace (lo up); prints its path.
    NetnsCreate { name: String },
    /// Remove a pinned network namespace (idempotent).
    NetnsRm { name: String },
    /// List pinned network namespaces.
    NetnsLs,
    /// Connect a pod's namespace; prints the attachment as JSON.
    Attach {
        /// CNI network name (default: the first configuration, else the built-in network).
        #[arg(long, conflicts_with = "builtin")]
        network: Option<String>,
        /// Use the built-in network even if CNI configurations exist.
        #[arg(long)]
        builtin: bool,
        /// Port mapping HOSTPORT:PODPORT[/tcp|/udp], optionally HOSTIP:HOSTPORT:PODPORT.
        #[arg(short = 'p', long = "publish")]
        publish: Vec<String>,
        pod: String,
        netns: PathBuf,
    },
    /// Disconnect a pod (idempotent).
    Detach {
        #[arg(long, conflicts_with = "builtin")]
        network: Option<String>,
        #[arg(long)]
        builtin: bool,
        pod: String,
        netns: Option<PathBuf>,
    },
    /// Repair the built-in network after a crash.
    Recover,
    /// Write resolv.conf, hosts and hostname for a pod into a directory.
    Dns {
        #[arg(long)]
        dir: PathBuf,
        #[arg(long)]
        hostname: String,
        /// The pod's addresses.
        #[arg(long = "ip")]
        ips: Vec<IpAddr>,
    },
}

/// Entry point; returns the process exit code.
pub fn main(argv: Vec<OsString>) -> i32 {
    let cli = match Cli::try_parse_from(argv) {
        Ok(c) => c,
        Err(e) => {
            let code = if e.use_stderr() { 2 } else { 0 };
            let _ = e.print();
            return code;
        }
    };
    match dispatch(&cli) {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("wharf net: {e:#}");
            1
        }
    }
}

fn builtin_config(cli: &Cli) -> BuiltinConfig {
    let mut b = BuiltinConfig::new(cli.root.join("net/builtin"));
    b.host_netns = cli.host_netns.clone();
    b
}

fn open(cli: &Cli, network: &Option<String>, builtin: bool) -> Result<Network> {
    let mut cni = CniConfig::new(cli.root.join("net/cni"));
    cni.conf_dirs = vec![cli.cni_conf_dir.clone()];
    if !cli.cni_bin_dir.is_empty() {
        cni.bin_dirs = cli.cni_bin_dir.clone();
    }
    cni.cache_dir = cli.cni_cache_dir.clone();
    cni.host_netns = cli.host_netns.clone();
    let sel = match (network, builtin) {
        (_, true) => Selection::Builtin,
        (Some(n), _) => Selection::Cni(n.clone()),
        (None, false) => Selection::Default,
    };
    Ok(Network::open(&sel, cni, builtin_config(cli))?)
}

/// Parse HOSTPORT:PODPORT[/proto] or HOSTIP:HOSTPORT:PODPORT[/proto].
fn parse_publish(s: &str) -> Result<PortMapping> {
    let (spec, proto) = match s.rsplit_once('/') {
        Some((a, "tcp")) => (a, Protocol::Tcp),
        Some((a, "udp")) => (a, Protocol::Udp),
        Some((a, "sctp")) => (a, Protocol::Sctp),
        Some((_, p)) => bail!("port mapping {s:?}: unknown protocol {p:?} (tcp, udp, sctp)"),
        None => (s, Protocol::Tcp),
    };
    let parts: Vec<&str> = spec.rsplitn(3, ':').collect();
    let port = |p: &str| -> Result<u16> {
        p.parse()
            .with_context(|| format!("port mapping {s:?}: {p:?} is not a port"))
    };
    let (host_ip, host, pod) = match parts.as_slice() {
        [pod, host] => (None, port(host)?, port(pod)?),
        [pod, host, ip] => (
            Some(
                ip.trim_matches(['[', ']'])
                    .parse()
                    .with_context(|| format!("port mapping {s:?}: {ip:?} is not an address"))?,
            ),
            port(host)?,
            port(pod)?,
        ),
        _ => bail!("port mapping {s:?}: expected HOSTPORT:PODPORT[/PROTO]"),
    };
    Ok(PortMapping {
        host_port: host,
        container_port: pod,
        protocol: proto,
        host_ip,
    })
}

fn dispatch(cli: &Cli) -> Result<()> {
    match &cli.cmd {
        Cmd::NetnsCreate { name } => {
            println!("{}", netns::create(&cli.run_dir, name)?.path.display())
        }
        Cmd::NetnsRm { name } => netns::remove(&cli.run_dir, name)?,
        Cmd::NetnsLs => {
            for ns in netns::list(&cli.run_dir)? {
                println!("{}", ns.path.display());
            }
        }
        Cmd::Attach {
            network,
            builtin,
            publish,
            pod,
            netns,
        } => {
            let opts = AttachOptions {
                port_mappings: publish
                    .iter()
                    .map(|p| parse_publish(p))
                    .collect::<Result<_>>()?,
                ..Default::default()
            };
            let att = open(cli, network, *builtin)?.attach(pod, netns, &opts)?;
            println!("{}", serde_json::to_string_pretty(&att)?);
        }
        Cmd::Detach {
            network,
            builtin,
            pod,
            netns,
        } => open(cli, network, *builtin)?.detach(pod, netns.as_deref())?,
        Cmd::Recover => {
            let r = BuiltinNetwork::new(builtin_config(cli))?.recover()?;
            println!(
                "half-attached pods torn down: {}; orphan leases released: {}; orphan veths deleted: {}",
                r.half_attached.len(),
                r.orphan_leases.len(),
                r.orphan_veths.len()
            );
        }
        Cmd::Dns { dir, hostname, ips } => {
            let files = dns::write_files(dir, &dns::PodNames::new(hostname.clone(), ips.clone()))?;
            println!("{}", files.resolv_conf.display());
        }
    }
    Ok(())
}

/// This subsystem's command-line grammar (for shell completions).
pub fn command() -> clap::Command {
    <Cli as clap::CommandFactory>::command()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn publish_flags_parse() {
        let p = parse_publish("8080:80").unwrap();
        assert_eq!(
            (p.host_port, p.container_port, p.protocol, p.host_ip),
            (8080, 80, Protocol::Tcp, None)
        );
        let p = parse_publish("127.0.0.1:53:5353/udp").unwrap();
        assert_eq!(p.host_ip.unwrap().to_string(), "127.0.0.1");
        assert_eq!(p.protocol, Protocol::Udp);
        let p = parse_publish("[::1]:1:2").unwrap();
        assert!(p.host_ip.unwrap().is_ipv6());
        for bad in ["80", "x:80", "80:80/icmp", "a.b:1:2"] {
            assert!(parse_publish(bad).is_err(), "{bad}");
        }
    }
}
