//! One document of a manifest, decoded: into its typed form, with the paths of the fields
//! that were skipped, and its object name checked as the API server checks it. Shared by
//! the readers of Pods and other objects (`manifest`) and of workloads (`workloads`).

use serde_norway::Value;

use super::api;
use super::validate;
use super::warnings;
use wharf_engine::error::{Error, Result};

/// A Pod document and the paths of its fields that were skipped.
#[derive(Debug, Clone)]
pub(crate) struct ParsedPod {
    pub pod: api::Pod,
    pub name: String,
    pub ignored: Vec<String>,
}

/// Deserialize `value` into `T`, collecting the paths of skipped fields; errors name the
/// field.
pub(crate) fn typed<T: serde::de::DeserializeOwned>(
    value: Value,
    where_: &str,
) -> Result<(T, Vec<String>)> {
    let mut ignored = Vec::new();
    let mut record = |p: serde_ignored::Path<'_>| ignored.push(warnings::path_string(&p));
    let de = serde_ignored::Deserializer::new(value, &mut record);
    let t = serde_path_to_error::deserialize(de).map_err(|e| {
        let path = e.path().to_string();
        if path == "." {
            invalid(format!("manifest {where_}: {}", e.inner()))
        } else {
            invalid(format!("manifest {where_}: {path}: {}", e.inner()))
        }
    })?;
    Ok((t, ignored))
}

/// The object's name (and namespace), valid as the API server requires.
pub(crate) fn object_name(meta: &api::ObjectMeta, where_: &str) -> Result<String> {
    let name = match (&meta.name, &meta.generate_name) {
        (Some(n), _) => n.clone(),
        (None, Some(_)) => {
            return Err(invalid(format!(
                "{where_}: metadata.generateName is not supported; give metadata.name"
            )));
        }
        (None, None) => return Err(invalid(format!("{where_}: metadata.name is required"))),
    };
    if !validate::is_dns_subdomain(&name) {
        return Err(invalid(format!(
            "{where_}: metadata.name {name:?} is invalid: {}",
            validate::dns_subdomain_hint()
        )));
    }
    if let Some(ns) = &meta.namespace
        && !validate::is_dns_label(ns)
    {
        return Err(invalid(format!(
            "{where_}: metadata.namespace {ns:?} is invalid: {}",
            validate::dns_label_hint()
        )));
    }
    Ok(name)
}

fn invalid(msg: String) -> Error {
    Error::Invalid(msg)
}
