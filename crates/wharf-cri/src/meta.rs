//! What the CRI knows of a pod or container that the engine's specs do not model: its
//! Kubernetes metadata (name, uid, namespace, attempt), kept as labels under a prefix of
//! Wharf's own so that `wharf ps` and `wharf pod ls` can show it too, and taken out again
//! before the labels go back to kubelet, which must get exactly the labels it gave.

use std::collections::{BTreeMap, HashMap};

use crate::api::{ContainerMetadata, PodSandboxMetadata};

/// Prefix of the labels Wharf keeps for itself.
pub const PREFIX: &str = "io.wharf.cri.";
/// The Kubernetes name (pod or container).
pub const NAME: &str = "io.wharf.cri.name";
/// The pod's uid.
pub const UID: &str = "io.wharf.cri.uid";
/// The pod's Kubernetes namespace.
pub const NAMESPACE: &str = "io.wharf.cri.namespace";
/// The attempt (kubelet counts re-creations).
pub const ATTEMPT: &str = "io.wharf.cri.attempt";
/// The pod's log directory.
pub const LOG_DIRECTORY: &str = "io.wharf.cri.log-directory";
/// The runtime handler the pod was asked for.
pub const RUNTIME_HANDLER: &str = "io.wharf.cri.runtime-handler";

/// The labels kubelet gave: everything but Wharf's own.
pub fn user_labels(labels: &BTreeMap<String, String>) -> HashMap<String, String> {
    labels
        .iter()
        .filter(|(k, _)| !k.starts_with(PREFIX))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

/// A map of the engine's (annotations) as the CRI's messages hold it.
pub fn to_map(m: &BTreeMap<String, String>) -> HashMap<String, String> {
    m.iter().map(|(k, v)| (k.clone(), v.clone())).collect()
}

/// Whether a pod or container was made through the CRI.
pub fn is_cri(labels: &BTreeMap<String, String>) -> bool {
    labels.contains_key(NAME)
}

/// A pod's CRI metadata, from its labels.
pub fn pod_metadata(labels: &BTreeMap<String, String>) -> PodSandboxMetadata {
    let get = |k: &str| labels.get(k).cloned().unwrap_or_default();
    PodSandboxMetadata {
        name: get(NAME),
        uid: get(UID),
        namespace: get(NAMESPACE),
        attempt: get(ATTEMPT).parse().unwrap_or(0),
    }
}

/// A container's CRI metadata, from its labels.
pub fn container_metadata(labels: &BTreeMap<String, String>) -> ContainerMetadata {
    ContainerMetadata {
        name: labels.get(NAME).cloned().unwrap_or_default(),
        attempt: labels
            .get(ATTEMPT)
            .and_then(|a| a.parse().ok())
            .unwrap_or(0),
    }
}

/// The engine's unique name for a pod: kubelet's name, namespace, uid and attempt, which
/// together are unique (a reused one is kubelet asking twice).
pub fn pod_name(m: &PodSandboxMetadata) -> String {
    format!("{}_{}_{}_{}", m.name, m.namespace, m.uid, m.attempt)
}

/// The engine's unique name for a container: its name and attempt within its pod.
pub fn container_name(pod_name: &str, m: &ContainerMetadata) -> String {
    format!("{}_{}_{}", m.name, m.attempt, pod_name)
}

/// Nanoseconds since the epoch of an RFC 3339 time (0 when there is none).
pub fn nanos(rfc3339: Option<&str>) -> i64 {
    rfc3339
        .and_then(wharf_sys::time::parse_rfc3339)
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .map_or(0, |d| d.as_nanos() as i64)
}

/// Now, in nanoseconds since the epoch.
pub fn now_nanos() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as i64)
}

/// Whether `labels` hold every pair of `selector`.
pub fn selected(labels: &HashMap<String, String>, selector: &HashMap<String, String>) -> bool {
    selector.iter().all(|(k, v)| labels.get(k) == Some(v))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wharf_labels_never_reach_kubelet_and_metadata_survives_them() {
        let m = PodSandboxMetadata {
            name: "web".into(),
            uid: "0f3c".into(),
            namespace: "default".into(),
            attempt: 2,
        };
        let mut labels: BTreeMap<String, String> = [("app".to_string(), "web".to_string())].into();
        labels.insert(NAME.into(), m.name.clone());
        labels.insert(UID.into(), m.uid.clone());
        labels.insert(NAMESPACE.into(), m.namespace.clone());
        labels.insert(ATTEMPT.into(), m.attempt.to_string());
        assert_eq!(
            user_labels(&labels),
            [("app".to_string(), "web".to_string())].into()
        );
        assert_eq!(pod_metadata(&labels), m);
        assert_eq!(pod_name(&m), "web_default_0f3c_2");
        assert!(is_cri(&labels) && !is_cri(&BTreeMap::new()));
        assert_eq!(nanos(Some("1970-01-01T00:00:01.5Z")), 1_500_000_000);
        assert_eq!(nanos(None), 0);
    }
}
