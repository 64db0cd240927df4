//! systemd's readiness protocol (`sd_notify(3)`): with `Type=notify`, systemd counts the
//! daemon started only once it says `READY=1`, so units ordered after `wharf.service`
//! (kubelet's, say) start when the CRI answers, not when the process exists. The protocol
//! is one datagram per message to the unix socket named by `NOTIFY_SOCKET` (a path, or an
//! abstract name written with a leading `@`); without that variable it is a no-op.

use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixDatagram};

/// Where to send the daemon's state, taken from the environment once.
#[derive(Debug, Clone)]
pub struct Notifier {
    socket: Option<String>,
}

impl Notifier {
    /// Takes `NOTIFY_SOCKET` out of the environment, so that the shims and processes the
    /// daemon starts do not inherit it (systemd would take their messages for ours with
    /// `NotifyAccess=all`).
    ///
    /// # Safety
    /// No other thread may read or write the environment meanwhile: call it before the
    /// async runtime starts.
    #[allow(unsafe_code)]
    pub unsafe fn from_env() -> Self {
        let socket = std::env::var("NOTIFY_SOCKET")
            .ok()
            .filter(|s| !s.is_empty());
        // SAFETY: the caller promises no concurrent use of the environment.
        unsafe { std::env::remove_var("NOTIFY_SOCKET") };
        Notifier { socket }
    }

    /// A notifier that sends to `socket` (tests).
    pub fn to(socket: impl Into<String>) -> Self {
        Notifier {
            socket: Some(socket.into()),
        }
    }

    /// Sends `state` (`READY=1`, `STOPPING=1`, `STATUS=...`, newline separated). A daemon
    /// whose notification fails still serves: the error is for the log.
    pub fn notify(&self, state: &str) -> std::io::Result<()> {
        let Some(socket) = &self.socket else {
            return Ok(());
        };
        let addr = match socket.strip_prefix('@') {
            Some(name) => SocketAddr::from_abstract_name(name.as_bytes())?,
            None => SocketAddr::from_pathname(socket)?,
        };
        let sock = UnixDatagram::unbound()?;
        sock.send_to_addr(state.as_bytes(), &addr)?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_reach_a_path_socket_and_an_abstract_one() {
        let path = std::env::temp_dir().join(format!("wharf-notify-{}", std::process::id()));
        let _ = std::fs::remove_file(&path);
        let listener = UnixDatagram::bind(&path).unwrap();
        Notifier::to(path.display().to_string())
            .notify("READY=1\nSTATUS=serving")
            .unwrap();
        let mut buf = [0u8; 64];
        let n = listener.recv(&mut buf).unwrap();
        assert_eq!(&buf[..n], b"READY=1\nSTATUS=serving");
        std::fs::remove_file(&path).unwrap();

        let name = format!("wharf-notify-test-{}", std::process::id());
        let addr = SocketAddr::from_abstract_name(name.as_bytes()).unwrap();
        let abstract_listener = UnixDatagram::bind_addr(&addr).unwrap();
        Notifier::to(format!("@{name}"))
            .notify("STOPPING=1")
            .unwrap();
        let n = abstract_listener.recv(&mut buf).unwrap();
        assert_eq!(&buf[..n], b"STOPPING=1");
    }

    #[test]
    fn no_socket_is_no_error_and_a_missing_one_is() {
        Notifier { socket: None }.notify("READY=1").unwrap();
        let e = Notifier::to("/nonexistent/wharf-notify")
            .notify("READY=1")
            .unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::NotFound);
    }
}
