//! Where the library's log lines go. The runc-compatible CLI points this at `--log` (text or
//! JSON lines, as runc writes them); by default warnings go to stderr and debug lines nowhere.
//! Debug lines carry the time since the runtime process started, so `--debug` shows where a
//! command spends its time.

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

type Sink = Box<dyn Fn(&str, &str) + Send>;

static SINK: Mutex<Option<Sink>> = Mutex::new(None);
static DEBUG: AtomicBool = AtomicBool::new(false);
static START: Mutex<Option<Instant>> = Mutex::new(None);

/// Route log lines (`level`, `message`) to `sink`; `debug` enables debug lines.
pub fn set_sink(sink: impl Fn(&str, &str) + Send + 'static, debug: bool) {
    *SINK.lock().unwrap_or_else(|e| e.into_inner()) = Some(Box::new(sink));
    DEBUG.store(debug, Ordering::Relaxed);
    START
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .get_or_insert_with(Instant::now);
}

/// Set in a container process once it has closed the runtime's fds: its log lines have
/// nowhere to go (stderr is the container's).
static DETACHED: AtomicBool = AtomicBool::new(false);

/// Stop logging in this process: called by container processes before they close every fd
/// they inherited. The sink (which may own the log file) is forgotten rather than dropped,
/// since dropping it would close an fd number that may already be closed or reused.
pub fn detach() {
    DETACHED.store(true, Ordering::Relaxed);
    if let Some(sink) = SINK.lock().unwrap_or_else(|e| e.into_inner()).take() {
        std::mem::forget(sink);
    }
}

/// Log at `level`.
pub fn log(level: &str, msg: &str) {
    if DETACHED.load(Ordering::Relaxed) {
        return;
    }
    match &*SINK.lock().unwrap_or_else(|e| e.into_inner()) {
        Some(sink) => sink(level, msg),
        None => eprintln!("{level}: {msg}"),
    }
}

/// Log a warning.
pub fn warn(msg: &str) {
    log("warning", msg);
}

/// Log a debug line (only with debugging on), prefixed with the elapsed time.
pub fn debug(msg: impl FnOnce() -> String) {
    if !DEBUG.load(Ordering::Relaxed) {
        return;
    }
    let elapsed = START
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .map(|s| s.elapsed().as_micros())
        .unwrap_or(0);
    log("debug", &format!("[{elapsed}us] {}", msg()));
}
