//! The channel between the runtime (parent) and a container process it cloned (child).
//!
//! A SOCK_SEQPACKET socketpair: each message is one datagram, so no framing is needed, and a
//! peer that dies shows up as end-of-file instead of a hang. The child reports failures as
//! text, so the runtime can print the real cause ("mount proc on /proc: permission denied")
//! instead of a bare EOF.

use std::io;
use std::os::fd::{AsFd, OwnedFd};

use rustix::net::{AddressFamily, RecvFlags, SendFlags, SocketFlags, SocketType};

use crate::error::{Error, Result};

/// One message of the parent/child protocol.
#[derive(Debug, PartialEq, Eq)]
pub enum Msg {
    /// Parent to child: id maps written and cgroups joined; set yourself up.
    Go,
    /// Child to parent: mounts are ready (before pivot_root); run the runtime-namespace hooks.
    RunHooks,
    /// Parent to child: the hooks succeeded.
    HooksDone,
    /// Child to parent: fully set up, about to wait for `start` (or to exec, for exec).
    Ready,
    /// Child to parent: setup failed for this reason.
    Failed(String),
    /// Intermediate child to parent: I created the user namespace; write my id maps.
    MapIds,
    /// Parent to intermediate child: id maps written.
    IdsMapped,
    /// Intermediate child to parent: this is the container's init (your child now).
    Pid(i32),
    /// Child or exec helper (wharf-dmz) to parent: the program could not be executed (an
    /// errno, and runc's wording when it has one).
    ExecFailed(i32, Option<String>),
}

impl Msg {
    fn encode(&self) -> Vec<u8> {
        match self {
            Msg::Go => vec![b'G'],
            Msg::RunHooks => vec![b'H'],
            Msg::HooksDone => vec![b'D'],
            Msg::Ready => vec![b'R'],
            Msg::MapIds => vec![b'M'],
            Msg::IdsMapped => vec![b'm'],
            Msg::Pid(pid) => format!("P{pid}").into_bytes(),
            Msg::Failed(text) => {
                let mut v = vec![b'F'];
                v.extend_from_slice(text.as_bytes());
                v
            }
            Msg::ExecFailed(errno, None) => format!("\x01E{errno}").into_bytes(),
            Msg::ExecFailed(errno, Some(detail)) => format!("\x01E{errno}:{detail}").into_bytes(),
        }
    }

    fn decode(buf: &[u8]) -> Option<Msg> {
        Some(match buf.first()? {
            b'G' => Msg::Go,
            b'H' => Msg::RunHooks,
            b'D' => Msg::HooksDone,
            b'R' => Msg::Ready,
            b'F' => Msg::Failed(String::from_utf8_lossy(&buf[1..]).into_owned()),
            b'M' => Msg::MapIds,
            b'm' => Msg::IdsMapped,
            b'P' => Msg::Pid(std::str::from_utf8(&buf[1..]).ok()?.parse().ok()?),
            1 => {
                let (errno, detail) = crate::dmz::parse_failure(buf)?;
                Msg::ExecFailed(errno, detail)
            }
            _ => return None,
        })
    }
}

/// One end of the channel.
pub struct Channel {
    fd: OwnedFd,
}

/// Create both ends (close-on-exec, so neither leaks into the container's process).
pub fn pair() -> Result<(Channel, Channel)> {
    let (a, b) = rustix::net::socketpair(
        AddressFamily::UNIX,
        SocketType::SEQPACKET,
        SocketFlags::CLOEXEC,
        None,
    )
    .map_err(|e| Error::os("create the runtime's sync socket pair", e))?;
    Ok((Channel { fd: a }, Channel { fd: b }))
}

impl Channel {
    /// Send one message.
    pub fn send(&self, msg: &Msg) -> io::Result<()> {
        let buf = msg.encode();
        loop {
            match rustix::net::send(&self.fd, &buf, SendFlags::NOSIGNAL) {
                Err(rustix::io::Errno::INTR) => continue,
                r => return r.map(|_| ()).map_err(Into::into),
            }
        }
    }

    /// Send one message with a file descriptor (SCM_RIGHTS).
    pub fn send_with_fd(&self, msg: &Msg, fd: std::os::fd::BorrowedFd<'_>) -> io::Result<()> {
        use std::mem::MaybeUninit;
        let buf = msg.encode();
        let fds = [fd];
        let mut space = [MaybeUninit::<u8>::uninit(); rustix::cmsg_space!(ScmRights(1))];
        let mut anc = rustix::net::SendAncillaryBuffer::new(&mut space);
        anc.push(rustix::net::SendAncillaryMessage::ScmRights(&fds));
        loop {
            match rustix::net::sendmsg(
                &self.fd,
                &[io::IoSlice::new(&buf)],
                &mut anc,
                SendFlags::NOSIGNAL,
            ) {
                Err(rustix::io::Errno::INTR) => continue,
                r => return r.map(|_| ()).map_err(Into::into),
            }
        }
    }

    /// Receive one message and the file descriptor it may carry; `None` when the peer
    /// closed its end.
    pub fn recv_with_fd(&self) -> io::Result<Option<(Msg, Option<std::os::fd::OwnedFd>)>> {
        use std::mem::MaybeUninit;
        let mut buf = vec![0u8; 64 * 1024];
        let mut space = [MaybeUninit::<u8>::uninit(); rustix::cmsg_space!(ScmRights(1))];
        loop {
            let mut anc = rustix::net::RecvAncillaryBuffer::new(&mut space);
            let mut iov = [io::IoSliceMut::new(&mut buf)];
            match rustix::net::recvmsg(&self.fd, &mut iov, &mut anc, RecvFlags::CMSG_CLOEXEC) {
                Err(rustix::io::Errno::INTR) => continue,
                Err(e) => return Err(e.into()),
                Ok(r) if r.bytes == 0 => return Ok(None),
                Ok(r) => {
                    let mut fd = None;
                    for m in anc.drain() {
                        if let rustix::net::RecvAncillaryMessage::ScmRights(mut fds) = m {
                            fd = fds.next();
                        }
                    }
                    let n = r.bytes;
                    return Msg::decode(&buf[..n])
                        .map(|m| Some((m, fd)))
                        .ok_or_else(|| io::Error::other("unknown message on the sync socket"));
                }
            }
        }
    }

    /// Receive one message; `None` when the peer closed its end (it exited or died).
    pub fn recv(&self) -> io::Result<Option<Msg>> {
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            match rustix::net::recv(&self.fd, &mut buf, RecvFlags::empty()) {
                Err(rustix::io::Errno::INTR) => continue,
                Err(e) => return Err(e.into()),
                Ok((0, _)) => return Ok(None),
                Ok((n, _)) => {
                    return Msg::decode(&buf[..n])
                        .map(Some)
                        .ok_or_else(|| io::Error::other("unknown message on the sync socket"));
                }
            }
        }
    }

    /// Wait for a specific message; a failure report or EOF becomes an error naming `step`.
    pub fn expect(&self, want: Msg, step: &str) -> Result<()> {
        match self.recv() {
            Ok(Some(m)) if m == want => Ok(()),
            Ok(Some(Msg::Failed(text))) => Err(Error::Init(text)),
            Ok(Some(other)) => Err(Error::Other(format!(
                "{step}: unexpected message {other:?} from the container process"
            ))),
            Ok(None) => Err(Error::Init(format!(
                "{step}: the container process exited without reporting why"
            ))),
            Err(e) => Err(Error::os(format!("{step}: read the sync socket"), e)),
        }
    }
}

impl std::os::fd::AsRawFd for Channel {
    fn as_raw_fd(&self) -> std::os::fd::RawFd {
        self.fd.as_raw_fd()
    }
}

impl AsFd for Channel {
    fn as_fd(&self) -> std::os::fd::BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_round_trip_and_eof_is_none() {
        let (a, b) = pair().unwrap();
        a.send(&Msg::Failed("mount proc: EPERM".into())).unwrap();
        a.send(&Msg::Ready).unwrap();
        assert_eq!(
            b.recv().unwrap(),
            Some(Msg::Failed("mount proc: EPERM".into()))
        );
        b.expect(Msg::Ready, "test").unwrap();
        a.send(&Msg::ExecFailed(2, None)).unwrap();
        assert_eq!(b.recv().unwrap(), Some(Msg::ExecFailed(2, None)));
        a.send(&Msg::ExecFailed(2, Some("not in $PATH".into())))
            .unwrap();
        assert_eq!(
            b.recv().unwrap(),
            Some(Msg::ExecFailed(2, Some("not in $PATH".into())))
        );
        drop(a);
        assert_eq!(b.recv().unwrap(), None);
    }
}
