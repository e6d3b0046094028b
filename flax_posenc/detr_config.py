"""DETR-family 2-D sine position embeddings as data, and their float64 values (numpy only).

A DETR-style detector adds to each cell ``(i, j)`` of a ``H x W`` feature map a vector of
``2 * num_pos_feats`` channels: ``num_pos_feats`` for the row coordinate ``y`` and as many for
the column coordinate ``x``. Every variant in transformers 5.24.0 computes, per axis,

    c      = cumsum(mask) along the axis            (1, 2, ... over the valid cells; mask 1 = pixel)
    p      = c + offset                             (deformable DETR: offset -0.5; RT-DETR: -1)
    p      = p / (c_last + eps) * scale             when ``normalize`` (c_last: the count of valid
                                                    cells in that row/column; eps 1e-6, scale 2 pi)
    w_k    = temperature ** (-2k / num_pos_feats),  k = 0 .. num_pos_feats / 2 - 1
    theta  = p * w_k

and lays the ``sin``/``cos`` of ``theta`` out as

- ``"interleaved"`` (DETR, conditional/deformable/DAB-DETR, Table Transformer, Grounding DINO):
  ``[sin theta_0, cos theta_0, sin theta_1, cos theta_1, ...]``;
- ``"blocks"`` (RT-DETR's ``build_2d_sinusoidal_position_embedding``):
  ``[sin theta_0 .. sin theta_{n-1} | cos theta_0 .. cos theta_{n-1}]``,

``y`` first then ``x`` (``order="yx"``, every sine variant). DAB-DETR has two temperatures
(``temperature_height`` for ``y``, ``temperature_width`` for ``x``). The learned variant
(``position_embedding_type == "learned"``) holds two tables of 50 rows, columns then rows
(``[column_embeddings[x] | row_embeddings[y]]``): its limit is 50 feature-map cells per side;
the sine embedding has none (any feature map; a padded cell takes the count of the valid cells
before it).

Units: positions are feature-map cells (the backbone's output, e.g. stride 32 for DETR's last
ResNet stage), not image pixels; :func:`nearest_indices` is how transformers downsamples the
pixel mask to the feature map (``nn.functional.interpolate``, mode ``"nearest"``).

>>> cfg = DetrSineConfig(4, normalize=False)   # cell (0, 2): y = 1, x = 3; frequencies 1 and 0.01
>>> detr_sine_values(np.ones((1, 1, 3), bool), cfg)[0, :, 0, 2].round(4).tolist()
[0.8415, 0.5403, 0.01, 1.0, 0.1411, -0.99, 0.03, 0.9996]
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Literal

import numpy as np

from flax_posenc.limits import check_positions

__all__ = [
    "DETR_LAYOUTS",
    "DETR_ORDERS",
    "LEARNED_DETR_ROWS",
    "MAX_FEATURE_SIDE",
    "DetrSineConfig",
    "check_mask",
    "detr_learned_values",
    "detr_sine_frequencies",
    "detr_sine_values",
    "nearest_indices",
]

#: How the sin/cos of one axis are laid out.
DETR_LAYOUTS = ("interleaved", "blocks")
#: Which axis comes first in the channels.
DETR_ORDERS = ("yx", "xy")
#: Rows (and columns) of transformers' learned DETR position tables (``nn.Embedding(50, d)``).
LEARNED_DETR_ROWS = 50
#: The largest feature-map side the device path computes exactly (its counts are split into
#: 12-bit halves; transformers' own DETR feature maps are at most a few hundred cells).
MAX_FEATURE_SIDE = 1 << 12

DetrLayout = Literal["interleaved", "blocks"]
DetrOrder = Literal["yx", "xy"]


@dataclasses.dataclass(frozen=True)
class DetrSineConfig:
    """One variant of the DETR 2-D sine position embedding (see the module docstring).

    Attributes:
      num_pos_feats: channels per axis (transformers: ``d_model // 2``); even. The embedding has
        ``2 * num_pos_feats`` channels.
      temperature_height, temperature_width: the frequency base of ``y`` and ``x`` (10000 for
        every variant but DAB-DETR's configurable pair).
      normalize: divide each count by its row's/column's valid count (``+ eps``) and scale.
      scale: the normalized coordinates' range (``2 pi``).
      eps: added to the valid count before dividing (``1e-6``).
      offset: added to the count first (deformable DETR ``-0.5``; RT-DETR ``-1``: positions from 0).
      order: ``"yx"`` (every sine variant) or ``"xy"``.
      layout: ``"interleaved"`` or ``"blocks"``.

    Raises:
      ValueError: an odd or non-positive ``num_pos_feats``, a non-positive or non-finite
        temperature, scale or eps, a non-finite offset, an unknown order or layout (one line
        naming the field).

    >>> DetrSineConfig(128, offset=-0.5).channels
    256
    """

    num_pos_feats: int
    temperature_height: float = 10000.0
    temperature_width: float = 10000.0
    normalize: bool = True
    scale: float = 2 * math.pi
    eps: float = 1e-6
    offset: float = 0.0
    order: DetrOrder = "yx"
    layout: DetrLayout = "interleaved"

    def __post_init__(self):
        n = self.num_pos_feats
        if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n <= 0 or n % 2:
            raise ValueError(f"num_pos_feats: expected a positive even integer, got {n!r}")
        for name in ("temperature_height", "temperature_width", "scale", "eps"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < math.inf:
                raise ValueError(f"{name}: expected a positive finite number, got {value!r}")
        if isinstance(self.offset, bool) or not isinstance(self.offset, (int, float)) or not math.isfinite(self.offset):
            raise ValueError(f"offset: expected a finite number, got {self.offset!r}")
        if not isinstance(self.normalize, bool):
            raise ValueError(f"normalize: expected True or False, got {self.normalize!r}")
        if self.order not in DETR_ORDERS:
            raise ValueError(f"order: expected one of {', '.join(DETR_ORDERS)}, got {self.order!r}")
        if self.layout not in DETR_LAYOUTS:
            raise ValueError(f"layout: expected one of {', '.join(DETR_LAYOUTS)}, got {self.layout!r}")

    @property
    def channels(self) -> int:
        """``2 * num_pos_feats``: the embedding's width."""
        return 2 * int(self.num_pos_feats)


def detr_sine_frequencies(config: DetrSineConfig, axis: str) -> np.ndarray:
    """``(num_pos_feats / 2,)`` float64 angular frequencies ``w_k = T ** (-2k / num_pos_feats)``
    of one axis, times ``scale`` when ``normalize`` (radians per unit of the normalized count).

    >>> detr_sine_frequencies(DetrSineConfig(4, normalize=False), "x").tolist()
    [1.0, 0.01]
    """
    t = config.temperature_height if axis == "y" else config.temperature_width
    k = np.arange(config.num_pos_feats // 2, dtype=np.float64)
    w = float(t) ** (-2.0 * k / config.num_pos_feats)
    return w * float(config.scale) if config.normalize else w


def check_mask(mask: Any, argument: str = "mask") -> tuple[int, int, int]:
    """``(batch, height, width)`` of a pixel mask: a 3-D boolean or integer array (1 = pixel, 0 =
    padding), each side ``1 .. MAX_FEATURE_SIDE``.

    Raises:
      ValueError: another rank, a float or other dtype, an empty or too large side (one line
        naming the argument, what was expected and what was found).

    >>> check_mask(np.ones((2, 3, 4), bool))
    (2, 3, 4)
    >>> check_mask(np.ones((3, 4)))
    Traceback (most recent call last):
    ...
    ValueError: mask: expected a (batch, height, width) boolean or integer array, got shape (3, 4)
    """
    shape = tuple(getattr(mask, "shape", ()))
    dtype = getattr(mask, "dtype", None)
    if len(shape) != 3:
        raise ValueError(f"{argument}: expected a (batch, height, width) boolean or integer array, got shape {shape}")
    kind = np.dtype(dtype).kind if dtype is not None else "?"
    if dtype is None or kind not in "biu":
        raise ValueError(f"{argument}: expected a boolean or integer mask (1 = pixel, 0 = padding), got dtype {dtype}")
    _, h, w = shape
    for side, value in (("height", h), ("width", w)):
        if not 0 < value <= MAX_FEATURE_SIDE:
            raise ValueError(f"{argument}: expected a {side} of 1..{MAX_FEATURE_SIDE} feature-map cells, got {value}")
    return int(shape[0]), int(h), int(w)


def _angles_np(mask: np.ndarray, config: DetrSineConfig, axis: int) -> np.ndarray:
    """``(batch, H, W, n)`` float64 angles of one axis (1: y, 2: x)."""
    m = np.asarray(mask).astype(np.float64)
    c = np.cumsum(m, axis=axis) + float(config.offset)
    if config.normalize:
        last = np.cumsum(m, axis=axis).take([-1], axis=axis)
        c = c / (last + float(config.eps))
    return c[..., None] * detr_sine_frequencies(config, "y" if axis == 1 else "x")


def _lay_out(angles: np.ndarray, layout: str, sin, cos, stack) -> Any:
    if layout == "interleaved":
        both = stack([sin(angles), cos(angles)], -1)
        return both.reshape(*both.shape[:-2], -1)
    return stack([sin(angles), cos(angles)], -2).reshape(*angles.shape[:-1], -1)


def detr_sine_values(mask: Any, config: DetrSineConfig) -> np.ndarray:
    """The float64 embedding ``(batch, 2 * num_pos_feats, H, W)`` of a ``(batch, H, W)`` mask, on
    the host (the reference the device path is tested against).

    Raises:
      ValueError: a mask :func:`check_mask` refuses.
    """
    check_mask(mask)
    parts = {
        "y": _lay_out(_angles_np(mask, config, 1), config.layout, np.sin, np.cos, np.stack),
        "x": _lay_out(_angles_np(mask, config, 2), config.layout, np.sin, np.cos, np.stack),
    }
    out = np.concatenate([parts[config.order[0]], parts[config.order[1]]], axis=-1)
    return np.moveaxis(out, -1, 1)


def detr_learned_values(shape: tuple[int, int, int], rows: np.ndarray, columns: np.ndarray) -> np.ndarray:
    """The learned variant on the host: ``(batch, 2F, H, W)`` with ``[columns[x] | rows[y]]``.

    Raises:
      PositionLimitError: ``H`` past the rows or ``W`` past the columns of the tables.
    """
    batch, h, w = shape
    check_positions(0, h - 1, rows=rows.shape[0], name="learned DETR row table", unit="feature-map row")
    check_positions(0, w - 1, rows=columns.shape[0], name="learned DETR column table", unit="feature-map column")
    x = np.broadcast_to(columns[None, :w, :], (h, w, columns.shape[1]))
    y = np.broadcast_to(rows[:h, None, :], (h, w, rows.shape[1]))
    out = np.concatenate([x, y], -1).transpose(2, 0, 1)
    return np.broadcast_to(out[None], (batch, *out.shape)).copy()


def nearest_indices(size_in: int, size_out: int) -> np.ndarray:
    """The source index of each output index of ``torch.nn.functional.interpolate(mode="nearest")``
    along one axis: ``min(floor(i * float32(size_in / size_out)), size_in - 1)`` (its float32 scale;
    equal sizes copy), which is how every DETR model downsamples its pixel mask to a feature map.

    >>> nearest_indices(5, 2).tolist()
    [0, 2]
    """
    if size_in == size_out:
        return np.arange(size_out)
    scale = np.float32(size_in) / np.float32(size_out)
    src = np.floor(np.arange(size_out, dtype=np.float32) * scale).astype(np.int64)
    return np.minimum(src, size_in - 1)
