//! What `state`, `list`, `ps` and `features` print, in runc's formats.

use std::io::Write;

use anyhow::{Context, Result, bail};
use serde::Serialize;
use wharf_runtime::{ContainerState, Runtime, Status};

/// runc's state document.
#[derive(Serialize)]
struct StateDoc<'a> {
    #[serde(rename = "ociVersion")]
    oci_version: &'a str,
    id: &'a str,
    pid: i32,
    status: Status,
    bundle: String,
    rootfs: String,
    created: &'a str,
    owner: &'a str,
    #[serde(skip_serializing_if = "std::collections::HashMap::is_empty")]
    annotations: std::collections::HashMap<String, String>,
}

fn doc<'a>(st: &'a ContainerState, status: Status) -> StateDoc<'a> {
    StateDoc {
        oci_version: wharf_runtime::OCI_VERSION,
        id: &st.id,
        pid: if status == Status::Stopped { 0 } else { st.pid },
        status,
        bundle: st.bundle.display().to_string(),
        rootfs: st.rootfs.display().to_string(),
        created: &st.created,
        owner: "",
        annotations: st.annotations(),
    }
}

/// `state`: pretty JSON.
pub fn state_json(st: &ContainerState, status: Status) -> Result<String> {
    Ok(serde_json::to_string_pretty(&doc(st, status))?)
}

/// `list`: a table, JSON, or ids only.
pub fn list(rt: &Runtime, format: &str, quiet: bool) -> Result<()> {
    let all = rt.list()?;
    let mut out = std::io::stdout().lock();
    if quiet {
        for (st, _) in &all {
            writeln!(out, "{}", st.id)?;
        }
        return Ok(());
    }
    match format {
        "json" => {
            let docs: Vec<StateDoc<'_>> = all.iter().map(|(s, st)| doc(s, *st)).collect();
            if docs.is_empty() {
                writeln!(out, "null")?;
            } else {
                writeln!(out, "{}", serde_json::to_string(&docs)?)?;
            }
        }
        "table" => {
            let mut rows =
                vec![["ID", "PID", "STATUS", "BUNDLE", "CREATED", "OWNER"].map(String::from)];
            for (s, status) in &all {
                let d = doc(s, *status);
                rows.push([
                    d.id.to_string(),
                    d.pid.to_string(),
                    d.status.to_string(),
                    d.bundle,
                    d.created.to_string(),
                    "root".to_string(),
                ]);
            }
            write!(out, "{}", table(&rows))?;
        }
        other => bail!("invalid format option {other:?}"),
    }
    Ok(())
}

/// Columns padded like Go's tabwriter with minwidth 12 and padding 3, as runc prints them.
fn table(rows: &[[String; 6]]) -> String {
    let mut widths = [0usize; 6];
    for r in rows {
        for (i, c) in r.iter().enumerate() {
            widths[i] = widths[i].max((c.chars().count() + 3).max(12));
        }
    }
    let mut s = String::new();
    for r in rows {
        for (i, c) in r.iter().enumerate() {
            if i + 1 == r.len() {
                s.push_str(c);
            } else {
                s.push_str(&format!("{c:<w$}", w = widths[i]));
            }
        }
        s.push('\n');
    }
    s
}

/// `ps`: pids as JSON, or ps(1)'s output filtered to the container's processes.
pub fn ps(rt: &Runtime, id: &str, format: &str, ps_args: &[String]) -> Result<()> {
    let pids = rt.pids(id)?;
    match format {
        "json" => {
            println!("{}", serde_json::to_string(&pids)?);
            Ok(())
        }
        "table" => {
            let args: Vec<String> = if ps_args.is_empty() {
                vec!["-ef".into()]
            } else {
                ps_args.to_vec()
            };
            let out = std::process::Command::new("ps")
                .args(&args)
                .output()
                .context("run ps")?;
            if !out.status.success() {
                bail!(
                    "ps {}: {}",
                    args.join(" "),
                    String::from_utf8_lossy(&out.stderr).trim()
                );
            }
            let text = String::from_utf8_lossy(&out.stdout);
            let mut lines = text.lines();
            let header = lines.next().unwrap_or_default();
            let col = header
                .split_whitespace()
                .position(|h| h == "PID")
                .context("ps output has no PID column")?;
            println!("{header}");
            for line in lines {
                let pid: Option<i32> = line
                    .split_whitespace()
                    .nth(col)
                    .and_then(|p| p.parse().ok());
                if pid.is_some_and(|p| pids.contains(&p)) {
                    println!("{line}");
                }
            }
            Ok(())
        }
        other => bail!("invalid format option {other:?}"),
    }
}

/// Turn the default spec into a rootless one (user namespace mapping the caller).
pub fn make_rootless(spec: &mut serde_json::Value) {
    let uid = rustix::process::getuid().as_raw();
    let gid = rustix::process::getgid().as_raw();
    let linux = &mut spec["linux"];
    linux["uidMappings"] = serde_json::json!([{ "containerID": 0, "hostID": uid, "size": 1 }]);
    linux["gidMappings"] = serde_json::json!([{ "containerID": 0, "hostID": gid, "size": 1 }]);
    if let Some(ns) = linux["namespaces"].as_array_mut() {
        ns.retain(|n| n["type"] != "network");
        ns.push(serde_json::json!({ "type": "user" }));
    }
    linux.as_object_mut().map(|o| o.remove("resources"));
    if let Some(mounts) = spec["mounts"].as_array_mut() {
        mounts.retain(|m| m["destination"] != "/sys/fs/cgroup");
        for m in mounts.iter_mut() {
            if m["destination"] == "/sys" {
                *m = serde_json::json!({ "destination": "/sys", "type": "none", "source": "/sys",
                    "options": ["rbind", "nosuid", "noexec", "nodev", "ro"] });
            }
        }
    }
}

/// The OCI features document (runtime-spec features.md).
pub fn features_json() -> String {
    serde_json::to_string_pretty(&wharf_runtime::features::document()).unwrap_or_default()
}
