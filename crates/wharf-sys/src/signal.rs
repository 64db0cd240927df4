//! Signal names as docker, runc and images spell them (`TERM`, `SIGTERM`, `sigterm`, `15`,
//! `SIGRTMIN+3`, `RTMAX-1`) and back.

/// The real-time signals' range as glibc (and so docker and runc) numbers them: the
/// kernel's first two are reserved by the C library's threads.
pub const RTMIN: i32 = 34;
/// The last real-time signal.
pub const RTMAX: i32 = 64;

/// The standard signals by name (without `SIG`), with their aliases.
const NAMES: &[(&str, i32)] = &[
    ("HUP", libc::SIGHUP),
    ("INT", libc::SIGINT),
    ("QUIT", libc::SIGQUIT),
    ("ILL", libc::SIGILL),
    ("TRAP", libc::SIGTRAP),
    ("ABRT", libc::SIGABRT),
    ("IOT", libc::SIGABRT),
    ("BUS", libc::SIGBUS),
    ("FPE", libc::SIGFPE),
    ("KILL", libc::SIGKILL),
    ("USR1", libc::SIGUSR1),
    ("SEGV", libc::SIGSEGV),
    ("USR2", libc::SIGUSR2),
    ("PIPE", libc::SIGPIPE),
    ("ALRM", libc::SIGALRM),
    ("TERM", libc::SIGTERM),
    ("STKFLT", libc::SIGSTKFLT),
    ("CHLD", libc::SIGCHLD),
    ("CLD", libc::SIGCHLD),
    ("CONT", libc::SIGCONT),
    ("STOP", libc::SIGSTOP),
    ("TSTP", libc::SIGTSTP),
    ("TTIN", libc::SIGTTIN),
    ("TTOU", libc::SIGTTOU),
    ("URG", libc::SIGURG),
    ("XCPU", libc::SIGXCPU),
    ("XFSZ", libc::SIGXFSZ),
    ("VTALRM", libc::SIGVTALRM),
    ("PROF", libc::SIGPROF),
    ("WINCH", libc::SIGWINCH),
    ("IO", libc::SIGIO),
    ("POLL", libc::SIGIO),
    ("PWR", libc::SIGPWR),
    ("SYS", libc::SIGSYS),
];

/// A signal by name or number; None when it names no signal (or the number is out of
/// 1..=64).
pub fn parse(s: &str) -> Option<i32> {
    let s = s.trim();
    if let Ok(n) = s.parse::<i32>() {
        return (1..=RTMAX).contains(&n).then_some(n);
    }
    let upper = s.to_ascii_uppercase();
    let name = upper.strip_prefix("SIG").unwrap_or(&upper);
    if let Some(&(_, n)) = NAMES.iter().find(|(k, _)| *k == name) {
        return Some(n);
    }
    let rt = |base: i32, rest: &str, sign: i32| -> Option<i32> {
        let off: i32 = if rest.is_empty() {
            0
        } else {
            rest.strip_prefix(if sign > 0 { '+' } else { '-' })?
                .parse()
                .ok()?
        };
        let n = base + sign * off;
        (RTMIN..=RTMAX).contains(&n).then_some(n)
    };
    if let Some(rest) = name.strip_prefix("RTMIN") {
        return rt(RTMIN, rest, 1);
    }
    if let Some(rest) = name.strip_prefix("RTMAX") {
        return rt(RTMAX, rest, -1);
    }
    None
}

/// The usual name of signal `n` (`SIGTERM`, `SIGRTMIN+3`), if it is one.
pub fn name(n: i32) -> Option<String> {
    if let Some((k, _)) = NAMES.iter().find(|(_, v)| *v == n) {
        return Some(format!("SIG{k}"));
    }
    match n {
        RTMIN => Some("SIGRTMIN".into()),
        n if (RTMIN..=RTMAX).contains(&n) => Some(format!("SIGRTMIN+{}", n - RTMIN)),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_numbers_and_real_time_signals() {
        for s in ["TERM", "SIGTERM", "sigterm", "15", " 15 "] {
            assert_eq!(parse(s), Some(libc::SIGTERM), "{s}");
        }
        assert_eq!(parse("SIGRTMIN+3"), Some(37));
        assert_eq!(parse("RTMIN"), Some(34));
        assert_eq!(parse("SIGRTMAX-1"), Some(63));
        assert_eq!(parse("SIGRTMAX"), Some(64));
        assert_eq!(parse("CLD"), Some(libc::SIGCHLD));
        for bad in [
            "", "0", "65", "-1", "SIGNOPE", "RTMIN+31", "RTMAX-31", "RTMIN-1", "RTMIN+x",
        ] {
            assert_eq!(parse(bad), None, "{bad:?}");
        }
        assert_eq!(name(libc::SIGKILL).as_deref(), Some("SIGKILL"));
        assert_eq!(name(37).as_deref(), Some("SIGRTMIN+3"));
        assert_eq!(name(0), None);
        for n in 1..=RTMAX {
            if let Some(s) = name(n) {
                assert_eq!(parse(&s), Some(n), "{s}");
            }
        }
    }
}
