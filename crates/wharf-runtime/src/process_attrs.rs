//! Per-process settings of `process` and `linux`: rlimits, sysctls, oom_score_adj, I/O
//! priority, scheduler, CPU affinity, personality, umask, LSM labels, session keyring.

use std::collections::HashMap;

use oci_spec::runtime::{
    IOPriorityClass, LinuxPersonalityDomain, LinuxSchedulerFlag, LinuxSchedulerPolicy,
    PosixRlimitType, Process,
};

use crate::error::{Context, Error, Result};
use crate::sys;

fn rlimit_resource(t: PosixRlimitType) -> (libc::__rlimit_resource_t, &'static str) {
    match t {
        PosixRlimitType::RlimitCpu => (libc::RLIMIT_CPU, "RLIMIT_CPU"),
        PosixRlimitType::RlimitFsize => (libc::RLIMIT_FSIZE, "RLIMIT_FSIZE"),
        PosixRlimitType::RlimitData => (libc::RLIMIT_DATA, "RLIMIT_DATA"),
        PosixRlimitType::RlimitStack => (libc::RLIMIT_STACK, "RLIMIT_STACK"),
        PosixRlimitType::RlimitCore => (libc::RLIMIT_CORE, "RLIMIT_CORE"),
        PosixRlimitType::RlimitRss => (libc::RLIMIT_RSS, "RLIMIT_RSS"),
        PosixRlimitType::RlimitNproc => (libc::RLIMIT_NPROC, "RLIMIT_NPROC"),
        PosixRlimitType::RlimitNofile => (libc::RLIMIT_NOFILE, "RLIMIT_NOFILE"),
        PosixRlimitType::RlimitMemlock => (libc::RLIMIT_MEMLOCK, "RLIMIT_MEMLOCK"),
        PosixRlimitType::RlimitAs => (libc::RLIMIT_AS, "RLIMIT_AS"),
        PosixRlimitType::RlimitLocks => (libc::RLIMIT_LOCKS, "RLIMIT_LOCKS"),
        PosixRlimitType::RlimitSigpending => (libc::RLIMIT_SIGPENDING, "RLIMIT_SIGPENDING"),
        PosixRlimitType::RlimitMsgqueue => (libc::RLIMIT_MSGQUEUE, "RLIMIT_MSGQUEUE"),
        PosixRlimitType::RlimitNice => (libc::RLIMIT_NICE, "RLIMIT_NICE"),
        PosixRlimitType::RlimitRtprio => (libc::RLIMIT_RTPRIO, "RLIMIT_RTPRIO"),
        PosixRlimitType::RlimitRttime => (libc::RLIMIT_RTTIME, "RLIMIT_RTTIME"),
    }
}

/// process.rlimits. Raising a hard limit needs CAP_SYS_RESOURCE, which some hosts withhold:
/// the error then names the limit and the cause.
pub fn set_rlimits(proc_: &Process) -> Result<()> {
    let mut seen = std::collections::HashSet::new();
    for rl in proc_.rlimits().iter().flatten() {
        let (res, name) = rlimit_resource(rl.typ());
        if !seen.insert(name) {
            return Err(Error::Config(format!(
                "process.rlimits: {name} appears twice"
            )));
        }
        let lim = libc::rlimit {
            rlim_cur: rl.soft(),
            rlim_max: rl.hard(),
        };
        // SAFETY: setrlimit with a valid struct.
        if unsafe { libc::setrlimit(res, &lim) } != 0 {
            let err = std::io::Error::last_os_error();
            let hint = if err.raw_os_error() == Some(libc::EPERM) {
                " (raising a hard limit needs CAP_SYS_RESOURCE, which this host does not grant)"
            } else {
                ""
            };
            return Err(Error::os(
                format!(
                    "set process.rlimits {name} to soft {} hard {}{hint}",
                    rl.soft(),
                    rl.hard()
                ),
                err,
            ));
        }
    }
    Ok(())
}

/// process.oomScoreAdj, written for `pid` by the runtime. Lowering the score below its
/// current floor needs CAP_SYS_RESOURCE: the error says so instead of failing obscurely.
pub fn set_oom_score_adj(pid: i32, value: i32) -> Result<()> {
    let path = format!("/proc/{pid}/oom_score_adj");
    std::fs::write(&path, value.to_string()).map_err(|e| {
        let why = if e.raw_os_error() == Some(libc::EACCES) || e.raw_os_error() == Some(libc::EPERM)
        {
            ": lowering oom_score_adj needs CAP_SYS_RESOURCE, which this host does not grant"
        } else {
            ""
        };
        Error::os(format!("set process.oomScoreAdj to {value}{why}"), e)
    })
}

/// linux.sysctl, written through the container's /proc/sys (validated to be namespaced).
pub fn write_sysctls(sysctl: &HashMap<String, String>) -> Result<()> {
    for (key, value) in sysctl {
        if key.contains("..") || key.contains('\0') {
            return Err(Error::Config(format!("linux.sysctl: invalid key {key:?}")));
        }
        let path = format!("/proc/sys/{}", key.replace('.', "/"));
        crate::procfs::write(&path, value).ctx(|| format!("set linux.sysctl {key}={value:?}"))?;
    }
    Ok(())
}

/// A fresh session keyring, so containers do not share the caller's keys (runc's default;
/// `--no-new-keyring` skips it). Failures are ignored, as kernels may restrict keyctl.
///
/// The keyring is anonymous (`_ses`), where runc names it `_ses.<id>`: joining a named
/// keyring first looks the name up among every named keyring of the user namespace, one
/// string comparison each, so with a keyring per container every start paid for all the
/// containers running (a quarter of a millisecond at 1000). An anonymous one is made
/// without a search, and no other process can join it by name.
pub fn new_session_keyring() {
    const KEYCTL_JOIN_SESSION_KEYRING: libc::c_long = 1;
    // SAFETY: keyctl with a null name makes an anonymous session keyring.
    unsafe {
        libc::syscall(
            libc::SYS_keyctl,
            KEYCTL_JOIN_SESSION_KEYRING,
            std::ptr::null::<libc::c_char>(),
        )
    };
}

/// Attributes applied in the container process just before the user switch: personality,
/// I/O priority, scheduler, final CPU affinity, umask and LSM labels.
pub fn apply_before_user(
    proc_: &Process,
    personality: Option<&oci_spec::runtime::LinuxPersonality>,
) -> Result<()> {
    if let Some(persona) = personality {
        let domain = match persona.domain() {
            LinuxPersonalityDomain::PerLinux => 0x0000,
            LinuxPersonalityDomain::PerLinux32 => 0x0008,
        };
        sys::set_personality(domain).ctx(|| "set linux.personality".into())?;
    }
    if let Some(io) = proc_.io_priority() {
        let class = match io.class() {
            IOPriorityClass::IoprioClassRt => 1,
            IOPriorityClass::IoprioClassBe => 2,
            IOPriorityClass::IoprioClassIdle => 3,
        };
        if !(0..=7).contains(&io.priority()) {
            return Err(Error::Config(format!(
                "process.ioPriority.priority {} is out of range (0-7)",
                io.priority()
            )));
        }
        sys::set_io_priority(class, io.priority() as u32)
            .ctx(|| "set process.ioPriority".into())?;
    }
    if let Some(s) = proc_.scheduler() {
        set_scheduler(s)?;
    }
    if let Some(aff) = proc_.exec_cpu_affinity()
        && let Some(cpus) = aff.cpu_affinity_final()
    {
        set_affinity(cpus).ctx(|| format!("set process.execCPUAffinity.final {cpus:?}"))?;
    }
    if let Some(mask) = proc_.user().umask() {
        rustix::process::umask(rustix::fs::Mode::from_raw_mode(mask & 0o777));
    }
    if let Some(profile) = proc_.apparmor_profile().as_ref().filter(|p| !p.is_empty()) {
        crate::lsm::apparmor_exec(profile)?;
    }
    if let Some(label) = proc_.selinux_label().as_ref().filter(|p| !p.is_empty()) {
        crate::lsm::selinux_exec(label)?;
    }
    Ok(())
}

fn set_scheduler(s: &oci_spec::runtime::Scheduler) -> Result<()> {
    let policy = match s.policy() {
        LinuxSchedulerPolicy::SchedOther => 0,
        LinuxSchedulerPolicy::SchedFifo => 1,
        LinuxSchedulerPolicy::SchedRr => 2,
        LinuxSchedulerPolicy::SchedBatch => 3,
        LinuxSchedulerPolicy::SchedIso => 4,
        LinuxSchedulerPolicy::SchedIdle => 5,
        LinuxSchedulerPolicy::SchedDeadline => 6,
    };
    let mut flags = 0u64;
    for f in s.flags().iter().flatten() {
        flags |= match f {
            LinuxSchedulerFlag::SchedResetOnFork => 0x01,
            LinuxSchedulerFlag::SchedFlagReclaim => 0x02,
            LinuxSchedulerFlag::SchedFlagDLOverrun => 0x04,
            LinuxSchedulerFlag::SchedFlagKeepPolicy => 0x08,
            LinuxSchedulerFlag::SchedFlagKeepParams => 0x10,
            LinuxSchedulerFlag::SchedFlagUtilClampMin => 0x20,
            LinuxSchedulerFlag::SchedFlagUtilClampMax => 0x40,
        };
    }
    let mut attr = sys::SchedAttr {
        sched_policy: policy,
        sched_flags: flags,
        sched_nice: s.nice().unwrap_or(0),
        sched_priority: s.priority().unwrap_or(0).max(0) as u32,
        sched_runtime: s.runtime().unwrap_or(0),
        sched_deadline: s.deadline().unwrap_or(0),
        sched_period: s.period().unwrap_or(0),
        ..Default::default()
    };
    sys::sched_setattr(&mut attr).ctx(|| format!("set process.scheduler (policy {:?})", s.policy()))
}

/// Parse a CPU list like `0-3,7` into a mask and set it as the calling thread's affinity.
pub fn set_affinity(list: &str) -> std::io::Result<()> {
    let mut set = rustix::thread::CpuSet::new();
    for part in list.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let (a, b) = match part.split_once('-') {
            Some((a, b)) => (a, b),
            None => (part, part),
        };
        let bad = || {
            std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                format!("bad CPU range {part:?}"),
            )
        };
        let a: usize = a.parse().map_err(|_| bad())?;
        let b: usize = b.parse().map_err(|_| bad())?;
        if a > b || b >= rustix::thread::CpuSet::MAX_CPU {
            return Err(bad());
        }
        for cpu in a..=b {
            set.set(cpu);
        }
    }
    rustix::thread::sched_setaffinity(None, &set).map_err(Into::into)
}
