"""Learned absolute position tables read for their limit and values only, one row per family.

:data:`~flax_posenc.conversion.families.FAMILIES` describes whole input blocks (word, position
and token-type tables, LayerNorm, the position rule) that ``TransformerInput`` reproduces. Many
more model types keep a learned position table whose *limit* and *rows* are all a limit checker
needs; :data:`TABLE_FAMILIES` lists them: the tensor (a key suffix, found under whatever prefix
the checkpoint uses), the reserved leading rows, and whether they come from ``pad_token_id``
(RoBERTa-style ``padding_idx + 1``). A model type listed here is read by
:func:`~flax_posenc.conversion.inspect_source` and verified by the conformance suite
(``tests/test_conformance.py``: the rows equal the checkpoint's, a forward pass of ``limit``
tokens works in transformers and one of ``limit + 1`` fails).

>>> TABLE_FAMILIES["bert_like"].key_suffix
'embeddings.position_embeddings.weight'
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from flax_posenc.conversion.readers import fail, read_float
from flax_posenc.conversion.sources import open_checkpoint
from flax_posenc.conversion.table import PositionTable

__all__ = ["TABLE_FAMILIES", "TableFamily", "has_table", "read_position_table", "table_present"]


@dataclasses.dataclass(frozen=True)
class TableFamily:
    """One family's learned position table, as data.

    Attributes:
      name: our name for the family; model_types: ``config.json`` values that mean it.
      key_suffix: the tensor's name without the checkpoint's prefix.
      offset: reserved leading rows; offset_from_pad: they are ``pad_token_id + 1`` instead.
      default_pad_token_id: the pad id when the config has none.
      length_field: the config field declaring the table's length (checked against its rows).
      present_flag, present_default: a config flag without which the model has no such table
        (DeBERTa's ``position_biased_input``) and its default.
      config_section: the sub-config holding ``length_field`` in a composite checkpoint (the
        text tower of ``clip``/``siglip``: ``"text_config"``), else ``None``.
      optional: the checkpoint may hold no such tensor at all (an encoder-only Whisper checkpoint,
        ``WhisperForAudioClassification``, has no decoder table): then the mechanism is absent.
    """

    name: str
    model_types: tuple[str, ...]
    key_suffix: str = "embeddings.position_embeddings.weight"
    offset: int = 0
    offset_from_pad: bool = False
    default_pad_token_id: int = 1
    present_flag: str | None = None
    present_default: bool = True
    length_field: str = "max_position_embeddings"
    config_section: str | None = None
    optional: bool = False

    def expected_rows(self, declared: int) -> int:
        """The rows a table must have for ``length_field`` = ``declared``: the field counts the
        reserved rows for RoBERTa-style tables, not for fixed offsets (BART: ``declared + 2``)."""
        return declared if self.offset_from_pad else declared + self.offset


TABLE_FAMILIES: Mapping[str, TableFamily] = MappingProxyType(
    {
        row.name: row
        for row in (
            TableFamily(
                "bert_like",
                (
                    "albert",
                    "bert-generation",
                    "big_bird",
                    "convbert",
                    "dpr",
                    "ernie",
                    "fnet",
                    "megatron-bert",
                    "mobilebert",
                    "rembert",
                    "roc_bert",
                    "splinter",
                    "squeezebert",
                    "visual_bert",
                ),
            ),
            TableFamily(
                "roberta_like",
                (
                    "camembert",
                    "data2vec-text",
                    "roberta-prelayernorm",
                    "xlm-roberta-xl",
                    "longformer",
                    "luke",
                    "markuplm",
                    "ibert",
                ),
                offset_from_pad=True,
            ),
            TableFamily("bert_offset2", ("mra", "nystromformer", "yoso"), offset=2),
            TableFamily("deberta", ("deberta", "deberta-v2"), present_flag="position_biased_input"),
            TableFamily("xlm_like", ("flaubert", "xlm"), key_suffix="position_embeddings.weight"),
            TableFamily(
                "bart_like_encoder",
                ("mbart", "mvp", "plbart"),
                key_suffix="encoder.embed_positions.weight",
                offset=2,
            ),
            TableFamily(
                "bart_like_decoder",
                ("mbart", "mvp", "plbart"),
                key_suffix="decoder.embed_positions.weight",
                offset=2,
            ),
            TableFamily(
                "seq2seq_encoder",
                ("blenderbot", "blenderbot-small", "marian", "pegasus", "bigbird_pegasus"),
                key_suffix="encoder.embed_positions.weight",
            ),
            TableFamily(
                "seq2seq_decoder",
                ("blenderbot", "blenderbot-small", "marian", "pegasus", "bigbird_pegasus"),
                key_suffix="decoder.embed_positions.weight",
            ),
            TableFamily("clip_text", ("clip_text_model",), key_suffix="embeddings.position_embedding.weight"),
            TableFamily(
                "clip_text_tower",
                ("clip",),
                key_suffix="text_model.embeddings.position_embedding.weight",
                config_section="text_config",
            ),
            TableFamily(
                "siglip_text_tower",
                ("siglip",),
                key_suffix="text_model.embeddings.position_embedding.weight",
                config_section="text_config",
            ),
            TableFamily("gpt2_like", ("gpt-sw3", "gpt_bigcode"), key_suffix="wpe.weight", length_field="n_positions"),
            TableFamily("openai_gpt", ("openai-gpt",), key_suffix="positions_embed.weight", length_field="n_positions"),
            TableFamily("biogpt", ("biogpt",), key_suffix="embed_positions.weight", offset=2),
            # Whisper's decoder tokens (448); its encoder's audio table: audio_tables.AUDIO_TABLE_FAMILIES
            TableFamily(
                "whisper_decoder",
                ("whisper",),
                key_suffix="decoder.embed_positions.weight",
                length_field="max_target_positions",
                optional=True,
            ),
        )
    }
)


def _pad_offset(family: TableFamily, config: Mapping[str, Any], where: object) -> int:
    if not family.offset_from_pad:
        return family.offset
    pad = config.get("pad_token_id")
    pad = family.default_pad_token_id if pad is None else pad
    if isinstance(pad, bool) or not isinstance(pad, int) or pad < 0:
        raise fail(where, "pad_token_id as a non-negative integer (or null)", repr(pad)[:80])
    return pad + 1


def has_table(family: str, config: Mapping[str, Any], where: object) -> bool:
    """Whether a model of ``family`` with this config has the table (its ``present_flag``)."""
    row = TABLE_FAMILIES[family]
    if row.present_flag is None:
        return True
    flag = config.get(row.present_flag, row.present_default)
    if not isinstance(flag, bool):
        raise fail(where, f"{row.present_flag} as true or false", repr(flag)[:80])
    return flag


def table_present(source: str | os.PathLike, family: str) -> bool:
    """Whether SOURCE holds a tensor named like the :data:`TABLE_FAMILIES` ``family`` table (its
    key suffix, under any prefix); only the checkpoint's index of names is read."""
    row = TABLE_FAMILIES[family]
    keys = open_checkpoint(source).reader.keys()
    return any(k == row.key_suffix or k.endswith("." + row.key_suffix) for k in keys)


def read_position_table(
    source: str | os.PathLike, family: str, config: Mapping[str, Any], *, row: TableFamily | None = None
) -> PositionTable:
    """The :data:`TABLE_FAMILIES` ``family`` table of SOURCE (only that tensor is read); ``row``: a
    :class:`TableFamily` of another registry (Whisper's audio table) instead.

    Raises:
      CheckpointError: no tensor ends with the family's key, or several do, or it is not a finite
        2-D float table with more rows than reserved ones (one line naming the file).
    """
    row = TABLE_FAMILIES[family] if row is None else row
    ckpt = open_checkpoint(source)
    keys = sorted(k for k in ckpt.reader.keys() if k == row.key_suffix or k.endswith("." + row.key_suffix))
    if len(keys) != 1:
        found = "none" if not keys else ", ".join(keys[:4])
        raise fail(ckpt.weights_path, f"one {row.name} position table *{row.key_suffix}", found)
    weights = read_float(ckpt.reader, keys[0], ndim=2, what=f"{row.name} position table")
    offset = _pad_offset(row, config, ckpt.weights_path)
    if weights.shape[0] <= offset:
        raise fail(
            ckpt.weights_path, f"a position table with more than its {offset} reserved rows", f"{weights.shape[0]} rows"
        )
    section = config.get(row.config_section) if row.config_section is not None else config
    if not isinstance(section, Mapping):
        raise fail(ckpt.config_path or ckpt.weights_path, f"{row.config_section} as an object", repr(section)[:80])
    declared = section.get(row.length_field)
    field = f"{row.config_section + '.' if row.config_section else ''}{row.length_field}"
    if declared is not None and (isinstance(declared, bool) or not isinstance(declared, int) or declared < 1):
        # "100" or 100.0 is a mistyped config, never a field skipped (its rows would go unchecked)
        raise fail(ckpt.config_path or ckpt.weights_path, f"{field} as a positive integer", repr(declared)[:80])
    if declared is not None and row.expected_rows(declared) != weights.shape[0]:
        raise fail(
            ckpt.weights_path,
            f"{keys[0]} of {row.expected_rows(declared)} rows "
            f"({row.config_section + '.' if row.config_section else ''}{row.length_field} {declared} in config.json)",
            f"{weights.shape[0]} rows",
        )
    return PositionTable(
        weights, family=row.name, key=keys[0], offset=offset, source=os.fspath(source), config=dict(config)
    )
