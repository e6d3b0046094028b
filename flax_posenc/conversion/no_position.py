"""Models without any position encoding (recurrent and state-space models): the ``none`` mechanism.

Nothing limits their length: :class:`NoPositionEncoding` is a
:class:`~flax_posenc.conversion.SourceRecord` with no limit. numpy only.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from flax_posenc.limits import NoLimit

__all__ = ["NO_POSITION_FAMILIES", "NO_POSITION_MODEL_TYPES", "NoPositionEncoding", "NoPositionFamily"]

#: Model types with no position encoding at all (recurrent and state-space models): nothing
#: limits their length.
NO_POSITION_MODEL_TYPES: tuple[str, ...] = (
    "mamba",
    "falcon_mamba",
    "rwkv",
    "xlstm",
    "jamba",
    "granitemoehybrid",
    "kimi_linear",
    "nemotron_h",
    "mamba2",
)


@dataclasses.dataclass(frozen=True)
class NoPositionFamily:
    """The model types without a position encoding (the one row of :data:`NO_POSITION_FAMILIES`)."""

    name: str
    model_types: tuple[str, ...]


NO_POSITION_FAMILIES: Mapping[str, NoPositionFamily] = MappingProxyType(
    {"recurrent": NoPositionFamily("recurrent", NO_POSITION_MODEL_TYPES)}
)


@dataclasses.dataclass(frozen=True)
class NoPositionEncoding(NoLimit):
    """A model without any position encoding (a recurrent or state-space model): no limit."""

    source: str
    model_type: str

    scheme = "none"
    key = None
    family = "recurrent"

    def describe_limit(self) -> str:
        return f"{self.model_type} model {self.source} has no limit (no position encoding: a recurrent state)"

    def to_dict(self) -> dict[str, Any]:
        return {"source": self.source, "model_type": self.model_type, "scheme": "none", "limit": None}

    def __str__(self) -> str:
        return f"source:      {self.source}\nscheme:      none (recurrent)\nlimit:       {self.describe_limit()}"
