"""The softmax scale a RoPE model's attention uses, and Llama 4's NoPE temperature tuning, read from ``config.json``.

numpy only. A RoPE record reports, as ``softmax_scale``, the factor its model's attention
multiplies ``q . k`` by before the softmax (transformers' attention modules' ``scaling``):

- ``config.attention_multiplier`` when the config has one (Granite and its derivatives);
- ``config.query_pre_attn_scalar ** -0.5`` when it has that (Gemma 2, Gemma 3);
- multi-head latent attention (``qk_nope_head_dim`` and ``qk_rope_head_dim``: DeepSeek V2/V3 and
  the 15 model types derived from them): ``(qk_nope_head_dim + qk_rope_head_dim) ** -0.5``, times
  ``mscale(factor, mscale_all_dim) ** 2`` when the RoPE is scaled and ``mscale_all_dim`` is set
  (transformers' ``yarn_apply_mscale``; ``mscale(s, m) = 0.1 * m * ln(s) + 1`` for ``s > 1``);
- ``1.0`` for the model types of :data:`UNIT_SCALE_MODEL_TYPES` (queries and keys
  RMS-normalised: Gemma 4, EmbeddingGemma 2);
- ``head_dim ** -0.5`` otherwise.

Missing the MLA factor gives fluent but wrong output (DeepSeek V3's ``mscale_all_dim`` 1.0 and
``factor`` 40: ``mscale ** 2`` = 1.874). ``tests/conformance`` checks the value against the model's
own attention modules for every RoPE model type read.

Llama 4's NoPE layers are not position-free: with ``attn_temperature_tuning`` their queries are
scaled by ``log1p(floor((p + 1) / floor_scale)) * attn_scale + 1`` at position ``p``
(:func:`temperature_of` reads it; :func:`flax_posenc.attention_temperature` computes it on device).
Ministral 3 and Mistral 4 (:data:`QUERY_SCALE_MODEL_TYPES`) scale the queries of every layer, after
RoPE, by ``1 + beta * log(1 + floor(p / original_max_position_embeddings))`` (``rope_parameters``
``llama_4_scaling_beta``: :func:`query_scale_of` reads it onto the RoPE record).

>>> from flax_posenc.rope_config import RopeConfig
>>> rope = RopeConfig(head_dim=64, rope_type="yarn", factor=40.0, mscale_all_dim=1.0,
...                   original_max_position_embeddings=4096)
>>> round(softmax_scale({"qk_nope_head_dim": 128, "qk_rope_head_dim": 64}, rope) * 192 ** 0.5, 4)
1.8739
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from flax_posenc.bounds import MAX_POSITIONS
from flax_posenc.conversion.readers import fail
from flax_posenc.rope_config import RopeConfig

__all__ = [
    "QUERY_SCALE_MODEL_TYPES",
    "UNIT_SCALE_MODEL_TYPES",
    "query_scale_of",
    "softmax_scale",
    "temperature_of",
    "yarn_mscale",
]

#: Model types whose attention does not scale ``q . k`` at all (``scaling = 1.0`` in transformers:
#: their queries and keys are RMS-normalised).
UNIT_SCALE_MODEL_TYPES: tuple[str, ...] = ("embedding_gemma2_text", "gemma4", "gemma4_text", "gemma4_unified_text")
#: Dia's encoder and decoder: ``scaling = 1`` (as Nari Labs' original; no query/key norm).
UNIT_SCALE_MODEL_TYPES += ("dia_encoder", "dia_decoder")
#: DiffusionGemma's text tower (Gemma 4's attention: queries and keys RMS-normalised, ``scaling = 1.0``).
UNIT_SCALE_MODEL_TYPES += ("diffusion_gemma_text",)
#: issue 36: Gemma 3n's text tower (Gemma3nTextAttention: ``scaling = 1.0``, q/k RMS-normalised)
UNIT_SCALE_MODEL_TYPES += ("gemma3n_text",)


def yarn_mscale(scale: float, mscale: float = 1.0) -> float:
    """YaRN's ``mscale``: ``0.1 * mscale * ln(scale) + 1`` for ``scale > 1``, else 1.

    >>> yarn_mscale(1.0), round(yarn_mscale(40.0, 1.0), 6)
    (1.0, 1.368888)
    """
    return 1.0 if scale <= 1 else 0.1 * mscale * math.log(scale) + 1.0


def _number(config: Mapping[str, Any], name: str) -> float | None:
    value = config.get(name)
    if value is None or isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value)


def softmax_scale(config: Mapping[str, Any], rope: RopeConfig) -> float:
    """The attention softmax scale of a model whose (text) ``config`` and layer RoPE are given.

    Args:
      config: the parsed ``config.json`` (the text tower's for a composite model).
      rope: the layer's :class:`~flax_posenc.RopeConfig` (``head_dim`` is the attention head's
        width, except for MLA whose rope head it is).

    Returns:
      The float that multiplies ``q . k`` (see the module docstring for the rules).

    >>> softmax_scale({}, RopeConfig(head_dim=64))
    0.125
    >>> softmax_scale({"query_pre_attn_scalar": 256}, RopeConfig(head_dim=64))
    0.0625
    """
    if config.get("model_type") in UNIT_SCALE_MODEL_TYPES:
        return 1.0
    multiplier = _number(config, "attention_multiplier")
    if multiplier is not None:
        return multiplier
    pre = _number(config, "query_pre_attn_scalar")
    if pre is not None and pre > 0:
        return pre**-0.5
    nope, rope_dim = _number(config, "qk_nope_head_dim"), _number(config, "qk_rope_head_dim")
    if nope is not None and rope_dim is not None:  # multi-head latent attention
        scale = (nope + rope_dim) ** -0.5
        factor = rope.factor if rope.factor is not None else rope.effective_factor
        if rope.rope_type != "default" and rope.mscale_all_dim and factor is not None:
            m = yarn_mscale(float(factor), float(rope.mscale_all_dim))
            scale = scale * m * m
        return scale
    return float(rope.head_dim) ** -0.5


#: Llama 4's defaults (``Llama4TextConfig``) when a config leaves the fields out.
_TEMPERATURE_DEFAULTS = {"llama4_text": (True, 8192, 0.1), "llama4": (True, 8192, 0.1)}


def temperature_of(config: Mapping[str, Any], model_type: str) -> tuple[int, float] | None:
    """``(floor_scale, attn_scale)`` when the NoPE layers scale queries by position, else ``None``.

    >>> temperature_of({"attn_temperature_tuning": True, "floor_scale": 8192, "attn_scale": 0.1}, "llama4_text")
    (8192, 0.1)
    >>> temperature_of({"attn_temperature_tuning": False}, "llama4_text") is None
    True
    """
    on, floor, scale = _TEMPERATURE_DEFAULTS.get(model_type, (False, None, None))
    on = bool(config.get("attn_temperature_tuning", on))
    floor = config.get("floor_scale", floor)
    scale = config.get("attn_scale", scale)
    if not on or floor is None or scale is None:
        return None
    return int(floor), float(scale)


#: Model types whose attention multiplies the (rotated) queries of every layer by transformers'
#: ``get_llama_4_attn_scale(position_ids, rope_parameters["llama_4_scaling_beta"],
#: rope_parameters["original_max_position_embeddings"])``: ``1 + beta * log(1 + floor(p / M))``.
QUERY_SCALE_MODEL_TYPES: tuple[str, ...] = ("ministral3", "mistral4")


def query_scale_of(
    config: Mapping[str, Any], parameters: Mapping[str, Any] | None, rope: RopeConfig, where: object = "config.json"
) -> tuple[float, int] | None:
    """``(beta, original_max_position_embeddings)`` when the model type scales its queries by position
    (:data:`QUERY_SCALE_MODEL_TYPES`), else ``None``.

    Args:
      config: the parsed (text) ``config.json`` (its ``model_type`` decides).
      parameters: the RoPE parameters transformers keeps (``rope_scaling`` when present and not empty,
        else ``rope_parameters``): ``llama_4_scaling_beta`` and ``original_max_position_embeddings``
        are read there, as the attention reads them.
      rope: the layer's RoPE as read: its ``original_max_position_embeddings`` when the parameters
        leave it out (a YaRN config: transformers' default, ``max_position_embeddings``).
      where: the file named in an error.

    Raises:
      CheckpointError: no parameters, a ``beta`` that is not a finite number, or an
        ``original_max_position_embeddings`` that is not a positive integer (transformers' attention
        cannot run without them), in one line naming the file and the field.

    >>> query_scale_of({"model_type": "ministral3"}, {"llama_4_scaling_beta": 0.1}, RopeConfig(
    ...     head_dim=8, rope_type="yarn", factor=16.0, original_max_position_embeddings=16384))
    (0.1, 16384)
    >>> query_scale_of({"model_type": "mistral"}, {"llama_4_scaling_beta": 0.1}, RopeConfig(head_dim=8)) is None
    True
    """
    if config.get("model_type") not in QUERY_SCALE_MODEL_TYPES:
        return None
    if not parameters:  # transformers' config class then fills in its own YaRN and beta
        raise fail(
            where,
            f"rope_parameters ({config.get('model_type')}'s config class fills in YaRN and llama_4_scaling_beta "
            "defaults without them, which are not read)",
            "none",
        )
    beta = parameters.get("llama_4_scaling_beta")
    if isinstance(beta, bool) or not isinstance(beta, (int, float)) or not math.isfinite(beta) or abs(beta) > 1e6:
        raise fail(
            where,
            "rope_parameters llama_4_scaling_beta as a finite number (the attention scales its queries by "
            "1 + beta * log(1 + floor(p / original_max_position_embeddings)))",
            repr(beta)[:80],
        )
    original = parameters.get("original_max_position_embeddings")
    if original is None:
        original = rope.original_max_position_embeddings
    if isinstance(original, bool) or not isinstance(original, int) or not 1 <= original <= MAX_POSITIONS:
        raise fail(
            where,
            f"rope_parameters original_max_position_embeddings as an integer in 1..{MAX_POSITIONS} (the "
            "attention scales its queries by position in steps of it)",
            repr(original)[:80],
        )
    return float(beta), original
