"""Variable-resolution (NaFlex) position grids: conventions, the patch budget and the processor's size (numpy only).

SigLIP 2's NaFlex checkpoints (and LFM2-VL, whose vision tower is SigLIP 2's) keep one square
learned grid (``num_patches`` rows, 16 x 16 in the published ones) and resize it **per image** to
that image's own patch grid ``(h, w)`` (its ``spatial_shapes`` row), keeping the aspect ratio.
The image processor first scales each image so that ``h * w`` fits the **patch budget**
``max_num_patches`` (256 by default for SigLIP 2; the sequence is padded to it), so the budget is
the limit: an image of more patches than the budget is refused by the model
(``Siglip2VisionEmbeddings.resize_positional_embeddings``: "Resized positional embeddings exceed
max_length").

Each row of :data:`NAFLEX_CONVENTIONS` is one recipe, read from the code that defines it:

- ``"siglip2"``: transformers 5.24.0 ``Siglip2VisionEmbeddings.resize_positional_embeddings``:
  the weights of ``F.interpolate(mode="bilinear", align_corners=False, antialias=True)`` (the
  triangle kernel widened by the scale when shrinking, renormalised at the edges), computed in
  float32; the padding positions past ``h * w`` get the resized grid's first entry ``(0, 0)``;
- ``"timm"``: timm's ``NaFlexEmbeds._apply_learned_naflex_pos_embed`` with
  ``NaFlexVitCfg``'s default ``pos_embed_interp_mode="bicubic"``:
  ``F.interpolate(mode="bicubic", align_corners=False, antialias=True)`` (the
  :data:`~flax_posenc.grid_config.GRID_CONVENTIONS` row ``torch_bicubic_antialias``); the
  padding positions get nothing (zeros);
- ``"timm_siglip"``: timm's ``naflexvit_base_patch16_siglip`` / ``naflexvit_so400m_patch16_siglip``
  (``pos_embed_interp_mode="bilinear"``): transformers' resampling, zeros on the padding.

>>> naflex_spatial_shape((256, 256), 16, 256)
(16, 16)
>>> naflex_spatial_shape((256, 512), 16, 256)
Traceback (most recent call last):
...
flax_posenc.errors.PositionLimitError: the patch budget (max_num_patches) holds 256 patches per image; a 256 x 512 px image gives 16 x 32 = 512 patches
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

import numpy as np

from flax_posenc.errors import PositionLimitError
from flax_posenc.grid_config import (
    GRID_CONVENTIONS,
    MAX_GRID_SIDE,
    MAX_IMAGE_SIDE,
    MAX_PATCHES,
    GridConvention,
    image_grid,
    resize_matrix,
)

__all__ = [
    "NAFLEX_CONVENTIONS",
    "NaflexConvention",
    "check_patch_budget",
    "naflex_convention",
    "naflex_image_size",
    "naflex_resize_values",
    "naflex_spatial_shape",
]


@dataclasses.dataclass(frozen=True)
class NaflexConvention:
    """One way of resizing a NaFlex grid per image (a row of :data:`NAFLEX_CONVENTIONS`).

    Attributes:
      name: the key in :data:`NAFLEX_CONVENTIONS`.
      grid_convention: the 1-D resampling, a :data:`~flax_posenc.grid_config.GRID_CONVENTIONS` name.
      padding: what the positions past ``h * w`` (up to the patch budget) get: ``"first"``, the
        resized grid's entry ``(0, 0)`` (transformers), or ``"zeros"`` (timm adds nothing there).
      reference: where the recipe is defined.
    """

    name: str
    grid_convention: str
    padding: str
    reference: str

    @property
    def resampling(self) -> GridConvention:
        """The 1-D resampling rule (a :class:`~flax_posenc.grid_config.GridConvention`)."""
        return GRID_CONVENTIONS[self.grid_convention]


NAFLEX_CONVENTIONS: Mapping[str, NaflexConvention] = MappingProxyType(
    {
        row.name: row
        for row in (
            NaflexConvention(
                "siglip2",
                "torch_bilinear_antialias",
                "first",
                "transformers Siglip2VisionEmbeddings.resize_positional_embeddings (SigLIP 2, LFM2-VL): "
                "the weights of F.interpolate(mode='bilinear', align_corners=False, antialias=True); "
                "padding positions take the resized (0, 0)",
            ),
            NaflexConvention(
                "timm",
                "torch_bicubic_antialias",
                "zeros",
                "timm NaFlexEmbeds._apply_learned_naflex_pos_embed, NaFlexVitCfg default "
                "pos_embed_interp_mode='bicubic': F.interpolate(mode='bicubic', align_corners=False, "
                "antialias=True); padding positions get nothing",
            ),
            NaflexConvention(
                "timm_siglip",
                "torch_bilinear_antialias",
                "zeros",
                "timm naflexvit_*_siglip (pos_embed_interp_mode='bilinear'): F.interpolate(mode='bilinear', "
                "align_corners=False, antialias=True); padding positions get nothing",
            ),
        )
    }
)

#: Aliases: a model type -> its convention name.
_ALIASES = {"siglip2_vision_model": "siglip2", "lfm2_vl": "siglip2", "transformers": "siglip2"}


def naflex_convention(name: str | NaflexConvention) -> NaflexConvention:
    """The :class:`NaflexConvention` named ``name`` (a row name, ``"siglip2_vision_model"``, ``"lfm2_vl"``).

    >>> naflex_convention("lfm2_vl").grid_convention
    'torch_bilinear_antialias'
    >>> naflex_convention("nope")
    Traceback (most recent call last):
    ...
    ValueError: convention: expected one of lfm2_vl, siglip2, siglip2_vision_model, timm, timm_siglip, transformers, got 'nope'
    """
    if isinstance(name, NaflexConvention):
        return name
    if isinstance(name, str):
        key = name.replace("-", "_")
        key = _ALIASES.get(key, key)
        if key in NAFLEX_CONVENTIONS:
            return NAFLEX_CONVENTIONS[key]
    known = ", ".join(sorted({*NAFLEX_CONVENTIONS, *_ALIASES}))
    raise ValueError(f"convention: expected one of {known}, got {name!r}")


def check_patch_budget(max_num_patches: Any, *, where: object = "max_num_patches") -> int:
    """``max_num_patches`` as an int in ``1..MAX_PATCHES``; else one-line ``ValueError`` naming ``where``.

    >>> check_patch_budget(0)
    Traceback (most recent call last):
    ...
    ValueError: max_num_patches: expected a patch budget (a positive integer up to 4194304), found 0
    """
    value = max_num_patches
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or not 0 < value <= MAX_PATCHES:
        raise ValueError(f"{where}: expected a patch budget (a positive integer up to {MAX_PATCHES}), found {value!r}")
    return int(value)


def budget_phrase(max_num_patches: int) -> str:
    """``"the patch budget (max_num_patches) holds 256 patches per image"``: the limit sentence's subject."""
    return f"the patch budget (max_num_patches) holds {max_num_patches} patches per image"


def check_spatial_shape(
    spatial_shape: Any, max_num_patches: int, *, where: object = "spatial_shape"
) -> tuple[int, int]:
    """``(h, w)`` patches of one image, each side in ``1..MAX_GRID_SIDE``, ``h * w`` within the budget.

    Raises:
      ValueError: not a pair of positive integers (one line naming ``where``).
      PositionLimitError: ``h * w > max_num_patches`` (the limit sentence).

    >>> check_spatial_shape((12, 20), 256)
    (12, 20)
    """
    budget = check_patch_budget(max_num_patches)
    pair = tuple(spatial_shape) if isinstance(spatial_shape, (tuple, list, np.ndarray)) else None
    if (
        pair is None
        or len(pair) != 2
        or any(isinstance(s, bool) or not isinstance(s, (int, np.integer)) or not 0 < s <= MAX_GRID_SIDE for s in pair)
    ):
        raise ValueError(
            f"{where}: expected (height, width) in patches, each 1..{MAX_GRID_SIDE}, found {spatial_shape!r}"[:200]
        )
    h, w = int(pair[0]), int(pair[1])
    if h * w > budget:
        raise PositionLimitError(f"{budget_phrase(budget)}; asked for {h} x {w} = {h * w} patches")
    return h, w


def naflex_spatial_shape(image_size: Any, patch_size: Any, max_num_patches: int) -> tuple[int, int]:
    """The ``(h, w)`` patch grid of an image of ``image_size`` px (already sized: no processor resize).

    Raises:
      CheckpointError: (a ``ValueError``) a size that is not a whole number of patches, one line.
      ValueError: a budget that is not a positive integer.
      PositionLimitError: more patches than ``max_num_patches``.

    >>> naflex_spatial_shape((192, 320), 16, 256)
    (12, 20)
    """
    budget = check_patch_budget(max_num_patches)
    h, w = image_grid(image_size, patch_size, where="image_size")
    if h * w > budget:
        px = image_size if isinstance(image_size, (tuple, list)) else (image_size, image_size)
        raise PositionLimitError(
            f"{budget_phrase(budget)}; a {px[0]} x {px[1]} px image gives {h} x {w} = {h * w} patches"
        )
    return h, w


def naflex_image_size(height: int, width: int, patch_size: int, max_num_patches: int) -> tuple[int, int]:
    """The size SigLIP 2's image processor resizes an image to (``get_image_size_for_max_num_patches``).

    The largest scale (a bisection to ``1e-5``) at which both sides, each rounded up to a multiple
    of ``patch_size`` and at least one patch, give at most ``max_num_patches`` patches; the same
    float steps as transformers, so the same pixels.

    Args:
      height, width: the image in pixels (positive); patch_size: pixels per patch side.
      max_num_patches: the patch budget.

    Returns:
      ``(target_height, target_width)`` px, multiples of ``patch_size``.

    >>> naflex_image_size(480, 640, 16, 256)
    (224, 288)
    """
    budget = check_patch_budget(max_num_patches)
    for name, v, bound in (("height", height, MAX_IMAGE_SIDE), ("width", width, MAX_IMAGE_SIDE)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or not 0 < v <= bound:
            raise ValueError(f"{name}: expected a positive integer of pixels up to {bound}, found {v!r}")
    if isinstance(patch_size, bool) or not isinstance(patch_size, (int, np.integer)) or not 0 < patch_size <= 4096:
        raise ValueError(f"patch_size: expected a positive integer up to 4096, found {patch_size!r}")

    def scaled(scale: float, size: int) -> int:
        return int(max(patch_size, math.ceil(size * scale / patch_size) * patch_size))

    eps = 1e-5
    lo, hi = eps / 10, 100.0
    while (hi - lo) >= eps:
        scale = (lo + hi) / 2
        if (scaled(scale, height) / patch_size) * (scaled(scale, width) / patch_size) <= budget:
            lo = scale
        else:
            hi = scale
    return scaled(lo, height), scaled(lo, width)


def naflex_resize_values(
    grid: np.ndarray, spatial_shape: Any, max_num_patches: int, convention: Any = "siglip2"
) -> np.ndarray:
    """The float64 reference: ``(max_num_patches, dim)`` positions of one image (numpy).

    ``grid`` is ``(gh, gw, dim)``; the result holds the ``h * w`` resized positions row-major,
    then the padding rows (the convention's ``padding``). What :func:`flax_posenc.naflex_positions`
    computes on device, in float64 on the host.

    >>> naflex_resize_values(np.ones((2, 2, 1)), (1, 3), 4)[:, 0].tolist()
    [1.0, 1.0, 1.0, 1.0]
    """
    rule = naflex_convention(convention)
    h, w = check_spatial_shape(spatial_shape, max_num_patches)
    g = np.asarray(grid, np.float64)
    if g.ndim != 3:
        raise ValueError(f"grid: expected a (gh, gw, dim) grid, found shape {g.shape}")
    a_h = resize_matrix(g.shape[0], h, rule.resampling)
    a_w = resize_matrix(g.shape[1], w, rule.resampling)
    resized = np.einsum("oh,hwd,pw->opd", a_h, g, a_w).reshape(h * w, g.shape[2])
    pad = max_num_patches - h * w
    fill = np.repeat(resized[:1], pad, 0) if rule.padding == "first" else np.zeros((pad, g.shape[2]))
    return np.concatenate([resized, fill], 0)
