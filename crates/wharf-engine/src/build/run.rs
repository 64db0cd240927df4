//! RUN: a container of the image so far runs the command; its writable layer becomes the
//! step's layer.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use serde_json::Value;
use wharf_build::{Command, HereDoc};
use wharf_image::commit::DeriveOptions;

use super::{BuildRequest, StageState, StepEvent, argv_of, cache, config};
use crate::db::ContainerRow;
use crate::engine::Engine;
use crate::error::{Context, Error, Result};
use crate::model::{ContainerSpec, NetworkMode, PodSpec};
use crate::operations::PodChoice;
use crate::session::{Output, SessionEnd};

/// Removes a step's container (and the pod made for it) however the step ends.
pub(super) struct StepContainer<'e> {
    engine: &'e Engine,
    pub(super) row: ContainerRow,
}

impl Drop for StepContainer<'_> {
    fn drop(&mut self) {
        let _ = self.engine.remove(&self.row.id, true);
    }
}

/// A RUN as written.
pub(super) struct RunSpec<'a> {
    pub command: &'a Command,
    pub heredocs: &'a [HereDoc],
    pub mounts: &'a [wharf_build::RunMount],
    /// `RUN --network=`: the build's network otherwise.
    pub network: Option<&'a NetworkMode>,
}

impl Engine {
    /// A created (not started) container of the stage's image, running `argv`.
    pub(super) fn step_container(
        &self,
        network: &NetworkMode,
        st: &StageState,
        argv: Vec<String>,
        env: Vec<(String, String)>,
        mounts: Vec<crate::model::VolumeMount>,
    ) -> Result<StepContainer<'_>> {
        let spec = ContainerSpec {
            mounts,
            image: st.image.id.to_string(),
            entrypoint: Some(argv),
            command: Some(Vec::new()),
            env,
            workdir: st.workdir().map(str::to_string),
            user: st
                .config
                .get("User")
                .and_then(Value::as_str)
                .filter(|u| !u.is_empty())
                .map(str::to_string),
            ..Default::default()
        };
        let pod = PodSpec {
            network: network.clone(),
            ..Default::default()
        };
        let row = self.create(PodChoice::Own(Box::new(pod)), &spec)?;
        let c = StepContainer { engine: self, row };
        // WORKDIR names a directory that may not exist yet: made now (0755, the USER's, as
        // BuildKit makes it), so it lands in this step's layer.
        if let Some(dir) = &spec.workdir {
            let rootfs = self.paths.rootfs(&c.row.id);
            // (A USER the image does not know fails the step's run itself, with its error.)
            let owner = spec
                .user
                .as_ref()
                .and_then(|u| crate::specgen::resolve_user(&rootfs, u).ok())
                .map_or((0, 0), |(uid, gid, _)| (u64::from(uid), u64::from(gid)));
            self.copy_in(
                &c.row.id,
                "/",
                dirs_tar(dir, owner, &rootfs)?.as_slice(),
                true,
            )?;
        }
        Ok(c)
    }

    /// Take the step container's layer as the next image of the stage.
    pub(super) fn commit_step(
        &self,
        req: &BuildRequest,
        st: &mut StageState,
        c: &StepContainer<'_>,
        created_by: &str,
        key: &str,
    ) -> Result<()> {
        let mut layer = self.spool_layer(&c.row)?;
        if let Some(epoch) = req.source_date_epoch {
            layer = super::epoch::clamp_mtimes(layer, epoch, &self.paths.root)
                .ctx(|| format!("{created_by}: clamping its times to SOURCE_DATE_EPOCH"))?;
        }
        let img = self.images.derive(
            &st.image,
            Some(std::io::BufReader::new(layer)),
            &DeriveOptions {
                config: Some(&st.config),
                created_by,
                created: req.source_date_epoch,
                ..Default::default()
            },
        )?;
        self.remember(key, &img);
        st.image = img;
        Ok(())
    }

    /// RUN.
    pub(super) fn run_step(
        &self,
        df: &wharf_build::Dockerfile,
        req: &BuildRequest,
        built: &[Option<wharf_image::Image>],
        st: &mut StageState,
        spec: &RunSpec<'_>,
        on: &mut dyn FnMut(StepEvent<'_>),
    ) -> Result<()> {
        let RunSpec {
            command,
            heredocs,
            mounts,
            network,
        } = spec;
        let command = match *command {
            Command::Shell(s) if !heredocs.is_empty() => Command::Shell(with_heredocs(s, heredocs)),
            c => c.clone(),
        };
        let argv = argv_of(&st.config, &command);
        // The build arguments a RUN sees, as environment (ENV wins over them).
        let env_keys: Vec<String> = config::env_of(&st.config)
            .into_iter()
            .map(|(k, _)| k)
            .collect();
        let args: Vec<(String, String)> = st
            .args
            .iter()
            .filter(|(k, _)| !env_keys.contains(k))
            .filter_map(|(k, v)| v.clone().map(|v| (k.clone(), v)))
            .collect();
        // Proxy settings given as build arguments reach RUN undeclared, and stay out of
        // its history entry (and so out of its cache key, as docker has it).
        let proxies: Vec<(String, String)> = req
            .build_args
            .iter()
            .filter(|(k, _)| super::PROXY_ARGS.contains(&k.as_str()))
            .filter(|(k, _)| !env_keys.contains(k) && !st.args.contains_key(*k))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        let mut created_by = argv.join(" ");
        if !args.is_empty() {
            let shown: Vec<String> = args.iter().map(|(k, v)| format!("{k}={v}")).collect();
            created_by = format!("|{} {} {created_by}", args.len(), shown.join(" "));
        }
        let prepared = self.run_mounts(df, req, built, st, mounts)?;
        let key = cache::key(&st.image, &created_by, &prepared.key);
        if let Some(img) = self.cache_hit(req, &key, on) {
            st.image = img;
            return Ok(());
        }
        let c = self.step_container(
            network.unwrap_or(&req.network),
            st,
            argv,
            [args, proxies].concat(),
            prepared.volumes.clone(),
        )?;
        // The mount points the runtime will have to make (none without mounts: a plain
        // RUN looks nothing up).
        let stubs = if prepared.volumes.is_empty() {
            None
        } else {
            let upper = self.images.container_rootfs(&c.row.id)?.upper_dir;
            Some((
                upper,
                self.mount_stubs(&self.paths.rootfs(&c.row.id), &prepared.volumes),
            ))
        };
        let (_, session) = self.start(&c.row.id, true)?;
        let mut session = session.ok_or_else(|| Error::Invalid("RUN: no output stream".into()))?;
        // Asked to stop: the step's process is killed, its stream then ends.
        let done = Arc::new(AtomicBool::new(false));
        if let Some(flag) = req.interrupt.clone() {
            let signaller = session.signaller();
            let done = done.clone();
            std::thread::spawn(move || {
                while !done.load(Ordering::Relaxed) {
                    if flag.load(Ordering::Relaxed) {
                        let _ = signaller.signal(libc::SIGKILL);
                        return;
                    }
                    std::thread::sleep(std::time::Duration::from_millis(50));
                }
            });
        }
        let mut code = None;
        loop {
            match session.stream.recv() {
                Ok(Some(Output::Stdout(b) | Output::Stderr(b))) => on(StepEvent::Output(&b)),
                Ok(Some(Output::Exit(rec))) => {
                    code = Some(rec.exit_code);
                    break;
                }
                Ok(None) | Err(_) => break,
            }
        }
        done.store(true, Ordering::Relaxed);
        let end = code.map_or(SessionEnd::Lost, SessionEnd::Exited);
        let code = self.session_exit(&session, end);
        if req.interrupted() {
            return Err(super::interrupted_error());
        }
        if code != 0 {
            let shown = match &command {
                Command::Shell(s) => format!("{} {s}", super::shell_of(&st.config).join(" ")),
                Command::Exec(v) => format!("{v:?}"),
            };
            return Err(Error::BuildStep {
                message: format!("The command '{shown}' returned a non-zero code: {code}"),
                code,
            });
        }
        // The mount points the runtime made leave the layer while still empty.
        if let Some((upper, paths)) = &stubs {
            for stub in paths {
                let _ = wharf_sys::contained::remove_empty_in_root(upper, stub);
            }
        }
        drop(prepared);
        self.commit_step(req, st, &c, &created_by, &key)
    }
}

/// A tar of the directories of `path` the root lacks.
fn dirs_tar(path: &str, owner: (u64, u64), rootfs: &std::path::Path) -> Result<Vec<u8>> {
    let what = || format!("WORKDIR {path}");
    let mut tar = tar::Builder::new(Vec::new());
    super::copy::append_dirs(&mut tar, path, owner, rootfs).ctx(what)?;
    tar.into_inner().ctx(what)
}

/// A shell-form RUN with here-documents as one script: the line, then each document and
/// its delimiter (`RUN <<EOF` alone runs the document itself).
fn with_heredocs(line: &str, docs: &[HereDoc]) -> String {
    // `RUN <<EOF` (the marker alone): the document is the script.
    let rest: String = line
        .split_whitespace()
        .filter(|w| !w.starts_with("<<"))
        .collect();
    if rest.is_empty() || docs.iter().all(|d| d.name.is_empty()) {
        return docs.iter().map(|d| d.body.as_str()).collect();
    }
    let mut script = line.to_string();
    script.push('\n');
    for d in docs {
        script.push_str(&d.body);
        script.push_str(&d.name);
        script.push('\n');
    }
    script
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn heredoc_scripts() {
        let doc = |b: &str| HereDoc {
            body: b.into(),
            expand: true,
            name: "EOF".into(),
        };
        assert_eq!(with_heredocs("", &[doc("echo a\n")]), "echo a\n");
        assert_eq!(with_heredocs("<<EOF", &[doc("echo a\n")]), "echo a\n");
        assert_eq!(
            with_heredocs("cat <<EOF > /x", &[doc("hi\n")]),
            "cat <<EOF > /x\nhi\nEOF\n"
        );
    }
}
