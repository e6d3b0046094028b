"""NaFlex grids (SigLIP 2, LFM2-VL): ours and transformers' float32 against float64, in ulps.

    python benchmarks/naflex_parity.py                 # ~20 s on 2 cores; needs torch, transformers
    python benchmarks/naflex_parity.py --figure docs/figures/naflex_grid.png

A random-weight SigLIP 2 vision tower with the published NaFlex grid (``google/siglip2-base-patch16-naflex``:
``num_patches`` 256, a 16 x 16 grid, width 768, 16 px patches; built by transformers from its
config, one layer) is resized to the patch grids SigLIP 2's image processor gives images of
several aspect ratios (``get_image_size_for_max_num_patches``) under budgets 256 (SigLIP 2's
default) and 1024 (LFM2-VL's). Columns, in float32 ulps at the grid's largest magnitude:

- ``ours vs float64``: ``fp.naflex_positions`` (float32, jitted) against torch's
  ``F.interpolate(mode="bilinear", antialias=True, align_corners=False)`` run in float64 (the
  operation transformers' code computes the weights of), padding rows included;
- ``transformers float32 vs float64``: the model's own ``Siglip2VisionEmbeddings`` forward (zero
  pixels, less the patch bias) in float32 against the same reference;
- ``ours vs transformers``: the two float32 results.

The ``timm`` rows: ``convention="timm"`` (timm's NaFlexVit default, bicubic with antialias, zeros on
the padding) against torch's bicubic antialiased ``F.interpolate`` in float64, and the same
call in float32 (what timm runs) against it; and how far timm's default lands from transformers'
resize of the same grid (the drift users see), as max |difference| / max |grid|.
"""

from __future__ import annotations

import argparse

import numpy as np

#: image sizes (height, width) px: square, 4:3 landscape, 16:9, portrait, a panorama
IMAGES = [(512, 512), (480, 640), (1080, 1920), (1200, 800), (300, 2400)]
BUDGETS = [256, 1024]


def _torch_resize(grid, shape, mode, dtype):
    import torch

    x = torch.from_numpy(grid).to(dtype).permute(2, 0, 1)[None]
    r = torch.nn.functional.interpolate(x, size=shape, mode=mode, align_corners=False, antialias=True)
    return r[0].permute(1, 2, 0).reshape(shape[0] * shape[1], -1).double().numpy()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--figure", help="also write the NaFlex figure (PNG) here")
    args = parser.parse_args()
    import jax
    import torch
    from transformers import Siglip2VisionConfig, Siglip2VisionModel
    from transformers.models.siglip2.image_processing_pil_siglip2 import get_image_size_for_max_num_patches

    import flax_posenc as fp

    torch.set_num_threads(1)
    config = Siglip2VisionConfig(num_hidden_layers=1)  # the published width, grid and patch
    torch.manual_seed(0)
    model = Siglip2VisionModel(config).eval()
    emb = model.embeddings
    table = emb.position_embedding.weight.detach().numpy()
    g = int(np.sqrt(table.shape[0]))
    grid64 = table.astype(np.float64).reshape(g, g, -1)
    ulp = float(np.spacing(np.float32(np.abs(table).max())))
    bias = emb.patch_embedding.bias.detach().numpy()
    width = config.num_channels * config.patch_size**2
    print(
        "| budget | image (px) | patches | ours vs float64 | transformers float32 vs float64 | ours vs transformers |"
    )
    print("|---|---|---|---|---|---|")
    timm_rows = []
    for budget in BUDGETS:
        for h_px, w_px in IMAGES:
            th, tw = get_image_size_for_max_num_patches(h_px, w_px, config.patch_size, budget)
            shape = (th // config.patch_size, tw // config.patch_size)
            n = shape[0] * shape[1]
            ref = _torch_resize(grid64, shape, "bilinear", torch.float64)
            ref = np.concatenate([ref, np.repeat(ref[:1], budget - n, 0)])
            ours = np.asarray(jax.jit(lambda t, s=shape, b=budget: fp.naflex_positions(t, s, max_num_patches=b))(table))
            with torch.no_grad():
                theirs = emb(torch.zeros(1, budget, width), torch.tensor([shape]))[0].double().numpy() - bias
            e = [np.abs(a - b).max() / ulp for a, b in ((ours, ref), (theirs, ref), (ours, theirs))]
            print(
                f"| {budget} | {h_px} x {w_px} | {shape[0]} x {shape[1]} = {n} | {e[0]:.2f} | {e[1]:.2f} | {e[2]:.2f} |"
            )
            timm_ref = _torch_resize(grid64, shape, "bicubic", torch.float64)
            timm32 = _torch_resize(table.reshape(g, g, -1), shape, "bicubic", torch.float32)
            timm_ours = np.asarray(fp.naflex_positions(table, shape, max_num_patches=budget, convention="timm"))[:n]
            drift = np.abs(timm_ref - ref[:n]).max() / np.abs(table).max()
            timm_rows.append(
                (budget, shape, np.abs(timm_ours - timm_ref).max() / ulp, np.abs(timm32 - timm_ref).max() / ulp, drift)
            )
    print()
    print(
        "| budget | patches | timm: ours vs float64 | timm float32 vs float64 | timm (bicubic) vs transformers (bilinear), relative |"
    )
    print("|---|---|---|---|---|")
    for budget, shape, a, b, drift in timm_rows:
        print(f"| {budget} | {shape[0]} x {shape[1]} | {a:.2f} | {b:.2f} | {drift:.3f} |")
    if args.figure:
        shapes = [(8, 32), (22, 11)]
        out = [np.asarray(fp.naflex_positions(table, s, max_num_patches=256))[: s[0] * s[1]] for s in shapes]
        fp.plots.plot_naflex_grid(
            table.reshape(g, g, -1),
            [o.reshape(*s, -1) for o, s in zip(out, shapes, strict=True)],
            args.figure,
            title=(
                "SigLIP 2 NaFlex position grid (16 x 16, width 768) resized per image as transformers does\n"
                "(bilinear, antialiased): a 128 x 512 px image (8 x 32 patches), a 352 x 176 px one (22 x 11)"
            ),
            random_init=True,
        )
        print(f"\nwrote {args.figure}")


if __name__ == "__main__":
    main()
