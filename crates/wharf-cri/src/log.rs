//! The daemon's log: one line per event on stderr, as `key=value` text (logfmt, as
//! containerd writes) or as JSON, filtered by level.

use std::io::Write;
use std::sync::OnceLock;

/// How much to log.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Level {
    /// Every request.
    Debug,
    /// Starts, stops, failures.
    Info,
    /// Things that went wrong but were handled.
    Warn,
    /// Failures only.
    Error,
}

impl Level {
    /// Parse `debug`, `info`, `warn`/`warning`, `error`.
    pub fn parse(s: &str) -> Option<Level> {
        Some(match s.to_ascii_lowercase().as_str() {
            "debug" | "trace" => Level::Debug,
            "info" => Level::Info,
            "warn" | "warning" => Level::Warn,
            "error" | "fatal" | "panic" => Level::Error,
            _ => return None,
        })
    }

    fn name(self) -> &'static str {
        match self {
            Level::Debug => "debug",
            Level::Info => "info",
            Level::Warn => "warning",
            Level::Error => "error",
        }
    }
}

struct Config {
    level: Level,
    json: bool,
}

static CONFIG: OnceLock<Config> = OnceLock::new();

/// Set the level and format once, at start-up.
pub fn init(level: Level, json: bool) {
    let _ = CONFIG.set(Config { level, json });
}

/// Log `msg` with `fields` at `level`.
pub fn log(level: Level, msg: &str, fields: &[(&str, &str)]) {
    let cfg = CONFIG.get_or_init(|| Config {
        level: Level::Info,
        json: false,
    });
    if level < cfg.level {
        return;
    }
    let time = wharf_sys::time::now_rfc3339_nano();
    let line = if cfg.json {
        let mut m = serde_json::Map::new();
        m.insert("time".into(), time.into());
        m.insert("level".into(), level.name().into());
        m.insert("msg".into(), msg.into());
        for (k, v) in fields {
            m.insert((*k).into(), (*v).into());
        }
        serde_json::Value::Object(m).to_string()
    } else {
        let mut s = format!("time={time} level={} msg={}", level.name(), quote(msg));
        for (k, v) in fields {
            s.push_str(&format!(" {k}={}", quote(v)));
        }
        s
    };
    let _ = writeln!(std::io::stderr().lock(), "{line}");
}

/// A logfmt value: bare when it has no space, quote or `=`, else quoted.
fn quote(v: &str) -> String {
    if !v.is_empty() && !v.contains([' ', '"', '=', '\n']) {
        v.to_string()
    } else {
        format!("{v:?}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn levels_and_quoting() {
        assert_eq!(Level::parse("WARNING"), Some(Level::Warn));
        assert_eq!(Level::parse("nope"), None);
        assert!(Level::Debug < Level::Error);
        assert_eq!(quote("plain"), "plain");
        assert_eq!(quote("two words"), "\"two words\"");
        assert_eq!(quote(""), "\"\"");
    }
}
