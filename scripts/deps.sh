#!/usr/bin/env bash
# Install what building and testing Wharf needs on Debian/Ubuntu (as root): the Debian
# packages listed below and, if cargo is missing, a Rust toolchain through rustup.
# Idempotent: installs only what is missing.
set -euo pipefail

# Build: libseccomp (linked statically: see .cargo/config.toml). SQLite, zstd and TLS
# (rustls) are compiled into the binary, so that no shared library but libc is loaded by
# each exec of it; ca-certificates is the CA store registries are verified against.
BUILD_PKGS="build-essential pkg-config libseccomp-dev curl ca-certificates"
# Run time: what the wharf binary loads or executes. nftables brings libnftables1 (loaded
# in-process for the built-in network's NAT and port mappings; the nft command is the
# fallback); procps is the `ps` that `wharf runtime ps` runs, as runc's does.
RUN_PKGS="nftables procps"
# Where systemd booted the host, the systemd cgroup driver (the default there) reaches
# systemd on the system bus: dbus.
[ -d /run/systemd/system ] && RUN_PKGS="$RUN_PKGS dbus"
# Tests: busybox for test root filesystems; runc and crun for side-by-side tests and
# benchmarks; containerd (1.6, with ctr) drives `wharf runtime` in an engine test;
# iproute2 and util-linux (unshare) for namespaces.
TEST_PKGS="busybox-static runc crun containerd iproute2 procps util-linux"

want="$BUILD_PKGS $RUN_PKGS"
case "${1:-}" in
  --test) want="$BUILD_PKGS $RUN_PKGS $TEST_PKGS ${EXTRA_TEST_PKGS:-}" ;;
  --demo) want="$BUILD_PKGS $RUN_PKGS busybox-static" ;;   # install.sh's first container
esac

missing=""
for p in $want; do
  dpkg-query -W -f '${Status}\n' "$p" 2>/dev/null | grep -q '^install ok installed$' || missing="$missing $p"
done
if [ -n "$missing" ]; then
  [ "$(id -u)" = 0 ] || { echo "deps.sh: run as root to install:$missing" >&2; exit 1; }
  echo "deps.sh: installing$missing"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends $missing >/dev/null
fi

if ! command -v cargo >/dev/null 2>&1 && [ ! -x "$HOME/.cargo/bin/cargo" ]; then
  echo "deps.sh: installing the Rust toolchain (rustup)"
  # rustup-init.sh from static.rust-lang.org (what https://sh.rustup.rs serves): the host
  # rustup and the toolchain are downloaded from anyway, so a firewalled machine needs
  # only that one (and crates.io) for Rust.
  curl -sSf https://static.rust-lang.org/rustup/rustup-init.sh | sh -s -- -y --profile minimal >/dev/null
fi

# Tests: cargo-nextest runs every test in a process of its own (the suite forks and mounts
# a lot; see scripts/test.sh for the fallback). Built from crates.io, with its build cache
# beside the project's (under /var/tmp) so a second install is quick.
if [ "${1:-}" = "--test" ]; then
  export PATH="$HOME/.cargo/bin:$PATH"
  if ! cargo nextest --version >/dev/null 2>&1; then
    echo "deps.sh: installing cargo-nextest (cargo install --locked cargo-nextest)"
    CARGO_TARGET_DIR="${NEXTEST_BUILD_DIR:-/var/tmp/wharf-nextest-build}" \
      cargo install --locked --quiet cargo-nextest \
      || echo "deps.sh: cargo-nextest could not be installed; the tests run under cargo test" >&2
  fi
fi
