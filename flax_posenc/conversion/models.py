"""A checkpoint is a set of position mechanisms: the model registry, numpy only.

A model type maps to the *set* of its position mechanisms, each read by its own registry and
each with its own limit:

- ``learned``: an absolute table (:data:`~flax_posenc.conversion.families.FAMILIES`: key,
  length field, reserved rows, prefixes);
- ``rope`` (one per layer type) and ``nope`` (layers without any), ``alibi``, ``mrope``
  (the multimodal 3-D RoPE of Qwen2-VL, Qwen2.5-VL, Qwen3-VL, GLM-4V: :class:`~flax_posenc.MRopeConfig`)
  (:data:`~flax_posenc.conversion.relative_config.RELATIVE_FAMILIES`, transformers v5's
  ``rope_parameters``);
- ``relative_bias``: T5-style buckets, per stack
  (:data:`~flax_posenc.conversion.relative_bias.RELATIVE_BIAS_FAMILIES`);
- ``learned`` tables read for their limit and rows only
  (:data:`~flax_posenc.conversion.position_tables.TABLE_FAMILIES`), ``sinusoidal`` tables a model
  computes (:data:`~flax_posenc.conversion.computed_sinusoids.COMPUTED_SINUSOID_FAMILIES`),
  ``deberta_relative`` (:data:`~flax_posenc.conversion.deberta_relative.DEBERTA_FAMILIES`),
  ``grid``: a vision transformer's learned 2-D position grid
  (:data:`~flax_posenc.conversion.grid_tables.GRID_FAMILIES`), and
  ``none`` (:data:`NO_POSITION_MODEL_TYPES`: recurrent and state-space models);
- ``learned`` tables over audio frames whose limit is a duration (Whisper's encoder:
  :data:`~flax_posenc.conversion.audio_tables.AUDIO_TABLE_FAMILIES`); their ``unit`` is
  ``"seconds"``: token checks leave them out, ``check_seconds`` asks them.

:data:`MODEL_MECHANISMS` is derived from those registries (a model type listed in two of them,
like MPNet's learned table and relative bias, has two mechanisms): adding a model type is adding
it to one row, plus its conformance case (``tests/test_conformance.py``).
:func:`read_model` reads every mechanism of a checkpoint into a :class:`ModelRecord`; its
``limit`` is the smallest limit among them, and ``check_length(n)`` fails when any refuses.

>>> MODEL_MECHANISMS["mpnet"]
(('learned', 'mpnet'), ('relative_bias', 'mpnet'))
>>> MODEL_MECHANISMS["gpt2"]
(('learned', 'gpt2'),)
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Any, cast

from flax_posenc.conversion.audio_tables import AUDIO_TABLE_FAMILIES, read_audio_table
from flax_posenc.conversion.computed_sinusoids import COMPUTED_SINUSOID_FAMILIES, computed_sinusoid_from_dict
from flax_posenc.conversion.deberta_relative import DEBERTA_FAMILIES, deberta_relative_from_dict
from flax_posenc.conversion.families import FAMILIES, model_type_spellings
from flax_posenc.conversion.grid_tables import GRID_FAMILIES, GridSource, load_grid_table
from flax_posenc.conversion.learned_source import LearnedTableSource
from flax_posenc.conversion.load import load_position_table
from flax_posenc.conversion.position_tables import TABLE_FAMILIES, has_table, read_position_table, table_present
from flax_posenc.conversion.readers import fail
from flax_posenc.conversion.relative_bias import RELATIVE_BIAS_FAMILIES, relative_bias_source
from flax_posenc.conversion.relative_config import RELATIVE_FAMILIES, config_path_of, relative_configs_from_dict
from flax_posenc.limits import NoLimit

__all__ = [
    "MECHANISM_KINDS",
    "MODEL_MECHANISMS",
    "REFUSED_MODEL_TYPES",
    "is_refused",
    "Mechanism",
    "ModelRecord",
    "mechanisms_of",
    "read_model",
    "refusal",
]

#: The kinds a :class:`Mechanism` can be, in the order a record lists them.
MECHANISM_KINDS: tuple[str, ...] = (
    "learned",
    "sinusoidal",
    "rope",
    "nope",
    "alibi",
    "mrope",
    "relative_bias",
    "deberta_relative",
    "grid",
    "none",
)

#: ``registry -> {family name: row}``, in the order a model type's mechanisms are read.
_REGISTRIES: tuple[tuple[str, Mapping[str, Any]], ...] = (
    ("learned", FAMILIES),
    ("table", TABLE_FAMILIES),
    ("grid", GRID_FAMILIES),
    ("computed_sinusoid", COMPUTED_SINUSOID_FAMILIES),
    ("rope_alibi", RELATIVE_FAMILIES),
    ("relative_bias", RELATIVE_BIAS_FAMILIES),
    ("deberta_relative", DEBERTA_FAMILIES),
    ("audio_table", AUDIO_TABLE_FAMILIES),
)


#: Model types with no position encoding at all (recurrent and state-space models): nothing
#: limits their length.
NO_POSITION_MODEL_TYPES: tuple[str, ...] = (
    "mamba",
    "falcon_mamba",
    "rwkv",
    "xlstm",
    "jamba",
    "granitemoehybrid",
    "kimi_linear",
    "nemotron_h",
    "mamba2",
)


def _model_mechanisms() -> Mapping[str, tuple[tuple[str, str], ...]]:
    out: dict[str, list[tuple[str, str]]] = {t: [("none", "recurrent")] for t in NO_POSITION_MODEL_TYPES}
    for registry, rows in _REGISTRIES:
        for row in rows.values():
            for model_type in row.model_types:
                out.setdefault(model_type, []).append((registry, row.name))
    return MappingProxyType({k: tuple(v) for k, v in sorted(out.items())})


#: ``model_type -> ((registry, family), ...)``: every model type read, and where each of its
#: mechanisms is described. Derived from the mechanism registries (``_REGISTRIES``) and
#: :data:`NO_POSITION_MODEL_TYPES`.
MODEL_MECHANISMS: Mapping[str, tuple[tuple[str, str], ...]] = _model_mechanisms()

#: Model types known to carry a position mechanism this library does not read, and which.
REFUSED_MODEL_TYPES: Mapping[str, str] = MappingProxyType(
    {
        "gemma3n_text": "per-layer AltUp inputs are not read",
        "reformer": "axial position embeddings are not read",
        "funnel": "Funnel's relative attention with pooling is not read",
        "xlnet": "XLNet's two-stream relative sinusoids are not read",
        "glm_image_text": "multimodal 3-D RoPE (mrope_section) is not read",
        "hunyuan_vl_text": "multimodal 3-D RoPE (mrope_section) is not read",
        "hy_v4_vl_text": "multimodal 3-D RoPE (mrope_section) is not read",
        "cosmos3_edge_text": "multimodal 3-D RoPE (mrope_section) is not read",
        "bailing_hybrid": "its limit field (model_max_length) and hybrid MLA/linear layers are not read",
        "bros": "BROS's 2-D bounding-box position encodings are not read",
        "canine": "CANINE's character positions under downsampling are not read",
        "cpmant": "CPM-Ant's segment relative position bias is not read",
        "ctrl": "CTRL's computed sinusoid table (pos_encoding) is not read",
        "deepseek_v4": "DeepSeek-V4's compressed-attention layer types are not read",
        "glm5_next_text": "GLM-5-Next's DSA NoPE / RoPE layer split is not read",
        "led": "LED's encoder and decoder tables under attention-window padding are not read",
        "lilt": "LiLT's layout (bounding-box) position embeddings are not read",
        "lxmert": "LXMERT's positions are not verified (its forward needs visual features)",
        "nanochat": "nanochat's rotation matches neither the half nor the interleaved layout",
        "pegasus_x": "PEGASUS-X's computed sinusoids are not read",
        "prophetnet": "ProphetNet's n-gram stream positions are not read",
        "roformer": "RoFormer's sinusoidal rotary table is not read",
        "xmod": "X-MOD's positions are not verified (its forward needs language ids)",
        "vilt": "ViLT's positions are not verified (its forward needs pixel values)",
        "mistral_large4_text": (
            "its rotary module's learned alpha (LeRoPE: frequencies scaled by exp(alpha), a checkpoint "
            "tensor) is not read; its MLA attention rotates interleaved pairs"
        ),
        **{
            t: (
                "a hidden-state-conditioned relative position bias (rel_logits_proj over a window of "
                "rel_extent = 1024 backward distances) and a log position scaling of it "
                "(log_scaling_alpha, log_scaling_n_floor) are not read"
            )
            for t in ("inkling_text", "inkling2_text", "inkling2_loop_text")
        },
    }
)


def mechanisms_of(model_type: str | None) -> tuple[tuple[str, str], ...] | None:
    """``MODEL_MECHANISMS`` of ``model_type`` under any ``-``/``_`` spelling, else ``None``.

    >>> mechanisms_of("xlm_roberta")
    (('learned', 'xlm-roberta'),)
    """
    if not isinstance(model_type, str):
        return None
    for spelling in model_type_spellings(model_type):
        if spelling in MODEL_MECHANISMS:
            return MODEL_MECHANISMS[spelling]
    return None


def is_refused(model_type: object) -> bool:
    """Whether ``model_type`` (any ``-``/``_`` spelling) is in :data:`REFUSED_MODEL_TYPES`."""
    return isinstance(model_type, str) and any(s in REFUSED_MODEL_TYPES for s in model_type_spellings(model_type))


def refusal(model_type: object) -> str:
    """Why ``model_type`` is not read: its :data:`REFUSED_MODEL_TYPES` reason, or "not in the registry".

    >>> refusal("gemma3n_text")
    'gemma3n_text: per-layer AltUp inputs are not read'
    """
    if isinstance(model_type, str):
        for spelling in model_type_spellings(model_type):
            if spelling in REFUSED_MODEL_TYPES:
                return f"{spelling}: {REFUSED_MODEL_TYPES[spelling]}"
    return (
        f"{model_type!r}: its position mechanisms are not in the registry "
        f"({len(MODEL_MECHANISMS)} model types are read; `flax-posenc families` lists them)"
    )


_KIND_OF_SCHEME = {
    "learned": "learned",
    "sinusoidal": "sinusoidal",
    "sinusoidal_computed": "sinusoidal",
    "bucketed": "relative_bias",
}


@dataclasses.dataclass(frozen=True)
class Mechanism:
    """One position mechanism of a checkpoint.

    Attributes:
      kind: one of :data:`MECHANISM_KINDS`.
      record: what describes it: a :class:`~flax_posenc.conversion.LearnedTableSource`, a
        :class:`~flax_posenc.conversion.relative_config.RelativeConfig` (RoPE/ALiBi),
        a :class:`~flax_posenc.conversion.relative_config.NoPositionLayers` or a
        :class:`~flax_posenc.conversion.relative_bias.RelativeBiasSource`.
    """

    kind: str
    record: Any

    @classmethod
    def of(cls, record: Any) -> Mechanism:
        return cls(_KIND_OF_SCHEME.get(record.scheme, record.scheme), record)

    @property
    def limit(self) -> int | None:
        """Usable positions ``0 .. limit - 1`` this mechanism allows (``None``: no limit)."""
        return self.record.limit

    @property
    def rope(self):
        """The :class:`~flax_posenc.RopeConfig` of a ``rope`` mechanism, else ``None``."""
        return getattr(self.record, "rope", None)

    @property
    def alibi(self):
        """The :class:`~flax_posenc.AlibiConfig` of an ``alibi`` mechanism, else ``None``."""
        return getattr(self.record, "alibi", None)

    @property
    def table(self):
        """The :class:`~flax_posenc.conversion.PositionTable` of a learned/sinusoidal table, else ``None``."""
        return getattr(self.record, "table", None)

    @property
    def unit(self) -> str:
        """What its limit counts: ``"tokens"`` (positions of the token sequence) or ``"seconds"`` of audio."""
        return getattr(self.record, "unit", "tokens")

    @property
    def layers(self) -> tuple[int, ...] | None:
        """The layers it serves (``None``: every layer, or the input block)."""
        return getattr(self.record, "layers", None)

    @property
    def layer_type(self) -> str | None:
        return getattr(self.record, "layer_type", None)

    def describe_limit(self) -> str:
        """The one sentence naming this mechanism's limit."""
        return self.record.describe_limit()

    def check_length(self, length: int) -> tuple[bool, str]:
        return self.record.check_length(length)

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "limit": self.limit, "sentence": self.describe_limit(), **_details(self)}


def _details(m: Mechanism) -> dict[str, Any]:
    if m.kind == "grid":
        return {k: v for k, v in m.record.to_dict().items() if k not in ("source", "limit", "scheme")}
    if m.table is not None:
        t = m.table
        out = {"key": t.key, "family": t.family, "rows": t.rows, "dim": t.dim, "offset": t.offset, "unit": m.unit}
        if m.unit == "seconds":
            rec = m.record
            out.update(
                seconds=rec.seconds_limit,
                positions_per_second=rec.positions_per_second,
                sinusoid_error=rec.sinusoid_error,
            )
        return out
    return {k: v for k, v in m.record.to_dict().items() if k not in ("source", "config", "limit")}


@dataclasses.dataclass(frozen=True)
class ModelRecord:
    """Every position mechanism of one SOURCE; a :class:`~flax_posenc.conversion.SourceRecord`.

    Attributes:
      source: the SOURCE as given.
      model_type: the ``config.json`` ``model_type`` (``None`` without a config).
      mechanisms: the :class:`Mechanism` s, in :data:`MECHANISM_KINDS` order of reading.

    ``limit`` is the smallest limit among the token mechanisms (``None`` when none has one);
    ``check_length(n)`` fails when any of them refuses ``n`` positions; ``check_seconds(s)`` asks
    the audio ones (Whisper's encoder: ``unit == "seconds"``). Attributes of the first
    mechanism's record (``table``, ``rope``, ``report``, ...) are reachable on the record itself.
    """

    source: str
    model_type: str | None
    mechanisms: tuple[Mechanism, ...]

    def __post_init__(self):
        if not self.mechanisms:
            raise ValueError("mechanisms: expected at least one")

    @property
    def primary(self) -> Any:
        """The record of the mechanism that sets :attr:`limit` (else the first)."""
        return self._binding().record

    def _binding(self) -> Mechanism:
        tokens = [m for m in self.mechanisms if m.unit == "tokens"] or list(self.mechanisms)
        limited = [m for m in tokens if m.limit is not None]
        return min(limited, key=lambda m: cast(int, m.limit)) if limited else tokens[0]

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") or name in ("mechanisms", "source", "model_type"):
            raise AttributeError(name)
        return getattr(self.mechanisms[0].record, name)

    @property
    def family(self) -> str:
        return self.mechanisms[0].record.family

    @property
    def scheme(self) -> str:
        """The first mechanism's scheme, or ``"+"``-joined kinds when there are several."""
        if len(self.mechanisms) == 1:
            return self.mechanisms[0].record.scheme
        return "+".join(dict.fromkeys(m.kind for m in self.mechanisms))

    @property
    def key(self) -> str | None:
        return self.primary.key

    @property
    def limit(self) -> int | None:
        """The smallest limit among the mechanisms (``None``: no mechanism limits a length)."""
        return self._binding().limit

    def describe_limit(self) -> str:
        """The binding mechanism's sentence."""
        return self._binding().describe_limit()

    def check_length(self, length: int) -> tuple[bool, str]:
        """``(False, line)`` of the first mechanism refusing ``length``; else the binding one's verdict.

        Raises:
          CheckpointError: every mechanism counts seconds of audio (an encoder-only Whisper).
        """
        if all(m.unit != "tokens" for m in self.mechanisms):
            raise fail(self.source, "a model with token positions for --length", "audio positions only (use --seconds)")
        for m in self.mechanisms:
            if m.unit != "tokens":
                continue
            fits, line = m.check_length(length)
            if not fits:
                return fits, line
        return self._binding().check_length(length)

    def check_seconds(self, seconds: float) -> tuple[bool, str]:
        """``(fits, line)`` for ``seconds`` of audio, from every mechanism whose limit is a duration.

        Raises:
          CheckpointError: the model has no audio position table (one line naming SOURCE).
        """
        audio = [m for m in self.mechanisms if m.unit == "seconds"]
        if not audio:
            kinds = ", ".join(dict.fromkeys(m.kind for m in self.mechanisms))
            raise fail(
                self.source,
                "a model with an audio position table for --seconds (Whisper)",
                f"{kinds} positions only (use --length for tokens)",
            )
        verdicts = [m.record.check_seconds(seconds) for m in audio]
        return next((v for v in verdicts if not v[0]), verdicts[0])

    def to_dict(self) -> dict[str, Any]:
        """The first mechanism's report, the ``limit`` and every mechanism under ``mechanisms``."""
        out = dict(self.mechanisms[0].record.to_dict())
        out.update(
            model_type=self.model_type,
            limit=self.limit,
            limit_sentence=self.describe_limit(),
            mechanisms=[m.to_dict() for m in self.mechanisms],
        )
        return out

    def __str__(self) -> str:
        if len(self.mechanisms) == 1:
            return str(self.mechanisms[0].record)
        parts = [f"source:      {self.source}", f"model_type:  {self.model_type}"]
        for i, m in enumerate(self.mechanisms):
            parts.append(f"--- mechanism {i + 1} of {len(self.mechanisms)}: {m.kind}")
            parts.append(str(m.record))
        parts.append(f"=== limit:   {self.describe_limit()}")
        return "\n".join(parts)


def _learned(source: str | os.PathLike, family: str) -> list[Any]:
    return [LearnedTableSource(load_position_table(source, family=family))]


def _rope_alibi(config: Mapping[str, Any], source: str, path: Path) -> list[Any]:
    return list(relative_configs_from_dict(config, source=source, path=path))


def _relative_bias(source: str | os.PathLike, config_path: Path) -> list[Any]:
    record = relative_bias_source(
        source if config_path_of(source) is not None else config_path
    )  # a Hub id: its snapshot
    return [] if record is None else [record]


@dataclasses.dataclass(frozen=True)
class NoPositionEncoding(NoLimit):
    """A model without any position encoding (a recurrent or state-space model): no limit."""

    source: str
    model_type: str

    scheme = "none"
    key = None
    family = "recurrent"

    def describe_limit(self) -> str:
        return f"{self.model_type} model {self.source} has no limit (no position encoding: a recurrent state)"

    def to_dict(self) -> dict[str, Any]:
        return {"source": self.source, "model_type": self.model_type, "scheme": "none", "limit": None}

    def __str__(self) -> str:
        return f"source:      {self.source}\nscheme:      none (recurrent)\nlimit:       {self.describe_limit()}"


def read_model(source: str | os.PathLike, config: Mapping[str, Any], config_path: Path) -> ModelRecord | None:
    """Every mechanism of a checkpoint whose ``config.json`` (parsed: ``config``) names a model type
    in :data:`MODEL_MECHANISMS`, else ``None``.

    Raises:
      CheckpointError: a mechanism cannot be read (one line naming the file), or mechanisms that
        must agree do not (a table's rows against its length field).
    """
    plan = mechanisms_of(config.get("model_type"))
    if plan is None:
        return None
    text = os.fspath(source)
    records: list[Any] = []
    for registry, name in plan:
        if registry == "learned":
            records += _learned(source, name)
        elif registry == "table":
            if has_table(name, config, config_path) and (
                not TABLE_FAMILIES[name].optional or table_present(source, name)
            ):
                records.append(LearnedTableSource(read_position_table(source, name, config)))
        elif registry == "grid":
            records.append(GridSource(load_grid_table(source, family=name)))
        elif registry == "computed_sinusoid":
            records.append(computed_sinusoid_from_dict(config, name, text, config_path))
        elif registry == "audio_table":
            records.append(read_audio_table(source, name, config))
        elif registry == "deberta_relative":
            records += deberta_relative_from_dict(config, text, config_path)
        elif registry == "none":
            records.append(NoPositionEncoding(text, str(config.get("model_type"))))
        elif registry == "rope_alibi":
            records += _rope_alibi(config, text, config_path)
        else:
            records += _relative_bias(source, config_path)
    if not records:
        raise fail(config_path, f"the position mechanisms of {config.get('model_type')}", "none readable")
    return ModelRecord(text, str(config.get("model_type")), tuple(Mechanism.of(r) for r in records))
