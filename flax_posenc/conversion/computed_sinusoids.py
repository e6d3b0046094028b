"""Sinusoids a model computes instead of storing (fairseq / tensor2tensor style), numpy only.

M2M-100, NLLB-MoE, XGLM and FSMT build ``[sin | cos]`` tables at load time: ``d_model // 2``
frequencies ``exp(-i * ln(10000) / (d_model // 2 - 1))`` (the *endpoint* spacing, so the last
one is exactly ``1/10000``), positions counted from ``pad_token_id + 1`` (the padding row is
zero), and the table grows whenever a longer sequence comes: there is no limit. Nothing is read
from the weights; the ``config.json`` says it all.

>>> rec = ComputedSinusoid("demo", "m2m_100", dim=8, offset=2, max_position_embeddings=1024)
>>> rec.limit, rec.values([0]).shape
(None, (1, 8))
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Any

import numpy as np

from flax_posenc.conversion.readers import fail
from flax_posenc.limits import NoLimit
from flax_posenc.sinusoid_math import sinusoidal_values

__all__ = ["COMPUTED_SINUSOID_FAMILIES", "ComputedSinusoid", "ComputedSinusoidFamily", "computed_sinusoid_from_dict"]


@dataclasses.dataclass(frozen=True)
class ComputedSinusoidFamily:
    """A family whose positions are computed sinusoids (a row of :data:`COMPUTED_SINUSOID_FAMILIES`).

    Attributes:
      name, model_types: as every registry row.
      dim_field: the config field holding the width.
    """

    name: str
    model_types: tuple[str, ...]
    dim_field: str = "d_model"


COMPUTED_SINUSOID_FAMILIES: Mapping[str, ComputedSinusoidFamily] = MappingProxyType(
    {row.name: row for row in (ComputedSinusoidFamily("fairseq_sinusoid", ("m2m_100", "nllb-moe", "xglm", "fsmt")),)}
)


@dataclasses.dataclass(frozen=True)
class ComputedSinusoid(NoLimit):
    """A computed, growing sinusoid table: a :class:`~flax_posenc.conversion.SourceRecord` with no limit.

    Row ``r`` of the model's table is :meth:`values` ``(r)``; position ``p`` of a sequence uses row
    ``offset + p`` (``offset = pad_token_id + 1``); the padding row is zero.
    """

    source: str
    model_type: str
    dim: int
    offset: int
    max_position_embeddings: int | None = None

    scheme = "sinusoidal_computed"
    key = None
    family = "fairseq_sinusoid"

    def values(self, rows: Any) -> np.ndarray:
        """Float64 rows ``rows`` of the table (``[sin | cos]``, endpoint frequencies)."""
        return sinusoidal_values(np.asarray(rows), self.dim, layout="concatenated", endpoint=True)

    def describe_limit(self) -> str:
        return (
            f"{self.model_type} computed sinusoids of {self.source} have no limit (the table grows past "
            f"max_position_embeddings {self.max_position_embeddings} on demand)"
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "model_type": self.model_type,
            "scheme": self.scheme,
            "dim": self.dim,
            "offset": self.offset,
            "layout": "concatenated",
            "max_position_embeddings": self.max_position_embeddings,
            "limit": None,
        }

    def __str__(self) -> str:
        return (
            f"scheme:      computed sinusoids [sin | cos], dim {self.dim}, positions from row {self.offset}\n"
            f"limit:       {self.describe_limit()}"
        )


def _count(config: Mapping[str, Any], field: str, where: object, *, lowest: int) -> int:
    value = config.get(field)
    if isinstance(value, bool) or not isinstance(value, int) or not lowest <= value <= 1 << 20:
        raise fail(where, f"{field} as an integer in {lowest}..{1 << 20}", repr(value)[:80])
    return value


def computed_sinusoid_from_dict(config: Mapping[str, Any], family: str, source: str, path: Path) -> ComputedSinusoid:
    """The :class:`ComputedSinusoid` of a parsed ``config.json``.

    Raises:
      CheckpointError: the width or ``pad_token_id`` missing or out of range (one line naming the file).
    """
    row = COMPUTED_SINUSOID_FAMILIES[family]
    dim = _count(config, row.dim_field, path, lowest=4)
    pad = _count(config, "pad_token_id", path, lowest=0)
    mpe = config.get("max_position_embeddings")
    return ComputedSinusoid(source, str(config.get("model_type")), dim, pad + 1, mpe if isinstance(mpe, int) else None)
