"""Sharding on 8 host devices, in one subprocess (XLA_FLAGS=--xla_force_host_platform_device_count=8):

- the input block, data parallel and tensor parallel (tests/scripts/sharded_block.py; XLA's default
  passes: the data-parallel block must equal the eager one bit for bit);
- every reference model of examples/models, data parallel and tensor parallel, sharded by the
  logical axis names of its parameters (tests/scripts/sharded_models.py; sharded and unsharded
  programs alike compiled with helpers.FAST_XLA's cheap code generation): outputs equal the
  unsharded model to float32 rounding (within 64 float32 ulps of the output scale: a different
  split of the batch or of a matmul changes XLA's summation order, and two layers accumulate it;
  measured up to 34 ulps, Llama's 1.6e-5 at logits of 7.4, see docs/models.md).
"""

from __future__ import annotations

import json
import math
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from model_checkpoints import build

SCRIPT = Path(__file__).parent / "scripts" / "sharded_models.py"
MODELS = ("gpt2", "llama", "bloom", "bert")


@pytest.fixture(scope="module")
def all_results(tmp_path_factory):
    paths = {}
    for name in MODELS:
        paths[name] = str(tmp_path_factory.mktemp(f"sharded-{name}"))
        build(name, Path(paths[name]))
    cmd = [sys.executable, str(SCRIPT), json.dumps(paths), "--block"]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=400)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def results(all_results):
    """The input block's results."""
    return all_results["block"]


def test_eight_devices(results):
    assert results["devices"] == 8
    dp, tp = results["data_parallel"], results["tensor_parallel"]
    # every device holds a piece of the output: batch 8 over 2 data shards, width 64 over 4 model shards
    assert dp["out_devices"] == tp["out_devices"] == 8
    assert dp["out_shard_shape"] == [4, 128, 64] and tp["out_shard_shape"] == [4, 128, 16]


@pytest.mark.parametrize("layer_norm", ["", "_layernorm"])
def test_data_parallel_needs_no_communication(results, layer_norm):
    r = results["data_parallel" + layer_norm]
    assert r["max_abs_diff"] == 0.0
    assert r["out_spec"] == "P('data', None, None)"
    assert r["word_table_shard_shape"] == [1000, 64]  # replicated tables
    assert not r["all_to_all"]
    assert only_scalar_reductions(r) and only_guard_gathers(r)


def only_scalar_reductions(r) -> bool:
    """All-reduces only of scalars: the overflow guard's check of the traced token-type ids."""
    return all(re.fullmatch(r"\(?(\w+\[\](\{[^}]*\})?,? ?)+\)?", shape) for shape in r["all_reduce_shapes"])


def only_guard_gathers(r) -> bool:
    """All-gathers only of one scalar per shard: the guard's per-shard min/max of the token-type ids.

    (XLA partitions the guard's variadic min/max reduction as a local reduction, an all-gather of
    the per-shard results and a final reduction; nothing of a table or an activation.)"""
    sizes = [
        math.prod(int(d) for d in re.findall(r"\d+", shape.split("{")[0].split("[", 1)[1]))
        for shape in r["all_gather_shapes"]
    ]
    return all(size <= 8 for size in sizes)  # 8 devices: at most one value per device


def test_tensor_parallel_shards_tables_along_embed(results):
    r = results["tensor_parallel"]
    assert r["max_abs_diff"] == 0.0
    assert r["out_spec"] == "P('data', None, 'model')"
    assert r["word_table_shard_shape"] == [1000, 16]  # 64 / 4 model shards
    assert not r["all_to_all"]  # gathers stay local
    assert only_scalar_reductions(r) and only_guard_gathers(r)


def test_tensor_parallel_layernorm_only_reduces_statistics(results):
    r = results["tensor_parallel_layernorm"]
    assert r["max_abs_diff"] < 1e-5
    assert r["all_reduce"] and only_guard_gathers(r)  # mean/variance across shards, tables never gathered
    assert not only_scalar_reductions(r)


@pytest.mark.parametrize("framework", ["nnx", "linen"])
def test_pretrained_block_shards_by_its_logical_axes(results, framework):
    """from_pretrained carries the same partitioning metadata as init, in both frameworks."""
    r = results[f"pretrained_{framework}"]
    assert r["word_table_shard_shape"] == [30522, 96]  # 384 / 4 model shards
    assert r["max_abs_diff"] < 1e-5  # LayerNorm statistics reduced across shards


@pytest.mark.parametrize("name", MODELS)
def test_models_data_and_tensor_parallel_equal_one_device(all_results, name):
    assert all_results["devices"] == 8
    dp, tp = all_results[f"{name}/data_parallel"], all_results[f"{name}/tensor_parallel"]
    for r in (dp, tp):
        assert r["max_abs_diff"] < 64 * np.spacing(np.float32(max(1.0, r["scale"])))
    assert dp["out_batch_shard"][0] == 1 and tp["out_batch_shard"][0] == 4  # batch 8 over 8 or 2 devices
    assert dp["mlp_kernel_shard"] == dp["mlp_kernel"]  # replicated
    width_axis = dp["mlp_kernel"].index(max(dp["mlp_kernel"]))  # the MLP's hidden width (2-4x the model's)
    assert tp["mlp_kernel_shard"][width_axis] * 4 == tp["mlp_kernel"][width_axis]  # split over 4 devices
