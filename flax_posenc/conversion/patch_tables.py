"""Position tables over the patches of a time series (PatchTST), numpy only.

PatchTST cuts the last ``context_length`` time steps of each channel into ``num_patches =
(max(context_length, patch_length) - patch_length) // patch_stride + 1`` patches and adds a table
of ``num_patches`` rows (one more, row 0, for the class token with ``use_cls_token``) *whole*: the
table is stored (``encoder.positional_encoder.position_enc``, learned with
``positional_encoding_type = "random"``, normalised fixed sinusoids with ``"sincos"``), and the
model refuses any other input length. Its limit is therefore exact: ``context_length`` time steps.

A row here is a ``learned`` table whose record (:class:`PatchTableSource`) counts time steps
(``unit = "time steps"``): the token checks leave it out, ``check_steps(n)`` asks it (and
``flax-posenc check --steps N``).

>>> PATCH_TABLE_FAMILIES["patchtst"].position_key
'encoder.positional_encoder.position_enc'
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from flax_posenc.conversion.readers import fail, read_float
from flax_posenc.conversion.sources import open_checkpoint
from flax_posenc.conversion.table import PositionTable, TableBacked
from flax_posenc.limits import verdict_line

__all__ = ["PATCH_TABLE_FAMILIES", "PatchTableFamily", "PatchTableSource", "read_patch_table"]


@dataclasses.dataclass(frozen=True)
class PatchTableFamily:
    """One time series model's patch position table (a row of :data:`PATCH_TABLE_FAMILIES`).

    Attributes:
      name, model_types: as every registry row.
      position_key: the tensor (a suffix, under any prefix).
    """

    name: str
    model_types: tuple[str, ...]
    position_key: str = "encoder.positional_encoder.position_enc"

    @property
    def key_suffix(self) -> str:
        return self.position_key


PATCH_TABLE_FAMILIES: Mapping[str, PatchTableFamily] = MappingProxyType(
    {row.name: row for row in (PatchTableFamily("patchtst", ("patchtst",)),)}
)


@dataclasses.dataclass(frozen=True)
class PatchTableSource(TableBacked):
    """A patch position table: a :class:`~flax_posenc.conversion.SourceRecord` whose limit is the
    exact number of time steps the model takes (``context_length``).

    Attributes:
      table: the stored table (``offset`` 1 with a class token row).
      model_type: the ``config.json`` ``model_type``.
      context_length, patch_length, patch_stride: the config's.
      num_patches: patches the table holds (rows less the class token's).
    """

    table: PositionTable
    model_type: str
    context_length: int
    patch_length: int
    patch_stride: int
    num_patches: int

    scheme = "learned"
    unit = "time steps"

    @property
    def limit(self) -> int:
        """Time steps the model takes: exactly ``context_length`` (the table is added whole)."""
        return self.context_length

    def describe_limit(self) -> str:
        return (
            f"{self.model_type} patch position table ({self.key}) of {self.source} holds {self.num_patches} patches: "
            f"exactly context_length {self.context_length} time steps (patch_length {self.patch_length}, "
            f"patch_stride {self.patch_stride})"
        )

    def check_length(self, length: int) -> tuple[bool, str]:
        """Tokens: none (its positions are patches of time steps)."""
        return verdict_line(length, None, f"{self.model_type} patch positions count time steps, not tokens")

    def check_steps(self, steps: int) -> tuple[bool, str]:
        """``(fits, line)`` for a series of ``steps`` time steps: it fits only at ``context_length``."""
        if steps == self.context_length:
            return True, f"ok: {steps} time steps fit; {self.describe_limit()}"
        return False, f"{self.describe_limit()}; asked for {steps} time steps (the table is added whole)"

    def to_dict(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "model_type": self.model_type,
            "scheme": self.scheme,
            "key": self.key,
            "rows": self.table.rows,
            "dim": self.table.dim,
            "offset": self.table.offset,
            "num_patches": self.num_patches,
            "context_length": self.context_length,
            "patch_length": self.patch_length,
            "patch_stride": self.patch_stride,
            "unit": self.unit,
            "limit": self.limit,
        }

    def __str__(self) -> str:
        return (
            f"source:      {self.source}\n"
            f"scheme:      learned patch positions {self.table.rows} x {self.table.dim} ({self.key})\n"
            f"limit:       {self.describe_limit()}"
        )


def _positive(config: Mapping[str, Any], field: str, where: object) -> int:
    value = config.get(field)
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 1 << 24:
        raise fail(where, f"{field} as a positive integer", repr(value)[:80])
    return value


def read_patch_table(source: str | os.PathLike, family: str, config: Mapping[str, Any]) -> PatchTableSource:
    """The :data:`PATCH_TABLE_FAMILIES` ``family`` table of SOURCE (only that tensor is read).

    Raises:
      CheckpointError: the config's lengths missing or not positive, the table missing or found
        twice, not a finite 2-D float table, or its rows not the patches the config gives (plus
        the class token's with ``use_cls_token``) (one line naming the file).
    """
    row = PATCH_TABLE_FAMILIES[family]
    ckpt = open_checkpoint(source)
    where = ckpt.config_path or ckpt.weights_path
    context, length, stride = (_positive(config, f, where) for f in ("context_length", "patch_length", "patch_stride"))
    patches = (max(context, length) - length) // stride + 1
    cls = config.get("use_cls_token", False)
    if not isinstance(cls, bool):
        raise fail(where, "use_cls_token as true or false", repr(cls)[:80])
    keys = sorted(k for k in ckpt.reader.keys() if k == row.position_key or k.endswith("." + row.position_key))
    if len(keys) != 1:
        raise fail(
            ckpt.weights_path, f"one {row.name} patch position table *{row.position_key}", ", ".join(keys[:4]) or "none"
        )
    weights = read_float(ckpt.reader, keys[0], ndim=2, what=f"{row.name} patch position table")
    if weights.shape[0] != patches + cls:
        expected = (
            f"{patches + cls} rows ({patches} patches of context_length {context}{' + a class token' if cls else ''})"
        )
        raise fail(f"{ckpt.reader.file_of(keys[0])}:{keys[0]}", expected, f"{weights.shape[0]} rows")
    table = PositionTable(
        weights, family=row.name, key=keys[0], offset=int(cls), source=os.fspath(source), config=dict(config)
    )
    return PatchTableSource(table, str(config.get("model_type")), context, length, stride, patches)
