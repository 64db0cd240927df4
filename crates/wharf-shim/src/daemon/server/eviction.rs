//! Local storage eviction, as kubelet's eviction manager does it for emptyDir volumes with
//! a sizeLimit on disk: every few seconds the shim measures each such directory (the
//! blocks its files take, symlinks not followed), and when one holds more than its limit
//! the pod is evicted: its containers are killed, nothing restarts, and the pod fails with
//! kubelet's message.

use super::*;

/// Between measurements (kubelet's eviction manager: 10 s); WHARF_EVICTION_INTERVAL_MS
/// for tests.
fn interval() -> Duration {
    std::env::var("WHARF_EVICTION_INTERVAL_MS")
        .ok()
        .and_then(|v| v.parse().ok())
        .map(Duration::from_millis)
        .unwrap_or(Duration::from_secs(10))
}

impl Shim {
    /// Start measuring `limits` (from the pod plan).
    pub(super) fn watch_disk(&mut self, limits: Vec<DiskLimit>) {
        self.next_disk_check = (!limits.is_empty()).then(|| Instant::now() + interval());
        self.disk_limits = limits;
    }

    /// Measure, if it is time; evict the pod when a volume holds too much.
    pub(super) fn disk_tick(&mut self, now: Instant) {
        if self.next_disk_check.is_none_or(|t| t > now) || self.shutting_down {
            return;
        }
        self.next_disk_check = Some(now + interval());
        let over = self.disk_limits.iter().find_map(|l| {
            let (used, _) = wharf_sys::fs::disk_usage(&l.path);
            (used > l.bytes).then(|| (l.volume.clone(), used, l.bytes))
        });
        if let Some((volume, used, limit)) = over {
            self.evict(&format!(
                "{EVICTED}: Usage of EmptyDir volume \"{volume}\" exceeds the limit \"{limit}\" ({used} bytes used)"
            ));
        }
    }

    fn evict(&mut self, message: &str) {
        log(&format!("pod {}: {message}", self.cfg.pod));
        self.next_disk_check = None;
        self.phase = PodPhase::Failed;
        self.failure = Some(message.to_string());
        let mut running = Vec::new();
        for c in &mut self.containers {
            c.restart_at = None;
            c.stopping = true;
            if matches!(c.status, Status::Running | Status::Created) {
                running.push(c.spec.id.clone());
            }
        }
        for id in running {
            if let Err(e) = self.cfg.runtime.kill(&id, libc::SIGKILL, true) {
                log(&format!("evict {id}: {e}"));
            }
        }
        self.persist_pod();
        self.publish(EventKind::PodFailed {
            failure: message.to_string(),
        });
    }
}
