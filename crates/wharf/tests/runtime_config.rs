//! Each section of config.json, applied to a real container and observed from inside it.

mod common;

use common::*;
use serde_json::json;

/// Run `script` with sh in a container whose config `edit` adjusts; returns (code, stdout,
/// stderr) and checks nothing was left behind.
fn sh(env: &Env, script: &str, edit: impl FnOnce(&mut serde_json::Value)) -> (i32, String, String) {
    let mut b = env.bundle("c", BASE, &["sh", "-c", script]);
    edit(&mut b.config);
    b.save();
    let r = run(env, &b, "c");
    assert!(state_left(env).is_empty(), "state left behind");
    assert!(cgroups_left(env).is_empty(), "cgroups left behind");
    r
}

fn expect_ok(r: (i32, String, String)) -> String {
    assert_eq!(
        r.0, 0,
        "container failed: stdout {:?} stderr {:?}",
        r.1, r.2
    );
    r.1
}

#[test]
fn process_user_groups_umask_env_cwd() {
    let env = Env::new("user");
    let out = expect_ok(sh(&env, "id; umask; echo $FOO; pwd; echo $HOME", |c| {
        c["process"]["user"] =
            json!({"uid": 1000, "gid": 1001, "additionalGids": [5, 7], "umask": 63});
        c["process"]["env"] = json!(["PATH=/bin", "FOO=bar baz"]);
        c["process"]["cwd"] = json!("/tmp");
    }));
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines[0], "uid=1000 gid=1001 groups=5,7");
    assert_eq!(lines[1], "0077");
    assert_eq!(lines[2], "bar baz");
    assert_eq!(lines[3], "/tmp");
    // No HOME in the config: taken from the container's /etc/passwd, or "/".
    assert_eq!(lines[4], "/");
}

#[test]
fn home_comes_from_passwd() {
    let env = Env::new("home");
    let out = expect_ok(sh(&env, "echo $HOME", |_| {}));
    assert_eq!(out.trim(), "/root");
}

#[test]
fn capabilities_all_five_sets() {
    let env = Env::new("caps");
    let out = expect_ok(sh(&env, "grep ^Cap /proc/self/status", |c| {
        c["process"]["user"] = json!({"uid": 1000, "gid": 1000});
        c["process"]["noNewPrivileges"] = json!(false);
        c["process"]["capabilities"] = json!({
            "bounding": ["CAP_NET_ADMIN", "CAP_KILL", "CAP_CHOWN"],
            "effective": ["CAP_KILL"],
            "permitted": ["CAP_KILL", "CAP_NET_ADMIN"],
            "inheritable": ["CAP_NET_ADMIN"],
            "ambient": ["CAP_NET_ADMIN"]
        });
    }));
    let field = |name: &str| -> u64 {
        let line = out.lines().find(|l| l.starts_with(name)).unwrap();
        u64::from_str_radix(line.split_whitespace().nth(1).unwrap(), 16).unwrap()
    };
    let (chown, kill, net_admin) = (1u64 << 0, 1u64 << 5, 1u64 << 12);
    assert_eq!(field("CapBnd:"), chown | kill | net_admin);
    assert_eq!(field("CapInh:"), net_admin);
    assert_eq!(field("CapAmb:"), net_admin);
    // Across exec as a non-root user: permitted and effective keep only the ambient set.
    assert_eq!(field("CapPrm:"), net_admin);
    assert_eq!(field("CapEff:"), net_admin);
}

#[test]
fn no_new_privileges_is_set() {
    let env = Env::new("nnp");
    let out = expect_ok(sh(&env, "grep NoNewPrivs /proc/self/status", |c| {
        c["process"]["noNewPrivileges"] = json!(true);
    }));
    assert!(out.contains("NoNewPrivs:\t1"), "{out}");
    let out = expect_ok(sh(&env, "grep NoNewPrivs /proc/self/status", |c| {
        c["process"]["noNewPrivileges"] = json!(false);
    }));
    assert!(out.contains("NoNewPrivs:\t0"), "{out}");
}

#[test]
fn rlimits() {
    let env = Env::new("rlimits");
    let out = expect_ok(sh(&env, "ulimit -n; ulimit -Hn; ulimit -c", |c| {
        c["process"]["rlimits"] = json!([
            {"type": "RLIMIT_NOFILE", "soft": 123, "hard": 456},
            {"type": "RLIMIT_CORE", "soft": 0, "hard": 0}
        ]);
    }));
    assert_eq!(out, "123\n456\n0\n");
}

#[test]
fn raising_a_hard_rlimit_without_cap_sys_resource_names_the_limit() {
    let env = Env::new("rlimit-raise");
    // This host withholds CAP_SYS_RESOURCE, so a hard limit above ours cannot be set.
    let mut cur = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit with a valid struct.
    unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut cur) };
    let has_sys_resource = std::fs::read_to_string("/proc/self/status")
        .unwrap()
        .lines()
        .find(|l| l.starts_with("CapEff:"))
        .map(|l| {
            u64::from_str_radix(l.split_whitespace().nth(1).unwrap(), 16).unwrap() & (1 << 24) != 0
        })
        .unwrap();
    let want = cur.rlim_max.saturating_add(1).min(1 << 30);
    let (code, _, err) = sh(&env, "true", |c| {
        c["process"]["rlimits"] = json!([{"type": "RLIMIT_NOFILE", "soft": 1024, "hard": want}]);
    });
    if has_sys_resource || cur.rlim_max >= 1 << 30 {
        assert_eq!(code, 0, "{err}");
    } else {
        assert_ne!(code, 0);
        assert!(err.contains("RLIMIT_NOFILE"), "{err}");
    }
}

#[test]
fn oom_score_adj_raise_works_lower_gives_clear_error() {
    let env = Env::new("oom-adj");
    let out = expect_ok(sh(&env, "cat /proc/self/oom_score_adj", |c| {
        c["process"]["oomScoreAdj"] = json!(500);
    }));
    assert_eq!(out.trim(), "500");
    let own: i32 = std::fs::read_to_string("/proc/self/oom_score_adj")
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let (code, out, err) = sh(&env, "cat /proc/self/oom_score_adj", |c| {
        c["process"]["oomScoreAdj"] = json!(own - 100);
    });
    if code == 0 {
        // A host that grants CAP_SYS_RESOURCE lets us lower it.
        assert_eq!(out.trim(), (own - 100).to_string());
    } else {
        assert!(
            err.contains("oomScoreAdj") && err.contains("CAP_SYS_RESOURCE"),
            "{err}"
        );
    }
}

#[test]
fn hostname_domainname_and_uts_namespace() {
    let env = Env::new("uts");
    let out = expect_ok(sh(&env, "hostname; cat /proc/sys/kernel/domainname", |c| {
        c["hostname"] = json!("box1");
        c["domainname"] = json!("example.test");
    }));
    assert_eq!(out, "box1\nexample.test\n");
}

#[test]
fn pid_network_ipc_mount_cgroup_namespaces_are_new() {
    let env = Env::new("ns");
    let out = expect_ok(sh(
        &env,
        "echo $$; ls /sys/class/net; for n in pid net ipc mnt uts cgroup; do readlink /proc/self/ns/$n; done",
        |_| {},
    ));
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines[0], "1", "the container process is pid 1");
    assert_eq!(lines[1], "lo", "a new network namespace has only lo");
    for (i, n) in ["pid", "net", "ipc", "mnt", "uts", "cgroup"]
        .iter()
        .enumerate()
    {
        let host = std::fs::read_link(format!("/proc/self/ns/{n}")).unwrap();
        assert_ne!(
            lines[2 + i],
            host.to_str().unwrap(),
            "{n} namespace is the host's"
        );
    }
}

#[test]
fn joins_a_network_namespace_by_path() {
    let env = Env::new("netns-join");
    // A namespace held by a sleeping process we start (and the Env kills).
    let mut holder = std::process::Command::new("unshare")
        .args(["--net", "sleep", "1000"])
        .spawn()
        .unwrap();
    let path = format!("/proc/{}/ns/net", holder.id());
    assert!(wait_until(std::time::Duration::from_secs(5), || {
        std::fs::read_link(&path).ok() != std::fs::read_link("/proc/self/ns/net").ok()
    }));
    let want = std::fs::read_link(&path).unwrap();
    let out = expect_ok(sh(&env, "readlink /proc/self/ns/net", |c| {
        let ns = c["linux"]["namespaces"].as_array_mut().unwrap();
        for n in ns.iter_mut() {
            if n["type"] == "network" {
                n["path"] = json!(path);
            }
        }
    }));
    holder.kill().unwrap();
    holder.wait().unwrap();
    assert_eq!(out.trim(), want.to_str().unwrap());
}

#[test]
fn joining_a_non_namespace_path_is_refused() {
    let env = Env::new("netns-bad");
    let (code, _, err) = sh(&env, "true", |c| {
        let ns = c["linux"]["namespaces"].as_array_mut().unwrap();
        ns.push(json!({"type": "network", "path": "/etc/hostname"}));
        ns.retain(|n| !(n["type"] == "network" && n.get("path").is_none()));
    });
    assert_ne!(code, 0);
    assert!(err.contains("is not a network namespace"), "{err}");
}

#[test]
fn sysctls_are_applied_in_the_container_only() {
    let env = Env::new("sysctl");
    let host = std::fs::read_to_string("/proc/sys/net/ipv4/ip_forward").unwrap();
    let out = expect_ok(sh(
        &env,
        "cat /proc/sys/net/ipv4/ip_forward /proc/sys/kernel/shmmni",
        |c| {
            c["linux"]["sysctl"] = json!({"net.ipv4.ip_forward": "1", "kernel.shmmni": "1234"});
            // /proc/sys is read-only by default; sysctls are written before that applies.
        },
    ));
    assert_eq!(out, "1\n1234\n");
    assert_eq!(
        std::fs::read_to_string("/proc/sys/net/ipv4/ip_forward").unwrap(),
        host
    );
}

#[test]
fn non_namespaced_sysctl_is_refused() {
    let env = Env::new("sysctl-bad");
    let (code, _, err) = sh(&env, "true", |c| {
        c["linux"]["sysctl"] = json!({"kernel.panic": "1"});
    });
    assert_ne!(code, 0);
    assert!(err.contains("kernel.panic"), "{err}");
}

#[test]
fn masked_and_readonly_paths() {
    let env = Env::new("mask");
    let out = expect_ok(sh(
        &env,
        "cat /proc/kcore | wc -c; ls /sys/firmware | wc -l; echo 1 > /proc/sys/kernel/shmmni 2>/dev/null && echo WROTE || echo RO",
        |_| {},
    ));
    assert_eq!(out, "0\n0\nRO\n");
}

/// The masked directories of one container are one empty read-only tmpfs (one superblock,
/// not one per directory), and a masked file is /dev/null.
#[test]
fn masked_directories_share_one_empty_readonly_tmpfs() {
    let env = Env::new("mask-one");
    let out = expect_ok(sh(
        &env,
        "stat -c %d /sys /sys/firmware /sys/kernel /sys/power; \
         ls -A /sys/firmware /sys/kernel /sys/power | grep -c . ; \
         touch /sys/kernel/x 2>/dev/null && echo WROTE || echo RO; \
         cat /proc/kcore | wc -c",
        |c| {
            c["linux"]["maskedPaths"] =
                json!(["/sys/firmware", "/proc/kcore", "/sys/kernel", "/sys/power"]);
        },
    ));
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 7, "{out}");
    let (sys, masks) = (lines[0], &lines[1..4]);
    assert!(masks.iter().all(|d| d == &masks[0]), "not one tmpfs: {out}");
    assert_ne!(masks[0], sys, "not masked: {out}");
    // ls names each directory (three headers) and nothing inside them.
    assert_eq!(&lines[4..], ["3", "RO", "0"], "{out}");
}

/// The container's process holds a session keyring of its own: anonymous (`_ses`, no
/// `_ses.<id>` to look up or join by name), and not the one of the runtime's caller.
#[test]
fn the_container_gets_a_fresh_anonymous_session_keyring() {
    const KEYCTL_GET_KEYRING_ID: libc::c_long = 0;
    const KEY_SPEC_SESSION_KEYRING: libc::c_long = -3;
    // SAFETY: keyctl with integer arguments only; create = 1 gives this test a session
    // keyring if it has none, so that the comparison below means something.
    let ours = unsafe {
        libc::syscall(
            libc::SYS_keyctl,
            KEYCTL_GET_KEYRING_ID,
            KEY_SPEC_SESSION_KEYRING,
            1,
        )
    };
    assert!(ours > 0, "no session keyring for the test process");
    let env = Env::new("keyring");
    // As uid 1000, /proc/keys lists only what the process may view: its own (possessed)
    // keyrings, not root's.
    let out = expect_ok(sh(&env, "cat /proc/keys", |c| {
        c["process"]["user"] = json!({"uid": 1000, "gid": 1000});
        c["linux"]["maskedPaths"] = json!([]);
    }));
    let sessions: Vec<&str> = out
        .lines()
        .filter(|l| l.contains(" keyring ") && l.contains(" _ses"))
        .collect();
    assert_eq!(sessions.len(), 1, "one session keyring expected: {out}");
    let fields: Vec<&str> = sessions[0].split_whitespace().collect();
    assert_eq!(fields[8], "_ses:", "an anonymous keyring expected: {out}");
    let serial = i64::from_str_radix(fields[0], 16).unwrap();
    assert_ne!(
        serial, ours,
        "the caller's session keyring leaked in: {out}"
    );
}

#[test]
fn readonly_root_and_writable_tmpfs() {
    let env = Env::new("roroot");
    let out = expect_ok(sh(
        &env,
        "touch /x 2>/dev/null && echo ROOT-RW || echo ROOT-RO; touch /dev/shm/x && echo SHM-RW",
        |c| {
            c["root"]["readonly"] = json!(true);
        },
    ));
    assert_eq!(out, "ROOT-RO\nSHM-RW\n");
    let out = expect_ok(sh(&env, "touch /x && echo ROOT-RW", |c| {
        c["root"]["readonly"] = json!(false);
    }));
    assert_eq!(out, "ROOT-RW\n");
}

#[test]
fn bind_mounts_ro_and_rw_and_tmpfs_options() {
    let env = Env::new("binds");
    let host_dir = env.path().join("shared");
    std::fs::create_dir(&host_dir).unwrap();
    std::fs::write(host_dir.join("in"), "from host\n").unwrap();
    let host_file = env.path().join("file.txt");
    std::fs::write(&host_file, "single file\n").unwrap();
    let out = expect_ok(sh(
        &env,
        "cat /mnt/rw/in; echo out > /mnt/rw/out; cat /mnt/ro/in; echo x > /mnt/ro/x 2>/dev/null || echo RO-REFUSED; cat /etc/single; grep ' /scratch ' /proc/mounts",
        |c| {
            let mounts = c["mounts"].as_array_mut().unwrap();
            mounts.push(json!({"destination": "/mnt/rw", "type": "bind", "source": host_dir, "options": ["rbind", "rw"]}));
            mounts.push(json!({"destination": "/mnt/ro", "type": "bind", "source": host_dir, "options": ["bind", "ro"]}));
            mounts.push(json!({"destination": "/etc/single", "type": "none", "source": host_file, "options": ["bind", "ro"]}));
            mounts.push(json!({"destination": "/scratch", "type": "tmpfs", "source": "tmpfs", "options": ["nosuid", "nodev", "size=1m", "mode=700"]}));
            c["root"]["readonly"] = json!(false);
        },
    ));
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines[0], "from host");
    assert_eq!(lines[1], "from host");
    assert_eq!(lines[2], "RO-REFUSED");
    assert_eq!(lines[3], "single file");
    assert!(
        lines[4].contains("tmpfs")
            && lines[4].contains("nosuid")
            && lines[4].contains("size=1024k")
            && lines[4].contains("mode=700"),
        "{}",
        lines[4]
    );
    assert_eq!(
        std::fs::read_to_string(host_dir.join("out")).unwrap(),
        "out\n"
    );
    // The mount points the runtime created for file binds live in the rootfs, not the host.
    assert!(!std::path::Path::new("/etc/single").exists());
}

#[test]
fn tmpcopyup_keeps_the_directory_content() {
    let env = Env::new("tmpcopyup");
    let out = expect_ok(sh(
        &env,
        "cat /etc/passwd | head -1; grep ' /etc ' /proc/mounts | cut -d' ' -f3",
        |c| {
            c["mounts"].as_array_mut().unwrap().push(json!({"destination": "/etc", "type": "tmpfs", "source": "tmpfs", "options": ["tmpcopyup"]}));
        },
    ));
    assert_eq!(out, "root:x:0:0:root:/root:/bin/sh\ntmpfs\n");
}

#[test]
fn default_and_config_devices() {
    let env = Env::new("devices");
    let out = expect_ok(sh(
        &env,
        "for d in null zero full random urandom tty; do stat -c '%n %t:%T %a' /dev/$d; done; stat -c '%n %t:%T %a %u:%g' /dev/fuse; readlink /dev/ptmx; readlink /dev/fd; head -c 4 /dev/zero | wc -c",
        |c| {
            c["linux"]["devices"] = json!([{"path": "/dev/fuse", "type": "c", "major": 10, "minor": 229, "fileMode": 0o640, "uid": 1, "gid": 2}]);
            c["linux"]["resources"]["devices"] = json!([{"allow": true, "access": "rwm"}]);
        },
    ));
    assert!(out.contains("/dev/null 1:3 666"), "{out}");
    assert!(out.contains("/dev/tty 5:0 666"), "{out}");
    assert!(out.contains("/dev/fuse a:e5 640 1:2"), "{out}");
    assert!(out.contains("pts/ptmx\n/proc/self/fd\n"), "{out}");
    assert!(out.ends_with("4\n"), "{out}");
}

#[test]
fn personality_linux32() {
    let env = Env::new("persona");
    let out = expect_ok(sh(&env, "uname -m", |c| {
        c["linux"]["personality"] = json!({"domain": "LINUX32"});
    }));
    assert_eq!(out.trim(), "i686");
}

#[test]
fn io_priority_and_scheduler() {
    let env = Env::new("sched");
    let out = expect_ok(sh(
        &env,
        "cat /proc/self/sched | grep -E '^policy|^prio'; ionice",
        |c| {
            c["process"]["ioPriority"] = json!({"class": "IOPRIO_CLASS_BE", "priority": 6});
            c["process"]["scheduler"] = json!({"policy": "SCHED_BATCH", "nice": 5});
        },
    ));
    assert!(
        out.contains("policy                                       :                    3"),
        "{out}"
    );
    assert!(
        out.contains("prio                                         :                  125"),
        "{out}"
    );
    assert!(out.contains("best-effort: prio 6"), "{out}");
}

#[test]
fn exec_cpu_affinity_final() {
    let env = Env::new("affinity");
    let out = expect_ok(sh(&env, "grep Cpus_allowed_list /proc/self/status", |c| {
        c["process"]["execCPUAffinity"] = json!({"final": "0"});
    }));
    assert!(out.contains("Cpus_allowed_list:\t0\n"), "{out}");
}

#[test]
fn time_namespace_offsets() {
    let env = Env::new("timens");
    let out = expect_ok(sh(&env, "cut -d' ' -f1 /proc/uptime", |c| {
        c["linux"]["namespaces"]
            .as_array_mut()
            .unwrap()
            .push(json!({"type": "time"}));
        c["linux"]["timeOffsets"] = json!({"boottime": {"secs": 86400 * 365, "nanosecs": 0}});
    }));
    let uptime: f64 = out.trim().parse().unwrap();
    assert!(uptime > 86400.0 * 365.0, "{uptime}");
}

#[test]
fn user_namespace_with_mappings() {
    let env = Env::new("userns");
    // The rootfs is owned by host root, which is unmapped inside: make it readable by the
    // mapped root instead by mapping host 0 into the container as well is not wanted; map
    // container 0 to an unprivileged host range and chown the rootfs to it.
    let mut b = env.bundle(
        "c",
        BASE,
        &[
            "sh",
            "-c",
            "id; cat /proc/self/uid_map; touch /tmp/f && stat -c %u /tmp/f",
        ],
    );
    let base = 200_000u32;
    chown_tree(&b.rootfs(), base);
    b.config["linux"]["namespaces"]
        .as_array_mut()
        .unwrap()
        .push(json!({"type": "user"}));
    b.config["linux"]["uidMappings"] = json!([{"containerID": 0, "hostID": base, "size": 65536}]);
    b.config["linux"]["gidMappings"] = json!([{"containerID": 0, "hostID": base, "size": 65536}]);
    b.config["root"]["readonly"] = json!(false);
    b.save();
    let (code, out, err) = run(&env, &b, "c");
    assert_eq!(code, 0, "{err}");
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines[0], "uid=0(root) gid=0(root)");
    assert_eq!(
        lines[1].split_whitespace().collect::<Vec<_>>(),
        ["0", "200000", "65536"]
    );
    assert_eq!(lines[2], "0");
    // On the host, the file belongs to the mapped uid.
    let st = std::fs::metadata(b.rootfs().join("tmp/f")).unwrap();
    use std::os::unix::fs::MetadataExt;
    assert_eq!(st.uid(), base);
    assert!(cgroups_left(&env).is_empty());
}

fn chown_tree(path: &std::path::Path, id: u32) {
    let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: lchown on paths inside the test's own temp dir.
    unsafe { libc::lchown(c.as_ptr(), id, id) };
    if std::fs::symlink_metadata(path).unwrap().is_dir() {
        for e in std::fs::read_dir(path).unwrap() {
            chown_tree(&e.unwrap().path(), id);
        }
    }
}

#[test]
fn seccomp_errno_and_argument_rules() {
    let env = Env::new("seccomp");
    let out = expect_ok(sh(
        &env,
        "mkdir /tmp/d 2>&1 | grep -o 'Operation not permitted'; echo hi > /dev/null && echo WRITE-OK",
        |c| {
            c["root"]["readonly"] = json!(false);
            c["linux"]["seccomp"] = json!({
                "defaultAction": "SCMP_ACT_ALLOW",
                "architectures": ["SCMP_ARCH_X86_64", "SCMP_ARCH_X86"],
                "syscalls": [
                    {"names": ["mkdir", "mkdirat"], "action": "SCMP_ACT_ERRNO", "errnoRet": 1},
                    {"names": ["personality"], "action": "SCMP_ACT_ERRNO",
                     "args": [{"index": 0, "value": 8, "op": "SCMP_CMP_EQ"}]}
                ]
            });
        },
    ));
    assert_eq!(out, "Operation not permitted\nWRITE-OK\n");
}

#[test]
fn apparmor_and_selinux_give_clear_errors_where_missing() {
    let env = Env::new("lsm");
    if !std::path::Path::new("/sys/module/apparmor/parameters/enabled").exists() {
        let (code, _, err) = sh(&env, "true", |c| {
            c["process"]["apparmorProfile"] = json!("docker-default");
        });
        assert_ne!(code, 0);
        assert!(err.contains("AppArmor is not enabled"), "{err}");
    }
    if !std::path::Path::new("/sys/fs/selinux/enforce").exists() {
        let (code, _, err) = sh(&env, "true", |c| {
            c["process"]["selinuxLabel"] = json!("system_u:system_r:container_t:s0");
        });
        assert_ne!(code, 0);
        assert!(err.contains("SELinux is not enabled"), "{err}");
    }
}

#[test]
fn rootfs_propagation_and_cgroup_mount() {
    let env = Env::new("propagation");
    let out = expect_ok(sh(
        &env,
        "awk '$5 == \"/\"' /proc/self/mountinfo; ls /sys/fs/cgroup; cat /proc/self/cgroup | head -3",
        |c| {
            c["linux"]["rootfsPropagation"] = json!("shared");
        },
    ));
    let first = out.lines().next().unwrap();
    assert!(first.contains("shared:"), "root is not shared: {first}");
    assert!(out.contains("memory"), "{out}");
    // Inside its cgroup namespace, the container sees its own cgroup as the root.
    assert!(out.lines().skip(1).any(|l| l.ends_with(":/")), "{out}");
}

#[test]
fn terminal_via_console_socket() {
    use std::io::Write;
    let env = Env::new("console");
    let mut b = env.bundle(
        "c",
        BASE,
        &["sh", "-c", "tty; stty size; read line; echo got:$line"],
    );
    b.config["process"]["terminal"] = json!(true);
    b.config["process"]["consoleSize"] = json!({"height": 33, "width": 101});
    b.save();
    let mut master = create_with_console(&env, &b, "c");
    ok(&env, &["start", "c"]);
    master.write_all(b"hello\n").unwrap();
    let text = read_console_until(&mut master, "got:hello");
    assert!(text.contains("/dev/pts/0"), "{text}");
    assert!(text.contains("33 101"), "{text}");
    assert!(text.contains("got:hello"), "{text}");
    assert!(wait_until(std::time::Duration::from_secs(10), || status(
        &env, "c"
    ) == "stopped"));
    ok(&env, &["delete", "c"]);
}

/// A holder process in namespaces made by util-linux `unshare`, killed on drop.
struct Holder(std::process::Child);

impl Holder {
    fn new(args: &[&str]) -> Holder {
        let child = std::process::Command::new("unshare")
            .args(args)
            .args(["sleep", "1000"])
            .spawn()
            .unwrap();
        let holder = Holder(child);
        // Wait until unshare has switched namespaces (before exec'ing sleep).
        let changed = |ns: &str| {
            std::fs::read_link(holder.ns(ns)).ok()
                != std::fs::read_link(format!("/proc/self/ns/{ns}")).ok()
        };
        assert!(wait_until(std::time::Duration::from_secs(5), || {
            ["user", "net", "mnt"].iter().any(|ns| changed(ns))
        }));
        holder
    }

    /// A process in a new user namespace mapping container 0.. to host `base`.. (written by
    /// us from outside, as a runtime would).
    fn userns(base: u32) -> Holder {
        use std::os::unix::process::CommandExt;
        let mut cmd = std::process::Command::new("sleep");
        cmd.arg("1000");
        // SAFETY: unshare between fork and exec.
        unsafe {
            cmd.pre_exec(|| {
                if libc::unshare(libc::CLONE_NEWUSER) == 0 {
                    Ok(())
                } else {
                    Err(std::io::Error::last_os_error())
                }
            });
        }
        let child = cmd.spawn().unwrap();
        let pid = child.id();
        let map = format!("0 {base} 65536\n");
        std::fs::write(format!("/proc/{pid}/uid_map"), &map).unwrap();
        std::fs::write(format!("/proc/{pid}/gid_map"), &map).unwrap();
        Holder(child)
    }

    fn ns(&self, name: &str) -> String {
        format!("/proc/{}/ns/{name}", self.0.id())
    }
}

impl Drop for Holder {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn new_user_namespace_while_joining_a_network_namespace() {
    let env = Env::new("userns-join-net");
    let holder = Holder::new(&["--net"]);
    let netns = holder.ns("net");
    let want_net = std::fs::read_link(&netns).unwrap();
    let mut b = env.bundle(
        "c",
        BASE,
        &[
            "sh",
            "-c",
            "id -u; readlink /proc/self/ns/net; cat /proc/self/uid_map",
        ],
    );
    chown_tree(&b.rootfs(), 500_000);
    for n in b.config["linux"]["namespaces"]
        .as_array_mut()
        .unwrap()
        .iter_mut()
    {
        if n["type"] == "network" {
            n["path"] = json!(netns);
        }
    }
    b.config["linux"]["namespaces"]
        .as_array_mut()
        .unwrap()
        .push(json!({"type": "user"}));
    b.config["linux"]["uidMappings"] = json!([{"containerID": 0, "hostID": 500000, "size": 65536}]);
    b.config["linux"]["gidMappings"] = json!([{"containerID": 0, "hostID": 500000, "size": 65536}]);
    // sysfs cannot be mounted for a network namespace this user namespace does not own.
    b.config["mounts"]
        .as_array_mut()
        .unwrap()
        .retain(|m| m["type"] != "sysfs");
    b.save();
    let (code, out, err) = run(&env, &b, "c");
    assert_eq!(code, 0, "{err}");
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines[0], "0");
    assert_eq!(lines[1], want_net.to_str().unwrap());
    assert_eq!(
        lines[2].split_whitespace().collect::<Vec<_>>(),
        ["0", "500000", "65536"]
    );
    assert!(cgroups_left(&env).is_empty());
}

#[test]
fn joining_a_user_namespace_while_creating_the_others() {
    let env = Env::new("userns-join");
    let holder = Holder::userns(600_000);
    let userns = holder.ns("user");
    let want_user = std::fs::read_link(&userns).unwrap();
    let mut b = env.bundle(
        "c",
        BASE,
        &[
            "sh",
            "-c",
            "id -u; readlink /proc/self/ns/user; echo $$; cat /proc/self/uid_map",
        ],
    );
    chown_tree(&b.rootfs(), 600_000);
    b.config["linux"]["namespaces"]
        .as_array_mut()
        .unwrap()
        .push(json!({"type": "user", "path": userns}));
    b.save();
    let (code, out, err) = run(&env, &b, "c");
    assert_eq!(code, 0, "{err}");
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines[0], "0");
    assert_eq!(lines[1], want_user.to_str().unwrap());
    assert_eq!(
        lines[2], "1",
        "a new pid namespace owned by the joined user namespace"
    );
    assert_eq!(
        lines[3].split_whitespace().collect::<Vec<_>>(),
        ["0", "600000", "65536"]
    );
    assert!(cgroups_left(&env).is_empty());
}

#[test]
fn without_a_mount_namespace_mounts_go_below_the_rootfs_and_delete_removes_them() {
    let env = Env::new("no-mntns");
    let mut b = env.bundle("c", BASE, &["sleep", "1000"]);
    b.config["linux"]["namespaces"]
        .as_array_mut()
        .unwrap()
        .retain(|n| n["type"] != "mount");
    b.save();
    ok(
        &env,
        &["run", "-d", "--bundle", b.dir.to_str().unwrap(), "c"],
    );
    let state: serde_json::Value = serde_json::from_str(&ok(&env, &["state", "c"])).unwrap();
    let pid = state["pid"].as_i64().unwrap();
    // The container shares our mount namespace and sees its rootfs as /, with its own proc.
    assert_eq!(
        std::fs::read_link(format!("/proc/{pid}/ns/mnt")).unwrap(),
        std::fs::read_link("/proc/self/ns/mnt").unwrap()
    );
    assert_eq!(
        std::fs::read_link(format!("/proc/{pid}/root")).unwrap(),
        b.rootfs()
    );
    assert!(is_mounted(&b.rootfs().join("proc")));
    let out = ok(
        &env,
        &[
            "exec",
            "c",
            "sh",
            "-c",
            "ls /proc/self/fd >/dev/null && echo OK",
        ],
    );
    assert_eq!(out, "OK\n");
    ok(&env, &["delete", "-f", "c"]);
    assert!(
        !is_mounted(&b.rootfs().join("proc")),
        "container mounts left in our namespace"
    );
    assert!(!is_mounted(&b.rootfs()));
}

#[test]
fn joins_a_mount_namespace_by_path_and_runs_in_the_rootfs() {
    let env = Env::new("mntns-path");
    let holder = Holder::new(&["--mount", "--propagation", "private"]);
    let ns = holder.ns("mnt");
    let want = std::fs::read_link(&ns).unwrap();
    let mut b = env.bundle(
        "c",
        BASE,
        &[
            "sh",
            "-c",
            "readlink /proc/self/ns/mnt; cat /etc/passwd | head -1",
        ],
    );
    for n in b.config["linux"]["namespaces"]
        .as_array_mut()
        .unwrap()
        .iter_mut()
    {
        if n["type"] == "mount" {
            n["path"] = json!(ns);
        }
    }
    b.save();
    let (code, out, err) = run(&env, &b, "c");
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        out,
        format!(
            "{}\nroot:x:0:0:root:/root:/bin/sh\n",
            want.to_str().unwrap()
        )
    );
    // Nothing was mounted in our own namespace.
    assert!(!is_mounted(&b.rootfs()));
}

#[test]
fn unbindable_rootfs_propagation() {
    let env = Env::new("unbindable");
    let out = expect_ok(sh(&env, "awk '$5 == \"/\"' /proc/self/mountinfo", |c| {
        c["linux"]["rootfsPropagation"] = json!("unbindable");
    }));
    assert!(out.contains("unbindable"), "{out}");
}

#[test]
fn device_rules_are_listed_in_config_order() {
    let env = Env::new("devices-order");
    let mut b = env.bundle("c", BASE, &["sleep", "1000"]);
    b.config["linux"]["resources"]["devices"] = json!([
        {"allow": false, "access": "rwm"},
        {"allow": true, "type": "c", "major": 10, "minor": 229, "access": "rwm"},
        {"allow": true, "type": "b", "major": 8, "minor": 3, "access": "rw"}
    ]);
    b.save();
    ok(
        &env,
        &["run", "-d", "--bundle", b.dir.to_str().unwrap(), "c"],
    );
    let list = env
        .cgroup_dirs()
        .into_iter()
        .find(|d| d.starts_with("/sys/fs/cgroup/devices"))
        .map(|d| std::fs::read_to_string(d.join("c/devices.list")).unwrap());
    ok(&env, &["delete", "-f", "c"]);
    if let Some(list) = list {
        let lines: Vec<&str> = list.lines().collect();
        assert_eq!(&lines[..2], ["c 10:229 rwm", "b 8:3 rw"], "{list}");
    }
}
