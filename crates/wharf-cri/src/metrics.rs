//! Prometheus metrics on `daemon.metrics-address` (off unless configured): CRI requests by
//! method and code with latency histograms, image pulls by result, and at each scrape the
//! pods and containers by state, the running shims and their memory (RSS).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

use crate::engines::Engines;
use crate::log::{Level, log};

/// Latency bucket bounds, in seconds.
const BUCKETS: [f64; 12] = [
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0,
];

#[derive(Default)]
struct Histogram {
    counts: [u64; BUCKETS.len()],
    count: u64,
    sum: f64,
}

#[derive(Default)]
struct Registry {
    requests: BTreeMap<(String, String), u64>,
    latency: BTreeMap<String, Histogram>,
    pulls: BTreeMap<&'static str, u64>,
}

fn registry() -> &'static Mutex<Registry> {
    static R: OnceLock<Mutex<Registry>> = OnceLock::new();
    R.get_or_init(Default::default)
}

/// Count a CRI request and its latency.
pub fn request(method: &str, code: tonic::Code, took: Duration) {
    crate::idle::touch();
    let mut r = registry().lock().unwrap_or_else(|e| e.into_inner());
    *r.requests
        .entry((method.to_string(), format!("{code:?}")))
        .or_default() += 1;
    let h = r.latency.entry(method.to_string()).or_default();
    let secs = took.as_secs_f64();
    for (i, b) in BUCKETS.iter().enumerate() {
        if secs <= *b {
            h.counts[i] += 1;
        }
    }
    h.count += 1;
    h.sum += secs;
}

/// Counts a request that cannot fail, with its latency, when dropped.
pub struct Timer(&'static str, std::time::Instant);

impl Timer {
    /// Start timing `method`.
    pub fn new(method: &'static str) -> Timer {
        Timer(method, std::time::Instant::now())
    }
}

impl Drop for Timer {
    fn drop(&mut self) {
        request(self.0, tonic::Code::Ok, self.1.elapsed());
    }
}

/// Count an image pull.
pub fn pull(ok: bool) {
    let mut r = registry().lock().unwrap_or_else(|e| e.into_inner());
    *r.pulls
        .entry(if ok { "success" } else { "failure" })
        .or_default() += 1;
}

/// Label values escaped as the text format wants.
fn esc(s: &str) -> String {
    s.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// The counters and histograms, in Prometheus' text format.
fn render_counters(out: &mut String) {
    let r = registry().lock().unwrap_or_else(|e| e.into_inner());
    out.push_str("# HELP wharf_cri_requests_total CRI requests served, by method and gRPC code.\n");
    out.push_str("# TYPE wharf_cri_requests_total counter\n");
    for ((m, c), n) in &r.requests {
        let _ = writeln!(
            out,
            "wharf_cri_requests_total{{method=\"{}\",code=\"{}\"}} {n}",
            esc(m),
            esc(c)
        );
    }
    out.push_str("# HELP wharf_cri_request_duration_seconds CRI request latency, by method.\n");
    out.push_str("# TYPE wharf_cri_request_duration_seconds histogram\n");
    for (m, h) in &r.latency {
        let m = esc(m);
        for (i, b) in BUCKETS.iter().enumerate() {
            let _ = writeln!(
                out,
                "wharf_cri_request_duration_seconds_bucket{{method=\"{m}\",le=\"{b}\"}} {}",
                h.counts[i]
            );
        }
        let _ = writeln!(
            out,
            "wharf_cri_request_duration_seconds_bucket{{method=\"{m}\",le=\"+Inf\"}} {}",
            h.count
        );
        let _ = writeln!(
            out,
            "wharf_cri_request_duration_seconds_sum{{method=\"{m}\"}} {}",
            h.sum
        );
        let _ = writeln!(
            out,
            "wharf_cri_request_duration_seconds_count{{method=\"{m}\"}} {}",
            h.count
        );
    }
    out.push_str("# HELP wharf_image_pulls_total Image pulls through the CRI, by result.\n");
    out.push_str("# TYPE wharf_image_pulls_total counter\n");
    for (res, n) in &r.pulls {
        let _ = writeln!(out, "wharf_image_pulls_total{{result=\"{res}\"}} {n}");
    }
}

/// Resident memory of the shims running below `run` (their command lines name it).
fn shims(run: &std::path::Path) -> (u64, u64) {
    let needle = run.display().to_string();
    let (mut count, mut rss) = (0, 0);
    for e in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(cmd) = std::fs::read(format!("/proc/{pid}/cmdline")) else {
            continue;
        };
        let args: Vec<&[u8]> = cmd.split(|b| *b == 0).collect();
        // `wharf-shim ...`, or the multi-call `wharf shim ...`.
        let own_binary = args[0]
            .rsplit(|b| *b == b'/')
            .next()
            .is_some_and(|n| n == b"wharf-shim");
        let is_shim = (own_binary || args.get(1).is_some_and(|a| *a == b"shim"))
            && String::from_utf8_lossy(&cmd).contains(&needle);
        if !is_shim {
            continue;
        }
        count += 1;
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
        rss += status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            .unwrap_or(0)
            * 1024;
    }
    (count, rss)
}

/// The whole scrape: counters, then what the engine holds now.
async fn render(engines: &Engines) -> String {
    let mut out = String::new();
    render_counters(&mut out);
    let state = engines
        .call(|e| {
            let mut pods: BTreeMap<String, u64> = BTreeMap::new();
            for p in e
                .list_pods(&Default::default())
                .map_err(crate::status::from_engine)?
            {
                *pods.entry(p.row.state.as_str().to_string()).or_default() += 1;
            }
            let mut ctrs: BTreeMap<String, u64> = BTreeMap::new();
            for c in e
                .list_containers(&wharf_engine::ContainerFilter {
                    all: true,
                    ..Default::default()
                })
                .map_err(crate::status::from_engine)?
            {
                *ctrs.entry(c.row.state.to_string()).or_default() += 1;
            }
            Ok((pods, ctrs, shims(&e.paths().run)))
        })
        .await;
    if let Ok((pods, ctrs, (shim_count, shim_rss))) = state {
        out.push_str("# HELP wharf_pods Pods, by state.\n# TYPE wharf_pods gauge\n");
        for (s, n) in pods {
            let _ = writeln!(out, "wharf_pods{{state=\"{s}\"}} {n}");
        }
        out.push_str(
            "# HELP wharf_containers Containers, by state.\n# TYPE wharf_containers gauge\n",
        );
        for (s, n) in ctrs {
            let _ = writeln!(out, "wharf_containers{{state=\"{s}\"}} {n}");
        }
        out.push_str("# HELP wharf_shims Running pod shims.\n# TYPE wharf_shims gauge\n");
        let _ = writeln!(out, "wharf_shims {shim_count}");
        out.push_str(
            "# HELP wharf_shim_memory_bytes Resident memory of all shims.\n\
             # TYPE wharf_shim_memory_bytes gauge\n",
        );
        let _ = writeln!(out, "wharf_shim_memory_bytes {shim_rss}");
    }
    out
}

/// Serve GET /metrics on `listener` until the daemon stops.
pub async fn serve(listener: TcpListener, engines: Engines) {
    loop {
        let Ok((mut tcp, _)) = listener.accept().await else {
            continue;
        };
        let engines = engines.clone();
        tokio::spawn(async move {
            let mut buf = vec![0u8; 4096];
            let mut n = 0;
            while n < buf.len() && !buf[..n].windows(4).any(|w| w == b"\r\n\r\n") {
                match tokio::time::timeout(Duration::from_secs(10), tcp.read(&mut buf[n..])).await {
                    Ok(Ok(0)) | Ok(Err(_)) | Err(_) => return,
                    Ok(Ok(k)) => n += k,
                }
            }
            let line = String::from_utf8_lossy(&buf[..n]);
            let path = line.split_whitespace().nth(1).unwrap_or("");
            let (status, body) = if line.starts_with("GET ") && path == "/metrics" {
                ("200 OK", render(&engines).await)
            } else {
                ("404 Not Found", "only GET /metrics is served\n".to_string())
            };
            let resp = format!(
                "HTTP/1.1 {status}\r\nContent-Type: text/plain; version=0.0.4\r\n\
                 Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
            if let Err(e) = tcp.write_all(resp.as_bytes()).await {
                log(
                    Level::Debug,
                    "metrics scrape ended",
                    &[("error", &e.to_string())],
                );
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_render_in_the_text_format() {
        request("Version", tonic::Code::Ok, Duration::from_millis(3));
        request("Version", tonic::Code::NotFound, Duration::from_secs(20));
        pull(true);
        let mut out = String::new();
        render_counters(&mut out);
        assert!(out.contains("wharf_cri_requests_total{method=\"Version\",code=\"Ok\"} 1"));
        assert!(out.contains("wharf_cri_requests_total{method=\"Version\",code=\"NotFound\"} 1"));
        assert!(out.contains(
            "wharf_cri_request_duration_seconds_bucket{method=\"Version\",le=\"0.005\"} 1"
        ));
        assert!(out.contains(
            "wharf_cri_request_duration_seconds_bucket{method=\"Version\",le=\"+Inf\"} 2"
        ));
        assert!(out.contains("wharf_image_pulls_total{result=\"success\"} 1"));
        assert_eq!(esc("a\"b\\c"), "a\\\"b\\\\c");
    }
}
