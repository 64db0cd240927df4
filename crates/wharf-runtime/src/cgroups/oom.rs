//! OOM notifications for a container's cgroup.
//!
//! v1: an eventfd registered for memory.oom_control through cgroup.event_control; the kernel
//! signals it on every OOM in the cgroup and once more when the cgroup is removed. v2: inotify
//! on memory.events and on cgroup.events, whose "populated 0" says the last process left.
//! memory.events has two counters: `oom` grows when the cgroup hits its limit and the OOM
//! killer is called, `oom_kill` with every process it kills (a host-wide OOM's kills too).
//! Both count, as v1's notification does: where the killer finds its victim already exiting
//! it lets it go without a kill, and only `oom` moves.
//!
//! The watcher exposes a file descriptor to poll, so a caller can wait for OOMs and do other
//! things (print stats every few seconds) in one loop.

use std::fs::File;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};

use super::route::{MEMORY, Place};
use super::{Cgroup, files};
use crate::error::{Context, Error, Result};

/// What happened since the last [`OomWatcher::read`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct OomUpdate {
    /// OOM events seen (v1: notifications, v2: new OOM kills).
    pub ooms: u64,
    /// The cgroup is gone or empty: no more events will come.
    pub gone: bool,
}

/// Watches one cgroup for OOM events.
#[derive(Debug)]
pub struct OomWatcher {
    kind: Kind,
}

#[derive(Debug)]
enum Kind {
    V1 {
        eventfd: OwnedFd,
        // Registered together with the eventfd; the kernel keeps a reference, we keep ours
        // until the watcher is dropped.
        _control: File,
        dir: PathBuf,
    },
    V2 {
        inotify: OwnedFd,
        dir: PathBuf,
        /// memory.events' `oom` and `oom_kill` when the watch began.
        base: V2Counts,
        /// The OOMs reported since.
        reported: u64,
    },
}

impl Cgroup {
    /// Start watching for OOM events.
    pub fn oom_watcher(&self) -> Result<OomWatcher> {
        match self.place(MEMORY) {
            Some(Place::V1(dir)) => v1(dir),
            Some(Place::V2(dir)) => v2(dir),
            None => Err(Error::Unsupported(
                "OOM events need the memory controller, which this host does not offer".into(),
            )),
        }
    }
}

fn v1(dir: &Path) -> Result<OomWatcher> {
    let control_path = dir.join("memory.oom_control");
    let control = File::open(&control_path).ctx(|| format!("open {}", control_path.display()))?;
    let eventfd = rustix::event::eventfd(
        0,
        rustix::event::EventfdFlags::CLOEXEC | rustix::event::EventfdFlags::NONBLOCK,
    )
    .ctx(|| "create an eventfd for OOM notifications".into())?;
    let registration = format!("{} {}", eventfd.as_raw_fd(), control.as_raw_fd());
    let ev = dir.join("cgroup.event_control");
    std::fs::write(&ev, &registration).ctx(|| {
        format!(
            "register for OOM notifications: write {registration:?} to {}",
            ev.display()
        )
    })?;
    Ok(OomWatcher {
        kind: Kind::V1 {
            eventfd,
            _control: control,
            dir: dir.to_path_buf(),
        },
    })
}

fn v2(dir: &Path) -> Result<OomWatcher> {
    use rustix::fs::inotify;
    let fd = inotify::init(inotify::CreateFlags::CLOEXEC | inotify::CreateFlags::NONBLOCK)
        .ctx(|| "create an inotify instance for OOM notifications".into())?;
    for file in ["memory.events", "cgroup.events"] {
        let path = dir.join(file);
        inotify::add_watch(&fd, &path, inotify::WatchFlags::MODIFY)
            .ctx(|| format!("watch {}", path.display()))?;
    }
    let base = V2Counts::read(dir)?;
    Ok(OomWatcher {
        kind: Kind::V2 {
            inotify: fd,
            dir: dir.to_path_buf(),
            base,
            reported: 0,
        },
    })
}

/// memory.events' two OOM counters.
#[derive(Debug, Clone, Copy)]
struct V2Counts {
    ooms: u64,
    kills: u64,
}

impl V2Counts {
    fn read(dir: &Path) -> Result<V2Counts> {
        Ok(V2Counts {
            ooms: files::keyed_value(dir, "memory.events", "oom")?.unwrap_or(0),
            kills: files::keyed_value(dir, "memory.events", "oom_kill")?.unwrap_or(0),
        })
    }

    /// The OOMs these counts show since `before`: the larger of the two counters' growth
    /// (an OOM without a kill counted; kills the cgroup's own limit did not cause).
    fn since(self, before: V2Counts) -> u64 {
        self.ooms
            .saturating_sub(before.ooms)
            .max(self.kills.saturating_sub(before.kills))
    }
}

impl OomWatcher {
    /// The descriptor that becomes readable when [`OomWatcher::read`] has news.
    pub fn fd(&self) -> BorrowedFd<'_> {
        match &self.kind {
            Kind::V1 { eventfd, .. } => eventfd.as_fd(),
            Kind::V2 { inotify, .. } => inotify.as_fd(),
        }
    }

    /// Collect what happened (never blocks).
    pub fn read(&mut self) -> Result<OomUpdate> {
        match &mut self.kind {
            Kind::V1 { eventfd, dir, .. } => {
                let mut buf = [0u8; 8];
                let n = match rustix::io::read(&*eventfd, &mut buf) {
                    Ok(8) => u64::from_ne_bytes(buf),
                    Ok(_) | Err(rustix::io::Errno::AGAIN) => 0,
                    Err(e) => return Err(Error::os("read the OOM eventfd", e)),
                };
                // Removing the cgroup also signals the eventfd.
                let gone = !dir.join("cgroup.event_control").exists();
                Ok(OomUpdate {
                    ooms: if gone { 0 } else { n },
                    gone,
                })
            }
            Kind::V2 {
                inotify,
                dir,
                base,
                reported,
            } => {
                // Drain the queue; what changed is read from the files themselves.
                let mut buf = [0u8; 4096];
                while matches!(rustix::io::read(&*inotify, &mut buf), Ok(n) if n > 0) {}
                // Counted from the start, so that an OOM reported through `oom` is not
                // reported again when its `oom_kill` comes.
                let total = V2Counts::read(dir).map_or(*reported, |now| now.since(*base));
                let ooms = total.saturating_sub(*reported);
                *reported = (*reported).max(total);
                let populated = files::keyed_value(dir, "cgroup.events", "populated")
                    .ok()
                    .flatten();
                Ok(OomUpdate {
                    ooms,
                    gone: populated != Some(1),
                })
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cgroups::tests::fake_v2;
    use rustix::event::{PollFd, PollFlags, poll};

    fn readable(w: &OomWatcher) -> bool {
        let fd = w.fd();
        let mut fds = [PollFd::new(&fd, PollFlags::IN)];
        poll(
            &mut fds,
            Some(&rustix::time::Timespec {
                tv_sec: 5,
                tv_nsec: 0,
            }),
        )
        .unwrap()
            == 1
    }

    #[test]
    fn v2_counts_oom_kills_and_notices_the_end() {
        let t = tempfile::tempdir().unwrap();
        let (cg, dir) = fake_v2(t.path(), &[]);
        std::fs::write(dir.join("memory.events"), "oom 0\noom_kill 2\n").unwrap();
        std::fs::write(dir.join("cgroup.events"), "populated 1\nfrozen 0\n").unwrap();
        let mut w = cg.oom_watcher().unwrap();
        assert_eq!(
            w.read().unwrap(),
            OomUpdate {
                ooms: 0,
                gone: false
            }
        );
        std::fs::write(dir.join("memory.events"), "oom 1\noom_kill 3\n").unwrap();
        assert!(readable(&w));
        assert_eq!(
            w.read().unwrap(),
            OomUpdate {
                ooms: 1,
                gone: false
            }
        );
        std::fs::write(dir.join("cgroup.events"), "populated 0\nfrozen 0\n").unwrap();
        assert!(readable(&w));
        assert_eq!(
            w.read().unwrap(),
            OomUpdate {
                ooms: 0,
                gone: true
            }
        );
    }

    /// An OOM counted through `oom` alone is an OOM, and a kill of it counted later is the
    /// same OOM. A kill the cgroup's own limit did not cause (the host's OOM) moves
    /// `oom_kill` alone.
    #[test]
    fn v2_counts_an_oom_before_its_kill_is_counted_and_once() {
        let t = tempfile::tempdir().unwrap();
        let (cg, dir) = fake_v2(t.path(), &[]);
        std::fs::write(dir.join("memory.events"), "oom 4\noom_kill 4\n").unwrap();
        std::fs::write(dir.join("cgroup.events"), "populated 1\nfrozen 0\n").unwrap();
        let mut w = cg.oom_watcher().unwrap();
        assert_eq!(w.read().unwrap().ooms, 0);
        std::fs::write(dir.join("memory.events"), "oom 5\noom_kill 4\n").unwrap();
        assert_eq!(
            w.read().unwrap().ooms,
            1,
            "the limit was hit, no kill counted"
        );
        std::fs::write(dir.join("memory.events"), "oom 5\noom_kill 5\n").unwrap();
        assert_eq!(w.read().unwrap().ooms, 0, "its kill is the same OOM");
        std::fs::write(dir.join("memory.events"), "oom 5\noom_kill 6\n").unwrap();
        assert_eq!(w.read().unwrap().ooms, 1, "a kill by the host's OOM killer");
    }
}
