//! Connecting the terminal to an attached container: output frames to stdout/stderr, stdin
//! to the container, terminal size changes, signals forwarded (without a tty), and the
//! detach key sequence.

use std::io::{IsTerminal, Read, Write};
use std::os::fd::AsFd;

use anyhow::{Result, bail};
use wharf_engine::session::Output;
use wharf_engine::{Session, SessionEnd};

use crate::raw_mode::RawMode;

/// Parse docker's detach-keys syntax ("ctrl-p,ctrl-q", "a,b").
pub fn parse_keys(s: &str) -> Result<Vec<u8>> {
    let mut out = Vec::new();
    for k in s.split(',').map(str::trim).filter(|k| !k.is_empty()) {
        if let Some(c) = k.strip_prefix("ctrl-") {
            let c = c.as_bytes();
            if c.len() != 1 {
                bail!("invalid detach key {k:?}");
            }
            let b = c[0].to_ascii_lowercase();
            out.push(match b {
                b'a'..=b'z' => b - b'a' + 1,
                b'@' => 0,
                b'[' => 27,
                b'\\' => 28,
                b']' => 29,
                b'^' => 30,
                b'_' => 31,
                _ => bail!("invalid detach key {k:?}"),
            });
        } else if k.len() == 1 {
            out.push(k.as_bytes()[0]);
        } else {
            bail!("invalid detach key {k:?}");
        }
    }
    Ok(out)
}

fn term_size() -> Option<(u16, u16)> {
    let ws = rustix::termios::tcgetwinsize(std::io::stdout().as_fd()).ok()?;
    Some((ws.ws_row, ws.ws_col))
}

/// Block `signals` in this thread (and the threads it spawns from now on).
fn block(signals: &[i32]) -> libc::sigset_t {
    // SAFETY: sigset manipulation on a local set.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        for s in signals {
            libc::sigaddset(&mut set, *s);
        }
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
        set
    }
}

/// Block `signals` in this process's threads from now on and call `then` on a thread of
/// its own with the first of them that arrives (a command that must clean up before it
/// goes: `wharf build`).
pub(super) fn on_first_signal(signals: &[i32], then: impl FnOnce(i32) + Send + 'static) {
    let set = block(signals);
    std::thread::spawn(move || {
        let mut sig: libc::c_int = 0;
        // SAFETY: waiting on signals blocked in every thread of this process.
        if unsafe { libc::sigwait(&set, &mut sig) } == 0 {
            then(sig);
        }
    });
}

/// Relay between this terminal and an attached process until it exits or the user detaches.
/// `stdin`: forward this terminal's input (when the process reads it).
pub fn relay(session: &mut Session, stdin: bool, detach_keys: &[u8]) -> Result<SessionEnd> {
    let tty = session.tty;
    let stdin = stdin && session.stdin;
    let id = session.container.id.clone();
    let signaller = session.signaller();
    let attach = &mut session.stream;
    let interactive_tty = tty && std::io::stdin().is_terminal();
    // Signals: SIGWINCH resizes a tty; without a tty, INT/TERM/HUP/QUIT go to the container.
    let forwarded: Vec<i32> = if tty {
        vec![libc::SIGWINCH]
    } else {
        vec![libc::SIGINT, libc::SIGTERM, libc::SIGHUP, libc::SIGQUIT]
    };
    let set = block(&forwarded);
    let raw = interactive_tty.then(RawMode::enter);
    if tty && let Some((r, c)) = term_size() {
        let _ = attach.resize(r, c);
    }
    let mut input = attach.input()?;
    {
        let mut resize_input = attach.input()?;
        std::thread::spawn(move || {
            loop {
                let mut sig: libc::c_int = 0;
                // SAFETY: waiting on signals blocked in every thread.
                if unsafe { libc::sigwait(&set, &mut sig) } != 0 {
                    return;
                }
                if sig == libc::SIGWINCH {
                    if let Some((r, c)) = term_size() {
                        let _ = resize_input.resize(r, c);
                    }
                } else {
                    let _ = signaller.signal(sig);
                }
            }
        });
    }
    if stdin {
        let keys = detach_keys.to_vec();
        let saved = raw.as_ref().and_then(RawMode::saved);
        let detach_id = id.clone();
        std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            let mut matched = 0usize;
            let mut stdin = std::io::stdin().lock();
            loop {
                let n = match stdin.read(&mut buf) {
                    Ok(0) | Err(_) => {
                        let _ = input.close_stdin();
                        return;
                    }
                    Ok(n) => n,
                };
                let mut data = &buf[..n];
                if interactive_tty && !keys.is_empty() {
                    for (i, b) in data.iter().enumerate() {
                        if *b == keys[matched] {
                            matched += 1;
                            if matched == keys.len() {
                                let _ = input.write_stdin(&data[..i + 1 - matched.min(i + 1)]);
                                // Detaching leaves the process running: this CLI just goes.
                                if let Some(t) = &saved {
                                    crate::raw_mode::restore(t);
                                }
                                eprintln!("\r\nwharf: detached from {detach_id}");
                                std::process::exit(0);
                            }
                        } else {
                            matched = usize::from(*b == keys[0]);
                        }
                    }
                    // Bytes of a partial match are held back until it fails or completes.
                    let keep = data.len().saturating_sub(matched);
                    data = &data[..keep];
                }
                if input.write_stdin(data).is_err() {
                    return;
                }
            }
        });
    }
    let stdout = std::io::stdout();
    let stderr = std::io::stderr();
    loop {
        match attach.recv() {
            Ok(Some(Output::Stdout(d))) => {
                let mut o = stdout.lock();
                let _ = o.write_all(&d);
                let _ = o.flush();
            }
            Ok(Some(Output::Stderr(d))) => {
                let mut e = stderr.lock();
                let _ = e.write_all(&d);
                let _ = e.flush();
            }
            Ok(Some(Output::Exit(rec))) => return Ok(SessionEnd::Exited(rec.exit_code)),
            Ok(None) => return Ok(SessionEnd::Lost),
            Err(e) => return Err(e.into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn detach_keys() {
        assert_eq!(parse_keys("ctrl-p,ctrl-q").unwrap(), vec![16, 17]);
        assert_eq!(parse_keys("a,ctrl-[").unwrap(), vec![b'a', 27]);
        assert!(parse_keys("ctrl-pp").is_err());
    }
}
