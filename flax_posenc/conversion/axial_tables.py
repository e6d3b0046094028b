"""Reformer's axial position embeddings as a position table (kind ``axial``), numpy only.

Reformer (transformers ``models/reformer/modeling_reformer.py``, ``AxialPositionEmbeddings``)
stores its positions as two factors instead of one table: ``weights.0`` of shape
``(H, 1, d0)`` and ``weights.1`` of shape ``(1, W, d1)`` (``axial_pos_shape`` = ``(H, W)``,
``axial_pos_embds_dim`` = ``(d0, d1)``, ``d0 + d1`` = ``hidden_size``). Position ``p`` gets
``concat(weights.0[p // W], weights.1[p % W])`` (in evaluation; training needs exactly ``H * W``
tokens). With ``axial_pos_embds`` false it holds one ordinary table,
``embeddings.position_embeddings.embedding.weight``.

The limit is what the model's forward accepts: ``ReformerModel`` pads an input longer than the
shortest attention chunk to a multiple of the chunk lengths' least common multiple (``lsh`` and
``local`` chunk lengths of ``attn_layers``), and the padded length must stay within both
``max_position_embeddings`` and ``H * W`` (the table's rows). So the usable lengths are
``1 .. limit`` with ``limit = M`` when ``M`` is a multiple of the chunk multiple ``c``, else
``max(c * (M // c), min(shortest chunk, M))``, ``M = min(max_position_embeddings, H * W)``.

>>> axial_limit(max_positions=64, rows=32, chunk_multiple=8, shortest_chunk=8)
32
>>> axial_limit(max_positions=50, rows=4096, chunk_multiple=8, shortest_chunk=8)
48
"""

from __future__ import annotations

import dataclasses
import math
import os
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

import numpy as np

from flax_posenc.conversion.learned_source import LearnedTableSource
from flax_posenc.conversion.readers import fail, read_float
from flax_posenc.conversion.sources import open_checkpoint
from flax_posenc.conversion.table import PositionTable

__all__ = ["AXIAL_FAMILIES", "AxialFamily", "AxialTableSource", "axial_limit", "axial_table", "read_axial_table"]


@dataclasses.dataclass(frozen=True)
class AxialFamily:
    """A model family with axial position embeddings (a row of :data:`AXIAL_FAMILIES`).

    Attributes:
      name, model_types: as every registry row.
      prefix: the position module's name (``embeddings.position_embeddings``) before
        ``weights.{axis}`` (axial) or ``embedding.weight`` (one table).
      tower: the tower it serves.
    """

    name: str
    model_types: tuple[str, ...]
    prefix: str = "embeddings.position_embeddings"
    tower: str = "text"

    @property
    def key_suffix(self) -> str:
        return f"{self.prefix}.weights.0"


AXIAL_FAMILIES: Mapping[str, AxialFamily] = MappingProxyType({"reformer": AxialFamily("reformer", ("reformer",))})

#: transformers' ``ReformerConfig`` defaults for the fields read here.
_DEFAULTS: Mapping[str, Any] = MappingProxyType(
    {
        "axial_pos_embds": True,
        "max_position_embeddings": 4096,
        "attn_layers": ["local", "lsh", "local", "lsh", "local", "lsh"],
        "lsh_attn_chunk_length": 64,
        "local_attn_chunk_length": 64,
    }
)


def axial_limit(*, max_positions: int, rows: int, chunk_multiple: int, shortest_chunk: int) -> int:
    """The longest input Reformer's forward accepts (see the module docstring); every shorter one
    is accepted too. Arguments are positive integers."""
    m = min(max_positions, rows)
    if m % chunk_multiple == 0:
        return m
    return max(chunk_multiple * (m // chunk_multiple), min(shortest_chunk, m))


def axial_table(first: np.ndarray, second: np.ndarray) -> np.ndarray:
    """The ``(H * W, d0 + d1)`` table of two axial factors ``(H, 1, d0)`` and ``(1, W, d1)``: row
    ``p`` is ``concat(first[p // W, 0], second[0, p % W])`` (exact: a copy, no arithmetic).

    >>> axial_table(np.array([[[1.0]], [[2.0]]]), np.array([[[10.0], [20.0], [30.0]]]))[:, :].tolist()
    [[1.0, 10.0], [1.0, 20.0], [1.0, 30.0], [2.0, 10.0], [2.0, 20.0], [2.0, 30.0]]
    """
    h, w = first.shape[0], second.shape[1]
    left = np.repeat(first[:, 0, :], w, axis=0)
    right = np.tile(second[0], (h, 1))
    return np.concatenate([left, right], axis=-1)


@dataclasses.dataclass(frozen=True)
class AxialTableSource(LearnedTableSource):
    """Reformer's positions as a :class:`~flax_posenc.conversion.SourceRecord`: ``table`` holds the
    rows of its usable positions (the axial factors expanded, cut at the limit), ``axial_shape`` the
    factors' ``(H, W)`` (``None``: one stored table), ``max_positions`` the config's
    ``max_position_embeddings``, ``chunk_multiple`` the length inputs are padded to a multiple of."""

    axial_shape: tuple[int, int] | None = None
    max_positions: int = 0
    chunk_multiple: int = 1

    @property
    def scheme(self) -> str:
        return "axial"

    @property
    def name(self) -> str:
        """``"reformer axial position table (axial_pos_shape 64 x 64, max_position_embeddings 4096,
        inputs padded to a multiple of 64) of SOURCE"``."""
        shape = (
            f"axial_pos_shape {self.axial_shape[0]} x {self.axial_shape[1]}"
            if self.axial_shape
            else f"{self.table.key}"
        )
        what = (
            f"{self.table.family} {'axial ' if self.axial_shape else ''}position table ({shape}, "
            f"max_position_embeddings {self.max_positions}, inputs padded to a multiple of {self.chunk_multiple})"
        )
        return f"{what} of {self.table.source}" if self.table.source else what

    def to_dict(self) -> dict[str, Any]:
        out = super().to_dict()
        out.update(
            axial_shape=list(self.axial_shape) if self.axial_shape else None,
            max_position_embeddings=self.max_positions,
            chunk_multiple=self.chunk_multiple,
        )
        return out


def _positive(where: object, name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise fail(where, f"{name} as a positive integer", repr(value)[:80])
    return value


def _chunks(config: Mapping[str, Any], where: object) -> tuple[int, int]:
    """``(least common multiple, shortest)`` of the chunk lengths of the attention types in ``attn_layers``."""
    layers = config.get("attn_layers", _DEFAULTS["attn_layers"])
    if not isinstance(layers, list) or not layers or not set(layers) <= {"lsh", "local"}:
        raise fail(where, "attn_layers as a non-empty list of 'lsh' and 'local'", repr(layers)[:80])
    lengths = [
        _positive(
            where,
            f"{kind}_attn_chunk_length",
            config.get(f"{kind}_attn_chunk_length", _DEFAULTS[f"{kind}_attn_chunk_length"]),
        )
        for kind in sorted(set(layers))
    ]
    return math.lcm(*lengths), min(lengths)


def read_axial_table(source: str | os.PathLike, row: AxialFamily, config: Mapping[str, Any]) -> AxialTableSource:
    """The :class:`AxialTableSource` of a Reformer checkpoint (its one or two position tensors).

    Raises:
      CheckpointError: the tensors are missing or not shaped as ``axial_pos_shape`` /
        ``axial_pos_embds_dim`` say (one line naming the file), a config field of the wrong type, or
        ``axial_pos_shape`` with other than two factors (transformers' evaluation reads two).
    """
    ckpt = open_checkpoint(source)
    where = ckpt.config_path or ckpt.weights_path
    mpe = _positive(
        where, "max_position_embeddings", config.get("max_position_embeddings", _DEFAULTS["max_position_embeddings"])
    )
    chunk_multiple, shortest = _chunks(config, where)
    keys = sorted(ckpt.reader.keys())

    def one(suffix: str) -> str:
        found = [k for k in keys if k == suffix or k.endswith("." + suffix)]
        if len(found) != 1:
            raise fail(ckpt.weights_path, f"one {row.name} position tensor *{suffix}", ", ".join(found[:4]) or "none")
        return found[0]

    shape: tuple[int, int] | None = None
    if config.get("axial_pos_embds", _DEFAULTS["axial_pos_embds"]):
        factors = config.get("axial_pos_shape", [64, 64])
        if not isinstance(factors, list) or len(factors) != 2:
            raise fail(where, "axial_pos_shape as two factors (H, W)", repr(factors)[:80])
        h, w = (_positive(where, "axial_pos_shape", f) for f in factors)
        first_key, second_key = one(f"{row.prefix}.weights.0"), one(f"{row.prefix}.weights.1")
        first = read_float(ckpt.reader, first_key, ndim=3, what="axial position factor 0")
        second = read_float(ckpt.reader, second_key, ndim=3, what="axial position factor 1")
        if first.shape[:2] != (h, 1) or second.shape[:2] != (1, w):
            raise fail(
                ckpt.weights_path,
                f"axial factors shaped ({h}, 1, d0) and (1, {w}, d1) (axial_pos_shape {[h, w]})",
                f"{tuple(first.shape)} and {tuple(second.shape)}",
            )
        weights, key, shape = axial_table(first, second), first_key, (h, w)
    else:
        key = one(f"{row.prefix}.embedding.weight")
        weights = read_float(ckpt.reader, key, ndim=2, what="position table")
    limit = axial_limit(
        max_positions=mpe, rows=weights.shape[0], chunk_multiple=chunk_multiple, shortest_chunk=shortest
    )
    table = PositionTable(weights[:limit], family=row.name, key=key, source=os.fspath(source), config=dict(config))
    return AxialTableSource(table, axial_shape=shape, max_positions=mpe, chunk_multiple=chunk_multiple)
