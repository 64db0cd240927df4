//! CNI: what containerd's CRI plugin does with libcni. Network configuration lists come
//! from the configuration directories (the first in lexical order is the default
//! network), plugins from the plugin directories; ADD runs the plugins in order, each
//! getting the previous one's result as prevResult; DEL runs them in reverse with the
//! cached result; CHECK (0.4.0+), STATUS and GC (1.1.0+) and VERSION negotiation as the
//! spec defines them. Results are cached in libcni's layout. Pods attach and detach at
//! once; each network's lock file keeps them from running alongside its GC.
//!
//! Plugins run in the host namespace the caller chose (the engine: its own; tests: a
//! namespace they made), with a deadline.

pub mod cache;
pub mod config;
pub mod exec;
pub mod result;
pub mod version;

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{Map, Value};

use crate::error::{Error, Result};
use crate::netns::NsHandle;
use crate::types::{AttachOptions, Attachment};
pub use cache::CacheEntry;
pub use config::{Loaded, NetworkList, PluginConf};
use exec::{Invocation, Runner};
use version::{V0_4_0, V1_1_0};

/// Default configuration directory.
pub const DEFAULT_CONF_DIR: &str = "/etc/cni/net.d";
/// Default plugin directories: the upstream one, then Debian's.
pub const DEFAULT_BIN_DIRS: &[&str] = &["/opt/cni/bin", "/usr/lib/cni"];

/// Where CNI things are and how plugins run.
#[derive(Debug, Clone)]
pub struct CniConfig {
    /// Configuration directories, in order.
    pub conf_dirs: Vec<PathBuf>,
    /// Plugin directories, in order.
    pub bin_dirs: Vec<PathBuf>,
    /// libcni's cache directory (results go to `<cache_dir>/results`).
    pub cache_dir: PathBuf,
    /// Directory of the per-network lock files (the engine passes `<root>/net/cni`).
    pub lock_dir: PathBuf,
    /// Namespace plugins run in (None: the caller's own).
    pub host_netns: Option<PathBuf>,
    /// Deadline for one plugin execution.
    pub timeout: Duration,
}

impl CniConfig {
    /// The usual locations: /etc/cni/net.d, /opt/cni/bin + /usr/lib/cni, /var/lib/cni;
    /// locks under `lock_dir`.
    pub fn new(lock_dir: impl Into<PathBuf>) -> CniConfig {
        CniConfig {
            conf_dirs: vec![DEFAULT_CONF_DIR.into()],
            bin_dirs: DEFAULT_BIN_DIRS.iter().map(PathBuf::from).collect(),
            cache_dir: cache::DEFAULT_CACHE_DIR.into(),
            lock_dir: lock_dir.into(),
            host_netns: None,
            timeout: Duration::from_secs(120),
        }
    }

    /// Load the configuration directories.
    pub fn load(&self) -> Loaded {
        config::load(&self.conf_dirs)
    }
}

/// Arguments of GC: the attachments that are still in use (everything else cached for
/// the network is removed).
#[derive(Debug, Clone, Default)]
pub struct GcArgs {
    /// (container id, ifname) pairs still in use.
    pub valid_attachments: Vec<(String, String)>,
}

/// One CNI network, ready to attach pods.
pub struct CniNetwork {
    cfg: CniConfig,
    list: NetworkList,
    host: NsHandle,
}

impl CniNetwork {
    /// The network called `name`, or the default one (first in lexical order) when `name`
    /// is None. Ok(None) when no usable configuration exists at all (then the built-in
    /// network serves); an unknown `name` is an error.
    pub fn load(cfg: CniConfig, name: Option<&str>) -> Result<Option<CniNetwork>> {
        let loaded = cfg.load();
        let list = match name {
            Some(n) => Some(
                loaded
                    .lists
                    .into_iter()
                    .find(|l| l.name == n)
                    .or_else(|| Self::cached_list(&cfg, n))
                    .ok_or_else(|| {
                        let why = if loaded.errors.is_empty() {
                            String::new()
                        } else {
                            format!(" (unusable files: {})", loaded.errors.join("; "))
                        };
                        Error::NotFound(format!(
                            "no CNI network named {n:?} in {}{why}",
                            cfg.conf_dirs
                                .iter()
                                .map(|d| d.display().to_string())
                                .collect::<Vec<_>>()
                                .join(", ")
                        ))
                    })?,
            ),
            None => loaded.lists.into_iter().next(),
        };
        match list {
            Some(list) => Ok(Some(CniNetwork::from_list(cfg, list)?)),
            None => Ok(None),
        }
    }

    /// The configuration cached with any attachment of network `name`: after its file is
    /// gone, pods still attached to it can be detached.
    fn cached_list(cfg: &CniConfig, name: &str) -> Option<NetworkList> {
        let entries = cache::list(&cfg.cache_dir, name, None).ok()?;
        let (_, e) = entries.into_iter().next()?;
        let bytes = cache::base64_decode(&e.config).ok()?;
        NetworkList::from_cached(&bytes)
            .ok()
            .filter(|l| l.name == name)
    }

    /// A network from an already parsed list.
    pub fn from_list(cfg: CniConfig, list: NetworkList) -> Result<CniNetwork> {
        let host = NsHandle::open(cfg.host_netns.as_deref())?;
        Ok(CniNetwork { cfg, list, host })
    }

    /// The network's name.
    pub fn name(&self) -> &str {
        &self.list.name
    }

    /// The configuration list.
    pub fn list(&self) -> &NetworkList {
        &self.list
    }

    fn runner(&self) -> Runner<'_> {
        Runner {
            bin_dirs: &self.cfg.bin_dirs,
            host_ns: self.host.fd(),
            timeout: self.cfg.timeout,
        }
    }

    /// The network's lock file. ADD, DEL and CHECK share it, so pods attach at once as
    /// containerd's do: the plugins lock what they share themselves (host-local its
    /// leases), and the engine never works on one pod from two places at a time. The
    /// plugins' GC holds it alone: no pod attaches while they free what no valid
    /// attachment holds. When every ADD held it alone, ten clients starting pods waited
    /// 167 ms per pod for it.
    fn lock_file(&self) -> PathBuf {
        self.cfg.lock_dir.join(format!("{}.lock", self.list.name))
    }

    /// The configuration one plugin gets on stdin: its object plus name, cniVersion,
    /// prevResult and the runtimeConfig entries of the capabilities it declares.
    fn plugin_stdin(
        list: &NetworkList,
        plugin: &PluginConf,
        prev: Option<&Value>,
        caps: &Map<String, Value>,
    ) -> Vec<u8> {
        let mut obj = plugin.raw.clone();
        obj.insert("name".into(), Value::from(list.name.clone()));
        obj.insert("cniVersion".into(), Value::from(list.cni_version.clone()));
        if let Some(prev) = prev {
            obj.insert("prevResult".into(), prev.clone());
        }
        let rc: Map<String, Value> = caps
            .iter()
            .filter(|(k, _)| plugin.capabilities.iter().any(|c| c == *k))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        if !rc.is_empty() {
            obj.insert("runtimeConfig".into(), Value::Object(rc));
        }
        serde_json::to_vec(&Value::Object(obj)).expect("plugin config serializes")
    }

    /// The capability arguments of an attach.
    fn capability_args(opts: &AttachOptions) -> Map<String, Value> {
        let mut m = Map::new();
        if !opts.port_mappings.is_empty() {
            m.insert(
                "portMappings".into(),
                serde_json::to_value(&opts.port_mappings).unwrap(),
            );
        }
        if let Some(bw) = &opts.bandwidth {
            m.insert("bandwidth".into(), serde_json::to_value(bw).unwrap());
        }
        if !opts.ip_ranges.is_empty() {
            m.insert(
                "ipRanges".into(),
                serde_json::to_value(&opts.ip_ranges).unwrap(),
            );
        }
        if let Some(mac) = &opts.mac {
            m.insert("mac".into(), Value::from(mac.clone()));
        }
        if !opts.ips.is_empty() {
            let ips: Vec<String> = opts.ips.iter().map(|i| i.to_string()).collect();
            m.insert("ips".into(), Value::from(ips));
        }
        if let Some(dns) = &opts.dns {
            m.insert(
                "dns".into(),
                serde_json::json!({
                    "servers": dns.nameservers,
                    "searches": dns.search,
                    "options": dns.options,
                }),
            );
        }
        m
    }

    fn cni_args(opts: &AttachOptions) -> Vec<(String, String)> {
        let mut args = opts.cni_args.clone();
        if !args.is_empty() && !args.iter().any(|(k, _)| k == "IgnoreUnknown") {
            // As containerd does: plugins reject arguments they do not know otherwise.
            args.insert(0, ("IgnoreUnknown".into(), "1".into()));
        }
        args
    }

    /// ADD: run the plugins in order. On failure the whole list is deleted again (in
    /// reverse) and nothing is cached, so nothing is left behind.
    ///
    /// Pods attach at once, and plugins race on what pods share when they first make it:
    /// Debian's firewall plugin (1.1.1) fails an ADD whose iptables chain a concurrent ADD
    /// has just made ("CHAIN_USER_ADD failed (File exists)"). So an ADD that a plugin
    /// failed is tried once more, rolled back first, with the network's lock held alone;
    /// kubelet retries a failed sandbox likewise, a sync later. A plugin that timed out is
    /// not waited for twice.
    pub fn attach(
        &self,
        pod_id: &str,
        netns_path: &Path,
        opts: &AttachOptions,
    ) -> Result<Attachment> {
        crate::builtin::validate_pod_id(pod_id)?;
        opts.validate()?;
        let shared = crate::sys::lock_shared(&self.lock_file())?;
        match self.add(pod_id, netns_path, opts) {
            Err(Error::Plugin { msg, .. }) if !msg.starts_with(exec::TIMED_OUT) => {
                drop(shared);
                let _alone = crate::sys::lock_exclusive(&self.lock_file())?;
                self.add(pod_id, netns_path, opts)
            }
            r => r,
        }
    }

    /// One ADD of the whole list (the caller holds the network's lock).
    fn add(&self, pod_id: &str, netns_path: &Path, opts: &AttachOptions) -> Result<Attachment> {
        let args = Self::cni_args(opts);
        let args_str = exec::format_args(&args)?;
        let caps = Self::capability_args(opts);
        let netns = netns_path.to_string_lossy();
        let inv = Invocation {
            command: "ADD",
            container_id: pod_id,
            netns: &netns,
            ifname: &opts.ifname,
            args: &args_str,
        };
        let runner = self.runner();
        let mut prev: Option<Value> = None;
        for plugin in &self.list.plugins {
            let stdin = Self::plugin_stdin(&self.list, plugin, prev.as_ref(), &caps);
            let step = runner.run(&plugin.ty, &inv, &stdin).and_then(|out| {
                serde_json::from_slice::<Value>(&out).map_err(|e| {
                    Error::Invalid(format!(
                        "network {}: plugin {} printed an unreadable result: {e}",
                        self.list.name, plugin.ty
                    ))
                })
            });
            match step {
                Ok(r) => prev = Some(r),
                Err(e) => {
                    let undo = self.delete_all(&runner, &inv, prev.as_ref(), &caps);
                    return Err(match undo {
                        Ok(()) => e,
                        Err(u) => Error::Multiple(vec![
                            e.to_string(),
                            format!("deleting the failed attachment also failed: {u}"),
                        ]),
                    });
                }
            }
        }
        let result = prev.unwrap_or(Value::Null);
        let entry = CacheEntry {
            kind: "cniCacheV1".into(),
            container_id: pod_id.into(),
            config: cache::base64_encode(&self.list.bytes),
            if_name: opts.ifname.clone(),
            network_name: self.list.name.clone(),
            netns: netns.to_string(),
            cni_args: args,
            capability_args: caps.clone(),
            result: result.clone(),
        };
        let att = result::to_attachment(&self.list.name, &result);
        let cached = cache::write(&self.cfg.cache_dir, &entry);
        match (att, cached) {
            (Ok(att), Ok(())) => Ok(att),
            (a, c) => {
                let mut errs: Vec<String> = [a.err(), c.err()]
                    .into_iter()
                    .flatten()
                    .map(|e| e.to_string())
                    .collect();
                if let Err(u) = self.delete_all(&runner, &inv, Some(&result), &caps) {
                    errs.push(format!("deleting the failed attachment also failed: {u}"));
                }
                let _ = crate::sys::remove_file_if_exists(&cache::path(
                    &self.cfg.cache_dir,
                    &self.list.name,
                    pod_id,
                    &opts.ifname,
                ));
                Err(Error::Multiple(errs))
            }
        }
    }

    /// DEL every plugin of the list in reverse order; every plugin is tried, errors are
    /// collected.
    fn delete_all(
        &self,
        runner: &Runner<'_>,
        inv: &Invocation<'_>,
        prev: Option<&Value>,
        caps: &Map<String, Value>,
    ) -> Result<()> {
        self.delete_list(&self.list, runner, inv, prev, caps)
    }

    fn delete_list(
        &self,
        list: &NetworkList,
        runner: &Runner<'_>,
        inv: &Invocation<'_>,
        prev: Option<&Value>,
        caps: &Map<String, Value>,
    ) -> Result<()> {
        let inv = Invocation {
            command: "DEL",
            ..inv.clone()
        };
        let mut errors = Vec::new();
        for plugin in list.plugins.iter().rev() {
            let stdin = Self::plugin_stdin(list, plugin, prev, caps);
            if let Err(e) = runner.run(&plugin.ty, &inv, &stdin) {
                errors.push(e.to_string());
            }
        }
        if errors.is_empty() {
            Ok(())
        } else {
            Err(Error::Multiple(errors))
        }
    }

    /// DEL: remove the pod from the network, using the cached result (and the cached
    /// configuration and arguments, so it works after a restart and even if the
    /// configuration file changed or went away). Idempotent: without a cache entry the
    /// plugins still get a DEL (they must tolerate it), and a second detach finds nothing
    /// to do. `netns_path` may be None or gone (the pod's namespace already removed).
    pub fn detach(&self, pod_id: &str, netns_path: Option<&Path>) -> Result<()> {
        crate::builtin::validate_pod_id(pod_id)?;
        let _lock = crate::sys::lock_shared(&self.lock_file())?;
        let entries = cache::list(&self.cfg.cache_dir, &self.list.name, Some(pod_id))?;
        let runner = self.runner();
        let netns_now = |cached: &str| -> String {
            match netns_path {
                Some(p) if p.exists() => p.to_string_lossy().into_owned(),
                Some(_) => String::new(),
                None if !cached.is_empty() && Path::new(cached).exists() => cached.to_string(),
                None => String::new(),
            }
        };
        if entries.is_empty() {
            let netns = netns_now("");
            let inv = Invocation {
                command: "DEL",
                container_id: pod_id,
                netns: &netns,
                ifname: "eth0",
                args: "",
            };
            return self.delete_list(&self.list, &runner, &inv, None, &Map::new());
        }
        for (path, e) in entries {
            let list = cache::base64_decode(&e.config)
                .and_then(|b| NetworkList::from_cached(&b))
                .unwrap_or_else(|_| self.list.clone());
            // The current configuration wins when it still defines this network (libcni
            // DELs with the configuration it is given); the cached one is the fallback.
            let list = if self.list.source.is_some() {
                self.list.clone()
            } else {
                list
            };
            let netns = netns_now(&e.netns);
            let args = exec::format_args(&e.cni_args)?;
            let inv = Invocation {
                command: "DEL",
                container_id: pod_id,
                netns: &netns,
                ifname: &e.if_name,
                args: &args,
            };
            let prev = (!e.result.is_null()).then_some(&e.result);
            self.delete_list(&list, &runner, &inv, prev, &e.capability_args)?;
            crate::sys::remove_file_if_exists(&path)?;
        }
        Ok(())
    }

    /// CHECK (0.4.0+): ask every plugin whether the pod's network is as it was set up.
    /// A list with disableCheck, or of a version before 0.4.0, passes without running.
    pub fn check(&self, pod_id: &str, netns_path: &Path) -> Result<()> {
        crate::builtin::validate_pod_id(pod_id)?;
        if self.list.disable_check || !self.list.version().at_least(V0_4_0) {
            return Ok(());
        }
        let _lock = crate::sys::lock_shared(&self.lock_file())?;
        let entries = cache::list(&self.cfg.cache_dir, &self.list.name, Some(pod_id))?;
        let (_, e) = entries.into_iter().next().ok_or_else(|| {
            Error::NotFound(format!(
                "pod {pod_id} has no cached result on network {}",
                self.list.name
            ))
        })?;
        let runner = self.runner();
        let netns = netns_path.to_string_lossy();
        let args = exec::format_args(&e.cni_args)?;
        let inv = Invocation {
            command: "CHECK",
            container_id: pod_id,
            netns: &netns,
            ifname: &e.if_name,
            args: &args,
        };
        for plugin in &self.list.plugins {
            let stdin = Self::plugin_stdin(&self.list, plugin, Some(&e.result), &e.capability_args);
            runner.run(&plugin.ty, &inv, &stdin)?;
        }
        Ok(())
    }

    /// VERSION: the spec versions plugin `ty` supports.
    pub fn plugin_versions(&self, ty: &str) -> Result<Vec<String>> {
        let stdin =
            serde_json::to_vec(&serde_json::json!({"cniVersion": self.list.cni_version})).unwrap();
        let inv = Invocation {
            command: "VERSION",
            ..Default::default()
        };
        let out = self.runner().run(ty, &inv, &stdin)?;
        let v: Value = serde_json::from_slice(&out)
            .map_err(|e| Error::Invalid(format!("plugin {ty}: unreadable VERSION answer: {e}")))?;
        Ok(v["supportedVersions"]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|s| s.as_str().map(str::to_string))
                    .collect()
            })
            .unwrap_or_default())
    }

    /// Check that every plugin exists and supports the list's version (libcni's
    /// ValidateNetworkList).
    pub fn validate(&self) -> Result<()> {
        for p in &self.list.plugins {
            let versions = self.plugin_versions(&p.ty)?;
            if !versions.contains(&self.list.cni_version) {
                return Err(Error::Invalid(format!(
                    "network {}: plugin {} does not support CNI version {} (it supports {})",
                    self.list.name,
                    p.ty,
                    self.list.cni_version,
                    versions.join(", ")
                )));
            }
        }
        Ok(())
    }

    /// The plugins that speak 1.1.0 (STATUS and GC go only to them).
    fn plugins_1_1(&self) -> Result<Vec<&PluginConf>> {
        let mut out = Vec::new();
        for p in &self.list.plugins {
            if self.plugin_versions(&p.ty)?.iter().any(|v| v == "1.1.0") {
                out.push(p);
            }
        }
        Ok(out)
    }

    /// STATUS (1.1.0+): whether the network is ready for ADDs. Lists of older versions,
    /// and plugins not speaking 1.1.0, are taken as ready.
    pub fn status(&self) -> Result<()> {
        if !self.list.version().at_least(V1_1_0) {
            return Ok(());
        }
        let runner = self.runner();
        let inv = Invocation {
            command: "STATUS",
            ..Default::default()
        };
        for p in self.plugins_1_1()? {
            let stdin = Self::plugin_stdin(&self.list, p, None, &Map::new());
            runner.run(&p.ty, &inv, &stdin)?;
        }
        Ok(())
    }

    /// GC: DEL every cached attachment of this network that is not in
    /// `args.valid_attachments`, then (1.1.0+, unless disableGC) ask each plugin to free
    /// whatever else belongs to no valid attachment.
    pub fn gc(&self, args: &GcArgs) -> Result<()> {
        let valid = |c: &str, i: &str| {
            args.valid_attachments
                .iter()
                .any(|(vc, vi)| vc == c && vi == i)
        };
        let stale: Vec<String> = cache::list(&self.cfg.cache_dir, &self.list.name, None)?
            .into_iter()
            .filter(|(_, e)| !valid(&e.container_id, &e.if_name))
            .map(|(_, e)| e.container_id)
            .collect();
        let mut errors = Vec::new();
        for c in stale {
            if let Err(e) = self.detach(&c, None) {
                errors.push(format!("pod {c}: {e}"));
            }
        }
        if self.list.version().at_least(V1_1_0) && !self.list.disable_gc {
            let _lock = crate::sys::lock_exclusive(&self.lock_file())?;
            let runner = self.runner();
            let inv = Invocation {
                command: "GC",
                ..Default::default()
            };
            let attachments: Vec<Value> = args
                .valid_attachments
                .iter()
                .map(|(c, i)| serde_json::json!({"containerID": c, "ifname": i}))
                .collect();
            for p in self.plugins_1_1()? {
                let mut stdin: Value =
                    serde_json::from_slice(&Self::plugin_stdin(&self.list, p, None, &Map::new()))
                        .unwrap();
                stdin["cni.dev/valid-attachments"] = Value::from(attachments.clone());
                if let Err(e) = runner.run(&p.ty, &inv, &serde_json::to_vec(&stdin).unwrap()) {
                    errors.push(e.to_string());
                }
            }
        }
        if errors.is_empty() {
            Ok(())
        } else {
            Err(Error::Multiple(errors))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::{Bandwidth, PortMapping, Protocol};

    #[test]
    fn plugins_get_name_version_prev_result_and_only_their_capabilities() {
        let list = NetworkList::parse(
            br#"{"cniVersion":"1.0.0","name":"n","plugins":[{"type":"bridge","x":1},
                {"type":"portmap","capabilities":{"portMappings":true}}]}"#,
            true,
            None,
        )
        .unwrap();
        let opts = AttachOptions {
            port_mappings: vec![PortMapping {
                host_port: 80,
                container_port: 8080,
                protocol: Protocol::Udp,
                host_ip: None,
            }],
            bandwidth: Some(Bandwidth {
                ingress_rate: Some(1),
                ingress_burst: None,
                egress_rate: None,
                egress_burst: None,
            }),
            mac: Some("02:00:00:00:00:01".into()),
            ..Default::default()
        };
        let caps = CniNetwork::capability_args(&opts);
        assert_eq!(caps.len(), 3);
        let prev = serde_json::json!({"cniVersion":"1.0.0","ips":[]});
        let first: Value = serde_json::from_slice(&CniNetwork::plugin_stdin(
            &list,
            &list.plugins[0],
            None,
            &caps,
        ))
        .unwrap();
        assert_eq!(first["name"], "n");
        assert_eq!(first["cniVersion"], "1.0.0");
        assert_eq!(first["x"], 1);
        assert!(
            first.get("runtimeConfig").is_none(),
            "bridge declares no capability"
        );
        assert!(first.get("prevResult").is_none());
        let second: Value = serde_json::from_slice(&CniNetwork::plugin_stdin(
            &list,
            &list.plugins[1],
            Some(&prev),
            &caps,
        ))
        .unwrap();
        assert_eq!(second["prevResult"], prev);
        assert_eq!(
            second["runtimeConfig"],
            serde_json::json!({"portMappings":[{"hostPort":80,"containerPort":8080,"protocol":"udp"}]})
        );
        let args = CniNetwork::cni_args(&AttachOptions {
            cni_args: vec![("K8S_POD_NAME".into(), "web".into())],
            ..Default::default()
        });
        assert_eq!(
            exec::format_args(&args).unwrap(),
            "IgnoreUnknown=1;K8S_POD_NAME=web"
        );
        assert!(exec::format_args(&[("a;b".into(), "c".into())]).is_err());
    }
}
