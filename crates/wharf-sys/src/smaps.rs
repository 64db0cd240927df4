//! This process's mappings as `/proc/self/smaps` lists them, for the memory trims of the
//! shim and the daemon: which mappings may have their pages dropped (they fault back in
//! unchanged from the page cache) and which hold pages of their own.

/// One mapping: its header line ("start-end perms offset dev inode [path]") and the
/// "Anonymous:" line that follows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Mapping<'a> {
    pub start: usize,
    pub end: usize,
    pub perms: &'a str,
    /// The file, or a pseudo path such as "[stack]"; empty for anonymous memory.
    pub path: &'a str,
    /// Private (copy-on-write or anonymous) pages in it, in kB.
    pub anonymous_kb: u64,
}

impl Mapping<'_> {
    /// A private, read-only mapping of a file none of whose pages was ever written (no
    /// copy-on-write page: a debugger's breakpoint or relocated data would be one): its
    /// pages may be dropped, and fault back in unchanged.
    pub fn is_clean_read_only_file(&self) -> bool {
        self.path.starts_with('/')
            && matches!(self.perms, "r-xp" | "r--p")
            && self.anonymous_kb == 0
    }
}

/// The mappings of an smaps text, in its order. A header whose "Anonymous:" line is
/// missing is counted as holding pages of its own.
pub fn mappings(smaps: &str) -> Vec<Mapping<'_>> {
    let mut out: Vec<Mapping<'_>> = Vec::with_capacity(64);
    for line in smaps.lines() {
        if let Some(kb) = line.strip_prefix("Anonymous:") {
            if let Some(m) = out.last_mut() {
                m.anonymous_kb = kb
                    .trim()
                    .trim_end_matches("kB")
                    .trim()
                    .parse()
                    .unwrap_or(u64::MAX);
            }
            continue;
        }
        // The other lines are "Name: value"; only a header starts with a range.
        let mut f = line.split_whitespace();
        let (Some(range), Some(perms)) = (f.next(), f.next()) else {
            continue;
        };
        let Some((start, end)) = range.split_once('-') else {
            continue;
        };
        let (Ok(start), Ok(end)) = (
            usize::from_str_radix(start, 16),
            usize::from_str_radix(end, 16),
        ) else {
            continue;
        };
        out.push(Mapping {
            start,
            end,
            perms,
            path: f.nth(3).unwrap_or(""),
            anonymous_kb: u64::MAX,
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const SMAPS: &str = "\
5581a0000000-5581a0100000 r--p 00000000 fe:00 123 /usr/bin/wharf
Size:               1024 kB
Anonymous:             0 kB
5581a0100000-5581a0200000 r-xp 00100000 fe:00 123 /usr/bin/wharf
Anonymous:             4 kB
5581a0300000-5581a0301000 r--p 00300000 fe:00 123 /usr/bin/wharf
Rss:                   4 kB
5581a0400000-5581a0500000 rw-p 00000000 00:00 0
Anonymous:             0 kB
7ffc00000000-7ffc00021000 rw-p 00000000 00:00 0 [stack]
Anonymous:            12 kB
";

    #[test]
    fn headers_pair_with_their_anonymous_line_and_only_clean_read_only_files_qualify() {
        let m = mappings(SMAPS);
        assert_eq!(m.len(), 5);
        assert_eq!(
            (m[0].start, m[0].end, m[0].perms),
            (0x5581a0000000, 0x5581a0100000, "r--p")
        );
        assert_eq!(m[0].path, "/usr/bin/wharf");
        assert_eq!(m[4].path, "[stack]");
        assert_eq!(m[3].path, "");
        let clean: Vec<bool> = m.iter().map(Mapping::is_clean_read_only_file).collect();
        // Code with a written page, a mapping without an Anonymous line, anonymous memory
        // and the stack do not qualify.
        assert_eq!(clean, [true, false, false, false, false]);
    }
}
