"""wav2vec2-style convolutional position embeddings, as data: the spec and the weight norm (numpy only).

wav2vec 2.0, HuBERT, UniSpeech(-SAT), Data2Vec-Audio, SEW and OmniASR give their transformer
encoder no table of positions: a grouped 1-D convolution over the frames of the feature encoder
(``pos_conv_embed``) computes a position term from the hidden states themselves, which the
encoder adds to them. Nothing limits the length; what matters is the convolution's receptive
field (``kernel_size`` frames, centred) and its padding: the convolution pads ``kernel_size // 2``
frames at both ends, and an even kernel yields one frame too many, which the model cuts from the
end (``*SamePadLayer``). The convolution's weight is stored weight-normed
(``torch.nn.utils.parametrizations.weight_norm(conv, dim=2)``): ``weight = g * v / ||v||``, the
norm of ``v`` over every axis but the kernel axis (``g``: ``(1, 1, kernel_size)``);
:func:`fold_weight_norm` folds it (float64) into one kernel.

:class:`ConvPositionSpec` holds what differs between the models: the width, kernel, groups, the
stride (SEW and SEW-D squeeze the frames by ``squeeze_factor`` and the position term with them),
the number of stacked convolutions (Data2Vec-Audio: ``num_conv_pos_embeddings`` layers, each
followed by a LayerNorm without parameters), the frames cut from the end, and the activation.
The device math is :func:`flax_posenc.conv_position.conv_positions`.

>>> spec = ConvPositionSpec(dim=768, kernel_size=128, groups=16)
>>> spec.trim, spec.receptive_field
(1, 128)
>>> ConvPositionSpec(dim=768, kernel_size=19, groups=16, num_layers=5, layer_norm=True).receptive_field
91
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

__all__ = ["CONV_ACTIVATIONS", "ConvPositionSpec", "fold_weight_norm"]

#: The activations the position convolutions use (transformers' ``ACT2FN`` names): ``gelu`` is
#: the exact (erf) GELU, ``gelu_new`` / ``gelu_pytorch_tanh`` its tanh approximation.
CONV_ACTIVATIONS = ("gelu", "gelu_new", "gelu_pytorch_tanh", "relu", "silu", "swish")


@dataclasses.dataclass(frozen=True)
class ConvPositionSpec:
    """The shape of a convolutional position embedding: everything but its weights.

    Attributes:
      dim: the hidden width (input and output channels).
      kernel_size: the kernel in frames (``num_conv_pos_embeddings``; Data2Vec-Audio:
        ``conv_pos_kernel_size``).
      groups: ``num_conv_pos_embedding_groups``; ``dim`` is a multiple of it.
      stride: frames per output frame (SEW/SEW-D: ``squeeze_factor``; else 1).
      num_layers: stacked convolutions (Data2Vec-Audio: ``num_conv_pos_embeddings``; else 1).
      layer_norm: a LayerNorm without parameters (eps ``1e-5``) after each convolution, before
        the activation (Data2Vec-Audio).
      trim: frames cut from the end of each convolution's output; ``None``: 1 for an even
        kernel, 0 for an odd one (``*SamePadLayer``). OmniASR always cuts 1.
      activation: one of :data:`CONV_ACTIVATIONS` (``feat_extract_activation``).
      name: what messages call it.

    Raises:
      ValueError: a size that is not a positive integer, ``dim`` not a multiple of ``groups``, a
        trim past the kernel, or an unknown activation (one line naming the field).
    """

    dim: int
    kernel_size: int
    groups: int = 1
    stride: int = 1
    num_layers: int = 1
    layer_norm: bool = False
    trim: int | None = None
    activation: str = "gelu"
    name: str = "convolutional position embedding"

    def __post_init__(self):
        for field in ("dim", "kernel_size", "groups", "stride", "num_layers"):
            value = getattr(self, field)
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
                raise ValueError(f"{field}: expected a positive integer, found {value!r}")
            object.__setattr__(self, field, int(value))
        if self.dim % self.groups:
            raise ValueError(f"groups: expected a divisor of dim {self.dim}, found {self.groups}")
        if self.trim is None:
            object.__setattr__(self, "trim", 1 if self.kernel_size % 2 == 0 else 0)
        trim = self.trim
        if isinstance(trim, bool) or not isinstance(trim, (int, np.integer)) or not 0 <= trim <= self.kernel_size // 2:
            raise ValueError(f"trim: expected an integer in 0..{self.kernel_size // 2}, found {trim!r}")
        object.__setattr__(self, "trim", int(trim))
        if self.activation not in CONV_ACTIVATIONS:
            raise ValueError(f"activation: expected one of {', '.join(CONV_ACTIVATIONS)}, found {self.activation!r}")

    @property
    def kernel_shape(self) -> tuple[int, int, int, int]:
        """``(num_layers, kernel_size, dim // groups, dim)``: the ``kernel`` parameter (Flax's
        ``(width, in / groups, out)`` per layer)."""
        return (self.num_layers, self.kernel_size, self.dim // self.groups, self.dim)

    @property
    def bias_shape(self) -> tuple[int, int]:
        """``(num_layers, dim)``: the ``bias`` parameter."""
        return (self.num_layers, self.dim)

    @property
    def left_context(self) -> int:
        """Frames before frame ``t`` (at stride 1) that output ``t`` sees: ``kernel_size // 2`` per layer."""
        return self.num_layers * (self.kernel_size // 2)

    @property
    def receptive_field(self) -> int:
        """Input frames one output frame sees: ``kernel_size`` for one layer, ``num_layers *
        (kernel_size - 1) + 1`` stacked (at stride 1)."""
        return self.num_layers * (self.kernel_size - 1) + 1

    def output_frames(self, frames: int) -> int:
        """Frames of the position term for ``frames`` input frames (``frames`` at stride 1; SEW:
        ``(frames + 2 * (k // 2) - k) // stride + 1 - trim``)."""
        n, cut = frames, int(self.trim or 0)  # trim is an int once built (None: the same-pad rule)
        for _ in range(self.num_layers):
            n = (n + 2 * (self.kernel_size // 2) - self.kernel_size) // self.stride + 1 - cut
        return n

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def fold_weight_norm(weight_g: Any, weight_v: Any, *, dim: int = 2) -> np.ndarray:
    """The convolution weight of torch's ``weight_norm(conv, dim=dim)``: ``g * v / ||v||`` (float64).

    ``weight_v``: ``(out, in / groups, kernel_size)`` (``parametrizations.weight.original1``, or the
    legacy ``weight_v``); ``weight_g``: its norm per index of axis ``dim`` (``original0`` /
    ``weight_g``: ``(1, 1, kernel_size)`` for ``dim=2``). The norm runs over every other axis, as
    ``torch._weight_norm`` computes it. Returns the ``(out, in / groups, kernel_size)`` weight.

    >>> v = np.ones((2, 1, 3)); g = np.full((1, 1, 3), 4.0)
    >>> fold_weight_norm(g, v)[:, 0, 0]
    array([2.82842712, 2.82842712])

    Raises:
      ValueError: ``weight_g``'s shape is not ``weight_v``'s with every axis but ``dim`` set to 1.
    """
    v = np.asarray(weight_v, np.float64)
    g = np.asarray(weight_g, np.float64)
    axes = tuple(a for a in range(v.ndim) if a != dim % v.ndim)
    expected = tuple(1 if a in axes else n for a, n in enumerate(v.shape))
    if g.shape != expected:
        raise ValueError(f"weight_g: expected shape {expected} (weight_v {v.shape}, dim={dim}), found {g.shape}")
    return g * v / np.sqrt(np.sum(v * v, axis=axes, keepdims=True))
