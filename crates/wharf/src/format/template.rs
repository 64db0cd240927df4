//! Go's `text/template` language, as docker and podman users write it in `--format`, over
//! JSON values: `{{.State.Pid}}`, `{{json .Config}}`, `{{range .Mounts}}...{{end}}`,
//! `{{if eq .State.Status "running"}}...{{else}}...{{end}}`, `{{index .Labels "k"}}`,
//! `{{$v := ...}}`, `{{- trim -}}`, pipelines and docker's extra functions (json, join,
//! split, upper, lower, title, pad, truncate).
//!
//! Why written here: the one Rust port of Go templates (gtmpl) prints lists and maps with
//! Rust's debug syntax and ranges over maps in hash order, where scripts written for
//! docker expect Go's `[a b]`, `map[k:v]` and sorted keys. Values print as Go's `%v` would
//! print the structs docker serializes, and a field a value does not have is an error
//! naming it, as Go's is for a struct.

use std::fmt::Write as _;

use serde_json::Value;

/// A parsed template.
#[derive(Debug)]
pub struct Template {
    nodes: Vec<Node>,
}

#[derive(Debug)]
enum Node {
    Text(String),
    Action(Pipe),
    If(Vec<(Pipe, Vec<Node>)>, Vec<Node>),
    Range(Pipe, Vec<Node>, Vec<Node>),
    With(Pipe, Vec<Node>, Vec<Node>),
}

/// `$a, $b := cmd | cmd`.
#[derive(Debug)]
struct Pipe {
    decl: Vec<String>,
    cmds: Vec<Vec<Arg>>,
}

#[derive(Debug)]
enum Arg {
    /// `.A.B` (empty: `.`) on the current value.
    Field(Vec<String>),
    /// `$x.A.B` (`$` alone is the top value).
    Var(String, Vec<String>),
    /// `(pipeline).A.B`.
    Sub(Box<Pipe>, Vec<String>),
    Lit(Value),
    Func(String),
}

#[derive(Debug, Clone, PartialEq)]
enum Tok {
    Field(Vec<String>),
    Var(String, Vec<String>),
    Lit(Value),
    Ident(String),
    Pipe,
    Open,
    Close(Vec<String>),
    Declare,
    Assign,
    Comma,
}

/// An error with where it happened, in Go's words where they fit.
#[derive(Debug, thiserror::Error)]
#[error("template: {0}")]
pub struct Error(String);

fn err<T>(msg: impl Into<String>) -> Result<T, Error> {
    Err(Error(msg.into()))
}

impl Template {
    /// Parse `src`.
    pub fn parse(src: &str) -> Result<Template, Error> {
        let pieces = split_actions(src)?;
        let mut it = pieces.into_iter().peekable();
        match parse_list(&mut it)? {
            (nodes, Terminator::Eof) => Ok(Template { nodes }),
            (_, Terminator::End) => err("unexpected {{end}}"),
            (_, _) => err("unexpected {{else}}"),
        }
    }

    /// Render against `data`.
    pub fn render(&self, data: &Value) -> Result<String, Error> {
        let mut out = String::new();
        let mut scope = Scope {
            vars: vec![("$".to_string(), data.clone())],
        };
        exec_list(&self.nodes, data, &mut scope, &mut out)?;
        Ok(out)
    }
}

// ---- lexing ----

enum Piece {
    Text(String),
    Action(Vec<Tok>),
}

/// Split into text and actions (tokens), applying `{{-` and `-}}` trimming.
fn split_actions(src: &str) -> Result<Vec<Piece>, Error> {
    let mut pieces = Vec::new();
    let mut rest = src;
    let mut trim_next = false;
    while !rest.is_empty() {
        let Some(open) = rest.find("{{") else {
            let t = if trim_next { rest.trim_start() } else { rest };
            pieces.push(Piece::Text(t.to_string()));
            break;
        };
        let mut text = &rest[..open];
        if trim_next {
            text = text.trim_start();
        }
        let mut inner = &rest[open + 2..];
        if inner.starts_with("- ") || inner.starts_with("-\t") || inner.starts_with("-\n") {
            text = text.trim_end();
            inner = &inner[1..];
        }
        if !text.is_empty() {
            pieces.push(Piece::Text(text.to_string()));
        }
        let (toks, used, trim) = lex_action(inner)?;
        trim_next = trim;
        if let Some(toks) = toks {
            pieces.push(Piece::Action(toks));
        }
        rest = &inner[used..];
    }
    Ok(pieces)
}

/// Lex one action's body up to and including `}}`: its tokens (None for a comment), the
/// bytes used and whether it ended with `-}}`.
fn lex_action(s: &str) -> Result<(Option<Vec<Tok>>, usize, bool), Error> {
    let b = s.as_bytes();
    let mut i = 0;
    let mut toks = Vec::new();
    let skip_ws = |i: &mut usize| {
        while *i < b.len() && b[*i].is_ascii_whitespace() {
            *i += 1;
        }
    };
    skip_ws(&mut i);
    if s[i..].starts_with("/*") {
        let Some(end) = s[i..].find("*/") else {
            return err("unclosed comment");
        };
        i += end + 2;
        skip_ws(&mut i);
        let trim = s[i..].starts_with("-}}");
        let close = if trim { i + 3 } else { i + 2 };
        if !s[i..].starts_with("}}") && !trim {
            return err("comment ends before closing delimiter");
        }
        return Ok((None, close, trim));
    }
    loop {
        skip_ws(&mut i);
        if i >= b.len() {
            return err("unclosed action");
        }
        let rest = &s[i..];
        if rest.starts_with("}}") {
            return Ok((Some(toks), i + 2, false));
        }
        if rest.starts_with("-}}") && i > 0 && b[i - 1].is_ascii_whitespace() {
            return Ok((Some(toks), i + 3, true));
        }
        let c = b[i];
        match c {
            b'|' => {
                toks.push(Tok::Pipe);
                i += 1;
            }
            b'(' => {
                toks.push(Tok::Open);
                i += 1;
            }
            b')' => {
                i += 1;
                let (fields, used) = lex_fields(&s[i..]);
                i += used;
                toks.push(Tok::Close(fields));
            }
            b',' => {
                toks.push(Tok::Comma);
                i += 1;
            }
            b':' if rest.starts_with(":=") => {
                toks.push(Tok::Declare);
                i += 2;
            }
            b'=' => {
                toks.push(Tok::Assign);
                i += 1;
            }
            b'"' => {
                let (v, used) = lex_quoted(rest)?;
                toks.push(Tok::Lit(Value::String(v)));
                i += used;
            }
            b'`' => {
                let Some(end) = rest[1..].find('`') else {
                    return err("unterminated raw quoted string");
                };
                toks.push(Tok::Lit(Value::String(rest[1..1 + end].to_string())));
                i += end + 2;
            }
            b'.' => {
                let (fields, used) = lex_fields(rest);
                toks.push(Tok::Field(fields));
                i += used.max(1);
            }
            b'$' => {
                let name_len = rest[1..]
                    .find(|c: char| !(c.is_alphanumeric() || c == '_'))
                    .unwrap_or(rest.len() - 1);
                let name = rest[..1 + name_len].to_string();
                i += 1 + name_len;
                let (fields, used) = lex_fields(&s[i..]);
                i += used;
                toks.push(Tok::Var(name, fields));
            }
            b'-' | b'+' | b'0'..=b'9' => {
                let len = rest[1..]
                    .find(|c: char| !(c.is_ascii_alphanumeric() || c == '.' || c == '_'))
                    .map_or(rest.len(), |n| n + 1);
                let word = &rest[..len];
                let v = if let Ok(n) = word.parse::<i64>() {
                    Value::from(n)
                } else if let Ok(f) = word.parse::<f64>() {
                    Value::from(f)
                } else {
                    return err(format!("bad number syntax: {word:?}"));
                };
                toks.push(Tok::Lit(v));
                i += len;
            }
            c if c.is_ascii_alphabetic() || c == b'_' => {
                let len = rest
                    .find(|c: char| !(c.is_alphanumeric() || c == '_'))
                    .unwrap_or(rest.len());
                let word = &rest[..len];
                toks.push(match word {
                    "true" => Tok::Lit(Value::Bool(true)),
                    "false" => Tok::Lit(Value::Bool(false)),
                    "nil" => Tok::Lit(Value::Null),
                    _ => Tok::Ident(word.to_string()),
                });
                i += len;
            }
            _ => {
                return err(format!(
                    "unexpected {:?} in command",
                    rest.chars().next().unwrap_or(' ')
                ));
            }
        }
    }
}

/// `.A.B` at the start of `s` (after `.`, `$x` or `)`): the field names and bytes used.
fn lex_fields(s: &str) -> (Vec<String>, usize) {
    let mut fields = Vec::new();
    let mut i = 0;
    while s[i..].starts_with('.') {
        let name_len = s[i + 1..]
            .find(|c: char| !(c.is_alphanumeric() || c == '_'))
            .unwrap_or(s.len() - i - 1);
        if name_len == 0 {
            // `.` alone: the value itself (only as the first thing).
            if fields.is_empty() && i == 0 {
                return (fields, 1);
            }
            break;
        }
        fields.push(s[i + 1..i + 1 + name_len].to_string());
        i += 1 + name_len;
    }
    (fields, i)
}

fn lex_quoted(s: &str) -> Result<(String, usize), Error> {
    let mut out = String::new();
    let mut chars = s.char_indices().skip(1);
    while let Some((i, c)) = chars.next() {
        match c {
            '"' => return Ok((out, i + 1)),
            '\\' => match chars.next().map(|(_, c)| c) {
                Some('n') => out.push('\n'),
                Some('t') => out.push('\t'),
                Some('r') => out.push('\r'),
                Some('\\') => out.push('\\'),
                Some('"') => out.push('"'),
                Some(c) => return err(format!("unknown escape sequence \\{c}")),
                None => break,
            },
            '\n' => break,
            c => out.push(c),
        }
    }
    err("unterminated quoted string")
}

// ---- parsing ----

type Pieces = std::iter::Peekable<std::vec::IntoIter<Piece>>;

/// What ended a list of nodes.
enum Terminator {
    /// The end of the template.
    Eof,
    /// `{{end}}`.
    End,
    /// `{{else}}`.
    Else,
    /// `{{else if P}}` / `{{else with P}}`: the keyword and P's tokens.
    ElseChain(String, Vec<Tok>),
}

/// Parse nodes until the end of the template, `{{end}}` or `{{else ...}}`.
fn parse_list(it: &mut Pieces) -> Result<(Vec<Node>, Terminator), Error> {
    let mut nodes = Vec::new();
    while let Some(p) = it.next() {
        let toks = match p {
            Piece::Text(t) => {
                nodes.push(Node::Text(t));
                continue;
            }
            Piece::Action(toks) => toks,
        };
        let keyword = match toks.first() {
            Some(Tok::Ident(k)) => k.as_str(),
            _ => "",
        };
        match keyword {
            "end" => return Ok((nodes, Terminator::End)),
            "else" => {
                return Ok((
                    nodes,
                    match toks.get(1) {
                        Some(Tok::Ident(k)) if k == "if" || k == "with" => {
                            Terminator::ElseChain(k.clone(), toks[2..].to_vec())
                        }
                        _ => Terminator::Else,
                    },
                ));
            }
            "if" | "with" | "range" => {
                nodes.push(parse_block(keyword, &toks[1..], it)?);
            }
            "define" | "template" | "block" | "break" | "continue" => {
                return err(format!("{keyword} is not supported in --format"));
            }
            _ => nodes.push(Node::Action(parse_pipe(&toks)?)),
        }
    }
    Ok((nodes, Terminator::Eof))
}

fn parse_block(keyword: &str, toks: &[Tok], it: &mut Pieces) -> Result<Node, Error> {
    let pipe = parse_pipe(toks)?;
    if pipe.cmds.is_empty() {
        return err(format!("missing value for {keyword}"));
    }
    let (body, end) = parse_list(it)?;
    let else_nodes = match end {
        Terminator::End => Vec::new(),
        Terminator::Else => match parse_list(it)? {
            (nodes, Terminator::End) => nodes,
            _ => return err(format!("{keyword}: expected end after else")),
        },
        // `else if`/`else with` is a block nested in the else branch that ends with the
        // outer block's {{end}}.
        Terminator::ElseChain(kind, toks) if kind == keyword => {
            vec![parse_block(&kind, &toks, it)?]
        }
        Terminator::ElseChain(kind, _) => {
            return err(format!("{keyword}: else {kind} is not allowed here"));
        }
        Terminator::Eof => return err(format!("unexpected EOF: {keyword} without end")),
    };
    Ok(match keyword {
        "if" => match else_nodes.as_slice() {
            [Node::If(..)] => {
                let Some(Node::If(mut branches, else_)) = else_nodes.into_iter().next() else {
                    unreachable!("matched just above")
                };
                branches.insert(0, (pipe, body));
                Node::If(branches, else_)
            }
            _ => Node::If(vec![(pipe, body)], else_nodes),
        },
        "with" => Node::With(pipe, body, else_nodes),
        _ => Node::Range(pipe, body, else_nodes),
    })
}

fn parse_pipe(toks: &[Tok]) -> Result<Pipe, Error> {
    let mut toks = toks;
    let mut decl = Vec::new();
    // `$x :=` / `$k, $v :=` (and `$x =`).
    if let Some(pos) = toks
        .iter()
        .position(|t| matches!(t, Tok::Declare | Tok::Assign))
    {
        for t in &toks[..pos] {
            match t {
                Tok::Var(name, f) if f.is_empty() => decl.push(name.clone()),
                Tok::Comma => {}
                _ => return err("bad variable declaration"),
            }
        }
        toks = &toks[pos + 1..];
    }
    let mut cmds = Vec::new();
    let mut i = 0;
    let mut cmd = Vec::new();
    while i < toks.len() {
        match &toks[i] {
            Tok::Pipe => {
                if cmd.is_empty() {
                    return err("missing command before |");
                }
                cmds.push(std::mem::take(&mut cmd));
                i += 1;
            }
            Tok::Open => {
                // Find the matching close.
                let mut depth = 0;
                let mut j = i;
                let close = loop {
                    match toks.get(j) {
                        Some(Tok::Open) => depth += 1,
                        Some(Tok::Close(f)) => {
                            depth -= 1;
                            if depth == 0 {
                                break f.clone();
                            }
                        }
                        None => return err("unclosed left paren"),
                        _ => {}
                    }
                    j += 1;
                };
                cmd.push(Arg::Sub(Box::new(parse_pipe(&toks[i + 1..j])?), close));
                i = j + 1;
            }
            Tok::Close(_) => return err("unexpected right paren"),
            Tok::Field(f) => {
                cmd.push(Arg::Field(f.clone()));
                i += 1;
            }
            Tok::Var(n, f) => {
                cmd.push(Arg::Var(n.clone(), f.clone()));
                i += 1;
            }
            Tok::Lit(v) => {
                cmd.push(Arg::Lit(v.clone()));
                i += 1;
            }
            Tok::Ident(name) => {
                if !is_func(name) {
                    return err(format!("function {name:?} not defined"));
                }
                cmd.push(Arg::Func(name.clone()));
                i += 1;
            }
            Tok::Declare | Tok::Assign | Tok::Comma => return err("unexpected := or ,"),
        }
    }
    if !cmd.is_empty() {
        cmds.push(cmd);
    } else if !cmds.is_empty() {
        return err("missing command after |");
    }
    Ok(Pipe { decl, cmds })
}

const FUNCS: &[&str] = &[
    "and", "or", "not", "len", "index", "print", "printf", "println", "eq", "ne", "lt", "le", "gt",
    "ge", "json", "join", "split", "upper", "lower", "title", "pad", "truncate", "slice",
];

fn is_func(name: &str) -> bool {
    FUNCS.contains(&name)
}

// ---- execution ----

struct Scope {
    vars: Vec<(String, Value)>,
}

impl Scope {
    fn get(&self, name: &str) -> Result<Value, Error> {
        match self.vars.iter().rev().find(|(n, _)| n == name) {
            Some((_, v)) => Ok(v.clone()),
            None => err(format!("undefined variable: {name}")),
        }
    }
}

fn exec_list(
    nodes: &[Node],
    dot: &Value,
    scope: &mut Scope,
    out: &mut String,
) -> Result<(), Error> {
    // Variables declared in a block end with it.
    let mark = scope.vars.len();
    for n in nodes {
        match n {
            Node::Text(t) => out.push_str(t),
            Node::Action(p) => {
                let v = eval_pipe(p, dot, scope)?;
                if p.decl.is_empty() {
                    out.push_str(&print(&v));
                }
            }
            Node::If(branches, else_) => {
                let mut done = false;
                for (p, body) in branches {
                    if truth(&eval_pipe(p, dot, scope)?) {
                        exec_list(body, dot, scope, out)?;
                        done = true;
                        break;
                    }
                }
                if !done {
                    exec_list(else_, dot, scope, out)?;
                }
            }
            Node::With(p, body, else_) => {
                let v = eval_pipe(p, dot, scope)?;
                if truth(&v) {
                    exec_list(body, &v, scope, out)?;
                } else {
                    exec_list(else_, dot, scope, out)?;
                }
            }
            Node::Range(p, body, else_) => {
                let v = eval_value(p, dot, scope)?;
                let items: Vec<(Value, Value)> = match &v {
                    Value::Array(a) => a
                        .iter()
                        .enumerate()
                        .map(|(i, x)| (Value::from(i), x.clone()))
                        .collect(),
                    Value::Object(m) => {
                        // Go ranges over a map in key order.
                        let mut keys: Vec<_> = m.keys().collect();
                        keys.sort();
                        keys.into_iter()
                            .map(|k| (Value::String(k.clone()), m[k].clone()))
                            .collect()
                    }
                    Value::Null => Vec::new(),
                    Value::Number(n) if n.as_u64().is_some() => (0..n.as_u64().unwrap())
                        .map(|i| (Value::from(i), Value::from(i)))
                        .collect(),
                    other => return err(format!("range can't iterate over {}", print(other))),
                };
                if items.is_empty() {
                    exec_list(else_, dot, scope, out)?;
                }
                for (k, x) in items {
                    let inner = scope.vars.len();
                    match p.decl.as_slice() {
                        [] => {}
                        [v] => scope.vars.push((v.clone(), x.clone())),
                        [kn, vn, ..] => {
                            scope.vars.push((kn.clone(), k));
                            scope.vars.push((vn.clone(), x.clone()));
                        }
                    }
                    exec_list(body, &x, scope, out)?;
                    scope.vars.truncate(inner);
                }
            }
        }
    }
    // Keep `{{$x := ...}}` declared at this level visible to later siblings only.
    scope.vars.truncate(mark.max(1));
    Ok(())
}

/// A range's pipe without binding its declared variables.
fn eval_value(p: &Pipe, dot: &Value, scope: &mut Scope) -> Result<Value, Error> {
    let mut v = None;
    for cmd in &p.cmds {
        v = Some(eval_cmd(cmd, dot, scope, v)?);
    }
    Ok(v.unwrap_or(Value::Null))
}

fn eval_pipe(p: &Pipe, dot: &Value, scope: &mut Scope) -> Result<Value, Error> {
    let v = eval_value(p, dot, scope)?;
    for name in &p.decl {
        if let Some(slot) = scope.vars.iter_mut().rev().find(|(n, _)| n == name) {
            slot.1 = v.clone();
        }
        if !scope.vars.iter().any(|(n, _)| n == name) {
            scope.vars.push((name.clone(), v.clone()));
        }
    }
    Ok(v)
}

fn field_chain(mut v: Value, fields: &[String], args: &[Value]) -> Result<Value, Error> {
    for (i, f) in fields.iter().enumerate() {
        let last = i + 1 == fields.len();
        v = match v {
            Value::Object(mut m) => match m.remove(f) {
                // A map-valued field given an argument is looked up by it: docker's
                // `{{.Label "key"}}` on ps rows.
                Some(Value::Object(inner)) if last && args.len() == 1 => {
                    let key = print(&args[0]);
                    inner
                        .get(&key)
                        .cloned()
                        .unwrap_or(Value::String(String::new()))
                }
                Some(x) => x,
                None => return err(format!("can't evaluate field {f}")),
            },
            Value::Null => return err(format!("nil pointer evaluating .{f}")),
            other => {
                return err(format!("can't evaluate field {f} in {}", type_name(&other)));
            }
        };
    }
    Ok(v)
}

fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "nil",
        Value::Bool(_) => "bool",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "list",
        Value::Object(_) => "map",
    }
}

fn eval_arg(a: &Arg, dot: &Value, scope: &mut Scope) -> Result<Value, Error> {
    match a {
        Arg::Field(f) => field_chain(dot.clone(), f, &[]),
        Arg::Var(n, f) => field_chain(scope.get(n)?, f, &[]),
        Arg::Sub(p, f) => field_chain(eval_value(p, dot, scope)?, f, &[]),
        Arg::Lit(v) => Ok(v.clone()),
        Arg::Func(name) => call(name, &[]),
    }
}

/// One command: a function with its arguments (and the previous command's value as the
/// last one), or a single value.
fn eval_cmd(
    cmd: &[Arg],
    dot: &Value,
    scope: &mut Scope,
    piped: Option<Value>,
) -> Result<Value, Error> {
    let mut args = Vec::new();
    for a in &cmd[1..] {
        args.push(eval_arg(a, dot, scope)?);
    }
    args.extend(piped);
    match &cmd[0] {
        Arg::Func(name) => call(name, &args),
        Arg::Field(f) if !args.is_empty() => field_chain(dot.clone(), f, &args),
        first if args.is_empty() => eval_arg(first, dot, scope),
        _ => err("can't give argument to non-function"),
    }
}

fn truth(v: &Value) -> bool {
    match v {
        Value::Null => false,
        Value::Bool(b) => *b,
        Value::Number(n) => n.as_f64() != Some(0.0),
        Value::String(s) => !s.is_empty(),
        Value::Array(a) => !a.is_empty(),
        Value::Object(m) => !m.is_empty(),
    }
}

/// Go's `%v`.
pub fn print(v: &Value) -> String {
    match v {
        Value::Null => "<nil>".into(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => match (n.as_i64(), n.as_u64()) {
            (Some(i), _) => i.to_string(),
            (_, Some(u)) => u.to_string(),
            _ => {
                let f = n.as_f64().unwrap_or(0.0);
                if f.fract() == 0.0 && f.abs() < 1e21 {
                    format!("{f:.0}")
                } else {
                    f.to_string()
                }
            }
        },
        Value::String(s) => s.clone(),
        Value::Array(a) => format!("[{}]", a.iter().map(print).collect::<Vec<_>>().join(" ")),
        Value::Object(m) => {
            let mut keys: Vec<_> = m.keys().collect();
            keys.sort();
            let items: Vec<String> = keys
                .into_iter()
                .map(|k| format!("{k}:{}", print(&m[k])))
                .collect();
            format!("map[{}]", items.join(" "))
        }
    }
}

fn want(name: &str, args: &[Value], n: usize) -> Result<(), Error> {
    if args.len() != n {
        return err(format!(
            "wrong number of args for {name}: want {n} got {}",
            args.len()
        ));
    }
    Ok(())
}

fn str_arg(name: &str, v: &Value) -> Result<String, Error> {
    match v {
        Value::String(s) => Ok(s.clone()),
        other => err(format!("{name}: {} is not a string", print(other))),
    }
}

fn int_arg(name: &str, v: &Value) -> Result<i64, Error> {
    v.as_i64()
        .or_else(|| v.as_f64().map(|f| f as i64))
        .map_or_else(|| err(format!("{name}: {} is not a number", print(v))), Ok)
}

fn compare(name: &str, a: &Value, b: &Value) -> Result<std::cmp::Ordering, Error> {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => Ok(x
            .as_f64()
            .unwrap_or(0.0)
            .total_cmp(&y.as_f64().unwrap_or(0.0))),
        (Value::String(x), Value::String(y)) => Ok(x.cmp(y)),
        _ => err(format!(
            "{name}: incompatible types for comparison: {} and {}",
            type_name(a),
            type_name(b)
        )),
    }
}

fn equal(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => x.as_f64() == y.as_f64(),
        _ => a == b,
    }
}

fn call(name: &str, args: &[Value]) -> Result<Value, Error> {
    use std::cmp::Ordering::*;
    Ok(match name {
        "and" => args
            .iter()
            .find(|v| !truth(v))
            .or(args.last())
            .cloned()
            .unwrap_or(Value::Null),
        "or" => args
            .iter()
            .find(|v| truth(v))
            .or(args.last())
            .cloned()
            .unwrap_or(Value::Null),
        "not" => {
            want(name, args, 1)?;
            Value::Bool(!truth(&args[0]))
        }
        "len" => {
            want(name, args, 1)?;
            Value::from(match &args[0] {
                Value::String(s) => s.len(),
                Value::Array(a) => a.len(),
                Value::Object(m) => m.len(),
                other => return err(format!("len of {}", type_name(other))),
            })
        }
        "index" => {
            let Some((first, keys)) = args.split_first() else {
                return err("index of nothing");
            };
            let mut v = first.clone();
            for k in keys {
                v = match (&v, k) {
                    (Value::Object(m), k) => m.get(&print(k)).cloned().unwrap_or(Value::Null),
                    (Value::Array(a), k) => {
                        let i = int_arg(name, k)?;
                        match usize::try_from(i).ok().and_then(|i| a.get(i)) {
                            Some(x) => x.clone(),
                            None => return err(format!("index out of range: {i}")),
                        }
                    }
                    (Value::Null, _) => Value::Null,
                    (other, _) => {
                        return err(format!("can't index item of type {}", type_name(other)));
                    }
                };
            }
            v
        }
        "print" => {
            // Go adds spaces between operands when neither is a string.
            let mut s = String::new();
            for (i, a) in args.iter().enumerate() {
                if i > 0 && !a.is_string() && !args[i - 1].is_string() {
                    s.push(' ');
                }
                s.push_str(&print(a));
            }
            Value::String(s)
        }
        "println" => Value::String(format!(
            "{}\n",
            args.iter().map(print).collect::<Vec<_>>().join(" ")
        )),
        "printf" => {
            let Some((f, rest)) = args.split_first() else {
                return err("printf: missing format");
            };
            Value::String(printf(&str_arg(name, f)?, rest))
        }
        "eq" => {
            if args.len() < 2 {
                return err("eq: missing argument for comparison");
            }
            Value::Bool(args[1..].iter().any(|b| equal(&args[0], b)))
        }
        "ne" => {
            want(name, args, 2)?;
            Value::Bool(!equal(&args[0], &args[1]))
        }
        "lt" | "le" | "gt" | "ge" => {
            want(name, args, 2)?;
            let o = compare(name, &args[0], &args[1])?;
            Value::Bool(match name {
                "lt" => o == Less,
                "le" => o != Greater,
                "gt" => o == Greater,
                _ => o != Less,
            })
        }
        "json" => {
            want(name, args, 1)?;
            Value::String(serde_json::to_string(&args[0]).unwrap_or_default())
        }
        "join" => {
            want(name, args, 2)?;
            let sep = str_arg(name, &args[1])?;
            match &args[0] {
                Value::Array(a) => {
                    Value::String(a.iter().map(print).collect::<Vec<_>>().join(&sep))
                }
                Value::Null => Value::String(String::new()),
                other => return err(format!("join: {} is not a list", print(other))),
            }
        }
        "split" => {
            want(name, args, 2)?;
            let s = str_arg(name, &args[0])?;
            let sep = str_arg(name, &args[1])?;
            Value::Array(
                s.split(sep.as_str())
                    .map(|p| Value::String(p.into()))
                    .collect(),
            )
        }
        "upper" => Value::String(print(args.first().unwrap_or(&Value::Null)).to_uppercase()),
        "lower" => Value::String(print(args.first().unwrap_or(&Value::Null)).to_lowercase()),
        "title" => {
            want(name, args, 1)?;
            let s = print(&args[0]);
            let mut out = String::new();
            let mut start = true;
            for c in s.chars() {
                if start {
                    out.extend(c.to_uppercase());
                } else {
                    out.push(c);
                }
                start = c.is_whitespace();
            }
            Value::String(out)
        }
        "pad" => {
            want(name, args, 3)?;
            let left = int_arg(name, &args[1])?.max(0) as usize;
            let right = int_arg(name, &args[2])?.max(0) as usize;
            Value::String(format!(
                "{}{}{}",
                " ".repeat(left),
                print(&args[0]),
                " ".repeat(right)
            ))
        }
        "truncate" => {
            want(name, args, 2)?;
            let n = int_arg(name, &args[1])?.max(0) as usize;
            Value::String(print(&args[0]).chars().take(n).collect())
        }
        "slice" => {
            let Some((first, idx)) = args.split_first() else {
                return err("slice of nothing");
            };
            let ints: Vec<usize> = idx
                .iter()
                .map(|v| int_arg(name, v).map(|i| i.max(0) as usize))
                .collect::<Result<_, _>>()?;
            match first {
                Value::String(s) => {
                    let lo = ints.first().copied().unwrap_or(0).min(s.len());
                    let hi = ints.get(1).copied().unwrap_or(s.len()).clamp(lo, s.len());
                    Value::String(s.get(lo..hi).unwrap_or_default().to_string())
                }
                Value::Array(a) => {
                    let lo = ints.first().copied().unwrap_or(0).min(a.len());
                    let hi = ints.get(1).copied().unwrap_or(a.len()).clamp(lo, a.len());
                    Value::Array(a[lo..hi].to_vec())
                }
                other => return err(format!("can't slice item of type {}", type_name(other))),
            }
        }
        _ => return err(format!("function {name:?} not defined")),
    })
}

/// Go's printf for the verbs scripts use: %v %s %d %q %t %f %x %% with flags `-`/`0`,
/// width and precision.
fn printf(f: &str, args: &[Value]) -> String {
    let mut out = String::new();
    let mut args = args.iter();
    let mut chars = f.chars().peekable();
    while let Some(c) = chars.next() {
        if c != '%' {
            out.push(c);
            continue;
        }
        let mut left = false;
        let mut zero = false;
        while let Some(&fl) = chars.peek() {
            match fl {
                '-' => left = true,
                '0' => zero = true,
                '+' | ' ' | '#' => {}
                _ => break,
            }
            chars.next();
        }
        let mut width = String::new();
        while let Some(&d) = chars.peek().filter(|d| d.is_ascii_digit()) {
            width.push(d);
            chars.next();
        }
        let mut prec = None;
        if chars.peek() == Some(&'.') {
            chars.next();
            let mut p = String::new();
            while let Some(&d) = chars.peek().filter(|d| d.is_ascii_digit()) {
                p.push(d);
                chars.next();
            }
            prec = Some(p.parse::<usize>().unwrap_or(0));
        }
        let Some(verb) = chars.next() else {
            out.push_str("%!(NOVERB)");
            break;
        };
        if verb == '%' {
            out.push('%');
            continue;
        }
        let Some(a) = args.next() else {
            let _ = write!(out, "%!{verb}(MISSING)");
            continue;
        };
        let s = match verb {
            'd' => a
                .as_f64()
                .map_or_else(|| format!("%!d({})", print(a)), |n| (n as i64).to_string()),
            'f' | 'F' => {
                let p = prec.unwrap_or(6);
                a.as_f64()
                    .map_or_else(|| format!("%!f({})", print(a)), |n| format!("{n:.p$}"))
            }
            'q' => serde_json::to_string(&print(a)).unwrap_or_default(),
            'x' => match a {
                Value::Number(n) => format!("{:x}", n.as_i64().unwrap_or(0)),
                other => print(other).bytes().map(|b| format!("{b:02x}")).collect(),
            },
            _ => {
                let s = print(a);
                match prec {
                    Some(p) if verb == 's' || verb == 'v' => s.chars().take(p).collect(),
                    _ => s,
                }
            }
        };
        let w: usize = width.parse().unwrap_or(0);
        let n = s.chars().count();
        if n >= w {
            out.push_str(&s);
        } else if left {
            out.push_str(&s);
            out.push_str(&" ".repeat(w - n));
        } else if zero && matches!(verb, 'd' | 'f') {
            let (sign, digits) = s.strip_prefix('-').map_or(("", s.as_str()), |d| ("-", d));
            out.push_str(sign);
            out.push_str(&"0".repeat(w - n));
            out.push_str(digits);
        } else {
            out.push_str(&" ".repeat(w - n));
            out.push_str(&s);
        }
    }
    for extra in args {
        let _ = write!(out, "%!(EXTRA {})", print(extra));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn render(t: &str, v: &Value) -> String {
        Template::parse(t)
            .unwrap_or_else(|e| panic!("parse {t:?}: {e}"))
            .render(v)
            .unwrap_or_else(|e| panic!("render {t:?}: {e}"))
    }

    fn data() -> Value {
        json!({
            "Name": "web", "Id": "abcdef0123456789",
            "State": {"Status": "running", "Running": true, "Pid": 42, "ExitCode": 0, "Health": null},
            "Config": {"Env": ["A=1", "B=2"], "Labels": {"b": "2", "a": "1"}, "Cmd": null},
            "Mounts": [{"Source": "/x", "Destination": "/a"}, {"Source": "/y", "Destination": "/b"}],
            "Size": 1.5, "Big": 1000000.0,
        })
    }

    #[test]
    fn fields_print_as_go_prints_them() {
        let d = data();
        assert_eq!(
            render("{{.State.Status}} {{.State.Pid}} {{.State.Running}}", &d),
            "running 42 true"
        );
        assert_eq!(render("{{.Config.Env}}", &d), "[A=1 B=2]");
        assert_eq!(render("{{.Config.Labels}}", &d), "map[a:1 b:2]");
        assert_eq!(
            render("{{.Config.Cmd}} {{.Size}} {{.Big}}", &d),
            "<nil> 1.5 1000000"
        );
        assert_eq!(render("{{ . | len }}", &json!([1, 2, 3])), "3");
        assert_eq!(render("{{.}}", &json!("plain")), "plain");
    }

    #[test]
    fn control_flow_variables_and_trimming() {
        let d = data();
        assert_eq!(
            render("{{range .Mounts}}{{.Source}}:{{.Destination}} {{end}}", &d),
            "/x:/a /y:/b "
        );
        assert_eq!(
            render(
                "{{range $k, $v := .Config.Labels}}{{$k}}={{$v}};{{end}}",
                &d
            ),
            "a=1;b=2;"
        );
        assert_eq!(
            render("{{range $i, $e := .Config.Env}}{{$i}}{{$e}}{{end}}", &d),
            "0A=11B=2"
        );
        assert_eq!(
            render("{{range .Config.Cmd}}x{{else}}none{{end}}", &d),
            "none"
        );
        assert_eq!(
            render(
                "{{if eq .State.Status \"exited\"}}E{{else if .State.Running}}R{{else}}?{{end}}",
                &d
            ),
            "R"
        );
        assert_eq!(render("{{with .State}}{{.Pid}}{{end}}", &d), "42");
        assert_eq!(
            render("{{with .State.Health}}h{{else}}no health{{end}}", &d),
            "no health"
        );
        assert_eq!(
            render("{{$n := .Name}}{{range .Mounts}}{{$n}}{{end}}", &d),
            "webweb"
        );
        assert_eq!(
            render("a  {{- .Name -}}  b\n{{/* note */}}c", &d),
            "awebb\nc"
        );
        assert_eq!(
            render("{{range .Config.Env}}{{println .}}{{end}}", &d),
            "A=1\nB=2\n"
        );
        assert_eq!(
            render("{{$.Name}}{{with .State}}{{$.Name}}{{end}}", &d),
            "webweb"
        );
    }

    #[test]
    fn functions_docker_scripts_use() {
        let d = data();
        assert_eq!(render("{{json .Config.Env}}", &d), r#"["A=1","B=2"]"#);
        assert_eq!(render("{{index .Config.Labels \"a\"}}", &d), "1");
        assert_eq!(
            render("{{index .Mounts 1 | json}}", &d),
            r#"{"Destination":"/b","Source":"/y"}"#
        );
        assert_eq!(render("{{join .Config.Env \",\"}}", &d), "A=1,B=2");
        assert_eq!(render("{{split \"a:b\" \":\"}}", &d), "[a b]");
        assert_eq!(
            render("{{upper .Name}} {{.Name | title}} {{truncate .Id 12}}", &d),
            "WEB Web abcdef012345"
        );
        assert_eq!(
            render("{{printf \"%-5s|%3d|%05.1f|%q\" .Name 7 2.25 .Name}}", &d),
            "web  |  7|002.2|\"web\""
        );
        assert_eq!(
            render(
                "{{len .Mounts}} {{not .State.Running}} {{and 1 0}} {{or 0 \"x\"}}",
                &d
            ),
            "2 false 0 x"
        );
        assert_eq!(
            render("{{if and .State.Running (gt .State.Pid 1)}}up{{end}}", &d),
            "up"
        );
        assert_eq!(render("{{(index .Mounts 0).Source}}", &d), "/x");
        assert_eq!(
            render("{{slice .Id 0 6}} {{pad .Name 1 2}}|", &d),
            "abcdef  web  |"
        );
        // docker's ps rows: `.Label "key"` looks a map-valued field up.
        assert_eq!(
            render("{{.Labels \"a\"}}", &json!({"Labels": {"a": "x"}})),
            "x"
        );
    }

    #[test]
    fn mistakes_are_errors_that_say_what() {
        let d = data();
        let e = Template::parse("{{.Nope}}")
            .unwrap()
            .render(&d)
            .unwrap_err();
        assert_eq!(e.to_string(), "template: can't evaluate field Nope");
        let e = Template::parse("{{.State.Health.Status}}")
            .unwrap()
            .render(&d)
            .unwrap_err();
        assert_eq!(e.to_string(), "template: nil pointer evaluating .Status");
        for bad in [
            "{{if .Name}}x",
            "{{end}}",
            "{{nosuch .Name}}",
            "{{.Name",
            "{{\"open}}",
            "{{range}}{{end}}",
        ] {
            assert!(Template::parse(bad).is_err(), "{bad:?} parsed");
        }
    }
}
