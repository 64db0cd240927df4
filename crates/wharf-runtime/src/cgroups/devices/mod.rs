//! `linux.resources.devices`: which device nodes the container may read, write or create.
//!
//! The config's rules are followed by the set runc always appends (mknod of any node; null,
//! zero, full, random, urandom, tty, ptmx, every pts — /dev/console is a pts — and tun), so
//! those keep working under a deny-all rule. The combined list is evaluated the way the v1
//! devices controller does ([`RuleSet`]) and then either written to a v1 devices cgroup
//! (v1.rs) or compiled into an eBPF program attached to the cgroup2 directory ([`bpf`]),
//! so both give the same answers.

pub mod bpf;
mod emulator;
mod v1;

use oci_spec::runtime::{LinuxDeviceCgroup, LinuxDeviceType};

pub use emulator::RuleSet;

use super::Cgroup;
use crate::error::{Error, Result};

const S: &str = "linux.resources.devices";

/// Character or block device.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum DevType {
    /// 'c'
    Char,
    /// 'b'
    Block,
}

impl DevType {
    fn letter(self) -> char {
        match self {
            DevType::Char => 'c',
            DevType::Block => 'b',
        }
    }
}

/// Access bits, with the kernel's values (BPF_DEVCG_ACC_*).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Access(pub u8);

impl Access {
    /// mknod
    pub const MKNOD: u8 = 1;
    /// read
    pub const READ: u8 = 2;
    /// write
    pub const WRITE: u8 = 4;
    /// All three.
    pub const ALL: Access = Access(7);

    /// Parse "rwm" letters; an empty string means all three (as crun does).
    pub fn parse(s: &str) -> Option<Access> {
        if s.is_empty() {
            return Some(Access::ALL);
        }
        let mut bits = 0;
        for c in s.chars() {
            bits |= match c {
                'r' => Self::READ,
                'w' => Self::WRITE,
                'm' => Self::MKNOD,
                _ => return None,
            };
        }
        Some(Access(bits))
    }

    /// No bit set.
    pub fn is_empty(self) -> bool {
        self.0 == 0
    }
}

impl std::fmt::Display for Access {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for (bit, c) in [(Self::READ, 'r'), (Self::WRITE, 'w'), (Self::MKNOD, 'm')] {
            if self.0 & bit != 0 {
                write!(f, "{c}")?;
            }
        }
        Ok(())
    }
}

/// One allow or deny rule.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rule {
    /// `None` is type 'a': every device, whatever major/minor say.
    pub dev_type: Option<DevType>,
    /// `None` is the wildcard '*'.
    pub major: Option<u32>,
    /// `None` is the wildcard '*'.
    pub minor: Option<u32>,
    /// What the rule allows or denies.
    pub access: Access,
    /// Allow or deny.
    pub allow: bool,
}

impl Rule {
    const fn allow_char(major: Option<u32>, minor: Option<u32>, access: u8) -> Rule {
        Rule {
            dev_type: Some(DevType::Char),
            major,
            minor,
            access: Access(access),
            allow: true,
        }
    }
}

impl std::fmt::Display for Rule {
    /// The devices.allow/deny notation: "c 1:3 rwm", "a *:* rwm".
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let num = |n: Option<u32>| n.map_or("*".to_string(), |n| n.to_string());
        match self.dev_type {
            None => write!(f, "a *:* {}", self.access),
            Some(t) => write!(
                f,
                "{} {}:{} {}",
                t.letter(),
                num(self.major),
                num(self.minor),
                self.access
            ),
        }
    }
}

/// The rules runc appends to every container's list (its AllowedDevices).
pub fn default_rules() -> Vec<Rule> {
    const RWM: u8 = 7;
    vec![
        Rule::allow_char(None, None, Access::MKNOD),
        Rule {
            dev_type: Some(DevType::Block),
            ..Rule::allow_char(None, None, Access::MKNOD)
        },
        Rule::allow_char(Some(1), Some(3), RWM),    // null
        Rule::allow_char(Some(1), Some(8), RWM),    // random
        Rule::allow_char(Some(1), Some(7), RWM),    // full
        Rule::allow_char(Some(5), Some(0), RWM),    // tty
        Rule::allow_char(Some(1), Some(5), RWM),    // zero
        Rule::allow_char(Some(1), Some(9), RWM),    // urandom
        Rule::allow_char(Some(136), None, RWM),     // pts (and /dev/console, a pts)
        Rule::allow_char(Some(5), Some(2), RWM),    // ptmx
        Rule::allow_char(Some(10), Some(200), RWM), // tun
    ]
}

/// Convert and validate the config's rules.
pub fn from_config(rules: &[LinuxDeviceCgroup]) -> Result<Vec<Rule>> {
    rules
        .iter()
        .enumerate()
        .map(|(i, r)| {
            let bad = |why: String| Error::Config(format!("{S}[{i}]: {why}"));
            let dev_type = match r.typ() {
                None | Some(LinuxDeviceType::A) => None,
                Some(LinuxDeviceType::C) => Some(DevType::Char),
                Some(LinuxDeviceType::B) => Some(DevType::Block),
                Some(other) => {
                    return Err(bad(format!(
                        "invalid cgroup device type {:?} (a, b or c)",
                        other.as_str()
                    )));
                }
            };
            let number = |what: &str, n: Option<i64>| match n {
                None | Some(-1) => Ok(None),
                Some(n) if (0..=i32::MAX as i64).contains(&n) => Ok(Some(n as u32)),
                Some(n) => Err(bad(format!("invalid {what} number {n}"))),
            };
            let access = r.access().as_deref().unwrap_or("");
            Ok(Rule {
                dev_type,
                major: number("major", r.major())?,
                minor: number("minor", r.minor())?,
                access: Access::parse(access)
                    .ok_or_else(|| bad(format!("invalid access {access:?} (letters r, w, m)")))?,
                allow: r.allow(),
            })
        })
        .collect()
}

/// What a container's device rules amount to: its config's rules, then [`default_rules`],
/// evaluated from the kernel's initial state (allow everything).
pub fn effective(config: &[LinuxDeviceCgroup]) -> Result<RuleSet> {
    let mut set = RuleSet::default();
    for r in from_config(config)?.iter().chain(default_rules().iter()) {
        set.apply(r)
            .map_err(|e| Error::Config(format!("{S}: {e}")))?;
    }
    Ok(set)
}

/// Enforce `config`'s rules for the cgroup: the v1 devices controller where the container
/// has one, otherwise an eBPF filter on its cgroup2 directory.
pub(super) fn set(cg: &Cgroup, config: &[LinuxDeviceCgroup]) -> Result<()> {
    let rules = effective(config)?;
    if !cg.v2
        && let Some(dir) = cg.paths.get("devices")
    {
        return v1::apply(dir, &rules);
    }
    match cg.unified_dir() {
        Some(dir) => bpf::attach(dir, &rules),
        None => Err(Error::Unsupported(format!(
            "{S}: neither the v1 devices controller nor cgroup v2 is available"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use oci_spec::runtime::LinuxDeviceCgroupBuilder;

    fn oci(
        allow: bool,
        typ: Option<LinuxDeviceType>,
        major: Option<i64>,
        minor: Option<i64>,
        access: &str,
    ) -> LinuxDeviceCgroup {
        let mut b = LinuxDeviceCgroupBuilder::default()
            .allow(allow)
            .access(access);
        if let Some(t) = typ {
            b = b.typ(t);
        }
        if let Some(m) = major {
            b = b.major(m);
        }
        if let Some(m) = minor {
            b = b.minor(m);
        }
        b.build().unwrap()
    }

    #[test]
    fn config_rules_are_validated() {
        let ok = from_config(&[oci(true, Some(LinuxDeviceType::C), Some(1), None, "rw")]).unwrap();
        assert_eq!(ok[0].to_string(), "c 1:* rw");
        let err = from_config(&[oci(true, Some(LinuxDeviceType::P), None, None, "r")]);
        assert!(
            err.unwrap_err()
                .to_string()
                .contains("invalid cgroup device type \"p\"")
        );
        let err = from_config(&[oci(true, None, None, None, "rx")]);
        assert!(
            err.unwrap_err()
                .to_string()
                .contains("[0]: invalid access \"rx\"")
        );
        let err = from_config(&[oci(true, Some(LinuxDeviceType::C), Some(-5), None, "r")]);
        assert!(
            err.unwrap_err()
                .to_string()
                .contains("invalid major number -5")
        );
    }

    #[test]
    fn deny_all_keeps_the_default_devices() {
        let set = effective(&[oci(false, None, None, None, "rwm")]).unwrap();
        assert!(!set.default_allow);
        assert!(set.allows(DevType::Char, 1, 3, Access::READ | Access::WRITE));
        assert!(set.allows(DevType::Char, 136, 7, Access::READ));
        assert!(set.allows(DevType::Block, 8, 0, Access::MKNOD));
        assert!(!set.allows(DevType::Block, 8, 0, Access::READ));
        assert!(!set.allows(DevType::Char, 1, 11, Access::READ));
        // No rules at all: everything stays allowed, as the kernel's default.
        let set = effective(&[]).unwrap();
        assert!(set.default_allow && set.exceptions.is_empty());
    }
}
