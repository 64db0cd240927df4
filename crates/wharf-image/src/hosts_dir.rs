//! Registry mirrors in containerd's `hosts.toml` directory layout (its `config_path`, e.g.
//! `/etc/containerd/certs.d`), so that a node's existing mirror setup carries over:
//!
//! ```text
//! <dir>/docker.io/hosts.toml
//! <dir>/127.0.0.1:5000/hosts.toml
//! <dir>/_default/hosts.toml        (every registry without a directory of its own)
//! ```
//!
//! ```toml
//! server = "https://registry-1.docker.io"      # optional
//! [host."https://mirror.example.com"]
//!   capabilities = ["pull", "resolve"]
//! [host."http://10.0.0.2:5000"]
//!   capabilities = ["pull", "resolve"]
//!   skip_verify = true
//! ```
//!
//! Each `host` able to pull (no `capabilities` means all) becomes a mirror, in file order;
//! a `server` other than the registry itself is tried last. A host named with `http://`, or
//! with `skip_verify`, is allowed plain HTTP and unverified TLS (Wharf's `insecure`).
//! Client certificates (`client`, `ca`) and `override_path` are not supported: a file using
//! them is refused with that reason rather than half-applied.

use std::collections::HashMap;
use std::path::Path;

use serde::Deserialize;

use crate::error::{Error, Result};

#[derive(Deserialize)]
struct HostsFile {
    server: Option<String>,
    #[serde(default)]
    host: toml::map::Map<String, toml::Value>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct HostEntry {
    capabilities: Option<Vec<String>>,
    #[serde(default)]
    skip_verify: bool,
    #[serde(default)]
    override_path: bool,
    ca: Option<toml::Value>,
    client: Option<toml::Value>,
    header: Option<toml::Value>,
}

/// The host part of an endpoint URL (`http://10.0.0.2:5000/v2` -> `10.0.0.2:5000`).
fn endpoint_host(url: &str) -> &str {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    rest.split('/').next().unwrap_or(rest)
}

/// What a hosts.toml directory says: each registry's mirrors, in order.
pub type Mirrors = HashMap<String, Vec<String>>;

/// Read every `<dir>/<registry>/hosts.toml`: each registry's mirrors, and the mirror hosts
/// that must be allowed plain HTTP. A missing directory is no settings.
pub fn read(dir: &Path) -> Result<(Mirrors, Vec<String>)> {
    let mut out = HashMap::new();
    let mut insecure = Vec::new();
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok((out, insecure)),
        Err(e) => return Err(Error::io(format!("reading {}", dir.display()), e)),
    };
    for e in entries.flatten() {
        let registry = e.file_name().to_string_lossy().into_owned();
        let path = e.path().join("hosts.toml");
        let text = match std::fs::read_to_string(&path) {
            Ok(t) => t,
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => continue,
            Err(err) => return Err(Error::io(format!("reading {}", path.display()), err)),
        };
        let invalid = |msg: String| Error::Invalid(format!("{}: {msg}", path.display()));
        let file: HostsFile = toml::from_str(&text).map_err(|e| invalid(e.to_string()))?;
        let mut mirrors = Vec::new();
        for (url, v) in file.host {
            let entry: HostEntry = v
                .try_into()
                .map_err(|e: toml::de::Error| invalid(format!("host {url:?}: {e}")))?;
            if entry.ca.is_some() || entry.client.is_some() || entry.header.is_some() {
                return Err(invalid(format!(
                    "host {url:?}: ca, client and header settings are not supported"
                )));
            }
            if entry.override_path {
                return Err(invalid(format!(
                    "host {url:?}: override_path is not supported"
                )));
            }
            let pulls = entry
                .capabilities
                .as_ref()
                .is_none_or(|c| c.iter().any(|c| c == "pull"));
            if !pulls {
                continue;
            }
            if url.starts_with("http://") || entry.skip_verify {
                insecure.push(endpoint_host(&url).to_string());
            }
            mirrors.push(url);
        }
        if let Some(server) = file.server
            && endpoint_host(&server) != registry
            && registry != "_default"
        {
            if server.starts_with("http://") {
                insecure.push(endpoint_host(&server).to_string());
            }
            mirrors.push(server);
        }
        out.insert(registry, mirrors);
    }
    Ok((out, insecure))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn containerds_layout_becomes_mirrors_and_mistakes_are_named() {
        let dir = std::env::temp_dir().join(format!("wharf-hosts-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let write = |reg: &str, text: &str| {
            std::fs::create_dir_all(dir.join(reg)).unwrap();
            std::fs::write(dir.join(reg).join("hosts.toml"), text).unwrap();
        };
        write(
            "docker.io",
            r#"server = "https://registry-1.docker.io"
[host."https://mirror.example.com"]
  capabilities = ["pull", "resolve"]
[host."http://10.0.0.2:5000"]
  capabilities = ["pull", "resolve"]
[host."https://push-only.example.com"]
  capabilities = ["push"]
"#,
        );
        write(
            "registry.k8s.io",
            "[host.\"https://k8s-mirror.example.com\"]\n  skip_verify = true\n",
        );
        let (hosts, insecure) = read(&dir).unwrap();
        assert_eq!(
            hosts["docker.io"],
            [
                "https://mirror.example.com",
                "http://10.0.0.2:5000",
                "https://registry-1.docker.io"
            ]
        );
        assert_eq!(hosts["registry.k8s.io"], ["https://k8s-mirror.example.com"]);
        assert!(insecure.contains(&"10.0.0.2:5000".to_string()));
        assert!(insecure.contains(&"k8s-mirror.example.com".to_string()));
        assert!(!insecure.contains(&"mirror.example.com".to_string()));
        write("quay.io", "[host.\"https://m\"]\n  ca = \"/etc/ca.pem\"\n");
        let e = read(&dir).unwrap_err().to_string();
        assert!(
            e.contains("quay.io/hosts.toml") && e.contains("not supported"),
            "{e}"
        );
        write(
            "quay.io",
            "[host.\"https://m\"]\n  capabilitys = [\"pull\"]\n",
        );
        let e = read(&dir).unwrap_err().to_string();
        assert!(e.contains("capabilitys"), "{e}");
        let _ = std::fs::remove_dir_all(&dir);
        assert!(
            read(Path::new("/nonexistent/certs.d"))
                .unwrap()
                .0
                .is_empty()
        );
    }
}
