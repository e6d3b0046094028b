"""THE progress display: one tqdm bar on stderr for a person at a terminal, nothing otherwise.

Long work shows its steps through :class:`Progress`: the command line's ``convert``, ``extend``,
``inspect``, ``plot`` and ``tour``, and the studies' training loops (``examples/extrapolation.py``,
``examples/extrapolation_text.py``, ``examples/finetune_extended.py``). Whether a bar appears is
decided in one place, :func:`progress_enabled`: only when stderr is a terminal and no JSON output
was asked for (``--json``). Piped, redirected or JSON output is never mixed with a bar, and a
disabled :class:`Progress` writes nothing at all.

No jax or numpy import; tqdm is imported only when a bar is shown.

>>> with Progress(3, enabled=False) as bar:   # not a terminal: silent, the work still runs
...     bar.run("loading", lambda: 2 + 2)
4
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")


def progress_enabled(*, json: bool = False, stream: Any = None) -> bool:
    """Whether to show a bar: ``stream`` (default ``sys.stderr``) is a terminal and ``json`` is false.

    >>> import io
    >>> progress_enabled(stream=io.StringIO())
    False
    """
    if json:
        return False
    stream = sys.stderr if stream is None else stream
    isatty = getattr(stream, "isatty", None)
    try:
        return bool(isatty is not None and isatty())
    except (OSError, ValueError):  # a closed or detached stream
        return False


class Progress:
    """A tqdm bar over ``total`` steps on stderr, or nothing when not ``enabled``.

    Args:
      total: the number of steps (``run`` calls or ``update`` increments).
      enabled: ``None`` (default): :func:`progress_enabled`; pass ``progress_enabled(json=...)``
        where the caller has a ``--json`` switch.
      desc: a label shown before the bar.
      unit: what a step is (``"step"``).

    Use as a context manager (the bar is removed on exit) or call :meth:`close`.
    """

    def __init__(self, total: int, enabled: bool | None = None, *, desc: str = "", unit: str = "step"):
        self.bar = None
        if enabled is None:
            enabled = progress_enabled()
        if enabled:
            from tqdm import tqdm

            self.bar = tqdm(total=total, desc=desc or None, file=sys.stderr, leave=False, unit=unit)

    def run(self, label: str, fn: Callable[[], T]) -> T:
        """``fn()``, shown as the step ``label``; the bar advances when it returns."""
        if self.bar is not None:
            self.bar.set_description(label)
        result = fn()
        if self.bar is not None:
            self.bar.update()
        return result

    def update(self, n: int = 1, **postfix: Any) -> None:
        """Advance by ``n`` steps; ``postfix`` (``loss=...``) is shown after the bar (``update(0, loss=...)``: only that)."""
        if self.bar is not None:
            if postfix:
                self.bar.set_postfix(postfix, refresh=False)
            self.bar.update(n)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


__all__ = ["Progress", "progress_enabled"]
