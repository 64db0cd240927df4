//! Container resources: limits and requests of CPU and memory, checked and defaulted as the
//! API server does (a request defaults to its limit), then turned into cgroup settings.

use super::api;
use super::quantity::{Quantity, cpu_shares};
use wharf_engine::error::{Error, Result};
use wharf_engine::model::ContainerSpec;

/// A container's CPU and memory, after defaulting.
#[derive(Debug, Clone, Default)]
pub struct Resources {
    pub limit_cpu: Option<Quantity>,
    pub limit_memory: Option<Quantity>,
    pub request_cpu: Option<Quantity>,
    pub request_memory: Option<Quantity>,
}

fn quantity(q: &api::Quantity, path: &str) -> Result<Quantity> {
    let parsed = Quantity::parse(&q.0).map_err(|e| Error::Invalid(format!("{path}: {e}")))?;
    if parsed.is_negative() {
        return Err(Error::Invalid(format!(
            "{path}: {:?} is negative; resources must be 0 or more",
            q.0
        )));
    }
    Ok(parsed)
}

/// Read `resources` of the container at `path` (e.g. `spec.containers[0]`); other resource
/// names (ephemeral-storage, hugepages, devices) are reported in `warnings`.
pub fn read(
    r: Option<&api::Resources>,
    path: &str,
    warnings: &mut Vec<String>,
) -> Result<Resources> {
    let Some(r) = r else {
        return Ok(Resources::default());
    };
    let mut out = Resources::default();
    for (section, map) in [("limits", &r.limits), ("requests", &r.requests)] {
        for (name, q) in map {
            let p = format!("{path}.resources.{section}.{name}");
            let v = match name.as_str() {
                "cpu" | "memory" => Some(quantity(q, &p)?),
                _ => {
                    warnings.push(format!(
                        "{p} is not supported and is ignored: only cpu and memory are limited"
                    ));
                    None
                }
            };
            match (section, name.as_str()) {
                ("limits", "cpu") => out.limit_cpu = v,
                ("limits", "memory") => out.limit_memory = v,
                ("requests", "cpu") => out.request_cpu = v,
                ("requests", "memory") => out.request_memory = v,
                _ => {}
            }
        }
    }
    // The API server's defaulting: a missing request is the limit.
    if out.request_cpu.is_none() {
        out.request_cpu = out.limit_cpu;
    }
    if out.request_memory.is_none() {
        out.request_memory = out.limit_memory;
    }
    let too_big = |p: &str| Error::Invalid(format!("{path}.resources.{p} is too large"));
    if let (Some(l), Some(rq)) = (&out.limit_cpu, &out.request_cpu)
        && rq.milli_value().ok_or_else(|| too_big("requests.cpu"))?
            > l.milli_value().ok_or_else(|| too_big("limits.cpu"))?
    {
        return Err(Error::Invalid(format!(
            "{path}.resources.requests.cpu must not be more than limits.cpu"
        )));
    }
    if let (Some(l), Some(rq)) = (&out.limit_memory, &out.request_memory)
        && rq.value().ok_or_else(|| too_big("requests.memory"))?
            > l.value().ok_or_else(|| too_big("limits.memory"))?
    {
        return Err(Error::Invalid(format!(
            "{path}.resources.requests.memory must not be more than limits.memory"
        )));
    }
    Ok(out)
}

/// Set the container's cgroup limits: limits.memory -> memory, limits.cpu -> cpus (a CFS
/// quota), requests.cpu -> cpu_shares (kubelet's formula), requests.memory ->
/// memory_reservation (a soft limit).
pub fn apply(r: &Resources, path: &str, spec: &mut ContainerSpec) -> Result<()> {
    let too_big = |p: &str| Error::Invalid(format!("{path}.resources.{p} is too large"));
    if let Some(q) = &r.limit_memory {
        let bytes = q.value().ok_or_else(|| too_big("limits.memory"))?;
        // The kernel's floor is a few pages; Kubernetes' own is far above this.
        if bytes < 6 << 20 {
            return Err(Error::Invalid(format!(
                "{path}.resources.limits.memory: {bytes} bytes is below the 6Mi minimum a container needs"
            )));
        }
        spec.memory = Some(bytes);
        // kubelet's default (NoSwap): the limit is on memory and swap together.
        spec.memory_swap = Some(bytes);
    }
    if let Some(q) = &r.limit_cpu {
        let milli = q.milli_value().ok_or_else(|| too_big("limits.cpu"))?;
        if milli == 0 {
            return Err(Error::Invalid(format!(
                "{path}.resources.limits.cpu must be more than 0"
            )));
        }
        spec.cpus = Some(milli as f64 / 1000.0);
    }
    if let Some(q) = &r.request_cpu {
        let milli = q.milli_value().ok_or_else(|| too_big("requests.cpu"))?;
        spec.cpu_shares = Some(cpu_shares(milli));
    }
    if let Some(q) = &r.request_memory {
        let bytes = q.value().ok_or_else(|| too_big("requests.memory"))?;
        if bytes > 0 {
            spec.memory_reservation = Some(bytes);
        }
    }
    Ok(())
}

/// A pod's quality-of-service class, as Kubernetes derives it from all its containers'
/// resources: it decides whom the kernel's OOM killer takes first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Qos {
    /// Every container limits cpu and memory, and requests exactly that.
    Guaranteed,
    /// Anything between.
    Burstable,
    /// No container requests or limits anything.
    BestEffort,
}

/// The QoS class of a pod whose containers have these resources.
pub fn qos<'a>(all: impl Iterator<Item = &'a Resources>) -> Qos {
    let all: Vec<&Resources> = all.collect();
    let none = |r: &Resources| {
        r.limit_cpu.is_none()
            && r.limit_memory.is_none()
            && r.request_cpu.is_none()
            && r.request_memory.is_none()
    };
    let exact = |r: &Resources| {
        r.limit_cpu.is_some()
            && r.limit_memory.is_some()
            && r.request_cpu.as_ref().map(Quantity::milli_value)
                == r.limit_cpu.as_ref().map(Quantity::milli_value)
            && r.request_memory.as_ref().map(Quantity::value)
                == r.limit_memory.as_ref().map(Quantity::value)
    };
    if all.iter().all(|r| none(r)) {
        Qos::BestEffort
    } else if all.iter().all(|r| exact(r)) {
        Qos::Guaranteed
    } else {
        Qos::Burstable
    }
}

/// kubelet's oom_score_adj for a container: -997 for Guaranteed pods, 1000 for BestEffort,
/// and for Burstable ones lower the more of the node's memory the container requests
/// (between 3 and 999, so that it ranks between the two).
pub fn oom_score_adj(qos: Qos, r: &Resources, node_memory: u64) -> i32 {
    match qos {
        Qos::Guaranteed => -997,
        Qos::BestEffort => 1000,
        Qos::Burstable => {
            let request = r
                .request_memory
                .as_ref()
                .and_then(Quantity::value)
                .unwrap_or(0)
                .max(0) as u128;
            let adj = 1000 - (1000 * request / u128::from(node_memory.max(1))).min(1000) as i32;
            adj.clamp(3, 999)
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    fn res(limits: &[(&str, &str)], requests: &[(&str, &str)]) -> api::Resources {
        let m = |kv: &[(&str, &str)]| -> BTreeMap<String, api::Quantity> {
            kv.iter()
                .map(|(k, v)| (k.to_string(), api::Quantity(v.to_string())))
                .collect()
        };
        api::Resources {
            limits: m(limits),
            requests: m(requests),
        }
    }

    fn spec_of(r: &api::Resources) -> Result<(ContainerSpec, Vec<String>)> {
        let mut w = Vec::new();
        let rs = read(Some(r), "spec.containers[0]", &mut w)?;
        let mut spec = ContainerSpec::default();
        apply(&rs, "spec.containers[0]", &mut spec)?;
        Ok((spec, w))
    }

    #[test]
    fn limits_and_requests_become_cgroup_settings() {
        let (s, w) = spec_of(&res(
            &[("cpu", "500m"), ("memory", "128Mi")],
            &[("cpu", "250m"), ("memory", "64Mi")],
        ))
        .unwrap();
        assert_eq!(s.cpus, Some(0.5));
        assert_eq!(s.memory, Some(128 << 20));
        assert_eq!(s.cpu_shares, Some(256));
        assert_eq!(s.memory_reservation, Some(64 << 20));
        assert!(w.is_empty());
    }

    #[test]
    fn requests_default_to_limits() {
        let (s, _) = spec_of(&res(&[("cpu", "2"), ("memory", "1G")], &[])).unwrap();
        assert_eq!(s.cpus, Some(2.0));
        assert_eq!(s.cpu_shares, Some(2048));
        assert_eq!(s.memory_reservation, Some(1_000_000_000));
        let (s, _) = spec_of(&res(&[], &[("cpu", "100m")])).unwrap();
        assert_eq!(s.cpus, None);
        assert_eq!(s.cpu_shares, Some(102));
        assert_eq!(s.memory, None);
    }

    #[test]
    fn bad_resources_are_errors_naming_the_field() {
        let e = spec_of(&res(&[("cpu", "1")], &[("cpu", "2")])).unwrap_err();
        assert!(
            e.to_string()
                .contains("requests.cpu must not be more than limits.cpu"),
            "{e}"
        );
        let e = spec_of(&res(&[("memory", "12 MB")], &[])).unwrap_err();
        assert!(
            e.to_string()
                .starts_with("spec.containers[0].resources.limits.memory: "),
            "{e}"
        );
        let e = spec_of(&res(&[("memory", "-1Gi")], &[])).unwrap_err();
        assert!(e.to_string().contains("negative"), "{e}");
        let e = spec_of(&res(&[("memory", "1Mi")], &[])).unwrap_err();
        assert!(e.to_string().contains("minimum"), "{e}");
    }

    #[test]
    fn other_resources_are_warned_about() {
        let (_, w) = spec_of(&res(
            &[("ephemeral-storage", "1Gi")],
            &[("nvidia.com/gpu", "1")],
        ))
        .unwrap();
        assert_eq!(w.len(), 2, "{w:?}");
        assert!(
            w[0].starts_with(
                "spec.containers[0].resources.limits.ephemeral-storage is not supported"
            )
        );
    }

    #[test]
    fn qos_classes_and_kubelets_oom_score_adj() {
        let r = |l: &[(&str, &str)], q: &[(&str, &str)]| {
            read(Some(&res(l, q)), "c", &mut Vec::new()).unwrap()
        };
        let exact = r(&[("cpu", "1"), ("memory", "1Gi")], &[]);
        let partial = r(&[("memory", "1Gi")], &[]);
        let half = r(&[], &[("memory", "512Mi")]);
        let nothing = r(&[], &[]);
        assert_eq!(qos([&exact, &exact].into_iter()), Qos::Guaranteed);
        assert_eq!(qos([&exact, &partial].into_iter()), Qos::Burstable);
        assert_eq!(qos([&exact, &nothing].into_iter()), Qos::Burstable);
        assert_eq!(qos([&nothing].into_iter()), Qos::BestEffort);
        let node = 1u64 << 30;
        assert_eq!(oom_score_adj(Qos::Guaranteed, &exact, node), -997);
        assert_eq!(oom_score_adj(Qos::BestEffort, &nothing, node), 1000);
        // Half the node's memory requested: 1000 - 500.
        assert_eq!(oom_score_adj(Qos::Burstable, &half, node), 500);
        // No request: just below BestEffort; all of it: just above Guaranteed.
        assert_eq!(oom_score_adj(Qos::Burstable, &nothing, node), 999);
        assert_eq!(oom_score_adj(Qos::Burstable, &partial, node), 3);
    }
}
