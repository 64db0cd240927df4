//! Where the library's warnings go. The runc-compatible CLI points this at `--log` (text or
//! JSON lines, as runc writes them); by default warnings go to stderr.

use std::sync::Mutex;

type Sink = Box<dyn Fn(&str, &str) + Send>;

static SINK: Mutex<Option<Sink>> = Mutex::new(None);

/// Route log lines (`level`, `message`) to `sink`.
pub fn set_sink(sink: impl Fn(&str, &str) + Send + 'static) {
    *SINK.lock().unwrap_or_else(|e| e.into_inner()) = Some(Box::new(sink));
}

/// Log at `level`.
pub fn log(level: &str, msg: &str) {
    match &*SINK.lock().unwrap_or_else(|e| e.into_inner()) {
        Some(sink) => sink(level, msg),
        None => eprintln!("{level}: {msg}"),
    }
}

/// Log a warning.
pub fn warn(msg: &str) {
    log("warning", msg);
}
