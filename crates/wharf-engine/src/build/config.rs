//! The instructions that change only an image's config (ENV, LABEL, CMD, ENTRYPOINT,
//! WORKDIR, USER, EXPOSE, VOLUME, STOPSIGNAL, HEALTHCHECK, SHELL, ONBUILD, MAINTAINER):
//! each edits the config's `config` object as docker's builder does.

use serde_json::{Map, Value, json};
use wharf_build::{Command, Dockerfile, Kind};

use super::{StageState, argv_of};
use crate::error::{Error, Result};

/// The history text of a step that adds no layer, as docker's classic builder writes it.
pub(super) fn nop(text: &str) -> String {
    format!("/bin/sh -c #(nop) {text}")
}

/// The config's Env as pairs.
pub(super) fn env_of(config: &Map<String, Value>) -> Vec<(String, String)> {
    config
        .get("Env")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .map(|e| match e.split_once('=') {
                    Some((k, v)) => (k.to_string(), v.to_string()),
                    None => (e.to_string(), String::new()),
                })
                .collect()
        })
        .unwrap_or_default()
}

/// Set `key` in the config's Env (replacing an earlier value in place).
fn set_env(config: &mut Map<String, Value>, key: &str, value: &str) {
    let mut env = env_of(config);
    match env.iter_mut().find(|(k, _)| k == key) {
        Some(e) => e.1 = value.to_string(),
        None => env.push((key.to_string(), value.to_string())),
    }
    config.insert(
        "Env".into(),
        json!(
            env.iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect::<Vec<_>>()
        ),
    );
}

/// Add labels to the config.
pub(super) fn set_labels(
    config: &mut Map<String, Value>,
    labels: impl Iterator<Item = (String, String)>,
) {
    let entry = config.entry("Labels").or_insert_with(|| json!({}));
    if !entry.is_object() {
        *entry = json!({});
    }
    if let Some(m) = entry.as_object_mut() {
        for (k, v) in labels {
            m.insert(k, json!(v));
        }
    }
}

/// A set-like member (`ExposedPorts`, `Volumes`): `{"key": {}}`.
fn add_to_set(config: &mut Map<String, Value>, member: &str, keys: &[String]) {
    let entry = config.entry(member).or_insert_with(|| json!({}));
    if !entry.is_object() {
        *entry = json!({});
    }
    if let Some(m) = entry.as_object_mut() {
        for k in keys {
            m.insert(k.clone(), json!({}));
        }
    }
}

/// A docker duration (`30s`, `1m30s`) in nanoseconds.
fn nanos(what: &str, d: &str) -> Result<i64> {
    wharf_sys::time::parse_go_duration(d)
        .map(|d| d.as_nanos() as i64)
        .ok_or_else(|| Error::Invalid(format!("HEALTHCHECK --{what}={d}: not a duration")))
}

/// An instruction's words after variable expansion (docker expands in ENV, LABEL,
/// WORKDIR, USER, EXPOSE, VOLUME and STOPSIGNAL; CMD, ENTRYPOINT and SHELL stay as
/// written, for the shell to expand when it runs).
pub(super) enum Expanded {
    /// Key and value pairs (ENV, LABEL).
    Pairs(Vec<(String, String)>),
    /// Words (EXPOSE, VOLUME).
    Words(Vec<String>),
    /// One value (WORKDIR, USER, STOPSIGNAL, MAINTAINER).
    One(String),
    /// Nothing to expand.
    Nothing,
}

impl Expanded {
    pub(super) fn of(df: &Dockerfile, st: &StageState, kind: &Kind) -> Result<Expanded> {
        let x = |s: &str| st.expand(df, s);
        Ok(match kind {
            // The whole line is expanded with the environment before it (`ENV A=1 B=$A`
            // gives B the earlier A), as docker does.
            Kind::Env(p) | Kind::Label(p) => Expanded::Pairs(
                p.iter()
                    .map(|(k, v)| Ok((x(k)?, x(v)?)))
                    .collect::<Result<_>>()?,
            ),
            Kind::Expose(w) | Kind::Volume(w) => {
                Expanded::Words(w.iter().map(|s| x(s)).collect::<Result<_>>()?)
            }
            Kind::Workdir(s) | Kind::User(s) | Kind::StopSignal(s) | Kind::Maintainer(s) => {
                Expanded::One(x(s)?)
            }
            _ => Expanded::Nothing,
        })
    }
}

/// Apply a config instruction to `config`. `cmd_set`: CMD was set in this stage (an
/// ENTRYPOINT clears a CMD that came from the base image, as docker does).
pub(super) fn apply(
    config: &mut Map<String, Value>,
    kind: &Kind,
    x: &Expanded,
    cmd_set: bool,
) -> Result<()> {
    match (kind, x) {
        (Kind::Env(_), Expanded::Pairs(p)) => {
            for (k, v) in p {
                set_env(config, k, v);
            }
        }
        (Kind::Label(_), Expanded::Pairs(p)) => set_labels(config, p.iter().cloned()),
        (Kind::Cmd(c), _) => {
            config.insert("Cmd".into(), json!(argv_of(config, c)));
        }
        (Kind::Entrypoint(c), _) => {
            config.insert("Entrypoint".into(), json!(argv_of(config, c)));
            if !cmd_set {
                config.insert("Cmd".into(), Value::Null);
            }
        }
        (Kind::Workdir(_), Expanded::One(dir)) => {
            let base = config
                .get("WorkingDir")
                .and_then(Value::as_str)
                .filter(|w| !w.is_empty())
                .unwrap_or("/")
                .to_string();
            let joined = if dir.starts_with('/') {
                dir.clone()
            } else {
                format!("{}/{dir}", base.trim_end_matches('/'))
            };
            config.insert("WorkingDir".into(), json!(joined));
        }
        (Kind::User(_), Expanded::One(u)) => {
            config.insert("User".into(), json!(u));
        }
        (Kind::Expose(_), Expanded::Words(ports)) => {
            let ports: Vec<String> = ports
                .iter()
                .map(|p| {
                    if p.contains('/') {
                        p.to_lowercase()
                    } else {
                        format!("{p}/tcp")
                    }
                })
                .collect();
            add_to_set(config, "ExposedPorts", &ports);
        }
        (Kind::Volume(_), Expanded::Words(v)) => add_to_set(config, "Volumes", v),
        (Kind::StopSignal(_), Expanded::One(s)) => {
            config.insert("StopSignal".into(), json!(s));
        }
        (Kind::Healthcheck(None), _) => {
            config.insert("Healthcheck".into(), json!({"Test": ["NONE"]}));
        }
        (Kind::Healthcheck(Some(h)), _) => {
            let test = match &h.test {
                Command::Exec(v) => {
                    let mut t = vec!["CMD".to_string()];
                    t.extend(v.iter().cloned());
                    t
                }
                Command::Shell(s) => vec!["CMD-SHELL".to_string(), s.clone()],
            };
            let mut hc = json!({"Test": test});
            for (name, key, v) in [
                ("interval", "Interval", &h.interval),
                ("timeout", "Timeout", &h.timeout),
                ("start-period", "StartPeriod", &h.start_period),
                ("start-interval", "StartInterval", &h.start_interval),
            ] {
                if let Some(v) = v {
                    hc[key] = json!(nanos(name, v)?);
                }
            }
            if let Some(r) = &h.retries {
                let n: i64 = r.parse().map_err(|_| {
                    Error::Invalid(format!("HEALTHCHECK --retries={r}: not a number"))
                })?;
                hc["Retries"] = json!(n);
            }
            config.insert("Healthcheck".into(), hc);
        }
        (Kind::Shell(argv), _) => {
            config.insert("Shell".into(), json!(argv));
        }
        (Kind::OnBuild(t), _) => {
            let entry = config.entry("OnBuild").or_insert_with(|| json!([]));
            if !entry.is_array() {
                *entry = json!([]);
            }
            if let Some(a) = entry.as_array_mut() {
                a.push(json!(t));
            }
        }
        (Kind::Maintainer(_), _) => {}
        _ => {}
    }
    Ok(())
}
