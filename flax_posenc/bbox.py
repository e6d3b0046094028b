"""2-D bounding-box position embeddings (LayoutLM, LayoutLMv3, LiLT): the functional core (jax).

:func:`bbox_embedding` maps boxes ``(..., 4)`` of integer coordinates ``(x0, y0, x1, y1)`` to the
vector each model adds for them: ``x[x0] + y[y0] + x[x1] + y[y1] + h[y1 - y0] + w[x1 - x0]``
(LayoutLM) or the concatenation of the same six rows (LayoutLMv2/v3, LiLT). Every row goes
through the library's one guard (:func:`flax_posenc.overflow.guard_indices`, as
:func:`flax_posenc.lookup.lookup_rows` does: the corners once, the heights and widths once): known boxes
are checked while tracing (:func:`flax_posenc.bbox_config.check_boxes`: a coordinate past the
tables, or ``x1 < x0`` / ``y1 < y0``, is one :class:`~flax_posenc.PositionLimitError` line);
traced boxes follow ``on_overflow`` (``"error"`` fails at run time under plain ``jax.jit``,
``"clip"``, ``"fill"``), as every other table does.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from flax_posenc.bbox_config import BboxSpec, check_boxes
from flax_posenc.lookup import take_rows
from flax_posenc.overflow import (
    Limit,
    OverflowPolicy,
    check_policy,
    fill_invalid,
    guard_indices,
    is_traced,
    keep_check,
)

__all__ = ["bbox_embedding"]


def bbox_embedding(
    bbox: jax.typing.ArrayLike,
    x_table: jax.typing.ArrayLike,
    y_table: jax.typing.ArrayLike,
    h_table: jax.typing.ArrayLike,
    w_table: jax.typing.ArrayLike,
    spec: BboxSpec,
    *,
    on_overflow: OverflowPolicy = "error",
) -> jax.Array:
    """The bounding-box embedding of every box, as the model computes it.

    Args:
      bbox: integer array ``(..., 4)``: ``(x0, y0, x1, y1)`` in ``0 .. spec.rows - 1``, with
        ``x0 <= x1`` and ``y0 <= y1`` (traced or not).
      x_table, y_table: ``(spec.rows, spec.coord_dim)``: rows read at ``x0``, ``x1`` and ``y0``, ``y1``
        (any array: a checkpoint's numpy tables are taken as they are).
      h_table, w_table: ``(spec.rows, spec.shape_dim)``: rows read at ``y1 - y0`` and ``x1 - x0``
        (after clipping to ``spec.shape_clip`` when it is set).
      spec: the tables' :class:`~flax_posenc.bbox_config.BboxSpec` (``combine``: sum or concat).
      on_overflow: policy for traced boxes past the tables (or with a negative height/width).

    Returns:
      ``bbox.shape[:-1] + (spec.out_dim,)``, in the tables' dtype.

    Raises:
      PositionLimitError: known boxes outside the tables, or with ``x1 < x0`` / ``y1 < y0``.
      JaxRuntimeError: (at run time) traced boxes past the tables with ``on_overflow="error"``.

    >>> import jax.numpy as jnp
    >>> spec = BboxSpec(rows=8, coord_dim=2, shape_dim=2, combine="sum")
    >>> t = jnp.arange(16.0).reshape(8, 2)
    >>> bbox_embedding(jnp.array([[1, 2, 3, 5]]), t, t, t, t, spec).tolist()  # rows 1, 2, 3, 5, 3, 2
    [[32.0, 38.0]]
    >>> bbox_embedding(jnp.array([[1, 2, 8, 5]]), t, t, t, t, spec)
    Traceback (most recent call last):
    ...
    flax_posenc.errors.PositionLimitError: bbox: bbox tables hold 8 coordinates (0..7); asked for x1 8 in box [1, 2, 8, 5], 1 past the end
    """
    check_policy(on_overflow)
    if not is_traced(bbox):
        check_boxes(bbox, spec)
    boxes = jnp.asarray(bbox)
    if boxes.ndim < 1 or boxes.shape[-1] != 4 or not jnp.issubdtype(boxes.dtype, jnp.integer):
        raise TypeError(f"bbox: expected an integer array of shape (..., 4), got {boxes.dtype} {boxes.shape}")
    x0, y0, x1, y1 = (boxes[..., i] for i in range(4))
    sides = jnp.stack([y1 - y0, x1 - x0], axis=-1)  # height, width
    if spec.shape_clip is not None:
        sides = jnp.minimum(sides, spec.shape_clip)
    # two guards (coordinates, then heights and widths) instead of one per table: half the
    # run-time checks to compile, the same rule and the same messages' words as every table
    corner_limit = Limit(spec.rows, name=f"{spec.name} (x0, y0, x1, y1)", unit="coordinate", argument="bbox")
    side_limit = Limit(spec.rows, name=f"{spec.name} (h at y1 - y0, w at x1 - x0)", unit="box side", argument="bbox")
    corners, corners_bad, corners_check = guard_indices(boxes, corner_limit, on_overflow)
    sides, sides_bad, sides_check = guard_indices(sides, side_limit, on_overflow)
    tables = [jnp.asarray(t) for t in (x_table, y_table, x_table, y_table)]
    parts = [take_rows(t, corners[..., i], in_bounds=True) for i, t in enumerate(tables)]
    parts += [take_rows(jnp.asarray(h_table), sides[..., 0], in_bounds=True)]
    parts += [take_rows(jnp.asarray(w_table), sides[..., 1], in_bounds=True)]
    if spec.combine == "concat":
        out = jnp.concatenate(parts, axis=-1)
    else:
        out = parts[0]
        for p in parts[1:]:  # the model's order of addition
            out = out + p
    out = keep_check(keep_check(out, corners_check), sides_check)
    bad = [b.any(axis=-1) for b in (corners_bad, sides_bad) if b is not None]
    return fill_invalid(out, bad[0] | bad[1] if len(bad) == 2 else (bad[0] if bad else None))
