//! `linux.seccomp`: the OCI profile compiled with libseccomp.
//!
//! The filter is built in the runtime process before the container's init is cloned, so the
//! init only has to load it (one seccomp(2) call) at the last moment before exec.

use libseccomp::{
    ScmpAction, ScmpArch, ScmpArgCompare, ScmpCompareOp, ScmpFilterContext, ScmpSyscall,
};
use oci_spec::runtime::{
    LinuxSeccomp, LinuxSeccompAction, LinuxSeccompFilterFlag, LinuxSeccompOperator,
};

use crate::error::{Error, Result};

/// A compiled filter, ready to load.
pub struct Filter {
    ctx: ScmpFilterContext,
    /// Whether the profile asks for a user-notification listener (SCMP_ACT_NOTIFY).
    pub notify: bool,
}

fn action(a: LinuxSeccompAction, errno: Option<u32>) -> ScmpAction {
    match a {
        LinuxSeccompAction::ScmpActKill | LinuxSeccompAction::ScmpActKillThread => {
            ScmpAction::KillThread
        }
        LinuxSeccompAction::ScmpActKillProcess => ScmpAction::KillProcess,
        LinuxSeccompAction::ScmpActTrap => ScmpAction::Trap,
        LinuxSeccompAction::ScmpActErrno => {
            ScmpAction::Errno(errno.unwrap_or(libc::EPERM as u32) as i32)
        }
        LinuxSeccompAction::ScmpActNotify => ScmpAction::Notify,
        LinuxSeccompAction::ScmpActTrace => {
            ScmpAction::Trace(errno.unwrap_or(libc::EPERM as u32) as u16)
        }
        LinuxSeccompAction::ScmpActLog => ScmpAction::Log,
        LinuxSeccompAction::ScmpActAllow => ScmpAction::Allow,
    }
}

fn compare(
    op: LinuxSeccompOperator,
    index: u32,
    value: u64,
    value_two: Option<u64>,
) -> ScmpArgCompare {
    let op = match op {
        LinuxSeccompOperator::ScmpCmpNe => ScmpCompareOp::NotEqual,
        LinuxSeccompOperator::ScmpCmpLt => ScmpCompareOp::Less,
        LinuxSeccompOperator::ScmpCmpLe => ScmpCompareOp::LessOrEqual,
        LinuxSeccompOperator::ScmpCmpEq => ScmpCompareOp::Equal,
        LinuxSeccompOperator::ScmpCmpGe => ScmpCompareOp::GreaterEqual,
        LinuxSeccompOperator::ScmpCmpGt => ScmpCompareOp::Greater,
        // The OCI form puts the mask in `value` and the datum in `valueTwo`.
        LinuxSeccompOperator::ScmpCmpMaskedEq => {
            return ScmpArgCompare::new(
                index,
                ScmpCompareOp::MaskedEqual(value),
                value_two.unwrap_or(0),
            );
        }
    };
    ScmpArgCompare::new(index, op, value)
}

fn err(what: String) -> impl FnOnce(libseccomp::error::SeccompError) -> Error {
    move |e| Error::Config(format!("linux.seccomp: {what}: {e}"))
}

/// Compile a profile.
pub fn compile(profile: &LinuxSeccomp) -> Result<Filter> {
    let default = action(profile.default_action(), profile.default_errno_ret());
    let mut ctx = ScmpFilterContext::new(default).map_err(err("create filter".into()))?;
    // The runtime sets no_new_privs itself when the config asks; libseccomp must not.
    ctx.set_ctl_nnp(false)
        .map_err(err("clear NNP attribute".into()))?;
    for arch in profile.architectures().iter().flatten() {
        let name = serde_json::to_value(arch)
            .ok()
            .and_then(|v| v.as_str().map(str::to_string))
            .unwrap_or_default();
        let scmp: ScmpArch = name
            .parse()
            .map_err(|_| Error::Config(format!("linux.seccomp: unknown architecture {name}")))?;
        ctx.add_arch(scmp)
            .map_err(err(format!("add architecture {name}")))?;
    }
    for flag in profile.flags().iter().flatten() {
        match flag {
            LinuxSeccompFilterFlag::SeccompFilterFlagTsync => {
                ctx.set_ctl_tsync(true).map_err(err("flag TSYNC".into()))?;
            }
            LinuxSeccompFilterFlag::SeccompFilterFlagLog => {
                ctx.set_ctl_log(true).map_err(err("flag LOG".into()))?;
            }
            LinuxSeccompFilterFlag::SeccompFilterFlagSpecAllow => {
                ctx.set_ctl_ssb(true)
                    .map_err(err("flag SPEC_ALLOW".into()))?;
            }
            LinuxSeccompFilterFlag::SeccompFilterFlagWaitKillableRecv => {
                ctx.set_ctl_waitkill(true)
                    .map_err(err("flag WAIT_KILLABLE_RECV".into()))?;
            }
        }
    }
    let mut notify = matches!(default, ScmpAction::Notify);
    for rule in profile.syscalls().iter().flatten() {
        let act = action(rule.action(), rule.errno_ret());
        // A rule that repeats the default action is a no-op that libseccomp rejects.
        if act == default {
            continue;
        }
        notify |= matches!(act, ScmpAction::Notify);
        let args = rule.args().clone().unwrap_or_default();
        let conds: Vec<ScmpArgCompare> = args
            .iter()
            .map(|a| compare(a.op(), a.index() as u32, a.value(), a.value_two()))
            .collect();
        // As runc: conditions on distinct arguments form one rule (all must match); several
        // conditions on the same argument become one rule each (any may match).
        let mut counts = [0u8; 6];
        for a in &args {
            if a.index() >= 6 {
                return Err(Error::Config(format!(
                    "linux.seccomp: argument index {} is out of range (0-5)",
                    a.index()
                )));
            }
            counts[a.index()] += 1;
        }
        let split = counts.iter().any(|c| *c > 1);
        for name in rule.names() {
            // Syscalls this libseccomp or architecture does not know are skipped, as runc does.
            let Ok(sc) = ScmpSyscall::from_name(name) else {
                continue;
            };
            let res = if conds.is_empty() {
                ctx.add_rule(act, sc)
            } else if split {
                conds
                    .iter()
                    .try_for_each(|c| ctx.add_rule_conditional(act, sc, &[*c]).map(|_| ()))
                    .map(|_| &mut ctx)
            } else {
                ctx.add_rule_conditional(act, sc, &conds)
            };
            res.map_err(err(format!("add rule for {name}")))?;
        }
    }
    if notify {
        return Err(Error::Unsupported(
            "linux.seccomp: SCMP_ACT_NOTIFY (seccomp user notification) is not supported yet"
                .into(),
        ));
    }
    Ok(Filter { ctx, notify })
}

impl Filter {
    /// Load the filter into the calling process.
    pub fn load(&self) -> Result<()> {
        self.ctx
            .load()
            .map_err(|e| Error::Other(format!("load seccomp filter: {e}")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn profile(json: &str) -> LinuxSeccomp {
        serde_json::from_str(json).unwrap()
    }

    #[test]
    fn compiles_a_docker_like_profile() {
        let p = profile(
            r#"{"defaultAction":"SCMP_ACT_ERRNO","defaultErrnoRet":1,
                "architectures":["SCMP_ARCH_X86_64","SCMP_ARCH_X86","SCMP_ARCH_X32"],
                "syscalls":[
                  {"names":["read","write","no_such_syscall_xyz"],"action":"SCMP_ACT_ALLOW"},
                  {"names":["personality"],"action":"SCMP_ACT_ALLOW",
                   "args":[{"index":0,"value":0,"op":"SCMP_CMP_EQ"},
                           {"index":0,"value":8,"op":"SCMP_CMP_EQ"}]},
                  {"names":["clone"],"action":"SCMP_ACT_ALLOW",
                   "args":[{"index":0,"value":2114060288,"valueTwo":0,"op":"SCMP_CMP_MASKED_EQ"}]},
                  {"names":["mkdir"],"action":"SCMP_ACT_ERRNO","errnoRet":1}
                ]}"#,
        );
        let f = compile(&p).unwrap();
        assert!(!f.notify);
    }

    #[test]
    fn rejects_bad_argument_index() {
        let p = profile(
            r#"{"defaultAction":"SCMP_ACT_ALLOW","syscalls":[{"names":["read"],
                "action":"SCMP_ACT_ERRNO","args":[{"index":9,"value":0,"op":"SCMP_CMP_EQ"}]}]}"#,
        );
        assert!(compile(&p).is_err());
    }
}
