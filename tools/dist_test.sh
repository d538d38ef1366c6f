#!/usr/bin/env bash
# Distributed testing with torchrun: tools/dist_test.sh CONFIG CHECKPOINT GPUS [test.py args...]
# On CPU-only machines the processes use the gloo backend (env_cfg.dist_cfg.backend=gloo is set
# automatically when CUDA is unavailable).
set -euo pipefail
CONFIG=$1
CHECKPOINT=$2
GPUS=$3
shift 3
NNODES=${NNODES:-1}
NODE_RANK=${NODE_RANK:-0}
PORT=${PORT:-29500}
MASTER_ADDR=${MASTER_ADDR:-127.0.0.1}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
# the interpreter: $PYTHON, else the active virtual environment's, else the repository's .venv
PY=${PYTHON:-${VIRTUAL_ENV:+$VIRTUAL_ENV/bin/python}}
PY=${PY:-$( [ -x "$ROOT/.venv/bin/python" ] && echo "$ROOT/.venv/bin/python" || echo python)}
EXTRA=()
if ! "$PY" -c 'import torch, sys; sys.exit(not torch.cuda.is_available())'; then
    EXTRA=(--cfg-options env_cfg.dist_cfg.backend=gloo)
fi
PYTHONPATH="$ROOT:${PYTHONPATH:-}" "$PY" -m torch.distributed.run \
    --nnodes="$NNODES" --node_rank="$NODE_RANK" --master_addr="$MASTER_ADDR" \
    --nproc_per_node="$GPUS" --master_port="$PORT" \
    "$ROOT/tools/test.py" "$CONFIG" "$CHECKPOINT" --launcher pytorch "$@" "${EXTRA[@]}"
