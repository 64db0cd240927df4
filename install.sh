#!/usr/bin/env bash
# Install Wharf on Debian/Ubuntu (as root) and run a first container.
#   - installs the build dependencies (apt) and a Rust toolchain if cargo is missing
#   - builds the release binary and installs it as /usr/local/bin/wharf
#     (plus /usr/local/bin/wharf-runc, the runc-compatible name engines can point at)
#   - runs a busybox container from an OCI bundle with `wharf runtime run`
set -euo pipefail
cd "$(dirname "$0")"
[ "$(id -u)" = 0 ] || { echo "install.sh: run as root" >&2; exit 1; }
./scripts/deps.sh --demo
export PATH="$HOME/.cargo/bin:$PATH"
cargo build --release --locked -p wharf
target="${CARGO_TARGET_DIR:-target}/release/wharf"
install -m 0755 "$target" /usr/local/bin/wharf
ln -sf wharf /usr/local/bin/wharf-runc
echo "installed $(/usr/local/bin/wharf --version) to /usr/local/bin/wharf"

# The main job: run a container.
demo=$(mktemp -d /tmp/wharf-demo.XXXXXX)
trap 'rm -rf "$demo"' EXIT
mkdir -p "$demo/rootfs/bin" "$demo/rootfs/proc" "$demo/rootfs/sys" "$demo/rootfs/dev" "$demo/rootfs/tmp"
cp "$(command -v busybox)" "$demo/rootfs/bin/busybox"
for applet in sh echo hostname id cat; do ln -s busybox "$demo/rootfs/bin/$applet"; done
wharf runtime spec --bundle "$demo"
sed -i -e 's/"terminal": true/"terminal": false/' \
  -e 's|^      "sh"$|      "sh", "-c", "echo Hello from a Wharf container: hostname $(hostname), $(id)"|' \
  "$demo/config.json"
wharf runtime run --bundle "$demo" "wharf-demo-$$"
