"""Vision towers' 2-D rotary positions (the ``vision_rope`` mechanism), numpy only.

One row of :data:`VISION_ROPE_FAMILIES` per way a vision tower rotates its patches, each checked
against the modeling file of the pinned transformers (5.24.0) and by its conformance case (the
tiny tower's own rotary module's position ids and ``cos``/``sin``, and its own apply function's
rotated ``q``/``k`` in a forward pass, against :func:`flax_posenc.apply_vision_rope_qk`):

- ``pixtral`` (``pixtral``: Mistral 3's and LightOnOCR's tower): ``PixtralVisionRotaryEmbedding``,
  ``inv_freq`` of the whole head split even/odd between rows and columns, patches in raster
  order, ``apply_rotary_pos_emb`` (``rotate_half``). The limit is the trained grid,
  ``image_size // patch_size`` patches per side (1024 / 16 = 64): transformers 5.x computes the
  angles for any grid and does not enforce it (as ``max_position_embeddings`` for text RoPE).
- ``qwen2_vl`` (``qwen2_vl_vision``, and ``qwen2_vl`` itself beside its text M-RoPE):
  ``Qwen2VLVisionRotaryEmbedding``, the frequencies of a ``head_dim // 2`` RoPE first with the
  row, then with the column, patches in ``spatial_merge_size`` blocks (``get_vision_position_ids``),
  ``apply_rotary_pos_emb_vision``. No limit: the angles are computed for any image.
- ``qwen2_5_vl`` (``qwen2_5_vl_vision``, ``qwen2_5_vl``; EXAONE 4.5's ``exaone4_5_vision``, the
  same modules): as ``qwen2_vl``, then the blocks in
  window order (``get_vision_window_index`` with ``window_size``, ``permute_input_for_window_attn``
  of ``cos``/``sin``). No limit.
- ``lfm3_vl`` (``lfm3_vl_vision``): ``Lfm3VlVisionRotaryEmbedding``, as ``qwen2_vl`` (``rope_theta``
  1e6 by default; its layers' convolutions add no position tensor). No limit.
- ``dinov3`` (``dinov3_vit``): ``DINOv3ViTRopePositionEmbedding``, patch centres normalized to
  ``[-1, 1]`` turned by ``2 pi c w`` (``w = rope_theta ** (-4i / head_dim)``), the class and
  register tokens not rotated; ``pos_embed_shift``/``jitter``/``rescale`` act only in training. No
  limit: the coordinates are normalized for any image size.

Second round (:data:`VISION_ROPE_FAMILIES_QWEN3`, joined to the rows above):

- ``qwen3_vl`` (Qwen3-VL, Qwen3-VL-MoE, Qwen3.5, Qwen3.5-MoE, Qwen3-Omni-MoE, Qwen4-Exp vision
  towers, and ``qwen3_vl`` itself): ``qwen2_vl``'s rotation, plus a learned ``pos_embed`` grid of
  ``sqrt(num_position_embeddings)`` per side resampled to every image bilinearly with the corners
  aligned (``get_vision_interpolation_indices_and_weights``; :func:`flax_posenc.vision_grid_positions`
  with ``"big_vision"``). No limit.
- ``glm4v`` (GLM-4V, GLM-4V-MoE and those composites): ``qwen2_vl``'s rotation, plus a learned
  ``embeddings.position_embedding`` grid of ``image_size // patch_size`` per side sampled at the
  patch centres by ``grid_sample(mode="bicubic", align_corners=False, padding_mode="border")``
  (``"torch_bicubic"``). No limit.
- ``qwen2_5_omni`` (``qwen2_5_omni_vision_encoder``): ``qwen2_5_vl``'s modules, copied.
- ``glm_ocr`` (GLM-OCR, GLM-5-Next), ``ernie4_5_vl``, ``dots3_note``, ``video_llama_3``: ``qwen2_vl``'s
  rotation and block order (VideoLLaMA 3: the merge size is a forward argument per image; read as
  raster order).

- ``kimi_k25``: split ``axial_interleaved``, raster order, a bicubic ``(64, 64, dim)`` grid and a
  per-frame sinusoid (``frame_field``); ``paddleocr_vl``: raster order, a bilinear grid at the pixel
  centres (``torch_bilinear``); ``mlcd``: raster order, the class token turned by learned angles
  (``prefix_angle_key``).

Third round (:data:`VISION_ROPE_FAMILIES_ROUND3`):

- ``llama4`` (``llama4_vision_model``, Llama 4's tower): ``Llama4VisionRotaryEmbedding``'s complex
  ``freqs_ci``, the ``axial`` frequencies turned by the 1-based column first, then the 1-based row
  (split ``axial_columns_first``, ``index_base`` 1), complex pairs ``(2j, 2j + 1)``
  (``vision_apply_rotary_emb``: layout ``interleaved``), the class token last and not rotated (its
  angles masked to 0: ``suffix_tokens`` 1); a learned grid ``positional_embedding_vlm`` of
  ``side ** 2 + 1`` rows (class token last) added as it is (``grid_convention="fixed"``). The
  limit: exactly ``image_size // patch_size`` patches per side, no other size (both tables are
  built for one; its processor tiles images to it).

- ``step3p5`` (``step3p5_vision``, Step 3.5/3.7's tower): ``Step3p7VisionRotaryEmbedding``, the
  ``axial`` frequencies turned by the column first, then the row (``freq.flip(1)``:
  ``axial_columns_first``), ``rotate_half``, raster order; a learned grid of
  ``image_size // patch_size`` per side resampled to every image by ``F.interpolate(mode="bilinear",
  align_corners=False)`` (``torch_bilinear``). No limit.

MiniMax-M3-VL (a partial 3-D rotation) is not read here: ``conversion/unread_mechanisms.py``
names it.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

import numpy as np

from flax_posenc.conversion.readers import fail, read_float
from flax_posenc.conversion.sources import open_checkpoint
from flax_posenc.grid_config import image_grid
from flax_posenc.vision_rope_config import VisionRopeConfig

__all__ = [
    "VISION_ROPE_FAMILIES",
    "VisionRopeFamily",
    "VisionRopeSource",
    "load_vision_grid",
    "load_vision_prefix_angles",
    "read_vision_rope",
]


@dataclasses.dataclass(frozen=True)
class VisionRopeFamily:
    """A way a vision tower rotates its patches (a row of :data:`VISION_ROPE_FAMILIES`).

    Attributes:
      name, model_types: as every registry row (a composite model type registered on its own,
        Qwen2-VL's, is read from its ``vision_config``).
      split, layout, coordinates: the :class:`~flax_posenc.VisionRopeConfig` fields.
      width_field, heads_field: the config fields whose quotient is the head width (``head_dim``
        when the config has it); defaults: transformers' config class's.
      theta_default: ``rope_theta`` when neither ``rope_parameters`` nor ``rope_theta`` gives one.
      merge_field: the field of ``spatial_merge_size`` (``None``: raster order).
      window_field: the field of ``window_size`` (Qwen2.5-VL; ``None``: no window order).
      limit_fields: ``(image_size field, patch_size field)`` whose quotient is the trained
        patches per side, the limit (``None``: no limit).
      register_field: the field counting register tokens after the class token (DINOv3);
        ``class_token``: a class token before the patches, not rotated.
      defaults: transformers' config class defaults of the fields read (a Hub ``config.json`` may
        leave them out).
      grid_key, grid_rows_field: a learned square position grid beside the RoPE (Qwen3-VL's
        ``pos_embed.weight``, ``num_position_embeddings`` rows) that the tower resamples to every
        image (``None``: none).
      grid_convention: how it is resampled (a :data:`~flax_posenc.GRID_CONVENTIONS` name;
        ``"big_vision"``: bilinear, corners aligned; ``"torch_bicubic"``: GLM-4V's
        ``grid_sample(mode="bicubic", align_corners=False, padding_mode="border")`` at the patch
        centres, the same samples and taps).
      grid_side_fields: ``(image_size field, patch_size field)`` whose quotient is the grid's
        side (GLM-4V) instead of the square root of ``grid_rows_field``.
      grid_side_field: the field giving the side itself (Kimi K2.5's ``pos_emb_height``).
      frame_field: the field counting the frames of Kimi K2.5's fixed per-frame sinusoid
        (``pos_emb_time``; :func:`flax_posenc.vision_frame_sinusoid`); ``None``: none.
      prefix_angle_key: the tensor of learned angles the class token turns by (MLCD's
        ``class_pos_emb``, ``(1, head_dim // 2)``); ``None``: prefix tokens are not rotated.
      index_base: added to the row and column indices before the angles (Llama 4: 1).
      class_token_last: a class token after the patches, not rotated (Llama 4); with
        ``grid_convention="fixed"`` the learned grid holds its row last.
    """

    name: str
    model_types: tuple[str, ...]
    split: str = "axial"
    layout: str = "half"
    coordinates: str = "index"
    width_field: str = "hidden_size"
    heads_field: str = "num_heads"
    theta_default: float = 10000.0
    merge_field: str | None = None
    window_field: str | None = None
    limit_fields: tuple[str, str] | None = None
    class_token: bool = False
    register_field: str | None = None
    defaults: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    tower: str = "vision"
    grid_key: str | None = None
    grid_rows_field: str = "num_position_embeddings"
    grid_convention: str = "big_vision"
    grid_side_fields: tuple[str, str] | None = None
    grid_side_field: str | None = None
    frame_field: str | None = None
    prefix_angle_key: str | None = None
    index_base: int = 0
    class_token_last: bool = False


VISION_ROPE_FAMILIES: Mapping[str, VisionRopeFamily] = MappingProxyType(
    {
        row.name: row
        for row in (
            VisionRopeFamily(
                "pixtral",
                ("pixtral",),
                split="pixtral",
                heads_field="num_attention_heads",
                limit_fields=("image_size", "patch_size"),
                defaults={"hidden_size": 1024, "num_attention_heads": 16, "image_size": 1024, "patch_size": 16},
            ),
            VisionRopeFamily(
                "qwen2_vl",
                ("qwen2_vl_vision", "qwen2_vl"),
                width_field="embed_dim",
                merge_field="spatial_merge_size",
                defaults={"embed_dim": 1280, "num_heads": 16, "spatial_merge_size": 2},
            ),
            VisionRopeFamily(
                "qwen2_5_vl",
                ("qwen2_5_vl_vision", "qwen2_5_vl", "exaone4_5_vision"),
                merge_field="spatial_merge_size",
                window_field="window_size",
                defaults={
                    "hidden_size": 3584,
                    "num_heads": 16,
                    "spatial_merge_size": 2,
                    "window_size": 112,
                    "patch_size": 14,
                },
            ),
            VisionRopeFamily(
                "lfm3_vl",
                ("lfm3_vl_vision",),
                heads_field="num_attention_heads",
                theta_default=1000000.0,
                merge_field="spatial_merge_size",
                defaults={"hidden_size": 1024, "num_attention_heads": 16, "spatial_merge_size": 2},
            ),
            VisionRopeFamily(
                "dinov3",
                ("dinov3_vit",),
                coordinates="normalized",
                heads_field="num_attention_heads",
                theta_default=100.0,
                class_token=True,
                register_field="num_register_tokens",
                defaults={"hidden_size": 384, "num_attention_heads": 6, "num_register_tokens": 0},
            ),
        )
    }
)


# issue 35 item 2, second round: the towers that rotate as Qwen2-VL/2.5-VL (the same modules, copied),
# and Qwen3-VL's family, which adds a learned grid resampled per image (bilinear, corners aligned).
_QWEN_VISION = {"hidden_size": 1152, "num_heads": 16, "spatial_merge_size": 2}
_QWEN3_VISION = {**_QWEN_VISION, "num_position_embeddings": 2304, "patch_size": 16}
VISION_ROPE_FAMILIES_QWEN3: tuple[VisionRopeFamily, ...] = (
    VisionRopeFamily(
        "qwen3_vl",
        (
            "qwen3_vl_vision",
            "qwen3_vl_moe_vision",
            "qwen3_5_vision",
            "qwen3_5_moe_vision",
            "qwen3_omni_moe_vision_encoder",
            "qwen4_exp_vision",
            "qwen3_vl",  # registered as its text M-RoPE too: its vision_config read here, as qwen2_vl's
        ),
        merge_field="spatial_merge_size",
        grid_key="pos_embed.weight",
        defaults=_QWEN3_VISION,
    ),
    VisionRopeFamily(
        "qwen2_5_omni",
        ("qwen2_5_omni_vision_encoder",),
        merge_field="spatial_merge_size",
        window_field="window_size",
        defaults={**_QWEN_VISION, "hidden_size": 3584, "window_size": 112, "patch_size": 14},
    ),
    VisionRopeFamily(
        "glm_ocr",
        ("glm_ocr_vision", "glm5_next_vision", "glm_ocr"),
        merge_field="spatial_merge_size",
        defaults={**_QWEN_VISION, "hidden_size": 1024},
    ),
    VisionRopeFamily(
        "ernie4_5_vl",
        ("ernie4_5_vl_moe_vision",),
        merge_field="spatial_merge_size",
        defaults={**_QWEN_VISION, "hidden_size": 1280},
    ),
    VisionRopeFamily(
        "dots3_note",
        ("dots3_note_vision_encoder",),
        heads_field="num_attention_heads",
        merge_field="spatial_merge_size",
        defaults={"hidden_size": 1536, "num_attention_heads": 24, "spatial_merge_size": 2},
    ),
    # VideoLLaMA 3: Qwen2-VL's rotation; the merge size is a forward argument per image (its
    # processors': 1 for images, 2 for videos), not a config field: read as raster order (m = 1)
    VisionRopeFamily(
        "video_llama_3",
        ("video_llama_3_vision",),
        heads_field="num_attention_heads",
        defaults={"hidden_size": 768, "num_attention_heads": 12},
    ),
    # Kimi K2.5: Qwen2-VL's frequencies interleaved (column, row), raster order, a (64, 64, dim) grid resampled bicubically
    # (get_vision_interpolation_indices_and_weights, align_corners=False) and a per-frame sinusoid
    VisionRopeFamily(
        "kimi_k25",
        ("kimi_k25_vision",),
        split="axial_interleaved",
        heads_field="num_attention_heads",
        grid_key="pos_emb.position_embeddings",
        grid_convention="torch_bicubic",
        grid_side_field="pos_emb_height",
        frame_field="pos_emb_time",
        defaults={
            "hidden_size": 1152,
            "num_attention_heads": 16,
            "pos_emb_height": 64,
            "pos_emb_width": 64,
            "pos_emb_time": 4,
            "patch_size": 14,
        },
    ),
    # PaddleOCR-VL: Qwen2-VL's rotation in raster order (its merge is the projector's), a learned
    # grid of image_size // patch_size per side resampled bilinearly at the pixel centres
    VisionRopeFamily(
        "paddleocr_vl",
        ("paddleocr_vl_vision",),
        heads_field="num_attention_heads",
        grid_key="embeddings.position_embedding.weight",
        grid_convention="torch_bilinear",
        grid_side_fields=("image_size", "patch_size"),
        defaults={"hidden_size": 1152, "num_attention_heads": 16, "image_size": 384, "patch_size": 14},
    ),
    # MLCD: Qwen2-VL's rotation in raster order; its class token (first) turns by learned angles
    VisionRopeFamily(
        "mlcd",
        ("mlcd", "mlcd_vision_model"),
        heads_field="num_attention_heads",
        class_token=True,
        prefix_angle_key="class_pos_emb",
        defaults={"hidden_size": 1664, "num_attention_heads": 16},
    ),
    VisionRopeFamily(
        "glm4v",
        ("glm4v_vision", "glm4v_moe_vision", "glm4v", "glm4v_moe"),
        merge_field="spatial_merge_size",
        grid_key="embeddings.position_embedding.weight",
        grid_convention="torch_bicubic",
        grid_side_fields=("image_size", "patch_size"),
        defaults={**_QWEN_VISION, "hidden_size": 1536, "num_heads": 12, "image_size": 336, "patch_size": 14},
    ),
)
VISION_ROPE_FAMILIES = MappingProxyType(
    {**VISION_ROPE_FAMILIES, **{row.name: row for row in VISION_ROPE_FAMILIES_QWEN3}}
)

# Llama 4's tower (Llama4VisionRotaryEmbedding, vision_apply_rotary_emb): the axial frequencies with
# 1-based columns first, then rows, in complex (interleaved) pairs; the class token last, its angles
# masked to 0 (not rotated); a learned grid of (image_size // patch_size) ** 2 + 1 rows
# (positional_embedding_vlm, class token last) added as it is: every image is exactly image_size
# (its processor tiles larger ones), the limit.
VISION_ROPE_FAMILIES_ROUND3: tuple[VisionRopeFamily, ...] = (
    VisionRopeFamily(
        "llama4",
        ("llama4_vision_model",),
        split="axial_columns_first",
        layout="interleaved",
        heads_field="num_attention_heads",
        limit_fields=("image_size", "patch_size"),
        index_base=1,
        class_token_last=True,
        grid_key="positional_embedding_vlm",
        grid_convention="fixed",
        grid_side_fields=("image_size", "patch_size"),
        defaults={"hidden_size": 768, "num_attention_heads": 16, "image_size": 448, "patch_size": 14},
    ),
    # Step 3.5/3.7's tower (Step3p7VisionRotaryEmbedding, apply_rotary_pos_emb_vision): the axial
    # frequencies with the column first (freq.flip(1)), rotate_half, raster order; a learned grid of
    # image_size // patch_size per side resampled by F.interpolate(bilinear, align_corners=False)
    # (always: interpolate_pos_encoding=True), the identity at that size. No limit.
    VisionRopeFamily(
        "step3p5",
        ("step3p5_vision",),
        split="axial_columns_first",
        heads_field="num_attention_heads",
        grid_key="positional_embedding",  # transformers saves embeddings.position_embedding.weight under it
        grid_convention="torch_bilinear",
        grid_side_fields=("image_size", "patch_size"),
        defaults={"hidden_size": 1536, "num_attention_heads": 16, "image_size": 728, "patch_size": 14},
    ),
)
VISION_ROPE_FAMILIES = MappingProxyType(
    {**VISION_ROPE_FAMILIES, **{row.name: row for row in VISION_ROPE_FAMILIES_ROUND3}}
)


def _int_field(config: Mapping[str, Any], row: VisionRopeFamily, field: str, where: object) -> int:
    value = config.get(field, row.defaults.get(field))
    if isinstance(value, (list, tuple)) and len(value) == 2 and value[0] == value[1]:
        value = value[0]  # a square [n, n]
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise fail(where, f"{field} as a positive integer", repr(value)[:80])
    return value


def _theta(config: Mapping[str, Any], row: VisionRopeFamily, where: object) -> float:
    params = config.get("rope_parameters")
    theta = params.get("rope_theta") if isinstance(params, Mapping) else None
    if theta is None:
        theta = config.get("rope_theta", row.theta_default)
    if isinstance(theta, bool) or not isinstance(theta, (int, float)) or not theta > 1 or theta == float("inf"):
        raise fail(where, "rope_theta as a finite number above 1", repr(theta)[:80])
    if isinstance(params, Mapping) and params.get("rope_type", "axial") not in ("axial", "default"):
        raise fail(
            where,
            "rope_parameters.rope_type 'axial' (the only vision RoPE transformers builds)",
            repr(params.get("rope_type"))[:80],
        )
    return float(theta)


def vision_rope_config(row: VisionRopeFamily, config: Mapping[str, Any], where: object) -> VisionRopeConfig:
    """The :class:`~flax_posenc.VisionRopeConfig` of a vision tower's (sub-)config under ``row``.

    Raises:
      CheckpointError: a field that is not a positive integer, a head width that is not a
        multiple of 4, a window smaller than a merged block (one line naming the field).
    """
    head_dim = config.get("head_dim")
    if head_dim is None:
        width = _int_field(config, row, row.width_field, where)
        heads = _int_field(config, row, row.heads_field, where)
        if width % heads:
            raise fail(where, f"{row.width_field} divisible by {row.heads_field} {heads}", str(width))
        head_dim = width // heads
    if isinstance(head_dim, bool) or not isinstance(head_dim, int) or head_dim < 4 or head_dim % 4:
        raise fail(
            where, "a head width (head_dim) that is a positive multiple of 4 (two axes of pairs)", repr(head_dim)[:80]
        )
    merge = _int_field(config, row, row.merge_field, where) if row.merge_field else 1
    window = patch = None
    if row.window_field:
        window = _int_field(config, row, row.window_field, where)
        patch = _int_field(config, row, "patch_size", where)
        if window // merge // patch < 1:
            raise fail(
                where,
                f"{row.window_field} of at least spatial_merge_size * patch_size = {merge * patch} px",
                str(window),
            )
    side = None
    if row.limit_fields:
        image = _int_field(config, row, row.limit_fields[0], where)
        patch_size = _int_field(config, row, row.limit_fields[1], where)
        if image % patch_size:
            raise fail(where, f"{row.limit_fields[0]} divisible by {row.limit_fields[1]} {patch_size}", str(image))
        side = image // patch_size
    prefix = 0
    if row.class_token:
        prefix = 1 + (_registers(config, row, where) if row.register_field else 0)
    return VisionRopeConfig(
        head_dim=head_dim,
        rope_theta=_theta(config, row, where),
        split=row.split,  # type: ignore[arg-type]
        layout=row.layout,  # type: ignore[arg-type]
        coordinates=row.coordinates,  # type: ignore[arg-type]
        patches_per_side=side,
        prefix_tokens=prefix,
        spatial_merge_size=merge,
        window_size=window,
        patch_size=patch,
        suffix_tokens=1 if row.class_token_last else 0,
        index_base=row.index_base,
    )


def _registers(config: Mapping[str, Any], row: VisionRopeFamily, where: object) -> int:
    assert row.register_field is not None
    value = config.get(row.register_field, row.defaults.get(row.register_field, 0))
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise fail(where, f"{row.register_field} as a non-negative integer", repr(value)[:80])
    return value


@dataclasses.dataclass(frozen=True)
class VisionRopeSource:
    """A vision tower's 2-D RoPE as a :class:`~flax_posenc.conversion.SourceRecord` (a ``vision_rope`` mechanism).

    Like a position grid it limits the *image*, not a token count, so ``limit`` is ``None``;
    :meth:`check_image_size` asks about an image. ``config`` is the
    :class:`~flax_posenc.VisionRopeConfig` for :func:`flax_posenc.apply_vision_rope`.
    ``grid_side``/``grid_key``/``grid_convention``: a learned ``grid_side x grid_side`` position
    grid (the tensor ``*grid_key``) the tower also adds, resampled to every image
    (:func:`flax_posenc.vision_grid_positions`); ``None``: none. ``frames``: Kimi K2.5's fixed
    per-frame sinusoid holds this many frames per clip (:func:`flax_posenc.vision_frame_sinusoid`).
    """

    source: str
    model_type: str
    family: str
    config: VisionRopeConfig
    patch_size: int | None = None
    grid_side: int | None = None
    grid_key: str | None = None
    grid_convention: str | None = None
    frames: int | None = None
    prefix_angle_key: str | None = None

    scheme = "vision_rope"
    key = None

    @property
    def limit(self) -> None:
        return None

    @property
    def patches_per_side(self) -> int | None:
        """The trained grid's side (Pixtral: ``image_size // patch_size``); ``None``: no limit."""
        return self.config.patches_per_side

    @property
    def name(self) -> str:
        return f"{self.family} vision RoPE of {self.source}" if self.source else f"{self.family} vision RoPE"

    def describe_grid(self) -> str | None:
        """The learned grid beside the rotation, in words (``None``: none)."""
        if self.grid_side is None:
            return None
        side = self.grid_side
        if self.grid_convention == "fixed":  # Llama 4: added as it is, the class token's row last
            return (
                f"a learned {side} x {side} position grid plus the class token's row, last ({self.grid_key}), "
                f"added as it is (not resampled): every image {side} x {side} patches"
            )
        how = {
            "torch_bicubic": "bicubic at the patch centres",
            "torch_bilinear": "bilinear at the patch centres",
        }.get(str(self.grid_convention), "bilinear, corners aligned")
        line = f"a learned {side} x {side} position grid ({self.grid_key}) resampled to every image ({how})"
        if self.frames is not None:
            line += f", plus a fixed [sin | cos] sinusoid per frame of a clip of up to {self.frames} frames"
        return line

    def describe_limit(self) -> str:
        c = self.config
        if c.patches_per_side is None:
            why = (
                "patch centres normalized to [-1, 1]"
                if c.coordinates == "normalized"
                else "the angles are computed for any grid of patches"
            )
            if self.grid_side is not None:
                why += f", and {self.describe_grid()}"
            return f"{self.name} has no limit ({why})"
        side = c.patches_per_side
        px = f"; {side * self.patch_size} px at patch_size {self.patch_size}" if self.patch_size else ""
        if self.grid_convention == "fixed":  # Llama 4: one image size, its rotary table's and its grid's
            return (
                f"{self.name} holds exactly {side} x {side} patches (rows and columns 0..{side - 1}{px}; no other size)"
            )
        return f"{self.name} holds {side} patches per side (rows and columns 0..{side - 1}{px})"

    def check_length(self, length: int) -> tuple[bool, str]:
        """A token count is not what a vision RoPE limits: always fits; the line says so."""
        return True, f"{self.describe_limit()}; it limits the image size, not a token count (check --image-size)"

    def check_image_size(self, image_size: Any) -> tuple[bool, str]:
        """``(fits, line)`` for an image of ``image_size`` px (an int or ``(h, w)``).

        Raises:
          CheckpointError: a size that is not a whole number of patches (one line).
        """
        patch = self.patch_size or 1
        gh, gw = image_grid(image_size, patch, where="--image-size")
        side = self.config.patches_per_side
        if self.grid_convention == "fixed" and side is not None and (gh, gw) != (side, side):
            return False, (
                f"{self.describe_limit()}; a {gh * patch} x {gw * patch} px image is {gh} x {gw} patches, "
                f"not {side} x {side} (its processor tiles an image to {side * patch} px tiles)"
            )
        if side is None or max(gh, gw) <= side:
            return True, f"{self.describe_limit()}; a {gh * patch} x {gw * patch} px image fits ({gh} x {gw} patches)"
        return False, (
            f"{self.describe_limit()}; a {gh * patch} x {gw * patch} px image needs {gh} x {gw} patches: "
            f"{max(gh, gw) - side} past the trained side"
        )

    def to_dict(self) -> dict[str, Any]:
        c = self.config
        return {
            "source": self.source,
            "model_type": self.model_type,
            "family": self.family,
            "scheme": self.scheme,
            "head_dim": c.head_dim,
            "rope_theta": c.rope_theta,
            "split": c.split,
            "layout": c.layout,
            "coordinates": c.coordinates,
            "patches_per_side": c.patches_per_side,
            "patch_size": self.patch_size,
            "prefix_tokens": c.prefix_tokens,
            "suffix_tokens": c.suffix_tokens,
            "index_base": c.index_base,
            "spatial_merge_size": c.spatial_merge_size,
            "window_size": c.window_size,
            "grid_side": self.grid_side,
            "grid_key": self.grid_key,
            "grid_convention": self.grid_convention,
            "frames": self.frames,
            "prefix_angle_key": self.prefix_angle_key,
            "limit": self.limit,
        }

    def __str__(self) -> str:
        c = self.config
        order = f"{c.spatial_merge_size} x {c.spatial_merge_size} blocks" if c.spatial_merge_size > 1 else "raster"
        if c.window_size:
            order += f", windows of {c.window_size} px"
        return "\n".join(
            [
                f"source:      {self.source}",
                f"family:      {self.family} (model_type {self.model_type})",
                "scheme:      vision_rope",
                f"rotation:    2-D {c.split} split of head_dim {c.head_dim}, theta {c.rope_theta:g}, {c.layout} pairs, "
                f"{c.coordinates} coordinates, {order}"
                + (
                    f", {c.prefix_tokens} prefix tokens turned by learned angles ({self.prefix_angle_key})"
                    if c.prefix_tokens and self.prefix_angle_key
                    else f", {c.prefix_tokens} prefix tokens not rotated"
                    if c.prefix_tokens
                    else ""
                )
                + (f", {c.suffix_tokens} suffix token not rotated" if c.suffix_tokens else "")
                + (f", indices from {c.index_base}" if c.index_base else ""),
                *([f"grid:        {self.describe_grid()}"] if self.grid_side is not None else []),
                f"limit:       {self.describe_limit()}",
            ]
        )


def read_vision_rope(
    row: VisionRopeFamily, config: Mapping[str, Any], source: str, where: object
) -> list[VisionRopeSource]:
    """The vision RoPE of a parsed ``config.json`` (a vision tower's, or a composite's whose
    ``vision_config`` it reads) under ``row``.

    Raises:
      CheckpointError: a field it needs is not what transformers builds (one line naming it).
    """
    model_type = str(config.get("model_type"))
    sub = config.get("vision_config")
    if isinstance(sub, Mapping):  # Qwen2-VL registered as its own type: its vision tower's sub-config
        config, where = sub, f"{where}:vision_config"
    elif sub is not None:
        raise fail(where, "vision_config as an object", type(sub).__name__)
    cfg = vision_rope_config(row, config, where)
    patch = config.get("patch_size", row.defaults.get("patch_size"))  # a square [n, n] is n; another: refused
    patch_size = None if patch is None else _int_field(config, row, "patch_size", where)
    if row.grid_key is None:
        return [VisionRopeSource(source, model_type, row.name, cfg, patch_size, prefix_angle_key=row.prefix_angle_key)]
    if row.grid_side_field is not None:
        side = _int_field(config, row, row.grid_side_field, where)
        width = _int_field(config, row, "pos_emb_width", where) if "pos_emb_width" in row.defaults else side
        if width != side:  # transformers resamples it as a square of pos_emb_height per side
            raise fail(where, f"pos_emb_width equal to {row.grid_side_field} {side} (a square grid)", str(width))
    elif row.grid_side_fields is not None:
        image, patch_field = (_int_field(config, row, f, where) for f in row.grid_side_fields)
        side = image // patch_field
        if side < 1:
            raise fail(where, f"{row.grid_side_fields[0]} of at least one {row.grid_side_fields[1]}", str(image))
    else:
        rows = _int_field(config, row, row.grid_rows_field, where)
        side = math.isqrt(rows)
        if side * side != rows:
            raise fail(where, f"{row.grid_rows_field} a square number (a side x side grid)", str(rows))
    frames = _int_field(config, row, row.frame_field, where) if row.frame_field else None
    return [
        VisionRopeSource(source, model_type, row.name, cfg, patch_size, side, row.grid_key, row.grid_convention, frames)
    ]


def load_vision_prefix_angles(source: Any, record: VisionRopeSource) -> np.ndarray:
    """MLCD's learned class-token angles ``(prefix_tokens, head_dim // 2)`` (``class_pos_emb``),
    read from ``source`` (only that tensor): the ``prefix_angles`` of
    :func:`flax_posenc.apply_vision_rope`.

    Raises:
      CheckpointError: ``record`` has none, no (or several) tensors named ``*prefix_angle_key``,
        or one of another shape (one line naming the file).
    """
    if record.prefix_angle_key is None:
        raise fail(record.source or "record", "a vision RoPE with learned prefix angles", f"{record.family} (none)")
    ckpt = open_checkpoint(source)
    key = record.prefix_angle_key
    keys = sorted(k for k in ckpt.reader.keys() if k == key or k.endswith("." + key))
    if len(keys) != 1:
        raise fail(ckpt.weights_path, f"one learned prefix angle tensor *{key}", ", ".join(keys[:4]) or "none")
    angles = read_float(ckpt.reader, keys[0], ndim=2, what=f"{record.family} prefix angles")
    want = (record.config.prefix_tokens, record.config.head_dim // 2)
    if angles.shape != want:
        raise fail(ckpt.weights_path, f"{keys[0]} of shape {want}", str(angles.shape))
    return angles


def load_vision_grid(source: Any, record: VisionRopeSource) -> np.ndarray:
    """The learned position grid ``record`` names, ``(grid_side ** 2, dim)``, read from ``source``
    (a checkpoint directory, weights file or Hub id: only that tensor).

    Raises:
      CheckpointError: ``record`` has no grid, no (or several) tensors named ``*grid_key``, or
        one whose rows are not ``grid_side ** 2`` (one line naming the file).
    """
    if record.grid_key is None or record.grid_side is None:
        raise fail(record.source or "record", "a vision RoPE with a learned grid", f"{record.family} (none)")
    ckpt = open_checkpoint(source)
    keys = sorted(k for k in ckpt.reader.keys() if k == record.grid_key or k.endswith("." + record.grid_key))
    if len(keys) != 1:
        raise fail(ckpt.weights_path, f"one position grid *{record.grid_key}", ", ".join(keys[:4]) or "none")
    _, shape = ckpt.reader.info(keys[0])
    if len(shape) == 3 and shape[0] == shape[1]:  # Kimi K2.5: an (h, w, dim) parameter
        table = read_float(ckpt.reader, keys[0], ndim=3, what=f"{record.family} position grid")
        table = table.reshape(shape[0] * shape[1], shape[2])
    else:
        table = read_float(ckpt.reader, keys[0], ndim=2, what=f"{record.family} position grid")
    extra = record.config.suffix_tokens if record.grid_convention == "fixed" else 0  # Llama 4's class row
    if table.shape[0] != record.grid_side**2 + extra:
        more = f" + {extra} class token" if extra else ""
        raise fail(
            ckpt.weights_path,
            f"{keys[0]} of {record.grid_side**2 + extra} rows ({record.grid_side} x {record.grid_side}{more})",
            f"{table.shape[0]} rows",
        )
    return table
