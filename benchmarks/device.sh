#!/usr/bin/env bash
# One-shot GPU benchmark (well under 10 minutes). The GPU machine's python3 already has JAX with
# CUDA, flax, torch and transformers; nothing is installed or fetched. Run from the repo root:
#     bash benchmarks/device.sh            # prints the table; copies it (and the raw JSON, the curves) to $OUT when set
# The same table as `python benchmarks/run.py` (every section, 3 interleaved rounds, ratios as
# median [range]), in the default environment only (the MALLOC_* opt-in is a CPU matter); PyTorch
# candidates run on CUDA when torch sees the GPU. Bandwidth: the a+1 "floor" row is XLA's
# device-to-device copy (read N bytes, write N bytes); ours / floor is the achieved fraction.
set -euo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" XLA_PYTHON_CLIENT_PREALLOCATE=false PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm,clocks.max.mem --format=csv || true
python3 -c "import jax, flax, torch; print('jax', jax.__version__, jax.devices(), '| flax', flax.__version__, '| torch', torch.__version__)"
out="${OUT:-/tmp}"
timeout 540 python3 benchmarks/run.py --single --json "$out/benchmarks-gpu.json" --figure "$out/cost_curves-gpu.png" | tee "$out/benchmarks-gpu.md"
