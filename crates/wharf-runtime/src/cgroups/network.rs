//! `linux.resources.network`: classID (net_cls.classid) and priorities
//! (net_prio.ifpriomap). Both controllers exist only in cgroup v1.

use oci_spec::runtime::LinuxNetwork;

use super::route::{NET_CLS, NET_PRIO};
use super::{Cgroup, files};
use crate::error::{Error, Result};

const S: &str = "linux.resources.network";

/// Apply the network settings (0 / no priorities leave things as they are).
pub(super) fn set(cg: &Cgroup, n: &LinuxNetwork) -> Result<()> {
    if let Some(id) = n.class_id().filter(|id| *id != 0) {
        let setting = format!("{S}.classID");
        let place = cg.place_for(NET_CLS, &setting)?;
        files::write(place.dir(), "net_cls.classid", &id.to_string(), &setting)?;
    }
    let prios = n.priorities().as_deref().unwrap_or(&[]);
    if !prios.is_empty() {
        let setting = format!("{S}.priorities");
        let place = cg.place_for(NET_PRIO, &setting)?;
        for prio in prios {
            let name = prio.name();
            if name.is_empty() || name.len() > 15 || name.contains(['/', ' ', '\n']) {
                return Err(Error::Config(format!(
                    "{setting}: invalid interface name {name:?}"
                )));
            }
            files::write(
                place.dir(),
                "net_prio.ifpriomap",
                &format!("{name} {}", prio.priority()),
                &setting,
            )?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cgroups::UNIFIED;
    use crate::cgroups::tests::read_lines;
    use oci_spec::runtime::{LinuxInterfacePriorityBuilder, LinuxNetworkBuilder};
    use std::collections::BTreeMap;

    #[test]
    fn v1_classid_and_ifpriomap() {
        let t = tempfile::tempdir().unwrap();
        let cls = t.path().join("net_cls/c");
        let prio = t.path().join("net_prio/c");
        std::fs::create_dir_all(&cls).unwrap();
        std::fs::create_dir_all(&prio).unwrap();
        std::fs::write(cls.join("net_cls.classid"), "").unwrap();
        std::fs::write(prio.join("net_prio.ifpriomap"), "").unwrap();
        let cg = Cgroup {
            paths: BTreeMap::from([
                ("net_cls".to_string(), cls.clone()),
                ("net_prio".to_string(), prio.clone()),
            ]),
            v2: false,
            unified_mount: None,
        };
        let n = LinuxNetworkBuilder::default()
            .class_id(0x100001u32)
            .priorities(vec![
                LinuxInterfacePriorityBuilder::default()
                    .name("eth0")
                    .priority(5u32)
                    .build()
                    .unwrap(),
            ])
            .build()
            .unwrap();
        set(&cg, &n).unwrap();
        assert_eq!(read_lines(&cls, "net_cls.classid"), ["1048577"]);
        assert_eq!(read_lines(&prio, "net_prio.ifpriomap"), ["eth0 5"]);
    }

    #[test]
    fn missing_v1_controller_is_named() {
        let t = tempfile::tempdir().unwrap();
        let cg = Cgroup {
            paths: BTreeMap::from([(UNIFIED.to_string(), t.path().to_path_buf())]),
            v2: false,
            unified_mount: Some(t.path().to_path_buf()),
        };
        let n = LinuxNetworkBuilder::default()
            .class_id(7u32)
            .build()
            .unwrap();
        let err = set(&cg, &n).unwrap_err().to_string();
        assert!(
            err.starts_with(
                "linux.resources.network.classID: the net_cls cgroup v1 controller is not mounted"
            ),
            "{err}"
        );
    }
}
