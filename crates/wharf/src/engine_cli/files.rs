//! `wharf cp`, `export` and `diff`: docker's rules for which side is which and where a
//! copy lands, over the engine's tar streams of a container's files.

use std::fs::File;
use std::io::{Seek, Write};
use std::os::fd::AsFd;
use std::path::Path;

use anyhow::{Context, Result, bail};
use wharf_engine::Engine;
use wharf_engine::files::PathKind;
use wharf_engine::files::tree_tar::{self, Owners, Walk};

/// One side of a `cp`.
enum Side<'a> {
    /// A tar stream on stdin or stdout.
    Stream,
    /// A path on the host.
    Host(&'a str),
    /// A path in a container.
    Container(&'a str, &'a str),
}

/// docker's reading: `-` is a stream; a path starting with `/` or `.` is the host's;
/// `NAME:PATH` is a container's; anything else the host's.
fn side(s: &str) -> Side<'_> {
    if s == "-" {
        return Side::Stream;
    }
    if s.starts_with('/') || s.starts_with('.') {
        return Side::Host(s);
    }
    match s.split_once(':') {
        Some((c, p)) if !c.is_empty() && !c.contains('/') => {
            Side::Container(c, if p.is_empty() { "/" } else { p })
        }
        _ => Side::Host(s),
    }
}

/// The last name of a path (`/a/b/` → `b`), and whether it asks for a directory's
/// contents (`/a/b/.`).
fn base_of(p: &str) -> (String, bool) {
    if p.ends_with("/.") || p == "." {
        return (String::new(), true);
    }
    let name = Path::new(p.trim_end_matches('/'))
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    (name, false)
}

/// `wharf cp`.
pub fn cp(engine: &Engine, src: &str, dest: &str, archive: bool) -> Result<i32> {
    match (side(src), side(dest)) {
        (Side::Container(c, p), Side::Stream) => {
            let (name, _) = base_of(p);
            engine.copy_out(c, p, &name, std::io::stdout().lock())?;
        }
        (Side::Container(c, p), Side::Host(h)) => copy_out(engine, c, p, h)?,
        (Side::Stream, Side::Container(c, p)) => {
            match engine.path_kind(c, p)? {
                Some(PathKind::Dir) => {}
                _ => bail!(
                    "{c}:{p} is not a directory in the container (a tar stream goes into one)"
                ),
            }
            engine.copy_in(c, p, std::io::stdin().lock(), archive)?;
        }
        (Side::Host(h), Side::Container(c, p)) => copy_in(engine, h, c, p, archive)?,
        (Side::Container(..), Side::Container(..)) => {
            bail!("copying between containers is not supported: copy to the host first")
        }
        _ => bail!("one side of cp must be CONTAINER:PATH"),
    }
    Ok(0)
}

/// A temporary file for a tar stream between the two sides.
fn spool() -> Result<File> {
    tempfile::tempfile().context("making a temporary file for the copy")
}

fn copy_out(engine: &Engine, c: &str, p: &str, host: &str) -> Result<()> {
    let Some(kind) = engine.path_kind(c, p)? else {
        bail!("no such file in container {c}: {p}");
    };
    let (src_name, contents) = base_of(p);
    let h = Path::new(host);
    let host_kind = std::fs::metadata(h).ok().map(|m| m.is_dir());
    // Where to extract, and the name the copy takes there ("" = a directory's contents).
    let (dir, name) = match (kind, host_kind, contents) {
        (PathKind::Dir, Some(true), true) => (h.to_path_buf(), String::new()),
        (PathKind::Dir, None, true) => {
            std::fs::create_dir(h).with_context(|| format!("creating {host}"))?;
            (h.to_path_buf(), String::new())
        }
        (_, Some(true), _) => (h.to_path_buf(), src_name),
        (PathKind::Dir, Some(false), _) => {
            bail!("cannot copy directory {c}:{p} onto file {host}")
        }
        (_, _, _) => {
            if host.ends_with('/') {
                bail!("{host} is not a directory");
            }
            let parent = h
                .parent()
                .filter(|p| !p.as_os_str().is_empty())
                .unwrap_or(Path::new("."));
            let name = h.file_name().map(|n| n.to_string_lossy().into_owned());
            (parent.to_path_buf(), name.unwrap_or_default())
        }
    };
    let mut tar = spool()?;
    engine.copy_out(c, p, &name, &mut tar)?;
    tar.rewind()?;
    let d = File::open(&dir).with_context(|| format!("opening {}", dir.display()))?;
    tree_tar::extract(d.as_fd(), tar, Owners::Root)
        .with_context(|| format!("copying {c}:{p} to {host}"))?;
    Ok(())
}

fn copy_in(engine: &Engine, host: &str, c: &str, p: &str, archive: bool) -> Result<()> {
    let h = Path::new(host);
    let meta = std::fs::symlink_metadata(h).with_context(|| host.to_string())?;
    let (src_name, contents) = base_of(host);
    let dest_kind = engine.path_kind(c, p)?;
    let (dir, name) = match (meta.is_dir(), dest_kind, contents) {
        (true, Some(PathKind::Dir), true) => (p.to_string(), String::new()),
        (_, Some(PathKind::Dir), _) => (p.to_string(), src_name),
        (true, Some(PathKind::Other), _) => bail!("cannot copy directory {host} onto file {c}:{p}"),
        (_, _, _) => {
            if p.ends_with('/') && dest_kind.is_none() {
                bail!("no such directory in container {c}: {p}");
            }
            let (parent, name) = match p.trim_end_matches('/').rsplit_once('/') {
                Some((d, n)) => (if d.is_empty() { "/" } else { d }, n),
                None => (".", p),
            };
            (parent.to_string(), name.to_string())
        }
    };
    let mut tar_file = spool()?;
    {
        let mut tar = tar::Builder::new(&mut tar_file);
        if meta.is_dir() {
            let d = File::open(h).with_context(|| format!("opening {host}"))?;
            tree_tar::append_dir(&mut tar, d.as_fd(), Path::new(&name), Walk::Plain)
                .with_context(|| format!("reading {host}"))?;
        } else {
            let parent = h
                .parent()
                .filter(|p| !p.as_os_str().is_empty())
                .unwrap_or(Path::new("."));
            let pd = File::open(parent).with_context(|| format!("opening {}", parent.display()))?;
            let base = h.file_name().context("a file to copy")?;
            tree_tar::append_child(&mut tar, pd.as_fd(), base, Path::new(&name), Walk::Plain)
                .with_context(|| format!("reading {host}"))?;
        }
        tar.finish()?;
    }
    tar_file.rewind()?;
    engine.copy_in(c, &dir, tar_file, archive)?;
    Ok(())
}

/// `wharf export`.
pub fn export(engine: &Engine, container: &str, output: Option<&Path>) -> Result<i32> {
    match output {
        Some(path) => {
            let mut f =
                File::create(path).with_context(|| format!("creating {}", path.display()))?;
            if let Err(e) = engine.export(container, &mut f) {
                let _ = std::fs::remove_file(path);
                return Err(e.into());
            }
            f.flush()?;
        }
        None => {
            if std::io::IsTerminal::is_terminal(&std::io::stdout()) {
                bail!("refusing to write a tar archive to a terminal: use -o FILE or a pipe");
            }
            engine.export(container, std::io::stdout().lock())?;
        }
    }
    Ok(0)
}

/// `wharf diff`.
pub fn diff(engine: &Engine, container: &str) -> Result<i32> {
    let mut out = std::io::stdout().lock();
    for c in engine.diff(container)? {
        writeln!(out, "{} {}", c.kind, c.path)?;
    }
    Ok(0)
}
