//! `wharf inspect --tree POD`: the pod as the kernel sees it. The process tree below its
//! shim, each process's namespaces (and which are the pod sandbox's), its cgroup and the
//! limits there, its mounts: what one otherwise assembles by hand from pstree and
//! /proc/<pid>/ns.

use std::collections::BTreeMap;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

use serde::Serialize;

use crate::db::Sandbox;

/// Namespace types shown, in order.
pub const NAMESPACES: [&str; 7] = ["net", "ipc", "uts", "pid", "mnt", "cgroup", "user"];

/// One process.
#[derive(Debug, Clone, Serialize)]
pub struct Proc {
    /// Host pid.
    pub pid: i32,
    /// Command line.
    pub cmd: String,
    /// Namespace type -> inode.
    pub ns: BTreeMap<String, u64>,
    /// Namespace types this process shares with the pod sandbox's pinned namespaces.
    pub shared_with_pod: Vec<String>,
    /// Namespace types it shares with the host (the engine's own namespaces).
    pub shared_with_host: Vec<String>,
    /// Its cgroup (unified path, or the memory controller's on v1).
    pub cgroup: String,
    /// Limits read from its cgroup (memory, pids, cpu).
    pub limits: BTreeMap<String, String>,
    /// Its mount points (as it sees them).
    pub mounts: Vec<String>,
    /// Children.
    pub children: Vec<Proc>,
}

fn ns_inode(path: &str) -> Option<u64> {
    std::fs::metadata(path).ok().map(|m| m.ino())
}

fn cmdline(pid: i32) -> String {
    let raw = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
    let s: Vec<String> = raw
        .split(|b| *b == 0)
        .filter(|p| !p.is_empty())
        .map(|p| String::from_utf8_lossy(p).into_owned())
        .collect();
    if s.is_empty() {
        std::fs::read_to_string(format!("/proc/{pid}/comm"))
            .map(|c| format!("[{}]", c.trim()))
            .unwrap_or_default()
    } else {
        s.join(" ")
    }
}

fn children(pid: i32) -> Vec<i32> {
    let mut out = Vec::new();
    if let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) {
        for t in tasks.flatten() {
            if let Ok(c) = std::fs::read_to_string(t.path().join("children")) {
                out.extend(c.split_whitespace().filter_map(|p| p.parse::<i32>().ok()));
            }
        }
    }
    out.sort();
    out.dedup();
    out
}

fn cgroup_of(pid: i32) -> (String, Vec<(String, String)>) {
    let text = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).unwrap_or_default();
    let mut unified = None;
    let mut per = Vec::new();
    for line in text.lines() {
        let mut p = line.splitn(3, ':');
        let (_, ctrls, path) = (p.next(), p.next().unwrap_or(""), p.next().unwrap_or(""));
        if ctrls.is_empty() {
            unified = Some(path.to_string());
        } else {
            for c in ctrls.split(',') {
                per.push((c.to_string(), path.to_string()));
            }
        }
    }
    let main = per
        .iter()
        .find(|(c, _)| c == "memory")
        .map(|(_, p)| p.clone())
        .or(unified)
        .unwrap_or_default();
    (main, per)
}

fn limits(pid: i32) -> BTreeMap<String, String> {
    let (_, per) = cgroup_of(pid);
    let read = |ctrl: &str, file: &str| -> Option<String> {
        let path = per.iter().find(|(c, _)| c == ctrl).map(|(_, p)| p.clone());
        let base = match path {
            Some(p) => format!("/sys/fs/cgroup/{ctrl}{p}"),
            None => {
                let text = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).ok()?;
                let p = text
                    .lines()
                    .find_map(|l| l.strip_prefix("0::"))?
                    .to_string();
                format!("/sys/fs/cgroup{p}")
            }
        };
        std::fs::read_to_string(Path::new(&base).join(file))
            .ok()
            .map(|s| s.trim().to_string())
    };
    let mut out = BTreeMap::new();
    for (key, ctrl, file) in [
        ("memory", "memory", "memory.limit_in_bytes"),
        ("memory", "memory", "memory.max"),
        ("pids", "pids", "pids.max"),
        ("cpu.quota", "cpu", "cpu.cfs_quota_us"),
        ("cpu.max", "cpu", "cpu.max"),
    ] {
        if out.contains_key(key) {
            continue;
        }
        if let Some(v) = read(ctrl, file) {
            let v = if v == "9223372036854771712" {
                "max".to_string()
            } else {
                v
            };
            out.insert(key.to_string(), v);
        }
    }
    out
}

fn mounts(pid: i32) -> Vec<String> {
    std::fs::read_to_string(format!("/proc/{pid}/mountinfo"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| {
            let (pre, post) = l.split_once(" - ")?;
            let point = pre.split(' ').nth(4)?;
            let fstype = post.split(' ').next()?;
            Some(format!("{point} ({fstype})"))
        })
        .collect()
}

/// The process tree rooted at `pid`, each process annotated against the pod's sandbox.
pub fn build(pid: i32, sandbox: &Sandbox) -> Option<Proc> {
    if !Path::new(&format!("/proc/{pid}")).exists() {
        return None;
    }
    let pod_ns: BTreeMap<&str, u64> = [
        ("net", sandbox.netns.as_deref()),
        ("ipc", sandbox.ipcns.as_deref()),
        ("uts", sandbox.utsns.as_deref()),
        ("pid", sandbox.pidns.as_deref()),
    ]
    .into_iter()
    .filter_map(|(t, p)| Some((t, ns_inode(p?)?)))
    .collect();
    let host_ns: BTreeMap<&str, u64> = NAMESPACES
        .iter()
        .filter_map(|t| Some((*t, ns_inode(&format!("/proc/self/ns/{t}"))?)))
        .collect();
    Some(walk(pid, &pod_ns, &host_ns))
}

fn walk(pid: i32, pod_ns: &BTreeMap<&str, u64>, host_ns: &BTreeMap<&str, u64>) -> Proc {
    let mut ns = BTreeMap::new();
    let mut shared_with_pod = Vec::new();
    let mut shared_with_host = Vec::new();
    for t in NAMESPACES {
        if let Some(ino) = ns_inode(&format!("/proc/{pid}/ns/{t}")) {
            ns.insert(t.to_string(), ino);
            if pod_ns.get(t) == Some(&ino) {
                shared_with_pod.push(t.to_string());
            }
            if host_ns.get(t) == Some(&ino) {
                shared_with_host.push(t.to_string());
            }
        }
    }
    let (cgroup, _) = cgroup_of(pid);
    Proc {
        pid,
        cmd: cmdline(pid),
        ns,
        shared_with_pod,
        shared_with_host,
        cgroup,
        limits: limits(pid),
        mounts: mounts(pid),
        children: children(pid)
            .into_iter()
            .map(|c| walk(c, pod_ns, host_ns))
            .collect(),
    }
}

/// Render a tree for a terminal.
pub fn render(p: &Proc, out: &mut String, prefix: &str, last: bool, top: bool) {
    let branch = if top {
        ""
    } else if last {
        "└─ "
    } else {
        "├─ "
    };
    out.push_str(&format!("{prefix}{branch}{} {}\n", p.pid, p.cmd));
    let child_prefix = if top {
        String::new()
    } else {
        format!("{prefix}{}", if last { "   " } else { "│  " })
    };
    let detail = format!(
        "{child_prefix}{}",
        if p.children.is_empty() {
            "   "
        } else {
            "│  "
        }
    );
    let ns: Vec<String> = NAMESPACES
        .iter()
        .filter_map(|t| {
            let ino = p.ns.get(*t)?;
            let tag = if p.shared_with_pod.iter().any(|s| s == t) {
                " (pod)"
            } else if p.shared_with_host.iter().any(|s| s == t) {
                " (host)"
            } else {
                ""
            };
            Some(format!("{t}:{ino}{tag}"))
        })
        .collect();
    out.push_str(&format!("{detail}ns: {}\n", ns.join(" ")));
    let limits: Vec<String> = p.limits.iter().map(|(k, v)| format!("{k}={v}")).collect();
    out.push_str(&format!(
        "{detail}cgroup: {}{}\n",
        p.cgroup,
        if limits.is_empty() {
            String::new()
        } else {
            format!("  [{}]", limits.join(" "))
        }
    ));
    let n = p.mounts.len();
    let shown: Vec<&String> = p.mounts.iter().take(6).collect();
    out.push_str(&format!(
        "{detail}mounts ({n}): {}{}\n",
        shown
            .iter()
            .map(|s| s.as_str())
            .collect::<Vec<_>>()
            .join(", "),
        if n > 6 { ", ..." } else { "" }
    ));
    for (i, c) in p.children.iter().enumerate() {
        render(c, out, &child_prefix, i + 1 == p.children.len(), false);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn own_process_tree_is_readable() {
        let me = std::process::id() as i32;
        let t = build(me, &Sandbox::default()).unwrap();
        assert_eq!(t.pid, me);
        // Our own namespaces are the host's by definition.
        assert!(t.shared_with_host.contains(&"mnt".to_string()));
        assert!(!t.mounts.is_empty());
        let mut s = String::new();
        render(&t, &mut s, "", true, true);
        assert!(s.contains("ns: net:"));
    }
}
