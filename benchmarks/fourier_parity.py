"""SAM's random Fourier positional encoding: ours (float32, jitted) and transformers' own class
(float32) against the float64 formula, in float32 ulps of 1 (the encoding's range is [-1, 1]).

    python benchmarks/fourier_parity.py

Published sizes: SAM ViT-B's prompt encoder (``num_pos_feats`` 128, ``scale`` = hidden_size / 2 =
128 in SamPositionalEmbedding) and SAM 2's (hidden_size 256, scale 1); 1024 random points in [0, 1],
the same points in pixels of a 1024 x 1024 image, and the 64 x 64 image-wide cell centres.
"""

from __future__ import annotations

import numpy as np
import torch
from transformers.models.sam.configuration_sam import SamVisionConfig
from transformers.models.sam.modeling_sam import SamPositionalEmbedding
from transformers.models.sam2.configuration_sam2 import Sam2PromptEncoderConfig
from transformers.models.sam2.modeling_sam2 import Sam2PositionalEmbedding

import flax_posenc as fp
from flax_posenc.fourier_encoding import fourier_positions_float64, image_wide_coordinates

ULP = 2.0**-23


def main() -> None:
    torch.manual_seed(0)
    modules = {
        "SAM (num_pos_feats 128, scale 128)": SamPositionalEmbedding(SamVisionConfig(num_pos_feats=128)),
        "SAM 2 (hidden_size 256)": Sam2PositionalEmbedding(Sam2PromptEncoderConfig(hidden_size=256)),
    }
    rng = np.random.default_rng(0)
    points = rng.uniform(0, 1, (1, 1, 1024, 2)).astype(np.float32)
    pixels = (points * 1024).astype(np.float32)
    grid = image_wide_coordinates(64).astype(np.float32)[None, None]
    print(
        "| encoding | points | transformers float32 vs float64 (ulps of 1) | ours float32 vs float64 | ours vs transformers |"
    )
    print("|---|---|---|---|---|")
    for name, module in modules.items():
        gaussian = module.positional_embedding.detach().numpy()
        for label, coords, shape in (
            ("1024 points in [0, 1]", points, None),
            ("1024 points in pixels of 1024 x 1024", pixels, (1024, 1024)),
            ("64 x 64 image-wide centres", grid, None),
        ):
            ref = fourier_positions_float64(coords, gaussian, shape)
            with torch.no_grad():
                theirs = module(torch.from_numpy(coords), shape).double().numpy()
            ours = np.asarray(fp.fourier_positions(coords, gaussian, input_shape=shape), np.float64)
            t, o, d = (np.abs(a - b).max() / ULP for a, b in ((theirs, ref), (ours, ref), (ours, theirs)))
            print(f"| {name} | {label} | {t:.1f} | {o:.1f} | {d:.1f} |")


if __name__ == "__main__":
    main()
