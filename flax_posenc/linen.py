"""Flax Linen modules: the names of :mod:`flax_posenc.nnx`, the same numbers.

Thin shells over :mod:`flax_posenc.block`; parameters carry logical axis names
(``nn.with_logical_partitioning``), so ``nn.get_partition_spec`` and
``nn.logical_to_mesh_sharding`` work with your rules.

>>> import jax, jax.numpy as jnp
>>> import flax_posenc as fp
>>> block = fp.linen.TransformerInput(100, 16, num_positions=32)
>>> ids = jnp.zeros((2, 8), jnp.int32)
>>> variables = block.init(jax.random.key(0), ids)
>>> block.apply(variables, ids).shape
(2, 8, 16)
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
from flax import linen as nn

from flax_posenc import alibi, block, rope
from flax_posenc.alibi_config import AlibiConfig
from flax_posenc.block import AXES, InputSpec, PositionSpec
from flax_posenc.rope_config import RopeConfig

default_embed_init = nn.initializers.normal(stddev=0.02)


def _param(module: nn.Module, name: str, init, shape, dtype, axes=None):
    return module.param(name, nn.with_logical_partitioning(init, axes or AXES[name]), shape, dtype)


class SinusoidalPositionalEncoding(nn.Module):
    """Vaswani et al.'s fixed encoding; no parameters (see the NNX module of the same name).

    >>> import flax_posenc as fp
    >>> fp.linen.SinusoidalPositionalEncoding(512).apply({}, length=128).shape
    (128, 512)
    """

    dim: int
    num_positions: int | None = None
    base: float = 10000.0
    layout: str = "interleaved"
    endpoint: bool = False
    dtype: jnp.dtype = jnp.float32
    on_overflow: str = "error"
    table_name: str = "sinusoidal encoding"

    @nn.compact
    def __call__(self, positions=None, *, length: int | None = None, start=0) -> jax.Array:
        spec = PositionSpec(
            "sinusoidal",
            self.dim,
            self.num_positions,
            base=self.base,
            layout=self.layout,
            endpoint=self.endpoint,
            on_overflow=self.on_overflow,
            name=self.table_name,
        )
        return block.encode_positions(spec, None, positions, length=length, start=start, dtype=self.dtype)


class LearnedPositionalEmbedding(nn.Module):
    """A learned absolute position table (see the NNX module of the same name).

    The parameter is ``embedding``, shape ``(offset + num_positions, dim)``.
    """

    num_positions: int
    dim: int
    offset: int = 0
    dtype: jnp.dtype | None = None
    param_dtype: jnp.dtype = jnp.float32
    embedding_init: nn.initializers.Initializer = default_embed_init
    on_overflow: str = "error"
    table_name: str = "position table"

    @nn.compact
    def __call__(self, positions=None, *, length: int | None = None, start=0) -> jax.Array:
        spec = PositionSpec(
            "learned",
            self.dim,
            self.num_positions,
            offset=self.offset,
            on_overflow=self.on_overflow,
            name=self.table_name,
        )
        table = _param(
            self, "embedding", self.embedding_init, spec.table_shape, self.param_dtype, AXES["position_embeddings"]
        )
        return block.encode_positions(spec, table, positions, length=length, start=start, dtype=self.dtype)


class _LayerNormParams(nn.Module):
    dim: int
    param_dtype: jnp.dtype

    @nn.compact
    def __call__(self):
        axes = AXES["layer_norm"]
        return {
            "scale": _param(self, "scale", nn.initializers.ones, (self.dim,), self.param_dtype, axes),
            "bias": _param(self, "bias", nn.initializers.zeros, (self.dim,), self.param_dtype, axes),
        }


class TransformerInput(nn.Module):
    """Token embedding + position (+ token types, LayerNorm, dropout).

    The fields are the NNX :class:`flax_posenc.nnx.TransformerInput` arguments; parameters
    have the same names and shapes, and identical parameters give identical outputs.
    Dropout uses the ``"dropout"`` RNG collection: ``apply(..., rngs={"dropout": key})``; it
    is on when ``deterministic=False`` is given to the call or, failing that, set as a field
    (Linen's ``merge_param`` idiom); by default the block is deterministic (inference).
    ``apply(variables, hidden, method="attend")`` is the tied output head.
    """

    vocab_size: int
    dim: int
    num_positions: int | None = None
    position: str = "learned"
    position_offset: int = 0
    positions_from: str = "index"
    pad_token_id: int | None = None
    embed_scale: float = 1.0
    type_vocab_size: int = 0
    layer_norm: bool = False
    layer_norm_eps: float = 1e-12
    dropout_rate: float = 0.0
    deterministic: bool | None = None
    dtype: jnp.dtype | None = None
    param_dtype: jnp.dtype = jnp.float32
    embedding_init: nn.initializers.Initializer = default_embed_init
    base: float = 10000.0
    layout: str = "interleaved"
    endpoint: bool = False
    on_overflow: str = "error"
    position_name: str = "position table"

    @property
    def spec(self) -> InputSpec:
        fields = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        for unused in ("dropout_rate", "deterministic", "param_dtype", "embedding_init", "parent", "name"):
            fields.pop(unused, None)
        return InputSpec.from_arguments(**fields)

    @nn.compact
    def __call__(
        self,
        input_ids,
        *,
        token_type_ids=None,
        position_ids=None,
        attention_mask=None,
        start=0,
        deterministic: bool | None = None,
    ) -> jax.Array:
        spec = self.spec
        params = {}
        for name, shape in spec.param_shapes().items():
            if name == "layer_norm":
                params[name] = _LayerNormParams(self.dim, self.param_dtype, name="layer_norm")()
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
        )
        deterministic = next((d for d in (deterministic, self.deterministic) if d is not None), True)
        return nn.Dropout(self.dropout_rate)(x, deterministic=deterministic or self.dropout_rate == 0)

    def attend(self, query) -> jax.Array:
        """Logits ``query @ word_embeddings.T`` (tied head): ``apply(variables, h, method="attend")``."""
        word = nn.unbox(self.variables["params"]["word_embeddings"])
        return block.attend(self.spec, word, query)

    def extend_positions(self, variables, num_positions: int, *, method: str = "tile"):
        """``(module, variables)`` whose learned table holds ``num_positions`` positions.

        The Linen counterpart of :meth:`flax_posenc.nnx.TransformerInput.extend_positions`.
        """
        from flax_posenc.extend import extend_table

        if self.position != "learned":
            raise ValueError(
                f"extend_positions: only a learned table can be extended, this block's position is {self.position!r}"
            )
        params = dict(nn.unbox(variables)["params"])
        old = params["position_embeddings"]
        table = extend_table(np.asarray(old), num_positions, method=method, offset=self.position_offset)
        params["position_embeddings"] = jnp.asarray(table, old.dtype)
        grown = self.clone(num_positions=num_positions)
        return grown, {**variables, "params": _boxed_as_init(grown, params)}

    @classmethod
    def from_pretrained(cls, source, *, family: str | None = None, dtype=None, param_dtype=jnp.float32, **overrides):
        """Build the input block of a Hugging Face checkpoint: ``(module, variables)``.

        ``module.apply(variables, input_ids, ...)`` equals Hugging Face's embedding output
        (see :meth:`flax_posenc.nnx.TransformerInput.from_pretrained`).
        """
        from flax_posenc.pretrained import module_arguments

        kwargs, params = module_arguments(source, family=family)
        kwargs.update(overrides)
        module = cls(**kwargs, dtype=dtype, param_dtype=param_dtype)
        params = jax.tree.map(lambda x: jnp.asarray(x, param_dtype), params)
        return module, {"params": _boxed_as_init(module, params)}


def _boxed_as_init(module: TransformerInput, params: dict) -> dict:
    """``params`` boxed with the logical axes exactly as ``module.init`` boxes them.

    So ``nn.get_partition_spec`` and ``nn.logical_to_mesh_sharding`` work on pretrained
    variables as on fresh ones. Shapes are checked against the module's.
    """
    ids = jnp.zeros((1, 1), jnp.int32)
    abstract = jax.eval_shape(lambda: module.init(jax.random.key(0), ids))["params"]

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


class RotaryEmbedding(nn.Module):
    """Rotary position embedding of queries or keys (see the NNX module of the same name).

    >>> import jax.numpy as jnp
    >>> import flax_posenc as fp
    >>> fp.linen.RotaryEmbedding(8).apply({}, jnp.ones((2, 4, 3, 8))).shape
    (2, 4, 3, 8)
    """

    config: RopeConfig | int
    on_overflow: str = "error"
    seq_axis: int = -3

    @nn.compact
    def __call__(self, x, positions=None, *, start=0, seq_len: int | None = None) -> jax.Array:
        return rope.apply_rope(
            x,
            RopeConfig.coerce(self.config),
            positions,
            start=start,
            seq_len=seq_len,
            on_overflow=self.on_overflow,
            seq_axis=self.seq_axis,
        )

    def rotate_qk(self, q, k, positions=None, *, start=0, seq_len: int | None = None):
        """``(q, k)`` rotated at the same positions (``apply({}, q, k, method="rotate_qk")``)."""
        return rope.apply_rope_qk(
            q,
            k,
            RopeConfig.coerce(self.config),
            positions,
            start=start,
            seq_len=seq_len,
            on_overflow=self.on_overflow,
            seq_axis=self.seq_axis,
        )


class ALiBiBias(nn.Module):
    """ALiBi attention bias ``(..., heads, q, k)`` (see the NNX module of the same name).

    >>> import flax_posenc as fp
    >>> fp.linen.ALiBiBias(12).apply({}, 5).shape
    (12, 5, 5)
    """

    config: AlibiConfig | int
    causal: bool = True
    dtype: jnp.dtype = jnp.float32
    on_overflow: str = "error"

    @nn.compact
    def __call__(self, query_length=None, key_length=None, *, query_positions=None, key_positions=None) -> jax.Array:
        return alibi.bias_for(
            AlibiConfig.coerce(self.config),
            query_length,
            key_length,
            query_positions=query_positions,
            key_positions=key_positions,
            causal=self.causal,
            dtype=self.dtype,
            on_overflow=self.on_overflow,
        )


__all__ = [
    "ALiBiBias",
    "LearnedPositionalEmbedding",
    "RotaryEmbedding",
    "SinusoidalPositionalEncoding",
    "TransformerInput",
]


# --------------------------------------------------------------------------- relative position bias


class RelativePositionBias(nn.Module):
    """T5-style learned relative position bias ``(heads, q, k)`` (see the NNX module of the same name).

    Parameter ``embedding`` ``(num_rows or num_buckets, num_heads)``, logical axes ``(None, "heads")``.

    >>> import jax
    >>> import flax_posenc as fp
    >>> bias = fp.linen.RelativePositionBias(8)
    >>> variables = bias.init(jax.random.key(0), 5, 7)
    >>> bias.apply(variables, 1, 7, query_start=6).shape
    (8, 1, 7)
    """

    num_heads: int
    num_buckets: int = 32
    max_distance: int = 128
    bidirectional: bool = True
    num_rows: int | None = None
    dtype: jnp.dtype | None = None
    param_dtype: jnp.dtype = jnp.float32
    embedding_init: nn.initializers.Initializer = default_embed_init

    @nn.compact
    def __call__(self, query_len: int, key_len: int, *, query_start=0) -> jax.Array:
        from flax_posenc.relative_bias import RELATIVE_BIAS_AXES, relative_position_bias

        rows = self.num_buckets if self.num_rows is None else self.num_rows
        table = _param(
            self, "embedding", self.embedding_init, (rows, self.num_heads), self.param_dtype, RELATIVE_BIAS_AXES
        )
        if self.dtype is not None:
            table = table.astype(self.dtype)
        return relative_position_bias(
            table,
            query_len,
            key_len,
            query_start=query_start,
            bidirectional=self.bidirectional,
            num_buckets=self.num_buckets,
            max_distance=self.max_distance,
        )

    @classmethod
    def from_pretrained(cls, source, *, stack: str = "encoder", layer: int = 0, dtype=None, param_dtype=jnp.float32):
        """``(module, variables)`` for a checkpoint's ``stack``/``layer`` (see the NNX ``from_pretrained``)."""
        from flax_posenc.conversion.relative_bias import load_relative_bias

        tab = load_relative_bias(source, stack=stack, layer=layer)
        rows, heads = tab.weights.shape
        module = cls(
            heads,
            num_buckets=tab.num_buckets,
            max_distance=tab.max_distance,
            bidirectional=tab.bidirectional,
            num_rows=rows,
            dtype=dtype,
            param_dtype=param_dtype,
        )
        from flax_posenc.relative_bias import RELATIVE_BIAS_AXES

        table = nn.LogicallyPartitioned(
            jnp.asarray(tab.weights, param_dtype), names=RELATIVE_BIAS_AXES
        )  # boxed as init
        return module, {"params": {"embedding": table}}


__all__ += ["RelativePositionBias"]
