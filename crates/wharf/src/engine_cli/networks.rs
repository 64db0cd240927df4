//! `wharf network`: docker's commands and output over the engine's user networks, beside
//! the built-in ones (`wharf`, the default bridge; `host`; `none`).

use std::io::Write;

use anyhow::{Result, bail};
use serde_json::{Value, json};
use wharf_engine::Engine;
use wharf_engine::user_networks::UserNetwork;

use super::args::NetworkCmd;
use crate::format::{self, Format};

/// A stable id for the networks that have no record (sha256 of the name, as 64 hex).
fn builtin_id(name: &str) -> String {
    wharf_engine::images::Digest::of(name.as_bytes())
        .hex()
        .to_string()
}

/// The networks `ls` shows: the built-in ones, then the user networks.
fn all(engine: &Engine) -> Result<Vec<(String, String, &'static str)>> {
    let mut out = vec![
        (builtin_id("wharf"), "wharf".to_string(), "bridge"),
        (builtin_id("host"), "host".to_string(), "host"),
        (builtin_id("none"), "none".to_string(), "null"),
    ];
    for n in engine.list_networks()? {
        out.push((n.id.clone(), n.name, "bridge"));
    }
    Ok(out)
}

/// `docker network inspect`'s document of a user network.
fn doc(engine: &Engine, n: &UserNetwork) -> Result<Value> {
    let mut containers = serde_json::Map::new();
    for p in engine.network_pods(&n.name)? {
        containers.insert(
            p.id.clone(),
            json!({
                "Name": p.name,
                "IPv4Address": p.sandbox.ips_on(&n.name).iter().find(|i| !i.contains(':')).map(|ip| {
                    format!("{ip}/{}", n.subnet.split_once('/').map_or("32", |s| s.1))
                }).unwrap_or_default(),
            }),
        );
    }
    Ok(json!({
        "Name": n.name,
        "Id": n.id,
        "Created": n.created,
        "Scope": "local",
        "Driver": "bridge",
        "EnableIPv6": false,
        "IPAM": {"Driver": "default", "Config": [{"Subnet": n.subnet, "Gateway": n.gateway}]},
        "Internal": false,
        "Attachable": false,
        "Containers": containers,
        "Options": {"com.docker.network.bridge.name": n.bridge},
        "Labels": n.labels,
    }))
}

/// `wharf network ...`.
pub fn run(engine: &Engine, cmd: &NetworkCmd) -> Result<i32> {
    let mut out = std::io::stdout().lock();
    match cmd {
        NetworkCmd::Create {
            driver,
            subnet,
            gateway,
            label,
            name,
        } => {
            if driver != "bridge" {
                bail!("invalid --driver {driver:?}: only bridge networks can be made");
            }
            let labels = super::convert::pairs("--label", label)?;
            let n = engine.create_network(name, subnet.as_deref(), gateway.as_deref(), labels)?;
            writeln!(out, "{}", n.id)?;
        }
        NetworkCmd::Ls {
            quiet,
            format,
            no_trunc,
        } => {
            let nets = all(engine)?;
            let id = |i: &str| {
                if *no_trunc {
                    i.to_string()
                } else {
                    i[..12].to_string()
                }
            };
            if *quiet {
                for (i, _, _) in &nets {
                    writeln!(out, "{}", id(i))?;
                }
                return Ok(0);
            }
            match Format::parse(format)? {
                Format::Table => {
                    let mut t = String::from("NETWORK ID\tNAME\tDRIVER\tSCOPE\n");
                    for (i, n, d) in &nets {
                        t.push_str(&format!("{}\t{n}\t{d}\tlocal\n", id(i)));
                    }
                    write!(out, "{}", format::align(&t))?;
                }
                fmt => {
                    let rows: Vec<Value> = nets
                        .iter()
                        .map(|(i, n, d)| json!({"ID": id(i), "Name": n, "Driver": d, "Scope": "local"}))
                        .collect();
                    let headers = json!({"ID": "NETWORK ID", "Name": "NAME", "Driver": "DRIVER", "Scope": "SCOPE"});
                    format::print_rows(&mut out, &fmt, &headers, &rows)?;
                }
            }
        }
        NetworkCmd::Inspect { format, networks } => {
            let mut docs = Vec::new();
            for n in networks {
                docs.push(doc(engine, &engine.network_info(n)?)?);
            }
            drop(out);
            format::print_documents(&Format::parse(format.as_deref().unwrap_or("json"))?, &docs)?;
        }
        NetworkCmd::Rm { networks } => {
            return Ok(super::each_named(networks, |n| engine.remove_network(n)));
        }
        NetworkCmd::Connect {
            alias,
            network,
            container,
        } => engine.connect_network(container, network, alias)?,
        NetworkCmd::Disconnect {
            force: _,
            network,
            container,
        } => engine.disconnect_network(container, network)?,
        NetworkCmd::Prune { force } => {
            if !force && !super::confirm("all custom networks not used by at least one container")?
            {
                return Ok(0);
            }
            let removed = engine.prune_networks()?;
            // docker's network prune: no blank line and no total after the list.
            if !removed.is_empty() {
                writeln!(out, "Deleted Networks:")?;
                for n in removed {
                    writeln!(out, "{n}")?;
                }
            }
        }
    }
    Ok(0)
}
