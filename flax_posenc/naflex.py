"""Variable-resolution (NaFlex) positions on device: SigLIP 2's per-image grid resize (JAX, jittable).

:func:`naflex_positions` resizes a learned square grid to each image's own ``(h, w)`` patch grid
and pads it to the patch budget, as transformers' ``Siglip2VisionEmbeddings`` does (or as timm's
NaFlex embeddings do, ``convention="timm"``). The conventions, the budget checks and the float64
reference are numpy-only, in :mod:`flax_posenc.naflex_config`.

The image shapes are static (Python ints: one traced program per shape, as the grid resize
matrices are constants of it); the grid may be traced. The resize is separable: two matrix
products with float64 matrices split into two float32 parts
(:func:`flax_posenc.grids.resize_patch_grid`), so the result is within a few float32 ulps of the
float64 value (``benchmarks/naflex_parity.py``).

>>> import numpy as np
>>> naflex_positions(np.zeros((16, 4), np.float32), (2, 6), max_num_patches=16).shape
(16, 4)
"""

from __future__ import annotations

import math
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from flax_posenc.grids import resize_patch_grid
from flax_posenc.naflex_config import check_patch_budget, check_spatial_shape, naflex_convention

__all__ = ["naflex_positions"]


def _as_grid(grid: Any) -> jax.Array:
    """``(gh, gw, dim)`` from a ``(gh, gw, dim)`` grid or a ``(g * g, dim)`` table of a square grid."""
    if jnp.ndim(grid) == 3:
        return jnp.asarray(grid)
    if jnp.ndim(grid) == 2:
        rows, dim = jnp.shape(grid)
        side = math.isqrt(int(rows))
        if side * side != rows or side == 0:
            raise ValueError(f"grid: expected a (g * g, dim) table of a square grid, found {rows} rows")
        return jnp.reshape(jnp.asarray(grid), (side, side, dim))
    raise ValueError(f"grid: expected a (gh, gw, dim) grid or a (g * g, dim) table, found shape {jnp.shape(grid)}")


def _shapes(spatial_shapes: Any) -> tuple[list[Any], bool]:
    """``([pair, ...], batched)``: one ``(h, w)`` pair, or a sequence / ``(B, 2)`` array of them."""
    if isinstance(spatial_shapes, jax.core.Tracer):
        raise ValueError("spatial_shapes: expected static (height, width) patch counts, found a traced array")
    arr = np.asarray(spatial_shapes, dtype=object) if not isinstance(spatial_shapes, np.ndarray) else spatial_shapes
    if arr.ndim == 2:
        return [tuple(int(v) if isinstance(v, (int, np.integer)) else v for v in row) for row in arr], True
    return [spatial_shapes], False


def naflex_positions(
    grid: Any,
    spatial_shapes: Any,
    *,
    max_num_patches: int | None = None,
    convention: Any = None,
) -> jax.Array:
    """The positions a NaFlex vision tower adds to each image's patches.

    Args:
      grid: the learned grid: a :class:`~flax_posenc.conversion.NaflexGridTable` (from
        :func:`~flax_posenc.conversion.load_naflex_grid`; its budget and convention are the
        defaults), a ``(g * g, dim)`` table (SigLIP 2's ``position_embedding.weight``) or a
        ``(gh, gw, dim)`` grid; may be traced.
      spatial_shapes: one image's ``(h, w)`` patches, or a sequence (or ``(batch, 2)`` array) of
        them: the processor's ``spatial_shapes``. Static.
      max_num_patches: the patch budget (the padded sequence length; transformers' ``max_length``
        is ``pixel_values.shape[1]``); default: the record's.
      convention: a :data:`~flax_posenc.naflex_config.NAFLEX_CONVENTIONS` name (``"siglip2"``,
        ``"timm"``, ``"timm_siglip"``) or ``"lfm2_vl"``; default: the record's, else ``"siglip2"``.

    Returns:
      ``(max_num_patches, dim)`` for one shape (``(batch, max_num_patches, dim)`` for a sequence):
      the ``h * w`` resized positions row-major, then the padding rows (transformers: the first
      resized position repeated; timm: zeros), in the grid's dtype.

    Raises:
      ValueError: a patch budget that is not a positive integer, a side that is not a positive
        integer, a grid that is not square (one line naming the argument).
      PositionLimitError: an image of more than ``max_num_patches`` patches (the model refuses it).

    >>> import numpy as np
    >>> naflex_positions(np.ones((4, 1), np.float32), [(1, 2), (2, 1)], max_num_patches=3)[..., 0].tolist()
    [[1.0, 1.0, 1.0], [1.0, 1.0, 1.0]]
    """
    if hasattr(grid, "weights") and hasattr(grid, "max_num_patches"):
        budget = grid.max_num_patches if max_num_patches is None else max_num_patches
        convention = grid.convention if convention is None else convention
        grid = grid.patches
    elif max_num_patches is None:
        raise ValueError("max_num_patches: an array grid needs the patch budget (or pass load_naflex_grid's record)")
    else:
        budget = max_num_patches
    rule = naflex_convention("siglip2" if convention is None else convention)
    budget = check_patch_budget(budget)
    patches = _as_grid(grid)
    dim = jnp.shape(patches)[2]
    pairs, batched = _shapes(spatial_shapes)
    out = []
    for pair in pairs:
        h, w = check_spatial_shape(pair, budget)
        resized = jnp.reshape(resize_patch_grid(patches, (h, w), convention=rule.resampling), (h * w, dim))
        pad = budget - h * w
        if rule.padding == "first":
            fill = jnp.broadcast_to(resized[:1], (pad, dim))
        else:
            fill = jnp.zeros((pad, dim), resized.dtype)
        out.append(jnp.concatenate([resized, fill], axis=0))
    return jnp.stack(out) if batched else out[0]
