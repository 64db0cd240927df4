//! `linux.resources.blockIO`: weight, leafWeight, weightDevice and the four throttle lists —
//! v1 blkio (CFQ/BFQ weight files, blkio.throttle.*) or v2 io (io.bfq.weight or io.weight,
//! io.max).
//!
//! On v2 a v1 weight (10..1000) is written unchanged to io.bfq.weight when the BFQ scheduler
//! offers it, otherwise converted to io.weight's range (1..10000) as runc does.

use std::path::Path;

use oci_spec::runtime::{LinuxBlockIo, LinuxThrottleDevice};

use super::route::{BLKIO, Place};
use super::{Cgroup, files};
use crate::error::{Error, Result};

const S: &str = "linux.resources.blockIO";

/// Apply the block I/O settings.
pub(super) fn set(cg: &Cgroup, b: &LinuxBlockIo) -> Result<()> {
    if !is_set(b) {
        return Ok(());
    }
    match cg.place_for(BLKIO, S)? {
        Place::V1(dir) => set_v1(dir, b),
        Place::V2(dir) => set_v2(dir, b),
    }
}

fn list(l: &Option<Vec<LinuxThrottleDevice>>) -> &[LinuxThrottleDevice] {
    l.as_deref().unwrap_or(&[])
}

fn throttles(b: &LinuxBlockIo) -> [(&'static str, &'static str, &[LinuxThrottleDevice]); 4] {
    [
        (
            "throttleReadBpsDevice",
            "read_bps",
            list(b.throttle_read_bps_device()),
        ),
        (
            "throttleWriteBpsDevice",
            "write_bps",
            list(b.throttle_write_bps_device()),
        ),
        (
            "throttleReadIOPSDevice",
            "read_iops",
            list(b.throttle_read_iops_device()),
        ),
        (
            "throttleWriteIOPSDevice",
            "write_iops",
            list(b.throttle_write_iops_device()),
        ),
    ]
}

fn is_set(b: &LinuxBlockIo) -> bool {
    b.weight().is_some_and(|w| w != 0)
        || b.leaf_weight().is_some_and(|w| w != 0)
        || b.weight_device().as_ref().is_some_and(|d| !d.is_empty())
        || throttles(b).iter().any(|(_, _, l)| !l.is_empty())
}

fn device(field: &str, major: i64, minor: i64) -> Result<String> {
    if major < 0 || minor < 0 || major > u32::MAX as i64 || minor > u32::MAX as i64 {
        return Err(Error::Config(format!(
            "{S}.{field}: invalid device number {major}:{minor}"
        )));
    }
    Ok(format!("{major}:{minor}"))
}

fn set_v1(dir: &Path, b: &LinuxBlockIo) -> Result<()> {
    // CFQ's files, or BFQ's where CFQ no longer exists (Linux 5.0+).
    let (weight_file, weight_device_file) = if files::exists(dir, "blkio.weight") {
        ("blkio.weight", "blkio.weight_device")
    } else {
        ("blkio.bfq.weight", "blkio.bfq.weight_device")
    };
    let need_weight = b.weight().is_some_and(|w| w != 0)
        || b.weight_device()
            .as_ref()
            .is_some_and(|d| d.iter().any(|w| w.weight().is_some_and(|w| w != 0)));
    if need_weight && !files::exists(dir, weight_file) {
        return Err(Error::Unsupported(format!(
            "{S}.weight: neither blkio.weight nor blkio.bfq.weight exists in {}: the kernel \
             has no proportional block I/O weights (CFQ or BFQ group scheduling)",
            dir.display()
        )));
    }
    if let Some(w) = b.weight().filter(|w| *w != 0) {
        files::write(dir, weight_file, &w.to_string(), &format!("{S}.weight"))?;
    }
    if let Some(w) = b.leaf_weight().filter(|w| *w != 0) {
        files::write(
            dir,
            "blkio.leaf_weight",
            &w.to_string(),
            &format!("{S}.leafWeight"),
        )?;
    }
    for wd in b.weight_device().as_deref().unwrap_or(&[]) {
        let dev = device("weightDevice", wd.major(), wd.minor())?;
        if let Some(w) = wd.weight().filter(|w| *w != 0) {
            files::write(
                dir,
                weight_device_file,
                &format!("{dev} {w}"),
                &format!("{S}.weightDevice"),
            )?;
        }
        if let Some(w) = wd.leaf_weight().filter(|w| *w != 0) {
            files::write(
                dir,
                "blkio.leaf_weight_device",
                &format!("{dev} {w}"),
                &format!("{S}.weightDevice.leafWeight"),
            )?;
        }
    }
    for (field, kind, devs) in throttles(b) {
        for td in devs {
            let dev = device(field, td.major(), td.minor())?;
            files::write(
                dir,
                &format!("blkio.throttle.{kind}_device"),
                &format!("{dev} {}", td.rate()),
                &format!("{S}.{field}"),
            )?;
        }
    }
    Ok(())
}

/// v1 blkio weight (10..1000) to v2 io.weight (1..10000), linearly (runc's formula).
pub fn blkio_weight_to_io_weight(w: u16) -> u64 {
    if w == 0 {
        return 0;
    }
    1 + (u64::from(w).saturating_sub(10)) * 9999 / 990
}

fn set_v2(dir: &Path, b: &LinuxBlockIo) -> Result<()> {
    let bfq = files::read(dir, "io.bfq.weight").ok();
    // Kernels before 5.4 print a single number there and take no per-device weights.
    let bfq_per_device = bfq.as_deref().is_some_and(|t| t.parse::<u64>().is_err());
    if let Some(w) = b.weight().filter(|w| *w != 0) {
        if bfq.is_some() {
            files::write(dir, "io.bfq.weight", &w.to_string(), &format!("{S}.weight"))?;
        } else {
            files::write(
                dir,
                "io.weight",
                &blkio_weight_to_io_weight(w).to_string(),
                &format!("{S}.weight"),
            )?;
        }
    }
    if b.leaf_weight().is_some_and(|w| w != 0) {
        crate::log::warn(&format!(
            "{S}.leafWeight is ignored: cgroup v2 has no leaf weights"
        ));
    }
    for wd in b.weight_device().as_deref().unwrap_or(&[]) {
        let dev = device("weightDevice", wd.major(), wd.minor())?;
        let Some(w) = wd.weight().filter(|w| *w != 0) else {
            continue;
        };
        if bfq_per_device {
            files::write(
                dir,
                "io.bfq.weight",
                &format!("{dev} {w}"),
                &format!("{S}.weightDevice"),
            )?;
        } else {
            files::write(
                dir,
                "io.weight",
                &format!("{dev} {}", blkio_weight_to_io_weight(w)),
                &format!("{S}.weightDevice"),
            )?;
        }
    }
    for (field, kind, devs) in throttles(b) {
        let key = match kind {
            "read_bps" => "rbps",
            "write_bps" => "wbps",
            "read_iops" => "riops",
            _ => "wiops",
        };
        for td in devs {
            let dev = device(field, td.major(), td.minor())?;
            // v1 takes 0 as "no limit"; v2 spells that "max".
            let rate = if td.rate() == 0 {
                "max".to_string()
            } else {
                td.rate().to_string()
            };
            files::write(
                dir,
                "io.max",
                &format!("{dev} {key}={rate}"),
                &format!("{S}.{field}"),
            )?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cgroups::tests::{fake_v2, read_lines};
    use oci_spec::runtime::{
        LinuxBlockIoBuilder, LinuxThrottleDeviceBuilder, LinuxWeightDeviceBuilder,
    };

    fn throttle(major: i64, minor: i64, rate: u64) -> LinuxThrottleDevice {
        LinuxThrottleDeviceBuilder::default()
            .major(major)
            .minor(minor)
            .rate(rate)
            .build()
            .unwrap()
    }

    #[test]
    fn weight_conversion_matches_runc() {
        assert_eq!(blkio_weight_to_io_weight(10), 1);
        assert_eq!(blkio_weight_to_io_weight(500), 4950);
        assert_eq!(blkio_weight_to_io_weight(1000), 10000);
    }

    #[test]
    fn v2_io_weight_and_io_max() {
        let t = tempfile::tempdir().unwrap();
        let (cg, dir) = fake_v2(t.path(), &["io.weight", "io.max"]);
        let b = LinuxBlockIoBuilder::default()
            .weight(500u16)
            .weight_device(vec![
                LinuxWeightDeviceBuilder::default()
                    .major(8)
                    .minor(0)
                    .weight(1000u16)
                    .build()
                    .unwrap(),
            ])
            .throttle_read_bps_device(vec![throttle(8, 0, 1 << 20)])
            .throttle_write_iops_device(vec![throttle(8, 16, 0)])
            .build()
            .unwrap();
        set(&cg, &b).unwrap();
        assert_eq!(read_lines(&dir, "io.weight"), ["4950", "8:0 10000"]);
        assert_eq!(
            read_lines(&dir, "io.max"),
            ["8:0 rbps=1048576", "8:16 wiops=max"]
        );
    }

    #[test]
    fn v2_bfq_takes_the_v1_weight_unchanged() {
        let t = tempfile::tempdir().unwrap();
        let (cg, dir) = fake_v2(t.path(), &["io.weight"]);
        std::fs::write(dir.join("io.bfq.weight"), "default 100\n").unwrap();
        let b = LinuxBlockIoBuilder::default()
            .weight(300u16)
            .weight_device(vec![
                LinuxWeightDeviceBuilder::default()
                    .major(8)
                    .minor(0)
                    .weight(200u16)
                    .build()
                    .unwrap(),
            ])
            .build()
            .unwrap();
        set(&cg, &b).unwrap();
        assert_eq!(
            read_lines(&dir, "io.bfq.weight"),
            ["default 100", "300", "8:0 200"]
        );
        assert!(read_lines(&dir, "io.weight").is_empty());
    }

    #[test]
    fn bad_device_numbers_are_named() {
        let t = tempfile::tempdir().unwrap();
        let (cg, _) = fake_v2(t.path(), &["io.max"]);
        let b = LinuxBlockIoBuilder::default()
            .throttle_read_bps_device(vec![throttle(-2, 0, 1)])
            .build()
            .unwrap();
        let err = set(&cg, &b).unwrap_err().to_string();
        assert!(
            err.contains(
                "linux.resources.blockIO.throttleReadBpsDevice: invalid device number -2:0"
            ),
            "{err}"
        );
    }
}
