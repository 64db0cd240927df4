//! httpGet and tcpSocket actions (kubelet's probes and hooks): a forked child of the shim
//! enters the pod's network namespace, connects, for HTTP sends one GET and reads the
//! status line, writes a one-line verdict to a pipe and exits (0: success). The shim's
//! loop stays single-threaded and never blocks on a peer: it learns the result from the
//! child's exit, like that of an exec'd check, and a child that outlives the timeout is
//! killed.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::Path;
use std::time::Duration;

/// An HTTP GET to make after connecting.
pub struct HttpGet<'a> {
    /// Path and query ("/healthz").
    pub path: &'a str,
    /// Extra headers (a `Host` one replaces the default).
    pub headers: &'a [(String, String)],
}

/// The largest response head read.
const MAX_HEAD: usize = 8192;

/// Start a check: connect to `host:port` from `netns` (the shim's own namespace when
/// None), then make `http` if given. Returns the child's pid and the read end of its
/// verdict pipe.
pub fn spawn(
    netns: Option<&Path>,
    host: &str,
    port: u16,
    http: Option<HttpGet<'_>>,
    timeout: Duration,
) -> Result<(i32, OwnedFd), String> {
    let ns = open_netns(netns)?;
    let (r, w) = verdict_pipe()?;
    // SAFETY: the shim is single-threaded, so the child may allocate; it ends in _exit.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(format!("fork: {}", std::io::Error::last_os_error()));
    }
    if pid == 0 {
        let keep = [
            w.as_raw_fd(),
            ns.as_ref().map(|f| f.as_raw_fd()).unwrap_or(-1),
        ];
        close_others(&keep);
        let (code, msg) = match ns.as_ref().map(|f| {
            // SAFETY: setns on an open namespace file.
            unsafe { libc::setns(f.as_raw_fd(), libc::CLONE_NEWNET) }
        }) {
            Some(r) if r != 0 => (
                1,
                format!(
                    "enter the pod's network namespace: {}",
                    std::io::Error::last_os_error()
                ),
            ),
            _ => check(host, port, http, timeout),
        };
        let mut w = std::fs::File::from(w);
        let _ = w.write_all(msg.as_bytes());
        // SAFETY: the child ends here, running nothing of the parent's.
        unsafe { libc::_exit(code) };
    }
    Ok((pid, r))
}

/// Start `helper args...` in `netns` (the shim's own namespace when None), its output to
/// a verdict pipe: for checks the shim cannot make itself (HTTPS, gRPC). Returns the
/// child's pid and the read end of the pipe.
pub fn spawn_helper(
    netns: Option<&Path>,
    helper: &Path,
    args: &[String],
) -> Result<(i32, OwnedFd), String> {
    use std::ffi::CString;
    use std::os::unix::ffi::OsStrExt;
    let ns = open_netns(netns)?;
    let prog = CString::new(helper.as_os_str().as_bytes())
        .map_err(|_| format!("probe helper {}: a NUL in its path", helper.display()))?;
    let mut argv: Vec<CString> = vec![prog.clone()];
    for a in args {
        argv.push(CString::new(a.as_bytes()).map_err(|_| format!("argument {a:?}: a NUL"))?);
    }
    let mut ptrs: Vec<*const libc::c_char> = argv.iter().map(|a| a.as_ptr()).collect();
    ptrs.push(std::ptr::null());
    let (r, w) = verdict_pipe()?;
    // SAFETY: the shim is single-threaded; the child only calls setns, dup2, sigprocmask,
    // execv and _exit.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(format!("fork: {}", std::io::Error::last_os_error()));
    }
    if pid == 0 {
        // SAFETY: in the child, on descriptors it holds; argv outlives the exec.
        unsafe {
            if let Some(f) = &ns
                && libc::setns(f.as_raw_fd(), libc::CLONE_NEWNET) != 0
            {
                libc::_exit(1);
            }
            libc::dup2(w.as_raw_fd(), 1);
            libc::dup2(w.as_raw_fd(), 2);
            // The shim blocks the signals its signalfd reads; the helper must not.
            let mut set: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut set);
            libc::sigprocmask(libc::SIG_SETMASK, &set, std::ptr::null_mut());
            libc::execv(prog.as_ptr(), ptrs.as_ptr());
            libc::_exit(127);
        }
    }
    Ok((pid, r))
}

/// The network namespace a check runs in, opened before the fork (so that a missing one
/// is the shim's error, not a failed check).
fn open_netns(netns: Option<&Path>) -> Result<Option<std::fs::File>, String> {
    netns
        .map(|p| {
            std::fs::File::open(p)
                .map_err(|e| format!("open network namespace {}: {e}", p.display()))
        })
        .transpose()
}

/// The pipe a check writes its verdict to: (read end, write end).
fn verdict_pipe() -> Result<(OwnedFd, OwnedFd), String> {
    let mut fds = [0; 2];
    // SAFETY: a two-int array for pipe2.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(format!("pipe: {}", std::io::Error::last_os_error()));
    }
    // SAFETY: both fds were just made and are owned here.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// The verdict a finished child wrote (empty if none).
pub fn verdict(fd: OwnedFd) -> String {
    let mut s = String::new();
    let _ = std::fs::File::from(fd).take(4096).read_to_string(&mut s);
    s
}

/// Close every descriptor above stderr but `keep` (the child holds nothing of the
/// shim's: no client waits on a copy of a socket or pipe it has).
fn close_others(keep: &[i32]) {
    let mut keep: Vec<u32> = keep.iter().filter(|&&f| f > 2).map(|&f| f as u32).collect();
    keep.sort_unstable();
    let mut from = 3u32;
    for k in keep {
        if k > from {
            // SAFETY: closing descriptors of this (forked) process only.
            unsafe { libc::syscall(libc::SYS_close_range, from, k - 1, 0) };
        }
        from = k + 1;
    }
    // SAFETY: as above.
    unsafe { libc::syscall(libc::SYS_close_range, from, u32::MAX, 0) };
}

/// Connect and, for HTTP, judge the response as kubelet does (200-399 succeed). Returns
/// the exit code and the verdict line.
fn check(host: &str, port: u16, http: Option<HttpGet<'_>>, timeout: Duration) -> (i32, String) {
    let addr: SocketAddr = match (host, port).to_socket_addrs().map(|mut a| a.next()) {
        Ok(Some(a)) => a,
        Ok(None) | Err(_) => return (1, format!("dial tcp {host}:{port}: no such host")),
    };
    let mut stream = match TcpStream::connect_timeout(&addr, timeout) {
        Ok(s) => s,
        Err(e) if e.kind() == std::io::ErrorKind::TimedOut => {
            return (1, format!("dial tcp {addr}: i/o timeout"));
        }
        Err(e) => return (1, format!("dial tcp {addr}: connect: {}", error_text(&e))),
    };
    let Some(http) = http else {
        return (0, String::new());
    };
    let _ = stream.set_read_timeout(Some(timeout));
    let _ = stream.set_write_timeout(Some(timeout));
    let mut req = format!("GET {} HTTP/1.1\r\n", http.path);
    if !http
        .headers
        .iter()
        .any(|(k, _)| k.eq_ignore_ascii_case("host"))
    {
        req.push_str(&format!("Host: {}\r\n", host_header(&addr)));
    }
    if !http
        .headers
        .iter()
        .any(|(k, _)| k.eq_ignore_ascii_case("user-agent"))
    {
        req.push_str("User-Agent: kube-probe/wharf\r\n");
    }
    for (k, v) in http.headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str("Accept: */*\r\nConnection: close\r\n\r\n");
    let url = format!("http://{}{}", host_header(&addr), http.path);
    if let Err(e) = stream.write_all(req.as_bytes()) {
        return (1, format!("Get \"{url}\": {}", error_text(&e)));
    }
    let mut head = Vec::new();
    let mut buf = [0u8; 1024];
    while !head.windows(2).any(|w| w == b"\r\n") && head.len() < MAX_HEAD {
        match stream.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => head.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                return (1, format!("Get \"{url}\": context deadline exceeded"));
            }
            Err(e) => return (1, format!("Get \"{url}\": {}", error_text(&e))),
        }
    }
    let line = String::from_utf8_lossy(&head);
    let status = line
        .lines()
        .next()
        .and_then(|l| {
            let mut parts = l.split_whitespace();
            parts
                .next()
                .filter(|v| v.starts_with("HTTP/"))
                .and(parts.next())
        })
        .and_then(|c| c.parse::<u16>().ok());
    match status {
        Some(code) if (200..400).contains(&code) => (0, String::new()),
        Some(code) => (1, format!("HTTP probe failed with statuscode: {code}")),
        None => (1, format!("Get \"{url}\": malformed HTTP response")),
    }
}

fn host_header(addr: &SocketAddr) -> String {
    match addr {
        SocketAddr::V4(a) => format!("{}:{}", a.ip(), a.port()),
        SocketAddr::V6(a) => format!("[{}]:{}", a.ip(), a.port()),
    }
}

/// An I/O error as Go's net package words the common ones (what kubelet's messages show).
fn error_text(e: &std::io::Error) -> String {
    match e.kind() {
        std::io::ErrorKind::ConnectionRefused => "connection refused".into(),
        std::io::ErrorKind::ConnectionReset => "connection reset by peer".into(),
        _ => e.to_string(),
    }
}
