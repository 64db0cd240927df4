//! The subset of the Kubernetes core/v1 API that `wharf play` reads, as serde structs.
//!
//! Only fields Wharf acts on (or knowingly accepts) are declared. Everything else in a
//! manifest is skipped by serde and reported by `serde_ignored` with its path, so the
//! planner can turn it into a warning (see [`super::warnings`]). Field names follow the
//! API's camelCase; types are loose where Kubernetes' own decoding is (quantities may be
//! numbers or strings, file modes may be octal literals).
//!
//! Some fields are declared only so that they are accepted without a warning (output-only
//! fields the API server writes, settings with no effect here); those are never read.
#![allow(dead_code)]

use std::collections::BTreeMap;

use serde::{Deserialize, Deserializer};
use serde_norway::Value;

/// `null` and a missing field both mean "empty", as in Go's decoding of Kubernetes objects.
fn nullable<'de, D, T>(d: D) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de> + Default,
{
    Ok(Option::<T>::deserialize(d)?.unwrap_or_default())
}

/// Object metadata.
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ObjectMeta {
    pub name: Option<String>,
    pub namespace: Option<String>,
    pub generate_name: Option<String>,
    #[serde(default, deserialize_with = "nullable")]
    pub labels: BTreeMap<String, String>,
    #[serde(default, deserialize_with = "nullable")]
    pub annotations: BTreeMap<String, String>,
    // Written by the API server (present in `kubectl get -o yaml` output); they mean nothing
    // to a manifest being played, so they are accepted without a warning.
    #[serde(default)]
    pub creation_timestamp: Option<Value>,
    #[serde(default)]
    pub uid: Option<Value>,
    #[serde(default)]
    pub resource_version: Option<Value>,
    #[serde(default)]
    pub generation: Option<Value>,
    #[serde(default)]
    pub managed_fields: Option<Value>,
    #[serde(default)]
    pub self_link: Option<Value>,
}

/// An object with a spec: the fields every such document has.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Document<S> {
    #[serde(default)]
    pub api_version: Option<String>,
    #[serde(default)]
    pub kind: Option<String>,
    #[serde(default, deserialize_with = "nullable")]
    pub metadata: ObjectMeta,
    pub spec: S,
    /// Output only; accepted without a warning.
    #[serde(default)]
    pub status: Option<Value>,
}

/// A Pod document.
pub(crate) type Pod = Document<PodSpec>;
/// A Deployment, ReplicaSet, DaemonSet, StatefulSet or Job document: the parts that say
/// how many pods of its template run, and how.
pub(crate) type WorkloadDoc = Document<WorkloadSpec>;
/// A Service document: what `wharf play` maps of it (a NodePort's ports, to the pod its
/// selector picks).
pub(crate) type ServiceDoc = Document<ServiceSpec>;

/// A ConfigMap document.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ConfigMap {
    #[serde(default)]
    pub api_version: Option<String>,
    #[serde(default)]
    pub kind: Option<String>,
    #[serde(default, deserialize_with = "nullable")]
    pub metadata: ObjectMeta,
    #[serde(default, deserialize_with = "nullable")]
    pub data: BTreeMap<String, String>,
    /// Base64.
    #[serde(default, deserialize_with = "nullable")]
    pub binary_data: BTreeMap<String, String>,
    /// Nothing can update a played ConfigMap anyway.
    #[serde(default)]
    pub immutable: Option<bool>,
}

/// A Secret document.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Secret {
    #[serde(default)]
    pub api_version: Option<String>,
    #[serde(default)]
    pub kind: Option<String>,
    #[serde(default, deserialize_with = "nullable")]
    pub metadata: ObjectMeta,
    /// Base64.
    #[serde(default, deserialize_with = "nullable")]
    pub data: BTreeMap<String, String>,
    /// Plain text; wins over `data` for the same key.
    #[serde(default, deserialize_with = "nullable")]
    pub string_data: BTreeMap<String, String>,
    /// Opaque, kubernetes.io/tls, ...: only a hint for validation in Kubernetes.
    #[serde(default, rename = "type")]
    pub type_: Option<String>,
    #[serde(default)]
    pub immutable: Option<bool>,
}

/// A `kind: List` document (what `kubectl get -o yaml` prints for several objects).
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct List {
    #[serde(default)]
    pub api_version: Option<String>,
    #[serde(default)]
    pub kind: Option<String>,
    #[serde(default, deserialize_with = "nullable")]
    pub items: Vec<Value>,
    #[serde(default)]
    pub metadata: Option<Value>,
}

/// The pod's spec.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct PodSpec {
    #[serde(default, deserialize_with = "nullable")]
    pub containers: Vec<Container>,
    #[serde(default, deserialize_with = "nullable")]
    pub init_containers: Vec<Container>,
    #[serde(default, deserialize_with = "nullable")]
    pub volumes: Vec<Volume>,
    pub restart_policy: Option<String>,
    pub termination_grace_period_seconds: Option<i64>,
    #[serde(default, deserialize_with = "nullable")]
    pub host_network: bool,
    #[serde(default, rename = "hostPID", deserialize_with = "nullable")]
    pub host_pid: bool,
    #[serde(default, rename = "hostIPC", deserialize_with = "nullable")]
    pub host_ipc: bool,
    #[serde(default, deserialize_with = "nullable")]
    pub share_process_namespace: bool,
    /// `false`: the pod gets its own user namespace (its root is an unprivileged host id).
    pub host_users: Option<bool>,
    pub hostname: Option<String>,
    pub subdomain: Option<String>,
    pub dns_policy: Option<String>,
    pub dns_config: Option<PodDnsConfig>,
    #[serde(default, deserialize_with = "nullable")]
    pub host_aliases: Vec<HostAlias>,
    pub security_context: Option<PodSecurityContext>,
    /// Service links need services; with none, `true` and `false` mean the same.
    #[serde(default)]
    pub enable_service_links: Option<bool>,
    /// Tokens are never mounted; `false` is what Wharf does anyway.
    pub automount_service_account_token: Option<bool>,
    pub service_account_name: Option<String>,
    pub service_account: Option<String>,
    /// Accepted when "default-scheduler" (what the API server fills in).
    pub scheduler_name: Option<String>,
}

/// DNS settings.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct PodDnsConfig {
    #[serde(default, deserialize_with = "nullable")]
    pub nameservers: Vec<String>,
    #[serde(default, deserialize_with = "nullable")]
    pub searches: Vec<String>,
    #[serde(default, deserialize_with = "nullable")]
    pub options: Vec<DnsOption>,
}

/// A resolv.conf option.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct DnsOption {
    pub name: String,
    pub value: Option<String>,
}

/// An /etc/hosts entry.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct HostAlias {
    pub ip: String,
    #[serde(default, deserialize_with = "nullable")]
    pub hostnames: Vec<String>,
}

/// Pod-level security settings (defaults for every container).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct PodSecurityContext {
    pub run_as_user: Option<i64>,
    pub run_as_group: Option<i64>,
    pub run_as_non_root: Option<bool>,
    #[serde(default, deserialize_with = "nullable")]
    pub supplemental_groups: Vec<i64>,
    pub fs_group: Option<i64>,
    /// Only decides when Kubernetes re-chowns a volume; Wharf chowns the volumes it creates.
    #[serde(default)]
    pub fs_group_change_policy: Option<String>,
    pub seccomp_profile: Option<SeccompProfile>,
    pub app_armor_profile: Option<SeccompProfile>,
}

/// A container (or init container).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Container {
    pub name: String,
    pub image: Option<String>,
    pub command: Option<Vec<String>>,
    pub args: Option<Vec<String>>,
    pub working_dir: Option<String>,
    #[serde(default, deserialize_with = "nullable")]
    pub env: Vec<EnvVar>,
    #[serde(default, deserialize_with = "nullable")]
    pub env_from: Vec<EnvFromSource>,
    #[serde(default, deserialize_with = "nullable")]
    pub ports: Vec<ContainerPort>,
    pub resources: Option<Resources>,
    #[serde(default, deserialize_with = "nullable")]
    pub volume_mounts: Vec<VolumeMount>,
    pub security_context: Option<SecurityContext>,
    pub image_pull_policy: Option<String>,
    #[serde(default, deserialize_with = "nullable")]
    pub stdin: bool,
    #[serde(default, deserialize_with = "nullable")]
    pub stdin_once: bool,
    #[serde(default, deserialize_with = "nullable")]
    pub tty: bool,
    /// Init containers only: "Always" makes a sidecar.
    pub restart_policy: Option<String>,
    /// Probes, run by the pod's shim.
    pub liveness_probe: Option<Probe>,
    pub readiness_probe: Option<Probe>,
    pub startup_probe: Option<Probe>,
    /// postStart and preStop hooks, run by the pod's shim.
    pub lifecycle: Option<Lifecycle>,
    // Where the kubelet reads a termination message from; nothing reads it here, and the
    // API server fills both in, so they are accepted without a warning.
    #[serde(default)]
    pub termination_message_path: Option<Value>,
    #[serde(default)]
    pub termination_message_policy: Option<Value>,
}

/// A probe, as kubelet reads it.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Probe {
    pub exec: Option<ExecAction>,
    pub http_get: Option<HttpGetAction>,
    pub tcp_socket: Option<TcpSocketAction>,
    pub grpc: Option<GrpcAction>,
    pub initial_delay_seconds: Option<u64>,
    pub period_seconds: Option<u64>,
    pub timeout_seconds: Option<u64>,
    pub success_threshold: Option<u64>,
    pub failure_threshold: Option<u32>,
    pub termination_grace_period_seconds: Option<u64>,
}

/// A container's lifecycle hooks.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Lifecycle {
    pub post_start: Option<LifecycleHandler>,
    pub pre_stop: Option<LifecycleHandler>,
}

/// What a lifecycle hook does.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct LifecycleHandler {
    pub exec: Option<ExecAction>,
    pub http_get: Option<HttpGetAction>,
    pub tcp_socket: Option<TcpSocketAction>,
    pub sleep: Option<SleepAction>,
}

/// A lifecycle hook's pause.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct SleepAction {
    pub seconds: i64,
}

/// A port by number or by the name of one of the container's ports.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub(crate) enum IntOrString {
    Int(i64),
    String(String),
}

/// An HTTP GET probe or hook.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct HttpGetAction {
    pub path: Option<String>,
    pub port: IntOrString,
    pub host: Option<String>,
    pub scheme: Option<String>,
    #[serde(default, deserialize_with = "nullable")]
    pub http_headers: Vec<HttpHeader>,
}

/// A header of an HTTP GET probe.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct HttpHeader {
    pub name: String,
    #[serde(default)]
    pub value: String,
}

/// A TCP connection probe.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct TcpSocketAction {
    pub port: IntOrString,
    pub host: Option<String>,
}

/// A probe's command.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ExecAction {
    #[serde(default, deserialize_with = "nullable")]
    pub command: Vec<String>,
}

/// An environment variable.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct EnvVar {
    pub name: String,
    pub value: Option<String>,
    pub value_from: Option<EnvVarSource>,
}

/// Where an environment variable's value comes from.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct EnvVarSource {
    pub config_map_key_ref: Option<KeySelector>,
    pub secret_key_ref: Option<KeySelector>,
    pub field_ref: Option<FieldSelector>,
    pub resource_field_ref: Option<ResourceFieldSelector>,
}

/// A key of a ConfigMap or Secret.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct KeySelector {
    #[serde(default)]
    pub name: String,
    pub key: String,
    #[serde(default, deserialize_with = "nullable")]
    pub optional: bool,
}

/// A field of the pod (downward API).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct FieldSelector {
    pub field_path: String,
    pub api_version: Option<String>,
}

/// A resource limit or request of a container (downward API).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ResourceFieldSelector {
    pub container_name: Option<String>,
    pub resource: String,
    pub divisor: Option<Quantity>,
}

/// All keys of a ConfigMap or Secret as variables.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct EnvFromSource {
    pub prefix: Option<String>,
    pub config_map_ref: Option<NameRef>,
    pub secret_ref: Option<NameRef>,
}

/// A ConfigMap or Secret by name.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct NameRef {
    #[serde(default)]
    pub name: String,
    #[serde(default, deserialize_with = "nullable")]
    pub optional: bool,
}

/// A port of a container.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ContainerPort {
    pub container_port: u16,
    pub host_port: Option<u16>,
    #[serde(rename = "hostIP")]
    pub host_ip: Option<String>,
    pub protocol: Option<String>,
    pub name: Option<String>,
}

/// Limits and requests.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Resources {
    #[serde(default, deserialize_with = "nullable")]
    pub limits: BTreeMap<String, Quantity>,
    #[serde(default, deserialize_with = "nullable")]
    pub requests: BTreeMap<String, Quantity>,
}

/// A volume mounted into a container.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct VolumeMount {
    pub name: String,
    pub mount_path: String,
    #[serde(default, deserialize_with = "nullable")]
    pub read_only: bool,
    pub sub_path: Option<String>,
    pub sub_path_expr: Option<String>,
    pub mount_propagation: Option<String>,
    pub recursive_read_only: Option<String>,
}

/// Container-level security settings (override the pod's).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct SecurityContext {
    pub run_as_user: Option<i64>,
    pub run_as_group: Option<i64>,
    pub run_as_non_root: Option<bool>,
    pub privileged: Option<bool>,
    pub capabilities: Option<Capabilities>,
    pub read_only_root_filesystem: Option<bool>,
    pub allow_privilege_escalation: Option<bool>,
    pub seccomp_profile: Option<SeccompProfile>,
    pub app_armor_profile: Option<SeccompProfile>,
    pub proc_mount: Option<String>,
}

/// Capabilities added to and dropped from the default set.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Capabilities {
    #[serde(default, deserialize_with = "nullable")]
    pub add: Vec<String>,
    #[serde(default, deserialize_with = "nullable")]
    pub drop: Vec<String>,
}

/// A seccomp profile choice.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct SeccompProfile {
    #[serde(rename = "type")]
    pub type_: String,
    pub localhost_profile: Option<String>,
}

/// A volume of the pod: exactly one source must be set.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Volume {
    pub name: String,
    pub empty_dir: Option<EmptyDirSource>,
    pub host_path: Option<HostPathSource>,
    pub config_map: Option<ConfigMapSource>,
    pub secret: Option<SecretSource>,
    #[serde(rename = "downwardAPI")]
    pub downward_api: Option<DownwardApiSource>,
    pub persistent_volume_claim: Option<ClaimSource>,
    pub projected: Option<ProjectedSource>,
    pub image: Option<ImageVolumeSource>,
}

/// image: an image's (or OCI artifact's) files, read-only.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ImageVolumeSource {
    pub reference: Option<String>,
    pub pull_policy: Option<String>,
}

/// projected: several sources' files in one volume.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ProjectedSource {
    #[serde(default, deserialize_with = "nullable")]
    pub sources: Vec<ProjectionSource>,
    pub default_mode: Option<FileMode>,
}

/// One source of a projected volume.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ProjectionSource {
    pub secret: Option<ProjectedObject>,
    pub config_map: Option<ProjectedObject>,
    #[serde(rename = "downwardAPI")]
    pub downward_api: Option<DownwardApiProjection>,
    pub service_account_token: Option<TokenProjection>,
    /// Sources an API server issues (refused by name).
    pub cluster_trust_bundle: Option<Value>,
    pub pod_certificate: Option<Value>,
}

/// A ConfigMap or Secret in a projected volume.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ProjectedObject {
    #[serde(default)]
    pub name: String,
    #[serde(default, deserialize_with = "nullable")]
    pub items: Vec<KeyToPath>,
    #[serde(default, deserialize_with = "nullable")]
    pub optional: bool,
}

/// downwardAPI files in a projected volume.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct DownwardApiProjection {
    #[serde(default, deserialize_with = "nullable")]
    pub items: Vec<DownwardApiFile>,
}

/// A service account token file in a projected volume.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct TokenProjection {
    pub path: String,
    #[serde(default)]
    pub audience: Option<String>,
    #[serde(default)]
    pub expiration_seconds: Option<i64>,
}

/// persistentVolumeClaim: a named volume of the engine's, by the claim's name.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ClaimSource {
    pub claim_name: String,
    #[serde(default, deserialize_with = "nullable")]
    pub read_only: bool,
}

/// emptyDir.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct EmptyDirSource {
    pub medium: Option<String>,
    pub size_limit: Option<Quantity>,
}

/// hostPath.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct HostPathSource {
    pub path: String,
    #[serde(rename = "type")]
    pub type_: Option<String>,
}

/// configMap volume.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ConfigMapSource {
    #[serde(default)]
    pub name: String,
    #[serde(default, deserialize_with = "nullable")]
    pub items: Vec<KeyToPath>,
    pub default_mode: Option<FileMode>,
    #[serde(default, deserialize_with = "nullable")]
    pub optional: bool,
}

/// secret volume.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct SecretSource {
    #[serde(default)]
    pub secret_name: String,
    #[serde(default, deserialize_with = "nullable")]
    pub items: Vec<KeyToPath>,
    pub default_mode: Option<FileMode>,
    #[serde(default, deserialize_with = "nullable")]
    pub optional: bool,
}

/// A key projected to a file.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct KeyToPath {
    pub key: String,
    pub path: String,
    pub mode: Option<FileMode>,
}

/// downwardAPI volume.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct DownwardApiSource {
    #[serde(default, deserialize_with = "nullable")]
    pub items: Vec<DownwardApiFile>,
    pub default_mode: Option<FileMode>,
}

/// A file of a downwardAPI volume.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct DownwardApiFile {
    pub path: String,
    pub field_ref: Option<FieldSelector>,
    pub resource_field_ref: Option<ResourceFieldSelector>,
    pub mode: Option<FileMode>,
}

/// A Kubernetes quantity as written ("500m", "128Mi", 2, 0.5); parsed by
/// [`super::quantity`].
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Quantity(pub String);

impl<'de> Deserialize<'de> for Quantity {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl serde::de::Visitor<'_> for V {
            type Value = Quantity;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a quantity such as \"500m\", \"128Mi\" or 2")
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Quantity, E> {
                Ok(Quantity(v.trim().to_string()))
            }
            fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<Quantity, E> {
                Ok(Quantity(v.to_string()))
            }
            fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<Quantity, E> {
                Ok(Quantity(v.to_string()))
            }
            fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<Quantity, E> {
                if !v.is_finite() {
                    return Err(E::custom(format!("{v} is not a quantity")));
                }
                Ok(Quantity(v.to_string()))
            }
        }
        d.deserialize_any(V)
    }
}

/// A file mode: an integer (JSON's decimal 420 or YAML's `0o644`) or a YAML 1.1 octal
/// literal such as `0644`, which Kubernetes' YAML decoder reads as octal (the YAML 1.2
/// parser hands it over as the string "0644").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct FileMode(pub u32);

impl<'de> Deserialize<'de> for FileMode {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl serde::de::Visitor<'_> for V {
            type Value = FileMode;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a file mode between 0 and 0777 (e.g. 0644 or 420)")
            }
            fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<FileMode, E> {
                if v > 0o777 {
                    return Err(E::custom(format!(
                        "file mode {v} (octal {v:o}) is outside 0..0777"
                    )));
                }
                Ok(FileMode(v as u32))
            }
            fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<FileMode, E> {
                u64::try_from(v)
                    .map_err(|_| E::custom(format!("file mode {v} is negative")))
                    .and_then(|v| self.visit_u64(v))
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<FileMode, E> {
                let digits = v.strip_prefix("0o").or_else(|| v.strip_prefix('0'));
                let digits = digits.map(|d| if d.is_empty() { "0" } else { d });
                match digits.map(|d| u32::from_str_radix(d, 8)) {
                    Some(Ok(m)) if m <= 0o777 => Ok(FileMode(m)),
                    _ => Err(E::custom(format!(
                        "file mode {v:?} is not an octal mode between 0 and 0777"
                    ))),
                }
            }
        }
        d.deserialize_any(V)
    }
}

/// The spec fields of the workload kinds (each kind reads its own).
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct WorkloadSpec {
    pub replicas: Option<i64>,
    pub selector: Option<LabelSelector>,
    /// The pod template, kept as YAML: each pod is read from it as a Pod document.
    pub template: Value,
    // StatefulSet.
    pub service_name: Option<String>,
    pub pod_management_policy: Option<String>,
    #[serde(default, deserialize_with = "nullable")]
    pub volume_claim_templates: Vec<Value>,
    // Job.
    pub completions: Option<i64>,
    pub parallelism: Option<i64>,
    pub backoff_limit: Option<i64>,
    pub completion_mode: Option<String>,
    // Rollout and history settings: one host runs one revision, so they are accepted
    // without effect (and without a warning).
    #[serde(default)]
    pub strategy: Option<Value>,
    #[serde(default)]
    pub update_strategy: Option<Value>,
    #[serde(default)]
    pub revision_history_limit: Option<Value>,
    #[serde(default)]
    pub min_ready_seconds: Option<Value>,
    #[serde(default)]
    pub progress_deadline_seconds: Option<Value>,
}

/// A label selector (matchLabels; matchExpressions are checked for In/Exists only).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct LabelSelector {
    #[serde(default, deserialize_with = "nullable")]
    pub match_labels: BTreeMap<String, String>,
    #[serde(default, deserialize_with = "nullable")]
    pub match_expressions: Vec<Value>,
}

/// The parts of a Service's spec that a host port mapping needs.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ServiceSpec {
    #[serde(rename = "type")]
    pub type_: Option<String>,
    #[serde(default, deserialize_with = "nullable")]
    pub selector: BTreeMap<String, String>,
    #[serde(default, deserialize_with = "nullable")]
    pub ports: Vec<ServicePort>,
    // Cluster-level settings with no meaning on one host: accepted without a warning.
    #[serde(default)]
    pub cluster_ip: Option<Value>,
    #[serde(default, rename = "clusterIPs")]
    pub cluster_ips: Option<Value>,
    #[serde(default)]
    pub session_affinity: Option<Value>,
    #[serde(default)]
    pub external_traffic_policy: Option<Value>,
    #[serde(default)]
    pub internal_traffic_policy: Option<Value>,
    #[serde(default)]
    pub ip_families: Option<Value>,
    #[serde(default)]
    pub ip_family_policy: Option<Value>,
}

/// A Service port.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ServicePort {
    pub name: Option<String>,
    pub port: i64,
    pub target_port: Option<IntOrString>,
    pub node_port: Option<i64>,
    pub protocol: Option<String>,
}

/// A gRPC health probe.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct GrpcAction {
    pub port: i64,
    pub service: Option<String>,
}
