//! The build context's path safety for COPY and ADD sources.
//!
//! A source is written relative to the context root, and a leading `/` also means the root
//! (docker treats `COPY /a /b` as the context's `a`). Here paths are resolved lexically and
//! any `..` that would climb above the root is refused; wildcards are matched by walking
//! the context with `symlink_metadata` only, so a symlink is reported as itself and never
//! followed (in particular never out of the root). Opening what these functions return
//! without following symlinks out of the root (openat-style) is the engine's job.

use std::path::{Path, PathBuf};

use crate::ignore::Pattern;
use crate::{Error, Result};

const OUTSIDE: &str = "outside the build context";
const NOT_FOUND: &str = "file not found in build context or excluded by .dockerignore";

/// The components of `source` relative to the root, `.` and `..` resolved; an error when
/// `..` climbs above the root.
fn components(source: &str) -> Result<Vec<&str>> {
    let mut parts: Vec<&str> = Vec::new();
    for c in source.split('/') {
        match c {
            "" | "." => {}
            ".." => {
                if parts.pop().is_none() {
                    return Err(Error::Context {
                        path: source.to_string(),
                        msg: OUTSIDE.to_string(),
                    });
                }
            }
            c => parts.push(c),
        }
    }
    Ok(parts)
}

/// The path inside `context_root` that the COPY/ADD source `source` names (lexically; no
/// file is looked at). `..` leading out of the root is refused.
pub fn resolve(context_root: &Path, source: &str) -> Result<PathBuf> {
    let mut p = context_root.to_path_buf();
    for c in components(source)? {
        p.push(c);
    }
    Ok(p)
}

/// A source that names a symlink is copied as what it points to, as docker's COPY follows
/// a source's own link: the root-relative path it leads to, through at most 40 links.
/// In the build context a link leading out (absolute, or `..` above the root) is refused,
/// naming the source; in an image (`COPY --from`, `absolute_in_root`) an absolute link
/// means the image's root and `..` stops there, as inside a container.
pub fn follow(context_root: &Path, rel: &str, absolute_in_root: bool) -> Result<String> {
    let out = |msg: &str| Error::Context {
        path: rel.to_string(),
        msg: msg.to_string(),
    };
    let mut cur = rel.to_string();
    for _ in 0..40 {
        let abs = resolve(context_root, &cur)?;
        let Ok(meta) = std::fs::symlink_metadata(&abs) else {
            return Ok(cur);
        };
        if !meta.file_type().is_symlink() {
            return Ok(cur);
        }
        let target = std::fs::read_link(&abs).map_err(|e| out(&e.to_string()))?;
        let target = target
            .to_str()
            .ok_or_else(|| out("a symlink whose target is not UTF-8"))?;
        let joined = if target.starts_with('/') {
            if !absolute_in_root {
                return Err(out("a symlink leading outside the build context"));
            }
            target.to_string()
        } else {
            match cur.rsplit_once('/') {
                Some((parent, _)) => format!("{parent}/{target}"),
                None => target.to_string(),
            }
        };
        cur = if absolute_in_root {
            clamp(&joined)
        } else {
            components(&joined)
                .map_err(|_| out("a symlink leading outside the build context"))?
                .join("/")
        };
        if cur.is_empty() {
            cur = ".".into();
        }
    }
    Err(out("too many levels of symbolic links"))
}

/// `path` resolved lexically with `..` stopping at the root.
fn clamp(path: &str) -> String {
    let mut parts: Vec<&str> = Vec::new();
    for c in path.split('/') {
        match c {
            "" | "." => {}
            ".." => {
                parts.pop();
            }
            c => parts.push(c),
        }
    }
    parts.join("/")
}

/// Whether `s` has Go `filepath.Match` wildcards.
fn has_wildcards(s: &str) -> bool {
    s.contains(['*', '?', '[', '\\'])
}

/// The paths in the context (relative, slash-separated, sorted) that the COPY source
/// `pattern` matches, each component matched with Go's `filepath.Match` (`*`, `?`,
/// `[...]`, `\` escapes; `*` never crosses a `/`). The root itself is `.`.
///
/// Only real directories are descended: a symlink is returned as a match but never
/// followed. A pattern that matches nothing is an error naming it.
pub fn glob(context_root: &Path, pattern: &str) -> Result<Vec<String>> {
    let parts = components(pattern)?;
    let not_found = || Error::Context {
        path: pattern.to_string(),
        msg: NOT_FOUND.to_string(),
    };
    // (relative path, absolute path) of the matches so far.
    let mut current: Vec<(String, PathBuf)> = vec![(String::new(), context_root.to_path_buf())];
    let last = parts.len().saturating_sub(1);
    for (n, part) in parts.iter().enumerate() {
        let mut next = Vec::new();
        for (rel, abs) in &current {
            // Only descend into real directories (the root itself may be reached through
            // a symlink the engine chose; below it, nothing is followed).
            if !rel.is_empty() && !is_real_dir(abs) {
                continue;
            }
            let join = |name: &str| {
                if rel.is_empty() {
                    name.to_string()
                } else {
                    format!("{rel}/{name}")
                }
            };
            if !has_wildcards(part) {
                let child = abs.join(part);
                if std::fs::symlink_metadata(&child).is_ok() {
                    next.push((join(part), child));
                }
                continue;
            }
            let Some(pat) = Pattern::compile(part, false) else {
                return Err(Error::Context {
                    path: pattern.to_string(),
                    msg: "syntax error in pattern".to_string(),
                });
            };
            if pat.is_literal() {
                // Only escapes (`a\*b`): the unescaped name.
                let name: String = unescape(part);
                let child = abs.join(&name);
                if std::fs::symlink_metadata(&child).is_ok() {
                    next.push((join(&name), child));
                }
                continue;
            }
            let Ok(entries) = std::fs::read_dir(abs) else {
                continue;
            };
            for e in entries.flatten() {
                let name = e.file_name();
                // Names that are not UTF-8 cannot be written in a Dockerfile's pattern.
                let Some(name) = name.to_str() else { continue };
                if pat.matches(name) {
                    next.push((join(name), e.path()));
                }
            }
        }
        if next.is_empty() && n <= last {
            return Err(not_found());
        }
        current = next;
    }
    let mut out: Vec<String> = current
        .into_iter()
        .map(|(rel, _)| if rel.is_empty() { ".".to_string() } else { rel })
        .collect();
    out.sort();
    out.dedup();
    if out.is_empty() {
        return Err(not_found());
    }
    Ok(out)
}

fn is_real_dir(p: &Path) -> bool {
    std::fs::symlink_metadata(p).is_ok_and(|m| m.file_type().is_dir())
}

fn unescape(s: &str) -> String {
    let mut out = String::new();
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        if c == '\\' {
            if let Some(n) = chars.next() {
                out.push(n);
            }
        } else {
            out.push(c);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn is_outside(r: Result<impl std::fmt::Debug>) -> bool {
        matches!(r, Err(Error::Context { msg, .. }) if msg == OUTSIDE)
    }

    #[test]
    fn resolve_inside() {
        let root = Path::new("/ctx");
        assert_eq!(resolve(root, "a/b").unwrap(), Path::new("/ctx/a/b"));
        assert_eq!(resolve(root, "/a/./b/").unwrap(), Path::new("/ctx/a/b"));
        assert_eq!(resolve(root, "a/../b").unwrap(), Path::new("/ctx/b"));
        assert_eq!(resolve(root, ".").unwrap(), Path::new("/ctx"));
        assert_eq!(resolve(root, "/").unwrap(), Path::new("/ctx"));
        assert_eq!(resolve(root, "a/..").unwrap(), Path::new("/ctx"));
    }

    #[test]
    fn resolve_refuses_escapes() {
        let root = Path::new("/ctx");
        for bad in [
            "../x",
            "a/../../x",
            "/../x",
            "..",
            "./a/b/../../../etc/passwd",
        ] {
            assert!(is_outside(resolve(root, bad)), "{bad}");
        }
        let e = resolve(root, "../x").unwrap_err();
        assert_eq!(e.to_string(), "../x: outside the build context");
    }

    #[test]
    fn glob_matches_and_never_follows_symlinks() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("secret.txt"), "s").unwrap();
        std::fs::create_dir_all(root.join("src/sub")).unwrap();
        std::fs::write(root.join("a.txt"), "").unwrap();
        std::fs::write(root.join("b.txt"), "").unwrap();
        std::fs::write(root.join("c.rs"), "").unwrap();
        std::fs::write(root.join("src/one.txt"), "").unwrap();
        std::fs::write(root.join("src/sub/two.txt"), "").unwrap();
        std::os::unix::fs::symlink(outside.path(), root.join("link")).unwrap();
        std::os::unix::fs::symlink("/etc/passwd", root.join("pw.txt")).unwrap();

        assert_eq!(glob(root, "*.txt").unwrap(), ["a.txt", "b.txt", "pw.txt"]);
        assert_eq!(glob(root, "/src/*.txt").unwrap(), ["src/one.txt"]);
        assert_eq!(glob(root, "*/*/t?o.txt").unwrap(), ["src/sub/two.txt"]);
        assert_eq!(glob(root, "[ab].txt").unwrap(), ["a.txt", "b.txt"]);
        assert_eq!(glob(root, "src").unwrap(), ["src"]);
        assert_eq!(glob(root, ".").unwrap(), ["."]);
        // The symlink is a match as itself; it is not followed to what is behind it.
        assert_eq!(glob(root, "lin?").unwrap(), ["link"]);
        assert!(glob(root, "link/*").is_err());
        assert!(glob(root, "link/secret.txt").is_err());
        // Nothing matched: an error naming the pattern.
        let e = glob(root, "*.go").unwrap_err();
        assert!(
            e.to_string()
                .starts_with("*.go: file not found in build context")
        );
        assert!(glob(root, "missing").is_err());
        assert!(is_outside(glob(root, "../*")));
        assert!(is_outside(glob(root, "src/../../x")));
    }
}
