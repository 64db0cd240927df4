//! Marks of an operation's steps ("pod: sandbox created", "container: started in shim"),
//! for the test suite and for profiling, compiled in only with the `hooks` feature (the
//! test suite turns it on; release builds have none of it: a mark is an empty function).
//!
//! With the feature, a mark
//! - kills the process when `WHARF_CRASH_AT` names it (what a kill -9 at the worst moment
//!   does: the crash tests check that the next command recovers), and
//! - prints the time since the process's first mark when `WHARF_TIMING` is set (one clock
//!   for the front end's and the engine's steps alike).

/// Mark a step.
#[cfg(feature = "hooks")]
pub fn step(what: &str) {
    use std::sync::OnceLock;
    static CRASH_AT: OnceLock<Option<String>> = OnceLock::new();
    if CRASH_AT
        .get_or_init(|| std::env::var("WHARF_CRASH_AT").ok())
        .as_deref()
        == Some(what)
    {
        let _ =
            rustix::process::kill_process(rustix::process::getpid(), rustix::process::Signal::KILL);
    }
    static START: OnceLock<Option<std::time::Instant>> = OnceLock::new();
    if let Some(t) =
        START.get_or_init(|| std::env::var_os("WHARF_TIMING").map(|_| std::time::Instant::now()))
    {
        eprintln!(
            "    [{:>8.3} ms] {what}",
            t.elapsed().as_secs_f64() * 1000.0
        );
    }
}

/// Mark a step (nothing: built without the `hooks` feature).
#[cfg(not(feature = "hooks"))]
#[inline(always)]
pub fn step(_what: &str) {}
