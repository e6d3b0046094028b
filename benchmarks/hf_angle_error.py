"""Hugging Face's RoPE cos/sin error against float64, positions below 8192 (docs/rope-alibi.md).

    python benchmarks/hf_angle_error.py      # ~5 s; needs torch + transformers

transformers' ``LlamaRotaryEmbedding`` (default RoPE, theta 10000) forms the angle ``p * w`` in
float32 from float32 inverse frequencies; ours (``fp.rotary_cos_sin``) uses exact angles. Both
are compared with ``cos``/``sin`` of the float64 angle ``p * w64`` (``w64`` the float64 inverse
frequencies), at every position 0..8191, for head_dim 64 and 128.
"""

from __future__ import annotations

import numpy as np


def main() -> None:
    import torch
    from transformers import LlamaConfig
    from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding

    import flax_posenc as fp

    positions = np.arange(8192)
    for head_dim in (64, 128):
        config = LlamaConfig(hidden_size=head_dim * 2, num_attention_heads=2, max_position_embeddings=8192)
        with torch.no_grad():
            cos_hf, sin_hf = LlamaRotaryEmbedding(config)(torch.zeros(1), torch.from_numpy(positions[None]))
        half = head_dim // 2
        w64 = 10000.0 ** (-np.arange(0, head_dim, 2, dtype=np.float64) / head_dim)
        angle = positions[:, None] * w64
        ref_cos, ref_sin = np.cos(angle), np.sin(angle)
        hf = max(
            np.abs(cos_hf[0, :, :half].double().numpy() - ref_cos).max(),
            np.abs(sin_hf[0, :, :half].double().numpy() - ref_sin).max(),
        )
        cos, sin = fp.rotary_cos_sin(positions, fp.RopeConfig(head_dim=head_dim))
        ours = max(
            np.abs(np.asarray(cos, np.float64) - ref_cos).max(), np.abs(np.asarray(sin, np.float64) - ref_sin).max()
        )
        print(f"head_dim {head_dim}, positions 0..8191: HF max |error| {hf:.1e}, flax-posenc {ours:.1e}")


if __name__ == "__main__":
    main()
