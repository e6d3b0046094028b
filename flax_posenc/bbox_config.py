"""2-D bounding-box position tables (LayoutLM, LayoutLMv3, LiLT): the spec and host checks, numpy only.

Document models add, beside their 1-D position table, embeddings of each token's bounding box
``(x0, y0, x1, y1)`` in integer coordinates ``0 .. max_2d_position_embeddings - 1`` (1024 in
every released checkpoint: boxes are normalised to 0..1000). Four tables are read:

- ``x`` at ``x0`` (left) and at ``x1`` (right), ``y`` at ``y0`` (upper) and at ``y1`` (lower);
- ``h`` at the box's height ``y1 - y0`` and ``w`` at its width ``x1 - x0``.

LayoutLM **sums** the six ``hidden_size``-wide vectors (:data:`COMBINES` ``"sum"``); LayoutLMv2,
LayoutLMv3 and LiLT **concatenate** them ``[left | upper | right | lower | h | w]`` (``x``/``y``
of ``coordinate_size``, ``h``/``w`` of ``shape_size``; LiLT: ``hidden_size // 6`` each, then its
layout stream's own linear layer). LayoutLMv3 clips heights and widths to ``0 .. 1023``.

The limit counts coordinates: every coordinate, height and width must be a row of its table.
A box with ``x1 < x0`` or ``y1 < y0`` is bad input (a negative height or width: LayoutLM and
LiLT index past the front of the ``h``/``w`` tables, LayoutLMv3 silently clips it to 0);
:func:`check_boxes` refuses it in one line.

>>> spec = BboxSpec(rows=1024, coord_dim=8, shape_dim=8, combine="sum")
>>> spec.out_dim
8
>>> check_boxes([[0, 0, 10, 5]], spec)
>>> check_boxes([[4, 0, 3, 5]], spec)
Traceback (most recent call last):
...
flax_posenc.errors.PositionLimitError: bbox: expected x0 <= x1 and y0 <= y1 (a box's width and height index its w/h tables); asked for box [4, 0, 3, 5] (x1 3 < x0 4)
"""

from __future__ import annotations

import dataclasses
from typing import Any, Literal

import numpy as np

from flax_posenc.errors import PositionLimitError
from flax_posenc.limits import describe_limit

__all__ = ["COMBINES", "BboxCombine", "BboxSpec", "check_bbox_max", "check_boxes"]

#: How the six box vectors make one: summed (LayoutLM) or concatenated (LayoutLMv2/v3, LiLT).
BboxCombine = Literal["sum", "concat"]
COMBINES: tuple[str, ...] = ("sum", "concat")


@dataclasses.dataclass(frozen=True)
class BboxSpec:
    """The shape of a model's bounding-box tables.

    Attributes:
      rows: coordinates each table holds (``max_2d_position_embeddings``): every coordinate,
        height and width must lie in ``0 .. rows - 1``.
      coord_dim: width of the ``x`` and ``y`` tables.
      shape_dim: width of the ``h`` and ``w`` tables.
      combine: ``"sum"`` (all widths equal: ``out_dim = coord_dim``) or ``"concat"``
        (``out_dim = 4 * coord_dim + 2 * shape_dim``).
      shape_clip: heights and widths are clipped to ``0 .. shape_clip`` before the lookup
        (LayoutLMv3: 1023), or ``None``.
      name: how the tables are named in messages (``"layoutlm bbox tables"``).
    """

    rows: int
    coord_dim: int
    shape_dim: int
    combine: BboxCombine = "sum"
    shape_clip: int | None = None
    name: str = "bbox tables"

    def __post_init__(self):
        if self.combine not in COMBINES:
            raise ValueError(f"BboxSpec.combine: expected one of {COMBINES}, got {self.combine!r}")
        for field in ("rows", "coord_dim", "shape_dim"):
            value = getattr(self, field)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"BboxSpec.{field}: expected a positive integer, got {value!r}")
        if self.combine == "sum" and self.coord_dim != self.shape_dim:
            raise ValueError(
                f"BboxSpec: a summed box needs equal widths, got coord_dim {self.coord_dim} and shape_dim {self.shape_dim}"
            )

    @classmethod
    def from_arguments(
        cls,
        rows: int,
        coord_dim: int,
        *,
        shape_dim: int | None = None,
        combine: BboxCombine = "sum",
        shape_clip: int | None = None,
        position_name: str = "bbox tables",
    ) -> BboxSpec:
        """The spec of flat arguments (``shape_dim`` defaults to ``coord_dim``).

        >>> BboxSpec.from_arguments(1024, 128, combine="concat").out_dim
        768
        """
        width = coord_dim if shape_dim is None else shape_dim
        return cls(rows, coord_dim, width, combine, shape_clip, position_name)

    @property
    def table_shapes(self) -> dict[str, tuple[int, int]]:
        """The four tables' shapes by name: ``x``, ``y`` (``coord_dim`` wide), ``h``, ``w`` (``shape_dim``)."""
        c, s = (self.rows, self.coord_dim), (self.rows, self.shape_dim)
        return {"x": c, "y": c, "h": s, "w": s}

    @property
    def out_dim(self) -> int:
        """Width of one token's box embedding."""
        return self.coord_dim if self.combine == "sum" else 4 * self.coord_dim + 2 * self.shape_dim

    def describe(self) -> str:
        """``"<name> hold 1024 coordinates (0..1023)"``: the limit sentence (unit: coordinate)."""
        return describe_limit(self.name, self.rows, unit="coordinate").replace(" holds ", " hold ", 1)


def check_bbox_max(largest: int, rows: int, name: str) -> tuple[bool, str]:
    """The verdict on the largest coordinate a user will pass: ``(fits, sentence)``.

    >>> check_bbox_max(1000, 1024, "layoutlm bbox tables")[1]
    'ok: coordinate 1000 fits; layoutlm bbox tables hold 1024 coordinates (0..1023) (23 to spare)'
    >>> check_bbox_max(1024, 1024, "layoutlm bbox tables")[1]
    'layoutlm bbox tables hold 1024 coordinates (0..1023); asked for coordinate 1024, 1 past the end'
    """
    holds = describe_limit(name, rows, unit="coordinate").replace(" holds ", " hold ", 1)
    if 0 <= largest < rows:
        return True, f"ok: coordinate {largest} fits; {holds} ({rows - 1 - largest} to spare)"
    where = "below the first row" if largest < 0 else f"{largest - rows + 1} past the end"
    return False, f"{holds}; asked for coordinate {largest}, {where}"


def check_boxes(bbox: Any, spec: BboxSpec) -> None:
    """Refuse known boxes (any ``(..., 4)`` integer array) that the tables cannot embed.

    A coordinate outside ``0 .. rows - 1`` or a box with ``x1 < x0`` / ``y1 < y0`` raises
    :class:`~flax_posenc.PositionLimitError` in one line naming ``bbox``, the limit and the first
    box asked for. Heights and widths are coordinates too (rows of the ``h``/``w`` tables).

    Raises:
      PositionLimitError: as above.
      TypeError: ``bbox`` is not an integer array ending in 4.
    """
    boxes = np.asarray(bbox)
    if not np.issubdtype(boxes.dtype, np.integer) or boxes.ndim < 1 or boxes.shape[-1] != 4:
        raise TypeError(f"bbox: expected an integer array of shape (..., 4), got {boxes.dtype} {boxes.shape}")
    flat = boxes.reshape(-1, 4).astype(np.int64)
    if flat.size == 0:
        return
    outside = (flat < 0) | (flat >= spec.rows)
    if outside.any():
        i, j = np.argwhere(outside)[0]
        value = int(flat[i, j])
        where = "below the first row" if value < 0 else f"{value - spec.rows + 1} past the end"
        raise PositionLimitError(
            f"bbox: {spec.describe()}; asked for {'x0 y0 x1 y1'.split()[j]} {value} in box {flat[i].tolist()}, {where}"
        )
    for lo, hi, axis in ((0, 2, "x"), (1, 3, "y")):
        bad = flat[:, hi] < flat[:, lo]
        if bad.any():
            box = flat[np.argmax(bad)]
            raise PositionLimitError(
                "bbox: expected x0 <= x1 and y0 <= y1 (a box's width and height index its w/h tables); "
                f"asked for box {box.tolist()} ({axis}1 {int(box[hi])} < {axis}0 {int(box[lo])})"
            )
