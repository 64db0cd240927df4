//! How docker lists containers: the STATUS text (`Up 5 seconds`, `Exited (0) 3 minutes
//! ago`), times ago, and the `ps` filters (`--filter` of the CLI, `filters` of the API).

use std::time::{SystemTime, UNIX_EPOCH};

use wharf_engine::db::ContainerRow;
use wharf_engine::model::ContainerState;

/// Seconds since the epoch of an RFC 3339 time.
pub fn epoch(t: &str) -> Option<u64> {
    wharf_sys::time::parse_rfc3339(t)?
        .duration_since(UNIX_EPOCH)
        .ok()
        .map(|d| d.as_secs())
}

/// Seconds from an RFC 3339 time to now.
pub fn seconds_since(t: &str) -> Option<u64> {
    let then = epoch(t)?;
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    Some(now.saturating_sub(then))
}

/// How long ago, as docker says it (`Less than a second`, `3 minutes`).
pub fn ago(t: &str) -> String {
    let Some(s) = seconds_since(t) else {
        return t.to_string();
    };
    match s {
        0..=1 => "Less than a second".into(),
        2..=59 => format!("{s} seconds"),
        60..=119 => "About a minute".into(),
        120..=3599 => format!("{} minutes", s / 60),
        3600..=7199 => "About an hour".into(),
        7200..=172_799 => format!("{} hours", s / 3600),
        _ => format!("{} days", s / 86_400),
    }
}

/// docker's STATUS of a container.
pub fn status(c: &ContainerRow) -> String {
    if let (true, Some(e)) = (c.restarting, &c.exit) {
        return format!("Restarting ({}) {} ago", e.code, ago(&e.finished_at));
    }
    match c.shown_state() {
        ContainerState::Running => format!(
            "Up {}",
            c.started_at.as_deref().map(ago).unwrap_or_default()
        ),
        ContainerState::Exited => match &c.exit {
            Some(e) => format!(
                "Exited ({}){}{} {} ago",
                e.code,
                if e.oom_killed { " OOMKilled" } else { "" },
                // Why, when it was not the process's own doing (e.g. ShimDied).
                match e.reason.as_deref() {
                    None | Some("Completed" | "Error" | "OOMKilled") => String::new(),
                    Some(r) => format!(" {r}"),
                },
                ago(&e.finished_at)
            ),
            None => "Exited".into(),
        },
        ContainerState::Created => "Created".into(),
        ContainerState::Paused => format!(
            "Up {} (Paused)",
            c.started_at.as_deref().map(ago).unwrap_or_default()
        ),
        ContainerState::Unknown => "Unknown".into(),
    }
}

/// docker's state name of a container (`running`, `exited`, `restarting`...).
pub fn state_name(c: &ContainerRow) -> String {
    if c.restarting {
        "restarting".to_string()
    } else {
        c.shown_state().to_string()
    }
}

/// One `ps` filter, as docker reads `KEY=VALUE`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PsFilter {
    /// An id prefix.
    Id(String),
    /// A part of the name (`^` and `$` anchor it).
    Name(String),
    /// Exited with this code.
    Exited(i32),
    /// On this network.
    Network(String),
    /// Mounting this volume or path.
    Volume(String),
    /// With this label (and value).
    Label(String, Option<String>),
    /// Of this image.
    Ancestor(String),
    /// In this state.
    Status(String),
}

impl PsFilter {
    /// The filter `key=value`; the error says why it is not one.
    pub fn parse(key: &str, v: &str) -> Result<PsFilter, String> {
        Ok(match key {
            "id" => PsFilter::Id(v.to_string()),
            "name" => PsFilter::Name(v.to_string()),
            "label" => match v.split_once('=') {
                Some((k, v)) => PsFilter::Label(k.to_string(), Some(v.to_string())),
                None => PsFilter::Label(v.to_string(), None),
            },
            "ancestor" => PsFilter::Ancestor(v.to_string()),
            "status" => match v {
                "created" | "running" | "paused" | "restarting" | "exited" | "removing"
                | "dead" => PsFilter::Status(v.to_string()),
                _ => {
                    return Err("status is created, running, paused, restarting or exited".into());
                }
            },
            "exited" => match v.parse() {
                Ok(code) => PsFilter::Exited(code),
                Err(_) => return Err("exited is an exit code".into()),
            },
            "network" => PsFilter::Network(v.to_string()),
            "volume" => PsFilter::Volume(v.to_string()),
            _ => {
                return Err("id, name, label, ancestor, status, exited, network or volume".into());
            }
        })
    }

    /// Whether the filter asks about containers that do not run (which a listing without
    /// `all` then includes, as docker's does).
    pub fn needs_all(&self) -> bool {
        matches!(self, PsFilter::Status(_) | PsFilter::Exited(_))
    }

    /// Whether `v` passes.
    pub fn matches(&self, v: &wharf_engine::ContainerView) -> bool {
        let c = &v.row;
        match self {
            PsFilter::Id(p) => c.id.starts_with(p.as_str()),
            // docker matches a part of the name, or with ^ and $ its start and end.
            PsFilter::Name(n) => {
                let n = n.trim_start_matches('/').trim_start_matches("^/");
                match (n.strip_prefix('^'), n.ends_with('$')) {
                    (Some(rest), true) => c.name == rest.trim_end_matches('$'),
                    (Some(rest), false) => c.name.starts_with(rest),
                    (None, true) => c.name.ends_with(n.trim_end_matches('$')),
                    (None, false) => c.name.contains(n),
                }
            }
            PsFilter::Exited(code) => {
                c.state == ContainerState::Exited
                    && c.exit.as_ref().is_some_and(|e| e.code == *code)
            }
            PsFilter::Network(n) => v.network == *n,
            PsFilter::Volume(name) => c.spec.mounts.iter().any(|m| {
                m.source == std::path::Path::new(name)
                    || m.destination == std::path::Path::new(name)
            }),
            PsFilter::Label(k, v) => c
                .spec
                .labels
                .get(k)
                .is_some_and(|have| v.as_ref().is_none_or(|v| v == have)),
            PsFilter::Ancestor(i) => {
                c.image_name == *i
                    || c.image_name.split(':').next() == Some(i.as_str())
                    || c.image_name.rsplit('/').next() == Some(i.as_str())
                    || c.image_id
                        .trim_start_matches("sha256:")
                        .starts_with(i.trim_start_matches("sha256:"))
            }
            PsFilter::Status(s) => state_name(c) == *s,
        }
    }
}
