"""What the ``flax-posenc`` command and its ``tour`` print besides their reports.

The program name (:data:`PROG`), the one-line usage error (:class:`UsageError`, exit 2) and the
figures of a SOURCE record written with their notes (:func:`make_figures`). Both
:mod:`flax_posenc.report.cli` and :mod:`flax_posenc.report.tour` import them from here, so neither imports
the other back (plots, and matplotlib with it, are imported only when figures are drawn).

>>> one_line(ValueError("two   words"))
'two words'
"""

from __future__ import annotations

import sys
import warnings
from collections.abc import Sequence
from pathlib import Path

from flax_posenc import errors
from flax_posenc.progress import Progress
from flax_posenc.report import plots

__all__ = ["PROG", "UsageError", "make_figures", "one_line"]

PROG = "flax-posenc"


class UsageError(Exception):
    """Bad input on the command line: one line, exit 2. ``prog`` names the (sub)command."""

    def __init__(self, message: str, prog: str | None = None):
        super().__init__(message)
        self.prog = prog


def one_line(exc: BaseException) -> str:
    """An exception's message on one line (its type name when it has none)."""
    text = errors.one_line(str(exc))  # control characters escaped, length capped
    return text or type(exc).__name__


def make_figures(record, out: Path, *, dims: Sequence[int] | None, prefix: str, progress: bool) -> list[Path]:
    """Every figure of a :class:`~flax_posenc.conversion.SourceRecord` into ``out``; downsampling notes to stderr.

    A bad ``--dims`` or a table without usable rows is a :class:`UsageError` (exit 2).
    """
    try:
        jobs = plots.figure_jobs(record, out, dims=dims, prefix=prefix)
    except ValueError as exc:
        raise UsageError(one_line(exc)) from None
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", plots.DownsampledWarning)
        bar = Progress(len(jobs), progress)
        paths = [path for label, draw in jobs for path in bar.run(label.replace("_", " "), draw)]
        bar.close()
    for w in caught:
        if issubclass(w.category, plots.DownsampledWarning):
            print(f"{PROG}: note: {one_line(w.message)}", file=sys.stderr)  # type: ignore[arg-type]
    return paths
