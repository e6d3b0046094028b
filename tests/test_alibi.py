"""ALiBi parity with Hugging Face (BLOOM's ``build_alibi_tensor``, MPT's ``build_mpt_alibi_tensor``),
attention equivalence of the layouts, shapes, limits and bad input."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
from transformers.models.bloom.modeling_bloom import _get_alibi_slopes, build_alibi_tensor
from transformers.models.mpt.modeling_mpt import build_mpt_alibi_tensor

import flax_posenc as fp
from flax_posenc import AlibiConfig, PositionLimitError
from flax_posenc.alibi import bloom_alibi_tensor, mpt_alibi_tensor

TOL = 1e-5
RNG = np.random.default_rng(0)
HEADS = [1, 2, 3, 5, 6, 8, 12, 16, 20, 24, 32, 40, 64, 71, 80, 112]


@pytest.mark.parametrize("heads", HEADS)
def test_slopes_match_bloom_for_any_head_count(heads):
    ours = fp.alibi_slopes(heads)
    hf = _get_alibi_slopes(heads, torch.device("cpu")).double().numpy()
    assert ours.shape == (heads,)
    assert np.abs(ours - hf).max() <= 1e-7 * hf.max()  # HF's float32 pow vs our float64


@pytest.mark.parametrize("heads", [4, 12, 16, 30])
def test_bloom_alibi_tensor_matches_with_padding(heads):
    seq = 128
    mask = np.ones((3, seq), np.int64)
    mask[1, :20] = 0  # left padding
    mask[2, -7:] = 0  # right padding
    want = build_alibi_tensor(torch.from_numpy(mask), heads, torch.float32).numpy()
    got = np.asarray(bloom_alibi_tensor(jnp.asarray(mask), heads))
    assert got.shape == want.shape == (3 * heads, 1, seq)
    assert np.abs(got - want).max() <= TOL


@pytest.mark.parametrize("heads, bias_max", [(8, 8), (12, 8), (16, 8), (24, 16), (7, 4)])
def test_mpt_alibi_tensor_matches(heads, bias_max):
    seq = 96
    want = build_mpt_alibi_tensor(heads, seq, alibi_bias_max=bias_max).numpy()
    got = np.asarray(mpt_alibi_tensor(heads, seq, bias_max))
    assert got.shape == want.shape == (heads, 1, seq)
    assert np.abs(got - want).max() <= TOL
    # MPT's slopes equal BLOOM's recipe with max_bias = alibi_bias_max
    np.testing.assert_allclose(-got[:, 0, 0] / (seq - 1), fp.alibi_slopes(heads, max_bias=bias_max), rtol=1e-6)


@pytest.mark.parametrize("heads", [6, 16])
def test_causal_bias_gives_the_same_attention_as_bloom_and_mpt(heads):
    """Softmax is invariant to a per-row constant: the three layouts give the same attention."""
    seq = 48
    scores = RNG.standard_normal((heads, seq, seq)).astype(np.float32)
    causal = np.tril(np.ones((seq, seq), bool))
    ours = jax.nn.softmax(scores + np.asarray(fp.alibi_bias(heads, seq)), axis=-1)
    bloom = np.asarray(bloom_alibi_tensor(jnp.ones((1, seq), jnp.int32), heads))  # (heads, 1, seq)
    mpt = np.asarray(mpt_alibi_tensor(heads, seq))
    for other in (bloom, mpt):
        masked = np.where(causal, scores + other, np.finfo(np.float32).min)
        assert np.abs(np.asarray(ours) - np.asarray(jax.nn.softmax(masked, axis=-1))).max() <= TOL


def test_shapes_and_conventions():
    b = np.asarray(fp.alibi_bias(4, 5, causal=False))
    assert b.shape == (4, 5, 5)
    np.testing.assert_array_equal(b, b.transpose(0, 2, 1))  # bidirectional: symmetric
    np.testing.assert_array_equal(np.diagonal(b, axis1=1, axis2=2), 0)
    slopes = fp.alibi_slopes(4)
    np.testing.assert_allclose(b[:, 4, 0], -4 * slopes, rtol=1e-7)
    c = np.asarray(fp.alibi_bias(4, 5))
    assert (c[:, 0, 1:] == np.finfo(np.float32).min).all()
    np.testing.assert_array_equal(np.tril(c[0]), np.tril(b[0]))
    # with a cache: 2 new queries over 6 keys are the last two rows of the full bias
    np.testing.assert_array_equal(np.asarray(fp.alibi_bias(4, 2, 6)), np.asarray(fp.alibi_bias(4, 6))[:, 4:])
    # explicit, batched positions
    q = jnp.array([[3, 4], [0, 1]])
    k = jnp.array([[0, 1, 2, 3, 4], [0, 1, 2, 3, 4]])
    assert fp.alibi_bias_from_positions(4, q, k).shape == (2, 4, 2, 5)


def test_modules_agree():
    cfg = AlibiConfig(12, max_positions=64)
    a = fp.nnx.ALiBiBias(cfg)(8, 16)
    b = fp.linen.ALiBiBias(cfg).apply({}, 8, 16)
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    np.testing.assert_array_equal(np.asarray(a), np.asarray(fp.alibi_bias(cfg, 8, 16)))
    p = fp.nnx.ALiBiBias(cfg, causal=False)(query_positions=jnp.arange(3), key_positions=jnp.arange(3))
    assert p.shape == (12, 3, 3)


def test_limit_under_the_overflow_rule():
    cfg = AlibiConfig(4, max_positions=32)
    fp.alibi_bias(cfg, 32)
    with pytest.raises(
        PositionLimitError,
        match=r"^ALiBi key positions \(configured limit; ALiBi itself has none\) holds 32 positions \(0..31\); asked for position 32, 1 past the end$",
    ):
        fp.alibi_bias(cfg, 33)
    f = fp.position_errors(jax.jit(lambda q, k: fp.alibi_bias_from_positions(cfg, q, k)))
    assert f(jnp.arange(4), jnp.arange(32)).shape == (4, 4, 32)
    with pytest.raises(
        PositionLimitError,
        match=r"^ALiBi key positions \(configured limit; ALiBi itself has none\) holds 32 positions \(0..31\); asked for position 39, 8 past the end$",
    ):
        f(jnp.arange(4), jnp.arange(40))


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda: AlibiConfig(0), r"^num_heads: expected a positive integer, got 0$"),
        (lambda: fp.alibi_slopes(8, max_bias=0.0), r"^max_bias: expected a finite number > 0, got 0.0$"),
        (
            lambda: fp.alibi_bias(4, 6, 3),
            r"^query_length: expected at most key_length=3 \(queries are the last keys\), got 6$",
        ),
        (lambda: fp.alibi_bias(4, 0), r"^query_length: expected a positive Python integer, got 0$"),
    ],
)
def test_bad_input_is_one_line(call, message):
    with pytest.raises(ValueError, match=message):
        call()


def test_bias_within_one_and_a_half_ulp_of_the_exact_product():
    """Slope rounded once, product rounded once more: <= 1.5 ulp of m_h * d (alibi.py's claim)."""
    for heads in (12, 30):
        exact = -fp.alibi_slopes(heads)[:, None] * np.arange(512, dtype=np.float64)[None, :]  # float64
        ours = np.asarray(fp.alibi_bias(heads, 512))[:, 511, ::-1].astype(np.float64)  # distances 0..511
        ulp = np.spacing(np.abs(exact).astype(np.float32)).astype(np.float64)
        assert np.all(np.abs(ours - exact) <= 1.5 * ulp)


def test_mpt_storage_bit_identical_up_to_64_heads_then_one_slope_ulp():
    """benchmarks/alibi_parity.py checks every count 1..128; docs/rope-alibi.md states the result."""
    for heads in (3, 5, 20, 40, 64):
        assert np.array_equal(np.asarray(mpt_alibi_tensor(heads, 64)), build_mpt_alibi_tensor(heads, 64).numpy()), heads
    for heads in (112, 128):
        ours, hf = np.asarray(mpt_alibi_tensor(heads, 64)), build_mpt_alibi_tensor(heads, 64).numpy()
        slopes = fp.alibi_slopes(heads)[:, None, None].astype(np.float32)
        assert np.all(np.abs(ours - hf) <= np.spacing(slopes) * 63 + np.spacing(np.abs(hf)))
