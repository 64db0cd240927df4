# shellcheck shell=bash
# The Python clients of the Docker API tests (sourced by scripts/test.sh): a venv with
# docker-py, testcontainers and pytest from PyPI, kept in /var/tmp/wharf-pyvenv and made
# again when the requirements change. Exports WHARF_TEST_PYTHON.
_req=$PWD/crates/wharf/tests/docker_py/requirements.txt
_venv=${WHARF_PYVENV:-/var/tmp/wharf-pyvenv}
_stamp=$(sha256sum "$_req" | cut -c1-16)
if [ "$(cat "$_venv/wharf.stamp" 2>/dev/null)" != "$_stamp" ]; then
  echo "40-docker-py: making the Python venv in $_venv"
  rm -rf "$_venv"
  python3 -m venv "$_venv" \
    && "$_venv/bin/pip" install -q --disable-pip-version-check -r "$_req" \
    && echo "$_stamp" > "$_venv/wharf.stamp" \
    || { echo "40-docker-py: the venv could not be made" >&2; exit 1; }
fi
export WHARF_TEST_PYTHON=$_venv/bin/python
unset _req _venv _stamp
