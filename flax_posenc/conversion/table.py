"""What a converter returns: plain numpy records, independent of any framework."""

from __future__ import annotations

import dataclasses
import warnings
from typing import Any

import numpy as np


@dataclasses.dataclass(frozen=True)
class PositionTable:
    """A position table as stored in a checkpoint.

    Attributes:
      weights: ``(rows, dim)`` array, the whole stored table, reserved rows included.
      family: model family name (``"gpt2"``, ``"bert"``, ``"roberta"``, ... or ``"sinusoidal"``).
      key: the tensor's name in the checkpoint (``"wpe.weight"``, ...).
      offset: reserved leading rows (0 for GPT-2/BERT, 2 for RoBERTa/OPT/BART).
      source: where it came from (a path, hub id or ``sinusoidal:L:D``), for messages.
      config: the model's ``config.json`` as a dict (empty when there is none).

    ``num_positions`` is the usable context: ``rows - offset`` (1024 for GPT-2, 512 for BERT and
    RoBERTa, whose table has 514 rows). Position ``p`` (0-based) lives in row ``offset + p``.
    (``max_length``: its deprecated former name, with a ``DeprecationWarning``.)
    """

    weights: np.ndarray
    family: str
    key: str
    offset: int = 0
    source: str = ""
    config: dict[str, Any] = dataclasses.field(default_factory=dict, repr=False)

    @property
    def rows(self) -> int:
        return int(self.weights.shape[0])

    @property
    def dim(self) -> int:
        return int(self.weights.shape[1])

    @property
    def dtype(self) -> np.dtype:
        return self.weights.dtype

    @property
    def num_positions(self) -> int:
        """Usable positions: ``rows - offset`` (the limit, the library's one name for it)."""
        return self.rows - self.offset

    @property
    def max_length(self) -> int:
        """Deprecated: :attr:`num_positions` (the same number)."""
        warnings.warn("PositionTable.max_length: deprecated, use num_positions", DeprecationWarning, stacklevel=2)
        return self.num_positions

    def __repr__(self) -> str:
        return (
            f"PositionTable(family={self.family!r}, key={self.key!r}, rows={self.rows}, "
            f"dim={self.dim}, offset={self.offset}, num_positions={self.num_positions}, "
            f"dtype={self.dtype}, source={self.source!r})"
        )


@dataclasses.dataclass(frozen=True)
class InputBlockWeights:
    """Every weight of a family's input (embedding) block, and how it counts positions.

    Enough to rebuild the Hugging Face embedding output exactly:
    ``out = layer_norm(embed_scale * word[ids] + position.weights[rows] + token_type[types])``
    where ``rows`` follow ``positions_from``:

    - ``"index"``: row ``offset + start + i`` for the i-th token (GPT-2, BERT, BART, ...).
    - ``"non_padding_ids"``: RoBERTa/MPNet: tokens equal to ``pad_token_id`` get row
      ``offset - 1``; the others row ``offset + (count of non-pad tokens before them)``.
    - ``"attention_mask"``: OPT: the same rule, with the mask taken from ``attention_mask``.

    Attributes:
      position: the position table (see :class:`PositionTable`).
      word_embeddings: ``(vocab, dim)``.
      token_type_embeddings: ``(type_vocab, dim)`` or ``None`` (GPT-2, OPT, DistilBERT, ...).
      layer_norm_scale, layer_norm_bias: ``(dim,)`` or ``None`` when the block has no LayerNorm.
      layer_norm_eps: LayerNorm epsilon from the config.
      embed_scale: multiplies the word embeddings (``sqrt(d_model)`` for BART-like configs with
        ``scale_embedding``; else 1.0).
      positions_from: ``"index"``, ``"non_padding_ids"`` or ``"attention_mask"``.
      pad_token_id: the padding id (needed for ``"non_padding_ids"``), or ``None``.
    """

    position: PositionTable
    word_embeddings: np.ndarray
    token_type_embeddings: np.ndarray | None = None
    layer_norm_scale: np.ndarray | None = None
    layer_norm_bias: np.ndarray | None = None
    layer_norm_eps: float = 1e-12
    embed_scale: float = 1.0
    positions_from: str = "index"
    pad_token_id: int | None = None

    @property
    def family(self) -> str:
        return self.position.family


class TableBacked:
    """``source``, ``family`` and ``key`` of a record read from its ``table`` (a
    :class:`PositionTable`, a grid table, ...): shared by the learned, audio and grid records."""

    table: Any

    @property
    def source(self) -> str:
        return self.table.source

    @property
    def family(self) -> str:
        return self.table.family

    @property
    def key(self) -> str:
        return self.table.key
