"""Learned 2-D position grids of vision transformers, one row per family (numpy only).

A ViT cuts an ``image_size`` image into ``patch_size`` patches, a ``gh x gw`` grid, and adds to
patch ``(r, c)`` the learned row ``prefix + r * gw + c`` of its position table; the first
``prefix`` rows belong to the class (and distillation) tokens. Each row of
:data:`GRID_FAMILIES` says where a model type keeps that table and its sizes, read from
transformers 5.24.0's ``modeling_*.py``:

=========================  ==========================================  ======  ================
model_type                 tensor (any prefix)                         prefix  config section
=========================  ==========================================  ======  ================
vit                        embeddings.position_embeddings (1, N, D)    1       top level
deit                       embeddings.position_embeddings (1, N, D)    2       top level
dinov2, ..._with_registers embeddings.position_embeddings (1, N, D)    1       top level
clip_vision_model          embeddings.position_embedding.weight        1       top level
clip                       vision_model.embeddings.position_embedding  1       vision_config
siglip_vision_model        embeddings.position_embedding.weight        0       top level
siglip                     vision_model.embeddings.position_embedding  0       vision_config
=========================  ==========================================  ======  ================

(DINOv2's register tokens are not in its position table: positions cover the class token and
the patches only.) A model type listed here has a ``grid`` mechanism in
:data:`~flax_posenc.conversion.models.MODEL_MECHANISMS`; the text towers of CLIP (77 tokens) and
SigLIP (64) are learned tables of :data:`~flax_posenc.conversion.position_tables.TABLE_FAMILIES`.

Issue 35's remaining grids are a block of their own below the registry (Janus, Granite Docling,
AIMv2, Ovis 2, EoMT, Qianfan-OCR, TIPSv2, RF-DETR's DINOv2, Idefics 2/3, SmolVLM, Phi-4, MiniCPM-V,
Unlimited-OCR, ViTDet, LW-DETR, Hiera, Molmo 2, MGP-STR); what differs from ViT is data on the row:
``interpolation`` (no ``interpolate_pos_encoding`` at all), ``saved_keys``, ``image_size_field``
(ViTDet's ``pretrain_image_size``), ``patch_size_field`` (Hiera's ``patch_stride``) and the bucketed
conventions of :data:`~flax_posenc.grid_config.GRID_CONVENTIONS` (Idefics, MiniCPM).

>>> import numpy as np
>>> g = GridTable(np.zeros((197, 8), np.float32), family="vit", key="pos", prefix_tokens=1,
...               patch_size=(16, 16), image_size=(224, 224), model_type="vit")
>>> g.grid, g.describe()
((14, 14), 'a 14 x 14 grid of patches + 1 class token (197 positions; 224 px / 16)')
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

import numpy as np

from flax_posenc.conversion.readers import fail, read_float, tower_keys
from flax_posenc.conversion.sources import open_checkpoint
from flax_posenc.conversion.table import GridBacked
from flax_posenc.grid_config import (
    MAX_IMAGE_SIDE,
    MAX_PATCHES,
    grid_of_rows,
    image_grid,
    positive_pair,
    prefix_text,
)
from flax_posenc.limits import grid_phrase

__all__ = [
    "GRID_FAMILIES",
    "MAX_IMAGE_SIDE",
    "MAX_PATCHES",
    "GridFamily",
    "GridSource",
    "GridTable",
    "grid_of_rows",
    "image_grid",
    "load_grid_table",
    "prefix_text",
]


#: prefix rows a config field may ask for (Pixio's ``n_cls_tokens``): bounds the rows expected.
MAX_PREFIX_TOKENS = 1024


@dataclasses.dataclass(frozen=True)
class GridFamily:
    """One vision family's learned position grid, as data.

    Attributes:
      name: our name; model_types: ``config.json`` values that mean it.
      key_suffix: the tensor's name without the checkpoint's prefix (``(1, N, D)`` parameters,
        ``(N, D)`` embedding weights and SAM's ``(1, gh, gw, D)`` grids are all read as ``(N, D)``).
      prefix_tokens: rows before the grid (class token 1, DeiT's class + distillation 2, SigLIP 0).
      config_section: the sub-config holding ``image_size``/``patch_size`` in a composite
        checkpoint (``"vision_config"`` for ``clip``/``siglip``), else ``None``.
      convention: the :data:`~flax_posenc.grid_config.GRID_CONVENTIONS` row its own
        ``interpolate_pos_encoding`` follows.
      resizes_itself: the model's embeddings resize the grid to any image by default (DINOv2,
        InternViT, CLIPSeg: their forward calls ``interpolate_pos_encoding``); ``False``: a
        differently sized image is refused unless ``interpolate_pos_encoding=True`` is passed.
      prefix_field: the config field counting the prefix rows when the model chooses it (Pixio's
        ``n_cls_tokens``); ``prefix_tokens`` is then unused.
      interpolation: the model has an ``interpolate_pos_encoding``; ``False``: it adds the stored
        grid as it is and refuses any other image size, with no way to resize (AIMv2, Ovis 2, EoMT).
      saved_keys: other suffixes the tensor is saved under: transformers' ``save_pretrained``
        writes the original checkpoint's names for some models (TIPSv2: ``pos_embed``; Qianfan-OCR's
        composite: ``embeddings.position_embedding``); exactly one tensor must match any of them.
      image_size_field: the config field of the image size the grid was trained at (ViTDet's
        ``pretrain_image_size``; ``image_size`` is then the size it is resized to by default).
      patch_size_field: the config field of the pixels per grid position (Hiera's ``patch_stride``:
        its patch convolution overlaps, so the stride, not the kernel, sets the grid).
    """

    name: str
    model_types: tuple[str, ...]
    key_suffix: str
    prefix_tokens: int
    convention: str
    config_section: str | None = None
    resizes_itself: bool = False
    prefix_field: str | None = None
    interpolation: bool = True
    saved_keys: tuple[str, ...] = ()
    image_size_field: str = "image_size"
    patch_size_field: str = "patch_size"


GRID_FAMILIES: Mapping[str, GridFamily] = MappingProxyType(
    {
        row.name: row
        for row in (
            GridFamily(
                "vit",
                ("vit", "vit_msn", "flava_image_model"),
                "embeddings.position_embeddings",
                1,
                "torch_bicubic",
            ),
            GridFamily("deit", ("deit",), "embeddings.position_embeddings", 2, "torch_bicubic"),
            GridFamily(
                "dinov2", ("dinov2",), "embeddings.position_embeddings", 1, "torch_bicubic", resizes_itself=True
            ),
            GridFamily(
                "dinov2_with_registers",
                ("dinov2_with_registers",),
                "embeddings.position_embeddings",
                1,
                "torch_bicubic_antialias",
                resizes_itself=True,
            ),
            GridFamily(
                "clip_vision",
                (
                    "clip_vision_model",
                    # CLIP's vision embeddings in other models (issue 35)
                    "altclip_vision_model",
                    "bridgetower_vision_model",
                    "chinese_clip_vision_model",
                    "git_vision_model",
                    "kosmos_2_vision_model",
                    "metaclip_2_vision_model",
                    "owlv2_vision_model",
                    "owlvit_vision_model",
                    "xclip_vision_model",
                ),
                "embeddings.position_embedding.weight",
                1,
                "torch_bicubic",
            ),
            GridFamily(
                "clip_vision_tower",
                ("clip",),
                "vision_model.embeddings.position_embedding.weight",
                1,
                "torch_bicubic",
                config_section="vision_config",
            ),
            GridFamily(
                "siglip_vision",
                ("siglip_vision_model",),
                "embeddings.position_embedding.weight",
                0,
                "torch_bicubic",
            ),
            GridFamily(
                "siglip_vision_tower",
                ("siglip",),
                "vision_model.embeddings.position_embedding.weight",
                0,
                "torch_bicubic",
                config_section="vision_config",
            ),
            # BLIP's vision embeddings: a (1, 1 + N, D) parameter named position_embedding
            GridFamily(
                "blip_vision",
                (
                    "blip_vision_model",
                    "blip_2_vision_model",
                    "instructblip_vision_model",
                    "instructblipvideo_vision_model",
                ),
                "embeddings.position_embedding",
                1,
                "torch_bicubic",
            ),
            # GIT: CLIP's vision tower inside the model (its text positions: TABLE_FAMILIES' bert_like)
            GridFamily(
                "git_vision_tower",
                ("git",),
                "image_encoder.vision_model.embeddings.position_embedding.weight",
                1,
                "torch_bicubic",
                config_section="vision_config",
            ),
            # CLIPSeg's vision tower: CLIP's grid, resized to every image by default
            GridFamily(
                "clipseg_vision",
                ("clipseg_vision_model",),
                "embeddings.position_embedding.weight",
                1,
                "torch_bicubic",
                resizes_itself=True,
            ),
            # InternViT (InternVL's vision tower): ViT's grid, resized to every image by its forward
            GridFamily(
                "internvl_vision",
                ("internvl_vision",),
                "embeddings.position_embeddings",
                1,
                "torch_bicubic",
                resizes_itself=True,
            ),
            # ViT-MAE: a fixed 2-D sin-cos grid (class row zero) stored as a frozen parameter: read as stored
            GridFamily("vit_mae", ("vit_mae",), "embeddings.position_embeddings", 1, "torch_bicubic"),
            # Pixio: n_cls_tokens class tokens (8 by default) before the grid, resized to every image
            GridFamily(
                "pixio",
                ("pixio",),
                "embeddings.position_embeddings",
                0,
                "torch_bicubic",
                resizes_itself=True,
                prefix_field="n_cls_tokens",
            ),
            # no class token: the grid alone (I-JEPA, GroupViT's vision tower)
            GridFamily(
                "patch_grid",
                ("ijepa", "groupvit_vision_model"),
                "embeddings.position_embeddings",
                0,
                "torch_bicubic",
            ),
        )
    }
)


# ---- issue 35 item 7: the remaining ViT-style grids, a block of its own joined to the registry.
# Each row read from transformers 5.24.0's modeling_*.py (the embeddings module's __init__ and forward).
_SIGLIP_KEY = "embeddings.position_embedding.weight"
_ISSUE35_GRID_ROWS: tuple[GridFamily, ...] = (
    # SigLIP's vision embeddings copied: no class token, interpolate_pos_encoding as SigLIP's
    GridFamily("siglip_like_vision", ("janus_vision_model", "granite_docling_vision"), _SIGLIP_KEY, 0, "torch_bicubic"),
    # no class token and no interpolate_pos_encoding: the stored grid added as it is, any other size refused
    # (AIMv2 with is_native computes a sin-cos grid instead and stores no table: refused when read)
    GridFamily(
        "fixed_grid_vision",
        ("aimv2_vision_model", "ovis2_vision"),
        _SIGLIP_KEY,
        0,
        "torch_bicubic",
        interpolation=False,
    ),
    # EoMT, VidEoMT: an nn.Embedding over the patches only (the class and register tokens take no position)
    GridFamily(
        "eomt",
        ("eomt", "videomt"),
        "embeddings.position_embeddings.weight",
        0,
        "torch_bicubic",
        interpolation=False,
    ),
    # InternViT's embeddings copied (Qianfan-OCR's vision tower): resized to every image by its forward
    GridFamily(
        "qianfan_ocr_vision",
        ("qianfan_ocr_vision",),
        "embeddings.position_embeddings",
        1,
        "torch_bicubic",
        resizes_itself=True,
        saved_keys=("embeddings.position_embedding",),
    ),
    # TIPSv2: class row + grid, resized to every image (bilinear, antialiased); registers take no position
    GridFamily(
        "tipsv2_vision",
        ("tipsv2_vision_model",),
        "embeddings.position_embeddings",
        1,
        "torch_bilinear_antialias",
        resizes_itself=True,
        saved_keys=("pos_embed",),
    ),
    # RF-DETR's DINOv2 backbone: class row + grid, resized to every image (bicubic, antialiased)
    GridFamily(
        "rf_detr_dinov2",
        ("rf_detr_dinov2",),
        "embeddings.position_embeddings",
        1,
        "torch_bicubic_antialias",
        resizes_itself=True,
    ),
    # Idefics 2/3, SmolVLM, Phi-4-multimodal's vision tower: the grid alone; each patch of any image
    # takes the row of its bucketed fraction (nearest below, float32; no interpolation), so every
    # image size is taken (Phi-4's interpolate_pos_encoding is never called by its forward)
    GridFamily(
        "idefics_vision",
        ("idefics2_vision", "idefics3_vision", "smolvlm_vision", "phi4_multimodal_vision"),
        _SIGLIP_KEY,
        0,
        "idefics_buckets",
        resizes_itself=True,
        interpolation=False,
    ),
    # MiniCPM-V 4.6/4.7 and MiniCPM-OCR: the same, the fraction computed as i / n (get_vision_nearest_position_ids)
    GridFamily(
        "minicpm_vision",
        ("minicpm_ocr_vision", "minicpmv4_6_vision", "minicpmv4_7_vision"),
        _SIGLIP_KEY,
        0,
        "minicpm_buckets",
        resizes_itself=True,
        interpolation=False,
    ),
    # Unlimited-OCR's vision encoder (over SAM's feature map): CLIP's class row + grid, resized to every
    # map by its forward (bicubic, antialiased)
    GridFamily(
        "unlimited_ocr_vision",
        ("unlimited_ocr_vision_encoder",),
        _SIGLIP_KEY,
        1,
        "torch_bicubic_antialias",
        resizes_itself=True,
    ),
    # ViTDet and LW-DETR's ViT: a class row (stored, never added: no class token) + the grid trained at
    # pretrain_image_size, resized to every image by the forward (bicubic; untouched at the trained grid)
    GridFamily(
        "vitdet",
        ("vitdet", "lw_detr_vit"),
        "embeddings.position_embeddings",
        1,
        "torch_bicubic",
        resizes_itself=True,
        interpolation=False,
        image_size_field="pretrain_image_size",
    ),
    # Hiera: the grid alone, one position per patch_stride pixels (an overlapping 7 x 7 convolution
    # at stride 4); interpolate_pos_encoding as ViT's when asked, else any other size is refused
    GridFamily(
        "hiera",
        ("hiera",),
        "embeddings.position_embeddings",
        0,
        "torch_bicubic",
        patch_size_field="patch_stride",
    ),
    # Molmo 2's vision tower: the grid alone, a parameter of the model itself added to its patches as
    # stored (num_position_embeddings = the patches of image_size); any other patch count fails
    GridFamily("molmo2_vision", ("molmo2_vision",), "positional_embedding", 0, "torch_bicubic", interpolation=False),
    # MGP-STR: class row + grid added whole; another image size is refused (no interpolate_pos_encoding)
    GridFamily("mgp_str", ("mgp-str",), "embeddings.pos_embed", 1, "torch_bicubic", interpolation=False),
)
GRID_FAMILIES = MappingProxyType({**GRID_FAMILIES, **{row.name: row for row in _ISSUE35_GRID_ROWS}})


@dataclasses.dataclass(frozen=True)
class GridTable:
    """A learned 2-D position grid as stored in a checkpoint.

    Attributes:
      weights: ``(prefix_tokens + gh * gw, dim)``: the prefix tokens' rows, then the grid in
        row-major order (patch ``(r, c)`` is row ``prefix_tokens + r * gw + c``).
      family: the :data:`GRID_FAMILIES` row; key: the tensor's name in the checkpoint.
      prefix_tokens: rows before the grid (class/distillation tokens).
      patch_size, image_size: ``(height, width)`` in pixels, from the config.
      model_type: the checkpoint's ``model_type``.
      source: where it came from, for messages.
      convention: how the model resizes the grid (a
        :data:`~flax_posenc.grid_config.GRID_CONVENTIONS` name; :func:`~flax_posenc.resize_grid`'s default).
      resizes_itself: the model's own forward resizes the grid to any image (its row's
        :attr:`GridFamily.resizes_itself`).
      interpolation: the model has an ``interpolate_pos_encoding`` (its row's
        :attr:`GridFamily.interpolation`); ``False``: it cannot take another image size at all.

    ``grid`` is ``image_size / patch_size``; the rows must equal ``prefix_tokens + gh * gw``.
    """

    weights: np.ndarray
    family: str
    key: str
    prefix_tokens: int
    patch_size: tuple[int, int]
    image_size: tuple[int, int]
    model_type: str
    source: str = ""
    convention: str = "torch_bicubic"
    resizes_itself: bool = False
    interpolation: bool = True

    def __post_init__(self):
        where = f"{self.source}:{self.key}" if self.source else self.key
        shape = getattr(self.weights, "shape", ())
        if len(shape) != 2:
            raise fail(where, "a 2-D grid table (prefix + gh * gw, dim)", f"shape {tuple(shape)}")
        gh, gw = image_grid(self.image_size, self.patch_size, where=where)
        if shape[0] != self.prefix_tokens + gh * gw:
            raise fail(
                where,
                f"{self.prefix_tokens + gh * gw} rows ({self.prefix_tokens} prefix + {gh} x {gw} patches of "
                f"image_size {self._image_text()} / patch_size {self._patch_text()})",
                f"{shape[0]} rows",
            )

    def _image_text(self) -> str:
        h, w = self.image_size
        return f"{h}" if h == w else f"{h} x {w}"

    def _patch_text(self) -> str:
        h, w = self.patch_size
        return f"{h}" if h == w else f"{h} x {w}"

    @property
    def grid(self) -> tuple[int, int]:
        """``(gh, gw)`` patches."""
        return self.image_size[0] // self.patch_size[0], self.image_size[1] // self.patch_size[1]

    @property
    def rows(self) -> int:
        return int(self.weights.shape[0])

    @property
    def dim(self) -> int:
        return int(self.weights.shape[1])

    @property
    def prefix(self) -> np.ndarray:
        """``(prefix_tokens, dim)``: the class/distillation tokens' rows."""
        return self.weights[: self.prefix_tokens]

    @property
    def patches(self) -> np.ndarray:
        """``(gh, gw, dim)``: the grid."""
        return self.weights[self.prefix_tokens :].reshape(*self.grid, self.dim)

    def describe(self) -> str:
        """``"a 14 x 14 grid of patches + 1 class token (197 positions; 224 px / 16)"``: what the
        grid holds, in the words of the run-time error (:func:`flax_posenc.limits.grid_phrase`)."""
        return grid_phrase(self.grid, self.prefix_tokens, f"{self._image_text()} px / {self._patch_text()}")

    def __repr__(self) -> str:
        return (
            f"GridTable(family={self.family!r}, key={self.key!r}, grid={self.grid}, "
            f"prefix_tokens={self.prefix_tokens}, dim={self.dim}, patch_size={self.patch_size}, "
            f"image_size={self.image_size}, source={self.source!r})"
        )


def _family_of(model_type: object) -> GridFamily | None:
    if not isinstance(model_type, str):
        return None
    spelled = model_type.replace("-", "_")
    for row in GRID_FAMILIES.values():
        if spelled in row.model_types or model_type in row.model_types:  # MGP-STR: "mgp-str"
            return row
    return None


def load_grid_table(
    source: str | os.PathLike, *, family: str | None = None, section: tuple[str, Mapping[str, Any]] | None = None
) -> GridTable:
    """The learned 2-D position grid of a vision checkpoint (only that tensor is read).

    Args:
      source: a checkpoint directory, weights file beside a ``config.json``, or Hub id whose
        ``model_type`` is in :data:`GRID_FAMILIES` (``vit``, ``deit``, ``dinov2``,
        ``dinov2_with_registers``, ``clip``/``clip_vision_model``, ``siglip``/``siglip_vision_model``).
      family: force a :data:`GRID_FAMILIES` row.
      section: ``(field, sub-config)``: read ``image_size``/``patch_size`` from this sub-config of
        a composite model's ``config.json`` (the vision tower of LLaVA, PaliGemma, Gemma 3, ...)
        instead of the row's own section.

    Returns:
      :class:`GridTable`: ``weights`` ``(prefix + gh * gw, dim)``, ``grid``, ``prefix_tokens``,
      ``patch_size``, ``image_size``, ``model_type``.

    Raises:
      CheckpointError: not a vision model type with a learned grid, no (or several) tensors
        with the family's key, sizes that are not positive integers, a patch size that does not
        divide the image size, or rows that are not ``prefix + gh * gw`` (one line naming the
        file and the field).
    """
    ckpt = open_checkpoint(source)
    config = ckpt.config
    where_config = ckpt.config_path or ckpt.weights_path
    row = GRID_FAMILIES.get(family) if family is not None else _family_of(config.get("model_type"))
    if row is None:
        expected = "a grid family: " + ", ".join(GRID_FAMILIES) if family is not None else "a vision model_type"
        found = repr(family) if family is not None else f"model_type {config.get('model_type')!r}"
        raise fail(where_config, f"{expected} with a learned position grid", found)
    part: Any = config
    section_name = row.config_section
    if section is not None:
        section_name, part = section
    elif row.config_section is not None:
        part = config.get(row.config_section)
        if not isinstance(part, dict):
            raise fail(where_config, f"{row.config_section} as an object", repr(part)[:80])
    field_where = f"{where_config}:{section_name + '.' if section_name else ''}"
    sizes = {}
    for field, name in (("image_size", row.image_size_field), ("patch_size", row.patch_size_field)):
        if name not in part:
            raise fail(f"{field_where}{name}", f"{name} in config.json", "none")
        sizes[field] = positive_pair(part[name], name, f"{field_where}{name}", MAX_IMAGE_SIDE)
    image_grid(sizes["image_size"], sizes["patch_size"], where=f"{field_where}image_size")
    prefix = row.prefix_tokens
    if row.prefix_field is not None:
        prefix = part.get(row.prefix_field)
        if isinstance(prefix, bool) or not isinstance(prefix, int) or not 0 <= prefix <= MAX_PREFIX_TOKENS:
            raise fail(
                f"{field_where}{row.prefix_field}",
                f"{row.prefix_field} as an integer in 0..{MAX_PREFIX_TOKENS}",
                repr(prefix)[:80],
            )
    suffixes = (row.key_suffix, *row.saved_keys)
    keys = sorted(k for k in ckpt.reader.keys() if any(k == x or k.endswith("." + x) for x in suffixes))
    keys = tower_keys(keys, section_name if section is not None else None)
    if len(keys) != 1:
        found = "none" if not keys else ", ".join(keys[:4])
        raise fail(ckpt.weights_path, f"one {row.name} position grid *{row.key_suffix}", found)
    key = keys[0]
    _, shape = ckpt.reader.info(key)
    if len(shape) == 3 and shape[0] == 1:
        weights = read_float(ckpt.reader, key, ndim=3, what=f"{row.name} position grid").reshape(shape[1], shape[2])
    elif len(shape) == 4 and shape[0] == 1:  # SAM's (1, gh, gw, dim) pos_embed: the grid itself, row-major
        gh, gw = image_grid(sizes["image_size"], sizes["patch_size"], where=f"{field_where}image_size")
        if tuple(shape[1:3]) != (gh, gw):
            raise fail(f"{ckpt.weights_path}:{key}", f"a (1, {gh}, {gw}, dim) position grid", f"shape {tuple(shape)}")
        weights = read_float(ckpt.reader, key, ndim=4, what=f"{row.name} position grid").reshape(gh * gw, shape[3])
    else:
        weights = read_float(ckpt.reader, key, ndim=2, what=f"{row.name} position grid")
    return GridTable(
        weights,
        family=row.name,
        key=key,
        prefix_tokens=prefix,
        patch_size=sizes["patch_size"],
        image_size=sizes["image_size"],
        model_type=str(config.get("model_type")),
        source=os.fspath(source),
        convention=row.convention,
        resizes_itself=row.resizes_itself,
        interpolation=row.interpolation,
    )


@dataclasses.dataclass(frozen=True)
class GridSource(GridBacked):
    """A learned position grid as a :class:`~flax_posenc.conversion.SourceRecord` (a ``grid`` mechanism).

    A grid limits the *image*, not a token count: an image of ``image_size`` px gives
    ``image_size / patch_size`` patches, and the model accepts exactly the trained grid unless
    the grid is resized (``fp.resize_grid``). So ``limit`` is ``None`` (a CLIP/SigLIP text
    tower's limit stays the record's limit), and :meth:`check_image_size` is the question to ask.
    """

    table: GridTable

    scheme = "grid"
    grid_name = "position grid"
    limits = "the image size"

    def check_image_size(self, image_size: Any) -> tuple[bool, str]:
        """``(True, line)`` when ``image_size`` px give the trained grid, else ``(False, line)``.

        Raises:
          CheckpointError: ``image_size`` not a positive integer (or pair), past
            :data:`MAX_IMAGE_SIDE`, or not divisible by the patch size (one line).
        """
        gh, gw = image_grid(image_size, self.table.patch_size, where="--image-size")
        h, w = gh * self.table.patch_size[0], gw * self.table.patch_size[1]
        size = f"{h}" if h == w else f"{h} x {w}"
        if (gh, gw) == self.table.grid:
            return True, f"{self.describe_limit()}; a {size} px image fits ({gh} x {gw} patches)"
        resized = (
            "the model's own embeddings resize it to another image size by default (interpolate_pos_encoding)"
            if self.table.resizes_itself
            else "the model refuses another image size unless called with interpolate_pos_encoding=True"
            if self.table.interpolation
            else "the model refuses another image size (it has no interpolate_pos_encoding)"
        )
        return False, (
            f"{self.describe_limit()}; {resized}; a {size} px image needs {gh} x {gw} patches: "
            f"the grid must be resized (fp.resize_grid)"
        )

    def grid_fields(self) -> dict[str, Any]:
        t = self.table
        return {
            "prefix_tokens": t.prefix_tokens,
            "patch_size": list(t.patch_size),
            "image_size": list(t.image_size),
            "convention": t.convention,
            "resizes_itself": t.resizes_itself,
            "interpolation": t.interpolation,
        }


# ----------------------------------------------------------------------------- SAM-style grids (issue 35 item 6)
# One block of its own, joined to the registry: the (1, gh, gw, dim) pos_embed of SAM's image encoder
# and its copies (no prefix row). SAM, SAM-HQ, GOT-OCR 2, SLANeXt and PP-FormulaNet add it as stored
# (their patch embedding refuses another image size); the DeepSeek-OCR 2 and Unlimited-OCR SAM towers
# resize it to every image (interpolate_pos_encoding: bicubic, antialias).
_SAM_GRID_ROWS = (
    GridFamily(
        "sam_vision_grid",
        ("sam_vision_model", "sam_hq_vision_model", "got_ocr2_vision", "slanext_vision", "pp_formulanet_vision"),
        "pos_embed",
        0,
        "torch_bicubic",
    ),
    GridFamily(
        "sam_vision_grid_resized",
        ("deepseek_ocr2_sam_vision_model", "unlimited_ocr_sam_vision_model"),
        "pos_embed",
        0,
        "torch_bicubic_antialias",
        resizes_itself=True,
    ),
)
GRID_FAMILIES = MappingProxyType({**GRID_FAMILIES, **{row.name: row for row in _SAM_GRID_ROWS}})
