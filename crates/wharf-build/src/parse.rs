//! Dockerfile text into [`Dockerfile`]: the syntax is `parse_dockerfile`'s (line
//! continuations, comments, parser directives, JSON forms, here-documents), mapped onto
//! our types; what it leaves as raw text (ENV, LABEL and ARG arguments, flags' meaning,
//! `--mount` options) is split here as docker does.
//!
//! Nothing is expanded: values keep their quotes and escapes so that the builder's
//! [`crate::expand::expand`], run with the environment the step sees, gives docker's result
//! (expanding `'$HOME'` must keep `$HOME`; removing the quotes here would lose that).

use std::collections::HashSet;

use parse_dockerfile as pd;

use crate::expand::unquote;
use crate::{
    ArgDecl, Command, Dockerfile, Error, Health, HereDoc, Instruction, Kind, Result, RunMount,
    Stage,
};

/// Parses a Dockerfile. `file` names it in errors (`Dockerfile:3: COPY: ...`).
pub fn parse(text: &str, file: &str) -> Result<Dockerfile> {
    // The library drops a UTF-8 BOM and reports spans in the text after it; do the same
    // so that spans index `text`.
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    // Here-documents the library does not read are lifted out first (their bodies
    // blanked, spans unchanged).
    let escape = sniff_escape(text);
    let (lifted, late) = crate::heredoc::lift(text, escape);
    let text = lifted.as_str();
    let cx = Cx {
        text,
        file,
        lines: LineIndex::new(text),
        escape,
        late,
    };
    let df = pd::parse(text).map_err(|e| cx.library_error(&e))?;
    let escape = df
        .parser_directives
        .escape
        .as_ref()
        .map_or('\\', |d| d.value.value);
    let cx = Cx { escape, ..cx };

    let mut out = Dockerfile {
        global_args: Vec::new(),
        stages: Vec::new(),
        escape,
    };
    let mut names = HashSet::new();
    for ins in &df.instructions {
        let start = keyword_span(ins).start;
        let line = cx.lines.line(start);
        if let pd::Instruction::From(from) = ins {
            out.stages.push(cx.stage(from, line, &mut names)?);
            continue;
        }
        match out.stages.last_mut() {
            Some(stage) => {
                let kind = cx.kind(ins)?;
                stage.instructions.push(Instruction {
                    line,
                    text: cx.logical_text(start),
                    kind,
                });
            }
            None => match cx.kind(ins)? {
                Kind::Arg(decls) => out.global_args.extend(decls),
                _ => {
                    return Err(cx.syntax(
                        line,
                        &keyword(ins),
                        "no build stage in current context",
                    ));
                }
            },
        }
    }
    if out.stages.is_empty() {
        return Err(cx.syntax(1, "FROM", "no build stage: the Dockerfile has no FROM"));
    }
    Ok(out)
}

/// What the conversions need: the text, its name, its lines, its escape character and
/// the here-documents lifted out of it (by the line of their RUN).
struct Cx<'a> {
    text: &'a str,
    file: &'a str,
    lines: LineIndex,
    escape: char,
    late: std::collections::HashMap<usize, Vec<HereDoc>>,
}

impl Cx<'_> {
    fn syntax(&self, line: usize, instruction: &str, msg: impl Into<String>) -> Error {
        Error::Syntax {
            file: self.file.to_string(),
            line,
            instruction: instruction.to_string(),
            msg: msg.into(),
        }
    }

    /// The library's error, restated as ours: its line, the keyword of the instruction
    /// around that line, and its message without the keyword it repeats.
    fn library_error(&self, e: &pd::Error) -> Error {
        let msg = format!("{e:#}");
        if e.line() == 0 {
            let msg = if msg.contains("at least one FROM") {
                "no build stage: the Dockerfile has no FROM".to_string()
            } else {
                msg
            };
            return self.syntax(1, "Dockerfile", msg);
        }
        let mut line = e.line();
        let lower = msg.to_ascii_lowercase();
        if lower.contains("here-document") {
            // Reported where the text ended: name the instruction that opened it instead.
            if let Some(l) = (1..=line).rev().find(|&l| {
                let s = self.lines.get(self.text, l);
                let w = s
                    .split_whitespace()
                    .next()
                    .unwrap_or("")
                    .to_ascii_uppercase();
                s.contains("<<") && matches!(w.as_str(), "RUN" | "COPY" | "ADD")
            }) {
                line = l;
            }
        }
        let word = self.keyword_of_line(line).to_ascii_uppercase();
        // The word names the instruction when it is one (or is the unknown one); an error
        // inside a here-document's body, say, is the file's.
        let is_word = !word.is_empty() && word.chars().all(|c| c.is_ascii_alphabetic());
        let instruction = if is_word
            && (KEYWORDS.contains(&word.as_str()) || lower.starts_with("unknown instruction"))
        {
            word
        } else {
            "Dockerfile".to_string()
        };
        let msg = if lower.starts_with("unknown instruction") {
            "unknown instruction".to_string()
        } else if msg == "expected FROM" {
            "no build stage in current context".to_string()
        } else if let Some(rest) = lower
            .strip_prefix(&instruction.to_ascii_lowercase())
            .and_then(|r| r.strip_prefix(" instruction "))
        {
            // `COPY instruction requires at least two arguments` -> `requires ...`;
            // `rest` is ASCII-lowercased, so take the same bytes from `msg`.
            msg.get(msg.len() - rest.len()..)
                .unwrap_or(rest)
                .to_string()
        } else {
            msg
        };
        self.syntax(line, &instruction, msg)
    }

    /// The first word of the instruction that `line` belongs to: going up while the line
    /// above ends with a line continuation.
    fn keyword_of_line(&self, line: usize) -> String {
        let mut l = line;
        while l > 1 {
            let above = self.lines.get(self.text, l - 1);
            if !ends_with_continuation(above, self.escape) {
                break;
            }
            l -= 1;
        }
        let s = self.lines.get(self.text, l);
        s.split_whitespace().next().unwrap_or("").to_string()
    }

    /// The instruction's text from `start` to the end of its first logical line,
    /// continuations joined as docker shows a step.
    fn logical_text(&self, start: usize) -> String {
        let rest = self.text.get(start..).unwrap_or("");
        let mut out = String::new();
        let mut continued = false;
        for raw in rest.split('\n') {
            let line = raw.strip_suffix('\r').unwrap_or(raw);
            if continued {
                let t = line.trim_start();
                // Comment and empty lines inside a continuation are dropped.
                if t.is_empty() || t.starts_with('#') {
                    continue;
                }
            }
            match strip_continuation(line, self.escape) {
                Some(head) => {
                    out.push_str(head);
                    continued = true;
                }
                None => {
                    out.push_str(line);
                    break;
                }
            }
        }
        out.trim_end().to_string()
    }

    /// Text as the library gives it for shell forms (continuations still in), joined.
    fn join(&self, raw: &str) -> String {
        let mut out = String::new();
        let mut continued = false;
        let mut lines = raw.split('\n').peekable();
        while let Some(raw_line) = lines.next() {
            let line = raw_line.strip_suffix('\r').unwrap_or(raw_line);
            if continued {
                let t = line.trim_start();
                if t.is_empty() || t.starts_with('#') {
                    continue;
                }
            }
            match strip_continuation(line, self.escape) {
                Some(head) if lines.peek().is_some() => {
                    out.push_str(head);
                    continued = true;
                }
                _ => {
                    out.push_str(line);
                    continued = false;
                    if lines.peek().is_some() {
                        out.push('\n');
                    }
                }
            }
        }
        out.trim().to_string()
    }

    fn stage(
        &self,
        from: &pd::FromInstruction<'_>,
        line: usize,
        names: &mut HashSet<String>,
    ) -> Result<Stage> {
        let mut platform = None;
        for f in &from.options {
            match &*f.name.value {
                "platform" => platform = Some(self.flag_value(f, "FROM", line)?),
                other => return Err(self.syntax(line, "FROM", format!("unknown flag: --{other}"))),
            }
        }
        let name = match &from.as_ {
            Some((_, n)) => {
                let n = n.value.to_ascii_lowercase();
                if !valid_stage_name(&n) {
                    return Err(self.syntax(
                        line,
                        "FROM",
                        format!("invalid name for build stage: {n:?}, name can't start with a number or contain symbols"),
                    ));
                }
                if !names.insert(n.clone()) {
                    return Err(self.syntax(line, "FROM", format!("duplicate stage name {n:?}")));
                }
                Some(n)
            }
            None => None,
        };
        Ok(Stage {
            name,
            from: from.image.value.to_string(),
            platform,
            line,
            instructions: Vec::new(),
        })
    }

    fn flag_value(&self, f: &pd::Flag<'_>, ins: &str, line: usize) -> Result<String> {
        match &f.value {
            Some(v) => Ok(v.value.to_string()),
            None => Err(self.syntax(
                line,
                ins,
                format!(
                    "flag --{} needs a value (--{}=...)",
                    f.name.value, f.name.value
                ),
            )),
        }
    }

    fn command(&self, c: &pd::Command<'_>, kw: &str, line: usize) -> Result<Command> {
        Ok(match c {
            pd::Command::Exec(v) => {
                Command::Exec(v.value.iter().map(|s| s.value.to_string()).collect())
            }
            pd::Command::Shell(s) => Command::Shell(self.join(s.value)),
            // The library may grow other forms; refuse what we do not know.
            _ => return Err(self.syntax(line, kw, "unsupported command form")),
        })
    }

    /// Converts one instruction other than FROM.
    fn kind(&self, ins: &pd::Instruction<'_>) -> Result<Kind> {
        let span = keyword_span(ins);
        let line = self.lines.line(span.start);
        let kw = keyword(ins);
        let kw = kw.as_str();
        Ok(match ins {
            pd::Instruction::From(_) => {
                return Err(self.syntax(line, kw, "FROM is not allowed here"));
            }
            pd::Instruction::Run(r) => {
                let mut mounts = Vec::new();
                let mut network = None;
                for f in &r.options {
                    match &*f.name.value {
                        "mount" => mounts.push(
                            parse_mount(&self.flag_value(f, kw, line)?)
                                .map_err(|m| self.syntax(line, kw, m))?,
                        ),
                        "network" => network = Some(self.flag_value(f, kw, line)?),
                        other => {
                            return Err(self.syntax(line, kw, format!("unknown flag: --{other}")));
                        }
                    }
                }
                let names = crate::heredoc::markers(&self.logical_text(span.start));
                let mut heredocs: Vec<HereDoc> = r
                    .here_docs
                    .iter()
                    .zip(names.iter().chain(std::iter::repeat(&Default::default())))
                    .map(|(h, m)| heredoc(h, m))
                    .collect();
                if let Some(late) = self.late.get(&line) {
                    heredocs = late.clone();
                }
                let command = match (&r.arguments, heredocs.is_empty()) {
                    // `RUN <<EOF bash`: keep the marker, so the builder can hand the shell
                    // the whole thing (`<<EOF bash\n...\nEOF`) or run a lone `<<EOF` body.
                    (pd::Command::Shell(s), false) => {
                        let from = r.options.last().map_or(span.end, |f| f.span().end);
                        let first_line = self.text.get(from..s.span.end).unwrap_or("");
                        Command::Shell(first_line.trim().to_string())
                    }
                    (c, _) => self.command(c, kw, line)?,
                };
                Kind::Run {
                    command,
                    heredocs,
                    mounts,
                    network,
                }
            }
            pd::Instruction::Copy(c) => self.copy(false, &c.options, &c.src, &c.dest, kw, line)?,
            pd::Instruction::Add(c) => self.copy(true, &c.options, &c.src, &c.dest, kw, line)?,
            pd::Instruction::Env(e) => Kind::Env(
                self.name_values(&e.arguments.value)
                    .map_err(|m| self.syntax(line, kw, m))?,
            ),
            pd::Instruction::Label(l) => Kind::Label(
                self.name_values(&l.arguments.value)
                    .map_err(|m| self.syntax(line, kw, m))?,
            ),
            pd::Instruction::Arg(a) => {
                let mut decls = Vec::new();
                for w in split_words(&a.arguments.value, self.escape) {
                    let (name, default) = match w.split_once('=') {
                        Some((n, d)) => (n, Some(d.to_string())),
                        None => (w.as_str(), None),
                    };
                    let name = unquote(name, self.escape)
                        .map_err(|e| self.syntax(line, kw, e.to_string()))?;
                    if name.is_empty() {
                        return Err(self.syntax(line, kw, "ARG names can not be blank"));
                    }
                    decls.push(ArgDecl { name, default });
                }
                if decls.is_empty() {
                    return Err(self.syntax(line, kw, "requires at least one argument"));
                }
                Kind::Arg(decls)
            }
            pd::Instruction::Cmd(c) => Kind::Cmd(self.command(&c.arguments, kw, line)?),
            pd::Instruction::Entrypoint(c) => {
                Kind::Entrypoint(self.command(&c.arguments, kw, line)?)
            }
            pd::Instruction::Workdir(w) => Kind::Workdir(w.arguments.value.to_string()),
            pd::Instruction::User(u) => Kind::User(u.arguments.value.to_string()),
            pd::Instruction::Stopsignal(s) => Kind::StopSignal(s.arguments.value.to_string()),
            pd::Instruction::Maintainer(m) => Kind::Maintainer(m.name.value.to_string()),
            pd::Instruction::Expose(e) => {
                Kind::Expose(e.arguments.iter().map(|s| s.value.to_string()).collect())
            }
            pd::Instruction::Volume(v) => Kind::Volume(match &v.arguments {
                pd::JsonOrStringArray::Json(a) => {
                    a.value.iter().map(|s| s.value.to_string()).collect()
                }
                pd::JsonOrStringArray::String(a) => a.iter().map(|s| s.value.to_string()).collect(),
            }),
            pd::Instruction::Shell(s) => {
                Kind::Shell(s.arguments.iter().map(|s| s.value.to_string()).collect())
            }
            pd::Instruction::Healthcheck(h) => {
                let test = match &h.arguments {
                    pd::HealthcheckArguments::None { .. } => None,
                    pd::HealthcheckArguments::Cmd { arguments, .. } => {
                        let test = self.command(arguments, kw, line)?;
                        if matches!(&test, Command::Shell(s) if s.is_empty()) {
                            return Err(self.syntax(line, kw, "requires at least one argument"));
                        }
                        Some(test)
                    }
                    // The library may grow other forms; refuse what we do not know.
                    _ => return Err(self.syntax(line, kw, "expected CMD or NONE")),
                };
                match test {
                    None => Kind::Healthcheck(None),
                    Some(test) => {
                        let mut health = Health {
                            test,
                            interval: None,
                            timeout: None,
                            start_period: None,
                            start_interval: None,
                            retries: None,
                        };
                        for f in &h.options {
                            let slot = match &*f.name.value {
                                "interval" => &mut health.interval,
                                "timeout" => &mut health.timeout,
                                "start-period" => &mut health.start_period,
                                "start-interval" => &mut health.start_interval,
                                "retries" => &mut health.retries,
                                other => {
                                    return Err(self.syntax(
                                        line,
                                        kw,
                                        format!("unknown flag: --{other}"),
                                    ));
                                }
                            };
                            *slot = Some(self.flag_value(f, kw, line)?);
                        }
                        Kind::Healthcheck(Some(health))
                    }
                }
            }
            pd::Instruction::Onbuild(o) => {
                let inner = &*o.instruction;
                let inner_kw = keyword(inner);
                if matches!(
                    inner,
                    pd::Instruction::From(_) | pd::Instruction::Maintainer(_)
                ) {
                    return Err(self.syntax(
                        line,
                        kw,
                        format!("{inner_kw} isn't allowed as an ONBUILD trigger"),
                    ));
                }
                // Validated now (flags, forms) so that a bad trigger fails here and not in
                // some later build; only its text is kept.
                self.kind(inner)?;
                Kind::OnBuild(self.logical_text(keyword_span(inner).start))
            }
            // The library may grow instructions; an unknown one is an error, as docker has it.
            _ => return Err(self.syntax(line, kw, "unknown instruction")),
        })
    }

    #[allow(clippy::too_many_arguments)]
    fn copy(
        &self,
        add: bool,
        options: &[pd::Flag<'_>],
        src: &[pd::Source<'_>],
        dest: &pd::UnescapedString<'_>,
        kw: &str,
        line: usize,
    ) -> Result<Kind> {
        let (mut from, mut chown, mut chmod, mut link) = (None, None, None, false);
        for f in options {
            match &*f.name.value {
                "from" => from = Some(self.flag_value(f, kw, line)?),
                "chown" => chown = Some(self.flag_value(f, kw, line)?),
                "chmod" => chmod = Some(self.flag_value(f, kw, line)?),
                "link" => {
                    link = match f.value.as_ref().map(|v| &*v.value) {
                        None | Some("true") => true,
                        Some("false") => false,
                        Some(v) => {
                            return Err(self.syntax(
                                line,
                                kw,
                                format!("invalid value for --link: {v:?}"),
                            ));
                        }
                    }
                }
                other => return Err(self.syntax(line, kw, format!("unknown flag: --{other}"))),
            }
        }
        let mut sources = Vec::new();
        let mut heredocs = Vec::new();
        let names = crate::heredoc::markers(&self.logical_text(self.lines.start(line)));
        let mut names = names.iter();
        for s in src {
            match s {
                pd::Source::Path(p) => sources.push(p.value.to_string()),
                pd::Source::HereDoc(h) => {
                    heredocs.push(heredoc(h, names.next().unwrap_or(&Default::default())))
                }
                _ => return Err(self.syntax(line, kw, "unsupported source")),
            }
        }
        if sources.is_empty() && heredocs.is_empty() {
            return Err(self.syntax(line, kw, "requires at least two arguments"));
        }
        Ok(Kind::Copy {
            add,
            from,
            chown,
            chmod,
            link,
            sources,
            heredocs,
            dest: dest.value.to_string(),
        })
    }

    /// ENV and LABEL arguments: `key=value ...` words, or the legacy `key value` (one
    /// pair, the value being the rest of the line). Keys lose their quotes; values keep
    /// them for [`crate::expand::expand`].
    fn name_values(&self, rest: &str) -> std::result::Result<Vec<(String, String)>, String> {
        let words = split_words(rest, self.escape);
        let Some(first) = words.first() else {
            return Err("requires at least one argument".into());
        };
        if !first.contains('=') {
            let rest = rest.trim();
            let Some((key, value)) = rest.split_once(|c: char| c.is_whitespace()) else {
                return Err("must have two arguments".into());
            };
            let key = unquote(key, self.escape).map_err(|e| e.to_string())?;
            return Ok(vec![(key, value.trim_start().to_string())]);
        }
        let mut pairs = Vec::new();
        for w in &words {
            let Some((k, v)) = w.split_once('=') else {
                return Err(format!(
                    "can't find = in {w:?}. Must be of the form: name=value"
                ));
            };
            let k = unquote(k, self.escape).map_err(|e| e.to_string())?;
            if k.is_empty() {
                return Err("names can not be blank".into());
            }
            pairs.push((k, v.to_string()));
        }
        Ok(pairs)
    }
}

fn heredoc(h: &pd::HereDoc<'_>, marker: &crate::heredoc::Marker) -> HereDoc {
    HereDoc {
        body: h.value.to_string(),
        expand: h.expand,
        name: marker.name.clone(),
    }
}

/// The span of an instruction's keyword (`RUN` in `RUN echo`).
fn keyword_span(ins: &pd::Instruction<'_>) -> std::ops::Range<usize> {
    use pd::Instruction as I;
    match ins {
        I::Add(i) => i.add.span.clone(),
        I::Arg(i) => i.arg.span.clone(),
        I::Cmd(i) => i.cmd.span.clone(),
        I::Copy(i) => i.copy.span.clone(),
        I::Entrypoint(i) => i.entrypoint.span.clone(),
        I::Env(i) => i.env.span.clone(),
        I::Expose(i) => i.expose.span.clone(),
        I::From(i) => i.from.span.clone(),
        I::Healthcheck(i) => i.healthcheck.span.clone(),
        I::Label(i) => i.label.span.clone(),
        I::Maintainer(i) => i.maintainer.span.clone(),
        I::Onbuild(i) => i.onbuild.span.clone(),
        I::Run(i) => i.run.span.clone(),
        I::Shell(i) => i.shell.span.clone(),
        I::Stopsignal(i) => i.stopsignal.span.clone(),
        I::User(i) => i.user.span.clone(),
        I::Volume(i) => i.volume.span.clone(),
        I::Workdir(i) => i.workdir.span.clone(),
        _ => 0..0,
    }
}

/// Docker's instructions.
const KEYWORDS: [&str; 18] = [
    "ADD",
    "ARG",
    "CMD",
    "COPY",
    "ENTRYPOINT",
    "ENV",
    "EXPOSE",
    "FROM",
    "HEALTHCHECK",
    "LABEL",
    "MAINTAINER",
    "ONBUILD",
    "RUN",
    "SHELL",
    "STOPSIGNAL",
    "USER",
    "VOLUME",
    "WORKDIR",
];

/// The instruction's name in capitals, as errors show it.
fn keyword(ins: &pd::Instruction<'_>) -> String {
    use pd::Instruction as I;
    match ins {
        I::Add(_) => "ADD",
        I::Arg(_) => "ARG",
        I::Cmd(_) => "CMD",
        I::Copy(_) => "COPY",
        I::Entrypoint(_) => "ENTRYPOINT",
        I::Env(_) => "ENV",
        I::Expose(_) => "EXPOSE",
        I::From(_) => "FROM",
        I::Healthcheck(_) => "HEALTHCHECK",
        I::Label(_) => "LABEL",
        I::Maintainer(_) => "MAINTAINER",
        I::Onbuild(_) => "ONBUILD",
        I::Run(_) => "RUN",
        I::Shell(_) => "SHELL",
        I::Stopsignal(_) => "STOPSIGNAL",
        I::User(_) => "USER",
        I::Volume(_) => "VOLUME",
        I::Workdir(_) => "WORKDIR",
        _ => "Dockerfile",
    }
    .to_string()
}

/// `line` without its trailing line continuation (the escape character, then only
/// spaces or tabs), or `None` when it does not continue.
fn strip_continuation(line: &str, escape: char) -> Option<&str> {
    let t = line.trim_end_matches([' ', '\t']);
    t.strip_suffix(escape)
}

fn ends_with_continuation(line: &str, escape: char) -> bool {
    strip_continuation(line, escape).is_some()
}

/// Docker's stage names: a letter, then letters, digits, `-`, `_` and `.`.
fn valid_stage_name(n: &str) -> bool {
    let mut c = n.chars();
    c.next().is_some_and(|f| f.is_ascii_lowercase())
        && c.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, '-' | '_' | '.'))
}

/// The escape directive, read cheaply for error reports (when the library fails we do not
/// have its directives): a leading `# escape=`` ` line.
fn sniff_escape(text: &str) -> char {
    for line in text.lines() {
        let Some(d) = line.trim_start().strip_prefix('#') else {
            break;
        };
        if let Some((k, v)) = d.split_once('=') {
            if k.trim().eq_ignore_ascii_case("escape") && v.trim() == "`" {
                return '`';
            }
        } else {
            break;
        }
    }
    '\\'
}

/// Docker's word splitting for ENV, LABEL and ARG: words end at unquoted whitespace;
/// quotes and escapes stay in the words (the builder's expansion removes them), an
/// escape character at the very end is dropped.
fn split_words(rest: &str, escape: char) -> Vec<String> {
    let mut words = Vec::new();
    let mut word = String::new();
    // A quoted word may be empty (`""`) and still count.
    let mut blank_ok = false;
    let mut in_word = false;
    let mut quote: Option<char> = None;
    let mut chars = rest.chars();
    while let Some(c) = chars.next() {
        if let Some(q) = quote {
            if c == q {
                quote = None;
            } else if c == escape && q != '\'' {
                match chars.next() {
                    Some(n) => {
                        word.push(c);
                        word.push(n);
                    }
                    None => quote = None,
                }
                continue;
            }
            word.push(c);
            continue;
        }
        if c.is_whitespace() {
            if in_word && (blank_ok || !word.is_empty()) {
                words.push(std::mem::take(&mut word));
            }
            word.clear();
            in_word = false;
            blank_ok = false;
            continue;
        }
        in_word = true;
        if c == '\'' || c == '"' {
            quote = Some(c);
            blank_ok = true;
        } else if c == escape {
            if let Some(n) = chars.next() {
                word.push(c);
                word.push(n);
            }
            continue;
        }
        word.push(c);
    }
    if in_word && (blank_ok || !word.is_empty()) {
        words.push(word);
    }
    words
}

/// A `--mount=` value: comma-separated `key=value` (double quotes may protect commas),
/// `type` taken out (bind when absent, as BuildKit has it).
fn parse_mount(v: &str) -> std::result::Result<RunMount, String> {
    let mut fields = Vec::new();
    let mut cur = String::new();
    let mut quoted = false;
    for c in v.chars() {
        match c {
            '"' => quoted = !quoted,
            ',' if !quoted => fields.push(std::mem::take(&mut cur)),
            c => cur.push(c),
        }
    }
    if quoted {
        return Err(format!("unterminated quote in --mount={v}"));
    }
    fields.push(cur);
    let mut kind = None;
    let mut options = Vec::new();
    for f in fields {
        if f.is_empty() {
            continue;
        }
        let (k, val) = match f.split_once('=') {
            Some((k, val)) => (k.trim().to_ascii_lowercase(), val.to_string()),
            None => (f.trim().to_ascii_lowercase(), String::new()),
        };
        if k == "type" {
            kind = Some(val.to_ascii_lowercase());
        } else {
            options.push((k, val));
        }
    }
    let kind = kind.unwrap_or_else(|| "bind".to_string());
    if !matches!(kind.as_str(), "bind" | "cache" | "tmpfs" | "secret" | "ssh") {
        return Err(format!("unsupported mount type {kind:?}"));
    }
    Ok(RunMount { kind, options })
}

/// Byte offsets of line starts, for 1-based line numbers from spans.
struct LineIndex {
    starts: Vec<usize>,
}

impl LineIndex {
    fn new(text: &str) -> Self {
        let mut starts = vec![0];
        starts.extend(text.match_indices('\n').map(|(i, _)| i + 1));
        LineIndex { starts }
    }

    /// The 1-based line holding byte `pos`.
    fn line(&self, pos: usize) -> usize {
        match self.starts.binary_search(&pos) {
            Ok(i) => i + 1,
            Err(i) => i.max(1),
        }
    }

    /// The byte offset where line `n` (1-based) starts.
    fn start(&self, n: usize) -> usize {
        n.checked_sub(1)
            .and_then(|i| self.starts.get(i))
            .copied()
            .unwrap_or(0)
    }

    /// Line `n` (1-based) without its newline; empty when out of range.
    fn get<'t>(&self, text: &'t str, n: usize) -> &'t str {
        let Some(&start) = n.checked_sub(1).and_then(|i| self.starts.get(i)) else {
            return "";
        };
        let end = self
            .starts
            .get(n)
            .map_or(text.len(), |e| e.saturating_sub(1));
        let s = text.get(start..end).unwrap_or("");
        s.strip_suffix('\r').unwrap_or(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str) -> Dockerfile {
        match parse(s, "Dockerfile") {
            Ok(d) => d,
            Err(e) => panic!("{e}"),
        }
    }

    fn err(s: &str) -> String {
        match parse(s, "Dockerfile") {
            Ok(d) => panic!("parsed: {d:?}"),
            Err(e) => e.to_string(),
        }
    }

    fn kinds(d: &Dockerfile, stage: usize) -> Vec<Kind> {
        d.stages[stage]
            .instructions
            .iter()
            .map(|i| i.kind.clone())
            .collect()
    }

    #[test]
    fn multi_stage_with_global_args() {
        let d = p("# syntax=docker/dockerfile:1\n\
                   ARG  CODE_VERSION=latest\n\
                   ARG A B=2\n\
                   FROM base:${CODE_VERSION}\n\
                   CMD  /code/run-app\n\
                   \n\
                   FROM --platform=$BUILDPLATFORM golang:1.22 AS Builder\n\
                   RUN go build\n\
                   from scratch\n\
                   COPY --from=builder /out /bin/app\n");
        assert_eq!(d.escape, '\\');
        assert_eq!(
            d.global_args,
            [
                ArgDecl {
                    name: "CODE_VERSION".into(),
                    default: Some("latest".into())
                },
                ArgDecl {
                    name: "A".into(),
                    default: None
                },
                ArgDecl {
                    name: "B".into(),
                    default: Some("2".into())
                },
            ]
        );
        assert_eq!(d.stages.len(), 3);
        assert_eq!(d.stages[0].from, "base:${CODE_VERSION}");
        assert_eq!(d.stages[0].line, 4);
        assert_eq!(d.stages[0].instructions[0].line, 5);
        assert_eq!(d.stages[0].instructions[0].text, "CMD  /code/run-app");
        assert_eq!(
            kinds(&d, 0),
            [Kind::Cmd(Command::Shell("/code/run-app".into()))]
        );
        assert_eq!(d.stages[1].name.as_deref(), Some("builder"));
        assert_eq!(d.stages[1].platform.as_deref(), Some("$BUILDPLATFORM"));
        assert_eq!(d.stages[1].line, 7);
        assert_eq!(d.stages[2].from, "scratch");
        assert_eq!(d.stages[2].name, None);
        match &d.stages[2].instructions[0].kind {
            Kind::Copy {
                from,
                sources,
                dest,
                add,
                ..
            } => {
                assert_eq!(from.as_deref(), Some("builder"));
                assert_eq!(sources, &["/out"]);
                assert_eq!(dest, "/bin/app");
                assert!(!add);
            }
            k => panic!("{k:?}"),
        }
    }

    #[test]
    fn stage_errors() {
        assert_eq!(
            err("RUN echo\nFROM x\n"),
            "Dockerfile:1: RUN: no build stage in current context"
        );
        assert!(err("").contains("no build stage"));
        assert!(err("ARG A=1\n").contains("no build stage"));
        assert!(err("FROM a AS x\nFROM b AS X\n").contains("duplicate stage name"));
        assert!(err("FROM a AS 1x\n").contains("invalid name"));
        assert!(err("FROM --foo=1 a\n").contains("unknown flag: --foo"));
    }

    #[test]
    fn continuation_text_and_shell_form() {
        let d = p(
            "FROM x\nRUN apt-get update && \\\n    apt-get install x\nRUN a \\\n# comment\n\n  b\n",
        );
        let i = &d.stages[0].instructions;
        assert_eq!(i[0].text, "RUN apt-get update &&     apt-get install x");
        assert_eq!(i[0].line, 2);
        assert_eq!(
            i[0].kind,
            Kind::Run {
                command: Command::Shell("apt-get update &&     apt-get install x".into()),
                heredocs: vec![],
                mounts: vec![],
                network: None,
            }
        );
        assert_eq!(i[1].line, 4);
        assert_eq!(i[1].text, "RUN a   b");
    }

    #[test]
    fn exec_and_shell_forms() {
        let d = p("FROM x\n\
                   CMD [\"echo\", \"hi\"]\n\
                   ENTRYPOINT exec top -b\n\
                   RUN [ -f /x ] && echo\n\
                   RUN ['single', 'quotes']\n\
                   CMD [\"/bin/bash\", \"-c\", \"echo $HOME\"]\n\
                   SHELL [\"powershell\", \"-command\"]\n");
        assert_eq!(
            kinds(&d, 0),
            [
                Kind::Cmd(Command::Exec(vec!["echo".into(), "hi".into()])),
                Kind::Entrypoint(Command::Shell("exec top -b".into())),
                Kind::Run {
                    command: Command::Shell("[ -f /x ] && echo".into()),
                    heredocs: vec![],
                    mounts: vec![],
                    network: None
                },
                Kind::Run {
                    command: Command::Shell("['single', 'quotes']".into()),
                    heredocs: vec![],
                    mounts: vec![],
                    network: None
                },
                Kind::Cmd(Command::Exec(vec![
                    "/bin/bash".into(),
                    "-c".into(),
                    "echo $HOME".into()
                ])),
                Kind::Shell(vec!["powershell".into(), "-command".into()]),
            ]
        );
        assert!(err("FROM x\nSHELL /bin/sh -c\n").starts_with("Dockerfile:2: SHELL:"));
    }

    #[test]
    fn env_and_label_forms() {
        let d = p("FROM x\n\
                   ENV MY_NAME=\"John Doe\" MY_DOG=Rex\\ The\\ Dog \\\n    MY_CAT=fluffy\n\
                   ENV MY_VAR my-value with spaces\n\
                   LABEL \"com.example.vendor\"=\"ACME Incorporated\" version=1.0\n\
                   LABEL description=\"This text illustrates \\\nthat label-values can span multiple lines.\"\n\
                   ENV EMPTY=\"\" ESC='$HOME'\n");
        let k = kinds(&d, 0);
        let pairs = |v: &[(&str, &str)]| -> Vec<(String, String)> {
            v.iter()
                .map(|(a, b)| (a.to_string(), b.to_string()))
                .collect()
        };
        assert_eq!(
            k[0],
            Kind::Env(pairs(&[
                ("MY_NAME", "\"John Doe\""),
                ("MY_DOG", "Rex\\ The\\ Dog"),
                ("MY_CAT", "fluffy")
            ]))
        );
        assert_eq!(
            k[1],
            Kind::Env(pairs(&[("MY_VAR", "my-value with spaces")]))
        );
        assert_eq!(
            k[2],
            Kind::Label(pairs(&[
                ("com.example.vendor", "\"ACME Incorporated\""),
                ("version", "1.0")
            ]))
        );
        assert_eq!(
            k[3],
            Kind::Label(pairs(&[(
                "description",
                "\"This text illustrates that label-values can span multiple lines.\""
            )]))
        );
        assert_eq!(
            k[4],
            Kind::Env(pairs(&[("EMPTY", "\"\""), ("ESC", "'$HOME'")]))
        );
        // Expanding the values gives docker's result.
        let none = |_: &str| None;
        let v = |i: usize, j: usize| match &k[i] {
            Kind::Env(p) | Kind::Label(p) => crate::expand::expand(&p[j].1, '\\', &none).unwrap(),
            _ => unreachable!(),
        };
        assert_eq!(v(0, 0), "John Doe");
        assert_eq!(v(0, 1), "Rex The Dog");
        assert_eq!(v(4, 1), "$HOME");
        assert!(err("FROM x\nENV A=1 B\n").contains("can't find ="));
        assert!(err("FROM x\nENV ONLYKEY\n").starts_with("Dockerfile:2: ENV: must have two"));
    }

    #[test]
    fn heredocs() {
        let d = p("# syntax=docker/dockerfile:1\n\
                   FROM debian\n\
                   RUN <<EOT bash\n  set -ex\n  apt-get update\nEOT\n\
                   RUN <<-'EOF'\n\techo $HOME\n\t\tx\nEOF\n\
                   COPY <<EOF1 <<\"EOF2\" /dst/\nhello\nEOF1\n$x\nEOF2\n\
                   RUN echo after\n");
        let k = kinds(&d, 0);
        assert_eq!(
            k[0],
            Kind::Run {
                command: Command::Shell("<<EOT bash".into()),
                heredocs: vec![HereDoc {
                    body: "  set -ex\n  apt-get update\n".into(),
                    expand: true,
                    name: "EOT".into(),
                }],
                mounts: vec![],
                network: None
            }
        );
        assert_eq!(d.stages[0].instructions[0].text, "RUN <<EOT bash");
        match &k[1] {
            Kind::Run { heredocs, .. } => {
                assert_eq!(
                    heredocs,
                    &[HereDoc {
                        body: "echo $HOME\nx\n".into(),
                        expand: false,
                        name: "EOF".into(),
                    }]
                );
            }
            k => panic!("{k:?}"),
        }
        match &k[2] {
            Kind::Copy {
                heredocs,
                sources,
                dest,
                ..
            } => {
                assert!(sources.is_empty());
                assert_eq!(dest, "/dst/");
                assert_eq!(
                    heredocs,
                    &[
                        HereDoc {
                            body: "hello\n".into(),
                            expand: true,
                            name: "EOF1".into(),
                        },
                        HereDoc {
                            body: "$x\n".into(),
                            expand: false,
                            name: "EOF2".into(),
                        }
                    ]
                );
            }
            k => panic!("{k:?}"),
        }
        assert_eq!(d.stages[0].instructions[3].line, 16);
        assert_eq!(d.stages[0].instructions[3].text, "RUN echo after");
    }

    #[test]
    fn escape_directive_backtick() {
        // The reference's Windows example.
        let d = p(
            "# escape=`\n\nFROM microsoft/nanoserver\nCOPY testfile.txt c:\\\nRUN dir c:\\\nRUN echo a `\n  b\n",
        );
        assert_eq!(d.escape, '`');
        let k = kinds(&d, 0);
        match &k[0] {
            Kind::Copy { sources, dest, .. } => {
                assert_eq!(sources, &["testfile.txt"]);
                assert_eq!(dest, "c:\\");
            }
            k => panic!("{k:?}"),
        }
        assert_eq!(d.stages[0].instructions[1].text, "RUN dir c:\\");
        assert_eq!(d.stages[0].instructions[2].text, "RUN echo a   b");
        // Without the directive the backslash continues the line into the RUN.
        let d = p("FROM microsoft/nanoserver\nCOPY testfile.txt c:\\\nRUN dir c:\\\n");
        assert_eq!(d.stages[0].instructions.len(), 1);
    }

    #[test]
    fn healthcheck() {
        let d = p("FROM x\n\
                   HEALTHCHECK NONE\n\
                   HEALTHCHECK --interval=5m --timeout=3s --start-period=1s --start-interval=2s --retries=3 \\\n  CMD curl -f http://localhost/ || exit 1\n\
                   HEALTHCHECK CMD [\"/bin/check\"]\n");
        let k = kinds(&d, 0);
        assert_eq!(k[0], Kind::Healthcheck(None));
        assert_eq!(
            k[1],
            Kind::Healthcheck(Some(Health {
                test: Command::Shell("curl -f http://localhost/ || exit 1".into()),
                interval: Some("5m".into()),
                timeout: Some("3s".into()),
                start_period: Some("1s".into()),
                start_interval: Some("2s".into()),
                retries: Some("3".into()),
            }))
        );
        assert!(
            matches!(&k[2], Kind::Healthcheck(Some(h)) if h.test == Command::Exec(vec!["/bin/check".into()]))
        );
        assert!(err("FROM x\nHEALTHCHECK --bogus=1 CMD true\n").contains("unknown flag: --bogus"));
    }

    #[test]
    fn run_flags() {
        let d = p(
            "FROM x\nRUN --mount=type=cache,target=/root/.cache,id=y --mount=target=/src,ro --network=none make\n",
        );
        assert_eq!(
            kinds(&d, 0)[0],
            Kind::Run {
                command: Command::Shell("make".into()),
                heredocs: vec![],
                mounts: vec![
                    RunMount {
                        kind: "cache".into(),
                        options: vec![
                            ("target".into(), "/root/.cache".into()),
                            ("id".into(), "y".into())
                        ]
                    },
                    RunMount {
                        kind: "bind".into(),
                        options: vec![
                            ("target".into(), "/src".into()),
                            ("ro".into(), String::new())
                        ]
                    },
                ],
                network: Some("none".into()),
            }
        );
        assert!(err("FROM x\nRUN --security=insecure x\n").contains("unknown flag: --security"));
        assert!(err("FROM x\nRUN --mount=type=nfs x\n").contains("unsupported mount type"));
    }

    #[test]
    fn copy_and_add() {
        let d = p(
            "FROM x\nCOPY --chown=55:mygroup --chmod=644 --link files* /somedir/\nADD [\"a b\", \"/c d/\"]\nCOPY --link=false a b\n",
        );
        let k = kinds(&d, 0);
        assert_eq!(
            k[0],
            Kind::Copy {
                add: false,
                from: None,
                chown: Some("55:mygroup".into()),
                chmod: Some("644".into()),
                link: true,
                sources: vec!["files*".into()],
                heredocs: vec![],
                dest: "/somedir/".into()
            }
        );
        assert!(
            matches!(&k[1], Kind::Copy { add: true, sources, dest, .. } if sources == &["a b"] && dest == "/c d/")
        );
        assert!(matches!(&k[2], Kind::Copy { link: false, .. }));
        assert_eq!(
            err("FROM x\n\nCOPY onlyone\n"),
            "Dockerfile:3: COPY: requires at least two arguments"
        );
        assert_eq!(
            err("FROM x\nCOPY --parents a b\n"),
            "Dockerfile:2: COPY: unknown flag: --parents"
        );
    }

    #[test]
    fn other_instructions() {
        let d = p(
            "FROM x\nEXPOSE 80/tcp 53/udp\nVOLUME [\"/data\"]\nVOLUME /var/log /var/db\nWORKDIR /a b\nUSER app:app\nSTOPSIGNAL SIGKILL\nMAINTAINER Jane <j@x>\nONBUILD ADD . /app/src\nARG V=1 W\n",
        );
        assert_eq!(
            kinds(&d, 0),
            [
                Kind::Expose(vec!["80/tcp".into(), "53/udp".into()]),
                Kind::Volume(vec!["/data".into()]),
                Kind::Volume(vec!["/var/log".into(), "/var/db".into()]),
                Kind::Workdir("/a b".into()),
                Kind::User("app:app".into()),
                Kind::StopSignal("SIGKILL".into()),
                Kind::Maintainer("Jane <j@x>".into()),
                Kind::OnBuild("ADD . /app/src".into()),
                Kind::Arg(vec![
                    ArgDecl {
                        name: "V".into(),
                        default: Some("1".into())
                    },
                    ArgDecl {
                        name: "W".into(),
                        default: None
                    }
                ]),
            ]
        );
        assert!(err("FROM x\nONBUILD FROM y\n").contains("isn't allowed as an ONBUILD trigger"));
    }

    #[test]
    fn unknown_instruction_and_missing_args() {
        assert_eq!(
            err("FROM x\nRUN a\n# c\nFOO bar\n"),
            "Dockerfile:4: FOO: unknown instruction"
        );
        assert_eq!(
            err("FROM x\nRUN a \\\n  b\nfoo bar\n"),
            "Dockerfile:4: FOO: unknown instruction"
        );
        assert!(err("FROM x\nEXPOSE\n").starts_with("Dockerfile:2: EXPOSE: "));
        assert!(err("FROM x\nENV\n").starts_with("Dockerfile:2: ENV: "));
        assert!(err("FROM x\nWORKDIR\n").starts_with("Dockerfile:2: WORKDIR: "));
        assert!(err("FROM\n").starts_with("Dockerfile:1: FROM: "));
        assert!(
            err("FROM x\nRUN <<EOF\nno end\n")
                .starts_with("Dockerfile:2: RUN: expected end of here-document")
        );
    }

    #[test]
    fn word_splitting() {
        assert_eq!(
            split_words("a=\"b c\" d='e f' g\\ h", '\\'),
            ["a=\"b c\"", "d='e f'", "g\\ h"]
        );
        assert_eq!(split_words("  x   y  ", '\\'), ["x", "y"]);
        assert_eq!(split_words("\"\"", '\\'), ["\"\""]);
        assert_eq!(split_words("a\\", '\\'), ["a"]);
    }

    #[test]
    fn bom_and_crlf() {
        let d = p("\u{feff}FROM x\r\nRUN a \\\r\n b\r\nCMD c\r\n");
        assert_eq!(d.stages[0].instructions[0].text, "RUN a  b");
        assert_eq!(d.stages[0].instructions[1].line, 4);
    }
}
