"""RoPE and ALiBi configurations from a Hugging Face ``config.json`` (numpy only, no weights read).

Relative position schemes live in the attention, not in a table, so a checkpoint's
``config.json`` says everything: which scheme, its parameters and its limit. Families are data
(:data:`RELATIVE_FAMILIES`, one row each); adding one is adding a row.

Facts checked against transformers 5.x (``models/*/configuration_*.py``, ``modeling_*.py``):

- Llama, Mistral/Mixtral, Qwen2/Qwen2-MoE/Qwen3: RoPE, half layout; ``head_dim`` (optional, else
  ``hidden_size // num_attention_heads``), ``max_position_embeddings`` (defaults 2048, 131072,
  32768); Mixtral's ``rope_theta`` defaults to 1e6, the others' to 10000.
- GPT-NeoX: RoPE on ``rotary_pct`` (default 0.25) of each head, base ``rotary_emb_base``.
- GPT-J: interleaved RoPE on ``rotary_dim`` dims (``n_head``, ``n_embd``, ``n_positions``).
- Phi-3/Phi-3.5 (``phi3``): RoPE, half layout, ``max_position_embeddings`` (default 4096);
  LongRoPE (``short_factor``/``long_factor`` lists, ``rotary_dim // 2`` each) with the top-level
  ``original_max_position_embeddings``; older configs spell the type ``"su"`` or ``"yarn"``,
  which ``Phi3Config`` rewrites to ``"longrope"`` (so do we).
- Falcon (``falcon``, legacy ``RefinedWeb``/``RefinedWebModel``): RoPE unless ``alibi: true``.
- BLOOM: ALiBi, ``n_head`` heads, no length limit in its config.
- MPT: ALiBi when ``attn_config.alibi`` (default true), ``attn_config.alibi_bias_max`` (8), limit
  ``max_seq_len`` (2048).

RoPE parameters are read as transformers 5.x writes them (``rope_parameters``: ``rope_type``,
``rope_theta``, ``factor``, ...) and as 4.x configs on the Hub hold them (top-level
``rope_theta``/``partial_rotary_factor`` plus a ``rope_scaling`` dict with ``type`` or
``rope_type``). Which keys a scaling type needs, how each key is typed and which types take a
top-level ``original_max_position_embeddings`` all come from the scaling registry,
:data:`flax_posenc.rope_config.ROPE_SCALINGS` and :data:`~flax_posenc.rope_config.ROPE_PARAMETERS`:
this reader holds no list of its own. A SOURCE is a checkpoint directory (its ``config.json``) or a ``config.json``
path.

>>> import json, tempfile, pathlib
>>> d = pathlib.Path(tempfile.mkdtemp())
>>> _ = (d / "config.json").write_text(json.dumps({"model_type": "llama", "hidden_size": 4096,
...     "num_attention_heads": 32, "max_position_embeddings": 131072, "rope_theta": 500000.0,
...     "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
...                      "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}}))
>>> rc = read_relative_config(d)
>>> rc.scheme, rc.family, rc.rope.head_dim, rc.rope.rope_type, rc.limit
('rope', 'llama', 128, 'llama3', 131072)
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Any, Literal

from flax_posenc.alibi_config import AlibiConfig
from flax_posenc.conversion.families import row_for_model_type
from flax_posenc.conversion.readers import fail
from flax_posenc.conversion.sources import CONFIG_NAME, read_config
from flax_posenc.errors import CheckpointError
from flax_posenc.rope_config import ROPE_PARAMETERS, RopeConfig, scaling_of

Scheme = Literal["rope", "alibi"]


@dataclasses.dataclass(frozen=True)
class RelativeFamily:
    """One family's relative-position config, as data.

    Attributes:
      name: our name for the family.
      model_types: ``config.json`` ``model_type`` values that mean it.
      scheme: ``"rope"`` or ``"alibi"``; with ``alibi_flag`` set, the default when the flag is absent.
      alibi_flag: dotted config path of a boolean choosing ALiBi over RoPE (Falcon ``alibi``,
        MPT ``attn_config.alibi``), or ``None``.
      heads_fields, hidden_fields: fields holding the head count and the model width (first present wins).
      head_dim_field: field holding the head width, or ``None`` (always ``hidden // heads``).
      theta_fields, theta_default: legacy top-level RoPE base fields and the model's default.
      partial_fields, partial_default: rotary fraction fields (GPT-NeoX ``rotary_pct``) and default.
      rotary_dim_field: a field giving the rotated dims directly (GPT-J ``rotary_dim``).
      layout: RoPE layout, ``"half"`` or ``"interleaved"``.
      limit_fields, limit_default: fields holding the length limit and the model's default
        (``None``: no limit).
      alibi_bias_max_field, alibi_bias_max_default: ALiBi's ``max_bias`` (MPT) and its default.
      rope_type_aliases: ``(old, new)`` spellings of ``rope_type``/``type`` that transformers
        rewrites for this family (Phi-3's legacy ``"su"`` and ``"yarn"`` mean ``"longrope"``).
    """

    name: str
    model_types: tuple[str, ...]
    scheme: Scheme = "rope"
    alibi_flag: str | None = None
    heads_fields: tuple[str, ...] = ("num_attention_heads",)
    hidden_fields: tuple[str, ...] = ("hidden_size",)
    head_dim_field: str | None = "head_dim"
    theta_fields: tuple[str, ...] = ("rope_theta",)
    theta_default: float = 10000.0
    partial_fields: tuple[str, ...] = ("partial_rotary_factor",)
    partial_default: float = 1.0
    rotary_dim_field: str | None = None
    layout: str = "half"
    limit_fields: tuple[str, ...] = ("max_position_embeddings",)
    limit_default: int | None = None
    alibi_bias_max_field: str | None = None
    alibi_bias_max_default: float = 8.0
    rope_type_aliases: tuple[tuple[str, str], ...] = ()


RELATIVE_FAMILIES: Mapping[str, RelativeFamily] = MappingProxyType(
    {
        f.name: f
        for f in (
            RelativeFamily("llama", ("llama",), limit_default=2048),
            RelativeFamily("mistral", ("mistral",), limit_default=4096 * 32),
            RelativeFamily("mixtral", ("mixtral",), theta_default=1e6, limit_default=4096 * 32),
            RelativeFamily("qwen2", ("qwen2", "qwen2_moe", "qwen3", "qwen3_moe"), limit_default=32768),
            RelativeFamily(
                "phi3",
                ("phi3",),
                limit_default=4096,
                rope_type_aliases=(("su", "longrope"), ("yarn", "longrope")),
            ),
            RelativeFamily(
                "gpt_neox",
                ("gpt_neox",),
                theta_fields=("rotary_emb_base", "rope_theta"),
                partial_fields=("rotary_pct", "partial_rotary_factor"),
                partial_default=0.25,
                limit_default=2048,
            ),
            RelativeFamily(
                "gptj",
                ("gptj",),
                heads_fields=("n_head", "num_attention_heads"),
                hidden_fields=("n_embd", "hidden_size"),
                head_dim_field=None,
                rotary_dim_field="rotary_dim",
                layout="interleaved",
                limit_fields=("n_positions", "max_position_embeddings"),
                limit_default=2048,
            ),
            RelativeFamily(
                "falcon",
                ("falcon", "RefinedWeb", "RefinedWebModel"),
                alibi_flag="alibi",
                heads_fields=("num_attention_heads", "n_head"),
                hidden_fields=("hidden_size", "n_embed"),
                head_dim_field=None,
                limit_default=2048,
            ),
            RelativeFamily(
                "bloom",
                ("bloom",),
                scheme="alibi",
                heads_fields=("n_head", "num_attention_heads"),
                head_dim_field=None,
                limit_fields=(),
            ),
            RelativeFamily(
                "mpt",
                ("mpt",),
                scheme="alibi",
                alibi_flag="attn_config.alibi",
                heads_fields=("n_heads", "num_attention_heads"),
                hidden_fields=("d_model", "hidden_size"),
                head_dim_field=None,
                limit_fields=("max_seq_len",),
                limit_default=2048,
                alibi_bias_max_field="attn_config.alibi_bias_max",
            ),
        )
    }
)


@dataclasses.dataclass(frozen=True)
class RelativeConfig:
    """The relative position scheme of a checkpoint: exactly one of ``rope`` / ``alibi`` is set.

    Attributes:
      source: the SOURCE as given; ``config_path``: the ``config.json`` read.
      family, model_type: our family name and the config's ``model_type``.
      scheme: ``"rope"`` or ``"alibi"``.
      rope: the :class:`~flax_posenc.RopeConfig` (``None`` for ALiBi).
      alibi: the :class:`~flax_posenc.AlibiConfig` (``None`` for RoPE).
      num_heads: attention heads.
    """

    source: str
    config_path: Path
    family: str
    model_type: str
    scheme: Scheme
    num_heads: int
    rope: RopeConfig | None = None
    alibi: AlibiConfig | None = None

    key = None  # a config holds no tensor (the :class:`~flax_posenc.conversion.SourceRecord` field)

    @property
    def limit(self) -> int | None:
        """Usable positions (``None``: no limit); see :attr:`RopeConfig.limit`."""
        return self.rope.limit if self.rope is not None else self.alibi.limit

    def describe_limit(self) -> str:
        """One phrase naming the limit and where it comes from."""
        name = f"{self.family} {self.scheme_name} of {self.source}"
        if self.rope is not None:
            r = self.rope
            if r.no_limit_reason is not None:
                return f"{name} has no limit ({r.no_limit_reason})"
            if r.limit is None:
                return f"{name} has no configured limit"
            parts = [f"max_position_embeddings {r.max_position_embeddings}"] if r.max_position_embeddings else []
            if r.scaled_limit is not None:
                parts.append(f"scaled limit {r.scaled_limit} = {r.effective_factor:g} x {r.trained_length}")
            return f"{name} holds {r.limit} positions (0..{r.limit - 1}; {', '.join(parts)})"
        if self.alibi.max_positions is None:
            return f"{name} has no configured limit (ALiBi extrapolates)"
        return f"{name} holds {self.limit} positions (0..{self.limit - 1}; configured, ALiBi itself has none)"

    @property
    def scheme_name(self) -> str:
        return f"{self.rope.rope_type} RoPE" if self.rope is not None else "ALiBi"

    def check_length(self, length: int) -> tuple[bool, str]:
        """Whether ``length`` positions fit, and one line saying so (the CLI's ``check``)."""
        from flax_posenc.limits import verdict_line

        return verdict_line(length, self.limit, self.describe_limit())

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "source": self.source,
            "config": str(self.config_path),
            "family": self.family,
            "model_type": self.model_type,
            "scheme": self.scheme,
            "num_heads": self.num_heads,
            "limit": self.limit,
        }
        out[self.scheme] = (self.rope or self.alibi).to_dict()
        return out

    def __str__(self) -> str:
        lines = [
            f"source:      {self.source}",
            f"family:      {self.family} ({self.model_type})",
            f"scheme:      {self.scheme_name}",
            f"heads:       {self.num_heads}",
        ]
        if self.rope is not None:
            r = self.rope
            lines += [
                f"head_dim:    {r.head_dim} (rotary_dim {r.rotary_dim}, layout {r.layout})",
                f"rope_theta:  {r.rope_theta:g}",
            ]
            extras = {k: v for k, v in r.to_dict().items() if k in _SCALING_NUMBERS}
            if extras:
                lines.append("scaling:     " + ", ".join(f"{k}={v:g}" for k, v in extras.items()))
        else:
            slopes = AlibiConfig.to_dict(self.alibi)["slopes"]
            lines.append(f"slopes:      {slopes[0]:.4g} .. {min(slopes):.4g} (max_bias {self.alibi.max_bias:g})")
        lines.append(f"limit:       {self.describe_limit()}")
        return "\n".join(lines)


def _get(config: Mapping[str, Any], dotted: str) -> Any:
    node: Any = config
    for part in dotted.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return None
        node = node[part]
    return node


def _first(config: Mapping[str, Any], fields: tuple[str, ...]) -> Any:
    return next((config[f] for f in fields if config.get(f) is not None), None)


def _int_field(where: object, expected: str, value: Any) -> int:
    """``value`` when it is a positive integer (not a bool, a string or a float), else one line."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise fail(where, expected if " " in expected else f"{expected} as a positive integer", repr(value)[:80])
    return value


def _number_field(where: object, name: str, value: Any, *, bound: float) -> float:
    """``value`` as a float when it is a finite number of magnitude at most ``bound``, else one line.

    (Signs and finer ranges are :class:`~flax_posenc.RopeConfig`'s to check.)
    """
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and abs(float(value)) <= bound
    if not ok:
        raise fail(where, f"{name} as a finite number of magnitude at most {bound:g}", repr(value)[:80])
    return float(value)


#: The magnitude a number read from a config may reach (past it, products overflow): 1e6, or this.
_MAGNITUDE: dict[str, float] = {"rope_theta": 1e12}


def _check_rope_params(where: object, params: dict[str, Any]) -> None:
    """Type-check the RoPE parameters read from a config by their kind in
    :data:`~flax_posenc.rope_config.ROPE_PARAMETERS` (one line naming the field)."""
    for name in ("rope_type", "type"):
        if params.get(name) is not None and not isinstance(params[name], str):
            raise fail(where, f"{name} as a string", repr(params[name])[:80])
    for name, kind in ROPE_PARAMETERS.items():
        value = params.get(name)
        if value is None:
            continue
        if kind == "number":
            _number_field(where, name, value, bound=_MAGNITUDE.get(name, 1e6))
        elif kind == "count":
            _int_field(where, name, value)
        elif kind == "flag" and not isinstance(value, bool):
            raise fail(where, f"{name} as true or false", repr(value)[:80])
        elif kind == "factors" and (
            not isinstance(value, list)
            or len(value) > 1 << 16
            or not all(isinstance(v, (int, float)) and not isinstance(v, bool) and 0 < v < 1e6 for v in value)
        ):
            raise fail(where, f"{name} as a list of positive finite numbers", repr(value)[:80])


#: The scaling parameters ``str(RelativeConfig)`` lists: the numbers beyond the base and the fraction.
_SCALING_NUMBERS = tuple(
    k
    for k, kind in ROPE_PARAMETERS.items()
    if kind in ("number", "count") and k not in ("rope_theta", "partial_rotary_factor")
)


def family_for(config: Mapping[str, Any]) -> RelativeFamily | None:
    """The :data:`RELATIVE_FAMILIES` row whose ``model_types`` include the config's, else ``None``.

    ``-``/``_`` spellings are accepted as for every registry
    (:func:`~flax_posenc.conversion.families.model_type_spellings`).
    """
    return row_for_model_type(config.get("model_type"), RELATIVE_FAMILIES.values())


def config_path_of(source: str | os.PathLike) -> Path | None:
    """``config.json`` of SOURCE when it is a directory holding one or a ``*.json`` config path."""
    path = Path(os.fspath(source)).expanduser()
    if path.is_dir() and (path / CONFIG_NAME).is_file():
        return path / CONFIG_NAME
    if path.is_file() and path.suffix == ".json" and not path.name.endswith(".index.json"):
        return path
    return None


def relative_config_from_dict(
    config: Mapping[str, Any], *, source: str = "config", path: Path | None = None
) -> RelativeConfig:
    """Build the :class:`RelativeConfig` of a parsed ``config.json``.

    Raises:
      CheckpointError: not a RoPE/ALiBi family (the known ones are listed), a missing field,
        or parameters :class:`~flax_posenc.RopeConfig` rejects (one line naming the file).
    """
    where = path or source
    family = family_for(config)
    if family is None:
        known = sorted(t for f in RELATIVE_FAMILIES.values() for t in f.model_types)
        raise fail(where, f"a RoPE/ALiBi model_type ({', '.join(known)})", repr(config.get("model_type")))
    heads = _int_field(
        where, f"a positive head count in {' or '.join(family.heads_fields)}", _first(config, family.heads_fields)
    )
    scheme = family.scheme
    if family.alibi_flag is not None:
        flag = _get(config, family.alibi_flag)
        if flag is not None:
            scheme = "alibi" if flag else "rope"
    limit = _first(config, family.limit_fields) if family.limit_fields else None
    limit = family.limit_default if limit is None and family.limit_fields else limit
    if limit is not None:
        limit = _int_field(where, " or ".join(family.limit_fields), limit)
    try:
        if scheme == "alibi":
            bias_max = _get(config, family.alibi_bias_max_field) if family.alibi_bias_max_field else None
            bias_max = (
                family.alibi_bias_max_default
                if bias_max is None
                else _number_field(where, str(family.alibi_bias_max_field), bias_max, bound=1e6)
            )
            alibi = AlibiConfig(heads, float(bias_max), limit)
            return RelativeConfig(
                source, Path(where), family.name, str(config.get("model_type")), "alibi", heads, alibi=alibi
            )
        rope = _rope_from(config, family, heads, limit, where)
    except CheckpointError:
        raise
    except (ValueError, TypeError, ArithmeticError) as e:  # RopeConfig / AlibiConfig validation: one line
        raise fail(where, f"valid {family.name} {scheme} parameters", f"{type(e).__name__}: {e}"[:200]) from None
    return RelativeConfig(source, Path(where), family.name, str(config.get("model_type")), "rope", heads, rope=rope)


def _rope_from(config: Mapping[str, Any], family: RelativeFamily, heads: int, limit: int | None, where) -> RopeConfig:
    head_dim = config.get(family.head_dim_field) if family.head_dim_field else None
    if head_dim is None:
        hidden = _int_field(
            where,
            f"head_dim or a positive width in {' or '.join(family.hidden_fields)}",
            _first(config, family.hidden_fields),
        )
        if hidden < heads:
            raise fail(
                where,
                f"{' or '.join(family.hidden_fields)} at least the {heads} heads",
                f"{hidden} (head width {hidden / heads:g})",
            )
        head_dim = hidden // heads
    head_dim = _int_field(where, "head_dim", head_dim)
    params: dict[str, Any] = {
        "rope_theta": _first(config, family.theta_fields) or family.theta_default,
        "partial_rotary_factor": _first(config, family.partial_fields) or family.partial_default,
    }
    if family.rotary_dim_field and config.get(family.rotary_dim_field) is not None:
        rotary = _int_field(where, family.rotary_dim_field, config[family.rotary_dim_field])
        if rotary > head_dim:
            raise fail(where, f"{family.rotary_dim_field} at most the head width {head_dim}", str(rotary))
        params["partial_rotary_factor"] = rotary / head_dim
    for key in ("rope_scaling", "rope_parameters"):  # 4.x, then 5.x (wins)
        value = config.get(key)
        if value is None:
            continue
        if not isinstance(value, Mapping):
            raise fail(where, f"{key} as a JSON object", type(value).__name__)
        nested = sorted(k for k, v in value.items() if isinstance(v, Mapping))
        if nested:
            raise fail(where, f"one {key} dict for all layers", f"per-layer parameters for {', '.join(nested)}")
        params.update({k: v for k, v in value.items() if v is not None})
    kind = params.get("rope_type", params.get("type")) or "default"
    kind = dict(family.rope_type_aliases).get(kind, kind)
    params["rope_type"] = kind
    params.pop("type", None)
    _check_rope_params(where, params)
    scaling = scaling_of(kind)  # an unknown type: ValueError, one line listing the known ones
    trained = scaling.trained_length_field
    if trained is not None and trained != "max_position_embeddings" and config.get(trained) is not None:
        params[trained] = _int_field(where, trained, config[trained])  # top-level wins (Phi-3), as transformers
    missing = scaling.missing({**params, "max_position_embeddings": limit}, max_position_embeddings=limit)
    if missing:
        raise fail(
            where,
            f"{', '.join(missing)} in rope_parameters (rope_type {kind!r} needs {', '.join(scaling.required)})",
            "none" if len(missing) == 1 else "none of them",
        )
    return RopeConfig.from_rope_parameters(
        params, head_dim=int(head_dim), max_position_embeddings=limit, layout=family.layout
    )


def read_relative_config(source: str | os.PathLike) -> RelativeConfig:
    """The RoPE/ALiBi configuration of a checkpoint directory or a ``config.json`` path.

    Raises:
      CheckpointError: no ``config.json`` there, unreadable JSON, or see
        :func:`relative_config_from_dict`.
    """
    path = config_path_of(source)
    if path is None:
        raise fail(source, f"a checkpoint directory with {CONFIG_NAME} or a config.json path", "neither")
    return relative_config_from_dict(read_config(path), source=os.fspath(source), path=path)


def relative_source(source: str | os.PathLike) -> RelativeConfig | None:
    """``read_relative_config(source)`` when SOURCE's config names a RoPE/ALiBi family, else ``None``.

    What the command line asks first: a learned-table checkpoint (GPT-2, BERT, ...), a Hub id
    or a weights file returns ``None`` and is read as a table, as before.
    """
    path = config_path_of(source)
    if path is None:
        return None
    config = read_config(path)
    if family_for(config) is None:
        return None
    return relative_config_from_dict(config, source=os.fspath(source), path=path)


__all__ = [
    "RELATIVE_FAMILIES",
    "RelativeConfig",
    "RelativeFamily",
    "config_path_of",
    "family_for",
    "read_relative_config",
    "relative_config_from_dict",
    "relative_source",
]
