//! Workload kinds (Deployment, ReplicaSet, DaemonSet, StatefulSet, Job): what a manifest
//! asks of them, checked as the API server checks it, and the pods of their template, named
//! and labelled as their Kubernetes controllers name and label them. Keeping the count of
//! pods is [`crate::controller`]'s job.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_norway::{Mapping, Value};

use super::api;
use super::document::{ParsedPod, object_name, typed};
use wharf_engine::error::{Error, Result};

/// The workload kinds `wharf play` runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum WorkloadKind {
    Deployment,
    ReplicaSet,
    DaemonSet,
    StatefulSet,
    Job,
}

impl WorkloadKind {
    /// The kind for a document's `kind`, if it is a workload.
    pub fn parse(kind: &str) -> Option<WorkloadKind> {
        Some(match kind {
            "Deployment" => WorkloadKind::Deployment,
            "ReplicaSet" => WorkloadKind::ReplicaSet,
            "DaemonSet" => WorkloadKind::DaemonSet,
            "StatefulSet" => WorkloadKind::StatefulSet,
            "Job" => WorkloadKind::Job,
            _ => return None,
        })
    }

    /// Its name, as in `kind:`.
    pub fn as_str(self) -> &'static str {
        match self {
            WorkloadKind::Deployment => "Deployment",
            WorkloadKind::ReplicaSet => "ReplicaSet",
            WorkloadKind::DaemonSet => "DaemonSet",
            WorkloadKind::StatefulSet => "StatefulSet",
            WorkloadKind::Job => "Job",
        }
    }

    fn api_version(self) -> &'static str {
        match self {
            WorkloadKind::Job => "batch/v1",
            _ => "apps/v1",
        }
    }
}

/// A Job's counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct JobSpec {
    /// Successful pods that complete the Job.
    pub completions: u32,
    /// Pods running at once.
    pub parallelism: u32,
    /// Failures (failed pods and container restarts) before the Job fails.
    pub backoff_limit: u32,
    /// completionMode Indexed: each pod has an index (0..completions), in its name,
    /// its `batch.kubernetes.io/job-completion-index` annotation and label, and
    /// JOB_COMPLETION_INDEX; the Job completes when every index has succeeded.
    pub indexed: bool,
}

/// The label and annotation of an Indexed Job's pod that holds its index.
pub const COMPLETION_INDEX: &str = "batch.kubernetes.io/job-completion-index";

/// A workload of a manifest.
#[derive(Debug, Clone)]
pub struct Workload {
    pub kind: WorkloadKind,
    pub name: String,
    pub namespace: Option<String>,
    /// Pods wanted (a DaemonSet's one on this host; a Job's parallelism).
    pub replicas: u32,
    /// A Job's counts.
    pub job: Option<JobSpec>,
    /// A StatefulSet's pods start one after another, each once the one before is ready
    /// (podManagementPolicy OrderedReady, the default).
    pub ordered: bool,
    /// A StatefulSet's volumeClaimTemplates (their names): each pod gets a claim
    /// `<template>-<pod>` of its own.
    pub claim_templates: Vec<String>,
    /// The pod template (metadata and spec), as YAML.
    template: Value,
    /// A hash of the template, as Deployments label their pods (`pod-template-hash`).
    pub template_hash: String,
}

/// Label on every pod a workload made: `<Kind>/<name>` (what `play --down` and the
/// controller find them by).
pub const LABEL_OWNER: &str = "io.wharf.kube.owner";

fn invalid(msg: String) -> Error {
    Error::Invalid(msg)
}

impl Workload {
    /// `<Kind>/<name>`: the value of [`LABEL_OWNER`] on its pods.
    pub fn owner(&self) -> String {
        format!("{}/{}", self.kind.as_str(), self.name)
    }

    /// The name of a new pod: `<name>-<ordinal>` for a StatefulSet, `<name>-<hash>-<5
    /// random>` for a Deployment, `<name>-<index>-<5 random>` for an Indexed Job's,
    /// `<name>-<5 random>` for the others.
    pub fn pod_name(&self, ordinal: u32) -> String {
        match self.kind {
            WorkloadKind::StatefulSet => format!("{}-{ordinal}", self.name),
            WorkloadKind::Job if self.job.is_some_and(|j| j.indexed) => {
                format!("{}-{ordinal}-{}", self.name, suffix(5))
            }
            WorkloadKind::Deployment => {
                format!("{}-{}-{}", self.name, self.template_hash, suffix(5))
            }
            _ => format!("{}-{}", self.name, suffix(5)),
        }
    }

    /// The Pod document of the template for pod `name` (ordinal `ordinal` of a
    /// StatefulSet), with the labels its controller would give it.
    pub(crate) fn pod(&self, name: &str, ordinal: u32, where_: &str) -> Result<ParsedPod> {
        let mut template = match &self.template {
            Value::Mapping(m) => m.clone(),
            _ => Mapping::new(),
        };
        let mut meta = match template.remove("metadata") {
            Some(Value::Mapping(m)) => m,
            _ => Mapping::new(),
        };
        meta.insert("name".into(), name.into());
        if let Some(ns) = &self.namespace {
            meta.insert("namespace".into(), ns.clone().into());
        }
        let mut labels = match meta.remove("labels") {
            Some(Value::Mapping(m)) => m,
            _ => Mapping::new(),
        };
        for (k, v) in self.pod_labels(name, ordinal) {
            labels.insert(k.into(), v.into());
        }
        meta.insert("labels".into(), Value::Mapping(labels));
        let indexed = self.job.is_some_and(|j| j.indexed);
        if indexed {
            let mut annotations = match meta.remove("annotations") {
                Some(Value::Mapping(m)) => m,
                _ => Mapping::new(),
            };
            annotations.insert(COMPLETION_INDEX.into(), ordinal.to_string().into());
            meta.insert("annotations".into(), Value::Mapping(annotations));
        }
        let mut spec = match template.remove("spec") {
            Some(Value::Mapping(m)) => m,
            _ => Mapping::new(),
        };
        if indexed {
            // Every container learns its index (kubelet gives it through the annotation).
            for list in ["initContainers", "containers"] {
                if let Some(Value::Sequence(cs)) = spec.get_mut(list) {
                    for c in cs.iter_mut().filter_map(Value::as_mapping_mut) {
                        let mut var = Mapping::new();
                        var.insert("name".into(), "JOB_COMPLETION_INDEX".into());
                        var.insert("value".into(), ordinal.to_string().into());
                        match c.get_mut("env") {
                            Some(Value::Sequence(env)) => env.push(Value::Mapping(var)),
                            _ => {
                                c.insert("env".into(), Value::Sequence(vec![Value::Mapping(var)]));
                            }
                        }
                    }
                }
            }
        }
        if self.kind == WorkloadKind::StatefulSet && !spec.contains_key("hostname") {
            // A StatefulSet's pods are named hosts (`web-0`).
            spec.insert("hostname".into(), name.into());
        }
        if !self.claim_templates.is_empty() {
            let mut volumes = match spec.remove("volumes") {
                Some(Value::Sequence(v)) => v,
                _ => Vec::new(),
            };
            for (t, claim) in self.claims(name) {
                let mut source = Mapping::new();
                source.insert("claimName".into(), claim.into());
                let mut v = Mapping::new();
                v.insert("name".into(), t.into());
                v.insert("persistentVolumeClaim".into(), Value::Mapping(source));
                volumes.push(Value::Mapping(v));
            }
            spec.insert("volumes".into(), Value::Sequence(volumes));
        }
        let mut doc = Mapping::new();
        doc.insert("apiVersion".into(), "v1".into());
        doc.insert("kind".into(), "Pod".into());
        doc.insert("metadata".into(), Value::Mapping(meta));
        doc.insert("spec".into(), Value::Mapping(spec));
        for (k, v) in template {
            doc.insert(k, v);
        }
        let (pod, ignored): (api::Pod, _) = typed(Value::Mapping(doc), where_)?;
        Ok(ParsedPod {
            pod,
            name: name.to_string(),
            ignored,
        })
    }

    /// The claims of pod `name` from the volumeClaimTemplates: (template, claim name).
    pub fn claims(&self, name: &str) -> Vec<(String, String)> {
        self.claim_templates
            .iter()
            .map(|t| (t.clone(), format!("{t}-{name}")))
            .collect()
    }

    /// The labels Kubernetes' controller of this kind puts on its pods.
    fn pod_labels(&self, name: &str, ordinal: u32) -> Vec<(&'static str, String)> {
        match self.kind {
            WorkloadKind::Deployment => vec![("pod-template-hash", self.template_hash.clone())],
            WorkloadKind::StatefulSet => vec![
                ("statefulset.kubernetes.io/pod-name", name.to_string()),
                ("apps.kubernetes.io/pod-index", ordinal.to_string()),
            ],
            WorkloadKind::Job => {
                let mut l = vec![
                    ("job-name", self.name.clone()),
                    ("batch.kubernetes.io/job-name", self.name.clone()),
                ];
                if self.job.is_some_and(|j| j.indexed) {
                    l.push((COMPLETION_INDEX, ordinal.to_string()));
                }
                l
            }
            _ => Vec::new(),
        }
    }
}

/// The alphabet Kubernetes uses for generated names and hashes (no vowels, no
/// look-alikes).
const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";

/// `n` random characters of [`ALPHABET`].
fn suffix(n: usize) -> String {
    let mut raw = vec![0u8; n];
    rustix::rand::getrandom(&mut raw, rustix::rand::GetRandomFlags::empty()).expect("getrandom");
    raw.iter()
        .map(|b| ALPHABET[*b as usize % ALPHABET.len()] as char)
        .collect()
}

/// 10 characters of a stable hash (FNV-1a) of the template's YAML.
fn template_hash(template: &Value) -> String {
    let text = serde_norway::to_string(template).unwrap_or_default();
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in text.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    (0..10)
        .map(|i| ALPHABET[((h >> (i * 6)) % ALPHABET.len() as u64) as usize] as char)
        .collect()
}

/// Read a workload document of kind `kind`; warnings about its own skipped fields go to
/// `warnings` (its template's are the pods').
pub(crate) fn parse(
    value: Value,
    kind: WorkloadKind,
    where_: &str,
    warnings: &mut Vec<String>,
) -> Result<Workload> {
    let (doc, ignored): (api::WorkloadDoc, Vec<String>) = typed(value, where_)?;
    match doc.api_version.as_deref() {
        Some(v) if v == kind.api_version() => {}
        None => warnings.push(format!(
            "{where_} has no apiVersion; {} is assumed",
            kind.api_version()
        )),
        Some(other) => {
            return Err(invalid(format!(
                "{where_}: apiVersion {other:?} is not supported ({} is {})",
                kind.as_str(),
                kind.api_version()
            )));
        }
    }
    let name = object_name(&doc.metadata, where_)?;
    warnings.extend(
        ignored
            .iter()
            .map(|p| format!("{where_}: {}", super::warnings::ignored(p))),
    );
    let spec = doc.spec;
    let template_labels: BTreeMap<String, String> = spec
        .template
        .get("metadata")
        .and_then(|m| m.get("labels"))
        .and_then(|l| serde_norway::from_value(l.clone()).ok())
        .unwrap_or_default();
    match (&spec.selector, kind) {
        (None, WorkloadKind::Job) => {}
        (None, _) => {
            return Err(invalid(format!("{where_}: spec.selector is required")));
        }
        (Some(sel), _) => {
            for (k, v) in &sel.match_labels {
                if template_labels.get(k) != Some(v) {
                    return Err(invalid(format!(
                        "{where_}: spec.template.metadata.labels: selector does not match template labels ({k}: {v})"
                    )));
                }
            }
            if !sel.match_expressions.is_empty() {
                warnings.push(format!(
                    "{where_}: spec.selector.matchExpressions are not checked against the template"
                ));
            }
        }
    }
    let restart = spec
        .template
        .get("spec")
        .and_then(|s| s.get("restartPolicy"))
        .and_then(Value::as_str);
    match (kind, restart) {
        (WorkloadKind::Job, Some("Never" | "OnFailure")) => {}
        (WorkloadKind::Job, other) => {
            return Err(invalid(format!(
                "{where_}: spec.template.spec.restartPolicy {}: a Job's pods need \"OnFailure\" or \"Never\"",
                other
                    .map(|o| format!("{o:?}"))
                    .unwrap_or("is required".into())
            )));
        }
        (_, None | Some("Always")) => {}
        (_, Some(other)) => {
            return Err(invalid(format!(
                "{where_}: spec.template.spec.restartPolicy {other:?}: a {}'s pods need \"Always\"",
                kind.as_str()
            )));
        }
    }
    let mut claim_templates = Vec::new();
    for (i, t) in spec.volume_claim_templates.iter().enumerate() {
        let name = t
            .get("metadata")
            .and_then(|m| m.get("name"))
            .and_then(Value::as_str)
            .filter(|n| crate::validate::is_dns_label(n))
            .ok_or_else(|| {
                invalid(format!(
                    "{where_}: spec.volumeClaimTemplates[{i}].metadata.name is required (a DNS label)"
                ))
            })?;
        claim_templates.push(name.to_string());
    }
    if !claim_templates.is_empty() {
        warnings.push(format!(
            "{where_}: spec.volumeClaimTemplates become named volumes (<template>-<pod>), made on first use and kept by play --down (--force removes them); their storage class, size and access modes are not applied"
        ));
    }
    let count = |v: Option<i64>, field: &str, default: u32| -> Result<u32> {
        match v {
            None => Ok(default),
            Some(n) if (0..=1000).contains(&n) => Ok(n as u32),
            Some(n) => Err(invalid(format!(
                "{where_}: spec.{field} {n} is out of range (0 to 1000 on one host)"
            ))),
        }
    };
    let mut replicas = count(spec.replicas, "replicas", 1)?;
    let mut job = None;
    let mut ordered = false;
    match kind {
        WorkloadKind::DaemonSet => replicas = 1,
        WorkloadKind::Job => {
            let completions = count(spec.completions, "completions", 1)?;
            let parallelism = count(spec.parallelism, "parallelism", 1)?;
            let backoff_limit = count(spec.backoff_limit, "backoffLimit", 6)?;
            let indexed = match spec.completion_mode.as_deref() {
                None | Some("NonIndexed") => false,
                Some("Indexed") => true,
                Some(other) => {
                    return Err(invalid(format!(
                        "{where_}: spec.completionMode {other:?} is invalid (NonIndexed or Indexed)"
                    )));
                }
            };
            replicas = parallelism.min(completions);
            job = Some(JobSpec {
                completions,
                parallelism,
                backoff_limit,
                indexed,
            });
        }
        WorkloadKind::StatefulSet => {
            ordered = spec.pod_management_policy.as_deref() != Some("Parallel");
            if spec
                .pod_management_policy
                .as_deref()
                .is_some_and(|p| p != "OrderedReady" && p != "Parallel")
            {
                return Err(invalid(format!(
                    "{where_}: spec.podManagementPolicy must be OrderedReady or Parallel"
                )));
            }
        }
        _ => {}
    }
    let template_hash = template_hash(&spec.template);
    Ok(Workload {
        kind,
        name,
        namespace: doc.metadata.namespace,
        replicas,
        job,
        ordered,
        claim_templates,
        template: spec.template,
        template_hash,
    })
}
