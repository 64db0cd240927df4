//! The OCI features document (`features`): what this runtime build and this host support,
//! so engines can decide before they create a container.

use serde_json::{Value, json};

/// Every mount option `mounts` understands.
pub const MOUNT_OPTIONS: &[&str] = &[
    "async",
    "atime",
    "bind",
    "defaults",
    "dev",
    "diratime",
    "dirsync",
    "exec",
    "iversion",
    "lazytime",
    "loud",
    "mand",
    "noatime",
    "nodev",
    "nodiratime",
    "noexec",
    "noiversion",
    "nolazytime",
    "nomand",
    "norelatime",
    "nostrictatime",
    "nosuid",
    "nosymfollow",
    "private",
    "ratime",
    "rbind",
    "rdev",
    "rdiratime",
    "relatime",
    "remount",
    "rexec",
    "rnoatime",
    "rnodev",
    "rnodiratime",
    "rnoexec",
    "rnorelatime",
    "rnostrictatime",
    "rnosuid",
    "rnosymfollow",
    "ro",
    "rprivate",
    "rrelatime",
    "rro",
    "rrw",
    "rshared",
    "rslave",
    "rstrictatime",
    "rsuid",
    "rsymfollow",
    "runbindable",
    "rw",
    "shared",
    "silent",
    "slave",
    "strictatime",
    "suid",
    "symfollow",
    "sync",
    "tmpcopyup",
    "unbindable",
];

/// The features document.
pub fn document() -> Value {
    let last = crate::caps::last_cap() as usize;
    let caps: Vec<&str> = crate::caps::NAMES.iter().take(last + 1).copied().collect();
    let layout = crate::cgroups::detect().ok();
    json!({
        "ociVersionMin": "1.0.0",
        "ociVersionMax": crate::OCI_VERSION,
        "hooks": ["prestart", "createRuntime", "createContainer", "startContainer", "poststart", "poststop"],
        "mountOptions": MOUNT_OPTIONS,
        "linux": {
            "namespaces": ["cgroup", "ipc", "mount", "network", "pid", "time", "user", "uts"],
            "capabilities": caps,
            "cgroup": {
                "v1": layout.as_ref().is_some_and(|l| !l.v1.is_empty()),
                "v2": layout.as_ref().is_some_and(|l| l.unified.is_some()),
                "systemd": false,
                "systemdUser": false,
                "rdma": true
            },
            "seccomp": {
                "enabled": true,
                "actions": ["SCMP_ACT_ALLOW", "SCMP_ACT_ERRNO", "SCMP_ACT_KILL", "SCMP_ACT_KILL_PROCESS",
                            "SCMP_ACT_KILL_THREAD", "SCMP_ACT_LOG", "SCMP_ACT_TRACE", "SCMP_ACT_TRAP"],
                "operators": ["SCMP_CMP_EQ", "SCMP_CMP_GE", "SCMP_CMP_GT", "SCMP_CMP_LE", "SCMP_CMP_LT",
                              "SCMP_CMP_MASKED_EQ", "SCMP_CMP_NE"],
                "archs": ["SCMP_ARCH_AARCH64", "SCMP_ARCH_ARM", "SCMP_ARCH_X32", "SCMP_ARCH_X86",
                          "SCMP_ARCH_X86_64"],
                "knownFlags": ["SECCOMP_FILTER_FLAG_LOG", "SECCOMP_FILTER_FLAG_SPEC_ALLOW",
                               "SECCOMP_FILTER_FLAG_TSYNC", "SECCOMP_FILTER_FLAG_WAIT_KILLABLE_RECV"],
                "supportedFlags": ["SECCOMP_FILTER_FLAG_LOG", "SECCOMP_FILTER_FLAG_SPEC_ALLOW",
                                   "SECCOMP_FILTER_FLAG_TSYNC"]
            },
            "apparmor": { "enabled": crate::lsm::apparmor_enabled() },
            "selinux": { "enabled": crate::lsm::selinux_enabled() },
            "intelRdt": { "enabled": false },
            "mountExtensions": { "idmap": { "enabled": false } }
        },
        "annotations": {
            "io.github.wharf.runtime.version": env!("CARGO_PKG_VERSION"),
            "org.opencontainers.runc.checkpoint.enabled": "false"
        }
    })
}
