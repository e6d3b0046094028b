"""RoPE and ALiBi as data: validated config records and their float64 host math (numpy only).

This module is what :mod:`flax_posenc.rope`, :mod:`flax_posenc.alibi` and the checkpoint
reader :mod:`flax_posenc.conversion.rope_config` share. It imports no jax, so reading a
``config.json`` stays fast and framework-free.

- :class:`RopeConfig`: head dim, ``rope_theta``, ``partial_rotary_factor``, the scaling type and
  its parameters, named exactly as Hugging Face's ``rope_parameters`` (transformers 5.x; the
  ``rope_scaling`` dict of 4.x): ``default``, ``linear``, ``dynamic``, ``yarn``, ``llama3``,
  ``longrope``. :func:`rope_inverse_frequencies` computes the inverse frequencies (radians per
  position) and the attention scaling factor in float64, with the formulas of
  ``transformers/modeling_rope_utils.py``.
- :class:`AlibiConfig` and :func:`alibi_slopes`: Press et al.'s per-head slopes for any head
  count, BLOOM's recipe (equal to MPT's with ``max_bias=8``).

Limits. ``max_position_embeddings`` is the length a config declares; a scaling type that
extends the context also defines a *scaled limit*: ``factor * max_position_embeddings`` for
``linear`` (where ``max_position_embeddings`` is the trained length), and
``factor * original_max_position_embeddings`` for ``yarn``, ``llama3`` and ``longrope``.
:attr:`RopeConfig.limit` is the larger of the two. ``dynamic`` (NTK) rescales its base for any
length past ``max_position_embeddings``, so it has no limit (``None``). ALiBi needs no limit; a configured one
(MPT's ``max_seq_len``) is kept as :attr:`AlibiConfig.max_positions`.

>>> cfg = RopeConfig(head_dim=8, rope_theta=10000.0)
>>> inv, scale = rope_inverse_frequencies(cfg)
>>> [round(float(x), 4) for x in inv], scale
([1.0, 0.1, 0.01, 0.001], 1.0)
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import Any, Literal

import numpy as np

RopeType = Literal["default", "linear", "dynamic", "yarn", "llama3", "longrope"]
ROPE_TYPES: tuple[str, ...] = ("default", "linear", "dynamic", "yarn", "llama3", "longrope")
RopeLayout = Literal["half", "interleaved"]
ROPE_LAYOUTS: tuple[str, ...] = ("half", "interleaved")

#: rope parameter keys each scaling type needs (beyond rope_theta / partial_rotary_factor).
_REQUIRED: dict[str, tuple[str, ...]] = {
    "default": (),
    "linear": ("factor",),
    "dynamic": ("factor", "max_position_embeddings"),
    "yarn": ("original_max_position_embeddings",),
    "llama3": ("factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings"),
    "longrope": ("short_factor", "long_factor", "original_max_position_embeddings"),
}
#: keys of a Hugging Face rope_parameters dict that RopeConfig holds.
_HF_KEYS: tuple[str, ...] = (
    "rope_theta",
    "partial_rotary_factor",
    "factor",
    "original_max_position_embeddings",
    "attention_factor",
    "beta_fast",
    "beta_slow",
    "mscale",
    "mscale_all_dim",
    "truncate",
    "low_freq_factor",
    "high_freq_factor",
    "short_factor",
    "long_factor",
)


def _fail(message: str) -> None:
    raise ValueError(message)


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
class RopeConfig:
    """A rotary position embedding, as Hugging Face configures it; frozen and hashable.

    Attributes:
      head_dim: width of one attention head (even).
      rope_theta: the base of the geometric frequencies (10000 for Llama 2, 500000 for
        Llama 3, 1e6 for Qwen2).
      partial_rotary_factor: fraction of ``head_dim`` that is rotated (GPT-NeoX: 0.25); the
        rotated width ``int(head_dim * factor)`` must be even. Rotated dims come first.
      rope_type: scaling scheme, one of :data:`ROPE_TYPES`.
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
    rope_type: RopeType = "default"
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

    def __post_init__(self):
        for name in ("short_factor", "long_factor"):
            value = getattr(self, name)
            if value is not None and not isinstance(value, tuple):
                object.__setattr__(self, name, tuple(float(v) for v in value))
        if not _is_int(self.head_dim) or self.head_dim < 2 or self.head_dim % 2:
            _fail(f"head_dim: expected a positive even integer (rotations act on pairs), got {self.head_dim!r}")
        _positive_number("rope_theta", self.rope_theta)
        p = self.partial_rotary_factor
        if isinstance(p, bool) or not isinstance(p, (int, float, np.number)) or not 0 < p <= 1:
            _fail(f"partial_rotary_factor: expected a fraction in (0, 1], got {p!r}")
        rotated = int(self.head_dim * p + 1e-9)
        if rotated < 2 or rotated % 2:
            _fail(
                f"partial_rotary_factor: {p} of head_dim {self.head_dim} rotates int({self.head_dim * p:g}) = "
                f"{rotated} dims; rotations need a positive even number of dims"
            )
        if self.rope_type not in ROPE_TYPES:
            _fail(f"rope_type: unknown scaling type {self.rope_type!r}; known types: {', '.join(ROPE_TYPES)}")
        if self.layout not in ROPE_LAYOUTS:
            _fail(f"layout: expected one of {ROPE_LAYOUTS}, got {self.layout!r}")
        for name in ("max_position_embeddings", "original_max_position_embeddings"):
            value = getattr(self, name)
            if value is not None and (not _is_int(value) or value < 1):
                _fail(f"{name}: expected a positive integer, got {value!r}")
        if (
            self.rope_type in ("yarn", "llama3", "longrope")
            and self.original_max_position_embeddings is None
            and self.max_position_embeddings is not None
        ):  # transformers' standardize_rope_params does the same
            object.__setattr__(self, "original_max_position_embeddings", self.max_position_embeddings)
        for name in _REQUIRED[self.rope_type]:
            if getattr(self, name) is None:
                _fail(f"{name}: rope_type {self.rope_type!r} needs it (a Hugging Face rope_parameters key), got None")
        if self.rope_type != "default" and self.factor is not None:
            _positive_number("factor", self.factor, f"a scaling factor > 0 for rope_type {self.rope_type!r}")
        if self.rope_type == "yarn" and self.factor is None and self.max_position_embeddings is None:
            _fail("factor: rope_type 'yarn' needs it (or max_position_embeddings to derive it), got None")
        if self.rope_type == "dynamic" and self.rotary_dim <= 2:
            _fail(f"head_dim: dynamic NTK scaling needs more than 2 rotated dims, got {self.rotary_dim}")
        if self.rope_type == "llama3" and self.low_freq_factor == self.high_freq_factor:
            _fail(f"high_freq_factor: must differ from low_freq_factor for 'llama3', both are {self.low_freq_factor!r}")
        for name in ("attention_factor", "low_freq_factor", "high_freq_factor"):
            if getattr(self, name) is not None:
                _positive_number(name, getattr(self, name))
        if self.rope_type == "longrope":
            for name in ("short_factor", "long_factor"):
                value = getattr(self, name)
                if len(value) != self.rotary_dim // 2:
                    _fail(f"{name}: expected {self.rotary_dim // 2} factors (rotary_dim / 2), got {len(value)}")
                if not all(math.isfinite(v) and v > 0 for v in value):
                    _fail(f"{name}: expected factors > 0, got {value!r}")

    @property
    def rotary_dim(self) -> int:
        """Rotated dims of a head: ``int(head_dim * partial_rotary_factor)`` (even).

        (A tolerance of 1e-9 keeps ``rotary_dim / head_dim * head_dim`` from truncating one short.)
        """
        return int(self.head_dim * self.partial_rotary_factor + 1e-9)

    @property
    def effective_factor(self) -> float | None:
        """``factor``, or for ``yarn``/``longrope`` without one ``max / original`` as transformers derives it."""
        if self.factor is not None or self.rope_type not in ("yarn", "longrope"):
            return None if self.rope_type == "default" else self.factor
        if self.max_position_embeddings and self.original_max_position_embeddings:
            return self.max_position_embeddings / self.original_max_position_embeddings
        return None

    @property
    def scaled_limit(self) -> int | None:
        """The context a scaling type extends to (see the module docstring); ``None`` if none."""
        factor = self.effective_factor
        if factor is None or self.rope_type == "dynamic":
            return None
        trained = self.max_position_embeddings if self.rope_type == "linear" else self.original_max_position_embeddings
        return None if trained is None else int(round(factor * trained))

    @property
    def limit(self) -> int | None:
        """Usable positions ``0 .. limit - 1``: the larger of the declared and the scaled limit.

        ``None`` when nothing is declared, and for ``dynamic`` (it rescales for any length).
        """
        if self.rope_type == "dynamic":
            return None
        known = [x for x in (self.max_position_embeddings, self.scaled_limit) if x is not None]
        return max(known) if known else None

    @property
    def needs_length(self) -> bool:
        """Whether the frequencies depend on the current sequence length (``dynamic``, ``longrope``)."""
        return self.rope_type in ("dynamic", "longrope")

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

        ``rope_type`` (or the legacy ``type``) defaults to ``"default"``; unknown keys (``mrope_section``,
        ...) are ignored.

        >>> RopeConfig.from_rope_parameters({"rope_type": "linear", "factor": 2.0, "rope_theta": 1e4},
        ...                                 head_dim=64).factor
        2.0
        """
        kwargs = {k: parameters[k] for k in _HF_KEYS if parameters.get(k) is not None}
        kwargs["rope_type"] = parameters.get("rope_type", parameters.get("type")) or "default"
        if "truncate" in kwargs:
            kwargs["truncate"] = bool(kwargs["truncate"])
        return cls(head_dim=head_dim, max_position_embeddings=max_position_embeddings, layout=layout, **kwargs)

    def to_dict(self) -> dict[str, Any]:
        """JSON-serialisable fields (``None`` fields dropped) plus ``rotary_dim`` and the limits."""
        out = {k: v for k, v in dataclasses.asdict(self).items() if v is not None}
        for name in ("short_factor", "long_factor"):
            if name in out:
                out[name] = list(out[name])
        out.update(rotary_dim=self.rotary_dim, scaled_limit=self.scaled_limit, limit=self.limit)
        return out


def _yarn_mscale(scale: float, mscale: float = 1.0) -> float:
    return 1.0 if scale <= 1 else 0.1 * mscale * math.log(scale) + 1.0


def rope_inverse_frequencies(config: RopeConfig, *, seq_len: int | None = None) -> tuple[np.ndarray, float]:
    """Inverse frequencies (radians per position) and the attention scaling factor, float64.

    The formulas of transformers' ``ROPE_INIT_FUNCTIONS`` (and the models' default), computed in
    float64 (transformers computes them in float32).

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
    dim = config.rotary_dim
    base = float(config.rope_theta)
    exponent = np.arange(0, dim, 2, dtype=np.float64) / dim
    kind = config.rope_type
    factor = config.effective_factor
    if kind == "dynamic":
        reference = config.max_position_embeddings
        length = reference if seq_len is None else max(int(seq_len), reference)
        base = base * ((factor * length / reference) - (factor - 1)) ** (dim / (dim - 2))
    inv_freq = 1.0 / base**exponent
    attention = 1.0
    if kind == "linear":
        inv_freq = inv_freq / factor
    elif kind == "yarn":
        original = config.original_max_position_embeddings
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
        inv_freq = (inv_freq / factor) * (1 - extrapolation) + inv_freq * extrapolation
    elif kind == "llama3":
        original = config.original_max_position_embeddings
        low_f, high_f = config.low_freq_factor, config.high_freq_factor
        wavelen = 2 * math.pi / inv_freq
        scaled = np.where(wavelen > original / low_f, inv_freq / factor, inv_freq)
        smooth = (original / wavelen - low_f) / (high_f - low_f)
        smoothed = (1 - smooth) * scaled / factor + smooth * scaled
        medium = ~(wavelen < original / high_f) & ~(wavelen > original / low_f)
        inv_freq = np.where(medium, smoothed, scaled)
    elif kind == "longrope":
        original = config.original_max_position_embeddings
        long = seq_len is not None and int(seq_len) > original
        ext = np.asarray(config.long_factor if long else config.short_factor, dtype=np.float64)
        inv_freq = inv_freq / ext
        if config.attention_factor is not None:
            attention = float(config.attention_factor)
        elif factor is None or factor <= 1.0:
            attention = 1.0
        else:
            attention = math.sqrt(1 + math.log(factor) / math.log(original))
    return np.asarray(inv_freq, dtype=np.float64), float(attention)


# --------------------------------------------------------------------------- ALiBi


@dataclasses.dataclass(frozen=True)
class AlibiConfig:
    """Attention with linear biases (Press et al., 2022): one slope per head.

    Attributes:
      num_heads: attention heads (any positive count; non-powers of two per the paper's recipe).
      max_bias: the slopes are ``2 ** (-max_bias * k / n)``; 8 in the paper, BLOOM and MPT
        (MPT's ``alibi_bias_max``).
      max_positions: a configured limit (MPT's ``max_seq_len``), or ``None``: ALiBi itself has none.

    >>> AlibiConfig(num_heads=0)
    Traceback (most recent call last):
    ...
    ValueError: num_heads: expected a positive integer, got 0
    """

    num_heads: int
    max_bias: float = 8.0
    max_positions: int | None = None

    def __post_init__(self):
        if not _is_int(self.num_heads) or self.num_heads < 1:
            _fail(f"num_heads: expected a positive integer, got {self.num_heads!r}")
        _positive_number("max_bias", self.max_bias)
        if self.max_positions is not None and (not _is_int(self.max_positions) or self.max_positions < 1):
            _fail(f"max_positions: expected a positive integer or None, got {self.max_positions!r}")

    @property
    def limit(self) -> int | None:
        return self.max_positions

    def to_dict(self) -> dict[str, Any]:
        return {
            **dataclasses.asdict(self),
            "limit": self.limit,
            "slopes": alibi_slopes(self.num_heads, max_bias=self.max_bias).tolist(),
        }


def alibi_slopes(num_heads: int, *, max_bias: float = 8.0) -> np.ndarray:
    """Per-head ALiBi slopes in float64, shape ``(num_heads,)``.

    For ``n`` a power of two: ``2 ** (-max_bias * k / n)`` for ``k = 1 .. n`` (the geometric
    sequence starting at ``2 ** (-8 / n)``). Otherwise the paper's recipe, as BLOOM and MPT
    build it: the slopes of the closest lower power of two ``c``, then every other slope of
    ``2c`` (the odd ``k``) until there are ``n``.

    >>> alibi_slopes(8).tolist()
    [0.5, 0.25, 0.125, 0.0625, 0.03125, 0.015625, 0.0078125, 0.00390625]
    >>> [round(x, 4) for x in alibi_slopes(6).tolist()]
    [0.25, 0.0625, 0.0156, 0.0039, 0.5, 0.125]
    """
    AlibiConfig(num_heads, max_bias)  # validates
    n2 = 1 << (int(num_heads) - 1).bit_length()  # 2 ** ceil(log2 n)
    slopes = 2.0 ** (-float(max_bias) * np.arange(1, n2 + 1, dtype=np.float64) / n2)
    if n2 != num_heads:
        slopes = np.concatenate([slopes[1::2], slopes[::2]])[:num_heads]
    return slopes


__all__ = [
    "ROPE_LAYOUTS",
    "ROPE_TYPES",
    "AlibiConfig",
    "RopeConfig",
    "alibi_slopes",
    "rope_inverse_frequencies",
]
