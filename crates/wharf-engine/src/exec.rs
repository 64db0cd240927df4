//! The process of an `exec`: the container's own process settings, from its bundle, with the
//! request's changes.

use std::path::Path;

use oci_spec::runtime::{LinuxCapabilitiesBuilder, Process};

use crate::error::{Error, Result};

/// A process to start in a running container (`exec`): the container's own process
/// settings (user, environment, capabilities, working directory) with these changes.
#[derive(Debug, Clone, Default)]
pub struct ExecRequest {
    /// Program and arguments.
    pub command: Vec<String>,
    /// Variables set or replaced.
    pub env: Vec<(String, String)>,
    /// `user[:group]`, names or ids, resolved in the container's /etc/passwd and /etc/group.
    pub user: Option<String>,
    /// Working directory.
    pub workdir: Option<String>,
    /// A terminal.
    pub tty: bool,
    /// Keep stdin open.
    pub stdin: bool,
    /// Every capability.
    pub privileged: bool,
}

/// The process of the container's config.json in `bundle`.
pub(crate) fn container_process(bundle: &Path, name: &str) -> Result<Process> {
    let path = bundle.join("config.json");
    let text = std::fs::read(&path).map_err(|err| Error::Os {
        what: format!("container {name}: read {}", path.display()),
        err,
    })?;
    let spec: oci_spec::runtime::Spec = serde_json::from_slice(&text).map_err(|e| {
        Error::Other(format!(
            "container {name}: its config.json is not valid: {e}"
        ))
    })?;
    spec.process()
        .clone()
        .ok_or_else(|| Error::Other(format!("container {name}: its config.json has no process")))
}

/// `base` with the request's command, terminal, working directory, environment, user (looked
/// up below `rootfs`, the running container's root) and capabilities.
pub(crate) fn process(
    mut p: Process,
    req: &ExecRequest,
    name: &str,
    rootfs: &Path,
) -> Result<Process> {
    if req.command.is_empty() {
        return Err(Error::Invalid(format!(
            "exec in container {name}: no command given"
        )));
    }
    p.set_args(Some(req.command.clone()));
    p.set_terminal(Some(req.tty));
    if let Some(w) = &req.workdir {
        p.set_cwd(w.into());
    }
    let mut env = p.env().clone().unwrap_or_default();
    for (k, v) in &req.env {
        env.retain(|x| x.split_once('=').map_or(x.as_str(), |(n, _)| n) != k);
        env.push(format!("{k}={v}"));
    }
    p.set_env(Some(env));
    if let Some(u) = &req.user {
        // Names and ids as `run -u` takes them, from the container's own /etc/passwd and
        // /etc/group (a uid it does not know gets gid 0, as with docker).
        let (uid, gid, _) = crate::specgen::resolve_user(rootfs, u)
            .map_err(|e| Error::CannotExecute(format!("exec in container {name}: {e}")))?;
        let mut user = p.user().clone();
        user.set_uid(uid);
        user.set_gid(gid);
        let groups = crate::specgen::supplementary_groups(
            rootfs,
            uid,
            gid,
            &crate::model::ContainerSpec::default(),
        )
        .map_err(|e| Error::CannotExecute(format!("exec in container {name}: {e}")))?;
        user.set_additional_gids(Some(groups));
        p.set_user(user);
    }
    if req.privileged {
        // Every capability the engine holds (as `run --privileged`).
        let held = crate::specgen::bounding_set();
        let all: std::collections::HashSet<_> = wharf_runtime::caps::NAMES
            [..=wharf_runtime::caps::last_cap() as usize]
            .iter()
            .enumerate()
            .filter(|(i, _)| held & (1u64 << i) != 0)
            // By their OCI names (CAP_...), as config.json spells them.
            .filter_map(|(_, n)| serde_json::from_value(serde_json::json!(n)).ok())
            .collect();
        let caps = LinuxCapabilitiesBuilder::default()
            .bounding(all.clone())
            .effective(all.clone())
            .permitted(all)
            .build()
            .map_err(|e| Error::Other(format!("exec in container {name}: capabilities: {e}")))?;
        p.set_capabilities(Some(caps));
    }
    Ok(p)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A container root with an /etc/passwd and /etc/group.
    fn rootfs() -> tempfile::TempDir {
        crate::specgen::tests::rootfs_with(
            "root:x:0:0::/root:/bin/sh\nweb:x:33:44::/srv:/bin/sh\n",
            "root:x:0:\nwww:x:44:\nstaff:x:50:web\n",
        )
    }

    fn base() -> Process {
        serde_json::from_value(serde_json::json!({
            "args": ["sleep", "1000"], "cwd": "/srv", "user": {"uid": 5, "gid": 6},
            "env": ["PATH=/bin", "A=1"],
            "capabilities": {"bounding": ["CAP_CHOWN"], "effective": ["CAP_CHOWN"],
                             "permitted": ["CAP_CHOWN"]}
        }))
        .unwrap()
    }

    #[test]
    fn the_request_changes_the_containers_process() {
        let req = ExecRequest {
            command: vec!["sh".into()],
            env: vec![("A".into(), "2".into()), ("B".into(), "3".into())],
            user: Some("7:8".into()),
            workdir: Some("/tmp".into()),
            tty: true,
            ..Default::default()
        };
        let root = rootfs();
        let p = process(base(), &req, "c", root.path()).unwrap();
        assert_eq!(p.args().as_deref(), Some(&["sh".to_string()][..]));
        assert_eq!(p.cwd(), Path::new("/tmp"));
        assert_eq!(p.terminal(), Some(true));
        assert_eq!(
            p.env().as_deref(),
            Some(&["PATH=/bin".to_string(), "A=2".into(), "B=3".into()][..])
        );
        assert_eq!((p.user().uid(), p.user().gid()), (7, 8));
        // Unchanged: the container's capabilities.
        let caps = p.capabilities().as_ref().unwrap();
        assert_eq!(caps.bounding().as_ref().unwrap().len(), 1);
    }

    #[test]
    fn privileged_gets_every_capability_and_bad_users_are_refused() {
        let req = ExecRequest {
            command: vec!["id".into()],
            privileged: true,
            user: Some("9".into()),
            ..Default::default()
        };
        let root = rootfs();
        let p = process(base(), &req, "c", root.path()).unwrap();
        let n = p
            .capabilities()
            .as_ref()
            .unwrap()
            .bounding()
            .as_ref()
            .unwrap()
            .len();
        let held = crate::specgen::bounding_set();
        let held = (0..=wharf_runtime::caps::last_cap())
            .filter(|i| held & (1u64 << i) != 0)
            .count();
        assert_eq!(n, held);
        // A uid the container's /etc/passwd does not know gets gid 0 (docker's).
        assert_eq!((p.user().uid(), p.user().gid()), (9, 0));
        // Names, from the container's files, with the user's groups.
        for (user, want) in [
            ("web", (33, 44, vec![44, 50])),
            ("web:staff", (33, 50, vec![50])),
            ("33", (33, 44, vec![44, 50])),
        ] {
            let req = ExecRequest {
                command: vec!["id".into()],
                user: Some(user.into()),
                ..Default::default()
            };
            let p = process(base(), &req, "c", root.path()).unwrap();
            let u = p.user();
            assert_eq!(
                (u.uid(), u.gid(), u.additional_gids().clone().unwrap()),
                want,
                "{user}"
            );
        }
        for (bad, why) in [
            (
                "nobody",
                "user \"nobody\" not found in the image's /etc/passwd",
            ),
            ("1:x", "group \"x\" not found in the image's /etc/group"),
        ] {
            let req = ExecRequest {
                command: vec!["id".into()],
                user: Some(bad.into()),
                ..Default::default()
            };
            let e = process(base(), &req, "web", root.path())
                .unwrap_err()
                .to_string();
            assert!(
                e.contains("exec in container web: ") && e.contains(why),
                "{e}"
            );
        }
        let e = process(base(), &ExecRequest::default(), "web", root.path()).unwrap_err();
        assert!(e.to_string().contains("no command"), "{e}");
    }
}
