//! Wharf's registry settings, read from the `registries` section of Wharf's config file
//! (`/etc/wharf/config.json` unless `--config`/`WHARF_CONFIG` says otherwise):
//!
//! ```json
//! { "registries": {
//!     "docker.io":     { "mirrors": ["https://mirror.example.com", "http://10.0.0.2:5000"] },
//!     "10.0.0.5:5000": { "insecure": true } } }
//! ```
//!
//! `mirrors` are tried in order before the registry itself. `insecure` allows plain HTTP
//! (and TLS without certificate checks) for that host; loopback hosts (`localhost`,
//! `127.0.0.0/8`, `::1`) may use plain HTTP without it, any other host only over verified TLS.

use std::collections::HashMap;
use std::net::IpAddr;
use std::path::Path;

use serde::Deserialize;

use crate::error::{Error, Result};

/// The settings of registries that have none of their own (containerd's `_default`).
pub const DEFAULT_HOST: &str = "_default";

/// Default location of Wharf's config file.
pub const DEFAULT_CONFIG_PATH: &str = "/etc/wharf/config.json";

/// The image part of Wharf's config file: registries, and limits on what unpacking may
/// write.
#[derive(Clone, Debug, Default, Deserialize)]
pub struct RegistriesConfig {
    /// Per registry host (as in image names: `docker.io`, `host:port`).
    #[serde(default)]
    pub registries: HashMap<String, RegistryHost>,
    /// The `images` section.
    #[serde(default)]
    pub limits: UnpackLimits,
}

/// How much a layer may expand when it is decompressed (the `images` section:
/// `{"images": {"max-expansion-ratio": 100, "expansion-allowance-bytes": 1073741824}}`).
/// A layer may unpack to this ratio times its compressed size, or to the allowance,
/// whichever is larger: ordinary layers expand 2 to 10 times, and a small layer of zeros
/// that unpacks to gigabytes (a decompression bomb) fills the disk.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct UnpackLimits {
    /// Times its compressed size a layer may unpack to (0: no limit at all).
    #[serde(default = "default_ratio")]
    pub max_expansion_ratio: u64,
    /// Bytes any layer may unpack to, whatever its ratio.
    #[serde(default = "default_allowance")]
    pub expansion_allowance_bytes: u64,
}

fn default_ratio() -> u64 {
    100
}

fn default_allowance() -> u64 {
    1 << 30
}

impl Default for UnpackLimits {
    fn default() -> Self {
        UnpackLimits {
            max_expansion_ratio: default_ratio(),
            expansion_allowance_bytes: default_allowance(),
        }
    }
}

impl UnpackLimits {
    /// The most bytes a layer of `compressed` bytes may unpack to (None: no limit).
    pub fn limit_for(&self, compressed: u64) -> Option<u64> {
        (self.max_expansion_ratio != 0).then(|| {
            compressed
                .saturating_mul(self.max_expansion_ratio)
                .max(self.expansion_allowance_bytes)
        })
    }
}

/// Settings of one registry host.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RegistryHost {
    /// Mirror endpoints tried first, as URLs (`https://host[:port][/prefix]`) or bare hosts.
    #[serde(default)]
    pub mirrors: Vec<String>,
    /// Allow plain HTTP and unverified TLS for this host.
    #[serde(default)]
    pub insecure: bool,
}

#[derive(Deserialize)]
struct FileFormat {
    #[serde(default)]
    registries: HashMap<String, RegistryHost>,
    #[serde(default)]
    images: UnpackLimits,
    /// containerd's hosts.toml directory ([`crate::hosts_dir`]).
    #[serde(default, rename = "registry-config-path")]
    registry_config_path: Option<std::path::PathBuf>,
}

impl RegistriesConfig {
    /// Read `path`; a missing file means defaults.
    pub fn load(path: &Path) -> Result<RegistriesConfig> {
        let text = match std::fs::read(path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Self::default()),
            Err(e) => return Err(Error::io(format!("reading {}", path.display()), e)),
        };
        let f: FileFormat = serde_json::from_slice(&text)
            .map_err(|e| Error::Invalid(format!("config file {}: {e}", path.display())))?;
        let mut registries = f.registries;
        if let Some(dir) = &f.registry_config_path {
            // The JSON section's settings come first; hosts.toml's add to them.
            let (hosts, insecure) = crate::hosts_dir::read(dir)?;
            for (name, mirrors) in hosts {
                let e = registries.entry(name).or_default();
                for m in mirrors {
                    if !e.mirrors.contains(&m) {
                        e.mirrors.push(m);
                    }
                }
            }
            for host in insecure {
                registries.entry(host).or_default().insecure = true;
            }
        }
        Ok(RegistriesConfig {
            registries,
            limits: f.images,
        })
    }

    /// The settings of `registry` (defaults when not configured).
    pub fn host(&self, registry: &str) -> RegistryHost {
        self.registries
            .get(registry)
            .or_else(|| self.registries.get(DEFAULT_HOST))
            .cloned()
            .unwrap_or_default()
    }

    /// Whether `host` may be reached over plain HTTP: loopback, or configured `insecure`.
    pub fn plain_http_allowed(&self, host: &str) -> bool {
        is_loopback(host) || self.registries.get(host).is_some_and(|h| h.insecure)
    }
}

/// `localhost`, `127.x.y.z` or `::1`, with or without a port.
pub fn is_loopback(host: &str) -> bool {
    let h = strip_port(host);
    if h == "localhost" {
        return true;
    }
    h.trim_start_matches('[')
        .trim_end_matches(']')
        .parse::<IpAddr>()
        .is_ok_and(|ip| ip.is_loopback())
}

fn strip_port(host: &str) -> &str {
    if host.starts_with('[') {
        return host.split_once(']').map(|(h, _)| &h[1..]).unwrap_or(host);
    }
    match host.rsplit_once(':') {
        Some((h, p)) if !h.contains(':') && p.bytes().all(|b| b.is_ascii_digit()) => h,
        _ => host,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_hosts() {
        assert!(is_loopback("127.0.0.1:5000"));
        assert!(is_loopback("127.1.2.3"));
        assert!(is_loopback("localhost:80"));
        assert!(is_loopback("[::1]:5000"));
        assert!(!is_loopback("10.0.0.1:5000"));
        assert!(!is_loopback("example.com"));
        assert!(!is_loopback("127.0.0.1.example.com"));
    }

    #[test]
    fn parses_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("c.json");
        std::fs::write(
            &p,
            r#"{"registries":{"docker.io":{"mirrors":["https://m.example"]},"10.0.0.5:5000":{"insecure":true}}}"#,
        )
        .unwrap();
        let c = RegistriesConfig::load(&p).unwrap();
        assert_eq!(c.host("docker.io").mirrors, ["https://m.example"]);
        assert!(c.plain_http_allowed("10.0.0.5:5000"));
        assert!(!c.plain_http_allowed("10.0.0.6:5000"));
        assert!(RegistriesConfig::load(&dir.path().join("missing")).is_ok());
    }
}
