"""SAM/ViTDet decomposed relative positions: ours and transformers' float32 against float64, in ulps.

    python benchmarks/decomposed_rel_pos_parity.py                     # ~30 s on 2 cores

SAM ViT-B's published sizes (1024 px / 16: a 64 x 64 grid; 14 x 14 windows; head_dim 64): a
window table (27 rows) and a global one (127 rows), N(0, 1) values (a fresh model's are zeros),
given to ``SamVisionAttention.get_rel_pos`` (transformers' float32) and to
``fp.decomposed_rel_pos_table`` (ours, float32), both against
``flax_posenc.rel_pos_config.rel_pos_table_float64`` (the formula in float64), at the trained size
(no resampling), at other sizes (resampled linearly) and with ``q != k``; then the whole bias
(``get_decomposed_rel_pos`` against ``fp.decomposed_rel_pos_bias``) on random queries. Columns: max
|difference| in float32 ulps of the table's (bias's) largest magnitude. Prints a Markdown table
(docs/vision-audio.md).
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

#: (what, rows, q_size, k_size)
CASES = (
    ("window 14, as trained", 27, 14, 14),
    ("window 14 -> 16", 27, 16, 16),
    ("window 14 -> 10", 27, 10, 10),
    ("global 64, as trained", 127, 64, 64),
    ("global 64 -> 96 (1536 px)", 127, 96, 96),
    ("global 64 -> 40 (640 px)", 127, 40, 40),
    ("global 64, q 64 / k 32", 127, 64, 32),
)


def main() -> int:
    import torch
    from conformance.reference import rel_pos_parity
    from transformers import SamVisionConfig
    from transformers.models.sam.modeling_sam import SamVisionAttention

    import flax_posenc as fp
    from flax_posenc.rel_pos_config import decomposed_rel_pos_float64

    torch.set_num_threads(1)
    attention = SamVisionAttention(SamVisionConfig(hidden_size=64, num_attention_heads=1, use_rel_pos=True), 14)
    rng = np.random.default_rng(0)
    print("| table | rows -> resampled | transformers float32 vs float64 | ours vs float64 | ours vs transformers |")
    print("|---|---|---|---|---|")
    for what, rows, q, k in CASES:
        table = rng.standard_normal((rows, 64)).astype(np.float32)
        theirs, ours, between = rel_pos_parity(attention.get_rel_pos, table, q, k)
        print(f"| {what} | {rows} -> {2 * max(q, k) - 1} | {theirs:.2f} | {ours:.2f} | {between:.2f} |")
    for what, rows, size in (("bias, 14 x 14 window", 27, (14, 14)), ("bias, 64 x 64 -> 80 x 80", 127, (80, 80))):
        rh, rw = (rng.standard_normal((rows, 64)).astype(np.float32) for _ in range(2))
        query = rng.standard_normal((1, size[0] * size[1], 64)).astype(np.float32)
        ref = decomposed_rel_pos_float64(query, rh, rw, size, size)
        with torch.no_grad():
            theirs = attention.get_decomposed_rel_pos(
                torch.from_numpy(query), torch.from_numpy(rh), torch.from_numpy(rw), size, size
            )
        theirs = theirs.reshape(ref.shape).double().numpy()
        ours = np.asarray(fp.decomposed_rel_pos_bias(query, rh, rw, size, size), np.float64)
        ulp = float(np.spacing(np.float32(np.abs(ref).max())))
        t, o, d = (float(np.abs(a - b).max() / ulp) for a, b in ((theirs, ref), (ours, ref), (ours, theirs)))
        print(f"| {what} | {rows} -> {2 * size[0] - 1} | {t:.2f} | {o:.2f} | {d:.2f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
