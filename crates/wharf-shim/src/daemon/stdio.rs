//! A process's stdio as the shim holds it: the read ends of its stdout/stderr pipes (or the
//! pty master), the write end of its stdin, and its CRI log.

use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

use super::sys;
use crate::logs::{LineSplitter, LogWriter};
use crate::protocol::StdioSpec;

/// Output streams.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stream {
    /// stdout (or the terminal).
    Out,
    /// stderr.
    Err,
}

impl Stream {
    /// The attach frame's stream id.
    pub fn frame_id(self) -> u8 {
        match self {
            Stream::Out => crate::frame::STDOUT,
            Stream::Err => crate::frame::STDERR,
        }
    }

    fn log_name(self) -> &'static str {
        match self {
            Stream::Out => "stdout",
            Stream::Err => "stderr",
        }
    }
}

/// The shim's side of a process's stdio.
#[derive(Debug)]
pub struct Io {
    /// A pty: `out` is the master.
    pub terminal: bool,
    out: Option<OwnedFd>,
    err: Option<OwnedFd>,
    stdin: Option<OwnedFd>,
    /// Stdin bytes the process has not taken yet.
    pub stdin_pending: Vec<u8>,
    stdin_close_when_done: bool,
    log: Option<LogWriter>,
    split_out: LineSplitter,
    split_err: LineSplitter,
}

impl Io {
    /// Write a line of the shim's own into the process's log as its stderr: an error the
    /// process never got to print (its start failed), so that `logs` shows it.
    pub fn log_note(&mut self, line: &str) {
        if let Some(l) = self.log.as_mut() {
            let _ = l.write_entry("stderr", false, line.as_bytes());
        }
    }
}

/// The process's side, handed to the runtime.
pub struct ChildEnds {
    stdio: [OwnedFd; 3],
    /// Console socket for the runtime (process.terminal).
    pub console: Option<OwnedFd>,
    console_peer: Option<OwnedFd>,
}

/// Make the pipes (or console socket pair) and open the log for a process.
pub fn prepare(spec: &StdioSpec, max_size: u64, max_files: u32) -> io::Result<(Io, ChildEnds)> {
    let null = sys::dev_null()?;
    let log =
        match &spec.log {
            Some(path) => Some(LogWriter::open(path, max_size, max_files).map_err(|e| {
                io::Error::new(e.kind(), format!("open log {}: {e}", path.display()))
            })?),
            None => None,
        };
    let mut io = Io {
        terminal: spec.terminal,
        out: None,
        err: None,
        stdin: None,
        stdin_pending: Vec::new(),
        stdin_close_when_done: false,
        log,
        split_out: LineSplitter::default(),
        split_err: LineSplitter::default(),
    };
    if spec.terminal {
        let (ours, theirs) = rustix::net::socketpair(
            rustix::net::AddressFamily::UNIX,
            rustix::net::SocketType::STREAM,
            rustix::net::SocketFlags::CLOEXEC,
            None,
        )?;
        let ends = ChildEnds {
            stdio: [null.try_clone()?, null.try_clone()?, null],
            console: Some(theirs),
            console_peer: Some(ours),
        };
        return Ok((io, ends));
    }
    let stdin_child = if spec.stdin {
        let (r, w) = sys::pipe()?;
        sys::set_nonblocking(w.as_fd())?;
        io.stdin = Some(w);
        r
    } else {
        null.try_clone()?
    };
    let (out_r, out_w) = sys::pipe()?;
    let (err_r, err_w) = sys::pipe()?;
    sys::set_nonblocking(out_r.as_fd())?;
    sys::set_nonblocking(err_r.as_fd())?;
    io.out = Some(out_r);
    io.err = Some(err_r);
    Ok((
        io,
        ChildEnds {
            stdio: [stdin_child, out_w, err_w],
            console: None,
            console_peer: None,
        },
    ))
}

impl ChildEnds {
    /// Descriptors for the process's fds 0-2.
    pub fn fds(&self) -> [BorrowedFd<'_>; 3] {
        [
            self.stdio[0].as_fd(),
            self.stdio[1].as_fd(),
            self.stdio[2].as_fd(),
        ]
    }

    /// After the runtime call: take the pty master the process sent (a terminal that did not
    /// come means the config has no process.terminal); our copies of the child's ends close.
    pub fn finish(self, io: &mut Io, stdin: bool) -> Result<(), String> {
        let Some(peer) = self.console_peer else {
            return Ok(());
        };
        sys::set_nonblocking(peer.as_fd()).map_err(|e| e.to_string())?;
        let master = wharf_runtime::console::recv_fd(peer.as_fd()).map_err(|_| {
            "stdio.terminal is set but the process opened no terminal: \
             process.terminal must be true in config.json"
                .to_string()
        })?;
        sys::set_nonblocking(master.as_fd()).map_err(|e| e.to_string())?;
        if stdin {
            io.stdin = Some(master.try_clone().map_err(|e| e.to_string())?);
        }
        io.out = Some(master);
        Ok(())
    }
}

impl Io {
    /// The descriptor of an output stream, while open.
    pub fn fd(&self, s: Stream) -> Option<BorrowedFd<'_>> {
        match s {
            Stream::Out => self.out.as_ref().map(|f| f.as_fd()),
            Stream::Err => self.err.as_ref().map(|f| f.as_fd()),
        }
    }

    /// The stdin descriptor, while open.
    pub fn stdin_fd(&self) -> Option<BorrowedFd<'_>> {
        self.stdin.as_ref().map(|f| f.as_fd())
    }

    /// The pty master (terminal only).
    pub fn master(&self) -> Option<BorrowedFd<'_>> {
        if self.terminal {
            self.fd(Stream::Out)
        } else {
            None
        }
    }

    /// Read what `s` has now into `buf`: Some(n) bytes, None at end (the stream is closed
    /// and its last partial line logged).
    pub fn read(&mut self, s: Stream, buf: &mut [u8]) -> Option<usize> {
        let fd = self.fd(s)?;
        match rustix::io::read(fd, &mut *buf) {
            Ok(0) => {}
            Ok(n) => {
                self.log(s, &buf[..n]);
                return Some(n);
            }
            Err(rustix::io::Errno::AGAIN) | Err(rustix::io::Errno::INTR) => return Some(0),
            // EIO: the pty's last slave closed.
            Err(_) => {}
        }
        self.close(s);
        None
    }

    fn close(&mut self, s: Stream) {
        let Io {
            log,
            split_out,
            split_err,
            ..
        } = self;
        let split = match s {
            Stream::Out => split_out,
            Stream::Err => split_err,
        };
        if let Some(w) = log.as_mut() {
            split.finish(&mut |c, p| write_log(w, s, c, p));
        }
        match s {
            Stream::Out => self.out = None,
            Stream::Err => self.err = None,
        }
    }

    fn log(&mut self, s: Stream, data: &[u8]) {
        let Io {
            log,
            split_out,
            split_err,
            ..
        } = self;
        let Some(w) = log.as_mut() else { return };
        let split = match s {
            Stream::Out => split_out,
            Stream::Err => split_err,
        };
        split.feed(data, &mut |c, p| write_log(w, s, c, p));
    }

    /// Open the log file again at its path (see [`LogWriter::reopen`]).
    pub fn reopen_log(&mut self) -> io::Result<()> {
        match self.log.as_mut() {
            Some(w) => w.reopen(),
            None => Err(io::Error::new(
                io::ErrorKind::NotFound,
                "the process's output is not logged",
            )),
        }
    }

    /// Queue stdin bytes and write what the process takes now. False if stdin is closed.
    pub fn send_stdin(&mut self, data: &[u8]) -> bool {
        if self.stdin.is_none() {
            return false;
        }
        self.stdin_pending.extend_from_slice(data);
        self.flush_stdin();
        true
    }

    /// Close stdin once what is queued has been written (an empty stdin frame). A
    /// terminal's stdin is the master itself and stays open.
    pub fn close_stdin(&mut self) {
        if self.terminal {
            return;
        }
        self.stdin_close_when_done = true;
        self.flush_stdin();
    }

    /// Write queued stdin bytes; the fd is dropped when the reader is gone or after a close
    /// request.
    pub fn flush_stdin(&mut self) {
        let Some(fd) = &self.stdin else {
            self.stdin_pending = Vec::new();
            return;
        };
        match sys::write_some(fd.as_fd(), &self.stdin_pending) {
            Ok(n) => {
                self.stdin_pending.drain(..n);
            }
            Err(_) => {
                self.stdin = None;
                self.stdin_pending = Vec::new();
                return;
            }
        }
        if self.stdin_pending.is_empty() {
            self.stdin_pending = Vec::new();
            if self.stdin_close_when_done {
                self.stdin = None;
            }
        }
    }

    /// The process exited: read what its streams still hold (handing it to `sink`), then
    /// close everything.
    pub fn drain(&mut self, buf: &mut [u8], sink: &mut dyn FnMut(Stream, &[u8])) {
        for s in [Stream::Out, Stream::Err] {
            // Bounded: a process left behind holding the pipe could write forever.
            for _ in 0..256 {
                match self.read(s, buf) {
                    Some(0) | None => break,
                    Some(n) => sink(s, &buf[..n]),
                }
            }
            if self.fd(s).is_some() {
                self.close(s);
            }
        }
        self.stdin = None;
        self.stdin_pending = Vec::new();
    }
}

fn write_log(w: &mut LogWriter, s: Stream, content: &[u8], partial: bool) {
    if let Err(e) = w.write_entry(s.log_name(), partial, content) {
        super::log(&format!("write log {}: {e}", w.path().display()));
    }
}
