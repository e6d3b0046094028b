"""Llama 4's attention temperature tuning: the query scale of its NoPE layers, a function of position.

Llama 4 (``attn_temperature_tuning``, on by default) multiplies the queries of its layers
*without* RoPE by ``log1p(floor((p + 1) / floor_scale)) * attn_scale + 1`` at position ``p``
(Scalable-Softmax, arXiv 2501.19399): those layers are not position-free, and a record reading
them as identity would be wrong past ``floor_scale - 1`` positions. The conversion reader reports
the two numbers on the layers' record
(:class:`~flax_posenc.conversion.relative_config.NoPositionLayers` ``.temperature``).

>>> import jax.numpy as jnp
>>> attention_temperature(jnp.array([0, 8190, 8191, 16383]), floor_scale=8192, attn_scale=0.1).tolist()
[1.0, 1.0, 1.06931471824646, 1.1098612546920776]
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from flax_posenc import overflow

__all__ = ["attention_temperature"]


def attention_temperature(
    positions: jax.typing.ArrayLike,
    *,
    floor_scale: int = 8192,
    attn_scale: float = 0.1,
    dtype: jax.typing.DTypeLike = jnp.float32,
) -> jax.Array:
    """``log1p(floor((p + 1) / floor_scale)) * attn_scale + 1``: the factor of a query at position ``p``.

    Jittable; the floor is an integer division (exact for every int32 position, where
    transformers' float32 ``(p + 1.0) / floor_scale`` rounds above ``2**24``).

    Args:
      positions: integer positions, any shape, known or traced (``>= 0``; a negative one is refused
        while tracing when known).
      floor_scale: positions per step of the temperature (Llama 4: 8192), a positive int.
      attn_scale: the slope (Llama 4: 0.1).
      dtype: output dtype.

    Returns:
      ``positions.shape`` factors (1 below ``floor_scale - 1``); multiply the queries
      ``(..., seq, heads, head_dim)`` by ``factor[..., None, None]``.

    Raises:
      ValueError: ``floor_scale`` not a positive int, or a known negative position.
      TypeError: non-integer positions.
    """
    if isinstance(floor_scale, bool) or not isinstance(floor_scale, (int, np.integer)) or floor_scale < 1:
        raise ValueError(f"floor_scale: expected a positive int (positions per temperature step), got {floor_scale!r}")
    p: Any = positions
    if not overflow.is_traced(p) and not isinstance(p, jax.Array):
        p = np.asarray(p)
    if not jnp.issubdtype(p.dtype, jnp.integer):
        raise TypeError(f"positions: expected integer positions, got dtype {p.dtype}")
    if not overflow.is_traced(p) and np.size(p) and int(np.min(np.asarray(p))) < 0:
        raise ValueError(f"positions: expected positions >= 0, found {int(np.min(np.asarray(p)))}")
    steps = (jnp.asarray(p).astype(jnp.int32) + 1) // np.int32(floor_scale)
    return (jnp.log1p(steps.astype(jnp.float32)) * np.float32(attn_scale) + 1).astype(dtype)
