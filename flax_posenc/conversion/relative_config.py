"""RoPE and ALiBi configurations from a Hugging Face ``config.json`` (numpy only, no weights read).

Relative position schemes live in the attention, not in a table, so a checkpoint's
``config.json`` says everything: which scheme, its parameters and its limit. Families are data
(:data:`RELATIVE_FAMILIES`, one row each); adding one is adding a row.

Facts checked against transformers 5.x (``models/*/configuration_*.py``, ``modeling_*.py``):

- Llama, Mistral/Mixtral, Qwen2/Qwen2-MoE/Qwen3: RoPE, half layout; ``head_dim`` (optional, else
  ``hidden_size // num_attention_heads``), ``max_position_embeddings`` (defaults 2048, 131072,
  32768); Mixtral's ``rope_theta`` defaults to 1e6, the others' to 10000.
- GPT-NeoX: RoPE on ``rotary_pct`` (default 0.25) of each head, base ``rotary_emb_base``.
- GPT-J: interleaved RoPE on ``rotary_dim`` dims (``n_head``, ``n_embd``, ``n_positions``).
- Phi-3/Phi-3.5 (``phi3``): RoPE, half layout, ``max_position_embeddings`` (default 4096);
  LongRoPE (``short_factor``/``long_factor`` lists, ``rotary_dim // 2`` each) with the top-level
  ``original_max_position_embeddings``; older configs spell the type ``"su"`` or ``"yarn"``,
  which ``Phi3Config`` rewrites to ``"longrope"`` (so do we).
- Cohere 2 (and MoE), EXAONE 4 (and MoE), AFMoE, Flint, LaraMini: RoPE only on the layers their
  attention rotates (sliding-window layers; :data:`ROPE_LAYER_RULES`), NoPE on the others.
- DeepSeek-V3.2, AXK2, GLM-MoE-DSA, LongCat-Flash, dots3-note: the attention always calls
  ``apply_rotary_pos_emb_interleave`` (interleaved pairs), with no ``rope_interleave`` flag.
- JetMoE: the head width is ``kv_channels`` (its ``head_dim`` alias; default 128).
- Dory, RecurrentGemma, Bamba: the layer list transformers derives when it builds the model
  (:data:`LAYER_TYPES_RULES`); a ``layer_types`` entry without attention (linear attention, Mamba,
  convolution) is NoPE whatever ``rope_parameters`` holds.
- Falcon (``falcon``, legacy ``RefinedWeb``/``RefinedWebModel``): RoPE unless ``alibi: true``.
- BLOOM: ALiBi, ``n_head`` heads, no length limit in its config.
- MPT: ALiBi, limit ``max_seq_len`` (2048). transformers' ``MptModel`` always builds ALiBi with
  ``alibi_bias_max=8`` (``build_mpt_alibi_tensor``'s default): it reads neither
  ``attn_config.alibi`` (``false`` still runs ALiBi, never RoPE) nor ``attn_config.alibi_bias_max``
  (type-checked here, then 8 as the model uses).
- Qwen2-VL, Qwen2.5-VL, GLM-4V (and GLM-OCR), GLM-4V-MoE: multimodal RoPE (``scheme="mrope"``,
  :class:`~flax_posenc.MRopeConfig`): the text tower's RoPE from ``text_config`` (or the flat 4.x
  fields), ``mrope_section`` in ``rope_parameters`` (4.x: ``rope_scaling`` with ``type: "mrope"``,
  read as ``default``), defaults ``[16, 24, 24]`` (Qwen) and ``[8, 12, 12]`` (GLM); token ids at the
  top level; ``vision_config.spatial_merge_size`` (2) and, for Qwen2.5-VL,
  ``vision_config.tokens_per_second`` (4). GLM-4V pairs dims interleaved (``rotate_half_llm``),
  GLM-4V-MoE in halves; both rotate ``partial_rotary_factor`` (0.5) of each head and give every
  video frame its own grid row.

RoPE parameters are read as transformers 5.x writes them (``rope_parameters``: ``rope_type``,
``rope_theta``, ``factor``, ...) and as 4.x configs on the Hub hold them (top-level
``rope_theta``/``partial_rotary_factor`` plus a ``rope_scaling`` dict with ``type`` or
``rope_type``). Which keys a scaling type needs, how each key is typed and which types take a
top-level ``original_max_position_embeddings`` all come from the scaling registry,
:data:`flax_posenc.rope_config.ROPE_SCALINGS` and :data:`~flax_posenc.rope_config.ROPE_PARAMETERS`:
this reader holds no list of its own. A SOURCE is a checkpoint directory (its ``config.json``) or a ``config.json``
path.

>>> import json, tempfile, pathlib
>>> d = pathlib.Path(tempfile.mkdtemp())
>>> _ = (d / "config.json").write_text(json.dumps({"model_type": "llama", "hidden_size": 4096,
...     "num_attention_heads": 32, "max_position_embeddings": 131072, "rope_theta": 500000.0,
...     "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
...                      "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}}))
>>> rc = read_relative_config(d)
>>> rc.scheme, rc.family, rc.rope.head_dim, rc.rope.rope_type, rc.limit
('rope', 'llama', 128, 'llama3', 131072)
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Any, Literal, cast

from flax_posenc import rope_config
from flax_posenc.alibi_config import AlibiConfig
from flax_posenc.bounds import MAX_HEADS, MAX_POSITIONS
from flax_posenc.conversion.attention_scale import query_scale_of, softmax_scale, temperature_of
from flax_posenc.conversion.config_defaults import with_defaults
from flax_posenc.conversion.families import row_for_model_type
from flax_posenc.conversion.readers import fail
from flax_posenc.conversion.sources import CONFIG_NAME, read_config
from flax_posenc.errors import CheckpointError
from flax_posenc.limits import (
    ALIBI_LIMIT_REASON,
    NoLimit,
    describe_limit,
    limit_name,
    rope_limit_reason,
    verdict_line,
)
from flax_posenc.mrope_config import MRopeConfig
from flax_posenc.rope_config import ROPE_PARAMETERS, RopeConfig, RopeFieldError, RopeLayout, rope_type_of

Scheme = Literal["rope", "alibi", "mrope"]


@dataclasses.dataclass(frozen=True)
class RelativeFamily:
    """One family's relative-position config, as data.

    Attributes:
      name: our name for the family.
      model_types: ``config.json`` ``model_type`` values that mean it.
      scheme: ``"rope"``, ``"alibi"`` or ``"mrope"`` (multimodal RoPE: a
        :class:`~flax_posenc.MRopeConfig` beside the RoPE); with ``alibi_flag`` set, the default
        when the flag is absent.
      alibi_flag: dotted config path of a boolean choosing ALiBi over RoPE (Falcon ``alibi``,
        MPT ``attn_config.alibi``), or ``None``.
      heads_fields, hidden_fields: fields holding the head count and the model width (first present wins).
      head_dim_field: field holding the head width, or ``None`` (always ``hidden // heads``).
      theta_fields, theta_default: legacy top-level RoPE base fields and the model's default.
      partial_fields, partial_default: rotary fraction fields (GPT-NeoX ``rotary_pct``) and default.
      rotary_dim_field: a field giving the rotated dims directly (GPT-J ``rotary_dim``).
      layout: RoPE layout, ``"half"`` or ``"interleaved"``.
      limit_fields, limit_default: fields holding the length limit and the model's default
        (``None``: no limit).
      alibi_bias_max_field, alibi_bias_max_default: a config field stating ALiBi's ``max_bias`` that
        the model does not apply (MPT's ``attn_config.alibi_bias_max``: type-checked only) and the
        ``max_bias`` the model uses (8).
      rope_head_dim_field: the MLA rope head's field, read when ``head_dim`` is absent.
      layout_flag: a config boolean choosing the interleaved layout (DeepSeek's ``rope_interleave``).
      per_layer_type: the family's configs hold one ``rope_parameters`` per layer type; one
        without them is refused.
      layer_theta_field: a per-layer list of thetas, ``0`` meaning a NoPE layer (Granite-SWA's and
        Muse's ``layer_rope_theta``); layer_theta_is_flag: its non-zero values only switch RoPE on
        (Muse applies the one ``rope_theta``), else each is that layer's base (Granite-SWA).
      rope_type_aliases: ``(old, new)`` spellings of ``rope_type``/``type`` that transformers
        rewrites for this family (Phi-3's legacy ``"su"`` and ``"yarn"`` mean ``"longrope"``).
      text_config_field: a multimodal config's text tower (``"text_config"``): the RoPE fields
        are read there when the config has it (transformers 5), else at the top level (4.x).
      mrope_section_default: ``scheme="mrope"``: transformers' section when a config has none.
      mrope_split_video_frames: ``scheme="mrope"``: one grid row per video frame (GLM-4V, Qwen3-VL).
      mrope_interleaved_sections: ``scheme="mrope"``: Qwen3-VL's interleaved frequency sections.
      head_dim_default: the head width the model uses when ``head_dim_field`` is absent (JetMoE's
        ``kv_channels``: 128), instead of ``hidden // heads``; ``None``: divide.
      layer_types_rule: a :data:`LAYER_TYPES_RULES` name: the layer list as transformers derives it
        when it builds the model (Dory's paired ``layer_types``, RecurrentGemma's ``block_types``,
        Bamba's ``attn_layer_indices``), read instead of the saved ``layer_types``.
      rope_layer_rule: a :data:`ROPE_LAYER_RULES` name: which attention layers rotate, by the
        model's own rule (Cohere 2, EXAONE 4, AFMoE, Flint: RoPE on sliding-window layers only);
        the others are NoPE. Without one, every attention layer rotates (a ``layer_types`` entry
        in :data:`NON_ATTENTION_LAYER_TYPES` never does).
      refuse_flags: ``(config field, what)`` pairs: a true value means a use of the positions this
        library does not reproduce (RoFormer's ``rotary_value``: the values are rotated too), and
        the config is refused in one line naming the field.
      name_limit_field: the limit sentence names the field of ``limit_fields`` the config holds
        (Bailing-Hybrid's ``model_max_length``, transformers' ``max_position_embeddings`` alias)
        rather than ``max_position_embeddings``.
      rope_head_share: ``rope_parameters``' ``partial_rotary_factor`` is the rope head's share of the
        query head (Mistral 4: ``qk_rope_head_dim / head_dim``), not a part of the rope head: the RoPE
        is read on the rope head (``head_dim_field``), all of it rotated; a share that does not give
        the rope head's width is refused (transformers' cos/sin would not fit it).
      mrope_temporal_field, mrope_temporal_default: ``scheme="mrope"`` only: the
        ``vision_config`` field scaling a video's temporal positions (Qwen2.5-VL
        ``tokens_per_second``) and its default; ``None``: temporal positions step by 1 (Qwen2-VL).
    """

    name: str
    model_types: tuple[str, ...]
    scheme: Scheme = "rope"
    alibi_flag: str | None = None
    heads_fields: tuple[str, ...] = ("num_attention_heads",)
    hidden_fields: tuple[str, ...] = ("hidden_size",)
    head_dim_field: str | None = "head_dim"
    theta_fields: tuple[str, ...] = ("rope_theta",)
    theta_default: float = 10000.0
    partial_fields: tuple[str, ...] = ("partial_rotary_factor",)
    partial_default: float = 1.0
    rotary_dim_field: str | None = None
    layout: RopeLayout = "half"
    limit_fields: tuple[str, ...] = ("max_position_embeddings",)
    limit_default: int | None = None
    alibi_bias_max_field: str | None = None
    alibi_bias_max_default: float = 8.0
    rope_type_aliases: tuple[tuple[str, str], ...] = ()
    rope_head_dim_field: str | None = None
    layout_flag: str | None = None
    per_layer_type: bool = False
    layer_theta_field: str | None = None
    head_dim_default: int | None = None
    layer_types_rule: str | None = None
    rope_layer_rule: str | None = None
    layer_theta_is_flag: bool = False
    text_config_field: str | None = None
    mrope_temporal_field: str | None = None
    mrope_temporal_default: float | None = None
    mrope_section_default: tuple[int, ...] = (16, 24, 24)
    mrope_split_video_frames: bool = False
    mrope_interleaved_sections: bool = False
    refuse_flags: tuple[tuple[str, str], ...] = ()
    name_limit_field: bool = False
    rope_head_share: bool = False


#: Model types whose RoPE is transformers v5's standard one: ``rope_parameters`` (one dict, or one
#: per layer type with ``layer_types``), ``head_dim`` (else ``hidden_size // num_attention_heads``),
#: ``partial_rotary_factor``, ``max_position_embeddings``, half layout, NoPE layers from
#: ``no_rope_layers``. Each is verified by ``tests/test_conformance.py`` against a tiny checkpoint
#: built by its own transformers classes; adding a model type here adds its conformance case.
STANDARD_ROPE_MODEL_TYPES: tuple[str, ...] = (
    "apertus",
    "apertus1p5_text",
    "arcee",
    "aria_text",
    "bitnet",
    "cwm",
    "diffllama",
    "doge",
    "dots1",
    "esmc",
    "eurobert",
    "exaone",
    "falcon_h1",
    "flex_olmo",
    "gemma",
    "gemma2",
    "glm4_moe",
    "gpt_neox_japanese",
    "gpt_oss",
    "granite",
    "granite_docling_text",
    "granitemoe",
    "granitemoeshared",
    "gte",
    "hrm_text",
    "hunyuan_v1_dense",
    "hunyuan_v1_moe",
    "hy_v3",
    "hyperclovax",
    "internlm3",
    "iquestcoder",
    "jais2",
    "jina_embeddings_v3",
    "kolibri1",
    "lfm2",
    "lfm2_moe",
    "minimax",
    "minimax_m2",
    "minimax_m3_vl_text",
    "ministral",
    "ministral3",
    "molmo2_text",
    "nemotron",
    "nomic_bert",
    "olmo",
    "olmo2",
    "olmo_hybrid",
    "olmoe",
    "persimmon",
    "phi",
    "phimoe",
    "qwen3_next",
    "sarvam_moe",
    "seed_oss",
    "smollm3",
    "solar_open",
    "stablelm",
    "starcoder2",
    "vaultgemma",
)

#: Qwen3-VL (and its MoE text tower; Qwen3.5's text towers are a row of their own): multimodal RoPE with interleaved sections (T H W T H W ...)
#: and one grid row per video frame; text-only positions make it plain RoPE.
QWEN3_VL_MODEL_TYPES: tuple[str, ...] = (
    "qwen3_vl",
    "qwen3_vl_moe_text",
    "qwen3_vl_text",
)

#: ``layer_types`` entries of layers without attention (convolutions, MLP-only, state-space and
#: linear-attention mixers): they see no position encoding.
NON_ATTENTION_LAYER_TYPES: tuple[str, ...] = ("conv", "mlp", "mamba", "linear_attention", "recurrent")

#: DeepSeek-style multi-head latent attention: RoPE on the rope head only (``head_dim``, which
#: transformers v5 sets to ``qk_rope_head_dim``; older configs hold only the latter), interleaved
#: when ``rope_interleave`` is true.
MLA_ROPE_MODEL_TYPES: tuple[str, ...] = (
    "axk1",
    "deepseek_v3",
    "glm4_moe_lite",
    "hy_v4",
    "minicpm3",
    "sarvam_mla",
    "youtu",
)

#: Standard RoPE model types whose transformers 5 config always holds one ``rope_parameters`` per
#: layer type (Gemma 3/4, ModernBERT, OLMo 3, ...). A config without them (4.x fields such as
#: ``rope_local_base_freq`` or ``global_rope_theta``) is refused rather than read with one theta.
PER_LAYER_TYPE_ROPE_MODEL_TYPES: tuple[str, ...] = (
    "beam",
    "embedding_gemma2_text",
    "gemma3_text",
    "gemma4_text",
    "gemma4_unified_text",
    "laguna",
    "lfm3",
    "mellum",
    "mimo_v2_flash",
    "modernbert",
    "modernbert-decoder",
    "neomme",
    "olmo3",
    "ultrabert",
    "zaya",
)

#: Standard RoPE model types whose pairs are interleaved (``x[2i]`` with ``x[2i + 1]``).
INTERLEAVED_ROPE_MODEL_TYPES: tuple[str, ...] = (
    "cohere",
    "deepseek_v2",
    "ernie4_5",
    "ernie4_5_moe",
    "glm",
    "glm4",
    "helium",
    "llama4_text",
    "openai_privacy_filter",
)

#: MLA/DSA attention whose forward always rotates with ``apply_rotary_pos_emb_interleave`` (pairs
#: ``x[2i]``, ``x[2i + 1]``), whatever the config says: no ``rope_interleave`` flag is read.
MLA_INTERLEAVED_ROPE_MODEL_TYPES: tuple[str, ...] = (
    "axk2",
    "deepseek_v32",
    "glm_moe_dsa",
    "longcat_flash",
)


def _types_paired_with_mlp(config: Mapping[str, Any]) -> tuple[list[Any], Any] | None:
    """Dory: a released ``layer_types`` listing attention and ``"mlp"`` blocks separately is read by
    transformers as (attention, mlp) pairs: every other entry, ``num_hidden_layers`` halved."""
    types = config.get("layer_types")
    if not isinstance(types, list) or "mlp" not in types:
        return None
    count = config.get("num_hidden_layers")
    return types[::2], count // 2 if isinstance(count, int) and not isinstance(count, bool) else count


def _types_from_block_types(config: Mapping[str, Any]) -> tuple[list[Any], Any] | None:
    """RecurrentGemma: ``block_types`` repeated to ``num_hidden_layers``; ``"recurrent"`` blocks
    are linear-attention (recurrent) layers, the others local attention."""
    blocks, count = config.get("block_types"), config.get("num_hidden_layers")
    if not isinstance(blocks, list) or not blocks or not isinstance(count, int) or isinstance(count, bool):
        return None
    types = [("linear_attention" if b == "recurrent" else "sliding_attention") for b in blocks * count][:count]
    return types, count


def _types_from_attention_indices(config: Mapping[str, Any]) -> tuple[list[Any], Any] | None:
    """Bamba: attention on the layers in ``attn_layer_indices`` (none when it is absent), Mamba elsewhere."""
    count = config.get("num_hidden_layers")
    if not isinstance(count, int) or isinstance(count, bool):
        return None
    indices = config.get("attn_layer_indices") or []
    if not isinstance(indices, list):
        return None
    return ["full_attention" if i in indices else "mamba" for i in range(count)], count


#: ``name -> rule(config) -> (layer_types, num_hidden_layers) or None``: the layer list transformers
#: derives when it builds the model (:attr:`RelativeFamily.layer_types_rule`).
LAYER_TYPES_RULES: Mapping[str, Any] = MappingProxyType(
    {
        "paired_with_mlp": _types_paired_with_mlp,
        "block_types": _types_from_block_types,
        "attention_indices": _types_from_attention_indices,
    }
)


def _sliding(config: Mapping[str, Any], types: list[Any]) -> list[bool]:
    """AFMoE, LaraMini: only ``sliding_attention`` layers rotate."""
    return [t == "sliding_attention" for t in types]


def _sliding_windowed(config: Mapping[str, Any], types: list[Any]) -> list[bool]:
    """Cohere 2, Flint: only layers with a sliding window rotate (``sliding_attention`` while
    ``sliding_window`` is set; none without one)."""
    windowed = config.get("sliding_window") is not None
    return [windowed and t == "sliding_attention" for t in types]


def _sliding_windowed_or_dense_prefix(config: Mapping[str, Any], types: list[Any]) -> list[bool]:
    """Cohere 2 MoE: as Cohere 2, and the dense prefix layers (``mlp_layer_types`` ``"dense"``)
    also rotate while ``prefix_dense_sliding_window_pattern`` is 1 (its ``force_rope``)."""
    mlp = config.get("mlp_layer_types")
    mlp = mlp if isinstance(mlp, list) and len(mlp) == len(types) else ["sparse"] * len(types)
    forced = config.get("prefix_dense_sliding_window_pattern", 1) == 1
    return [w or (forced and m == "dense") for w, m in zip(_sliding_windowed(config, types), mlp, strict=True)]


def _global_nope_when_windowed(config: Mapping[str, Any], types: list[Any]) -> list[bool]:
    """EXAONE 4: every layer rotates without a ``sliding_window``; with one, the sliding ones only
    (global NoPE)."""
    if config.get("sliding_window") is None:
        return [True] * len(types)
    return [t == "sliding_attention" for t in types]


#: ``name -> rule(config, layer_types) -> [layer rotates]``: which attention layers apply RoPE, as
#: the model's own attention decides (:attr:`RelativeFamily.rope_layer_rule`).
ROPE_LAYER_RULES: Mapping[str, Any] = MappingProxyType(
    {
        "sliding": _sliding,
        "sliding_windowed": _sliding_windowed,
        "sliding_windowed_or_dense_prefix": _sliding_windowed_or_dense_prefix,
        "global_nope_when_windowed": _global_nope_when_windowed,
    }
)


def _types_from_cross_attention_layers(config: Mapping[str, Any]) -> tuple[list[Any], Any] | None:
    """Mllama's text tower: the layers in ``cross_attention_layers`` (transformers' default
    ``[3, 8, ..., 38]`` when absent) attend to the image states, without positions; the others
    are self-attention layers with RoPE."""
    count = config.get("num_hidden_layers")
    cross = config.get("cross_attention_layers", list(range(3, 40, 5)))
    if not isinstance(count, int) or isinstance(count, bool) or not isinstance(cross, list):
        return None
    return ["cross_attention" if i in cross else "full_attention" for i in range(count)], count


def _not_cross_attention(config: Mapping[str, Any], types: list[Any]) -> list[bool]:
    """Mllama: cross-attention layers rotate nothing (their keys are image states)."""
    return [t != "cross_attention" for t in types]


#: Issue 36: the rules above, and Mllama's cross-attention layers.
LAYER_TYPES_RULES = MappingProxyType(
    {**LAYER_TYPES_RULES, "cross_attention_layers": _types_from_cross_attention_layers}
)
ROPE_LAYER_RULES = MappingProxyType({**ROPE_LAYER_RULES, "not_cross_attention": _not_cross_attention})


#: Issue 36's RoPE rows: audio encoders, codecs, a time series model and the inner towers of
#: composite models whose rotary module is the standard one (``inv_freq`` from ``rope_parameters``,
#: ``head_dim``, ``partial_rotary_factor``), each checked by its conformance case against the
#: modeling file's own rotary module and forward pass. Their positions are what the tower rotates:
#: tokens, or audio frames after the encoder's subsampling (GLM-ASR, LASR, Nemotron, Voxtral
#: Realtime: mel frames / stride), codec frames (Mimi, PocketTTS: samples / frame size), patches of
#: ``patch_length`` time steps (TimesFM 2.5), bytes (BLT); ``max_position_embeddings`` is the
#: declared limit in that unit (none of them enforces it).
TOWER_ROPE_MODEL_TYPES: tuple[str, ...] = (
    "csm_depth_decoder_model",
    "deepseek_ocr2_encoder",  # a causal encoder over SAM patches and queries: 1-D positions
    "dia_decoder",  # audio frames (one position per frame of num_channels codebooks)
    "dia_encoder",
    "emu3_text_model",
    "glmasr_encoder",  # partial_rotary_factor 0.5, on the slice apply_rotary_pos_emb cuts
    "granite4_vision_text",
    "higgs_audio_v2",
    "lasr_encoder",
    "mimi",
    "mimi_decoder",
    "mimi_encoder",
    "muse_glimmer_assistant",  # queries take the last positions of context + noise block
    "nemotron3_5_transcribe_asr_audio",
    "nemotron3_5_transcribe_word_timestamp",  # its positions are the frames after upsampling_factor
    "nemotron3_diarization_audio",
    "pocket_tts_audio_tokenizer",
    "pocket_tts_audio_tokenizer_decoder",
    "pocket_tts_audio_tokenizer_encoder",
    "qwen3_omni_moe_talker_code_predictor",
    "step3p5",  # rope_parameters per layer type (per-layer rope_theta / partial_rotary_factors)
    "timesfm2_5",
    "unlimited_ocr_text",
    "voxtral_realtime_encoder",
)

#: Rows of :data:`RELATIVE_FAMILIES` added by issue 36 (joined at its end).
TOWER_ROPE_FAMILIES: tuple[RelativeFamily, ...] = (
    RelativeFamily("rope_towers", TOWER_ROPE_MODEL_TYPES),
    # BLT (patcher, local byte encoder/decoder, global transformer): its rotary module
    # repeat_interleaves the angles and its rotate_half pairs x[2i] with x[2i + 1]: interleaved
    RelativeFamily(
        "blt",
        ("blt_global_transformer", "blt_local_decoder", "blt_local_encoder", "blt_patcher"),
        layout="interleaved",
    ),
    # dots.ocr 3's audio encoder: rotates half of each head (its config's default partial_rotary_factor
    # 0.5) over mel frames / 8 (three stride-2 convolutions); limit max_position_embeddings (6000)
    RelativeFamily("dots3_note_audio", ("dots3_note_audio_encoder",), partial_default=0.5, limit_default=6000),
    # Mllama's text tower: RoPE on its self-attention layers; the cross_attention_layers (image states
    # as keys) are NoPE
    RelativeFamily(
        "mllama_text",
        ("mllama_text_model",),
        theta_default=500000.0,
        limit_default=131072,
        layer_types_rule="cross_attention_layers",
        rope_layer_rule="not_cross_attention",
    ),
    # DiffusionGemma's text tower: Gemma 4's per-layer-type RoPE (proportional, partial 0.25 on the
    # full-attention layers and their own global_head_dim through per_layer_config)
    RelativeFamily("rope_per_layer_type_towers", ("diffusion_gemma_text",), per_layer_type=True),
    # Qwen2.5-Omni's thinker text tower and talker: Qwen2-VL's M-RoPE (contiguous sections, halves);
    # their get_rope_index steps a video's frames by position_id_per_seconds (25) per second, and
    # interleaves audio (not modelled by fp.mrope_positions: the cos/sin of given positions are read)
    RelativeFamily(
        "qwen2_5_omni",
        ("qwen2_5_omni_talker", "qwen2_5_omni_text"),
        scheme="mrope",
        theta_default=1e6,
        limit_default=32768,
        rope_type_aliases=(("mrope", "default"),),
        mrope_temporal_field="position_id_per_seconds",
        mrope_temporal_default=25,
    ),
    # PaddleOCR-VL's text tower: Qwen2-VL's M-RoPE (its frames step by 1)
    RelativeFamily(
        "paddleocr_vl",
        ("paddleocr_vl_text",),
        scheme="mrope",
        theta_default=500000.0,
        limit_default=131072,
        rope_type_aliases=(("mrope", "default"),),
    ),
    # Qwen3-Omni-MoE's thinker text tower: Qwen3-VL's interleaved sections (T H W T H W ...); its
    # get_rope_index gives a video's frames position_id_per_seconds (25) per second in one grid
    RelativeFamily(
        "qwen3_omni_moe",
        ("qwen3_omni_moe_text",),
        scheme="mrope",
        theta_default=1e6,
        limit_default=32768,
        mrope_section_default=(24, 20, 20),
        mrope_interleaved_sections=True,
        mrope_temporal_field="position_id_per_seconds",
        mrope_temporal_default=25,
    ),
)


RELATIVE_FAMILIES: Mapping[str, RelativeFamily] = MappingProxyType(
    {
        f.name: f
        for f in (
            RelativeFamily("llama", ("llama",), limit_default=2048),
            RelativeFamily("rope", STANDARD_ROPE_MODEL_TYPES),
            RelativeFamily("rope_per_layer_type", PER_LAYER_TYPE_ROPE_MODEL_TYPES, per_layer_type=True),
            RelativeFamily("dory", ("dory",), per_layer_type=True, layer_types_rule="paired_with_mlp"),
            RelativeFamily("rope_layer_theta", ("granite_swa", "granitemoe_swa"), layer_theta_field="layer_rope_theta"),
            RelativeFamily(
                "rope_layer_flag",
                ("muse_glimmer_text", "muse_spark_text"),
                layer_theta_field="layer_rope_theta",
                layer_theta_is_flag=True,
            ),
            RelativeFamily("rope_interleaved", INTERLEAVED_ROPE_MODEL_TYPES, layout="interleaved"),
            RelativeFamily(
                "cohere2",
                ("cohere2",),
                layout="interleaved",
                rope_layer_rule="sliding_windowed",
            ),
            RelativeFamily(
                "cohere2_moe",
                ("cohere2_moe",),
                layout="interleaved",
                rope_layer_rule="sliding_windowed_or_dense_prefix",
            ),
            RelativeFamily("rope_sliding_only", ("afmoe", "lara_mini"), rope_layer_rule="sliding"),
            RelativeFamily("rope_sliding_windowed", ("flint",), rope_layer_rule="sliding_windowed"),
            RelativeFamily("exaone4", ("exaone4", "exaone_moe"), rope_layer_rule="global_nope_when_windowed"),
            RelativeFamily("jetmoe", ("jetmoe",), head_dim_field="kv_channels", head_dim_default=128),
            # Moonshine (speech to text): one rope_parameters (partial_rotary_factor 0.9) for its encoder and
            # decoder, interleaved pairs (its apply_rotary_pos_emb repeat_interleaves cos/sin); its head count
            # is decoder_num_attention_heads (the alias num_attention_heads is not saved)
            RelativeFamily(
                "moonshine", ("moonshine",), heads_fields=("decoder_num_attention_heads",), layout="interleaved"
            ),
            RelativeFamily("recurrent_gemma", ("recurrent_gemma",), layer_types_rule="block_types"),
            RelativeFamily("bamba", ("bamba",), layer_types_rule="attention_indices"),
            RelativeFamily(
                "rope_per_layer_type_interleaved",
                ("dots3_note_text",),
                per_layer_type=True,
                layout="interleaved",
            ),
            RelativeFamily(
                "mla_interleaved",
                MLA_INTERLEAVED_ROPE_MODEL_TYPES,
                rope_head_dim_field="qk_rope_head_dim",
                layout="interleaved",
            ),
            RelativeFamily(
                "mla",
                MLA_ROPE_MODEL_TYPES,
                rope_head_dim_field="qk_rope_head_dim",
                layout_flag="rope_interleave",
            ),
            RelativeFamily(
                "qwen2_vl",
                ("qwen2_vl", "qwen2_vl_text"),
                scheme="mrope",
                theta_default=1e6,
                limit_default=32768,
                rope_type_aliases=(("mrope", "default"),),
                text_config_field="text_config",
            ),
            RelativeFamily(
                "qwen2_5_vl",
                ("qwen2_5_vl", "qwen2_5_vl_text"),
                scheme="mrope",
                theta_default=1e6,
                limit_default=128000,
                rope_type_aliases=(("mrope", "default"),),
                text_config_field="text_config",
                mrope_temporal_field="tokens_per_second",
                mrope_temporal_default=4,
            ),
            RelativeFamily(
                "glm4v",
                ("glm4v", "glm4v_text", "glm_ocr", "glm_ocr_text"),
                scheme="mrope",
                layout="interleaved",
                limit_default=32768,
                text_config_field="text_config",
                mrope_section_default=(8, 12, 12),
                mrope_split_video_frames=True,
            ),
            RelativeFamily(
                "glm4v_moe",
                ("glm4v_moe", "glm4v_moe_text"),
                scheme="mrope",
                partial_default=0.5,
                limit_default=65536,
                text_config_field="text_config",
                mrope_section_default=(8, 12, 12),
                mrope_split_video_frames=True,
            ),
            RelativeFamily(
                "qwen3_vl",
                QWEN3_VL_MODEL_TYPES,
                scheme="mrope",
                theta_default=500000.0,
                limit_default=128000,
                text_config_field="text_config",
                mrope_section_default=(24, 20, 20),
                mrope_split_video_frames=True,
                mrope_interleaved_sections=True,
            ),
            RelativeFamily(
                "qwen3_5",
                ("qwen3_5_text", "qwen3_5_moe_text"),
                scheme="mrope",
                partial_default=0.25,
                limit_default=32768,
                text_config_field="text_config",
                mrope_section_default=(11, 11, 10),
                mrope_split_video_frames=True,
                mrope_interleaved_sections=True,
            ),
            RelativeFamily("mistral", ("mistral",), limit_default=4096 * 32),
            RelativeFamily("mixtral", ("mixtral",), theta_default=1e6, limit_default=4096 * 32),
            RelativeFamily("qwen2", ("qwen2", "qwen2_moe", "qwen3", "qwen3_moe"), limit_default=32768),
            RelativeFamily(
                "phi3",
                ("phi3",),
                limit_default=4096,
                rope_type_aliases=(("su", "longrope"), ("yarn", "longrope")),
            ),
            RelativeFamily(
                "gpt_neox",
                ("gpt_neox",),
                theta_fields=("rotary_emb_base", "rope_theta"),
                partial_fields=("rotary_pct", "partial_rotary_factor"),
                partial_default=0.25,
                limit_default=2048,
            ),
            RelativeFamily(
                "gptj",
                ("gptj", "codegen"),
                heads_fields=("n_head", "num_attention_heads"),
                hidden_fields=("n_embd", "hidden_size"),
                head_dim_field=None,
                rotary_dim_field="rotary_dim",
                layout="interleaved",
                limit_fields=("n_positions", "max_position_embeddings"),
                limit_default=2048,
            ),
            # RoFormer: an nn.Embedding of [sin | cos] per head (head_dim = hidden // heads), rotating
            # interleaved pairs of q and k (apply_rotary_position_embeddings); base 10000; rows:
            # max_position_embeddings, which it indexes (its limit)
            RelativeFamily(
                "roformer",
                ("roformer",),
                head_dim_field=None,
                theta_fields=(),
                layout="interleaved",
                limit_default=1536,
                refuse_flags=(("rotary_value", "the value vectors rotated too"),),
            ),
            RelativeFamily(
                "falcon",
                ("falcon", "RefinedWeb", "RefinedWebModel"),
                alibi_flag="alibi",
                heads_fields=("num_attention_heads", "n_head"),
                hidden_fields=("hidden_size", "n_embed"),
                head_dim_field=None,
                limit_default=2048,
            ),
            RelativeFamily(
                "bloom",
                ("bloom",),
                scheme="alibi",
                heads_fields=("n_head", "num_attention_heads"),
                head_dim_field=None,
                limit_fields=(),
            ),
            RelativeFamily(
                "mpt",
                ("mpt",),
                scheme="alibi",  # MptModel ignores attn_config.alibi: ALiBi always
                heads_fields=("n_heads", "num_attention_heads"),
                hidden_fields=("d_model", "hidden_size"),
                head_dim_field=None,
                limit_fields=("max_seq_len",),
                limit_default=2048,
                alibi_bias_max_field="attn_config.alibi_bias_max",
            ),
            *TOWER_ROPE_FAMILIES,
        )
    }
)

#: Multimodal 3-D RoPE text towers read as Qwen-VL's M-RoPE (issue 36): each row checked against its
#: modeling file's rotary module (``recomposition_frequencies``) and ``apply_rotary_pos_emb``.
#: Cosmos3-Edge, Qwen4-Exp, Cohere Compass: Qwen3-VL's interleaved sections (H at 1, 4, ..., W at
#: 2, 5, ...), half layout; Cohere Compass with one ``rope_parameters`` (and section) per layer
#: type; GLM-Image: contiguous sections, half layout, ``partial_rotary_factor`` (default 1).
MROPE_TEXT_TOWER_FAMILIES: tuple[RelativeFamily, ...] = (
    RelativeFamily(
        "cosmos3_edge_text",
        ("cosmos3_edge_text",),
        scheme="mrope",
        theta_default=1e8,
        limit_default=131072,
        head_dim_default=128,
        text_config_field="text_config",
        mrope_section_default=(24, 20, 20),
        mrope_split_video_frames=True,
        mrope_interleaved_sections=True,
    ),
    RelativeFamily(
        "qwen4_exp_text",
        ("qwen4_exp_text",),
        scheme="mrope",
        limit_default=32768,
        head_dim_default=256,
        text_config_field="text_config",
        mrope_section_default=(11, 11, 10),
        mrope_split_video_frames=True,
        mrope_interleaved_sections=True,
    ),
    RelativeFamily(
        "cohere_compass_text",
        ("cohere_compass_text",),
        scheme="mrope",
        head_dim_field=None,  # CohereCompassTextConfig sets head_dim = hidden_size // num_attention_heads
        limit_default=8192,
        per_layer_type=True,
        text_config_field="text_config",
        mrope_section_default=(24, 20, 20),
        mrope_split_video_frames=True,
        mrope_interleaved_sections=True,
    ),
    RelativeFamily(
        "hy_v4_vl_text",
        ("hy_v4_vl_text",),
        scheme="mrope",
        head_dim_field="qk_rope_head_dim",  # HYV4VLTextConfig sets head_dim = qk_rope_head_dim
        head_dim_default=64,
        layout="interleaved",  # its MLA apply_rotary_pos_emb repeat_interleaves cos/sin and pairs x[2i], x[2i + 1]
        limit_default=262144,
        text_config_field="text_config",
        mrope_section_default=(12, 10, 10),
        mrope_split_video_frames=True,
        mrope_interleaved_sections=True,
    ),
    RelativeFamily(
        "glm_image_text",
        ("glm_image_text",),
        scheme="mrope",
        limit_default=131072,
        text_config_field="text_config",
        mrope_section_default=(8, 12, 12),
    ),
)
#: RoPE rows of issue 36's last text types: nanochat (its ``rotate_half`` is ``cat(x2, -x1)``: the
#: half pairs turned by minus the angle, layout ``"half_reversed"``).
LAST_TEXT_ROPE_FAMILIES: tuple[RelativeFamily, ...] = (
    RelativeFamily("nanochat", ("nanochat",), layout="half_reversed", limit_default=2048),
    # Gemma 3n: Gemma 3's RoPE, one rope_parameters per layer type (its AltUp streams and per-layer
    # inputs are embeddings of the token ids, not of positions)
    RelativeFamily("gemma3n_text", ("gemma3n_text",), per_layer_type=True, limit_default=32768),
    # Bailing-Hybrid: MLA attention rotating interleaved pairs of its rope head (head_dim is set to
    # qk_rope_head_dim) on full_attention layers, linear attention (NoPE) elsewhere; its limit is saved
    # as model_max_length (transformers' alias of max_position_embeddings)
    RelativeFamily(
        "bailing_hybrid",
        ("bailing_hybrid",),
        head_dim_field="qk_rope_head_dim",
        head_dim_default=64,
        layout="interleaved",
        theta_default=6e6,
        limit_fields=("model_max_length", "max_position_embeddings"),
        limit_default=262144,
        name_limit_field=True,
    ),
    # Mistral 4: DeepSeek-V3's MLA attention (interleaved pairs of the rope head when rope_interleave),
    # its config's head_dim the whole query head and partial_rotary_factor the rope head's share; its
    # queries are scaled by position too (llama_4_scaling_beta: RelativeConfig.query_scale)
    RelativeFamily(
        "mistral4",
        ("mistral4",),
        head_dim_field="qk_rope_head_dim",
        layout_flag="rope_interleave",
        rope_head_share=True,
    ),
)
RELATIVE_FAMILIES = MappingProxyType(
    {**RELATIVE_FAMILIES, **{f.name: f for f in MROPE_TEXT_TOWER_FAMILIES + LAST_TEXT_ROPE_FAMILIES}}
)


@dataclasses.dataclass(frozen=True)
class RelativeConfig:
    """The relative position scheme of a checkpoint: exactly one of ``rope`` / ``alibi`` is set.

    Attributes:
      source: the SOURCE as given; ``config_path``: the ``config.json`` read.
      family, model_type: our family name and the config's ``model_type``.
      scheme: ``"rope"``, ``"alibi"`` or ``"mrope"`` (Qwen-VL's multimodal RoPE).
      rope: the :class:`~flax_posenc.RopeConfig` (``None`` for ALiBi; the text tower's for M-RoPE).
      mrope: the :class:`~flax_posenc.MRopeConfig` of an ``"mrope"`` scheme, else ``None``.
      alibi: the :class:`~flax_posenc.AlibiConfig` (``None`` for RoPE).
      length_field: the field the file holds its length in, as the limit sentence names it
        (``max_position_embeddings``; a GGUF file's ``llama.context_length``).
      num_heads: attention heads.
      layer_type: the ``layer_types`` entry this record serves (``None``: not per layer type).
      layers: the layers it serves (``None``: every layer).
      softmax_scale: RoPE: the factor the model's attention multiplies ``q . k`` by
        (:func:`~flax_posenc.conversion.attention_scale.softmax_scale`: ``head_dim ** -0.5``, a
        config override, or MLA's ``mscale ** 2`` times it); ``None`` for ALiBi.
      tensors: which query/key tensors ``rope.layout`` refers to when they are not the source's own
        (a GGUF file's: the Hugging Face ones transformers makes on load), one sentence; ``None``:
        the checkpoint's own tensors.
      query_scale: ``(beta, original_max_position_embeddings)`` when the model's attention multiplies
        its rotated queries by ``1 + beta * log(1 + floor(p / original_max_position_embeddings))``
        at position ``p`` (Ministral 3, Mistral 4: ``rope_parameters`` ``llama_4_scaling_beta``;
        :func:`flax_posenc.attention_temperature` with ``position_offset=0`` computes it);
        ``None``: no such scale.
    """

    source: str
    config_path: Path
    family: str
    model_type: str
    scheme: Scheme
    num_heads: int
    rope: RopeConfig | None = None
    alibi: AlibiConfig | None = None
    length_field: str = "max_position_embeddings"
    layer_type: str | None = None
    layers: tuple[int, ...] | None = None
    mrope: Any = None
    softmax_scale: float | None = None
    tensors: str | None = None
    query_scale: tuple[float, int] | None = None

    key = None  # a config holds no tensor (the :class:`~flax_posenc.conversion.SourceRecord` field)

    @property
    def limit(self) -> int | None:
        """Usable positions (``None``: no limit); see :attr:`RopeConfig.limit`."""
        return self.rope.limit if self.rope is not None else cast(AlibiConfig, self.alibi).limit

    def describe_limit(self) -> str:
        """One phrase naming the limit and where it comes from, in the words of the run-time error
        (:mod:`flax_posenc.limits`: :func:`~flax_posenc.limits.rope_limit_reason`)."""
        what = f"{self.family} {self.label}"
        if self.rope is not None:
            r = self.rope
            if r.no_limit_reason is not None:
                return f"{limit_name(what, of=self.source)} has no limit ({r.no_limit_reason})"
            if r.limit is None:
                return f"{limit_name(what, of=self.source)} has no configured limit"
            reason = rope_limit_reason(
                r.max_position_embeddings,
                r.scaled_limit,
                r.effective_factor,
                r.trained_length,
                length_field=self.length_field,
            )
            return describe_limit(limit_name(what, reason, of=self.source), r.limit)
        limit = cast(AlibiConfig, self.alibi).max_positions  # one of rope and alibi is set
        if limit is None:
            return f"{limit_name(what, of=self.source)} has no configured limit (ALiBi extrapolates)"
        return describe_limit(limit_name(what, ALIBI_LIMIT_REASON, of=self.source), limit)

    @property
    def scheme_name(self) -> str:
        if self.mrope is not None:
            return f"{self.mrope.rope.rope_type} M-RoPE (mrope_section {'/'.join(map(str, self.mrope.mrope_section))})"
        return f"{self.rope.rope_type} RoPE" if self.rope is not None else "ALiBi"

    @property
    def label(self) -> str:
        """``"default RoPE"``, ``"default RoPE (sliding_attention layers 0, 1, 3)"``, ``"ALiBi"``."""
        return self.scheme_name + _layers_phrase(self.layer_type, self.layers)

    def check_length(self, length: int) -> tuple[bool, str]:
        """Whether ``length`` positions fit, and one line saying so (the CLI's ``check``)."""
        return verdict_line(length, self.limit, self.describe_limit())

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "source": self.source,
            "config": str(self.config_path),
            "family": self.family,
            "model_type": self.model_type,
            "scheme": self.scheme,
            "num_heads": self.num_heads,
            "limit": self.limit,
        }
        if self.layer_type is not None:
            out["layer_type"] = self.layer_type
        if self.layers is not None:
            out["layers"] = list(self.layers)
        if self.tensors is not None:
            out["tensors"] = self.tensors
        out[self.scheme] = cast("RopeConfig | AlibiConfig", self.mrope or self.rope or self.alibi).to_dict()
        if self.softmax_scale is not None:
            out["softmax_scale"] = self.softmax_scale
        if self.query_scale is not None:
            out["query_scale"] = {
                "llama_4_scaling_beta": self.query_scale[0],
                "original_max_position_embeddings": self.query_scale[1],
            }
        return out

    @property
    def query_scale_phrase(self) -> str | None:
        """``"1 + 0.1 * log(1 + floor(p / 16384))"``: the factor of the query at position ``p``, or ``None``."""
        if self.query_scale is None:
            return None
        return f"1 + {self.query_scale[0]:g} * log(1 + floor(p / {self.query_scale[1]}))"

    def __str__(self) -> str:
        lines = [
            f"source:      {self.source}",
            f"family:      {self.family} ({self.model_type})",
            f"scheme:      {self.label}",
            f"heads:       {self.num_heads}",
        ]
        if self.rope is not None:
            r = self.rope
            lines += [
                f"head_dim:    {r.head_dim} (rotary_dim {r.rotary_dim}, layout {r.layout})",
                f"rope_theta:  {r.rope_theta:g}",
            ]
            if self.softmax_scale is not None:
                lines.append(f"softmax:     scale {self.softmax_scale:.6g} (head_dim ** -0.5 = {r.head_dim**-0.5:.6g})")
            if self.tensors is not None:
                lines.insert(-1, f"tensors:     {self.tensors}")
            if self.query_scale is not None:
                lines.append(f"queries:     scaled by {self.query_scale_phrase} at position p (llama_4_scaling_beta)")
            extras = {k: v for k, v in r.to_dict().items() if k in _SCALING_NUMBERS}
            if extras:
                lines.append("scaling:     " + ", ".join(f"{k}={v:g}" for k, v in extras.items()))
            if self.mrope is not None:
                m = self.mrope
                lines.append(
                    f"mrope:       section {list(m.mrope_section)} (temporal, height, width), image_token_id "
                    f"{m.image_token_id}, video_token_id {m.video_token_id}, spatial_merge_size "
                    f"{m.spatial_merge_size}, tokens_per_second {m.tokens_per_second}"
                )
        else:
            alibi = cast(AlibiConfig, self.alibi)  # one of rope and alibi is set
            slopes = AlibiConfig.to_dict(alibi)["slopes"]
            lines.append(f"slopes:      {slopes[0]:.4g} .. {min(slopes):.4g} (max_bias {alibi.max_bias:g})")
        lines.append(f"limit:       {self.describe_limit()}")
        return "\n".join(lines)


def _layers_phrase(layer_type: str | None, layers: tuple[int, ...] | None) -> str:
    if layer_type is None and layers is None:
        return ""
    where = [layer_type] if layer_type else []
    if layers is not None:
        shown = ", ".join(map(str, layers[:8])) + (", ..." if len(layers) > 8 else "")
        where.append(f"layer{'s' if len(layers) != 1 else ''} {shown}")
    return f" ({' '.join(where)})"


@dataclasses.dataclass(frozen=True)
class NoPositionLayers(NoLimit):
    """Layers that see no position encoding at all (NoPE): SmolLM3's and Llama 4's
    ``no_rope_layers`` zeros, a layer type whose ``rope_parameters`` are ``null``.

    They impose no limit (``limit`` is ``None``); the model's other mechanisms do.
    """

    source: str
    family: str
    model_type: str
    layers: tuple[int, ...] | None
    layer_type: str | None = None
    #: ``(floor_scale, attn_scale)``: Llama 4's temperature tuning scales these layers' queries by
    #: position (:func:`flax_posenc.attention_temperature`); ``None``: position-free.
    temperature: tuple[int, float] | None = None

    scheme = "nope"
    key = None

    @property
    def label(self) -> str:
        label = "NoPE" + _layers_phrase(self.layer_type, self.layers)
        if self.temperature is not None:
            label += f", queries scaled by log1p(floor((p + 1) / {self.temperature[0]})) * {self.temperature[1]:g} + 1"
        return label

    def describe_limit(self) -> str:
        return f"{self.family} {self.label} of {self.source} has no limit (no position encoding)"

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"source": self.source, "family": self.family, "model_type": self.model_type}
        out.update(scheme="nope", layer_type=self.layer_type, limit=None)
        out["layers"] = None if self.layers is None else list(self.layers)
        if self.temperature is not None:
            out["temperature_tuning"] = {"floor_scale": self.temperature[0], "attn_scale": self.temperature[1]}
        return out

    def __str__(self) -> str:
        return f"scheme:      {self.label}\nlimit:       {self.describe_limit()}"


def _get(config: Mapping[str, Any], dotted: str) -> Any:
    node: Any = config
    for part in dotted.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return None
        node = node[part]
    return node


def _first(config: Mapping[str, Any], fields: tuple[str, ...]) -> Any:
    return next((config[f] for f in fields if config.get(f) is not None), None)


def _first_name(config: Mapping[str, Any], fields: tuple[str, ...]) -> str:
    """The config's own name of the first present field (for messages), else all of them."""
    return next((f for f in fields if config.get(f) is not None), " or ".join(fields))


def _bounded(where: object, field: str, value: int, bound: int, what: str) -> int:
    """``value`` when at most ``bound``, else one line naming the config's own ``field``."""
    if value > bound:
        raise fail(where, f"{field} at most {bound} {what}", repr(value)[:80])
    return value


def _int_field(where: object, expected: str, value: Any) -> int:
    """``value`` when it is a positive integer (not a bool, a string or a float), else one line."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise fail(where, expected if " " in expected else f"{expected} as a positive integer", repr(value)[:80])
    return value


def _number_field(where: object, name: str, value: Any, *, bound: float) -> float:
    """``value`` as a float when it is a finite number of magnitude at most ``bound``, else one line.

    (Signs and finer ranges are :class:`~flax_posenc.RopeConfig`'s to check.)
    """
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and abs(float(value)) <= bound
    if not ok:
        raise fail(where, f"{name} as a finite number of magnitude at most {bound:g}", repr(value)[:80])
    return float(value)


#: The scaling parameters ``str(RelativeConfig)`` lists: the numbers beyond the base and the fraction.
_SCALING_NUMBERS = tuple(
    k
    for k, kind in ROPE_PARAMETERS.items()
    if kind in ("number", "count") and k not in ("rope_theta", "partial_rotary_factor")
)


def family_for(config: Mapping[str, Any]) -> RelativeFamily | None:
    """The :data:`RELATIVE_FAMILIES` row whose ``model_types`` include the config's, else ``None``.

    ``-``/``_`` spellings are accepted as for every registry
    (:func:`~flax_posenc.conversion.families.model_type_spellings`).
    """
    return row_for_model_type(config.get("model_type"), RELATIVE_FAMILIES.values())


def config_path_of(source: str | os.PathLike) -> Path | None:
    """``config.json`` of SOURCE when it is a directory holding one or a ``*.json`` config path."""
    path = Path(os.fspath(source)).expanduser()
    if path.is_dir() and (path / CONFIG_NAME).is_file():
        return path / CONFIG_NAME
    if path.is_file() and path.suffix == ".json" and not path.name.endswith(".index.json"):
        return path
    return None


def relative_config_from_dict(
    config: Mapping[str, Any], *, source: str = "config", path: Path | None = None
) -> RelativeConfig:
    """Build the :class:`RelativeConfig` of a parsed ``config.json`` whose layers share one scheme.

    A config with one RoPE per layer type, or with NoPE layers, has several records: read it with
    :func:`relative_configs_from_dict`.

    Raises:
      CheckpointError: not a RoPE/ALiBi family (the known ones are listed), a missing field,
        parameters :class:`~flax_posenc.RopeConfig` rejects, or several per-layer schemes (one
        line naming the file).
    """
    records = relative_configs_from_dict(config, source=source, path=path)
    if len(records) != 1:
        kinds = ", ".join(r.label for r in records)
        raise fail(path or source, "one rope_parameters dict for all layers", f"per-layer schemes: {kinds}")
    if not isinstance(records[0], RelativeConfig):  # every layer NoPE (no_rope_layers all zeros)
        raise fail(path or source, "RoPE or ALiBi layers", f"no position encoding in any layer ({records[0].label})")
    return records[0]


def relative_configs_from_dict(
    config: Mapping[str, Any], *, source: str = "config", path: Path | None = None
) -> tuple[RelativeConfig | NoPositionLayers, ...]:
    """Every relative position scheme of a parsed ``config.json``: one record per layer type.

    One :class:`RelativeConfig` when all layers share one RoPE (or ALiBi); one per layer type
    when ``rope_parameters`` holds a dict per ``layer_types`` entry (Gemma 3, ModernBERT); and a
    :class:`NoPositionLayers` for the layers without any (``no_rope_layers`` zeros: SmolLM3,
    Llama 4; a layer type whose parameters are ``null``). ``rope_parameters`` for a layer type no
    layer uses are not read (no record, no check of their values), as transformers ignores them:
    its own configs carry them (a one-layer ModernBERT or a Gemma 3 whose ``layer_types`` are all
    ``full_attention`` is saved with ``sliding_attention`` parameters too).

    Raises:
      CheckpointError: as :func:`relative_config_from_dict`; also per-layer lists of the wrong
        length, ``layer_types`` entries without parameters, or per-type parameters that are not
        dicts.
    """
    where = path or source
    family = family_for(config)
    if family is None:
        known = sorted(t for f in RELATIVE_FAMILIES.values() for t in f.model_types)
        raise fail(where, f"a RoPE/ALiBi model_type ({len(known)} known)", repr(config.get("model_type")))
    config = with_defaults(config)  # the model type's own defaults for the fields a Hub config leaves out
    outer = config
    if family.text_config_field is not None and config.get(family.text_config_field) is not None:
        text = config[family.text_config_field]
        if not isinstance(text, Mapping):
            raise fail(where, f"{family.text_config_field} as a JSON object", type(text).__name__)
        config = {**text, "model_type": config.get("model_type")}
    for field, what in family.refuse_flags:
        if config.get(field):
            raise fail(where, f"{field} false ({what} is not read)", repr(config.get(field))[:80])
    heads = _int_field(
        where, f"a positive head count in {' or '.join(family.heads_fields)}", _first(config, family.heads_fields)
    )
    heads = _bounded(where, _first_name(config, family.heads_fields), heads, MAX_HEADS, "heads")
    scheme = family.scheme
    if family.alibi_flag is not None:
        flag = _get(config, family.alibi_flag)
        if flag is not None:
            scheme = "alibi" if flag else "rope"
    limit = _first(config, family.limit_fields) if family.limit_fields else None
    limit = family.limit_default if limit is None and family.limit_fields else limit
    if limit is not None:
        limit = _int_field(where, " or ".join(family.limit_fields), limit)
        limit = _bounded(where, _first_name(config, family.limit_fields), limit, MAX_POSITIONS, "positions")
    model_type = str(config.get("model_type"))
    common: dict[str, Any] = dict(
        source=source, config_path=Path(where), family=family.name, model_type=model_type, num_heads=heads
    )
    if family.name_limit_field and _first(config, family.limit_fields) is not None:
        common["length_field"] = _first_name(config, family.limit_fields)
    try:
        if scheme == "alibi":
            stated = _get(config, family.alibi_bias_max_field) if family.alibi_bias_max_field else None
            if stated is not None:  # a mistyped field is still a bad config, though the model ignores it
                _number_field(where, str(family.alibi_bias_max_field), stated, bound=1e6)
            bias_max = family.alibi_bias_max_default  # what the model applies
            return (RelativeConfig(scheme="alibi", alibi=AlibiConfig(heads, float(bias_max), limit), **common),)
        _refuse_unread_per_layer_fields(config, where)
        config = derived_layer_types(config, family)
        if family.per_layer_type and not _is_per_layer_type(config):
            raise fail(
                where,
                f"rope_parameters per layer type with layer_types, as transformers 5 writes a {model_type} config",
                "one set for all layers (re-save the config with transformers >= 5)",
            )
        groups = _split_by_overrides(
            _split_by_rotating_layers(
                _split_by_layer_theta(_layer_groups(config, where), family, config, where), family, config, where
            ),
            config,
            where,
        )
        records: list[RelativeConfig | NoPositionLayers] = []
        for layer_type, layers, parameters, overrides in groups:
            if parameters is None:
                records.append(
                    NoPositionLayers(
                        source, family.name, model_type, layers, layer_type, temperature_of(config, model_type)
                    )
                )
                continue
            layer_config = {**config, **overrides}
            layer_heads = (
                heads
                if not overrides
                else _int_field(where, "num_attention_heads", _first(layer_config, family.heads_fields))
            )
            rope = _rope_from(layer_config, family, layer_heads, limit, where, parameters)
            if "length_field" in common:  # the run-time error names the config's own field too
                rope = dataclasses.replace(rope, length_field=common["length_field"])
            if family.scheme == "mrope":
                mrope = _mrope_from(outer, config, family, rope, parameters, where)
                records.append(
                    RelativeConfig(
                        scheme="mrope",
                        rope=rope,
                        mrope=mrope,
                        layer_type=layer_type,
                        layers=layers,
                        softmax_scale=softmax_scale(layer_config, rope),
                        **common,
                    )
                )
                continue
            scale = softmax_scale(layer_config, rope)
            # the parameters transformers keeps: rope_scaling when present and not empty (as _rope_from)
            kept = layer_config.get("rope_scaling") or parameters
            queries = query_scale_of(layer_config, kept if isinstance(kept, Mapping) else None, rope, where)
            records.append(
                RelativeConfig(
                    scheme="rope",
                    rope=rope,
                    layer_type=layer_type,
                    layers=layers,
                    softmax_scale=scale,
                    query_scale=queries,
                    **common,
                )
            )
    except CheckpointError:
        raise
    except (ValueError, TypeError, ArithmeticError) as e:  # RopeConfig / AlibiConfig validation: one line
        raise fail(where, f"valid {family.name} {scheme} parameters", f"{type(e).__name__}: {e}"[:200]) from None
    return tuple(records)


def layer_count(config: Mapping[str, Any], where: object) -> int | None:
    """THE layer-count reader: ``num_hidden_layers`` of a parsed config, ``None`` when absent or null.

    Raises:
      CheckpointError: a count that is not a positive integer (``0``, ``-1``, ``"2"``, ``2.0``,
        ``true``): one line naming ``where`` and the field, never read as "no count".

    >>> layer_count({"num_hidden_layers": 2}, "config.json"), layer_count({}, "config.json")
    (2, None)
    """
    count = config.get("num_hidden_layers")
    return None if count is None else _int_field(where, "num_hidden_layers", count)


def _layer_count(config: Mapping[str, Any], where: object, field: str, value: Any) -> int | None:
    """``num_hidden_layers`` when the config has it; a per-layer list must have that length."""
    count = layer_count(config, where)
    if count is None:
        return None
    if not isinstance(value, list) or len(value) != count:
        found = f"{len(value)} entries" if isinstance(value, list) else type(value).__name__
        raise fail(where, f"{field} as a list of num_hidden_layers = {count} entries", found)
    return count


def _refuse_unread_per_layer_fields(config: Mapping[str, Any], where: object) -> None:
    """Per-layer RoPE fields this reader does not split layers by: accepted only while they change
    nothing (Molmo 2's ``rope_scaling_layers`` with an unscaled RoPE or naming every layer), else one line."""
    scaled = config.get("rope_scaling_layers")
    if scaled is not None:
        params = config.get("rope_parameters")
        kind = params.get("rope_type", "default") if isinstance(params, Mapping) else "default"
        count = config.get("num_hidden_layers")
        every = isinstance(count, int) and scaled == list(range(count))
        if kind != "default" and not every:
            raise fail(
                where,
                "rope_scaling_layers naming every layer (a scaled RoPE on some layers is not read)",
                repr(scaled)[:80],
            )


#: The fields a ``per_layer_config`` override may change that RoPE (or its softmax scale) depends on.
_ROPE_LAYER_FIELDS = (
    "head_dim",
    "qk_rope_head_dim",
    "hidden_size",
    "num_attention_heads",
    "partial_rotary_factor",
    "qk_nope_head_dim",
    "attention_multiplier",
    "query_pre_attn_scalar",
)


def _split_by_overrides(groups, config: Mapping[str, Any], where: object):
    """Split ``(layer_type, layers, parameters)`` groups by transformers v5's ``per_layer_config``
    (a sparse ``{layer index: {field: value}}``; Gemma 4's full-attention layers have their own
    ``head_dim``): ``(layer_type, layers, parameters, overrides)``, one per distinct override of
    :data:`_ROPE_LAYER_FIELDS`."""
    raw = config.get("per_layer_config")
    if raw is None:
        return [(*g, {}) for g in groups]
    if not isinstance(raw, Mapping) or not all(isinstance(v, Mapping) for v in raw.values()):
        raise fail(where, "per_layer_config as {layer index: {field: value}}", repr(raw)[:80])
    count = layer_count(config, where)
    count = _int_field(where, "num_hidden_layers (per_layer_config is set)", count)
    overrides: dict[int, dict[str, Any]] = {}
    for key, value in raw.items():
        if not (isinstance(key, str) and key.isdigit() and int(key) < count):
            raise fail(where, f"per_layer_config keys layer indices 0..{count - 1}", repr(key)[:80])
        overrides[int(key)] = {k: v for k, v in value.items() if k in _ROPE_LAYER_FIELDS}
    out: list[tuple[Any, ...]] = []
    for layer_type, layers, parameters in groups:
        members = range(count) if layers is None else layers
        split: dict[str, list[int]] = {}
        for i in members:
            split.setdefault(repr(sorted(overrides.get(i, {}).items())), []).append(i)
        if len(split) == 1 and layers is None:
            out.append((layer_type, None, parameters, overrides.get(0, {})))
            continue
        for indices in split.values():
            out.append((layer_type, tuple(indices), parameters, overrides.get(indices[0], {})))
    return out


def _split_by_layer_theta(groups, family: RelativeFamily, config: Mapping[str, Any], where: object):
    """Split RoPE groups by the family's per-layer theta list: zeros are NoPE layers; non-zero
    values each set their layers' ``rope_theta`` (or, for a flag list, only switch RoPE on)."""
    field = family.layer_theta_field
    thetas = None if field is None else config.get(field)
    if field is None or thetas is None:
        return groups
    count = _layer_count(config, where, field, thetas)
    if count is None or not all(isinstance(t, (int, float)) and not isinstance(t, bool) and t >= 0 for t in thetas):
        raise fail(where, f"{field} as a list of non-negative numbers, one per layer", repr(thetas)[:80])
    out: list[tuple[Any, ...]] = []
    for layer_type, layers, parameters in groups:
        members = range(count) if layers is None else layers
        if parameters is None:
            out.append((layer_type, layers, parameters))
            continue
        split: dict[float, list[int]] = {}
        for i in members:
            key = 0.0 if not thetas[i] else (1.0 if family.layer_theta_is_flag else float(thetas[i]))
            split.setdefault(key, []).append(i)
        for theta, indices in split.items():
            if theta == 0.0:
                out.append((layer_type, tuple(indices), None))
            elif family.layer_theta_is_flag:
                out.append((layer_type, tuple(indices) if len(indices) < count else layers, parameters))
            else:
                whole = len(split) == 1 and layers is None
                out.append((layer_type, None if whole else tuple(indices), {**parameters, "rope_theta": theta}))
    return out


def derived_layer_types(config: Mapping[str, Any], family: RelativeFamily) -> Mapping[str, Any]:
    """``config`` with ``layer_types`` (and ``num_hidden_layers``) as transformers derives them when
    it builds the model (:data:`LAYER_TYPES_RULES`), else as saved."""
    if family.layer_types_rule is None:
        return config
    derived = LAYER_TYPES_RULES[family.layer_types_rule](config)
    if derived is None:
        return config
    types, count = derived
    return {**config, "layer_types": types, "num_hidden_layers": count}


def _split_by_rotating_layers(groups, family: RelativeFamily, config: Mapping[str, Any], where: object):
    """Split RoPE groups by which layers rotate: a ``layer_types`` entry in
    :data:`NON_ATTENTION_LAYER_TYPES` never does, and the family's :data:`ROPE_LAYER_RULES` entry
    (Cohere 2: sliding-window layers only) decides among the attention layers. The others become
    NoPE groups, one per layer type."""
    types = config.get("layer_types")
    if not isinstance(types, list) or not all(isinstance(t, str) for t in types):
        if family.rope_layer_rule is not None:  # which layers rotate follows from layer_types
            raise fail(
                where,
                f"layer_types as a list of strings ({config.get('model_type')} rotates by its layer types, "
                "as transformers 5 writes them)",
                repr(types)[:80],
            )
        return groups
    rotates = [t not in NON_ATTENTION_LAYER_TYPES for t in types]
    if family.rope_layer_rule is not None:
        ruled = ROPE_LAYER_RULES[family.rope_layer_rule](config, types)
        rotates = [a and b for a, b in zip(rotates, ruled, strict=True)]
    if all(rotates):
        return groups
    out: list[tuple[Any, ...]] = []
    for layer_type, layers, parameters in groups:
        members = range(len(types)) if layers is None else layers
        if parameters is None:
            out.append((layer_type, layers, parameters))
            continue
        kept = tuple(i for i in members if i >= len(types) or rotates[i])
        if kept:
            out.append((layer_type, kept, parameters))
        dropped: dict[str, list[int]] = {}
        for i in members:
            if i < len(types) and not rotates[i]:
                dropped.setdefault(types[i], []).append(i)
        out += [(t, tuple(indices), None) for t, indices in sorted(dropped.items())]
    return out


def _is_per_layer_type(config: Mapping[str, Any]) -> bool:
    parameters = config.get("rope_parameters")
    return isinstance(parameters, Mapping) and any(isinstance(v, Mapping) for v in parameters.values())


def _layer_groups(
    config: Mapping[str, Any], where: object
) -> list[tuple[str | None, tuple[int, ...] | None, dict[str, Any] | None]]:
    """``(layer_type, layers, rope parameters or None for NoPE)`` groups of a config.

    ``layers`` is ``None`` when a group covers every layer.
    """
    parameters: Any = config.get("rope_parameters")
    per_type = isinstance(parameters, Mapping) and any(isinstance(v, Mapping) for v in parameters.values())
    no_rope = config.get("no_rope_layers")
    if per_type:
        layer_types = config.get("layer_types")
        if not isinstance(layer_types, list) or not all(isinstance(t, str) for t in layer_types):
            raise fail(
                where, "layer_types as a list of strings (rope_parameters is per layer type)", repr(layer_types)[:80]
            )
        _layer_count(config, where, "layer_types", layer_types)
        not_dicts = sorted(k for k, v in parameters.items() if v is not None and not isinstance(v, Mapping))
        if not_dicts:
            raise fail(where, "rope_parameters: one dict per layer type", f"plain keys {', '.join(not_dicts)}"[:200])
        unknown = sorted(set(layer_types) - set(parameters) - set(NON_ATTENTION_LAYER_TYPES))
        if unknown:
            raise fail(
                where,
                f"rope_parameters for every layer_types entry (read: {', '.join(sorted(parameters))})",
                f"none for {', '.join(unknown)}"[:200],
            )
        groups: list[tuple[str | None, tuple[int, ...] | None, dict[str, Any] | None]] = []
        for layer_type in sorted(set(layer_types)):
            layers = tuple(i for i, t in enumerate(layer_types) if t == layer_type)
            value = parameters.get(layer_type)
            groups.append((layer_type, layers, None if value is None else dict(value)))
        return groups
    single = dict(parameters) if isinstance(parameters, Mapping) else None
    if parameters is not None and not isinstance(parameters, Mapping):
        raise fail(where, "rope_parameters as a JSON object", type(parameters).__name__)
    if no_rope is None:
        return [(None, None, single or {})]
    _layer_count(config, where, "no_rope_layers", no_rope)
    if not isinstance(no_rope, list) or not all(v in (0, 1) and not isinstance(v, float) for v in no_rope):
        raise fail(where, "no_rope_layers as a list of 0 (NoPE) and 1 (RoPE) per layer", repr(no_rope)[:80])
    rope_layers = tuple(i for i, v in enumerate(no_rope) if v)
    nope_layers = tuple(i for i, v in enumerate(no_rope) if not v)
    groups = [(None, rope_layers, single or {})] if rope_layers else []
    return groups + ([(None, nope_layers, None)] if nope_layers else [])


def _present(config: Mapping[str, Any], fields: tuple[str, ...], default: Any) -> Any:
    """The first of ``fields`` the config holds (``0`` included: a present value is never swapped
    for the default), else ``default``."""
    value = _first(config, fields)
    return default if value is None else value


def _rope_from(
    config: Mapping[str, Any],
    family: RelativeFamily,
    heads: int,
    limit: int | None,
    where,
    parameters: Mapping[str, Any],
) -> RopeConfig:
    head_field = family.head_dim_field
    head_dim = config.get(head_field) if head_field else None
    if head_dim is None and family.rope_head_dim_field is not None:  # MLA: the rope head (v5 writes head_dim too)
        head_field = family.rope_head_dim_field
        head_dim = config.get(head_field)
    if head_dim is None and family.head_dim_default is not None:  # JetMoE: kv_channels, default 128
        head_dim = family.head_dim_default
    if head_dim is None:
        hidden = _int_field(
            where,
            f"head_dim or a positive width in {' or '.join(family.hidden_fields)}",
            _first(config, family.hidden_fields),
        )
        if hidden < heads:
            raise fail(
                where,
                f"{' or '.join(family.hidden_fields)} at least the {heads} heads",
                f"{hidden} (head width {hidden / heads:g})",
            )
        head_dim = hidden // heads
    head_dim = _int_field(where, head_field or "head_dim", head_dim)
    params: dict[str, Any] = {
        "rope_theta": _present(config, family.theta_fields, family.theta_default),
        "partial_rotary_factor": _present(config, family.partial_fields, family.partial_default),
    }
    # GPT-J's rotated dims, an integer kept as it is (RopeConfig checks it)
    rotary_dim = config.get(family.rotary_dim_field) if family.rotary_dim_field else None
    scaling_dict = config.get("rope_scaling")
    # transformers 5 (convert_rope_params_to_dict: ``rope_scaling or rope_parameters``): a 4.x
    # rope_scaling, when present and not empty, replaces rope_parameters whole (a config edited
    # after an upgrade holds both; tests/test_hub_shaped_configs.py)
    chosen = ("rope_scaling", scaling_dict) if scaling_dict else ("rope_parameters", parameters)
    for key, value in (chosen,):
        if value is None:
            continue
        if not isinstance(value, Mapping):
            raise fail(where, f"{key} as a JSON object", type(value).__name__)
        nested = sorted(k for k, v in value.items() if isinstance(v, Mapping))
        if nested:
            raise fail(where, f"one {key} dict per layer type", f"nested parameters for {', '.join(nested)}")
        params.update({k: v for k, v in value.items() if v is not None})
    if family.rope_head_share:  # Mistral 4: the factor is the rope head's share of the query head
        # (absent: its config class sets qk_rope_head_dim / head_dim on load)
        kept = chosen[1] if isinstance(chosen[1], Mapping) else {}
        share, whole = kept.get("partial_rotary_factor"), config.get("head_dim")
        numbers = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (share, whole))
        if share is not None and whole is not None and (not numbers or int(whole * share) != head_dim):
            raise fail(
                where,
                f"partial_rotary_factor * head_dim = {head_field} {head_dim} (the rope head's share of the query head)",
                f"{share!r} * {whole!r}"[:80],
            )
        params["partial_rotary_factor"] = 1.0
    layout = family.layout
    if family.layout_flag is not None and config.get(family.layout_flag) is not None:
        flag = config[family.layout_flag]
        if not isinstance(flag, bool):
            raise fail(where, f"{family.layout_flag} as true or false", repr(flag)[:80])
        layout = "interleaved" if flag else "half"
    try:  # the parameters as read; RopeConfig alone validates them (the file named in its one line)
        kind = rope_type_of(params, dict(family.rope_type_aliases))  # resolved once, here
        row = rope_config.ROPE_SCALINGS.get(kind)  # an unknown type: RopeConfig says so, listing the known ones
        trained = row.trained_length_field if row is not None else None
        if trained is not None and trained != "max_position_embeddings" and config.get(trained) is not None:
            # a top-level value wins over rope_scaling's, as transformers computes it (its rotary
            # classes re-standardize the config: tests/test_rope_config.py checks Phi-3 and Llama)
            params[trained] = config[trained]
        given = {k: params[k] for k in ROPE_PARAMETERS if params.get(k) is not None}
        if rotary_dim is not None:
            given["rotary_dim"] = rotary_dim
        return RopeConfig(
            head_dim=head_dim,
            rope_type=kind,
            max_position_embeddings=limit,
            layout=layout,
            **given,
        )
    except RopeFieldError as e:
        raise fail(where, e.expected, e.found) from None


def _mrope_from(
    outer: Mapping[str, Any],
    text: Mapping[str, Any],
    family: RelativeFamily,
    rope: RopeConfig,
    parameters: Mapping[str, Any],
    where: object,
):
    """The :class:`~flax_posenc.MRopeConfig` of a Qwen-VL config: ``mrope_section`` from
    ``rope_parameters`` (4.x ``rope_scaling``), token ids at the top level, merge size and temporal
    scale from ``vision_config``."""
    section = None
    for value in (parameters, text.get("rope_scaling"), outer.get("rope_scaling")):
        if isinstance(value, Mapping) and value.get("mrope_section") is not None:
            section = value["mrope_section"]
            break
    section = family.mrope_section_default if section is None else section
    if not isinstance(section, list | tuple) or not all(
        isinstance(s, int) and not isinstance(s, bool) for s in section
    ):
        raise fail(where, "mrope_section as a list of non-negative integers", repr(section)[:80])
    vision = outer.get("vision_config")
    vision = vision if isinstance(vision, Mapping) else {}
    merge = vision.get("spatial_merge_size", 2)
    temporal = None
    if family.mrope_temporal_field is not None:
        temporal = vision.get(family.mrope_temporal_field, family.mrope_temporal_default)
        temporal = family.mrope_temporal_default if temporal is None else temporal
    ids = {}
    for name in ("image_token_id", "video_token_id"):
        value = outer.get(name)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
            raise fail(where, f"{name} as a non-negative integer", repr(value)[:80])
        ids[name] = value
    if isinstance(merge, bool) or not isinstance(merge, int) or merge < 1:
        raise fail(where, "vision_config.spatial_merge_size as a positive integer", repr(merge)[:80])
    if temporal is not None:
        temporal = _number_field(where, f"vision_config.{family.mrope_temporal_field}", temporal, bound=1e6)
    return MRopeConfig(
        rope,
        mrope_section=tuple(section),
        spatial_merge_size=merge,
        tokens_per_second=temporal,
        split_video_frames=family.mrope_split_video_frames,
        interleaved_sections=family.mrope_interleaved_sections,
        **ids,
    )


def read_relative_config(source: str | os.PathLike) -> RelativeConfig:
    """The RoPE/ALiBi configuration of a checkpoint directory or a ``config.json`` path.

    Raises:
      CheckpointError: no ``config.json`` there, unreadable JSON, or see
        :func:`relative_config_from_dict`.
    """
    path = config_path_of(source)
    if path is None:
        raise fail(source, f"a checkpoint directory with {CONFIG_NAME} or a config.json path", "neither")
    return relative_config_from_dict(read_config(path), source=os.fspath(source), path=path)


def relative_source(source: str | os.PathLike) -> RelativeConfig | None:
    """``read_relative_config(source)`` when SOURCE's config names a RoPE/ALiBi family, else ``None``.

    What the command line asks first: a learned-table checkpoint (GPT-2, BERT, ...), a Hub id
    or a weights file returns ``None`` and is read as a table, as before.
    """
    path = config_path_of(source)
    if path is None:
        return None
    config = read_config(path)
    if family_for(config) is None:
        return None
    return relative_config_from_dict(config, source=os.fspath(source), path=path)


__all__ = [
    "INTERLEAVED_ROPE_MODEL_TYPES",
    "LAYER_TYPES_RULES",
    "MLA_INTERLEAVED_ROPE_MODEL_TYPES",
    "derived_layer_types",
    "layer_count",
    "MLA_ROPE_MODEL_TYPES",
    "NON_ATTENTION_LAYER_TYPES",
    "NoPositionLayers",
    "PER_LAYER_TYPE_ROPE_MODEL_TYPES",
    "QWEN3_VL_MODEL_TYPES",
    "RELATIVE_FAMILIES",
    "ROPE_LAYER_RULES",
    "STANDARD_ROPE_MODEL_TYPES",
    "RelativeConfig",
    "RelativeFamily",
    "config_path_of",
    "family_for",
    "read_relative_config",
    "relative_config_from_dict",
    "relative_configs_from_dict",
    "relative_source",
]
