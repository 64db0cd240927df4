//! Docker's variable expansion in Dockerfile instructions.
//!
//! Docker does not run a shell for ENV, LABEL, ARG defaults, WORKDIR, USER, COPY sources
//! and the like; it applies a small shell-like lexer of its own (the "shell lexer" behind
//! `ProcessWord` and `ProcessWords`). Its rules, as the Dockerfile reference documents them
//! and as BuildKit behaves:
//!
//! * `$NAME` and `${NAME}` are replaced by the variable's value, or nothing when unset.
//!   A `$` not followed by a name (`$/`, a trailing `$`) stays a literal `$`.
//! * `${NAME:-word}`: `word` when NAME is unset or empty; `${NAME-word}`: only when unset.
//! * `${NAME:+word}`: `word` when NAME is set and not empty, else nothing; `${NAME+word}`:
//!   `word` when NAME is set, even to the empty string.
//! * `${NAME:?msg}` fails with `NAME: msg` when NAME is unset or empty; `${NAME?msg}` only
//!   when unset. `word` and `msg` are themselves expanded.
//! * The escape character (`\`, or the backtick under `# escape=``) makes the next
//!   character literal (`\$HOME` is the text `$HOME`); an escape at the very end is dropped.
//! * Single quotes keep everything literal up to the closing quote (no expansion, no
//!   escapes). Double quotes expand variables; inside them the escape character only
//!   escapes `"`, `$` and itself, and is kept before anything else.
//! * Quotes are removed from the result.
//!
//! [`expand`] yields one string (whitespace kept as it is); [`expand_words`] also splits
//! the result into words at whitespace that was neither quoted nor escaped, including
//! whitespace that came from an unquoted variable's value (like a shell's field
//! splitting), which is what docker does for instructions taking several words.

use crate::{Error, Result};

/// How deep `${A:-${B:-...}}` may nest before the text is refused: Dockerfiles never
/// come near it, and the limit keeps hostile input from exhausting the stack.
const MAX_DEPTH: usize = 64;

/// Expands the variables in `word` as docker does for one instruction argument, with
/// `lookup` giving a variable's value (`None` when unset), and removes quotes.
///
/// `escape` is the Dockerfile's escape character ([`crate::Dockerfile::escape`]).
pub fn expand(word: &str, escape: char, lookup: &dyn Fn(&str) -> Option<String>) -> Result<String> {
    let segs = Lexer::new(word, escape, Some(lookup)).run()?;
    Ok(segs.into_iter().map(Seg::into_text).collect())
}

/// Like [`expand`], then split into words at unquoted, unescaped whitespace (docker's
/// `ProcessWords`, used for EXPOSE, VOLUME in word form and similar). Empty words (`""`)
/// are dropped, as docker drops them.
pub fn expand_words(
    s: &str,
    escape: char,
    lookup: &dyn Fn(&str) -> Option<String>,
) -> Result<Vec<String>> {
    let segs = Lexer::new(s, escape, Some(lookup)).run()?;
    Ok(split_words(segs))
}

/// Removes quotes and escapes from `word` the way [`expand`] does, but leaves every `$`
/// as written: the literal text of a key such as LABEL's `"com.example.vendor"`.
pub fn unquote(word: &str, escape: char) -> Result<String> {
    let segs = Lexer::new(word, escape, None).run()?;
    Ok(segs.into_iter().map(Seg::into_text).collect())
}

/// A piece of the result: either text that whitespace may split (unquoted literal text and
/// unquoted variable values) or text that stays whole (quoted or escaped).
enum Seg {
    Split(String),
    Whole(String),
}

impl Seg {
    fn into_text(self) -> String {
        match self {
            Seg::Split(s) | Seg::Whole(s) => s,
        }
    }
}

/// Joins segments into words, splitting [`Seg::Split`] text at whitespace.
fn split_words(segs: Vec<Seg>) -> Vec<String> {
    let mut words = Vec::new();
    let mut word = String::new();
    for seg in segs {
        match seg {
            Seg::Whole(s) => word.push_str(&s),
            Seg::Split(s) => {
                for c in s.chars() {
                    if c.is_whitespace() {
                        if !word.is_empty() {
                            words.push(std::mem::take(&mut word));
                        }
                    } else {
                        word.push(c);
                    }
                }
            }
        }
    }
    if !word.is_empty() {
        words.push(word);
    }
    words
}

/// A variable's value, `None` when unset.
type Lookup<'a> = &'a dyn Fn(&str) -> Option<String>;

/// The lexer: a cursor over the word's characters.
struct Lexer<'a> {
    chars: Vec<char>,
    pos: usize,
    escape: char,
    /// `None`: do not expand (for [`unquote`]).
    lookup: Option<Lookup<'a>>,
}

/// Pushes `c` to the last segment when it is of the same kind, else starts a new one.
fn push_char(out: &mut Vec<Seg>, c: char, whole: bool) {
    match (out.last_mut(), whole) {
        (Some(Seg::Whole(s)), true) | (Some(Seg::Split(s)), false) => s.push(c),
        (_, true) => out.push(Seg::Whole(c.to_string())),
        (_, false) => out.push(Seg::Split(c.to_string())),
    }
}

impl<'a> Lexer<'a> {
    fn new(s: &str, escape: char, lookup: Option<Lookup<'a>>) -> Self {
        Lexer {
            chars: s.chars().collect(),
            pos: 0,
            escape,
            lookup,
        }
    }

    fn peek(&self) -> Option<char> {
        self.chars.get(self.pos).copied()
    }

    fn next(&mut self) -> Option<char> {
        let c = self.peek()?;
        self.pos += 1;
        Some(c)
    }

    fn run(mut self) -> Result<Vec<Seg>> {
        self.process(None, 0)
    }

    /// Processes up to `stop` (consumed; `}` ends a `${...}` word) or the end.
    fn process(&mut self, stop: Option<char>, depth: usize) -> Result<Vec<Seg>> {
        if depth > MAX_DEPTH {
            return Err(Error::Expand(
                "variable substitutions nested too deeply".into(),
            ));
        }
        let mut out = Vec::new();
        loop {
            let Some(c) = self.next() else {
                if stop.is_some() {
                    return Err(Error::Expand("missing '}' in variable substitution".into()));
                }
                return Ok(out);
            };
            if Some(c) == stop {
                return Ok(out);
            }
            if c == '\'' {
                let mut s = String::new();
                loop {
                    match self.next() {
                        None => {
                            return Err(Error::Expand(
                                "unexpected end of statement while looking for matching single-quote"
                                    .into(),
                            ));
                        }
                        Some('\'') => break,
                        Some(c) => s.push(c),
                    }
                }
                out.push(Seg::Whole(s));
            } else if c == '"' {
                let s = self.double_quoted(depth)?;
                out.push(Seg::Whole(s));
            } else if c == '$' && self.lookup.is_some() {
                self.dollar(&mut out, false, depth)?;
            } else if c == self.escape {
                // An escape at the very end is dropped.
                if let Some(n) = self.next() {
                    push_char(&mut out, n, true);
                }
            } else {
                push_char(&mut out, c, false);
            }
        }
    }

    /// The inside of `"..."` (the opening quote consumed), expanded.
    fn double_quoted(&mut self, depth: usize) -> Result<String> {
        let mut s = String::new();
        loop {
            let Some(c) = self.next() else {
                return Err(Error::Expand(
                    "unexpected end of statement while looking for matching double-quote".into(),
                ));
            };
            if c == '"' {
                return Ok(s);
            }
            if c == '$' && self.lookup.is_some() {
                let mut segs = Vec::new();
                self.dollar(&mut segs, true, depth)?;
                s.extend(segs.into_iter().map(Seg::into_text));
            } else if c == self.escape {
                match self.peek() {
                    Some(n) if n == '"' || n == '$' || n == self.escape => {
                        self.pos += 1;
                        s.push(n);
                    }
                    // Before anything else, and at the end, the escape stays.
                    _ => s.push(c),
                }
            } else {
                s.push(c);
            }
        }
    }

    /// A variable's name after `$` or `${`: letters, digits and `_`; or a run of digits;
    /// or one of the shell's special parameters.
    fn name(&mut self) -> String {
        let mut name = String::new();
        match self.peek() {
            Some(c) if c.is_ascii_digit() => {
                while let Some(c) = self.peek().filter(char::is_ascii_digit) {
                    name.push(c);
                    self.pos += 1;
                }
                return name;
            }
            Some(c @ ('@' | '*' | '#' | '?' | '-' | '$' | '!')) => {
                self.pos += 1;
                name.push(c);
                return name;
            }
            _ => {}
        }
        while let Some(c) = self.peek() {
            if !(c.is_alphanumeric() || c == '_') {
                break;
            }
            name.push(c);
            self.pos += 1;
        }
        name
    }

    fn value(&self, name: &str) -> Option<String> {
        self.lookup.and_then(|f| f(name))
    }

    /// After a `$`: pushes the substitution. `quoted`: inside double quotes (the value
    /// stays whole rather than splittable).
    fn dollar(&mut self, out: &mut Vec<Seg>, quoted: bool, depth: usize) -> Result<()> {
        let wrap = |s: String| if quoted { Seg::Whole(s) } else { Seg::Split(s) };
        if self.peek() != Some('{') {
            let name = self.name();
            if name.is_empty() {
                push_char(out, '$', quoted);
            } else {
                out.push(wrap(self.value(&name).unwrap_or_default()));
            }
            return Ok(());
        }
        self.pos += 1;
        let name = self.name();
        if name.is_empty() {
            return Err(Error::Expand(
                "bad substitution: missing variable name in ${}".into(),
            ));
        }
        let (colon, op) = match self.next() {
            Some('}') => {
                out.push(wrap(self.value(&name).unwrap_or_default()));
                return Ok(());
            }
            Some(':') => match self.next() {
                Some(op @ ('-' | '+' | '?')) => (true, op),
                Some(op) => {
                    return Err(Error::Expand(format!(
                        "unsupported modifier (:{op}) in substitution of {name}"
                    )));
                }
                None => return Err(Error::Expand("missing '}' in variable substitution".into())),
            },
            Some(op @ ('-' | '+' | '?')) => (false, op),
            Some(op) => {
                return Err(Error::Expand(format!(
                    "unsupported modifier ({op}) in substitution of {name}"
                )));
            }
            None => return Err(Error::Expand("missing '}' in variable substitution".into())),
        };
        // The word is processed (and its errors reported) whichever branch is taken.
        let word = self.process(Some('}'), depth + 1)?;
        let value = self.value(&name);
        // `:` makes an empty value count as unset.
        let present = match &value {
            Some(v) => !(colon && v.is_empty()),
            None => false,
        };
        let rewrap = |segs: Vec<Seg>| -> Vec<Seg> {
            if quoted {
                vec![Seg::Whole(segs.into_iter().map(Seg::into_text).collect())]
            } else {
                segs
            }
        };
        match op {
            '-' => {
                if present {
                    out.push(wrap(value.unwrap_or_default()));
                } else {
                    out.extend(rewrap(word));
                }
            }
            '+' => {
                if present {
                    out.extend(rewrap(word));
                }
            }
            _ => {
                if !present {
                    let msg: String = word.into_iter().map(Seg::into_text).collect();
                    let msg = if msg.is_empty() {
                        "parameter null or not set".to_string()
                    } else {
                        msg
                    };
                    return Err(Error::Expand(format!("{name}: {msg}")));
                }
                out.push(wrap(value.unwrap_or_default()));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(name: &str) -> Option<String> {
        match name {
            "FOO" => Some("foo".into()),
            "HOME" => Some("/root".into()),
            "EMPTY" => Some(String::new()),
            "SPACED" => Some("a b  c".into()),
            _ => None,
        }
    }

    fn x(s: &str) -> String {
        expand(s, '\\', &env).unwrap()
    }

    #[test]
    fn plain_and_braced() {
        assert_eq!(x("$FOO"), "foo");
        assert_eq!(x("${FOO}"), "foo");
        assert_eq!(x("${FOO}bar"), "foobar");
        assert_eq!(x("$FOO/bar"), "foo/bar");
        assert_eq!(x("$UNSET"), "");
        assert_eq!(x("a$"), "a$");
        assert_eq!(x("$/x"), "$/x");
        assert_eq!(x("no vars here"), "no vars here");
    }

    #[test]
    fn modifiers_docker_reference() {
        // From the reference: ${variable:-word} and ${variable:+word}.
        assert_eq!(x("${UNSET:-word}"), "word");
        assert_eq!(x("${EMPTY:-word}"), "word");
        assert_eq!(x("${FOO:-word}"), "foo");
        assert_eq!(x("${FOO:+word}"), "word");
        assert_eq!(x("${EMPTY:+word}"), "");
        assert_eq!(x("${UNSET:+word}"), "");
        // Without the colon, set-but-empty counts as set (BuildKit).
        assert_eq!(x("${EMPTY-word}"), "");
        assert_eq!(x("${UNSET-word}"), "word");
        assert_eq!(x("${EMPTY+word}"), "word");
        assert_eq!(x("${UNSET+word}"), "");
        // The word is expanded too.
        assert_eq!(x("${UNSET:-$FOO/x}"), "foo/x");
        assert_eq!(x("${UNSET:-${ALSO:-deep}}"), "deep");
    }

    #[test]
    fn required_variables() {
        let e = expand("${UNSET:?is required}", '\\', &env).unwrap_err();
        assert_eq!(e.to_string(), "UNSET: is required");
        assert!(expand("${EMPTY:?x}", '\\', &env).is_err());
        assert_eq!(x("${EMPTY?x}"), "");
        assert!(expand("${UNSET?}", '\\', &env).is_err());
        assert_eq!(x("${FOO:?x}"), "foo");
    }

    #[test]
    fn escapes_and_quotes() {
        // From the reference: `\$foo` and `\${foo}` are the literal text.
        assert_eq!(x("\\$FOO"), "$FOO");
        assert_eq!(x("\\${FOO}"), "${FOO}");
        assert_eq!(x("'$FOO'"), "$FOO");
        assert_eq!(x("\"$FOO\""), "foo");
        assert_eq!(x("\"a \\\"b\\\" \\$FOO \\n\""), "a \"b\" $FOO \\n");
        assert_eq!(x("'a\\b'"), "a\\b");
        assert_eq!(x("hello\\ world"), "hello world");
        assert_eq!(x("trailing\\"), "trailing");
        assert_eq!(x("\"${FOO:-x}\"'${FOO}'"), "foo${FOO}");
        // The backtick escape leaves `\` literal.
        assert_eq!(expand("C:\\path`$FOO", '`', &env).unwrap(), "C:\\path$FOO");
        assert_eq!(expand("`$FOO\\$FOO", '`', &env).unwrap(), "$FOO\\foo");
    }

    #[test]
    fn errors() {
        for bad in [
            "${",
            "${FOO",
            "${}",
            "${FOO:-x",
            "'open",
            "\"open",
            "${FOO%x}",
            "${FOO:=x}",
        ] {
            assert!(
                matches!(expand(bad, '\\', &env), Err(Error::Expand(_))),
                "{bad}"
            );
        }
        let deep = "${A:-".repeat(200) + &"}".repeat(200);
        assert!(expand(&deep, '\\', &env).is_err());
    }

    #[test]
    fn words() {
        let w = |s: &str| expand_words(s, '\\', &env).unwrap();
        assert_eq!(w("80/tcp  443"), ["80/tcp", "443"]);
        assert_eq!(w("\"a b\" c\\ d '$FOO'"), ["a b", "c d", "$FOO"]);
        assert_eq!(w("$SPACED"), ["a", "b", "c"]);
        assert_eq!(w("\"$SPACED\""), ["a b  c"]);
        assert_eq!(w("x${FOO}y \"\" z"), ["xfooy", "z"]);
        assert!(w("   ").is_empty());
    }

    #[test]
    fn unquote_keeps_dollars() {
        assert_eq!(
            unquote("\"com.example.vendor\"", '\\').unwrap(),
            "com.example.vendor"
        );
        assert_eq!(unquote("$FOO\\ x", '\\').unwrap(), "$FOO x");
        assert_eq!(unquote("'a b'\"c\"", '\\').unwrap(), "a bc");
    }
}
