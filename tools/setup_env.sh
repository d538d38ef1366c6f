#!/usr/bin/env bash
# Idempotent setup of mmposenc's virtual environment (.venv in the repository).
#
# Installs the pinned OpenMMLab stack from requirements/pins.txt:
#   1. torch + torchvision, PyPI default builds, with `pip --isolated` (see pins.txt);
#   2. mmcv with its ops compiled from source against exactly that torch; the wheel is cached
#      under $MMPOSENC_CACHE (default ~/.cache/mmposenc) in a folder keyed by torch version,
#      Python tag, C++ ABI and CUDA, so a second run installs it in seconds and a changed torch
#      rebuilds it (pip's own wheel cache is not keyed on torch and is bypassed on purpose);
#   3. mmengine, mmdet, mmsegmentation, mmpretrain, onnx + onnxruntime, pytest + pytest-xdist
#      and the rest, constrained to the pins;
#   4. openmim (`mim search` / `mim train`) without its opendatalab requirement (see pins.txt);
#   5. mmposenc itself in editable mode (setup.py links configs/, tools/ and model-index.yml
#      into mmposenc/.mim, where mmengine's `mmposenc::` loader and mim look for them).
# A stamp in .venv records the hash of pins.txt, of this script and of setup.py: when it
# matches and the stack imports, the script returns in a few seconds.
#
# Environment: MMPOSENC_VENV (default <repo>/.venv), MMPOSENC_CACHE, PYTHON (default python3),
# MAX_JOBS (compile jobs, default nproc), FORCE_CUDA=1 (build CUDA ops without a visible GPU).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
VENV=${MMPOSENC_VENV:-$ROOT/.venv}
PINS=$ROOT/requirements/pins.txt
CACHE=${MMPOSENC_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/mmposenc}
PYTHON=${PYTHON:-python3}
T0=$(date +%s)

say() { printf '[setup %4ss] %s\n' "$(( $(date +%s) - T0 ))" "$*"; }
pin() {  # pin NAME -> the version pinned for NAME
    local v  # a run-time pin first; `pin NAME @build` for the build-only one
    if [ "${2:-}" = "@build" ]; then
        v=$(sed -nE "s/^@build +$1==([^ ]+).*/\1/p" "$PINS" | head -n 1)
    else
        v=$(sed -nE "s/^$1==([^ ]+).*/\1/p" "$PINS" | head -n 1)
    fi
    [ -n "$v" ] || { echo "no pin for $1 in $PINS" >&2; exit 2; }
    echo "$v"
}

STAMP=$VENV/.mmposenc-setup
want_stamp=$(cat "$PINS" "${BASH_SOURCE[0]}" "$ROOT/setup.py" | sha256sum | cut -c1-16)
PY=$VENV/bin/python

check_stack() {
    "$PY" - <<'EOF' >/dev/null 2>&1 || return 1
import torch, torchvision, mmcv, mmcv.ops, mmengine, mmdet, mmseg, mmpretrain, mmposenc  # noqa
import xdist  # noqa: pytest-xdist, `make test` runs the suite in parallel workers
import pkg_resources  # noqa: mmengine needs it to resolve 'mmdet::' configs
import torchvision.ops  # fails when torch and torchvision builds do not match
import mim.commands.search, modelindex, pandas  # noqa: `mim search mmposenc`
import os.path as osp, mmposenc.utils
assert osp.isfile(osp.join(mmposenc.utils.PACKAGE_DIR, '.mim', 'model-index.yml'))
EOF
    # `PYTHONPATH=<repo> mim search|train mmposenc` (editable install): mim takes the package
    # folder as <location of the first mmposenc metadata on sys.path>/mmposenc, i.e. the
    # repository's mmposenc.egg-info. A clean clone lacks it (git ignores it) until the editable
    # install writes it, so a venv restored beside a fresh clone must not count as set up.
    PYTHONPATH=$ROOT "$PY" -W ignore -c "import os.path as osp, pkg_resources as pr; \
assert osp.samefile(pr.get_distribution('mmposenc').location, '$ROOT')" >/dev/null 2>&1
}

if [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$want_stamp" ] && check_stack; then
    say "environment $VENV is up to date"
    exit 0
fi

if [ ! -x "$PY" ]; then
    say "creating virtual environment $VENV with $($PYTHON --version)"
    "$PYTHON" -m venv "$VENV"
fi
PIP=(pip_quiet "$PY" -m pip --disable-pip-version-check)
# pip warns once per package about configured local index folders that lack it; drop that noise
pip_quiet() { "$@" 2> >(grep -v 'is ignored: it is neither a file nor a directory' >&2); }
CONSTRAINTS=$VENV/.mmposenc-constraints.txt
grep -vE '^\s*(#|@build|$)' "$PINS" > "$CONSTRAINTS"

TORCH_V=$(pin torch)
TV_V=$(pin torchvision)
if ! "$PY" -c "import torch, torchvision, torchvision.ops, sys; \
sys.exit(torch.__version__.split('+')[0] != '$TORCH_V' or '+cpu' in torch.__version__ \
or torchvision.__version__.split('+')[0] != '$TV_V')" >/dev/null 2>&1; then
    say "installing torch==$TORCH_V torchvision==$TV_V from PyPI (--isolated; several GB with CUDA libraries)"
    "${PIP[@]}" --isolated install "torch==$TORCH_V" "torchvision==$TV_V"
fi
say "torch: $("$PY" -c 'import torch; print(torch.__version__)')"

# ---- mmcv with compiled ops, cached per torch build -------------------------------------
MMCV_V=$(pin mmcv)
if ! "$PY" -c "import mmcv, mmcv.ops, sys; sys.exit(mmcv.__version__ != '$MMCV_V')" >/dev/null 2>&1; then
    key=$("$PY" - <<'EOF'
import os, sys, torch
abi = int(torch._C._GLIBCXX_USE_CXX11_ABI)
cuda = 'cpu'
if torch.version.cuda and (torch.cuda.is_available() or os.environ.get('FORCE_CUDA') == '1'):
    cuda = 'cu' + torch.version.cuda.replace('.', '')
print(f'torch-{torch.__version__}-cp{sys.version_info[0]}{sys.version_info[1]}'
      f'-cxx11abi{abi}-{cuda}')
EOF
)
    WHEELDIR=$CACHE/mmcv-$MMCV_V/$key
    wheel=$(ls "$WHEELDIR"/mmcv-"$MMCV_V"-*.whl 2>/dev/null | head -n 1 || true)
    if [ -z "$wheel" ]; then
        say "building mmcv==$MMCV_V ops from source for $key (11-14 min on 2 cores)"
        "${PIP[@]}" install -q "setuptools==$(pin setuptools @build)" "ninja==$(pin ninja @build)" wheel \
            addict packaging pyyaml yapf "numpy==$(pin numpy)" \
            "opencv-python==$(pin opencv-python)" "mmengine==$(pin mmengine)"
        tmp=$(mktemp -d)
        MAX_JOBS=${MAX_JOBS:-$(nproc)} MMCV_WITH_OPS=1 \
            "${PIP[@]}" wheel --no-build-isolation --no-deps --no-cache-dir -w "$tmp" \
            "mmcv==$MMCV_V" 2>&1 | while IFS= read -r line; do
                case "$line" in *Building*|*Created*|*error*|*Error*) say "  $line";; esac
            done
        built=$(ls "$tmp"/mmcv-"$MMCV_V"-*.whl 2>/dev/null | head -n 1 || true)
        [ -n "$built" ] || { say "mmcv build failed (rerun: pip wheel -v --no-build-isolation mmcv==$MMCV_V)"; exit 1; }
        mkdir -p "$WHEELDIR"
        mv "$built" "$WHEELDIR/"
        rm -rf "$tmp"
        wheel=$(ls "$WHEELDIR"/mmcv-"$MMCV_V"-*.whl | head -n 1)
        say "restoring setuptools==$(pin setuptools)"
        "${PIP[@]}" install -q "setuptools==$(pin setuptools)"
    else
        say "using cached mmcv wheel $wheel"
    fi
    "${PIP[@]}" install -q -c "$CONSTRAINTS" "$wheel"
fi

# ---- the OpenMMLab hosts and the rest ---------------------------------------------------
say "installing mmengine, mmdet, mmsegmentation, mmpretrain, pycocotools, onnx(runtime), test tools"
"${PIP[@]}" install -q -c "$CONSTRAINTS" \
    "mmengine==$(pin mmengine)" "mmdet==$(pin mmdet)" "mmsegmentation==$(pin mmsegmentation)" \
    "mmpretrain==$(pin mmpretrain)" "pycocotools==$(pin pycocotools)" "ftfy==$(pin ftfy)" \
    "regex==$(pin regex)" "numpy==$(pin numpy)" "opencv-python==$(pin opencv-python)" \
    "pytest==$(pin pytest)" "pytest-xdist==$(pin pytest-xdist)" "execnet==$(pin execnet)" \
    "setuptools==$(pin setuptools)" \
    "onnx==$(pin onnx)" "onnxruntime==$(pin onnxruntime)" "protobuf==$(pin protobuf)"
say "installing openmim (without opendatalab, see pins.txt)"
"${PIP[@]}" install -q -c "$CONSTRAINTS" "model-index==$(pin model-index)" \
    "pandas==$(pin pandas)" "tabulate==$(pin tabulate)" "colorama==$(pin colorama)" \
    "requests==$(pin requests)"
"${PIP[@]}" install -q --no-deps -c "$CONSTRAINTS" "openmim==$(pin openmim)"
say "installing mmposenc (editable)"
"${PIP[@]}" install -q --no-deps --no-build-isolation -e "$ROOT"
if [ ! -f "$ROOT/mmposenc.egg-info/PKG-INFO" ]; then
    # setuptools' editable build writes it beside setup.py; mim needs it (see check_stack)
    say "writing $ROOT/mmposenc.egg-info for mim"
    (cd "$ROOT" && "$PY" setup.py -q egg_info)
fi

if ! check_stack; then
    say "the stack does not import; details:"
    "$PY" -c "import torch, torchvision.ops, mmcv.ops, mmdet.models, mmseg.models, mmpretrain.models, mmposenc"
    exit 1
fi
echo "$want_stamp" > "$STAMP"
say "done: $("$PY" -c 'import torch, mmcv, mmdet, mmseg, mmpretrain; print("torch", torch.__version__, "mmcv", mmcv.__version__, "mmdet", mmdet.__version__, "mmseg", mmseg.__version__, "mmpretrain", mmpretrain.__version__)')"
