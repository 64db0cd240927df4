//! Here-document markers (`<<EOF`, `<<-EOF`, `<<'EOF'`) and the bodies of those the
//! parsing library does not read itself.
//!
//! The library reads a RUN's here-document only when the command starts with its marker
//! (`RUN <<EOF ...`) and only one. BuildKit finds them anywhere in the command, as the
//! shell would (`RUN cat <<A > a && cat <<B > b`). [`lift`] reads those bodies first and
//! blanks them in the text handed to the library (same length, so every span and line
//! number stays right); the conversion then attaches them to their RUN by line.

use std::collections::HashMap;

use crate::HereDoc;

/// A here-document marker on an instruction's line.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Marker {
    /// The delimiter, quotes removed (also the file name `COPY <<NAME /dir/` writes).
    pub name: String,
    /// `<<-`: leading tabs are stripped from the body and the closing line.
    pub strip_tabs: bool,
    /// Unquoted: variables in the body are expanded.
    pub expand: bool,
}

/// The here-document markers of a line, in order, as the shell sees them: not inside
/// quotes, not `<<<` (a here-string), with a delimiter that starts with a letter or `_`
/// or is quoted.
pub fn markers(line: &str) -> Vec<Marker> {
    let b = line.as_bytes();
    let mut out = Vec::new();
    let mut quote: Option<u8> = None;
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        match quote {
            Some(q) => {
                if c == q {
                    quote = None;
                } else if c == b'\\' && q == b'"' {
                    i += 1;
                }
                i += 1;
                continue;
            }
            None if c == b'\'' || c == b'"' => {
                quote = Some(c);
                i += 1;
                continue;
            }
            None if c == b'\\' => {
                i += 2;
                continue;
            }
            None => {}
        }
        if c != b'<' || b.get(i + 1) != Some(&b'<') || (i > 0 && b[i - 1] == b'<') {
            i += 1;
            continue;
        }
        let mut j = i + 2;
        if b.get(j) == Some(&b'<') {
            // `<<<`: a here-string.
            i = j + 1;
            continue;
        }
        let strip_tabs = b.get(j) == Some(&b'-');
        if strip_tabs {
            j += 1;
        }
        let (name, expand, end) = match b.get(j) {
            Some(&q @ (b'\'' | b'"')) => match line[j + 1..].find(q as char) {
                Some(k) => (line[j + 1..j + 1 + k].to_string(), false, j + 2 + k),
                None => break,
            },
            Some(c) if c.is_ascii_alphabetic() || *c == b'_' => {
                let k = line[j..]
                    .find(|ch: char| ch.is_whitespace() || "<>|&;()'\"".contains(ch))
                    .map_or(line.len(), |k| j + k);
                (line[j..k].to_string(), true, k)
            }
            _ => {
                i = j;
                continue;
            }
        };
        if !name.is_empty() {
            out.push(Marker {
                name,
                strip_tabs,
                expand,
            });
        }
        i = end;
    }
    out
}

/// The text with the bodies of the RUN here-documents the library would not read blanked
/// out (spaces; line breaks kept), and those documents by the 1-based line of their RUN.
/// The bodies of the documents the library reads are skipped, so a body's lines are never
/// taken for instructions.
pub fn lift(text: &str, escape: char) -> (String, HashMap<usize, Vec<HereDoc>>) {
    let lines: Vec<&str> = text.split('\n').collect();
    let mut out: Vec<String> = lines.iter().map(|l| l.to_string()).collect();
    let mut found = HashMap::new();
    let mut i = 0;
    while i < lines.len() {
        let first = i;
        let start = lines[i].trim_start();
        if start.is_empty() || start.starts_with('#') {
            i += 1;
            continue;
        }
        // The instruction's logical line: continuations joined, comments inside dropped.
        let mut logical = String::new();
        loop {
            let raw = lines[i].strip_suffix('\r').unwrap_or(lines[i]);
            let t = raw.trim_start();
            if i > first && (t.is_empty() || t.starts_with('#')) {
                i += 1;
                if i >= lines.len() {
                    break;
                }
                continue;
            }
            let trimmed = raw.trim_end_matches([' ', '\t']);
            match trimmed.strip_suffix(escape) {
                Some(head) if i + 1 < lines.len() => {
                    logical.push_str(head);
                    i += 1;
                }
                _ => {
                    logical.push_str(raw);
                    i += 1;
                    break;
                }
            }
        }
        let keyword = logical
            .split_whitespace()
            .next()
            .unwrap_or("")
            .to_ascii_uppercase();
        if !matches!(keyword.as_str(), "RUN" | "COPY" | "ADD") {
            continue;
        }
        let marks = markers(&logical);
        if marks.is_empty() {
            continue;
        }
        // The library reads COPY's and ADD's, and a RUN's single one that starts it.
        let args = logical
            .trim_start()
            .split_once(char::is_whitespace)
            .map_or("", |(_, r)| r)
            .trim_start();
        let mut rest = args;
        while rest.starts_with("--") {
            rest = rest
                .split_once(char::is_whitespace)
                .map_or("", |(_, r)| r)
                .trim_start();
        }
        let library_reads = keyword != "RUN" || (rest.starts_with("<<") && marks.len() == 1);
        let mut docs = Vec::new();
        for m in &marks {
            let mut body = String::new();
            let mut closed = false;
            while i < lines.len() {
                let raw = lines[i].strip_suffix('\r').unwrap_or(lines[i]);
                let l = if m.strip_tabs {
                    raw.trim_start_matches('\t')
                } else {
                    raw
                };
                if !library_reads {
                    out[i] = " ".repeat(lines[i].len());
                }
                i += 1;
                if l == m.name {
                    closed = true;
                    break;
                }
                body.push_str(l);
                body.push('\n');
            }
            if !closed {
                // Unterminated: left to the library, which reports it.
                return (text.to_string(), HashMap::new());
            }
            docs.push(HereDoc {
                body,
                expand: m.expand,
                name: m.name.clone(),
            });
        }
        if !library_reads {
            found.insert(first + 1, docs);
        }
    }
    (out.join("\n"), found)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn markers_as_the_shell_sees_them() {
        let names = |l: &str| -> Vec<String> { markers(l).into_iter().map(|m| m.name).collect() };
        assert_eq!(names("cat <<A > a && cat <<-'B' > b"), ["A", "B"]);
        assert_eq!(names("echo '<<NO' \"<<NO\" <<<here"), Vec::<String>::new());
        assert_eq!(names("echo $((1<<2))"), Vec::<String>::new());
        assert_eq!(names("<<EOF sh"), ["EOF"]);
        let m = &markers("x <<-\"Q\"")[0];
        assert!(m.strip_tabs && !m.expand);
    }

    #[test]
    fn late_heredocs_are_lifted_and_blanked() {
        let text = "FROM x\nRUN cat <<A > /a && \\\n  cat <<B > /b\nfirst\nA\n\tsecond\nB\nRUN <<C\nRUN inside\nC\nCMD x\n";
        let (blanked, docs) = lift(text, '\\');
        assert_eq!(blanked.len(), text.len());
        assert_eq!(blanked.lines().nth(3).unwrap().trim(), "");
        assert_eq!(blanked.lines().nth(8).unwrap(), "RUN inside");
        let d = &docs[&2];
        assert_eq!(d.len(), 2);
        assert_eq!((d[0].name.as_str(), d[0].body.as_str()), ("A", "first\n"));
        assert_eq!(
            (d[1].name.as_str(), d[1].body.as_str()),
            ("B", "\tsecond\n")
        );
        assert!(!docs.contains_key(&8), "the library reads RUN <<C itself");
    }
}
