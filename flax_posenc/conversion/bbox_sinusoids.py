"""Relative bounding-box sinusoids of BROS as a mechanism, numpy only.

BROS (``models/bros/modeling_bros.py`` of the pinned transformers, 5.24.0) adds to the attention
score of tokens ``i`` and ``j`` a projection of sinusoids of the *differences of their boxes*:
each box is 8 coordinates (4 corners; a 4-coordinate box becomes ``[x0, y0, x1, y0, x1, y1, x0,
y1]``), scaled by ``bbox_scale`` (100); ``BrosBboxEmbeddings`` forms ``b_j - b_i`` for every pair
and ``BrosPositionalEmbedding2D`` encodes each coordinate ``c`` of it as ``[sin(c w) | cos(c w)]``
(``w_k = 10000^(-2k / d1)``, ``d1 = dim_bbox_sinusoid_emb_1d = hidden_size / 4 / dim_bbox``; x
coordinates by ``x_pos_emb``, y by ``y_pos_emb``, the same frequencies, stored as persistent
``inv_freq`` buffers), concatenated over the 8 coordinates, then ``bbox_projection`` (learned).
Nothing is looked up: no coordinate limit (``limit`` is ``None``). BROS's 1-D token positions are a
``learned`` row (``bros_1d``).

>>> bbox_sinusoids(np.array([[0.0, 1.0]]), 4)[0].round(4).tolist()
[0.0, 0.0, 1.0, 1.0, 0.8415, 0.01, 0.5403, 1.0]
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

import numpy as np

from flax_posenc.conversion.checkpoint import open_checkpoint
from flax_posenc.conversion.readers import fail
from flax_posenc.conversion.table import TensorRecord

__all__ = [
    "BBOX_SINUSOID_FAMILIES",
    "BboxSinusoidFamily",
    "BboxSinusoidSource",
    "bbox_sinusoids",
    "read_bbox_sinusoids",
]


def bbox_sinusoids(differences: np.ndarray, dim: int, base: float = 10000.0) -> np.ndarray:
    """``differences.shape[:-1] + (coords * dim,)`` float64: for each coordinate ``c`` (last axis),
    ``[sin(c w_0) .. sin(c w_{dim/2-1}) | cos(c w_0) .. cos(c w_{dim/2-1})]``, ``w_k = base^(-2k/dim)``,
    concatenated over the coordinates. Any real differences (no limit).

    Raises:
      ValueError: ``dim`` not a positive even integer.
    """
    if isinstance(dim, bool) or not isinstance(dim, (int, np.integer)) or dim < 2 or dim % 2:
        raise ValueError(f"dim: expected a positive even integer, found {dim!r}")
    inv = np.power(float(base), -np.arange(0, dim, 2, dtype=np.float64) / dim)
    angles = np.asarray(differences, np.float64)[..., None] * inv  # (..., coords, dim / 2)
    out = np.concatenate([np.sin(angles), np.cos(angles)], axis=-1)  # (..., coords, dim)
    return out.reshape(*out.shape[:-2], -1)


@dataclasses.dataclass(frozen=True)
class BboxSinusoidFamily:
    """One family's relative box sinusoids, as data (a row of :data:`BBOX_SINUSOID_FAMILIES`).

    Attributes:
      name, model_types: our name and the ``model_type`` values that mean it.
      module: the box-embedding module's path (suffix; a task head's prefix may precede it).
      dim_field, coords_field, scale_field: the config fields of the per-coordinate width, the
        coordinates per box and the scale applied to the boxes.
    """

    name: str
    model_types: tuple[str, ...]
    module: str = "bbox_embeddings"
    dim_field: str = "dim_bbox_sinusoid_emb_1d"
    coords_field: str = "dim_bbox"
    scale_field: str = "bbox_scale"
    tower: str = "text"


BBOX_SINUSOID_FAMILIES: Mapping[str, BboxSinusoidFamily] = MappingProxyType(
    {row.name: row for row in (BboxSinusoidFamily("bros_bbox", ("bros",)),)}
)


@dataclasses.dataclass(frozen=True)
class BboxSinusoidSource(TensorRecord):
    """BROS's relative box sinusoids as a :class:`~flax_posenc.conversion.SourceRecord`: no limit.

    Attributes:
      source, model_type, family, key: the SOURCE, its ``model_type``, the row, the projection's tensor.
      dim: the width per coordinate; coords: coordinates per box (8); scale: ``bbox_scale``.
      buffers: the stored ``inv_freq`` buffers (checked equal to the formula in float32).
    """

    source: str
    model_type: str
    family: str
    key: str
    dim: int
    coords: int
    scale: float
    buffers: tuple[str, ...] = ()

    scheme = "bbox_sinusoid"
    unit = "coordinates"

    def encode(self, boxes: np.ndarray) -> np.ndarray:
        """``(n, coords)`` boxes (unscaled, as given to the model) -> ``(n, n, coords * dim)`` float64
        sinusoids of ``scale * (b_j - b_i)`` at ``[i, j]``."""
        b = np.asarray(boxes, np.float64) * self.scale
        return bbox_sinusoids(b[None, :, :] - b[:, None, :], self.dim)

    def describe_limit(self) -> str:
        return (
            f"{self.family} relative box sinusoids ({self.key}) of {self.source} have no limit (relative: sinusoids "
            f"of {self.scale:g} x the differences of every pair of boxes, any coordinates)"
        )

    def check_bbox_max(self, coordinate: int) -> tuple[bool, str]:
        """Any coordinate fits (``check --bbox-max``)."""
        return True, f"ok: coordinates up to {coordinate} fit; {self.describe_limit()}"

    def details(self) -> dict[str, Any]:
        return {
            "unit": self.unit,
            "dim": self.dim,
            "coords": self.coords,
            "scale": self.scale,
            "buffers": list(self.buffers),
        }

    def lines(self) -> list[str]:
        return [
            f"key:         {self.key}",
            f"scheme:      [sin | cos] of {self.scale:g} x (b_j - b_i), {self.coords} coordinates x {self.dim}, "
            "projected into every attention score",
        ]


def _int(config: Mapping[str, Any], field: str, where: object) -> int:
    value = config.get(field)
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 1 << 16:
        raise fail(where, f"{field} as an integer in 1..65536", repr(value)[:80])
    return value


def read_bbox_sinusoids(
    row: BboxSinusoidFamily, config: Mapping[str, Any], source: str | os.PathLike, config_path: str | os.PathLike
) -> list[BboxSinusoidSource]:
    """The :class:`BboxSinusoidSource` of SOURCE (``[]``: no box projection stored).

    Raises:
      CheckpointError: a field missing or out of range (the width odd), the projection's shape
        disagreeing with the config, or a stored ``inv_freq`` that is not ``10000^(-2k/d)`` (one line).
    """
    where = config_path
    dim = _int(config, row.dim_field, where)
    if dim % 2:
        raise fail(where, f"an even {row.dim_field} (sin/cos halves)", str(dim))
    coords = _int(config, row.coords_field, where)
    scale = config.get(row.scale_field, 100.0)
    if isinstance(scale, bool) or not isinstance(scale, (int, float)) or not 0 < scale < 1e9:
        raise fail(where, f"{row.scale_field} a positive number", repr(scale)[:80])
    with open_checkpoint(source) as ckpt:
        suffix = f"{row.module}.bbox_projection.weight"
        keys = [n for n in ckpt.names if n == suffix or n.endswith("." + suffix)]
        if not keys:
            return []
        _, shape = ckpt.info(keys[0])
        if len(shape) != 2 or shape[1] != coords * dim:
            raise fail(
                f"{ckpt.weights_path}: {keys[0]}",
                f"(projection, {coords * dim}) ({row.coords_field} {coords} x {row.dim_field} {dim})",
                str(tuple(shape)),
            )
        base = keys[0][: -len("bbox_projection.weight")]
        buffers = tuple(n for n in (f"{base}bbox_sinusoid_emb.{a}_pos_emb.inv_freq" for a in "xy") if n in ckpt)
        expected = np.power(10000.0, -np.arange(0, dim, 2) / dim).astype(np.float32)
        for name in buffers:
            stored = np.asarray(ckpt.tensor(name))
            if stored.shape != expected.shape or not np.allclose(stored, expected, rtol=2**-22, atol=0):
                raise fail(
                    f"{ckpt.weights_path}: {name}",
                    f"10000^(-2k/{dim}) for k < {dim // 2} (BROS's fixed frequencies)",
                    np.array2string(stored.ravel()[:4], precision=6),
                )
    return [
        BboxSinusoidSource(
            os.fspath(source), str(config.get("model_type")), row.name, keys[0], dim, coords, float(scale), buffers
        )
    ]
