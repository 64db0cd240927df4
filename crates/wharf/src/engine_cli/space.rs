//! `wharf system df` and `system prune`: docker's tables of what takes disk space and what
//! can go, and the removal of it.

use std::collections::HashSet;
use std::io::Write;

use anyhow::Result;
use serde_json::json;
use wharf_engine::model::ContainerState;
use wharf_engine::{ContainerFilter, Engine};

use crate::format::{self, Format};

fn percent(part: u64, whole: u64) -> String {
    format!("{}%", (part * 100).checked_div(whole).unwrap_or(0))
}

/// `wharf system df`.
pub fn df(engine: &Engine, format_arg: &str) -> Result<i32> {
    let containers = engine.list_containers(&ContainerFilter {
        all: true,
        ..Default::default()
    })?;
    let used_images: HashSet<String> = containers.iter().map(|c| c.row.image_id.clone()).collect();
    let mut seen = HashSet::new();
    let (mut n_img, mut active_img, mut img_size, mut img_free) = (0, 0, 0u64, 0u64);
    for r in engine.images().list()? {
        if !seen.insert(r.id.clone()) {
            continue;
        }
        n_img += 1;
        img_size += r.size;
        if used_images.contains(&r.id) {
            active_img += 1;
        } else {
            img_free += r.size;
        }
    }
    let (mut n_ctr, mut active_ctr, mut ctr_size, mut ctr_free) = (0, 0, 0u64, 0u64);
    for c in &containers {
        n_ctr += 1;
        let size = engine.writable_size(&c.row.id).unwrap_or(0);
        ctr_size += size;
        if matches!(
            c.row.state,
            ContainerState::Running | ContainerState::Paused
        ) {
            active_ctr += 1;
        } else {
            ctr_free += size;
        }
    }
    let (mut n_vol, mut active_vol, mut vol_size, mut vol_free) = (0, 0, 0u64, 0u64);
    let in_use = engine.volumes_in_use()?;
    for v in engine.list_volumes()? {
        n_vol += 1;
        let size = wharf_engine::named_volumes::volume_size(&v);
        vol_size += size;
        if !in_use.contains_key(&v.name) {
            vol_free += size;
        } else {
            active_vol += 1;
        }
    }
    let row = |t: &str, total: usize, active: usize, size: u64, free: u64| {
        json!({
            "Type": t, "TotalCount": total.to_string(), "Active": active.to_string(),
            "Size": format::size(size, false, 3),
            "Reclaimable": format!("{} ({})", format::size(free, false, 3), percent(free, size)),
        })
    };
    let rows = vec![
        row("Images", n_img, active_img, img_size, img_free),
        row("Containers", n_ctr, active_ctr, ctr_size, ctr_free),
        row("Local Volumes", n_vol, active_vol, vol_size, vol_free),
        {
            let cache = engine.build_cache();
            let size: u64 = cache.iter().map(|c| c.size).sum();
            row("Build Cache", cache.len(), 0, size, size)
        },
    ];
    let mut out = std::io::stdout().lock();
    match Format::parse(format_arg)? {
        Format::Table => {
            let mut t = String::from("TYPE\tTOTAL\tACTIVE\tSIZE\tRECLAIMABLE\n");
            for r in &rows {
                let cell = |k: &str| r[k].as_str().unwrap_or_default().to_string();
                t.push_str(&format!(
                    "{}\t{}\t{}\t{}\t{}\n",
                    cell("Type"),
                    cell("TotalCount"),
                    cell("Active"),
                    cell("Size"),
                    cell("Reclaimable")
                ));
            }
            write!(out, "{}", format::align(&t))?;
        }
        fmt => {
            let headers = json!({
                "Type": "TYPE", "TotalCount": "TOTAL", "Active": "ACTIVE", "Size": "SIZE",
                "Reclaimable": "RECLAIMABLE",
            });
            format::print_rows(&mut out, &fmt, &headers, &rows)?;
        }
    }
    Ok(0)
}

/// `wharf system prune`.
pub fn prune(engine: &Engine, all: bool, volumes: bool, force: bool) -> Result<i32> {
    if !force {
        let mut what = String::from(
            "all stopped containers\n  - all networks not used by at least one container\n  - ",
        );
        what.push_str(if all {
            "all images without at least one container associated to them"
        } else {
            "all dangling images"
        });
        if volumes {
            what.push_str("\n  - all anonymous volumes not used by at least one container");
        }
        if !super::confirm(&format!(":\n  - {what}\n"))? {
            return Ok(0);
        }
    }
    let mut out = std::io::stdout().lock();
    let mut reclaimed = remove_stopped(engine, &mut out)?;
    write_deleted(&mut out, "Networks", &engine.prune_networks()?)?;
    if volumes {
        let vols = engine.prune_volumes(false)?;
        reclaimed += vols.iter().map(|(_, size)| size).sum::<u64>();
        let names: Vec<String> = vols.into_iter().map(|(n, _)| n).collect();
        write_deleted(&mut out, "Volumes", &names)?;
    }
    let (images, stats) = engine.images().prune(all)?;
    let images: Vec<String> = images.iter().map(|id| format!("deleted: {id}")).collect();
    write_deleted(&mut out, "Images", &images)?;
    reclaimed += stats.blob_bytes;
    if all {
        // `-a` takes the build cache too, as docker's does.
        let cache = engine.prune_build_cache()?;
        write_deleted(&mut out, "build cache objects", &cache.images)?;
        reclaimed += cache.bytes;
    }
    write_reclaimed(&mut out, reclaimed)?;
    Ok(0)
}

/// Remove every stopped container, printing docker's "Deleted Containers:" list; returns
/// the bytes their writable layers held.
fn remove_stopped(engine: &Engine, out: &mut impl Write) -> Result<u64> {
    let mut reclaimed = 0u64;
    let stopped: Vec<_> = engine
        .list_containers(&ContainerFilter {
            all: true,
            ..Default::default()
        })?
        .into_iter()
        .filter(|c| {
            matches!(
                c.row.state,
                ContainerState::Exited | ContainerState::Created
            )
        })
        .collect();
    let mut removed: Vec<String> = Vec::new();
    for c in stopped {
        let size = engine.writable_size(&c.row.id).unwrap_or(0);
        if engine.remove(&c.row.id, false).is_ok() {
            reclaimed += size;
            removed.push(c.row.id);
        }
    }
    write_deleted(out, "Containers", &removed)?;
    Ok(reclaimed)
}

/// docker's list of what a prune removed (`Deleted Volumes:`, one a line, a blank line
/// after); nothing when nothing was.
pub(super) fn write_deleted(out: &mut impl Write, what: &str, items: &[String]) -> Result<()> {
    if !items.is_empty() {
        writeln!(out, "Deleted {what}:")?;
        for i in items {
            writeln!(out, "{i}")?;
        }
        writeln!(out)?;
    }
    Ok(())
}

/// docker's last line of a prune.
pub(super) fn write_reclaimed(out: &mut impl Write, bytes: u64) -> Result<()> {
    writeln!(
        out,
        "Total reclaimed space: {}",
        format::size(bytes, false, 3)
    )?;
    Ok(())
}

/// `wharf container prune`.
pub fn prune_containers(engine: &Engine, force: bool) -> Result<i32> {
    if !force && !super::confirm("all stopped containers")? {
        return Ok(0);
    }
    let mut out = std::io::stdout().lock();
    let reclaimed = remove_stopped(engine, &mut out)?;
    write_reclaimed(&mut out, reclaimed)?;
    Ok(0)
}

/// `wharf info`: docker's `info`, as text or through a template over docker's keys.
pub fn info(engine: &Engine, root: &std::path::Path, format_arg: Option<&str>) -> Result<i32> {
    let containers = engine.list_containers(&ContainerFilter {
        all: true,
        ..Default::default()
    })?;
    let count = |s: ContainerState| containers.iter().filter(|c| c.row.state == s).count();
    let running = count(ContainerState::Running);
    let paused = count(ContainerState::Paused);
    let images: HashSet<String> = engine.images().list()?.into_iter().map(|r| r.id).collect();
    let cgroups = wharf_engine::host::cgroups(engine.options().cgroup_driver);
    let read = |p: &str| std::fs::read_to_string(p).unwrap_or_default();
    let os = read("/etc/os-release")
        .lines()
        .find_map(|l| l.strip_prefix("PRETTY_NAME="))
        .map(|v| v.trim_matches('"').to_string())
        .unwrap_or_else(|| "Linux".into());
    let uname = rustix::system::uname();
    let mem_kb: u64 = read("/proc/meminfo")
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0);
    let doc = json!({
        "Containers": containers.len(),
        "ContainersRunning": running,
        "ContainersPaused": paused,
        "ContainersStopped": containers.len() - running - paused,
        "Images": images.len(),
        "ServerVersion": env!("CARGO_PKG_VERSION"),
        "Driver": "overlay",
        "LoggingDriver": "json-file",
        "CgroupDriver": cgroups.driver.as_str(),
        "CgroupVersion": cgroups.version.as_str(),
        "KernelVersion": uname.release().to_string_lossy(),
        "OperatingSystem": os,
        "OSType": "linux",
        "Architecture": uname.machine().to_string_lossy(),
        "NCPU": std::thread::available_parallelism().map_or(1, |n| n.get()),
        "MemTotal": mem_kb * 1024,
        "Name": uname.nodename().to_string_lossy(),
        "DockerRootDir": root,
    });
    let mut out = std::io::stdout().lock();
    match format_arg {
        Some(f) => {
            drop(out);
            format::print_documents(&Format::parse(f)?, std::slice::from_ref(&doc))?;
        }
        None => {
            let v = |k: &str| match &doc[k] {
                serde_json::Value::String(s) => s.clone(),
                other => other.to_string(),
            };
            writeln!(out, "Server:")?;
            writeln!(out, " Containers: {}", v("Containers"))?;
            writeln!(out, "  Running: {}", v("ContainersRunning"))?;
            writeln!(out, "  Paused: {}", v("ContainersPaused"))?;
            writeln!(out, "  Stopped: {}", v("ContainersStopped"))?;
            writeln!(out, " Images: {}", v("Images"))?;
            writeln!(out, " Server Version: wharf {}", v("ServerVersion"))?;
            writeln!(out, " Storage Driver: {}", v("Driver"))?;
            writeln!(out, " Logging Driver: {}", v("LoggingDriver"))?;
            writeln!(out, " Cgroup Driver: {}", v("CgroupDriver"))?;
            writeln!(out, " Cgroup Version: {}", v("CgroupVersion"))?;
            writeln!(out, " Kernel Version: {}", v("KernelVersion"))?;
            writeln!(out, " Operating System: {}", v("OperatingSystem"))?;
            writeln!(out, " OSType: {}", v("OSType"))?;
            writeln!(out, " Architecture: {}", v("Architecture"))?;
            writeln!(out, " CPUs: {}", v("NCPU"))?;
            writeln!(
                out,
                " Total Memory: {}",
                format::size(mem_kb * 1024, true, 4)
            )?;
            writeln!(out, " Name: {}", v("Name"))?;
            writeln!(out, " Root Dir: {}", v("DockerRootDir"))?;
        }
    }
    Ok(0)
}
