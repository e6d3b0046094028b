"""fp.resize_grid against transformers' own interpolate_pos_encoding, timm's and big_vision's formulas.

References: the transformers model classes on tiny random checkpoints, run in float64 (the
float32 stored table upcast exactly); ``F.interpolate`` in float64 written as timm's
``resample_abs_pos_embed`` and facebookresearch/dinov2's ``interpolate_pos_encoding`` call it;
``scipy.ndimage.zoom(order=1)`` as big_vision's ``resample_posemb`` calls it. Our result is
float32; the tolerance is 4 float32 ulps at the table's largest magnitude. (DINOv2's two
classes cast to float32 before interpolating, so for them the float64 reference is the same
``F.interpolate`` call made in float64, and their own output is checked within 8 ulps.)
"""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.ndimage
import torch
import torch.nn.functional as F
from grid_checkpoints import (
    FLOAT32_INTERPOLATION,
    MODELS,
    build,
    prefix_tokens,
    torch_formula,
    torch_interpolated,
    torch_position_grid,
)

import flax_posenc as fp
from flax_posenc.conversion import load_grid_table

ULPS = 4
SIZES = [(48, 48), (16, 16), (40, 24), (32, 32), (8, 56)]


def ulps(ours, ref, table) -> float:
    """max |ours - ref| in float32 ulps at the table's largest magnitude."""
    scale = np.spacing(np.float32(np.abs(table).max()))
    return float(np.abs(np.asarray(ours, np.float64) - ref).max() / scale)


@functools.cache
def _checkpoint(model_type: str, tmp):
    model = build(model_type, tmp / model_type)
    return model, tmp / model_type


@pytest.fixture(scope="module")
def vision(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("grids")
    return lambda model_type: _checkpoint(model_type, tmp)


@pytest.mark.parametrize("model_type", sorted(MODELS))
def test_resize_grid_equals_interpolate_pos_encoding(vision, model_type):
    model, path = vision(model_type)
    table = load_grid_table(path)
    for size in SIZES:
        ref = torch_interpolated(model, model_type, *size)
        ours = fp.resize_grid(table, size)  # the convention of the table's model type
        assert ours.dtype == jnp.float32 and ours.shape == ref.shape
        if model_type in FLOAT32_INTERPOLATION and size != (32, 32):
            # transformers casts to float32 before interpolating: its own result is float32-rounded,
            # so the float64 reference is the same F.interpolate call made in float64
            assert ulps(ours, ref, table.weights) <= 2 * ULPS
            ref = torch_formula(model_type, table.weights, *size)
        assert ulps(ours, ref, table.weights) <= ULPS, size


def test_resize_grid_under_jit_with_traced_table(vision):
    model, path = vision("deit")
    table = load_grid_table(path)
    resize = jax.jit(lambda w: fp.resize_grid(w, (40, 24), prefix_tokens=2, patch_size=8, convention="deit"))
    assert ulps(resize(table.weights), torch_interpolated(model, "deit", 40, 24), table.weights) <= ULPS


def _timm_resample_abs_pos_embed(posemb, new_size, num_prefix_tokens):
    """timm.layers.pos_embed.resample_abs_pos_embed (timm 1.0), in float64 torch."""
    num_pos_tokens = posemb.shape[1]
    if new_size[0] * new_size[1] + num_prefix_tokens == num_pos_tokens and new_size[0] == new_size[1]:
        return posemb
    hw = int(math.sqrt(num_pos_tokens - num_prefix_tokens))
    prefix, posemb = posemb[:, :num_prefix_tokens], posemb[:, num_prefix_tokens:]
    dim = posemb.shape[-1]
    posemb = posemb.reshape(1, hw, hw, -1).permute(0, 3, 1, 2)
    posemb = F.interpolate(posemb, size=new_size, mode="bicubic", antialias=True)
    posemb = posemb.permute(0, 2, 3, 1).reshape(1, -1, dim)
    return torch.cat([prefix, posemb], dim=1)


def _table(rows, dim, seed):
    return np.random.default_rng(seed).standard_normal((rows, dim)).astype(np.float32)


@pytest.mark.parametrize("old,new", [(7, 12), (12, 7), (14, 5), (5, 1)])
def test_timm_convention(old, new):
    table = _table(1 + old * old, 6, old * 100 + new)
    ref = _timm_resample_abs_pos_embed(torch.tensor(table, dtype=torch.float64)[None], (new, new), 1)[0].numpy()
    ours = fp.resize_grid(table, new * 4, prefix_tokens=1, patch_size=4, convention="timm")
    assert ulps(ours, ref, table) <= ULPS


@pytest.mark.parametrize("old,new", [(7, 12), (12, 7), (5, 1)])
def test_align_corners_convention(old, new):
    """F.interpolate(size=..., mode='bicubic', align_corners=True) in float64."""
    table = _table(old * (old + 1), 3, old * 7 + new)
    grid = torch.tensor(table, dtype=torch.float64).reshape(1, old, old + 1, 3).permute(0, 3, 1, 2)
    ref = F.interpolate(grid, size=(new, new + 2), mode="bicubic", align_corners=True)
    ours = fp.resize_patch_grid(
        table.reshape(old, old + 1, 3), (new, new + 2), convention="torch_bicubic_align_corners"
    )
    assert ulps(np.asarray(ours).reshape(-1, 3), ref.permute(0, 2, 3, 1).reshape(-1, 3).numpy(), table) <= ULPS


@pytest.mark.parametrize("old,new", [(7, 12), (12, 7), (3, 2)])
def test_big_vision_convention(old, new):
    """big_vision resample_posemb: scipy.ndimage.zoom(grid, (new/old, new/old, 1), order=1), no prefix."""
    table = _table(old * old, 5, old * 10 + new)
    grid = table.astype(np.float64).reshape(old, old, -1)
    ref = scipy.ndimage.zoom(grid, (new / old, new / old, 1), order=1).reshape(new * new, -1)
    ours = fp.resize_grid(table, new * 2, prefix_tokens=0, patch_size=2, convention="big_vision")
    assert ulps(ours, ref, table) <= ULPS


@pytest.mark.parametrize("old,new", [(37, 40), (8, 5)])
def test_dinov2_original_offset_convention(old, new):
    """facebookresearch/dinov2: F.interpolate(scale_factor=(new + 0.1) / old, mode='bicubic')."""
    table = _table(1 + old * old, 4, old + new)
    grid = torch.tensor(table[1:], dtype=torch.float64).reshape(1, old, old, -1).permute(0, 3, 1, 2)
    s = (new + 0.1) / old
    ref = F.interpolate(grid, scale_factor=(s, s), mode="bicubic").permute(0, 2, 3, 1).reshape(-1, 4).numpy()
    ours = fp.resize_patch_grid(table[1:].reshape(old, old, 4), new, convention="dinov2_original")
    assert ours.shape == (new, new, 4)
    assert ulps(np.asarray(ours).reshape(-1, 4), ref, table) <= ULPS


def test_vmap_over_tables_equals_one_by_one():
    tables = np.stack([_table(1 + 25, 3, s) for s in range(3)])
    resize = functools.partial(fp.resize_grid, image_size=(24, 32), prefix_tokens=1, patch_size=4)
    batched = jax.jit(jax.vmap(resize))(tables)
    for i in range(3):
        np.testing.assert_allclose(np.asarray(batched[i]), np.asarray(resize(tables[i])), rtol=0, atol=1e-6)


def test_same_grid_is_returned_unchanged():
    table = _table(1 + 16, 3, 0)
    np.testing.assert_array_equal(np.asarray(fp.resize_grid(table, 32, prefix_tokens=1, patch_size=8)), table)


def test_bfloat16_table_keeps_its_dtype():
    table = jnp.asarray(_table(1 + 16, 3, 1), jnp.bfloat16)
    out = fp.resize_grid(table, 48, prefix_tokens=1, patch_size=8)
    assert out.dtype == jnp.bfloat16 and out.shape == (37, 3)


def test_torch_float32_forward_agrees(vision):
    """The model's own float32 interpolation differs from ours by a few ulps too (it rounds in float32)."""
    model, path = vision("vit")
    emb = model.embeddings
    with torch.no_grad():
        out = emb.interpolate_pos_encoding(torch.zeros(1, 1 + 36, 16), 48, 48)[0].numpy()
    ours = fp.resize_grid(load_grid_table(path), 48)
    assert ulps(ours, out.astype(np.float64), torch_position_grid(model)) <= 2 * ULPS


def test_prefix_tokens_of_each_family(vision):
    for model_type in MODELS:
        _, path = vision(model_type)
        assert load_grid_table(path).prefix_tokens == prefix_tokens(model_type)


@pytest.mark.parametrize(
    "convention,kwargs",
    [
        ("torch_bicubic", dict(align_corners=False)),
        ("torch_bicubic_antialias", dict(align_corners=False, antialias=True)),
        ("torch_bicubic_align_corners", dict(align_corners=True)),
    ],
)
def test_float64_matrices_reproduce_f_interpolate(convention, kwargs):
    """The 1-D matrices themselves, applied in float64, equal F.interpolate in float64 (no float32 step)."""
    from flax_posenc.grid_config import GRID_CONVENTIONS, resize_matrix

    rng = np.random.default_rng(3)
    for old, new in ((4, 9), (9, 4), (14, 24), (37, 16), (3, 1)):
        grid = rng.standard_normal((old, old + 2, 2))
        rule = GRID_CONVENTIONS[convention]
        ours = np.einsum("oh,hwd,pw->opd", resize_matrix(old, new, rule), grid, resize_matrix(old + 2, new + 1, rule))
        ref = F.interpolate(torch.tensor(grid).permute(2, 0, 1)[None], size=(new, new + 1), mode="bicubic", **kwargs)
        np.testing.assert_allclose(ours, ref[0].permute(1, 2, 0).numpy(), rtol=0, atol=1e-13)


def test_float64_bilinear_antialias_matrices_reproduce_f_interpolate():
    """TIPSv2's recipe (bilinear, antialias=True), growing and shrinking, equals F.interpolate in float64."""
    from flax_posenc.grid_config import GRID_CONVENTIONS, resize_matrix

    rng = np.random.default_rng(5)
    rule = GRID_CONVENTIONS["torch_bilinear_antialias"]
    for old, new in ((4, 9), (9, 4), (14, 24), (37, 16), (3, 1)):
        grid = rng.standard_normal((old, old + 2, 2))
        ours = np.einsum("oh,hwd,pw->opd", resize_matrix(old, new, rule), grid, resize_matrix(old + 2, new + 1, rule))
        ref = F.interpolate(
            torch.tensor(grid).permute(2, 0, 1)[None], size=(new, new + 1), mode="bilinear", antialias=True
        )
        np.testing.assert_allclose(ours, ref[0].permute(1, 2, 0).numpy(), rtol=0, atol=1e-13)
