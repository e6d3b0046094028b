"""What the NNX and Linen shells share: the spec contract and the calls of the parameter-free modules.

The contract: every module is built from a spec (a frozen record: :class:`~flax_posenc.block.InputSpec`,
:class:`~flax_posenc.block.PositionSpec`, :class:`~flax_posenc.RelativeBiasSpec`,
:class:`~flax_posenc.GridSpec`, :class:`~flax_posenc.RopeConfig`, :class:`~flax_posenc.AlibiConfig`)
plus its module concerns (dtypes, initializers, ``on_overflow``, ``rngs``, ...). The flat
arguments, as in ``nnx.Embed(num_embeddings, features, rngs=...)``, are first-class too:
``Module(*flat)`` and the classmethod ``Module.from_arguments(*flat)`` build the same spec.
:func:`resolve_spec` is what a constructor does with its leading arguments: a spec is kept, the
flat arguments given become one through the spec's ``from_arguments``.

:class:`RotaryCalls` and :class:`ALiBiCalls` are plain mixins (not modules): each shell's
``RotaryEmbedding`` / ``ALiBiBias`` inherits its ``__call__`` (and ``rotate_qk``) from them, so
the two frameworks' modules run the same lines over :mod:`flax_posenc.rope` and
:mod:`flax_posenc.alibi`. A module supplies the attributes named in each class; the call's
``on_overflow`` overrides the module's.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp

from flax_posenc import alibi, block, rope, vision_rope
from flax_posenc.alibi_config import AlibiConfig
from flax_posenc.bbox_config import BboxSpec
from flax_posenc.block import PositionSpec
from flax_posenc.conv_position import add_conv_positions, conv_positions
from flax_posenc.conv_position_config import ConvPositionSpec
from flax_posenc.conversion.bbox_tables import load_bbox_tables
from flax_posenc.conversion.conv_positions import load_conv_positions
from flax_posenc.conversion.grid_tables import image_grid, load_grid_table
from flax_posenc.conversion.readers import fail
from flax_posenc.conversion.relative_bias import load_relative_bias
from flax_posenc.conversion.source_record import inspect_source
from flax_posenc.grid_config import GridSpec
from flax_posenc.grids import add_grid_positions
from flax_posenc.overflow import OverflowPolicy
from flax_posenc.relative_bias_config import BucketConfig, RelativeBiasSpec
from flax_posenc.sinusoid_math import Layout
from flax_posenc.vision_rope_config import VisionRopeConfig

__all__ = [
    "ALiBiCalls",
    "RotaryCalls",
    "add_grid",
    "check_kind",
    "grid_source",
    "learned_spec",
    "public_modules",
    "relative_bias_source",
    "resolve_spec",
    "sinusoidal_spec",
]


def sinusoidal_spec(
    dim: int,
    *,
    num_positions: int | None = None,
    base: float = 10000.0,
    layout: Layout = "interleaved",
    endpoint: bool = False,
    position_name: str = "sinusoidal encoding",
    name: str | None = None,
    table_name: str | None = None,
) -> PositionSpec:
    """The ``PositionSpec`` of the flat arguments of ``SinusoidalPositionalEncoding`` (NNX and Linen;
    ``name`` and ``table_name``: ``position_name``'s deprecated former keywords in NNX and Linen)."""
    position_name = block.renamed_position_name(position_name, name, "name")
    position_name = block.renamed_position_name(position_name, table_name, "table_name")
    return PositionSpec(
        "sinusoidal",
        dim=dim,
        num_positions=num_positions,
        base=base,
        layout=layout,
        endpoint=endpoint,
        name=position_name,
    )


def learned_spec(
    num_positions: int,
    dim: int,
    *,
    offset: int = 0,
    position_name: str = "position table",
    name: str | None = None,
    table_name: str | None = None,
) -> PositionSpec:
    """The ``PositionSpec`` of the flat arguments of ``LearnedPositionalEmbedding`` (NNX and Linen;
    ``name`` and ``table_name``: ``position_name``'s deprecated former keywords in NNX and Linen)."""
    position_name = block.renamed_position_name(position_name, name, "name")
    position_name = block.renamed_position_name(position_name, table_name, "table_name")
    return PositionSpec("learned", dim=dim, num_positions=num_positions, offset=offset, name=position_name)


def relative_bias_source(source: str | os.PathLike, stack: str, layer: int) -> tuple[RelativeBiasSpec, dict]:
    """``(spec, params)`` of a checkpoint's relative bias (NNX and Linen load through this)."""
    tab = load_relative_bias(source, stack=stack, layer=layer)
    rows, heads = tab.weights.shape
    spec = RelativeBiasSpec(heads, BucketConfig(tab.num_buckets, tab.max_distance, tab.bidirectional), rows)
    return spec, {"embedding": tab.weights}


def grid_source(source: str | os.PathLike, convention: str | None) -> tuple[GridSpec, dict]:
    """``(spec, params)`` of a vision checkpoint's position grid (NNX and Linen load through this)."""
    table = load_grid_table(source)
    spec = GridSpec(
        table.grid,
        table.dim,
        table.prefix_tokens,
        table.patch_size,
        convention or table.convention,
        f"{table.family} position grid ({table.key})",
    )
    return spec, {"embedding": table.weights}


#: The initial kernel of a ``ConvPositionalEmbedding`` (NNX and Linen): fan-in scaled normal over
#: ``kernel_size * dim // groups`` inputs per output channel, as a grouped convolution's.
conv_position_init = jax.nn.initializers.variance_scaling(
    1.0, "fan_in", "normal", in_axis=(1, 2), out_axis=3, batch_axis=0
)


def conv_position_source(source: str | os.PathLike) -> tuple[ConvPositionSpec, dict]:
    """``(spec, params)`` of a speech checkpoint's convolutional position embedding (NNX and Linen load through this)."""
    loaded = load_conv_positions(source)
    return loaded.spec, loaded.params()


def call_conv_positions(
    spec: ConvPositionSpec, kernel: jax.Array, bias: jax.Array, hidden: jax.Array, add: bool, dtype: Any
) -> jax.Array:
    """The call of both ``ConvPositionalEmbedding`` shells: the position term, or ``hidden`` with it added."""
    if dtype is not None:
        hidden, kernel, bias = (jnp.asarray(a, dtype) for a in (hidden, kernel, bias))
    return (add_conv_positions if add else conv_positions)(hidden, kernel, bias, spec)


def add_grid(spec: GridSpec, table: jax.Array, x: jax.Array, grid, image_size, interpolate: bool) -> jax.Array:
    """The call of both ``PatchPositionalEmbedding`` shells: ``x + positions``."""
    if image_size is not None:
        if spec.patch_size is None:
            raise ValueError("image_size: this module has no patch_size; pass grid=(gh, gw)")
        grid = image_grid(image_size, spec.patch_size)
    return add_grid_positions(
        x,
        table,
        prefix_tokens=spec.prefix_tokens,
        trained_grid=spec.grid,
        grid=grid,
        interpolate=interpolate,
        convention=spec.convention,
        name=spec.name,
    )


def public_modules(namespace: dict[str, Any], base: type) -> list[str]:
    """The public ``base`` subclasses a shell file defines, sorted: its ``__all__`` (with whatever
    else it lists), so that a new module class is listed where it is written.

    >>> from flax import nnx
    >>> from flax_posenc import nnx as shell
    >>> "TransformerInput" in public_modules(vars(shell), nnx.Module)
    True
    """
    return sorted(
        name
        for name, value in namespace.items()
        if not name.startswith("_")
        and isinstance(value, type)
        and issubclass(value, base)
        and value.__module__ == namespace["__name__"]
    )


def check_kind(spec: Any, kind: str, module: str) -> Any:
    """``spec`` if its ``kind`` is ``kind``; else a one-line ``ValueError`` naming both.

    >>> from flax_posenc.block import PositionSpec
    >>> check_kind(PositionSpec("sinusoidal", dim=8), "learned", "LearnedPositionalEmbedding")
    Traceback (most recent call last):
    ...
    ValueError: spec: expected a PositionSpec of kind 'learned' (LearnedPositionalEmbedding), found kind 'sinusoidal'
    """
    if spec.kind != kind:
        raise ValueError(
            f"spec: expected a {type(spec).__name__} of kind {kind!r} ({module}), found kind {spec.kind!r}"
        )
    return spec


def resolve_spec(
    module: str, spec_type: type, flat_names: str, first: Any, build: Callable[..., Any], **flat: Any
) -> Any:
    """A module's spec from its leading arguments: what every NNX and Linen constructor does with them.

    ``first`` is the module's first argument: a ``spec_type`` is the spec, kept as it is; anything
    else is the first flat argument (``None``: left out, as when the flat arguments come by keyword).
    ``flat`` are the other flat arguments by name, ``None`` where left out (their default). The flat
    arguments given become the spec through ``build`` (the spec's ``from_arguments``); ``flat_names``
    spells the flat call in messages.

    >>> from flax_posenc.grid_config import GridSpec
    >>> resolve_spec("PatchPositionalEmbedding", GridSpec, "grid, dim, ...", 14, GridSpec.from_arguments, dim=8)
    GridSpec(grid=(14, 14), dim=8, prefix_tokens=1, patch_size=None, convention='torch_bicubic', name='position grid')
    >>> resolve_spec("PatchPositionalEmbedding", GridSpec, "grid, dim, ...", GridSpec(14, 8), GridSpec.from_arguments, dim=8)
    Traceback (most recent call last):
    ...
    TypeError: PatchPositionalEmbedding: expected a GridSpec or flat arguments (grid, dim, ...), found both: a spec and ['dim']

    Raises:
      TypeError: a spec together with flat arguments (their names are listed), or flat arguments
        ``build`` does not take (Python's line).
    """
    given = {name: value for name, value in flat.items() if value is not None}
    if isinstance(first, spec_type):
        if given:
            raise TypeError(
                f"{module}: expected a {spec_type.__name__} or flat arguments ({flat_names}), "
                f"found both: a spec and {sorted(given)}"
            )
        return first
    return build(**given) if first is None else build(first, **given)


class RotaryCalls:
    """``__call__`` and ``rotate_qk`` of ``RotaryEmbedding`` (attributes ``config``, ``on_overflow``, ``seq_axis``)."""

    config: Any
    on_overflow: OverflowPolicy
    seq_axis: int

    def __call__(
        self,
        x: jax.typing.ArrayLike,
        positions: jax.typing.ArrayLike | None = None,
        *,
        start: int | jax.Array = 0,
        seq_len: int | None = None,
        on_overflow: OverflowPolicy | None = None,
    ) -> jax.Array:
        """Rotate ``x`` of shape ``(..., seq, heads, head_dim)``; positions default to ``start + arange(seq)``.

        Raises :class:`~flax_posenc.PositionLimitError` for a known position past ``config.limit``
        (traced ones follow ``on_overflow``: this call's, else the module's). With ``config``
        ``None`` (NoPE), ``x`` unchanged.
        """
        if self.config is None:
            return jnp.asarray(x)
        policy = on_overflow or self.on_overflow
        return rope.apply_rope(  # coerces self.config (a head_dim in Linen) once
            x, self.config, positions, start=start, seq_len=seq_len, on_overflow=policy, seq_axis=self.seq_axis
        )

    def rotate_qk(
        self,
        q: jax.typing.ArrayLike,
        k: jax.typing.ArrayLike,
        positions: jax.typing.ArrayLike | None = None,
        *,
        start: int | jax.Array = 0,
        seq_len: int | None = None,
        on_overflow: OverflowPolicy | None = None,
    ) -> tuple[jax.Array, jax.Array]:
        """``(q, k)`` rotated at the same positions, one ``cos``/``sin`` (see :func:`flax_posenc.apply_rope_qk`).

        With ``config`` ``None`` (NoPE), ``(q, k)`` unchanged. In Linen: ``apply({}, q, k, method="rotate_qk")``.
        """
        if self.config is None:
            return jnp.asarray(q), jnp.asarray(k)
        policy = on_overflow or self.on_overflow
        return rope.apply_rope_qk(
            q, k, self.config, positions, start=start, seq_len=seq_len, on_overflow=policy, seq_axis=self.seq_axis
        )


class ALiBiCalls:
    """``__call__`` of ``ALiBiBias`` (attributes ``config``, ``causal``, ``dtype``, ``on_overflow``)."""

    config: Any
    causal: bool
    dtype: Any
    on_overflow: OverflowPolicy

    def __call__(
        self,
        query_length: int | None = None,
        key_length: int | None = None,
        *,
        query_positions: jax.typing.ArrayLike | None = None,
        key_positions: jax.typing.ArrayLike | None = None,
        on_overflow: OverflowPolicy | None = None,
    ) -> jax.Array:
        """Bias for static lengths (queries are the last keys), or for explicit positions.

        Give ``query_length`` (and optionally ``key_length``), or both ``query_positions``
        ``(..., q)`` and ``key_positions`` ``(..., k)``; returns ``(..., heads, q, k)``.
        """
        return alibi.bias_for(
            AlibiConfig.coerce(self.config),
            query_length,
            key_length,
            query_positions=query_positions,
            key_positions=key_positions,
            causal=self.causal,
            dtype=self.dtype,
            on_overflow=on_overflow or self.on_overflow,
        )


# ----------------------------------------------------------------------------- window bias (issue 35)
from flax_posenc.conversion.window_bias import load_window_bias  # noqa: E402
from flax_posenc.window_bias_config import WindowBiasSpec, window_pair  # noqa: E402
from flax_posenc.windows import resize_window_table, window_bias  # noqa: E402


def window_bias_source(source: str | os.PathLike, layer: int) -> tuple[WindowBiasSpec, dict]:
    """``(WindowBiasSpec, params)`` of layer ``layer`` of a Swin/BEiT checkpoint's window bias
    tables (NNX and Linen ``WindowRelativeBias.from_pretrained`` load through this).

    Raises:
      CheckpointError: no such table (SwinV2's MLP: use :func:`~flax_posenc.continuous_window_bias`),
        a layer out of range (one line).
    """
    record = load_window_bias(source)
    if isinstance(layer, bool) or not isinstance(layer, int) or not 0 <= layer < len(record.layers):
        raise fail("layer", f"a layer in 0..{len(record.layers) - 1} of {record.name}", repr(layer))
    found = record.layers[layer]
    if found.table is None:
        raise fail(found.key, "a window bias table (SwinV2's cpb_mlp: fp.continuous_window_bias)", "an MLP")
    spec = WindowBiasSpec(found.num_heads, found.window, found.class_token)
    return spec, {"embedding": found.table}


def window_bias_call(spec: WindowBiasSpec, table: jax.Array, window: Any, convention: str, dtype: Any) -> jax.Array:
    """The call of both ``WindowRelativeBias`` shells: the bias of ``window`` (``None``: the spec's),
    the table resized by ``convention`` when the window differs."""
    new = spec.window if window is None else window_pair(window)
    if new != spec.window:
        table = resize_window_table(table, spec.window, new, class_token=spec.class_token, convention=convention)
    return window_bias(table, new, class_token=spec.class_token, dtype=dtype)


# ----------------------------------------------------------------------------- vision-tower RoPE (issue 35, item 2)

__all__ += ["VisionRotaryCalls", "vision_rope_source"]


def vision_rope_source(source: str | os.PathLike) -> VisionRopeConfig:
    """The :class:`~flax_posenc.VisionRopeConfig` of a checkpoint's vision tower (its ``config.json``;
    no weights are read): the first ``vision_rope`` mechanism :func:`~flax_posenc.conversion.inspect_source` reports.

    Raises:
      CheckpointError: the source has no vision-tower RoPE (one line naming the kinds it has).
    """
    record = inspect_source(source)
    found = [m.record.config for m in getattr(record, "mechanisms", ()) if m.kind == "vision_rope"]
    if not found:
        kinds = ", ".join(dict.fromkeys(m.kind for m in getattr(record, "mechanisms", ()))) or "none"
        raise fail(
            source, "a checkpoint with a vision-tower RoPE (Pixtral, Qwen2/2.5-VL, DINOv3)", f"{kinds} positions"
        )
    return found[0]


class VisionRotaryCalls:
    """``__call__`` and ``rotate_qk`` of ``VisionRotaryEmbedding`` (attributes ``config``, ``on_overflow``, ``seq_axis``)."""

    config: Any
    on_overflow: OverflowPolicy
    seq_axis: int

    def __call__(
        self, x: jax.typing.ArrayLike, positions: jax.typing.ArrayLike, *, on_overflow: OverflowPolicy | None = None
    ) -> jax.Array:
        """Rotate ``x`` (``(..., tokens, heads, head_dim)``) by its patches' ``(..., patches, 2)`` positions
        (:func:`flax_posenc.apply_vision_rope`); the ``prefix_tokens`` first tokens pass unchanged."""
        return vision_rope.apply_vision_rope(
            x, self.config, positions, on_overflow=on_overflow or self.on_overflow, seq_axis=self.seq_axis
        )

    def rotate_qk(
        self,
        q: jax.typing.ArrayLike,
        k: jax.typing.ArrayLike,
        positions: jax.typing.ArrayLike,
        *,
        on_overflow: OverflowPolicy | None = None,
    ) -> tuple[jax.Array, jax.Array]:
        """``(q, k)`` rotated at the same patch positions (:func:`flax_posenc.apply_vision_rope_qk`).
        In Linen: ``apply({}, q, k, positions, method="rotate_qk")``."""
        return vision_rope.apply_vision_rope_qk(
            q, k, self.config, positions, on_overflow=on_overflow or self.on_overflow, seq_axis=self.seq_axis
        )


def bbox_source(source: str | os.PathLike) -> tuple[BboxSpec, dict]:
    """``(spec, params)`` of a document checkpoint's bounding-box tables (NNX and Linen load through this)."""
    rec = load_bbox_tables(source)
    return rec.spec, {f"{t}_embedding": w for t, w in zip("xyhw", rec.weights, strict=True)}
