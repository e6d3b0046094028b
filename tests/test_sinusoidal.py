"""Sinusoidal encodings against independent float64 numpy references."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest
from helpers import flax_sinusoidal_init, sinusoid, t2t_timing_signal
from hypothesis import given, settings
from hypothesis import strategies as st

import flax_posenc as fp


def reference(positions, dim, base=10000.0):
    """The lesson's formula in float64: PE[p,2i]=sin(p/base**(2i/dim)) (tests/helpers.py)."""
    return sinusoid(np.asarray(positions), dim, base)


def frequencies(dim, base=10000.0):
    """w_i = base ** (-2i / dim), in float64, from the formula (not from flax_posenc)."""
    return base ** (-2.0 * np.arange(dim // 2) / dim)


class TestTable:
    @pytest.mark.parametrize("dim", [2, 4, 64, 512])
    def test_matches_float64_formula_to_rounding(self, dim):
        got = np.asarray(fp.sinusoidal_table(300, dim), np.float64)
        ref = reference(np.arange(300), dim)
        # correctly rounded float64 -> float32: within half an ulp of the reference
        assert np.all(np.abs(got - ref) <= np.spacing(np.abs(ref).astype(np.float32)) / 2 + 1e-30)

    def test_lessons_four_dimensional_table(self):
        got = np.asarray(fp.sinusoidal_table(3, 4), np.float64)
        ref = np.array([[math.sin(p), math.cos(p), math.sin(p / 100), math.cos(p / 100)] for p in range(3)])
        np.testing.assert_allclose(got, ref, atol=1e-7)

    def test_start_offsets_the_positions(self):
        np.testing.assert_array_equal(fp.sinusoidal_table(5, 8, start=100), fp.sinusoidal_table(105, 8)[100:])

    def test_concatenated_endpoint_reproduces_flax_examples(self):
        got = np.asarray(fp.sinusoidal_table(256, 64, layout="concatenated", endpoint=True))
        np.testing.assert_allclose(got, flax_sinusoidal_init(256, 64, dtype=np.float32), atol=2e-6)

    def test_concatenated_endpoint_reproduces_t5x_maxtext(self):
        positions = np.arange(0, 4096, 7)
        got = np.asarray(fp.sinusoidal_encoding(jnp.asarray(positions), 128, layout="concatenated", endpoint=True))
        np.testing.assert_allclose(got, t2t_timing_signal(positions, 128), atol=2e-6)  # T5X / MaxText: t2t's formula

    def test_wavelengths(self):
        dim = 512
        w = fp.sinusoidal_frequencies(dim)
        np.testing.assert_allclose(2 * np.pi / w, 2 * np.pi * 10000.0 ** (2 * np.arange(dim // 2) / dim), rtol=1e-14)

    @pytest.mark.parametrize("dtype", [jnp.bfloat16, jnp.float16])
    def test_low_precision_rounds_once(self, dtype):
        got = np.asarray(fp.sinusoidal_table(512, 64, dtype=dtype))
        ref = reference(np.arange(512), 64)
        # the nearest representable value: no other value of that dtype is closer to ref
        up = np.nextafter(got, np.array(np.inf, dtype=got.dtype)).astype(np.float64)
        down = np.nextafter(got, np.array(-np.inf, dtype=got.dtype)).astype(np.float64)
        err = np.abs(got.astype(np.float64) - ref)
        assert np.all(err <= np.abs(up - ref)) and np.all(err <= np.abs(down - ref))

    def test_round_once_beats_double_rounding(self):
        from flax_posenc.sinusoid_math import round_once

        # 1 + 2**-8 + 2**-30 is just above a bfloat16 tie; via float32 it collapses onto the tie
        x = np.array([1 + 2.0**-8 + 2.0**-30])
        assert round_once(x, ml_dtypes.bfloat16).astype(np.float64)[0] == 1 + 2.0**-7
        assert x.astype(np.float32).astype(ml_dtypes.bfloat16).astype(np.float64)[0] == 1.0

    @pytest.mark.parametrize("bad", [0, 3, -2, 2.0, True])
    def test_bad_dim(self, bad):
        with pytest.raises(ValueError, match="dim: expected a positive even integer"):
            fp.sinusoidal_table(4, bad)

    def test_bad_length_and_options(self):
        with pytest.raises(ValueError, match="length: expected a non-negative integer, got -1"):
            fp.sinusoidal_table(-1, 4)
        with pytest.raises(ValueError, match="layout: expected one of"):
            fp.sinusoidal_table(4, 4, layout="sideways")
        with pytest.raises(ValueError, match="base: expected a finite number > 1"):
            fp.sinusoidal_table(4, 4, base=1.0)


class TestEncoding:
    @pytest.mark.parametrize("dim", [2, 64, 512, 4096])
    def test_exact_below_2_24_under_jit(self, dim):
        rng = np.random.default_rng(dim)
        positions = np.concatenate(
            [
                rng.integers(0, 2**24, 4000 if dim < 4096 else 800),
                np.arange(2**24 - 64, 2**24),
                2 ** np.arange(25) - 1,
                2 ** np.arange(24),
                [0, 255, 256, 65535, 65536],
            ]
        )
        got = jax.jit(lambda p: fp.sinusoidal_encoding(p, dim))(jnp.asarray(positions, jnp.int32))
        err = np.abs(np.asarray(got, np.float64) - reference(positions, dim)).max()
        assert err < 2e-6

    def test_naive_float32_is_not_exact(self):
        """The reason for the digit tables: naive float32 is far off at long range."""
        positions = np.arange(2**24 - 64, 2**24)
        w = fp.sinusoidal_frequencies(512).astype(np.float32)
        angle = positions.astype(np.float32)[:, None] * w
        naive = np.empty((len(positions), 512))
        naive[:, 0::2], naive[:, 1::2] = np.sin(angle), np.cos(angle)
        assert np.abs(naive - reference(positions, 512)).max() > 0.5

    def test_up_to_int32_max(self):
        positions = np.array([2**24, 2**28 + 12345, 2**31 - 1])
        got = fp.sinusoidal_encoding(jnp.asarray(positions, jnp.int32), 64)
        assert np.abs(np.asarray(got, np.float64) - reference(positions, 64)).max() < 2e-6

    def test_negative_positions(self):
        positions = np.array([-1, -7, -(2**20) - 3, -(2**31)])
        got = fp.sinusoidal_encoding(jnp.asarray(positions, jnp.int32), 32)
        assert np.abs(np.asarray(got, np.float64) - reference(positions, 32)).max() < 2e-6

    def test_any_shape(self):
        positions = jnp.arange(24).reshape(2, 3, 4)
        got = fp.sinusoidal_encoding(positions, 8)
        assert got.shape == (2, 3, 4, 8)
        np.testing.assert_allclose(got, reference(np.arange(24).reshape(2, 3, 4), 8), atol=2e-6)

    def test_agrees_with_table(self):
        np.testing.assert_allclose(
            fp.sinusoidal_encoding(jnp.arange(1000), 96), fp.sinusoidal_table(1000, 96), atol=1e-6
        )

    @pytest.mark.parametrize("dtype", [jnp.bfloat16, jnp.float16])
    def test_low_precision_output(self, dtype):
        got = fp.sinusoidal_encoding(jnp.arange(2**20 - 100, 2**20), 64, dtype=dtype)
        assert got.dtype == dtype
        ref = reference(np.arange(2**20 - 100, 2**20), 64)
        tol = float(jnp.finfo(dtype).eps)  # one rounding: half an ulp of values <= 1, plus slack
        assert np.abs(np.asarray(got, np.float64) - ref).max() <= tol

    @pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16])
    def test_limited_encoding_is_the_correctly_rounded_table(self, dtype):
        """With a small limit (GPT-2's 1024 x 768), traced rows are float64 rounded once to dtype."""
        positions = jnp.asarray(np.random.default_rng(0).integers(0, 1024, (2, 300)), jnp.int32)
        enc = jax.jit(lambda p: fp.sinusoidal_encoding(p, 768, num_positions=1024, dtype=dtype))
        got = np.asarray(enc(positions))
        assert got.dtype == jnp.dtype(dtype)
        ref = reference(np.asarray(positions), 768)
        # the nearest representable value: no other value of that dtype is closer to ref
        up = np.nextafter(got, np.array(np.inf, dtype=got.dtype)).astype(np.float64)
        down = np.nextafter(got, np.array(-np.inf, dtype=got.dtype)).astype(np.float64)
        err = np.abs(got.astype(np.float64) - ref)
        assert np.all(err <= np.abs(up - ref)) and np.all(err <= np.abs(down - ref))
        step = lambda c, p: (c, fp.sinusoidal_encoding(p, 768, num_positions=1024, dtype=dtype))  # noqa: E731
        np.testing.assert_array_equal(np.asarray(jax.lax.scan(step, 0, positions)[1]), got)  # same rows in scan
        in_vmap = jax.vmap(lambda p: fp.sinusoidal_encoding(p, 768, num_positions=1024, dtype=dtype))(positions)
        np.testing.assert_array_equal(np.asarray(in_vmap), got)  # and under vmap

    def test_table_or_exact_angles_by_size(self):
        """Up to TABLE_GATHER_ELEMENTS entries the rows are gathered from the (limit, dim) table, a
        constant; one row more and the exact-angle digits take over (no such constant)."""
        from flax_posenc.sinusoidal import TABLE_GATHER_ELEMENTS

        dim = 256
        rows = TABLE_GATHER_ELEMENTS // dim
        for limit, table in ((rows, True), (rows + 1, False)):
            enc = lambda p: fp.sinusoidal_encoding(p, dim, num_positions=limit)  # noqa: E731
            consts = jax.make_jaxpr(enc)(jnp.zeros(4, jnp.int32)).consts
            assert any(np.shape(c) == (limit, dim) for c in consts) == table, (limit, [np.shape(c) for c in consts])
            positions = np.array([0, 1, limit // 2, limit - 1])
            got = jax.jit(enc)(jnp.asarray(positions, jnp.int32))
            np.testing.assert_allclose(
                np.asarray(got, np.float64), reference(positions, dim), rtol=0, atol=3 * 2.0**-23
            )

    def test_rejects_float_positions(self):
        with pytest.raises(TypeError, match="positions: expected an integer array, got dtype float32"):
            fp.sinusoidal_encoding(jnp.array([1.0]), 4)

    def test_vmap_and_jit_compose(self):
        pos = jnp.arange(12).reshape(3, 4)
        got = jax.jit(jax.vmap(lambda p: fp.sinusoidal_encoding(p, 16)))(pos)
        np.testing.assert_allclose(got, reference(np.arange(12).reshape(3, 4), 16), atol=2e-6)


class TestProperties:
    """The lesson's properties, checked for all inputs hypothesis can find."""

    @settings(max_examples=60, deadline=None)
    @given(
        p=st.integers(0, 10**6), q=st.integers(0, 10**6), k=st.integers(-2000, 2000), dim=st.sampled_from([8, 64, 512])
    )
    def test_dot_product_depends_only_on_offset(self, p, q, k, dim):
        positions = np.array([p, p + k, q, q + k])  # p + k < 0 allowed: the encoding takes negative positions
        pe = np.asarray(fp.sinusoidal_encoding(jnp.asarray(positions, jnp.int32), dim), np.float64)
        # float32 entries within 2e-6 of the formula: a dot product of dim entries within 4e-6 * dim
        assert abs(pe[0] @ pe[1] - pe[2] @ pe[3]) < 8e-6 * dim
        # and it is sum_i cos(k w_i) with the formula's frequencies: a function of k alone
        assert abs(pe[0] @ pe[1] - np.cos(k * frequencies(dim)).sum()) < 4e-6 * dim

    @settings(max_examples=40, deadline=None)
    @given(p=st.integers(0, 2**20), k=st.integers(-(2**16), 2**16), dim=st.sampled_from([4, 32, 256]))
    def test_offset_is_a_block_rotation_independent_of_p(self, p, k, dim):
        rotation = np.zeros((dim, dim))
        for i, wi in enumerate(frequencies(dim)):  # acts on the (sin, cos) pair of frequency i
            c, s = np.cos(k * wi), np.sin(k * wi)
            rotation[2 * i : 2 * i + 2, 2 * i : 2 * i + 2] = [[c, s], [-s, c]]
        ours = np.asarray(fp.sinusoidal_encoding(jnp.array([p, p + k]), dim), np.float64)
        # the encoding we ship, rotated by the formula's rotation, lands on the formula's row p + k
        np.testing.assert_allclose(rotation @ ours[0], reference(np.array([p + k]), dim)[0], atol=5e-6)
        np.testing.assert_allclose(rotation @ ours[0], ours[1], atol=5e-6)
        np.testing.assert_allclose(fp.sinusoidal_frequencies(dim), frequencies(dim), rtol=1e-14)

    @pytest.mark.parametrize("length,dim", [(4096, 64), (8192, 512)])
    def test_rows_are_distinct_over_long_ranges(self, length, dim):
        pe = np.asarray(fp.sinusoidal_table(length, dim), np.float64)
        sq = (pe**2).sum(1)
        nearest = np.inf
        for lo in range(0, length, 1024):  # blockwise pairwise distances
            block = pe[lo : lo + 1024]
            d2 = sq[lo : lo + 1024, None] + sq[None, :] - 2 * block @ pe.T
            d2[np.arange(len(block)), np.arange(lo, lo + len(block))] = np.inf
            nearest = min(nearest, d2.min())
        assert nearest > 0.1  # far above float32 noise: no two positions collide

    def test_gpt2_table_parameter_count(self):
        from flax import nnx

        wpe = fp.nnx.LearnedPositionalEmbedding.from_arguments(1024, 768, rngs=nnx.Rngs(0))
        count = sum(x.size for x in jax.tree.leaves(nnx.state(wpe, nnx.Param)))
        assert count == 1024 * 768
        assert fp.nnx.SinusoidalPositionalEncoding.from_arguments(768)(length=1024).shape == (1024, 768)
        assert not jax.tree.leaves(nnx.state(fp.nnx.SinusoidalPositionalEncoding.from_arguments(768), nnx.Param))


def test_traced_negative_positions_are_exact():
    """Negative traced positions use the signed top digit of the exact-angle tables (mutant M12)."""
    from flax_posenc.sinusoid_math import sinusoidal_values

    p = np.array([-1, -5, -1000, -(2**20), -(2**24) + 1, 3, 2**23], np.int32)
    got = np.asarray(jax.jit(lambda q: fp.sinusoidal_encoding(q, 64))(p))
    assert np.abs(got - sinusoidal_values(p, 64)).max() <= 2e-6


def test_bfloat16_tables_round_once_not_twice():
    """float64 -> bfloat16 through float32 rounds twice; round_once rounds once (mutant M22).

    1 + 2**-8 is the midpoint between bfloat16 1 and 1 + 2**-7; 2**-30 above it is lost in float32,
    whose tie then goes to even (1.0): the correct bfloat16 value is 1 + 2**-7.
    """
    import ml_dtypes

    from flax_posenc.sinusoid_math import round_once

    x = np.array([1 + 2**-8 + 2**-30, -(1 + 2**-8 + 2**-30)])
    assert x.astype(np.float32).astype(ml_dtypes.bfloat16).astype(np.float64).tolist() == [1.0, -1.0]  # the trap
    assert round_once(x, ml_dtypes.bfloat16).astype(np.float64).tolist() == [1 + 2**-7, -(1 + 2**-7)]
