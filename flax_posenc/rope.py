"""Rotary position embeddings (RoPE, Su et al. 2021), exact at long range, matching Hugging Face.

RoPE rotates each pair of a query's (and key's) dims by the angle ``p * w_i``, so the score
``q_p . k_s`` depends on the positions only through the offset ``p - s``. Two layouts pair the
dims differently (both are offered, see :func:`apply_rotary`):

- ``layout="half"`` (GPT-NeoX, Llama, Mistral, Qwen2, Falcon): dim ``i`` with dim ``i + r/2``;
- ``layout="interleaved"`` (GPT-J, the RoFormer paper): dim ``2i`` with dim ``2i + 1``;
- ``layout="half_reversed"`` (nanochat): the half pairs, each turned by minus its angle;

where ``r = rotary_dim = int(head_dim * partial_rotary_factor)``; the rotated dims come first,
the rest pass through (GPT-NeoX rotates 25%).

Frequencies and scaling (:class:`~flax_posenc.rope_config.RopeConfig`,
:func:`rope_inverse_frequencies`): ``w_i = rope_theta ** (-2i / r)``, then one of Hugging Face's
context-extension schemes, with its config parameter names: ``linear`` (position
interpolation: ``w / factor``), ``dynamic`` (NTK: the base grows with the sequence length
past ``max_position_embeddings``), ``yarn`` (per-frequency blend of interpolation and
extrapolation, plus an attention factor that multiplies ``cos`` and ``sin``), ``llama3``
(Llama 3.1's smoothed band) and ``longrope`` (per-frequency factors, short or long).

Precision. :func:`rotary_cos_sin` never forms a large float32 angle: the inverse frequencies
are computed in float64 on the host and the angles are composed on device from at most four
digits of the position, fewer below ``max_position_embeddings`` (the exact-angle arithmetic of
:func:`flax_posenc.sinusoidal.exact_cos_sin`).
Every ``cos``/``sin`` is within 2e-6 of the float64 value for positions below ``2**24``
(measured: ~4e-7), where the float32 ``cos(p * w)`` that transformers computes is off by ~1
near ``2**24`` (and by ~1e-3 at 8192).

>>> import jax.numpy as jnp
>>> import flax_posenc as fp
>>> cfg = fp.RopeConfig(head_dim=8)
>>> cos, sin = fp.rotary_cos_sin(jnp.arange(4), cfg)
>>> cos.shape
(4, 4)
>>> q = jnp.ones((4, 2, 8))                       # (seq, heads, head_dim)
>>> fp.apply_rotary(q, cos[:, None, :], sin[:, None, :]).shape
(4, 2, 8)
"""

from __future__ import annotations

from typing import cast

import jax
import jax.numpy as jnp
import numpy as np

from flax_posenc import limits, overflow
from flax_posenc.limits import rope_limit_reason
from flax_posenc.rope_config import (
    ROPE_LAYOUTS,
    ROPE_TYPES,
    RopeConfig,
    RopeLayout,
    rope_inverse_frequencies,
)
from flax_posenc.sinusoidal import HOST_CONSTANT_BYTES, exact_cos_sin, turn_cos_sin

__all__ = [
    "ROPE_LAYOUTS",
    "ROPE_TYPES",
    "RopeConfig",
    "apply_rope",
    "apply_rope_qk",
    "apply_rotary",
    "rope_inverse_frequencies",
    "rotary_cos_sin",
]


def limit_name(config: RopeConfig) -> str:
    """``"llama3 RoPE (max_position_embeddings 131072)"``: the limit's name in error messages, in
    the words of the command line's ``check`` (:func:`flax_posenc.limits.rope_limit_reason`).

    >>> limit_name(RopeConfig(head_dim=8, rope_type="linear", factor=2.0, max_position_embeddings=16))
    'linear RoPE (the larger of max_position_embeddings 16 and scaled 2 x 16 = 32)'
    """
    reason = rope_limit_reason(
        config.max_position_embeddings,
        config.scaled_limit,
        config.effective_factor,
        config.trained_length,
        length_field=config.length_field,
    )
    return limits.limit_name(f"{config.rope_type} RoPE", reason)


def default_positions(length: int, start: int | jax.Array = 0):
    """``start .. start + length - 1``: a host (numpy) array for a static ``start``, so the limit
    is checked while tracing; int32 on device for a traced one.

    >>> default_positions(3, 5)
    array([5, 6, 7])
    """
    if overflow.is_traced(start):
        return jnp.arange(length, dtype=jnp.int32) + start
    return np.arange(int(start), int(start) + length, dtype=np.int64)


def position_limit(config: RopeConfig) -> overflow.Limit | None:
    """The :class:`~flax_posenc.overflow.Limit` of ``config`` (``None``: no limit).

    >>> position_limit(RopeConfig(head_dim=8, max_position_embeddings=16)).rows
    16
    >>> position_limit(RopeConfig(head_dim=8)) is None
    True
    """
    return None if config.limit is None else overflow.Limit(config.limit, name=limit_name(config))


def rotary_cos_sin(
    positions: jax.typing.ArrayLike,
    config: RopeConfig | int,
    *,
    seq_len: int | None = None,
    on_overflow: overflow.OverflowPolicy = "error",
    dtype: jax.typing.DTypeLike = jnp.float32,
) -> tuple[jax.Array, jax.Array]:
    """``cos`` and ``sin`` of the rotation angles ``p * w_i``, times the attention factor.

    Known positions (default positions, a static ``start``, a concrete array: a prefill) are
    checked while tracing. When ``cos`` and ``sin`` take at most
    :data:`~flax_posenc.sinusoidal.HOST_CONSTANT_BYTES` (64 KiB: a decode step, a short prompt)
    they are computed in float64 on the host and rounded once to ``dtype`` (a constant under
    ``jit``); longer ones on device from the angle in fixed-point turns
    (:func:`~flax_posenc.sinusoidal.turn_cos_sin`, within 1e-7 of float64 below ``2**24``) and
    positions that form runs become an iota, so the program's size and compile time do not grow
    with the sequence. Traced positions (decoding) use the exact-angle arithmetic of the module
    docstring: within 2e-6 of float64 for every position below ``2**24``, then rounded once to
    ``dtype``.
    Like Hugging Face's rotary embedding classes, ``cos`` and ``sin`` are multiplied by the
    scheme's attention factor (YaRN, LongRoPE; 1 otherwise).

    Args:
      positions: integer array, any shape (``(seq,)``, ``(batch, seq)``, ...); traced or not.
      config: a :class:`RopeConfig`, or a ``head_dim`` for plain RoPE with ``rope_theta=10000``.
      seq_len: current sequence length, read only by ``dynamic`` and ``longrope`` (whose
        frequencies depend on it). Default: ``max(positions) + 1`` for concrete positions, as
        transformers does; traced positions need it given (a Python int).
      on_overflow: when ``config.limit`` is set, the policy for traced positions outside
        ``0 .. limit - 1``: ``"error"`` (fails the call at run time, see :mod:`flax_posenc.overflow`),
        ``"clip"`` or ``"fill"`` (NaN). Known positions past the limit always raise, while tracing.
      dtype: output dtype.

    Returns:
      ``(cos, sin)``, each of shape ``positions.shape + (rotary_dim // 2,)``.

    Raises:
      PositionLimitError: a known position outside ``0 .. config.limit - 1``.
      TypeError: ``positions`` is not an integer array.
      ValueError: ``dynamic``/``longrope`` with traced positions and no ``seq_len``.

    >>> import jax.numpy as jnp
    >>> import flax_posenc as fp
    >>> cos, sin = fp.rotary_cos_sin(jnp.array([0, 1]), 4)
    >>> [round(float(x), 6) for x in sin[1]]
    [0.841471, 0.01]
    >>> fp.rotary_cos_sin(jnp.array([4096]), fp.RopeConfig(head_dim=4, max_position_embeddings=4096))
    Traceback (most recent call last):
    ...
    flax_posenc.errors.PositionLimitError: default RoPE (max_position_embeddings 4096) holds 4096 positions (0..4095); asked for position 4096, 1 past the end
    """
    return _cos_sin(positions, RopeConfig.coerce(config), seq_len=seq_len, on_overflow=on_overflow, dtype=dtype)


def _cos_sin(
    positions: jax.typing.ArrayLike,
    config: RopeConfig,
    *,
    seq_len: int | None,
    on_overflow: overflow.OverflowPolicy,
    dtype: jax.typing.DTypeLike = jnp.float32,
) -> tuple[jax.Array, jax.Array]:
    """:func:`rotary_cos_sin` of a :class:`RopeConfig` (the public functions coerce once, then call this)."""
    overflow.check_policy(on_overflow)
    traced = overflow.is_traced(positions)
    if not traced:
        positions = positions if isinstance(positions, jax.Array) else np.asarray(positions)
    positions = cast("jax.Array | np.ndarray", positions)  # a tracer, or an array
    if not jnp.issubdtype(positions.dtype, jnp.integer):
        raise TypeError(f"positions: expected an integer array, got dtype {positions.dtype}")
    if config.needs_length and seq_len is None:
        if traced:
            raise ValueError(
                f"seq_len: rope_type {config.rope_type!r} depends on the sequence length; pass seq_len= "
                "(a Python int) when positions are traced"
            )
        seq_len = int(np.asarray(positions).max()) + 1 if positions.size else None
    limit = position_limit(config)
    if limit is None:
        limit = overflow.Limit(2**31, name=f"{limit_name(config)} (int32 positions)", signed=True)
    host = None if traced else np.asarray(positions)
    positions, invalid = overflow.guard_positions(positions, limit, on_overflow)
    inv_freq, attention = rope_inverse_frequencies(config, seq_len=seq_len)
    if host is not None and 2 * host.size * inv_freq.size * jnp.dtype(dtype).itemsize <= HOST_CONSTANT_BYTES:
        # a few known positions (a decode step at a static start): float64 on the host, rounded once
        angle = host.astype(np.float64)[..., None] * inv_freq
        scale = np.float64(attention)
        return jnp.asarray((np.cos(angle) * scale).astype(dtype)), jnp.asarray((np.sin(angle) * scale).astype(dtype))
    if host is not None:  # known positions (prefill): from an iota on device, the program does not grow
        cos, sin = turn_cos_sin(positions, inv_freq, bounds=(int(host.min()), int(host.max())))
    else:
        cos, sin = exact_cos_sin(positions, inv_freq, bounds=(limit.lowest, limit.highest))  # the guard's range
    if attention != 1.0:
        cos, sin = cos * np.float32(attention), sin * np.float32(attention)
    return overflow.fill_invalid(cos, invalid).astype(dtype), overflow.fill_invalid(sin, invalid).astype(dtype)


def apply_rotary(
    x: jax.typing.ArrayLike,
    cos: jax.typing.ArrayLike,
    sin: jax.typing.ArrayLike,
    *,
    layout: RopeLayout = "half",
) -> jax.Array:
    """Rotate the first ``2 * cos.shape[-1]`` dims of ``x`` pairwise; the rest pass through.

    ``half`` pairs dim ``i`` with ``i + r/2`` (Hugging Face's ``apply_rotary_pos_emb`` of Llama
    and GPT-NeoX, ``rotate_half``); ``interleaved`` pairs ``2i`` with ``2i + 1`` (GPT-J's
    ``rotate_every_two``). Pair ``i`` turns by the angle whose ``cos``/``sin`` is ``cos[..., i]``/
    ``sin[..., i]``. Computed in float32 (or wider) and cast back to ``x.dtype``.

    Args:
      x: ``(..., head_dim)`` queries or keys.
      cos, sin: ``(..., rotary_dim // 2)`` from :func:`rotary_cos_sin`, broadcastable against
        ``x.shape[:-1]`` (insert the head axis: ``cos[:, :, None, :]`` for ``x`` of shape
        ``(batch, seq, heads, head_dim)``).
      layout: ``"half"``, ``"interleaved"`` or ``"half_reversed"`` (the half pairs turned by
        minus the angle: nanochat's ``rotate_half``, ``cat(x2, -x1)``).

    Returns:
      An array like ``x``.

    Raises:
      ValueError: unknown layout, ``cos``/``sin`` shapes differ, or more rotated dims than ``x`` has.
      TypeError: ``x`` is not a floating array (a rotation of integers would truncate).

    >>> import jax.numpy as jnp
    >>> x = jnp.array([1.0, 0.0, 0.0, 0.0])
    >>> apply_rotary(x, jnp.array([0.0, 1.0]), jnp.array([1.0, 0.0]))   # pair (0, 2) turns 90 degrees
    Array([0., 0., 1., 0.], dtype=float32)
    """
    if layout not in ROPE_LAYOUTS:
        raise ValueError(f"layout: expected one of {ROPE_LAYOUTS}, got {layout!r}")
    x, cos, sin = _floating("x", x), jnp.asarray(cos), jnp.asarray(sin)
    if cos.shape != sin.shape:
        raise ValueError(f"cos and sin: expected the same shape, got {tuple(cos.shape)} and {tuple(sin.shape)}")
    half = cos.shape[-1]
    rot = 2 * half
    if rot > x.shape[-1]:
        raise ValueError(f"x: expected at least {rot} dims to rotate (2 * cos.shape[-1]), got head_dim {x.shape[-1]}")
    compute = jnp.promote_types(x.dtype, jnp.float32)
    xr = x[..., :rot].astype(compute)
    cos, sin = cos.astype(compute), sin.astype(compute)
    if layout == "half_reversed":  # nanochat: rotate_half = cat(x2, -x1), each pair turns by minus the angle
        sin = -sin
    rotated = _rotate_pairs(xr, cos, sin, pair_axis=-1 if layout == "interleaved" else -2).astype(x.dtype)
    if rot == x.shape[-1]:
        return rotated
    return jnp.concatenate([rotated, x[..., rot:]], axis=-1)


def _floating(name: str, x) -> jax.Array:
    """``x`` as an array; ``TypeError`` naming ``name`` unless it is floating (rotated integers truncate)."""
    x = jnp.asarray(x)
    if not jnp.issubdtype(x.dtype, jnp.floating):
        raise TypeError(f"{name}: expected a floating array (queries or keys), got dtype {x.dtype}")
    return x


def _rotate_pairs(x: jax.Array, cos: jax.Array, sin: jax.Array, *, pair_axis: int) -> jax.Array:
    """``(x1 cos - x2 sin, x2 cos + x1 sin)`` for the pairs of ``x`` (``(..., 2 * half)``) laid out
    along ``pair_axis`` of ``x`` viewed as ``(..., 2, half)`` (``-2``: halves) or ``(..., half, 2)``
    (``-1``: interleaved): one multiply-add with ``[cos|cos]`` and ``[-sin|sin]`` against ``x`` and
    its pair-swapped view, no concatenation (XLA fuses it into one loop; ~0.6x the time of the
    concatenated form on CPU, within 1 float32 rounding of it, see benchmarks/HISTORY.md)."""
    half = cos.shape[-1]
    view = (2, half) if pair_axis == -2 else (half, 2)
    xs = x.reshape(*x.shape[:-1], *view)
    both_cos = jnp.stack([cos, cos], axis=pair_axis)
    signed_sin = jnp.stack([-sin, sin], axis=pair_axis)
    return (xs * both_cos + jnp.flip(xs, pair_axis) * signed_sin).reshape(x.shape)


def apply_rope(
    x: jax.typing.ArrayLike,
    config: RopeConfig | int,
    positions: jax.typing.ArrayLike | None = None,
    *,
    start: int | jax.Array = 0,
    seq_len: int | None = None,
    on_overflow: overflow.OverflowPolicy = "error",
    seq_axis: int = -3,
) -> jax.Array:
    """Rotate queries or keys: ``(..., seq, heads, head_dim)`` (Flax) or ``(..., heads, seq, head_dim)``.

    The functional core of ``RotaryEmbedding`` (NNX and Linen).

    Args:
      x: ``(..., seq, heads, head_dim)`` with ``seq_axis=-3`` (Flax's attention layout, the
        default), or ``(..., heads, seq, head_dim)`` with ``seq_axis=-2`` (Hugging Face's).
      config: :class:`RopeConfig` (its ``layout`` is used) or a ``head_dim``.
      positions: ``(seq,)`` or ``(..., seq)`` integer positions (the leading axes those of
        ``x`` before the sequence and head axes); default ``start + arange(seq)``. Packed
        sequences: ``positions=fp.packed_positions(segment_ids)``.
      start: first position when ``positions`` is not given (tokens already in the cache):
        a static int is checked while tracing, a traced one at run time.
      seq_len, on_overflow: see :func:`rotary_cos_sin`; with default positions and a static
        ``start``, ``seq_len`` defaults to ``start + seq``.
      seq_axis: ``-3`` or ``-2``, the sequence axis of ``x``.

    Returns:
      An array like ``x``.

    Raises:
      PositionLimitError: a known position past ``config.limit`` (while tracing).

    >>> import jax, jax.numpy as jnp
    >>> import flax_posenc as fp
    >>> cfg = fp.RopeConfig(head_dim=8, max_position_embeddings=16)
    >>> jax.jit(lambda q: apply_rope(q, cfg))(jnp.ones((2, 5, 3, 8))).shape
    (2, 5, 3, 8)
    >>> apply_rope(jnp.ones((2, 3, 17, 8)), cfg, seq_axis=-2)     # (batch, heads, seq, head_dim)
    Traceback (most recent call last):
    ...
    flax_posenc.errors.PositionLimitError: default RoPE (max_position_embeddings 16) holds 16 positions (0..15); asked for position 16, 1 past the end
    """
    config = RopeConfig.coerce(config)
    x = _floating("x", x)
    cos, sin = _cos_sin_for(
        x, config, positions, start=start, seq_len=seq_len, on_overflow=on_overflow, seq_axis=seq_axis
    )
    return apply_rotary(x, cos, sin, layout=config.layout)


def apply_rope_qk(
    q: jax.typing.ArrayLike,
    k: jax.typing.ArrayLike,
    config: RopeConfig | int,
    positions: jax.typing.ArrayLike | None = None,
    *,
    start: int | jax.Array = 0,
    seq_len: int | None = None,
    on_overflow: overflow.OverflowPolicy = "error",
    seq_axis: int = -3,
) -> tuple[jax.Array, jax.Array]:
    """Rotate queries and keys at the same positions with one ``cos``/``sin`` (Hugging Face's
    ``apply_rotary_pos_emb(q, k, cos, sin)``); ``q`` and ``k`` may differ in head count (GQA).

    Arguments as :func:`apply_rope`; returns ``(q_rotated, k_rotated)``.

    >>> import jax.numpy as jnp
    >>> q, k = apply_rope_qk(jnp.ones((1, 4, 8, 16)), jnp.ones((1, 4, 2, 16)), 16)
    >>> q.shape, k.shape
    ((1, 4, 8, 16), (1, 4, 2, 16))
    """
    config = RopeConfig.coerce(config)
    q, k = _floating("q", q), _floating("k", k)
    if q.ndim >= 3 and k.ndim >= 3 and q.shape[seq_axis] != k.shape[seq_axis]:
        raise ValueError(
            f"q and k: expected the same sequence length on axis {seq_axis}, got shapes {tuple(q.shape)} and {tuple(k.shape)}"
        )
    cos, sin = _cos_sin_for(
        q, config, positions, start=start, seq_len=seq_len, on_overflow=on_overflow, seq_axis=seq_axis
    )
    return apply_rotary(q, cos, sin, layout=config.layout), apply_rotary(k, cos, sin, layout=config.layout)


def _cos_sin_for(x, config: RopeConfig, positions, *, start, seq_len, on_overflow, seq_axis: int):
    """``cos``/``sin`` shaped to broadcast against ``x`` laid out with ``seq_axis``."""
    if seq_axis not in (-3, -2):
        raise ValueError(
            f"seq_axis: expected -3 ((..., seq, heads, head_dim)) or -2 ((..., heads, seq, head_dim)), got {seq_axis!r}"
        )
    shape = "(..., seq, heads, {0})" if seq_axis == -3 else "(..., heads, seq, {0})"
    if x.ndim < 3 or x.shape[-1] != config.head_dim:
        raise ValueError(f"x: expected shape {shape.format(config.head_dim)}, got {tuple(x.shape)}")
    if positions is None:
        positions = default_positions(x.shape[seq_axis], start)
        if seq_len is None and not overflow.is_traced(start):
            seq_len = int(start) + x.shape[seq_axis]
    cos, sin = _cos_sin(positions, config, seq_len=seq_len, on_overflow=on_overflow)
    if seq_axis == -3:  # (..., seq, half) -> (..., seq, 1, half): broadcast over heads
        return cos[..., None, :], sin[..., None, :]
    if cos.ndim > 2:  # (..., seq, half) -> (..., 1, seq, half): broadcast over heads
        return cos[..., None, :, :], sin[..., None, :, :]
    return cos, sin
