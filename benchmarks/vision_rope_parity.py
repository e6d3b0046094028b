"""Vision-tower RoPE against transformers and float64: what docs/vision-audio.md ("Vision-tower RoPE") claims.

    python benchmarks/vision_rope_parity.py        # ~20 s of CPU (80 s wall on 2 loaded cores); torch + transformers
    python benchmarks/vision_rope_parity.py --figure docs/figures/vision_rope_pattern.png   # and the figure

At each model's real sizes (Pixtral-12B's tower: head_dim 64, theta 1e4, a 64 x 64 grid, its
trained side; Qwen2-VL's and Qwen2.5-VL's towers: head_dim 80, theta 1e4, a 64 x 64 grid in 2 x 2
blocks, Qwen2.5-VL's 112 px windows at patch 14; DINOv3 ViT-B: head_dim 64, theta 100, a 64 x 64
grid of patch centres), for every patch:

1. cos/sin: transformers' own vision rotary module (float32) and ``fp.vision_rope_cos_sin`` (known
   positions: the RoPE core's host or iota path; traced under ``jit``: exact-angle arithmetic for
   indices, a float32 angle for DINOv3's coordinates) against
   the float64 value of the model's formula. Unit: float32 ulps of 1 (``2**-23``; cos and sin lie
   in [-1, 1]).
2. The rotation: the modeling file's own apply function with its module's cos/sin, and
   ``fp.apply_vision_rope`` (traced positions), against the float64 rotation of the same float32
   N(0, 1) queries. Unit: float32 ulps of the largest query entry (``max|q| * 2**-23``).

Second round (Qwen3-VL's tower: head_dim 72; GLM-4V's: head_dim 128; Kimi K2.5's: head_dim 72,
column and row interleaved), the same two rows, and a
second table for the learned grid these towers add beside their RoPE, resampled to a few images:
transformers' own float32 (Qwen3-VL: ``get_vision_interpolation_indices_and_weights`` and the
weighted gather its forward does; GLM-4V: its ``Glm4vVisionEmbeddings`` module, ``grid_sample``)
and ``fp.vision_grid_positions`` (under ``jit``) against the float64 resampling written out from
its definition. Random N(0, 1) tables at the real sizes (Qwen3-VL: 48 x 48 x 1152; GLM-4V:
24 x 24 x 1536; Kimi K2.5: 64 x 64 x 1152, bicubic, ``F.embedding_bag`` of its taps, raster
order; PaddleOCR-VL: 27 x 27 x 1152, bilinear at the pixel centres, raster order; Step 3.5:
52 x 52 x 1536, its own ``F.interpolate(mode="bilinear", align_corners=False)``, raster order). Unit: float32 ulps of the table's largest entry.

Third round: Step 3.5/3.7's tower (head_dim 96, the column first) in the first two tables, and Llama 4's tower (Llama 4 Scout's: head_dim 88, theta 1e4, its one grid of 24 x 24
patches and the class token last), whose rotary module holds complex ``freqs_ci`` (cos = real,
sin = imaginary part) for that one size and whose ``vision_apply_rotary_emb`` multiplies complex
pairs: the same five rows in a table of its own (``llama4_rows``). Its learned
``positional_embedding_vlm`` is added as it is (no resampling, nothing to measure).

``--figure PATH`` draws the 2-D frequency pattern (computed, not learned): ``cos`` of the angle of
four rotary pairs over a 32 x 32 patch grid of Qwen2-VL/Qwen3-VL's layout (head_dim 64).
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

EPS = 2.0**-23
SIDE = 64


def cases():
    """``(name, VisionRopeConfig, transformers rotary module, its apply function, call)``."""
    from transformers import CONFIG_MAPPING
    from transformers.models.dinov3_vit import modeling_dinov3_vit as dino
    from transformers.models.glm4v import modeling_glm4v as glm
    from transformers.models.kimi_k25 import modeling_kimi_k25 as kimi
    from transformers.models.pixtral import modeling_pixtral as pix
    from transformers.models.qwen2_5_vl import modeling_qwen2_5_vl as q25
    from transformers.models.qwen2_vl import modeling_qwen2_vl as q2
    from transformers.models.qwen3_vl import modeling_qwen3_vl as q3
    from transformers.models.step3p7 import modeling_step3p7 as s3

    from flax_posenc.conversion.vision_rope import VISION_ROPE_FAMILIES, vision_rope_config

    out = []
    for name, model_type, module_file, cls, apply in (
        ("pixtral (Pixtral-12B tower)", "pixtral", pix, "PixtralVisionRotaryEmbedding", "apply_rotary_pos_emb"),
        ("qwen2_vl (Qwen2-VL tower)", "qwen2_vl_vision", q2, "Qwen2VLVisionRotaryEmbedding", "apply_rotary_pos_emb_vision"),
        ("qwen2_5_vl (Qwen2.5-VL tower)", "qwen2_5_vl_vision", q25, "Qwen2_5_VLVisionRotaryEmbedding", "apply_rotary_pos_emb_vision"),
        ("dinov3 (DINOv3 ViT-B)", "dinov3_vit", dino, "DINOv3ViTRopePositionEmbedding", "apply_rotary_pos_emb"),
        ("qwen3_vl (Qwen3-VL tower)", "qwen3_vl_vision", q3, "Qwen3VLVisionRotaryEmbedding", "apply_rotary_pos_emb_vision"),
        ("glm4v (GLM-4V tower)", "glm4v_vision", glm, "Glm4vVisionRotaryEmbedding", "apply_rotary_pos_emb_vision"),
        ("kimi_k25 (Kimi K2.5 tower)", "kimi_k25_vision", kimi, "Kimi_K25VisionRotaryEmbedding", "apply_rotary_pos_emb_vision"),
        ("step3p5 (Step 3.5/3.7 tower)", "step3p5_vision", s3, "Step3p7VisionRotaryEmbedding", "apply_rotary_pos_emb_vision"),
    ):  # fmt: skip
        sizes = {"hidden_size": 1280, "num_heads": 16} if model_type.startswith("qwen2") else {}
        if model_type == "qwen2_vl_vision":
            sizes = {"embed_dim": 1280, "num_heads": 16}
        if model_type == "dinov3_vit":
            sizes = {"hidden_size": 768, "num_attention_heads": 12, "image_size": SIDE * 16}
        hf = CONFIG_MAPPING[model_type](**sizes)
        row = next(r for r in VISION_ROPE_FAMILIES.values() if model_type in r.model_types)
        cfg = vision_rope_config(row, hf.to_dict(), model_type)
        out.append(
            (name, cfg, getattr(module_file, cls)(hf).eval(), getattr(module_file, apply), hf)
        )  # eval: no jitter
    return out


def reference(cfg, positions):
    """float64 angles of the model's formula (numpy, from the frequencies of the config's split)."""
    axis, inv_freq = cfg.frequencies()
    scale = 2 * np.pi if cfg.coordinates == "normalized" else 1.0
    return np.asarray(positions, np.float64)[:, axis] * inv_freq * scale


def rotate(x, angle):
    cos, sin = np.concatenate([np.cos(angle)] * 2, -1), np.concatenate([np.sin(angle)] * 2, -1)
    half = x.shape[-1] // 2
    return x * cos + np.concatenate([-x[..., half:], x[..., :half]], -1) * sin


def measure(name, cfg, module, apply, hf):
    import jax
    import jax.numpy as jnp
    import torch

    import flax_posenc as fp

    positions = cfg.positions([[1, SIDE, SIDE]])
    angle = reference(cfg, positions)
    half = cfg.head_dim // 2
    with torch.no_grad():
        if cfg.coordinates == "normalized":
            theirs = module(torch.zeros(1, 3, SIDE * hf.patch_size, SIDE * hf.patch_size))
        else:
            theirs = module(torch.zeros(1), torch.from_numpy(positions))
    t_cos, t_sin = (x.double().numpy()[:, :half] for x in theirs)
    o_cos, o_sin = (np.asarray(x, np.float64) for x in fp.vision_rope_cos_sin(positions, cfg))
    dtype = jnp.float32 if cfg.coordinates == "normalized" else jnp.int32
    d_cos, d_sin = (
        np.asarray(x, np.float64)
        for x in jax.jit(lambda p: fp.vision_rope_cos_sin(p, cfg))(jnp.asarray(positions, dtype))
    )
    ulps = lambda a, b: float(np.max(np.abs(a - b))) / EPS  # noqa: E731
    rows = {
        "cos/sin, transformers float32": max(ulps(t_cos, np.cos(angle)), ulps(t_sin, np.sin(angle))),
        "cos/sin, ours (known positions)": max(ulps(o_cos, np.cos(angle)), ulps(o_sin, np.sin(angle))),
        "cos/sin, ours (traced under jit)": max(ulps(d_cos, np.cos(angle)), ulps(d_sin, np.sin(angle))),
    }  # fmt: skip
    rng = np.random.default_rng(0)
    q = rng.standard_normal((positions.shape[0] + cfg.prefix_tokens, 2, cfg.head_dim)).astype(np.float32)
    exact = rotate(q[cfg.prefix_tokens :].astype(np.float64), angle[:, None, :])
    tq = torch.from_numpy(q)
    with torch.no_grad():
        if cfg.coordinates == "normalized" or name.startswith("pixtral"):  # (batch, heads, tokens, dim)
            hq = tq.permute(1, 0, 2)[None]
            out, _ = apply(hq, hq, *theirs) if name.startswith("dinov3") else apply(hq, hq, *theirs, unsqueeze_dim=0)
            out = out[0].permute(1, 0, 2).numpy()
        else:
            out, _ = apply(tq, tq, *theirs)
            out = out.numpy()
    ours = np.asarray(jax.jit(lambda x, p: fp.apply_vision_rope(x, cfg, p))(q, jnp.asarray(positions, dtype)))
    scale = float(np.max(np.abs(q))) * EPS
    p = cfg.prefix_tokens
    rows["rotated q, transformers' apply"] = float(np.max(np.abs(out[p:] - exact))) / scale
    rows["rotated q, ours (traced)"] = float(np.max(np.abs(ours[p:] - exact))) / scale
    return rows


#: The images the learned grids are resampled to, ``(t, h, w)`` patches (multiples of the merge size 2).
GRID_IMAGES = ([1, 36, 52], [1, 80, 80], [1, 16, 24])


def grid_rows() -> dict[str, dict[str, float]]:
    """Learned grid resampling: ``{tower: {row label: ulps}}`` (see the module docstring)."""
    import jax
    import torch
    import torch.nn.functional as F
    from conformance.reference import _resampled_grid_float64
    from transformers import CONFIG_MAPPING
    from transformers.models.glm4v import modeling_glm4v as glm
    from transformers.vision_utils import get_vision_interpolation_indices_and_weights

    import flax_posenc as fp

    rng = np.random.default_rng(0)
    out: dict[str, dict[str, float]] = {}
    for name, side, dim, convention in (
        ("qwen3_vl (48 x 48 pos_embed)", 48, 1152, "big_vision"),
        ("glm4v (24 x 24 position_embedding)", 24, 1536, "torch_bicubic"),
        ("kimi_k25 (64 x 64 pos_emb)", 64, 1152, "kimi"),
        ("paddleocr_vl (27 x 27 position_embedding)", 27, 1152, "torch_bilinear"),
        ("step3p5 (52 x 52 position_embedding)", 52, 1536, "step3"),
    ):
        table = rng.standard_normal((side * side, dim)).astype(np.float32)
        scale = float(np.abs(table).max()) * EPS
        rows: dict[str, float] = {}
        for grid in GRID_IMAGES:
            merge, conv = {
                "kimi": (1, "torch_bicubic"),
                "torch_bilinear": (1, convention),
                "step3": (1, "torch_bilinear"),
            }.get(convention, (2, convention))
            exact = _resampled_grid_float64(table, [grid], merge, conv)
            resample = lambda t, g=grid, m=merge, c=conv: fp.vision_grid_positions(  # noqa: E731
                t, [g], spatial_merge_size=m, convention=c
            )
            ours = np.asarray(jax.jit(resample)(table))
            thw = torch.tensor([grid])
            with torch.no_grad():
                if convention == "big_vision":
                    idx, w = get_vision_interpolation_indices_and_weights(
                        thw, side, mode="bilinear", align_corners=True, spatial_merge_size=2
                    )
                    theirs = (torch.from_numpy(table)[idx] * w[:, :, None]).sum(1).numpy()
                elif convention == "torch_bilinear":  # PaddleOCR-VL's gather (raster order)
                    idx, w = get_vision_interpolation_indices_and_weights(
                        thw, side, mode="bilinear", align_corners=False
                    )
                    theirs = (torch.from_numpy(table)[idx] * w[:, :, None]).sum(1).numpy()
                elif convention == "step3":  # Step3p7VisionEmbeddings.interpolate_pos_encoding's own call
                    grid2d = torch.from_numpy(table).reshape(1, side, side, dim).permute(0, 3, 1, 2)
                    theirs = F.interpolate(grid2d, size=(grid[1], grid[2]), mode="bilinear", align_corners=False)
                    theirs = theirs.permute(0, 2, 3, 1).reshape(-1, dim).numpy()
                elif convention == "kimi":  # its own embedding_bag of the bicubic taps (raster order)
                    idx, w = get_vision_interpolation_indices_and_weights(
                        thw, side, mode="bicubic", align_corners=False
                    )
                    theirs = F.embedding_bag(idx, torch.from_numpy(table), per_sample_weights=w, mode="sum").numpy()
                else:
                    hf = CONFIG_MAPPING["glm4v_vision"](hidden_size=dim, image_size=side * 14, patch_size=14)
                    module = glm.Glm4vVisionEmbeddings(hf)
                    module.position_embedding.weight.copy_(torch.from_numpy(table))
                    pos = torch.from_numpy(fp.vision_patch_positions([grid], spatial_merge_size=2))
                    n = pos.shape[0]
                    theirs = module(torch.zeros(n, dim), torch.tensor([n]), thw, pos[:, 0], pos[:, 1]).numpy()
            label = f"{grid[1]} x {grid[2]}"
            rows[f"{label}, transformers float32"] = float(np.max(np.abs(theirs - exact))) / scale
            rows[f"{label}, ours (jit)"] = float(np.max(np.abs(ours - exact))) / scale
        out[name] = rows
    return out


def llama4_rows() -> dict[str, float]:
    """Llama 4 Scout's tower (hidden 1408, 16 heads, 336 px of 14 px patches): float32 ulps vs
    float64, for every patch and the class token (see the module docstring)."""
    import jax
    import jax.numpy as jnp
    import torch
    from transformers import CONFIG_MAPPING
    from transformers.models.llama4 import modeling_llama4 as l4

    import flax_posenc as fp
    from flax_posenc.conversion.vision_rope import VISION_ROPE_FAMILIES, vision_rope_config

    hf = CONFIG_MAPPING["llama4_vision_model"](hidden_size=1408, num_attention_heads=16, image_size=336, patch_size=14)
    cfg = vision_rope_config(VISION_ROPE_FAMILIES["llama4"], hf.to_dict(), "llama4_vision_model")
    side = cfg.patches_per_side
    positions = cfg.positions([[1, side, side]])
    axis, inv_freq = cfg.frequencies()
    # float64 from the model's formula: (column + 1) then (row + 1) times the frequencies; the class token's angle 0
    angle = np.concatenate([(positions[:, axis] + 1.0) * inv_freq, np.zeros((1, axis.size))])
    freqs = l4.Llama4VisionRotaryEmbedding(hf).freqs_ci.reshape(side * side + 1, -1)
    t_cos, t_sin = freqs.real.double().numpy(), freqs.imag.double().numpy()
    o_cos, o_sin = (np.asarray(x, np.float64) for x in fp.vision_rope_cos_sin(positions, cfg))
    d_cos, d_sin = (
        np.asarray(x, np.float64)
        for x in jax.jit(lambda p: fp.vision_rope_cos_sin(p, cfg))(jnp.asarray(positions, jnp.int32))
    )
    p = angle[:-1]  # ours: the patches (the class token's identity is appended by apply_vision_rope)
    ulps = lambda a, b: float(np.max(np.abs(a - b))) / EPS  # noqa: E731
    rows = {
        "cos/sin, transformers float32": max(ulps(t_cos, np.cos(angle)), ulps(t_sin, np.sin(angle))),
        "cos/sin, ours (known positions)": max(ulps(o_cos, np.cos(p)), ulps(o_sin, np.sin(p))),
        "cos/sin, ours (traced under jit)": max(ulps(d_cos, np.cos(p)), ulps(d_sin, np.sin(p))),
    }
    rng = np.random.default_rng(0)
    q = rng.standard_normal((1, side * side + 1, 2, cfg.head_dim)).astype(np.float32)  # (batch, tokens, heads, D)
    pairs = q.astype(np.float64).reshape(*q.shape[:-1], -1, 2)
    z = (pairs[..., 0] + 1j * pairs[..., 1]) * np.exp(1j * angle)[None, :, None, :]
    exact = np.stack([z.real, z.imag], -1).reshape(q.shape)
    with torch.no_grad():
        out, _ = l4.vision_apply_rotary_emb(
            torch.from_numpy(q), torch.from_numpy(q), l4.Llama4VisionRotaryEmbedding(hf).freqs_ci
        )
    ours = np.asarray(jax.jit(lambda x, pos: fp.apply_vision_rope(x, cfg, pos))(q, jnp.asarray(positions, jnp.int32)))
    scale = float(np.max(np.abs(q))) * EPS
    rows["rotated q, transformers' apply"] = float(np.max(np.abs(out.numpy() - exact))) / scale
    rows["rotated q, ours (traced)"] = float(np.max(np.abs(ours - exact))) / scale
    return rows


def figure(path: str) -> None:
    """The 2-D frequency pattern of a vision RoPE over a patch grid (computed, not learned)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    import flax_posenc as fp

    cfg = fp.VisionRopeConfig(head_dim=64)  # Qwen2-VL / Qwen3-VL / GLM-4V layout, theta 1e4
    side = 32
    positions = fp.vision_patch_positions([[1, side, side]])  # raster order: reshape to the grid
    cos, _ = fp.vision_rope_cos_sin(positions, cfg)
    cos = np.asarray(cos).reshape(side, side, -1)
    axis, inv_freq = cfg.frequencies()
    pairs = (0, 2, 16, 18)  # rows: the two fastest row pairs, then the same pairs of the column
    fig, axes = plt.subplots(1, len(pairs), figsize=(3.2 * len(pairs), 3.4), constrained_layout=True)
    for ax, j in zip(axes, pairs):
        im = ax.imshow(cos[:, :, j], cmap="RdBu_r", vmin=-1, vmax=1)
        what = "row" if axis[j] == 0 else "column"
        ax.set_title(f"pair {j}: turns with the {what}\nw = {inv_freq[j]:.3g} rad / patch", fontsize=9)
        ax.set_xlabel("patch column")
        ax.set_ylabel("patch row")
    fig.colorbar(im, ax=axes, shrink=0.8, label="cos(angle)")
    fig.suptitle(
        "Vision RoPE, 2-D axial (head_dim 64, theta 1e4): cos of four pairs over a 32 x 32 patch grid "
        "(computed, not learned)",
        fontsize=10,
    )
    fig.savefig(path, dpi=110)
    print(f"wrote {path}")


def main() -> None:
    import argparse

    from conformance.tiny import quiet

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--figure", help="also draw the frequency pattern figure to this PNG")
    args = parser.parse_args()
    with quiet():
        found = [(name, measure(name, *rest)) for name, *rest in cases()]
        grids = grid_rows()
    labels = list(found[0][1])
    print(f"| {SIDE} x {SIDE} patches, float32 ulps vs float64 | " + " | ".join(n for n, _ in found) + " |")
    print("| --- |" + " --- |" * len(found))
    for label in labels:
        print(f"| {label} | " + " | ".join(f"{rows[label]:.2f}" for _, rows in found) + " |")
    print()
    names = list(grids)
    print("| learned grid resampled to, float32 ulps vs float64 | " + " | ".join(names) + " |")
    print("| --- |" + " --- |" * len(names))
    for label in grids[names[0]]:
        print(f"| {label} | " + " | ".join(f"{grids[n][label]:.2f}" for n in names) + " |")
    with quiet():
        llama4 = llama4_rows()
    print()
    print("| 24 x 24 patches + class token, float32 ulps vs float64 | llama4 (Llama 4 Scout tower) |")
    print("| --- | --- |")
    for label, value in llama4.items():
        print(f"| {label} | {value:.2f} |")
    if args.figure:
        figure(args.figure)


if __name__ == "__main__":
    main()
