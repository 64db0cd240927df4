//! Terminals: a pty created inside the container (from its own devpts), the slave as the
//! process's controlling terminal and stdio, the master handed over a unix socket with
//! SCM_RIGHTS exactly as runc does with `--console-socket`.

use std::ffi::OsStr;
use std::io::{self, IoSlice, IoSliceMut};
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::Path;

use rustix::net::{
    RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, SendAncillaryBuffer,
    SendAncillaryMessage, SendFlags,
};
use rustix::pty::OpenptFlags;

use crate::error::{Context, Error, Result};

/// A pty pair.
pub struct Pty {
    /// The master side (for whoever drives the terminal).
    pub master: OwnedFd,
    /// The slave side (the container process's terminal).
    pub slave: OwnedFd,
    /// Path of the slave inside the container (`/dev/pts/N`).
    pub slave_path: String,
}

/// Open a new pty from `/dev/ptmx` of the current root, sized `(height, width)` if given.
///
/// Both sides are checked to be what they claim: the container's /dev may come from a
/// volume, where `ptmx` or `pts/N` could be symlinks to any file (a procfs file among them)
/// that would otherwise become the container's stdio (the CVE-2025-52565 class). The slave
/// is taken from the master with TIOCGPTPEER, without a path.
pub fn open_pty(size: Option<(u16, u16)>) -> Result<Pty> {
    let master =
        rustix::pty::openpt(OpenptFlags::RDWR | OpenptFlags::NOCTTY | OpenptFlags::CLOEXEC)
            .ctx(|| "open /dev/ptmx (process.terminal)".into())?;
    check_char_device(
        &master,
        |major, minor| (major, minor) == (5, 2),
        "/dev/ptmx",
    )?;
    rustix::pty::grantpt(&master).ctx(|| "grantpt".into())?;
    rustix::pty::unlockpt(&master).ctx(|| "unlockpt".into())?;
    let name = rustix::pty::ptsname(&master, Vec::new()).ctx(|| "ptsname".into())?;
    let slave_path = name.to_string_lossy().into_owned();
    let flags = OpenptFlags::RDWR | OpenptFlags::NOCTTY | OpenptFlags::CLOEXEC;
    let slave = match rustix::pty::ioctl_tiocgptpeer(&master, flags) {
        Ok(fd) => fd,
        // Kernels before 4.13: by path, checked below.
        Err(rustix::io::Errno::INVAL) | Err(rustix::io::Errno::NOTTY) => rustix::fs::open(
            name.as_c_str(),
            rustix::fs::OFlags::RDWR
                | rustix::fs::OFlags::NOCTTY
                | rustix::fs::OFlags::NOFOLLOW
                | rustix::fs::OFlags::CLOEXEC,
            rustix::fs::Mode::empty(),
        )
        .ctx(|| format!("open {slave_path}"))?,
        Err(e) => return Err(Error::os(format!("open the peer of {slave_path}"), e)),
    };
    // UNIX98 pty slaves have majors 136 to 143.
    check_char_device(&slave, |major, _| (136..=143).contains(&major), &slave_path)?;
    if let Some((rows, cols)) = size {
        set_size(master.as_fd(), rows, cols)?;
    }
    Ok(Pty {
        master,
        slave,
        slave_path,
    })
}

fn check_char_device(fd: &OwnedFd, ok: impl Fn(u32, u32) -> bool, what: &str) -> Result<()> {
    let st = rustix::fs::fstat(fd).ctx(|| format!("stat {what}"))?;
    let is_char =
        rustix::fs::FileType::from_raw_mode(st.st_mode) == rustix::fs::FileType::CharacterDevice;
    let (major, minor) = (rustix::fs::major(st.st_rdev), rustix::fs::minor(st.st_rdev));
    if !is_char || !ok(major, minor) {
        return Err(Error::Config(format!(
            "process.terminal: {what} in the container is not a pty device \
             (it is {major}:{minor}); refusing to use it as the terminal"
        )));
    }
    Ok(())
}

/// TIOCSWINSZ.
pub fn set_size(fd: BorrowedFd<'_>, rows: u16, cols: u16) -> Result<()> {
    let ws = rustix::termios::Winsize {
        ws_row: rows,
        ws_col: cols,
        ws_xpixel: 0,
        ws_ypixel: 0,
    };
    rustix::termios::tcsetwinsize(fd, ws)
        .ctx(|| "set the terminal size (process.consoleSize)".into())
}

/// Make `slave` the controlling terminal of a new session and the process's stdio.
pub fn become_terminal_owner(slave: &OwnedFd) -> Result<()> {
    let _ = rustix::process::setsid();
    rustix::process::ioctl_tiocsctty(slave)
        .ctx(|| "make the pty the controlling terminal".into())?;
    for target in 0..3 {
        // SAFETY: dup2 onto the standard descriptors, which this process owns.
        let ret = unsafe { libc::dup2(std::os::fd::AsRawFd::as_raw_fd(slave), target) };
        if ret == -1 {
            return Err(Error::os(
                format!("dup2 pty onto fd {target}"),
                io::Error::last_os_error(),
            ));
        }
    }
    Ok(())
}

/// Bind the pty slave (`slave`, an fd: no path is looked up) onto `/dev/console` of the
/// current root. A `/dev/console` that is anything but a regular file or a character
/// device (a symlink into /proc, a directory) is replaced by an empty file first.
pub fn mount_console(slave: &OwnedFd) -> Result<()> {
    let root = rustix::fs::open(
        "/",
        rustix::fs::OFlags::PATH | rustix::fs::OFlags::CLOEXEC,
        rustix::fs::Mode::empty(),
    )
    .ctx(|| "open /".into())?;
    let dev = crate::safe_path::mkdir_all(root.as_fd(), Path::new("/dev"), 0o755)
        .ctx(|| "create /dev".into())?;
    let dev = crate::safe_path::reopen_dir(&dev).ctx(|| "open /dev".into())?;
    let target = crate::safe_path::plain_file_at(dev.as_fd(), OsStr::new("console"))
        .ctx(|| "create /dev/console".into())?;
    crate::mounts::bind_fd(slave.as_fd(), target.as_fd())
        .ctx(|| "bind the pty on /dev/console".into())
}

/// Send `fd` over the connected unix socket `sock`, with `name` as the payload (runc sends the
/// terminal's name; receivers only need the fd).
pub fn send_fd(sock: BorrowedFd<'_>, name: &str, fd: BorrowedFd<'_>) -> Result<()> {
    let fds = [fd];
    let mut space = [MaybeUninit::<u8>::uninit(); rustix::cmsg_space!(ScmRights(1))];
    let mut anc = SendAncillaryBuffer::new(&mut space);
    anc.push(SendAncillaryMessage::ScmRights(&fds));
    rustix::net::sendmsg(
        sock,
        &[IoSlice::new(name.as_bytes())],
        &mut anc,
        SendFlags::NOSIGNAL,
    )
    .ctx(|| "send the pty master over the console socket".into())?;
    Ok(())
}

/// Receive one fd sent with [`send_fd`] (what an engine does on its console socket).
pub fn recv_fd(sock: BorrowedFd<'_>) -> Result<OwnedFd> {
    let mut buf = [0u8; 4096];
    let mut space = [MaybeUninit::<u8>::uninit(); rustix::cmsg_space!(ScmRights(1))];
    let mut anc = RecvAncillaryBuffer::new(&mut space);
    let mut iov = [IoSliceMut::new(&mut buf)];
    rustix::net::recvmsg(sock, &mut iov, &mut anc, RecvFlags::CMSG_CLOEXEC)
        .ctx(|| "receive the pty master".into())?;
    for msg in anc.drain() {
        if let RecvAncillaryMessage::ScmRights(mut fds) = msg
            && let Some(fd) = fds.next()
        {
            return Ok(fd);
        }
    }
    Err(Error::Other(
        "the console socket message carried no fd".into(),
    ))
}

/// Connect to the console socket at `path` (a unix stream socket an engine listens on).
pub fn connect(path: &Path) -> Result<OwnedFd> {
    let sock = rustix::net::socket_with(
        rustix::net::AddressFamily::UNIX,
        rustix::net::SocketType::STREAM,
        rustix::net::SocketFlags::CLOEXEC,
        None,
    )
    .ctx(|| "create a unix socket".into())?;
    let addr = rustix::net::SocketAddrUnix::new(path)
        .ctx(|| format!("console socket path {}", path.display()))?;
    rustix::net::connect(&sock, &addr)
        .ctx(|| format!("connect to console socket {}", path.display()))?;
    Ok(sock)
}
