#!/usr/bin/env bash
# Idempotent setup of a virtual environment for mmposenc's development, tests and demo.
#
# Two choices, from the environment (the Makefile passes STACK=... ROUTE=... through):
#   MMPOSENC_STACK  upstream (default): OpenMMLab's last releases, requirements/upstream.txt
#                   onedl: the maintained onedl-* fork, requirements/onedl.txt
#   MMPOSENC_ROUTE  ops-free (default): mmcv without compiled ops (mmcv-lite; onedl-mmcv built
#                   without torch); mmcv.ops runs on mmposenc's PyTorch kernels
#                   (mmposenc/ops/mmcv_ext.py). Compiles nothing: a few minutes, mostly downloads.
#                   compiled: mmcv's ops compiled from source against the pinned torch
#                   (11-16 min on 2 cores), the wheel cached per torch build and CUDA
#                   architectures (tools/misc/mmcv_build.py).
# The environment: MMPOSENC_VENV, default <repo>/.venv for upstream + ops-free and
# <repo>/.venv-<stack>-<route> for the others.
#
# Steps: torch + torchvision (PyPI's default builds, `pip --isolated`: a find-links folder
# holding torch+cpu must not shadow them); mmcv for the route; the hosts and test tools,
# constrained to the stack's pins; openmim without its opendatalab requirement (see
# upstream.txt); mmposenc in editable mode (setup.py links configs/, tools/, model-index.yml
# into mmposenc/.mim). A stamp records the hash of the requirements, this script, setup.py, the
# startup hook's .pth (site-packages holds a copy) and
# the choices: when it matches and the stack imports on the right route, this returns in seconds.
#
# Also: MMPOSENC_CACHE (compiled wheels; default ~/.cache/mmposenc), PYTHON (default python3),
# MAX_JOBS (compile jobs, default nproc), FORCE_CUDA=1 and TORCH_CUDA_ARCH_LIST (a compiled
# CUDA build; the architectures default to the visible GPUs').
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
STACK=${MMPOSENC_STACK:-upstream}
ROUTE=${MMPOSENC_ROUTE:-ops-free}
case "$STACK" in upstream|onedl) ;; *) echo "MMPOSENC_STACK=$STACK: use upstream or onedl" >&2; exit 2;; esac
case "$ROUTE" in ops-free|compiled) ;; *) echo "MMPOSENC_ROUTE=$ROUTE: use ops-free or compiled" >&2; exit 2;; esac
if [ "$STACK-$ROUTE" = upstream-ops-free ]; then
    VENV=${MMPOSENC_VENV:-$ROOT/.venv}
else
    VENV=${MMPOSENC_VENV:-$ROOT/.venv-$STACK-$ROUTE}
fi
PINS=$ROOT/requirements/$STACK.txt
CACHE=${MMPOSENC_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/mmposenc}
PYTHON=${PYTHON:-python3}
T0=$(date +%s)

if [ "$STACK" = upstream ]; then
    MMCV=mmcv; MMCV_LITE=mmcv-lite
    HOSTS=(mmengine mmdet mmsegmentation mmpretrain)
else
    MMCV=onedl-mmcv; MMCV_LITE=onedl-mmcv  # built without torch, it has no ops
    HOSTS=(onedl-mmengine onedl-mmdetection onedl-mmsegmentation onedl-mmpretrain)
fi
REST=(pycocotools ftfy regex numpy opencv-python pytest pytest-xdist execnet setuptools onnx
      onnxruntime protobuf)
MIM_DEPS=(model-index pandas tabulate colorama requests)

say() { printf '[setup %s/%s %4ss] %s\n' "$STACK" "$ROUTE" "$(( $(date +%s) - T0 ))" "$*"; }
pin() {  # pin NAME -> NAME==<the version pinned for NAME>
    local v
    v=$(sed -nE "s/^$1==([^ ]+).*/\1/p" "$PINS" | head -n 1)
    [ -n "$v" ] || { echo "no pin for $1 in $PINS" >&2; exit 2; }
    echo "$1==$v"
}
pins() { for n in "$@"; do pin "$n"; done; }
version() { pin "$1" | cut -d= -f3; }

STAMP=$VENV/.mmposenc-setup
want_stamp=$( (cat "$PINS" "${BASH_SOURCE[0]}" "$ROOT/setup.py" "$ROOT/mmposenc-startup.pth"; echo "$STACK $ROUTE") \
    | sha256sum | cut -c1-16)
PY=$VENV/bin/python

check_stack() {
    "$PY" - "$ROUTE" <<'EOF' >/dev/null 2>&1 || return 1
import sys
import mmposenc  # noqa: first, as a config's custom_imports would (the .pth hook covers the rest)
import torch, torchvision, mmcv, mmcv.ops, mmengine, mmdet, mmseg, mmpretrain  # noqa
import xdist  # noqa: pytest-xdist, `make test` runs the suite in parallel workers
import torchvision.ops  # fails when torch and torchvision builds do not match
import mim.commands.search, modelindex, pandas  # noqa: `mim search mmposenc`
import os.path as osp, mmposenc.utils, mmposenc.ops
assert mmposenc.ops.mmcv_route() == sys.argv[1], mmposenc.ops.mmcv_route()
assert osp.isfile(osp.join(mmposenc.utils.PACKAGE_DIR, '.mim', 'model-index.yml'))
EOF
    # `PYTHONPATH=<repo> mim search|train mmposenc` (editable install): mim takes the package
    # folder as <location of the first mmposenc metadata on sys.path>/mmposenc, i.e. the
    # repository's mmposenc.egg-info. A clean clone lacks it (git ignores it) until the editable
    # install writes it, so a venv restored beside a fresh clone must not count as set up.
    PYTHONPATH=$ROOT "$PY" -W ignore -c "import os.path as osp, pkg_resources as pr; \
assert osp.samefile(pr.get_distribution('mmposenc').location, '$ROOT')" >/dev/null 2>&1
}

# The compiled route: the mmcv installed was built for the key of this machine (torch build,
# CUDA architectures of the GPUs in sight); an environment moved to another GPU is not up to
# date.
mmcv_key_matches() {
    [ "$ROUTE" = ops-free ] && return 0
    [ "$(cat "$VENV/.mmposenc-mmcv" 2>/dev/null)" = \
      "$("$PY" "$ROOT/tools/misc/mmcv_build.py" key 2>/dev/null | cut -f1)" ]
}

if [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$want_stamp" ] && mmcv_key_matches && check_stack; then
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

TORCH_V=$(version torch)
TV_V=$(version torchvision)
if ! "$PY" -c "import torch, torchvision, torchvision.ops, sys; \
sys.exit(torch.__version__.split('+')[0] != '$TORCH_V' or '+cpu' in torch.__version__ \
or torchvision.__version__.split('+')[0] != '$TV_V')" >/dev/null 2>&1; then
    say "installing torch==$TORCH_V torchvision==$TV_V from PyPI (--isolated; several GB with CUDA libraries)"
    "${PIP[@]}" --isolated install -q "torch==$TORCH_V" "torchvision==$TV_V"
fi
say "torch: $("$PY" -c 'import torch; print(torch.__version__)')"

# ---- mmcv for the route ------------------------------------------------------------------
# The route of the mmcv installed now: compiled (an _ext of its own), ops-free, or none.
installed_route() {
    MMPOSENC_NO_TORCH_OPS=1 MMPOSENC_NO_STARTUP_HOOK=1 "$PY" - "$(version "$MMCV")" <<'EOF' 2>/dev/null || echo none
import importlib.util, sys
import mmcv
if mmcv.__version__ != sys.argv[1]:
    sys.exit(1)
print('compiled' if importlib.util.find_spec('mmcv._ext') else 'ops-free')
EOF
}
MMCV_MARK=$VENV/.mmposenc-mmcv
if [ "$ROUTE" = ops-free ]; then
    if [ "$(installed_route)" != ops-free ]; then
        "${PIP[@]}" uninstall -q -y mmcv mmcv-lite onedl-mmcv >/dev/null 2>&1 || true
        say "installing $(pin "$MMCV_LITE") without compiled ops"
        # onedl-mmcv is an sdist: pip builds it in an isolated environment without torch, so
        # it compiles nothing (installed_route checks that below)
        "${PIP[@]}" install -q -c "$CONSTRAINTS" "$(pin "$MMCV_LITE")" "$(pin "${HOSTS[0]}")" \
            "$(pin numpy)" "$(pin opencv-python)"
    fi
    [ "$(installed_route)" = ops-free ] || { say "$MMCV_LITE did not install without ops"; exit 1; }
    rm -f "$MMCV_MARK"
else
    key_line=$("$PY" "$ROOT/tools/misc/mmcv_build.py" key) || exit 1
    key=${key_line%%$'\t'*}
    arches=${key_line#*$'\t'}
    # the key names the architectures; refuse them where they miss a GPU in sight
    # (TORCH_CUDA_ARCH_LIST set to others): such a wheel is never built, installed or kept
    "$PY" "$ROOT/tools/misc/mmcv_build.py" covers "$arches" || exit 1
    if [ "$(installed_route)" != compiled ] || [ "$(cat "$MMCV_MARK" 2>/dev/null)" != "$key" ]; then
        WHEELDIR=$CACHE/$MMCV-$(version "$MMCV")/$key
        wheel=$(ls "$WHEELDIR"/*.whl 2>/dev/null | head -n 1 || true)
        if [ -n "$wheel" ]; then
            say "using cached mmcv wheel $wheel"
        else
            say "building $(pin "$MMCV") ops from source for $key (11-16 min on 2 cores)"
            build_pins=$(sed -nE 's/^@build +([^ ]+).*/\1/p' "$PINS")
            # shellcheck disable=SC2086
            "${PIP[@]}" install -q $build_pins wheel addict packaging pyyaml yapf \
                "$(pin numpy)" "$(pin opencv-python)" "$(pin "${HOSTS[0]}")"
            tmp=$(mktemp -d)
            build_env=(MAX_JOBS="${MAX_JOBS:-$(nproc)}" MMCV_WITH_OPS=1)
            if [ "$arches" != cpu ]; then
                build_env+=(FORCE_CUDA=1 TORCH_CUDA_ARCH_LIST="$arches")
            fi
            env "${build_env[@]}" "$PY" -m pip --disable-pip-version-check wheel \
                --no-build-isolation --no-deps --no-cache-dir -w "$tmp" "$(pin "$MMCV")" 2>&1 \
                | while IFS= read -r line; do
                    case "$line" in *Building*|*Created*|*error*|*Error*) say "  $line";; esac
                done
            built=$(ls "$tmp"/*.whl 2>/dev/null | head -n 1 || true)
            [ -n "$built" ] || { say "mmcv build failed (rerun: pip wheel -v --no-build-isolation $(pin "$MMCV"))"; exit 1; }
            mkdir -p "$WHEELDIR"
            mv "$built" "$WHEELDIR/"
            echo "$arches" > "$WHEELDIR/ARCHES"
            rm -rf "$tmp"
            wheel=$(ls "$WHEELDIR"/*.whl | head -n 1)
        fi
        "${PIP[@]}" uninstall -q -y mmcv mmcv-lite onedl-mmcv >/dev/null 2>&1 || true
        "${PIP[@]}" install -q -c "$CONSTRAINTS" "$wheel" "$(pin setuptools)"
        echo "$key" > "$MMCV_MARK"
    fi
    [ "$(installed_route)" = compiled ] || { say "the compiled mmcv does not load"; exit 1; }
fi

# ---- the OpenMMLab hosts and the rest ---------------------------------------------------
say "installing ${HOSTS[*]}, pycocotools, onnx(runtime), test tools"
# shellcheck disable=SC2046
"${PIP[@]}" install -q -c "$CONSTRAINTS" $(pins "${HOSTS[@]}" "${REST[@]}")
say "installing openmim (without opendatalab, see requirements/upstream.txt)"
# shellcheck disable=SC2046
"${PIP[@]}" install -q -c "$CONSTRAINTS" $(pins "${MIM_DEPS[@]}")
"${PIP[@]}" install -q --no-deps -c "$CONSTRAINTS" "$(pin openmim)"
say "installing mmposenc (editable)"
"${PIP[@]}" install -q --no-deps --no-build-isolation -e "$ROOT"
if [ ! -f "$ROOT/mmposenc.egg-info/PKG-INFO" ]; then
    # setuptools' editable build writes it beside setup.py; mim needs it (see check_stack)
    say "writing $ROOT/mmposenc.egg-info for mim"
    (cd "$ROOT" && "$PY" setup.py -q egg_info)
fi

if ! check_stack; then
    say "the stack does not import on the $ROUTE route; details:"
    "$PY" -c "import mmposenc, torch, torchvision.ops, mmcv.ops, mmdet.models, mmseg.models, mmpretrain.models, mmposenc.ops; print(mmposenc.ops.mmcv_route())"
    exit 1
fi
echo "$want_stamp" > "$STAMP"
say "done in $VENV: $("$PY" -c 'import mmposenc, mmposenc.ops, torch, mmcv.ops, mmengine, mmdet, mmseg, mmpretrain; print("torch", torch.__version__, "mmengine", mmengine.__version__, "mmcv", mmcv.__version__, "(" + mmposenc.ops.mmcv_route() + ")", "mmdet", mmdet.__version__, "mmseg", mmseg.__version__, "mmpretrain", mmpretrain.__version__)')"
