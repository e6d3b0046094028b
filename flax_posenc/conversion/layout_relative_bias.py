"""LayoutLMv3's 1-D and 2-D relative attention biases as a mechanism, numpy only.

``models/layoutlmv3/modeling_layoutlmv3.py`` (pinned transformers 5.24.0), ``LayoutLMv3Encoder``:
with ``has_relative_attention_bias`` every layer's scores get ``rel_pos_bias.weight[:, bucket(p_j -
p_i)]`` (``Linear(rel_pos_bins, heads)``, T5's bidirectional buckets with ``rel_pos_bins`` buckets
and ``max_rel_pos``, over the position ids); with ``has_spatial_attention_bias`` (only beside the
1-D one) also ``rel_pos_x_bias.weight[:, bucket2(x0_j - x0_i)] + rel_pos_y_bias.weight[:,
bucket2(y1_j - y1_i)]`` (``rel_2d_pos_bins``, ``max_rel_2d_pos``; x0 = ``bbox[..., 0]``, y1 = ``bbox[...,
3]``). The distances are clamped to ``+-max_distance`` first, which changes no bucket. Every distance
and coordinate has a bucket: no limit (``limit`` is ``None``).

>>> LAYOUT_BIAS_FAMILIES["layoutlmv3_rel"].keys
('encoder.rel_pos_bias.weight', 'encoder.rel_pos_x_bias.weight', 'encoder.rel_pos_y_bias.weight')
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
from flax_posenc.relative_bias_config import BucketConfig

__all__ = ["LAYOUT_BIAS_FAMILIES", "LayoutBiasFamily", "LayoutBiasSource", "read_layout_bias"]


@dataclasses.dataclass(frozen=True)
class LayoutBiasFamily:
    """One family's relative attention biases over positions and boxes, as data.

    Attributes:
      name, model_types: our name and the ``model_type`` values that mean it.
      keys: the 1-D, x and y tables by suffix (``(heads, bins)``; a task head's prefix may precede them).
      flags: the config fields switching the 1-D and the 2-D biases on (default true).
      fields: ``(bins, max distance)`` config fields of the 1-D and of the 2-D buckets.
      coordinates: the box coordinates the x and y biases read (LayoutLMv3: x0 and y1).
    """

    name: str
    model_types: tuple[str, ...]
    keys: tuple[str, str, str] = (
        "encoder.rel_pos_bias.weight",
        "encoder.rel_pos_x_bias.weight",
        "encoder.rel_pos_y_bias.weight",
    )
    flags: tuple[str, str] = ("has_relative_attention_bias", "has_spatial_attention_bias")
    fields: tuple[tuple[str, str], tuple[str, str]] = (
        ("rel_pos_bins", "max_rel_pos"),
        ("rel_2d_pos_bins", "max_rel_2d_pos"),
    )
    coordinates: tuple[int, int] = (0, 3)
    tower: str = "text"


LAYOUT_BIAS_FAMILIES: Mapping[str, LayoutBiasFamily] = MappingProxyType(
    {row.name: row for row in (LayoutBiasFamily("layoutlmv3_rel", ("layoutlmv3",)),)}
)


@dataclasses.dataclass(frozen=True, eq=False)
class LayoutBiasSource(TensorRecord):
    """LayoutLMv3's relative attention biases as a :class:`~flax_posenc.conversion.SourceRecord`.

    Attributes:
      source, model_type, family: the SOURCE, its ``model_type`` and the row.
      key: the 1-D table's tensor; keys: the tensors read (1-D, then x and y when spatial).
      weights: the tables, ``(heads, bins)`` each, as stored (float32 or wider).
      buckets: the 1-D :class:`~flax_posenc.relative_bias_config.BucketConfig`; box_buckets: the 2-D
        one (``None``: no spatial bias); coordinates: the box coordinates x and y read.
    """

    source: str
    model_type: str
    family: str
    key: str
    keys: tuple[str, ...]
    weights: tuple[np.ndarray, ...]
    buckets: BucketConfig
    box_buckets: BucketConfig | None
    coordinates: tuple[int, int] = (0, 3)

    scheme = "layout_relative_bias"

    def bias(self, positions: np.ndarray, boxes: np.ndarray | None = None) -> np.ndarray:
        """``(heads, n, n)`` float64: what the encoder adds to every layer's scores for ``n`` tokens
        at integer ``positions`` ``(n,)`` with integer ``boxes`` ``(n, 4)`` (needed when spatial)."""
        p = np.asarray(positions, np.int64)
        out = np.asarray(self.weights[0], np.float64)[:, self.buckets.buckets(p[None, :] - p[:, None])]
        if self.box_buckets is not None:
            if boxes is None:
                raise ValueError("boxes: expected (n, 4) integer boxes for the spatial bias, found None")
            b = np.asarray(boxes, np.int64)
            for table, c in zip(self.weights[1:], self.coordinates, strict=True):
                d = b[None, :, c] - b[:, None, c]
                out = out + np.asarray(table, np.float64)[:, self.box_buckets.buckets(d)]
        return out

    def describe_limit(self) -> str:
        spatial = "" if self.box_buckets is None else " and box coordinates"
        far = f"distances >= {self.buckets.saturation_distance}"
        if self.box_buckets is not None:
            far += f", coordinate differences >= {self.box_buckets.saturation_distance}"
        return (
            f"{self.family} relative attention bias ({self.key}) of {self.source} has no limit (relative: every "
            f"distance of positions{spatial} has a bucket; {far} share the last one)"
        )

    def to_dict(self) -> dict[str, Any]:  # its tensors follow its key
        head = {"source": self.source, "model_type": self.model_type, "family": self.family, "key": self.key}
        return {**head, "keys": list(self.keys), "scheme": self.scheme, "limit": self.limit, **self.details()}

    def details(self) -> dict[str, Any]:
        return {
            "heads": int(self.weights[0].shape[0]),
            "buckets": self.buckets.to_dict(),
            "box_buckets": None if self.box_buckets is None else self.box_buckets.to_dict(),
        }

    def lines(self) -> list[str]:
        b = self.buckets
        lines = [
            f"key:         {', '.join(self.keys)}",
            f"scheme:      T5 buckets of position distances ({b.num_buckets}, max {b.max_distance})",
        ]
        if self.box_buckets is not None:
            lines.append(
                f"             + of box x0 and y1 differences ({self.box_buckets.num_buckets}, max "
                f"{self.box_buckets.max_distance})"
            )
        return lines


def _flag(config: Mapping[str, Any], field: str, where: object) -> bool:
    value = config.get(field, True)
    if not isinstance(value, bool):
        raise fail(where, f"{field} true or false", repr(value)[:80])
    return value


def _buckets(config: Mapping[str, Any], fields: tuple[str, str], where: object) -> BucketConfig:
    values: list[int] = []
    for f in fields:
        v = config.get(f)
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise fail(where, f"{f} as a positive integer", repr(v)[:80])
        values.append(v)
    try:
        return BucketConfig(values[0], values[1], bidirectional=True)
    except ValueError as e:
        raise fail(where, f"valid {fields[0]}/{fields[1]}", str(e)) from None


def read_layout_bias(
    row: LayoutBiasFamily, config: Mapping[str, Any], source: str | os.PathLike, config_path: str | os.PathLike
) -> list[LayoutBiasSource]:
    """The :class:`LayoutBiasSource` of SOURCE (``[]``: ``has_relative_attention_bias`` false).

    Raises:
      CheckpointError: a flag or bucket field of the wrong type, a table missing, of a shape other
        than ``(heads, bins)``, or not finite (one line naming the field or tensor).
    """
    where = config_path
    if not _flag(config, row.flags[0], where):
        return []
    spatial = _flag(config, row.flags[1], where)
    buckets = _buckets(config, row.fields[0], where)
    box = _buckets(config, row.fields[1], where) if spatial else None
    heads = config.get("num_attention_heads")
    wanted = row.keys if spatial else row.keys[:1]
    found, weights = [], []
    with open_checkpoint(source) as ckpt:
        for suffix, b in zip(wanted, (buckets, box, box), strict=False):
            names = [n for n in ckpt.names if n == suffix or n.endswith("." + suffix)]
            if not names:
                raise fail(
                    ckpt.weights_path, f"{suffix} ({row.flags[0 if b is buckets else 1]} is true)", "no such tensor"
                )
            w = np.asarray(ckpt.tensor(names[0]))
            assert b is not None
            if w.shape != (heads, b.num_buckets):
                raise fail(
                    f"{ckpt.weights_path}: {names[0]}",
                    f"shape ({heads}, {b.num_buckets}) (num_attention_heads, bins in config.json)",
                    str(w.shape),
                )
            if not np.all(np.isfinite(w)):
                raise fail(f"{ckpt.weights_path}: {names[0]}", "finite values", "NaN or Inf")
            found.append(names[0])
            weights.append(w)
    return [
        LayoutBiasSource(
            os.fspath(source),
            str(config.get("model_type")),
            row.name,
            found[0],
            tuple(found),
            tuple(weights),
            buckets,
            box,
            row.coordinates,
        )
    ]
