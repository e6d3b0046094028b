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
    "vocab_size_per_layer_input": 128,  # Gemma 3n/4 per-layer embeddings (262144 rows by default)
    "entity_vocab_size": 64,  # LUKE (500000 by default)
    "shared_experts_intermediate_size": 32,
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

#: A tiny speech encoder (wav2vec2 and kin): feature encoder, width, one transformer layer.
_SPEECH = {
    "hidden_size": 16,
    "num_hidden_layers": 1,
    "num_attention_heads": 2,
    "intermediate_size": 32,
    "conv_dim": (8, 8),
    "conv_kernel": (10, 3),
    "conv_stride": (5, 2),
}

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
    # speech encoders with a convolutional position embedding: a 2-layer feature encoder (hop 10
    # samples), width 16, one transformer layer, a kernel of 4 frames (even: one frame cut) in 2 groups
    **{
        t: {**_SPEECH, "num_conv_pos_embeddings": 4, "num_conv_pos_embedding_groups": 2}
        for t in ("wav2vec2", "hubert", "unispeech", "unispeech-sat", "omniasr_audio")
    },
    **{
        t: {**_SPEECH, "num_conv_pos_embeddings": 4, "num_conv_pos_embedding_groups": 2, "squeeze_factor": 2}
        for t in ("sew",)
    },
    "sew-d": {
        **_SPEECH,
        "num_conv_pos_embeddings": 4,
        "num_conv_pos_embedding_groups": 2,
        "squeeze_factor": 2,
        "position_buckets": 16,  # DeBERTa-v2 log buckets: max_relative_positions (64) >= 16 // 2 + 2
    },
    # Data2Vec-Audio: num_conv_pos_embeddings counts stacked layers; the kernel is conv_pos_kernel_size (odd)
    "data2vec-audio": {
        **_SPEECH,
        "num_conv_pos_embeddings": 2,
        "conv_pos_kernel_size": 5,
        "num_conv_pos_embedding_groups": 2,
    },
    # MusicGen decoders: one codebook, so that a (1, n) batch of ids is one sequence of n frames
    **{t: {"num_codebooks": 1, "num_hidden_layers": 1} for t in ("musicgen_decoder", "musicgen_melody_decoder")},
    # Moonshine: encoder and decoder of 2 layers, equal head counts (one rotary config serves both)
    "moonshine": {
        "encoder_num_hidden_layers": 2,
        "decoder_num_hidden_layers": 2,
        "encoder_num_attention_heads": 4,
        "decoder_num_attention_heads": 4,
        "encoder_num_key_value_heads": 4,
        "decoder_num_key_value_heads": 4,
    },
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
    # document models (kind bbox_2d): one layer, 24 wide (LiLT's and LayoutLMv3's six box vectors
    # concatenate to the width); LayoutLMv3 without the relative biases and visual part it refuses
    **{
        t: {"hidden_size": 24, "num_attention_heads": 2, "intermediate_size": 32, "num_hidden_layers": 1}
        for t in ("layoutlm", "lilt")
    },
    "layoutlmv3": {
        "hidden_size": 24,
        "num_attention_heads": 2,
        "intermediate_size": 32,
        "num_hidden_layers": 1,
        "coordinate_size": 4,
        "shape_size": 4,
        "has_relative_attention_bias": False,
        "has_spatial_attention_bias": False,
        "visual_embed": False,
    },
    # time series (computed sinusoids over context_length + prediction_length time steps): one
    # layer each, 16 wide, 8 + 4 steps, lags 1 and 2, one time feature
    **{
        t: {
            "context_length": 8,
            "prediction_length": 4,
            "lags_sequence": [1, 2],
            "num_time_features": 1,
            "d_model": 16,
            "encoder_layers": 1,
            "decoder_layers": 1,
            "encoder_attention_heads": 2,
            "decoder_attention_heads": 2,
            "encoder_ffn_dim": 16,
            "decoder_ffn_dim": 16,
            **({"label_length": 4, "moving_average": 3} if t == "autoformer" else {}),
        }
        for t in ("time_series_transformer", "informer", "autoformer")
    },
    # PatchTST: 16 steps in patches of 4 (stride 4): a 4-row table, 16 wide, one layer, two channels
    "patchtst": {
        "context_length": 16,
        "patch_length": 4,
        "patch_stride": 4,
        "num_input_channels": 2,
        "d_model": 16,
        "hidden_size": 16,
        "num_attention_heads": 2,
        "num_hidden_layers": 1,
        "ffn_dim": 16,
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


# vision-tower RoPE (issue 35, item 2): one layer, width 32, 2 heads (head_dim 16), tiny patches
_VISION_ROPE = {"num_hidden_layers": 1, "hidden_size": 32, "intermediate_size": 32, "num_attention_heads": 2}
OVERRIDES.update(
    {
        "pixtral": {**_VISION_ROPE, "image_size": 32, "patch_size": 4, "head_dim": 16},
        "dinov3_vit": {**_VISION_ROPE, "image_size": 16, "patch_size": 4, "num_register_tokens": 2},
        "qwen2_vl_vision": {"depth": 1, "embed_dim": 32, "hidden_size": 32, "num_heads": 2, "patch_size": 2},
        "lfm3_vl_vision": {
            **_VISION_ROPE,
            "patch_size": 2,
            "num_hidden_layers": 2,
            "layer_types": ["conv", "full_attention"],
        },
        "exaone4_5_vision": {
            "depth": 1,
            "hidden_size": 32,
            "out_hidden_size": 32,
            "intermediate_size": 32,
            "num_heads": 2,
            "patch_size": 2,
            "window_size": 8,
            "fullatt_block_indexes": [],
        },
        "qwen2_5_vl_vision": {
            "depth": 1,
            "hidden_size": 32,
            "out_hidden_size": 32,
            "intermediate_size": 32,
            "num_heads": 2,
            "patch_size": 2,
            "window_size": 8,  # windows of 2 x 2 merged blocks
            "fullatt_block_indexes": [],
        },
    }
)

# vision-tower RoPE, second round (issue 35, item 2): Qwen2-VL-style towers, one block, width 32,
# 2 heads, 2 px patches; Qwen3-VL's family with a 4 x 4 learned grid and no deepstack mergers
_QWEN_VISION_TOWER = {"depth": 1, "hidden_size": 32, "out_hidden_size": 32, "intermediate_size": 32, "num_heads": 2}
_QWEN_VISION_TOWER["patch_size"] = 2
for _t in (
    "qwen3_vl_vision",
    "qwen3_vl_moe_vision",
    "qwen3_5_vision",
    "qwen3_5_moe_vision",
    "qwen3_omni_moe_vision_encoder",
    "qwen4_exp_vision",
):
    OVERRIDES[_t] = {**_QWEN_VISION_TOWER, "num_position_embeddings": 16, "deepstack_visual_indexes": []}
OVERRIDES["qwen2_5_omni_vision_encoder"] = {**_QWEN_VISION_TOWER, "window_size": 8, "fullatt_block_indexes": []}
OVERRIDES["glm_ocr_vision"] = dict(_QWEN_VISION_TOWER)
OVERRIDES["glm5_next_vision"] = {**_QWEN_VISION_TOWER, "projection_intermediate_size": 32}
OVERRIDES["ernie4_5_vl_moe_vision"] = dict(_QWEN_VISION_TOWER)
OVERRIDES["video_llama_3_vision"] = {**_VISION_ROPE, "patch_size": 2}
OVERRIDES["mlcd"] = OVERRIDES["mlcd_vision_model"] = {**_VISION_ROPE, "patch_size": 4, "image_size": 16}
OVERRIDES["paddleocr_vl_vision"] = {**_VISION_ROPE, "patch_size": 2, "image_size": 8}  # a 4 x 4 grid
OVERRIDES["kimi_k25_vision"] = {
    **_VISION_ROPE,
    "patch_size": 2,
    "pos_emb_height": 4,
    "pos_emb_width": 4,
    "projection_hidden_size": 32,
}
OVERRIDES["dots3_note_vision_encoder"] = {
    **_VISION_ROPE,
    "patch_size": 2,
    "mlp_layer_types": ["dense"],
    "per_layer_config": {},
    "adapter_in_dim": 32,
    "adapter_out_dim": 32,
}
for _t in ("glm4v_vision", "glm4v_moe_vision"):  # a 4 x 4 learned grid (8 px / 2)
    OVERRIDES[_t] = {**_QWEN_VISION_TOWER, "image_size": 8}

#: Tower model types that ``AutoModel`` does not map: their model class (dotted path).
TOWER_CLASSES: dict[str, str] = {
    "qwen2_vl_vision": "transformers.models.qwen2_vl.modeling_qwen2_vl.Qwen2VisionTransformerPretrainedModel",
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
# RoPE codecs (issue 36): the upsampling convolution's groups divide the tiny width
OVERRIDES.update(
    {
        t: {"upsample_groups": SMALL["hidden_size"], "num_hidden_layers": 2}
        for t in ("mimi", "mimi_decoder", "pocket_tts_audio_tokenizer", "pocket_tts_audio_tokenizer_decoder")
    }
)
# Step 3.5/3.7's text tower: per-layer rope_theta and partial_rotary_factors (one rope_parameters per
# layer type), sliding layers with their own head count (per_layer_config)
OVERRIDES["diffusion_gemma_text"] = {"top_k_experts": 2}  # its router's topk (no default)
# dots.ocr 3's audio encoder: adapter_input_size must equal hidden_size; a narrow convolutional stem
OVERRIDES["dots3_note_audio_encoder"] = {"adapter_input_size": SMALL["hidden_size"], "downsample_hidden_size": 8}
# blank_token_id a class below the tiny vocab; no upsampling (its positions are the upsampled frames)
OVERRIDES["nemotron3_5_transcribe_word_timestamp"] = {"blank_token_id": 3, "upsampling_factor": 1}
# Omni / PaddleOCR-VL text towers: M-RoPE sections that fit the tiny head (8 frequencies)
OVERRIDES.update(
    {
        t: {"rope_parameters": {"rope_type": "default", "mrope_section": [2, 3, 3], "rope_theta": 1e6}}
        for t in ("qwen2_5_omni_text", "qwen2_5_omni_talker", "paddleocr_vl_text")
    }
)
OVERRIDES["qwen3_omni_moe_text"] = {
    "rope_parameters": {"rope_type": "default", "mrope_section": [4, 2, 2], "rope_theta": 1e6}
}
# Granite 4 Vision (composite): one deepstack pair and spatial layers inside the tiny 4-layer text tower
OVERRIDES["granite4_vision"] = {
    "deepstack_layer_map": [[0, 0]],
    "downsample_rate": "1/2",
    "spatial_target_layers": [0, 1, 2, 3],
}
# GLM-ASR (composite): the audio tower's RoPE limit (its frames) below the text tower's, so that the
# composite case sees which one binds the prompt (the text tower's)
OVERRIDES["glmasr.audio_config"] = {"max_position_embeddings": 32}
OVERRIDES["step3p5"] = {
    "layer_types": ["sliding_attention", "full_attention"] * 2,
    "rope_theta": [10000.0, 500000.0] * 2,
    "partial_rotary_factors": [1.0, 0.5] * 2,
    "num_sliding_attention_heads": 2,
    "mlp_layer_types": ["dense"] * 4,
}


_quiet_depth = 0  # how many quiet() blocks are open (only the outermost changes the levels)


@contextlib.contextmanager
def quiet():
    """transformers' warnings and logs off (they are about random weights, not positions)."""
    from transformers.utils import logging as hf_logging

    global _quiet_depth
    with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
        warnings.simplefilter("ignore")
        if _quiet_depth:  # nested: already quiet (each level change walks every logger: ~4 ms)
            _quiet_depth += 1
            try:
                yield
            finally:
                _quiet_depth -= 1
            return
        level = hf_logging.get_verbosity()
        hf_logging.set_verbosity_error()
        logging.disable(logging.WARNING)
        _quiet_depth = 1
        try:
            yield
        finally:
            _quiet_depth = 0
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


#: Model types no Auto mapping builds, and the transformers class that does (the decoders of a
#: composite that have a config and a class of their own).
MODEL_CLASSES: dict[str, str] = {
    "musicgen_decoder": "MusicgenForCausalLM",
    "musicgen_melody_decoder": "MusicgenMelodyForCausalLM",
}


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
    named = model_type in TOWER_CLASSES or model_type in MODEL_CLASSES
    auto = model_type in modeling_auto.MODEL_MAPPING_NAMES
    tower = None if named or auto else tower_model_class(model_type)
    with quiet():
        if model_type in TOWER_CLASSES:
            import importlib

            path, name = TOWER_CLASSES[model_type].rsplit(".", 1)
            model = getattr(importlib.import_module(path), name)(config).float()
        elif model_type in MODEL_CLASSES:
            import transformers

            model = getattr(transformers, MODEL_CLASSES[model_type])(config).float()
        elif tower is not None:
            model = tower(config).float()
        elif (cls := model_class(model_type, config)) is not None:
            model = cls._from_config(config, torch_dtype=torch.float32)
        else:
            model = AutoModel.from_config(config, torch_dtype=torch.float32)
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
    from flax_posenc.conversion.models import MODEL_MECHANISMS

    for field, tower in composite_towers(model_type) or ():
        nested = tower not in MODEL_MECHANISMS and composite_towers(tower)  # ColPali's PaliGemma: its own towers tiny
        sub = (tiny_composite_config(tower) if nested else tiny_config(tower)).to_dict()
        kwargs[field] = {**sub, **OVERRIDES.get(f"{model_type}.{field}", {})}
    kwargs.update(OVERRIDES.get(model_type, {}))
    with quiet():
        return CONFIG_MAPPING[model_type](**kwargs)


# ----------------------------------------------------------------------------- window bias (issue 35)
#: Swin-family and BEiT tiny sizes: a 32 px image, 1-2 stages of depth 1, a 2-4 patch window.
#: (``num_attention_heads`` and ``num_hidden_layers`` are Swin's aliases of ``num_heads`` and ``num_layers``:
#: SMALL's would replace them.)
_SWIN = {"image_size": 32, "patch_size": 4, "embed_dim": 16, "depths": [1, 1], "window_size": 4}
_SWIN.update(num_heads=[2, 4], num_attention_heads=[2, 4], num_hidden_layers=2)
_BEIT = {
    "image_size": 32,
    "patch_size": 8,
    "hidden_size": 16,
    "num_hidden_layers": 2,
    "num_attention_heads": 2,
    "intermediate_size": 32,
}
OVERRIDES.update(
    {
        "swin": _SWIN,
        "donut-swin": _SWIN,
        "maskformer-swin": _SWIN,
        # SwinV2: stage 1's 4 x 4 grid clamps the window 8 -> 4; stage 0 normalises by a pretrained 3
        "swinv2": {**_SWIN, "window_size": 8, "pretrained_window_sizes": [3, 0]},
        "swin2sr": {
            **{k: v for k, v in _SWIN.items() if k not in ("depths", "num_heads", "num_attention_heads")},
            **{"image_size": 16, "patch_size": 1, "depths": [1], "num_heads": [2], "num_attention_heads": [2]},
            "num_hidden_layers": 1,
        },
        "beit": {**_BEIT, "use_relative_position_bias": True},
        "data2vec-vision": {**_BEIT, "use_shared_relative_position_bias": True},
    }
)


# ----------------------------------------------------------------------------- grid rows (issue 35 item 7)
#: The remaining ViT-style grids: one layer, width 32, a small grid.
ISSUE35_GRID_TYPES = (
    "aimv2_vision_model",
    "eomt",
    "granite_docling_vision",
    "janus_vision_model",
    "ovis2_vision",
    "qianfan_ocr_vision",
    "rf_detr_dinov2",
    "tipsv2_vision_model",
    "videomt",
)
OVERRIDES.update({t: dict(_GRID_TOWER) for t in ISSUE35_GRID_TYPES})
OVERRIDES["mgp-str"] = {
    **_ONE_LAYER,
    "image_size": [16, 32],
    "patch_size": 8,
    "num_bpe_labels": 16,
    "num_wordpiece_labels": 16,
    "num_character_labels": 16,
    "max_token_length": 4,
}
OVERRIDES["rf_detr_dinov2"]["num_windows"] = 1  # the grid's tokens unpartitioned (windows regroup them, later)
OVERRIDES["granite_docling.vision_config"] = {"out_hidden_size": SMALL["hidden_size"]}
OVERRIDES["tipsv2.vision_config"] = {"hidden_size": 64}
OVERRIDES.update(
    {
        t: dict(_GRID_TOWER)
        for t in (
            "idefics2_vision",
            "idefics3_vision",
            "smolvlm_vision",
            "phi4_multimodal_vision",
            "unlimited_ocr_vision_encoder",
            "minicpm_ocr_vision",
            "minicpmv4_6_vision",
            "minicpmv4_7_vision",
        )
    }
)
OVERRIDES["vitdet"] = {**_GRID_TOWER, "pretrain_image_size": 32}
OVERRIDES["lw_detr_vit"] = {**_GRID_TOWER, "pretrain_image_size": 32, "num_windows": 1}
# Hiera: a 64 px image at stride 4 (a 16 x 16 grid), two one-layer stages
OVERRIDES["hiera"] = {
    "image_size": [64, 64],
    "patch_stride": [4, 4],
    "embed_dim": 16,
    "depths": [1, 1],
    "num_heads": [1, 1],
    "num_query_pool": 1,
}
OVERRIDES["molmo2_vision"] = {**_GRID_TOWER, "image_size": [32, 32]}

# ----------------------------------------------------------------------------- NaFlex grids (issue 35 item 3)
#: SigLIP 2's vision tower: a 4 x 4 learned grid of 4 px patches (published: 16 x 16 of 16 px), one layer.
OVERRIDES["siglip2_vision_model"] = {"num_patches": 16, "patch_size": 4, "num_hidden_layers": 1}

# ----------------------------------------------------------------------------- issue 36: Whisper-like encoders
#: 64 positions (128 mel frames) instead of 1500: the forward passes at and past the limit stay cheap.
for _t in ("qwen2_audio_encoder", "voxtral_encoder", "audioflamingo3_encoder", "moss_transcribe_diarize_audio"):
    OVERRIDES[_t] = {"max_source_positions": 64, "encoder_layers": 1}

# ----------------------------------------------------------------------------- Transformer-XL relative (issue 36)
#: Conformer speech encoders: 2 layers. FastSpeech2-Conformer's ``num_attention_heads`` alias is set after
#: its ``__post_init__`` built ``encoder_config`` (the module would keep 2 heads while config.json says 4):
#: the stack fields are given themselves.
OVERRIDES.update(
    {
        "parakeet_encoder": {"num_hidden_layers": 2, "subsampling_conv_channels": 8},
        "nemotron_asr_streaming_encoder": {"num_hidden_layers": 2, "subsampling_conv_channels": 8},
        "fastspeech2_conformer": {
            "encoder_num_attention_heads": 4,
            "decoder_num_attention_heads": 2,
            "encoder_layers": 1,
            "decoder_layers": 1,
            "duration_predictor_layers": 1,
            "pitch_predictor_layers": 1,
            "energy_predictor_layers": 1,
            "speech_decoder_postnet_layers": 1,
        },
        "wav2vec2-conformer": {
            "num_hidden_layers": 2,
            "num_conv_pos_embeddings": 16,
            "num_conv_pos_embedding_groups": 4,
        },
    }
)

# T5 buckets in other models (issue 36): Pix2StructTextConfig has no initializer_range, which its _init_weights reads
OVERRIDES["pix2struct_text_model"] = {"initializer_range": 0.02}

# clipped relative keys (issue 36): 2 layers, a window small enough to pass in the tiny input
OVERRIDES.update(
    {
        "wav2vec2-bert": {
            "num_hidden_layers": 2,
            "left_max_position_embeddings": 6,
            "right_max_position_embeddings": 3,
        },
        "granite_speech_encoder": {"num_layers": 2, "num_hidden_layers": 2, "max_pos_emb": 12, "context_size": 8},
        "granite_speech_plus_encoder": {"num_layers": 2, "num_hidden_layers": 2, "max_pos_emb": 12, "context_size": 8},
        "granite_speech5_encoder": {"num_hidden_layers": 2, "max_position_embeddings": 12, "context_size": 8},
    }
)
OVERRIDES["granite_speech5_ctc"] = {"vocab_size": 128}  # equal to its tiny encoder's (the config checks them)
OVERRIDES["phi4_multimodal_audio"] = {"bias_max_distance": 6, "num_blocks": 1}
OVERRIDES["vits"] = {"num_hidden_layers": 2, "window_size": 3}
OVERRIDES["bros"] = {"hidden_size": 128, "num_hidden_layers": 1}  # dim_bbox_sinusoid_emb_1d = 128 / 4 / 8 = 4
# LayoutLMv3's relative attention biases are read (issue 36): its tiny checkpoint has them, as released ones do
OVERRIDES["layoutlmv3"] = {
    **OVERRIDES["layoutlmv3"],
    "has_relative_attention_bias": True,
    "has_spatial_attention_bias": True,
}


# ----------------------------------------------------------------------------- M-RoPE text towers (issue 36)
#: Multimodal 3-D RoPE text towers: head_dim 16 (8 frequencies); sections that give every component
#: frequencies, and (interleaved sections) one index past the width, dropped as transformers does.
OVERRIDES.update(
    {
        "cosmos3_edge_text": {
            "num_hidden_layers": 1,
            "rope_parameters": {"rope_type": "default", "mrope_section": [2, 3, 3], "rope_theta": 1e6},
        },
        "qwen4_exp_text": {
            "num_hidden_layers": 2,
            "layer_types": ["linear_attention", "indexed_attention"],
            # its indexed attention's QSA indexer (rotating its own queries and keys with the same cos/sin)
            "indexer_n_heads": 2,
            "indexer_kv_heads": 1,
            "indexer_head_dim": 16,
            "indexer_budget": 8,
            "indexer_compress_ratio": 2,
            "rope_parameters": {
                "rope_type": "default",
                "mrope_section": [2, 1, 1],
                "rope_theta": 1e6,
                "partial_rotary_factor": 0.5,
            },
        },
        "cohere_compass_text": {
            "num_hidden_layers": 2,
            "layer_types": ["sliding_attention", "full_attention"],
            "rope_parameters": {
                "sliding_attention": {"rope_type": "default", "mrope_section": [2, 3, 3], "rope_theta": 5e4},
                "full_attention": {"rope_type": "default", "mrope_section": [4, 2, 2], "rope_theta": 1e6},
            },
        },
        "hy_v4_vl_text": {
            "num_hidden_layers": 2,
            "rope_parameters": {"rope_type": "default", "mrope_section": [2, 1, 1], "rope_theta": 1e4},
            "index_head_dim": 16,
            "index_n_heads": 2,
            "index_topk": 4,
        },
        "glm_image_text": {
            "num_hidden_layers": 1,
            "rope_parameters": {
                "rope_type": "default",
                "mrope_section": [1, 2, 1],
                "rope_theta": 1e4,
                "partial_rotary_factor": 0.5,
            },
        },
        # Gemma 3n: two layer types (their own theta), the last two layers sharing the first two's keys
        "gemma3n_text": {
            "num_hidden_layers": 4,
            "layer_types": ["sliding_attention", "full_attention"] * 2,
            "num_kv_shared_layers": 2,
            "vocab_size_per_layer_input": 128,
            "hidden_size_per_layer_input": 8,
            "laurel_rank": 4,
            "altup_num_inputs": 2,
            "rope_parameters": {
                "sliding_attention": {"rope_type": "default", "rope_theta": 1e4},
                "full_attention": {"rope_type": "default", "rope_theta": 1e6},
            },
        },
        # Bailing-Hybrid: one linear-attention (NoPE) and one MLA layer
        "bailing_hybrid": {"num_hidden_layers": 2, "layer_types": ["linear_attention", "full_attention"]},
        # CANINE: its character position table has num_hash_buckets rows (max_position_embeddings: 64)
        "canine": {"num_hash_buckets": 64, "num_hidden_layers": 1},
        # Reformer: a 4 x 8 axial grid (32 positions) under max_position_embeddings 64, chunks of 8
        "reformer": {
            "attn_layers": ["local", "lsh"],
            "num_hidden_layers": 2,
            "axial_pos_shape": [4, 8],
            "axial_pos_embds_dim": [32, 32],
            "lsh_attn_chunk_length": 8,
            "local_attn_chunk_length": 8,
            "num_buckets": 4,
        },
        # CPM-Ant: 8 buckets to distance 16, 4 segments, 2 prompt tokens
        "cpmant": {
            "dim_head": 16,
            "dim_ff": 64,
            "num_hidden_layers": 1,
            "position_bias_num_buckets": 8,
            "position_bias_max_distance": 16,
            "segment_types": 4,
            "prompt_types": 3,
            "prompt_length": 2,
        },
        # GLM-5-Next's text tower: NoPE (its config refuses a RoPE width); one linear and one DSA layer
        "glm5_next_text": {
            "num_hidden_layers": 2,
            "qk_rope_head_dim": 0,
            "layer_types": ["linear_attention", "indexed_attention"],
        },
    }
)

# ----------------------------------------------------------------------------- SAM/ViTDet decomposed relative positions (issue 35 item 6)
#: SAM-style image encoders: a 64 px image of 8 px patches (an 8 x 8 grid), 2 layers: layer 0 in
#: 3 x 3 windows (the grid padded to 9 x 9), layer 1 global; width 32, 2 heads (head_dim 16).
_SAM_VISION = {
    "image_size": 64,
    "patch_size": 8,
    "window_size": 3,
    "global_attn_indexes": [1],
    "num_hidden_layers": 2,
    "hidden_size": 32,
    "num_attention_heads": 2,
    "output_channels": 16,
    "mlp_dim": 32,
}
SAM_VISION_TYPES = (
    "sam_vision_model",
    "sam_hq_vision_model",
    "got_ocr2_vision",
    "slanext_vision",
    "pp_formulanet_vision",
    "deepseek_ocr2_sam_vision_model",
    "unlimited_ocr_sam_vision_model",
)
OVERRIDES.update({t: dict(_SAM_VISION) for t in SAM_VISION_TYPES})

# ----------------------------------------------------------------------------- segmentation heads' positions (issue 35 item 4)
#: A tiny Swin backbone (64 px / 4: stage grids 16, 8, 4, 2; window 2), width 8, one block a stage.
_TINY_SWIN = {
    "model_type": "swin",
    "image_size": 64,
    "embed_dim": 8,
    "depths": [1, 1, 1, 1],
    "num_heads": [1, 1, 1, 1],
    "window_size": 2,
    "out_features": ["stage1", "stage2", "stage3", "stage4"],
}
_MASK_HEAD = {
    "backbone_config": _TINY_SWIN,
    "hidden_dim": 32,
    "encoder_feedforward_dim": 32,
    "dim_feedforward": 32,
    "num_queries": 4,
    "num_attention_heads": 2,
}
OVERRIDES.update(
    {
        "mask2former": {**_MASK_HEAD, "feature_size": 32, "mask_feature_size": 32},
        "oneformer": {**_MASK_HEAD, "conv_dim": 32, "mask_dim": 32},
        "maskformer": {
            "backbone_config": _TINY_SWIN,
            "fpn_feature_size": 32,
            "mask_feature_size": 32,
            "decoder_config": {
                "model_type": "detr",
                "d_model": 32,
                "encoder_layers": 1,
                "decoder_layers": 1,
                "encoder_attention_heads": 2,
                "decoder_attention_heads": 2,
                "encoder_ffn_dim": 32,
                "decoder_ffn_dim": 32,
                "num_queries": 4,
            },
        },
    }
)

# ----------------------------------------------------------------------------- heads without positions (issue 35 item 4)
#: The PP-OCR/SLANet heads live in their task classes (the base models hold the backbone only).
MODEL_CLASSES.update(
    {
        "pp_ocrv5_mobile_det": "PPOCRV5MobileDetForObjectDetection",
        "pp_ocrv6_small_det": "PPOCRV6SmallDetForObjectDetection",
        "pp_ocrv5_mobile_rec": "PPOCRV5MobileRecForTextRecognition",
        "pp_ocrv5_server_rec": "PPOCRV5ServerRecForTextRecognition",
        "pp_ocrv6_small_rec": "PPOCRV6SmallRecForTextRecognition",
        "pp_ocrv6_tiny_rec": "PPOCRV6TinyRecForTextRecognition",
        "slanet": "SLANetForTableRecognition",
    }
)
#: CHMv2: a tiny DINOv3 backbone (32 px / 8: a 4 x 4 grid, 4 layers of width 32) under its head.
OVERRIDES["chmv2"] = {
    "backbone_config": {
        "model_type": "dinov3_vit",
        "hidden_size": 32,
        "num_hidden_layers": 4,
        "num_attention_heads": 2,
        "intermediate_size": 32,
        "image_size": 32,
        "patch_size": 8,
        "out_indices": [1, 2, 3, 4],
        "num_register_tokens": 0,
    },
    "patch_size": 8,
    "post_process_channels": [8, 8, 16, 16],
    "fusion_hidden_size": 16,
    "head_hidden_size": 8,
    "number_output_channels": 16,
}

# dots.ocr 3 composite: its config requires both adapters' output width to be the text width
OVERRIDES["dots3_note.vision_config"] = {"adapter_out_dim": SMALL["hidden_size"]}
OVERRIDES["dots3_note.audio_config"] = {"adapter_out_dim": SMALL["hidden_size"]}

# vision-tower RoPE, third round (issue 35, item 2): Llama 4's tower, one layer, width 32, 2 heads
# (head_dim 16), a 16 px image of 4 px patches (a 4 x 4 grid, pixel shuffle 0.5 to 2 x 2)
OVERRIDES["llama4_vision_model"] = {
    **_VISION_ROPE,
    "image_size": 16,
    "patch_size": 4,
    "intermediate_size": 128,  # the adapter's fc1 takes the pixel-shuffled width, 4 x 32
    "vision_output_dim": 32,
    "projector_input_dim": 32,
    "projector_output_dim": 32,
}
# Step 3.5/3.7's tower: one layer, width 32, 2 heads, a 4 x 4 learned grid (16 px / 4)
OVERRIDES["step3p5_vision"] = {**_VISION_ROPE, "image_size": 16, "patch_size": 4}

# Queries scaled by position (rope_parameters llama_4_scaling_beta): YaRN from 4 trained positions to
# 64, so that the factor 1 + beta * log(1 + floor(p / 4)) steps inside the 7 tokens of the forward check
_QUERY_SCALE_YARN = {
    "rope_type": "yarn",
    "rope_theta": 10000.0,
    "factor": 16.0,
    "original_max_position_embeddings": 4,
    "beta_fast": 32.0,
    "beta_slow": 1.0,
    "mscale": 1.0,
    "mscale_all_dim": 1.0,
    "llama_4_scaling_beta": 0.5,
}
OVERRIDES["ministral3"] = {"rope_parameters": dict(_QUERY_SCALE_YARN)}
# Mistral 4: head_dim is the whole query head (qk_nope_head_dim + qk_rope_head_dim, as its config sets
# it) and partial_rotary_factor the rope head's share (SMALL's head_dim 8 would give cos/sin of 4 dims)
OVERRIDES["mistral4"] = {
    "head_dim": SMALL["qk_nope_head_dim"] + SMALL["qk_rope_head_dim"],
    "rope_parameters": {**_QUERY_SCALE_YARN, "partial_rotary_factor": 0.5},
}
