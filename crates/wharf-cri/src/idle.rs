//! Giving memory back when the daemon is idle: after a couple of seconds without a request,
//! malloc's free memory goes back to the kernel and the code and constants of the binary
//! and its shared libraries are dropped from the page tables (they fault back in from the
//! page cache on the next request). A node's daemon spends most of its life waiting; its resident size while it
//! waits is what it costs.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Milliseconds since the epoch of the last request.
static LAST: AtomicU64 = AtomicU64::new(1);

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// Engine calls running now: no stage trims while one runs, however long it takes (a
/// call of more than half a second would otherwise see its code and engines dropped under
/// it, and fault the code straight back in).
static RUNNING: AtomicU64 = AtomicU64::new(0);

/// A request arrived.
pub fn touch() {
    LAST.store(now_ms().max(1), Ordering::Relaxed);
}

/// Held by an engine call while it runs; dropping it marks the call's end as the last
/// request.
pub struct Running(());

/// An engine call starts.
pub fn running() -> Running {
    RUNNING.fetch_add(1, Ordering::Relaxed);
    touch();
    Running(())
}

impl Drop for Running {
    fn drop(&mut self) {
        touch();
        RUNNING.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Trim once each of `stages` (ascending) has passed without requests, once per busy
/// spell, until the daemon stops, first running `before_trim` with the stage's index. It
/// sleeps until the last request's time plus the next stage (not in fixed steps, which
/// would trim anywhere between one and two stages after the last request). The first stage
/// drops the code a burst of calls ran once the burst is over; a later one gives back what
/// the engines held once `before_trim` has closed them and their threads have gone.
pub async fn trimmer(stages: Vec<Duration>, mut before_trim: impl FnMut(usize) + Send) {
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
        if RUNNING.load(Ordering::Relaxed) > 0 {
            // Not idle, however long ago the last call ended: look again a stage later
            // (the running call's end counts as a request).
            tokio::time::sleep(Duration::from_millis(stage_ms)).await;
            continue;
        }
        if since >= stage_ms {
            // Here, not on a blocking thread: one started for it would exit a keep-alive
            // later, after the last stage, and fault back in the code its exit runs (1.7 MB
            // of libc's and ours, measured, stayed resident until the next request). It takes
            // a millisecond or two of a worker that has nothing else to do.
            before_trim(done);
            trim();
            done += 1;
            continue;
        }
        tokio::time::sleep(Duration::from_millis(stage_ms - since)).await;
    }
}

/// The read-only file mappings that hold no page of their own: the binary's code,
/// constants and unwind tables, and the same of the shared libraries (libc's code alone is
/// over 1 MB resident). Private, backed by a file, never written: dropping their pages
/// loses nothing, they fault back in from the page cache. A mapping with anonymous pages
/// (a debugger's or an uprobe's breakpoint is a private copy of a code page; relocated
/// data made read-only) is left alone, since dropping would undo them.
pub(crate) fn droppable_ranges() -> Vec<(usize, usize)> {
    let smaps = std::fs::read_to_string("/proc/self/smaps").unwrap_or_default();
    wharf_sys::smaps::mappings(&smaps)
        .iter()
        .filter(|m| m.is_clean_read_only_file())
        .map(|m| (m.start, m.end))
        .collect()
}

/// malloc set to give memory back. Two arenas, not eight per core: each engine thread
/// would otherwise leave an arena of its own behind, whose scraps no trim gives back
/// (measured: 13 arenas held 4 MB after 30 parallel removals through the Docker API).
/// Engine calls spend their time in syscalls and on disk, not in malloc, so the
/// contention is not felt. And fixed mmap and trim thresholds: by default each large
/// block freed raises both (up to 32 and 64 MB), after which a listing's answers are
/// carved from the heap and the top of a thread's arena, which malloc_trim does not
/// shrink, stays resident (measured, 100 pods, a burst of listings: 2 MB of the daemon's
/// 6.4 MB anonymous memory, 4 s later). Call it before the threads start.
#[allow(unsafe_code)]
pub fn tune_malloc() {
    // SAFETY: mallopt only sets allocator parameters.
    unsafe {
        libc::mallopt(libc::M_ARENA_MAX, 2);
        libc::mallopt(libc::M_MMAP_THRESHOLD, 128 << 10);
        libc::mallopt(libc::M_TRIM_THRESHOLD, 128 << 10);
    }
}

/// How many times malloc was trimmed (what give_back.rs's test observes).
static MALLOC_TRIMS: AtomicU64 = AtomicU64::new(0);

/// Give malloc's free memory back to the kernel (also after a large answer: give_back.rs).
#[allow(unsafe_code)]
pub fn trim_malloc() {
    MALLOC_TRIMS.fetch_add(1, Ordering::Relaxed);
    // SAFETY: malloc_trim has no preconditions.
    unsafe { libc::malloc_trim(0) };
}

#[cfg(test)]
pub fn malloc_trims() -> u64 {
    MALLOC_TRIMS.load(Ordering::Relaxed)
}

/// Held through a trim: what reads the mappings and drops them is one step for anything
/// else in the process that holds it too (the tests that make a private copy of a page).
static TRIMMING: std::sync::Mutex<()> = std::sync::Mutex::new(());

#[allow(unsafe_code)]
fn trim() {
    let _one_at_a_time = TRIMMING.lock().unwrap_or_else(|e| e.into_inner());
    trim_malloc();
    for (lo, hi) in droppable_ranges() {
        // SAFETY: a private, read-only file mapping without a page of its own (see
        // droppable_ranges): dropping its pages loses nothing (they fault back in from the
        // file), whatever the other threads run meanwhile.
        unsafe { libc::madvise(lo as *mut libc::c_void, hi - lo, libc::MADV_DONTNEED) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn code_is_found_and_trimming_keeps_the_process_running() {
        assert!(!droppable_ranges().is_empty());
        trim();
        // Code dropped above runs again.
        assert!(!droppable_ranges().is_empty() && now_ms() > 0);
        touch();
        assert!(LAST.load(Ordering::Relaxed) > 1);
    }

    /// A call that runs longer than a stage is not trimmed under; once it ends, the stage
    /// passes and the trim comes.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn no_stage_trims_while_a_call_runs() {
        let stages = std::sync::Arc::new(AtomicU64::new(0));
        let seen = stages.clone();
        let call = running();
        let trimmer = tokio::spawn(trimmer(vec![Duration::from_millis(50)], move |_| {
            seen.fetch_add(1, Ordering::Relaxed);
        }));
        tokio::time::sleep(Duration::from_millis(400)).await;
        assert_eq!(
            stages.load(Ordering::Relaxed),
            0,
            "trimmed under a running call"
        );
        drop(call);
        let ended = std::time::Instant::now();
        while stages.load(Ordering::Relaxed) == 0 {
            assert!(
                ended.elapsed() < Duration::from_secs(10),
                "no trim after the call"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert!(
            ended.elapsed() >= Duration::from_millis(40),
            "trimmed before the stage"
        );
        trimmer.abort();
    }

    /// A read-only mapping of the binary that holds a private copy of a page (what a
    /// debugger's breakpoint makes) is not dropped: that would undo the copy.
    #[test]
    #[allow(unsafe_code)]
    fn a_mapping_with_a_page_of_its_own_is_left_alone() {
        // No trim of another test in between: it would drop the copy made here.
        let _no_trim = TRIMMING.lock().unwrap_or_else(|e| e.into_inner());
        let exe = std::fs::read_link("/proc/self/exe").unwrap();
        let smaps = std::fs::read_to_string("/proc/self/smaps").unwrap();
        // The first page of the binary's read-only mapping at offset 0 (the ELF header):
        // rewrite one byte with its own value, which makes the private copy without
        // changing a thing.
        let (lo, hi) = wharf_sys::smaps::mappings(&smaps)
            .iter()
            .filter(|m| std::path::Path::new(m.path) == exe && m.is_clean_read_only_file())
            .map(|m| (m.start, m.end))
            .min()
            .expect("read-only mappings of the binary");
        assert!(droppable_ranges().contains(&(lo, hi)));
        let page = lo as *mut u8;
        // SAFETY: the page is mapped (it is one of ours); it is made writable only for the
        // byte written with the value it holds, then read-only again.
        unsafe {
            assert_eq!(
                libc::mprotect(page.cast(), 4096, libc::PROT_READ | libc::PROT_WRITE),
                0
            );
            page.write_volatile(page.read_volatile());
            assert_eq!(libc::mprotect(page.cast(), 4096, libc::PROT_READ), 0);
        }
        let after = droppable_ranges();
        assert!(
            !after.iter().any(|&(l, h)| l <= lo && lo < h),
            "{lo:#x}-{hi:#x} still listed"
        );
        assert!(!after.is_empty(), "the code is still dropped");
    }

    /// The shared libraries' code is dropped too: libc's is the largest after ours.
    #[test]
    fn shared_libraries_are_dropped_too() {
        let smaps = std::fs::read_to_string("/proc/self/smaps").unwrap();
        let libc = wharf_sys::smaps::mappings(&smaps)
            .iter()
            .find(|m| m.path.contains("/libc.so") && m.perms == "r-xp")
            .map(|m| (m.start, m.end))
            .expect("libc's code is mapped");
        assert!(droppable_ranges().contains(&libc));
    }
}
