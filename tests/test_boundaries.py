"""Boundary values and parameters shown to matter: tests that kill the plausible one-line bugs.

Each test changes one parameter (base, start, the mask, the sequence length) or sits exactly at,
one before or one past a limit, and compares with an independent float64 reference, so a bug
that ignores the parameter or is off by one cannot pass.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from helpers import sinusoid

import flax_posenc as fp
from flax_posenc import PositionLimitError


def sinusoid64(positions, dim, base):
    return sinusoid(np.asarray(positions), dim, base)


@pytest.mark.parametrize("base", [10000.0, 500.0, 1e6])
def test_device_sinusoid_reads_base(base):
    positions = jnp.array([0, 1, 7, 1000, 2**20])
    traced = jax.jit(lambda p: fp.sinusoidal_encoding(p, 8, base=base))(positions)
    np.testing.assert_allclose(traced, sinusoid64(positions, 8, base), rtol=0, atol=2e-6)
    np.testing.assert_allclose(
        fp.sinusoidal_table(9, 8, base=base), sinusoid64(np.arange(9), 8, base), rtol=0, atol=1e-7
    )


def test_padding_aware_positions_count_from_start():
    mask = jnp.array([[1, 1, 0, 1], [0, 1, 1, 1]])
    for start in (0, 3):
        expected = np.where(np.asarray(mask) > 0, np.cumsum(mask, -1) - 1 + start, -1)
        np.testing.assert_array_equal(fp.padding_aware_positions(mask, start=start), expected)
        traced = jax.jit(lambda m, s: fp.padding_aware_positions(m, start=s))(mask, start)
        np.testing.assert_array_equal(traced, expected)


def test_padding_aware_static_bound_includes_start():
    """RoBERTa-style block: seq 4 from start 2 reaches position 5 (fits 6); from start 3, 6 (one past)."""
    block = fp.nnx.TransformerInput.from_arguments(
        50,
        8,
        num_positions=6,
        position_offset=2,
        positions_from="non_padding_ids",
        pad_token_id=1,
        rngs=nnx.Rngs(0),
    )
    ids = jnp.full((1, 4), 5)
    table = np.asarray(block.position_embeddings[...])
    out = jax.jit(lambda i: block(i, start=2))(ids)
    word = np.asarray(block.word_embeddings[...])
    np.testing.assert_allclose(out[0], word[5] + table[2 + np.arange(2, 6)], rtol=0, atol=1e-6)
    with pytest.raises(PositionLimitError, match=r"after 2 reserved rows; asked for position 6, 1 past the end"):
        jax.jit(lambda i: block(i, start=3))(ids)


def test_sinusoid_padding_mask_spares_the_first_real_token():
    """OPT-style counting with sinusoids: padding gets no vector, the first real token gets PE(0)."""
    block = fp.nnx.TransformerInput.from_arguments(
        50,
        8,
        position="sinusoidal",
        positions_from="attention_mask",
        rngs=nnx.Rngs(0),
    )
    ids = jnp.array([[7, 7, 7, 7]])
    mask = jnp.array([[0, 1, 1, 0]])
    out = np.asarray(jax.jit(lambda i, m: block(i, attention_mask=m))(ids, mask))[0]
    word = np.asarray(block.word_embeddings[...])[7]
    pe = sinusoid64([0, 1], 8, 10000.0)
    np.testing.assert_allclose(out[0], word, rtol=0, atol=1e-6)  # padding: no position
    np.testing.assert_allclose(out[1], word + pe[0], rtol=0, atol=1e-6)  # first real token: PE(0), not zero
    np.testing.assert_allclose(out[2], word + pe[1], rtol=0, atol=1e-6)
    np.testing.assert_allclose(out[3], word, rtol=0, atol=1e-6)


@pytest.mark.parametrize("seq_len", [1, 10, 16])
def test_dynamic_ntk_keeps_the_base_up_to_the_trained_length(seq_len):
    """transformers' dynamic NTK rescales only past max_position_embeddings, never shrinks the base."""
    cfg = fp.RopeConfig(head_dim=8, rope_type="dynamic", factor=4.0, max_position_embeddings=16)
    inv, _ = fp.rope_inverse_frequencies(cfg, seq_len=seq_len)
    np.testing.assert_allclose(inv, 10000.0 ** (-np.arange(0, 8, 2) / 8), rtol=1e-15)
    grown, _ = fp.rope_inverse_frequencies(cfg, seq_len=17)
    base = 10000.0 * (4.0 * 17 / 16 - 3.0) ** (8 / 6)
    np.testing.assert_allclose(grown, base ** (-np.arange(0, 8, 2) / 8), rtol=1e-12)


@pytest.mark.parametrize("rows, offset", [(8, 0), (10, 2)])
def test_learned_limit_at_before_and_past(rows, offset):
    table = jnp.arange(rows * 2.0).reshape(rows, 2)
    usable = rows - offset
    f = fp.position_errors(jax.jit(lambda p: fp.lookup_positions(table, p, offset=offset)))
    for p in (usable - 2, usable - 1):  # one before and exactly at the last position
        np.testing.assert_array_equal(f(jnp.array([p])), table[offset + p][None])
    with pytest.raises(PositionLimitError, match=f"asked for position {usable}, 1 past the end"):
        f(jnp.array([usable]))
    with pytest.raises(PositionLimitError, match=f"asked for position {usable}, 1 past the end"):
        fp.lookup.slice_positions(table, usable + 1, offset=offset)
    assert fp.lookup.slice_positions(table, usable, offset=offset).shape == (usable, 2)


def test_zero_length_asks_for_nothing_whatever_the_start():
    table = jnp.arange(16.0).reshape(8, 2)
    assert fp.lookup.slice_positions(table, 0, start=100).shape == (0, 2)
    assert jax.jit(lambda s: fp.lookup.slice_positions(table, 0, start=s))(100).shape == (0, 2)
    block = fp.nnx.TransformerInput.from_arguments(20, 2, num_positions=8, rngs=nnx.Rngs(0))
    assert block(jnp.zeros((1, 0), jnp.int32), start=100).shape == (1, 0, 2)
