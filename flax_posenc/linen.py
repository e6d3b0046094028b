"""Flax Linen modules: the names of :mod:`flax_posenc.nnx`, the same numbers.

Thin shells over :mod:`flax_posenc.block`; parameters carry logical axis names
(``nn.with_logical_partitioning``), so ``nn.get_partition_spec`` and
``nn.logical_to_mesh_sharding`` work with your rules. As in NNX, a module is built from its flat
arguments, as ``nn.Embed(num_embeddings, features)`` is: ``LearnedPositionalEmbedding(1024, 768)``
(the same as ``LearnedPositionalEmbedding.from_arguments(1024, 768)``) builds its spec inside, and
``LearnedPositionalEmbedding(spec)`` keeps a spec you built.

How: a module's first field is ``spec``, which holds the spec, or the first flat argument before
``__post_init__`` builds the spec of it; the other flat arguments are ``dataclasses.InitVar``
fields (``None``: left out), so they reach ``__post_init__`` and are not stored: a module holds its
spec and its module fields only, and ``clone``, ``nn.scan``/``nn.vmap`` and equality see those.

>>> import jax, jax.numpy as jnp
>>> import flax_posenc as fp
>>> block = fp.linen.TransformerInput.from_arguments(100, 16, num_positions=32)
>>> ids = jnp.zeros((2, 8), jnp.int32)
>>> variables = block.init(jax.random.key(0), ids)
>>> block.apply(variables, ids).shape
(2, 8, 16)
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from dataclasses import InitVar
from typing import Any, cast

import jax
import jax.numpy as jnp
from flax import linen as nn

from flax_posenc import block, shells
from flax_posenc.alibi_config import AlibiConfig
from flax_posenc.bbox import bbox_embedding
from flax_posenc.bbox_config import BboxSpec
from flax_posenc.block import AXES, InputSpec, PositionSpec
from flax_posenc.bounds import check_bound
from flax_posenc.conv_position import CONV_POSITION_AXES
from flax_posenc.conv_position_config import ConvPositionSpec
from flax_posenc.conversion.layer_rope import rope_for_layer
from flax_posenc.detr import detr_learned_embedding, detr_sine_embedding
from flax_posenc.detr_config import LEARNED_DETR_ROWS, MAX_FEATURE_SIDE, DetrSineConfig
from flax_posenc.extend import ExtendMethod, extend_input
from flax_posenc.grid_config import GridSpec
from flax_posenc.overflow import OverflowPolicy, check_policy
from flax_posenc.pretrained import device_array, load_pretrained
from flax_posenc.relative_bias import RELATIVE_BIAS_AXES, bias_of
from flax_posenc.relative_bias_config import RelativeBiasSpec
from flax_posenc.rope_config import RopeConfig
from flax_posenc.sinusoid_math import Layout
from flax_posenc.vision_rope_config import VisionRopeConfig

default_embed_init = nn.initializers.normal(stddev=0.02)


def _param(module: nn.Module, name: str, init, shape, dtype, axes=None):
    return module.param(name, nn.with_logical_partitioning(init, axes or AXES[name]), shape, dtype)


class _SpecModule(nn.Module):
    """A Linen module built from its spec or from its flat arguments (see the module docstring).

    A subclass declares ``spec`` as its first field, its flat arguments as ``InitVar`` fields
    (``None`` by default: left out) and :meth:`_spec_of`, which turns the first field and the flat
    arguments into the spec (through :func:`~flax_posenc.shells.resolve_spec`).
    """

    def __post_init__(self, *flat: Any) -> None:
        if flat:  # Linen calls it again, without them, when a parent adopts this module: the spec stands
            names = _flat_argument_names(type(self))
            object.__setattr__(self, "spec", self._spec_of(dict(zip(names, flat, strict=True))))
        super().__post_init__()

    def _spec_of(self, flat: dict[str, Any]) -> Any:
        raise NotImplementedError


def _flat_argument_names(cls: Any) -> tuple[str, ...]:
    """The names of ``cls``'s ``InitVar`` fields, in ``__init__``'s order: those of
    ``__dataclass_fields__`` that ``dataclasses.fields`` leaves out (a shell module declares no ``ClassVar``)."""
    fields = {f.name for f in dataclasses.fields(cls)}
    return tuple(name for name in vars(cls)["__dataclass_fields__"] if name not in fields)


def _reads_spec(**attributes: str):
    """Class decorator: ``module.NAME`` reads ``module.spec.ATTRIBUTE`` for each ``NAME="ATTRIBUTE"``.

    A flat argument's ``InitVar`` leaves its default (``None``) as a class attribute of its name;
    this replaces it by the property (``module.dim``, ``module.grid``, ...), and removes the
    class attribute of every other ``InitVar`` (``module.offset`` is not an attribute).
    """

    def attach(cls):
        fields = {f.name for f in dataclasses.fields(cls)}
        for name in cls.__dataclass_fields__:
            if name not in fields and name not in attributes and name in vars(cls):
                delattr(cls, name)
        for name, attribute in attributes.items():
            path = attribute.split(".")

            def read(self, path=path):
                value = self.spec
                for part in path:
                    value = getattr(value, part)
                return value

            setattr(cls, name, property(read, doc=f"``spec.{attribute}``."))
        return cls

    return attach


class _PositionShell(_SpecModule):
    """What the two Linen position modules share: the spec (its kind and the policy checked once) and the call."""

    _kind = ""
    spec: PositionSpec | int | None = None  # a PositionSpec once built (the first flat argument before)

    def _position_spec(self, build, flat_names: str, flat: dict[str, Any]) -> PositionSpec:
        module = type(self).__name__
        spec = shells.resolve_spec(module, PositionSpec, flat_names, self.spec, build, **flat)
        check_policy(cast(Any, self).on_overflow)  # once, at construction (a field of the subclasses)
        return shells.check_kind(spec, self._kind, module)

    def _table(self, spec: PositionSpec) -> jax.Array | None:
        return None

    @nn.compact
    def __call__(
        self,
        positions: jax.typing.ArrayLike | None = None,
        *,
        length: int | None = None,
        start: int | jax.Array = 0,
        on_overflow: OverflowPolicy | None = None,
    ) -> jax.Array:
        """Vectors for ``positions`` or for ``length`` positions from ``start`` (see the NNX module)."""
        fields: Any = self  # dtype and on_overflow are fields of the subclasses
        policy = on_overflow or fields.on_overflow
        spec = cast(PositionSpec, self.spec)
        table = self._table(spec)
        return block.encode_positions(
            spec, table, positions, length=length, start=start, dtype=fields.dtype, on_overflow=policy
        )


@_reads_spec(dim="dim", num_positions="num_positions")
class SinusoidalPositionalEncoding(_PositionShell):
    """Vaswani et al.'s fixed encoding; no parameters (see the NNX module of the same name).

    The flat call ``SinusoidalPositionalEncoding(dim, num_positions=..., base=..., layout=...,
    endpoint=..., position_name=...)`` (the NNX arguments; ``table_name``: ``position_name``'s
    deprecated former keyword) builds the field ``spec``, a :class:`~flax_posenc.block.PositionSpec`
    of kind ``"sinusoidal"``; ``SinusoidalPositionalEncoding(spec)`` keeps one.

    >>> SinusoidalPositionalEncoding(512).apply({}, length=128).shape
    (128, 512)
    """

    _kind = "sinusoidal"
    dtype: jax.typing.DTypeLike = jnp.float32
    on_overflow: OverflowPolicy = "error"
    dim: InitVar[int | None] = None  # the flat arguments (spec holds the first: dim)
    num_positions: InitVar[int | None] = None
    base: InitVar[float | None] = None
    layout: InitVar[Layout | None] = None
    endpoint: InitVar[bool | None] = None
    position_name: InitVar[str | None] = None
    table_name: InitVar[str | None] = None

    def _spec_of(self, flat: dict[str, Any]) -> PositionSpec:
        return self._position_spec(shells.sinusoidal_spec, "dim, ...", flat)

    @classmethod
    def from_arguments(
        cls,
        dim: int,
        *,
        num_positions: int | None = None,
        base: float = 10000.0,
        layout: Layout = "interleaved",
        endpoint: bool = False,
        position_name: str = "sinusoidal encoding",
        table_name: str | None = None,
        **fields: Any,
    ) -> SinusoidalPositionalEncoding:
        """The encoding of the spec's flat arguments (``table_name``: ``position_name``'s deprecated
        former keyword) and the module's fields (``dtype``, ``on_overflow``, ``parent``, ``name``).

        >>> SinusoidalPositionalEncoding.from_arguments(512, num_positions=1024).num_positions
        1024
        """
        return cls(
            dim,
            num_positions=num_positions,
            base=base,
            layout=layout,
            endpoint=endpoint,
            position_name=position_name,
            table_name=table_name,
            **fields,
        )


@_reads_spec(dim="dim", num_positions="num_positions")
class LearnedPositionalEmbedding(_PositionShell):
    """A learned absolute position table (see the NNX module of the same name).

    The flat call ``LearnedPositionalEmbedding(num_positions, dim, offset=..., position_name=...)``
    (``table_name``: ``position_name``'s deprecated former keyword) builds the field ``spec``, a
    :class:`~flax_posenc.block.PositionSpec` of kind ``"learned"``; ``LearnedPositionalEmbedding(spec)``
    keeps one. The parameter is ``embedding``, shape ``(offset + num_positions, dim)``.

    >>> import jax
    >>> wpe = LearnedPositionalEmbedding(1024, 768)
    >>> wpe.apply(wpe.init(jax.random.key(0), length=4), length=4).shape
    (4, 768)
    >>> from flax_posenc.block import PositionSpec
    >>> wpe == LearnedPositionalEmbedding(PositionSpec("learned", dim=768, num_positions=1024))
    True
    """

    _kind = "learned"
    dim: InitVar[int | None] = None  # the flat arguments (spec holds the first: num_positions)
    dtype: jax.typing.DTypeLike | None = None
    param_dtype: jax.typing.DTypeLike = jnp.float32
    embedding_init: nn.initializers.Initializer = default_embed_init
    on_overflow: OverflowPolicy = "error"
    num_positions: InitVar[int | None] = None
    offset: InitVar[int | None] = None
    position_name: InitVar[str | None] = None
    table_name: InitVar[str | None] = None

    def _spec_of(self, flat: dict[str, Any]) -> PositionSpec:
        return self._position_spec(shells.learned_spec, "num_positions, dim, ...", flat)

    @classmethod
    def from_arguments(
        cls,
        num_positions: int,
        dim: int,
        *,
        offset: int = 0,
        position_name: str = "position table",
        table_name: str | None = None,
        **fields: Any,
    ) -> LearnedPositionalEmbedding:
        """The table of the spec's flat arguments (``table_name``: ``position_name``'s deprecated
        former keyword) and the module's fields (``dtype``, ``param_dtype``, ``embedding_init``,
        ``on_overflow``, ``parent``, ``name``).

        >>> LearnedPositionalEmbedding.from_arguments(1024, 768, offset=2).spec.rows
        1026
        """
        return cls(num_positions, dim, offset=offset, position_name=position_name, table_name=table_name, **fields)

    def _table(self, spec: PositionSpec) -> jax.Array:
        shape, axes = spec.table_shape, AXES["position_embeddings"]
        return _param(self, "embedding", self.embedding_init, shape, self.param_dtype, axes)


class _LayerNormParams(nn.Module):
    dim: int
    param_dtype: jax.typing.DTypeLike

    @nn.compact
    def __call__(self):
        axes = AXES["layer_norm"]
        return {
            "scale": _param(self, "scale", nn.initializers.ones, (self.dim,), self.param_dtype, axes),
            "bias": _param(self, "bias", nn.initializers.zeros, (self.dim,), self.param_dtype, axes),
        }


@_reads_spec(vocab_size="vocab_size", dim="dim", num_positions="position.num_positions")
class TransformerInput(_SpecModule):
    """Token embedding + position (+ token types, LayerNorm, dropout).

    The Linen twin of :class:`flax_posenc.nnx.TransformerInput`: the field ``spec`` (an
    :class:`~flax_posenc.block.InputSpec`) says what the block computes; parameters have the
    same names and shapes, and identical parameters give identical outputs. Build it from the
    spec's flat arguments, ``TransformerInput(vocab_size, dim, num_positions=..., ...)`` (the NNX
    names; the same as :meth:`from_arguments`), or from a spec, ``TransformerInput(spec)``.

    Dropout uses the ``"dropout"`` RNG collection: ``apply(..., rngs={"dropout": key})``; it
    is on when ``deterministic=False`` is given to the call or, failing that, set as a field
    (Linen's ``merge_param`` idiom); by default the block is deterministic (inference).
    ``apply(variables, hidden, method="attend")`` is the tied output head. The field
    ``on_overflow`` (the policy for traced ids past a table, a call's overriding it): ``None``
    (the default) means ``"error"``, or the policy of a spec built with the deprecated
    ``PositionSpec(on_overflow=)``; any other value than the three policies is a ``ValueError`` at
    construction.

    >>> import jax, jax.numpy as jnp
    >>> from flax_posenc.block import InputSpec
    >>> spec = InputSpec.from_arguments(100, 16, num_positions=32, layer_norm=True)
    >>> block = TransformerInput(spec, dropout_rate=0.1)
    >>> block == TransformerInput.from_arguments(100, 16, num_positions=32, layer_norm=True, dropout_rate=0.1)
    True
    >>> ids = jnp.zeros((2, 8), jnp.int32)
    >>> block.apply(block.init(jax.random.key(0), ids), ids).shape
    (2, 8, 16)
    """

    spec: InputSpec | int | None = None  # an InputSpec once built (the first flat argument before)
    dim: InitVar[int | None] = None  # the flat arguments (InputSpec.from_arguments's; spec holds vocab_size)
    dropout_rate: float = 0.0
    deterministic: bool | None = None
    param_dtype: jax.typing.DTypeLike = jnp.float32
    embedding_init: nn.initializers.Initializer = default_embed_init
    on_overflow: OverflowPolicy | None = None  # None: "error" (or a deprecated spec-held policy)
    vocab_size: InitVar[int | None] = None
    num_positions: InitVar[int | None] = None
    position: InitVar[str | None] = None
    position_offset: InitVar[int | None] = None
    positions_from: InitVar[str | None] = None
    pad_token_id: InitVar[int | None] = None
    embed_scale: InitVar[float | None] = None
    type_vocab_size: InitVar[int | None] = None
    layer_norm: InitVar[bool | None] = None
    layer_norm_eps: InitVar[float | None] = None
    dtype: InitVar[Any] = None
    base: InitVar[float | None] = None
    layout: InitVar[Layout | None] = None
    endpoint: InitVar[bool | None] = None
    position_name: InitVar[str | None] = None

    def _spec_of(self, flat: dict[str, Any]) -> InputSpec:
        if self.on_overflow is not None:
            check_policy(self.on_overflow)  # once, at construction
        return InputSpec.of(self.spec, flat.pop("dim"), **{k: v for k, v in flat.items() if v is not None})

    @classmethod
    def from_arguments(
        cls, vocab_size: int | None = None, dim: int | None = None, /, **arguments: Any
    ) -> TransformerInput:
        """A block from the spec's flat arguments and the module's fields, sorted by name.

        ``arguments`` are module fields (``dropout_rate``, ``deterministic``, ``param_dtype``,
        ``embedding_init``, ``on_overflow``, ``parent``, ``name``) or flat spec arguments
        (:meth:`InputSpec.from_arguments <flax_posenc.block.InputSpec.from_arguments>`).

        >>> TransformerInput.from_arguments(100, 16, num_positions=32, dropout_rate=0.1).spec.position.num_positions
        32
        """
        module = {k: v for k, v in arguments.items() if k in _MODULE_FIELDS}
        spec = InputSpec.of(vocab_size, dim, **{k: v for k, v in arguments.items() if k not in _MODULE_FIELDS})
        return cls(spec, **module)

    @nn.compact
    def __call__(
        self,
        input_ids: jax.typing.ArrayLike,
        *,
        token_type_ids: jax.typing.ArrayLike | None = None,
        position_ids: jax.typing.ArrayLike | None = None,
        attention_mask: jax.typing.ArrayLike | None = None,
        start: int | jax.Array = 0,
        deterministic: bool | None = None,
        on_overflow: OverflowPolicy | None = None,
    ) -> jax.Array:
        spec = cast(InputSpec, self.spec)
        params = {}
        for name, shape in spec.param_shapes().items():
            if name == "layer_norm":
                params[name] = _LayerNormParams(spec.dim, self.param_dtype, name="layer_norm")()
            else:
                params[name] = _param(self, name, self.embedding_init, shape, self.param_dtype)
        x = block.transformer_input(
            spec,
            params,
            input_ids,
            token_type_ids=token_type_ids,
            position_ids=position_ids,
            attention_mask=attention_mask,
            start=start,
            on_overflow=on_overflow or self.on_overflow,
        )
        deterministic = next((d for d in (deterministic, self.deterministic) if d is not None), True)
        return nn.Dropout(self.dropout_rate)(x, deterministic=deterministic or self.dropout_rate == 0)

    def attend(self, query: jax.typing.ArrayLike) -> jax.Array:
        """Logits ``query @ word_embeddings.T`` (tied head): ``apply(variables, h, method="attend")``."""
        word = nn.unbox(self.variables["params"]["word_embeddings"])
        return block.attend(cast(InputSpec, self.spec), word, query)

    def extend_positions(
        self, variables: Mapping[str, Any], num_positions: int, *, method: ExtendMethod = "tile"
    ) -> tuple[TransformerInput, dict[str, Any]]:
        """``(module, variables)`` whose learned table holds ``num_positions`` positions.

        A shell over :func:`flax_posenc.extend.extend_input`, the Linen counterpart of
        :meth:`flax_posenc.nnx.TransformerInput.extend_positions`; ``variables`` is not changed.
        """
        params = nn.unbox(variables)["params"]
        old = params["position_embeddings"]
        spec, params = extend_input(cast(InputSpec, self.spec), params, num_positions, method=method)
        params = {**params, "position_embeddings": jnp.asarray(params["position_embeddings"], old.dtype)}
        grown = self.clone(spec=spec)
        return grown, {**variables, "params": _boxed_as_init(grown, params)}

    @classmethod
    def from_pretrained(
        cls,
        source: str | os.PathLike,
        *,
        family: str | None = None,
        dtype: jax.typing.DTypeLike | None = None,
        param_dtype: jax.typing.DTypeLike = jnp.float32,
        mesh: jax.sharding.Mesh | None = None,
        rules: Any = None,
        **overrides: Any,
    ) -> tuple[TransformerInput, dict[str, Any]]:
        """Build the input block of a Hugging Face checkpoint: ``(module, variables)``.

        ``module.apply(variables, input_ids, ...)`` equals Hugging Face's embedding output
        (see :meth:`flax_posenc.nnx.TransformerInput.from_pretrained`; ``overrides`` are module
        fields or flat spec arguments; ``mesh``/``rules`` shard the parameters by their logical axes).
        """
        spec, params = load_pretrained(source, family=family, mesh=mesh, rules=rules)
        spec_overrides, module_overrides = block.split_spec_arguments(overrides)
        spec = spec.replace(dtype=dtype, **spec_overrides)
        return _loaded(cls, spec, params, param_dtype=param_dtype, **module_overrides)


#: the Linen ``TransformerInput``'s own fields (``parent`` and ``name`` included); not spec arguments.
_MODULE_FIELDS = frozenset(f.name for f in dataclasses.fields(TransformerInput)) - {"spec"}


def _loaded(
    cls: type, spec: Any, params: dict, *example: Any, param_dtype: jax.typing.DTypeLike, **fields: Any
) -> tuple[Any, dict[str, Any]]:
    """THE bridge from loaded ``(spec, params)`` to a Linen ``(module, variables)`` (every ``from_pretrained``
    with parameters): ``cls(spec, param_dtype=..., **fields)`` and ``params`` in ``param_dtype``, boxed
    as ``init`` boxes them (:func:`_boxed_as_init`; ``example``: the arguments of one call).
    """
    module = cls(spec, param_dtype=param_dtype, **fields)
    params = jax.tree.map(lambda x: device_array(x, param_dtype), params)
    return module, {"params": _boxed_as_init(module, params, *example)}


def _boxed_as_init(module: nn.Module, params: dict, *example: Any) -> dict:
    """``params`` boxed with the logical axes exactly as ``module.init`` boxes them.

    THE bridge from loaded arrays to Linen variables (every ``from_pretrained`` with parameters):
    ``nn.get_partition_spec`` and ``nn.logical_to_mesh_sharding`` work on pretrained variables
    as on fresh ones. Shapes are checked against the module's. ``example``: arguments of one
    call (default: token ids of shape ``(1, 1)``, a ``TransformerInput``'s).
    """
    example = example or (jnp.zeros((1, 1), jnp.int32),)
    abstract = jax.eval_shape(lambda: module.init(jax.random.key(0), *example))["params"]

    def fill(box, value, path):
        expected = box.value.shape if isinstance(box, nn.meta.AxisMetadata) else box.shape
        if tuple(expected) != tuple(value.shape):
            raise ValueError(f"{'/'.join(path)}: expected shape {tuple(expected)}, found {tuple(value.shape)}")
        return box.replace_boxed(value) if isinstance(box, nn.meta.AxisMetadata) else value

    def walk(boxes, values, path=()):
        if set(boxes) != set(values):
            raise ValueError(f"parameters: expected {sorted(boxes)}, found {sorted(values)}")
        return {
            k: walk(boxes[k], values[k], path + (k,))
            if isinstance(boxes[k], dict)
            else fill(boxes[k], values[k], path + (k,))
            for k in boxes
        }

    return walk(dict(abstract), dict(params))


class RotaryEmbedding(shells.RotaryCalls, nn.Module):
    """Rotary position embedding of queries or keys (see the NNX module of the same name).

    ``config`` ``None`` is the identity (a NoPE layer): the input comes back unchanged.

    >>> import jax.numpy as jnp
    >>> import flax_posenc as fp
    >>> fp.linen.RotaryEmbedding(8).apply({}, jnp.ones((2, 4, 3, 8))).shape
    (2, 4, 3, 8)
    """

    config: RopeConfig | int | None
    on_overflow: OverflowPolicy = "error"
    seq_axis: int = -3

    def __post_init__(self):
        check_policy(self.on_overflow)  # once, at construction
        super().__post_init__()

    @classmethod
    def from_pretrained(
        cls, source: str | os.PathLike, *, layer: int = 0, on_overflow: OverflowPolicy = "error", seq_axis: int = -3
    ) -> tuple[RotaryEmbedding, dict[str, Any]]:
        """``(module, variables)`` for layer ``layer`` of a checkpoint (see the NNX ``from_pretrained``).

        RoPE has no parameters: ``variables`` is ``{}``, and ``module.apply(variables, x)`` rotates
        ``x`` as that layer does; a NoPE layer's module (``config`` ``None``) returns ``x`` unchanged.
        """
        return cls(rope_for_layer(source, layer), on_overflow=on_overflow, seq_axis=seq_axis), {}


class ALiBiBias(shells.ALiBiCalls, nn.Module):
    """ALiBi attention bias ``(..., heads, q, k)`` (see the NNX module of the same name).

    >>> import flax_posenc as fp
    >>> fp.linen.ALiBiBias(12).apply({}, 5).shape
    (12, 5, 5)
    """

    config: AlibiConfig | int
    causal: bool = True
    dtype: jax.typing.DTypeLike = jnp.float32
    on_overflow: OverflowPolicy = "error"

    def __post_init__(self):
        check_policy(self.on_overflow)  # once, at construction
        super().__post_init__()


@_reads_spec(num_heads="num_heads")
class RelativePositionBias(_SpecModule):
    """T5-style learned relative position bias ``(heads, q, k)`` (see the NNX module of the same name).

    The flat call ``RelativePositionBias(num_heads, num_buckets=..., max_distance=...,
    bidirectional=..., num_rows=...)`` builds the field ``spec``, a :class:`~flax_posenc.RelativeBiasSpec`;
    ``RelativePositionBias(spec)`` keeps one. Parameter ``embedding`` ``(num_rows, num_heads)``,
    logical axes ``(None, "heads")``.

    >>> import jax
    >>> import flax_posenc as fp
    >>> bias = RelativePositionBias(fp.RelativeBiasSpec(8, fp.BucketConfig(32, 128)))
    >>> variables = bias.init(jax.random.key(0), 5, 7)
    >>> bias.apply(variables, 1, 7, query_start=6).shape
    (8, 1, 7)
    """

    spec: RelativeBiasSpec | int | None = None  # a RelativeBiasSpec once built (num_heads before)
    dtype: jax.typing.DTypeLike | None = None
    param_dtype: jax.typing.DTypeLike = jnp.float32
    embedding_init: nn.initializers.Initializer = default_embed_init
    num_heads: InitVar[int | None] = None  # the flat arguments
    num_buckets: InitVar[int | None] = None
    max_distance: InitVar[int | None] = None
    bidirectional: InitVar[bool | None] = None
    num_rows: InitVar[int | None] = None

    def _spec_of(self, flat: dict[str, Any]) -> RelativeBiasSpec:
        build, flat_names = RelativeBiasSpec.from_arguments, "num_heads, num_buckets=..., ..."
        return shells.resolve_spec("RelativePositionBias", RelativeBiasSpec, flat_names, self.spec, build, **flat)

    @classmethod
    def from_arguments(
        cls,
        num_heads: int,
        *,
        num_buckets: int = 32,
        max_distance: int = 128,
        bidirectional: bool = True,
        num_rows: int | None = None,
        **fields: Any,
    ) -> RelativePositionBias:
        """The bias of the spec's flat arguments and the module's fields (``dtype``, ``param_dtype``,
        ``embedding_init``, ``parent``, ``name``).

        >>> RelativePositionBias.from_arguments(8, num_buckets=32, bidirectional=False).spec.buckets.bidirectional
        False
        """
        return cls(
            num_heads,
            num_buckets=num_buckets,
            max_distance=max_distance,
            bidirectional=bidirectional,
            num_rows=num_rows,
            **fields,
        )

    @nn.compact
    def __call__(self, query_len: int, key_len: int, *, query_start: int | jax.Array = 0) -> jax.Array:
        spec = cast(RelativeBiasSpec, self.spec)
        table = _param(self, "embedding", self.embedding_init, spec.table_shape, self.param_dtype, RELATIVE_BIAS_AXES)
        return bias_of(spec.buckets, table, query_len, key_len, query_start=query_start, dtype=self.dtype)

    @classmethod
    def from_pretrained(
        cls,
        source: str | os.PathLike,
        *,
        stack: str = "encoder",
        layer: int = 0,
        dtype: jax.typing.DTypeLike | None = None,
        param_dtype: jax.typing.DTypeLike = jnp.float32,
    ) -> tuple[RelativePositionBias, dict[str, Any]]:
        """``(module, variables)`` for a checkpoint's ``stack``/``layer`` (see the NNX ``from_pretrained``)."""
        spec, params = shells.relative_bias_source(source, stack, layer)
        return _loaded(cls, spec, params, 1, 1, param_dtype=param_dtype, dtype=dtype)


@_reads_spec(
    grid="grid",
    dim="dim",
    prefix_tokens="prefix_tokens",
    patch_size="patch_size",
    convention="convention",
    position_name="name",
)
class PatchPositionalEmbedding(_SpecModule):
    """A vision transformer's learned 2-D position grid (see the NNX module of the same name).

    The flat call ``PatchPositionalEmbedding(grid, dim, prefix_tokens=..., patch_size=...,
    convention=..., position_name=...)`` builds the field ``spec``, a :class:`~flax_posenc.GridSpec`;
    ``PatchPositionalEmbedding(spec)`` keeps one. The parameter is ``embedding``,
    ``(prefix_tokens + gh * gw, dim)``, logical axes ``(None, "embed")``; :meth:`from_pretrained`
    returns ``(module, variables)``.

    >>> import jax, jax.numpy as jnp
    >>> import flax_posenc as fp
    >>> pos = PatchPositionalEmbedding(fp.GridSpec((2, 3), 8), interpolate=True)
    >>> variables = pos.init(jax.random.key(0), jnp.zeros((1, 7, 8)))
    >>> pos.apply(variables, jnp.zeros((1, 17, 8))).shape      # a 4 x 4 grid, resized
    (1, 17, 8)
    """

    spec: GridSpec | Any = None  # a GridSpec once built (the grid before)
    dim: InitVar[int | None] = None  # the flat arguments
    interpolate: bool = False
    param_dtype: jax.typing.DTypeLike = jnp.float32
    embedding_init: nn.initializers.Initializer = default_embed_init
    grid: InitVar[Any] = None
    prefix_tokens: InitVar[int | None] = None
    patch_size: InitVar[Any] = None
    convention: InitVar[str | None] = None
    position_name: InitVar[str | None] = None

    def _spec_of(self, flat: dict[str, Any]) -> GridSpec:
        build, flat_names = GridSpec.from_arguments, "grid, dim, ..."
        return shells.resolve_spec("PatchPositionalEmbedding", GridSpec, flat_names, self.spec, build, **flat)

    @classmethod
    def from_arguments(
        cls,
        grid: Any,
        dim: int,
        *,
        prefix_tokens: int = 1,
        patch_size: Any = None,
        convention: str = "torch_bicubic",
        position_name: str = "position grid",
        **fields: Any,
    ) -> PatchPositionalEmbedding:
        """The grid of the spec's flat arguments (:meth:`GridSpec.from_arguments
        <flax_posenc.GridSpec.from_arguments>`) and the module's fields (``interpolate``,
        ``param_dtype``, ``embedding_init``, ``parent``, ``name``).

        >>> PatchPositionalEmbedding.from_arguments(14, 768, patch_size=16).spec.rows
        197
        """
        return cls(
            grid,
            dim,
            prefix_tokens=prefix_tokens,
            patch_size=patch_size,
            convention=convention,
            position_name=position_name,
            **fields,
        )

    @nn.compact
    def __call__(self, x: jax.Array, *, grid=None, image_size=None, interpolate: bool | None = None) -> jax.Array:
        spec = cast(GridSpec, self.spec)
        table = _param(
            self, "embedding", self.embedding_init, spec.table_shape, self.param_dtype, AXES["position_embeddings"]
        )
        interpolate = self.interpolate if interpolate is None else interpolate
        return shells.add_grid(spec, table, x, grid, image_size, interpolate)

    @classmethod
    def from_pretrained(
        cls,
        source: str | os.PathLike,
        *,
        interpolate: bool = False,
        convention: str | None = None,
        param_dtype: jax.typing.DTypeLike = jnp.float32,
    ) -> tuple[PatchPositionalEmbedding, dict[str, Any]]:
        """``(module, variables)`` for the position grid of a vision checkpoint (see the NNX twin)."""
        spec, params = shells.grid_source(source, convention)
        x = jnp.zeros((1, *spec.table_shape), param_dtype)
        return _loaded(cls, spec, params, x, param_dtype=param_dtype, interpolate=interpolate)


class DetrSinePositionEmbedding(nn.Module):
    """The Linen twin of :class:`flax_posenc.nnx.DetrSinePositionEmbedding` (no parameters).

    >>> import jax, jax.numpy as jnp
    >>> import flax_posenc as fp
    >>> pos = DetrSinePositionEmbedding(fp.DetrSineConfig(16))
    >>> pos.apply({}, jnp.ones((2, 5, 7), bool)).shape
    (2, 32, 5, 7)
    """

    config: DetrSineConfig
    dtype: jax.typing.DTypeLike = jnp.float32

    def __call__(self, mask: jax.typing.ArrayLike) -> jax.Array:
        return detr_sine_embedding(mask, self.config, dtype=self.dtype)


class DetrLearnedPositionEmbedding(nn.Module):
    """The Linen twin of :class:`flax_posenc.nnx.DetrLearnedPositionEmbedding`: parameters
    ``row_embeddings`` and ``column_embeddings`` ``(num_rows, num_pos_feats)``, axes ``(None, "embed")``.

    >>> import jax, jax.numpy as jnp
    >>> pos = DetrLearnedPositionEmbedding(8)
    >>> variables = pos.init(jax.random.key(0), jnp.ones((1, 3, 4), bool))
    >>> pos.apply(variables, jnp.ones((1, 3, 4), bool)).shape
    (1, 16, 3, 4)
    """

    num_pos_feats: int
    num_rows: int = LEARNED_DETR_ROWS
    param_dtype: jax.typing.DTypeLike = jnp.float32
    embedding_init: Any = nn.initializers.uniform(1.0)

    @nn.compact
    def __call__(self, mask: jax.typing.ArrayLike) -> jax.Array:
        shape = (check_bound("num_rows", self.num_rows, MAX_FEATURE_SIDE), self.num_pos_feats)
        axes = AXES["position_embeddings"]
        rows = _param(self, "row_embeddings", self.embedding_init, shape, self.param_dtype, axes)
        columns = _param(self, "column_embeddings", self.embedding_init, shape, self.param_dtype, axes)
        return detr_learned_embedding(mask, rows, columns)


class ConvPositionalEmbedding(nn.Module):
    """A wav2vec2-style convolutional position embedding (see the NNX module of the same name).

    The field ``spec`` is a :class:`~flax_posenc.ConvPositionSpec`; parameters ``kernel``
    ``(num_layers, kernel_size, dim // groups, dim)`` and ``bias`` ``(num_layers, dim)``;
    :meth:`from_pretrained` returns ``(module, variables)``.

    >>> import jax, jax.numpy as jnp
    >>> import flax_posenc as fp
    >>> conv = ConvPositionalEmbedding(fp.ConvPositionSpec(16, 4, groups=2))
    >>> x = jnp.ones((1, 10, 16))
    >>> conv.apply(conv.init(jax.random.key(0), x), x).shape
    (1, 10, 16)
    """

    spec: ConvPositionSpec
    dtype: jax.typing.DTypeLike | None = None
    param_dtype: jax.typing.DTypeLike = jnp.float32
    kernel_init: nn.initializers.Initializer = shells.conv_position_init

    @nn.compact
    def __call__(self, hidden: jax.Array, *, add: bool = False) -> jax.Array:
        spec = self.spec
        kernel = _param(
            self, "kernel", self.kernel_init, spec.kernel_shape, self.param_dtype, CONV_POSITION_AXES["kernel"]
        )
        bias = _param(
            self, "bias", nn.initializers.zeros, spec.bias_shape, self.param_dtype, CONV_POSITION_AXES["bias"]
        )
        return shells.call_conv_positions(spec, kernel, bias, hidden, add, self.dtype)

    @classmethod
    def from_pretrained(
        cls,
        source: str | os.PathLike,
        *,
        dtype: jax.typing.DTypeLike | None = None,
        param_dtype: jax.typing.DTypeLike = jnp.float32,
    ) -> tuple[ConvPositionalEmbedding, dict[str, Any]]:
        """``(module, variables)`` of a speech checkpoint's position convolution (see the NNX ``from_pretrained``)."""
        spec, params = shells.conv_position_source(source)
        example = jnp.zeros((1, spec.kernel_size * spec.num_layers, spec.dim), jnp.float32)
        return _loaded(cls, spec, params, example, param_dtype=param_dtype, dtype=dtype)


@_reads_spec()
class BoundingBoxEmbedding(_SpecModule):
    """A document model's 2-D bounding-box tables (see the NNX module of the same name).

    The flat call ``BoundingBoxEmbedding(rows, coord_dim, shape_dim=..., combine=..., shape_clip=...,
    position_name=...)`` builds the field ``spec``, a :class:`~flax_posenc.BboxSpec`;
    ``BoundingBoxEmbedding(spec)`` keeps one. The parameters are ``x_embedding``,    ``y_embedding``, ``h_embedding``, ``w_embedding``, logical axes ``(None, "embed")``;
    :meth:`from_pretrained` returns ``(module, variables)``.

    >>> import jax, jax.numpy as jnp
    >>> import flax_posenc as fp
    >>> boxes = BoundingBoxEmbedding(fp.BboxSpec(1024, 4, 4, "concat"))
    >>> bbox = jnp.array([[[10, 20, 110, 40]]])
    >>> variables = boxes.init(jax.random.key(0), bbox)
    >>> boxes.apply(variables, bbox).shape
    (1, 1, 24)
    """

    spec: BboxSpec | int | None = None  # a BboxSpec once built (rows before)
    coord_dim: InitVar[int | None] = None  # the flat arguments
    on_overflow: OverflowPolicy = "error"
    param_dtype: jax.typing.DTypeLike = jnp.float32
    embedding_init: nn.initializers.Initializer = default_embed_init
    rows: InitVar[int | None] = None
    shape_dim: InitVar[int | None] = None
    combine: InitVar[Any] = None
    shape_clip: InitVar[int | None] = None
    position_name: InitVar[str | None] = None

    def _spec_of(self, flat: dict[str, Any]) -> BboxSpec:
        build, flat_names = BboxSpec.from_arguments, "rows, coord_dim, ..."
        return shells.resolve_spec("BoundingBoxEmbedding", BboxSpec, flat_names, self.spec, build, **flat)

    @classmethod
    def from_arguments(
        cls,
        rows: int,
        coord_dim: int,
        *,
        shape_dim: int | None = None,
        combine: Any = "sum",
        shape_clip: int | None = None,
        position_name: str = "bbox tables",
        **fields: Any,
    ) -> BoundingBoxEmbedding:
        """The module of the spec's flat arguments (:meth:`BboxSpec.from_arguments
        <flax_posenc.BboxSpec.from_arguments>`) and the module's fields; the flat call."""
        return cls(
            rows,
            coord_dim,
            shape_dim=shape_dim,
            combine=combine,
            shape_clip=shape_clip,
            position_name=position_name,
            **fields,
        )

    @nn.compact
    def __call__(self, bbox: jax.typing.ArrayLike) -> jax.Array:
        check_policy(self.on_overflow)
        axes, spec = AXES["position_embeddings"], cast(BboxSpec, self.spec)
        x, y, h, w = (
            _param(self, f"{name}_embedding", self.embedding_init, shape, self.param_dtype, axes)
            for name, shape in spec.table_shapes.items()
        )
        return bbox_embedding(bbox, x, y, h, w, spec, on_overflow=self.on_overflow)

    @classmethod
    def from_pretrained(
        cls,
        source: str | os.PathLike,
        *,
        on_overflow: OverflowPolicy = "error",
        param_dtype: jax.typing.DTypeLike = jnp.float32,
    ) -> tuple[BoundingBoxEmbedding, dict[str, Any]]:
        """``(module, variables)`` for the bounding-box tables of a document checkpoint (see the NNX twin)."""
        spec, params = shells.bbox_source(source)
        box = jnp.zeros((1, 1, 4), jnp.int32)
        return _loaded(cls, spec, params, box, param_dtype=param_dtype, on_overflow=on_overflow)


__all__: list[str] = []  # and every public module class (the last line of this file)


# ----------------------------------------------------------------------------- window bias (issue 35)
from flax_posenc.shells import window_bias_call, window_bias_source  # noqa: E402 - the block stays self-contained
from flax_posenc.window_bias_config import WindowBiasSpec  # noqa: E402
from flax_posenc.windows import WINDOW_BIAS_AXES  # noqa: E402


@_reads_spec()
class WindowRelativeBias(_SpecModule):
    """Swin's (and BEiT's) learned window relative position bias (see the NNX module of the same name).

    The flat call ``WindowRelativeBias(num_heads, window, class_token=...)`` builds the field
    ``spec``, a :class:`~flax_posenc.WindowBiasSpec`; ``WindowRelativeBias(spec)`` keeps one.
    Parameter ``embedding`` ``(rows, num_heads)``, logical axes ``(None, "heads")``.

    >>> import jax
    >>> import flax_posenc as fp
    >>> bias = WindowRelativeBias(fp.WindowBiasSpec(4, 7))
    >>> variables = bias.init(jax.random.key(0))
    >>> bias.apply(variables).shape, bias.apply(variables, 8).shape
    ((4, 49, 49), (4, 64, 64))
    """

    spec: WindowBiasSpec | int | None = None  # a WindowBiasSpec once built (num_heads before)
    window: InitVar[Any] = None  # the flat arguments
    convention: str = "timm"
    dtype: jax.typing.DTypeLike | None = None
    param_dtype: jax.typing.DTypeLike = jnp.float32
    embedding_init: nn.initializers.Initializer = default_embed_init
    num_heads: InitVar[int | None] = None
    class_token: InitVar[bool | None] = None

    def _spec_of(self, flat: dict[str, Any]) -> WindowBiasSpec:
        build, flat_names = WindowBiasSpec.from_arguments, "num_heads, window, class_token=False"
        return shells.resolve_spec("WindowRelativeBias", WindowBiasSpec, flat_names, self.spec, build, **flat)

    @classmethod
    def from_arguments(
        cls, num_heads: int, window: Any, *, class_token: bool = False, **fields: Any
    ) -> WindowRelativeBias:
        """The bias of the spec's flat arguments and the module's fields (``convention``, ``dtype``,
        ``param_dtype``, ``embedding_init``, ``parent``, ``name``).

        >>> WindowRelativeBias.from_arguments(2, 3, class_token=True).spec.table_shape
        (28, 2)
        """
        return cls(num_heads, window, class_token=class_token, **fields)

    @nn.compact
    def __call__(self, window: Any = None) -> jax.Array:
        spec = cast(WindowBiasSpec, self.spec)
        table = _param(self, "embedding", self.embedding_init, spec.table_shape, self.param_dtype, WINDOW_BIAS_AXES)
        return window_bias_call(spec, table, window, self.convention, self.dtype)

    @classmethod
    def from_pretrained(
        cls,
        source: str | os.PathLike,
        *,
        layer: int = 0,
        convention: str = "timm",
        dtype: jax.typing.DTypeLike | None = None,
        param_dtype: jax.typing.DTypeLike = jnp.float32,
    ) -> tuple[WindowRelativeBias, dict[str, Any]]:
        """``(module, variables)`` for a checkpoint's layer ``layer`` (see the NNX ``from_pretrained``)."""
        spec, params = window_bias_source(source, layer)
        return _loaded(cls, spec, params, None, param_dtype=param_dtype, convention=convention, dtype=dtype)


# ----------------------------------------------------------------------------- vision-tower RoPE (issue 35, item 2)


class VisionRotaryEmbedding(shells.VisionRotaryCalls, nn.Module):
    """A vision tower's 2-D rotary position embedding (see the NNX module of the same name).

    >>> import jax.numpy as jnp
    >>> import flax_posenc as fp
    >>> cfg = fp.VisionRopeConfig(head_dim=8)
    >>> fp.linen.VisionRotaryEmbedding(cfg).apply({}, jnp.ones((6, 2, 8)), cfg.positions([[1, 2, 3]])).shape
    (6, 2, 8)
    """

    config: VisionRopeConfig
    on_overflow: OverflowPolicy = "error"
    seq_axis: int = -3

    def __post_init__(self):
        check_policy(self.on_overflow)  # once, at construction
        if not isinstance(self.config, VisionRopeConfig):
            raise TypeError(f"config: expected a VisionRopeConfig, got {type(self.config).__name__}")
        super().__post_init__()

    @classmethod
    def from_pretrained(
        cls, source: str | os.PathLike, *, on_overflow: OverflowPolicy = "error", seq_axis: int = -3
    ) -> tuple[VisionRotaryEmbedding, dict[str, Any]]:
        """``(module, variables)`` of a checkpoint's vision-tower RoPE (see the NNX ``from_pretrained``);
        ``variables`` is ``{}`` (no parameters)."""
        return cls(shells.vision_rope_source(source), on_overflow=on_overflow, seq_axis=seq_axis), {}


__all__ += ["VisionRotaryEmbedding"]


# ----------------------------------------------------------------------------- decomposed relative positions (issue 35 item 6)
from flax_posenc.decomposed_rel_pos import decomposed_rel_pos_bias  # noqa: E402 - the block stays self-contained
from flax_posenc.rel_pos_config import DecomposedRelPosSpec  # noqa: E402

#: Logical axes of ``rel_pos_h`` / ``rel_pos_w`` (the NNX module's).
REL_POS_AXES = (None, "kv")


class DecomposedRelativePosition(nn.Module):
    """SAM/ViTDet's decomposed relative positions of one attention layer (see the NNX module of the
    same name): parameters ``rel_pos_h`` ``(2h - 1, head_dim)`` and ``rel_pos_w`` ``(2w - 1, head_dim)``.

    >>> import jax, jax.numpy as jnp
    >>> from flax_posenc.rel_pos_config import DecomposedRelPosSpec
    >>> rel = DecomposedRelativePosition(DecomposedRelPosSpec((3, 3), 8))
    >>> q = jnp.ones((2, 9, 8))
    >>> rel.apply(rel.init(jax.random.key(0), q), q).shape
    (2, 9, 9)
    """

    spec: DecomposedRelPosSpec
    dtype: jax.typing.DTypeLike | None = None
    param_dtype: jax.typing.DTypeLike = jnp.float32

    @nn.compact
    def __call__(self, query: jax.Array, q_size: Any = None, k_size: Any = None) -> jax.Array:
        shape_h, shape_w = self.spec.table_shapes
        rel_h = _param(self, "rel_pos_h", nn.initializers.zeros, shape_h, self.param_dtype, REL_POS_AXES)
        rel_w = _param(self, "rel_pos_w", nn.initializers.zeros, shape_w, self.param_dtype, REL_POS_AXES)
        q = tuple(q_size) if q_size is not None else self.spec.size
        k = tuple(k_size) if k_size is not None else q
        bias = decomposed_rel_pos_bias(query, rel_h, rel_w, q, k)
        return bias if self.dtype is None else bias.astype(self.dtype)


__all__ = sorted({*__all__, *shells.public_modules(globals(), nn.Module)})  # every public module class
