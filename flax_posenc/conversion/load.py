"""Loading a position table, or a whole input block, from any SOURCE into numpy.

Only the tensors asked for are read (the position table alone for :func:`load_position_table`;
the block's handful of tensors for :func:`load_input_block`), never the whole checkpoint.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from typing import Any

import numpy as np

from flax_posenc.conversion.families import (
    FAMILIES,
    LAYER_NORM_SPELLINGS,
    Detected,
    Family,
    detect_family,
    known_families,
    resolve_relative,
)
from flax_posenc.conversion.gguf_source import gguf_position_table, is_gguf_source
from flax_posenc.conversion.readers import fail, nearest_keys, read_float
from flax_posenc.conversion.sources import CONFIG_NAME, Checkpoint, open_checkpoint, parse_sinusoidal, source_text
from flax_posenc.conversion.table import InputBlockWeights, PositionTable
from flax_posenc.errors import CheckpointError
from flax_posenc.sinusoid_math import sinusoidal_table_np


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def pad_token_id(family: Family, config: Mapping[str, Any], where: object = CONFIG_NAME) -> int | None:
    """The padding id the family's position rule uses (MPNet: always 1; else the config's).

    Raises:
      CheckpointError: ``pad_token_id`` is set but not a non-negative integer (a negative one
        would shift the table's offset and overstate its limit).
    """
    if family.pad_token_id is not None:
        return family.pad_token_id
    value = config.get("pad_token_id")
    if value is None:
        return family.default_pad_token_id
    if not _is_int(value) or value < 0:
        raise fail(where, "pad_token_id as a non-negative integer (or null)", repr(value)[:80])
    return int(value)


def table_offset(family: Family, config: Mapping[str, Any], where: object = CONFIG_NAME) -> int:
    """Reserved leading rows: ``pad_token_id + 1`` for RoBERTa-style families, else the row's."""
    if family.offset_from_pad:
        pad = pad_token_id(family, config, where)
        return family.offset if pad is None else pad + 1
    return family.offset


def check_config_length(
    family: Family, config: Mapping[str, Any], rows: int, offset: int, *, config_where: object, table_where: str
) -> None:
    """Raise CheckpointError when the config's limit disagrees with the table's rows (or is no positive integer).

    The one rows-against-config check of every learned table (:data:`FAMILIES` and
    :data:`~flax_posenc.conversion.position_tables.TABLE_FAMILIES` rows alike): ``length_field``
    (in ``config_section`` when the row names one) must equal :meth:`Family.config_length` of the
    table's ``rows``; an absent field is not checked.
    """
    section: Any = config if family.config_section is None else config.get(family.config_section)
    if not isinstance(section, Mapping):
        raise fail(config_where, f"{family.config_section} as an object", repr(section)[:80])
    value = section.get(family.length_field)
    if value is None:
        return
    field = family.length_label
    if not _is_int(value) or value < 1:  # "100", 100.0, true, 0: a mistyped config, never a field skipped
        raise fail(config_where, f"{field} as a positive integer", f"{value!r}"[:80])
    expected = family.config_length(rows, offset)
    if value != expected:
        how = "" if family.length_counts_offset or not offset else f", {offset} of them reserved and not counted"
        raise CheckpointError(
            f"{config_where}: expected {field}={expected} to match {table_where} "
            f"({rows} rows{how}), found {field}={value!r}"
        )


def _sinusoidal(source: str, length: int, dim: int) -> PositionTable:
    try:
        weights = sinusoidal_table_np(length, dim, dtype=np.float32)
    except ValueError as e:
        raise fail(source, "sinusoidal:LENGTH:DIM with an even DIM", str(e)) from None
    return PositionTable(weights=weights, family="sinusoidal", key="sinusoidal", offset=0, source=source)


def _open(source: str | os.PathLike, family: str | None) -> tuple[Checkpoint, Detected]:
    if family is not None and family not in FAMILIES:
        raise CheckpointError(
            f"{source_text(source)}: expected a known family ({known_families()}), found family={family!r}"
        )
    ckpt = open_checkpoint(source, require_config=family is None)
    where = ckpt.config_path if ckpt.config_path is not None and family is None else ckpt.weights_path
    det = detect_family(ckpt.reader.keys(), ckpt.config, family=family, where=str(where))
    return ckpt, det


def read_detected_table(ckpt: Checkpoint, det: Detected, key: str | None) -> PositionTable:
    """The position table of an opened checkpoint whose family is already detected.

    What :func:`load_position_table` does after opening and detecting, and what export reuses
    so that a checkpoint is opened and detected once. ``key`` defaults to the family's
    position key under the detected prefix.

    Raises:
      CheckpointError: no such key, a table with no usable rows, or a config length that
        disagrees with the table (one line naming the file).
    """
    fam, prefix = det
    keys = ckpt.reader.keys()
    if key is None:
        key = prefix + fam.position_key
    elif key not in set(keys):
        raise fail(
            ckpt.weights_path,
            f"the table key {key!r}",
            f"no such key; nearest keys: {nearest_keys(key, keys) or 'none'}",
        )
    weights = read_float(ckpt.reader, key, ndim=2, what="position table")
    offset = table_offset(fam, ckpt.config, ckpt.config_path or ckpt.weights_path)
    rows = int(weights.shape[0])
    table_where = f"{ckpt.reader.file_of(key)}:{key}"
    if rows <= offset:
        raise fail(table_where, f"more than {offset} rows ({offset} reserved for {fam.name})", f"{rows} rows")
    check_config_length(fam, ckpt.config, rows, offset, config_where=ckpt.config_path, table_where=table_where)
    return PositionTable(
        weights=weights, family=fam.name, key=key, offset=offset, source=ckpt.source, config=ckpt.config
    )


def load_position_table(
    source: str | os.PathLike, *, family: str | None = None, key: str | None = None
) -> PositionTable:
    """Load the learned position table of a checkpoint, or build a sinusoidal one.

    Only the table's tensor is read (from one shard, for a sharded checkpoint).

    Args:
      source: a checkpoint directory (``config.json`` + ``model.safetensors`` / shard index /
        ``pytorch_model.bin``), a ``.safetensors`` or ``.bin`` file, a Hub model id (local cache
        first; offline-safe), ``"sinusoidal:LENGTH:DIM"`` or a ``.gguf`` file (GPT-2's
        ``position_embd.weight``, quantized storage dequantized; needs the ``gguf`` extra, see
        :mod:`flax_posenc.conversion.gguf_source`).
      family: force a family (one of :data:`~flax_posenc.conversion.FAMILIES`) instead of
        reading ``model_type`` from ``config.json`` or guessing from key names.
      key: force the tensor name (e.g. BART's ``"model.decoder.embed_positions.weight"``; the
        default is the encoder's).

    Returns:
      :class:`PositionTable`: ``weights`` ``(rows, dim)`` float16/32/64 as stored (bfloat16
      upcast to float32), ``offset`` reserved rows, ``num_positions = rows - offset`` usable
      positions (GPT-2: 1024; BERT: 512; RoBERTa: 514 rows -> 512; OPT: rows - 2).

    Raises:
      CheckpointError: one line naming the file, what was expected and what was found -- for a
        missing path or config, no weights, a corrupted file, an unknown family, an absent key
        (nearest keys shown), a config limit that disagrees with the rows, NaN/Inf values, a
        ``.bin`` without torch or with a pickle that would run code, a Hub id not cached offline.

    >>> t = load_position_table("sinusoidal:16:8")
    >>> t.weights.shape, t.num_positions
    ((16, 8), 16)
    """
    text = source_text(source)
    if is_gguf_source(text):  # llama.cpp's format, read with the optional gguf package
        return gguf_position_table(source, family=family, key=key)
    sin = parse_sinusoidal(text) if isinstance(source, str) else None
    if sin is not None:
        if key not in (None, "sinusoidal") or family not in (None, "sinusoidal"):
            raise fail(text, "no family=/key= for a sinusoidal source", f"family={family!r}, key={key!r}")
        return _sinusoidal(text, *sin)
    ckpt, det = _open(source, family)
    return read_detected_table(ckpt, det, key)


def _layer_norm(ckpt: Checkpoint, fam: Family, prefix: str, dim: int) -> tuple[np.ndarray | None, np.ndarray | None]:
    if fam.layer_norm_key is None:
        return None, None
    keys = set(ckpt.reader.keys())
    base = prefix + fam.layer_norm_key
    present = [(f"{base}.{s}", f"{base}.{b}") for s, b in LAYER_NORM_SPELLINGS if f"{base}.{s}" in keys]
    if len(present) > 1:
        raise fail(
            ckpt.weights_path,
            f"one LayerNorm spelling for {base} (weight/bias or gamma/beta)",
            f"both {present[0][0]} and {present[1][0]}",
        )
    if not present:
        raise fail(
            ckpt.weights_path,
            f"the LayerNorm {base}.weight (or .gamma)",
            f"no such key; nearest keys: {nearest_keys(base + '.weight', keys) or 'none'}",
        )
    scale_key, bias_key = present[0]
    if bias_key not in keys:
        raise fail(ckpt.weights_path, f"the LayerNorm bias {bias_key} beside {scale_key}", "no such key")
    scale = read_float(ckpt.reader, scale_key, ndim=1, what="LayerNorm scale", dim=dim)
    bias = read_float(ckpt.reader, bias_key, ndim=1, what="LayerNorm bias", dim=dim)
    return scale, bias


def load_input_block(source: str | os.PathLike, *, family: str | None = None) -> InputBlockWeights:
    """Load every weight of a family's input (embedding) block, and how it counts positions.

    Args:
      source: as for :func:`load_position_table` (not ``sinusoidal:``).
      family: force a family instead of detecting it.

    Returns:
      :class:`InputBlockWeights` with numpy float arrays (``word_embeddings`` ``(vocab, dim)``,
      ``token_type_embeddings`` ``(types, dim)`` or None, LayerNorm ``(dim,)`` or None),
      ``layer_norm_eps`` from the config (DistilBERT: 1e-12, BART: 1e-5, fixed by the modeling
      code), ``embed_scale`` (``sqrt(d_model)`` for BART with ``scale_embedding``, else 1.0),
      ``positions_from`` and ``pad_token_id``. The embeddings output reproduced is the one
      before any projection (ELECTRA's ``embeddings_project``).

    Raises:
      CheckpointError: as :func:`load_position_table`; also both LayerNorm spellings present,
        a block tensor of the wrong width, or an OPT with ``project_in`` (``word_embed_proj_dim
        != hidden_size``), which this block does not represent.

    block = load_input_block("path/to/all-MiniLM-L6-v2")
    block.word_embeddings.shape, block.position.num_positions
    ((30522, 384), 512)
    """
    text = source_text(source)
    if isinstance(source, str) and parse_sinusoidal(text) is not None:
        raise fail(text, "a checkpoint with an input block", "a sinusoidal source (no learned weights)")
    ckpt, det = _open(source, family)
    fam, prefix = det
    keys = set(ckpt.reader.keys())
    cfg = ckpt.config
    refused = [prefix + k for k in fam.refuse_keys if prefix + k in keys]
    refused += [
        f"{a}={cfg[a]} != {b}={cfg[b]}"
        for a, b in fam.refuse_unequal
        if cfg.get(a) is not None and cfg.get(b) is not None and cfg[a] != cfg[b]
    ]
    if refused:
        agree = " and ".join(f"{a} == {b}" for a, b in fam.refuse_unequal)
        unsupported = ", ".join(k.removesuffix(".weight") for k in fam.refuse_keys)
        raise fail(
            ckpt.config_path or ckpt.weights_path,
            f"a {fam.name} input block without a projection" + (f" ({agree})" if agree else ""),
            f"{', '.join(refused)}" + (f" ({unsupported} is not supported)" if unsupported else ""),
        )
    table = read_detected_table(ckpt, det, None)
    dim = table.dim
    word_key = next((resolve_relative(prefix, w) for w in fam.word_keys if resolve_relative(prefix, w) in keys), None)
    if word_key is None:
        wanted = resolve_relative(prefix, fam.word_keys[0])
        raise fail(
            ckpt.weights_path,
            f"the word embeddings {wanted!r}",
            f"no such key; nearest keys: {nearest_keys(wanted, keys) or 'none'}",
        )
    word = read_float(ckpt.reader, word_key, ndim=2, what="word embeddings", dim=dim)
    token_type = None
    if fam.token_type_key is not None:
        tt_key = prefix + fam.token_type_key
        if tt_key not in keys:
            raise fail(
                ckpt.weights_path,
                f"the token type embeddings {tt_key!r}",
                f"no such key; nearest keys: {nearest_keys(tt_key, keys) or 'none'}",
            )
        token_type = read_float(ckpt.reader, tt_key, ndim=2, what="token type embeddings", dim=dim)
    scale, bias = _layer_norm(ckpt, fam, prefix, dim)
    eps = fam.layer_norm_eps
    where = ckpt.config_path or ckpt.weights_path
    if fam.layer_norm_eps_field is not None and cfg.get(fam.layer_norm_eps_field) is not None:
        eps = cfg[fam.layer_norm_eps_field]
        if isinstance(eps, bool) or not isinstance(eps, (int, float)) or not 0 <= eps < 1:
            raise fail(where, f"{fam.layer_norm_eps_field} as a number in [0, 1)", repr(eps)[:80])
        eps = float(eps)
    embed_scale = 1.0
    if fam.embed_scale_flag is not None and cfg.get(fam.embed_scale_flag):
        width = (cfg.get(fam.embed_scale_dim_field) if fam.embed_scale_dim_field else None) or dim
        if not _is_int(width) or width < 1:
            raise fail(where, f"{fam.embed_scale_dim_field} as a positive integer", repr(width)[:80])
        embed_scale = math.sqrt(float(width))
    return InputBlockWeights(
        position=table,
        word_embeddings=word,
        token_type_embeddings=token_type,
        layer_norm_scale=scale,
        layer_norm_bias=bias,
        layer_norm_eps=eps,
        embed_scale=embed_scale,
        positions_from=fam.positions_from,
        pad_token_id=pad_token_id(fam, cfg, ckpt.config_path or ckpt.weights_path),
    )
