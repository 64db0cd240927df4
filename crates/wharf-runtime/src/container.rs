//! The container lifecycle: create, start, state, kill, delete, pause, resume.

use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};

use oci_spec::runtime::{LinuxNamespaceType, LinuxResources};

use crate::cgroups::{self, Cgroup};
use crate::error::{Context, Error, Result, p};
use crate::hooks::{self, HookState, Kind};
use crate::init::{self, InitArgs};
use crate::namespaces::{self, Plan, Restore};
use crate::process_attrs;
use crate::seccomp;
use crate::spec::{self, Bundle};
use crate::state::{self, ContainerState, FIFO, Status, Store};
use crate::sync::{self, Msg};
use crate::sys::{self, Forked};

/// Options of `create` (runc's flags of the same names).
#[derive(Debug, Default)]
pub struct CreateOptions {
    /// Bundle directory.
    pub bundle: PathBuf,
    /// Unix socket to send the pty master to (process.terminal).
    pub console_socket: Option<PathBuf>,
    /// An already connected console socket (used instead of `console_socket`).
    pub console: Option<OwnedFd>,
    /// File to write the init's pid to.
    pub pid_file: Option<PathBuf>,
    /// MS_MOVE + chroot instead of pivot_root.
    pub no_pivot: bool,
    /// Keep the caller's session keyring.
    pub no_new_keyring: bool,
    /// Pass fds 3..3+N to the container process.
    pub preserve_fds: u32,
}

/// A container init created by this process (and therefore, until this process exits, its
/// child: `run` waits on it).
#[derive(Debug)]
pub struct Created {
    /// Host pid of the init.
    pub pid: i32,
    /// pidfd of the init.
    pub pidfd: OwnedFd,
}

/// A runtime rooted at a state directory (runc's `--root`).
#[derive(Debug, Clone)]
pub struct Runtime {
    store: Store,
    systemd_cgroup: bool,
}

/// Default state root, as runc uses /run/runc.
pub const DEFAULT_ROOT: &str = "/run/wharf";

/// Undo list for a failed create.
struct Rollback<'a> {
    store: &'a Store,
    id: &'a str,
    cgroup: Option<Cgroup>,
    child: Option<i32>,
    armed: bool,
}

impl Drop for Rollback<'_> {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        if let Some(pid) = self.child {
            // SAFETY: our own child; kill and reap it so nothing of it lingers.
            unsafe {
                libc::kill(pid, libc::SIGKILL);
                libc::waitpid(pid, std::ptr::null_mut(), 0);
            }
        }
        if let Some(cg) = &self.cgroup {
            let _ = cg.signal_all(libc::SIGKILL);
            let _ = cg.destroy();
        }
        let _ = self.store.remove(self.id);
    }
}

impl Runtime {
    /// A runtime with its state under `root`.
    pub fn new(root: impl Into<PathBuf>) -> Self {
        Runtime {
            store: Store::new(root),
            systemd_cgroup: false,
        }
    }

    /// Ask for the systemd cgroup driver (not implemented: create fails with a clear error).
    pub fn with_systemd_cgroup(mut self, on: bool) -> Self {
        self.systemd_cgroup = on;
        self
    }

    /// The state store.
    pub fn store(&self) -> &Store {
        &self.store
    }

    /// Create container `id` from a bundle: when this returns, the init is fully set up and
    /// blocked until [`Runtime::start`].
    pub fn create(&self, id: &str, mut opts: CreateOptions) -> Result<Created> {
        if self.systemd_cgroup {
            return Err(Error::Unsupported(
                "the systemd cgroup driver (--systemd-cgroup) is not supported; use the cgroupfs driver".into(),
            ));
        }
        let bundle = spec::load_bundle(&opts.bundle)?;
        crate::log::debug(|| format!("create {id}: config loaded"));
        let proc_ = bundle.spec.process().as_ref();
        crate::lsm::check(
            proc_.and_then(|p| p.apparmor_profile().as_deref()),
            proc_.and_then(|p| p.selinux_label().as_deref()),
        )?;
        let dir = self.store.reserve(id)?;
        let mut rollback = Rollback {
            store: &self.store,
            id,
            cgroup: None,
            child: None,
            armed: true,
        };
        let layout = cgroups::detect()?;
        let linux = bundle.spec.linux().clone().unwrap_or_default();
        let cg = Cgroup::resolve(&layout, linux.cgroups_path().as_deref(), id)?;
        cg.create()?;
        crate::log::debug(|| "cgroup created".into());
        rollback.cgroup = Some(cg.clone());
        if let Some(res) = linux.resources() {
            cgroups::apply_resources(&cg, res)?;
        }
        let filter = match linux.seccomp() {
            Some(s) => Some(seccomp::compile(s)?),
            None => None,
        };
        let fifo_path = dir.join(FIFO);
        rustix::fs::mknodat(
            rustix::fs::CWD,
            &fifo_path,
            rustix::fs::FileType::Fifo,
            rustix::fs::Mode::from_raw_mode(0o622),
            0,
        )
        .ctx(|| format!("create {}", p(&fifo_path)))?;
        // Writable by the container's root even when that is an unprivileged host uid (user
        // namespaces); mknod applied the umask.
        rustix::fs::chmod(&fifo_path, rustix::fs::Mode::from_raw_mode(0o622))
            .ctx(|| format!("chmod {}", p(&fifo_path)))?;
        let fifo = rustix::fs::open(
            &fifo_path,
            rustix::fs::OFlags::PATH | rustix::fs::OFlags::CLOEXEC,
            rustix::fs::Mode::empty(),
        )
        .ctx(|| format!("open {}", p(&fifo_path)))?;
        let terminal = proc_.and_then(|p| p.terminal()).unwrap_or(false);
        let console = match (terminal, opts.console.take(), &opts.console_socket) {
            (false, _, _) => None,
            (true, Some(fd), _) => Some(fd),
            (true, None, Some(path)) => Some(crate::console::connect(path)?),
            (true, None, None) => {
                return Err(Error::Config(
                    "process.terminal is set: a console socket is required (--console-socket)"
                        .into(),
                ));
            }
        };
        let unified = cg.unified_fd();
        let plan = Plan::new(&bundle.spec, cg.v2 && unified.is_some())?;
        crate::dmz::memfd().ctx(|| "create the exec helper's memfd".into())?;
        let (parent_end, child_end) = sync::pair()?;
        let created = self.spawn_init(
            id,
            &bundle,
            &cg,
            &layout,
            &plan,
            unified.as_ref(),
            child_end,
            fifo,
            console,
            filter.as_ref(),
            &opts,
            &mut rollback,
        );
        let (mut pid, mut pidfd, placed) = created?;
        crate::log::debug(|| format!("init cloned: pid {pid}"));
        let channel = parent_end;
        let write_maps = |pid| {
            namespaces::write_id_maps(
                pid,
                linux.uid_mappings().as_deref().unwrap_or(&[]),
                linux.gid_mappings().as_deref().unwrap_or(&[]),
            )
        };
        if plan.intermediate {
            // The clone was the intermediate process: it joins and unshares, then clones
            // the init, which inherits the cgroups it is in now.
            cg.add_pid(pid, placed)?;
            channel
                .send(&Msg::Go)
                .ctx(|| "start the intermediate process".into())?;
            let (init, init_pidfd) = loop {
                match channel.recv_with_fd() {
                    Ok(Some((Msg::MapIds, _))) => {
                        write_maps(pid)?;
                        channel
                            .send(&Msg::IdsMapped)
                            .ctx(|| "resume the intermediate process".into())?;
                    }
                    Ok(Some((Msg::Pid(init), fd))) => break (init, fd),
                    Ok(Some((Msg::Failed(text), _))) => return Err(Error::Init(text)),
                    Ok(other) => {
                        return Err(Error::Init(format!(
                            "the intermediate process stopped without creating the init ({other:?})"
                        )));
                    }
                    Err(e) => return Err(Error::os("read the sync socket", e)),
                }
            };
            // SAFETY: reap the intermediate process, our child, which has exited.
            unsafe { libc::waitpid(pid, std::ptr::null_mut(), 0) };
            // The init's pid as this process sees it, from its pidfd (the intermediate's
            // number is its own pid namespace's).
            let (init, fd) = match init_pidfd {
                Some(fd) => (
                    sys::pidfd_pid(fd.as_fd()).ctx(|| "read the init's pid".into())?,
                    fd,
                ),
                None => {
                    let fd = rustix::process::pidfd_open(
                        rustix::process::Pid::from_raw(init).expect("positive pid"),
                        rustix::process::PidfdFlags::empty(),
                    )
                    .ctx(|| format!("open pidfd of the init {init}"))?;
                    (init, fd)
                }
            };
            rollback.child = Some(init);
            pid = init;
            pidfd = fd;
        } else if plan.clone_flags & libc::CLONE_NEWUSER as u64 != 0 {
            write_maps(pid)?;
            cg.add_pid(pid, placed)?;
        } else if !placed {
            // The init joins the v1 hierarchies itself (see Cgroup::join_self_v1).
            cg.add_pid_unified(pid)?;
        }
        crate::log::debug(|| "init joined its cgroups".into());
        if let Some(score) = proc_.and_then(|p| p.oom_score_adj()) {
            process_attrs::set_oom_score_adj(pid, score)?;
        }
        channel
            .send(&Msg::Go)
            .ctx(|| "start the container's init".into())?;
        let annotations = bundle.spec.annotations().clone().unwrap_or_default();
        let hooks_cfg = bundle.spec.hooks().as_ref();
        loop {
            match channel.recv() {
                Ok(Some(Msg::RunHooks)) => {
                    // prestart (runtime-spec 1.0) predates the "creating" status: it sees
                    // "created", as the 1.0 validation suite and crun expect.
                    let prestart = HookState::new(
                        id,
                        Status::Created,
                        Some(pid),
                        &bundle.dir,
                        annotations.clone(),
                    );
                    hooks::run_all(hooks_cfg, Kind::Prestart, &prestart.to_json())?;
                    let st = HookState::new(
                        id,
                        Status::Creating,
                        Some(pid),
                        &bundle.dir,
                        annotations.clone(),
                    );
                    hooks::run_all(hooks_cfg, Kind::CreateRuntime, &st.to_json())?;
                    channel
                        .send(&Msg::HooksDone)
                        .ctx(|| "resume the container's init".into())?;
                }
                Ok(Some(Msg::Ready)) => {
                    crate::log::debug(|| "init ready".into());
                    break;
                }

                Ok(Some(Msg::Failed(text))) => return Err(Error::Init(text)),
                Ok(Some(Msg::ExecFailed(errno, detail))) => {
                    return Err(Error::Exec {
                        program: program_of(&bundle.spec),
                        errno,
                        detail,
                    });
                }
                Ok(Some(other)) => {
                    return Err(Error::Other(format!(
                        "unexpected {other:?} from the container's init"
                    )));
                }
                Ok(None) => {
                    return Err(Error::Init(
                        "the container's init exited during setup without reporting why".into(),
                    ));
                }
                Err(e) => return Err(Error::os("read the sync socket", e)),
            }
        }
        let st = ContainerState {
            id: id.to_string(),
            bundle: bundle.dir.clone(),
            rootfs: bundle.rootfs.clone(),
            pid,
            init_start_time: sys::process_start_time(pid)
                .ctx(|| format!("read start time of pid {pid}"))?,
            created: wharf_sys::time::now_rfc3339_nano(),
            config: bundle.spec.clone(),
            cgroup: cg,
            private_pid_ns: plan.clone_flags & libc::CLONE_NEWPID as u64 != 0,
            shared_mount_ns: shared_mount_ns(&bundle.spec),
        };
        self.store.save(&st)?;
        crate::log::debug(|| "state saved".into());
        if let Some(pf) = &opts.pid_file {
            state::write_atomic(&absolute(pf), pid.to_string().as_bytes())?;
        }
        rollback.armed = false;
        Ok(Created { pid, pidfd })
    }

    #[allow(clippy::too_many_arguments)]
    fn spawn_init(
        &self,
        id: &str,
        bundle: &Bundle,
        cg: &Cgroup,
        layout: &cgroups::Layout,
        plan: &Plan,
        unified: Option<&OwnedFd>,
        child_end: sync::Channel,
        fifo: OwnedFd,
        console: Option<OwnedFd>,
        filter: Option<&seccomp::Filter>,
        opts: &CreateOptions,
        rollback: &mut Rollback<'_>,
    ) -> Result<(i32, OwnedFd, bool)> {
        // The init's mount namespace is copied from the small template where it can be
        // (see mount_template), with its rootfs and binds opened here beforehand.
        let template = if crate::mount_template::usable(&bundle.spec, opts.no_pivot) {
            crate::mount_template::open(self.store.root())
        } else {
            None
        };
        let prepared = crate::mount_sources::prepare(
            &bundle.spec,
            &bundle.dir,
            template.as_ref().map(|_| bundle.rootfs.as_path()),
        )?;
        // Namespaces that apply to children only are entered by the runtime just around the
        // clone, then left again.
        let _restore_pid = match &plan.join_pid {
            Some(fd) => {
                let r = Restore::save(LinuxNamespaceType::Pid)?;
                namespaces::join(LinuxNamespaceType::Pid, fd)?;
                Some(r)
            }
            None => None,
        };
        let _restore_time = if let Some(fd) = &plan.join_time {
            let r = Restore::save(LinuxNamespaceType::Time)?;
            namespaces::join(LinuxNamespaceType::Time, fd)?;
            Some(r)
        } else if plan.new_time {
            let r = Restore::save(LinuxNamespaceType::Time)?;
            let offsets = bundle
                .spec
                .linux()
                .as_ref()
                .and_then(|l| l.time_offsets().clone())
                .unwrap_or_default();
            namespaces::unshare_time(&offsets)?;
            Some(r)
        } else {
            None
        };
        // clone3 places the init in the unified hierarchy (on v2 and hybrid hosts alike).
        let cgroup_fd = unified.map(|f| f.as_fd());
        // Non-dumpable from birth: a container process sharing the init's pid namespace must
        // not reach the runtime's memory, fds or binary through /proc (CVE-2019-5736).
        let _ =
            rustix::process::set_dumpable_behavior(rustix::process::DumpableBehavior::NotDumpable);
        // SAFETY: the runtime is single-threaded (the library's contract for create).
        let flags = if plan.intermediate {
            0
        } else {
            plan.clone_flags
        };
        // An init in a user namespace finds its rootfs as its working directory (see
        // RootfsOptions::from_cwd): the runtime is in it for the clone, and back after.
        let nss = crate::spec::namespaces(&bundle.spec);
        let user_ns = nss.iter().any(|n| n.typ() == LinuxNamespaceType::User);
        let new_mount_ns = nss
            .iter()
            .any(|n| n.typ() == LinuxNamespaceType::Mount && n.path().is_none());
        let _back = if user_ns && new_mount_ns {
            Some(
                crate::sys::CwdGuard::enter(&bundle.rootfs)
                    .ctx(|| format!("enter the rootfs {}", crate::error::p(&bundle.rootfs)))?,
            )
        } else {
            None
        };
        // In the template just for the clone: the init (or the intermediate process, which
        // unshares the mount namespace) starts from it.
        let _in_template = template
            .as_ref()
            .map(crate::mount_template::Entered::enter)
            .transpose()?;
        // SAFETY: as above.
        let forked = unsafe { sys::clone_process(flags, cgroup_fd) }
            .ctx(|| "clone the container's init".into())?;
        match forked {
            (Forked::Child, _) => {
                if plan.intermediate
                    && let Err(e) = crate::intermediate::run(&child_end, plan)
                {
                    let _ = child_end.send(&Msg::Failed(e.to_string()));
                    sys::exit_now(1);
                }
                // Never returns: execs the container process or exits.
                init::run(InitArgs {
                    id,
                    bundle,
                    channel: child_end,
                    fifo,
                    console,
                    plan,
                    cgroup: cg,
                    self_join_cgroups: !plan.intermediate
                        && plan.clone_flags & libc::CLONE_NEWUSER as u64 == 0,
                    layout,
                    no_pivot: opts.no_pivot,
                    no_new_keyring: opts.no_new_keyring,
                    preserve_fds: opts.preserve_fds,
                    seccomp: filter,
                    dmz: crate::dmz::memfd().unwrap_or_else(|_| sys::exit_now(1)),
                    prepared: &prepared,
                })
            }
            (Forked::Parent { pid, pidfd }, placed) => {
                rollback.child = Some(pid);
                drop(child_end);
                Ok((pid, pidfd, placed))
            }
        }
    }

    /// Start a created container: release its init from the exec fifo and wait until it has
    /// exec'd the user's program (or report why it could not).
    pub fn start(&self, id: &str) -> Result<()> {
        let _lock = self.store.lock(id)?;
        let st = self.store.load(id)?;
        let dir = self.store.dir(id);
        match st.status(&dir) {
            Status::Created => {}
            Status::Stopped => {
                return Err(Error::State(
                    "cannot start a container that has stopped".into(),
                ));
            }
            Status::Running | Status::Paused => {
                return Err(Error::State(
                    "cannot start an already running container".into(),
                ));
            }
            Status::Creating => {
                return Err(Error::State(
                    "cannot start a container that is still being created".into(),
                ));
            }
        }
        // The pidfd first: opening the fifo releases the init, whose process may run, exit
        // and be reaped by its parent before this one looks at it again.
        let pidfd = rustix::process::pidfd_open(
            rustix::process::Pid::from_raw(st.pid).expect("positive pid"),
            rustix::process::PidfdFlags::empty(),
        )
        .ctx(|| format!("open pidfd of the container's init {}", st.pid))?;
        let fifo_path = dir.join(FIFO);
        let fifo = rustix::fs::open(
            &fifo_path,
            rustix::fs::OFlags::RDONLY | rustix::fs::OFlags::NONBLOCK | rustix::fs::OFlags::CLOEXEC,
            rustix::fs::Mode::empty(),
        )
        .ctx(|| format!("open {}", p(&fifo_path)))?;
        crate::log::debug(|| "start: fifo opened, waiting for the exec".into());
        let message = wait_exec(&fifo, &pidfd)?;
        crate::log::debug(|| "start: the init exec'd".into());
        let _ = std::fs::remove_file(&fifo_path);
        if let Some(text) = message {
            return Err(exec_failure(&st.config, text));
        }
        let hook_state = HookState::new(
            id,
            Status::Running,
            Some(st.pid),
            &st.bundle,
            st.annotations(),
        );
        for warning in hooks::run_all_warn(
            st.config.hooks().as_ref(),
            Kind::Poststart,
            &hook_state.to_json(),
        ) {
            crate::log::warn(&warning);
        }
        Ok(())
    }

    /// The container's state (runc's `state`).
    pub fn state(&self, id: &str) -> Result<(ContainerState, Status)> {
        let st = self.store.load(id)?;
        let status = st.status(&self.store.dir(id));
        Ok((st, status))
    }

    /// States of every container under the root.
    pub fn list(&self) -> Result<Vec<(ContainerState, Status)>> {
        let mut out = Vec::new();
        for id in self.store.ids()? {
            match self.state(&id) {
                Ok(s) => out.push(s),
                // Deleted meanwhile.
                Err(Error::NotFound(_)) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(out)
    }

    /// Send `signal` to the init, or to every process of the container with `all`.
    pub fn kill(&self, id: &str, signal: i32, all: bool) -> Result<()> {
        let st = self.store.load(id)?;
        let status = st.status(&self.store.dir(id));
        if status == Status::Stopped && !all {
            return Err(Error::State("container not running".into()));
        }
        if all {
            return st.cgroup.signal_all(signal);
        }
        let pidfd = rustix::process::pidfd_open(
            rustix::process::Pid::from_raw(st.pid).expect("positive pid"),
            rustix::process::PidfdFlags::empty(),
        )
        .map_err(|_| Error::State("container not running".into()))?;
        // The pidfd pins the process we checked: no signal can reach a reused pid.
        if sys::process_start_time(st.pid).ok() != Some(st.init_start_time) {
            return Err(Error::State("container not running".into()));
        }
        let sig = rustix::process::Signal::from_named_raw(signal)
            .ok_or_else(|| Error::Config(format!("invalid signal {signal}")))?;
        rustix::process::pidfd_send_signal(&pidfd, sig)
            .ctx(|| format!("send signal {signal} to the container's init {}", st.pid))?;
        // Unpause so the signal can be acted upon, as runc does for SIGKILL of a paused one.
        if status == Status::Paused && signal == libc::SIGKILL {
            let _ = st.cgroup.thaw();
        }
        Ok(())
    }

    /// Delete a container: refuses a running one unless `force` (then kills it first);
    /// removes its cgroup and state, and runs the poststop hooks.
    pub fn delete(&self, id: &str, force: bool) -> Result<()> {
        let st = match self.store.load(id) {
            Ok(st) => st,
            Err(Error::NotFound(_)) if force => {
                // A half-created container (no state file) still owns its directory.
                self.store.remove(id)?;
                return Ok(());
            }
            Err(e) => return Err(e),
        };
        let _lock = self.store.lock(id)?;
        let dir = self.store.dir(id);
        let status = st.status(&dir);
        // The runtime spec: deleting a container that is not stopped is an error with no
        // effect; --force kills it first. (runc also deletes a "created" container without
        // --force; engines kill or force first, so Wharf follows the spec.)
        if status != Status::Stopped && !force {
            return Err(Error::State(format!(
                "cannot delete container {id} that is not stopped: {status}"
            )));
        }
        if status != Status::Stopped {
            self.kill_and_wait(&st)?;
        }
        if !st.private_pid_ns {
            // Without a pid namespace of its own, the container's other processes survive
            // its init: kill them through the cgroup.
            let _ = st.cgroup.signal_all(libc::SIGKILL);
        }
        st.cgroup.destroy()?;
        if let Some(ns) = &st.shared_mount_ns {
            unmount_shared(ns, &st.rootfs)?;
        }
        self.store.remove(id)?;
        let hook_state = HookState::new(id, Status::Stopped, None, &st.bundle, st.annotations());
        for warning in hooks::run_all_warn(
            st.config.hooks().as_ref(),
            Kind::Poststop,
            &hook_state.to_json(),
        ) {
            crate::log::warn(&warning);
        }
        Ok(())
    }

    /// `delete --force` of a container whose state.json does not parse, with what that file
    /// would have said taken from the config of `bundle`, the one the container was created
    /// from: every process of the cgroup the config names is killed, the cgroup removed, and
    /// the state directory. Returns whether a process of the container was still there.
    ///
    /// Why a caller needs it: state.json is replaced by a rename and never synced, so a
    /// crash of the machine can tear it on a runtime root that is on a disk, and a plain
    /// `delete` then fails (as runc's does) and leaves the directory forever. After such a
    /// crash nothing of the container runs; the kill is for a state file damaged otherwise.
    /// A container whose state reads is deleted as [`Runtime::delete`] with force does it.
    /// Unlike that, no poststop hook runs: the config could have changed since the create.
    pub fn delete_unreadable(&self, id: &str, bundle: &Path) -> Result<bool> {
        match self.state(id) {
            Err(Error::CorruptState(_)) => {}
            Ok((_, status)) => {
                self.delete(id, true)?;
                return Ok(status != Status::Stopped);
            }
            Err(e) => return Err(e),
        }
        let _lock = self.store.lock(id)?;
        let (_, config) = spec::read_config(bundle)?;
        let linux = config.linux().clone().unwrap_or_default();
        let cg = Cgroup::resolve(&cgroups::detect()?, linux.cgroups_path().as_deref(), id)?;
        let running = !cg.pids()?.is_empty();
        cg.signal_all(libc::SIGKILL)?;
        cg.destroy()?;
        self.store.remove(id)?;
        Ok(running)
    }

    fn kill_and_wait(&self, st: &ContainerState) -> Result<()> {
        let Ok(pidfd) = rustix::process::pidfd_open(
            rustix::process::Pid::from_raw(st.pid).expect("positive pid"),
            rustix::process::PidfdFlags::empty(),
        ) else {
            return Ok(());
        };
        if sys::process_start_time(st.pid).ok() != Some(st.init_start_time) {
            return Ok(());
        }
        let _ = rustix::process::pidfd_send_signal(&pidfd, rustix::process::Signal::KILL);
        let _ = st.cgroup.thaw();
        // Bounded: a process stuck in the kernel (uninterruptible sleep) outlives SIGKILL,
        // and a delete must say so rather than hang its caller.
        if !wait_pidfd(&pidfd, Some(KILL_WAIT)) {
            return Err(Error::State(format!(
                "its init (pid {}) did not exit within {} s of SIGKILL (stuck in the kernel?)",
                st.pid,
                KILL_WAIT.as_secs()
            )));
        }
        Ok(())
    }

    /// Freeze every process of the container.
    pub fn pause(&self, id: &str) -> Result<()> {
        let _lock = self.store.lock(id)?;
        let (st, status) = self.state(id)?;
        if status != Status::Running && status != Status::Created {
            return Err(Error::State(format!("container not running: {status}")));
        }
        st.cgroup.freeze()
    }

    /// Thaw a paused container.
    pub fn resume(&self, id: &str) -> Result<()> {
        let _lock = self.store.lock(id)?;
        let (st, status) = self.state(id)?;
        if status != Status::Paused {
            return Err(Error::State("container not paused".into()));
        }
        st.cgroup.thaw()
    }

    /// Change the resources of a container that has not stopped (runc's `update`). `req` is
    /// merged into what the container has ([`cgroups::merge_resources`]: what it sets
    /// replaces, what it leaves out stays), written to the cgroup, and stored in state.json
    /// (`config.linux.resources`) so later commands see it. Returns the merged resources.
    pub fn update(&self, id: &str, req: &LinuxResources) -> Result<LinuxResources> {
        let _lock = self.store.lock(id)?;
        let mut st = self.store.load(id)?;
        if st.status(&self.store.dir(id)) == Status::Stopped {
            return Err(Error::State("container not running".into()));
        }
        let mut linux = st.config.linux().clone().unwrap_or_default();
        let old = linux.resources().clone().unwrap_or_default();
        let merged = cgroups::merge_resources(&old, req);
        if let Err(e) = cgroups::update_resources(&st.cgroup, &old, &merged) {
            // Put back what was written before the failing setting, as runc does.
            if let Err(undo) = cgroups::update_resources(&st.cgroup, &merged, &old) {
                crate::log::warn(&format!(
                    "update of {id} failed and its previous resources could not be restored: {undo}"
                ));
            }
            return Err(e);
        }
        linux.set_resources(Some(merged.clone()));
        st.config.set_linux(Some(linux));
        self.store.save(&st)?;
        Ok(merged)
    }

    /// Resource usage of the container's cgroup, in runc's `events --stats` format.
    pub fn stats(&self, id: &str) -> Result<cgroups::Stats> {
        self.store.load(id)?.cgroup.stats()
    }

    /// The limits the container's cgroup holds now, and its OOM-kill counter.
    pub fn limits(&self, id: &str) -> Result<cgroups::Limits> {
        self.store.load(id)?.cgroup.limits()
    }

    /// Pids of every process in the container's cgroup.
    pub fn pids(&self, id: &str) -> Result<Vec<i32>> {
        let st = self.store.load(id)?;
        st.cgroup.pids()
    }
}

/// What the init or the exec helper wrote into the fifo: a failed exec (an errno: the
/// program is the config's), or any other failure's text.
fn exec_failure(config: &oci_spec::runtime::Spec, text: String) -> Error {
    match crate::dmz::parse_failure(text.as_bytes()) {
        Some((errno, detail)) => Error::Exec {
            program: program_of(config),
            errno,
            detail,
        },
        None => Error::Init(text),
    }
}

/// The program a config runs (its args[0]).
pub(crate) fn program_of(config: &oci_spec::runtime::Spec) -> String {
    config
        .process()
        .as_ref()
        .and_then(|p| p.args().as_ref()?.first().cloned())
        .unwrap_or_default()
}

/// Wait for the init to exec (the fifo's write end closes with CLOEXEC) or to report an
/// error through the fifo, or to die before it ever opened the fifo.
fn wait_exec(fifo: &OwnedFd, pidfd: &OwnedFd) -> Result<Option<String>> {
    use rustix::event::{PollFd, PollFlags, poll};
    let mut data = Vec::new();
    let mut saw_writer = false;
    loop {
        let mut fds = [
            PollFd::new(fifo, PollFlags::IN),
            PollFd::new(pidfd, PollFlags::IN),
        ];
        match poll(&mut fds, None) {
            Ok(_) | Err(rustix::io::Errno::INTR) => {}
            Err(e) => return Err(Error::os("wait for the container to start", e)),
        }
        let fifo_ev = fds[0].revents();
        let died = !fds[1].revents().is_empty();
        if fifo_ev.contains(PollFlags::IN) {
            let mut buf = [0u8; 4096];
            match rustix::io::read(fifo, &mut buf) {
                Ok(0) if saw_writer => {
                    return Ok(
                        (!data.is_empty()).then(|| String::from_utf8_lossy(&data).into_owned())
                    );
                }
                Ok(0) => {}
                Ok(n) => data.extend_from_slice(&buf[..n]),
                Err(rustix::io::Errno::AGAIN) => {}
                Err(e) => return Err(Error::os("read the exec fifo", e)),
            }
            saw_writer = true;
            continue;
        }
        if fifo_ev.contains(PollFlags::HUP) {
            // The writer closed: exec succeeded (CLOEXEC) or it wrote why it failed.
            return Ok(if data.is_empty() {
                None
            } else {
                Some(String::from_utf8_lossy(&data).into_owned())
            });
        }
        if died && !saw_writer {
            return Err(Error::Init(
                "the container's init exited before it could be started".into(),
            ));
        }
        if died {
            return Ok((!data.is_empty()).then(|| String::from_utf8_lossy(&data).into_owned()));
        }
    }
}

/// How long a delete waits for a SIGKILLed init to exit.
const KILL_WAIT: std::time::Duration = std::time::Duration::from_secs(10);

/// Wait until the process behind `pidfd` exits (or `timeout` passes).
pub fn wait_pidfd(pidfd: &OwnedFd, timeout: Option<std::time::Duration>) -> bool {
    use rustix::event::{PollFd, PollFlags, poll};
    let ts = timeout.map(|d| rustix::time::Timespec {
        tv_sec: d.as_secs() as i64,
        tv_nsec: d.subsec_nanos() as i64,
    });
    loop {
        let mut fds = [PollFd::new(pidfd, PollFlags::IN)];
        match poll(&mut fds, ts.as_ref()) {
            Ok(0) => return false,
            Ok(_) => return true,
            Err(rustix::io::Errno::INTR) => continue,
            Err(_) => return false,
        }
    }
}

/// None when the container gets its own mount namespace; otherwise where its mounts live.
fn shared_mount_ns(spec: &oci_spec::runtime::Spec) -> Option<String> {
    let nss = spec::namespaces(spec);
    match nss.iter().find(|n| n.typ() == LinuxNamespaceType::Mount) {
        None => Some(String::new()),
        Some(n) => n.path().as_ref().map(|p| p.display().to_string()),
    }
}

/// Detach the rootfs bind (and every container mount below it) from the mount namespace the
/// container shared: the runtime's own, or one joined by path (entered by a short-lived
/// child so the runtime itself stays where it is).
fn unmount_shared(ns: &str, rootfs: &Path) -> Result<()> {
    let target = crate::mounts::path_cstr(rootfs);
    let detach = |target: &std::ffi::CStr| -> std::io::Result<()> {
        // SAFETY: umount2 with a valid path.
        match unsafe { libc::umount2(target.as_ptr(), libc::MNT_DETACH) } {
            0 => Ok(()),
            _ => match std::io::Error::last_os_error() {
                // Not a mount point (already gone, or never made): nothing to undo.
                e if e.raw_os_error() == Some(libc::EINVAL)
                    || e.raw_os_error() == Some(libc::ENOENT) =>
                {
                    Ok(())
                }
                e => Err(e),
            },
        }
    };
    if ns.is_empty() {
        return detach(&target).ctx(|| format!("unmount the container's rootfs {}", p(rootfs)));
    }
    let Ok(fd) = rustix::fs::open(
        ns,
        rustix::fs::OFlags::RDONLY | rustix::fs::OFlags::CLOEXEC,
        rustix::fs::Mode::empty(),
    ) else {
        // The namespace is gone, and its mounts with it.
        return Ok(());
    };
    let raw = std::os::fd::AsRawFd::as_raw_fd(&fd);
    // SAFETY: the child only makes async-signal-safe syscalls before _exit.
    match unsafe { libc::fork() } {
        0 => {
            // SAFETY: setns(2) on a descriptor this process holds open; the forked child
            // changes only its own mount namespace and then exits.
            let ok = unsafe { libc::setns(raw, libc::CLONE_NEWNS) } == 0 && detach(&target).is_ok();
            sys::exit_now(if ok { 0 } else { 1 })
        }
        -1 => Err(Error::os(
            "fork to unmount the rootfs",
            std::io::Error::last_os_error(),
        )),
        child => {
            let mut status = 0;
            // SAFETY: reap our own child.
            unsafe { libc::waitpid(child, &mut status, 0) };
            if libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0 {
                Ok(())
            } else {
                Err(Error::Other(format!(
                    "unmount the container's rootfs {} in mount namespace {ns}",
                    p(rootfs)
                )))
            }
        }
    }
}

fn absolute(path: &Path) -> PathBuf {
    std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf())
}
