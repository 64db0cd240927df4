//! `wharf generate systemd`: a systemd unit that runs an existing container, for a user
//! who wants systemd to start it at boot, order it among other units and restart it, as
//! podman's `generate systemd` and docker's documented `docker start -a` units do.
//!
//! The unit's main process is `wharf start --attach NAME`, which lives as long as the
//! container and exits with its code, so `Restart=on-failure` sees the container fail.
//! The container itself stays its pod's shim's (outside the unit's cgroup); the unit's stop
//! is `wharf stop`. The container's own restart policy should be `no`: systemd restarts it.

use std::fmt::Write;
use std::path::Path;

/// What the unit says beyond the container.
pub struct UnitOptions<'a> {
    /// The wharf binary the unit runs.
    pub wharf: &'a Path,
    /// `--root` and `--run-dir` when they are not the defaults.
    pub root: Option<&'a Path>,
    pub run: Option<&'a Path>,
    /// systemd's `Restart=` (podman's --restart-policy).
    pub restart: &'a str,
    /// Seconds `wharf stop` waits before SIGKILL.
    pub stop_time: u64,
}

/// systemd's values of `Restart=`.
pub const RESTART_POLICIES: [&str; 7] = [
    "no",
    "on-success",
    "on-failure",
    "on-abnormal",
    "on-watchdog",
    "on-abort",
    "always",
];

/// The unit's file name: `container-NAME.service`, as podman names it.
pub fn unit_name(container: &str) -> String {
    format!("container-{container}.service")
}

/// The unit file of container `name` (id `id`).
pub fn unit(name: &str, id: &str, o: &UnitOptions<'_>) -> String {
    let mut wharf = quote(&o.wharf.display().to_string());
    if let Some(root) = o.root {
        write!(wharf, " --root {}", quote(&root.display().to_string())).unwrap();
    }
    if let Some(run) = o.run {
        write!(wharf, " --run-dir {}", quote(&run.display().to_string())).unwrap();
    }
    let name_arg = quote(name);
    format!(
        "# {unit}\n\
         # Made by `wharf generate systemd` for container {name} ({id}).\n\
         # The container's own restart policy should be \"no\": systemd restarts it.\n\
         [Unit]\n\
         Description=Wharf container {name}\n\
         Wants=network-online.target\n\
         After=network-online.target wharf-restore.service\n\
         \n\
         [Service]\n\
         Environment=WHARF_SYSTEMD_UNIT=%n\n\
         Restart={restart}\n\
         TimeoutStopSec={timeout}\n\
         ExecStart={wharf} start --attach {name_arg}\n\
         ExecStop={wharf} stop -t {time} {name_arg}\n\
         ExecStopPost=-{wharf} stop -t {time} {name_arg}\n\
         \n\
         [Install]\n\
         WantedBy=multi-user.target\n",
        unit = unit_name(name),
        restart = o.restart,
        timeout = o.stop_time + 60,
        time = o.stop_time,
    )
}

/// A word for an Exec line: as it is when systemd would read it so, else double-quoted.
fn quote(s: &str) -> String {
    if !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || "/._-:+=@,".contains(c))
    {
        s.to_string()
    } else {
        let escaped = s
            .replace('\\', "\\\\")
            .replace('"', "\\\"")
            .replace('%', "%%")
            .replace('$', "$$");
        format!("\"{escaped}\"")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_unit_starts_attached_stops_with_the_time_and_restarts_as_asked() {
        let o = UnitOptions {
            wharf: Path::new("/usr/local/bin/wharf"),
            root: None,
            run: None,
            restart: "on-failure",
            stop_time: 10,
        };
        let u = unit("web", "0123abcd", &o);
        assert!(u.starts_with("# container-web.service\n"), "{u}");
        for line in [
            "ExecStart=/usr/local/bin/wharf start --attach web",
            "ExecStop=/usr/local/bin/wharf stop -t 10 web",
            "Restart=on-failure",
            "TimeoutStopSec=70",
            "WantedBy=multi-user.target",
        ] {
            assert!(u.lines().any(|l| l == line), "{line} missing from:\n{u}");
        }
    }

    #[test]
    fn other_state_dirs_and_odd_names_are_carried_and_quoted() {
        let o = UnitOptions {
            wharf: Path::new("/opt/wharf bin/wharf"),
            root: Some(Path::new("/srv/wharf")),
            run: Some(Path::new("/run/w")),
            restart: "always",
            stop_time: 2,
        };
        let u = unit("a%b", "id", &o);
        assert!(
            u.contains(
                "ExecStart=\"/opt/wharf bin/wharf\" --root /srv/wharf --run-dir /run/w start --attach \"a%%b\"\n"
            ),
            "{u}"
        );
    }
}
