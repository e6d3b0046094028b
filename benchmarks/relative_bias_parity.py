"""Measure T5-style relative position bias parity with transformers (docs/relative-bias.md).

    python benchmarks/relative_bias_parity.py            # ~30 s on 2 cores; needs torch + transformers
    python benchmarks/relative_bias_parity.py --quick    # smaller scan, for the smoke test

Prints, as Markdown:

1. bucket mismatches of ``fp.relative_position_bucket`` (jitted) vs transformers'
   ``T5Attention._relative_position_bucket`` over every integer in [-2**20, 2**20];
2. each configuration's limits (exactly resolved distances, saturation distance), ours and read
   off transformers' buckets;
3. where exact arithmetic and transformers' float32 buckets differ (a scan of max_distance);
4. max |ours - transformers| of the bias on tiny random checkpoints (``compute_bias`` /
   ``compute_position_bias``), float32;
5. ``flax-posenc inspect`` and ``check --length 512`` on a checkpoint built from ``T5Config()``
   default shapes (d_model 512, 8 heads, 32 buckets, max_distance 128; vocab 64, one layer each).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import logging
import tempfile

import numpy as np


def hf_buckets(rp, bi, nb, md):
    import torch
    from transformers.models.t5.modeling_t5 import T5Attention

    return T5Attention._relative_position_bucket(
        torch.from_numpy(np.asarray(rp, np.int64)), bidirectional=bi, num_buckets=nb, max_distance=md
    ).numpy()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()

    import jax
    import jax.numpy as jnp
    import torch
    import transformers as tf

    import flax_posenc as fp
    from flax_posenc.conversion import load_relative_bias
    from flax_posenc.relative_bias_config import BucketConfig
    from flax_posenc.report.cli import main as cli

    tf.logging.set_verbosity_error()
    logging.getLogger("transformers").setLevel(logging.ERROR)
    configs = [(bi, nb, md) for bi in (True, False) for nb in (32, 128) for md in (128, 256)]

    print("## 1. Buckets vs transformers, every integer in [-2**20, 2**20]\n")
    print("| direction | num_buckets | max_distance | integers | mismatches |")
    print("|---|---|---|---|---|")
    reach = 2**16 if args.quick else 2**20
    rp = np.arange(-reach, reach + 1)
    for bi, nb, md in configs:
        ours = np.asarray(
            jax.jit(lambda r: fp.relative_position_bucket(r, bidirectional=bi, num_buckets=nb, max_distance=md))(
                jnp.asarray(rp, jnp.int32)
            )
        )
        bad = int((ours != hf_buckets(rp, bi, nb, md)).sum())
        print(f"| {'bidirectional' if bi else 'causal'} | {nb} | {md} | {rp.size} | {bad} |")

    print("\n## 2. Limits: distances resolved exactly, and where every distance shares the last bucket\n")
    print(
        "| direction | num_buckets | max_distance | exact distances | saturation distance | same as read off transformers |"
    )
    print("|---|---|---|---|---|---|")
    for bi, nb, md in configs:
        cfg = BucketConfig(nb, md, bi)
        ref = hf_buckets(-np.arange(4 * md), bi, nb, md)
        sat = int(np.argmax(ref == ref[-1]))
        shared = np.nonzero(ref[1:] == ref[:-1])[0]
        exact = int(shared[0]) - 1
        same = cfg.saturation_distance == sat and cfg.exact_limit == exact
        print(
            f"| {'bidirectional' if bi else 'causal'} | {nb} | {md} | 0..{cfg.exact_limit} | {cfg.saturation_distance} | {same} |"
        )

    print("\n## 3. Exact arithmetic vs transformers' float32 buckets\n")
    top = 300 if args.quick else 1024
    scanned, differ = 0, []
    for per_direction in (32, 64, 128):
        for md in range(per_direction // 2 + 1, top + 1):
            cfg = BucketConfig(per_direction, md, False)  # causal: per_direction == num_buckets
            n = np.arange(md + 2)
            a, b = cfg.buckets(-n), cfg.exact_buckets(-n)
            scanned += 1
            for d in n[a != b]:
                hf = int(hf_buckets(np.array([-d]), False, per_direction, md)[0])
                differ.append((per_direction, md, int(d), int(a[d]), hf, int(b[d])))
    print(
        f"{scanned} configurations scanned (buckets per direction 32, 64, 128; every max_distance up to {top}); "
        f"{len(differ)} distance(s) differ:\n"
    )
    print("| buckets per direction | max_distance | distance | ours (float32) | transformers | exact |")
    print("|---|---|---|---|---|---|")
    for row in differ:
        print("| " + " | ".join(map(str, row)) + " |")

    print("\n## 4. Bias vs transformers on tiny random checkpoints (float32)\n")
    torch.manual_seed(0)
    tiny = dict(vocab_size=40, d_model=8, d_kv=4, d_ff=16, num_heads=2, num_layers=2)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:

        def saved(model, name):
            path = f"{tmp}/{name}"
            model.eval().save_pretrained(path)
            return model, path

        for name, cls, cfg in (
            ("t5", tf.T5ForConditionalGeneration, tf.T5Config(**tiny)),
            (
                "mt5 (64 buckets, max_distance 256)",
                tf.MT5ForConditionalGeneration,
                tf.MT5Config(**tiny, relative_attention_num_buckets=64, relative_attention_max_distance=256),
            ),
            ("umt5 (layer 1)", tf.UMT5ForConditionalGeneration, tf.UMT5Config(**tiny)),
        ):
            model, path = saved(cls(cfg), name.split()[0])
            layer = 1 if name.startswith("umt5") else 0
            for stack_name, stack in (("encoder", model.encoder), ("decoder", model.decoder)):
                attn = stack.block[layer].layer[0].SelfAttention
                bias = fp.nnx.RelativePositionBias.from_pretrained(path, stack=stack_name, layer=layer)
                for q, k, start, what in ((512, 512, 0, "512 x 512"), (1, 512, 511, "decoding step at 511")):
                    with torch.no_grad():
                        ref = attn.compute_bias(q, k, past_seen_tokens=start)[0].numpy()
                    rows.append(
                        (name, stack_name, what, float(np.abs(np.asarray(bias(q, k, query_start=start)) - ref).max()))
                    )
        model, path = saved(tf.LongT5ForConditionalGeneration(tf.LongT5Config(**tiny)), "longt5")
        local = model.encoder.block[0].layer[0].LocalSelfAttention
        bl = local.block_len
        tab = load_relative_bias(path)
        with torch.no_grad():
            ref = local.compute_bias(bl)[0, 0].numpy()
        ours = fp.relative_position_bias(tab.weights, bl, 3 * bl, query_start=bl)
        rows.append(
            ("longt5", "encoder (local)", f"block {bl} x {3 * bl}", float(np.abs(np.asarray(ours) - ref).max()))
        )
        for buckets in (32, 64):
            mp = tf.MPNetModel(
                tf.MPNetConfig(
                    vocab_size=40,
                    hidden_size=8,
                    num_hidden_layers=1,
                    num_attention_heads=2,
                    intermediate_size=16,
                    relative_attention_num_buckets=buckets,
                )
            )
            model, path = saved(mp, f"mpnet{buckets}")
            with torch.no_grad():
                ref = model.encoder.compute_position_bias(torch.zeros(1, 512, 8))[0].numpy()
            lin, variables = fp.linen.RelativePositionBias.from_pretrained(path)
            rows.append(
                (
                    f"mpnet ({buckets}-row table)",
                    "encoder",
                    "512 x 512",
                    float(np.abs(np.asarray(lin.apply(variables, 512, 512)) - ref).max()),
                )
            )
    print("| checkpoint | stack | bias | max abs difference |")
    print("|---|---|---|---|")
    for name, stack, what, diff in rows:
        print(f"| {name} | {stack} | {what} | {diff:.1e} |")

    print("\n## 5. The command line on a checkpoint of T5Config() default shapes\n")
    with tempfile.TemporaryDirectory() as tmp:
        torch.manual_seed(0)
        path = f"{tmp}/t5-default-shapes"
        tf.T5ForConditionalGeneration(tf.T5Config(vocab_size=64, num_layers=1, num_decoder_layers=1)).save_pretrained(
            path
        )
        for argv in (["inspect", path], ["check", path, "--length", "512"]):
            buf = io.StringIO()
            with contextlib.redirect_stdout(buf):
                code = cli(argv)
            shown = [a.replace(path, "t5-default-shapes") for a in argv]
            print(f"$ flax-posenc {' '.join(shown)}")
            print(buf.getvalue().replace(path, "t5-default-shapes").rstrip())
            print(f"(exit {code})\n")


if __name__ == "__main__":
    main()
