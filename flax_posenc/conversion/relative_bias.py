"""Learned relative position bias tables (T5-style buckets) from Hugging Face checkpoints, numpy only.

Families are data (:data:`RELATIVE_BIAS_FAMILIES`, one row each). Facts from transformers 5.x
(``models/{t5,mt5,umt5,longt5,mpnet}/modeling_*.py``):

- t5, mt5: one ``(relative_attention_num_buckets, num_heads)`` table per stack, in block 0
  (``{stack}.block.0.layer.0.SelfAttention.relative_attention_bias.weight``); every layer of the
  stack reuses it. Encoder bidirectional, decoder causal.
- umt5: the same key in *every* block: one table per layer.
- longt5: encoder block 0 ``LocalSelfAttention`` or ``TransientGlobalSelfAttention``
  (``encoder_attention_type``) -- its ``relative_attention_bias``, not the transient-global
  ``global_relative_attention_bias``; decoder as T5.
- pop2piano: T5's keys; pix2struct_text_model: a causal decoder alone, its table in layer 0's
  ``self_attention.attention`` (see the block that adds them below).
- mpnet: one encoder table ``encoder.relative_attention_bias.weight`` (``mpnet.`` prefix in task
  heads) of ``relative_attention_num_buckets`` rows, but ``MPNetEncoder.compute_position_bias``
  is called with its defaults: **32 buckets, max_distance 128, bidirectional, whatever the
  config says** (a 64-row table uses its first 32 rows). No decoder.

The bucket fields: ``relative_attention_num_buckets`` and ``relative_attention_max_distance``
(defaults 32 and 128). A SOURCE is whatever :func:`~flax_posenc.conversion.sources.open_checkpoint`
resolves (directory, ``.safetensors``/``.bin`` file, Hub id from the cache); only the one table
is read. Without ``config.json`` the family comes from key names and the bucket fields take
their defaults (the table's rows for ``num_buckets``).

>>> sorted(RELATIVE_BIAS_FAMILIES)
['longt5', 'mpnet', 'mt5', 'pix2struct_text', 'pop2piano', 't5', 'umt5']
>>> RELATIVE_BIAS_FAMILIES["mpnet"].num_buckets, RELATIVE_BIAS_FAMILIES["umt5"].per_layer
(32, True)
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

import numpy as np

from flax_posenc.bounds import MAX_DISTANCE
from flax_posenc.conversion.families import row_for_model_type
from flax_posenc.conversion.readers import fail, nearest_keys, read_float
from flax_posenc.conversion.relative_config import config_path_of
from flax_posenc.conversion.sources import open_checkpoint, read_config
from flax_posenc.relative_bias_config import DEFAULT_MAX_DISTANCE, DEFAULT_NUM_BUCKETS, BucketConfig

STACKS = ("encoder", "decoder")


@dataclasses.dataclass(frozen=True)
class RelativeBiasFamily:
    """One family's relative attention bias, as data.

    Attributes:
      name: our name; model_types: ``config.json`` ``model_type`` values that mean it.
      keys: ``stack -> key templates`` tried in order (``{layer}`` is filled in); a stack absent
        here does not exist in the family (MPNet has no decoder).
      prefixes: key prefixes tried (task heads: ``mpnet.``).
      per_layer: every layer has its own table (UMT5); else block 0's table serves every layer.
      layers_fields: ``stack -> config fields`` holding its layer count (first present wins).
      heads_fields: config fields holding the head count.
      num_buckets, max_distance: fixed by the modeling code (MPNet: 32/128), else ``None``: read
        from ``relative_attention_num_buckets`` / ``relative_attention_max_distance``.
    """

    name: str
    model_types: tuple[str, ...]
    keys: Mapping[str, tuple[str, ...]]
    prefixes: tuple[str, ...] = ("",)
    per_layer: bool = False
    layers_fields: Mapping[str, tuple[str, ...]] = dataclasses.field(
        default_factory=lambda: {"encoder": ("num_layers",), "decoder": ("num_decoder_layers", "num_layers")}
    )
    heads_fields: tuple[str, ...] = ("num_heads",)
    num_buckets: int | None = None
    max_distance: int | None = None


_T5_KEYS = {
    "encoder": ("encoder.block.{layer}.layer.0.SelfAttention.relative_attention_bias.weight",),
    "decoder": ("decoder.block.{layer}.layer.0.SelfAttention.relative_attention_bias.weight",),
}

RELATIVE_BIAS_FAMILIES: Mapping[str, RelativeBiasFamily] = MappingProxyType(
    {
        f.name: f
        for f in (
            RelativeBiasFamily("t5", ("t5", "switch_transformers"), _T5_KEYS),
            RelativeBiasFamily("mt5", ("mt5",), _T5_KEYS),
            RelativeBiasFamily("umt5", ("umt5",), _T5_KEYS, per_layer=True),
            RelativeBiasFamily(
                "longt5",
                ("longt5",),
                {
                    "encoder": (
                        "encoder.block.{layer}.layer.0.LocalSelfAttention.relative_attention_bias.weight",
                        "encoder.block.{layer}.layer.0.TransientGlobalSelfAttention.relative_attention_bias.weight",
                    ),
                    "decoder": _T5_KEYS["decoder"],
                },
            ),
            RelativeBiasFamily(
                "mpnet",
                ("mpnet",),
                {"encoder": ("encoder.relative_attention_bias.weight",)},
                prefixes=("", "mpnet."),
                layers_fields={"encoder": ("num_hidden_layers",)},
                heads_fields=("num_attention_heads",),
                num_buckets=DEFAULT_NUM_BUCKETS,
                max_distance=DEFAULT_MAX_DISTANCE,
            ),
        )
    }
)


# issue 36: T5's buckets in other models (one block of its own).
# - pop2piano (models/pop2piano/modeling_pop2piano.py): T5's encoder-decoder, T5's keys (block 0 of each
#   stack, bidirectional encoder, causal decoder).
# - pix2struct_text_model (models/pix2struct/modeling_pix2struct.py): a decoder alone, its table in layer 0's
#   ``self_attention.attention`` (``decoder.`` under Pix2StructForConditionalGeneration), buckets causal
#   (``compute_bias`` passes ``bidirectional=False``).
RELATIVE_BIAS_FAMILIES = MappingProxyType(
    {
        **RELATIVE_BIAS_FAMILIES,
        **{
            f.name: f
            for f in (
                RelativeBiasFamily("pop2piano", ("pop2piano",), _T5_KEYS),
                RelativeBiasFamily(
                    "pix2struct_text",
                    ("pix2struct_text_model",),
                    {"decoder": ("layer.{layer}.self_attention.attention.relative_attention_bias.weight",)},
                    prefixes=("", "decoder."),
                    layers_fields={"decoder": ("num_layers",)},
                ),
            )
        },
    }
)


@dataclasses.dataclass(frozen=True)
class RelativeBiasTable:
    """A learned relative position bias table and how to bucket positions for it.

    Attributes:
      weights: ``(rows, heads)`` as stored (float16/32/64; bfloat16 upcast to float32);
        ``rows == num_buckets`` except MPNet with a config asking for more rows than it uses.
      buckets: the :class:`~flax_posenc.relative_bias_config.BucketConfig` the model applies.
      family, key, stack, layer, source: where it came from (``layer`` as asked; for a shared
        table, ``key`` names block 0).
    """

    weights: np.ndarray
    buckets: BucketConfig
    family: str
    key: str
    stack: str = "encoder"
    layer: int = 0
    source: str = ""

    @property
    def num_buckets(self) -> int:
        return self.buckets.num_buckets

    @property
    def max_distance(self) -> int:
        return self.buckets.max_distance

    @property
    def bidirectional(self) -> bool:
        return self.buckets.bidirectional

    @property
    def num_heads(self) -> int:
        return int(self.weights.shape[1])

    def __repr__(self) -> str:
        return (
            f"RelativeBiasTable(family={self.family!r}, stack={self.stack!r}, layer={self.layer}, "
            f"key={self.key!r}, shape={tuple(self.weights.shape)}, num_buckets={self.num_buckets}, "
            f"max_distance={self.max_distance}, bidirectional={self.bidirectional}, source={self.source!r})"
        )


def _family_from_keys(keys: set[str], where: object) -> RelativeBiasFamily:
    for fam in RELATIVE_BIAS_FAMILIES.values():
        if fam.name == "mt5":  # same keys as t5; needs config.json to tell apart
            continue
        hits = [
            p + t.format(layer=0)
            for p in fam.prefixes
            for t in fam.keys.get("encoder", ())
            if p + t.format(layer=0) in keys
        ]
        if hits:
            second = [p + t.format(layer=1) for p in fam.prefixes for t in fam.keys.get("encoder", ())]
            if fam.name == "t5" and any(k in keys for k in second):
                return RELATIVE_BIAS_FAMILIES["umt5"]
            return fam
    raise fail(
        where,
        "a relative attention bias table (T5/mT5/UMT5/LongT5/MPNet keys)",
        f"none; nearest keys: {nearest_keys('encoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight', keys) or 'none'}",
    )


def family_for(config: Mapping[str, Any]) -> RelativeBiasFamily | None:
    """The :data:`RELATIVE_BIAS_FAMILIES` row of a config's ``model_type`` (``-``/``_`` spellings
    accepted, as for every registry), else ``None``."""
    return row_for_model_type(config.get("model_type"), RELATIVE_BIAS_FAMILIES.values())


def _int_field(config: Mapping[str, Any], fields: tuple[str, ...], where: object, what: str) -> int | None:
    for f in fields:
        value = config.get(f)
        if value is None:
            continue
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise fail(where, f"a positive integer {f} ({what})", repr(value))
        return value
    return None


def load_relative_bias(
    source: str | os.PathLike, *, stack: str = "encoder", layer: int = 0, family: str | None = None
) -> RelativeBiasTable:
    """Load the learned relative position bias of a T5/mT5/UMT5/LongT5/MPNet checkpoint.

    Args:
      source: checkpoint directory, ``.safetensors``/``.bin`` file or Hub id (local cache first).
      stack: ``"encoder"`` (bidirectional buckets) or ``"decoder"`` (causal; T5-like families).
      layer: which layer's table; UMT5 has one per layer, the others share block 0's (any
        ``layer`` in range returns it).
      family: force a family instead of reading ``model_type`` (or guessing from key names).

    Returns:
      :class:`RelativeBiasTable` with ``weights`` ``(num_buckets, heads)`` and the bucket config.

    Raises:
      CheckpointError: one line naming the file, what was expected and what was found: unreadable
        source, unknown family, a stack the family or checkpoint lacks (T5EncoderModel has no
        decoder), ``layer`` out of range, the key absent (nearest keys shown), a table whose shape
        disagrees with the config (buckets x heads), NaN/Inf, bad bucket fields.

    tab = load_relative_bias("path/to/t5-small", stack="decoder")
    tab.weights.shape, tab.bidirectional
    ((32, 8), False)
    """
    text = os.fspath(source)
    if stack not in STACKS:
        raise fail(text, "stack 'encoder' or 'decoder'", repr(stack))
    if not isinstance(layer, int) or isinstance(layer, bool):
        raise fail(text, "an integer layer", repr(layer))
    if family is not None and family not in RELATIVE_BIAS_FAMILIES:
        raise fail(text, f"a relative-bias family ({', '.join(RELATIVE_BIAS_FAMILIES)})", repr(family))
    ckpt = open_checkpoint(source, require_config=False)
    cfg = ckpt.config
    config_where = ckpt.config_path or ckpt.weights_path
    keys = set(ckpt.reader.keys())
    fam = RELATIVE_BIAS_FAMILIES[family] if family is not None else family_for(cfg)
    if fam is None:
        if cfg.get("model_type") is not None:
            raise fail(
                config_where,
                f"a model_type with a relative attention bias "
                f"({', '.join(t for f in RELATIVE_BIAS_FAMILIES.values() for t in f.model_types)})",
                repr(cfg.get("model_type")),
            )
        fam = _family_from_keys(keys, ckpt.weights_path)
    if stack not in fam.keys:
        raise fail(text, f"stack 'encoder' ({fam.name} has no {stack} stack)", repr(stack))

    layers = _int_field(cfg, fam.layers_fields.get(stack, ()), config_where, f"{stack} layers")
    if layer < 0 or (layers is not None and layer >= layers):
        bound = f"0..{layers - 1} ({layers} {stack} layers)" if layers is not None else "a non-negative layer"
        raise fail(config_where, f"layer in {bound}", f"layer={layer}")
    block = layer if fam.per_layer else 0
    candidates = [p + t.format(layer=block) for p in fam.prefixes for t in fam.keys[stack]]
    key = next((k for k in candidates if k in keys), None)
    if key is None:
        has_stack = any(k.startswith(tuple(p + stack + "." for p in fam.prefixes)) for k in keys)
        if not has_stack:
            raise fail(
                ckpt.weights_path,
                f"a {stack} stack ({candidates[0]})",
                f"no {stack}.* keys (an encoder-only checkpoint?)",
            )
        raise fail(
            ckpt.weights_path,
            f"the {fam.name} {stack} table {candidates[0]!r}",
            f"no such key; nearest keys: {nearest_keys(candidates[0], keys) or 'none'}",
        )

    heads = _int_field(cfg, fam.heads_fields, config_where, "attention heads")
    weights = read_float(ckpt.reader, key, ndim=2, what="relative attention bias", dim=heads)
    rows = int(weights.shape[0])
    where = f"{ckpt.reader.file_of(key)}:{key}"
    config_buckets = _int_field(cfg, ("relative_attention_num_buckets",), config_where, "buckets")
    if config_buckets is not None and config_buckets != rows:
        raise fail(
            where,
            f"({config_buckets}, heads) as relative_attention_num_buckets={config_buckets} in {config_where} says",
            f"shape {tuple(weights.shape)}",
        )
    num_buckets = fam.num_buckets or config_buckets or rows
    if rows < num_buckets:
        raise fail(
            where,
            f"at least {num_buckets} rows ({fam.name} uses {num_buckets} buckets)",
            f"shape {tuple(weights.shape)}",
        )
    max_distance = (
        fam.max_distance
        or _int_field(cfg, ("relative_attention_max_distance",), config_where, "max distance")
        or DEFAULT_MAX_DISTANCE
    )
    if max_distance > MAX_DISTANCE:  # name the config's field, not BucketConfig's argument
        raise fail(config_where, f"relative_attention_max_distance at most {MAX_DISTANCE}", repr(max_distance)[:80])
    try:
        buckets = BucketConfig(num_buckets, max_distance, bidirectional=(stack == "encoder"))
    except ValueError as e:
        raise fail(config_where, "valid relative_attention_num_buckets/max_distance", str(e)) from None
    return RelativeBiasTable(weights, buckets, fam.name, key, stack, layer, text)


# ----------------------------------------------------------------------------- the command line


@dataclasses.dataclass(frozen=True)
class RelativeBiasSource:
    """What ``flax-posenc inspect/check/plot`` report for a T5-like or MPNet checkpoint.

    Implements :class:`~flax_posenc.conversion.source_record.SourceRecord` (``source``,
    ``family``, ``scheme``, ``key``, ``limit``, ``describe_limit``, ``check_length``, ``to_dict``,
    ``str``). ``limit`` is ``None``: no length is refused; what a length
    loses is said by :meth:`check_length`.
    """

    tables: tuple[RelativeBiasTable, ...]
    source: str
    scheme: str = "bucketed"

    @property
    def family(self) -> str:
        return self.tables[0].family

    @property
    def limit(self) -> None:
        return None

    @property
    def num_heads(self) -> int:
        return self.tables[0].num_heads

    @property
    def key(self) -> str:
        """The encoder table's tensor name."""
        return self.tables[0].key

    def describe_limit(self) -> str:
        """No hard limit: the phrase names where distances stop being told apart."""
        far = ", ".join(f"{t.stack} >= {t.buckets.saturation_distance}" for t in self.tables)
        return (
            f"{self.family} relative bias of {self.source} has no limit (every distance has a bucket; "
            f"distances share the last bucket from {far})"
        )

    def check_length(self, length: int) -> tuple[bool, str]:
        """Always fits (exit 0); the line says how many distances fall past the saturation distance."""
        parts = []
        for t in self.tables:
            b = t.buckets
            far = b.beyond(length)
            kind = "bidirectional" if b.bidirectional else "causal"
            if far["distances"]:
                parts.append(
                    f"{t.stack} ({kind}): {far['distances']} of the distances 0..{length - 1} are >= "
                    f"{b.saturation_distance} and share the last bucket, indistinguishable "
                    f"({100 * far['pair_fraction']:.1f}% of query-key pairs)"
                )
            else:
                parts.append(
                    f"{t.stack} ({kind}): every distance 0..{length - 1} is below {b.saturation_distance}, "
                    f"where the last bucket begins"
                )
        return True, (
            f"ok: {length} positions have a bucket (no hard limit: {self.family} relative bias of "
            f"{self.source}); " + "; ".join(parts)
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "family": self.family,
            "scheme": self.scheme,
            "num_heads": self.num_heads,
            "limit": None,
            "stacks": {
                t.stack: {
                    "key": t.key,
                    "shape": list(t.weights.shape),
                    "dtype": str(t.weights.dtype),
                    **t.buckets.to_dict(),
                }
                for t in self.tables
            },
        }

    def __str__(self) -> str:
        lines = [
            f"source:      {self.source}",
            f"family:      {self.family}",
            "scheme:      learned relative position bias (T5 buckets)",
            f"heads:       {self.num_heads}",
        ]
        for t in self.tables:
            b = t.buckets
            lines += [
                f"{t.stack}:",
                f"  key:                 {t.key} {tuple(t.weights.shape)} {t.weights.dtype}",
                f"  buckets:             {b.num_buckets} ({'bidirectional' if b.bidirectional else 'causal'}, "
                f"{b.per_direction} per direction)",
                f"  exact distances:     0..{b.exact_limit} (one bucket each)",
                f"  indistinguishable:   every distance >= {b.saturation_distance} (last bucket; "
                f"max_distance {b.max_distance})",
            ]
        lines.append(
            "limit:       none (every distance has a bucket); past the saturation distance "
            "positions are indistinguishable"
        )
        return "\n".join(lines)


def relative_bias_source(source: str | os.PathLike) -> RelativeBiasSource | None:
    """The encoder (and decoder, when present) tables of SOURCE when its ``config.json`` names a
    T5-like or MPNet family, else ``None`` (what the command line asks before reading a table)."""
    path = config_path_of(source)
    if path is None:
        return None
    fam = family_for(read_config(path))
    if fam is None:
        return None
    root = path.parent  # a config.json path: the weights lie beside it
    if "encoder" not in fam.keys:  # a decoder alone (Pix2Struct's text model)
        tables = [load_relative_bias(root, stack="decoder")]
    else:
        tables = [load_relative_bias(root)]
    if (
        "encoder" in fam.keys
        and "decoder" in fam.keys
        and any(k.startswith("decoder.") for k in open_checkpoint(root).reader.keys())
    ):
        tables.append(load_relative_bias(root, stack="decoder"))
    text = os.fspath(source)
    return RelativeBiasSource(tuple(dataclasses.replace(t, source=text) for t in tables), text)


__all__ = [
    "RELATIVE_BIAS_FAMILIES",
    "RelativeBiasFamily",
    "RelativeBiasSource",
    "RelativeBiasTable",
    "family_for",
    "load_relative_bias",
    "relative_bias_source",
]
