"""The input block sharded over 8 host devices: data parallel and tensor parallel (subprocess)."""

from __future__ import annotations

import json
import math
import re
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).parent / "scripts" / "sharded_block.py"


@pytest.fixture(scope="module")
def results():
    out = subprocess.run([sys.executable, str(SCRIPT)], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_eight_devices(results):
    assert results["devices"] == 8


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
