"""Vision-tower RoPE (2-D axial rotary positions of image patches): config and patch positions, numpy only.

A vision tower that rotates its queries and keys by where a patch sits in the image gives every
rotary frequency ``j`` (``head_dim // 2`` of them) one axis of the patch grid, ``a_j`` (0: the row
``h``, 1: the column ``w``), and one inverse frequency ``w_j``; pair ``j`` turns by
``p[a_j] * w_j``. Models differ in how the frequencies are split between the axes (``split``), in
which dims are paired (``layout``), in what a patch's coordinate is (``coordinates``), in the
order of the patches (``spatial_merge_size``, the window order) and in the tokens that are not
rotated (``prefix_tokens``):

- ``split="axial"`` (Qwen2-VL, Qwen2.5-VL, DINOv3): the frequencies of a ``head_dim // 2`` wide
  RoPE, ``theta ** (-4i / head_dim)`` for ``i < head_dim // 4``, first all with ``h``, then all
  with ``w`` (transformers' ``compute_axial_rope_parameters`` with ``spatial_dim = head_dim // 2``
  and ``recomposition_frequencies``: ``cat([freq_h, freq_w])``).
- ``split="axial_interleaved"`` (Kimi K2.5): the same frequencies, each used twice in a row, first
  with ``w`` then with ``h`` (``freq.transpose(1, 2).flip(-1).flatten(1)``).
- ``split="axial_columns_first"`` (Llama 4): the ``axial`` frequencies, first all with ``w``, then
  all with ``h`` (``Llama4VisionRotaryEmbedding``: ``cat([freqs_x, freqs_y])`` with ``x`` the column).
- ``split="pixtral"`` (Pixtral): the frequencies of a ``head_dim`` wide RoPE,
  ``theta ** (-2i / head_dim)``; the even ones turn with ``h``, the odd ones with ``w``
  (``inv_freq_2d = cat([inv_freq[0::2], inv_freq[1::2]])``).
- ``coordinates="index"``: a patch's row and column (0, 1, ...); ``"normalized"`` (DINOv3): the
  patch centre in ``[-1, 1]`` (``2 (i + 0.5) / n - 1``), turned by ``2 pi c w_j``. DINOv3's
  training-time ``pos_embed_shift``/``jitter``/``rescale`` augmentations are off at inference.
- ``spatial_merge_size = m`` (Qwen-VL): patches come in ``m x m`` blocks, block-major
  (transformers' ``get_vision_position_ids``); ``window_size`` (Qwen2.5-VL): the blocks are then
  reordered window by window (``get_vision_window_index``), and the rotary ``cos``/``sin`` with them.
- ``prefix_tokens`` (DINOv3: the class token and the registers): tokens before the patches that
  are not rotated; ``suffix_tokens`` (Llama 4: its class token, last): tokens after them, not rotated.
- ``index_base`` (Llama 4: 1): added to every row and column index before the angles (the limit
  still counts rows and columns from 0).
- ``patches_per_side`` (Pixtral: ``image_size // patch_size``): the largest grid the checkpoint was
  trained on, the limit; ``None`` (Qwen-VL, DINOv3): nothing limits the grid (the angles are
  computed for any image).

>>> cfg = VisionRopeConfig(head_dim=16, split="axial")
>>> axis, inv_freq = cfg.frequencies()
>>> axis.tolist()
[0, 0, 0, 0, 1, 1, 1, 1]
>>> [round(float(f), 4) for f in inv_freq[:4]]
[1.0, 0.1, 0.01, 0.001]
>>> vision_patch_positions([[1, 2, 4]], spatial_merge_size=2).T.tolist()   # (h, w) of 8 patches, 2 x 2 blocks
[[0, 0, 1, 1, 0, 0, 1, 1], [0, 1, 0, 1, 2, 3, 2, 3]]
"""

from __future__ import annotations

import dataclasses
from typing import Any, Literal

import numpy as np

from flax_posenc.rope_config import ROPE_LAYOUTS, RopeConfig, RopeLayout, rope_inverse_frequencies

__all__ = [
    "VISION_ROPE_COORDINATES",
    "VISION_ROPE_SPLITS",
    "VisionRopeConfig",
    "vision_patch_positions",
    "vision_window_index",
]

VisionRopeSplit = Literal["axial", "pixtral", "axial_interleaved", "axial_columns_first"]
VisionRopeCoordinates = Literal["index", "normalized"]

#: How the rotary frequencies are split between the two axes (see the module docstring).
VISION_ROPE_SPLITS: tuple[str, ...] = ("axial", "pixtral", "axial_interleaved", "axial_columns_first")
#: What a patch's coordinate is: its row/column index, or its centre in ``[-1, 1]`` (DINOv3).
VISION_ROPE_COORDINATES: tuple[str, ...] = ("index", "normalized")

#: The largest grid side a position array may describe (a guard against absurd sizes).
MAX_GRID_SIDE = 1 << 16


def _positive_int(name: str, value: Any, *, allow_none: bool = False) -> None:
    if value is None and allow_none:
        return
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ValueError(f"{name}: expected a positive integer{' or None' if allow_none else ''}, got {value!r}")


@dataclasses.dataclass(frozen=True)
class VisionRopeConfig:
    """A vision tower's 2-D rotary position embedding; frozen and hashable (a static ``jit`` argument).

    Attributes:
      head_dim: width of one attention head (a multiple of 4: two axes of pairs).
      rope_theta: the base of the geometric frequencies (Pixtral, Qwen-VL: 10000; DINOv3: 100).
      split: ``"axial"``, ``"axial_interleaved"``, ``"axial_columns_first"`` or ``"pixtral"`` (see
        the module docstring).
      layout: which dims pair up, ``"half"`` (``rotate_half``) or ``"interleaved"`` (Llama 4's
        complex pairs ``(2j, 2j + 1)``).
      coordinates: ``"index"`` (integer rows and columns) or ``"normalized"`` (DINOv3's patch
        centres in ``[-1, 1]``, angles ``2 pi c w``).
      patches_per_side: the trained grid's side (Pixtral: ``image_size // patch_size``), the limit
        on every row and column index; ``None``: no limit.
      prefix_tokens: tokens before the patches that are not rotated (DINOv3: 1 + registers).
      suffix_tokens: tokens after the patches that are not rotated (Llama 4's class token: 1).
      index_base: added to every row and column index before the angles (Llama 4: 1, its patch
        ``(0, 0)`` turns by one step on each axis); the limit counts indices from 0.
      spatial_merge_size: Qwen-VL's ``m``: patches ordered in ``m x m`` blocks (1: raster order).
      window_size, patch_size: Qwen2.5-VL's window order (``window_size`` in pixels); both or neither.

    Raises:
      ValueError: one line naming the field (a head width that is not a multiple of 4, an unknown
        split, layout or coordinates, a non-positive size, a window without a patch size).

    >>> VisionRopeConfig(head_dim=10)
    Traceback (most recent call last):
    ...
    ValueError: head_dim: expected a positive multiple of 4 (two axes of rotated pairs), got 10
    """

    head_dim: int
    rope_theta: float = 10000.0
    split: VisionRopeSplit = "axial"
    layout: RopeLayout = "half"
    coordinates: VisionRopeCoordinates = "index"
    patches_per_side: int | None = None
    prefix_tokens: int = 0
    spatial_merge_size: int = 1
    window_size: int | None = None
    patch_size: int | None = None
    suffix_tokens: int = 0
    index_base: int = 0

    def __post_init__(self):
        if isinstance(self.head_dim, bool) or not isinstance(self.head_dim, (int, np.integer)):
            raise ValueError(
                f"head_dim: expected a positive multiple of 4 (two axes of rotated pairs), got {self.head_dim!r}"
            )
        if self.head_dim < 4 or self.head_dim % 4:
            raise ValueError(
                f"head_dim: expected a positive multiple of 4 (two axes of rotated pairs), got {self.head_dim}"
            )
        theta = self.rope_theta
        if (
            isinstance(theta, bool)
            or not isinstance(theta, (int, float, np.number))
            or not np.isfinite(theta)
            or theta <= 1
        ):
            raise ValueError(f"rope_theta: expected a finite number above 1, got {theta!r}")
        if self.split not in VISION_ROPE_SPLITS:
            raise ValueError(f"split: expected one of {VISION_ROPE_SPLITS}, got {self.split!r}")
        if self.layout not in ROPE_LAYOUTS:
            raise ValueError(f"layout: expected one of {ROPE_LAYOUTS}, got {self.layout!r}")
        if self.coordinates not in VISION_ROPE_COORDINATES:
            raise ValueError(f"coordinates: expected one of {VISION_ROPE_COORDINATES}, got {self.coordinates!r}")
        _positive_int("patches_per_side", self.patches_per_side, allow_none=True)
        if (
            isinstance(self.prefix_tokens, bool)
            or not isinstance(self.prefix_tokens, (int, np.integer))
            or self.prefix_tokens < 0
        ):
            raise ValueError(f"prefix_tokens: expected a non-negative integer, got {self.prefix_tokens!r}")
        for name in ("suffix_tokens", "index_base"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 0:
                raise ValueError(f"{name}: expected a non-negative integer, got {value!r}")
        if self.index_base and self.coordinates != "index":
            raise ValueError(
                f"index_base: expected 0 with coordinates {self.coordinates!r} (an offset of integer indices), "
                f"got {self.index_base!r}"
            )
        _positive_int("spatial_merge_size", self.spatial_merge_size)
        _positive_int("window_size", self.window_size, allow_none=True)
        _positive_int("patch_size", self.patch_size, allow_none=True)
        if (self.window_size is None) != (self.patch_size is None):
            raise ValueError(
                f"window_size and patch_size: expected both or neither (the window order), got "
                f"{self.window_size!r} and {self.patch_size!r}"
            )

    @property
    def limit(self) -> int | None:
        """Rows and columns ``0 .. limit - 1`` are allowed (``patches_per_side``); ``None``: no limit."""
        return self.patches_per_side

    def base_rope(self) -> RopeConfig:
        """The plain RoPE whose frequencies the axes share out: ``head_dim // 2`` wide (``axial``) or
        ``head_dim`` wide (``pixtral``), no limit (the grid's is checked on the patch positions)."""
        width = self.head_dim if self.split == "pixtral" else self.head_dim // 2
        return RopeConfig(head_dim=width, rope_theta=float(self.rope_theta))

    def columns(self) -> tuple[np.ndarray, np.ndarray]:
        """``(axis, column)``, each ``(head_dim // 2,)``: rotary pair ``j`` turns with axis
        ``axis[j]`` (0: row, 1: column) at the frequency ``column[j]`` of :meth:`base_rope`."""
        quarter = self.head_dim // 4
        axis = np.repeat(np.arange(2), quarter)
        if self.split == "axial_interleaved":  # Kimi K2.5: column then row at each frequency
            return np.tile([1, 0], quarter), np.repeat(np.arange(quarter), 2)
        if self.split == "axial_columns_first":  # Llama 4: all the frequencies with w, then with h
            return np.repeat([1, 0], quarter), np.tile(np.arange(quarter), 2)
        if self.split == "axial":
            column = np.tile(np.arange(quarter), 2)
        else:  # pixtral: the even frequencies with h, the odd ones with w
            column = np.concatenate([np.arange(0, 2 * quarter, 2), np.arange(1, 2 * quarter, 2)])
        return axis, column

    def frequencies(self) -> tuple[np.ndarray, np.ndarray]:
        """``(axis, inv_freq)``: each rotary pair's axis and its inverse frequency (float64,
        radians per row/column index; ``normalized`` coordinates turn by ``2 pi`` times it)."""

        axis, column = self.columns()
        base, _ = rope_inverse_frequencies(self.base_rope())
        return axis, np.asarray(base, np.float64)[column]

    def positions(self, grid_thw: Any) -> np.ndarray:
        """The model's patch positions for images of ``grid_thw`` patches, in its token order
        (:func:`vision_patch_positions` with this config's merge and window order); ``normalized``
        coordinates: one image ``(1, h, w)`` at a time (see :func:`vision_patch_positions`)."""
        index = None
        if self.window_size is not None:
            index, _ = vision_window_index(
                grid_thw,
                spatial_merge_size=self.spatial_merge_size,
                window_size=self.window_size,
                patch_size=int(self.patch_size or 1),
            )
        return vision_patch_positions(
            grid_thw,
            spatial_merge_size=self.spatial_merge_size,
            window_index=index,
            normalized=self.coordinates == "normalized",
        )


def _grid_rows(grid_thw: Any, merge: int) -> np.ndarray:
    """``grid_thw`` as an ``(images, 3)`` int64 array of ``(t, h, w)``, each side a multiple of ``merge``."""
    try:
        rows = np.asarray(grid_thw)
    except Exception:  # noqa: BLE001 - a traced array, an object that is no array
        rows = None
    if rows is None or rows.ndim != 2 or rows.shape[1] != 3 or not np.issubdtype(rows.dtype, np.integer):
        shape = None if rows is None else tuple(rows.shape)
        raise ValueError(f"grid_thw: expected (images, 3) integers (t, h, w) known on the host, got {shape}")
    if rows.size and (rows.min() < 1 or rows.max() > MAX_GRID_SIDE):
        raise ValueError(f"grid_thw: expected sizes in 1..{MAX_GRID_SIDE}, got {rows.tolist()[:4]}")
    bad = rows[(rows[:, 1] % merge != 0) | (rows[:, 2] % merge != 0)]
    if bad.size:
        raise ValueError(f"grid_thw: expected h and w multiples of spatial_merge_size {merge}, got {bad[0].tolist()}")
    return rows.astype(np.int64)


def vision_patch_positions(
    grid_thw: Any,
    *,
    spatial_merge_size: int = 1,
    window_index: Any = None,
    normalized: bool = False,
) -> np.ndarray:
    """Every patch's ``(h, w)`` position, in the order a vision tower lists its patches.

    Equal to transformers' ``get_vision_position_ids`` (Qwen2-VL, Qwen2.5-VL, GLM-4V, Pixtral's
    raster order with ``spatial_merge_size=1``): image by image, frame by frame, ``m x m`` blocks
    in raster order and the patches of a block in raster order; then, with ``window_index``
    (Qwen2.5-VL, :func:`vision_window_index`), the blocks in window order
    (``permute_input_for_window_attn``).

    Args:
      grid_thw: ``(images, 3)`` integers ``(t, h, w)`` in patches (a list, numpy or a concrete
        array); ``t`` frames repeat the positions of one.
      spatial_merge_size: ``m`` (``h`` and ``w`` must be multiples of it).
      window_index: the block order of :func:`vision_window_index` (``None``: none).
      normalized: DINOv3's patch centres ``2 (i + 0.5) / n - 1`` (float64) instead of indices.

    Returns:
      ``(patches, 2)`` int64 (float64 when ``normalized``): ``[:, 0]`` the row, ``[:, 1]`` the column.

    Raises:
      ValueError: ``grid_thw`` not ``(images, 3)`` positive integers, sides not multiples of ``m``,
        or a ``window_index`` that is not a permutation of the blocks (one line each).

    >>> vision_patch_positions([[1, 2, 2]]).tolist()
    [[0, 0], [0, 1], [1, 0], [1, 1]]
    >>> vision_patch_positions([[1, 1, 2]], normalized=True).tolist()
    [[0.0, -0.5], [0.0, 0.5]]
    """
    _positive_int("spatial_merge_size", spatial_merge_size)
    m = int(spatial_merge_size)
    rows = _grid_rows(grid_thw, m)
    out = []
    for t, h, w in rows.tolist():
        hh, ww = np.meshgrid(np.arange(h), np.arange(w), indexing="ij")
        hh = hh.reshape(h // m, m, w // m, m).transpose(0, 2, 1, 3).reshape(-1)
        ww = ww.reshape(h // m, m, w // m, m).transpose(0, 2, 1, 3).reshape(-1)
        if normalized:
            one = np.stack([2.0 * (hh + 0.5) / h - 1.0, 2.0 * (ww + 0.5) / w - 1.0], -1)
        else:
            one = np.stack([hh, ww], -1)
        out.append(np.tile(one, (t, 1)))
    positions = np.concatenate(out, 0) if out else np.zeros((0, 2), np.float64 if normalized else np.int64)
    if window_index is None:
        return positions
    index = np.asarray(window_index)
    units = positions.shape[0] // (m * m)
    if index.shape != (units,) or not np.array_equal(np.sort(index), np.arange(units)):
        raise ValueError(f"window_index: expected a permutation of the {units} merged blocks, got shape {index.shape}")
    return positions.reshape(units, m * m, 2)[index].reshape(-1, 2)


def vision_window_index(
    grid_thw: Any, *, spatial_merge_size: int, window_size: int, patch_size: int
) -> tuple[np.ndarray, np.ndarray]:
    """Qwen2.5-VL's window order of the merged blocks, and the windows' cumulative token counts.

    Equal to transformers' ``get_vision_window_index``: per image and frame, the
    ``h/m x w/m`` grid of blocks is cut into windows of ``window_size // m // patch_size`` blocks a
    side (the last ones short), listed window by window, each window's blocks in raster order.

    Args:
      grid_thw: ``(images, 3)`` integers ``(t, h, w)`` in patches.
      spatial_merge_size: ``m``; window_size: in pixels; patch_size: pixels per patch.

    Returns:
      ``(window_index, cu_window_seqlens)``: int64 ``(blocks,)`` (the new order: block
      ``window_index[i]`` goes to place ``i``) and int64 ``(windows + 1,)`` token offsets
      (consecutive equal entries removed, as transformers does).

    Raises:
      ValueError: a window smaller than one block, or a bad ``grid_thw`` (one line).

    >>> vision_window_index([[1, 4, 4]], spatial_merge_size=2, window_size=4, patch_size=2)[0].tolist()
    [0, 1, 2, 3]
    >>> vision_window_index([[1, 8, 8]], spatial_merge_size=2, window_size=8, patch_size=2)[0].tolist()[:8]
    [0, 1, 4, 5, 2, 3, 6, 7]
    """
    for name, value in (
        ("spatial_merge_size", spatial_merge_size),
        ("window_size", window_size),
        ("patch_size", patch_size),
    ):
        _positive_int(name, value)
    m = int(spatial_merge_size)
    side = int(window_size) // m // int(patch_size)
    if side < 1:
        raise ValueError(
            f"window_size: expected at least spatial_merge_size * patch_size = {m * int(patch_size)} px "
            f"(one merged block), got {window_size}"
        )
    rows = _grid_rows(grid_thw, m)
    index, cu, offset = [], [0], 0
    for t, h, w in rows.tolist():
        gh, gw = h // m, w // m
        blocks = np.arange(t * gh * gw).reshape(t, gh, gw)
        ph, pw = side - gh % side, side - gw % side  # transformers pads a whole window when it divides
        padded = np.full((t, gh + ph, gw + pw), -100, np.int64)
        padded[:, :gh, :gw] = blocks
        nh, nw = (gh + ph) // side, (gw + pw) // side
        padded = padded.reshape(t, nh, side, nw, side).transpose(0, 1, 3, 2, 4).reshape(t, nh * nw, side, side)
        counts = (padded != -100).sum((2, 3)).reshape(-1)
        flat = padded.reshape(-1)
        index.append(flat[flat != -100] + offset)
        cu.extend((np.cumsum(counts) * m * m + cu[-1]).tolist())
        offset += t * gh * gw
    cu_arr = np.asarray(cu, np.int64)
    keep = np.concatenate([[True], cu_arr[1:] != cu_arr[:-1]]) if cu_arr.size else cu_arr.astype(bool)
    return (np.concatenate(index) if index else np.zeros(0, np.int64)), cu_arr[keep]
