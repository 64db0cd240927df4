//! The intermediate process of a create whose namespaces cannot all come from one clone.
//!
//! It joins the namespaces given by path (with the host's privileges, user namespace
//! first), creates the new ones with unshare (the new user namespace first, so it owns the
//! others; the runtime writes its id maps), and clones the container's init with
//! CLONE_PARENT, so the init is the runtime's child exactly as on the fast path. Then it
//! exits. The init finds its namespaces ready.

use std::os::fd::AsFd;

use crate::error::{Context, Error, Result};
use crate::namespaces::{self, Plan};
use crate::sync::{Channel, Msg};
use crate::sys::{self, Forked};

/// Run the intermediate stage. Returns only in the new init; the intermediate exits.
pub fn run(channel: &Channel, plan: &Plan) -> Result<()> {
    match channel.recv() {
        Ok(Some(Msg::Go)) => {}
        Ok(Some(other)) => return Err(Error::Other(format!("intermediate: unexpected {other:?}"))),
        Ok(None) => sys::exit_now(1),
        Err(e) => return Err(Error::os("intermediate: read the sync socket", e)),
    }
    for (t, fd) in &plan.join {
        namespaces::join(*t, fd)?;
    }
    let new_user = plan.clone_flags & libc::CLONE_NEWUSER as u64 != 0;
    let joined_user = plan
        .join
        .iter()
        .any(|(t, _)| *t == oci_spec::runtime::LinuxNamespaceType::User);
    if new_user {
        sys::unshare(libc::CLONE_NEWUSER).ctx(|| "unshare the user namespace".into())?;
        channel
            .send(&Msg::MapIds)
            .ctx(|| "ask for id maps".into())?;
        channel.expect(Msg::IdsMapped, "user namespace id maps")?;
    }
    if new_user || joined_user {
        become_root()?;
    }
    let rest = (plan.clone_flags & !(libc::CLONE_NEWUSER as u64)) as i32;
    if rest != 0 {
        sys::unshare(rest).ctx(|| "unshare the container's namespaces".into())?;
    }
    if plan.late_cgroup_ns {
        sys::unshare(libc::CLONE_NEWCGROUP).ctx(|| "unshare the cgroup namespace".into())?;
    }
    // SAFETY: single-threaded; the init continues on a copy of this stack.
    let forked = unsafe { sys::clone_process(libc::CLONE_PARENT as u64, None) }
        .ctx(|| "clone the container's init".into())?;
    match forked {
        (Forked::Child, _) => Ok(()),
        (Forked::Parent { pid, pidfd }, _) => {
            // The pid is this process's view: in a pid namespace joined before the clone
            // (a pod's shared one) it is not the runtime's. The pidfd says which process
            // it is wherever it is read.
            let _ = channel.send_with_fd(&Msg::Pid(pid), pidfd.as_fd());
            sys::exit_now(0)
        }
    }
}

/// Become uid/gid 0 of the user namespace we are in (its maps exist by now).
pub fn become_root() -> Result<()> {
    rustix::thread::set_thread_res_gid(
        rustix::fs::Gid::ROOT,
        rustix::fs::Gid::ROOT,
        rustix::fs::Gid::ROOT,
    )
    .ctx(|| "setgid 0 in the user namespace (is gid 0 mapped?)".into())?;
    rustix::thread::set_thread_res_uid(
        rustix::fs::Uid::ROOT,
        rustix::fs::Uid::ROOT,
        rustix::fs::Uid::ROOT,
    )
    .ctx(|| "setuid 0 in the user namespace (is uid 0 mapped?)".into())
}
