"""Sinusoids a model computes instead of storing (fairseq / tensor2tensor style), numpy only.

M2M-100, NLLB-MoE, XGLM and FSMT build ``[sin | cos]`` tables at load time: ``d_model // 2``
frequencies ``exp(-i * ln(10000) / (d_model // 2 - 1))`` (the *endpoint* spacing, so the last
one is exactly ``1/10000``), positions counted from ``pad_token_id + 1`` (the padding row is
zero), and the table grows whenever a longer sequence comes: there is no limit. Nothing is read
from the weights; the ``config.json`` says it all.

Speech2Text's encoder and decoder use fairseq's sinusoids too (the encoder's over the frames left
after its convolutional subsampling): they grow, so ``max_source_positions`` is no limit.

PEGASUS-X computes the same ``[sin | cos]`` (endpoint spacing) at every call, from position 0,
with no padding row: no limit either.

CTRL computes its table once (a buffer, not saved): ``[sin | cos]`` of ``d_model // 2``
frequencies ``10000 ** (-2 i / d_model)`` (the usual spacing), positions from row 0, and
``n_positions`` rows that it indexes: its limit.

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
from flax_posenc.limits import NoLimit, describe_limit, verdict_line
from flax_posenc.sinusoid_math import sinusoidal_values

__all__ = ["COMPUTED_SINUSOID_FAMILIES", "ComputedSinusoid", "ComputedSinusoidFamily", "computed_sinusoid_from_dict"]


@dataclasses.dataclass(frozen=True)
class ComputedSinusoidFamily:
    """A family whose positions are computed sinusoids (a row of :data:`COMPUTED_SINUSOID_FAMILIES`).

    Attributes:
      name, model_types: as every registry row.
      dim_field: the config field holding the width.
      endpoint: the frequencies' spacing: ``True`` for fairseq's (the last is exactly 1/10000),
        ``False`` for the usual ``10000 ** (-2 i / dim)``.
      offset_from_pad: positions start at row ``pad_token_id + 1`` (fairseq), else at row 0.
      rows_field: the config field holding the fixed number of rows the model computes and
        indexes (CTRL's ``n_positions``: its limit), or ``None``: the table grows (no limit).
      tower: the part of the model it serves (``"audio"``: Speech2Text's encoder, over the
        frames left after its convolutional subsampling).
      cos_first: the halves are ``[cos | sin]`` (MusicGen's decoders), not ``[sin | cos]``.
      rows_fields: config fields whose sum is the fixed number of rows (time series:
        ``context_length + prediction_length``), instead of ``rows_field``.
      unit: what a row counts: ``"tokens"``, or ``"time steps"`` (time series: ``check --steps``).
    """

    name: str
    model_types: tuple[str, ...]
    dim_field: str = "d_model"
    endpoint: bool = True
    offset_from_pad: bool = True
    rows_field: str | None = None
    tower: str = "text"
    cos_first: bool = False
    rows_fields: tuple[str, ...] = ()
    unit: str = "tokens"


COMPUTED_SINUSOID_FAMILIES: Mapping[str, ComputedSinusoidFamily] = MappingProxyType(
    {
        row.name: row
        for row in (
            ComputedSinusoidFamily("fairseq_sinusoid", ("m2m_100", "nllb-moe", "xglm", "fsmt")),
            ComputedSinusoidFamily("pegasus_x_sinusoid", ("pegasus_x",), offset_from_pad=False),
            # Speech2Text: fairseq's sinusoids in both stacks (they grow: max_source_positions and
            # max_target_positions only size the first table); the encoder's over subsampled frames
            ComputedSinusoidFamily("speech_to_text_encoder", ("speech_to_text",), tower="audio"),
            ComputedSinusoidFamily("speech_to_text_decoder", ("speech_to_text",)),
            # TIPSv2's text tower: fairseq's frequencies, from position 0, no padding row, a fixed
            # table of max_position_embeddings rows (a longer input is refused: its limit)
            ComputedSinusoidFamily(
                "tipsv2_text_sinusoid",
                ("tipsv2_text_model",),
                dim_field="hidden_size",
                offset_from_pad=False,
                rows_field="max_position_embeddings",
            ),
            # MusicGen / MusicGen Melody decoders (audio-code tokens): fairseq's frequencies, halves
            # [cos | sin], from position 0, no padding row; the table grows (no limit)
            ComputedSinusoidFamily(
                "musicgen_sinusoid",
                ("musicgen_decoder", "musicgen_melody_decoder"),
                dim_field="hidden_size",
                offset_from_pad=False,
                tower="audio",
                cos_first=True,
            ),
            # Kosmos-2's text tower: fairseq's sinusoids (M2M100's module), width embed_dim (issue 35)
            ComputedSinusoidFamily("kosmos2_text_sinusoid", ("kosmos_2_text_model",), dim_field="embed_dim"),
            ComputedSinusoidFamily(
                "ctrl_sinusoid",
                ("ctrl",),
                dim_field="n_embd",
                endpoint=False,
                offset_from_pad=False,
                rows_field="n_positions",
            ),
            # time series (TimeSeriesTransformer, Informer, Autoformer): XLM's [sin | cos] of the usual
            # frequencies, context_length + prediction_length rows over time steps (the encoder's
            # from 0, the decoder's from context_length, Autoformer's from context - label_length)
            ComputedSinusoidFamily(
                "time_series_sinusoid",
                ("time_series_transformer", "informer", "autoformer"),
                endpoint=False,
                offset_from_pad=False,
                rows_fields=("context_length", "prediction_length"),
                unit="time steps",
            ),
        )
    }
)


@dataclasses.dataclass(frozen=True)
class ComputedSinusoid(NoLimit):
    """A computed sinusoid table: a :class:`~flax_posenc.conversion.SourceRecord`, with no limit
    when it grows (fairseq's), else ``rows`` positions (CTRL's).

    Row ``r`` of the model's table is :meth:`values` ``(r)``; position ``p`` of a sequence uses row
    ``offset + p`` (fairseq: ``offset = pad_token_id + 1``, and the padding row is zero; CTRL: 0).
    """

    source: str
    model_type: str
    dim: int
    offset: int
    max_position_embeddings: int | None = None
    family: str = "fairseq_sinusoid"
    endpoint: bool = True
    rows: int | None = None
    cos_first: bool = False
    unit: str = "tokens"
    rows_from: str | None = None

    scheme = "sinusoidal_computed"
    key = None

    @property
    def limit(self) -> int | None:  # type: ignore[override]
        """Usable positions (``rows - offset``), or ``None`` for a table that grows."""
        return None if self.rows is None else self.rows - self.offset

    def check_length(self, length: int) -> tuple[bool, str]:
        return verdict_line(length, self.limit, self.describe_limit())

    def values(self, rows: Any) -> np.ndarray:
        """Float64 rows ``rows`` of the table (``[sin | cos]``, or ``[cos | sin]`` with ``cos_first``;
        endpoint or usual frequencies)."""
        values = sinusoidal_values(np.asarray(rows), self.dim, layout="concatenated", endpoint=self.endpoint)
        if self.cos_first:
            half = self.dim // 2
            values = np.concatenate([values[..., half : 2 * half], values[..., :half], values[..., 2 * half :]], -1)
        return values

    def check_steps(self, steps: int) -> tuple[bool, str]:
        """Time series: ``(fits, line)`` for ``steps`` time steps (context plus prediction).

        Raises:
          CheckpointError: its positions count tokens, not time steps.
        """
        if self.unit != "time steps":
            raise fail(self.source, "a model whose positions count time steps for --steps", f"{self.unit}")
        fits, line = verdict_line(steps, self.limit, self.describe_limit())
        return fits, line.replace(f" {steps} positions ", f" {steps} time steps ", 1)

    def describe_limit(self) -> str:
        if self.rows is not None and self.unit == "time steps":
            name = f"{self.model_type} computed sinusoid table ({self.rows_from}) of {self.source}"
            return describe_limit(name, self.rows, self.offset, unit="time step")
        if self.rows is not None:
            return describe_limit(f"{self.model_type} computed sinusoid table of {self.source}", self.rows, self.offset)
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
            "endpoint": self.endpoint,
            "cos_first": self.cos_first,
            "max_position_embeddings": self.max_position_embeddings,
            "rows": self.rows,
            "unit": self.unit,
            "limit": self.limit,
        }

    def __str__(self) -> str:
        return (
            f"scheme:      computed sinusoids {'[cos | sin]' if self.cos_first else '[sin | cos]'}, dim {self.dim}, "
            f"positions from row {self.offset}"
            f"{'' if self.endpoint else ' (usual frequencies)'}\n"
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
    offset = _count(config, "pad_token_id", path, lowest=0) + 1 if row.offset_from_pad else 0
    rows = None if row.rows_field is None else _count(config, row.rows_field, path, lowest=1)
    if row.rows_fields:
        rows = sum(_count(config, f, path, lowest=1) for f in row.rows_fields)
    mpe = config.get("max_position_embeddings")
    return ComputedSinusoid(
        source,
        str(config.get("model_type")),
        dim,
        offset,
        mpe if isinstance(mpe, int) else None,
        family=row.name,
        endpoint=row.endpoint,
        rows=rows,
        cos_first=row.cos_first,
        unit=row.unit,
        rows_from=" + ".join(row.rows_fields) or row.rows_field,
    )


# ----------------------------------------------------------------------------- issue 36
# Kosmos-2.5's text tower: M2M100's fairseq sinusoids (Kosmos2_5TextSinusoidalPositionalEmbedding,
# copied from M2M100SinusoidalPositionalEmbedding), width embed_dim, positions from pad_token_id + 1.
COMPUTED_SINUSOID_FAMILIES = MappingProxyType(
    {
        **COMPUTED_SINUSOID_FAMILIES,
        "kosmos2_5_text_sinusoid": ComputedSinusoidFamily(
            "kosmos2_5_text_sinusoid", ("kosmos_2_5_text_model",), dim_field="embed_dim"
        ),
    }
)
