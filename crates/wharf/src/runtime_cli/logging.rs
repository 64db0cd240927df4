//! `--log` / `--log-format`: log lines in runc's formats (logrus text or JSON), which
//! containerd's runc client reads back to report why a command failed.

use std::fs::OpenOptions;
use std::io::Write;
use std::path::Path;
use std::sync::{Mutex, OnceLock};

struct Target {
    file: Option<std::fs::File>,
    json: bool,
}

static TARGET: OnceLock<Mutex<Target>> = OnceLock::new();

/// Configure logging; without `--log`, warnings go to stderr and errors only to stderr.
pub fn init(path: Option<&Path>, format: &str, debug: bool) {
    let file = path.and_then(|p| OpenOptions::new().create(true).append(true).open(p).ok());
    let _ = TARGET.set(Mutex::new(Target {
        file,
        json: format == "json",
    }));
    wharf_runtime::log::set_sink(|level, msg| write(level, msg, true), debug);
}

/// Log an error (to `--log` only: the caller prints it on stderr itself).
pub fn error(msg: &str) {
    write("error", msg, false);
}

fn write(level: &str, msg: &str, stderr_fallback: bool) {
    let Some(t) = TARGET.get() else { return };
    let mut t = t.lock().unwrap_or_else(|e| e.into_inner());
    let time = wharf_sys::time::now_rfc3339();
    let line = if t.json {
        serde_json::json!({ "level": level, "msg": msg, "time": time }).to_string()
    } else {
        format!("time={time:?} level={level} msg={msg:?}")
    };
    match t.file.as_mut() {
        Some(f) => {
            let _ = writeln!(f, "{line}");
        }
        None if stderr_fallback => eprintln!("{line}"),
        None => {}
    }
}
