//! Environment variables of a container: envFrom, env values with `$(VAR)` references,
//! and values from ConfigMaps, Secrets, pod fields and resources, all resolved at plan time
//! except the pod's IP, which exists only once the pod's network is up and is left as
//! [`POD_IP_PLACEHOLDER`] for the engine to substitute.

use std::collections::BTreeMap;

use super::api;
use super::expand::expand;
use super::manifest::{DataObject, Lookup, Manifest};
use super::quantity::Quantity;
use super::resources::Resources;
use super::validate;
use wharf_engine::error::{Error, Result};

pub use wharf_engine::pod_ip::POD_IP_PLACEHOLDER;

/// What env values can refer to about the pod.
pub struct PodInfo<'a> {
    pub name: &'a str,
    pub namespace: &'a str,
    pub labels: &'a BTreeMap<String, String>,
    pub annotations: &'a BTreeMap<String, String>,
    pub service_account: &'a str,
    pub node_name: &'a str,
    pub node_cpus: u32,
    pub node_memory: u64,
    pub manifest: &'a Manifest,
    /// Resources of every container by its Kubernetes name.
    pub resources: &'a BTreeMap<String, Resources>,
}

fn invalid(msg: String) -> Error {
    Error::Invalid(msg)
}

/// The ConfigMap or Secret an env var refers to (and that it has `key`), `None` when an
/// optional reference finds nothing. binaryData keys do not count: they never become
/// variables.
fn lookup_key<'a>(
    pod: &PodInfo<'a>,
    kind: &str,
    name: &str,
    key: Option<&str>,
    optional: bool,
    path: &str,
) -> Result<Option<&'a DataObject>> {
    if name.is_empty() {
        return Err(invalid(format!("{path}.name is required")));
    }
    let obj = match pod.manifest.object(kind, name, pod.namespace) {
        Lookup::Found(o) => o,
        _ if optional => return Ok(None),
        Lookup::OtherNamespace(ns) => {
            return Err(invalid(format!(
                "{path}: {kind} {name:?} is in namespace {ns:?}, not the pod's namespace {:?}",
                pod.namespace
            )));
        }
        Lookup::Missing => {
            return Err(invalid(format!(
                "{path}: {kind} {name:?} is not in the manifest (add it, give it with --configmap FILE, create it with wharf configmap|secret create, or set optional: true)"
            )));
        }
    };
    if let Some(key) = key
        && !obj.data.contains_key(key)
    {
        if optional {
            return Ok(None);
        }
        return Err(invalid(format!(
            "{path}: {kind} {name:?} has no key {key:?} (set optional: true if it may be missing)"
        )));
    }
    if let Some(key) = key
        && obj.binary_keys.contains(key)
    {
        return Err(invalid(format!(
            "{path}: key {key:?} of {kind} {name:?} is binaryData, which cannot be an environment variable"
        )));
    }
    Ok(Some(obj))
}

fn text(bytes: &[u8], what: impl FnOnce() -> String) -> Result<String> {
    match std::str::from_utf8(bytes) {
        Ok(s) if !s.contains('\0') => Ok(s.to_string()),
        _ => Err(invalid(format!(
            "{} is not text (UTF-8 without NUL) and cannot be an environment variable",
            what()
        ))),
    }
}

/// The value of a downward API field. `env` allows the fields only env vars may use
/// (status.podIP).
pub fn field_value(
    pod: &PodInfo<'_>,
    f: &api::FieldSelector,
    path: &str,
    env: bool,
) -> Result<String> {
    if let Some(v) = f.api_version.as_deref()
        && v != "v1"
    {
        return Err(invalid(format!(
            "{path}.apiVersion {v:?} is not supported (v1)"
        )));
    }
    let fp = f.field_path.as_str();
    let quoted_key = |prefix: &str| -> Option<String> {
        let rest = fp.strip_prefix(prefix)?.strip_suffix("']")?;
        Some(rest.to_string())
    };
    Ok(match fp {
        "metadata.name" => pod.name.to_string(),
        "metadata.namespace" => pod.namespace.to_string(),
        "spec.nodeName" if env => pod.node_name.to_string(),
        "spec.serviceAccountName" if env => pod.service_account.to_string(),
        "status.podIP" | "status.podIPs" if env => POD_IP_PLACEHOLDER.to_string(),
        "metadata.labels" if !env => map_lines(pod.labels),
        "metadata.annotations" if !env => map_lines(pod.annotations),
        _ => {
            if let Some(k) = quoted_key("metadata.labels['") {
                pod.labels.get(&k).cloned().unwrap_or_default()
            } else if let Some(k) = quoted_key("metadata.annotations['") {
                pod.annotations.get(&k).cloned().unwrap_or_default()
            } else {
                let supported = if env {
                    "metadata.name, metadata.namespace, metadata.labels['<key>'], metadata.annotations['<key>'], spec.nodeName, spec.serviceAccountName, status.podIP, status.podIPs"
                } else {
                    "metadata.name, metadata.namespace, metadata.labels, metadata.annotations, metadata.labels['<key>'], metadata.annotations['<key>']"
                };
                return Err(invalid(format!(
                    "{path}.fieldPath {fp:?} is not supported here (supported: {supported})"
                )));
            }
        }
    })
}

/// A whole label or annotation map as the downward API writes it: `key="value"` lines.
fn map_lines(m: &BTreeMap<String, String>) -> String {
    m.iter().map(|(k, v)| format!("{k}={v:?}\n")).collect()
}

/// The value of a resourceFieldRef: the limit or request divided by the divisor, rounded
/// up. A missing limit is the host's capacity, as the kubelet reports it.
pub fn resource_value(
    pod: &PodInfo<'_>,
    r: &api::ResourceFieldSelector,
    this_container: Option<&str>,
    path: &str,
) -> Result<String> {
    let cname = match (r.container_name.as_deref(), this_container) {
        (Some(c), _) if !c.is_empty() => c,
        (_, Some(c)) => c,
        _ => return Err(invalid(format!("{path}.containerName is required"))),
    };
    let res = pod.resources.get(cname).ok_or_else(|| {
        invalid(format!(
            "{path}.containerName: the pod has no container {cname:?}"
        ))
    })?;
    let divisor = match &r.divisor {
        Some(d) => Quantity::parse(&d.0).map_err(|e| invalid(format!("{path}.divisor: {e}")))?,
        None => Quantity::parse("1").expect("a quantity"),
    };
    let node_cpus = Quantity::parse(&pod.node_cpus.to_string()).expect("a quantity");
    let node_memory = Quantity::parse(&pod.node_memory.to_string()).expect("a quantity");
    let zero = Quantity::parse("0").expect("a quantity");
    let q = match r.resource.as_str() {
        "limits.cpu" => res.limit_cpu.unwrap_or(node_cpus),
        "limits.memory" => res.limit_memory.unwrap_or(node_memory),
        "requests.cpu" => res.request_cpu.unwrap_or(zero),
        "requests.memory" => res.request_memory.unwrap_or(zero),
        other => {
            return Err(invalid(format!(
                "{path}.resource {other:?} is not supported (limits.cpu, limits.memory, requests.cpu, requests.memory)"
            )));
        }
    };
    q.div_ceil(&divisor)
        .map(|v| v.to_string())
        .ok_or_else(|| invalid(format!("{path}.divisor must be more than 0")))
}

fn set(env: &mut Vec<(String, String)>, name: String, value: String) {
    // Later definitions win, as in the kubelet; the first position is kept.
    match env.iter_mut().find(|(k, _)| *k == name) {
        Some(slot) => slot.1 = value,
        None => env.push((name, value)),
    }
}

/// The environment of container `c` at `path` (`spec.containers[0]`): envFrom first,
/// then env, later names overriding earlier ones.
pub fn resolve(
    pod: &PodInfo<'_>,
    c: &api::Container,
    path: &str,
    warnings: &mut Vec<String>,
) -> Result<Vec<(String, String)>> {
    let mut env: Vec<(String, String)> = Vec::new();
    for (i, from) in c.env_from.iter().enumerate() {
        let p = format!("{path}.envFrom[{i}]");
        let (kind, r, rp) = match (&from.config_map_ref, &from.secret_ref) {
            (Some(r), None) => ("ConfigMap", r, format!("{p}.configMapRef")),
            (None, Some(r)) => ("Secret", r, format!("{p}.secretRef")),
            _ => {
                return Err(invalid(format!(
                    "{p}: exactly one of configMapRef and secretRef must be set"
                )));
            }
        };
        let Some(obj) = lookup_key(pod, kind, &r.name, None, r.optional, &rp)? else {
            continue;
        };
        let prefix = from.prefix.as_deref().unwrap_or("");
        for (key, bytes) in obj
            .data
            .iter()
            .filter(|(k, _)| !obj.binary_keys.contains(*k))
        {
            let name = format!("{prefix}{key}");
            if !validate::is_env_name(&name) {
                warnings.push(format!(
                    "{p}: {kind} {:?} key {key:?} is not a valid variable name and is skipped",
                    r.name
                ));
                continue;
            }
            let value = text(bytes, || format!("{kind} {:?} key {key:?} ({p})", r.name))?;
            set(&mut env, name, value);
        }
    }
    for (i, e) in c.env.iter().enumerate() {
        let p = format!("{path}.env[{i}]");
        if !validate::is_env_name(&e.name) {
            return Err(invalid(format!(
                "{p}.name {:?} is invalid: printable ASCII without '='",
                e.name
            )));
        }
        let value = match (&e.value, &e.value_from) {
            (Some(v), Some(_)) if !v.is_empty() => {
                return Err(invalid(format!(
                    "{p}: value and valueFrom cannot both be set"
                )));
            }
            (_, Some(from)) => match value_from(pod, from, c, &format!("{p}.valueFrom"))? {
                Some(v) => v,
                None => continue,
            },
            (Some(v), None) => expand(v, |name| {
                env.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone())
            }),
            (None, None) => String::new(),
        };
        set(&mut env, e.name.clone(), value);
    }
    Ok(env)
}

fn value_from(
    pod: &PodInfo<'_>,
    from: &api::EnvVarSource,
    c: &api::Container,
    p: &str,
) -> Result<Option<String>> {
    let set_count = [
        from.config_map_key_ref.is_some(),
        from.secret_key_ref.is_some(),
        from.field_ref.is_some(),
        from.resource_field_ref.is_some(),
    ]
    .iter()
    .filter(|b| **b)
    .count();
    if set_count != 1 {
        return Err(invalid(format!(
            "{p}: exactly one of configMapKeyRef, secretKeyRef, fieldRef and resourceFieldRef must be set"
        )));
    }
    if let Some(r) = &from.config_map_key_ref {
        return key_value(pod, "ConfigMap", r, &format!("{p}.configMapKeyRef"));
    }
    if let Some(r) = &from.secret_key_ref {
        return key_value(pod, "Secret", r, &format!("{p}.secretKeyRef"));
    }
    if let Some(f) = &from.field_ref {
        return field_value(pod, f, &format!("{p}.fieldRef"), true).map(Some);
    }
    let r = from.resource_field_ref.as_ref().expect("counted above");
    resource_value(pod, r, Some(&c.name), &format!("{p}.resourceFieldRef")).map(Some)
}

fn key_value(
    pod: &PodInfo<'_>,
    kind: &str,
    r: &api::KeySelector,
    p: &str,
) -> Result<Option<String>> {
    let Some(obj) = lookup_key(pod, kind, &r.name, Some(&r.key), r.optional, p)? else {
        return Ok(None);
    };
    let bytes = &obj.data[&r.key];
    text(bytes, || {
        format!("{kind} {:?} key {:?} ({p})", r.name, r.key)
    })
    .map(Some)
}
