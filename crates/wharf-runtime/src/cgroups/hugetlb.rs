//! `linux.resources.hugepageLimits`: `hugetlb.<size>.limit_in_bytes` (v1) or `hugetlb.<size>.max`
//! (v2), plus the reservation limit (`.rsvd.`) where the kernel has it, as runc sets both.

use oci_spec::runtime::LinuxHugepageLimit;

use super::route::{HUGETLB, Place};
use super::{Cgroup, files};
use crate::error::{Error, Result};

const S: &str = "linux.resources.hugepageLimits";

/// Apply the hugepage limits.
pub(super) fn set(cg: &Cgroup, limits: &[LinuxHugepageLimit]) -> Result<()> {
    if limits.is_empty() {
        return Ok(());
    }
    let place = cg.place_for(HUGETLB, S)?;
    let (dir, suffix, unlimited) = match place {
        Place::V1(d) => (d, "limit_in_bytes", "-1"),
        Place::V2(d) => (d, "max", "max"),
    };
    for l in limits {
        let size = l.page_size();
        if size.is_empty() || !size.bytes().all(|b| b.is_ascii_alphanumeric()) {
            return Err(Error::Config(format!("{S}: invalid page size {size:?}")));
        }
        let file = format!("hugetlb.{size}.{suffix}");
        if !files::exists(dir, &file) {
            return Err(Error::Config(format!(
                "{S}: page size {size:?} is not supported by this host (it has: {})",
                page_sizes().join(", ")
            )));
        }
        let value = if l.limit() < 0 {
            unlimited.to_string()
        } else {
            l.limit().to_string()
        };
        let setting = format!("{S}[{size}]");
        files::write(dir, &file, &value, &setting)?;
        let rsvd = format!("hugetlb.{size}.rsvd.{suffix}");
        if files::exists(dir, &rsvd) {
            files::write(dir, &rsvd, &value, &setting)?;
        }
    }
    Ok(())
}

/// The host's huge page sizes in cgroup file notation ("2MB", "1GB"), from
/// /sys/kernel/mm/hugepages.
pub fn page_sizes() -> Vec<String> {
    let mut sizes: Vec<(u64, String)> = std::fs::read_dir("/sys/kernel/mm/hugepages")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().into_string().ok()?;
            let kb: u64 = name
                .strip_prefix("hugepages-")?
                .strip_suffix("kB")?
                .parse()
                .ok()?;
            Some((kb, size_name(kb)))
        })
        .collect();
    sizes.sort();
    sizes.into_iter().map(|(_, n)| n).collect()
}

/// 2048 (kB) -> "2MB", as the kernel names hugetlb files.
fn size_name(kb: u64) -> String {
    if kb >= 1 << 20 && kb.is_multiple_of(1 << 20) {
        format!("{}GB", kb >> 20)
    } else if kb >= 1 << 10 && kb.is_multiple_of(1 << 10) {
        format!("{}MB", kb >> 10)
    } else {
        format!("{kb}KB")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cgroups::tests::{fake_v2, read_lines};
    use oci_spec::runtime::LinuxHugepageLimitBuilder;

    fn limit(size: &str, v: i64) -> LinuxHugepageLimit {
        LinuxHugepageLimitBuilder::default()
            .page_size(size)
            .limit(v)
            .build()
            .unwrap()
    }

    #[test]
    fn names_sizes_like_the_kernel() {
        assert_eq!(size_name(2048), "2MB");
        assert_eq!(size_name(1 << 20), "1GB");
        assert_eq!(size_name(64), "64KB");
    }

    #[test]
    fn v2_max_and_rsvd_and_unknown_sizes() {
        let t = tempfile::tempdir().unwrap();
        let (cg, dir) = fake_v2(
            t.path(),
            &["hugetlb.2MB.max", "hugetlb.2MB.rsvd.max", "hugetlb.1GB.max"],
        );
        set(&cg, &[limit("2MB", 4 << 20), limit("1GB", -1)]).unwrap();
        assert_eq!(read_lines(&dir, "hugetlb.2MB.max"), ["4194304"]);
        assert_eq!(read_lines(&dir, "hugetlb.2MB.rsvd.max"), ["4194304"]);
        assert_eq!(read_lines(&dir, "hugetlb.1GB.max"), ["max"]);
        let err = set(&cg, &[limit("3MB", 1)]).unwrap_err().to_string();
        assert!(err.contains("page size \"3MB\" is not supported"), "{err}");
        let err = set(&cg, &[limit("../x", 1)]).unwrap_err().to_string();
        assert!(err.contains("invalid page size"), "{err}");
    }
}
