"""SAM/ViTDet decomposed relative positions: the functional core against float64 numpy and
transformers' own ``get_rel_pos`` / ``get_decomposed_rel_pos`` (SAM's attention), the reader's
bad input, and a record of a tiny SAM checkpoint (the per-type conformance cases are in
tests/test_conformance.py)."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
from safetensors.numpy import load_file, save_file

import flax_posenc as fp
from flax_posenc.conversion import inspect_source
from flax_posenc.conversion.decomposed_rel_pos import load_decomposed_rel_pos
from flax_posenc.errors import CheckpointError
from flax_posenc.rel_pos_config import (
    decomposed_rel_pos_float64,
    linear_resample_weights,
    rel_pos_index,
    rel_pos_table_float64,
)

sys.path.insert(0, str(Path(__file__).parent))
from conformance.reference import REL_POS_ULPS, rel_pos_parity  # noqa: E402
from conformance.tiny import quiet, tiny_model  # noqa: E402


@pytest.fixture(scope="module")
def sam_attention():
    from transformers import SamVisionConfig
    from transformers.models.sam.modeling_sam import SamVisionAttention

    config = SamVisionConfig(hidden_size=32, num_attention_heads=2, image_size=64, patch_size=8, use_rel_pos=True)
    return SamVisionAttention(config, 0)


def test_resample_weights_are_torchs_bit_for_bit():
    # torch's own weights: F.interpolate of the identity, row i = the weights of output i
    for n in range(1, 14):
        for m in range(1, 30):
            theirs = torch.nn.functional.interpolate(torch.eye(n)[None], size=m, mode="linear")[0].T.numpy()
            i0, i1, w0, w1 = linear_resample_weights(n, m, np.float32)
            ours = np.zeros((m, n), np.float32)
            np.add.at(ours, (np.arange(m), i0), w0)
            np.add.at(ours, (np.arange(m), i1), w1)
            assert np.array_equal(ours, theirs), (n, m)


def test_index_is_transformers_float32_index(sam_attention):
    # the index a one-hot table reads back: row r of the resized one-hot table is r itself
    for q, k in [(1, 1), (3, 3), (5, 9), (9, 5), (3, 7), (7, 3), (6, 10), (11, 4), (13, 13)]:
        length = 2 * max(q, k) - 1
        onehot = torch.arange(length, dtype=torch.float32)[:, None]
        theirs = sam_attention.get_rel_pos(q, k, onehot)[..., 0].round().long().numpy()
        assert np.array_equal(rel_pos_index(q, k), theirs), (q, k)


@pytest.mark.parametrize("rows,q,k", [(27, 14, 14), (27, 20, 20), (27, 9, 9), (15, 8, 11), (9, 13, 6), (1, 3, 3)])
def test_table_against_float64_and_transformers(sam_attention, rows, q, k):
    table = np.random.default_rng(rows + q + k).standard_normal((rows, 16)).astype(np.float32)
    theirs, ours, between = rel_pos_parity(sam_attention.get_rel_pos, table, q, k)
    assert theirs <= REL_POS_ULPS and ours <= REL_POS_ULPS and between <= 2
    at_size = rows == 2 * max(q, k) - 1  # no resampling: the rows themselves, exactly
    if at_size:
        assert ours == 0 and theirs == 0


def test_float64_reference_is_the_formula():
    # by hand: 3 rows -> 5 (scale 3/5): sources 0, 0.4, 1.0, 1.6, 2.0 (clamped to the last row)
    t = np.array([[0.0], [10.0], [20.0]])
    r = rel_pos_table_float64(t, 3, 3)[..., 0]
    resized = [0.0, 4.0, 10.0, 16.0, 20.0]
    assert np.allclose(r, [[resized[2 + i - j] for j in range(3)] for i in range(3)], atol=1e-12)


def test_bias_against_float64_and_transformers(sam_attention):
    rng = np.random.default_rng(1)
    q = rng.standard_normal((2, 4 * 6, 16)).astype(np.float32)
    rh, rw = (rng.standard_normal((n, 16)).astype(np.float32) for n in (15, 9))
    for size in [(4, 6), (5, 5)]:
        q = rng.standard_normal((2, size[0] * size[1], 16)).astype(np.float32)
        ref = decomposed_rel_pos_float64(q, rh, rw, size, size)
        with torch.no_grad():
            theirs = sam_attention.get_decomposed_rel_pos(
                torch.from_numpy(q), torch.from_numpy(rh), torch.from_numpy(rw), size, size
            )
        ours = np.asarray(jax.jit(fp.decomposed_rel_pos_bias, static_argnums=(3, 4))(q, rh, rw, size, size))
        scale = np.abs(ref).max()
        assert np.abs(ours - ref).max() <= 1e-6 * scale * 8
        assert np.abs(theirs.reshape(ours.shape).double().numpy() - ref).max() <= 1e-6 * scale * 8


def test_under_vmap_and_scan():
    rng = np.random.default_rng(2)
    tables = jnp.asarray(rng.standard_normal((3, 7, 4)), jnp.float32)
    one = [fp.decomposed_rel_pos_table(t, 6, 6) for t in tables]
    vm = jax.vmap(lambda t: fp.decomposed_rel_pos_table(t, 6, 6))(tables)
    _, sc = jax.lax.scan(lambda c, t: (c, fp.decomposed_rel_pos_table(t, 6, 6)), 0, tables)
    # compiled, XLA may fuse the two products of a resampled row (one float32 rounding apart)
    assert np.allclose(np.stack(one), vm, rtol=0, atol=1e-6) and np.allclose(vm, sc, rtol=0, atol=1e-6)


def test_bad_input_one_line_each():
    with pytest.raises(ValueError) as e:
        fp.decomposed_rel_pos_table(jnp.zeros((26, 4)), 14, 14, interpolate=False)
    assert str(e.value) == ("rel_pos: expected 27 rows (2 * max(14, 14) - 1) without interpolation, found 26 rows")
    with pytest.raises(ValueError) as e:
        fp.decomposed_rel_pos_table(jnp.zeros((27,)), 14, 14)
    assert str(e.value) == "rel_pos: expected a (rows, head_dim) table, found shape (27,)"
    with pytest.raises(ValueError) as e:
        fp.decomposed_rel_pos_table(jnp.zeros((27, 4)), 0, 14)
    assert str(e.value) == "q_size: expected a number of patches in 1..32768, found 0"
    with pytest.raises(ValueError) as e:
        fp.decomposed_rel_pos_bias(jnp.zeros((1, 5, 4)), jnp.zeros((3, 4)), jnp.zeros((3, 4)), (2, 3), (2, 3))
    assert str(e.value) == "query: expected (..., 2 * 3, head_dim), found shape (1, 5, 4)"


# ----------------------------------------------------------------------------- a tiny SAM checkpoint


@pytest.fixture(scope="module")
def sam_dir(tmp_path_factory):
    path = tmp_path_factory.mktemp("sam")
    with quiet():
        tiny_model("sam_vision_model").save_pretrained(path)
    return path


def test_record_of_a_tiny_sam(sam_dir):
    rec = inspect_source(sam_dir)
    kinds = [m.kind for m in rec.mechanisms]
    assert kinds == ["grid", "decomposed_rel_pos"]
    rel = rec.mechanisms[1].record
    sizes = [(layer.layer, layer.size, layer.windowed) for layer in rel.attention_layers]
    assert sizes == [(0, (3, 3), True), (1, (8, 8), False)]  # window 3; layer 1 global: the 8 x 8 grid
    assert rel.describe_limit().endswith(
        "has no limit (tables of 2 S - 1 rows per axis, trained at a 3 x 3 window (layers 0); "
        "a 8 x 8 global grid (layers 1); resampled linearly to any other size by get_rel_pos)"
    )
    assert rec.check_length(10**6)[0]
    json.dumps(rec.to_dict())


def _copy(sam_dir, tmp_path):
    out = tmp_path / "sam"
    shutil.copytree(sam_dir, out)
    return out


def test_image_size_not_whole_patches_is_one_line(sam_dir, tmp_path):
    out = _copy(sam_dir, tmp_path)
    config = json.loads((out / "config.json").read_text())
    config["image_size"] = 60
    (out / "config.json").write_text(json.dumps(config))
    with pytest.raises(CheckpointError) as e:
        load_decomposed_rel_pos(out)
    assert (
        str(e.value)
        == f"{out / 'config.json'}:image_size: expected image_size divisible by patch_size 8, found 60 x 60 px"
    )


def test_table_of_the_wrong_length_is_one_line(sam_dir, tmp_path):
    out = _copy(sam_dir, tmp_path)
    weights = load_file(out / "model.safetensors")
    key = "vision_encoder.layers.1.attn.rel_pos_h"
    weights[key] = weights[key][:-2]
    save_file(weights, out / "model.safetensors")
    with pytest.raises(CheckpointError) as e:
        load_decomposed_rel_pos(out)
    assert str(e.value) == (
        f"{out / 'model.safetensors'}:{key}: expected 15 rows (2 * 8 - 1 for the layer's grid of 8), found 13 rows"
    )


def test_shells_give_the_models_own_bias(sam_attention):
    """NNX and Linen modules holding SAM's tables give its own get_decomposed_rel_pos (trained and resampled)."""
    from flax import nnx

    from flax_posenc.rel_pos_config import DecomposedRelPosSpec

    rng = np.random.default_rng(3)
    rh, rw = (rng.standard_normal((15, 16)).astype(np.float32) for _ in range(2))
    module = fp.nnx.DecomposedRelativePosition(DecomposedRelPosSpec((8, 8), 16), rngs=nnx.Rngs(0))
    module.rel_pos_h[...], module.rel_pos_w[...] = jnp.asarray(rh), jnp.asarray(rw)
    linen = fp.linen.DecomposedRelativePosition(DecomposedRelPosSpec((8, 8), 16))
    for size in [(8, 8), (6, 10)]:
        q = rng.standard_normal((2, size[0] * size[1], 16)).astype(np.float32)
        with torch.no_grad():
            theirs = sam_attention.get_decomposed_rel_pos(
                torch.from_numpy(q), torch.from_numpy(rh), torch.from_numpy(rw), size, size
            ).reshape(2, q.shape[1], q.shape[1])
        ours = np.asarray(module(q, size))
        from_linen = np.asarray(linen.apply({"params": {"rel_pos_h": rh, "rel_pos_w": rw}}, q, size))
        assert np.abs(ours - theirs.numpy()).max() <= 1e-5 * np.abs(theirs.numpy()).max()
        assert np.array_equal(ours, from_linen)
