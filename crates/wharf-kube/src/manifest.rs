//! Reading a multi-document manifest: Pods, and the ConfigMaps and Secrets they use.

use std::collections::{BTreeMap, BTreeSet};

use base64::Engine as _;
use serde::Deserialize;
use serde_norway::Value;

use super::api;
use super::document::{ParsedPod, object_name, typed};
use super::validate;
use super::warnings;
use super::workloads::{self, Workload, WorkloadKind};
use wharf_engine::error::{Error, Result};

/// A parsed manifest: its Pods, ConfigMaps and Secrets, and warnings about what it holds
/// that `wharf play` leaves out.
#[derive(Debug, Clone)]
pub struct Manifest {
    pub(crate) pods: Vec<ParsedPod>,
    pub(crate) workloads: Vec<Workload>,
    /// NodePort and LoadBalancer Services: their node ports become host ports of the
    /// Pod their selector picks.
    pub(crate) services: Vec<NodePortService>,
    /// Every document's kind and name ("CronJob nightly"), for the error about a
    /// manifest with nothing to run.
    pub(crate) seen: Vec<String>,
    pub(crate) objects: Vec<DataObject>,
    pub(crate) warnings: Vec<String>,
}

/// A Service whose ports are published on the node.
#[derive(Debug, Clone)]
pub(crate) struct NodePortService {
    pub namespace: Option<String>,
    pub selector: BTreeMap<String, String>,
    pub ports: Vec<api::ServicePort>,
    /// "document N (Service NAME)", for warnings.
    pub where_: String,
}

/// What a ConfigMap or Secret holds, decoded.
#[derive(Debug, Clone)]
pub struct DataObject {
    /// "ConfigMap" or "Secret".
    pub kind: &'static str,
    pub name: String,
    pub namespace: Option<String>,
    pub data: BTreeMap<String, Vec<u8>>,
    /// Keys from a ConfigMap's binaryData: files in volumes, never environment variables.
    pub binary_keys: BTreeSet<String>,
}

impl Manifest {
    /// Names of the pods in the manifest, in document order (what `wharf play --down`
    /// removes).
    pub fn pod_names(&self) -> Vec<&str> {
        self.pods.iter().map(|p| p.name.as_str()).collect()
    }

    /// The workloads (Deployments, ReplicaSets, DaemonSets, StatefulSets, Jobs), in
    /// document order.
    pub fn workloads(&self) -> &[Workload] {
        &self.workloads
    }

    /// Warnings about documents and ConfigMap/Secret fields that are ignored (a plan adds
    /// its pod's own).
    pub fn warnings(&self) -> &[String] {
        &self.warnings
    }

    /// The ConfigMap or Secret `name` that a pod in `namespace` sees.
    pub(crate) fn object(&self, kind: &str, name: &str, namespace: &str) -> Lookup<'_> {
        let mut elsewhere = None;
        for o in self
            .objects
            .iter()
            .filter(|o| o.kind == kind && o.name == name)
        {
            match &o.namespace {
                None => return Lookup::Found(o),
                Some(ns) if ns == namespace => return Lookup::Found(o),
                Some(ns) => elsewhere = Some(ns.as_str()),
            }
        }
        match elsewhere {
            Some(ns) => Lookup::OtherNamespace(ns),
            None => Lookup::Missing,
        }
    }
}

/// Result of looking up a ConfigMap or Secret.
pub(crate) enum Lookup<'a> {
    Found(&'a DataObject),
    /// Only in another namespace (invisible to the pod, as in Kubernetes).
    OtherNamespace(&'a str),
    Missing,
}

fn invalid(msg: String) -> Error {
    Error::Invalid(msg)
}

/// Parse a manifest: one or more YAML documents (`---`-separated), each a Kubernetes
/// object. Pods, ConfigMaps, Secrets and Lists of them are read; other kinds are ignored
/// with a warning; empty documents are skipped.
pub fn parse(yaml: &str) -> Result<Manifest> {
    let m = read_documents(yaml, "manifest document", |_, _| Ok(()))?;
    if m.pods.is_empty() && m.workloads.is_empty() {
        let held = if m.seen.is_empty() {
            "nothing".to_string()
        } else {
            m.seen.join(", ")
        };
        return Err(invalid(format!(
            "the manifest holds no Pod or workload (it holds {held}; wharf play runs Pods, Deployments, ReplicaSets, DaemonSets, StatefulSets and Jobs)"
        )));
    }
    check_duplicates(&m)?;
    Ok(m)
}

/// ConfigMaps and Secrets from a file of their own (`play --configmap FILE`), for the
/// pods of another manifest; a Pod or any other kind there is refused.
pub fn parse_objects(yaml: &str, file: &str) -> Result<Vec<DataObject>> {
    let m = read_documents(yaml, &format!("{file}: document"), |value, where_| {
        let kind = value.get("kind").and_then(Value::as_str).unwrap_or("");
        if kind != "ConfigMap" && kind != "Secret" {
            return Err(invalid(format!(
                "{where_}: kind {kind:?}: a --configmap file holds ConfigMaps and Secrets only"
            )));
        }
        Ok(())
    })?;
    Ok(m.objects)
}

/// Every YAML document of `yaml` (`---`-separated) added to a manifest, after `check`
/// accepts it; `label` names documents in errors ("manifest document 2").
fn read_documents(
    yaml: &str,
    label: &str,
    check: impl Fn(&Value, &str) -> Result<()>,
) -> Result<Manifest> {
    check_shape(yaml)?;
    let mut m = Manifest {
        pods: Vec::new(),
        workloads: Vec::new(),
        services: Vec::new(),
        seen: Vec::new(),
        objects: Vec::new(),
        warnings: Vec::new(),
    };
    for (i, doc) in serde_norway::Deserializer::from_str(yaml).enumerate() {
        let where_ = format!("{label} {}", i + 1);
        let value =
            Value::deserialize(doc).map_err(|e| invalid(format!("{where_}: invalid YAML: {e}")))?;
        check(&value, &where_)?;
        // Warnings name the document as before: "document N".
        let short = format!("document {}", i + 1);
        add_object(
            &mut m,
            value,
            if label == "manifest document" {
                &short
            } else {
                &where_
            },
        )?;
    }
    Ok(m)
}

impl Manifest {
    /// Add ConfigMaps and Secrets from other files; one the manifest or another file
    /// defines already is an error naming it.
    pub fn add_objects(&mut self, objects: Vec<DataObject>) -> Result<()> {
        self.objects.extend(objects);
        check_duplicates(self)
    }

    /// Add ConfigMaps and Secrets from Wharf's store, where the manifest and the files
    /// given with it do not define one of that kind, name and namespace (they win).
    pub fn add_stored_objects(&mut self, stored: Vec<DataObject>) {
        for o in stored {
            let ns = o.namespace.as_deref().unwrap_or("default");
            let defined = self.objects.iter().any(|q| {
                q.kind == o.kind
                    && q.name == o.name
                    && q.namespace.as_deref().unwrap_or("default") == ns
            });
            if !defined {
                self.objects.push(o);
            }
        }
    }
}

/// The largest manifest `wharf play` reads (the Kubernetes API server takes requests of
/// up to 3 MiB).
pub const MAX_MANIFEST_BYTES: usize = 16 << 20;

/// The deepest nesting of flow collections (`[`, `{`) allowed: the YAML parser needs time
/// quadratic in it before its own recursion limit (128) applies, so a 200 KB file of
/// brackets would take a minute of CPU. Real manifests nest a few levels.
const MAX_FLOW_DEPTH: usize = 100;

/// Refuse what would make parsing costly, in one linear pass over the text: too large, or
/// flow collections nested too deep. Brackets are counted wherever they stand (in quotes
/// and comments too): telling those apart is the parser's job, and an approximation here
/// could be fooled into letting deep nesting through. Real manifests never come near.
fn check_shape(yaml: &str) -> Result<()> {
    if yaml.len() > MAX_MANIFEST_BYTES {
        return Err(invalid(format!(
            "the manifest is {} bytes, more than the {MAX_MANIFEST_BYTES} wharf play reads",
            yaml.len()
        )));
    }
    let mut depth = 0usize;
    let mut line = 1;
    for b in yaml.bytes() {
        match b {
            b'\n' => line += 1,
            b'[' | b'{' => {
                depth += 1;
                if depth > MAX_FLOW_DEPTH {
                    return Err(invalid(format!(
                        "manifest line {line}: collections nested more than {MAX_FLOW_DEPTH} \
                         levels deep"
                    )));
                }
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    Ok(())
}

fn check_duplicates(m: &Manifest) -> Result<()> {
    for (i, w) in m.workloads.iter().enumerate() {
        if m.workloads[..i]
            .iter()
            .any(|q| q.kind == w.kind && q.name == w.name)
        {
            return Err(invalid(format!(
                "the manifest defines {} {:?} twice",
                w.kind.as_str(),
                w.name
            )));
        }
    }
    for (i, p) in m.pods.iter().enumerate() {
        if m.pods[..i].iter().any(|q| q.name == p.name) {
            return Err(invalid(format!(
                "the manifest defines pod {:?} twice",
                p.name
            )));
        }
    }
    for (i, o) in m.objects.iter().enumerate() {
        if m.objects[..i]
            .iter()
            .any(|q| q.kind == o.kind && q.name == o.name && q.namespace == o.namespace)
        {
            return Err(invalid(format!(
                "the manifest defines {} {:?} twice",
                o.kind, o.name
            )));
        }
    }
    Ok(())
}

fn check_api_version(v: &Option<String>, where_: &str, warnings: &mut Vec<String>) -> Result<()> {
    match v.as_deref() {
        Some("v1") => Ok(()),
        None => {
            warnings.push(format!("{where_} has no apiVersion; v1 is assumed"));
            Ok(())
        }
        Some(other) => Err(invalid(format!(
            "{where_}: apiVersion {other:?} is not supported (Pods, ConfigMaps and Secrets are v1)"
        ))),
    }
}

fn add_object(m: &mut Manifest, value: Value, where_: &str) -> Result<()> {
    let map = match &value {
        Value::Null => return Ok(()),
        Value::Mapping(map) => map,
        _ => {
            return Err(invalid(format!(
                "manifest {where_} is not a Kubernetes object (a mapping with apiVersion and kind)"
            )));
        }
    };
    let kind = match map.get("kind") {
        Some(Value::String(k)) => k.clone(),
        _ => {
            return Err(invalid(format!(
                "manifest {where_} has no kind (Pod, ConfigMap or Secret)"
            )));
        }
    };
    let name_hint = map
        .get("metadata")
        .and_then(|md| md.get("name"))
        .and_then(Value::as_str)
        .map(|n| format!(" {n}"))
        .unwrap_or_default();
    let where_ = format!("{where_} ({kind}{name_hint})");
    if kind != "List" {
        m.seen.push(format!("{kind}{name_hint}"));
    }
    match kind.as_str() {
        "Pod" => {
            let (pod, ignored): (api::Pod, _) = typed(value, &where_)?;
            check_api_version(&pod.api_version, &where_, &mut m.warnings)?;
            let name = object_name(&pod.metadata, &where_)?;
            m.pods.push(ParsedPod { pod, name, ignored });
        }
        "ConfigMap" => {
            let (cm, ignored): (api::ConfigMap, Vec<String>) = typed(value, &where_)?;
            check_api_version(&cm.api_version, &where_, &mut m.warnings)?;
            let name = object_name(&cm.metadata, &where_)?;
            let mut data = BTreeMap::new();
            let binary_keys: BTreeSet<String> = cm.binary_data.keys().cloned().collect();
            for (k, v) in cm.data {
                data.insert(k, v.into_bytes());
            }
            for (k, v) in cm.binary_data {
                let bytes = decode_base64(&v)
                    .map_err(|e| invalid(format!("{where_}: binaryData.{k}: {e}")))?;
                if data.insert(k.clone(), bytes).is_some() {
                    return Err(invalid(format!(
                        "{where_}: key {k:?} is in both data and binaryData"
                    )));
                }
            }
            check_keys(&data, &where_)?;
            m.warnings.extend(
                ignored
                    .iter()
                    .map(|p| format!("{where_}: {}", warnings::ignored(p))),
            );
            m.objects.push(DataObject {
                kind: "ConfigMap",
                name,
                namespace: cm.metadata.namespace,
                data,
                binary_keys,
            });
        }
        "Secret" => {
            let (s, ignored): (api::Secret, Vec<String>) = typed(value, &where_)?;
            check_api_version(&s.api_version, &where_, &mut m.warnings)?;
            let name = object_name(&s.metadata, &where_)?;
            let mut data = BTreeMap::new();
            for (k, v) in s.data {
                let bytes =
                    decode_base64(&v).map_err(|e| invalid(format!("{where_}: data.{k}: {e}")))?;
                data.insert(k, bytes);
            }
            for (k, v) in s.string_data {
                data.insert(k, v.into_bytes());
            }
            check_keys(&data, &where_)?;
            m.warnings.extend(
                ignored
                    .iter()
                    .map(|p| format!("{where_}: {}", warnings::ignored(p))),
            );
            m.objects.push(DataObject {
                kind: "Secret",
                name,
                namespace: s.metadata.namespace,
                data,
                binary_keys: BTreeSet::new(),
            });
        }
        "List" => {
            let (list, ignored): (api::List, Vec<String>) = typed(value, &where_)?;
            m.warnings.extend(
                ignored
                    .iter()
                    .map(|p| format!("{where_}: {}", warnings::ignored(p))),
            );
            for (j, item) in list.items.into_iter().enumerate() {
                add_object(m, item, &format!("{where_} item {}", j + 1))?;
            }
        }
        k if WorkloadKind::parse(k).is_some() => {
            let kind = WorkloadKind::parse(k).expect("checked");
            let w = workloads::parse(value, kind, &where_, &mut m.warnings)?;
            m.workloads.push(w);
        }
        "CronJob" => m.warnings.push(format!(
            "{where_}: kind CronJob is not supported and is ignored: nothing keeps a schedule on one host (play its jobTemplate as a kind: Job to run it once)"
        )),
        "Service" => {
            let (svc, ignored): (api::ServiceDoc, Vec<String>) = typed(value, &where_)?;
            // Checked as the API server would, though nothing here needs the name.
            object_name(&svc.metadata, &where_)?;
            m.warnings.extend(
                ignored
                    .iter()
                    .map(|p| format!("{where_}: {}", warnings::ignored(p))),
            );
            match svc.spec.type_.as_deref().unwrap_or("ClusterIP") {
                "NodePort" | "LoadBalancer" if !svc.spec.selector.is_empty() => {
                    m.services.push(NodePortService {
                        namespace: svc.metadata.namespace,
                        selector: svc.spec.selector,
                        ports: svc.spec.ports,
                        where_,
                    });
                }
                t => m.warnings.push(format!(
                    "{where_}: a {t} Service without a node port is ignored: there is no cluster network or service proxy on one host (a NodePort Service's ports, or a container's hostPort, are published on this host)"
                )),
            }
        }
        other => m.warnings.push(format!(
            "{where_}: kind {other} is not supported and is ignored (wharf play runs Pods and workloads, with the ConfigMaps and Secrets they use)"
        )),
    }
    Ok(())
}

fn check_keys(data: &BTreeMap<String, Vec<u8>>, where_: &str) -> Result<()> {
    for k in data.keys() {
        if !validate::is_config_key(k) {
            return Err(invalid(format!(
                "{where_}: key {k:?} is invalid: keys are 1-253 letters, digits, '-', '_' or '.'"
            )));
        }
    }
    Ok(())
}

/// Standard base64, with line breaks and spaces allowed (as in folded YAML strings).
fn decode_base64(s: &str) -> std::result::Result<Vec<u8>, String> {
    let compact: String = s.chars().filter(|c| !c.is_ascii_whitespace()).collect();
    base64::engine::general_purpose::STANDARD
        .decode(compact.as_bytes())
        .map_err(|e| format!("not valid base64: {e}"))
}
