#!/usr/bin/env bash
# One-shot GPU benchmark (well under 6 minutes). The GPU machine's python3 already has JAX with
# CUDA, flax, torch and transformers; nothing is installed or fetched. Run from the repo root:
#     bash benchmarks/device.sh            # prints the table; copies it to $OUT when set
# Bandwidth: the a+1 "floor" row is XLA's device-to-device copy (read N bytes, write N bytes);
# ours / floor is the achieved fraction of that copy's bandwidth.
set -euo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" XLA_PYTHON_CLIENT_PREALLOCATE=false PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm,clocks.max.mem --format=csv || true
python3 -c "import jax, flax, torch; print('jax', jax.__version__, jax.devices(), '| flax', flax.__version__, '| torch', torch.__version__)"
report="${OUT:-/tmp}/benchmarks-gpu.md"
timeout 330 python3 benchmarks/run.py --single | tee "$report"
