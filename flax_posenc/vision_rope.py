"""Vision-tower RoPE on device: ``cos``/``sin`` of image patches' 2-D positions and the rotation.

Pair ``j`` of a query or key turns by ``p[axis_j] * w_j`` (:class:`~flax_posenc.VisionRopeConfig`
says which axis and frequency each pair has: Pixtral, Qwen2-VL/2.5-VL, DINOv3). For integer
positions the ``cos``/``sin`` of each axis come from the RoPE core
(:func:`flax_posenc.rotary_cos_sin`: float64 frequencies, exact angles) and each pair takes its
axis's column, an exact selection; a grid limit (Pixtral's ``patches_per_side``) goes through the
one overflow guard. DINOv3's normalized coordinates (floats in ``[-1, 1]``) are turned by
``2 pi c w_j`` in float64 on the host when known, in float32 on device when traced. Tokens before
the patches (``prefix_tokens``: DINOv3's class and register tokens) and after them
(``suffix_tokens``: Llama 4's class token) are not rotated (``cos = 1``, ``sin = 0``: the
identity, exactly); Llama 4's 1-based indices are ``index_base = 1``. The rotation is
:func:`flax_posenc.apply_rotary` (the text RoPE's), in the config's layout.

>>> import jax, jax.numpy as jnp
>>> import flax_posenc as fp
>>> cfg = fp.VisionRopeConfig(head_dim=8, split="axial")
>>> positions = cfg.positions([[1, 2, 3]])                     # a 2 x 3 patch grid: (6, 2)
>>> cos, sin = fp.vision_rope_cos_sin(positions, cfg)
>>> cos.shape                                                  # (patches, head_dim // 2)
(6, 4)
>>> q = jnp.ones((6, 2, 8))                                    # (patches, heads, head_dim)
>>> jax.jit(lambda q: fp.apply_vision_rope(q, cfg, positions))(q).shape
(6, 2, 8)
"""

from __future__ import annotations

import math
from typing import cast

import jax
import jax.numpy as jnp
import numpy as np

from flax_posenc import overflow
from flax_posenc.errors import PositionLimitError
from flax_posenc.grid_config import convention_for, resize_matrix
from flax_posenc.rope import apply_rotary, rotary_cos_sin
from flax_posenc.rope_config import rope_inverse_frequencies
from flax_posenc.vision_rope_config import (
    VisionRopeConfig,
    vision_patch_positions,
    vision_window_index,
)

__all__ = [
    "VisionRopeConfig",
    "apply_vision_rope",
    "apply_vision_rope_qk",
    "vision_patch_positions",
    "vision_frame_sinusoid",
    "vision_grid_positions",
    "vision_rope_cos_sin",
    "vision_window_index",
]


def grid_limit(config: VisionRopeConfig) -> overflow.Limit | None:
    """The :class:`~flax_posenc.overflow.Limit` on every row and column index (``None``: none).

    >>> grid_limit(VisionRopeConfig(head_dim=8, patches_per_side=4)).describe()
    'vision RoPE (4 patches per side) holds 4 positions (0..3)'
    """
    if config.patches_per_side is None:
        return None
    return overflow.Limit(config.patches_per_side, name=f"vision RoPE ({config.patches_per_side} patches per side)")


def _check_config(config) -> VisionRopeConfig:
    if not isinstance(config, VisionRopeConfig):
        raise TypeError(f"config: expected a VisionRopeConfig, got {type(config).__name__}")
    return config


def vision_rope_cos_sin(
    positions: jax.typing.ArrayLike,
    config: VisionRopeConfig,
    *,
    on_overflow: overflow.OverflowPolicy = "error",
    dtype: jax.typing.DTypeLike = jnp.float32,
) -> tuple[jax.Array, jax.Array]:
    """``cos`` and ``sin`` of every patch's rotary angles (pair ``j``: ``p[axis_j] * w_j``).

    Equal to the model's own vision rotary module (transformers' ``PixtralVisionRotaryEmbedding``,
    ``Qwen2VLVisionRotaryEmbedding``, ``DINOv3ViTRopePositionEmbedding``) before its doubling to
    the full head width (which :func:`flax_posenc.apply_rotary` does for the half layout), from
    float64 frequencies and exact angles.

    Args:
      positions: ``(..., patches, 2)``: each patch's ``(row, column)``
        (:func:`vision_patch_positions`, :meth:`VisionRopeConfig.positions`), integers for
        ``coordinates="index"`` and floats for ``"normalized"``; known or traced.
      config: the :class:`~flax_posenc.VisionRopeConfig`.
      on_overflow: the policy for traced indices past ``config.limit`` (``"error"``, ``"clip"``,
        ``"fill"``: NaN); known ones past it always raise while tracing.
      dtype: output dtype.

    Returns:
      ``(cos, sin)``, each ``positions.shape[:-1] + (head_dim // 2,)``; ``prefix_tokens`` are not
      added here (see :func:`apply_vision_rope`).

    Raises:
      PositionLimitError: a known row or column outside ``0 .. config.limit - 1``.
      TypeError: integer coordinates that are not integers (or the reverse), a config of another type.
      ValueError: ``positions`` not shaped ``(..., patches, 2)``.

    >>> import numpy as np
    >>> cfg = VisionRopeConfig(head_dim=8, patches_per_side=2)
    >>> vision_rope_cos_sin(np.array([[0, 2]]), cfg)
    Traceback (most recent call last):
    ...
    flax_posenc.errors.PositionLimitError: vision RoPE (2 patches per side) holds 2 positions (0..1); asked for position 2, 1 past the end
    """
    config = _check_config(config)
    overflow.check_policy(on_overflow)
    traced = overflow.is_traced(positions)
    if not traced and not isinstance(positions, jax.Array):
        positions = np.asarray(positions)
    positions = cast("jax.Array | np.ndarray", positions)
    if positions.ndim < 2 or positions.shape[-1] != 2:
        raise ValueError(f"positions: expected (..., patches, 2) rows and columns, got shape {tuple(positions.shape)}")
    axis, column = config.columns()
    if config.coordinates == "normalized":
        return _normalized_cos_sin(positions, config, traced=traced, dtype=dtype)
    if not jnp.issubdtype(positions.dtype, jnp.integer):
        raise TypeError(
            f"positions: expected integer rows and columns (coordinates 'index'), got dtype {positions.dtype}"
        )
    invalid = None
    limit = grid_limit(config)
    if limit is not None:
        guarded, invalid = overflow.guard_positions(positions, limit, on_overflow)  # known ones: checked here
        if traced:
            positions = guarded  # known ones stay on the host (float64 angles), as they were
    if config.index_base:  # Llama 4: 1-based rows and columns (the limit above counts from 0)
        positions = positions + config.index_base
    per_axis = [rotary_cos_sin(positions[..., a], config.base_rope(), dtype=dtype) for a in (0, 1)]

    def pick(values):  # pair j from axis axis[j], frequency column[j]: an exact selection
        return jnp.where(axis == 0, values[0][..., column], values[1][..., column])

    cos, sin = pick([c for c, _ in per_axis]), pick([s for _, s in per_axis])
    if invalid is not None:
        invalid = jnp.any(invalid, axis=-1)[..., None]
        cos, sin = overflow.fill_invalid(cos, invalid), overflow.fill_invalid(sin, invalid)
    return cos.astype(dtype), sin.astype(dtype)


def _normalized_cos_sin(positions, config: VisionRopeConfig, *, traced: bool, dtype) -> tuple[jax.Array, jax.Array]:
    """DINOv3: ``cos``/``sin`` of ``2 pi c w_j`` for coordinates ``c`` (float64 on the host when known)."""
    if not jnp.issubdtype(positions.dtype, jnp.floating):
        raise TypeError(
            f"positions: expected float patch centres in [-1, 1] (coordinates 'normalized'), got dtype {positions.dtype}"
        )
    axis, column = config.columns()
    base, _ = rope_inverse_frequencies(config.base_rope())
    inv_freq = np.asarray(base, np.float64)[column]
    if not traced:
        host = np.asarray(positions, np.float64)
        angle = 2.0 * np.pi * host[..., axis] * inv_freq
        return jnp.asarray(np.cos(angle).astype(dtype)), jnp.asarray(np.sin(angle).astype(dtype))
    coords = jnp.asarray(positions, jnp.float32)
    angle = coords[..., axis] * jnp.asarray(2.0 * np.pi * inv_freq, jnp.float32)
    return jnp.cos(angle).astype(dtype), jnp.sin(angle).astype(dtype)


def _with_prefix(
    cos: jax.Array, sin: jax.Array, prefix: int, seq_axis: int, prefix_angles=None
) -> tuple[jax.Array, jax.Array]:
    """``cos``/``sin`` with ``prefix`` rows before the patches on the sequence axis: the identity
    (cos 1, sin 0), or the cos/sin of ``prefix_angles`` ``(prefix, head_dim // 2)`` (MLCD's learned
    class-token angles, computed in their own dtype as the model does)."""
    if prefix == 0:
        return cos, sin
    shape = list(cos.shape)
    shape[seq_axis] = prefix
    if prefix_angles is None:
        return (
            jnp.concatenate([jnp.ones(shape, cos.dtype), cos], axis=seq_axis),
            jnp.concatenate([jnp.zeros(shape, sin.dtype), sin], axis=seq_axis),
        )
    angles = jnp.asarray(prefix_angles)
    if angles.shape != (prefix, cos.shape[-1]):
        raise ValueError(f"prefix_angles: expected shape ({prefix}, {cos.shape[-1]}), got {tuple(angles.shape)}")
    pc = jnp.broadcast_to(jnp.cos(angles).astype(cos.dtype), shape)
    ps = jnp.broadcast_to(jnp.sin(angles).astype(sin.dtype), shape)
    return jnp.concatenate([pc, cos], axis=seq_axis), jnp.concatenate([ps, sin], axis=seq_axis)


def _cos_sin_for(x, config: VisionRopeConfig, positions, *, on_overflow, seq_axis: int, prefix_angles=None):
    if seq_axis not in (-3, -2):
        raise ValueError(
            f"seq_axis: expected -3 ((..., tokens, heads, head_dim)) or -2 ((..., heads, tokens, head_dim)), got {seq_axis!r}"
        )
    x = jnp.asarray(x)
    if x.ndim < 3 or x.shape[-1] != config.head_dim:
        layout = "(..., tokens, heads, {0})" if seq_axis == -3 else "(..., heads, tokens, {0})"
        raise ValueError(f"x: expected shape {layout.format(config.head_dim)}, got {tuple(x.shape)}")
    cos, sin = vision_rope_cos_sin(positions, config, on_overflow=on_overflow)
    tokens = cos.shape[-2] + config.prefix_tokens + config.suffix_tokens
    if x.shape[seq_axis] != tokens:
        suffix = f" + {config.suffix_tokens} suffix tokens" if config.suffix_tokens else ""
        raise ValueError(
            f"x: expected {tokens} tokens on axis {seq_axis} ({config.prefix_tokens} prefix tokens + "
            f"{cos.shape[-2]} patches{suffix}), got shape {tuple(x.shape)}"
        )
    cos, sin = _with_prefix(cos, sin, config.prefix_tokens, -2, prefix_angles)
    if config.suffix_tokens:  # Llama 4's class token, last: not rotated (transformers masks its angles to 0)
        shape = list(cos.shape)
        shape[-2] = config.suffix_tokens
        cos = jnp.concatenate([cos, jnp.ones(shape, cos.dtype)], axis=-2)
        sin = jnp.concatenate([sin, jnp.zeros(shape, sin.dtype)], axis=-2)
    if seq_axis == -3:  # (..., tokens, half) -> (..., tokens, 1, half): broadcast over heads
        return cos[..., None, :], sin[..., None, :]
    if cos.ndim > 2:  # (..., tokens, half) -> (..., 1, tokens, half)
        return cos[..., None, :, :], sin[..., None, :, :]
    return cos, sin


def apply_vision_rope(
    x: jax.typing.ArrayLike,
    config: VisionRopeConfig,
    positions: jax.typing.ArrayLike,
    *,
    on_overflow: overflow.OverflowPolicy = "error",
    seq_axis: int = -3,
    prefix_angles: jax.typing.ArrayLike | None = None,
) -> jax.Array:
    """Rotate a vision tower's queries or keys by their patches' 2-D positions.

    Equal to the model's own apply function with its rotary module's ``cos``/``sin``
    (``apply_rotary_pos_emb`` of Pixtral and DINOv3, ``apply_rotary_pos_emb_vision`` of Qwen-VL).

    Args:
      x: ``(..., tokens, heads, head_dim)`` (``seq_axis=-3``, Flax) or ``(..., heads, tokens,
        head_dim)`` (``-2``, Hugging Face), with ``tokens = config.prefix_tokens + patches +
        config.suffix_tokens``.
      config: the :class:`~flax_posenc.VisionRopeConfig` (its layout is used).
      positions: ``(..., patches, 2)`` as for :func:`vision_rope_cos_sin` (the leading axes those
        of ``x`` before the token and head axes).
      on_overflow: see :func:`vision_rope_cos_sin`.
      seq_axis: ``-3`` or ``-2``.
      prefix_angles: ``(prefix_tokens, head_dim // 2)`` angles the prefix tokens turn by (MLCD's
        learned ``class_pos_emb``); ``None``: the prefix tokens are not rotated.

    Returns:
      An array like ``x``; the ``prefix_tokens`` first tokens unchanged (or turned by
      ``prefix_angles``), and the ``suffix_tokens`` last ones unchanged.

    Raises:
      PositionLimitError: a known row or column past ``config.limit`` (while tracing).
      ValueError: ``x`` whose head width or token count does not match (one line naming both).

    >>> import numpy as np, jax.numpy as jnp
    >>> cfg = VisionRopeConfig(head_dim=8, coordinates="normalized", prefix_tokens=1)
    >>> positions = cfg.positions([[1, 2, 2]])                 # 4 patch centres in [-1, 1]
    >>> out = apply_vision_rope(jnp.ones((5, 2, 8)), cfg, positions)
    >>> bool((out[0] == 1).all())                              # the class token is not rotated
    True
    """
    config = _check_config(config)
    cos, sin = _cos_sin_for(
        x, config, positions, on_overflow=on_overflow, seq_axis=seq_axis, prefix_angles=prefix_angles
    )
    return apply_rotary(x, cos, sin, layout=config.layout)


def apply_vision_rope_qk(
    q: jax.typing.ArrayLike,
    k: jax.typing.ArrayLike,
    config: VisionRopeConfig,
    positions: jax.typing.ArrayLike,
    *,
    on_overflow: overflow.OverflowPolicy = "error",
    seq_axis: int = -3,
    prefix_angles: jax.typing.ArrayLike | None = None,
) -> tuple[jax.Array, jax.Array]:
    """``(q, k)`` rotated at the same patch positions with one ``cos``/``sin`` (arguments as
    :func:`apply_vision_rope`): the model's ``apply_rotary_pos_emb(q, k, cos, sin)``.

    >>> import jax.numpy as jnp
    >>> cfg = VisionRopeConfig(head_dim=8)
    >>> q, k = apply_vision_rope_qk(jnp.ones((4, 2, 8)), jnp.ones((4, 1, 8)), cfg, cfg.positions([[1, 2, 2]]))
    >>> q.shape, k.shape
    ((4, 2, 8), (4, 1, 8))
    """
    config = _check_config(config)
    cos, sin = _cos_sin_for(
        q, config, positions, on_overflow=on_overflow, seq_axis=seq_axis, prefix_angles=prefix_angles
    )
    k = jnp.asarray(k)
    if k.ndim != jnp.ndim(q) or k.shape[seq_axis] != jnp.shape(q)[seq_axis] or k.shape[-1] != config.head_dim:
        raise ValueError(
            f"q and k: expected the same tokens and head width, got shapes {tuple(jnp.shape(q))} and {tuple(k.shape)}"
        )
    return apply_rotary(q, cos, sin, layout=config.layout), apply_rotary(k, cos, sin, layout=config.layout)


def vision_grid_positions(
    table: jax.typing.ArrayLike,
    grid_thw,
    *,
    spatial_merge_size: int = 1,
    convention: str = "big_vision",
) -> jax.Array:
    """A vision tower's learned square position grid resampled to every image's patch grid, in
    the tower's token order (the positions its forward adds to the patch embeddings).

    Qwen3-VL's, Qwen3.5's, Qwen3-Omni's and Qwen4-Exp's vision towers keep a ``(side * side, dim)``
    table (``pos_embed``, ``side = sqrt(num_position_embeddings)``) beside their RoPE and resample
    it to each image's ``h x w`` patches by bilinear interpolation with the corners aligned
    (transformers' ``get_vision_interpolation_indices_and_weights(mode="bilinear",
    align_corners=True)``, formerly ``fast_pos_embed_interpolate``): the same kernel as the
    ``"big_vision"`` row of :data:`~flax_posenc.GRID_CONVENTIONS` (sample ``i`` of ``n`` at
    ``i (side - 1) / (n - 1)``). GLM-4V's towers keep ``(image_size / patch_size) ** 2`` rows and
    sample them with ``grid_sample(mode="bicubic", align_corners=False, padding_mode="border")``
    at the patch centres, ``(i + 0.5) side / n - 0.5``: the ``"torch_bicubic"`` row (Keys' cubic,
    ``a = -0.75``, edge taps replicated). The rows then follow the tower's token order: ``m x m``
    blocks (``spatial_merge_size``), repeated for each of the ``t`` frames.

    Args:
      table: ``(side * side, dim)``, row-major (may be traced).
      grid_thw: ``[[t, h, w], ...]`` patches per image (known on the host).
      spatial_merge_size: ``m``; ``h`` and ``w`` multiples of it.
      convention: a :data:`~flax_posenc.GRID_CONVENTIONS` name (``"big_vision"``: bilinear,
        corners aligned; ``"torch_bicubic"``: GLM-4V's bicubic at the patch centres).

    Returns:
      ``(sum(t * h * w), dim)`` in the table's dtype (the weights, float64 on the host, are
      rounded once to it; the products summed at full precision).

    Raises:
      ValueError: a table that is not a square grid of rows, a grid not a whole number of
        merged blocks, an unknown convention (one line naming the argument).

    >>> import numpy as np
    >>> table = np.arange(8.0).reshape(4, 2)                    # a 2 x 2 grid, 2 channels
    >>> vision_grid_positions(table, [[1, 1, 3]])[:, 0].tolist()  # the top row, 3 patches
    [0.0, 1.0, 2.0]
    """
    conv = convention_for(convention)
    shape = tuple(jnp.shape(table))
    side = math.isqrt(shape[0]) if len(shape) == 2 else 0
    if len(shape) != 2 or side < 1 or side * side != shape[0]:
        raise ValueError(f"table: expected (side * side, dim) rows of a square grid, got shape {shape}")
    table = jnp.asarray(table)
    dtype = table.dtype if jnp.issubdtype(table.dtype, jnp.floating) else jnp.float32
    grid = table.astype(dtype).reshape(side, side, shape[1])
    parts = []
    vision_patch_positions(grid_thw, spatial_merge_size=spatial_merge_size)  # the one check of grid_thw
    for t, h, w in np.asarray(grid_thw, np.int64).reshape(-1, 3).tolist():
        rows = jnp.asarray(resize_matrix(side, int(h), conv), dtype)
        cols = jnp.asarray(resize_matrix(side, int(w), conv), dtype)
        image = jnp.einsum("ai,ijd->ajd", rows, grid, precision=jax.lax.Precision.HIGHEST)
        image = jnp.einsum("bj,ajd->abd", cols, image, precision=jax.lax.Precision.HIGHEST)
        order = vision_patch_positions([[1, h, w]], spatial_merge_size=spatial_merge_size)
        flat = jnp.asarray(order[:, 0] * w + order[:, 1])
        parts.append(jnp.tile(image.reshape(h * w, shape[1])[flat], (int(t), 1)))
    return jnp.concatenate(parts, axis=0)


def vision_frame_sinusoid(grid_thw, dim: int, max_frames: int, *, dtype=jnp.float32) -> jax.Array:
    """The fixed per-frame sinusoid Kimi K2.5's vision tower adds beside its resampled grid
    (``time_position_embeddings``), one row per patch in the tower's (raster) order.

    An image (``t == 1``) adds nothing (zeros: row 0 of its table is a zero pad); frame ``f`` of a
    ``t``-frame clip adds ``[sin(f w) | cos(f w)]``, ``w_i = 10000 ** (-2i / dim)`` (``f = 0``: zeros
    then ones). The table holds ``max_frames`` frames (``pos_emb_time``): a longer clip is refused
    (transformers indexes past its table). Computed in float64 on the host, rounded once to ``dtype``.

    Args:
      grid_thw: ``[[t, h, w], ...]`` patches per image or clip.
      dim: the tower's width (even).
      max_frames: the frames a clip may have.

    Returns:
      ``(sum(t * h * w), dim)``.

    Raises:
      PositionLimitError: a clip of more than ``max_frames`` frames.
      ValueError: an odd ``dim``, a malformed ``grid_thw`` (one line each).

    >>> vision_frame_sinusoid([[2, 1, 1]], 4, 4).tolist()       # frame 0, then frame 1
    [[0.0, 0.0, 1.0, 1.0], [0.8414709568023682, 0.009999833069741726, 0.5403022766113281, 0.9999499917030334]]
    """
    if isinstance(dim, bool) or not isinstance(dim, (int, np.integer)) or dim < 2 or dim % 2:
        raise ValueError(f"dim: expected a positive even width, got {dim!r}")
    vision_patch_positions(grid_thw)  # the one check of grid_thw (one line naming it)
    rows = np.asarray(grid_thw, np.int64).reshape(-1, 3)
    inv = 1.0 / 10000.0 ** (np.arange(0, dim, 2, dtype=np.float64) / dim)
    parts = []
    for t, h, w in rows.tolist():
        if t > max_frames:
            raise PositionLimitError(
                f"vision frame sinusoid holds {max_frames} frames per clip (0..{max_frames - 1}); "
                f"grid_thw asks for a clip of {t} frames"
            )
        if t == 1:
            parts.append(np.zeros((h * w, dim)))
            continue
        angle = np.arange(t, dtype=np.float64)[:, None] * inv
        table = np.concatenate([np.sin(angle), np.cos(angle)], axis=1)
        parts.append(np.repeat(table, h * w, axis=0))
    return jnp.asarray(np.concatenate(parts).astype(dtype))
