"""transformers' defaults for the RoPE fields a Hub ``config.json`` may leave out, per model type.

A ``config.json`` on the Hub often omits a field at its default, and the default is the model
type's, not a generic one: Gemma's ``head_dim`` is 256 whatever ``hidden_size / heads`` gives,
Phi rotates half of each head, Mixtral's ``rope_theta`` is 1e6, DeepSeek-V3 interleaves its
pairs. :data:`CONFIG_DEFAULTS` holds, for each RoPE model type read, the fields whose default in
transformers' config class differs from the registry row's generic default (and does not depend
on other sizes); :func:`with_defaults` fills the fields a config leaves out (absent, not
``null``: transformers passes an explicit ``null`` on). Data only (numpy-free);
``tests/test_hub_shaped_configs.py`` recomputes it from transformers' own config classes and
fails when the two disagree.

>>> with_defaults({"model_type": "gemma", "hidden_size": 32})["head_dim"]
256
>>> with_defaults({"model_type": "gemma", "head_dim": 8})["head_dim"]
8
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

#: model_type -> {field: transformers' default}, for the fields read when absent (rope_theta,
#: partial_rotary_factor, head_dim, max_position_embeddings, rope_interleave, rotary_dim);
#: transformers 5.24.0
CONFIG_DEFAULTS: Mapping[str, Mapping[str, Any]] = MappingProxyType(
    {
        "afmoe": {"head_dim": 128, "max_position_embeddings": 16384},
        "apertus": {"max_position_embeddings": 65536, "rope_theta": 12000000.0},
        "apertus1p5_text": {"max_position_embeddings": 65536, "rope_theta": 12000000.0},
        "arcee": {"max_position_embeddings": 4096},
        "aria_text": {"max_position_embeddings": 2048},
        "axk1": {"max_position_embeddings": 32768, "rope_interleave": True},
        "axk2": {"max_position_embeddings": 131072},
        "bamba": {"max_position_embeddings": 262144, "partial_rotary_factor": 0.5},
        "bitnet": {"max_position_embeddings": 2048, "rope_theta": 500000.0},
        "codegen": {"rotary_dim": 64},
        "cohere": {"max_position_embeddings": 8192, "rope_theta": 500000.0},
        "cohere2": {"max_position_embeddings": 8192},
        "cohere2_moe": {"head_dim": 128, "max_position_embeddings": 8192},
        "cwm": {"head_dim": 128, "max_position_embeddings": 131072, "rope_theta": 1000000.0},
        "deepseek_v2": {"head_dim": 64, "max_position_embeddings": 2048},
        "deepseek_v3": {"max_position_embeddings": 4096, "rope_interleave": True},
        "deepseek_v32": {"max_position_embeddings": 163840},
        "diffllama": {"max_position_embeddings": 2048},
        "doge": {"max_position_embeddings": 2048},
        "dots1": {"max_position_embeddings": 2048},
        "ernie4_5": {"head_dim": 128, "max_position_embeddings": 131072, "rope_theta": 500000.0},
        "ernie4_5_moe": {"max_position_embeddings": 131072, "rope_theta": 500000.0},
        "esmc": {"max_position_embeddings": 2048},
        "eurobert": {"max_position_embeddings": 8192},
        "exaone": {"max_position_embeddings": 4096, "rope_theta": 500000.0},
        "exaone4": {"max_position_embeddings": 2048},
        "exaone_moe": {"max_position_embeddings": 2048},
        "falcon_h1": {"max_position_embeddings": 8192},
        "flex_olmo": {"max_position_embeddings": 4096, "rope_theta": 500000.0},
        "flint": {"head_dim": 128, "max_position_embeddings": 262144},
        "gemma": {"head_dim": 256, "max_position_embeddings": 8192},
        "gemma2": {"head_dim": 256, "max_position_embeddings": 8192},
        "glm": {"head_dim": 128, "max_position_embeddings": 131072, "partial_rotary_factor": 0.5},
        "glm4": {"head_dim": 128, "max_position_embeddings": 131072, "partial_rotary_factor": 0.5},
        "glm4_moe": {"max_position_embeddings": 131072, "partial_rotary_factor": 0.5},
        "glm4_moe_lite": {"max_position_embeddings": 202752, "rope_interleave": True},
        "glm_moe_dsa": {"max_position_embeddings": 202752},
        "gpt_neox_japanese": {"max_position_embeddings": 2048},
        "gpt_oss": {"head_dim": 64, "max_position_embeddings": 131072, "rope_theta": 150000.0},
        "gptj": {"rotary_dim": 64},
        "granite": {"max_position_embeddings": 2048},
        "granite_docling_text": {"max_position_embeddings": 32768},
        "granite_swa": {"max_position_embeddings": 8192},
        "granitemoe": {"max_position_embeddings": 2048},
        "granitemoe_swa": {"max_position_embeddings": 2048},
        "granitemoeshared": {"max_position_embeddings": 2048},
        "gte": {"max_position_embeddings": 8192, "rope_theta": 160000.0},
        "helium": {"head_dim": 128, "max_position_embeddings": 4096, "rope_theta": 100000.0},
        "hrm_text": {"head_dim": 128, "max_position_embeddings": 2048},
        "hunyuan_v1_dense": {"max_position_embeddings": 2048},
        "hunyuan_v1_moe": {"max_position_embeddings": 2048},
        "hy_v3": {"head_dim": 128, "max_position_embeddings": 131072, "rope_theta": 11158840.0},
        "hy_v4": {"max_position_embeddings": 262144},
        "hyperclovax": {"max_position_embeddings": 2048},
        "internlm3": {"head_dim": 128, "max_position_embeddings": 32768},
        "iquestcoder": {"head_dim": 128, "max_position_embeddings": 131072},
        "jais2": {"max_position_embeddings": 8192},
        "jetmoe": {"max_position_embeddings": 4096},
        "jina_embeddings_v3": {"max_position_embeddings": 8194, "rope_theta": 20000.0},
        "kolibri1": {"head_dim": 128, "max_position_embeddings": 262144},
        "lara_mini": {"head_dim": 128, "max_position_embeddings": 131072},
        "lfm2": {"max_position_embeddings": 128000, "rope_theta": 1000000.0},
        "lfm2_moe": {"max_position_embeddings": 128000, "rope_theta": 1000000.0},
        "llama4_text": {"head_dim": 128, "max_position_embeddings": 131072, "rope_theta": 500000.0},
        "longcat_flash": {"max_position_embeddings": 131072, "rope_theta": 10000000.0},
        "minicpm3": {"max_position_embeddings": 32768},
        "minimax": {"max_position_embeddings": 131072, "rope_theta": 1000000.0},
        "minimax_m2": {"head_dim": 128, "max_position_embeddings": 196608, "rope_theta": 5000000.0},
        "minimax_m3_vl_text": {"head_dim": 128, "max_position_embeddings": 524288, "rope_theta": 5000000.0},
        "ministral": {"max_position_embeddings": 131072},
        "ministral3": {"head_dim": 128, "max_position_embeddings": 262144, "rope_theta": 1000000.0},
        "mistral4": {"max_position_embeddings": 1048576, "rope_interleave": True},
        "mistral_large4_text": {"max_position_embeddings": 1048576},
        "molmo2_text": {"head_dim": 128, "max_position_embeddings": 36864},
        "muse_glimmer_text": {"head_dim": 128, "max_position_embeddings": 131072},
        "muse_spark_text": {"head_dim": 64, "max_position_embeddings": 1048576, "rope_theta": 500000.0},
        "nemotron": {"max_position_embeddings": 4096, "partial_rotary_factor": 0.5},
        "nomic_bert": {"max_position_embeddings": 2048, "rope_theta": 1000.0},
        "olmo": {"max_position_embeddings": 2048},
        "olmo2": {"max_position_embeddings": 2048},
        "olmo_hybrid": {"max_position_embeddings": 65536},
        "olmoe": {"max_position_embeddings": 4096},
        "openai_privacy_filter": {"head_dim": 64, "max_position_embeddings": 131072, "rope_theta": 150000.0},
        "persimmon": {"max_position_embeddings": 16384, "partial_rotary_factor": 0.5},
        "phi": {"max_position_embeddings": 2048, "partial_rotary_factor": 0.5},
        "phimoe": {"max_position_embeddings": 131072, "rope_theta": 1000000.0},
        "qwen3": {"head_dim": 128},
        "qwen3_next": {"head_dim": 256, "max_position_embeddings": 32768, "partial_rotary_factor": 0.25},
        "recurrent_gemma": {"partial_rotary_factor": 0.5},
        "sarvam_mla": {"max_position_embeddings": 4096, "rope_interleave": True},
        "sarvam_moe": {"head_dim": 64, "max_position_embeddings": 131072, "rope_theta": 8000000.0},
        "seed_oss": {"head_dim": 128, "max_position_embeddings": 524288},
        "smollm3": {"max_position_embeddings": 32768, "rope_theta": 2000000.0},
        "solar_open": {"head_dim": 128, "max_position_embeddings": 131072, "rope_theta": 1000000.0},
        "stablelm": {"max_position_embeddings": 4096, "partial_rotary_factor": 0.25},
        "starcoder2": {"max_position_embeddings": 4096},
        "vaultgemma": {"head_dim": 256, "max_position_embeddings": 8192},
        "youtu": {"max_position_embeddings": 131072, "rope_interleave": True},
    }
)

#: Issue 36's RoPE rows (audio encoders, codecs, towers): their config classes' defaults, as above
#: (dots.ocr 3's audio encoder: its row's own defaults, as its config class refuses a wider width).
CONFIG_DEFAULTS = MappingProxyType(
    {
        **CONFIG_DEFAULTS,
        "blt_global_transformer": {"max_position_embeddings": 4096, "rope_theta": 500000.0},
        "blt_local_decoder": {"max_position_embeddings": 24576, "rope_theta": 500000.0},
        "blt_local_encoder": {"max_position_embeddings": 24576, "rope_theta": 500000.0},
        "blt_patcher": {"max_position_embeddings": 8192},
        "csm_depth_decoder_model": {"max_position_embeddings": 33, "rope_theta": 500000.0},
        "deepseek_ocr2_encoder": {"max_position_embeddings": 32768},
        "dia_decoder": {"max_position_embeddings": 3072},
        "dia_encoder": {"head_dim": 128, "max_position_embeddings": 1024},
        "emu3_text_model": {"max_position_embeddings": 9216, "rope_theta": 1000000.0},
        "glmasr_encoder": {"max_position_embeddings": 1500, "partial_rotary_factor": 0.5},
        "granite4_vision_text": {"max_position_embeddings": 2048},
        "higgs_audio_v2": {"max_position_embeddings": 2048, "rope_theta": 500000.0},
        "lasr_encoder": {"max_position_embeddings": 10000},
        "mimi": {"max_position_embeddings": 8000},
        "mimi_decoder": {"max_position_embeddings": 8000},
        "mimi_encoder": {"max_position_embeddings": 8000},
        "mllama_text_model": {"max_position_embeddings": 131072, "rope_theta": 500000.0},
        "muse_glimmer_assistant": {"head_dim": 128, "max_position_embeddings": 131072, "rope_theta": 500000.0},
        "nemotron3_5_transcribe_asr_audio": {"max_position_embeddings": 5000, "partial_rotary_factor": 0.5},
        "nemotron3_5_transcribe_word_timestamp": {"max_position_embeddings": 5000, "partial_rotary_factor": 0.5},
        "nemotron3_diarization_audio": {"max_position_embeddings": 5000},
        "pocket_tts_audio_tokenizer": {"max_position_embeddings": 8000},
        "pocket_tts_audio_tokenizer_decoder": {"max_position_embeddings": 8000},
        "pocket_tts_audio_tokenizer_encoder": {"max_position_embeddings": 8000},
        "qwen3_omni_moe_talker_code_predictor": {"head_dim": 128, "max_position_embeddings": 32768},
        "timesfm2_5": {"max_position_embeddings": 16384},
        "unlimited_ocr_text": {"max_position_embeddings": 32768},
        "voxtral_realtime_encoder": {"head_dim": 64, "max_position_embeddings": 1500},
    }
)


def with_defaults(config: Mapping[str, Any]) -> dict[str, Any]:
    """``config`` with its model type's :data:`CONFIG_DEFAULTS` for the fields it leaves out."""
    defaults = CONFIG_DEFAULTS.get(str(config.get("model_type")), {})
    return {**defaults, **config}


_W2V_CONV = {"conv_kernel": [10, 3, 3, 3, 3, 2, 2], "conv_stride": [5, 2, 2, 2, 2, 2, 2]}
_SEW_CONV = {
    "conv_kernel": [10, 3, 1, 3, 1, 3, 1, 3, 1, 2, 1, 2, 1],
    "conv_stride": [5, 2, 1, 2, 1, 2, 1, 2, 1, 2, 1, 2, 1],
}

#: The other readers' fields (window biases, DETR sines, SAM's decomposed tables, layout boxes,
#: conformer and convolutional speech positions): model_type -> {field: transformers' default},
#: for the fields a reader needs and a Hub ``config.json`` may leave out at its default (tuples
#: as JSON lists); transformers 5.24.0. :func:`with_reader_defaults` fills them in before any
#: reader of :func:`~flax_posenc.conversion.models.read_model` sees the config (a tower's
#: sub-config by its own model type); ``tests/test_hub_shaped_configs.py`` checks each value
#: against transformers' config class.
READER_DEFAULTS: Mapping[str, Mapping[str, Any]] = MappingProxyType(
    {
        "swin": {"patch_size": 4},
        "swinv2": {"patch_size": 4},
        "donut-swin": {"patch_size": 4},
        "maskformer-swin": {"patch_size": 4},
        "swin2sr": {"patch_size": 1},
        "dab-detr": {"temperature_height": 20, "temperature_width": 20},
        "pp_doclayout_v3": {"encoder_hidden_dim": 256},
        "pp_doclayout_v4": {"encoder_hidden_dim": 256},
        **{
            t: {"use_rel_pos": True}
            for t in (
                "sam_vision_model",
                "sam_hq_vision_model",
                "got_ocr2_vision",
                "pp_formulanet_vision",
                "slanext_vision",
                "deepseek_ocr2_sam_vision_model",
                "unlimited_ocr_sam_vision_model",
            )
        },
        "fastspeech2_conformer": {"encoder_num_attention_heads": 2, "decoder_num_attention_heads": 2},
        "layoutlm": {"max_2d_position_embeddings": 1024},
        "layoutlmv3": {
            "max_2d_position_embeddings": 1024,
            "has_relative_attention_bias": True,
            "has_spatial_attention_bias": True,
            "rel_pos_bins": 32,
            "max_rel_pos": 128,
            "rel_2d_pos_bins": 64,
            "max_rel_2d_pos": 256,
        },
        "lilt": {"max_2d_position_embeddings": 1024},
        "bros": {"dim_bbox": 8},
        "wav2vec2-bert": {"position_embeddings_type": "relative_key"},
        "wav2vec2-conformer": {**_W2V_CONV, "position_embeddings_type": "relative"},
        **{
            t: _W2V_CONV
            for t in ("wav2vec2", "hubert", "data2vec-audio", "unispeech", "unispeech-sat", "omniasr_audio")
        },
        "sew": {**_SEW_CONV, "squeeze_factor": 2},
        "sew-d": {
            **_SEW_CONV,
            "squeeze_factor": 2,
            "relative_attention": True,
            "position_buckets": 256,
            "pos_att_type": ["p2c", "c2p"],
            "share_att_key": True,
            "norm_rel_ebd": "layer_norm",
            "max_position_embeddings": 512,
        },
    }
)

_DEPTH = {"num_attention_heads": "num_heads", "num_hidden_layers": "depth"}
_SWIN = {"num_attention_heads": "num_heads", "num_hidden_layers": "num_layers"}
_DETR = {
    "hidden_size": "d_model",
    "num_attention_heads": "encoder_attention_heads",
    "num_hidden_layers": "encoder_layers",
}
_RT_DETR = {"hidden_size": "d_model", "num_attention_heads": "encoder_attention_heads"}
_GRANITE_SPEECH = {
    "hidden_size": "hidden_dim",
    "num_hidden_layers": "num_layers",
    "num_attention_heads": "num_heads",
    "num_mel_bins": "input_dim",
}

#: The other spellings transformers takes for these readers' fields (its config classes'
#: ``attribute_map``: alias -> field): model_type -> {alias: field}; a Hub ``config.json`` may say
#: ``num_attention_heads`` for Swin's ``num_heads`` or ``hidden_size`` for DETR's ``d_model``, and
#: :func:`with_reader_defaults` reads the alias as the field it names (when the field itself is
#: absent) before filling :data:`READER_DEFAULTS`; transformers 5.24.0, checked by
#: ``tests/test_hub_shaped_configs.py``.
FIELD_ALIASES: Mapping[str, Mapping[str, str]] = MappingProxyType(
    {
        **{t: _DETR for t in ("conditional_detr", "detr", "table-transformer")},
        **{t: _RT_DETR for t in ("d_fine", "deformable_detr", "deimv2", "pp_doclayout_v3", "rt_detr", "rt_detr_v2")},
        "dab-detr": {"num_attention_heads": "encoder_attention_heads", "num_hidden_layers": "encoder_layers"},
        "pp_doclayout_v4": {"d_model": "hidden_size", "num_attention_heads": "encoder_attention_heads"},
        "mask2former": {"hidden_size": "hidden_dim", "num_hidden_layers": "decoder_layers"},
        "oneformer": {"hidden_size": "hidden_dim", "num_hidden_layers": "decoder_layers"},
        "maskformer": {"hidden_size": "mask_feature_size"},
        **{t: _SWIN for t in ("swin", "swinv2", "donut-swin", "maskformer-swin")},
        "swin2sr": {**_SWIN, "hidden_size": "embed_dim"},
        **{
            t: _DEPTH
            for t in (
                "ernie4_5_vl_moe_vision",
                "exaone4_5_vision",
                "glm4v_moe_vision",
                "glm4v_vision",
                "glm5_next_vision",
                "glm_ocr_vision",
                "qwen2_5_omni_vision_encoder",
                "qwen2_5_vl_vision",
                "qwen2_vl_vision",
                "qwen3_5_moe_vision",
                "qwen3_5_vision",
                "qwen3_omni_moe_vision_encoder",
                "qwen3_vl_moe_vision",
                "qwen3_vl_vision",
                "qwen4_exp_vision",
            )
        },
        "fastspeech2_conformer": {
            "num_hidden_layers": "encoder_layers",
            "num_attention_heads": "encoder_num_attention_heads",
        },
        "granite_speech_encoder": _GRANITE_SPEECH,
        "granite_speech_plus_encoder": _GRANITE_SPEECH,
        "xlnet": {
            "n_token": "vocab_size",
            "hidden_size": "d_model",
            "num_attention_heads": "n_head",
            "num_hidden_layers": "n_layer",
        },
    }
)


def with_reader_defaults(config: Mapping[str, Any]) -> Mapping[str, Any]:
    """``config`` with each :data:`FIELD_ALIASES` alias it spells read as its field, and its model
    type's :data:`READER_DEFAULTS` for the fields it leaves out, and so each sub-config with a
    ``model_type`` of its own (``config`` itself when nothing applies; the aliases stay as given).

    >>> with_reader_defaults({"model_type": "swin", "image_size": 32})["patch_size"]
    4
    >>> with_reader_defaults({"model_type": "swin", "num_attention_heads": [2, 4]})["num_heads"]
    [2, 4]
    """
    model_type = str(config.get("model_type"))
    named = {
        field: config[alias]
        for alias, field in FIELD_ALIASES.get(model_type, {}).items()
        if alias in config and field not in config
    }
    defaults = READER_DEFAULTS.get(model_type, {})
    nested = {  # a sub-config a row reads as part of its own (Qwen2.5-VL's vision_config, MaskFormer's DETR)
        key: filled
        for key, sub in config.items()
        if isinstance(sub, Mapping) and "model_type" in sub and (filled := with_reader_defaults(sub)) is not sub
    }
    if not named and not nested and all(field in config for field in defaults):
        return config
    return {**defaults, **config, **named, **nested}


__all__ = ["CONFIG_DEFAULTS", "FIELD_ALIASES", "READER_DEFAULTS", "with_defaults", "with_reader_defaults"]
