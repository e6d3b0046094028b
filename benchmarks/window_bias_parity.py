"""Window relative position bias: ours and transformers' float32 against float64, in ulps.

    python benchmarks/window_bias_parity.py                                  # ~1 min on 2 cores
    python benchmarks/window_bias_parity.py --figure docs/figures/swin_window_bias.png

For each model type of the ``window_bias`` kind a random-weight checkpoint built by transformers at
its published window (Swin/DonutSwin/MaskFormerSwin: 224 px / 4 with a 7 x 7 window; SwinV2: 256 px
/ 4, window 8, stage 0 normalised by a pretrained window of 12 as in its 384 px fine-tunes; Swin2SR:
64 px / 1, window 8; BEiT/Data2Vec-Vision: 224 px / 16, a 14 x 14 grid; width 16-32, one block per
stage: only the bias matters), its zero-initialised tables filled with N(0, 1) values, is read with
``inspect_source`` and each layer's bias compared. Columns:

- ``ours vs float64``: max |ours (float32, ``fp.window_bias`` / ``fp.continuous_window_bias``) -
  float64 reference| in float32 ulps of the bias's largest magnitude; the reference is the model's
  own module run in float64 (its parameters upcast exactly);
- ``transformers float32 vs float64``: the model's own float32 bias against the same reference;
- resized rows: BEiT's own forward at 384 px (a 24 x 24 grid) against ``"transformers"``, and a
  Swin table from window 7 to 12 against timm's ``resize_rel_pos_bias_table`` (transcribed in
  ``tests/conformance/reference.py``), each reference run in float64.

Prints a Markdown table (docs/vision-audio.md). ``--figure PATH`` draws one Swin layer's table per
head and the bias it adds to one window (random weights: the figure says so).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
_SWIN = {"image_size": 224, "patch_size": 4, "embed_dim": 16, "depths": [1, 1], "num_heads": [2, 4], "window_size": 7}
_BEIT = {"image_size": 224, "patch_size": 16, "hidden_size": 32, "num_hidden_layers": 1, "num_attention_heads": 4}
CONFIGS = {
    "swin": ("SwinConfig", "SwinModel", _SWIN),
    "donut-swin": ("DonutSwinConfig", "DonutSwinModel", _SWIN),
    "maskformer-swin": ("MaskFormerSwinConfig", "MaskFormerSwinModel", _SWIN),
    "swinv2": (
        "Swinv2Config",
        "Swinv2Model",
        {**_SWIN, "image_size": 256, "window_size": 8, "pretrained_window_sizes": [12, 0]},
    ),
    "swin2sr": (
        "Swin2SRConfig",
        "Swin2SRModel",
        {"image_size": 64, "patch_size": 1, "embed_dim": 16, "depths": [1], "num_heads": [2], "window_size": 8},
    ),
    "beit": ("BeitConfig", "BeitModel", {**_BEIT, "intermediate_size": 32, "use_relative_position_bias": True}),
    "data2vec-vision": (
        "Data2VecVisionConfig",
        "Data2VecVisionModel",
        {**_BEIT, "intermediate_size": 32, "use_shared_relative_position_bias": True},
    ),
}


def _ulps(x, ref, scale: float) -> float:
    return float(np.abs(np.asarray(x, np.float64) - np.asarray(ref, np.float64)).max() / np.spacing(np.float32(scale)))


def _build(model_type: str, root: Path):
    import torch
    import transformers

    config_cls, model_cls, kwargs = CONFIGS[model_type]
    torch.manual_seed(0)
    config = getattr(transformers, config_cls)(**kwargs)
    model = getattr(transformers, model_cls)(config).eval()
    gen = torch.Generator().manual_seed(35)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("relative_position_bias_table"):
                p.copy_(torch.randn(p.shape, generator=gen))
    model.save_pretrained(root / model_type)
    return model


def rows() -> list[tuple[str, ...]]:
    import jax.numpy as jnp
    import torch

    sys.path.insert(0, str(ROOT / "tests"))
    from conformance.reference import _torch_window_bias, timm_resize_rel_pos_bias_table

    import flax_posenc as fp
    from flax_posenc.conversion import load_window_bias

    torch.set_num_threads(1)
    out = []
    root = Path(tempfile.mkdtemp())
    for model_type in CONFIGS:
        model = _build(model_type, root)
        record = load_window_bias(root / model_type)
        import re

        owners = sorted(
            (
                (tuple(int(x) for x in re.findall(r"(?:^|\.)(\d+)(?=\.|$)", n)), n)
                for n, m in model.named_modules()
                if isinstance(getattr(m, "relative_position_bias_table", None), torch.nn.Parameter)
                or isinstance(getattr(m, "continuous_position_bias_mlp", None), torch.nn.Module)
            ),
            key=lambda t: (bool(t[0]), t[0]),
        )
        for layer, (_, name) in zip(record.layers, owners):
            module = model.get_submodule(name)
            f32 = _torch_window_bias(module, layer)
            module.double()
            if layer.mlp is not None:
                module.relative_coords_table = torch.from_numpy(_coords64(module, layer))
            f64 = _torch_window_bias(module, layer)
            module.float()
            if layer.mlp is not None:
                w1, b1, w2 = layer.mlp
                ours = fp.continuous_window_bias(w1, b1, w2, layer.window, pretrained_window=layer.pretrained_window)
            else:
                ours = fp.window_bias(jnp.asarray(layer.table), layer.window, class_token=layer.class_token)
            scale = float(np.abs(f64).max())
            h, w = layer.window
            out.append(
                (
                    model_type,
                    f"{layer.label}, {h} x {w}",
                    f"{_ulps(ours, f64, scale):.2f}",
                    f"{_ulps(f32, f64, scale):.2f}",
                )
            )
            if layer.table is None or layer.label not in ("stage 0 block 0", "layer 0", "shared"):
                continue
            table = layer.table
            if layer.class_token:
                big = (24, 24)
                ref32 = _torch_window_bias(module, layer, big)
                module.double()
                ref64 = _torch_window_bias(module, layer, big)
                module.float()
                resized = fp.resize_window_table(
                    jnp.asarray(table), layer.window, big, class_token=True, convention="transformers"
                )
                ours = fp.window_bias(resized, big, class_token=True)
                what = f"{layer.label}, {h} x {w} -> 24 x 24 (transformers)"
            else:
                big = (12, 12)
                rows_ = 23 * 23
                ref32 = timm_resize_rel_pos_bias_table(torch.from_numpy(table), big, (rows_, table.shape[1])).numpy()
                default = torch.get_default_dtype()
                torch.set_default_dtype(torch.float64)
                try:
                    ref64 = timm_resize_rel_pos_bias_table(
                        torch.from_numpy(table.astype(np.float64)), big, (rows_, table.shape[1])
                    )
                finally:
                    torch.set_default_dtype(default)
                ref64 = ref64.numpy()
                ours = fp.resize_window_table(jnp.asarray(table), layer.window, big, convention="timm")
                what = f"{layer.label}, {h} x {w} -> 12 x 12 (timm)"
            scale = float(np.abs(ref64).max())
            out.append((model_type, what, f"{_ulps(ours, ref64, scale):.2f}", f"{_ulps(ref32, ref64, scale):.2f}"))
    return out


def _coords64(module, layer):
    """The SwinV2 module's coordinate buffer recomputed in float64 (its own buffer is float32)."""
    from flax_posenc.window_bias_config import log_spaced_coords

    h, w = layer.window
    return log_spaced_coords(layer.window, layer.pretrained_window).reshape(1, 2 * h - 1, 2 * w - 1, 2)


def figure(path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from flax_posenc.conversion import load_window_bias

    root = Path(tempfile.mkdtemp())
    _build("swin", root)
    layer = load_window_bias(root / "swin").layers[1]  # stage 1: 4 heads, a 7 x 7 window
    h, w = layer.window
    heads = layer.num_heads
    fig, axes = plt.subplots(1, heads + 1, figsize=(3.2 * (heads + 1), 3.4))
    for k in range(heads):
        ax = axes[k]
        im = ax.imshow(
            layer.table[:, k].reshape(2 * h - 1, 2 * w - 1),
            cmap="RdBu_r",
            extent=(-w + 0.5, w - 0.5, h - 0.5, -h + 0.5),
        )
        ax.set_title(f"head {k}: table (dy, dx)")
        ax.set_xlabel("dx = column offset")
        ax.set_ylabel("dy = row offset")
        fig.colorbar(im, ax=ax, fraction=0.046)
    im = axes[heads].imshow(layer.bias()[0], cmap="RdBu_r")
    axes[heads].set_title(f"head 0: bias added ({h * w} x {h * w})")
    axes[heads].set_xlabel("key patch")
    axes[heads].set_ylabel("query patch")
    fig.colorbar(im, ax=axes[heads], fraction=0.046)
    fig.suptitle(
        f"Swin window bias, stage 1 of a random-weight swin ({h} x {w} window, "
        f"{(2 * h - 1) * (2 * w - 1)} offsets per head): random weights, not a trained model"
    )
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=80)
    print(f"wrote {path}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--figure", type=Path, help="also draw the Swin table per head to this PNG")
    args = parser.parse_args()
    print("| model type | layer, window | ours vs float64 (ulps) | transformers float32 vs float64 (ulps) |")
    print("|---|---|---|---|")
    for row in rows():
        print("| " + " | ".join(row) + " |")
    if args.figure:
        figure(args.figure)


if __name__ == "__main__":
    main()
