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
    let ns = match netns {
        Some(p) => Some(
            std::fs::File::open(p)
                .map_err(|e| format!("open network namespace {}: {e}", p.display()))?,
        ),
        None => None,
    };
    let mut fds = [0; 2];
    // SAFETY: a two-int array for pipe2.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(format!("pipe: {}", std::io::Error::last_os_error()));
    }
    // SAFETY: both fds were just made and are owned here.
    let (r, w) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
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
