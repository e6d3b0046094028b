"""A checkpoint is a set of position mechanisms: the model registry, numpy only.

A model type maps to the *set* of its position mechanisms, each a row of one kind of
:data:`~flax_posenc.conversion.mechanisms.MECHANISMS` (the one table of mechanism kinds: learned
tables, sinusoids, RoPE and NoPE layers, ALiBi, M-RoPE, relative biases, DeBERTa's relative
positions, vision grids, none), each with its own limit. A mechanism also names its ``tower``
(``"text"``, ``"vision"``, ``"audio"``) in a composite model (CLIP, Whisper).

:data:`MODEL_MECHANISMS` and :data:`MECHANISM_KINDS` are derived from that table (a model type
listed in two rows, like MPNet's learned table and relative bias, has two mechanisms): adding a
model type is adding it to one row, plus its conformance case (``tests/test_conformance.py``).
:func:`read_model` reads every mechanism of a checkpoint into a :class:`ModelRecord`; its
``limit`` is the smallest limit among them, and ``check_length(n)`` fails when any refuses.

>>> MODEL_MECHANISMS["mpnet"]
(('learned', 'mpnet'), ('relative_bias', 'mpnet'))
>>> MODEL_MECHANISMS["gpt2"]
(('learned', 'gpt2'),)
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from types import MappingProxyType
from typing import Any, cast, overload

from flax_posenc.conversion.config_defaults import with_reader_defaults
from flax_posenc.conversion.families import model_type_spellings
from flax_posenc.conversion.mechanisms import MECHANISMS, ReadContext
from flax_posenc.conversion.no_position import NO_POSITION_MODEL_TYPES, NoPositionEncoding
from flax_posenc.conversion.readers import fail
from flax_posenc.conversion.unread_mechanisms import TRANSFORMERS_VERSION, UNBUILDABLE_MODEL_TYPES, UNREAD_MECHANISMS

__all__ = [
    "MECHANISM_KINDS",
    "MODEL_MECHANISMS",
    "NO_POSITION_MODEL_TYPES",
    "REFUSED_MODEL_TYPES",
    "TOWER_FIELDS",
    "TOWER_UNITS",
    "ENCODER_CONFIG_TOWERS",
    "HEAD_TOWER_FIELDS",
    "UnreadTower",
    "composite_towers",
    "tower_of_field",
    "NoPositionEncoding",
    "is_refused",
    "Mechanism",
    "ModelRecord",
    "mechanisms_of",
    "read_model",
    "refusal",
]


class _Kinds(Sequence[str]):
    """The kind names of :data:`~flax_posenc.conversion.mechanisms.MECHANISMS`, in its order (a live view)."""

    @overload
    def __getitem__(self, i: int) -> str: ...

    @overload
    def __getitem__(self, i: slice) -> Sequence[str]: ...

    def __getitem__(self, i: int | slice) -> str | Sequence[str]:
        return tuple(MECHANISMS)[i]

    def __len__(self) -> int:
        return len(MECHANISMS)

    def __eq__(self, other: object) -> bool:
        return tuple(self) == (tuple(other) if isinstance(other, Sequence) else other)

    def __hash__(self) -> int:
        return hash(tuple(self))

    def __repr__(self) -> str:
        return repr(tuple(self))


class _ModelMechanisms(Mapping[str, tuple[tuple[str, str], ...]]):
    """``model_type -> ((kind, row), ...)`` of :data:`~flax_posenc.conversion.mechanisms.MECHANISMS` (a live view)."""

    def __getitem__(self, model_type: str) -> tuple[tuple[str, str], ...]:
        return MECHANISMS.model_mechanisms()[model_type]

    def __iter__(self) -> Iterator[str]:
        return iter(MECHANISMS.model_mechanisms())

    def __len__(self) -> int:
        return len(MECHANISMS.model_mechanisms())

    def __repr__(self) -> str:
        return repr(dict(MECHANISMS.model_mechanisms()))


#: The kinds a :class:`Mechanism` can be, in the order a record lists them: the names of
#: :data:`~flax_posenc.conversion.mechanisms.MECHANISMS`' rows.
MECHANISM_KINDS: Sequence[str] = _Kinds()

#: ``model_type -> ((kind, row name), ...)``: every model type read, and which row of which
#: mechanism kind reads each of its mechanisms, in reading order. Derived from
#: :data:`~flax_posenc.conversion.mechanisms.MECHANISMS` (and follows a row registered there).
MODEL_MECHANISMS: Mapping[str, tuple[tuple[str, str], ...]] = _ModelMechanisms()

#: Model types known to carry a position mechanism this library does not read, and which.
REFUSED_MODEL_TYPES: Mapping[str, str] = MappingProxyType(
    {
        "funnel": (
            "Funnel's relative attention with pooling is not read: sinusoids of relative distances "
            "(attention_type relative_shift, or the factorized phi/pi/psi/omega matrices), recomputed per "
            "block at the pooled positions (stride 2 per block)"
        ),
        "hunyuan_vl_text": (
            "HunYuan-VL's XD-RoPE is not read: its len(mrope_section) axes (position, width, height, image index), and its sections "
            "cut across the doubled cos/sin width, so a rotated pair's two halves can take different axes"
        ),
        "deepseek_v4": (
            "DeepSeek-V4's compressed attention is not read: its compressors pool every compress_rate tokens "
            "into one entry (softmax pooling weights biased by a learned position_bias per offset in the window), rotated by a second "
            "('compress') RoPE beside the sliding layers' ('main')"
        ),
        "prophetnet": (
            "ProphetNet's n-gram stream positions are not read: its decoder biases attention by a projection of "
            "the hidden states per relative bucket (relative_pos_embeddings over num_buckets to relative_max_distance) "
            "in its main and predict streams"
        ),
        "vilt": (
            "ViLT's image patch positions (embeddings.position_embeddings, resized bilinearly to each image's "
            "patch grid under pixel_mask, then max_image_length patches sampled) are not read"
        ),
        "mistral_large4_text": (
            "its rotary module's learned alpha (LeRoPE: frequencies scaled by exp(alpha), a checkpoint tensor) "
            "and its per-head learned log-position query scaling (softmax_scaling: scale * log(p + 1) + bias, "
            "in the attention and the DSA indexer) are not read"
        ),
        **{
            t: (
                "a hidden-state-conditioned relative position bias (rel_logits_proj over a window of "
                "rel_extent = 1024 backward distances) and a log position scaling of it "
                "(log_scaling_alpha, log_scaling_n_floor) are not read"
            )
            for t in ("inkling_text", "inkling2_text", "inkling2_loop_text")
        },
        "gemma4_unified_assistant": (
            "its text tower attends with key/value states shared from the main model (shared_kv_states), "
            "so its rotation is not verified on its own"
        ),
        # document models beside the bbox_2d kind (conversion.bbox_tables)
        **{
            t: (
                "LayoutLMv2's 1-D and 2-D relative attention biases (has_relative_attention_bias, "
                "has_spatial_attention_bias) and its visual backbone's positions are not read"
            )
            for t in ("layoutlmv2", "layoutxlm")
        },
        "udop": (
            "UDOP's cell embeddings of float boxes (scaled by max_2d_position_embeddings - 1, clamped) and its "
            "1-D, horizontal and vertical relative attention biases (relative_bias_args) are not read"
        ),
        "video_llava": "its two vision towers (image_tower, video_tower) share one vision_config; not read apart",
        # speech encoders (issue 36, audio): their convolutional positions are a conv_position row where read
        "wavlm": (
            "WavLM's gated relative position bias (rel_attn_embed over num_buckets up to max_bucket_distance, "
            "gated per layer by gru_rel_pos_linear of the hidden states) is not read"
        ),
        "cohere_asr": (
            "its decoder's learned position table (decoder.pos_emb, max_position_embeddings) is not read, and its "
            "checkpoint stores the parakeet encoder's u/v biases as pos_bias_u/pos_bias_v"
        ),
        "speecht5": (
            "SpeechT5's relative positional encoding (pe_k, max_relative_position), scaled sinusoids and "
            "sinusoidal text positions are not read"
        ),
        **{
            t: (
                "its speech encoder's conformer positions (Transformer-XL relative or rotary) and the text stacks' "
                "sinusoids are not read"
            )
            for t in ("seamless_m4t", "seamless_m4t_v2")
        },
        # issue 35: composites whose towers are read but which hold positions of their own
        "chameleon": "its own text model's RoPE (the top-level config, beside its vq_config tower) is not read",
        **{
            t: "its keypoint encoder (an MLP over keypoint coordinates, positional_encoder/kenc) is not read"
            for t in ("superglue", "lightglue")
        },
        "depth_pro": "its three DINOv2 towers' grids, under image_encoder/patch_encoder/fov modules, are not read",
        **{
            t: "its text encoder, audio codec and decoder towers together are not verified (the composite does not build)"
            for t in ("musicgen", "musicgen_melody")
        },
        "pe_audio_encoder": "its own positions beside its DAC tower are not verified (the DAC is not a module of the model)",
        "csm": "its own backbone model's RoPE (backbone_model.rotary_emb, the top-level config) is not read",
        "kyutai_speech_to_text": "its own text model's RoPE (the top-level config) is not read, and its Mimi codec "
        "is not a module built from codec_config",
        "musicflamingo": "its own rotary embedding of audio frames (pos_emb, with position_angles) beside its audio "
        "tower is not read",
        "blt": "its global transformer tower is not verified (it runs on patch states of another width)",
        "emu3": "not verified: its composite does not build from tiny towers (it needs a vocabulary_map)",
        "deepseek_ocr2_vision": "not verified: transformers builds no model from its config alone (a part of "
        "DeepSeek-OCR 2, whose text tower does not build here)",
        "unlimited_ocr_vision": "not verified: transformers builds no model from its config alone (a part of "
        "Unlimited-OCR)",
        **{
            t: "its acoustic decoder's RoPE (acoustic_decoder.rotary_emb) beside its wav2vec2-bert tower is not read"
            for t in ("neucodec", "xcodec2")
        },
        "phi4_multimodal": "its own text model's RoPE (the top-level config's rotary_emb, beside its vision and audio "
        "towers) is not read",
        "xcodec": "its acoustic DAC tower is not verified (the model builds its parts, no module from acoustic_model_config)",
        "higgs_audio_v2_tokenizer": "its acoustic and semantic towers are not verified (the model needs torchaudio)",
        "xclip": (
            "the learned frame positions of its multi-frame integration transformer (mit.position_embedding, "
            "num_frames rows) are not read"
        ),
    }
)

#: Issue 36's RoPE refusals: model types whose rotary embedding differs from every RoPE row.
REFUSED_MODEL_TYPES = MappingProxyType(
    {
        **REFUSED_MODEL_TYPES,
        "ernie4_5_vl_moe_text": (
            "ERNIE 4.5-VL's multimodal RoPE (height and width on alternate frequencies of the first "
            "mrope_section[0] + mrope_section[1], time on the last mrope_section[2]) is not read"
        ),
        "clvp_encoder": (
            "CLVP's rotary embedding (max(projection_dim // (2 * num_attention_heads), 32) dims, the values "
            "rotated with the queries and keys) is not read"
        ),
    }
)


def _check_refusals() -> None:
    """Raise ValueError (one line) when a model type is both read (a row of ``MECHANISMS``) and
    refused (:data:`REFUSED_MODEL_TYPES`, ``UNREAD_MECHANISMS``, ``UNBUILDABLE_MODEL_TYPES``): the
    coordinator drops the refusal when a row lands."""
    read = set(MECHANISMS.model_mechanisms())
    for name, rows in (
        ("REFUSED_MODEL_TYPES", REFUSED_MODEL_TYPES),
        ("UNREAD_MECHANISMS", UNREAD_MECHANISMS),
        ("UNBUILDABLE_MODEL_TYPES", UNBUILDABLE_MODEL_TYPES),
    ):
        both = sorted(read & set(rows))
        if both:
            raise ValueError(
                f"{name}: expected no model type that a registry row reads, found {len(both)}: "
                f"{', '.join(both[:8])}{' ...' if len(both) > 8 else ''} (drop their lines, or run "
                "`python tools/unread_mechanisms.py --write`)"
            )
    both = sorted(set(UNREAD_MECHANISMS) & (set(REFUSED_MODEL_TYPES) | set(UNBUILDABLE_MODEL_TYPES)))
    if both:
        raise ValueError(
            f"UNREAD_MECHANISMS: expected each model type refused once, found twice: {', '.join(both[:8])}"
        )


_check_refusals()


#: The sub-config fields of a composite model (LLaVA, PaliGemma, Gemma 3, ...) read as towers,
#: and the tower each one is. A composite whose own model type is not in
#: :data:`MODEL_MECHANISMS` is read as the union of these towers (:func:`read_model`).
TOWER_FIELDS: Mapping[str, str] = MappingProxyType(
    {
        "text_config": "text",
        "vision_config": "vision",
        "audio_config": "audio",
        # BLIP-2 / InstructBLIP's Q-Former: its own positions (a learned table, or none) are read (issue 35)
        "qformer_config": "qformer",
        "backbone_config": "backbone",
        # issue 36: the speech encoder of a recogniser (Parakeet CTC/RNNT/TDT, Cohere ASR, Nemotron ASR); the
        # encoders of ENCODER_CONFIG_TOWERS are what their model type says (Dia's and BLT's text encoders)
        "encoder_config": "audio",
    }
)

#: ``encoder_config`` sub-configs that are not a speech encoder, by their ``model_type``: the tower
#: they are (Dia's text encoder, BLT's byte encoder; the OCR models' vision encoders); any other
#: ``encoder_config`` is an audio tower (:func:`tower_of_field`).
ENCODER_CONFIG_TOWERS: Mapping[str, str] = MappingProxyType(
    {
        "dia_encoder": "text",
        "blt_local_encoder": "text",
        "deepseek_ocr2_encoder": "vision",
        "unlimited_ocr_vision_encoder": "vision",
    }
)

#: What each tower's input is measured in: tokens, image pixels, seconds of audio. (A mechanism's own
#: limit may count something else: the RoPE of an audio tower counts its encoder's frames,
#: :attr:`Mechanism.unit` ``"audio frames"``.)
#: A ``backbone`` (``backbone_config``: the ResNet, Swin or DINOv2 under a detection, segmentation or
#: depth head) takes the image's pixels, as a vision tower does.
TOWER_UNITS: Mapping[str, str] = MappingProxyType(
    {"text": "tokens", "qformer": "tokens", "vision": "image pixels", "audio": "seconds", "backbone": "image pixels"}
)

#: The tower fields read only beside the model type's own mechanisms: a detection, segmentation or
#: depth model (DETR, UperNet, Depth Anything) has a head of its own around its ``backbone_config``,
#: so its backbone alone never makes it read (:func:`read_model`).
HEAD_TOWER_FIELDS: frozenset[str] = frozenset({"backbone_config"})


def tower_of_field(field: str, model_type: object = None) -> str:
    """The tower a sub-config field of a composite ``config.json`` is: its :data:`TOWER_FIELDS` name,
    else the field without ``_config`` (``vq_config`` -> ``"vq"``, an encoder-decoder's ``encoder``);
    an ``encoder_config`` whose sub-config's ``model_type`` is in :data:`ENCODER_CONFIG_TOWERS` is the
    tower named there (Dia's text encoder), any other an ``"audio"`` tower.

    >>> tower_of_field("vision_config"), tower_of_field("codec_config"), tower_of_field("decoder")
    ('vision', 'codec', 'decoder')
    >>> tower_of_field("encoder_config", "parakeet_encoder"), tower_of_field("encoder_config", "dia_encoder")
    ('audio', 'text')
    """
    if field == "encoder_config" and isinstance(model_type, str) and model_type in ENCODER_CONFIG_TOWERS:
        return ENCODER_CONFIG_TOWERS[model_type]
    return TOWER_FIELDS.get(field, field.removesuffix("_config"))


def composite_towers(config: Mapping[str, Any], where: object = "config.json") -> tuple[tuple[str, str, Mapping], ...]:
    """``((field, tower, sub-config), ...)`` of a composite ``config.json``: every :data:`TOWER_FIELDS`
    entry that is set (``null`` or absent: no such tower), in that order, then every other field
    holding a sub-config with a ``model_type`` of its own (Chameleon's ``vq_config``, CSM's
    ``codec_config``, an encoder-decoder's ``encoder`` and ``decoder``: :func:`tower_of_field`);
    ``()`` when none is.

    >>> composite_towers({"model_type": "llava", "text_config": {"model_type": "llama"}})[0][:2]
    ('text_config', 'text')
    >>> [t[:2] for t in composite_towers({"encoder": {"model_type": "vit"}, "decoder": {"model_type": "gpt2"}})]
    [('encoder', 'encoder'), ('decoder', 'decoder')]

    Raises:
      CheckpointError: a :data:`TOWER_FIELDS` sub-config is not an object with a string
        ``model_type`` (one line naming the file and the field).
    """
    out = []
    for field in TOWER_FIELDS:
        sub = config.get(field)
        if sub is None:
            continue
        if not isinstance(sub, Mapping) or not isinstance(sub.get("model_type"), str):
            found = repr(sub.get("model_type")) if isinstance(sub, Mapping) else type(sub).__name__
            raise fail(f"{where}:{field}", "a sub-config object with a string model_type", found[:80])
        out.append((field, tower_of_field(field, sub["model_type"]), sub))
    for field, sub in config.items():  # any other part with a model type of its own is a tower too
        if field not in TOWER_FIELDS and isinstance(sub, Mapping) and isinstance(sub.get("model_type"), str):
            out.append((field, tower_of_field(field), sub))
    return tuple(out)


@dataclasses.dataclass(frozen=True)
class UnreadTower:
    """A tower of a composite model whose positions this library does not read.

    Attributes:
      tower: ``"text"``, ``"vision"``, ``"audio"`` or ``"backbone"`` (:data:`TOWER_UNITS`).
      field: its sub-config's field in ``config.json`` (``"vision_config"``, ...).
      model_type: the sub-config's ``model_type``.
      reason: :func:`refusal` of that model type (the mechanism known not to be read, or "not in
        the registry").
    """

    tower: str
    field: str
    model_type: str
    reason: str

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def __str__(self) -> str:
        return f"{self.tower} tower ({self.field}: {self.model_type}) NOT READ: {self.reason}"


def mechanisms_of(model_type: str | None) -> tuple[tuple[str, str], ...] | None:
    """``MODEL_MECHANISMS`` of ``model_type`` under any ``-``/``_`` spelling, else ``None``.

    >>> mechanisms_of("xlm_roberta")
    (('learned', 'xlm-roberta'),)
    """
    if not isinstance(model_type, str):
        return None
    for spelling in model_type_spellings(model_type):
        if spelling in MODEL_MECHANISMS:
            return MODEL_MECHANISMS[spelling]
    return None


def is_refused(model_type: object) -> bool:
    """Whether ``model_type`` (any ``-``/``_`` spelling) is in :data:`REFUSED_MODEL_TYPES`."""
    return isinstance(model_type, str) and any(s in REFUSED_MODEL_TYPES for s in model_type_spellings(model_type))


def refusal(model_type: object) -> str:
    """Why ``model_type`` is not read, in one line: its :data:`REFUSED_MODEL_TYPES` reason, else the
    mechanism :data:`~flax_posenc.conversion.unread_mechanisms.UNREAD_MECHANISMS` names, else
    transformers' error building it (:data:`~flax_posenc.conversion.unread_mechanisms.UNBUILDABLE_MODEL_TYPES`);
    a model type the pinned transformers does not know: "not in the registry".

    >>> refusal("chameleon")
    "chameleon: its own text model's RoPE (the top-level config, beside its vq_config tower) is not read"
    """
    if isinstance(model_type, str):
        for spelling in model_type_spellings(model_type):
            if spelling in REFUSED_MODEL_TYPES:
                return f"{spelling}: {REFUSED_MODEL_TYPES[spelling]}"
            if spelling in UNREAD_MECHANISMS:
                return f"{spelling}: position mechanism not read: {UNREAD_MECHANISMS[spelling]}"
            if spelling in UNBUILDABLE_MODEL_TYPES:
                return (
                    f"{spelling}: not read; transformers {TRANSFORMERS_VERSION} cannot build it here "
                    f"({UNBUILDABLE_MODEL_TYPES[spelling]})"
                )
    return (
        f"{model_type!r}: its position mechanisms are not in the registry "
        f"({len(MODEL_MECHANISMS)} model types are read; `flax-posenc families` lists them)"
    )


@dataclasses.dataclass(frozen=True)
class Mechanism:
    """One position mechanism of a checkpoint.

    Attributes:
      kind: one of :data:`MECHANISM_KINDS` (a row of
        :data:`~flax_posenc.conversion.mechanisms.MECHANISMS`).
      record: what describes it: one of its kind's ``record_types`` (a
        :class:`~flax_posenc.conversion.LearnedTableSource`, a
        :class:`~flax_posenc.conversion.relative_config.RelativeConfig` (RoPE/ALiBi),
        a :class:`~flax_posenc.conversion.relative_config.NoPositionLayers`, a
        :class:`~flax_posenc.conversion.relative_bias.RelativeBiasSource`, ...).
      tower: the part of the model it serves: ``"text"``, ``"vision"`` (a ViT's or CLIP's grid)
        or ``"audio"`` (Whisper's encoder).
    """

    kind: str
    record: Any
    tower: str = "text"

    @classmethod
    def of(cls, record: Any, tower: str | None = None) -> Mechanism:
        """The mechanism of ``record``: its kind from its ``.scheme``; ``tower`` defaults to the kind's.

        Raises:
          ValueError: no kind of :data:`~flax_posenc.conversion.mechanisms.MECHANISMS` lists its scheme.
        """
        kind = MECHANISMS.kind_of(record)
        return cls(kind, record, MECHANISMS[kind].tower if tower is None else tower)

    @property
    def limit(self) -> int | None:
        """Usable positions ``0 .. limit - 1`` this mechanism allows (``None``: no limit)."""
        return self.record.limit

    @property
    def rope(self):
        """The :class:`~flax_posenc.RopeConfig` of a ``rope`` mechanism, else ``None``."""
        return getattr(self.record, "rope", None)

    @property
    def softmax_scale(self) -> float | None:
        """RoPE kinds: the softmax scale its model's attention uses (see
        :mod:`flax_posenc.conversion.attention_scale`); else ``None``."""
        return getattr(self.record, "softmax_scale", None)

    @property
    def query_scale(self) -> tuple[float, int] | None:
        """RoPE kinds: ``(beta, original_max_position_embeddings)`` when its model scales the queries by
        ``1 + beta * log(1 + floor(p / original_max_position_embeddings))`` (Ministral 3, Mistral 4;
        :func:`flax_posenc.attention_temperature` with ``position_offset=0``); else ``None``."""
        return getattr(self.record, "query_scale", None)

    @property
    def alibi(self):
        """The :class:`~flax_posenc.AlibiConfig` of an ``alibi`` mechanism, else ``None``."""
        return getattr(self.record, "alibi", None)

    @property
    def table(self):
        """The :class:`~flax_posenc.conversion.PositionTable` of a learned/sinusoidal table, else ``None``."""
        return getattr(self.record, "table", None)

    @property
    def unit(self) -> str:
        """What its limit counts: the record's own ``unit`` (``"seconds"`` of audio, ``"time steps"``,
        ...); else ``"audio frames"`` in an ``audio`` tower of a composite (GLM-ASR's encoder RoPE:
        the encoder's frames, not the prompt's tokens, so ``check --length`` leaves it out), else
        ``"tokens"`` (positions of the token sequence)."""
        own = getattr(self.record, "unit", None)
        if own is not None:
            return own
        return "audio frames" if self.tower == "audio" else "tokens"

    @property
    def layers(self) -> tuple[int, ...] | None:
        """The layers it serves (``None``: every layer, or the input block)."""
        return getattr(self.record, "layers", None)

    @property
    def layer_type(self) -> str | None:
        return getattr(self.record, "layer_type", None)

    def describe_limit(self) -> str:
        """The one sentence naming this mechanism's limit."""
        return self.record.describe_limit()

    def check_length(self, length: int) -> tuple[bool, str]:
        return self.record.check_length(length)

    def to_dict(self) -> dict[str, Any]:
        """``kind``, ``tower``, ``limit``, ``sentence`` and its kind's ``details`` of the record."""
        head = {"kind": self.kind, "tower": self.tower, "limit": self.limit, "sentence": self.describe_limit()}
        details = MECHANISMS[self.kind].details(self.record)
        if "unit" not in details and self.unit != "tokens":  # a tower's unit the record does not hold
            details["unit"] = self.unit
        return {**head, **details}


@dataclasses.dataclass(frozen=True)
class ModelRecord:
    """Every position mechanism of one SOURCE; a :class:`~flax_posenc.conversion.SourceRecord`.

    Attributes:
      source: the SOURCE as given.
      model_type: the ``config.json`` ``model_type`` (``None`` without a config).
      mechanisms: the :class:`Mechanism` s, in :data:`MECHANISM_KINDS` order of reading.

    ``limit`` is the smallest limit among the token mechanisms (``None`` when none has one);
    ``check_length(n)`` fails when any of them refuses ``n`` positions; ``check_seconds(s)`` asks
    the audio ones (Whisper's encoder: ``unit == "seconds"``). Attributes of the first
    mechanism's record (``table``, ``rope``, ``report``, ...) are reachable on the record itself.

    A composite model (LLaVA, PaliGemma, Gemma 3, ...) is read as its towers: each mechanism's
    ``tower`` says which; ``unread`` lists the towers whose positions are not read
    (:class:`UnreadTower`), so that a partly read model never passes for a read one.
    """

    source: str
    model_type: str | None
    mechanisms: tuple[Mechanism, ...]
    unread: tuple[UnreadTower, ...] = ()

    def __post_init__(self):
        if not self.mechanisms:
            raise ValueError("mechanisms: expected at least one")

    @property
    def primary(self) -> Any:
        """The record of the mechanism that sets :attr:`limit` (else the first)."""
        return self._binding().record

    def _binding(self) -> Mechanism:
        tokens = [m for m in self.mechanisms if m.unit == "tokens"] or list(self.mechanisms)
        # a composite's prompt is its text tower's (and Q-Former's) tokens: an audio tower's RoPE
        # counts its own frames (GLM-ASR's encoder: 1500), which never bind the prompt (issue 36)
        tokens = [m for m in tokens if m.tower in ("text", "qformer")] or tokens
        limited = [m for m in tokens if m.limit is not None]
        return min(limited, key=lambda m: cast(int, m.limit)) if limited else tokens[0]

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") or name in ("mechanisms", "source", "model_type"):
            raise AttributeError(name)
        return getattr(self.mechanisms[0].record, name)

    @property
    def family(self) -> str:
        return self.mechanisms[0].record.family

    @property
    def scheme(self) -> str:
        """The first mechanism's scheme, or ``"+"``-joined kinds when there are several."""
        if len(self.mechanisms) == 1:
            return self.mechanisms[0].record.scheme
        return "+".join(dict.fromkeys(m.kind for m in self.mechanisms))

    @property
    def key(self) -> str | None:
        return self.primary.key

    @property
    def limit(self) -> int | None:
        """The smallest limit among the mechanisms (``None``: no mechanism limits a length)."""
        return self._binding().limit

    def describe_limit(self) -> str:
        """The binding mechanism's sentence."""
        return self._binding().describe_limit()

    def check_length(self, length: int) -> tuple[bool, str]:
        """``(False, line)`` of the first mechanism refusing ``length``; else the binding one's verdict.

        Raises:
          CheckpointError: every mechanism counts seconds of audio (an encoder-only Whisper).
        """
        counted = "tokens"
        if all(m.unit != "tokens" for m in self.mechanisms):
            units = {m.unit for m in self.mechanisms}
            if units == {"time steps"}:  # a time series model (TimeSeriesTransformer, Informer, Autoformer)
                raise fail(self.source, "a model with token positions for --length", "time steps only (use --steps)")
            if "audio frames" not in units:
                raise fail(
                    self.source, "a model with token positions for --length", "audio positions only (use --seconds)"
                )
            counted = "audio frames"  # an audio tower alone (LASR CTC's encoder RoPE): the length counts its frames
        for m in self.mechanisms:
            if m.unit != counted:
                continue
            fits, line = m.check_length(length)
            if not fits:
                return fits, line
        return self._binding().check_length(length)

    def check_seconds(self, seconds: float) -> tuple[bool, str]:
        """``(fits, line)`` for ``seconds`` of audio, from every mechanism whose limit is a duration.

        Raises:
          CheckpointError: the model has no audio position table (one line naming SOURCE).
        """
        audio = [m for m in self.mechanisms if m.unit == "seconds"]
        if not audio:
            kinds = ", ".join(dict.fromkeys(m.kind for m in self.mechanisms))
            raise fail(
                self.source,
                "a model with an audio position table for --seconds (Whisper)",
                f"{kinds} positions only (use --length for tokens)",
            )
        verdicts = [m.record.check_seconds(seconds) for m in audio]
        return next((v for v in verdicts if not v[0]), verdicts[0])

    def to_dict(self) -> dict[str, Any]:
        """The first mechanism's report, the ``limit`` and every mechanism under ``mechanisms``."""
        out = dict(self.mechanisms[0].record.to_dict())
        out.update(
            model_type=self.model_type,
            limit=self.limit,
            limit_sentence=self.describe_limit(),
            mechanisms=[m.to_dict() for m in self.mechanisms],
        )
        if self.unread or len({m.tower for m in self.mechanisms}) > 1:
            out.update(
                towers=sorted({m.tower for m in self.mechanisms}), unread_towers=[u.to_dict() for u in self.unread]
            )
        return out

    def __str__(self) -> str:
        towers = self.unread or len({m.tower for m in self.mechanisms}) > 1
        if len(self.mechanisms) == 1 and not towers:
            return str(self.mechanisms[0].record)
        parts = [f"source:      {self.source}", f"model_type:  {self.model_type}"]
        for i, m in enumerate(self.mechanisms):
            where = f" ({m.tower} tower)" if towers else ""
            if m.unit == "audio frames" and getattr(m.record, "unit", None) is None:
                where = where[:-1] + ", limit in audio frames)" if where else " (limit in audio frames)"
            parts.append(f"--- mechanism {i + 1} of {len(self.mechanisms)}: {m.kind}{where}")
            parts.append(str(m.record))
        parts += [f"--- {u}" for u in self.unread]
        parts.append(f"=== limit:   {self.describe_limit()}")
        return "\n".join(parts)


def read_model(source: str | os.PathLike, config: Mapping[str, Any], config_path: Path) -> ModelRecord | None:
    """Every mechanism of a checkpoint whose ``config.json`` (parsed: ``config``) names a model type
    in :data:`MODEL_MECHANISMS`; else, for a composite model (:func:`composite_towers`), the union
    of its towers' mechanisms (each tower's sub-config read as its own model type, its tensors
    found under the composite's prefix, each mechanism labelled with its ``tower``; towers not
    read, and any other sub-config with a ``model_type`` (IDEFICS2's ``perceiver_config``), are listed
    in ``unread``); else ``None`` (no tower is read either).

    Raises:
      CheckpointError: a mechanism cannot be read (one line naming the file), or mechanisms that
        must agree do not (a table's rows against its length field).
    """
    plan = MECHANISMS.plan(config.get("model_type"))
    if plan is None:
        return _read_towers(source, config, config_path)
    context = ReadContext(source, with_reader_defaults(config), config_path)  # a Hub config's omitted defaults
    found: list[Mechanism] = []
    for kind, row in plan:
        assert kind.read is not None  # a kind with rows has a reader (MECHANISMS checks it)
        found += [Mechanism.of(r, kind.tower_of(row)) for r in kind.read(row, context)]
    if not found:
        raise fail(config_path, f"the position mechanisms of {config.get('model_type')}", "none readable")
    unread: list[UnreadTower] = []
    heads = {field: config.get(field) for field in HEAD_TOWER_FIELDS}  # only these: a model's own rows read the others
    for field, tower, sub in composite_towers(heads, config_path):  # the backbone under the model's own head
        found += _read_tower(source, field, tower, sub, config_path, unread)
    if config.get("use_timm_backbone") and isinstance(config.get("backbone"), str):
        why = "a timm backbone: its positions depend on the timm model, which is not read"
        unread.append(UnreadTower("backbone", "backbone", f"timm:{config['backbone']}", why))
    return ModelRecord(context.text, str(config.get("model_type")), tuple(found), tuple(unread))


def _read_tower(
    source: str | os.PathLike, field: str, tower: str, sub: Mapping[str, Any], config_path: Path, unread: list
) -> list[Mechanism]:
    """The mechanisms of one tower's sub-config, read as its own model type, labelled ``tower``;
    ``[]`` (and an :class:`UnreadTower` appended to ``unread``) when its model type is not read. A
    tower that is itself a composite (ColPali's ``vlm_config``, a PaliGemma) is read as its own towers,
    each labelled with its inner tower (``text``, ``vision``)."""
    plan = MECHANISMS.plan(sub["model_type"])
    if plan is None:
        inner = () if is_refused(sub["model_type"]) else composite_towers(sub, f"{config_path}:{field}")
        if inner and not any(f in HEAD_TOWER_FIELDS for f, _, _ in inner):
            before = len(unread)
            nested = [m for f, t, s in inner for m in _read_tower(source, f, t, s, config_path, unread)]
            if nested:
                return nested
            del unread[before:]
        unread.append(UnreadTower(tower, field, sub["model_type"], refusal(sub["model_type"])))
        return []
    context = ReadContext(source, with_reader_defaults(sub), config_path, section=field)
    found: list[Mechanism] = []
    for kind, row in plan:
        assert kind.read is not None
        found += [Mechanism.of(r, tower) for r in kind.read(row, context)]
    return found


def _read_towers(source: str | os.PathLike, config: Mapping[str, Any], config_path: Path) -> ModelRecord | None:
    """The composite model of :func:`read_model`: its towers, read one by one; ``None`` when none is."""
    if is_refused(config.get("model_type")):
        return None
    towers = composite_towers(config, config_path)
    if any(field in HEAD_TOWER_FIELDS for field, _, _ in towers):
        return None  # a head around a backbone (DETR, UperNet): its own mechanism is not read
    found: list[Mechanism] = []
    unread: list[UnreadTower] = []
    for field, tower, sub in towers:
        found += _read_tower(source, field, tower, sub, config_path, unread)
    if not found:
        return None
    return ModelRecord(os.fspath(source), str(config.get("model_type")), tuple(found), tuple(unread))
