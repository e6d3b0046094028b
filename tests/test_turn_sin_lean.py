"""The lean ``turn_sin`` of issue 38 (compile time) computes the same bits as the program before it.

``turn_sin`` computes its values once (the lane of zeros of its reduction is padded onto the result)
and, given known ``bounds``, the negative-position correction and the products of a zero high
half. :func:`_turn_sin_before` is a frozen copy of the program before that change (commit 40105b1);
every value must be bit-for-bit the same, on RoPE's Llama-3.1 frequencies and a sinusoid's.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import LLAMA31
from jax import lax

import flax_posenc as fp
from flax_posenc.sinusoid_math import frequency_turns, sinusoidal_frequencies
from flax_posenc.sinusoidal import _RAD_HI, _RAD_LO, turn_cos_sin, turn_sin


def _turn_sin_before(positions, frequencies, quarter_turns=0):
    """``turn_sin`` as of commit 40105b1 (two lanes, or-reduced), verbatim but for comments."""
    w = np.asarray(frequencies, dtype=np.float64).reshape(-1)
    quarters = np.broadcast_to(np.asarray(quarter_turns, dtype=np.int64), w.shape) % 4
    high, low = (np.stack([words, np.zeros_like(words)]) for words in frequency_turns(w))
    quarters = np.stack([quarters, np.zeros_like(quarters)])
    p = jnp.asarray(positions)
    shape = (*p.shape, 2, w.shape[0])  # lanes next to last: XLA CPU reduces them fastest
    last = (len(shape) - 2, len(shape) - 1)

    def columns(c):  # a (2, n) host uint32 constant, broadcast over the positions
        return lax.broadcast_in_dim(np.ascontiguousarray(c, dtype=np.uint32), shape, last)

    u = lax.broadcast_in_dim(lax.bitcast_convert_type(p.astype(jnp.int32), jnp.uint32), shape, tuple(range(p.ndim)))
    sixteen = np.uint32(16)
    u0, u1 = lax.bitwise_and(u, np.uint32(0xFFFF)), lax.shift_right_logical(u, sixteen)
    l0, l1 = columns(low & np.uint32(0xFFFF)), columns(low >> np.uint32(16))
    cross = lax.add(
        lax.shift_right_logical(lax.mul(u1, l0), sixteen), lax.shift_right_logical(lax.mul(u0, l1), sixteen)
    )
    sign_mask = lax.bitcast_convert_type(
        lax.shift_right_arithmetic(lax.bitcast_convert_type(u, jnp.int32), np.int32(31)), jnp.uint32
    )
    top = lax.add(lax.mul(u, columns(high)), lax.add(lax.mul(u1, l1), cross))
    top = lax.sub(top, lax.bitwise_and(columns(low), sign_mask))
    q = lax.add(top, columns(quarters.astype(np.uint32) << np.uint32(30)))
    r = lax.bitwise_and(q, np.uint32(0x3FFFFFFF))
    odd = lax.ne(lax.bitwise_and(q, np.uint32(1 << 30)), np.uint32(0))
    r = lax.bitcast_convert_type(lax.select(odd, lax.sub(np.uint32(1 << 30), r), r), jnp.int32)
    coarse = lax.convert_element_type(r, jnp.float32)  # r <= 2**30: rounded to 24 bits
    fine = lax.convert_element_type(lax.sub(r, lax.convert_element_type(coarse, jnp.int32)), jnp.float32)
    x = lax.add(lax.mul(coarse, _RAD_HI), lax.add(lax.mul(coarse, _RAD_LO), lax.mul(fine, _RAD_HI)))
    sign = lax.bitwise_and(q, np.uint32(1 << 31))  # quadrants 2 and 3: negative
    bits = lax.bitwise_xor(lax.bitcast_convert_type(lax.sin(x), jnp.uint32), sign)
    return lax.bitcast_convert_type(lax.reduce(bits, np.uint32(0), lax.bitwise_or, (len(shape) - 2,)), jnp.float32)


def _bits(a) -> np.ndarray:
    return np.asarray(a).view(np.uint32)


def _both(positions, w, quarters, bounds):
    new = jax.jit(lambda p: turn_sin(p, w, quarters, bounds=bounds))(positions)
    old = jax.jit(lambda p: _turn_sin_before(p, w, quarters))(positions)
    return _bits(new), _bits(old)


ROPE_W = fp.rope_inverse_frequencies(LLAMA31)[0]
SIN_W = sinusoidal_frequencies(768)


@pytest.mark.parametrize("quarter", [0, 1])
@pytest.mark.parametrize(
    "positions",
    [np.arange(131072), np.arange(65536), np.arange(2**24 - 4096, 2**24)],
    ids=["0..131071", "0..65535 (no high half)", "near 2**24"],
)
def test_known_runs_give_the_same_bits(positions, quarter):
    pos = jnp.asarray(positions, jnp.int32)
    new, old = _both(pos, ROPE_W, quarter, (int(positions.min()), int(positions.max())))
    np.testing.assert_array_equal(new, old)


@pytest.mark.parametrize("w", [ROPE_W, SIN_W], ids=["llama3.1 rope", "sinusoid 768"])
def test_random_int32_positions_give_the_same_bits(w):
    rng = np.random.default_rng(38)
    host = np.concatenate([[-(2**31), -1, 0, 1, 2**16 - 1, 2**16, 2**31 - 1], rng.integers(-(2**31), 2**31, 20000)])
    pos = jnp.asarray(host, jnp.int32)
    quarters = np.arange(w.shape[0]) % 4  # every phase
    new, old = _both(pos, w, quarters, (-(2**31), 2**31 - 1))  # default bounds: the full program
    np.testing.assert_array_equal(new, old)
    nonneg = np.abs(host[host > -(2**31)])
    new, old = _both(jnp.asarray(nonneg, jnp.int32), w, quarters, (0, int(nonneg.max())))
    np.testing.assert_array_equal(new, old)


def test_public_paths_give_the_same_bits():
    """``rotary_cos_sin`` on 131072 known positions and ``sinusoidal_encoding`` on 40,000: the
    library's own calls (with the bounds of the known positions) against the program before."""
    cos, sin = jax.jit(lambda: fp.rotary_cos_sin(np.arange(131072), LLAMA31))()
    pos = jnp.arange(131072, dtype=jnp.int32)
    old_cos, old_sin = jax.jit(lambda p: (_turn_sin_before(p, ROPE_W, 1), _turn_sin_before(p, ROPE_W, 0)))(pos)
    np.testing.assert_array_equal(_bits(cos), _bits(old_cos))
    np.testing.assert_array_equal(_bits(sin), _bits(old_sin))
    enc = jax.jit(lambda: fp.sinusoidal_encoding(np.arange(40000), 768))()
    interleaved = np.stack([SIN_W, SIN_W], axis=-1).reshape(-1)
    quarters = np.tile([0, 1], 384)  # sin, cos, sin, ...
    old = jax.jit(lambda p: _turn_sin_before(p, interleaved, quarters))(jnp.arange(40000, dtype=jnp.int32))
    np.testing.assert_array_equal(_bits(enc), _bits(old))


def test_bounds_are_checked():
    with pytest.raises(ValueError, match=r"bounds: expected \(lowest, highest\) inside the int32 range"):
        turn_sin(jnp.arange(4), ROPE_W, bounds=(5, 1))
    with pytest.raises(ValueError, match=r"bounds: expected"):
        turn_cos_sin(jnp.arange(4), ROPE_W, bounds=(0, 2**31))


def test_values_are_computed_once_not_per_head():
    """A consumer that broadcasts ``cos``/``sin`` over 32 heads reads them from memory: no ``sine``
    in the fusion that writes the ``(T, heads, n)`` result (an optimization barrier in place of the
    lane reduction would not do it: XLA CPU drops barriers before fusion, and the sines are then
    evaluated once per head)."""

    def f(q):
        cos, sin = fp.rotary_cos_sin(np.arange(4096), LLAMA31)
        return q * cos[:, None, :] + q * sin[:, None, :]

    text = jax.jit(f).lower(jax.ShapeDtypeStruct((4096, 32, 64), jnp.float32)).compile().as_text()
    computations = text.split("\n\n")
    writes_heads = [c for c in computations if "-> f32[4096,32,64]" in c.split("\n", 1)[0]]
    assert writes_heads, "expected a computation writing the (4096, 32, 64) result"
    assert not any("sine(" in c for c in writes_heads)
    assert sum(c.count("sine(") for c in computations) == 2  # cos and sin, once each
