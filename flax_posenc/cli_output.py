"""What the ``flax-posenc`` command and its ``tour`` print besides their reports.

The program name (:data:`PROG`), the one-line usage error (:class:`UsageError`, exit 2), the
progress bar (:class:`Progress`, tqdm on stderr, only for a person at a terminal) and the
figures of a SOURCE record written with their notes (:func:`make_figures`). Both
:mod:`flax_posenc.cli` and :mod:`flax_posenc.tour` import them from here, so neither imports
the other back (plots, and matplotlib with it, are imported only when figures are drawn).

>>> Progress(3, enabled=False).run("a step", lambda: 42)
42
"""

from __future__ import annotations

import sys
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

__all__ = ["PROG", "Progress", "UsageError", "make_figures", "one_line"]

PROG = "flax-posenc"


class UsageError(Exception):
    """Bad input on the command line: one line, exit 2. ``prog`` names the (sub)command."""

    def __init__(self, message: str, prog: str | None = None):
        super().__init__(message)
        self.prog = prog


def one_line(exc: BaseException) -> str:
    """An exception's message on one line (its type name when it has none)."""
    text = " ".join(str(exc).split())
    return text or type(exc).__name__


class Progress:
    """A tqdm bar over ``total`` labelled steps on stderr, or nothing when disabled."""

    def __init__(self, total: int, enabled: bool):
        self.bar = None
        if enabled:
            from tqdm import tqdm

            self.bar = tqdm(total=total, file=sys.stderr, leave=False, unit="step")

    def run(self, label: str, fn: Callable[[], Any]) -> Any:
        if self.bar is not None:
            self.bar.set_description(label)
        result = fn()
        if self.bar is not None:
            self.bar.update()
        return result

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def make_figures(record, out: Path, *, dims: Sequence[int] | None, prefix: str, progress: bool) -> list[Path]:
    """Every figure of a :class:`~flax_posenc.conversion.SourceRecord` into ``out``; downsampling notes to stderr.

    A bad ``--dims`` or a table without usable rows is a :class:`UsageError` (exit 2).
    """
    from flax_posenc import plots

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
