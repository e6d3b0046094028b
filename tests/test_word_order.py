"""Self-attention is permutation-equivariant; adding a position encoding breaks that."""

from __future__ import annotations

import runpy
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from helpers import sinusoid
from hypothesis import given, settings
from hypothesis import strategies as st

import flax_posenc as fp

ROOT = Path(__file__).resolve().parents[1]


VOCAB, DIM = 50, 16
BLOCKS = {
    name: fp.nnx.TransformerInput.from_arguments(VOCAB, DIM, num_positions=16, position=name, rngs=nnx.Rngs(0))
    for name in ("none", "sinusoidal", "learned")
}


# fixed random projections, drawn once on the host (drawn inside the jitted function, threefry
# made each compile take seconds)
PROJECTIONS = np.random.default_rng(1).standard_normal((3, DIM, DIM)).astype(np.float32) / np.sqrt(DIM)


def attention(x):
    wq, wk, wv = PROJECTIONS
    q, k, v = x @ wq, x @ wk, x @ wv
    return jax.nn.softmax(q @ k.T / np.sqrt(x.shape[-1]), axis=-1) @ v


@nnx.jit
def embed_and_attend(block, ids):
    """The library's input block, then one bare attention head (fixed random projections)."""
    return attention(block(ids))


def _ids_and_perm(seed, seq):
    rng = np.random.default_rng(seed)
    ids = rng.choice(VOCAB, size=seq, replace=False)  # distinct tokens: a moved token is a changed row
    return jnp.asarray(ids), np.roll(np.arange(seq), 1)  # a permutation that moves every token


SEQS = [3, 8]  # two shapes: each traced once under nnx.jit


@settings(max_examples=8, deadline=None)
@given(seed=st.integers(0, 2**16), seq=st.sampled_from(SEQS))
def test_no_position_encoding_is_permutation_equivariant(seed, seq):
    ids, perm = _ids_and_perm(seed, seq)
    block = BLOCKS["none"]
    np.testing.assert_allclose(embed_and_attend(block, ids[perm]), embed_and_attend(block, ids)[perm], atol=1e-5)


@settings(max_examples=8, deadline=None)
@given(seed=st.integers(0, 2**16), seq=st.sampled_from(SEQS))
def test_sinusoidal_encoding_breaks_equivariance(seed, seq):
    ids, perm = _ids_and_perm(seed, seq)
    block = BLOCKS["sinusoidal"]
    moved = embed_and_attend(block, ids[perm])
    same_if_equivariant = embed_and_attend(block, ids)[perm]
    assert np.abs(np.asarray(moved - same_if_equivariant)).max() > 1e-3


@pytest.mark.parametrize("name", ["sinusoidal", "learned"])
def test_position_rows_depend_on_position_not_token(name):
    """What breaks equivariance: row i gets the same encoding whatever token stands there."""
    block = BLOCKS[name]
    word = np.asarray(block.word_embeddings[...])
    ids, perm = _ids_and_perm(7, 8)
    pe = np.asarray(block(ids[perm])) - word[np.asarray(ids)[perm]]
    np.testing.assert_allclose(pe, np.asarray(block(ids)) - word[np.asarray(ids)], atol=1e-6)
    assert np.abs(np.diff(pe, axis=0)).max() > 0  # and the rows differ between positions
    if name == "sinusoidal":
        np.testing.assert_allclose(pe, sinusoid(8, DIM), atol=2e-6)
    else:
        np.testing.assert_allclose(pe, np.asarray(block.position_embeddings[...])[:8], atol=1e-6)


def test_the_two_sentences_script(capsys):
    """examples/word_order.py run as a script (in this process: its eager ops are already compiled
    here, a subprocess would start jax and compile them again): one verdict line per encoding."""
    runpy.run_path(str(ROOT / "examples" / "word_order.py"), run_name="__main__")
    assert capsys.readouterr().out.splitlines() == [
        "position=none       same outputs, reordered: order is invisible",
        "position=sinusoidal different outputs: order is seen",
        "position=learned    different outputs: order is seen",
    ]
