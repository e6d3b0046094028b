"""Transformer-XL relative sinusoids of Conformer speech encoders as a mechanism, numpy only.

A Conformer attention layer (Transformer-XL, section 3.3 of arXiv:1901.02860) scores query ``i``
against key ``j`` with ``(q_i + u) . k_j + (q_i + v) . W_R R_{i-j}``: ``R`` is a fixed sinusoid of
the *distance* ``i - j``, ``W_R`` a per-layer projection and ``u``, ``v`` (``bias_u``/``bias_v``,
``pos_bias_u``/``pos_bias_v``) per-layer learned biases. For ``L`` frames the model computes the
``2L - 1`` rows ``R_{L-1}, R_{L-2}, ..., R_{-(L-1)}`` (row ``r`` is distance ``L - 1 - r``) and its
"relative shift" picks row ``L - 1 - (i - j)`` for the pair ``(i, j)``. Every row is

    R_d[2k] = sin(d * base ** (-2k / dim)),  R_d[2k + 1] = cos(d * base ** (-2k / dim))

(sin and cos interleaved, ``base`` 10000, ``dim`` = ``hidden_size``). Facts per modeling file of
the pinned transformers (5.24.0):

- ``parakeet/modeling_parakeet.py``: ``ParakeetEncoderRelPositionalEncoding`` (``encode_positions``)
  computes the rows for any length (``max_position_embeddings`` is stored, never used: no limit);
  every layer's ``self_attn`` holds ``bias_u``, ``bias_v`` ``(heads, head_dim)`` and
  ``relative_k_proj`` (``W_R``, no bias).
- ``nemotron_asr_streaming/modeling_nemotron_asr_streaming.py``: the same module, which raises
  past ``max_position_embeddings`` frames (cached left context included): a limit in frames of the
  subsampled encoder.
- ``fastspeech2_conformer/modeling_fastspeech2_conformer.py``: ``FastSpeech2ConformerRelPositionalEncoding``
  (``encoder.pos_enc``, ``decoder.pos_enc``) builds 5000 rows each way and grows them on demand
  (``extend_pos_enc``: no limit) with ``exp(-2k ln(base) / dim)``; it also scales the hidden states
  by ``sqrt(hidden_size)``; layers hold ``pos_bias_u``, ``pos_bias_v`` and ``linear_pos``.
- ``wav2vec2_conformer/modeling_wav2vec2_conformer.py``: with ``position_embeddings_type``
  ``"relative"``, ``Wav2Vec2ConformerRelPositionalEmbedding`` (``encoder.embed_positions``), grown
  on demand from ``max_source_positions`` (no limit), with ``pos_bias_u``, ``pos_bias_v``,
  ``linear_pos``; ``"rotary"`` is refused here (one line), ``null`` has no such positions.

The record's ``limit`` is ``None`` (relative: nothing limits a length) except where the module
itself refuses (Nemotron); its unit is frames of the encoder (after any subsampling).

>>> XL_RELATIVE_FAMILIES["parakeet_xl"].bias_keys
('self_attn.bias_u', 'self_attn.bias_v')
>>> xl_relative_sinusoids(2, 4)[:, 0].tolist()  # distances 1, 0, -1
[0.8414709848078965, 0.0, -0.8414709848078965]
"""

from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

import numpy as np

from flax_posenc.conversion.checkpoint import open_checkpoint
from flax_posenc.conversion.readers import fail
from flax_posenc.conversion.table import TensorRecord
from flax_posenc.limits import describe_limit

__all__ = [
    "XL_RELATIVE_FAMILIES",
    "XLRelativeFamily",
    "XLRelativeSource",
    "read_xl_relative",
    "xl_relative_sinusoids",
]

#: The largest ``hidden_size`` read (a bound on a config's field, not a model's).
MAX_DIM = 1 << 16


def xl_relative_sinusoids(length: int, dim: int, base: float = 10000.0) -> np.ndarray:
    """The ``(2 * length - 1, dim)`` float64 rows of distances ``length - 1`` down to ``-(length - 1)``.

    Row ``r`` is distance ``d = length - 1 - r`` (query minus key): ``[2k] = sin(d w_k)``,
    ``[2k + 1] = cos(d w_k)``, ``w_k = base ** (-2k / dim)``. Any ``length >= 1`` (no limit).

    Raises:
      ValueError: ``length < 1``, ``dim`` not a positive even integer, or ``base <= 1``.

    >>> xl_relative_sinusoids(3, 2)[:, 1].round(4).tolist()
    [-0.4161, 0.5403, 1.0, 0.5403, -0.4161]
    """
    if isinstance(length, bool) or not isinstance(length, (int, np.integer)) or length < 1:
        raise ValueError(f"length: expected a positive integer number of frames, found {length!r}")
    if isinstance(dim, bool) or not isinstance(dim, (int, np.integer)) or dim < 2 or dim % 2:
        raise ValueError(f"dim: expected a positive even integer, found {dim!r}")
    if not base > 1:
        raise ValueError(f"base: expected a number above 1, found {base!r}")
    distances = np.arange(length - 1, -length, -1, dtype=np.float64)
    inv = np.power(float(base), -np.arange(0, dim, 2, dtype=np.float64) / dim)
    angles = distances[:, None] * inv[None, :]
    out = np.empty((2 * length - 1, dim), np.float64)
    out[:, 0::2] = np.sin(angles)
    out[:, 1::2] = np.cos(angles)
    return out


@dataclasses.dataclass(frozen=True)
class XLRelativeFamily:
    """One family's Transformer-XL relative positions, as data (a row of :data:`XL_RELATIVE_FAMILIES`).

    Attributes:
      name, model_types: our name and the ``config.json`` ``model_type`` values that mean it.
      bias_keys: the per-layer ``u`` and ``v`` biases, by suffix (a model or tower prefix and
        ``layers.{i}.`` precede them).
      projection_key: the per-layer ``W_R`` by suffix.
      module_class: the class-name suffix of the model's position module (its conformance case
        calls it).
      limit_field: the config field the module refuses lengths past (``None``: no limit).
      type_field: the config field choosing the position type, with ``type_value`` the one read
        (``None``: always this kind).
      tower: the part of a composite model it serves.
    """

    name: str
    model_types: tuple[str, ...]
    bias_keys: tuple[str, str] = ("self_attn.bias_u", "self_attn.bias_v")
    projection_key: str = "self_attn.relative_k_proj.weight"
    module_class: str = "RelPositionalEncoding"
    limit_field: str | None = None
    type_field: str | None = None
    type_value: str = "relative"
    base: float = 10000.0
    tower: str = "audio"


_CONFORMER = {
    "bias_keys": ("self_attn.pos_bias_u", "self_attn.pos_bias_v"),
    "projection_key": "self_attn.linear_pos.weight",
}

XL_RELATIVE_FAMILIES: Mapping[str, XLRelativeFamily] = MappingProxyType(
    {
        row.name: row
        for row in (
            XLRelativeFamily("parakeet_xl", ("parakeet_encoder",)),
            XLRelativeFamily(
                "nemotron_asr_xl", ("nemotron_asr_streaming_encoder",), limit_field="max_position_embeddings"
            ),
            XLRelativeFamily("fastspeech2_conformer_xl", ("fastspeech2_conformer",), **_CONFORMER),  # type: ignore[arg-type]
            XLRelativeFamily(
                "wav2vec2_conformer_xl",
                ("wav2vec2-conformer",),
                module_class="RelPositionalEmbedding",
                type_field="position_embeddings_type",
                **_CONFORMER,  # type: ignore[arg-type]
            ),
        )
    }
)


@dataclasses.dataclass(frozen=True)
class XLRelativeSource(TensorRecord):
    """Transformer-XL relative sinusoids as a :class:`~flax_posenc.conversion.SourceRecord`.

    Attributes:
      source: the SOURCE as given; model_type: its ``config.json`` ``model_type``.
      family: the :data:`XL_RELATIVE_FAMILIES` row; key: the first layer's ``u`` bias (as stored).
      dim: the sinusoids' width (``hidden_size``); base: 10000; heads: attention heads.
      bias_keys: per layer, ``(u, v, W_R)`` as stored (prefix included).
      limit: frames the model refuses past (``None``: relative, no limit); limit_field: its field.
    """

    source: str
    model_type: str
    family: str
    key: str
    dim: int
    base: float
    heads: int
    bias_keys: tuple[tuple[str, str, str], ...]
    limit: int | None = None
    limit_field: str | None = None

    scheme = "xl_relative"
    #: the encoder's frames are the positions of its sequence: ``check --length N`` asks N frames
    unit = "tokens"

    @property
    def layers(self) -> int:
        return len(self.bias_keys)

    def table(self, length: int) -> np.ndarray:
        """The ``(2 * length - 1, dim)`` float64 rows the model computes for ``length`` frames
        (:func:`xl_relative_sinusoids`); no limit is applied here (``check_length`` says it)."""
        return xl_relative_sinusoids(length, self.dim, self.base)

    def _name(self) -> str:
        return f"{self.family} relative sinusoids ({self.key}) of {self.source}"

    def describe_limit(self) -> str:
        """``"... has no limit (relative: ...)"`` or, with a limit, ``"... holds N frames (0..N-1)"``."""
        if self.limit is None:
            return (
                f"{self._name()} has no limit (relative: sinusoids of the distances -(L-1)..L-1 are computed "
                "for every length L, in frames of the encoder)"
            )
        return describe_limit(f"{self._name()} ({self.limit_field} {self.limit})", self.limit, unit="frame")

    def details(self) -> dict[str, Any]:
        return {
            "limit_field": self.limit_field,
            "unit": self.unit,
            "dim": self.dim,
            "base": self.base,
            "heads": self.heads,
            "layers": self.layers,
            "layout": "sin/cos interleaved, rows: distances L-1 .. -(L-1)",
        }

    def lines(self) -> list[str]:
        return [
            f"key:         {self.key}",
            f"scheme:      Transformer-XL relative sinusoids ({self.dim} wide, base {self.base:g}, sin/cos "
            f"interleaved) projected per layer, with u/v biases ({self.layers} layers, {self.heads} heads)",
        ]


def _positive(config: Mapping[str, Any], field: str, where: object, top: int = MAX_DIM) -> int:
    value = config.get(field)
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= top:
        raise fail(where, f"{field} as an integer in 1..{top}", repr(value)[:80])
    return value


def _layer_of(name: str, suffix: str) -> tuple[str, int] | None:
    """``(stack prefix, layer)`` of ``...layers.3.self_attn.bias_u`` (any ``*layers.N.`` stack)."""
    m = re.fullmatch(r"(.*?)(\w*layers)\.(\d+)\." + re.escape(suffix), name)
    return None if m is None else (m.group(1) + m.group(2), int(m.group(3)))


def _heads(config: Mapping[str, Any], stack: str, dim: int, where: object) -> int:
    """A stack's heads: ``encoder_num_attention_heads`` for ``encoder.*`` (FastSpeech2; also under a
    composite's prefix, ``model.encoder.*``), else ``num_attention_heads``."""
    owns = [f"{part}_num_attention_heads" for part in stack.split(".")]
    field = next((own for own in owns if own in config), "num_attention_heads")
    heads = _positive(config, field, where)
    if dim % heads:
        raise fail(where, f"{field} dividing hidden_size {dim}", str(heads))
    return heads


def read_xl_relative(
    row: XLRelativeFamily, config: Mapping[str, Any], source: str | os.PathLike, config_path: str | os.PathLike
) -> list[XLRelativeSource]:
    """The :class:`XLRelativeSource` of SOURCE for ``row`` (``[]``: no such positions).

    Reads headers only (the biases' shapes), never the weights.

    Raises:
      CheckpointError: ``hidden_size`` odd or out of range, heads not dividing it, a position type
        other than ``"relative"`` (``rotary`` is not read), a limit field that is not a positive
        integer, or a layer whose ``u``, ``v`` or ``W_R`` is missing or of the wrong shape (one line
        naming the field or tensor, what was expected and what was found).
    """
    where = config_path
    if row.type_field is not None:
        kind = config.get(row.type_field)
        if kind is None:
            return []
        if kind != row.type_value:
            raise fail(
                where,
                f"{row.type_field} {row.type_value!r} or null (its {kind!r} positions are not read)",
                repr(kind)[:80],
            )
    dim = _positive(config, "hidden_size", where)
    if dim % 2:
        raise fail(where, "an even hidden_size (sin/cos pairs of the relative sinusoids)", str(dim))
    limit = None if row.limit_field is None else _positive(config, row.limit_field, where, 1 << 31)
    u_suffix, v_suffix = row.bias_keys
    with open_checkpoint(source) as ckpt:
        found = sorted(  # the encoder's layers first (FastSpeech2: encoder, then decoder)
            ((at[0].startswith("decoder"), at), name)
            for name in ckpt.names
            if (at := _layer_of(name, u_suffix)) is not None
        )
        if not found:
            return []
        keys, all_heads = [], []
        for (_, (stack, layer)), u in found:
            heads = _heads(config, stack, dim, where)
            all_heads.append(heads)
            base = u[: -len(u_suffix)]
            v, proj = base + v_suffix, base + row.projection_key
            for name, shape in ((u, (heads, dim // heads)), (v, (heads, dim // heads)), (proj, (dim, dim))):
                if name not in ckpt:
                    raise fail(ckpt.weights_path, f"{name} beside {u} ({stack} layer {layer})", "no such tensor")
                _, stored = ckpt.info(name)
                if tuple(stored) != shape:
                    raise fail(
                        f"{ckpt.weights_path}: {name}",
                        f"shape {shape} ({heads} heads, hidden_size {dim} in config.json)",
                        str(tuple(stored)),
                    )
            keys.append((u, v, proj))
    return [
        XLRelativeSource(
            os.fspath(source),
            str(config.get("model_type")),
            row.name,
            keys[0][0],
            dim,
            row.base,
            all_heads[0],
            tuple(keys),
            limit,
            row.limit_field if limit is not None else None,
        )
    ]
