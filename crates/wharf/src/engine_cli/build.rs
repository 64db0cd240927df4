//! `wharf build`: docker's flags, the context from a directory or a tar on stdin, and
//! docker's classic step lines as the engine reports the steps.

use std::collections::BTreeMap;
use std::io::IsTerminal;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use anyhow::{Context, Result, bail};
use wharf_engine::Engine;
use wharf_engine::build::BuildRequest;
use wharf_engine::model::NetworkMode;

use super::args::Cmd;
use super::build_progress;

/// KEY=VALUE, or KEY alone taking the value from the environment (skipped when unset).
fn pairs(items: &[String], from_env: bool, what: &str) -> Result<BTreeMap<String, String>> {
    let mut out = BTreeMap::new();
    for i in items {
        match i.split_once('=') {
            Some((k, v)) => {
                out.insert(k.to_string(), v.to_string());
            }
            None if from_env => {
                if let Ok(v) = std::env::var(i) {
                    out.insert(i.clone(), v);
                }
            }
            None => bail!("{what} {i:?}: use KEY=VALUE"),
        }
    }
    Ok(out)
}

/// Run `wharf build`.
pub fn run(engine: &Engine, cmd: &Cmd) -> Result<i32> {
    let Cmd::Build {
        tags,
        file,
        build_args,
        target,
        no_cache,
        pull,
        network,
        labels,
        quiet,
        iidfile,
        platform,
        progress,
        secrets,
        path,
    } = cmd
    else {
        unreachable!("dispatched on Build");
    };
    if let Some(p) = platform {
        let host = format!(
            "linux/{}",
            wharf_engine::images::Platform::host().architecture
        );
        if p != &host && p != "linux" {
            bail!("--platform {p}: Wharf builds for this host's platform only ({host})");
        }
    }
    let network = match network.as_str() {
        "default" | "bridge" => NetworkMode::Default,
        "none" => NetworkMode::None,
        "host" => NetworkMode::Host,
        n => bail!("--network {n}: use default, none or host"),
    };
    let unpacked;
    let context = if path == "-" {
        unpacked = engine
            .unpack_context(std::io::stdin().lock())
            .context("reading the build context from stdin")?;
        unpacked.path().to_path_buf()
    } else {
        let p = std::path::PathBuf::from(path);
        if !p.is_dir() {
            bail!("unable to prepare context: path {path:?} not found or not a directory");
        }
        p
    };
    let (dockerfile, name) = match file {
        Some(f) if f.as_os_str() == "-" => {
            let mut s = String::new();
            std::io::Read::read_to_string(&mut std::io::stdin(), &mut s)
                .context("reading the Dockerfile from stdin")?;
            (s, "Dockerfile".to_string())
        }
        Some(f) => {
            let p = if f.is_absolute() || f.exists() {
                f.clone()
            } else {
                context.join(f)
            };
            (
                std::fs::read_to_string(&p).with_context(|| format!("reading {}", p.display()))?,
                f.display().to_string(),
            )
        }
        None => {
            let p = context.join("Dockerfile");
            (
                std::fs::read_to_string(&p).with_context(|| format!("reading {}", p.display()))?,
                "Dockerfile".to_string(),
            )
        }
    };
    let source_date_epoch = std::env::var("SOURCE_DATE_EPOCH")
        .ok()
        .and_then(|v| v.parse().ok());
    // Ctrl-C (or TERM, HUP) stops the build: the step's container is killed and removed,
    // and nothing of the build is left.
    let interrupt = Arc::new(AtomicBool::new(false));
    {
        let flag = interrupt.clone();
        super::relay::on_first_signal(&[libc::SIGINT, libc::SIGTERM, libc::SIGHUP], move |_| {
            flag.store(true, Ordering::Relaxed)
        });
    }
    let secrets = secrets
        .iter()
        .map(|s| parse_secret(s))
        .collect::<Result<_>>()?;
    let req = BuildRequest {
        secrets,
        context,
        dockerfile,
        dockerfile_name: name,
        tags: tags.clone(),
        build_args: pairs(build_args, true, "--build-arg")?,
        target: target.clone(),
        no_cache: *no_cache,
        pull: *pull,
        network,
        labels: pairs(labels, false, "--label")?,
        source_date_epoch,
        interrupt: Some(interrupt),
    };
    let mode = build_progress::Mode::of(progress, *quiet, std::io::stderr().is_terminal())?;
    let shown = build_progress::Progress::new(mode);
    let built = engine.build(&req, &mut |e| shown.event(e));
    let built = match built {
        Ok(b) => b,
        Err(e) => {
            shown.finish(false, &[]);
            if let wharf_engine::Error::BuildStep { message, code } = e {
                eprintln!("wharf: {message}");
                return Ok(code);
            }
            return Err(e.into());
        }
    };
    let mut exported = vec![format!("writing image {}", built.image.id)];
    exported.extend(
        built
            .tags
            .iter()
            .map(|t| format!("naming to {}", wharf_docker::views::familiar(t))),
    );
    shown.finish(true, &exported);
    if !built.unused_args.is_empty() {
        let warning = format!(
            "[Warning] One or more build-args [{}] were not consumed",
            built.unused_args.join(" ")
        );
        match mode {
            build_progress::Mode::Quiet => {}
            build_progress::Mode::Classic => println!("{warning}"),
            _ => eprintln!("{warning}"),
        }
    }
    let id = built.image.id.to_string();
    if let Some(f) = iidfile {
        std::fs::write(f, &id).with_context(|| format!("writing {}", f.display()))?;
    }
    if mode == build_progress::Mode::Quiet {
        println!("{id}");
    } else if mode == build_progress::Mode::Classic {
        println!("Successfully built {}", built.image.id.short());
        for t in &built.tags {
            println!("Successfully tagged {}", wharf_docker::views::familiar(t));
        }
    }
    Ok(0)
}

/// `wharf builder prune`.
pub fn prune(engine: &Engine) -> Result<i32> {
    let pruned = engine.prune_build_cache()?;
    for id in &pruned.images {
        println!("Deleted: {id}");
    }
    println!(
        "Total reclaimed space: {}",
        crate::format::size(pruned.bytes, false, 3)
    );
    Ok(0)
}

/// `--secret id=ID,src=FILE` (also `source=`, or `env=VAR`; `type=file|env`), as
/// docker's buildx and buildah take it.
fn parse_secret(s: &str) -> Result<(String, wharf_engine::build::SecretSource)> {
    let mut id = None;
    let mut src = None;
    let mut env = None;
    for part in s.split(',') {
        let (k, v) = part.split_once('=').unwrap_or((part, ""));
        match k {
            "id" => id = Some(v.to_string()),
            "src" | "source" => src = Some(std::path::PathBuf::from(v)),
            "env" => env = Some(v.to_string()),
            "type" if v == "file" || v == "env" => {}
            _ => bail!("--secret {s}: unexpected key {k:?} (want id=, src= or env=)"),
        }
    }
    let id = match id {
        Some(i) if !i.is_empty() => i,
        _ => bail!("--secret {s}: id= is required"),
    };
    let source = match (src, env) {
        (Some(p), None) => wharf_engine::build::SecretSource::File(p),
        (None, Some(e)) => wharf_engine::build::SecretSource::Env(e),
        (None, None) => wharf_engine::build::SecretSource::Env(id.clone()),
        _ => bail!("--secret {s}: give src= or env=, not both"),
    };
    Ok((id, source))
}
