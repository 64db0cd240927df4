//! Traffic counters of the interfaces in a network namespace (a pod's), as
//! `/proc/net/dev` shows them from inside: what kubelet's network stats and the
//! `container_network_*` metrics report.

use std::os::fd::AsFd;
use std::path::Path;

use crate::error::{Context, Result};

/// One interface's counters since it was created.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct InterfaceCounters {
    /// Interface name.
    pub name: String,
    pub rx_bytes: u64,
    pub rx_packets: u64,
    pub rx_errors: u64,
    pub rx_dropped: u64,
    pub tx_bytes: u64,
    pub tx_packets: u64,
    pub tx_errors: u64,
    pub tx_dropped: u64,
}

/// The counters of every interface but loopback in the namespace pinned at `ns`.
pub fn read(ns: &Path) -> Result<Vec<InterfaceCounters>> {
    let fd = crate::netns::open(ns)?;
    // /proc/thread-self/net is the calling thread's namespace (run_in's helper thread).
    let text = crate::netns::run_in(Some(fd.as_fd()), || {
        std::fs::read_to_string("/proc/thread-self/net/dev")
            .ctx(|| format!("read the interface counters of {}", ns.display()))
    })?;
    Ok(parse(&text))
}

/// `/proc/net/dev`: two header lines, then `name: rx(8 fields) tx(8 fields)`.
fn parse(text: &str) -> Vec<InterfaceCounters> {
    text.lines()
        .skip(2)
        .filter_map(|line| {
            let (name, rest) = line.split_once(':')?;
            let name = name.trim();
            if name == "lo" {
                return None;
            }
            let f: Vec<u64> = rest
                .split_whitespace()
                .map(|v| v.parse().unwrap_or(0))
                .collect();
            let at = |i: usize| f.get(i).copied().unwrap_or(0);
            Some(InterfaceCounters {
                name: name.to_string(),
                rx_bytes: at(0),
                rx_packets: at(1),
                rx_errors: at(2),
                rx_dropped: at(3),
                tx_bytes: at(8),
                tx_packets: at(9),
                tx_errors: at(10),
                tx_dropped: at(11),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_proc_net_dev_without_loopback() {
        let text = "Inter-|   Receive                                                |  Transmit\n \
 face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs drop fifo colls carrier compressed\n    \
lo:     140       2    0    0    0     0          0         0      140       2    0    0    0     0       0          0\n  \
eth0:    1296      14    1    2    0     0          0         0      656       8    3    4    0     0       0          0\n";
        assert_eq!(
            parse(text),
            vec![InterfaceCounters {
                name: "eth0".into(),
                rx_bytes: 1296,
                rx_packets: 14,
                rx_errors: 1,
                rx_dropped: 2,
                tx_bytes: 656,
                tx_packets: 8,
                tx_errors: 3,
                tx_dropped: 4,
            }]
        );
    }
}
