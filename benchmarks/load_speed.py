"""Loading at the speed of the bytes: ``from_pretrained`` against reading the tensors with safetensors.

    python benchmarks/load_speed.py [--layers 30] [--repeats 3] [--before REV]

Writes a SmolLM2-135M-shaped Llama checkpoint (width 576, 30 layers, 9/3 heads of 64, MLP 1536,
vocabulary 49152, tied head; float32, 538 MB) with numpy random tensors and its ``config.json``
(no transformers needed), and a GPT-2-sized input block checkpoint (``wte``/``wpe``), then times in
this process, median of ``--repeats`` (each after the page cache holds the file):

- ``safetensors.numpy.load_file``: every tensor of the file read into numpy (the floor);
- ``examples/models/llama.py from_pretrained``: built abstractly (``nnx.eval_shape``), filled from
  the file; ``--before REV``: the same for the llama.py/common.py of git revision REV (random
  initialisation, then overwritten), for the ratio;
- ``fp.nnx.TransformerInput.from_pretrained`` and ``fp.linen.TransformerInput.from_pretrained``
  on the input block checkpoint, against ``load_file`` of it.

Each row's ratio is against its file's ``load_file``. The results are on device (``block_until_ready``).
Not a test: nothing asserts a time. Report the load (``uptime``) with the numbers.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).parent))

SHAPE = dict(
    model_type="llama",
    vocab_size=49152,
    hidden_size=576,
    intermediate_size=1536,
    num_hidden_layers=30,
    num_attention_heads=9,
    num_key_value_heads=3,
    head_dim=64,
    max_position_embeddings=8192,
    rope_theta=100000.0,
    rms_norm_eps=1e-5,
    tie_word_embeddings=True,
)


def write_llama(folder: Path, layers: int) -> Path:
    import numpy as np
    from safetensors.numpy import save_file

    c = dict(SHAPE, num_hidden_layers=layers)
    d, inner, hd = c["hidden_size"], c["intermediate_size"], c["head_dim"]
    q, kv = c["num_attention_heads"] * hd, c["num_key_value_heads"] * hd
    rng = np.random.default_rng(0)
    t = {"model.embed_tokens.weight": (c["vocab_size"], d), "model.norm.weight": (d,)}
    for i in range(layers):
        p = f"model.layers.{i}."
        t |= {
            p + "input_layernorm.weight": (d,),
            p + "post_attention_layernorm.weight": (d,),
            p + "self_attn.q_proj.weight": (q, d),
            p + "self_attn.k_proj.weight": (kv, d),
            p + "self_attn.v_proj.weight": (kv, d),
            p + "self_attn.o_proj.weight": (d, q),
            p + "mlp.gate_proj.weight": (inner, d),
            p + "mlp.up_proj.weight": (inner, d),
            p + "mlp.down_proj.weight": (d, inner),
        }
    save_file({k: rng.standard_normal(s, np.float32) * 0.02 for k, s in t.items()}, str(folder / "model.safetensors"))
    (folder / "config.json").write_text(json.dumps(c))
    return folder


def write_block(folder: Path) -> Path:
    import numpy as np
    from safetensors.numpy import save_file

    rng = np.random.default_rng(0)
    save_file(
        {
            "wte.weight": rng.standard_normal((50257, 768), np.float32),
            "wpe.weight": rng.standard_normal((1024, 768), np.float32),
        },
        str(folder / "model.safetensors"),
    )
    config = {"model_type": "gpt2", "vocab_size": 50257, "n_embd": 768, "n_positions": 1024, "n_layer": 1, "n_head": 12}
    (folder / "config.json").write_text(json.dumps(config))
    return folder


def timed(fn, repeats: int) -> float:
    import jax

    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        jax.block_until_ready(jax.tree.leaves(fn(), is_leaf=lambda x: hasattr(x, "block_until_ready")))
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--layers", type=int, default=30)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--before", help="a git revision whose examples/models/{common,llama}.py to compare")
    args = parser.parse_args(argv)
    from compile_decode import load_models
    from flax import nnx
    from safetensors.numpy import load_file

    import flax_posenc as fp

    load = os.getloadavg()
    print(f"load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}, {os.cpu_count()} cores\n")
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "llama").mkdir()
        (Path(tmp) / "block").mkdir()
        llama_dir = write_llama(Path(tmp) / "llama", args.layers)
        block_dir = write_block(Path(tmp) / "block")
        mb = (llama_dir / "model.safetensors").stat().st_size / 1e6
        floor = timed(lambda: list(load_file(str(llama_dir / "model.safetensors")).values()), args.repeats)
        rows = [(f"safetensors load_file (Llama, {mb:.0f} MB)", floor, floor)]
        _, llama = load_models(ROOT / "examples" / "models")
        rows.append(
            (
                "llama.from_pretrained (abstract, filled)",
                timed(lambda: nnx.state(llama.from_pretrained(llama_dir)), args.repeats),
                floor,
            )
        )
        if args.before:
            folder = Path(tmp) / "before"
            folder.mkdir()
            for name in ("common", "llama"):
                text = subprocess.run(
                    ["git", "-C", str(ROOT), "show", f"{args.before}:examples/models/{name}.py"],
                    capture_output=True,
                    text=True,
                    check=True,
                ).stdout
                (folder / f"{name}.py").write_text(text)
            _, old = load_models(folder)
            rows.append(
                (
                    f"llama.from_pretrained ({args.before}: random init, overwritten)",
                    timed(lambda: nnx.state(old.from_pretrained(llama_dir)), args.repeats),
                    floor,
                )
            )
        bmb = (block_dir / "model.safetensors").stat().st_size / 1e6
        bfloor = timed(lambda: list(load_file(str(block_dir / "model.safetensors")).values()), args.repeats)
        rows.append((f"safetensors load_file (GPT-2 input block, {bmb:.0f} MB)", bfloor, bfloor))
        rows.append(
            (
                "fp.nnx.TransformerInput.from_pretrained",
                timed(lambda: nnx.state(fp.nnx.TransformerInput.from_pretrained(block_dir)), args.repeats),
                bfloor,
            )
        )
        rows.append(
            (
                "fp.linen.TransformerInput.from_pretrained",
                timed(lambda: fp.linen.TransformerInput.from_pretrained(block_dir)[1], args.repeats),
                bfloor,
            )
        )
    print(f"median of {args.repeats}, {args.layers} layers\n")
    print("| load | seconds | / safetensors |\n|---|---|---|")
    for name, seconds, base in rows:
        print(f"| {name} | {seconds:.2f} | {seconds / base:.2f}x |")


if __name__ == "__main__":
    main()
