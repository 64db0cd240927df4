//! Network setup + teardown of one pod: Wharf's built-in network (nftables in-process via
//! libnftables, and with the `nft` command fallback) against the CNI bridge chain from
//! Debian's plugins (bridge + host-local, portmap, firewall, tuning), in the same run,
//! interleaved, each with one port mapping. Everything happens in namespaces the benchmark
//! creates under a temp dir (a "host" namespace holding the bridges and rules, one pod
//! namespace); the machine's own network is not touched.
//!
//! Run as root: `cargo run --release -p wharf-bench --bin net_setup [-- ITERATIONS]`.

use std::path::Path;
use std::time::{Duration, Instant};

use wharf_bench::{median, ms};
use wharf_net::cni::{CniConfig, CniNetwork};
use wharf_net::nft::Backend;
use wharf_net::{AttachOptions, BuiltinConfig, BuiltinNetwork, PortMapping, Protocol, netns};

const DEBIAN_CNI: &str = "/usr/lib/cni";

/// println! that ignores a closed stdout (piping into `head` must not abort the run before
/// its cleanup).
macro_rules! out {
    ($($t:tt)*) => {{
        use std::io::Write;
        let _ = writeln!(std::io::stdout(), $($t)*);
    }};
}
const WARMUP: usize = 3;

type Res<T> = Result<T, Box<dyn std::error::Error>>;

fn main() {
    // Errors are returned, not panicked: the release profile aborts on panic, and the
    // namespaces and mounts are only cleaned up when `run` returns.
    let code = match run() {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("net_setup: {e}");
            1
        }
    };
    std::process::exit(code);
}

fn run() -> Res<()> {
    let iterations: usize = match std::env::args().nth(1) {
        Some(a) => a
            .parse()
            .map_err(|_| format!("ITERATIONS {a:?} is not a number"))?,
        None => 50,
    };
    if !Path::new(DEBIAN_CNI).join("bridge").exists() {
        eprintln!("net_setup: needs Debian's containernetworking-plugins in {DEBIAN_CNI}");
        std::process::exit(2);
    }
    // The temp dir, its namespaces and mounts go away when `env` drops (also on panic).
    let env = wharf_testbed::Env::new("bench-net");
    let run = env.path().join("run");
    let host = netns::create(&run, "host")?;
    let pod = netns::create(&run, "pod").inspect_err(|_| {
        let _ = netns::remove_path(&host.path);
    })?;
    let _cleanup = Cleanup(&[host.path.clone(), pod.path.clone()]);

    let builtin = |backend: Backend, dir: &str| -> Res<BuiltinNetwork> {
        let mut cfg = BuiltinConfig::new(env.path().join(dir));
        cfg.host_netns = Some(host.path.clone());
        cfg.nft_backend = backend;
        if dir == "builtin-exec" {
            cfg.bridge = "wharf1".into();
            cfg.subnet = "10.87.0.0/16".parse().unwrap();
            cfg.nft_table = "wharf_exec".into();
        }
        Ok(BuiltinNetwork::new(cfg)?)
    };
    let lib = builtin(Backend::Library, "builtin")?;
    let exec = builtin(Backend::Command("nft".into()), "builtin-exec")?;

    let conf_dir = env.path().join("net.d");
    std::fs::create_dir_all(&conf_dir)?;
    std::fs::write(
        conf_dir.join("10-chain.conflist"),
        format!(
            r#"{{"cniVersion":"1.0.0","name":"chain","plugins":[
  {{"type":"bridge","bridge":"cni-bench0","isGateway":true,"ipMasq":true,"hairpinMode":true,
    "ipam":{{"type":"host-local","ranges":[[{{"subnet":"10.94.0.0/24"}}]],"routes":[{{"dst":"0.0.0.0/0"}}],"dataDir":"{}"}}}},
  {{"type":"portmap","capabilities":{{"portMappings":true}},"snat":true}},
  {{"type":"firewall","backend":"iptables"}},
  {{"type":"tuning","sysctl":{{"net.ipv4.conf.eth0.arp_notify":"1"}}}}]}}"#,
            env.path().join("host-local").display()
        ),
    )?;
    let mut cfg = CniConfig::new(env.path().join("cni-locks"));
    cfg.conf_dirs = vec![conf_dir];
    cfg.bin_dirs = vec![DEBIAN_CNI.into()];
    cfg.cache_dir = env.path().join("cni-cache");
    cfg.host_netns = Some(host.path.clone());
    let cni = CniNetwork::load(cfg, None)?.ok_or("the CNI chain did not load")?;

    let opts = AttachOptions {
        port_mappings: vec![PortMapping {
            host_port: 8080,
            container_port: 80,
            protocol: Protocol::Tcp,
            host_ip: None,
        }],
        ..Default::default()
    };
    let cycle_builtin = |net: &BuiltinNetwork| -> Res<Duration> {
        let t = Instant::now();
        net.attach("bench-pod", &pod.path, &opts)?;
        net.detach("bench-pod", Some(&pod.path))?;
        Ok(t.elapsed())
    };
    let cycle_cni = || -> Res<Duration> {
        let t = Instant::now();
        cni.attach("bench-pod", &pod.path, &opts)?;
        cni.detach("bench-pod", Some(&pod.path))?;
        Ok(t.elapsed())
    };
    let cycle_netns = || -> Res<Duration> {
        let t = Instant::now();
        let ns = netns::create(&run, "scratch")?;
        netns::remove_path(&ns.path)?;
        Ok(t.elapsed())
    };

    let (mut b, mut e, mut c, mut n) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for i in 0..WARMUP + iterations {
        let sample = (
            cycle_builtin(&lib)?,
            cycle_builtin(&exec)?,
            cycle_cni()?,
            cycle_netns()?,
        );
        if i >= WARMUP {
            b.push(sample.0);
            e.push(sample.1);
            c.push(sample.2);
            n.push(sample.3);
        }
    }
    let (mb, me, mc, mn) = (
        median(&mut b),
        median(&mut e),
        median(&mut c),
        median(&mut n),
    );
    let p90 = |v: &[Duration]| v[(v.len() * 9 / 10).min(v.len() - 1)];
    out!(
        "net_setup: attach + detach of one pod with one port mapping, {iterations} iterations (+{WARMUP} warm-up), medians"
    );
    out!(
        "  built-in (libnftables)   {:>12}   p90 {}",
        ms(mb),
        ms(p90(&b))
    );
    out!(
        "  built-in (nft command)   {:>12}   p90 {}",
        ms(me),
        ms(p90(&e))
    );
    out!(
        "  CNI bridge chain         {:>12}   p90 {}   (bridge+host-local, portmap, firewall, tuning)",
        ms(mc),
        ms(p90(&c))
    );
    out!(
        "  netns create + remove    {:>12}   (common to both, not included above)",
        ms(mn)
    );
    out!(
        "  ratio built-in / CNI: {:.3}x (libnftables), {:.3}x (nft command); goal <= 0.2x",
        mb.as_secs_f64() / mc.as_secs_f64(),
        me.as_secs_f64() / mc.as_secs_f64()
    );
    // Leave the host namespace as found: bridges and tables go with it anyway.
    let _ = lib.remove();
    let _ = exec.remove();
    Ok(())
}

/// Unpins the benchmark's namespaces on the way out.
struct Cleanup<'a>(&'a [std::path::PathBuf]);

impl Drop for Cleanup<'_> {
    fn drop(&mut self) {
        for p in self.0 {
            let _ = netns::remove_path(p);
        }
    }
}
