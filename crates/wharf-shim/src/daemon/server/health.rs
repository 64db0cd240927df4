//! Health checks (docker's HEALTHCHECK), run by the shim while a container runs: the
//! check is an exec process in the container, started from the event loop's timer, its
//! output kept (4 KiB) and its exit judged; a check that outlives its timeout is killed.
//! The state (starting, healthy, unhealthy; the failing streak; the last five results) is
//! written to the container's `health.json` for the engine to show.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use super::Shim;
use crate::daemon::log;
use crate::protocol::{HealthResult, HealthSpec, HealthState, Status};

/// Exec ids of health checks start with this.
pub(super) const PREFIX: &str = "health-";
/// Output kept per check.
const MAX_OUTPUT: usize = 4096;
/// Results kept.
const MAX_LOG: usize = 5;

/// A container's health-check state in the shim.
pub(super) struct Health {
    state: HealthState,
    log: VecDeque<HealthResult>,
    /// When the next check starts.
    next_at: Option<Instant>,
    /// The check running: its exec id, pid, start and deadline.
    running: Option<Running>,
    /// When the container's current run began (for the start period).
    run_start: Instant,
}

pub(super) struct Running {
    pub exec_id: String,
    pub pid: i32,
    pub started: String,
    pub deadline: Instant,
    pub timed_out: bool,
    pub output: Vec<u8>,
}

impl Health {
    /// A run that just started: status starting, first check an interval from now.
    pub(super) fn started(spec: &HealthSpec) -> Health {
        let now = Instant::now();
        Health {
            state: HealthState {
                status: "starting".into(),
                ..Default::default()
            },
            log: VecDeque::new(),
            next_at: Some(now + Duration::from_millis(spec.interval_ms)),
            running: None,
            run_start: now,
        }
    }

    /// The next moment the loop must wake for this container.
    pub(super) fn deadline(&self) -> Option<Instant> {
        match &self.running {
            Some(r) if !r.timed_out => Some(r.deadline),
            Some(_) => None,
            None => self.next_at,
        }
    }

    /// Keep output of the running check.
    pub(super) fn output(&mut self, exec_id: &str, data: &[u8]) {
        if let Some(r) = self.running.as_mut().filter(|r| r.exec_id == exec_id) {
            let room = MAX_OUTPUT.saturating_sub(r.output.len());
            r.output.extend_from_slice(&data[..data.len().min(room)]);
        }
    }

    fn record(&mut self, spec: &HealthSpec, result: HealthResult) {
        let ok = result.exit_code == 0;
        let in_start_period =
            self.run_start.elapsed() < Duration::from_millis(spec.start_period_ms);
        if ok {
            self.state.status = "healthy".into();
            self.state.failing_streak = 0;
        } else if !in_start_period || self.state.status != "starting" {
            self.state.failing_streak += 1;
            if self.state.failing_streak >= spec.retries.max(1) {
                self.state.status = "unhealthy".into();
            }
        }
        self.log.push_back(result);
        while self.log.len() > MAX_LOG {
            self.log.pop_front();
        }
        self.state.log = self.log.iter().cloned().collect();
    }
}

impl Shim {
    /// Start due checks and kill overdue ones (from the timer).
    pub(super) fn health_tick(&mut self, now: Instant) {
        let keys: Vec<u64> = self
            .containers
            .iter()
            .filter(|c| c.status == Status::Running && c.health.is_some())
            .map(|c| c.key)
            .collect();
        for key in keys {
            let Some(c) = self.find_key_mut(key) else {
                continue;
            };
            let Some(h) = c.health.as_mut() else {
                continue;
            };
            if let Some(r) = h.running.as_mut() {
                if !r.timed_out && r.deadline <= now {
                    r.timed_out = true;
                    // SAFETY: our own exec child; its exit is handled as the check's.
                    unsafe { libc::kill(r.pid, libc::SIGKILL) };
                }
                continue;
            }
            if h.next_at.is_some_and(|t| t <= now) {
                h.next_at = None;
                self.start_check(key);
            }
        }
    }

    fn start_check(&mut self, key: u64) {
        let Some(c) = self.find_key_mut(key) else {
            return;
        };
        let Some(spec) = c.spec.health.clone() else {
            return;
        };
        let started = wharf_sys::time::now_rfc3339_nano();
        let result = self.exec_check(key, PREFIX, &spec.test);
        let Some(c) = self.find_key_mut(key) else {
            return;
        };
        let Some(h) = c.health.as_mut() else {
            return;
        };
        match result {
            Ok((exec_id, pid)) => {
                h.running = Some(Running {
                    exec_id,
                    pid,
                    started,
                    deadline: Instant::now() + Duration::from_millis(spec.timeout_ms),
                    timed_out: false,
                    output: Vec::new(),
                });
            }
            Err(msg) => {
                h.record(
                    &spec,
                    HealthResult {
                        start: started,
                        end: wharf_sys::time::now_rfc3339_nano(),
                        exit_code: -1,
                        output: msg,
                    },
                );
                h.next_at = Some(Instant::now() + Duration::from_millis(spec.interval_ms));
                self.write_health(key);
            }
        }
    }

    /// A health check's exec exited: judge it, keep it, schedule the next. Returns false
    /// when `exec_id` is not the running check of container `key`.
    pub(super) fn check_exited(&mut self, key: u64, exec_id: &str, code: i32) -> bool {
        let Some(c) = self.find_key_mut(key) else {
            return false;
        };
        let Some(spec) = c.spec.health.clone() else {
            return false;
        };
        let Some(h) = c.health.as_mut() else {
            return false;
        };
        let Some(r) = h.running.take_if(|r| r.exec_id == exec_id) else {
            return false;
        };
        let mut output = String::from_utf8_lossy(&r.output).into_owned();
        if r.timed_out {
            output = format!(
                "Health check exceeded timeout ({}ms){}{output}",
                spec.timeout_ms,
                if output.is_empty() { "" } else { ": " }
            );
        }
        h.record(
            &spec,
            HealthResult {
                start: r.started,
                end: wharf_sys::time::now_rfc3339_nano(),
                exit_code: if r.timed_out { -1 } else { code },
                output,
            },
        );
        h.next_at = Some(Instant::now() + Duration::from_millis(spec.interval_ms));
        // Checks leave no exec record behind.
        c.execs.retain(|e| e.id != exec_id);
        self.write_health(key);
        true
    }

    fn write_health(&self, key: u64) {
        let Some(c) = self.containers.iter().find(|c| c.key == key) else {
            return;
        };
        if let Some(h) = &c.health
            && let Err(e) = self.cfg.state.write_health(&c.spec.id, &h.state)
        {
            log(&e.to_string());
        }
    }

    /// A new run of container `key` began: its checks begin again from `starting`.
    pub(super) fn health_restart(&mut self, key: u64) {
        let Some(c) = self.find_key_mut(key) else {
            return;
        };
        c.health = c.spec.health.as_ref().map(Health::started);
        self.write_health(key);
    }
}
