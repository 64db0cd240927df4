//! `wharf build`'s progress, in the three forms docker users know (`--progress`):
//! - classic: the classic builder's `Step 2/5 : RUN make` lines on stdout, what scripts
//!   that read `Successfully built` expect (`auto` off a terminal);
//! - plain: BuildKit's numbered lines on stderr (`#3 [3/7] RUN make`, `#3 0.105 output`,
//!   `#3 CACHED`, `#3 DONE 0.4s`), each step's output prefixed with its number and time, so
//!   stages built at once stay apart;
//! - tty: a live view on stderr (`auto` on a terminal), one line per started step with its
//!   time or CACHED, the last lines of each running step's output under it, redrawn in
//!   place ten times a second, ending with `FINISHED` or the failed step's output.

use std::collections::{BTreeMap, VecDeque};
use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Result, bail};
use wharf_engine::build::BuildEvent;

/// How progress is shown.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// The classic builder's step lines.
    Classic,
    /// BuildKit's numbered plain lines.
    Plain,
    /// The live view.
    Tty,
    /// Nothing (`-q`).
    Quiet,
}

impl Mode {
    /// `--progress` (`auto`, `plain`, `tty`; `quiet` as `-q`), `auto` resolved by whether
    /// stderr is a terminal.
    pub fn of(flag: &str, quiet: bool, terminal: bool) -> Result<Mode> {
        Ok(match flag {
            _ if quiet => Mode::Quiet,
            "quiet" => Mode::Quiet,
            "auto" if terminal => Mode::Tty,
            "auto" => Mode::Classic,
            "plain" => Mode::Plain,
            "tty" => Mode::Tty,
            p => bail!("--progress {p}: use auto, plain, tty or quiet"),
        })
    }
}

/// Output lines of a running step the live view keeps under it.
const TAIL: usize = 6;

/// One step as the view knows it.
struct Step {
    total: usize,
    text: String,
    started: Instant,
    /// Set when done: how long it took.
    elapsed: Option<Duration>,
    cached: bool,
    /// Complete output lines (the live view keeps the last few, the error report all).
    lines: VecDeque<String>,
    /// Output after the last newline.
    partial: Vec<u8>,
}

impl Step {
    /// Add output; the complete lines it ends, as text.
    fn take_output(&mut self, bytes: &[u8], keep_all: bool) -> Vec<String> {
        self.partial.extend_from_slice(bytes);
        let mut done = Vec::new();
        while let Some(n) = self.partial.iter().position(|b| *b == b'\n') {
            let line: Vec<u8> = self.partial.drain(..=n).collect();
            done.push(printable(&line[..n]));
        }
        for l in &done {
            self.lines.push_back(l.clone());
            if !keep_all && self.lines.len() > TAIL {
                self.lines.pop_front();
            }
        }
        done
    }

    /// Output not ended by a newline, as a last line.
    fn flush_partial(&mut self) -> Option<String> {
        if self.partial.is_empty() {
            return None;
        }
        let l = printable(&std::mem::take(&mut self.partial));
        self.lines.push_back(l.clone());
        Some(l)
    }
}

/// A line of a step's output as a terminal line: what follows its last carriage return
/// (progress bars redraw with it), control characters as spaces.
fn printable(line: &[u8]) -> String {
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    let line = line.rsplit(|b| *b == b'\r').next().unwrap_or(line);
    let text: String = String::from_utf8_lossy(line)
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    text.trim_end().to_string()
}

#[derive(Default)]
struct State {
    steps: BTreeMap<usize, Step>,
    pulls: Vec<String>,
    /// Lines of the last frame (the live view moves up over them).
    drawn: usize,
    finished: Option<bool>,
}

/// Shows a build's events in one of the [`Mode`]s.
pub struct Progress {
    mode: Mode,
    start: Instant,
    state: Arc<Mutex<State>>,
    stop: Arc<AtomicBool>,
    ticker: Option<std::thread::JoinHandle<()>>,
}

impl Progress {
    /// Start showing; the live view redraws on a thread of its own until [`Self::finish`].
    pub fn new(mode: Mode) -> Progress {
        let start = Instant::now();
        let state = Arc::new(Mutex::new(State::default()));
        let stop = Arc::new(AtomicBool::new(false));
        let ticker = (mode == Mode::Tty).then(|| {
            let (state, stop) = (state.clone(), stop.clone());
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    std::thread::sleep(Duration::from_millis(100));
                    let mut s = state.lock().unwrap();
                    if s.steps.values().any(|st| st.elapsed.is_none()) {
                        draw(&mut s, start);
                    }
                }
            })
        });
        Progress {
            mode,
            start,
            state,
            stop,
            ticker,
        }
    }

    /// One event of the build.
    pub fn event(&self, ev: BuildEvent<'_>) {
        match self.mode {
            Mode::Quiet => {}
            Mode::Classic => classic(ev),
            Mode::Plain | Mode::Tty => {
                let mut s = self.state.lock().unwrap();
                let lines = record(&mut s, &ev, self.mode == Mode::Plain);
                if self.mode == Mode::Plain {
                    let mut err = std::io::stderr().lock();
                    for l in lines {
                        let _ = writeln!(err, "{l}");
                    }
                } else {
                    draw(&mut s, self.start);
                }
            }
        }
    }

    /// The build ended: its outcome, and the lines of the image it made (plain and live
    /// views show them as BuildKit's export step).
    pub fn finish(mut self, ok: bool, exported: &[String]) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.ticker.take() {
            let _ = t.join();
        }
        let mut s = self.state.lock().unwrap();
        let mut err = std::io::stderr().lock();
        match self.mode {
            Mode::Quiet | Mode::Classic => {}
            Mode::Plain => {
                let unfinished: Vec<usize> = unfinished(&s);
                for n in unfinished {
                    let st = s.steps.get_mut(&n).expect("listed");
                    if let Some(l) = st.flush_partial() {
                        let _ = writeln!(err, "#{n} {:.3} {l}", st.started.elapsed().as_secs_f64());
                    }
                    let _ = writeln!(err, "#{n} ERROR");
                }
                if ok && !exported.is_empty() {
                    let n = s.steps.keys().last().copied().unwrap_or(0) + 1;
                    let _ = writeln!(err, "#{n} exporting to image");
                    for l in exported {
                        let _ = writeln!(err, "#{n} {l} done");
                    }
                    let _ = writeln!(err, "#{n} DONE 0.0s");
                }
            }
            Mode::Tty => {
                s.finished = Some(ok);
                draw(&mut s, self.start);
                if ok {
                    for l in exported {
                        let _ = writeln!(err, " => {l}");
                    }
                } else {
                    // The failed steps' whole output, as BuildKit prints it after its view.
                    for n in unfinished(&s) {
                        let st = s.steps.get_mut(&n).expect("listed");
                        st.flush_partial();
                        let _ = writeln!(err, "------\n > [{n}/{}] {}:", st.total, st.text);
                        for l in &st.lines {
                            let _ = writeln!(err, "{l}");
                        }
                        let _ = writeln!(err, "------");
                    }
                }
            }
        }
        let _ = err.flush();
    }
}

/// Steps begun and not done, in order.
fn unfinished(s: &State) -> Vec<usize> {
    s.steps
        .iter()
        .filter(|(_, st)| st.elapsed.is_none())
        .map(|(n, _)| *n)
        .collect()
}

/// The classic builder's lines, on stdout.
fn classic(ev: BuildEvent<'_>) {
    let mut out = std::io::stdout().lock();
    let _ = match ev {
        BuildEvent::Step {
            number,
            total,
            text,
        } => writeln!(out, "Step {number}/{total} : {text}"),
        BuildEvent::Pulling(image) => writeln!(out, "Pulling {image}"),
        BuildEvent::Output { bytes, .. } => out.write_all(bytes),
        BuildEvent::Cached { .. } => writeln!(out, " ---> Using cache"),
        BuildEvent::StepDone { image, elapsed, .. } => writeln!(
            out,
            " ---> {} ({:.1}s)",
            image.short(),
            elapsed.as_secs_f64()
        ),
    };
    let _ = out.flush();
}

/// Record the event; the plain lines it makes (kept all when `keep_all`, for plain mode's
/// error report; the live view keeps a tail).
fn record(s: &mut State, ev: &BuildEvent<'_>, keep_all: bool) -> Vec<String> {
    match ev {
        BuildEvent::Step {
            number,
            total,
            text,
        } => {
            for st in s.steps.values_mut() {
                st.total = *total;
            }
            s.steps.insert(
                *number,
                Step {
                    total: *total,
                    text: text.to_string(),
                    started: Instant::now(),
                    elapsed: None,
                    cached: false,
                    lines: VecDeque::new(),
                    partial: Vec::new(),
                },
            );
            vec![format!("#{number} [{number}/{total}] {text}")]
        }
        BuildEvent::Pulling(image) => {
            s.pulls.push(image.to_string());
            vec![format!("#0 [internal] pull {image}")]
        }
        BuildEvent::Output { step, bytes } => match s.steps.get_mut(step) {
            Some(st) => {
                let t = st.started.elapsed().as_secs_f64();
                st.take_output(bytes, keep_all)
                    .into_iter()
                    .map(|l| format!("#{step} {t:.3} {l}"))
                    .collect()
            }
            None => Vec::new(),
        },
        BuildEvent::Cached { step } => match s.steps.get_mut(step) {
            Some(st) => {
                st.cached = true;
                vec![format!("#{step} CACHED")]
            }
            None => Vec::new(),
        },
        BuildEvent::StepDone { step, elapsed, .. } => match s.steps.get_mut(step) {
            Some(st) => {
                let mut out = Vec::new();
                if let Some(l) = st.flush_partial() {
                    out.push(format!("#{step} {:.3} {l}", elapsed.as_secs_f64()));
                }
                st.elapsed = Some(*elapsed);
                if !st.cached {
                    out.push(format!("#{step} DONE {:.1}s", elapsed.as_secs_f64()));
                }
                out
            }
            None => Vec::new(),
        },
    }
}

/// The terminal's size on stderr (80×24 when it is not one).
fn terminal_size() -> (usize, usize) {
    match rustix::termios::tcgetwinsize(std::os::fd::AsFd::as_fd(&std::io::stderr())) {
        Ok(ws) if ws.ws_col > 0 && ws.ws_row > 0 => (ws.ws_col as usize, ws.ws_row as usize),
        _ => (80, 24),
    }
}

/// The live view's lines: the header, then each begun step with its time (and a running
/// step's last output lines).
fn frame(s: &State, start: Instant, width: usize) -> Vec<String> {
    let total = s.steps.values().map(|st| st.total).max().unwrap_or(0);
    let done = s.steps.values().filter(|st| st.elapsed.is_some()).count();
    let end = match s.finished {
        Some(true) => " FINISHED",
        Some(false) => " ERROR",
        None => "",
    };
    let mut lines = vec![format!(
        "[+] Building {:.1}s ({done}/{total}){end}",
        start.elapsed().as_secs_f64()
    )];
    for p in &s.pulls {
        lines.push(fit(&format!(" => [internal] pull {p}"), "", width));
    }
    for (n, st) in &s.steps {
        let failed = s.finished == Some(false) && st.elapsed.is_none();
        let mark = match () {
            _ if failed => "ERROR ",
            _ if st.cached => "CACHED ",
            _ => "",
        };
        let t = st.elapsed.unwrap_or_else(|| st.started.elapsed());
        lines.push(fit(
            &format!(" => {mark}[{n}/{}] {}", st.total, st.text),
            &format!("{:.1}s", t.as_secs_f64()),
            width,
        ));
        if st.elapsed.is_none() && s.finished.is_none() {
            for l in &st.lines {
                lines.push(fit(&format!(" => => # {l}"), "", width));
            }
        }
    }
    lines
}

/// `left` and `right` on one line of `width` columns: `left` cut to fit, `right` at the end.
fn fit(left: &str, right: &str, width: usize) -> String {
    if right.is_empty() {
        return left.chars().take(width).collect();
    }
    let room = width.saturating_sub(right.chars().count() + 1).max(10);
    let mut l: String = left.chars().take(room).collect();
    let pad = width.saturating_sub(l.chars().count() + right.chars().count());
    l.push_str(&" ".repeat(pad.max(1)));
    l.push_str(right);
    l
}

/// Redraw the live view over the last one. A frame taller than the terminal keeps its
/// header and its last lines, so the cursor never has to move above the screen.
fn draw(s: &mut State, start: Instant) {
    let (width, height) = terminal_size();
    let mut lines = frame(s, start, width.saturating_sub(1).max(20));
    let room = height.saturating_sub(1).max(3);
    if lines.len() > room {
        let cut = lines.len() - room;
        lines.drain(1..=cut);
    }
    let mut err = std::io::stderr().lock();
    let mut buf = String::new();
    if s.drawn > 0 {
        buf.push_str(&format!("\x1b[{}A", s.drawn));
    }
    for l in &lines {
        buf.push_str("\x1b[2K");
        buf.push_str(l);
        buf.push('\n');
    }
    // A shorter frame than the last: clear what is below it.
    buf.push_str("\x1b[J");
    let _ = err.write_all(buf.as_bytes());
    let _ = err.flush();
    s.drawn = lines.len();
}

#[cfg(test)]
mod tests {
    use super::*;

    fn step(s: &mut State, n: usize, text: &str) {
        record(
            s,
            &BuildEvent::Step {
                number: n,
                total: 3,
                text,
            },
            false,
        );
    }

    #[test]
    fn plain_lines_number_output_and_tell_cached_and_done() {
        let mut s = State::default();
        let img = wharf_engine::images::Digest::of(b"x");
        step(&mut s, 2, "RUN echo hi");
        let out = record(
            &mut s,
            &BuildEvent::Output {
                step: 2,
                bytes: b"hi\nhal",
            },
            true,
        );
        assert_eq!(out.len(), 1);
        assert!(
            out[0].starts_with("#2 0.") && out[0].ends_with(" hi"),
            "{out:?}"
        );
        let done = record(
            &mut s,
            &BuildEvent::StepDone {
                step: 2,
                image: &img,
                elapsed: Duration::from_millis(420),
            },
            true,
        );
        assert!(
            done[0].ends_with(" hal"),
            "the unended line is flushed: {done:?}"
        );
        assert_eq!(done[1], "#2 DONE 0.4s");
        step(&mut s, 3, "COPY a /a");
        assert_eq!(
            record(&mut s, &BuildEvent::Cached { step: 3 }, true),
            vec!["#3 CACHED"]
        );
        let done = record(
            &mut s,
            &BuildEvent::StepDone {
                step: 3,
                image: &img,
                elapsed: Duration::ZERO,
            },
            true,
        );
        assert!(done.is_empty(), "a cached step has no DONE line: {done:?}");
    }

    #[test]
    fn the_live_frame_shows_times_cached_steps_and_a_running_steps_tail() {
        let mut s = State::default();
        let img = wharf_engine::images::Digest::of(b"x");
        step(&mut s, 1, "FROM busybox");
        record(&mut s, &BuildEvent::Cached { step: 1 }, false);
        record(
            &mut s,
            &BuildEvent::StepDone {
                step: 1,
                image: &img,
                elapsed: Duration::from_millis(10),
            },
            false,
        );
        step(&mut s, 2, "RUN make");
        let many: String = (0..10).map(|i| format!("50%\rline{i}\x1b\r\n")).collect();
        record(
            &mut s,
            &BuildEvent::Output {
                step: 2,
                bytes: many.as_bytes(),
            },
            false,
        );
        let f = frame(&s, Instant::now(), 60);
        assert!(
            f[0].starts_with("[+] Building ") && f[0].ends_with("(1/3)"),
            "{f:?}"
        );
        assert!(f[1].starts_with(" => CACHED [1/3] FROM busybox") && f[1].ends_with("0.0s"));
        assert_eq!(
            f[1].chars().count(),
            60,
            "times are at the right edge: {f:?}"
        );
        assert!(f[2].starts_with(" => [2/3] RUN make"));
        // The last six lines, carriage returns and escapes cleaned.
        assert_eq!(f.len(), 3 + TAIL, "{f:?}");
        assert_eq!(f[3], " => => # line4");
        assert_eq!(f[8], " => => # line9");
        s.finished = Some(false);
        let f = frame(&s, Instant::now(), 60);
        assert!(f[0].ends_with("(1/3) ERROR"), "{f:?}");
        assert!(f[2].starts_with(" => ERROR [2/3] RUN make"), "{f:?}");
        assert_eq!(f.len(), 3, "a finished view hides the tails: {f:?}");
    }

    #[test]
    fn lines_fit_the_terminal() {
        let long = "x".repeat(200);
        let l = fit(&long, "1.5s", 50);
        assert_eq!(l.chars().count(), 50);
        assert!(l.ends_with(" 1.5s"));
        assert_eq!(fit(&long, "", 50).chars().count(), 50);
    }

    #[test]
    fn auto_is_the_live_view_on_a_terminal_only() {
        assert_eq!(Mode::of("auto", false, true).unwrap(), Mode::Tty);
        assert_eq!(Mode::of("auto", false, false).unwrap(), Mode::Classic);
        assert_eq!(Mode::of("tty", true, true).unwrap(), Mode::Quiet);
        assert!(Mode::of("fancy", false, true).is_err());
    }
}
