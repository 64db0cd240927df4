//! Pushing events to subscribers (`subscribe`): each change of a container's life, as the
//! shim makes or sees it, becomes one JSON line on every subscribed connection.

use super::*;

impl Shim {
    /// Tell every subscriber about `kind`, now.
    pub(super) fn publish(&mut self, kind: EventKind) {
        let subscribers: Vec<ConnId> = self
            .conns
            .iter()
            .filter(|(_, c)| c.mode == Mode::Events)
            .map(|(id, _)| *id)
            .collect();
        if subscribers.is_empty() {
            return;
        }
        let event = Event {
            time: wharf_sys::time::now_rfc3339_nano(),
            kind,
        };
        let mut line = serde_json::to_vec(&event).unwrap_or_default();
        line.push(b'\n');
        for id in subscribers {
            let Some(c) = self.conns.get_mut(&id) else {
                continue;
            };
            if c.outbuf.len() > MAX_BACKLOG {
                // A subscriber that does not read is dropped; it finds what it missed in
                // the records when it subscribes again.
                log(&format!("event subscriber {id} is too slow: dropped"));
                self.close_conn(id);
                continue;
            }
            c.outbuf.extend_from_slice(&line);
            self.flush_conn(id);
        }
    }

    /// Make `conn` a subscriber (after the answer to `subscribe`).
    pub(super) fn subscribe(&mut self, conn: ConnId) {
        self.respond(conn, &Response::Ok(Reply::Done));
        if let Some(c) = self.conns.get_mut(&conn) {
            c.mode = Mode::Events;
        }
    }
}
