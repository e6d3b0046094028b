"""SAM/ViTDet decomposed relative positions of vision checkpoints (kind ``decomposed_rel_pos``), numpy only.

Each attention layer of SAM's image encoder holds two learned tables, ``rel_pos_h`` and
``rel_pos_w``, of ``2 * S - 1`` rows by ``head_dim`` (``S``: the layer's window, or the whole
patch grid for a global layer); the bias they give is :mod:`flax_posenc.rel_pos_config`'s. Each
row of :data:`DECOMPOSED_REL_POS_FAMILIES` says where a model type keeps them and how each
layer's size follows from ``config.json``, read from transformers 5.24.0's ``modeling_*.py``:

==============================  =====================================  =========================
model_type                      tensors (any prefix), per layer ``i``  size of layer ``i``
==============================  =====================================  =========================
sam_vision_model, sam_hq_...,   ``layers.i.attn.rel_pos_h`` / ``_w``   ``window_size`` unless
got_ocr2_vision,                (``use_rel_pos``)                      ``i`` in
slanext_vision,                                                        ``global_attn_indexes``
pp_formulanet_vision,                                                  (then ``image_size /
deepseek_ocr2_sam_vision_model,                                        patch_size``); a window
unlimited_ocr_sam_vision_model                                         of 0: global
vitdet                          ``layer.i.attention.rel_pos_h`` / _w   ``window_size`` if ``i`` in
                                (``use_relative_position_embeddings``)  ``window_block_indices``
==============================  =====================================  =========================

Every one of them resamples a table to any other size (``get_rel_pos``): no limit. A table whose
rows are not ``2 * S - 1`` for its layer's size is refused (transformers builds them so).

>>> sorted(DECOMPOSED_REL_POS_FAMILIES)[:2]
['deepseek_ocr2_sam', 'got_ocr2_vision']
"""

from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

import numpy as np

from flax_posenc.conversion.grid_tables import GRID_FAMILIES
from flax_posenc.conversion.readers import fail, read_float
from flax_posenc.conversion.sources import open_checkpoint
from flax_posenc.grid_config import MAX_IMAGE_SIDE, image_grid, positive_pair
from flax_posenc.rel_pos_config import decomposed_rel_pos_float64, rel_pos_table_float64

__all__ = [
    "DECOMPOSED_REL_POS_FAMILIES",
    "DecomposedRelPosFamily",
    "DecomposedRelPosLayer",
    "DecomposedRelPosSource",
    "load_decomposed_rel_pos",
    "read_decomposed_rel_pos",
]

#: Layers a config may ask for (bounds the tables expected).
MAX_LAYERS = 4096


@dataclasses.dataclass(frozen=True)
class DecomposedRelPosFamily:
    """One model type's decomposed relative positions, as data (a row of :data:`DECOMPOSED_REL_POS_FAMILIES`).

    Attributes:
      name, model_types: our name and the ``config.json`` ``model_type`` values that mean it.
      attention: the attention module's name in a layer (``attn``, ``attention``).
      flag_field: the config field switching the tables on (``use_rel_pos``).
      windowed_field: ``("global", field)``: every layer but those listed is windowed (SAM's
        ``global_attn_indexes``); ``("windowed", field)``: only those listed are (ViTDet's
        ``window_block_indices``).
      interpolates: ``"always"`` (SAM: ``F.interpolate`` on every call, the identity at the
        stored length) or ``"when_differs"`` (ViTDet, SegGPT): the same values.
      tower: ``"vision"``.
    """

    name: str
    model_types: tuple[str, ...]
    attention: str = "attn"
    flag_field: str = "use_rel_pos"
    windowed_field: tuple[str, str] = ("global", "global_attn_indexes")
    interpolates: str = "always"
    tower: str = "vision"


def _sam(name: str, model_type: str) -> DecomposedRelPosFamily:
    return DecomposedRelPosFamily(name, (model_type,))


_SAM_ROWS = (
    _sam("sam_vision", "sam_vision_model"),
    _sam("sam_hq_vision", "sam_hq_vision_model"),
    _sam("got_ocr2_vision", "got_ocr2_vision"),
    _sam("slanext_vision", "slanext_vision"),
    _sam("pp_formulanet_vision", "pp_formulanet_vision"),
    _sam("deepseek_ocr2_sam", "deepseek_ocr2_sam_vision_model"),
    _sam("unlimited_ocr_sam", "unlimited_ocr_sam_vision_model"),
)

#: ViTDet's row: read only together with its learned grid (``embeddings.position_embeddings``, a
#: grid row another change adds): without that row ViTDet would count as read with its grid unread.
VITDET_ROW = DecomposedRelPosFamily(
    "vitdet",
    ("vitdet",),
    attention="attention",
    flag_field="use_relative_position_embeddings",
    windowed_field=("windowed", "window_block_indices"),
    interpolates="when_differs",
)

_VITDET_GRID_READ = any("vitdet" in row.model_types for row in GRID_FAMILIES.values())

DECOMPOSED_REL_POS_FAMILIES: Mapping[str, DecomposedRelPosFamily] = MappingProxyType(
    {row.name: row for row in (*_SAM_ROWS, *((VITDET_ROW,) if _VITDET_GRID_READ else ()))}
)


@dataclasses.dataclass(frozen=True)
class DecomposedRelPosLayer:
    """One attention layer's tables.

    Attributes:
      layer: its index; key_h, key_w: the tensors' names.
      size: ``(height, width)`` in patches the tables were built for (window or grid).
      windowed: a windowed layer (else global: the whole grid).
      rel_pos_h, rel_pos_w: ``(2 * size[0] - 1, head_dim)`` and ``(2 * size[1] - 1, head_dim)``.
    """

    layer: int
    key_h: str
    key_w: str
    size: tuple[int, int]
    windowed: bool
    rel_pos_h: np.ndarray = dataclasses.field(repr=False, compare=False)
    rel_pos_w: np.ndarray = dataclasses.field(repr=False, compare=False)

    def tables(self, q_size: tuple[int, int], k_size: tuple[int, int]) -> tuple[np.ndarray, np.ndarray]:
        """``(R_h, R_w)`` float64, ``(qh, kh, C)`` and ``(qw, kw, C)``: ``get_rel_pos`` of each table."""
        return (
            rel_pos_table_float64(self.rel_pos_h, q_size[0], k_size[0]),
            rel_pos_table_float64(self.rel_pos_w, q_size[1], k_size[1]),
        )

    def bias(self, query: np.ndarray, q_size: tuple[int, int], k_size: tuple[int, int] | None = None) -> np.ndarray:
        """float64 ``(batch, qh * qw, kh * kw)`` bias of an unscaled ``query`` ``(batch, qh * qw, C)``."""
        return decomposed_rel_pos_float64(query, self.rel_pos_h, self.rel_pos_w, q_size, k_size or q_size)


@dataclasses.dataclass(frozen=True)
class DecomposedRelPosSource:
    """SAM/ViTDet decomposed relative positions as a :class:`~flax_posenc.conversion.SourceRecord`.

    No limit: every table is resampled to any query/key size (``limit`` is ``None``); the sentence
    says which sizes the tables were trained at.

    Attributes:
      source, model_type, family: where it came from and its :data:`DECOMPOSED_REL_POS_FAMILIES` row.
      grid: ``(gh, gw)`` patches of ``image_size``; patch_size, image_size: from the config.
      interpolates: the row's ``interpolates``.
      attention_layers: one :class:`DecomposedRelPosLayer` per attention layer, in order (not
        ``layers``: a mechanism's ``layers`` are the indices a RoPE serves).
    """

    source: str
    model_type: str
    family: str
    grid: tuple[int, int]
    patch_size: tuple[int, int]
    image_size: tuple[int, int]
    interpolates: str
    attention_layers: tuple[DecomposedRelPosLayer, ...]

    scheme = "decomposed_rel_pos"

    @property
    def limit(self) -> None:
        return None

    @property
    def key(self) -> str:
        return self.attention_layers[0].key_h

    @property
    def head_dim(self) -> int:
        return int(self.attention_layers[0].rel_pos_h.shape[1])

    @property
    def name(self) -> str:
        return f"{self.family} decomposed relative positions ({len(self.attention_layers)} layers, {self.key}, ...) of {self.source}"

    def _sizes(self) -> str:
        groups: dict[tuple[tuple[int, int], bool], list[int]] = {}
        for layer in self.attention_layers:
            groups.setdefault((layer.size, layer.windowed), []).append(layer.layer)
        parts = []
        for (size, windowed), layers in groups.items():
            what = "window" if windowed else "global grid"
            parts.append(f"a {size[0]} x {size[1]} {what} (layers {', '.join(map(str, layers))})")
        return "; ".join(parts)

    def describe_limit(self) -> str:
        """``"... has no limit (tables of 2 S - 1 rows per axis, trained at a 14 x 14 window (layers
        0, 1) ...; resampled linearly to any other size by get_rel_pos)"``."""
        return (
            f"{self.name} has no limit (tables of 2 S - 1 rows per axis, trained at {self._sizes()}; "
            "resampled linearly to any other size by get_rel_pos)"
        )

    def check_length(self, length: int) -> tuple[bool, str]:
        """A token count is not what it limits: always fits."""
        return True, f"{self.describe_limit()}; it limits no token count"

    def to_dict(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "model_type": self.model_type,
            "family": self.family,
            "scheme": self.scheme,
            "grid": list(self.grid),
            "patch_size": list(self.patch_size),
            "image_size": list(self.image_size),
            "interpolates": self.interpolates,
            "head_dim": self.head_dim,
            "layers": [
                {
                    "layer": layer.layer,
                    "key_h": layer.key_h,
                    "key_w": layer.key_w,
                    "size": list(layer.size),
                    "windowed": layer.windowed,
                    "rows": [int(layer.rel_pos_h.shape[0]), int(layer.rel_pos_w.shape[0])],
                }
                for layer in self.attention_layers
            ],
            "limit": None,
            "sentence": self.describe_limit(),
        }

    def __str__(self) -> str:
        return "\n".join(
            [
                f"source:      {self.source}",
                f"family:      {self.family} (model_type {self.model_type})",
                f"scheme:      {self.scheme} ({len(self.attention_layers)} layers, head_dim {self.head_dim})",
                f"sizes:       {self._sizes()}",
                f"limit:       {self.describe_limit()}",
            ]
        )


def _int(config: Mapping[str, Any], field: str, where: str, low: int, high: int) -> int:
    value = config.get(field)
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise fail(f"{where}:{field}", f"{field} as an integer in {low}..{high}", repr(value)[:80])
    return value


def _indexes(config: Mapping[str, Any], field: str, where: str) -> set[int]:
    """A list of layer indices (an index past the last layer names no layer: transformers ignores it)."""
    value = config.get(field) or []
    if not isinstance(value, (list, tuple)) or any(
        isinstance(i, bool) or not isinstance(i, int) or not 0 <= i <= MAX_LAYERS for i in value
    ):
        raise fail(f"{where}:{field}", f"{field} as a list of layer indices in 0..{MAX_LAYERS}", repr(value)[:80])
    return set(value)


def read_decomposed_rel_pos(
    source: str | os.PathLike, row: DecomposedRelPosFamily, config: Mapping[str, Any], where: object = "config.json"
) -> list[DecomposedRelPosSource]:
    """The :class:`DecomposedRelPosSource` of a checkpoint of ``row``'s model types (``[]`` when
    its flag is off); only the ``rel_pos_h``/``rel_pos_w`` tensors are read.

    Raises:
      CheckpointError: an image size that is not a whole number of patches, a layer count, window
        or layer index out of range, tables missing or not one pair per layer, or a table whose
        rows are not ``2 * S - 1`` for its layer's size ``S`` or whose columns are not
        ``hidden_size / num_attention_heads`` (one line naming the file and the field or tensor).
    """
    if not config.get(row.flag_field, False):
        return []
    w = str(where)
    image = positive_pair(config.get("image_size"), "image_size", f"{w}:image_size", MAX_IMAGE_SIDE)
    patch = positive_pair(config.get("patch_size"), "patch_size", f"{w}:patch_size", MAX_IMAGE_SIDE)
    grid = image_grid(image, patch, where=f"{w}:image_size")
    n = _int(config, "num_hidden_layers", w, 1, MAX_LAYERS)
    hidden = _int(config, "hidden_size", w, 1, 1 << 20)
    heads = _int(config, "num_attention_heads", w, 1, hidden)
    window = _int(config, "window_size", w, 0, MAX_IMAGE_SIDE)
    mode, field = row.windowed_field
    listed = _indexes(config, field, w)
    ckpt = open_checkpoint(source)
    pattern = re.compile(rf"(?:^|\.)(?:layers?|blocks)\.(\d+)\.{re.escape(row.attention)}\.rel_pos_([hw])$")
    found: dict[tuple[int, str], list[str]] = {}
    for key in ckpt.reader.keys():
        m = pattern.search(key)
        if m:
            found.setdefault((int(m.group(1)), m.group(2)), []).append(key)
    layers = []
    for i in range(n):
        windowed = (i not in listed) if mode == "global" else (i in listed)
        size = (window, window) if windowed and window > 0 else grid
        keys = []
        for axis in "hw":
            hits = sorted(found.get((i, axis), []))
            if len(hits) != 1:
                expected = f"one *layers.{i}.{row.attention}.rel_pos_{axis} ({row.flag_field} is set)"
                raise fail(ckpt.weights_path, expected, ", ".join(hits[:4]) or "none")
            keys.append(hits[0])
        tables = []
        for key, side in zip(keys, size):
            table = read_float(ckpt.reader, key, ndim=2, what="relative position table", dim=hidden // heads)
            if table.shape[0] != 2 * side - 1:
                raise fail(
                    f"{ckpt.weights_path}:{key}",
                    f"{2 * side - 1} rows (2 * {side} - 1 for the layer's {'window' if windowed else 'grid'} of {side})",
                    f"{table.shape[0]} rows",
                )
            tables.append(table)
        layers.append(DecomposedRelPosLayer(i, keys[0], keys[1], size, windowed, tables[0], tables[1]))
    extra = sorted(k for (i, _), ks in found.items() if i >= n for k in ks)
    if extra:
        raise fail(ckpt.weights_path, f"relative position tables of {n} layers (num_hidden_layers)", extra[0])
    return [
        DecomposedRelPosSource(
            os.fspath(source),
            str(config.get("model_type")),
            row.name,
            grid,
            patch,
            image,
            row.interpolates,
            tuple(layers),
        )
    ]


def load_decomposed_rel_pos(source: str | os.PathLike, *, family: str | None = None) -> DecomposedRelPosSource:
    """The decomposed relative positions of a SAM-style vision checkpoint.

    Raises:
      CheckpointError: not a model type of :data:`DECOMPOSED_REL_POS_FAMILIES` (or ``family`` not a
        row), its flag off, or as :func:`read_decomposed_rel_pos`.
    """
    ckpt = open_checkpoint(source)
    config = ckpt.config
    where = ckpt.config_path or ckpt.weights_path
    model_type = str(config.get("model_type", "")).replace("-", "_")
    row = (
        DECOMPOSED_REL_POS_FAMILIES.get(family)
        if family is not None
        else next((r for r in DECOMPOSED_REL_POS_FAMILIES.values() if model_type in r.model_types), None)
    )
    if row is None:
        raise fail(
            where,
            "a model type with decomposed relative positions: "
            + ", ".join(t for r in DECOMPOSED_REL_POS_FAMILIES.values() for t in r.model_types),
            repr(family) if family is not None else f"model_type {config.get('model_type')!r}",
        )
    records = read_decomposed_rel_pos(source, row, config, where)
    if not records:
        raise fail(f"{where}:{row.flag_field}", f"{row.flag_field} true", repr(config.get(row.flag_field)))
    return records[0]
