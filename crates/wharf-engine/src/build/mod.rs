//! The engine's image builder: a Dockerfile and its context become an image, for every
//! front end alike (`wharf build`, the Docker API's `/build`).
//!
//! It builds the way docker's classic builder does, from the engine's own parts: each
//! instruction makes an image from the one before. ENV, CMD, LABEL and the other config
//! instructions change only the config (a history entry with `empty_layer`); RUN runs a
//! container of the image so far through the engine's ordinary path (same seccomp,
//! capabilities and masked paths as any container) and takes its overlay upper directory
//! as the new layer; COPY and ADD write the context's files into a created container's
//! root, with the same path safety as `wharf cp`, and take that layer the same way. The
//! containers go whether the step succeeds or fails.
//!
//! Each step's image is kept, untagged, with a cache entry keyed by what the step saw
//! (its parent image, its instruction as expanded, the build arguments it uses and the
//! content of the files it copies): the next build of the same step reuses it.
//!
//! The Dockerfile itself is read by [`wharf_build`]; this module only executes it.

mod cache;
pub use cache::{CacheEntry, CachePruned, cached_image_ids};
mod config;
mod copy;
mod epoch;
mod mounts;
mod run;
mod stages;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use serde_json::{Map, Value};
use wharf_build::{Command, Kind};
use wharf_image::Image;
use wharf_image::commit::DeriveOptions;

use crate::engine::Engine;
use crate::error::{Context, Error, Result};
use crate::model::NetworkMode;

pub use wharf_build::{Dockerfile, context};

/// What to build.
#[derive(Debug, Clone, Default)]
pub struct BuildRequest {
    /// The build context: a directory (the Docker API unpacks its tar into one first).
    pub context: PathBuf,
    /// The Dockerfile's text.
    pub dockerfile: String,
    /// Its name as the user gave it (for errors: `Dockerfile:3: ...`).
    pub dockerfile_name: String,
    /// Names for the result (`-t`).
    pub tags: Vec<String>,
    /// `--build-arg` values.
    pub build_args: BTreeMap<String, String>,
    /// `--target`: the stage to stop at (default: the last).
    pub target: Option<String>,
    /// `--no-cache`.
    pub no_cache: bool,
    /// `--pull`: pull base images even when present.
    pub pull: bool,
    /// The network RUN steps get (`--network`; docker's default network by default).
    pub network: NetworkMode,
    /// `--label`s for the result.
    pub labels: BTreeMap<String, String>,
    /// SOURCE_DATE_EPOCH: the time stamped on every image and history entry.
    pub source_date_epoch: Option<u64>,
    /// `--secret`s: what `RUN --mount=type=secret,id=ID` mounts.
    pub secrets: BTreeMap<String, SecretSource>,
    /// Set by the front end to stop the build (Ctrl-C, a client that left): a RUN step's
    /// container is killed, the step's container removed, and the build fails with
    /// [`Error::BuildStep`] code 130.
    pub interrupt: Option<std::sync::Arc<std::sync::atomic::AtomicBool>>,
}

/// Where a build secret's value comes from.
#[derive(Debug, Clone)]
pub enum SecretSource {
    /// A file of the host.
    File(PathBuf),
    /// An environment variable of the front end's process.
    Env(String),
}

impl BuildRequest {
    /// The front end asked to stop.
    fn interrupted(&self) -> bool {
        self.interrupt
            .as_ref()
            .is_some_and(|f| f.load(std::sync::atomic::Ordering::Relaxed))
    }
}

/// The error of an interrupted build.
fn interrupted_error() -> Error {
    Error::BuildStep {
        message: "the build was interrupted".into(),
        code: 130,
    }
}

/// What a build tells its front end as it goes. Stages that do not use one another build
/// at once, so what happens within a step names the step it belongs to.
#[derive(Debug)]
pub enum BuildEvent<'a> {
    /// A step begins (`Step 2/5 : RUN make`).
    Step {
        /// 1-based step number over all stages.
        number: usize,
        /// Steps in all.
        total: usize,
        /// The instruction as written.
        text: &'a str,
    },
    /// An image is being pulled.
    Pulling(&'a str),
    /// Output of a RUN step.
    Output {
        /// The step's number.
        step: usize,
        /// What it wrote (stdout and stderr as they came).
        bytes: &'a [u8],
    },
    /// The step was found in the cache.
    Cached {
        /// The step's number.
        step: usize,
    },
    /// The step is done: the image it left.
    StepDone {
        /// The step's number.
        step: usize,
        /// The image.
        image: &'a wharf_image::digest::Digest,
        /// How long it took.
        elapsed: std::time::Duration,
    },
}

/// What happens within a step, told by the code that runs it; the stage gives it the
/// step's number on its way to the front end ([`StepEvent::at`]).
pub(crate) enum StepEvent<'a> {
    /// Output of a RUN.
    Output(&'a [u8]),
    /// Found in the cache.
    Cached,
    /// The stage's base is being pulled.
    Pulling(&'a str),
}

impl<'a> StepEvent<'a> {
    /// The event as step `step`'s.
    fn at(self, step: usize) -> BuildEvent<'a> {
        match self {
            StepEvent::Output(bytes) => BuildEvent::Output { step, bytes },
            StepEvent::Cached => BuildEvent::Cached { step },
            StepEvent::Pulling(image) => BuildEvent::Pulling(image),
        }
    }
}

/// What every stage of one build shares.
struct Plan<'a> {
    df: &'a Dockerfile,
    req: &'a BuildRequest,
    global: &'a BTreeMap<String, Option<String>>,
    /// The number of each stage's FROM step.
    first: &'a [usize],
    /// Steps in all (ONBUILD triggers add to it as they are found).
    total: &'a AtomicUsize,
}

/// A [`BuildEvent`] that can cross threads.
enum OwnedEvent {
    Step(usize, usize, String),
    Pulling(String),
    Output(usize, Vec<u8>),
    Cached(usize),
    StepDone(usize, wharf_image::digest::Digest, std::time::Duration),
}

impl OwnedEvent {
    fn of(ev: BuildEvent<'_>) -> OwnedEvent {
        match ev {
            BuildEvent::Step {
                number,
                total,
                text,
            } => OwnedEvent::Step(number, total, text.to_string()),
            BuildEvent::Pulling(p) => OwnedEvent::Pulling(p.to_string()),
            BuildEvent::Output { step, bytes } => OwnedEvent::Output(step, bytes.to_vec()),
            BuildEvent::Cached { step } => OwnedEvent::Cached(step),
            BuildEvent::StepDone {
                step,
                image,
                elapsed,
            } => OwnedEvent::StepDone(step, image.clone(), elapsed),
        }
    }

    fn tell(&self, on: &mut dyn FnMut(BuildEvent<'_>)) {
        on(match self {
            OwnedEvent::Step(number, total, text) => BuildEvent::Step {
                number: *number,
                total: *total,
                text,
            },
            OwnedEvent::Pulling(p) => BuildEvent::Pulling(p),
            OwnedEvent::Output(step, bytes) => BuildEvent::Output { step: *step, bytes },
            OwnedEvent::Cached(step) => BuildEvent::Cached { step: *step },
            OwnedEvent::StepDone(step, image, elapsed) => BuildEvent::StepDone {
                step: *step,
                image,
                elapsed: *elapsed,
            },
        })
    }
}

/// A finished build.
#[derive(Debug, Clone)]
pub struct Built {
    /// The image.
    pub image: Image,
    /// The names it was given, as stored.
    pub tags: Vec<String>,
    /// `--build-arg`s no ARG of the built stages declared (docker warns of them).
    pub unused_args: Vec<String>,
}

/// The state of the stage being built.
struct StageState {
    /// The image so far.
    image: Image,
    /// Its config's `config` object, as the steps left it.
    config: Map<String, Value>,
    /// ARGs declared in this stage, with their values.
    args: BTreeMap<String, Option<String>>,
    /// The step's CMD was set in this stage (ENTRYPOINT then keeps it).
    cmd_set: bool,
}

impl StageState {
    /// The WORKDIR the steps so far set (None: the root).
    fn workdir(&self) -> Option<&str> {
        self.config
            .get("WorkingDir")
            .and_then(Value::as_str)
            .filter(|w| !w.is_empty())
    }

    /// A variable as an instruction sees it: the stage's ENV, then its ARGs.
    fn lookup(&self, name: &str) -> Option<String> {
        config::env_of(&self.config)
            .into_iter()
            .rev()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v)
            .or_else(|| self.args.get(name).cloned().flatten())
    }

    /// Expand `word` with what the stage sees.
    fn expand(&self, df: &Dockerfile, word: &str) -> Result<String> {
        wharf_build::expand::expand(word, df.escape, &|n| self.lookup(n)).map_err(build_error)
    }
}

/// BuildKit's predefined platform ARGs for this host (Wharf builds for the host only).
fn platform_args() -> Vec<(&'static str, String)> {
    let p = wharf_image::manifest::Platform::host();
    let variant = p.variant.clone().unwrap_or_default();
    let full = match &p.variant {
        Some(v) if p.architecture != "arm64" => format!("{}/{}/{v}", p.os, p.architecture),
        _ => format!("{}/{}", p.os, p.architecture),
    };
    let mut out = Vec::new();
    for side in ["TARGET", "BUILD"] {
        out.push((
            if side == "TARGET" {
                "TARGETPLATFORM"
            } else {
                "BUILDPLATFORM"
            },
            full.clone(),
        ));
        out.push((
            if side == "TARGET" {
                "TARGETOS"
            } else {
                "BUILDOS"
            },
            p.os.clone(),
        ));
        out.push((
            if side == "TARGET" {
                "TARGETARCH"
            } else {
                "BUILDARCH"
            },
            p.architecture.clone(),
        ));
        out.push((
            if side == "TARGET" {
                "TARGETVARIANT"
            } else {
                "BUILDVARIANT"
            },
            variant.clone(),
        ));
    }
    out
}

/// The predefined ARGs docker gives RUN without a declaration, and keeps out of the
/// image's history: the proxy settings.
pub(crate) const PROXY_ARGS: [&str; 10] = [
    "HTTP_PROXY",
    "http_proxy",
    "HTTPS_PROXY",
    "https_proxy",
    "FTP_PROXY",
    "ftp_proxy",
    "NO_PROXY",
    "no_proxy",
    "ALL_PROXY",
    "all_proxy",
];

/// The stage named `name` (names compare as docker compares them, without case).
fn stage_index(df: &Dockerfile, name: &str) -> Option<usize> {
    let lower = name.to_lowercase();
    df.stages
        .iter()
        .position(|s| s.name.as_deref() == Some(lower.as_str()))
}

/// A Dockerfile error as the engine's: invalid input.
fn build_error(e: wharf_build::Error) -> Error {
    Error::Invalid(e.to_string())
}

/// The shell a stage's shell-form commands run in (SHELL, else docker's default).
fn shell_of(config: &Map<String, Value>) -> Vec<String> {
    config
        .get("Shell")
        .and_then(|v| serde_json::from_value::<Vec<String>>(v.clone()).ok())
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| vec!["/bin/sh".into(), "-c".into()])
}

/// A command's argv: exec form as it is, shell form in the stage's shell.
fn argv_of(config: &Map<String, Value>, c: &Command) -> Vec<String> {
    match c {
        Command::Exec(v) => v.clone(),
        Command::Shell(s) => {
            let mut v = shell_of(config);
            v.push(s.clone());
            v
        }
    }
}

impl Engine {
    /// Build the image `req` describes, telling `on` what happens. Returns the image of
    /// the target stage, named with the request's tags.
    pub fn build(&self, req: &BuildRequest, on: &mut dyn FnMut(BuildEvent<'_>)) -> Result<Built> {
        let df = wharf_build::parse(&req.dockerfile, &req.dockerfile_name).map_err(build_error)?;
        let target = match &req.target {
            Some(t) => stage_index(&df, t)
                .ok_or_else(|| Error::Invalid(format!("target stage {t:?} could not be found")))?,
            None => df.stages.len() - 1,
        };
        let global = self.global_args(&df, req)?;
        let needed = stages::needed(&df, target, &global);
        // Before anything runs, every image the build starts from or copies from is here:
        // a missing one fails the build now, not after the stages before it.
        self.fetch_images(&df, req, &global, &needed, on)?;
        // Each needed stage's steps are numbered from its place in the file.
        let mut first = vec![0; target + 1];
        let mut next = 1;
        for i in 0..=target {
            first[i] = next;
            if needed[i] {
                next += 1 + df.stages[i].instructions.len();
            }
        }
        let total = AtomicUsize::new(next - 1 + usize::from(!req.labels.is_empty()));
        let plan = Plan {
            df: &df,
            req,
            global: &global,
            first: &first,
            total: &total,
        };
        // Stages are built as soon as the stages they use are: several at once when they
        // do not depend on one another, each on an engine of its own thread.
        let deps: Vec<Vec<usize>> = (0..=target)
            .map(|i| {
                if needed[i] {
                    stages::references(&df, i, &global)
                } else {
                    Vec::new()
                }
            })
            .collect();
        let mut built: Vec<Option<Image>> = vec![None; target + 1];
        let mut done: Vec<bool> = needed.iter().map(|n| !n).collect();
        loop {
            let ready: Vec<usize> = (0..=target)
                .filter(|&i| !done[i] && deps[i].iter().all(|&d| done[d]))
                .collect();
            match ready.as_slice() {
                [] => break,
                [i] => {
                    built[*i] = Some(self.build_stage(&plan, &built, *i, on)?);
                    done[*i] = true;
                }
                many => {
                    for (i, img) in self.build_in_parallel(&plan, &built, many, on)? {
                        built[i] = Some(img);
                        done[i] = true;
                    }
                }
            }
        }
        let mut number = total.load(Ordering::Relaxed) - usize::from(!req.labels.is_empty());
        let total = total.load(Ordering::Relaxed);
        let mut image = built
            .pop()
            .flatten()
            .ok_or_else(|| Error::Invalid("no stage to build".into()))?;
        if !req.labels.is_empty() {
            number += 1;
            let text = format!(
                "LABEL {}",
                req.labels
                    .iter()
                    .map(|(k, v)| format!("{k}={v:?}"))
                    .collect::<Vec<_>>()
                    .join(" ")
            );
            on(BuildEvent::Step {
                number,
                total,
                text: &text,
            });
            let mut inner = self.images.inner_config(&image)?;
            config::set_labels(&mut inner, req.labels.clone().into_iter());
            image = self.images.derive(
                &image,
                None::<std::io::Empty>,
                &DeriveOptions {
                    config: Some(&inner),
                    created_by: &config::nop(&text),
                    created: req.source_date_epoch,
                    ..Default::default()
                },
            )?;
        }
        let mut tags = Vec::new();
        for t in &req.tags {
            tags.push(self.images.tag(&image, t)?);
        }
        let declared: std::collections::HashSet<&str> = df
            .global_args
            .iter()
            .chain(
                df.stages
                    .iter()
                    .zip(&needed)
                    .filter(|(_, n)| **n)
                    .flat_map(|(s, _)| &s.instructions)
                    .flat_map(|i| match &i.kind {
                        Kind::Arg(a) => a.as_slice(),
                        _ => &[],
                    }),
            )
            .map(|a| a.name.as_str())
            .collect();
        let unused_args = req
            .build_args
            .keys()
            .filter(|k| !declared.contains(k.as_str()) && !PROXY_ARGS.contains(&k.as_str()))
            .cloned()
            .collect();
        Ok(Built {
            image,
            tags,
            unused_args,
        })
    }

    /// Build stage `i` of the plan (the stages it uses are in `built`); its image.
    fn build_stage(
        &self,
        plan: &Plan<'_>,
        built: &[Option<Image>],
        i: usize,
        on: &mut dyn FnMut(BuildEvent<'_>),
    ) -> Result<Image> {
        let (df, req) = (plan.df, plan.req);
        let stage = &df.stages[i];
        on(BuildEvent::Step {
            number: plan.first[i],
            total: plan.total.load(Ordering::Relaxed),
            text: &format!(
                "FROM {}{}",
                stage.from,
                stage
                    .name
                    .as_ref()
                    .map(|n| format!(" AS {n}"))
                    .unwrap_or_default()
            ),
        });
        let t0 = Instant::now();
        let from = wharf_build::expand::expand(&stage.from, df.escape, &|n| {
            plan.global.get(n).cloned().flatten()
        })
        .map_err(build_error)?;
        let base = self.stage_base(df, built, i, &from, &mut |ev| on(ev.at(plan.first[i])))?;
        on(BuildEvent::StepDone {
            step: plan.first[i],
            image: &base.id,
            elapsed: t0.elapsed(),
        });
        let mut st = StageState {
            config: self.images.inner_config(&base)?,
            image: base,
            args: BTreeMap::new(),
            cmd_set: false,
        };
        // The base's ONBUILD triggers run first, as instructions of this stage; the
        // image they make carries no triggers of its own.
        let triggers = self.take_triggers(&mut st, &req.dockerfile_name, stage.line)?;
        plan.total.fetch_add(triggers.len(), Ordering::Relaxed);
        for (number, ins) in (plan.first[i] + 1..).zip(triggers.iter().chain(&stage.instructions)) {
            if req.interrupted() {
                return Err(interrupted_error());
            }
            on(BuildEvent::Step {
                number,
                total: plan.total.load(Ordering::Relaxed),
                text: &ins.text,
            });
            let t0 = Instant::now();
            self.step(df, req, plan.global, built, &mut st, ins, &mut |ev| {
                on(ev.at(number))
            })
            .map_err(|e| match e {
                Error::Invalid(m) if !m.starts_with(&req.dockerfile_name) => {
                    Error::Invalid(format!("{}:{}: {m}", req.dockerfile_name, ins.line))
                }
                e => e,
            })?;
            on(BuildEvent::StepDone {
                step: number,
                image: &st.image.id,
                elapsed: t0.elapsed(),
            });
        }
        Ok(st.image)
    }

    /// Build the stages `which` at once, each on a thread with an engine of its own (the
    /// engine is not shared between threads); their events reach `on` from this thread as
    /// they come. The first failure is the result, once every thread has ended.
    fn build_in_parallel(
        &self,
        plan: &Plan<'_>,
        built: &[Option<Image>],
        which: &[usize],
        on: &mut dyn FnMut(BuildEvent<'_>),
    ) -> Result<Vec<(usize, Image)>> {
        let (tx, rx) = std::sync::mpsc::channel::<OwnedEvent>();
        std::thread::scope(|s| {
            let handles: Vec<_> = which
                .iter()
                .map(|&i| {
                    let tx = tx.clone();
                    let opts = self.opts.clone();
                    s.spawn(move || -> Result<(usize, Image)> {
                        let engine = Engine::open_unchecked(opts)?;
                        let mut send = |ev: BuildEvent<'_>| {
                            let _ = tx.send(OwnedEvent::of(ev));
                        };
                        let r = engine.build_stage(plan, built, i, &mut send);
                        engine.release_pod_locks();
                        r.map(|img| (i, img))
                    })
                })
                .collect();
            drop(tx);
            for ev in rx {
                ev.tell(on);
            }
            let mut out = Vec::new();
            let mut first_error = None;
            for h in handles {
                match h.join() {
                    Ok(Ok(r)) => out.push(r),
                    Ok(Err(e)) => {
                        first_error.get_or_insert(e);
                    }
                    Err(_) => {
                        first_error.get_or_insert(Error::Invalid(
                            "a stage's build thread panicked".into(),
                        ));
                    }
                }
            }
            match first_error {
                Some(e) => Err(e),
                None => Ok(out),
            }
        })
    }

    /// A build context sent as a tar, possibly compressed (the Docker API's request body,
    /// `wharf build -`): unpacked, with root's owners and `wharf cp`'s path safety, into a
    /// private directory under the state root, removed when the value is dropped.
    pub fn unpack_context(&self, archive: impl std::io::Read) -> Result<tempfile::TempDir> {
        let what = || "unpacking the build context".to_string();
        let dir = tempfile::Builder::new()
            .prefix("build-context-")
            .tempdir_in(&self.paths.root)
            .ctx(what)?;
        let fd = std::fs::File::open(dir.path()).ctx(what)?;
        let r = wharf_image::pull::decompress(std::io::BufReader::new(archive)).ctx(what)?;
        wharf_image::tree_tar::extract(
            std::os::fd::AsFd::as_fd(&fd),
            r,
            wharf_image::tree_tar::Owners::Root,
        )
        .ctx(what)?;
        Ok(dir)
    }

    /// The ONBUILD triggers of the stage's base, parsed, removed from its config.
    fn take_triggers(
        &self,
        st: &mut StageState,
        file: &str,
        line: usize,
    ) -> Result<Vec<wharf_build::Instruction>> {
        let Some(Value::Array(list)) = st.config.remove("OnBuild") else {
            return Ok(Vec::new());
        };
        let mut out = Vec::new();
        for t in list.iter().filter_map(Value::as_str) {
            let df = wharf_build::parse(&format!("FROM scratch\n{t}\n"), file).map_err(|e| {
                Error::Invalid(format!("{file}:{line}: the base's ONBUILD {t:?}: {e}"))
            })?;
            out.extend(
                df.stages
                    .into_iter()
                    .flat_map(|s| s.instructions)
                    .map(|mut i| {
                        i.line = line;
                        i
                    }),
            );
        }
        Ok(out)
    }

    /// The values of the ARGs declared before the first FROM.
    fn global_args(
        &self,
        df: &Dockerfile,
        req: &BuildRequest,
    ) -> Result<BTreeMap<String, Option<String>>> {
        // BuildKit's platform ARGs: set before the first FROM, seen by a stage that
        // declares them (`ARG TARGETARCH`).
        let mut global: BTreeMap<String, Option<String>> = platform_args()
            .into_iter()
            .map(|(k, v)| (k.to_string(), Some(v)))
            .collect();
        for a in &df.global_args {
            let v = match req.build_args.get(&a.name) {
                Some(v) => Some(v.clone()),
                None => a
                    .default
                    .as_ref()
                    .map(|d| {
                        wharf_build::expand::expand(d, df.escape, &|n| {
                            global.get(n).cloned().flatten()
                        })
                    })
                    .transpose()
                    .map_err(build_error)?,
            };
            global.insert(a.name.clone(), v);
        }
        Ok(global)
    }

    /// The image a stage starts from: an earlier stage, or an image ([`Engine::fetch_images`]
    /// pulled it before the build began, with `--pull` anew).
    fn stage_base(
        &self,
        df: &Dockerfile,
        built: &[Option<Image>],
        index: usize,
        from: &str,
        on: &mut dyn FnMut(StepEvent<'_>),
    ) -> Result<Image> {
        if let Some(j) = stage_index(df, from).filter(|j| *j < index)
            && let Some(img) = built.get(j).cloned().flatten()
        {
            return Ok(img);
        }
        if from == "scratch" {
            let img = self.images.scratch()?;
            // Kept with the step images (hidden from listings as they are).
            self.remember(&cache::key(&img, "FROM scratch", &[]), &img);
            return Ok(img);
        }
        if let Ok(img) = self.images.resolve(from) {
            return Ok(img);
        }
        // Only when it went since (another process removed it).
        on(StepEvent::Pulling(from));
        Ok(self
            .images
            .pull(from, &wharf_image::PullOptions::default(), &())?)
    }

    /// Pull the images the needed stages start from and copy or mount from, when missing
    /// (all of them with `--pull`). References that use a stage's own ARGs are left to
    /// their step.
    fn fetch_images(
        &self,
        df: &Dockerfile,
        req: &BuildRequest,
        global: &BTreeMap<String, Option<String>>,
        needed: &[bool],
        on: &mut dyn FnMut(BuildEvent<'_>),
    ) -> Result<()> {
        let expand = |w: &str| {
            wharf_build::expand::expand(w, df.escape, &|n| global.get(n).cloned().flatten()).ok()
        };
        let mut names: Vec<(usize, String)> = Vec::new();
        for (i, stage) in df.stages.iter().enumerate() {
            if !needed.get(i).copied().unwrap_or(false) {
                continue;
            }
            let is_stage =
                |w: &str| stage_index(df, w).is_some_and(|j| j < i) || w.parse::<usize>().is_ok();
            let from = wharf_build::expand::expand(&stage.from, df.escape, &|n| {
                global.get(n).cloned().flatten()
            })
            .map_err(|e| {
                Error::Invalid(format!("{}:{}: FROM: {e}", req.dockerfile_name, stage.line))
            })?;
            if from.is_empty() {
                return Err(Error::Invalid(format!(
                    "{}:{}: FROM {}: the base image's name is empty",
                    req.dockerfile_name, stage.line, stage.from
                )));
            }
            if from != "scratch" && !is_stage(&from) {
                names.push((stage.line, from));
            }
            for (line, f) in stages::copied_from(stage) {
                // Only what expands without the stage's own variables.
                if f.contains('$') && expand(f).is_none_or(|e| e.is_empty()) {
                    continue;
                }
                if let Some(name) =
                    expand(f).filter(|n| !is_stage(n) && stage_index(df, n).is_none())
                {
                    names.push((line, name));
                }
            }
        }
        let mut seen = std::collections::HashSet::new();
        for (line, name) in names {
            if !seen.insert(name.clone()) {
                continue;
            }
            if !req.pull && self.images.resolve(&name).is_ok() {
                continue;
            }
            on(BuildEvent::Pulling(&name));
            self.images
                .pull(&name, &wharf_image::PullOptions::default(), &())
                .map_err(|e| {
                    Error::Invalid(format!(
                        "{}:{line}: {name}: the image could not be pulled: {e}",
                        req.dockerfile_name
                    ))
                })?;
        }
        Ok(())
    }

    /// Run one instruction of a stage.
    #[allow(clippy::too_many_arguments)]
    fn step(
        &self,
        df: &Dockerfile,
        req: &BuildRequest,
        global: &BTreeMap<String, Option<String>>,
        built: &[Option<Image>],
        st: &mut StageState,
        ins: &wharf_build::Instruction,
        on: &mut dyn FnMut(StepEvent<'_>),
    ) -> Result<()> {
        match &ins.kind {
            Kind::Run {
                command,
                heredocs,
                mounts,
                network,
            } => {
                // `RUN --network=none|host|default` overrides the build's for the step.
                let network = match network.as_deref() {
                    None => None,
                    Some("default") => Some(NetworkMode::Default),
                    Some("none") => Some(NetworkMode::None),
                    Some("host") => Some(NetworkMode::Host),
                    Some(n) => {
                        return Err(Error::Invalid(format!(
                            "RUN --network={n}: use default, none or host"
                        )));
                    }
                };
                let spec = run::RunSpec {
                    command,
                    heredocs,
                    mounts,
                    network: network.as_ref(),
                };
                self.run_step(df, req, built, st, &spec, on)
            }
            Kind::Copy {
                add,
                from,
                chown,
                chmod,
                sources,
                heredocs,
                dest,
                ..
            } => {
                let spec = copy::CopySpec {
                    add: *add,
                    from: from.as_deref(),
                    chown: chown.as_deref(),
                    chmod: chmod.as_deref(),
                    sources,
                    heredocs,
                    dest,
                    text: &ins.text,
                };
                self.copy_step(df, req, built, st, &spec, on)
            }
            Kind::Arg(decls) => {
                for a in decls {
                    let v = match req.build_args.get(&a.name) {
                        Some(v) => Some(v.clone()),
                        None => match &a.default {
                            Some(d) => Some(st.expand(df, d)?),
                            None => global.get(&a.name).cloned().flatten(),
                        },
                    };
                    st.args.insert(a.name.clone(), v);
                }
                self.config_step(req, st, &ins.text, |_| Ok(()), on)
            }
            _ => {
                let kind = ins.kind.clone();
                let expanded = config::Expanded::of(df, st, &kind)?;
                if matches!(kind, Kind::Cmd(_)) {
                    st.cmd_set = true;
                }
                let cmd_set = st.cmd_set;
                self.config_step(
                    req,
                    st,
                    &ins.text,
                    |c| config::apply(c, &kind, &expanded, cmd_set),
                    on,
                )
            }
        }
    }

    /// A step that changes only the config: an image with the same layers.
    fn config_step(
        &self,
        req: &BuildRequest,
        st: &mut StageState,
        text: &str,
        change: impl FnOnce(&mut Map<String, Value>) -> Result<()>,
        on: &mut dyn FnMut(StepEvent<'_>),
    ) -> Result<()> {
        let mut next = st.config.clone();
        change(&mut next)?;
        let created_by = config::nop(text);
        let key = cache::key(&st.image, &created_by, &[]);
        if let Some(img) = self.cache_hit(req, &key, on) {
            st.config = next;
            st.image = img;
            return Ok(());
        }
        let img = self.images.derive(
            &st.image,
            None::<std::io::Empty>,
            &DeriveOptions {
                config: Some(&next),
                created_by: &created_by,
                created: req.source_date_epoch,
                ..Default::default()
            },
        )?;
        self.remember(&key, &img);
        st.config = next;
        st.image = img;
        Ok(())
    }
}
