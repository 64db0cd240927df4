//! Device rules on cgroup v2: a BPF_PROG_TYPE_CGROUP_DEVICE program, assembled here from a
//! [`RuleSet`], loaded with bpf(2) and attached to the container's cgroup2 directory.
//!
//! The kernel runs the program for every open/mknod of a device node by a task in the
//! cgroup, with `struct bpf_cgroup_dev_ctx { u32 access_type; u32 major; u32 minor; }`
//! (access_type = access << 16 | type); returning 1 allows, 0 refuses with EPERM. Programs
//! are attached with BPF_F_ALLOW_MULTI so others' filters (a GPU plugin's, say) stay, and
//! ours — recognised by its name — is replaced atomically (BPF_F_REPLACE) on update.

use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::path::Path;

use super::{Access, DevType, RuleSet};
use crate::error::{Error, Result};

/// The name our programs carry (BPF_OBJ_NAME_LEN is 16 with the NUL).
pub const PROGRAM_NAME: &str = "wharf_devices";

/// One eBPF instruction (struct bpf_insn).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Insn {
    code: u8,
    regs: u8,
    off: i16,
    imm: i32,
}

// Opcodes used (linux/bpf_common.h, linux/bpf.h).
const LDX_W: u8 = 0x61; // BPF_LDX | BPF_MEM | BPF_W
const ALU_AND_K: u8 = 0x54; // BPF_ALU | BPF_AND | BPF_K
const ALU_RSH_K: u8 = 0x74; // BPF_ALU | BPF_RSH | BPF_K
const ALU_MOV_K: u8 = 0xb4; // BPF_ALU | BPF_MOV | BPF_K
const ALU_MOV_X: u8 = 0xbc; // BPF_ALU | BPF_MOV | BPF_X
const JMP_JNE_K: u8 = 0x55; // BPF_JMP | BPF_JNE | BPF_K
const JMP_JNE_X: u8 = 0x5d; // BPF_JMP | BPF_JNE | BPF_X
const JMP_JEQ_K: u8 = 0x15; // BPF_JMP | BPF_JEQ | BPF_K
const JMP_EXIT: u8 = 0x95; // BPF_JMP | BPF_EXIT

const BPF_DEVCG_DEV_BLOCK: i32 = 1;
const BPF_DEVCG_DEV_CHAR: i32 = 2;

fn insn(code: u8, dst: u8, src: u8, off: i16, imm: i32) -> Insn {
    Insn {
        code,
        regs: (src << 4) | (dst & 0xf),
        off,
        imm,
    }
}

/// Assemble the filter for `rules`: R2 = type, R3 = access, R4 = major, R5 = minor; one
/// block per exception that returns its verdict when the device matches; the default last.
pub fn program(rules: &RuleSet) -> Vec<Insn> {
    let mut p = vec![
        insn(LDX_W, 2, 1, 0, 0),
        insn(ALU_AND_K, 2, 0, 0, 0xffff),
        insn(LDX_W, 3, 1, 0, 0),
        insn(ALU_RSH_K, 3, 0, 0, 16),
        insn(LDX_W, 4, 1, 4, 0),
        insn(LDX_W, 5, 1, 8, 0),
    ];
    let verdict = i32::from(!rules.default_allow);
    for (&(t, major, minor), access) in &rules.exceptions {
        // Each jump skips to the end of this block; offsets are filled in once it is built.
        let mut block: Vec<(Insn, bool)> = Vec::new();
        let ty = match t {
            DevType::Char => BPF_DEVCG_DEV_CHAR,
            DevType::Block => BPF_DEVCG_DEV_BLOCK,
        };
        block.push((insn(JMP_JNE_K, 2, 0, 0, ty), true));
        if *access != Access::ALL {
            block.push((insn(ALU_MOV_X, 1, 3, 0, 0), false));
            block.push((insn(ALU_AND_K, 1, 0, 0, i32::from(access.0)), false));
            if rules.default_allow {
                // A deny exception refuses any access it shares a bit with.
                block.push((insn(JMP_JEQ_K, 1, 0, 0, 0), true));
            } else {
                // An allow exception must cover everything asked for.
                block.push((insn(JMP_JNE_X, 1, 3, 0, 0), true));
            }
        }
        if let Some(m) = major {
            block.push((insn(JMP_JNE_K, 4, 0, 0, m as i32), true));
        }
        if let Some(m) = minor {
            block.push((insn(JMP_JNE_K, 5, 0, 0, m as i32), true));
        }
        block.push((insn(ALU_MOV_K, 0, 0, 0, verdict), false));
        block.push((insn(JMP_EXIT, 0, 0, 0, 0), false));
        let len = block.len();
        for (i, (mut ins, jumps)) in block.into_iter().enumerate() {
            if jumps {
                ins.off = (len - i - 1) as i16;
            }
            p.push(ins);
        }
    }
    p.push(insn(ALU_MOV_K, 0, 0, 0, i32::from(rules.default_allow)));
    p.push(insn(JMP_EXIT, 0, 0, 0, 0));
    p
}

// bpf(2) commands and constants.
const BPF_PROG_LOAD: i32 = 5;
const BPF_PROG_ATTACH: i32 = 8;
const BPF_PROG_DETACH: i32 = 9;
const BPF_PROG_GET_FD_BY_ID: i32 = 13;
const BPF_OBJ_GET_INFO_BY_FD: i32 = 15;
const BPF_PROG_QUERY: i32 = 16;
const BPF_PROG_TYPE_CGROUP_DEVICE: u32 = 15;
const BPF_CGROUP_DEVICE: u32 = 6;
const BPF_F_ALLOW_MULTI: u32 = 2;
const BPF_F_REPLACE: u32 = 4;

#[repr(C)]
#[derive(Default)]
struct ProgLoadAttr {
    prog_type: u32,
    insn_cnt: u32,
    insns: u64,
    license: u64,
    log_level: u32,
    log_size: u32,
    log_buf: u64,
    kern_version: u32,
    prog_flags: u32,
    prog_name: [u8; 16],
    prog_ifindex: u32,
    expected_attach_type: u32,
}

#[repr(C)]
#[derive(Default)]
struct AttachAttr {
    target_fd: u32,
    attach_bpf_fd: u32,
    attach_type: u32,
    attach_flags: u32,
    replace_bpf_fd: u32,
}

#[repr(C)]
#[derive(Default)]
struct QueryAttr {
    target_fd: u32,
    attach_type: u32,
    query_flags: u32,
    attach_flags: u32,
    prog_ids: u64,
    prog_cnt: u32,
    _pad: u32,
}

#[repr(C)]
#[derive(Default)]
struct GetFdByIdAttr {
    prog_id: u32,
    next_id: u32,
    open_flags: u32,
}

#[repr(C)]
#[derive(Default)]
struct InfoAttr {
    bpf_fd: u32,
    info_len: u32,
    info: u64,
}

/// bpf(2). The caller passes a properly laid out attribute struct.
fn bpf<T>(cmd: i32, attr: &mut T) -> io::Result<i64> {
    // SAFETY: `attr` is a live #[repr(C)] struct of the layout `cmd` expects, and its size is
    // passed along; pointers inside it point to buffers the caller keeps alive.
    let r = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            cmd,
            attr as *mut T as *mut libc::c_void,
            std::mem::size_of::<T>() as libc::c_uint,
        )
    };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r)
    }
}

fn owned(fd: i64) -> OwnedFd {
    // SAFETY: the kernel just returned this new fd to us.
    unsafe { OwnedFd::from_raw_fd(fd as RawFd) }
}

/// Load `insns` as a cgroup device program. On a verifier refusal the error carries the
/// verifier's log.
pub fn load(insns: &[Insn]) -> Result<OwnedFd> {
    load_named(insns, PROGRAM_NAME)
}

fn load_named(insns: &[Insn], prog_name: &str) -> Result<OwnedFd> {
    let license = CString::new("Apache").expect("no NUL");
    let mut name = [0u8; 16];
    let n = prog_name.len().min(15);
    name[..n].copy_from_slice(&prog_name.as_bytes()[..n]);
    let mut attr = ProgLoadAttr {
        prog_type: BPF_PROG_TYPE_CGROUP_DEVICE,
        insn_cnt: insns.len() as u32,
        insns: insns.as_ptr() as u64,
        license: license.as_ptr() as u64,
        prog_name: name,
        expected_attach_type: BPF_CGROUP_DEVICE,
        ..Default::default()
    };
    match bpf(BPF_PROG_LOAD, &mut attr) {
        Ok(fd) => Ok(owned(fd)),
        Err(e) => {
            // Again with the verifier's log, to say why.
            let mut log = vec![0u8; 64 * 1024];
            attr.log_level = 1;
            attr.log_size = log.len() as u32;
            attr.log_buf = log.as_mut_ptr() as u64;
            let _ = bpf(BPF_PROG_LOAD, &mut attr).map(owned);
            let end = log.iter().position(|b| *b == 0).unwrap_or(0);
            let text = String::from_utf8_lossy(&log[..end]);
            Err(Error::os(
                format!(
                    "linux.resources.devices: load the eBPF device filter (bpf BPF_PROG_LOAD){}",
                    if text.trim().is_empty() {
                        String::new()
                    } else {
                        format!(" — verifier: {}", text.trim())
                    }
                ),
                e,
            ))
        }
    }
}

/// A device program attached to a cgroup.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Attached {
    /// Program id.
    pub id: u32,
    /// Program name ([`PROGRAM_NAME`] for ours).
    pub name: String,
}

fn open_dir(dir: &Path) -> Result<OwnedFd> {
    rustix::fs::open(
        dir,
        rustix::fs::OFlags::RDONLY | rustix::fs::OFlags::DIRECTORY | rustix::fs::OFlags::CLOEXEC,
        rustix::fs::Mode::empty(),
    )
    .map_err(|e| Error::os(format!("open cgroup {}", dir.display()), e))
}

/// The device programs attached directly to the cgroup at `dir`.
pub fn attached(dir: &Path) -> Result<Vec<Attached>> {
    let dirfd = open_dir(dir)?;
    Ok(query(&dirfd, dir)?
        .into_iter()
        .map(|(id, name, _)| Attached { id, name })
        .collect())
}

/// (id, name, fd) of every device program on the cgroup; programs we may not open (an LSM
/// can refuse) are skipped.
fn query(dirfd: &OwnedFd, dir: &Path) -> Result<Vec<(u32, String, OwnedFd)>> {
    let mut ids = vec![0u32; 64];
    loop {
        let mut attr = QueryAttr {
            target_fd: dirfd.as_raw_fd() as u32,
            attach_type: BPF_CGROUP_DEVICE,
            prog_ids: ids.as_mut_ptr() as u64,
            prog_cnt: ids.len() as u32,
            ..Default::default()
        };
        match bpf(BPF_PROG_QUERY, &mut attr) {
            Ok(_) => {
                ids.truncate(attr.prog_cnt as usize);
                break;
            }
            Err(e) if e.raw_os_error() == Some(libc::ENOSPC) && ids.len() < 1 << 16 => {
                ids = vec![0; ids.len() * 4];
            }
            Err(e) => {
                return Err(Error::os(
                    format!(
                        "linux.resources.devices: list the device filters of {} (BPF_PROG_QUERY)",
                        dir.display()
                    ),
                    e,
                ));
            }
        }
    }
    let mut out = Vec::new();
    for id in ids {
        let mut attr = GetFdByIdAttr {
            prog_id: id,
            ..Default::default()
        };
        let fd = match bpf(BPF_PROG_GET_FD_BY_ID, &mut attr) {
            Ok(fd) => owned(fd),
            Err(_) => continue,
        };
        let mut info = [0u8; 256];
        let mut iattr = InfoAttr {
            bpf_fd: fd.as_raw_fd() as u32,
            info_len: info.len() as u32,
            info: info.as_mut_ptr() as u64,
        };
        // struct bpf_prog_info: name[16] is at offset 64.
        let name = match bpf(BPF_OBJ_GET_INFO_BY_FD, &mut iattr) {
            Ok(_) => {
                let raw = &info[64..80];
                let end = raw.iter().position(|b| *b == 0).unwrap_or(raw.len());
                String::from_utf8_lossy(&raw[..end]).into_owned()
            }
            Err(_) => String::new(),
        };
        out.push((id, name, fd));
    }
    Ok(out)
}

/// Attach the filter for `rules` to the cgroup at `dir`, replacing the one we attached
/// before (if any) without a moment where neither applies.
pub fn attach(dir: &Path, rules: &RuleSet) -> Result<()> {
    let dirfd = open_dir(dir)?;
    let ours: Vec<OwnedFd> = query(&dirfd, dir)?
        .into_iter()
        .filter(|(_, name, _)| name == PROGRAM_NAME)
        .map(|(_, _, fd)| fd)
        .collect();
    let prog = load(&program(rules))?;
    let attach_with = |flags: u32, replace: Option<&OwnedFd>| {
        let mut attr = AttachAttr {
            target_fd: dirfd.as_raw_fd() as u32,
            attach_bpf_fd: prog.as_raw_fd() as u32,
            attach_type: BPF_CGROUP_DEVICE,
            attach_flags: flags,
            replace_bpf_fd: replace.map_or(0, |f| f.as_raw_fd() as u32),
        };
        bpf(BPF_PROG_ATTACH, &mut attr)
    };
    let attach_err = |e: io::Error| {
        Error::os(
            format!(
                "linux.resources.devices: attach the eBPF device filter to {} \
                 (BPF_PROG_ATTACH, BPF_CGROUP_DEVICE, BPF_F_ALLOW_MULTI)",
                dir.display()
            ),
            e,
        )
    };
    if let [old] = ours.as_slice() {
        match attach_with(BPF_F_ALLOW_MULTI | BPF_F_REPLACE, Some(old)) {
            Ok(_) => return Ok(()),
            // Kernels before 5.6 have no BPF_F_REPLACE: attach, then detach the old one.
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {}
            Err(e) => return Err(attach_err(e)),
        }
    }
    attach_with(BPF_F_ALLOW_MULTI, None).map_err(attach_err)?;
    for old in &ours {
        let mut attr = AttachAttr {
            target_fd: dirfd.as_raw_fd() as u32,
            attach_bpf_fd: old.as_raw_fd() as u32,
            attach_type: BPF_CGROUP_DEVICE,
            ..Default::default()
        };
        bpf(BPF_PROG_DETACH, &mut attr).map_err(|e| {
            Error::os(
                format!(
                    "linux.resources.devices: detach the previous device filter from {} \
                     (BPF_PROG_DETACH)",
                    dir.display()
                ),
                e,
            )
        })?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cgroups::devices::effective;

    /// Run the program on one device, interpreting the few opcodes it uses: a check of the
    /// assembler independent of the kernel.
    fn run(p: &[Insn], t: i32, access: i32, major: u32, minor: u32) -> u64 {
        let ctx = [((access << 16) | t) as u32, major, minor];
        let mut r = [0u64; 11];
        let mut pc = 0usize;
        loop {
            let i = p[pc];
            let (dst, src) = ((i.regs & 0xf) as usize, (i.regs >> 4) as usize);
            pc += 1;
            match i.code {
                LDX_W => r[dst] = u64::from(ctx[i.off as usize / 4]),
                ALU_AND_K => r[dst] = (r[dst] as u32 & i.imm as u32) as u64,
                ALU_RSH_K => r[dst] = ((r[dst] as u32) >> i.imm) as u64,
                ALU_MOV_K => r[dst] = i.imm as u32 as u64,
                ALU_MOV_X => r[dst] = r[src] as u32 as u64,
                JMP_JNE_K if r[dst] != i.imm as i64 as u64 => pc += i.off as usize,
                JMP_JNE_X if r[dst] != r[src] => pc += i.off as usize,
                JMP_JEQ_K if r[dst] == i.imm as i64 as u64 => pc += i.off as usize,
                JMP_JNE_K | JMP_JNE_X | JMP_JEQ_K => {}
                JMP_EXIT => return r[0],
                other => panic!("unexpected opcode {other:#x}"),
            }
        }
    }

    fn deny_all_plus(extra: &str) -> RuleSet {
        let mut rules: Vec<oci_spec::runtime::LinuxDeviceCgroup> =
            serde_json::from_str(r#"[{"allow": false, "access": "rwm"}]"#).unwrap();
        if !extra.is_empty() {
            rules.push(serde_json::from_str(extra).unwrap());
        }
        effective(&rules).unwrap()
    }

    #[test]
    fn program_agrees_with_the_rule_set() {
        let sets = [
            deny_all_plus(""),
            deny_all_plus(
                r#"{"allow": true, "type": "c", "major": 1, "minor": 11, "access": "r"}"#,
            ),
            effective(
                &serde_json::from_str::<Vec<_>>(
                    r#"[{"allow": false, "type": "c", "major": 1, "minor": 11, "access": "w"},
                        {"allow": false, "type": "b", "access": "rw"}]"#,
                )
                .unwrap(),
            )
            .unwrap(),
        ];
        for set in &sets {
            let p = program(set);
            for (t, ty) in [
                (DevType::Char, BPF_DEVCG_DEV_CHAR),
                (DevType::Block, BPF_DEVCG_DEV_BLOCK),
            ] {
                for (major, minor) in [(1, 3), (1, 11), (1, 5), (136, 4), (8, 0), (10, 200), (4, 1)]
                {
                    for access in 1..8u8 {
                        let want = set.allows(t, major, minor, access);
                        let got = run(&p, ty, i32::from(access), major, minor) == 1;
                        assert_eq!(
                            got, want,
                            "{t:?} {major}:{minor} access {access} in {set:?}"
                        );
                    }
                }
            }
        }
    }

    /// A real cgroup under the cgroup2 mount, below the test's own parent.
    fn test_cgroup(env: &wharf_testbed::Env) -> Option<std::path::PathBuf> {
        let root = crate::cgroups::detect().ok()?.unified?;
        let dir = root
            .join(env.cgroup_parent.trim_start_matches('/'))
            .join("filtered");
        std::fs::create_dir_all(&dir).unwrap();
        Some(dir)
    }

    /// Run `script` in a shell moved into `dir` before it starts working.
    fn run_in(dir: &Path, script: &str) -> String {
        use std::io::Write;
        use std::process::{Command, Stdio};
        let mut child = Command::new("sh")
            .args(["-c", &format!("read go; {script}")])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        std::fs::write(dir.join("cgroup.procs"), child.id().to_string()).unwrap();
        child.stdin.take().unwrap().write_all(b"go\n").unwrap();
        let out = child.wait_with_output().unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    #[test]
    fn attached_filter_is_enforced_and_replaced_while_others_stay() {
        crate::cgroups::tests::require_root();
        let env = wharf_testbed::Env::new("bpf-attach");
        let Some(dir) = test_cgroup(&env) else {
            panic!("this test needs a cgroup2 mount");
        };
        // Someone else's (allow-all) filter, which must survive our updates.
        let dirfd = open_dir(&dir).unwrap();
        let other = load_named(&program(&RuleSet::default()), "other_filter").unwrap();
        let mut attr = AttachAttr {
            target_fd: dirfd.as_raw_fd() as u32,
            attach_bpf_fd: other.as_raw_fd() as u32,
            attach_type: BPF_CGROUP_DEVICE,
            attach_flags: BPF_F_ALLOW_MULTI,
            replace_bpf_fd: 0,
        };
        bpf(BPF_PROG_ATTACH, &mut attr).unwrap();
        let check = "(: < /dev/fuse) 2>/dev/null && echo fuse-ok || echo fuse-denied; \
                     head -c1 /dev/zero | wc -c; echo x > /dev/null && echo null-ok";
        assert_eq!(run_in(&dir, check), "fuse-ok\n1\nnull-ok\n");
        attach(&dir, &deny_all_plus("")).unwrap();
        assert_eq!(run_in(&dir, check), "fuse-denied\n1\nnull-ok\n");
        attach(
            &dir,
            &deny_all_plus(
                r#"{"allow": true, "type": "c", "major": 10, "minor": 229, "access": "r"}"#,
            ),
        )
        .unwrap();
        assert_eq!(run_in(&dir, check), "fuse-ok\n1\nnull-ok\n");
        let mut names: Vec<String> = attached(&dir)
            .unwrap()
            .into_iter()
            .map(|a| a.name)
            .collect();
        names.sort();
        assert_eq!(names, ["other_filter", PROGRAM_NAME]);
    }

    #[test]
    fn the_kernel_verifier_accepts_the_program() {
        crate::cgroups::tests::require_root();
        let fd = load(&program(&deny_all_plus(""))).unwrap();
        assert!(fd.as_raw_fd() >= 0);
        let fd = load(&program(&RuleSet::default())).unwrap();
        assert!(fd.as_raw_fd() >= 0);
    }
}
