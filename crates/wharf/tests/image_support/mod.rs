//! Helpers for the image CLI tests: the fixture registry's address (scripts/test.sh starts
//! it), the reference listings, and `wharf --root <tmp>` runs.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn env(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| {
        panic!(
            "{name} is not set: the image tests need the loopback fixture registry; run the \
             suite with scripts/test.sh (scripts/test.d/20-images.sh builds fixtures/images, \
             starts the registries and exports WHARF_TEST_REGISTRY, WHARF_TEST_REGISTRY_AUTH \
             and WHARF_TEST_FIXTURES)"
        )
    })
}

pub fn registry() -> String {
    env("WHARF_TEST_REGISTRY")
}

pub fn registry_auth() -> String {
    env("WHARF_TEST_REGISTRY_AUTH")
}

pub fn fixtures() -> PathBuf {
    PathBuf::from(env("WHARF_TEST_FIXTURES"))
}

pub fn image(name: &str) -> String {
    format!("{}/fixtures/{name}", registry())
}

/// A state root in a temp dir; unmounts what is left below it when dropped.
pub struct Root {
    pub dir: tempfile::TempDir,
}

impl Root {
    pub fn new() -> Root {
        wharf_testbed::require_root();
        Root {
            dir: tempfile::Builder::new()
                .prefix("wharf-cli-test-")
                .tempdir()
                .unwrap(),
        }
    }

    pub fn path(&self) -> PathBuf {
        self.dir.path().join("root")
    }

    /// `wharf --root <root> <args>`.
    pub fn cmd(&self, args: &[&str]) -> Command {
        let mut c = Command::new(env!("CARGO_BIN_EXE_wharf"));
        c.arg("--root").arg(self.path()).args(args);
        c.env("DOCKER_CONFIG", self.dir.path().join("no-docker-config"));
        c.stdin(std::process::Stdio::null());
        c
    }

    pub fn run(&self, args: &[&str]) -> Output {
        self.cmd(args).output().expect("run wharf")
    }

    /// Run; must succeed; returns stdout.
    pub fn ok(&self, args: &[&str]) -> String {
        let out = self.run(args);
        assert!(
            out.status.success(),
            "wharf {args:?} failed ({}): {}{}",
            out.status,
            String::from_utf8_lossy(&out.stderr),
            String::from_utf8_lossy(&out.stdout)
        );
        String::from_utf8(out.stdout).unwrap()
    }

    /// Run; must fail with status 1; returns stderr.
    pub fn fails(&self, args: &[&str]) -> String {
        let out = self.run(args);
        assert_eq!(
            out.status.code(),
            Some(1),
            "wharf {args:?} should fail: {}",
            String::from_utf8_lossy(&out.stdout)
        );
        String::from_utf8(out.stderr).unwrap()
    }
}

impl Drop for Root {
    fn drop(&mut self) {
        wharf_testbed::unmount_below(self.dir.path());
    }
}

pub fn list_tree(dir: &Path) -> String {
    let out = Command::new(fixtures().join("list-tree.sh"))
        .arg(dir)
        .output()
        .expect("run list-tree.sh");
    assert!(out.status.success());
    String::from_utf8(out.stdout).unwrap()
}

pub fn assert_tree(dir: &Path, name: &str) {
    let want =
        std::fs::read_to_string(fixtures().join(format!("expected/{name}.rootfs.tsv"))).unwrap();
    let got = list_tree(dir);
    if got != want {
        let w: Vec<&str> = want.lines().collect();
        let g: Vec<&str> = got.lines().collect();
        let missing: Vec<&&str> = w.iter().filter(|l| !g.contains(l)).take(10).collect();
        let extra: Vec<&&str> = g.iter().filter(|l| !w.contains(l)).take(10).collect();
        panic!(
            "{} differs from {name}: missing {missing:#?} unexpected {extra:#?}",
            dir.display()
        );
    }
}

/// Every file in blobs/ hashes to its name.
pub fn assert_blobs_verified(root: &Path) {
    let dir = root.join("image/content/blobs/sha256");
    for e in std::fs::read_dir(&dir).unwrap().flatten() {
        let out = Command::new("sha256sum").arg(e.path()).output().unwrap();
        let got = String::from_utf8_lossy(&out.stdout);
        assert_eq!(
            got.split_whitespace().next(),
            Some(&*e.file_name().to_string_lossy()),
            "blob {} is not what its name says",
            e.path().display()
        );
    }
}
