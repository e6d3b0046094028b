"""The static description of an input block: :class:`PositionSpec` and :class:`InputSpec` (numpy only).

Frozen, hashable dataclasses (they live in modules as static fields), the parameter axis names
(:data:`AXES`) and the flat-argument tables the shells share (:data:`POSITION_ARGUMENTS`,
:data:`SPEC_ARGUMENTS`). No jax or flax import: the conversion layer and the converted-file
format (:mod:`flax_posenc.conversion.converted_file`) build and read specs without a device; the
jax functions of the block (:func:`~flax_posenc.block.transformer_input`, ...) live in
:mod:`flax_posenc.block`, which re-exports every name here.

``InputSpec.dtype`` is stored as the dtype's name (``"float32"``, ``"bfloat16"``, ``None``),
whatever the caller passed (``jnp.float32``, ``np.float32``, ``"float32"``, ``np.dtype``), so
two specs of the same block are equal and hash equal; jax accepts the name wherever a dtype goes.

>>> spec = InputSpec(30522, PositionSpec(dim=384, num_positions=512), dtype=np.float32)
>>> spec.dtype, spec == InputSpec(30522, PositionSpec(dim=384, num_positions=512), dtype="float32")
('float32', True)
"""

from __future__ import annotations

import dataclasses
import math
import warnings
from collections.abc import Mapping
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

from flax_posenc.limits import OverflowPolicy, check_policy
from flax_posenc.sinusoid_math import LAYOUTS, Layout, check_sinusoid_options

__all__ = [
    "AXES",
    "POSITION_ARGUMENTS",
    "POSITION_KINDS",
    "POSITIONS_FROM",
    "SPEC_ARGUMENTS",
    "InputSpec",
    "PositionKind",
    "PositionSpec",
    "PositionsFrom",
    "dtype_name",
    "policy_of",
    "renamed_position_name",
    "split_spec_arguments",
]

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


def _dtype_of(name: str) -> np.dtype:
    """``name``'s numpy dtype; bfloat16 and the other ml_dtypes floats by their ml_dtypes type."""
    import ml_dtypes  # 0.7 s on first import: not at import time of the numpy-only floors

    extra = getattr(ml_dtypes, name, None)
    return np.dtype(extra) if isinstance(extra, type) else np.dtype(name)


def _is_float(dtype: np.dtype) -> bool:
    """float16/32/64 and ml_dtypes' floats (bfloat16, float8_*), whose numpy kind is ``"V"``."""
    if dtype.kind == "f":
        return True
    if dtype.kind != "V" or dtype.fields is not None:
        return False
    import ml_dtypes  # already imported by whoever made a bfloat16 dtype

    try:
        ml_dtypes.finfo(dtype)
    except (TypeError, ValueError):
        return False
    return True


def dtype_name(dtype: npt.DTypeLike | None) -> str | None:
    """``None``, or the name of a floating dtype (``"float32"``, ``"bfloat16"``, ...) given any
    way numpy, jax or ml_dtypes spell it; ``ValueError`` naming ``dtype`` otherwise.

    >>> dtype_name(np.float32), dtype_name("bfloat16"), dtype_name(None)
    ('float32', 'bfloat16', None)
    >>> dtype_name("int32")
    Traceback (most recent call last):
    ValueError: dtype: expected a floating dtype (float32, bfloat16, ...) or None, got int32
    """
    if dtype is None:
        return None
    try:
        resolved = _dtype_of(dtype) if isinstance(dtype, str) else np.dtype(dtype)
    except (TypeError, ValueError):
        raise ValueError(f"dtype: expected a floating dtype (float32, bfloat16, ...) or None, got {dtype!r}") from None
    if not _is_float(resolved):
        raise ValueError(f"dtype: expected a floating dtype (float32, bfloat16, ...) or None, got {resolved.name}")
    return resolved.name


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

    Every field after ``kind`` is keyword-only: the flat calls put ``num_positions`` before ``dim``
    (``LearnedPositionalEmbedding(1024, 768)``, as ``nnx.Embed(num_embeddings, features)``), so a
    positional ``PositionSpec("learned", 768, 1024)`` would read the other way round; it is refused.

    RoBERTa's table: 514 rows, of which the first 2 are reserved (the padding row is row 1):

    >>> spec = PositionSpec("learned", dim=768, num_positions=512, offset=2)
    >>> spec.rows, spec.table_shape
    (514, (514, 768))
    >>> PositionSpec("learned", 768, 512)
    Traceback (most recent call last):
    ...
    TypeError: PositionSpec: expected dim=, num_positions=, ... by keyword after the kind, found 2 more positional arguments (768, 512)
    """

    kind: PositionKind = "learned"
    _: dataclasses.KW_ONLY
    dim: int = 0
    num_positions: int | None = None
    offset: int = 0
    base: float = 10000.0
    layout: Layout = "interleaved"
    endpoint: bool = False
    on_overflow: OverflowPolicy | None = dataclasses.field(default=None, compare=False)
    name: str = "position table"

    def __new__(cls, kind: Any = "learned", *more: Any, **fields: Any) -> PositionSpec:
        if more:  # the dataclass __init__ would say "takes from 1 to 2 positional arguments"
            raise TypeError(
                f"PositionSpec: expected dim=, num_positions=, ... by keyword after the kind, "
                f"found {len(more)} more positional argument{'s' if len(more) > 1 else ''} {more}"
            )
        return super().__new__(cls)

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
            check_policy(self.on_overflow)
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


def policy_of(spec: PositionSpec, on_overflow: OverflowPolicy | None = None) -> OverflowPolicy:
    """The overflow policy in force: ``on_overflow``, else the spec's deprecated one, else ``"error"``.

    >>> policy_of(PositionSpec(dim=2, num_positions=4)), policy_of(PositionSpec(dim=2, num_positions=4), "clip")
    ('error', 'clip')
    """
    if on_overflow is None:
        on_overflow = spec.on_overflow or "error"
    check_policy(on_overflow)
    return on_overflow


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
      dtype: computation and output dtype (``None``: the word table's dtype), stored as its name
        (``"float32"``, ``"bfloat16"``) whatever spelling was passed (``jnp.float32``, ``np.float32``, ...).

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
    dtype: str | type[Any] | np.dtype | None = None  # given any way; stored as its name (a str) or None

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
        object.__setattr__(self, "dtype", dtype_name(self.dtype))  # frozen: the one normalisation

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
        """Plain Python values (a converted file's ``spec``, as JSON); :meth:`from_dict` inverts it.

        >>> spec = InputSpec.from_arguments(100, 16, num_positions=32, dtype="bfloat16")
        >>> d = spec.to_dict(); d["dtype"], d["position"]["num_positions"]
        ('bfloat16', 32)
        >>> back = InputSpec.from_dict(d); back == spec, hash(back) == hash(spec)
        (True, True)
        """
        out = dataclasses.asdict(self)
        del out["position"]["on_overflow"]  # a run-time policy, not written to files
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
        return cls(position=PositionSpec(**position), **data)

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
