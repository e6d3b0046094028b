"""Self-attention is permutation-equivariant; adding a position encoding breaks that."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

import flax_posenc as fp

ROOT = Path(__file__).resolve().parents[1]


def attention(x, key):
    d = x.shape[-1]
    wq, wk, wv = jax.random.normal(key, (3, d, d)) / np.sqrt(d)
    q, k, v = x @ wq, x @ wk, x @ wv
    return jax.nn.softmax(q @ k.T / np.sqrt(d), axis=-1) @ v


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 2**16), seq=st.integers(2, 12))
def test_bare_attention_is_permutation_equivariant(seed, seq):
    x = jax.random.normal(jax.random.key(seed), (seq, 16))
    perm = np.random.default_rng(seed).permutation(seq)
    np.testing.assert_allclose(attention(x[perm], jax.random.key(1)), attention(x, jax.random.key(1))[perm], atol=1e-5)


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 2**16), seq=st.integers(2, 12))
def test_position_encoding_breaks_equivariance(seed, seq):
    x = jax.random.normal(jax.random.key(seed), (seq, 16))
    perm = np.roll(np.arange(seq), 1)  # a permutation that moves every token
    pe = fp.sinusoidal_table(seq, 16)
    moved = attention(x[perm] + pe, jax.random.key(1))
    same_if_equivariant = attention(x + pe, jax.random.key(1))[perm]
    assert np.abs(np.asarray(moved - same_if_equivariant)).max() > 1e-3


def test_the_two_sentences():
    sys.path.insert(0, str(ROOT / "examples"))
    try:
        import word_order
    finally:
        sys.path.pop(0)
    assert word_order.compare("none") is True
    assert word_order.compare("sinusoidal") is False
    assert word_order.compare("learned") is False


def test_example_runs():
    out = subprocess.run([sys.executable, str(ROOT / "examples" / "word_order.py")], capture_output=True, text=True, check=True)
    assert "position=none       same outputs, reordered" in out.stdout
    assert out.stdout.count("different outputs") == 2
