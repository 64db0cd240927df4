//! The shims' deaths and change marks as they happen, for a reader that keeps a listing
//! between calls (the CRI daemon's, which kubelet asks every second): one inotify
//! descriptor, read without waiting, tells whether anything happened since the last look,
//! where testing every shim's lock costs a call per pod.
//!
//! A shim holds its liveness lock through a descriptor it opened for writing on a shard of
//! the registry (see [`crate::liveness`]). However the shim dies, the kernel closes that
//! descriptor, and closing a file opened for writing makes an `IN_CLOSE_WRITE` event on the
//! registry's directory. Readers open the shards read-only, so their closes make none. A
//! change mark is made (`IN_CREATE`) or claimed (`IN_MOVED_TO`) in the marks directories.
//! Anything else that changes the registry's files (made, removed, renamed) counts too.
//!
//! The kernel queues the close event just before it drops the dead shim's lock, in the same
//! call. So a listing made right after an event may still find that shim alive: a reader
//! trusts the count alone only once [`Watch::quiet_for`] is long enough for the lock to be
//! gone, and tests the locks of its pods until then.

use std::cell::Cell;
use std::os::fd::OwnedFd;
use std::path::Path;
use std::time::{Duration, Instant};

use rustix::fs::inotify;

/// What a reader keeps watching: the registry and both marks directories.
pub struct Watch {
    ino: OwnedFd,
    /// How many reads found events.
    generation: Cell<u64>,
    /// When the last of them did.
    last: Cell<Option<Instant>>,
    /// A watched directory went (removed or moved): what happens in the one made again is
    /// not seen.
    broken: Cell<bool>,
}

impl Watch {
    /// Watch the registry at `registry` and the marks directories beside it, made where
    /// missing (a shim makes them on first use; watching needs them now).
    pub fn open(registry: &Path) -> std::io::Result<Watch> {
        use inotify::WatchFlags as W;
        let ino = inotify::init(inotify::CreateFlags::CLOEXEC | inotify::CreateFlags::NONBLOCK)?;
        let gone = W::DELETE_SELF | W::MOVE_SELF;
        let marks = W::CREATE | W::MOVED_TO | gone;
        let files = W::CLOSE_WRITE | W::CREATE | W::DELETE | W::MOVED_FROM | W::MOVED_TO;
        for (dir, flags) in [
            (registry.to_path_buf(), files | gone),
            (registry.with_file_name(crate::liveness::CHANGED_DIR), marks),
            (registry.with_file_name(crate::liveness::CLAIMED_DIR), marks),
        ] {
            std::fs::create_dir_all(&dir)?;
            inotify::add_watch(&ino, &dir, flags | W::ONLYDIR)?;
        }
        Ok(Watch {
            ino,
            generation: Cell::new(0),
            last: Cell::new(None),
            broken: Cell::new(false),
        })
    }

    /// A count that moves whenever a shim may have died, a change was marked or claimed, or
    /// the registry's files changed since the last call; `None` once the watch cannot tell
    /// (a watched directory went): open a new one.
    pub fn generation(&self) -> Option<u64> {
        let mut buf = [std::mem::MaybeUninit::<u8>::uninit(); 1024];
        let mut reader = inotify::Reader::new(&self.ino, &mut buf);
        let mut seen = false;
        loop {
            match reader.next() {
                Ok(event) => {
                    seen = true;
                    let flags = event.events();
                    if flags.intersects(
                        inotify::ReadFlags::DELETE_SELF
                            | inotify::ReadFlags::MOVE_SELF
                            | inotify::ReadFlags::IGNORED,
                    ) {
                        self.broken.set(true);
                    }
                }
                Err(rustix::io::Errno::AGAIN) => break,
                Err(rustix::io::Errno::INTR) => continue,
                // A read that fails otherwise cannot say nothing happened.
                Err(_) => {
                    self.broken.set(true);
                    break;
                }
            }
        }
        if seen {
            self.generation.set(self.generation.get() + 1);
            self.last.set(Some(Instant::now()));
        }
        (!self.broken.get()).then(|| self.generation.get())
    }

    /// How long since the last event was read (`None`: never).
    pub fn quiet_for(&self) -> Option<Duration> {
        self.last.get().map(|t| t.elapsed())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A registry in a directory of its own (kept while the guard lives).
    fn registry() -> (tempfile::TempDir, std::path::PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let registry = dir.path().join(crate::liveness::FILE);
        (dir, registry)
    }

    #[test]
    fn a_held_lock_let_go_moves_the_count_and_a_reader_does_not() {
        let (_dir, registry) = registry();
        let held = crate::liveness::hold(&registry, "0123456789abcdef").unwrap();
        let watch = Watch::open(&registry).unwrap();
        let g = watch.generation().unwrap();
        assert_eq!(watch.generation(), Some(g), "nothing happened");
        assert!(watch.quiet_for().is_none());

        // A reader's test of the lock opens and closes the shard read-only: no event.
        let live = crate::liveness::live(&registry).unwrap();
        assert!(live.holds("0123456789abcdef"));
        drop(live);
        assert_eq!(watch.generation(), Some(g), "a reader's close is no death");

        // The holder's descriptor closes, as the kernel closes a killed shim's.
        drop(held);
        let after = watch.generation().unwrap();
        assert_ne!(after, g, "a closed lock holder moves the count");
        assert!(watch.quiet_for().unwrap() < Duration::from_secs(5));
        assert_eq!(watch.generation(), Some(after), "each event counts once");
    }

    #[test]
    fn marks_made_or_claimed_move_the_count() {
        let (_dir, registry) = registry();
        let watch = Watch::open(&registry).unwrap();
        let g = watch.generation().unwrap();
        crate::liveness::mark_changed(&registry, "pod-a").unwrap();
        let marked = watch.generation().unwrap();
        assert_ne!(marked, g, "a new mark");
        let changes = crate::liveness::changes(&registry).unwrap();
        let claimed = changes.claim("pod-a");
        assert_eq!(claimed.len(), 1);
        assert_ne!(watch.generation().unwrap(), marked, "a claimed mark");
    }

    #[test]
    fn a_registry_made_again_breaks_the_watch() {
        let (_dir, registry) = registry();
        let watch = Watch::open(&registry).unwrap();
        assert!(watch.generation().is_some());
        std::fs::remove_dir(&registry).unwrap();
        std::fs::create_dir(&registry).unwrap();
        assert_eq!(watch.generation(), None, "a new directory is not watched");
        assert_eq!(watch.generation(), None, "and stays so");
    }
}
