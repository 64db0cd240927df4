//! A `wharf daemon` of a test's own over a test engine world, and a real gRPC client
//! (tonic) on its socket: what the CRI tests share.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use tonic::transport::Channel;
use wharf_cri::api::*;

use crate::engine_support::{Wharf, wait_until};

/// A daemon of the test's own, over a test engine world (state, run directory, cgroup
/// parent, a network namespace playing the host for the built-in bridge).
pub struct Daemon {
    pub w: Wharf,
    pub socket: PathBuf,
    pub child: Child,
}

impl Daemon {
    pub fn start(name: &str) -> Daemon {
        Daemon::start_with(name, |_| {})
    }

    /// Start one after `prepare` had its way with the world (variables, config file).
    pub fn start_with(name: &str, prepare: impl FnOnce(&mut Wharf)) -> Daemon {
        let mut w = Wharf::new(name);
        prepare(&mut w);
        let socket = w.path("wharf.sock");
        let child = daemon_command(&w, &socket)
            .stderr(Stdio::piped())
            .spawn()
            .expect("start wharf daemon");
        let d = Daemon { w, socket, child };
        assert!(
            wait_until(Duration::from_secs(20), || {
                std::os::unix::net::UnixStream::connect(&d.socket).is_ok()
            }),
            "the daemon never listened on {}",
            d.socket.display()
        );
        d
    }

    pub fn wharf(&self, args: &[&str]) -> std::process::Output {
        self.w.cmd(args).output().unwrap()
    }

    /// SIGTERM, and the exit code.
    pub fn terminate(&mut self) -> Option<i32> {
        // SAFETY: kill(2) of the daemon this test started.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        self.child.wait().unwrap().code()
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub fn daemon_command(w: &Wharf, socket: &Path) -> Command {
    let mut c = w.cmd(&["daemon", "--listen"]);
    c.arg(socket).stdout(Stdio::null());
    c
}

/// A channel to the daemon's unix socket.
pub async fn connect(socket: &Path) -> Channel {
    let socket = socket.to_path_buf();
    tonic::transport::Endpoint::from_static("http://wharf.invalid")
        .connect_with_connector(tower::service_fn(move |_| {
            let socket = socket.clone();
            async move {
                Ok::<_, std::io::Error>(hyper_util::rt::TokioIo::new(
                    tokio::net::UnixStream::connect(socket).await?,
                ))
            }
        }))
        .await
        .expect("connect to the daemon")
}

pub fn image(name: &str) -> Option<ImageSpec> {
    Some(ImageSpec {
        image: name.to_string(),
        ..Default::default()
    })
}
