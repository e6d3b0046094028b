"""Window relative position bias on device: Swin's and BEiT's tables, SwinV2's continuous bias.

Pure functions of arrays (jit-, vmap- and grad-friendly); the index and the resampling matrices
are numpy constants of the window (:mod:`flax_posenc.window_bias_config`), so nothing about a
window is traced. Add the result to the attention logits of one window before the softmax
(``logits = q @ k.T * scale + bias``), broadcasting over the batch and the windows.

>>> import jax.numpy as jnp
>>> table = jnp.arange(9.0)[:, None]                 # a 2 x 2 window, one head
>>> window_bias(table, 2)[0].tolist()
[[4.0, 3.0, 1.0, 0.0], [5.0, 4.0, 2.0, 1.0], [7.0, 6.0, 4.0, 3.0], [8.0, 7.0, 5.0, 4.0]]
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from flax_posenc.window_bias_config import (
    CPB_SCALE,
    WindowResize,
    check_table_rows,
    log_spaced_coords,
    relative_position_index,
    resize_matrices,
    window_pair,
)

__all__ = ["continuous_window_bias", "continuous_window_table", "resize_window_table", "window_bias"]

#: Logical axes of a window bias table ``(rows, heads)``.
WINDOW_BIAS_AXES = (None, "heads")


def window_bias(table: Any, window: Any, *, class_token: bool = False, dtype: Any = None) -> jax.Array:
    """The bias of one window: ``(heads, N, N)`` with ``N = h * w`` (``+ 1`` with the class token).

    Args:
      table: ``(rows, heads)``: ``rows = (2h-1) * (2w-1)`` (``+ 3`` for BEiT's class-token rows).
      window: ``h`` or ``(h, w)`` patches (BEiT: its grid, ``image_size / patch_size``).
      class_token: the class token is token 0 (BEiT, Data2Vec-Vision).
      dtype: output dtype (``None``: the table's).

    Returns:
      ``bias[head, i, j] = table[index[i, j], head]`` (:func:`~flax_posenc.window_bias_config.relative_position_index`).

    Raises:
      CheckpointError: the table's rows do not fit the window (one line: expected and found rows).

    Every pair of a window has a row: nothing is out of range. A window other than the table's
    needs a resized table (:func:`resize_window_table`).
    """
    table = jnp.asarray(table)
    if table.ndim != 2:
        raise ValueError(f"table: expected a 2-D table (rows, heads), found shape {tuple(table.shape)}")
    check_table_rows(int(table.shape[0]), window, class_token=class_token)
    index = relative_position_index(window, class_token=class_token)
    bias = jnp.take(table, jnp.asarray(index.reshape(-1), jnp.int32), axis=0)
    bias = bias.reshape(*index.shape, table.shape[1]).transpose(2, 0, 1)
    return bias if dtype is None else bias.astype(dtype)


def continuous_window_table(
    w1: Any, b1: Any, w2: Any, window: Any, *, pretrained_window: Any = 0, dtype: Any = None
) -> jax.Array:
    """SwinV2's table before the sigmoid: ``relu(coords @ w1.T + b1) @ w2.T``, ``((2h-1)(2w-1), heads)``.

    Args:
      w1: ``(hidden, 2)``, b1: ``(hidden,)``, w2: ``(heads, hidden)``: the ``cpb_mlp`` weights
        (transformers' ``continuous_position_bias_mlp.0.weight``, ``.0.bias``, ``.2.weight``).
      window: ``h`` or ``(h, w)`` patches (any: the MLP extrapolates).
      pretrained_window: the window the coordinates are normalised by (``0``: ``window``).
      dtype: compute dtype (``None``: ``w1``'s).
    """
    w1 = jnp.asarray(w1)
    dtype = w1.dtype if dtype is None else dtype
    coords = jnp.asarray(log_spaced_coords(window, pretrained_window), dtype)
    hidden = jax.nn.relu(coords @ w1.astype(dtype).T + jnp.asarray(b1, dtype))
    return hidden @ jnp.asarray(w2, dtype).T


def continuous_window_bias(
    w1: Any, b1: Any, w2: Any, window: Any, *, pretrained_window: Any = 0, dtype: Any = None
) -> jax.Array:
    """SwinV2's (and Swin2SR's) bias of one window: ``16 * sigmoid(table)[index]``, ``(heads, N, N)``.

    The table is :func:`continuous_window_table`; every window has one (no resizing needed).

    >>> import jax.numpy as jnp
    >>> b = continuous_window_bias(jnp.zeros((8, 2)), jnp.zeros(8), jnp.zeros((3, 8)), 2)
    >>> b.shape, float(b[0, 0, 0])                     # zero weights: 16 * sigmoid(0)
    ((3, 4, 4), 8.0)
    """
    table = continuous_window_table(w1, b1, w2, window, pretrained_window=pretrained_window, dtype=dtype)
    return CPB_SCALE * jax.nn.sigmoid(window_bias(table, window))


def resize_window_table(
    table: Any,
    window: Any,
    new_window: Any,
    *,
    class_token: bool = False,
    convention: str | WindowResize = "timm",
) -> jax.Array:
    """``table`` of ``window`` resized to ``new_window``: ``(rows', heads)``, the class rows kept.

    ``convention``: ``"transformers"`` (BEiT's bilinear resampling in its forward) or ``"timm"``
    (``resize_rel_pos_bias_table``), see :data:`~flax_posenc.window_bias_config.WINDOW_RESIZES`.
    The float64 matrices are applied in the table's dtype at full precision.

    Raises:
      CheckpointError: the table's rows do not fit ``window``; ValueError: an unknown convention.

    >>> import jax.numpy as jnp
    >>> resize_window_table(jnp.zeros((9, 2)), 2, 3).shape
    (25, 2)
    """
    table = jnp.asarray(table)
    check_table_rows(int(table.shape[0]), window, class_token=class_token)
    h, w = window_pair(window)
    a, b = resize_matrices((h, w), new_window, convention)
    n = (2 * h - 1) * (2 * w - 1)
    grid = table[:n].reshape(a.shape[1], b.shape[1], table.shape[1])
    hp = jax.lax.Precision.HIGHEST
    new = jnp.einsum("oi,ijh,pj->oph", jnp.asarray(a, table.dtype), grid, jnp.asarray(b, table.dtype), precision=hp)
    return jnp.concatenate([new.reshape(-1, table.shape[1]), table[n:]], axis=0)
