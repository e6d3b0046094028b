"""DeBERTa's relative positions on device: transformers' ``build_relative_position`` under ``jit``.

DeBERTa / DeBERTa-v2/v3 read their relative embeddings at ``clamp(r + span, 0, 2 * span - 1)``
where ``r[i, j]`` is the relative position of query ``i`` and key ``j`` (query minus key), log
bucketed when ``position_buckets > 0`` (rules, limits and the float32 story in
:mod:`flax_posenc.deberta_config`). Here ``r`` is computed with integer operations only: the
log buckets come from a host table built once per configuration in transformers' float32
pipeline, so the device result does not depend on the device's ``log``.

Using it in disentangled attention (DeBERTa-v2's c2p term)::

    cfg = DebertaRelativeConfig.from_config_dict(config)
    r = deberta_relative_positions(n, n, position_buckets=cfg.position_buckets,
                                   max_relative_positions=cfg.max_position)   # (n, n) int32
    c2p_rows = jnp.clip(r + cfg.span, 0, cfg.rows - 1)                         # rows of rel_embeddings
    c2p = jnp.take_along_axis(q @ pos_k[: cfg.rows].T, c2p_rows[None], axis=-1)

Pass the *fallen-back* ``max_relative_positions`` (:attr:`DebertaRelativeConfig.max_position`):
like ``build_relative_position``, this function uses exactly the ``max_relative_positions`` it is
given, and a value ``< 1`` turns the buckets off.

transformers' position-to-content term with ``query_len != key_len`` calls ``build_rpos`` with
``max_relative_positions`` and ``position_buckets`` swapped (positional arguments in the wrong
order); this function follows ``build_relative_position`` itself, not that call.

No relative position is out of range for the model (the clamp above saturates); the inputs
are bounded only so the bucket table covers them: lengths and positions below ``2**20``.

>>> deberta_relative_positions(2, 3, position_buckets=-1, max_relative_positions=-1).tolist()
[[0, -1, -2], [1, 0, -1]]
>>> deberta_relative_positions(1, 600, position_buckets=256, max_relative_positions=512)[0, ::128].tolist()
[0, -128, -192, -229, -256]
"""

from __future__ import annotations

import functools
from typing import Literal

import jax
import jax.numpy as jnp
import numpy as np

from flax_posenc.deberta_config import MAX_COUNT, check_log_buckets, log_bucket_table
from flax_posenc.overflow import Limit, OverflowPolicy, guard_positions

#: the positions a traced ``query_positions``/``key_positions`` may hold (the bucket table's range).
POSITION_LIMIT = Limit(MAX_COUNT, name="deberta relative positions")


def _static_length(name: str, value: object) -> int:
    if not isinstance(value, (int, np.integer)) or isinstance(value, (bool, np.bool_)):
        raise TypeError(f"deberta_relative_positions: expected a static int {name}, found {value!r}")
    if not 0 <= value <= MAX_COUNT:
        raise ValueError(f"deberta_relative_positions: expected 0 <= {name} <= {MAX_COUNT}, found {value}")
    return int(value)


@functools.partial(jax.jit, static_argnums=(2, 3))
def _relative(q: jax.Array, k: jax.Array, position_buckets: int, max_relative_positions: int) -> jax.Array:
    rel = q[:, None] - k[None, :]
    if position_buckets <= 0:  # the pair was validated: this means "no buckets"
        return rel
    mid = position_buckets // 2
    edges, values = log_bucket_table(position_buckets, max_relative_positions)
    d = jnp.abs(rel)
    index = jnp.searchsorted(jnp.asarray(edges, jnp.int32), d, side="right").astype(jnp.int32) - 1
    far = jnp.take(jnp.asarray(values, jnp.int32), jnp.maximum(index, 0), mode="clip")
    return jnp.where(d <= mid, rel, jnp.sign(rel) * far)


def _positions(
    name: str, positions: jax.typing.ArrayLike | None, length: int, on_overflow: OverflowPolicy
) -> jax.Array:
    if positions is None:
        return jnp.arange(length, dtype=jnp.int32)
    positions = positions if isinstance(positions, jax.Array) else np.asarray(positions)
    if positions.shape != (length,):
        raise ValueError(
            f"deberta_relative_positions: expected {name} of shape ({length},), found shape {tuple(positions.shape)}"
        )
    if not jnp.issubdtype(positions.dtype, jnp.integer):
        raise TypeError(f"deberta_relative_positions: expected integer {name}, found dtype {positions.dtype}")
    guarded, _ = guard_positions(positions, POSITION_LIMIT, on_overflow)  # "error"/"clip": no NaN mask
    return guarded


def deberta_relative_positions(
    query_len: int,
    key_len: int,
    *,
    position_buckets: int,
    max_relative_positions: int,
    query_positions: jax.typing.ArrayLike | None = None,
    key_positions: jax.typing.ArrayLike | None = None,
    on_overflow: Literal["error", "clip"] = "error",
) -> jax.Array:
    """Relative positions ``(query_len, key_len)``: transformers' DeBERTa-v2 ``build_relative_position``.

    ``out[i, j] = r(query_positions[i] - key_positions[j])`` with ``r(x) = x`` when
    ``position_buckets < 1`` or ``max_relative_positions < 1``, else the log bucket
    ``sign(x) * (mid + ceil(log(|x| / mid) / log((M - 1) / mid) * (mid - 1)))`` for
    ``|x| > mid = position_buckets // 2`` (float32 steps, as transformers). Default positions are
    ``0 .. len - 1`` -- exactly ``build_relative_position(query, key, bucket_size=position_buckets,
    max_position=max_relative_positions)[0]``.

    Args:
      query_len, key_len: static lengths, ``0 .. 2**20``.
      position_buckets: ``bucket_size``; ``< 1`` (``-1``): no buckets.
      max_relative_positions: ``max_position``, used as given (no fallback to
        ``max_position_embeddings``: pass :attr:`DebertaRelativeConfig.max_position`).
      query_positions, key_positions: optional ``(query_len,)`` / ``(key_len,)`` integer positions,
        traced or not (a decoding offset, packed sequences, ``vmap`` over a batch of offsets),
        in ``0 .. 2**20 - 1``.
      on_overflow: for traced positions outside that range: ``"error"`` (at run time, through
        :mod:`flax_posenc.overflow`) or ``"clip"``. Known positions are always checked while tracing.

    Returns:
      int32 ``(query_len, key_len)``, unclamped: log buckets grow past ``position_buckets`` at
      distances ``>= max_relative_positions``; the attention clamps ``r + span`` into its
      ``2 * span`` rows.

    Raises:
      TypeError: a length that is not a static int; non-integer positions.
      ValueError: a length outside ``0 .. 2**20``; positions of the wrong shape; a bucket pair
        :func:`~flax_posenc.deberta_config.check_log_buckets` rejects; ``on_overflow="fill"``.
      PositionLimitError: known positions outside ``0 .. 2**20 - 1``.

    >>> import jax, jax.numpy as jnp
    >>> f = jax.jit(lambda t: deberta_relative_positions(
    ...     1, 4, position_buckets=8, max_relative_positions=16, query_positions=t[None]))
    >>> f(jnp.int32(6)).tolist()                                    # a query at 6, keys 0..3
    [[5, 5, 4, 3]]
    """
    q_len = _static_length("query_len", query_len)
    k_len = _static_length("key_len", key_len)
    if on_overflow not in ("error", "clip"):
        raise ValueError(f"deberta_relative_positions: expected on_overflow 'error' or 'clip', found {on_overflow!r}")
    buckets = check_log_buckets(position_buckets, max_relative_positions, "deberta_relative_positions")
    q = _positions("query_positions", query_positions, q_len, on_overflow)
    k = _positions("key_positions", key_positions, k_len, on_overflow)
    if buckets:
        return _relative(q, k, int(position_buckets), int(max_relative_positions))
    return _relative(q, k, -1, -1)


__all__ = ["POSITION_LIMIT", "deberta_relative_positions"]
