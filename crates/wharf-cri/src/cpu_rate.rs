//! CPU usage as a rate (`usage_nano_cores`): kubelet's summary API and its eviction and
//! autoscaling consumers read pods' CPU as cores in use, and with its
//! PodAndContainerStatsFromCRI mode it takes that rate from the runtime rather than
//! computing it. The cgroup only counts cumulative time, so the daemon keeps each pod's and
//! container's last sample and divides the difference by the time between them, as
//! containerd does.
//!
//! A window is at least [`MIN_WINDOW`] long: calls that come closer together (kubelet's
//! metrics and its summary asking at once) get the rate of the last full window, not the
//! noise of a few milliseconds.

use std::collections::HashMap;
use std::sync::Mutex;

/// The shortest window a rate is computed over, in nanoseconds.
const MIN_WINDOW: i64 = 1_000_000_000;
/// Samples not updated for this long belong to objects that are gone, and are dropped.
const STALE: i64 = 600 * 1_000_000_000;

#[derive(Clone, Copy)]
struct Sample {
    at: i64,
    usage: u64,
    rate: Option<u64>,
}

/// The last CPU samples of pods and containers, by id.
#[derive(Default)]
pub struct CpuRates {
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    samples: HashMap<String, Sample>,
    pruned_at: i64,
}

impl CpuRates {
    /// Nanocores object `id` used since its last sample a window ago, given its
    /// cumulative usage `usage` (ns) at `now` (ns since the epoch). None for its first
    /// sample, and after its counter went back (a restarted container's new cgroup).
    pub fn rate(&self, id: &str, now: i64, usage: u64) -> Option<u64> {
        let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        if now - st.pruned_at > STALE / 10 {
            st.samples.retain(|_, s| now - s.at < STALE);
            st.pruned_at = now;
        }
        let fresh = Sample {
            at: now,
            usage,
            rate: None,
        };
        let s = st.samples.entry(id.to_string()).or_insert(fresh);
        if usage < s.usage {
            *s = fresh;
        } else if now - s.at >= MIN_WINDOW {
            let cores = (usage - s.usage) as u128 * 1_000_000_000 / (now - s.at) as u128;
            *s = Sample {
                rate: Some(cores.min(u64::MAX as u128) as u64),
                ..fresh
            };
        }
        s.rate
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: i64 = 1_000_000_000;

    #[test]
    fn the_rate_is_the_usage_over_the_last_full_window() {
        let r = CpuRates::default();
        assert_eq!(r.rate("c", 10 * S, 5_000_000_000), None, "first sample");
        // Half a core over two seconds.
        assert_eq!(r.rate("c", 12 * S, 6_000_000_000), Some(500_000_000));
        // A call within the window gets the same rate, and does not move the window.
        assert_eq!(
            r.rate("c", 12 * S + S / 10, 6_900_000_000),
            Some(500_000_000)
        );
        assert_eq!(r.rate("c", 13 * S, 7_000_000_000), Some(1_000_000_000));
        // A counter that went back starts over.
        assert_eq!(r.rate("c", 14 * S, 10), None);
        assert_eq!(r.rate("other", 14 * S, 10), None, "each id its own");
    }

    #[test]
    fn samples_of_objects_gone_for_long_are_dropped() {
        let r = CpuRates::default();
        r.rate("gone", S, 1);
        r.rate("here", STALE, 1);
        r.rate("here", STALE + STALE / 5, 2);
        let st = r.state.lock().unwrap();
        assert!(!st.samples.contains_key("gone"));
        assert!(st.samples.contains_key("here"));
    }
}
