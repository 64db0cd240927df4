#!/usr/bin/env bash
# Wharf's test command (README.md): installs what the tests need, prepares the fixtures of
# each subsystem (scripts/test.d/*.sh), and runs the whole suite with cargo nextest.
# Run as root on Debian/Ubuntu: the tests start real containers.
set -euo pipefail
cd "$(dirname "$0")/.."
[ "$(id -u)" = 0 ] || { echo "test.sh: run as root: the tests start real containers" >&2; exit 1; }

# Subsystem setup scripts may add packages and register cleanups.
EXTRA_TEST_PKGS=""
CLEANUPS=()
on_exit() { for c in "${CLEANUPS[@]}"; do eval "$c" || true; done; }
trap on_exit EXIT
for f in scripts/test.d/*.pkgs; do
  [ -e "$f" ] && EXTRA_TEST_PKGS="$EXTRA_TEST_PKGS $(grep -v '^#' "$f" | tr '\n' ' ')"
done
export EXTRA_TEST_PKGS
./scripts/deps.sh --test
export PATH="$HOME/.cargo/bin:$PATH"

for f in scripts/test.d/*.sh; do
  [ -e "$f" ] || continue
  # shellcheck source=/dev/null
  . "$f"
done

if cargo nextest --version >/dev/null 2>&1; then
  cargo nextest run --workspace --no-fail-fast "$@"
else
  cargo test --workspace --no-fail-fast "$@" -- --test-threads=2
fi
