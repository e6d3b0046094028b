"""SAM/ViTDet decomposed relative positions on device (JAX): ``get_rel_pos`` and the bias.

The math and its float64 reference are :mod:`flax_posenc.rel_pos_config`'s. Here the table is
resampled with torch's own float32 indices and weights (computed on the host from the static
sizes), so a float32 table gives transformers' float32 values, and the bias is two einsums at
``HIGHEST`` precision.

>>> import jax.numpy as jnp
>>> decomposed_rel_pos_table(jnp.arange(5.0)[:, None], 2, 2)[..., 0].round(4).tolist()
[[2.0, 0.33329999446868896], [3.6666998863220215, 2.0]]
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from flax_posenc.rel_pos_config import (
    check_rel_pos_rows,
    check_rel_pos_size,
    linear_resample_weights,
    rel_pos_index,
    rel_pos_rows,
)

__all__ = ["decomposed_rel_pos_bias", "decomposed_rel_pos_table"]


def decomposed_rel_pos_table(table: Any, q_size: int, k_size: int, *, interpolate: bool = True) -> jax.Array:
    """``(q_size, k_size, C)``: the rows of a ``(rows, C)`` ``rel_pos_h``/``rel_pos_w`` table each
    query/key pair of one axis reads (transformers' ``get_rel_pos``).

    Args:
      table: ``(rows, C)`` float table (rows ``2 * S - 1`` for the size ``S`` it was trained at).
      q_size, k_size: patches along the axis (static Python ints, ``1 .. 2**15``).
      interpolate: resample the table linearly to ``2 * max(q_size, k_size) - 1`` rows (SAM,
        ViTDet, SegGPT: every size works); ``False``: a table of another length is refused.

    Returns:
      ``(q_size, k_size, C)`` in the table's dtype; jittable and vmappable (sizes are static).

    Raises:
      ValueError: a table that is not 2-D, a size out of range, or (``interpolate=False``) rows
        that are not ``2 * max(q_size, k_size) - 1`` (one line).

    >>> import jax.numpy as jnp
    >>> decomposed_rel_pos_table(jnp.zeros((27, 8)), 14, 14).shape
    (14, 14, 8)
    """
    t = jnp.asarray(table)
    if t.ndim != 2 or t.shape[0] < 1:
        raise ValueError(f"rel_pos: expected a (rows, head_dim) table, found shape {tuple(t.shape)}")
    q = check_rel_pos_size(q_size, "q_size")
    k = check_rel_pos_size(k_size, "k_size")
    if not interpolate:
        check_rel_pos_rows(int(t.shape[0]), q, k)
    length = rel_pos_rows(q, k)
    dtype = t.dtype if jnp.issubdtype(t.dtype, jnp.floating) else jnp.float32
    t = t.astype(dtype)
    if t.shape[0] != length:
        wdtype = np.float64 if dtype == jnp.float64 else np.float32
        i0, i1, w0, w1 = linear_resample_weights(int(t.shape[0]), length, wdtype)
        t = jnp.asarray(w0, dtype)[:, None] * t[i0] + jnp.asarray(w1, dtype)[:, None] * t[i1]
    return t[rel_pos_index(q, k)]


def decomposed_rel_pos_bias(
    query: Any,
    rel_pos_h: Any,
    rel_pos_w: Any,
    q_size: tuple[int, int],
    k_size: tuple[int, int],
    *,
    interpolate: bool = True,
) -> jax.Array:
    """The decomposed relative position bias SAM's attention adds to its logits
    (``get_decomposed_rel_pos``): ``bias[(qy, qx), (ky, kx)] = q . R_h[qy, ky] + q . R_w[qx, kx]``.

    Args:
      query: ``(..., qh * qw, C)``, the queries before the softmax scale (per head: SAM folds the
        heads into the batch).
      rel_pos_h, rel_pos_w: the layer's ``(rows, C)`` tables.
      q_size, k_size: ``(height, width)`` in patches of the query and key grids (static).
      interpolate: as :func:`decomposed_rel_pos_table`.

    Returns:
      ``(..., qh * qw, kh * kw)`` in the query's dtype, to add to ``q @ k.T * scale``.

    Raises:
      ValueError: a query whose length is not ``qh * qw``, or as :func:`decomposed_rel_pos_table`.

    >>> import jax.numpy as jnp
    >>> decomposed_rel_pos_bias(jnp.ones((2, 6, 4)), jnp.zeros((5, 4)), jnp.zeros((5, 4)), (2, 3), (2, 3)).shape
    (2, 6, 6)
    """
    (qh, qw), (kh, kw) = q_size, k_size
    q = jnp.asarray(query)
    if q.ndim < 2 or q.shape[-2] != qh * qw:
        raise ValueError(f"query: expected (..., {qh} * {qw}, head_dim), found shape {tuple(q.shape)}")
    rh = decomposed_rel_pos_table(rel_pos_h, qh, kh, interpolate=interpolate).astype(q.dtype)
    rw = decomposed_rel_pos_table(rel_pos_w, qw, kw, interpolate=interpolate).astype(q.dtype)
    r = q.reshape(*q.shape[:-2], qh, qw, q.shape[-1])
    hi = jax.lax.Precision.HIGHEST
    bias_h = jnp.einsum("...hwc,hkc->...hwk", r, rh, precision=hi)
    bias_w = jnp.einsum("...hwc,wkc->...hwk", r, rw, precision=hi)
    bias = bias_h[..., :, None] + bias_w[..., None, :]
    return bias.reshape(*q.shape[:-2], qh * qw, kh * kw)
