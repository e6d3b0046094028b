"""Window relative position bias tables of vision checkpoints (kind ``window_bias``), numpy only.

Each row of :data:`WINDOW_BIAS_FAMILIES` says where a model type keeps its bias and how its
sizes follow from ``config.json``, read from transformers 5.24.0's ``modeling_*.py``:

=================  ===============================================  ============================
model_type         tensors (any prefix), one per layer              window of each layer
=================  ===============================================  ============================
swin               ...relative_position_bias.relative_position...   ``window_size``
                   _bias_table ``((2w-1)^2, num_heads[stage])``
donut-swin,        ...attention.self.relative_position_bias_table   ``window_size`` (the stored
maskformer-swin    (+ the stored ``relative_position_index``)       index is checked against ours)
swinv2             ...continuous_position_bias_mlp.{0,2}.weight,    ``min(stage grid, window_size)``;
                   .0.bias (``cpb_mlp``: 2 -> 512 -> heads)         ``pretrained_window_sizes``
swin2sr            the same MLP, every stage on the full grid       ``min(grid, window_size)``
beit,              ...relative_position_bias_table ``((2g-1)^2+3,   the grid ``image_size /
data2vec-vision    num_attention_heads)``: per layer                patch_size`` + a class token
                   (``use_relative_position_bias``) and/or shared
                   (``use_shared_relative_position_bias``)
=================  ===============================================  ============================

A Swin stage ``i`` sees a grid of ``image_size / patch_size / 2**i`` patches (Swin2SR: no
merging), and a window larger than a Swin stage's grid fails in transformers (the table does
not fit the shrunk window): refused here. SwinV2 and Swin2SR clamp the window to the grid when
they are built; the tables here are those clamped windows'. A model with an absolute position
grid besides (``use_absolute_embeddings``, BEiT's ``use_absolute_position_embeddings``) is
refused naming the field: that grid is not read.

>>> sorted(WINDOW_BIAS_FAMILIES)[:3]
['beit', 'data2vec_vision', 'donut_swin']
"""

from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

import numpy as np

from flax_posenc.conversion.readers import fail, read_float
from flax_posenc.conversion.sources import open_checkpoint
from flax_posenc.grid_config import MAX_IMAGE_SIDE, image_grid, positive_pair
from flax_posenc.limits import describe_grid
from flax_posenc.window_bias_config import (
    CPB_SCALE,
    check_table_rows,
    log_spaced_coords,
    num_relative_positions,
    relative_position_index,
    resize_table,
    window_pair,
)

__all__ = [
    "WINDOW_BIAS_FAMILIES",
    "WindowBiasFamily",
    "WindowBiasLayer",
    "WindowBiasSource",
    "load_window_bias",
    "read_window_bias",
]

#: Most layers read from one checkpoint (bounds the loop over tensors).
MAX_LAYERS = 4096


@dataclasses.dataclass(frozen=True)
class WindowBiasFamily:
    """One model type's window bias, as data.

    Attributes:
      name: our name; model_types: ``config.json`` values that mean it.
      layout: ``"swin"`` (a table per block, per-stage heads), ``"continuous"`` (SwinV2's MLP per
        block) or ``"beit"`` (the grid + class token, per layer and/or shared).
      table_suffix: the tensor name's end (the MLP's first weight for ``"continuous"``).
      index_suffix: a stored ``relative_position_index`` beside the table (checked), or ``None``.
      merges: a Swin stage halves the grid (Swin2SR: ``False``).
      pretrained_field: SwinV2's per-stage ``pretrained_window_sizes`` field, or ``None``.
      absolute_field: the config flag of an absolute grid that is not read (refused when set).
      resize: the :data:`~flax_posenc.window_bias_config.WINDOW_RESIZES` row for another window
        (transformers' own for BEiT, timm's for Swin; ``None``: computed, no resize).
      tower: ``"vision"``.
    """

    name: str
    model_types: tuple[str, ...]
    layout: str
    table_suffix: str = "relative_position_bias_table"
    index_suffix: str | None = None
    merges: bool = True
    pretrained_field: str | None = None
    absolute_field: str = "use_absolute_embeddings"
    resize: str | None = "timm"
    tower: str = "vision"


_MLP = "continuous_position_bias_mlp.0.weight"

WINDOW_BIAS_FAMILIES: Mapping[str, WindowBiasFamily] = MappingProxyType(
    {
        row.name: row
        for row in (
            WindowBiasFamily("swin", ("swin",), "swin"),
            WindowBiasFamily("donut_swin", ("donut-swin",), "swin", index_suffix="relative_position_index"),
            WindowBiasFamily("maskformer_swin", ("maskformer-swin",), "swin", index_suffix="relative_position_index"),
            WindowBiasFamily(
                "swinv2", ("swinv2",), "continuous", _MLP, pretrained_field="pretrained_window_sizes", resize=None
            ),
            WindowBiasFamily("swin2sr", ("swin2sr",), "continuous", _MLP, merges=False, resize=None),
            WindowBiasFamily(
                "beit", ("beit",), "beit", absolute_field="use_absolute_position_embeddings", resize="transformers"
            ),
            WindowBiasFamily(
                "data2vec_vision",
                ("data2vec-vision",),
                "beit",
                absolute_field="use_absolute_position_embeddings",
                resize="transformers",
            ),
        )
    }
)


@dataclasses.dataclass(frozen=True)
class WindowBiasLayer:
    """One attention layer's bias (or BEiT's shared one).

    Attributes:
      key: the tensor's name; label: ``"stage 0 block 1"``, ``"layer 3"`` or ``"shared"``.
      window: ``(h, w)`` patches this layer's table serves (BEiT: the grid).
      num_heads: heads; class_token: BEiT's class token first (3 more rows).
      table: ``(rows, heads)`` as stored (``None`` for SwinV2).
      mlp: SwinV2's ``(w1 (hidden, 2), b1 (hidden,), w2 (heads, hidden))``, else ``None``.
      pretrained_window: SwinV2's normalising window (``(0, 0)``: the layer's own).
    """

    key: str
    label: str
    window: tuple[int, int]
    num_heads: int
    class_token: bool = False
    table: np.ndarray | None = None
    mlp: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None
    pretrained_window: tuple[int, int] = (0, 0)

    @property
    def continuous(self) -> bool:
        return self.mlp is not None

    def table_for(self, window: Any = None, *, convention: str = "timm") -> np.ndarray:
        """float64 ``(rows, heads)`` of ``window`` (``None``: this layer's): the stored table,
        resized by ``convention`` (:func:`~flax_posenc.window_bias_config.resize_table`), or
        SwinV2's MLP output before the sigmoid."""
        window = self.window if window is None else window_pair(window)
        if self.mlp is not None:
            w1, b1, w2 = (np.asarray(x, np.float64) for x in self.mlp)
            coords = log_spaced_coords(window, self.pretrained_window)
            return np.maximum(coords @ w1.T + b1, 0.0) @ w2.T
        assert self.table is not None
        if window == self.window:
            return np.asarray(self.table, np.float64)
        return resize_table(self.table, self.window, window, class_token=self.class_token, convention=convention)

    def bias(self, window: Any = None, *, convention: str = "timm") -> np.ndarray:
        """float64 ``(heads, N, N)``: what this layer adds to its attention logits (SwinV2:
        ``16 * sigmoid``), the float64 reference of :func:`flax_posenc.window_bias`."""
        window = self.window if window is None else window_pair(window)
        table = self.table_for(window, convention=convention)
        index = relative_position_index(window, class_token=self.class_token)
        out = table[index].transpose(2, 0, 1)
        return CPB_SCALE / (1.0 + np.exp(-out)) if self.mlp is not None else out


def _ints(key: str) -> tuple[int, ...]:
    return tuple(int(x) for x in re.findall(r"(?:^|\.)(\d+)(?=\.)", key))


def _list(config: Mapping[str, Any], field: str, where: str, n: int | None = None) -> list[int]:
    value = config.get(field)
    if not isinstance(value, (list, tuple)) or not value or len(value) > MAX_LAYERS:
        raise fail(f"{where}{field}", f"{field} as a non-empty list of positive integers", repr(value)[:80])
    out = [positive_pair(v, field, f"{where}{field}", MAX_LAYERS)[0] for v in value]
    if n is not None and len(out) != n:
        raise fail(f"{where}{field}", f"{n} entries (one per stage of depths)", f"{len(out)} entries")
    return out


@dataclasses.dataclass(frozen=True)
class WindowBiasSource:
    """A checkpoint's window bias tables as a :class:`~flax_posenc.conversion.SourceRecord`
    (a ``window_bias`` mechanism).

    A window limits the *window*, not a token count: ``limit`` is ``None``; the sentence says
    what the tables hold (:meth:`describe_limit`): a Swin window of ``w x w`` patches (a larger
    window needs a resized table: timm's convention), BEiT's grid ``image_size / patch_size`` plus
    its class token (another grid: transformers resizes the table bilinearly), SwinV2's MLP (any
    window). :meth:`check_image_size` asks about an image.
    """

    source: str
    family: str
    model_type: str
    layers: tuple[WindowBiasLayer, ...]
    image_size: tuple[int, int]
    patch_size: tuple[int, int]
    stage_grids: tuple[tuple[int, int], ...] = ()

    scheme = "window_bias"

    @property
    def row(self) -> WindowBiasFamily:
        return WINDOW_BIAS_FAMILIES[self.family]

    @property
    def key(self) -> str:
        return self.layers[0].key

    @property
    def keys(self) -> tuple[str, ...]:
        """Every tensor read (SwinV2: the MLP's three per layer)."""
        out: list[str] = []
        for layer in self.layers:
            if layer.mlp is None:
                out.append(layer.key)
            else:
                base = layer.key[: -len(".0.weight")]
                out += [layer.key, f"{base}.0.bias", f"{base}.2.weight"]
        return tuple(out)

    @property
    def limit(self) -> None:
        return None

    @property
    def grid(self) -> tuple[int, int]:
        """``image_size / patch_size`` patches."""
        return self.image_size[0] // self.patch_size[0], self.image_size[1] // self.patch_size[1]

    @property
    def window(self) -> tuple[int, int]:
        """The largest window of its layers (BEiT: the grid)."""
        return max(layer.window for layer in self.layers)

    @property
    def name(self) -> str:
        kind = "continuous window bias (cpb_mlp" if self.row.layout == "continuous" else "window bias ("
        count = f"{len(self.layers)} {'layer' if self.row.layout == 'continuous' else 'table'}"
        name = f"{self.family} {kind}{', ' if self.row.layout == 'continuous' else ''}{count}{'' if len(self.layers) == 1 else 's'})"
        return f"{name} of {self.source}" if self.source else name

    def describe_limit(self) -> str:
        """``"swin window bias (4 tables) of SRC holds the offsets of a 7 x 7 window of patches
        (169 rows per head); a larger window needs a resized table (timm)"``."""
        h, w = self.window
        if self.row.layout == "beit":
            detail = f"{self.image_size[0]} px / {self.patch_size[0]}; {num_relative_positions((h, w), class_token=True)} rows per head"
            return (
                describe_grid(self.name, (h, w), 1, detail)
                + "; another grid resizes the table (transformers: bilinear)"
            )
        if self.row.layout == "continuous":
            windows = sorted({layer.window for layer in self.layers})
            text = ", ".join(f"{a} x {b}" for a, b in windows)
            return f"{self.name} computes the bias of any window from its MLPs (built for {text} windows of patches)"
        rows = num_relative_positions((h, w))
        return (
            f"{self.name} holds the offsets of a {h} x {w} window of patches ({rows} rows per head); "
            f"a larger window needs a resized table (timm)"
        )

    def check_length(self, length: int) -> tuple[bool, str]:
        """A token count is not what a window limits: always fits, and the line says so."""
        return True, f"{self.describe_limit()}; it limits the window, not a token count"

    def check_image_size(self, image_size: Any) -> tuple[bool, str]:
        """``(True, line)`` when an image of ``image_size`` px runs on the tables as stored.

        BEiT: the trained grid (another grid resizes the table); Swin: every stage's grid at least
        the window (a smaller one fails in transformers); SwinV2: always (the MLP computes any window).

        Raises:
          CheckpointError: ``image_size`` not a positive integer (or pair), or not a whole number
            of patches (one line naming ``--image-size``).
        """
        gh, gw = image_grid(image_size, self.patch_size, where="--image-size")
        if self.row.layout == "beit":
            if (gh, gw) == self.grid:
                return True, f"{self.describe_limit()}; a {gh} x {gw} grid fits"
            return (
                False,
                f"{self.describe_limit()}; a {gh} x {gw} grid needs the table resized (fp.resize_window_table)",
            )
        if self.row.layout == "continuous":
            return True, f"{self.describe_limit()}; a {gh} x {gw} grid fits"
        h, w = self.window
        stages = len(self.stage_grids) or 1
        small = (gh >> (stages - 1), gw >> (stages - 1)) if self.row.merges else (gh, gw)
        if min(small) >= min(h, w):
            return True, f"{self.describe_limit()}; a {gh} x {gw} grid fits (last stage {small[0]} x {small[1]})"
        return False, (
            f"{self.describe_limit()}; a {gh} x {gw} grid leaves {small[0]} x {small[1]} patches at the last stage, "
            f"smaller than the window"
        )

    def to_dict(self) -> dict[str, Any]:
        first = self.layers[0]
        return {
            "source": self.source,
            "family": self.family,
            "key": self.key,
            "scheme": self.scheme,
            "model_type": self.model_type,
            "layout": self.row.layout,
            "window": list(self.window),
            "windows": [list(layer.window) for layer in self.layers],
            "heads": [layer.num_heads for layer in self.layers],
            "class_token": first.class_token,
            "rows": None if first.table is None else int(first.table.shape[0]),
            "grid": list(self.grid),
            "image_size": list(self.image_size),
            "patch_size": list(self.patch_size),
            "resize": self.row.resize,
            "layers": len(self.layers),
            "limit": self.limit,
            "sentence": self.describe_limit(),
        }

    def __str__(self) -> str:
        first = self.layers[0]
        rows = "an MLP" if first.table is None else f"{first.table.shape[0]} rows"
        return "\n".join(
            [
                f"source:      {self.source}",
                f"family:      {self.family} (model_type {self.model_type})",
                f"key:         {self.key}",
                "scheme:      window_bias",
                f"layers:      {len(self.layers)} ({rows} x heads {sorted({la.num_heads for la in self.layers})})",
                f"limit:       {self.describe_limit()}",
            ]
        )


def _flag(config: Mapping[str, Any], field: str) -> bool:
    return bool(config.get(field, False))


def read_window_bias(
    source: str | os.PathLike,
    row: WindowBiasFamily,
    config: Mapping[str, Any],
    *,
    section: str | None = None,
    config_path: object = "config.json",
) -> list[WindowBiasSource]:
    """The window bias of ``source`` as the row ``row`` reads it (``[]``: a BEiT without any).

    Raises:
      CheckpointError: sizes that are not positive integers, an image size that is not a whole
        number of patches, a window larger than a Swin stage's grid, an absolute grid besides,
        a table whose row count is not ``(2w-1)^2`` (``+ 3`` for BEiT), too few or too many
        tensors, or a stored index that differs from ours (one line naming the field or tensor).
    """
    where = f"{config_path}:{section + '.' if section else ''}"
    if _flag(config, row.absolute_field):
        raise fail(
            f"{where}{row.absolute_field}", f"{row.absolute_field} false (its absolute grid is not read)", "true"
        )
    for field in ("image_size", "patch_size"):
        if field not in config:
            raise fail(f"{where}{field}", f"{field} in config.json", "none")
    image_size = positive_pair(config["image_size"], "image_size", f"{where}image_size", MAX_IMAGE_SIDE)
    patch_size = positive_pair(config["patch_size"], "patch_size", f"{where}patch_size", MAX_IMAGE_SIDE)
    grid = image_grid(image_size, patch_size, where=f"{where}image_size")
    ckpt = open_checkpoint(source)
    keys = sorted((k for k in ckpt.reader.keys() if k.endswith(row.table_suffix)), key=lambda k: (_ints(k), k))
    plans: list[tuple[str, tuple[int, int], int, tuple[int, int]]] = []  # label, window, heads, pretrained
    stage_grids: list[tuple[int, int]] = []
    if row.layout == "beit":
        heads = positive_pair(
            config.get("num_attention_heads"), "num_attention_heads", f"{where}num_attention_heads", 1 << 16
        )[0]
        shared = _flag(config, "use_shared_relative_position_bias")
        per_layer = _flag(config, "use_relative_position_bias")
        if not shared and not per_layer:
            return []
        if shared:
            plans.append(("shared", grid, heads, (0, 0)))
        if per_layer:
            layers = positive_pair(
                config.get("num_hidden_layers"), "num_hidden_layers", f"{where}num_hidden_layers", MAX_LAYERS
            )[0]
            plans += [(f"layer {i}", grid, heads, (0, 0)) for i in range(layers)]
        keys = sorted(keys, key=lambda k: (bool(_ints(k)), _ints(k), k))  # the shared table (no layer number) first
    else:
        depths = _list(config, "depths", where)
        heads_of = _list(config, "num_heads", where, len(depths))
        window = window_pair(config.get("window_size"), "window_size", f"{where}window_size")
        pretrained = [0] * len(depths)
        if row.pretrained_field is not None and config.get(row.pretrained_field) is not None:
            pretrained = [int(v) for v in _list_or_zeros(config, row.pretrained_field, where, len(depths))]
        for stage, depth in enumerate(depths):
            sg = (grid[0] >> stage, grid[1] >> stage) if row.merges else grid
            stage_grids.append(sg)
            if row.layout == "swin":
                if window[0] > sg[0] or window[1] > sg[1]:
                    raise fail(
                        f"{where}window_size",
                        f"a window within stage {stage}'s {sg[0]} x {sg[1]} patches (image_size "
                        f"{image_size[0]} / patch_size {patch_size[0]}{f' / 2**{stage}' if stage else ''})",
                        f"{window[0]} x {window[1]}",
                    )
                layer_window = window
            else:
                layer_window = (min(sg[0], window[0]), min(sg[1], window[1]))
            p = pretrained[stage]
            plans += [(f"stage {stage} block {b}", layer_window, heads_of[stage], (p, p)) for b in range(depth)]
    if len(keys) != len(plans):
        found = "none" if not keys else f"{len(keys)} ({', '.join(keys[:3])}{', ...' if len(keys) > 3 else ''})"
        raise fail(ckpt.weights_path, f"{len(plans)} *{row.table_suffix} tensors ({row.name}: one per layer)", found)
    out: list[WindowBiasLayer] = []
    class_token = row.layout == "beit"
    for key, (label, window, heads, pretrained_window) in zip(keys, plans):
        at = f"{ckpt.reader.file_of(key)}:{key}"
        if row.layout == "continuous":
            base = key[: -len(".0.weight")]
            w1 = read_float(ckpt.reader, key, ndim=2, what="cpb_mlp first weight")
            b1 = _vector(ckpt, f"{base}.0.bias")
            w2 = read_float(ckpt.reader, f"{base}.2.weight", ndim=2, what="cpb_mlp second weight")
            if w1.shape[1] != 2 or b1.shape[0] != w1.shape[0] or w2.shape != (heads, w1.shape[0]):
                raise fail(
                    at,
                    f"cpb_mlp weights (hidden, 2), (hidden,), ({heads}, hidden) for {heads} heads",
                    f"{tuple(w1.shape)}, {tuple(b1.shape)}, {tuple(w2.shape)}",
                )
            log_spaced_coords(window, pretrained_window)  # refuses a pretrained window of 1
            out.append(
                WindowBiasLayer(key, label, window, heads, mlp=(w1, b1, w2), pretrained_window=pretrained_window)
            )
            continue
        table = read_float(ckpt.reader, key, ndim=2, what="window bias table")
        check_table_rows(table.shape[0], window, class_token=class_token, where=at)
        if table.shape[1] != heads:
            raise fail(at, f"{heads} columns (num_heads of {label})", f"{table.shape[1]} columns")
        if row.index_suffix is not None:
            _check_index(ckpt, key[: -len(row.table_suffix)] + row.index_suffix, window)
        out.append(WindowBiasLayer(key, label, window, heads, class_token=class_token, table=table))
    return [
        WindowBiasSource(
            os.fspath(source),
            row.name,
            str(config.get("model_type")),
            tuple(out),
            image_size,
            patch_size,
            tuple(stage_grids),
        )
    ]


def _list_or_zeros(config: Mapping[str, Any], field: str, where: str, n: int) -> list[int]:
    value = config.get(field)
    if not isinstance(value, (list, tuple)) or len(value) != n:
        raise fail(f"{where}{field}", f"{n} entries (one per stage of depths)", repr(value)[:80])
    out = []
    for v in value:
        if isinstance(v, bool) or not isinstance(v, int) or v < 0 or v > 1 << 16:
            raise fail(f"{where}{field}", f"{field} as non-negative integers", repr(value)[:80])
        out.append(v)
    return out


def _vector(ckpt: Any, key: str) -> np.ndarray:
    if key not in set(ckpt.reader.keys()):
        raise fail(ckpt.weights_path, f"the tensor {key}", "none")
    dtype, shape = ckpt.reader.info(key)
    if len(shape) != 1:
        raise fail(f"{ckpt.reader.file_of(key)}:{key}", "a 1-D bias (hidden,)", f"shape {tuple(shape)}")
    return read_float(ckpt.reader, key, ndim=1, what="cpb_mlp bias")


def _check_index(ckpt: Any, key: str, window: tuple[int, int]) -> None:
    """A stored ``relative_position_index`` (DonutSwin, MaskFormerSwin) must equal ours."""
    if key not in set(ckpt.reader.keys()):
        return  # not stored: transformers rebuilds it from window_size
    stored = np.asarray(ckpt.reader.read(key))
    ours = relative_position_index(window)
    if stored.shape != ours.shape or not np.array_equal(stored, ours):
        raise fail(
            f"{ckpt.reader.file_of(key)}:{key}",
            f"the relative_position_index of a {window[0]} x {window[1]} window",
            f"a {'different index' if stored.shape == ours.shape else f'shape {tuple(stored.shape)}'}",
        )


def load_window_bias(source: str | os.PathLike, *, family: str | None = None) -> WindowBiasSource:
    """The window bias tables of a Swin, SwinV2, Swin2SR, BEiT or Data2Vec-Vision checkpoint.

    Args:
      source: a checkpoint directory, weights file beside a ``config.json``, or Hub id.
      family: force a :data:`WINDOW_BIAS_FAMILIES` row (default: by ``model_type``).

    Returns:
      :class:`WindowBiasSource`: ``layers`` (each ``table`` or ``mlp``, ``window``, ``num_heads``,
      ``bias()`` in float64), ``grid``, ``window``, ``describe_limit()``.

    Raises:
      CheckpointError: not such a model type, a BEiT without a relative bias, or what
        :func:`read_window_bias` refuses (one line).
    """
    ckpt = open_checkpoint(source)
    config = ckpt.config
    where = ckpt.config_path or ckpt.weights_path
    row = WINDOW_BIAS_FAMILIES.get(family) if family is not None else _row_of(config.get("model_type"))
    if row is None:
        expected = "a window bias family: " + ", ".join(WINDOW_BIAS_FAMILIES)
        raise fail(where, expected, repr(family) if family is not None else f"model_type {config.get('model_type')!r}")
    records = read_window_bias(source, row, config, config_path=where)
    if not records:
        raise fail(f"{where}:use_relative_position_bias", "a relative position bias (per layer or shared)", "neither")
    return records[0]


def _row_of(model_type: object) -> WindowBiasFamily | None:
    if not isinstance(model_type, str):
        return None
    for row in WINDOW_BIAS_FAMILIES.values():
        if model_type in row.model_types or model_type.replace("_", "-") in row.model_types:
            return row
    return None
