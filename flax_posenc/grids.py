"""Resizing learned 2-D position grids exactly as each vision model does (JAX, jittable).

:func:`resize_patch_grid` resamples a ``(gh, gw, dim)`` grid to ``(h, w)``; :func:`resize_grid`
takes a whole table (prefix tokens + grid, as :func:`~flax_posenc.conversion.load_grid_table`
returns it) and an image size, and returns the table the model would use at that size.

The resampling is separable, so it is two matrix products, ``A_h @ grid @ A_w.T`` per channel,
with the 1-D matrices computed on the host in float64 from the convention's exact rules
(:func:`~flax_posenc.grid_config.resize_matrix`: torch's bicubic index and weight rules with
``a = -0.75``, its antialiased resampler, scipy's order-1 zoom). Shapes are static, so the
matrices are constants of the traced program; the products run at ``precision="highest"`` in
float32 (or float64 under x64) and the result is cast once to the table's dtype. Measured
against the torch call in float64: a few float32 ulps (``benchmarks/grid_parity.py``).

>>> import numpy as np
>>> import flax_posenc as fp
>>> fp.resize_grid(np.zeros((17, 3), np.float32), 32, prefix_tokens=1, patch_size=4, convention="vit").shape
(65, 3)
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from flax_posenc.errors import PositionLimitError
from flax_posenc.grid_config import MAX_GRID_SIDE, convention_for, grid_of_rows, image_grid, resize_matrix
from flax_posenc.limits import describe_grid

__all__ = ["add_grid_positions", "grid_of_tokens", "grid_pair", "resize_grid", "resize_patch_grid"]


def grid_pair(new_grid: Any) -> tuple[int, int]:
    """``(h, w)`` patches from a pair or one int; each side in ``1..MAX_GRID_SIDE`` (else one-line ``ValueError``)."""
    if isinstance(new_grid, (tuple, list)) and len(new_grid) == 2:
        pair = tuple(new_grid)
    else:
        pair = (new_grid, new_grid)
    for side in pair:
        if isinstance(side, bool) or not isinstance(side, (int, np.integer)) or not 0 < side <= MAX_GRID_SIDE:
            raise ValueError(
                f"new_grid: expected (height, width) in patches, each 1..{MAX_GRID_SIDE}, got {new_grid!r}"
            )
    return int(pair[0]), int(pair[1])


def resize_patch_grid(patches: Any, new_grid: Any, *, convention: Any = "torch_bicubic") -> jax.Array:
    """Resample a ``(gh, gw, dim)`` grid of position vectors to ``new_grid`` patches.

    Args:
      patches: ``(gh, gw, dim)`` float array (may be traced).
      new_grid: ``(h, w)`` patches, or one int for a square grid (static).
      convention: a :data:`~flax_posenc.grid_config.GRID_CONVENTIONS` name, a model type
        (``"vit"``, ``"dinov2_with_registers"``, ...), ``"timm"`` or ``"big_vision"``.

    Returns:
      ``(h', w', dim)`` in ``patches``' dtype, where ``(h', w') = new_grid`` except under the
      ``torch_bicubic_offset`` convention (facebookresearch/dinov2), whose output side is
      ``floor(g * (new + 0.1) / g)``.

    Raises:
      ValueError: an unknown convention, a grid that is not 3-D, a size out of range.

    >>> import jax.numpy as jnp
    >>> resize_patch_grid(jnp.ones((2, 2, 1)), 3).squeeze().tolist()
    [[1.0, 1.0, 1.0], [1.0, 1.0, 1.0], [1.0, 1.0, 1.0]]
    """
    rule = convention_for(convention)
    h, w = grid_pair(new_grid)
    if jnp.ndim(patches) != 3:
        raise ValueError(f"patches: expected a (gh, gw, dim) grid, got shape {jnp.shape(patches)}")
    gh, gw, _ = jnp.shape(patches)
    dtype = jnp.result_type(patches)
    compute = jnp.promote_types(dtype, jnp.float32)
    x = jnp.asarray(patches, compute)
    x = _apply(resize_matrix(gh, h, rule), "oh,hwd->owd", x, compute)
    x = _apply(resize_matrix(gw, w, rule), "pw,owd->opd", x, compute)
    return x.astype(dtype)


def _apply(matrix: np.ndarray, spec: str, x: jax.Array, compute) -> jax.Array:
    """``einsum(spec, matrix, x)`` with the float64 ``matrix`` split into two ``compute`` parts
    (``hi + lo``), so the weights carry no rounding of their own into the result."""
    hi = matrix.astype(compute)
    lo = (matrix - hi.astype(np.float64)).astype(compute)
    out = jnp.einsum(spec, jnp.asarray(hi), x, precision=jax.lax.Precision.HIGHEST)
    if np.any(lo):
        out = out + jnp.einsum(spec, jnp.asarray(lo), x, precision=jax.lax.Precision.HIGHEST)
    return out


def resize_grid(
    grid: Any,
    image_size: Any,
    *,
    convention: Any = None,
    prefix_tokens: int | None = None,
    patch_size: Any = None,
) -> jax.Array:
    """The position table a vision model uses for ``image_size`` px images.

    Args:
      grid: a :class:`~flax_posenc.conversion.GridTable` (from
        :func:`~flax_posenc.conversion.load_grid_table`), or a ``(prefix + g * g, dim)`` array
        (may be traced) with ``prefix_tokens`` and ``patch_size`` given.
      image_size: ``(height, width)`` px, or one int for a square image; each side a multiple of
        the patch size.
      convention: how to resample (:data:`~flax_posenc.grid_config.GRID_CONVENTIONS`, a model
        type, ``"timm"``, ``"big_vision"``); default: the table's own (its family's row in
        :data:`~flax_posenc.conversion.GRID_FAMILIES`; an array: ``"vit"``'s).
      prefix_tokens, patch_size: for an array ``grid`` (a table's own values win otherwise).

    Returns:
      ``(prefix + h * w, dim)``: the prefix rows unchanged, then the resampled grid row-major,
      equal to the model type's ``interpolate_pos_encoding`` in transformers. When
      ``image_size`` gives the trained grid the table is returned unchanged (as transformers does).

    Raises:
      ValueError: (:class:`~flax_posenc.CheckpointError` for sizes) an image size that is not a
        positive multiple of the patch size or is past the bounds, a table whose rows are not
        ``prefix + g * g``, an unknown convention. One line naming the field.

    >>> import numpy as np
    >>> resize_grid(np.zeros((5, 2), np.float32), 6, prefix_tokens=1, patch_size=2).shape
    (10, 2)
    """
    if hasattr(grid, "weights") and hasattr(grid, "prefix_tokens"):
        weights = grid.weights
        prefix = grid.prefix_tokens if prefix_tokens is None else prefix_tokens
        patch = grid.patch_size if patch_size is None else patch_size
        old = grid.grid
        convention = grid.convention if convention is None else convention
    else:
        if prefix_tokens is None or patch_size is None:
            raise ValueError("grid: an array needs prefix_tokens= and patch_size= (or pass load_grid_table's record)")
        weights = grid
        prefix, patch = prefix_tokens, patch_size
        if jnp.ndim(weights) != 2:
            raise ValueError(f"grid: expected a (prefix + gh * gw, dim) table, got shape {jnp.shape(weights)}")
        old = grid_of_rows(int(jnp.shape(weights)[0]), prefix, where="grid")
        convention = "vit" if convention is None else convention
    rule = convention_for(convention)
    new = image_grid(image_size, patch, where="image_size")
    dim = int(jnp.shape(weights)[1])
    if new == tuple(old) and rule.keep_same_size:
        return jnp.asarray(weights)
    patches = jnp.reshape(jnp.asarray(weights)[prefix:], (*old, dim))
    resized = resize_patch_grid(patches, new, convention=rule)
    rows = jnp.reshape(resized, (-1, dim))
    return jnp.concatenate([jnp.asarray(weights)[:prefix], rows], axis=0)


def grid_of_tokens(
    tokens: int, prefix_tokens: int, trained_grid: tuple[int, int], *, grid: Any = None, name: str = "position grid"
) -> tuple[int, int]:
    """The ``(gh, gw)`` grid of a sequence of ``tokens`` = ``prefix_tokens + gh * gw``.

    ``grid`` given: checked against ``tokens``; else the trained grid when the count matches it,
    else the square grid of that count. A count that is neither raises ``ValueError`` (one line).
    """
    patches = tokens - prefix_tokens
    if grid is not None:
        gh, gw = grid_pair(grid)
        if gh * gw != patches:
            raise ValueError(
                f"grid: expected {gh} x {gw} = {gh * gw} patches after {prefix_tokens} prefix tokens, "
                f"found {patches} ({tokens} tokens)"
            )
        return gh, gw
    if patches == trained_grid[0] * trained_grid[1]:
        return int(trained_grid[0]), int(trained_grid[1])
    side = int(np.sqrt(patches)) if patches > 0 else 0
    while side * side > patches:
        side -= 1
    while (side + 1) * (side + 1) <= patches:
        side += 1
    if side == 0 or side * side != patches:
        raise ValueError(
            f"x: expected {prefix_tokens} prefix tokens + a square grid of patches for the {name} "
            f"(or pass grid=(gh, gw)), found {tokens} tokens"
        )
    return side, side


def add_grid_positions(
    x: Any,
    table: Any,
    *,
    prefix_tokens: int,
    trained_grid: tuple[int, int],
    grid: Any = None,
    interpolate: bool = False,
    convention: Any = "torch_bicubic",
    name: str = "position grid",
) -> jax.Array:
    """``x`` plus the position of each token: the functional core of ``PatchPositionalEmbedding``.

    Args:
      x: ``(..., prefix_tokens + gh * gw, dim)`` token vectors (class tokens first, then the
        patches row-major).
      table: ``(prefix_tokens + th * tw, dim)`` learned positions of the trained ``(th, tw)`` grid.
      prefix_tokens: rows before the grid; trained_grid: ``(th, tw)``.
      grid: ``(gh, gw)`` of ``x`` (default: the trained grid when the count matches, else square).
      interpolate: resize the table to a different grid (as :func:`resize_grid` with
        ``convention``) instead of raising.
      name: the table's name in messages.

    Returns:
      ``x + positions`` in ``x``'s dtype promoted with the table's.

    Raises:
      PositionLimitError: ``x``'s grid differs from the trained one and ``interpolate`` is off;
        the line names the trained grid.
      ValueError: a token count that is not ``prefix_tokens + gh * gw``.
    """
    tokens, dim = jnp.shape(x)[-2], jnp.shape(x)[-1]
    gh, gw = grid_of_tokens(tokens, prefix_tokens, trained_grid, grid=grid, name=name)
    th, tw = trained_grid
    if jnp.shape(table) != (prefix_tokens + th * tw, dim):
        raise ValueError(f"x: expected width {jnp.shape(table)[-1]} (the {name}'s), found shape {jnp.shape(x)}")
    positions = jnp.asarray(table)
    if (gh, gw) != (th, tw):
        if not interpolate:
            raise PositionLimitError(
                f"{describe_grid(name, (th, tw), prefix_tokens)}; "
                f"asked for a {gh} x {gw} grid ({tokens} positions): pass interpolate=True to resize it (fp.resize_grid)"
            )
        resized = resize_patch_grid(
            jnp.reshape(positions[prefix_tokens:], (th, tw, dim)), (gh, gw), convention=convention
        )
        positions = jnp.concatenate([positions[:prefix_tokens], jnp.reshape(resized, (gh * gw, dim))], axis=0)
    return x + positions.astype(jnp.result_type(x, positions))
