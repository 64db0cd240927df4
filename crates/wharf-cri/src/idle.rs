//! Giving memory back when the daemon is idle: after a couple of seconds without a request,
//! malloc's free memory goes back to the kernel and the binary's code is dropped from the
//! page tables (it faults back in from the page cache on the next request). A node's daemon
//! spends most of its life waiting; its resident size while it waits is what it costs.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Milliseconds since the epoch of the last request.
static LAST: AtomicU64 = AtomicU64::new(1);

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// A request arrived.
pub fn touch() {
    LAST.store(now_ms().max(1), Ordering::Relaxed);
}

/// Trim once each of `stages` (ascending) has passed without requests, once per busy
/// spell, until the daemon stops. It sleeps until the last request's time plus the next
/// stage (not in fixed steps, which would trim anywhere between one and two stages after
/// the last request). The first stage drops the code a burst of calls ran once the burst
/// is over; a later one gives back what the engine threads held once they have gone.
pub async fn trimmer(stages: Vec<Duration>) {
    let (mut seen, mut done) = (LAST.load(Ordering::Relaxed), 0);
    loop {
        let last = LAST.load(Ordering::Relaxed);
        if last != seen {
            (seen, done) = (last, 0);
        }
        let Some(stage) = stages.get(done) else {
            // Trimmed at every stage, and no request since: look again a stage later.
            tokio::time::sleep(stages.first().copied().unwrap_or(Duration::from_secs(1))).await;
            continue;
        };
        let since = now_ms().saturating_sub(last);
        let stage_ms = stage.as_millis() as u64;
        if since >= stage_ms {
            let _ = tokio::task::spawn_blocking(trim).await;
            done += 1;
            continue;
        }
        tokio::time::sleep(Duration::from_millis(stage_ms - since)).await;
    }
}

/// The executable's code mappings (r-xp, private, backed by the binary itself).
fn code_ranges() -> Vec<(usize, usize)> {
    let exe = std::fs::read_link("/proc/self/exe").unwrap_or_default();
    let maps = std::fs::read_to_string("/proc/self/maps").unwrap_or_default();
    maps.lines()
        .filter_map(|l| {
            let mut f = l.split_whitespace();
            let (range, perms) = (f.next()?, f.next()?);
            let path = f.nth(3)?;
            if perms != "r-xp" || std::path::Path::new(path) != exe {
                return None;
            }
            let (lo, hi) = range.split_once('-')?;
            Some((
                usize::from_str_radix(lo, 16).ok()?,
                usize::from_str_radix(hi, 16).ok()?,
            ))
        })
        .collect()
}

/// Two malloc arenas, not eight per core: each engine thread would otherwise leave an
/// arena of its own behind, whose scraps no trim gives back (measured: 13 arenas held
/// 4 MB after 30 parallel removals through the Docker API). Engine calls spend their
/// time in syscalls and on disk, not in malloc, so the contention is not felt. Call it
/// before the threads start.
#[allow(unsafe_code)]
pub fn few_arenas() {
    // SAFETY: mallopt only sets an allocator parameter.
    unsafe { libc::mallopt(libc::M_ARENA_MAX, 2) };
}

#[allow(unsafe_code)]
fn trim() {
    // SAFETY: malloc_trim has no preconditions.
    unsafe { libc::malloc_trim(0) };
    for (lo, hi) in code_ranges() {
        // SAFETY: the binary's own code: a private file mapping that is never written, so
        // dropping its pages loses nothing (they fault back in from the file), whatever
        // the other threads run meanwhile.
        unsafe { libc::madvise(lo as *mut libc::c_void, hi - lo, libc::MADV_DONTNEED) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn code_is_found_and_trimming_keeps_the_process_running() {
        assert!(!code_ranges().is_empty());
        trim();
        // Code dropped above runs again.
        assert!(!code_ranges().is_empty() && now_ms() > 0);
        touch();
        assert!(LAST.load(Ordering::Relaxed) > 1);
    }
}
