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

import os
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from flax_posenc.conversion.families import Family
from flax_posenc.conversion.load import check_config_length, table_offset
from flax_posenc.conversion.readers import fail, read_float, tower_keys
from flax_posenc.conversion.sources import open_checkpoint
from flax_posenc.conversion.table import PositionTable

__all__ = ["TABLE_FAMILIES", "TableFamily", "has_table", "read_position_table", "table_present"]


#: The row type of :data:`TABLE_FAMILIES`: :class:`~flax_posenc.conversion.families.Family`, the
#: one row type of learned tables (a table-only row has no ``word_keys``).
TableFamily = Family


def _table(name: str, model_types: tuple[str, ...], *, offset_from_pad: bool = False, **fields: Any) -> Family:
    """A table-only row: the field counts the reserved rows for RoBERTa-style tables
    (``offset_from_pad``, pad id 1 by default), not for fixed offsets (BART: ``declared + 2`` rows)."""
    if offset_from_pad:
        fields.update(offset_from_pad=True, default_pad_token_id=1)
    return Family(name, model_types, length_counts_offset=offset_from_pad, **fields)


TABLE_FAMILIES: Mapping[str, TableFamily] = MappingProxyType(
    {
        row.name: row
        for row in (
            _table(
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
                    # text towers of vision-language models (issue 35), BERT's embeddings
                    "align_text_model",
                    "blip_text_model",
                    "chinese_clip_text_model",
                    "flava_text_model",
                    "git",  # its text positions (its vision tower: grid_tables' git_vision_tower)
                    "instructblip_qformer",  # the Q-Former's text tokens (after its query tokens)
                    "instructblipvideo_qformer",
                ),
            ),
            _table(
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
                    # text towers of vision-language and audio-language models (issue 35), RoBERTa's embeddings
                    "altclip_text_model",
                    "bridgetower_text_model",
                    "clap_text_model",
                ),
                offset_from_pad=True,
            ),
            _table("bert_offset2", ("mra", "nystromformer", "yoso"), offset=2),
            _table("deberta", ("deberta", "deberta-v2"), present_flag="position_biased_input"),
            _table("xlm_like", ("flaubert", "xlm"), position_key="position_embeddings.weight"),
            _table(
                "bart_like_encoder",
                ("mbart", "mvp", "plbart"),
                position_key="encoder.embed_positions.weight",
                offset=2,
            ),
            _table(
                "bart_like_decoder",
                ("mbart", "mvp", "plbart"),
                position_key="decoder.embed_positions.weight",
                offset=2,
            ),
            _table(
                "seq2seq_encoder",
                ("blenderbot", "blenderbot-small", "marian", "pegasus", "bigbird_pegasus"),
                position_key="encoder.embed_positions.weight",
            ),
            _table(
                "seq2seq_decoder",
                ("blenderbot", "blenderbot-small", "marian", "pegasus", "bigbird_pegasus"),
                position_key="decoder.embed_positions.weight",
            ),
            _table(
                "clip_text",
                (
                    "clip_text_model",
                    # CLIP's text embeddings in other vision-language models (issue 35)
                    "aimv2_text_model",
                    "clipseg_text_model",
                    "groupvit_text_model",
                    "metaclip_2_text_model",
                    "owlv2_text_model",
                    "owlvit_text_model",
                    "siglip_text_model",
                    "siglip2_text_model",
                    "xclip_text_model",
                ),
                position_key="embeddings.position_embedding.weight",
            ),
            _table(
                "clip_text_tower",
                ("clip",),
                position_key="text_model.embeddings.position_embedding.weight",
                config_section="text_config",
            ),
            _table(
                "siglip_text_tower",
                ("siglip",),
                position_key="text_model.embeddings.position_embedding.weight",
                config_section="text_config",
            ),
            _table("gpt2_like", ("gpt-sw3", "gpt_bigcode"), position_key="wpe.weight", length_field="n_positions"),
            _table("openai_gpt", ("openai-gpt",), position_key="positions_embed.weight", length_field="n_positions"),
            _table("biogpt", ("biogpt",), position_key="embed_positions.weight", offset=2),
            # Whisper's decoder tokens (448); its encoder's audio table: audio_tables.AUDIO_TABLE_FAMILIES
            _table(  # LED pads the encoder's input up to a multiple of attention_window (checked)
                "led_encoder",
                ("led",),
                position_key="encoder.embed_positions.weight",
                length_field="max_encoder_position_embeddings",
                window_field="attention_window",
            ),
            _table(
                "led_decoder",
                ("led",),
                position_key="decoder.embed_positions.weight",
                length_field="max_decoder_position_embeddings",
            ),
            _table(
                "whisper_decoder",
                ("whisper",),
                position_key="decoder.embed_positions.weight",
                length_field="max_target_positions",
                optional=True,
            ),
            # document models: the 1-D tables beside their bounding-box tables (kind bbox_2d,
            # conversion.bbox_tables); LiLT's layout stream has a second table of its own
            _table("layoutlm_1d", ("layoutlm",)),
            _table("layoutlmv3_1d", ("layoutlmv3",), offset_from_pad=True),
            _table("lilt_text", ("lilt",), offset_from_pad=True),
            _table(
                "lilt_layout",
                ("lilt",),
                offset_from_pad=True,
                position_key="layout_embeddings.box_position_embeddings.weight",
            ),
        )
    }
)

#: Text tables whose model's forward needs more than ``input_ids`` (issue 36; the conformance case
#: gives it: :func:`conformance.reference._extra_inputs`): X-MOD (RoBERTa's embeddings, ``lang_ids``
#: choose its adapters) and LXMERT (BERT's embeddings; its visual stream takes box coordinates
#: through a linear layer, no position table).
EXTRA_INPUT_TABLE_FAMILIES: tuple[TableFamily, ...] = (
    _table("xmod", ("xmod",), offset_from_pad=True),
    _table("lxmert", ("lxmert",)),
    # CANINE's character positions: a table of num_hash_buckets rows indexed by the first
    # max_position_embeddings positions (a config where the two differ is refused: rows != field)
    _table("canine", ("canine",), position_key="char_embeddings.char_position_embeddings.weight"),
)
TABLE_FAMILIES = MappingProxyType({**TABLE_FAMILIES, **{row.name: row for row in EXTRA_INPUT_TABLE_FAMILIES}})


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
    return any(k == row.position_key or k.endswith("." + row.position_key) for k in keys)


def _check_window(row: Family, config: Mapping[str, Any], usable: int, where: object) -> None:
    """Refuse a table whose usable rows are not a multiple of the padding window (``row.window_field``)."""
    field = row.window_field
    value = config.get(field) if field else None
    windows = value if isinstance(value, list) else [value]
    if not windows or any(isinstance(w, bool) or not isinstance(w, int) or w < 1 for w in windows):
        raise fail(where, f"{field} as a positive integer or a list of them", repr(value)[:80])
    window = max(windows)
    if usable % window:
        raise fail(
            where,
            f"{row.name} table rows ({usable}) a multiple of the padding window {field} {window} "
            f"(the input is padded up to it; the padded limit {usable // window * window} is not read)",
            f"{usable} % {window} = {usable % window}",
        )


def read_position_table(
    source: str | os.PathLike,
    family: str,
    config: Mapping[str, Any],
    *,
    row: Family | None = None,
    section: str | None = None,
) -> PositionTable:
    """The :data:`TABLE_FAMILIES` ``family`` table of SOURCE (only that tensor is read); ``row``: a
    :class:`~flax_posenc.conversion.families.Family` of another registry (Whisper's audio table) instead;
    ``section``: in a composite checkpoint, the field of the tower read (``"text_config"``): of several
    tensors with the row's name, the one under that tower's module (:func:`~flax_posenc.conversion.readers.tower_keys`).

    Raises:
      CheckpointError: no tensor ends with the family's key, or several do, or it is not a finite
        2-D float table with more rows than reserved ones, or its rows disagree with the config's
        length field (one line naming the file).
    """
    row = TABLE_FAMILIES[family] if row is None else row
    ckpt = open_checkpoint(source)
    suffix = row.position_key
    keys = tower_keys(sorted(k for k in ckpt.reader.keys() if k == suffix or k.endswith("." + suffix)), section)
    if len(keys) != 1:
        found = "none" if not keys else ", ".join(keys[:4])
        raise fail(ckpt.weights_path, f"one {row.name} position table *{suffix}", found)
    weights = read_float(ckpt.reader, keys[0], ndim=2, what=f"{row.name} position table")
    config_where = ckpt.config_path or ckpt.weights_path
    offset = table_offset(row, config, config_where)
    if weights.shape[0] <= offset:
        raise fail(
            ckpt.weights_path, f"a position table with more than its {offset} reserved rows", f"{weights.shape[0]} rows"
        )
    table_where = f"{ckpt.reader.file_of(keys[0])}:{keys[0]}"
    check_config_length(row, config, int(weights.shape[0]), offset, config_where=config_where, table_where=table_where)
    if row.window_field is not None:
        _check_window(row, config, int(weights.shape[0]) - offset, config_where)
    return PositionTable(
        weights, family=row.name, key=keys[0], offset=offset, source=os.fspath(source), config=dict(config)
    )


# ----------------------------------------------------------------------------- issue 36: learned tables of refused types
# One block of its own, joined to the registry (read from transformers 5.24.0's modeling files):
# (tapas stays refused: with reset_position_index_per_cell, its default, the index restarts in every
#  table cell, and a sequence longer than the table runs: not a token limit)
# - trocr, pp_formulanet_text: BART's learned table with its 2 reserved rows (TrOCR/PPFormulaNetLearnedPositionalEmbedding);
# - videoprism_text_model: a sinusoid stored as a persistent buffer (embeddings.position_embedding),
#   indexed by the first max_position_embeddings position_ids: read as stored.
_ISSUE36_TABLES = (
    _table("trocr_decoder", ("trocr",), position_key="decoder.embed_positions.weight", offset=2),
    _table("pp_formulanet_text", ("pp_formulanet_text",), position_key="embed_positions.weight", offset=2),
    _table("videoprism_text", ("videoprism_text_model",), position_key="embeddings.position_embedding"),
)
TABLE_FAMILIES = MappingProxyType({**TABLE_FAMILIES, **{row.name: row for row in _ISSUE36_TABLES}})


# issue 36 (documents): BROS's 1-D token positions (BrosTextEmbeddings: a BERT table at
# embeddings.position_embeddings, positions from 0); its box sinusoids are a bbox_sinusoid row.
TABLE_FAMILIES = MappingProxyType({**TABLE_FAMILIES, "bros_1d": _table("bros_1d", ("bros",))})
