//! Pull progress: one live line per layer on a terminal (redrawn in place, at most ten
//! times a second), plain lines otherwise (one per change of a layer's state).

use std::collections::HashMap;
use std::io::Write;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use wharf_engine::images::Digest;
use wharf_engine::images::PullEvent;

/// Prints pull progress to stdout (or stderr, for `wharf run`, whose stdout is the
/// container's).
pub struct Display {
    stderr: bool,
    tty: bool,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    order: Vec<Digest>,
    layers: HashMap<Digest, Layer>,
    drawn: usize,
    last_draw: Option<Instant>,
}

#[derive(Default, Clone)]
struct Layer {
    exists: bool,
    done: u64,
    total: u64,
    downloading: bool,
    downloaded: bool,
    extracting: bool,
    streaming: bool,
    extracted: bool,
    /// The label last printed (plain mode).
    printed: String,
}

impl Layer {
    /// The state's name (what plain mode prints).
    fn label(&self) -> &'static str {
        if self.extracted {
            "Pull complete"
        } else if self.exists {
            "Already exists"
        } else if self.extracting && (self.downloaded || !self.streaming) {
            "Extracting"
        } else if self.downloaded {
            "Download complete"
        } else if self.downloading || self.streaming {
            "Downloading"
        } else {
            "Waiting"
        }
    }

    /// The terminal line: the label, with a bar while bytes arrive.
    fn line(&self) -> String {
        if self.label() != "Downloading" {
            return self.label().to_string();
        }
        let w = 30usize;
        let filled = if self.total == 0 {
            w
        } else {
            ((self.done as f64 / self.total as f64) * w as f64) as usize
        }
        .min(w);
        format!(
            "Downloading [{}>{}] {}/{}{}",
            "=".repeat(filled),
            " ".repeat(w - filled),
            mb(self.done),
            mb(self.total),
            if self.extracting { ", extracting" } else { "" }
        )
    }
}

fn mb(n: u64) -> String {
    if n >= 1_000_000 {
        format!("{:.1}MB", n as f64 / 1e6)
    } else {
        format!("{:.1}kB", n as f64 / 1e3)
    }
}

impl Display {
    /// `tty`: redraw lines in place; else print each state change once.
    pub fn new(tty: bool) -> Display {
        Display {
            stderr: false,
            tty,
            state: Mutex::new(State::default()),
        }
    }

    /// Progress on stderr.
    pub fn on_stderr(tty: bool) -> Display {
        Display {
            stderr: true,
            ..Display::new(tty)
        }
    }

    fn update(&self, d: &Digest, f: impl FnOnce(&mut Layer), urgent: bool) {
        let mut s = self.state.lock().unwrap();
        if !s.layers.contains_key(d) {
            s.order.push(d.clone());
        }
        let layer = s.layers.entry(d.clone()).or_default();
        f(layer);
        let mut out: Box<dyn Write> = if self.stderr {
            Box::new(std::io::stderr().lock())
        } else {
            Box::new(std::io::stdout().lock())
        };
        if self.tty {
            let due = s
                .last_draw
                .is_none_or(|t| t.elapsed() >= Duration::from_millis(100));
            if !(urgent || due) {
                return;
            }
            if s.drawn > 0 {
                let _ = write!(out, "\x1b[{}A", s.drawn);
            }
            for k in &s.order {
                let _ = writeln!(out, "\x1b[2K{}: {}", k.short(), s.layers[k].line());
            }
            s.drawn = s.order.len();
            s.last_draw = Some(Instant::now());
        } else {
            let label = layer.label();
            if layer.printed != label {
                layer.printed = label.to_string();
                let _ = writeln!(out, "{}: {label}", d.short());
            }
        }
        let _ = out.flush();
    }
}

impl wharf_engine::images::PullProgress for Display {
    fn event(&self, e: PullEvent<'_>) {
        match e {
            PullEvent::Resolved { name, layers, .. } => {
                if self.stderr {
                    eprintln!("Pulling {name}");
                } else {
                    println!("Pulling {name}");
                }
                for l in layers {
                    if let Ok(d) = l.digest() {
                        self.update(&d, |_| {}, true);
                    }
                }
            }
            PullEvent::LayerExists { digest } => self.update(digest, |l| l.exists = true, true),
            PullEvent::Downloading {
                digest,
                done,
                total,
            } => self.update(
                digest,
                |l| {
                    l.downloading = true;
                    l.done = done;
                    l.total = total;
                },
                false,
            ),
            PullEvent::Downloaded { digest } => self.update(digest, |l| l.downloaded = true, true),
            PullEvent::Extracting { digest, streaming } => self.update(
                digest,
                |l| {
                    l.extracting = true;
                    l.streaming = streaming;
                },
                true,
            ),
            PullEvent::Extracted { digest } => self.update(digest, |l| l.extracted = true, true),
        }
    }
}
