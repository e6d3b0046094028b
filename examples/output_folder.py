"""Where an example writes: an output folder by default, ``docs/`` only when asked with ``--docs``.

Every example that writes files takes ``--out DIR`` and ``--docs`` through :func:`add_arguments`
and asks :func:`resolve` where to write. The committed pages and figures in ``docs/`` are
rewritten only by an explicit ``--docs`` (and never by a ``--quick`` run, whose numbers are
meaningless); without it the files go to ``--out``, by default ``out/<example>/`` (ignored by
git), and the script says where. ``--out`` inside ``docs/`` is refused: ``--docs`` is the one way in.
"""

from __future__ import annotations

import argparse
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"


def add_arguments(parser: argparse.ArgumentParser, *, what: str) -> None:
    """``--out DIR`` and ``--docs`` (``what``: the files written, for the help text)."""
    parser.add_argument(
        "--out", type=Path, default=None, help=f"directory for {what} (default: out/<example>/, ignored by git)"
    )
    parser.add_argument(
        "--docs",
        action="store_true",
        help=f"write {what} into docs/ (regenerates the committed pages; not with --quick)",
    )


def resolve(parser: argparse.ArgumentParser, args: argparse.Namespace, name: str, *, docs: Path = DOCS) -> Path:
    """The folder to write into (``docs`` with ``--docs``), created; prints where it is.

    Exits through ``parser.error`` (one line, exit 2) for ``--docs`` with ``--out`` or ``--quick``,
    and for an ``--out`` inside ``docs/`` without ``--docs``.
    """
    if args.docs:
        if args.out is not None:
            parser.error("--docs and --out: expected one of them, found both")
        if getattr(args, "quick", False):
            parser.error("--docs: expected a full run (a --quick run's numbers are meaningless), found --quick")
        out = docs
    elif args.out is None:
        out = ROOT / "out" / name
    else:
        out = args.out
        if out.resolve() == DOCS or DOCS in out.resolve().parents:
            parser.error(f"--out: expected a folder outside docs/ (pass --docs to regenerate docs/), found {out}")
    out.mkdir(parents=True, exist_ok=True)
    print(f"writing into {out}" + ("" if args.docs else " (pass --docs to regenerate docs/)"), flush=True)
    return out
