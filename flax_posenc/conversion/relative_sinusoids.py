"""Sinusoids of relative distances computed by the model (kind ``relative_sinusoid``), numpy only.

XLNet (transformers ``models/xlnet/modeling_xlnet.py``, ``XLNetModel.relative_positional_encoding``)
adds no position to its tokens: each attention layer projects a table of sinusoids of the
*distances* between query and key, ``[sin(r * w) | cos(r * w)]`` with ``w_i = 10000 ** (-2i / d_model)``
for ``r = klen, klen - 1, ..., -qlen + 1`` (``attn_type`` ``"bi"``; ``"uni"``: down to 0), each
distance clamped to ``[-clamp_len, clamp_len]`` when ``clamp_len > 0``; both of its streams (content
and query) read the same table. Nothing limits the length; distances past ``clamp_len`` share one row.
``bi_data`` (a second, backward sequence of distances for half the batch, a pre-training option) is
refused in one line.

>>> rec = RelativeSinusoid("demo", "xlnet", d_model=4, clamp_len=-1, attn_type="bi")
>>> rec.distances(2, 3).tolist()
[3, 2, 1, 0, -1]
>>> rec.table(1, 1).round(4).tolist()
[[0.8415, 0.01, 0.5403, 1.0], [0.0, 0.0, 1.0, 1.0]]
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

import numpy as np

from flax_posenc.bounds import MAX_POSITIONS
from flax_posenc.conversion.readers import fail
from flax_posenc.limits import NoLimit

__all__ = ["RELATIVE_SINUSOID_FAMILIES", "RelativeSinusoid", "RelativeSinusoidFamily", "relative_sinusoid_from_dict"]


@dataclasses.dataclass(frozen=True)
class RelativeSinusoidFamily:
    """A model family whose attention reads sinusoids of relative distances (a row of
    :data:`RELATIVE_SINUSOID_FAMILIES`); ``defaults``: its config class's values of the fields read."""

    name: str
    model_types: tuple[str, ...]
    defaults: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    tower: str = "text"


RELATIVE_SINUSOID_FAMILIES: Mapping[str, RelativeSinusoidFamily] = MappingProxyType(
    {
        "xlnet": RelativeSinusoidFamily(
            "xlnet",
            ("xlnet",),
            MappingProxyType({"d_model": 1024, "clamp_len": -1, "attn_type": "bi", "bi_data": False}),
        )
    }
)


@dataclasses.dataclass(frozen=True)
class RelativeSinusoid(NoLimit):
    """XLNet's relative sinusoids as a :class:`~flax_posenc.conversion.SourceRecord` (no limit).

    Attributes:
      source, model_type: as every record.
      d_model: the table's width (``d_model // 2`` frequencies, sines then cosines).
      clamp_len: distances are clamped to ``[-clamp_len, clamp_len]`` when positive (``-1``: never).
      attn_type: ``"bi"`` (distances ``klen .. -qlen + 1``) or ``"uni"`` (``klen .. 0``).
    """

    source: str
    model_type: str
    d_model: int
    clamp_len: int
    attn_type: str
    family: str = "xlnet"

    scheme = "relative_sinusoid"
    key = None

    def describe_limit(self) -> str:
        clamp = f", distances clamped to {self.clamp_len}" if self.clamp_len > 0 else ""
        return (
            f"{self.family} relative sinusoids (d_model {self.d_model}, attn_type {self.attn_type}{clamp}) "
            f"of {self.source} has no limit (computed for every distance)"
        )

    def distances(self, qlen: int, klen: int) -> np.ndarray:
        """The int64 distances the table's rows stand for, in the model's order.

        Raises:
          ValueError: ``qlen`` or ``klen`` not a positive integer up to the library's bound.
        """
        for name, n in (("qlen", qlen), ("klen", klen)):
            if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or not 1 <= n <= MAX_POSITIONS:
                raise ValueError(f"{name}: expected a positive integer up to {MAX_POSITIONS}, got {n!r}")
        end = -qlen if self.attn_type == "bi" else -1
        r = np.arange(klen, end, -1, dtype=np.int64)
        return np.clip(r, -self.clamp_len, self.clamp_len) if self.clamp_len > 0 else r

    def table(self, qlen: int, klen: int) -> np.ndarray:
        """``(rows, d_model)`` float64 ``[sin(r * w) | cos(r * w)]`` for :meth:`distances` ``r``."""
        w = 1.0 / 10000.0 ** (np.arange(0, self.d_model, 2, dtype=np.float64) / self.d_model)
        angle = self.distances(qlen, klen).astype(np.float64)[:, None] * w
        return np.concatenate([np.sin(angle), np.cos(angle)], axis=-1)

    def to_dict(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "model_type": self.model_type,
            "scheme": self.scheme,
            "family": self.family,
            "d_model": self.d_model,
            "clamp_len": self.clamp_len,
            "attn_type": self.attn_type,
            "limit": None,
        }

    def __str__(self) -> str:
        return "\n".join(
            [
                f"source:      {self.source}",
                f"family:      {self.family} ({self.model_type})",
                f"scheme:      relative sinusoids of query-key distances (d_model {self.d_model}, attn_type {self.attn_type})",
                f"limit:       {self.describe_limit()}",
            ]
        )


def relative_sinusoid_from_dict(
    row: RelativeSinusoidFamily, config: Mapping[str, Any], source: str, where: object
) -> RelativeSinusoid:
    """The :class:`RelativeSinusoid` of a parsed ``config.json`` of ``row``'s model types.

    Raises:
      CheckpointError: a field of the wrong type, an odd ``d_model``, an unknown ``attn_type``, or
        ``bi_data`` true (one line naming the file and the field).
    """
    get = lambda name: config.get(name, row.defaults.get(name))  # noqa: E731
    d_model, clamp, attn = get("d_model"), get("clamp_len"), get("attn_type")
    if isinstance(d_model, bool) or not isinstance(d_model, int) or d_model < 2 or d_model % 2:
        raise fail(where, "d_model as a positive even integer", repr(d_model)[:80])
    if isinstance(clamp, bool) or not isinstance(clamp, int):
        raise fail(where, "clamp_len as an integer (-1: no clamp)", repr(clamp)[:80])
    if attn not in ("bi", "uni"):
        raise fail(where, "attn_type 'bi' or 'uni'", repr(attn)[:80])
    if get("bi_data"):
        raise fail(
            where, "bi_data false (its backward distances for half the batch are not read)", repr(get("bi_data"))
        )
    return RelativeSinusoid(source, str(config.get("model_type")), d_model, clamp, attn, row.name)
