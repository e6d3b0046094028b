"""Compile time of one decoding bucket of examples/models/{llama,gpt2,bloom}.py: per bucket and per layer count.

    python benchmarks/compile_decode.py [--model llama|gpt2|bloom] [--layers 1,2,4,8,16,30]
        [--buckets 8:1,8:8,32:64,128:64] [--before REV]

``--model llama`` (default) is shaped like SmolLM2-135M (30 layers, width 576, 9 query / 3 key-value
heads of 64, SiLU MLP 1536, vocabulary 49152, tied head), ``gpt2`` like GPT-2 small (12 layers,
width 768, 12 heads, 1024 positions, vocabulary 50257), ``bloom`` like bloom-560m (24 layers, width
1024, 16 heads, vocabulary 250880); float32, built *abstractly* (``nnx.eval_shape``, then ``eval()``):
only the program is compiled, no weight is allocated. For each (prompt bucket, new-token bucket) the
whole bucketed ``generate`` program (prefill + the ``while_loop`` of decode steps) of the model at its
own layer count is lowered and compiled with ``jax.jit(...).lower(...).compile()``; the time is the
wall time of ``lower`` + ``compile``, the best of ``--rounds`` (fresh ``jax.clear_caches()`` before
each; for the per-layer-count table the rounds go over all the layer counts in turn, so that a
drifting load hits each). ``--before REV``: the same measurement for examples/models of git revision
REV (e.g. the unrolled Python loop over layers) in the same process, for the ratio. Batch 1. Not a
test: nothing asserts a time. Report the load (``uptime``) with the numbers: on a shared machine
absolute times move, ratios in one process hold.
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
GPT2_SMALL = dict(vocab_size=50257, n_embd=768, n_head=12, n_layer=12, n_positions=1024)
BLOOM_560M = dict(vocab_size=250880, hidden_size=1024, n_head=16, n_layer=24)
#: model -> its real layer count (the per-bucket table's)
LAYERS = {"llama": 30, "gpt2": 12, "bloom": 24}


def load_models(folder: Path, name: str = "llama"):
    """``(common, model)`` imported from ``folder`` (a fresh module pair, not the ones on sys.path)."""
    sys.path.insert(0, str(folder))
    for stale in ("common", "serving", name):  # imported by the model module: this folder's, not another's
        sys.modules.pop(stale, None)
    try:
        modules = []
        for module_name in ("common", name):
            spec = importlib.util.spec_from_file_location(module_name, folder / f"{module_name}.py")
            module = importlib.util.module_from_spec(spec)
            sys.modules[module_name] = module  # the model module imports common
            spec.loader.exec_module(module)
            modules.append(module)
        return modules
    finally:
        sys.path.remove(str(folder))


def build(example, name: str, layers: int):
    """The model ``name`` of module ``example`` with ``layers`` layers, abstract, in eval mode."""
    from flax import nnx

    import flax_posenc as fp

    if name == "gpt2":
        make = lambda: example.GPT2(dict(GPT2_SMALL, n_layer=layers), rngs=nnx.Rngs(0))  # noqa: E731
    elif name == "bloom":
        alibi = fp.AlibiConfig(num_heads=BLOOM_560M["n_head"])
        make = lambda: example.Bloom(dict(BLOOM_560M, n_layer=layers), alibi, rngs=nnx.Rngs(0))  # noqa: E731
    else:
        rope = fp.RopeConfig(head_dim=64, max_position_embeddings=8192, rope_theta=100000.0)
        make = lambda: example.Llama(dict(SHAPE, num_hidden_layers=layers), rope, rngs=nnx.Rngs(0))  # noqa: E731
    model = nnx.eval_shape(make)
    model.eval()  # dropout off, as from_pretrained leaves it
    return model


def compile_seconds(common, example, layers: int, prompt_bucket: int, new_bucket: int, rounds: int, name="llama"):
    import jax
    import jax.numpy as jnp
    import numpy as np
    from flax import nnx

    graphdef, state = nnx.split(build(example, name, layers))
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
    parser.add_argument("--model", choices=sorted(LAYERS), default="llama")
    parser.add_argument("--layers", default="1,2,4,8,16,30")
    parser.add_argument("--buckets", default="8:1,8:8,32:64,128:64", help="prompt_bucket:new_bucket, comma-separated")
    parser.add_argument("--layers-bucket", default="8:8", help="the bucket of the per-layer-count table")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--before", help="a git revision whose examples/models/*.py to compare")
    args = parser.parse_args(argv)
    sys.path.insert(0, str(ROOT))
    versions = {"this tree": ROOT / "examples" / "models"}
    if args.before:
        folder = Path(tempfile.mkdtemp(prefix="compile-before-"))
        listed = subprocess.run(
            ["git", "-C", str(ROOT), "ls-tree", "--name-only", args.before, "examples/models/"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.split()
        for path in (p for p in listed if p.endswith(".py")):
            text = subprocess.run(
                ["git", "-C", str(ROOT), "show", f"{args.before}:{path}"], capture_output=True, text=True, check=True
            ).stdout
            (folder / Path(path).name).write_text(text)
        versions[args.before] = folder
    load = os.getloadavg()
    print(f"load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}, {os.cpu_count()} cores\n")
    layer_counts = [int(n) for n in args.layers.split(",")]
    buckets = [tuple(int(x) for x in b.split(":")) for b in args.buckets.split(",")]
    lp, ln = (int(x) for x in args.layers_bucket.split(":"))
    full = LAYERS[args.model]
    for label, folder in versions.items():
        common, example = load_models(folder, args.model)
        print(
            f"### {args.model}, {label}\n\n| prompt bucket | new-token bucket | layers | compile (s) |\n|---|---|---|---|"
        )
        for p, n in buckets:
            seconds = compile_seconds(common, example, full, p, n, args.rounds, args.model)
            print(f"| {p} | {n} | {full} | {seconds:.2f} |", flush=True)
        print(f"\n| layers | compile (s), bucket {lp}:{ln} |\n|---|---|")
        times = dict.fromkeys(layer_counts, float("inf"))
        for _ in range(args.rounds):  # rounds interleaved over the layer counts: a drifting load hits all
            for layers in layer_counts:
                times[layers] = min(times[layers], compile_seconds(common, example, layers, lp, ln, 1, args.model))
        for layers in layer_counts:
            print(f"| {layers} | {times[layers]:.2f} |", flush=True)
        print(f"\nmax/min over layer counts: {max(times.values()) / min(times.values()):.2f}\n")


if __name__ == "__main__":
    main()
