"""Causal self-attention with RoPE or ALiBi on top of the library's input block.

    python examples/attention_rope.py

The input block carries no position (``TransformerInput.from_arguments(position="none")``): positions enter
inside attention, as in Llama (RoPE rotates queries and keys) or BLOOM/MPT (ALiBi biases the
scores). Both depend only on relative positions, so shifting every position by the same amount
(a sequence continuing at position 100000 of a long context) leaves the outputs unchanged, to
float32 rounding -- which holds at long range only because the rotation angles are exact.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

import flax_posenc as fp

VOCAB, DIM, HEADS = 64, 64, 4
HEAD_DIM = DIM // HEADS


class Attention(nnx.Module):
    """Multi-head causal self-attention; ``position`` is ``"rope"`` or ``"alibi"``."""

    def __init__(self, position: str, *, rngs: nnx.Rngs):
        self.qkv = nnx.Linear(DIM, 3 * DIM, use_bias=False, rngs=rngs)
        self.out = nnx.Linear(DIM, DIM, use_bias=False, rngs=rngs)
        self.position = position
        self.rope = fp.nnx.RotaryEmbedding(fp.RopeConfig(head_dim=HEAD_DIM, rope_theta=10000.0))
        self.alibi = fp.nnx.ALiBiBias(HEADS)

    def __call__(self, x: jax.Array, start: int = 0) -> jax.Array:
        batch, seq, _ = x.shape
        q, k, v = jnp.split(self.qkv(x).reshape(batch, seq, 3 * HEADS, HEAD_DIM), 3, axis=2)  # (b, s, h, d)
        positions = start + jnp.arange(seq)
        if self.position == "rope":
            q, k = self.rope(q, positions), self.rope(k, positions)
        scores = jnp.einsum("bqhd,bkhd->bhqk", q, k) / np.sqrt(HEAD_DIM)
        if self.position == "alibi":
            scores = scores + self.alibi(query_positions=positions, key_positions=positions)  # includes the causal mask
        else:
            scores = jnp.where(jnp.tril(jnp.ones((seq, seq), bool)), scores, jnp.finfo(scores.dtype).min)
        weights = jax.nn.softmax(scores, axis=-1)
        return self.out(jnp.einsum("bhqk,bkhd->bqhd", weights, v).reshape(batch, seq, DIM))


class TinyModel(nnx.Module):
    def __init__(self, position: str, *, rngs: nnx.Rngs):
        self.embed = fp.nnx.TransformerInput.from_arguments(VOCAB, DIM, position="none", rngs=rngs)
        self.attention = Attention(position, rngs=rngs)

    def __call__(self, ids: jax.Array, start: int = 0) -> jax.Array:
        return self.attention(self.embed(ids), start)


def main() -> None:
    ids = jax.random.randint(jax.random.key(0), (2, 12), 0, VOCAB)
    for position in ("rope", "alibi"):
        model = TinyModel(position, rngs=nnx.Rngs(0))
        near = model(ids)
        far = model(ids, start=100_000)
        shift = float(jnp.abs(near - far).max())
        swapped = model(ids[:, ::-1])[:, ::-1]
        order = float(jnp.abs(near - swapped).max())
        print(
            f"{position:5s}: output {tuple(near.shape)}; positions shifted by 100000 -> max change {shift:.1e} "
            f"(relative positions only); order reversed -> max change {order:.2f} (order is seen)"
        )
    # the naive float32 angle would not keep the shift invariance at long range:
    cfg = fp.RopeConfig(head_dim=HEAD_DIM)
    exact = fp.analysis.rope_offset_invariance(cfg, length=256, start=2**20).max_spread
    naive = fp.analysis.rope_offset_invariance(cfg, length=256, start=2**20, naive=True).max_spread
    print(f"score spread over positions near 2**20: exact angles {exact:.1e}, naive float32 angles {naive:.1e}")


if __name__ == "__main__":
    main()
