//! Client connections: accepting, reading request lines, answering, and the framed
//! streams of attached clients.

use super::*;

impl Shim {
    pub(super) fn accept(&mut self) {
        loop {
            match rustix::net::accept_with(
                &self.listener,
                rustix::net::SocketFlags::CLOEXEC | rustix::net::SocketFlags::NONBLOCK,
            ) {
                Ok(fd) => {
                    let id = self.next_conn;
                    self.next_conn += 1;
                    self.conns.insert(
                        id,
                        Conn {
                            fd,
                            inbuf: Vec::new(),
                            outbuf: Vec::new(),
                            mode: Mode::Requests,
                            close_after_flush: false,
                        },
                    );
                }
                Err(rustix::io::Errno::INTR) => {}
                Err(_) => return,
            }
        }
    }

    pub(super) fn on_conn(&mut self, id: ConnId, ev: PollFlags) {
        if ev.contains(PollFlags::OUT) {
            self.flush_conn(id);
        }
        if !self.conns.contains_key(&id) {
            return;
        }
        if ev.intersects(PollFlags::IN | PollFlags::HUP | PollFlags::ERR) {
            let mut buf = [0u8; 4096];
            let c = self.conns.get_mut(&id).expect("checked");
            match rustix::io::read(&c.fd, &mut buf) {
                Ok(0) => {
                    self.close_conn(id);
                    return;
                }
                Ok(n) => {
                    c.inbuf.extend_from_slice(&buf[..n]);
                }
                Err(rustix::io::Errno::AGAIN) | Err(rustix::io::Errno::INTR) => {}
                Err(_) => {
                    self.close_conn(id);
                    return;
                }
            }
            self.process_input(id);
        }
    }

    pub(super) fn process_input(&mut self, id: ConnId) {
        loop {
            let Some(c) = self.conns.get_mut(&id) else {
                return;
            };
            match &c.mode {
                Mode::Waiting => return,
                Mode::Events => {
                    // Subscribers have nothing to say: what they send is dropped.
                    c.inbuf = Vec::new();
                    return;
                }
                Mode::Requests => {
                    let Some(nl) = c.inbuf.iter().position(|&b| b == b'\n') else {
                        if c.inbuf.len() > MAX_REQUEST {
                            self.close_conn(id);
                        }
                        return;
                    };
                    let line: Vec<u8> = c.inbuf.drain(..=nl).collect();
                    if c.inbuf.is_empty() {
                        c.inbuf = Vec::new();
                    }
                    let resp = match serde_json::from_slice::<Request>(&line) {
                        Err(e) => Some(Response::Error(RemoteError {
                            kind: ErrorKind::Invalid,
                            message: format!("malformed request: {e}"),
                        })),
                        Ok(req) if req.v != VERSION => Some(Response::Error(RemoteError {
                            kind: ErrorKind::Version,
                            message: format!(
                                "protocol version {} is not supported (this shim speaks {VERSION})",
                                req.v
                            ),
                        })),
                        Ok(req) => match self.handle(id, req.op) {
                            Ok(Some(reply)) => Some(Response::Ok(reply)),
                            Ok(None) => None,
                            Err(Fail(kind, message)) => {
                                Some(Response::Error(RemoteError { kind, message }))
                            }
                        },
                    };
                    if let Some(r) = resp {
                        self.respond(id, &r);
                    }
                }
                Mode::Attached(t) => {
                    let t = t.clone();
                    let mut inbuf = std::mem::take(&mut c.inbuf);
                    let mut used = 0;
                    let mut bad = false;
                    while let Some(range) = match frame::parse(&inbuf[used..]) {
                        Ok(r) => r,
                        Err(_) => {
                            bad = true;
                            None
                        }
                    } {
                        let (stream, r) = range;
                        let payload = &inbuf[used + r.start..used + r.end];
                        self.attach_input(&t, stream, payload);
                        used += r.end;
                    }
                    inbuf.drain(..used);
                    if bad {
                        self.close_conn(id);
                        return;
                    }
                    if let Some(c) = self.conns.get_mut(&id) {
                        c.inbuf = inbuf;
                    }
                    return;
                }
            }
        }
    }

    pub(super) fn respond(&mut self, id: ConnId, r: &Response) {
        let Some(c) = self.conns.get_mut(&id) else {
            return;
        };
        let mut line = serde_json::to_vec(r).unwrap_or_default();
        line.push(b'\n');
        c.outbuf.extend_from_slice(&line);
        self.flush_conn(id);
    }

    pub(super) fn flush_conn(&mut self, id: ConnId) {
        let Some(c) = self.conns.get_mut(&id) else {
            return;
        };
        match sys::send_some(c.fd.as_fd(), &c.outbuf) {
            Ok(n) => {
                c.outbuf.drain(..n);
                if c.outbuf.is_empty() {
                    c.outbuf = Vec::new();
                    if c.close_after_flush {
                        self.close_conn(id);
                    }
                }
            }
            Err(_) => self.close_conn(id),
        }
    }

    pub(super) fn close_conn(&mut self, id: ConnId) {
        if self.conns.remove(&id).is_none() {
            return;
        }
        for c in &mut self.containers {
            c.waiters.retain(|w| *w != id);
            c.attached.retain(|w| *w != id);
            for e in &mut c.execs {
                e.waiters.retain(|w| *w != id);
                e.attached.retain(|w| *w != id);
            }
        }
    }

    /// Queue a frame for each of `ids`; a client too far behind is dropped.
    pub(super) fn broadcast(&mut self, ids: &[ConnId], stream: u8, data: &[u8]) {
        for id in ids {
            let Some(c) = self.conns.get_mut(id) else {
                continue;
            };
            if c.outbuf.len() > MAX_BACKLOG {
                log(&format!("attach client {id} is too slow: dropped"));
                self.close_conn(*id);
                continue;
            }
            c.outbuf
                .extend_from_slice(&frame::header(stream, data.len()));
            c.outbuf.extend_from_slice(data);
            self.flush_conn(*id);
        }
    }

    /// Tell waiters and attached clients about an exit (after it is on disk).
    pub(super) fn announce_exit(
        &mut self,
        waiters: Vec<ConnId>,
        attached: Vec<ConnId>,
        exit: &ExitRecord,
    ) {
        for w in waiters {
            if let Some(c) = self.conns.get_mut(&w) {
                c.mode = Mode::Requests;
                self.respond(w, &Response::Ok(Reply::Exit(exit.clone())));
                self.process_input(w);
            }
        }
        let json = serde_json::to_vec(exit).unwrap_or_default();
        self.broadcast(&attached, frame::EXIT, &json);
        for a in attached {
            if let Some(c) = self.conns.get_mut(&a) {
                c.close_after_flush = true;
                if c.outbuf.is_empty() {
                    self.close_conn(a);
                }
            }
        }
    }
}
