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


# ---- CLIP/ViT-style towers read as rows of the learned-table and grid registries (issue 35):
# one layer, width 32, a 4 x 4 grid (32 px / 8), text tables of 16 rows
_ONE_LAYER = {"hidden_size": 32, "intermediate_size": 32, "num_hidden_layers": 1, "num_attention_heads": 2}
_GRID_TOWER = {**_ONE_LAYER, "image_size": 32, "patch_size": 8}
_TEXT_TOWER = {**_ONE_LAYER, "max_position_embeddings": 16}
GRID_TOWER_TYPES = (
    "altclip_vision_model",
    "blip_vision_model",
    "blip_2_vision_model",
    "bridgetower_vision_model",
    "chinese_clip_vision_model",
    "clipseg_vision_model",
    "flava_image_model",
    "git_vision_model",
    "instructblip_vision_model",
    "instructblipvideo_vision_model",
    "kosmos_2_vision_model",
    "metaclip_2_vision_model",
    "owlvit_vision_model",
    "owlv2_vision_model",
    "xclip_vision_model",
    "vit_msn",
    "ijepa",
    "internvl_vision",
)
TEXT_TOWER_TYPES = (
    "aimv2_text_model",
    "align_text_model",
    "altclip_text_model",
    "blip_text_model",
    "bridgetower_text_model",
    "chinese_clip_text_model",
    "clap_text_model",
    "clipseg_text_model",
    "flava_text_model",
    "groupvit_text_model",
    "metaclip_2_text_model",
    "owlvit_text_model",
    "owlv2_text_model",
    "siglip_text_model",
    "siglip2_text_model",
    "xclip_text_model",
)
OVERRIDES.update({t: dict(_GRID_TOWER) for t in GRID_TOWER_TYPES})
OVERRIDES.update({t: dict(_TEXT_TOWER) for t in TEXT_TOWER_TYPES})
OVERRIDES["bridgetower_vision_model"]["hidden_size"] = 64  # its heads are hidden_size // 64
OVERRIDES["kosmos_2_text_model"] = {
    "embed_dim": 32,
    "layers": 1,
    "attention_heads": 2,
    "ffn_dim": 32,
    "max_position_embeddings": 16,
}
OVERRIDES.update(
    {
        t: {**_TEXT_TOWER, "encoder_hidden_size": 32}
        for t in ("blip_2_qformer", "instructblip_qformer", "instructblipvideo_qformer")
    }
)
OVERRIDES["align_vision_model"] = {"width_coefficient": 0.25, "depth_coefficient": 0.25, "hidden_dim": 64}
OVERRIDES["vit_mae"] = {**_GRID_TOWER, "mask_ratio": 0.0}  # every patch kept: the token count is the grid's
OVERRIDES["pixio"] = {**_GRID_TOWER, "n_cls_tokens": 2}
OVERRIDES["git"] = {**_TEXT_TOWER, "vision_config": dict(_GRID_TOWER)}
# GroupViT's vision tower: one layer per stage, few group tokens
OVERRIDES["groupvit_vision_model"] = {
    **_GRID_TOWER,
    "depths": [1, 1, 1],
    "num_group_tokens": [4, 2, 0],
    "num_output_groups": [4, 2, 2],
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


def tower_model_class(model_type: str):
    """The base model class of a tower model type that ``AutoModel`` does not map (BLIP's
    ``blip_text_model``, OWL-ViT's ``owlvit_vision_model``, ...): :data:`TOWER_MODEL_CLASSES` when
    named there, else the one class of the config's modeling file whose ``config_class`` is the
    config class and whose name ends in ``Model`` (no head, no projection); ``None`` when there is
    no such class or several."""
    import importlib
    import inspect

    from transformers import CONFIG_MAPPING, PreTrainedModel

    config_class = CONFIG_MAPPING[model_type]
    module = importlib.import_module(config_class.__module__.replace(".configuration_", ".modeling_"))
    if model_type in TOWER_MODEL_CLASSES:
        return getattr(module, TOWER_MODEL_CLASSES[model_type])
    found = [
        c
        for name, c in vars(module).items()
        if inspect.isclass(c)
        and issubclass(c, PreTrainedModel)
        and getattr(c, "config_class", None) is config_class
        and name.endswith("Model")
        and not name.endswith(("PreTrainedModel", "LMHeadModel"))
    ]
    return found[0] if len(found) == 1 else None


#: Tower model types whose modeling file has several base classes for their config: the one a
#: composite model builds for that tower.
TOWER_MODEL_CLASSES: dict[str, str] = {
    "altclip_text_model": "AltCLIPTextModel",
    "groupvit_text_model": "GroupViTTextModel",
    "kosmos_2_text_model": "Kosmos2TextModel",
    "kosmos_2_vision_model": "Kosmos2VisionModel",
    "owlvit_text_model": "OwlViTTextModel",
    "owlvit_vision_model": "OwlViTVisionModel",
    "owlv2_text_model": "Owlv2TextModel",
    "owlv2_vision_model": "Owlv2VisionModel",
    "internvl_vision": "InternVLVisionModel",
}


def tiny_model(model_type: str, seed: int = 0):
    """``AutoModel.from_config(tiny_config(model_type))``, float32, eval mode, seeded; a tower model
    type that ``AutoModel`` does not map is built by its own base class (:func:`tower_model_class`)."""
    import torch
    from transformers import AutoModel
    from transformers.models.auto import modeling_auto

    # one intra-op thread: these models are tiny, and a second thread per pytest worker on a shared
    # 2-core machine made each forward pass ~20x slower (oversubscription), not faster
    torch.set_num_threads(1)
    config = tiny_config(model_type)
    torch.manual_seed(seed)
    tower = None if model_type in modeling_auto.MODEL_MAPPING_NAMES else tower_model_class(model_type)
    with quiet():
        if tower is not None:
            return tower(config).float().eval()
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
