"""Fixed 2-D sine-cosine position grids (MAE, big_vision), float64 on the host, rounded once (numpy only).

Patch ``(r, c)`` of a ``gh x gw`` grid (row-major, row ``prefix_tokens + r * gw + c``) gets

    [sin(c w_k) | cos(c w_k) | sin(r w_k) | cos(r w_k)],   k = 0 .. dim/4 - 1,   w_k = base ** -(k / n)

with the column (x) first. The layouts differ only in ``n``:

- ``"mae"``: ``n = dim / 4`` (MAE's ``get_2d_sincos_pos_embed``, the layout of ViT-MAE checkpoints:
  transformers builds ``[sin_h|cos_h|sin_w|cos_w]`` and swaps the halves to match it), with
  a zero row per prefix token (MAE's class token);
- ``"big_vision"``: ``n = dim / 4 - 1`` (big_vision ``posemb_sincos_2d``, "the MoCo v3 logic"),
  so the last frequency is exactly ``1 / base``; big_vision adds no prefix rows.

Every entry is ``sin``/``cos`` of the float64 angle, rounded once to ``dtype``
(:func:`~flax_posenc.sinusoid_math.round_once`), as the 1-D tables are.

>>> sincos_2d_table((2, 2), 4, dtype=np.float64).round(4).tolist()[3]
[0.8415, 0.5403, 0.8415, 0.5403]
"""

from __future__ import annotations

from typing import Any

import numpy as np

from flax_posenc.grid_config import MAX_GRID_SIDE, MAX_PATCHES
from flax_posenc.sinusoid_math import round_once

__all__ = ["SINCOS_2D_LAYOUTS", "sincos_2d_table"]

#: layout -> the offset subtracted from dim / 4 in the frequency exponent's denominator.
SINCOS_2D_LAYOUTS = {"mae": 0, "big_vision": 1}


def sincos_2d_table(
    grid: Any,
    dim: int,
    *,
    layout: str = "mae",
    prefix_tokens: int = 0,
    base: float = 10000.0,
    dtype: Any = np.float32,
) -> np.ndarray:
    """A fixed 2-D sine-cosine position table of ``prefix_tokens + gh * gw`` rows.

    Args:
      grid: ``(gh, gw)`` patches, or one int for a square grid.
      dim: width, a positive multiple of 4 (8 or more for ``"big_vision"``).
      layout: ``"mae"`` or ``"big_vision"`` (see the module docstring).
      prefix_tokens: zero rows first (MAE's class token: 1).
      base: the frequency base (``temperature`` in big_vision).
      dtype: the result's dtype; every entry is the float64 value rounded once.

    Returns:
      ``(prefix_tokens + gh * gw, dim)`` numpy array.

    Raises:
      ValueError: an unknown layout, a width not a multiple of 4, a grid side not in
        ``1..MAX_GRID_SIDE`` or more than ``MAX_PATCHES`` patches, a negative prefix, a
        non-positive base (one line naming the argument).
    """
    if layout not in SINCOS_2D_LAYOUTS:
        raise ValueError(f"layout: expected one of {', '.join(SINCOS_2D_LAYOUTS)}, got {layout!r}")
    sides = tuple(grid) if isinstance(grid, (tuple, list)) else (grid, grid)
    if len(sides) != 2:
        raise ValueError(f"grid: expected (gh, gw) patches or one int, got {grid!r}")
    gh, gw = sides
    for side in sides:
        if isinstance(side, bool) or not isinstance(side, (int, np.integer)) or not 0 < side <= MAX_GRID_SIDE:
            raise ValueError(f"grid: expected (gh, gw) patches, each 1..{MAX_GRID_SIDE}, got {grid!r}")
    if gh * gw > MAX_PATCHES:
        raise ValueError(f"grid: expected at most {MAX_PATCHES} patches, got {gh} x {gw}")
    quarter = 2 if layout == "big_vision" else 1
    if isinstance(dim, bool) or not isinstance(dim, (int, np.integer)) or dim <= 0 or dim % 4 or dim // 4 < quarter:
        raise ValueError(f"dim: expected a positive multiple of 4 (at least {4 * quarter} for {layout}), got {dim!r}")
    if isinstance(prefix_tokens, bool) or not isinstance(prefix_tokens, (int, np.integer)) or prefix_tokens < 0:
        raise ValueError(f"prefix_tokens: expected a non-negative integer, got {prefix_tokens!r}")
    if not (isinstance(base, (int, float)) and np.isfinite(base) and base > 0):
        raise ValueError(f"base: expected a positive finite number, got {base!r}")
    n = dim // 4
    omega = 1.0 / float(base) ** (np.arange(n, dtype=np.float64) / (n - SINCOS_2D_LAYOUTS[layout]))
    rows, cols = np.meshgrid(np.arange(gh, dtype=np.float64), np.arange(gw, dtype=np.float64), indexing="ij")
    x = np.outer(cols.reshape(-1), omega)
    y = np.outer(rows.reshape(-1), omega)
    table = np.concatenate([np.sin(x), np.cos(x), np.sin(y), np.cos(y)], axis=1)
    table = np.concatenate([np.zeros((int(prefix_tokens), dim)), table], axis=0)
    return round_once(table, dtype)
