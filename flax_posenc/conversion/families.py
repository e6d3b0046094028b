"""Model families as data: one frozen row per family, no per-family code.

A row says where a family keeps its input (embedding) block in a Hugging Face checkpoint and
how that block counts positions. Every tensor name is *relative to a prefix* that is detected
in the checkpoint, not assumed (``transformer.`` for ``GPT2LMHeadModel``, none for
``GPT2Model``; ``bert.``/``roberta.``/...; ``model.decoder.`` for ``OPTForCausalLM``,
``decoder.`` for ``OPTModel``). A relative name starting with ``../`` climbs one level above the
prefix (BART's word embeddings live in ``model.shared.weight``, beside ``model.encoder.``).

Adding a family is adding a row to :data:`FAMILIES`.

Facts checked against transformers 5.x (``models/*/modeling_*.py``):

- GPT-2 / GPT-Neo: ``wte + wpe``; positions ``0..n-1``; no LayerNorm in the input block.
  The limit is ``n_positions`` (GPT-2; old configs also carry ``n_ctx``) or
  ``max_position_embeddings`` (GPT-Neo); the table has exactly that many rows.
- BERT / ELECTRA: ``LayerNorm(word + position + token_type)``; ELECTRA's block works in
  ``embedding_size`` and its embeddings output is taken *before* ``embeddings_project``.
  ``max_position_embeddings`` = rows.
- DistilBERT: like BERT without token types; its LayerNorm epsilon is hard-coded ``1e-12``.
- RoBERTa / XLM-RoBERTa: ``padding_idx = config.pad_token_id`` (default 1); position of a
  non-pad token = ``padding_idx + (count of non-pad tokens up to and including it)``, pad tokens
  get row ``padding_idx``. So the offset is ``pad_token_id + 1`` (2 by default), and
  ``max_position_embeddings`` counts the reserved rows (514 for a 512-token model).
- MPNet: the same rule, but ``padding_idx`` is hard-coded to 1 whatever the config says.
- OPT: ``OPTLearnedPositionalEmbedding`` has ``max_position_embeddings + 2`` rows; position
  ids are ``cumsum(attention_mask) * attention_mask - 1`` and the lookup adds 2 (padding ->
  row 1). No LayerNorm, no scale. ``project_in`` exists when ``word_embed_proj_dim !=
  hidden_size``.
- BART: ``BartLearnedPositionalEmbedding`` has ``max_position_embeddings + 2`` rows; position
  ``i`` -> row ``i + 2``; ``layernorm_embedding`` (torch default epsilon 1e-5); word embeddings
  scaled by ``sqrt(d_model)`` when ``scale_embedding``.

>>> from flax_posenc.conversion.families import FAMILIES
>>> FAMILIES["roberta"].offset, FAMILIES["gpt2"].length_field
(2, 'n_positions')
"""

from __future__ import annotations

import dataclasses
import fnmatch
from collections.abc import Iterable, Mapping
from types import MappingProxyType
from typing import Any, NamedTuple

from flax_posenc.conversion.readers import nearest_keys
from flax_posenc.errors import CheckpointError

#: LayerNorm parameter spellings: (scale, bias). Old TF-converted BERTs use gamma/beta.
LAYER_NORM_SPELLINGS: tuple[tuple[str, str], ...] = (("weight", "bias"), ("gamma", "beta"))

#: Names of non-trainable buffers that some checkpoints store; never loaded as weights.
BUFFER_SUFFIXES: tuple[str, ...] = ("position_ids", "token_type_ids", "attn.bias", "attn.masked_bias", "masked_bias")


@dataclasses.dataclass(frozen=True)
class Family:
    """One model family's learned position table (and, with ``word_keys``, its whole input block), as data.

    The one row type of learned tables: :data:`FAMILIES` (whole input blocks that
    ``TransformerInput`` reproduces) and
    :data:`~flax_posenc.conversion.position_tables.TABLE_FAMILIES` (tables read for their limit
    and rows only: no ``word_keys``) hold rows of it; one offset rule (:func:`table_offset`) and
    one rows-against-config check (:func:`check_config_length`) serve both.

    Attributes:
      name: our name for the family (``"gpt2"``, ``"bert"``, ...).
      model_types: ``config.json`` ``model_type`` values that mean this family.
      length_field: the config field holding the position limit.
      extra_length_fields: more config fields that mirror it and are updated on export when
        present (GPT-2's legacy ``n_ctx``).
      length_counts_offset: whether the config value counts the reserved rows (RoBERTa: 514
        = rows) or not (OPT/BART: ``max_position_embeddings`` = rows - 2).
      position_key, word_keys, token_type_key, layer_norm_key: tensor names relative to the
        prefix; ``word_keys`` are candidates tried in order; ``layer_norm_key`` is the module
        name (``.weight``/``.bias`` or ``.gamma``/``.beta`` appended); ``None`` = absent.
      prefixes: candidate prefixes, tried in order before a generic search.
      detect_patterns: ``fnmatch`` patterns (relative to the prefix) whose presence singles
        the family out when only key names are known (no ``config.json``).
      reject_patterns: patterns whose presence rules the family out in that case (an OPT
        decoder has no ``layernorm_embedding``; a BART decoder does).
      offset: reserved leading rows of the position table.
      offset_from_pad: the offset is ``pad_token_id + 1`` (RoBERTa-style padding positions).
      positions_from: ``"index"``, ``"non_padding_ids"`` or ``"attention_mask"``.
      pad_token_id: fixed padding id (MPNet hard-codes 1) or ``None`` to read the config.
      default_pad_token_id: used when the config has no ``pad_token_id``.
      layer_norm_eps_field, layer_norm_eps: config field and its default (a field of ``None``
        means the epsilon is fixed by the modeling code).
      embed_scale_flag, embed_scale_dim_field: config switch and width field for the
        ``sqrt(dim)`` word-embedding scale (BART's ``scale_embedding``/``d_model``).
      refuse_keys: tensors (relative) whose presence means the block cannot be represented
        (OPT's ``project_in``).
      refuse_unequal: ``(field, field)`` config pairs that must agree when both are set, else the
        block has a projection and is refused (OPT: ``word_embed_proj_dim`` vs ``hidden_size``).
      shared_length_keys: other position tables (relative) sized by the same config field
        (BART's decoder table); an export may not change the row count while they disagree.
      config_section: the sub-config holding ``length_field`` in a composite checkpoint (the
        text tower of ``clip``/``siglip``: ``"text_config"``), else ``None``.
      present_flag, present_default: a config flag without which the model has no such table
        (DeBERTa's ``position_biased_input``) and its default.
      optional: the checkpoint may hold no such tensor at all (an encoder-only Whisper checkpoint,
        ``WhisperForAudioClassification``, has no decoder table): then the mechanism is absent.
      tower: the part of a composite model the table serves (``"text"``; ``"audio"`` for
        Whisper's encoder): a :class:`~flax_posenc.conversion.models.Mechanism`'s ``tower``.
      window_field: a config field (an int, or one per layer) the model pads its input up to a
        multiple of (LED's encoder: the largest ``attention_window``); the table's usable rows must
        be a multiple of it, else the padded limit would lie below the table and the read is refused.
    """

    name: str
    model_types: tuple[str, ...]
    length_field: str = "max_position_embeddings"
    position_key: str = "embeddings.position_embeddings.weight"
    word_keys: tuple[str, ...] = ()
    prefixes: tuple[str, ...] = ()
    extra_length_fields: tuple[str, ...] = ()
    length_counts_offset: bool = True
    token_type_key: str | None = None
    layer_norm_key: str | None = None
    detect_patterns: tuple[str, ...] = ()
    reject_patterns: tuple[str, ...] = ()
    offset: int = 0
    offset_from_pad: bool = False
    positions_from: str = "index"
    pad_token_id: int | None = None
    default_pad_token_id: int | None = None
    layer_norm_eps_field: str | None = "layer_norm_eps"
    layer_norm_eps: float = 1e-12
    embed_scale_flag: str | None = None
    embed_scale_dim_field: str | None = None
    refuse_keys: tuple[str, ...] = ()
    refuse_unequal: tuple[tuple[str, str], ...] = ()
    shared_length_keys: tuple[str, ...] = ()
    config_section: str | None = None
    present_flag: str | None = None
    present_default: bool = True
    optional: bool = False
    tower: str = "text"
    window_field: str | None = None

    @property
    def key_suffix(self) -> str:
        """``position_key``: the tensor's name without the checkpoint's prefix."""
        return self.position_key

    @property
    def length_label(self) -> str:
        """``length_field`` as a path in ``config.json`` (``text_config.max_position_embeddings``)."""
        return f"{self.config_section}.{self.length_field}" if self.config_section else self.length_field

    def config_length(self, rows: int, offset: int) -> int:
        """The value ``length_field`` must hold for a table of ``rows`` rows."""
        return rows if self.length_counts_offset else rows - offset

    def expected_rows(self, declared: int, offset: int | None = None) -> int:
        """The rows a table must have for ``length_field`` = ``declared`` (the inverse of
        :meth:`config_length`): ``declared`` when the field counts the reserved rows
        (RoBERTa: 514), else ``declared + offset`` (BART: ``declared + 2``)."""
        return declared if self.length_counts_offset else declared + (self.offset if offset is None else offset)


_BERT_EMB: dict[str, Any] = dict(
    position_key="embeddings.position_embeddings.weight",
    word_keys=("embeddings.word_embeddings.weight",),
    layer_norm_key="embeddings.LayerNorm",
    length_field="max_position_embeddings",
)

_ROWS: tuple[Family, ...] = (
    Family(
        name="gpt2",
        model_types=("gpt2",),
        length_field="n_positions",
        extra_length_fields=("n_ctx",),
        position_key="wpe.weight",
        word_keys=("wte.weight",),
        prefixes=("transformer.", ""),
        detect_patterns=("h.*.attn.c_attn.*",),
        layer_norm_eps_field=None,
    ),
    Family(
        name="gpt_neo",
        model_types=("gpt_neo",),
        length_field="max_position_embeddings",
        position_key="wpe.weight",
        word_keys=("wte.weight",),
        prefixes=("transformer.", ""),
        detect_patterns=("h.*.attn.attention.*",),
        layer_norm_eps_field=None,
    ),
    Family(
        name="bert",
        model_types=("bert",),
        token_type_key="embeddings.token_type_embeddings.weight",
        prefixes=("bert.", ""),
        **_BERT_EMB,
    ),
    Family(
        name="roberta",
        model_types=("roberta",),
        token_type_key="embeddings.token_type_embeddings.weight",
        prefixes=("roberta.", ""),
        offset=2,
        offset_from_pad=True,
        positions_from="non_padding_ids",
        default_pad_token_id=1,
        **_BERT_EMB,
    ),
    Family(
        name="xlm-roberta",
        model_types=("xlm-roberta",),
        token_type_key="embeddings.token_type_embeddings.weight",
        prefixes=("roberta.", "xlm_roberta.", ""),
        offset=2,
        offset_from_pad=True,
        positions_from="non_padding_ids",
        default_pad_token_id=1,
        **_BERT_EMB,
    ),
    Family(
        name="mpnet",
        model_types=("mpnet",),
        prefixes=("mpnet.", ""),
        detect_patterns=("encoder.relative_attention_bias.*",),
        offset=2,
        positions_from="non_padding_ids",
        pad_token_id=1,
        default_pad_token_id=1,
        **_BERT_EMB,
    ),
    Family(
        name="distilbert",
        model_types=("distilbert",),
        prefixes=("distilbert.", ""),
        detect_patterns=("transformer.layer.*",),
        layer_norm_eps_field=None,
        **_BERT_EMB,
    ),
    Family(
        name="electra",
        model_types=("electra",),
        token_type_key="embeddings.token_type_embeddings.weight",
        prefixes=("electra.", "discriminator.", "generator.", ""),
        detect_patterns=("embeddings_project.*",),
        **_BERT_EMB,
    ),
    Family(
        name="opt",
        model_types=("opt",),
        length_field="max_position_embeddings",
        length_counts_offset=False,
        position_key="embed_positions.weight",
        word_keys=("embed_tokens.weight",),
        prefixes=("model.decoder.", "decoder.", ""),
        detect_patterns=("layers.*.self_attn_layer_norm.*",),
        reject_patterns=("layernorm_embedding.*", "../encoder.*"),
        offset=2,
        positions_from="attention_mask",
        default_pad_token_id=1,
        layer_norm_eps_field=None,
        refuse_keys=("project_in.weight",),
        refuse_unequal=(("word_embed_proj_dim", "hidden_size"),),
    ),
    Family(
        name="bart",
        model_types=("bart",),
        length_field="max_position_embeddings",
        length_counts_offset=False,
        position_key="embed_positions.weight",
        word_keys=("embed_tokens.weight", "../shared.weight"),
        layer_norm_key="layernorm_embedding",
        prefixes=("model.encoder.", "encoder."),
        detect_patterns=("layernorm_embedding.*",),
        offset=2,
        default_pad_token_id=1,
        layer_norm_eps_field=None,
        layer_norm_eps=1e-5,
        embed_scale_flag="scale_embedding",
        embed_scale_dim_field="d_model",
        shared_length_keys=("../decoder.embed_positions.weight",),
    ),
)

#: Every known family by name, in detection-preference order.
FAMILIES: Mapping[str, Family] = MappingProxyType({f.name: f for f in _ROWS})


def model_type_spellings(model_type: object) -> tuple[str, ...]:
    """The spellings a ``model_type`` is looked up under: as given, ``-`` -> ``_``, ``_`` -> ``-``.

    The one normalisation every family registry uses (learned tables here, RoPE/ALiBi in
    :mod:`~flax_posenc.conversion.relative_config`, relative bias in
    :mod:`~flax_posenc.conversion.relative_bias`); ``None`` and non-strings match nothing.

    >>> model_type_spellings("xlm-roberta")
    ('xlm-roberta', 'xlm_roberta')
    >>> model_type_spellings(None)
    ()
    """
    if not isinstance(model_type, str) or not model_type:
        return ()
    return tuple(dict.fromkeys((model_type, model_type.replace("-", "_"), model_type.replace("_", "-"))))


def row_for_model_type(model_type: object, rows: Iterable[Any]) -> Any | None:
    """The first of ``rows`` (objects with ``model_types``) naming ``model_type`` in any spelling, else None.

    >>> row_for_model_type("xlm_roberta", FAMILIES.values()).name
    'xlm-roberta'
    """
    rows = tuple(rows)
    for spelling in model_type_spellings(model_type):
        for row in rows:
            if spelling in row.model_types:
                return row
    return None


def family_for_model_type(model_type: str) -> Family | None:
    """The learned-table family whose ``model_types`` include ``model_type`` (``"xlm-roberta"``...), or None.

    For every kind (learned, RoPE/ALiBi, relative bias) ask
    :func:`flax_posenc.conversion.which_family`.
    """
    return row_for_model_type(model_type, _ROWS)


def known_families() -> str:
    """``"gpt2, gpt_neo, bert, ..."`` for error messages."""
    return ", ".join(FAMILIES)


def is_buffer(key: str) -> bool:
    """Whether ``key`` names a non-trainable buffer (``embeddings.position_ids``, ``h.0.attn.bias``).

    >>> is_buffer("embeddings.position_ids"), is_buffer("h.0.attn.bias"), is_buffer("h.0.attn.c_attn.bias")
    (True, True, False)
    """
    # the last dot-separated components of key equal the suffix's: key is it or ends in "." + it
    return key in _BUFFER_NAMES or key.endswith(_DOTTED_BUFFER_SUFFIXES)


_BUFFER_NAMES = frozenset(BUFFER_SUFFIXES)
_DOTTED_BUFFER_SUFFIXES = tuple("." + s for s in BUFFER_SUFFIXES)


# ----------------------------------------------------------------------------- detection


class Detected(NamedTuple):
    """A family found in a checkpoint, and the prefix its input block sits under."""

    family: Family
    prefix: str


def resolve_relative(prefix: str, rel: str) -> str:
    """Join a prefix and a relative tensor name; each leading ``../`` drops one prefix level.

    >>> resolve_relative("model.encoder.", "../shared.weight"), resolve_relative("", "wpe.weight")
    ('model.shared.weight', 'wpe.weight')
    """
    parts = prefix.split(".")[:-1] if prefix else []
    while rel.startswith("../"):
        rel = rel[3:]
        parts = parts[:-1]
    return ".".join([*parts, rel])


def find_prefix(family: Family, keys: Iterable[str], *, generic: bool = True) -> str | None:
    """The prefix under which ``family.position_key`` is stored, or ``None``.

    The family's listed prefixes are tried first; with ``generic`` any unique
    ``<something>.<position_key>`` is accepted too (``model.``, a custom wrapper...).
    """
    keys = set(keys)
    for p in family.prefixes:
        if p + family.position_key in keys:
            return p
    if not generic:
        return None
    pk = "." + family.position_key
    found = sorted({k[: -len(family.position_key)] for k in keys if k.endswith(pk)})
    return found[0] if len(found) == 1 else None


def _matches(family: Family, prefix: str, keys: set[str]) -> bool:
    """All tensors the family's block needs are there (and no pattern-less impostor)."""
    if not any(resolve_relative(prefix, w) in keys for w in family.word_keys):
        return False
    if family.token_type_key and prefix + family.token_type_key not in keys:
        return False
    if family.layer_norm_key and not any(
        f"{prefix}{family.layer_norm_key}.{s}" in keys for s, _ in LAYER_NORM_SPELLINGS
    ):
        return False
    return True


def _has_pattern(family: Family, prefix: str, keys: set[str]) -> bool:
    return any(fnmatch.filter(keys, prefix + pat) for pat in family.detect_patterns)


def _semantics(f: Family) -> tuple:
    return (
        f.offset,
        f.offset_from_pad,
        f.positions_from,
        f.pad_token_id,
        f.token_type_key is None,
        f.layer_norm_key is None,
        f.embed_scale_flag,
        f.length_counts_offset,
    )


def detect_family(
    keys: Iterable[str],
    config: Mapping[str, Any] | None = None,
    *,
    family: str | None = None,
    where: str = "checkpoint",
) -> Detected:
    """Which family a checkpoint holds, and under which prefix.

    Decided by, in order: ``family`` if given; ``config["model_type"]``; else the key names
    alone (the family whose tensors are all present; ``detect_patterns`` break ties; families
    that compute the same block are equivalent and the first in :data:`FAMILIES` is chosen).

    Args:
      keys: tensor names in the checkpoint (buffers are ignored).
      config: ``config.json`` as a dict, if any.
      family: force a family by name (see :data:`FAMILIES`).
      where: the file or source, for messages.

    Returns:
      :class:`Detected` ``(family, prefix)``.

    Raises:
      CheckpointError: unknown family or ``model_type`` (lists the known ones); the family's
        position table is not in the checkpoint; key names fit several families that differ.

    >>> detect_family(["transformer.wpe.weight", "transformer.wte.weight"]).prefix
    'transformer.'
    """
    keys = {k for k in keys if not is_buffer(k)}
    config = dict(config or {})
    if family is not None:
        fam = FAMILIES.get(family) or family_for_model_type(family)
        if fam is None:
            raise CheckpointError(f"{where}: expected a known family ({known_families()}), found family={family!r}")
    elif config.get("model_type") is not None:
        fam = family_for_model_type(str(config["model_type"]))
        if fam is None:
            raise CheckpointError(
                f"{where}: expected a config model_type of a known family ({known_families()}), "
                f"found model_type={config['model_type']!r}"
            )
    else:
        return _detect_from_keys(keys, where)
    prefix = find_prefix(fam, keys)
    if prefix is None:
        wanted = fam.prefixes[0] + fam.position_key
        near = nearest_keys(wanted, keys)
        raise CheckpointError(
            f"{where}: expected the {fam.name} position table {fam.position_key!r} (under one of the "
            f"prefixes {[p for p in fam.prefixes]}), found no such key; nearest keys: {near or 'none'}"
        )
    return Detected(fam, prefix)


def _detect_from_keys(keys: set[str], where: str) -> Detected:
    found: list[Detected] = []
    for fam in FAMILIES.values():
        p = find_prefix(fam, keys, generic=False)
        if (
            p is not None
            and _matches(fam, p, keys)
            and not any(fnmatch.filter(keys, resolve_relative(p, pat)) for pat in fam.reject_patterns)
        ):
            found.append(Detected(fam, p))
    if not found:
        wanted = sorted({f.position_key for f in FAMILIES.values()})
        near = sorted({k for w in wanted for k in nearest_keys(w, keys, n=2)})[:6]
        raise CheckpointError(
            f"{where}: expected the input block of a known family ({known_families()}; position keys "
            f"{wanted}), found none; nearest keys: {near or 'none'}"
        )
    # families with detect patterns must show them; those that show them win
    found = [d for d in found if not d.family.detect_patterns or _has_pattern(d.family, d.prefix, keys)] or found
    marked = [d for d in found if d.family.detect_patterns and _has_pattern(d.family, d.prefix, keys)]
    found = marked or found
    # a family-specific prefix (bert., roberta.) beats the bare one
    named = [d for d in found if d.prefix]
    found = named or found
    if len({_semantics(d.family) for d in found}) > 1:
        names = ", ".join(d.family.name for d in found)
        raise CheckpointError(
            f"{where}: expected key names that single out one family, found a block that fits "
            f"{names} (which count positions differently); put a config.json with model_type beside "
            "the weights or pass family="
        )
    return found[0]
