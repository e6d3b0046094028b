"""Compile time of one decoding bucket of examples/models/llama.py: per bucket and per layer count.

    python benchmarks/compile_decode.py [--layers 1,2,4,8,16,30] [--buckets 8:1,8:8,32:64,128:64] [--before REV]

The model is shaped like SmolLM2-135M (width 576, 9 query / 3 key-value heads of 64, SiLU MLP 1536,
vocabulary 49152, tied head, float32), built *abstractly* (``nnx.eval_shape``): only the program is
compiled, no weight is allocated. For each (prompt bucket, new-token bucket) the whole bucketed
``generate`` program (prefill + the ``while_loop`` of decode steps) is lowered and compiled with
``jax.jit(...).lower(...).compile()``; the time is the wall time of ``lower`` + ``compile``, the
best of ``--rounds`` (fresh ``jax.clear_caches()`` before each). ``--before REV``: the same
measurement for the llama.py/common.py of git revision REV (the unrolled Python loop over layers)
in the same process, for the ratio. Batch 1. Not a test: nothing asserts a time. Report the load
(``uptime``) with the numbers: on a shared machine absolute times move, ratios in one process hold.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SHAPE = dict(
    vocab_size=49152,
    hidden_size=576,
    intermediate_size=1536,
    num_hidden_layers=30,
    num_attention_heads=9,
    num_key_value_heads=3,
    rms_norm_eps=1e-5,
    tie_word_embeddings=True,
)


def load_models(folder: Path):
    """``(common, llama)`` imported from ``folder`` (a fresh module pair, not the ones on sys.path)."""
    sys.path.insert(0, str(folder))
    try:
        modules = []
        for name in ("common", "llama"):
            spec = importlib.util.spec_from_file_location(name, folder / f"{name}.py")
            module = importlib.util.module_from_spec(spec)
            sys.modules[name] = module  # llama.py imports common
            spec.loader.exec_module(module)
            modules.append(module)
        return modules
    finally:
        sys.path.remove(str(folder))


def compile_seconds(common, llama, layers: int, prompt_bucket: int, new_bucket: int, rounds: int) -> float:
    import jax
    import jax.numpy as jnp
    import numpy as np
    from flax import nnx

    import flax_posenc as fp

    config = dict(SHAPE, num_hidden_layers=layers)
    rope = fp.RopeConfig(head_dim=64, max_position_embeddings=8192, rope_theta=100000.0)
    model = nnx.eval_shape(lambda: llama.Llama(config, rope, rngs=nnx.Rngs(0)))
    graphdef, state = nnx.split(model)
    prompt = jax.ShapeDtypeStruct((1, prompt_bucket), jnp.int32)
    mask = jax.ShapeDtypeStruct((1, prompt_bucket), jnp.bool_)
    scalar = jax.ShapeDtypeStruct((), jnp.int32)
    best = np.inf
    for _ in range(rounds):
        jax.clear_caches()
        t0 = time.perf_counter()
        common._generate_nnx.lower(graphdef, new_bucket, state, prompt, mask, scalar, scalar, scalar).compile()
        best = min(best, time.perf_counter() - t0)
    return best


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--layers", default="1,2,4,8,16,30")
    parser.add_argument("--buckets", default="8:1,8:8,32:64,128:64", help="prompt_bucket:new_bucket, comma-separated")
    parser.add_argument("--layers-bucket", default="8:8", help="the bucket of the per-layer-count table")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--before", help="a git revision whose examples/models/{common,llama}.py to compare")
    args = parser.parse_args(argv)
    sys.path.insert(0, str(ROOT))
    versions = {"scan (this tree)": ROOT / "examples" / "models"}
    if args.before:
        folder = Path(tempfile.mkdtemp(prefix="compile-before-"))
        for name in ("common", "llama"):
            text = subprocess.run(
                ["git", "-C", str(ROOT), "show", f"{args.before}:examples/models/{name}.py"],
                capture_output=True,
                text=True,
                check=True,
            ).stdout
            (folder / f"{name}.py").write_text(text)
        versions[f"unrolled ({args.before})"] = folder
    load = os.getloadavg()
    print(f"load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}, {os.cpu_count()} cores\n")
    layer_counts = [int(n) for n in args.layers.split(",")]
    buckets = [tuple(int(x) for x in b.split(":")) for b in args.buckets.split(",")]
    lp, ln = (int(x) for x in args.layers_bucket.split(":"))
    for label, folder in versions.items():
        common, llama = load_models(folder)
        print(f"### {label}\n\n| prompt bucket | new-token bucket | layers | compile (s) |\n|---|---|---|---|")
        for p, n in buckets:
            print(f"| {p} | {n} | 30 | {compile_seconds(common, llama, 30, p, n, args.rounds):.2f} |", flush=True)
        print(f"\n| layers | compile (s), bucket {lp}:{ln} |\n|---|---|")
        times = {}
        for layers in layer_counts:
            times[layers] = compile_seconds(common, llama, layers, lp, ln, args.rounds)
            print(f"| {layers} | {times[layers]:.2f} |", flush=True)
        print(f"\nmax/min over layer counts: {max(times.values()) / min(times.values()):.2f}\n")


if __name__ == "__main__":
    main()
