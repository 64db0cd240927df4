//! Container logs in the CRI format, as kubelet reads them:
//!
//! ```text
//! 2026-11-29T21:00:00.123456789Z stdout F hello
//! 2026-11-29T21:00:00.123456789Z stderr P first 16 KiB of a longer line...
//! ```
//!
//! One entry per line of output; a line longer than [`MAX_LINE`] is split into `P` (partial)
//! entries ended by an `F` one. The file is rotated by size: `<path>` is renamed to
//! `<path>.1`, `.1` to `.2`, ..., keeping at most `max_files` files in all, and a new
//! `<path>` is opened. [`read`] is the reader the CLI's `wharf logs` uses.

use std::fs::File;
use std::io::{self, Read, Seek, Write};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Longest log entry; longer lines are split into partial entries.
pub const MAX_LINE: usize = 16 * 1024;

/// Default rotation size (kubelet's containerLogMaxSize).
pub const DEFAULT_MAX_SIZE: u64 = 10 * 1024 * 1024;
/// Default number of files kept (kubelet's containerLogMaxFiles).
pub const DEFAULT_MAX_FILES: u32 = 5;

/// Now in the log's timestamp format: RFC 3339, UTC, always nine fractional digits.
pub fn timestamp(t: SystemTime) -> String {
    let d = t.duration_since(UNIX_EPOCH).unwrap_or_default();
    let base = wharf_sys::time::rfc3339(d.as_secs() as i64, 0, false);
    format!("{}.{:09}Z", base.trim_end_matches('Z'), d.subsec_nanos())
}

/// Writes one container's log file, rotating it by size.
#[derive(Debug)]
pub struct LogWriter {
    path: PathBuf,
    max_size: u64,
    max_files: u32,
    file: File,
    size: u64,
}

impl LogWriter {
    /// Open (append to) `path`; rotate past `max_size` bytes (0: never), keeping
    /// `max_files` files in all (at least 1: then the file is just started over).
    pub fn open(path: &Path, max_size: u64, max_files: u32) -> io::Result<LogWriter> {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)?;
        }
        let file = open_append(path)?;
        let size = file.metadata()?.len();
        Ok(LogWriter {
            path: path.to_path_buf(),
            max_size,
            max_files: max_files.max(1),
            file,
            size,
        })
    }

    /// Open a new file at the path (someone moved the old one away, as kubelet does when
    /// it rotates logs itself); entries go there from now on.
    pub fn reopen(&mut self) -> io::Result<()> {
        let file = open_append(&self.path)?;
        self.size = file.metadata()?.len();
        self.file = file;
        Ok(())
    }

    /// The log file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Append one entry.
    pub fn write_entry(&mut self, stream: &str, partial: bool, content: &[u8]) -> io::Result<()> {
        let ts = timestamp(SystemTime::now());
        let tag = if partial { "P" } else { "F" };
        let mut line = Vec::with_capacity(ts.len() + stream.len() + content.len() + 5);
        line.extend_from_slice(ts.as_bytes());
        line.push(b' ');
        line.extend_from_slice(stream.as_bytes());
        line.push(b' ');
        line.extend_from_slice(tag.as_bytes());
        line.push(b' ');
        line.extend_from_slice(content);
        line.push(b'\n');
        if self.max_size > 0 && self.size > 0 && self.size + line.len() as u64 > self.max_size {
            self.rotate()?;
        }
        self.file.write_all(&line)?;
        self.size += line.len() as u64;
        Ok(())
    }

    fn rotate(&mut self) -> io::Result<()> {
        let name = |n: u32| rotated(&self.path, n);
        if self.max_files == 1 {
            self.file.set_len(0)?;
            self.file.seek(io::SeekFrom::Start(0))?;
            self.size = 0;
            return Ok(());
        }
        let _ = std::fs::remove_file(name(self.max_files - 1));
        for n in (1..self.max_files - 1).rev() {
            match std::fs::rename(name(n), name(n + 1)) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => return Err(e),
            }
        }
        std::fs::rename(&self.path, name(1))?;
        self.file = open_append(&self.path)?;
        self.size = 0;
        Ok(())
    }
}

fn open_append(path: &Path) -> io::Result<File> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o640)
        .custom_flags(libc::O_CLOEXEC)
        .open(path)
}

/// `<path>.<n>` (n >= 1), a rotated file.
pub fn rotated(path: &Path, n: u32) -> PathBuf {
    let mut s = path.as_os_str().to_owned();
    s.push(format!(".{n}"));
    PathBuf::from(s)
}

/// Splits one stream's output into log entries: whole lines, and partial entries for lines
/// longer than [`MAX_LINE`]. Holds at most one unfinished line.
#[derive(Debug, Default)]
pub struct LineSplitter {
    pending: Vec<u8>,
}

impl LineSplitter {
    /// Feed output; `emit(content, partial)` gets each entry (without its newline).
    pub fn feed(&mut self, mut data: &[u8], emit: &mut dyn FnMut(&[u8], bool)) {
        while let Some(nl) = data.iter().position(|&b| b == b'\n') {
            if self.pending.is_empty() {
                emit_chunked(&data[..nl], emit);
            } else {
                self.pending.extend_from_slice(&data[..nl]);
                let line = std::mem::take(&mut self.pending);
                emit_chunked(&line, emit);
            }
            data = &data[nl + 1..];
        }
        self.pending.extend_from_slice(data);
        while self.pending.len() >= MAX_LINE {
            let rest = self.pending.split_off(MAX_LINE);
            emit(&self.pending, true);
            self.pending = rest;
        }
        if self.pending.is_empty() {
            // Give back the memory of a long line.
            self.pending = Vec::new();
        }
    }

    /// The stream ended: emit what is left, which no newline ended, as a partial entry, as
    /// containerd and CRI-O do, so a reader gives back exactly what was written (kubelet's
    /// termination message from the log of `echo -n DONE` is "DONE", not "DONE\n").
    pub fn finish(&mut self, emit: &mut dyn FnMut(&[u8], bool)) {
        if !self.pending.is_empty() {
            let line = std::mem::take(&mut self.pending);
            emit(&line, true);
        }
    }
}

fn emit_chunked(line: &[u8], emit: &mut dyn FnMut(&[u8], bool)) {
    let mut chunks = line.chunks(MAX_LINE).peekable();
    if chunks.peek().is_none() {
        emit(b"", false);
    }
    while let Some(c) = chunks.next() {
        emit(c, chunks.peek().is_some());
    }
}

/// One entry of a CRI log file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogEntry {
    /// Timestamp as written (RFC 3339).
    pub time: String,
    /// `stdout` or `stderr`.
    pub stream: String,
    /// A partial line (continued by the next entry of the stream).
    pub partial: bool,
    /// The output, without newline.
    pub content: Vec<u8>,
}

impl LogEntry {
    /// Parse one line of a log file (without its newline).
    pub fn parse(line: &[u8]) -> Option<LogEntry> {
        let mut parts = line.splitn(4, |&b| b == b' ');
        let time = std::str::from_utf8(parts.next()?).ok()?.to_string();
        let stream = std::str::from_utf8(parts.next()?).ok()?.to_string();
        let partial = match parts.next()? {
            b"P" => true,
            b"F" => false,
            _ => return None,
        };
        let content = parts.next().unwrap_or_default().to_vec();
        Some(LogEntry {
            time,
            stream,
            partial,
            content,
        })
    }

    /// The timestamp as time since the epoch.
    pub fn instant(&self) -> Option<SystemTime> {
        wharf_sys::time::parse_rfc3339(&self.time)
    }
}

/// What [`read`] returns.
#[derive(Debug, Clone, Default)]
pub struct ReadOptions {
    /// Only the last `tail` lines (a partial entry counts with the line it begins).
    pub tail: Option<usize>,
    /// Only entries at or after this time.
    pub since: Option<SystemTime>,
    /// After the existing entries, wait for new ones (following rotation) while the
    /// `keep_following` callback of [`read`] says so.
    pub follow: bool,
}

/// Read the log at `path` (with its rotated files, oldest first), handing each entry to
/// `on_entry` (which returns false to stop). With `follow`, new entries are read as they
/// are written; `keep_following` is asked every 100 ms of silence (e.g. "does the container
/// still run?") and ends the reading when it returns false. A missing log is empty.
pub fn read(
    path: &Path,
    opts: &ReadOptions,
    on_entry: &mut dyn FnMut(&LogEntry) -> bool,
    keep_following: &mut dyn FnMut() -> bool,
) -> io::Result<()> {
    let mut files = Vec::new();
    for n in (1..1000).rev() {
        let p = rotated(path, n);
        if p.exists() {
            files.push(p);
        }
    }
    // The current file stays open for following, so a rotation during the read is seen.
    let mut current = match File::open(path) {
        Ok(f) => Some(f),
        Err(e) if e.kind() == io::ErrorKind::NotFound => None,
        Err(e) => return Err(e),
    };
    let mut entries = Vec::new();
    for f in &files {
        let mut data = Vec::new();
        match File::open(f) {
            Ok(mut file) => {
                file.read_to_end(&mut data)?;
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
            Err(e) => return Err(e),
        }
        parse_lines(&data, &mut entries);
    }
    let mut carry = Vec::new();
    if let Some(f) = current.as_mut() {
        f.read_to_end(&mut carry)?;
        let end = carry.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1);
        parse_lines(&carry[..end], &mut entries);
        carry.drain(..end);
    }
    let keep = |e: &LogEntry| {
        opts.since
            .is_none_or(|s| e.instant().is_none_or(|t| t >= s))
    };
    let mut start = 0;
    if let Some(n) = opts.tail {
        // Walk back over n full lines.
        let mut lines = 0;
        start = entries.len();
        while start > 0 {
            let e = &entries[start - 1];
            if !e.partial {
                if lines == n {
                    break;
                }
                lines += 1;
            }
            start -= 1;
        }
    }
    for e in entries[start..].iter().filter(|e| keep(e)) {
        if !on_entry(e) {
            return Ok(());
        }
    }
    if !opts.follow {
        return Ok(());
    }
    let mut buf = [0u8; 8192];
    loop {
        let Some(f) = current.as_mut() else {
            // No file yet: wait for it.
            if !keep_following() {
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(100));
            current = File::open(path).ok();
            continue;
        };
        let n = f.read(&mut buf)?;
        if n > 0 {
            carry.extend_from_slice(&buf[..n]);
            let end = carry.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1);
            let mut fresh = Vec::new();
            parse_lines(&carry[..end], &mut fresh);
            carry.drain(..end);
            for e in fresh.iter().filter(|e| keep(e)) {
                if !on_entry(e) {
                    return Ok(());
                }
            }
            continue;
        }
        // At the end: was the file rotated away?
        let rotated_away = match (std::fs::metadata(path), f.metadata()) {
            (Ok(now), Ok(ours)) => now.ino() != ours.ino() || now.dev() != ours.dev(),
            (Err(_), _) => false,
            _ => false,
        };
        if rotated_away {
            // The writer renamed the file after its last write to it: read what it wrote
            // between our last read and the rename, then the files rotated after ours
            // (newest last), then the new current file.
            let ours = f.metadata()?.ino();
            let mut rest = Vec::new();
            f.read_to_end(&mut rest)?;
            let mut newer = Vec::new();
            for n in 1..1000 {
                let p = rotated(path, n);
                match std::fs::metadata(&p) {
                    Ok(m) if m.ino() == ours => break,
                    Ok(_) => newer.push(p),
                    Err(_) => break,
                }
            }
            for p in newer.iter().rev() {
                if let Ok(mut file) = File::open(p) {
                    file.read_to_end(&mut rest)?;
                }
            }
            carry.extend_from_slice(&rest);
            let end = carry.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1);
            let mut fresh = Vec::new();
            parse_lines(&carry[..end], &mut fresh);
            carry.clear();
            for e in fresh.iter().filter(|e| keep(e)) {
                if !on_entry(e) {
                    return Ok(());
                }
            }
            current = File::open(path).ok();
            continue;
        }
        if !keep_following() {
            // One last look: the writer may have finished just now.
            let n = f.read(&mut buf)?;
            carry.extend_from_slice(&buf[..n]);
            let end = carry.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1);
            let mut fresh = Vec::new();
            parse_lines(&carry[..end], &mut fresh);
            for e in fresh.iter().filter(|e| keep(e)) {
                if !on_entry(e) {
                    break;
                }
            }
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn parse_lines(data: &[u8], out: &mut Vec<LogEntry>) {
    out.extend(
        data.split(|&b| b == b'\n')
            .filter(|l| !l.is_empty())
            .filter_map(LogEntry::parse),
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps_have_nine_digits_and_parse_back() {
        let t = UNIX_EPOCH + Duration::new(1_700_000_000, 120_000_000);
        let s = timestamp(t);
        assert_eq!(s, "2023-11-14T22:13:20.120000000Z");
        assert_eq!(wharf_sys::time::parse_rfc3339(&s), Some(t));
    }

    #[test]
    fn splitter_makes_full_and_partial_entries() {
        let mut s = LineSplitter::default();
        let mut got: Vec<(Vec<u8>, bool)> = Vec::new();
        let mut emit = |c: &[u8], p: bool| got.push((c.to_vec(), p));
        s.feed(b"one\ntw", &mut emit);
        s.feed(b"o\n\nthr", &mut emit);
        let long = vec![b'x'; MAX_LINE + 10];
        s.feed(b"ee\n", &mut emit);
        s.feed(&long, &mut emit);
        s.feed(b"\n", &mut emit);
        s.feed(b"tail", &mut emit);
        s.finish(&mut emit);
        let texts: Vec<(String, bool)> = got
            .iter()
            .map(|(c, p)| {
                (
                    String::from_utf8_lossy(&c[..c.len().min(5)]).into_owned(),
                    *p,
                )
            })
            .collect();
        assert_eq!(
            texts,
            vec![
                ("one".into(), false),
                ("two".into(), false),
                ("".into(), false),
                ("three".into(), false),
                ("xxxxx".into(), true),
                ("xxxxx".into(), false),
                // What no newline ended stays partial.
                ("tail".into(), true),
            ]
        );
        assert_eq!(got[4].0.len(), MAX_LINE);
        assert_eq!(got[5].0.len(), 10);
    }

    #[test]
    fn rotation_keeps_max_files_and_read_joins_them_in_order() {
        let t = tempfile::tempdir().unwrap();
        let path = t.path().join("c.log");
        let mut w = LogWriter::open(&path, 200, 3).unwrap();
        for i in 0..40 {
            w.write_entry("stdout", false, format!("line {i}").as_bytes())
                .unwrap();
        }
        assert!(path.exists() && rotated(&path, 1).exists() && rotated(&path, 2).exists());
        assert!(!rotated(&path, 3).exists());
        for p in [path.clone(), rotated(&path, 1), rotated(&path, 2)] {
            assert!(std::fs::metadata(&p).unwrap().len() <= 200, "{p:?} too big");
        }
        let mut lines = Vec::new();
        read(
            &path,
            &ReadOptions::default(),
            &mut |e| {
                lines.push(String::from_utf8_lossy(&e.content).into_owned());
                true
            },
            &mut || false,
        )
        .unwrap();
        assert_eq!(lines.last().unwrap(), "line 39");
        let nums: Vec<u32> = lines
            .iter()
            .map(|l| l.trim_start_matches("line ").parse().unwrap())
            .collect();
        assert!(nums.windows(2).all(|w| w[1] == w[0] + 1), "{nums:?}");
        let mut tail = Vec::new();
        read(
            &path,
            &ReadOptions {
                tail: Some(2),
                ..Default::default()
            },
            &mut |e| {
                tail.push(String::from_utf8_lossy(&e.content).into_owned());
                true
            },
            &mut || false,
        )
        .unwrap();
        assert_eq!(tail, vec!["line 38", "line 39"]);
    }

    #[test]
    fn entries_parse_with_empty_content() {
        let e = LogEntry::parse(b"2026-11-29T21:00:00.123456789Z stderr P ").unwrap();
        assert_eq!(e.stream, "stderr");
        assert!(e.partial);
        assert!(e.content.is_empty());
        assert!(LogEntry::parse(b"garbage").is_none());
    }

    #[test]
    fn follow_sees_new_entries_across_rotation_and_since_filters() {
        let t = tempfile::tempdir().unwrap();
        let path = t.path().join("c.log");
        let mut w = LogWriter::open(&path, 1000, 5).unwrap();
        w.write_entry("stdout", false, b"old").unwrap();
        std::thread::sleep(Duration::from_millis(20));
        let cut = SystemTime::now();
        let writer = std::thread::spawn(move || {
            for i in 0..60 {
                w.write_entry("stdout", false, format!("new {i}").as_bytes())
                    .unwrap();
                std::thread::sleep(Duration::from_millis(5));
            }
        });
        let mut seen = Vec::new();
        let seen_deadline = std::time::Instant::now();
        read(
            &path,
            &ReadOptions {
                since: Some(cut),
                follow: true,
                ..Default::default()
            },
            &mut |e| {
                seen.push(String::from_utf8_lossy(&e.content).into_owned());
                seen.len() < 60
            },
            // Bounded, so a bug fails the test instead of hanging it.
            &mut || seen_deadline.elapsed() < Duration::from_secs(30),
        )
        .unwrap();
        writer.join().unwrap();
        // Every entry once, in order, none from before `since`, through several rotations.
        let want: Vec<String> = (0..60).map(|i| format!("new {i}")).collect();
        assert_eq!(seen, want);
        assert!(rotated(&path, 2).exists());
    }
}
