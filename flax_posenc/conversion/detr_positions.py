"""DETR-family 2-D position embeddings of the feature map: one row per model type (numpy only).

A DETR-style detector flattens its backbone's feature map into the encoder's tokens and adds to
each cell a 2-D position embedding computed from the pixel mask (1 = image, 0 = padding),
downsampled to the feature map: the sine embedding (``position_embedding_type == "sine"``, the
default: no limit, any feature map) or two learned tables of 50 rows (``"learned"``: 50
feature-map rows and 50 columns at most). The formulas are
:class:`~flax_posenc.detr_config.DetrSineConfig`'s; each row of :data:`DETR_POSITION_FAMILIES`
says which variant a model type uses, read from transformers 5.24.0's ``modeling_*.py``:

===================  ==========================  ======  ==========  ==========================
model_type           channels per axis           offset  temperature  learned tables
===================  ==========================  ======  ==========  ==========================
detr                 ``d_model // 2``            0       10000        ``position_embedding.*``
conditional_detr     ``d_model // 2``            0       10000        ``position_embedding.*``
table-transformer    ``d_model // 2``            0       10000        ``backbone.position_embedding.*``
deformable_detr      ``d_model // 2``            -0.5    10000        ``position_embedding.*``
dab-detr             ``hidden_size // 2``        0       ``temperature_height`` / ``_width``; none
rt_detr (+ _v2),     ``encoder_hidden_dim // 2`` -1      ``positional_encoding_temperature``; none
d_fine, deimv2
===================  ==========================  ======  ==========  ==========================

RT-DETR (``build_2d_sinusoidal_position_embedding``, float64 then cast) takes no mask: raw
positions ``0 .. H - 1`` (no ``normalize``), ``[sin | cos]`` blocks per axis, on its encoder's
AIFI level; with ``eval_size`` set its eval forward adds no position embedding at all (refused).

All normalize (``eps`` 1e-6, ``scale`` 2 pi; DAB-DETR: ``sine_position_embedding_scale``), lay
each axis out interleaved (``sin, cos`` per frequency) and put ``y`` before ``x``; the learned
tables put the column (``x``) first.

Not read here (each model type's own row says what it holds beside this): the object queries
(``query_position_embeddings``: ``num_queries`` learned decoder inputs, one per detection slot,
not positions of the image), deformable DETR's ``level_embed`` (one vector per feature level),
DAB-DETR's anchor boxes and the sine of them. A ``backbone_config`` is the backbone's own
model type (ResNet: no positions).

>>> row = DETR_POSITION_FAMILIES["deformable_detr"]
>>> sine_config(row, {"d_model": 256}).offset
-0.5
"""

from __future__ import annotations

import dataclasses
import math
import os
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

import numpy as np

from flax_posenc.conversion.readers import fail, read_float
from flax_posenc.conversion.sources import open_checkpoint
from flax_posenc.detr_config import DetrSineConfig
from flax_posenc.limits import describe_limit

__all__ = ["DETR_POSITION_FAMILIES", "DetrPositionFamily", "DetrPositions", "read_detr_positions", "sine_config"]

#: What a record's limit sentence says the unit is.
UNIT = "feature-map cells"


@dataclasses.dataclass(frozen=True)
class DetrPositionFamily:
    """One model type's DETR position embedding, as data (a row of :data:`DETR_POSITION_FAMILIES`).

    Attributes:
      name, model_types: our name and the ``config.json`` ``model_type`` values that mean it.
      width_field: the config field whose half is ``num_pos_feats`` (``d_model``, ``hidden_size``).
      offset: added to the counts (deformable DETR: -0.5).
      temperature_fields: ``(y field, x field)`` of the temperatures (DAB-DETR), else ``None``
        (10000 for both).
      scale_field: the config field of ``scale`` (``None``: 2 pi).
      learned_suffix: the learned tables' key without ``row_embeddings.weight`` /
        ``column_embeddings.weight`` and the checkpoint's prefix; ``None``: no learned variant.
      type_field: the config field choosing ``"sine"`` or ``"learned"`` (``None``: always sine).
      normalize, layout: as :class:`~flax_posenc.detr_config.DetrSineConfig`'s (RT-DETR: raw
        positions ``0 .. H - 1``, ``[sin | cos]`` blocks).
      refuse_fields: ``(config field, why)``: a set (non-null) field is refused in one line (RT-DETR's
        ``eval_size``: with it, transformers' eval forward adds no position embedding at all).
      tower: ``"vision"``.
    """

    name: str
    model_types: tuple[str, ...]
    width_field: str = "d_model"
    offset: float = 0.0
    temperature_fields: tuple[str, str] | None = None
    scale_field: str | None = None
    learned_suffix: str | None = "position_embedding."
    type_field: str | None = "position_embedding_type"
    normalize: bool = True
    layout: str = "interleaved"
    refuse_fields: tuple[tuple[str, str], ...] = ()
    tower: str = "vision"


DETR_POSITION_FAMILIES: Mapping[str, DetrPositionFamily] = MappingProxyType(
    {
        row.name: row
        for row in (
            DetrPositionFamily("detr", ("detr",)),
            DetrPositionFamily("conditional_detr", ("conditional_detr",)),
            DetrPositionFamily(
                "table_transformer", ("table-transformer",), learned_suffix="backbone.position_embedding."
            ),
            DetrPositionFamily("deformable_detr", ("deformable_detr",), offset=-0.5),
            DetrPositionFamily(
                "dab_detr",
                ("dab-detr",),
                width_field="hidden_size",
                temperature_fields=("temperature_height", "temperature_width"),
                scale_field="sine_position_embedding_scale",
                learned_suffix=None,
                type_field=None,
            ),
            *(
                DetrPositionFamily(
                    name,
                    (name,),
                    width_field="encoder_hidden_dim",
                    offset=-1.0,
                    temperature_fields=("positional_encoding_temperature", "positional_encoding_temperature"),
                    learned_suffix=None,
                    type_field=None,
                    normalize=False,
                    layout="blocks",
                    refuse_fields=(
                        (
                            "eval_size",
                            "null (with eval_size set, transformers' eval forward adds no position embedding)",
                        ),
                    ),
                )
                for name in ("rt_detr", "rt_detr_v2", "d_fine", "deimv2")
            ),
        )
    }
)


def _field(config: Mapping[str, Any], field: str) -> Any:
    """``config[field]``; a dotted field (``decoder_config.d_model``) reads a sub-config's."""
    head, _, rest = field.partition(".")
    value = config.get(head)
    return _field(value, rest) if rest and isinstance(value, Mapping) else (None if rest else value)


def _positive_int(config: Mapping[str, Any], field: str, where: object) -> int:
    value = _field(config, field)
    if isinstance(value, bool) or not isinstance(value, int) or value < 4 or value % 4:
        raise fail(f"{where}:{field}", f"{field} as a positive multiple of 4", repr(value)[:80])
    return value


def _positive_float(config: Mapping[str, Any], field: str, where: object, default: float) -> float:
    value = config.get(field, default)
    if value is None:
        value = default
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < math.inf:
        raise fail(f"{where}:{field}", f"{field} as a positive finite number", repr(value)[:80])
    return float(value)


def sine_config(row: DetrPositionFamily, config: Mapping[str, Any], where: object = "config.json") -> DetrSineConfig:
    """The :class:`~flax_posenc.detr_config.DetrSineConfig` of a parsed ``config.json`` of ``row``'s
    model types.

    Raises:
      CheckpointError: a width that is not a positive multiple of 4, a temperature or scale that
        is not a positive finite number (one line naming the file and the field).
    """
    width = _positive_int(config, row.width_field, where)
    th = tw = 10000.0
    if row.temperature_fields is not None:
        th = _positive_float(config, row.temperature_fields[0], where, 10000.0)
        tw = _positive_float(config, row.temperature_fields[1], where, 10000.0)
    scale = _positive_float(config, row.scale_field, where, 2 * math.pi) if row.scale_field else 2 * math.pi
    return DetrSineConfig(
        width // 2,
        temperature_height=th,
        temperature_width=tw,
        scale=scale,
        offset=row.offset,
        normalize=row.normalize,
        layout="blocks" if row.layout == "blocks" else "interleaved",
    )


@dataclasses.dataclass(frozen=True)
class DetrPositions:
    """A DETR-family position embedding as a :class:`~flax_posenc.conversion.SourceRecord`.

    What it limits is the feature map, not a token count: ``limit`` is ``None`` (as a vision
    grid's), and :meth:`check_feature_map` asks about a ``H x W`` map. The sine variant has no
    limit; the learned one holds ``rows`` feature-map rows and ``columns`` columns (50 each).

    Attributes:
      source, model_type, family: where it came from and its :data:`DETR_POSITION_FAMILIES` row.
      variant: ``"sine"`` or ``"learned"``.
      sine: the sine variant's :class:`~flax_posenc.detr_config.DetrSineConfig` (learned: ``None``).
      key: the learned row table's tensor name (sine: ``None``); column_key: the column table's.
      row_embeddings, column_embeddings: the learned ``(50, F)`` tables (sine: ``None``).
      num_pos_feats: channels per axis (the embedding has twice as many).
    """

    source: str
    model_type: str
    family: str
    variant: str
    num_pos_feats: int
    sine: DetrSineConfig | None = None
    key: str | None = None
    column_key: str | None = None
    row_embeddings: np.ndarray | None = dataclasses.field(default=None, repr=False, compare=False)
    column_embeddings: np.ndarray | None = dataclasses.field(default=None, repr=False, compare=False)

    scheme = "detr_positions"

    @property
    def limit(self) -> None:
        return None

    @property
    def feature_limit(self) -> tuple[int, int] | None:
        """``(rows, columns)`` of feature-map cells the learned tables hold; ``None`` (sine): no limit."""
        if self.row_embeddings is None or self.column_embeddings is None:
            return None
        return int(self.row_embeddings.shape[0]), int(self.column_embeddings.shape[0])

    @property
    def name(self) -> str:
        what = f"{self.model_type} {self.variant} 2-D position embedding"
        where = f" ({self.key}, {self.column_key})" if self.key else ""
        return f"{what}{where} of {self.source}"

    def describe_limit(self) -> str:
        """``"... has no limit (sine of the pixel mask: any feature map, unit feature-map cells)"``, or
        ``"... holds 50 feature-map rows (0..49) and 50 feature-map columns (0..49)"``."""
        limit = self.feature_limit
        if limit is None:
            return f"{self.name} has no limit (sine of the pixel mask: any feature map, unit {UNIT})"
        rows = describe_limit(self.name, limit[0], unit="feature-map row")
        return f"{rows} and {limit[1]} feature-map columns (0..{limit[1] - 1})"

    def check_length(self, length: int) -> tuple[bool, str]:
        """A token count is not what it limits: always fits, and the line says to ask about the feature map."""
        return True, f"{self.describe_limit()}; it limits the feature map, not a token count"

    def check_feature_map(self, height: int, width: int) -> tuple[bool, str]:
        """Whether a ``height x width`` feature map fits, and one line saying so."""
        limit = self.feature_limit
        if limit is None or (height <= limit[0] and width <= limit[1]):
            return True, f"ok: a {height} x {width} feature map fits; {self.describe_limit()}"
        past = [
            f"{height - limit[0]} rows" if height > limit[0] else "",
            f"{width - limit[1]} columns" if width > limit[1] else "",
        ]
        return (
            False,
            f"{self.describe_limit()}; asked for a {height} x {width} feature map: {' and '.join(p for p in past if p)} past the limit",
        )

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "source": self.source,
            "model_type": self.model_type,
            "family": self.family,
            "scheme": self.scheme,
            "variant": self.variant,
            "num_pos_feats": self.num_pos_feats,
            "channels": 2 * self.num_pos_feats,
            "unit": UNIT,
            "feature_limit": None if self.feature_limit is None else list(self.feature_limit),
            "limit": None,
        }
        if self.sine is not None:
            s = self.sine
            out.update(
                temperature_height=s.temperature_height,
                temperature_width=s.temperature_width,
                normalize=s.normalize,
                scale=s.scale,
                eps=s.eps,
                offset=s.offset,
                order=s.order,
                layout=s.layout,
            )
        else:
            out.update(key=self.key, column_key=self.column_key)
        return out

    def __str__(self) -> str:
        lines = [f"source:      {self.source}", f"family:      {self.family} (model_type {self.model_type})"]
        lines.append(f"scheme:      {self.scheme} ({self.variant}, {2 * self.num_pos_feats} channels)")
        if self.sine is not None:
            s = self.sine
            lines.append(
                f"sine:        temperature {s.temperature_height:g} (y) / {s.temperature_width:g} (x), "
                f"normalize {s.normalize}, scale {s.scale:.6g}, eps {s.eps:g}, offset {s.offset:g}, "
                f"order {s.order}, {s.layout}"
            )
        else:
            lines.append(f"keys:        {self.key}, {self.column_key}")
        lines.append(f"limit:       {self.describe_limit()}")
        return "\n".join(lines)


def read_detr_positions(
    source: str | os.PathLike, row: DetrPositionFamily, config: Mapping[str, Any], where: object
) -> DetrPositions:
    """The :class:`DetrPositions` of a checkpoint of ``row``'s model types (the learned tables are
    the only tensors read).

    Raises:
      CheckpointError: a ``position_embedding_type`` that is neither ``"sine"`` nor
        ``"learned"`` (or ``"learned"`` for a model type without tables), a width, temperature or
        scale that is not valid, learned tables that are missing, not one each, not ``(rows, F)``
        of the width ``d_model // 2`` (one line naming the file and the field or tensor).
    """
    for field, expected in row.refuse_fields:
        if config.get(field) is not None:
            raise fail(f"{where}:{field}", f"{field} {expected}", repr(config.get(field))[:80])
    kind = "sine" if row.type_field is None else config.get(row.type_field, "sine")
    allowed = ("sine", "learned") if row.learned_suffix else ("sine",)
    if kind not in allowed:
        raise fail(f"{where}:{row.type_field}", " or ".join(repr(a) for a in allowed), repr(kind)[:80])
    text = os.fspath(source)
    model_type = str(config.get("model_type"))
    if kind == "sine":
        cfg = sine_config(row, config, where)
        return DetrPositions(text, model_type, row.name, "sine", int(cfg.num_pos_feats), sine=cfg)
    width = _positive_int(config, row.width_field, where)
    ckpt = open_checkpoint(source)
    tables = []
    for part in ("row_embeddings.weight", "column_embeddings.weight"):
        suffix = f"{row.learned_suffix}{part}"
        keys = sorted(k for k in ckpt.reader.keys() if k == suffix or k.endswith("." + suffix))
        if len(keys) != 1:
            raise fail(ckpt.weights_path, f"one learned DETR table *{suffix}", ", ".join(keys[:4]) or "none")
        table = read_float(ckpt.reader, keys[0], ndim=2, what="learned DETR position table", dim=width // 2)
        tables.append((keys[0], table))
    (row_key, rows), (column_key, columns) = tables
    return DetrPositions(
        text,
        model_type,
        row.name,
        "learned",
        width // 2,
        key=row_key,
        column_key=column_key,
        row_embeddings=rows,
        column_embeddings=columns,
    )


# ----------------------------------------------------------------------------- heads' own positions (issue 35 item 4)
# One block of its own, joined to the registry: segmentation and layout heads whose position module is
# DETR's sine (mask-free: a mask of ones, transformers passes none) or RT-DETR's
# build_2d_sinusoidal_position_embedding. A head with two position modules has one row per module.


@dataclasses.dataclass(frozen=True)
class DetrHeadPositionFamily(DetrPositionFamily):
    """A row of a head's own position module (:class:`DetrPositionFamily` plus where it sits).

    Attributes:
      module: the module's attribute path in transformers' model, as a name suffix
        (``pixel_level_module.decoder.position_embedding``): what the conformance case compares.
      key_suffix: what tells two rows of one model type apart (the module's place).
      not_positions: modules named like positions that take none (PP-DocLayout V4's
        ``relative_order_head``: a pairwise reading-order scorer of the decoder's queries, an output).
    """

    module: str = ""
    key_suffix: str = ""
    not_positions: tuple[str, ...] = ()


def _head(name: str, model_type: str, width_field: str, module: str) -> DetrHeadPositionFamily:
    return DetrHeadPositionFamily(
        name,
        (model_type,),
        width_field=width_field,
        learned_suffix=None,
        type_field=None,
        module=module,
        key_suffix=module,
    )


def _rt_head(name: str, not_positions: tuple[str, ...] = ()) -> DetrHeadPositionFamily:
    rt = DETR_POSITION_FAMILIES["rt_detr"]
    return DetrHeadPositionFamily(
        name,
        (name,),
        width_field=rt.width_field,
        offset=rt.offset,
        temperature_fields=rt.temperature_fields,
        learned_suffix=None,
        type_field=None,
        normalize=False,
        layout="blocks",
        refuse_fields=rt.refuse_fields,
        module="position_embedding",
        key_suffix="position_embedding",
        not_positions=not_positions,
    )


_HEAD_ROWS = (
    # Mask2Former: the pixel decoder's (feature_size // 2 per axis) and the transformer decoder's (hidden_dim // 2)
    _head("mask2former_pixel_decoder", "mask2former", "feature_size", "pixel_level_module.decoder.position_embedding"),
    _head("mask2former_decoder", "mask2former", "hidden_dim", "transformer_module.position_embedder"),
    # OneFormer: the pixel decoder's (conv_dim // 2) and the transformer decoder's (hidden_dim // 2)
    _head("oneformer_pixel_decoder", "oneformer", "conv_dim", "pixel_level_module.decoder.position_embedding"),
    _head("oneformer_decoder", "oneformer", "hidden_dim", "transformer_module.position_embedder"),
    # MaskFormer: its DETR decoder's width (decoder_config.d_model // 2)
    _head("maskformer_decoder", "maskformer", "decoder_config.d_model", "transformer_module.position_embedder"),
    # PP-DocLayout V3/V4: RT-DETR's AIFI position embedding. Not here: PP-DocLayout V2 (its reading-order
    # model adds a bucketed relative bias and a box relation embedding, not read) and SAM 2's vision neck
    # (Sam2SinePositionEmbedding: _head("sam2_vision_neck", "sam2_vision_model", "fpn_hidden_size",
    # "neck.position_encoding") reads it, but its backbone sam2_hiera_det_model's grid is not read yet).
    _rt_head("pp_doclayout_v3"),
    _rt_head("pp_doclayout_v4", not_positions=("relative_order_head.",)),
)
DETR_POSITION_FAMILIES = MappingProxyType({**DETR_POSITION_FAMILIES, **{row.name: row for row in _HEAD_ROWS}})
