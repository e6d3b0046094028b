"""Decode-step time of the scanned Llama (stacked layers, one lax.scan) against the same weights
as separate per-layer parameters in an unrolled Python loop (the structure before issue 38).

    python benchmarks/investigations/scan_step.py [LAYERS]      # default 8 (the unrolled one compiles slowly)

SmolLM2-shaped layers, batch 4, 96 cache slots, one token per step; best of 3 x 20 steps, twice.
Found (issue 38): XLA CPU copies each layer's weights out of the stack (a dynamic-slice fusion) every
step; with the cache carried whole through the scan the step is 0.92-1.11x the unrolled one at 8
layers (load 8-9: noisy). Not a test."""

import os
import sys
import time

sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parents[2] / "examples" / "models"))
import common
import jax
import jax.numpy as jnp
import llama
from flax import nnx

import flax_posenc as fp

L = int(sys.argv[1]) if len(sys.argv) > 1 else 8
config = dict(
    vocab_size=49152,
    hidden_size=576,
    intermediate_size=1536,
    num_hidden_layers=L,
    num_attention_heads=9,
    num_key_value_heads=3,
    rms_norm_eps=1e-5,
    tie_word_embeddings=True,
)
rope = fp.RopeConfig(head_dim=64, max_position_embeddings=8192, rope_theta=100000.0)
model = llama.Llama(config, rope, rngs=nnx.Rngs(0))
B, S = 4, 96
mask = jnp.ones((B, S), bool)
tok = jnp.ones((B, 1), jnp.int32)
pos = jnp.full((B, 1), 40, jnp.int32)
graphdef, state = nnx.split(model)


# scan
@jax.jit
def step_scan(state, cache, t):
    return nnx.merge(graphdef, state)(tok, mask, cache=cache, start=t, positions=pos)


# unrolled, separate per-layer params (the old structure)
lg, lstate = nnx.split(model.layers)
per_layer = [jax.tree.map(lambda x: jnp.array(x[i]), lstate) for i in range(L)]


@jax.jit
def step_unrolled(state, layers, cache, t):
    m = nnx.merge(graphdef, state)
    x = m.embed(tok)
    msk = common.causal_mask(1, S, start=t, key_mask=mask)
    ks, vs = [], []
    for i in range(L):
        x, c = nnx.merge(lg, layers[i])(
            x, mask=msk, layer_cache={"k": cache["k"][i], "v": cache["v"][i]}, start=t, positions=pos
        )
        ks.append(c["k"])
        vs.append(c["v"])
    return m.embed.attend(m.norm(x)), {"k": jnp.stack(ks), "v": jnp.stack(vs)}


cache = model.init_cache(B, S)
t = jnp.int32(40)
a = step_scan(state, cache, t)
b = step_unrolled(state, per_layer, cache, t)
print("max diff", float(jnp.abs(a[0] - b[0]).max()))


def bench(f, *args, n=20):
    jax.block_until_ready(f(*args))
    ts = []
    for _ in range(3):
        t0 = time.perf_counter()
        for _ in range(n):
            out = f(*args)
        jax.block_until_ready(out)
        ts.append((time.perf_counter() - t0) / n)
    return ts


for _ in range(2):
    s = bench(step_scan, state, cache, t)
    u = bench(step_unrolled, state, per_layer, cache, t)
    print(
        f"L={L} scan {min(s) * 1e3:.1f} ms unrolled {min(u) * 1e3:.1f} ms ratio {min(s) / min(u):.2f}",
        os.getloadavg()[0],
    )
