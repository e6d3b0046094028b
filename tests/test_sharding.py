"""The input block sharded over 8 host devices: data parallel and tensor parallel (subprocess)."""

from __future__ import annotations

import json
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
    assert not (r["all_gather"] or r["all_to_all"])
    assert only_scalar_reductions(r)


def only_scalar_reductions(r) -> bool:
    """All-reduces only of scalars: the overflow guard's check of the traced token-type ids."""
    return all(re.fullmatch(r"\(?(\w+\[\](\{[^}]*\})?,? ?)+\)?", shape) for shape in r["all_reduce_shapes"])


def test_tensor_parallel_shards_tables_along_embed(results):
    r = results["tensor_parallel"]
    assert r["max_abs_diff"] == 0.0
    assert r["out_spec"] == "P('data', None, 'model')"
    assert r["word_table_shard_shape"] == [1000, 16]  # 64 / 4 model shards
    assert not (r["all_gather"] or r["all_to_all"])  # gathers stay local
    assert only_scalar_reductions(r)


def test_tensor_parallel_layernorm_only_reduces_statistics(results):
    r = results["tensor_parallel_layernorm"]
    assert r["max_abs_diff"] < 1e-5
    assert r["all_reduce"] and not r["all_gather"]  # mean/variance across shards, tables never gathered
    assert not only_scalar_reductions(r)


@pytest.mark.parametrize("framework", ["nnx", "linen"])
def test_pretrained_block_shards_by_its_logical_axes(results, framework):
    """from_pretrained carries the same partitioning metadata as init, in both frameworks."""
    r = results[f"pretrained_{framework}"]
    assert r["word_table_shard_shape"] == [30522, 96]  # 384 / 4 model shards
    assert r["max_abs_diff"] < 1e-5  # LayerNorm statistics reduced across shards
