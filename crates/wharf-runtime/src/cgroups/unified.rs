//! `linux.resources.unified`: raw cgroup v2 files ("memory.high": "50M").
//!
//! Each key must be a file name of the form CONTROLLER.PARAMETER whose controller the cgroup2
//! hierarchy offers (or a core `cgroup.*` file). On a hybrid host that is only the
//! controllers no v1 hierarchy took; asking for one mounted as v1 is an error that says so.

use std::collections::HashMap;

use super::route::enable_in_ancestors;
use super::{Cgroup, files};
use crate::error::{Error, Result};

const S: &str = "linux.resources.unified";

/// Write every key (sorted, so the order of writes is stable).
pub(super) fn set(cg: &Cgroup, unified: &HashMap<String, String>) -> Result<()> {
    if unified.is_empty() {
        return Ok(());
    }
    let (Some(dir), Some(root)) = (cg.unified_dir(), cg.unified_root()) else {
        return Err(Error::Unsupported(format!(
            "{S}: cgroup v2 is not mounted on this host"
        )));
    };
    let offered = cg.unified_controllers();
    let mut keys: Vec<_> = unified.iter().collect();
    keys.sort();
    for (key, value) in keys {
        let setting = format!("{S}[{key:?}]");
        if key.is_empty() || key.contains('/') || key.starts_with('.') {
            return Err(Error::Config(format!(
                "{setting}: the key must be a file name (no slashes)"
            )));
        }
        let Some((ctrl, _)) = key
            .split_once('.')
            .filter(|(c, p)| !c.is_empty() && !p.is_empty())
        else {
            return Err(Error::Config(format!(
                "{setting}: the key must have the form CONTROLLER.PARAMETER"
            )));
        };
        if ctrl != "cgroup" {
            if !offered.contains(ctrl) {
                let v1_key = if ctrl == "io" { "blkio" } else { ctrl };
                let why = match cg.paths.get(v1_key).filter(|_| !cg.v2) {
                    Some(v1) => format!(
                        "it is mounted as cgroup v1 (this container's directory there is {}), \
                         so the cgroup v2 hierarchy at {} does not have it",
                        v1.display(),
                        root.display()
                    ),
                    None => format!(
                        "the cgroup v2 hierarchy at {} does not offer it (its cgroup.controllers: \
                         {:?})",
                        root.display(),
                        offered.iter().cloned().collect::<Vec<_>>().join(" ")
                    ),
                };
                return Err(Error::Unsupported(format!(
                    "{setting} can't be set: controller {ctrl:?} not available: {why}"
                )));
            }
            enable_in_ancestors(&root, dir, ctrl)?;
        }
        // Multi-line values (io.max for several devices) are one write per line.
        let lines: Vec<&str> = if value.contains('\n') {
            value.lines().filter(|l| !l.trim().is_empty()).collect()
        } else {
            vec![value.as_str()]
        };
        for line in lines {
            files::write(dir, key, line, &setting)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cgroups::route::tests::hybrid;
    use crate::cgroups::tests::{fake_v2, read_lines};

    fn map(kv: &[(&str, &str)]) -> HashMap<String, String> {
        kv.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn v2_writes_keys_line_by_line() {
        let t = tempfile::tempdir().unwrap();
        let (cg, dir) = fake_v2(t.path(), &["memory.high", "io.max", "cgroup.max.depth"]);
        set(
            &cg,
            &map(&[
                ("memory.high", "50000000"),
                ("io.max", "8:0 rbps=1\n8:16 wbps=2\n"),
                ("cgroup.max.depth", "3"),
            ]),
        )
        .unwrap();
        assert_eq!(read_lines(&dir, "memory.high"), ["50000000"]);
        assert_eq!(read_lines(&dir, "io.max"), ["8:0 rbps=1", "8:16 wbps=2"]);
        assert_eq!(read_lines(&dir, "cgroup.max.depth"), ["3"]);
    }

    #[test]
    fn bad_keys_and_unavailable_controllers() {
        let t = tempfile::tempdir().unwrap();
        let (cg, _) = fake_v2(t.path(), &[]);
        for (k, want) in [
            ("../memory.max", "must be a file name"),
            ("memorymax", "CONTROLLER.PARAMETER"),
            ("net_cls.classid", "controller \"net_cls\" not available"),
        ] {
            let err = set(&cg, &map(&[(k, "1")])).unwrap_err().to_string();
            assert!(err.contains(want), "{k}: {err}");
        }
        // Offered controller, missing file: the write error names key and file.
        let err = set(&cg, &map(&[("memory.nope", "1")]))
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with("linux.resources.unified[\"memory.nope\"]: write \"1\" to"),
            "{err}"
        );
    }

    #[test]
    fn hybrid_routes_to_unified_only_what_v1_did_not_take() {
        let t = tempfile::tempdir().unwrap();
        let cg = hybrid(t.path(), "hugetlb");
        let u = t.path().join("unified/parent/c");
        std::fs::write(u.join("hugetlb.2MB.max"), "").unwrap();
        set(&cg, &map(&[("hugetlb.2MB.max", "2097152")])).unwrap();
        assert_eq!(read_lines(&u, "hugetlb.2MB.max"), ["2097152"]);
        assert_eq!(
            read_lines(&t.path().join("unified"), "cgroup.subtree_control"),
            ["+hugetlb"]
        );
        let err = set(&cg, &map(&[("memory.high", "1")]))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("controller \"memory\" not available: it is mounted as cgroup v1"),
            "{err}"
        );
    }
}
