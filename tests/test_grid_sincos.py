"""fp.sincos_2d_table against transformers' ViT-MAE table and big_vision's posemb_sincos_2d formula (float64)."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
import torch
from transformers.models.vit_mae.modeling_vit_mae import build_2d_sinusoidal_position_embedding

import flax_posenc as fp


def _mae_reference(h, w, dim):
    """transformers' ViT-MAE table: build_2d_sinusoidal_position_embedding (float64) with its halves
    swapped as ViTMAEEmbeddings.initialize_weights does, class row first."""
    pe = build_2d_sinusoidal_position_embedding(h, w, dim, cls_token=True, dtype=torch.float64)
    half = dim // 2
    return torch.cat([pe[..., half:], pe[..., :half]], dim=-1).numpy()


def _big_vision_reference(h, w, width, temperature=10000.0):
    """big_vision models/vit.py posemb_sincos_2d, written in float64 numpy."""
    y, x = np.mgrid[:h, :w]
    omega = np.arange(width // 4) / (width // 4 - 1)
    omega = 1.0 / (temperature**omega)
    y = np.einsum("m,d->md", y.flatten().astype(np.float64), omega)
    x = np.einsum("m,d->md", x.flatten().astype(np.float64), omega)
    return np.concatenate([np.sin(x), np.cos(x), np.sin(y), np.cos(y)], axis=1)


@pytest.mark.parametrize("grid,dim", [((14, 14), 32), ((3, 5), 8), ((37, 2), 64)])
def test_mae_layout_equals_transformers(grid, dim):
    ref = _mae_reference(*grid, dim)
    # float64: torch's pow/sin and numpy's may differ in the last bit
    np.testing.assert_allclose(
        fp.sincos_2d_table(grid, dim, prefix_tokens=1, dtype=np.float64), ref, rtol=0, atol=1e-15
    )
    # rounded once: float32 and bfloat16 are the float64 reference rounded to nearest
    np.testing.assert_array_equal(fp.sincos_2d_table(grid, dim, prefix_tokens=1), ref.astype(np.float32))
    bf16 = fp.sincos_2d_table(grid, dim, prefix_tokens=1, dtype=ml_dtypes.bfloat16).astype(np.float64)
    spacing = 2.0 ** (np.floor(np.log2(np.maximum(np.abs(ref), 2.0**-126))) - 7)
    assert np.all(np.abs(bf16 - ref) <= spacing / 2)


@pytest.mark.parametrize("grid,width", [((16, 16), 64), ((4, 7), 8)])
def test_big_vision_layout_equals_posemb_sincos_2d(grid, width):
    ref = _big_vision_reference(*grid, width)
    ours = fp.sincos_2d_table(grid, width, layout="big_vision", dtype=np.float64)
    np.testing.assert_allclose(ours, ref, rtol=0, atol=1e-15)
    np.testing.assert_array_equal(fp.sincos_2d_table(grid, width, layout="big_vision"), ref.astype(np.float32))


@pytest.mark.parametrize(
    "kwargs,line",
    [
        (dict(grid=4, dim=6), "dim: expected a positive multiple of 4 (at least 4 for mae), got 6"),
        (
            dict(grid=4, dim=4, layout="big_vision"),
            "dim: expected a positive multiple of 4 (at least 8 for big_vision), got 4",
        ),
        (dict(grid=0, dim=8), "grid: expected (gh, gw) patches, each 1..65536, got 0"),
        (dict(grid=(2, 3, 4), dim=8), "grid: expected (gh, gw) patches or one int, got (2, 3, 4)"),
        (dict(grid=4096, dim=8), "grid: expected at most 4194304 patches, got 4096 x 4096"),
        (dict(grid=4, dim=8, layout="vit"), "layout: expected one of mae, big_vision, got 'vit'"),
        (dict(grid=4, dim=8, prefix_tokens=-1), "prefix_tokens: expected a non-negative integer, got -1"),
    ],
)
def test_bad_arguments_are_one_line(kwargs, line):
    with pytest.raises(ValueError) as e:
        fp.sincos_2d_table(**kwargs)
    assert str(e.value) == line
