//! Where a short-lived helper thread runs.
//!
//! Linux starts a new thread on its parent's CPU and leaves it there until a load balance
//! moves one of the two, which on a 2-CPU VM took 4-8 ms while the other CPU idled
//! (`perf sched timehist` of `wharf ps` with 1000 pods; a test program whose two threads
//! each spin 2.3 ms took 4.0-6.5 ms in all, the same time as one thread doing both). A
//! helper whose work is a few milliseconds long is over before then, having run after its
//! parent instead of beside it. (That VM's kernel boots with `sched_vcpu_pack`, which keeps
//! tasks on few vCPUs; elsewhere a new thread may start on another CPU, and then nothing
//! here moves it.) So such a helper moves itself, once, to another CPU, and then gives
//! itself back every CPU it had: the scheduler is free again from there on.

use rustix::thread::{CpuSet, sched_getaffinity, sched_setaffinity};

/// The CPU the calling thread runs on now (a hint: it may be moved right after); `None`
/// where it cannot be read. From `/proc/thread-self/stat` (about 10 µs) rather than
/// rustix's `sched_getcpu`, whose vDSO lookup crashes the process under valgrind.
pub fn current() -> Option<usize> {
    let stat = std::fs::read_to_string("/proc/thread-self/stat").ok()?;
    processor(&stat)
}

/// Field 39 of a `stat` line, the CPU the task last ran on.
fn processor(stat: &str) -> Option<usize> {
    crate::procfs::stat_fields(stat)?
        .nth(39 - 3)
        .and_then(|f| f.parse().ok())
}

/// Move the calling thread to an allowed CPU other than `busy` (the next one after it, in
/// a circle), then allow it every CPU it was allowed before; the CPU it ran on in between.
/// Nothing happens (`None`) where the thread is on another CPU already, may run on one CPU
/// only, or where the calls fail: this only saves time.
pub fn move_off(busy: usize) -> Option<usize> {
    if current()? != busy {
        return None;
    }
    let allowed = sched_getaffinity(None).ok()?;
    let other = other_cpu(&allowed, busy)?;
    let mut one = CpuSet::new();
    one.set(other);
    // The first call returns with the thread already on `other`; the second moves nothing.
    sched_setaffinity(None, &one).ok()?;
    let moved_to = current();
    let _ = sched_setaffinity(None, &allowed);
    moved_to
}

/// The first CPU of `allowed` after `busy`, wrapping around; `None` if `busy` is the only
/// one.
fn other_cpu(allowed: &CpuSet, busy: usize) -> Option<usize> {
    (1..CpuSet::MAX_CPU)
        .map(|step| (busy + step) % CpuSet::MAX_CPU)
        .find(|&c| allowed.is_set(c))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(cpus: &[usize]) -> CpuSet {
        let mut s = CpuSet::new();
        for &c in cpus {
            s.set(c);
        }
        s
    }

    #[test]
    fn the_cpu_is_read_after_a_name_with_spaces_and_parentheses() {
        let tail = (3..=52)
            .map(|f| f.to_string())
            .collect::<Vec<_>>()
            .join(" ");
        assert_eq!(processor(&format!("42 (a) b (c) {tail}")), Some(39));
        assert_eq!(processor("42 (short) 1 2"), None);
        assert!(current().is_some_and(|c| c < CpuSet::MAX_CPU));
    }

    #[test]
    fn the_next_allowed_cpu_is_chosen_wrapping_around() {
        assert_eq!(other_cpu(&set(&[0, 1]), 0), Some(1));
        assert_eq!(other_cpu(&set(&[0, 1]), 1), Some(0));
        assert_eq!(other_cpu(&set(&[0, 2, 5]), 2), Some(5));
        assert_eq!(other_cpu(&set(&[0, 2, 5]), 5), Some(0));
        // The busy CPU itself need not be allowed (the caller's mask may differ).
        assert_eq!(other_cpu(&set(&[3]), 1), Some(3));
        assert_eq!(other_cpu(&set(&[3]), 3), None);
    }

    #[test]
    fn a_thread_moved_off_a_cpu_keeps_every_cpu_it_was_allowed() {
        let before = sched_getaffinity(None).unwrap();
        std::thread::spawn(move || {
            let here = current().expect("this thread's CPU");
            let moved_to = move_off(here);
            if before.count() > 1 {
                let to = moved_to.expect("a thread allowed two CPUs is moved");
                assert_ne!(to, here, "moved off the CPU it was on");
                assert!(before.is_set(to));
            } else {
                assert_eq!(moved_to, None);
            }
            let after = sched_getaffinity(None).unwrap();
            assert!(after == before, "the thread's mask is given back whole");
        })
        .join()
        .unwrap();
    }
}
