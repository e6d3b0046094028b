"""The picture of a ViT's learned position grid (Dosovitskiy et al., Figure 7), and the same grid resized.

    python examples/vit_grid.py              # writes into out/vit_grid/
    python examples/vit_grid.py --docs       # regenerates docs/figures/vit_grid_*.png

No pretrained weights can be downloaded here, so the ViT is built by transformers from a
ViT-B/16-shaped config (224 px / 16 = a 14 x 14 grid) with RANDOM weights, and its figures say
so: a random grid shows no structure (each patch is similar only to itself). For the structure
a trained ViT learns (nearby patches alike, rows and columns), the third figure draws MAE's
fixed 2-D sine-cosine grid (``fp.sincos_2d_table``) the same way. On a real checkpoint:
``fp.plots.plot_grid_similarity(load_grid_table("google/vit-base-patch16-224"), "grid.png")``.

Figures: ``vit_grid_similarity.png`` (the random ViT's 14 x 14 grid), ``vit_grid_resize.png``
(the same before and after ``fp.resize_grid`` to 384 px, 24 x 24, ViT's bicubic convention) and
``vit_grid_mae_sincos.png``.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import output_folder  # noqa: E402


def build_random_vit(directory: Path) -> Path:
    """A ViT-B/16-shaped position grid (width 64, one layer) with random weights, saved by transformers."""
    import torch
    import transformers

    from flax_posenc.report.plots import RANDOM_INIT_MARKER

    torch.manual_seed(0)
    config = transformers.ViTConfig(
        image_size=224, patch_size=16, hidden_size=64, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64
    )
    model = transformers.ViTModel(config)
    with torch.no_grad():  # ViT initialises its positions with a truncated normal: random, no structure
        model.embeddings.position_embeddings.normal_(0.0, 0.02)
    model.save_pretrained(directory)
    (directory / RANDOM_INIT_MARKER).write_text("random weights: built from a config by examples/vit_grid.py\n")
    return directory


def neighbour_similarity(patches, k: int) -> float:
    """Mean cosine similarity of patch ``(i, j)``'s position to patch ``(i, j + k)``'s."""
    import numpy as np

    from flax_posenc.report.plots import grid_cosine_similarity

    s = grid_cosine_similarity(patches)
    gh, gw = s.shape[:2]
    return float(np.mean([s[i, j, i, j + k] for i in range(gh) for j in range(gw - k)]))


def main(argv: list[str] | None = None) -> list[Path]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    output_folder.add_arguments(parser, what="the three figures")
    args = parser.parse_args(argv)
    out = output_folder.resolve(parser, args, "vit_grid")
    figures = out / "figures" if args.docs else out

    import numpy as np

    import flax_posenc as fp
    from flax_posenc.conversion import load_grid_table
    from flax_posenc.report import plots

    with tempfile.TemporaryDirectory() as tmp:
        grid = load_grid_table(build_random_vit(Path(tmp) / "vit-b16-random"))
        paths = [
            plots.plot_grid_similarity(grid, figures / "vit_grid_similarity.png"),
            plots.plot_grid_resize(grid, 384, figures / "vit_grid_resize.png"),
        ]
        resized = np.asarray(fp.resize_grid(grid, 384), np.float64)[1:].reshape(24, 24, -1)
        for label, patches in (("trained 14 x 14", grid.patches), ("resized 24 x 24", resized)):
            print(
                f"{label}: mean cosine similarity of patches 1 / 3 columns apart: "
                + ", ".join(f"{neighbour_similarity(patches, k):.3f}" for k in (1, 3))
            )
    mae = fp.sincos_2d_table((14, 14), 64, dtype=np.float64).reshape(14, 14, 64)
    paths.append(
        plots.plot_grid_similarity(
            mae,
            figures / "vit_grid_mae_sincos.png",
            title="Patch position similarity: MAE's fixed 2-D sin-cos grid, 14 x 14, width 64",
        )
    )
    for p in paths:
        print(p)
    return paths


if __name__ == "__main__":
    main()
