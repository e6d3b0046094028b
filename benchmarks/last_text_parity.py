"""Parity of issue 36's last text mechanisms with transformers' own modules (tiny checkpoints, CPU).

For each: build the conformance case's tiny model (``tests/conformance/tiny.py``), save it, read
it with ``inspect_source`` and compare our values with the model's own position module:

- ``axial`` (Reformer): rows against ``embeddings.position_embeddings(arange(limit))``;
- ``resampled`` (SAM3-Lite text): ``rows_for(n)`` (float64, rounded to float32) against
  ``embeddings.position_embedding(n)`` for n in 1, 7, 64, 100, 257, in float32 ulps of the table's
  largest value;
- ``relative_sinusoid`` (XLNet): ``table(q, k)`` against ``relative_positional_encoding(q, k)``;
- ``segment_bias`` (CPM-Ant): ``bias(segments)`` against ``position_bias`` on random segments;
- ``half_reversed`` RoPE (nanochat): ``fp.apply_rope_qk`` against its ``apply_rotary_pos_emb``.

    python benchmarks/last_text_parity.py
"""

from __future__ import annotations

import pathlib
import sys
import tempfile

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))


def _record(model_type: str):
    from conformance.tiny import quiet, tiny_model

    from flax_posenc.conversion import inspect_source

    model = tiny_model(model_type)
    directory = pathlib.Path(tempfile.mkdtemp())
    with quiet():
        model.save_pretrained(directory)
    return model, inspect_source(directory).mechanisms[0]


def main() -> int:
    import torch

    import flax_posenc as fp

    model, mech = _record("reformer")
    with torch.no_grad():
        theirs = model.embeddings.position_embeddings(torch.arange(mech.limit)[None])[0].numpy()
    print(
        f"axial (reformer): limit {mech.limit}, max |ours - theirs| = {np.abs(mech.record.table.weights - theirs).max():.3g}"
    )

    model, mech = _record("sam3_lite_text_text_model")
    ulp = np.spacing(np.float32(np.abs(mech.record.table.weights).max()))
    worst = 0.0
    for n in (1, 7, 64, 100, 257):
        with torch.no_grad():
            theirs = model.embeddings.position_embedding(n)[0].numpy().astype(np.float64)
        ours = mech.record.rows_for(n).astype(np.float32).astype(np.float64)
        worst = max(worst, float(np.abs(ours - theirs).max() / ulp))
    print(f"resampled (sam3_lite_text_text_model): max |ours - theirs| = {worst:.3g} float32 ulps of the largest value")

    model, mech = _record("xlnet")
    worst = 0.0
    for q, k in ((1, 1), (7, 7), (5, 12), (64, 64)):
        with torch.no_grad():
            theirs = model.relative_positional_encoding(q, k)[:, 0].double().numpy()
        worst = max(worst, float(np.abs(mech.record.table(q, k) - theirs).max()))
    print(f"relative_sinusoid (xlnet): max |ours - theirs| = {worst:.3g}")

    model, mech = _record("cpmant")
    rng = np.random.default_rng(0)
    worst = 0.0
    for n in (9, 300):
        seg = rng.integers(0, 3, n)
        pos = torch.arange(n)[None]
        with torch.no_grad():
            theirs = model.position_bias(pos, pos, torch.from_numpy(seg)[None], torch.from_numpy(seg)[None])[0].numpy()
        worst = max(worst, float(np.abs(mech.record.bias(seg) - theirs).max()))
    print(f"segment_bias (cpmant): max |ours - theirs| = {worst:.3g}")

    model, mech = _record("nanochat")
    module = sys.modules[type(model).__module__]
    rng = np.random.default_rng(0)
    q = rng.standard_normal((1, 2, 64, mech.record.rope.head_dim)).astype(np.float32)
    with torch.no_grad():
        cos, sin = model.rotary_emb(torch.zeros(1), torch.arange(64)[None])
        ref, _ = module.apply_rotary_pos_emb(torch.from_numpy(q), torch.from_numpy(q), cos, sin)
    ours, _ = fp.apply_rope_qk(q, q, mech.record.rope, seq_axis=-2)
    print(f"half_reversed RoPE (nanochat): max |ours - theirs| = {np.abs(np.asarray(ours) - ref.numpy()).max():.3g}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
