//! docker-py and testcontainers-python, from PyPI, against the Docker API of a real
//! `wharf daemon` (tests/docker_py/test_clients.py, run with pytest). The venv is made by
//! scripts/test.d/40-docker-py.sh (`WHARF_TEST_PYTHON`); without it the test says so and is
//! skipped.

mod cri_support;
mod engine_support;

use std::time::Duration;

use cri_support::Daemon;
use engine_support::{busybox, wait_until};

#[test]
fn docker_py_and_testcontainers_drive_wharf() {
    let Some(python) = std::env::var_os("WHARF_TEST_PYTHON") else {
        eprintln!(
            "skipped: WHARF_TEST_PYTHON is not set (scripts/test.d/40-docker-py.sh makes the venv)"
        );
        return;
    };
    let d = Daemon::start("docker-py");
    let sock = d.w.run_dir().join("docker.sock");
    assert!(wait_until(Duration::from_secs(10), || sock.exists()));
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/docker_py/test_clients.py"
    );
    let out = std::process::Command::new(python)
        .args(["-m", "pytest", "-q", "-p", "no:cacheprovider", script])
        .env("DOCKER_HOST", format!("unix://{}", sock.display()))
        .env("DOCKER_CONFIG", d.w.path("docker-config"))
        .env("WHARF_TEST_IMAGE", busybox())
        // testcontainers' reaper container is Docker Hub's: the test removes what it made.
        .env("TESTCONTAINERS_RYUK_DISABLED", "true")
        .env("HOME", d.w.path("home"))
        .output()
        .expect("run pytest");
    let stdout = String::from_utf8_lossy(&out.stdout);
    eprintln!("{stdout}{}", String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "pytest failed:\n{stdout}");
    assert!(stdout.contains("passed"), "{stdout}");
}
