"""Attention cannot tell word order; a position encoding can.

    python examples/word_order.py

A bare self-attention layer is permutation-equivariant: "the server rejected the request" and
"the request rejected the server" contain the same tokens, and the layer's outputs for the
second are just the first's, reordered. Add a position encoding (sinusoidal or learned) before
the layer and the two sentences get genuinely different representations.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

import flax_posenc as fp

VOCAB = {"the": 0, "server": 1, "rejected": 2, "request": 3}
DIM = 32


def encode(sentence: str) -> jnp.ndarray:
    return jnp.array([VOCAB[w] for w in sentence.split()])


def self_attention(x: jnp.ndarray, key: jax.Array) -> jnp.ndarray:
    """One head of softmax(QK^T / sqrt(d)) V with fixed random projections, (seq, d) -> (seq, d)."""
    wq, wk, wv = jax.random.normal(key, (3, x.shape[-1], x.shape[-1])) / np.sqrt(x.shape[-1])
    q, k, v = x @ wq, x @ wk, x @ wv
    return jax.nn.softmax(q @ k.T / np.sqrt(x.shape[-1]), axis=-1) @ v


def same_up_to_reordering(a: np.ndarray, b: np.ndarray, atol: float = 1e-5) -> bool:
    """True when every row of ``a`` appears in ``b`` and vice versa (a multiset of rows)."""
    dist = np.abs(a[:, None, :] - b[None, :, :]).max(-1)
    return bool((dist.min(1) < atol).all() and (dist.min(0) < atol).all())


def compare(position: str) -> bool:
    """Embed both sentences with ``position`` encoding, attend, and compare the outputs."""
    block = fp.nnx.TransformerInput.from_arguments(
        len(VOCAB), DIM, num_positions=16, position=position, rngs=nnx.Rngs(0)
    )
    outputs = [
        np.asarray(self_attention(block(encode(s)), jax.random.key(1)))
        for s in ("the server rejected the request", "the request rejected the server")
    ]
    return same_up_to_reordering(*outputs)


def main() -> None:
    for position in ("none", "sinusoidal", "learned"):
        same = compare(position)
        verdict = "same outputs, reordered: order is invisible" if same else "different outputs: order is seen"
        print(f"position={position:<10} {verdict}")


if __name__ == "__main__":
    main()
