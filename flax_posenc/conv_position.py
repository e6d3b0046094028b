"""wav2vec2-style convolutional position embeddings on device: the functional core (pure jax).

:func:`conv_positions` is what transformers' ``*PositionalConvEmbedding`` module returns for
hidden states ``(batch, frames, dim)``: a grouped 1-D convolution padded by ``kernel_size // 2``
frames at both ends (stride ``spec.stride``), ``spec.trim`` frames cut from the end (1 for an even
kernel), a parameter-free LayerNorm per layer where the spec says so (Data2Vec-Audio), then the
activation; stacked ``spec.num_layers`` times. :func:`add_conv_positions` adds it as the model's
encoder does (SEW, SEW-D: to the hidden states average-pooled by the stride, both cut to the
shorter). The spec and the weight norm are numpy: :mod:`flax_posenc.conv_position_config`.

Nothing limits the number of frames: every frame count with at least one output frame works,
and the shapes are checked while tracing (one ``ValueError`` line naming the argument, under
``jax.jit`` too, at no run-time cost).

>>> import jax.numpy as jnp
>>> from flax_posenc.conv_position_config import ConvPositionSpec
>>> spec = ConvPositionSpec(dim=4, kernel_size=4, groups=2)
>>> kernel, bias = jnp.ones(spec.kernel_shape), jnp.zeros(spec.bias_shape)
>>> conv_positions(jnp.ones((1, 6, 4)), kernel, bias, spec).shape
(1, 6, 4)
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from flax_posenc.conv_position_config import ConvPositionSpec

__all__ = ["CONV_POSITION_AXES", "add_conv_positions", "conv_positions"]

#: Logical axes of the parameters of ``ConvPositionalEmbedding`` (NNX and Linen): ``kernel``
#: ``(layers, kernel_size, dim // groups, dim)`` and ``bias`` ``(layers, dim)``.
CONV_POSITION_AXES = {"kernel": (None, None, None, "embed"), "bias": (None, "embed")}

_ACTIVATIONS = {
    "gelu": lambda x: jax.nn.gelu(x, approximate=False),
    "gelu_new": lambda x: jax.nn.gelu(x, approximate=True),
    "gelu_pytorch_tanh": lambda x: jax.nn.gelu(x, approximate=True),
    "relu": jax.nn.relu,
    "silu": jax.nn.silu,
    "swish": jax.nn.silu,
}


def _check(hidden: jax.Array, kernel: jax.Array, bias: jax.Array, spec: ConvPositionSpec) -> None:
    if hidden.ndim not in (2, 3) or hidden.shape[-1] != spec.dim:
        raise ValueError(
            f"hidden: expected (batch, frames, {spec.dim}) or (frames, {spec.dim}) for the {spec.name}, "
            f"found {tuple(hidden.shape)}"
        )
    if tuple(kernel.shape) != spec.kernel_shape:
        raise ValueError(f"kernel: expected shape {spec.kernel_shape} for the {spec.name}, found {tuple(kernel.shape)}")
    if tuple(bias.shape) != spec.bias_shape:
        raise ValueError(f"bias: expected shape {spec.bias_shape} for the {spec.name}, found {tuple(bias.shape)}")
    frames = hidden.shape[-2]
    if spec.output_frames(frames) < 1:
        least = next(n for n in range(1, spec.kernel_size * spec.num_layers + 2) if spec.output_frames(n) >= 1)
        raise ValueError(f"hidden: expected at least {least} frames for the {spec.name}, found {frames}")


def conv_positions(
    hidden: jax.typing.ArrayLike,
    kernel: jax.typing.ArrayLike,
    bias: jax.typing.ArrayLike,
    spec: ConvPositionSpec,
    *,
    precision: jax.lax.PrecisionLike = jax.lax.Precision.HIGHEST,
) -> jax.Array:
    """The position term of a wav2vec2-style model: ``pos_conv_embed(hidden)``.

    Args:
      hidden: ``(batch, frames, dim)`` (or ``(frames, dim)``): the feature projection's output.
      kernel: ``(num_layers, kernel_size, dim // groups, dim)``: per layer, torch's
        ``(dim, dim // groups, kernel_size)`` weight (weight norm folded:
        :func:`~flax_posenc.conv_position_config.fold_weight_norm`) transposed ``(2, 1, 0)``.
      bias: ``(num_layers, dim)``.
      spec: a :class:`~flax_posenc.conv_position_config.ConvPositionSpec`.
      precision: of the convolution (``HIGHEST``: float32 products on TPU/GPU too).

    Returns:
      ``(batch, spec.output_frames(frames), dim)`` (``frames`` at stride 1), in the dtype of
      ``hidden`` and the parameters combined.

    Raises:
      ValueError: while tracing, ``hidden`` not ``(..., frames, dim)``, parameters of other
        shapes, or too few frames for one output frame (one line naming the argument).

    >>> from flax_posenc.conv_position_config import ConvPositionSpec
    >>> spec = ConvPositionSpec(dim=2, kernel_size=3, activation="relu")  # frame t sums frames t-1..t+1
    >>> conv_positions(jnp.arange(8.0).reshape(4, 2), jnp.ones(spec.kernel_shape), jnp.zeros((1, 2)), spec)[:, 0]
    Array([ 6., 15., 27., 22.], dtype=float32)
    """
    h, kernel, bias = jnp.asarray(hidden), jnp.asarray(kernel), jnp.asarray(bias)
    _check(h, kernel, bias, spec)
    single = h.ndim == 2
    x = h[None] if single else h
    dtype = jnp.result_type(x.dtype, kernel.dtype, bias.dtype)
    x = x.astype(dtype)
    pad = spec.kernel_size // 2
    activation = _ACTIVATIONS[spec.activation]
    for layer in range(spec.num_layers):
        x = jax.lax.conv_general_dilated(
            x,
            kernel[layer].astype(dtype),
            window_strides=(spec.stride,),
            padding=[(pad, pad)],
            dimension_numbers=("NWC", "WIO", "NWC"),
            feature_group_count=spec.groups,
            precision=precision,
        ) + bias[layer].astype(dtype)
        if spec.trim:
            x = x[:, : x.shape[1] - spec.trim]
        if spec.layer_norm:
            mean = jnp.mean(x, axis=-1, keepdims=True)
            centred = x - mean
            x = centred * jax.lax.rsqrt(jnp.mean(centred * centred, axis=-1, keepdims=True) + 1e-5)
        x = activation(x)
    return x[0] if single else x


def add_conv_positions(
    hidden: jax.typing.ArrayLike, kernel: jax.typing.ArrayLike, bias: jax.typing.ArrayLike, spec: ConvPositionSpec
) -> jax.Array:
    """``hidden`` with its position term added, as the model's encoder adds it.

    At stride 1: ``hidden + conv_positions(hidden, ...)``. At a stride ``s`` (SEW, SEW-D: the
    ``squeeze_factor``): the hidden states average-pooled over ``s`` frames (the last incomplete
    group dropped, as ``nn.AvgPool1d``), plus the position term, both cut to the shorter.
    Shapes and errors as :func:`conv_positions`.

    >>> from flax_posenc.conv_position_config import ConvPositionSpec
    >>> spec = ConvPositionSpec(dim=2, kernel_size=4, stride=2)
    >>> add_conv_positions(jnp.ones((1, 7, 2)), jnp.zeros(spec.kernel_shape), jnp.zeros((1, 2)), spec).shape
    (1, 3, 2)
    """
    h = jnp.asarray(hidden)
    positions = conv_positions(h, kernel, bias, spec)
    if spec.stride == 1:
        return h + positions
    s = spec.stride
    frames = h.shape[-2] // s
    pooled = jnp.mean(h[..., : frames * s, :].reshape(*h.shape[:-2], frames, s, h.shape[-1]), axis=-2)
    n = min(frames, positions.shape[-2])
    return pooled[..., :n, :] + positions[..., :n, :]
