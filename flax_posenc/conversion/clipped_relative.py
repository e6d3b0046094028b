"""Shaw-style clipped relative key embeddings of speech encoders as a mechanism, numpy only.

Each attention layer holds a learned table ``E`` of ``rows x head_dim`` and adds
``q_i . E[index(i, j)] * scaling`` to the score of query ``i`` and key ``j`` (Shaw et al., 2018),
where ``index`` clamps a signed distance into the table. Facts per modeling file of the pinned
transformers (5.24.0):

- ``wav2vec2_bert/modeling_wav2vec2_bert.py`` (``position_embeddings_type`` ``"relative_key"``, the
  default): ``self_attn.distance_embedding`` of ``left_max_position_embeddings +
  right_max_position_embeddings + 1`` rows; ``index = clamp(j - i, -left, right) + left``
  (``_apply_relative_key_position_encoding``). Keys farther than ``left`` behind or ``right``
  ahead share the end rows: no limit. ``"relative"`` and ``"rotary"`` are refused (one line).
- ``granite_speech``, ``granite_speech_plus`` (``attn.rel_pos_emb``, ``2 max_pos_emb + 1`` rows) and
  ``granite_speech5`` (``self_attn.rel_pos_emb``, ``2 max_position_embeddings + 1`` rows): attention
  within blocks of ``context_size`` frames (the input padded to whole blocks), ``index = clamp(i - j,
  -context_size, context_size) + max_pos_emb`` (the encoder's ``attention_dists`` buffer): any
  length, in blocks.
- ``phi4_multimodal/modeling_phi4_multimodal.py`` (``phi4_multimodal_audio``): not a key embedding but one
  bias per head, ``relative_attention_bias_layer.bias_values`` (shared by every layer) of ``2
  bias_max_distance`` rows (``bias_max_distance`` with ``bias_symmetric``); ``index = clamp(j - i, -M, M - 1)
  + M`` (symmetric: ``|clamp(j - i, -M, M - 1)|``).
- ``vits/modeling_vits.py``: every text-encoder layer holds ``attention.emb_rel_k`` and ``emb_rel_v``
  ``(1, 2 window_size + 1, head_dim)``, for keys and for values; row ``j - i + window_size`` for
  ``|j - i| <= window_size``, and *zero* beyond (``_get_relative_embeddings`` pads with zeros): no
  limit, nothing past the window.

>>> CLIPPED_RELATIVE_FAMILIES["wav2vec2_bert_relative_key"].sign
1
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

__all__ = [
    "CLIPPED_RELATIVE_FAMILIES",
    "ClippedRelativeFamily",
    "ClippedRelativeSource",
    "read_clipped_relative",
]

_BOUND = 1 << 20


@dataclasses.dataclass(frozen=True)
class ClippedRelativeFamily:
    """One family's clipped relative key embeddings, as data (a row of :data:`CLIPPED_RELATIVE_FAMILIES`).

    Attributes:
      name, model_types: our name and the ``config.json`` ``model_type`` values that mean it.
      table_key: the per-layer table by suffix (a prefix and ``layers.{i}.`` precede it).
      sign: ``+1``: the distance is key minus query (``j - i``); ``-1``: query minus key.
      left_field, right_field: the config fields clamping the distance below (``-left``) and above
        (``right``); the same field twice for a symmetric clamp.
      offset_field: the field added to the clamped distance (``None``: ``left``).
      clamp_field: a field clamping instead of left/right (Granite: ``context_size``), or ``None``.
      block_field: the field of the block length attention is confined to (``None``: none).
      heads_field, width_field: the config fields of heads and model width (the head width is their
        quotient unless ``head_dim_field`` names it).
      type_field, type_value, other_values: the config field choosing the position type, the value
        read here and the values another kind reads (``[]`` here); any other value is refused.
      tower: the part of a composite model it serves.
    """

    name: str
    model_types: tuple[str, ...]
    table_key: str
    sign: int
    left_field: str
    right_field: str
    offset_field: str | None = None
    block_field: str | None = None
    heads_field: str = "num_attention_heads"
    width_field: str = "hidden_size"
    head_dim_field: str | None = None
    type_field: str | None = None
    type_value: str = "relative_key"
    other_values: tuple[str, ...] = ()
    tower: str = "audio"
    right_adjust: int = 0
    symmetric_field: str | None = None
    effect: str = "key"
    per_layer: bool = True
    value_key: str | None = None
    beyond: str = "clamp"
    leading_one: bool = False


CLIPPED_RELATIVE_FAMILIES: Mapping[str, ClippedRelativeFamily] = MappingProxyType(
    {
        row.name: row
        for row in (
            ClippedRelativeFamily(
                "wav2vec2_bert_relative_key",
                ("wav2vec2-bert",),
                "self_attn.distance_embedding.weight",
                +1,
                "left_max_position_embeddings",
                "right_max_position_embeddings",
                type_field="position_embeddings_type",
            ),
            ClippedRelativeFamily(
                "granite_speech_rel_pos",
                ("granite_speech_encoder", "granite_speech_plus_encoder"),
                "attn.rel_pos_emb.weight",
                -1,
                "context_size",
                "context_size",
                offset_field="max_pos_emb",
                block_field="context_size",
                heads_field="num_heads",
                width_field="hidden_dim",
                head_dim_field="dim_head",
            ),
            ClippedRelativeFamily(
                "granite_speech5_rel_pos",
                ("granite_speech5_encoder",),
                "self_attn.rel_pos_emb.weight",
                -1,
                "context_size",
                "context_size",
                offset_field="max_position_embeddings",
                block_field="context_size",
            ),
            ClippedRelativeFamily(
                "phi4_audio_bias",
                ("phi4_multimodal_audio",),
                "relative_attention_bias_layer.bias_values.weight",
                +1,
                "bias_max_distance",
                "bias_max_distance",
                right_adjust=-1,
                symmetric_field="bias_symmetric",
                effect="bias",
                per_layer=False,
            ),
            ClippedRelativeFamily(
                "vits_window",
                ("vits",),
                "attention.emb_rel_k",
                +1,
                "window_size",
                "window_size",
                value_key="attention.emb_rel_v",
                beyond="zero",
                leading_one=True,
            ),
        )
    }
)


@dataclasses.dataclass(frozen=True)
class ClippedRelativeSource(TensorRecord):
    """Clipped relative key embeddings as a :class:`~flax_posenc.conversion.SourceRecord`: no limit.

    Attributes:
      source, model_type, family: the SOURCE as given, its ``model_type``, the row's name.
      key: layer 0's table (as stored); keys: every layer's.
      rows, head_dim: the tables' shape.
      sign, left, right, offset: the row of query ``i``, key ``j`` is ``clip(d, -left, right) + offset``
        with ``d = j - i`` (``sign`` +1) or ``i - j`` (``sign`` -1): :meth:`index`.
      block: the block length attention is confined to (``None``: the whole input).
    """

    source: str
    model_type: str
    family: str
    key: str
    keys: tuple[str, ...]
    rows: int
    head_dim: int
    sign: int
    left: int
    right: int
    offset: int
    block: int | None = None
    symmetric: bool = False
    effect: str = "key"
    beyond: str = "clamp"
    value_keys: tuple[str, ...] = ()

    scheme = "clipped_relative"
    #: the encoder's frames are the positions of its sequence: ``check --length N`` asks N frames
    unit = "tokens"

    def index(self, query: np.ndarray, key: np.ndarray) -> np.ndarray:
        """The table row of each (query, key) pair (broadcast): ``clip(d, -left, right) + offset``,
        ``d = key - query`` (``sign`` +1) or ``query - key`` (``sign`` -1). Any integer positions.

        >>> rec = ClippedRelativeSource("s", "t", "f", "k", ("k",), 5, 4, 1, 2, 2, 2)
        >>> rec.index(np.arange(4)[:, None], np.arange(4)[None, :])[0].tolist()
        [2, 3, 4, 4]
        """
        raw = self.sign * (np.asarray(key, np.int64) - np.asarray(query, np.int64))
        d = np.clip(raw, -self.left, self.right)
        out = np.abs(d) if self.symmetric else d + self.offset
        if self.beyond == "zero":  # VITS: no row past the window (-1: a zero vector)
            out = np.where(raw == d, out, -1)
        return out

    def describe_limit(self) -> str:
        span = f"distances below -{self.left} or above {self.right} share the end rows"
        if self.beyond == "zero":
            span = f"distances below -{self.left} or above {self.right} get no embedding (zero)"
        where = f"attention within blocks of {self.block} frames; " if self.block else ""
        what, verb = ("key embeddings", "have") if self.effect == "key" else ("attention bias", "has")
        return (
            f"{self.family} clipped relative {what} ({self.key}) of {self.source} {verb} no limit "
            f"(relative: {where}{span})"
        )

    def details(self) -> dict[str, Any]:
        return {
            "unit": self.unit,
            "rows": self.rows,
            "head_dim": self.head_dim,
            "layers": len(self.keys),
            "distance": "key - query" if self.sign > 0 else "query - key",
            "clamp": [-self.left, self.right],
            "offset": self.offset,
            "block": self.block,
            "symmetric": self.symmetric,
            "effect": self.effect,
            "beyond": self.beyond,
            "value_keys": list(self.value_keys),
        }

    def lines(self) -> list[str]:
        d = "key - query" if self.sign > 0 else "query - key"
        return [
            f"key:         {self.key} ({self.rows}, {self.head_dim}) in each of {len(self.keys)} layers",
            f"scheme:      learned relative {'key embeddings' if self.effect == 'key' else 'bias per head'}, row clip({d}, -{self.left}, {self.right}) + "
            f"{self.offset}" + (f", within blocks of {self.block} frames" if self.block else ""),
        ]


def _field(config: Mapping[str, Any], field: str, where: object, low: int = 0) -> int:
    value = config.get(field)
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= _BOUND:
        raise fail(where, f"{field} as an integer in {low}..{_BOUND}", repr(value)[:80])
    return value


def read_clipped_relative(
    row: ClippedRelativeFamily, config: Mapping[str, Any], source: str | os.PathLike, config_path: str | os.PathLike
) -> list[ClippedRelativeSource]:
    """The :class:`ClippedRelativeSource` of SOURCE for ``row`` (``[]``: no such tables).

    Reads headers only (the tables' shapes).

    Raises:
      CheckpointError: a position type not read (wav2vec2-bert's ``rotary``), a field missing or out
        of range, a clamp that reaches past the table, or a layer's table of the wrong shape (one line
        naming the field or tensor, what was expected and what was found).
    """
    where = config_path
    if row.type_field is not None:
        kind = config.get(row.type_field)
        if kind is None or kind in row.other_values:
            return []
        if kind != row.type_value:
            expected = ", ".join(repr(v) for v in (row.type_value, *row.other_values))
            raise fail(
                where, f"{row.type_field} {expected} or null (its {kind!r} positions are not read)", repr(kind)[:80]
            )
    if row.beyond == "zero" and config.get(row.left_field) is None:
        return []  # VITS without a window: no relative embeddings
    left = _field(config, row.left_field, where)
    right = _field(config, row.right_field, where, -row.right_adjust) + row.right_adjust
    offset = left if row.offset_field is None else _field(config, row.offset_field, where)
    symmetric = False
    if row.symmetric_field is not None:
        symmetric = config.get(row.symmetric_field, False)
        if not isinstance(symmetric, bool):
            raise fail(where, f"{row.symmetric_field} true or false", repr(symmetric)[:80])
    block = None if row.block_field is None else _field(config, row.block_field, where, 1)
    heads = _field(config, row.heads_field, where, 1)
    if row.head_dim_field is not None:
        head_dim = _field(config, row.head_dim_field, where, 1)
    else:
        width = _field(config, row.width_field, where, 1)
        if width % heads:
            raise fail(where, f"{row.heads_field} dividing {row.width_field} {width}", str(heads))
        head_dim = width // heads
    rows = (offset + right + 1) if row.offset_field is None else 2 * offset + 1
    if symmetric:
        rows = max(left, right) + 1 if row.right_adjust == 0 else left
    if row.effect == "bias":
        head_dim = heads  # one bias per head: the table's second axis
    if not symmetric and (offset - left < 0 or offset + right >= rows):
        raise fail(
            where,
            f"{row.left_field}/{row.right_field} within the table's {rows} rows ({row.offset_field} {offset})",
            f"clamp -{left}..{right}",
        )
    layer = r"(.*?\w*layers)\.(\d+)\." if row.per_layer else r"()()(?:.*\.)?"
    pattern = re.compile(layer + re.escape(row.table_key))
    with open_checkpoint(source) as ckpt:
        found = sorted((int(m.group(2) or 0), n) for n in ckpt.names if (m := pattern.fullmatch(n)) is not None)
        if not found:
            return []
        value_keys = []
        if row.value_key is not None:
            for _, name in found:
                value = name[: -len(row.table_key)] + row.value_key
                if value not in ckpt:
                    raise fail(ckpt.weights_path, f"{value} beside {name}", "no such tensor")
                value_keys.append(value)
        want = (1, rows, head_dim) if row.leading_one else (rows, head_dim)
        for name in [n for _, n in found] + value_keys:
            _, shape = ckpt.info(name)
            if tuple(shape) != want:
                raise fail(
                    f"{ckpt.weights_path}: {name}",
                    f"shape {want} ({row.left_field}/{row.offset_field or row.right_field} and "
                    f"head width in config.json)",
                    str(tuple(shape)),
                )
    keys = tuple(n for _, n in found)
    return [
        ClippedRelativeSource(
            os.fspath(source),
            str(config.get("model_type")),
            row.name,
            keys[0],
            keys,
            rows,
            head_dim,
            row.sign,
            left,
            right,
            offset,
            block,
            symmetric,
            row.effect,
            row.beyond,
            tuple(value_keys),
        )
    ]
