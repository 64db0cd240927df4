# shellcheck shell=bash
# Image fixtures (sourced by scripts/test.sh): builds the deterministic OCI images of
# fixtures/images into /var/tmp/wharf-fixtures (reused across runs, rebuilt when missing or
# when the kit changed), starts the loopback registries (anonymous + basic auth), pushes the
# images, and exports what the image tests read:
#   WHARF_TEST_REGISTRY       127.0.0.1:<port>  anonymous registry
#   WHARF_TEST_REGISTRY_AUTH  127.0.0.1:<port>  basic auth (fixture / fixture-pass)
#   WHARF_TEST_FIXTURES       the kit (expected/*.rootfs.tsv, list-tree.sh)
#   WHARF_TEST_OCI            the OCI layout the images were built into
_kit=$PWD/fixtures/images
_out=${WHARF_FIXTURES_OUT:-/var/tmp/wharf-fixtures}
_port=${WHARF_TEST_REGISTRY_PORT:-35000}
_aport=${WHARF_TEST_REGISTRY_AUTH_PORT:-35001}
_stamp=$(cat "$_kit/build.sh" "$_kit/registry.sh" "$_kit"/config/* | sha256sum | cut -c1-16)
mkdir -p "$_out"
_regenv=(env "REGISTRY_PORT=$_port" "REGISTRY_AUTH_PORT=$_aport" "OCI=$_out/oci"
  "REGISTRY_DATA=$_out/registry-data" "REGISTRY_RUN=$_out/run")

"$_kit/install-deps.sh"
if [ ! -f "$_out/oci/index.json" ] || [ "$(cat "$_out/built.stamp" 2>/dev/null)" != "$_stamp" ]; then
  echo "20-images: building the image fixtures into $_out (about a minute)"
  rm -rf "$_out/registry-data" "$_out/pushed.stamp"
  OCI=$_out/oci WORK=$_out/work "$_kit/build.sh" >"$_out/build.log" 2>&1 \
    || { tail -20 "$_out/build.log" >&2; echo "20-images: fixture build failed" >&2; exit 1; }
  echo "$_stamp" > "$_out/built.stamp"
fi
# A registry left by an interrupted run (our PID files only) is stopped first.
"${_regenv[@]}" "$_kit/registry.sh" stop >/dev/null 2>&1 || true
"${_regenv[@]}" "$_kit/registry.sh" start
CLEANUPS+=("${_regenv[*]} '$_kit/registry.sh' stop")
if [ "$(cat "$_out/pushed.stamp" 2>/dev/null)" != "$_stamp" ]; then
  "${_regenv[@]}" "$_kit/registry.sh" push
  echo "$_stamp" > "$_out/pushed.stamp"
fi
"${_regenv[@]}" "$_kit/registry.sh" check >"$_out/check.log" 2>&1 \
  || { cat "$_out/check.log" >&2; echo "20-images: registry check failed" >&2; exit 1; }
export WHARF_TEST_REGISTRY=127.0.0.1:$_port
export WHARF_TEST_REGISTRY_AUTH=127.0.0.1:$_aport
export WHARF_TEST_FIXTURES=$_kit
export WHARF_TEST_OCI=$_out/oci
unset _kit _out _port _aport _stamp _regenv
