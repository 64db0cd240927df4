//! docker compose v2 against the Docker API of a real `wharf daemon`: the three-service
//! app of tests/compose/app.yaml (a user network, a named volume, depends_on with
//! condition service_healthy, a healthcheck, environment, restart policies, a published
//! port) comes up, answers through its front end, shows its processes and logs, runs an
//! exec, goes down with its volume, and comes up again. The compose binary is built by
//! whoever runs this (`go build ./cmd` of github.com/docker/compose/v2, never committed)
//! and given as `WHARF_TEST_COMPOSE=/path/to/docker-compose`; without it the test says so
//! and is skipped.

mod cri_support;
mod engine_support;

use std::time::Duration;

use cri_support::Daemon;
use engine_support::{Out, busybox, wait_until};

struct Compose<'a> {
    bin: std::path::PathBuf,
    d: &'a Daemon,
    file: String,
}

impl Compose<'_> {
    fn run(&self, args: &[&str]) -> Out {
        let sock = self.d.w.run_dir().join("docker.sock");
        std::process::Command::new(&self.bin)
            .args(["-f", &self.file])
            .args(args)
            .env("DOCKER_HOST", format!("unix://{}", sock.display()))
            .env("DOCKER_CONFIG", self.d.w.path("docker-config"))
            .env("WHARF_TEST_IMAGE", busybox())
            .env("COMPOSE_PROGRESS", "plain")
            // No buildx plugin here: compose builds through the API's classic builder.
            .env("DOCKER_BUILDKIT", "0")
            .stdin(std::process::Stdio::null())
            .output()
            .expect("run docker-compose")
            .into()
    }

    fn ok(&self, args: &[&str]) -> String {
        let o = self.run(args);
        assert_eq!(o.code, 0, "docker-compose {args:?}: {o:?}");
        o.stdout
    }
}

#[test]
fn compose_brings_a_three_service_app_up_and_down() {
    let Some(bin) = std::env::var_os("WHARF_TEST_COMPOSE") else {
        eprintln!(
            "skipped: WHARF_TEST_COMPOSE is not set (build docker compose v2 from the Go module \
             proxy and give its path)"
        );
        return;
    };
    let d = Daemon::start("compose");
    d.w.pull_busybox();
    let c = Compose {
        bin: bin.into(),
        d: &d,
        file: concat!(env!("CARGO_MANIFEST_DIR"), "/tests/compose/app.yaml").to_string(),
    };
    for round in 0..2 {
        c.ok(&["up", "-d"]);
        let ps = c.ok(&["ps", "--format", "{{.Service}} {{.State}}"]);
        for svc in ["db", "app", "web"] {
            assert!(
                ps.contains(&format!("{svc} running")),
                "round {round}: {ps}"
            );
        }
        let health = c.ok(&["ps", "db", "--format", "{{.Health}}"]);
        assert_eq!(health.trim(), "healthy", "round {round}");
        // The front end shows what the app got from the database, by service names.
        let mut page = String::new();
        assert!(
            wait_until(Duration::from_secs(30), || {
                page = d.w.http_get("127.0.0.1:18080");
                page.contains("db-ok orders")
            }),
            "round {round}: {page}"
        );
        assert!(c.ok(&["logs", "db"]).contains("db starting"));
        assert_eq!(
            c.ok(&["exec", "-T", "db", "cat", "/data/www/greeting"])
                .trim(),
            "db-ok orders"
        );
        c.ok(&["down", "-v"]);
        assert_eq!(
            d.w.ok(&["ps", "-a", "-q"]),
            "",
            "round {round}: containers left"
        );
        assert!(
            !d.w.ok(&["volume", "ls", "-q"]).contains("dbdata"),
            "round {round}: the volume was left"
        );
        assert!(
            !d.w.ok(&["network", "ls"]).contains("backend"),
            "round {round}"
        );
    }
}

#[test]
fn compose_builds_a_service_then_runs_it() {
    let Some(bin) = std::env::var_os("WHARF_TEST_COMPOSE") else {
        eprintln!("skipped: WHARF_TEST_COMPOSE is not set");
        return;
    };
    let d = Daemon::start("compose-build");
    d.w.pull_busybox();
    let dir = d.w.path("app");
    std::fs::create_dir_all(dir.join("web")).unwrap();
    std::fs::write(
        dir.join("web/Dockerfile"),
        format!(
            "FROM {}\nARG WORD=none\nRUN echo \"built $WORD\" > /msg\nCMD [\"sh\", \"-c\", \"cat /msg; sleep 300\"]\n",
            busybox()
        ),
    )
    .unwrap();
    let file = dir.join("compose.yaml");
    std::fs::write(
        &file,
        "services:\n  web:\n    build:\n      context: ./web\n      args:\n        WORD: by-compose\n    image: wharf-compose-built:dev\n",
    )
    .unwrap();
    let c = Compose {
        bin: bin.into(),
        d: &d,
        file: file.display().to_string(),
    };
    c.ok(&["up", "-d", "--build"]);
    let mut logs = String::new();
    assert!(
        wait_until(Duration::from_secs(20), || {
            logs = c.ok(&["logs", "web"]);
            logs.contains("built by-compose")
        }),
        "{logs}"
    );
    c.ok(&["down"]);
    assert_eq!(d.w.ok(&["ps", "-a", "-q"]), "");
}
