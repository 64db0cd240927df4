//! The v1 devices controller's model, in memory: a default (allow or deny everything) plus
//! exceptions keyed by type, major and minor. Applying rules here gives exactly what the
//! kernel would hold after the same writes, which lets the runtime compute the fewest writes
//! from one state to another (no moment where a running container loses /dev/null) and
//! build an eBPF program with the same meaning.

use std::collections::BTreeMap;

use super::{Access, DevType, Rule};
use crate::error::{Error, Result};

/// Exception key: type, major (None = '*'), minor (None = '*').
pub type Key = (DevType, Option<u32>, Option<u32>);

/// A devices cgroup state.
#[derive(Debug, Clone)]
pub struct RuleSet {
    /// What happens to a device no exception matches.
    pub default_allow: bool,
    /// Devices that get the opposite of the default, with the access bits concerned.
    pub exceptions: BTreeMap<Key, Access>,
    /// Exception keys in the order rules first named them. The kernel lists its whitelist
    /// in insertion order, and the runtime spec asks that entries be applied in the listed
    /// order, so writes follow this order (not part of the state's meaning).
    order: Vec<Key>,
}

impl PartialEq for RuleSet {
    fn eq(&self, other: &Self) -> bool {
        self.default_allow == other.default_allow && self.exceptions == other.exceptions
    }
}

impl Eq for RuleSet {}

impl Default for RuleSet {
    /// A new cgroup under an unrestricted parent: everything allowed.
    fn default() -> Self {
        RuleSet {
            default_allow: true,
            exceptions: BTreeMap::new(),
            order: Vec::new(),
        }
    }
}

impl RuleSet {
    /// Apply one rule as a write to devices.allow / devices.deny would.
    pub fn apply(&mut self, rule: &Rule) -> Result<()> {
        let Some(t) = rule.dev_type else {
            // 'a': a new default, no exceptions.
            *self = RuleSet {
                default_allow: rule.allow,
                exceptions: BTreeMap::new(),
                order: Vec::new(),
            };
            return Ok(());
        };
        let key = (t, rule.major, rule.minor);
        if rule.allow == self.default_allow {
            self.remove(key, rule)
        } else {
            if !self.order.contains(&key) {
                self.order.push(key);
            }
            let e = self.exceptions.entry(key).or_default();
            e.0 |= rule.access.0;
            Ok(())
        }
    }

    /// Removing an exception only takes away exact matches; a rule that would have to carve
    /// a hole out of a wider exception cannot be expressed by the kernel, so it is refused
    /// rather than silently ignored.
    fn remove(&mut self, key: Key, rule: &Rule) -> Result<()> {
        let (t, major, minor) = key;
        for wider in [(t, None, minor), (t, major, None), (t, None, None)] {
            if wider == key {
                continue;
            }
            if let Some(a) = self.exceptions.get(&wider)
                && a.0 & rule.access.0 != 0
            {
                return Err(Error::Config(format!(
                    "rule \"{rule}\" would punch a hole in the wider rule \"{}\", which the \
                     devices controller cannot express",
                    Rule {
                        dev_type: Some(t),
                        major: wider.1,
                        minor: wider.2,
                        access: *a,
                        allow: !self.default_allow,
                    }
                )));
            }
        }
        if let Some(a) = self.exceptions.get_mut(&key) {
            a.0 &= !rule.access.0;
            if a.is_empty() {
                self.exceptions.remove(&key);
            }
        }
        Ok(())
    }

    /// Whether `access` (bits) on the device is allowed, as the kernel decides: by default
    /// deny, an allow exception must cover every bit asked for; by default allow, a deny
    /// exception that shares any bit refuses.
    pub fn allows(&self, t: DevType, major: u32, minor: u32, access: u8) -> bool {
        let mut matching = self.exceptions.iter().filter(|((et, emaj, emin), _)| {
            *et == t && emaj.is_none_or(|m| m == major) && emin.is_none_or(|m| m == minor)
        });
        if self.default_allow {
            !matching.any(|(_, a)| access & a.0 != 0)
        } else {
            matching.any(|(_, a)| access & !a.0 == 0)
        }
    }

    /// The state a v1 devices.list shows. In allow-default mode the kernel prints only
    /// "a *:* rwm" and hides its exceptions.
    pub fn from_list(text: &str) -> Result<RuleSet> {
        let mut set = RuleSet {
            default_allow: false,
            exceptions: BTreeMap::new(),
            order: Vec::new(),
        };
        for line in text.lines().filter(|l| !l.trim().is_empty()) {
            let rule = parse_list_line(line)
                .ok_or_else(|| Error::Other(format!("malformed devices.list line {line:?}")))?;
            set.apply(&rule)?;
        }
        Ok(set)
    }

    /// The rules that turn `self` into `target`, in order: a reset when the default
    /// changes (or when `self` allows by default, whose hidden exceptions are unknown), then
    /// the access each exception loses, then what each gains.
    pub fn transition(&self, target: &RuleSet) -> Vec<Rule> {
        let mut out = Vec::new();
        let empty = BTreeMap::new();
        let base = if self.default_allow || self.default_allow != target.default_allow {
            out.push(Rule {
                dev_type: None,
                major: None,
                minor: None,
                access: Access::ALL,
                allow: target.default_allow,
            });
            &empty
        } else {
            &self.exceptions
        };
        let rule = |(t, major, minor): Key, access: u8, allow: bool| Rule {
            dev_type: Some(t),
            major,
            minor,
            access: Access(access),
            allow,
        };
        for (key, old) in base {
            let new = target.exceptions.get(key).copied().unwrap_or_default();
            let lost = old.0 & !new.0;
            if lost != 0 {
                out.push(rule(*key, lost, target.default_allow));
            }
        }
        let in_order = target
            .order
            .iter()
            .filter(|k| target.exceptions.contains_key(k))
            .chain(
                target
                    .exceptions
                    .keys()
                    .filter(|k| !target.order.contains(k)),
            );
        for key in in_order {
            let new = &target.exceptions[key];
            let old = base.get(key).copied().unwrap_or_default();
            let gained = new.0 & !old.0;
            if gained != 0 {
                out.push(rule(*key, gained, !target.default_allow));
            }
        }
        out
    }
}

/// "c 1:3 rwm" / "a *:* rwm" as an allow rule.
fn parse_list_line(line: &str) -> Option<Rule> {
    let mut parts = line.split_whitespace();
    let t = parts.next()?;
    let (major, minor) = parts.next()?.split_once(':')?;
    let access = Access::parse(parts.next()?)?;
    let num = |s: &str| -> Option<Option<u32>> {
        if s == "*" {
            Some(None)
        } else {
            s.parse().ok().map(Some)
        }
    };
    let dev_type = match t {
        "a" => None,
        "c" => Some(DevType::Char),
        "b" => Some(DevType::Block),
        _ => return None,
    };
    Some(Rule {
        dev_type,
        major: num(major)?,
        minor: num(minor)?,
        access,
        allow: true,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(s: &str, allow: bool) -> Rule {
        let mut rule = parse_list_line(s).unwrap();
        rule.allow = allow;
        rule
    }

    #[test]
    fn deny_default_with_exceptions() {
        let mut set = RuleSet::default();
        set.apply(&r("a *:* rwm", false)).unwrap();
        set.apply(&r("c 1:3 rw", true)).unwrap();
        set.apply(&r("c 1:3 m", true)).unwrap();
        set.apply(&r("c 1:5 rwm", true)).unwrap();
        set.apply(&r("c 1:5 w", false)).unwrap();
        assert!(!set.default_allow);
        assert_eq!(
            set.exceptions[&(DevType::Char, Some(1), Some(3))],
            Access(7)
        );
        assert_eq!(
            set.exceptions[&(DevType::Char, Some(1), Some(5))],
            Access(3)
        );
        assert!(set.allows(DevType::Char, 1, 5, Access::READ));
        assert!(!set.allows(DevType::Char, 1, 5, Access::WRITE));
    }

    #[test]
    fn holes_in_wildcards_are_refused() {
        let mut set = RuleSet::default();
        set.apply(&r("a *:* rwm", false)).unwrap();
        set.apply(&r("c 136:* rwm", true)).unwrap();
        let err = set.apply(&r("c 136:2 r", false)).unwrap_err().to_string();
        assert!(err.contains("punch a hole"), "{err}");
        // Same for a blacklist.
        let mut set = RuleSet::default();
        set.apply(&r("c *:* r", false)).unwrap();
        assert!(set.apply(&r("c 1:3 r", true)).is_err());
    }

    #[test]
    fn list_round_trip_and_transitions() {
        let list = "c 1:3 rwm\nc 136:* rwm\nb *:* m\n";
        let cur = RuleSet::from_list(list).unwrap();
        assert!(!cur.default_allow);
        let mut target = cur.clone();
        target.apply(&r("c 136:* rwm", false)).unwrap();
        target.apply(&r("c 1:11 r", true)).unwrap();
        let steps: Vec<(String, bool)> = cur
            .transition(&target)
            .iter()
            .map(|r| (r.to_string(), r.allow))
            .collect();
        assert_eq!(
            steps,
            [
                ("c 136:* rwm".to_string(), false),
                ("c 1:11 r".to_string(), true)
            ]
        );
        // Nothing to do between equal states.
        assert!(target.transition(&target).is_empty());
        // From allow-all, the exceptions are unknown: reset first.
        let all = RuleSet::from_list("a *:* rwm\n").unwrap();
        assert!(all.default_allow);
        let steps = all.transition(&cur);
        assert_eq!(steps[0].to_string(), "a *:* rwm");
        assert!(!steps[0].allow);
        assert_eq!(steps.len(), 1 + cur.exceptions.len());
        let mut replay = all.clone();
        for s in &steps {
            replay.apply(s).unwrap();
        }
        assert_eq!(replay, cur);
    }
}
