//! Pull progress: one live line per layer on a terminal, plain lines otherwise.

use std::collections::HashMap;
use std::io::Write;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use wharf_image::PullEvent;
use wharf_image::digest::Digest;

/// Prints pull progress to stdout.
pub struct Display {
    tty: bool,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    order: Vec<Digest>,
    lines: HashMap<Digest, String>,
    drawn: usize,
    last_draw: Option<Instant>,
}

impl Display {
    /// `tty`: redraw lines in place; else print each state change once.
    pub fn new(tty: bool) -> Display {
        Display {
            tty,
            state: Mutex::new(State::default()),
        }
    }

    fn set(&self, d: &Digest, text: String, force: bool) {
        let mut s = self.state.lock().unwrap();
        if !s.lines.contains_key(d) {
            s.order.push(d.clone());
        }
        let changed = s.lines.get(d) != Some(&text);
        s.lines.insert(d.clone(), text.clone());
        let mut out = std::io::stdout().lock();
        if self.tty {
            let due = s
                .last_draw
                .is_none_or(|t| t.elapsed() >= Duration::from_millis(100));
            if !(force || due) {
                return;
            }
            if s.drawn > 0 {
                let _ = write!(out, "\x1b[{}A", s.drawn);
            }
            for k in &s.order {
                let _ = writeln!(out, "\x1b[2K{}: {}", k.short(), s.lines[k]);
            }
            s.drawn = s.order.len();
            s.last_draw = Some(Instant::now());
        } else if force && changed {
            let _ = writeln!(out, "{}: {text}", d.short());
        }
        let _ = out.flush();
    }
}

fn mb(n: u64) -> String {
    if n >= 1 << 20 {
        format!("{:.1}MB", n as f64 / 1e6)
    } else {
        format!("{:.1}kB", n as f64 / 1e3)
    }
}

fn bar(done: u64, total: u64) -> String {
    let w = 30usize;
    let filled = if total == 0 {
        w
    } else {
        ((done as f64 / total as f64) * w as f64) as usize
    };
    let filled = filled.min(w);
    format!("[{}>{}]", "=".repeat(filled), " ".repeat(w - filled))
}

impl wharf_image::PullProgress for Display {
    fn event(&self, e: PullEvent<'_>) {
        match e {
            PullEvent::Resolved { name, layers, .. } => {
                println!("Pulling {name}");
                for l in layers {
                    if let Ok(d) = l.digest() {
                        self.set(&d, "Waiting".into(), true);
                    }
                }
            }
            PullEvent::LayerExists { digest } => self.set(digest, "Already exists".into(), true),
            PullEvent::Downloading {
                digest,
                done,
                total,
            } => {
                let text = if self.tty {
                    format!(
                        "Downloading {} {}/{}",
                        bar(done, total),
                        mb(done),
                        mb(total)
                    )
                } else {
                    "Downloading".into()
                };
                self.set(digest, text, !self.tty);
            }
            PullEvent::Downloaded { digest } => self.set(digest, "Download complete".into(), true),
            PullEvent::Extracting { digest } => self.set(digest, "Extracting".into(), true),
            PullEvent::Extracted { digest } => self.set(digest, "Pull complete".into(), true),
        }
    }
}
