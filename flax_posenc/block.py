"""The functional core of the modules: position vectors and the transformer input block.

Pure functions of a frozen, hashable spec and a dict of arrays. :mod:`flax_posenc.nnx` and
:mod:`flax_posenc.linen` only hold the parameters and call these, so both give the same numbers
for the same parameters.

Parameter names (identical in NNX and Linen, and the target of checkpoint conversion)::

    word_embeddings        (vocab_size, dim)              logical axes ("vocab", "embed")
    position_embeddings    (offset + num_positions, dim)  logical axes (None, "embed")   [learned]
    token_type_embeddings  (type_vocab_size, dim)         logical axes (None, "embed")   [if any]
    layer_norm/scale, layer_norm/bias  (dim,)             logical axes ("embed",)        [if any]

Both shells' ``TransformerInput`` are built from an :class:`InputSpec`; their flat arguments
(``TransformerInput.from_arguments(vocab_size, dim, num_positions=..., ...)``) are a convenience that
:meth:`InputSpec.from_arguments` turns into one -- the only place that knows the flat names.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, cast

import jax
import jax.numpy as jnp
import numpy as np

from flax_posenc import lookup, overflow
from flax_posenc.errors import PositionLimitError
from flax_posenc.limits import check_positions
from flax_posenc.sinusoidal import sinusoidal_encoding

# the specs live on the numpy floor (flax_posenc.spec); re-exported here, the same objects
from flax_posenc.spec import (  # noqa: F401  (re-exported: older imports name them here)
    AXES,
    POSITION_ARGUMENTS,
    POSITION_KINDS,
    POSITIONS_FROM,
    SPEC_ARGUMENTS,
    InputSpec,
    PositionKind,
    PositionsFrom,
    PositionSpec,
    policy_of,
    renamed_position_name,
    split_spec_arguments,
)


def encode_positions(
    spec: PositionSpec,
    table: jax.Array | None = None,
    positions: jax.typing.ArrayLike | None = None,
    *,
    length: int | None = None,
    start: int | jax.Array = 0,
    dtype=None,
    on_overflow: overflow.OverflowPolicy | None = None,
) -> jax.Array:
    """Position vectors for explicit ``positions`` or for ``length`` positions from ``start``.

    Exactly one of ``positions`` (an integer array, any shape) or ``length`` (a Python int)
    is given. ``on_overflow`` is the policy for traced positions past the limit
    (:mod:`flax_posenc.overflow`; default ``"error"``). With ``length`` and a static ``start`` the limit is checked at trace time and the
    vectors are a slice of the table (learned) or, for sinusoids, the float64 values rounded once
    (up to 64 KiB) or computed on device within 1e-7 of them (see :func:`sinusoidal_encoding`).

    Returns:
      ``positions.shape + (dim,)`` or ``(length, dim)``, in ``dtype`` (default: the table's
      dtype, float32 for sinusoids).

    Raises:
      PositionLimitError: a known position past ``num_positions`` (traced ones follow
        ``on_overflow``).

    >>> table = jnp.arange(8.0).reshape(4, 2)  # 4 positions of width 2
    >>> encode_positions(PositionSpec(dim=2, num_positions=4), table, length=2, start=1).tolist()
    [[2.0, 3.0], [4.0, 5.0]]
    >>> encode_positions(PositionSpec("sinusoidal", dim=2), positions=jnp.array([0])).tolist()  # [sin 0, cos 0]
    [[0.0, 1.0]]
    """
    if (positions is None) == (length is None):
        raise ValueError("give exactly one of positions (an integer array) or length (an int)")
    if spec.kind == "none":
        raise ValueError("this spec has no position encoding (kind='none')")
    on_overflow = policy_of(spec, on_overflow)
    if spec.kind == "learned":
        table = None if table is None else jnp.asarray(table)  # numpy tables (load_pretrained's) too
        if table is None or tuple(table.shape) != spec.table_shape:
            found = None if table is None else tuple(table.shape)
            raise ValueError(f"{spec.name}: expected a table of shape {spec.table_shape}, found {found}")
        common: dict[str, Any] = dict(offset=spec.offset, on_overflow=on_overflow, name=spec.name)
        if length is not None:
            out = lookup.slice_positions(table, length, start=start, **common)
        else:
            out = lookup.lookup_positions(table, cast(jax.typing.ArrayLike, positions), **common)
        return out if dtype is None else out.astype(dtype)

    dtype = jnp.float32 if dtype is None else dtype
    sinusoid: dict[str, Any] = dict(base=spec.base, layout=spec.layout, endpoint=spec.endpoint)
    if length is not None and not overflow.is_traced(start):
        start = int(start)
        if length and spec.num_positions is not None:
            check_positions(start, start + length - 1, rows=spec.num_positions, name=spec.name)
        # known positions: a small encoding is the float64 table rounded once, a long one is
        # computed on device from an iota (the program does not grow with the length)
        positions = np.arange(start, start + length, dtype=np.int64)
    elif length is not None:
        positions = lookup.sequential_positions(length, start=start)
    return sinusoidal_encoding(
        cast(jax.typing.ArrayLike, positions),  # given, or made from length above
        spec.dim,
        dtype=dtype,
        num_positions=spec.num_positions,
        on_overflow=on_overflow,
        name=spec.name,
        **sinusoid,
    )


def layer_norm(x: jax.Array, scale: jax.Array, bias: jax.Array, eps: float) -> jax.Array:
    """LayerNorm over the last axis, computed in float32 (two-pass mean/variance, as PyTorch).

    ``x``: ``(..., dim)``; ``scale``, ``bias``: ``(dim,)``; returns ``x``'s shape and dtype.

    >>> x = jnp.array([[1.0, 3.0]])  # mean 2, variance 1
    >>> layer_norm(x, jnp.ones(2), jnp.zeros(2), eps=0.0).tolist()
    [[-1.0, 1.0]]
    """
    x32 = x.astype(jnp.float32)
    mean = x32.mean(-1, keepdims=True)
    centered = x32 - mean
    var = jnp.mean(jnp.square(centered), -1, keepdims=True)
    y = centered * jax.lax.rsqrt(var + eps)
    return (y * scale.astype(jnp.float32) + bias.astype(jnp.float32)).astype(x.dtype)


def _default_positions(
    spec: InputSpec, input_ids, attention_mask, start
) -> tuple[jax.Array | None, tuple[int, int] | None]:
    """Positions counted the family's way, and their static bounds (lowest, highest)."""
    seq = input_ids.shape[-1]
    if spec.positions_from == "index":
        return None, None
    if spec.positions_from == "non_padding_ids":
        mask = input_ids != spec.pad_token_id
    else:
        mask = jnp.ones(input_ids.shape, bool) if attention_mask is None else attention_mask
        if tuple(mask.shape) != tuple(input_ids.shape):
            raise ValueError(
                f"attention_mask: expected shape {tuple(input_ids.shape)} like input_ids, found {tuple(mask.shape)}"
            )
    positions = lookup.padding_aware_positions(mask, start=start)
    bounds = None if overflow.is_traced(start) else (-1, int(start) + seq - 1)
    return positions, bounds


def _like_input_ids(name: str, value, input_ids: jax.Array) -> jax.Array | None:
    """``value`` as an integer array whose shape broadcasts to ``input_ids``' (``None`` stays ``None``)."""
    if value is None:
        return None
    value = overflow.host_or_device(value)  # host ids are checked before any cast (no wrap)
    shape = tuple(input_ids.shape)
    if not jnp.issubdtype(value.dtype, jnp.integer):
        raise TypeError(f"{name}: expected an integer array, got dtype {value.dtype}")
    try:
        fits = jnp.broadcast_shapes(tuple(value.shape), shape) == shape
    except ValueError:
        fits = False
    if not fits:
        raise ValueError(f"{name}: expected a shape that broadcasts to input_ids' {shape}, found {tuple(value.shape)}")
    return value


def transformer_input(
    spec: InputSpec,
    params: Mapping[str, jax.Array],
    input_ids: jax.typing.ArrayLike,
    *,
    token_type_ids: jax.typing.ArrayLike | None = None,
    position_ids: jax.typing.ArrayLike | None = None,
    attention_mask: jax.typing.ArrayLike | None = None,
    start: int | jax.Array = 0,
    on_overflow: overflow.OverflowPolicy | None = None,
) -> jax.Array:
    """``layer_norm(embed_scale * word[ids] + position + token_type[types])``, before dropout.

    Args:
      spec: the static description (:class:`InputSpec`).
      params: arrays named as in this module's docstring.
      input_ids: ``(..., seq_len)`` token ids.
      token_type_ids: ``(..., seq_len)`` segment ids (default: all 0, as BERT).
      position_ids: ``(..., seq_len)`` explicit positions; overrides ``positions_from``.
      attention_mask: ``(..., seq_len)``, 1 for real tokens; only ``positions_from=
        "attention_mask"`` reads it (the attention itself is not this block's business).
      start: position of the first token (tokens already decoded); static int or traced.
      on_overflow: the policy for traced ids past a table (see :mod:`flax_posenc.overflow`),
        applied alike to word ids, positions and token types; default ``"error"``.

    Returns:
      ``(..., seq_len, dim)`` in ``spec.dtype`` (default: the word table's dtype).

    Raises:
      PositionLimitError: a known position past the table (see :mod:`flax_posenc.overflow`).

    Two tokens of a 3-word vocabulary, width 2: word row + position row.

    >>> spec = InputSpec(3, PositionSpec(dim=2, num_positions=4))
    >>> params = {"word_embeddings": jnp.array([[0.0, 0.0], [10.0, 10.0], [20.0, 20.0]]),
    ...           "position_embeddings": jnp.array([[0.0, 1.0], [0.0, 2.0], [0.0, 3.0], [0.0, 4.0]])}
    >>> transformer_input(spec, params, jnp.array([[2, 1]])).tolist()
    [[[20.0, 21.0], [10.0, 12.0]]]
    >>> transformer_input(spec, params, jnp.array([[2]]), start=3).tolist()  # the 4th position
    [[[20.0, 24.0]]]
    """
    ids: Any = overflow.host_or_device(input_ids)  # host ids are checked before any cast (no wrap)
    if not jnp.issubdtype(ids.dtype, jnp.integer) or ids.ndim < 1:
        raise TypeError(
            f"input_ids: expected an integer array of shape (..., seq_len), "
            f"got dtype {ids.dtype} and shape {tuple(ids.shape)}"
        )
    position_ids = _like_input_ids("position_ids", position_ids, ids)
    token_type_ids = _like_input_ids("token_type_ids", token_type_ids, ids)
    # The user's policy governs every table: word ids, positions and token types alike.
    policy = policy_of(spec.position, on_overflow)
    # numpy parameters (load_pretrained's) are taken as JAX functions take array-likes
    params = jax.tree.map(jnp.asarray, dict(params))
    word = params["word_embeddings"]
    dtype = spec.dtype or word.dtype
    words = overflow.Limit(word.shape[0], name="word embedding table", unit="id", argument="input_ids")
    x = lookup.lookup_rows(word, ids, words, policy).astype(dtype)
    if spec.embed_scale != 1.0:
        x = x * jnp.asarray(spec.embed_scale, dtype)

    pos = spec.position
    position_policy = policy
    if pos.kind != "none":
        table = params.get("position_embeddings")
        padding = None
        if position_ids is None:
            position_ids, bounds = _default_positions(spec, ids, attention_mask, start)
            if bounds is not None:  # padding-aware positions with a static start: bounded by the shape
                if pos.kind == "learned":
                    check_positions(*bounds, rows=pos.rows, offset=pos.offset, name=pos.name)
                elif pos.num_positions is not None:
                    check_positions(0, bounds[1], rows=pos.num_positions, name=pos.name)
                position_policy = "clip"  # proven in bounds above
            if position_ids is not None and pos.kind == "sinusoidal":
                padding = position_ids < 0  # padding tokens get no sinusoid (-1 is no position)
                position_ids = jnp.maximum(position_ids, 0)
        if position_ids is None:
            vectors = encode_positions(
                pos, table, length=ids.shape[-1], start=start, dtype=dtype, on_overflow=position_policy
            )
        else:
            vectors = encode_positions(pos, table, position_ids, dtype=dtype, on_overflow=position_policy)
        if padding is not None:
            vectors = jnp.where(padding[..., None], 0, vectors)
        x = x + vectors

    if spec.type_vocab_size:
        types = params["token_type_embeddings"]
        if token_type_ids is None:
            x = x + types[0].astype(dtype)
        else:
            limit = overflow.Limit(types.shape[0], name="token type table", unit="type", argument="token_type_ids")
            x = x + lookup.lookup_rows(types, token_type_ids, limit, policy).astype(dtype)
    elif token_type_ids is not None:
        raise ValueError("token_type_ids: this block has no token-type embedding (type_vocab_size=0)")

    if spec.layer_norm:
        ln = params["layer_norm"]
        x = layer_norm(x, ln["scale"], ln["bias"], spec.layer_norm_eps)
    return x


def attend(spec: InputSpec, word_embeddings: jax.Array, query: jax.typing.ArrayLike) -> jax.Array:
    """The tied output head: ``query @ word_embeddings.T`` in ``spec.dtype`` (as ``nnx.Embed.attend``).

    Args:
      spec: the block's spec (its ``dtype``; default: the table's dtype promoted with the query's).
      word_embeddings: ``(vocab_size, dim)``.
      query: ``(..., dim)`` hidden states.

    Returns:
      ``(..., vocab_size)`` logits.

    >>> spec = InputSpec(3, PositionSpec(dim=2, num_positions=4))
    >>> attend(spec, jnp.array([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]]), jnp.array([2.0, 3.0])).tolist()
    [2.0, 3.0, 5.0]
    """
    query, word_embeddings = jnp.asarray(query), jnp.asarray(word_embeddings)
    if query.shape[-1:] != word_embeddings.shape[-1:]:
        raise ValueError(
            f"query: expected last axis {word_embeddings.shape[-1]} (dim), found shape {tuple(query.shape)}"
        )
    dtype = spec.dtype or jnp.promote_types(query.dtype, word_embeddings.dtype)
    return jnp.dot(query.astype(dtype), word_embeddings.astype(dtype).T)


__all__ = [  # the spec names are flax_posenc.spec's, re-exported
    "AXES",
    "POSITION_ARGUMENTS",
    "SPEC_ARGUMENTS",
    "attend",
    "InputSpec",
    "PositionLimitError",
    "PositionSpec",
    "encode_positions",
    "layer_norm",
    "policy_of",
    "split_spec_arguments",
    "transformer_input",
]
