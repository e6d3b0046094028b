"""Parity of the document and time series positions: float32 ours vs transformers vs float64 numpy, in ulps.

Documents (kind ``bbox_2d``): a one-layer LayoutLM, LayoutLMv3 and LiLT at their released widths
(768, 1024 coordinates), random weights, built by transformers; 500 random boxes (x0 <= x1,
y0 <= y1, the extremes included). Ours is :func:`flax_posenc.bbox_embedding` (float32, jitted);
the float64 reference gathers the checkpoint's tables in float64 and sums or concatenates.
transformers' own value: LayoutLMv3's ``calculate_spatial_position_embeddings``; LiLT's
concatenation as its layout stream takes it (a forward hook on ``box_linear_embeddings``);
LayoutLM's sum enters its LayerNorm with the word, 1-D position and token type rows, so its
float64 reference is that whole sum, and ours is the same sum with our box vector.

Time series (kind ``sinusoidal``): TimeSeriesTransformer, Informer, Autoformer with ``d_model``
512, ``context_length`` 512 and ``prediction_length`` 96 (608 rows). Ours: the record's float64
values rounded once to float32 (``ComputedSinusoid.values``) and the device table
``fp.sinusoidal_table(608, 512, layout="concatenated")``; transformers: its module's weight.

PatchTST (kind ``learned``, ``sincos``): ``context_length`` 512, patches of 16 with stride 8
(63 rows), ``d_model`` 128; ours is the stored table as read.

An ulp is the float32 spacing at the float64 reference's magnitude (``np.spacing(float32(|ref|))``);
for LayoutLM's sum, at the summed magnitude of its terms (a sum near zero has no accuracy of its own).

    python benchmarks/documents_parity.py            # prints the markdown table of docs/documents.md
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from conformance.reference import random_boxes  # noqa: E402
from conformance.tiny import quiet  # noqa: E402


def ulps(values: np.ndarray, reference: np.ndarray, scale: np.ndarray | None = None) -> tuple[float, float]:
    """``(max, mean)`` distance in float32 ulps of the reference's magnitude (of ``scale``, the sum
    of the terms' magnitudes, for a sum: a sum near zero has no float32 accuracy of its own)."""
    ref = np.asarray(reference, np.float64)
    size = np.abs(ref) if scale is None else scale
    spacing = np.spacing(size.astype(np.float32)).astype(np.float64)
    d = np.abs(np.asarray(values, np.float64) - ref) / spacing
    return float(d.max()), float(d.mean())


def _model(model_type: str, **overrides):
    import torch
    from transformers import CONFIG_MAPPING, AutoModel

    torch.manual_seed(0)
    with quiet():
        config = CONFIG_MAPPING[model_type](num_hidden_layers=1, **overrides)
        return AutoModel.from_config(config).eval()


def document_rows() -> list[tuple[str, str, tuple, tuple, tuple]]:
    import jax
    import jax.numpy as jnp
    import torch

    import flax_posenc as fp
    from flax_posenc.conversion import inspect_source

    out = []
    cases = (
        ("layoutlm", {}),
        (
            "layoutlmv3",
            {"has_relative_attention_bias": False, "has_spatial_attention_bias": False, "visual_embed": False},
        ),
        ("lilt", {}),
    )
    for model_type, overrides in cases:
        model = _model(model_type, **overrides)
        with tempfile.TemporaryDirectory() as d, quiet():
            model.save_pretrained(d)
            rec = next(m.record for m in inspect_source(d).mechanisms if m.kind == "bbox_2d")
        bbox = random_boxes(rec.limit, 500, seed=1)
        tables = [jnp.asarray(w) for w in rec.weights]
        ours = np.asarray(jax.jit(lambda b: fp.bbox_embedding(b, *tables, rec.spec))(bbox))[0]
        x, y, h, w = (t.astype(np.float64) for t in rec.weights)
        b = bbox[0]
        parts = [x[b[:, 0]], y[b[:, 1]], x[b[:, 2]], y[b[:, 3]], h[b[:, 3] - b[:, 1]], w[b[:, 2] - b[:, 0]]]
        tb = torch.from_numpy(bbox)
        if rec.spec.combine == "concat":
            ref = np.concatenate(parts, -1)
            if model_type == "lilt":
                seen = []
                hook = model.layout_embeddings.box_linear_embeddings.register_forward_pre_hook(
                    lambda m, a: seen.append(a[0][0].double().numpy())
                )
                pos = torch.arange(b.shape[0])[None] + model.config.pad_token_id + 1
                with torch.no_grad():
                    model.layout_embeddings(bbox=tb, position_ids=pos)
                hook.remove()
                theirs = seen[0]
            else:
                with torch.no_grad():
                    theirs = model.embeddings.calculate_spatial_position_embeddings(tb)[0].double().numpy()
            what = "the concatenated box vector"
            scale = None
        else:  # LayoutLM: the whole sum entering its LayerNorm
            emb = model.embeddings
            ids = torch.full((1, b.shape[0]), 5, dtype=torch.long)
            seen = []
            hook = emb.LayerNorm.register_forward_pre_hook(lambda m, a: seen.append(a[0][0].double().numpy()))
            with torch.no_grad():
                emb(input_ids=ids, bbox=tb)
            hook.remove()
            theirs = seen[0]
            word, position, token_type = (
                t.detach().numpy()
                for t in (
                    emb.word_embeddings.weight[5],
                    emb.position_embeddings.weight[: b.shape[0]],
                    emb.token_type_embeddings.weight[0],
                )
            )
            rest64 = word.astype(np.float64) + position + token_type
            rest32 = word + position + token_type  # the model's order: word + position, then the boxes, then type
            ref = rest64 + sum(parts)
            ours = rest32 + ours  # our box vector added to the other rows in float32
            scale = np.abs(word) + np.abs(position) + np.abs(token_type) + sum(np.abs(p) for p in parts)
            what = "the sum entering LayerNorm (word + 1-D position + boxes + token type; ulps of the terms' summed magnitude)"
        out.append((model_type, what, ulps(ours, ref, scale), ulps(theirs, ref, scale), ulps(ours, theirs, scale)))
    return out


def time_series_rows() -> list[tuple[str, str, tuple, tuple, tuple]]:
    import flax_posenc as fp
    from flax_posenc.conversion import inspect_source

    out = []
    sizes = {"d_model": 512, "context_length": 512, "prediction_length": 96, "encoder_layers": 1, "decoder_layers": 1}
    for model_type in ("time_series_transformer", "informer", "autoformer"):
        extra = {"label_length": 10} if model_type == "autoformer" else {}
        import torch
        from transformers import CONFIG_MAPPING, AutoModel

        torch.manual_seed(0)
        with quiet():
            model = AutoModel.from_config(CONFIG_MAPPING[model_type](**sizes, **extra)).eval()
        with tempfile.TemporaryDirectory() as d, quiet():
            model.save_pretrained(d)
            rec = inspect_source(d).mechanisms[0].record
        rows = np.arange(rec.limit)
        ref = rec.values(rows)  # float64, from the formula
        mine = ref.astype(np.float32)
        device = np.asarray(fp.sinusoidal_table(rec.limit, rec.dim, layout="concatenated"))
        theirs = model.get_encoder().embed_positions.weight.detach().double().numpy()
        out.append(
            (
                model_type,
                f"{rec.limit} x {rec.dim} table (rounded once)",
                ulps(mine, ref),
                ulps(theirs, ref),
                ulps(mine, theirs),
            )
        )
        out.append(
            (
                model_type,
                "the same on device (`fp.sinusoidal_table`)",
                ulps(device, ref),
                ulps(theirs, ref),
                ulps(device, theirs),
            )
        )
    return out


def patch_rows() -> list[tuple[str, str, tuple, tuple, tuple]]:
    """PatchTST (``sincos``): the stored table read as it is; float64 from the modeling file's formula
    (interleaved sin/cos of ``exp(-2i ln(10000) / d_model)``, less the mean, over ten times the std)."""
    import torch
    from transformers import CONFIG_MAPPING, AutoModel

    from flax_posenc.conversion import inspect_source

    sizes = {"context_length": 512, "patch_length": 16, "patch_stride": 8, "d_model": 128, "num_hidden_layers": 1}
    torch.manual_seed(0)
    with quiet():
        model = AutoModel.from_config(CONFIG_MAPPING["patchtst"](**sizes)).eval()
    with tempfile.TemporaryDirectory() as d, quiet():
        model.save_pretrained(d)
        rec = inspect_source(d).mechanisms[0].record
    n, dim = rec.table.weights.shape
    angle = np.arange(n)[:, None] * np.exp(np.arange(0, dim, 2) * -(np.log(10000.0) / dim))[None, :]
    ref = np.zeros((n, dim))
    ref[:, 0::2], ref[:, 1::2] = np.sin(angle), np.cos(angle)
    ref = (ref - ref.mean()) / (ref.std(ddof=1) * 10)
    theirs = model.encoder.positional_encoder.position_enc.detach().double().numpy()
    ours = rec.table.weights
    what = f"{n} x {dim} stored table (`sincos`), read as it is; ulps of the table's largest magnitude"
    scale = np.full_like(
        ref, np.abs(ref).max()
    )  # torch computes it in float32: near-zero entries carry its angle error
    return [("patchtst", what, ulps(ours, ref, scale), ulps(theirs, ref, scale), ulps(ours, theirs, scale))]


def main() -> None:
    print(
        "| model type | compared | ours vs float64 (max / mean ulps) | transformers vs float64 | ours vs transformers |"
    )
    print("|---|---|---|---|---|")
    for name, what, a, b, c in document_rows() + time_series_rows() + patch_rows():
        print(f"| `{name}` | {what} | {a[0]:.3g} / {a[1]:.3g} | {b[0]:.3g} / {b[1]:.3g} | {c[0]:.3g} / {c[1]:.3g} |")


if __name__ == "__main__":
    main()
