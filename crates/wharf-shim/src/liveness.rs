//! Which shims are alive, for a whole listing at once.
//!
//! Each shim holds, for its whole life, an open-file-description write lock on one byte of
//! a file shared by the shims of an engine (`<run>/shims.alive/<shard>`, the shard named by
//! the first two characters of the pod's id), at an offset taken from the pod's id. The
//! kernel drops the lock when the shim dies however it dies (kill -9 included), and one
//! F_OFD_GETLK on an open shard tells whether a pod's shim holds it: a listing tests a
//! thousand shims with a thousand such calls on a few open files, where a pid file and a
//! /proc/<pid>/stat per pod cost several path lookups each. (/proc/locks lists every lock
//! in one read, but reading it waits for an RCU grace period, ~10 ms.) The shards keep each
//! file's lock list, which each test walks, short.
//!
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::Path;

/// The registry's directory name in the engine's runtime directory.
pub const FILE: &str = "shims.alive";

/// The shard file of pod `pod_id` in `registry`.
fn shard(registry: &Path, pod_id: &str) -> std::path::PathBuf {
    registry.join(shard_name(pod_id))
}

/// The name of pod `pod_id`'s shard: the id's first two characters.
fn shard_name(pod_id: &str) -> String {
    let head: String = pod_id
        .chars()
        .take(2)
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect();
    if head.is_empty() {
        "_".to_string()
    } else {
        head
    }
}

fn lock_of(pod_id: &str, kind: libc::c_int) -> libc::flock {
    // SAFETY: a zeroed flock is a valid value; the fields are set below.
    let mut lock: libc::flock = unsafe { std::mem::zeroed() };
    lock.l_type = kind as libc::c_short;
    lock.l_whence = libc::SEEK_SET as libc::c_short;
    lock.l_start = slot(pod_id) as libc::off_t;
    lock.l_len = 1;
    lock
}

/// The byte pod `pod_id` locks: its first 15 hex digits (60 bits; ids are random), or a
/// hash of the id where it is not hex.
pub fn slot(pod_id: &str) -> u64 {
    let head = pod_id.get(..15).unwrap_or(pod_id);
    if head.len() == 15
        && let Ok(v) = u64::from_str_radix(head, 16)
    {
        return v;
    }
    // FNV-1a, folded to 60 bits.
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in pod_id.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h >> 4
}

/// Take pod `pod_id`'s lock in `registry` (made if missing). The returned descriptor
/// holds it: keep it open for the life of the process (it is close-on-exec, so no child
/// keeps the lock past its exec).
pub fn hold(registry: &Path, pod_id: &str) -> std::io::Result<OwnedFd> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::create_dir_all(registry)?;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .custom_flags(libc::O_CLOEXEC)
        .open(shard(registry, pod_id))?;
    let lock = lock_of(pod_id, libc::F_WRLCK);
    // SAFETY: F_OFD_SETLK with a valid flock on our own descriptor.
    if unsafe { libc::fcntl(file.as_raw_fd(), libc::F_OFD_SETLK, &lock) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(OwnedFd::from(file))
}

/// The directory of change marks beside `registry`: one per pod whose shim wrote since a
/// listing last read its records, named after the pod.
pub const CHANGED_DIR: &str = "shims.changed";

/// The directory of claimed marks beside `registry`: `<pod>.<pid>.<n>`, taken by a reader
/// that has not settled them yet (or died before it did). Apart from the unclaimed ones so
/// that what concerns one pod is found without reading a mark of every pod: the unclaimed
/// mark by its name, the claimed ones in a directory that holds only readers' work in
/// progress.
pub const CLAIMED_DIR: &str = "shims.claimed";

/// Mark pod `pod_id`'s records changed (made if missing).
pub fn mark_changed(registry: &Path, pod_id: &str) -> std::io::Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    let dir = registry.with_file_name(CHANGED_DIR);
    in_dir(&dir, || {
        std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .open(dir.join(pod_id))
            .map(drop)
    })
}

/// `op`, which makes something in `dir`; again after making `dir` where it was missing
/// (each marks directory is made on its first use).
fn in_dir(dir: &Path, op: impl Fn() -> std::io::Result<()>) -> std::io::Result<()> {
    match op() {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            std::fs::create_dir_all(dir)?;
            op()
        }
        r => r,
    }
}

/// Drop pod `pod_id`'s marks, claimed or not: its pod is gone (else they would pile up,
/// one per pod ever made). Reads no other pod's mark.
pub fn forget(registry: &Path, pod_id: &str) {
    let _ = std::fs::remove_file(registry.with_file_name(CHANGED_DIR).join(pod_id));
    for (pod, c) in read_marks(&registry.with_file_name(CLAIMED_DIR)).unwrap_or_default() {
        if pod == pod_id {
            let _ = std::fs::remove_file(c);
        }
    }
}

/// The marks in `dir`, each with the pod it is of (the name up to its first dot); none
/// where `dir` is missing.
fn read_marks(dir: &Path) -> std::io::Result<Vec<(String, std::path::PathBuf)>> {
    let mut out = Vec::new();
    match std::fs::read_dir(dir) {
        Ok(entries) => {
            for e in entries {
                let e = e?;
                let name = e.file_name();
                let pod = name.to_string_lossy();
                out.push((
                    pod.split('.').next().unwrap_or_default().to_string(),
                    e.path(),
                ));
            }
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    Ok(out)
}

/// The pods marked changed beside `registry` now, claimed marks included (their reader may
/// have died: the next one takes them over, see [`Changes::claim`]). `None` where a
/// directory cannot be read (callers then read every pod's records).
pub fn changes(registry: &Path) -> Option<Changes> {
    let mut by_pod: std::collections::HashMap<String, Vec<std::path::PathBuf>> = Default::default();
    for dir in [CHANGED_DIR, CLAIMED_DIR] {
        for (pod, path) in read_marks(&registry.with_file_name(dir)).ok()? {
            by_pod.entry(pod).or_default().push(path);
        }
    }
    Some(Changes {
        claimed_dir: registry.with_file_name(CLAIMED_DIR),
        by_pod,
    })
}

/// Whether any pod is marked changed (a claimed mark counts too: its reader has not
/// settled it yet). A directory read each; an unreadable directory counts as marked.
pub fn any_changes(registry: &Path) -> bool {
    [CHANGED_DIR, CLAIMED_DIR]
        .iter()
        .any(|d| match std::fs::read_dir(registry.with_file_name(d)) {
            Ok(mut entries) => entries.next().is_some(),
            Err(e) => e.kind() != std::io::ErrorKind::NotFound,
        })
}

/// Pods marked changed (see [`changes`]).
#[derive(Debug, Clone, Default)]
pub struct Changes {
    claimed_dir: std::path::PathBuf,
    by_pod: std::collections::HashMap<String, Vec<std::path::PathBuf>>,
}

impl Changes {
    /// Whether pod `pod_id` is marked changed.
    pub fn touches(&self, pod_id: &str) -> bool {
        self.by_pod.contains_key(pod_id)
    }

    /// Take pod `pod_id`'s marks before reading its records: each is renamed to a name of
    /// this process among the claimed marks, so that a mark the shim makes meanwhile is a
    /// new one, kept. The claimed marks go with [`Changes::release`] once what the records
    /// say is in the store; a reader that dies first leaves them, and the next reader
    /// takes them over.
    pub fn claim(&self, pod_id: &str) -> Vec<std::path::PathBuf> {
        use std::sync::atomic::{AtomicU64, Ordering};
        static N: AtomicU64 = AtomicU64::new(0);
        let mut claimed = Vec::new();
        for from in self.by_pod.get(pod_id).into_iter().flatten() {
            let to = self.claimed_dir.join(format!(
                "{pod_id}.{}.{}",
                std::process::id(),
                N.fetch_add(1, Ordering::Relaxed)
            ));
            if in_dir(&self.claimed_dir, || std::fs::rename(from, &to)).is_ok() {
                claimed.push(to);
            }
        }
        claimed
    }

    /// Drop claimed marks (the store now says what their records said).
    pub fn release(claimed: &[std::path::PathBuf]) {
        for c in claimed {
            let _ = std::fs::remove_file(c);
        }
    }
}

/// A tester of the shims of `registry` (shards are opened as pods are asked about).
/// `None` where the registry cannot be read (callers then check each shim precisely).
pub fn live(registry: &Path) -> Option<Live> {
    match std::fs::metadata(registry) {
        Ok(m) if m.is_dir() => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        _ => return None,
    }
    Some(Live {
        registry: registry.to_path_buf(),
        shards: Default::default(),
    })
}

/// The shims found alive (see [`live`]).
#[derive(Debug)]
pub struct Live {
    registry: std::path::PathBuf,
    /// Open shards by name (`None`: missing, so no shim of theirs holds a lock), looked up
    /// by name, the shard's path made only to open it.
    shards: std::cell::RefCell<std::collections::HashMap<String, Option<std::fs::File>>>,
}

impl Live {
    /// Whether pod `pod_id`'s shim holds its lock (so it is alive).
    pub fn holds(&self, pod_id: &str) -> bool {
        let mut shards = self.shards.borrow_mut();
        let file = shards
            .entry(shard_name(pod_id))
            .or_insert_with_key(|name| std::fs::File::open(self.registry.join(name)).ok());
        let Some(file) = file else {
            return false;
        };
        let mut lock = lock_of(pod_id, libc::F_WRLCK);
        // SAFETY: F_OFD_GETLK with a valid flock on our own descriptor (which holds no
        // lock: any lock it reports is another open file's).
        let r = unsafe { libc::fcntl(file.as_raw_fd(), libc::F_OFD_GETLK, &mut lock) };
        r == 0 && lock.l_type != libc::F_UNLCK as libc::c_short
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_come_from_the_id() {
        assert_eq!(slot("0123456789abcdef0123"), 0x0012_3456_789a_bcde);
        assert_ne!(slot("pod-one"), slot("pod-two"));
        assert!(slot("not hex at all, and long enough") < 1 << 60);
    }

    #[test]
    fn marks_are_claimed_released_and_kept_when_made_anew() {
        let dir = std::env::temp_dir().join(format!("wharf-marks-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let reg = dir.join(FILE);
        assert!(!changes(&reg).unwrap().touches("p1"));
        mark_changed(&reg, "p1").unwrap();
        mark_changed(&reg, "p1").unwrap();
        let c = changes(&reg).unwrap();
        assert!(c.touches("p1") && !c.touches("p2"));
        let claimed = c.claim("p1");
        assert_eq!(claimed.len(), 1);
        // A change after the claim is a new mark, which the release leaves.
        mark_changed(&reg, "p1").unwrap();
        Changes::release(&claimed);
        assert!(changes(&reg).unwrap().touches("p1"));
        let c = changes(&reg).unwrap();
        Changes::release(&c.claim("p1"));
        assert!(!changes(&reg).unwrap().touches("p1"));
        // A claim its reader left behind still marks the pod.
        mark_changed(&reg, "p2").unwrap();
        let left = changes(&reg).unwrap().claim("p2");
        assert!(changes(&reg).unwrap().touches("p2"));
        Changes::release(&left);
        // A pod's removal drops its marks, claimed ones too.
        mark_changed(&reg, "p3").unwrap();
        mark_changed(&reg, "p4").unwrap();
        let _held = changes(&reg).unwrap().claim("p3");
        mark_changed(&reg, "p3").unwrap();
        forget(&reg, "p3");
        let c = changes(&reg).unwrap();
        assert!(!c.touches("p3") && c.touches("p4"));
        // A claim moves the marks out of the unclaimed ones, which hold one name per pod.
        let held = changes(&reg).unwrap().claim("p4");
        assert_eq!(held.len(), 1);
        assert!(
            held.iter()
                .all(|c| c.parent() == Some(&*reg.with_file_name(CLAIMED_DIR)))
        );
        assert!(!reg.with_file_name(CHANGED_DIR).join("p4").exists());
        assert!(changes(&reg).unwrap().touches("p4"));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// A held lock shows; once its holder is gone (a child that took it and exited), it
    /// does not.
    #[test]
    fn a_lock_shows_while_its_holder_lives() {
        let dir = std::env::temp_dir().join(format!("wharf-liveness-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let reg = dir.join(FILE);
        let pod = "fedcba9876543210fedcba9876543210";
        let fd = hold(&reg, pod).unwrap();
        assert!(live(&reg).unwrap().holds(pod));
        assert!(!live(&reg).unwrap().holds("0000000000000000"));
        // A second holder of the same pod is refused while the first lives.
        assert!(hold(&reg, pod).is_err());
        drop(fd);
        assert!(!live(&reg).unwrap().holds(pod));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
