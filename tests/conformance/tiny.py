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

#: A tiny ResNet backbone (``backbone_config`` of UperNet), four stages of width 8.
_RESNET_BACKBONE = {
    "model_type": "resnet",
    "embedding_size": 8,
    "hidden_sizes": [8, 8, 8, 8],
    "depths": [1, 1, 1, 1],
    "layer_type": "basic",
    "out_features": ["stage1", "stage2", "stage3", "stage4"],
}
#: A tiny DINOv2 backbone (``backbone_config`` of Depth Anything): a 4 x 4 grid, 4 layers of width 32.
_DINOV2_BACKBONE = {
    "model_type": "dinov2",
    "hidden_size": 32,
    "num_hidden_layers": 4,
    "num_attention_heads": 2,
    "mlp_ratio": 2,
    "image_size": 56,
    "patch_size": 14,
    "out_features": ["stage1", "stage2", "stage3", "stage4"],
}

#: Per-model-type field overrides (applied after :data:`SMALL`).
OVERRIDES: dict[str, dict[str, Any]] = {
    # models declared free of positions (convolutional vision and audio, VQGAN tokenizers), tiny
    "cvt": {
        "embed_dim": [8, 16, 16],
        "num_heads": [1, 2, 2],
        "depth": [1, 2, 3],
    },  # depth[i] > i: CvT indexes its drop-path rates by stage
    "focalnet": {"embed_dim": 8, "hidden_sizes": [16, 32, 64, 64], "depths": [1, 1, 1, 1], "image_size": 32},
    **{
        t: {"hidden_sizes": [8, 16, 16, 16], "num_attention_heads": [1, 1, 1, 1], "depths": [1, 1, 1, 1]}
        for t in ("segformer", "pvt_v2")
    },
    "glpn": {
        "hidden_sizes": [8, 16, 16, 16],
        "num_attention_heads": [1, 1, 1, 1],
        "depths": [1, 1, 1, 1],
        "decoder_hidden_size": 16,
    },
    **{t: {"scale": 0.25} for t in ("pp_lcnet", "pp_lcnet_v3", "pp_lcnet_v4")},
    "rt_detr_resnet": {
        "embedding_size": 8,
        "hidden_sizes": [8, 8, 8, 8],
        "depths": [1, 1, 1, 1],
        "layer_type": "basic",
    },
    "superpoint": {"encoder_hidden_sizes": [8, 8, 8, 8], "decoder_hidden_size": 16, "descriptor_decoder_dim": 16},
    "flava_image_codebook": {"hidden_size": 16, "num_blocks_per_group": 1, "vocab_size": 16},
    # VQGANs with one spatial attention block (GroupNorm needs multiples of 32 channels)
    "chameleon_vqgan": {
        "embed_dim": 8,
        "num_embeddings": 16,
        "latent_channels": 8,
        "resolution": 32,
        "base_channels": 32,
        "channel_multiplier": [1, 1],
        "num_res_blocks": 1,
        "attn_resolutions": [16],
    },
    "janus_vqgan": {
        "embed_dim": 8,
        "num_embeddings": 16,
        "latent_channels": 8,
        "base_channels": 32,
        "channel_multiplier": [1, 1],
        "num_res_blocks": 1,
        "projection_dim": 16,
        "image_token_embed_dim": 16,
    },
    "emu3_vqgan": {
        "codebook_size": 16,
        "base_channels": 32,
        "channel_multiplier": [1, 1],
        "num_res_blocks": 1,
        "attn_resolutions": [1],
        "hidden_size": 32,
    },
    "glm_image_vqmodel": {"embed_dim": 8, "num_embeddings": 16, "latent_channels": 8},
    "encodec": {"hidden_size": 16, "num_filters": 4, "codebook_size": 16, "codebook_dim": 16, "num_lstm_layers": 1},
    **{
        t: {
            "model_in_dim": 8,
            "upsample_initial_channel": 16,
            "upsample_rates": [2, 2],
            "upsample_kernel_sizes": [4, 4],
            "resblock_kernel_sizes": [3],
            "resblock_dilation_sizes": [[1, 3]],
        }
        for t in ("fastspeech2_conformer_hifigan", "speecht5_hifigan")
    },
    "qwen2_5_omni_bigvgan": {
        "mel_dim": 8,
        "upsample_initial_channel": 16,
        "upsample_rates": [2, 2],
        "upsample_kernel_sizes": [4, 4],
        "resblock_kernel_sizes": [3],
        "resblock_dilation_sizes": [[1, 3, 5]],
    },
    "align_vision_model": {"image_size": 32, "width_coefficient": 0.25, "depth_coefficient": 0.25, "hidden_dim": 64},
    **{
        t: {"hidden_size": 16, "num_filters": 4, "downsampling_ratios": [2, 2], "depths": [1, 1, 1]}
        for t in ("vibevoice_acoustic_tokenizer_decoder", "vibevoice_acoustic_tokenizer_encoder")
    },
    "vibevoice_acoustic_tokenizer": {
        "hidden_size": 16,
        "num_filters": 4,
        "downsampling_ratios": [2, 2],
        "depths": [1, 1, 1],
    },
    # time-series transformers: their default config has no prediction_length, and builds nothing without one
    **{t: {"prediction_length": 4, "context_length": 8} for t in ("time_series_transformer", "informer", "autoformer")},
    # heads around a backbone (backbone_config, read as the backbone tower)
    "upernet": {"backbone_config": _RESNET_BACKBONE, "hidden_size": 16, "auxiliary_channels": 8, "pool_scales": [1, 2]},
    "depth_anything": {
        "backbone_config": _DINOV2_BACKBONE,
        "reassemble_hidden_size": 32,
        "neck_hidden_sizes": [8, 8, 16, 16],
        "fusion_hidden_size": 8,
        "head_hidden_size": 8,
    },
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
        cls = model_class(model_type, config)
        if cls is None:
            model = AutoModel.from_config(config, torch_dtype=torch.float32)
        else:
            model = cls._from_config(config, torch_dtype=torch.float32)
    return model.eval()


def model_class(model_type: str, config) -> type | None:
    """The class :func:`tiny_model` builds when ``AutoModel`` does not know ``model_type``: the first
    of transformers' Auto mappings that names it (UperNet: semantic segmentation), else the class
    of the config's own package whose ``config_class`` is ``type(config)`` (a vocoder, a VQGAN);
    ``None``: ``AutoModel`` knows it.

    Raises:
      ValueError: no class of transformers takes this config (one line naming the config class).
    """
    import importlib
    import pkgutil

    import transformers
    from transformers.models.auto import modeling_auto

    if model_type in modeling_auto.MODEL_MAPPING_NAMES:
        return None
    for name in sorted(dir(modeling_auto)):
        mapping = getattr(modeling_auto, name)
        if name.endswith("_MAPPING_NAMES") and "CONFIG" not in name and isinstance(mapping, dict):
            if model_type in mapping:
                found = mapping[model_type]
                return getattr(transformers, found if isinstance(found, str) else found[0])
    package = importlib.import_module(type(config).__module__.rsplit(".", 1)[0])
    classes = []
    for info in pkgutil.iter_modules(package.__path__):
        if info.name.startswith("modeling_"):
            module = importlib.import_module(f"{package.__name__}.{info.name}")
            classes += [
                v
                for v in vars(module).values()
                if isinstance(v, type)
                and v.__module__ == module.__name__
                and getattr(v, "config_class", None) is type(config)
                and "PreTrained" not in v.__name__
            ]
    if not classes:
        raise ValueError(f"no model class of transformers takes {type(config).__name__} (a part of another model)")
    return min(classes, key=lambda c: (len(c.__name__), c.__name__))


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
