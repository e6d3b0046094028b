"""Queries scaled by position: Llama 4's attention temperature and Ministral 3 / Mistral 4's query scale.

Two model families multiply their queries by a factor that grows with the position ``p``
(Scalable-Softmax, arXiv 2501.19399), one function of two conventions:

- Llama 4 (``attn_temperature_tuning``, on by default), on its layers *without* RoPE:
  ``log1p(floor((p + 1) / floor_scale)) * attn_scale + 1`` (``position_offset=1``, the default).
  Those layers are not position-free, and a record reading them as identity would be wrong past
  ``floor_scale - 1`` positions. The conversion reader reports the two numbers on the layers'
  record (:class:`~flax_posenc.conversion.relative_config.NoPositionLayers` ``.temperature``).
- Ministral 3 and Mistral 4 (``rope_parameters`` ``llama_4_scaling_beta``), on every layer, after
  RoPE: ``1 + beta * log(1 + floor(p / original_max_position_embeddings))`` (transformers'
  ``get_llama_4_attn_scale``): ``floor_scale=original_max_position_embeddings``,
  ``attn_scale=beta``, ``position_offset=0``. The reader reports them on the RoPE record
  (:class:`~flax_posenc.conversion.relative_config.RelativeConfig` ``.query_scale``).

>>> import jax.numpy as jnp
>>> attention_temperature(jnp.array([0, 8190, 8191, 16383]), floor_scale=8192, attn_scale=0.1).tolist()
[1.0, 1.0, 1.06931471824646, 1.1098612546920776]
>>> attention_temperature(jnp.array([0, 16383, 16384]), floor_scale=16384, attn_scale=0.1, position_offset=0).tolist()
[1.0, 1.0, 1.06931471824646]
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
    position_offset: int = 1,
    dtype: jax.typing.DTypeLike = jnp.float32,
) -> jax.Array:
    """``log1p(floor((p + position_offset) / floor_scale)) * attn_scale + 1``: the factor of a query at position ``p``.

    Jittable. The floor is an integer division, exact for every int32 position: this function
    equals the float64 value of the formula (to float32 rounding of the ``log1p``), where
    transformers' float32 division (Llama 4's ``(p + 1.0) / floor_scale``, Ministral 3's
    ``position_ids / original_max_position_embeddings``) rounds ``p`` above ``2**24`` and can step a
    position early.

    Args:
      positions: integer positions, any shape, known or traced (``>= 0``; a negative one is refused
        while tracing when known).
      floor_scale: positions per step of the factor, a positive int (Llama 4: ``floor_scale``,
        8192; Ministral 3 / Mistral 4: ``original_max_position_embeddings``).
      attn_scale: the slope (Llama 4: ``attn_scale``, 0.1; Ministral 3 / Mistral 4:
        ``llama_4_scaling_beta``, 0.1).
      position_offset: added to ``p`` before the division: ``1`` for Llama 4's temperature tuning
        (the default), ``0`` for the ``llama_4_scaling_beta`` query scale; a non-negative int.
      dtype: output dtype.

    Returns:
      ``positions.shape`` factors (1 below ``floor_scale - position_offset``); multiply the queries
      ``(..., seq, heads, head_dim)`` by ``factor[..., None, None]``.

    Raises:
      ValueError: ``floor_scale`` not a positive int, ``position_offset`` not a non-negative int,
        or a known negative position.
      TypeError: non-integer positions.
    """
    if isinstance(floor_scale, bool) or not isinstance(floor_scale, (int, np.integer)) or floor_scale < 1:
        raise ValueError(f"floor_scale: expected a positive int (positions per temperature step), got {floor_scale!r}")
    if isinstance(position_offset, bool) or not isinstance(position_offset, (int, np.integer)) or position_offset < 0:
        raise ValueError(
            f"position_offset: expected a non-negative int (1: Llama 4, 0: Ministral 3), got {position_offset!r}"
        )
    p: Any = positions
    if not overflow.is_traced(p) and not isinstance(p, jax.Array):
        p = np.asarray(p)
    if not jnp.issubdtype(p.dtype, jnp.integer):
        raise TypeError(f"positions: expected integer positions, got dtype {p.dtype}")
    if not overflow.is_traced(p) and np.size(p) and int(np.min(np.asarray(p))) < 0:
        raise ValueError(f"positions: expected positions >= 0, found {int(np.min(np.asarray(p)))}")
    shifted = jnp.asarray(p).astype(jnp.int32)
    if position_offset:
        shifted = shifted + np.int32(position_offset)
    steps = shifted // np.int32(floor_scale)
    return (jnp.log1p(steps.astype(jnp.float32)) * np.float32(attn_scale) + 1).astype(dtype)
