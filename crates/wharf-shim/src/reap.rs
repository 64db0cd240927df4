//! Cleaning up after a shim that died (SIGKILL, OOM killer, crash).
//!
//! A shim's containers are its children, but nothing makes them die with it: the runtime's
//! exec model clears PR_SET_PDEATHSIG (credentials change on the way to the user's program),
//! and killing a pod's containers because a supervisor crashed is a policy decision anyway.
//! So when the engine finds a shim dead (its socket refuses connections, `shim.pid` names a
//! process that is gone), it calls [`reap_dead_shim`], which:
//!
//! 1. kills the pod's minimal init, if one was started (a pid namespace dies with its init;
//!    the init also has PDEATHSIG set, so it normally died with the shim already);
//! 2. for every container of the state directory: kills what is left of it (runtime
//!    `delete --force`: the init, then every process of its cgroup), removes its cgroup
//!    and runtime state;
//! 3. records an exit for each container that has none for its last run: reason
//!    `ShimDied`, signal 9 if it was still running (it was killed here), or an unknown
//!    status (code 255) if it had exited while nobody watched;
//! 4. removes the socket and pid file.
//!
//! Containers whose exit the shim had recorded keep that record.
//!
//! A record that does not parse counts as absent here. The records are not synced (see
//! [`records`]): after a crash of the machine, a runtime directory on a disk may hold one
//! torn, and the shim that wrote it is dead like everything else. A container with a torn
//! status or exit record gets an exit written here whose message says so. The runtime's
//! state.json is not synced either: where it is torn, the container's spec record names
//! the bundle whose config says which cgroup to empty and remove
//! ([`Runtime::delete_unreadable`]).

use std::path::Path;

use wharf_runtime::{Runtime, Status as RtStatus};

use crate::error::{Result, ShimError};
use crate::protocol::{ExitRecord, Status};
use crate::records::{self, ContainerRecord, StateDir};

/// One container after the cleanup.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reaped {
    /// Container id.
    pub id: String,
    /// Its last exit (recorded by the shim, or written now).
    pub exit: ExitRecord,
    /// It was still running and has been killed now.
    pub killed: bool,
}

/// Clean up after the dead shim of `state_dir` (see the module docs). Fails with
/// [`ShimError::StillRunning`] if the shim is in fact alive.
pub fn reap_dead_shim(state_dir: &Path, runtime_root: &Path) -> Result<Vec<Reaped>> {
    let sd = StateDir::new(state_dir);
    if sd.shim_alive() {
        let pid = sd.shim_pid().map(|(p, _)| p).unwrap_or(0);
        return Err(ShimError::StillRunning(state_dir.to_path_buf(), pid));
    }
    // A torn pod record only loses the pause to kill, which died with the machine.
    if let Some((pid, start)) = unless_torn(sd.pod(), &mut false)?.and_then(|p| p.pause) {
        kill_if_same(pid, start);
    }
    let rt = Runtime::new(runtime_root);
    let mut out = Vec::new();
    for id in sd.container_ids()? {
        let mut torn = false;
        let record = unless_torn(sd.status(&id), &mut torn)?;
        let killed = match rt.state(&id) {
            Ok((_, status)) => {
                rt.delete(&id, true).map_err(|e| {
                    ShimError::Runtime(format!("delete container {id} of a dead shim: {e}"))
                })?;
                status != RtStatus::Stopped
            }
            // Not in the runtime (never created, or deleted): a recorded pid that still runs
            // would be a leak; kill it.
            Err(wharf_runtime::Error::NotFound(_)) => kill_recorded(record.as_ref()),
            Err(wharf_runtime::Error::CorruptState(why)) => {
                // The runtime's state is torn too: its bundle's config names the cgroup.
                torn = true;
                let bundle = unless_torn(sd.spec(&id), &mut torn)?
                    .ok_or_else(|| {
                        ShimError::Runtime(format!(
                            "delete container {id} of a dead shim: corrupt state file {why}, \
                             and no readable spec record names its bundle"
                        ))
                    })?
                    .bundle;
                let killed = kill_recorded(record.as_ref());
                let running = rt.delete_unreadable(&id, &bundle).map_err(|e| {
                    ShimError::Runtime(format!("delete container {id} of a dead shim: {e}"))
                })?;
                killed || running
            }
            Err(e) => {
                return Err(ShimError::Runtime(format!(
                    "state of container {id} of a dead shim: {e}"
                )));
            }
        };
        let recorded = match (&record, unless_torn(sd.exit(&id), &mut torn)?) {
            (Some(r), Some(exit)) if r.status == Status::Exited => Some(exit),
            _ => None,
        };
        let exit = match recorded {
            Some(e) => e,
            None => {
                let never_started = record
                    .as_ref()
                    .is_none_or(|r| matches!(r.status, Status::Waiting | Status::Created));
                let exit = ExitRecord {
                    exit_code: if killed { 137 } else { 255 },
                    signal: killed.then_some(libc::SIGKILL),
                    started_at: record.as_ref().and_then(|r| r.started_at.clone()),
                    finished_at: wharf_sys::time::now_rfc3339_nano(),
                    oom_killed: false,
                    reason: "ShimDied".into(),
                    message: Some(if torn {
                        format!(
                            "the pod's shim died and its records of the container were \
                             unreadable; {}",
                            if killed {
                                "the container was killed during cleanup"
                            } else {
                                "its exit status is unknown"
                            }
                        )
                    } else if never_started {
                        "the pod's shim died before the container was started".into()
                    } else if killed {
                        "the pod's shim died; the container was killed during cleanup".into()
                    } else {
                        "the container exited while its shim was not running; \
                         its exit status is unknown"
                            .into()
                    }),
                };
                sd.write_exit(&id, &exit)?;
                exit
            }
        };
        let rec = ContainerRecord {
            status: Status::Exited,
            pid: None,
            pid_start_time: None,
            restart_count: record.as_ref().map_or(0, |r| r.restart_count),
            started_at: record.and_then(|r| r.started_at),
            restart_pending: false,
            backing_off: false,
        };
        sd.write_status(&id, &rec)?;
        out.push(Reaped { id, exit, killed });
    }
    let _ = std::fs::remove_file(state_dir.join(records::SOCKET));
    let _ = std::fs::remove_file(state_dir.join(records::PID_FILE));
    Ok(out)
}

/// A record read, one that does not parse taken as absent (see the module docs) and
/// `torn` set.
fn unless_torn<T>(read: Result<Option<T>>, torn: &mut bool) -> Result<Option<T>> {
    match read {
        Err(ShimError::Corrupt(_)) => {
            *torn = true;
            Ok(None)
        }
        other => other,
    }
}

/// SIGKILL the container's process that `record` names, if it still runs; true if
/// signalled.
fn kill_recorded(record: Option<&ContainerRecord>) -> bool {
    match record {
        Some(ContainerRecord {
            pid: Some(pid),
            pid_start_time: Some(start),
            ..
        }) => kill_if_same(*pid, *start),
        _ => false,
    }
}

/// SIGKILL `pid` if it is still the process that started at `start`; true if signalled.
fn kill_if_same(pid: i32, start: u64) -> bool {
    let Some(p) = rustix::process::Pid::from_raw(pid) else {
        return false;
    };
    let Ok(pidfd) = rustix::process::pidfd_open(p, rustix::process::PidfdFlags::empty()) else {
        return false;
    };
    // The pidfd pins the process: checked, it cannot be replaced before the signal.
    if !records::process_is(pid, start) {
        return false;
    }
    rustix::process::pidfd_send_signal(&pidfd, rustix::process::Signal::KILL).is_ok()
}
