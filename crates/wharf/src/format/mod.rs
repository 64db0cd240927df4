//! `--format` for listing and inspecting commands, as docker reads it: `table` (the
//! default columns), `json`, a Go template (`{{.Names}}`), or `table` followed by a
//! template (a header row from the fields' column names, cells aligned).

pub mod template;

use anyhow::{Context, Result};
use serde_json::Value;

pub use template::Template;

/// A parsed `--format`.
pub enum Format {
    /// The command's own table.
    Table,
    /// JSON (each command says whether one document or one per line).
    Json,
    /// A template for each item; `table` asks for a header row and aligned columns.
    Template { template: Template, table: bool },
}

impl Format {
    /// Parse a `--format` value. `\t` and `\n` typed literally (as shells pass them in
    /// single quotes) are a tab and a newline, as in docker.
    pub fn parse(s: &str) -> Result<Format> {
        let trimmed = s.trim();
        match trimmed {
            "" | "table" => return Ok(Format::Table),
            "json" => return Ok(Format::Json),
            _ => {}
        }
        let (table, body) = match trimmed.strip_prefix("table") {
            Some(rest) if rest.starts_with(char::is_whitespace) => (true, rest.trim_start()),
            _ => (false, s),
        };
        let body = body.replace("\\t", "\t").replace("\\n", "\n");
        let template = Template::parse(&body).with_context(|| format!("invalid --format {s:?}"))?;
        Ok(Format::Template { template, table })
    }
}

/// Render `items` with a template: each item's text on a line of its own; with `table`,
/// first a header made by rendering the template against `headers` (field name → column
/// title), and cells separated by tabs aligned as docker's tabwriter does.
pub fn render_items(
    template: &Template,
    table: bool,
    headers: &Value,
    items: &[Value],
) -> Result<String> {
    let mut lines = Vec::new();
    if table {
        lines.push(template.render(headers)?);
    }
    for item in items {
        lines.push(template.render(item)?);
    }
    let mut out = String::new();
    if table {
        out = align(&lines.join("\n"));
    } else {
        for l in lines {
            out.push_str(&l);
            out.push('\n');
        }
    }
    Ok(out)
}

/// JSON (one object per line, as docker prints listings) or a template per row.
pub fn print_rows(
    out: &mut impl std::io::Write,
    fmt: &Format,
    headers: &Value,
    docs: &[Value],
) -> Result<()> {
    match fmt {
        Format::Template { template, table } => {
            write!(out, "{}", render_items(template, *table, headers, docs)?)?
        }
        _ => {
            for d in docs {
                writeln!(out, "{}", serde_json::to_string(d)?)?;
            }
        }
    }
    Ok(())
}

/// Align tab-separated cells in columns (each at least 10 wide with 3 spaces of padding,
/// docker's tabwriter settings); a line's last cell is not padded.
pub fn align(text: &str) -> String {
    let rows: Vec<Vec<&str>> = text.lines().map(|l| l.split('\t').collect()).collect();
    let mut widths: Vec<usize> = Vec::new();
    for r in &rows {
        for (i, c) in r.iter().enumerate().take(r.len().saturating_sub(1)) {
            let w = (c.chars().count() + 3).max(10);
            if widths.len() <= i {
                widths.push(w);
            } else {
                widths[i] = widths[i].max(w);
            }
        }
    }
    let mut out = String::new();
    for r in &rows {
        for (i, c) in r.iter().enumerate() {
            out.push_str(c);
            if i + 1 < r.len() {
                out.push_str(&" ".repeat(widths[i] - c.chars().count()));
            }
        }
        out.push('\n');
    }
    out
}

/// Print inspected documents: a JSON array (the default and `json`), or the template's
/// text for each, a line each, as `docker inspect -f` does.
pub fn print_documents(format: &Format, docs: &[Value]) -> Result<()> {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    match format {
        Format::Template { template, .. } => {
            for d in docs {
                writeln!(out, "{}", template.render(d)?)?;
            }
        }
        Format::Json | Format::Table => writeln!(out, "{}", serde_json::to_string_pretty(docs)?)?,
    }
    Ok(())
}

/// A size as docker prints it (go-units): `digits` significant digits, trailing zeros
/// dropped, in decimal units (`kB`, `MB`, `GB`: image sizes and I/O) or binary ones
/// (`KiB`, `MiB`, `GiB`: memory).
pub fn size(n: u64, binary: bool, digits: usize) -> String {
    let (base, units): (f64, [&str; 5]) = if binary {
        (1024.0, ["B", "KiB", "MiB", "GiB", "TiB"])
    } else {
        (1000.0, ["B", "kB", "MB", "GB", "TB"])
    };
    let mut v = n as f64;
    let mut unit = 0;
    while v >= base && unit + 1 < units.len() {
        v /= base;
        unit += 1;
    }
    let whole = if v >= 1.0 {
        v.log10().floor() as usize + 1
    } else {
        1
    };
    let decimals = digits.saturating_sub(whole);
    let mut text = format!("{v:.decimals$}");
    if text.contains('.') {
        text = text.trim_end_matches('0').trim_end_matches('.').to_string();
    }
    format!("{text}{}", units[unit])
}

pub use wharf_docker::views::docker_time;

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn table_templates_get_a_header_and_aligned_columns() {
        let Format::Template { template, table } =
            Format::parse(r"table {{.ID}}\t{{.Names}}").unwrap()
        else {
            panic!("not a template")
        };
        assert!(table);
        let out = render_items(
            &template,
            table,
            &json!({"ID": "CONTAINER ID", "Names": "NAMES"}),
            &[
                json!({"ID": "abc", "Names": "web"}),
                json!({"ID": "0123456789abcd", "Names": "db"}),
            ],
        )
        .unwrap();
        assert_eq!(
            out,
            "CONTAINER ID     NAMES\nabc              web\n0123456789abcd   db\n"
        );
    }

    #[test]
    fn sizes_read_as_dockers() {
        assert_eq!(size(0, false, 3), "0B");
        assert_eq!(size(2_130_000, false, 3), "2.13MB");
        assert_eq!(size(250_600_000, false, 3), "251MB");
        assert_eq!(size(19_200_000, false, 3), "19.2MB");
        assert_eq!(size(1_050, false, 3), "1.05kB");
        assert_eq!(size(1_426_063, true, 4), "1.36MiB");
        assert_eq!(size(25_275_000_000, true, 4), "23.54GiB");
        assert_eq!(size(2 << 30, true, 4), "2GiB");
    }

    #[test]
    fn plain_json_and_templates_are_told_apart() {
        assert!(matches!(Format::parse("table").unwrap(), Format::Table));
        assert!(matches!(Format::parse("json").unwrap(), Format::Json));
        assert!(matches!(
            Format::parse("{{.Names}}").unwrap(),
            Format::Template { table: false, .. }
        ));
        let e = Format::parse("{{.Names").err().unwrap();
        assert_eq!(
            format!("{e:#}"),
            "invalid --format \"{{.Names\": template: unclosed action"
        );
    }
}
