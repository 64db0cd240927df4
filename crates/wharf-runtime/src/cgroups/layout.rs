//! Which cgroup hierarchies this host mounts, and where.

use std::collections::{BTreeMap, HashSet};
use std::path::{Path, PathBuf};

use super::UNIFIED;
use crate::error::{Context, Error, Result};

/// The host's cgroup hierarchies.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Layout {
    /// v1 hierarchy key (controller name, or `name=...` for named hierarchies) to its mount.
    pub v1: BTreeMap<String, PathBuf>,
    /// The cgroup2 mount, if any (the only hierarchy on a pure v2 host; "unified" on hybrid).
    pub unified: Option<PathBuf>,
}

impl Layout {
    /// Pure cgroup v2: controllers live in the unified hierarchy.
    pub fn is_v2(&self) -> bool {
        self.v1.is_empty() && self.unified.is_some()
    }

    /// Hybrid: v1 controllers plus a cgroup2 mount.
    pub fn is_hybrid(&self) -> bool {
        !self.v1.is_empty() && self.unified.is_some()
    }

    /// Every hierarchy a container gets a directory in: (key, mount point).
    pub fn hierarchies(&self) -> Vec<(String, PathBuf)> {
        let mut out: Vec<(String, PathBuf)> = self
            .v1
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        if let Some(u) = &self.unified {
            out.push((UNIFIED.to_string(), u.clone()));
        }
        out
    }
}

/// Read the cgroup mounts from /proc/self/mountinfo, once per mount namespace a process is
/// in: the whole table is the kernel's to generate (every pod's mounts are in it: 4 ms at
/// 300 pods), and the engine, the shims and the runtime asked for it several times per
/// container. A process that moves to another mount namespace (a container's init) reads
/// it again there.
pub fn detect() -> Result<Layout> {
    use std::sync::Mutex;
    static CACHE: Mutex<Option<(u64, Layout)>> = Mutex::new(None);
    let ns = std::fs::metadata("/proc/self/ns/mnt")
        .map(|m| std::os::unix::fs::MetadataExt::ino(&m))
        .ok();
    // try_lock, never lock: a child forked while another thread held the lock must not
    // wait for a thread it does not have (it reads the table instead).
    if let Some(ns) = ns
        && let Ok(cache) = CACHE.try_lock()
        && let Some((cached_ns, layout)) = cache.as_ref()
        && *cached_ns == ns
    {
        return Ok(layout.clone());
    }
    let layout = match std::fs::read_to_string("/proc/self/cgroup")
        .ok()
        .and_then(|own| standard_layout(&own))
    {
        Some(layout) => layout,
        None => {
            let info = std::fs::read_to_string("/proc/self/mountinfo")
                .ctx(|| "read /proc/self/mountinfo".into())?;
            parse_mountinfo(&info, &known_controllers())
        }
    };
    if let Some(ns) = ns
        && let Ok(mut cache) = CACHE.try_lock()
    {
        *cache = Some((ns, layout.clone()));
    }
    Ok(layout)
}

/// Where every distribution mounts the hierarchies: cgroup2 at /sys/fs/cgroup (pure v2),
/// or each v1 hierarchy at /sys/fs/cgroup/<its controllers> (`name=` dropped) and cgroup2
/// at /sys/fs/cgroup/unified (hybrid). Each hierarchy `own` (the text of /proc/self/cgroup)
/// lists is confirmed with one statfs and one stat (a cgroup filesystem's root, inode 1);
/// `None` when any is elsewhere, and the caller reads mountinfo. This keeps the kernel from
/// generating the whole mount table (14 ms with 1000 pods) on every container start.
fn standard_layout(own: &str) -> Option<Layout> {
    const ROOT: &str = "/sys/fs/cgroup";
    const CGROUP_SUPER_MAGIC: u64 = 0x27e0eb;
    const CGROUP2_SUPER_MAGIC: u64 = 0x6367_7270;
    let root_of = |path: &Path, magic: u64| {
        rustix::fs::statfs(path).is_ok_and(|s| s.f_type as u64 == magic)
            && rustix::fs::stat(path).is_ok_and(|s| s.st_ino == 1)
    };
    let mut layout = Layout {
        v1: BTreeMap::new(),
        unified: None,
    };
    if root_of(Path::new(ROOT), CGROUP2_SUPER_MAGIC) {
        layout.unified = Some(PathBuf::from(ROOT));
        return own.lines().all(|l| l.starts_with("0::")).then_some(layout);
    }
    for line in own.lines() {
        let mut parts = line.splitn(3, ':');
        let (id, ctrls) = (parts.next()?, parts.next()?);
        if id == "0" {
            let unified = Path::new(ROOT).join("unified");
            if !root_of(&unified, CGROUP2_SUPER_MAGIC) {
                return None;
            }
            layout.unified = Some(unified);
            continue;
        }
        if ctrls.is_empty() {
            return None;
        }
        let dir = Path::new(ROOT).join(ctrls.strip_prefix("name=").unwrap_or(ctrls));
        if !root_of(&dir, CGROUP_SUPER_MAGIC) {
            return None;
        }
        for c in ctrls.split(',') {
            layout.v1.insert(c.to_string(), dir.clone());
        }
    }
    Some(layout)
}

fn known_controllers() -> HashSet<String> {
    std::fs::read_to_string("/proc/cgroups")
        .unwrap_or_default()
        .lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| l.split_whitespace().next().map(str::to_string))
        .collect()
}

fn parse_mountinfo(info: &str, known: &HashSet<String>) -> Layout {
    let mut layout = Layout {
        v1: BTreeMap::new(),
        unified: None,
    };
    for line in info.lines() {
        let Some((pre, post)) = line.split_once(" - ") else {
            continue;
        };
        let pre: Vec<&str> = pre.split(' ').collect();
        let post: Vec<&str> = post.split(' ').collect();
        if pre.len() < 5 || post.len() < 3 || pre[3] != "/" {
            continue;
        }
        let mountpoint = wharf_sys::fs::mountinfo_path(pre[4]);
        match post[0] {
            "cgroup2" => {
                layout.unified.get_or_insert(mountpoint);
            }
            "cgroup" => {
                for opt in post[2].split(',') {
                    if known.contains(opt) || opt.starts_with("name=") {
                        layout
                            .v1
                            .entry(opt.to_string())
                            .or_insert(mountpoint.clone());
                    }
                }
            }
            _ => {}
        }
    }
    layout
}

/// The calling process's cgroup in each hierarchy, from /proc/self/cgroup.
pub fn own_cgroups() -> Result<BTreeMap<String, PathBuf>> {
    let text =
        std::fs::read_to_string("/proc/self/cgroup").ctx(|| "read /proc/self/cgroup".into())?;
    parse_proc_cgroup(&text)
}

fn parse_proc_cgroup(text: &str) -> Result<BTreeMap<String, PathBuf>> {
    let mut out = BTreeMap::new();
    for line in text.lines() {
        let mut parts = line.splitn(3, ':');
        let (_, ctrls, path) = match (parts.next(), parts.next(), parts.next()) {
            (Some(a), Some(b), Some(c)) => (a, b, c),
            _ => {
                return Err(Error::Other(format!(
                    "malformed /proc/self/cgroup line {line:?}"
                )));
            }
        };
        if ctrls.is_empty() {
            out.insert(UNIFIED.to_string(), PathBuf::from(path));
        } else {
            for c in ctrls.split(',') {
                out.insert(c.to_string(), PathBuf::from(path));
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    const HYBRID: &str = "\
30 25 0:26 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
31 30 0:27 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
32 30 0:28 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
33 30 0:29 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,name=systemd
34 30 0:30 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
35 30 0:28 /sub /mnt/bound rw,relatime - cgroup cgroup rw,memory
";

    #[test]
    fn hybrid_layout_is_recognised() {
        let known: HashSet<String> = ["cpu", "memory"].iter().map(|s| s.to_string()).collect();
        let l = parse_mountinfo(HYBRID, &known);
        assert!(l.is_hybrid());
        assert_eq!(l.v1["memory"], PathBuf::from("/sys/fs/cgroup/memory"));
        assert_eq!(
            l.v1["name=systemd"],
            PathBuf::from("/sys/fs/cgroup/systemd")
        );
        assert_eq!(l.unified, Some(PathBuf::from("/sys/fs/cgroup/unified")));
        assert_eq!(l.hierarchies().len(), 4);
    }

    /// The fast path agrees with the mount table on this host (whatever its layout).
    #[test]
    fn the_standard_layout_matches_mountinfo_where_it_applies() {
        let own = std::fs::read_to_string("/proc/self/cgroup").unwrap();
        let info = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
        let full = parse_mountinfo(&info, &known_controllers());
        if let Some(fast) = standard_layout(&own) {
            assert_eq!(fast, full);
        }
        // A hierarchy where none is mounted sends it to mountinfo.
        assert_eq!(standard_layout(&format!("{own}12:nosuch:/\n")), None);
    }

    #[test]
    fn pure_v2_layout() {
        let l = parse_mountinfo(
            "30 25 0:26 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw,nsdelegate\n",
            &HashSet::new(),
        );
        assert!(l.is_v2());
    }

    #[test]
    fn proc_cgroup_lines() {
        let m = parse_proc_cgroup("4:memory:/a/b\n1:cpu,cpuacct:/c\n0::/u\n").unwrap();
        assert_eq!(m["memory"], PathBuf::from("/a/b"));
        assert_eq!(m["cpuacct"], PathBuf::from("/c"));
        assert_eq!(m[UNIFIED], PathBuf::from("/u"));
    }
}
