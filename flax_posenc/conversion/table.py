"""What a converter returns: plain numpy records, independent of any framework."""

from __future__ import annotations

import dataclasses
import warnings
from typing import Any, ClassVar

import numpy as np

from flax_posenc.limits import verdict_line


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
    :class:`PositionTable`, a grid table, ...): shared by the learned, audio and grid records (:class:`GridBacked`)."""

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


class GridBacked(TableBacked):
    """What the records of a learned grid of patch positions (``grid``, ``naflex_grid``) share.

    A grid limits the *image*, not a token count: ``limit`` is ``None`` (a text tower's token
    limit stays the record's), ``check_length`` always fits and says to ask about the image size,
    and ``check_image_size`` (a subclass's own) is the question to ask. A subclass names its
    ``scheme``, its ``grid_name`` (``"position grid"``), what it ``limits`` and the fields of its
    report between ``grid`` and ``dim`` (:meth:`grid_fields`); its ``table`` has ``model_type``,
    ``grid``, ``dim``, ``rows`` and ``describe()``.
    """

    scheme: ClassVar[str]
    grid_name: ClassVar[str]
    limits: ClassVar[str]

    @property
    def model_type(self) -> str:
        return self.table.model_type

    @property
    def limit(self) -> None:
        return None

    @property
    def name(self) -> str:
        name = f"{self.table.family} {self.grid_name} ({self.table.key})"
        return f"{name} of {self.table.source}" if self.table.source else name

    def describe_limit(self) -> str:
        """``"vit position grid (...) of SOURCE holds a 14 x 14 grid of patches + 1 class token (197 positions; 224 px / 16)"``."""
        return f"{self.name} holds {self.table.describe()}"

    def check_length(self, length: int) -> tuple[bool, str]:
        """A token count is not what a grid limits: always fits, and the line says to ask about the image size."""
        return True, f"{self.describe_limit()}; it limits {self.limits}, not a token count (check --image-size)"

    def grid_fields(self) -> dict[str, Any]:
        """The report's own fields of this kind of grid (between ``grid`` and ``dim``)."""
        raise NotImplementedError

    def to_dict(self) -> dict[str, Any]:
        t = self.table
        head = {"source": t.source, "family": t.family, "key": t.key, "scheme": self.scheme}
        return {
            **head,
            "model_type": t.model_type,
            "grid": list(t.grid),
            **self.grid_fields(),
            "dim": t.dim,
            "rows": t.rows,
            "limit": self.limit,
            "sentence": t.describe(),
        }

    def __str__(self) -> str:
        t = self.table
        return "\n".join(
            [
                f"source:      {t.source}",
                f"family:      {t.family} (model_type {t.model_type})",
                f"key:         {t.key}",
                f"scheme:      {self.scheme}",
                f"positions:   {t.describe()}",
                f"rows:        {t.rows} x {t.dim}",
                f"limit:       {self.describe_limit()}",
            ]
        )


class TensorRecord:
    """What the records of a mechanism read from named tensors share (``xl_relative``,
    ``clipped_relative``, ``bbox_sinusoid``, ``layout_relative_bias``, ``conv_position``).

    Fields ``source``, ``model_type``, ``family`` and ``key`` (the first tensor read); ``limit``:
    ``None`` (relative: nothing refuses a length) unless a record has a limit of its own.
    ``check_length`` says it with :func:`~flax_posenc.limits.verdict_line`; the report
    (:meth:`to_dict`) starts with what every record says and goes on with :meth:`details`; the
    text report (``str``) frames :meth:`lines` between the source and family lines and the limit.
    A subclass names its ``scheme`` and writes ``describe_limit``, ``details`` and ``lines``.
    """

    source: str
    model_type: str
    family: str
    key: str
    scheme: ClassVar[str]
    limit: int | None = None

    def describe_limit(self) -> str:
        raise NotImplementedError

    def check_length(self, length: int) -> tuple[bool, str]:
        return verdict_line(length, self.limit, self.describe_limit())

    def details(self) -> dict[str, Any]:
        """The report's own fields of this kind (after ``limit``)."""
        raise NotImplementedError

    def lines(self) -> list[str]:
        """The text report's own lines (between ``family`` and ``limit``: its ``key`` and ``scheme``, ...)."""
        raise NotImplementedError

    def to_dict(self) -> dict[str, Any]:
        head = {"source": self.source, "model_type": self.model_type, "family": self.family, "key": self.key}
        return {**head, "scheme": self.scheme, "limit": self.limit, **self.details()}

    def __str__(self) -> str:
        frame = [f"source:      {self.source}", f"family:      {self.family}"]
        return "\n".join([*frame, *self.lines(), f"limit:       {self.describe_limit()}"])
