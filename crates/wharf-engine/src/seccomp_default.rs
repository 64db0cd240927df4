//! The default seccomp profile of Wharf's containers (Kubernetes' `RuntimeDefault`).
//!
//! It refuses (EPERM) what docker's and containerd's default profiles refuse to a container
//! without extra capabilities: kernel modules, keyrings, BPF, perf, mount and namespace
//! manipulation, clock setting, reboot, swap, ptrace-like access to other processes' memory,
//! handle-based opens, userfaultfd and io_uring; clone3 answers ENOSYS so libcs fall back to
//! clone, whose namespace flags are refused. Unlike docker's list of allowed calls, it lists
//! what is refused, so a syscall this libseccomp does not know never breaks a container (the
//! price: a new dangerous syscall is allowed until it is listed here). personality(2) is not
//! filtered by argument, as docker does.

use serde_json::{Value, json};

const EPERM: u32 = 1;
const ENOSYS: u32 = 38;

/// Syscalls refused with EPERM.
const DENIED: &[&str] = &[
    "acct",
    "add_key",
    "bpf",
    "clock_adjtime",
    "clock_adjtime64",
    "clock_settime",
    "clock_settime64",
    "create_module",
    "delete_module",
    "finit_module",
    "fsconfig",
    "fsmount",
    "fsopen",
    "fspick",
    "get_kernel_syms",
    "get_mempolicy",
    "init_module",
    "io_uring_enter",
    "io_uring_register",
    "io_uring_setup",
    "ioperm",
    "iopl",
    "kcmp",
    "kexec_file_load",
    "kexec_load",
    "keyctl",
    "lookup_dcookie",
    "mbind",
    "mount",
    "mount_setattr",
    "move_mount",
    "move_pages",
    "name_to_handle_at",
    "nfsservctl",
    "open_by_handle_at",
    "open_tree",
    "perf_event_open",
    "pivot_root",
    "process_vm_readv",
    "process_vm_writev",
    "query_module",
    "quotactl",
    "quotactl_fd",
    "reboot",
    "request_key",
    "set_mempolicy",
    "setns",
    "settimeofday",
    "stime",
    "swapoff",
    "swapon",
    "syslog",
    "sysfs",
    "_sysctl",
    "umount",
    "umount2",
    "unshare",
    "uselib",
    "userfaultfd",
    "ustat",
    "vm86",
    "vm86old",
];

/// CLONE_NEW* flags clone(2) may not carry.
const NAMESPACE_FLAGS: &[u64] = &[
    0x0002_0000, // CLONE_NEWNS
    0x0200_0000, // CLONE_NEWCGROUP
    0x0400_0000, // CLONE_NEWUTS
    0x0800_0000, // CLONE_NEWIPC
    0x1000_0000, // CLONE_NEWUSER
    0x2000_0000, // CLONE_NEWPID
    0x4000_0000, // CLONE_NEWNET
];

/// The profile as an OCI `linux.seccomp` object. `caps` are the container's capabilities:
/// like docker's profile, calls a capability already grants are not refused (CAP_SYS_ADMIN
/// lifts the mount/namespace rules, CAP_SYS_PTRACE the process_vm rules, and so on).
pub fn profile(caps: &[String]) -> Value {
    let has = |c: &str| caps.iter().any(|x| x == c);
    let lifted = |name: &str| -> bool {
        match name {
            "mount" | "umount" | "umount2" | "unshare" | "setns" | "pivot_root" | "fsconfig"
            | "fsmount" | "fsopen" | "fspick" | "move_mount" | "open_tree" | "mount_setattr"
            | "quotactl" | "quotactl_fd" | "lookup_dcookie" | "perf_event_open" | "bpf"
            | "name_to_handle_at" => has("CAP_SYS_ADMIN"),
            "process_vm_readv" | "process_vm_writev" | "kcmp" => has("CAP_SYS_PTRACE"),
            "clock_adjtime" | "clock_adjtime64" | "clock_settime" | "clock_settime64"
            | "settimeofday" | "stime" => has("CAP_SYS_TIME"),
            "reboot" => has("CAP_SYS_BOOT"),
            "init_module" | "finit_module" | "delete_module" => has("CAP_SYS_MODULE"),
            "ioperm" | "iopl" => has("CAP_SYS_RAWIO"),
            "acct" => has("CAP_SYS_PACCT"),
            "syslog" => has("CAP_SYSLOG"),
            "open_by_handle_at" => has("CAP_DAC_READ_SEARCH"),
            _ => false,
        }
    };
    let denied: Vec<&str> = DENIED.iter().copied().filter(|n| !lifted(n)).collect();
    let mut syscalls = vec![json!({
        "names": denied,
        "action": "SCMP_ACT_ERRNO",
        "errnoRet": EPERM
    })];
    if !has("CAP_SYS_ADMIN") {
        syscalls.push(json!({"names": ["clone3"], "action": "SCMP_ACT_ERRNO", "errnoRet": ENOSYS}));
        for flag in NAMESPACE_FLAGS {
            syscalls.push(json!({
                "names": ["clone"],
                "action": "SCMP_ACT_ERRNO",
                "errnoRet": EPERM,
                "args": [{"index": 0, "value": flag, "valueTwo": flag, "op": "SCMP_CMP_MASKED_EQ"}]
            }));
        }
    }
    json!({
        "defaultAction": "SCMP_ACT_ALLOW",
        "architectures": ["SCMP_ARCH_X86_64", "SCMP_ARCH_X86", "SCMP_ARCH_X32"],
        "syscalls": syscalls
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn compiles_and_lifts_rules_with_capabilities() {
        let p: oci_spec::runtime::LinuxSeccomp = serde_json::from_value(profile(&[])).unwrap();
        wharf_runtime::seccomp::compile(&p).unwrap();
        let denied = |v: &Value| -> Vec<String> {
            v["syscalls"][0]["names"]
                .as_array()
                .unwrap()
                .iter()
                .map(|s| s.as_str().unwrap().to_string())
                .collect()
        };
        assert!(denied(&profile(&[])).contains(&"mount".to_string()));
        let admin = profile(&["CAP_SYS_ADMIN".to_string()]);
        assert!(!denied(&admin).contains(&"mount".to_string()));
        let p: oci_spec::runtime::LinuxSeccomp = serde_json::from_value(admin).unwrap();
        wharf_runtime::seccomp::compile(&p).unwrap();
    }
}
