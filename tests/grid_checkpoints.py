"""Tiny random vision checkpoints built by transformers' own classes (shared by the grid tests).

``build(model_type, directory)`` saves a float32 model with a 4 x 4 grid (32 px / 8) and returns
it; ``embeddings_module(model)`` is the module holding ``interpolate_pos_encoding``;
``torch_position_grid(model)`` its stored table as float64 numpy ``(prefix + 16, dim)``.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
import transformers

VISION = dict(image_size=32, patch_size=8, hidden_size=16, num_hidden_layers=1, num_attention_heads=2)
TEXT = dict(vocab_size=64, hidden_size=16, num_hidden_layers=1, num_attention_heads=2, intermediate_size=16)

#: model_type -> (config class, model class, prefix tokens, config kwargs)
MODELS = {
    "vit": ("ViTConfig", "ViTModel", 1, dict(VISION, intermediate_size=16)),
    "deit": ("DeiTConfig", "DeiTModel", 2, dict(VISION, intermediate_size=16)),
    "dinov2": ("Dinov2Config", "Dinov2Model", 1, dict(VISION, mlp_ratio=1)),
    "dinov2_with_registers": (
        "Dinov2WithRegistersConfig",
        "Dinov2WithRegistersModel",
        1,
        dict(VISION, mlp_ratio=1, num_register_tokens=2),
    ),
    "clip_vision_model": ("CLIPVisionConfig", "CLIPVisionModel", 1, dict(VISION, intermediate_size=16)),
    "siglip_vision_model": ("SiglipVisionConfig", "SiglipVisionModel", 0, dict(VISION, intermediate_size=16)),
    "clip": (
        "CLIPConfig",
        "CLIPModel",
        1,
        dict(
            vision_config=dict(VISION, intermediate_size=16),
            text_config=dict(TEXT, max_position_embeddings=77),
            projection_dim=8,
        ),
    ),
    "siglip": (
        "SiglipConfig",
        "SiglipModel",
        0,
        dict(vision_config=dict(VISION, intermediate_size=16), text_config=dict(TEXT, max_position_embeddings=64)),
    ),
}


def build(model_type: str, directory: Path, seed: int = 0, **overrides):
    """Save a tiny random ``model_type`` checkpoint in ``directory``; return the torch model (eval, float32)."""
    config_cls, model_cls, _, kwargs = MODELS[model_type]
    torch.manual_seed(seed)
    config = getattr(transformers, config_cls)(**{**kwargs, **overrides})
    model = getattr(transformers, model_cls)(config).eval()
    with torch.no_grad():  # random, not the zeros/truncated-normal init, so every row differs
        emb = embeddings_module(model)
        param = emb.position_embeddings if hasattr(emb, "position_embeddings") else emb.position_embedding.weight
        param.copy_(torch.randn(param.shape) * 0.5)
    model.save_pretrained(directory)
    return model


def embeddings_module(model):
    """The vision embeddings module (holds ``interpolate_pos_encoding``)."""
    if hasattr(model, "vision_model"):
        return model.vision_model.embeddings
    return model.embeddings


def torch_position_grid(model) -> np.ndarray:
    """The stored position table, ``(prefix + gh * gw, dim)`` float64."""
    emb = embeddings_module(model)
    p = emb.position_embeddings if hasattr(emb, "position_embeddings") else emb.position_embedding.weight
    return p.detach().double().numpy().reshape(-1, p.shape[-1])


def prefix_tokens(model_type: str) -> int:
    return MODELS[model_type][2]


def torch_interpolated(model, model_type: str, height: int, width: int, patch: int = 8) -> np.ndarray:
    """transformers' own ``interpolate_pos_encoding`` for a ``height x width`` image, run in float64.

    Returns ``(prefix + (height // patch) * (width // patch), dim)`` float64.
    """
    emb = embeddings_module(model)
    orig = {n: p.detach().clone() for n, p in emb.named_parameters()}
    emb.double()
    try:
        dim = torch_position_grid(model).shape[1]
        n = prefix_tokens(model_type) + (height // patch) * (width // patch)
        with torch.no_grad():
            out = emb.interpolate_pos_encoding(torch.zeros(1, n, dim, dtype=torch.float64), height, width)
        return out.detach().reshape(-1, dim).numpy()
    finally:
        emb.float()
        with torch.no_grad():
            for name, p in emb.named_parameters():
                p.copy_(orig[name])


#: model types whose interpolate_pos_encoding casts to float32 before F.interpolate (so a
#: float64 run of the model still rounds in float32; their float64 reference is the same call).
FLOAT32_INTERPOLATION = {"dinov2": False, "dinov2_with_registers": True}  # -> antialias


def torch_formula(model_type: str, table: np.ndarray, height: int, width: int, patch: int = 8) -> np.ndarray:
    """The F.interpolate call of ``model_type``'s interpolate_pos_encoding, in float64 throughout."""
    prefix = prefix_tokens(model_type)
    side = int(round((table.shape[0] - prefix) ** 0.5))
    grid = torch.tensor(table[prefix:], dtype=torch.float64).reshape(1, side, side, -1).permute(0, 3, 1, 2)
    out = torch.nn.functional.interpolate(
        grid,
        size=(height // patch, width // patch),
        mode="bicubic",
        align_corners=False,
        antialias=FLOAT32_INTERPOLATION.get(model_type, False),
    )
    rows = out.permute(0, 2, 3, 1).reshape(-1, table.shape[1]).numpy()
    return np.concatenate([np.asarray(table[:prefix], np.float64), rows])
