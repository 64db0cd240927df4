//! Limits a container gets when its user names none, where podman and CRI-O are safer than
//! docker: at most 2048 processes (podman's `pids_limit`; docker sets none, so one fork
//! bomb takes the host), and 1048576 open files (podman's `default_ulimits`), lowered to
//! what the host allows.
//!
//! The CLI, `wharf play` and the Docker API apply them ([`Engine::apply_container_defaults`]);
//! the CRI does not: there a pod's limits are what kubelet sends (kubelet's `podPidsLimit`
//! on the pod's cgroup). They are set in the `containers` section of Wharf's config file:
//!
//! ```json
//! { "containers": { "pids-limit": 2048, "default-ulimits": ["nofile=1048576:1048576"] } }
//! ```
//!
//! A `pids-limit` of 0 or -1 means none; an empty `default-ulimits` list means the shim's
//! own limits are inherited, as runc does.

use std::path::Path;

use serde::Deserialize;

use crate::engine::Engine;
use crate::error::{Error, Result};
use crate::model::ContainerSpec;

/// podman's default pids limit.
pub const DEFAULT_PIDS_LIMIT: i64 = 2048;
/// podman's default open-file limit (soft and hard).
pub const DEFAULT_NOFILE: u64 = 1 << 20;

/// The limits of containers whose users named none.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContainerDefaults {
    /// Most processes (-1: none).
    pub pids_limit: i64,
    /// Resource limits: (name as `nofile`, soft, hard).
    pub ulimits: Vec<(String, u64, u64)>,
}

impl Default for ContainerDefaults {
    fn default() -> Self {
        ContainerDefaults {
            pids_limit: DEFAULT_PIDS_LIMIT,
            ulimits: vec![("nofile".into(), DEFAULT_NOFILE, DEFAULT_NOFILE)],
        }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct Section {
    pids_limit: Option<i64>,
    default_ulimits: Option<Vec<String>>,
}

impl ContainerDefaults {
    /// The `containers` section of the config file at `path` (defaults when the file or the
    /// section is missing).
    pub fn load(path: &Path) -> Result<ContainerDefaults> {
        let text = match std::fs::read(path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Self::default()),
            Err(e) => {
                return Err(Error::Os {
                    what: format!("reading {}", path.display()),
                    err: e,
                });
            }
        };
        let bad = |e: String| Error::Invalid(format!("config file {}: {e}", path.display()));
        let v: serde_json::Value = serde_json::from_slice(&text).map_err(|e| bad(e.to_string()))?;
        let Some(section) = v.get("containers") else {
            return Ok(Self::default());
        };
        let s: Section =
            serde_json::from_value(section.clone()).map_err(|e| bad(format!("containers: {e}")))?;
        let mut d = Self::default();
        if let Some(p) = s.pids_limit {
            d.pids_limit = if p <= 0 { -1 } else { p };
        }
        if let Some(list) = s.default_ulimits {
            d.ulimits = list
                .iter()
                .map(|u| {
                    parse_ulimit(u).map_err(|e| bad(format!("containers.default-ulimits: {e}")))
                })
                .collect::<Result<_>>()?;
        }
        Ok(d)
    }
}

/// `NAME=SOFT[:HARD]` (-1 or `unlimited`: no limit), docker's `--ulimit`.
pub fn parse_ulimit(s: &str) -> std::result::Result<(String, u64, u64), String> {
    let bad = || format!("invalid ulimit {s:?}: use NAME=SOFT[:HARD]");
    let (name, values) = s.split_once('=').ok_or_else(bad)?;
    let value = |v: &str| -> std::result::Result<u64, String> {
        match v {
            "-1" | "unlimited" => Ok(u64::MAX),
            n => n.parse().map_err(|_| bad()),
        }
    };
    let (soft, hard) = match values.split_once(':') {
        Some((a, b)) => (value(a)?, value(b)?),
        None => (value(values)?, value(values)?),
    };
    if !crate::specgen::ULIMITS.contains(&name) {
        return Err(format!(
            "invalid ulimit {s:?}: {name:?} is not one of {}",
            crate::specgen::ULIMITS.join(", ")
        ));
    }
    if soft > hard {
        return Err(format!(
            "invalid ulimit {s:?}: the soft limit is above the hard one"
        ));
    }
    Ok((name.to_string(), soft, hard))
}

/// This process's hard limit of `name` (what a container started from it can get without
/// CAP_SYS_RESOURCE), None when unknown.
fn hard_limit(name: &str) -> Option<u64> {
    use rustix::process::Resource;
    let resource = match name {
        "nofile" => Resource::Nofile,
        "nproc" => Resource::Nproc,
        "memlock" => Resource::Memlock,
        "stack" => Resource::Stack,
        "core" => Resource::Core,
        _ => return None,
    };
    // None: unlimited.
    Some(
        rustix::process::getrlimit(resource)
            .maximum
            .unwrap_or(u64::MAX),
    )
}

/// capabilities(7): CAP_SYS_RESOURCE.
const CAP_SYS_RESOURCE: u32 = 24;

/// Whether this process may raise a hard limit (CAP_SYS_RESOURCE in its effective set).
fn can_raise_limits() -> bool {
    crate::specgen::own_caps("CapEff").is_some_and(|caps| caps & (1 << CAP_SYS_RESOURCE) != 0)
}

impl Engine {
    /// The limits of containers whose users named none.
    pub fn container_defaults(&self) -> &ContainerDefaults {
        &self.opts.defaults
    }

    /// Give `spec` the default limits it does not name itself. A default above what the
    /// host allows is lowered to the host's limit; the first time that happens after a
    /// boot, the returned note says so (the CLI shows it on a terminal, the daemon in its
    /// log: scripts and clients see no output they did not ask for).
    pub fn apply_container_defaults(&self, spec: &mut ContainerSpec) -> Option<String> {
        let d = &self.opts.defaults;
        match spec.pids_limit {
            None if d.pids_limit > 0 => spec.pids_limit = Some(d.pids_limit),
            Some(p) if p <= 0 => spec.pids_limit = Some(-1),
            _ => {}
        }
        let mut notes = Vec::new();
        let raise = can_raise_limits();
        for (name, soft, hard) in &d.ulimits {
            if spec.ulimits.iter().any(|(n, _, _)| n == name) {
                continue;
            }
            let (mut soft, mut hard) = (*soft, *hard);
            if let Some(max) = hard_limit(name).filter(|m| *m < hard && !raise) {
                notes.push(format!(
                    "containers get {name} {}:{max}, not {soft}:{hard}: this host's hard limit is {max} and Wharf cannot raise it (no CAP_SYS_RESOURCE)",
                    soft.min(max)
                ));
                hard = max;
                soft = soft.min(max);
            }
            spec.ulimits.push((name.clone(), soft, hard));
        }
        if notes.is_empty() {
            return None;
        }
        // Said once per boot: the run directory is a tmpfs.
        let marker = self.paths.run.join("defaults-note");
        std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(marker)
            .ok()
            .map(|_| notes.join("; "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_config_section_sets_and_clears_the_defaults() {
        let tmp = tempfile::tempdir().unwrap();
        let f = tmp.path().join("config.json");
        assert_eq!(
            ContainerDefaults::load(&f).unwrap(),
            ContainerDefaults::default()
        );
        std::fs::write(&f, r#"{"registries": {}}"#).unwrap();
        assert_eq!(ContainerDefaults::load(&f).unwrap().pids_limit, 2048);
        std::fs::write(
            &f,
            r#"{"containers": {"pids-limit": -1, "default-ulimits": ["nofile=1024:4096", "nproc=-1"]}}"#,
        )
        .unwrap();
        let d = ContainerDefaults::load(&f).unwrap();
        assert_eq!(d.pids_limit, -1);
        assert_eq!(
            d.ulimits,
            [
                ("nofile".to_string(), 1024, 4096),
                ("nproc".to_string(), u64::MAX, u64::MAX)
            ]
        );
        std::fs::write(&f, r#"{"containers": {"default-ulimits": ["nofile=9:1"]}}"#).unwrap();
        let e = ContainerDefaults::load(&f).unwrap_err().to_string();
        assert!(e.contains("soft limit is above"), "{e}");
        std::fs::write(&f, r#"{"containers": {"pid-limit": 5}}"#).unwrap();
        let e = ContainerDefaults::load(&f).unwrap_err().to_string();
        assert!(e.contains("pid-limit"), "{e}");
    }

    #[test]
    fn ulimits_parse_as_docker_takes_them() {
        assert_eq!(
            parse_ulimit("nofile=1024:2048").unwrap(),
            ("nofile".into(), 1024, 2048)
        );
        assert_eq!(
            parse_ulimit("core=unlimited").unwrap(),
            ("core".into(), u64::MAX, u64::MAX)
        );
        for bad in ["nofile", "files=1", "nofile=x", "nofile=2:1"] {
            assert!(parse_ulimit(bad).is_err(), "{bad}");
        }
    }
}
