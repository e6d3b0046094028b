"""Tiny random checkpoints of any transformers model type, built by transformers' own classes.

What the conformance suite (``tests/test_conformance.py``) and ``benchmarks/coverage.py`` build:
a config with small sizes (only fields the model type's config has are set), the model type's
base model from ``AutoModel``, float32, seeded. Per-type overrides are data in :data:`OVERRIDES`.
"""

from __future__ import annotations

import contextlib
import io
import logging
import warnings
from typing import Any

#: Small sizes, set only where the model type's config has the field.
SMALL: dict[str, Any] = {
    "vocab_size": 128,
    "hidden_size": 64,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 16,
    "intermediate_size": 64,
    "num_hidden_layers": 4,
    "max_position_embeddings": 64,
    "num_experts": 4,
    "num_local_experts": 4,
    "n_routed_experts": 4,
    "num_experts_per_tok": 2,
    "moe_intermediate_size": 32,
    "shared_expert_intermediate_size": 32,
    "n_shared_experts": 1,
    "first_k_dense_replace": 1,
    "n_group": 1,
    "topk_group": 1,
    "kv_lora_rank": 16,
    "q_lora_rank": 16,
    "qk_rope_head_dim": 8,
    "qk_nope_head_dim": 8,
    "v_head_dim": 16,
    "sliding_window": 16,
    "embedding_size": 64,
    "d_model": 64,
    "d_ff": 64,
    "d_kv": 16,
    "num_heads": 4,
    "num_layers": 2,
    "num_decoder_layers": 2,
    "encoder_layers": 2,
    "decoder_layers": 2,
    "encoder_attention_heads": 4,
    "decoder_attention_heads": 4,
    "encoder_ffn_dim": 64,
    "decoder_ffn_dim": 64,
    "n_embd": 64,
    "n_head": 4,
    "n_layer": 2,
    "n_positions": 64,
    "n_inner": 64,
    "ffn_dim": 64,
    "pad_token_id": 1,
    "bos_token_id": 0,
    "eos_token_id": 2,
}

#: One tower of a composite vision-text config (CLIP, SigLIP), small.
_TOWER = {"hidden_size": 64, "intermediate_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4}
#: The text tower and vision tower of the tiny Qwen2-VL / Qwen2.5-VL (nested configs: SMALL does not reach them).
_MROPE_TEXT = {
    "vocab_size": 128,
    "hidden_size": 64,
    "intermediate_size": 64,
    "num_hidden_layers": 1,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "max_position_embeddings": 64,
    "rope_parameters": {"rope_type": "default", "mrope_section": [2, 3, 3], "rope_theta": 1e6},
}
_MROPE_VISION = {"depth": 1, "hidden_size": 64, "num_heads": 2, "patch_size": 2, "spatial_merge_size": 2}
#: GLM-4V: interleaved pairs on half of each head (rotary_dim 8: sections sum to 4).
_GLM_ROPE = {"rope_type": "default", "mrope_section": [1, 2, 1], "rope_theta": 10000.0, "partial_rotary_factor": 0.5}
_GLM_VISION = {**_MROPE_VISION, "hidden_size": 32, "out_hidden_size": 64, "intermediate_size": 64}

#: A tiny ResNet backbone of the DETR family (its last stage, or the last three for deformable DETR).
_DETR_RESNET = {"model_type": "resnet", "hidden_sizes": [8, 8, 16, 16], "depths": [1, 1, 1, 1], "embedding_size": 8}
_DETR = {
    "backbone_config": {**_DETR_RESNET, "out_features": ["stage4"]},
    "use_timm_backbone": False,
    "use_pretrained_backbone": False,
    "d_model": 32,
    "encoder_layers": 1,
    "decoder_layers": 1,
    "encoder_attention_heads": 2,
    "decoder_attention_heads": 2,
    "encoder_ffn_dim": 32,
    "decoder_ffn_dim": 32,
    "num_queries": 5,
}
#: DETR-family detectors (kind ``detr_positions``): a tiny ResNet, width 32, one layer each.
DETR_OVERRIDES: dict[str, dict[str, Any]] = {
    "detr": _DETR,
    "conditional_detr": _DETR,
    "table-transformer": _DETR,
    "deformable_detr": {
        **_DETR,
        "backbone_config": {**_DETR_RESNET, "out_features": ["stage2", "stage3", "stage4"]},
        "num_feature_levels": 3,
        "encoder_n_points": 2,
        "decoder_n_points": 2,
    },
    **{
        t: {
            "backbone_config": {**_DETR_RESNET, "model_type": "rt_detr_resnet", "out_indices": [2, 3, 4]},
            "encoder_in_channels": [8, 16, 16],
            "encoder_hidden_dim": 32,
            "decoder_in_channels": [32, 32, 32],
            "d_model": 32,
            "encoder_layers": 1,
            "decoder_layers": 1,
            "encoder_attention_heads": 2,
            "decoder_attention_heads": 2,
            "encoder_ffn_dim": 32,
            "decoder_ffn_dim": 32,
            "num_queries": 5,
            "num_denoising": 0,
        }
        for t in ("rt_detr", "rt_detr_v2")
    },
    **{
        t: {
            "backbone_config": {
                "model_type": "hgnet_v2",
                "stem_channels": [3, 8, 8],
                "stage_in_channels": [8, 8, 16, 16],
                "stage_mid_channels": [8, 8, 8, 8],
                "stage_out_channels": [8, 16, 16, 16],
                "stage_num_blocks": [1, 1, 1, 1],
                "stage_numb_of_layers": [1, 1, 1, 1],
                "hidden_sizes": [8, 16, 16, 16],
                "depths": [1, 1, 1, 1],
                "embedding_size": 8,
                "out_indices": [2, 3, 4],
            },
            "encoder_in_channels": [16, 16, 16],
            "encoder_hidden_dim": 32,
            "decoder_in_channels": [32, 32, 32],
            "d_model": 32,
            "hidden_size": 32,  # its alias of d_model (SMALL's 64 would win)
            "head_dim": 16,
            "encoder_layers": 1,
            "decoder_layers": 1,
            "encoder_attention_heads": 2,
            "decoder_attention_heads": 2,
            "encoder_ffn_dim": 32,
            "decoder_ffn_dim": 32,
            "num_queries": 5,
            "num_denoising": 0,
        }
        for t in ("d_fine", "deimv2")
    },
    "dab-detr": {
        **{k: v for k, v in _DETR.items() if k != "d_model"},
        "hidden_size": 32,
        "temperature_height": 20,
        "temperature_width": 30,
    },
}

#: Per-model-type field overrides (applied after :data:`SMALL`).
OVERRIDES: dict[str, dict[str, Any]] = {
    "gptj": {"rotary_dim": 8},
    # JetMoE's head width is kv_channels (its head_dim alias): not hidden_size / heads, so a reading
    # that divides is caught
    "jetmoe": {"head_dim": 8},
    "bamba": {"attn_layer_indices": [1, 3]},  # attention (and RoPE) on these layers, Mamba elsewhere
    "codegen": {"rotary_dim": 8},
    "mimo_v2_flash": {"head_dim": 48},
    "dots3_note_text": {"num_key_value_heads": 4},
    "esmc": {"num_key_value_heads": 4},
    "zaya": {"num_experts_per_tok": 1},
    "mamba2": {"head_dim": 32},
    "deberta": {"relative_attention": True, "max_relative_positions": 16, "pos_att_type": ["p2c", "c2p"]},
    "deberta-v2": {
        "relative_attention": True,
        "position_buckets": 8,
        "max_relative_positions": 16,
        "pos_att_type": ["p2c", "c2p"],
    },
    "gpt_neo": {"attention_types": [[["global", "local"], 2]]},
    # vision grids: a 4 x 4 grid (32 px / 8) instead of 14 x 14 or DINOv2's 37 x 37
    **{t: {"image_size": 32, "patch_size": 8} for t in ("vit", "deit", "dinov2", "dinov2_with_registers")},
    **{t: {"image_size": 32, "patch_size": 8} for t in ("clip_vision_model", "siglip_vision_model")},
    "dinov2_with_registers": {"image_size": 32, "patch_size": 8, "num_register_tokens": 2},
    **{
        t: {
            "vision_config": {**_TOWER, "image_size": 32, "patch_size": 8},
            "text_config": {**_TOWER, "vocab_size": 128, "max_position_embeddings": length},
        }
        for t, length in (("clip", 77), ("siglip", 64))
    },
    # M-RoPE: mrope_section must sum to head_dim // 2 = 8 (transformers' default [16, 24, 24] is for 128)
    # convolutional models (kind "none"): four one-block stages instead of ResNet-50-sized defaults
    **{
        t: {"hidden_sizes": [8, 16, 24, 32], "depths": [1, 1, 1, 1], "embedding_size": 8}
        for t in ("resnet", "regnet", "convnext", "convnextv2", "dinov3_convnext", "poolformer")
    },
    "bit": {"hidden_sizes": [32, 32, 32, 32], "depths": [1, 1, 1, 1], "embedding_size": 32, "num_groups": 8},
    "ctrl": {"dff": 64},
    # 64 first rows, as the other sinusoids (at 6000 rows float32 frequencies drift past the angle's rounding)
    "speech_to_text": {"max_source_positions": 64, "max_target_positions": 64, "conv_channels": 32},
    "lfm2_moe": {"layer_types": ["conv", "full_attention", "conv", "full_attention"]},
    "zamba": {"num_hidden_layers": 6, "attn_layer_period": 2, "attn_layer_offset": 1},
    "zamba2": {
        "num_hidden_layers": 4,
        "layers_block_type": ["linear_attention", "hybrid", "linear_attention", "hybrid"],
        "n_mamba_heads": 4,
        "num_key_value_heads": 4,
    },
    "led": {"max_encoder_position_embeddings": 64, "max_decoder_position_embeddings": 64, "attention_window": 16},
    "roformer": {"embedding_size": 64},
    "efficientnet": {"width_coefficient": 0.25, "depth_coefficient": 0.25, "hidden_dim": 64},
    "dac": {"encoder_hidden_size": 8, "decoder_hidden_size": 16, "n_codebooks": 2, "codebook_size": 16},
    "qwen2_vl_text": {"rope_parameters": {"rope_type": "default", "mrope_section": [2, 3, 3], "rope_theta": 1e6}},
    "qwen2_5_vl_text": {"rope_parameters": {"rope_type": "default", "mrope_section": [2, 3, 3], "rope_theta": 1e6}},
    "qwen2_vl": {
        "text_config": _MROPE_TEXT,
        "vision_config": {**_MROPE_VISION, "embed_dim": 32},
        "image_token_id": 100,
        "video_token_id": 101,
    },
    "glm4v_text": {"rope_parameters": _GLM_ROPE},
    "glm4v_moe_text": {"rope_parameters": _GLM_ROPE},
    "glm4v_moe": {
        "text_config": {
            **_MROPE_TEXT,
            "rope_parameters": _GLM_ROPE,
            "n_routed_experts": 4,
            "num_experts_per_tok": 2,
            "moe_intermediate_size": 32,
            "n_shared_experts": 1,
            "first_k_dense_replace": 1,
        },
        "vision_config": _GLM_VISION,
        "image_token_id": 100,
        "video_token_id": 101,
    },
    "glm_ocr_text": {"rope_parameters": _GLM_ROPE},
    "glm4v": {
        "text_config": {**_MROPE_TEXT, "rope_parameters": _GLM_ROPE},
        "vision_config": _GLM_VISION,
        "image_token_id": 100,
        "video_token_id": 101,
    },
    "glm_ocr": {
        "text_config": {**_MROPE_TEXT, "rope_parameters": _GLM_ROPE},
        "vision_config": _GLM_VISION,
        "image_token_id": 100,
        "video_token_id": 101,
    },
    "qwen3_vl": {
        "text_config": {
            **_MROPE_TEXT,
            "head_dim": 16,
            "rope_parameters": {"rope_type": "default", "mrope_section": [4, 2, 2], "rope_theta": 5e5},
        },
        "vision_config": {
            **_MROPE_VISION,
            "hidden_size": 32,
            "out_hidden_size": 64,
            "intermediate_size": 64,
            "deepstack_visual_indexes": [],
            "num_position_embeddings": 16,
        },
        "image_token_id": 100,
        "video_token_id": 101,
    },
    **DETR_OVERRIDES,
    "qwen2_5_vl": {
        "text_config": _MROPE_TEXT,
        "vision_config": {
            **_MROPE_VISION,
            "out_hidden_size": 64,
            "intermediate_size": 64,
            "tokens_per_second": 3,
            "fullatt_block_indexes": [0],
            "window_size": 8,
        },
        "image_token_id": 100,
        "video_token_id": 101,
    },
}


@contextlib.contextmanager
def quiet():
    """transformers' warnings and logs off (they are about random weights, not positions)."""
    from transformers.utils import logging as hf_logging

    level = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()
    with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
        warnings.simplefilter("ignore")
        logging.disable(logging.WARNING)
        try:
            yield
        finally:
            logging.disable(logging.NOTSET)
            hf_logging.set_verbosity(level)


def tiny_config(model_type: str):
    """The model type's config class with :data:`SMALL` sizes where it has the fields."""
    from transformers import CONFIG_MAPPING

    cls = CONFIG_MAPPING[model_type]
    with quiet():
        base = cls().to_dict()
    aliases = set(getattr(cls, "attribute_map", {}) or {})
    kwargs = {k: v for k, v in SMALL.items() if k in base or k in aliases}
    if "qk_rope_head_dim" in base:  # MLA: the rotary module's head_dim is the rope head's width; one kv head per head
        kwargs.update(num_key_value_heads=SMALL["num_attention_heads"])
        if "head_dim" in base:
            kwargs["head_dim"] = SMALL["qk_rope_head_dim"]
    kwargs.update(OVERRIDES.get(model_type, {}))
    with quiet():
        return cls(**kwargs)


def tiny_model(model_type: str, seed: int = 0):
    """``AutoModel.from_config(tiny_config(model_type))``, float32, eval mode, seeded."""
    import torch
    from transformers import AutoModel

    # one intra-op thread: these models are tiny, and a second thread per pytest worker on a shared
    # 2-core machine made each forward pass ~20x slower (oversubscription), not faster
    torch.set_num_threads(1)
    config = tiny_config(model_type)
    torch.manual_seed(seed)
    with quiet():
        model = AutoModel.from_config(config, torch_dtype=torch.float32)
    return model.eval()


def tiny_composite_config(model_type: str):
    """A composite model type's config with each tower's sub-config that of :func:`tiny_config` of
    the tower's own model type (the towers' defaults from the composite's config class)."""
    from conformance.catalog import composite_towers
    from transformers import CONFIG_MAPPING

    kwargs: dict[str, Any] = {}
    for field, tower in composite_towers(model_type) or ():
        sub = tiny_config(tower).to_dict()
        kwargs[field] = {**sub, **OVERRIDES.get(f"{model_type}.{field}", {})}
    kwargs.update(OVERRIDES.get(model_type, {}))
    with quiet():
        return CONFIG_MAPPING[model_type](**kwargs)
