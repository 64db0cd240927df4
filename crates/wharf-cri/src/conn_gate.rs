//! What the daemon's network-facing servers (the streaming server's TCP port, the Docker
//! API socket) do with a connection before it has shown what it is for: it must say so
//! within [`HANDSHAKE_TIMEOUT`] of its accept, whether or not it sends anything, and at most
//! [`MAX_WAITING`] connections may be at that stage at once. A newcomer beyond that pushes
//! the oldest waiting one out, rather than being refused: a client that sends its request
//! at once gets through even while someone holds thousands of idle connections, and those
//! cost the daemon at most [`MAX_WAITING`] file descriptors.

use std::collections::VecDeque;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::Notify;

/// How long a connection may take to send its request head (and, for the streaming
/// server, its token), counted from its accept.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Connections that may be waiting for their handshake at once.
pub const MAX_WAITING: usize = 128;

/// The connections waiting for their handshake, oldest first.
#[derive(Default)]
pub struct Gate {
    next: AtomicU64,
    waiting: Mutex<VecDeque<(u64, Arc<Notify>)>>,
}

/// A connection's place in the gate's queue; dropped, it leaves the queue.
pub struct Ticket {
    gate: Arc<Gate>,
    id: u64,
    evicted: Arc<Notify>,
}

/// Why a handshake did not finish.
#[derive(Debug, PartialEq, Eq)]
pub enum Refused {
    /// Nothing complete arrived in time.
    TimedOut,
    /// Newer connections pushed it out.
    Evicted,
}

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Refused::TimedOut => write!(
                f,
                "no complete request within {} s of the connection",
                HANDSHAKE_TIMEOUT.as_secs()
            ),
            Refused::Evicted => write!(
                f,
                "closed before its request: more than {MAX_WAITING} connections were waiting"
            ),
        }
    }
}

impl Gate {
    /// A new, empty gate.
    pub fn new() -> Arc<Gate> {
        Arc::new(Gate::default())
    }

    /// Queue a connection just accepted, pushing the oldest waiting one out when full.
    /// Called from the accept loop, before the connection's task starts.
    pub fn enter(self: &Arc<Gate>) -> Ticket {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let evicted = Arc::new(Notify::new());
        let mut q = self.waiting.lock().unwrap_or_else(|e| e.into_inner());
        q.push_back((id, evicted.clone()));
        while q.len() > MAX_WAITING {
            if let Some((_, oldest)) = q.pop_front() {
                // A stored permit: the oldest is told even if it is not waiting yet.
                oldest.notify_one();
            }
        }
        Ticket {
            gate: self.clone(),
            id,
            evicted,
        }
    }

    /// How many connections are waiting for their handshake.
    pub fn waiting(&self) -> usize {
        self.waiting.lock().unwrap_or_else(|e| e.into_inner()).len()
    }
}

impl Ticket {
    /// Told when newer connections push this one out (for a connection whose handshake
    /// is not one future: keep the ticket until its first request, then drop it).
    pub fn evicted(&self) -> Arc<Notify> {
        self.evicted.clone()
    }

    /// Run the connection's handshake under the gate's rules; whatever the outcome, the
    /// connection leaves the queue.
    pub async fn handshake<T>(self, work: impl Future<Output = T>) -> Result<T, Refused> {
        let evicted = self.evicted.clone();
        let outcome = tokio::select! {
            r = tokio::time::timeout(HANDSHAKE_TIMEOUT, work) => r.map_err(|_| Refused::TimedOut),
            () = evicted.notified() => Err(Refused::Evicted),
        };
        drop(self);
        outcome
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        let mut q = self.gate.waiting.lock().unwrap_or_else(|e| e.into_inner());
        q.retain(|(id, _)| *id != self.id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(flavor = "current_thread", start_paused = true)]
    async fn the_oldest_waiting_connection_goes_and_a_silent_one_times_out() {
        let gate = Gate::new();
        let tickets: Vec<Ticket> = (0..MAX_WAITING).map(|_| gate.enter()).collect();
        assert_eq!(gate.waiting(), MAX_WAITING);
        let newest = gate.enter();
        assert_eq!(gate.waiting(), MAX_WAITING);
        let mut tickets = tickets.into_iter();
        let oldest = tickets.next().unwrap();
        assert_eq!(
            oldest.handshake(std::future::pending::<()>()).await,
            Err(Refused::Evicted)
        );
        let second = tickets.next().unwrap();
        let t = tokio::time::Instant::now();
        assert_eq!(
            second.handshake(std::future::pending::<()>()).await,
            Err(Refused::TimedOut)
        );
        assert_eq!(t.elapsed(), HANDSHAKE_TIMEOUT);
        assert_eq!(newest.handshake(async { 7 }).await, Ok(7));
        assert_eq!(gate.waiting(), MAX_WAITING - 2);
        drop(tickets);
        assert_eq!(gate.waiting(), 0);
    }
}
