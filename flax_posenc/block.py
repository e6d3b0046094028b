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

import dataclasses
import math
import warnings
from collections.abc import Mapping
from typing import Any, Literal, cast

import jax
import jax.numpy as jnp
import numpy as np

from flax_posenc import lookup, overflow
from flax_posenc.errors import PositionLimitError
from flax_posenc.limits import check_positions
from flax_posenc.sinusoid_math import LAYOUTS, Layout, check_sinusoid_options
from flax_posenc.sinusoidal import sinusoidal_encoding

PositionKind = Literal["learned", "sinusoidal", "none"]
POSITION_KINDS: tuple[str, ...] = ("learned", "sinusoidal", "none")
PositionsFrom = Literal["index", "non_padding_ids", "attention_mask"]
POSITIONS_FROM: tuple[str, ...] = ("index", "non_padding_ids", "attention_mask")

# Logical axis names on the parameters (flax partitioning metadata); map them to mesh axes
# with your own rules, e.g. (("vocab", "model"), ("embed", None)) or (("embed", "model"),).
AXES = {
    "word_embeddings": ("vocab", "embed"),
    "position_embeddings": (None, "embed"),
    "token_type_embeddings": (None, "embed"),
    "layer_norm": ("embed",),
}


def _require(condition: bool, message: str) -> None:
    if not condition:
        raise ValueError(message)


def _is_int(value) -> bool:
    """A Python integer, not a bool (``num_positions=True`` is not a one-row table)."""
    return isinstance(value, int) and not isinstance(value, bool)


def _float_dtype(dtype):
    """``None`` or a floating dtype's scalar type; ``ValueError`` naming ``dtype`` otherwise."""
    if dtype is None:
        return None
    try:
        resolved = jnp.dtype(dtype)
    except (TypeError, ValueError):
        raise ValueError(f"dtype: expected a floating dtype (float32, bfloat16, ...) or None, got {dtype!r}") from None
    if not jnp.issubdtype(resolved, jnp.floating):
        raise ValueError(f"dtype: expected a floating dtype (float32, bfloat16, ...) or None, got {resolved.name}")
    return dtype


#: flat ``TransformerInput`` argument -> :class:`PositionSpec` field; every other flat argument
#: is an :class:`InputSpec` field of the same name.
POSITION_ARGUMENTS = {
    "position": "kind",
    "dim": "dim",
    "num_positions": "num_positions",
    "position_offset": "offset",
    "base": "base",
    "layout": "layout",
    "endpoint": "endpoint",
    "on_overflow": "on_overflow",
    "position_name": "name",
}


def renamed_position_name(position_name: str, old_value: str | None, old: str) -> str:
    """``position_name``, or the value of its deprecated former keyword ``old`` (with a DeprecationWarning).

    The position modules once called it ``name`` (NNX) and ``table_name`` (Linen).

    >>> renamed_position_name("position table", None, "name")
    'position table'
    """
    if old_value is None:
        return position_name
    warnings.warn(
        f"{old}: deprecated, use position_name (the same name in error messages)", DeprecationWarning, stacklevel=3
    )
    return old_value


def _split_arguments(arguments: Mapping) -> tuple[dict, dict]:
    """Flat arguments -> (PositionSpec fields, InputSpec fields); an unknown name is a TypeError."""
    unknown = sorted(set(arguments) - SPEC_ARGUMENTS)
    if unknown:
        raise TypeError(f"InputSpec: unknown argument {unknown}, expected some of {sorted(SPEC_ARGUMENTS)}")
    position = {POSITION_ARGUMENTS[k]: v for k, v in arguments.items() if k in POSITION_ARGUMENTS}
    rest = {k: v for k, v in arguments.items() if k not in POSITION_ARGUMENTS}
    return position, rest


def _is_real(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _normalized(fields: dict) -> dict:
    """Numbers stored as floats whatever the caller typed (``embed_scale=1`` equals ``1.0`` in the spec)."""
    for key in ("embed_scale", "layer_norm_eps"):
        if key in fields:
            if isinstance(fields[key], (bool, str, bytes)):
                raise ValueError(f"{key}: expected a number, got {fields[key]!r}")
            try:
                fields[key] = float(fields[key])
            except (TypeError, ValueError):
                raise ValueError(f"{key}: expected a number, got {fields[key]!r}") from None
    return fields


@dataclasses.dataclass(frozen=True)
class PositionSpec:
    """How positions become vectors; static (hashable) so it can live in a module.

    Attributes:
      kind: ``"learned"`` (a table parameter), ``"sinusoidal"`` (no parameters) or ``"none"``.
      dim: vector width.
      num_positions: usable positions (the table's limit); for ``"sinusoidal"`` an optional
        limit (``None``: any int32 position).
      offset: reserved leading rows of a learned table (2 for RoBERTa/OPT/BART).
      base, layout, endpoint: the sinusoidal convention (see :mod:`flax_posenc.sinusoidal`).
      on_overflow: deprecated (a DeprecationWarning): the policy for traced positions is a run-time
        choice, the modules' ``on_overflow`` attribute and the functions' ``on_overflow`` argument
        (see :mod:`flax_posenc.overflow`). When given here it is the default of
        :func:`encode_positions` and :func:`transformer_input` for this spec; it is not part of
        the spec's equality or hash and is never written to files (:meth:`InputSpec.to_dict`).
      name: the table's name in error messages (the modules' ``position_name`` argument).

    RoBERTa's table: 514 rows, of which the first 2 are reserved (the padding row is row 1):

    >>> spec = PositionSpec("learned", dim=768, num_positions=512, offset=2)
    >>> spec.rows, spec.table_shape
    (514, (514, 768))
    """

    kind: PositionKind = "learned"
    dim: int = 0
    num_positions: int | None = None
    offset: int = 0
    base: float = 10000.0
    layout: Layout = "interleaved"
    endpoint: bool = False
    on_overflow: overflow.OverflowPolicy | None = dataclasses.field(default=None, compare=False)
    name: str = "position table"

    def __post_init__(self):
        _require(self.kind in POSITION_KINDS, f"position: expected one of {POSITION_KINDS}, got {self.kind!r}")
        _require(_is_int(self.dim) and self.dim > 0, f"dim: expected a positive integer, got {self.dim!r}")
        if self.kind == "learned":
            _require(
                _is_int(self.num_positions) and self.num_positions > 0,
                f"num_positions: a learned table needs a positive integer, got {self.num_positions!r}",
            )
        elif self.num_positions is not None:
            _require(
                _is_int(self.num_positions) and self.num_positions > 0,
                f"num_positions: expected a positive integer or None, got {self.num_positions!r}",
            )
        _require(
            _is_int(self.offset) and self.offset >= 0,
            f"offset: expected a non-negative integer, got {self.offset!r}",
        )
        _require(self.layout in LAYOUTS, f"layout: expected one of {LAYOUTS}, got {self.layout!r}")
        if self.on_overflow is not None:
            overflow.check_policy(self.on_overflow)
            warnings.warn(
                "PositionSpec(on_overflow=...): deprecated, the policy is not part of the spec; pass on_overflow "
                "to the module or to encode_positions/transformer_input",
                DeprecationWarning,
                stacklevel=3,
            )
        if self.kind == "sinusoidal":
            check_sinusoid_options(self.dim, self.base, self.layout)

    @property
    def rows(self) -> int:
        """Rows of the learned table: reserved rows plus usable positions."""
        return self.offset + (self.num_positions or 0)

    @property
    def table_shape(self) -> tuple[int, int]:
        return (self.rows, self.dim)


def policy_of(spec: PositionSpec, on_overflow: overflow.OverflowPolicy | None = None) -> overflow.OverflowPolicy:
    """The overflow policy in force: ``on_overflow``, else the spec's deprecated one, else ``"error"``.

    >>> policy_of(PositionSpec(dim=2, num_positions=4)), policy_of(PositionSpec(dim=2, num_positions=4), "clip")
    ('error', 'clip')
    """
    if on_overflow is None:
        on_overflow = spec.on_overflow or "error"
    overflow.check_policy(on_overflow)
    return on_overflow


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


@dataclasses.dataclass(frozen=True)
class InputSpec:
    """Static description of a transformer input block (see :func:`transformer_input`).

    Attributes:
      vocab_size: rows of the token embedding.
      position: how positions are encoded (:class:`PositionSpec`).
      positions_from: how default positions are counted: ``"index"`` (``start, start+1, ...``),
        ``"non_padding_ids"`` (RoBERTa/MPNet: skip tokens equal to ``pad_token_id``) or
        ``"attention_mask"`` (OPT: skip tokens whose mask is 0).
      pad_token_id: padding id, needed for ``"non_padding_ids"``.
      embed_scale: multiplies token embeddings (``sqrt(dim)`` in Vaswani et al. and BART-likes).
      type_vocab_size: rows of the token-type (segment) embedding; 0 for none.
      layer_norm: LayerNorm after the sum (BERT, RoBERTa, BART).
      layer_norm_eps: its epsilon.
      dtype: computation and output dtype (``None``: the word table's dtype).

    >>> spec = InputSpec(30522, PositionSpec(dim=384, num_positions=512), type_vocab_size=2, layer_norm=True)
    >>> spec.dim, spec.param_shapes()["token_type_embeddings"]
    (384, (2, 384))
    """

    vocab_size: int
    position: PositionSpec
    positions_from: PositionsFrom = "index"
    pad_token_id: int | None = None
    embed_scale: float = 1.0
    type_vocab_size: int = 0
    layer_norm: bool = False
    layer_norm_eps: float = 1e-12
    dtype: jnp.dtype | None = None

    def __post_init__(self):
        _require(
            _is_int(self.vocab_size) and self.vocab_size > 0,
            f"vocab_size: expected a positive integer, got {self.vocab_size!r}",
        )
        _require(
            self.positions_from in POSITIONS_FROM,
            f"positions_from: expected one of {POSITIONS_FROM}, got {self.positions_from!r}",
        )
        if self.positions_from == "non_padding_ids":
            _require(
                self.pad_token_id is not None,
                "pad_token_id: positions_from='non_padding_ids' needs the padding id, got None",
            )
        _require(
            self.pad_token_id is None or _is_int(self.pad_token_id),
            f"pad_token_id: expected an integer or None, got {self.pad_token_id!r}",
        )
        if self.positions_from != "index" and self.position.kind == "learned":
            _require(
                self.position.offset >= 1,
                f"offset: positions_from={self.positions_from!r} sends padding to row offset-1, "
                f"so a learned table needs offset >= 1, got {self.position.offset}",
            )
        _require(
            _is_int(self.type_vocab_size) and self.type_vocab_size >= 0,
            f"type_vocab_size: expected a non-negative integer, got {self.type_vocab_size!r}",
        )
        _require(
            _is_real(self.embed_scale) and math.isfinite(self.embed_scale),
            f"embed_scale: expected a finite number, got {self.embed_scale!r}",
        )
        _require(
            _is_real(self.layer_norm_eps) and math.isfinite(self.layer_norm_eps) and self.layer_norm_eps >= 0,
            f"layer_norm_eps: expected a finite non-negative number, got {self.layer_norm_eps!r}",
        )
        _require(isinstance(self.layer_norm, bool), f"layer_norm: expected True or False, got {self.layer_norm!r}")
        _float_dtype(self.dtype)

    @classmethod
    def from_arguments(cls, vocab_size: int, dim: int, **arguments) -> InputSpec:
        """The spec of a ``TransformerInput`` from its flat constructor arguments (NNX and Linen).

        The one place flat arguments become a spec. ``arguments`` are this class's fields
        (``positions_from``, ``pad_token_id``, ``embed_scale``, ``type_vocab_size``,
        ``layer_norm``, ``layer_norm_eps``, ``dtype``) and the position's, under their flat names
        (:data:`POSITION_ARGUMENTS`: ``num_positions``, ``position``, ``position_offset``,
        ``base``, ``layout``, ``endpoint``, ``on_overflow``, ``position_name``); defaults are the
        fields' defaults. Unknown names raise ``TypeError``.

        >>> spec = InputSpec.from_arguments(100, 16, num_positions=32, position_offset=2, layer_norm=True)
        >>> spec.position.num_positions, spec.position.offset, spec.layer_norm
        (32, 2, True)
        """
        position, rest = _split_arguments(arguments)
        return cls(vocab_size, PositionSpec(dim=dim, **position), **_normalized(rest))

    @classmethod
    def of(cls, spec: InputSpec | int | None = None, dim: int | None = None, /, **arguments) -> InputSpec:
        """``spec`` itself, or the spec of flat arguments (see :meth:`from_arguments`).

        What a ``TransformerInput`` does with its leading arguments: ``of(spec)`` or
        ``of(vocab_size, dim, **flat)``; a spec together with flat arguments is a ``TypeError``.

        >>> spec = InputSpec.of(100, 16, num_positions=32)
        >>> InputSpec.of(spec) is spec
        True
        """
        if isinstance(spec, InputSpec):
            _split_arguments(arguments)  # an unknown name is named as such
            if dim is not None or arguments:
                given = (["dim"] if dim is not None else []) + sorted(arguments)
                raise TypeError(
                    f"TransformerInput: expected an InputSpec or flat arguments (vocab_size, dim, ...), "
                    f"found both: a spec and {given}"
                )
            return spec
        for name, value in (("vocab_size", spec), ("dim", dim)):
            if value is not None:
                if name in arguments:
                    raise TypeError(f"TransformerInput: got {name} twice, as a positional and as a keyword argument")
                arguments[name] = value
        return cls.from_arguments(**arguments)

    def replace(self, **arguments) -> InputSpec:
        """A copy with some flat arguments changed (the names of :meth:`from_arguments`).

        >>> spec = InputSpec.from_arguments(100, 16, num_positions=32)
        >>> spec.replace(position_name="wpe", dtype=None).position.name
        'wpe'
        """
        position, rest = _split_arguments(arguments)
        if position:
            rest["position"] = dataclasses.replace(self.position, **position)
        return dataclasses.replace(self, **_normalized(rest))

    def to_dict(self) -> dict:
        """Plain Python values (the ``.msgpack`` format's ``spec``); :meth:`from_dict` inverts it.

        >>> spec = InputSpec.from_arguments(100, 16, num_positions=32, dtype=jnp.bfloat16)
        >>> d = spec.to_dict(); d["dtype"], d["position"]["num_positions"]
        ('bfloat16', 32)
        >>> back = InputSpec.from_dict(d); back == spec, hash(back) == hash(spec)
        (True, True)
        """
        out = dataclasses.asdict(self)
        del out["position"]["on_overflow"]  # a run-time policy, not written to files
        out["dtype"] = None if self.dtype is None else jnp.dtype(self.dtype).name
        return out

    @classmethod
    def from_dict(cls, data: Mapping) -> InputSpec:
        """The spec of :meth:`to_dict`'s output.

        An ``on_overflow`` in ``position`` (older files kept the policy in the spec)
        is ignored: the policy is the loading module's (its ``on_overflow`` argument).

        Raises:
          TypeError: unknown or missing fields; ValueError: invalid values (as the constructor).
        """
        data = dict(data)
        position = data.pop("position", None)
        if not isinstance(position, Mapping):
            raise TypeError(f"position: expected a mapping of PositionSpec fields, got {type(position).__name__}")
        position = {k: v for k, v in position.items() if k != "on_overflow"}  # old files: a policy, ignored
        dtype = _float_dtype(data.pop("dtype", None))
        dtype = None if dtype is None else jnp.dtype(dtype).type  # the scalar type: equal and hashed as jnp.float32
        return cls(position=PositionSpec(**position), dtype=dtype, **data)

    @property
    def dim(self) -> int:
        return self.position.dim

    def param_shapes(self) -> dict:
        """Shapes of every parameter, by name (nested like the parameter trees)."""
        shapes: dict[str, Any] = {"word_embeddings": (self.vocab_size, self.dim)}
        if self.position.kind == "learned":
            shapes["position_embeddings"] = self.position.table_shape
        if self.type_vocab_size:
            shapes["token_type_embeddings"] = (self.type_vocab_size, self.dim)
        if self.layer_norm:
            shapes["layer_norm"] = {"scale": (self.dim,), "bias": (self.dim,)}
        return shapes


#: every flat argument name :meth:`InputSpec.from_arguments` takes.
SPEC_ARGUMENTS: frozenset[str] = frozenset(POSITION_ARGUMENTS) | {
    f.name for f in dataclasses.fields(InputSpec) if f.name != "position"
}


def split_spec_arguments(arguments: Mapping) -> tuple[dict, dict]:
    """``(flat spec arguments, everything else)``: how the shells sort ``from_pretrained`` overrides.

    ``on_overflow`` is the module's (a run-time policy, not part of the spec).

    >>> split_spec_arguments({"position_name": "wpe", "on_overflow": "clip", "dropout_rate": 0.1})
    ({'position_name': 'wpe'}, {'on_overflow': 'clip', 'dropout_rate': 0.1})
    """
    spec = {k: v for k, v in arguments.items() if k in SPEC_ARGUMENTS and k != "on_overflow"}
    return spec, {k: v for k, v in arguments.items() if k not in spec}


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
    value = jnp.asarray(value)
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
    input_ids = jnp.asarray(input_ids)
    if not jnp.issubdtype(input_ids.dtype, jnp.integer) or input_ids.ndim < 1:
        raise TypeError(
            f"input_ids: expected an integer array of shape (..., seq_len), "
            f"got dtype {input_ids.dtype} and shape {tuple(input_ids.shape)}"
        )
    position_ids = _like_input_ids("position_ids", position_ids, input_ids)
    token_type_ids = _like_input_ids("token_type_ids", token_type_ids, input_ids)
    # The user's policy governs every table: word ids, positions and token types alike.
    policy = policy_of(spec.position, on_overflow)
    word = params["word_embeddings"]
    dtype = spec.dtype or word.dtype
    words = overflow.Limit(word.shape[0], name="word embedding table", unit="id", argument="input_ids")
    x = lookup.lookup_rows(word, input_ids, words, policy).astype(dtype)
    if spec.embed_scale != 1.0:
        x = x * jnp.asarray(spec.embed_scale, dtype)

    pos = spec.position
    position_policy = policy
    if pos.kind != "none":
        table = params.get("position_embeddings")
        padding = None
        if position_ids is None:
            position_ids, bounds = _default_positions(spec, input_ids, attention_mask, start)
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
                pos, table, length=input_ids.shape[-1], start=start, dtype=dtype, on_overflow=position_policy
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
    query = jnp.asarray(query)
    if query.shape[-1:] != word_embeddings.shape[-1:]:
        raise ValueError(
            f"query: expected last axis {word_embeddings.shape[-1]} (dim), found shape {tuple(query.shape)}"
        )
    dtype = spec.dtype or jnp.promote_types(query.dtype, word_embeddings.dtype)
    return jnp.dot(query.astype(dtype), word_embeddings.astype(dtype).T)


__all__ = [
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
