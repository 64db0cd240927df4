//! The engine's events, pushed: what the store recorded (since a time), then, when
//! following, each new one as it happens. Nothing polls. Two sources wake a follower:
//!
//! - every running pod's shim, subscribed to: a container that exits, restarts or is
//!   killed by the OOM killer is reported at once, and the follower records it in the
//!   store (so that it is there for `events --since` too);
//! - the store's events stamp ([`crate::db::events_stamp`]), watched with inotify: every
//!   command touches it after committing events (pods and containers created, started,
//!   removed), which wakes the follower; it then also subscribes to the shims of new pods.
//!
//! Events that happened while nobody followed are recorded by the next command that looks
//! (every listing refreshes what it shows), and by [`Engine::events`] before it reads.

use std::collections::BTreeMap;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::mpsc;
use std::time::SystemTime;

use crate::db::Event;
use crate::engine::Engine;
use crate::error::{Error, Result};
use crate::model::ContainerState;

/// Which events to read.
#[derive(Debug, Clone, Default)]
pub struct EventOptions {
    /// Only those at or after this time.
    pub since: Option<SystemTime>,
    /// Keep delivering new events as they happen.
    pub follow: bool,
}

/// What wakes a follower.
enum Wakeup {
    /// The store changed.
    Store,
    /// A pod's shim reported something (None: its stream ended).
    Shim {
        pod: String,
        event: Option<Box<wharf_shim::protocol::Event>>,
    },
}

/// The sources that wake a follower; dropping it stops their threads.
struct Waker {
    rx: mpsc::Receiver<Wakeup>,
    tx: mpsc::Sender<Wakeup>,
    /// Closing it (dropping the write end) ends the store watcher.
    _stop: OwnedFd,
    shims: BTreeMap<String, wharf_shim::EventsCloser>,
}

impl Drop for Waker {
    fn drop(&mut self) {
        for closer in self.shims.values() {
            closer.close();
        }
    }
}

/// A reader of the engine's events: see [`Engine::events`].
pub struct EventFeed<'e> {
    engine: &'e Engine,
    opts: EventOptions,
    seq: i64,
    first: bool,
    waker: Option<Waker>,
}

impl Engine {
    /// The engine's events: [`EventFeed::next_batch`] gives what the store holds, then
    /// (following) what happens next.
    pub fn events(&self, opts: EventOptions) -> EventFeed<'_> {
        EventFeed {
            engine: self,
            opts,
            seq: 0,
            first: true,
            waker: None,
        }
    }

    /// Record what the shims recorded about running containers (exits, restarts) and has
    /// not reached the store yet.
    fn refresh_running(&self, pod: Option<&str>) -> Result<()> {
        for c in self.db.containers(pod)? {
            if c.state == ContainerState::Running {
                match self.refresh(&c) {
                    // Removed by another process meanwhile: nothing to record.
                    Ok(_) | Err(Error::NotFound { .. }) => {}
                    Err(e) => return Err(e),
                }
            }
        }
        Ok(())
    }
}

impl EventFeed<'_> {
    /// The next events, oldest first. The first call returns at once with what the store
    /// holds; following, later calls block until there is something new. None when the
    /// feed is over (not following, after the first batch).
    pub fn next_batch(&mut self) -> Result<Option<Vec<Event>>> {
        if self.first {
            self.first = false;
            self.engine.refresh_running(None)?;
            return Ok(Some(self.read()?));
        }
        if !self.opts.follow {
            return Ok(None);
        }
        if self.waker.is_none() {
            self.waker = Some(self.wake_sources()?);
            self.subscribe_new()?;
            // What happened between the first read and the subscriptions.
            self.engine.refresh_running(None)?;
        }
        loop {
            let batch = self.read()?;
            if !batch.is_empty() {
                return Ok(Some(batch));
            }
            let wakeup = {
                let w = self.waker.as_ref().expect("set up above");
                w.rx.recv()
                    .map_err(|_| Error::Other("events: every event source has ended".into()))?
            };
            self.handle(wakeup)?;
        }
    }

    fn read(&mut self) -> Result<Vec<Event>> {
        let mut out = Vec::new();
        for e in self.engine.db.events_since(self.seq)? {
            self.seq = e.seq;
            let early = self.opts.since.is_some_and(|since| {
                wharf_sys::time::parse_rfc3339(&e.time).is_some_and(|t| t < since)
            });
            if !early {
                out.push(e);
            }
        }
        Ok(out)
    }

    fn handle(&mut self, wakeup: Wakeup) -> Result<()> {
        use wharf_shim::protocol::EventKind as K;
        match wakeup {
            Wakeup::Store => self.subscribe_new(),
            Wakeup::Shim { pod, event: None } => {
                // The shim is gone: what it left (or its death) is recorded now.
                if let Some(w) = self.waker.as_mut() {
                    w.shims.remove(&pod);
                }
                match self.engine.refresh_running(Some(&pod)) {
                    Err(Error::NotFound { .. }) => Ok(()),
                    other => other,
                }
            }
            Wakeup::Shim {
                event: Some(event), ..
            } => match &event.kind {
                K::Exited { id, .. } | K::Restarted { id, .. } | K::Oom { id } => {
                    match self.engine.db.find_container(id) {
                        Ok(row) => self.engine.refresh(&row).map(|_| ()),
                        // Removed meanwhile: its removal is an event of its own.
                        Err(Error::NotFound { .. }) => Ok(()),
                        Err(e) => Err(e),
                    }
                }
                _ => Ok(()),
            },
        }
    }

    /// The store watcher: a thread that wakes the feed whenever the store file changes.
    fn wake_sources(&self) -> Result<Waker> {
        use rustix::fs::inotify;
        let (tx, rx) = mpsc::channel();
        let os = |what: &str, e: rustix::io::Errno| Error::Os {
            what: format!("events: {what}"),
            err: e.into(),
        };
        let ino = inotify::init(inotify::CreateFlags::CLOEXEC).map_err(|e| os("inotify", e))?;
        let stamp = crate::db::events_stamp(&self.engine.paths.db());
        let dir = stamp
            .parent()
            .unwrap_or(std::path::Path::new("/"))
            .to_path_buf();
        let name = stamp
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        // The directory, not the file: the stamp may not exist yet (or be made again).
        inotify::add_watch(
            &ino,
            &dir,
            inotify::WatchFlags::ATTRIB
                | inotify::WatchFlags::CREATE
                | inotify::WatchFlags::MOVED_TO,
        )
        .map_err(|e| os(&format!("watch {}", dir.display()), e))?;
        let (stop_read, stop_write) =
            rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC).map_err(|e| os("pipe", e))?;
        let store_tx = tx.clone();
        std::thread::spawn(move || watch_store(ino, stop_read, &name, store_tx));
        Ok(Waker {
            rx,
            tx,
            _stop: stop_write,
            shims: BTreeMap::new(),
        })
    }

    /// Subscribe to the shims of pods that have one and are not subscribed to yet.
    fn subscribe_new(&mut self) -> Result<()> {
        let engine = self.engine;
        let Some(w) = self.waker.as_mut() else {
            return Ok(());
        };
        let pods = engine.db.pods()?;
        w.shims.retain(|id, closer| {
            let keep = pods.iter().any(|p| &p.id == id);
            if !keep {
                closer.close();
            }
            keep
        });
        for pod in pods {
            if w.shims.contains_key(&pod.id) {
                continue;
            }
            let Ok(Some(shim)) = engine.running_shim(&pod) else {
                continue;
            };
            let Ok(mut events) = shim.subscribe() else {
                continue;
            };
            let Ok(closer) = events.closer() else {
                continue;
            };
            w.shims.insert(pod.id.clone(), closer);
            let tx = w.tx.clone();
            let id = pod.id.clone();
            std::thread::spawn(move || {
                loop {
                    let event = events.next_event().ok().flatten().map(Box::new);
                    let end = event.is_none();
                    if tx
                        .send(Wakeup::Shim {
                            pod: id.clone(),
                            event,
                        })
                        .is_err()
                        || end
                    {
                        return;
                    }
                }
            });
        }
        Ok(())
    }
}

/// Wake the feed whenever the stamp (`name` in the watched directory) is touched, until
/// `stop` is closed or the feed is gone.
fn watch_store(ino: OwnedFd, stop: OwnedFd, name: &str, tx: mpsc::Sender<Wakeup>) {
    use rustix::event::{PollFd, PollFlags, poll};
    let mut buf = [std::mem::MaybeUninit::<u8>::uninit(); 4096];
    loop {
        let mut fds = [
            PollFd::new(&ino, PollFlags::IN),
            PollFd::new(&stop, PollFlags::IN),
        ];
        match poll(&mut fds, None) {
            Ok(_) | Err(rustix::io::Errno::INTR) => {}
            Err(_) => return,
        }
        if !fds[1].revents().is_empty() {
            return;
        }
        if fds[0].revents().is_empty() {
            continue;
        }
        let mut changed = false;
        let mut reader = rustix::fs::inotify::Reader::new(ino.as_fd(), &mut buf);
        loop {
            match reader.next() {
                Ok(e) => {
                    changed |= e.file_name().is_some_and(|n| n.to_string_lossy() == name);
                }
                Err(rustix::io::Errno::INTR) => continue,
                Err(_) => break,
            }
            if reader.is_buffer_empty() {
                break;
            }
        }
        if changed && tx.send(Wakeup::Store).is_err() {
            return;
        }
    }
}
