//! Network configuration lists (`*.conflist`) and single-plugin configurations (`*.conf`,
//! `*.json`) from the configured directories, as libcni reads them.

use std::path::{Path, PathBuf};

use serde_json::{Map, Value};

use super::version::{self, Version};
use crate::error::{Error, Result};

/// One network: a named list of plugins run in order.
#[derive(Debug, Clone, PartialEq)]
pub struct NetworkList {
    /// Network name.
    pub name: String,
    /// The spec version the list is run with.
    pub cni_version: String,
    /// Skip CHECK for this network.
    pub disable_check: bool,
    /// Skip GC for this network.
    pub disable_gc: bool,
    /// The plugins' configurations, in order.
    pub plugins: Vec<PluginConf>,
    /// The file's bytes (cached with results, as libcni does).
    pub bytes: Vec<u8>,
    /// Where it was read from (None for lists built from bytes, e.g. a cache).
    pub source: Option<PathBuf>,
}

/// One plugin's configuration object.
#[derive(Debug, Clone, PartialEq)]
pub struct PluginConf {
    /// The plugin binary's name (`type`).
    pub ty: String,
    /// Runtime capabilities the plugin declares (`capabilities` set to true).
    pub capabilities: Vec<String>,
    /// The whole object, passed to the plugin with name, cniVersion, prevResult and
    /// runtimeConfig added.
    pub raw: Map<String, Value>,
}

fn invalid(src: &str, msg: impl std::fmt::Display) -> Error {
    Error::Invalid(format!("CNI configuration {src}: {msg}"))
}

fn plugin(src: &str, v: &Value) -> Result<PluginConf> {
    let raw = v
        .as_object()
        .ok_or_else(|| invalid(src, "a plugin entry is not an object"))?
        .clone();
    let ty = raw
        .get("type")
        .and_then(Value::as_str)
        .ok_or_else(|| invalid(src, "a plugin has no \"type\""))?
        .to_string();
    if ty.is_empty() || ty.contains('/') || ty == "." || ty == ".." {
        return Err(invalid(src, format!("invalid plugin type {ty:?}")));
    }
    let capabilities = raw
        .get("capabilities")
        .and_then(Value::as_object)
        .map(|m| {
            m.iter()
                .filter(|(_, v)| v.as_bool() == Some(true))
                .map(|(k, _)| k.clone())
                .collect()
        })
        .unwrap_or_default();
    Ok(PluginConf {
        ty,
        capabilities,
        raw,
    })
}

impl NetworkList {
    /// Parse a configuration list (`plugins` array) or a single plugin configuration
    /// (`type` at the top level), as the file extension says (`conflist` or not).
    pub fn parse(bytes: &[u8], is_list: bool, source: Option<&Path>) -> Result<NetworkList> {
        let src = source
            .map(|p| p.display().to_string())
            .unwrap_or_else(|| "(cached)".into());
        let v: Value = serde_json::from_slice(bytes).map_err(|e| invalid(&src, e))?;
        let obj = v
            .as_object()
            .ok_or_else(|| invalid(&src, "not a JSON object"))?;
        let name = obj
            .get("name")
            .and_then(Value::as_str)
            .filter(|n| !n.is_empty())
            .ok_or_else(|| invalid(&src, "no \"name\""))?
            .to_string();
        let valid_name = name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
            && !name.starts_with('.');
        if !valid_name {
            return Err(invalid(&src, format!("invalid network name {name:?}")));
        }
        // A 1.1 list may offer several versions: run the highest one Wharf speaks.
        let offered: Vec<String> = obj
            .get("cniVersions")
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(|v| v.as_str().map(str::to_string))
                    .collect()
            })
            .unwrap_or_default();
        let cni_version = if offered.is_empty() {
            obj.get("cniVersion")
                .and_then(Value::as_str)
                .ok_or_else(|| invalid(&src, "no \"cniVersion\""))?
                .to_string()
        } else {
            offered
                .iter()
                .filter(|v| version::is_supported(v))
                .max_by_key(|v| Version::parse(v).unwrap_or(Version(0, 0, 0)))
                .cloned()
                .ok_or_else(|| {
                    invalid(
                        &src,
                        format!("none of the versions {offered:?} is supported"),
                    )
                })?
        };
        if !version::is_supported(&cni_version) {
            return Err(invalid(
                &src,
                format!(
                    "CNI version {cni_version} is not supported (supported: {})",
                    version::SUPPORTED.join(", ")
                ),
            ));
        }
        let plugins = if is_list {
            let arr = obj
                .get("plugins")
                .and_then(Value::as_array)
                .ok_or_else(|| invalid(&src, "no \"plugins\" array"))?;
            if arr.is_empty() {
                return Err(invalid(&src, "\"plugins\" is empty"));
            }
            arr.iter()
                .map(|p| plugin(&src, p))
                .collect::<Result<Vec<_>>>()?
        } else {
            vec![plugin(&src, &v)?]
        };
        let flag = |k: &str| obj.get(k).and_then(Value::as_bool).unwrap_or(false);
        Ok(NetworkList {
            name,
            cni_version,
            disable_check: flag("disableCheck"),
            disable_gc: flag("disableGC"),
            plugins,
            bytes: bytes.to_vec(),
            source: source.map(Path::to_path_buf),
        })
    }

    /// The list's spec version.
    pub fn version(&self) -> Version {
        Version::parse(&self.cni_version).unwrap_or(Version(0, 0, 0))
    }

    /// Parse a cached configuration (a list, or a single plugin configuration).
    pub fn from_cached(bytes: &[u8]) -> Result<NetworkList> {
        let is_list = serde_json::from_slice::<Value>(bytes)
            .ok()
            .is_some_and(|v| v.get("plugins").is_some());
        NetworkList::parse(bytes, is_list, None)
    }
}

/// What loading the configuration directories found.
#[derive(Debug, Default)]
pub struct Loaded {
    /// Valid networks, in order: each directory in turn, files in lexical order. The first
    /// is the default network.
    pub lists: Vec<NetworkList>,
    /// Files that could not be used, with the reason (reported, not fatal, as kubelet
    /// runtimes do).
    pub errors: Vec<String>,
}

/// Read every `*.conflist`, `*.conf` and `*.json` in `dirs`.
pub fn load(dirs: &[PathBuf]) -> Loaded {
    let mut out = Loaded::default();
    for dir in dirs {
        let entries = match std::fs::read_dir(dir) {
            Ok(e) => e,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => {
                out.errors.push(format!("read {}: {e}", dir.display()));
                continue;
            }
        };
        let mut files: Vec<PathBuf> = entries
            .flatten()
            .map(|e| e.path())
            .filter(|p| {
                matches!(
                    p.extension().and_then(|x| x.to_str()),
                    Some("conflist" | "conf" | "json")
                ) && p.is_file()
            })
            .collect();
        files.sort();
        for f in files {
            let is_list = f.extension().is_some_and(|x| x == "conflist");
            match std::fs::read(&f) {
                Ok(bytes) => match NetworkList::parse(&bytes, is_list, Some(&f)) {
                    Ok(l) => out.lists.push(l),
                    Err(e) => out.errors.push(e.to_string()),
                },
                Err(e) => out.errors.push(format!("read {}: {e}", f.display())),
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_and_single_configs_load_in_lexical_order_skipping_bad_files() {
        let tmp = tempfile::tempdir().unwrap();
        let d = tmp.path();
        std::fs::write(
            d.join("20-b.conflist"),
            r#"{"cniVersion":"1.0.0","name":"b","plugins":[{"type":"bridge"},{"type":"portmap","capabilities":{"portMappings":true,"bandwidth":false}}]}"#,
        )
        .unwrap();
        std::fs::write(
            d.join("10-a.conf"),
            r#"{"cniVersion":"0.4.0","name":"a","type":"ptp","ipam":{"type":"host-local"}}"#,
        )
        .unwrap();
        std::fs::write(d.join("05-bad.conflist"), "{not json").unwrap();
        std::fs::write(
            d.join("06-old.conf"),
            r#"{"cniVersion":"0.2.0","name":"old","type":"x"}"#,
        )
        .unwrap();
        std::fs::write(d.join("README"), "ignored").unwrap();
        let l = load(&[d.to_path_buf(), d.join("missing")]);
        let names: Vec<_> = l.lists.iter().map(|n| n.name.as_str()).collect();
        assert_eq!(
            names,
            vec!["a", "b"],
            "first in lexical order is the default"
        );
        assert_eq!(l.errors.len(), 2, "{:?}", l.errors);
        assert!(l.errors.iter().any(|e| e.contains("05-bad.conflist")));
        assert!(
            l.errors
                .iter()
                .any(|e| e.contains("0.2.0 is not supported"))
        );
        let a = &l.lists[0];
        assert_eq!(a.plugins.len(), 1);
        assert_eq!(a.plugins[0].ty, "ptp");
        assert_eq!(a.plugins[0].raw["ipam"]["type"], "host-local");
        assert_eq!(l.lists[1].plugins[1].capabilities, vec!["portMappings"]);
    }

    #[test]
    fn a_list_offering_several_versions_runs_the_highest_supported() {
        let l = NetworkList::parse(
            br#"{"cniVersion":"1.0.0","cniVersions":["1.0.0","1.1.0","9.0.0"],"name":"n","plugins":[{"type":"x"}],"disableCheck":true}"#,
            true,
            None,
        )
        .unwrap();
        assert_eq!(l.cni_version, "1.1.0");
        assert!(l.disable_check);
        for bad in [
            r#"{"cniVersion":"1.0.0","name":"n","plugins":[]}"#,
            r#"{"cniVersion":"1.0.0","name":"n","plugins":[{"type":"../evil"}]}"#,
            r#"{"cniVersion":"1.0.0","name":"a/b","plugins":[{"type":"x"}]}"#,
            r#"{"cniVersion":"1.0.0","plugins":[{"type":"x"}]}"#,
        ] {
            assert!(
                NetworkList::parse(bad.as_bytes(), true, None).is_err(),
                "{bad}"
            );
        }
    }
}
