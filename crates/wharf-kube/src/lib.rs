//! `wharf play`: Kubernetes v1 Pod manifests translated into the engine's specs, and
//! carried out through the engine's API ([`play`], [`play_down`]).
//!
//! [`parse`] reads a multi-document YAML manifest (Pods, ConfigMaps, Secrets, Lists of
//! them); [`plan`] turns its pod into a [`PlayPlan`]: a [`PodSpec`](wharf_engine::model::PodSpec),
//! the init and app [`ContainerSpec`](wharf_engine::model::ContainerSpec)s, the [`Volume`]s to
//! create, the images to pull, and a warning for every field that is left out. Both are pure:
//! nothing on the host changes until the engine carries the plan out.
//!
//! # What the engine does with a plan
//! 1. Pull `plan.images` per their [`PullPolicy`].
//! 2. Create the pod from `plan.pod` (its name is the manifest's; containers are named
//!    `<pod>-<container>`, see [`engine_name`], and labelled with [`LABEL_POD_NAME`],
//!    [`LABEL_POD_NAMESPACE`] and [`LABEL_CONTAINER_NAME`]).
//! 3. Create `plan.volumes` with [`create_volumes`] in a directory of the pod (e.g.
//!    `<root>/pods/<pod>/volumes`); the engine's [`remove_volumes`] undoes it when the pod is
//!    removed.
//! 4. For each container, [`HostVolumes::resolve_mounts`] turns the mounts whose `kind` is
//!    [`VOLUME_MOUNT_KIND`] into bind mounts of host paths (subPaths into the engine's
//!    mounts of a path inside a volume, which the pod's shim stages at each start). The
//!    pod's IP, [`POD_IP_PLACEHOLDER`] in env and commands, is put in by the engine at
//!    each bundle (the host's address for `hostNetwork` pods).
//! 5. Run the init containers one after another, each to a zero exit (a sidecar, one with
//!    `restartPolicy: Always`, until it runs and its startup probe passed), then start the
//!    app containers; stop them with `plan.grace_period`. The pod's shim runs each
//!    container's probes and lifecycle hooks (`ContainerSpec::kube`) with no CLI alive;
//!    [`pod_status`] reads what they found back as kubectl shows it.
//!
//! # Warnings
//! Fields Wharf does not act on are never dropped silently: each becomes a warning naming
//! its path (`spec.containers[0].livenessProbe.grpc is not supported and is ignored: the
//! shim speaks no HTTP/2 ...`). Fields whose omission would change what the containers see or can do (an
//! unsupported volume type, an env source that cannot be resolved, a seccomp profile that
//! cannot be found) are errors instead. Fields the API server writes into objects it returns
//! (`metadata.creationTimestamp`, `status`, `terminationMessagePath`, ...) are accepted
//! without a word.

mod api;
mod controller;
mod document;
mod env;
mod expand;
mod generate;
mod host;
mod manifest;
mod plan;
mod play;
mod quantity;
mod resources;
mod security;
mod services;
mod status;
mod store;
mod validate;
mod volumes;
mod warnings;
mod workloads;

pub use controller::{ControllerState, Progress, reconcile};
pub use env::POD_IP_PLACEHOLDER;
pub use generate::generate;
pub use host::{HostVolumes, create_volumes, restore_volumes, save_volumes};
pub use manifest::{DataObject, MAX_MANIFEST_BYTES, Manifest, parse, parse_objects};
pub use plan::{
    DEFAULT_GRACE_PERIOD, ImagePull, LABEL_CONTAINER_NAME, LABEL_POD_NAME, LABEL_POD_NAMESPACE,
    PlanOptions, PlayPlan, PullPolicy, engine_name, plan, plan_with, plan_workload_pod,
};
pub use play::{PlayedPod, ensure_new, play, play_down};
pub use quantity::{Quantity, QuantityError};
pub use status::{Condition, ContainerState, ContainerStatus, PodStatus, pod_status};
pub use store::{ObjectStore, Stored, from_flags};
pub use volumes::{
    HostPathType, VOLUME_MOUNT_KIND, Volume, VolumeFile, VolumeRef, VolumeSource, claim_names,
    volume_ref,
};
pub use wharf_engine::pod_volumes::remove_volumes;
pub use workloads::{JobSpec, LABEL_OWNER, Workload, WorkloadKind};

#[cfg(test)]
mod tests;
