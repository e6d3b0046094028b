"""Models without any position encoding: the ``none`` mechanism, numpy only.

Three rows (:data:`NO_POSITION_FAMILIES`), each checked by reading the model types' modeling files
in the pinned transformers (no position table or buffer, no rotary module, no relative bias) and by
their conformance cases (the tiny model has no parameter or buffer whose name suggests positions):

- ``recurrent`` (text): recurrent and state-space models; the state carries the order.
- ``convolutional_vision`` (vision): convolutional image models (ResNet, ConvNeXt, EfficientNet,
  MobileNet, RegNet, BiT, PoolFormer, CvT, FocalNet, PP-LCNet, ...), MobileViT/SwiftFormer and
  SegFormer/GLPN/PVTv2 (attention without a position tensor, Mix-FFN convolutions), the VQGAN image
  tokenizers (spatial attention blocks without positions) and the convolutional heads of UperNet and
  Depth Anything (their ``backbone_config`` read beside them as the ``backbone`` tower): where a pixel
  is enters only through the convolutions' receptive field and padding.
- ``convolutional_audio`` (audio): convolutional codecs and vocoders (DAC, UnivNet, EnCodec's
  convolutions and LSTM, HiFi-GAN and BigVGAN vocoders, VibeVoice's acoustic tokenizer): positions in
  time enter only through the convolutions.

Nothing limits their length: :class:`NoPositionEncoding` is a
:class:`~flax_posenc.conversion.SourceRecord` with no limit.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from flax_posenc.conversion.readers import fail
from flax_posenc.limits import NoLimit

__all__ = ["NO_POSITION_FAMILIES", "NO_POSITION_MODEL_TYPES", "NoPositionEncoding", "NoPositionFamily"]

#: Model types with no position encoding at all (recurrent and state-space models): nothing
#: limits their length.
NO_POSITION_MODEL_TYPES: tuple[str, ...] = (
    "mamba",
    "falcon_mamba",
    "rwkv",
    "xlstm",
    "jamba",
    "granitemoehybrid",
    "kimi_linear",
    "nemotron_h",
    "mamba2",
    "zamba",  # Mamba layers and a shared attention block without any position encoding
    "zamba2",  # the same, unless use_mem_rope (refused: its RoPE is not read)
)

#: Convolutional image models (and MobileViT/SwiftFormer: attention without a position tensor).
#: Each modeling file was read: no position embedding, rotary module or relative bias. Not here on
#: purpose: LeViT (attention biases by offset), EfficientFormer (attention biases), ViTPose (its
#: ViT backbone's grid), timm_backbone (its positions are the timm model's).
CONVOLUTIONAL_VISION_MODEL_TYPES: tuple[str, ...] = (
    "align_vision_model",  # ALIGN's EfficientNet tower (issue 35)
    "bit",
    "convnext",
    "convnextv2",
    "dinov3_convnext",
    "efficientnet",
    "hgnet_v2",
    "mobilenet_v1",
    "mobilenet_v2",
    "mobilevit",
    "mobilevitv2",
    "poolformer",
    "regnet",
    "resnet",
    "swiftformer",
    "textnet",
    "align_vision_model",  # ALIGN's vision tower: EfficientNet (depth-wise convolutions, squeeze-excite)
    "cvt",  # CvT: convolutional token embeddings and convolutional projections; no position table
    "focalnet",  # FocalNet: focal modulation (depth-wise convolutions) instead of attention
    "glpn",  # GLPN: SegFormer's Mix-FFN (a depth-wise convolution) and reduced attention, no position table
    "pp_lcnet",
    "pp_lcnet_v3",
    "pp_lcnet_v4",
    "pvt_v2",  # PVTv2: overlapping patch convolutions and a depth-wise convolution in the FFN
    "rt_detr_resnet",
    "segformer",  # SegFormer: Mix-FFN (depth-wise convolution) and reduced attention, no position table
    "superpoint",  # SuperPoint: a convolutional keypoint detector (keypoint coordinates are its output)
    "flava_image_codebook",  # FLAVA's dVAE image tokenizer: convolutions
    # VQGAN image tokenizers: convolutions and spatial attention blocks without any position tensor
    "chameleon_vqgan",
    "emu3_vqgan",
    "glm_image_vqmodel",
    "janus_vqgan",
    # heads around a backbone (backbone_config: read as the backbone tower beside this row)
    "upernet",  # UperNet: pyramid pooling and FPN convolutions over its backbone's feature maps
    "depth_anything",  # Depth Anything: reassemble, fusion and head convolutions over its backbone's features
)

#: Convolutional audio codecs and vocoders (no position table, rotary module or relative bias).
CONVOLUTIONAL_AUDIO_MODEL_TYPES: tuple[str, ...] = (
    "dac",
    "univnet",
    "encodec",  # EnCodec: convolutions and an LSTM over time
    "fastspeech2_conformer_hifigan",  # HiFi-GAN vocoders: transposed convolutions and residual blocks
    "speecht5_hifigan",
    "qwen2_5_omni_bigvgan",  # BigVGAN: convolutions with anti-aliased Snake activations
    "vibevoice_acoustic_tokenizer",  # VibeVoice's acoustic tokenizer: causal convolutions
    "vibevoice_acoustic_tokenizer_decoder",  # its decoder and encoder on their own: the same convolutions
    "vibevoice_acoustic_tokenizer_encoder",
)


@dataclasses.dataclass(frozen=True)
class NoPositionFamily:
    """Model types without a position encoding (a row of :data:`NO_POSITION_FAMILIES`).

    Attributes:
      name, model_types: as every registry row.
      tower: the tower the models are (``"text"``, ``"vision"``, ``"audio"``).
      reason: why no position enters (the end of the record's limit sentence).
      refuse_flags: ``(config field, what)`` pairs: a true value means the model has a position
        mechanism after all (Zamba2's ``use_mem_rope``), refused in one line naming the field.
    """

    name: str
    model_types: tuple[str, ...]
    tower: str = "text"
    reason: str = "a recurrent state"
    refuse_flags: tuple[tuple[str, str], ...] = ()


NO_POSITION_FAMILIES: Mapping[str, NoPositionFamily] = MappingProxyType(
    {
        row.name: row
        for row in (
            NoPositionFamily(
                "recurrent",
                NO_POSITION_MODEL_TYPES,
                refuse_flags=(("use_mem_rope", "Zamba2's RoPE in its shared attention blocks"),),
            ),
            NoPositionFamily(
                "convolutional_vision",
                CONVOLUTIONAL_VISION_MODEL_TYPES,
                tower="vision",
                reason="convolutions over the image; no position table, rotary or relative bias",
            ),
            # BLIP-2's Q-Former: learned query tokens (held by the composite) cross-attending to the
            # image; its own module has no embeddings at all (issue 35)
            NoPositionFamily(
                "query_transformer",
                ("blip_2_qformer",),
                tower="qformer",
                reason="learned query tokens cross-attending to the image; no position table, rotary or relative bias",
            ),
            NoPositionFamily(
                "convolutional_audio",
                CONVOLUTIONAL_AUDIO_MODEL_TYPES,
                tower="audio",
                reason="convolutions over time; no position table, rotary or relative bias",
            ),
        )
    }
)


#: Text models whose every layer is recurrent or NoPE attention (issue 36): GLM-5-Next's text tower
#: alternates Kimi-style gated linear attention (a recurrent state and a short causal convolution)
#: with DSA sparse MLA attention that its model calls with ``position_embeddings=None`` (no rotary
#: module in the text tower; ``qk_rope_head_dim`` 0 by default, and never rotated).
NOPE_TEXT_FAMILIES: tuple[NoPositionFamily, ...] = (
    NoPositionFamily(
        "recurrent_and_nope",
        ("glm5_next_text",),
        reason="gated linear attention (a recurrent state) and sparse attention layers without RoPE (NoPE)",
    ),
)
NO_POSITION_FAMILIES = MappingProxyType({**NO_POSITION_FAMILIES, **{row.name: row for row in NOPE_TEXT_FAMILIES}})


def no_position_encoding(row: NoPositionFamily, config: Mapping[str, Any], source: str, where: object):
    """The :class:`NoPositionEncoding` of a parsed ``config.json`` of ``row``'s model types.

    Raises:
      CheckpointError: a ``refuse_flags`` field is true (one line naming the file and the field).
    """
    for field, what in row.refuse_flags:
        if config.get(field):
            raise fail(where, f"{field} false ({what} is not read)", repr(config.get(field))[:80])
    return NoPositionEncoding(source, str(config.get("model_type")), row.name)


@dataclasses.dataclass(frozen=True)
class NoPositionEncoding(NoLimit):
    """A model without any position encoding (recurrent, state-space or convolutional): no limit.

    ``family`` is its row of :data:`NO_POSITION_FAMILIES` (``"recurrent"`` unless given).
    """

    source: str
    model_type: str
    family: str = "recurrent"

    scheme = "none"
    key = None

    @property
    def reason(self) -> str:
        """Why no position enters: its row's ``reason``."""
        row = NO_POSITION_FAMILIES.get(self.family)
        return row.reason if row is not None else "a recurrent state"

    def describe_limit(self) -> str:
        return f"{self.model_type} model {self.source} has no limit (no position encoding: {self.reason})"

    def to_dict(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "model_type": self.model_type,
            "scheme": "none",
            "family": self.family,
            "limit": None,
        }

    def __str__(self) -> str:
        label = "recurrent" if self.family == "recurrent" else self.family.replace("_", ", ")
        return f"source:      {self.source}\nscheme:      none ({label})\nlimit:       {self.describe_limit()}"


# ----------------------------------------------------------------------------- heads without positions (issue 35 item 4)
# One block of its own, joined to the registry: heads whose modeling file has no position table, buffer,
# rotary module or relative bias (read in transformers 5.24.0), around a backbone_config read beside them
# as the ``backbone`` tower (PP-LCNet, HGNet-V2: none; DINOv2: a grid; DINOv3: vision RoPE).
HEAD_WITHOUT_POSITION_MODEL_TYPES: tuple[str, ...] = (
    # PP-OCRv5/v6 text detection (DB head: convolutions and upsampling over the backbone's maps)
    # (not pp_ocrv5_server_det, pp_ocrv6_medium_det: neither their tiny nor their default config builds here)
    "pp_ocrv5_mobile_det",
    "pp_ocrv6_small_det",
    # PP-OCRv5/v6 text recognition (SVTR neck: convolutions and attention over the feature sequence with
    # no position tensor, then a CTC head)
    "pp_ocrv5_mobile_rec",
    "pp_ocrv5_server_rec",
    "pp_ocrv6_small_rec",
    "pp_ocrv6_tiny_rec",
    "slanet",  # SLANet: CSP-PAN convolutions and an attention GRU decoding the table structure step by step
    "chmv2",  # CHMv2: Depth Anything-style reassemble/fusion convolutions over its DINOv3 backbone
    "prompt_depth_anything",  # Depth Anything's head plus convolutions of the prompt depth map
)
NO_POSITION_FAMILIES = MappingProxyType(
    {
        **NO_POSITION_FAMILIES,
        "convolutional_heads": NoPositionFamily(
            "convolutional_heads",
            HEAD_WITHOUT_POSITION_MODEL_TYPES,
            tower="vision",
            reason="convolutions (and attention without a position tensor) over its backbone's features; "
            "no position table, rotary or relative bias",
        ),
    }
)
