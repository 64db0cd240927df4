//! The oom_score_adj a container may get on this host.
//!
//! Lowering a process's oom_score_adj below the floor it inherited needs CAP_SYS_RESOURCE,
//! which hosts such as unprivileged build machines or nested containers do not give. The
//! runtime refuses such a config with a clear error; the engine, which chooses the value on
//! the user's behalf (a flag, a QoS class), clamps it instead, as users of docker and
//! podman expect a container to start there.

use std::io::ErrorKind;

use crate::error::{Error, Result};

const SELF_ADJ: &str = "/proc/self/oom_score_adj";

/// The value a container gets when `wanted` is asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OomScoreAdj {
    /// What the container gets.
    pub value: i32,
    /// Whether `wanted` was raised to `value` because this host cannot lower it.
    pub clamped: bool,
}

/// `wanted` if this process may set it (its children inherit the same floor), else the
/// lowest value known to be allowed: this process's own. Probes by setting its own value
/// and putting it back (raising is always allowed).
pub fn effective(wanted: i32) -> Result<OomScoreAdj> {
    if !(-1000..=1000).contains(&wanted) {
        return Err(Error::Invalid(format!(
            "oom_score_adj {wanted} is out of range (-1000 to 1000)"
        )));
    }
    let read = || -> Result<i32> {
        let s = std::fs::read_to_string(SELF_ADJ).map_err(|e| Error::Os {
            what: format!("read {SELF_ADJ}"),
            err: e,
        })?;
        s.trim()
            .parse()
            .map_err(|_| Error::Other(format!("{SELF_ADJ}: unexpected content {s:?}")))
    };
    let own = read()?;
    Ok(decide(wanted, own, |v| {
        match std::fs::write(SELF_ADJ, v.to_string()) {
            Ok(()) => {
                let _ = std::fs::write(SELF_ADJ, own.to_string());
                true
            }
            Err(e) if matches!(e.kind(), ErrorKind::PermissionDenied) => false,
            // Anything else: let the runtime report it with the value asked for.
            Err(_) => true,
        }
    }))
}

/// The decision, given this process's own value and a probe that says whether a value can
/// be set.
fn decide(wanted: i32, own: i32, can_set: impl FnOnce(i32) -> bool) -> OomScoreAdj {
    if wanted >= own || can_set(wanted) {
        OomScoreAdj {
            value: wanted,
            clamped: false,
        }
    } else {
        OomScoreAdj {
            value: own,
            clamped: true,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn raising_needs_no_probe_and_lowering_is_clamped_when_refused() {
        let never = |_| panic!("no probe needed");
        assert_eq!(
            decide(500, 0, never),
            OomScoreAdj {
                value: 500,
                clamped: false
            }
        );
        assert_eq!(
            decide(-500, 0, |_| false),
            OomScoreAdj {
                value: 0,
                clamped: true
            }
        );
        assert_eq!(
            decide(-500, 0, |_| true),
            OomScoreAdj {
                value: -500,
                clamped: false
            }
        );
        assert_eq!(
            decide(-500, -800, never),
            OomScoreAdj {
                value: -500,
                clamped: false
            }
        );
    }

    #[test]
    fn out_of_range_is_refused_and_the_probe_leaves_our_value_alone() {
        assert!(effective(1001).is_err());
        assert!(effective(-1001).is_err());
        let before = std::fs::read_to_string(SELF_ADJ).unwrap();
        let got = effective(-1000).unwrap();
        assert_eq!(std::fs::read_to_string(SELF_ADJ).unwrap(), before);
        let own: i32 = before.trim().parse().unwrap();
        assert!(
            got.value == -1000 || (got.clamped && got.value == own),
            "{got:?}"
        );
    }
}
