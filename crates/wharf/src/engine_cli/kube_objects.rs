//! `wharf configmap|secret create|ls|inspect|rm`: the ConfigMaps and Secrets Wharf keeps
//! for the manifests `play` runs (see [`wharf_kube::ObjectStore`]).

use anyhow::{Result, bail};
use serde_json::json;

use super::args::{Cli, ObjectCmd};
use super::output;

/// Run a `configmap` or `secret` subcommand; `kind` is "ConfigMap" or "Secret".
pub fn run(cli: &Cli, kind: &'static str, cmd: &ObjectCmd) -> Result<i32> {
    let store = wharf_kube::ObjectStore::new(&cli.root);
    match cmd {
        ObjectCmd::Create {
            from_literal,
            from_file,
            from_env_file,
            namespace,
            replace,
            name,
        } => {
            let o = wharf_kube::from_flags(
                kind,
                name,
                Some(namespace),
                from_literal,
                from_file,
                from_env_file,
            )?;
            store.save(&o, *replace)?;
            println!("{name}");
        }
        ObjectCmd::Ls { quiet, format } => {
            let all = store.list(kind)?;
            if *quiet {
                for s in &all {
                    println!("{}", s.object.name);
                }
                return Ok(0);
            }
            match format.as_str() {
                "json" => {
                    let v: Vec<_> = all
                        .iter()
                        .map(|s| {
                            json!({
                                "Name": s.object.name,
                                "Namespace": s.object.namespace,
                                "Keys": s.object.data.keys().collect::<Vec<_>>(),
                                "CreatedAt": s.created_at,
                            })
                        })
                        .collect();
                    println!("{}", serde_json::to_string_pretty(&v)?);
                }
                "table" => {
                    let mut rows = vec![
                        ["NAMESPACE", "NAME", "DATA", "CREATED"]
                            .map(String::from)
                            .to_vec(),
                    ];
                    for s in &all {
                        rows.push(vec![
                            s.object.namespace.clone().unwrap_or_default(),
                            s.object.name.clone(),
                            s.object.data.len().to_string(),
                            output::age(&s.created_at),
                        ]);
                    }
                    print!("{}", output::table(&rows));
                }
                other => bail!("invalid --format {other:?}: table or json"),
            }
        }
        ObjectCmd::Inspect { namespace, names } => {
            let all = store.list(kind)?;
            let mut docs = Vec::new();
            for n in names {
                let Some(s) = all.iter().find(|s| {
                    &s.object.name == n && s.object.namespace.as_deref() == Some(namespace)
                }) else {
                    bail!(
                        "no such {}: {n} (namespace {namespace})",
                        kind.to_lowercase()
                    );
                };
                let data: serde_json::Map<String, serde_json::Value> = s
                    .object
                    .data
                    .iter()
                    .map(|(k, v)| {
                        let shown = if kind == "Secret" {
                            json!(format!("{} bytes", v.len()))
                        } else {
                            json!(String::from_utf8_lossy(v))
                        };
                        (k.clone(), shown)
                    })
                    .collect();
                docs.push(json!({
                    "apiVersion": "v1", "kind": kind,
                    "metadata": {"name": n, "namespace": namespace, "creationTimestamp": s.created_at},
                    "data": data,
                }));
            }
            println!("{}", serde_json::to_string_pretty(&docs)?);
        }
        ObjectCmd::Rm { namespace, names } => {
            let mut code = 0;
            for n in names {
                match store.remove(kind, namespace, n) {
                    Ok(()) => println!("{n}"),
                    Err(e) => {
                        eprintln!("wharf: {e}");
                        code = 1;
                    }
                }
            }
            return Ok(code);
        }
    }
    Ok(0)
}
