"""How each vision model resizes its learned 2-D position grid: conventions as data, numpy only.

A vision transformer trained at one resolution holds a ``(gh, gw)`` grid of learned position
vectors (plus rows for its class/distillation tokens). At another resolution the grid is
resampled, and every family does it a little differently. Each row of
:data:`GRID_CONVENTIONS` is one such recipe, read from the code that defines it:

- ``"torch_bicubic"``: ``F.interpolate(mode="bicubic", align_corners=False, size=...)``, the
  cubic convolution kernel with ``a = -0.75``, edge rows replicated (transformers' ViT, DeiT,
  DINOv2, CLIP and SigLIP ``interpolate_pos_encoding``);
- ``"torch_bicubic_antialias"``: the same call with ``antialias=True``: torch's separable
  antialiased resampler, a PIL-style cubic with ``a = -0.5`` widened by the scale when
  shrinking, taps renormalised at the edges (transformers' DINOv2-with-registers, timm's
  ``resample_abs_pos_embed``);
- ``"torch_bicubic_align_corners"``: the same call with ``align_corners=True`` (corner samples
  map to corner samples, step ``(in - 1) / (out - 1)``);
- ``"torch_bicubic_offset"``: facebookresearch/dinov2's ``interpolate_pos_encoding``
  (``scale_factor=(new + 0.1) / old``, so the output size is ``floor(old * scale_factor)`` and
  the sampling step is ``1 / scale_factor``, not ``old / new``);
- ``"torch_bilinear_antialias"``: ``F.interpolate(mode="bilinear", antialias=True)``: torch's
  antialiased resampler with the triangle kernel (transformers' TIPSv2);
- ``"big_vision"``: ``scipy.ndimage.zoom(order=1)`` of big_vision's ``resample_posemb``:
  bilinear, corners aligned, no prefix tokens (its class token is not in the grid);
- ``"idefics_buckets"``: transformers' Idefics 2/3 and SmolVLM vision embeddings: patch ``i`` of
  ``n`` takes the grid row of the bucket its fraction ``i / n`` falls in (no interpolation);
  ``"minicpm_buckets"`` the same with the fraction computed as a division (MiniCPM-V).

:func:`resize_matrix` is the 1-D resampling of one axis as an ``(out, in)`` float64 matrix;
a 2-D resize is ``A_h @ grid @ A_w.T`` per channel (every convention here is separable).

>>> m = resize_matrix(2, 4, GRID_CONVENTIONS["torch_bicubic"])
>>> m.shape, bool(np.allclose(m.sum(axis=1), 1.0))
((4, 2), True)
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

import numpy as np

from flax_posenc.errors import CheckpointError
from flax_posenc.limits import prefix_text

__all__ = [
    "GRID_CONVENTIONS",
    "MAX_GRID_SIDE",
    "MAX_IMAGE_SIDE",
    "MAX_PATCHES",
    "MODEL_TYPE_CONVENTIONS",
    "GridConvention",
    "GridSpec",
    "convention_for",
    "grid_of_rows",
    "image_grid",
    "positive_pair",
    "prefix_text",
    "resize_matrix",
]

#: patches along one side of a grid (a 16-px patch at 1 Mpx a side: 65536); bounds the matrices.
MAX_GRID_SIDE = 1 << 16
#: pixels along one side of an image (2**16 px: 64 times a 1024-px ViT input).
MAX_IMAGE_SIDE = 1 << 16
#: patches in one resized grid (2**22: a 2048 x 2048 grid).
MAX_PATCHES = 1 << 22


# ----------------------------------------------------------------------------- grid geometry
# (numpy floor: the checkpoint reader and the jax core both ask it)


def _fail(where: object, expected: str, found: str) -> CheckpointError:
    return CheckpointError(f"{where}: expected {expected}, found {found}")


def _positive_int(value: Any, field: str, where: object, bound: int) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value <= 0:
        raise _fail(where, f"{field} as a positive integer", repr(value)[:80])
    if value > bound:
        raise _fail(where, f"{field} at most {bound}", repr(value)[:80])
    return int(value)


def positive_pair(value: Any, field: str, where: object, bound: int) -> tuple[int, int]:
    """``224`` or ``(224, 224)`` -> ``(224, 224)``, each a positive integer at most ``bound``."""
    if isinstance(value, (list, tuple)):
        if len(value) != 2:
            raise _fail(where, f"{field} as one integer or (height, width)", repr(value)[:80])
        return _positive_int(value[0], field, where, bound), _positive_int(value[1], field, where, bound)
    side = _positive_int(value, field, where, bound)
    return side, side


def image_grid(image_size: Any, patch_size: Any, *, where: object = "image_size") -> tuple[int, int]:
    """The ``(gh, gw)`` patch grid of an image: ``image_size / patch_size`` along each side.

    Raises:
      ValueError: (a :class:`~flax_posenc.CheckpointError`) a size that is not a positive
        integer, an image side past :data:`MAX_IMAGE_SIDE`, a patch size that does not divide
        the image size, or more than :data:`MAX_PATCHES` patches; one line naming the field.

    >>> image_grid(448, 16)
    (28, 28)
    >>> image_grid(230, 16)
    Traceback (most recent call last):
    ...
    flax_posenc.errors.CheckpointError: image_size: expected image_size divisible by patch_size 16, found 230 x 230 px
    """
    h, w = positive_pair(image_size, "image_size", where, MAX_IMAGE_SIDE)
    ph, pw = positive_pair(patch_size, "patch_size", where, MAX_IMAGE_SIDE)
    if h % ph or w % pw:
        patch = f"{ph}" if ph == pw else f"{ph} x {pw}"
        raise _fail(where, f"image_size divisible by patch_size {patch}", f"{h} x {w} px")
    gh, gw = h // ph, w // pw
    if gh * gw > MAX_PATCHES:
        raise _fail(where, f"at most {MAX_PATCHES} patches", f"{gh} x {gw} = {gh * gw} patches")
    return gh, gw


def grid_of_rows(rows: int, prefix_tokens: int, *, where: object = "grid table") -> tuple[int, int]:
    """The square ``(g, g)`` grid of a table of ``rows = prefix_tokens + g * g`` rows.

    Raises:
      CheckpointError: ``rows - prefix_tokens`` is not a positive square (one line).

    >>> grid_of_rows(197, 1)
    (14, 14)
    """
    patches = rows - prefix_tokens
    side = math.isqrt(patches) if patches > 0 else 0
    if side == 0 or side * side != patches:
        raise _fail(where, f"{prefix_tokens} prefix rows + a square grid of patches", f"{rows} rows")
    return side, side


@dataclasses.dataclass(frozen=True)
class GridConvention:
    """One way of resampling a 2-D position grid (a row of :data:`GRID_CONVENTIONS`).

    Attributes:
      name: the key in :data:`GRID_CONVENTIONS`.
      kernel: ``"cubic"`` or ``"linear"`` (scipy's corner-aligned zoom, or torch's triangle
        kernel on the antialiased path), or ``"bucket"`` (Idefics' bucketed position ids: each
        output sample is one input row, chosen in float32 as its forward does).
      a: the cubic convolution parameter (torch: -0.75; torch's antialiased path and PIL: -0.5).
      align_corners: sample positions map corner to corner (``(in-1)/(out-1)``) instead of
        pixel centre to pixel centre (``in/out``).
      antialias: torch's antialiased path (support widened by the scale when shrinking, taps
        outside the input dropped and the rest renormalised) instead of the 4-tap kernel with
        replicated edges.
      scale_offset: ``None``: the output size is given (step ``in / out``); a number ``o``: the
        output size is ``floor(in * (new + o) / in)`` and the step ``in / (new + o)``
        (facebookresearch/dinov2's ``scale_factor`` call).
      keep_same_size: return the grid untouched when the new grid equals the trained one (the
        shortcut every transformers ``interpolate_pos_encoding`` takes).
      reference: where the recipe is defined.
    """

    name: str
    kernel: str
    a: float
    align_corners: bool
    antialias: bool
    reference: str
    scale_offset: float | None = None
    keep_same_size: bool = True


GRID_CONVENTIONS: Mapping[str, GridConvention] = MappingProxyType(
    {
        row.name: row
        for row in (
            GridConvention(
                "torch_bicubic",
                "cubic",
                -0.75,
                False,
                False,
                "transformers ViT/DeiT/DINOv2/CLIP/SigLIP interpolate_pos_encoding: "
                "F.interpolate(size=..., mode='bicubic', align_corners=False)",
            ),
            GridConvention(
                "torch_bicubic_antialias",
                "cubic",
                -0.5,
                False,
                True,
                "transformers Dinov2WithRegisters interpolate_pos_encoding and timm "
                "resample_abs_pos_embed: F.interpolate(mode='bicubic', antialias=True)",
            ),
            GridConvention(
                "torch_bilinear_antialias",
                "linear",
                0.0,
                False,
                True,
                "transformers TIPSv2 interpolate_pos_encoding: "
                "F.interpolate(size=..., mode='bilinear', align_corners=False, antialias=True)",
            ),
            GridConvention(
                "torch_bicubic_align_corners",
                "cubic",
                -0.75,
                True,
                False,
                "F.interpolate(size=..., mode='bicubic', align_corners=True)",
            ),
            GridConvention(
                "torch_bicubic_offset",
                "cubic",
                -0.75,
                False,
                False,
                "facebookresearch/dinov2 interpolate_pos_encoding: "
                "F.interpolate(scale_factor=(new + 0.1) / old, mode='bicubic')",
                scale_offset=0.1,
            ),
            GridConvention(  # issue 35 item 2: PaddleOCR-VL's vision tower
                "torch_bilinear",
                "linear",
                0.0,
                False,
                False,
                "F.interpolate(size=..., mode='bilinear', align_corners=False) and transformers' "
                "get_vision_interpolation_indices_and_weights(mode='bilinear', align_corners=False)",
            ),
            GridConvention(
                "big_vision",
                "linear",
                0.0,
                True,
                False,
                "big_vision models/vit.py resample_posemb: scipy.ndimage.zoom(grid, zoom, order=1)",
            ),
        )
    }
)

# ---- issue 35 item 7: Idefics 2/3's and SmolVLM's bucketed position ids, a row of its own
GRID_CONVENTIONS = MappingProxyType(
    {
        **GRID_CONVENTIONS,
        "idefics_buckets": GridConvention(
            "idefics_buckets",
            "bucket",
            0.0,
            False,
            False,
            "transformers Idefics2/Idefics3/SmolVLM VisionEmbeddings.forward: patch i of n takes grid row "
            "bucketize(float32(i) * float32(1 / n), arange(1 / side, 1, 1 / side), right=True) "
            "(fractions clamped to 1 - 1e-6): nearest-below, no interpolation, even at the trained size",
            keep_same_size=False,
        ),
        "minicpm_buckets": GridConvention(
            "minicpm_buckets",
            "bucket",
            0.0,
            False,
            False,
            "transformers vision_utils.get_vision_nearest_position_ids (MiniCPM-V 4.6/4.7, MiniCPM-OCR): "
            "patch i of n takes grid row bucketize(float32(i) / float32(n), arange(1 / side, 1, 1 / side), "
            "right=True): nearest-below, no interpolation, even at the trained size",
            keep_same_size=False,
        ),
    }
)


def _bucket_rows(in_size: int, new_size: int, divide: bool = False) -> np.ndarray:
    """The grid row each of ``new_size`` patches takes under Idefics' bucketed position ids (``i *
    (1 / n)``, clamped below 1) or MiniCPM's (``divide``: ``i / n``), in the float32 arithmetic of
    their forward (``torch.arange`` of the boundaries in double, stored float32)."""
    start = 1.0 / in_size
    count = max(0, math.ceil((1.0 - start) / start))
    boundaries = (start + np.arange(count, dtype=np.float64) * start).astype(np.float32)
    index = np.arange(new_size, dtype=np.float32)
    if divide:
        fractions = index / np.float32(new_size)
    else:
        step = np.float32(1.0) / np.float32(new_size)
        fractions = np.minimum(index * step, np.float32(1.0 - 1e-6))
    return np.searchsorted(boundaries, fractions, side="right")


#: Aliases: a model type (or library) -> its convention name.
MODEL_TYPE_CONVENTIONS: Mapping[str, str] = MappingProxyType(
    {
        "vit": "torch_bicubic",
        "deit": "torch_bicubic",
        "dinov2": "torch_bicubic",
        "clip": "torch_bicubic",
        "clip_vision_model": "torch_bicubic",
        "siglip": "torch_bicubic",
        "siglip_vision_model": "torch_bicubic",
        "dinov2_with_registers": "torch_bicubic_antialias",
        "timm": "torch_bicubic_antialias",
        "dinov2_original": "torch_bicubic_offset",
    }
)


def convention_for(name: str | GridConvention) -> GridConvention:
    """The :class:`GridConvention` named ``name``: a convention, a model type or ``"timm"``.

    >>> convention_for("deit").name
    'torch_bicubic'
    >>> convention_for("nope")
    Traceback (most recent call last):
    ...
    ValueError: convention: expected one of big_vision, clip, clip_vision_model, deit, dinov2, dinov2_original, dinov2_with_registers, idefics_buckets, minicpm_buckets, siglip, siglip_vision_model, timm, torch_bicubic, torch_bicubic_align_corners, torch_bicubic_antialias, torch_bicubic_offset, torch_bilinear, torch_bilinear_antialias, vit, got 'nope'
    """
    if isinstance(name, GridConvention):
        return name
    if isinstance(name, str):
        key = name.replace("-", "_")
        key = MODEL_TYPE_CONVENTIONS.get(key, key)
        if key in GRID_CONVENTIONS:
            return GRID_CONVENTIONS[key]
    known = ", ".join(sorted({*GRID_CONVENTIONS, *MODEL_TYPE_CONVENTIONS}))
    raise ValueError(f"convention: expected one of {known}, got {name!r}")


def output_size(in_size: int, new_size: int, convention: GridConvention) -> int:
    """The side the convention produces when asked for ``new_size`` (``new_size`` except with a scale offset)."""
    if convention.scale_offset is None:
        return new_size
    return int(math.floor(in_size * ((new_size + convention.scale_offset) / in_size)))


def _cubic(x: np.ndarray, a: float) -> np.ndarray:
    """Keys' cubic convolution kernel at distances ``x`` (float64)."""
    x = np.abs(x)
    near = ((a + 2) * x - (a + 3)) * x * x + 1
    far = ((a * x - 5 * a) * x + 8 * a) * x - 4 * a
    return np.where(x < 1, near, np.where(x < 2, far, 0.0))


def _step(in_size: int, out_size: int, convention: GridConvention, new_size: int) -> float:
    """torch's ``area_pixel_compute_scale``: the input distance between two output samples."""
    if convention.align_corners:
        return (in_size - 1) / (out_size - 1) if out_size > 1 else 0.0
    if convention.scale_offset is not None:
        return 1.0 / ((new_size + convention.scale_offset) / in_size)
    return in_size / out_size


def resize_matrix(in_size: int, new_size: int, convention: GridConvention) -> np.ndarray:
    """The ``(out, in)`` float64 matrix resampling one axis of ``in_size`` samples to ``new_size``.

    Row ``o`` holds the weights output sample ``o`` gives each input sample, exactly as the
    convention's reference computes them (torch's ``upsample_bicubic2d`` index and weight
    rules, its antialiased separable resampler, or scipy's order-1 zoom), in float64.
    ``out`` is ``new_size`` except under a ``scale_offset`` (see :func:`output_size`).

    >>> resize_matrix(3, 3, GRID_CONVENTIONS["torch_bicubic"]).tolist()
    [[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]]
    """
    out_size = output_size(in_size, new_size, convention)
    step = _step(in_size, out_size, convention, new_size)
    m = np.zeros((out_size, in_size), np.float64)
    rows = np.arange(out_size)
    if convention.kernel == "bucket":  # Idefics: each patch takes one grid row (nearest below)
        m[rows, _bucket_rows(in_size, out_size, divide=convention.name == "minicpm_buckets")] = 1.0
        return m
    if convention.kernel == "linear" and not convention.antialias:  # scipy.ndimage.zoom(order=1): corners aligned
        # torch's bilinear without aligned corners: pixel centres, the source clamped at 0
        src = rows * step if convention.align_corners else np.maximum(step * (rows + 0.5) - 0.5, 0.0)
        i0 = np.minimum(np.floor(src).astype(np.int64), in_size - 1)
        t = src - i0
        i1 = np.minimum(i0 + 1, in_size - 1)
        np.add.at(m, (rows, i0), 1 - t)
        np.add.at(m, (rows, i1), t)
        return m
    if convention.antialias:  # torch _compute_indices_min_size_weights_aa (float path)
        half = 2.0 if convention.kernel == "cubic" else 1.0  # interp_size / 2: bicubic 4 taps, bilinear 2
        support = half * step if step >= 1.0 else half
        invscale = 1.0 / step if step >= 1.0 else 1.0
        for o in range(out_size):
            center = step * (o + 0.5)
            xmin = max(int(center - support + 0.5), 0)
            xsize = min(int(center + support + 0.5), in_size) - xmin
            j = np.arange(xsize)
            x = (j + xmin - center + 0.5) * invscale
            w = _cubic(x, convention.a) if convention.kernel == "cubic" else np.maximum(0.0, 1.0 - np.abs(x))
            total = w.sum()
            m[o, xmin : xmin + xsize] = w / total if total != 0.0 else w
        return m
    # torch upsample_bicubic2d: source index not clamped below, floor clamped to in - 1,
    # lambda clamped to [0, 1], the four taps clamped to the edge (edge rows replicated).
    src = step * rows if convention.align_corners else step * (rows + 0.5) - 0.5
    i0 = np.minimum(np.floor(src).astype(np.int64), in_size - 1)
    t = np.clip(src - i0, 0.0, 1.0)
    a = convention.a
    weights = (_cubic(t + 1, a), _cubic(t, a), _cubic(1 - t, a), _cubic(2 - t, a))
    for k, w in enumerate(weights):
        np.add.at(m, (rows, np.clip(i0 - 1 + k, 0, in_size - 1)), w)
    return m


def _side(value: Any) -> bool:
    return bool(not isinstance(value, bool) and isinstance(value, (int, np.integer)) and 0 < value <= MAX_GRID_SIDE)


def _pair(field: str, value: Any, what: str) -> tuple[int, int]:
    """``(h, w)`` from a pair or one int, each side in ``1..MAX_GRID_SIDE``; one-line ``ValueError`` naming ``field``."""
    pair = tuple(value) if isinstance(value, (tuple, list)) and len(value) == 2 else (value, value)
    if not all(_side(side) for side in pair):
        raise ValueError(
            f"GridSpec: expected {field} (height, width) in {what}, each 1..{MAX_GRID_SIDE}, found {value!r}"
        )
    return int(pair[0]), int(pair[1])


@dataclasses.dataclass(frozen=True)
class GridSpec:
    """What a learned 2-D position grid module holds (static, hashable; numpy only).

    The spec of :class:`flax_posenc.nnx.PatchPositionalEmbedding` and its Linen twin: the table
    has ``prefix_tokens + gh * gw`` rows of width ``dim`` (class/distillation tokens, then the
    grid row-major).

    Attributes:
      grid: ``(gh, gw)`` patches the table was trained for (one int, accepted, is a square grid; stored as a pair).
      dim: vector width.
      prefix_tokens: rows before the grid (ViT/CLIP 1, DeiT 2, SigLIP 0).
      patch_size: pixels per patch, an int or ``(ph, pw)`` (lets a call give ``image_size``); ``None``: unknown.
      convention: how to resize (a :data:`GRID_CONVENTIONS` name or a model type; stored as the convention's name).
      name: the table's name in error messages.

    Raises:
      ValueError: one line naming the field, what was expected and what was found.

    >>> spec = GridSpec(14, 768, patch_size=16, convention="deit")
    >>> spec.grid, spec.convention, spec.rows, spec.table_shape
    ((14, 14), 'torch_bicubic', 197, (197, 768))
    >>> GridSpec((14, 0), 768)
    Traceback (most recent call last):
    ...
    ValueError: GridSpec: expected grid (height, width) in patches, each 1..65536, found (14, 0)
    """

    grid: tuple[int, int]
    dim: int
    prefix_tokens: int = 1
    patch_size: int | tuple[int, int] | None = None
    convention: str = "torch_bicubic"
    name: str = "position grid"

    def __post_init__(self):
        object.__setattr__(self, "grid", _pair("grid", self.grid, "patches"))
        if isinstance(self.dim, bool) or not isinstance(self.dim, (int, np.integer)) or self.dim < 1:
            raise ValueError(f"GridSpec: expected a positive integer dim, found {self.dim!r}")
        prefix = self.prefix_tokens
        if isinstance(prefix, bool) or not isinstance(prefix, (int, np.integer)) or not 0 <= prefix <= MAX_GRID_SIDE:
            raise ValueError(f"GridSpec: expected prefix_tokens an integer in 0..{MAX_GRID_SIDE}, found {prefix!r}")
        if self.patch_size is not None:
            patch = _pair("patch_size", self.patch_size, "pixels")
            object.__setattr__(self, "patch_size", patch[0] if patch[0] == patch[1] else patch)
        if not isinstance(self.name, str):
            raise ValueError(f"GridSpec: expected a string name, found {self.name!r}")
        try:
            convention = convention_for(self.convention).name
        except ValueError as e:
            raise ValueError(f"GridSpec: {e}") from None
        object.__setattr__(self, "dim", int(self.dim))
        object.__setattr__(self, "prefix_tokens", int(prefix))
        object.__setattr__(self, "convention", convention)

    @classmethod
    def from_arguments(
        cls,
        grid: Any,
        dim: int,
        *,
        prefix_tokens: int = 1,
        patch_size: Any = None,
        convention: str = "torch_bicubic",
        position_name: str = "position grid",
    ) -> GridSpec:
        """The spec from the modules' flat arguments (``position_name`` is :attr:`name`).

        >>> GridSpec.from_arguments(2, 8, position_name="grid") == GridSpec((2, 2), 8, name="grid")
        True
        """
        return cls(grid, dim, prefix_tokens, patch_size, convention, position_name)

    @property
    def rows(self) -> int:
        """Rows of the table: ``prefix_tokens + gh * gw``."""
        return self.prefix_tokens + self.grid[0] * self.grid[1]

    @property
    def table_shape(self) -> tuple[int, int]:
        """``(rows, dim)``."""
        return (self.rows, self.dim)
