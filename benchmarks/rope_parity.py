"""Measure RoPE / ALiBi parity with Hugging Face and the long-range angle error (docs/rope-alibi.md).

    python benchmarks/rope_parity.py          # ~15 s on 2 cores; needs torch + transformers

Per scaling type: max abs difference of the inverse frequencies (vs ``ROPE_INIT_FUNCTIONS``), of
``cos``/``sin`` (vs ``LlamaRotaryEmbedding``, positions < 64, past the original length for
dynamic/LongRoPE), and of rotated queries and keys (vs ``apply_rotary_pos_emb``), all float32 on
random inputs; ALiBi vs BLOOM's ``build_alibi_tensor`` and MPT's ``build_mpt_alibi_tensor``; and
the largest ``cos``/``sin`` error against float64 near ``2**24``, ours and naive float32.
"""

from __future__ import annotations

import numpy as np


def main() -> None:
    import jax.numpy as jnp
    import torch
    from transformers import LlamaConfig
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS
    from transformers.models.bloom.modeling_bloom import build_alibi_tensor
    from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding, apply_rotary_pos_emb
    from transformers.models.mpt.modeling_mpt import build_mpt_alibi_tensor

    import flax_posenc as fp
    from flax_posenc.alibi import bloom_alibi_tensor, mpt_alibi_tensor

    hd, max_pos = 64, 16
    rng = np.random.default_rng(0)
    scalings = {
        "default": {},
        "linear": {"factor": 4.0},
        "dynamic": {"factor": 2.5},
        "yarn": {"factor": 4.0, "original_max_position_embeddings": 16},
        "llama3": {
            "factor": 8.0,
            "low_freq_factor": 1.0,
            "high_freq_factor": 4.0,
            "original_max_position_embeddings": 8,
        },
        "longrope": {
            "short_factor": list(np.linspace(1, 2, hd // 2)),
            "long_factor": list(np.linspace(1, 8, hd // 2)),
            "original_max_position_embeddings": 16,
            "factor": 4.0,
        },
    }
    print("| scaling | inv_freq | cos/sin | rotated q, k | attention factor (ours = HF) |")
    print("|---|---|---|---|---|")
    for kind, extra in scalings.items():
        params = {"rope_type": kind, "rope_theta": 10000.0, **extra}
        config = LlamaConfig(
            hidden_size=4 * hd,
            num_attention_heads=4,
            head_dim=hd,
            max_position_embeddings=max_pos,
            rope_parameters=dict(params),
        )
        ours = fp.RopeConfig.from_rope_parameters(
            params, head_dim=hd, max_position_embeddings=max_pos if kind == "dynamic" else None
        )
        inv_err = cs_err = qk_err = 0.0
        for seq_len in (None, 64):
            if kind == "default":
                inv_hf, att_hf = LlamaRotaryEmbedding.compute_default_rope_parameters(config)
            else:
                inv_hf, att_hf = ROPE_INIT_FUNCTIONS[kind](config, None, seq_len=seq_len)
            inv, att = fp.rope_inverse_frequencies(ours, seq_len=seq_len)
            inv_err = max(inv_err, float(np.abs(inv - inv_hf.double().numpy()).max()))
        for high in (max_pos, 64):
            emb = LlamaRotaryEmbedding(config)
            pos = rng.integers(0, high, (2, 24))
            pos[0, -1] = high - 1
            q, k = rng.standard_normal((2, 2, 4, 24, hd)).astype(np.float32)
            with torch.no_grad():
                cos_hf, sin_hf = emb(torch.zeros(1), torch.from_numpy(pos))
                q_hf, k_hf = apply_rotary_pos_emb(torch.from_numpy(q), torch.from_numpy(k), cos_hf, sin_hf)
            cos, sin = fp.rotary_cos_sin(jnp.asarray(pos), ours)
            cs_err = max(
                cs_err,
                float(np.abs(np.asarray(cos) - cos_hf[..., : hd // 2].numpy()).max()),
                float(np.abs(np.asarray(sin) - sin_hf[..., : hd // 2].numpy()).max()),
            )
            for x, want in ((q, q_hf), (k, k_hf)):
                got = fp.apply_rotary(jnp.asarray(x), cos[:, None], sin[:, None])
                qk_err = max(qk_err, float(np.abs(np.asarray(got) - want.numpy()).max()))
        print(f"| {kind} | {inv_err:.1e} | {cs_err:.1e} | {qk_err:.1e} | {att:.6f} = {float(att_hf):.6f} |")

    alibi_err = 0.0
    for heads in (1, 5, 12, 16, 30, 71, 112):
        mask = np.ones((2, 128), np.int64)
        mask[1, :17] = 0
        want = build_alibi_tensor(torch.from_numpy(mask), heads, torch.float32).numpy()
        alibi_err = max(alibi_err, float(np.abs(np.asarray(bloom_alibi_tensor(jnp.asarray(mask), heads)) - want).max()))
    mpt_err = max(
        float(np.abs(np.asarray(mpt_alibi_tensor(h, 128, b)) - build_mpt_alibi_tensor(h, 128, b).numpy()).max())
        for h in (8, 12, 16, 24)
        for b in (8, 16)
    )
    print(f"\nALiBi: BLOOM build_alibi_tensor max abs diff {alibi_err:.1e}; MPT build_mpt_alibi_tensor {mpt_err:.1e}")

    cfg = fp.RopeConfig(head_dim=128)
    pos = np.concatenate([np.arange(2**24 - 4096, 2**24), rng.integers(0, 2**24, 4096)])
    inv, _ = fp.rope_inverse_frequencies(cfg)
    angle = pos[:, None].astype(np.float64) * inv
    cos, sin = fp.rotary_cos_sin(jnp.asarray(pos, jnp.int32), cfg)
    exact = max(
        np.abs(np.asarray(cos, np.float64) - np.cos(angle)).max(),
        np.abs(np.asarray(sin, np.float64) - np.sin(angle)).max(),
    )
    naive_angle = pos[:, None].astype(np.float32) * inv.astype(np.float32)
    naive = max(np.abs(np.cos(naive_angle) - np.cos(angle)).max(), np.abs(np.sin(naive_angle) - np.sin(angle)).max())
    print(
        f"cos/sin error vs float64 at positions < 2**24 (head_dim 128, theta 1e4): ours {exact:.1e}, naive float32 {naive:.2f}"
    )


if __name__ == "__main__":
    main()
