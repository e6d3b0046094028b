"""Static positions: the program does not grow with the sequence, and stays exact (issue 26, item 1).

Structural checks only (the HLO text of ``jax.jit(f).lower(...)``; no timing: compile times are
``benchmarks/program_size.py``'s business). Every static path of every encoding is lowered at
1k and 32k positions: under 1 MB, longer only by the digits of the shapes, and with no run-time
check (the positions were checked while tracing). Exactness of the
on-device path at the top of Llama-3.1's 128k window against float64 numpy from the formula.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import LLAMA31, sinusoid

import flax_posenc as fp
from flax_posenc import PositionLimitError
from flax_posenc.block import InputSpec, PositionSpec, transformer_input
from flax_posenc.overflow import known_positions
from flax_posenc.sinusoidal import turn_cos_sin, turn_sin

MB = 1_000_000
GROWTH = 4096  # bytes: the shapes' digits (1024 -> 32768) in every line that prints a shape


def llama31_inverse_frequencies() -> np.ndarray:
    """transformers' ``_compute_llama3_parameters``, written out in float64 numpy."""
    inv = 1.0 / 500000.0 ** (np.arange(0, 128, 2, dtype=np.float64) / 128)
    wavelen = 2 * np.pi / inv
    low_wavelen, high_wavelen = 8192 / 1.0, 8192 / 4.0
    scaled = np.where(wavelen > low_wavelen, inv / 8.0, inv)
    smooth = (8192 / wavelen - 1.0) / (4.0 - 1.0)
    smoothed = (1 - smooth) * scaled / 8.0 + smooth * scaled
    medium = (wavelen >= high_wavelen) & (wavelen <= low_wavelen)
    return np.where(medium, smoothed, scaled)


def static_paths(seq: int) -> dict:
    """name -> (function, argument shapes): every static-position path, at ``seq`` positions."""
    x = jax.ShapeDtypeStruct((1, seq, 1, 128), jnp.bfloat16)
    spec = InputSpec(100, PositionSpec("sinusoidal", dim=256))
    return {
        "apply_rope": (lambda x: fp.apply_rope(x, LLAMA31), (x,)),
        "apply_rope_qk": (lambda q, k: fp.apply_rope_qk(q, k, LLAMA31), (x, x)),
        "rotary_cos_sin": (lambda: fp.rotary_cos_sin(np.arange(seq), LLAMA31), ()),
        "sinusoidal_encoding": (lambda: fp.sinusoidal_encoding(np.arange(seq), 256), ()),
        "sinusoid block": (
            lambda w, i: transformer_input(spec, {"word_embeddings": w}, i),
            (jax.ShapeDtypeStruct((100, 256), jnp.float32), jax.ShapeDtypeStruct((1, seq), jnp.int32)),
        ),
        "alibi_bias": (lambda: fp.alibi_bias(8, 16, seq), ()),
        "relative_position_bias": (
            lambda t: fp.relative_position_bias(t, 16, seq, query_start=seq - 16, bidirectional=False),
            (jax.ShapeDtypeStruct((32, 8), jnp.float32),),
        ),
    }


def hlo_text(fn, args) -> str:
    return jax.jit(fn).lower(*args).as_text()


@pytest.mark.parametrize("name", list(static_paths(8)))
def test_program_size_does_not_grow_with_the_sequence(name):
    short, long = (hlo_text(*static_paths(seq)[name]) for seq in (1024, 32768))
    assert len(long.encode()) < MB, (name, len(long.encode()))
    assert len(long.encode()) - len(short.encode()) <= GROWTH, (name, len(short.encode()), len(long.encode()))
    # the positions were checked while tracing: nothing runs for them. (The block's traced word ids
    # keep their one run-time check: input_ids are guarded like every table lookup.)
    assert long.count("callback(") == (1 if name == "sinusoid block" else 0), name


def test_a_long_sinusoid_block_is_not_a_host_table():
    """The block at 32k static positions: no (32768, dim) constant in the jaxpr (it was 32 MB)."""
    spec = InputSpec(100, PositionSpec("sinusoidal", dim=256))
    jaxpr = jax.make_jaxpr(lambda w, i: transformer_input(spec, {"word_embeddings": w}, i))(
        jnp.zeros((100, 256)), jnp.zeros((1, 32768), jnp.int32)
    )
    assert max((np.size(c) for c in jaxpr.consts), default=0) <= 4096, [np.shape(c) for c in jaxpr.consts]


def test_rope_static_path_is_exact_at_the_top_of_128k():
    """The last 4096 positions of Llama-3.1's window, static (a concrete array and a static start):
    cos/sin within 1e-7 of float64 (the host constant was within 3e-8; naive float32: ~1e-2)."""
    top = np.arange(131072 - 4096, 131072)
    angle = top[:, None].astype(np.float64) * llama31_inverse_frequencies()
    cos, sin = jax.jit(lambda: fp.rotary_cos_sin(top, LLAMA31))()
    assert np.abs(np.asarray(cos, np.float64) - np.cos(angle)).max() <= 1e-7
    assert np.abs(np.asarray(sin, np.float64) - np.sin(angle)).max() <= 1e-7
    # apply_rope with a static start on x = [1]*64 + [0]*64 returns [cos | sin]
    x = np.zeros((1, 4096, 1, 128), np.float32)
    x[..., :64] = 1.0
    out = np.asarray(jax.jit(lambda x: fp.apply_rope(x, LLAMA31, start=131072 - 4096))(x), np.float64)[0, :, 0]
    assert np.abs(out[:, :64] - np.cos(angle)).max() <= 1e-7
    assert np.abs(out[:, 64:] - np.sin(angle)).max() <= 1e-7
    naive = np.cos(top[:, None].astype(np.float32) * llama31_inverse_frequencies().astype(np.float32))
    assert np.abs(naive.astype(np.float64) - np.cos(angle)).max() > 1e-3


def test_static_overflow_still_raises_while_tracing():
    f = jax.jit(lambda x: fp.apply_rope(x, LLAMA31, start=131072 - 4095))
    with pytest.raises(
        PositionLimitError,
        match=r"llama3 RoPE .* holds 131072 positions \(0..131071\); asked for position 131072, 1 past the end",
    ):
        f.lower(jax.ShapeDtypeStruct((1, 4096, 1, 128), jnp.bfloat16))


def test_small_static_encodings_stay_correctly_rounded():
    """At most 64 KiB (a decode step, a short prompt): the float64 values rounded once, as before."""
    pos = np.arange(100, 108)
    cos, sin = jax.jit(lambda: fp.rotary_cos_sin(pos, LLAMA31))()
    angle = pos[:, None].astype(np.float64) * llama31_inverse_frequencies()
    np.testing.assert_array_equal(np.asarray(cos), np.cos(angle).astype(np.float32))
    np.testing.assert_array_equal(np.asarray(sin), np.sin(angle).astype(np.float32))
    enc = jax.jit(lambda: fp.sinusoidal_encoding(pos, 64))()
    np.testing.assert_array_equal(np.asarray(enc), sinusoid(pos, 64).astype(np.float32))


def test_long_static_sinusoids_match_float64():
    pos = np.arange(2**24 - 2048, 2**24)
    enc = jax.jit(lambda: fp.sinusoidal_encoding(pos, 512))()
    assert np.abs(np.asarray(enc, np.float64) - sinusoid(pos, 512)).max() <= 1e-7


@pytest.mark.parametrize("quarter", [0, 1, 2, 3])
def test_turn_sin_any_position_and_phase(quarter):
    """Negative positions, the int32 extremes and every quarter-turn phase, vs float64."""
    rng = np.random.default_rng(quarter)
    pos = np.concatenate([[-(2**31), -1, 0, 1, 2**31 - 1], rng.integers(-(2**24), 2**24, 1000)])
    w = 1.0 / 10000.0 ** (np.arange(0, 96, 2) / 96)
    got = np.asarray(jax.jit(lambda p: turn_sin(p, w, quarter))(jnp.asarray(pos, jnp.int32)), np.float64)
    want = np.sin(pos[:, None].astype(np.float64) * w + quarter * np.pi / 2)
    small = np.abs(pos) < 2**24
    assert np.abs(got - want)[small].max() <= 1e-7
    assert np.abs(got - want).max() <= 3e-7  # float64's own p * w is off by up to 2e-7 rad at 2**31


def test_turn_cos_sin_under_vmap_and_scan():
    w = np.array([1.0, 0.01, 1e-4])
    host = np.arange(-6, 6).reshape(3, 4)
    want = host[..., None].astype(np.float64) * w
    pos = jnp.asarray(host, jnp.int32)
    cos, sin = jax.vmap(lambda p: turn_cos_sin(p, w))(pos)
    np.testing.assert_allclose(np.asarray(cos), np.cos(want), rtol=0, atol=1e-7)
    np.testing.assert_allclose(np.asarray(sin), np.sin(want), rtol=0, atol=1e-7)
    _, (cos_s, sin_s) = jax.lax.scan(lambda c, p: (c, turn_cos_sin(p, w)), 0, pos)
    # each compilation may contract a multiply-add differently: compared with float64, not bitwise
    np.testing.assert_allclose(np.asarray(cos_s), np.cos(want), rtol=0, atol=1e-7)
    np.testing.assert_allclose(np.asarray(sin_s), np.sin(want), rtol=0, atol=1e-7)


@pytest.mark.parametrize(
    "host",
    [
        np.arange(5, 5 + 4096),  # one run
        np.arange(4096).reshape(2, 2048) + np.array([[0], [7]]),  # a run per row
        np.random.default_rng(0).integers(0, 100, 4096),  # no run: a constant, as before
        np.arange(10),  # small: a constant
    ],
    ids=["run", "rows", "random", "small"],
)
def test_known_positions_are_the_same_values(host):
    got = known_positions(host)
    assert got.dtype == jnp.int32
    np.testing.assert_array_equal(np.asarray(got), host)
    consts = jax.make_jaxpr(lambda: known_positions(host))().consts
    runs = host.size >= 1024 and bool(np.all(np.diff(host, axis=-1) == 1))
    assert (max((np.size(c) for c in consts), default=0) < host.size) == runs
