"""Move cached RoPE keys to new positions exactly: :func:`rotate_keys` (context shift, LongRoPE's switch).

A key rotated by RoPE at position ``p`` is ``a * R(p w) k`` (``R`` a rotation of each pair of
rotated dims, ``w`` the inverse frequencies, ``a`` the scheme's attention factor). Turning it by
``R((p + d) w' - p w)`` gives the key RoPE would have made at position ``p + d`` with frequencies
``w'``, without the un-rotated key: what a serving engine needs when it drops old tokens from a
full cache and moves the rest back (llama.cpp's ``llama_kv_cache_seq_add``, StreamingLLM's
attention sinks), or when LongRoPE switches from its short to its long factors (or dynamic NTK
grows its base) and the cached keys should follow instead of a new prefill.

Exactness. The correcting angle is never formed as a float32 product: with unchanged
frequencies it is ``d * w`` for the integer offset ``d``, whose ``cos``/``sin`` come from the
library's exact-angle arithmetic (:func:`flax_posenc.sinusoidal.exact_cos_sin`: float64-exact
digit tables composed on device, within 2e-6 of float64 for ``|d| < 2**24``); with changed
frequencies (``to_rope=``, or a new ``to_seq_len`` for ``dynamic``/``longrope``) the two angles
``(p + d) w'`` and ``p w`` are each exact and subtracted by the angle-difference formulas. Known
positions and offsets (a few of them) are computed in float64 on the host and rounded once. The
result equals RoPE applied at ``p + d`` to within float32 rounding (tested against float64
numpy, under ``jit``, ``vmap`` and ``scan``); the float32 ``cos(d * w)`` others use is off by
``~d * 6e-8`` radians (``docs/figures/rotate_keys_error.png``).

What cannot be moved. ALiBi (its bias depends on the query-key distance only: cached keys need
nothing) and NoPE (``rope=None``) are the identity (Llama 4's NoPE temperature tuning scales
queries only, so its cached keys need nothing either). A learned absolute table is added to the
input of the first layer, so the keys of every layer depend on it non-linearly: refused, with one
line (run a new prefill).

What a moved key is not. Each layer's key is moved exactly; but a layer's key also depends on
the hidden state below it, which attention computed with the tokens (and angles) of its time:
after a context shift or a LongRoPE switch, the keys of layer 0 equal a new prefill's, those of
deeper layers keep what the earlier context made of them (llama.cpp and StreamingLLM accept
this; ``docs/serving.md`` measures it).

MLA (DeepSeek V2/V3): only the decoupled rope head ``k_pe`` (``qk_rope_head_dim`` wide, one
head) carries positions; the compressed ``kv`` latent is position-free. Move ``k_pe`` alone with
the layer's :class:`~flax_posenc.RopeConfig` (``head_dim=qk_rope_head_dim``).

>>> import jax.numpy as jnp
>>> import flax_posenc as fp
>>> cfg = fp.RopeConfig(head_dim=8, max_position_embeddings=64)
>>> k = fp.apply_rope(jnp.ones((1, 4, 2, 8)), cfg, start=10)         # keys at positions 10..13
>>> moved = fp.rotate_keys(k, -10, cfg, positions=jnp.arange(10, 14))  # now at 0..3
>>> bool(jnp.allclose(moved, fp.apply_rope(jnp.ones((1, 4, 2, 8)), cfg), atol=1e-6))
True
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from flax_posenc import overflow
from flax_posenc.alibi_config import AlibiConfig
from flax_posenc.mrope_config import MRopeConfig, section_components
from flax_posenc.rope import apply_rotary, limit_name
from flax_posenc.rope_config import RopeConfig, rope_inverse_frequencies
from flax_posenc.sinusoidal import HOST_CONSTANT_BYTES, exact_cos_sin

__all__ = ["rotate_keys"]

_INT32_MAX = 2**31 - 1


def _limit(rope: RopeConfig) -> overflow.Limit:
    """Positions ``0 .. limit - 1`` (int32 positions when the config declares no limit)."""
    if rope.limit is not None:
        return overflow.Limit(rope.limit, name=limit_name(rope))
    return overflow.Limit(_INT32_MAX, name=f"{limit_name(rope)} (int32 positions)")


def _same_shape(rope: RopeConfig, target: RopeConfig) -> None:
    mine = (rope.head_dim, rope.rotary_dim, rope.layout)
    theirs = (target.head_dim, target.rotary_dim, target.layout)
    if mine != theirs:
        raise ValueError(
            "to_rope: expected the keys' shape of rotation (head_dim, rotary_dim, layout) "
            f"{mine}, got {theirs}; keys rotate only between frequency sets of one layout"
        )


def _host_max(positions) -> int | None:
    return None if overflow.is_traced(positions) else int(np.max(np.asarray(positions))) + 1


def _frequencies(rope: RopeConfig, seq_len, positions, argument: str) -> tuple[np.ndarray, float]:
    """``rope``'s float64 inverse frequencies and attention factor at ``seq_len`` (``max + 1`` of
    known positions by default, as :func:`flax_posenc.rotary_cos_sin`)."""
    if rope.needs_length and seq_len is None:
        seq_len = _host_max(positions)
        if seq_len is None:
            raise ValueError(
                f"{argument}: rope_type {rope.rope_type!r} depends on the sequence length and the positions are "
                f"traced; pass {argument}= (a Python int: the length the keys were / will be rotated at)"
            )
    if seq_len is not None and (isinstance(seq_len, bool) or not isinstance(seq_len, (int, np.integer))):
        raise TypeError(f"{argument}: expected a Python int, got {type(seq_len).__name__}")
    return rope_inverse_frequencies(rope, seq_len=None if seq_len is None else int(seq_len))


def _as_positions(value, name: str):
    """An integer array (numpy when known, the tracer otherwise); ``TypeError`` naming ``name``."""
    if not overflow.is_traced(value) and not isinstance(value, jax.Array):
        value = np.asarray(value)
    if not jnp.issubdtype(value.dtype, jnp.integer):
        raise TypeError(f"{name}: expected integer positions, got dtype {value.dtype}")
    return value


def _turn(new, old, w_new: np.ndarray, w_old: np.ndarray, same: bool, limit: overflow.Limit):
    """``cos``/``sin`` of ``new * w_new - old * w_old``, ``(..., n)`` float32, from exact angles."""
    if not overflow.is_traced(new) and not overflow.is_traced(old):
        host_new, host_old = np.asarray(new, np.float64), np.asarray(old, np.float64)
        if 2 * 4 * np.broadcast(host_new, host_old).size * w_new.size <= HOST_CONSTANT_BYTES:
            angle = host_new[..., None] * w_new - host_old[..., None] * w_old  # float64, rounded once
            return jnp.asarray(np.cos(angle).astype(np.float32)), jnp.asarray(np.sin(angle).astype(np.float32))
    if same:  # the integer offset's angle: one exact rotation
        top = limit.highest
        return exact_cos_sin(jnp.asarray(new) - jnp.asarray(old), w_new, bounds=(-top, top))
    c1, s1 = exact_cos_sin(jnp.asarray(new), w_new, bounds=(0, limit.highest))
    c0, s0 = exact_cos_sin(jnp.asarray(old), w_old, bounds=(0, limit.highest))
    return c1 * c0 + s1 * s0, s1 * c0 - c1 * s0  # cos(a - b), sin(a - b)


def rotate_keys(
    k: jax.typing.ArrayLike,
    delta: jax.typing.ArrayLike,
    rope: RopeConfig | MRopeConfig | AlibiConfig | int | None,
    *,
    positions: jax.typing.ArrayLike | None = None,
    to_rope: RopeConfig | MRopeConfig | None = None,
    seq_len: int | None = None,
    to_seq_len: int | None = None,
    on_overflow: overflow.OverflowPolicy = "error",
    seq_axis: int = -3,
) -> jax.Array:
    """Cached keys rotated by ``rope`` at ``positions``, moved to ``positions + delta`` (exactly).

    Equal, within float32 rounding, to RoPE applied at ``positions + delta`` (with ``to_rope``'s
    frequencies when given) to the keys before rotation; see the module docstring for how the
    angle is kept exact. Functional: works under ``jit``, ``vmap`` and ``scan``, with ``delta``
    and ``positions`` known or traced.

    Args:
      k: ``(..., seq, heads, head_dim)`` keys (``seq_axis=-3``, Flax's layout) or ``(..., heads,
        seq, head_dim)`` (``seq_axis=-2``, Hugging Face's), already rotated by ``rope`` at
        ``positions``. MLA: the rope head ``k_pe`` alone.
      delta: integer offset, broadcast against ``positions`` (numpy rules): a scalar for every
        key, ``(batch, 1)`` per row, ``(..., seq)`` per key; known or traced. Negative moves keys
        back (a context shift), positive forward. M-RoPE: against the ``(3, ..., seq)``
        positions (a scalar moves all three components; ``(3, 1, 1)`` one offset per component).
      rope: the keys' :class:`~flax_posenc.RopeConfig` (or a ``head_dim``), or an
        :class:`~flax_posenc.MRopeConfig` (M-RoPE, per section). ``None`` (NoPE) and an
        :class:`~flax_posenc.AlibiConfig` (ALiBi's bias follows the distance): ``k`` unchanged.
      positions: the keys' current positions, ``(..., seq)`` integers (M-RoPE: ``(3, ..., seq)``),
        broadcast against ``k``'s leading axes; default ``0 .. seq - 1``.
      to_rope: the frequencies to move the keys to (same ``head_dim``, rotary width and layout):
        a change of angles, not only a shift. Default ``rope``.
      seq_len, to_seq_len: the sequence length the keys were rotated at and the one they move
        to, read only by ``dynamic`` and ``longrope`` (whose frequencies depend on it: LongRoPE's
        switch is ``seq_len <= original_max_position_embeddings < to_seq_len``). Default: ``max +
        1`` of known positions (``positions``, ``positions + delta``), as
        :func:`flax_posenc.rotary_cos_sin`; traced positions need them given (Python ints).
        ``to_seq_len`` defaults to ``seq_len`` when the new positions are traced.
      on_overflow: the policy for traced positions outside ``0 .. limit - 1`` (see
        :mod:`flax_posenc.overflow`); known ones always raise while tracing.
      seq_axis: ``-3`` or ``-2``, the sequence axis of ``k``.

    Returns:
      An array like ``k`` (float32 arithmetic, cast back to ``k.dtype``); the un-rotated dims of
      a partial rotary head pass through.

    Raises:
      PositionLimitError: a known current or new position outside ``0 .. limit - 1`` (the limit
        of ``to_rope`` for the new ones; int32 positions when there is none), while tracing;
        traced ones at run time under ``on_overflow="error"``.
      ValueError: ``k`` not shaped for ``rope`` (head_dim), ``to_rope`` of another shape of
        rotation, shapes that do not broadcast, ``dynamic``/``longrope`` with traced positions
        and no ``seq_len``.
      TypeError: a learned absolute table or another encoding that cannot be moved; non-integer
        positions or ``delta``; non-floating ``k``.

    >>> import jax, jax.numpy as jnp
    >>> import flax_posenc as fp
    >>> cfg = fp.RopeConfig(head_dim=4, max_position_embeddings=8)
    >>> fp.position_errors(jax.jit(lambda k, d: fp.rotate_keys(k, d, cfg)))(jnp.ones((1, 3, 1, 4)), -1)  # 0 -> -1
    Traceback (most recent call last):
    ...
    flax_posenc.errors.PositionLimitError: default RoPE (max_position_embeddings 8) holds 8 positions (0..7); asked for position -1, below the first row
    >>> fp.rotate_keys(jnp.ones((1, 3, 1, 4)), 6, cfg)                                # 2 -> 8
    Traceback (most recent call last):
    ...
    flax_posenc.errors.PositionLimitError: default RoPE (max_position_embeddings 8) holds 8 positions (0..7); asked for position 8, 1 past the end
    """
    if rope is None or isinstance(rope, AlibiConfig):
        return jnp.asarray(k)  # NoPE: nothing to move; ALiBi: the bias follows the distance
    if isinstance(rope, (int, np.integer)) and not isinstance(rope, bool):
        rope = RopeConfig.coerce(rope)
    if not isinstance(rope, (RopeConfig, MRopeConfig)):
        raise TypeError(
            f"rope: expected a RopeConfig, an MRopeConfig, an AlibiConfig or None (NoPE), got "
            f"{type(rope).__name__}; keys of a model with a learned or absolute position table depend on it "
            "through every layer and cannot be moved (run a new prefill)"
        )
    overflow.check_policy(on_overflow)
    if seq_axis not in (-3, -2):
        raise ValueError(f"seq_axis: expected -3 ((..., seq, heads, head_dim)) or -2, got {seq_axis!r}")
    k = jnp.asarray(k)
    if not jnp.issubdtype(k.dtype, jnp.floating):
        raise TypeError(f"k: expected floating keys, got dtype {k.dtype}")
    mrope = isinstance(rope, MRopeConfig)
    comp = np.zeros(0, np.int64)  # M-RoPE: the component of each frequency
    src = rope.rope if isinstance(rope, MRopeConfig) else rope
    target: Any = rope if to_rope is None else to_rope
    if mrope != isinstance(target, MRopeConfig):
        raise TypeError(f"to_rope: expected a {type(rope).__name__} like rope, got {type(target).__name__}")
    dst = target.rope if isinstance(target, MRopeConfig) else RopeConfig.coerce(target)
    _same_shape(src, dst)
    if isinstance(rope, MRopeConfig) and isinstance(target, MRopeConfig):
        comp = section_components(rope.mrope_section, interleaved=rope.interleaved_sections, width=src.rotary_dim // 2)
        comp_to = section_components(
            target.mrope_section, interleaved=target.interleaved_sections, width=dst.rotary_dim // 2
        )
        if not np.array_equal(comp, comp_to):
            raise ValueError("to_rope: expected the same M-RoPE sections as rope (the keys' frequency split)")
    if k.ndim < 3 or k.shape[-1] != src.head_dim:
        layout = "(..., seq, heads, {})" if seq_axis == -3 else "(..., heads, seq, {})"
        raise ValueError(
            f"k: expected keys shaped {layout.format(src.head_dim)} (the rope's head_dim {src.head_dim}, rotary "
            f"width {src.rotary_dim}), got {tuple(k.shape)}"
        )
    seq = k.shape[seq_axis]
    if positions is None:
        positions = np.arange(seq, dtype=np.int64)
        if mrope:
            positions = np.broadcast_to(positions, (3, seq))
    old = _as_positions(positions, "positions")
    d = _as_positions(delta, "delta")
    if mrope and (old.ndim < 2 or old.shape[0] != 3):
        raise ValueError(f"positions: expected (3, ..., seq) M-RoPE positions, got shape {tuple(old.shape)}")
    try:
        shape = np.broadcast_shapes(tuple(old.shape), tuple(d.shape))
    except ValueError:
        raise ValueError(
            f"delta: expected a shape that broadcasts against positions {tuple(old.shape)} (a scalar, (batch, 1) "
            f"per row, (..., seq) per key), got {tuple(d.shape)}"
        ) from None
    if not shape or shape[-1] not in (1, seq):
        raise ValueError(f"positions: expected (..., seq) with seq {seq} (k's axis {seq_axis}), got shape {shape}")
    traced = overflow.is_traced(old) or overflow.is_traced(d)
    new: Any
    old_g: Any
    new_g: Any
    if traced:
        new = jnp.asarray(old, jnp.int32) + jnp.asarray(d, jnp.int32)
    else:
        new = np.asarray(old, np.int64) + np.asarray(d, np.int64)
    w_old, a_old = _frequencies(src, seq_len, old, "seq_len")
    if to_seq_len is None and traced:
        to_seq_len = seq_len
    w_new, a_new = _frequencies(dst, to_seq_len, new, "to_seq_len")
    src_limit, dst_limit = _limit(src), _limit(dst)
    old_g, invalid_old, check_old = overflow.guard_indices(old, src_limit, on_overflow)
    new_g, invalid_new, check_new = overflow.guard_indices(new, dst_limit, on_overflow)
    if not traced:  # known: checked on the host above; keep them on the host (float64 path)
        old_g, new_g = np.asarray(old, np.int64), np.asarray(new, np.int64)
    same = np.array_equal(w_old, w_new)
    bound = overflow.Limit(max(src_limit.rows, dst_limit.rows), name=dst_limit.name)
    cos, sin = _turn(new_g, old_g, w_new, w_old, same, bound)
    if mrope:  # frequency j turns with the component its section names (an exact selection)
        cos = jnp.where(comp == 0, cos[0], jnp.where(comp == 1, cos[1], cos[2]))
        sin = jnp.where(comp == 0, sin[0], jnp.where(comp == 1, sin[1], sin[2]))
    if a_new != a_old:  # the keys carry a_old; they should carry a_new
        ratio = np.float32(a_new / a_old)
        cos, sin = cos * ratio, sin * ratio
    for invalid in (invalid_old, invalid_new):  # "fill": NaN keys where a position is out of range
        if invalid is not None:
            invalid = jnp.broadcast_to(invalid, shape).any(axis=0) if mrope else jnp.broadcast_to(invalid, shape)
            cos, sin = overflow.fill_invalid(cos, invalid), overflow.fill_invalid(sin, invalid)
    for check in (check_old, check_new):
        cos = overflow.keep_check(cos, check)
    if seq_axis == -3:  # (..., seq, half) -> (..., seq, 1, half): broadcast over heads
        cos, sin = cos[..., None, :], sin[..., None, :]
    elif cos.ndim > 2:
        cos, sin = cos[..., None, :, :], sin[..., None, :, :]
    return apply_rotary(k, cos, sin, layout=src.layout)
