//! `.dockerignore`, as docker documents it (moby/patternmatcher's rules).
//!
//! * One pattern a line; lines starting with `#` are comments; blank lines are skipped;
//!   surrounding whitespace is trimmed.
//! * Patterns are cleaned like Go's `filepath.Clean` (`./a//b/../c` is `a/c`) and a leading
//!   `/` is dropped: every pattern is relative to the context root.
//! * Go's `filepath.Match` syntax: `*` (any run of non-`/`), `?` (one non-`/`), `[...]`
//!   classes (`[^...]` negated, ranges), `\` escaping the next character; plus `**`, any
//!   number of directories (zero included): `**/x`, `a/**/b`, `a/**`.
//! * A pattern excludes a path when it matches the path or one of its parent directories,
//!   so excluding a directory excludes everything below it.
//! * Patterns apply in order; a later `!pattern` re-includes what it matches, and a later
//!   plain pattern excludes it again: the last matching line decides.
//!
//! A pattern Go would reject (an unterminated `[`, a trailing `\`) makes docker fail the
//! build; here it matches nothing and is listed by [`DockerIgnore::invalid_patterns`] so
//! that the engine can fail the same way.

/// A parsed `.dockerignore`.
#[derive(Debug, Clone, Default)]
pub struct DockerIgnore {
    rules: Vec<Rule>,
    invalid: Vec<String>,
}

#[derive(Debug, Clone)]
struct Rule {
    /// `!pattern`: re-includes.
    exclusion: bool,
    pattern: Pattern,
}

impl DockerIgnore {
    /// Parses a `.dockerignore` file's text.
    pub fn parse(text: &str) -> DockerIgnore {
        let text = text.strip_prefix('\u{feff}').unwrap_or(text);
        let mut out = DockerIgnore::default();
        for line in text.lines() {
            // Only a `#` in the first column starts a comment.
            if line.starts_with('#') {
                continue;
            }
            let mut p = line.trim();
            if p.is_empty() {
                continue;
            }
            let exclusion = if let Some(rest) = p.strip_prefix('!') {
                p = rest.trim();
                true
            } else {
                false
            };
            let cleaned = clean(p);
            let cleaned = match cleaned.strip_prefix('/') {
                Some(rest) if !rest.is_empty() => rest.to_string(),
                _ => cleaned,
            };
            match Pattern::compile(&cleaned, true) {
                Some(pattern) => out.rules.push(Rule { exclusion, pattern }),
                None => out.invalid.push(line.trim().to_string()),
            }
        }
        out
    }

    /// Patterns that Go's `filepath.Match` rejects (docker fails the build on them).
    pub fn invalid_patterns(&self) -> &[String] {
        &self.invalid
    }

    /// Whether `rel_path` (slash-separated, relative to the context root) is left out of
    /// the context. The root itself never is.
    pub fn excludes(&self, rel_path: &str) -> bool {
        let path = clean(rel_path.trim_start_matches('/'));
        if path == "." || path == "/" || path.is_empty() {
            return false;
        }
        // The path's parents: `a`, `a/b` for `a/b/c`.
        let parents: Vec<&str> = path
            .match_indices('/')
            .filter_map(|(i, _)| path.get(..i))
            .collect();
        let mut matched = false;
        for rule in &self.rules {
            // Only a rule that can change the verdict is evaluated.
            if rule.exclusion != matched {
                continue;
            }
            let hit =
                rule.pattern.matches(&path) || parents.iter().any(|p| rule.pattern.matches(p));
            if hit {
                matched = !rule.exclusion;
            }
        }
        matched
    }

    /// Whether some `!` pattern could match something below `dir` (a directory that
    /// [`Self::excludes`]), so that a walker must still descend into it rather than skip
    /// it whole. Conservative: true when in doubt.
    pub fn may_reinclude_below(&self, dir: &str) -> bool {
        let dir = clean(dir.trim_start_matches('/'));
        let prefix = if dir == "." || dir.is_empty() {
            String::new()
        } else {
            format!("{dir}/")
        };
        self.rules
            .iter()
            .any(|r| r.exclusion && r.pattern.could_extend(&prefix))
    }
}

/// Go's `path.Clean` on a slash-separated path: no `.` components, `..` resolved where
/// possible, no repeated or trailing slashes; `.` for an empty result.
pub(crate) fn clean(p: &str) -> String {
    let rooted = p.starts_with('/');
    let mut parts: Vec<&str> = Vec::new();
    for c in p.split('/') {
        match c {
            "" | "." => {}
            ".." => {
                if parts.last().is_some_and(|l| *l != "..") {
                    parts.pop();
                } else if !rooted {
                    parts.push("..");
                }
            }
            c => parts.push(c),
        }
    }
    let joined = parts.join("/");
    match (rooted, joined.is_empty()) {
        (true, _) => format!("/{joined}"),
        (false, true) => ".".to_string(),
        (false, false) => joined,
    }
}

/// One element of a compiled pattern.
#[derive(Debug, Clone)]
enum Tok {
    Lit(char),
    /// `?`: one character other than `/`.
    One,
    /// `*`: any run of characters other than `/`.
    Star,
    /// `**` at the end: anything, `/` included.
    AnyAll,
    /// `**` elsewhere (a following `/` eaten): zero or more whole directories, `(.*/)?`.
    Dirs,
    /// `[...]`: ranges, negated or not; never matches `/`.
    Class {
        neg: bool,
        ranges: Vec<(char, char)>,
    },
}

/// A compiled wildcard pattern, matched against whole slash-separated paths by simulating
/// its automaton (linear in the path's length, whatever the pattern: no backtracking).
#[derive(Debug, Clone)]
pub(crate) struct Pattern {
    toks: Vec<Tok>,
}

/// An automaton state: before token `i`; `inner` is within a `Dirs` token's `.*/`.
#[derive(Clone, Copy, PartialEq, Eq)]
struct St {
    i: usize,
    inner: bool,
}

impl Pattern {
    /// Compiles `p`; `double_star`: `**` spans directories (`.dockerignore`), else it is
    /// two `*` (Go's `filepath.Match`, for COPY sources). `None` for a bad pattern.
    pub(crate) fn compile(p: &str, double_star: bool) -> Option<Pattern> {
        let chars: Vec<char> = p.chars().collect();
        let mut toks = Vec::new();
        let mut i = 0;
        while let Some(&c) = chars.get(i) {
            i += 1;
            match c {
                '*' if double_star && chars.get(i) == Some(&'*') => {
                    i += 1;
                    // More stars are the same `**`.
                    while chars.get(i) == Some(&'*') {
                        i += 1;
                    }
                    if chars.get(i) == Some(&'/') {
                        i += 1;
                    }
                    if i >= chars.len() {
                        toks.push(Tok::AnyAll);
                    } else {
                        toks.push(Tok::Dirs);
                    }
                }
                '*' => toks.push(Tok::Star),
                '?' => toks.push(Tok::One),
                '\\' => {
                    let n = *chars.get(i)?;
                    i += 1;
                    toks.push(Tok::Lit(n));
                }
                '[' => {
                    let mut neg = false;
                    if chars.get(i) == Some(&'^') {
                        neg = true;
                        i += 1;
                    }
                    let mut ranges = Vec::new();
                    loop {
                        let mut lo = *chars.get(i)?;
                        i += 1;
                        if lo == ']' && !ranges.is_empty() {
                            break;
                        }
                        if lo == '\\' {
                            lo = *chars.get(i)?;
                            i += 1;
                        } else if lo == ']' || lo == '-' {
                            // Go: an empty class or a leading `-` is a bad pattern.
                            return None;
                        }
                        let mut hi = lo;
                        if chars.get(i) == Some(&'-') {
                            i += 1;
                            hi = *chars.get(i)?;
                            i += 1;
                            if hi == '\\' {
                                hi = *chars.get(i)?;
                                i += 1;
                            } else if hi == ']' {
                                return None;
                            }
                            if hi < lo {
                                return None;
                            }
                        }
                        ranges.push((lo, hi));
                    }
                    toks.push(Tok::Class { neg, ranges });
                }
                c => toks.push(Tok::Lit(c)),
            }
        }
        Some(Pattern { toks })
    }

    /// Whether the pattern has wildcards (else it names one path).
    pub(crate) fn is_literal(&self) -> bool {
        self.toks.iter().all(|t| matches!(t, Tok::Lit(_)))
    }

    /// The index of a state in a `seen` table of `2 * (toks.len() + 1)` entries.
    fn slot(s: St) -> usize {
        s.i * 2 + usize::from(s.inner)
    }

    /// Adds `s` and the states reachable from it without input (iteratively: a pattern
    /// may be long).
    fn add(&self, set: &mut Vec<St>, seen: &mut [bool], s: St) {
        let mut todo = vec![s];
        while let Some(s) = todo.pop() {
            match seen.get_mut(Self::slot(s)) {
                Some(b) if !*b => *b = true,
                _ => continue,
            }
            set.push(s);
            if s.inner {
                continue;
            }
            match self.toks.get(s.i) {
                Some(Tok::Star | Tok::AnyAll) => todo.push(St {
                    i: s.i + 1,
                    inner: false,
                }),
                Some(Tok::Dirs) => {
                    todo.push(St {
                        i: s.i + 1,
                        inner: false,
                    });
                    todo.push(St {
                        i: s.i,
                        inner: true,
                    });
                }
                _ => {}
            }
        }
    }

    fn step(&self, set: &[St], c: char) -> Vec<St> {
        let mut next = Vec::new();
        let mut seen = vec![false; 2 * (self.toks.len() + 1)];
        for &s in set {
            if s.inner {
                // Within `.*/`: any character stays; a `/` may also end the group.
                self.add(&mut next, &mut seen, s);
                if c == '/' {
                    self.add(
                        &mut next,
                        &mut seen,
                        St {
                            i: s.i + 1,
                            inner: false,
                        },
                    );
                }
                continue;
            }
            let Some(t) = self.toks.get(s.i) else {
                continue;
            };
            let adv = St {
                i: s.i + 1,
                inner: false,
            };
            match t {
                Tok::Lit(l) if *l == c => self.add(&mut next, &mut seen, adv),
                Tok::One if c != '/' => self.add(&mut next, &mut seen, adv),
                Tok::Star if c != '/' => self.add(&mut next, &mut seen, s),
                Tok::AnyAll => self.add(&mut next, &mut seen, s),
                Tok::Class { neg, ranges } if c != '/' => {
                    let inside = ranges.iter().any(|&(lo, hi)| lo <= c && c <= hi);
                    if inside != *neg {
                        self.add(&mut next, &mut seen, adv);
                    }
                }
                _ => {}
            }
        }
        next
    }

    fn run(&self, s: &str) -> Vec<St> {
        let mut set = Vec::new();
        let mut seen = vec![false; 2 * (self.toks.len() + 1)];
        self.add(&mut set, &mut seen, St { i: 0, inner: false });
        for c in s.chars() {
            if set.is_empty() {
                break;
            }
            set = self.step(&set, c);
        }
        set
    }

    /// Whether the whole of `s` matches.
    pub(crate) fn matches(&self, s: &str) -> bool {
        let end = self.toks.len();
        self.run(s).iter().any(|st| st.i == end && !st.inner)
    }

    /// Whether some string starting with `prefix` could match (or a parent of it: a
    /// directory re-included re-includes what is below).
    fn could_extend(&self, prefix: &str) -> bool {
        if !self.run(prefix).is_empty() {
            return true;
        }
        // A match of one of the prefix's own directories (`!a` for prefix `a/b/`).
        prefix
            .match_indices('/')
            .filter_map(|(i, _)| prefix.get(..i))
            .any(|p| self.matches(p))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reference_examples() {
        // The Dockerfile reference's example .dockerignore.
        let d = DockerIgnore::parse("# comment\n*/temp*\n*/*/temp*\ntemp?\n");
        assert!(d.excludes("somedir/temporary.txt"));
        assert!(d.excludes("somedir/temp"));
        assert!(d.excludes("somedir/subdir/temporary.txt"));
        assert!(d.excludes("tempa"));
        assert!(d.excludes("tempb"));
        assert!(!d.excludes("temp"));
        assert!(!d.excludes("temporary.txt"));
        assert!(!d.excludes("a/b/c/temp"));
        // A comment line is not a pattern.
        assert!(!d.excludes("# comment"));
    }

    #[test]
    fn double_star() {
        let d = DockerIgnore::parse("**/*.go\n");
        assert!(d.excludes("main.go"));
        assert!(d.excludes("a/b/c.go"));
        assert!(!d.excludes("a/b/c.rs"));
        let d = DockerIgnore::parse("a/**/b\nlogs/**\n");
        assert!(d.excludes("a/b"));
        assert!(d.excludes("a/x/y/b"));
        assert!(d.excludes("a/x/b/file"));
        assert!(!d.excludes("a/xb"));
        assert!(d.excludes("logs/x/y"));
        assert!(!d.excludes("logsx"));
    }

    #[test]
    fn exceptions() {
        // From the reference: all markdown files but README*.md, except README-secret.md.
        let d = DockerIgnore::parse("*.md\n!README*.md\nREADME-secret.md\n");
        assert!(d.excludes("CHANGES.md"));
        assert!(!d.excludes("README.md"));
        assert!(!d.excludes("README-public.md"));
        assert!(d.excludes("README-secret.md"));
        // Order matters: the last line wins.
        let d = DockerIgnore::parse("*.md\nREADME-secret.md\n!README*.md\n");
        assert!(!d.excludes("README-secret.md"));
    }

    #[test]
    fn directories_and_reinclusion() {
        let d = DockerIgnore::parse("node_modules\nbuild/\n!build/keep/**\n./dist\n/out\n");
        assert!(d.excludes("node_modules"));
        assert!(d.excludes("node_modules/a/b.js"));
        assert!(d.excludes("build/x.o"));
        assert!(!d.excludes("build/keep/a"));
        assert!(d.excludes("dist/a"));
        assert!(d.excludes("out/a"));
        assert!(d.excludes("/out/a"));
        assert!(!d.excludes("src/node_modules_x"));
        assert!(!d.excludes("."));
        assert!(!d.excludes(""));
        assert!(d.may_reinclude_below("build"));
        assert!(!d.may_reinclude_below("node_modules"));
        let d = DockerIgnore::parse("*\n!**/*.txt\n!src\n");
        assert!(d.excludes("a/b.rs"));
        assert!(!d.excludes("a/b.txt"));
        assert!(!d.excludes("src/x.rs"));
        assert!(d.may_reinclude_below("a"));
        let d = DockerIgnore::parse("vendor\n!vendor\n");
        assert!(!d.excludes("vendor/x"));
    }

    #[test]
    fn classes_and_escapes() {
        let d = DockerIgnore::parse("[a-c].txt\n[^x]y\n\\*star\n");
        assert!(d.excludes("b.txt"));
        assert!(!d.excludes("d.txt"));
        assert!(d.excludes("zy"));
        assert!(!d.excludes("xy"));
        assert!(d.excludes("*star"));
        assert!(!d.excludes("xstar"));
        let d = DockerIgnore::parse("[abc\nok\nx\\\n");
        assert_eq!(d.invalid_patterns(), ["[abc", "x\\"]);
        assert!(d.excludes("ok"));
    }

    #[test]
    fn cleaning() {
        assert_eq!(clean("./a//b/../c/"), "a/c");
        assert_eq!(clean("/../a"), "/a");
        assert_eq!(clean("../a"), "../a");
        assert_eq!(clean(""), ".");
        assert_eq!(clean("/"), "/");
    }

    #[test]
    fn pathological_patterns_are_linear() {
        let p = Pattern::compile(&"*a".repeat(50), true).unwrap();
        assert!(!p.matches(&"a".repeat(40)));
        let p = Pattern::compile(&"**/".repeat(50), true).unwrap();
        assert!(p.matches(&"a/".repeat(60)));
    }
}
