"""Convolutional position embeddings of speech encoders (wav2vec2 and kin) as a mechanism, numpy only.

wav2vec 2.0, HuBERT, UniSpeech, UniSpeech-SAT, Data2Vec-Audio, SEW and OmniASR's audio encoder
hold no position table: ``pos_conv_embed`` (OmniASR: ``encode_positions``), a grouped 1-D
convolution over the feature encoder's frames, computes the position term from the hidden states
(:mod:`flax_posenc.conv_position_config` says what it computes). Its facts, per modeling file of
the pinned transformers:

- ``modeling_wav2vec2.py`` (and HuBERT, UniSpeech, UniSpeech-SAT, copied from it):
  ``Conv1d(hidden, hidden, kernel_size=num_conv_pos_embeddings, padding=k // 2,
  groups=num_conv_pos_embedding_groups)`` under ``weight_norm(name="weight", dim=2)`` (saved as
  ``conv.parametrizations.weight.original0`` = g, ``original1`` = v; older files
  ``conv.weight_g``/``conv.weight_v``), ``SamePadLayer`` (one frame cut from an even kernel),
  ``ACT2FN[feat_extract_activation]``. HuBERT's ``conv_pos_batch_norm`` (a BatchNorm before an
  un-normed convolution) is not read: such a config is refused.
- ``modeling_sew.py``: the same with ``stride=squeeze_factor``; the encoder adds it to the hidden
  states average-pooled by ``squeeze_factor``, both cut to the shorter.
- ``modeling_data2vec_audio.py``: ``num_conv_pos_embeddings`` stacked layers (it counts layers
  there), each ``Conv1d(kernel_size=conv_pos_kernel_size)`` without weight norm, the same-pad cut,
  a LayerNorm without parameters, then the activation.
- ``modeling_omniasr.py`` (``omniasr_audio``): one ``Conv1d`` without weight norm, always one
  frame cut, ``ACT2FN[hidden_act]``; its module returns ``hidden + positions``.

Nothing limits the length (``limit`` is ``None``). The record reports the receptive field in
frames and in seconds: a frame of the feature encoder is ``prod(conv_stride)`` samples (320: 20 ms
at the feature extractor's 16 kHz). Its ``unit`` is ``"seconds"``: ``check --seconds S`` asks it,
and refuses a duration that is not a whole number of frames (naming the stride).

>>> CONV_POSITION_FAMILIES["wav2vec2_conv"].kernel_field
'num_conv_pos_embeddings'
"""

from __future__ import annotations

import dataclasses
import math
import os
from collections.abc import Mapping
from fractions import Fraction
from types import MappingProxyType
from typing import Any

import numpy as np

from flax_posenc.conv_position_config import CONV_ACTIVATIONS, ConvPositionSpec, fold_weight_norm
from flax_posenc.conversion.checkpoint import CheckpointReader, open_checkpoint
from flax_posenc.conversion.readers import fail
from flax_posenc.conversion.table import TensorRecord
from flax_posenc.limits import describe_receptive_field

__all__ = [
    "CONV_POSITION_FAMILIES",
    "ConvPositionFamily",
    "ConvPositionSource",
    "ConvPositions",
    "load_conv_positions",
    "read_conv_positions",
]

#: The feature extractors' sampling rate (Wav2Vec2FeatureExtractor: 16 kHz); config.json has none.
SAMPLING_RATE = 16000


@dataclasses.dataclass(frozen=True)
class ConvPositionFamily:
    """One family's convolutional position embedding, as data (a row of :data:`CONV_POSITION_FAMILIES`).

    Attributes:
      name, model_types: our name and the ``config.json`` ``model_type`` values that mean it.
      conv_key: the convolution's module path without the checkpoint's prefix; ``{layer}`` for the
        layer of a stack (found by suffix: ``wav2vec2.`` or a composite's tower prefix may precede it).
      kernel_field, groups_field: the config fields of the kernel (frames) and the groups.
      layers_field: the config field counting stacked layers (Data2Vec-Audio), or ``None``: one.
      stride_field: the config field of the stride (SEW: ``squeeze_factor``), or ``None``: 1.
      weight_norm: the weight is stored weight-normed (``g``, ``v``, ``dim=2``).
      layer_norm: a parameter-free LayerNorm after each convolution (Data2Vec-Audio).
      trim: frames cut from the end (``None``: the same-pad rule, 1 for an even kernel).
      activation_field: the config field naming the activation.
      tower: the part of the model it serves (``"audio"``).
    """

    name: str
    model_types: tuple[str, ...]
    conv_key: str = "encoder.pos_conv_embed.conv"
    kernel_field: str = "num_conv_pos_embeddings"
    groups_field: str = "num_conv_pos_embedding_groups"
    layers_field: str | None = None
    stride_field: str | None = None
    weight_norm: bool = True
    layer_norm: bool = False
    trim: int | None = None
    activation_field: str = "feat_extract_activation"
    tower: str = "audio"


CONV_POSITION_FAMILIES: Mapping[str, ConvPositionFamily] = MappingProxyType(
    {
        row.name: row
        for row in (
            ConvPositionFamily("wav2vec2_conv", ("wav2vec2", "hubert", "unispeech", "unispeech-sat")),
            ConvPositionFamily("sew_conv", ("sew",), stride_field="squeeze_factor"),
            # SEW-D: SEW's strided convolution; its DeBERTa relative attention is a deberta_relative row
            ConvPositionFamily("sew_d_conv", ("sew-d",), stride_field="squeeze_factor"),
            ConvPositionFamily(
                "data2vec_audio_conv",
                ("data2vec-audio",),
                conv_key="encoder.pos_conv_embed.layers.{layer}.conv",
                kernel_field="conv_pos_kernel_size",
                layers_field="num_conv_pos_embeddings",
                weight_norm=False,
                layer_norm=True,
            ),
            ConvPositionFamily(
                "omniasr_conv",
                ("omniasr_audio",),
                conv_key="encode_positions.conv",
                weight_norm=False,
                trim=1,
                activation_field="hidden_act",
            ),
        )
    }
)


# issue 36 (audio, Conformer encoders): wav2vec2-conformer's pos_conv_embed is wav2vec2's convolution
# (``Wav2Vec2ConformerPositionalConvEmbedding``: weight-normed, dim=2, same-pad cut); its
# attention's relative sinusoids are an ``xl_relative`` row (conversion/xl_relative.py).
CONV_POSITION_FAMILIES = MappingProxyType(
    {
        **CONV_POSITION_FAMILIES,
        **{row.name: row for row in (ConvPositionFamily("wav2vec2_conformer_conv", ("wav2vec2-conformer",)),)},
    }
)


def _serves(row: ConvPositionFamily, config: Mapping[str, Any]) -> bool:
    model_type = config.get("model_type")
    return isinstance(model_type, str) and model_type.replace("_", "-") in {
        t.replace("_", "-") for t in row.model_types
    }


def _count(config: Mapping[str, Any], field: str, where: object) -> int:
    value = config.get(field)
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 1 << 20:
        raise fail(where, f"{field} as an integer in 1..{1 << 20}", repr(value)[:80])
    return value


def _counts(config: Mapping[str, Any], field: str, where: object) -> tuple[int, ...]:
    value = config.get(field)
    if not isinstance(value, (list, tuple)) or not value or len(value) > 64:
        raise fail(where, f"{field} as a list of 1..64 positive integers", repr(value)[:80])
    for v in value:
        if isinstance(v, bool) or not isinstance(v, int) or not 1 <= v <= 1 << 20:
            raise fail(where, f"{field} as a list of 1..64 positive integers", repr(value)[:80])
    return tuple(value)


@dataclasses.dataclass(frozen=True)
class ConvPositionSource(TensorRecord):
    """A convolutional position embedding as a :class:`~flax_posenc.conversion.SourceRecord`: no
    limit; its receptive field in frames and seconds.

    Attributes:
      source: the SOURCE as given; model_type: its ``config.json`` ``model_type``.
      family: the :data:`CONV_POSITION_FAMILIES` row; key: the first layer's convolution (module path
        as stored, prefix included).
      spec: the :class:`~flax_posenc.conv_position_config.ConvPositionSpec` (width, kernel, groups,
        stride, layers, trim, activation).
      conv_kernel, conv_stride: the feature encoder's convolutions (``config.json``), which turn
        samples into frames.
      weight_keys: per layer, the stored tensors (``g``, ``v``, bias, or weight, bias).
    """

    source: str
    model_type: str
    family: str
    key: str
    spec: ConvPositionSpec
    conv_kernel: tuple[int, ...]
    conv_stride: tuple[int, ...]
    weight_keys: tuple[tuple[str, ...], ...]
    sampling_rate: int = SAMPLING_RATE

    scheme = "conv_position"
    unit = "seconds"

    @property
    def seconds_limit(self) -> None:
        """No duration limit."""
        return None

    @property
    def frame_samples(self) -> int:
        """Samples per frame of the feature encoder: ``prod(conv_stride)`` (wav2vec2: 320)."""
        return math.prod(self.conv_stride)

    @property
    def frame_seconds(self) -> float:
        """Seconds per frame (wav2vec2: 0.02)."""
        return self.frame_samples / self.sampling_rate

    @property
    def receptive_field(self) -> int:
        """Frames one output frame of the position term sees (``kernel_size``; stacked: ``L (k - 1) + 1``)."""
        return self.spec.receptive_field

    @property
    def receptive_seconds(self) -> float:
        return self.receptive_field * self.frame_seconds

    def frames(self, samples: int) -> int:
        """Frames the feature encoder yields for ``samples`` samples (``floor((n - k) / s) + 1`` per
        layer, as transformers' ``_get_feat_extract_output_lengths``; 0 when too short)."""
        n = samples
        for k, s in zip(self.conv_kernel, self.conv_stride, strict=False):
            n = (n - k) // s + 1 if n >= k else 0
        return max(n, 0)

    def _name(self) -> str:
        return f"{self.family} convolutional position embedding ({self.key}) of {self.source}"

    def _detail(self) -> str:
        s = self.spec
        parts = [f"kernel {s.kernel_size}, {s.groups} groups"]
        if s.num_layers > 1:
            parts.append(f"{s.num_layers} layers")
        if s.stride > 1:
            parts.append(f"stride {s.stride}")
        hop = f"frames of {self.frame_seconds * 1000:g} ms: {self.frame_samples} samples at {self.sampling_rate} Hz"
        return f" ({', '.join(parts)}; {hop})"

    def describe_limit(self) -> str:
        """``"... has no position limit: each output frame sees 128 frames = 2.56 s of audio (...)"``."""
        return describe_receptive_field(self._name(), self.receptive_field, self.frame_seconds, self._detail())

    def check_length(self, length: int) -> tuple[bool, str]:
        """Any number of frames fits: ``(True, line)``."""
        return True, f"ok: {length} frames fit; {self.describe_limit()}"

    def check_seconds(self, seconds: float) -> tuple[bool, str]:
        """``seconds`` of audio: always fits; one line with the frames it makes.

        Raises:
          ValueError: ``seconds`` is not a whole number of frames (``frame_samples`` samples at
            ``sampling_rate``): one line naming the stride.

        >>> rec = ConvPositionSource("demo", "wav2vec2", "wav2vec2_conv", "encoder.pos_conv_embed.conv",
        ...     ConvPositionSpec(768, 128, 16), (10, 3, 3, 3, 3, 2, 2), (5, 2, 2, 2, 2, 2, 2), ())
        >>> rec.check_seconds(1.0)[1][:60]
        'ok: 1 s = 50 frames of 20 ms (the feature encoder yields 49)'
        """
        samples = Fraction(seconds).limit_denominator(10**9) * self.sampling_rate
        frames = samples / self.frame_samples
        if frames.denominator != 1:
            raise ValueError(
                f"--seconds: expected a whole number of frames (the feature encoder's stride, prod(conv_stride) = "
                f"{self.frame_samples} samples = {self.frame_seconds * 1000:g} ms at {self.sampling_rate} Hz), "
                f"found {seconds:g} s = {float(samples):g} samples = {float(frames):g} frames"
            )
        yields = self.frames(int(samples))
        return True, (
            f"ok: {seconds:g} s = {int(frames)} frames of {self.frame_seconds * 1000:g} ms (the feature encoder "
            f"yields {yields}); {self.describe_limit()}"
        )

    def details(self) -> dict[str, Any]:
        return {
            "unit": self.unit,
            "seconds": None,
            "dim": self.spec.dim,
            "kernel_size": self.spec.kernel_size,
            "groups": self.spec.groups,
            "stride": self.spec.stride,
            "num_layers": self.spec.num_layers,
            "trim": self.spec.trim,
            "layer_norm": self.spec.layer_norm,
            "activation": self.spec.activation,
            "receptive_field_frames": self.receptive_field,
            "receptive_field_seconds": self.receptive_seconds,
            "frame_samples": self.frame_samples,
            "sampling_rate": self.sampling_rate,
        }

    def lines(self) -> list[str]:
        s = self.spec
        return [
            f"key:         {self.key}",
            f"scheme:      grouped convolution of the hidden states, {s.dim} wide, kernel {s.kernel_size}, "
            f"{s.groups} groups, {s.num_layers} layer{'s' if s.num_layers > 1 else ''}, stride {s.stride}, "
            f"{s.trim} frame{'' if s.trim == 1 else 's'} cut, {s.activation}",
            f"audio:       a frame is {self.frame_samples} samples = {self.frame_seconds * 1000:g} ms; "
            f"receptive field {self.receptive_field} frames = {self.receptive_seconds:g} s",
        ]


def _find(ckpt: CheckpointReader, suffix: str, where: object) -> str | None:
    found = [n for n in ckpt.names if n == suffix or n.endswith("." + suffix)]
    if len(found) > 1:
        raise fail(where, f"one tensor named *{suffix}", f"{len(found)}: {', '.join(found[:3])}")
    return found[0] if found else None


def _layer_keys(ckpt: CheckpointReader, row: ConvPositionFamily, layer: int) -> tuple[str, ...] | None:
    """The stored tensors of one layer: ``(g, v, bias)`` weight-normed, else ``(weight, bias)``."""
    base = row.conv_key.format(layer=layer)
    where = ckpt.weights_path
    if row.weight_norm:
        for g, v in (
            ("parametrizations.weight.original0", "parametrizations.weight.original1"),
            ("weight_g", "weight_v"),
        ):
            kv = _find(ckpt, f"{base}.{v}", where)
            if kv is not None:
                kg = _find(ckpt, f"{base}.{g}", where)
                kb = _find(ckpt, f"{base}.bias", where)
                if kg is None or kb is None:
                    missing = f"{base}.{g}" if kg is None else f"{base}.bias"
                    raise fail(where, f"{missing} beside {kv}", "no such tensor")
                return (kg, kv, kb)
        if _find(ckpt, f"{base}.weight", where) is not None:
            raise fail(where, f"{base} weight-normed (parametrizations.weight.original0/1)", f"{base}.weight")
        return None
    kw, kb = _find(ckpt, f"{base}.weight", where), _find(ckpt, f"{base}.bias", where)
    if kw is None:
        return None
    if kb is None:
        raise fail(where, f"{base}.bias beside {kw}", "no such tensor")
    return (kw, kb)


def read_conv_positions(
    row: ConvPositionFamily, config: Mapping[str, Any], source: str | os.PathLike, config_path: str | os.PathLike
) -> list[ConvPositionSource]:
    """The :class:`ConvPositionSource` of SOURCE for ``row`` (``[]``: no such convolution stored).

    Only headers are read (shapes), never the weights.

    Raises:
      CheckpointError: a config field missing or out of range, HuBERT's ``conv_pos_batch_norm``, or
        stored weights whose kernel or groups disagree with the config (one line naming the field,
        what it says and what the weights hold).
    """
    where = config_path
    dim = _count(config, "hidden_size", where)
    kernel = _count(config, row.kernel_field, where)
    groups = _count(config, row.groups_field, where)
    layers = 1 if row.layers_field is None else _count(config, row.layers_field, where)
    stride = 1 if row.stride_field is None else _count(config, row.stride_field, where)
    if config.get("conv_pos_batch_norm"):
        raise fail(where, "conv_pos_batch_norm false (a batch-normed position convolution is not read)", "true")
    activation = config.get(row.activation_field, "gelu")
    if activation not in CONV_ACTIVATIONS:
        raise fail(where, f"{row.activation_field} one of {', '.join(CONV_ACTIVATIONS)}", repr(activation)[:80])
    conv_kernel = _counts(config, "conv_kernel", where)
    conv_stride = _counts(config, "conv_stride", where)
    if len(conv_kernel) != len(conv_stride):
        raise fail(where, f"conv_kernel and conv_stride of one length ({len(conv_stride)})", str(len(conv_kernel)))
    if dim % groups:
        raise fail(where, f"{row.groups_field} dividing hidden_size {dim}", str(groups))
    ckpt = open_checkpoint(source)
    with ckpt:
        keys = []
        for layer in range(layers):
            found = _layer_keys(ckpt, row, layer)
            if found is None:
                if layer == 0:
                    return []
                raise fail(ckpt.weights_path, f"{layers} layers ({row.layers_field})", f"{layer}")
            weight = found[1] if row.weight_norm else found[0]
            _, shape = ckpt.info(weight)
            if len(shape) != 3 or shape[0] != dim:
                raise fail(f"{ckpt.weights_path}: {weight}", f"shape ({dim}, {dim // groups}, {kernel})", str(shape))
            if shape[2] != kernel:
                raise fail(
                    f"{ckpt.weights_path}: {weight}",
                    f"a kernel of {kernel} frames ({row.kernel_field} in config.json)",
                    f"{shape[2]} (shape {shape})",
                )
            if shape[1] * groups != dim:
                found_groups = f"{dim // shape[1]}" if shape[1] and dim % shape[1] == 0 else "none"
                raise fail(
                    f"{ckpt.weights_path}: {weight}",
                    f"{groups} groups ({row.groups_field} in config.json: {dim // groups} input channels each)",
                    f"{found_groups} (shape {shape})",
                )
            if row.weight_norm:
                _, g_shape = ckpt.info(found[0])
                if tuple(g_shape) != (1, 1, kernel):
                    raise fail(
                        f"{ckpt.weights_path}: {found[0]}", f"shape (1, 1, {kernel}) (weight_norm dim=2)", str(g_shape)
                    )
            _, b_shape = ckpt.info(found[-1])
            if tuple(b_shape) != (dim,):
                raise fail(f"{ckpt.weights_path}: {found[-1]}", f"shape ({dim},)", str(b_shape))
            keys.append(found)
    spec = ConvPositionSpec(
        dim,
        kernel,
        groups,
        stride=stride,
        num_layers=layers,
        layer_norm=row.layer_norm,
        trim=row.trim,
        activation=activation,
        name=f"{row.name} convolutional position embedding",
    )
    key = keys[0][-1].rsplit(".", 1)[0]
    return [
        ConvPositionSource(
            os.fspath(source),
            str(config.get("model_type")),
            row.name,
            key,
            spec,
            conv_kernel,
            conv_stride,
            tuple(keys),
        )
    ]


@dataclasses.dataclass(frozen=True)
class ConvPositions:
    """A checkpoint's convolutional position embedding, ready for :func:`flax_posenc.conv_position.conv_positions`.

    Attributes:
      record: its :class:`ConvPositionSource`; spec: ``record.spec``.
      kernel: ``(num_layers, kernel_size, dim // groups, dim)`` float32, the weight norm folded in
        float64 (:func:`~flax_posenc.conv_position_config.fold_weight_norm`), then rounded once.
      bias: ``(num_layers, dim)`` float32.
    """

    record: ConvPositionSource
    kernel: np.ndarray
    bias: np.ndarray

    @property
    def spec(self) -> ConvPositionSpec:
        return self.record.spec

    def params(self) -> dict[str, np.ndarray]:
        """``{"kernel": ..., "bias": ...}``: the parameters of ``ConvPositionalEmbedding`` (NNX, Linen)."""
        return {"kernel": self.kernel, "bias": self.bias}


def load_conv_positions(source: str | os.PathLike, *, dtype: Any = np.float32) -> ConvPositions:
    """The convolutional position embedding of SOURCE (a wav2vec2, HuBERT, UniSpeech(-SAT),
    Data2Vec-Audio, SEW or OmniASR-audio checkpoint, or a composite model with such a tower).

    Only the position convolution's tensors are read.

    Raises:
      CheckpointError: SOURCE holds no such embedding, or as :func:`read_conv_positions`.

    Example::

        conv = load_conv_positions("path/to/wav2vec2-base")
        conv.kernel.shape        # (1, 128, 48, 768)
    """
    with open_checkpoint(source) as ckpt:
        config, config_path = ckpt.config, ckpt.config_path
    # the model's own config, then every tower's sub-config (an audio_config, a speech encoder-decoder's encoder)
    parts = [config] + [v for v in config.values() if isinstance(v, Mapping) and isinstance(v.get("model_type"), str)]
    rows = [(row, part) for part in parts for row in CONV_POSITION_FAMILIES.values() if _serves(row, part)]
    found = [r for row, part in rows for r in read_conv_positions(row, part, source, config_path or source)]
    if not found:
        model_type = config.get("model_type")
        raise fail(source, "a checkpoint with a convolutional position embedding (wav2vec2 and kin)", repr(model_type))
    rec = found[0]
    kernels, biases = [], []
    with open_checkpoint(source) as ckpt:
        for keys in rec.weight_keys:
            if len(keys) == 3:
                weight = fold_weight_norm(ckpt.tensor(keys[0]), ckpt.tensor(keys[1]))
            else:
                weight = np.asarray(ckpt.tensor(keys[0]), np.float64)
            bias = np.asarray(ckpt.tensor(keys[-1]), np.float64)
            if not (np.all(np.isfinite(weight)) and np.all(np.isfinite(bias))):
                raise fail(f"{ckpt.weights_path}: {keys[-1].rsplit('.', 1)[0]}", "finite weights", "NaN or Inf")
            kernels.append(weight.transpose(2, 1, 0))
            biases.append(bias)
    return ConvPositions(rec, np.stack(kernels).astype(dtype), np.stack(biases).astype(dtype))
