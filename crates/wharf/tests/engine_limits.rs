//! The limits a container gets without asking, where podman and CRI-O are safer than
//! docker: at most 2048 processes (so a fork bomb stops at its container and the host's
//! other containers keep answering) and podman's open-file limit, lowered to what the
//! host allows; `--pids-limit -1`, `--ulimit` and the config file's `containers` section
//! change them.

mod engine_support;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use engine_support::{Wharf, busybox, wait_until};

/// The pids controller's directory of a process's cgroup (v1 `pids` or the v2 tree).
fn pids_dir(pid: i32) -> PathBuf {
    let text = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).unwrap();
    for line in text.lines() {
        let mut f = line.splitn(3, ':');
        let (_, controllers, path) = (f.next(), f.next().unwrap(), f.next().unwrap());
        if controllers.split(',').any(|c| c == "pids") {
            return PathBuf::from(format!("/sys/fs/cgroup/pids{path}"));
        }
    }
    let path = text
        .lines()
        .find_map(|l| l.strip_prefix("0::"))
        .expect("a cgroup v2 path");
    PathBuf::from(format!("/sys/fs/cgroup{path}"))
}

fn read(dir: &std::path::Path, file: &str) -> String {
    std::fs::read_to_string(dir.join(file))
        .unwrap_or_else(|e| panic!("{}/{file}: {e}", dir.display()))
        .trim()
        .to_string()
}

/// The open-file limit a container gets by default on this host: podman's, or this
/// process's hard limit where that is lower (without CAP_SYS_RESOURCE it cannot be raised).
fn expected_nofile() -> u64 {
    let hard = rustix::process::getrlimit(rustix::process::Resource::Nofile)
        .maximum
        .unwrap_or(u64::MAX);
    hard.min(1 << 20)
}

/// The pids.max and open-file limits (soft:hard) of a container run with `flags`.
fn limits(w: &Wharf, flags: &[&str]) -> (String, String) {
    let bb = busybox();
    let mut args = vec!["run", "-d", "--network", "none"];
    args.extend_from_slice(flags);
    args.extend([bb.as_str(), "sleep", "1000"]);
    let id = w.ok(&args);
    let id = id.trim();
    let pid = w.pids(id)[0];
    let max = read(&pids_dir(pid), "pids.max");
    let nofile = std::fs::read_to_string(format!("/proc/{pid}/limits"))
        .unwrap()
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .unwrap()
        .split_whitespace()
        .skip(3)
        .take(2)
        .collect::<Vec<_>>()
        .join(":");
    w.ok(&["rm", "-f", id]);
    (max, nofile)
}

#[test]
fn containers_get_podmans_pids_and_nofile_limits_unless_told_otherwise() {
    let mut w = Wharf::new("limits-defaults");
    w.pull_busybox();
    let bb = busybox();
    let n = expected_nofile();
    assert_eq!(limits(&w, &[]), ("2048".into(), format!("{n}:{n}")));
    assert_eq!(limits(&w, &["--pids-limit", "-1"]).0, "max");
    assert_eq!(limits(&w, &["--pids-limit", "0"]).0, "max");
    assert_eq!(limits(&w, &["--pids-limit", "100"]).0, "100");
    assert_eq!(
        limits(&w, &["--ulimit", "nofile=1024:2048"]),
        ("2048".into(), "1024:2048".into())
    );
    // The config file's `containers` section sets them for every container.
    let config = w.path("config.json");
    std::fs::write(
        &config,
        r#"{"containers": {"pids-limit": 512, "default-ulimits": ["nofile=4096:8192"]}}"#,
    )
    .unwrap();
    w.set_var("WHARF_CONFIG", config.to_str().unwrap());
    assert_eq!(limits(&w, &[]), ("512".into(), "4096:8192".into()));
    std::fs::write(
        &config,
        r#"{"containers": {"pids-limit": -1, "default-ulimits": []}}"#,
    )
    .unwrap();
    assert_eq!(limits(&w, &[]).0, "max");
    std::fs::write(&config, r#"{"containers": {"pids-limits": 5}}"#).unwrap();
    let out = w.run(&["run", "--rm", &bb, "true"]);
    assert_ne!(out.code, 0);
    assert!(out.stderr.contains("pids-limits"), "{out:?}");
    std::fs::remove_file(&config).unwrap();
    w.assert_clean();
}

#[test]
fn a_fork_bomb_in_a_default_container_stops_at_the_limit_and_others_answer() {
    let w = Wharf::new("limits-forkbomb");
    w.pull_busybox();
    let bb = busybox();
    w.ok(&["run", "-d", "--name", "other", &bb, "sleep", "1000"]);
    w.ok(&["run", "-d", "--name", "bomb", &bb, "sleep", "1000"]);
    let cg = pids_dir(w.pids("bomb")[0]);
    // The limit is in place before anything forks (this test must never bomb the host).
    assert_eq!(read(&cg, "pids.max"), "2048");
    w.ok(&["exec", "-d", "bomb", "sh", "-c", "b() { b | b & }; b"]);
    assert!(
        wait_until(Duration::from_secs(30), || read(&cg, "pids.current")
            .parse::<u32>()
            .unwrap()
            >= 2040),
        "the bomb never reached its limit: {}",
        read(&cg, "pids.current")
    );
    // While it pushes against its limit, the other container answers, and a new one runs.
    for _ in 0..3 {
        let t = Instant::now();
        assert_eq!(w.ok(&["exec", "other", "echo", "alive"]), "alive\n");
        assert!(t.elapsed() < Duration::from_secs(10), "{:?}", t.elapsed());
    }
    let t = Instant::now();
    assert_eq!(w.ok(&["run", "--rm", &bb, "echo", "new"]), "new\n");
    assert!(t.elapsed() < Duration::from_secs(20), "{:?}", t.elapsed());
    let current: u32 = read(&cg, "pids.current").parse().unwrap();
    assert!(current <= 2048, "{current}");
    eprintln!("the bomb holds {current} processes; the other container answered");
    // And it goes away whole.
    let t = Instant::now();
    w.ok(&["rm", "-f", "bomb", "other"]);
    assert!(t.elapsed() < Duration::from_secs(30), "{:?}", t.elapsed());
    w.assert_clean();
}
