//! `wharf volume`: docker's commands and output over the engine's named volumes.

use std::collections::BTreeMap;
use std::io::Write;

use anyhow::{Result, bail};
use serde_json::{Value, json};
use wharf_engine::Engine;
use wharf_engine::named_volumes::Volume;

use super::args::VolumeCmd;
use crate::format::{self, Format};

/// A volume as `docker volume inspect` shows it.
fn doc(v: &Volume) -> Value {
    json!({
        "CreatedAt": v.created_at,
        "Driver": "local",
        "Labels": v.labels,
        "Mountpoint": v.mountpoint,
        "Name": v.name,
        "Options": {},
        "Scope": "local",
        "Anonymous": v.anonymous,
    })
}

/// One `volume ls --filter` (`in_use`: the volumes containers mount).
fn matches(in_use: &BTreeMap<String, Vec<String>>, v: &Volume, filter: &str) -> Result<bool> {
    let Some((k, want)) = filter.split_once('=') else {
        bail!("invalid --filter {filter:?}: use KEY=VALUE");
    };
    Ok(match k {
        "dangling" => {
            let dangling = !in_use.contains_key(&v.name);
            match want {
                "true" | "1" => dangling,
                "false" | "0" => !dangling,
                _ => bail!("invalid --filter {filter:?}: dangling is true or false"),
            }
        }
        "name" => v.name.contains(want),
        "label" => match want.split_once('=') {
            Some((lk, lv)) => v.labels.get(lk).is_some_and(|x| x == lv),
            None => v.labels.contains_key(want),
        },
        _ => bail!("invalid --filter {filter:?}: dangling, name or label"),
    })
}

/// `wharf volume ...`.
pub fn run(engine: &Engine, cmd: &VolumeCmd) -> Result<i32> {
    let mut out = std::io::stdout().lock();
    match cmd {
        VolumeCmd::Create {
            label,
            name_flag,
            name,
        } => {
            let labels = super::convert::pairs("--label", label)?;
            let name = name.as_deref().or(name_flag.as_deref());
            let v = engine.create_volume(name, labels, false)?;
            writeln!(out, "{}", v.name)?;
        }
        VolumeCmd::Ls {
            quiet,
            format,
            filter,
        } => {
            let in_use = engine.volumes_in_use()?;
            let mut vols = Vec::new();
            for v in engine.list_volumes()? {
                let mut keep = true;
                for f in filter {
                    keep &= matches(&in_use, &v, f)?;
                }
                if keep {
                    vols.push(v);
                }
            }
            if *quiet {
                for v in &vols {
                    writeln!(out, "{}", v.name)?;
                }
                return Ok(0);
            }
            let rows: Vec<Value> = vols
                .iter()
                .map(|v| {
                    let labels: Vec<String> =
                        v.labels.iter().map(|(k, x)| format!("{k}={x}")).collect();
                    json!({
                        "Driver": "local", "Name": v.name, "Mountpoint": v.mountpoint,
                        "Labels": labels.join(","), "Scope": "local",
                        "CreatedAt": v.created_at,
                    })
                })
                .collect();
            match Format::parse(format)? {
                Format::Table => {
                    let mut t = String::from("DRIVER\tVOLUME NAME\n");
                    for v in &vols {
                        t.push_str(&format!("local\t{}\n", v.name));
                    }
                    write!(out, "{}", format::align(&t))?;
                }
                fmt => {
                    let headers = json!({
                        "Driver": "DRIVER", "Name": "VOLUME NAME", "Mountpoint": "MOUNTPOINT",
                        "Labels": "LABELS", "Scope": "SCOPE", "CreatedAt": "CREATED AT",
                    });
                    format::print_rows(&mut out, &fmt, &headers, &rows)?;
                }
            }
        }
        VolumeCmd::Inspect { format, volumes } => {
            let docs = volumes
                .iter()
                .map(|n| engine.volume(n).map(|v| doc(&v)))
                .collect::<Result<Vec<_>, _>>()?;
            drop(out);
            format::print_documents(&Format::parse(format.as_deref().unwrap_or("json"))?, &docs)?;
        }
        VolumeCmd::Rm { force: _, volumes } => {
            return Ok(super::each_named(volumes, |n| engine.remove_volume(n)));
        }
        VolumeCmd::Prune { all, force } => {
            let what = if *all {
                "all volumes not used by at least one container"
            } else {
                "all anonymous volumes not used by at least one container"
            };
            if !force && !super::confirm(what)? {
                return Ok(0);
            }
            let removed = engine.prune_volumes(*all)?;
            let bytes: u64 = removed.iter().map(|(_, b)| b).sum();
            let names: Vec<String> = removed.into_iter().map(|(n, _)| n).collect();
            super::space::write_deleted(&mut out, "Volumes", &names)?;
            super::space::write_reclaimed(&mut out, bytes)?;
        }
    }
    Ok(0)
}
