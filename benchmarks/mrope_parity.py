"""Qwen2-VL / Qwen2.5-VL M-RoPE against transformers and float64: what docs/vision-audio.md claims.

    python benchmarks/mrope_parity.py        # ~40 s on 2 shared cores; needs torch + transformers

1. Position ids: ``fp.mrope_positions`` vs ``get_rope_index`` of tiny random Qwen2-VL, Qwen2.5-VL,
   GLM-4V and Qwen3-VL models on 200 random prompts each (1-3 rows, left padding, images and videos
   with random grids and seconds per grid; GLM-4V's and Qwen3-VL's frames separated by a text
   token): how many are identical.
2. cos/sin at Qwen2-VL-7B's sizes (head_dim 128, rope_theta 1e6, mrope_section [16, 24, 24],
   max_position_embeddings 32768): 3 x 4096 random positions below 32768, transformers'
   ``Qwen2VLRotaryEmbedding`` (float32 angle) and ``fp.mrope_cos_sin`` against the float64 value.
3. The rotation: ``fp.apply_mrope`` vs the modeling file's ``apply_rotary_pos_emb`` with the
   rotary module's cos/sin, and both against float64 (random N(0, 1) queries).
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

IMAGE, VIDEO = 100, 101


def _random_prompt(rng, merge: int, split_frames: bool = False):
    """One row of token ids with its image/video grids and seconds (in order); ``split_frames``:
    each video frame its own run, followed by a text token (GLM-4V's timestamps)."""
    ids, images, videos, seconds = [], [], [], []
    for _ in range(rng.integers(1, 6)):
        ids += list(rng.integers(3, 90, rng.integers(1, 6)))
        kind = rng.integers(0, 3)
        if kind == 0:
            continue
        t = 1 if kind == 1 else int(rng.integers(1, 4))
        h, w = (int(rng.integers(1, 4)) * merge for _ in range(2))
        if kind == 2 and split_frames:
            for _ in range(t):
                ids += [VIDEO] * ((h // merge) * (w // merge)) + [int(rng.integers(3, 90))]
        else:
            ids += [IMAGE if kind == 1 else VIDEO] * (t * (h // merge) * (w // merge))
        if kind == 1:
            images.append([t, h, w])
        else:
            videos.append([t, h, w])
            seconds.append(float(rng.choice([0.5, 1.0, 1.25, 2.0, 1 / 3])))
    return ids, images, videos, seconds


def positions_agree(kind: str, prompts: int = 200) -> tuple[int, int]:
    import torch
    from conformance.tiny import tiny_model
    from test_mrope import build_tiny_qwen_vl

    import flax_posenc as fp

    model = tiny_model(kind) if kind in ("glm4v", "qwen3_vl") else build_tiny_qwen_vl(kind)
    glm = kind in ("glm4v", "qwen3_vl")  # one grid row per video frame
    rope = fp.RopeConfig(head_dim=16, rope_theta=1e6, max_position_embeddings=64)
    if kind == "glm4v":
        rope = fp.RopeConfig(head_dim=16, partial_rotary_factor=0.5, layout="interleaved", max_position_embeddings=64)
    cfg = fp.MRopeConfig(
        rope,
        mrope_section={"glm4v": (1, 2, 1), "qwen3_vl": (4, 2, 2)}.get(kind, (2, 3, 3)),
        image_token_id=IMAGE,
        video_token_id=VIDEO,
        spatial_merge_size=2,
        tokens_per_second=3 if kind == "qwen2_5_vl" else None,
        split_video_frames=glm,
        interleaved_sections=kind == "qwen3_vl",
    )
    rng = np.random.default_rng(0)
    same = 0
    for _ in range(prompts):
        rows = [_random_prompt(rng, 2, glm) for _ in range(rng.integers(1, 4))]
        width = max(len(r[0]) for r in rows) + int(rng.integers(0, 3))
        ids = np.zeros((len(rows), width), np.int64)
        mask = np.zeros_like(ids)
        for b, r in enumerate(rows):
            ids[b, width - len(r[0]) :], mask[b, width - len(r[0]) :] = r[0], 1
        images = [g for r in rows for g in r[1]] or None
        videos = [g for r in rows for g in r[2]] or None
        seconds = [s for r in rows for s in r[3]] or None
        ids_t = torch.from_numpy(ids)
        kwargs = {"second_per_grid_ts": torch.tensor(seconds, dtype=torch.float32)} if seconds else {}
        with torch.no_grad():
            theirs, _ = model.get_rope_index(
                ids_t,
                mm_token_type_ids=(ids_t == IMAGE).int() + 2 * (ids_t == VIDEO).int(),
                image_grid_thw=None if images is None else torch.tensor(images),
                video_grid_thw=None if videos is None else torch.tensor(videos),
                attention_mask=torch.from_numpy(mask),
                **kwargs,
            )
        ours = fp.mrope_positions(
            ids,
            image_grid_thw=images,
            video_grid_thw=videos,
            attention_mask=mask,
            second_per_grid_ts=seconds,
            config=cfg,
        )
        same += int(np.array_equal(ours, theirs.numpy()))
    return same, prompts


def angles_at_scale() -> dict[str, float]:
    import sys as _sys

    import jax
    import torch
    from transformers import Qwen2VLTextConfig
    from transformers.models.qwen2_vl.modeling_qwen2_vl import Qwen2VLRotaryEmbedding

    import flax_posenc as fp

    text = Qwen2VLTextConfig(
        hidden_size=3584,
        num_attention_heads=28,
        max_position_embeddings=32768,
        rope_parameters={"rope_type": "default", "mrope_section": [16, 24, 24], "rope_theta": 1e6},
    )
    module = Qwen2VLRotaryEmbedding(text)
    cfg = fp.MRopeConfig(fp.RopeConfig(head_dim=128, rope_theta=1e6, max_position_embeddings=32768))
    rng = np.random.default_rng(0)
    positions = rng.integers(0, 32768, (3, 1, 4096))
    with torch.no_grad():
        cos_t, sin_t = module(torch.zeros(1, 4096, 8), torch.from_numpy(positions))
    cos_t, sin_t = cos_t[..., :64].double().numpy(), sin_t[..., :64].double().numpy()
    cos_o, sin_o = (np.asarray(a, np.float64) for a in jax.jit(lambda p: fp.mrope_cos_sin(p, cfg))(positions))
    inv = 1e6 ** (-np.arange(0, 128, 2, dtype=np.float64) / 128)
    component = np.repeat([0, 1, 2], [16, 24, 24])
    angle = positions[component].transpose(1, 2, 0) * inv
    cos64, sin64 = np.cos(angle), np.sin(angle)
    apply = _sys.modules[Qwen2VLRotaryEmbedding.__module__].apply_rotary_pos_emb
    q = rng.standard_normal((1, 2, 4096, 128)).astype(np.float32)
    with torch.no_grad():
        ref, _ = apply(torch.from_numpy(q), torch.from_numpy(q), torch.from_numpy(cos_t).float().repeat(1, 1, 2),
                       torch.from_numpy(sin_t).float().repeat(1, 1, 2))  # fmt: skip
    ours = np.asarray(fp.apply_mrope(q, cfg, positions, seq_axis=-2), np.float64)
    c2, s2 = np.concatenate([cos64, cos64], -1)[:, None], np.concatenate([sin64, sin64], -1)[:, None]
    rot = np.concatenate([-q[..., 64:], q[..., :64]], -1).astype(np.float64)
    exact = q * c2 + rot * s2
    return {
        "cos/sin, transformers vs float64": max(np.abs(cos_t - cos64).max(), np.abs(sin_t - sin64).max()),
        "cos/sin, flax-posenc vs float64": max(np.abs(cos_o - cos64).max(), np.abs(sin_o - sin64).max()),
        "rotated q, transformers vs float64": float(np.abs(ref.double().numpy() - exact).max()),
        "rotated q, flax-posenc vs float64": float(np.abs(ours - exact).max()),
        "rotated q, flax-posenc vs transformers": float(np.abs(ours - ref.double().numpy()).max()),
    }


def main() -> None:
    print("| model | prompts with identical (3, batch, seq) positions |")
    print("| --- | --- |")
    for kind in ("qwen2_vl", "qwen2_5_vl", "glm4v", "qwen3_vl"):
        same, total = positions_agree(kind)
        print(f"| {kind} | {same} / {total} |")
    print()
    print("| Qwen2-VL-7B sizes, 3 x 4096 positions < 32768 | largest difference |")
    print("| --- | --- |")
    for name, value in angles_at_scale().items():
        print(f"| {name} | {value:.2e} |")


if __name__ == "__main__":
    main()
