"""A learned (or sinusoidal) absolute position table as a SOURCE record: :class:`LearnedTableSource`.

Below both the model registry (:mod:`flax_posenc.conversion.models`, which reads tables into it)
and the dispatcher (:mod:`flax_posenc.conversion.source_record`, which re-exports it). numpy only;
its report is the table's properties (:mod:`flax_posenc.table_properties`, a floor below).
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

from flax_posenc.conversion.table import PositionTable, TableBacked
from flax_posenc.limits import describe_limit, length_verdict
from flax_posenc.table_properties import TableReport, summarize

__all__ = ["LearnedTableSource"]


@dataclasses.dataclass(frozen=True)
class LearnedTableSource(TableBacked):
    """A learned (or sinusoidal) absolute position table as a :class:`SourceRecord`.

    ``limit`` is ``rows - offset``; the sentences come from :mod:`flax_posenc.limits`, the same
    words as the on-device guard. The report (:func:`flax_posenc.table_properties.summarize`) is computed
    on first use and cached.
    """

    table: PositionTable

    @property
    def scheme(self) -> str:
        return "sinusoidal" if self.table.family == "sinusoidal" else "learned"

    @property
    def limit(self) -> int:
        return self.table.num_positions

    @property
    def name(self) -> str:
        """``"bert position table (embeddings.position_embeddings.weight) of SOURCE"``."""
        name = f"{self.table.family} position table ({self.table.key})"
        return f"{name} of {self.table.source}" if self.table.source else name

    def describe_limit(self) -> str:
        return describe_limit(self.name, self.table.rows, self.table.offset)

    def check_length(self, length: int) -> tuple[bool, str]:
        """Whether ``length`` positions (0..length-1) fit, and one line saying so.

        >>> import numpy as np
        >>> t = PositionTable(np.zeros((512, 4)), family="bert", key="pos", source="demo")
        >>> LearnedTableSource(t).check_length(513)[1]
        'bert position table (pos) of demo holds 512 positions (0..511); asked for 513 positions (0..512): 1 past the limit'
        """
        return length_verdict(length, rows=self.table.rows, offset=self.table.offset, name=self.name)

    @functools.cached_property
    def report(self) -> TableReport:
        """The table's :class:`~flax_posenc.table_properties.TableReport` (norms, similarity, uniqueness, spectrum)."""
        return summarize(self.table)

    def to_dict(self) -> dict[str, Any]:
        return {**self.report.to_dict(), "scheme": self.scheme, "limit": self.limit}

    def __str__(self) -> str:
        return str(self.report)
