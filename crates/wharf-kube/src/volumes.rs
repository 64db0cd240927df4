//! Pod volumes and the containers' mounts of them.
//!
//! A plan lists each volume once ([`Volume`]: what to create on the host), and a container's
//! [`VolumeMount`]s refer to volumes by name rather than by host path: `kind` is
//! [`VOLUME_MOUNT_KIND`] and `source` is `<volume name>[/<subPath>]` (a relative path whose
//! first component is the name, a DNS label, so it cannot be mistaken for a host path).
//! The engine creates the volumes under the pod's directory and swaps these sources for
//! host paths with [`super::host`] before the containers are created.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::api;
use super::env::{self, POD_IP_PLACEHOLDER, PodInfo};
use super::expand::expand;
use super::manifest::Lookup;
use super::quantity::Quantity;
use super::validate;
use wharf_engine::error::{Error, Result};
use wharf_engine::model::VolumeMount;

/// `VolumeMount::kind` of a mount that refers to a pod volume by name.
pub const VOLUME_MOUNT_KIND: &str = "kube-volume";

/// Mode of projected files when neither the item nor the volume sets one (Kubernetes').
const DEFAULT_FILE_MODE: u32 = 0o644;

/// A volume the engine creates before the pod's containers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Volume {
    /// Name (a DNS label, unique in the pod).
    pub name: String,
    /// What it is.
    pub source: VolumeSource,
    /// Group owning the files the engine creates in it (the pod's fsGroup): directories
    /// get the group and the setgid bit, files the group and group read (and write for
    /// emptyDir). None for hostPath volumes, which are never changed.
    pub fs_group: Option<u32>,
}

/// What a volume is made of.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", tag = "type")]
pub enum VolumeSource {
    /// An empty directory for the pod's lifetime (mode 0777, as the kubelet's).
    EmptyDir {
        /// On a tmpfs (medium: Memory).
        memory: bool,
        /// sizeLimit in bytes: the tmpfs's size (memory), or the most the directory may
        /// hold before the pod is evicted (disk).
        size_limit: Option<u64>,
    },
    /// A path of the host, bound as is.
    HostPath {
        /// Absolute host path.
        path: PathBuf,
        /// What must (or will be made to) exist there.
        kind: HostPathType,
    },
    /// Files written once, when the pod is created: a configMap, secret or downwardAPI
    /// volume. Mounted read-only.
    Files {
        /// "ConfigMap app-config", "Secret db-password", "downwardAPI" (for messages).
        origin: String,
        /// The files.
        files: Vec<VolumeFile>,
        /// Keep it off the disk: a tmpfs (secrets, as the kubelet does).
        in_memory: bool,
    },
    /// A persistentVolumeClaim: the engine's named volume of the claim's name, made on
    /// first use and kept when the pod goes (`play --down --force` removes it).
    Claim {
        /// The claim's (and the volume's) name.
        claim: String,
        /// Mounted read-only in every container.
        read_only: bool,
    },
    /// An image's files (Kubernetes' image volume): the engine's read-only view of the
    /// image, which the plan's images make present first.
    Image {
        /// The image reference.
        reference: String,
    },
}

/// hostPath `type`: what must exist at the path before the pod starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum HostPathType {
    /// "": no check.
    Any,
    /// A directory, created (0755, with parents) when nothing is there.
    DirectoryOrCreate,
    /// An existing directory.
    Directory,
    /// A file, created empty (0644) when nothing is there.
    FileOrCreate,
    /// An existing regular file.
    File,
    /// An existing UNIX socket.
    Socket,
    /// An existing character device.
    CharDevice,
    /// An existing block device.
    BlockDevice,
}

/// A file of a configMap, secret or downwardAPI volume.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct VolumeFile {
    /// Path inside the volume (relative, no `..`; may have directories).
    pub path: PathBuf,
    /// Content.
    pub data: Vec<u8>,
    /// Permission bits.
    pub mode: u32,
}

/// A mount's reference to a pod volume, read back from a [`VolumeMount`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VolumeRef<'a> {
    /// The volume's name.
    pub volume: &'a str,
    /// The subPath inside it (relative, no `..`), if any.
    pub sub_path: Option<&'a Path>,
}

/// The volume a mount refers to, when it is a pod-volume mount made by the planner.
pub fn volume_ref(m: &VolumeMount) -> Option<VolumeRef<'_>> {
    if m.kind != VOLUME_MOUNT_KIND {
        return None;
    }
    let mut comps = m.source.components();
    let volume = comps.next()?.as_os_str().to_str()?;
    let rest = comps.as_path();
    Some(VolumeRef {
        volume,
        sub_path: (!rest.as_os_str().is_empty()).then_some(rest),
    })
}

fn invalid(msg: String) -> Error {
    Error::Invalid(msg)
}

fn mode(m: Option<api::FileMode>, default: u32) -> u32 {
    m.map(|m| m.0).unwrap_or(default)
}

/// Plan the pod's volumes. `ignored` holds the skipped field paths of the pod, which name
/// the source of a volume whose type is unsupported.
pub fn plan(
    spec: &api::PodSpec,
    ignored: &[String],
    pod: &PodInfo<'_>,
    fs_group: Option<u32>,
    warnings: &mut Vec<String>,
) -> Result<Vec<Volume>> {
    let mut out: Vec<Volume> = Vec::new();
    for (i, v) in spec.volumes.iter().enumerate() {
        let path = format!("spec.volumes[{i}]");
        if !validate::is_dns_label(&v.name) {
            return Err(invalid(format!(
                "{path}.name {:?} is invalid: {}",
                v.name,
                validate::dns_label_hint()
            )));
        }
        if out.iter().any(|o| o.name == v.name) {
            return Err(invalid(format!(
                "{path}.name: volume {:?} is defined twice",
                v.name
            )));
        }
        let set = [
            v.empty_dir.is_some(),
            v.host_path.is_some(),
            v.config_map.is_some(),
            v.secret.is_some(),
            v.downward_api.is_some(),
            v.persistent_volume_claim.is_some(),
            v.projected.is_some(),
            v.image.is_some(),
        ]
        .iter()
        .filter(|b| **b)
        .count();
        if set != 1 {
            let prefix = format!("{path}.");
            let unsupported: Vec<&str> = ignored
                .iter()
                .filter_map(|p| p.strip_prefix(&prefix))
                .filter(|rest| !rest.contains(['.', '[']))
                .collect();
            return Err(invalid(match (set, unsupported.first()) {
                (0, Some(kind)) => format!(
                    "{path} ({}): {kind} volumes are not supported (supported: emptyDir, hostPath, configMap, secret, downwardAPI, projected, persistentVolumeClaim, image)",
                    v.name
                ),
                (0, None) => format!("{path} ({}): the volume has no source", v.name),
                _ => format!("{path} ({}): a volume must have exactly one source", v.name),
            }));
        }
        let source = if let Some(e) = &v.empty_dir {
            empty_dir(e, &path)?
        } else if let Some(h) = &v.host_path {
            host_path(h, &path)?
        } else if let Some(c) = &v.config_map {
            let p = format!("{path}.configMap");
            projected(
                pod,
                "ConfigMap",
                &c.name,
                &c.items,
                c.default_mode,
                c.optional,
                &p,
            )?
        } else if let Some(s) = &v.secret {
            let p = format!("{path}.secret");
            projected(
                pod,
                "Secret",
                &s.secret_name,
                &s.items,
                s.default_mode,
                s.optional,
                &p,
            )?
        } else if let Some(pr) = &v.projected {
            projected_volume(pod, pr, &format!("{path}.projected"), warnings)?
        } else if let Some(c) = &v.persistent_volume_claim {
            if !validate::is_dns_subdomain(&c.claim_name) {
                return Err(invalid(format!(
                    "{path}.persistentVolumeClaim.claimName {:?} is invalid: {}",
                    c.claim_name,
                    validate::dns_subdomain_hint()
                )));
            }
            VolumeSource::Claim {
                claim: c.claim_name.clone(),
                read_only: c.read_only,
            }
        } else if let Some(im) = &v.image {
            // Its pull policy is checked with the containers' (plan::images).
            match im.reference.as_deref().map(str::trim) {
                Some(r) if !r.is_empty() => VolumeSource::Image {
                    reference: r.to_string(),
                },
                _ => return Err(invalid(format!("{path}.image.reference is required"))),
            }
        } else {
            let d = v.downward_api.as_ref().expect("counted above");
            downward_api(pod, d, &format!("{path}.downwardAPI"))?
        };
        let fs_group = match source {
            VolumeSource::HostPath { .. }
            | VolumeSource::Claim { .. }
            | VolumeSource::Image { .. } => None,
            _ => fs_group,
        };
        out.push(Volume {
            name: v.name.clone(),
            source,
            fs_group,
        });
    }
    Ok(out)
}

fn empty_dir(e: &api::EmptyDirSource, path: &str) -> Result<VolumeSource> {
    let memory = match e.medium.as_deref().unwrap_or("") {
        "" => false,
        "Memory" => true,
        other => {
            return Err(invalid(format!(
                "{path}.emptyDir.medium {other:?} is not supported (\"\" or Memory)"
            )));
        }
    };
    let size_limit = match &e.size_limit {
        None => None,
        Some(q) => {
            let p = format!("{path}.emptyDir.sizeLimit");
            let bytes = Quantity::parse(&q.0)
                .map_err(|e| invalid(format!("{p}: {e}")))?
                .value()
                .filter(|b| *b > 0)
                .ok_or_else(|| invalid(format!("{p} must be a positive size")))?;
            // A tmpfs of that size for medium Memory; on disk, the pod's shim measures
            // it and evicts the pod when it holds more (kubelet's local storage eviction).
            Some(bytes as u64)
        }
    };
    Ok(VolumeSource::EmptyDir { memory, size_limit })
}

fn host_path(h: &api::HostPathSource, path: &str) -> Result<VolumeSource> {
    let p = Path::new(&h.path);
    if !p.is_absolute()
        || p.components()
            .any(|c| matches!(c, std::path::Component::ParentDir))
    {
        return Err(invalid(format!(
            "{path}.hostPath.path {:?} must be an absolute path without '..'",
            h.path
        )));
    }
    let kind = match h.type_.as_deref().unwrap_or("") {
        "" => HostPathType::Any,
        "DirectoryOrCreate" => HostPathType::DirectoryOrCreate,
        "Directory" => HostPathType::Directory,
        "FileOrCreate" => HostPathType::FileOrCreate,
        "File" => HostPathType::File,
        "Socket" => HostPathType::Socket,
        "CharDevice" => HostPathType::CharDevice,
        "BlockDevice" => HostPathType::BlockDevice,
        other => {
            return Err(invalid(format!(
                "{path}.hostPath.type {other:?} is invalid (DirectoryOrCreate, Directory, FileOrCreate, File, Socket, CharDevice, BlockDevice or \"\")"
            )));
        }
    };
    Ok(VolumeSource::HostPath {
        path: p.to_path_buf(),
        kind,
    })
}

fn check_item_path(files: &[VolumeFile], item_path: &str, p: &str) -> Result<PathBuf> {
    if !validate::is_descending_path(item_path) {
        return Err(invalid(format!(
            "{p}.path {item_path:?} must be a relative path without '..'"
        )));
    }
    let normal: PathBuf = Path::new(item_path)
        .components()
        .filter(|c| matches!(c, std::path::Component::Normal(_)))
        .collect();
    if files
        .iter()
        .any(|f| f.path == normal || f.path.starts_with(&normal) || normal.starts_with(&f.path))
    {
        return Err(invalid(format!(
            "{p}.path {item_path:?} collides with another file of the volume"
        )));
    }
    Ok(normal)
}

/// A configMap or secret volume: every key as a file named after it, or only `items`.
fn projected(
    pod: &PodInfo<'_>,
    kind: &str,
    name: &str,
    items: &[api::KeyToPath],
    default_mode: Option<api::FileMode>,
    optional: bool,
    path: &str,
) -> Result<VolumeSource> {
    let name_field = if kind == "Secret" {
        "secretName"
    } else {
        "name"
    };
    if name.is_empty() {
        return Err(invalid(format!("{path}.{name_field} is required")));
    }
    let default_mode = mode(default_mode, DEFAULT_FILE_MODE);
    let data: BTreeMap<String, Vec<u8>> = match pod.manifest.object(kind, name, pod.namespace) {
        Lookup::Found(o) => o.data.clone(),
        _ if optional => BTreeMap::new(),
        Lookup::OtherNamespace(ns) => {
            return Err(invalid(format!(
                "{path}.{name_field}: {kind} {name:?} is in namespace {ns:?}, not the pod's namespace {:?}",
                pod.namespace
            )));
        }
        Lookup::Missing => {
            return Err(invalid(format!(
                "{path}.{name_field}: {kind} {name:?} is not in the manifest (add it, give it with --configmap FILE, create it with wharf configmap|secret create, or set optional: true)"
            )));
        }
    };
    let mut files = Vec::new();
    if items.is_empty() {
        for (k, v) in data {
            files.push(VolumeFile {
                path: PathBuf::from(k),
                data: v,
                mode: default_mode,
            });
        }
    } else {
        for (j, item) in items.iter().enumerate() {
            let p = format!("{path}.items[{j}]");
            let Some(bytes) = data.get(&item.key) else {
                if optional {
                    continue;
                }
                return Err(invalid(format!(
                    "{p}.key: {kind} {name:?} has no key {:?}",
                    item.key
                )));
            };
            let rel = check_item_path(&files, &item.path, &p)?;
            files.push(VolumeFile {
                path: rel,
                data: bytes.clone(),
                mode: mode(item.mode, default_mode),
            });
        }
    }
    Ok(VolumeSource::Files {
        origin: format!("{kind} {name}"),
        files,
        in_memory: kind == "Secret",
    })
}

fn downward_api(pod: &PodInfo<'_>, d: &api::DownwardApiSource, path: &str) -> Result<VolumeSource> {
    let default_mode = mode(d.default_mode, DEFAULT_FILE_MODE);
    let mut files = Vec::new();
    for (j, item) in d.items.iter().enumerate() {
        let p = format!("{path}.items[{j}]");
        let value = match (&item.field_ref, &item.resource_field_ref) {
            (Some(f), None) => env::field_value(pod, f, &format!("{p}.fieldRef"), false)?,
            (None, Some(r)) => env::resource_value(pod, r, None, &format!("{p}.resourceFieldRef"))?,
            _ => {
                return Err(invalid(format!(
                    "{p}: exactly one of fieldRef and resourceFieldRef must be set"
                )));
            }
        };
        let rel = check_item_path(&files, &item.path, &p)?;
        files.push(VolumeFile {
            path: rel,
            data: value.into_bytes(),
            mode: mode(item.mode, default_mode),
        });
    }
    Ok(VolumeSource::Files {
        origin: "downwardAPI".into(),
        files,
        in_memory: false,
    })
}

/// A projected volume: the files of each source (secrets, configMaps, downwardAPI items,
/// a service account token) in one directory; no two may claim the same path.
fn projected_volume(
    pod: &PodInfo<'_>,
    pr: &api::ProjectedSource,
    path: &str,
    warnings: &mut Vec<String>,
) -> Result<VolumeSource> {
    let default_mode = pr.default_mode;
    let mut files: Vec<VolumeFile> = Vec::new();
    let mut in_memory = false;
    for (i, s) in pr.sources.iter().enumerate() {
        let p = format!("{path}.sources[{i}]");
        for (field, given) in [
            ("clusterTrustBundle", s.cluster_trust_bundle.is_some()),
            ("podCertificate", s.pod_certificate.is_some()),
        ] {
            if given {
                return Err(invalid(format!(
                    "{p}.{field} is not supported: there is no API server to issue it"
                )));
            }
        }
        let set = [
            s.secret.is_some(),
            s.config_map.is_some(),
            s.downward_api.is_some(),
            s.service_account_token.is_some(),
        ];
        if set.iter().filter(|b| **b).count() != 1 {
            return Err(invalid(format!(
                "{p} must have exactly one of secret, configMap, downwardAPI or serviceAccountToken"
            )));
        }
        let more = if let Some(o) = &s.secret {
            in_memory = true;
            let p = format!("{p}.secret");
            projected(
                pod,
                "Secret",
                &o.name,
                &o.items,
                default_mode,
                o.optional,
                &p,
            )?
        } else if let Some(o) = &s.config_map {
            let p = format!("{p}.configMap");
            projected(
                pod,
                "ConfigMap",
                &o.name,
                &o.items,
                default_mode,
                o.optional,
                &p,
            )?
        } else if let Some(d) = &s.downward_api {
            let src = api::DownwardApiSource {
                items: d.items.clone(),
                default_mode,
            };
            downward_api(pod, &src, &format!("{p}.downwardAPI"))?
        } else {
            let t = s.service_account_token.as_ref().expect("counted");
            in_memory = true;
            warnings.push(format!(
                "{p}.serviceAccountToken: {} holds a placeholder, not a token: there is no API server to issue or accept one",
                t.path
            ));
            VolumeSource::Files {
                origin: "serviceAccountToken".into(),
                files: vec![VolumeFile {
                    path: PathBuf::from(&t.path),
                    data: b"wharf-placeholder-token: no API server runs on this host\n".to_vec(),
                    mode: mode(default_mode, DEFAULT_FILE_MODE),
                }],
                in_memory: true,
            }
        };
        let VolumeSource::Files { files: more, .. } = more else {
            continue;
        };
        for f in more {
            let rel = check_item_path(&files, &f.path.to_string_lossy(), &p)?;
            files.push(VolumeFile { path: rel, ..f });
        }
    }
    Ok(VolumeSource::Files {
        origin: "projected".into(),
        files,
        in_memory,
    })
}

/// The mounts of container `c` at `path`, referring to `volumes` by name. `env` is the
/// container's resolved environment (for subPathExpr).
pub fn mounts(
    c: &api::Container,
    path: &str,
    volumes: &[Volume],
    env: &[(String, String)],
    privileged: bool,
) -> Result<Vec<VolumeMount>> {
    let mut out: Vec<VolumeMount> = Vec::new();
    for (j, m) in c.volume_mounts.iter().enumerate() {
        let p = format!("{path}.volumeMounts[{j}]");
        let vol = volumes.iter().find(|v| v.name == m.name).ok_or_else(|| {
            invalid(format!(
                "{p}.name: no volume named {:?} in spec.volumes",
                m.name
            ))
        })?;
        if !m.mount_path.starts_with('/') {
            return Err(invalid(format!(
                "{p}.mountPath {:?} must be an absolute path",
                m.mount_path
            )));
        }
        let destination = PathBuf::from(&m.mount_path);
        if out.iter().any(|o| o.destination == destination) {
            return Err(invalid(format!(
                "{p}.mountPath {:?} is mounted twice in the container",
                m.mount_path
            )));
        }
        let sub_path = match (&m.sub_path, &m.sub_path_expr) {
            (Some(s), Some(_)) if !s.is_empty() => {
                return Err(invalid(format!(
                    "{p}: subPath and subPathExpr cannot both be set"
                )));
            }
            (_, Some(e)) if !e.is_empty() => {
                let s = expand(e, |name| {
                    env.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone())
                });
                if s.contains(POD_IP_PLACEHOLDER) {
                    return Err(invalid(format!("{p}.subPathExpr cannot use the pod's IP")));
                }
                check_sub_path(&s, &format!("{p}.subPathExpr (expanded)"))?
            }
            (Some(s), _) if !s.is_empty() => check_sub_path(s, &format!("{p}.subPath"))?,
            _ => None,
        };
        // The kubelet mounts configMap, secret and downwardAPI volumes read-only.
        let readonly = m.read_only
            || matches!(
                vol.source,
                VolumeSource::Files { .. }
                    | VolumeSource::Claim {
                        read_only: true,
                        ..
                    }
            );
        // The engine's own objects: a claim's named volume (made at the container's
        // creation when missing) and an image's read-only view (read-only whatever the
        // mount says, as the kubelet mounts it); a subPath the engine resolves inside.
        let engine_object = match &vol.source {
            VolumeSource::Claim { claim, .. } => Some((
                "persistentVolumeClaim",
                claim,
                wharf_engine::named_volumes::KIND,
                readonly,
            )),
            VolumeSource::Image { reference } => {
                Some(("image", reference, wharf_engine::image_volumes::KIND, true))
            }
            _ => None,
        };
        if let Some((what, source, kind, readonly)) = engine_object {
            if m.mount_propagation.as_deref().is_some_and(|p| p != "None") {
                return Err(invalid(format!(
                    "{p}.mountPropagation is not supported on {what} volumes"
                )));
            }
            out.push(VolumeMount {
                source: PathBuf::from(source),
                destination,
                readonly,
                kind: kind.to_string(),
                options: sub_path
                    .iter()
                    .map(|s| wharf_engine::image_volumes::subpath_option(s.display()))
                    .collect(),
            });
            continue;
        }
        let mut options = Vec::new();
        match m.mount_propagation.as_deref() {
            None | Some("None") => {}
            Some("HostToContainer") => options.push("rslave".to_string()),
            Some("Bidirectional") if privileged => options.push("rshared".to_string()),
            Some("Bidirectional") => {
                return Err(invalid(format!(
                    "{p}.mountPropagation Bidirectional needs a privileged container"
                )));
            }
            Some(other) => {
                return Err(invalid(format!(
                    "{p}.mountPropagation {other:?} is invalid (None, HostToContainer or Bidirectional)"
                )));
            }
        }
        match m.recursive_read_only.as_deref() {
            None | Some("Disabled") => {}
            Some("Enabled") | Some("IfPossible") => {
                if !m.read_only || !options.is_empty() {
                    return Err(invalid(format!(
                        "{p}.recursiveReadOnly needs readOnly: true and no mountPropagation"
                    )));
                }
                options.push("rro".to_string());
            }
            Some(other) => {
                return Err(invalid(format!(
                    "{p}.recursiveReadOnly {other:?} is invalid (Disabled, Enabled or IfPossible)"
                )));
            }
        }
        let mut source = PathBuf::from(&vol.name);
        if let Some(s) = sub_path {
            source.push(s);
        }
        out.push(VolumeMount {
            source,
            destination,
            readonly,
            kind: VOLUME_MOUNT_KIND.to_string(),
            options,
        });
    }
    Ok(out)
}

fn check_sub_path(s: &str, what: &str) -> Result<Option<PathBuf>> {
    if !validate::is_descending_path(s) {
        return Err(invalid(format!(
            "{what} {s:?} must be a relative path without '..'"
        )));
    }
    Ok(Some(
        Path::new(s)
            .components()
            .filter(|c| matches!(c, std::path::Component::Normal(_)))
            .collect(),
    ))
}

/// The named volumes of the persistentVolumeClaims among `volumes`.
pub fn claim_names(volumes: &[Volume]) -> Vec<String> {
    volumes
        .iter()
        .filter_map(|v| match &v.source {
            VolumeSource::Claim { claim, .. } => Some(claim.clone()),
            _ => None,
        })
        .collect()
}
