//! `linux.resources.rdma`: rdma.max lines `"<device> hca_handle=N hca_object=M"` (the same file
//! on v1 and v2).

use std::collections::HashMap;

use oci_spec::runtime::LinuxRdma;

use super::route::RDMA;
use super::{Cgroup, files};
use crate::error::{Error, Result};

const S: &str = "linux.resources.rdma";

/// Apply the RDMA limits, device by device (sorted, so the order of writes is stable).
pub(super) fn set(cg: &Cgroup, rdma: &HashMap<String, LinuxRdma>) -> Result<()> {
    if rdma.is_empty() {
        return Ok(());
    }
    let place = cg.place_for(RDMA, S)?;
    let mut devices: Vec<_> = rdma.iter().collect();
    devices.sort_by(|a, b| a.0.cmp(b.0));
    for (dev, l) in devices {
        let setting = format!("{S}[{dev}]");
        if dev.is_empty() || dev.contains(char::is_whitespace) {
            return Err(Error::Config(format!("{setting}: invalid device name")));
        }
        let mut line = dev.clone();
        if let Some(h) = l.hca_handles() {
            line.push_str(&format!(" hca_handle={h}"));
        }
        if let Some(o) = l.hca_objects() {
            line.push_str(&format!(" hca_object={o}"));
        }
        if line == *dev {
            continue;
        }
        files::write(place.dir(), "rdma.max", &line, &setting)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cgroups::tests::{fake_v2, read_lines};
    use oci_spec::runtime::LinuxRdmaBuilder;

    #[test]
    fn v2_rdma_max_lines() {
        let t = tempfile::tempdir().unwrap();
        let (cg, dir) = fake_v2(t.path(), &["rdma.max"]);
        let m = HashMap::from([
            (
                "mlx5_1".to_string(),
                LinuxRdmaBuilder::default()
                    .hca_objects(1000u32)
                    .build()
                    .unwrap(),
            ),
            (
                "mlx5_0".to_string(),
                LinuxRdmaBuilder::default()
                    .hca_handles(2u32)
                    .hca_objects(2000u32)
                    .build()
                    .unwrap(),
            ),
        ]);
        set(&cg, &m).unwrap();
        assert_eq!(
            read_lines(&dir, "rdma.max"),
            [
                "mlx5_0 hca_handle=2 hca_object=2000",
                "mlx5_1 hca_object=1000"
            ]
        );
    }
}
