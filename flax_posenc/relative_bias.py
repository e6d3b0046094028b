"""T5-style learned relative position bias on device: buckets and the ``(heads, q, k)`` bias.

T5, mT5, UMT5, LongT5 and MPNet add ``table[bucket(key - query), head]`` to every attention
logit (before the softmax; T5 does not scale its logits by ``1/sqrt(head_dim)``). The bucket
rule and its limit are explained in :mod:`flax_posenc.relative_bias_config`; here it runs under
``jax.jit``/``vmap``/``lax.scan`` with integer operations only (the log bucket edges are computed
once on the host in float32, exactly as transformers computes them), so buckets equal Hugging
Face's ``_relative_position_bucket`` for every integer.

Adding the bias to attention::

    bias = relative_position_bias(table, q_len, k_len, bidirectional=True)  # (heads, q, k)
    logits = jnp.einsum("bqhd,bkhd->bhqk", q, k) + bias                     # T5: no 1/sqrt(d)
    logits = jnp.where(mask, logits, jnp.finfo(logits.dtype).min)
    weights = jax.nn.softmax(logits, axis=-1)

T5 computes the bias once, in the first layer, and every layer of that stack reuses it (UMT5:
one table per layer). Decoding with a KV cache: the new query at position ``t`` attends keys
``0..t``: ``relative_position_bias(table, 1, t + 1, query_start=t, bidirectional=False)``.

No position is ever out of range: every relative position has a bucket. Past the
*saturation distance* (91 for T5's encoder defaults) all distances share the last bucket, so
the model cannot tell them apart; ``flax-posenc check`` says how much of a length lies there.

>>> import jax.numpy as jnp
>>> relative_position_bucket(jnp.array([-200, -1, 0, 1, 200])).tolist()
[15, 1, 0, 17, 31]
>>> relative_position_bias(jnp.zeros((32, 4)), 3, 5).shape
(4, 3, 5)
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

from flax_posenc.overflow import host_or_device
from flax_posenc.relative_bias_config import DEFAULT_MAX_DISTANCE, DEFAULT_NUM_BUCKETS, BucketConfig

#: logical axis names of the ``(num_buckets, heads)`` table.
RELATIVE_BIAS_AXES = (None, "heads")


def relative_position_bucket(
    relative_position: jax.typing.ArrayLike,
    *,
    bidirectional: bool = True,
    num_buckets: int = DEFAULT_NUM_BUCKETS,
    max_distance: int = DEFAULT_MAX_DISTANCE,
) -> jax.Array:
    """Bucket of each relative position ``key - query``: transformers' T5 ``_relative_position_bucket``.

    Args:
      relative_position: integers of any shape (traced or not), ``|value| < 2**31``.
      bidirectional: encoder (True: keys after the query get buckets ``num_buckets//2 ..``) or
        causal decoder (False: keys after the query all get bucket 0).
      num_buckets: buckets in all (T5: 32).
      max_distance: where the log bins would reach the last bucket (T5: 128).

    Returns:
      int32 array of the same shape, values in ``[0, num_buckets)``. Every integer has a bucket
      (no out-of-range error); distances from :attr:`BucketConfig.saturation_distance` on share
      the last bucket of their direction.

    Raises:
      ValueError: a non-integer input, or a bucket configuration :class:`BucketConfig` rejects.

    >>> import jax.numpy as jnp
    >>> relative_position_bucket(jnp.array([-3, 0, 3]), bidirectional=False).tolist()
    [3, 0, 0]
    """
    cfg = BucketConfig(num_buckets, max_distance, bidirectional)
    rp = host_or_device(relative_position)
    if not jnp.issubdtype(rp.dtype, jnp.integer):
        raise ValueError(f"relative_position_bucket: expected integer relative positions, found dtype {rp.dtype}")
    if isinstance(rp, np.ndarray) and rp.size and rp.dtype.itemsize >= 4:
        # every distance past the saturation distance shares its direction's last bucket, so
        # clipping into int32 (symmetric: |-2**31| wraps) keeps each bucket and nothing wraps
        lowest = 0 if np.issubdtype(rp.dtype, np.unsignedinteger) else -_INT32_MAX
        rp = np.clip(rp, lowest, _INT32_MAX).astype(np.int32)
    return _buckets(jnp.asarray(rp), cfg)


_INT32_MAX = int(np.iinfo(np.int32).max)


@functools.partial(jax.jit, static_argnums=1)  # one small program per shape and config, also eagerly
def _buckets(rp: jax.Array, cfg: BucketConfig) -> jax.Array:
    if rp.dtype.itemsize >= 4:  # int64 under x64 and int32 alike: clip before the cast (see above)
        rp = jnp.clip(rp, -_INT32_MAX if jnp.issubdtype(rp.dtype, jnp.signedinteger) else 0, _INT32_MAX)
    rp = rp.astype(jnp.int32)
    if cfg.bidirectional:
        base = jnp.where(rp > 0, cfg.per_direction, 0)
        n = jnp.abs(rp)
    else:
        base = jnp.zeros_like(rp)
        n = jnp.maximum(-rp, 0)
    edges = cfg.log_edges()
    # "compare_all": one comparison per edge (at most num_buckets of them) and a sum, which XLA
    # compiles ~5x faster than the default binary search's while loop (benchmarks/program_size.py)
    large = cfg.max_exact + (
        jnp.searchsorted(jnp.asarray(edges, jnp.int32), n, side="right", method="compare_all").astype(jnp.int32)
        if edges.size
        else 0
    )
    return (base + jnp.where(n < cfg.max_exact, n, large)).astype(jnp.int32)


@functools.partial(jax.jit, static_argnums=(2, 3, 4))
def _bias(table: jax.Array, start: jax.Array, query_len: int, key_len: int, cfg: BucketConfig) -> jax.Array:
    context = jnp.arange(query_len, dtype=jnp.int32)[:, None] + start.astype(jnp.int32)
    memory = jnp.arange(key_len, dtype=jnp.int32)[None, :]
    values = jnp.take(table, _buckets(memory - context, cfg), axis=0, mode="clip")  # buckets < rows: never clipped
    return jnp.transpose(values, (2, 0, 1))


def relative_position_bias(
    table: jax.typing.ArrayLike,
    query_len: int,
    key_len: int,
    *,
    query_start: int | jax.Array = 0,
    bidirectional: bool = True,
    num_buckets: int | None = None,
    max_distance: int = DEFAULT_MAX_DISTANCE,
) -> jax.Array:
    """The bias ``(heads, query_len, key_len)`` that T5 adds to its attention logits.

    ``out[h, i, j] = table[bucket(j - (query_start + i)), h]``: queries sit at positions
    ``query_start .. query_start + query_len - 1``, keys at ``0 .. key_len - 1`` -- transformers'
    ``T5Attention.compute_bias(query_len, key_len, past_seen_tokens=query_start)``.

    Args:
      table: ``(rows, heads)`` learned bias, ``rows >= num_buckets`` (MPNet's table may have more
        rows than its 32 used buckets).
      query_len, key_len: static lengths.
      query_start: position of the first query (an int or a traced integer scalar: decoding).
      bidirectional, max_distance: see :func:`relative_position_bucket`.
      num_buckets: buckets used (default: ``table.shape[0]``).

    Returns:
      ``(heads, query_len, key_len)`` in the table's dtype. Never out of range.

    Raises:
      ValueError: ``table`` is not 2-D or has fewer than ``num_buckets`` rows, negative lengths.

    >>> import jax.numpy as jnp
    >>> table = jnp.arange(32.0)[:, None]                          # one head: bias = bucket
    >>> relative_position_bias(table, 1, 4, query_start=3, bidirectional=False)[0].tolist()
    [[3.0, 2.0, 1.0, 0.0]]
    """
    table = jnp.asarray(table)
    if table.ndim != 2:
        raise ValueError(f"relative_position_bias: expected a (num_buckets, heads) table, found shape {table.shape}")
    num_buckets = int(table.shape[0]) if num_buckets is None else num_buckets
    if table.shape[0] < num_buckets:
        raise ValueError(
            f"relative_position_bias: expected a table of at least {num_buckets} rows (num_buckets), "
            f"found shape {table.shape}"
        )
    for name, value in (("query_len", query_len), ("key_len", key_len)):
        if not isinstance(value, (int, np.integer)) or value < 0:
            raise ValueError(f"relative_position_bias: expected a static non-negative int {name}, found {value!r}")
    start = jnp.asarray(query_start)
    if not jnp.issubdtype(start.dtype, jnp.integer) or start.ndim != 0:
        raise ValueError(
            f"relative_position_bias: expected an integer scalar query_start, found {start.dtype}{start.shape}"
        )
    return _bias(table, start, int(query_len), int(key_len), BucketConfig(num_buckets, max_distance, bidirectional))


def bias_of(
    buckets: BucketConfig,
    table: jax.typing.ArrayLike,
    query_len: int,
    key_len: int,
    *,
    query_start: int | jax.Array = 0,
    dtype: jax.typing.DTypeLike | None = None,
) -> jax.Array:
    """:func:`relative_position_bias` of ``table`` (cast to ``dtype`` if given) under ``buckets``.

    The call both ``RelativePositionBias`` shells (NNX and Linen) make.

    >>> import jax.numpy as jnp
    >>> bias_of(BucketConfig(32, 128, False), jnp.arange(32.0)[:, None], 1, 2, query_start=1).tolist()
    [[[1.0, 0.0]]]
    """
    table = jnp.asarray(table)
    if dtype is not None:
        table = table.astype(dtype)
    return relative_position_bias(
        table,
        query_len,
        key_len,
        query_start=query_start,
        bidirectional=buckets.bidirectional,
        num_buckets=buckets.num_buckets,
        max_distance=buckets.max_distance,
    )


__all__ = ["RELATIVE_BIAS_AXES", "bias_of", "relative_position_bias", "relative_position_bucket"]
