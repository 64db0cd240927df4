//! The `daemon` section of Wharf's config file (the one file the CLI reads too):
//!
//! ```json
//! { "daemon": {
//!     "listen": "/run/wharf/wharf.sock",
//!     "log-level": "info",
//!     "log-format": "text",
//!     "cgroup-driver": "cgroupfs",
//!     "sandbox-image": "registry.k8s.io/pause:3.10",
//!     "stream-address": "127.0.0.1:0",
//!     "metrics-address": "",
//!     "restrict-oom-score-adj": false,
//!     "docker-listen": "/run/wharf/docker.sock",
//!     "docker-group": "",
//!     "runtime-handlers": ["test-handler"] } }
//! ```
//!
//! Every key is optional; command-line flags win over the file. Unknown keys are refused
//! (a typo must not silently mean the default).

use std::path::{Path, PathBuf};

use serde::Deserialize;
use wharf_engine::validate::Rule;

/// The `daemon` section.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct DaemonConfig {
    /// Socket to serve the CRI on (default /run/wharf/wharf.sock).
    pub listen: Option<PathBuf>,
    /// debug, info, warn or error.
    pub log_level: Option<String>,
    /// text (logfmt) or json.
    pub log_format: Option<String>,
    /// cgroupfs or systemd, for the daemon (the `--cgroup-manager` flag wins; without
    /// either, the config file's engine.cgroup-manager, else systemd where it booted the
    /// host). Reported to kubelet, which follows it.
    pub cgroup_driver: Option<String>,
    /// The pause image kubelet is told about. Wharf needs none (a pod's namespaces are
    /// pinned, not held by a process); accepted so that kubelet configs carry over.
    pub sandbox_image: Option<String>,
    /// Where the streaming server (exec, attach, port-forward) listens.
    pub stream_address: Option<String>,
    /// Where Prometheus metrics are served (empty: nowhere).
    pub metrics_address: Option<String>,
    /// Raise every negative oom_score_adj to 0 (containerd's restrict_oom_score_adj, for
    /// daemons that may not lower scores). Without it, scores are raised only as far as
    /// the host requires (see wharf_engine::oom).
    pub restrict_oom_score_adj: Option<bool>,
    /// Socket to serve the Docker Engine API on (default: `docker.sock` in the run
    /// directory, /run/wharf/docker.sock; "" for none).
    pub docker_listen: Option<PathBuf>,
    /// A group (name or id) given read-write access to the Docker API socket besides root
    /// (docker's `docker` group; whoever is in it is root on the host).
    pub docker_group: Option<String>,
    /// More names for the one runtime Wharf has, for RuntimeClasses whose handler names it
    /// (as containerd's `runtimes.<name>` and CRI-O's `runtimes` tables add handlers). The
    /// default handler ("", also "wharf" and "runc") is always served.
    pub runtime_handlers: Option<Vec<String>>,
}

#[derive(Deserialize)]
struct File {
    #[serde(default)]
    daemon: DaemonConfig,
}

impl DaemonConfig {
    /// The `daemon` section of `path` (defaults when the file or the section is missing).
    pub fn load(path: &Path) -> Result<DaemonConfig, String> {
        let text = match std::fs::read(path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Self::default()),
            Err(e) => return Err(format!("read {}: {e}", path.display())),
        };
        let f: File = serde_json::from_slice(&text)
            .map_err(|e| format!("config file {}: {e}", path.display()))?;
        f.daemon
            .check()
            .map_err(|e| format!("config file {}: {e}", path.display()))?;
        Ok(f.daemon)
    }

    /// Refuse what cannot be served.
    pub fn check(&self) -> Result<(), String> {
        match self.cgroup_driver.as_deref() {
            None | Some("cgroupfs") | Some("systemd") => {}
            Some(other) => {
                return Err(format!(
                    "daemon.cgroup-driver {other:?} is not a cgroup driver (cgroupfs or systemd)"
                ));
            }
        }
        if let Some(l) = &self.log_level
            && crate::log::Level::parse(l).is_none()
        {
            return Err(format!(
                "daemon.log-level {l:?}: use debug, info, warn or error"
            ));
        }
        match self.log_format.as_deref() {
            None | Some("text") | Some("json") => {}
            Some(f) => return Err(format!("daemon.log-format {f:?}: use text or json")),
        }
        // A RuntimeClass's handler is a DNS label.
        for h in self.runtime_handlers.iter().flatten() {
            wharf_engine::validate::check("daemon.runtime-handlers", h, Rule::DnsLabel)
                .map_err(|e| e.to_string())?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(json: &str) -> Result<DaemonConfig, String> {
        let dir = std::env::temp_dir().join(format!("wharf-cri-config-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join(format!("{}.json", json.len()));
        std::fs::write(&p, json).unwrap();
        let r = DaemonConfig::load(&p);
        let _ = std::fs::remove_dir_all(&dir);
        r
    }

    #[test]
    fn keys_are_read_and_mistakes_are_named() {
        let c = parse(
            r#"{"registries": {}, "daemon": {"listen": "/tmp/x.sock", "cgroup-driver": "cgroupfs",
                "sandbox-image": "registry.k8s.io/pause:3.10", "log-level": "debug",
                "restrict-oom-score-adj": true}}"#,
        )
        .unwrap();
        assert_eq!(c.listen.as_deref(), Some(Path::new("/tmp/x.sock")));
        assert_eq!(c.restrict_oom_score_adj, Some(true));
        assert_eq!(parse("{}").unwrap(), DaemonConfig::default());
        let c = parse(r#"{"daemon": {"cgroup-driver": "systemd"}}"#).unwrap();
        assert_eq!(c.cgroup_driver.as_deref(), Some("systemd"));
        let e = parse(r#"{"daemon": {"cgroup-driver": "upstart"}}"#).unwrap_err();
        assert!(e.contains("not a cgroup driver"), "{e}");
        let e = parse(r#"{"daemon": {"listn": "/x"}}"#).unwrap_err();
        assert!(e.contains("unknown field `listn`"), "{e}");
        let e = parse(r#"{"daemon": {"log-level": "loud"}}"#).unwrap_err();
        assert!(e.contains("log-level"), "{e}");
        let c = parse(r#"{"daemon": {"runtime-handlers": ["test-handler"]}}"#).unwrap();
        assert_eq!(c.runtime_handlers, Some(vec!["test-handler".to_string()]));
        let e = parse(r#"{"daemon": {"runtime-handlers": ["Bad_Name"]}}"#).unwrap_err();
        assert!(
            e.contains("runtime-handlers") && e.contains("Bad_Name"),
            "{e}"
        );
        assert_eq!(
            DaemonConfig::load(Path::new("/nonexistent/wharf.json")).unwrap(),
            DaemonConfig::default()
        );
    }
}
