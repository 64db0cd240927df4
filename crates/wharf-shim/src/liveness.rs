//! Which shims are alive, for the whole node at once.
//!
//! Each shim holds, for its whole life, an open-file-description write lock on one byte of
//! a file shared by all shims of an engine (`<run>/shims.alive`), at an offset taken from
//! its pod's id. The kernel drops the lock when the shim dies however it dies (kill -9
//! included), and lists every lock in /proc/locks: one read tells a listing which of a
//! thousand shims live, where a pid file and a /proc/<pid>/stat per pod cost a thousand
//! path lookups each.
//!
//! Beside it, each shim marks its pod changed (an empty file named after the pod in
//! `<run>/shims.changed/`) after every status, exit or pod record it writes. A listing
//! reads that directory once and reads the records of the marked pods only: a live shim
//! that marked nothing has nothing new to tell, and the store is current for its pod.
//!
//! A held lock says the shim lives. A lock not held says nothing definite (a shim started
//! by an older engine holds none): readers then make the precise check through the pod's
//! state directory ([`crate::records::StateDir::shim_alive`]).

use std::collections::HashSet;
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::Path;

/// The registry's file name in the engine's runtime directory.
pub const FILE: &str = "shims.alive";

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

/// Take pod `pod_id`'s lock in `registry` (created if missing). The returned descriptor
/// holds it: keep it open for the life of the process (it is close-on-exec, so no child
/// keeps the lock past its exec).
pub fn hold(registry: &Path, pod_id: &str) -> std::io::Result<OwnedFd> {
    use std::os::unix::fs::OpenOptionsExt;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .custom_flags(libc::O_CLOEXEC)
        .open(registry)?;
    // SAFETY: a zeroed flock is a valid value; the fields are set below.
    let mut lock: libc::flock = unsafe { std::mem::zeroed() };
    lock.l_type = libc::F_WRLCK as libc::c_short;
    lock.l_whence = libc::SEEK_SET as libc::c_short;
    lock.l_start = slot(pod_id) as libc::off_t;
    lock.l_len = 1;
    // SAFETY: F_OFD_SETLK with a valid flock on our own descriptor.
    if unsafe { libc::fcntl(file.as_raw_fd(), libc::F_OFD_SETLK, &lock) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(OwnedFd::from(file))
}

/// The directory of change marks beside `registry`.
pub const CHANGED_DIR: &str = "shims.changed";

/// Mark pod `pod_id`'s records changed (made if missing).
pub fn mark_changed(registry: &Path, pod_id: &str) -> std::io::Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    let dir = registry.with_file_name(CHANGED_DIR);
    let open = || {
        std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .open(dir.join(pod_id))
    };
    match open() {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            std::fs::create_dir_all(&dir)?;
            open().map(drop)
        }
        r => r.map(drop),
    }
}

/// Drop pod `pod_id`'s marks, claimed or not: its pod is gone (else they would pile up,
/// one per pod ever made).
pub fn forget(registry: &Path, pod_id: &str) {
    let Ok(entries) = std::fs::read_dir(registry.with_file_name(CHANGED_DIR)) else {
        return;
    };
    for e in entries.flatten() {
        if e.file_name().to_string_lossy().split('.').next() == Some(pod_id) {
            let _ = std::fs::remove_file(e.path());
        }
    }
}

/// The pods marked changed beside `registry` now: the mark of pod P is named P, and
/// P.<pid>.<n> once a reader claimed it (see [`Changes::claim`]). `None` where the
/// directory cannot be read (callers then read every pod's records).
pub fn changes(registry: &Path) -> Option<Changes> {
    let dir = registry.with_file_name(CHANGED_DIR);
    let mut by_pod: std::collections::HashMap<String, Vec<String>> = Default::default();
    match std::fs::read_dir(&dir) {
        Ok(entries) => {
            for e in entries {
                let name = e.ok()?.file_name().to_string_lossy().into_owned();
                let pod = name.split('.').next().unwrap_or_default().to_string();
                by_pod.entry(pod).or_default().push(name);
            }
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(_) => return None,
    }
    Some(Changes { dir, by_pod })
}

/// Pods marked changed (see [`changes`]).
#[derive(Debug, Clone, Default)]
pub struct Changes {
    dir: std::path::PathBuf,
    by_pod: std::collections::HashMap<String, Vec<String>>,
}

impl Changes {
    /// Whether pod `pod_id` is marked changed.
    pub fn touches(&self, pod_id: &str) -> bool {
        self.by_pod.contains_key(pod_id)
    }

    /// Take pod `pod_id`'s marks before reading its records: each is renamed to a name of
    /// this process, so that a mark the shim makes meanwhile is a new one, kept. The
    /// claimed marks go with [`Changes::release`] once what the records say is in the
    /// store; a reader that dies first leaves them, and the next reader takes them over.
    pub fn claim(&self, pod_id: &str) -> Vec<std::path::PathBuf> {
        use std::sync::atomic::{AtomicU64, Ordering};
        static N: AtomicU64 = AtomicU64::new(0);
        let mut claimed = Vec::new();
        for name in self.by_pod.get(pod_id).into_iter().flatten() {
            let to = self.dir.join(format!(
                "{pod_id}.{}.{}",
                std::process::id(),
                N.fetch_add(1, Ordering::Relaxed)
            ));
            if std::fs::rename(self.dir.join(name), &to).is_ok() {
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

/// The slots held in `registry` now, from one read of /proc/locks; `None` where the
/// registry or /proc/locks cannot be read (callers then check each shim precisely).
pub fn live(registry: &Path) -> Option<Live> {
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::metadata(registry).ok()?;
    let dev = meta.dev();
    let id = format!(
        "{:02x}:{:02x}:{}",
        libc::major(dev),
        libc::minor(dev),
        meta.ino()
    );
    let locks = std::fs::read_to_string("/proc/locks").ok()?;
    Some(Live {
        slots: parse_proc_locks(&locks, &id),
    })
}

/// The start offsets of the granted OFD locks on file `id` ("maj:min:ino", as /proc/locks
/// writes it) in the text of /proc/locks.
fn parse_proc_locks(text: &str, id: &str) -> HashSet<u64> {
    text.lines()
        .filter_map(|line| {
            let mut f = line.split_whitespace();
            // "N:" then, for a waiter, "->" before the type.
            let _ = f.next()?;
            let kind = f.next()?;
            if kind != "OFDLCK" {
                return None;
            }
            let (_advisory, _mode, _pid, file, start) =
                (f.next()?, f.next()?, f.next()?, f.next()?, f.next()?);
            (file == id).then(|| start.parse().ok()).flatten()
        })
        .collect()
}

/// The shims found alive by [`live`].
#[derive(Debug, Clone, Default)]
pub struct Live {
    slots: HashSet<u64>,
}

impl Live {
    /// Whether pod `pod_id`'s shim holds its lock (so it is alive).
    pub fn holds(&self, pod_id: &str) -> bool {
        self.slots.contains(&slot(pod_id))
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
    fn waiters_other_files_and_other_kinds_are_not_held_locks() {
        let text = "\
1: OFDLCK ADVISORY  WRITE -1 00:1f:77 5 5
1: -> OFDLCK ADVISORY  WRITE -1 00:1f:77 9 9
2: OFDLCK ADVISORY  WRITE -1 00:1f:78 6 6
3: FLOCK  ADVISORY  WRITE 12 00:1f:77 0 EOF
4: POSIX  ADVISORY  WRITE 12 00:1f:77 7 7
";
        let held = parse_proc_locks(text, "00:1f:77");
        assert_eq!(held, HashSet::from([5]));
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
