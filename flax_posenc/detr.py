"""DETR-family 2-D position embeddings on device: the sine embedding of a pixel mask, and the learned one.

The functional core of :class:`flax_posenc.nnx.DetrSinePositionEmbedding` and
:class:`flax_posenc.nnx.DetrLearnedPositionEmbedding` (and their Linen twins). Pure functions of
arrays: jittable, vmappable, no state. The formulas and their parameters are
:class:`~flax_posenc.detr_config.DetrSineConfig`'s (numpy only); which model type uses which
variant is :data:`flax_posenc.conversion.detr_positions.DETR_POSITION_FAMILIES`.

Precision. transformers computes the angle ``c / (c_last + eps) * scale / T ** (2k/F)`` in
float32, so its values are off the float64 ones by a few float32 roundings of the angle. Here
the angle is carried as a float32 pair (hi + lo) without float64 on device: the quotient
``(c + offset) / c_last`` with its exact remainder (counts split into 12-bit halves, products
exact), the ``eps`` correction as a small term, the frequency (times ``scale``) split on the host
into a 12-bit head and a float32 tail, so the head product is exact; then
``sin(hi + lo) = sin(hi) + cos(hi) * lo``. What is left is the device's own float32 ``sin``/``cos``
of ``hi`` (measured in ``docs/vision-audio.md``: within 0.51 float32 ulp of 1.0 of float64).

>>> import jax.numpy as jnp
>>> from flax_posenc.detr_config import DetrSineConfig
>>> detr_sine_embedding(jnp.ones((2, 3, 5), bool), DetrSineConfig(8)).shape
(2, 16, 3, 5)
"""

from __future__ import annotations

import functools
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from flax_posenc.detr_config import (
    DetrSineConfig,
    check_mask,
    detr_sine_frequencies,
    nearest_indices,
)
from flax_posenc.limits import check_positions

__all__ = ["detr_feature_mask", "detr_learned_embedding", "detr_sine_embedding"]

_HEAD_MASK = np.uint32(0xFFFFF000)  # a float32 with its 12 low mantissa bits cleared: 12 significant bits


def _head(x: jax.Array) -> jax.Array:
    """``x`` with only its 12 leading significant bits (exact truncation; ``x - head`` is exact)."""
    bits = jax.lax.bitcast_convert_type(x, jnp.uint32) & _HEAD_MASK
    return jax.lax.bitcast_convert_type(bits, jnp.float32)


@functools.cache
def _frequency_pair(config: DetrSineConfig, axis: str) -> tuple[np.ndarray, np.ndarray]:
    """Host float32 ``(head, tail)`` of the float64 frequencies: head 12 significant bits."""
    a = detr_sine_frequencies(config, axis)
    m, e = np.frexp(a)
    head = np.ldexp(np.floor(m * 4096.0) / 4096.0, e)
    return head.astype(np.float32), (a - head).astype(np.float32)


def _ratio(count: jax.Array, last: jax.Array, config: DetrSineConfig) -> tuple[jax.Array, jax.Array]:
    """``(count + offset) / (last + eps)`` (or ``count + offset`` without ``normalize``) as a
    float32 pair ``hi + lo``; ``count``, ``last`` are exact small integers in float32."""
    p = count + jnp.float32(config.offset)  # exact: halves and integers below 2**13
    if not config.normalize:
        return p, jnp.zeros_like(p)
    eps = float(config.eps)
    safe = jnp.maximum(last, 1.0)
    q = p / safe  # correctly rounded
    head = _head(q)
    rem = (p - head * safe) - (q - head) * safe  # p - q * last, exactly (12-bit x 12-bit products)
    lo = rem / safe - q * (jnp.float32(eps) / (safe + jnp.float32(eps)))  # 1/(n+eps) = 1/n - eps/(n(n+eps))
    # a row or column with no valid cell: last = 0, the count divided by eps alone (float32 rounding)
    empty = last == 0
    return jnp.where(empty, p / jnp.float32(eps), q), jnp.where(empty, 0.0, lo)


def _axis_embedding(mask: jax.Array, config: DetrSineConfig, axis: int) -> jax.Array:
    """``(batch, H, W, num_pos_feats)`` float32 of one axis (1: y, 2: x)."""
    counts = jnp.cumsum(mask.astype(jnp.int32), axis=axis)
    last = jax.lax.slice_in_dim(counts, counts.shape[axis] - 1, counts.shape[axis], axis=axis)
    hi, lo = _ratio(counts.astype(jnp.float32), last.astype(jnp.float32), config)
    a_head, a_tail = (jnp.asarray(v) for v in _frequency_pair(config, "y" if axis == 1 else "x"))
    hi, lo = hi[..., None], lo[..., None]
    h1 = _head(hi)
    p1, p2 = h1 * a_head, (hi - h1) * a_head  # both exact: 12 x 12 significant bits
    s = p1 + p2
    err = _two_sum_error(p1, p2, s)
    tail = err + hi * a_tail + lo * (a_head + a_tail)  # up to 2**-12 of s: fold it in, keep the rest
    s, t = s + tail, _two_sum_error(s, tail, s + tail)  # |t| <= ulp(s) / 2: t**2 is below float32
    sin_s, cos_s = jnp.sin(s), jnp.cos(s)
    sin, cos = sin_s + cos_s * t, cos_s - sin_s * t
    if config.layout == "interleaved":
        return jnp.stack([sin, cos], -1).reshape(*sin.shape[:-1], -1)
    return jnp.concatenate([sin, cos], -1)


def _two_sum_error(a: jax.Array, b: jax.Array, s: jax.Array) -> jax.Array:
    """Knuth's two-sum: the exact ``a + b - s`` for ``s = fl(a + b)``."""
    bv = s - a
    av = s - bv
    return (a - av) + (b - bv)


def detr_sine_embedding(mask: jax.typing.ArrayLike, config: DetrSineConfig, *, dtype: Any = jnp.float32) -> jax.Array:
    """The DETR 2-D sine position embedding of a feature-map mask, as the model lays it out.

    Args:
      mask: ``(batch, H, W)`` boolean or integer: 1 where the feature-map cell covers pixels,
        0 on padding (transformers' ``pixel_mask`` downsampled: :func:`detr_feature_mask`).
        Values are used, not only the shape: a padded cell takes the count of the valid cells
        before it in its row/column, and ``normalize`` divides by the valid count.
      config: the variant (:class:`~flax_posenc.detr_config.DetrSineConfig`).
      dtype: the result's dtype (computed in float32).

    Returns:
      ``(batch, 2 * num_pos_feats, H, W)``: channels ``[y | x]`` (``order="yx"``), each axis
      laid out as ``config.layout``. No limit: any ``H, W`` up to
      :data:`~flax_posenc.detr_config.MAX_FEATURE_SIDE` cells per side.

    Raises:
      ValueError: a mask of another rank or dtype, or a side past ``MAX_FEATURE_SIDE`` (one
        line naming ``mask``; at trace time, from the static shape).

    >>> import jax.numpy as jnp
    >>> from flax_posenc.detr_config import DetrSineConfig
    >>> mask = jnp.array([[[1, 1, 0]]])
    >>> e = detr_sine_embedding(mask, DetrSineConfig(2, normalize=False))
    >>> e[0, 2, 0].tolist()  # x: sin of the count 1, 2, 2 (the padded cell repeats the last count)
    [0.8414709568023682, 0.9092974066734314, 0.9092974066734314]
    """
    check_mask(mask)
    m = jnp.asarray(mask)
    parts = {"y": _axis_embedding(m, config, 1), "x": _axis_embedding(m, config, 2)}
    out = jnp.concatenate([parts[config.order[0]], parts[config.order[1]]], axis=-1)
    return jnp.moveaxis(out, -1, 1).astype(dtype)


def detr_learned_embedding(
    mask: jax.typing.ArrayLike,
    row_embeddings: jax.typing.ArrayLike,
    column_embeddings: jax.typing.ArrayLike,
    *,
    name: str = "learned DETR",
) -> jax.Array:
    """The learned DETR position embedding (``position_embedding_type="learned"``) of a feature map.

    Args:
      mask: ``(batch, H, W)`` boolean or integer; only its shape is used (transformers ignores the
        values: padded cells get their row's and column's embeddings).
      row_embeddings, column_embeddings: ``(rows, F)`` and ``(columns, F)`` tables (transformers:
        50 rows each, ``F = d_model // 2``).
      name: the tables' name in a limit error.

    Returns:
      ``(batch, 2F, H, W)``: channels ``[column_embeddings[x] | row_embeddings[y]]`` (x first).

    Raises:
      PositionLimitError: ``H`` past the row table or ``W`` past the column table, at trace
        time from the static shape (``"... holds 50 feature-map rows (0..49); asked for
        feature-map row 50, 1 past the end"``), never a clamp.
      ValueError: a mask :func:`~flax_posenc.detr_config.check_mask` refuses, or tables that are
        not 2-D of one width.

    >>> import jax.numpy as jnp
    >>> rows, cols = jnp.zeros((50, 4)), jnp.ones((50, 4))
    >>> detr_learned_embedding(jnp.ones((1, 3, 2), bool), rows, cols)[0, :, 2, 1].tolist()
    [1.0, 1.0, 1.0, 1.0, 0.0, 0.0, 0.0, 0.0]
    """
    batch, h, w = check_mask(mask)
    rows, cols = jnp.asarray(row_embeddings), jnp.asarray(column_embeddings)
    if rows.ndim != 2 or cols.ndim != 2 or rows.shape[1] != cols.shape[1]:
        raise ValueError(
            f"row_embeddings, column_embeddings: expected two (rows, F) tables of one width, "
            f"got shapes {tuple(rows.shape)} and {tuple(cols.shape)}"
        )
    check_positions(0, h - 1, rows=rows.shape[0], name=f"{name} row table", unit="feature-map row")
    check_positions(0, w - 1, rows=cols.shape[0], name=f"{name} column table", unit="feature-map column")
    x = jnp.broadcast_to(cols[None, :w], (h, w, cols.shape[1]))
    y = jnp.broadcast_to(rows[:h, None], (h, w, rows.shape[1]))
    out = jnp.concatenate([x, y], -1).transpose(2, 0, 1)
    return jnp.broadcast_to(out[None], (batch, *out.shape))


def detr_feature_mask(pixel_mask: jax.typing.ArrayLike, size: tuple[int, int]) -> jax.Array:
    """A ``(batch, H_img, W_img)`` pixel mask downsampled to a ``size = (H, W)`` feature map, as
    every DETR model does (``nn.functional.interpolate(mode="nearest")``, then ``bool``):
    cell ``(i, j)`` takes pixel ``(floor(i * s_h), floor(j * s_w))``, ``s = float32(in / out)``.

    Returns:
      ``(batch, H, W)`` boolean.

    Raises:
      ValueError: a mask :func:`~flax_posenc.detr_config.check_mask` refuses (naming
        ``pixel_mask``), or a ``size`` that is not two positive integers.

    >>> import jax.numpy as jnp
    >>> detr_feature_mask(jnp.array([[[1, 1, 1, 0, 0]]]), (1, 2)).tolist()
    [[[True, True]]]
    """
    _, h_in, w_in = check_mask(pixel_mask, "pixel_mask")
    if (
        not isinstance(size, (tuple, list))
        or len(size) != 2
        or not all(isinstance(s, (int, np.integer)) and not isinstance(s, bool) and s > 0 for s in size)
    ):
        raise ValueError(f"size: expected (height, width) feature-map cells, got {size!r}")
    rows, cols = nearest_indices(h_in, int(size[0])), nearest_indices(w_in, int(size[1]))
    m = jnp.asarray(pixel_mask)
    return m[:, rows][:, :, cols].astype(bool)
