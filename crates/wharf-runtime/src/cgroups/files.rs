//! Reading and writing cgroup interface files, with errors that name the setting and the file.

use std::io::{self, Write};
use std::path::Path;

use crate::error::{Error, Result, p};

/// Write `value` to `dir/file` for the config setting `setting` (e.g.
/// "linux.resources.memory.limit"), as `echo value > file` would: one write(2), newline
/// terminated (every cgroup file accepts that, and a fake tree in tests records each write as
/// a line). Opened for appending and never created: a missing file means the controller is
/// not there, which must be an error, not a new regular file.
pub(crate) fn write(dir: &Path, file: &str, value: &str, setting: &str) -> Result<()> {
    let path = dir.join(file);
    write_raw(&path, value)
        .map_err(|e| Error::os(format!("{setting}: write {value:?} to {}", p(&path)), e))
}

/// [`write`] without the error wrapping, for callers that look at the errno first.
pub(crate) fn write_raw(path: &Path, value: &str) -> io::Result<()> {
    // std opens with O_CLOEXEC.
    let mut f = std::fs::OpenOptions::new().append(true).open(path)?;
    let mut line = String::with_capacity(value.len() + 1);
    line.push_str(value);
    line.push('\n');
    f.write_all(line.as_bytes())
}

/// The file's text, trimmed.
pub(crate) fn read(dir: &Path, file: &str) -> io::Result<String> {
    Ok(std::fs::read_to_string(dir.join(file))?.trim().to_string())
}

/// The file's text, trimmed, or an error naming the file.
pub(crate) fn read_ctx(dir: &Path, file: &str) -> Result<String> {
    read(dir, file).map_err(|e| Error::os(format!("read {}", p(&dir.join(file))), e))
}

/// A number from a single-value file; "max" reads as `u64::MAX`.
pub(crate) fn read_u64(dir: &Path, file: &str) -> Result<u64> {
    let text = read_ctx(dir, file)?;
    parse_u64(&text).ok_or_else(|| malformed(dir, file, &text))
}

/// Like [`read_u64`], but a missing file reads as `None`.
pub(crate) fn read_u64_opt(dir: &Path, file: &str) -> Result<Option<u64>> {
    match read(dir, file) {
        Ok(text) => parse_u64(&text)
            .map(Some)
            .ok_or_else(|| malformed(dir, file, &text)),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(Error::os(format!("read {}", p(&dir.join(file))), e)),
    }
}

/// "max" (or a v1 "unlimited" value) as `u64::MAX`, otherwise a decimal number. Negative
/// numbers (v1 files report -1 for some unset values) read as 0.
pub(crate) fn parse_u64(text: &str) -> Option<u64> {
    let t = text.trim();
    if t == "max" {
        return Some(u64::MAX);
    }
    if let Some(neg) = t.strip_prefix('-') {
        return neg.parse::<u64>().ok().map(|_| 0);
    }
    t.parse().ok()
}

/// `key value` lines (memory.stat, cpu.stat, memory.events) as pairs; lines that do not
/// parse are skipped.
pub(crate) fn key_values(text: &str) -> impl Iterator<Item = (&str, u64)> {
    text.lines().filter_map(|l| {
        let mut it = l.split_whitespace();
        let k = it.next()?;
        let v = parse_u64(it.next()?)?;
        Some((k, v))
    })
}

/// The value of `key` in a flat keyed file, if present.
pub(crate) fn keyed_value(dir: &Path, file: &str, key: &str) -> Result<Option<u64>> {
    match read(dir, file) {
        Ok(text) => Ok(key_values(&text).find(|(k, _)| *k == key).map(|(_, v)| v)),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(Error::os(format!("read {}", p(&dir.join(file))), e)),
    }
}

/// Whether `dir/file` exists.
pub(crate) fn exists(dir: &Path, file: &str) -> bool {
    dir.join(file).exists()
}

fn malformed(dir: &Path, file: &str, text: &str) -> Error {
    Error::Other(format!(
        "unexpected content {text:?} in {}",
        p(&dir.join(file))
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_are_lines_and_missing_files_are_errors() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("pids.max"), "").unwrap();
        write(dir.path(), "pids.max", "10", "linux.resources.pids.limit").unwrap();
        write(dir.path(), "pids.max", "max", "linux.resources.pids.limit").unwrap();
        assert_eq!(
            std::fs::read_to_string(dir.path().join("pids.max")).unwrap(),
            "10\nmax\n"
        );
        let err = write(
            dir.path(),
            "memory.max",
            "1",
            "linux.resources.memory.limit",
        )
        .unwrap_err()
        .to_string();
        assert!(
            err.starts_with("linux.resources.memory.limit: write \"1\" to "),
            "{err}"
        );
        assert!(err.contains("memory.max"), "{err}");
        assert!(!dir.path().join("memory.max").exists());
    }

    #[test]
    fn numbers_and_keyed_files() {
        assert_eq!(parse_u64("max"), Some(u64::MAX));
        assert_eq!(parse_u64(" 12\n"), Some(12));
        assert_eq!(parse_u64("-1"), Some(0));
        assert_eq!(parse_u64("x"), None);
        let kv: Vec<_> = key_values("a 1\nb max\nbad\n").collect();
        assert_eq!(kv, vec![("a", 1), ("b", u64::MAX)]);
    }
}
