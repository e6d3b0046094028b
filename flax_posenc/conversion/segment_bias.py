"""CPM-Ant's segment relative position bias (kind ``segment_bias``), numpy only.

CPM-Ant (transformers ``models/cpmant/modeling_cpmant.py``, ``CpmAntSegmentPositionEmbedding``)
biases every attention score by one learned row per head of ``position_bias.relative_attention_bias``
(``segment_types ** 2 + position_bias_num_buckets`` rows): a query and a key in the *same* segment
take T5's bidirectional bucket of ``key - query`` (``position_bias_num_buckets`` buckets,
``position_bias_max_distance``: :class:`~flax_posenc.relative_bias_config.BucketConfig`); in
different segments, row ``num_buckets + segment_q * segment_types + segment_k`` whatever their
distance. The model puts its ``prompt_length`` prompt tokens in segment 0 and the text's tokens in
segment 2 (padding id 0 in segment 0). Nothing limits the length: distances past
``position_bias_max_distance`` share the last bucket.

>>> import numpy as np
>>> rec = SegmentBias("demo", "cpmant", np.arange(8.0)[:, None] * np.ones((1, 2)), 4, 8, 2)
>>> rec.bias(np.array([0, 0, 1]))[0].tolist()
[[0.0, 3.0, 5.0], [1.0, 0.0, 5.0], [6.0, 6.0, 0.0]]
"""

from __future__ import annotations

import dataclasses
import functools
import os
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

import numpy as np

from flax_posenc.conversion.readers import fail, read_float
from flax_posenc.conversion.sources import open_checkpoint
from flax_posenc.limits import NoLimit
from flax_posenc.relative_bias_config import BucketConfig

__all__ = ["SEGMENT_BIAS_FAMILIES", "SegmentBias", "SegmentBiasFamily", "read_segment_bias"]


@dataclasses.dataclass(frozen=True)
class SegmentBiasFamily:
    """A model family with a segment relative position bias (a row of :data:`SEGMENT_BIAS_FAMILIES`);
    ``defaults``: its config class's values of the fields read."""

    name: str
    model_types: tuple[str, ...]
    key: str = "position_bias.relative_attention_bias"
    defaults: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    tower: str = "text"

    @property
    def key_suffix(self) -> str:
        return self.key


SEGMENT_BIAS_FAMILIES: Mapping[str, SegmentBiasFamily] = MappingProxyType(
    {
        "cpmant": SegmentBiasFamily(
            "cpmant",
            ("cpmant",),
            defaults=MappingProxyType(
                {"position_bias_num_buckets": 512, "position_bias_max_distance": 2048, "segment_types": 32}
            ),
        )
    }
)


@dataclasses.dataclass(frozen=True)
class SegmentBias(NoLimit):
    """CPM-Ant's bias as a :class:`~flax_posenc.conversion.SourceRecord` (no limit).

    Attributes:
      source, model_type: as every record.
      table: ``(segment_types ** 2 + num_buckets, heads)`` float rows.
      num_buckets, max_distance: the in-segment buckets (T5's, bidirectional).
      segment_types: how many segments (the cross-segment rows follow the buckets).
    """

    source: str
    model_type: str
    table: np.ndarray = dataclasses.field(repr=False)
    num_buckets: int
    max_distance: int
    segment_types: int
    key: str = "position_bias.relative_attention_bias"
    family: str = "cpmant"

    scheme = "segment_bias"

    @functools.cached_property
    def buckets(self) -> BucketConfig:
        """The in-segment :class:`~flax_posenc.relative_bias_config.BucketConfig`."""
        return BucketConfig(self.num_buckets, self.max_distance, bidirectional=True)

    def describe_limit(self) -> str:
        return (
            f"{self.family} segment relative position bias ({self.key}, {self.num_buckets} buckets to distance "
            f"{self.max_distance}, {self.segment_types} segments) of {self.source} has no limit "
            f"(distances past {self.max_distance} share the last bucket)"
        )

    def bias(self, segments: Any) -> np.ndarray:
        """The ``(heads, n, n)`` bias of a sequence whose tokens are in ``segments`` (``(n,)`` integers
        in ``0 .. segment_types - 1``), at positions ``0 .. n - 1``.

        Raises:
          ValueError: ``segments`` not a 1-D integer array of values in range.
        """
        seg = np.asarray(segments)
        if seg.ndim != 1 or not np.issubdtype(seg.dtype, np.integer) or seg.size == 0:
            raise ValueError(f"segments: expected a non-empty 1-D integer array, got {seg.dtype} {seg.shape}")
        if seg.min() < 0 or seg.max() >= self.segment_types:
            raise ValueError(f"segments: expected values in 0..{self.segment_types - 1}, got {seg.min()}..{seg.max()}")
        n = seg.size
        positions = np.arange(n)
        same = self.buckets.buckets(positions[None, :] - positions[:, None])
        cross = self.num_buckets + seg[:, None] * self.segment_types + seg[None, :]
        rows = np.where(seg[:, None] == seg[None, :], same, cross)
        return np.moveaxis(self.table[rows], -1, 0)

    def to_dict(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "model_type": self.model_type,
            "scheme": self.scheme,
            "family": self.family,
            "key": self.key,
            "heads": int(self.table.shape[1]),
            "num_buckets": self.num_buckets,
            "max_distance": self.max_distance,
            "segment_types": self.segment_types,
            "limit": None,
        }

    def __str__(self) -> str:
        return "\n".join(
            [
                f"source:      {self.source}",
                f"family:      {self.family} ({self.model_type})",
                f"scheme:      segment relative position bias, {self.table.shape[1]} heads: T5 buckets within a "
                f"segment ({self.num_buckets}, max_distance {self.max_distance}), one row per segment pair across",
                f"limit:       {self.describe_limit()}",
            ]
        )


def _count(where: object, name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise fail(where, f"{name} as a positive integer", repr(value)[:80])
    return value


def read_segment_bias(source: str | os.PathLike, row: SegmentBiasFamily, config: Mapping[str, Any]) -> SegmentBias:
    """The :class:`SegmentBias` of a checkpoint of ``row``'s model types (one tensor read).

    Raises:
      CheckpointError: a config field of the wrong type, buckets T5's rule cannot take, or no (or
        several) tensors named ``row.key``, or one not shaped ``(segment_types ** 2 + num_buckets, heads)``
        (one line naming the file).
    """
    ckpt = open_checkpoint(source)
    where = ckpt.config_path or ckpt.weights_path
    get = lambda name: config.get(name, row.defaults.get(name))  # noqa: E731
    buckets = _count(where, "position_bias_num_buckets", get("position_bias_num_buckets"))
    distance = _count(where, "position_bias_max_distance", get("position_bias_max_distance"))
    segments = _count(where, "segment_types", get("segment_types"))
    try:
        BucketConfig(buckets, distance, bidirectional=True)
    except ValueError as e:
        raise fail(where, "position_bias_num_buckets and _max_distance T5's buckets take", str(e)[:160]) from None
    suffix = f"{row.key}"
    keys = sorted(k for k in ckpt.reader.keys() if k == suffix or k.endswith("." + suffix))
    if len(keys) != 1:
        raise fail(ckpt.weights_path, f"one {row.name} bias table *{suffix}", ", ".join(keys[:4]) or "none")
    table = read_float(ckpt.reader, keys[0], ndim=2, what=f"{row.name} segment position bias")
    if table.shape[0] != segments * segments + buckets:
        raise fail(
            ckpt.weights_path,
            f"{keys[0]} with segment_types ** 2 + position_bias_num_buckets = {segments * segments + buckets} rows",
            f"{table.shape[0]} rows",
        )
    return SegmentBias(
        os.fspath(source),
        str(config.get("model_type")),
        table,
        buckets,
        distance,
        segments,
        key=keys[0],
        family=row.name,
    )
