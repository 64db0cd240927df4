//! Wharf's own store of ConfigMaps and Secrets (`wharf configmap|secret create|ls|rm`),
//! which `wharf play` looks in for the objects a manifest uses but does not define: the
//! part of an API server a single host needs. One JSON file per object,
//! `<root>/kube/objects/<configmap|secret>/<namespace>.<name>.json`, owner-only (secrets
//! are on disk as they are in etcd without encryption at rest: readable by root only).

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use base64::Engine as _;
use serde::{Deserialize, Serialize};
use wharf_engine::error::{Error, Result};

use crate::DataObject;
use crate::validate;

/// The store under a state root.
#[derive(Debug, Clone)]
pub struct ObjectStore {
    dir: PathBuf,
}

/// An object as the store keeps it (values base64, as in a Secret's `data`).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Record {
    kind: String,
    name: String,
    namespace: String,
    data: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "BTreeSet::is_empty")]
    binary_keys: BTreeSet<String>,
    created_at: String,
}

/// A stored object and when it was made.
#[derive(Debug, Clone)]
pub struct Stored {
    pub object: DataObject,
    pub created_at: String,
}

fn kind_dir(kind: &str) -> &'static str {
    if kind == "Secret" {
        "secret"
    } else {
        "configmap"
    }
}

fn io(what: String, err: std::io::Error) -> Error {
    Error::Os { what, err }
}

impl ObjectStore {
    /// The store of the state root `root`.
    pub fn new(root: &Path) -> ObjectStore {
        ObjectStore {
            dir: root.join("kube").join("objects"),
        }
    }

    fn path(&self, kind: &str, namespace: &str, name: &str) -> PathBuf {
        self.dir
            .join(kind_dir(kind))
            .join(format!("{namespace}.{name}.json"))
    }

    /// Keep `o` (in namespace "default" when it names none); one that exists already is
    /// an error unless `replace`.
    pub fn save(&self, o: &DataObject, replace: bool) -> Result<()> {
        if !validate::is_dns_subdomain(&o.name) {
            return Err(Error::Invalid(format!(
                "{} name {:?} is invalid: {}",
                o.kind,
                o.name,
                validate::dns_subdomain_hint()
            )));
        }
        let ns = o.namespace.clone().unwrap_or_else(|| "default".into());
        if !validate::is_dns_label(&ns) {
            return Err(Error::Invalid(format!(
                "namespace {ns:?} is invalid: {}",
                validate::dns_label_hint()
            )));
        }
        for k in o.data.keys() {
            if !validate::is_config_key(k) {
                return Err(Error::Invalid(format!(
                    "{} {}: key {k:?} is invalid: keys are 1-253 letters, digits, '-', '_' or '.'",
                    o.kind, o.name
                )));
            }
        }
        let path = self.path(o.kind, &ns, &o.name);
        let dir = path.parent().expect("has a parent");
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .map_err(|e| io(format!("create {}", dir.display()), e))?;
        if path.exists() && !replace {
            return Err(Error::Exists(format!(
                "{} {} already exists in namespace {ns} (rm it first, or create with --replace)",
                o.kind, o.name
            )));
        }
        let record = Record {
            kind: o.kind.to_string(),
            name: o.name.clone(),
            namespace: ns,
            data: o
                .data
                .iter()
                .map(|(k, v)| {
                    (
                        k.clone(),
                        base64::engine::general_purpose::STANDARD.encode(v),
                    )
                })
                .collect(),
            binary_keys: o.binary_keys.clone(),
            created_at: wharf_sys::time::now_rfc3339(),
        };
        let tmp = path.with_extension("json.tmp");
        let write = || -> std::io::Result<()> {
            let mut f = std::fs::OpenOptions::new()
                .write(true)
                .create(true)
                .truncate(true)
                .mode(0o600)
                .open(&tmp)?;
            f.write_all(&serde_json::to_vec_pretty(&record).expect("json"))?;
            f.sync_all()?;
            std::fs::rename(&tmp, &path)
        };
        write().map_err(|e| io(format!("write {}", path.display()), e))
    }

    /// Remove object `name` of `kind` from `namespace`.
    pub fn remove(&self, kind: &str, namespace: &str, name: &str) -> Result<()> {
        let path = self.path(kind, namespace, name);
        match std::fs::remove_file(&path) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Err(Error::NotFound {
                kind: if kind == "Secret" {
                    "secret"
                } else {
                    "configmap"
                },
                name: format!("{name} (namespace {namespace})"),
            }),
            Err(e) => Err(io(format!("remove {}", path.display()), e)),
        }
    }

    /// Every object of `kind` ("ConfigMap" or "Secret"), by namespace and name.
    pub fn list(&self, kind: &str) -> Result<Vec<Stored>> {
        let dir = self.dir.join(kind_dir(kind));
        let entries = match std::fs::read_dir(&dir) {
            Ok(e) => e,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(io(format!("read {}", dir.display()), e)),
        };
        let mut out = Vec::new();
        for e in entries.flatten() {
            let path = e.path();
            if path.extension().and_then(|x| x.to_str()) != Some("json") {
                continue;
            }
            let bytes =
                std::fs::read(&path).map_err(|err| io(format!("read {}", path.display()), err))?;
            let r: Record = serde_json::from_slice(&bytes).map_err(|err| {
                Error::Invalid(format!("{}: not a stored {kind}: {err}", path.display()))
            })?;
            let mut data = BTreeMap::new();
            for (k, v) in r.data {
                let bytes = base64::engine::general_purpose::STANDARD
                    .decode(v.as_bytes())
                    .map_err(|err| Error::Invalid(format!("{}: key {k}: {err}", path.display())))?;
                data.insert(k, bytes);
            }
            out.push(Stored {
                object: DataObject {
                    kind: if r.kind == "Secret" {
                        "Secret"
                    } else {
                        "ConfigMap"
                    },
                    name: r.name,
                    namespace: Some(r.namespace),
                    data,
                    binary_keys: r.binary_keys,
                },
                created_at: r.created_at,
            });
        }
        out.sort_by(|a, b| {
            (&a.object.namespace, &a.object.name).cmp(&(&b.object.namespace, &b.object.name))
        });
        Ok(out)
    }

    /// Every stored ConfigMap and Secret.
    pub fn all(&self) -> Result<Vec<DataObject>> {
        let mut out: Vec<DataObject> = self
            .list("ConfigMap")?
            .into_iter()
            .map(|s| s.object)
            .collect();
        out.extend(self.list("Secret")?.into_iter().map(|s| s.object));
        Ok(out)
    }
}

/// An object made from kubectl's `create configmap|secret` flags: `--from-literal K=V`,
/// `--from-file [K=]PATH` (the key is the file's name unless given), `--from-env-file
/// PATH` (`K=V` lines; `#` comments and blank lines skipped).
pub fn from_flags(
    kind: &'static str,
    name: &str,
    namespace: Option<&str>,
    literals: &[String],
    files: &[PathBuf],
    env_files: &[PathBuf],
) -> Result<DataObject> {
    let mut data: BTreeMap<String, Vec<u8>> = BTreeMap::new();
    let mut add = |k: String, v: Vec<u8>, from: &str| -> Result<()> {
        if data.insert(k.clone(), v).is_some() {
            return Err(Error::Invalid(format!(
                "{kind} {name}: key {k:?} is given twice ({from})"
            )));
        }
        Ok(())
    };
    for l in literals {
        let (k, v) = l
            .split_once('=')
            .ok_or_else(|| Error::Invalid(format!("--from-literal {l:?}: give KEY=VALUE")))?;
        add(k.to_string(), v.as_bytes().to_vec(), "--from-literal")?;
    }
    for f in files {
        let s = f.to_string_lossy();
        let (key, path) = match s.split_once('=') {
            Some((k, p)) => (k.to_string(), PathBuf::from(p)),
            None => (
                f.file_name()
                    .map(|n| n.to_string_lossy().into_owned())
                    .unwrap_or_default(),
                f.clone(),
            ),
        };
        let bytes =
            std::fs::read(&path).map_err(|e| io(format!("--from-file {}", path.display()), e))?;
        add(key, bytes, "--from-file")?;
    }
    for f in env_files {
        let text = std::fs::read_to_string(f)
            .map_err(|e| io(format!("--from-env-file {}", f.display()), e))?;
        for (i, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let (k, v) = line.split_once('=').ok_or_else(|| {
                Error::Invalid(format!(
                    "--from-env-file {} line {}: not KEY=VALUE",
                    f.display(),
                    i + 1
                ))
            })?;
            add(
                k.trim().to_string(),
                v.as_bytes().to_vec(),
                "--from-env-file",
            )?;
        }
    }
    Ok(DataObject {
        kind,
        name: name.to_string(),
        namespace: namespace.map(str::to_string),
        data,
        binary_keys: BTreeSet::new(),
    })
}
