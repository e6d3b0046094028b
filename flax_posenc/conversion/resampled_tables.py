"""A learned position table resampled to every sequence length (kind ``resampled``), numpy only.

SAM3-Lite's text encoder (transformers ``models/sam3_lite_text/modeling_sam3_lite_text.py``,
``Sam3LiteTextTextPositionEmbedding``) stores ``max_position_embeddings`` rows
(``embeddings.position_embedding.position_embedding``, shape ``(1, 1, L, D)``) and gives a sequence
of ``n`` tokens the table resampled to ``n`` rows with ``F.interpolate(mode="bilinear",
align_corners=False)`` (the width ``D`` unchanged; ``n == L``: the table itself). Every length is
accepted: there is no limit, and the rows of a length differ from those of another.

:func:`linear_resize_matrix` is torch's ``upsample_bilinear2d`` weights for one axis in float64
(source ``max(L / n * (i + 0.5) - 0.5, 0)``, its floor and the next row, clamped at the end);
:meth:`ResampledTableSource.rows_for` applies it.

>>> linear_resize_matrix(2, 4).tolist()
[[1.0, 0.0], [0.75, 0.25], [0.25, 0.75], [0.0, 1.0]]
"""

from __future__ import annotations

import dataclasses
import functools
import os
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

import numpy as np

from flax_posenc.bounds import MAX_POSITIONS
from flax_posenc.conversion.readers import fail, read_float
from flax_posenc.conversion.sources import open_checkpoint
from flax_posenc.conversion.table import PositionTable, TableBacked
from flax_posenc.limits import NoLimit
from flax_posenc.table_properties import TableReport, summarize

__all__ = [
    "RESAMPLED_FAMILIES",
    "ResampledFamily",
    "ResampledTableSource",
    "linear_resize_matrix",
    "read_resampled_table",
]


@dataclasses.dataclass(frozen=True)
class ResampledFamily:
    """A model family whose position table is resampled to each length (a row of :data:`RESAMPLED_FAMILIES`).

    Attributes:
      name, model_types: as every registry row.
      position_key: the table's name (a ``(1, 1, L, D)`` or ``(L, D)`` tensor) without the checkpoint's prefix.
      tower: the tower it serves.
    """

    name: str
    model_types: tuple[str, ...]
    position_key: str = "embeddings.position_embedding.position_embedding"
    tower: str = "text"

    @property
    def key_suffix(self) -> str:
        return self.position_key


RESAMPLED_FAMILIES: Mapping[str, ResampledFamily] = MappingProxyType(
    {"sam3_lite_text": ResampledFamily("sam3_lite_text", ("sam3_lite_text_text_model",))}
)


def linear_resize_matrix(in_size: int, out_size: int) -> np.ndarray:
    """The ``(out_size, in_size)`` float64 weights of torch's bilinear resampling of one axis
    (``align_corners=False``): output ``i`` reads source ``s = max(in / out * (i + 0.5) - 0.5, 0)``,
    rows ``floor(s)`` and the next one (the last row repeated), weights ``1 - t`` and ``t``.

    Raises:
      ValueError: a size below 1.
    """
    if in_size < 1 or out_size < 1:
        raise ValueError(f"sizes: expected positive in_size and out_size, got {in_size} and {out_size}")
    rows = np.arange(out_size)
    src = np.maximum(in_size / out_size * (rows + 0.5) - 0.5, 0.0)
    i0 = np.minimum(np.floor(src).astype(np.int64), in_size - 1)
    i1 = np.minimum(i0 + 1, in_size - 1)
    t = src - i0
    m = np.zeros((out_size, in_size), np.float64)
    np.add.at(m, (rows, i0), 1.0 - t)
    np.add.at(m, (rows, i1), t)
    return m


@dataclasses.dataclass(frozen=True)
class ResampledTableSource(TableBacked, NoLimit):
    """A table resampled to every length, as a :class:`~flax_posenc.conversion.SourceRecord`: no
    limit (:class:`~flax_posenc.limits.NoLimit`); :meth:`rows_for` gives the rows of ``n`` tokens."""

    table: PositionTable

    scheme = "resampled"

    @property
    def name(self) -> str:
        what = f"{self.table.family} position table ({self.table.key}, {self.table.rows} rows)"
        return f"{what} of {self.table.source}" if self.table.source else what

    def describe_limit(self) -> str:
        return f"{self.name} has no limit (resampled bilinearly to every sequence length)"

    def rows_for(self, length: int) -> np.ndarray:
        """The ``(length, dim)`` float64 rows a sequence of ``length`` tokens gets (the table itself
        at its own length).

        Raises:
          ValueError: ``length`` not a positive integer up to the library's bound on positions.
        """
        if isinstance(length, bool) or not isinstance(length, (int, np.integer)) or not 1 <= length <= MAX_POSITIONS:
            raise ValueError(f"length: expected a positive integer up to {MAX_POSITIONS}, got {length!r}")
        weights = np.asarray(self.table.weights, np.float64)
        if length == self.table.rows:
            return weights
        return linear_resize_matrix(self.table.rows, int(length)) @ weights

    @functools.cached_property
    def report(self) -> TableReport:
        """The stored table's :class:`~flax_posenc.table_properties.TableReport`."""
        return summarize(self.table)

    def to_dict(self) -> dict[str, Any]:
        """The table's report less its row limit (the rows are resampled, every length is taken)."""
        report = {k: v for k, v in self.report.to_dict().items() if k not in _TABLE_LIMIT_FIELDS}
        return {
            **report,
            "scheme": self.scheme,
            "limit": None,
            "resampling": "bilinear, align_corners=False, to every length",
        }

    def __str__(self) -> str:
        lines = [line for line in str(self.report).splitlines() if not line.startswith("limit ")]
        return "\n".join([*lines, f"limit       {self.describe_limit()}"])


#: A table report's fields that state its rows as a limit (not one here).
_TABLE_LIMIT_FIELDS = ("num_positions", "max_length", "positions")


def read_resampled_table(
    source: str | os.PathLike, row: ResampledFamily, config: Mapping[str, Any]
) -> ResampledTableSource:
    """The :class:`ResampledTableSource` of a checkpoint of ``row``'s model types.

    Raises:
      CheckpointError: no (or several) tensors named ``row.position_key``, not a finite float table
        of ``(1, 1, L, D)`` or ``(L, D)``, or ``L`` unequal to the config's ``max_position_embeddings``
        (one line naming the file).
    """
    ckpt = open_checkpoint(source)
    suffix = row.position_key
    keys = sorted(k for k in ckpt.reader.keys() if k == suffix or k.endswith("." + suffix))
    if len(keys) != 1:
        raise fail(ckpt.weights_path, f"one {row.name} position table *{suffix}", ", ".join(keys[:4]) or "none")
    ndim = len(ckpt.reader.info(keys[0])[1])
    if ndim not in (2, 4):
        raise fail(ckpt.weights_path, f"{keys[0]} shaped (1, 1, rows, dim) or (rows, dim)", f"{ndim} dimensions")
    weights = read_float(ckpt.reader, keys[0], ndim=ndim, what=f"{row.name} position table")
    if weights.ndim == 4 and weights.shape[:2] == (1, 1):
        weights = weights[0, 0]
    if weights.ndim != 2:
        raise fail(ckpt.weights_path, f"{keys[0]} shaped (1, 1, rows, dim) or (rows, dim)", str(tuple(weights.shape)))
    declared = config.get("max_position_embeddings")
    if declared is not None and declared != weights.shape[0]:
        raise fail(
            ckpt.config_path or ckpt.weights_path,
            f"max_position_embeddings={weights.shape[0]} to match {keys[0]} ({weights.shape[0]} rows)",
            f"max_position_embeddings={declared!r}",
        )
    table = PositionTable(weights, family=row.name, key=keys[0], source=os.fspath(source), config=dict(config))
    return ResampledTableSource(table)
