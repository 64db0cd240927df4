//! Wharf's image commands: `pull`, `images`, `rmi`, `image {inspect,prune,mount,unmount}`,
//! `load`, `save`, `import`, `push`, `login`, over the engine's images ([`Images`], opened
//! alone: an image command touches no pod) and registries ([`wharf_engine::registry`]).
//!
//! Errors print as one line on stderr (`wharf: pulling X: manifest unknown: ...`) and exit 1;
//! usage errors exit 2.

pub mod args;
pub(crate) mod progress;

use std::io::{IsTerminal, Write};

use anyhow::{Context, Result, bail};
use wharf_engine::images::{
    ArchiveFormat, BlobOutcome, Credentials, Images, Platform, PullOptions, Reference,
    RegistriesConfig,
};
use wharf_engine::registry;

use crate::format::Format;

use args::{Cli, Cmd, HistoryArgs, ImageCmd, ListArgs, PullArgs, PushArgs, RmiArgs};

/// Entry point; `argv` is the whole command line (`wharf [--root DIR] pull ...`).
pub fn main(cli: Cli) -> i32 {
    match dispatch(&cli) {
        Ok(code) => code,
        Err(e) => {
            let _ = writeln!(std::io::stderr(), "wharf: {e:#}");
            1
        }
    }
}

fn open(cli: &Cli) -> Result<Images<'static>> {
    let reg = RegistriesConfig::load(&cli.config)?;
    // A store that was deleted or truncated is refused (not silently recreated) by an
    // image command too.
    Images::open(&cli.root, &cli.run, reg)
        .with_context(|| format!("opening the image store in {}", cli.root.display()))
}

fn dispatch(cli: &Cli) -> Result<i32> {
    match &cli.cmd {
        Cmd::Pull(p) => pull(cli, p),
        Cmd::Images(l) => list(cli, l),
        Cmd::Rmi(r) => rmi(cli, r),
        Cmd::Image { cmd } => match cmd {
            ImageCmd::Pull(p) => pull(cli, p),
            ImageCmd::Ls(l) => list(cli, l),
            ImageCmd::Rm(r) => rmi(cli, r),
            ImageCmd::Inspect { images, format } => inspect(cli, images, format.as_deref()),
            ImageCmd::Tag(t) => tag(cli, &t.source, &t.target),
            ImageCmd::Push(p) => push(cli, p),
            ImageCmd::History(h) => history(cli, h),
            ImageCmd::Prune { all, force: _ } => {
                let store = open(cli)?;
                let (removed, stats) = store.prune(*all)?;
                for id in &removed {
                    println!("Deleted: {id}");
                }
                println!(
                    "Total reclaimed space: {} ({} blobs, {} snapshots)",
                    human(stats.blob_bytes),
                    stats.blobs,
                    stats.snapshots
                );
                Ok(0)
            }
            ImageCmd::Mount { image } => {
                let store = open(cli)?;
                let img = store.resolve(image)?;
                println!("{}", store.mount(&img)?.display());
                Ok(0)
            }
            ImageCmd::Unmount { image } => {
                let store = open(cli)?;
                let img = store.resolve(image)?;
                if !store.unmount(&img)? {
                    bail!("image {image} is not mounted");
                }
                Ok(0)
            }
        },
        Cmd::Load { input, quiet } => {
            let store = open(cli)?;
            let loaded = match input {
                Some(p) => {
                    let f = std::fs::File::open(p)
                        .with_context(|| format!("opening {}", p.display()))?;
                    store.load(std::io::BufReader::new(f), &p.display().to_string())?
                }
                None => store.load(std::io::stdin().lock(), "standard input")?,
            };
            for l in loaded {
                if l.names.is_empty() {
                    println!("Loaded image ID: {}", l.id);
                    if let Some(t) = &l.tag_only {
                        eprintln!(
                            "wharf: the archive gives image {} only the tag {t:?} (its \
                             org.opencontainers.image.ref.name), no name: name it with `wharf \
                             tag {} NAME:{t}`",
                            l.id,
                            &l.id.hex()[..12]
                        );
                    }
                }
                for n in l.names {
                    if *quiet {
                        println!("{n}");
                    } else {
                        println!("Loaded image: {n}");
                    }
                }
            }
            Ok(0)
        }
        Cmd::Save {
            output,
            format,
            images,
        } => {
            let store = open(cli)?;
            let format = match format.as_str() {
                "docker" | "docker-archive" => ArchiveFormat::Docker,
                "oci" | "oci-archive" => ArchiveFormat::Oci,
                other => bail!("unknown --format {other:?} (docker or oci)"),
            };
            let names: Vec<&str> = images.iter().map(String::as_str).collect();
            match output {
                Some(p) => {
                    // Written next to the target and renamed, so a failed save leaves no
                    // truncated archive behind.
                    let dir = p.parent().filter(|d| !d.as_os_str().is_empty());
                    let tmp =
                        tempfile::NamedTempFile::new_in(dir.unwrap_or(std::path::Path::new(".")))
                            .with_context(|| format!("creating a file next to {}", p.display()))?;
                    store.save(&names, format, std::io::BufWriter::new(tmp.as_file()))?;
                    tmp.persist(p)
                        .with_context(|| format!("writing {}", p.display()))?;
                }
                None => {
                    if std::io::stdout().is_terminal() {
                        bail!(
                            "refusing to write an archive to a terminal: use -o FILE or redirect stdout"
                        );
                    }
                    store.save(
                        &names,
                        format,
                        std::io::BufWriter::new(std::io::stdout().lock()),
                    )?;
                }
            }
            Ok(0)
        }
        Cmd::Tag(t) => tag(cli, &t.source, &t.target),
        Cmd::Push(p) => push(cli, p),
        Cmd::Login {
            username,
            password,
            password_stdin,
            server,
        } => login(
            cli,
            username.as_deref(),
            password.as_deref(),
            *password_stdin,
            server.as_deref(),
        ),
        Cmd::Logout { server } => {
            let server = server.as_deref().unwrap_or("docker.io");
            let key = registry::server_key(&registry::login_host(server));
            if registry::remove_login(&registry::login_host(server))
                .with_context(|| format!("removing the credentials of {server}"))?
            {
                println!("Removing login credentials for {key}");
            } else {
                println!("Not logged in to {key}");
            }
            Ok(0)
        }
        Cmd::History(h) => history(cli, h),
        Cmd::Import {
            change,
            message,
            file,
            reference,
        } => {
            let store = open(cli)?;
            let (name, msg) = (reference.as_deref(), message.as_deref());
            let img = if file == "-" {
                store.import(std::io::stdin().lock(), name, change, msg)?
            } else {
                let f = std::fs::File::open(file).with_context(|| format!("opening {file}"))?;
                store.import(std::io::BufReader::new(f), name, change, msg)?
            };
            println!("{}", img.id);
            Ok(0)
        }
    }
}

fn pull(cli: &Cli, p: &PullArgs) -> Result<i32> {
    let store = open(cli)?;
    let creds = match &p.creds {
        Some(c) => Some(Credentials::parse(c).context("--creds wants user:password")?),
        None => None,
    };
    let platform = p.platform.as_deref().map(Platform::parse).transpose()?;
    let opts = PullOptions {
        platform,
        creds,
        jobs: p.jobs,
    };
    if p.quiet {
        store.pull(&p.image, &opts, &())?;
    } else {
        let display = progress::Display::new(std::io::stdout().is_terminal());
        let img = store.pull(&p.image, &opts, &display)?;
        println!("Digest: {}", img.manifest_digest);
    }
    println!("{}", Reference::parse(&p.image)?.store_name());
    Ok(0)
}

fn list(cli: &Cli, l: &ListArgs) -> Result<i32> {
    let store = open(cli)?;
    let rows = store.list_shown(l.all)?;
    if l.quiet {
        let mut seen = std::collections::HashSet::new();
        for r in &rows {
            if seen.insert(&r.id) {
                println!("{}", &r.id[7..19]);
            }
        }
        return Ok(0);
    }
    let format = crate::format::Format::parse(&l.format)?;
    let docker_rows = || {
        rows.iter()
            .map(|r| {
                let (repo, tag) = split_name(r.name.as_deref());
                let created = wharf_sys::time::rfc3339(r.created_at, 0, false);
                serde_json::json!({
                    "ID": &r.id[7..19], "Repository": repo, "Tag": tag, "Digest": r.digest,
                    "CreatedAt": crate::format::docker_time(&created), "CreatedSince": ago(r.created_at),
                    "Size": human(r.size), "VirtualSize": human(r.size),
                    "SharedSize": "N/A", "UniqueSize": "N/A", "Containers": "N/A",
                })
            })
            .collect::<Vec<_>>()
    };
    if !matches!(format, Format::Table) {
        let headers = serde_json::json!({
            "ID": "IMAGE ID", "Repository": "REPOSITORY", "Tag": "TAG", "Digest": "DIGEST",
            "CreatedAt": "CREATED AT", "CreatedSince": "CREATED", "Size": "SIZE",
            "VirtualSize": "VIRTUAL SIZE", "SharedSize": "SHARED SIZE",
            "UniqueSize": "UNIQUE SIZE", "Containers": "CONTAINERS",
        });
        let mut out = std::io::stdout().lock();
        crate::format::print_rows(&mut out, &format, &headers, &docker_rows())?;
        return Ok(0);
    }
    let mut out = String::new();
    if l.digests {
        out.push_str(&format!(
            "{:<50} {:<20} {:<72} {:<14} {:<16} {}\n",
            "REPOSITORY", "TAG", "DIGEST", "IMAGE ID", "CREATED", "SIZE"
        ));
    } else {
        out.push_str(&format!(
            "{:<50} {:<20} {:<14} {:<16} {}\n",
            "REPOSITORY", "TAG", "IMAGE ID", "CREATED", "SIZE"
        ));
    }
    for r in &rows {
        let (repo, tag) = split_name(r.name.as_deref());
        let id = &r.id[7..19];
        let created = ago(r.created_at);
        if l.digests {
            out.push_str(&format!(
                "{repo:<50} {tag:<20} {:<72} {id:<14} {created:<16} {}\n",
                r.digest,
                human(r.size)
            ));
        } else {
            out.push_str(&format!(
                "{repo:<50} {tag:<20} {id:<14} {created:<16} {}\n",
                human(r.size)
            ));
        }
    }
    print!("{out}");
    Ok(0)
}

/// `wharf push`: docker's lines (each blob's fate, then the digest and size).
fn push(cli: &Cli, p: &PushArgs) -> Result<i32> {
    let (quiet, image) = (p.quiet, p.image.as_str());
    let store = open(cli)?;
    let name = Reference::parse(image)?;
    if !quiet {
        println!(
            "The push refers to repository [{}/{}]",
            name.registry, name.repository
        );
    }
    let report = store
        .push(image, &mut |d, outcome| {
            if !quiet {
                let what = match outcome {
                    BlobOutcome::Exists => "Layer already exists".into(),
                    BlobOutcome::Mounted(from) => format!("Mounted from {from}"),
                    BlobOutcome::Pushed => "Pushed".into(),
                };
                println!("{}: {what}", &d.hex()[..12]);
            }
        })
        .with_context(|| format!("pushing {image}"))?;
    if !quiet {
        println!(
            "{}: digest: {} size: {}",
            report.tag, report.digest, report.size
        );
    }
    Ok(0)
}

/// `wharf login`: the registry is asked to accept the credentials before they are kept.
fn login(
    cli: &Cli,
    username: Option<&str>,
    password: Option<&str>,
    password_stdin: bool,
    server: Option<&str>,
) -> Result<i32> {
    let server = server.unwrap_or("docker.io");
    let host = registry::login_host(server);
    let Some(user) = username else {
        bail!("login to {server}: give the user name with -u (wharf does not prompt)");
    };
    let pass = match (password, password_stdin) {
        (Some(_), true) => bail!("--password and --password-stdin are exclusive"),
        (Some(p), false) => p.to_string(),
        (None, true) => {
            let mut p = String::new();
            std::io::Read::read_to_string(&mut std::io::stdin().lock(), &mut p)?;
            p.trim_end_matches(['\n', '\r']).to_string()
        }
        (None, false) => bail!("login to {server}: give the password with -p or --password-stdin"),
    };
    if pass.is_empty() {
        bail!("login to {server}: the password is empty");
    }
    let creds = Credentials {
        username: user.to_string(),
        password: pass,
    };
    let reg = RegistriesConfig::load(&cli.config)?;
    registry::check_login(&reg, &host, creds.clone())
        .with_context(|| format!("login to {server}"))?;
    let file = registry::store_login(&host, &creds)
        .with_context(|| format!("login to {server}: keeping the credentials"))?;
    eprintln!("Credentials kept in {}", file.display());
    println!("Login Succeeded");
    Ok(0)
}

/// `wharf tag`: the name moves to this image if another had it (docker's).
fn tag(cli: &Cli, source: &str, target: &str) -> Result<i32> {
    let store = open(cli)?;
    let img = store.resolve(source)?;
    store
        .tag(&img, target)
        .with_context(|| format!("tagging {source} as {target}"))?;
    Ok(0)
}

/// `wharf history`: docker's columns, newest step first; the image's id on its top step.
fn history(cli: &Cli, h: &HistoryArgs) -> Result<i32> {
    let (image, no_trunc, quiet, format) = (&h.image, h.no_trunc, h.quiet, &h.format);
    let store = open(cli)?;
    let img = store.resolve(image)?;
    let steps = store.history(&img)?;
    let id = if no_trunc {
        img.id.to_string()
    } else {
        img.id.hex()[..12].to_string()
    };
    let rows: Vec<serde_json::Value> = steps
        .iter()
        .enumerate()
        .map(|(i, h)| {
            let by = if !no_trunc && h.created_by.chars().count() > 45 {
                format!("{}…", h.created_by.chars().take(44).collect::<String>())
            } else {
                h.created_by.clone()
            };
            let since = wharf_sys::time::parse_rfc3339(&h.created)
                .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
                .map(|d| ago(d.as_secs() as i64))
                .unwrap_or_default();
            serde_json::json!({
                "ID": if i == 0 { id.clone() } else { "<missing>".into() },
                "CreatedAt": h.created, "CreatedSince": since, "CreatedBy": by,
                "Size": human(h.size), "Comment": h.comment,
            })
        })
        .collect();
    let mut out = std::io::stdout().lock();
    if quiet {
        // One line per entry, as docker prints them (`<missing>` below the image itself).
        for r in &rows {
            writeln!(out, "{}", r["ID"].as_str().unwrap_or_default())?;
        }
        return Ok(0);
    }
    match Format::parse(format)? {
        Format::Table => {
            let mut t = String::from("IMAGE\tCREATED\tCREATED BY\tSIZE\tCOMMENT\n");
            for r in &rows {
                let cell = |k: &str| r[k].as_str().unwrap_or_default().to_string();
                t.push_str(&format!(
                    "{}\t{}\t{}\t{}\t{}\n",
                    cell("ID"),
                    cell("CreatedSince"),
                    cell("CreatedBy"),
                    cell("Size"),
                    cell("Comment")
                ));
            }
            write!(out, "{}", crate::format::align(&t))?;
        }
        format => {
            let headers = serde_json::json!({
                "ID": "IMAGE", "CreatedAt": "CREATED AT", "CreatedSince": "CREATED",
                "CreatedBy": "CREATED BY", "Size": "SIZE", "Comment": "COMMENT",
            });
            crate::format::print_rows(&mut out, &format, &headers, &rows)?;
        }
    }
    Ok(0)
}

fn split_name(name: Option<&str>) -> (String, String) {
    match name {
        None => ("<none>".into(), "<none>".into()),
        Some(n) => {
            if let Some((repo, _)) = n.split_once('@') {
                (repo.to_string(), "<none>".into())
            } else {
                match n.rfind(':') {
                    Some(i) if !n[i..].contains('/') => {
                        (n[..i].to_string(), n[i + 1..].to_string())
                    }
                    _ => (n.to_string(), "<none>".into()),
                }
            }
        }
    }
}

fn rmi(cli: &Cli, r: &RmiArgs) -> Result<i32> {
    let store = open(cli)?;
    let mut code = 0;
    for name in &r.images {
        match store.remove(name, r.force) {
            Ok((names, deleted)) => {
                for n in names {
                    println!("Untagged: {n}");
                }
                if let Some(id) = deleted {
                    println!("Deleted: {id}");
                }
            }
            Err(e) => {
                eprintln!("wharf: removing image {name}: {e}");
                code = 1;
            }
        }
    }
    Ok(code)
}

fn inspect(cli: &Cli, images: &[String], format: Option<&str>) -> Result<i32> {
    let store = open(cli)?;
    let format = crate::format::Format::parse(format.unwrap_or("json"))?;
    let docs = images
        .iter()
        .map(|name| inspect_json(&store, name))
        .collect::<Result<Vec<_>>>()?;
    crate::format::print_documents(&format, &docs)?;
    Ok(0)
}

/// `docker image inspect`'s document ([`wharf_docker::views::image`]).
pub fn inspect_json(images: &Images<'_>, name: &str) -> Result<serde_json::Value> {
    Ok(wharf_docker::views::image(&images.inspect(name)?))
}

/// An image size as docker shows it (`2.13MB`).
fn human(n: u64) -> String {
    crate::format::size(n, false, 3)
}

fn ago(t: i64) -> String {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0);
    let s = (now - t).max(0);
    match s {
        0..=59 => format!("{s} seconds ago"),
        60..=3599 => format!("{} minutes ago", s / 60),
        3600..=86399 => format!("{} hours ago", s / 3600),
        _ => format!("{} days ago", s / 86400),
    }
}
