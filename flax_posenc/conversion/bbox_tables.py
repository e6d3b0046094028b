"""2-D bounding-box position tables of document models, as data (numpy only).

LayoutLM, LayoutLMv3 and LiLT embed each token's box ``(x0, y0, x1, y1)`` with four learned
tables of ``max_2d_position_embeddings`` rows (coordinates): ``x`` (read at ``x0`` and ``x1``),
``y`` (at ``y0`` and ``y1``), ``h`` (at ``y1 - y0``) and ``w`` (at ``x1 - x0``). Each row of
:data:`BBOX_FAMILIES` names its tensors (key suffixes, found under any prefix), whether the six
vectors are summed (LayoutLM) or concatenated (LayoutLMv3, LiLT), the config fields of the widths,
and the config flags of mechanisms beside them that this library does not read (LayoutLMv3's 2-D
relative attention biases and its visual patch embeddings): a checkpoint with one of them set is
refused in one line naming the flag, never read in part.

The 1-D position tables beside them are rows of the ``learned`` kind
(:data:`~flax_posenc.conversion.position_tables.TABLE_FAMILIES`: ``layoutlm``, ``layoutlmv3``,
``lilt_text``, ``lilt_layout``). :class:`BboxTableSource` is the record (``unit =
"coordinates"``: the token checks leave it out; ``check_bbox_max(n)`` asks it, and ``flax-posenc
check --bbox-max N``).

>>> BBOX_FAMILIES["layoutlm"].combine, BBOX_FAMILIES["lilt"].combine
('sum', 'concat')
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

import numpy as np

from flax_posenc.bbox_config import BboxSpec, check_bbox_max
from flax_posenc.conversion.readers import fail, read_float
from flax_posenc.conversion.sources import open_checkpoint
from flax_posenc.limits import describe_limit, verdict_line

__all__ = ["BBOX_FAMILIES", "BboxFamily", "BboxTableSource", "load_bbox_tables", "read_bbox_tables"]

#: The four tables, in the order a record holds them.
TABLE_NAMES = ("x", "y", "h", "w")


@dataclasses.dataclass(frozen=True)
class BboxFamily:
    """One model's bounding-box tables (a row of :data:`BBOX_FAMILIES`).

    Attributes:
      name, model_types: as every registry row.
      prefix: the module holding the tables (``"embeddings"``; LiLT: ``"layout_embeddings"``);
        the tensors are ``<prefix>.{x,y,h,w}_position_embeddings.weight`` under any outer prefix.
      combine: ``"sum"`` or ``"concat"`` (:class:`~flax_posenc.bbox_config.BboxSpec`).
      rows_field: the config field of the coordinates each table holds.
      shape_clip: heights and widths clipped to ``0 .. shape_clip`` by the model (LayoutLMv3: 1023).
      unread_flags: ``(config field, default, what it adds)``: a checkpoint whose field is true
        (or absent with a true default) carries a mechanism not read here, and is refused.
    """

    name: str
    model_types: tuple[str, ...]
    prefix: str = "embeddings"
    combine: str = "sum"
    rows_field: str = "max_2d_position_embeddings"
    shape_clip: int | None = None
    unread_flags: tuple[tuple[str, bool, str], ...] = ()

    @property
    def key_suffixes(self) -> tuple[str, ...]:
        return tuple(f"{self.prefix}.{t}_position_embeddings.weight" for t in TABLE_NAMES)


BBOX_FAMILIES: Mapping[str, BboxFamily] = MappingProxyType(
    {
        row.name: row
        for row in (
            BboxFamily("layoutlm", ("layoutlm",)),
            BboxFamily(
                "layoutlmv3",
                ("layoutlmv3",),
                combine="concat",
                shape_clip=1023,
                unread_flags=(
                    # its 1-D and 2-D relative attention biases: a layout_relative_bias row (issue 36)
                    ("visual_embed", True, "visual patch embeddings with their own position grid (pos_embed)"),
                ),
            ),
            BboxFamily("lilt", ("lilt",), prefix="layout_embeddings", combine="concat"),
        )
    }
)


@dataclasses.dataclass(frozen=True)
class BboxTableSource:
    """The bounding-box tables of a checkpoint: a :class:`~flax_posenc.conversion.SourceRecord`
    whose limit counts coordinates (``unit``), not tokens.

    Attributes:
      source: the SOURCE as given.
      model_type: its ``config.json`` ``model_type``.
      family: the :data:`BBOX_FAMILIES` row.
      keys: the four tensors' names (``x``, ``y``, ``h``, ``w``).
      spec: rows, widths, sum or concat, clip (:class:`~flax_posenc.bbox_config.BboxSpec`).
      weights: the four tables, float (``(rows, coord_dim)`` twice, ``(rows, shape_dim)`` twice).
    """

    source: str
    model_type: str
    family: str
    keys: tuple[str, str, str, str]
    spec: BboxSpec
    weights: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] = dataclasses.field(repr=False)

    scheme = "bbox_2d"
    unit = "coordinates"

    @property
    def key(self) -> str:
        return self.keys[0]

    @property
    def limit(self) -> int:
        """Coordinates each table holds: every coordinate, height and width lies in ``0 .. limit - 1``."""
        return self.spec.rows

    def describe_limit(self) -> str:
        name = f"{self.model_type} bbox tables ({self.keys[0].rsplit('.', 2)[0]}.*_position_embeddings)"
        return describe_limit(name, self.spec.rows, unit="coordinate").replace(" holds ", " hold ", 1)

    def check_length(self, length: int) -> tuple[bool, str]:
        """Tokens: the boxes do not limit them (the 1-D table beside them does)."""
        return verdict_line(length, None, f"{self.model_type} bbox tables limit coordinates, not tokens")

    def check_bbox_max(self, largest: int) -> tuple[bool, str]:
        """``(fits, line)`` for boxes whose largest coordinate is ``largest``."""
        name = f"{self.model_type} bbox tables ({self.keys[0].rsplit('.', 2)[0]}.*_position_embeddings)"
        return check_bbox_max(largest, self.spec.rows, name)

    def to_dict(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "model_type": self.model_type,
            "scheme": self.scheme,
            "family": self.family,
            "keys": list(self.keys),
            "rows": self.spec.rows,
            "coord_dim": self.spec.coord_dim,
            "shape_dim": self.spec.shape_dim,
            "combine": self.spec.combine,
            "shape_clip": self.spec.shape_clip,
            "unit": self.unit,
            "limit": self.limit,
        }

    def __str__(self) -> str:
        s = self.spec
        return (
            f"source:      {self.source}\n"
            f"scheme:      bbox_2d: x, y, h, w tables ({s.combine}; x/y {s.coord_dim} wide, h/w {s.shape_dim})\n"
            f"limit:       {self.describe_limit()}"
        )


def _flag(config: Mapping[str, Any], field: str, default: bool, where: object) -> bool:
    value = config.get(field, default)
    if not isinstance(value, bool):
        raise fail(where, f"{field} as true or false", repr(value)[:80])
    return value


def read_bbox_tables(source: str | os.PathLike, family: str, config: Mapping[str, Any]) -> BboxTableSource:
    """The :data:`BBOX_FAMILIES` ``family`` tables of SOURCE (only those four tensors are read).

    Raises:
      CheckpointError: a flag of a mechanism not read is set (one line naming it); a table missing
        or found twice, not a finite 2-D float table, its rows not ``max_2d_position_embeddings``,
        ``x``/``y`` or ``h``/``w`` widths that differ, or summed widths that differ (one line
        naming the file).
    """
    row = BBOX_FAMILIES[family]
    ckpt = open_checkpoint(source)
    where = ckpt.config_path or ckpt.weights_path
    for field, default, what in row.unread_flags:
        if _flag(config, field, default, where):
            raise fail(where, f"{field} false ({what} are not read)", f"{field} {str(True).lower()}")
    all_keys = list(ckpt.reader.keys())
    keys, tables = [], []
    for suffix in row.key_suffixes:
        found = sorted(k for k in all_keys if k == suffix or k.endswith("." + suffix))
        if len(found) != 1:
            raise fail(ckpt.weights_path, f"one {row.name} bbox table *{suffix}", ", ".join(found[:4]) or "none")
        keys.append(found[0])
        tables.append(read_float(ckpt.reader, found[0], ndim=2, what=f"{row.name} bbox table"))
    rows = config.get(row.rows_field)
    if isinstance(rows, bool) or not isinstance(rows, int) or rows < 1:
        raise fail(where, f"{row.rows_field} as a positive integer", repr(rows)[:80])
    for key, t in zip(keys, tables, strict=True):
        if t.shape[0] != rows:
            raise fail(f"{ckpt.reader.file_of(key)}:{key}", f"{rows} rows ({row.rows_field})", f"{t.shape[0]} rows")
    (x, y, h, w), dims = tables, [t.shape[1] for t in tables]
    if dims[0] != dims[1] or dims[2] != dims[3]:
        raise fail(ckpt.weights_path, "x and y tables of one width, h and w of one width", f"widths {dims}")
    try:
        spec = BboxSpec(rows, dims[0], dims[2], row.combine, row.shape_clip, f"{row.name} bbox tables")  # type: ignore[arg-type]
    except ValueError as e:
        raise fail(ckpt.weights_path, "tables a summed box can add", str(e)) from None
    return BboxTableSource(
        os.fspath(source),
        str(config.get("model_type")),
        row.name,
        (keys[0], keys[1], keys[2], keys[3]),
        spec,
        (x, y, h, w),
    )


def load_bbox_tables(source: str | os.PathLike) -> BboxTableSource:
    """The bounding-box tables of a document checkpoint (its ``model_type`` picks the row).

    >>> load_bbox_tables("sinusoidal:8:8")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    flax_posenc.errors.CheckpointError: sinusoidal:8:8: expected a checkpoint of a model type with bounding-box tables (layoutlm, layoutlmv3, lilt), found ...

    Raises:
      CheckpointError: the model type has no bounding-box tables, or as :func:`read_bbox_tables`.
    """
    text = os.fspath(source)
    families = ", ".join(t for row in BBOX_FAMILIES.values() for t in row.model_types)
    expected = f"a checkpoint of a model type with bounding-box tables ({families})"
    if text.startswith("sinusoidal:"):
        raise fail(text, expected, "a computed sinusoid")
    ckpt = open_checkpoint(source)
    model_type = ckpt.config.get("model_type")
    for row in BBOX_FAMILIES.values():
        if model_type in row.model_types:
            return read_bbox_tables(source, row.name, ckpt.config)
    raise fail(ckpt.config_path or text, expected, f"model_type {model_type!r}")
