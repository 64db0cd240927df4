//! The Docker Engine API of `wharf daemon`, driven by real clients over its real socket:
//! docker's own CLI (v28, a client only, found on PATH or at /usr/local/bin/docker;
//! skipped with a printed reason when absent) through a docker user's session; raw HTTP
//! for malformed requests and docker's status codes; and idle connections against the
//! socket's gate.

mod cri_support;
mod engine_support;

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use cri_support::Daemon;
use engine_support::{Out, busybox, wait_until};

/// docker's CLI, if this machine has one.
fn docker_cli() -> Option<PathBuf> {
    std::env::var_os("PATH")
        .into_iter()
        .flat_map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .chain([PathBuf::from("/usr/local/bin"), PathBuf::from("/usr/bin")])
        .map(|d| d.join("docker"))
        .find(|p| p.is_file())
}

/// A daemon of the test's own and a docker CLI pointed at its Docker API socket.
struct Docker {
    d: Daemon,
    cli: PathBuf,
}

impl Docker {
    fn start(name: &str) -> Option<Docker> {
        let Some(cli) = docker_cli() else {
            eprintln!("skipped: no docker CLI on PATH or at /usr/local/bin/docker");
            return None;
        };
        let d = Daemon::start(name);
        let sock = d.w.run_dir().join("docker.sock");
        assert!(
            wait_until(Duration::from_secs(10), || sock.exists()),
            "no Docker API socket at {}",
            sock.display()
        );
        Some(Docker { d, cli })
    }

    fn socket(&self) -> PathBuf {
        self.d.w.run_dir().join("docker.sock")
    }

    fn cmd(&self, args: &[&str]) -> Command {
        let mut c = Command::new(&self.cli);
        c.args(args)
            .env("DOCKER_HOST", format!("unix://{}", self.socket().display()))
            .env("DOCKER_CONFIG", self.d.w.path("docker-config"))
            .env_remove("DOCKER_CONTEXT")
            .stdin(std::process::Stdio::null());
        c
    }

    fn run(&self, args: &[&str]) -> Out {
        eprintln!("docker {args:?}");
        self.cmd(args).output().expect("run docker").into()
    }

    /// Must succeed; its stdout.
    fn ok(&self, args: &[&str]) -> String {
        let o = self.run(args);
        assert_eq!(o.code, 0, "docker {args:?}: {o:?}");
        o.stdout
    }
}

#[test]
fn the_docker_cli_runs_a_users_session() {
    let Some(dk) = Docker::start("docker-cli") else {
        return;
    };
    let bb = busybox();
    let bb = bb.as_str();
    // Negotiation, and the server it found.
    let v = dk.ok(&[
        "version",
        "--format",
        "{{.Server.APIVersion}} {{.Server.Os}}",
    ]);
    assert_eq!(v.trim(), "1.50 linux");
    assert!(
        dk.ok(&["info", "--format", "{{.OSType}}"])
            .contains("linux")
    );
    // A pull, with docker's progress lines.
    let pull = dk.ok(&["pull", bb]);
    assert!(
        pull.contains("Pull complete") || pull.contains("Already exists"),
        "{pull}"
    );
    assert!(pull.contains("Digest: sha256:"), "{pull}");
    assert!(
        dk.ok(&["images", "--format", "{{.Repository}}:{{.Tag}}"])
            .contains(bb)
    );
    // run: output and exit codes.
    assert_eq!(dk.ok(&["run", "--rm", bb, "echo", "hello"]), "hello\n");
    assert_eq!(dk.run(&["run", "--rm", bb, "sh", "-c", "exit 3"]).code, 3);
    let out = dk.run(&["run", "--rm", bb, "nosuchprogram"]);
    assert_eq!(out.code, 127, "{out:?}");
    let out = dk.run(&["run", "--rm", "--name", "bad name", bb, "true"]);
    assert_eq!(out.code, 125, "{out:?}");
    assert!(out.stderr.contains("invalid container name"), "{out:?}");
    // Detached, listed, inspected.
    let id = dk.ok(&[
        "run",
        "-d",
        "--name",
        "web",
        "-p",
        "127.0.0.1::80",
        "-e",
        "GREETING=hi",
        "-l",
        "tier=front",
        "--restart",
        "unless-stopped",
        bb,
        "sh",
        "-c",
        "echo started; echo oops >&2; trap 'exit 0' TERM; while true; do sleep 0.2; done",
    ]);
    let id = id.trim();
    assert_eq!(id.len(), 32, "{id}");
    let ps = dk.ok(&["ps", "--format", "{{.Names}} {{.Status}}"]);
    assert!(ps.contains("web Up"), "{ps}");
    assert_eq!(
        dk.ok(&["ps", "-q", "--filter", "label=tier=front", "--no-trunc"])
            .trim(),
        id
    );
    assert_eq!(dk.ok(&["ps", "-q", "--filter", "label=tier=back"]), "");
    let f = dk.ok(&[
        "inspect",
        "-f",
        "{{.State.Status}} {{.Config.Env}} {{.HostConfig.RestartPolicy.Name}} {{.Name}}",
        "web",
    ]);
    assert!(f.contains("running") && f.contains("GREETING=hi"), "{f}");
    assert!(f.contains("unless-stopped /web"), "{f}");
    // exec: users, exit codes, a missing program.
    assert_eq!(
        dk.ok(&["exec", "web", "sh", "-c", "echo $GREETING"]),
        "hi\n"
    );
    assert_eq!(dk.ok(&["exec", "-u", "1000", "web", "id", "-u"]), "1000\n");
    assert_eq!(dk.run(&["exec", "web", "sh", "-c", "exit 7"]).code, 7);
    assert_eq!(dk.run(&["exec", "web", "nosuchprogram"]).code, 127);
    assert_eq!(dk.ok(&["exec", "-w", "/tmp", "web", "pwd"]), "/tmp\n");
    // logs: both streams, tail, timestamps.
    assert!(wait_until(Duration::from_secs(10), || dk
        .run(&["logs", "web"])
        .stdout
        .contains("started")));
    let logs = dk.run(&["logs", "web"]);
    assert_eq!(
        (logs.stdout.as_str(), logs.stderr.as_str()),
        ("started\n", "oops\n")
    );
    let ts = dk.run(&["logs", "-t", "--tail", "1", "web"]);
    assert_eq!(ts.stdout, "", "{ts:?}");
    assert!(
        ts.stderr.ends_with("Z oops\n") && ts.stderr.contains('T'),
        "{ts:?}"
    );
    // cp both ways.
    let host = dk.d.w.path("to-copy.txt");
    std::fs::write(&host, "copied in\n").unwrap();
    dk.ok(&["cp", host.to_str().unwrap(), "web:/tmp/in.txt"]);
    assert_eq!(dk.ok(&["exec", "web", "cat", "/tmp/in.txt"]), "copied in\n");
    let back = dk.d.w.path("back.txt");
    dk.ok(&["cp", "web:/tmp/in.txt", back.to_str().unwrap()]);
    assert_eq!(std::fs::read_to_string(&back).unwrap(), "copied in\n");
    // A path out of the container is refused: its links resolve inside it.
    dk.ok(&["exec", "web", "ln", "-s", "/", "/tmp/root-link"]);
    let out_of = dk.d.w.path("out-of");
    std::fs::create_dir_all(&out_of).unwrap();
    dk.ok(&[
        "cp",
        "web:/tmp/root-link/etc/hostname",
        out_of.to_str().unwrap(),
    ]);
    assert_eq!(
        std::fs::read_to_string(out_of.join("hostname"))
            .unwrap()
            .trim(),
        "web"
    );
    // diff, port, top, stats.
    assert!(dk.ok(&["diff", "web"]).contains("A /tmp/in.txt"));
    let port = dk.ok(&["port", "web", "80"]);
    assert!(port.starts_with("127.0.0.1:"), "{port}");
    assert!(dk.ok(&["top", "web"]).contains("sleep"));
    let stats = dk.ok(&[
        "stats",
        "--no-stream",
        "--format",
        "{{.Name}} {{.PIDs}}",
        "web",
    ]);
    assert!(stats.starts_with("web "), "{stats}");
    // rename, pause, unpause, restart, stop, start.
    dk.ok(&["rename", "web", "site"]);
    dk.ok(&["pause", "site"]);
    assert!(dk.ok(&["ps", "--format", "{{.Status}}"]).contains("Paused"));
    dk.ok(&["unpause", "site"]);
    dk.ok(&["restart", "-t", "1", "site"]);
    dk.ok(&["stop", "-t", "2", "site"]);
    let st = dk.ok(&[
        "inspect",
        "-f",
        "{{.State.Status}} {{.State.ExitCode}}",
        "site",
    ]);
    assert_eq!(st.trim(), "exited 0");
    dk.ok(&["start", "site"]);
    assert!(dk.ok(&["ps", "--format", "{{.Names}}"]).contains("site"));
    // -P, tmpfs, volumes, bind mounts.
    let p = dk.ok(&[
        "run", "-d", "--name", "pub", "-P", "--expose", "9000", bb, "sleep", "100",
    ]);
    assert!(!p.trim().is_empty());
    assert!(dk.ok(&["port", "pub"]).contains("9000/tcp -> 0.0.0.0:"));
    let mounts = dk.ok(&[
        "run",
        "--rm",
        "--tmpfs",
        "/scratch:size=1m",
        bb,
        "grep",
        "/scratch",
        "/proc/mounts",
    ]);
    assert!(mounts.contains("tmpfs"), "{mounts}");
    dk.ok(&["volume", "create", "data"]);
    dk.ok(&[
        "run",
        "--rm",
        "-v",
        "data:/data",
        bb,
        "sh",
        "-c",
        "echo kept > /data/f",
    ]);
    assert_eq!(
        dk.ok(&["run", "--rm", "-v", "data:/data:ro", bb, "cat", "/data/f"]),
        "kept\n"
    );
    let bind = dk.d.w.path("bind");
    std::fs::create_dir_all(&bind).unwrap();
    std::fs::write(bind.join("f"), "bound\n").unwrap();
    let spec = format!("{}:/b:ro", bind.display());
    assert_eq!(
        dk.ok(&["run", "--rm", "-v", &spec, bb, "cat", "/b/f"]),
        "bound\n"
    );
    // User networks by name and alias; a container's network.
    dk.ok(&["network", "create", "appnet"]);
    dk.ok(&[
        "run",
        "-d",
        "--name",
        "db",
        "--network",
        "appnet",
        "--network-alias",
        "database",
        bb,
        "sleep",
        "100",
    ]);
    let ping = dk.run(&[
        "run",
        "--rm",
        "--network",
        "appnet",
        bb,
        "sh",
        "-c",
        "ping -c1 -W2 db && ping -c1 -W2 database",
    ]);
    assert_eq!(ping.code, 0, "{ping:?}");
    let shared = dk.ok(&["run", "--rm", "--network", "container:db", bb, "hostname"]);
    assert_eq!(shared.trim(), "db");
    // A second network: at run time (several --network) and by connect/disconnect.
    dk.ok(&["network", "create", "other"]);
    let two = dk.ok(&[
        "run",
        "--rm",
        "--network",
        "appnet",
        "--network",
        "name=other,alias=second",
        bb,
        "sh",
        "-c",
        "ip -o -4 addr | grep -c ' eth[01] ' && ping -c1 -W2 database >/dev/null && echo reached",
    ]);
    assert_eq!(two, "2\nreached\n");
    dk.ok(&["network", "connect", "--alias", "store", "other", "db"]);
    let nets = dk.ok(&[
        "inspect",
        "-f",
        "{{range $k, $v := .NetworkSettings.Networks}}{{$k}} {{end}}",
        "db",
    ]);
    assert_eq!(nets.trim(), "appnet other");
    let reach = dk.run(&[
        "run",
        "--rm",
        "--network",
        "other",
        bb,
        "ping",
        "-c1",
        "-W2",
        "store",
    ]);
    assert_eq!(reach.code, 0, "{reach:?}");
    let again = dk.run(&["network", "connect", "other", "db"]);
    assert!(again.stderr.contains("already exists"), "{again:?}");
    let first = dk.run(&["network", "disconnect", "appnet", "db"]);
    assert!(
        first.code != 0 && first.stderr.contains("appnet"),
        "{first:?}"
    );
    dk.ok(&["network", "disconnect", "other", "db"]);
    let gone = dk.run(&[
        "run",
        "--rm",
        "--network",
        "other",
        bb,
        "ping",
        "-c1",
        "-W1",
        "store",
    ]);
    assert_ne!(gone.code, 0, "{gone:?}");
    dk.ok(&["network", "rm", "other"]);
    // Names, DNS, limits, kernel parameters, /dev/shm, init, labels.
    let hosts = dk.ok(&[
        "run",
        "--rm",
        "--add-host",
        "reg:10.1.2.3",
        bb,
        "grep",
        "reg",
        "/etc/hosts",
    ]);
    assert!(hosts.contains("10.1.2.3"), "{hosts}");
    let dns = dk.ok(&[
        "run",
        "--rm",
        "--dns",
        "10.0.0.53",
        "--dns-search",
        "corp.example",
        bb,
        "cat",
        "/etc/resolv.conf",
    ]);
    assert!(
        dns.contains("nameserver 10.0.0.53") && dns.contains("search corp.example"),
        "{dns}"
    );
    let ul = dk.ok(&[
        "run",
        "--rm",
        "--ulimit",
        "nofile=1024:2048",
        bb,
        "sh",
        "-c",
        "ulimit -n; ulimit -Hn",
    ]);
    assert_eq!(ul, "1024\n2048\n");
    let sysctl = dk.ok(&[
        "run",
        "--rm",
        "--sysctl",
        "net.ipv4.ip_unprivileged_port_start=0",
        bb,
        "cat",
        "/proc/sys/net/ipv4/ip_unprivileged_port_start",
    ]);
    assert_eq!(sysctl.trim(), "0");
    let shm = dk.ok(&[
        "run",
        "--rm",
        "--shm-size",
        "128m",
        bb,
        "df",
        "-k",
        "/dev/shm",
    ]);
    assert!(shm.contains("131072"), "{shm}");
    let init = dk.ok(&["run", "--rm", "--init", bb, "ps", "-o", "pid,comm"]);
    assert!(
        init.lines()
            .nth(1)
            .is_some_and(|l| l.trim().starts_with('1')),
        "{init}"
    );
    dk.ok(&[
        "run", "-d", "--name", "labelled", "--label", "a=b", bb, "true",
    ]);
    assert_eq!(
        dk.ok(&[
            "inspect",
            "-f",
            "{{index .Config.Labels \"a\"}}",
            "labelled"
        ])
        .trim(),
        "b"
    );
    // --rm: nothing left; restart policies.
    let before = dk.ok(&["ps", "-aq"]).lines().count();
    dk.ok(&["run", "--rm", bb, "true"]);
    assert_eq!(dk.ok(&["ps", "-aq"]).lines().count(), before);
    dk.ok(&[
        "run",
        "-d",
        "--name",
        "flaky",
        "--restart",
        "on-failure:2",
        bb,
        "sh",
        "-c",
        "sleep 0.3; exit 1",
    ]);
    assert!(wait_until(Duration::from_secs(20), || dk
        .ok(&[
            "inspect",
            "-f",
            "{{.RestartCount}} {{.State.Status}}",
            "flaky"
        ])
        .trim()
        == "2 exited"));
    // Images: tag, history, commit, export.
    dk.ok(&["tag", bb, "me/bb:1"]);
    assert!(
        dk.ok(&["images", "--format", "{{.Repository}}:{{.Tag}}"])
            .contains("me/bb:1")
    );
    assert!(!dk.ok(&["history", "me/bb:1"]).is_empty());
    dk.ok(&["exec", "site", "sh", "-c", "echo committed > /committed"]);
    dk.ok(&["commit", "site", "me/site:2"]);
    assert_eq!(
        dk.ok(&["run", "--rm", "me/site:2", "cat", "/committed"]),
        "committed\n"
    );
    let tar = dk.d.w.path("site.tar");
    dk.ok(&["export", "-o", tar.to_str().unwrap(), "site"]);
    assert!(std::fs::metadata(&tar).unwrap().len() > 100_000);
    // A health check.
    dk.ok(&[
        "run",
        "-d",
        "--name",
        "healthy",
        "--health-cmd",
        "true",
        "--health-interval",
        "1s",
        bb,
        "sleep",
        "100",
    ]);
    assert!(wait_until(Duration::from_secs(20), || dk
        .ok(&["inspect", "-f", "{{.State.Health.Status}}", "healthy"])
        .trim()
        == "healthy"));
    // system df, events, prune.
    assert!(dk.ok(&["system", "df"]).contains("Images"));
    let ev = dk.ok(&[
        "events",
        "--since",
        "5m",
        "--until",
        "0s",
        "--filter",
        "container=labelled",
        "--format",
        "{{.Action}}",
    ]);
    assert!(ev.contains("create") && ev.contains("start"), "{ev}");
    let pruned = dk.ok(&["container", "prune", "-f"]);
    assert!(pruned.contains("Total reclaimed space"), "{pruned}");
    assert!(
        !dk.ok(&["ps", "-a", "--format", "{{.Names}}"])
            .contains("labelled")
    );
    // The rest goes.
    dk.ok(&["rm", "-f", "site", "pub", "db", "healthy"]);
    dk.ok(&["network", "rm", "appnet"]);
    dk.ok(&["volume", "rm", "data"]);
    assert_eq!(dk.ok(&["ps", "-aq"]), "");
}

/// One HTTP/1.1 request over the socket; status and body.
fn http(sock: &Path, method: &str, path: &str, body: &[u8]) -> (u16, String) {
    let mut s = UnixStream::connect(sock).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let head = format!(
        "{method} {path} HTTP/1.1\r\nHost: docker\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    s.write_all(head.as_bytes()).unwrap();
    let _ = s.write_all(body);
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    let text = String::from_utf8_lossy(&out).into_owned();
    let status = text
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let body = text
        .split_once("\r\n\r\n")
        .map_or("", |(_, b)| b)
        .to_string();
    (status, body)
}

#[test]
fn malformed_requests_get_dockers_codes_and_leave_nothing() {
    let d = Daemon::start("docker-errors");
    let sock = d.w.run_dir().join("docker.sock");
    assert!(wait_until(Duration::from_secs(10), || sock.exists()));
    d.w.pull_busybox();
    let bb = busybox();
    let create = |name: &str, body: &str| {
        http(
            &sock,
            "POST",
            &format!("/v1.50/containers/create?name={name}"),
            body.as_bytes(),
        )
    };
    // Bad JSON, a wrong type, a huge body, an image that is not there.
    let (code, body) = create("x", "{not json");
    assert_eq!(code, 400, "{body}");
    assert!(
        body.contains("\"message\"") && body.contains("invalid JSON"),
        "{body}"
    );
    let (code, body) = create("x", &format!(r#"{{"Image": "{bb}", "Cmd": "not-a-list"}}"#));
    assert_eq!(code, 400, "{body}");
    let huge = format!(
        r#"{{"Image": "{bb}", "Env": ["X={}"]}}"#,
        "a".repeat(5 << 20)
    );
    let (code, body) = create("x", &huge);
    assert_eq!(code, 413, "{body}");
    let (code, body) = create("x", r#"{"Image": "nosuch/image:1"}"#);
    assert_eq!(code, 404, "{body}");
    assert!(body.contains("No such image: nosuch/image:1"), "{body}");
    // Fields docker ignores are ignored; a field Wharf cannot honour is refused by name.
    let (code, body) = create(
        "ok",
        &format!(r#"{{"Image": "{bb}", "Cmd": ["sleep", "100"], "SomeFutureField": 1}}"#),
    );
    assert_eq!(code, 201, "{body}");
    let (code, body) = create(
        "links",
        &format!(r#"{{"Image": "{bb}", "HostConfig": {{"Links": ["a:b"]}}}}"#),
    );
    assert_eq!(code, 400, "{body}");
    assert!(body.contains("Links"), "{body}");
    // Invalid and conflicting names; a hostile alias.
    let (code, body) = create("bad%20name", &format!(r#"{{"Image": "{bb}"}}"#));
    assert_eq!(code, 400, "{body}");
    let (code, body) = create("ok", &format!(r#"{{"Image": "{bb}"}}"#));
    assert_eq!(code, 409, "{body}");
    assert!(body.contains("already in use"), "{body}");
    let (code, body) = create(
        "alias",
        &format!(
            r#"{{"Image": "{bb}", "NetworkingConfig": {{"EndpointsConfig": {{"bridge": {{"Aliases": ["a\n6.6.6.6 evil"]}}}}}}}}"#
        ),
    );
    assert_eq!(code, 400, "{body}");
    assert!(body.contains("invalid network alias"), "{body}");
    // A hijack on a container that does not run: exec refused with 409.
    let (code, body) = http(
        &sock,
        "POST",
        "/v1.50/containers/ok/exec",
        br#"{"Cmd": ["true"]}"#,
    );
    assert_eq!(code, 409, "{body}");
    // Unknown objects and paths, versions out of range.
    assert_eq!(
        http(&sock, "GET", "/v1.50/containers/nosuch/json", b"").0,
        404
    );
    assert_eq!(http(&sock, "GET", "/v1.50/nowhere", b"").0, 404);
    let (code, body) = http(&sock, "GET", "/v1.99/version", b"");
    assert_eq!(code, 400, "{body}");
    assert!(body.contains("too new"), "{body}");
    assert_eq!(http(&sock, "GET", "/v1.20/version", b"").0, 400);
    assert_eq!(http(&sock, "GET", "/_ping", b"").0, 200);
    // A build with no context: docker's stream with the error, nothing made.
    let (code, body) = http(&sock, "POST", "/v1.50/build", b"");
    assert_eq!(code, 200, "{body}");
    assert!(
        body.contains("errorDetail") && body.contains("Dockerfile"),
        "{body}"
    );
    let (code, body) = http(&sock, "POST", "/v1.50/build?buildargs=%7Bnot-json", b"");
    assert_eq!(code, 400, "{body}");
    assert!(body.contains("buildargs"), "{body}");
    // Nothing half-made: the one container created, and no other pod.
    let ps = d.w.ok(&["ps", "-a", "--format", "{{.Names}}"]);
    assert_eq!(ps.trim(), "ok");
    assert_eq!(d.w.ok(&["pod", "ls", "-q"]).lines().count(), 1);
    assert_eq!(
        http(&sock, "DELETE", "/v1.50/containers/ok?force=1", b"").0,
        204
    );
}

#[test]
fn idle_connections_to_the_docker_socket_leave_it_serving() {
    let d = Daemon::start("docker-idle");
    let sock = d.w.run_dir().join("docker.sock");
    assert!(wait_until(Duration::from_secs(10), || sock.exists()));
    let fds = |pid: u32| {
        std::fs::read_dir(format!("/proc/{pid}/fd"))
            .map(|d| d.count())
            .unwrap_or(0)
    };
    let before = fds(d.child.id());
    let idle: Vec<UnixStream> = (0..2000)
        .map(|_| UnixStream::connect(&sock).unwrap())
        .collect();
    std::thread::sleep(Duration::from_millis(500));
    let held = fds(d.child.id());
    assert!(
        held < before + wharf_cri::conn_gate::MAX_WAITING + 64,
        "the daemon holds {held} descriptors ({before} before)"
    );
    let t = Instant::now();
    let (code, body) = http(&sock, "GET", "/v1.50/version", b"");
    assert_eq!(code, 200, "{body}");
    assert!(t.elapsed() < Duration::from_secs(5), "{:?}", t.elapsed());
    drop(idle);
}

#[test]
fn only_root_reaches_the_docker_socket() {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    use std::os::unix::process::CommandExt;
    let d = Daemon::start("docker-perm");
    let sock = d.w.run_dir().join("docker.sock");
    assert!(wait_until(Duration::from_secs(10), || sock.exists()));
    let m = std::fs::metadata(&sock).unwrap();
    assert_eq!(m.permissions().mode() & 0o777, 0o660);
    assert_eq!((m.uid(), m.gid()), (0, 0));
    // An unprivileged user (nobody) cannot connect.
    let mut c = Command::new("python3");
    c.args([
        "-c",
        "import socket,sys\ns=socket.socket(socket.AF_UNIX)\ntry:\n    s.connect(sys.argv[1])\n    print('connected')\nexcept PermissionError:\n    print('refused')\n",
    ])
    .arg(&sock);
    // SAFETY: setgroups/setgid/setuid in the child between fork and exec.
    unsafe {
        c.pre_exec(|| {
            if libc::setgroups(0, std::ptr::null()) != 0
                || libc::setgid(65534) != 0
                || libc::setuid(65534) != 0
            {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let out = c.output().expect("python3");
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        "refused",
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `docker run -d` leaves nothing behind, nor does a client that walks away from a wait
/// or a followed log: the daemon's threads for them end soon after, not when the
/// container does.
#[test]
fn abandoned_waits_and_log_follows_end_their_threads() {
    let d = Daemon::start("docker-abandon");
    let sock = d.w.run_dir().join("docker.sock");
    assert!(wait_until(Duration::from_secs(10), || sock.exists()));
    d.w.pull_busybox();
    let bb = busybox();
    let (code, body) = http(
        &sock,
        "POST",
        "/v1.50/containers/create?name=long",
        format!(r#"{{"Image": "{bb}", "Cmd": ["sleep", "300"]}}"#).as_bytes(),
    );
    assert_eq!(code, 201, "{body}");
    assert_eq!(
        http(&sock, "POST", "/v1.50/containers/long/start", b"").0,
        204
    );
    let threads = || {
        std::fs::read_dir(format!("/proc/{}/task", d.child.id()))
            .map(|t| t.count())
            .unwrap_or(0)
    };
    // The engine pool's threads go 2 s after their last call.
    std::thread::sleep(Duration::from_secs(3));
    let before = threads();
    let open = |path: &str| {
        let mut s = UnixStream::connect(&sock).unwrap();
        write!(
            s,
            "POST {path} HTTP/1.1\r\nHost: docker\r\nContent-Length: 0\r\n\r\n"
        )
        .unwrap();
        s
    };
    let mut clients: Vec<UnixStream> = (0..5)
        .map(|_| open("/v1.50/containers/long/wait"))
        .collect();
    clients.extend((0..3).map(|_| {
        let mut s = UnixStream::connect(&sock).unwrap();
        write!(
            s,
            "GET /v1.50/containers/long/logs?follow=1&stdout=1 HTTP/1.1\r\nHost: docker\r\n\r\n"
        )
        .unwrap();
        s
    }));
    // Each has its answer's head: the waits and follows are under way.
    for c in clients.iter_mut() {
        c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let mut buf = [0u8; 12];
        c.read_exact(&mut buf).unwrap();
        assert_eq!(&buf, b"HTTP/1.1 200", "{}", String::from_utf8_lossy(&buf));
    }
    let during = threads();
    assert!(
        during >= before + 8,
        "{during} threads while 8 clients wait ({before} before)"
    );
    drop(clients);
    assert!(
        wait_until(Duration::from_secs(8), || threads() <= before),
        "{} threads after the clients left ({before} before)",
        threads()
    );
    // And the container runs on.
    let (code, body) = http(&sock, "GET", "/v1.50/containers/long/json", b"");
    assert_eq!(code, 200, "{body}");
    assert!(body.contains(r#""Running":true"#), "{body}");
    assert_eq!(
        http(&sock, "DELETE", "/v1.50/containers/long?force=1", b"").0,
        204
    );
}

/// A wait for removal (what `docker run --rm` sends) of a container that runs, exits and
/// is removed between two looks of the wait: the daemon is stopped (SIGSTOP) while the
/// daemon-less CLI starts and removes the container, so the wait next finds it gone. It
/// must answer the code recorded before the removal, not 0.
#[test]
fn a_wait_that_finds_its_container_gone_tells_the_recorded_exit_code() {
    let Some(dk) = Docker::start("docker-rm-code") else {
        return;
    };
    let bb = busybox();
    dk.ok(&["pull", &bb]);
    dk.ok(&["create", "--name", "quick", &bb, "sh", "-c", "exit 3"]);
    let sock = dk.socket();
    let wait = std::thread::spawn(move || {
        http(
            &sock,
            "POST",
            "/v1.50/containers/quick/wait?condition=removed",
            b"",
        )
    });
    std::thread::sleep(Duration::from_millis(500));
    let pid = dk.d.child.id() as i32;
    // SAFETY: kill(2) of the daemon this test started.
    unsafe { libc::kill(pid, libc::SIGSTOP) };
    let started = dk.d.w.run(&["start", "-a", "quick"]);
    let removed = dk.d.w.run(&["rm", "quick"]);
    // SAFETY: as above.
    unsafe { libc::kill(pid, libc::SIGCONT) };
    assert_eq!(started.code, 3, "{started:?}");
    assert_eq!(removed.code, 0, "{removed:?}");
    let (code, body) = wait.join().unwrap();
    assert_eq!(code, 200, "{body}");
    assert!(body.contains("\"StatusCode\":3"), "{body}");
}

/// `DOCKER_BUILDKIT=0 docker build` through the Docker API: the classic builder's stream,
/// the image named and runnable, a failing step's code and message.
#[test]
fn docker_build_through_the_api() {
    let Some(dk) = Docker::start("docker-build") else {
        return;
    };
    let bb = busybox();
    dk.ok(&["pull", &bb]);
    let ctx = dk.d.w.path("ctx");
    std::fs::create_dir_all(&ctx).unwrap();
    std::fs::write(
        ctx.join("Dockerfile"),
        format!("FROM {bb}\nCOPY msg /msg\nRUN cat /msg > /copy\nCMD [\"cat\", \"/copy\"]\n"),
    )
    .unwrap();
    std::fs::write(ctx.join("msg"), "built by wharf\n").unwrap();
    let build = |args: &[&str]| {
        let mut c = dk.cmd(args);
        c.env("DOCKER_BUILDKIT", "0");
        let o = c.output().unwrap();
        (
            o.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&o.stdout).into_owned() + &String::from_utf8_lossy(&o.stderr),
        )
    };
    let (code, out) = build(&["build", "-t", "viaapi:1", ctx.to_str().unwrap()]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("Step 1/4 : FROM"), "{out}");
    assert!(out.contains("Successfully tagged viaapi:1"), "{out}");
    assert_eq!(dk.ok(&["run", "--rm", "viaapi:1"]), "built by wharf\n");
    // The step images are intermediate: listed with -a only, as docker lists them.
    assert!(!dk.ok(&["images"]).contains("<none>"));
    assert!(dk.ok(&["images", "-a"]).contains("<none>"));
    std::fs::write(ctx.join("Dockerfile"), format!("FROM {bb}\nRUN exit 7\n")).unwrap();
    let (code, out) = build(&["build", "-t", "viaapi:2", ctx.to_str().unwrap()]);
    assert_ne!(code, 0, "{out}");
    assert!(out.contains("returned a non-zero code: 7"), "{out}");
    assert_eq!(dk.ok(&["ps", "-aq"]), "");
}
