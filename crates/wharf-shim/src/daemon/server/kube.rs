//! kubelet's work around a running container, done by the pod's shim so that it goes on
//! with no engine alive: the startup, liveness and readiness probes with their delays,
//! periods, timeouts and thresholds; the postStart hook (the pod's next container waits
//! for it; a failure kills the container) and the preStop hook (before the stop signal,
//! within the grace period); and the stop order of sidecars (after the app containers).
//! The state kubelet would report (started, ready, the hook running, the last failure) is
//! written to the container's `probes.json`.

use super::actions::ActionRun;
use super::*;

/// Which action of a container a finished run belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Which {
    Startup,
    Liveness,
    Readiness,
    Hook,
}

impl Which {
    fn probe_name(self) -> &'static str {
        match self {
            Which::Startup => "Startup",
            Which::Liveness => "Liveness",
            Which::Readiness => "Readiness",
            Which::Hook => "Hook",
        }
    }
}

const POST_START: &str = "PostStart";
const PRE_STOP: &str = "PreStop";

/// One probe's schedule and streaks.
pub(super) struct Prober {
    spec: ProbeSpec,
    next_at: Option<Instant>,
    run: Option<ActionRun>,
    successes: u32,
    failures: u32,
}

impl Prober {
    fn new(spec: &ProbeSpec) -> Prober {
        Prober {
            spec: spec.clone(),
            next_at: None,
            run: None,
            successes: 0,
            failures: 0,
        }
    }
}

/// A container's probes and hooks in its current run.
pub(super) struct KubeRun {
    pub state: KubeState,
    startup: Option<Prober>,
    liveness: Option<Prober>,
    readiness: Option<Prober>,
    hook: Option<ActionRun>,
    run_start: Instant,
    /// The container is being killed: no more probes.
    terminating: bool,
    /// A stop held back (for the preStop hook, or, for a sidecar, until the app
    /// containers exited): the signal it sends.
    pending_signal: Option<i32>,
    /// A sidecar's stop waits for the app containers to exit.
    waits_for_apps: bool,
}

impl KubeRun {
    fn prober_mut(&mut self, w: Which) -> Option<&mut Prober> {
        match w {
            Which::Startup => self.startup.as_mut(),
            Which::Liveness => self.liveness.as_mut(),
            Which::Readiness => self.readiness.as_mut(),
            Which::Hook => None,
        }
    }

    fn slot(&mut self, w: Which) -> Option<&mut Option<ActionRun>> {
        match w {
            Which::Hook => Some(&mut self.hook),
            w => self.prober_mut(w).map(|p| &mut p.run),
        }
    }

    /// Every action under way.
    pub(super) fn runs_mut(&mut self) -> impl Iterator<Item = &mut ActionRun> {
        self.runs_with_index().map(|(_, r)| r)
    }

    pub(super) fn runs_with_index(&mut self) -> impl Iterator<Item = (Which, &mut ActionRun)> {
        let hook = self.hook.as_mut().map(|r| (Which::Hook, r));
        let probes = [
            (Which::Startup, self.startup.as_mut()),
            (Which::Liveness, self.liveness.as_mut()),
            (Which::Readiness, self.readiness.as_mut()),
        ]
        .into_iter()
        .filter_map(|(w, p)| p.and_then(|p| p.run.as_mut()).map(|r| (w, r)));
        hook.into_iter().chain(probes)
    }

    /// The action `pred` picks, if any runs.
    pub(super) fn which(&self, pred: impl Fn(&ActionRun) -> bool) -> Option<Which> {
        if self.hook.as_ref().is_some_and(&pred) {
            return Some(Which::Hook);
        }
        [
            (Which::Startup, &self.startup),
            (Which::Liveness, &self.liveness),
            (Which::Readiness, &self.readiness),
        ]
        .into_iter()
        .find(|(_, p)| p.as_ref().and_then(|p| p.run.as_ref()).is_some_and(&pred))
        .map(|(w, _)| w)
    }

    /// Take the run of `w` out (it is over).
    pub(super) fn take(&mut self, w: Which) -> Option<ActionRun> {
        self.slot(w)?.take()
    }

    /// What the loop must wake for.
    fn deadline(&self) -> Option<Instant> {
        let probes = [&self.startup, &self.liveness, &self.readiness]
            .into_iter()
            .flatten()
            .map(|p| match &p.run {
                Some(r) => r.deadline(),
                None if self.terminating || self.hook.is_some() => None,
                None => p.next_at,
            });
        probes
            .chain(std::iter::once(
                self.hook.as_ref().and_then(|r| r.deadline()),
            ))
            .flatten()
            .min()
    }

    /// Schedule the probes a start (or a passed startup probe) lets run.
    fn schedule(&mut self) {
        let now = Instant::now();
        let at = |p: &Prober| (self.run_start + ms(p.spec.initial_delay_ms)).max(now);
        if !self.state.started {
            if let Some(p) = &self.startup {
                let t = at(p);
                self.startup.as_mut().expect("some").next_at = Some(t);
            }
            return;
        }
        for w in [Which::Liveness, Which::Readiness] {
            let start = self.run_start;
            if let Some(p) = self.prober_mut(w) {
                p.next_at = Some((start + ms(p.spec.initial_delay_ms)).max(now));
            }
        }
        if self.readiness.is_none() {
            self.state.ready = true;
        }
    }
}

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

impl Shim {
    /// A run of container `key` began: its probes begin again, after its postStart hook.
    pub(super) fn kube_started(&mut self, key: u64) {
        let Some(c) = self.find_key_mut(key) else {
            return;
        };
        let Some(spec) = c.spec.kube.clone() else {
            return;
        };
        let mut run = KubeRun {
            state: KubeState {
                started: spec.startup.is_none(),
                ready: false,
                hook: None,
                last_failure: c.kube.as_ref().and_then(|k| k.state.last_failure.clone()),
                killed_for: None,
            },
            startup: spec.startup.as_ref().map(Prober::new),
            liveness: spec.liveness.as_ref().map(Prober::new),
            readiness: spec.readiness.as_ref().map(Prober::new),
            hook: None,
            run_start: Instant::now(),
            terminating: false,
            pending_signal: None,
            waits_for_apps: false,
        };
        match &spec.post_start {
            Some(action) => {
                run.state.hook = Some(POST_START.into());
                c.kube = Some(run);
                match self.start_action(key, action, None) {
                    Ok(r) => {
                        if let Some(k) = self.find_key_mut(key).and_then(|c| c.kube.as_mut()) {
                            k.hook = Some(r);
                        }
                    }
                    Err(m) => self.action_done(key, Which::Hook, Err(m)),
                }
            }
            None => {
                run.schedule();
                c.kube = Some(run);
            }
        }
        self.write_kube(key);
    }

    /// The container exited: whatever its probes and hooks were doing is over.
    pub(super) fn kube_exited(&mut self, key: u64) {
        let Some(k) = self.find_key_mut(key).and_then(|c| c.kube.as_mut()) else {
            return;
        };
        for r in k.runs_mut() {
            if let Some(pid) = r.pid {
                // SAFETY: our own child; reaped (as an orphan) by the loop.
                unsafe { libc::kill(pid, libc::SIGKILL) };
            }
        }
        k.hook = None;
        for p in [&mut k.startup, &mut k.liveness, &mut k.readiness]
            .into_iter()
            .flatten()
        {
            p.run = None;
            p.next_at = None;
        }
        k.state.started = false;
        k.state.ready = false;
        k.state.hook = None;
        k.pending_signal = None;
        k.waits_for_apps = false;
        self.write_kube(key);
    }

    /// The next moment a probe or hook of any running container needs the loop.
    pub(super) fn kube_deadline(&self) -> Option<Instant> {
        self.containers
            .iter()
            .filter(|c| c.status == Status::Running)
            .filter_map(|c| c.kube.as_ref()?.deadline())
            .min()
    }

    /// Start the probes that are due (from the timer).
    pub(super) fn kube_tick(&mut self, now: Instant) {
        self.action_tick(now);
        let mut due = Vec::new();
        for c in &mut self.containers {
            if c.status != Status::Running {
                continue;
            }
            let Some(k) = c.kube.as_mut() else { continue };
            if k.terminating || k.hook.is_some() {
                continue;
            }
            for w in [Which::Startup, Which::Liveness, Which::Readiness] {
                if let Some(p) = k.prober_mut(w)
                    && p.run.is_none()
                    && p.next_at.is_some_and(|t| t <= now)
                {
                    p.next_at = None;
                    due.push((c.key, w, p.spec.action.clone(), p.spec.timeout_ms));
                }
            }
        }
        for (key, w, action, timeout_ms) in due {
            match self.start_action(key, &action, Some(ms(timeout_ms))) {
                Ok(run) => {
                    if let Some(slot) = self
                        .find_key_mut(key)
                        .and_then(|c| c.kube.as_mut())
                        .and_then(|k| k.slot(w))
                    {
                        *slot = Some(run);
                    }
                }
                Err(m) => self.action_done(key, w, Err(m)),
            }
        }
    }

    /// A probe or hook action of container `key` ended (its run is taken out already).
    pub(super) fn action_done(&mut self, key: u64, w: Which, result: Result<(), String>) {
        match w {
            Which::Hook => self.hook_done(key, result),
            w => self.probe_done(key, w, result),
        }
        self.write_kube(key);
    }

    fn probe_done(&mut self, key: u64, w: Which, result: Result<(), String>) {
        let Some(c) = self.find_key_mut(key) else {
            return;
        };
        let id = c.spec.id.clone();
        let Some(k) = c.kube.as_mut() else { return };
        if k.terminating {
            return;
        }
        let Some(p) = k.prober_mut(w) else { return };
        let period = ms(p.spec.period_ms);
        let mut kill = None;
        match result {
            Ok(()) => {
                p.failures = 0;
                p.successes += 1;
                if p.successes >= p.spec.success_threshold.max(1) {
                    match w {
                        Which::Startup => {
                            p.next_at = None;
                            k.state.started = true;
                            k.schedule();
                            // A sidecar that started lets the next container start.
                            self.pod_dirty = true;
                            return;
                        }
                        Which::Readiness => k.state.ready = true,
                        _ => {}
                    }
                }
            }
            Err(msg) => {
                p.successes = 0;
                p.failures += 1;
                let text = format!("{} probe failed: {msg}", w.probe_name());
                let failed = p.failures >= p.spec.failure_threshold.max(1);
                // Once per streak (its first failure), and when it decides: a probe that
                // keeps failing every second does not fill the shim's log.
                if p.failures == 1 || p.failures == p.spec.failure_threshold.max(1) {
                    log(&format!("container {id}: {text}"));
                }
                let grace = p.spec.grace_ms;
                k.state.last_failure = Some(text);
                if failed {
                    match w {
                        Which::Readiness => k.state.ready = false,
                        _ => kill = Some(grace),
                    }
                }
            }
        }
        if let Some(p) = k.prober_mut(w) {
            p.next_at = Some(Instant::now() + period);
        }
        if let Some(grace) = kill {
            let what = match w {
                Which::Startup => "startup",
                _ => "liveness",
            };
            log(&format!(
                "container {id} failed its {what} probe: it will be restarted"
            ));
            self.kill_for(key, "Unhealthy", grace, true);
        }
    }

    fn hook_done(&mut self, key: u64, result: Result<(), String>) {
        let Some(c) = self.find_key_mut(key) else {
            return;
        };
        let id = c.spec.id.clone();
        let running = c.status == Status::Running;
        let Some(k) = c.kube.as_mut() else { return };
        let hook = k.state.hook.take();
        let failure = result.err().map(|msg| {
            let text = format!(
                "{}Hook failed: {msg}",
                hook.as_deref().unwrap_or("Lifecycle")
            );
            log(&format!("container {id}: {text}"));
            k.state.last_failure = Some(text.clone());
            text
        });
        match hook.as_deref() {
            Some(POST_START) => {
                if failure.is_none() {
                    k.schedule();
                }
                self.pod_dirty = true;
                if failure.is_some() {
                    self.kill_for(key, "FailedPostStartHook", None, false);
                }
            }
            Some(PRE_STOP) => {
                if let Some(sig) = k.pending_signal.take()
                    && running
                    && let Err(e) = self.cfg.runtime.kill(&id, sig, false)
                {
                    log(&format!("stop {id}: signal {sig}: {e}"));
                }
            }
            _ => {}
        }
    }

    /// Kill container `key` for a failed probe or hook, within its grace period (the
    /// probe's own, else the pod's); its restart policy then applies.
    fn kill_for(&mut self, key: u64, reason: &str, grace_ms: Option<u64>, pre_stop: bool) {
        let Some(c) = self.find_key_mut(key) else {
            return;
        };
        let Some(spec) = c.spec.kube.clone() else {
            return;
        };
        if let Some(k) = c.kube.as_mut() {
            k.terminating = true;
            k.state.ready = false;
            k.state.killed_for = Some(reason.into());
        }
        self.begin_stop(
            key,
            spec.signal(),
            grace_ms.unwrap_or(spec.grace_ms),
            pre_stop,
        );
    }

    /// Stop container `key`: its preStop hook first when it has one (and `pre_stop`),
    /// then `signal`; SIGKILL once `grace_ms` has passed since now, hook included.
    pub(super) fn begin_stop(&mut self, key: u64, signal: i32, grace_ms: u64, pre_stop: bool) {
        let Some(c) = self.find_key_mut(key) else {
            return;
        };
        let id = c.spec.id.clone();
        if c.status != Status::Running {
            return;
        }
        let kill_at = Instant::now() + ms(grace_ms);
        c.kill_at = Some(c.kill_at.map_or(kill_at, |t| t.min(kill_at)));
        let hook = c
            .spec
            .kube
            .as_ref()
            .and_then(|k| k.pre_stop.clone())
            .filter(|_| pre_stop);
        let Some(k) = c.kube.as_mut().filter(|_| hook.is_some()) else {
            if let Err(e) = self.cfg.runtime.kill(&id, signal, false) {
                log(&format!("stop {id}: signal {signal}: {e}"));
            }
            return;
        };
        if k.state.hook.as_deref() == Some(PRE_STOP) {
            return;
        }
        k.terminating = true;
        if let Some(pid) = k.hook.take().and_then(|r| r.pid) {
            // A postStart hook still running is cut short.
            // SAFETY: our own child.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
        k.state.hook = Some(PRE_STOP.into());
        k.pending_signal = Some(signal);
        match self.start_action(key, &hook.expect("checked"), Some(ms(grace_ms))) {
            Ok(run) => {
                if let Some(k) = self.find_key_mut(key).and_then(|c| c.kube.as_mut()) {
                    k.hook = Some(run);
                }
            }
            Err(m) => self.action_done(key, Which::Hook, Err(m)),
        }
        self.write_kube(key);
    }

    /// A stop of sidecar `key` while app containers still run: held back until they
    /// have exited (then [`Shim::release_sidecars`] sends it). True if held.
    pub(super) fn hold_sidecar_stop(&mut self, key: u64, signal: i32, grace_ms: u64) -> bool {
        let apps_run = self.apps_running();
        let Some(c) = self.find_key_mut(key) else {
            return false;
        };
        let sidecar = c.spec.kube.as_ref().is_some_and(|k| k.sidecar);
        if !sidecar || !apps_run || c.status != Status::Running {
            return false;
        }
        c.kill_at = Some(Instant::now() + ms(grace_ms));
        if let Some(k) = c.kube.as_mut() {
            k.pending_signal = Some(signal);
            k.waits_for_apps = true;
        }
        true
    }

    /// App containers (neither init containers nor sidecars) that run or are created.
    fn apps_running(&self) -> bool {
        self.containers
            .iter()
            .any(|c| !c.spec.init && matches!(c.status, Status::Running | Status::Created))
    }

    /// Once no app container runs, the sidecar stops held back go ahead (preStop hook,
    /// signal), within what is left of their grace periods, in the reverse of their start
    /// order: each once the sidecars started after it have exited (kubelet's order).
    pub(super) fn release_sidecars(&mut self) {
        if self.apps_running() {
            return;
        }
        let now = Instant::now();
        let sidecar = |c: &Container| c.spec.kube.as_ref().is_some_and(|k| k.sidecar);
        // The sidecars in start order (the plan's init order is the containers' order).
        let order: Vec<u64> = self
            .containers
            .iter()
            .filter(|c| sidecar(c))
            .map(|c| c.key)
            .collect();
        for (i, key) in order.iter().enumerate().rev() {
            let later_running = order[i + 1..].iter().any(|k| {
                self.containers
                    .iter()
                    .any(|c| c.key == *k && c.status == Status::Running)
            });
            if later_running {
                return;
            }
            let Some(c) = self.find_key_mut(*key) else {
                continue;
            };
            let Some(k) = c.kube.as_mut().filter(|k| k.waits_for_apps) else {
                continue;
            };
            k.waits_for_apps = false;
            let Some(sig) = k.pending_signal.take() else {
                continue;
            };
            let left = c.kill_at.map(|t| t.saturating_duration_since(now));
            let left = left.unwrap_or_default().as_millis() as u64;
            self.begin_stop(*key, sig, left, true);
            // The ones started before it wait for its exit.
            return;
        }
    }

    /// Once every app container of a pod plan has exited for good, its sidecars have
    /// nothing left to serve: they are stopped (kubelet's end of a Job's pod).
    pub(super) fn end_sidecars_when_apps_done(&mut self) {
        let Some((_, apps)) = &self.plan else { return };
        let done = !apps.is_empty()
            && apps.iter().all(|k| {
                self.containers
                    .iter()
                    .find(|c| c.key == *k)
                    .is_none_or(|c| c.status == Status::Exited && c.restart_at.is_none())
            });
        if !done || self.shutting_down {
            return;
        }
        let now = Instant::now();
        for c in self
            .containers
            .iter_mut()
            .filter(|c| c.status == Status::Running && !c.stopping)
        {
            let Some(spec) = c.spec.kube.as_ref().filter(|k| k.sidecar) else {
                continue;
            };
            let sig = spec.signal();
            let grace = Duration::from_millis(spec.grace_ms);
            c.stopping = true;
            c.kill_at = Some(now + grace);
            if let Some(k) = c.kube.as_mut() {
                k.pending_signal = Some(sig);
                k.waits_for_apps = true;
            }
        }
        // In the reverse of their start order.
        self.release_sidecars();
    }

    /// Whether container `key` holds the pod's start sequence: its postStart hook runs,
    /// or (a sidecar) it has not started yet (startup probe included).
    pub(super) fn holds_start(&self, key: u64) -> bool {
        let Some(c) = self.containers.iter().find(|c| c.key == key) else {
            return false;
        };
        let hook = c
            .kube
            .as_ref()
            .is_some_and(|k| k.state.hook.as_deref() == Some(POST_START));
        hook || (c.spec.kube.as_ref().is_some_and(|k| k.sidecar)
            && c.restart_count == 0
            && !(c.status == Status::Running && c.kube.as_ref().is_some_and(|k| k.state.started)))
    }

    fn write_kube(&self, key: u64) {
        let Some(c) = self.containers.iter().find(|c| c.key == key) else {
            return;
        };
        if let Some(k) = &c.kube
            && let Err(e) = self.cfg.state.write_kube_state(&c.spec.id, &k.state)
        {
            log(&e.to_string());
        }
    }
}
