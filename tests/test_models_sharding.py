"""Every reference model of examples/models, data parallel and tensor parallel on 8 host
devices (a subprocess with XLA_FLAGS=--xla_force_host_platform_device_count=8), sharded by the
logical axis names of its parameters: outputs equal the unsharded model to float32 rounding
(within 64 float32 ulps of the output scale: a different split of the batch or of a matmul
changes XLA's summation order, and two layers accumulate it; measured up to 34 ulps, Llama's
1.6e-5 at logits of 7.4, see docs/models.md)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from model_checkpoints import build

SCRIPT = Path(__file__).parent / "scripts" / "sharded_models.py"
MODELS = ("gpt2", "llama", "bloom", "bert")


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    paths = {}
    for name in MODELS:
        paths[name] = str(tmp_path_factory.mktemp(f"sharded-{name}"))
        build(name, Path(paths[name]))
    out = subprocess.run([sys.executable, str(SCRIPT), json.dumps(paths)], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("name", MODELS)
def test_data_and_tensor_parallel_equal_one_device(results, name):
    assert results["devices"] == 8
    dp, tp = results[f"{name}/data_parallel"], results[f"{name}/tensor_parallel"]
    for r in (dp, tp):
        assert r["max_abs_diff"] < 64 * np.spacing(np.float32(max(1.0, r["scale"])))
    assert dp["out_batch_shard"][0] == 1 and tp["out_batch_shard"][0] == 4  # batch 8 over 8 or 2 devices
    assert dp["mlp_kernel_shard"] == dp["mlp_kernel"]  # replicated
    width_axis = dp["mlp_kernel"].index(max(dp["mlp_kernel"]))  # the MLP's hidden width (2-4x the model's)
    assert tp["mlp_kernel_shard"][width_axis] * 4 == tp["mlp_kernel"][width_axis]  # split over 4 devices
