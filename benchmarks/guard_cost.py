"""What the overflow guard costs at run time: a decode step and a prefill, with and without it.

Same GPT-2-shaped input block (50257 x 768 words, 1024 x 768 positions), same inputs, one
process, interleaved repeats, medians:

- decode: batch 1, one token, the position a traced ``start`` (a decoding loop's counter).
  ``on_overflow="error"`` (the guard: a reduction and a ``lax.cond`` around a host callback that
  runs only on overflow) against ``"clip"`` (no check) and the hand-written
  ``word[ids] + wpe[start]`` under ``jax.jit``.
- prefill: 16 x 1024 tokens with traced ``position_ids`` (error vs clip), and with default
  positions, which are checked while tracing and cost nothing at run time.

Usage: ``python benchmarks/guard_cost.py [--repeats N]``; prints a table and one JSON line.
"""

from __future__ import annotations

import argparse
import json
import time

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

import flax_posenc as fp


def timer(fn, *args, inner: int):
    jax.block_until_ready(fn(*args))  # compile + warm

    def once():
        t0 = time.perf_counter()
        for _ in range(inner):
            out = fn(*args)
        jax.block_until_ready(out)
        return (time.perf_counter() - t0) / inner

    return once


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=15, help="interleaved rounds (median reported)")
    parser.add_argument("--vocab", type=int, default=50257)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--seq", type=int, default=1024)
    args = parser.parse_args(argv)

    blocks = {
        policy: fp.nnx.TransformerInput.from_arguments(
            args.vocab, 768, num_positions=1024, on_overflow=policy, rngs=nnx.Rngs(0)
        )
        for policy in ("error", "clip")
    }
    graphdef = {p: nnx.split(b)[0] for p, b in blocks.items()}
    state = nnx.split(blocks["error"])[1]
    word, wpe = state["word_embeddings"][...], state["position_embeddings"][...]

    def decode(policy):
        return jax.jit(lambda s, ids, t: nnx.merge(graphdef[policy], s)(ids, start=t))

    def prefill(policy):
        return jax.jit(lambda s, ids, pos: nnx.merge(graphdef[policy], s)(ids, position_ids=pos))

    prefill_default = jax.jit(lambda s, ids: nnx.merge(graphdef["error"], s)(ids))
    by_hand = jax.jit(lambda ids, t: word[ids] + wpe[t])

    one = jnp.array([[42]], jnp.int32)
    t = jnp.int32(700)
    ids = jnp.asarray(np.random.default_rng(0).integers(0, args.vocab, (args.batch, args.seq)), jnp.int32)
    pos = jnp.broadcast_to(jnp.arange(args.seq, dtype=jnp.int32), ids.shape)
    cases = {
        "decode_guard": timer(decode("error"), state, one, t, inner=200),
        "decode_clip": timer(decode("clip"), state, one, t, inner=200),
        "decode_by_hand": timer(by_hand, one, t, inner=200),
        "prefill_guard": timer(prefill("error"), state, ids, pos, inner=3),
        "prefill_clip": timer(prefill("clip"), state, ids, pos, inner=3),
        "prefill_static": timer(prefill_default, state, ids, inner=3),
    }
    samples = {k: [] for k in cases}
    for _ in range(args.repeats):
        for name, once in cases.items():
            samples[name].append(once())
    med = {k: float(np.median(v)) for k, v in samples.items()}
    ratios = {
        "decode guard/clip": med["decode_guard"] / med["decode_clip"],
        "decode guard/by-hand": med["decode_guard"] / med["decode_by_hand"],
        "prefill guard/clip": med["prefill_guard"] / med["prefill_clip"],
        "prefill static/clip": med["prefill_static"] / med["prefill_clip"],
    }
    for name, seconds in med.items():
        print(f"{name:16s} {seconds * 1e6:10.1f} us")
    for name, ratio in ratios.items():
        print(f"{name:22s} {ratio:6.3f}x")
    result = {"median_seconds": med, "ratios": ratios, "repeats": args.repeats, "backend": jax.default_backend()}
    print(json.dumps(result))
    return result


if __name__ == "__main__":
    main()
