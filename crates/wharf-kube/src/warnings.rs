//! Turning the fields serde skipped into warnings that name them.
//!
//! Every key of a manifest that the API structs do not declare is reported by
//! `serde_ignored` with its path; [`ignored`] words it the way users read paths in
//! `kubectl explain` (`spec.containers[0].livenessProbe`) and says why when the field is a
//! well-known Kubernetes feature Wharf deliberately leaves out.

/// `spec.containers[0].livenessProbe` for a serde_ignored path.
pub fn path_string(p: &serde_ignored::Path<'_>) -> String {
    use serde_ignored::Path;
    match p {
        Path::Root => String::new(),
        Path::Seq { parent, index } => format!("{}[{index}]", path_string(parent)),
        Path::Map { parent, key } => {
            let parent = path_string(parent);
            if parent.is_empty() {
                key.clone()
            } else {
                format!("{parent}.{key}")
            }
        }
        Path::Some { parent }
        | Path::NewtypeStruct { parent }
        | Path::NewtypeVariant { parent } => path_string(parent),
    }
}

/// Why a well-known field is left out, by its name.
fn reason(field: &str) -> Option<&'static str> {
    Some(match field {
        "nodeSelector"
        | "nodeName"
        | "affinity"
        | "tolerations"
        | "priority"
        | "priorityClassName"
        | "topologySpreadConstraints"
        | "preemptionPolicy"
        | "schedulingGates"
        | "overhead" => "scheduling has no meaning on a single host",
        "imagePullSecrets" => "registry credentials come from Wharf's registry configuration",
        "sysctls" => "sysctls are not set",
        "seLinuxOptions" => "SELinux labels are not applied",
        "windowsOptions" => "this is a Linux host",
        "runtimeClassName" => "Wharf is the only runtime",
        "activeDeadlineSeconds" => "pods are not stopped after a deadline",
        "setHostnameAsFQDN" => "the hostname is the short name",
        "ephemeralContainers" => "ephemeral containers are not supported",
        "resizePolicy" => "resources are not resized in place",
        "volumeDevices" => "block volumes are not supported",
        "claims" | "resourceClaims" => "dynamic resource allocation is not supported",
        _ => return None,
    })
}

/// The warning for a field that is ignored.
pub fn ignored(path: &str) -> String {
    let field = path.rsplit('.').next().unwrap_or(path);
    let field = field.split('[').next().unwrap_or(field);
    match reason(field) {
        Some(why) => format!("{path} is not supported and is ignored: {why}"),
        None => format!("{path} is not supported and is ignored"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_read_like_kubectl_explain() {
        use serde_ignored::Path;
        let root = Path::Root;
        let spec = Path::Map {
            parent: &root,
            key: "spec".into(),
        };
        let cs = Path::Map {
            parent: &spec,
            key: "containers".into(),
        };
        let c0 = Path::Seq {
            parent: &cs,
            index: 0,
        };
        let some = Path::Some { parent: &c0 };
        let probe = Path::Map {
            parent: &some,
            key: "livenessProbe".into(),
        };
        assert_eq!(path_string(&probe), "spec.containers[0].livenessProbe");
        assert_eq!(
            ignored("spec.nodeSelector"),
            "spec.nodeSelector is not supported and is ignored: scheduling has no meaning on a single host"
        );
        assert_eq!(
            ignored("spec.containers[0].imagePulPolicy"),
            "spec.containers[0].imagePulPolicy is not supported and is ignored"
        );
    }
}
