"""ALiBi (Press et al., 2022): a per-head linear bias on attention scores, no position vectors.

Head ``h`` adds ``-m_h * distance`` to the score of query position ``i`` and key position ``j``,
with slopes ``m_h`` from :func:`~flax_posenc.alibi_config.alibi_slopes` (any head count;
non-powers of two per the paper's recipe, as BLOOM and MPT build them).

Shape conventions (the bias is *added* to ``q . k / sqrt(d)`` before the softmax):

- :func:`alibi_bias` and :func:`alibi_bias_from_positions` return ``(..., heads, q_len, k_len)``.
- ``causal=True``: ``bias[h, i, j] = -m_h * (i - j)`` for keys at or before the query, and the
  most negative finite value of ``dtype`` for keys after it, so the bias *is* the causal mask
  (as Hugging Face's masks use ``finfo.min``: a softmax over it never yields NaN).
- ``causal=False`` (bidirectional, encoders): ``bias[h, i, j] = -m_h * |i - j|``.
- With a cache, queries are the last ``q_len`` of the ``k_len`` positions.

Hugging Face stores ALiBi differently, relying on softmax's invariance to a per-row constant:
BLOOM's ``build_alibi_tensor`` is ``m_h * j`` (key position, padding-aware), shape
``(batch * heads, 1, seq)``; MPT's ``build_mpt_alibi_tensor`` is ``m_h * (j - (seq - 1))``, shape
``(heads, 1, seq)``. :func:`mpt_alibi_tensor` reproduces MPT's bit for bit up to 64 heads;
past that, and :func:`bloom_alibi_tensor` against BLOOM's past 10 heads, they are within one
float32 ulp of a slope times the position (HF's float32 ``pow``). After the causal mask and the softmax all
three give the same attention up to float32 rounding of the stored values, which grows with the
length in BLOOM's ``m_h * j`` (3.5e-5 at 2048 positions; ours stays ~1e-7 from float64).
(Falcon's ALiBi variant multiplies in bfloat16; it is not reproduced.)

Precision: ``i - j`` is an exact integer and each slope is rounded once from float64; the
product is rounded once more in float32, so each bias is within 1.5 ulp of the exact product
(measured: 1.26 ulp; about a fifth of the entries are 1 ulp from the correctly rounded value).
``python benchmarks/alibi_parity.py`` measures all of this.

>>> import flax_posenc as fp
>>> fp.alibi_bias(2, 3)[0]
Array([[-0.0000000e+00, -3.4028235e+38, -3.4028235e+38],
       [-6.2500000e-02, -0.0000000e+00, -3.4028235e+38],
       [-1.2500000e-01, -6.2500000e-02, -0.0000000e+00]], dtype=float32)
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from flax_posenc import overflow
from flax_posenc.alibi_config import AlibiConfig, alibi_slopes
from flax_posenc.limits import ALIBI_LIMIT_REASON, limit_name

__all__ = [
    "AlibiConfig",
    "alibi_bias",
    "alibi_bias_from_positions",
    "alibi_slopes",
    "bloom_alibi_tensor",
    "mpt_alibi_tensor",
]


def _slopes(config: AlibiConfig) -> jax.Array:
    return jnp.asarray(alibi_slopes(config.num_heads, max_bias=config.max_bias).astype(np.float32))


def _guard(positions, config: AlibiConfig, on_overflow: overflow.OverflowPolicy, what: str):
    """``(int32 positions, NaN mask or None)`` through the one overflow guard."""
    if config.max_positions is None:
        limit = overflow.Limit(2**31, name=f"ALiBi {what} (int32 positions)", signed=True)
    else:
        limit = overflow.Limit(config.max_positions, name=limit_name(f"ALiBi {what}", ALIBI_LIMIT_REASON))
    return overflow.guard_positions(positions, limit, on_overflow)


def alibi_bias_from_positions(
    config: AlibiConfig | int,
    query_positions: jax.typing.ArrayLike,
    key_positions: jax.typing.ArrayLike,
    *,
    causal: bool = True,
    on_overflow: overflow.OverflowPolicy = "error",
    dtype: jax.typing.DTypeLike = jnp.float32,
) -> jax.Array:
    """ALiBi bias for explicit integer positions (packed sequences, caches, traced under ``jit``).

    Args:
      config: :class:`AlibiConfig` or a head count.
      query_positions: ``(..., q_len)`` integers.
      key_positions: ``(..., k_len)`` integers (leading axes broadcast against the queries').
      causal: mask keys after the query (see the module docstring) or use ``|i - j|``.
      on_overflow: with ``config.max_positions`` set, the policy for traced positions past it
        (``"error"``: the call fails at run time, ``"clip"``, or ``"fill"``: NaN for every score
        involving such a position; see :mod:`flax_posenc.overflow`). Known positions past it
        always raise, while tracing.
      dtype: output dtype.

    Returns:
      ``(..., heads, q_len, k_len)``.

    Raises:
      PositionLimitError: a known position outside ``0 .. max_positions - 1``.

    >>> import jax.numpy as jnp
    >>> alibi_bias_from_positions(1, jnp.array([2]), jnp.arange(3), causal=False)
    Array([[[-0.0078125 , -0.00390625, -0.        ]]], dtype=float32)
    """
    config = AlibiConfig.coerce(config)
    overflow.check_policy(on_overflow)
    p: Any  # ArrayLike: the dtype of an array, else of np.asarray
    for name, p in (("query_positions", query_positions), ("key_positions", key_positions)):
        dtype_, ndim = (p.dtype, p.ndim) if hasattr(p, "dtype") else (np.asarray(p).dtype, np.ndim(p))
        if not jnp.issubdtype(dtype_, jnp.integer) or ndim < 1:
            raise TypeError(
                f"{name}: expected an integer array of shape (..., length), got dtype {dtype_}, shape {np.shape(p)}"
            )
    k, k_invalid = _guard(key_positions, config, on_overflow, "key positions")
    q, q_invalid = _guard(query_positions, config, on_overflow, "query positions")
    distance = (q[..., :, None] - k[..., None, :])[..., None, :, :]
    slopes = _slopes(config)[:, None, None]
    if causal:
        bias = (-slopes * distance.astype(jnp.float32)).astype(dtype)
        bias = jnp.where(distance < 0, jnp.finfo(dtype).min, bias)
    else:
        bias = (-slopes * jnp.abs(distance).astype(jnp.float32)).astype(dtype)
    if q_invalid is not None or k_invalid is not None:
        q_bad = jnp.zeros(q.shape, bool) if q_invalid is None else q_invalid
        k_bad = jnp.zeros(k.shape, bool) if k_invalid is None else k_invalid
        bias = jnp.where((q_bad[..., :, None] | k_bad[..., None, :])[..., None, :, :], jnp.nan, bias)
    return bias


def alibi_bias(
    config: AlibiConfig | int,
    query_length: int,
    key_length: int | None = None,
    *,
    causal: bool = True,
    dtype: jax.typing.DTypeLike = jnp.float32,
) -> jax.Array:
    """ALiBi bias for ``query_length`` queries over ``key_length`` keys (static lengths).

    Keys are positions ``0 .. key_length - 1``; queries are the last ``query_length`` of them
    (``key_length = query_length`` without a cache).

    Returns:
      ``(heads, query_length, key_length)``.

    Raises:
      PositionLimitError: ``key_length`` past ``config.max_positions``.
      ValueError: ``query_length > key_length`` or a non-positive length.

    >>> import flax_posenc as fp
    >>> fp.alibi_bias(fp.AlibiConfig(4, max_positions=8), 2, 9)
    Traceback (most recent call last):
    ...
    flax_posenc.errors.PositionLimitError: ALiBi key positions (configured limit; ALiBi itself has none) holds 8 positions (0..7); asked for position 8, 1 past the end
    """
    key_length = query_length if key_length is None else key_length
    for name, n in (("query_length", query_length), ("key_length", key_length)):
        if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
            raise ValueError(f"{name}: expected a positive Python integer, got {n!r}")
    if query_length > key_length:
        raise ValueError(
            f"query_length: expected at most key_length={key_length} (queries are the last keys), got {query_length}"
        )
    keys = np.arange(key_length, dtype=np.int64)  # host positions: the limit is checked while tracing
    return alibi_bias_from_positions(config, keys[key_length - query_length :], keys, causal=causal, dtype=dtype)


def bias_for(
    config: AlibiConfig,
    query_length: int | None = None,
    key_length: int | None = None,
    *,
    query_positions=None,
    key_positions=None,
    causal: bool = True,
    dtype: jax.typing.DTypeLike = jnp.float32,
    on_overflow: overflow.OverflowPolicy = "error",
) -> jax.Array:
    """The ``ALiBiBias`` modules' core: :func:`alibi_bias` for lengths, else for positions.

    >>> import jax.numpy as jnp
    >>> bias_for(AlibiConfig(4), 2, 3).shape
    (4, 2, 3)
    >>> bias_for(AlibiConfig(4), query_positions=jnp.arange(2), key_positions=jnp.arange(5)).shape
    (4, 2, 5)
    """
    if query_positions is not None or key_positions is not None:
        if query_positions is None or key_positions is None or query_length is not None:
            raise ValueError("give query_length (and key_length), or both query_positions and key_positions")
        return alibi_bias_from_positions(
            config, query_positions, key_positions, causal=causal, on_overflow=on_overflow, dtype=dtype
        )
    if query_length is None:
        raise ValueError("give query_length (and key_length), or both query_positions and key_positions")
    return alibi_bias(config, query_length, key_length, causal=causal, dtype=dtype)


def bloom_alibi_tensor(
    attention_mask: jax.typing.ArrayLike, num_heads: int, dtype: jax.typing.DTypeLike = jnp.float32
) -> jax.Array:
    """BLOOM's ``build_alibi_tensor``: ``m_h * position(j)``, shape ``(batch * num_heads, 1, seq)``.

    ``position(j) = (cumsum(mask) - 1) * mask`` (padding-aware, 0 on padding), as in
    ``transformers.models.bloom.modeling_bloom``; added to the scores of every query.

    >>> import jax.numpy as jnp
    >>> bloom_alibi_tensor(jnp.ones((1, 3), jnp.int32), 2)[:, 0]
    Array([[0.        , 0.0625    , 0.125     ],
           [0.        , 0.00390625, 0.0078125 ]], dtype=float32)
    """
    mask = jnp.asarray(attention_mask).astype(jnp.int32)
    if mask.ndim != 2:
        raise ValueError(f"attention_mask: expected shape (batch, seq), got {tuple(mask.shape)}")
    batch, seq = mask.shape
    positions = ((jnp.cumsum(mask, axis=-1) - 1) * mask)[:, None, :].astype(jnp.float32)
    alibi = _slopes(AlibiConfig.coerce(num_heads))[None, :, None] * positions
    return alibi.reshape(batch * num_heads, 1, seq).astype(dtype)


def mpt_alibi_tensor(
    num_heads: int, sequence_length: int, alibi_bias_max: float = 8.0, dtype: jax.typing.DTypeLike = jnp.float32
) -> jax.Array:
    """MPT's ``build_mpt_alibi_tensor``: ``m_h * (j - (seq - 1))``, shape ``(heads, 1, seq)``.

    >>> mpt_alibi_tensor(1, 3)[0]
    Array([[-0.0078125 , -0.00390625,  0.        ]], dtype=float32)
    """
    config = AlibiConfig(num_heads, max_bias=alibi_bias_max)
    distance = jnp.arange(1 - sequence_length, 1, dtype=jnp.int32).astype(jnp.float32)
    return (_slopes(config)[:, None, None] * distance[None, None, :]).astype(dtype)
