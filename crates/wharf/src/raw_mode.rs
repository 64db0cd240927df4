//! The caller's terminal in raw mode while a container's terminal is relayed to it.

use std::os::fd::AsFd;

/// Stdin's terminal in raw mode (keys reach the container as typed), restored on drop.
/// Does nothing when stdin is not a terminal.
pub struct RawMode(Option<rustix::termios::Termios>);

impl RawMode {
    /// Switch stdin's terminal to raw mode, saving its settings.
    pub fn enter() -> RawMode {
        let stdin = std::io::stdin();
        let saved = rustix::termios::tcgetattr(stdin.as_fd()).ok();
        if let Some(t) = &saved {
            let mut raw = t.clone();
            raw.make_raw();
            let _ = rustix::termios::tcsetattr(
                stdin.as_fd(),
                rustix::termios::OptionalActions::Now,
                &raw,
            );
        }
        RawMode(saved)
    }

    /// The settings to put back, for a thread that ends the process (where no drop runs).
    pub fn saved(&self) -> Option<rustix::termios::Termios> {
        self.0.clone()
    }
}

/// Put stdin's terminal back to `saved` settings.
pub fn restore(saved: &rustix::termios::Termios) {
    let _ = rustix::termios::tcsetattr(
        std::io::stdin().as_fd(),
        rustix::termios::OptionalActions::Now,
        saved,
    );
}

impl Drop for RawMode {
    fn drop(&mut self) {
        if let Some(t) = &self.0 {
            restore(t);
        }
    }
}
