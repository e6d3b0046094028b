"""DeBERTa's disentangled relative positions from a ``config.json``, as a mechanism (numpy only).

DeBERTa and DeBERTa-v2 with ``relative_attention: true`` attend through relative positions
``q - k``, log-bucketed in v2 (``position_buckets``, ``max_relative_positions``; see
:class:`~flax_posenc.deberta_config.DebertaRelativeConfig`). The relative part has no hard limit
(far distances share the last bucket, or are clamped); the absolute table that
``position_biased_input`` adds is a learned table read on its own
(:data:`~flax_posenc.conversion.position_tables.TABLE_FAMILIES`).

>>> rec = DebertaRelative("demo", "deberta-v2", DebertaRelativeConfig(256, 512))
>>> rec.limit, rec.config.rows
(None, 512)
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Any

from flax_posenc.conversion.readers import fail
from flax_posenc.deberta_config import DebertaRelativeConfig
from flax_posenc.limits import NoLimit

__all__ = ["DEBERTA_FAMILIES", "DebertaFamily", "DebertaRelative", "deberta_relative_from_dict"]


@dataclasses.dataclass(frozen=True)
class DebertaFamily:
    """The model types whose relative positions are DeBERTa's (a row of :data:`DEBERTA_FAMILIES`)."""

    name: str
    model_types: tuple[str, ...]


DEBERTA_FAMILIES: Mapping[str, DebertaFamily] = MappingProxyType(
    # SEW-D: DeBERTa-v2's attention over the frames (its convolutional positions: conv_positions.py)
    {"deberta": DebertaFamily("deberta", ("deberta", "deberta-v2", "sew-d"))}
)


@dataclasses.dataclass(frozen=True)
class DebertaRelative(NoLimit):
    """DeBERTa relative positions of one checkpoint: a :class:`~flax_posenc.conversion.SourceRecord`
    with no limit (every distance has a relative position; far ones share the last bucket)."""

    source: str
    model_type: str
    config: DebertaRelativeConfig

    scheme = "deberta_relative"
    key = None
    family = "deberta"

    def describe_limit(self) -> str:
        c = self.config
        buckets = f"{c.span} log buckets each side" if c.log_buckets else f"distances clamped at {c.span}"
        return f"{self.model_type} DeBERTa relative positions of {self.source} have no limit ({buckets})"

    def to_dict(self) -> dict[str, Any]:
        return {"source": self.source, "model_type": self.model_type, "scheme": self.scheme, **self.config.to_dict()}

    def __str__(self) -> str:
        return f"scheme:      {self.config.describe()}\nlimit:       {self.describe_limit()}"


def deberta_relative_from_dict(config: Mapping[str, Any], source: str, path: Path) -> list[DebertaRelative]:
    """``[DebertaRelative]`` when the config has ``relative_attention: true``, else ``[]``.

    Raises:
      CheckpointError: a field :class:`~flax_posenc.deberta_config.DebertaRelativeConfig` rejects.
    """
    flag = config.get("relative_attention", False)
    if not isinstance(flag, bool):
        raise fail(path, "relative_attention as true or false", repr(flag)[:80])
    if not flag:
        return []
    try:
        relative = DebertaRelativeConfig.from_config_dict(config)
    except (ValueError, TypeError) as e:
        raise fail(path, "valid DeBERTa relative position fields", str(e)[:200]) from None
    return [DebertaRelative(source, str(config.get("model_type")), relative)]
