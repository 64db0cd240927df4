//! Security contexts: the pod's settings are defaults that a container's own override,
//! checked as the API server and the kubelet check them, then set on the container spec.

use std::collections::BTreeMap;
use std::path::Path;

use super::api;
use super::validate;
use wharf_engine::error::{Error, Result};
use wharf_engine::model::{ContainerSpec, SeccompMode};

/// The old annotation for the pod's seccomp profile (before the seccompProfile field).
const POD_SECCOMP_ANNOTATION: &str = "seccomp.security.alpha.kubernetes.io/pod";
/// Prefix of the old per-container annotation (the container's name follows).
const CONTAINER_SECCOMP_ANNOTATION: &str = "container.seccomp.security.alpha.kubernetes.io/";
/// The AppArmor annotation of a container (before the appArmorProfile field).
const CONTAINER_APPARMOR_ANNOTATION: &str = "container.apparmor.security.beta.kubernetes.io/";

fn id(v: i64, path: &str) -> Result<u32> {
    if !(0..=i64::from(i32::MAX)).contains(&v) {
        return Err(Error::Invalid(format!(
            "{path}: {v} is not a valid id (0 to 2147483647)"
        )));
    }
    Ok(v as u32)
}

fn seccomp_of_field(p: &api::SeccompProfile, path: &str, dir: &Path) -> Result<SeccompMode> {
    match p.type_.as_str() {
        "RuntimeDefault" => Ok(SeccompMode::RuntimeDefault),
        "Unconfined" => Ok(SeccompMode::Unconfined),
        "Localhost" => {
            let rel = p.localhost_profile.as_deref().ok_or_else(|| {
                Error::Invalid(format!(
                    "{path}.localhostProfile is required when type is Localhost"
                ))
            })?;
            localhost(rel, &format!("{path}.localhostProfile"), dir)
        }
        other => Err(Error::Invalid(format!(
            "{path}.type {other:?} is invalid: must be RuntimeDefault, Unconfined or Localhost"
        ))),
    }
}

fn localhost(rel: &str, path: &str, dir: &Path) -> Result<SeccompMode> {
    if !validate::is_descending_path(rel) {
        return Err(Error::Invalid(format!(
            "{path} {rel:?} must be a relative path below the seccomp profile directory {} (no '..')",
            dir.display()
        )));
    }
    Ok(SeccompMode::Localhost(dir.join(rel)))
}

fn seccomp_of_annotation(v: &str, path: &str, dir: &Path) -> Result<SeccompMode> {
    match v {
        "runtime/default" | "docker/default" => Ok(SeccompMode::RuntimeDefault),
        "unconfined" => Ok(SeccompMode::Unconfined),
        _ => match v.strip_prefix("localhost/") {
            Some(rel) => localhost(rel, path, dir),
            None => Err(Error::Invalid(format!(
                "{path}: {v:?} is not a seccomp profile (runtime/default, unconfined or localhost/<file>)"
            ))),
        },
    }
}

/// Everything about a container that security contexts decide.
pub struct Inputs<'a> {
    pub pod: Option<&'a api::PodSecurityContext>,
    pub container: Option<&'a api::SecurityContext>,
    pub annotations: &'a BTreeMap<String, String>,
    /// The container's Kubernetes name (for the per-container annotation).
    pub container_name: &'a str,
    /// `spec.containers[0]` and the like.
    pub path: &'a str,
    /// Where Localhost seccomp profiles live.
    pub seccomp_dir: &'a Path,
}

/// Set user, groups, privileges, capabilities, read-only root and seccomp on `spec`.
pub fn apply(i: &Inputs<'_>, spec: &mut ContainerSpec, warnings: &mut Vec<String>) -> Result<()> {
    let pod = i.pod.cloned().unwrap_or_default();
    let ctr = i.container.cloned().unwrap_or_default();
    let cpath = format!("{}.securityContext", i.path);
    // runAsUser/runAsGroup: the container's win; each remembers where it came from.
    let user = match (ctr.run_as_user, pod.run_as_user) {
        (Some(u), _) => Some(id(u, &format!("{cpath}.runAsUser"))?),
        (None, Some(u)) => Some(id(u, "spec.securityContext.runAsUser")?),
        _ => None,
    };
    let group = match (ctr.run_as_group, pod.run_as_group) {
        (Some(g), _) => Some(id(g, &format!("{cpath}.runAsGroup"))?),
        (None, Some(g)) => Some(id(g, "spec.securityContext.runAsGroup")?),
        _ => None,
    };
    spec.user = match (user, group) {
        (Some(u), Some(g)) => Some(format!("{u}:{g}")),
        (Some(u), None) => Some(u.to_string()),
        (None, Some(_)) => {
            // containerd refuses this too: the group of an image's user by name is unknown
            // until the image is unpacked, and a group without a user is ambiguous.
            return Err(Error::Invalid(format!(
                "{cpath}: runAsGroup is set without runAsUser; set runAsUser too"
            )));
        }
        (None, None) => None,
    };
    spec.run_as_non_root = ctr.run_as_non_root.or(pod.run_as_non_root).unwrap_or(false);
    if spec.run_as_non_root && user == Some(0) {
        return Err(Error::Invalid(format!(
            "{cpath}: runAsNonRoot is true but runAsUser is 0 (root)"
        )));
    }
    let mut groups = Vec::new();
    for (k, g) in pod.supplemental_groups.iter().enumerate() {
        groups.push(id(
            *g,
            &format!("spec.securityContext.supplementalGroups[{k}]"),
        )?);
    }
    if let Some(g) = pod.fs_group {
        // The kubelet adds fsGroup to every container's groups (it owns the volumes).
        let g = id(g, "spec.securityContext.fsGroup")?;
        if !groups.contains(&g) {
            groups.push(g);
        }
    }
    spec.groups = groups;

    spec.privileged = ctr.privileged.unwrap_or(false);
    spec.read_only = ctr.read_only_root_filesystem.unwrap_or(false);
    spec.no_new_privileges = ctr.allow_privilege_escalation == Some(false);
    if let Some(caps) = &ctr.capabilities {
        spec.cap_add = capability_names(&caps.add, &format!("{cpath}.capabilities.add"))?;
        spec.cap_drop = capability_names(&caps.drop, &format!("{cpath}.capabilities.drop"))?;
    }
    if spec.no_new_privileges {
        if spec.privileged {
            return Err(Error::Invalid(format!(
                "{cpath}: allowPrivilegeEscalation cannot be false when privileged is true"
            )));
        }
        if spec
            .cap_add
            .iter()
            .any(|c| c == "CAP_SYS_ADMIN" || c == "ALL")
        {
            return Err(Error::Invalid(format!(
                "{cpath}: allowPrivilegeEscalation cannot be false when capabilities.add has SYS_ADMIN"
            )));
        }
    }
    match ctr.proc_mount.as_deref() {
        None | Some("Default") => {}
        Some(other) => warnings.push(format!(
            "{cpath}.procMount {other:?} is not supported and is ignored: /proc is masked as by default"
        )),
    }

    // Seccomp: the container's field, its old annotation, the pod's field, the pod's old
    // annotation; RuntimeDefault otherwise (as podman and kubelets with seccompDefault).
    let container_annotation = format!("{CONTAINER_SECCOMP_ANNOTATION}{}", i.container_name);
    spec.seccomp = if let Some(p) = &ctr.seccomp_profile {
        seccomp_of_field(p, &format!("{cpath}.seccompProfile"), i.seccomp_dir)?
    } else if let Some(v) = i.annotations.get(&container_annotation) {
        seccomp_of_annotation(
            v,
            &format!("metadata.annotations[{container_annotation}]"),
            i.seccomp_dir,
        )?
    } else if let Some(p) = &pod.seccomp_profile {
        seccomp_of_field(p, "spec.securityContext.seccompProfile", i.seccomp_dir)?
    } else if let Some(v) = i.annotations.get(POD_SECCOMP_ANNOTATION) {
        seccomp_of_annotation(
            v,
            &format!("metadata.annotations[{POD_SECCOMP_ANNOTATION}]"),
            i.seccomp_dir,
        )?
    } else {
        SeccompMode::RuntimeDefault
    };
    // AppArmor: the container's field, its annotation, the pod's field. A Localhost
    // profile is applied by the runtime (which refuses to start the container where
    // AppArmor is off, as kubelet refuses the pod); Wharf has no default profile.
    let annotation = format!("{CONTAINER_APPARMOR_ANNOTATION}{}", i.container_name);
    let apparmor = if let Some(p) = &ctr.app_armor_profile {
        Some((
            p.type_.clone(),
            p.localhost_profile.clone(),
            format!("{cpath}.appArmorProfile"),
        ))
    } else if let Some(v) = i.annotations.get(&annotation) {
        let path = format!("metadata.annotations[{annotation}]");
        Some(match v.as_str() {
            "runtime/default" => ("RuntimeDefault".into(), None, path),
            "unconfined" => ("Unconfined".into(), None, path),
            v => match v.strip_prefix("localhost/") {
                Some(name) => ("Localhost".into(), Some(name.to_string()), path),
                None => {
                    return Err(Error::Invalid(format!(
                        "{path}: {v:?} is not an AppArmor profile (runtime/default, unconfined or localhost/NAME)"
                    )));
                }
            },
        })
    } else {
        pod.app_armor_profile.as_ref().map(|p| {
            (
                p.type_.clone(),
                p.localhost_profile.clone(),
                "spec.securityContext.appArmorProfile".to_string(),
            )
        })
    };
    if let Some((kind, name, path)) = apparmor {
        match (kind.as_str(), name) {
            ("Localhost", Some(n)) if !n.is_empty() => spec.apparmor_profile = Some(n),
            ("Localhost", _) => {
                return Err(Error::Invalid(format!(
                    "{path}.localhostProfile is required for type Localhost"
                )));
            }
            ("Unconfined", _) => {}
            ("RuntimeDefault", _) => warnings.push(format!(
                "{path}: RuntimeDefault: Wharf has no default AppArmor profile; the container runs without one"
            )),
            (other, _) => {
                return Err(Error::Invalid(format!(
                    "{path}.type {other:?} is invalid (RuntimeDefault, Unconfined or Localhost)"
                )));
            }
        }
    }
    Ok(())
}

/// Kubernetes capability names ("NET_ADMIN"; "CAP_NET_ADMIN" is accepted too) as the
/// engine's ("CAP_NET_ADMIN"), or "ALL".
fn capability_names(names: &[String], path: &str) -> Result<Vec<String>> {
    names
        .iter()
        .enumerate()
        .map(|(k, n)| {
            if n.eq_ignore_ascii_case("ALL") {
                return Ok("ALL".to_string());
            }
            wharf_runtime::caps::number_of_name(n)
                .map(|num| wharf_runtime::caps::NAMES[num as usize].to_string())
                .ok_or_else(|| Error::Invalid(format!("{path}[{k}]: unknown capability {n:?}")))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(
        pod: Option<api::PodSecurityContext>,
        ctr: Option<api::SecurityContext>,
        annotations: &[(&str, &str)],
    ) -> Result<(ContainerSpec, Vec<String>)> {
        let annotations: BTreeMap<String, String> = annotations
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let mut spec = ContainerSpec::default();
        let mut w = Vec::new();
        apply(
            &Inputs {
                pod: pod.as_ref(),
                container: ctr.as_ref(),
                annotations: &annotations,
                container_name: "web",
                path: "spec.containers[0]",
                seccomp_dir: Path::new("/var/lib/wharf/seccomp"),
            },
            &mut spec,
            &mut w,
        )?;
        Ok((spec, w))
    }

    #[test]
    fn container_settings_override_the_pods() {
        let pod = api::PodSecurityContext {
            run_as_user: Some(1000),
            run_as_group: Some(3000),
            run_as_non_root: Some(true),
            supplemental_groups: vec![4000],
            fs_group: Some(2000),
            seccomp_profile: Some(api::SeccompProfile {
                type_: "Unconfined".into(),
                localhost_profile: None,
            }),
            ..Default::default()
        };
        let (s, _) = run(Some(pod.clone()), None, &[]).unwrap();
        assert_eq!(s.user.as_deref(), Some("1000:3000"));
        assert_eq!(s.groups, vec![4000, 2000]);
        assert!(s.run_as_non_root);
        assert_eq!(s.seccomp, SeccompMode::Unconfined);
        let ctr = api::SecurityContext {
            run_as_user: Some(1001),
            run_as_non_root: Some(false),
            seccomp_profile: Some(api::SeccompProfile {
                type_: "Localhost".into(),
                localhost_profile: Some("profiles/audit.json".into()),
            }),
            ..Default::default()
        };
        let (s, _) = run(Some(pod), Some(ctr), &[]).unwrap();
        assert_eq!(s.user.as_deref(), Some("1001:3000"));
        assert!(!s.run_as_non_root);
        assert_eq!(
            s.seccomp,
            SeccompMode::Localhost("/var/lib/wharf/seccomp/profiles/audit.json".into())
        );
    }

    #[test]
    fn privileges_and_capabilities() {
        let ctr = api::SecurityContext {
            capabilities: Some(api::Capabilities {
                add: vec!["NET_ADMIN".into(), "CAP_SYS_TIME".into()],
                drop: vec!["all".into()],
            }),
            read_only_root_filesystem: Some(true),
            allow_privilege_escalation: Some(false),
            ..Default::default()
        };
        let (s, _) = run(None, Some(ctr), &[]).unwrap();
        assert_eq!(s.cap_add, vec!["CAP_NET_ADMIN", "CAP_SYS_TIME"]);
        assert_eq!(s.cap_drop, vec!["ALL"]);
        assert!(s.read_only && s.no_new_privileges && !s.privileged);
        assert_eq!(s.user, None);
        assert_eq!(s.seccomp, SeccompMode::RuntimeDefault);

        let bad = api::SecurityContext {
            capabilities: Some(api::Capabilities {
                add: vec!["NET_ADMIN".into(), "FLY".into()],
                drop: vec![],
            }),
            ..Default::default()
        };
        let e = run(None, Some(bad), &[]).unwrap_err().to_string();
        assert_eq!(
            e,
            "spec.containers[0].securityContext.capabilities.add[1]: unknown capability \"FLY\""
        );
        let contradiction = api::SecurityContext {
            privileged: Some(true),
            allow_privilege_escalation: Some(false),
            ..Default::default()
        };
        let e = run(None, Some(contradiction), &[]).unwrap_err().to_string();
        assert!(
            e.contains("allowPrivilegeEscalation cannot be false"),
            "{e}"
        );
    }

    #[test]
    fn user_checks() {
        let e = run(
            Some(api::PodSecurityContext {
                run_as_group: Some(10),
                ..Default::default()
            }),
            None,
            &[],
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("runAsGroup is set without runAsUser"), "{e}");
        let e = run(
            None,
            Some(api::SecurityContext {
                run_as_user: Some(0),
                run_as_non_root: Some(true),
                ..Default::default()
            }),
            &[],
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("runAsNonRoot is true but runAsUser is 0"), "{e}");
        let e = run(
            None,
            Some(api::SecurityContext {
                run_as_user: Some(-1),
                ..Default::default()
            }),
            &[],
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.starts_with("spec.containers[0].securityContext.runAsUser: -1"),
            "{e}"
        );
    }

    #[test]
    fn seccomp_annotations_and_bad_profiles() {
        let (s, _) = run(
            None,
            None,
            &[
                (POD_SECCOMP_ANNOTATION, "unconfined"),
                (
                    "container.seccomp.security.alpha.kubernetes.io/web",
                    "localhost/a.json",
                ),
            ],
        )
        .unwrap();
        assert_eq!(
            s.seccomp,
            SeccompMode::Localhost("/var/lib/wharf/seccomp/a.json".into())
        );
        let (s, _) = run(None, None, &[(POD_SECCOMP_ANNOTATION, "unconfined")]).unwrap();
        assert_eq!(s.seccomp, SeccompMode::Unconfined);
        let escape = api::SecurityContext {
            seccomp_profile: Some(api::SeccompProfile {
                type_: "Localhost".into(),
                localhost_profile: Some("../../etc/shadow".into()),
            }),
            ..Default::default()
        };
        let e = run(None, Some(escape), &[]).unwrap_err().to_string();
        assert!(
            e.contains("localhostProfile") && e.contains("no '..'"),
            "{e}"
        );
    }
}
