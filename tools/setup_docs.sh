#!/usr/bin/env bash
# The documentation tools, on top of the environment of tools/setup_env.sh (run first; it
# returns in seconds when .venv is up to date). Installs requirements/docs.txt into .venv with
# the stack's pins as constraints, so nothing the tests use changes version. A stamp records the
# hash of docs.txt and of this script: with it up to date and Sphinx importable, this returns at
# once. `make docs` runs it; `make test` does not.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
VENV=${MMPOSENC_VENV:-$ROOT/.venv}
REQS=$ROOT/requirements/docs.txt
PY=$VENV/bin/python

bash "$ROOT/tools/setup_env.sh"

STAMP=$VENV/.mmposenc-docs-setup
want=$(cat "$REQS" "${BASH_SOURCE[0]}" "$VENV/.mmposenc-constraints.txt" | sha256sum | cut -c1-16)
if [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$want" ] && \
        "$PY" -c "import sphinx, myst_parser, furo, sphinx_copybutton, mathjax" >/dev/null 2>&1; then
    echo "[setup-docs] documentation tools in $VENV are up to date"
    exit 0
fi
echo "[setup-docs] installing requirements/docs.txt into $VENV"
"$PY" -m pip --disable-pip-version-check install -q \
    -c "$VENV/.mmposenc-constraints.txt" -r "$REQS" \
    2> >(grep -v 'is ignored: it is neither a file nor a directory' >&2)
"$PY" -c "import sphinx, myst_parser, furo, sphinx_copybutton, mathjax"
echo "$want" > "$STAMP"
echo "[setup-docs] done: sphinx $("$PY" -c 'import sphinx; print(sphinx.__version__)')"
