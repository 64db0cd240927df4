//! Foreground `run`: forward signals to the container's init, relay its terminal, and return
//! its exit status the way a shell reports it (code, or 128 + signal).

use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd};

use anyhow::{Context, Result};
use rustix::event::{PollFd, PollFlags, poll};

use crate::raw_mode::RawMode;

/// A connected pair of unix stream sockets (ours, the container's console socket).
pub fn socketpair() -> Result<(OwnedFd, OwnedFd)> {
    rustix::net::socketpair(
        rustix::net::AddressFamily::UNIX,
        rustix::net::SocketType::STREAM,
        rustix::net::SocketFlags::CLOEXEC,
        None,
    )
    .context("create the console socket pair")
}

/// Signals forwarded to the container (all catchable ones but SIGCHLD, SIGURG and
/// SIGWINCH, which resizes the terminal instead).
fn forwarded() -> Vec<i32> {
    (1..=64)
        .filter(|s| {
            ![
                libc::SIGKILL,
                libc::SIGSTOP,
                libc::SIGCHLD,
                libc::SIGURG,
                32,
                33,
            ]
            .contains(s)
        })
        .collect()
}

fn copy_winsize(master: &OwnedFd) {
    if let Ok(ws) = rustix::termios::tcgetwinsize(std::io::stdin().as_fd()) {
        let _ = rustix::termios::tcsetwinsize(master, ws);
    }
}

/// Wait for the init `pid` (our child), relaying `master` if there is a terminal.
pub fn wait_foreground(pid: i32, pidfd: &OwnedFd, master: Option<OwnedFd>) -> Result<i32> {
    // SAFETY: sigset manipulation on a local set, then blocking those signals for this
    // (single-threaded) process so they arrive through the signalfd.
    let sfd = unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        for s in forwarded() {
            libc::sigaddset(&mut set, s);
        }
        libc::sigaddset(&mut set, libc::SIGWINCH);
        libc::sigprocmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
        let fd = libc::signalfd(-1, &set, libc::SFD_CLOEXEC | libc::SFD_NONBLOCK);
        if fd < 0 {
            return Err(std::io::Error::last_os_error()).context("signalfd");
        }
        OwnedFd::from_raw_fd(fd)
    };
    let _raw = master.as_ref().map(|m| {
        copy_winsize(m);
        RawMode::enter()
    });
    let stdin = std::io::stdin();
    let stdout = std::io::stdout();
    let mut stdin_open = master.is_some();
    let mut master_open = master.is_some();
    let mut buf = [0u8; 8192];
    loop {
        let mut fds = vec![
            PollFd::new(pidfd, PollFlags::IN),
            PollFd::new(&sfd, PollFlags::IN),
        ];
        if let (Some(m), true) = (&master, master_open) {
            fds.push(PollFd::new(m, PollFlags::IN));
            if stdin_open {
                fds.push(PollFd::new(&stdin, PollFlags::IN));
            }
        }
        match poll(&mut fds, None) {
            Ok(_) | Err(rustix::io::Errno::INTR) => {}
            Err(e) => return Err(e).context("poll"),
        }
        let ev: Vec<PollFlags> = fds.iter().map(|f| f.revents()).collect();
        drop(fds);
        if !ev[1].is_empty() {
            let mut info = [0u8; 128];
            while let Ok(n) = rustix::io::read(&sfd, &mut info) {
                if n < 128 {
                    break;
                }
                let signo = u32::from_ne_bytes([info[0], info[1], info[2], info[3]]) as i32;
                if signo == libc::SIGWINCH {
                    if let Some(m) = &master {
                        copy_winsize(m);
                    }
                } else {
                    // SAFETY: signal our own child.
                    unsafe { libc::kill(pid, signo) };
                }
            }
        }
        if let (Some(m), true) = (&master, master_open) {
            if ev.get(2).is_some_and(|e| !e.is_empty()) {
                match rustix::io::read(m, &mut buf) {
                    Ok(0) | Err(_) => master_open = false,
                    Ok(n) => write_all(stdout.as_fd(), &buf[..n]),
                }
            }
            if stdin_open && ev.get(3).is_some_and(|e| !e.is_empty()) {
                match rustix::io::read(&stdin, &mut buf) {
                    Ok(0) | Err(_) => stdin_open = false,
                    Ok(n) => write_all(m.as_fd(), &buf[..n]),
                }
            }
        }
        if !ev[0].is_empty() {
            // Drain what the terminal still holds, then collect the status.
            if let (Some(m), true) = (&master, master_open) {
                let _ = rustix::fs::fcntl_setfl(m, rustix::fs::OFlags::NONBLOCK);
                while let Ok(n) = rustix::io::read(m, &mut buf) {
                    if n == 0 {
                        break;
                    }
                    write_all(stdout.as_fd(), &buf[..n]);
                }
            }
            let mut status = 0;
            // SAFETY: waitpid on our own child.
            let r = unsafe { libc::waitpid(pid, &mut status, 0) };
            if r < 0 {
                return Err(std::io::Error::last_os_error()).context("wait for the container");
            }
            let _ = pidfd.as_raw_fd();
            return Ok(if libc::WIFEXITED(status) {
                libc::WEXITSTATUS(status)
            } else if libc::WIFSIGNALED(status) {
                128 + libc::WTERMSIG(status)
            } else {
                255
            });
        }
    }
}

fn write_all(fd: std::os::fd::BorrowedFd<'_>, mut data: &[u8]) {
    while !data.is_empty() {
        match rustix::io::write(fd, data) {
            Ok(n) => data = &data[n..],
            Err(rustix::io::Errno::INTR) | Err(rustix::io::Errno::AGAIN) => continue,
            Err(_) => return,
        }
    }
}
