"""RoPE as data: the validated config record, its scaling types (one row each) and their float64 host math.

numpy only: shared by :mod:`flax_posenc.rope` (rotations on device) and the checkpoint reader
:mod:`flax_posenc.conversion.relative_config`; reading a ``config.json`` stays fast and
framework-free.

- :class:`RopeConfig`: head dim, ``rope_theta``, ``partial_rotary_factor``, the scaling type and
  its parameters, named exactly as Hugging Face's ``rope_parameters`` (transformers 5.x; the
  ``rope_scaling`` dict of 4.x).
- :data:`ROPE_SCALINGS`: the scaling types, one :class:`RopeScaling` row each (``default``,
  ``linear``, ``dynamic``, ``yarn``, ``llama3``, ``longrope``): the keys a type needs, its
  inverse-frequency function (the formulas of ``transformers/modeling_rope_utils.py``, in
  float64), which length its factor scales and whether its frequencies depend on the current
  length. Every other module (the device path, the reader, the reports) asks the row; adding a
  scaling type is adding a row here (see CONTRIBUTING.md).
- :func:`rope_inverse_frequencies`: the inverse frequencies (radians per position) and the
  attention scaling factor of a config.

Limits. ``max_position_embeddings`` is the length a config declares; a scaling type that
extends the context also defines a *scaled limit*, ``factor`` times its row's
:attr:`RopeScaling.trained_length`: ``factor * max_position_embeddings`` for ``linear``, and
``factor * original_max_position_embeddings`` for ``yarn``, ``llama3`` and ``longrope``.
:attr:`RopeConfig.limit` is the larger of the two. ``dynamic`` (NTK) rescales its base for any
length past ``max_position_embeddings``, so it has no limit (``None``).

>>> cfg = RopeConfig(head_dim=8, rope_theta=10000.0)
>>> inv, scale = rope_inverse_frequencies(cfg)
>>> [round(float(x), 4) for x in inv], scale
([1.0, 0.1, 0.01, 0.001], 1.0)
"""

from __future__ import annotations

import dataclasses
import math
import warnings
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any, Literal, cast

import numpy as np

from flax_posenc.bounds import MAX_HEAD_DIM, MAX_POSITIONS, check_bound

RopeLayout = Literal["half", "interleaved", "half_reversed"]
#: How rotated pairs sit in a head and which way they turn: ``"half"`` (``x[i]`` with ``x[i + r/2]``),
#: ``"interleaved"`` (``x[2i]`` with ``x[2i + 1]``), ``"half_reversed"`` (the half pairs turned by
#: minus the angle: nanochat's ``rotate_half`` is ``cat(x2, -x1)``).
ROPE_LAYOUTS: tuple[str, ...] = ("half", "interleaved", "half_reversed")

#: The Hugging Face ``rope_parameters`` keys a :class:`RopeConfig` holds (each a field of the
#: same name), with their JSON kind: ``"number"`` (a finite number), ``"count"`` (a positive
#: integer), ``"flag"`` (a boolean) or ``"factors"`` (a list of positive numbers). The
#: type checks by this table (:class:`RopeConfig`, whatever built it: the ``config.json``
#: reader passes what it read unchanged).
ROPE_PARAMETERS: Mapping[str, str] = MappingProxyType(
    {
        "rope_theta": "number",
        "partial_rotary_factor": "number",
        "factor": "number",
        "original_max_position_embeddings": "count",
        "attention_factor": "number",
        "beta_fast": "number",
        "beta_slow": "number",
        "mscale": "number",
        "mscale_all_dim": "number",
        "truncate": "flag",
        "low_freq_factor": "number",
        "high_freq_factor": "number",
        "short_factor": "factors",
        "long_factor": "factors",
    }
)

_ORIGINAL = "original_max_position_embeddings"


def _fail(message: str) -> None:
    raise ValueError(message)


class RopeFieldError(ValueError):
    """A :class:`RopeConfig` check that a ``config.json`` reader words its own way.

    ``str()`` is the one-line message of the API (``"truncate: expected true or false, got
    'yes'"``); :attr:`expected` and :attr:`found` are the phrases a reader puts after the file's
    name (``"cfg.json: expected truncate as true or false, found 'yes'"``). Validation lives in
    :class:`RopeConfig` alone; the reader only words it.
    """

    def __init__(self, message: str, expected: str, found: str):
        super().__init__(message)
        self.expected, self.found = expected, found


def _refuse(name: str, what: str, value: Any) -> None:
    """One :class:`RopeFieldError`: ``"name: expected WHAT, got VALUE"`` (a reader: ``"expected name
    as WHAT, found VALUE"``)."""
    raise RopeFieldError(f"{name}: expected {what}, got {value!r}", f"{name} as {what}", repr(value)[:80])


#: The magnitude a ``"number"`` parameter may reach (past it, products overflow): 1e6, or this.
_MAGNITUDE: Mapping[str, float] = MappingProxyType({"rope_theta": 1e12})


def _check_kinds(config: RopeConfig, *, magnitudes: bool = False) -> None:
    """Type-check the :data:`ROPE_PARAMETERS` fields of ``config`` by their kind (signs and finer
    ranges come after): the checks a ``config.json`` reader names with its file. ``magnitudes``:
    check only the numbers' bounds (the last check: a scaled limit past its bound is said first)."""
    for name, kind in ROPE_PARAMETERS.items():
        value = getattr(config, name)
        if value is None or (magnitudes and kind != "number"):
            continue
        if kind == "number":
            bound = _MAGNITUDE.get(name, 1e6)
            if (
                isinstance(value, bool)
                or not isinstance(value, (int, float, np.number))
                or not math.isfinite(value)
                or (magnitudes and abs(float(value)) > bound)
            ):
                _refuse(name, f"a finite number of magnitude at most {bound:g}", value)
        elif kind == "count":
            if not _is_int(value) or value < 1:
                _refuse(name, "a positive integer", value)
        elif kind == "flag":
            if not isinstance(value, (bool, np.bool_)):
                _refuse(name, "true or false", value)
        elif (
            not isinstance(value, (list, tuple))
            or len(value) > 1 << 16
            or not all(
                isinstance(v, (int, float, np.number)) and not isinstance(v, bool) and 0 < v < 1e6 for v in value
            )
        ):  # "factors"
            _refuse(name, "a list of positive finite numbers", value)


def rope_type_of(parameters: Mapping[str, Any], aliases: Mapping[str, str] | None = None) -> str:
    """The scaling type a ``rope_parameters`` (or 4.x ``rope_scaling``) dict names: ``rope_type``,
    else the legacy ``type``, else ``"default"``; ``aliases`` maps old spellings (Phi-3's ``su``).

    Raises:
      RopeFieldError: a ``rope_type`` or ``type`` that is not a string.

    >>> rope_type_of({"type": "linear"}), rope_type_of({}), rope_type_of({"rope_type": "su"}, {"su": "longrope"})
    ('linear', 'default', 'longrope')
    """
    for name in ("rope_type", "type"):
        if parameters.get(name) is not None and not isinstance(parameters[name], str):
            _refuse(name, "a string", parameters[name])
    kind = parameters.get("rope_type", parameters.get("type")) or "default"
    return (aliases or {}).get(kind, kind)


def _is_int(x: Any) -> bool:
    return not isinstance(x, bool) and isinstance(x, (int, np.integer))


def _positive_number(name: str, value: Any, what: str = "a finite number > 0") -> None:
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float, np.number))
        or not math.isfinite(value)
        or value <= 0
    ):
        _fail(f"{name}: expected {what}, got {value!r}")


@dataclasses.dataclass(frozen=True)
class RopeScaling:
    """One RoPE scaling type as data: a row of :data:`ROPE_SCALINGS`.

    Attributes:
      name: the ``rope_type`` value, as Hugging Face spells it.
      inverse_frequencies: ``f(config, seq_len) -> (inv_freq, attention_factor)``: float64
        ``(rotary_dim // 2,)`` radians per position and the factor multiplying ``cos``/``sin``;
        ``seq_len`` is ``None`` or the current sequence length (see
        :func:`rope_inverse_frequencies`).
      required: ``rope_parameters`` keys the type needs, beyond ``rope_theta`` and
        ``partial_rotary_factor`` (checked by :class:`RopeConfig` alone; a reader words it with its file).
      trained_length_field: the :class:`RopeConfig` field holding the length ``factor`` scales:
        the scaled limit is ``factor`` times it (``None``: no scaled limit). When it is
        ``"original_max_position_embeddings"``, that field defaults to
        ``max_position_embeddings`` and a top-level one in ``config.json`` (Phi-3) wins, as in
        transformers' ``standardize_rope_params``.
      uses_factor: whether ``factor`` means anything to the type (then it must be ``> 0``).
      factor_from_lengths: without a ``factor``, use ``max_position_embeddings /
        original_max_position_embeddings`` (YaRN, LongRoPE, as transformers derives it).
      needs_length: whether the frequencies depend on the current sequence length (traced
        positions then need ``seq_len``).
      no_limit: ``None`` (the limit is the larger of the declared and the scaled one), or why the
        type has no position limit at all: a phrase formatted with the config's fields.
      check: further validation of a config of this type (raises a one-line ``ValueError``).
      full_width: the rotation spans the whole head, ``partial_rotary_factor`` choosing how many
        of its frequencies are non-zero (``proportional``), instead of rotating a leading slice.

    >>> ROPE_SCALINGS["linear"].trained_length_field, ROPE_SCALINGS["dynamic"].needs_length
    ('max_position_embeddings', True)
    """

    name: str
    inverse_frequencies: Callable[[RopeConfig, int | None], tuple[np.ndarray, float]]
    required: tuple[str, ...] = ()
    trained_length_field: str | None = None
    uses_factor: bool = True
    factor_from_lengths: bool = False
    needs_length: bool = False
    no_limit: str | None = None
    check: Callable[[RopeConfig], None] | None = None
    full_width: bool = False

    def missing(self, parameters: Mapping[str, Any], *, max_position_embeddings: int | None = None) -> tuple[str, ...]:
        """The :attr:`required` keys that ``parameters`` lacks (or holds as ``None``).

        ``original_max_position_embeddings`` counts as present when it is the type's trained
        length and ``max_position_embeddings`` is known (it defaults to it).

        >>> ROPE_SCALINGS["llama3"].missing({"factor": 8.0}, max_position_embeddings=8192)
        ('low_freq_factor', 'high_freq_factor')
        """
        have = {k for k, v in parameters.items() if v is not None}
        if self.trained_length_field == _ORIGINAL and max_position_embeddings is not None:
            have.add(_ORIGINAL)
        return tuple(k for k in self.required if k not in have)


def scaling_of(rope_type: str) -> RopeScaling:
    """The :data:`ROPE_SCALINGS` row of ``rope_type``.

    Raises:
      ValueError: an unknown scaling type (the known ones are listed).

    >>> scaling_of("yarn").required
    ('original_max_position_embeddings',)
    >>> scaling_of("ntk")
    Traceback (most recent call last):
    ...
    ValueError: rope_type: unknown scaling type 'ntk'; known types: default, linear, dynamic, yarn, llama3, longrope, proportional
    """
    row = ROPE_SCALINGS.get(rope_type) if isinstance(rope_type, str) else None
    if row is None:
        _fail(f"rope_type: unknown scaling type {rope_type!r}; known types: {', '.join(ROPE_SCALINGS)}")
    return cast(RopeScaling, row)


@dataclasses.dataclass(frozen=True)
class RopeConfig:
    """A rotary position embedding, as Hugging Face configures it; frozen and hashable.

    Attributes:
      head_dim: width of one attention head (even).
      rope_theta: the base of the geometric frequencies (10000 for Llama 2, 500000 for
        Llama 3, 1e6 for Qwen2).
      partial_rotary_factor: fraction of ``head_dim`` that is rotated (GPT-NeoX: 0.25); the
        rotated width ``int(head_dim * factor)`` must be even. Rotated dims come first.
      rope_type: scaling scheme, a key of :data:`ROPE_SCALINGS`.
      factor: context-extension factor (``linear``, ``dynamic``, ``yarn``, ``llama3``,
        ``longrope``); ``> 0``.
      max_position_embeddings: the declared limit (positions ``0 .. limit - 1``); ``dynamic``
        scales against it.
      original_max_position_embeddings: the pre-extension training length (``yarn``,
        ``llama3``, ``longrope``; defaults to ``max_position_embeddings`` as in transformers).
      attention_factor, beta_fast, beta_slow, mscale, mscale_all_dim, truncate: YaRN's knobs
        (``attention_factor`` also for ``longrope``).
      low_freq_factor, high_freq_factor: Llama 3's smoothing band.
      short_factor, long_factor: LongRoPE's per-frequency factors (``rotary_dim // 2`` each).
      layout: how rotated pairs sit in a head: ``"half"`` (GPT-NeoX/Llama: ``x[i]`` with
        ``x[i + d/2]``) or ``"interleaved"`` (GPT-J/RoFormer: ``x[2i]`` with ``x[2i + 1]``).
      rotary_dim: rotated dims of a head, an even integer (GPT-J's ``rotary_dim``); given, it is
        kept as it is and ``partial_rotary_factor`` becomes ``rotary_dim / head_dim``; left out,
        it is ``int(head_dim * partial_rotary_factor)`` (a tolerance of 1e-9 keeps a fraction
        written as ``rotated / head_dim``, as a GGUF's is, from truncating one short), and
        ``head_dim`` for a :attr:`RopeScaling.full_width` type.
        ``x[i + d/2]``), ``"interleaved"`` (GPT-J/RoFormer: ``x[2i]`` with ``x[2i + 1]``) or
        ``"half_reversed"`` (nanochat: the half pairs turned by minus the angle).
      length_field: the name the limit's sentence gives ``max_position_embeddings`` (a GGUF
        file's ``llama.context_length``); a label only, not compared or hashed.

    Raises:
      ValueError: one line naming the field, e.g. an odd ``head_dim``, a fraction that rotates
        an odd number of dims, an unknown ``rope_type`` (the known ones are listed), a factor
        ``<= 0``, or a parameter the scaling type needs that is missing.

    >>> RopeConfig(head_dim=64, rope_type="linear", factor=4.0, max_position_embeddings=2048).limit
    8192
    >>> RopeConfig(head_dim=63)
    Traceback (most recent call last):
    ...
    ValueError: head_dim: expected a positive even integer (rotations act on pairs), got 63
    """

    head_dim: int
    rope_theta: float = 10000.0
    partial_rotary_factor: float = 1.0
    rope_type: str = "default"
    factor: float | None = None
    max_position_embeddings: int | None = None
    original_max_position_embeddings: int | None = None
    attention_factor: float | None = None
    beta_fast: float | None = None
    beta_slow: float | None = None
    mscale: float | None = None
    mscale_all_dim: float | None = None
    truncate: bool = True
    low_freq_factor: float | None = None
    high_freq_factor: float | None = None
    short_factor: tuple[float, ...] | None = None
    long_factor: tuple[float, ...] | None = None
    layout: RopeLayout = "half"
    rotary_dim: int = None  # type: ignore[assignment]  # None: from partial_rotary_factor (set at construction)
    length_field: str = dataclasses.field(default="max_position_embeddings", compare=False)

    def __post_init__(self):
        _check_kinds(self)
        for name in (k for k, kind in ROPE_PARAMETERS.items() if kind == "factors"):
            value = getattr(self, name)
            if value is not None and not isinstance(value, tuple):
                object.__setattr__(self, name, tuple(float(v) for v in value))
        if not _is_int(self.head_dim) or self.head_dim < 2 or self.head_dim % 2:
            _fail(f"head_dim: expected a positive even integer (rotations act on pairs), got {self.head_dim!r}")
        check_bound("head_dim", int(self.head_dim), MAX_HEAD_DIM, "(checked before the frequencies are allocated)")
        _positive_number("rope_theta", self.rope_theta)
        p = self.partial_rotary_factor
        if isinstance(p, bool) or not isinstance(p, (int, float, np.number)) or not 0 < p <= 1:
            _fail(f"partial_rotary_factor: expected a fraction in (0, 1], got {p!r}")
        scaling = scaling_of(self.rope_type)
        self._set_rotary_dim(scaling)
        if self.layout not in ROPE_LAYOUTS:
            _fail(f"layout: expected one of {ROPE_LAYOUTS}, got {self.layout!r}")
        for name in ("max_position_embeddings", _ORIGINAL):
            value = getattr(self, name)
            if value is not None and (not _is_int(value) or value < 1):
                _fail(f"{name}: expected a positive integer, got {value!r}")
            if value is not None:
                check_bound(name, int(value), MAX_POSITIONS, "positions")
        if (
            scaling.trained_length_field == _ORIGINAL
            and self.original_max_position_embeddings is None
            and self.max_position_embeddings is not None
        ):  # transformers' standardize_rope_params does the same
            object.__setattr__(self, _ORIGINAL, self.max_position_embeddings)
        missing = scaling.missing({k: getattr(self, k) for k in scaling.required})
        if missing:
            raise RopeFieldError(
                f"{missing[0]}: rope_type {self.rope_type!r} needs it (a Hugging Face rope_parameters key), got None",
                f"{', '.join(missing)} in rope_parameters (rope_type {self.rope_type!r} needs {', '.join(scaling.required)})",
                "none" if len(missing) == 1 else "none of them",
            )
        if scaling.uses_factor and self.factor is not None:
            _positive_number("factor", self.factor, f"a scaling factor > 0 for rope_type {self.rope_type!r}")
        for name in ("attention_factor", "low_freq_factor", "high_freq_factor", "beta_fast", "beta_slow"):
            if getattr(self, name) is not None:
                _positive_number(name, getattr(self, name))
        if self.beta_fast is not None and self.beta_slow is not None and self.beta_fast < self.beta_slow:
            warnings.warn(  # transformers warns too (and then uses the values as given)
                f"beta_fast: expected at least beta_slow ({self.beta_slow}), got {self.beta_fast} (as transformers, "
                "the values are used as given: the YaRN ramp runs backwards)",
                UserWarning,
                stacklevel=3,
            )
        low, high = self.low_freq_factor, self.high_freq_factor
        if low is not None and high is not None and high < low:
            warnings.warn(  # transformers warns too (the smoothing band is then empty)
                f"high_freq_factor: expected more than low_freq_factor ({low}), got {high} (as transformers, the "
                "values are used as given: no frequency is smoothed)",
                UserWarning,
                stacklevel=3,
            )
        trained, factor = self.trained_length, self.effective_factor
        if trained is not None and factor is not None and factor * trained > MAX_POSITIONS:
            _fail(
                f"factor: expected a scaled limit (factor * {self.scaling.trained_length_field} {trained}) of at most "
                f"{MAX_POSITIONS} positions, got {factor!r} * {trained} = {factor * trained:.6g}"
            )
        if scaling.check is not None:
            scaling.check(self)
        _check_kinds(self, magnitudes=True)

    def _set_rotary_dim(self, scaling: RopeScaling) -> None:
        """Check :attr:`rotary_dim` when given (then set ``partial_rotary_factor`` from it), else set it."""
        head, p, given = self.head_dim, self.partial_rotary_factor, self.rotary_dim
        if given is None:
            rotated = head if scaling.full_width else int(head * p + 1e-9)
            if rotated < 2 or rotated % 2:
                _fail(
                    f"partial_rotary_factor: {p} of head_dim {head} rotates int({head * p:g}) = "
                    f"{rotated} dims; rotations need a positive even number of dims"
                )
            object.__setattr__(self, "rotary_dim", rotated)
            return
        if not _is_int(given) or given < 1:
            _refuse("rotary_dim", "a positive integer", given)
        if given > head:
            raise RopeFieldError(
                f"rotary_dim: expected at most head_dim {head}, got {given}",
                f"rotary_dim at most the head width {head}",
                str(given),
            )
        if given % 2 or (scaling.full_width and given != head):
            _fail(f"rotary_dim: expected an even number of dims{' (the whole head)' * scaling.full_width}, got {given}")
        if p != 1 and int(head * p + 1e-9) != given:  # both given: they must agree
            _fail(f"rotary_dim: expected int(head_dim * partial_rotary_factor) = {int(head * p + 1e-9)}, got {given}")
        object.__setattr__(self, "rotary_dim", int(given))
        object.__setattr__(self, "partial_rotary_factor", given / head)

    @classmethod
    def coerce(cls, config: RopeConfig | int) -> RopeConfig:
        """``config`` itself, or plain RoPE (``rope_theta=10000``) of head width ``config``.

        What every RoPE function and module accepts as ``config``.

        Raises:
          TypeError: neither a :class:`RopeConfig` nor an integer.

        >>> RopeConfig.coerce(64) == RopeConfig(head_dim=64)
        True
        >>> RopeConfig.coerce(64.0)
        Traceback (most recent call last):
        ...
        TypeError: config: expected a RopeConfig or a head_dim (int), got float
        """
        if isinstance(config, cls):
            return config
        if isinstance(config, (int, np.integer)) and not isinstance(config, bool):
            return cls(head_dim=int(config))
        raise TypeError(f"config: expected a RopeConfig or a head_dim (int), got {type(config).__name__}")

    @property
    def scaling(self) -> RopeScaling:
        """The :data:`ROPE_SCALINGS` row of :attr:`rope_type`.

        >>> RopeConfig(head_dim=8).scaling.name
        'default'
        """
        return scaling_of(self.rope_type)

    @property
    def effective_factor(self) -> float | None:
        """``factor``, or for ``yarn``/``longrope`` without one ``max / original`` as transformers derives it.

        >>> RopeConfig(head_dim=8, rope_type="yarn", max_position_embeddings=64,
        ...            original_max_position_embeddings=16).effective_factor
        4.0
        """
        scaling = self.scaling
        if not scaling.uses_factor:
            return None
        if self.factor is not None or not scaling.factor_from_lengths:
            return self.factor
        if self.max_position_embeddings and self.original_max_position_embeddings:
            return self.max_position_embeddings / self.original_max_position_embeddings
        return None

    @property
    def trained_length(self) -> int | None:
        """The length the factor scales (:attr:`RopeScaling.trained_length_field`); ``None`` if none.

        >>> RopeConfig(head_dim=8, rope_type="linear", factor=2.0, max_position_embeddings=16).trained_length
        16
        """
        field = self.scaling.trained_length_field
        return None if field is None else getattr(self, field)

    @property
    def scaled_limit(self) -> int | None:
        """The context a scaling type extends to: ``factor * trained_length``; ``None`` if none.

        >>> RopeConfig(head_dim=8, rope_type="yarn", factor=4.0, original_max_position_embeddings=16).scaled_limit
        64
        """
        factor, trained = self.effective_factor, self.trained_length
        return None if factor is None or trained is None else int(round(factor * trained))

    @property
    def no_limit_reason(self) -> str | None:
        """Why the scaling type has no position limit at all (``dynamic``), else ``None``.

        >>> RopeConfig(head_dim=8, rope_type="dynamic", factor=2.0, max_position_embeddings=16).no_limit_reason
        'dynamic NTK rescales past max_position_embeddings 16'
        """
        reason = self.scaling.no_limit
        return None if reason is None else reason.format(**dataclasses.asdict(self))

    @property
    def limit(self) -> int | None:
        """Usable positions ``0 .. limit - 1``: the larger of the declared and the scaled limit.

        ``None`` when nothing is declared, and for ``dynamic`` (it rescales for any length).

        >>> RopeConfig(head_dim=8, max_position_embeddings=4096).limit, RopeConfig(head_dim=8).limit
        (4096, None)
        """
        if self.scaling.no_limit is not None:
            return None
        known = [x for x in (self.max_position_embeddings, self.scaled_limit) if x is not None]
        return max(known) if known else None

    @property
    def needs_length(self) -> bool:
        """Whether the frequencies depend on the current sequence length (``dynamic``, ``longrope``).

        >>> RopeConfig(head_dim=8).needs_length
        False
        """
        return self.scaling.needs_length

    @classmethod
    def from_rope_parameters(
        cls,
        parameters: Mapping[str, Any],
        *,
        head_dim: int,
        max_position_embeddings: int | None = None,
        layout: RopeLayout = "half",
    ) -> RopeConfig:
        """From a Hugging Face ``rope_parameters`` (5.x) or ``rope_scaling`` (4.x) dict.

        ``rope_type`` (or the legacy ``type``) defaults to ``"default"``; keys outside
        :data:`ROPE_PARAMETERS` (``mrope_section``, ...) are ignored.

        >>> RopeConfig.from_rope_parameters({"rope_type": "linear", "factor": 2.0, "rope_theta": 1e4},
        ...                                 head_dim=64).factor
        2.0
        """
        kwargs = {k: parameters[k] for k in ROPE_PARAMETERS if parameters.get(k) is not None}
        kwargs["rope_type"] = rope_type_of(parameters)
        return cls(head_dim=head_dim, max_position_embeddings=max_position_embeddings, layout=layout, **kwargs)

    def to_dict(self) -> dict[str, Any]:
        """JSON-serialisable fields (``None`` fields dropped) plus ``rotary_dim`` and the limits.

        >>> RopeConfig(head_dim=8, max_position_embeddings=16).to_dict()["limit"]
        16
        """
        out = {k: v for k, v in dataclasses.asdict(self).items() if v is not None and k != "rotary_dim"}
        if out["length_field"] == "max_position_embeddings":
            del out["length_field"]  # the default name of the limit's field: not part of the config
        for name in ("short_factor", "long_factor"):
            if name in out:
                out[name] = list(out[name])
        out.update(rotary_dim=self.rotary_dim, scaled_limit=self.scaled_limit, limit=self.limit)
        return out


def rope_inverse_frequencies(config: RopeConfig, *, seq_len: int | None = None) -> tuple[np.ndarray, float]:
    """Inverse frequencies (radians per position) and the attention scaling factor, float64.

    The formulas of transformers' ``ROPE_INIT_FUNCTIONS`` (and the models' default), computed in
    float64 (transformers computes them in float32); each scaling type's function is its
    :data:`ROPE_SCALINGS` row's ``inverse_frequencies``.

    Args:
      config: the :class:`RopeConfig`.
      seq_len: current sequence length (``max(position) + 1``); only ``dynamic`` (base grows
        once ``seq_len > max_position_embeddings``) and ``longrope`` (long factors once
        ``seq_len > original_max_position_embeddings``) read it. ``None``: the initial
        (short-context) frequencies, as transformers computes them at construction.

    Returns:
      ``(inv_freq, attention_factor)``: ``inv_freq`` of shape ``(rotary_dim // 2,)`` and a
      float that multiplies ``cos`` and ``sin`` (1 except for ``yarn`` and ``longrope``).

    >>> inv, s = rope_inverse_frequencies(RopeConfig(head_dim=4, rope_type="yarn", factor=4.0,
    ...                                              original_max_position_embeddings=64))
    >>> inv.shape, round(s, 4)
    ((2,), 1.1386)
    """
    inv_freq, attention = config.scaling.inverse_frequencies(config, seq_len)
    return np.asarray(inv_freq, dtype=np.float64), float(attention)


# --------------------------------------------------------------------------- the scaling types


def _geometric(dim: int, base: float) -> np.ndarray:
    """``base ** (-2i / dim)`` for ``i < dim / 2``, float64: the unscaled frequencies."""
    return 1.0 / base ** (np.arange(0, dim, 2, dtype=np.float64) / dim)


def _default(config: RopeConfig, seq_len: int | None) -> tuple[np.ndarray, float]:
    return _geometric(config.rotary_dim, float(config.rope_theta)), 1.0


def _linear(config: RopeConfig, seq_len: int | None) -> tuple[np.ndarray, float]:
    return _geometric(config.rotary_dim, float(config.rope_theta)) / config.effective_factor, 1.0


def _proportional(config: RopeConfig, seq_len: int | None) -> tuple[np.ndarray, float]:
    """Gemma 4's proportional RoPE: ``int(partial_rotary_factor * head_dim // 2)`` frequencies
    ``base ** (-2i / head_dim)``, the rest of the head's ``head_dim // 2`` zero (no rotation), all
    divided by ``factor`` (default 1)."""
    dim = config.head_dim
    angles = int(config.partial_rotary_factor * dim // 2)
    inv = np.zeros(dim // 2, np.float64)
    inv[:angles] = 1.0 / float(config.rope_theta) ** (np.arange(0, 2 * angles, 2, dtype=np.float64) / dim)
    return inv / (config.factor if config.factor is not None else 1.0), 1.0


def _dynamic(config: RopeConfig, seq_len: int | None) -> tuple[np.ndarray, float]:
    # the row's required keys (factor, max_position_embeddings) are checked before this runs
    dim, factor = config.rotary_dim, cast(float, config.effective_factor)
    reference = cast(int, config.max_position_embeddings)
    length = reference if seq_len is None else max(int(seq_len), reference)
    base = float(config.rope_theta) * ((factor * length / reference) - (factor - 1)) ** (dim / (dim - 2))
    return _geometric(dim, base), 1.0


def _yarn_mscale(scale: float, mscale: float = 1.0) -> float:
    return 1.0 if scale <= 1 else 0.1 * mscale * math.log(scale) + 1.0


def _yarn(config: RopeConfig, seq_len: int | None) -> tuple[np.ndarray, float]:
    dim, base, factor = config.rotary_dim, float(config.rope_theta), cast(float, config.effective_factor)
    inv_freq = _geometric(dim, base)
    original = cast(int, config.original_max_position_embeddings)  # required by the row
    if config.attention_factor is not None:
        attention = float(config.attention_factor)
    elif config.mscale and config.mscale_all_dim:
        attention = _yarn_mscale(factor, config.mscale) / _yarn_mscale(factor, config.mscale_all_dim)
    else:
        attention = _yarn_mscale(factor)
    beta_fast = config.beta_fast or 32
    beta_slow = config.beta_slow or 1

    def correction_dim(rotations: float) -> float:
        return (dim * math.log(original / (rotations * 2 * math.pi))) / (2 * math.log(base))

    low, high = correction_dim(beta_fast), correction_dim(beta_slow)
    if config.truncate:
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, dim - 1)
    if low == high:
        high += 0.001  # transformers: prevent the singularity
    ramp = np.clip((np.arange(dim // 2, dtype=np.float64) - low) / (high - low), 0, 1)
    extrapolation = 1 - ramp
    return (inv_freq / factor) * (1 - extrapolation) + inv_freq * extrapolation, attention


def _check_yarn(config: RopeConfig) -> None:
    if config.factor is None and config.max_position_embeddings is None:
        _fail("factor: rope_type 'yarn' needs it (or max_position_embeddings to derive it), got None")


def _llama3(config: RopeConfig, seq_len: int | None) -> tuple[np.ndarray, float]:
    inv_freq = _geometric(config.rotary_dim, float(config.rope_theta))
    # required by the row: factor, low_freq_factor, high_freq_factor, original_max_position_embeddings
    factor, original = cast(float, config.effective_factor), cast(int, config.original_max_position_embeddings)
    low_f, high_f = cast(float, config.low_freq_factor), cast(float, config.high_freq_factor)
    wavelen = 2 * math.pi / inv_freq
    scaled = np.where(wavelen > original / low_f, inv_freq / factor, inv_freq)
    smooth = (original / wavelen - low_f) / (high_f - low_f)
    smoothed = (1 - smooth) * scaled / factor + smooth * scaled
    medium = ~(wavelen < original / high_f) & ~(wavelen > original / low_f)
    return np.where(medium, smoothed, scaled), 1.0


def _check_llama3(config: RopeConfig) -> None:
    if config.low_freq_factor == config.high_freq_factor:
        _fail(f"high_freq_factor: must differ from low_freq_factor for 'llama3', both are {config.low_freq_factor!r}")


def _longrope(config: RopeConfig, seq_len: int | None) -> tuple[np.ndarray, float]:
    factor, original = config.effective_factor, cast(int, config.original_max_position_embeddings)  # required
    long = seq_len is not None and int(seq_len) > original
    ext = np.asarray(config.long_factor if long else config.short_factor, dtype=np.float64)
    inv_freq = _geometric(config.rotary_dim, float(config.rope_theta)) / ext
    if config.attention_factor is not None:
        attention = float(config.attention_factor)
    elif factor is None or factor <= 1.0:
        attention = 1.0
    else:
        attention = math.sqrt(1 + math.log(factor) / math.log(original))
    return inv_freq, attention


def _check_longrope(config: RopeConfig) -> None:
    for name in ("short_factor", "long_factor"):
        value = getattr(config, name)
        if len(value) != config.rotary_dim // 2:
            _fail(f"{name}: expected {config.rotary_dim // 2} factors (rotary_dim / 2), got {len(value)}")
        if not all(math.isfinite(v) and v > 0 for v in value):
            _fail(f"{name}: expected factors > 0, got {value!r}")


def _check_dynamic(config: RopeConfig) -> None:
    if config.rotary_dim <= 2:
        _fail(f"head_dim: dynamic NTK scaling needs more than 2 rotated dims, got {config.rotary_dim}")


#: The RoPE scaling types, one :class:`RopeScaling` row each, keyed by ``rope_type``: what
#: :class:`RopeConfig`, :func:`rope_inverse_frequencies`, the device path and the ``config.json``
#: reader know about each type. Facts checked against ``transformers/modeling_rope_utils.py``.
ROPE_SCALINGS: Mapping[str, RopeScaling] = MappingProxyType(
    {
        row.name: row
        for row in (
            RopeScaling("default", _default, uses_factor=False),
            RopeScaling("linear", _linear, ("factor",), trained_length_field="max_position_embeddings"),
            RopeScaling(
                "dynamic",
                _dynamic,
                ("factor", "max_position_embeddings"),
                needs_length=True,
                no_limit="dynamic NTK rescales past max_position_embeddings {max_position_embeddings}",
                check=_check_dynamic,
            ),
            RopeScaling(
                "yarn", _yarn, (_ORIGINAL,), trained_length_field=_ORIGINAL, factor_from_lengths=True, check=_check_yarn
            ),
            RopeScaling(
                "llama3",
                _llama3,
                ("factor", "low_freq_factor", "high_freq_factor", _ORIGINAL),
                trained_length_field=_ORIGINAL,
                check=_check_llama3,
            ),
            RopeScaling(
                "longrope",
                _longrope,
                ("short_factor", "long_factor", _ORIGINAL),
                trained_length_field=_ORIGINAL,
                factor_from_lengths=True,
                needs_length=True,
                check=_check_longrope,
            ),
            RopeScaling("proportional", _proportional, full_width=True),
        )
    }
)
#: The built-in scaling types' names (the keys of :data:`ROPE_SCALINGS`).
ROPE_TYPES: tuple[str, ...] = tuple(ROPE_SCALINGS)


__all__ = [
    "ROPE_LAYOUTS",
    "ROPE_PARAMETERS",
    "ROPE_SCALINGS",
    "ROPE_TYPES",
    "RopeConfig",
    "RopeFieldError",
    "RopeScaling",
    "rope_inverse_frequencies",
    "rope_type_of",
    "scaling_of",
]
