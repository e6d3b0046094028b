"""fp.resize_grid against each model's own interpolate_pos_encoding and timm/big_vision formulas.

    python benchmarks/grid_parity.py          # ~1 min on 2 cores; needs torch, transformers, scipy

For each vision model type, a random-weight checkpoint built by transformers with the published
grid (ViT/DeiT/CLIP/SigLIP 224 px / 16 = 14 x 14, DINOv2 518 px / 14 = 37 x 37; width 32, one
layer: only the position table matters) is resized to several image sizes. Columns:

- ``ours vs float64``: max |ours (float32) - reference in float64| in float32 ulps at the table's
  largest magnitude. The reference is the model's ``interpolate_pos_encoding`` run in float64
  (its parameters upcast exactly), or, for DINOv2's two classes which cast to float32 before
  interpolating, the same ``F.interpolate`` call made in float64;
- ``transformers float32 vs float64``: the model's own float32 output against the same reference
  (torch's float32 bicubic computes its weights and sums in float32);
- ``ours vs transformers float32``: the two float32 results against each other.

Then timm's ``resample_abs_pos_embed`` (bicubic, antialias), facebookresearch/dinov2's
``scale_factor`` call with the 0.1 offset, and big_vision's ``resample_posemb``
(``scipy.ndimage.zoom(order=1)``), each written in float64 from its source, on random
N(0, 1) float32 tables. Prints Markdown tables (docs/vision-audio.md).
"""

from __future__ import annotations

import math

import numpy as np

CHECKPOINTS = {  # model type -> (config class, model class, image_size, patch_size, extra config)
    "vit": ("ViTConfig", "ViTModel", 224, 16, {}),
    "deit": ("DeiTConfig", "DeiTModel", 224, 16, {}),
    "dinov2": ("Dinov2Config", "Dinov2Model", 518, 14, {"mlp_ratio": 1}),
    "dinov2_with_registers": ("Dinov2WithRegistersConfig", "Dinov2WithRegistersModel", 518, 14, {"mlp_ratio": 1}),
    "clip_vision_model": ("CLIPVisionConfig", "CLIPVisionModel", 224, 16, {}),
    "siglip_vision_model": ("SiglipVisionConfig", "SiglipVisionModel", 224, 16, {}),
}
PREFIX = {
    "vit": 1,
    "deit": 2,
    "dinov2": 1,
    "dinov2_with_registers": 1,
    "clip_vision_model": 1,
    "siglip_vision_model": 0,
}
TARGETS = {224: [(384, 384), (448, 448), (160, 160), (384, 224)], 518: [(224, 224), (448, 448), (700, 518)]}


def _ulps(ours, ref, table) -> float:
    return float(np.abs(np.asarray(ours, np.float64) - ref).max() / np.spacing(np.float32(np.abs(table).max())))


def _models() -> list[tuple[str, str, str]]:
    import tempfile
    from pathlib import Path

    import torch
    import transformers

    import flax_posenc as fp
    from flax_posenc.conversion import load_grid_table

    rows = []
    root = Path(tempfile.mkdtemp())
    for model_type, (config_cls, model_cls, image, patch, extra) in CHECKPOINTS.items():
        torch.manual_seed(0)
        config = getattr(transformers, config_cls)(
            image_size=image,
            patch_size=patch,
            hidden_size=32,
            num_hidden_layers=1,
            num_attention_heads=2,
            intermediate_size=32,
            **extra,
        )
        model = getattr(transformers, model_cls)(config).eval()
        emb = model.vision_model.embeddings if hasattr(model, "vision_model") else model.embeddings
        param = emb.position_embeddings if hasattr(emb, "position_embeddings") else emb.position_embedding.weight
        with torch.no_grad():
            param.copy_(torch.randn(param.shape))
        model.save_pretrained(root / model_type)
        table = load_grid_table(root / model_type)
        for h, w in TARGETS[image]:
            n = PREFIX[model_type] + (h // patch) * (w // patch)
            with torch.no_grad():
                f32 = emb.interpolate_pos_encoding(torch.zeros(1, n, 32), h, w).reshape(n, 32).numpy()
                emb.double()
                f64 = emb.interpolate_pos_encoding(torch.zeros(1, n, 32, dtype=torch.float64), h, w)
                f64 = f64.reshape(n, 32).numpy()
                emb.float()
            if model_type.startswith("dinov2"):  # cast to float32 inside: the same call in float64
                g = table.grid[0]
                grid = torch.tensor(table.weights[1:], dtype=torch.float64).reshape(1, g, g, 32).permute(0, 3, 1, 2)
                out = torch.nn.functional.interpolate(
                    grid,
                    size=(h // patch, w // patch),
                    mode="bicubic",
                    align_corners=False,
                    antialias=model_type == "dinov2_with_registers",
                )
                f64 = np.concatenate(
                    [table.weights[:1].astype(np.float64), out.permute(0, 2, 3, 1).reshape(-1, 32).numpy()]
                )
            ours = np.asarray(fp.resize_grid(table, (h, w)))
            grid_text = f"{table.grid[0]} x {table.grid[1]} -> {h // patch} x {w // patch}"
            rows.append(
                (
                    model_type,
                    grid_text,
                    f"{_ulps(ours, f64, table.weights):.2f}",
                    f"{_ulps(f32, f64, table.weights):.2f}",
                    f"{_ulps(ours, f32, table.weights):.2f}",
                )
            )
    return rows


def _formulas() -> list[tuple[str, str, str]]:
    import scipy.ndimage
    import torch
    import torch.nn.functional as F

    import flax_posenc as fp

    rng = np.random.default_rng(0)
    rows = []
    for old, new in ((14, 24), (24, 14), (16, 37), (37, 16)):
        table = rng.standard_normal((1 + old * old, 32)).astype(np.float32)
        grid = torch.tensor(table[1:], dtype=torch.float64).reshape(1, old, old, 32).permute(0, 3, 1, 2)
        timm = F.interpolate(grid, size=(new, new), mode="bicubic", antialias=True)
        timm = np.concatenate([table[:1], timm.permute(0, 2, 3, 1).reshape(-1, 32).numpy()])
        ours = fp.resize_grid(table, new * 16, prefix_tokens=1, patch_size=16, convention="timm")
        rows.append(
            ("timm resample_abs_pos_embed", f"{old} x {old} -> {new} x {new}", f"{_ulps(ours, timm, table):.2f}")
        )
        s = (new + 0.1) / old
        dino = F.interpolate(grid, scale_factor=(s, s), mode="bicubic").permute(0, 2, 3, 1).reshape(-1, 32).numpy()
        ours = fp.resize_patch_grid(table[1:].reshape(old, old, 32), new, convention="dinov2_original")
        side = math.floor(old * s)
        rows.append(
            (
                "facebookresearch/dinov2 (scale_factor, +0.1)",
                f"{old} x {old} -> {side} x {side}",
                f"{_ulps(np.asarray(ours).reshape(-1, 32), dino, table):.2f}",
            )
        )
        bv_table = table[1:]
        bv = scipy.ndimage.zoom(bv_table.astype(np.float64).reshape(old, old, 32), (new / old, new / old, 1), order=1)
        ours = fp.resize_grid(bv_table, new * 16, prefix_tokens=0, patch_size=16, convention="big_vision")
        rows.append(
            (
                "big_vision resample_posemb",
                f"{old} x {old} -> {new} x {new}",
                f"{_ulps(ours, bv.reshape(-1, 32), bv_table):.2f}",
            )
        )
    return rows


def main() -> None:
    print("| model type | grid | ours vs float64 | transformers float32 vs float64 | ours vs transformers float32 |")
    print("|---|---|---|---|---|")
    for row in _models():
        print("| " + " | ".join(row) + " |")
    print()
    print("| convention | grid | vs float64 formula (ulps) |")
    print("|---|---|---|")
    for row in sorted(_formulas()):
        print("| " + " | ".join(row) + " |")


if __name__ == "__main__":
    main()
